//! Defining a plan's functions in any `cranelift_module::Module` (object or JIT).
//!
//! Declarations come first, in a fixed order (group bodies by kept name, then every
//! function in module order, then imports in order of first reference), then definitions
//! in module order, so the result does not depend on how bodies were compiled.
//!
//! Relocations of compiled bodies are renamed from our symbol numbers to the module's
//! ids here, following the final plan: a call to a function whose calls are redirected
//! goes to its group's body, and any reference to an erased function does too.
//!
//! Everything is defined as bytes (`define_function_bytes`), CLIF thunks included: they are
//! compiled here rather than by `define_function`, so that the unwind information of every
//! body that has any (kept bodies, copies, CLIF thunks) is collected in one
//! [`super::unwind::Frames`] by defined id, for the object writer or the JIT to write or
//! register. Single-jump thunks and empty alias placeholders have none. What Cranelift
//! said of each body defined from its compiled code (traps, call sites, stack maps) is
//! kept by defined id too ([`Defined::code`]), for an embedder's trap tables and GC maps.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cranelift_codegen::ir;
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::CompiledCode;
use cranelift_module::{
    DataId, FuncId, Linkage as ModuleLinkage, Module as CraneliftModule, ModuleReloc,
    ModuleRelocTarget,
};

use super::compile::{
    compile_one, compiling_isa, Compiled, CompiledBody, DATA_NAMESPACE, FUNCTION_NAMESPACE,
};
use super::sizes::padded;
use super::thunk::{clif_thunk, jump_thunk, reaches_a_frame_reader};
use super::unwind::{FrameInfo, Frames};
use super::{EmitError, EmitOptions, EmitSummary};
use crate::merge::{Action, Body, FuncIndex, Linkage, MergePlan, Module};
use crate::names::FuncName;

/// How aliases are realised.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum AliasStyle {
    /// Defined empty, then pointed at the body's symbol after `finish()` (objects). Defined,
    /// so that cranelift-object's check for undefined functions is satisfied.
    PatchedSymbol,
    /// Not declared: the name resolves to the body's id (our own JIT module).
    BodyId,
    /// A thunk (a JIT module whose functions the caller declared: the id must be defined).
    Thunk,
}

impl AliasStyle {
    /// Whether an alias has its body's address
    /// ([`crate::merge::MergeOptions::aliases_share_address`]).
    pub fn shares_address(self) -> bool {
        match self {
            AliasStyle::PatchedSymbol | AliasStyle::BodyId => true,
            AliasStyle::Thunk => false,
        }
    }
}

/// Where the module's ids come from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// Declare every symbol by its name.
    Declare,
    /// The caller declared every function already: `u0:N` is `FuncId` N and `u1:N` is
    /// `DataId` N (what `Module::declare_func_in_func` and `declare_data_in_func` write).
    Existing,
}

/// What was defined.
pub struct Defined {
    /// For every module function name: the id whose code runs when it is called (its own
    /// symbol, or the body for aliases under [`AliasStyle::BodyId`] and erased names).
    pub ids: HashMap<FuncName, FuncId>,
    /// Aliases to point after `finish()`: (function, alias symbol id, body id).
    pub aliases: Vec<(FuncIndex, FuncId, FuncId)>,
    /// Unwind information of every defined body, by id ([`super::unwind`]).
    pub frames: Frames,
    /// What Cranelift said of the code defined under each id, for every id defined from
    /// compiled code: kept bodies, a group's shared local body, copies of small bodies,
    /// CLIF thunks. Not for thunks written as machine code or empty alias placeholders.
    pub code: BTreeMap<FuncId, Arc<CompiledCode>>,
    /// The id each group's body is defined under, by the group's kept function: its own
    /// id, or the anonymous or local id of the body it shares.
    pub group_bodies: HashMap<FuncIndex, FuncId>,
    /// Counts.
    pub summary: EmitSummary,
}

/// Declare and define everything `plan` asks for in `m`.
// Never inlined: a stage boundary that `bench/ratios_instructions.sh` counts at.
#[inline(never)]
pub fn define_all<M: CraneliftModule>(
    m: &mut M,
    module: &Module,
    plan: &MergePlan,
    compiled: &Compiled,
    options: &EmitOptions,
    style: AliasStyle,
    naming: Naming,
) -> Result<Defined, EmitError> {
    let arch = m.isa().triple().architecture;
    let frontend = m.isa().frontend_config();
    let tail_calls = crate::target::isa_thunks_tail_call(m.isa());
    // What CLIF thunks compile with, made once rather than for each thunk.
    let thunk_isa = compiling_isa(m.isa())?;
    let branch_protection = m.isa().is_branch_protection_enabled();

    // Declarations (or, with `Naming::Existing`, the caller's ids).
    let id_for = |m: &mut M, name: &FuncName, linkage: Linkage, sig: &ir::Signature| match naming {
        Naming::Declare => declare(m, &name.symbol(), linkage, sig),
        Naming::Existing => existing_id(name),
    };
    let mut body_id: HashMap<FuncIndex, FuncId> = HashMap::new();
    for group in plan.groups() {
        let k = module.get(group.kept);
        let id = match &group.body {
            Body::Kept => id_for(m, &k.name, k.linkage, &k.func.signature)?,
            // In the caller's module, anonymous: it adds no name to the caller's namespace,
            // where a name of ours could meet one the caller declared.
            Body::SharedLocal { symbol } => match naming {
                Naming::Declare => declare(m, symbol, Linkage::Local, &k.func.signature)?,
                Naming::Existing => m
                    .declare_anonymous_function(&k.func.signature)
                    .map_err(|e| module_error(format!("declaring {symbol}"), e))?,
            },
        };
        body_id.insert(group.kept, id);
    }
    let mut own_id: HashMap<FuncIndex, FuncId> = HashMap::new();
    let mut aliases = Vec::new();
    // A caller-declared function must be defined: an erased one becomes an alias (a local
    // alias costs nothing) or, in a JIT, a thunk.
    let action_of = |f: FuncIndex| match (plan.action(f), naming) {
        (Action::Erased, Naming::Existing) => Action::Alias,
        (action, _) => action,
    };
    for (f, mf) in module.iter() {
        let body = plan.group_of(f).map(|g| body_id[&g.kept]);
        let id = match (action_of(f), body) {
            (Action::Keep, Some(b)) => b,
            (Action::Erased, _) => continue,
            (Action::Alias, Some(b)) if style == AliasStyle::BodyId => b,
            (Action::Alias, Some(b)) if style == AliasStyle::PatchedSymbol => {
                let id = id_for(m, &mf.name, mf.linkage, &mf.func.signature)?;
                aliases.push((f, id, b));
                id
            }
            _ => id_for(m, &mf.name, mf.linkage, &mf.func.signature)?,
        };
        own_id.insert(f, id);
    }
    let mut import_id: HashMap<u32, FuncId> = HashMap::new();
    for (i, name) in compiled.symbols.function_names().iter().enumerate() {
        if module.lookup(name).is_none() {
            let sig = &compiled.symbols.signatures[name];
            import_id.insert(i as u32, id_for(m, name, Linkage::Import, sig)?);
        }
    }
    let mut data_id: Vec<DataId> = Vec::new();
    for (name, tls) in compiled.symbols.data_names() {
        let id = match (naming, name) {
            (
                Naming::Existing,
                FuncName::User {
                    namespace: 1,
                    index,
                },
            ) => DataId::from_u32(*index),
            (Naming::Existing, other) => {
                return Err(EmitError::Object(format!(
                    "{other} is not a data object the module declared (expected u1:N)"
                )))
            }
            (Naming::Declare, _) => m
                .declare_data(&name.symbol(), ModuleLinkage::Import, false, *tls)
                .map_err(|e| module_error(format!("declaring data {name}"), e))?,
        };
        data_id.push(id);
    }

    // What a symbol number resolves to.
    let group_body = |g: FuncIndex| plan.group_of(g).map(|grp| body_id[&grp.kept]);
    let resolve = |sym: u32, call: bool| -> Option<FuncId> {
        let name = compiled.symbols.function_name(sym);
        match module.lookup(name) {
            None => import_id.get(&sym).copied(),
            Some(g) => match plan.action(g) {
                Action::Erased => group_body(g),
                _ if call && plan.redirect(g).is_some() => group_body(g),
                _ => own_id.get(&g).copied(),
            },
        }
    };
    let rename = |body: &CompiledBody, own: FuncId| -> Result<Vec<ModuleReloc>, EmitError> {
        body.relocs_with_calls()
            .map(|(r, is_call)| {
                let name = match r.name.clone() {
                    ModuleRelocTarget::User { namespace, index }
                        if namespace == FUNCTION_NAMESPACE =>
                    {
                        let id = resolve(index, is_call).ok_or_else(|| {
                            EmitError::Object(format!(
                                "no symbol for {}",
                                compiled.symbols.function_name(index)
                            ))
                        })?;
                        ModuleRelocTarget::user(FUNCTION_NAMESPACE, id.as_u32())
                    }
                    ModuleRelocTarget::User { namespace, index } if namespace == DATA_NAMESPACE => {
                        ModuleRelocTarget::user(DATA_NAMESPACE, data_id[index as usize].as_u32())
                    }
                    ModuleRelocTarget::FunctionOffset(_, offset) => {
                        ModuleRelocTarget::FunctionOffset(own, offset)
                    }
                    other => other,
                };
                Ok(ModuleReloc { name, ..r.clone() })
            })
            .collect()
    };

    // What to define for each function, in module order.
    enum Job<'c> {
        Code(&'c CompiledBody),
        Copy(&'c CompiledBody),
        Jump(super::thunk::JumpThunk),
        Clif(FuncId),
        Empty,
    }
    let mut jobs: Vec<(FuncIndex, FuncId, Job)> = Vec::new();
    let mut summary = EmitSummary::default();
    for f in module.indices() {
        let group = plan.group_of(f);
        if let Some(g) = group.filter(|g| g.kept == f) {
            jobs.push((f, body_id[&f], Job::Code(&compiled.bodies[&f])));
            if matches!(g.body, Body::Kept) {
                continue;
            }
        }
        match action_of(f) {
            Action::Keep => jobs.push((f, own_id[&f], Job::Code(&compiled.bodies[&f]))),
            Action::Erased => {}
            Action::Alias if style == AliasStyle::BodyId => summary.aliases += 1,
            Action::Alias if style == AliasStyle::PatchedSymbol => {
                jobs.push((f, own_id[&f], Job::Empty));
                summary.aliases += 1;
            }
            Action::Alias | Action::Thunk => {
                let kept = group.expect("a thunk has a group").kept;
                let body = body_id[&kept];
                let code = &compiled.bodies[&kept];
                // A CLIF thunk calls and returns unless it can tail-call.
                let thunk_adds_frame =
                    !(tail_calls && module.get(f).func.signature.call_conv == CallConv::Tail);
                let job = match jump_thunk(arch, body, branch_protection)
                    .filter(|_| !options.clif_thunks)
                {
                    // The body is no larger than a jump: a copy costs nothing more.
                    Some(jump) if code.bytes.len() <= jump.bytes.len() => Job::Copy(code),
                    Some(jump) => Job::Jump(jump),
                    // A body that reads its frame, itself or behind merge-similar's thunk,
                    // must not see a thunk's frame: a copy of it.
                    None if thunk_adds_frame && reaches_a_frame_reader(module, kept) => {
                        Job::Copy(code)
                    }
                    None => Job::Clif(body),
                };
                jobs.push((f, own_id[&f], job));
            }
        }
    }
    // Most aligned first, so that padding is only needed between those: deterministic, and
    // the text is never larger than in module order.
    let alignment = |job: &Job| match job {
        Job::Code(c) | Job::Copy(c) => c.alignment,
        Job::Jump(j) => j.alignment,
        Job::Clif(_) => 16,
        Job::Empty => 0,
    };
    jobs.sort_by_key(|(_, _, job)| std::cmp::Reverse(alignment(job)));
    let mut frames = Frames::new(m.isa())?;
    let mut defined_code = BTreeMap::new();
    for (f, id, job) in jobs {
        let mf = module.get(f);
        let context = || format!("defining {}", mf.name);
        // A group's body in a new local symbol is not the kept name's own code.
        let own = own_id.get(&f) == Some(&id);
        match job {
            Job::Code(code) | Job::Copy(code) => {
                define_bytes(
                    m,
                    id,
                    code.alignment,
                    &code.bytes,
                    &rename(code, id)?,
                    context,
                )?;
                frames.add(id, code.bytes.len(), code.unwind.as_ref());
                if let Some(compiled) = &code.code {
                    defined_code.insert(id, compiled.clone());
                }
                if own {
                    summary.sizes.own[f] = padded(code.bytes.len(), code.alignment);
                }
                if matches!(job, Job::Copy(_)) {
                    summary.copied.push(f);
                } else {
                    summary.compiled += 1;
                }
            }
            Job::Jump(thunk) => {
                define_bytes(
                    m,
                    id,
                    thunk.alignment,
                    &thunk.bytes,
                    &[thunk.reloc],
                    context,
                )?;
                // The CIE's rules hold at its one instruction.
                let frame = FrameInfo::of_written_thunk(m.isa(), Vec::new());
                frames.add(id, thunk.bytes.len(), frame.as_ref());
                summary.sizes.own[f] = padded(thunk.bytes.len(), thunk.alignment);
                summary.thunks += 1;
            }
            Job::Empty => {
                define_bytes(m, id, 1, &[], &[], context)?;
            }
            Job::Clif(body) => {
                let func = clif_thunk(
                    &FuncName::User {
                        namespace: 0,
                        index: id.as_u32(),
                    },
                    &mf.func.signature,
                    &FuncName::User {
                        namespace: 0,
                        index: body.as_u32(),
                    },
                    frontend,
                    tail_calls,
                );
                // Compiled here rather than by `define_function`, so that its unwind
                // information is ours to write, like every other body's.
                // It names the module's ids already; only its own offsets are renamed.
                let isa = thunk_isa.as_deref().unwrap_or(m.isa());
                let thunk =
                    compile_one(isa, func, false).map_err(|message| EmitError::Codegen {
                        function: mf.name.to_string(),
                        message: format!("Cranelift failed on the thunk: {message}"),
                    })?;
                let relocs: Vec<ModuleReloc> = thunk
                    .relocs
                    .iter()
                    .map(|r| match r.name {
                        ModuleRelocTarget::FunctionOffset(_, offset) => ModuleReloc {
                            name: ModuleRelocTarget::FunctionOffset(id, offset),
                            ..r.clone()
                        },
                        _ => r.clone(),
                    })
                    .collect();
                define_bytes(m, id, thunk.alignment, &thunk.bytes, &relocs, context)?;
                frames.add(id, thunk.bytes.len(), thunk.unwind.as_ref());
                if let Some(compiled) = &thunk.code {
                    defined_code.insert(id, compiled.clone());
                }
                summary.sizes.own[f] = padded(thunk.bytes.len(), thunk.alignment);
                summary.thunks += 1;
            }
        }
    }
    for f in module.indices() {
        let body = &compiled.bodies[&plan.body_of(f)];
        summary.sizes.runs[f] = padded(body.bytes.len(), body.alignment);
    }
    summary.unmerged_code_bytes_estimate = module
        .indices()
        .map(|f| compiled.bodies[&plan.body_of(f)].bytes.len() as u64)
        .sum();
    let mut ids: HashMap<FuncName, FuncId> = own_id
        .iter()
        .map(|(&f, &id)| (module.get(f).name.clone(), id))
        .collect();
    for (f, mf) in module.iter() {
        if plan.action(f) == Action::Erased {
            ids.insert(
                mf.name.clone(),
                group_body(f).expect("erased functions have a group"),
            );
        }
    }
    Ok(Defined {
        ids,
        aliases,
        frames,
        code: defined_code,
        group_bodies: body_id,
        summary,
    })
}

/// The caller's id for a function named `u0:N`.
fn existing_id(name: &FuncName) -> Result<FuncId, EmitError> {
    match name {
        FuncName::User {
            namespace: 0,
            index,
        } => Ok(FuncId::from_u32(*index)),
        other => Err(EmitError::Object(format!(
            "{other} is not a function the module declared (expected u0:N)"
        ))),
    }
}

/// `m.define_function_bytes(..)`, with a panic of the module turned into an error that
/// names the function (`context`): cranelift-object panics, rather than returning an
/// error, on a relocation its object format cannot hold (aarch64's GOT and page
/// relocations in COFF, TLS relocations outside ELF and Mach-O).
fn define_bytes<M: CraneliftModule>(
    m: &mut M,
    id: FuncId,
    alignment: u64,
    bytes: &[u8],
    relocs: &[ModuleReloc],
    context: impl Fn() -> String,
) -> Result<(), EmitError> {
    let defined = crate::guard::unpanicked(|| {
        m.define_function_bytes(id, alignment, bytes, relocs)
            .map_err(Box::new)
    });
    match defined {
        Ok(result) => result.map_err(|e| module_error(context(), *e)),
        Err(panic) => {
            let isa = m.isa();
            // aarch64 code compiled with `is_pic` reaches other symbols through the GOT.
            let aarch64 = matches!(
                isa.triple().architecture,
                target_lexicon::Architecture::Aarch64(_)
            );
            let hint = match aarch64 && isa.flags().is_pic() {
                true => {
                    "; aarch64 code compiled with `is_pic` loads addresses through the GOT, \
                     which cranelift-object writes into ELF and Mach-O objects only: compile \
                     with `is_pic=false` (`--set is_pic=false` on the command line)"
                }
                false => "",
            };
            Err(EmitError::Object(format!(
                "{}: the object writer cannot write this code into a {} object ({panic}){hint}",
                context(),
                isa.triple().binary_format
            )))
        }
    }
}

fn module_error(context: String, e: cranelift_module::ModuleError) -> EmitError {
    EmitError::Module {
        context,
        source: Box::new(e),
    }
}

fn declare<M: CraneliftModule>(
    m: &mut M,
    name: &str,
    linkage: Linkage,
    signature: &ir::Signature,
) -> Result<FuncId, EmitError> {
    m.declare_function(name, linkage, signature)
        .map_err(|e| module_error(format!("declaring {name}"), e))
}
