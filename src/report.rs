//! The report of a run: what was read, what was folded and how, what was written, and how
//! long each step took. Serialized as the `--report` JSON and shown as the terminal table.

use serde::Serialize;

use crate::emit::EmitSummary;
use crate::merge::similar::SimilarReport;
use crate::merge::{Action, FoundBy, MergePlan, Module};

/// One folded function in a group.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FoldedReport {
    /// Its name, in Cranelift's spelling (`%foo`, `u0:7`).
    pub name: String,
    /// What it became: `alias`, `thunk` or `erased`.
    #[serde(rename = "as")]
    pub action: Action,
}

/// One group of equal functions.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct GroupReport {
    /// The function whose body is kept.
    pub keep: String,
    /// The others.
    pub folded: Vec<FoldedReport>,
    /// `tree` (identical, or identical once callees were folded) or `cycle`.
    pub found_by: FoundBy,
}

/// Counts by action.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ActionCounts {
    /// Folded functions that disappeared.
    pub erased: usize,
    /// Folded functions that became aliases.
    pub alias: usize,
    /// Folded functions that became thunks.
    pub thunk: usize,
}

/// Seconds per step.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Timings {
    /// Reading and parsing CLIF (and verifying it).
    pub parse_s: f64,
    /// Hashing, comparing and planning.
    pub merge_s: f64,
    /// Compiling bodies.
    pub codegen_s: f64,
    /// Defining symbols and writing the object.
    pub emit_s: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// The target triple.
    pub target: String,
    /// The merge mode.
    pub mode: String,
    /// Functions read.
    pub functions: usize,
    /// Functions folded into another.
    pub merged: usize,
    /// Folded functions by action.
    pub actions: ActionCounts,
    /// Groups of equal functions, by kept name.
    pub groups: Vec<GroupReport>,
    /// Bodies compiled (when an object was written).
    pub compiled: Option<usize>,
    /// Bytes of code in the object (when an object was written).
    pub text_bytes: Option<u64>,
    /// Bytes of code the functions would take unmerged, estimated from the compiled bodies
    /// (each function counted at the size of the body it runs; no padding).
    pub unmerged_code_bytes_estimate: Option<u64>,
    /// What merge-similar did (`--merge-similar`), before identical merging.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similar: Option<SimilarReport>,
    /// Seconds per step.
    pub timings: Timings,
}

impl Report {
    /// The report for `plan` over `module`, with the emission summary if an object was
    /// written. Folded functions that emission wrote as a copy (their body is no larger
    /// than a thunk) are not counted as folded.
    pub fn new(
        target: String,
        mode: String,
        module: &Module,
        plan: &MergePlan,
        emitted: Option<&EmitSummary>,
        timings: Timings,
    ) -> Self {
        let copied = |f| emitted.is_some_and(|e| e.copied.contains(&f));
        let mut actions = ActionCounts::default();
        let groups: Vec<GroupReport> = plan
            .groups()
            .iter()
            .filter_map(|g| {
                let folded: Vec<FoldedReport> = g
                    .folded
                    .iter()
                    .filter(|(f, _)| !copied(*f))
                    .map(|&(f, action)| {
                        match action {
                            Action::Erased => actions.erased += 1,
                            Action::Alias => actions.alias += 1,
                            Action::Thunk => actions.thunk += 1,
                            Action::Keep => {}
                        }
                        FoldedReport {
                            name: module.get(f).name.to_string(),
                            action,
                        }
                    })
                    .collect();
                (!folded.is_empty()).then(|| GroupReport {
                    keep: module.get(g.kept).name.to_string(),
                    folded,
                    found_by: g.found_by,
                })
            })
            .collect();
        Report {
            target,
            mode,
            functions: module.len(),
            merged: actions.erased + actions.alias + actions.thunk,
            actions,
            groups,
            compiled: emitted.map(|e| e.compiled),
            text_bytes: emitted.map(|e| e.text_bytes),
            unmerged_code_bytes_estimate: emitted.map(|e| e.unmerged_code_bytes_estimate),
            similar: None,
            timings,
        }
    }

    /// The same report with what merge-similar did. `functions` counts the functions
    /// read, not the shared bodies merge-similar added.
    pub fn with_similar(mut self, similar: SimilarReport) -> Self {
        self.functions -= similar.groups.len();
        self.similar = Some(similar);
        self
    }

    /// The summary table shown on a terminal.
    pub fn table(&self) -> String {
        let found = |by: FoundBy| self.groups.iter().filter(|g| g.found_by == by).count();
        let mut rows = vec![
            ("functions read", self.functions.to_string()),
            (
                "groups of equal functions",
                format!(
                    "{} ({} by cycle refinement, {} by machine code)",
                    self.groups.len(),
                    found(FoundBy::Cycle),
                    found(FoundBy::Code)
                ),
            ),
            ("folded", self.merged.to_string()),
            ("  erased", self.actions.erased.to_string()),
            ("  aliases", self.actions.alias.to_string()),
            ("  thunks", self.actions.thunk.to_string()),
        ];
        if let Some(similar) = &self.similar {
            rows.push((
                "merged similar",
                format!(
                    "{} functions into {} shared bodies ({} groups turned down by cost)",
                    similar.thunk_count(),
                    similar.groups.len(),
                    similar.rejected_by_cost
                ),
            ));
            rows.push((
                "  bytes saved (measured)",
                similar.bytes_saved().to_string(),
            ));
        }
        if let Some(c) = self.compiled {
            rows.push(("bodies compiled", c.to_string()));
        }
        if let (Some(after), Some(before)) = (self.text_bytes, self.unmerged_code_bytes_estimate) {
            rows.push((".text bytes", after.to_string()));
            rows.push(("  unmerged (estimated)", before.to_string()));
        }
        let t = &self.timings;
        rows.push((
            "time (parse / merge / codegen / emit)",
            format!(
                "{:.2}s / {:.2}s / {:.2}s / {:.2}s",
                t.parse_s, t.merge_s, t.codegen_s, t.emit_s
            ),
        ));
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let mut out = format!("clif-merge: {} ({} mode)\n", self.target, self.mode);
        for (k, v) in rows {
            out.push_str(&format!("  {k:<width$}  {v}\n"));
        }
        out
    }
}
