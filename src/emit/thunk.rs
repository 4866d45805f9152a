//! Thunks: a folded name that must keep a distinct address, jumping to the shared body.
//!
//! The members of a group are equal, so their signatures are identical (the comparator
//! compares calling convention, every parameter and every return): a thunk never has to
//! convert arguments. On x86_64 and aarch64 it is therefore a single tail jump with one
//! relocation, written as bytes (`jmp rel32`, `E9` + R_X86_64_PLT32; `b imm26`,
//! `0x14000000` + R_AARCH64_CALL26). Elsewhere, or when asked, the thunk is CLIF compiled
//! like any function: `return_call` for the `tail` convention (the verifier allows it only
//! there), a call followed by a return of its results otherwise.
//!
//! Merge-similar's thunks add arguments (constants, function addresses) before jumping.
//! On x86_64, when all of the target's arguments travel in registers, such a CLIF thunk is
//! recognised by its shape and written directly ([`register_thunk`]): a `mov` per added
//! argument into its System V register, then the same `jmp`, with no frame.

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir::{self, InstBuilder};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, ModuleReloc, ModuleRelocTarget};
use target_lexicon::Architecture;

use crate::names::{external_name, user_func_name, FuncName};

/// A single-jump thunk as bytes and its relocation.
pub struct JumpThunk {
    /// The machine code.
    pub bytes: Vec<u8>,
    /// Its alignment.
    pub alignment: u64,
    /// The one relocation, naming the target.
    pub reloc: ModuleReloc,
}

/// The single-jump thunk to `target` for `arch`, if the architecture has one.
pub fn jump_thunk(arch: Architecture, target: FuncId) -> Option<JumpThunk> {
    let name = ModuleRelocTarget::user(0, target.as_u32());
    match arch {
        Architecture::X86_64 => Some(JumpThunk {
            bytes: vec![0xE9, 0, 0, 0, 0],
            alignment: 1,
            reloc: ModuleReloc {
                offset: 1,
                kind: Reloc::X86CallPCRel4,
                name,
                addend: -4,
            },
        }),
        Architecture::Aarch64(_) => Some(JumpThunk {
            bytes: 0x1400_0000u32.to_le_bytes().to_vec(),
            alignment: 4,
            reloc: ModuleReloc {
                offset: 0,
                kind: Reloc::Arm64Call,
                name,
                addend: 0,
            },
        }),
        _ => None,
    }
}

/// A thunk as CLIF: a function named `name` with `signature` that passes its arguments to
/// `target` and returns what it returns. With `tail_calls` (only valid for the `tail`
/// convention, and on x86_64 only with `preserve_frame_pointers`), a `tail` thunk is a
/// `return_call`; otherwise it calls and returns.
pub fn clif_thunk(
    name: &FuncName,
    signature: &ir::Signature,
    target: &FuncName,
    frontend_config: TargetFrontendConfig,
    tail_calls: bool,
) -> ir::Function {
    let mut func = ir::Function::with_name_signature(user_func_name(name), signature.clone());
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let sig = b.import_signature(signature.clone());
    let callee_name = external_name(b.func, target);
    let callee = b.import_function(ir::ExtFuncData {
        name: callee_name,
        signature: sig,
        colocated: true,
        patchable: false,
    });
    let args = b.block_params(block).to_vec();
    if tail_calls && signature.call_conv == CallConv::Tail {
        b.ins().return_call(callee, &args);
    } else {
        let call = b.ins().call(callee, &args);
        let results = b.inst_results(call).to_vec();
        b.ins().return_(&results);
    }
    b.finalize(frontend_config);
    func
}

/// A thunk that passes its own arguments on unchanged, adds constant and function-address
/// arguments after them and tail-calls the target, written directly as x86_64 machine code:
/// each added argument is loaded into its argument register, then `jmp`. Merge-similar's
/// thunks have this shape; compiled by Cranelift they would also set up a frame.
pub struct RegisterThunk {
    /// The machine code.
    pub bytes: Vec<u8>,
    /// Relocations: offset, kind, the `FuncRef` named, addend.
    pub relocs: Vec<(u32, Reloc, ir::FuncRef, i64)>,
}

/// `func` as a [`RegisterThunk`] when it has that shape and every argument of the target
/// travels in a register (x86_64, System V or `tail`); `None` otherwise (Cranelift compiles
/// it). `is_pic` chooses how function addresses are loaded, as Cranelift does: through the
/// GOT, or `lea`/`movabs` without PIC.
pub fn register_thunk(
    func: &ir::Function,
    arch: Architecture,
    is_pic: bool,
) -> Option<RegisterThunk> {
    use ir::{InstructionData, Opcode};
    if arch != Architecture::X86_64
        || !matches!(func.signature.call_conv, CallConv::SystemV | CallConv::Tail)
        || func.signature.returns.len() > 1
    {
        return None;
    }
    let entry = func.layout.entry_block()?;
    if func.layout.blocks().nth(1).is_some() {
        return None;
    }
    let params = func.dfg.block_params(entry);
    let mut loads: Vec<(ir::Value, ir::Inst)> = Vec::new();
    let mut insts = func.layout.block_insts(entry).peekable();
    let mut tail: Option<(ir::FuncRef, Vec<ir::Value>)> = None;
    while let Some(inst) = insts.next() {
        match func.dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                ..
            }
            | InstructionData::FuncAddr {
                opcode: Opcode::FuncAddr,
                ..
            } => loads.push((*func.dfg.inst_results(inst).first()?, inst)),
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
    let sig = func.dfg.signatures.get(ext.signature)?;
    let own = &func.signature;
    let n = own.params.len();
    if sig.call_conv != own.call_conv
        || sig.returns != own.returns
        || sig.params.len() != args.len()
        || args.len() <= n
        || sig.params[..n] != own.params[..]
        || args[..n] != params[..]
    {
        return None;
    }
    // Argument registers, in the System V order (`tail` on x86_64 uses the same).
    const GPRS: [u8; 6] = [7, 6, 2, 1, 8, 9]; // rdi rsi rdx rcx r8 r9
    let (mut gpr, mut xmm) = (0usize, 0usize);
    let mut registers = Vec::with_capacity(sig.params.len());
    for p in &sig.params {
        let ty = p.value_type;
        if p.extension != ir::ArgumentExtension::None
            || !matches!(
                p.purpose,
                ir::ArgumentPurpose::Normal | ir::ArgumentPurpose::VMContext
            )
        {
            return None;
        }
        if ty.is_int() && !ty.is_vector() && ty.bits() <= 64 {
            registers.push(Some(*GPRS.get(gpr)?));
            gpr += 1;
        } else if (ty.is_float() || ty.is_vector()) && ty.bits() <= 128 && ty != ir::types::F16 {
            if xmm >= 8 {
                return None;
            }
            registers.push(None);
            xmm += 1;
        } else {
            return None;
        }
    }
    let mut bytes = Vec::new();
    let mut relocs = Vec::new();
    for (i, &arg) in args.iter().enumerate().skip(n) {
        let reg = registers[i]?;
        let &(_, inst) = loads.iter().find(|(v, _)| *v == arg)?;
        let rex_b = u8::from(reg >= 8);
        match func.dfg.insts[inst] {
            InstructionData::UnaryImm { imm, .. } => {
                let ty = func.dfg.value_type(arg);
                let bits = imm.bits();
                let value = if ty.bits() < 64 {
                    bits & ((1i64 << ty.bits()) - 1)
                } else {
                    bits
                };
                if (0..=i64::from(u32::MAX)).contains(&value) {
                    // mov $imm32, %r32 (zero-extends)
                    if rex_b != 0 {
                        bytes.push(0x41);
                    }
                    bytes.push(0xB8 | (reg & 7));
                    bytes.extend_from_slice(&(value as u32).to_le_bytes());
                } else if i32::try_from(value).is_ok() {
                    // mov $simm32, %r64
                    bytes.extend_from_slice(&[0x48 | rex_b, 0xC7, 0xC0 | (reg & 7)]);
                    bytes.extend_from_slice(&(value as i32).to_le_bytes());
                } else {
                    // movabs $imm64, %r64
                    bytes.extend_from_slice(&[0x48 | rex_b, 0xB8 | (reg & 7)]);
                    bytes.extend_from_slice(&value.to_le_bytes());
                }
            }
            InstructionData::FuncAddr { func_ref, .. } => {
                let colocated = func.dfg.ext_funcs.get(func_ref)?.colocated;
                let rex_r = u8::from(reg >= 8) << 2;
                if is_pic || colocated {
                    // mov sym@GOTPCREL(%rip), %r64  /  lea sym(%rip), %r64
                    let opcode = if is_pic { 0x8B } else { 0x8D };
                    bytes.extend_from_slice(&[0x48 | rex_r, opcode, ((reg & 7) << 3) | 0b101]);
                    let kind = if is_pic {
                        Reloc::X86GOTPCRel4
                    } else {
                        Reloc::X86CallPCRel4
                    };
                    relocs.push((bytes.len() as u32, kind, func_ref, -4));
                    bytes.extend_from_slice(&[0; 4]);
                } else {
                    // movabs $sym, %r64
                    bytes.extend_from_slice(&[0x48 | rex_b, 0xB8 | (reg & 7)]);
                    relocs.push((bytes.len() as u32, Reloc::Abs8, func_ref, 0));
                    bytes.extend_from_slice(&[0; 8]);
                }
            }
            _ => return None,
        }
    }
    // jmp target: as Cranelift calls it, near when colocated, through the PLT with PIC;
    // a far target without PIC would need an indirect jump: left to Cranelift.
    let jump = if ext.colocated {
        Reloc::X86CallPCRel4
    } else if is_pic {
        Reloc::X86CallPLTRel4
    } else {
        return None;
    };
    bytes.push(0xE9);
    relocs.push((bytes.len() as u32, jump, callee, -4));
    bytes.extend_from_slice(&[0; 4]);
    Some(RegisterThunk { bytes, relocs })
}
