//! The whole pass on each corpus, next to the Cranelift compile time of the same functions.
//!
//! For each corpus under ../shared/corpus (absent ones are skipped with a notice):
//! - `pass/CORPUS/merge`: `clif_merge::merge` in the default mode (trampolines): hashing,
//!   encoding, the worklist and table, cycle refinement and the policy: everything before
//!   codegen, on every core (rayon's global pool), as the tool runs;
//! - `pass/CORPUS/merge_1_thread`: the same in a one-thread pool (its CPU time);
//! - `pass/CORPUS/merge_no_cycles`: `merge` without cycle refinement;
//! - `pass/CORPUS/part_hash`, `part_references`, `part_encode`: where `merge`'s time goes,
//!   rebuilt from public pieces on one thread: `function_hash` of every function,
//!   `Module::references` of every function (the call graph; the pass gets both from one
//!   walk per function), and `FunctionComparator::key` of every function whose hash is
//!   shared (the candidates, which the pass encodes once each, with placeholders for
//!   callees);
//! - `pass/CORPUS/code_fold`: `clif_merge::merge::fold_machine_code`, the machine-code
//!   folding that runs after codegen (its input compiled once, outside the measurement);
//! - `pass/CORPUS/compile`: `clif_merge::emit::compile::compile_bodies` with the plan of
//!   `--merge-functions disabled`, which compiles every function (is_pic=true,
//!   preserve_frame_pointers=true, opt_level=speed; rayon over every core, as the tool runs);
//! - `pass/CORPUS/compile_1_thread`: the same in a one-thread pool (the CPU time of
//!   compilation).
//!
//! The requirement: the pass is ≤ 3% of compile time on re2.
//!
//! `cargo bench --bench pass` (about 7 minutes on 2 cores).

mod common;

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use clif_merge::emit::compile::compile_bodies;
use clif_merge::emit::fold::fold_machine_code;
use clif_merge::merge::{MergeOptions, MergePlan};
use clif_merge::{function_hash, FunctionComparator};
use cranelift_codegen::ir::Function;
use criterion::{Criterion, SamplingMode};

/// A measurement time that lets criterion take `samples` samples of one iteration each of
/// something that takes `once` seconds.
fn time_for(samples: u32, once: f64) -> Duration {
    Duration::from_secs_f64((once * f64::from(samples) * 1.15).max(3.0))
}

fn main() {
    let corpora = common::present_corpora("pass bench");
    if corpora.is_empty() {
        return;
    }
    let target = common::target();
    let isa = common::isa();
    let options = MergeOptions::default();
    let no_cycles = MergeOptions {
        fold_cycles: false,
        ..MergeOptions::default()
    };
    let summary_only = common::summary_only();
    let started = common::since();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    let mut measured = Vec::new();
    for (name, dir) in &corpora {
        let module = common::load_module(dir);
        let mut count: HashMap<u64, u32> = HashMap::new();
        for (_, m) in module.iter() {
            *count.entry(function_hash(&m.func)).or_default() += 1;
        }
        let candidates: Vec<&Function> = module
            .iter()
            .map(|(_, m)| &*m.func)
            .filter(|f| count[&function_hash(f)] > 1)
            .collect();
        measured.push((*name, module.len(), candidates.len()));
        if summary_only {
            continue;
        }
        let t = Instant::now();
        let plan = clif_merge::merge(&module, &target, &options);
        let once_merge = t.elapsed().as_secs_f64();
        // One compile outside the measurement: the input of `code_fold`, and the length of
        // one compile, to size the measurement.
        let t = Instant::now();
        let compiled = compile_bodies(&module, &plan, &*isa, true).expect("the corpus compiles");
        let once_merged = t.elapsed().as_secs_f64();
        let once = once_merged * module.len() as f64 / plan.compiled_count(&module) as f64;
        eprintln!(
            "pass bench: {name}: {} functions, {} candidates (shared hash), {} groups, {} folded before codegen; one merge {}, one compile ≈ {}",
            module.len(),
            candidates.len(),
            plan.groups().len(),
            plan.folded_count(),
            common::fmt_s(once_merge),
            common::fmt_s(once)
        );
        let mut g = c.benchmark_group(format!("pass/{name}"));
        if once_merge > 0.05 {
            g.sample_size(20);
            g.measurement_time(time_for(20, once_merge));
        } else {
            g.measurement_time(Duration::from_secs(5));
        }
        g.bench_function("merge", |b| {
            b.iter(|| clif_merge::merge(black_box(&module), &target, &options))
        });
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a one-thread pool");
        g.bench_function("merge_1_thread", |b| {
            b.iter(|| one.install(|| clif_merge::merge(black_box(&module), &target, &options)))
        });
        g.bench_function("merge_no_cycles", |b| {
            b.iter(|| clif_merge::merge(black_box(&module), &target, &no_cycles))
        });
        g.sample_size(100).measurement_time(Duration::from_secs(5));
        g.bench_function("part_hash", |b| {
            b.iter(|| {
                module
                    .iter()
                    .fold(0u64, |h, (_, m)| h ^ function_hash(black_box(&m.func)))
            })
        });
        g.bench_function("part_references", |b| {
            b.iter(|| {
                module
                    .indices()
                    .map(|f| black_box(&module).references(f).func_refs.len())
                    .sum::<usize>()
            })
        });
        let comparator = FunctionComparator::new(&target);
        g.bench_function("part_encode", |b| {
            b.iter(|| {
                candidates
                    .iter()
                    .map(|f| comparator.key(black_box(f)).len())
                    .sum::<usize>()
            })
        });
        g.bench_function("code_fold", |b| {
            b.iter(|| {
                fold_machine_code(
                    black_box(&module),
                    &target,
                    &options,
                    &plan,
                    &compiled,
                    false,
                )
            })
        });
        g.sampling_mode(SamplingMode::Flat).sample_size(10);
        g.measurement_time(time_for(10, once));
        let disabled = MergePlan::default();
        g.bench_function("compile", |b| {
            b.iter(|| {
                compile_bodies(black_box(&module), &disabled, &*isa, false).expect("compiles")
            })
        });
        g.measurement_time(time_for(10, once * rayon::current_num_threads() as f64));
        g.bench_function("compile_1_thread", |b| {
            b.iter(|| {
                one.install(|| {
                    compile_bodies(black_box(&module), &disabled, &*isa, false).expect("compiles")
                })
            })
        });
        g.finish();
    }
    if !summary_only {
        c.final_summary();
    }
    if !common::measuring() && !summary_only {
        return;
    }

    println!();
    println!(
        "the pass against compile time ({} threads for `compile`), criterion medians:",
        rayon::current_num_threads()
    );
    println!(
        "  {:<8} {:>9} {:>10} {:>12} {:>10} {:>10} {:>13} {:>14} {:>17}",
        "corpus",
        "functions",
        "merge",
        "merge 1 thr",
        "code_fold",
        "compile",
        "compile 1 thr",
        "merge/compile",
        "merge/compile 1t"
    );
    let mut parts = Vec::new();
    for (name, functions, candidates) in measured {
        let est = |id: &str| common::criterion_estimate(&format!("pass_{name}/{id}"), started);
        let (Some(merge), Some(merge1), Some(fold), Some(compile), Some(compile1)) = (
            est("merge"),
            est("merge_1_thread"),
            est("code_fold"),
            est("compile"),
            est("compile_1_thread"),
        ) else {
            println!("  {name:<8} (not every benchmark ran in this run)");
            continue;
        };
        let pct = |x: f64, of: f64| 100.0 * x / of;
        println!(
            "  {:<8} {:>9} {:>10} {:>12} {:>10} {:>10} {:>13} {:>13.2}% {:>16.2}%",
            name,
            functions,
            common::fmt_s(merge.median_ns * 1e-9),
            common::fmt_s(merge1.median_ns * 1e-9),
            common::fmt_s(fold.median_ns * 1e-9),
            common::fmt_s(compile.median_ns * 1e-9),
            common::fmt_s(compile1.median_ns * 1e-9),
            pct(merge.median_ns, compile.median_ns),
            pct(merge1.median_ns, compile1.median_ns),
        );
        println!(
            "  {:<8} merge + code_fold: {:.2}% of compile; merge on 1 thread: {:.2}% of compile",
            "",
            pct(merge.median_ns + fold.median_ns, compile.median_ns),
            pct(merge1.median_ns, compile.median_ns),
        );
        if name == "re2" {
            let p = pct(merge.median_ns, compile.median_ns);
            println!(
                "  requirement (re2): pass ≤ 3% of compile time: {:.2}% — {}",
                p,
                if p <= 3.0 { "met" } else { "NOT MET" }
            );
        }
        let (Some(hash), Some(refs), Some(encode), Some(no_cycles)) = (
            est("part_hash"),
            est("part_references"),
            est("part_encode"),
            est("merge_no_cycles"),
        ) else {
            continue;
        };
        let ms = |ns: f64| format!("{:>9}", common::fmt_s(ns * 1e-9));
        let share = |ns: f64| format!("{:>5.1}%", pct(ns, merge1.median_ns));
        let cycles = merge.median_ns - no_cycles.median_ns;
        parts.push(format!(
            "  {name}: merge {} on {} threads, {} on 1 thread ({functions} functions, {candidates} share a hash);\n\
             {:>4}shares of merge on 1 thread:\n\
             {:>10} hash of every function                        {} {}\n\
             {:>10} call graph (Module::references) of every one  {} {}\n\
             {:>10} encoding each candidate once                  {} {}\n\
             {:>10} cycle refinement (merge - merge_no_cycles)    {} ({} threads)",
            ms(merge.median_ns).trim(),
            rayon::current_num_threads(),
            ms(merge1.median_ns).trim(),
            "",
            "",
            ms(hash.median_ns),
            share(hash.median_ns),
            "",
            ms(refs.median_ns),
            share(refs.median_ns),
            "",
            ms(encode.median_ns),
            share(encode.median_ns),
            "",
            ms(cycles),
            rayon::current_num_threads(),
        ));
    }
    if !parts.is_empty() {
        println!();
        println!(
            "where merge's time goes (criterion medians of parts rebuilt from public pieces and measured apart on one thread; the pass gets the hash and the call graph from one walk, so the shares are approximate):"
        );
        for p in parts {
            println!("{p}");
        }
    }
}
