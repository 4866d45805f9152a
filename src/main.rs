//! The `clif-merge` command: CLIF in, an object and a report out.
//!
//! A thin front end over the library: read and verify the inputs, build the module with
//! the linkages the user gave, run the pass, then write what was asked for (object, JSON
//! report, merged CLIF, an explanation). Every output is built in memory first and
//! written through a temporary file and a rename; on any error, outputs already at the
//! given paths are removed, so a failed run never leaves a partial or stale file behind.
//! Exit status: 0 on success, 1 on an error in the input or the run, 2 on a usage error,
//! 3 when `--fail-on-regression` finds a size regression ([`cli::size`]).

mod cli;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use clif_merge::detect::side_by_side::explain_alignment;
use clif_merge::detect::{similar, HoleValue};
use clif_merge::emit::object::ObjectSink;
use clif_merge::emit::{build_isa, clif::merged_clif, write_atomically, EmitOptions};
use clif_merge::merge::similar::SimilarOptions;
use clif_merge::merge::{explain_in_plan, merge, Linkage, MergeMode, MergeOptions, Module};
use clif_merge::pipeline::{self, PipelineOptions};
use clif_merge::read::{self, ParsedFunction};
use clif_merge::report::{Report, Timings};
use clif_merge::{FuncName, TargetInfo};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_codegen::settings::{self, Configurable, FlagsOrIsa};
use indicatif::{ProgressBar, ProgressStyle};

/// Fold identical Cranelift IR functions (LLVM's MergeFunctions for Cranelift) and write
/// the result as an object file.
#[derive(Parser, Debug)]
#[command(name = "clif-merge", version, about)]
struct Cli {
    /// .clif files, or directories searched recursively for *.clif (in sorted path order).
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,

    /// Target triple (default: the host). A `target` line in a file does not override it.
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,

    /// A Cranelift setting, e.g. `opt_level=speed`, `preserve_frame_pointers=true`
    /// (repeatable). `is_pic` defaults to true so that objects link into shared libraries.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,

    /// Write the object file here. Without it nothing is compiled.
    #[arg(short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,

    /// How folded functions keep their names.
    #[arg(long = "merge-functions", value_name = "MODE", default_value = "trampolines",
          value_parser = ["aliases", "trampolines", "disabled"])]
    merge_functions: String,

    /// Linkage for functions whose name (without `%`) matches GLOB (repeatable; the last
    /// match wins; default export).
    #[arg(long, value_name = "GLOB=LINKAGE", value_parser = parse_linkage)]
    linkage: Vec<(glob::Pattern, Linkage)>,

    /// Declare that no function's address is compared, so folded functions may be aliases.
    #[arg(long)]
    addresses_insignificant: bool,

    /// Do not fold mutually recursive groups (LLVM's behaviour).
    #[arg(long)]
    no_cycles: bool,

    /// One section per function in the object, so linkers can still garbage-collect and fold.
    #[arg(long)]
    function_sections: bool,

    /// Do not fold bodies that compile to the same machine code (only IR-level folding).
    #[arg(long)]
    no_code_folding: bool,

    /// Also merge functions that differ only in constants (integer and float), load/store
    /// offsets, direct call targets and addresses taken: one shared body with a parameter
    /// per difference, each name a thunk passing its own values, wherever that is smaller
    /// on the target; memory flags that only permit optimisation meet in the body (off by
    /// default).
    #[arg(long)]
    merge_similar: bool,

    /// With --merge-similar, do not merge pairs of the functions left whose instructions
    /// align (one body guarding their differences with an identifier parameter, each name
    /// a thunk passing its own); on by default.
    #[arg(long)]
    no_alignment_merging: bool,

    /// With --merge-similar, alignment merging also pairs functions whose blocks do not
    /// pair one to one: blocks with other parameter types, blocks only one of them has.
    /// Merges more, and makes the merge stage slower (1.4 to 3.3 times on the corpora); off
    /// by default.
    #[arg(long, conflicts_with = "no_alignment_merging")]
    align_unlike_blocks: bool,

    /// Write thunks as compiled CLIF calls instead of a single jump.
    #[arg(long, hide = true)]
    clif_thunks: bool,

    /// Write a JSON report here (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,

    /// Write the merged module as CLIF here (`-` for standard output).
    #[arg(long = "emit-clif", value_name = "FILE")]
    emit_clif: Option<PathBuf>,

    /// Say whether functions A and B are equal, and if not, where they first differ; when
    /// they are not equal up to holes either, their instructions aligned side by side.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    explain: Option<Vec<String>>,

    /// Threads for compiling (default: all cores). The output does not depend on it.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,

    /// No progress bar and no summary table.
    #[arg(short, long)]
    quiet: bool,

    #[command(flatten)]
    size: cli::size::SizeArgs,
}

fn parse_setting(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    Ok((name.trim().to_string(), value.trim().to_string()))
}

fn parse_linkage(s: &str) -> Result<(glob::Pattern, Linkage), String> {
    let (pattern, linkage) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("`{s}` is not GLOB=LINKAGE"))?;
    let linkage = match linkage {
        "local" => Linkage::Local,
        "hidden" => Linkage::Hidden,
        "export" => Linkage::Export,
        "preemptible" => Linkage::Preemptible,
        other => {
            return Err(format!(
                "unknown linkage `{other}` (expected local, hidden, export or preemptible)"
            ))
        }
    };
    let pattern = glob::Pattern::new(pattern).map_err(|e| format!("bad glob `{pattern}`: {e}"))?;
    Ok((pattern, linkage))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outputs: Vec<PathBuf> = [&cli.output, &cli.report, &cli.emit_clif, &cli.size.plot]
        .into_iter()
        .flatten()
        .filter(|p| p.as_os_str() != "-")
        .cloned()
        .collect();
    // An output path that names an input (or a .clif file inside an input directory) is
    // never removed on error: that would delete the input.
    let inputs: Vec<PathBuf> = cli
        .inputs
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let is_input = |path: &Path| {
        path.canonicalize().is_ok_and(|c| {
            inputs.iter().any(|i| {
                c == *i
                    || (i.is_dir()
                        && c.starts_with(i)
                        && c.extension().is_some_and(|e| e == "clif"))
            })
        })
    };
    match run(&cli) {
        Ok(code) => code,
        Err(message) => {
            for path in outputs.iter().filter(|p| !is_input(p)) {
                let _ = std::fs::remove_file(path);
            }
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// The progress bar, shown only on a terminal and without `--quiet`.
struct Progress(Option<ProgressBar>);

impl Progress {
    fn new(quiet: bool) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        Progress(Some(ProgressBar::new_spinner()))
    }

    fn phase(&self, message: &'static str, length: Option<u64>) {
        if let Some(bar) = &self.0 {
            bar.reset();
            match length {
                Some(n) => {
                    bar.set_length(n);
                    bar.set_style(
                        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {elapsed}")
                            .expect("valid template")
                            .progress_chars("=> "),
                    );
                }
                None => {
                    bar.set_style(
                        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                            .expect("valid template"),
                    );
                    bar.enable_steady_tick(Duration::from_millis(100));
                }
            }
            bar.set_message(message);
        }
    }

    fn inc(&self) {
        if let Some(bar) = &self.0 {
            bar.inc(1);
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// Where each function was read (`file:line`, by its name as its module prints it), so
/// that an error about a function read from a file names that place. Kept while reading
/// (timed as reading), not while merging.
struct Places(std::collections::HashMap<String, String>);

impl Places {
    fn of(parsed: &[ParsedFunction]) -> Self {
        let name = |p: &ParsedFunction| FuncName::of_function(&p.func).to_string();
        Places(parsed.iter().map(|p| (name(p), p.place())).collect())
    }

    /// `error`'s message, after the place of the function it names, where it names one
    /// read from a file (not a body merge-similar made).
    fn error(&self, error: clif_merge::EmitError) -> String {
        use clif_merge::EmitError::*;
        let function = match &error {
            Codegen { function, .. } | UnresolvedSymbol { function, .. } => Some(function),
            UnsupportedTarget { .. }
            | Setting { .. }
            | Module { .. }
            | Object(_)
            | AliasesNotShared
            | Jit(_)
            | UnwindTable(_) => None,
        };
        match function.and_then(|f| self.0.get(f)) {
            Some(place) => format!("{place}: {error}"),
            None => error.to_string(),
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    if let Some(n) = cli.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global()
            .map_err(|e| e.to_string())?;
    }
    let target = match &cli.target {
        Some(t) => TargetInfo::from_triple_str(t).map_err(|e| e.to_string())?,
        None => TargetInfo::host(),
    };
    let mut settings_list = vec![("is_pic".to_string(), "true".to_string())];
    settings_list.extend(cli.settings.iter().cloned());
    let flags = shared_flags(&settings_list)?;
    let progress = Progress::new(cli.quiet);

    // Read and verify.
    let start = Instant::now();
    let isa = match build_isa(&target, &settings_list) {
        Ok(isa) => Some(isa),
        Err(e @ clif_merge::EmitError::Setting { .. }) => return Err(e.to_string()),
        Err(e) if cli.output.is_some() => return Err(e.to_string()),
        Err(_) => None,
    };
    let files = read::expand_inputs(&cli.inputs).map_err(|e| e.to_string())?;
    progress.phase("reading", Some(files.len() as u64));
    let verify_with = match &isa {
        Some(isa) => FlagsOrIsa::from(&**isa),
        None => FlagsOrIsa::from(&flags),
    };
    let read = read::read_files(&files, Some(verify_with), || progress.inc())
        .map_err(|e| e.to_string())?;
    let mut parsed: Vec<ParsedFunction> = read.functions;
    if parsed.is_empty() {
        let names: Vec<String> = cli.inputs.iter().map(|p| p.display().to_string()).collect();
        return Err(read::ReadError::Empty(names.join(", ")).to_string());
    }
    read::check_unique_names(&parsed).map_err(|e| e.to_string())?;
    if let Some(failure) = read.verify_failure {
        return Err(failure.to_string());
    }
    let places = Places::of(&parsed);
    let parse_s = start.elapsed().as_secs_f64();

    // Merge.
    let start = Instant::now();
    progress.phase("merging", None);
    // Module order is output order (symbols, sections, merged CLIF): by name, so that the
    // object does not depend on the order in which the files were given.
    parsed.sort_by_cached_key(|p| FuncName::of_function(&p.func));
    let mut module = Module::with_capacity(parsed.len());
    for p in parsed {
        let name = FuncName::of_function(&p.func);
        let linkage = linkage_for(&cli.linkage, &name);
        let index = module
            .add(p.func, linkage, false)
            .map_err(|e| format!("{}: {e}", p.file.display()))?;
        module.get_mut(index).similar_thunk = p.similar_thunk;
    }
    let mode: MergeMode = cli.merge_functions.parse()?;
    let options = PipelineOptions {
        merge: MergeOptions {
            mode,
            addresses_insignificant: cli.addresses_insignificant,
            fold_cycles: !cli.no_cycles,
            // The command line writes objects, where an alias is a symbol at its body.
            aliases_share_address: true,
        },
        similar: cli.merge_similar.then(|| SimilarOptions {
            alignment: !cli.no_alignment_merging,
            unlike_blocks: cli.align_unlike_blocks,
            ..SimilarOptions::default()
        }),
        emit: EmitOptions {
            per_function_section: cli.function_sections,
            clif_thunks: cli.clif_thunks,
            fold_machine_code: !cli.no_code_folding,
        },
    };
    let merging_similar = cli.merge_similar && mode != MergeMode::Disabled;
    if merging_similar && isa.is_none() {
        return Err(format!(
            "--merge-similar measures code size, and Cranelift cannot compile for {}",
            target.triple()
        ));
    }
    // With merge-similar, explain the functions as read (they become thunks).
    let mut explanation = match (&cli.explain, merging_similar) {
        (Some(pair), true) => {
            let plan = merge(&module, &target, &options.merge);
            Some(explain_pair(
                &module,
                &target,
                &options.merge,
                &plan,
                pair,
                true,
            )?)
        }
        _ => None,
    };
    // With merging by alignment, what it makes of the two functions as read.
    let aligned_verdict = match (&cli.explain, &isa, &options.similar) {
        (Some(pair), Some(isa), Some(similar)) if merging_similar && similar.alignment => {
            let find = |text: &String| FuncName::parse(text).and_then(|n| module.lookup(&n));
            match (find(&pair[0]), find(&pair[1])) {
                (Some(a), Some(b)) if a != b => Some(clif_merge::merge::similar::explain_aligned(
                    &module,
                    &target,
                    &**isa,
                    a,
                    b,
                    similar.unlike_blocks,
                )),
                _ => None,
            }
        }
        _ => None,
    };
    // Bytes are shown when an object is written and a report, comparison, plot or the
    // terminal summary shows them.
    let sizes_shown = cli.output.is_some()
        && (cli.report.is_some()
            || cli.size.compare.is_some()
            || cli.size.plot.is_some()
            || (!cli.quiet && std::io::stdout().is_terminal()));
    let sizing_isa = isa.clone();
    let building_s = start.elapsed().as_secs_f64();

    // Analyse, and with `-o` compile, fold and define into an object.
    let (analysis, emitted) = match (&cli.output, isa) {
        (Some(_), Some(isa)) => {
            progress.phase("merging and compiling", None);
            let sink = ObjectSink::new(isa, &options.emit).map_err(|e| e.to_string())?;
            let (analysis, done) =
                pipeline::run(module, &target, &options, sink).map_err(|e| places.error(e))?;
            (analysis, Some(done))
        }
        (_, isa) => {
            let analysis = pipeline::analyse(module, &target, isa.as_deref(), &options)
                .map_err(|e| places.error(e))?;
            (analysis, None)
        }
    };
    let merge_s = building_s + analysis.seconds;
    let (module, plan, similar, replaced) = (
        analysis.module,
        analysis.plan,
        analysis.similar,
        analysis.replaced,
    );
    if let (Some(pair), false) = (&cli.explain, merging_similar) {
        explanation = Some(explain_pair(
            &module,
            &target,
            &options.merge,
            &plan,
            pair,
            false,
        )?);
    }
    if let (Some(text), Some(report), Some(pair)) = (&mut explanation, &similar, &cli.explain) {
        let names: Vec<String> = pair
            .iter()
            .filter_map(|n| FuncName::parse(n))
            .map(|n| n.to_string())
            .collect();
        match report
            .groups
            .iter()
            .find(|g| names.iter().all(|n| g.members.contains(n)))
        {
            Some(g) if g.aligned => text.push_str(&format!(
                "merge-similar: merged by alignment into the body {} (its last parameter \
                 the function identifier: 1 runs {}, 0 runs {}), each a thunk passing its own\n",
                g.body, g.members[0], g.members[1]
            )),
            Some(g) => text.push_str(&format!(
                "merge-similar: they share the body {}\n",
                g.body
            )),
            None if report
                .made_equal
                .iter()
                .any(|g| names.iter().all(|n| g.contains(n))) =>
            {
                text.push_str(
                    "merge-similar: they needed no parameter and were given one body, with the \
                     weaker memory flags where theirs differed (identical merging folds them)\n",
                )
            }
            None if text.contains("they are similar") => text.push_str(
                "merge-similar: not merged (the cost model or the parameter limit kept them apart)\n",
            ),
            None => match &aligned_verdict {
                Some(Ok((before, after))) => {
                    // Where each of them went instead, if anywhere.
                    let elsewhere: Vec<String> = names
                        .iter()
                        .filter_map(|n| {
                            let g = report.groups.iter().find(|g| g.members.contains(n))?;
                            Some(format!("{n} shares {} with {}", g.body, g.members.join(", ")))
                        })
                        .collect();
                    let why = match elsewhere.is_empty() {
                        true => "the candidate search did not pair them".to_string(),
                        false => elsewhere.join("; "),
                    };
                    text.push_str(&format!(
                        "merging by alignment: as a pair they would pay (about {after} bytes for \
                         the body and both thunks instead of {before}), but they were not \
                         merged together: {why}\n"
                    ))
                }
                Some(Err(declined)) => text.push_str(&format!(
                    "merging by alignment: not merged: {declined}\n"
                )),
                None => {}
            },
        }
    }
    let (object_bytes, emitted) = match emitted {
        Some(done) => (Some(done.output), Some(done.summary)),
        None => (None, None),
    };
    let clif_text = cli.emit_clif.as_ref().map(|_| {
        let config = TargetFrontendConfig {
            default_call_conv: CallConv::triple_default(target.triple()),
            pointer_width: target
                .triple()
                .pointer_width()
                .unwrap_or(target_lexicon::PointerWidth::U64),
            page_size_align_log2: 12,
        };
        let tail_calls = clif_merge::target::thunks_tail_call(
            target.triple().architecture,
            flags.preserve_frame_pointers(),
        );
        merged_clif(&module, &plan, config, tail_calls)
    });
    progress.finish();

    let timings = Timings {
        parse_s,
        merge_s,
        codegen_s: emitted.as_ref().map_or(0.0, |e| e.codegen_s),
        fold_s: emitted.as_ref().map_or(0.0, |e| e.fold_s),
        emit_s: emitted.as_ref().map_or(0.0, |e| e.emit_s),
    };
    let final_plan = emitted.as_ref().map_or(&plan, |e| &e.plan);
    let report = Report::new(
        target.triple().to_string(),
        cli.merge_functions.clone(),
        &module,
        final_plan,
        emitted.as_ref(),
        timings,
    );
    let mut report = match similar {
        Some(mut similar) => {
            if let (true, Some(isa)) = (sizes_shown, &sizing_isa) {
                cli::size::measure_similar_unmerged(&mut similar, &module, &replaced, &**isa)?;
            }
            report.with_similar(similar)
        }
        None => report,
    };
    let facts = cli::size::RunFacts {
        module: &module,
        replaced: &replaced,
        target: &target,
        options: &options.merge,
        plan: final_plan,
    };
    let size = cli::size::apply(&cli.size, &mut report, &facts)?;

    // Write everything, each file atomically.
    if let (Some(path), Some(bytes)) = (&cli.output, &object_bytes) {
        write_output(path, bytes)?;
    }
    if let Some(path) = &cli.report {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n";
        write_output(path, json.as_bytes())?;
    }
    if let (Some(path), Some(text)) = (&cli.emit_clif, &clif_text) {
        write_output(path, text.as_bytes())?;
    }
    if let (Some(path), Some(svg)) = (&cli.size.plot, &size.plot) {
        write_output(path, svg)?;
    }
    if let Some(text) = explanation {
        print!("{text}");
    }
    if !cli.quiet && std::io::stdout().is_terminal() {
        print!("{}", report.table_with_top(cli.size.top));
    }
    let stdout_taken = [&cli.report, &cli.emit_clif]
        .into_iter()
        .any(|p| p.as_ref().is_some_and(|p| p.as_os_str() == "-"));
    let code = cli::size::finish(&size, stdout_taken);
    // Everything is written. The module, the bodies merge-similar replaced, the plan and
    // the compiled code are left to the operating system instead of being freed one
    // allocation at a time, tens of thousands of them, just before the process ends
    // (clang's driver does the same with `-disable-free`).
    std::mem::forget((module, replaced, plan, emitted, report));
    Ok(code)
}

/// What `--explain A B` prints: whether the two functions share a body, and if not where
/// they first differ; with merge-similar, also whether they are equal except for holes.
fn explain_pair(
    module: &Module,
    target: &TargetInfo,
    options: &MergeOptions,
    plan: &clif_merge::MergePlan,
    pair: &[String],
    merging_similar: bool,
) -> Result<String, String> {
    let find = |text: &str| {
        let name = FuncName::parse(text).ok_or_else(|| {
            format!("--explain: `{text}` is not a function name (write %name or u0:7)")
        })?;
        module
            .lookup(&name)
            .ok_or_else(|| format!("--explain: no function {name} in the input"))
    };
    let (a, b) = (find(&pair[0])?, find(&pair[1])?);
    let (na, nb) = (&module.get(a).name, &module.get(b).name);
    if plan.same_body(a, b) {
        return Ok(format!("{na} and {nb} are equal: they share one body\n"));
    }
    let (fa, fb) = (&module.get(a).func, &module.get(b).func);
    let difference = explain_in_plan(module, target, options, plan, a, b);
    let mut text = match &difference {
        None => format!("{na} and {nb} are equal\n"),
        Some(d) => format!("{na} and {nb} differ\n{d}\n"),
    };
    let with_holes = similar(target, fa, fb);
    if merging_similar {
        match &with_holes {
            Ok(holes) => {
                text.push_str(&format!(
                    "with holes they are similar: {} hole(s) hold different values\n",
                    holes.len()
                ));
                for h in holes {
                    let note = match h.left.value {
                        HoleValue::Flags(_) => "  (a shared body keeps what both allow)",
                        HoleValue::Constant { .. }
                        | HoleValue::Offset { .. }
                        | HoleValue::Callee { .. }
                        | HoleValue::Float { .. }
                        | HoleValue::Address { .. }
                        | HoleValue::Symbol { .. } => "",
                    };
                    text.push_str(&format!(
                        "  left:  {}\n  right: {}{note}\n",
                        h.left.value, h.right.value
                    ));
                }
            }
            Err(d) => text.push_str(&format!("with holes they still differ\n{d}\n")),
        }
    }
    // Neither equal nor equal up to holes: how far apart they are, instruction by instruction.
    if difference.is_some() && with_holes.is_err() {
        text.push_str(&explain_alignment(target, na, fa, nb, fb));
    }
    Ok(text)
}

fn write_output(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if path.as_os_str() == "-" {
        use std::io::Write;
        return std::io::stdout()
            .write_all(bytes)
            .map_err(|e| format!("writing to standard output: {e}"));
    }
    write_atomically(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Cranelift's shared settings with `settings` applied; unknown names are left to the ISA
/// builder (they may be ISA flags), and reported there.
fn shared_flags(settings_list: &[(String, String)]) -> Result<settings::Flags, String> {
    let mut builder = settings::builder();
    for (name, value) in settings_list {
        match builder.set(name, value) {
            Ok(()) | Err(settings::SetError::BadName(_)) => {}
            Err(e) => return Err(format!("setting `{name}={value}`: {e}")),
        }
    }
    Ok(settings::Flags::new(builder))
}

fn linkage_for(rules: &[(glob::Pattern, Linkage)], name: &FuncName) -> Linkage {
    if rules.is_empty() {
        return Linkage::Export;
    }
    let text = name.to_string();
    let bare = text.strip_prefix('%').unwrap_or(&text);
    rules
        .iter()
        .rev()
        .find(|(pattern, _)| pattern.matches(bare))
        .map_or(Linkage::Export, |&(_, linkage)| linkage)
}
