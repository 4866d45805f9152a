//! Size: what clif-merge saves on each corpus, next to what the linkers' identical code
//! folding saves, and the compile time saved because folded functions are never compiled.
//!
//! For each corpus under ../shared/corpus (absent ones are skipped with a notice):
//! - the object is written with `--merge-functions disabled`, `trampolines` and `aliases`
//!   (x86_64-unknown-linux-gnu, is_pic=true, preserve_frame_pointers=true,
//!   opt_level=speed): functions, folded, bodies compiled, `.text` bytes of the object;
//! - the unmerged object is written again one function per section
//!   (`EmitOptions::per_function_section`, `--function-sections`) and linked into a shared
//!   library by `ld.lld -shared --icf=all`, `ld.lld -shared -Bsymbolic --icf=all`,
//!   `ld.gold -shared --icf=all` and `ld.gold -shared -Bsymbolic --icf=all`, and without ICF
//!   (the baseline); clif-merge's objects are linked by `ld.lld -shared` without ICF. Folded
//!   counts for a library are names sharing an address; `.text` is the library's section;
//! - code generation is timed for the disabled plan and for the default mode's plan
//!   (`compile_bodies`, 5 runs each, alternating, median) where that plan compiles fewer
//!   bodies.
//!
//! Prints three tables and draws `bench/size.svg` (`.text` saved per corpus and method).
//! `cargo bench --bench size` (about 3 minutes on 2 cores). As a test (`cargo test
//! --benches`, no `--bench` argument) it only does zstd and draws nothing.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use clif_merge::emit::compile::compile_bodies;
use clif_merge::merge::{MergeMode, MergeOptions, MergePlan, Module};
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
    /// Median seconds of `compile_bodies` for the disabled plan and the merged plan (when
    /// measured, and when the plan compiles fewer bodies).
    codegen: Option<(f64, f64)>,
}

/// Median seconds of code generation for the disabled plan and for the default mode's
/// plan, 5 alternating runs each; `None` when the plan compiles every body anyway.
fn codegen_times(module: &Module, plan: &MergePlan) -> Option<(f64, f64)> {
    if plan.compiled_count(module) == module.len() {
        return None;
    }
    let isa = common::isa();
    let disabled = MergePlan::default();
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        compile_bodies(module, &disabled, &*isa).expect("compiles");
        off.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        compile_bodies(module, plan, &*isa).expect("compiles");
        on.push(t.elapsed().as_secs_f64());
    }
    Some((common::median(&mut off), common::median(&mut on)))
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

    let so = |file: &str| tmp.join(format!("{name}-{file}"));
    let plain = link("ld.lld", &["-shared"], &unmerged, &so("plain.so"));
    let mut rows = vec![Row {
        label: "unmerged (disabled)",
        folded: Some(0),
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
    ] {
        let r = link("ld.lld", &["-shared"], o, &so(file));
        rows.push(Row {
            label,
            folded: Some(e.folded),
            object_text: Some(e.text_bytes),
            linked_text: r.map(|r| r.1),
            link_s: r.map(|r| r.2),
        });
    }
    let compiled = vec![
        ("disabled", disabled.compiled),
        ("trampolines", trampolines.compiled),
        ("aliases", aliases.compiled),
    ];
    let plan = clif_merge::merge(&module, &common::target(), &MergeOptions::default());
    let plan_bodies = plan.compiled_count(&module);
    let codegen = if full {
        codegen_times(&module, &plan)
    } else {
        None
    };
    CorpusResult {
        name,
        functions: module.len(),
        rows,
        compiled,
        plan_bodies,
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
        "| corpus | method | functions | folded | object .text | saved | linked .text | saved |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let object_base = r.rows[0].object_text.unwrap_or(0);
        let linked_base = r.rows[0].linked_text;
        for row in &r.rows {
            let object = match row.object_text {
                Some(t) => (
                    common::thousands(t),
                    format!(
                        "{} ({:.1}%)",
                        common::thousands(object_base - t),
                        pct(object_base - t, object_base)
                    ),
                ),
                None => ("–".into(), "–".into()),
            };
            let linked = match (row.linked_text, linked_base) {
                (Some(t), Some(base)) => (
                    common::thousands(t),
                    format!(
                        "{} ({:.1}%)",
                        common::thousands(base.saturating_sub(t)),
                        pct(base.saturating_sub(t), base)
                    ),
                ),
                (Some(t), None) => (common::thousands(t), "–".into()),
                _ => ("did not link".into(), "–".into()),
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.name,
                row.label,
                common::thousands(r.functions as u64),
                row.folded
                    .map_or("–".into(), |f| common::thousands(f as u64)),
                object.0,
                object.1,
                linked.0,
                linked.1
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
    println!("| corpus | functions | bodies compiled | bodies in the object (trampolines / aliases) | codegen, disabled | codegen, merged | saved |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let bodies = |m: &str| {
            r.compiled
                .iter()
                .find(|c| c.0 == m)
                .map_or("–".into(), |c| common::thousands(c.1 as u64))
        };
        let (off, on, saved) = match r.codegen {
            Some((off, on)) => (
                common::fmt_s(off),
                common::fmt_s(on),
                format!(
                    "{} ({:.1}%)",
                    common::fmt_s(off - on),
                    100.0 * (off - on) / off
                ),
            ),
            None if r.plan_bodies == r.functions => (
                "–".into(),
                "–".into(),
                "none: every body is compiled".into(),
            ),
            None => ("–".into(), "–".into(), "not measured".into()),
        };
        println!(
            "| {} | {} | {} | {} / {} | {} | {} | {} |",
            r.name,
            common::thousands(r.functions as u64),
            common::thousands(r.plan_bodies as u64),
            bodies("trampolines"),
            bodies("aliases"),
            off,
            on,
            saved
        );
    }
    println!(
        "(bodies compiled: the default mode's plan, before machine-code folding, which then drops the bodies that compiled alike; codegen: compile_bodies on {} rayon threads, median of 5 alternating runs, timed only where the plan compiles fewer bodies)",
        rayon::current_num_threads()
    );
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
/// saves hundreds of kilobytes, sqlite and zstd tens of bytes).
fn draw(path: &Path, results: &[CorpusResult]) -> Result<(), Box<dyn std::error::Error>> {
    let methods: Vec<&'static str> = results[0].rows[1..].iter().map(|r| r.label).collect();
    let colors = [
        RGBColor(0x9e, 0xca, 0xe1),
        RGBColor(0x31, 0x82, 0xbd),
        RGBColor(0xfd, 0xae, 0x6b),
        RGBColor(0xe6, 0x55, 0x0d),
        RGBColor(0x74, 0xc4, 0x76),
        RGBColor(0x23, 0x8b, 0x45),
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
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
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
    let corpora: Vec<_> = common::present_corpora("size bench")
        .into_iter()
        .filter(|(name, _)| full || *name == "zstd")
        .collect();
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
