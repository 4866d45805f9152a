//! Runs every fixture in `fixtures/merger/`: each file states, in directive comments, which
//! functions the merger must fold together, which must stay apart, and what each folded
//! name becomes in each mode. Every file is also merged with its functions in reverse order
//! and must give the same groups, kept functions and actions.
//!
//! Directives (one per comment line):
//! - `; linkage: %name local|hidden|export|preemptible` (default export)
//! - `; expect-group: %a %b ...` all share one body
//! - `; expect-apart: %a %b` do not share one body
//! - `; expect-kept: %a` %a is the kept function of its group
//! - `; expect-found-by: tree|cycle %a` how %a's group was found
//! - `; expect-without-cycles: apart %a %b` apart when cycle folding is off (LLVM's behaviour)
//! - `; expect-action: aliases|trampolines %g keep|erased|alias|thunk`
//! - `; expect-redirect: %g yes|no` whether direct calls to %g go to the kept function
//! - `; expect-shared-body: %a` the group of %a has its body in a new local function

use std::path::Path;

use clif_merge::merge::{
    Action, Body, FoundBy, Linkage, MergeMode, MergeOptions, MergePlan, Module,
};
use clif_merge::{FuncName, TargetInfo};

struct Fixture {
    path: String,
    text: String,
}

fn fixtures() -> Vec<Fixture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/merger");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "clif"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 8, "merger fixtures are missing");
    paths
        .into_iter()
        .map(|p| Fixture {
            text: std::fs::read_to_string(&p).unwrap(),
            path: p.display().to_string(),
        })
        .collect()
}

fn directives(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("; "))
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, _)| k.starts_with("expect") || *k == "linkage")
        .map(|(k, v)| {
            (
                k.to_string(),
                v.split_whitespace().map(String::from).collect(),
            )
        })
        .collect()
}

fn build(fx: &Fixture, reverse: bool) -> Module {
    let mut functions: Vec<_> = clif_merge::read::parse_clif(&fx.text, &fx.path)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|p| p.func)
        .collect();
    if reverse {
        functions.reverse();
    }
    let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
    let mut module = Module::new();
    for func in functions {
        cranelift_codegen::verify_function(&func, &flags)
            .unwrap_or_else(|e| panic!("{}: {} fails verification: {e}", fx.path, func.name));
        let name = FuncName::of_function(&func).to_string();
        let linkage = directives(&fx.text)
            .into_iter()
            .rev()
            .find(|(k, v)| k == "linkage" && v[0] == name)
            .map(|(_, v)| match v[1].as_str() {
                "local" => Linkage::Local,
                "hidden" => Linkage::Hidden,
                "export" => Linkage::Export,
                "preemptible" => Linkage::Preemptible,
                other => panic!("{}: unknown linkage {other}", fx.path),
            })
            .unwrap_or(Linkage::Export);
        module.add(func, linkage, false).unwrap();
    }
    module
}

fn index(module: &Module, fx: &Fixture, name: &str) -> clif_merge::FuncIndex {
    module
        .lookup(&FuncName::parse(name).unwrap())
        .unwrap_or_else(|| panic!("{}: no function {name}", fx.path))
}

/// Groups as (kept name, sorted folded names with actions, found_by), sorted.
/// A group as (kept name, folded names with actions, how it was found).
type GroupSummary = (String, Vec<(String, Action)>, FoundBy);

fn summary(module: &Module, plan: &MergePlan) -> Vec<GroupSummary> {
    let mut groups: Vec<_> = plan
        .groups()
        .iter()
        .map(|g| {
            let mut folded: Vec<_> = g
                .folded
                .iter()
                .map(|&(f, a)| (module.get(f).name.to_string(), a))
                .collect();
            folded.sort_by(|a, b| a.0.cmp(&b.0));
            (module.get(g.kept).name.to_string(), folded, g.found_by)
        })
        .collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    groups
}

fn options(mode: MergeMode, fold_cycles: bool) -> MergeOptions {
    MergeOptions {
        mode,
        fold_cycles,
        ..Default::default()
    }
}

#[test]
fn every_merger_fixture_holds() {
    let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    for fx in fixtures() {
        let module = build(&fx, false);
        let reversed = build(&fx, true);
        let dirs = directives(&fx.text);
        assert!(
            dirs.iter().any(|(k, _)| k.starts_with("expect")),
            "{}: no expectations",
            fx.path
        );
        for mode in [MergeMode::Trampolines, MergeMode::Aliases] {
            let plan = clif_merge::merge(&module, &target, &options(mode, true));
            let plan_rev = clif_merge::merge(&reversed, &target, &options(mode, true));
            assert_eq!(
                summary(&module, &plan),
                summary(&reversed, &plan_rev),
                "{}: the result depends on input order ({mode:?})",
                fx.path
            );
            let without_cycles = clif_merge::merge(&module, &target, &options(mode, false));
            let idx = |name: &str| index(&module, &fx, name);
            for (kind, args) in &dirs {
                let at = format!("{}: `{kind}: {}` ({mode:?})", fx.path, args.join(" "));
                match kind.as_str() {
                    "linkage" => {}
                    "expect-group" => {
                        for pair in args.windows(2) {
                            assert!(plan.same_body(idx(&pair[0]), idx(&pair[1])), "{at}");
                        }
                    }
                    "expect-apart" => {
                        assert!(!plan.same_body(idx(&args[0]), idx(&args[1])), "{at}");
                    }
                    "expect-kept" => {
                        let f = idx(&args[0]);
                        assert_eq!(plan.group_of(f).map(|g| g.kept), Some(f), "{at}");
                    }
                    "expect-found-by" => {
                        let want = match args[0].as_str() {
                            "tree" => FoundBy::Tree,
                            "cycle" => FoundBy::Cycle,
                            other => panic!("{at}: unknown {other}"),
                        };
                        let group = plan.group_of(idx(&args[1])).expect(&at);
                        assert_eq!(group.found_by, want, "{at}");
                    }
                    "expect-without-cycles" => {
                        assert_eq!(args[0], "apart", "{at}");
                        assert!(
                            !without_cycles.same_body(idx(&args[1]), idx(&args[2])),
                            "{at}"
                        );
                    }
                    "expect-action" => {
                        let for_mode = match args[0].as_str() {
                            "aliases" => MergeMode::Aliases,
                            "trampolines" => MergeMode::Trampolines,
                            other => panic!("{at}: unknown mode {other}"),
                        };
                        if for_mode != mode {
                            continue;
                        }
                        let want = match args[2].as_str() {
                            "keep" => Action::Keep,
                            "erased" => Action::Erased,
                            "alias" => Action::Alias,
                            "thunk" => Action::Thunk,
                            other => panic!("{at}: unknown action {other}"),
                        };
                        assert_eq!(plan.action(idx(&args[1])), want, "{at}");
                    }
                    "expect-redirect" => {
                        let want = args[1] == "yes";
                        assert_eq!(plan.redirect(idx(&args[0])).is_some(), want, "{at}");
                    }
                    "expect-shared-body" => {
                        let group = plan.group_of(idx(&args[0])).expect(&at);
                        assert!(matches!(group.body, Body::SharedLocal { .. }), "{at}");
                    }
                    other => panic!("{}: unknown directive {other}", fx.path),
                }
            }
        }
        let disabled = clif_merge::merge(&module, &target, &options(MergeMode::Disabled, true));
        assert_eq!(
            disabled.folded_count(),
            0,
            "{}: disabled mode folded",
            fx.path
        );
    }
}
