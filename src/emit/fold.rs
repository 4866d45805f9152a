//! Machine-code folding: what the IR comparator keeps apart but the linker would fold.
//!
//! Some functions differ in their IR yet compile to the same machine code: a parameter
//! nobody reads (`(i64, i64)` and `(i64, i64, i32)` under the same convention), alias
//! regions that only steer optimization, callers of such functions. The comparator keeps
//! them apart, rightly at the IR level (LLVM's rule: when unsure, different). After
//! code generation the question is simpler and exact: two bodies whose bytes are the same
//! and whose relocations name the same symbols behave the same for every caller, which is
//! why linkers fold them (lld's `--icf=all`). This pass does the same, so that clif-merge
//! folds everything ICF would and then some (it also removes the callers' thunks and never
//! compiled the IR-level duplicates).
//!
//! Bodies are grouped by (alignment, bytes, relocations, and what Cranelift says of the
//! code that an embedder acts on: trap codes, exception handlers, stack maps; see
//! `metadata_key`), where a relocation that *calls* a module function that may be
//! redirected names only a placeholder; the groups are then
//! refined over the call graph exactly as the cycle phase does ([`crate::merge::refine`]),
//! comparing the bodies that those calls reach. Relocations that take an address (any whose
//! instruction is not a call or jump, whatever its kind: see [`super::reloc`]) name
//! their symbol exactly: an address is observable. Calls to
//! preemptible functions and imports name their symbol too.

use std::io::Write;

use cranelift_entity::SecondaryMap;
use cranelift_module::ModuleRelocTarget;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::compile::{Compiled, FUNCTION_NAMESPACE};
use crate::merge::refine::refine_partition;
use crate::merge::{policy, FuncIndex, Linkage, MergeMode, MergeOptions, Module};
use crate::merge::{FoundBy, MergePlan};
use crate::target::TargetInfo;

/// Groups of functions (each a whole IR group, listed by all its members) whose bodies
/// compile to the same code. Only groups that join more than one body are returned.
pub fn fold_compiled(
    module: &Module,
    plan: &MergePlan,
    compiled: &Compiled,
    same_signature_only: bool,
) -> Vec<(Vec<FuncIndex>, FoundBy)> {
    // The module function each function symbol names, looked up once.
    let named: Vec<Option<FuncIndex>> = compiled
        .symbols
        .function_names()
        .iter()
        .map(|name| module.lookup(name))
        .collect();
    let mut owners: Vec<FuncIndex> = compiled.bodies.keys().copied().collect();
    owners.sort_unstable();
    // Each body's key and the module functions its calls may be redirected to, in
    // parallel.
    let mut keyed: Vec<(Vec<u8>, Vec<FuncIndex>)> = owners
        .par_iter()
        .map(|&owner| body_key(module, plan, &named, compiled, owner, same_signature_only))
        .collect();
    // Bodies by their key, in order of their first (lowest) owner.
    let mut callees: SecondaryMap<FuncIndex, Vec<FuncIndex>> = SecondaryMap::new();
    let mut by_code: FxHashMap<&[u8], usize> =
        FxHashMap::with_capacity_and_hasher(owners.len(), Default::default());
    let mut groups: Vec<Vec<FuncIndex>> = Vec::new();
    for (&owner, (key, calls)) in owners.iter().zip(keyed.iter_mut()) {
        callees[owner] = std::mem::take(calls);
        let next = groups.len();
        let at = *by_code.entry(key.as_slice()).or_insert(next);
        if at == next {
            groups.push(Vec::new());
        }
        groups[at].push(owner);
    }
    groups.retain(|g| g.len() > 1);
    refine_partition(groups, |f| &callees[f][..], |f| plan.body_of(f))
        .into_iter()
        .map(|bodies| {
            let mut members: Vec<FuncIndex> = bodies
                .iter()
                .flat_map(|&b| match plan.group_of(b) {
                    Some(g) => std::iter::once(g.kept)
                        .chain(g.folded.iter().map(|&(f, _)| f))
                        .collect::<Vec<_>>(),
                    None => vec![b],
                })
                .collect();
            members.sort_unstable();
            (members, FoundBy::Code)
        })
        .collect()
}

/// The key `owner`'s compiled body is grouped by (its alignment, bytes and relocations,
/// with its signature when `same_signature_only`), and the module functions its calls may
/// be redirected to, in order: a call to one of them names only a placeholder in the key.
fn body_key(
    module: &Module,
    plan: &MergePlan,
    named: &[Option<FuncIndex>],
    compiled: &Compiled,
    owner: FuncIndex,
    same_signature_only: bool,
) -> (Vec<u8>, Vec<FuncIndex>) {
    let body = &compiled.bodies[&owner];
    let mut key: Vec<u8> = Vec::with_capacity(body.bytes.len() + 32 * body.relocs.len());
    let mut calls = Vec::new();
    if same_signature_only {
        write!(key, "{}\0", module.get(owner).func.signature).expect("into memory");
    }
    key.extend(body.alignment.to_le_bytes());
    key.extend((body.bytes.len() as u64).to_le_bytes());
    key.extend(&body.bytes);
    for (r, is_call) in body.relocs_with_calls() {
        key.extend(r.offset.to_le_bytes());
        key.extend(r.addend.to_le_bytes());
        key.extend((r.kind as u32).to_le_bytes());
        let function = match r.name {
            ModuleRelocTarget::User { namespace, index } if namespace == FUNCTION_NAMESPACE => {
                named[index as usize]
            }
            _ => None,
        };
        let callee = function.filter(|&g| is_call && module.get(g).linkage != Linkage::Preemptible);
        // The address of an erased function is its group's body's.
        let erased_into = function
            .filter(|&g| plan.action(g) == crate::merge::Action::Erased)
            .map(|g| plan.body_of(g));
        // What the relocation names, after a tag: each record is read one way.
        match (callee, erased_into, &r.name) {
            (Some(g), ..) => {
                key.push(0);
                calls.push(g);
            }
            (None, Some(body), _) => {
                key.push(1);
                key.extend(body.as_u32().to_le_bytes());
            }
            (None, None, &ModuleRelocTarget::User { namespace, index }) => {
                key.push(2);
                key.extend(namespace.to_le_bytes());
                key.extend(index.to_le_bytes());
            }
            (None, None, other) => {
                key.push(3);
                // (Writing into a `Vec` cannot fail.)
                write!(key, "{other:?}|").expect("into memory");
            }
        }
    }
    if let Some(code) = &body.code {
        metadata_key(&code.buffer, &mut key);
    }
    (key, calls)
}

/// What Cranelift says about a body besides its bytes that changes how the code behaves in
/// an embedder, which reads it through [`crate::plugin::Merged::compiled_code`] (for every
/// name of a group, its body's): the code of each trap, which a runtime reports; the
/// exception handlers of each call (the tags they catch, where they land), which decide
/// where an exception goes; the user stack maps, which tell a collector where its
/// references are; the patchable call sites. Two bodies with the same bytes but another
/// trap code or tag, or another stack map, are not the same function. Source locations
/// and debug tags only describe the code and are left out, as merging at the IR level
/// drops them too. Nothing is written for an empty list, so a body without any of these
/// keys as a thunk written as machine code does.
fn metadata_key(
    buffer: &cranelift_codegen::MachBufferFinalized<cranelift_codegen::Final>,
    key: &mut Vec<u8>,
) {
    use cranelift_codegen::FinalizedMachExceptionHandler as Handler;
    for trap in buffer.traps() {
        key.push(4);
        key.extend(trap.offset.to_le_bytes());
        key.push(trap.code.as_raw().get());
    }
    for site in buffer.call_sites() {
        if site.exception_handlers.is_empty() {
            continue;
        }
        key.push(5);
        key.extend(site.ret_addr.to_le_bytes());
        key.extend(site.frame_offset.map_or(u64::MAX, u64::from).to_le_bytes());
        for handler in site.exception_handlers {
            match handler {
                Handler::Tag(tag, at) => {
                    key.push(0);
                    key.extend(tag.as_u32().to_le_bytes());
                    key.extend(at.to_le_bytes());
                }
                Handler::Default(at) => {
                    key.push(1);
                    key.extend(at.to_le_bytes());
                }
                Handler::Context(loc) => {
                    key.push(2);
                    write!(key, "{loc:?}|").expect("into memory");
                }
            }
        }
        key.push(0xff);
    }
    for (offset, span, map) in buffer.user_stack_maps() {
        key.push(6);
        key.extend(offset.to_le_bytes());
        key.extend(span.to_le_bytes());
        write!(key, "{map:?}|").expect("into memory");
    }
    for site in buffer.patchable_call_sites() {
        key.push(7);
        write!(key, "{site:?}|").expect("into memory");
    }
}

/// Extend `plan` with the groups whose bodies compiled to the same machine code
/// ([`fold_compiled`]). Returns the plan unchanged when nothing more folds.
pub fn fold_machine_code(
    module: &Module,
    target: &TargetInfo,
    options: &MergeOptions,
    plan: &MergePlan,
    compiled: &Compiled,
    same_signature_only: bool,
) -> MergePlan {
    if options.mode == MergeMode::Disabled {
        return plan.clone();
    }
    let code_groups = fold_compiled(module, plan, compiled, same_signature_only);
    if code_groups.is_empty() {
        return plan.clone();
    }
    let mut in_code_group: SecondaryMap<FuncIndex, bool> = SecondaryMap::new();
    for (members, _) in &code_groups {
        for &f in members {
            in_code_group[f] = true;
        }
    }
    let mut groups: Vec<(Vec<FuncIndex>, FoundBy)> = plan
        .groups()
        .iter()
        .filter(|g| !in_code_group[g.kept])
        .map(|g| {
            let mut members: Vec<FuncIndex> = g.folded.iter().map(|&(f, _)| f).collect();
            members.push(g.kept);
            members.sort_unstable();
            (members, g.found_by)
        })
        .collect();
    groups.extend(code_groups);
    // The address uses the plan was made with: the module's, found by the driver's walk.
    let walked;
    let address_used = match &plan.address_used {
        Some(used) => used,
        None => {
            walked = policy::address_used(module);
            &walked
        }
    };
    policy::plan_groups(module, target, options, groups, address_used)
}
