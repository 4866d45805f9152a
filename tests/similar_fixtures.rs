//! Runs every fixture in `fixtures/similar/`: one file per merge-similar rule, each stating
//! its expectations in directive comments; and the exec fixtures of `fixtures/exec/` that
//! state theirs.
//!
//! Directives (one per comment line):
//! - `; linkage: <local|hidden|export|preemptible> %a %b ...` the functions' linkage in the
//!   module (default export);
//! - `; expect: similar %a %b <n>` equal except for holes, `n` of which hold different
//!   values (`clif_merge::detect::similar`, both directions);
//! - `; expect: differ %a %b <what>` not similar, and the first difference outside the
//!   holes is `<what>` (both directions);
//! - `; expect: group <n> %a %b ...` merge-similar (every group within the parameter limit,
//!   no cost model) makes exactly these functions thunks into one shared body with `n`
//!   extra parameters;
//! - `; expect: aligned %a %b` merge-similar with alignment merging (on for the fixture
//!   when this directive is present, still without the cost model) makes exactly these two
//!   functions thunks into one body merged by alignment (one extra parameter, the
//!   identifier);
//! - `; expect: unlike %a %b` as `aligned`, with unlike blocks on for the fixture
//!   (`SimilarOptions::unlike_blocks`), and the body has blocks of one member alone or
//!   branches where the members go to other blocks (`SimilarGroup::unlike_blocks`); every
//!   other aligned pair of such a fixture must have none;
//! - `; expect: alone %a ...` merge-similar leaves these functions as they are;
//! - `; expect: equal %a %b ...` merge-similar gives exactly these functions one body
//!   (the same text but for the name) and no thunk: they needed no parameter;
//! - `; expect: flags %a <flags>, <flags>, ...` the body `%a` runs after merge-similar (its
//!   group's shared body, or its own) has these memory flags on its memory accesses, in
//!   layout order, as CLIF prints them without the alias region (`-` for none);
//! - `; expect: selects %a <n>` the body `%a` runs after merge-similar has `n` `select`
//!   instructions.
//!
//! Every function must be named by a directive. The rewritten module must pass Cranelift's
//! verifier (with the x86_64 ISA), and each function left alone must be unchanged.

use std::collections::BTreeSet;
use std::path::Path;

use clif_merge::detect::similar;
use clif_merge::emit::build_isa;
use clif_merge::merge::similar::{merge_similar, merge_similar_keeping_replaced, SimilarOptions};
use clif_merge::merge::{
    merge, merge_after_similar, Linkage, MergeMode, MergeOptions, MergePlan, Module,
};
use clif_merge::read::parse_clif;
use clif_merge::{FuncName, TargetInfo};
use cranelift_codegen::ir::Function;

fn settings() -> Vec<(String, String)> {
    [("is_pic", "true"), ("preserve_frame_pointers", "true")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn linkage(word: &str) -> Linkage {
    match word {
        "local" => Linkage::Local,
        "hidden" => Linkage::Hidden,
        "export" => Linkage::Export,
        "preemptible" => Linkage::Preemptible,
        other => panic!("unknown linkage {other}"),
    }
}

fn run_fixture(path: &Path) {
    let file = path.display();
    let text = std::fs::read_to_string(path).unwrap();
    let functions: Vec<Function> = parse_clif(&text, path)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|p| *p.func)
        .collect();
    let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    let isa = build_isa(&target, &settings()).unwrap();
    let by_name = |name: &str| -> &Function {
        let wanted = FuncName::parse(name).unwrap_or_else(|| panic!("{file}: bad name {name}"));
        functions
            .iter()
            .find(|f| FuncName::of_function(f) == wanted)
            .unwrap_or_else(|| panic!("{file}: no function {name}"))
    };
    let mut named: BTreeSet<String> = BTreeSet::new();
    let mut linkages: Vec<(String, Linkage)> = Vec::new();
    let mut groups: Vec<(usize, BTreeSet<String>)> = Vec::new();
    let mut aligned: Vec<BTreeSet<String>> = Vec::new();
    let mut unlike: Vec<BTreeSet<String>> = Vec::new();
    let mut alone: Vec<String> = Vec::new();
    let mut equal: Vec<BTreeSet<String>> = Vec::new();
    let mut flags: Vec<(String, String)> = Vec::new();
    let mut selects: Vec<(String, usize)> = Vec::new();
    let mut directives = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("; linkage:") {
            let mut words = rest.split_whitespace();
            let l = linkage(words.next().unwrap());
            linkages.extend(words.map(|w| (w.to_string(), l)));
            continue;
        }
        let Some(rest) = line.strip_prefix("; expect:") else {
            continue;
        };
        directives += 1;
        let words: Vec<&str> = rest.split_whitespace().collect();
        match words[0] {
            "similar" => {
                let (a, b) = (words[1], words[2]);
                let n: usize = words[3].parse().unwrap();
                for (l, r) in [(a, b), (b, a)] {
                    match similar(&target, by_name(l), by_name(r)) {
                        Ok(holes) => assert_eq!(
                            holes.len(),
                            n,
                            "{file}: {l} and {r} differ in {} holes, expected {n}: {holes:?}",
                            holes.len()
                        ),
                        Err(d) => panic!("{file}: {l} and {r} are not similar:\n{d}"),
                    }
                }
                named.extend([a.to_string(), b.to_string()]);
            }
            "differ" => {
                let (a, b) = (words[1], words[2]);
                let what = words[3..].join(" ");
                for (l, r) in [(a, b), (b, a)] {
                    match similar(&target, by_name(l), by_name(r)) {
                        Ok(holes) => panic!("{file}: {l} and {r} are similar: {holes:?}"),
                        Err(d) => assert!(
                            d.what.contains(&what),
                            "{file}: {l} and {r} first differ in `{}`, expected `{what}`:\n{d}",
                            d.what
                        ),
                    }
                }
                named.extend([a.to_string(), b.to_string()]);
            }
            "group" => {
                let n: usize = words[1].parse().unwrap();
                let members: BTreeSet<String> = words[2..].iter().map(|w| w.to_string()).collect();
                named.extend(members.iter().cloned());
                groups.push((n, members));
            }
            "aligned" | "unlike" => {
                let members: BTreeSet<String> = words[1..].iter().map(|w| w.to_string()).collect();
                assert_eq!(members.len(), 2, "{file}: an aligned group is a pair");
                named.extend(members.iter().cloned());
                aligned.push(members.clone());
                if words[0] == "unlike" {
                    unlike.push(members.clone());
                }
                groups.push((1, members));
            }
            "equal" => {
                let members: BTreeSet<String> = words[1..].iter().map(|w| w.to_string()).collect();
                named.extend(members.iter().cloned());
                equal.push(members);
            }
            "flags" => {
                named.insert(words[1].to_string());
                flags.push((words[1].to_string(), words[2..].join(" ")));
            }
            "selects" => {
                named.insert(words[1].to_string());
                selects.push((words[1].to_string(), words[2].parse().unwrap()));
            }
            "alone" => {
                alone.extend(words[1..].iter().map(|w| w.to_string()));
                named.extend(words[1..].iter().map(|w| w.to_string()));
            }
            other => panic!("{file}: unknown directive {other}"),
        }
    }
    assert!(directives > 0, "{file}: no directive");
    for f in &functions {
        let name = FuncName::of_function(f).to_string();
        assert!(named.contains(&name), "{file}: no directive names {name}");
    }

    let module = || {
        let mut sorted = functions.clone();
        sorted.sort_by_key(FuncName::of_function);
        let mut module = Module::new();
        for f in sorted {
            let name = FuncName::of_function(&f).to_string();
            let l = linkages
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(Linkage::Export, |&(_, l)| l);
            module.add(f, l, false).unwrap();
        }
        module
    };
    let similar_options = SimilarOptions {
        cost_model: false,
        alignment: !aligned.is_empty(),
        unlike_blocks: !unlike.is_empty(),
    };
    plans_after_merge_similar_are_found_afresh(
        module,
        &target,
        &*isa,
        &similar_options,
        true,
        &file.to_string(),
    );
    let (rewritten, report) = merge_similar(
        module(),
        &target,
        &*isa,
        &MergeOptions::default(),
        &similar_options,
    );
    for (n, members) in &groups {
        let found = report
            .groups
            .iter()
            .find(|g| g.members.iter().any(|m| members.contains(m)))
            .unwrap_or_else(|| panic!("{file}: no group holds any of {members:?}: {report:?}"));
        let got: BTreeSet<String> = found.members.iter().cloned().collect();
        assert_eq!(&got, members, "{file}: group members");
        assert_eq!(
            found.holes, *n,
            "{file}: parameters of the group of {members:?}"
        );
        assert_eq!(
            found.aligned,
            aligned.contains(members),
            "{file}: whether {members:?} were merged by alignment"
        );
        assert_eq!(
            found.unlike_blocks,
            unlike.contains(members),
            "{file}: whether {members:?} were merged with unlike blocks"
        );
    }
    for name in &alone {
        assert!(
            report.groups.iter().all(|g| !g.members.contains(name)),
            "{file}: {name} was merged: {report:?}"
        );
        let before = by_name(name);
        let after = rewritten
            .lookup(&FuncName::parse(name).unwrap())
            .map(|i| &rewritten.get(i).func)
            .unwrap();
        assert_eq!(
            before.display().to_string(),
            after.display().to_string(),
            "{file}: {name} was changed"
        );
    }
    assert_eq!(
        report.groups.len(),
        groups.len(),
        "{file}: groups beyond the expected ones: {report:?}"
    );
    let lookup = |name: &str| -> &Function {
        let i = rewritten
            .lookup(&FuncName::parse(name).unwrap())
            .unwrap_or_else(|| panic!("{file}: no function {name} after rewriting"));
        &rewritten.get(i).func
    };
    for members in &equal {
        let found = report
            .made_equal
            .iter()
            .find(|g| g.iter().any(|m| members.contains(m)))
            .unwrap_or_else(|| panic!("{file}: {members:?} were not made equal: {report:?}"));
        let got: BTreeSet<String> = found.iter().cloned().collect();
        assert_eq!(&got, members, "{file}: functions made equal");
        let text = |name: &str| {
            let mut f = lookup(name).clone();
            f.name = cranelift_codegen::ir::UserFuncName::testcase("x");
            f.display().to_string()
        };
        let first = members.first().unwrap();
        for m in members {
            assert_eq!(text(m), text(first), "{file}: {m} and {first} differ");
        }
    }
    assert_eq!(
        report.made_equal.len(),
        equal.len(),
        "{file}: functions made equal beyond the expected ones: {report:?}"
    );
    let body_run_by = |name: &String| match report.groups.iter().find(|g| g.members.contains(name))
    {
        Some(g) => lookup(&g.body),
        None => lookup(name),
    };
    for (name, expected) in &selects {
        let body = body_run_by(name);
        let got = body
            .layout
            .blocks()
            .flat_map(|block| body.layout.block_insts(block))
            .filter(|&inst| body.dfg.insts[inst].opcode() == cranelift_codegen::ir::Opcode::Select)
            .count();
        assert_eq!(
            got,
            *expected,
            "{file}: selects in the body {name} runs:\n{}",
            body.display()
        );
    }
    for (name, expected) in &flags {
        let body = body_run_by(name);
        let mut got: Vec<String> = Vec::new();
        for block in body.layout.blocks() {
            for inst in body.layout.block_insts(block) {
                if let Some(f) = body.dfg.insts[inst].memflags() {
                    let mach: cranelift_codegen::ir::MachMemFlags = body.dfg.mem_flags[f].into();
                    let text = mach.to_string().trim().to_string();
                    got.push(if text.is_empty() { "-".into() } else { text });
                }
            }
        }
        assert_eq!(
            got.join(", "),
            *expected,
            "{file}: the memory flags of the body {name} runs:\n{}",
            body.display()
        );
    }
    for (_, m) in rewritten.iter() {
        cranelift_codegen::verify_function(&m.func, &*isa).unwrap_or_else(|e| {
            panic!(
                "{file}: {} does not verify after rewriting: {e}\n{}",
                m.name,
                m.func.display()
            )
        });
    }
}

/// The `.clif` files of `fixtures/<dir>`, sorted.
fn clif_files(dir: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(dir);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "clif"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn every_similar_fixture_holds() {
    let paths = clif_files("similar");
    assert!(paths.len() >= 4, "fixtures missing in fixtures/similar");
    for path in paths {
        run_fixture(&path);
    }
}

/// The exec fixtures (`fixtures/exec/`, run by `tests/differential.rs`) that state what
/// merge-similar makes of them, so that their executions are known to run merged code.
#[test]
fn exec_fixtures_merge_as_they_state() {
    let paths: Vec<_> = clif_files("exec")
        .into_iter()
        .filter(|p| std::fs::read_to_string(p).unwrap().contains("\n; expect:"))
        .collect();
    assert!(!paths.is_empty(), "no exec fixture states its merges");
    for path in paths {
        run_fixture(&path);
    }
}

/// What `plan` says of every function of `module`: what it becomes, where calls to it go,
/// and the group it is in; for comparing two plans of one module.
fn plan_summary(module: &Module, plan: &MergePlan) -> Vec<String> {
    module
        .indices()
        .map(|f| {
            let group = plan
                .group_of(f)
                .map(|g| format!("{:?} {:?} {:?} {:?}", g.kept, g.body, g.folded, g.found_by));
            format!(
                "{}: {:?}, calls to {:?}, {group:?}",
                module.get(f).name,
                plan.action(f),
                plan.redirect(f)
            )
        })
        .collect()
}

/// The identical run of the module merge-similar rewrote (`merge_after_similar`) takes
/// what merge-similar's own identical run learned of every function it did not replace
/// instead of walking and encoding it again: its plan must be the plan `merge` makes of
/// that module afresh, in each merging mode (the facts the shapes depend on differ between
/// them), and with `across`, also when the plan is asked for with other options than
/// merge-similar ran with. `module` makes the module as read.
fn plans_after_merge_similar_are_found_afresh(
    module: impl Fn() -> Module,
    target: &TargetInfo,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    similar: &SimilarOptions,
    across: bool,
    context: &str,
) {
    let option_sets = [
        MergeOptions::default(),
        MergeOptions {
            mode: MergeMode::Aliases,
            aliases_share_address: true,
            ..MergeOptions::default()
        },
        MergeOptions {
            addresses_insignificant: true,
            ..MergeOptions::default()
        },
    ];
    for (i, similar_with) in option_sets.iter().enumerate() {
        for (j, plan_with) in option_sets.iter().enumerate() {
            if i != j && !across {
                continue;
            }
            let (rewritten, report, mut replaced) =
                merge_similar_keeping_replaced(module(), target, isa, similar_with, similar);
            let afresh = merge(&rewritten, target, plan_with);
            let reusing = merge_after_similar(&rewritten, target, plan_with, &mut replaced);
            assert_eq!(
                plan_summary(&rewritten, &afresh),
                plan_summary(&rewritten, &reusing),
                "{context}, merge-similar with {similar_with:?}, the plan with {plan_with:?}: \
                 the plan after merge-similar ({} groups) differs from the plan found afresh",
                report.groups.len()
            );
        }
    }
    if across {
        // A caller's mistake: another module than the one merge-similar returned (here its
        // functions copied in the reverse order) with what it replaced. Nothing the first
        // run learned is taken (no body is the one it read), so the plan is that module's.
        let options = MergeOptions::default();
        let (rewritten, _, mut replaced) =
            merge_similar_keeping_replaced(module(), target, isa, &options, similar);
        let mut reversed = Module::new();
        for (_, m) in rewritten.iter().collect::<Vec<_>>().into_iter().rev() {
            let f = reversed
                .add(m.func.clone(), m.linkage, m.unnamed_addr)
                .unwrap();
            reversed.get_mut(f).similar_thunk = m.similar_thunk;
        }
        assert_eq!(
            plan_summary(&reversed, &merge(&reversed, target, &options)),
            plan_summary(
                &reversed,
                &merge_after_similar(&reversed, target, &options, &mut replaced)
            ),
            "{context}: the plan of another module than merge-similar returned"
        );
    }
}

/// [`plans_after_merge_similar_are_found_afresh`] on the corpora (`../shared/corpus`), with
/// merge-similar as the command line runs it (cost model and alignment merging on).
#[test]
fn plans_after_merge_similar_on_the_corpora_are_found_afresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if !root.is_dir() {
        eprintln!("skipping: {} is absent", root.display());
        return;
    }
    let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    let isa = build_isa(&target, &settings()).unwrap();
    for corpus in ["re2", "sqlite", "zstd"] {
        let functions = clif_merge::read::read_inputs(&[root.join(corpus)]).unwrap();
        let module = || Module::from_functions(functions.iter().map(|f| f.func.clone())).unwrap();
        plans_after_merge_similar_are_found_afresh(
            module,
            &target,
            &*isa,
            &SimilarOptions::default(),
            false,
            corpus,
        );
    }
}
