//! What separates the functions merge-similar leaves apart, and which alignment merging
//! would reach issue #14's targets: a study on the corpora.
//!
//! For each corpus (`--merge-functions aliases`, the mode):
//!
//! 1. **Who is left.** Merge-similar runs as the command line runs it; the functions it
//!    turned into thunks are set aside, and so is every function the identical merger folds
//!    into another (one representative per class of equal functions stays).
//! 2. **Candidates.** `merge::candidates::find_candidates` pairs each function left with
//!    its best partner by MinHash and LSH (default options).
//! 3. **Alignment.** Each pair is aligned (`detect::side_by_side::align_functions`) and
//!    classified by the hardest thing a merger would have to handle, in this order:
//!    blocks that only one side has; instructions that only one side has; instructions
//!    (or block parameters) on other types; other opcodes or details on the same types;
//!    nothing but operands (every instruction pairs with an equal fingerprint, the data
//!    flow differs). Pairs merge-similar would merge but for its cost model or parameter
//!    limit (equal up to holes) are a class of their own and not counted as gains.
//! 4. **Savings.** A pair merged becomes one body and two thunks. Before: both functions'
//!    `.text` bytes (`CodeFacts::text_size`: the IR estimate merge-similar's cost model
//!    uses, x86_64). After: the larger share of the two, the other's instructions that pair
//!    with an equal one counted once (the smaller of the two sides' shares of bytes for the
//!    `same` instructions), plus [`SELECT_BYTES`] for each pair that differs and for each
//!    operand of a pair that reads values the alignment does not pair
//!    (`detect::align::operand_mismatches`; a `select` or a diamond on the function
//!    identifier), [`BRANCH_BYTES`] for each run of instructions
//!    one side only has (a branch around it), and [`THUNK_BYTES`] for each member's thunk.
//!    A rough model, like FMSA's profitability estimate: no register pressure, no
//!    re-scheduling; it says which classes matter, not the bytes to the last one.
//! 5. **Variants.** Each alignment merger handles a prefix of the classes: selects only
//!    (operands, opcodes and details), plus other types, plus instructions one side lacks
//!    (same blocks), plus blocks one side lacks (SalSSA/HyFM's full power). For each, pairs
//!    of the classes it handles are chosen greedily by saving (each function in one pair
//!    at most), and the bytes saved are added to what `--merge-similar` saves today and
//!    set against the corpus's unmerged `.text` (§4).
//!
//! `cargo bench --bench alignment_study` (all three corpora, about a minute); as a test
//! (`cargo test --benches`) zstd only.

mod common;

use std::collections::HashSet;
use std::time::Instant;

use clif_merge::detect::align::{operand_mismatches, AlignmentCounts, Step};
use clif_merge::detect::side_by_side::align_functions;
use clif_merge::detect::similar;
use clif_merge::merge::candidates::{find_candidates, CandidateOptions};
use clif_merge::merge::similar::{merge_similar, CodeFacts, SimilarOptions};
use clif_merge::merge::{merge, FuncIndex, MergeMode, MergeOptions, Module};
use cranelift_codegen::isa::TargetIsa;
use rayon::prelude::*;

/// A `select` or a small diamond on the function identifier, per differing pair.
const SELECT_BYTES: u64 = 8;
/// A test and branch around a run of instructions only one side has.
const BRANCH_BYTES: u64 = 8;
/// A member's thunk: the identifier in a register and a jump, padded to 16 bytes.
const THUNK_BYTES: u64 = 16;

/// Unmerged `.text` bytes and what `--merge-similar --merge-functions aliases` saves today
/// (bench/README.md §4, measured at `51a68db`).
const TODAY: [(&str, u64, u64); 3] = [
    ("re2", 1_189_881, 425_329),
    ("sqlite", 1_682_020, 6_188),
    ("zstd", 500_915, 17_570),
];
/// Issue #14's targets, share of unmerged `.text` saved.
const TARGETS: [(&str, f64); 3] = [("re2", 0.38), ("sqlite", 0.015), ("zstd", 0.06)];

/// What separates a pair, hardest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    UpToHoles,
    Operands,
    Opcodes,
    Types,
    Instructions,
    Blocks,
}

const CLASSES: [(Class, &str); 6] = [
    (Class::Operands, "same instructions, other operands"),
    (Class::Opcodes, "other opcodes or details, same types"),
    (Class::Types, "other types (no extra instructions)"),
    (
        Class::Instructions,
        "instructions one side lacks, same blocks",
    ),
    (Class::Blocks, "blocks one side lacks"),
    (
        Class::UpToHoles,
        "equal up to holes (merge-similar's cost model or limit)",
    ),
];

/// The variants: the classes each handles.
const VARIANTS: [(&str, &[Class]); 4] = [
    ("selects only", &[Class::Operands, Class::Opcodes]),
    (
        "+ other types",
        &[Class::Operands, Class::Opcodes, Class::Types],
    ),
    (
        "+ instructions one side lacks",
        &[
            Class::Operands,
            Class::Opcodes,
            Class::Types,
            Class::Instructions,
        ],
    ),
    (
        "+ blocks one side lacks",
        &[
            Class::Operands,
            Class::Opcodes,
            Class::Types,
            Class::Instructions,
            Class::Blocks,
        ],
    ),
];

/// One candidate pair, aligned and weighed.
struct Studied {
    left: FuncIndex,
    right: FuncIndex,
    class: Class,
    signatures_differ: bool,
    saving: i64,
}

fn main() {
    let target = common::target();
    let isa = common::isa();
    for (name, dir) in common::corpora_to_measure("alignment study") {
        let started = Instant::now();
        let module = common::load_module(&dir);
        let options = MergeOptions {
            mode: MergeMode::Aliases,
            ..Default::default()
        };
        let (_, report) = merge_similar(
            module.clone(),
            &target,
            &*isa,
            &options,
            &SimilarOptions::default(),
        );
        let thunked: HashSet<&str> = report
            .groups
            .iter()
            .flat_map(|g| g.members.iter().map(String::as_str))
            .collect();
        let plan = merge(&module, &target, &options);
        let left: Vec<FuncIndex> = module
            .indices()
            .filter(|&f| plan.group_of(f).is_none_or(|g| g.kept == f))
            .filter(|&f| !thunked.contains(module.get(f).name.to_string().as_str()))
            .collect();
        let t = Instant::now();
        let pairs = find_candidates(&module, &target, &left, &CandidateOptions::default());
        let search_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let studied: Vec<Studied> = pairs
            .par_iter()
            .map(|p| study(&module, &target, &*isa, p.left, p.right))
            .collect();
        let align_s = t.elapsed().as_secs_f64();
        print_corpus(name, module.len(), left.len(), &studied, search_s, align_s);
        eprintln!(
            "alignment study: {name} in {}",
            common::fmt_s(started.elapsed().as_secs_f64())
        );
    }
}

fn study(
    module: &Module,
    target: &clif_merge::TargetInfo,
    isa: &dyn TargetIsa,
    left: FuncIndex,
    right: FuncIndex,
) -> Studied {
    let (fa, fb) = (&module.get(left).func, &module.get(right).func);
    let pair = align_functions(target, fa, fb);
    let c = pair.counts;
    let class = if similar(target, fa, fb).is_ok() {
        Class::UpToHoles
    } else {
        classify(&c, pair.left.block_count() != pair.right.block_count())
    };
    let gap_runs = pair
        .alignment
        .steps
        .windows(2)
        .filter(|w| is_gap(&w[1]) && !is_gap(&w[0]))
        .count()
        + usize::from(pair.alignment.steps.first().is_some_and(is_gap));
    let (sa, sb) = (isa.text_size(fa), isa.text_size(fb));
    let share = |size: u64, insts: usize| {
        if insts == 0 {
            0
        } else {
            size * c.same as u64 / insts as u64
        }
    };
    let shared = share(sa, c.left_insts()).min(share(sb, c.right_insts()));
    let operands = operand_mismatches(&pair.alignment, (&pair.left, fa), (&pair.right, fb));
    let differing = (c.opcode + c.types + c.details + c.block_headers + operands) as u64;
    let saving = shared as i64
        - (SELECT_BYTES * differing + BRANCH_BYTES * gap_runs as u64 + 2 * THUNK_BYTES) as i64;
    Studied {
        left,
        right,
        class,
        signatures_differ: fa.signature != fb.signature,
        saving,
    }
}

fn is_gap(step: &Step) -> bool {
    matches!(step, Step::LeftOnly(_) | Step::RightOnly(_))
}

fn classify(c: &AlignmentCounts, block_counts_differ: bool) -> Class {
    if block_counts_differ || c.left_only_blocks + c.right_only_blocks > 0 {
        Class::Blocks
    } else if c.left_only_insts + c.right_only_insts > 0 {
        Class::Instructions
    } else if c.types + c.block_headers > 0 {
        Class::Types
    } else if c.opcode + c.details > 0 {
        Class::Opcodes
    } else {
        Class::Operands
    }
}

/// Pairs of `classes` chosen greedily by saving, each function in one pair at most.
fn choose<'s>(studied: &'s [Studied], classes: &[Class]) -> Vec<&'s Studied> {
    let mut order: Vec<&Studied> = studied
        .iter()
        .filter(|s| classes.contains(&s.class) && s.saving > 0)
        .collect();
    order.sort_by_key(|s| (-s.saving, s.left, s.right));
    let mut used = HashSet::new();
    order
        .into_iter()
        .filter(|s| {
            let free = !used.contains(&s.left) && !used.contains(&s.right);
            if free {
                used.insert(s.left);
                used.insert(s.right);
            }
            free
        })
        .collect()
}

fn print_corpus(
    name: &str,
    functions: usize,
    left: usize,
    studied: &[Studied],
    search_s: f64,
    align_s: f64,
) {
    let (_, unmerged, today) = TODAY
        .iter()
        .copied()
        .find(|t| t.0 == name)
        .expect("a known corpus");
    let target = TARGETS.iter().find(|t| t.0 == name).map_or(0.0, |t| t.1);
    let pct = |bytes: i64| 100.0 * bytes as f64 / unmerged as f64;
    println!();
    println!(
        "{name}: {functions} functions, {left} left after merge-similar and identical folding; \
         {} candidate pairs (search {}, alignment {})",
        studied.len(),
        common::fmt_s(search_s),
        common::fmt_s(align_s)
    );
    let every: Vec<Class> = CLASSES.iter().map(|c| c.0).collect();
    let chosen = choose(studied, &every[..5]);
    println!("| class | candidate pairs | of which signatures differ | pairs chosen | est. bytes saved | % of .text |");
    println!("|---|---:|---:|---:|---:|---:|");
    for &(class, label) in &CLASSES {
        let all: Vec<&Studied> = studied.iter().filter(|s| s.class == class).collect();
        let sig = all.iter().filter(|s| s.signatures_differ).count();
        let (n, bytes) = if class == Class::UpToHoles {
            let positive: Vec<&&Studied> = all.iter().filter(|s| s.saving > 0).collect();
            (
                positive.len(),
                positive.iter().map(|s| s.saving).sum::<i64>(),
            )
        } else {
            let mine: Vec<&&Studied> = chosen.iter().filter(|s| s.class == class).collect();
            (mine.len(), mine.iter().map(|s| s.saving).sum::<i64>())
        };
        println!(
            "| {label} | {} | {sig} | {n} | {} | {:.2}% |",
            all.len(),
            common::thousands(bytes.max(0) as u64),
            pct(bytes)
        );
    }
    println!();
    println!(
        "| variant | pairs | est. bytes saved | % of .text | with today's {:.2}% | target {:.1}% |",
        pct(today as i64),
        100.0 * target
    );
    println!("|---|---:|---:|---:|---:|---|");
    for (label, classes) in VARIANTS {
        let chosen = choose(studied, classes);
        let bytes: i64 = chosen.iter().map(|s| s.saving).sum();
        let total = pct(bytes + today as i64);
        println!(
            "| {label} | {} | {} | {:.2}% | {total:.2}% | {} |",
            chosen.len(),
            common::thousands(bytes as u64),
            pct(bytes),
            if total >= 100.0 * target {
                "reached"
            } else {
                "not reached"
            }
        );
    }
}
