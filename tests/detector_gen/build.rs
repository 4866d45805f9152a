//! Building functions: configuration, the plan drawn from the seed, and the builder.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee16, Ieee32, Ieee64};
use cranelift_codegen::ir::types::*;
use cranelift_codegen::ir::{
    self, AbiParam, AliasRegionData, ArgumentExtension, ArgumentPurpose, AtomicRmwOp, Block,
    BlockArg, ConstantData, DynamicStackSlotData, DynamicTypeData, ExceptionTableData,
    ExceptionTableItem, ExceptionTag, ExtFuncData, ExternalName, FuncRef, Function, GlobalValue,
    GlobalValueData, InstBuilder, JumpTableData, MemFlagsData, Opcode, Signature, SourceLoc,
    StackSlotData, StackSlotKind, TrapCode, Type, UserExternalName, UserFuncName, Value,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use target_lexicon::PointerWidth;

use super::{mix, Rng};

// ---------------------------------------------------------------------------------------
// Configuration.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flavor {
    /// Very few choices (i32 arithmetic, 1-2 blocks): many seeds give the same program.
    Tiny,
    /// Only what cranelift-interpreter can run; results fold every value computed.
    Exec,
    /// Executable like `Exec`, from very few choices (i64/f64 arithmetic, two callees, one
    /// stack slot, two memory flags): many seeds give the same program.
    Small,
    /// Everything the verifier accepts, including what the interpreter cannot run
    /// (symbol_value, tls_value, try_call, dynamic stack slots, f16, libcalls, ...).
    Rich,
}

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub flavor: Flavor,
    /// Logical blocks, inclusive range.
    pub blocks: (usize, usize),
    /// Body instructions per block, inclusive range.
    pub insts: (usize, usize),
}

impl Config {
    pub fn tiny() -> Self {
        Config {
            flavor: Flavor::Tiny,
            blocks: (1, 2),
            insts: (0, 2),
        }
    }
    /// Small executable programs: different seeds often give equal programs.
    pub fn exec_small() -> Self {
        Config {
            flavor: Flavor::Small,
            blocks: (1, 2),
            insts: (1, 3),
        }
    }
    pub fn exec() -> Self {
        Config {
            flavor: Flavor::Exec,
            blocks: (1, 6),
            insts: (1, 9),
        }
    }
    pub fn rich() -> Self {
        Config {
            flavor: Flavor::Rich,
            blocks: (1, 7),
            insts: (1, 10),
        }
    }
}

/// What may change without changing the comparator's answer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Variant {
    /// Permute the creation order of blocks and stack slots, and the order in which blocks
    /// are filled (and so laid out, and so the numbering of values and of lazily created
    /// entities: function references, signatures, constants, memory flags, ...).
    pub order: Option<u64>,
    /// Number of extra unreachable blocks, inserted at random layout positions.
    pub unreachable: usize,
    /// Seed for the extra blocks' contents and positions.
    pub unreachable_seed: u64,
    /// Random source locations on every instruction.
    pub srclocs: Option<u64>,
}

impl Variant {
    pub fn canonical() -> Self {
        Variant::default()
    }
}

// ---------------------------------------------------------------------------------------
// The callees every generated function may call. They are real functions, so that the
// interpreter can run the callers.

pub const CALLEES_CLIF: &str = "
function %c0(i64) -> i64 system_v {
block0(v0: i64):
    v1 = iconst.i64 3
    v2 = imul v0, v1
    v3 = iconst.i64 1
    v4 = iadd v2, v3
    return v4
}
function %c1(i64) -> i64 system_v {
block0(v0: i64):
    v1 = iconst.i64 0x5555
    v2 = bxor v0, v1
    v3 = iconst.i64 7
    v4 = rotl v2, v3
    return v4
}
function %c2(i32, f64) -> i32, f64 system_v {
block0(v0: i32, v1: f64):
    v2 = iconst.i32 11
    v3 = imul v0, v2
    v4 = fneg v1
    return v3, v4
}
function %c3(i64) system_v {
block0(v0: i64):
    return
}
";

/// Names and signatures of the callees (same order as in [`CALLEES_CLIF`]).
pub fn callee_sig(i: usize) -> Signature {
    let mut s = Signature::new(CallConv::SystemV);
    match i {
        0 | 1 => {
            s.params.push(AbiParam::new(I64));
            s.returns.push(AbiParam::new(I64));
        }
        2 => {
            s.params.push(AbiParam::new(I32));
            s.params.push(AbiParam::new(F64));
            s.returns.push(AbiParam::new(I32));
            s.returns.push(AbiParam::new(F64));
        }
        _ => s.params.push(AbiParam::new(I64)),
    }
    s
}

pub fn callees() -> Vec<Function> {
    cranelift_reader::parse_functions(CALLEES_CLIF).expect("callees parse")
}

// ---------------------------------------------------------------------------------------
// The plan: everything decided from the seed before any block is filled.

struct BlockPlan {
    params: Vec<Type>,
    /// A counted loop: the last parameter is an i32 counter, the terminator is
    /// `brif counter, self(.., counter - 1), next(..)`.
    is_loop: bool,
    cold: bool,
    seed: u64,
}

struct Plan {
    sig: Signature,
    blocks: Vec<BlockPlan>,
    slots: Vec<StackSlotData>,
    /// Exec: block 0 is `brif p0, block1, last` and self calls pass `p0 >> 16`.
    recursive: bool,
    stack_limit: bool,
}

fn int_types() -> &'static [Type] {
    &[I8, I16, I32, I64]
}

fn value_types(flavor: Flavor) -> &'static [Type] {
    match flavor {
        Flavor::Tiny => &[I32],
        Flavor::Small => &[I64, F64],
        Flavor::Exec => &[I8, I16, I32, I64, I64, F32, F64, I8X16],
        Flavor::Rich => &[I8, I16, I32, I64, I64, F32, F64, I8X16],
    }
}

fn make_plan(rng: &mut Rng, cfg: &Config) -> Plan {
    let flavor = cfg.flavor;
    let mut sig = Signature::new(match flavor {
        Flavor::Tiny | Flavor::Small => CallConv::Fast,
        _ => rng.pick(&[CallConv::Fast, CallConv::SystemV, CallConv::Tail]),
    });
    match flavor {
        Flavor::Tiny => {
            for _ in 0..if rng.chance(75) { 1 } else { 2 } {
                sig.params.push(AbiParam::new(I32));
            }
            sig.returns.push(AbiParam::new(I32));
        }
        Flavor::Small => {
            sig.params.push(AbiParam::new(I64));
            sig.returns.push(AbiParam::new(I64));
        }
        Flavor::Exec => {
            sig.params.push(AbiParam::new(I64));
            for _ in 0..rng.range(0, 3) {
                let ty = rng.pick(&[I64, I32, I8, F64, F32]);
                sig.params.push(abi_param(rng, ty));
            }
            sig.returns.push(AbiParam::new(I64));
            if rng.chance(50) {
                sig.returns.push(abi_param(rng, I32));
            }
            if rng.chance(50) {
                sig.returns.push(AbiParam::new(F64));
            }
        }
        Flavor::Rich => {
            for _ in 0..rng.range(0, 4) {
                let ty = rng.pick(&[I64, I32, I16, I8, F32, F64, I8X16]);
                sig.params.push(abi_param(rng, ty));
            }
            if rng.chance(25) {
                let at = rng.below(sig.params.len() + 1);
                sig.params
                    .insert(at, AbiParam::special(I64, ArgumentPurpose::VMContext));
            }
            for _ in 0..rng.range(0, 3) {
                let ty = rng.pick(&[I64, I32, F32, F64]);
                sig.returns.push(abi_param(rng, ty));
            }
        }
    }
    let n = if flavor == Flavor::Tiny && rng.chance(50) {
        cfg.blocks.0
    } else {
        rng.range(cfg.blocks.0, cfg.blocks.1)
    };
    let recursive = flavor == Flavor::Exec && n >= 3 && rng.chance(40);
    let mut blocks = Vec::with_capacity(n);
    for i in 0..n {
        let mut params = Vec::new();
        let mut is_loop = false;
        if i > 0 && matches!(flavor, Flavor::Exec | Flavor::Small) {
            // The running checksum of everything computed so far (see `Builder::fold`).
            params.push(I64);
        }
        if i > 0 {
            let k = match flavor {
                Flavor::Tiny | Flavor::Small => rng.range(0, 1),
                _ => rng.range(0, 3),
            };
            for _ in 0..k {
                params.push(rng.pick(value_types(flavor)));
            }
            if matches!(flavor, Flavor::Exec | Flavor::Rich) && i + 1 < n && rng.chance(20) {
                is_loop = true;
                params.push(I32);
            }
        }
        let cold = flavor == Flavor::Rich && i > 0 && rng.chance(10);
        blocks.push(BlockPlan {
            params,
            is_loop,
            cold,
            seed: rng.next_u64(),
        });
    }
    let mut slots = Vec::new();
    if flavor == Flavor::Small {
        if rng.chance(50) {
            slots.push(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 0));
        }
    } else if flavor != Flavor::Tiny {
        for _ in 0..rng.range(0, 3) {
            let size = 16 * rng.range(1, 3) as u32;
            let align = rng.range(0, 4) as u8;
            slots.push(StackSlotData::new(StackSlotKind::ExplicitSlot, size, align));
        }
    }
    let has_vmctx = sig
        .params
        .iter()
        .any(|p| p.purpose == ArgumentPurpose::VMContext);
    let stack_limit = flavor == Flavor::Rich && has_vmctx && rng.chance(60);
    Plan {
        sig,
        blocks,
        slots,
        recursive,
        stack_limit,
    }
}

fn abi_param(rng: &mut Rng, ty: Type) -> AbiParam {
    let mut p = AbiParam::new(ty);
    if ty.is_int() && ty.bits() < 64 && rng.chance(30) {
        p.extension = if rng.chance(50) {
            ArgumentExtension::Uext
        } else {
            ArgumentExtension::Sext
        };
    }
    p
}

// ---------------------------------------------------------------------------------------
// Building.

/// Keys of lazily created entities: created on first use, so their numbers depend on the
/// order in which blocks are filled.
#[derive(Clone, PartialEq, Eq, Hash)]
enum FuncKey {
    /// One of the callees, colocated?, patchable?
    Callee(usize, bool, bool),
    /// The function itself.
    SelfRef(bool),
    /// `u0:index` with the signature of callee `i`.
    User(u32, usize, bool),
    /// A libcall `(f32) -> f32`.
    CeilF32,
    /// A callee for try_call: `%thrower(i64) -> i64 system_v`.
    Thrower,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum GvKey {
    Symbol {
        name: u8,
        offset: i64,
        colocated: bool,
        tls: bool,
    },
    Got,
    DynScale,
}

struct Builder<'a, 'b> {
    b: &'b mut FunctionBuilder<'a>,
    cfg: Config,
    plan: &'b Plan,
    blocks: Vec<Block>,
    slots: Vec<ir::StackSlot>,
    funcs: HashMap<FuncKey, FuncRef>,
    sigs: HashMap<usize, ir::SigRef>,
    gvs: HashMap<GvKey, GlobalValue>,
    regions: Vec<Option<ir::AliasRegion>>,
    name: String,
    srcloc: Option<Rng>,
    /// Blocks that end in a try_call with at least `n` exceptional edges.
    try_blocks: Vec<(usize, usize)>,
    /// Filling an extra unreachable block: create nothing that counts even when unused
    /// (dynamic stack slots take frame space whether used or not).
    in_unreachable: bool,
    /// Executable flavors: the checksum the current block passes to its successors.
    cur_acc: Option<Value>,
    /// Executable flavors: the checksum the current block received.
    acc_in: Option<Value>,
}

/// Values available in the block being filled.
struct Pool {
    vals: Vec<(Value, Type)>,
    /// Stack addresses: (value, slot, offset of the address inside the slot).
    addrs: Vec<(Value, usize, u32)>,
    /// `func_addr` results: (value, callee index).
    fnaddrs: Vec<(Value, usize)>,
}

impl Pool {
    fn of(&self, ty: Type) -> Vec<Value> {
        self.vals
            .iter()
            .filter(|(_, t)| *t == ty)
            .map(|(v, _)| *v)
            .collect()
    }
}

/// Build the function of `seed` under `cfg`, in the numbering and layout of `variant`.
pub fn build(seed: u64, cfg: &Config, variant: &Variant) -> Function {
    let mut rng = Rng::new(seed);
    let plan = make_plan(&mut rng, cfg);
    let name = format!("f{seed}");
    let mut func =
        Function::with_name_signature(UserFuncName::testcase(name.as_bytes()), plan.sig.clone());
    let mut ctx = FunctionBuilderContext::new();
    let mut fb = FunctionBuilder::new(&mut func, &mut ctx);

    let n = plan.blocks.len();
    let mut order_rng = variant.order.map(Rng::new);

    // Blocks: create them in a permuted order.
    let total = n + variant.unreachable;
    let mut created: Vec<Block> = (0..total).map(|_| fb.create_block()).collect();
    if let Some(r) = order_rng.as_mut() {
        r.shuffle(&mut created);
    }
    let blocks: Vec<Block> = created[..n].to_vec();
    let extra: Vec<Block> = created[n..].to_vec();

    // Stack slots: create them in a permuted order.
    let mut slot_order: Vec<usize> = (0..plan.slots.len()).collect();
    if let Some(r) = order_rng.as_mut() {
        r.shuffle(&mut slot_order);
    }
    let mut slots = vec![None; plan.slots.len()];
    for &i in &slot_order {
        slots[i] = Some(fb.create_sized_stack_slot(plan.slots[i].clone()));
    }
    let slots: Vec<ir::StackSlot> = slots.into_iter().map(Option::unwrap).collect();

    // Block parameters, in a permuted block order (renumbers the values).
    fb.append_block_params_for_function_params(blocks[0]);
    let mut param_order: Vec<usize> = (1..n).collect();
    if let Some(r) = order_rng.as_mut() {
        r.shuffle(&mut param_order);
    }
    for &i in &param_order {
        for &ty in &plan.blocks[i].params {
            fb.append_block_param(blocks[i], ty);
        }
    }

    let mut fill: Vec<usize> = (1..n).collect();
    if let Some(r) = order_rng.as_mut() {
        r.shuffle(&mut fill);
    }
    fill.insert(0, 0);

    let mut bld = Builder {
        b: &mut fb,
        cfg: *cfg,
        plan: &plan,
        blocks,
        slots,
        funcs: HashMap::new(),
        sigs: HashMap::new(),
        gvs: HashMap::new(),
        regions: Vec::new(),
        name,
        srcloc: variant.srclocs.map(Rng::new),
        try_blocks: Vec::new(),
        in_unreachable: false,
        cur_acc: None,
        acc_in: None,
    };
    if plan.stack_limit {
        bld.make_stack_limit();
    }
    // Blocks that end in try_call are decided by their own RNG; record them up front so
    // that `get_exception_handler_address` can name them whatever the fill order.
    for i in 0..n {
        if let Some(k) = bld.try_call_plan(i) {
            bld.try_blocks.push((i, k));
        }
    }
    for &i in &fill {
        bld.fill_block(i);
    }
    // Extra unreachable blocks, at random places in the layout (never first).
    let mut urng = Rng::new(variant.unreachable_seed ^ 0xDEAD);
    for (k, &blk) in extra.iter().enumerate() {
        let after = bld.blocks[urng.below(n)];
        bld.b.insert_block_after(blk, after);
        bld.fill_unreachable(blk, mix(variant.unreachable_seed, k as u64));
    }
    fb.seal_all_blocks();
    fb.finalize(frontend_config());
    func
}

pub fn frontend_config() -> TargetFrontendConfig {
    TargetFrontendConfig {
        default_call_conv: CallConv::SystemV,
        pointer_width: PointerWidth::U64,
        page_size_align_log2: 12,
    }
}

pub(crate) const INTERESTING_INTS: &[i64] = &[
    0,
    1,
    2,
    3,
    7,
    8,
    15,
    16,
    31,
    32,
    63,
    64,
    127,
    128,
    255,
    -1,
    -2,
    i64::MIN,
    i64::MAX,
    0x5555_5555_5555_5555,
];

pub(crate) const INTERESTING_F64: &[u64] = &[
    0x0000_0000_0000_0000, // 0.0
    0x8000_0000_0000_0000, // -0.0
    0x3FF0_0000_0000_0000, // 1.0
    0xBFF8_0000_0000_0000, // -1.5
    0x7FF0_0000_0000_0000, // inf
    0xFFF0_0000_0000_0000, // -inf
    0x7FF8_0000_0000_0000, // qNaN
    0x7FF8_0000_0000_0001, // qNaN, payload 1
    0x7FF0_0000_0000_0001, // sNaN
    0xFFF8_0000_0000_0000, // -qNaN
    0x0000_0000_0000_0001, // smallest subnormal
    0x4059_0000_0000_0000, // 100.0
];

pub(crate) const INTERESTING_F32: &[u32] = &[
    0x0000_0000,
    0x8000_0000,
    0x3F80_0000,
    0xBFC0_0000,
    0x7F80_0000,
    0xFF80_0000,
    0x7FC0_0000,
    0x7FC0_0001,
    0x7F80_0001,
    0xFFC0_0000,
    0x0000_0001,
    0x42C8_0000,
];

pub fn mask_to(ty: Type, v: i64) -> i64 {
    if ty.bits() >= 64 {
        v
    } else {
        (v as u64 & ((1u64 << ty.bits()) - 1)) as i64
    }
}

const INT_BINARY: &[Opcode] = &[
    Opcode::Iadd,
    Opcode::Isub,
    Opcode::Imul,
    Opcode::Band,
    Opcode::Bor,
    Opcode::Bxor,
    Opcode::Ishl,
    Opcode::Ushr,
    Opcode::Sshr,
    Opcode::Rotl,
    Opcode::Rotr,
    Opcode::Umin,
    Opcode::Umax,
    Opcode::Smin,
    Opcode::Smax,
    Opcode::Udiv,
    Opcode::Sdiv,
    Opcode::Urem,
    Opcode::Srem,
    Opcode::Umulhi,
    Opcode::Smulhi,
];
const INT_UNARY: &[Opcode] = &[
    Opcode::Ineg,
    Opcode::Bnot,
    Opcode::Iabs,
    Opcode::Popcnt,
    Opcode::Clz,
    Opcode::Ctz,
    Opcode::Bitrev,
];
const FLOAT_BINARY: &[Opcode] = &[
    Opcode::Fadd,
    Opcode::Fsub,
    Opcode::Fmul,
    Opcode::Fdiv,
    Opcode::Fmin,
    Opcode::Fmax,
    Opcode::Fcopysign,
];
const FLOAT_UNARY: &[Opcode] = &[
    Opcode::Fneg,
    Opcode::Fabs,
    Opcode::Sqrt,
    Opcode::Ceil,
    Opcode::Floor,
    Opcode::Trunc,
    Opcode::Nearest,
];
const VEC_BINARY: &[Opcode] = &[
    Opcode::Iadd,
    Opcode::Isub,
    Opcode::Band,
    Opcode::Bor,
    Opcode::Bxor,
];

/// Groups of opcodes that can replace each other in place (same format, same types).
pub fn opcode_alternatives(op: Opcode, ctrl: Type) -> Vec<Opcode> {
    let groups: &[&[Opcode]] = &[
        INT_BINARY,
        INT_UNARY,
        FLOAT_BINARY,
        FLOAT_UNARY,
        &[Opcode::Uextend, Opcode::Sextend],
        &[Opcode::Select, Opcode::SelectSpectreGuard],
        &[Opcode::Uload8, Opcode::Sload8],
        &[Opcode::Uload16, Opcode::Sload16],
        &[Opcode::Uload32, Opcode::Sload32],
        &[Opcode::Trapz, Opcode::Trapnz],
        &[Opcode::Nop, Opcode::Fence],
        &[Opcode::FcvtToSintSat, Opcode::FcvtToUintSat],
        &[Opcode::FcvtFromSint, Opcode::FcvtFromUint],
    ];
    let mut out = Vec::new();
    if ctrl.is_vector() {
        if VEC_BINARY.contains(&op) {
            out.extend(VEC_BINARY.iter().copied().filter(|&o| o != op));
        }
        return out;
    }
    for g in groups {
        if g.contains(&op) {
            out.extend(g.iter().copied().filter(|&o| o != op));
        }
    }
    if op == Opcode::Store && ctrl.is_int() {
        for (o, bits) in [
            (Opcode::Istore8, 8),
            (Opcode::Istore16, 16),
            (Opcode::Istore32, 32),
        ] {
            if ctrl.bits() > bits {
                out.push(o);
            }
        }
    }
    if matches!(op, Opcode::Istore8 | Opcode::Istore16 | Opcode::Istore32) {
        for (o, bits) in [
            (Opcode::Istore8, 8),
            (Opcode::Istore16, 16),
            (Opcode::Istore32, 32),
        ] {
            if o != op && ctrl.bits() > bits {
                out.push(o);
            }
        }
        out.push(Opcode::Store);
    }
    out
}

impl<'a, 'b> Builder<'a, 'b> {
    fn exec(&self) -> bool {
        matches!(self.cfg.flavor, Flavor::Exec | Flavor::Small)
    }

    fn rich(&self) -> bool {
        self.cfg.flavor == Flavor::Rich
    }

    fn set_srcloc(&mut self) {
        if let Some(r) = self.srcloc.as_mut() {
            let loc = SourceLoc::new(r.next_u64() as u32 & 0xFFFF);
            self.b.set_srcloc(loc);
        }
    }

    fn make_stack_limit(&mut self) {
        let vmctx = self.b.create_global_value(GlobalValueData::VMContext);
        let trusted = self
            .b
            .func
            .dfg
            .mem_flags
            .insert_unchecked(MemFlagsData::trusted());
        let load = self.b.create_global_value(GlobalValueData::Load {
            base: vmctx,
            offset: 8.into(),
            global_type: I64,
            flags: trusted,
        });
        let add = self.b.create_global_value(GlobalValueData::IAddImm {
            base: load,
            offset: 64.into(),
            global_type: I64,
        });
        self.b.func.stack_limit = Some(add);
    }

    fn sig_ref(&mut self, i: usize) -> ir::SigRef {
        if let Some(&s) = self.sigs.get(&i) {
            return s;
        }
        let s = self.b.import_signature(callee_sig(i));
        self.sigs.insert(i, s);
        s
    }

    fn func_ref(&mut self, key: FuncKey) -> FuncRef {
        if let Some(&f) = self.funcs.get(&key) {
            return f;
        }
        let (name, signature, colocated, patchable) = match key.clone() {
            FuncKey::Callee(i, colocated, patchable) => (
                ExternalName::testcase(format!("c{i}")),
                self.sig_ref(i),
                colocated,
                patchable,
            ),
            FuncKey::SelfRef(colocated) => {
                let sig = self.b.import_signature(self.plan.sig.clone());
                (
                    ExternalName::testcase(self.name.as_bytes()),
                    sig,
                    colocated,
                    false,
                )
            }
            FuncKey::User(index, i, colocated) => {
                let r = self
                    .b
                    .func
                    .declare_imported_user_function(UserExternalName::new(0, index));
                (ExternalName::user(r), self.sig_ref(i), colocated, false)
            }
            FuncKey::CeilF32 => {
                let mut s = Signature::new(CallConv::SystemV);
                s.params.push(AbiParam::new(F32));
                s.returns.push(AbiParam::new(F32));
                let sig = self.b.import_signature(s);
                (
                    ExternalName::LibCall(ir::LibCall::CeilF32),
                    sig,
                    false,
                    false,
                )
            }
            FuncKey::Thrower => {
                let sig = self.sig_ref(0);
                (ExternalName::testcase("thrower"), sig, true, false)
            }
        };
        let f = self.b.import_function(ExtFuncData {
            name,
            signature,
            colocated,
            patchable,
        });
        self.funcs.insert(key, f);
        f
    }

    fn global_value(&mut self, key: GvKey) -> GlobalValue {
        if let Some(&g) = self.gvs.get(&key) {
            return g;
        }
        let data = match key {
            GvKey::Symbol {
                name,
                offset,
                colocated,
                tls,
            } => GlobalValueData::Symbol {
                name: ExternalName::testcase(format!("data{name}")),
                offset: offset.into(),
                colocated,
                tls,
            },
            GvKey::Got => GlobalValueData::Symbol {
                name: ExternalName::KnownSymbol(ir::KnownSymbol::ElfGlobalOffsetTable),
                offset: 0.into(),
                colocated: false,
                tls: false,
            },
            GvKey::DynScale => GlobalValueData::DynScaleTargetConst { vector_type: I32X4 },
        };
        let g = self.b.create_global_value(data);
        self.gvs.insert(key, g);
        g
    }

    fn region(&mut self, user_id: u32) -> ir::AliasRegion {
        self.b.func.dfg.alias_regions.insert(AliasRegionData {
            user_id,
            description: format!("region {user_id}").into(),
        })
    }

    /// Random memory flags for an access of `size` bytes at slot offset `at`.
    fn mem_flags(&mut self, rng: &mut Rng, at: u32, size: u32, store: bool) -> MemFlagsData {
        let mut f = MemFlagsData::new();
        if at.is_multiple_of(size) && rng.chance(40) {
            f.set_aligned();
        }
        if !store && rng.chance(15) {
            f.set_readonly();
        }
        match rng.below(5) {
            0 => f.set_endianness(ir::Endianness::Little),
            1 => f.set_endianness(ir::Endianness::Big),
            _ => {}
        }
        if rng.chance(15) {
            f.set_can_move();
        }
        f = match rng.below(4) {
            0 => f.with_trap_code(None),
            1 => f.with_trap_code(TrapCode::user(rng.range(1, 3) as u8)),
            _ => f,
        };
        if rng.chance(30) {
            let r = self.region(rng.range(1, 3) as u32);
            f = f.with_alias_region(Some(r));
        }
        f
    }

    fn int_const(&mut self, rng: &mut Rng, ty: Type) -> Value {
        let v = if rng.chance(70) {
            rng.pick(INTERESTING_INTS)
        } else {
            rng.next_u64() as i64
        };
        self.set_srcloc();
        self.b.ins().iconst(ty, mask_to(ty, v))
    }

    fn constant(&mut self, rng: &mut Rng, ty: Type) -> Value {
        if self.cfg.flavor == Flavor::Tiny {
            self.set_srcloc();
            return self.b.ins().iconst(ty, rng.range(0, 2) as i64);
        }
        if self.cfg.flavor == Flavor::Small {
            self.set_srcloc();
            return match ty {
                F64 => {
                    let bits = rng.pick(&[
                        0u64,
                        0x8000_0000_0000_0000,
                        0x7FF8_0000_0000_0000,
                        0x7FF8_0000_0000_0001,
                    ]);
                    self.b.ins().f64const(Ieee64::with_bits(bits))
                }
                _ => self.b.ins().iconst(ty, rng.range(0, 1) as i64),
            };
        }
        self.set_srcloc();
        match ty {
            F32 => {
                let bits = if rng.chance(70) {
                    rng.pick(INTERESTING_F32)
                } else {
                    rng.next_u64() as u32
                };
                self.b.ins().f32const(Ieee32::with_bits(bits))
            }
            F64 => {
                let bits = if rng.chance(70) {
                    rng.pick(INTERESTING_F64)
                } else {
                    rng.next_u64()
                };
                self.b.ins().f64const(Ieee64::with_bits(bits))
            }
            I8X16 => {
                let bytes: Vec<u8> = (0..16)
                    .map(|_| {
                        if rng.chance(50) {
                            0
                        } else {
                            rng.next_u64() as u8
                        }
                    })
                    .collect();
                let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
                self.b.ins().vconst(I8X16, c)
            }
            _ => self.int_const(rng, ty),
        }
    }

    /// A value of type `ty`: an existing one, or a new constant.
    fn get(&mut self, rng: &mut Rng, pool: &mut Pool, ty: Type) -> Value {
        let have = pool.of(ty);
        if !have.is_empty() && rng.chance(85) {
            return rng.pick(&have);
        }
        let v = self.constant(rng, ty);
        pool.vals.push((v, ty));
        v
    }

    fn push(&self, pool: &mut Pool, v: Value) {
        let ty = self.b.func.dfg.value_type(v);
        pool.vals.push((v, ty));
    }

    /// The block's own try_call decision (None when it does not end in try_call).
    fn try_call_plan(&self, i: usize) -> Option<usize> {
        if !self.rich() || i + 1 >= self.plan.blocks.len() || self.plan.blocks[i].is_loop {
            return None;
        }
        let mut r = Rng::new(mix(self.plan.blocks[i].seed, 77));
        if r.chance(20) {
            Some(r.range(1, 2))
        } else {
            None
        }
    }

    fn fill_block(&mut self, li: usize) {
        let bp = &self.plan.blocks[li];
        let mut rng = Rng::new(bp.seed);
        let blk = self.blocks[li];
        self.b.switch_to_block(blk);
        if bp.cold {
            self.b.set_cold_block(blk);
        }
        let mut pool = Pool {
            vals: Vec::new(),
            addrs: Vec::new(),
            fnaddrs: Vec::new(),
        };
        let entry_params: Vec<Value> = self.b.block_params(self.blocks[0]).to_vec();
        for (i, &v) in entry_params.iter().enumerate() {
            if self.plan.sig.params[i].purpose == ArgumentPurpose::Normal {
                self.push(&mut pool, v);
            }
        }
        let own: Vec<Value> = if li == 0 {
            Vec::new()
        } else {
            self.b.block_params(blk).to_vec()
        };
        let counter = if bp.is_loop {
            own.last().copied()
        } else {
            None
        };
        let acc_in = if self.exec() {
            own.first().copied()
        } else {
            None
        };
        for &v in &own {
            if Some(v) != counter && Some(v) != acc_in {
                self.push(&mut pool, v);
            }
        }
        let body = rng.range(self.cfg.insts.0, self.cfg.insts.1);
        // Self calls only where p0 != 0 is known (see `Plan::recursive`).
        let n = self.plan.blocks.len();
        let may_self_call =
            (self.plan.recursive && li != 0 && li != n - 1) || (self.rich() && rng.chance(30));
        for _ in 0..body {
            self.body_inst(&mut rng, &mut pool, li, may_self_call);
        }
        self.acc_in = acc_in;
        if self.exec() {
            // Everything this block computed goes into the checksum it passes on.
            self.cur_acc = Some(self.fold(&pool, acc_in, false));
        }
        self.terminator(&mut rng, &mut pool, li, counter);
    }

    fn body_inst(&mut self, rng: &mut Rng, pool: &mut Pool, li: usize, may_self_call: bool) {
        if self.cfg.flavor == Flavor::Tiny {
            return self.tiny_inst(rng, pool);
        }
        if self.cfg.flavor == Flavor::Small {
            return self.small_inst(rng, pool);
        }
        let rich = self.rich();
        loop {
            let choice = rng.below(if rich { 30 } else { 26 });
            self.set_srcloc();
            match choice {
                0 | 1 => {
                    let ty = rng.pick(value_types(self.cfg.flavor));
                    let v = self.constant(rng, ty);
                    pool.vals.push((v, ty));
                }
                2..=4 => {
                    let ty = rng.pick(int_types());
                    let a = self.get(rng, pool, ty);
                    let b = self.get(rng, pool, ty);
                    let op = rng.pick(INT_BINARY);
                    // Mostly divide by something that is not zero.
                    let b = if matches!(
                        op,
                        Opcode::Udiv | Opcode::Sdiv | Opcode::Urem | Opcode::Srem
                    ) && rng.chance(80)
                    {
                        let one = self.b.ins().iconst(ty, 1);
                        self.b.ins().bor(b, one)
                    } else {
                        b
                    };
                    self.set_srcloc();
                    let v = self.binary(op, a, b);
                    self.push(pool, v);
                }
                5 => {
                    let ty = rng.pick(int_types());
                    let a = self.get(rng, pool, ty);
                    let mut ops = INT_UNARY.to_vec();
                    if ty.bits() >= 16 {
                        ops.push(Opcode::Bswap);
                    }
                    let op = rng.pick(&ops);
                    let v = self.unary(op, ty, a);
                    self.push(pool, v);
                }
                6 => {
                    // Extension or reduction.
                    let from = rng.pick(int_types());
                    let to = rng.pick(int_types());
                    if from == to {
                        continue;
                    }
                    let a = self.get(rng, pool, from);
                    self.set_srcloc();
                    let v = if to.bits() > from.bits() {
                        if rng.chance(50) {
                            self.b.ins().uextend(to, a)
                        } else {
                            self.b.ins().sextend(to, a)
                        }
                    } else {
                        self.b.ins().ireduce(to, a)
                    };
                    self.push(pool, v);
                }
                7 | 8 => {
                    let ty = rng.pick(int_types());
                    let a = self.get(rng, pool, ty);
                    let b = self.get(rng, pool, ty);
                    let cc = rng.pick(IntCC::all());
                    self.set_srcloc();
                    let v = self.b.ins().icmp(cc, a, b);
                    self.push(pool, v);
                }
                9 => {
                    let ty = rng.pick(value_types(self.cfg.flavor));
                    let cty = rng.pick(int_types());
                    let c = self.get(rng, pool, cty);
                    let a = self.get(rng, pool, ty);
                    let b = self.get(rng, pool, ty);
                    self.set_srcloc();
                    let v = match rng.below(3) {
                        0 => self.b.ins().select(c, a, b),
                        1 => self.b.ins().select_spectre_guard(c, a, b),
                        _ if ty.is_int() || ty.is_vector() => {
                            let c = self.get(rng, pool, ty);
                            self.set_srcloc();
                            self.b.ins().bitselect(c, a, b)
                        }
                        _ => self.b.ins().select(c, a, b),
                    };
                    self.push(pool, v);
                }
                10 | 11 => {
                    let ty = rng.pick(&[F32, F64]);
                    let a = self.get(rng, pool, ty);
                    self.set_srcloc();
                    let v = if rng.chance(60) {
                        let b = self.get(rng, pool, ty);
                        self.set_srcloc();
                        self.binary(rng.pick(FLOAT_BINARY), a, b)
                    } else {
                        self.unary(rng.pick(FLOAT_UNARY), ty, a)
                    };
                    self.push(pool, v);
                }
                12 => {
                    let ty = rng.pick(&[F32, F64]);
                    let a = self.get(rng, pool, ty);
                    let b = self.get(rng, pool, ty);
                    let cc = rng.pick(FloatCC::all());
                    self.set_srcloc();
                    let v = self.b.ins().fcmp(cc, a, b);
                    self.push(pool, v);
                }
                13 => {
                    // Conversions between ints and floats.
                    let fty = rng.pick(&[F32, F64]);
                    let ity = rng.pick(&[I32, I64]);
                    let v = match rng.below(5) {
                        0 => {
                            let a = self.get(rng, pool, ity);
                            self.set_srcloc();
                            if rng.chance(50) {
                                self.b.ins().fcvt_from_sint(fty, a)
                            } else {
                                self.b.ins().fcvt_from_uint(fty, a)
                            }
                        }
                        1 => {
                            let a = self.get(rng, pool, fty);
                            self.set_srcloc();
                            if rng.chance(50) {
                                self.b.ins().fcvt_to_sint_sat(ity, a)
                            } else {
                                self.b.ins().fcvt_to_uint_sat(ity, a)
                            }
                        }
                        2 => {
                            let a = self.get(rng, pool, F32);
                            self.set_srcloc();
                            self.b.ins().fpromote(F64, a)
                        }
                        3 => {
                            let a = self.get(rng, pool, F64);
                            self.set_srcloc();
                            self.b.ins().fdemote(F32, a)
                        }
                        _ => {
                            let (from, to) = if rng.chance(50) {
                                (fty, Type::int(fty.bits() as u16).unwrap())
                            } else {
                                (Type::int(fty.bits() as u16).unwrap(), fty)
                            };
                            let a = self.get(rng, pool, from);
                            self.set_srcloc();
                            self.b.ins().bitcast(to, MemFlagsData::new(), a)
                        }
                    };
                    self.push(pool, v);
                }
                14 | 15 => self.load(rng, pool),
                16 | 17 => self.store(rng, pool),
                18 => self.atomic(rng, pool),
                19 | 20 => self.call(rng, pool, may_self_call),
                21 => {
                    // Conditional traps that fire on some inputs: a parameter against
                    // a constant.
                    let p0 = self.b.block_params(self.blocks[0]).first().copied();
                    let p0_ok = self.plan.sig.params.first().is_some_and(|p| {
                        p.value_type == I64 && p.purpose == ArgumentPurpose::Normal
                    });
                    let (ty, a) = match p0 {
                        Some(p0) if p0_ok => (I64, p0),
                        _ => {
                            let ty = rng.pick(&[I64, I32]);
                            (ty, self.get(rng, pool, ty))
                        }
                    };
                    let k = self.int_const(rng, ty);
                    self.set_srcloc();
                    let c = self.b.ins().icmp(IntCC::Equal, a, k);
                    let code = TrapCode::user(rng.range(1, 4) as u8).unwrap();
                    self.set_srcloc();
                    if rng.chance(50) {
                        self.b.ins().trapnz(c, code);
                    } else {
                        let nc = self.b.ins().bnot(c);
                        self.b.ins().trapz(nc, code);
                    }
                }
                22 => {
                    let ty = rng.pick(&[I32, I64]);
                    let a = self.get(rng, pool, ty);
                    let b = self.get(rng, pool, ty);
                    let code = rng.pick(&[
                        TrapCode::INTEGER_OVERFLOW,
                        TrapCode::unwrap_user(1),
                        TrapCode::unwrap_user(2),
                    ]);
                    self.set_srcloc();
                    let v = self.b.ins().uadd_overflow_trap(a, b, code);
                    self.push(pool, v);
                }
                23 | 24 => self.vector(rng, pool),
                25 => {
                    if rng.chance(50) {
                        self.b.ins().nop();
                    } else {
                        self.b.ins().fence();
                    }
                }
                // Rich only from here on.
                26 => {
                    let tls = rng.chance(25);
                    let key = if !tls && rng.chance(15) {
                        GvKey::Got
                    } else {
                        GvKey::Symbol {
                            name: rng.range(0, 1) as u8,
                            offset: rng.pick(&[0, 8, -16]),
                            colocated: rng.chance(50),
                            tls,
                        }
                    };
                    let gv = self.global_value(key);
                    self.set_srcloc();
                    let v = if tls {
                        self.b.ins().tls_value(I64, gv)
                    } else {
                        self.b.ins().symbol_value(I64, gv)
                    };
                    self.push(pool, v);
                }
                27 => {
                    // f16 constants and dynamic stack addresses: encoded, never executed.
                    if rng.chance(50) || self.in_unreachable {
                        let bits = rng.pick(&[0x0000u16, 0x8000, 0x3C00, 0x7E00, 0x7E01]);
                        self.b.ins().f16const(Ieee16::with_bits(bits));
                    } else {
                        let gv = self.global_value(GvKey::DynScale);
                        let dt = self
                            .b
                            .func
                            .dfg
                            .make_dynamic_ty(DynamicTypeData::new(I32X4, gv));
                        let dss = self.b.create_dynamic_stack_slot(DynamicStackSlotData::new(
                            StackSlotKind::ExplicitDynamicSlot,
                            dt,
                        ));
                        self.set_srcloc();
                        let v = self.b.ins().dynamic_stack_addr(I64, dss);
                        self.push(pool, v);
                    }
                }
                28 => {
                    // The address of a try_call's handler.
                    let cands: Vec<(usize, usize)> = self
                        .try_blocks
                        .iter()
                        .copied()
                        .filter(|&(b, _)| b != 0)
                        .collect();
                    if cands.is_empty() {
                        continue;
                    }
                    let (blk, k) = rng.pick(&cands);
                    let idx = rng.below(k) as i64;
                    let v = self
                        .b
                        .ins()
                        .get_exception_handler_address(I64, self.blocks[blk], idx);
                    self.push(pool, v);
                }
                _ => {
                    // Calls by user name and to a libcall.
                    if rng.chance(50) {
                        let a = self.get(rng, pool, F32);
                        let f = self.func_ref(FuncKey::CeilF32);
                        self.set_srcloc();
                        let inst = self.b.ins().call(f, &[a]);
                        let r = self.b.inst_results(inst)[0];
                        self.push(pool, r);
                    } else {
                        let a = self.get(rng, pool, I64);
                        let index = rng.range(1, 3) as u32;
                        let f = self.func_ref(FuncKey::User(index, 0, rng.chance(50)));
                        self.set_srcloc();
                        let inst = self.b.ins().call(f, &[a]);
                        let r = self.b.inst_results(inst)[0];
                        self.push(pool, r);
                    }
                }
            }
            let _ = li;
            return;
        }
    }

    fn tiny_inst(&mut self, rng: &mut Rng, pool: &mut Pool) {
        match rng.below(4) {
            0 => {
                let v = self.constant(rng, I32);
                pool.vals.push((v, I32));
            }
            1 | 2 => {
                let a = self.get(rng, pool, I32);
                let b = self.get(rng, pool, I32);
                let op = rng.pick(&[Opcode::Iadd, Opcode::Isub, Opcode::Imul]);
                self.set_srcloc();
                let v = self.binary(op, a, b);
                self.push(pool, v);
            }
            _ => {
                let a = self.get(rng, pool, I32);
                let b = self.get(rng, pool, I32);
                let cc = rng.pick(&[IntCC::Equal, IntCC::SignedLessThan]);
                self.set_srcloc();
                let c = self.b.ins().icmp(cc, a, b);
                let x = self.get(rng, pool, I32);
                let y = self.get(rng, pool, I32);
                self.set_srcloc();
                let v = self.b.ins().select(c, x, y);
                self.push(pool, v);
            }
        }
    }

    fn small_inst(&mut self, rng: &mut Rng, pool: &mut Pool) {
        self.set_srcloc();
        match rng.below(8) {
            0 => {
                let ty = rng.pick(&[I64, F64]);
                let v = self.constant(rng, ty);
                pool.vals.push((v, ty));
            }
            1 => {
                let a = self.get(rng, pool, I64);
                let b = self.get(rng, pool, I64);
                let op = rng.pick(&[Opcode::Iadd, Opcode::Isub, Opcode::Bxor]);
                self.set_srcloc();
                let v = self.binary(op, a, b);
                self.push(pool, v);
            }
            2 => {
                let a = self.get(rng, pool, I64);
                let b = self.get(rng, pool, I64);
                let cc = rng.pick(&[IntCC::Equal, IntCC::UnsignedLessThan]);
                self.set_srcloc();
                let v = self.b.ins().icmp(cc, a, b);
                self.push(pool, v);
            }
            3 => {
                let ty = rng.pick(&[I64, F64]);
                let c = self.get(rng, pool, I64);
                let a = self.get(rng, pool, ty);
                let b = self.get(rng, pool, ty);
                self.set_srcloc();
                let v = self.b.ins().select(c, a, b);
                self.push(pool, v);
            }
            4 => {
                let a = self.get(rng, pool, I64);
                let f = self.func_ref(FuncKey::Callee(rng.below(2), false, false));
                self.set_srcloc();
                let inst = self.b.ins().call(f, &[a]);
                let r = self.b.inst_results(inst)[0];
                self.push(pool, r);
            }
            5 if !self.slots.is_empty() => {
                let off = rng.pick(&[0i32, 8]);
                let mut flags = MemFlagsData::new();
                if rng.chance(50) {
                    flags.set_endianness(ir::Endianness::Big);
                }
                let a = self.b.ins().stack_addr(I64, self.slots[0], 0);
                if rng.chance(50) {
                    let x = self.get(rng, pool, I64);
                    self.set_srcloc();
                    self.b.ins().store(flags, x, a, off);
                } else {
                    self.set_srcloc();
                    let v = self.b.ins().load(I64, flags, a, off);
                    self.push(pool, v);
                }
            }
            6 => {
                let a = self.get(rng, pool, F64);
                let op = rng.pick(&[Opcode::Fneg, Opcode::Fabs]);
                let v = self.unary(op, F64, a);
                self.push(pool, v);
            }
            _ => {
                let a = self.get(rng, pool, I64);
                let k = self.b.ins().iconst(I64, 1);
                let c = self.b.ins().icmp(IntCC::Equal, a, k);
                let code = TrapCode::user(rng.range(1, 2) as u8).unwrap();
                self.set_srcloc();
                self.b.ins().trapnz(c, code);
            }
        }
    }

    fn binary(&mut self, op: Opcode, a: Value, b: Value) -> Value {
        let ty = self.b.func.dfg.value_type(a);
        let (inst, dfg) = self.b.ins().Binary(op, ty, a, b);
        dfg.first_result(inst)
    }

    fn unary(&mut self, op: Opcode, ty: Type, a: Value) -> Value {
        let (inst, dfg) = self.b.ins().Unary(op, ty, a);
        dfg.first_result(inst)
    }

    /// A stack address inside slot `s`: an existing one or a new `stack_addr`.
    fn addr(&mut self, rng: &mut Rng, pool: &mut Pool) -> Option<(Value, usize, u32)> {
        if self.slots.is_empty() {
            return None;
        }
        if !pool.addrs.is_empty() && rng.chance(60) {
            return Some(pool.addrs[rng.below(pool.addrs.len())]);
        }
        let s = rng.below(self.slots.len());
        let size = self.plan.slots[s].size;
        let off = rng.pick(&[0u32, 0, 4, 8, 3]).min(size - 8);
        self.set_srcloc();
        let v = self.b.ins().stack_addr(I64, self.slots[s], off as i32);
        pool.addrs.push((v, s, off));
        if !self.exec() {
            // Outside the interpreter an address is an ordinary value.
            pool.vals.push((v, I64));
        }
        Some((v, s, off))
    }

    fn load(&mut self, rng: &mut Rng, pool: &mut Pool) {
        let Some((a, s, off)) = self.addr(rng, pool) else {
            return;
        };
        let size = self.plan.slots[s].size;
        let room = size - off;
        // (opcode, result type, access size)
        let kinds: &[(Opcode, Type, u32)] = &[
            (Opcode::Load, I64, 8),
            (Opcode::Load, I32, 4),
            (Opcode::Load, I8, 1),
            (Opcode::Load, F64, 8),
            (Opcode::Load, F32, 4),
            (Opcode::Load, I8X16, 16),
            (Opcode::Uload8, I64, 1),
            (Opcode::Sload8, I32, 1),
            (Opcode::Uload16, I32, 2),
            (Opcode::Sload16, I64, 2),
            (Opcode::Uload32, I64, 4),
            (Opcode::Sload32, I64, 4),
        ];
        let (op, ty, bytes) = rng.pick(kinds);
        if bytes > room {
            return;
        }
        let o = rng.below((room - bytes) as usize + 1) as u32;
        let flags = self.mem_flags(rng, off + o, bytes, false);
        let flags = self.b.func.dfg.mem_flags.insert_unchecked(flags);
        self.set_srcloc();
        let (inst, dfg) = self.b.ins().Load(op, ty, flags, (o as i32).into(), a);
        let v = dfg.first_result(inst);
        self.push(pool, v);
    }

    fn store(&mut self, rng: &mut Rng, pool: &mut Pool) {
        let Some((a, s, off)) = self.addr(rng, pool) else {
            return;
        };
        let size = self.plan.slots[s].size;
        let room = size - off;
        let kinds: &[(Opcode, Type, u32)] = &[
            (Opcode::Store, I64, 8),
            (Opcode::Store, I32, 4),
            (Opcode::Store, I8, 1),
            (Opcode::Store, F64, 8),
            (Opcode::Store, F32, 4),
            (Opcode::Store, I8X16, 16),
            (Opcode::Istore8, I64, 1),
            (Opcode::Istore16, I32, 2),
            (Opcode::Istore32, I64, 4),
        ];
        let (op, ty, bytes) = rng.pick(kinds);
        if bytes > room {
            return;
        }
        let o = rng.below((room - bytes) as usize + 1) as u32;
        let x = self.get(rng, pool, ty);
        let flags = self.mem_flags(rng, off + o, bytes, true);
        let flags = self.b.func.dfg.mem_flags.insert_unchecked(flags);
        self.set_srcloc();
        self.b.ins().Store(op, ty, flags, (o as i32).into(), x, a);
    }

    fn atomic(&mut self, rng: &mut Rng, pool: &mut Pool) {
        let Some((a, s, off)) = self.addr(rng, pool) else {
            return;
        };
        let ty = rng.pick(&[I64, I32]);
        let bytes = ty.bytes();
        if off + bytes > self.plan.slots[s].size {
            return;
        }
        let flags = self.mem_flags(rng, off, bytes, false);
        // cranelift 0.135's printer drops the flags of atomic_rmw and atomic_cas (the
        // reader parses them); the text round trips print with clif-merge's writer
        // (`emit::clif_text`), which writes them.
        let rmw_flags = flags;
        self.set_srcloc();
        match rng.below(4) {
            0 => {
                let x = self.get(rng, pool, ty);
                let op = rng.pick(AtomicRmwOp::all());
                self.set_srcloc();
                let v = self.b.ins().atomic_rmw(ty, rmw_flags, op, a, x);
                self.push(pool, v);
            }
            1 => {
                let e = self.get(rng, pool, ty);
                let x = self.get(rng, pool, ty);
                self.set_srcloc();
                let v = self.b.ins().atomic_cas(rmw_flags, a, e, x);
                self.push(pool, v);
            }
            2 => {
                let v = self.b.ins().atomic_load(ty, flags, a);
                self.push(pool, v);
            }
            _ => {
                let x = self.get(rng, pool, ty);
                self.set_srcloc();
                self.b.ins().atomic_store(flags, x, a);
            }
        }
    }

    fn call(&mut self, rng: &mut Rng, pool: &mut Pool, may_self_call: bool) {
        if self.rich() && !self.in_unreachable && rng.chance(30) {
            // A value that must be in the stack maps of the safepoints it is live across
            // (cranelift-frontend spills it and records user stack map entries).
            let cands: Vec<Value> = pool
                .vals
                .iter()
                .filter(|(_, t)| *t == I32 || *t == I64)
                .map(|(v, _)| *v)
                .collect();
            if !cands.is_empty() {
                let v = rng.pick(&cands);
                self.b.declare_value_needs_stack_map(v);
            }
        }
        let which = rng.below(if may_self_call { 7 } else { 6 });
        match which {
            0..=2 => {
                let i = rng.below(4);
                let colocated = rng.chance(50);
                let patchable = i == 3 && colocated && rng.chance(50);
                let f = self.func_ref(FuncKey::Callee(i, colocated, patchable));
                let args = self.args_for(rng, pool, &callee_sig(i));
                self.set_srcloc();
                let inst = self.b.ins().call(f, &args);
                let rs = self.b.inst_results(inst).to_vec();
                for r in rs {
                    self.push(pool, r);
                }
            }
            3 | 4 => {
                // func_addr, then call_indirect through it.
                let i = rng.below(2);
                let existing: Vec<(Value, usize)> =
                    pool.fnaddrs.iter().copied().filter(|x| x.1 == i).collect();
                let addr = if !existing.is_empty() && rng.chance(50) {
                    existing[0].0
                } else {
                    let f = self.func_ref(FuncKey::Callee(i, rng.chance(50), false));
                    self.set_srcloc();
                    let v = self.b.ins().func_addr(I64, f);
                    pool.fnaddrs.push((v, i));
                    self.push(pool, v);
                    v
                };
                if rng.chance(75) {
                    let sig = self.sig_ref(i);
                    let args = self.args_for(rng, pool, &callee_sig(i));
                    self.set_srcloc();
                    let inst = self.b.ins().call_indirect(sig, addr, &args);
                    let r = self.b.inst_results(inst)[0];
                    self.push(pool, r);
                }
            }
            5 => {
                // A call to callee 0's twin by another name: same signature, other name.
                let f = self.func_ref(FuncKey::Callee(1, rng.chance(50), false));
                let a = self.get(rng, pool, I64);
                self.set_srcloc();
                let inst = self.b.ins().call(f, &[a]);
                let r = self.b.inst_results(inst)[0];
                self.push(pool, r);
            }
            _ => {
                // A call to the function itself.
                let f = self.func_ref(FuncKey::SelfRef(rng.chance(50)));
                let sig = self.plan.sig.clone();
                let mut args = self.args_for(rng, pool, &sig);
                if self.exec() {
                    // Bounded recursion: p0 >> 16 reaches 0 within four calls.
                    let p0 = self.b.block_params(self.blocks[0])[0];
                    let k = self.b.ins().iconst(I64, 16);
                    args[0] = self.b.ins().ushr(p0, k);
                }
                self.set_srcloc();
                let inst = self.b.ins().call(f, &args);
                let rs = self.b.inst_results(inst).to_vec();
                for r in rs {
                    self.push(pool, r);
                }
            }
        }
    }

    fn args_for(&mut self, rng: &mut Rng, pool: &mut Pool, sig: &Signature) -> Vec<Value> {
        let tys: Vec<(Type, ArgumentPurpose)> = sig
            .params
            .iter()
            .map(|p| (p.value_type, p.purpose))
            .collect();
        tys.into_iter()
            .map(|(ty, purpose)| {
                if purpose == ArgumentPurpose::VMContext {
                    let i = self
                        .plan
                        .sig
                        .params
                        .iter()
                        .position(|p| p.purpose == ArgumentPurpose::VMContext)
                        .unwrap();
                    self.b.block_params(self.blocks[0])[i]
                } else {
                    self.get(rng, pool, ty)
                }
            })
            .collect()
    }

    fn vector(&mut self, rng: &mut Rng, pool: &mut Pool) {
        match rng.below(5) {
            0 => {
                let x = self.get(rng, pool, I8);
                self.set_srcloc();
                let v = self.b.ins().splat(I8X16, x);
                self.push(pool, v);
            }
            1 => {
                let a = self.get(rng, pool, I8X16);
                let b = self.get(rng, pool, I8X16);
                let mask: Vec<u8> = (0..16).map(|_| rng.below(32) as u8).collect();
                let imm = self.b.func.dfg.immediates.push(ConstantData::from(mask));
                self.set_srcloc();
                let v = self.b.ins().shuffle(a, b, imm);
                self.push(pool, v);
            }
            2 => {
                let a = self.get(rng, pool, I8X16);
                self.set_srcloc();
                let v = self.b.ins().extractlane(a, rng.below(16) as u8);
                self.push(pool, v);
            }
            3 => {
                let a = self.get(rng, pool, I8X16);
                let x = self.get(rng, pool, I8);
                self.set_srcloc();
                let v = self.b.ins().insertlane(a, x, rng.below(16) as u8);
                self.push(pool, v);
            }
            _ => {
                let a = self.get(rng, pool, I8X16);
                let b = self.get(rng, pool, I8X16);
                self.set_srcloc();
                let v = self.binary(rng.pick(VEC_BINARY), a, b);
                self.push(pool, v);
            }
        }
    }

    /// Arguments for a jump to logical block `target` (a fresh small counter for loops).
    fn block_args(&mut self, rng: &mut Rng, pool: &mut Pool, target: usize) -> Vec<BlockArg> {
        let tp = &self.plan.blocks[target];
        let tys = tp.params.clone();
        let is_loop = tp.is_loop;
        let mut args = Vec::new();
        for (k, &ty) in tys.iter().enumerate() {
            if k == 0 && self.exec() {
                args.push(BlockArg::Value(self.cur_acc.unwrap()));
            } else if is_loop && k + 1 == tys.len() {
                self.set_srcloc();
                let c = self.b.ins().iconst(I32, rng.range(0, 2) as i64);
                args.push(BlockArg::Value(c));
            } else {
                args.push(BlockArg::Value(self.get(rng, pool, ty)));
            }
        }
        args
    }

    fn later(&self, rng: &mut Rng, li: usize) -> usize {
        let n = self.plan.blocks.len();
        rng.range(li + 1, n - 1)
    }

    fn terminator(&mut self, rng: &mut Rng, pool: &mut Pool, li: usize, counter: Option<Value>) {
        let n = self.plan.blocks.len();
        let last = li + 1 == n;
        if let Some(cnt) = counter {
            // The counted loop.
            let next = self.later(rng, li);
            let mut back: Vec<BlockArg> = Vec::new();
            let tys = self.plan.blocks[li].params.clone();
            for (k, &ty) in tys[..tys.len() - 1].iter().enumerate() {
                if k == 0 && self.exec() {
                    back.push(BlockArg::Value(self.cur_acc.unwrap()));
                } else {
                    back.push(BlockArg::Value(self.get(rng, pool, ty)));
                }
            }
            self.set_srcloc();
            let one = self.b.ins().iconst(I32, 1);
            let dec = self.b.ins().isub(cnt, one);
            back.push(BlockArg::Value(dec));
            let fwd = self.block_args(rng, pool, next);
            self.set_srcloc();
            self.b
                .ins()
                .brif(cnt, self.blocks[li], &back, self.blocks[next], &fwd);
            return;
        }
        if li == 0 && self.plan.recursive {
            let p0 = self.b.block_params(self.blocks[0])[0];
            let then_args = self.block_args(rng, pool, 1);
            let else_args = self.block_args(rng, pool, n - 1);
            self.set_srcloc();
            self.b.ins().brif(
                p0,
                self.blocks[1],
                &then_args,
                self.blocks[n - 1],
                &else_args,
            );
            return;
        }
        if let Some(k) = self.try_call_plan(li) {
            return self.try_call(rng, pool, li, k);
        }
        let tiny = matches!(self.cfg.flavor, Flavor::Tiny | Flavor::Small);
        let choice = if last {
            if !tiny && rng.chance(3) {
                4
            } else if self.rich() && self.plan.sig.call_conv == CallConv::Tail && rng.chance(20) {
                5
            } else {
                0
            }
        } else {
            match rng.below(if tiny { 3 } else { 30 }) {
                0 => 0,
                1..=9 => 1,
                10..=22 => 2,
                23..=28 => 3,
                _ => 4,
            }
        };
        match choice {
            0 => self.ret(rng, pool),
            1 => {
                let t = self.later(rng, li);
                let args = self.block_args(rng, pool, t);
                self.set_srcloc();
                self.b.ins().jump(self.blocks[t], &args);
            }
            2 => {
                let cty = match self.cfg.flavor {
                    Flavor::Tiny => I32,
                    Flavor::Small => I64,
                    _ => rng.pick(int_types()),
                };
                let c = self.get(rng, pool, cty);
                let t = self.later(rng, li);
                let e = self.later(rng, li);
                let targs = self.block_args(rng, pool, t);
                let eargs = self.block_args(rng, pool, e);
                self.set_srcloc();
                self.b
                    .ins()
                    .brif(c, self.blocks[t], &targs, self.blocks[e], &eargs);
            }
            3 => {
                let x = self.get(rng, pool, I32);
                let three = self.b.ins().iconst(I32, 3);
                let idx = self.b.ins().band(x, three);
                let d = self.later(rng, li);
                let dargs = self.block_args(rng, pool, d);
                let def = self.b.func.dfg.block_call(self.blocks[d], &dargs);
                let mut table = Vec::new();
                for _ in 0..rng.range(1, 4) {
                    let t = self.later(rng, li);
                    let targs = self.block_args(rng, pool, t);
                    table.push(self.b.func.dfg.block_call(self.blocks[t], &targs));
                }
                let jt = self.b.create_jump_table(JumpTableData::new(def, &table));
                self.set_srcloc();
                self.b.ins().br_table(idx, jt);
            }
            4 => {
                let code = rng.pick(&[
                    TrapCode::unwrap_user(1),
                    TrapCode::unwrap_user(7),
                    TrapCode::HEAP_OUT_OF_BOUNDS,
                ]);
                self.set_srcloc();
                self.b.ins().trap(code);
            }
            _ => {
                let f = self.func_ref(FuncKey::SelfRef(true));
                let sig = self.plan.sig.clone();
                let args = self.args_for(rng, pool, &sig);
                self.set_srcloc();
                self.b.ins().return_call(f, &args);
            }
        }
    }

    fn try_call(&mut self, rng: &mut Rng, pool: &mut Pool, li: usize, handlers: usize) {
        let f = self.func_ref(FuncKey::Thrower);
        let sig = self.sig_ref(0);
        let a = self.get(rng, pool, I64);
        // Normal return: the call's result, then ordinary arguments.
        let t = self.later(rng, li);
        let tys = self.plan.blocks[t].params.clone();
        let mut nargs = Vec::new();
        let mut used_ret = false;
        for (k, &ty) in tys.iter().enumerate() {
            let counter = self.plan.blocks[t].is_loop && k + 1 == tys.len();
            if ty == I64 && !used_ret && !counter {
                nargs.push(BlockArg::TryCallRet(0));
                used_ret = true;
            } else if counter {
                let c = self.b.ins().iconst(I32, 1);
                nargs.push(BlockArg::Value(c));
            } else {
                nargs.push(BlockArg::Value(self.get(rng, pool, ty)));
            }
        }
        let normal = self.b.func.dfg.block_call(self.blocks[t], &nargs);
        let mut items = Vec::new();
        for h in 0..handlers {
            let target = self.later(rng, li);
            let mut hargs = self.block_args(rng, pool, target);
            // The first i64 parameter of a handler receives an exception payload.
            if let Some(k) = self.plan.blocks[target]
                .params
                .iter()
                .position(|&t| t == I64)
            {
                hargs[k] = BlockArg::TryCallExn(rng.below(2) as u32);
            }
            let call = self.b.func.dfg.block_call(self.blocks[target], &hargs);
            if h == 0 {
                let tag = ExceptionTag::with_number(rng.range(1, 3) as u32).unwrap();
                items.push(ExceptionTableItem::Tag(tag, call));
            } else {
                items.push(ExceptionTableItem::Default(call));
            }
        }
        let et = self
            .b
            .func
            .dfg
            .exception_tables
            .push(ExceptionTableData::new(sig, normal, items));
        self.set_srcloc();
        if rng.chance(30) {
            let addr = self.b.ins().func_addr(I64, f);
            self.b.ins().try_call_indirect(addr, &[a], et);
        } else {
            self.b.ins().try_call(f, &[a], et);
        }
    }

    fn ret(&mut self, rng: &mut Rng, pool: &mut Pool) {
        let rets: Vec<Type> = self.plan.sig.returns.iter().map(|p| p.value_type).collect();
        let mut vals = Vec::new();
        if self.exec() {
            // Fold every value of the block into the first result, so that any difference
            // anywhere shows in the output.
            let acc_in = self.acc_in;
            let fold = self.fold(pool, acc_in, true);
            vals.push(fold);
            for &ty in &rets[1..] {
                vals.push(self.get(rng, pool, ty));
            }
        } else {
            for &ty in &rets {
                vals.push(self.get(rng, pool, ty));
            }
        }
        self.set_srcloc();
        self.b.ins().return_(&vals);
    }

    /// Fold every value of `pool` into a checksum (starting from `acc`), and at a return
    /// also the contents of every stack slot, so that any difference anywhere shows.
    fn fold(&mut self, pool: &Pool, acc: Option<Value>, memory: bool) -> Value {
        let mut acc = match acc {
            Some(a) => a,
            None => self.b.ins().iconst(I64, 0x1234_5678),
        };
        let k = self.b.ins().iconst(I64, 0x0000_0100_0000_01B3);
        let mut vals = pool.vals.clone();
        if memory {
            for s in 0..self.slots.len() {
                let a = self.b.ins().stack_addr(I64, self.slots[s], 0);
                for k in 0..self.plan.slots[s].size / 8 {
                    let w = self
                        .b
                        .ins()
                        .load(I64, MemFlagsData::new(), a, (8 * k) as i32);
                    vals.push((w, I64));
                }
            }
        }
        for &(v, ty) in &vals {
            let words: Vec<Value> = match ty {
                I64 => vec![v],
                I8 | I16 | I32 => vec![self.b.ins().uextend(I64, v)],
                F32 => {
                    let i = self.b.ins().bitcast(I32, MemFlagsData::new(), v);
                    vec![self.b.ins().uextend(I64, i)]
                }
                F64 => vec![self.b.ins().bitcast(I64, MemFlagsData::new(), v)],
                I8X16 => {
                    let mut f = MemFlagsData::new();
                    f.set_endianness(ir::Endianness::Little);
                    let w = self.b.ins().bitcast(I64X2, f, v);
                    vec![
                        self.b.ins().extractlane(w, 0),
                        self.b.ins().extractlane(w, 1),
                    ]
                }
                _ => vec![],
            };
            for w in words {
                let r = self.b.ins().imul(acc, k);
                acc = self.b.ins().bxor(r, w);
            }
        }
        acc
    }

    /// An extra block that nothing reaches: random instructions, then a jump or branch
    /// into the function or a return.
    fn fill_unreachable(&mut self, blk: Block, seed: u64) {
        let mut rng = Rng::new(seed);
        self.b.switch_to_block(blk);
        let mut pool = Pool {
            vals: Vec::new(),
            addrs: Vec::new(),
            fnaddrs: Vec::new(),
        };
        for _ in 0..rng.range(0, 2) {
            let ty = rng.pick(value_types(self.cfg.flavor));
            let v = self.b.append_block_param(blk, ty);
            pool.vals.push((v, ty));
        }
        let entry_params: Vec<Value> = self.b.block_params(self.blocks[0]).to_vec();
        for (i, &v) in entry_params.iter().enumerate() {
            if self.plan.sig.params[i].purpose == ArgumentPurpose::Normal {
                self.push(&mut pool, v);
            }
        }
        self.in_unreachable = true;
        for _ in 0..rng.range(0, 4) {
            self.body_inst(&mut rng, &mut pool, 0, false);
        }
        self.in_unreachable = false;
        if self.exec() {
            self.acc_in = None;
            self.cur_acc = Some(self.fold(&pool, None, false));
        }
        let n = self.plan.blocks.len();
        if n > 1 && rng.chance(70) {
            let t = rng.range(1, n - 1);
            let args = self.block_args(&mut rng, &mut pool, t);
            self.b.ins().jump(self.blocks[t], &args);
        } else {
            self.ret(&mut rng, &mut pool);
        }
    }
}
