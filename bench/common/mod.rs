//! What the benches and `tests/baseline.rs` share: where the corpora are, how a corpus
//! becomes a [`Module`], the target and Cranelift settings every measurement uses, one
//! emission measured the way the command line reports it, and where criterion keeps its
//! estimates.
//!
//! Included with `#[path = "../bench/common/mod.rs"] mod common;` (tests) or
//! `mod common;` (benches); not every includer uses every item.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use clif_merge::emit::{build_isa, EmitOptions};
use clif_merge::emit_object;
use clif_merge::merge::similar::{merge_similar, SimilarOptions};
use clif_merge::merge::{Linkage, MergeMode, MergeOptions, Module};
use clif_merge::report::{Report, Timings};
use clif_merge::TargetInfo;
use cranelift_codegen::isa::OwnedTargetIsa;

/// The corpora, in the order they are reported.
pub const CORPORA: [&str; 3] = ["re2", "sqlite", "zstd"];

/// The target every number is measured for.
pub const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// The Cranelift settings every number is measured with (what the README's corpus
/// command passes, plus the command line's default `is_pic=true`).
pub const SETTINGS: [(&str, &str); 3] = [
    ("is_pic", "true"),
    ("preserve_frame_pointers", "true"),
    ("opt_level", "speed"),
];

/// `../shared/corpus/NAME` beside the repository, when it exists.
pub fn corpus_dir(name: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus")
        .join(name);
    dir.is_dir().then_some(dir)
}

/// The corpora that are present; prints a one-line notice for each absent one.
pub fn present_corpora(who: &str) -> Vec<(&'static str, PathBuf)> {
    CORPORA
        .iter()
        .filter_map(|&name| match corpus_dir(name) {
            Some(dir) => Some((name, dir)),
            None => {
                eprintln!("{who}: skipping {name}: ../shared/corpus/{name} is absent");
                None
            }
        })
        .collect()
}

pub fn target() -> TargetInfo {
    TargetInfo::from_triple_str(TRIPLE).expect("x86_64 is a known target")
}

pub fn settings() -> Vec<(String, String)> {
    SETTINGS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn isa() -> OwnedTargetIsa {
    build_isa(&target(), &settings()).expect("the x86_64 backend is built in")
}

/// Read a corpus directory into a module, every function `Export` (the command line's
/// default linkage), in name order like the command line.
pub fn load_module(dir: &Path) -> Module {
    let mut functions = clif_merge::read::read_inputs(&[dir.to_path_buf()])
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    // In name order, as the command line builds its module (merge-similar decides in
    // module order, so another order can give another object).
    functions.sort_by_cached_key(|p| clif_merge::FuncName::of_function(&p.func));
    let mut module = Module::with_capacity(functions.len());
    for p in functions {
        module
            .add(p.func, Linkage::Export, false)
            .expect("corpus names are unique");
    }
    module
}

pub fn mode_name(mode: MergeMode) -> &'static str {
    match mode {
        MergeMode::Aliases => "aliases",
        MergeMode::Trampolines => "trampolines",
        MergeMode::Disabled => "disabled",
    }
}

/// A copy of `module` (a [`Module`] is not `Clone`; merge-similar consumes one).
pub fn copy_module(module: &Module) -> Module {
    let mut out = Module::new();
    for (_, m) in module.iter() {
        out.add(m.func.clone(), m.linkage, m.unnamed_addr)
            .expect("the names of a valid module");
    }
    out
}

/// What merge-similar did in one emission (`--merge-similar`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Similar {
    /// Names turned into thunks into a shared body.
    pub thunks: usize,
    /// Shared bodies added.
    pub bodies: usize,
    /// Groups of similar functions the cost model turned down.
    pub rejected_by_cost: usize,
    /// Names both folded by the identical merger and counted as similar thunks (equal
    /// thunks of one class fold again; counted once in [`Emitted::folded_or_thunked`]).
    pub overlap: usize,
    /// `.text` bytes saved by the groups merged, by the pass's own measure.
    pub bytes_saved: u64,
    /// Seconds in `merge_similar` (identical classes, hole encoding, building the shared
    /// bodies and thunks, and the cost model's size estimates).
    pub pass_s: f64,
}

/// One emission, counted the way the command line's report counts it.
pub struct Emitted {
    pub object: Vec<u8>,
    /// Functions read (with merge-similar: not counting the shared bodies it added).
    pub functions: usize,
    /// Functions folded into another (the report's `merged`: copies of bodies no larger
    /// than a thunk do not count).
    pub folded: usize,
    /// Bodies compiled.
    pub compiled: usize,
    /// Bytes in the object's text sections.
    pub text_bytes: u64,
    /// Seconds in `clif_merge::merge`.
    pub merge_s: f64,
    /// Seconds compiling (as `emit_object` measures it).
    pub codegen_s: f64,
    /// Seconds for the whole emission, including code generation.
    pub emit_total_s: f64,
    /// What merge-similar did, when it ran.
    pub similar: Option<Similar>,
}

impl Emitted {
    /// Names that no longer have a body of their own: folded by the identical merger, or
    /// (with merge-similar) turned into a thunk into a shared body, each counted once.
    pub fn folded_or_thunked(&self) -> usize {
        self.folded + self.similar.map_or(0, |s| s.thunks - s.overlap)
    }
}

/// Run the pass in `mode` and write the object, as
/// `clif-merge DIR --set preserve_frame_pointers=true --set opt_level=speed
///  --merge-functions MODE [--function-sections] -o OUT` does.
pub fn emit(module: &Module, mode: MergeMode, per_function_section: bool) -> Emitted {
    emit_module(module, mode, per_function_section, None)
}

/// Run merge-similar and then the pass in `mode`, and write the object, as
/// `clif-merge DIR --set preserve_frame_pointers=true --set opt_level=speed
///  --merge-functions MODE --merge-similar -o OUT` does. Also returns the rewritten module
/// (thunks in place of the similar functions, shared bodies appended).
pub fn emit_similar(module: &Module, mode: MergeMode) -> (Emitted, Module) {
    let options = cli_options(mode);
    let start = Instant::now();
    let (rewritten, report) = merge_similar(
        copy_module(module),
        &target(),
        &*isa(),
        &options,
        &SimilarOptions::default(),
    );
    let pass_s = start.elapsed().as_secs_f64();
    let members: std::collections::HashSet<&str> = report
        .groups
        .iter()
        .flat_map(|g| g.members.iter().map(String::as_str))
        .collect();
    let similar = Similar {
        thunks: report.thunk_count(),
        bodies: report.groups.len(),
        rejected_by_cost: report.rejected_by_cost,
        overlap: 0,
        bytes_saved: report.bytes_saved(),
        pass_s,
    };
    let mut e = emit_module(&rewritten, mode, false, Some((similar, &members)));
    e.functions = module.len();
    (e, rewritten)
}

/// The merge options the command line uses in `mode`: an object's aliases are symbols
/// at their body, so functions taking the addresses of functions folded as aliases of
/// each other fold like their callers (`MergeOptions::aliases_share_address`).
fn cli_options(mode: MergeMode) -> MergeOptions {
    MergeOptions {
        mode,
        aliases_share_address: true,
        ..Default::default()
    }
}

fn emit_module(
    module: &Module,
    mode: MergeMode,
    per_function_section: bool,
    similar: Option<(Similar, &std::collections::HashSet<&str>)>,
) -> Emitted {
    let target = target();
    let options = cli_options(mode);
    let start = Instant::now();
    let plan = clif_merge::merge(module, &target, &options);
    let merge_s = start.elapsed().as_secs_f64();
    let emit_options = EmitOptions {
        per_function_section,
        ..Default::default()
    };
    let start = Instant::now();
    let (object, summary) = emit_object(module, &plan, isa(), &options, &emit_options)
        .unwrap_or_else(|e| panic!("emitting in {} mode: {e}", mode_name(mode)));
    let emit_total_s = start.elapsed().as_secs_f64();
    let report = Report::new(
        TRIPLE.to_string(),
        mode_name(mode).to_string(),
        module,
        &summary.plan,
        Some(&summary),
        Timings::default(),
    );
    let similar = similar.map(|(s, members)| Similar {
        overlap: report
            .groups
            .iter()
            .flat_map(|g| &g.folded)
            .filter(|f| members.contains(f.name.as_str()))
            .count(),
        ..s
    });
    Emitted {
        object,
        functions: module.len(),
        folded: report.merged,
        compiled: summary.compiled,
        text_bytes: summary.text_bytes,
        merge_s,
        codegen_s: summary.codegen_s,
        emit_total_s,
        similar,
    }
}

/// The short commit of the working tree, or `unknown`.
pub fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// `bench/` in the repository: where pictures are written.
pub fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench")
}

/// Where criterion writes its estimates, found the way criterion finds it:
/// `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else the target directory this
/// binary runs from (`target/release/deps/NAME` → `target/criterion`).
pub fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("criterion")))
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// Criterion's estimates (nanoseconds per iteration) of one benchmark.
#[derive(Clone, Copy, Debug)]
pub struct Estimate {
    pub median_ns: f64,
    pub median_lo_ns: f64,
    pub median_hi_ns: f64,
    pub mean_ns: f64,
    pub mad_ns: f64,
}

/// The estimates of benchmark `id` (`group/function[/parameter]`), if criterion wrote
/// them after `since` (so a benchmark filtered out of this run is not mistaken for one
/// measured in it).
pub fn criterion_estimate(id: &str, since: SystemTime) -> Option<Estimate> {
    let path = criterion_dir().join(id).join("new/estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    let point = |k: &str| json[k]["point_estimate"].as_f64();
    Some(Estimate {
        median_ns: point("median")?,
        median_lo_ns: json["median"]["confidence_interval"]["lower_bound"].as_f64()?,
        median_hi_ns: json["median"]["confidence_interval"]["upper_bound"].as_f64()?,
        mean_ns: point("mean")?,
        mad_ns: point("median_abs_dev")?,
    })
}

/// `CLIF_MERGE_BENCH_SUMMARY=1`: measure nothing, print the summary (and draw the
/// picture) from the estimates criterion already has.
pub fn summary_only() -> bool {
    std::env::var_os("CLIF_MERGE_BENCH_SUMMARY").is_some_and(|v| v != "0")
}

/// Estimates written before this time are not this run's: now, or the beginning of time
/// when only the summary is printed.
pub fn since() -> SystemTime {
    if summary_only() {
        SystemTime::UNIX_EPOCH
    } else {
        SystemTime::now()
    }
}

/// Whether criterion runs for measurement (`cargo bench`) rather than as a quick test
/// (`cargo test --benches` runs every benchmark once, without `--bench`).
pub fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The corpora a table-printing bench runs on: every corpus present under `cargo bench`,
/// only zstd (the smallest) as a smoke test under `cargo test`.
pub fn corpora_to_measure(who: &str) -> Vec<(&'static str, PathBuf)> {
    let full = measuring();
    present_corpora(who)
        .into_iter()
        .filter(|(name, _)| full || *name == "zstd")
        .collect()
}

/// Human-readable seconds.
pub fn fmt_s(s: f64) -> String {
    if s < 0.0 {
        return format!("-{}", fmt_s(-s));
    }
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The median of `xs` (sorted in place).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}
