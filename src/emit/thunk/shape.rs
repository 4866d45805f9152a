//! The shape of a register thunk, recognised in CLIF whatever the target.
//!
//! Merge-similar's thunks are one block: constants (`iconst`) and function addresses
//! (`func_addr`), then a call of the shared body with the thunk's own parameters, unchanged
//! and in order, followed by those values; the call is a `return_call`, or a `call` whose
//! results are returned as they are. Because the body's signature starts with the thunk's
//! own, the own arguments are already where the body expects them: a thunk of this shape
//! only has to put each added value in its argument register and jump. Which register that
//! is, and how the value is written, is each ISA's part ([`super::x86_64`],
//! [`super::aarch64`]); this module finds the shape and nothing else. The shape alone
//! never makes a function a jump: emission asks only of functions merge-similar marked as
//! its thunks ([`crate::merge::ModuleFunction::similar_thunk`]).

use cranelift_codegen::ir::{self, InstructionData, Opcode};

/// A thunk that passes its own arguments on and adds values after them.
pub struct Shape<'f> {
    /// The function called (the shared body).
    pub callee: ir::FuncRef,
    /// Whether the callee is colocated (a direct jump reaches it).
    pub callee_colocated: bool,
    /// The callee's signature: the thunk's own parameters, then one per added value.
    pub signature: &'f ir::Signature,
    /// How many of the callee's parameters are the thunk's own, passed on unchanged.
    pub own: usize,
    /// The added values, in the order of the callee's parameters after the own ones.
    pub added: Vec<Added>,
}

/// A value a thunk adds to its own arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// `iconst`: the type and the immediate's bits, as Cranelift stores them.
    Constant { ty: ir::Type, bits: i64 },
    /// `func_addr` of a function, and whether that function is colocated.
    Address {
        func_ref: ir::FuncRef,
        colocated: bool,
    },
}

impl Added {
    /// A constant's value as an unsigned integer of its type's width (the bits above it
    /// cleared); `None` for an address.
    pub fn constant_value(self) -> Option<u64> {
        match self {
            Added::Constant { ty, bits } if ty.bits() < 64 => {
                Some(bits as u64 & ((1u64 << ty.bits()) - 1))
            }
            Added::Constant { bits, .. } => Some(bits as u64),
            Added::Address { .. } => None,
        }
    }
}

/// `func` as a [`Shape`], when it has that shape: one block; `iconst` and `func_addr`
/// only, then the call; the callee's convention and returns the thunk's own, its
/// parameters the thunk's own followed by at least one more, each of those an `iconst` or
/// a `func_addr` of the block. At most one return value (more may use a return area,
/// whose pointer the thunk would have to pass). Calling conventions and value types are
/// left to each ISA.
pub fn of(func: &ir::Function) -> Option<Shape<'_>> {
    if func.signature.returns.len() > 1 {
        return None;
    }
    let entry = func.layout.entry_block()?;
    if func.layout.blocks().nth(1).is_some() {
        return None;
    }
    let params = func.dfg.block_params(entry);
    let mut loads: Vec<(ir::Value, Added)> = Vec::new();
    let mut insts = func.layout.block_insts(entry).peekable();
    let mut tail: Option<(ir::FuncRef, Vec<ir::Value>)> = None;
    while let Some(inst) = insts.next() {
        match func.dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            } => {
                let value = *func.dfg.inst_results(inst).first()?;
                let ty = func.dfg.value_type(value);
                loads.push((
                    value,
                    Added::Constant {
                        ty,
                        bits: imm.bits(),
                    },
                ));
            }
            InstructionData::FuncAddr {
                opcode: Opcode::FuncAddr,
                func_ref,
            } => {
                let value = *func.dfg.inst_results(inst).first()?;
                let colocated = func.dfg.ext_funcs.get(func_ref)?.colocated;
                loads.push((
                    value,
                    Added::Address {
                        func_ref,
                        colocated,
                    },
                ));
            }
            InstructionData::Call {
                opcode,
                args,
                func_ref,
            } => {
                let args: Vec<ir::Value> = args
                    .as_slice(&func.dfg.value_lists)
                    .iter()
                    .map(|&v| func.dfg.resolve_aliases(v))
                    .collect();
                match opcode {
                    Opcode::ReturnCall => {}
                    Opcode::Call => {
                        // `v.. = call f(..); return v..`
                        let ret = insts.next()?;
                        let InstructionData::MultiAry {
                            opcode: Opcode::Return,
                            args: rets,
                        } = func.dfg.insts[ret]
                        else {
                            return None;
                        };
                        let rets: Vec<ir::Value> = rets
                            .as_slice(&func.dfg.value_lists)
                            .iter()
                            .map(|&v| func.dfg.resolve_aliases(v))
                            .collect();
                        if rets != func.dfg.inst_results(inst) {
                            return None;
                        }
                    }
                    _ => return None,
                }
                tail = Some((func_ref, args));
                if insts.next().is_some() {
                    return None;
                }
            }
            _ => return None,
        }
    }
    let (callee, args) = tail?;
    let ext = func.dfg.ext_funcs.get(callee)?;
    let signature = func.dfg.signatures.get(ext.signature)?;
    let own = &func.signature;
    let n = own.params.len();
    if signature.call_conv != own.call_conv
        || signature.returns != own.returns
        || signature.params.len() != args.len()
        || args.len() <= n
        || signature.params[..n] != own.params[..]
        || args[..n] != params[..]
    {
        return None;
    }
    let added = args[n..]
        .iter()
        .map(|arg| loads.iter().find(|(v, _)| v == arg).map(|&(_, a)| a))
        .collect::<Option<Vec<Added>>>()?;
    Some(Shape {
        callee,
        callee_colocated: ext.colocated,
        signature,
        own: n,
        added,
    })
}

/// How an argument travels, before an ISA's own rules: a plain integer of at most 64 bits,
/// or a float or vector (each ISA says which of those its registers take); `None` for what
/// a register thunk does not pass at all (an extended argument, a special purpose, a wider
/// integer).
pub(super) enum ArgumentKind {
    Integer,
    FloatOrVector(ir::Type),
}

/// `param`'s [`ArgumentKind`].
pub(super) fn argument_kind(param: &ir::AbiParam) -> Option<ArgumentKind> {
    let ty = param.value_type;
    if param.extension != ir::ArgumentExtension::None
        || !matches!(
            param.purpose,
            ir::ArgumentPurpose::Normal | ir::ArgumentPurpose::VMContext
        )
    {
        None
    } else if ty.is_int() && !ty.is_vector() && ty.bits() <= 64 {
        Some(ArgumentKind::Integer)
    } else if ty.is_float() || ty.is_vector() {
        Some(ArgumentKind::FloatOrVector(ty))
    } else {
        None
    }
}
