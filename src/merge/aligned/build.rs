//! The body of two aligned functions: one function that runs the left member when its
//! identifier parameter is non-zero and the right member otherwise.
//!
//! Scope (see [`super`]): the same calling convention and returns, the parameters of one
//! member a prefix of the other's (the rest plain integers: the shorter member's thunk
//! passes zeros, which it never reads); every block pairs with one of the other side (the
//! alignment's block items, entry with entry) whose parameters have the same types; and
//! paired blocks end in terminators that merge. With *unlike blocks* the blocks need not
//! pair (below). Within a pair of blocks the alignment's steps are walked in order:
//!
//! - a pair of instructions equal up to their value operands (entities compared after
//!   importing both into the body: callees by name, memory flags by content, ...) becomes
//!   one instruction; an operand whose two values differ reads `select(id, left, right)`
//!   (one per block for the same two values), and the two operands of a commutative
//!   integer instruction (`x + y` against `y + x`) are read in whichever order needs
//!   fewer selects. Block arguments are operands, so the paired blocks' parameters are
//!   the phis of both members;
//! - a pair of direct calls (`call`, `return_call`, `try_call`) equal but for the function
//!   called, of one signature, becomes the indirect call of `select(id, func_addr left,
//!   func_addr right)`;
//! - an instruction one side has, or a pair that differs otherwise, is *speculated*
//!   (emitted unconditionally, its results that side's values) when it is pure and cannot
//!   trap, load, store or call, and reads nothing still pending; otherwise it joins the
//!   pending *diamond*: `brif id, left_arm, right_arm`, each arm runs its side's
//!   instructions in order and jumps to a join block whose parameters carry the values
//!   defined there that are read later (the other arm passes a zero of that type; a
//!   differing pair's results share a parameter; an empty arm is the branch straight to
//!   the join). The diamond is closed before the next merged instruction, so every
//!   side effect keeps its order on its side.
//!
//! Paired blocks keep the members' control flow (diamonds are inside blocks), so every
//! value's definition still dominates its uses.
//!
//! With unlike blocks, a block header the alignment leaves unpaired becomes a body block
//! of its side alone, copied as it is (only that member reaches it, so nothing is
//! guarded); paired headers whose parameter types differ become one block that takes the
//! left's parameters and then the right's, each side's branches passing zeros (made at the
//! top of the entry) for the other's; an instruction pair whose blocks are not one body
//! block is taken apart; and paired terminators going to other blocks each run behind a
//! branch on the identifier. The body's control flow is then the union of the members',
//! where a use may no longer be dominated by its definition: `super::dominance` carries
//! such values through block parameters. `get_exception_handler_address` names the
//! block that ends in its `try_call`, which is the last block its paired block became.
//! Anything outside the scope — jump tables, dynamic stack slots, user stack maps,
//! terminators that differ, a zero that cannot be written (vectors, `i128`), an entity
//! that does not import — makes [`build_body`] return `None`: the pair is not merged.

use std::sync::OnceLock;

use rustc_hash::{FxHashMap, FxHashSet};

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::instructions::InstructionMapper;
use cranelift_codegen::ir::{
    self, types, AbiParam, Block, BlockArg, BlockCall, Function, GlobalValue, GlobalValueData,
    Inst, InstBuilder, InstructionData, Opcode, Type, Value,
};
use cranelift_entity::packed_option::PackedOption;
use cranelift_entity::SecondaryMap;
use smallvec::SmallVec;

use super::dominance;
use crate::detect::align::{Alignment, Step};
use crate::detect::fingerprint::{ItemKind, ItemRef, Linearised};

/// The type of the identifier parameter the body takes last: 1 runs the left member, 0
/// the right.
pub const ID_TYPE: Type = types::I32;

/// Which member.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Left,
    Right,
}

/// What one member's entities became in the body.
#[derive(Default)]
struct Imported {
    values: SecondaryMap<Value, PackedOption<Value>>,
    blocks: SecondaryMap<Block, PackedOption<Block>>,
    global_values: SecondaryMap<GlobalValue, PackedOption<GlobalValue>>,
    signatures: SecondaryMap<ir::SigRef, PackedOption<ir::SigRef>>,
    func_refs: SecondaryMap<ir::FuncRef, PackedOption<ir::FuncRef>>,
    stack_slots: SecondaryMap<ir::StackSlot, PackedOption<ir::StackSlot>>,
    /// The body's memory flags for each of the member's, by the member's flags' number
    /// (importing them clones their alias region, name and all).
    mem_flags: Vec<Option<ir::MemFlags>>,
}

impl Imported {
    /// Empty maps with room for every entity of `member`: a body imports most of its
    /// members' values and blocks, and maps grown one entity at a time copy themselves
    /// over and over.
    fn with_room_for(member: &Function) -> Self {
        Self {
            values: SecondaryMap::with_capacity(member.dfg.num_values()),
            blocks: SecondaryMap::with_capacity(member.dfg.num_blocks()),
            global_values: SecondaryMap::with_capacity(member.global_values.len()),
            signatures: SecondaryMap::with_capacity(member.dfg.signatures.len()),
            func_refs: SecondaryMap::with_capacity(member.dfg.ext_funcs.len()),
            stack_slots: SecondaryMap::with_capacity(member.sized_stack_slots.len()),
            mem_flags: Vec::new(),
        }
    }
}

/// The body under construction and both members' imports.
struct Builder<'a> {
    body: Box<Function>,
    id: Value,
    left: &'a Function,
    right: &'a Function,
    lin: [&'a Linearised; 2],
    /// How often each member's values are read, found when a diamond first needs them.
    uses: [&'a OnceLock<UseCounts>; 2],
    /// The target's pointer type (of function addresses).
    pointer: Type,
    imported: [Imported; 2],
    /// Set when something could not be imported: the pair is not merged.
    failed: bool,
    /// Every `get_exception_handler_address` copied, with its side: it names the block
    /// its side's `try_call` ends in, known once the block is filled.
    handlers: Vec<(Inst, Side)>,
    /// `select(id, a, b)` made in a block, reused by later operands of that block.
    selects: FxHashMap<(Block, Value, Value), Value>,
    /// Whether blocks may be unlike (a block of one side alone, terminators to other
    /// blocks); otherwise the body keeps each member's control flow.
    unlike_blocks: bool,
    /// Set when the body's control flow is the union of the members' rather than each
    /// one's (a block of one side alone, terminators to other blocks): some uses may need
    /// [`dominance::repair`].
    flows_apart: bool,
    /// Blocks that take both sides' parameters, with the types of each side's: a branch
    /// of one side passes zeros for the other's.
    padding: FxHashMap<Block, Padding>,
    /// Zeros at the top of the entry block, by type: they dominate every block.
    zeros: FxHashMap<Type, Value>,
}

/// The parameter types of each side of a block that takes both sides' parameters.
#[derive(Default)]
struct Padding {
    left: SmallVec<[Type; 4]>,
    right: SmallVec<[Type; 4]>,
}

/// Instructions waiting to be guarded by the identifier.
#[derive(Default)]
struct Diamond {
    left: Vec<Inst>,
    right: Vec<Inst>,
    /// Pairs that differ: their results share join parameters.
    pairs: Vec<(Inst, Inst)>,
}

impl Diamond {
    fn is_empty(&self) -> bool {
        self.left.is_empty() && self.right.is_empty()
    }
}

/// The merged body of `left` and `right` along `alignment` (of their linearisations
/// `lin`), with the members' signature and an [`ID_TYPE`] parameter appended, and whether
/// its blocks are unlike (only with `unlike_blocks`: a block of one member alone, a block
/// taking both members' parameters, or branches to other blocks); `None` when the pair is
/// outside the scope (module docs). `uses` holds (or is given) each member's
/// [`use_counts`]: a function in several pairs counts its uses once.
pub fn build_body<'a>(
    left: &'a Function,
    right: &'a Function,
    lin: (&'a Linearised, &'a Linearised),
    uses: (&'a OnceLock<UseCounts>, &'a OnceLock<UseCounts>),
    alignment: &Alignment,
    pointer: Type,
    unlike_blocks: bool,
) -> Option<(Box<Function>, bool)> {
    let signature = body_signature(&left.signature, &right.signature)?;
    if !in_scope(left) || !in_scope(right) {
        return None;
    }
    let BodyBlocks { blocks, steps } = body_blocks(left, right, lin, alignment)?;
    // Without unlike blocks every block pairs, with equal parameter types.
    if !unlike_blocks && blocks.iter().any(|b| b.alone().is_some() || b.both_params) {
        return None;
    }
    let mut b = Builder {
        body: empty_body(left, right, signature),
        id: Value::from_u32(0),
        left,
        right,
        lin: [lin.0, lin.1],
        uses: [uses.0, uses.1],
        pointer,
        imported: [
            Imported::with_room_for(left),
            Imported::with_room_for(right),
        ],
        failed: false,
        handlers: Vec::new(),
        selects: FxHashMap::default(),
        unlike_blocks,
        flows_apart: false,
        padding: FxHashMap::default(),
        zeros: FxHashMap::default(),
    };
    b.import_stack_slots();

    // Blocks, with their parameters paired; the entry gets the identifier last.
    let mut body_blocks = Vec::with_capacity(blocks.len());
    for (i, body_block) in blocks.iter().enumerate() {
        let block = b.body.dfg.make_block();
        body_blocks.push(block);
        let cold = |f: &Function, side: Option<Block>| side.is_none_or(|s| f.layout.is_cold(s));
        if cold(left, body_block.left) && cold(right, body_block.right) {
            b.body.layout.set_cold(block);
        }
        let params = |f: &'a Function, side: Option<Block>| -> &'a [Value] {
            side.map_or(&[], |s| f.dfg.block_params(s))
        };
        let (lp, rp) = (
            params(left, body_block.left),
            params(right, body_block.right),
        );
        if body_block.both_params {
            // Each side's parameters apart: the left's, then the right's.
            let mut padding = Padding::default();
            for &l in lp {
                let ty = left.dfg.value_type(l);
                b.imported[0].values[l] = b.body.dfg.append_block_param(block, ty).into();
                padding.left.push(ty);
            }
            for &r in rp {
                let ty = right.dfg.value_type(r);
                b.imported[1].values[r] = b.body.dfg.append_block_param(block, ty).into();
                padding.right.push(ty);
            }
            b.padding.insert(block, padding);
        }
        // Paired parameters; the entry's may be longer on one side (`body_signature`).
        for i in (0..lp.len().max(rp.len())).filter(|_| !body_block.both_params) {
            let (l, r) = (lp.get(i), rp.get(i));
            let ty = match (l, r) {
                (Some(&l), _) => left.dfg.value_type(l),
                (None, Some(&r)) => right.dfg.value_type(r),
                (None, None) => unreachable!("within the longer list"),
            };
            let p = b.body.dfg.append_block_param(block, ty);
            if let Some(&l) = l {
                b.imported[0].values[l] = p.into();
            }
            if let Some(&r) = r {
                b.imported[1].values[r] = p.into();
            }
        }
        if i == 0 {
            b.id = b.body.dfg.append_block_param(block, ID_TYPE);
        }
        if let Some(lb) = body_block.left {
            b.imported[0].blocks[lb] = block.into();
        }
        if let Some(rb) = body_block.right {
            b.imported[1].blocks[rb] = block.into();
        }
        // A block of one side alone: the control flow is no longer each member's.
        b.flows_apart |= body_block.alone().is_some();
    }
    let limits = (
        left.stack_limit.map(|gv| b.global_value(Side::Left, gv)),
        right.stack_limit.map(|gv| b.global_value(Side::Right, gv)),
    );
    if limits.0 != limits.1 {
        return None;
    }
    b.body.stack_limit = limits.0;

    // Where each body block's terminators ended up (diamonds split blocks): what
    // `get_exception_handler_address` names.
    let mut ends: FxHashMap<Block, [Block; 2]> = FxHashMap::default();
    for (body_block, &block) in blocks.iter().zip(&body_blocks) {
        b.body.layout.append_block(block);
        let end = match body_block.alone() {
            None => b.fill_block(block, &steps[body_block.steps.clone()])?,
            Some((side, _)) => {
                b.fill_alone(block, side, &steps[body_block.steps.clone()])?;
                [block, block]
            }
        };
        if b.failed {
            return None;
        }
        ends.insert(block, end);
    }
    for (inst, side) in std::mem::take(&mut b.handlers) {
        if let InstructionData::ExceptionHandlerAddress { block, .. } = &mut b.body.dfg.insts[inst]
        {
            *block = ends.get(block)?[side as usize];
        }
    }
    // Blocks taking both members' parameters leave each member's control flow as it was
    // (zeros are passed on that member's own edges): only a block of one side alone or
    // terminators going to other blocks can leave a use undominated.
    if b.flows_apart {
        dominance::repair(&mut b.body)?;
    }
    let unlike = b.flows_apart || blocks.iter().any(|b| b.both_params);
    Some((b.body, unlike))
}

/// An empty function with `signature`, its tables' room that of the larger member (the
/// body holds at least that much): an empty copy of that member, cleared as Cranelift
/// clears a function for reuse, with the exception tables `Function::clear` leaves.
fn empty_body(left: &Function, right: &Function, signature: ir::Signature) -> Box<Function> {
    let larger = match left.dfg.num_insts() >= right.dfg.num_insts() {
        true => left,
        false => right,
    };
    let mut body = Box::new(larger.clone());
    body.clear();
    body.dfg.exception_tables = Default::default();
    body.signature = signature;
    body
}

/// The body's signature: the members' (the same calling convention and returns; the
/// parameters of one may be a prefix of the other's, the rest plain integers that the
/// shorter member's thunk passes as zeros) and the identifier last. `None` otherwise.
pub fn body_signature(left: &ir::Signature, right: &ir::Signature) -> Option<ir::Signature> {
    let (long, short) = if left.params.len() >= right.params.len() {
        (left, right)
    } else {
        (right, left)
    };
    let rest = &long.params[short.params.len()..];
    let plain = |p: &AbiParam| {
        p.purpose == ir::ArgumentPurpose::Normal
            && p.extension == ir::ArgumentExtension::None
            && matches!(
                p.value_type,
                types::I8 | types::I16 | types::I32 | types::I64
            )
    };
    if left.call_conv != right.call_conv
        || left.returns != right.returns
        || !long.params.starts_with(&short.params)
        || !rest.iter().all(plain)
    {
        return None;
    }
    let mut signature = long.clone();
    signature.params.push(AbiParam::new(ID_TYPE));
    Some(signature)
}

/// Whether `func` uses nothing this builder declines: jump tables, dynamic stack slots.
/// (User stack maps are carried: each call keeps its member's entries, and a call of both
/// is one only where their entries are the same slots of the body,
/// [`Builder::same_stack_maps`].)
fn in_scope(func: &Function) -> bool {
    func.dfg.dynamic_types.is_empty()
        && func.dynamic_stack_slots.is_empty()
        && func.layout.blocks().all(|block| {
            func.layout
                .block_insts(block)
                .all(|inst| func.dfg.insts[inst].opcode() != Opcode::BrTable)
        })
}

/// A block of the body: a pair of the members' blocks, or one member's block alone, with
/// the alignment's steps of its instructions in order.
struct BodyBlock {
    left: Option<Block>,
    right: Option<Block>,
    /// A pair whose parameter types differ: the body block takes the left's parameters,
    /// then the right's, and each side's branches pass zeros for the other's.
    both_params: bool,
    /// Its steps: a range of [`BodyBlocks::steps`].
    steps: std::ops::Range<usize>,
}

/// The body's blocks, and the alignment's steps of their instructions, block after block.
struct BodyBlocks {
    blocks: Vec<BodyBlock>,
    steps: Vec<Step>,
}

impl BodyBlock {
    /// The side whose block alone this is; `None` for a pair.
    fn alone(&self) -> Option<(Side, Block)> {
        match (self.left, self.right) {
            (Some(l), None) => Some((Side::Left, l)),
            (None, Some(r)) => Some((Side::Right, r)),
            _ => None,
        }
    }
}

/// The body's blocks in the alignment's order: paired block headers are one block (taking
/// both sides' parameters when their types differ), every other header a block of its side
/// alone; each instruction
/// goes to the block of its own side's block, and a pair of instructions whose blocks are
/// not one body block is taken apart (each side's alone). `None` when the entry blocks do
/// not pair (their parameters are the signatures', of which one may be a prefix of the
/// other's, checked by `body_signature`).
fn body_blocks(
    left: &Function,
    right: &Function,
    (ll, rl): (&Linearised, &Linearised),
    alignment: &Alignment,
) -> Option<BodyBlocks> {
    let types = |f: &Function, b: Block| -> SmallVec<[Type; 4]> {
        f.dfg
            .block_params(b)
            .iter()
            .map(|&v| f.dfg.value_type(v))
            .collect()
    };
    let mut out: Vec<BodyBlock> = Vec::new();
    // Each instruction's step with the body block it goes to.
    let mut placed: Vec<(usize, Step)> = Vec::with_capacity(alignment.steps.len());
    // The body block of the block each side is in.
    let (mut at_left, mut at_right): (Option<usize>, Option<usize>) = (None, None);
    let open = |out: &mut Vec<BodyBlock>, left: Option<Block>, right: Option<Block>| {
        out.push(BodyBlock {
            left,
            right,
            both_params: false,
            steps: 0..0,
        });
        out.len() - 1
    };
    for step in &alignment.steps {
        match *step {
            Step::Pair(l, r, _) => match (ll.items[l].kind, rl.items[r].kind) {
                (ItemKind::Block(lb), ItemKind::Block(rb)) => {
                    let (lt, rt) = (types(left, lb), types(right, rb));
                    let entry = out.is_empty();
                    if entry && !(lt.starts_with(&rt) || rt.starts_with(&lt)) {
                        return None;
                    }
                    let at = open(&mut out, Some(lb), Some(rb));
                    out[at].both_params = !entry && lt != rt;
                    (at_left, at_right) = (Some(at), Some(at));
                }
                (ItemKind::Inst(..), ItemKind::Inst(..)) => {
                    let (a, b) = (at_left?, at_right?);
                    if a == b {
                        placed.push((a, *step));
                    } else {
                        placed.push((a, Step::LeftOnly(l)));
                        placed.push((b, Step::RightOnly(r)));
                    }
                }
                _ => return None,
            },
            Step::LeftOnly(l) => match ll.items[l].kind {
                ItemKind::Block(lb) if !out.is_empty() => {
                    at_left = Some(open(&mut out, Some(lb), None))
                }
                ItemKind::Block(_) => return None,
                ItemKind::Inst(..) => placed.push((at_left?, *step)),
            },
            Step::RightOnly(r) => match rl.items[r].kind {
                ItemKind::Block(rb) if !out.is_empty() => {
                    at_right = Some(open(&mut out, None, Some(rb)))
                }
                ItemKind::Block(_) => return None,
                ItemKind::Inst(..) => placed.push((at_right?, *step)),
            },
        }
    }
    // The first items of both walks are the entry blocks, paired.
    let first = out.first()?;
    if first.left != left.layout.entry_block() || first.right != right.layout.entry_block() {
        return None;
    }
    // Block after block, each side's steps in their order (blocks that pair one to one
    // by position come in order already).
    if !placed.is_sorted_by_key(|(at, _)| *at) {
        placed.sort_by_key(|(at, _)| *at);
    }
    let mut start = 0;
    for (at, block) in out.iter_mut().enumerate() {
        let end = start + placed[start..].iter().take_while(|(a, _)| *a == at).count();
        block.steps = start..end;
        start = end;
    }
    Some(BodyBlocks {
        blocks: out,
        steps: placed.into_iter().map(|(_, step)| step).collect(),
    })
}

/// How often each of a function's values is read, aliases resolved.
pub type UseCounts = SecondaryMap<Value, u32>;

/// How often each value of `func` is read, aliases resolved.
pub fn use_counts(func: &Function) -> UseCounts {
    let mut uses = SecondaryMap::with_capacity(func.dfg.num_values());
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                uses[func.dfg.resolve_aliases(v)] += 1;
            }
        }
    }
    uses
}

/// Whether an instruction may run on the other member's path too: pure, no trap, no
/// memory, no call, no control flow.
fn speculable(opcode: Opcode) -> bool {
    !(opcode.is_call()
        || opcode.is_branch()
        || opcode.is_terminator()
        || opcode.is_return()
        || opcode.can_load()
        || opcode.can_store()
        || opcode.can_trap()
        || opcode.other_side_effects())
}

impl<'a> Builder<'a> {
    fn func(&self, side: Side) -> &'a Function {
        match side {
            Side::Left => self.left,
            Side::Right => self.right,
        }
    }

    fn imported(&mut self, side: Side) -> &mut Imported {
        &mut self.imported[side as usize]
    }

    /// Left slots are copied; a right slot shares the left slot at its index when their
    /// data are equal (only one member runs per call), otherwise it is copied.
    fn import_stack_slots(&mut self) {
        let (left, right) = (self.left, self.right);
        for (slot, data) in left.sized_stack_slots.iter() {
            let new = self.body.sized_stack_slots.push(data.clone());
            self.imported[0].stack_slots[slot] = new.into();
        }
        for (slot, data) in right.sized_stack_slots.iter() {
            let new = match left.sized_stack_slots.get(slot) {
                Some(l) if l == data => self.imported[0].stack_slots[slot].expand(),
                _ => None,
            }
            .unwrap_or_else(|| self.body.sized_stack_slots.push(data.clone()));
            self.imported[1].stack_slots[slot] = new.into();
        }
    }

    fn value(&mut self, side: Side, v: Value) -> Value {
        let v = self.func(side).dfg.resolve_aliases(v);
        match self.imported(side).values[v].expand() {
            Some(m) => m,
            None => {
                self.failed = true;
                Value::from_u32(0)
            }
        }
    }

    fn external_name(&mut self, side: Side, name: &ir::ExternalName) -> ir::ExternalName {
        match name {
            ir::ExternalName::User(r) => {
                let user = self.func(side).params.user_named_funcs()[*r].clone();
                ir::ExternalName::User(self.body.declare_imported_user_function(user))
            }
            ir::ExternalName::TestCase(_)
            | ir::ExternalName::LibCall(_)
            | ir::ExternalName::KnownSymbol(_) => name.clone(),
        }
    }

    fn signature(&mut self, side: Side, sig: ir::SigRef) -> ir::SigRef {
        if let Some(s) = self.imported(side).signatures[sig].expand() {
            return s;
        }
        let data = &self.func(side).dfg.signatures[sig];
        let found = self
            .body
            .dfg
            .signatures
            .iter()
            .find(|(_, d)| *d == data)
            .map(|(s, _)| s);
        let s = found.unwrap_or_else(|| self.body.dfg.signatures.push(data.clone()));
        self.imported(side).signatures[sig] = s.into();
        s
    }

    fn func_ref(&mut self, side: Side, func_ref: ir::FuncRef) -> ir::FuncRef {
        if let Some(f) = self.imported(side).func_refs[func_ref].expand() {
            return f;
        }
        let data = self.func(side).dfg.ext_funcs[func_ref].clone();
        let data = ir::ExtFuncData {
            name: self.external_name(side, &data.name),
            signature: self.signature(side, data.signature),
            colocated: data.colocated,
            patchable: data.patchable,
        };
        let found = self
            .body
            .dfg
            .ext_funcs
            .iter()
            .find(|(_, d)| **d == data)
            .map(|(f, _)| f);
        let f = found.unwrap_or_else(|| self.body.dfg.ext_funcs.push(data));
        self.imported(side).func_refs[func_ref] = f.into();
        f
    }

    fn mem_flags(&mut self, side: Side, flags: ir::MemFlags) -> ir::MemFlags {
        let at = flags.as_u32() as usize;
        if let Some(&Some(imported)) = self.imported(side).mem_flags.get(at) {
            return imported;
        }
        let func = self.func(side);
        let mut data = func.dfg.mem_flags[flags];
        if let Some(region) = data.alias_region() {
            let region = func.dfg.alias_regions[region].clone();
            data.set_alias_region(Some(self.body.dfg.alias_regions.insert(region)));
        }
        match self.body.dfg.mem_flags.insert(data) {
            Ok(imported) => {
                let cache = &mut self.imported(side).mem_flags;
                if cache.len() <= at {
                    cache.resize(at + 1, None);
                }
                cache[at] = Some(imported);
                imported
            }
            Err(_) => {
                self.failed = true;
                flags
            }
        }
    }

    fn global_value(&mut self, side: Side, gv: GlobalValue) -> GlobalValue {
        if let Some(g) = self.imported(side).global_values[gv].expand() {
            return g;
        }
        let data = match self.func(side).global_values[gv].clone() {
            GlobalValueData::Load {
                base,
                offset,
                global_type,
                flags,
            } => GlobalValueData::Load {
                base: self.global_value(side, base),
                offset,
                global_type,
                flags: self.mem_flags(side, flags),
            },
            GlobalValueData::IAddImm {
                base,
                offset,
                global_type,
            } => GlobalValueData::IAddImm {
                base: self.global_value(side, base),
                offset,
                global_type,
            },
            GlobalValueData::Symbol {
                name,
                offset,
                colocated,
                tls,
            } => GlobalValueData::Symbol {
                name: self.external_name(side, &name),
                offset,
                colocated,
                tls,
            },
            data @ (GlobalValueData::VMContext | GlobalValueData::DynScaleTargetConst { .. }) => {
                data
            }
        };
        let found = self
            .body
            .global_values
            .iter()
            .find(|(_, d)| **d == data)
            .map(|(g, _)| g);
        let g = found.unwrap_or_else(|| self.body.global_values.push(data));
        self.imported(side).global_values[gv] = g.into();
        g
    }

    /// `inst` of `side` as an instruction of the body: entities imported, each value
    /// operand read through `operand` (called in operand order).
    fn import_inst(
        &mut self,
        side: Side,
        inst: Inst,
        operand: &mut dyn FnMut(&mut Self, Value) -> Value,
    ) -> InstructionData {
        let data = self.func(side).dfg.insts[inst];
        let mut mapper = Mapper {
            b: self,
            side,
            operand,
        };
        data.map(&mut mapper)
    }

    /// Whether `l` and `r` are the same instruction up to their value operands (and, with
    /// `any_callee`, up to the function a direct call names).
    fn same_up_to_operands(&mut self, l: Inst, r: Inst, any_callee: bool) -> bool {
        let (lf, rf) = (self.left, self.right);
        let (ld, rd) = (&lf.dfg.insts[l], &rf.dfg.insts[r]);
        if ld.opcode() != rd.opcode()
            || !self.same_stack_maps(l, r)
            || lf.dfg.inst_args(l).len() != rf.dfg.inst_args(r).len()
            || lf.dfg.ctrl_typevar(l) != rf.dfg.ctrl_typevar(r)
            || !types_equal(lf, lf.dfg.inst_args(l), rf, rf.dfg.inst_args(r))
            || !types_equal(lf, lf.dfg.inst_results(l), rf, rf.dfg.inst_results(r))
        {
            return false;
        }
        if !any_callee {
            if let Some(same) = same_without_importing(lf, ld, rf, rd) {
                return same;
            }
        }
        self.same_by_importing(l, r, any_callee)
    }

    /// Whether `l` and `r` have the same user stack map once their slots are the body's:
    /// a call the body makes for both tells the collector of the same roots whichever
    /// member runs (each member's path stores its own values there). Two calls whose roots
    /// differ stay each its member's, behind the identifier.
    fn same_stack_maps(&self, l: Inst, r: Inst) -> bool {
        let entries = |side: Side, inst: Inst| {
            let slots = &self.imported[side as usize].stack_slots;
            self.func(side)
                .dfg
                .user_stack_map_entries(inst)
                .unwrap_or_default()
                .iter()
                .map(move |e| (e.ty, slots[e.slot].expand(), e.offset))
        };
        entries(Side::Left, l).eq(entries(Side::Right, r))
    }

    /// [`Builder::same_up_to_operands`] (whose checks of opcodes, counts and types have
    /// passed) by importing both instructions into the body, their operands all one
    /// placeholder, and comparing what they became.
    fn same_by_importing(&mut self, l: Inst, r: Inst, any_callee: bool) -> bool {
        let ld = &self.left.dfg.insts[l];
        let placeholder = &mut |_: &mut Self, _| Value::from_u32(0);
        let lm = self.import_inst(Side::Left, l, placeholder);
        let mut rm = self.import_inst(Side::Right, r, placeholder);
        if any_callee {
            match (lm, &mut rm) {
                (
                    InstructionData::Call { func_ref: a, .. },
                    InstructionData::Call { func_ref: b, .. },
                )
                | (
                    InstructionData::TryCall { func_ref: a, .. },
                    InstructionData::TryCall { func_ref: b, .. },
                ) => {
                    let signature = |f: ir::FuncRef| self.body.dfg.ext_funcs[f].signature;
                    if signature(a) != signature(*b) {
                        return false;
                    }
                    *b = a;
                }
                _ => return false,
            }
        }
        if ld.opcode().is_branch() {
            return self.same_branches(&lm, &rm);
        }
        lm.eq(&rm, &self.body.dfg.value_lists)
    }

    /// Whether two branches imported into the body (operands all one placeholder) are the
    /// same: the same successors with the same arguments (values, or a `try_call`'s
    /// results), and for `try_call` the same callee, signature and catch tags.
    fn same_branches(&self, l: &InstructionData, r: &InstructionData) -> bool {
        let dfg = &self.body.dfg;
        let pool = &dfg.value_lists;
        let (ls, rs) = (
            l.branch_destination(&dfg.jump_tables, &dfg.exception_tables),
            r.branch_destination(&dfg.jump_tables, &dfg.exception_tables),
        );
        let successors = ls.len() == rs.len()
            && ls
                .iter()
                .zip(rs)
                .all(|(a, b)| a.block(pool) == b.block(pool) && a.args(pool).eq(b.args(pool)));
        let tags = |t: ir::ExceptionTable| -> (ir::SigRef, Vec<Option<Option<ir::ExceptionTag>>>) {
            let table = &dfg.exception_tables[t];
            let items = table
                .items()
                .map(|item| match item {
                    ir::ExceptionTableItem::Tag(tag, _) => Some(Some(tag)),
                    ir::ExceptionTableItem::Default(_) => Some(None),
                    ir::ExceptionTableItem::Context(_) => None,
                })
                .collect();
            (table.signature(), items)
        };
        successors
            && match (*l, *r) {
                (InstructionData::Jump { .. }, InstructionData::Jump { .. })
                | (InstructionData::Brif { .. }, InstructionData::Brif { .. }) => true,
                (
                    InstructionData::TryCall {
                        func_ref: a,
                        exception: ea,
                        ..
                    },
                    InstructionData::TryCall {
                        func_ref: b,
                        exception: eb,
                        ..
                    },
                ) => a == b && tags(ea) == tags(eb),
                (
                    InstructionData::TryCallIndirect { exception: ea, .. },
                    InstructionData::TryCallIndirect { exception: eb, .. },
                ) => tags(ea) == tags(eb),
                _ => false,
            }
    }

    /// Append a copy of `inst` of `side` to `block`, operands read through `operand`;
    /// its results become `side`'s values.
    fn emit(
        &mut self,
        side: Side,
        inst: Inst,
        block: Block,
        operand: &mut dyn FnMut(&mut Self, Value) -> Value,
    ) -> Inst {
        self.emit_as(side, inst, block, None, operand)
    }

    /// [`Builder::emit`]; with `callee`, a direct call (`call`, `return_call`,
    /// `try_call`) becomes the indirect call of `callee`.
    fn emit_as(
        &mut self,
        side: Side,
        inst: Inst,
        block: Block,
        callee: Option<Value>,
        operand: &mut dyn FnMut(&mut Self, Value) -> Value,
    ) -> Inst {
        let mut data = self.import_inst(side, inst, operand);
        let func = self.func(side);
        let mut ctrl = func.dfg.ctrl_typevar(inst);
        if let Some(callee) = callee {
            ctrl = self.body.dfg.value_type(callee);
            let pool = &mut self.body.dfg.value_lists;
            data = match data {
                InstructionData::Call {
                    opcode,
                    mut args,
                    func_ref,
                } => {
                    args.insert(0, callee, pool);
                    InstructionData::CallIndirect {
                        opcode: match opcode {
                            Opcode::ReturnCall => Opcode::ReturnCallIndirect,
                            _ => Opcode::CallIndirect,
                        },
                        args,
                        sig_ref: self.body.dfg.ext_funcs[func_ref].signature,
                    }
                }
                InstructionData::TryCall {
                    mut args,
                    exception,
                    ..
                } => {
                    args.insert(0, callee, pool);
                    InstructionData::TryCallIndirect {
                        opcode: Opcode::TryCallIndirect,
                        args,
                        exception,
                    }
                }
                other => {
                    self.failed = true;
                    other
                }
            };
        }
        let new = self.body.dfg.make_inst(data);
        self.body.dfg.make_inst_results(new, ctrl);
        // Its member's stack map, in the body's slots.
        for entry in func.dfg.user_stack_map_entries(inst).unwrap_or_default() {
            let Some(slot) = self.imported[side as usize].stack_slots[entry.slot].expand() else {
                self.failed = true;
                continue;
            };
            let entry = ir::UserStackMapEntry { slot, ..*entry };
            self.body.dfg.append_user_stack_map_entry(new, entry);
        }
        if data.opcode() == Opcode::GetExceptionHandlerAddress {
            self.handlers.push((new, side));
        }
        self.body.layout.append_inst(new, block);
        let (old, new_results) = (func.dfg.inst_results(inst), self.body.dfg.inst_results(new));
        if old.len() != new_results.len() {
            self.failed = true;
        }
        let values = &mut self.imported[side as usize].values;
        for (&o, &n) in old.iter().zip(new_results) {
            values[o] = n.into();
        }
        new
    }

    /// Append `inst` of `side` with its own values.
    fn emit_own(&mut self, side: Side, inst: Inst, block: Block) -> Inst {
        self.emit(side, inst, block, &mut |b, v| b.value(side, v))
    }

    /// Walk one pair of blocks' steps into `block` of the body.
    /// Returns the blocks the left and the right terminator ended in (one merged
    /// terminator, or each side's own behind a branch on the identifier).
    fn fill_block(&mut self, mut block: Block, steps: &[Step]) -> Option<[Block; 2]> {
        let (left, right) = (self.left, self.right);
        let mut pending = Diamond::default();
        // Terminators that do not merge, each run behind the identifier's branch last.
        let mut own_terminators: [Option<Inst>; 2] = [None, None];
        for step in steps {
            match *step {
                Step::Pair(l, r, _) => {
                    let (l, r) = (self.inst_of(Side::Left, l)?, self.inst_of(Side::Right, r)?);
                    let terminators = (
                        left.dfg.insts[l].opcode().is_terminator(),
                        right.dfg.insts[r].opcode().is_terminator(),
                    );
                    let handler = Opcode::GetExceptionHandlerAddress;
                    if left.dfg.insts[l].opcode() == handler
                        || right.dfg.insts[r].opcode() == handler
                    {
                        // Each side's names the block its own `try_call` ends up in.
                        self.emit_own_or_pend(Side::Left, l, block, &mut pending);
                        self.emit_own_or_pend(Side::Right, r, block, &mut pending);
                    } else if self.same_up_to_operands(l, r, false) {
                        block = self.close(block, &mut pending)?;
                        self.emit_merged(l, r, block, false)?;
                    } else if self.same_up_to_operands(l, r, true) {
                        // Direct calls of other functions with one signature: an indirect
                        // call of the selected address.
                        block = self.close(block, &mut pending)?;
                        self.emit_merged(l, r, block, true)?;
                    } else if terminators == (true, true) {
                        own_terminators = [Some(l), Some(r)];
                    } else if terminators != (false, false) {
                        return None;
                    } else if speculable(left.dfg.insts[l].opcode())
                        && speculable(right.dfg.insts[r].opcode())
                        && !self.reads_pending(Side::Left, l, &pending)
                        && !self.reads_pending(Side::Right, r, &pending)
                    {
                        self.emit_own(Side::Left, l, block);
                        self.emit_own(Side::Right, r, block);
                    } else {
                        pending.left.push(l);
                        pending.right.push(r);
                        pending.pairs.push((l, r));
                    }
                }
                Step::LeftOnly(item) | Step::RightOnly(item) => {
                    let side = if matches!(step, Step::LeftOnly(_)) {
                        Side::Left
                    } else {
                        Side::Right
                    };
                    let i = self.inst_of(side, item)?;
                    if self.func(side).dfg.insts[i].opcode().is_terminator() {
                        own_terminators[side as usize] = Some(i);
                    } else {
                        self.emit_own_or_pend(side, i, block, &mut pending);
                    }
                }
            }
            if self.failed {
                return None;
            }
        }
        match own_terminators {
            [None, None] => {
                // The block must have ended in a merged terminator.
                let last = self.body.layout.last_inst(block)?;
                (pending.is_empty() && self.body.dfg.insts[last].opcode().is_terminator())
                    .then_some([block, block])
            }
            [Some(l), Some(r)] => {
                // Going to other blocks, the body's control flow becomes the union of the
                // members': uses may need carrying to stay dominated.
                if self.successors(Side::Left, l)? != self.successors(Side::Right, r)? {
                    if !self.unlike_blocks {
                        return None;
                    }
                    self.flows_apart = true;
                }
                // What is pending joins first; then each side's terminator in an arm of
                // its own.
                block = self.close(block, &mut pending)?;
                let arms = [self.body.dfg.make_block(), self.body.dfg.make_block()];
                for (arm, side, inst) in [(arms[0], Side::Left, l), (arms[1], Side::Right, r)] {
                    self.body.layout.append_block(arm);
                    self.emit_own(side, inst, arm);
                }
                let id = self.id;
                FuncCursor::new(&mut self.body).at_bottom(block).ins().brif(
                    id,
                    arms[0],
                    &[],
                    arms[1],
                    &[],
                );
                (!self.failed).then_some(arms)
            }
            _ => None,
        }
    }

    /// Copy a block of `side` alone (`steps` are all that side's) into `block`: only that
    /// member runs it, so nothing is guarded.
    fn fill_alone(&mut self, block: Block, side: Side, steps: &[Step]) -> Option<()> {
        for step in steps {
            let item = match *step {
                Step::LeftOnly(item) if side == Side::Left => item,
                Step::RightOnly(item) if side == Side::Right => item,
                Step::LeftOnly(_) | Step::RightOnly(_) | Step::Pair(..) => return None,
            };
            let inst = self.inst_of(side, item)?;
            self.emit_own(side, inst, block);
            if self.failed {
                return None;
            }
        }
        // The block ends in its terminator.
        let last = self.body.layout.last_inst(block)?;
        self.body.dfg.insts[last]
            .opcode()
            .is_terminator()
            .then_some(())
    }

    /// The body's blocks `inst` of `side` may branch to, in order.
    fn successors(&self, side: Side, inst: Inst) -> Option<Vec<Block>> {
        let dfg = &self.func(side).dfg;
        dfg.insts[inst]
            .branch_destination(&dfg.jump_tables, &dfg.exception_tables)
            .iter()
            .map(|call| self.imported[side as usize].blocks[call.block(&dfg.value_lists)].expand())
            .collect()
    }

    /// Emit `inst` of `side` now when it may run on both paths (pure, or the address of
    /// an exception handler) and reads nothing pending; otherwise add it to `pending`.
    fn emit_own_or_pend(&mut self, side: Side, inst: Inst, block: Block, pending: &mut Diamond) {
        let opcode = self.func(side).dfg.insts[inst].opcode();
        let anywhere = speculable(opcode) || opcode == Opcode::GetExceptionHandlerAddress;
        if anywhere && !self.reads_pending(side, inst, pending) {
            self.emit_own(side, inst, block);
        } else if side == Side::Left {
            pending.left.push(inst);
        } else {
            pending.right.push(inst);
        }
    }

    /// The instruction an item of `side`'s linearisation stands for.
    fn inst_of(&self, side: Side, item: ItemRef) -> Option<Inst> {
        match self.lin[side as usize].items.get(item)?.kind {
            ItemKind::Inst(inst, _) => Some(inst),
            ItemKind::Block(_) => None,
        }
    }

    /// Whether `inst` of `side` reads a value defined by an instruction still pending.
    fn reads_pending(&self, side: Side, inst: Inst, pending: &Diamond) -> bool {
        let func = self.func(side);
        let defined = match side {
            Side::Left => &pending.left,
            Side::Right => &pending.right,
        };
        func.dfg.inst_values(inst).any(|v| {
            let v = func.dfg.resolve_aliases(v);
            match func.dfg.value_def(v) {
                ir::ValueDef::Result(def, _) => defined.contains(&def),
                _ => false,
            }
        })
    }

    /// Append the merged instruction for the pair `l`, `r` (equal up to operands) to
    /// `block`: each operand the left value where both sides' values are one, otherwise
    /// `select(id, left, right)` placed before it.
    /// With `by_address`, the pair are direct calls of other functions: the copy calls
    /// `select(id, func_addr left, func_addr right)` indirectly.
    fn emit_merged(&mut self, l: Inst, r: Inst, block: Block, by_address: bool) -> Option<()> {
        let (lf, rf) = (self.left, self.right);
        let callee = if by_address {
            let callee = |side: Side, inst: Inst| match self.func(side).dfg.insts[inst] {
                InstructionData::Call { func_ref, .. }
                | InstructionData::TryCall { func_ref, .. } => Some(func_ref),
                _ => None,
            };
            let (a, b) = (callee(Side::Left, l)?, callee(Side::Right, r)?);
            let (a, b) = (self.func_ref(Side::Left, a), self.func_ref(Side::Right, b));
            let (id, pointer) = (self.id, self.pointer);
            let mut pos = FuncCursor::new(&mut self.body).at_bottom(block);
            let (a, b) = (
                pos.ins().func_addr(pointer, a),
                pos.ins().func_addr(pointer, b),
            );
            Some(pos.ins().select(id, a, b))
        } else {
            None
        };
        if lf.dfg.inst_values(l).count() != rf.dfg.inst_values(r).count() {
            return None;
        }
        let mut pairs: SmallVec<[(Value, Value); 4]> = SmallVec::new();
        for (a, b) in lf.dfg.inst_values(l).zip(rf.dfg.inst_values(r)) {
            pairs.push((self.value(Side::Left, a), self.value(Side::Right, b)));
            if self.failed {
                return None;
            }
        }
        // The right member's two operands of a commutative instruction, read the other way
        // round when that needs fewer selects (`x + y` against `y + x`).
        if let [(l0, r0), (l1, r1)] = pairs[..] {
            if commutes(&lf.dfg.insts[l])
                && usize::from(l0 != r1) + usize::from(l1 != r0)
                    < usize::from(l0 != r0) + usize::from(l1 != r1)
            {
                pairs = SmallVec::from_slice(&[(l0, r1), (l1, r0)]);
            }
        }
        let mut merged: SmallVec<[Value; 4]> = SmallVec::with_capacity(pairs.len());
        for (ma, mb) in pairs {
            if ma == mb {
                merged.push(ma);
            } else {
                if self.body.dfg.value_type(ma) != self.body.dfg.value_type(mb) {
                    return None;
                }
                let select = match self.selects.get(&(block, ma, mb)) {
                    Some(&v) => v,
                    None => {
                        let id = self.id;
                        let mut pos = FuncCursor::new(&mut self.body).at_bottom(block);
                        let v = pos.ins().select(id, ma, mb);
                        self.selects.insert((block, ma, mb), v);
                        v
                    }
                };
                merged.push(select);
            }
        }
        // The copy reads the operands in `inst_values` order.
        let mut next = merged.into_iter();
        let inst = self.emit_as(Side::Left, l, block, callee, &mut |b, _| {
            next.next().unwrap_or_else(|| {
                b.failed = true;
                Value::from_u32(0)
            })
        });
        let (new, old) = (self.body.dfg.inst_results(inst), rf.dfg.inst_results(r));
        if new.len() != old.len() {
            return None;
        }
        for (&o, &n) in old.iter().zip(new) {
            self.imported[1].values[o] = n.into();
        }
        Some(())
    }

    /// A zero of `ty` appended to `block`, for the path that does not define a value.
    /// A zero of `ty` at the top of the entry block (one per type); `None` for a type
    /// without one here (vectors, `i128`).
    fn entry_zero(&mut self, ty: Type) -> Option<Value> {
        let entry = self.body.layout.entry_block()?;
        dominance::zero(&mut self.body, entry, ty, &mut self.zeros)
    }

    fn zero(&mut self, ty: Type, block: Block) -> Option<Value> {
        let mut pos = FuncCursor::new(&mut self.body).at_bottom(block);
        Some(match ty {
            types::I8 | types::I16 | types::I32 | types::I64 => pos.ins().iconst(ty, 0),
            types::F32 => pos.ins().f32const(0.0),
            types::F64 => pos.ins().f64const(0.0),
            _ => return None,
        })
    }

    /// Close the pending diamond at the end of `block` (nothing when it is empty):
    /// `brif id` into each side's arm, both joining in a new block whose parameters carry
    /// the values used later. Returns the block to go on in.
    fn close(&mut self, block: Block, pending: &mut Diamond) -> Option<Block> {
        if pending.is_empty() {
            return Some(block);
        }
        let diamond = std::mem::take(pending);
        // Join parameters: a differing pair's results share one; every other value
        // defined in an arm and read outside it gets its own, the other arm passing zero.
        let live = |b: &Self, side: Side, insts: &[Inst]| -> Vec<Value> {
            let func = b.func(side);
            let mut inside: FxHashMap<Value, u32> = FxHashMap::default();
            for &i in insts {
                for v in func.dfg.inst_values(i) {
                    *inside.entry(func.dfg.resolve_aliases(v)).or_default() += 1;
                }
            }
            let uses = b.uses[side as usize].get_or_init(|| use_counts(func));
            insts
                .iter()
                .flat_map(|&i| func.dfg.inst_results(i).iter().copied())
                .filter(|&v| uses[v] > inside.get(&v).copied().unwrap_or(0))
                .collect()
        };
        let (left_live, right_live) = (
            live(self, Side::Left, &diamond.left),
            live(self, Side::Right, &diamond.right),
        );
        let (lf, rf) = (self.left, self.right);
        // (left value, right value, type): one join parameter each.
        let mut params: Vec<(Option<Value>, Option<Value>, Type)> = Vec::new();
        let mut shared_right = FxHashSet::default();
        for &(l, r) in &diamond.pairs {
            let (lr, rr) = (lf.dfg.inst_results(l), rf.dfg.inst_results(r));
            if types_equal(lf, lr, rf, rr) {
                for (&a, &b) in lr.iter().zip(rr) {
                    if left_live.contains(&a) || right_live.contains(&b) {
                        params.push((Some(a), Some(b), lf.dfg.value_type(a)));
                        shared_right.insert(b);
                    }
                }
            }
        }
        for &v in &left_live {
            if !params.iter().any(|p| p.0 == Some(v)) {
                params.push((Some(v), None, lf.dfg.value_type(v)));
            }
        }
        for &v in &right_live {
            if !shared_right.contains(&v) {
                params.push((None, Some(v), rf.dfg.value_type(v)));
            }
        }

        let join = self.body.dfg.make_block();
        // An arm with no instructions is no block: the branch goes to the join directly,
        // with zeros made before it.
        let mut targets: Vec<(Block, Vec<BlockArg>)> = Vec::with_capacity(2);
        for (side, insts) in [(Side::Left, &diamond.left), (Side::Right, &diamond.right)] {
            let arm = if insts.is_empty() {
                block
            } else {
                let arm = self.body.dfg.make_block();
                self.body.layout.append_block(arm);
                for &i in insts.iter() {
                    self.emit_own(side, i, arm);
                }
                arm
            };
            let mut args = Vec::with_capacity(params.len());
            for &(l, r, ty) in &params {
                let own = match side {
                    Side::Left => l,
                    Side::Right => r,
                };
                args.push(BlockArg::Value(match own {
                    Some(v) => self.value(side, v),
                    None => self.zero(ty, arm)?,
                }));
            }
            if insts.is_empty() {
                targets.push((join, args));
            } else {
                FuncCursor::new(&mut self.body)
                    .at_bottom(arm)
                    .ins()
                    .jump(join, &args);
                targets.push((arm, Vec::new()));
            }
        }
        let id = self.id;
        let (right, left) = (targets.pop()?, targets.pop()?);
        FuncCursor::new(&mut self.body)
            .at_bottom(block)
            .ins()
            .brif(id, left.0, &left.1, right.0, &right.1);
        self.body.layout.append_block(join);
        for &(l, r, ty) in &params {
            let p = self.body.dfg.append_block_param(join, ty);
            if let Some(l) = l {
                self.imported[0].values[l] = p.into();
            }
            if let Some(r) = r {
                self.imported[1].values[r] = p.into();
            }
        }
        (!self.failed).then_some(join)
    }
}

/// Whether `ld` of `lf` and `rd` of `rf` (of one opcode) are the same instruction up to
/// their value operands, decided without importing them into the body, for the formats
/// whose only entities are memory flags: every other field compared as it is, memory flags
/// by their bits and alias region, which is what importing both compares (the body's sets
/// of flags and of regions keep one entry per distinct flags and per region identifier).
/// `None` for a format that names other entities or holds a value list: those are
/// imported and compared ([`Builder::same_up_to_operands`]).
fn same_without_importing(
    lf: &Function,
    ld: &InstructionData,
    rf: &Function,
    rd: &InstructionData,
) -> Option<bool> {
    // A memory access's flags: their bits, and the identifier of their alias region.
    let flags = |f: &Function, flags: ir::MemFlags| -> (ir::MemFlagsData, Option<u32>) {
        let mut bits = f.dfg.mem_flags[flags];
        let region = bits.alias_region().map(|r| f.dfg.alias_regions[r].user_id);
        bits.set_alias_region(None);
        (bits, region)
    };
    // Both copies with their value operands (and memory flags, compared apart) made one
    // placeholder, so that `eq` compares the rest.
    let blank = |data: &InstructionData| -> Option<InstructionData> {
        let mut data = *data;
        let placeholder = Value::from_u32(0);
        match &mut data {
            InstructionData::AtomicCas { args, flags, .. } => {
                *args = [placeholder; 3];
                *flags = ir::MemFlags::with_number(0).expect("index 0");
            }
            InstructionData::AtomicRmw { args, flags, .. }
            | InstructionData::Store { args, flags, .. }
            | InstructionData::StoreNoOffset { args, flags, .. } => {
                *args = [placeholder; 2];
                *flags = ir::MemFlags::with_number(0).expect("index 0");
            }
            InstructionData::Load { arg, flags, .. }
            | InstructionData::LoadNoOffset { arg, flags, .. } => {
                *arg = placeholder;
                *flags = ir::MemFlags::with_number(0).expect("index 0");
            }
            InstructionData::Binary { args, .. }
            | InstructionData::FloatCompare { args, .. }
            | InstructionData::IntAddTrap { args, .. }
            | InstructionData::IntCompare { args, .. }
            | InstructionData::TernaryImm8 { args, .. } => *args = [placeholder; 2],
            InstructionData::Ternary { args, .. } => *args = [placeholder; 3],
            InstructionData::BinaryImm8 { arg, .. }
            | InstructionData::CondTrap { arg, .. }
            | InstructionData::Unary { arg, .. } => *arg = placeholder,
            InstructionData::NullAry { .. }
            | InstructionData::Trap { .. }
            | InstructionData::UnaryIeee16 { .. }
            | InstructionData::UnaryIeee32 { .. }
            | InstructionData::UnaryIeee64 { .. }
            | InstructionData::UnaryImm { .. } => {}
            InstructionData::BranchTable { .. }
            | InstructionData::Brif { .. }
            | InstructionData::Call { .. }
            | InstructionData::CallIndirect { .. }
            | InstructionData::DynamicStackAddr { .. }
            | InstructionData::ExceptionHandlerAddress { .. }
            | InstructionData::FuncAddr { .. }
            | InstructionData::Jump { .. }
            | InstructionData::MultiAry { .. }
            | InstructionData::Shuffle { .. }
            | InstructionData::StackAddr { .. }
            | InstructionData::TryCall { .. }
            | InstructionData::TryCallIndirect { .. }
            | InstructionData::UnaryConst { .. }
            | InstructionData::UnaryGlobalValue { .. } => return None,
        }
        Some(data)
    };
    let (lb, rb) = (blank(ld)?, blank(rd)?);
    let flags_equal = match (ld.memflags(), rd.memflags()) {
        (Some(a), Some(b)) => flags(lf, a) == flags(rf, b),
        (None, None) => true,
        _ => false,
    };
    // Neither holds a value list: the pool is not read.
    Some(flags_equal && lb.eq(&rb, &lf.dfg.value_lists))
}

/// Whether two value lists have the same types, position by position.
fn types_equal(lf: &Function, l: &[Value], rf: &Function, r: &[Value]) -> bool {
    l.len() == r.len()
        && l.iter()
            .zip(r)
            .all(|(&a, &b)| lf.dfg.value_type(a) == rf.dfg.value_type(b))
}

/// Imports an instruction's entities into the body and reads its operands through a
/// function of the caller's.
struct Mapper<'b, 'a, 'o> {
    b: &'b mut Builder<'a>,
    side: Side,
    operand: &'o mut dyn FnMut(&mut Builder<'a>, Value) -> Value,
}

impl InstructionMapper for Mapper<'_, '_, '_> {
    fn map_value(&mut self, value: Value) -> Value {
        (self.operand)(self.b, value)
    }

    fn map_value_list(&mut self, list: ir::ValueList) -> ir::ValueList {
        let values: Vec<Value> = list
            .as_slice(&self.b.func(self.side).dfg.value_lists)
            .to_vec();
        let mut out = ir::ValueList::new();
        for v in values {
            let m = self.map_value(v);
            out.push(m, &mut self.b.body.dfg.value_lists);
        }
        out
    }

    fn map_global_value(&mut self, gv: GlobalValue) -> GlobalValue {
        self.b.global_value(self.side, gv)
    }

    fn map_jump_table(&mut self, table: ir::JumpTable) -> ir::JumpTable {
        self.b.failed = true;
        table
    }

    fn map_exception_table(&mut self, table: ir::ExceptionTable) -> ir::ExceptionTable {
        // Values in `inst_values` order: the catch targets' arguments in table order, the
        // normal return's, then the contexts.
        let data = self.b.func(self.side).dfg.exception_tables[table].clone();
        let signature = self.b.signature(self.side, data.signature());
        let mut items: Vec<ir::ExceptionTableItem> = Vec::new();
        for item in data.items() {
            items.push(match item {
                ir::ExceptionTableItem::Tag(tag, call) => {
                    ir::ExceptionTableItem::Tag(tag, self.map_block_call(call))
                }
                ir::ExceptionTableItem::Default(call) => {
                    ir::ExceptionTableItem::Default(self.map_block_call(call))
                }
                context @ ir::ExceptionTableItem::Context(_) => context,
            });
        }
        let normal = self.map_block_call(*data.normal_return());
        for item in &mut items {
            if let ir::ExceptionTableItem::Context(v) = item {
                *v = self.map_value(*v);
            }
        }
        self.b
            .body
            .dfg
            .exception_tables
            .push(ir::ExceptionTableData::new(signature, normal, items))
    }

    fn map_block_call(&mut self, call: BlockCall) -> BlockCall {
        let func = self.b.func(self.side);
        let block = call.block(&func.dfg.value_lists);
        let args: Vec<BlockArg> = call.args(&func.dfg.value_lists).collect();
        let block = self.map_block(block);
        let mut mapped = Vec::with_capacity(args.len());
        for arg in args {
            match arg {
                BlockArg::Value(v) => mapped.push(BlockArg::Value(self.map_value(v))),
                // A `try_call`'s results: positions, the same in the body.
                BlockArg::TryCallRet(_) | BlockArg::TryCallExn(_) => mapped.push(arg),
            }
        }
        // A block that takes both sides' parameters gets zeros for the other side's.
        if let Some(padding) = self.b.padding.get(&block) {
            let (before, after) = match self.side {
                Side::Left => (SmallVec::new(), padding.right.clone()),
                Side::Right => (padding.left.clone(), SmallVec::new()),
            };
            let zeros = |types: SmallVec<[Type; 4]>, b: &mut Builder| -> Vec<BlockArg> {
                (types.into_iter())
                    .map(|ty| match b.entry_zero(ty) {
                        Some(z) => BlockArg::Value(z),
                        None => {
                            b.failed = true;
                            BlockArg::Value(Value::from_u32(0))
                        }
                    })
                    .collect()
            };
            let mut padded = zeros(before, self.b);
            padded.append(&mut mapped);
            padded.append(&mut zeros(after, self.b));
            mapped = padded;
        }
        BlockCall::new(block, mapped, &mut self.b.body.dfg.value_lists)
    }

    fn map_block(&mut self, block: Block) -> Block {
        match self.b.imported(self.side).blocks[block].expand() {
            Some(b) => b,
            None => {
                self.b.failed = true;
                block
            }
        }
    }

    fn map_func_ref(&mut self, func_ref: ir::FuncRef) -> ir::FuncRef {
        self.b.func_ref(self.side, func_ref)
    }

    fn map_sig_ref(&mut self, sig: ir::SigRef) -> ir::SigRef {
        self.b.signature(self.side, sig)
    }

    fn map_stack_slot(&mut self, slot: ir::StackSlot) -> ir::StackSlot {
        match self.b.imported(self.side).stack_slots[slot].expand() {
            Some(s) => s,
            None => {
                self.b.failed = true;
                slot
            }
        }
    }

    fn map_dynamic_stack_slot(&mut self, slot: ir::DynamicStackSlot) -> ir::DynamicStackSlot {
        self.b.failed = true;
        slot
    }

    fn map_constant(&mut self, constant: ir::Constant) -> ir::Constant {
        let data = self.b.func(self.side).dfg.constants.get(constant).clone();
        self.b.body.dfg.constants.insert(data)
    }

    fn map_immediate(&mut self, immediate: ir::Immediate) -> ir::Immediate {
        let data = self.b.func(self.side).dfg.immediates.get(immediate);
        let Some(data) = data.cloned() else {
            self.b.failed = true;
            return immediate;
        };
        let found = self
            .b
            .body
            .dfg
            .immediates
            .iter()
            .find(|(_, d)| **d == data)
            .map(|(i, _)| i);
        found.unwrap_or_else(|| self.b.body.dfg.immediates.push(data))
    }

    fn map_mem_flags(&mut self, flags: ir::MemFlags) -> ir::MemFlags {
        self.b.mem_flags(self.side, flags)
    }
}

/// Whether `data` gives the same result with its two value operands exchanged: integer
/// additions, multiplications (high halves too), bitwise and/or/xor, minimums and
/// maximums, and comparisons for (in)equality. Float arithmetic is left out: which NaN it
/// returns may depend on the operands' order.
fn commutes(data: &InstructionData) -> bool {
    match *data {
        InstructionData::Binary { opcode, .. } => matches!(
            opcode,
            Opcode::Iadd
                | Opcode::Imul
                | Opcode::Umulhi
                | Opcode::Smulhi
                | Opcode::Band
                | Opcode::Bor
                | Opcode::Bxor
                | Opcode::Smin
                | Opcode::Smax
                | Opcode::Umin
                | Opcode::Umax
        ),
        InstructionData::IntCompare { cond, .. } => {
            matches!(
                cond,
                ir::condcodes::IntCC::Equal | ir::condcodes::IntCC::NotEqual
            )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::fingerprint::linearise;
    use crate::target::TargetInfo;

    /// Every function of the fixtures that exercise merging by alignment and merge-similar,
    /// read as the command line reads them.
    fn fixture_functions() -> Vec<Function> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let folders = ["similar", "exec", "align"].map(|dir| root.join(dir));
        let files = crate::read::expand_inputs(&folders).expect("the fixture folders");
        let read = crate::read::read_files(&files, None, || {}).expect("the fixtures parse");
        read.functions.into_iter().map(|f| *f.func).collect()
    }

    /// The comparison without importing agrees with importing both instructions, on every
    /// pair of instructions of one opcode, counts and types among the fixtures' functions
    /// (whichever side each is on): it is a shortcut, not another rule.
    #[test]
    fn comparing_without_importing_agrees_with_importing() {
        let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").expect("a triple");
        let functions = fixture_functions();
        let linearised: Vec<Linearised> = functions.iter().map(|f| linearise(f, &target)).collect();
        let (mut decided, mut same) = (0, 0);
        for (left, ll) in functions.iter().zip(&linearised) {
            for (right, rl) in functions.iter().zip(&linearised) {
                let Some(signature) = body_signature(&left.signature, &right.signature) else {
                    continue;
                };
                let uses = [OnceLock::new(), OnceLock::new()];
                let mut b = Builder {
                    body: Box::new(Function::with_name_signature(
                        ir::UserFuncName::default(),
                        signature,
                    )),
                    id: Value::from_u32(0),
                    left,
                    right,
                    lin: [ll, rl],
                    uses: [&uses[0], &uses[1]],
                    pointer: types::I64,
                    imported: [Imported::default(), Imported::default()],
                    failed: false,
                    handlers: Vec::new(),
                    selects: FxHashMap::default(),
                    unlike_blocks: false,
                    flows_apart: false,
                    padding: FxHashMap::default(),
                    zeros: FxHashMap::default(),
                };
                let insts = |f: &'_ Function| -> Vec<Inst> {
                    f.layout
                        .blocks()
                        .flat_map(|block| f.layout.block_insts(block))
                        .collect()
                };
                for l in insts(left) {
                    for r in insts(right) {
                        let (ld, rd) = (&left.dfg.insts[l], &right.dfg.insts[r]);
                        if ld.opcode() != rd.opcode()
                            || left.dfg.inst_args(l).len() != right.dfg.inst_args(r).len()
                            || left.dfg.ctrl_typevar(l) != right.dfg.ctrl_typevar(r)
                        {
                            continue;
                        }
                        let Some(shortcut) = same_without_importing(left, ld, right, rd) else {
                            continue;
                        };
                        let imported = b.same_by_importing(l, r, false);
                        assert_eq!(
                            shortcut,
                            imported,
                            "{} of {} against {} of {}",
                            left.dfg.display_inst(l),
                            left.name,
                            right.dfg.display_inst(r),
                            right.name
                        );
                        decided += 1;
                        same += usize::from(shortcut);
                    }
                }
            }
        }
        // Enough of both answers to mean something.
        assert!(
            same > 1000 && decided - same > 1000,
            "{same} same of {decided}"
        );
    }

    /// Memory flags compare by their bits and their alias region's identifier: what the
    /// body's sets keep one of (a region's description is for printing only).
    #[test]
    fn memory_flags_compare_by_bits_and_region_identifier() {
        let region = |user_id: u32, description: &'static str| ir::AliasRegionData {
            user_id,
            description: description.into(),
        };
        let load = |func: &mut Function, region: Option<ir::AliasRegionData>, notrap: bool| {
            let mut data = ir::MemFlagsData::new();
            if notrap {
                data.set_notrap();
            }
            if let Some(region) = region {
                data.set_alias_region(Some(func.dfg.alias_regions.insert(region)));
            }
            let flags = func.dfg.mem_flags.insert(data).expect("room for flags");
            InstructionData::Load {
                opcode: Opcode::Load,
                arg: Value::from_u32(0),
                flags,
                offset: 8.into(),
            }
        };
        let (mut lf, mut rf) = (Function::new(), Function::new());
        let cases = [
            (
                Some(region(7, "heap")),
                Some(region(7, "memory 0")),
                true,
                true,
            ),
            (
                Some(region(7, "heap")),
                Some(region(8, "heap")),
                true,
                false,
            ),
            (Some(region(7, "heap")), None, true, false),
            (None, None, true, true),
            (None, None, false, false),
        ];
        for (l_region, r_region, same_bits, expected) in cases {
            let ld = load(&mut lf, l_region, true);
            let rd = load(&mut rf, r_region, same_bits);
            assert_eq!(same_without_importing(&lf, &ld, &rf, &rd), Some(expected));
        }
    }
}
