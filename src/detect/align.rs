//! The alignment of two functions: which instructions and blocks of one line up with which
//! of the other, and what is left over on each side.
//!
//! Function merging by sequence alignment (FMSA, CGO 2019; SalSSA, PLDI 2020; HyFM, LCTES
//! 2021) lines up the linearised instructions of two functions so that one body can hold
//! both: aligned instructions are emitted once, the rest guarded by a function identifier.
//! This module computes that alignment for two [`Linearised`] functions (blocks and
//! instructions in the comparator's walk order, each a fingerprint that ignores serial
//! numbers, see [`super::fingerprint`]) with Needleman–Wunsch global alignment:
//!
//! - Two items may be *paired* when both are block headers or both instructions. A pair
//!   scores [`SAME`] when the fingerprints are equal (the same operation up to holes and
//!   operands), [`NEAR`] when only details differ (memory flags, a condition code, a
//!   constant that is no hole), [`SUBSTITUTION`] when the opcode differs but the types
//!   agree or the types differ but the opcode agrees (a block header with other parameter
//!   types counts so too); an instruction whose opcode and types both differ is never
//!   paired: two gaps are cheaper.
//! - Every item left unpaired is a gap of [`GAP`] (simple, not affine, gaps).
//! - Ties are broken in one fixed order (pair, then left only, then right only), so the
//!   result is a function of the two sequences alone.
//!
//! The table has one cell per pair of items. Up to [`FULL_CELLS`] cells the whole table is
//! filled; beyond that only a band around the diagonal from the first items to the last is
//! (its half-width chosen so that the band holds about [`FULL_CELLS`] cells, and never
//! narrower than the slope needs to stay connected). [`Alignment::method`] says which was
//! done: a banded alignment is still a valid alignment, but not always the best one.
//! Memory is one byte per cell filled plus two rows of scores.

use std::collections::HashMap;

use cranelift_codegen::ir::{Function, Inst, InstructionData, Value};
use cranelift_entity::EntityRef;

use super::fingerprint::{Item, ItemKind, ItemRef, Linearised};
use crate::names::FuncName;

/// Score of a pair with equal fingerprints.
pub const SAME: i32 = 4;
/// Score of a pair with the same opcode and types that differs in details.
pub const NEAR: i32 = 1;
/// Score of a pair that differs in its opcode or in its types, not both.
pub const SUBSTITUTION: i32 = 0;
/// Score of an item left unpaired.
pub const GAP: i32 = -2;
/// Most table cells filled before the alignment is restricted to a band.
pub const FULL_CELLS: usize = 1 << 24;

/// How two paired items relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PairKind {
    /// Equal fingerprints: the same operation up to holes and operands.
    Same,
    /// Same opcode and types; other details differ (flags, codes, constants that are no holes).
    Details,
    /// Other opcodes on the same types.
    Opcode,
    /// The same opcode on other types.
    Types,
    /// Two block headers whose parameters (types or count) or cold flags differ.
    BlockHeader,
}

/// One step of an alignment, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A left item paired with a right item.
    Pair(ItemRef, ItemRef, PairKind),
    /// A left item with no partner.
    LeftOnly(ItemRef),
    /// A right item with no partner.
    RightOnly(ItemRef),
}

/// How the table was filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Every cell: an optimal alignment.
    Full,
    /// A band of this half-width around the diagonal (the functions were too large for
    /// the whole table): a valid alignment, optimal within the band.
    Banded {
        /// Cells on each side of the diagonal, per row.
        half_width: usize,
    },
}

/// The alignment of two linearised functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alignment {
    /// Every item of both sides, once, in order.
    pub steps: Vec<Step>,
    /// Full or banded.
    pub method: Method,
    /// The alignment's score.
    pub score: i64,
}

/// What an alignment holds, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlignmentCounts {
    /// Instruction pairs with equal fingerprints.
    pub same: usize,
    /// Instruction pairs that differ in details only.
    pub details: usize,
    /// Instruction pairs with other opcodes on the same types.
    pub opcode: usize,
    /// Instruction pairs with the same opcode on other types.
    pub types: usize,
    /// Block headers paired with equal fingerprints.
    pub same_blocks: usize,
    /// Block headers paired whose parameters or cold flags differ.
    pub block_headers: usize,
    /// Instructions only on the left.
    pub left_only_insts: usize,
    /// Instructions only on the right.
    pub right_only_insts: usize,
    /// Blocks only on the left.
    pub left_only_blocks: usize,
    /// Blocks only on the right.
    pub right_only_blocks: usize,
}

impl AlignmentCounts {
    /// Instructions on the left.
    pub fn left_insts(&self) -> usize {
        self.same + self.details + self.opcode + self.types + self.left_only_insts
    }

    /// Instructions on the right.
    pub fn right_insts(&self) -> usize {
        self.same + self.details + self.opcode + self.types + self.right_only_insts
    }

    /// The share of both sides' instructions that pair with an equal fingerprint, 0 to 1.
    pub fn matched_fraction(&self) -> f64 {
        let all = self.left_insts() + self.right_insts();
        if all == 0 {
            1.0
        } else {
            2.0 * self.same as f64 / all as f64
        }
    }

    /// Whether every item pairs with one of the same fingerprint.
    pub fn all_same(&self) -> bool {
        self.details
            + self.opcode
            + self.types
            + self.block_headers
            + self.left_only_insts
            + self.right_only_insts
            + self.left_only_blocks
            + self.right_only_blocks
            == 0
    }
}

impl Alignment {
    /// The steps counted by kind; `left` and `right` are the sequences aligned.
    pub fn counts(&self, left: &Linearised, right: &Linearised) -> AlignmentCounts {
        let mut c = AlignmentCounts::default();
        for step in &self.steps {
            match *step {
                Step::Pair(l, _, kind) => {
                    let block = left.items[l].is_block();
                    match (kind, block) {
                        (PairKind::Same, true) => c.same_blocks += 1,
                        (PairKind::Same, false) => c.same += 1,
                        (PairKind::BlockHeader, _) => c.block_headers += 1,
                        (PairKind::Details, _) => c.details += 1,
                        (PairKind::Opcode, _) => c.opcode += 1,
                        (PairKind::Types, _) => c.types += 1,
                    }
                }
                Step::LeftOnly(l) if left.items[l].is_block() => c.left_only_blocks += 1,
                Step::LeftOnly(_) => c.left_only_insts += 1,
                Step::RightOnly(r) if right.items[r].is_block() => c.right_only_blocks += 1,
                Step::RightOnly(_) => c.right_only_insts += 1,
            }
        }
        c
    }
}

/// How `l` and `r` may pair, and the pair's score; `None` when they may not.
pub fn pair_kind(l: &Item, r: &Item) -> Option<(PairKind, i32)> {
    pair_kind_of_keys(Key::of(l), Key::of(r))
}

/// [`pair_kind`] from what the table reads of the two items.
#[inline(always)]
fn pair_kind_of_keys(l: Key, r: Key) -> Option<(PairKind, i32)> {
    match (l.op, r.op) {
        (0, 0) if l.shape == r.shape => Some((PairKind::Same, SAME)),
        (0, 0) => Some((PairKind::BlockHeader, SUBSTITUTION)),
        (0, _) => None,
        (_, _) if l.shape == r.shape => Some((PairKind::Same, SAME)),
        (_, 0) => None,
        (a, b) => match (a == b, l.types == r.types) {
            (true, true) => Some((PairKind::Details, NEAR)),
            (false, true) => Some((PairKind::Opcode, SUBSTITUTION)),
            (true, false) => Some((PairKind::Types, SUBSTITUTION)),
            (false, false) => None,
        },
    }
}

/// A cell's best move, for the traceback.
const FROM_PAIR: u8 = 0;
const FROM_LEFT_ONLY: u8 = 1;
const FROM_RIGHT_ONLY: u8 = 2;
/// Outside the band, or unreachable.
const NEG: i32 = i32::MIN / 4;

/// Align `left` with `right` (see the module docs).
pub fn align(left: &Linearised, right: &Linearised) -> Alignment {
    align_within(left, right, FULL_CELLS)
}

/// [`align`] with another cap on the cells of the whole table (tests use a small one to
/// check the band against the whole table).
pub fn align_within(left: &Linearised, right: &Linearised, max_cells: usize) -> Alignment {
    let (l, r) = (left.items.as_values_slice(), right.items.as_values_slice());
    let mut steps = Vec::with_capacity(l.len().max(r.len()));
    let (method, score) = align_slices(l, r, (0, 0), max_cells, &mut steps);
    Alignment {
        steps,
        method,
        score,
    }
}

/// Most table cells [`align_for_merging`] fills for two functions whose block counts
/// differ (aligned as wholes): beyond, a band around the diagonal. A pair of functions of
/// about 500 items each fills the whole table.
pub const MERGING_CELLS: usize = 1 << 18;

/// The alignment a merged body is built from ([`crate::merge::aligned`]): block by block
/// ([`align_blocks`]) when the two have as many blocks, otherwise the whole functions at
/// once ([`align_within`], at most [`MERGING_CELLS`] cells), where blocks may be on one
/// side only and instructions may pair across blocks that do not (the builder takes those
/// apart).
pub fn align_for_merging(left: &Linearised, right: &Linearised) -> Alignment {
    align_blocks(left, right).unwrap_or_else(|| align_within(left, right, MERGING_CELLS))
}

/// The alignment of two functions whose blocks pair one to one in walk order (the
/// *same blocks* scope of merging by alignment, [`crate::merge::aligned`]): each block
/// header paired with the header at its position on the other side, and the
/// instructions of each pair of blocks aligned as [`align`] aligns whole functions. It is
/// the best alignment among those that pair every block so, found in the sum over the
/// block pairs of their cells rather than in the cells of the whole table (HyFM, LCTES
/// 2021, pairs blocks before aligning their instructions for the same reason). `None`
/// when the block counts differ.
pub fn align_blocks(left: &Linearised, right: &Linearised) -> Option<Alignment> {
    let (l, r) = (left.items.as_values_slice(), right.items.as_values_slice());
    let starts = |items: &[Item]| -> Vec<usize> {
        (0..items.len()).filter(|&i| items[i].is_block()).collect()
    };
    let (ls, rs) = (starts(l), starts(r));
    if ls.len() != rs.len() || ls.first() != Some(&0) || rs.first() != Some(&0) {
        return (l.is_empty() && r.is_empty()).then(|| Alignment {
            steps: Vec::new(),
            method: Method::Full,
            score: 0,
        });
    }
    let mut steps = Vec::with_capacity(l.len().max(r.len()));
    let mut score = 0;
    let mut method = Method::Full;
    for k in 0..ls.len() {
        let (lb, rb) = (ls[k], rs[k]);
        let (le, re) = (
            ls.get(k + 1).copied().unwrap_or(l.len()),
            rs.get(k + 1).copied().unwrap_or(r.len()),
        );
        let (kind, pair_score) = pair_kind(&l[lb], &r[rb]).expect("block headers always pair");
        steps.push(Step::Pair(ItemRef::new(lb), ItemRef::new(rb), kind));
        score += i64::from(pair_score);
        let (within, block_score) = align_slices(
            &l[lb + 1..le],
            &r[rb + 1..re],
            (lb + 1, rb + 1),
            FULL_CELLS,
            &mut steps,
        );
        score += block_score;
        if let Method::Banded { half_width } = within {
            method = match method {
                Method::Banded { half_width: w } => Method::Banded {
                    half_width: w.max(half_width),
                },
                Method::Full => Method::Banded { half_width },
            };
        }
    }
    Some(Alignment {
        steps,
        method,
        score,
    })
}

/// What the table reads of an item: its fingerprints and its opcode (0 for a block header),
/// side by side in one small array per function, so that a cell reads two keys rather than
/// two [`Item`]s and matches on neither.
#[derive(Clone, Copy)]
struct Key {
    shape: u64,
    types: u64,
    /// The opcode plus one; 0 for a block header.
    op: u32,
}

impl Key {
    fn of(item: &Item) -> Key {
        Key {
            shape: item.shape,
            types: item.types,
            op: item.opcode().map_or(0, |op| op as u32 + 1),
        }
    }
}

/// No pair: the score of two items that may not pair ([`pair_kind`] says `None`).
const NO_PAIR: i32 = i32::MIN;

/// [`pair_kind`]'s score, from the keys; [`NO_PAIR`] for items that may not pair.
#[inline(always)]
fn pair_score(l: Key, r: Key) -> i32 {
    pair_kind_of_keys(l, r).map_or(NO_PAIR, |(_, score)| score)
}

/// Align the items `l` with the items `r` (at positions `base` of their functions),
/// appending the steps to `steps`; the method used and the score.
///
/// When the whole table is filled, the items both sides end with pair as they are, and
/// only the rest fills a table: the same steps and score as the whole table's. The last
/// two items, when they are the same ([`SAME`], the highest score), always pair in a best
/// alignment: in any alignment where they do not, pairing them and leaving unpaired what
/// either was paired with scores no less ([`SAME`] is at least any pair's score, and two
/// gaps score less than one pair). A tie goes to the pair ([`best_move`]), so the
/// traceback from the last cell takes the diagonal, into a cell whose score depends on
/// the items before it alone. Common beginnings are not cut so: the traceback's ties are
/// broken from the end, and a beginning can tie with a later item of the same fingerprint.
/// A banded table is not cut either: its band depends on the lengths.
fn align_slices(
    l: &[Item],
    r: &[Item],
    base: (usize, usize),
    max_cells: usize,
    steps: &mut Vec<Step>,
) -> (Method, i64) {
    let (n, m) = (l.len(), r.len());
    if (n + 1).saturating_mul(m + 1) > max_cells {
        return align_table(l, r, base, max_cells, steps);
    }
    let same_end = l
        .iter()
        .rev()
        .zip(r.iter().rev())
        .take_while(|(a, b)| matches!(pair_kind(a, b), Some((PairKind::Same, SAME))))
        .count();
    let (method, score) = align_table(
        &l[..n - same_end],
        &r[..m - same_end],
        base,
        max_cells,
        steps,
    );
    let (l0, r0) = base;
    steps.extend(
        (n - same_end..n)
            .zip(m - same_end..m)
            .map(|(i, j)| Step::Pair(ItemRef::new(l0 + i), ItemRef::new(r0 + j), PairKind::Same)),
    );
    (method, score + i64::from(SAME) * same_end as i64)
}

/// [`align_slices`] by filling the table (whole, or a band of it) for every item.
fn align_table(
    l: &[Item],
    r: &[Item],
    base: (usize, usize),
    max_cells: usize,
    steps: &mut Vec<Step>,
) -> (Method, i64) {
    let (n, m) = (l.len(), r.len());
    let (method, half_width) = if (n + 1).saturating_mul(m + 1) <= max_cells {
        (Method::Full, m + 1)
    } else {
        // Wide enough to follow the slope from (0, 0) to (n, m) with room on each side.
        let slope = m.div_ceil(n.max(1));
        let w = (max_cells / (2 * (n + 1))).max(slope + 2);
        (Method::Banded { half_width: w }, w)
    };
    let band = |i: usize| -> (usize, usize) {
        let centre = (i * m).checked_div(n).unwrap_or(0);
        (
            centre.saturating_sub(half_width),
            (centre + half_width).min(m),
        )
    };
    let right_keys: Vec<Key> = r.iter().map(Key::of).collect();

    // Traceback: one byte per cell of each row's band, rows stored one after the other
    // (room made for every row at its widest, rather than grown row by row).
    let widest = (2 * half_width + 1).min(m + 1);
    let mut moves: Vec<u8> = Vec::with_capacity((n + 1).saturating_mul(widest));
    let mut row_start: Vec<(usize, usize)> = Vec::with_capacity(n + 1); // (offset, lo)
    let mut prev = vec![NEG; m + 2];
    let mut cur = vec![NEG; m + 2];
    for i in 0..=n {
        let (lo, hi) = band(i);
        row_start.push((moves.len(), lo));
        // The cell left of the band holds a row from two rows up: unreachable here (and
        // for the next row, which may read it diagonally). Right of the band nothing was
        // ever written (bands only move right), so it is unreachable already.
        if lo > 0 {
            cur[lo - 1] = NEG;
        }
        let offset = moves.len();
        moves.resize(offset + hi + 1 - lo, FROM_PAIR);
        let row = &mut moves[offset..];
        // The first cell of the row (column `lo`) reads no item of the right side when it
        // is column 0; every later one reads the cells before, above and diagonally.
        let first = match (i, lo) {
            (0, 0) => (0, FROM_PAIR),
            (_, 0) => best_move(NEG, prev[0], NEG, NO_PAIR),
            (0, _) => best_move(NEG, NEG, cur[lo - 1], NO_PAIR),
            (_, _) => best_move(
                prev[lo - 1],
                prev[lo],
                cur[lo - 1],
                pair_score(Key::of(&l[i - 1]), right_keys[lo - 1]),
            ),
        };
        cur[lo] = first.0;
        row[0] = first.1;
        let mut before = first.0;
        let cells = (prev[lo..=hi].windows(2))
            .zip(&right_keys[lo..hi])
            .zip(cur[lo + 1..=hi].iter_mut().zip(&mut row[1..]));
        match i {
            0 => {
                for (_, (cell, from)) in cells {
                    let (score, step) = best_move(NEG, NEG, before, NO_PAIR);
                    (*cell, *from, before) = (score, step, score);
                }
            }
            _ => {
                let left = Key::of(&l[i - 1]);
                for ((above, &right), (cell, from)) in cells {
                    let pair = pair_score(left, right);
                    let (score, step) = best_move(above[0], above[1], before, pair);
                    (*cell, *from, before) = (score, step, score);
                }
            }
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let score = i64::from(prev[m]);

    // Trace back from (n, m), then put the steps in order.
    let first = steps.len();
    let (mut i, mut j) = (n, m);
    let (l0, r0) = base;
    while i > 0 || j > 0 {
        let (offset, lo) = row_start[i];
        let from = if i == 0 {
            FROM_RIGHT_ONLY
        } else if j == 0 {
            FROM_LEFT_ONLY
        } else {
            moves[offset + (j - lo)]
        };
        match from {
            FROM_PAIR => {
                let kind = pair_kind(&l[i - 1], &r[j - 1])
                    .map(|(k, _)| k)
                    .expect("the table pairs only items that may pair");
                steps.push(Step::Pair(
                    ItemRef::new(l0 + i - 1),
                    ItemRef::new(r0 + j - 1),
                    kind,
                ));
                i -= 1;
                j -= 1;
            }
            FROM_LEFT_ONLY => {
                steps.push(Step::LeftOnly(ItemRef::new(l0 + i - 1)));
                i -= 1;
            }
            _ => {
                steps.push(Step::RightOnly(ItemRef::new(r0 + j - 1)));
                j -= 1;
            }
        }
    }
    steps[first..].reverse();
    (method, score)
}

/// The best score of a cell and the move that reaches it, from the cell diagonally before
/// it (`diagonal`, with the score of pairing the two items, [`NO_PAIR`] when they may not),
/// the cell above (`up`: the left item alone) and the cell before it in its row (`before`:
/// the right item alone); [`NEG`] for a cell outside the table or the band. Ties go to the
/// pair, then the left item alone.
#[inline(always)]
fn best_move(diagonal: i32, up: i32, before: i32, pair: i32) -> (i32, u8) {
    let mut best = (NEG, FROM_PAIR);
    if diagonal > NEG && pair != NO_PAIR {
        best = (diagonal + pair, FROM_PAIR);
    }
    if up > NEG && up + GAP > best.0 {
        best = (up + GAP, FROM_LEFT_ONLY);
    }
    if before > NEG && before + GAP > best.0 {
        best = (before + GAP, FROM_RIGHT_ONLY);
    }
    best
}

/// Whether two instructions with equal fingerprints hold different values in their holes
/// (an `iconst` immediate, a load or store offset, a direct callee by name): equal up to
/// holes but not equal.
pub fn holes_differ(left: &Function, li: Inst, right: &Function, ri: Inst) -> bool {
    match (left.dfg.insts[li], right.dfg.insts[ri]) {
        (InstructionData::UnaryImm { imm: a, .. }, InstructionData::UnaryImm { imm: b, .. }) => {
            a.bits() != b.bits()
        }
        (InstructionData::Load { offset: a, .. }, InstructionData::Load { offset: b, .. })
        | (InstructionData::Store { offset: a, .. }, InstructionData::Store { offset: b, .. }) => {
            i64::from(a) != i64::from(b)
        }
        (InstructionData::Call { func_ref: a, .. }, InstructionData::Call { func_ref: b, .. }) => {
            FuncName::of_external(left, &left.dfg.ext_funcs[a].name)
                != FuncName::of_external(right, &right.dfg.ext_funcs[b].name)
        }
        _ => false,
    }
}

/// How many operands of paired instructions read values the alignment does not pair: in a
/// body merged along `alignment`, each is a `select` on the function identifier (SalSSA's
/// operand assignment). A value pairs with a value when the items that define them pair
/// (results in order, block parameters in order); function parameters are the entry
/// block's. Paired instructions with operand lists of different lengths count the
/// difference too.
pub fn operand_mismatches(
    alignment: &Alignment,
    left: (&Linearised, &Function),
    right: (&Linearised, &Function),
) -> usize {
    let ((ll, lf), (rl, rf)) = (left, right);
    let pairs = || {
        alignment.steps.iter().filter_map(|step| match *step {
            Step::Pair(l, r, _) => Some((ll.items[l].kind, rl.items[r].kind)),
            _ => None,
        })
    };
    let mut partner: HashMap<Value, Value> = HashMap::new();
    for (l, r) in pairs() {
        let (lv, rv) = match (l, r) {
            (ItemKind::Block(a), ItemKind::Block(b)) => {
                (lf.dfg.block_params(a), rf.dfg.block_params(b))
            }
            (ItemKind::Inst(a, _), ItemKind::Inst(b, _)) => {
                (lf.dfg.inst_results(a), rf.dfg.inst_results(b))
            }
            _ => continue,
        };
        partner.extend(lv.iter().copied().zip(rv.iter().copied()));
    }
    let mut mismatches = 0;
    for (l, r) in pairs() {
        let (ItemKind::Inst(a, _), ItemKind::Inst(b, _)) = (l, r) else {
            continue;
        };
        let la: Vec<Value> = lf.dfg.inst_values(a).collect();
        let ra: Vec<Value> = rf.dfg.inst_values(b).collect();
        mismatches += la.len().abs_diff(ra.len());
        mismatches += la
            .iter()
            .zip(&ra)
            .filter(|(x, y)| {
                let (x, y) = (lf.dfg.resolve_aliases(**x), rf.dfg.resolve_aliases(**y));
                partner.get(&x) != Some(&y)
            })
            .count();
    }
    mismatches
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::ir::Opcode;
    use proptest::prelude::*;

    use super::*;

    /// Items from small numbers, so that fingerprints repeat and tie: a block header
    /// (`None`) or an instruction of one of two opcodes, one of two type sets and one of
    /// three shapes.
    fn items(codes: &[Option<(bool, bool, u8)>]) -> Vec<Item> {
        (codes.iter().enumerate())
            .map(|(k, code)| match *code {
                None => Item {
                    kind: ItemKind::Block(cranelift_codegen::ir::Block::new(k)),
                    shape: 0xB10C,
                    types: 0,
                },
                Some((iadd, wide, shape)) => {
                    let opcode = if iadd { Opcode::Iadd } else { Opcode::Isub };
                    let types = u64::from(wide);
                    Item {
                        kind: ItemKind::Inst(Inst::new(k), opcode),
                        shape: (u64::from(iadd) << 8) | (types << 4) | u64::from(shape),
                        types,
                    }
                }
            })
            .collect()
    }

    fn code() -> impl Strategy<Value = Option<(bool, bool, u8)>> {
        prop_oneof![
            1 => Just(None),
            8 => (any::<bool>(), any::<bool>(), 0u8..3).prop_map(Some),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Cutting the items both sides end with gives the whole table's steps and score,
        /// ties included (the short alphabet makes many).
        #[test]
        fn cutting_the_same_ending_changes_no_step(
            left in prop::collection::vec(code(), 0..24),
            right in prop::collection::vec(code(), 0..24),
            shared_end in prop::collection::vec(code(), 0..8),
        ) {
            let (mut l, mut r) = (left, right);
            l.extend(&shared_end);
            r.extend(&shared_end);
            let (l, r) = (items(&l), items(&r));
            let (mut cut, mut whole) = (Vec::new(), Vec::new());
            let a = align_slices(&l, &r, (3, 5), FULL_CELLS, &mut cut);
            let b = align_table(&l, &r, (3, 5), FULL_CELLS, &mut whole);
            prop_assert_eq!(a, b);
            prop_assert_eq!(cut, whole);
        }
    }
}
