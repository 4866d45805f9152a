//! Systematic single-field mutations.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee16, Ieee32, Ieee64};
use cranelift_codegen::ir::types::*;
use cranelift_codegen::ir::{
    self, AliasRegionData, ArgumentExtension, AtomicRmwOp, Block, BlockArg, ConstantData,
    ExceptionTableData, ExceptionTableItem, ExceptionTag, ExternalName, Function, GlobalValue,
    GlobalValueData, InstructionData, MemFlagsData, Opcode, StackSlotData, StackSlotKind, TrapCode,
    Type, UserExternalName, UserFuncName, Value,
};
use cranelift_codegen::isa::CallConv;

use super::{mask_to, opcode_alternatives, reachable_blocks, Rng};

// ---------------------------------------------------------------------------------------
// Systematic single-field mutations.

/// A function that differs from another in exactly one field.
pub struct Mutant {
    /// Which field: `opcode`, `iconst immediate`, `memflags endianness`, ...
    pub what: &'static str,
    pub func: Function,
    /// Safe to run in the interpreter (no dangling names, no garbage addresses).
    pub exec_safe: bool,
}

/// One change to memory flags: (kind, aligned, readonly, endianness, can_move, trap code,
/// change the alias region?).
type FlagsVariant = (
    &'static str,
    bool,
    bool,
    Option<ir::Endianness>,
    bool,
    Option<TrapCode>,
    i32,
);

fn set_opcode(data: &mut InstructionData, op: Opcode) -> bool {
    match data {
        InstructionData::Binary { opcode, .. }
        | InstructionData::Unary { opcode, .. }
        | InstructionData::Ternary { opcode, .. }
        | InstructionData::Load { opcode, .. }
        | InstructionData::Store { opcode, .. }
        | InstructionData::CondTrap { opcode, .. }
        | InstructionData::NullAry { opcode, .. } => {
            *opcode = op;
            true
        }
        _ => false,
    }
}

fn mem_flags_handle(data: &mut InstructionData) -> Option<&mut ir::MemFlags> {
    match data {
        InstructionData::Load { flags, .. }
        | InstructionData::LoadNoOffset { flags, .. }
        | InstructionData::Store { flags, .. }
        | InstructionData::StoreNoOffset { flags, .. }
        | InstructionData::AtomicRmw { flags, .. }
        | InstructionData::AtomicCas { flags, .. } => Some(flags),
        _ => None,
    }
}

/// Rebuild memory flags from their parts (the API can only add bits).
pub fn rebuild_flags(
    aligned: bool,
    readonly: bool,
    endianness: Option<ir::Endianness>,
    can_move: bool,
    trap: Option<TrapCode>,
    region: Option<ir::AliasRegion>,
) -> MemFlagsData {
    let mut f = MemFlagsData::new().with_trap_code(trap);
    if aligned {
        f.set_aligned();
    }
    if readonly {
        f.set_readonly();
    }
    if let Some(e) = endianness {
        f.set_endianness(e);
    }
    if can_move {
        f.set_can_move();
    }
    f.with_alias_region(region)
}

fn other_trap_code(rng: &mut Rng, code: TrapCode) -> TrapCode {
    let choices = [
        TrapCode::unwrap_user(1),
        TrapCode::unwrap_user(2),
        TrapCode::unwrap_user(9),
        TrapCode::INTEGER_OVERFLOW,
        TrapCode::HEAP_OUT_OF_BOUNDS,
        TrapCode::INTEGER_DIVISION_BY_ZERO,
    ];
    loop {
        let c = rng.pick(&choices);
        if c != code {
            return c;
        }
    }
}

/// The values of type `ty` that dominate `inst` for certain: the entry block's
/// parameters, the parameters of `inst`'s block and the results of earlier instructions
/// in that block.
fn available(func: &Function, inst: ir::Inst) -> Vec<Value> {
    let block = func.layout.inst_block(inst).unwrap();
    let entry = func.layout.entry_block().unwrap();
    let mut out: Vec<Value> = func.dfg.block_params(entry).to_vec();
    if block != entry {
        out.extend_from_slice(func.dfg.block_params(block));
    }
    for i in func.layout.block_insts(block) {
        if i == inst {
            break;
        }
        out.extend_from_slice(func.dfg.inst_results(i));
    }
    out
}

fn is_stack_addr(func: &Function, v: Value) -> bool {
    match func.dfg.value_def(v) {
        ir::ValueDef::Result(i, _) => func.dfg.insts[i].opcode() == Opcode::StackAddr,
        _ => false,
    }
}

fn flip_float(bits: u64, width: u32, rng: &mut Rng) -> (&'static str, u64) {
    let sign = 1u64 << (width - 1);
    let mant_bits = match width {
        16 => 10,
        32 => 23,
        _ => 52,
    };
    let exp_mask = ((1u64 << (width - 1 - mant_bits)) - 1) << mant_bits;
    let mant_mask = (1u64 << mant_bits) - 1;
    let is_nan = bits & exp_mask == exp_mask && bits & mant_mask != 0;
    let names = match width {
        16 => ["f16 zero sign (0.0 vs -0.0)", "f16 NaN payload", "f16 bits"],
        32 => ["f32 zero sign (0.0 vs -0.0)", "f32 NaN payload", "f32 bits"],
        _ => ["f64 zero sign (0.0 vs -0.0)", "f64 NaN payload", "f64 bits"],
    };
    if bits & !sign == 0 {
        (names[0], bits ^ sign)
    } else if is_nan {
        // Another payload, still a NaN.
        let mut nb = bits ^ (1 + rng.below(3) as u64);
        if nb & mant_mask == 0 {
            nb |= 4;
        }
        (names[1], nb)
    } else {
        (names[2], bits ^ (1u64 << rng.below(mant_bits as usize)))
    }
}

/// Every single-field mutation of the reachable part of `func` this harness knows, with at
/// most a couple of random choices per field. Mutants may be invalid; callers filter them
/// with the verifier.
pub fn mutants(func: &Function, seed: u64) -> Vec<Mutant> {
    let mut rng = Rng::new(seed);
    let mut out: Vec<Mutant> = Vec::new();
    let reach = reachable_blocks(func);
    let layout_blocks: Vec<Block> = func.layout.blocks().filter(|b| reach.contains(b)).collect();
    let own_name = func.name.to_string();
    // A single change can turn bounded recursion into unbounded recursion, which the
    // interpreter follows on the native stack: never run mutants of recursive functions.
    let recursive = func
        .dfg
        .ext_funcs
        .values()
        .any(|e| e.name.display(Some(&func.params)).to_string() == own_name);
    let mut add = |what: &'static str, exec_safe: bool, g: Function| {
        out.push(Mutant {
            what,
            func: g,
            exec_safe: exec_safe && !recursive,
        })
    };

    // Use counts (over the whole function), for type mutations of dead results.
    let mut uses: HashMap<Value, usize> = HashMap::new();
    for b in func.layout.blocks() {
        for i in func.layout.block_insts(b) {
            for v in func.dfg.inst_values(i) {
                *uses.entry(func.dfg.resolve_aliases(v)).or_default() += 1;
            }
        }
    }

    for &block in &layout_blocks {
        for inst in func.layout.block_insts(block) {
            let data = func.dfg.insts[inst];
            let op = data.opcode();
            let ctrl = func.dfg.ctrl_typevar(inst);

            // Opcode.
            let alts = opcode_alternatives(op, ctrl);
            if !alts.is_empty() {
                let new = rng.pick(&alts);
                let mut g = func.clone();
                if set_opcode(&mut g.dfg.insts[inst], new) {
                    // A store of another width may leave its slot.
                    add("opcode", !matches!(data, InstructionData::Store { .. }), g);
                }
            }

            // Immediates and other fields of the format.
            match data {
                InstructionData::UnaryImm { imm, .. } => {
                    let ty = func.dfg.value_type(func.dfg.first_result(inst));
                    let bit = rng.below(ty.bits() as usize);
                    let nv = mask_to(ty, imm.bits() ^ (1i64 << bit));
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::UnaryImm {
                        opcode: op,
                        imm: nv.into(),
                    };
                    add("iconst immediate", true, g);
                }
                InstructionData::UnaryIeee16 { imm, .. } => {
                    let (what, nb) = flip_float(imm.bits().into(), 16, &mut rng);
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::UnaryIeee16 {
                        opcode: op,
                        imm: Ieee16::with_bits(nb as u16),
                    };
                    add(what, false, g);
                }
                InstructionData::UnaryIeee32 { imm, .. } => {
                    let (what, nb) = flip_float(imm.bits().into(), 32, &mut rng);
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::UnaryIeee32 {
                        opcode: op,
                        imm: Ieee32::with_bits(nb as u32),
                    };
                    add(what, true, g);
                }
                InstructionData::UnaryIeee64 { imm, .. } => {
                    let (what, nb) = flip_float(imm.bits(), 64, &mut rng);
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::UnaryIeee64 {
                        opcode: op,
                        imm: Ieee64::with_bits(nb),
                    };
                    add(what, true, g);
                }
                InstructionData::UnaryConst {
                    constant_handle, ..
                } => {
                    let mut bytes = func.dfg.constants.get(constant_handle).as_slice().to_vec();
                    let k = rng.below(bytes.len());
                    bytes[k] ^= 1 << rng.below(8);
                    let mut g = func.clone();
                    let c = g.dfg.constants.insert(ConstantData::from(bytes));
                    g.dfg.insts[inst] = InstructionData::UnaryConst {
                        opcode: op,
                        constant_handle: c,
                    };
                    add("vconst bytes", true, g);
                }
                InstructionData::Shuffle { args, imm, .. } => {
                    let mut mask = func.dfg.immediates[imm].as_slice().to_vec();
                    let k = rng.below(mask.len());
                    mask[k] = (mask[k] + 1 + rng.below(30) as u8) % 32;
                    let mut g = func.clone();
                    let new = g.dfg.immediates.push(ConstantData::from(mask));
                    g.dfg.insts[inst] = InstructionData::Shuffle {
                        opcode: op,
                        args,
                        imm: new,
                    };
                    add("shuffle mask", true, g);
                }
                InstructionData::BinaryImm8 { arg, imm, .. } => {
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::BinaryImm8 {
                        opcode: op,
                        arg,
                        imm: imm ^ 1,
                    };
                    add("lane immediate", true, g);
                }
                InstructionData::TernaryImm8 { args, imm, .. } => {
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::TernaryImm8 {
                        opcode: op,
                        args,
                        imm: imm ^ 1,
                    };
                    add("lane immediate", true, g);
                }
                InstructionData::IntCompare { args, cond, .. } => {
                    let mut cc = cond;
                    while cc == cond {
                        cc = rng.pick(IntCC::all());
                    }
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::IntCompare {
                        opcode: op,
                        args,
                        cond: cc,
                    };
                    add("icmp condition code", true, g);
                }
                InstructionData::FloatCompare { args, cond, .. } => {
                    let mut cc = cond;
                    while cc == cond {
                        cc = rng.pick(FloatCC::all());
                    }
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::FloatCompare {
                        opcode: op,
                        args,
                        cond: cc,
                    };
                    add("fcmp condition code", true, g);
                }
                InstructionData::Load { offset, .. } | InstructionData::Store { offset, .. } => {
                    let mut g = func.clone();
                    let delta = rng.pick(&[1i32, -1, 8]);
                    match &mut g.dfg.insts[inst] {
                        InstructionData::Load { offset: o, .. }
                        | InstructionData::Store { offset: o, .. } => {
                            *o = (i32::from(offset) + delta).into();
                        }
                        _ => unreachable!(),
                    }
                    add("memory offset", false, g);
                }
                InstructionData::StackAddr {
                    stack_slot, offset, ..
                } => {
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::StackAddr {
                        opcode: op,
                        stack_slot,
                        offset: (i32::from(offset) ^ 1).into(),
                    };
                    add("stack_addr offset", false, g);
                    // Another slot of another size.
                    let size = func.sized_stack_slots[stack_slot].size;
                    let other = func
                        .sized_stack_slots
                        .iter()
                        .find(|(_, d)| d.size != size)
                        .map(|(s, _)| s);
                    if let Some(other) = other {
                        let mut g = func.clone();
                        g.dfg.insts[inst] = InstructionData::StackAddr {
                            opcode: op,
                            stack_slot: other,
                            offset,
                        };
                        add("stack slot operand", false, g);
                    }
                }
                InstructionData::AtomicRmw {
                    args,
                    flags,
                    op: rmw,
                    ..
                } => {
                    let mut nop = rmw;
                    while nop == rmw {
                        nop = rng.pick(AtomicRmwOp::all());
                    }
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::AtomicRmw {
                        opcode: op,
                        args,
                        flags,
                        op: nop,
                    };
                    add("atomic_rmw operation", true, g);
                }
                InstructionData::Trap { code, .. } => {
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::Trap {
                        opcode: op,
                        code: other_trap_code(&mut rng, code),
                    };
                    add("trap code", true, g);
                }
                InstructionData::CondTrap { arg, code, .. } => {
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::CondTrap {
                        opcode: op,
                        arg,
                        code: other_trap_code(&mut rng, code),
                    };
                    add("trap code", true, g);
                }
                InstructionData::IntAddTrap { args, code, .. } => {
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::IntAddTrap {
                        opcode: op,
                        args,
                        code: other_trap_code(&mut rng, code),
                    };
                    add("trap code", true, g);
                }
                InstructionData::ExceptionHandlerAddress { block, imm, .. } => {
                    let mut g = func.clone();
                    g.dfg.insts[inst] = InstructionData::ExceptionHandlerAddress {
                        opcode: op,
                        block,
                        imm: (imm.bits() ^ 1).into(),
                    };
                    add("exception handler index", false, g);
                }
                _ => {}
            }

            // Memory flags, one part at a time.
            if let Some(&mut h) = mem_flags_handle(&mut func.dfg.insts[inst].clone()) {
                let d = func.dfg.mem_flags[h];
                let (al, ro, en, cm, tc, rg) = (
                    d.aligned(),
                    d.readonly(),
                    d.explicit_endianness(),
                    d.can_move(),
                    d.trap_code(),
                    d.alias_region(),
                );
                // Big vs little or native changes what a little-endian machine reads;
                // explicit little vs native only what a big-endian one would.
                let flip_endian = match en {
                    Some(ir::Endianness::Big) => {
                        if rng.chance(50) {
                            None
                        } else {
                            Some(ir::Endianness::Little)
                        }
                    }
                    _ => Some(ir::Endianness::Big),
                };
                let explicit_endian = match en {
                    None => Some(ir::Endianness::Little),
                    Some(ir::Endianness::Little) => None,
                    Some(ir::Endianness::Big) => Some(ir::Endianness::Big),
                };
                let new_tc = match tc {
                    None => Some(TrapCode::HEAP_OUT_OF_BOUNDS),
                    Some(c) => {
                        if rng.chance(50) {
                            None
                        } else {
                            Some(other_trap_code(&mut rng, c))
                        }
                    }
                };
                let variants: [FlagsVariant; 7] = [
                    ("memflags aligned", !al, ro, en, cm, tc, 0),
                    ("memflags readonly", al, !ro, en, cm, tc, 0),
                    ("memflags endianness", al, ro, flip_endian, cm, tc, 0),
                    (
                        "memflags explicit little endian",
                        al,
                        ro,
                        explicit_endian,
                        cm,
                        tc,
                        0,
                    ),
                    ("memflags can_move", al, ro, en, !cm, tc, 0),
                    ("memflags trap code", al, ro, en, cm, new_tc, 0),
                    ("memflags alias region", al, ro, en, cm, tc, 1),
                ];
                for (what, al, ro, en2, cm, tc, region_change) in variants {
                    if what == "memflags explicit little endian" && en2 == en {
                        continue;
                    }
                    let en = en2;
                    let mut g = func.clone();
                    let region = if region_change == 0 {
                        rg
                    } else {
                        match rg {
                            Some(r) if rng.chance(50) => {
                                let id = g.dfg.alias_regions[r].user_id + 10;
                                Some(g.dfg.alias_regions.insert(AliasRegionData {
                                    user_id: id,
                                    description: "other".into(),
                                }))
                            }
                            Some(_) => None,
                            None => Some(g.dfg.alias_regions.insert(AliasRegionData {
                                user_id: 42,
                                description: "new".into(),
                            })),
                        }
                    };
                    let nd = rebuild_flags(al, ro, en, cm, tc, region);
                    let nh = g.dfg.mem_flags.insert_unchecked(nd);
                    *mem_flags_handle(&mut g.dfg.insts[inst]).unwrap() = nh;
                    // The interpreter only runs little-endian vector bitcasts, and panics
                    // when a `notrap` access traps (which `aligned` may make it do).
                    add(what, op != Opcode::Bitcast && what != "memflags aligned", g);
                }
            }

            // One operand (argument or block argument) replaced by another value of its type.
            let vals: Vec<Value> = func.dfg.inst_values(inst).collect();
            let nargs = func.dfg.inst_args(inst).len();
            let avail = available(func, inst);
            let is_memory = data.memflags().is_some()
                || matches!(op, Opcode::CallIndirect | Opcode::TryCallIndirect);
            for (pos, &v) in vals.iter().enumerate() {
                let ty = func.dfg.value_type(v);
                let cands: Vec<Value> = avail
                    .iter()
                    .copied()
                    .filter(|&w| w != v && func.dfg.value_type(w) == ty)
                    .collect();
                if cands.is_empty() {
                    continue;
                }
                let w = rng.pick(&cands);
                let mut g = func.clone();
                let mut k = 0;
                g.dfg.map_inst_values(inst, |x| {
                    let r = if k == pos { w } else { x };
                    k += 1;
                    r
                });
                let safe = !is_memory && !is_stack_addr(func, w);
                let what = if pos < nargs {
                    "operand"
                } else {
                    "block argument"
                };
                add(what, safe, g);
            }

            // Result type of an instruction whose results nobody uses.
            let results = func.dfg.inst_results(inst);
            if results.len() == 1
                && !uses.contains_key(&results[0])
                && op.constraints().is_polymorphic()
                && !op.constraints().requires_typevar_operand()
            {
                let ty = func.dfg.value_type(results[0]);
                let alts: Vec<Type> = [I8, I16, I32, I64, F32, F64]
                    .into_iter()
                    .filter(|&t| t != ty && t.is_int() == ty.is_int())
                    .collect();
                if !alts.is_empty() {
                    let nt = rng.pick(&alts);
                    let mut g = func.clone();
                    if let InstructionData::UnaryImm { imm, .. } = data {
                        g.dfg.insts[inst] = InstructionData::UnaryImm {
                            opcode: op,
                            imm: mask_to(nt, imm.bits()).into(),
                        };
                    }
                    g.dfg.clear_results(inst);
                    g.dfg.make_inst_results(inst, nt);
                    add("result type", false, g);
                }
            }

            // The callee or function whose address is taken.
            let fref = match data {
                InstructionData::Call { func_ref, .. }
                | InstructionData::FuncAddr { func_ref, .. }
                | InstructionData::TryCall { func_ref, .. } => Some(func_ref),
                _ => None,
            };
            if let Some(fref) = fref {
                let ext = func.dfg.ext_funcs[fref].clone();
                let shown = ext.name.display(Some(&func.params)).to_string();
                // Another name.
                let mut g = func.clone();
                let (new_name, safe) = match &ext.name {
                    ExternalName::TestCase(_) if shown == "%c0" => {
                        (ExternalName::testcase("c1"), true)
                    }
                    ExternalName::TestCase(_) if shown == "%c1" => {
                        (ExternalName::testcase("c0"), true)
                    }
                    ExternalName::TestCase(_) => (ExternalName::testcase("elsewhere"), false),
                    ExternalName::User(r) => {
                        let u = func.params.user_named_funcs()[*r].clone();
                        let nr = g.declare_imported_user_function(UserExternalName::new(
                            u.namespace,
                            u.index + 100,
                        ));
                        (ExternalName::user(nr), false)
                    }
                    ExternalName::LibCall(_) => {
                        (ExternalName::LibCall(ir::LibCall::FloorF32), false)
                    }
                    ExternalName::KnownSymbol(_) => (ExternalName::testcase("elsewhere"), false),
                };
                let what = if shown == own_name {
                    "callee name (a call to itself)"
                } else if op == Opcode::FuncAddr {
                    "func_addr name"
                } else {
                    "callee name"
                };
                g.dfg.ext_funcs[fref].name = new_name;
                add(what, safe, g);
                // A call to another function becomes a call to itself, when the
                // signatures allow.
                if shown != own_name
                    && op != Opcode::FuncAddr
                    && func.dfg.signatures[ext.signature] == func.signature
                {
                    let mut g = func.clone();
                    g.dfg.ext_funcs[fref].name = ExternalName::TestCase(match &func.name {
                        UserFuncName::Testcase(t) => t.clone(),
                        UserFuncName::User(_) => unreachable!(),
                    });
                    add("callee name (becomes a call to itself)", false, g);
                }
                let mut g = func.clone();
                g.dfg.ext_funcs[fref].colocated = !ext.colocated;
                add("callee colocated", true, g);
                let mut g = func.clone();
                g.dfg.ext_funcs[fref].patchable = !ext.patchable;
                add("callee patchable", true, g);
                // The callee's signature: its calling convention.
                let mut g = func.clone();
                let s = &mut g.dfg.signatures[ext.signature];
                s.call_conv = if s.call_conv == CallConv::SystemV {
                    CallConv::Tail
                } else {
                    CallConv::SystemV
                };
                add("callee signature", true, g);
            }

            // Exception tables: a tag.
            if let Some(et) = data.exception_table() {
                let items: Vec<ExceptionTableItem> =
                    func.dfg.exception_tables[et].items().collect();
                if let Some(pos) = items
                    .iter()
                    .position(|i| matches!(i, ExceptionTableItem::Tag(..)))
                {
                    let mut g = func.clone();
                    let sig = func.dfg.exception_tables[et].signature();
                    let normal = *func.dfg.exception_tables[et].normal_return();
                    let new_items: Vec<ExceptionTableItem> = items
                        .iter()
                        .enumerate()
                        .map(|(k, it)| match (k == pos, it) {
                            (true, ExceptionTableItem::Tag(t, c)) => ExceptionTableItem::Tag(
                                ExceptionTag::with_number(t.as_u32() + 5).unwrap(),
                                *c,
                            ),
                            _ => it.clone(),
                        })
                        .collect();
                    g.dfg.exception_tables[et] = ExceptionTableData::new(sig, normal, new_items);
                    add("exception tag", false, g);
                }
            }

            // A branch target: another block with the same parameter types and a
            // different number of instructions (so the change is never a renaming).
            let dests: Vec<ir::BlockCall> = data
                .branch_destination(&func.dfg.jump_tables, &func.dfg.exception_tables)
                .to_vec();
            if !dests.is_empty() {
                let k = rng.below(dests.len());
                let old = dests[k].block(&func.dfg.value_lists);
                let ptys: Vec<Type> = func
                    .dfg
                    .block_params(old)
                    .iter()
                    .map(|&v| func.dfg.value_type(v))
                    .collect();
                let n_old = func.layout.block_insts(old).count();
                let entry = func.layout.entry_block().unwrap();
                let cands: Vec<Block> = func
                    .layout
                    .blocks()
                    .filter(|&b| {
                        b != old
                            && b != entry
                            && func.layout.block_insts(b).count() != n_old
                            && func
                                .dfg
                                .block_params(b)
                                .iter()
                                .map(|&v| func.dfg.value_type(v))
                                .eq(ptys.iter().copied())
                    })
                    .collect();
                if !cands.is_empty() {
                    let nb = rng.pick(&cands);
                    let mut g = func.clone();
                    let dfg = &mut g.dfg;
                    let dests = dfg.insts[inst]
                        .branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables);
                    dests[k].set_block(nb, &mut dfg.value_lists);
                    add("branch target", false, g);
                }
            }
        }
    }

    // User stack maps: one more entry at a safepoint that has some.
    for &block in &layout_blocks {
        for inst in func.layout.block_insts(block) {
            if let Some(entries) = func.dfg.user_stack_map_entries(inst) {
                if let Some(e) = entries.first() {
                    let mut g = func.clone();
                    let extra = ir::UserStackMapEntry {
                        ty: e.ty,
                        slot: e.slot,
                        offset: e.offset + 8,
                    };
                    g.dfg.append_user_stack_map_entry(inst, extra);
                    add("user stack map entry", false, g);
                }
            }
        }
    }

    // Exception payload indices in handler arguments.
    for &block in &layout_blocks {
        for inst in func.layout.block_insts(block) {
            let data = func.dfg.insts[inst];
            if data.exception_table().is_none() {
                continue;
            }
            let mut g = func.clone();
            let dfg = &mut g.dfg;
            let mut changed = false;
            for call in dfg.insts[inst]
                .branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
            {
                call.update_args(&mut dfg.value_lists, |arg| match arg {
                    BlockArg::TryCallExn(n) if !changed => {
                        changed = true;
                        BlockArg::TryCallExn(n ^ 1)
                    }
                    other => other,
                });
            }
            if changed {
                add("exception payload index", false, g);
            }
        }
    }

    // Global values reached from reachable instructions or the stack limit.
    let mut gvs: Vec<GlobalValue> = Vec::new();
    for &b in &layout_blocks {
        for i in func.layout.block_insts(b) {
            if let InstructionData::UnaryGlobalValue { global_value, .. } = func.dfg.insts[i] {
                gvs.push(global_value);
            }
        }
    }
    if let Some(gv) = func.stack_limit {
        let mut g = func.clone();
        g.stack_limit = None;
        add("stack_limit", false, g);
        let mut cur = Some(gv);
        while let Some(gv) = cur {
            gvs.push(gv);
            cur = match func.global_values[gv] {
                GlobalValueData::Load { base, .. } | GlobalValueData::IAddImm { base, .. } => {
                    Some(base)
                }
                _ => None,
            };
        }
    }
    gvs.sort();
    gvs.dedup();
    for gv in gvs {
        match func.global_values[gv].clone() {
            GlobalValueData::Symbol {
                name,
                offset,
                colocated,
                tls,
            } => {
                let mut g = func.clone();
                g.global_values[gv] = GlobalValueData::Symbol {
                    name: ExternalName::testcase("data9"),
                    offset,
                    colocated,
                    tls,
                };
                add("symbol name", false, g);
                let mut g = func.clone();
                g.global_values[gv] = GlobalValueData::Symbol {
                    name: name.clone(),
                    offset: (offset.bits() + 4).into(),
                    colocated,
                    tls,
                };
                add("symbol offset", false, g);
                let mut g = func.clone();
                g.global_values[gv] = GlobalValueData::Symbol {
                    name,
                    offset,
                    colocated: !colocated,
                    tls,
                };
                add("symbol colocated", false, g);
            }
            GlobalValueData::Load {
                base,
                offset,
                global_type,
                flags,
            } => {
                let mut g = func.clone();
                g.global_values[gv] = GlobalValueData::Load {
                    base,
                    offset: (i32::from(offset) + 8).into(),
                    global_type,
                    flags,
                };
                add("global value load offset", false, g);
                let mut g = func.clone();
                let d = func.dfg.mem_flags[flags];
                let nd = rebuild_flags(
                    !d.aligned(),
                    d.readonly(),
                    d.explicit_endianness(),
                    d.can_move(),
                    d.trap_code(),
                    d.alias_region(),
                );
                let nh = g.dfg.mem_flags.insert_unchecked(nd);
                g.global_values[gv] = GlobalValueData::Load {
                    base,
                    offset,
                    global_type,
                    flags: nh,
                };
                add("global value load flags", false, g);
            }
            GlobalValueData::IAddImm {
                base,
                offset,
                global_type,
            } => {
                let mut g = func.clone();
                g.global_values[gv] = GlobalValueData::IAddImm {
                    base,
                    offset: (offset.bits() + 16).into(),
                    global_type,
                };
                add("global value iadd_imm offset", false, g);
            }
            _ => {}
        }
    }

    // Dynamic types behind dynamic stack slots.
    let mut dts: Vec<ir::DynamicType> = Vec::new();
    for &b in &layout_blocks {
        for i in func.layout.block_insts(b) {
            if let InstructionData::DynamicStackAddr {
                dynamic_stack_slot, ..
            } = func.dfg.insts[i]
            {
                dts.push(func.dynamic_stack_slots[dynamic_stack_slot].dyn_ty);
            }
        }
    }
    dts.sort();
    dts.dedup();
    for dt in dts {
        let mut g = func.clone();
        g.dfg.dynamic_types[dt].base_vector_ty = I64X2;
        add("dynamic type", false, g);
    }

    // Stack slots, used or not (unused slots still take frame space).
    for (slot, d) in func.sized_stack_slots.iter() {
        let mut g = func.clone();
        g.sized_stack_slots[slot].size = d.size + 16;
        add("stack slot size", true, g);
        let mut g = func.clone();
        g.sized_stack_slots[slot].align_shift = (d.align_shift + 1) % 5;
        add("stack slot alignment", true, g);
    }
    {
        let mut g = func.clone();
        g.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 0));
        add("stack slot added", true, g);
    }

    // The signature.
    {
        let mut g = func.clone();
        g.signature.call_conv = match func.signature.call_conv {
            CallConv::Fast => CallConv::SystemV,
            CallConv::SystemV => CallConv::Tail,
            _ => CallConv::Fast,
        };
        add("calling convention", true, g);
    }
    for (k, p) in func.signature.params.iter().enumerate() {
        if p.value_type.is_int() && p.value_type.bits() < 64 {
            let mut g = func.clone();
            g.signature.params[k].extension = match p.extension {
                ArgumentExtension::None => ArgumentExtension::Sext,
                ArgumentExtension::Sext => ArgumentExtension::Uext,
                ArgumentExtension::Uext => ArgumentExtension::None,
            };
            add("parameter extension", true, g);
        }
    }
    for (k, p) in func.signature.returns.iter().enumerate() {
        if p.value_type.is_int() && p.value_type.bits() < 64 {
            let mut g = func.clone();
            g.signature.returns[k].extension = match p.extension {
                ArgumentExtension::None => ArgumentExtension::Uext,
                _ => ArgumentExtension::None,
            };
            add("return extension", true, g);
        }
    }

    // A cold flag on a reachable block.
    let warm: Vec<Block> = layout_blocks[1..]
        .iter()
        .copied()
        .filter(|&b| !func.layout.is_cold(b))
        .collect();
    if !warm.is_empty() {
        let b = rng.pick(&warm);
        let mut g = func.clone();
        g.layout.set_cold(b);
        add("cold block flag", true, g);
    }
    out
}
