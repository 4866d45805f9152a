//! An estimate of a function's compiled size from its IR, without compiling it.
//!
//! Merge-similar ([`crate::merge::similar`]) merges a group only when the shared body and
//! its thunks take fewer `.text` bytes than the members. Compiling every candidate to
//! find out costs as much as compiling the module once more (on re2, the pass took longer
//! than the code generation it saved), so the cost model asks this module instead: a
//! linear model over what the IR holds, evaluated in one walk of the function.
//!
//! - **Features** ([`visit_features`]): a count per opcode and class of its controlling
//!   type (narrow integer, `i64`, `i128`, float, vector, none), plus per-function terms:
//!   blocks and block parameters, the calling convention, calls and their arguments
//!   (passed through or not, beyond the argument registers) and results, stack slots, the
//!   stack-limit check (with and without calls), the size classes of constants and memory
//!   offsets, jump-table and exception-table entries, and two register-pressure proxies
//!   measured on the layout (values live across a call, and how far the most values live
//!   at one point exceed a few thresholds). Only what Cranelift's optimizer keeps is
//!   counted: blocks unreachable from the entry, instructions without side effects whose
//!   results nobody uses, and pure arithmetic on constants are left out, and a constant is
//!   counted where it is first used.
//! - **Weights** ([`SizeModel`]): bytes per feature, one table per target architecture
//!   (`weights.rs`), fitted against real compiles of the corpora and of the repository's
//!   fixtures by `cargo bench --bench calibrate` ([`fit`], which also reports the error). An
//!   (opcode, type class) pair the corpora never showed falls back to the opcode's own
//!   weight, an opcode never seen to the table's default.
//!
//! The estimate decides profitability only, never correctness: every group merge-similar
//! builds is sound whatever it costs, and the estimate is a pure function of the IR and
//! the target (the same function gets the same number on any thread, in any order). It is
//! calibrated with the corpus settings (`opt_level=speed`, `preserve_frame_pointers`,
//! `is_pic`); other settings change the code and make it less precise, not wrong.

pub mod fit;
mod weights;

use std::sync::OnceLock;

use cranelift_codegen::ir::{
    self, types, Function, GlobalValueData, InstructionData, Opcode, Type,
};
use cranelift_codegen::isa::CallConv;
use cranelift_entity::EntityRef;
use target_lexicon::Architecture;

/// The class of an instruction's controlling type, which decides its encoding as much as
/// the opcode does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TypeClass {
    /// No value type (a store of nothing, a jump, a call without results or arguments).
    None,
    /// An integer of at most 32 bits.
    Narrow,
    /// `i64`.
    I64,
    /// `i128`.
    I128,
    /// A scalar float.
    Float,
    /// A vector.
    Vector,
}

impl TypeClass {
    /// Every class, in table order.
    pub const ALL: [TypeClass; 6] = [
        TypeClass::None,
        TypeClass::Narrow,
        TypeClass::I64,
        TypeClass::I128,
        TypeClass::Float,
        TypeClass::Vector,
    ];

    /// The class of `ty`.
    pub fn of(ty: Type) -> TypeClass {
        if ty == types::INVALID {
            TypeClass::None
        } else if ty.is_vector() || ty.is_dynamic_vector() {
            TypeClass::Vector
        } else if ty.is_float() {
            TypeClass::Float
        } else if ty.bits() > 64 {
            TypeClass::I128
        } else if ty.bits() > 32 {
            TypeClass::I64
        } else {
            TypeClass::Narrow
        }
    }

    /// Its position in [`TypeClass::ALL`].
    pub fn index(self) -> usize {
        match self {
            TypeClass::None => 0,
            TypeClass::Narrow => 1,
            TypeClass::I64 => 2,
            TypeClass::I128 => 3,
            TypeClass::Float => 4,
            TypeClass::Vector => 5,
        }
    }

    /// Its name in the weight tables.
    pub fn name(self) -> &'static str {
        match self {
            TypeClass::None => "none",
            TypeClass::Narrow => "narrow",
            TypeClass::I64 => "i64",
            TypeClass::I128 => "i128",
            TypeClass::Float => "float",
            TypeClass::Vector => "vector",
        }
    }
}

/// Number of type classes.
pub const CLASSES: usize = TypeClass::ALL.len();

/// A per-function feature other than an opcode count.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Extra {
    /// Blocks in the layout.
    Blocks,
    /// Parameters of blocks other than the entry (moves on the edges into them).
    BlockParams,
    /// The function's own parameters.
    Params,
    /// The function's return values.
    Returns,
    /// 1 when the function uses the `tail` calling convention.
    TailConvention,
    /// Arguments of calls (direct, indirect and `try_call`), the callee pointer not
    /// counted.
    CallArgs,
    /// Arguments of calls that are the function's own parameter in the same position
    /// (often already in the right register).
    CallArgsPassedThrough,
    /// Arguments of tail calls (`return_call`, `return_call_indirect`).
    TailCallArgs,
    /// Arguments of tail calls beyond the sixth.
    TailCallArgsOver6,
    /// Arguments of tail calls beyond the eighth.
    TailCallArgsOver8,
    /// Arguments of tail calls that are the function's own parameter in the same
    /// position.
    TailCallArgsPassedThrough,
    /// Arguments of calls beyond the sixth (on the stack for System V on x86_64).
    CallArgsOver6,
    /// Arguments of calls beyond the eighth (on the stack on aarch64).
    CallArgsOver8,
    /// Results of calls.
    CallResults,
    /// Sized stack slots.
    StackSlots,
    /// 1 when the function has a stack limit and calls (tail calls included): Cranelift
    /// checks the limit in the prologue.
    StackCheckCalls,
    /// 1 when the function has a stack limit and makes no call: Cranelift checks it only
    /// if the function needs stack space.
    StackCheckLeaf,
    /// Global values loaded from memory (the stack limit's chain, `symbol_value` bases).
    LoadedGlobals,
    /// `iconst` of zero.
    ConstZero,
    /// `iconst` within a signed byte.
    ConstImm8,
    /// `iconst` within 16 bits (one `movz`/`movn` on aarch64).
    ConstImm16,
    /// `iconst` within 32 bits, signed or unsigned.
    ConstImm32,
    /// `iconst` wider than 32 bits.
    ConstWide,
    /// Non-zero 16-bit pieces of `iconst`s beyond the first (`movk`s on aarch64).
    ConstExtraChunks,
    /// Loads and stores with offset zero.
    OffsetZero,
    /// Loads and stores with a non-zero offset within a signed byte.
    OffsetImm8,
    /// Loads and stores with an offset within -256..4096 otherwise.
    OffsetImm12,
    /// Loads and stores with a larger offset.
    OffsetWide,
    /// Entries of jump tables (`br_table`), the default not counted.
    JumpTableEntries,
    /// Catch targets of exception tables (`try_call`).
    ExceptionTargets,
    /// Values live across at least one call (in layout order): they take a callee-saved
    /// register or a stack slot.
    LiveAcrossCalls,
    /// How far the most values live at one point exceed 8.
    PressureOver8,
    /// ... exceed 16.
    PressureOver16,
    /// ... exceed 24.
    PressureOver24,
}

impl Extra {
    /// Every extra feature, in table order.
    pub const ALL: [Extra; 34] = [
        Extra::Blocks,
        Extra::BlockParams,
        Extra::Params,
        Extra::Returns,
        Extra::TailConvention,
        Extra::CallArgs,
        Extra::CallArgsPassedThrough,
        Extra::TailCallArgs,
        Extra::TailCallArgsOver6,
        Extra::TailCallArgsOver8,
        Extra::TailCallArgsPassedThrough,
        Extra::CallArgsOver6,
        Extra::CallArgsOver8,
        Extra::CallResults,
        Extra::StackSlots,
        Extra::StackCheckCalls,
        Extra::StackCheckLeaf,
        Extra::LoadedGlobals,
        Extra::ConstZero,
        Extra::ConstImm8,
        Extra::ConstImm16,
        Extra::ConstImm32,
        Extra::ConstWide,
        Extra::ConstExtraChunks,
        Extra::OffsetZero,
        Extra::OffsetImm8,
        Extra::OffsetImm12,
        Extra::OffsetWide,
        Extra::JumpTableEntries,
        Extra::ExceptionTargets,
        Extra::LiveAcrossCalls,
        Extra::PressureOver8,
        Extra::PressureOver16,
        Extra::PressureOver24,
    ];

    /// Its position in [`Extra::ALL`].
    pub fn index(self) -> usize {
        match self {
            Extra::Blocks => 0,
            Extra::BlockParams => 1,
            Extra::Params => 2,
            Extra::Returns => 3,
            Extra::TailConvention => 4,
            Extra::CallArgs => 5,
            Extra::CallArgsPassedThrough => 6,
            Extra::TailCallArgs => 7,
            Extra::TailCallArgsOver6 => 8,
            Extra::TailCallArgsOver8 => 9,
            Extra::TailCallArgsPassedThrough => 10,
            Extra::CallArgsOver6 => 11,
            Extra::CallArgsOver8 => 12,
            Extra::CallResults => 13,
            Extra::StackSlots => 14,
            Extra::StackCheckCalls => 15,
            Extra::StackCheckLeaf => 16,
            Extra::LoadedGlobals => 17,
            Extra::ConstZero => 18,
            Extra::ConstImm8 => 19,
            Extra::ConstImm16 => 20,
            Extra::ConstImm32 => 21,
            Extra::ConstWide => 22,
            Extra::ConstExtraChunks => 23,
            Extra::OffsetZero => 24,
            Extra::OffsetImm8 => 25,
            Extra::OffsetImm12 => 26,
            Extra::OffsetWide => 27,
            Extra::JumpTableEntries => 28,
            Extra::ExceptionTargets => 29,
            Extra::LiveAcrossCalls => 30,
            Extra::PressureOver8 => 31,
            Extra::PressureOver16 => 32,
            Extra::PressureOver24 => 33,
        }
    }
}

/// Number of extra features.
pub const EXTRAS: usize = Extra::ALL.len();

/// One feature of a function.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// Present once in every function (its frame, prologue and return).
    Intercept,
    /// A per-function term.
    Extra(Extra),
    /// An instruction with this opcode and controlling type class.
    Op(Opcode, TypeClass),
}

/// Call `visit` with each feature of `func` and how many times it occurs. Features that
/// do not occur may or may not be visited (with 0); the same feature may be visited more
/// than once, the counts adding up.
pub fn visit_features(func: &Function, visit: &mut impl FnMut(Feature, f64)) {
    use Extra as E;
    visit(Feature::Intercept, 1.0);
    let dfg = &func.dfg;
    let mut extra = [0.0f64; EXTRAS];
    let mut add = |e: Extra, n: f64| extra[e.index()] += n;

    add(E::Params, func.signature.params.len() as f64);
    add(E::Returns, func.signature.returns.len() as f64);
    add(E::StackSlots, func.sized_stack_slots.len() as f64);
    add(
        E::TailConvention,
        f64::from(u8::from(func.signature.call_conv == CallConv::Tail)),
    );
    let loaded = func
        .global_values
        .values()
        .filter(|gv| matches!(gv, GlobalValueData::Load { .. }))
        .count();
    add(E::LoadedGlobals, loaded as f64);

    let mut scratch = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let Scratch {
        def_pos,
        last_use,
        calls_before,
        delta,
        reachable,
        stack,
        used,
        live_inst,
        constant,
        operands,
    } = &mut scratch;
    let values = dfg.num_values();

    // What Cranelift's optimizer removes is not counted: blocks unreachable from the entry,
    // instructions without side effects whose results nobody uses (found walking the
    // layout backwards, so that chains of them go at once), and pure arithmetic on
    // constants, which folds into one constant.
    reachable.clear();
    reachable.resize(dfg.num_blocks(), false);
    stack.clear();
    if let Some(entry) = func.layout.entry_block() {
        reachable[entry.index()] = true;
        stack.push(entry);
    }
    while let Some(block) = stack.pop() {
        for succ in func.block_successors(block) {
            if !reachable[succ.index()] {
                reachable[succ.index()] = true;
                stack.push(succ);
            }
        }
    }
    used.clear();
    used.resize(values, false);
    live_inst.clear();
    live_inst.resize(dfg.num_insts(), false);
    let mut last = func.layout.last_block();
    while let Some(block) = last {
        last = func.layout.prev_block(block);
        if !reachable[block.index()] {
            continue;
        }
        for inst in func.layout.block_insts(block).rev() {
            let live = dfg.inst_results(inst).iter().any(|r| used[r.index()])
                || has_side_effect(func, inst);
            live_inst[inst.index()] = live;
            if !live {
                continue;
            }
            // Only terminators have block arguments and exception contexts.
            if dfg.insts[inst].opcode().is_terminator() {
                for v in dfg.inst_values(inst) {
                    used[dfg.resolve_aliases(v).index()] = true;
                }
            } else {
                for &v in dfg.inst_args(inst) {
                    used[dfg.resolve_aliases(v).index()] = true;
                }
            }
        }
    }

    // Positions in layout order, for the liveness proxies: a block's parameters are
    // defined at the block's position, each instruction at its own, a constant where it
    // is first used (Cranelift materializes constants near their uses).
    def_pos.clear();
    def_pos.resize(values, u32::MAX);
    last_use.clear();
    last_use.resize(values, 0);
    calls_before.clear();
    // Per value: 0 not a constant, 1 a constant not yet materialized, 2 materialized.
    constant.clear();
    constant.resize(values, 0);
    let mut pos: u32 = 0;
    let mut calls: u32 = 0;
    let mut any_call = false;
    let entry = func.layout.entry_block();
    for block in func.layout.blocks() {
        if !reachable[block.index()] {
            continue;
        }
        add(E::Blocks, 1.0);
        let params = dfg.block_params(block);
        if Some(block) != entry {
            add(E::BlockParams, params.len() as f64);
        }
        for &p in params {
            def_pos[p.index()] = pos;
        }
        calls_before.push(calls);
        pos += 1;
        for inst in func.layout.block_insts(block) {
            if !live_inst[inst.index()] {
                continue;
            }
            let data = &dfg.insts[inst];
            let opcode = data.opcode();
            let args = dfg.inst_args(inst);
            let results = dfg.inst_results(inst);
            // The values it uses, aliases resolved; only terminators have block arguments
            // and exception contexts.
            operands.clear();
            if opcode.is_terminator() {
                operands.extend(dfg.inst_values(inst).map(|v| dfg.resolve_aliases(v)));
            } else {
                operands.extend(args.iter().map(|&v| dfg.resolve_aliases(v)));
            }
            let folds = opcode == Opcode::Iconst
                || (!operands.is_empty()
                    && operands.iter().all(|a| constant[a.index()] != 0)
                    && is_pure(func, inst));
            if folds {
                constant[results[0].index()] = 1;
                continue;
            }
            for &a in operands.iter() {
                // Constants used for the first time are materialized here.
                if constant[a.index()] == 1 {
                    constant[a.index()] = 2;
                    let ty = dfg.value_type(a);
                    visit(Feature::Op(Opcode::Iconst, TypeClass::of(ty)), 1.0);
                    constant_extras(func, a, &mut add);
                    def_pos[a.index()] = pos;
                }
                last_use[a.index()] = last_use[a.index()].max(pos);
            }
            visit(
                Feature::Op(opcode, TypeClass::of(controlling_type(func, inst))),
                1.0,
            );
            instruction_extras(func, inst, data, &mut add);
            for &r in results {
                def_pos[r.index()] = pos;
            }
            calls_before.push(calls);
            if opcode.is_call() {
                any_call = true;
                if !opcode.is_return() {
                    calls += 1;
                }
            }
            pos += 1;
        }
    }
    calls_before.push(calls);
    if func.stack_limit.is_some() {
        let check = if any_call {
            E::StackCheckCalls
        } else {
            E::StackCheckLeaf
        };
        add(check, 1.0);
    }

    // Values live across a call, and the most values live at once.
    delta.clear();
    delta.resize(pos as usize + 2, 0);
    let mut across = 0u32;
    for (def, last) in def_pos.iter().zip(last_use.iter()) {
        if *def == u32::MAX || *last <= *def {
            continue;
        }
        // Calls strictly after the definition and strictly before the last use.
        if calls_before[*last as usize] > calls_before[*def as usize + 1] {
            across += 1;
        }
        delta[*def as usize] += 1;
        delta[*last as usize + 1] -= 1;
    }
    let mut live = 0i32;
    let mut most = 0i32;
    for d in delta.iter() {
        live += d;
        most = most.max(live);
    }
    SCRATCH.with(|s| *s.borrow_mut() = scratch);
    add(E::LiveAcrossCalls, f64::from(across));
    let most = f64::from(most);
    add(E::PressureOver8, (most - 8.0).max(0.0));
    add(E::PressureOver16, (most - 16.0).max(0.0));
    add(E::PressureOver24, (most - 24.0).max(0.0));

    for e in Extra::ALL {
        let n = extra[e.index()];
        if n != 0.0 {
            visit(Feature::Extra(e), n);
        }
    }
}

/// Buffers of [`visit_features`], kept per thread between calls.
#[derive(Default)]
struct Scratch {
    def_pos: Vec<u32>,
    last_use: Vec<u32>,
    calls_before: Vec<u32>,
    delta: Vec<i32>,
    reachable: Vec<bool>,
    stack: Vec<ir::Block>,
    used: Vec<bool>,
    live_inst: Vec<bool>,
    constant: Vec<u8>,
    operands: Vec<ir::Value>,
}

/// Whether `inst` must stay though its results are unused (Cranelift's
/// `has_side_effect`): calls, branches, traps, stores, other side effects, and loads that
/// may trap.
fn has_side_effect(func: &Function, inst: ir::Inst) -> bool {
    let data = &func.dfg.insts[inst];
    let op = data.opcode();
    trivially_has_side_effects(op)
        || (op.can_load()
            && match *data {
                InstructionData::Load { flags, .. } => !func.dfg.mem_flags[flags].notrap(),
                _ => true,
            })
}

fn trivially_has_side_effects(op: Opcode) -> bool {
    op.is_call()
        || op.is_branch()
        || op.is_terminator()
        || op.is_return()
        || op.can_trap()
        || op.other_side_effects()
        || op.can_store()
}

/// Whether `inst` is pure arithmetic Cranelift's optimizer folds when its arguments are
/// constants: one result, no memory, no side effects.
fn is_pure(func: &Function, inst: ir::Inst) -> bool {
    let op = func.dfg.insts[inst].opcode();
    func.dfg.inst_results(inst).len() == 1 && !op.can_load() && !trivially_has_side_effects(op)
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// The type that decides how `inst` is encoded: its controlling type variable when it is
/// polymorphic, else its first result's type, else its first argument's, else none.
fn controlling_type(func: &Function, inst: ir::Inst) -> Type {
    let dfg = &func.dfg;
    let data = &dfg.insts[inst];
    let constraints = data.opcode().constraints();
    if constraints.is_polymorphic() && constraints.requires_typevar_operand() {
        if let Some(v) = data.typevar_operand(&dfg.value_lists) {
            return dfg.value_type(v);
        }
    }
    if let Some(&r) = dfg.inst_results(inst).first() {
        return dfg.value_type(r);
    }
    match dfg.inst_args(inst).first() {
        Some(&a) => dfg.value_type(a),
        None => types::INVALID,
    }
}

/// The size class of a constant materialized in a register: from its `iconst`, or (a
/// value folded from constants) as a 32-bit immediate.
fn constant_extras(func: &Function, value: ir::Value, add: &mut impl FnMut(Extra, f64)) {
    use Extra as E;
    let dfg = &func.dfg;
    let imm = match dfg.value_def(value) {
        ir::ValueDef::Result(inst, _) => match dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            } => Some(imm),
            _ => None,
        },
        _ => None,
    };
    let Some(imm) = imm else {
        add(E::ConstImm32, 1.0);
        return;
    };
    let bits = dfg.value_type(value).bits().min(64);
    let raw = imm.bits();
    // The constant as its type holds it, sign-extended.
    let value = if bits >= 64 {
        raw
    } else {
        let shift = 64 - bits;
        (raw << shift) >> shift
    };
    let unsigned = if bits >= 64 {
        raw as u64
    } else {
        (raw as u64) & ((1u64 << bits) - 1)
    };
    let class = if value == 0 {
        E::ConstZero
    } else if (-128..=127).contains(&value) {
        E::ConstImm8
    } else if unsigned <= 0xffff || (-0x1_0000..0).contains(&value) {
        E::ConstImm16
    } else if i32::try_from(value).is_ok() || unsigned <= u64::from(u32::MAX) {
        E::ConstImm32
    } else {
        E::ConstWide
    };
    add(class, 1.0);
    let chunks = (0..4)
        .filter(|i| (unsigned >> (16 * i)) & 0xffff != 0)
        .count();
    add(E::ConstExtraChunks, chunks.saturating_sub(1) as f64);
}

/// The extra features one instruction adds.
fn instruction_extras(
    func: &Function,
    inst: ir::Inst,
    data: &InstructionData,
    add: &mut impl FnMut(Extra, f64),
) {
    use Extra as E;
    let dfg = &func.dfg;
    let opcode = data.opcode();
    if opcode.is_call() {
        let mut args = dfg.inst_args(inst);
        if matches!(
            opcode,
            Opcode::CallIndirect | Opcode::ReturnCallIndirect | Opcode::TryCallIndirect
        ) {
            args = args.get(1..).unwrap_or(&[]);
        }
        let params = func
            .layout
            .entry_block()
            .map_or(&[][..], |b| dfg.block_params(b));
        let passed = args
            .iter()
            .zip(params)
            .filter(|(a, p)| dfg.resolve_aliases(**a) == **p)
            .count() as f64;
        let n = args.len();
        if opcode.is_return() {
            add(E::TailCallArgs, n as f64);
            add(E::TailCallArgsOver6, n.saturating_sub(6) as f64);
            add(E::TailCallArgsOver8, n.saturating_sub(8) as f64);
            add(E::TailCallArgsPassedThrough, passed);
        } else {
            add(E::CallArgs, n as f64);
            add(E::CallArgsOver6, n.saturating_sub(6) as f64);
            add(E::CallArgsOver8, n.saturating_sub(8) as f64);
            add(E::CallArgsPassedThrough, passed);
        }
        let results = match dfg.call_signature(inst) {
            Some(sig) => dfg.signatures[sig].returns.len(),
            None => dfg.inst_results(inst).len(),
        };
        add(E::CallResults, results as f64);
    }
    match *data {
        InstructionData::Load { offset, .. } | InstructionData::Store { offset, .. } => {
            let offset = i64::from(i32::from(offset));
            let class = if offset == 0 {
                E::OffsetZero
            } else if (-128..=127).contains(&offset) {
                E::OffsetImm8
            } else if (-256..4096).contains(&offset) {
                E::OffsetImm12
            } else {
                E::OffsetWide
            };
            add(class, 1.0);
        }
        InstructionData::BranchTable { table, .. } => {
            let entries = dfg.jump_tables[table].as_slice().len();
            add(E::JumpTableEntries, entries as f64);
        }
        InstructionData::TryCall { exception, .. }
        | InstructionData::TryCallIndirect { exception, .. } => {
            let targets = dfg.exception_tables[exception].all_branches().len();
            add(E::ExceptionTargets, targets.saturating_sub(1) as f64);
        }
        _ => {}
    }
}

/// Byte weights of every feature for one target: what [`SizeModel::estimate`] sums.
#[derive(Clone, Debug)]
pub struct SizeModel {
    intercept: f64,
    extras: [f64; EXTRAS],
    /// Per opcode (indexed by `Opcode as u8`), per type class.
    ops: Vec<[f64; CLASSES]>,
}

/// A weight table as the calibration writes it (`weights.rs`).
pub struct WeightTable {
    /// Bytes every function takes.
    pub intercept: f64,
    /// Bytes per extra feature, in [`Extra::ALL`] order.
    pub extras: [f64; EXTRAS],
    /// Bytes of an instruction whose opcode the table does not list.
    pub default_op: f64,
    /// Per opcode: its weight for a class the corpora did not show, then its weight per
    /// class in [`TypeClass::ALL`] order (the first weight where that class was not seen).
    pub ops: &'static [(Opcode, f64, [f64; CLASSES])],
}

impl SizeModel {
    /// A model from its parts: bytes per function, per extra feature, per instruction
    /// of an unlisted opcode, and per listed opcode and type class.
    pub fn from_parts(
        intercept: f64,
        extras: [f64; EXTRAS],
        default_op: f64,
        ops: impl IntoIterator<Item = (Opcode, [f64; CLASSES])>,
    ) -> SizeModel {
        let mut table = vec![[default_op; CLASSES]; 256];
        for (opcode, per_class) in ops {
            table[opcode as u8 as usize] = per_class;
        }
        SizeModel {
            intercept,
            extras,
            ops: table,
        }
    }

    /// The model of a weight table.
    pub fn new(table: &WeightTable) -> SizeModel {
        SizeModel::from_parts(
            table.intercept,
            table.extras,
            table.default_op,
            table.ops.iter().map(|&(op, _, per_class)| (op, per_class)),
        )
    }

    /// The model calibrated for `arch`: aarch64's for aarch64, x86_64's for everything
    /// else (the only other backend this crate builds).
    pub fn for_architecture(arch: Architecture) -> &'static SizeModel {
        static X86_64: OnceLock<SizeModel> = OnceLock::new();
        static AARCH64: OnceLock<SizeModel> = OnceLock::new();
        match arch {
            Architecture::Aarch64(_) => AARCH64.get_or_init(|| SizeModel::new(&weights::AARCH64)),
            _ => X86_64.get_or_init(|| SizeModel::new(&weights::X86_64)),
        }
    }

    /// The weight of one feature.
    pub fn weight(&self, feature: Feature) -> f64 {
        match feature {
            Feature::Intercept => self.intercept,
            Feature::Extra(e) => self.extras[e.index()],
            Feature::Op(op, class) => self.ops[op as u8 as usize][class.index()],
        }
    }

    /// The estimated `.text` bytes of `func` once compiled, at least 1.
    pub fn estimate(&self, func: &Function) -> u64 {
        let mut total = 0.0;
        visit_features(func, &mut |feature, n| total += self.weight(feature) * n);
        total.round().max(1.0) as u64
    }
}
