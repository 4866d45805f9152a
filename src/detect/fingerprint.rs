//! A function as a sequence of fingerprints, one per block and per instruction: what
//! alignment ([`super::align`]) and candidate search ([`crate::merge::candidates`]) read.
//!
//! The comparator's encoding ([`super::encode`]) names every local value, block, stack slot
//! and global value by its serial number in the walk: one instruction inserted early
//! renumbers everything after it, so two encodings cannot be lined up token by token. This
//! module cuts the hole-mode encoding ([`super::holes`]) into one piece per instruction and
//! keeps, of each piece, what does not depend on the rest of the function:
//!
//! - every token except the entity serial numbers (the tokens the encoder tags `operand`,
//!   `result`, `block parameter`, `block argument`, `exception context`, `block`,
//!   `global value`, `stack slot` and `dynamic stack slot`): opcode, controlling type,
//!   immediates (holes as placeholders), memory flags, condition and trap codes, callee
//!   signatures, the content of a slot or global value where the encoder gives it;
//! - the type of every operand and result, read from the function (the encoder writes a
//!   value's type only where the value first appears).
//!
//! Two instructions with the same [`Item::shape`] are the same operation on values of the
//! same types, up to holes (constants, offsets, direct callees) and up to which values they
//! read: the unit FMSA, SalSSA and HyFM align and F3M's MinHash shingles. Blocks are items
//! too (their parameter types and cold flag), so that alignment sees the block structure.
//! The order is the comparator's CFG walk ([`super::walk`]): blocks in walk order, each
//! block followed by its instructions in layout order. A fingerprint is a stable 64-bit hash:
//! the same on every run and machine.

use cranelift_codegen::ir::{Block, Function, Inst, Opcode};
use cranelift_entity::{entity_impl, PrimaryMap};

use super::encode::{ctrl_type_of, Sink, Token, What};
use super::hash::StableHasher;
use super::holes::encode_with_holes_into;
use super::walk::CfgWalk;
use crate::target::TargetInfo;

/// An item's position in its function's sequence.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ItemRef(u32);
entity_impl!(ItemRef, "item");

/// What an item stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// The start of a block (its header: parameters, cold flag).
    Block(Block),
    /// An instruction, with its opcode.
    Inst(Inst, Opcode),
}

/// One block header or instruction of a linearised function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// The block or instruction.
    pub kind: ItemKind,
    /// Everything the hole-mode encoding says of it but which entities it names, and its
    /// operand and result types: equal shapes are the same operation up to holes and
    /// operands.
    pub shape: u64,
    /// Its types alone: a block's parameter types; an instruction's controlling type,
    /// operand types and result types.
    pub types: u64,
}

impl Item {
    /// The opcode of an instruction item.
    pub fn opcode(&self) -> Option<Opcode> {
        match self.kind {
            ItemKind::Inst(_, opcode) => Some(opcode),
            ItemKind::Block(_) => None,
        }
    }

    /// Whether the item is a block header.
    pub fn is_block(&self) -> bool {
        matches!(self.kind, ItemKind::Block(_))
    }
}

/// A function's reachable blocks and instructions as fingerprints, in walk order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Linearised {
    /// The items, each block header followed by the block's instructions.
    pub items: PrimaryMap<ItemRef, Item>,
}

impl Linearised {
    /// How many blocks the walk reached.
    pub fn block_count(&self) -> usize {
        self.items.values().filter(|i| i.is_block()).count()
    }

    /// How many instructions the reachable blocks hold.
    pub fn inst_count(&self) -> usize {
        self.items.len() - self.block_count()
    }
}

/// Linearise `func`: its reachable blocks and instructions in walk order, each with its
/// fingerprint under `target` (the pointer type decides which offsets are holes).
pub fn linearise(func: &Function, target: &TargetInfo) -> Linearised {
    let mut sink = PerInstruction {
        shapes: Vec::with_capacity(func.dfg.num_insts()),
        current: None,
        hasher: StableHasher::new(),
    };
    encode_with_holes_into(func, target, &mut sink);
    sink.finish_instruction();
    let mut shapes = sink.shapes.into_iter();
    let mut items = PrimaryMap::with_capacity(func.dfg.num_insts() + func.dfg.num_blocks());
    for block in CfgWalk::new(func) {
        items.push(block_item(func, block));
        for inst in func.layout.block_insts(block) {
            // The encoder walks the same blocks in the same order, one piece per
            // instruction; a piece out of step would be a bug in one of the two walks.
            let (encoded, shape) = shapes.next().expect("one piece per instruction");
            debug_assert_eq!(encoded, inst);
            let types = instruction_types(func, inst);
            let opcode = func.dfg.insts[inst].opcode();
            items.push(Item {
                kind: ItemKind::Inst(inst, opcode),
                shape: mix(&[shape, types]),
                types,
            });
        }
    }
    Linearised { items }
}

/// The encoder's tags for tokens that are serial numbers of entities (or, right after a
/// first appearance, the value's type, which [`instruction_types`] gives for every operand).
const SERIAL_NUMBERS: [What; 9] = [
    "operand",
    "result",
    "block parameter",
    "block argument",
    "exception context",
    "block",
    "global value",
    "stack slot",
    "dynamic stack slot",
];

/// A [`Sink`] that hashes the tokens of each instruction apart, leaving out serial numbers.
struct PerInstruction {
    /// Each instruction's hash, in encoding order.
    shapes: Vec<(Inst, u64)>,
    /// The instruction whose tokens are arriving.
    current: Option<Inst>,
    hasher: StableHasher,
}

impl PerInstruction {
    fn finish_instruction(&mut self) {
        if let Some(inst) = self.current.take() {
            self.shapes.push((inst, self.hasher.finish()));
        }
    }
}

impl Sink for PerInstruction {
    #[inline]
    fn push(&mut self, token: Token, what: What, inst: Option<Inst>) {
        // Tokens outside instructions (signature, block headers, trailer) are not an
        // instruction's: blocks get their own items from the function.
        let Some(inst) = inst else { return };
        if self.current != Some(inst) {
            self.finish_instruction();
            self.current = Some(inst);
            self.hasher = StableHasher::new();
        }
        if !SERIAL_NUMBERS.contains(&what) {
            self.hasher.word(token);
        }
    }
}

/// A block header's item: parameter types and cold flag.
fn block_item(func: &Function, block: Block) -> Item {
    let mut h = StableHasher::new();
    for &v in func.dfg.block_params(block) {
        h.word(func.dfg.value_type(v).index() as u64);
    }
    let types = h.finish();
    Item {
        kind: ItemKind::Block(block),
        shape: mix(&[0xB10C, types, u64::from(func.layout.is_cold(block))]),
        types,
    }
}

/// The controlling type, operand types and result types of `inst`, hashed.
fn instruction_types(func: &Function, inst: Inst) -> u64 {
    let dfg = &func.dfg;
    let mut h = StableHasher::new();
    let results = dfg.inst_results(inst);
    h.word(ctrl_type_of(func, &dfg.insts[inst], results).index() as u64);
    for &v in dfg.inst_args(inst) {
        h.word(dfg.value_type(v).index() as u64);
    }
    h.word(0x7E5);
    for &v in results {
        h.word(dfg.value_type(v).index() as u64);
    }
    h.finish()
}

fn mix(words: &[u64]) -> u64 {
    let mut h = StableHasher::new();
    for &w in words {
        h.word(w);
    }
    h.finish()
}
