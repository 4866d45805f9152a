//! `--emit-clif`: the merged module as CLIF text that cranelift-reader parses back.
//!
//! Kept functions appear with their callers redirected (calls to a folded function name the
//! kept one; uses of an erased function name the kept one); shared local bodies appear
//! under their own name; every thunk, and every alias (CLIF has no aliases), appears as a
//! CLIF thunk that forwards its arguments to the body. An alias is marked by a comment.
//! Erased functions are gone.

use std::fmt::Write as _;

use cranelift_codegen::ir::{self, GlobalValueData, InstructionData};
use cranelift_codegen::isa::TargetFrontendConfig;

use super::thunk::{clif_thunk, external_name, user_func_name};
use crate::merge::{Action, Body, FuncIndex, MergePlan, Module};
use crate::names::FuncName;

/// The merged module as CLIF text.
pub fn merged_clif(
    module: &Module,
    plan: &MergePlan,
    frontend_config: TargetFrontendConfig,
) -> String {
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
            Action::Erased => {}
            action @ (Action::Alias | Action::Thunk) => {
                let target = body_name.expect("a folded function has a group");
                if action == Action::Alias {
                    let _ = writeln!(out, "; clif-merge: {} is an alias of {}", m.name, target);
                }
                let thunk = clif_thunk(&m.name, &m.func.signature, &target, frontend_config);
                let _ = writeln!(out, "{}", thunk.display());
            }
        }
    }
    out
}

/// A copy of `f` whose references follow the plan: calls to a redirected function and any
/// use of an erased one name the kept function.
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
    let new_target = |g: FuncIndex, address: bool| -> Option<FuncName> {
        let group = plan.group_of(g)?;
        let kept = module.get(group.kept).name.clone();
        match plan.action(g) {
            Action::Erased => Some(kept),
            _ if !address => plan.redirect(g).map(|_| kept),
            _ => None,
        }
    };
    let refs: Vec<ir::FuncRef> = func.dfg.ext_funcs.keys().collect();
    for fref in refs {
        let name = FuncName::of_external(&func, &func.dfg.ext_funcs[fref].name);
        if let Some(g) = module.lookup(&name) {
            if let Some(to) = new_target(g, address_use[fref.as_u32() as usize]) {
                func.dfg.ext_funcs[fref].name = external_name(&mut func, &to);
            }
        }
    }
    let gvs: Vec<ir::GlobalValue> = func.global_values.keys().collect();
    for gv in gvs {
        let GlobalValueData::Symbol { name, .. } = &func.global_values[gv] else {
            continue;
        };
        let resolved = FuncName::of_external(&func, name);
        if let Some(to) = module.lookup(&resolved).and_then(|g| new_target(g, true)) {
            let new_name = external_name(&mut func, &to);
            if let GlobalValueData::Symbol { name, .. } = &mut func.global_values[gv] {
                *name = new_name;
            }
        }
    }
    func
}
