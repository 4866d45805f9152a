//! The canonical encoding of a function: the ground truth of the comparator's total order.
//!
//! LLVM's `FunctionComparator` walks two functions in lockstep and compares them part by
//! part, most significant first, giving every local value a *serial number* in the order
//! it is met so that two functions equal up to renaming compare equal. Here each function
//! is instead turned, on its own, into a sequence of `u64` tokens in which every local
//! entity is replaced by its serial number, and two functions are ordered by comparing
//! their sequences lexicographically. While two functions agree, both encodings have made
//! the same choices, so at the first difference the two tokens mean the same kind of
//! thing, and the order is exactly LLVM's lockstep order. Because each encoding
//! depends on one function only, the order is a total order by construction: reflexive,
//! antisymmetric and transitive, including the self-reference rule (a call to oneself is a
//! token of its own, not a pairing of the two functions, so it cannot break transitivity
//! the way LLVM's cross-reference case does).
//!
//! What is encoded, in order:
//! - the header: calling convention, every parameter and return (`AbiParam` type, purpose,
//!   extension), then the `stack_limit` global value;
//! - every reachable block in the CFG-ordered walk ([`CfgWalk`]): its serial number, cold
//!   flag, parameters (type each), then each instruction: opcode, controlling type, every
//!   field of its `InstructionData` format (an exhaustive match without a catch-all arm),
//!   its results (type each) and its user stack map entries;
//! - a trailer: the multiset of stack slots that no reachable instruction names (they still
//!   take frame space).
//!
//! Entities are encoded by *content*, never by their numbers: values, blocks, stack slots
//! and global values by serial number of first appearance plus, at that first appearance,
//! their content (value type, slot kind/size/alignment, global value kind and fields);
//! external functions by resolved name, signature, `colocated` and `patchable`; signatures,
//! constants, shuffle masks, jump tables and exception tables by their contents; memory
//! flags resolved through `dfg.mem_flags` with their alias region's `user_id`; constants by
//! their bits (`-0.0` differs from `0.0`, NaN payloads differ). Source locations, value
//! labels, debug tags and the function's own name are not encoded: they do not change what
//! the function does.
//!
//! Direct call targets are encoded through a [`CallTargets`] policy: by name (with a call
//! to oneself as a token of its own), or by the merger's current class of the callee.
//! `func_addr` and `symbol` global values encode the name (the address of a function is
//! observable, so two functions that take their own addresses are different), unless the
//! policy knows the address is that of a whole class: the merger's policy does so for a
//! local function whose address nobody compares, which it erases into its group's body.
//!
//! For merge-similar the policy may also declare *holes* ([`CallTargets::is_hole`]): the
//! immediates of `iconst`, `f32const` and `f64const`, load and store offsets, the callees
//! of direct `call`/`return_call`, the functions `func_addr` takes the address of and the
//! symbols of `symbol_value`, whose values are left out (a placeholder
//! stands in their place), and the permissions among memory flags (`aligned`,
//! `readonly`, `can_move`, `notrap` against `heap_oob`), so that functions differing only
//! there encode the same. Under such a policy alias regions are encoded by serial number,
//! as local names; everything else is encoded exactly as above.

use cranelift_codegen::ir::{
    self, AbiParam, AliasRegion, ArgumentExtension, ArgumentPurpose, Block, BlockArg, BlockCall,
    DynamicStackSlot, ExceptionTableItem, ExternalName, FuncRef, Function, GlobalValue,
    GlobalValueData, Inst, InstructionData, MemFlags, SigRef, Signature, StackSlot, Type, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_entity::EntityRef;

use super::permissions::exact_trap_code;
use super::walk::CfgWalk;
use crate::names::names_itself;
use crate::target::TargetInfo;

/// One unit of the encoding.
pub type Token = u64;

/// What a token stands for, in words, for explanations.
pub type What = &'static str;

/// Where tokens go. The comparator keeps only the tokens; the explainer also keeps what
/// each one means and which instruction it came from.
pub trait Sink {
    /// Append one token.
    fn push(&mut self, token: Token, what: What, inst: Option<Inst>);
}

impl Sink for Vec<Token> {
    #[inline]
    fn push(&mut self, token: Token, _what: What, _inst: Option<Inst>) {
        Vec::push(self, token);
    }
}

/// Tokens together with their meaning and source instruction.
#[derive(Default)]
pub struct Annotated {
    /// The tokens, as the comparator sees them.
    pub tokens: Vec<Token>,
    /// For each token: what it is and the instruction it belongs to.
    pub origins: Vec<(What, Option<Inst>)>,
}

impl Annotated {
    pub(crate) fn clear(&mut self) {
        self.tokens.clear();
        self.origins.clear();
    }
}

impl Sink for Annotated {
    fn push(&mut self, token: Token, what: What, inst: Option<Inst>) {
        self.tokens.push(token);
        self.origins.push((what, inst));
    }
}

/// How a direct call's target is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallTarget {
    /// The function calls itself (LLVM's self-reference rule).
    SelfCall,
    /// A callee the merger has put in an equivalence class: encoded by the class only.
    Class(u32),
    /// Encoded by the callee's resolved name.
    Name,
}

/// The policy for encoding direct call targets (`call`, `return_call`, `try_call`).
pub trait CallTargets {
    /// How the call through `callee` inside `func` is encoded.
    fn call_target(&self, func: &Function, callee: FuncRef) -> CallTarget;

    /// How the address of `callee` (`func_addr`) is encoded. By name unless the policy
    /// knows the address is that of a whole class (a local function whose address nobody
    /// compares, which the merger erases into its group's body).
    fn address_target(&self, _func: &Function, _callee: FuncRef) -> CallTarget {
        CallTarget::Name
    }

    /// How the `symbol` global value `gv` is encoded; see [`CallTargets::address_target`].
    fn symbol_target(&self, _func: &Function, _gv: GlobalValue) -> CallTarget {
        CallTarget::Name
    }

    /// Whether the constant, offset, callee, address or memory flags at `site` of `inst`
    /// are a *hole*: left out of the encoding, with a placeholder in their place, so that
    /// functions that differ only there encode the same (merge-similar). For
    /// [`HoleSite::Flags`], only the flags that permit optimisation are left out
    /// (see [`HoleSite::Flags`]). Nothing is a hole by default.
    ///
    /// Only a policy with [`CallTargets::MAKES_HOLES`] may answer `true`.
    fn is_hole(&self, _func: &Function, _inst: Inst, _site: HoleSite) -> bool {
        false
    }

    /// Whether this policy declares holes. Its encodings then tag every immediate as a
    /// hole or a value before the value itself, so that no constant, whatever its bits,
    /// can meet a placeholder at the same place, whichever constants the policy makes
    /// holes. (Callee holes carry a tag of their own; offsets are 32 bits sign-extended,
    /// which the placeholder is not.) Encodings of other policies are unchanged.
    const MAKES_HOLES: bool = false;
}

/// A place the encoder offers to a [`CallTargets`] policy as a possible hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoleSite {
    /// The immediate of `iconst`, its bits as stored.
    Constant(i64),
    /// The callee of a direct `call` or `return_call` (never of `try_call`).
    Callee(FuncRef),
    /// The offset of a `load` or `store` (any width), sign-extended.
    Offset(i64),
    /// The immediate of `f32const` or `f64const`, its bits.
    Float(u64),
    /// The function whose address `func_addr` takes.
    Address(FuncRef),
    /// The `symbol` global value whose address `symbol_value` takes.
    Symbol(GlobalValue),
    /// The memory flags of a load, store or atomic instruction: a hole leaves out the
    /// flags that only permit optimisation (`aligned`, `readonly`, `can_move`, and
    /// `notrap` against the default `heap_oob`), keeping the rest exact.
    Flags(MemFlags),
}

/// The detector's own policy: callees by name, and a call to oneself as [`CallTarget::SelfCall`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ByName;

impl CallTargets for ByName {
    fn call_target(&self, func: &Function, callee: FuncRef) -> CallTarget {
        if names_itself(func, &func.dfg.ext_funcs[callee].name) {
            CallTarget::SelfCall
        } else {
            CallTarget::Name
        }
    }
}

// Structural tags. Each is distinct from every other token that can stand at the same
// place, so that no chunk of the encoding is a proper prefix of another.
const TAG_HEADER: Token = 0xC1F0_0000_0000_0001;
const TAG_BLOCK: Token = 0xC1F0_0000_0000_0002;
const TAG_BLOCK_END: Token = 0xC1F0_0000_0000_0003;
const TAG_END: Token = 0xC1F0_0000_0000_0004;
const TAG_INST: Token = 0xC1F0_0000_0001_0000; // | opcode
/// A hole's placeholder: stands where the constant or the callee's identity would be.
const HOLE: Token = 0xC1F0_0000_0000_0005;
/// Before an immediate that is not a hole, under a policy that makes holes.
const NOT_HOLE: Token = 0xC1F0_0000_0000_0006;
/// An entity the function names but does not declare (the reader allows a few).
const UNDECLARED: Token = Token::MAX;

/// Encodes one function chunk by chunk: the header, then one chunk per block of the walk,
/// then the trailer.
pub struct Encoder<'a, C: CallTargets> {
    func: &'a Function,
    target: &'a TargetInfo,
    calls: &'a C,
    walk: CfgWalk<'a>,
    state: State,
    inst: Option<Inst>,
    values: Serials<Value>,
    blocks: Serials<Block>,
    global_values: Serials<GlobalValue>,
    stack_slots: Serials<StackSlot>,
    dynamic_slots: Serials<DynamicStackSlot>,
    /// Alias regions by serial number, under a policy that makes holes.
    regions: Serials<AliasRegion>,
    /// The tokens of the function's first memory flags, once encoded (a function has few
    /// distinct ones, and many loads and stores): exact, and with the permissions left
    /// out (a hole).
    mem_flags: [[Option<(Token, Token)>; 2]; MEM_FLAGS_KEPT],
}

/// How many memory flags an encoder keeps the tokens of.
const MEM_FLAGS_KEPT: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Blocks,
    Done,
}

/// Serial numbers in order of first appearance, LLVM's `sn_map`.
struct Serials<K: cranelift_entity::EntityRef> {
    map: Vec<u32>, // serial + 1; 0 = not met yet
    next: u32,
    key: std::marker::PhantomData<K>,
}

/// The numbering maps of one encoder: values, blocks, global values, stack slots, dynamic
/// stack slots, alias regions.
type Maps = [Vec<u32>; 6];

thread_local! {
    /// The maps of finished encoders on this thread, for the next ones: encoders are many
    /// and short (one per function), and allocating is a good part of a short one's cost.
    static SPARE_MAPS: std::cell::RefCell<Vec<Maps>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl<K: cranelift_entity::EntityRef> Serials<K> {
    /// Room for `n` entities in `map` (zeroed up front, so numbering never grows it for a
    /// declared entity).
    fn new(mut map: Vec<u32>, n: usize) -> Self {
        map.clear();
        map.resize(n, 0);
        Self {
            map,
            next: 0,
            key: std::marker::PhantomData,
        }
    }

    /// The slot of `k`, grown for an entity beyond the declared ones.
    #[inline]
    fn slot(&mut self, k: K) -> &mut u32 {
        let i = k.index();
        if i >= self.map.len() {
            self.map.resize(i + 1, 0);
        }
        &mut self.map[i]
    }

    /// The serial number of `k`, and whether this is its first appearance.
    #[inline]
    fn get(&mut self, k: K) -> (u32, bool) {
        let next = self.next;
        let slot = self.slot(k);
        if *slot == 0 {
            *slot = next + 1;
            self.next = next + 1;
            (next, true)
        } else {
            (*slot - 1, false)
        }
    }

    fn seen(&self, k: K) -> bool {
        self.map.get(k.index()).is_some_and(|&s| s != 0)
    }
}

impl<C: CallTargets> Drop for Encoder<'_, C> {
    fn drop(&mut self) {
        let maps: Maps = [
            std::mem::take(&mut self.values.map),
            std::mem::take(&mut self.blocks.map),
            std::mem::take(&mut self.global_values.map),
            std::mem::take(&mut self.stack_slots.map),
            std::mem::take(&mut self.dynamic_slots.map),
            std::mem::take(&mut self.regions.map),
        ];
        if maps.iter().map(Vec::capacity).sum::<usize>() > 1 << 16 {
            return;
        }
        // `try_with`: an encoder dropped while the thread exits just frees its maps.
        let _ = SPARE_MAPS.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < 8 {
                spare.push(maps);
            }
        });
    }
}

impl<'a, C: CallTargets> Encoder<'a, C> {
    /// An encoder for `func` under `target`, encoding call targets by `calls`.
    pub fn new(func: &'a Function, target: &'a TargetInfo, calls: &'a C) -> Self {
        Self::with_walk(func, target, calls, CfgWalk::new(func))
    }

    /// [`Encoder::new`] with the walk of `func` given (a replay of an earlier walk).
    pub(crate) fn with_walk(
        func: &'a Function,
        target: &'a TargetInfo,
        calls: &'a C,
        walk: CfgWalk<'a>,
    ) -> Self {
        let [values, blocks, global_values, stack_slots, dynamic_slots, regions] = SPARE_MAPS
            .with(|spare| spare.borrow_mut().pop())
            .unwrap_or_default();
        Self {
            func,
            target,
            calls,
            walk,
            state: State::Header,
            inst: None,
            values: Serials::new(values, func.dfg.num_values()),
            blocks: Serials::new(blocks, func.dfg.num_blocks()),
            global_values: Serials::new(global_values, func.global_values.len()),
            stack_slots: Serials::new(stack_slots, func.sized_stack_slots.len()),
            dynamic_slots: Serials::new(dynamic_slots, func.dynamic_stack_slots.len()),
            regions: Serials::new(regions, func.dfg.alias_regions.len()),
            mem_flags: [[None; 2]; MEM_FLAGS_KEPT],
        }
    }

    /// The function being encoded.
    pub fn func(&self) -> &'a Function {
        self.func
    }

    /// Encode the next chunk into `sink`. Returns the block the chunk encodes (`None` for
    /// the header and the trailer), or `Err(())` once everything has been encoded.
    #[allow(clippy::result_unit_err)]
    pub fn next_chunk(&mut self, sink: &mut impl Sink) -> Result<Option<Block>, ()> {
        match self.state {
            State::Header => {
                self.header(sink);
                self.state = State::Blocks;
                Ok(None)
            }
            State::Blocks => match self.walk.next() {
                Some(block) => {
                    self.block(block, sink);
                    Ok(Some(block))
                }
                None => {
                    self.trailer(sink);
                    self.state = State::Done;
                    Ok(None)
                }
            },
            State::Done => Err(()),
        }
    }

    /// Encode the whole function into `sink`.
    pub fn encode_all(mut self, sink: &mut impl Sink) {
        while self.next_chunk(sink).is_ok() {}
    }

    #[inline]
    fn push(&self, sink: &mut impl Sink, token: Token, what: What) {
        sink.push(token, what, self.inst);
    }

    fn header(&mut self, sink: &mut impl Sink) {
        self.push(sink, TAG_HEADER, "function header");
        let func = self.func;
        let sig = &func.signature;
        self.signature(sig, sink);
        match self.func.stack_limit {
            Some(gv) => {
                self.push(sink, 1, "stack_limit");
                self.global_value(gv, sink);
            }
            None => self.push(sink, 0, "stack_limit"),
        }
    }

    fn signature(&mut self, sig: &Signature, sink: &mut impl Sink) {
        self.push(sink, call_conv_token(sig.call_conv), "calling convention");
        self.push(sink, sig.params.len() as Token, "parameter count");
        for p in &sig.params {
            self.abi_param(p, sink, "parameter");
        }
        self.push(sink, sig.returns.len() as Token, "return count");
        for p in &sig.returns {
            self.abi_param(p, sink, "return");
        }
    }

    #[inline]
    fn abi_param(&mut self, p: &AbiParam, sink: &mut impl Sink, what: What) {
        self.push(sink, type_token(p.value_type), what);
        let (purpose, arg) = match p.purpose {
            ArgumentPurpose::Normal => (0, 0),
            ArgumentPurpose::StructArgument(size) => (1, size),
            ArgumentPurpose::StructReturn => (2, 0),
            ArgumentPurpose::VMContext => (3, 0),
        };
        self.push(sink, purpose, what);
        self.push(sink, arg.into(), what);
        let ext = match p.extension {
            ArgumentExtension::None => 0,
            ArgumentExtension::Uext => 1,
            ArgumentExtension::Sext => 2,
        };
        self.push(sink, ext, what);
    }

    fn block(&mut self, block: Block, sink: &mut impl Sink) {
        self.inst = None;
        self.push(sink, TAG_BLOCK, "block");
        self.block_ref(block, sink);
        self.push(
            sink,
            self.func.layout.is_cold(block) as Token,
            "cold block flag",
        );
        let func = self.func;
        let params = func.dfg.block_params(block);
        self.push(sink, params.len() as Token, "block parameter count");
        for &v in params {
            self.value(v, sink, "block parameter");
        }
        for inst in func.layout.block_insts(block) {
            self.inst = Some(inst);
            self.instruction(inst, sink);
        }
        self.inst = None;
        self.push(sink, TAG_BLOCK_END, "end of block");
    }

    fn trailer(&mut self, sink: &mut impl Sink) {
        self.inst = None;
        self.push(sink, TAG_END, "end of function");
        let mut unused: Vec<(Token, Token, Token)> = self
            .func
            .sized_stack_slots
            .iter()
            .filter(|(slot, _)| !self.stack_slots.seen(*slot))
            .map(|(_, d)| (slot_kind_token(d.kind), d.size.into(), d.align_shift.into()))
            .collect();
        unused.sort_unstable();
        self.push(sink, unused.len() as Token, "unused stack slot count");
        for (kind, size, align) in unused {
            self.push(sink, kind, "unused stack slot kind");
            self.push(sink, size, "unused stack slot size");
            self.push(sink, align, "unused stack slot alignment");
        }
        // Unused dynamic slots take frame space too: their kind, vector type and scale.
        // The scale is described by its global value's text, which is canonical for the
        // usual `dyn_scale_target_const` (a loaded scale prints its base's number, so two
        // such functions may be called different: never equal wrongly).
        let func = self.func;
        let mut unused_dynamic: Vec<(Token, Token, String)> = func
            .dynamic_stack_slots
            .iter()
            .filter(|(slot, _)| !self.dynamic_slots.seen(*slot))
            .map(|(_, d)| {
                let Some(ty) = func.dfg.dynamic_types.get(d.dyn_ty) else {
                    return (slot_kind_token(d.kind), UNDECLARED, String::new());
                };
                let scale = func
                    .global_values
                    .get(ty.dynamic_scale)
                    .map_or_else(String::new, |gv| gv.to_string());
                (
                    slot_kind_token(d.kind),
                    type_token(ty.base_vector_ty),
                    scale,
                )
            })
            .collect();
        unused_dynamic.sort_unstable();
        self.push(
            sink,
            unused_dynamic.len() as Token,
            "unused dynamic stack slot count",
        );
        for (kind, base, scale) in unused_dynamic {
            self.push(sink, kind, "unused dynamic stack slot kind");
            self.push(sink, base, "unused dynamic stack slot type");
            self.bytes(scale.as_bytes(), sink, "unused dynamic stack slot scale");
        }
    }

    /// A value operand or definition: its serial number, and its type when first met.
    #[inline(always)]
    fn value(&mut self, v: Value, sink: &mut impl Sink, what: What) {
        // The serial of the value `v` resolves to. Aliases are resolved once per value
        // named: an alias's slot then holds the serial of the value it resolves to.
        let known = *self.values.slot(v);
        if known != 0 {
            self.push(sink, (known - 1).into(), what);
            return;
        }
        let resolved = self.func.dfg.resolve_aliases(v);
        let (serial, first) = self.values.get(resolved);
        if resolved != v {
            *self.values.slot(v) = serial + 1;
        }
        self.push(sink, serial.into(), what);
        if first {
            self.push(sink, type_token(self.func.dfg.value_type(resolved)), what);
        }
    }

    fn values(&mut self, vs: &[Value], sink: &mut impl Sink) {
        self.push(sink, vs.len() as Token, "operand count");
        for &v in vs {
            self.value(v, sink, "operand");
        }
    }

    fn value_list(&mut self, list: &ir::ValueList, sink: &mut impl Sink) {
        let func = self.func;
        let vs = list.as_slice(&func.dfg.value_lists);
        self.values(vs, sink);
    }

    fn block_ref(&mut self, block: Block, sink: &mut impl Sink) {
        let (serial, _) = self.blocks.get(block);
        self.push(sink, serial.into(), "block");
    }

    fn block_call(&mut self, call: &BlockCall, sink: &mut impl Sink) {
        let func = self.func;
        let pool = &func.dfg.value_lists;
        self.block_ref(call.block(pool), sink);
        let args = call.args(pool);
        self.push(sink, args.len() as Token, "block argument count");
        for arg in args {
            match arg {
                BlockArg::Value(v) => {
                    self.push(sink, 0, "block argument");
                    self.value(v, sink, "block argument");
                }
                BlockArg::TryCallRet(n) => {
                    self.push(sink, 1, "block argument");
                    self.push(sink, n.into(), "block argument (call return)");
                }
                BlockArg::TryCallExn(n) => {
                    self.push(sink, 2, "block argument");
                    self.push(sink, n.into(), "block argument (exception payload)");
                }
            }
        }
    }

    fn bytes(&mut self, bytes: &[u8], sink: &mut impl Sink, what: What) {
        self.push(sink, bytes.len() as Token, what);
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.push(sink, u64::from_be_bytes(word), what);
        }
    }

    fn name(&mut self, name: &ExternalName, sink: &mut impl Sink, what: What) {
        match name {
            ExternalName::User(r) => {
                let func = self.func;
                let u = &func.params.user_named_funcs()[*r];
                self.push(sink, 1, what);
                self.push(sink, u.namespace.into(), what);
                self.push(sink, u.index.into(), what);
            }
            ExternalName::TestCase(t) => {
                self.push(sink, 2, what);
                self.bytes(t.raw(), sink, what);
            }
            ExternalName::LibCall(l) => {
                self.push(sink, 3, what);
                self.bytes(l.to_string().as_bytes(), sink, what);
            }
            ExternalName::KnownSymbol(k) => {
                self.push(sink, 4, what);
                self.bytes(k.to_string().as_bytes(), sink, what);
            }
        }
    }

    /// An external function, everything but its identity.
    fn ext_func_attributes(&mut self, f: FuncRef, sink: &mut impl Sink) {
        let data = &self.func.dfg.ext_funcs[f];
        let (colocated, patchable, sig) = (data.colocated, data.patchable, data.signature);
        self.push(sink, colocated as Token, "callee colocated flag");
        self.push(sink, patchable as Token, "callee patchable flag");
        self.sig_ref(sig, sink);
    }

    /// A direct call target: attributes, then identity by the [`CallTargets`] policy.
    fn call_target(&mut self, f: FuncRef, sink: &mut impl Sink) {
        self.ext_func_attributes(f, sink);
        let func = self.func;
        let policy = self.calls.call_target(func, f);
        self.target_identity(policy, &func.dfg.ext_funcs[f].name, sink, "callee");
    }

    /// A function whose address is taken: by name unless the policy says otherwise (see
    /// the module docs), or a hole.
    fn func_addr_target(&mut self, f: FuncRef, sink: &mut impl Sink) {
        self.ext_func_attributes(f, sink);
        let hole = self
            .inst
            .is_some_and(|inst| self.calls.is_hole(self.func, inst, HoleSite::Address(f)));
        if hole {
            self.push(sink, 3, "function whose address is taken (hole)");
            self.push(sink, HOLE, "function whose address is taken (hole)");
            return;
        }
        let func = self.func;
        let policy = self.calls.address_target(func, f);
        self.target_identity(
            policy,
            &func.dfg.ext_funcs[f].name,
            sink,
            "function whose address is taken",
        );
    }

    /// A target's identity under `policy`: itself, its class, or its name.
    fn target_identity(
        &mut self,
        policy: CallTarget,
        name: &ExternalName,
        sink: &mut impl Sink,
        what: What,
    ) {
        match policy {
            CallTarget::SelfCall => self.push(sink, 0, what),
            CallTarget::Class(class) => {
                self.push(sink, 1, what);
                self.push(sink, class.into(), what);
            }
            CallTarget::Name => {
                self.push(sink, 2, what);
                self.name(name, sink, what);
            }
        }
    }

    /// The address of a `symbol` global value as a hole: its kind and flags, not its name
    /// or offset (the global value is not numbered: other uses of it encode it in full).
    fn symbol_hole(&mut self, gv: GlobalValue, sink: &mut impl Sink) {
        let func = self.func;
        let (colocated, tls) = match &func.global_values[gv] {
            GlobalValueData::Symbol { colocated, tls, .. } => (*colocated, *tls),
            GlobalValueData::VMContext
            | GlobalValueData::Load { .. }
            | GlobalValueData::IAddImm { .. }
            | GlobalValueData::DynScaleTargetConst { .. } => (false, true),
        };
        self.push(sink, HOLE, "symbol (hole)");
        self.push(sink, colocated as Token, "symbol colocated flag");
        self.push(sink, tls as Token, "symbol tls flag");
    }

    /// A float constant's bits, or its hole (tagged as integer immediates are, under a
    /// policy that makes holes: any 64 bits may be a float's).
    fn float(&mut self, bits: u64, sink: &mut impl Sink, what: What) {
        let hole = self
            .inst
            .is_some_and(|inst| self.calls.is_hole(self.func, inst, HoleSite::Float(bits)));
        if hole {
            self.push(sink, HOLE, "float immediate (hole)");
        } else {
            if C::MAKES_HOLES {
                self.push(sink, NOT_HOLE, what);
            }
            self.push(sink, bits, what);
        }
    }

    /// A load or store offset, or its hole. An offset is 32 bits sign-extended, so it can
    /// never equal the placeholder, whatever the policy answers where.
    fn offset(&mut self, offset: i64, sink: &mut impl Sink) {
        let hole = self.inst.is_some_and(|inst| {
            self.calls
                .is_hole(self.func, inst, HoleSite::Offset(offset))
        });
        if hole {
            self.push(sink, HOLE, "offset (hole)");
        } else {
            self.push(sink, offset as Token, "offset");
        }
    }

    fn sig_ref(&mut self, sig: SigRef, sink: &mut impl Sink) {
        let func = self.func;
        let sig = &func.dfg.signatures[sig];
        self.signature(sig, sink);
    }

    /// The memory flags of the current instruction: under a policy that makes holes,
    /// their permissions may be a hole.
    fn inst_mem_flags(&mut self, flags: MemFlags, sink: &mut impl Sink) {
        let relaxed = C::MAKES_HOLES
            && self
                .inst
                .is_some_and(|inst| self.calls.is_hole(self.func, inst, HoleSite::Flags(flags)));
        self.mem_flags(flags, relaxed, sink);
    }

    fn mem_flags(&mut self, flags: MemFlags, relaxed: bool, sink: &mut impl Sink) {
        let kept = self
            .mem_flags
            .get(flags.index())
            .and_then(|k| k[usize::from(relaxed)]);
        let (bits, region) = kept.unwrap_or_else(|| self.mem_flags_tokens(flags, relaxed));
        let what = if relaxed {
            "memory flags (permissions a hole)"
        } else {
            "memory flags"
        };
        self.push(sink, bits, what);
        self.push(sink, region, "memory alias region");
    }

    /// The tokens of `flags`: its bits and its alias region. `relaxed` leaves out the
    /// flags that only permit optimisation (a hole, [`super::permissions`]): `aligned`,
    /// `readonly`, `can_move`, and whether an access that traps with the default
    /// `heap_oob` is `notrap` (another trap code stays exact). Under a
    /// policy that makes holes, the region is encoded by its serial number: regions are
    /// names local to the function (alias analysis only asks whether two accesses name
    /// the same one), so two functions that use them alike encode the same.
    fn mem_flags_tokens(&mut self, flags: MemFlags, relaxed: bool) -> (Token, Token) {
        let data = self.func.dfg.mem_flags[flags];
        let endianness = match data.explicit_endianness() {
            None => 0,
            Some(ir::Endianness::Little) => 1,
            Some(ir::Endianness::Big) => 2,
        };
        let bits = if relaxed {
            endianness << 2 | Token::from(exact_trap_code(data)) << 8
        } else {
            let trap = data.trap_code().map_or(0, |t| t.as_raw().get());
            (data.aligned() as Token)
                | (data.readonly() as Token) << 1
                | endianness << 2
                | (data.can_move() as Token) << 4
                | Token::from(trap) << 8
        };
        let region = match data.alias_region() {
            None => 0,
            Some(r) if C::MAKES_HOLES => Token::from(self.regions.get(r).0) + 1,
            Some(r) => Token::from(self.func.dfg.alias_regions[r].user_id) + 1,
        };
        if let Some(kept) = self.mem_flags.get_mut(flags.index()) {
            kept[usize::from(relaxed)] = Some((bits, region));
        }
        (bits, region)
    }

    fn stack_slot(&mut self, slot: StackSlot, sink: &mut impl Sink) {
        let (serial, first) = self.stack_slots.get(slot);
        self.push(sink, serial.into(), "stack slot");
        if first {
            let d = &self.func.sized_stack_slots[slot];
            self.push(sink, slot_kind_token(d.kind), "stack slot kind");
            self.push(sink, d.size.into(), "stack slot size");
            self.push(sink, d.align_shift.into(), "stack slot alignment");
        }
    }

    fn dynamic_slot(&mut self, slot: DynamicStackSlot, sink: &mut impl Sink) {
        let (serial, first) = self.dynamic_slots.get(slot);
        self.push(sink, serial.into(), "dynamic stack slot");
        if first {
            let d = &self.func.dynamic_stack_slots[slot];
            let (kind, dyn_ty) = (d.kind, d.dyn_ty);
            self.push(sink, slot_kind_token(kind), "dynamic stack slot kind");
            // The reader accepts an undeclared dynamic type (and the printer omits their
            // declarations): a token of its own, never a panic.
            let Some(ty) = self.func.dfg.dynamic_types.get(dyn_ty) else {
                self.push(sink, UNDECLARED, "dynamic type (undeclared)");
                return;
            };
            let (base, scale) = (ty.base_vector_ty, ty.dynamic_scale);
            self.push(sink, type_token(base), "dynamic type");
            self.global_value(scale, sink);
        }
    }

    /// A global value: serial number, and on first appearance its content, following the
    /// chain of bases iteratively.
    fn global_value(&mut self, gv: GlobalValue, sink: &mut impl Sink) {
        let ptr = type_token(self.target.pointer_type());
        let mut gv = gv;
        loop {
            let (serial, first) = self.global_values.get(gv);
            self.push(sink, serial.into(), "global value");
            if !first {
                return;
            }
            let func = self.func;
            match &func.global_values[gv] {
                GlobalValueData::VMContext => {
                    self.push(sink, 0, "global value kind (vmctx)");
                    self.push(sink, ptr, "global value type");
                    return;
                }
                GlobalValueData::Load {
                    base,
                    offset,
                    global_type,
                    flags,
                } => {
                    let (base, offset, ty, flags) = (*base, *offset, *global_type, *flags);
                    self.push(sink, 1, "global value kind (load)");
                    self.push(sink, i64::from(offset) as Token, "global value offset");
                    self.push(sink, type_token(ty), "global value type");
                    self.mem_flags(flags, false, sink);
                    gv = base;
                }
                GlobalValueData::IAddImm {
                    base,
                    offset,
                    global_type,
                } => {
                    let (base, offset, ty) = (*base, offset.bits(), *global_type);
                    self.push(sink, 2, "global value kind (iadd_imm)");
                    self.push(sink, offset as Token, "global value offset");
                    self.push(sink, type_token(ty), "global value type");
                    gv = base;
                }
                GlobalValueData::Symbol {
                    name,
                    offset,
                    colocated,
                    tls,
                } => {
                    let (offset, colocated, tls) = (offset.bits(), *colocated, *tls);
                    self.push(sink, 3, "global value kind (symbol)");
                    self.push(sink, ptr, "global value type");
                    let policy = self.calls.symbol_target(func, gv);
                    self.target_identity(policy, name, sink, "symbol");
                    self.push(sink, offset as Token, "symbol offset");
                    self.push(sink, colocated as Token, "symbol colocated flag");
                    self.push(sink, tls as Token, "symbol tls flag");
                    return;
                }
                GlobalValueData::DynScaleTargetConst { vector_type } => {
                    let vector_type = *vector_type;
                    self.push(sink, 4, "global value kind (dyn_scale_target_const)");
                    self.push(sink, ptr, "global value type");
                    self.push(sink, type_token(vector_type), "dynamic scale vector type");
                    return;
                }
            }
        }
    }

    fn exception_table(&mut self, table: ir::ExceptionTable, sink: &mut impl Sink) {
        let func = self.func;
        let data = &func.dfg.exception_tables[table];
        self.sig_ref(data.signature(), sink);
        self.push(
            sink,
            data.items().count() as Token,
            "exception table entry count",
        );
        for item in data.items() {
            match item {
                ExceptionTableItem::Tag(tag, call) => {
                    self.push(sink, 0, "exception table entry");
                    self.push(sink, tag.as_u32().into(), "exception tag");
                    self.block_call(&call, sink);
                }
                ExceptionTableItem::Default(call) => {
                    self.push(sink, 1, "exception table entry (default)");
                    self.block_call(&call, sink);
                }
                ExceptionTableItem::Context(v) => {
                    self.push(sink, 2, "exception table entry (context)");
                    self.value(v, sink, "exception context");
                }
            }
        }
        self.block_call(data.normal_return(), sink);
    }

    fn instruction(&mut self, inst: Inst, sink: &mut impl Sink) {
        let func = self.func;
        let data = func.dfg.insts[inst];
        let results = func.dfg.inst_results(inst);
        self.push(sink, TAG_INST | data.opcode() as Token, "opcode");
        self.push(
            sink,
            type_token(ctrl_type_of(func, &data, results)),
            "controlling type",
        );
        self.format_fields(&data, sink);
        self.push(sink, results.len() as Token, "result count");
        for &v in results {
            self.value(v, sink, "result");
        }
        match func.dfg.user_stack_map_entries(inst) {
            None => self.push(sink, 0, "user stack map"),
            Some(entries) => {
                self.push(sink, entries.len() as Token + 1, "user stack map");
                for e in entries {
                    let (ty, slot, offset) = (e.ty, e.slot, e.offset);
                    self.push(sink, type_token(ty), "user stack map entry type");
                    self.stack_slot(slot, sink);
                    self.push(sink, offset.into(), "user stack map entry offset");
                }
            }
        }
    }

    /// Every field of every instruction format. No catch-all arm, no `..`: when Cranelift
    /// adds a format or a field, this stops compiling.
    fn format_fields(&mut self, data: &InstructionData, sink: &mut impl Sink) {
        match *data {
            InstructionData::AtomicCas {
                opcode: _,
                args,
                flags,
            } => {
                self.inst_mem_flags(flags, sink);
                self.values(&args, sink);
            }
            InstructionData::AtomicRmw {
                opcode: _,
                args,
                flags,
                op,
            } => {
                self.inst_mem_flags(flags, sink);
                self.push(sink, op as Token, "atomic operation");
                self.values(&args, sink);
            }
            InstructionData::Binary { opcode: _, args } => self.values(&args, sink),
            InstructionData::BinaryImm8 {
                opcode: _,
                arg,
                imm,
            } => {
                self.values(&[arg], sink);
                self.push(sink, imm.into(), "immediate");
            }
            InstructionData::BranchTable {
                opcode: _,
                arg,
                table,
            } => {
                self.values(&[arg], sink);
                let func = self.func;
                let jt = &func.dfg.jump_tables[table];
                self.block_call(&jt.default_block(), sink);
                self.push(sink, jt.as_slice().len() as Token, "jump table size");
                for call in jt.as_slice() {
                    self.block_call(call, sink);
                }
            }
            InstructionData::Brif {
                opcode: _,
                arg,
                blocks,
            } => {
                self.values(&[arg], sink);
                self.block_call(&blocks[0], sink);
                self.block_call(&blocks[1], sink);
            }
            InstructionData::Call {
                opcode: _,
                args,
                func_ref,
            } => {
                let hole = self.inst.is_some_and(|inst| {
                    self.calls
                        .is_hole(self.func, inst, HoleSite::Callee(func_ref))
                });
                if hole {
                    self.ext_func_attributes(func_ref, sink);
                    self.push(sink, 3, "callee (hole)");
                    self.push(sink, HOLE, "callee (hole)");
                } else {
                    self.call_target(func_ref, sink);
                }
                self.value_list(&args, sink);
            }
            InstructionData::CallIndirect {
                opcode: _,
                args,
                sig_ref,
            } => {
                self.sig_ref(sig_ref, sink);
                self.value_list(&args, sink);
            }
            InstructionData::CondTrap {
                opcode: _,
                arg,
                code,
            } => {
                self.values(&[arg], sink);
                self.push(sink, code.as_raw().get().into(), "trap code");
            }
            InstructionData::DynamicStackAddr {
                opcode: _,
                dynamic_stack_slot,
            } => self.dynamic_slot(dynamic_stack_slot, sink),
            InstructionData::ExceptionHandlerAddress {
                opcode: _,
                block,
                imm,
            } => {
                self.block_ref(block, sink);
                self.push(sink, imm.bits() as Token, "immediate");
            }
            InstructionData::FloatCompare {
                opcode: _,
                args,
                cond,
            } => {
                self.push(sink, cond as Token, "condition code");
                self.values(&args, sink);
            }
            InstructionData::FuncAddr {
                opcode: _,
                func_ref,
            } => self.func_addr_target(func_ref, sink),
            InstructionData::IntAddTrap {
                opcode: _,
                args,
                code,
            } => {
                self.values(&args, sink);
                self.push(sink, code.as_raw().get().into(), "trap code");
            }
            InstructionData::IntCompare {
                opcode: _,
                args,
                cond,
            } => {
                self.push(sink, cond as Token, "condition code");
                self.values(&args, sink);
            }
            InstructionData::Jump {
                opcode: _,
                destination,
            } => self.block_call(&destination, sink),
            InstructionData::Load {
                opcode: _,
                arg,
                flags,
                offset,
            } => {
                self.inst_mem_flags(flags, sink);
                self.values(&[arg], sink);
                self.offset(offset.into(), sink);
            }
            InstructionData::LoadNoOffset {
                opcode: _,
                arg,
                flags,
            } => {
                self.inst_mem_flags(flags, sink);
                self.values(&[arg], sink);
            }
            InstructionData::MultiAry { opcode: _, args } => self.value_list(&args, sink),
            InstructionData::NullAry { opcode: _ } => {}
            InstructionData::Shuffle {
                opcode: _,
                args,
                imm,
            } => {
                self.values(&args, sink);
                let func = self.func;
                let mask = func.dfg.immediates[imm].as_slice();
                self.bytes(mask, sink, "shuffle mask");
            }
            InstructionData::StackAddr {
                opcode: _,
                stack_slot,
                offset,
            } => {
                self.stack_slot(stack_slot, sink);
                self.push(sink, i64::from(offset) as Token, "offset");
            }
            InstructionData::Store {
                opcode: _,
                args,
                flags,
                offset,
            } => {
                self.inst_mem_flags(flags, sink);
                self.values(&args, sink);
                self.offset(offset.into(), sink);
            }
            InstructionData::StoreNoOffset {
                opcode: _,
                args,
                flags,
            } => {
                self.inst_mem_flags(flags, sink);
                self.values(&args, sink);
            }
            InstructionData::Ternary { opcode: _, args } => self.values(&args, sink),
            InstructionData::TernaryImm8 {
                opcode: _,
                args,
                imm,
            } => {
                self.values(&args, sink);
                self.push(sink, imm.into(), "immediate");
            }
            InstructionData::Trap { opcode: _, code } => {
                self.push(sink, code.as_raw().get().into(), "trap code");
            }
            InstructionData::TryCall {
                opcode: _,
                args,
                func_ref,
                exception,
            } => {
                self.call_target(func_ref, sink);
                self.value_list(&args, sink);
                self.exception_table(exception, sink);
            }
            InstructionData::TryCallIndirect {
                opcode: _,
                args,
                exception,
            } => {
                self.value_list(&args, sink);
                self.exception_table(exception, sink);
            }
            InstructionData::Unary { opcode: _, arg } => self.values(&[arg], sink),
            InstructionData::UnaryConst {
                opcode: _,
                constant_handle,
            } => {
                let func = self.func;
                let bytes = func.dfg.constants.get(constant_handle).as_slice();
                self.bytes(bytes, sink, "constant");
            }
            InstructionData::UnaryGlobalValue {
                opcode: _,
                global_value,
            } => {
                let hole = self.inst.is_some_and(|inst| {
                    self.calls
                        .is_hole(self.func, inst, HoleSite::Symbol(global_value))
                });
                if hole {
                    self.symbol_hole(global_value, sink);
                } else {
                    // A serial number, never the placeholder.
                    self.global_value(global_value, sink);
                }
            }
            InstructionData::UnaryIeee16 { opcode: _, imm } => {
                self.push(sink, imm.bits().into(), "immediate (f16 bits)");
            }
            InstructionData::UnaryIeee32 { opcode: _, imm } => {
                self.float(imm.bits().into(), sink, "immediate (f32 bits)");
            }
            InstructionData::UnaryIeee64 { opcode: _, imm } => {
                self.float(imm.bits(), sink, "immediate (f64 bits)");
            }
            InstructionData::UnaryImm { opcode: _, imm } => {
                let hole = self.inst.is_some_and(|inst| {
                    self.calls
                        .is_hole(self.func, inst, HoleSite::Constant(imm.bits()))
                });
                if hole {
                    self.push(sink, HOLE, "immediate (hole)");
                } else {
                    if C::MAKES_HOLES {
                        self.push(sink, NOT_HOLE, "immediate");
                    }
                    self.push(sink, imm.bits() as Token, "immediate");
                }
            }
        }
    }
}

/// The controlling type of an instruction (its data and results), or `INVALID` when it has
/// none. Unlike `DataFlowGraph::ctrl_typevar`, never panics on malformed instructions.
#[inline]
pub(crate) fn ctrl_type_of(func: &Function, data: &InstructionData, results: &[Value]) -> Type {
    let dfg = &func.dfg;
    let constraints = data.opcode().constraints();
    if !constraints.is_polymorphic() {
        ir::types::INVALID
    } else if constraints.requires_typevar_operand() {
        data.typevar_operand(&dfg.value_lists)
            .map_or(ir::types::INVALID, |v| dfg.value_type(v))
    } else {
        results
            .first()
            .map_or(ir::types::INVALID, |&v| dfg.value_type(v))
    }
}

#[inline]
fn type_token(ty: Type) -> Token {
    ty.index() as Token
}

fn slot_kind_token(kind: ir::StackSlotKind) -> Token {
    match kind {
        ir::StackSlotKind::ExplicitSlot => 0,
        ir::StackSlotKind::ExplicitDynamicSlot => 1,
    }
}

fn call_conv_token(cc: CallConv) -> Token {
    match cc {
        CallConv::Fast => 0,
        CallConv::Tail => 1,
        CallConv::SystemV => 2,
        CallConv::WindowsFastcall => 3,
        CallConv::AppleAarch64 => 4,
        CallConv::Probestack => 5,
        CallConv::Winch => 6,
        CallConv::PreserveAll => 7,
    }
}
