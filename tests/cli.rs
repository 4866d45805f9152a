//! The `clif-merge` command, run as a user runs it: every option, every error (exit
//! status, message, nothing left at the output paths), the merged CLIF read back and
//! merged again, the JSON report, and reproducible objects.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/command.rs"]
#[macro_use]
mod command;

use clif_merge::FuncName;
use command::{run_in, Run};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SectionKind, SymbolScope};
use serde_json::Value;

const X86: &str = "x86_64-unknown-linux-gnu";
const ARM: &str = "aarch64-unknown-linux-gnu";

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(path)
}

fn example() -> PathBuf {
    fixture("example.clif")
}

/// What a run of the command produced.
impl Run {
    #[track_caller]
    fn ok(self) -> Self {
        assert_eq!(
            self.code,
            Some(0),
            "the command failed:\n{}{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The run failed with status 1 and a message starting with `error: `.
    #[track_caller]
    fn error(self) -> String {
        assert_eq!(
            self.code,
            Some(1),
            "expected exit 1:\nstdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        assert!(
            self.stderr.starts_with("error: "),
            "an error message starts with `error: `: {}",
            self.stderr
        );
        assert!(
            !self.stderr.contains("panicked"),
            "the command panicked: {}",
            self.stderr
        );
        self.stderr
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

fn run<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    run_in(None, args)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("report written");
    serde_json::from_str(&text).expect("report is JSON")
}

/// The files in `dir`, by name.
fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("readable directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// `keep -> [(folded, as)]` from a report.
fn groups(report: &Value) -> BTreeMap<String, Vec<(String, String)>> {
    report["groups"]
        .as_array()
        .expect("groups is an array")
        .iter()
        .map(|g| {
            let folded = g["folded"]
                .as_array()
                .expect("folded is an array")
                .iter()
                .map(|f| {
                    (
                        f["name"].as_str().expect("name").to_string(),
                        f["as"].as_str().expect("as").to_string(),
                    )
                })
                .collect();
            (g["keep"].as_str().expect("keep").to_string(), folded)
        })
        .collect()
}

fn folded_names(report: &Value) -> BTreeSet<String> {
    groups(report)
        .into_values()
        .flatten()
        .map(|(name, _)| name)
        .collect()
}

/// The report is consistent with itself: counts match the groups, no name twice, every
/// name in Cranelift's spelling.
#[track_caller]
fn assert_consistent(report: &Value) {
    let groups = groups(report);
    let folded: Vec<&(String, String)> = groups.values().flatten().collect();
    assert_eq!(report["merged"].as_u64(), Some(folded.len() as u64));
    let actions = &report["actions"];
    let count = |a: &str| folded.iter().filter(|(_, x)| x == a).count() as u64;
    assert_eq!(actions["erased"].as_u64(), Some(count("erased")));
    assert_eq!(actions["alias"].as_u64(), Some(count("alias")));
    assert_eq!(actions["thunk"].as_u64(), Some(count("thunk")));
    let mut seen = BTreeSet::new();
    for (keep, members) in &groups {
        assert!(!members.is_empty(), "a group without folded members");
        for name in std::iter::once(keep).chain(members.iter().map(|(n, _)| n)) {
            assert!(seen.insert(name.clone()), "{name} is in two groups");
            assert!(
                FuncName::parse(name).is_some(),
                "{name} is not in Cranelift's spelling"
            );
        }
    }
    assert!(report["functions"].as_u64().expect("functions") >= seen.len() as u64);
    for key in ["parse_s", "merge_s", "codegen_s", "fold_s", "emit_s"] {
        let t = report["timings"][key].as_f64().expect("timing is a number");
        assert!(t >= 0.0 && t.is_finite(), "{key} = {t}");
    }
}

struct Symbol {
    section: Option<object::SectionIndex>,
    address: u64,
    scope: SymbolScope,
    weak: bool,
}

/// The defined symbols of an object, by name.
fn symbols(bytes: &[u8]) -> BTreeMap<String, Symbol> {
    let file = object::File::parse(bytes).expect("an object file");
    file.symbols()
        .filter(|s| s.is_definition())
        .map(|s| {
            (
                s.name().expect("symbol name").to_string(),
                Symbol {
                    section: s.section_index(),
                    address: s.address(),
                    scope: s.scope(),
                    weak: s.is_weak(),
                },
            )
        })
        .collect()
}

fn same_address(a: &Symbol, b: &Symbol) -> bool {
    a.section == b.section && a.address == b.address
}

// ---------------------------------------------------------------------------------------
// Output: the report, the object, the merged CLIF.

#[test]
fn report_dash_writes_the_json_report_to_stdout() {
    let run = run(args![example(), "--report", "-", "--target", X86]).ok();
    assert_eq!(
        run.stderr, "",
        "no progress bar when stderr is not a terminal"
    );
    let report = run.json();
    assert_eq!(report["target"], X86);
    assert_eq!(report["mode"], "trampolines");
    assert_eq!(report["functions"], 11);
    assert_eq!(report["merged"], 5);
    let expected: BTreeMap<String, Vec<(String, String)>> = [
        ("%add_one", "%add_one_again"),
        ("%ping", "%ping2"),
        ("%pong", "%pong2"),
        ("%sum_to", "%sum_to_copy"),
        ("%twice_a", "%twice_b"),
    ]
    .into_iter()
    .map(|(k, f)| (k.to_string(), vec![(f.to_string(), "thunk".to_string())]))
    .collect();
    assert_eq!(groups(&report), expected);
    // Without -o nothing is compiled.
    assert!(report["text_bytes"].is_null());
    assert!(report["compiled"].is_null());
    assert_eq!(report["timings"]["codegen_s"], 0.0);
    assert_eq!(report["timings"]["fold_s"], 0.0);
    assert_eq!(report["timings"]["emit_s"], 0.0);
    assert_consistent(&report);
}

#[test]
fn report_file_holds_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    let run = run(args![example(), "--report", &path, "--target", X86]).ok();
    assert_eq!(run.stdout, "", "no table when stdout is not a terminal");
    let from_file = read_json(&path);
    let from_stdout = self::run(args![example(), "--report", "-", "--target", X86])
        .ok()
        .json();
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("timings");
        v
    };
    assert_eq!(strip(from_file), strip(from_stdout));
    assert_eq!(listing(dir.path()), BTreeSet::from(["report.json".into()]));
}

#[test]
fn object_defines_every_name_and_report_counts_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let (obj, rep) = (dir.path().join("out.o"), dir.path().join("report.json"));
    run(args![
        example(),
        "-o",
        &obj,
        "--report",
        &rep,
        "--target",
        X86,
        "-q"
    ])
    .ok();
    let bytes = std::fs::read(&obj).expect("object written");
    let file = object::File::parse(&*bytes).expect("an object file");
    assert_eq!(file.architecture(), object::Architecture::X86_64);
    assert_eq!(file.format(), object::BinaryFormat::Elf);
    let text: u64 = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| s.size())
        .sum();
    let report = read_json(&rep);
    assert_eq!(report["text_bytes"].as_u64(), Some(text));
    assert!(text > 0);
    assert!(report["compiled"].as_u64().expect("compiled") <= 11);
    assert_consistent(&report);
    let symbols = symbols(&bytes);
    for name in [
        "add_one",
        "add_one_again",
        "add_two",
        "twice_a",
        "twice_b",
        "sum_to",
        "sum_to_copy",
        "ping",
        "pong",
        "ping2",
        "pong2",
    ] {
        let s = symbols
            .get(name)
            .unwrap_or_else(|| panic!("{name} defined"));
        assert_eq!(s.scope, SymbolScope::Dynamic, "{name} is exported");
    }
    // Only the outputs asked for, no temporary file left.
    assert_eq!(
        listing(dir.path()),
        BTreeSet::from(["out.o".into(), "report.json".into()])
    );
}

#[test]
fn without_o_no_object_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_in(Some(dir.path()), args![example(), "--target", X86]).ok();
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr, "");
    assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
}

#[test]
fn target_option_wins_over_a_target_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("cli/target_line.clif");
    let arch = |triple: Option<&str>, name: &str| {
        let out = dir.path().join(name);
        let mut a = args![&input, "-o", &out, "--report", "-"];
        if let Some(t) = triple {
            a.extend(args!["--target", t]);
        }
        let report = run(a).ok().json();
        let bytes = std::fs::read(&out).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        // The preamble's `set opt_level=none` is ignored too, and the pair folds.
        assert_eq!(report["merged"], 1);
        (
            report["target"].as_str().unwrap().to_string(),
            file.architecture(),
            bytes,
        )
    };
    let (target, a, _) = arch(Some(X86), "x86.o");
    assert_eq!((target.as_str(), a), (X86, object::Architecture::X86_64));
    let (target, a, _) = arch(Some(ARM), "arm.o");
    assert_eq!((target.as_str(), a), (ARM, object::Architecture::Aarch64));
    // Without --target, the host: the same object as naming the host triple.
    let host = target_lexicon::Triple::host().to_string();
    let (target, _, default_bytes) = arch(None, "default.o");
    assert_eq!(target, host);
    let (_, _, host_bytes) = arch(Some(&host), "host.o");
    assert_eq!(default_bytes, host_bytes);
}

#[test]
fn set_options_reach_cranelift_and_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let text = |settings: &[&str]| {
        let mut a = args![
            fixture("cli/optimizable.clif"),
            "-o",
            dir.path().join("o.o"),
            "--report",
            "-",
            "--target",
            X86
        ];
        for s in settings {
            a.extend(args!["--set", s]);
        }
        run(a).ok().json()["text_bytes"].as_u64().unwrap()
    };
    let none = text(&["opt_level=none"]);
    let speed = text(&["opt_level=speed"]);
    assert!(speed < none, "opt_level=speed ({speed}) < none ({none})");
    // The last value of a repeated setting wins; ISA settings are accepted too.
    assert_eq!(text(&["opt_level=none", "opt_level=speed"]), speed);
    assert_eq!(text(&["opt_level=speed", "has_avx=true"]), speed);

    // is_pic defaults to true; --set is_pic=false and a second --set both apply.
    let relocs = |settings: &[&str]| {
        let out = dir.path().join("pic.o");
        let mut a = args![fixture("cli/callers.clif"), "-o", &out, "--target", X86];
        for s in settings {
            a.extend(args!["--set", s]);
        }
        run(a).ok();
        let bytes = std::fs::read(&out).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let kinds: BTreeSet<String> = file
            .sections()
            .flat_map(|s| s.relocations().collect::<Vec<_>>())
            .map(|(_, r)| format!("{:?}", r.flags()))
            .collect();
        (kinds, file.section_by_name(".text").map(|s| s.size()))
    };
    let (pic, _) = relocs(&[]);
    let (no_pic, _) = relocs(&["is_pic=false", "opt_level=speed"]);
    assert!(
        pic.iter().any(|k| k.contains("r_type: 9")),
        "a GOTPCREL relocation by default: {pic:?}"
    );
    assert!(
        !no_pic.iter().any(|k| k.contains("r_type: 9")),
        "no GOT relocation with is_pic=false: {no_pic:?}"
    );
}

#[test]
fn merge_functions_modes() {
    let dir = tempfile::tempdir().unwrap();
    let go = |mode: Option<&str>, extra: &[&str]| {
        let out = dir.path().join("m.o");
        let mut a = args![example(), "-o", &out, "--report", "-", "--target", X86];
        if let Some(m) = mode {
            a.extend(args!["--merge-functions", m]);
        }
        a.extend(extra.iter().map(OsString::from));
        let report = run(a).ok().json();
        assert_consistent(&report);
        (report, std::fs::read(&out).unwrap())
    };

    let (report, bytes) = go(Some("disabled"), &[]);
    assert_eq!(report["mode"], "disabled");
    assert_eq!(report["merged"], 0);
    assert_eq!(report["groups"], Value::Array(vec![]));
    assert_eq!(report["compiled"], 11);
    let s = symbols(&bytes);
    assert!(!same_address(&s["add_one"], &s["add_one_again"]));

    let (report, bytes) = go(Some("aliases"), &[]);
    assert_eq!(report["mode"], "aliases");
    assert_eq!(report["merged"], 5);
    assert_eq!(report["actions"]["alias"], 5);
    let s = symbols(&bytes);
    for (keep, folded) in [
        ("add_one", "add_one_again"),
        ("twice_a", "twice_b"),
        ("sum_to", "sum_to_copy"),
        ("ping", "ping2"),
        ("pong", "pong2"),
    ] {
        assert!(
            same_address(&s[keep], &s[folded]),
            "{folded} aliases {keep}"
        );
        assert_eq!(s[folded].scope, SymbolScope::Dynamic);
    }
    assert!(report["text_bytes"].as_u64() < go(Some("disabled"), &[]).0["text_bytes"].as_u64());

    // Trampolines is the default: exported functions keep distinct addresses.
    let (default, bytes) = go(None, &[]);
    let (explicit, _) = go(Some("trampolines"), &[]);
    assert_eq!(groups(&default), groups(&explicit));
    assert_eq!(default["actions"]["thunk"], 5);
    let s = symbols(&bytes);
    assert!(!same_address(&s["add_one"], &s["add_one_again"]));

    // --addresses-insignificant: trampolines mode, but no address is observed.
    let (report, bytes) = go(None, &["--addresses-insignificant"]);
    assert_eq!(report["actions"]["alias"], 5);
    assert!(groups(&report)
        .values()
        .flatten()
        .all(|(_, action)| action == "alias"));
    let s = symbols(&bytes);
    assert!(same_address(&s["add_one"], &s["add_one_again"]));
}

#[test]
fn function_sections_put_each_symbol_in_its_own_section() {
    let dir = tempfile::tempdir().unwrap();
    let sections = |extra: &[&str]| {
        let out = dir.path().join("fs.o");
        let mut a = args![example(), "-o", &out, "--target", X86];
        a.extend(extra.iter().map(OsString::from));
        run(a).ok();
        let s = symbols(&std::fs::read(&out).unwrap());
        assert_eq!(s.len(), 11, "every name is defined");
        s.values()
            .map(|sym| sym.section.expect("in a section").0)
            .collect::<BTreeSet<_>>()
            .len()
    };
    assert_eq!(sections(&[]), 1);
    assert_eq!(sections(&["--function-sections"]), 11);
}

#[test]
fn no_cycles_leaves_mutual_recursion_alone() {
    let report = run(args![
        example(),
        "--report",
        "-",
        "--no-cycles",
        "--target",
        X86
    ])
    .ok()
    .json();
    let g = groups(&report);
    assert!(
        !g.contains_key("%ping") && !g.contains_key("%pong"),
        "{g:?}"
    );
    assert!(g.contains_key("%add_one") && g.contains_key("%sum_to"));
    assert_consistent(&report);
}

#[test]
fn linkage_globs_match_names_without_percent_and_the_last_match_wins() {
    let dir = tempfile::tempdir().unwrap();
    let go = |rules: &[&str]| {
        let out = dir.path().join("l.o");
        let mut a = args![example(), "-o", &out, "--report", "-", "--target", X86];
        for r in rules {
            a.extend(args!["--linkage", r]);
        }
        let report = run(a).ok().json();
        assert_consistent(&report);
        (groups(&report), symbols(&std::fs::read(&out).unwrap()))
    };

    // Local and never address-taken: the folded one disappears, the kept one is local.
    let (g, s) = go(&["add_one*=local"]);
    assert_eq!(
        g["%add_one"],
        vec![("%add_one_again".to_string(), "erased".to_string())]
    );
    assert!(!s.contains_key("add_one_again"));
    assert_eq!(s["add_one"].scope, SymbolScope::Compilation);
    assert_eq!(s["add_two"].scope, SymbolScope::Dynamic, "default export");

    // The glob sees `add_one`, not `%add_one`.
    let (g, _) = go(&["%add_one*=local"]);
    assert_eq!(g["%add_one"][0].1, "thunk");

    // The last matching rule wins, whatever the order of specificity.
    let (g, s) = go(&["*=local", "add_one_again=export"]);
    assert_eq!(
        g["%add_one_again"],
        vec![("%add_one".to_string(), "erased".to_string())],
        "the external function is kept"
    );
    assert_eq!(s["add_one_again"].scope, SymbolScope::Dynamic);
    assert!(!s.contains_key("add_one"));
    let (g, _) = go(&["add_one_again=export", "*=local"]);
    assert_eq!(
        g["%add_one"],
        vec![("%add_one_again".to_string(), "erased".to_string())]
    );

    // Hidden: linkage-unit scope, and folded names stay as thunks.
    let (g, s) = go(&["*=hidden"]);
    assert_eq!(g["%add_one"][0].1, "thunk");
    assert!(s.values().all(|sym| sym.scope == SymbolScope::Linkage));

    // Preemptible: weak symbols, and the shared body moves to a local symbol.
    let (g, s) = go(&["add_one*=preemptible"]);
    assert!(g.contains_key("%add_one"));
    assert!(s["add_one"].weak && s["add_one_again"].weak);
    let body = s
        .iter()
        .find(|(n, _)| n.starts_with("clif_merge_body_"))
        .map(|(_, sym)| sym)
        .expect("a local body for the preemptible group");
    assert_eq!(body.scope, SymbolScope::Compilation);

    // u0:N names are matched as written.
    let report = run(args![
        fixture("cli/user_names.clif"),
        "--linkage",
        "u0:*=local",
        "--report",
        "-",
        "--target",
        X86
    ])
    .ok()
    .json();
    assert_eq!(
        groups(&report)["u0:1"],
        vec![("u0:2".to_string(), "erased".to_string())]
    );
}

#[test]
fn report_names_use_cranelift_spelling() {
    let report = run(args![
        fixture("cli/user_names.clif"),
        fixture("cli/callers.clif"),
        "--report",
        "-",
        "--target",
        X86
    ])
    .ok()
    .json();
    let g = groups(&report);
    assert_eq!(g["u0:1"], vec![("u0:2".to_string(), "thunk".to_string())]);
    assert_eq!(g["%dup1"], vec![("%dup2".to_string(), "thunk".to_string())]);
    assert_eq!(report["functions"], 8);
}

/// Parse CLIF text with cranelift-reader: name -> function.
fn parse_clif(text: &str) -> BTreeMap<String, cranelift_codegen::ir::Function> {
    cranelift_reader::parse_functions(text)
        .unwrap_or_else(|e| panic!("the merged CLIF does not parse: {e}\n{text}"))
        .into_iter()
        .map(|f| (FuncName::of_function(&f).to_string(), f))
        .collect()
}

/// Every function `func` calls, by name.
fn callees(func: &cranelift_codegen::ir::Function) -> BTreeSet<String> {
    func.dfg
        .ext_funcs
        .values()
        .map(|e| FuncName::of_external(func, &e.name).to_string())
        .collect()
}

#[test]
fn emit_clif_reads_back_and_merging_it_again_keeps_the_kept_functions() {
    let dir = tempfile::tempdir().unwrap();
    let (clif, r1, r2) = (
        dir.path().join("merged.clif"),
        dir.path().join("r1.json"),
        dir.path().join("r2.json"),
    );
    run(args![
        example(),
        "--emit-clif",
        &clif,
        "--report",
        &r1,
        "--target",
        X86
    ])
    .ok();
    let text = std::fs::read_to_string(&clif).unwrap();
    let functions = parse_clif(&text);
    let first = read_json(&r1);
    let input_names: BTreeSet<String> = parse_clif(&std::fs::read_to_string(example()).unwrap())
        .into_keys()
        .collect();
    assert_eq!(
        functions.keys().cloned().collect::<BTreeSet<_>>(),
        input_names,
        "every name survives as a body or a thunk"
    );
    // Thunks call the kept function.
    assert_eq!(
        callees(&functions["%add_one_again"]),
        BTreeSet::from(["%add_one".to_string()])
    );
    assert_eq!(
        callees(&functions["%twice_b"]),
        BTreeSet::from(["%twice_a".to_string()])
    );

    let second = run(args![&clif, "--report", "-", "--target", X86])
        .ok()
        .json();
    std::fs::write(&r2, second.to_string()).unwrap();
    assert_consistent(&second);
    assert_eq!(second["functions"], first["functions"]);
    let kept_first: BTreeSet<String> = &input_names - &folded_names(&first);
    // No two functions kept by the first run fold together, and none is folded at all.
    for (keep, members) in groups(&second) {
        let kept: Vec<&String> = std::iter::once(&keep)
            .chain(members.iter().map(|(n, _)| n))
            .filter(|n| kept_first.contains(*n))
            .collect();
        assert!(kept.len() <= 1, "the second run folds {kept:?} together");
    }
    assert!(
        folded_names(&second).is_disjoint(&kept_first),
        "the second run folds kept functions: {:?}",
        folded_names(&second)
            .intersection(&kept_first)
            .collect::<Vec<_>>()
    );
    // And it compiles.
    run(args![
        &clif,
        "-o",
        dir.path().join("again.o"),
        "--target",
        X86
    ])
    .ok();
}

/// The memory flags of each memory access, in layout order.
fn memory_flags(func: &cranelift_codegen::ir::Function) -> Vec<String> {
    let insts = func
        .layout
        .blocks()
        .flat_map(|b| func.layout.block_insts(b));
    insts
        .filter_map(|i| func.dfg.insts[i].memflags_data(&func.dfg))
        .map(|flags| {
            let region = flags
                .alias_region()
                .map(|r| func.dfg.alias_regions[r].user_id);
            format!("{flags} (region {region:?})")
        })
        .collect()
}

#[test]
fn emit_clif_keeps_the_memory_flags_of_atomic_accesses() {
    // Cranelift's printer leaves out those of `atomic_rmw` and `atomic_cas`: read back,
    // the merged CLIF would trap with other codes, or not at all, in other regions.
    let input = fixture("cli/atomics.clif");
    let read = parse_clif(&std::fs::read_to_string(&input).unwrap());
    let emitted = run(args![&input, "--emit-clif", "-", "--target", X86]).ok();
    let merged = parse_clif(&emitted.stdout);
    assert_eq!(
        callees(&merged["%rmw_b"]),
        BTreeSet::from(["%rmw_a".into()])
    );
    for kept in ["%rmw_a", "%rmw_c", "%rmw_d"] {
        assert_eq!(
            memory_flags(&merged[kept]),
            memory_flags(&read[kept]),
            "{kept}'s memory accesses as emitted:\n{}",
            emitted.stdout
        );
        assert!(callees(&merged[kept]).is_empty(), "{kept} is not folded");
    }
    assert_eq!(
        memory_flags(&read["%rmw_a"]),
        [
            " user3 little (region None)",
            " notrap aligned region0 (region Some(7))",
            " notrap aligned (region None)"
        ]
    );
    // Compiled, %rmw_d's code is %rmw_a's (a region only steers optimization) and folds
    // into it; %rmw_c's is too, byte for byte, but its trap carries another code, which an
    // embedder reads from the body's traps: it stays.
    let folded = run(args![
        &input,
        "-o",
        tempfile::tempdir().unwrap().path().join("atomics.o"),
        "--merge-functions",
        "aliases",
        "--report",
        "-",
        "--target",
        X86
    ])
    .ok()
    .json();
    assert_eq!(
        groups(&folded),
        BTreeMap::from([(
            "%rmw_a".to_string(),
            vec![
                ("%rmw_b".to_string(), "alias".to_string()),
                ("%rmw_d".to_string(), "alias".to_string())
            ]
        )])
    );
    // Emitted again from what it emitted: the same text.
    let dir = tempfile::tempdir().unwrap();
    emits_itself_again(&emitted.stdout, &dir.path().join("merged.clif"));
}

/// Write the merged CLIF `emitted` to `file` and emit it again from there: the same text.
#[track_caller]
fn emits_itself_again(emitted: &str, file: &Path) {
    std::fs::write(file, emitted).unwrap();
    let twice = run(args![file, "--emit-clif", "-", "--target", X86]).ok();
    assert_eq!(twice.stdout, emitted);
}

/// Each dynamic type `func` declares (`i32x4*gv0`), and each dynamic stack slot's type.
fn dynamic_types(func: &cranelift_codegen::ir::Function) -> (Vec<String>, Vec<String>) {
    let types = func.dfg.dynamic_types.iter();
    let slots = func.dynamic_stack_slots.values();
    (
        types
            .map(|(dt, d)| format!("{dt} = {}*{}", d.base_vector_ty, d.dynamic_scale))
            .collect(),
        slots.map(|slot| slot.dyn_ty.to_string()).collect(),
    )
}

#[test]
fn emit_clif_declares_dynamic_types() {
    // Cranelift's printer leaves them out: read back, a dynamic stack slot would name a
    // type that does not exist, and the function would not verify.
    let input = fixture("cli/dynamic_types.clif");
    let read = parse_clif(&std::fs::read_to_string(&input).unwrap());
    let emitted = run(args![&input, "--emit-clif", "-", "--target", X86]).ok();
    let merged = parse_clif(&emitted.stdout);
    assert_eq!(
        callees(&merged["%slot"]),
        BTreeSet::from(["%renumbered".into()])
    );
    for kept in ["%renumbered", "%wider"] {
        assert_eq!(
            dynamic_types(&merged[kept]),
            dynamic_types(&read[kept]),
            "{kept} as emitted:\n{}",
            emitted.stdout
        );
    }
    assert_eq!(
        dynamic_types(&read["%wider"]),
        (
            vec!["dt0 = i64x2*gv0".into()],
            vec!["dt0".into(), "dt0".into()]
        )
    );
    // Read back by the command itself (which verifies every function), compiled where
    // Cranelift lowers dynamic stack slots (aarch64; x86_64 says it does not), and
    // emitted again from what it emitted: the same text.
    let dir = tempfile::tempdir().unwrap();
    let again = dir.path().join("merged.clif");
    emits_itself_again(&emitted.stdout, &again);
    run(args![
        &again,
        "-o",
        dir.path().join("merged.o"),
        "--target",
        ARM
    ])
    .ok();
}

#[test]
fn emit_clif_redirects_callers_and_drops_erased_functions() {
    let go = |extra: &[&str]| {
        let mut a = args![
            fixture("cli/callers.clif"),
            "--emit-clif",
            "-",
            "--target",
            X86
        ];
        a.extend(extra.iter().map(OsString::from));
        let run = run(a).ok();
        (parse_clif(&run.stdout), run.stdout)
    };
    // Exported: %dup2 stays, as a thunk to %dup1; %use2 now calls %dup1.
    let (f, _) = go(&[]);
    assert_eq!(callees(&f["%use2"]), BTreeSet::from(["%dup1".to_string()]));
    assert_eq!(callees(&f["%dup2"]), BTreeSet::from(["%dup1".to_string()]));
    assert_eq!(
        callees(&f["%external_caller"]),
        BTreeSet::from(["%not_in_this_module".to_string()])
    );
    // Local: %dup2 is erased.
    let (f, _) = go(&["--linkage", "dup*=local"]);
    assert!(!f.contains_key("%dup2"));
    assert_eq!(callees(&f["%use2"]), BTreeSet::from(["%dup1".to_string()]));
    // Aliases are written as thunks, and marked.
    let (f, text) = go(&["--merge-functions", "aliases"]);
    assert_eq!(callees(&f["%dup2"]), BTreeSet::from(["%dup1".to_string()]));
    assert!(
        text.contains("; clif-merge: %dup2 is an alias of %dup1"),
        "{text}"
    );
}

#[test]
fn emit_clif_copies_a_body_that_reads_its_frame() {
    for mode in ["trampolines", "aliases"] {
        let run = run(args![
            fixture("cli/frame_readers.clif"),
            "--emit-clif",
            "-",
            "--merge-functions",
            mode,
            "--set",
            "preserve_frame_pointers=true",
            "--target",
            X86
        ])
        .ok();
        let f = parse_clif(&run.stdout);
        // %where2 is %where1's body under its own name: it calls nobody and reads its
        // own frame, as %where1 does.
        assert!(callees(&f["%where2"]).is_empty(), "{mode}: {}", run.stdout);
        assert_eq!(
            f["%where2"]
                .display()
                .to_string()
                .replace("%where2", "%where1"),
            f["%where1"].display().to_string(),
            "{mode}"
        );
        assert!(
            run.stdout
                .contains("; clif-merge: %where2 is a copy of %where1, which reads its frame (or its body does)"),
            "{mode}: {}",
            run.stdout
        );
        // A body that does not read its frame still gets a thunk.
        assert_eq!(
            callees(&f["%plain2"]),
            BTreeSet::from(["%plain1".to_string()]),
            "{mode}"
        );
    }
}

#[test]
fn emit_clif_takes_the_address_of_an_erased_function_at_its_body() {
    // `%l_b` folds into `%l_a` and is erased (local, and in `aliases` mode nobody compares
    // addresses): in the object its address is `%l_a`'s, however it is taken, so the CLIF
    // names `%l_a` wherever `%l_b`'s address was taken, and `%l_b` is gone.
    let run = run(args![
        fixture("exec/local_function_addresses.clif"),
        "--emit-clif",
        "-",
        "--merge-functions",
        "aliases",
        "--linkage",
        "l_*=local",
        "--target",
        X86
    ])
    .ok();
    let f = parse_clif(&run.stdout);
    assert!(!f.contains_key("%l_b"), "{}", run.stdout);
    assert_eq!(
        callees(&f["%same_b"]),
        BTreeSet::from(["%l_a".to_string(), "%l_get_a".to_string()]),
        "{}",
        run.stdout
    );
}

#[test]
fn branch_protection_keeps_tail_callee_holes_apart() {
    // The merged body would tail-call through a register (`br`), which lands on none of
    // Cranelift's `bti c` pads: with `use_bti`, neither merge-similar's holes nor merging
    // by alignment take such functions; without it, both do.
    let groups = |bti: bool| -> BTreeSet<(String, bool)> {
        let report = run(args![
            fixture("cli/tail_callee_holes.clif"),
            "--target",
            "aarch64-unknown-linux-gnu",
            "--merge-similar",
            "--set",
            format!("use_bti={bti}"),
            "--report",
            "-"
        ])
        .ok()
        .json();
        report["similar"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let members: Vec<&str> = g["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_str().unwrap())
                    .collect();
                (members.join(" "), g["aligned"].as_bool().unwrap_or(false))
            })
            .collect()
    };
    let both = |pairs: &[(&str, bool)]| -> BTreeSet<(String, bool)> {
        pairs.iter().map(|&(m, a)| (m.to_string(), a)).collect()
    };
    assert_eq!(
        groups(false),
        both(&[
            ("%callee_a %callee_b", false),
            ("%f_a %f_b", false),
            ("%g_a %g_b", true)
        ])
    );
    assert_eq!(groups(true), both(&[("%callee_a %callee_b", false)]));
}

#[test]
fn explain_says_why() {
    let explain = |a: &str, b: &str, extra: &[&str]| {
        let mut args = args![example(), "--target", X86, "--explain", a, b];
        args.extend(extra.iter().map(OsString::from));
        run(args)
    };
    assert_eq!(
        explain("%add_one", "%add_one_again", &[]).ok().stdout,
        "%add_one and %add_one_again are equal: they share one body\n"
    );
    assert_eq!(
        explain(
            "%add_one",
            "%add_one_again",
            &["--merge-functions", "disabled"]
        )
        .ok()
        .stdout,
        "%add_one and %add_one_again are equal\n"
    );
    let differ = explain("%add_one", "%add_two", &[]).ok().stdout;
    assert!(
        differ.starts_with("%add_one and %add_two differ\n"),
        "{differ}"
    );
    assert!(differ.contains("first difference:"), "{differ}");
    assert!(differ.contains("iconst.i32 1") && differ.contains("iconst.i32 2"));
    // The explanation goes with the report on stdout.
    let both = run(args![
        example(),
        "--explain",
        "%ping",
        "%ping2",
        "--report",
        "-",
        "--target",
        X86
    ])
    .ok()
    .stdout;
    assert!(both.contains("%ping and %ping2 are equal: they share one body\n"));
    // u0:N names.
    let u = run(args![
        fixture("cli/user_names.clif"),
        "--explain",
        "u0:1",
        "u0:3"
    ])
    .ok()
    .stdout;
    assert!(u.starts_with("u0:1 and u0:3 differ\n"), "{u}");

    let message = explain("%add_one", "%nope", &[]).error();
    assert!(
        message.contains("no function %nope in the input"),
        "{message}"
    );
    let message = explain("add_one", "%add_two", &[]).error();
    assert!(
        message.contains("`add_one` is not a function name"),
        "{message}"
    );
}

#[test]
fn explain_shows_the_alignment_when_not_even_similar() {
    let explain = |a: &str, b: &str, extra: &[&str]| {
        let mut args = args![
            fixture("align/explain.clif"),
            "--target",
            X86,
            "--explain",
            a,
            b
        ];
        args.extend(extra.iter().map(OsString::from));
        run(args).ok().stdout
    };
    for extra in [&[][..], &["--merge-similar"][..]] {
        let text = explain("%scale_add", "%scale_sub_logged", extra);
        assert!(
            text.starts_with("%scale_add and %scale_sub_logged differ\n"),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.starts_with("alignment of %scale_add and %scale_sub_logged"))
            .unwrap_or_else(|| panic!("no alignment:\n{text}"));
        // The first line of the alignment that holds `needle`.
        let at = |needle: &str| {
            header
                + lines[header..]
                    .iter()
                    .position(|l| l.contains(needle))
                    .unwrap_or_else(|| panic!("no line with `{needle}`:\n{text}"))
        };
        // Lines that print the same are printed once; the rest side by side, marked.
        assert_eq!(lines[header + 1], "    block0(v0: i32, v1: i32)", "{text}");
        let constant = lines[at("v2 = iconst.i32 5")];
        assert!(
            constant.starts_with("  = v2 = iconst.i32 3 ")
                && constant.ends_with("| v2 = iconst.i32 5"),
            "{text}"
        );
        let call = lines[at("call fn0(v3)")];
        assert!(
            call.starts_with("  > ")
                && call
                    .trim_start_matches("  > ")
                    .trim_start()
                    .starts_with("| call fn0(v3)"),
            "{text}"
        );
        let opcode = lines[at("isub.i32")];
        assert!(
            opcode.starts_with("  ! v4 = iadd.i32 v3, v1") && opcode.ends_with("(opcode)"),
            "{text}"
        );
        assert_eq!(lines[at("return v6")], "    return v6", "{text}");
        assert!(
            text.contains("summary: 77% of instructions matched (5 of 6 in %scale_add, 5 of 7 in %scale_sub_logged"),
            "{text}"
        );
        assert!(
            text.contains("1 opcode difference(s) on the same types, 0 type difference(s)"),
            "{text}"
        );
        assert!(
            text.contains("why holes do not merge them: a body with holes is shared only when everything but constants, offsets and callees is equal; here: 1 instruction with another opcode, 1 instruction on one side only\n"),
            "{text}"
        );
        // Merging by alignment says what it makes of them, only when it runs.
        assert_eq!(
            text.contains(
                "merging by alignment: not merged: the two thunks (20 bytes) take at least what \
                 sharing the smaller function (about "
            ),
            !extra.is_empty(),
            "{text}"
        );
        assert_eq!(
            text.contains("merging by alignment"),
            !extra.is_empty(),
            "{text}"
        );
    }
    // Why merging by alignment declines: other block counts, other signatures.
    let similar = ["--merge-similar"];
    assert!(explain("%sum_loop", "%sum_loop_twice", &similar)
        .contains("merging by alignment: not merged: they have other numbers of blocks\n"),);
    assert!(explain("%scale_add", "%scale_wide", &similar).contains(
        "merging by alignment: not merged: their signatures differ beyond parameters of one a \
         prefix of the other's\n"
    ));
    // Other types, and another block.
    let wide = explain("%scale_add", "%scale_wide", &[]);
    assert!(
        wide.contains("6 instructions on other types, 1 block with other parameters"),
        "{wide}"
    );
    assert!(wide.contains("the signatures differ"), "{wide}");
    let blocks = explain("%sum_loop", "%sum_loop_twice", &[]);
    assert!(
        blocks.contains("2 instructions on one side only, 1 block on one side only"),
        "{blocks}"
    );
    assert!(
        blocks.contains("  >                      | block4(v8: i64)\n"),
        "{blocks}"
    );
    // Equal up to holes: no alignment (merge-similar's own explanation says the rest).
    for extra in [&[][..], &["--merge-similar"][..]] {
        let similar = run({
            let mut args = args![
                example(),
                "--target",
                X86,
                "--explain",
                "%add_one",
                "%add_two"
            ];
            args.extend(extra.iter().map(OsString::from));
            args
        })
        .ok()
        .stdout;
        assert!(!similar.contains("alignment of"), "{similar}");
    }
    // Equal: nothing to align.
    assert!(!explain("%scale_add", "%scale_add", &[]).contains("alignment of"));
    // Unknown names are errors, not panics.
    let message = run(args![
        fixture("align/explain.clif"),
        "--explain",
        "%scale_add",
        "%scale_mul"
    ])
    .error();
    assert!(
        message.contains("no function %scale_mul in the input"),
        "{message}"
    );
}

#[test]
fn explain_says_why_alignment_declined_a_pair() {
    let verdict_with = |a: &str, b: &str, options: &[&str]| {
        let mut command = args![
            fixture("similar/aligned.clif"),
            "--target",
            X86,
            "--merge-similar"
        ];
        command.extend(options.iter().map(OsString::from));
        command.extend(args!["--explain", a, b]);
        let text = run(command).ok().stdout;
        text.lines()
            .find_map(|l| l.strip_prefix("merging by alignment: not merged: "))
            .unwrap_or_else(|| panic!("no verdict:\n{text}"))
            .to_string()
    };
    let verdict = |a: &str, b: &str| verdict_with(a, b, &[]);
    let starts = |a: &str, b: &str, expected: &str| {
        let v = verdict(a, b);
        assert!(v.starts_with(expected), "{a} {b}: {v}");
    };
    starts("%ret_a", "%ret_b", "their signatures differ");
    starts("%blk_a", "%blk_b", "they have other numbers of blocks");
    starts("%jt_a", "%jt_b", "their blocks do not all pair");
    // With unlike blocks allowed, blocks need not pair: the verdict names only what still
    // stops the body (here the jump tables).
    let unlike = verdict_with("%jt_a", "%jt_b", &["--align-unlike-blocks"]);
    assert!(
        unlike.starts_with("their entry blocks, terminators or stack limits do not pair")
            && unlike.contains("jump tables"),
        "{unlike}"
    );
    starts(
        "%call_a",
        "%term_b",
        "the two thunks (20 bytes) take at least what",
    );
    starts(
        "%ext_a",
        "%call_a",
        "the merged body and its thunks (about ",
    );
}

#[test]
fn explain_says_where_a_pair_that_would_pay_went_instead() {
    // %st_a and %st_c differ in an offset only: one group of holes. %st_a and %st_b would
    // pay merged by alignment, but %st_a is taken.
    let text = run(args![
        fixture("cli/aligned_partner_taken_by_a_group.clif"),
        "--target",
        X86,
        "--merge-similar",
        "--explain",
        "%st_a",
        "%st_b"
    ])
    .ok()
    .stdout;
    assert!(
        text.contains(
            "but they were not merged together: %st_a shares %clif_merge_similar_st_a with \
             %st_a, %st_c\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("merging by alignment: as a pair they would pay (about "),
        "{text}"
    );
}

#[test]
fn explain_says_when_alignment_merged_two_functions() {
    let explain = |extra: &[&str]| {
        let mut args = args![
            fixture("exec/aligned_extra_pure_instructions.clif"),
            "--target",
            X86,
            "--merge-similar",
            "--explain",
            "%pure_a",
            "%pure_b"
        ];
        args.extend(extra.iter().map(OsString::from));
        run(args).ok().stdout
    };
    let merged = explain(&[]);
    assert!(
        merged.contains(
            "merge-similar: merged by alignment into the body %clif_merge_similar_aligned_pure_a (its \
             last parameter the function identifier: 1 runs %pure_a, 0 runs %pure_b)"
        ),
        "{merged}"
    );
    // What holes make of them comes first, then what alignment did; nothing contradicts it.
    let (holes, aligned) = (
        merged
            .find("why holes do not merge them")
            .expect("the holes' reason"),
        merged.find("merged by alignment").expect("the merge"),
    );
    assert!(holes < aligned, "{merged}");
    assert!(!merged.contains("merging by alignment: "), "{merged}");
    let apart = explain(&["--no-alignment-merging"]);
    assert!(!apart.contains("merged by alignment"), "{apart}");
    assert!(!apart.contains("merging by alignment"), "{apart}");
    assert!(
        apart.contains("alignment of %pure_a and %pure_b"),
        "{apart}"
    );
}

#[test]
fn no_progress_or_table_off_a_terminal_and_both_on_one() {
    // Off a terminal (pipes), with and without --quiet: nothing but what was asked for.
    for quiet in [false, true] {
        let mut a = args![example(), "--target", X86];
        if quiet {
            a.push("--quiet".into());
        }
        let run = run(a).ok();
        assert_eq!((run.stdout.as_str(), run.stderr.as_str()), ("", ""));
    }
    // On a terminal, through script(1) when it is there.
    let Ok(script) = which("script") else {
        eprintln!("skipping the terminal half: script(1) not found");
        return;
    };
    let on_terminal = |quiet: &str| {
        let command = format!(
            "'{}' '{}' --target {X86} {quiet}",
            env!("CARGO_BIN_EXE_clif-merge"),
            example().display()
        );
        let out = Command::new(&script)
            .args(["-qec", &command, "/dev/null"])
            .output()
            .expect("script runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = on_terminal("");
    assert!(
        shown.contains(&format!("clif-merge: {X86} (trampolines mode)")),
        "{shown}"
    );
    assert!(shown.contains("functions read") && shown.contains("11"));
    assert!(
        shown.contains("reading") || shown.contains("merging"),
        "a progress bar"
    );
    for quiet in ["-q", "--quiet"] {
        let shown = on_terminal(quiet);
        assert!(!shown.contains("functions read"), "{shown}");
        assert!(!shown.contains("merging"), "{shown}");
    }
}

fn which(program: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}

#[test]
fn directories_are_searched_recursively_in_sorted_order() {
    let tree = fixture("cli/tree");
    let report = run(args![&tree, "--report", "-", "--target", X86])
        .ok()
        .json();
    // b.clif, a/c.clif, a/nested/d.clif: the .txt file is not read.
    assert_eq!(report["functions"], 5);
    assert_eq!(
        groups(&report)["%tree_b"],
        vec![
            ("%tree_c".to_string(), "thunk".to_string()),
            ("%tree_d2".to_string(), "thunk".to_string())
        ]
    );
    // The first definition is the first in sorted path order: m/y.clif before z.clif.
    let dup = fixture("cli/dup_tree");
    let message = run(args![&dup]).error();
    let first = dup.join("m").join("y.clif");
    let second = dup.join("z.clif");
    assert_eq!(
        message.trim_end(),
        format!(
            "error: function %same_in_tree is defined twice: at {}:2 and at {}:1",
            first.display(),
            second.display()
        )
    );
}

#[test]
fn object_bytes_do_not_depend_on_input_order_or_threads() {
    let dir = tempfile::tempdir().unwrap();
    let tree = fixture("cli/tree");
    let files = [
        tree.join("b.clif"),
        tree.join("a/c.clif"),
        tree.join("a/nested/d.clif"),
    ];
    let object = |inputs: Vec<OsString>, threads: Option<&str>| {
        let out = dir.path().join("d.o");
        let mut a = inputs;
        a.extend(args![
            "-o",
            &out,
            "--target",
            X86,
            "--set",
            "opt_level=speed"
        ]);
        if let Some(n) = threads {
            a.extend(args!["--threads", n]);
        }
        run(a).ok();
        std::fs::read(&out).unwrap()
    };
    let reference = object(args![&tree], None);
    let forward: Vec<OsString> = files.iter().map(OsString::from).collect();
    let backward: Vec<OsString> = files.iter().rev().map(OsString::from).collect();
    let mixed = args![&files[1], &files[2], &files[0]];
    assert!(reference == object(forward.clone(), None), "files in order");
    assert!(
        reference == object(backward, None),
        "files in reverse order"
    );
    assert!(reference == object(mixed, None), "files in another order");
    for n in ["1", "2", "4"] {
        assert!(reference == object(args![&tree], Some(n)), "--threads {n}");
    }
    // The example too (recursion, cycles, thunks), with the example split in two.
    let text = std::fs::read_to_string(example()).unwrap();
    let cut = text
        .find("; Sum of 1..n")
        .expect("the example has this comment");
    let (one, two) = (dir.path().join("one.clif"), dir.path().join("two.clif"));
    std::fs::write(&one, &text[..cut]).unwrap();
    std::fs::write(&two, &text[cut..]).unwrap();
    let whole = object(args![example()], Some("1"));
    assert!(whole == object(args![&one, &two], Some("2")));
    assert!(whole == object(args![&two, &one], None));
}

// ---------------------------------------------------------------------------------------
// Errors: exit status 1, a message that says where, and nothing left at the outputs.

/// Run `args` with all three outputs in a fresh directory where stale files already sit
/// at those paths; the run must fail with status 1, its message must contain every one
/// of `expected`, and none of the outputs (nor a temporary file) may remain.
#[track_caller]
fn fails_cleanly(inputs: Vec<OsString>, extra: &[&str], expected: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let outs = [
        dir.path().join("out.o"),
        dir.path().join("report.json"),
        dir.path().join("merged.clif"),
    ];
    let mut messages = Vec::new();
    for stale in [true, false] {
        if stale {
            for p in &outs {
                std::fs::write(p, "stale output of an earlier run").unwrap();
            }
        }
        let mut a = inputs.clone();
        a.extend(args![
            "-o",
            &outs[0],
            "--report",
            &outs[1],
            "--emit-clif",
            &outs[2]
        ]);
        if !extra.contains(&"--target") {
            a.extend(args!["--target", X86]);
        }
        a.extend(extra.iter().map(OsString::from));
        let message = run(a).error();
        for e in expected {
            assert!(message.contains(e), "expected `{e}` in: {message}");
        }
        assert!(
            listing(dir.path()).is_empty(),
            "left behind (stale outputs before: {stale}): {:?}",
            listing(dir.path())
        );
        messages.push(message);
    }
    assert_eq!(messages[0], messages[1]);
    messages.pop().unwrap()
}

#[test]
fn parse_error_names_file_and_line() {
    let file = fixture("cli/parse_error.clif");
    let message = fails_cleanly(args![&file], &[], &[]);
    assert_eq!(
        message.trim_end(),
        format!("error: {}:8: undefined operand value v9", file.display())
    );
}

#[test]
fn verifier_error_names_the_function_and_the_verifier_words() {
    let file = fixture("cli/verify_error.clif");
    let message = fails_cleanly(
        args![&file],
        &[],
        &[
            &format!("{}:8: function %bad fails verification:", file.display()),
            "result 0 has type i64, must match function signature of i32",
        ],
    );
    assert!(!message.contains("%fine"), "{message}");
}

#[test]
fn a_name_defined_twice_names_both_places() {
    let (a, b) = (fixture("cli/dup_a.clif"), fixture("cli/dup_b.clif"));
    let message = fails_cleanly(args![&a, &b], &[], &[]);
    assert_eq!(
        message.trim_end(),
        format!(
            "error: function %same is defined twice: at {}:2 and at {}:6",
            a.display(),
            b.display()
        )
    );
    // Given twice, one file defines everything twice.
    fails_cleanly(args![&a, &a], &[], &["function %same is defined twice"]);
}

#[test]
fn empty_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.clif");
    std::fs::write(&empty, "").unwrap();
    fails_cleanly(
        args![&empty],
        &[],
        &["no functions in the input", "empty.clif"],
    );
    fails_cleanly(
        args![fixture("cli/comments_only.clif")],
        &[],
        &["no functions in the input", "comments_only.clif"],
    );
}

#[test]
fn unknown_target_is_an_error() {
    fails_cleanly(
        args![example()],
        &["--target", "no_such_arch-unknown-linux-gnu"],
        &["unknown target no_such_arch-unknown-linux-gnu"],
    );
    // Known to target-lexicon, but no Cranelift backend in this build.
    fails_cleanly(
        args![example()],
        &["--target", "riscv64gc-unknown-linux-gnu"],
        &["unsupported target riscv64gc-unknown-linux-gnu"],
    );
}

#[test]
fn unknown_or_bad_settings_are_errors() {
    fails_cleanly(
        args![example()],
        &["--set", "no_such_setting=1"],
        &[
            "setting `no_such_setting=1`",
            "No existing setting named 'no_such_setting'",
        ],
    );
    fails_cleanly(
        args![example()],
        &["--set", "opt_level=fastest"],
        &["setting `opt_level=fastest`"],
    );
    // Also without -o: the settings are checked before anything is read.
    let message = run(args![example(), "--set", "no_such_setting=1"]).error();
    assert!(message.contains("no_such_setting"), "{message}");
}

#[test]
fn a_directory_without_clif_files_is_an_error() {
    let dir = fixture("cli/no_clif");
    fails_cleanly(
        args![&dir],
        &[],
        &[&format!(
            "{}: no .clif files in this directory",
            dir.display()
        )],
    );
}

#[test]
fn a_file_that_is_not_text_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("binary.clif");
    std::fs::write(&binary, b"\x7fELF\x02\x01\x01\x00\xff\xfe").unwrap();
    fails_cleanly(
        args![&binary],
        &[],
        &[&format!("{}: not a text file", binary.display())],
    );
    // UTF-8 with a NUL byte is not text either.
    let nul = dir.path().join("nul.clif");
    std::fs::write(&nul, "function %f() {\0}\n").unwrap();
    fails_cleanly(args![&nul], &[], &["nul.clif: not a text file"]);
}

#[test]
fn a_missing_input_is_an_error() {
    let missing = fixture("cli/does_not_exist.clif");
    fails_cleanly(
        args![&missing],
        &[],
        &[&missing.display().to_string(), "No such file"],
    );
}

#[test]
fn a_code_generation_error_leaves_nothing_behind() {
    // The error names the place the function was read from.
    let file = fixture("cli/codegen_error.clif");
    fails_cleanly(
        args![&file],
        &["--set", "opt_level=speed"],
        &[&format!(
            "{}:3: function %wide: code generation failed",
            file.display()
        )],
    );
}

#[test]
fn input_that_cranelift_would_panic_on_is_an_error() {
    // The parser's own assertion: a parse error on the line that trips it.
    let file = fixture("fuzz/parser_assert_dynamic_type.clif");
    fails_cleanly(
        args![&file],
        &[],
        &[&format!(
            "{}:8: the CLIF parser failed: expected vector type",
            file.display()
        )],
    );
    for (name, words) in [
        ("function_without_blocks", "the function has no blocks"),
        (
            "vmctx_entry_block_mismatch",
            "entry block parameters (0) must match function signature (4)",
        ),
        (
            "stack_limit_undefined",
            "stack_limit: undefined global value gv2",
        ),
        (
            "global_value_base_undefined",
            "gv2: undefined global value gv4",
        ),
        (
            "dynamic_slot_undefined_type",
            "dss0: undefined dynamic type dt3",
        ),
    ] {
        fails_cleanly(
            args![fixture(&format!("fuzz/{name}.clif"))],
            &[],
            &["fails verification", words],
        );
    }
}

#[test]
fn a_failed_write_removes_the_other_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (obj, rep) = (dir.path().join("out.o"), dir.path().join("report.json"));
    std::fs::write(&rep, "stale").unwrap();
    // The merged CLIF cannot be written (its directory does not exist): the object and
    // the report, written first, must not stay, and neither must the stale report.
    let bad = dir.path().join("missing_dir").join("merged.clif");
    let message = run(args![
        example(),
        "-o",
        &obj,
        "--report",
        &rep,
        "--emit-clif",
        &bad,
        "--target",
        X86
    ])
    .error();
    assert!(message.contains(&bad.display().to_string()), "{message}");
    assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
    // An output path that is a directory.
    let message = run(args![example(), "-o", dir.path(), "--target", X86]).error();
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    assert!(dir.path().is_dir());
}

#[test]
fn an_error_never_deletes_an_input_named_as_an_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("broken.clif");
    let text = std::fs::read(fixture("cli/parse_error.clif")).unwrap();
    std::fs::write(&input, &text).unwrap();
    let obj = dir.path().join("out.o");
    std::fs::write(&obj, "stale").unwrap();
    // The same file spelled another way, and a directory input holding the output.
    let spelled = dir.path().join(".").join("broken.clif");
    let message = run(args![&input, "--emit-clif", &spelled, "-o", &obj]).error();
    assert!(message.contains("undefined operand value v9"), "{message}");
    assert_eq!(std::fs::read(&input).unwrap(), text, "the input is intact");
    assert!(!obj.exists(), "the stale object is removed");
    let message = run(args![dir.path(), "--emit-clif", &input]).error();
    assert!(message.contains("broken.clif:8:"), "{message}");
    assert_eq!(std::fs::read(&input).unwrap(), text, "the input is intact");
}

// ---------------------------------------------------------------------------------------
// Usage errors: exit status 2, clap's message, nothing written.

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.o");
    let cases: Vec<(Vec<OsString>, &str)> = vec![
        (args![], "required arguments were not provided"),
        (args![example(), "--bogus"], "unexpected argument '--bogus'"),
        (
            args![example(), "--merge-functions", "sometimes"],
            "invalid value 'sometimes' for '--merge-functions <MODE>'",
        ),
        (
            args![example(), "--linkage", "foo=global"],
            "unknown linkage `global`",
        ),
        (
            args![example(), "--linkage", "foo"],
            "`foo` is not GLOB=LINKAGE",
        ),
        (args![example(), "--linkage", "[=local"], "bad glob `[`"),
        (
            args![example(), "--set", "opt_level"],
            "`opt_level` is not NAME=VALUE",
        ),
        (
            args![example(), "--explain", "%add_one"],
            "--explain <A> <B>",
        ),
        (
            args![example(), "--threads", "many"],
            "invalid value 'many'",
        ),
        (
            args![example(), "-o"],
            "a value is required for '-o <FILE>'",
        ),
    ];
    for (mut a, expected) in cases {
        let shown = format!("{a:?}");
        if !a.is_empty() && !a.iter().any(|x| x == "-o") {
            a.extend(args!["-o", &out]);
        }
        let run = run(a);
        assert_eq!(run.code, Some(2), "{shown}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{shown}: {}", run.stderr);
        assert!(run.stderr.starts_with("error: "), "{}", run.stderr);
        assert!(!out.exists(), "{shown} wrote an object");
    }
    // --help and --version are not errors.
    let help = run(args!["--help"]).ok().stdout;
    for option in [
        "--target",
        "--set",
        "-o <FILE>",
        "--merge-functions",
        "--linkage",
        "--addresses-insignificant",
        "--report",
        "--emit-clif",
        "--explain",
        "--quiet",
        "--threads",
    ] {
        assert!(help.contains(option), "--help lists {option}");
    }
    assert!(run(args!["--version"])
        .ok()
        .stdout
        .starts_with("clif-merge "));
}

// ---------------------------------------------------------------------------------------
// Merge-similar.

#[test]
fn merge_similar_rewrites_reports_and_does_not_depend_on_order_or_threads() {
    let dir = tempfile::tempdir().unwrap();
    let similar = fixture("similar");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&similar)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "clif"))
        .collect();
    files.sort();
    let out = dir.path().join("s.o");
    let report = dir.path().join("s.json");
    let object_with = |inputs: Vec<OsString>, threads: &str, extra: &[&str]| {
        let mut a = inputs;
        a.extend(args![
            "-o",
            &out,
            "--report",
            &report,
            "--target",
            X86,
            "--set",
            "opt_level=speed",
            "--set",
            "preserve_frame_pointers=true",
            "--merge-similar",
            "--threads",
            threads
        ]);
        a.extend(extra.iter().map(OsString::from));
        run(a).ok();
        (std::fs::read(&out).unwrap(), read_json(&report))
    };
    let object = |inputs: Vec<OsString>, threads: &str| object_with(inputs, threads, &[]);
    let forward: Vec<OsString> = files.iter().map(OsString::from).collect();
    let (reference, json) = object(forward.clone(), "1");
    let groups = json["similar"]["groups"]
        .as_array()
        .expect("a similar section");
    assert!(!groups.is_empty(), "nothing merged: {json}");
    // Every name read is still defined, and the shared bodies are local symbols.
    let syms = symbols(&reference);
    for g in groups {
        for m in g["members"].as_array().unwrap() {
            let name = m.as_str().unwrap().trim_start_matches('%');
            assert!(syms.contains_key(name), "{name} is not defined");
        }
        let body = g["body"].as_str().unwrap().trim_start_matches('%');
        assert!(syms.contains_key(body), "{body} is not defined");
        assert!(g["bytes_after"].as_u64() < g["bytes_before"].as_u64());
    }
    let functions_read = json["functions"].as_u64().unwrap();
    let defined_in_files: u64 = files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .matches("\nfunction ")
                .count() as u64
        })
        .sum();
    assert_eq!(functions_read, defined_in_files);
    let backward: Vec<OsString> = files.iter().rev().map(OsString::from).collect();
    assert!(
        reference == object(backward, "2").0,
        "files in reverse order"
    );
    for n in ["2", "4"] {
        assert!(reference == object(forward.clone(), n).0, "--threads {n}");
    }
    // With unlike blocks too (the search rounds among other keys, whole-function
    // alignment, the dominance repair), on bodies that have them.
    let unlike = ["--align-unlike-blocks"];
    let (reference, json) = object_with(forward.clone(), "1", &unlike);
    let unlike_groups = json["similar"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["unlike_blocks"] == true)
        .count();
    assert!(unlike_groups > 0, "no body with unlike blocks: {json}");
    let backward: Vec<OsString> = files.iter().rev().map(OsString::from).collect();
    assert!(
        reference == object_with(backward, "2", &unlike).0,
        "--align-unlike-blocks, files in reverse order"
    );
    for n in ["2", "4"] {
        assert!(
            reference == object_with(forward.clone(), n, &unlike).0,
            "--align-unlike-blocks, --threads {n}"
        );
    }
    // Without the flag there is no similar section.
    let mut plain = forward;
    plain.extend(args!["--target", X86, "--report", "-"]);
    let plain = run(plain).ok();
    assert!(plain.json()["similar"].is_null());
}

#[test]
fn explain_with_merge_similar_lists_the_holes_and_the_shared_body() {
    let explain_in = |file: &str, a: &str, b: &str| {
        run(args![
            &fixture(file),
            "--target",
            X86,
            "--merge-similar",
            "--explain",
            a,
            b
        ])
        .ok()
        .stdout
    };
    let run_explain = |a: &str, b: &str| explain_in("similar/constants.clif", a, b);
    let text = run_explain("%narrow_a", "%narrow_c");
    assert!(text.contains("%narrow_a and %narrow_c differ"), "{text}");
    assert!(
        text.contains("with holes they are similar: 1 hole(s) hold different values"),
        "{text}"
    );
    assert!(text.contains("left:  iconst.i32 -2147483648"), "{text}");
    assert!(text.contains("right: iconst.i32 7"), "{text}");
    assert!(text.contains("merge-similar:"), "{text}");
    let text = run_explain("%f64_half", "%f64_third");
    assert!(
        text.contains("with holes they are similar: 1 hole(s) hold different values"),
        "{text}"
    );
    assert!(
        text.contains("left:  f64const 0x1.0000000000000p-1"),
        "{text}"
    );
    assert!(
        text.contains("right: f64const 0x1.5555555555555p-2"),
        "{text}"
    );
    let text = run_explain("%vec_a", "%vec_b");
    assert!(text.contains("with holes they still differ"), "{text}");
    assert!(text.contains("constant"), "{text}");

    // Memory flags: the permissions that differ, and what became of them.
    let run_explain = |a: &str, b: &str| explain_in("similar/memory_flags.clif", a, b);
    let text = run_explain("%plain", "%aligned_notrap");
    assert!(
        text.contains("with holes they are similar: 2 hole(s) hold different values"),
        "{text}"
    );
    assert!(
        text.contains("left:  memory flags without permissions"),
        "{text}"
    );
    assert!(
        text.contains("right: memory flags notrap aligned  (a shared body keeps what both allow)"),
        "{text}"
    );
    assert!(
        text.contains("merge-similar: they needed no parameter"),
        "{text}"
    );
    let text = run_explain("%plain", "%user_trap");
    assert!(text.contains("with holes they still differ"), "{text}");
    assert!(text.contains("memory flags"), "{text}");
}

/// cranelift-object panics on a relocation its object format cannot hold; the command
/// says which function and what to do instead. aarch64 code compiled with `is_pic` (the
/// command's default) reaches other functions through the GOT, which cranelift-object
/// writes into ELF and Mach-O only: for Windows on aarch64 (COFF) the run fails with
/// status 1, names the function and suggests `--set is_pic=false`, and writes nothing;
/// with it, the object is arm64 COFF, and links into a DLL when `lld-link` is installed.
#[test]
fn an_object_format_that_cannot_hold_a_relocation_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.obj");
    let fixture = fixture("unwind/throw_through.clif");
    let triple = "aarch64-pc-windows-msvc";
    let message = run([
        fixture.as_os_str(),
        "--target".as_ref(),
        triple.as_ref(),
        "--merge-functions".as_ref(),
        "aliases".as_ref(),
        "--merge-similar".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .error();
    assert!(
        message.contains("defining %") && message.contains("--set is_pic=false"),
        "the message names the function and the way out: {message}"
    );
    assert!(!out.exists(), "a failed run wrote an object");

    run([
        fixture.as_os_str(),
        "--target".as_ref(),
        triple.as_ref(),
        "--set".as_ref(),
        "is_pic=false".as_ref(),
        "--merge-functions".as_ref(),
        "aliases".as_ref(),
        "--merge-similar".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .ok();
    let bytes = std::fs::read(&out).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    assert_eq!(file.format(), object::BinaryFormat::Coff);
    assert_eq!(file.architecture(), object::Architecture::Aarch64);
    let have_lld_link = Command::new("lld-link")
        .arg("/?")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_lld_link {
        eprintln!("skipping the link: needs lld-link (Debian: lld)");
        return;
    }
    // No entry point and `cb` left unresolved: every relocation of the object resolved by
    // the linker, nothing run.
    let dll = dir.path().join("m.dll");
    let link = Command::new("lld-link")
        .args(["/dll", "/noentry", "/machine:arm64", "/force:unresolved"])
        .arg(format!("/out:{}", dll.display()))
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        link.status.success() && dll.exists(),
        "lld-link failed: {}",
        String::from_utf8_lossy(&link.stderr)
    );
}
