//! The `aot` and `jit` examples, built by cargo and run as a user runs them: merging must not
//! change what the program prints (AOT with and without the pass, and the JIT), it must
//! make the code smaller, and it must fold exactly the functions that are equal.
//!
//! The examples are built once (`cargo build --example aot --example jit`, in the profile
//! these tests were built in) and each run once; every test reads those runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use cranelift_object::object::{self, Object as _, ObjectSection as _, ObjectSymbol as _};

/// Functions in the example program, and inputs each is called with.
const FUNCTIONS: usize = 35;
const INPUTS: usize = 4;

/// What the pass must fold in the example program: (folded, kept, action in an object,
/// found by). Generic instantiations marked `unnamed_addr` become aliases; the others keep
/// their own address through a thunk.
const FOLDED: [(&str, &str, &str, &str); 14] = [
    ("sum_to_u64", "sum_to_i64", "alias", "tree"),
    ("sum_to_isize", "sum_to_i64", "alias", "tree"),
    ("sum_to_usize", "sum_to_i64", "alias", "tree"),
    ("hash_u64", "hash_i64", "alias", "tree"),
    ("hash_usize", "hash_i64", "alias", "tree"),
    ("clamp_seconds", "clamp_meters", "alias", "tree"),
    ("clamp_percent", "clamp_meters", "alias", "tree"),
    // Equal only once their callees are folded.
    ("checksum_u64", "checksum_i64", "thunk", "tree"),
    // Self-recursive copies.
    ("fact_b", "fact_a", "thunk", "tree"),
    ("fact_c", "fact_a", "thunk", "tree"),
    ("fib_b", "fib_a", "thunk", "tree"),
    // The mutually recursive pair of pairs.
    ("is_even_b", "is_even_a", "thunk", "cycle"),
    ("is_odd_b", "is_odd_a", "thunk", "cycle"),
    // Calling the host, whose failure unwinds through them.
    ("via_host_b", "via_host_a", "thunk", "tree"),
];

/// Functions that look like others but differ, by a constant or an operation (`ping2` only
/// through its callee `pong2`): each must keep its own body.
const DIFFERENT: [(&str, &str); 7] = [
    ("hash_alt", "hash_i64"),
    ("fact_twice", "fact_a"),
    ("ping2", "ping"),
    ("pong2", "pong"),
    ("add_2", "add_1"),
    ("scale_sub", "scale_add"),
    ("poly_8", "poly_7"),
];

struct AotRun {
    /// What the example printed.
    report: String,
    object: PathBuf,
    exe: PathBuf,
    /// What the executable printed.
    output: String,
}

struct JitRun {
    /// Standard output: the results.
    results: String,
    /// Standard error: what the pass did.
    report: String,
}

struct Runs {
    aot: AotRun,
    aot_unmerged: AotRun,
    jit: JitRun,
    jit_unmerged: JitRun,
}

fn check(what: &str, output: Output) -> Output {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("UTF-8 output")
}

/// The cargo profile this test was built with, for building the examples with it (and
/// reusing what it built): the name of the directory above the test's `deps`, where the
/// dev profile's is `debug`.
fn this_profile() -> String {
    let exe = std::env::current_exe().expect("the test's executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .and_then(|d| d.to_str())
        .expect("tests run from target/<profile>/deps");
    match dir {
        "debug" => "dev".to_owned(),
        profile => profile.to_owned(),
    }
}

/// Build both examples with cargo and return the paths of their executables.
fn build_examples() -> (PathBuf, PathBuf) {
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .arg("build")
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .args(["--example", "aot", "--example", "jit"])
        .arg("--message-format=json-render-diagnostics");
    cargo.args(["--profile", &this_profile()]);
    let output = check(
        "cargo build --example aot --example jit",
        cargo.output().unwrap(),
    );
    let mut aot = None;
    let mut jit = None;
    for line in text(output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let executable = message["executable"].as_str().map(PathBuf::from);
        match (
            message["reason"].as_str(),
            message["target"]["name"].as_str(),
        ) {
            (Some("compiler-artifact"), Some("aot")) => aot = executable,
            (Some("compiler-artifact"), Some("jit")) => jit = executable,
            _ => {}
        }
    }
    (
        aot.expect("cargo reported the aot example's executable"),
        jit.expect("cargo reported the jit example's executable"),
    )
}

fn run_aot(aot: &Path, exe: &Path, flags: &[&str]) -> AotRun {
    let output = check(
        "the aot example",
        Command::new(aot)
            .args(flags)
            .arg("-o")
            .arg(exe)
            .output()
            .unwrap(),
    );
    let report = text(output.stdout);
    let written = |what: &str| {
        let prefix = format!("wrote {what}: ");
        let path = report
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| {
                panic!("the aot example does not say where it wrote the {what}:\n{report}")
            });
        PathBuf::from(path)
    };
    let (object, written_exe) = (written("object"), written("executable"));
    assert_eq!(written_exe, exe, "written where -o asked");
    let output = text(check("the aot executable", Command::new(exe).output().unwrap()).stdout);
    AotRun {
        report,
        object,
        exe: written_exe,
        output,
    }
}

fn run_jit(jit: &Path, flags: &[&str]) -> JitRun {
    let output = check(
        "the jit example",
        Command::new(jit).args(flags).output().unwrap(),
    );
    JitRun {
        results: text(output.stdout),
        report: text(output.stderr),
    }
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let (aot, jit) = build_examples();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("examples");
        Runs {
            aot: run_aot(&aot, &dir.join("merged/demo"), &[]),
            aot_unmerged: run_aot(&aot, &dir.join("unmerged/demo"), &["--no-merge"]),
            jit: run_jit(&jit, &[]),
            jit_unmerged: run_jit(&jit, &["--no-merge"]),
        }
    })
}

/// Size of the `.text` section of an object file or executable.
fn text_size(path: &Path) -> u64 {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.section_by_name(".text")
        .unwrap_or_else(|| panic!("{} has no .text", path.display()))
        .size()
}

/// The number the example printed after `label`.
fn reported(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` in:\n{report}"))
}

/// The folded functions the example listed: (folded, kept, action, found by).
fn listed(report: &str) -> BTreeSet<(String, String, String, String)> {
    report
        .lines()
        .filter_map(|l| {
            let (folded, rest) = l.strip_prefix("  ")?.split_once(" -> ")?;
            let (kept, rest) = rest.split_once(" (")?;
            let (action, found_by) = rest.strip_suffix(')')?.split_once(", found by ")?;
            Some((folded.into(), kept.into(), action.into(), found_by.into()))
        })
        .collect()
}

#[test]
fn aot_executable_prints_the_same_with_merging_on_and_off() {
    let runs = runs();
    let (merged, unmerged) = (&runs.aot.output, &runs.aot_unmerged.output);
    // One line per call, and the host's failure caught through the merged code.
    assert_eq!(merged.lines().count(), FUNCTIONS * INPUTS + 1, "{merged}");
    assert_eq!(merged, unmerged, "merging changed what the program prints");
    // And what it prints is right: folded copies compute what their kept function does,
    // and look-alikes that differ still compute their own results.
    for line in [
        "sum_to_usize(7) = 91",
        "sum_to_i64(20) = 2470",
        "clamp_percent(20) = 10",
        "checksum_u64(0) = 0",
        "fact_c(20) = 2432902008176640000",
        "fact_twice(7) = 10080",
        "fib_b(20) = 6765",
        "is_even_b(20) = 1",
        "is_odd_b(7) = 1",
        "is_odd_a(20) = 0",
        "ping(7) = 13",
        "ping2(7) = 10",
        "add_2(7) = 9",
        "scale_sub(7) = 20",
        "scale_add(7) = 22",
        "poly_8(7) = 274",
        "via_host_b(7) = 16",
        "via_host_b(-1) failed in the host, caught outside: host_check: negative input",
    ] {
        assert!(
            merged.lines().any(|l| l == line),
            "missing `{line}`:\n{merged}"
        );
    }
}

#[test]
fn merging_makes_text_smaller() {
    let runs = runs();
    let (merged, unmerged) = (&runs.aot, &runs.aot_unmerged);
    let object = (text_size(&merged.object), text_size(&unmerged.object));
    let exe = (text_size(&merged.exe), text_size(&unmerged.exe));
    eprintln!("object .text {} merged, {} unmerged", object.0, object.1);
    eprintln!("executable .text {} merged, {} unmerged", exe.0, exe.1);
    // Reported honestly.
    assert_eq!(reported(&merged.report, "object .text bytes: "), object.0);
    assert_eq!(reported(&unmerged.report, "object .text bytes: "), object.1);
    assert_eq!(reported(&merged.report, "executable .text bytes: "), exe.0);
    assert_eq!(
        reported(&unmerged.report, "executable .text bytes: "),
        exe.1
    );
    // Smaller by the folded bodies, less the thunks' jumps (5 bytes each) and the
    // alignment padding each removed body may shift onto the next (up to 15 bytes).
    let data = std::fs::read(&unmerged.object).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let folded_bytes: u64 = FOLDED
        .iter()
        .map(|(name, ..)| {
            file.symbols()
                .find(|s| s.name() == Ok(*name))
                .unwrap_or_else(|| panic!("no {name} in the unmerged object"))
                .size()
        })
        .sum();
    let thunks = FOLDED.iter().filter(|f| f.2 == "thunk").count() as u64;
    let bound = object.1 - folded_bytes + thunks * 5 + FOLDED.len() as u64 * 15;
    assert!(
        object.0 < object.1 && object.0 <= bound,
        "merged .text {} (unmerged {}, folded bodies {folded_bytes}, bound {bound})",
        object.0,
        object.1
    );
    assert!(
        exe.0 < exe.1,
        "executable .text {} merged, {} unmerged",
        exe.0,
        exe.1
    );
}

#[test]
fn jit_prints_the_same_results_as_the_aot_executable() {
    let runs = runs();
    assert_eq!(runs.jit.results, runs.aot.output, "JIT (merged) vs AOT");
    // cranelift-jit registers no unwind information for what it compiles itself, so the
    // unmerged JIT cannot let the host's failure cross its frames and skips that call.
    let caught = "via_host_b(-1) failed in the host, caught outside: host_check: negative input\n";
    assert!(runs.jit.results.ends_with(caught), "{}", runs.jit.results);
    assert_eq!(
        format!("{}{caught}", runs.jit_unmerged.results),
        runs.aot.output,
        "JIT (unmerged) vs AOT"
    );
}

#[test]
fn expected_functions_are_folded() {
    let runs = runs();
    let expected = |in_jit: bool| -> BTreeSet<(String, String, String, String)> {
        FOLDED
            .iter()
            .map(|&(folded, kept, action, found_by)| {
                // A JIT has no aliases.
                let action = if in_jit { "thunk" } else { action };
                (folded.into(), kept.into(), action.into(), found_by.into())
            })
            .collect()
    };
    let aot = &runs.aot.report;
    assert!(
        aot.contains(
            "functions: 35\nfolded: 14 (7 aliases, 7 thunks, 0 copies; 21 bodies compiled)\n"
        ),
        "{aot}"
    );
    assert_eq!(listed(aot), expected(false), "{aot}");
    let jit = &runs.jit.report;
    assert!(
        jit.contains(
            "functions: 35\nfolded: 14 (0 aliases, 14 thunks, 0 copies; 21 bodies compiled)\n"
        ),
        "{jit}"
    );
    assert_eq!(listed(jit), expected(true), "{jit}");
    for report in [&runs.aot_unmerged.report, &runs.jit_unmerged.report] {
        assert!(report.contains("folded: 0 (merging off)"), "{report}");
        assert!(listed(report).is_empty(), "{report}");
    }

    // The object says the same: an alias is its kept function's address, a thunk is a
    // single jump of its own, and look-alikes that differ keep their own bodies.
    let data = std::fs::read(&runs.aot.object).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let symbol = |name: &str| {
        let s = file
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no symbol {name}"));
        assert!(s.is_global(), "{name} is exported");
        (s.address(), s.size())
    };
    for (folded, kept, action, _) in FOLDED {
        let (f, k) = (symbol(folded), symbol(kept));
        match action {
            "alias" => assert_eq!(f, k, "{folded} is an alias of {kept}"),
            _ => {
                assert_ne!(f.0, k.0, "{folded} has its own address");
                assert_eq!(f.1, 5, "{folded} is one jmp rel32");
            }
        }
    }
    for (a, b) in DIFFERENT {
        let (sa, sb) = (symbol(a), symbol(b));
        assert_ne!(sa.0, sb.0, "{a} and {b} differ");
        assert!(sa.1 > 5 && sb.1 > 5, "{a} and {b} are bodies, not thunks");
    }
}

/// `examples/drop_in.rs`: a compiler written against `impl cranelift_module::Module` runs
/// unchanged on `MergingModule<JITModule>`, gets the same results, and compiles fewer
/// bodies.
#[test]
fn drop_in_example_runs_unchanged_with_the_wrapper() {
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .arg("run")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .args(["--example", "drop_in"]);
    cargo.args(["--profile", &this_profile()]);
    let output = check("cargo run --example drop_in", cargo.output().unwrap());
    let stdout = text(output.stdout);
    let stderr = text(output.stderr);
    assert!(
        stdout.contains("same results with and without merging"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("pair_u64(3) = 25"), "{stdout}");
    // square_u64 and pair_u64 fold into square_i64 and pair_i64: 4 bodies for 6 functions.
    assert!(
        stderr.contains("6 functions, 4 bodies compiled"),
        "{stderr}"
    );
}
