//! The report of a run: what was read, what was folded and how, what was written, where
//! the bytes of `.text` went, and how long each step took. Serialized as the `--report`
//! JSON and shown as the terminal table.
//!
//! The report is also the input of the size-regression workflow: [`compare`] tells what
//! changed between a baseline report and this run, [`gate`] decides whether that is a
//! regression. Reports carry [`FORMAT_VERSION`], so a baseline written by an incompatible
//! version is refused with a clear message rather than misread.

pub mod compare;
pub mod gate;

use serde::{Deserialize, Serialize};

use crate::emit::EmitSummary;
use crate::merge::similar::SimilarReport;
use crate::merge::{Action, Body, FoundBy, FuncIndex, MergePlan, Module};

/// The version of the report's JSON format. Bump it when a field that [`compare`] reads
/// changes meaning or disappears; a baseline of another version is refused.
pub const FORMAT_VERSION: u32 = 1;

/// How many groups the terminal summary lists by bytes saved, unless told otherwise.
pub const DEFAULT_TOP: usize = 10;

/// One folded function in a group.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FoldedReport {
    /// Its name, in Cranelift's spelling (`%foo`, `u0:7`).
    pub name: String,
    /// What it became: `alias`, `thunk` or `erased`.
    #[serde(rename = "as")]
    pub action: Action,
}

/// One group of equal functions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupReport {
    /// The function whose body is kept.
    pub keep: String,
    /// The others.
    pub folded: Vec<FoldedReport>,
    /// `tree` (identical, or identical once callees were folded), `cycle` or `code`.
    pub found_by: FoundBy,
    /// Bytes of the one body the group keeps (when an object was written).
    #[serde(default)]
    pub body_bytes: Option<u64>,
    /// Bytes of `.text` the group saves against compiling every member from its own body:
    /// the folded members' bodies minus their thunks (aliases and erased functions take
    /// none). Negative if its thunks are larger than its body. When an object was written.
    #[serde(default)]
    pub saved_bytes: Option<i64>,
}

impl GroupReport {
    /// Every member's name, the kept one first.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.keep.as_str()).chain(self.folded.iter().map(|f| f.name.as_str()))
    }
}

/// One function read, and where its bytes went.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SymbolReport {
    /// Its name, in Cranelift's spelling.
    pub name: String,
    /// What it became: `keep` (its own body, or a copy of its group's), `alias`, `thunk`
    /// or `erased`.
    #[serde(rename = "as")]
    pub action: Action,
    /// The function whose compiled body a call to it runs, when not its own: its group's
    /// kept function, or the new local symbol holding the group's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The merge-similar shared body it became a thunk into (`--merge-similar`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similar_body: Option<String>,
    /// Bytes it takes in `.text` by itself: its body, a copy, or its thunk; 0 for an
    /// alias or an erased function (when an object was written).
    #[serde(default)]
    pub bytes: Option<u64>,
    /// Bytes of the compiled body a call to it runs: its own, or the one it shares (for a
    /// merge-similar member, its thunk; the shared body is in `similar`).
    #[serde(default)]
    pub body_bytes: Option<u64>,
}

/// Counts by action.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ActionCounts {
    /// Folded functions that disappeared.
    pub erased: usize,
    /// Folded functions that became aliases.
    pub alias: usize,
    /// Folded functions that became thunks.
    pub thunk: usize,
}

/// Seconds per step.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Timings {
    /// Reading and parsing CLIF (and verifying it).
    pub parse_s: f64,
    /// Hashing, comparing and planning.
    pub merge_s: f64,
    /// Compiling bodies.
    pub codegen_s: f64,
    /// Folding bodies that compiled to the same machine code (merging done after code
    /// generation; absent, 0, in reports before it was timed).
    #[serde(default)]
    pub fold_s: f64,
    /// Defining symbols and writing the object.
    pub emit_s: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// [`FORMAT_VERSION`]: absent (0) in reports of versions before it existed.
    #[serde(default)]
    pub format_version: u32,
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
    /// Of those, the bodies that took the code of another with the same stencil instead of
    /// being compiled by Cranelift (absent in reports before it was counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled_alike: Option<usize>,
    /// Bytes of code in the object (when an object was written).
    pub text_bytes: Option<u64>,
    /// Bytes of code the functions would take unmerged, estimated from the compiled bodies
    /// (each function counted at the size of the body it runs; no padding).
    pub unmerged_code_bytes_estimate: Option<u64>,
    /// Every function read, by name: what it became and its bytes.
    pub symbols: Vec<SymbolReport>,
    /// What merge-similar did (`--merge-similar`), before identical merging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similar: Option<SimilarReport>,
    /// What changed since a baseline report (`--compare`).
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<compare::Comparison>,
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
        let sizes = emitted.map(|e| &e.sizes);
        let mut actions = ActionCounts::default();
        let groups: Vec<GroupReport> = plan
            .groups()
            .iter()
            .filter_map(|g| {
                let members: Vec<FuncIndex> = std::iter::once(g.kept)
                    .chain(g.folded.iter().map(|&(f, _)| f))
                    .collect();
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
                    body_bytes: sizes.map(|s| s.runs[g.kept]),
                    saved_bytes: sizes.map(|s| s.saved_by_group(plan, &members)),
                })
            })
            .collect();
        let symbols = module
            .iter()
            .map(|(f, m)| {
                let group = plan.group_of(f).filter(|_| !copied(f));
                let body = group.and_then(|g| match &g.body {
                    Body::SharedLocal { symbol } => Some(format!("%{symbol}")),
                    Body::Kept if g.kept != f => Some(module.get(g.kept).name.to_string()),
                    Body::Kept => None,
                });
                SymbolReport {
                    name: m.name.to_string(),
                    action: if copied(f) {
                        Action::Keep
                    } else {
                        plan.action(f)
                    },
                    body,
                    similar_body: None,
                    bytes: sizes.map(|s| s.own[f]),
                    body_bytes: sizes.map(|s| s.runs[f]),
                }
            })
            .collect();
        Report {
            format_version: FORMAT_VERSION,
            target,
            mode,
            functions: module.len(),
            merged: actions.erased + actions.alias + actions.thunk,
            actions,
            groups,
            compiled: emitted.map(|e| e.compiled),
            compiled_alike: emitted.map(|e| e.compiled_alike),
            text_bytes: emitted.map(|e| e.text_bytes),
            unmerged_code_bytes_estimate: emitted.map(|e| e.unmerged_code_bytes_estimate),
            symbols,
            similar: None,
            comparison: None,
            timings,
        }
    }

    /// The same report with what merge-similar did. `functions` and `symbols` count the
    /// functions read, not the shared bodies merge-similar added; each group's
    /// `saved_bytes` is its members' unmerged bytes minus the shared body and what their
    /// calls run now (their thunks), when an object was written.
    pub fn with_similar(mut self, mut similar: SimilarReport) -> Self {
        self.functions -= similar.groups.len();
        // Symbols by name (the first of a name, as a search from the start finds it).
        let mut at: std::collections::HashMap<&str, usize> =
            std::collections::HashMap::with_capacity(self.symbols.len());
        for (i, s) in self.symbols.iter().enumerate() {
            at.entry(s.name.as_str()).or_insert(i);
        }
        let found: Vec<(Option<usize>, Vec<usize>)> = similar
            .groups
            .iter()
            .map(|group| {
                let members = group
                    .members
                    .iter()
                    .filter_map(|m| at.get(m.as_str()).copied())
                    .collect();
                (at.get(group.body.as_str()).copied(), members)
            })
            .collect();
        let mut bodies = vec![false; self.symbols.len()];
        for (group, (body, mut members)) in similar.groups.iter_mut().zip(found) {
            group.body_bytes = body.and_then(|i| {
                bodies[i] = true;
                self.symbols[i].body_bytes
            });
            let mut runs = group.body_bytes;
            members.sort_unstable();
            for i in members {
                let symbol = &mut self.symbols[i];
                symbol.similar_body = Some(group.body.clone());
                runs = runs.zip(symbol.body_bytes).map(|(a, b)| a + b);
            }
            group.saved_bytes = runs.map(|r| group.unmerged_bytes as i64 - r as i64);
        }
        let mut i = 0;
        self.symbols.retain(|_| {
            i += 1;
            !bodies[i - 1]
        });
        self.similar = Some(similar);
        self
    }

    /// Every group with its bytes saved (identical and merge-similar alike), most saved
    /// first, then by name: the `cargo bloat` view of the pass.
    pub fn groups_by_saved_bytes(&self) -> Vec<compare::GroupView> {
        let mut all = compare::GroupView::all(self);
        all.sort_by(|a, b| {
            b.saved_bytes
                .unwrap_or(i64::MIN)
                .cmp(&a.saved_bytes.unwrap_or(i64::MIN))
                .then_with(|| a.name.cmp(&b.name))
        });
        all
    }

    /// The summary table shown on a terminal, with the [`DEFAULT_TOP`] groups that save
    /// the most.
    pub fn table(&self) -> String {
        self.table_with_top(DEFAULT_TOP)
    }

    /// The summary table, ending with the `top` groups that save the most bytes (when an
    /// object was written).
    pub fn table_with_top(&self, top: usize) -> String {
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
        if let Some(alike) = self.compiled_alike.filter(|&n| n > 0) {
            rows.push(("  code reused for equal stencils", alike.to_string()));
        }
        if let (Some(after), Some(before)) = (self.text_bytes, self.unmerged_code_bytes_estimate) {
            rows.push((".text bytes", after.to_string()));
            rows.push(("  unmerged (estimated)", before.to_string()));
        }
        let t = &self.timings;
        rows.push((
            "time (parse / merge / codegen / fold / emit)",
            format!(
                "{:.2}s / {:.2}s / {:.2}s / {:.2}s / {:.2}s",
                t.parse_s, t.merge_s, t.codegen_s, t.fold_s, t.emit_s
            ),
        ));
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let mut out = format!("clif-merge: {} ({} mode)\n", self.target, self.mode);
        for (k, v) in rows {
            out.push_str(&format!("  {k:<width$}  {v}\n"));
        }
        out.push_str(&self.top_groups_table(top));
        out
    }

    /// The `top` groups that save the most bytes, as a table (empty when nothing was
    /// compiled or nothing folded).
    pub fn top_groups_table(&self, top: usize) -> String {
        let mut groups: Vec<compare::GroupView> = self
            .groups_by_saved_bytes()
            .into_iter()
            .filter(|g| g.saved_bytes.is_some())
            .collect();
        let total = groups.len();
        groups.truncate(top);
        if groups.is_empty() {
            return String::new();
        }
        let mut out = if total > groups.len() {
            format!("  top {} of {total} groups by bytes saved\n", groups.len())
        } else {
            "  groups by bytes saved\n".to_string()
        };
        let width = groups
            .iter()
            .map(|g| g.saved_bytes.unwrap_or(0).to_string().len())
            .max()
            .unwrap_or(0);
        for g in groups {
            out.push_str(&format!(
                "    {:>width$}  {}\n",
                g.saved_bytes.unwrap_or(0),
                g.describe()
            ));
        }
        out
    }
}
