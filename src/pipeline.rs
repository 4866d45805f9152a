//! The stages of clif-merge, in order, in one place.
//!
//! ```text
//! analyse   Module ──merge-similar (optional), then the merge plan──▶ Module', MergePlan
//! compile   MergePlan ──cranelift-codegen, in parallel──▶ Compiled (bytes, relocations,
//!           and everything CompiledCode says: unwind, traps, call sites, stack maps)
//! fold      Compiled ──same bytes and relocations, calls told from addresses by the ISA──▶
//!           the final MergePlan
//! define    final plan ──into the sink's cranelift Module──▶ bodies, thunks, aliases, frames
//! finish    the sink: object bytes, a finalized JIT, or the plugin's `Merged`
//! ```
//!
//! Data goes one way: analysis never sees compiled code except through the
//! [`crate::merge::similar::CodeFacts`] it asks its questions of, and each later stage
//! reads what the earlier ones produced. [`run`] runs them all; [`emit`] runs the stages
//! after analysis for a plan made elsewhere. The command line, [`emit_object`],
//! [`emit_jit`] and the plugin ([`crate::plugin`], [`crate::MergingModule`]) call them with
//! their own [`Sink`], which is all they do differently.

use std::time::Instant;

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_module::Module as _;

use crate::emit::compile::{compile_bodies, Compiled};
use crate::emit::define::define_all;
use crate::emit::fold::fold_machine_code;
use crate::emit::jit::{JitFunctions, JitSink};
use crate::emit::object::ObjectSink;
use crate::emit::sink::{Emitted, Sink};
use crate::emit::{EmitError, EmitOptions, EmitSummary};
use crate::merge::similar::{
    merge_similar_keeping_replaced, Replaced, SimilarOptions, SimilarReport,
};
use crate::merge::{merge_after_similar, MergeMode, MergeOptions, MergePlan, Module};
use crate::target::TargetInfo;

/// What to do at each stage.
#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    /// Identical merging: mode, address significance, cycles.
    pub merge: MergeOptions,
    /// Merge-similar, if wanted (it runs only when the merge mode is not `disabled`).
    pub similar: Option<SimilarOptions>,
    /// Compiling, folding and defining.
    pub emit: EmitOptions,
}

/// The analysis stage's result.
pub struct Analysis {
    /// The module as merged: after merge-similar, its shared bodies appended and the
    /// similar functions rewritten as thunks into them.
    pub module: Module,
    /// The merge plan of `module`, before machine-code folding.
    pub plan: MergePlan,
    /// What merge-similar did, when it ran.
    pub similar: Option<SimilarReport>,
    /// The bodies merge-similar replaced, as read (with `module`, the module as read). They
    /// are freed with the analysis, after the code is compiled, not during the analysis.
    pub replaced: Replaced,
    /// Seconds spent analysing.
    pub seconds: f64,
}

/// The stages after analysis: what the sink gave back, and what was compiled and defined.
pub struct Done<O> {
    /// The sink's output.
    pub output: O,
    /// Counts, sizes and timings; `summary.plan` is the final plan.
    pub summary: EmitSummary,
}

/// Run every stage on `module`, for `target`, into `sink`; the sink's module compiles.
/// Whether aliases share their body's address
/// ([`MergeOptions::aliases_share_address`]) is the sink's to say, whatever `options` say.
pub fn run<S: Sink>(
    module: Module,
    target: &TargetInfo,
    options: &PipelineOptions,
    mut sink: S,
) -> Result<(Analysis, Done<S::Output>), S::Error> {
    let mut options = options.clone();
    options.merge.aliases_share_address = sink.alias_style().shares_address();
    let options = &options;
    let analysis = analyse_into(module, target, options, &mut sink)?;
    let done = emit(
        &analysis.module,
        &analysis.plan,
        &options.merge,
        &options.emit,
        sink,
    )?;
    Ok((analysis, done))
}

/// The analysis stage alone, for a caller that compiles nothing (the command line without
/// `-o`). Merge-similar measures code size, so it needs `isa`; without one it is an error.
pub fn analyse(
    module: Module,
    target: &TargetInfo,
    isa: Option<&dyn cranelift_codegen::isa::TargetIsa>,
    options: &PipelineOptions,
) -> Result<Analysis, EmitError> {
    let start = Instant::now();
    let (module, similar, mut replaced) = match (similar_options(options), isa) {
        (None, _) => (module, None, Replaced::default()),
        (Some(similar), Some(isa)) => {
            let (module, report, replaced) =
                merge_similar_keeping_replaced(module, target, isa, &options.merge, similar);
            (module, Some(report), replaced)
        }
        (Some(_), None) => {
            return Err(EmitError::UnsupportedTarget {
                target: target.triple().to_string(),
                reason: "merge-similar measures code size, and Cranelift cannot compile for it"
                    .into(),
            })
        }
    };
    let plan = merge_after_similar(&module, target, &options.merge, &mut replaced);
    Ok(Analysis {
        module,
        plan,
        similar,
        replaced,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Merge-similar's options, when it runs.
fn similar_options(options: &PipelineOptions) -> Option<&SimilarOptions> {
    options
        .similar
        .as_ref()
        .filter(|_| options.merge.mode != MergeMode::Disabled)
}

/// [`analyse`] with the sink's ISA, on its pool, and its names for shared bodies.
fn analyse_into<S: Sink>(
    module: Module,
    target: &TargetInfo,
    options: &PipelineOptions,
    sink: &mut S,
) -> Result<Analysis, S::Error> {
    let start = Instant::now();
    let (module, similar, mut replaced) = match similar_options(options) {
        Some(similar) => {
            let isa = sink.module().isa();
            let (rewritten, report, replaced) = sink.on_pool(|| {
                merge_similar_keeping_replaced(module, target, isa, &options.merge, similar)
            });
            (
                sink.shared_bodies(rewritten, &report)?,
                Some(report),
                replaced,
            )
        }
        None => (module, None, Replaced::default()),
    };
    let plan = sink.on_pool(|| merge_after_similar(&module, target, &options.merge, &mut replaced));
    Ok(Analysis {
        module,
        plan,
        similar,
        replaced,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The stages after analysis: compile the bodies `plan` keeps, fold those that compiled to
/// the same machine code (unless `options.fold_machine_code` is off), define everything in
/// the sink's module, and let the sink finish. `merge_options` are those the plan was made
/// with: a plan that counted on aliases sharing their body's address cannot go into a sink
/// whose aliases are thunks (an error, before anything is compiled).
pub fn emit<S: Sink>(
    module: &Module,
    plan: &MergePlan,
    merge_options: &MergeOptions,
    options: &EmitOptions,
    mut sink: S,
) -> Result<Done<S::Output>, S::Error> {
    if merge_options.aliases_share_address && !sink.alias_style().shares_address() {
        return Err(EmitError::AliasesNotShared.into());
    }
    let isa = sink.module().isa();
    let (compiled, plan, fold_s) =
        sink.on_pool(|| compile_and_fold(module, plan, isa, merge_options, options))?;
    let start = Instant::now();
    let (style, naming) = (sink.alias_style(), sink.naming());
    let defined = define_all(
        sink.module_mut(),
        module,
        &plan,
        &compiled,
        options,
        style,
        naming,
    )?;
    let mut summary = EmitSummary {
        codegen_s: compiled.seconds,
        compiled_alike: compiled.alike,
        fold_s,
        plan: plan.clone(),
        ..defined.summary.clone()
    };
    let emitted = Emitted {
        module,
        plan,
        compiled,
        defined,
    };
    let output = sink.finish(emitted, &mut summary)?;
    summary.emit_s = start.elapsed().as_secs_f64();
    Ok(Done { output, summary })
}

/// Compile the bodies `plan` keeps and, unless `options.fold_machine_code` is off, extend
/// the plan with bodies that compiled to the same machine code. Bodies of different
/// signatures are folded only where thunks are single jumps (a CLIF thunk must have its
/// target's signature). Also returns the seconds folding took.
fn compile_and_fold(
    module: &Module,
    plan: &MergePlan,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    merge_options: &MergeOptions,
    options: &EmitOptions,
) -> Result<(Compiled, MergePlan, f64), EmitError> {
    let target =
        TargetInfo::new(isa.triple().clone()).map_err(|e| EmitError::UnsupportedTarget {
            target: isa.triple().to_string(),
            reason: e.to_string(),
        })?;
    let compiled = compile_bodies(module, plan, isa, merge_options.mode != MergeMode::Disabled)?;
    let start = Instant::now();
    let final_plan = if options.fold_machine_code {
        let same_signature_only = options.clif_thunks || target.jump_thunk_size().is_none();
        fold_machine_code(
            module,
            &target,
            merge_options,
            plan,
            &compiled,
            same_signature_only,
        )
    } else {
        plan.clone()
    };
    Ok((compiled, final_plan, start.elapsed().as_secs_f64()))
}

/// Compile `plan` and write the object: [`emit`] into an [`ObjectSink`]. The summary holds
/// the final plan.
pub fn emit_object(
    module: &Module,
    plan: &MergePlan,
    isa: OwnedTargetIsa,
    merge_options: &MergeOptions,
    options: &EmitOptions,
) -> Result<(Vec<u8>, EmitSummary), EmitError> {
    let sink = ObjectSink::new(isa, options)?;
    let done = emit(module, plan, merge_options, options, sink)?;
    Ok((done.output, done.summary))
}

/// Compile `plan` for the host into executable memory: [`emit`] into a [`JitSink`].
/// `symbols` resolves functions the module calls but does not define.
pub fn emit_jit(
    module: &Module,
    plan: &MergePlan,
    merge_options: &MergeOptions,
    options: &EmitOptions,
    symbols: impl IntoIterator<Item = (String, *const u8)>,
) -> Result<JitFunctions, EmitError> {
    let sink = JitSink::new(symbols)?;
    let done = emit(module, plan, merge_options, options, sink)?;
    Ok(done.output.with_summary(done.summary))
}
