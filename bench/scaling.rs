//! How the pass grows with the module: generated modules of 1,000 to 1,000,000 functions.
//!
//! The module is built with cranelift-frontend in blocks of 20 functions, each block:
//! - 7 unique functions (35%): a chain of 8 operations on the parameter, each with its own
//!   constant, the operations spelling a pattern no other function of the module has
//!   (their hash is unique, so they are never compared);
//! - 2 pairs of exact duplicates (20%): the same pattern and constants under two names;
//! - 3 near-duplicates (15%): one pattern and constants but the last (same hash, compared
//!   in the tree to their last instruction, never folded);
//! - 2 call chains of depth 3 (30%): k_i calls h_i calls g_i for i = 1, 2, with g_1 equal
//!   to g_2 and h_i, k_i otherwise equal; written callers first, so h_2 folds only after
//!   g_2 has (the worklist revisits callers) and k_2 after h_2.
//!
//! So 25% of the functions fold: 2 + 3 per block. Every function is `Export`,
//! address-significant (trampolines mode, the default).
//!
//! `scaling/merge/N` is `clif_merge::merge` on the module of N functions (module
//! construction excluded). LLVM's MergeFunctions design promises O(N log N); the issue's
//! requirement is time(1,000,000) ≤ 15 × time(100,000). After criterion, the table of
//! times and growth per decade is printed and `bench/scaling.svg` is drawn (log-log).
//!
//! `scaling/candidates/N` is `merge::candidates::find_candidates` (MinHash signatures, LSH
//! bands, best partners) over every function of the same module, with the default options.
//! Its hole-mode fingerprints see the duplicates, near-duplicates and chain members of a
//! block as one shape, and the 13 patterns of a block share many 3-shingles with other
//! blocks' (6 operations and an `iconst` between each two): crowded buckets, the case
//! the window bounds. Issue #14 asks the same growth of it: time(1,000,000) ≤ 15 ×
//! time(100,000); its table is printed after the merge's.
//!
//! `scaling/similar/N` is `merge::similar::merge_similar` (aliases mode, every name
//! `Local`, the cost model on) on another module: N functions of one shape that differ only
//! in the function they call, as generated trampolines do. They are one group, one shared
//! body and N thunks, so the time the pass takes for a group of N members shows; it is
//! measured up to 100,000 (the module copied outside the measurement: the pass consumes
//! it). Its table is printed last.
//!
//! `cargo bench --bench scaling` (4.6 minutes before the merge-similar series; the
//! 1,000,000-function module takes some GB of memory). `CLIF_MERGE_BENCH_MAX_N=100000`
//! stops earlier. As a test (`cargo test --benches`) it runs 1,000 and 10,000 once.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use clif_merge::merge::candidates::{find_candidates, CandidateOptions};
use clif_merge::merge::similar::{merge_similar, SimilarOptions};
use clif_merge::merge::{FuncIndex, Linkage, MergeMode, MergeOptions, Module};
use cranelift_codegen::ir::{
    types, AbiParam, ExtFuncData, ExternalName, Function, InstBuilder, Signature, UserExternalName,
    UserFuncName,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode};
use plotters::prelude::*;

const BLOCK: u32 = 20;
/// Folded functions per block: 2 duplicate pairs, 3 in the chains.
const FOLDED_PER_BLOCK: u32 = 5;
/// Operations per function.
const OPS: u32 = 8;
/// Operations to choose from (6^8 = 1,679,616 patterns; a block uses 13).
const KINDS: u32 = 6;

/// The module's builder: one `FunctionBuilderContext` reused for every function.
struct Generator {
    ctx: FunctionBuilderContext,
    sig: Signature,
    module: Module,
    linkage: Linkage,
}

impl Generator {
    fn new() -> Self {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        Self {
            ctx: FunctionBuilderContext::new(),
            sig,
            module: Module::new(),
            linkage: Linkage::Export,
        }
    }

    /// Function `u0:index`: optionally call `u0:callee` on the parameter, then the
    /// operations of `pattern`, with constants `salt * 8 + j` (j = 0..8), the last one
    /// plus `last_delta`.
    fn add(&mut self, index: u32, pattern: u32, salt: i64, last_delta: i64, callee: Option<u32>) {
        let mut func =
            Function::with_name_signature(UserFuncName::user(0, index), self.sig.clone());
        let mut b = FunctionBuilder::new(&mut func, &mut self.ctx);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        b.seal_block(block);
        let mut v = b.block_params(block)[0];
        if let Some(callee) = callee {
            let signature = b.import_signature(self.sig.clone());
            let name = b
                .func
                .declare_imported_user_function(UserExternalName::new(0, callee));
            let callee = b.import_function(ExtFuncData {
                name: ExternalName::user(name),
                signature,
                colocated: true,
                patchable: false,
            });
            let call = b.ins().call(callee, &[v]);
            v = b.inst_results(call)[0];
        }
        let mut p = pattern;
        for j in 0..OPS {
            let delta = if j == OPS - 1 { last_delta } else { 0 };
            let k = b.ins().iconst(types::I64, salt * 8 + i64::from(j) + delta);
            v = match p % KINDS {
                0 => b.ins().iadd(v, k),
                1 => b.ins().isub(v, k),
                2 => b.ins().imul(v, k),
                3 => b.ins().bxor(v, k),
                4 => b.ins().band(v, k),
                _ => b.ins().bor(v, k),
            };
            p /= KINDS;
        }
        b.ins().return_(&[v]);
        b.finalize(TargetFrontendConfig {
            default_call_conv: CallConv::SystemV,
            pointer_width: target_lexicon::PointerWidth::U64,
            page_size_align_log2: 12,
        });
        self.module
            .add(func, self.linkage, false)
            .expect("generated names are unique");
    }
}

/// The module of `n` functions (a multiple of 20), and how many functions should fold.
fn generate(n: u32) -> (Module, usize) {
    assert_eq!(n % BLOCK, 0);
    let mut g = Generator::new();
    for block in 0..n / BLOCK {
        let base = block * BLOCK;
        // 13 patterns per block, spread over the pattern space so that neighbours differ
        // early; distinct for every block up to 1,679,616 / 13 blocks.
        let pattern = |k: u32| ((block * 13 + k) as u64 * 1_000_003 % 1_679_616) as u32;
        let salt = i64::from(block) * 4;
        for k in 0..7 {
            g.add(base + k, pattern(k), salt, 0, None);
        }
        for pair in 0..2 {
            g.add(base + 7 + 2 * pair, pattern(7 + pair), salt + 1, 0, None);
            g.add(base + 8 + 2 * pair, pattern(7 + pair), salt + 1, 0, None);
        }
        for k in 0..3 {
            // Differ only in the last constant: the comparator reads them to the end.
            g.add(base + 11 + k, pattern(9), salt + 2, i64::from(k), None);
        }
        // Chains, callers first: k_i (base + 14 + i), h_i (base + 16 + i), g_i (base + 18 + i).
        for i in 0..2 {
            g.add(base + 14 + i, pattern(10), salt + 3, 0, Some(base + 16 + i));
        }
        for i in 0..2 {
            g.add(base + 16 + i, pattern(11), salt + 3, 0, Some(base + 18 + i));
        }
        for i in 0..2 {
            g.add(base + 18 + i, pattern(12), salt + 3, 0, None);
        }
    }
    (g.module, (n / BLOCK * FOLDED_PER_BLOCK) as usize)
}

/// The module of `n` trampolines: one shape (one pattern, the same constants), each
/// function calling its own external function (`u0:n + i`, outside the module), every one
/// `Local`. Merge-similar makes them one group with one parameter, the callee.
fn generate_trampolines(n: u32) -> Module {
    let mut g = Generator::new();
    g.linkage = Linkage::Local;
    for i in 0..n {
        g.add(i, 12_345, 1, 0, Some(n + i));
    }
    g.module
}

/// The `scaling` group, its sampling sized by `once`, the seconds of one run outside
/// criterion: ten flat samples for a run over 0.2 s, twenty for one over 20 ms.
fn sized_group(c: &mut Criterion, once: f64) -> BenchmarkGroup<'_, WallTime> {
    let mut g = c.benchmark_group("scaling");
    if once > 0.2 {
        g.sampling_mode(SamplingMode::Flat).sample_size(10);
        g.measurement_time(Duration::from_secs_f64(once * 11.0));
    } else if once > 0.02 {
        g.sample_size(20);
        g.measurement_time(Duration::from_secs_f64((once * 20.0 * 1.2).max(3.0)));
    } else {
        g.measurement_time(Duration::from_secs(4));
    }
    g
}

/// Peak resident memory of this process so far (Linux), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let max_n: u32 = std::env::var("CLIF_MERGE_BENCH_MAX_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let sizes: Vec<u32> = [1_000u32, 10_000, 100_000, 1_000_000]
        .into_iter()
        .filter(|&n| n <= max_n && (common::measuring() || n <= 10_000))
        .collect();
    let summary_only = common::summary_only();
    let target = common::target();
    let options = MergeOptions::default();
    let started = common::since();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    for &n in sizes.iter().filter(|_| !summary_only) {
        let t = Instant::now();
        let (module, expected) = generate(n);
        let generated_s = t.elapsed().as_secs_f64();
        // One run outside criterion: checks the module folds as designed, and sizes the
        // measurement.
        let t = Instant::now();
        let plan = clif_merge::merge(&module, &target, &options);
        let once = t.elapsed().as_secs_f64();
        assert_eq!(
            plan.folded_count(),
            expected,
            "the generated module of {n} functions folds as designed"
        );
        drop(plan);
        eprintln!(
            "scaling bench: {n} functions generated in {}, one merge {}, {expected} folded; peak RSS {:.0} MiB",
            common::fmt_s(generated_s),
            common::fmt_s(once),
            peak_rss_mib().unwrap_or(f64::NAN)
        );
        let mut g = sized_group(&mut c, once);
        g.bench_with_input(BenchmarkId::new("merge", n), &module, |b, module| {
            b.iter(|| clif_merge::merge(black_box(module), &target, &options))
        });
        g.finish();

        // Candidate search: one run outside criterion (checked, and sizing the measurement).
        let members: Vec<FuncIndex> = module.indices().collect();
        let candidate_options = CandidateOptions::default();
        let t = Instant::now();
        let pairs = find_candidates(&module, &target, &members, &candidate_options);
        let once = t.elapsed().as_secs_f64();
        // At least the two pairs of exact duplicates of every block (equal signatures).
        let exact = pairs.iter().filter(|p| p.similarity == 1.0).count();
        assert!(
            exact >= (n / BLOCK * 2) as usize,
            "{exact} pairs of equal signatures in {n} functions"
        );
        eprintln!(
            "scaling bench: candidates for {n} functions in {}, {} pairs; peak RSS {:.0} MiB",
            common::fmt_s(once),
            pairs.len(),
            peak_rss_mib().unwrap_or(f64::NAN)
        );
        drop(pairs);
        let mut g = sized_group(&mut c, once);
        g.bench_with_input(BenchmarkId::new("candidates", n), &module, |b, module| {
            b.iter(|| find_candidates(black_box(module), &target, &members, &candidate_options))
        });
        g.finish();
        drop(module);
    }
    // Merge-similar on one group of n members, up to 100,000.
    let similar_sizes: Vec<u32> = sizes.iter().copied().filter(|&n| n <= 100_000).collect();
    let isa = common::isa();
    let similar_options = MergeOptions {
        mode: MergeMode::Aliases,
        ..MergeOptions::default()
    };
    for &n in similar_sizes.iter().filter(|_| !summary_only) {
        let module = generate_trampolines(n);
        let t = Instant::now();
        let (merged, report) = merge_similar(
            common::copy_module(&module),
            &target,
            &*isa,
            &similar_options,
            &SimilarOptions::default(),
        );
        let once = t.elapsed().as_secs_f64();
        let sizes: Vec<usize> = report.groups.iter().map(|g| g.members.len()).collect();
        assert_eq!(sizes, [n as usize], "{n} trampolines are one group");
        drop(merged);
        eprintln!(
            "scaling bench: merge-similar on {n} trampolines in {}; peak RSS {:.0} MiB",
            common::fmt_s(once),
            peak_rss_mib().unwrap_or(f64::NAN)
        );
        let mut g = sized_group(&mut c, once);
        g.bench_with_input(BenchmarkId::new("similar", n), &module, |b, module| {
            b.iter_batched(
                || common::copy_module(module),
                |copy| {
                    merge_similar(
                        copy,
                        &target,
                        &*isa,
                        &similar_options,
                        &SimilarOptions::default(),
                    )
                },
                BatchSize::LargeInput,
            )
        });
        g.finish();
    }
    if !summary_only {
        c.final_summary();
    }
    if !common::measuring() && !summary_only {
        return;
    }

    let points = summary("merge", "clif_merge::merge", &sizes, started);
    summary(
        "candidates",
        "merge::candidates::find_candidates",
        &sizes,
        started,
    );
    summary(
        "similar",
        "merge::similar::merge_similar on trampolines",
        &similar_sizes,
        started,
    );
    if points.len() >= 2 {
        let path = common::bench_dir().join("scaling.svg");
        match draw(&path, &points) {
            Ok(()) => println!("  wrote {}", path.display()),
            Err(e) => println!("  could not draw {}: {e}", path.display()),
        }
    }
}

/// Print the table of `scaling/BENCH/N` medians with growth per decade and the
/// requirement check; returns the points (N, seconds) measured.
fn summary(bench: &str, what: &str, sizes: &[u32], started: SystemTime) -> Vec<(f64, f64)> {
    println!();
    println!("scaling: {what} on generated modules (criterion medians):");
    println!(
        "  {:>9} {:>11} {:>11} {:>12} {:>14} {:>14}",
        "N", "median", "per func", "growth", "N log N says", "linear says"
    );
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut prev: Option<(u32, f64)> = None;
    for &n in sizes {
        let Some(e) = common::criterion_estimate(&format!("scaling/{bench}/{n}"), started) else {
            println!("  {n:>9} (not measured in this run)");
            continue;
        };
        let s = e.median_ns * 1e-9;
        let (growth, nlogn, linear) = match prev {
            Some((pn, ps)) => {
                let r = f64::from(n) / f64::from(pn);
                let nl = r * (f64::from(n).ln() / f64::from(pn).ln());
                (
                    format!("{:.2}x", s / ps),
                    format!("{nl:.2}x"),
                    format!("{r:.2}x"),
                )
            }
            None => ("".into(), "".into(), "".into()),
        };
        println!(
            "  {:>9} {:>11} {:>8.2} µs {:>12} {:>14} {:>14}",
            common::thousands(u64::from(n)),
            common::fmt_s(s),
            s * 1e6 / f64::from(n),
            growth,
            nlogn,
            linear
        );
        points.push((f64::from(n), s));
        prev = Some((n, s));
    }
    let at = |n: f64| points.iter().find(|p| p.0 == n).map(|p| p.1);
    if let (Some(a), Some(b)) = (at(100_000.0), at(1_000_000.0)) {
        let r = b / a;
        println!(
            "  time(1,000,000) / time(100,000) = {r:.2} — requirement ≤ 15: {}",
            if r <= 15.0 { "met" } else { "NOT MET" }
        );
    }
    points
}

/// Time against N, log-log, with O(N) and O(N log N) through the first point.
fn draw(path: &std::path::Path, points: &[(f64, f64)]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (720, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let (n0, t0) = points[0];
    let n_max = points.last().map_or(n0, |p| p.0);
    let nlogn = |n: f64| t0 * (n * n.ln()) / (n0 * n0.ln());
    let linear = |n: f64| t0 * n / n0;
    let t_min = points.iter().map(|p| p.1).fold(f64::MAX, f64::min) / 2.0;
    let t_max = points.iter().map(|p| p.1).fold(nlogn(n_max), f64::max) * 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "clif_merge::merge on generated modules (25% fold)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (n0 / 1.5..n_max * 1.5).log_scale(),
            (t_min..t_max).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("functions (N)")
        .y_desc("seconds (median)")
        .x_label_formatter(&|x| common::thousands(x.round() as u64))
        .y_label_formatter(&|y| common::fmt_s(*y))
        .draw()?;
    let ns: Vec<f64> = (0..=60)
        .map(|i| n0 * (n_max / n0).powf(f64::from(i) / 60.0))
        .collect();
    chart
        .draw_series(LineSeries::new(
            ns.iter().map(|&n| (n, linear(n))),
            ShapeStyle::from(&BLUE.mix(0.5)).stroke_width(1),
        ))?
        .label("O(N) through the first point")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.mix(0.5)));
    chart
        .draw_series(LineSeries::new(
            ns.iter().map(|&n| (n, nlogn(n))),
            ShapeStyle::from(&GREEN.mix(0.7)).stroke_width(1),
        ))?
        .label("O(N log N) through the first point")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN.mix(0.7)));
    chart
        .draw_series(LineSeries::new(
            points.iter().copied(),
            ShapeStyle::from(&RED).stroke_width(2),
        ))?
        .label("measured")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, RED.filled())))?;
    chart.draw_series(points.iter().map(|&(n, t)| {
        Text::new(
            common::fmt_s(t),
            (n * 1.08, t / 1.35),
            ("sans-serif", 13).into_font(),
        )
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
