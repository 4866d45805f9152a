//! Emission: the merged module compiled and written as an object file.
//!
//! - [`compile`]: compile the bodies a plan keeps, with names of our own;
//! - [`fold`]: machine-code folding: bodies with the same bytes and relocations;
//! - [`define`]: declare and define a plan in any `cranelift_module::Module`;
//! - [`object`]: an object file (aliases pointed after `finish()`);
//! - [`jit`]: a `JITModule`, every name callable;
//! - [`clif`]: the merged module as CLIF text (`--emit-clif`);
//! - [`reloc`]: which relocations are calls, per ISA;
//! - [`thunk`]: thunks per ISA (a single jump) and per calling convention (CLIF);
//! - [`unwind`]: unwind information of every defined body (`.eh_frame`, `.pdata`, JIT
//!   frame registration), so exceptions and panics cross merged code.

pub mod clif;
pub mod compile;
pub mod define;
pub mod fold;
pub mod jit;
pub mod object;
pub mod reloc;
pub mod thunk;
pub mod unwind;

pub use object::{build_isa, emit_object, text_bytes, EmitError, EmitOptions, EmitSummary};

/// Compile the bodies `plan` keeps and, unless `options.fold_machine_code` is off, extend
/// the plan with bodies that compiled to the same machine code. Returns the compiled
/// bodies and the final plan. Bodies of different signatures are folded only where thunks
/// are single jumps (a CLIF thunk must have its target's signature).
pub fn compile_and_fold(
    module: &crate::merge::Module,
    plan: &crate::merge::MergePlan,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    merge_options: &crate::merge::MergeOptions,
    options: &EmitOptions,
) -> Result<(compile::Compiled, crate::merge::MergePlan), EmitError> {
    let target = crate::target::TargetInfo::new(isa.triple().clone()).map_err(|e| {
        EmitError::UnsupportedTarget {
            target: isa.triple().to_string(),
            reason: e.to_string(),
        }
    })?;
    let compiled = compile::compile_bodies(module, plan, isa)?;
    let final_plan = if options.fold_machine_code {
        let same_signature_only = options.clif_thunks || target.jump_thunk_size().is_none();
        fold::fold_machine_code(
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
    Ok((compiled, final_plan))
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename, so
/// that an error never leaves a partial or stale file at `path`.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
