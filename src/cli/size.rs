//! The size-regression flags of the command line and what they add to a run.
//!
//! `--top N` sets how many groups the summary lists by bytes saved. `--compare BASELINE`
//! compares this run's report with an earlier one ([`clif_merge::report::compare`]): the
//! comparison goes into the JSON report and is printed as a table, each lost fold with the
//! first difference `--explain` would give. `--fail-on-regression BYTES|PERCENT` then
//! judges it ([`clif_merge::report::gate`]) and makes the run exit with
//! [`REGRESSION_EXIT`], with a one-line reason, when `.text` grew past the threshold or a
//! fold was lost. `--plot FILE` draws the top groups, or the comparison ([`super::plot`]).
//!
//! [`REGRESSION_EXIT`] is neither 1 (an error: bad input, a failed run) nor 2 (a usage
//! error), so CI can tell "this change makes the code larger" from "the check is broken".

use std::path::PathBuf;
use std::process::ExitCode;

use clif_merge::emit::compile::text_size;
use clif_merge::merge::similar::{Replaced, SimilarReport};
use clif_merge::merge::{explain_in_plan, MergeOptions, MergePlan, Module};
use clif_merge::report::compare::{compare, GroupKind, LostFold};
use clif_merge::report::gate::{regression, Threshold};
use clif_merge::report::{Report, DEFAULT_TOP};
use clif_merge::{FuncName, TargetInfo};
use cranelift_codegen::isa::TargetIsa;

/// Exit status of a run that `--fail-on-regression` failed.
pub const REGRESSION_EXIT: u8 = 3;

/// The size-regression flags.
#[derive(clap::Args, Debug)]
pub struct SizeArgs {
    /// How many groups the summary lists by bytes saved (and the plot draws).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP)]
    pub top: usize,

    /// Compare with an earlier run's JSON report: functions added and removed, groups that
    /// changed, folds lost, the change in .text bytes (printed, and in the report).
    #[arg(long, value_name = "BASELINE.json")]
    pub compare: Option<PathBuf>,

    /// Exit with status 3 when .text grew more than BYTES (`512`) or PERCENT (`2%`) since
    /// the baseline, or when a fold was lost. Needs --compare.
    #[arg(long, value_name = "BYTES|PERCENT", requires = "compare")]
    pub fail_on_regression: Option<Threshold>,

    /// Write an SVG of the groups by bytes saved, or of the comparison with --compare.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// What the run was, for explaining lost folds.
pub struct RunFacts<'a> {
    /// The module merged and emitted (after merge-similar, if it ran).
    pub module: &'a Module,
    /// The bodies merge-similar replaced: with `module`, the module as read.
    pub replaced: &'a Replaced,
    /// The target.
    pub target: &'a TargetInfo,
    /// The merge options.
    pub options: &'a MergeOptions,
    /// The final plan (with machine-code folding).
    pub plan: &'a MergePlan,
}

/// Compile every member of every merge-similar group from its body as read (`replaced`,
/// with `module` the merged module), in parallel, and set each group's `unmerged_bytes` to
/// what they take: exact bytes for the report, where merge-similar's cost model only
/// estimates them (it compiles nothing). Done only for runs that show sizes, and timed in
/// none of the report's timings.
pub fn measure_similar_unmerged(
    similar: &mut SimilarReport,
    module: &Module,
    replaced: &Replaced,
    isa: &dyn TargetIsa,
) -> Result<(), String> {
    use rayon::prelude::*;
    let members: Vec<(usize, &str)> = similar
        .groups
        .iter()
        .enumerate()
        .flat_map(|(g, group)| group.members.iter().map(move |m| (g, m.as_str())))
        .collect();
    let sizes: Vec<(usize, u64)> = members
        .par_iter()
        .map(|&(g, name)| {
            let f = FuncName::parse(name)
                .and_then(|n| module.lookup(&n))
                .ok_or_else(|| format!("merge-similar member {name} is not in the input"))?;
            let bytes = text_size(isa, replaced.as_read(module, f).clone())
                .map_err(|e| format!("function {name}: code generation failed: {e}"))?;
            Ok((g, bytes))
        })
        .collect::<Result<_, String>>()?;
    for group in &mut similar.groups {
        group.unmerged_bytes = 0;
    }
    for (g, bytes) in sizes {
        similar.groups[g].unmerged_bytes += bytes;
    }
    Ok(())
}

/// What the flags add to a run, once its report is made.
pub struct Outcome {
    /// The SVG of `--plot`.
    pub plot: Option<Vec<u8>>,
    /// The comparison table of `--compare`.
    pub table: Option<String>,
    /// Why `--fail-on-regression` fails the run.
    pub regression: Option<String>,
}

/// Compare `report` with the baseline (into the report), judge it, and draw the plot.
pub fn apply(args: &SizeArgs, report: &mut Report, run: &RunFacts) -> Result<Outcome, String> {
    let mut outcome = Outcome {
        plot: None,
        table: None,
        regression: None,
    };
    if let Some(path) = &args.compare {
        let baseline = super::baseline::read(path)?;
        let name = path.display().to_string();
        let comparison = compare(&baseline, &name, report, |fold| explain(run, report, fold));
        outcome.table = Some(comparison.table(args.top));
        if let Some(threshold) = args.fail_on_regression {
            outcome.regression = regression(&comparison, threshold)
                .map_err(|e| format!("--fail-on-regression: {e}"))?;
        }
        report.comparison = Some(comparison);
    }
    if args.plot.is_some() {
        outcome.plot = Some(super::plot::svg(report, args.top)?.into_bytes());
    }
    Ok(outcome)
}

/// Print what the flags add (the comparison table, asked for, so printed even with
/// `--quiet`: on standard error when standard output carries a report or CLIF) and the
/// exit status.
pub fn finish(outcome: &Outcome, stdout_taken: bool) -> ExitCode {
    if let Some(table) = &outcome.table {
        if stdout_taken {
            eprint!("{table}");
        } else {
            print!("{table}");
        }
    }
    match &outcome.regression {
        Some(why) => {
            eprintln!("{why}");
            ExitCode::from(REGRESSION_EXIT)
        }
        None => ExitCode::SUCCESS,
    }
}

/// Why `fold.function` no longer folds with `fold.was_with`, in this run's terms.
fn explain(run: &RunFacts, report: &Report, fold: &LostFold) -> Option<String> {
    let similar_body = |name: &str| {
        report
            .symbols
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.similar_body.clone())
    };
    let (a, b) = (&fold.function, &fold.was_with);
    match fold.kind {
        GroupKind::Identical => {
            let thunks: Vec<String> = [a, b]
                .into_iter()
                .filter_map(|n| similar_body(n).map(|body| format!("{n} into {body}")))
                .collect();
            if !thunks.is_empty() {
                return Some(format!("now merge-similar thunks: {}", thunks.join(", ")));
            }
            let find = |n: &str| run.module.lookup(&FuncName::parse(n)?);
            let (fa, fb) = (find(a)?, find(b)?);
            Some(
                match explain_in_plan(run.module, run.target, run.options, run.plan, fa, fb) {
                    Some(d) => d.to_string(),
                    None => "equal to the comparator, not folded in this run (its merge mode, \
                             or a body no larger than a thunk, copied)"
                        .to_string(),
                },
            )
        }
        GroupKind::Similar => {
            if let Some(now) = &fold.now_in {
                return Some(format!("now in another merge-similar group, {now}"));
            }
            let find = |n: &str| run.module.lookup(&FuncName::parse(n)?);
            let (fa, fb) = (find(a)?, find(b)?);
            let as_read = |f| run.replaced.as_read(run.module, f);
            let (fa, fb) = (as_read(fa), as_read(fb));
            Some(match clif_merge::detect::similar(run.target, fa, fb) {
                Ok(holes) => format!(
                    "similar ({} hole(s) differ): the cost model or the parameter limit kept them apart",
                    holes.len()
                ),
                Err(d) => format!("not similar even with holes\n{d}"),
            })
        }
    }
}
