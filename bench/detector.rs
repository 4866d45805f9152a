//! The detector's speed on real code (re2): hashing every function next to a bare walk over
//! the same instructions, and comparing functions.
//!
//! - `detector/hash`: `function_hash` of every function of the corpus;
//! - `detector/bare_walk`: the least any hash can do: iterate the layout's blocks and each
//!   block's instructions, reading each opcode (into a sum, so nothing is optimized away);
//! - `detector/encode`: `FunctionComparator::key`, the full encoding the merger's tree uses;
//! - `detector/compare_self`: `FunctionComparator::compare(f, f)` for every function (the
//!   worst case: equal functions are encoded to the end);
//! - `detector/compare_neighbour`: `compare(f[i], f[i + 1])` in module order (different
//!   functions, usually told apart early).
//!
//! After criterion, the hash/walk ratio is printed twice: from criterion's medians, and from
//! a paired run (walk and hash alternate, so a load that comes and goes hits both alike).
//! The requirement: hash time ≤ 5 × bare walk.
//!
//! `cargo bench --bench detector` (about two minutes). Skips with a notice where
//! ../shared/corpus/re2 is absent. `bench/instructions.sh` counts the instructions of one
//! hash pass and one walk under callgrind (a ratio that load on the machine cannot move).

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use clif_merge::{function_hash, FunctionComparator};
use cranelift_codegen::ir::Function;
use criterion::{Criterion, Throughput};

/// Iterate every block of the layout and every instruction in it, reading the opcode.
#[inline(never)]
fn bare_walk(funcs: &[&Function]) -> u64 {
    let mut sum = 0u64;
    for func in funcs {
        sum = sum.wrapping_add(func.signature.params.len() as u64);
        for block in func.layout.blocks() {
            for inst in func.layout.block_insts(block) {
                sum = sum.wrapping_add(func.dfg.insts[inst].opcode() as u64);
            }
        }
    }
    sum
}

#[inline(never)]
fn hash_all(funcs: &[&Function]) -> u64 {
    funcs.iter().fold(0u64, |acc, f| acc ^ function_hash(f))
}

fn main() {
    let Some(dir) = common::corpus_dir("re2") else {
        eprintln!("detector bench: skipping: ../shared/corpus/re2 is absent");
        return;
    };
    let module = common::load_module(&dir);
    let target = common::target();
    let funcs: Vec<&Function> = module.iter().map(|(_, m)| &*m.func).collect();
    let insts: u64 = funcs
        .iter()
        .map(|f| {
            f.layout
                .blocks()
                .map(|b| f.layout.block_insts(b).count() as u64)
                .sum::<u64>()
        })
        .sum();
    eprintln!(
        "detector bench: re2, {} functions, {} instructions",
        funcs.len(),
        common::thousands(insts)
    );

    if std::env::var_os("CLIF_MERGE_BENCH_ONCE").is_some() {
        // One call of each, for `bench/instructions.sh` (callgrind counts the
        // instructions inside `bare_walk` and `hash_all`).
        let walk = black_box(bare_walk(black_box(&funcs)));
        let hash = black_box(hash_all(black_box(&funcs)));
        println!("once: bare_walk {walk:#x}, hash_all {hash:#x}");
        return;
    }

    let summary_only = common::summary_only();
    let started = common::since();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8))
        .configure_from_args();
    if !summary_only {
        let mut g = c.benchmark_group("detector");
        g.throughput(Throughput::Elements(insts));
        g.bench_function("bare_walk", |b| b.iter(|| bare_walk(black_box(&funcs))));
        g.bench_function("hash", |b| b.iter(|| hash_all(black_box(&funcs))));
        g.bench_function("encode", |b| {
            let comparator = FunctionComparator::new(&target);
            b.iter(|| {
                funcs
                    .iter()
                    .map(|f| comparator.key(black_box(f)).len())
                    .sum::<usize>()
            })
        });
        g.bench_function("compare_self", |b| {
            let comparator = FunctionComparator::new(&target);
            b.iter(|| {
                funcs
                    .iter()
                    .filter(|f| comparator.compare(black_box(f), black_box(f)).is_eq())
                    .count()
            })
        });
        g.throughput(Throughput::Elements(funcs.len() as u64 - 1));
        g.bench_function("compare_neighbour", |b| {
            let comparator = FunctionComparator::new(&target);
            b.iter(|| {
                funcs
                    .windows(2)
                    .filter(|w| comparator.compare(black_box(w[0]), black_box(w[1])).is_lt())
                    .count()
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

    // The requirement, from criterion's medians.
    let est = |id: &str| common::criterion_estimate(&format!("detector/{id}"), started);
    println!();
    println!(
        "detector, re2 ({} functions, {insts} instructions):",
        funcs.len()
    );
    for id in [
        "bare_walk",
        "hash",
        "encode",
        "compare_self",
        "compare_neighbour",
    ] {
        if let Some(e) = est(id) {
            let per = if id == "compare_neighbour" {
                e.median_ns / (funcs.len() - 1) as f64
            } else {
                e.median_ns / funcs.len() as f64
            };
            println!(
                "  {id:<18} median {:>10}  [{} .. {}]  {:>8.1} ns/function  {:>6.2} ns/instruction",
                common::fmt_s(e.median_ns * 1e-9),
                common::fmt_s(e.median_lo_ns * 1e-9),
                common::fmt_s(e.median_hi_ns * 1e-9),
                per,
                e.median_ns / insts as f64,
            );
        }
    }
    if let (Some(walk), Some(hash)) = (est("bare_walk"), est("hash")) {
        let ratio = hash.median_ns / walk.median_ns;
        // The least favourable ends of the two 95% intervals.
        let worst = hash.median_hi_ns / walk.median_lo_ns;
        println!(
            "  hash / bare walk (criterion medians): {ratio:.2}x (at most {worst:.2}x at the ends of the 95% intervals) — requirement ≤ 5x: {}",
            if ratio <= 5.0 { "met" } else { "NOT MET" }
        );
    }

    if summary_only {
        return;
    }
    // The same ratio from a paired run.
    let rounds = 301;
    let mut ratios = Vec::with_capacity(rounds);
    let (mut walk_min, mut hash_min) = (f64::MAX, f64::MAX);
    for _ in 0..rounds {
        let t = Instant::now();
        black_box(bare_walk(black_box(&funcs)));
        let walk = t.elapsed().as_secs_f64();
        let t = Instant::now();
        black_box(hash_all(black_box(&funcs)));
        let hash = t.elapsed().as_secs_f64();
        ratios.push(hash / walk);
        walk_min = walk_min.min(walk);
        hash_min = hash_min.min(hash);
    }
    let paired = common::median(&mut ratios);
    println!(
        "  hash / bare walk (paired, {rounds} rounds): median of ratios {paired:.2}x, ratio of minima {:.2}x ({} / {})",
        hash_min / walk_min,
        common::fmt_s(hash_min),
        common::fmt_s(walk_min),
    );
}
