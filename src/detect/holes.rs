//! The comparator's merge-similar mode: functions that are equal except for constants,
//! offsets, callees, addresses and the memory flags that only permit optimisation.
//!
//! LLVM's MergeFunctions design says its hash ignores constants and callees "which makes it useful when possibly
//! merging functions which are the same modulo constants and call targets". This module
//! is that comparison. A function is encoded exactly as the comparator encodes it
//! ([`Encoder`]), except that these are *holes*: a placeholder stands in the encoding, and
//! the value is recorded beside it, in encoding order:
//! - the immediate of every `iconst`, `f32const` and `f64const`;
//! - the offset of every load and store whose address is pointer-typed;
//! - the callee of every direct `call` and `return_call` to a named function;
//! - the function of every pointer-typed `func_addr`, and the symbol (name and offset) of
//!   every pointer-typed `symbol_value` of a `symbol` that is not thread-local;
//! - the permissions among the memory flags of every load, store and atomic access
//!   ([`super::permissions`]: `aligned`, `readonly`, `can_move`, `notrap` against
//!   `heap_oob`). Alias regions are encoded by serial number (they are names local to a
//!   function), endianness and other trap codes exactly.
//!
//! Two functions with equal hole encodings do the same thing once each hole holds its
//! value, so one body with a parameter per differing value hole, and the intersection of
//! the permissions at each access, can stand for both (`merge::similar`).
//!
//! A function's references to itself that are not holes (`try_call`, `try_call_indirect`
//! through its own address, `patchable` calls) are encoded by its name, not as the
//! comparator's self-reference: in a shared body no member is "self", so two functions
//! that reach themselves that way never share one. Its own address as a hole (a call to
//! itself, `func_addr` or `symbol_value` of its name) holds its name, which the member's
//! thunk fills with its own address: the address the member had.
//!
//! Not holes, and so compared exactly: `try_call` targets (an exception edge cannot be
//! rewritten into an indirect call here), `patchable` calls, libcalls and well-known
//! symbols, thread-local symbols, global values read other than by `symbol_value`,
//! `f16` and vector constants, stack slot offsets and sizes, and everything that is not a
//! constant, an offset, a callee, an address or a permission (types, opcodes, endianness,
//! trap codes other than `heap_oob`, the callee's signature and `colocated` flag).
//!
//! An offset hole is sound to fill from a parameter: a load or store reaches
//! `address + offset` (wrapping, in the pointer type), which is what `iadd address, p`
//! with offset 0 reaches; flags such as `aligned` and `notrap` speak of that same address.
//! A float hole is passed as the integer of its bits and `bitcast` back: the same value,
//! NaN payloads and the sign of zero included. An address hole is sound whatever the
//! address's significance: the parameter holds the very address the member took.

use std::cell::RefCell;

use cranelift_codegen::ir::{
    ExternalName, FuncRef, Function, GlobalValue, GlobalValueData, Inst, InstructionData, Opcode,
    Type,
};

use super::encode::{ByName, CallTarget, CallTargets, Encoder, HoleSite, Sink, Token};
use super::explain::{explain, Difference};
use super::permissions::Permissions;
use crate::names::FuncName;
use crate::target::TargetInfo;

/// One hole of a function, in encoding order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hole {
    /// The instruction holding it.
    pub inst: Inst,
    /// What is there.
    pub value: HoleValue,
}

/// The value a function has in one of its holes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HoleValue {
    /// An `iconst` of this type, with its immediate's bits as stored.
    Constant {
        /// The constant's type (`i8` … `i64`).
        ty: Type,
        /// Its bits.
        bits: i64,
    },
    /// The offset of a load or store whose address has the type `ty` (the target's
    /// pointer type), sign-extended to 64 bits.
    Offset {
        /// The address type.
        ty: Type,
        /// The offset.
        bits: i64,
    },
    /// A direct call to this function.
    Callee {
        /// The callee, resolved.
        name: FuncName,
        /// The `FuncRef` the call uses, inside its function.
        func_ref: FuncRef,
    },
    /// An `f32const` or `f64const`.
    Float {
        /// `f32` or `f64`.
        ty: Type,
        /// Its bits.
        bits: u64,
    },
    /// The address of this function (`func_addr`).
    Address {
        /// The function, resolved.
        name: FuncName,
        /// The `FuncRef` the `func_addr` uses, inside its function.
        func_ref: FuncRef,
    },
    /// The address of a `symbol` global value (`symbol_value`).
    Symbol {
        /// The symbol, resolved.
        name: FuncName,
        /// The offset added to its address.
        offset: i64,
        /// Whether it is `colocated`.
        colocated: bool,
    },
    /// The permissions among a memory access's flags. Never a parameter: the shared body
    /// takes the intersection of its members' ([`Permissions::meet`]).
    Flags(Permissions),
}

impl HoleValue {
    /// The integer type a parameter carrying this value has (floats travel as their bits,
    /// addresses as pointers); `None` for permissions, which are never parameters.
    pub fn parameter_type(&self, pointer: Type) -> Option<Type> {
        match self {
            HoleValue::Constant { ty, .. } | HoleValue::Offset { ty, .. } => Some(*ty),
            HoleValue::Float { ty, .. } => Type::int(ty.bits() as u16),
            HoleValue::Callee { .. } | HoleValue::Address { .. } | HoleValue::Symbol { .. } => {
                Some(pointer)
            }
            HoleValue::Flags(_) => None,
        }
    }
}

impl std::fmt::Display for HoleValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HoleValue::Constant { ty, bits } => {
                // As CLIF prints it: signed, in the constant's width.
                let shift = 64 - ty.bits().clamp(1, 64);
                write!(f, "iconst.{ty} {}", (bits << shift) >> shift)
            }
            HoleValue::Offset { bits, .. } => write!(f, "offset {bits}"),
            HoleValue::Callee { name, .. } => write!(f, "call {name}"),
            HoleValue::Float { ty, bits } => {
                // As CLIF prints it.
                if ty.bits() == 32 {
                    let imm = cranelift_codegen::ir::immediates::Ieee32::with_bits(*bits as u32);
                    write!(f, "f32const {imm}")
                } else {
                    let imm = cranelift_codegen::ir::immediates::Ieee64::with_bits(*bits);
                    write!(f, "f64const {imm}")
                }
            }
            HoleValue::Address { name, .. } => write!(f, "func_addr {name}"),
            HoleValue::Symbol { name, offset, .. } => match offset {
                0 => write!(f, "symbol_value {name}"),
                _ => write!(f, "symbol_value {name}{offset:+}"),
            },
            HoleValue::Flags(permissions) => write!(f, "{permissions}"),
        }
    }
}

/// Whether the direct call through `callee` in `func` may be a hole: a named function
/// (its address can be taken and called indirectly), not `patchable`.
pub fn callee_may_be_hole(func: &Function, callee: FuncRef) -> bool {
    let Some(data) = func.dfg.ext_funcs.get(callee) else {
        return false;
    };
    !data.patchable
        && func.dfg.signatures.is_valid(data.signature)
        && matches!(data.name, ExternalName::User(_) | ExternalName::TestCase(_))
}

/// The address operand of a load or store.
pub fn address_operand(func: &Function, inst: Inst) -> Option<cranelift_codegen::ir::Value> {
    match func.dfg.insts[inst] {
        InstructionData::Load { arg, .. } => Some(arg),
        InstructionData::Store { args, .. } => Some(args[1]),
        _ => None,
    }
}

/// Whether `func_addr` of `f` in `func` may be a hole: a named function (not a libcall or
/// well-known symbol).
fn address_may_be_hole(func: &Function, f: FuncRef) -> bool {
    func.dfg
        .ext_funcs
        .get(f)
        .is_some_and(|data| matches!(data.name, ExternalName::User(_) | ExternalName::TestCase(_)))
}

/// Whether the address of `gv` in `func` may be a hole: a named `symbol`, not
/// thread-local.
fn symbol_may_be_hole(func: &Function, gv: GlobalValue) -> bool {
    matches!(
        func.global_values.get(gv),
        Some(GlobalValueData::Symbol {
            name: ExternalName::User(_) | ExternalName::TestCase(_),
            tls: false,
            ..
        })
    )
}

/// The hole policy: every site the module docs list is a hole, recorded in order;
/// everything else is encoded as `base` encodes it.
struct HolePolicy<'a, C: CallTargets> {
    base: &'a C,
    pointer: Type,
    /// Where the holes go, when their values are wanted.
    recorded: Option<&'a RefCell<Vec<(Inst, HoleSite)>>>,
}

impl<C: CallTargets> HolePolicy<'_, C> {
    /// Whether `inst`'s only result is pointer-typed.
    fn yields_pointer(&self, func: &Function, inst: Inst) -> bool {
        matches!(func.dfg.inst_results(inst), [v] if func.dfg.value_type(*v) == self.pointer)
    }
}

impl<C: CallTargets> CallTargets for HolePolicy<'_, C> {
    fn call_target(&self, func: &Function, callee: FuncRef) -> CallTarget {
        by_name_for_self(self.base.call_target(func, callee))
    }

    fn address_target(&self, func: &Function, callee: FuncRef) -> CallTarget {
        by_name_for_self(self.base.address_target(func, callee))
    }

    fn symbol_target(&self, func: &Function, gv: cranelift_codegen::ir::GlobalValue) -> CallTarget {
        by_name_for_self(self.base.symbol_target(func, gv))
    }

    const MAKES_HOLES: bool = true;

    fn is_hole(&self, func: &Function, inst: Inst, site: HoleSite) -> bool {
        let hole = match site {
            HoleSite::Constant(_) | HoleSite::Flags(_) => true,
            HoleSite::Float(_) => matches!(
                func.dfg.insts[inst].opcode(),
                Opcode::F32const | Opcode::F64const
            ),
            HoleSite::Offset(_) => address_operand(func, inst)
                .is_some_and(|a| func.dfg.value_type(func.dfg.resolve_aliases(a)) == self.pointer),
            HoleSite::Callee(callee) => {
                matches!(func.dfg.insts[inst], InstructionData::Call { .. })
                    && callee_may_be_hole(func, callee)
            }
            HoleSite::Address(f) => self.yields_pointer(func, inst) && address_may_be_hole(func, f),
            HoleSite::Symbol(gv) => {
                func.dfg.insts[inst].opcode() == Opcode::SymbolValue
                    && self.yields_pointer(func, inst)
                    && symbol_may_be_hole(func, gv)
            }
        };
        if let (true, Some(recorded)) = (hole, self.recorded) {
            recorded.borrow_mut().push((inst, site));
        }
        hole
    }
}

/// A reference to oneself that is not a hole names the function: the shared body is none
/// of its members, so "itself" would mean the first member in every member's copy.
fn by_name_for_self(target: CallTarget) -> CallTarget {
    match target {
        CallTarget::SelfCall => CallTarget::Name,
        CallTarget::Class(class) => CallTarget::Class(class),
        CallTarget::Name => CallTarget::Name,
    }
}

/// `func` encoded with holes, and its holes in encoding order.
pub fn encode_with_holes(func: &Function, target: &TargetInfo) -> (Vec<Token>, Vec<Hole>) {
    // Room for a hole every other instruction before the vector grows.
    let recorded = RefCell::new(Vec::with_capacity(func.dfg.num_insts() / 2));
    let policy = HolePolicy {
        base: &ByName,
        pointer: target.pointer_type(),
        recorded: Some(&recorded),
    };
    // About 13 tokens per instruction on the corpora: room for 14, so that most encodings
    // never grow (a vector reserved for 6 grew once or twice, copying itself each time).
    let mut tokens = Vec::with_capacity(func.dfg.num_insts() * 14 + 16);
    Encoder::new(func, target, &policy).encode_all(&mut tokens);
    let holes = recorded
        .into_inner()
        .into_iter()
        .map(|(inst, site)| Hole {
            inst,
            value: hole_value(func, target, inst, site),
        })
        .collect();
    (tokens, holes)
}

/// `func` encoded with holes into `sink`, which also learns what each token means and
/// which instruction it came from (the tokens [`encode_with_holes`] gives).
pub fn encode_with_holes_into(func: &Function, target: &TargetInfo, sink: &mut impl Sink) {
    let policy = HolePolicy {
        base: &ByName,
        pointer: target.pointer_type(),
        recorded: None,
    };
    Encoder::new(func, target, &policy).encode_all(sink);
}

fn hole_value(func: &Function, target: &TargetInfo, inst: Inst, site: HoleSite) -> HoleValue {
    let result_type = || {
        func.dfg
            .inst_results(inst)
            .first()
            .map_or(cranelift_codegen::ir::types::INVALID, |&v| {
                func.dfg.value_type(v)
            })
    };
    match site {
        HoleSite::Offset(bits) => HoleValue::Offset {
            ty: target.pointer_type(),
            bits,
        },
        HoleSite::Constant(bits) => HoleValue::Constant {
            ty: result_type(),
            bits,
        },
        HoleSite::Callee(func_ref) => HoleValue::Callee {
            name: FuncName::of_external(func, &func.dfg.ext_funcs[func_ref].name),
            func_ref,
        },
        HoleSite::Float(bits) => HoleValue::Float {
            ty: result_type(),
            bits,
        },
        HoleSite::Address(func_ref) => HoleValue::Address {
            name: FuncName::of_external(func, &func.dfg.ext_funcs[func_ref].name),
            func_ref,
        },
        HoleSite::Symbol(gv) => match &func.global_values[gv] {
            GlobalValueData::Symbol {
                name,
                offset,
                colocated,
                tls: _,
            } => HoleValue::Symbol {
                name: FuncName::of_external(func, name),
                offset: offset.bits(),
                colocated: *colocated,
            },
            // The policy makes holes of symbols only.
            GlobalValueData::VMContext
            | GlobalValueData::Load { .. }
            | GlobalValueData::IAddImm { .. }
            | GlobalValueData::DynScaleTargetConst { .. } => {
                unreachable!("a hole of a global value that is not a symbol")
            }
        },
        HoleSite::Flags(flags) => HoleValue::Flags(Permissions::of(func.dfg.mem_flags[flags])),
    }
}

/// A hole where two functions hold different values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoleDifference {
    /// The position among the function's holes (encoding order).
    pub index: usize,
    /// The left function's instruction and value.
    pub left: Hole,
    /// The right function's instruction and value.
    pub right: Hole,
}

/// Compare `left` and `right` with holes: `Ok` with the holes where their values differ
/// (empty when the functions are equal outright, callees by name), or `Err` with the
/// first difference outside the holes.
pub fn similar(
    target: &TargetInfo,
    left: &Function,
    right: &Function,
) -> Result<Vec<HoleDifference>, Difference> {
    let (ltokens, lholes) = encode_with_holes(left, target);
    let (rtokens, rholes) = encode_with_holes(right, target);
    if ltokens != rtokens {
        let policy = HolePolicy {
            base: &ByName,
            pointer: target.pointer_type(),
            recorded: None,
        };
        return Err(
            explain(target, &policy, left, right).unwrap_or_else(|| Difference {
                place: "the function".into(),
                what: "encoding".into(),
                left: String::new(),
                right: String::new(),
            }),
        );
    }
    Ok(lholes
        .into_iter()
        .zip(rholes)
        .enumerate()
        .filter(|(_, (l, r))| !same_value(&l.value, &r.value))
        .map(|(index, (left, right))| HoleDifference { index, left, right })
        .collect())
}

/// Whether two hole values are the same (callees and addresses by name; the `FuncRef`
/// numbers are local).
fn same_value(a: &HoleValue, b: &HoleValue) -> bool {
    match (a, b) {
        (HoleValue::Constant { ty: t1, bits: b1 }, HoleValue::Constant { ty: t2, bits: b2 }) => {
            t1 == t2 && b1 == b2
        }
        (HoleValue::Offset { ty: t1, bits: b1 }, HoleValue::Offset { ty: t2, bits: b2 }) => {
            t1 == t2 && b1 == b2
        }
        (HoleValue::Callee { name: n1, .. }, HoleValue::Callee { name: n2, .. }) => n1 == n2,
        (HoleValue::Float { ty: t1, bits: b1 }, HoleValue::Float { ty: t2, bits: b2 }) => {
            t1 == t2 && b1 == b2
        }
        (HoleValue::Address { name: n1, .. }, HoleValue::Address { name: n2, .. }) => n1 == n2,
        (
            HoleValue::Symbol {
                name: n1,
                offset: o1,
                colocated: c1,
            },
            HoleValue::Symbol {
                name: n2,
                offset: o2,
                colocated: c2,
            },
        ) => n1 == n2 && o1 == o2 && c1 == c2,
        (HoleValue::Flags(p1), HoleValue::Flags(p2)) => p1 == p2,
        (HoleValue::Constant { .. }, _)
        | (HoleValue::Offset { .. }, _)
        | (HoleValue::Callee { .. }, _)
        | (HoleValue::Float { .. }, _)
        | (HoleValue::Address { .. }, _)
        | (HoleValue::Symbol { .. }, _)
        | (HoleValue::Flags(_), _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::{types, AbiParam, InstBuilder, Signature, UserFuncName};
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    /// `f(x) = x + k`.
    fn add_const(k: i64) -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::testcase("f"), sig);
        let mut ctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut ctx);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        b.seal_block(block);
        let x = b.block_params(block)[0];
        let c = b.ins().iconst(types::I64, k);
        let y = b.ins().iadd(x, c);
        b.ins().return_(&[y]);
        b.finalize(cranelift_codegen::isa::TargetFrontendConfig {
            default_call_conv: CallConv::SystemV,
            pointer_width: target_lexicon::PointerWidth::U64,
            page_size_align_log2: 12,
        });
        func
    }

    /// A policy that makes holes of the constants 7 and 9 only.
    struct SevenAndNine;
    impl CallTargets for SevenAndNine {
        const MAKES_HOLES: bool = true;
        fn call_target(&self, _: &Function, _: FuncRef) -> CallTarget {
            CallTarget::Name
        }
        fn is_hole(&self, _: &Function, _: Inst, site: HoleSite) -> bool {
            matches!(site, HoleSite::Constant(7 | 9))
        }
    }

    fn encode(func: &Function, policy: &SevenAndNine) -> Vec<Token> {
        let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
        let mut tokens = Vec::new();
        Encoder::new(func, &target, policy).encode_all(&mut tokens);
        tokens
    }

    #[test]
    fn a_constant_never_encodes_as_a_hole() {
        // Every 64-bit value is some constant's bits, the placeholder's included: a
        // constant that is not a hole must still differ from a hole at the same place.
        let placeholder = 0xC1F0_0000_0000_0005u64 as i64;
        let hole = encode(&add_const(7), &SevenAndNine);
        let value = encode(&add_const(placeholder), &SevenAndNine);
        assert_ne!(hole, value);
        // And a hole is a hole: two hole values encode the same.
        assert_eq!(hole, encode(&add_const(9), &SevenAndNine));
    }
}
