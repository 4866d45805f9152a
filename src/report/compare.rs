//! What changed between two reports: `bloaty new -- old` for the merge.
//!
//! A baseline report (an earlier build's `--report`) and this run's report are compared by
//! function name, never by position, so reports of two builds of a changing program line
//! up. The comparison says:
//!
//! - which functions were **added** and **removed**;
//! - which **groups** appeared, grew, shrank, changed or disappeared. Groups have no names
//!   of their own (the kept function may change), so a group of this run is matched to the
//!   baseline group it shares the most members with (greedily, most shared first, ties by
//!   name); an unmatched group appeared or disappeared. Identical groups and merge-similar
//!   groups are matched separately;
//! - which **folds were lost**: for every baseline group, its members still present are
//!   split by the group they are in now; the largest part is where the group went on (on a
//!   tie, the part holding the baseline's anchor: its kept function, or for a
//!   merge-similar group its first member), and every member of another part no longer
//!   shares a body with it. Each lost fold names the function and one it folded with (the
//!   anchor, or the first member of the part the group went on with) and carries the
//!   first difference between the two, when the caller can tell it (`--explain`'s
//!   answer);
//! - which functions changed **size**, and the change in `.text` bytes.
//!
//! Everything is ordered by name or by bytes then name, so the same two reports always
//! give the same comparison, the same JSON and the same table.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::Report;

/// Identical merging or merge-similar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    /// Equal functions sharing one body.
    Identical,
    /// Similar functions, each a thunk into one shared body (`--merge-similar`).
    Similar,
}

/// A group of either kind, as the comparison and the tables see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupView {
    /// Which merge made it.
    pub kind: GroupKind,
    /// Its name: the kept function, or the merge-similar shared body.
    pub name: String,
    /// The member that stands for the group: the kept function, or for merge-similar the
    /// first member by name.
    pub anchor: String,
    /// Every member, by name (for an identical group: the kept one and the folded ones).
    pub members: BTreeSet<String>,
    /// Bytes the group saves (when an object was written).
    pub saved_bytes: Option<i64>,
}

impl GroupView {
    /// Every group of `report`: identical groups, then merge-similar groups.
    pub fn all(report: &Report) -> Vec<GroupView> {
        let identical = report.groups.iter().map(|g| GroupView {
            kind: GroupKind::Identical,
            name: g.keep.clone(),
            anchor: g.keep.clone(),
            members: g.members().map(str::to_string).collect(),
            saved_bytes: g.saved_bytes,
        });
        let similar = report.similar.iter().flat_map(|s| &s.groups).map(|g| {
            let members: BTreeSet<String> = g.members.iter().cloned().collect();
            GroupView {
                kind: GroupKind::Similar,
                name: g.body.clone(),
                anchor: members.first().cloned().unwrap_or_default(),
                members,
                saved_bytes: g.saved_bytes,
            }
        });
        identical.chain(similar).collect()
    }

    /// One line: `%keep <- %a, %b` (at most three names, then how many more), and
    /// `(similar)` for merge-similar groups.
    pub fn describe(&self) -> String {
        let others: Vec<&str> = self
            .members
            .iter()
            .filter(|m| self.kind == GroupKind::Similar || **m != self.name)
            .map(String::as_str)
            .collect();
        let mut text = format!(
            "{} <- {}",
            self.name,
            others[..others.len().min(3)].join(", ")
        );
        if others.len() > 3 {
            text.push_str(&format!(" and {} more", others.len() - 3));
        }
        if self.kind == GroupKind::Similar {
            text.push_str(" (similar)");
        }
        text
    }
}

/// How a group changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// New in this run.
    Appeared,
    /// More members than in the baseline.
    Grew,
    /// Fewer members than in the baseline.
    Shrank,
    /// As many members, but other ones, or other bytes saved.
    Changed,
    /// Gone in this run.
    Disappeared,
}

impl Change {
    /// The word used in tables: `appeared`, `grew`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Appeared => "appeared",
            Change::Grew => "grew",
            Change::Shrank => "shrank",
            Change::Changed => "changed",
            Change::Disappeared => "disappeared",
        }
    }
}

/// One group that changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupChange {
    /// How.
    pub change: Change,
    /// Which merge.
    pub kind: GroupKind,
    /// Its name in this run (in the baseline when it disappeared).
    pub group: String,
    /// Members in the baseline (0 when it appeared).
    pub members_before: usize,
    /// Members now (0 when it disappeared).
    pub members_after: usize,
    /// Members it gained, by name.
    pub joined: Vec<String>,
    /// Members it lost, by name.
    pub left: Vec<String>,
    /// Bytes it saved in the baseline.
    pub saved_bytes_before: Option<i64>,
    /// Bytes it saves now.
    pub saved_bytes_after: Option<i64>,
}

/// A function that shared a body with another in the baseline and no longer does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LostFold {
    /// Which merge lost it.
    pub kind: GroupKind,
    /// The function.
    pub function: String,
    /// A function it shared a body with that the group went on with (its baseline group's
    /// anchor if it is there).
    pub was_with: String,
    /// The group of this kind it is in now, if any.
    pub now_in: Option<String>,
    /// Why the two no longer fold: `--explain`'s first difference.
    pub first_difference: Option<String>,
}

/// A function present in both runs whose own `.text` bytes changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SizeChange {
    /// The function.
    pub function: String,
    /// Its bytes in the baseline.
    pub before: u64,
    /// Its bytes now.
    pub after: u64,
}

impl SizeChange {
    /// `after - before`.
    pub fn delta(&self) -> i64 {
        self.after as i64 - self.before as i64
    }
}

/// What changed since a baseline report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Comparison {
    /// The baseline report, as named on the command line.
    pub baseline: String,
    /// The baseline's target, when it is not this run's (sizes then compare poorly).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_target: Option<String>,
    /// Functions read now and not in the baseline, by name.
    pub functions_added: Vec<String>,
    /// Functions in the baseline and not read now, by name.
    pub functions_removed: Vec<String>,
    /// Groups that changed: appeared, grew, shrank, changed, disappeared; by kind, then
    /// change, then name.
    pub groups: Vec<GroupChange>,
    /// Folds lost, by kind, then function name.
    pub lost_folds: Vec<LostFold>,
    /// Functions whose own bytes changed, largest change first, then by name.
    pub size_changes: Vec<SizeChange>,
    /// `.text` bytes in the baseline (when it wrote an object).
    pub text_bytes_before: Option<u64>,
    /// `.text` bytes now (when this run wrote an object).
    pub text_bytes_after: Option<u64>,
}

impl Comparison {
    /// The change in `.text` bytes, when both runs wrote an object.
    pub fn text_bytes_change(&self) -> Option<i64> {
        Some(self.text_bytes_after? as i64 - self.text_bytes_before? as i64)
    }

    /// The number of groups with `change`.
    pub fn count(&self, change: Change) -> usize {
        self.groups.iter().filter(|g| g.change == change).count()
    }
}

/// Compare `current` with `baseline` (named `baseline_name` in the output). `explain`
/// gives the first difference between a function that lost its fold and the one it
/// folded with (`None` when it cannot tell).
pub fn compare(
    baseline: &Report,
    baseline_name: &str,
    current: &Report,
    explain: impl Fn(&LostFold) -> Option<String>,
) -> Comparison {
    let names =
        |r: &Report| -> BTreeSet<String> { r.symbols.iter().map(|s| s.name.clone()).collect() };
    let (before_names, after_names) = (names(baseline), names(current));
    let before_groups = GroupView::all(baseline);
    let after_groups = GroupView::all(current);

    let mut groups = Vec::new();
    let mut lost_folds = Vec::new();
    for kind in [GroupKind::Identical, GroupKind::Similar] {
        let before: Vec<&GroupView> = before_groups.iter().filter(|g| g.kind == kind).collect();
        let after: Vec<&GroupView> = after_groups.iter().filter(|g| g.kind == kind).collect();
        groups.extend(group_changes(&before, &after));
        lost_folds.extend(lost(&before, &after, &after_names));
    }
    groups.sort_by(|a, b| (a.kind, a.change, &a.group).cmp(&(b.kind, b.change, &b.group)));
    for fold in &mut lost_folds {
        fold.first_difference = explain(fold);
    }

    let bytes_before: HashMap<&str, u64> = baseline
        .symbols
        .iter()
        .filter_map(|s| Some((s.name.as_str(), s.bytes?)))
        .collect();
    let mut size_changes: Vec<SizeChange> = current
        .symbols
        .iter()
        .filter_map(|s| {
            let before = *bytes_before.get(s.name.as_str())?;
            let after = s.bytes?;
            (before != after).then(|| SizeChange {
                function: s.name.clone(),
                before,
                after,
            })
        })
        .collect();
    size_changes.sort_by(|a, b| {
        b.delta()
            .unsigned_abs()
            .cmp(&a.delta().unsigned_abs())
            .then_with(|| b.delta().cmp(&a.delta()))
            .then_with(|| a.function.cmp(&b.function))
    });

    Comparison {
        baseline: baseline_name.to_string(),
        baseline_target: (baseline.target != current.target).then(|| baseline.target.clone()),
        functions_added: after_names.difference(&before_names).cloned().collect(),
        functions_removed: before_names.difference(&after_names).cloned().collect(),
        groups,
        lost_folds,
        size_changes,
        text_bytes_before: baseline.text_bytes,
        text_bytes_after: current.text_bytes,
    }
}

/// Pairs of (baseline, current) groups, matched by the members they share: most shared
/// first, ties by the baseline's then the current group's name; each group in at most
/// one pair. Unmatched groups come back paired with `None`.
fn match_groups(
    before: &[&GroupView],
    after: &[&GroupView],
) -> Vec<(Option<usize>, Option<usize>)> {
    let mut group_after: HashMap<&str, usize> = HashMap::new();
    for (j, g) in after.iter().enumerate() {
        for m in &g.members {
            group_after.insert(m, j);
        }
    }
    let mut overlaps: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (i, g) in before.iter().enumerate() {
        for m in &g.members {
            if let Some(&j) = group_after.get(m.as_str()) {
                *overlaps.entry((i, j)).or_default() += 1;
            }
        }
    }
    let mut candidates: Vec<((usize, usize), usize)> = overlaps.into_iter().collect();
    candidates.sort_by(|((i1, j1), n1), ((i2, j2), n2)| {
        n2.cmp(n1)
            .then_with(|| before[*i1].name.cmp(&before[*i2].name))
            .then_with(|| after[*j1].name.cmp(&after[*j2].name))
    });
    let (mut used_before, mut used_after) = (vec![false; before.len()], vec![false; after.len()]);
    let mut pairs = Vec::new();
    for ((i, j), _) in candidates {
        if !used_before[i] && !used_after[j] {
            used_before[i] = true;
            used_after[j] = true;
            pairs.push((Some(i), Some(j)));
        }
    }
    pairs.extend(
        (0..before.len())
            .filter(|&i| !used_before[i])
            .map(|i| (Some(i), None)),
    );
    pairs.extend(
        (0..after.len())
            .filter(|&j| !used_after[j])
            .map(|j| (None, Some(j))),
    );
    pairs
}

/// The groups that changed between `before` and `after` (one kind).
fn group_changes(before: &[&GroupView], after: &[&GroupView]) -> Vec<GroupChange> {
    let empty = BTreeSet::new();
    match_groups(before, after)
        .into_iter()
        .filter_map(|(i, j)| {
            let (b, a) = (i.map(|i| before[i]), j.map(|j| after[j]));
            let members_b = b.map_or(&empty, |g| &g.members);
            let members_a = a.map_or(&empty, |g| &g.members);
            let saved_b = b.and_then(|g| g.saved_bytes);
            let saved_a = a.and_then(|g| g.saved_bytes);
            let change = match (b, a) {
                (None, _) => Change::Appeared,
                (_, None) => Change::Disappeared,
                _ if members_a.len() > members_b.len() => Change::Grew,
                _ if members_a.len() < members_b.len() => Change::Shrank,
                _ if members_a != members_b || saved_a != saved_b => Change::Changed,
                _ => return None,
            };
            let group = a.or(b).expect("one side is a group");
            Some(GroupChange {
                change,
                kind: group.kind,
                group: group.name.clone(),
                members_before: members_b.len(),
                members_after: members_a.len(),
                joined: members_a.difference(members_b).cloned().collect(),
                left: members_b.difference(members_a).cloned().collect(),
                saved_bytes_before: saved_b,
                saved_bytes_after: saved_a,
            })
        })
        .collect()
}

/// The folds of `before` groups that `after` no longer makes (one kind), among functions
/// still present (`present`). Without a first difference yet.
fn lost(before: &[&GroupView], after: &[&GroupView], present: &BTreeSet<String>) -> Vec<LostFold> {
    let mut group_after: HashMap<&str, &GroupView> = HashMap::new();
    for g in after {
        for m in &g.members {
            group_after.insert(m, g);
        }
    }
    let mut out = Vec::new();
    for g in before {
        // The members still read, split by the group they are in now (alone: by name).
        let mut parts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for m in g.members.iter().filter(|m| present.contains(*m)) {
            let key = group_after
                .get(m.as_str())
                .map_or(m.as_str(), |a| a.name.as_str());
            parts.entry(key).or_default().push(m);
        }
        if parts.len() < 2 {
            continue;
        }
        // The group went on with its largest part (on a tie: the anchor's, then the
        // first by name); the functions of every other part lost their fold.
        let has_anchor = |ms: &Vec<&str>| ms.contains(&g.anchor.as_str());
        let main = parts
            .iter()
            .max_by(|a, b| {
                (a.1.len(), has_anchor(a.1))
                    .cmp(&(b.1.len(), has_anchor(b.1)))
                    .then(b.1[0].cmp(a.1[0]))
            })
            .map(|(k, _)| *k)
            .expect("at least two parts");
        let partner = if has_anchor(&parts[main]) {
            g.anchor.as_str()
        } else {
            parts[main][0]
        };
        for (_, members) in parts.iter().filter(|(k, _)| **k != main) {
            for &m in members {
                out.push(LostFold {
                    kind: g.kind,
                    function: m.to_string(),
                    was_with: partner.to_string(),
                    now_in: group_after.get(m).map(|a| a.name.clone()),
                    first_difference: None,
                });
            }
        }
    }
    out.sort_by(|a, b| (a.kind, &a.function).cmp(&(b.kind, &b.function)));
    out
}

impl Comparison {
    /// The comparison as a table: a summary, then the groups that changed, the folds lost
    /// (with their first difference), the functions added and removed, and the `top`
    /// functions whose size changed most.
    pub fn table(&self, top: usize) -> String {
        let mut out = format!("clif-merge: compared with {}\n", self.baseline);
        if let Some(t) = &self.baseline_target {
            out.push_str(&format!("  (the baseline was built for {t})\n"));
        }
        let text = match (self.text_bytes_before, self.text_bytes_after) {
            (Some(b), Some(a)) => format!("{b} -> {a} ({})", signed_with_percent(b, a)),
            (b, a) => format!(
                "{} -> {} (needs -o in both runs)",
                b.map_or("?".into(), |b| b.to_string()),
                a.map_or("?".into(), |a| a.to_string())
            ),
        };
        let rows = [
            (".text bytes", text),
            (
                "functions",
                format!(
                    "{} added, {} removed",
                    self.functions_added.len(),
                    self.functions_removed.len()
                ),
            ),
            (
                "groups",
                format!(
                    "{} appeared, {} grew, {} shrank, {} changed, {} disappeared",
                    self.count(Change::Appeared),
                    self.count(Change::Grew),
                    self.count(Change::Shrank),
                    self.count(Change::Changed),
                    self.count(Change::Disappeared)
                ),
            ),
            ("folds lost", self.lost_folds.len().to_string()),
        ];
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        for (k, v) in rows {
            out.push_str(&format!("  {k:<width$}  {v}\n"));
        }

        if !self.groups.is_empty() {
            let lines: Vec<[String; 4]> = self
                .groups
                .iter()
                .map(|g| {
                    let kind = if g.kind == GroupKind::Similar {
                        " (similar)"
                    } else {
                        ""
                    };
                    [
                        g.change.as_str().to_string(),
                        format!("{}{kind}", g.group),
                        format!("{} -> {}", g.members_before, g.members_after),
                        format!(
                            "{} -> {}",
                            optional(g.saved_bytes_before),
                            optional(g.saved_bytes_after)
                        ),
                    ]
                })
                .collect();
            out.push_str("groups\n");
            out.push_str(&columns(
                ["change", "group", "members", "saved bytes"],
                &lines,
            ));
            for g in &self.groups {
                if matches!(g.change, Change::Appeared | Change::Disappeared) {
                    continue;
                }
                for (word, names) in [("joined by", &g.joined), ("left by", &g.left)] {
                    if !names.is_empty() {
                        out.push_str(&format!("  {}: {word} {}\n", g.group, names.join(", ")));
                    }
                }
            }
        }
        if !self.lost_folds.is_empty() {
            out.push_str("folds lost\n");
            for fold in &self.lost_folds {
                let verb = match fold.kind {
                    GroupKind::Identical => "folds with",
                    GroupKind::Similar => "shares a merge-similar body with",
                };
                out.push_str(&format!(
                    "  {} no longer {verb} {}\n",
                    fold.function, fold.was_with
                ));
                if let Some(d) = &fold.first_difference {
                    for line in d.lines() {
                        out.push_str(&format!("    {line}\n"));
                    }
                }
            }
        }
        for (title, names) in [
            ("functions added", &self.functions_added),
            ("functions removed", &self.functions_removed),
        ] {
            if !names.is_empty() {
                out.push_str(&format!("{title}\n"));
                for n in names {
                    out.push_str(&format!("  {n}\n"));
                }
            }
        }
        if !self.size_changes.is_empty() && top > 0 {
            let shown = &self.size_changes[..self.size_changes.len().min(top)];
            if shown.len() < self.size_changes.len() {
                out.push_str(&format!(
                    "top {} of {} functions by change in size\n",
                    shown.len(),
                    self.size_changes.len()
                ));
            } else {
                out.push_str("functions that changed size\n");
            }
            let lines: Vec<[String; 4]> = shown
                .iter()
                .map(|c| {
                    [
                        c.before.to_string(),
                        c.after.to_string(),
                        format!("{:+}", c.delta()),
                        c.function.clone(),
                    ]
                })
                .collect();
            out.push_str(&columns(["before", "after", "change", "function"], &lines));
        }
        out
    }
}

/// `+72 bytes, +31.4%` (the percentage against `before`; none when `before` is 0).
pub fn signed_with_percent(before: u64, after: u64) -> String {
    let delta = after as i64 - before as i64;
    if before == 0 {
        return format!("{delta:+} bytes");
    }
    format!(
        "{delta:+} bytes, {:+.1}%",
        delta as f64 * 100.0 / before as f64
    )
}

fn optional(v: Option<i64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// Rows under a header, each column as wide as its widest cell; numbers on the right.
fn columns<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths: [usize; N] = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let numeric = |c: usize| {
        rows.iter()
            .all(|r| r[c].starts_with(|ch: char| ch.is_ascii_digit() || ch == '-' || ch == '+'))
    };
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (c, cell) in cells.enumerate() {
            let w = widths[c];
            if numeric(c) {
                text.push_str(&format!("  {cell:>w$}"));
            } else if c + 1 == N {
                text.push_str(&format!("  {cell}"));
            } else {
                text.push_str(&format!("  {cell:<w$}"));
            }
        }
        text.push('\n');
        text
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}
