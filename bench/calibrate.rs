//! Calibration of merge-similar's size estimate ([`clif_merge::estimate`]) against real
//! compiles, per target, and its error.
//!
//! For x86_64 and aarch64 (the corpus settings: `is_pic`, `preserve_frame_pointers`,
//! `opt_level=speed`), each corpus under ../shared/corpus is read (never copied) and
//! - every function is compiled (`emit::compile::text_size`, the `.text` bytes padded to
//!   the body's alignment) and its features taken;
//! - every group merge-similar would consider (`similar_candidates`, aliases mode) is
//!   built, and its shared body and CLIF thunks compiled too: they are what the estimate is
//!   asked about; so is every pair alignment merging's first search finds
//!   (`aligned_candidates`), its merged body and thunks;
//! - the weights are fitted on all of it (`estimate::fit`), and also with each corpus left
//!   out, to report the error on functions the fit never saw;
//! - the error is reported per corpus: mean, median and 90th percentile of
//!   |estimate − compiled| / compiled over the functions, the whole module's error, and
//!   the group decisions (merge when body + thunks < members) that differ between the
//!   estimate and the compiled sizes, with the bytes those differences cost, for groups
//!   with holes and for aligned pairs apart.
//!
//! `cargo bench --bench calibrate` prints the tables (7 s on 2 cores, once built);
//! `CLIF_MERGE_WRITE_WEIGHTS=1 cargo bench --bench calibrate` also rewrites
//! `src/estimate/weights.rs` with the weights fitted on all three corpora (run `cargo fmt`
//! after it). As a test (`cargo test --benches`, no `--bench` argument) it does zstd on
//! x86_64 only and fits nothing: it reports the committed weights' error.

mod common;

use std::collections::HashMap;
use std::time::Instant;

use clif_merge::emit::build_isa;
use clif_merge::emit::compile::{similar_thunk_size, text_size};
use clif_merge::estimate::fit::{self, errors, features_of, Errors, FitOptions, Fitted, Sample};
use clif_merge::estimate::SizeModel;
use clif_merge::merge::similar::{aligned_candidates, similar_candidates, CodeFacts, WrittenThunk};
use clif_merge::merge::{FuncIndex, MergeMode, MergeOptions, Module};
use clif_merge::TargetInfo;
use cranelift_codegen::ir::Function;
use cranelift_codegen::isa::TargetIsa;
use rayon::prelude::*;

/// The targets calibrated, with the name of their table in `weights.rs`.
const TARGETS: [(&str, &str); 2] = [
    ("x86_64-unknown-linux-gnu", "X86_64"),
    ("aarch64-unknown-linux-gnu", "AARCH64"),
];

/// A compiled function: its features and its size.
struct Measured {
    sample: Sample,
    /// The function itself, for estimating with any model.
    func: Function,
}

/// One candidate group, with the compiled sizes of everything in it.
struct Group {
    /// Compiled size of each member (representatives of their classes).
    members: Vec<u64>,
    /// Compiled size of the shared body.
    body: u64,
    /// Compiled size of each thunk.
    thunks: Vec<u64>,
    /// The group as built, to estimate.
    candidate: clif_merge::merge::similar::SimilarCandidate,
    /// The module (of the set's modules) it was built from.
    module: usize,
    /// A pair merged by alignment rather than a group with holes.
    aligned: bool,
}

impl Group {
    fn truth(&self) -> (u64, u64) {
        (
            self.members.iter().sum(),
            self.body + self.thunks.iter().sum::<u64>(),
        )
    }
}

/// One corpus compiled for one target.
struct CorpusData {
    name: &'static str,
    /// One module for a corpus; one per file for the fixtures (names repeat across files).
    modules: Vec<Module>,
    functions: Vec<Measured>,
    /// Shared bodies and thunks of the candidates (thunks written as machine code
    /// excluded: their size is exact, not estimated).
    built: Vec<Measured>,
    groups: Vec<Group>,
}

fn measure(isa: &dyn TargetIsa, func: &Function) -> Option<Measured> {
    Some(measured(func, text_size(isa, func.clone()).ok()?))
}

/// Merge-similar's thunk `func` as emitted: exact for a register thunk.
fn measure_thunk(isa: &dyn TargetIsa, func: &Function) -> Option<Measured> {
    Some(measured(func, similar_thunk_size(isa, func.clone()).ok()?))
}

fn measured(func: &Function, bytes: u64) -> Measured {
    Measured {
        sample: Sample {
            features: features_of(func),
            bytes: bytes as f64,
            weight: 1.0,
        },
        func: func.clone(),
    }
}

/// A corpus directory, read as one module.
fn load(
    name: &'static str,
    dir: &std::path::Path,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
) -> CorpusData {
    measure_modules(name, vec![common::load_module(dir)], target, isa)
}

/// The repository's fixtures (every `.clif` under `fixtures/`, one module per file; files
/// that do not parse or verify, or repeat a name, left out): small functions of every
/// kind, unlike the corpora's wasm code. Functions that do not compile are left out too.
fn load_fixtures(target: &TargetInfo, isa: &dyn TargetIsa) -> CorpusData {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "clif") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
        &mut files,
    );
    files.sort();
    let modules = files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let functions = clif_merge::read::parse_clif(&text, path).ok()?;
            clif_merge::read::verify_all(&functions, isa).ok()?;
            Module::from_functions(functions.into_iter().map(|p| p.func)).ok()
        })
        .collect();
    measure_modules("fixtures", modules, target, isa)
}

fn measure_modules(
    name: &'static str,
    modules: Vec<Module>,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
) -> CorpusData {
    let mut functions = Vec::new();
    let mut built = Vec::new();
    let mut groups = Vec::new();
    for (i, module) in modules.iter().enumerate() {
        let (f, b, g) = measure_module(module, i, target, isa);
        functions.extend(f);
        built.extend(b);
        groups.extend(g);
    }
    CorpusData {
        name,
        modules,
        functions,
        built,
        groups,
    }
}

/// Every function of `module` compiled, and every group merge-similar considers in it.
fn measure_module(
    module: &Module,
    index: usize,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
) -> (Vec<Measured>, Vec<Measured>, Vec<Group>) {
    let indices: Vec<FuncIndex> = module.indices().collect();
    let measured: Vec<(FuncIndex, Option<Measured>)> = indices
        .par_iter()
        .map(|&f| (f, measure(isa, &module.get(f).func)))
        .collect();
    let size_of: HashMap<FuncIndex, u64> = measured
        .iter()
        .filter_map(|(f, m)| m.as_ref().map(|m| (*f, m.sample.bytes as u64)))
        .collect();
    let functions: Vec<Measured> = measured.into_iter().filter_map(|(_, m)| m).collect();

    let options = MergeOptions {
        mode: MergeMode::Aliases,
        ..Default::default()
    };
    let candidates = similar_candidates(module, target, isa, &options)
        .into_iter()
        .map(|c| (c, false))
        .chain(
            aligned_candidates(module, target, isa, &options)
                .into_iter()
                .map(|c| (c, true)),
        )
        .collect::<Vec<_>>();
    let results: Vec<Option<(Group, Vec<Measured>)>> = candidates
        .into_par_iter()
        .map(|(candidate, aligned)| {
            let members = candidate
                .members
                .iter()
                .map(|m| size_of.get(m).copied())
                .collect::<Option<Vec<u64>>>()?;
            let body = measure(isa, &candidate.body)?;
            let mut built = Vec::new();
            let mut thunks = Vec::new();
            for (_, t) in &candidate.thunks {
                let m = measure_thunk(isa, t)?;
                thunks.push(m.sample.bytes as u64);
                if isa.written_thunk(t).is_none() {
                    built.push(m);
                }
            }
            let group = Group {
                members,
                body: body.sample.bytes as u64,
                thunks,
                candidate,
                module: index,
                aligned,
            };
            built.push(body);
            Some((group, built))
        })
        .collect();
    let mut groups = Vec::new();
    let mut built = Vec::new();
    for (g, b) in results.into_iter().flatten() {
        groups.push(g);
        built.extend(b);
    }
    (functions, built, groups)
}

/// The model's estimate of a function: the register thunks exact, as the pass does.
struct Facts<'a> {
    isa: &'a dyn TargetIsa,
    model: &'a SizeModel,
}

impl CodeFacts for Facts<'_> {
    fn text_size(&self, func: &Function) -> u64 {
        self.model.estimate(func)
    }

    fn written_thunk(&self, thunk: &Function) -> Option<WrittenThunk> {
        self.isa.written_thunk(thunk)
    }
}

/// How the estimate's group decisions compare with the compiled truth.
#[derive(Default)]
struct Decisions {
    groups: usize,
    /// Groups that pay when compiled.
    truth_merges: usize,
    /// Groups the estimate merges.
    estimate_merges: usize,
    /// Merged by the estimate, do not pay when compiled.
    false_merges: usize,
    /// Pay when compiled, turned down by the estimate.
    missed: usize,
    /// Compiled bytes saved by the truth's decisions.
    truth_saved: i64,
    /// Compiled bytes saved by the estimate's decisions.
    estimate_saved: i64,
    /// Errors of the groups' estimated savings (before − after) against compiled.
    before_after: Vec<(f64, f64)>,
}

/// The decisions on `data`'s groups with holes, or on its aligned pairs.
fn decisions(data: &CorpusData, facts: &Facts, aligned: bool) -> Decisions {
    let mut d = Decisions::default();
    for g in data.groups.iter().filter(|g| g.aligned == aligned) {
        let (tb, ta) = g.truth();
        let (eb, ea) = g.candidate.cost(&data.modules[g.module], facts);
        let truth = ta < tb;
        let estimate = ea < eb;
        d.groups += 1;
        d.truth_merges += usize::from(truth);
        d.estimate_merges += usize::from(estimate);
        d.false_merges += usize::from(estimate && !truth);
        d.missed += usize::from(truth && !estimate);
        let saved = tb as i64 - ta as i64;
        if truth {
            d.truth_saved += saved;
        }
        if estimate {
            d.estimate_saved += saved;
        }
        d.before_after.push((eb as f64, tb as f64));
        d.before_after.push((ea as f64, ta as f64));
    }
    d
}

/// The two kinds of decisions reported apart: groups with holes, and aligned pairs.
const KINDS: [(bool, &str); 2] = [(false, "group decisions"), (true, "aligned pair decisions")];

/// The estimate's error on the bodies of `data`'s aligned pairs.
fn aligned_body_errors(data: &CorpusData, model: &SizeModel) -> Errors {
    errors(
        data.groups
            .iter()
            .filter(|g| g.aligned)
            .map(|g| (model.estimate(&g.candidate.body) as f64, g.body as f64)),
    )
}

fn function_errors(data: &CorpusData, model: &SizeModel) -> Errors {
    errors(
        data.functions
            .iter()
            .map(|m| (model.estimate(&m.func) as f64, m.sample.bytes)),
    )
}

/// The fixtures are few and small next to the corpora's thousands of wasm functions:
/// each counts this many times in the fit, so that the weights also fit small functions
/// of other compilers.
/// (1, 3, 10 and 30 were tried: 10 brought the fixtures' mean error from 25% to 16% on
/// x86_64 and from 16% to 12% on aarch64, and moved the corpora's by at most 0.7 points.)
const FIXTURE_WEIGHT: f64 = 10.0;

fn samples<'a>(data: impl Iterator<Item = &'a CorpusData>) -> Vec<Sample> {
    data.flat_map(|d| {
        let weight = if d.name == "fixtures" {
            FIXTURE_WEIGHT
        } else {
            1.0
        };
        d.functions.iter().chain(&d.built).map(move |m| Sample {
            weight,
            ..m.sample.clone()
        })
    })
    .collect()
}

/// The `n` functions whose estimate is furthest from the compiled size, relatively.
fn print_worst(data: &[CorpusData], model: &SizeModel, n: usize) {
    let mut all: Vec<(f64, &str, &Measured, u64)> = data
        .iter()
        .flat_map(|d| d.functions.iter().chain(&d.built).map(move |m| (d.name, m)))
        .map(|(name, m)| {
            let e = model.estimate(&m.func);
            ((e as f64 - m.sample.bytes) / m.sample.bytes, name, m, e)
        })
        .collect();
    all.sort_by(|a, b| b.0.abs().total_cmp(&a.0.abs()));
    println!("\nworst {n}:");
    for (rel, corpus, m, e) in all.into_iter().take(n) {
        println!(
            "{corpus} {} compiled {} estimated {e} ({:+.0}%) {:?}",
            m.func.name,
            m.sample.bytes,
            rel * 100.0,
            m.sample.features
        );
    }
}

fn pct(x: f64) -> String {
    format!("{x:.1}%")
}

fn print_errors(what: &str, rows: &[(&str, Errors)]) {
    println!("\n{what}");
    println!("| corpus | functions | mean abs % error | median | 90th pct | whole module |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, e) in rows {
        println!(
            "| {name} | {} | {} | {} | {} | {:+.1}% |",
            e.count,
            pct(e.mean_abs_pct),
            pct(e.median_abs_pct),
            pct(e.p90_abs_pct),
            e.total_pct
        );
    }
}

fn print_decisions(what: &str, rows: &[(&str, Decisions)]) {
    println!("\n{what}");
    println!(
        "| corpus | groups | pay (compiled) | merged (estimate) | differ: merged, do not pay \
         | differ: pay, turned down | bytes saved (compiled truth) \
         | bytes saved (estimate's choice) | group sizes: mean abs % error |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, d) in rows {
        let e = errors(d.before_after.iter().copied());
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
            d.groups,
            d.truth_merges,
            d.estimate_merges,
            d.false_merges,
            d.missed,
            d.truth_saved,
            d.estimate_saved,
            pct(e.mean_abs_pct)
        );
    }
}

fn main() {
    let full = common::measuring();
    let write = std::env::var_os("CLIF_MERGE_WRITE_WEIGHTS").is_some_and(|v| v == "1");
    let corpora = common::corpora_to_measure("calibrate");
    if corpora.is_empty() {
        return;
    }
    let started = Instant::now();
    let settings = common::settings();
    let options = FitOptions::default();
    let mut tables: Vec<(&str, Fitted)> = Vec::new();
    for (triple, table) in TARGETS.iter().take(if full { 2 } else { 1 }) {
        let target = TargetInfo::from_triple_str(triple).expect("a known target");
        let isa = build_isa(&target, &settings).expect("the backend is built in");
        let t = Instant::now();
        let mut data: Vec<CorpusData> = corpora
            .iter()
            .map(|(name, dir)| load(name, dir, &target, &*isa))
            .collect();
        if full {
            data.push(load_fixtures(&target, &*isa));
        }
        println!(
            "\n## {triple}: {} functions, {} built bodies and thunks, {} groups compiled in {}",
            data.iter().map(|d| d.functions.len()).sum::<usize>(),
            data.iter().map(|d| d.built.len()).sum::<usize>(),
            data.iter().map(|d| d.groups.len()).sum::<usize>(),
            common::fmt_s(t.elapsed().as_secs_f64())
        );

        let committed = SizeModel::for_architecture(target.triple().architecture);
        let rows: Vec<(&str, Errors)> = data
            .iter()
            .map(|d| (d.name, function_errors(d, committed)))
            .collect();
        print_errors(
            "committed weights (`src/estimate/weights.rs`), every function:",
            &rows,
        );
        let facts = Facts {
            isa: &*isa,
            model: committed,
        };
        for (aligned, what) in KINDS {
            let rows: Vec<(&str, Decisions)> = data
                .iter()
                .map(|d| (d.name, decisions(d, &facts, aligned)))
                .collect();
            print_decisions(&format!("committed weights, {what}:"), &rows);
        }
        let aligned_bodies: Vec<(&str, Errors)> = data
            .iter()
            .map(|d| (d.name, aligned_body_errors(d, committed)))
            .collect();
        print_errors(
            "committed weights, bodies merged by alignment:",
            &aligned_bodies,
        );
        if !full {
            continue;
        }

        // Each corpus estimated by weights fitted on the other two.
        let mut held_out_errors = Vec::new();
        let mut held_out_decisions = [Vec::new(), Vec::new()];
        for (i, d) in data.iter().enumerate() {
            let others = data
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, d)| d);
            let model = fit::fit(&samples(others), &options).model();
            held_out_errors.push((d.name, function_errors(d, &model)));
            let facts = Facts {
                isa: &*isa,
                model: &model,
            };
            for (rows, (aligned, _)) in held_out_decisions.iter_mut().zip(KINDS) {
                rows.push((d.name, decisions(d, &facts, aligned)));
            }
        }
        print_errors(
            "each set left out of the fit (fitted on the others), every function:",
            &held_out_errors,
        );
        for (rows, (_, what)) in held_out_decisions.iter().zip(KINDS) {
            print_decisions(
                &format!("each set left out of the fit (fitted on the others), {what}:"),
                rows,
            );
        }

        // Fitted on everything.
        let fitted = fit::fit(&samples(data.iter()), &options);
        let model = fitted.model();
        if let Some(n) = std::env::var("CLIF_MERGE_CALIBRATE_WORST")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            print_worst(&data, &model, n);
        }
        let rows: Vec<(&str, Errors)> = data
            .iter()
            .map(|d| (d.name, function_errors(d, &model)))
            .collect();
        print_errors(
            "fitted on every set (the corpora and the fixtures), every function:",
            &rows,
        );
        let built: Vec<(&str, Errors)> = data
            .iter()
            .map(|d| {
                (
                    d.name,
                    errors(
                        d.built
                            .iter()
                            .map(|m| (model.estimate(&m.func) as f64, m.sample.bytes)),
                    ),
                )
            })
            .collect();
        print_errors(
            "fitted on every set (the corpora and the fixtures), shared bodies and CLIF thunks:",
            &built,
        );
        let facts = Facts {
            isa: &*isa,
            model: &model,
        };
        for (aligned, what) in KINDS {
            let rows: Vec<(&str, Decisions)> = data
                .iter()
                .map(|d| (d.name, decisions(d, &facts, aligned)))
                .collect();
            print_decisions(
                &format!("fitted on every set (the corpora and the fixtures), {what}:"),
                &rows,
            );
        }
        tables.push((table, fitted));
    }
    if full && write {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/estimate/weights.rs");
        let mut s = String::new();
        s += "//! Weights of the size estimate per target, written by\n";
        s += "//! `CLIF_MERGE_WRITE_WEIGHTS=1 cargo bench --bench calibrate` and `cargo fmt`: \
              do not\n";
        s += "//! edit by hand.\n";
        s += &format!(
            "//! Fitted on {} at commit {} against {} and the fixtures\n\
             //! (counted {} times), compiled with {}.\n",
            today(),
            common::git_commit(),
            corpora
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
            FIXTURE_WEIGHT,
            settings
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        // Fitted numbers sometimes come close to a mathematical constant.
        s += "\n#![allow(clippy::approx_constant)]\n";
        s += "\nuse cranelift_codegen::ir::Opcode;\n\nuse super::WeightTable;\n";
        for (name, fitted) in &tables {
            s += "\n";
            s += &fitted.render(name);
        }
        std::fs::write(&path, s).expect("writing weights.rs");
        println!("\nwrote {}", path.display());
    }
    println!(
        "\ncalibrate: {} in all",
        common::fmt_s(started.elapsed().as_secs_f64())
    );
}

/// Today's date (UTC) as `YYYY-MM-DD`.
fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
