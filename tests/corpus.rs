//! The command on the real corpora in `../shared/corpus/{re2,sqlite,zstd}` (CLIF written by
//! wasmtime for three WebAssembly modules, one function per file): it finishes, the object
//! links with `ld.lld -shared` and keeps every name, the report says what was folded and
//! agrees with the object, the merged CLIF merged again folds none of the kept functions,
//! and the object does not depend on the order of the files or the number of threads.
//!
//! Where `../shared/corpus` is absent, each test says so in one line and passes.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SectionKind};
use serde_json::Value;

const X86: &str = "x86_64-unknown-linux-gnu";
const SETTINGS: [&str; 4] = [
    "--set",
    "preserve_frame_pointers=true",
    "--set",
    "opt_level=speed",
];

/// The corpus directory, or `None` (with a notice) when it is absent.
fn corpus(name: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("shared")
        .join("corpus")
        .join(name);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipping the {name} corpus: {} is absent", dir.display());
        None
    }
}

fn ld_lld() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("ld.lld"))
        .find(|p| p.is_file());
    on_path
        .or_else(|| Some(PathBuf::from("/usr/bin/ld.lld")).filter(|p| p.is_file()))
        .expect("ld.lld is needed to link the corpus objects (apt-get install lld)")
}

/// The corpus files, sorted, and the name of the function each defines.
fn functions(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable corpus")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "clif"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable CLIF");
            let header = text
                .lines()
                .find_map(|l| l.strip_prefix("function "))
                .unwrap_or_else(|| panic!("{} defines no function", path.display()));
            let name = header.split('(').next().expect("a name").trim().to_string();
            (path, name)
        })
        .collect()
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    seconds: f64,
}

fn run(args: Vec<OsString>) -> Run {
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_clif-merge"))
        .args(args)
        .output()
        .expect("the command runs");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        seconds: start.elapsed().as_secs_f64(),
    }
}

#[track_caller]
fn succeeded(what: &str, run: &Run) {
    assert_eq!(
        run.code,
        Some(0),
        "{what} failed:\n{}{}",
        run.stdout,
        run.stderr
    );
}

/// `keep -> [(folded, as)]`.
fn groups(report: &Value) -> BTreeMap<String, Vec<(String, String)>> {
    report["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            let folded = g["folded"]
                .as_array()
                .expect("folded")
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

/// The report agrees with itself and names only functions of `names`.
#[track_caller]
fn assert_consistent(report: &Value, names: &BTreeSet<String>) {
    let groups = groups(report);
    let folded: Vec<&(String, String)> = groups.values().flatten().collect();
    assert_eq!(report["merged"].as_u64(), Some(folded.len() as u64));
    for action in ["erased", "alias", "thunk"] {
        let n = folded.iter().filter(|(_, a)| a == action).count() as u64;
        assert_eq!(report["actions"][action].as_u64(), Some(n), "{action}");
    }
    let mut seen = BTreeSet::new();
    for (keep, members) in &groups {
        assert!(!members.is_empty());
        for name in std::iter::once(keep).chain(members.iter().map(|(n, _)| n)) {
            assert!(
                names.contains(name),
                "{name} is not a function of the input"
            );
            assert!(seen.insert(name.clone()), "{name} is in two groups");
        }
    }
}

fn folded_names(report: &Value) -> BTreeSet<String> {
    groups(report)
        .into_values()
        .flatten()
        .map(|(n, _)| n)
        .collect()
}

/// What is checked on one corpus.
struct Expect {
    /// At least this many functions folded.
    min_merged: u64,
    /// Also check that the object does not depend on file order and threads.
    determinism: bool,
}

fn check_corpus(name: &str, expect: Expect) {
    let Some(dir) = corpus(name) else {
        return;
    };
    let started = Instant::now();
    let inputs = functions(&dir);
    let names: BTreeSet<String> = inputs.iter().map(|(_, n)| n.clone()).collect();
    assert_eq!(names.len(), inputs.len(), "one function per file");

    let tmp = tempfile::tempdir().expect("temporary directory");
    let (obj, report_path, clif) = (
        tmp.path().join(format!("{name}.o")),
        tmp.path().join(format!("{name}.json")),
        tmp.path().join(format!("{name}.clif")),
    );
    let mut args: Vec<OsString> = vec![dir.clone().into()];
    args.extend(SETTINGS.iter().map(OsString::from));
    args.extend([
        OsString::from("-o"),
        obj.clone().into(),
        "--report".into(),
        report_path.clone().into(),
        "--emit-clif".into(),
        clif.clone().into(),
        "--target".into(),
        X86.into(),
        "-q".into(),
    ]);
    let first = run(args);
    succeeded(name, &first);
    assert_eq!(first.stderr, "");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).expect("report written"))
            .expect("report is JSON");
    assert_consistent(&report, &names);
    assert_eq!(report["functions"].as_u64(), Some(names.len() as u64));
    let merged = report["merged"].as_u64().expect("merged");
    assert!(
        merged >= expect.min_merged,
        "{name}: {merged} folded, expected at least {}",
        expect.min_merged
    );

    // The report's text size is the object's.
    let bytes = std::fs::read(&obj).expect("object written");
    let file = object::File::parse(&*bytes).expect("an object file");
    assert_eq!(file.architecture(), object::Architecture::X86_64);
    let text: u64 = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| s.size())
        .sum();
    assert!(text > 0);
    assert_eq!(report["text_bytes"].as_u64(), Some(text));

    // It links as a shared library that still defines every name: thunks at their own
    // address, aliases at the body's.
    let so = tmp.path().join(format!("lib{name}.so"));
    let link = Command::new(ld_lld())
        .arg("-shared")
        .arg(&obj)
        .arg("-o")
        .arg(&so)
        .output()
        .expect("ld.lld runs");
    assert!(
        link.status.success(),
        "ld.lld -shared failed on the {name} object:\n{}",
        String::from_utf8_lossy(&link.stderr)
    );
    let so_bytes = std::fs::read(&so).expect("library written");
    let library = object::File::parse(&*so_bytes).expect("a shared library");
    let exported: BTreeMap<String, u64> = library
        .dynamic_symbols()
        .filter(|s| s.is_definition())
        .map(|s| (s.name().expect("name").to_string(), s.address()))
        .collect();
    let erased: BTreeSet<String> = groups(&report)
        .into_values()
        .flatten()
        .filter(|(_, a)| a == "erased")
        .map(|(n, _)| n)
        .collect();
    for n in names.difference(&erased) {
        assert!(
            exported.contains_key(n),
            "{n} is not exported by lib{name}.so"
        );
    }
    for (keep, members) in groups(&report) {
        for (folded, action) in members {
            match action.as_str() {
                "thunk" => assert_ne!(exported[&folded], exported[&keep], "{folded} thunk"),
                "alias" => assert_eq!(exported[&folded], exported[&keep], "{folded} alias"),
                _ => {}
            }
        }
    }

    // The merged CLIF, merged again: every name is there, and none of the functions the
    // first run kept is folded now (thunks may fold into each other).
    let mut args: Vec<OsString> = vec![clif.clone().into()];
    args.extend(SETTINGS.iter().map(OsString::from));
    args.extend(["--report", "-", "--target", X86].map(OsString::from));
    let again = run(args);
    succeeded("merging the merged CLIF", &again);
    let second: Value = serde_json::from_str(&again.stdout).expect("JSON on stdout");
    let surviving: BTreeSet<String> = names.difference(&erased).cloned().collect();
    assert_consistent(&second, &surviving);
    assert_eq!(
        second["functions"].as_u64(),
        Some(surviving.len() as u64),
        "every function not erased is in the merged CLIF"
    );
    let kept_first: BTreeSet<String> = &names - &folded_names(&report);
    let refolded: Vec<String> = folded_names(&second)
        .intersection(&kept_first)
        .cloned()
        .collect();
    assert!(
        refolded.is_empty(),
        "{name}: the second run folds {} functions the first kept, e.g. {:?}",
        refolded.len(),
        refolded.iter().take(5).collect::<Vec<_>>()
    );
    for (keep, members) in groups(&second) {
        let kept: Vec<&String> = std::iter::once(&keep)
            .chain(members.iter().map(|(n, _)| n))
            .filter(|n| kept_first.contains(*n))
            .collect();
        assert!(kept.len() <= 1, "the second run folds {kept:?} together");
    }

    // The same object from the files in reverse order on one thread.
    if expect.determinism {
        let reversed = tmp.path().join("reversed.o");
        let mut args: Vec<OsString> = inputs.iter().rev().map(|(p, _)| p.into()).collect();
        args.extend(SETTINGS.iter().map(OsString::from));
        args.push("-o".into());
        args.push(reversed.clone().into());
        args.extend(["--target", X86, "--threads", "1", "-q"].map(OsString::from));
        let run = run(args);
        succeeded("the reversed run", &run);
        let other = std::fs::read(&reversed).expect("object written");
        assert!(
            other == bytes,
            "{name}: the object depends on file order or threads"
        );
    }

    eprintln!(
        "{name}: {} functions, {merged} folded ({} groups), .text {text} bytes; \
         clif-merge {:.1} s, merging the merged CLIF {:.1} s, test {:.1} s",
        names.len(),
        groups(&report).len(),
        first.seconds,
        again.seconds,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn re2() {
    // About 1,370 of re2's functions are exact duplicates (the corpus README).
    check_corpus(
        "re2",
        Expect {
            min_merged: 1300,
            determinism: true,
        },
    );
}

#[test]
fn sqlite() {
    check_corpus(
        "sqlite",
        Expect {
            min_merged: 0,
            determinism: false,
        },
    );
}

#[test]
fn zstd() {
    check_corpus(
        "zstd",
        Expect {
            min_merged: 0,
            determinism: true,
        },
    );
}
