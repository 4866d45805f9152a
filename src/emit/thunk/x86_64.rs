//! Register thunks on x86_64: a `mov` per added value into its System V argument register,
//! then `jmp` to the body.
//!
//! System V and Cranelift's `tail` convention pass integer arguments in the same six
//! registers (rdi, rsi, rdx, rcx, r8, r9) and floats and vectors in xmm0–xmm7. A constant
//! is written with the shortest `mov` (32-bit zero-extending, 32-bit sign-extended, or
//! `movabs`); a function address as Cranelift writes `func_addr`: through the GOT with PIC,
//! `lea` for a colocated function and `movabs` with an absolute relocation otherwise.

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir;
use cranelift_codegen::isa::CallConv;

use super::shape::{argument_kind, Added, ArgumentKind, Shape};
use super::RegisterThunk;

/// The integer argument registers, in order (rdi rsi rdx rcx r8 r9).
const INTEGER_ARGUMENTS: [u8; 6] = [7, 6, 2, 1, 8, 9];
/// How many xmm registers carry arguments.
const VECTOR_ARGUMENTS: usize = 8;

/// `shape` written for x86_64, or `None` when an argument would not travel in a register
/// (or in a kind this encoder does not write).
pub fn encode(shape: &Shape, is_pic: bool) -> Option<RegisterThunk> {
    let sig = shape.signature;
    if !matches!(sig.call_conv, CallConv::SystemV | CallConv::Tail) {
        return None;
    }
    let (mut gpr, mut xmm) = (0usize, 0usize);
    let mut registers = Vec::with_capacity(sig.params.len());
    for p in &sig.params {
        match argument_kind(p)? {
            ArgumentKind::Integer => {
                registers.push(Some(*INTEGER_ARGUMENTS.get(gpr)?));
                gpr += 1;
            }
            ArgumentKind::FloatOrVector(ty) if ty.bits() <= 128 && ty != ir::types::F16 => {
                if xmm >= VECTOR_ARGUMENTS {
                    return None;
                }
                registers.push(None);
                xmm += 1;
            }
            ArgumentKind::FloatOrVector(_) => return None,
        }
    }
    let mut bytes = Vec::new();
    let mut relocs = Vec::new();
    for (i, &added) in shape.added.iter().enumerate() {
        let reg = registers[shape.own + i]?;
        let rex_b = u8::from(reg >= 8);
        match added {
            Added::Constant { .. } => {
                let value = added.constant_value()? as i64;
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
            Added::Address {
                func_ref,
                colocated,
            } => {
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
        }
    }
    // jmp target: as Cranelift calls it, near when colocated, through the PLT with PIC;
    // a far target without PIC would need an indirect jump: left to Cranelift.
    let jump = if shape.callee_colocated {
        Reloc::X86CallPCRel4
    } else if is_pic {
        Reloc::X86CallPLTRel4
    } else {
        return None;
    };
    bytes.push(0xE9);
    relocs.push((bytes.len() as u32, jump, shape.callee, -4));
    bytes.extend_from_slice(&[0; 4]);
    Some(RegisterThunk {
        bytes,
        alignment: 1,
        relocs,
    })
}
