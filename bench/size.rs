//! Size: what clif-merge saves on each corpus, next to what the linkers' identical code
//! folding saves, and the compile time saved because folded functions are never compiled.
//!
//! For each corpus under ../shared/corpus (absent ones are skipped with a notice):
//! - the object is written with `--merge-functions disabled`, `trampolines` and `aliases`
//!   (x86_64-unknown-linux-gnu, is_pic=true, preserve_frame_pointers=true,
//!   opt_level=speed): functions, folded, bodies compiled, `.text` bytes of the object;
//! - and with `--merge-similar` before `trampolines` and before `aliases`: the same, plus
//!   the names merge-similar turned into thunks into a shared body (and how many bodies);
//! - the unmerged object is written again one function per section
//!   (`EmitOptions::per_function_section`, `--function-sections`) and linked into a shared
//!   library by `ld.lld -shared --icf=all`, `ld.lld -shared -Bsymbolic --icf=all`,
//!   `ld.gold -shared --icf=all` and `ld.gold -shared -Bsymbolic --icf=all`, and without ICF
//!   (the baseline); clif-merge's objects are linked by `ld.lld -shared` without ICF. Folded
//!   counts for a library are names sharing an address; `.text` is the library's section;
//! - code generation is timed for the disabled plan, for the default mode's plan where that
//!   plan compiles fewer bodies, and for the default mode's plan over the module
//!   merge-similar rewrote (`compile_bodies`, 5 runs each, alternating, median); the
//!   merge-similar pass itself (its cost model estimates sizes from the IR and compiles
//!   nothing) is timed once, from the trampolines emission.
//!
//! Prints the size table, what merge-similar did, link times and the compile-time table,
//! and draws `bench/size.svg` (`.text` saved per corpus and method).
//! `cargo bench --bench size` (about 2 minutes on 2 cores). As a test (`cargo test
//! --benches`, no `--bench` argument) it only does zstd, times no code generation and
//! draws nothing.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use clif_merge::emit::compile::compile_bodies;
use clif_merge::merge::{MergeMode, MergeOptions, MergePlan, Module};
use common::Similar;
use cranelift_object::object::{self, Object as _, ObjectSection as _, ObjectSymbol as _};
use plotters::prelude::*;

/// Names folded (defined text symbols sharing an address) and `.text` bytes of a library.
fn linked_stats(so: &Path) -> (usize, u64) {
    let bytes = std::fs::read(so).expect("the library was written");
    let file = object::File::parse(&*bytes).expect("an ELF library");
    let mut at: HashMap<u64, usize> = HashMap::new();
    for s in file
        .symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
    {
        *at.entry(s.address()).or_default() += 1;
    }
    let folded = at.values().map(|n| n - 1).sum();
    let text = file.section_by_name(".text").map_or(0, |s| s.size());
    (folded, text)
}

/// Link `input` with `linker` and `args` into `out`; `None` (with the linker's complaint)
/// when the linker is missing or fails.
fn link(linker: &str, args: &[&str], input: &Path, out: &Path) -> Option<(usize, u64, f64)> {
    let t = Instant::now();
    let output = Command::new(linker)
        .args(args)
        .arg(input)
        .arg("-o")
        .arg(out)
        .output();
    let seconds = t.elapsed().as_secs_f64();
    match output {
        Ok(o) if o.status.success() => {
            let (folded, text) = linked_stats(out);
            Some((folded, text, seconds))
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            eprintln!(
                "size bench: {linker} {}: failed: {}",
                args.join(" "),
                err.lines().next().unwrap_or("")
            );
            None
        }
        Err(e) => {
            eprintln!("size bench: {linker}: {e}");
            None
        }
    }
}

/// One way of saving space, on one corpus.
struct Row {
    label: &'static str,
    folded: Option<usize>,
    /// What merge-similar did (its rows only).
    similar: Option<Similar>,
    /// `.text` of the object (clif-merge's own rows).
    object_text: Option<u64>,
    /// `.text` of the linked library.
    linked_text: Option<u64>,
    link_s: Option<f64>,
}

struct CorpusResult {
    name: &'static str,
    functions: usize,
    rows: Vec<Row>,
    /// Bodies compiled per mode: (mode, bodies).
    compiled: Vec<(&'static str, usize)>,
    /// Bodies the default mode's plan compiles (before machine-code folding).
    plan_bodies: usize,
    /// Bodies the default mode's plan compiles over the module merge-similar rewrote
    /// (shared bodies and thunks included).
    similar_plan_bodies: usize,
    /// Seconds in the merge-similar pass (trampolines emission).
    similar_pass_s: f64,
    /// Code generation times (when measured).
    codegen: Option<Codegen>,
}

/// Median seconds of `compile_bodies`.
struct Codegen {
    disabled: f64,
    /// The default mode's plan; `None` when it compiles every body anyway.
    merged: Option<f64>,
    /// The default mode's plan over the module merge-similar rewrote.
    similar: f64,
}

/// Median seconds of code generation for the disabled plan, for the default mode's plan
/// (when it compiles fewer bodies) and for the default mode's plan over the rewritten
/// module `similar`, 5 alternating runs each.
fn codegen_times(module: &Module, plan: &MergePlan, similar: (&Module, &MergePlan)) -> Codegen {
    let isa = common::isa();
    let disabled = MergePlan::default();
    let fewer = plan.compiled_count(module) < module.len();
    let (mut off, mut on, mut sim) = (Vec::new(), Vec::new(), Vec::new());
    // The disabled plan compiles every function on its own, as the pipeline does for it;
    // merged plans compile once the bodies that compile alike.
    let time = |m: &Module, p: &MergePlan, share_alike: bool, into: &mut Vec<f64>| {
        let t = Instant::now();
        compile_bodies(m, p, &*isa, share_alike).expect("compiles");
        into.push(t.elapsed().as_secs_f64());
    };
    for _ in 0..5 {
        time(module, &disabled, false, &mut off);
        if fewer {
            time(module, plan, true, &mut on);
        }
        time(similar.0, similar.1, true, &mut sim);
    }
    Codegen {
        disabled: common::median(&mut off),
        merged: fewer.then(|| common::median(&mut on)),
        similar: common::median(&mut sim),
    }
}

fn measure(name: &'static str, dir: &Path, tmp: &Path, full: bool) -> CorpusResult {
    let t = Instant::now();
    let module = common::load_module(dir);
    eprintln!(
        "size bench: {name}: {} functions read in {}",
        module.len(),
        common::fmt_s(t.elapsed().as_secs_f64())
    );
    let write = |e: &common::Emitted, file: &str| {
        let path = tmp.join(format!("{name}-{file}"));
        std::fs::write(&path, &e.object).expect("writing to the temporary directory");
        path
    };
    let disabled = common::emit(&module, MergeMode::Disabled, false);
    let sections = common::emit(&module, MergeMode::Disabled, true);
    let unmerged = write(&sections, "unmerged.o");
    let trampolines = common::emit(&module, MergeMode::Trampolines, false);
    let aliases = common::emit(&module, MergeMode::Aliases, false);
    let tramp_o = write(&trampolines, "trampolines.o");
    let alias_o = write(&aliases, "aliases.o");
    let t = Instant::now();
    let (similar_t, rewritten) = common::emit_similar(&module, MergeMode::Trampolines);
    let (similar_a, _) = common::emit_similar(&module, MergeMode::Aliases);
    eprintln!(
        "size bench: {name}: merge-similar, both modes, in {}",
        common::fmt_s(t.elapsed().as_secs_f64())
    );
    let similar_t_o = write(&similar_t, "similar-trampolines.o");
    let similar_a_o = write(&similar_a, "similar-aliases.o");

    let so = |file: &str| tmp.join(format!("{name}-{file}"));
    let plain = link("ld.lld", &["-shared"], &unmerged, &so("plain.so"));
    let mut rows = vec![Row {
        label: "unmerged (disabled)",
        folded: Some(0),
        similar: None,
        object_text: Some(disabled.text_bytes),
        linked_text: plain.map(|p| p.1),
        link_s: plain.map(|p| p.2),
    }];
    let linkers: [(&'static str, &str, &[&str]); 4] = [
        ("ld.lld --icf=all", "ld.lld", &["-shared", "--icf=all"]),
        (
            "ld.lld -Bsymbolic --icf=all",
            "ld.lld",
            &["-shared", "-Bsymbolic", "--icf=all"],
        ),
        (
            "ld.gold --icf=all",
            "/usr/bin/ld.gold",
            &["-shared", "--icf=all"],
        ),
        (
            "ld.gold -Bsymbolic --icf=all",
            "/usr/bin/ld.gold",
            &["-shared", "-Bsymbolic", "--icf=all"],
        ),
    ];
    for (i, (label, linker, args)) in linkers.into_iter().enumerate() {
        let r = link(linker, args, &unmerged, &so(&format!("icf{i}.so")));
        rows.push(Row {
            label,
            folded: r.map(|r| r.0),
            similar: None,
            object_text: None,
            linked_text: r.map(|r| r.1),
            link_s: r.map(|r| r.2),
        });
    }
    for (label, e, o, file) in [
        (
            "clif-merge trampolines",
            &trampolines,
            &tramp_o,
            "ours-t.so",
        ),
        ("clif-merge aliases", &aliases, &alias_o, "ours-a.so"),
        (
            "clif-merge --merge-similar trampolines",
            &similar_t,
            &similar_t_o,
            "similar-t.so",
        ),
        (
            "clif-merge --merge-similar aliases",
            &similar_a,
            &similar_a_o,
            "similar-a.so",
        ),
    ] {
        let r = link("ld.lld", &["-shared"], o, &so(file));
        rows.push(Row {
            label,
            folded: Some(e.folded),
            similar: e.similar,
            object_text: Some(e.text_bytes),
            linked_text: r.map(|r| r.1),
            link_s: r.map(|r| r.2),
        });
    }
    let compiled = vec![
        ("disabled", disabled.compiled),
        ("trampolines", trampolines.compiled),
        ("aliases", aliases.compiled),
        ("similar trampolines", similar_t.compiled),
        ("similar aliases", similar_a.compiled),
    ];
    let plan = clif_merge::merge(&module, &common::target(), &MergeOptions::default());
    let plan_bodies = plan.compiled_count(&module);
    let similar_plan = clif_merge::merge(&rewritten, &common::target(), &MergeOptions::default());
    let similar_plan_bodies = similar_plan.compiled_count(&rewritten);
    let codegen = full.then(|| codegen_times(&module, &plan, (&rewritten, &similar_plan)));
    CorpusResult {
        name,
        functions: module.len(),
        rows,
        compiled,
        plan_bodies,
        similar_plan_bodies,
        similar_pass_s: similar_t.similar.map_or(0.0, |s| s.pass_s),
        codegen,
    }
}

fn pct(saved: u64, of: u64) -> f64 {
    100.0 * saved as f64 / of as f64
}

fn print(results: &[CorpusResult]) {
    println!();
    println!(
        "size: {} ({}), commit {}",
        common::TRIPLE,
        common::SETTINGS
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        common::git_commit()
    );
    println!();
    println!(
        "| corpus | method | functions | folded | similar thunks (shared bodies) | folded or thunked | object .text | saved | linked .text | saved |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let object_base = r.rows[0].object_text.unwrap_or(0);
        let linked_base = r.rows[0].linked_text;
        for row in &r.rows {
            let object = match row.object_text {
                Some(t) => (common::thousands(t), saving(object_base, t)),
                None => ("–".into(), "–".into()),
            };
            let linked = match (row.linked_text, linked_base) {
                (Some(t), Some(base)) => (common::thousands(t), saving(base, t)),
                (Some(t), None) => (common::thousands(t), "–".into()),
                _ => ("did not link".into(), "–".into()),
            };
            let similar = row.similar.map_or("–".into(), |s| {
                format!(
                    "{} ({})",
                    common::thousands(s.thunks as u64),
                    common::thousands(s.bodies as u64)
                )
            });
            let either = row
                .folded
                .map(|f| f + row.similar.map_or(0, |s| s.thunks - s.overlap));
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.name,
                row.label,
                common::thousands(r.functions as u64),
                row.folded
                    .map_or("–".into(), |f| common::thousands(f as u64)),
                similar,
                either.map_or("–".into(), |f| format!(
                    "{} ({:.1}%)",
                    common::thousands(f as u64),
                    100.0 * f as f64 / r.functions as f64
                )),
                object.0,
                object.1,
                linked.0,
                linked.1
            );
        }
    }
    println!(
        "(folded: names folded by identical merging, or sharing an address in the library; \
         similar thunks: names merge-similar turned into thunks into a shared body, and the \
         bodies; folded or thunked: names without a body of their own, each counted once \
         (every member of a class of equal functions becomes its own thunk, and the equal \
         thunks then fold again, so a name can be both folded and a similar thunk))"
    );
    println!();
    println!("merge-similar:");
    for r in results {
        for row in &r.rows {
            let Some(s) = row.similar else { continue };
            println!(
                "  {} {}: {} thunks into {} shared bodies, {} groups turned down by the cost model, \
                 {} bytes saved by the pass's own measure, {} names both folded and thunks, pass {}",
                r.name,
                row.label,
                s.thunks,
                s.bodies,
                s.rejected_by_cost,
                common::thousands(s.bytes_saved),
                s.overlap,
                common::fmt_s(s.pass_s)
            );
        }
    }
    println!();
    println!("link times (s): ");
    for r in results {
        let times: Vec<String> = r
            .rows
            .iter()
            .map(|row| {
                format!(
                    "{} {}",
                    row.label,
                    row.link_s.map_or("–".into(), |s| format!("{s:.2}"))
                )
            })
            .collect();
        println!("  {}: {}", r.name, times.join("; "));
    }
    println!();
    println!("compile time saved (bodies never compiled):");
    println!("| corpus | functions | bodies compiled | bodies in the object (trampolines / aliases) | codegen, disabled | codegen, merged | saved | bodies compiled, merge-similar | bodies in the object, merge-similar (trampolines / aliases) | codegen, merge-similar | saved | merge-similar pass |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let bodies = |m: &str| {
            r.compiled
                .iter()
                .find(|c| c.0 == m)
                .map_or("–".into(), |c| common::thousands(c.1 as u64))
        };
        let time_saved = |off: f64, on: f64| {
            format!(
                "{} ({:.1}%)",
                common::fmt_s(off - on),
                100.0 * (off - on) / off
            )
        };
        let (off, on, saved, similar, similar_saved) = match &r.codegen {
            Some(c) => {
                let (on, saved) = match c.merged {
                    Some(on) => (common::fmt_s(on), time_saved(c.disabled, on)),
                    None => ("–".into(), "none: every body is compiled".into()),
                };
                (
                    common::fmt_s(c.disabled),
                    on,
                    saved,
                    common::fmt_s(c.similar),
                    time_saved(c.disabled, c.similar),
                )
            }
            None => (
                "–".into(),
                "–".into(),
                "not measured".into(),
                "–".into(),
                "not measured".into(),
            ),
        };
        println!(
            "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |",
            r.name,
            common::thousands(r.functions as u64),
            common::thousands(r.plan_bodies as u64),
            bodies("trampolines"),
            bodies("aliases"),
            off,
            on,
            saved,
            common::thousands(r.similar_plan_bodies as u64),
            bodies("similar trampolines"),
            bodies("similar aliases"),
            similar,
            similar_saved,
            common::fmt_s(r.similar_pass_s)
        );
    }
    println!(
        "(bodies compiled: the default mode's plan, before machine-code folding, which then drops the bodies that compiled alike; with merge-similar, over the rewritten module: shared bodies and thunks are bodies too; codegen: compile_bodies on {} rayon threads, median of 5 alternating runs; merge-similar pass: one run, before identical merging (its cost model compiles nothing), not included in codegen)",
        rayon::current_num_threads()
    );
}

/// `saved (x%)` of `base` when the result is `t` (negative when `t` is larger).
fn saving(base: u64, t: u64) -> String {
    let saved = base as i64 - t as i64;
    let sign = if saved < 0 { "−" } else { "" };
    format!(
        "{sign}{} ({sign}{:.1}%)",
        common::thousands(saved.unsigned_abs()),
        pct(saved.unsigned_abs(), base)
    )
}

/// `302200` as `302k`, `1234` as `1.2k`.
fn compact(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=9_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.0}k", n as f64 / 1e3),
    }
}

/// Bytes of the unmerged library's `.text` saved, per corpus and method (log scale: re2
/// saves hundreds of kilobytes; sqlite and zstd tens of bytes by identical folding, and
/// kilobytes with merge-similar).
fn draw(path: &Path, results: &[CorpusResult]) -> Result<(), Box<dyn std::error::Error>> {
    let methods: Vec<&'static str> = results[0].rows[1..].iter().map(|r| r.label).collect();
    let colors = [
        RGBColor(0x9e, 0xca, 0xe1),
        RGBColor(0x31, 0x82, 0xbd),
        RGBColor(0xfd, 0xae, 0x6b),
        RGBColor(0xe6, 0x55, 0x0d),
        RGBColor(0x74, 0xc4, 0x76),
        RGBColor(0x23, 0x8b, 0x45),
        RGBColor(0xbc, 0xbd, 0xdc),
        RGBColor(0x75, 0x6b, 0xb1),
    ];
    let saved = |r: &CorpusResult, i: usize| -> Option<u64> {
        let base = r.rows[0].linked_text?;
        let t = r.rows[i + 1].linked_text?;
        Some(base.saturating_sub(t))
    };
    let top = results
        .iter()
        .flat_map(|r| (0..methods.len()).filter_map(move |i| saved(r, i)))
        .fold(10, u64::max) as f64;
    let root = SVGBackend::new(path, (1100, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Bytes of .text saved against the unmerged shared library",
            ("sans-serif", 19),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..results.len() as f64, (1.0..top * 40.0).log_scale())?;
    let names: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "{} ({} functions)",
                r.name,
                common::thousands(r.functions as u64)
            )
        })
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(results.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 && i < names.len() {
                names[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc("bytes saved (log scale)")
        .y_label_formatter(&|y| common::thousands(y.round() as u64))
        .draw()?;
    let width = 0.8 / methods.len() as f64;
    for (m, label) in methods.iter().enumerate() {
        let color = colors[m % colors.len()];
        chart
            .draw_series(results.iter().enumerate().filter_map(|(c, r)| {
                let v = saved(r, m).filter(|&v| v > 0)?;
                let x0 = c as f64 + 0.1 + m as f64 * width;
                Some(Rectangle::new(
                    [(x0, 1.0), (x0 + width * 0.92, v as f64)],
                    color.filled(),
                ))
            }))?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(results.iter().enumerate().filter_map(|(c, r)| {
            let v = saved(r, m)?;
            let x = c as f64 + 0.1 + m as f64 * width;
            Some(Text::new(
                compact(v),
                (x, (v.max(1) as f64) * 1.6),
                ("sans-serif", 11).into_font(),
            ))
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() {
    let full = common::measuring();
    let corpora = common::corpora_to_measure("size bench");
    if corpora.is_empty() {
        return;
    }
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let results: Vec<CorpusResult> = corpora
        .into_iter()
        .map(|(name, dir)| measure(name, &dir, tmp.path(), full))
        .collect();
    print(&results);
    if full {
        let path = common::bench_dir().join("size.svg");
        match draw(&path, &results) {
            Ok(()) => println!("wrote {}", path.display()),
            Err(e) => println!("could not draw {}: {e}", path.display()),
        }
    }
    println!(
        "size bench: {} in all",
        common::fmt_s(started.elapsed().as_secs_f64())
    );
}
