//! The first place where two functions differ, in words.
//!
//! This is what a user reads when an expected merge did not happen. It runs the same
//! chunked lockstep as the comparator, but keeps for every token what it stands for and
//! which instruction it came from, so the first differing token can be reported as "block
//! 3 of the walk, instruction `v7 = iadd v5, v6` vs `v7 = isub v5, v6`: opcode".

use std::fmt;

use cranelift_codegen::ir::{Block, Function, Inst};

use super::encode::{Annotated, CallTargets, Encoder, What};
use crate::target::TargetInfo;

/// Where and how two functions first differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// Which part: `signature`, `the 3rd block of the CFG walk (block5 on the left, block7 on the right)`, `stack slots`.
    pub place: String,
    /// What differs there: `opcode`, `operand`, `memory flags`, `callee`, ...
    pub what: String,
    /// The left side, printed as CLIF.
    pub left: String,
    /// The right side, printed as CLIF.
    pub right: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "first difference: {} in {}", self.what, self.place)?;
        writeln!(f, "  left:  {}", self.left)?;
        write!(f, "  right: {}", self.right)
    }
}

/// The first difference between `left` and `right`, or `None` when the comparator calls
/// them equal.
pub fn explain<C: CallTargets>(
    target: &TargetInfo,
    calls: &C,
    left: &Function,
    right: &Function,
) -> Option<Difference> {
    let mut l = Encoder::new(left, target, calls);
    let mut r = Encoder::new(right, target, calls);
    let (mut lbuf, mut rbuf) = (Annotated::default(), Annotated::default());
    let mut chunk_index = 0usize;
    loop {
        lbuf.clear();
        rbuf.clear();
        let lchunk = l.next_chunk(&mut lbuf);
        let rchunk = r.next_chunk(&mut rbuf);
        let (lblock, rblock) = match (lchunk, rchunk) {
            (Err(()), Err(())) => return None,
            (Ok(a), Ok(b)) => (a, b),
            _ => {
                return Some(Difference {
                    place: "the end of the function".into(),
                    what: "length".into(),
                    left: String::new(),
                    right: String::new(),
                })
            }
        };
        if lbuf.tokens != rbuf.tokens {
            let i = lbuf
                .tokens
                .iter()
                .zip(&rbuf.tokens)
                .position(|(a, b)| a != b)
                .unwrap_or(lbuf.tokens.len().min(rbuf.tokens.len()));
            let origin = |buf: &Annotated| buf.origins.get(i).copied();
            let (lo, ro) = (origin(&lbuf), origin(&rbuf));
            let what: What = lo.or(ro).map_or("length", |(w, _)| w);
            let place = match (lblock, rblock) {
                (Some(a), Some(b)) => {
                    format!(
                        "the {} block of the CFG walk ({a} on the left, {b} on the right)",
                        ordinal(chunk_index)
                    )
                }
                _ if chunk_index == 0 => "the signature".to_string(),
                _ => "the stack slots no reachable instruction uses".to_string(),
            };
            return Some(Difference {
                place,
                what: what.to_string(),
                left: describe(left, lblock, lo.and_then(|(_, inst)| inst)),
                right: describe(right, rblock, ro.and_then(|(_, inst)| inst)),
            });
        }
        chunk_index += 1;
    }
}

/// The instruction, block header or signature a token came from, as CLIF.
fn describe(func: &Function, block: Option<Block>, inst: Option<Inst>) -> String {
    match (inst, block) {
        (Some(inst), _) => func.dfg.display_inst(inst).to_string(),
        (None, Some(block)) => block_header(func, block),
        (None, None) => {
            let mut s = format!("{}", func.signature);
            if let Some(gv) = func.stack_limit {
                s.push_str(&format!(
                    ", stack_limit = {gv} ({})",
                    func.global_values[gv]
                ));
            }
            let slots: Vec<String> = func
                .sized_stack_slots
                .iter()
                .map(|(slot, d)| format!("{slot} = {d}"))
                .collect();
            if !slots.is_empty() {
                s.push_str(&format!("; stack slots: {}", slots.join(", ")));
            }
            s
        }
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, ..., `11th`, `12th`, `13th`, `21st`, ...
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A block's header as CLIF writes it: `block3(v7: i64) cold`.
pub(crate) fn block_header(func: &Function, block: Block) -> String {
    let params: Vec<String> = func
        .dfg
        .block_params(block)
        .iter()
        .map(|&v| format!("{v}: {}", func.dfg.value_type(v)))
        .collect();
    let cold = if func.layout.is_cold(block) {
        " cold"
    } else {
        ""
    };
    format!("{block}({}){cold}", params.join(", "))
}
