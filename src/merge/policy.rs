//! The decision table: what each folded function becomes. Checked against the rules of LLVM's MergeFunctions design
//! (LLVM's `mergeTwoFunctions` / `writeThunkOrAlias`) and kept apart from the code that
//! emits, so that a reader can verify it in one place.
//!
//! Which function of a group is kept does not depend on input order: strong (not
//! preemptible) before preemptible, then external (`Export`, `Hidden`) before `Local`,
//! then by name.
//!
//! For each other member G, with "significant" meaning G's address is taken (it is not
//! `Local`, or some function uses `func_addr`/`symbol` on it) and neither the mode
//! (`aliases`), the user (`--addresses-insignificant`) nor G (`unnamed_addr`) says
//! addresses do not matter:
//!
//! | G's linkage               | G's address significant | action |
//! |---------------------------|-------------------------|--------|
//! | Local                     | no                      | erased: every call and address use of G goes to F |
//! | Local                     | yes                     | thunk (a local symbol that jumps to F) |
//! | Hidden, Export            | no                      | alias where the object format has aliases, else thunk |
//! | Hidden, Export            | yes                     | thunk |
//! | Preemptible               | no / yes                | alias (weak) / thunk (weak), as above |
//!
//! Direct calls to G are redirected to F unless G is preemptible (it may be replaced at
//! link time, and the call must follow the replacement). When F itself is preemptible
//! (every member is), the shared body moves into a new local function and every name,
//! F's included, becomes an alias or thunk to it. A thunk whose target body is no larger
//! than the thunk is written as a copy of the body instead, at emission, where sizes are
//! known.

use std::cmp::Reverse;

use cranelift_entity::SecondaryMap;

use super::module::{FuncIndex, Linkage, Module};
use super::plan::{Action, Body, FoundBy, Group, MergePlan};
use super::MergeOptions;
use crate::names::fresh_symbol;
use crate::target::TargetInfo;

/// The key that chooses the kept function: smallest wins.
fn keep_rank(module: &Module, f: FuncIndex) -> impl Ord + '_ {
    let m = module.get(f);
    let strong = m.linkage != Linkage::Preemptible;
    let external = m.linkage != Linkage::Local;
    (Reverse(strong), Reverse(external), &m.name)
}

/// Which functions have their address taken by some function of the module
/// (`func_addr`, `symbol`).
pub(crate) fn address_used(module: &Module) -> SecondaryMap<FuncIndex, bool> {
    let mut used: SecondaryMap<FuncIndex, bool> = SecondaryMap::new();
    for f in module.indices() {
        for a in module.references(f).addresses {
            used[a] = true;
        }
    }
    used
}

/// Build the plan for `groups` (each a set of equal functions). `address_used` is
/// [`address_used`] of the module (the driver has it already).
pub(crate) fn plan_groups(
    module: &Module,
    target: &TargetInfo,
    options: &MergeOptions,
    groups: Vec<(Vec<FuncIndex>, FoundBy)>,
    address_used: &SecondaryMap<FuncIndex, bool>,
) -> MergePlan {
    let significant = |g: FuncIndex| {
        let m = module.get(g);
        let taken = m.linkage != Linkage::Local || address_used[g];
        taken && options.address_compared(m)
    };
    let name_only = |g: FuncIndex| {
        if significant(g) || !target.supports_aliases() {
            Action::Thunk
        } else {
            Action::Alias
        }
    };

    let mut plan = MergePlan::default();
    // The symbols shared bodies may not take: those of the module, defined or called, and
    // the bodies' own (two kept names may read the same once sanitized). Found only when
    // some group needs a shared body.
    let mut in_use: Option<std::collections::HashSet<String>> = None;
    let mut groups: Vec<Group> = groups
        .into_iter()
        .map(|(members, found_by)| {
            let kept = *members
                .iter()
                .min_by_key(|&&f| keep_rank(module, f))
                .expect("a group has members");
            let shared = module.get(kept).linkage == Linkage::Preemptible;
            let mut folded: Vec<(FuncIndex, Action)> = members
                .iter()
                .filter(|&&g| g != kept)
                .map(|&g| {
                    let action = if module.get(g).linkage == Linkage::Local && !significant(g) {
                        Action::Erased
                    } else {
                        name_only(g)
                    };
                    (g, action)
                })
                .collect();
            folded.sort_by(|a, b| module.get(a.0).name.cmp(&module.get(b.0).name));
            let body = if shared {
                let in_use =
                    in_use.get_or_insert_with(|| module.symbols_starting_with(SHARED_BODY_PREFIX));
                Body::SharedLocal {
                    symbol: fresh_symbol(shared_body_symbol(&module.get(kept).name), in_use),
                }
            } else {
                Body::Kept
            };
            Group {
                kept,
                body,
                folded,
                found_by,
            }
        })
        .collect();
    groups.sort_by(|a, b| module.get(a.kept).name.cmp(&module.get(b.kept).name));

    for (i, group) in groups.iter().enumerate() {
        plan.group_of[group.kept] = Some(i as u32);
        if matches!(group.body, Body::SharedLocal { .. }) {
            plan.actions[group.kept] = name_only(group.kept);
        }
        for &(g, action) in &group.folded {
            plan.group_of[g] = Some(i as u32);
            plan.actions[g] = action;
            if module.get(g).linkage != Linkage::Preemptible {
                plan.redirects[g] = Some(group.kept);
            }
        }
    }
    plan.groups = groups;
    plan.address_used = Some(address_used.clone());
    plan
}

/// What the symbols of shared bodies start with.
const SHARED_BODY_PREFIX: &str = "clif_merge_body_";

/// The symbol the local body shared by a group whose kept function is preemptible is
/// named after: `clif_merge_body_` and the kept symbol with every character that is not a
/// letter, digit or `_` made `_` (so it is also a valid CLIF test-case name). The plan
/// adds `_1`, `_2`, ... where the module defines or refers to that symbol already.
pub fn shared_body_symbol(kept: &crate::names::FuncName) -> String {
    let sanitized: String = kept
        .symbol()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{SHARED_BODY_PREFIX}{sanitized}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::MergeMode;

    /// The plan carries the driver's address uses, and they are the module's: machine-code
    /// folding plans its groups with them instead of walking the module again.
    #[test]
    fn a_plan_carries_the_address_uses_of_its_module() {
        let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").expect("known");
        let dirs = ["fixtures/merger", "fixtures/similar", "fixtures/exec"];
        let mut files_with_uses = 0;
        for dir in dirs {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .expect("the fixtures are there")
                .map(|e| e.expect("a directory entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "clif"))
                .collect();
            files.sort();
            for file in files {
                let functions =
                    crate::read::read_inputs(std::slice::from_ref(&file)).expect("it reads");
                let mut module = Module::with_capacity(functions.len());
                for (i, f) in functions.into_iter().enumerate() {
                    let linkage = [Linkage::Export, Linkage::Local, Linkage::Hidden][i % 3];
                    module.add(f.func, linkage, false).expect("unique names");
                }
                let expected = address_used(&module);
                files_with_uses += usize::from(module.indices().any(|f| expected[f]));
                for mode in [MergeMode::Aliases, MergeMode::Trampolines] {
                    let options = MergeOptions {
                        mode,
                        ..MergeOptions::default()
                    };
                    let plan = crate::merge::merge(&module, &target, &options);
                    let carried = plan.address_used.as_ref().expect("the driver made it");
                    for f in module.indices() {
                        assert_eq!(
                            carried[f],
                            expected[f],
                            "{}: {} in {mode:?}",
                            file.display(),
                            module.get(f).name
                        );
                    }
                }
            }
        }
        assert!(
            files_with_uses >= 5,
            "only {files_with_uses} files take addresses"
        );
    }
}
