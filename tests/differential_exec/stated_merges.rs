//! What an exec fixture says merging does to it, checked against every build of it: the
//! report of an object build, the plugin's [`Merged`] of a JIT build.
//!
//! An exec fixture is run merged and unmerged and the results compared: a wrong merge shows.
//! A merge that no longer happens does not: the fixture then runs unmerged code in every
//! build and passes, testing nothing it was written for. So each fixture states, in
//! directive lines, which of its functions share one compiled body and which must not, and
//! in which builds:
//!
//! - `; folds: [WHEN...] %a %b ...`: in every build that `WHEN` selects, these
//!   functions run one compiled body (by identical merging, machine-code folding or a
//!   merge-similar shared body, followed as far as they go);
//! - `; apart: [WHEN...] %a %b ...`: in those builds, no two of them run one body.
//!
//! `WHEN` narrows the merging builds (every mode but `disabled`; by default all of them),
//! each word one condition, all of them holding:
//! - `trampolines`, `aliases`: that `--merge-functions` mode;
//! - `identical`: without `--merge-similar`; `similar`: with it; `aligned`: with it and
//!   alignment merging on (every variant but `--no-alignment-merging`); `holes`: with it and
//!   alignment merging off;
//! - `plain`, or the name of another [`Variant`] (`no-cycles`, `branch-protection`, ...):
//!   builds with that variant's options (a fixture's own variants, `; variant:`, or the one
//!   it takes in turn), or with none of them;
//! - `x86_64`, `aarch64`, `windows`: that target;
//! - `object`: an object linked (every output but the JIT); `jit`: cranelift-jit through
//!   the plugin. They differ where a JIT must: its aliases are thunks, each at an address of
//!   its own, so a caller that takes a folded function's address stays apart from one that
//!   takes its group's; and its functions are the compiler's ids, in the order it declared
//!   them, where the command line orders them by name, so merge-similar may pair others.
//!
//! Each fixture must state at least one line, and each line must be checked by at least one
//! of the fixture's builds ([`Statement::applies`] over the configurations it runs in):
//! otherwise a line could go on saying what no build shows.

use std::collections::BTreeMap;

use clif_merge::plugin::Merged;
use clif_merge::report::Report;
use cranelift_module::FuncId;

use super::{Arch, Config, Mode, Output, Variant};

/// Whether the functions of a [`Statement`] share one body or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    Folds,
    Apart,
}

/// One condition on the builds a [`Statement`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Condition {
    Mode(Mode),
    /// Without merge-similar.
    Identical,
    /// With merge-similar.
    Similar,
    /// With merge-similar and alignment merging.
    Aligned,
    /// With merge-similar, without alignment merging.
    Holes,
    Variant(Variant),
    Arch(Arch),
    /// An object, linked.
    Object,
    /// cranelift-jit.
    Jit,
}

impl Condition {
    fn parse(word: &str) -> Option<Condition> {
        Some(match word {
            "trampolines" => Condition::Mode(Mode::Trampolines),
            "aliases" => Condition::Mode(Mode::Aliases),
            "identical" => Condition::Identical,
            "similar" => Condition::Similar,
            "aligned" => Condition::Aligned,
            "holes" => Condition::Holes,
            "x86_64" => Condition::Arch(Arch::X86_64),
            "aarch64" => Condition::Arch(Arch::Aarch64),
            "windows" => Condition::Arch(Arch::X86_64Windows),
            "object" => Condition::Object,
            "jit" => Condition::Jit,
            _ => return Variant::by_name(word).map(Condition::Variant),
        })
    }

    fn holds(self, config: Config) -> bool {
        let alignment = config.variant != Variant::NoAlignmentMerging;
        match self {
            Condition::Mode(mode) => config.mode == mode,
            Condition::Identical => !config.similar,
            Condition::Similar => config.similar,
            Condition::Aligned => config.similar && alignment,
            Condition::Holes => config.similar && !alignment,
            Condition::Variant(variant) => config.variant == variant,
            Condition::Arch(arch) => config.arch == arch,
            Condition::Object => config.output != Output::Jit,
            Condition::Jit => config.output == Output::Jit,
        }
    }
}

/// One `; folds:` or `; apart:` line of a fixture.
#[derive(Clone, Debug)]
pub struct Statement {
    pub claim: Claim,
    conditions: Vec<Condition>,
    /// The functions, as the report spells them (`%name`).
    pub functions: Vec<String>,
    /// The line as written, for messages.
    pub line: String,
}

impl Statement {
    /// Whether build `config` is one this statement is about.
    pub fn applies(&self, config: Config) -> bool {
        config.mode != Mode::Disabled && self.conditions.iter().all(|c| c.holds(config))
    }
}

/// The statements of fixture `text`, or what is wrong with one of them.
pub fn parse(text: &str) -> Result<Vec<Statement>, String> {
    let mut statements = Vec::new();
    for line in text.lines() {
        let (claim, rest) = if let Some(rest) = line.strip_prefix("; folds:") {
            (Claim::Folds, rest)
        } else if let Some(rest) = line.strip_prefix("; apart:") {
            (Claim::Apart, rest)
        } else {
            continue;
        };
        let mut conditions = Vec::new();
        let mut functions = Vec::new();
        for word in rest.split_whitespace() {
            if word.starts_with('%') {
                functions.push(word.to_string());
            } else if !functions.is_empty() {
                return Err(format!("`{line}`: `{word}` after the functions"));
            } else {
                conditions.push(
                    Condition::parse(word)
                        .ok_or_else(|| format!("`{line}`: no condition `{word}`"))?,
                );
            }
        }
        if functions.len() < 2 {
            return Err(format!("`{line}`: fewer than two functions"));
        }
        statements.push(Statement {
            claim,
            conditions,
            functions,
            line: line.to_string(),
        });
    }
    Ok(statements)
}

/// For every function an object build's `report` lists, the function whose compiled body
/// a call of it runs at last: a merge-similar shared body, a group's kept function or its
/// body's symbol, followed from one to the next (a shared body by the group that folded it
/// with another, as machine-code folding may).
pub fn object_bodies(report: &Report) -> BTreeMap<String, String> {
    let mut next: BTreeMap<&str, &str> = report
        .symbols
        .iter()
        .filter_map(|s| {
            let to = s.similar_body.as_deref().or(s.body.as_deref())?;
            Some((s.name.as_str(), to))
        })
        .collect();
    for group in &report.groups {
        for folded in &group.folded {
            next.entry(folded.name.as_str())
                .or_insert(group.keep.as_str());
        }
    }
    report
        .symbols
        .iter()
        .map(|s| {
            let mut at = s.name.as_str();
            // A chain is as long as the merges behind it; more steps than names is a loop.
            for _ in 0..=next.len() {
                match next.get(at) {
                    Some(&to) if to != at => at = to,
                    _ => break,
                }
            }
            (s.name.clone(), at.to_string())
        })
        .collect()
}

/// For every function of a JIT build (`%name`, declared as `ids[name]`), the id whose code
/// a call of it runs at last: its group's body ([`Merged::body_of`]), a merge-similar shared
/// body ([`Merged::shared_body_of`]), followed from one to the next.
pub fn jit_bodies(merged: &Merged, ids: &BTreeMap<String, FuncId>) -> BTreeMap<String, String> {
    ids.iter()
        .map(|(name, &id)| {
            let mut at = merged.body_of(id);
            // Each step leaves a thunk for the body it calls; more steps than ids is a loop.
            for _ in 0..=ids.len() {
                match merged.shared_body_of(at) {
                    Some(body) => at = merged.body_of(body),
                    None => break,
                }
            }
            (format!("%{name}"), format!("{at}"))
        })
        .collect()
}

/// Whether every statement about build `config` holds where its functions' calls go at
/// last (`bodies`, by [`object_bodies`] or [`jit_bodies`]); each that does not, with what
/// the build did instead.
pub fn check(
    statements: &[Statement],
    config: Config,
    bodies: &BTreeMap<String, String>,
) -> Result<(), String> {
    let mut wrong = Vec::new();
    for statement in statements.iter().filter(|s| s.applies(config)) {
        let runs: Vec<String> = statement
            .functions
            .iter()
            .map(|f| match bodies.get(f.as_str()) {
                Some(body) => format!("{f} runs {body}"),
                None => format!("{f} is not in the build"),
            })
            .collect();
        let of = |f: &String| bodies.get(f.as_str()).map(String::as_str);
        let mut distinct: Vec<Option<&str>> = statement.functions.iter().map(of).collect();
        let known = distinct.iter().all(Option::is_some);
        distinct.sort();
        distinct.dedup();
        let holds = known
            && match statement.claim {
                Claim::Folds => distinct.len() == 1,
                Claim::Apart => distinct.len() == statement.functions.len(),
            };
        if !holds {
            wrong.push(format!(
                "`{}` does not hold: {}",
                statement.line,
                runs.join(", ")
            ));
        }
    }
    match wrong.is_empty() {
        true => Ok(()),
        false => Err(wrong.join("; ")),
    }
}
