//! `--emit-clif`: the merged module as CLIF text that cranelift-reader parses back.
//!
//! Kept functions appear with their calls redirected (a call to a folded function names the
//! kept one); shared local bodies appear under their own name; every thunk, and every
//! alias (CLIF has no aliases), appears as a CLIF thunk that forwards its arguments to the
//! body. An alias is marked by a comment. Erased functions are gone, except those whose
//! address some function takes: they appear as an alias, so the address keeps its name.
//!
//! A CLIF thunk calls the body and returns, so the body would run in the thunk's frame. A
//! body that reads its return address, frame pointer or stack pointer must see its
//! caller's, as it does in the object, where such a folded name gets a jump or a copy of
//! the body: here it gets a copy (the body under the folded name, calls redirected).

use std::fmt::Write as _;

use cranelift_codegen::ir::{self, InstructionData};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_entity::SecondaryMap;

use super::thunk::clif_thunk;
use crate::merge::{Action, Body, FuncIndex, MergePlan, Module};
use crate::names::FuncName;
use crate::names::{external_name, user_func_name};

/// The merged module as CLIF text.
pub fn merged_clif(
    module: &Module,
    plan: &MergePlan,
    frontend_config: TargetFrontendConfig,
) -> String {
    let mut address_used: SecondaryMap<FuncIndex, bool> = SecondaryMap::new();
    for f in module.indices() {
        for g in module.references(f).addresses {
            address_used[g] = true;
        }
    }
    let mut out = String::new();
    for (f, m) in module.iter() {
        let group = plan.group_of(f);
        let body_name = group.map(|g| match &g.body {
            Body::Kept => module.get(g.kept).name.clone(),
            Body::SharedLocal { symbol } => FuncName::TestCase(symbol.clone()),
        });
        if let Some(g) = group {
            if let (true, Body::SharedLocal { symbol }) = (g.kept == f, &g.body) {
                let mut body = redirected(module, plan, f);
                body.name = user_func_name(&FuncName::TestCase(symbol.clone()));
                let _ = writeln!(
                    out,
                    "; clif-merge: shared local body of the group of {}",
                    m.name
                );
                let _ = writeln!(out, "{}", body.display());
            }
        }
        match plan.action(f) {
            Action::Keep => {
                let _ = writeln!(out, "{}", redirected(module, plan, f).display());
            }
            Action::Erased if !address_used[f] => {}
            action @ (Action::Erased | Action::Alias | Action::Thunk) => {
                let target = body_name.expect("a folded function has a group");
                match action {
                    Action::Alias => {
                        let _ = writeln!(out, "; clif-merge: {} is an alias of {}", m.name, target);
                    }
                    Action::Erased => {
                        let _ = writeln!(
                            out,
                            "; clif-merge: {} is erased; its address is that of {}",
                            m.name, target
                        );
                    }
                    _ => {}
                }
                let kept = group.expect("a folded function has a group").kept;
                let folded = if module.get(kept).observes_its_frame() {
                    let _ = writeln!(
                        out,
                        "; clif-merge: {} is a copy of {target}, which reads its frame",
                        m.name
                    );
                    let mut copy = redirected(module, plan, kept);
                    copy.name = m.func.name.clone();
                    copy
                } else {
                    clif_thunk(&m.name, &m.func.signature, &target, frontend_config, false)
                };
                let _ = writeln!(out, "{}", folded.display());
            }
        }
    }
    out
}

/// A copy of `f` whose direct calls follow the plan: a call to a redirected or erased
/// function names the kept function. Address uses (`func_addr`, `symbol`) keep their
/// names: emission resolves an erased name to its group's body, and `--emit-clif` keeps
/// such a name as an alias.
pub fn redirected(module: &Module, plan: &MergePlan, f: FuncIndex) -> ir::Function {
    let mut func = module.get(f).func.clone();
    let mut address_use = vec![false; func.dfg.ext_funcs.len()];
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let InstructionData::FuncAddr { func_ref, .. } = func.dfg.insts[inst] {
                address_use[func_ref.as_u32() as usize] = true;
            }
        }
    }
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
