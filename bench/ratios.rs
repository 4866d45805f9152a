//! The compile-time ratios of issue #14, as the command line measures them.
//!
//! The merge stage runs once per process, and its first run pays for memory it touches for
//! the first time (bench/README §10), which a criterion loop over the library never sees.
//! So this bench runs the command itself, once per measurement, with `--report`: on re2
//! unless `CLIF_MERGE_RATIO_CORPUS` names another corpus (`sqlite`, `zstd`); x86_64,
//! `--set preserve_frame_pointers=true --set opt_level=speed -o`, one thread unless
//! `CLIF_MERGE_RATIO_THREADS` says otherwise. There are four runs: compiling every
//! function (`disabled`), identical merging (`aliases`), merge-similar's holes alone, and
//! merge-similar with alignment merging. The runs alternate, `CLIF_MERGE_RATIO_RUNS` times
//! (5 by default), so that a slow moment of the machine does not fall on one of them alone.
//!
//! For each merging run it prints its best merge stage, that stage's share of compiling
//! every function (the issue asks for at most 5%), and its best merge + codegen + fold
//! against compiling every function (at most 0.75×). "Compiling every function" is the
//! best code generation of the `disabled` run.
//!
//! `cargo bench --bench ratios` (about 1 minute here). Under `cargo test --benches` it runs
//! once, on zstd, as a smoke test. Without `../shared/corpus` it says so and stops.

mod common;

use std::path::Path;
use std::process::Command;

/// The runs, by name, and the options that make them.
const RUNS: [(&str, &[&str]); 4] = [
    (
        "compiling every function",
        &["--merge-functions", "disabled"],
    ),
    (
        "identical merging (aliases)",
        &["--merge-functions", "aliases"],
    ),
    (
        "merge-similar, holes only",
        &[
            "--merge-functions",
            "aliases",
            "--merge-similar",
            "--no-alignment-merging",
        ],
    ),
    (
        "merge-similar with alignment",
        &["--merge-functions", "aliases", "--merge-similar"],
    ),
];

/// The stage timings of one run, in seconds.
#[derive(Clone, Copy)]
struct Timings {
    merge: f64,
    codegen: f64,
    fold: f64,
}

impl Timings {
    fn merge_codegen_fold(&self) -> f64 {
        self.merge + self.codegen + self.fold
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let corpus = match full {
        true => std::env::var("CLIF_MERGE_RATIO_CORPUS").unwrap_or_else(|_| "re2".into()),
        false => "zstd".into(),
    };
    let corpus = corpus.as_str();
    let Some(dir) = common::corpus_dir(corpus) else {
        eprintln!("skipping the ratios: ../shared/corpus/{corpus} is absent");
        return;
    };
    let runs: usize = match full {
        true => env_number("CLIF_MERGE_RATIO_RUNS", 5),
        false => 1,
    };
    let threads = env_number("CLIF_MERGE_RATIO_THREADS", 1);
    let scratch = std::env::temp_dir().join(format!("clif-merge-ratios-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("a scratch directory");

    let mut measured: Vec<Vec<Timings>> = vec![Vec::new(); RUNS.len()];
    for _ in 0..runs {
        for ((_, options), times) in RUNS.iter().zip(&mut measured) {
            times.push(run(&dir, &scratch, threads, options));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);

    let all = measured[0]
        .iter()
        .map(|t| t.codegen)
        .fold(f64::INFINITY, f64::min);
    println!(
        "{corpus}, x86_64, {threads} thread(s), best of {runs}: compiling every function {:.1} ms",
        all * 1e3
    );
    println!(
        "{:<30} {:>12} {:>7} {:>24}",
        "run", "merge stage", "share", "(merge+codegen+fold)/all"
    );
    for ((name, _), times) in RUNS.iter().zip(&measured).skip(1) {
        let merge = times.iter().map(|t| t.merge).fold(f64::INFINITY, f64::min);
        let best = times
            .iter()
            .map(Timings::merge_codegen_fold)
            .fold(f64::INFINITY, f64::min);
        println!(
            "{name:<30} {:>9.1} ms {:>6.1}% {:>24.3}",
            merge * 1e3,
            100.0 * merge / all,
            best / all
        );
    }
}

/// One run of the command with `options` on `dir`, its object and report in `scratch`.
fn run(dir: &Path, scratch: &Path, threads: usize, options: &[&str]) -> Timings {
    let (object, report) = (scratch.join("out.o"), scratch.join("report.json"));
    let status = Command::new(env!("CARGO_BIN_EXE_clif-merge"))
        .args(["-q", "--threads", &threads.to_string()])
        .args(
            // The settings every number is measured with; the command sets `is_pic` itself.
            (common::SETTINGS.iter())
                .filter(|(name, _)| *name != "is_pic")
                .flat_map(|(name, value)| ["--set".to_string(), format!("{name}={value}")]),
        )
        .args(options)
        .arg("-o")
        .arg(&object)
        .arg("--report")
        .arg(&report)
        .arg(dir)
        .status()
        .expect("the clif-merge command runs");
    assert!(status.success(), "clif-merge {options:?} failed: {status}");
    let text = std::fs::read_to_string(&report).expect("the report was written");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the report is JSON");
    let seconds = |key: &str| {
        json["timings"][key]
            .as_f64()
            .unwrap_or_else(|| panic!("the report has timings.{key}"))
    };
    Timings {
        merge: seconds("merge_s"),
        codegen: seconds("codegen_s"),
        fold: seconds("fold_s"),
    }
}

/// The number in the environment variable `name`, or `default`.
fn env_number(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, not `{text}`")),
        Err(_) => default,
    }
}
