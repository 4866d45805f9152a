//! `--emit-clif`: the merged module as CLIF text that cranelift-reader parses back.
//!
//! Kept functions appear with their calls redirected (a call to a folded function names
//! its group's body: the kept function, or the shared local body when the kept function is
//! preemptible); shared local bodies appear under their own name; every thunk, and every
//! alias (CLIF has no aliases), appears as a CLIF thunk that forwards its arguments to the
//! body. An alias is marked by a comment. Erased functions are gone.
//!
//! Where the object gives a folded function its body's address (an erased function, or an
//! alias, a symbol at the body, unless it is preemptible: the definition that preempts it
//! takes its name), every address use in the CLIF (`func_addr`, `symbol_value`) names the
//! body, so that the address compares equal to itself however it was taken, as in the
//! object. (An alias's own name, taken from outside the module, is its thunk's address
//! here.)
//!
//! A CLIF thunk of a `tail` function tail-calls the body (`return_call`) where Cranelift
//! compiles that (on aarch64, and on x86_64 with frame pointers kept), as the object's CLIF
//! thunks do: a chain of tail calls through the thunk's address then runs in constant
//! stack, as through the object's jump. Any other CLIF thunk calls the body and returns,
//! so the body would run in the thunk's frame. A
//! body that reads its return address, frame pointer or stack pointer must see its
//! caller's, as it does in the object, where such a folded name gets a jump or a copy of
//! the body: here it gets a copy (the body under the folded name). So does a folded name
//! whose body is merge-similar's thunk into such a body ([`reaches_a_frame_reader`]).
//!
//! Merge-similar's thunks are written with a comment on the line before them
//! ([`SIMILAR_THUNK_MARK`]): clif-merge, reading the CLIF again, writes them as register
//! loads and a jump, as in the object, and every function without the mark as Cranelift
//! compiles it. Another compiler gives them a frame.

use std::fmt::Write as _;

use cranelift_codegen::ir::{self, GlobalValueData, InstructionData};
use cranelift_codegen::isa::TargetFrontendConfig;

use super::clif_text::function_text;
use super::thunk::{clif_thunk, reaches_a_frame_reader};
use crate::merge::{Action, Body, FuncIndex, Group, Linkage, MergePlan, Module, ModuleFunction};
use crate::names::FuncName;
use crate::names::{external_name, user_func_name};
use crate::read::SIMILAR_THUNK_MARK;

/// The merged module as CLIF text. With `tail_calls` (the target and settings it is for
/// compile a thunk's `return_call`: [`crate::target::thunks_tail_call`]), the thunk of a
/// `tail` function is a `return_call`.
pub fn merged_clif(
    module: &Module,
    plan: &MergePlan,
    frontend_config: TargetFrontendConfig,
    tail_calls: bool,
) -> String {
    let mut out = String::new();
    for (f, m) in module.iter() {
        let group = plan.group_of(f);
        if let Some(g) = group {
            if let (true, Body::SharedLocal { symbol }) = (g.kept == f, &g.body) {
                let mut body = written(module, plan, f);
                body.name = user_func_name(&FuncName::TestCase(symbol.clone()));
                let _ = writeln!(
                    out,
                    "; clif-merge: shared local body of the group of {}",
                    m.name
                );
                let _ = writeln!(out, "{}", function_text(&body));
            }
        }
        match plan.action(f) {
            Action::Keep => {
                mark_similar_thunk(&mut out, m);
                let _ = writeln!(out, "{}", function_text(&written(module, plan, f)));
            }
            // Every use of its address names the body.
            Action::Erased => {}
            action @ (Action::Alias | Action::Thunk) => {
                let group = group.expect("a folded function has a group");
                let target = body_name(module, group);
                if action == Action::Alias {
                    let _ = writeln!(out, "; clif-merge: {} is an alias of {}", m.name, target);
                }
                let folded = if reaches_a_frame_reader(module, group.kept) {
                    let _ = writeln!(
                        out,
                        "; clif-merge: {} is a copy of {target}, which reads its frame (or its body does)",
                        m.name
                    );
                    mark_similar_thunk(&mut out, module.get(group.kept));
                    let mut copy = written(module, plan, group.kept);
                    copy.name = m.func.name.clone();
                    copy
                } else {
                    clif_thunk(
                        &m.name,
                        &m.func.signature,
                        &target,
                        frontend_config,
                        tail_calls,
                    )
                };
                let _ = writeln!(out, "{}", function_text(&folded));
            }
        }
    }
    out
}

/// [`SIMILAR_THUNK_MARK`] on a line of its own when `m` is merge-similar's thunk, so that
/// clif-merge, reading the CLIF again, writes it as a jump as it does now.
fn mark_similar_thunk(out: &mut String, m: &ModuleFunction) {
    if m.similar_thunk {
        let _ = writeln!(out, "{SIMILAR_THUNK_MARK}");
    }
}

/// Where a group's body is: the kept function, or the shared local body.
fn body_name(module: &Module, group: &Group) -> FuncName {
    match &group.body {
        Body::Kept => module.get(group.kept).name.clone(),
        Body::SharedLocal { symbol } => FuncName::TestCase(symbol.clone()),
    }
}

/// `f` as the CLIF shows it: a call to a redirected or erased function names its group's
/// body, and so does an address use of a function whose address is its body's (erased,
/// or an alias that is not preemptible).
fn written(module: &Module, plan: &MergePlan, f: FuncIndex) -> ir::Function {
    let mut func = ir::Function::clone(&module.get(f).func);
    let address_use = address_uses(&func);
    // The body a reference to `name` goes to, when it goes to one.
    let body_for = |name: &FuncName, address: bool| -> Option<FuncName> {
        let g = module.lookup(name)?;
        let group = plan.group_of(g)?;
        let to_body = if address {
            match plan.action(g) {
                Action::Erased => true,
                // A symbol at the body, but one that may be preempted: its name decides.
                Action::Alias => module.get(g).linkage != Linkage::Preemptible,
                Action::Keep | Action::Thunk => false,
            }
        } else {
            plan.action(g) == Action::Erased || plan.redirect(g).is_some()
        };
        to_body.then(|| body_name(module, group))
    };
    let refs: Vec<ir::FuncRef> = func.dfg.ext_funcs.keys().collect();
    for fref in refs {
        let name = FuncName::of_external(&func, &func.dfg.ext_funcs[fref].name);
        if let Some(body) = body_for(&name, address_use[fref.as_u32() as usize]) {
            func.dfg.ext_funcs[fref].name = external_name(&mut func, &body);
        }
    }
    let gvs: Vec<ir::GlobalValue> = func.global_values.keys().collect();
    for gv in gvs {
        let GlobalValueData::Symbol { name, .. } = &func.global_values[gv] else {
            continue;
        };
        let Some(body) = body_for(&FuncName::of_external(&func, name), true) else {
            continue;
        };
        let renamed = external_name(&mut func, &body);
        if let GlobalValueData::Symbol { name, .. } = &mut func.global_values[gv] {
            *name = renamed;
        }
    }
    func
}

/// Which of `func`'s external functions have their address taken (`func_addr`), by
/// `FuncRef` number.
fn address_uses(func: &ir::Function) -> Vec<bool> {
    let mut address_use = vec![false; func.dfg.ext_funcs.len()];
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let InstructionData::FuncAddr { func_ref, .. } = func.dfg.insts[inst] {
                address_use[func_ref.as_u32() as usize] = true;
            }
        }
    }
    address_use
}

/// A copy of `f` whose direct calls follow the plan, for compiling: a call to a redirected
/// or erased function names the kept function (emission resolves the kept function's
/// number to its group's body). Address uses (`func_addr`, `symbol`) keep their names:
/// emission resolves an erased name to its group's body, and an alias is a symbol at it.
pub fn redirected(module: &Module, plan: &MergePlan, f: FuncIndex) -> ir::Function {
    let mut func = ir::Function::clone(&module.get(f).func);
    let address_use = address_uses(&func);
    let refs: Vec<ir::FuncRef> = func.dfg.ext_funcs.keys().collect();
    for fref in refs {
        if address_use[fref.as_u32() as usize] {
            continue;
        }
        let name = FuncName::of_external(&func, &func.dfg.ext_funcs[fref].name);
        let Some(g) = module.lookup(&name) else {
            continue;
        };
        let Some(group) = plan.group_of(g) else {
            continue;
        };
        if plan.action(g) == Action::Erased || plan.redirect(g).is_some() {
            let kept = module.get(group.kept).name.clone();
            func.dfg.ext_funcs[fref].name = external_name(&mut func, &kept);
        }
    }
    func
}
