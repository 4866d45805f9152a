//! Two functions' alignment printed side by side as CLIF, with a summary and the reasons
//! merge-similar keeps them apart: what `--explain A B` adds when A and B are neither
//! equal nor equal up to holes.
//!
//! One line per step of the alignment ([`super::align`]), in CFG-walk order. A pair whose
//! two sides print the same is printed once; otherwise the left side, then `|`, then the
//! right side, after a mark:
//!
//! ```text
//!     v2 = iadd v0, v1                  two instructions that print the same
//!   = v3 = iconst.i32 1 | v3 = iconst.i32 2      equal up to holes or value numbers
//!   ~ v4 = load.i32 v0 | v4 = load.i32 aligned v0   the same opcode and types, other details
//!   ! v5 = imul v4, v3 | v5 = isub v4, v3  (opcode)  another opcode, or other types
//!   < v6 = ...                          only in the left function
//!   >                  | v6 = ...       only in the right function
//! ```

use std::fmt::Write;

use cranelift_codegen::ir::Function;

use super::align::{
    align, align_blocks, holes_differ, Alignment, AlignmentCounts, Method, PairKind, Step,
};
use super::explain::block_header;
use super::fingerprint::{linearise, ItemKind, Linearised};
use crate::names::FuncName;
use crate::target::TargetInfo;

/// Most steps printed; the summary still counts them all.
pub const MAX_LINES: usize = 2000;
/// Widest left column.
const MAX_LEFT_WIDTH: usize = 56;

/// Everything [`explain_alignment`] prints about two functions, as values.
pub struct AlignedPair {
    /// The two sequences.
    pub left: Linearised,
    /// The right one.
    pub right: Linearised,
    /// Their alignment.
    pub alignment: Alignment,
    /// Its steps counted.
    pub counts: AlignmentCounts,
}

/// Linearise and align `left` and `right` as merging by alignment does: block by block
/// when their block counts are equal ([`align_blocks`]), as whole sequences otherwise.
pub fn align_functions(target: &TargetInfo, left: &Function, right: &Function) -> AlignedPair {
    let (l, r) = (linearise(left, target), linearise(right, target));
    let alignment = align_blocks(&l, &r).unwrap_or_else(|| align(&l, &r));
    let counts = alignment.counts(&l, &r);
    AlignedPair {
        left: l,
        right: r,
        alignment,
        counts,
    }
}

/// The alignment of `left` (named `left_name`) and `right` side by side, its summary, and
/// why merge-similar does not merge them.
pub fn explain_alignment(
    target: &TargetInfo,
    left_name: &FuncName,
    left: &Function,
    right_name: &FuncName,
    right: &Function,
) -> String {
    let pair = align_functions(target, left, right);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "alignment of {left_name} and {right_name}, in CFG-walk order \
         (`=` equal up to holes, `~` other details, `!` other opcode or types, \
         `<` only in {left_name}, `>` only in {right_name}):"
    );
    if let Method::Banded { half_width } = pair.alignment.method {
        let _ = writeln!(
            out,
            "  (too large for the whole table: aligned within {half_width} items of the diagonal)"
        );
    }
    let lines: Vec<Line> = pair
        .alignment
        .steps
        .iter()
        .map(|step| line(&pair, left, right, step))
        .collect();
    let width = lines
        .iter()
        .filter(|l| l.right.is_some())
        .map(|l| l.left.chars().count())
        .max()
        .unwrap_or(0)
        .min(MAX_LEFT_WIDTH);
    for l in lines.iter().take(MAX_LINES) {
        match &l.right {
            None => {
                let _ = writeln!(out, "  {} {}", l.mark, l.left);
            }
            Some(r) => {
                let _ = write!(out, "  {} {:width$} | {r}", l.mark, l.left);
                match l.label {
                    Some(label) => {
                        let _ = writeln!(out, "  ({label})");
                    }
                    None => out.push('\n'),
                }
            }
        }
    }
    if lines.len() > MAX_LINES {
        let _ = writeln!(out, "  ... {} more steps", lines.len() - MAX_LINES);
    }
    let c = &pair.counts;
    let _ = writeln!(
        out,
        "summary: {:.0}% of instructions matched ({} of {} in {left_name}, {} of {} in {right_name} \
         pair with an equal one); {} opcode difference(s) on the same types, {} type \
         difference(s), {} other detail(s); {} instruction(s) only in {left_name}, {} only in \
         {right_name}; blocks: {} and {}, {} only in {left_name}, {} only in {right_name}, {} \
         with other parameters",
        100.0 * c.matched_fraction(),
        c.same,
        c.left_insts(),
        c.same,
        c.right_insts(),
        c.opcode,
        c.types,
        c.details,
        c.left_only_insts,
        c.right_only_insts,
        pair.left.block_count(),
        pair.right.block_count(),
        c.left_only_blocks,
        c.right_only_blocks,
        c.block_headers,
    );
    let _ = writeln!(
        out,
        "why holes do not merge them: {}",
        why_holes_do_not_merge(left, right, c)
    );
    out
}

/// One printed step.
struct Line {
    mark: char,
    left: String,
    right: Option<String>,
    label: Option<&'static str>,
}

fn line(pair: &AlignedPair, left: &Function, right: &Function, step: &Step) -> Line {
    match *step {
        Step::Pair(l, r, kind) => {
            let (li, ri) = (&pair.left.items[l].kind, &pair.right.items[r].kind);
            let (lt, rt) = (item_text(left, li), item_text(right, ri));
            let (mark, label) = match kind {
                PairKind::Same => ('=', None),
                PairKind::Details => ('~', None),
                PairKind::Opcode => ('!', Some("opcode")),
                PairKind::Types => ('!', Some("types")),
                PairKind::BlockHeader => ('!', Some("block parameters")),
            };
            let printed_once = kind == PairKind::Same
                && lt == rt
                && match (li, ri) {
                    (ItemKind::Inst(a, _), ItemKind::Inst(b, _)) => {
                        !holes_differ(left, *a, right, *b)
                    }
                    _ => true,
                };
            if printed_once {
                Line {
                    mark: ' ',
                    left: lt,
                    right: None,
                    label: None,
                }
            } else {
                Line {
                    mark,
                    left: lt,
                    right: Some(rt),
                    label,
                }
            }
        }
        Step::LeftOnly(l) => Line {
            mark: '<',
            left: item_text(left, &pair.left.items[l].kind),
            right: None,
            label: None,
        },
        Step::RightOnly(r) => Line {
            mark: '>',
            left: String::new(),
            right: Some(item_text(right, &pair.right.items[r].kind)),
            label: None,
        },
    }
}

/// A block header or an instruction as CLIF.
fn item_text(func: &Function, kind: &ItemKind) -> String {
    match *kind {
        ItemKind::Inst(inst, _) => func.dfg.display_inst(inst).to_string(),
        ItemKind::Block(block) => block_header(func, block),
    }
}

/// Why merge-similar, which needs equal encodings up to holes, keeps the two apart.
fn why_holes_do_not_merge(left: &Function, right: &Function, c: &AlignmentCounts) -> String {
    let mut reasons: Vec<String> = Vec::new();
    if left.signature != right.signature {
        reasons.push(format!(
            "the signatures differ (`{}` against `{}`)",
            left.signature, right.signature
        ));
    }
    let mut count = |n: usize, one: &str, many: &str| {
        if n > 0 {
            reasons.push(format!("{n} {}", if n == 1 { one } else { many }));
        }
    };
    count(
        c.opcode,
        "instruction with another opcode",
        "instructions with other opcodes",
    );
    count(
        c.types,
        "instruction on other types",
        "instructions on other types",
    );
    count(
        c.details,
        "instruction with other details (flags, codes, constants that are no holes)",
        "instructions with other details (flags, codes, constants that are no holes)",
    );
    count(
        c.left_only_insts + c.right_only_insts,
        "instruction on one side only",
        "instructions on one side only",
    );
    count(
        c.left_only_blocks + c.right_only_blocks,
        "block on one side only",
        "blocks on one side only",
    );
    count(
        c.block_headers,
        "block with other parameters",
        "blocks with other parameters",
    );
    if reasons.is_empty() {
        return "every block and instruction pairs with one of the same fingerprint, so they \
                differ in which values the instructions read (data flow, block arguments) or \
                in what the encoding reads outside instructions (stack slots); a body with \
                holes is shared only when everything but constants, offsets and callees is equal"
            .to_string();
    }
    format!(
        "a body with holes is shared only when everything but constants, offsets and callees \
         is equal; here: {}",
        reasons.join(", ")
    )
}
