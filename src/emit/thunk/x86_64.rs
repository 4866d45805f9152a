//! Register thunks on x86_64: a `mov` per added value into its System V argument register
//! (or stored to its stack slot), then `jmp` to the body.
//!
//! System V and Cranelift's `tail` convention pass integer arguments in the same six
//! registers (rdi, rsi, rdx, rcx, r8, r9) and floats and vectors in xmm0–xmm7; what does not
//! fit goes on the stack ([`super::layout`]). A constant is written with the shortest `mov`
//! (32-bit zero-extending, 32-bit sign-extended, or `movabs`); a function address as
//! Cranelift writes `func_addr`: through the GOT with PIC, `lea` for a colocated function
//! and `movabs` with an absolute relocation otherwise.
//!
//! An added value that goes on the stack is loaded into r11 (no convention passes an
//! argument in it; Cranelift uses it as its own scratch register in prologues) and stored
//! to its slot, above the return address. When the body's stack area is larger than the
//! thunk's (`tail` only, [`super::layout::Placement::grow`]), the thunk first moves the
//! stack pointer down by the difference and copies the return address and its own stack
//! arguments down with it, a word at a time through r11, lowest first (the copy moves
//! down, so no word is overwritten before it is read). The thunk's FDE says where the CFA
//! and the return address are after each step ([`RegisterThunk::frame`]).

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir;
use cranelift_codegen::isa::CallConv;
use gimli::write::CallFrameInstruction;
use gimli::X86_64;

use super::layout::{Location, Placement, Registers};
use super::shape::{Added, Shape};
use super::RegisterThunk;

/// The integer argument registers, in order (rdi rsi rdx rcx r8 r9).
const INTEGER_ARGUMENTS: [u8; 6] = [7, 6, 2, 1, 8, 9];
/// The scratch register: a value bound for the stack, a word being moved.
const SCRATCH: u8 = 11;
/// rsp, as a ModRM `rm` (which then takes a SIB byte) and as a SIB base.
const RSP: u8 = 4;

/// System V's and `tail`'s argument registers: six integers, eight xmm registers, which
/// take floats and vectors of up to 128 bits but not `f16` (a register thunk does not
/// write Cranelift's special case for it).
pub(super) const REGISTERS: Registers = Registers {
    integers: 6,
    vectors: 8,
    takes_vector: |ty| ty.bits() <= 128 && ty != ir::types::F16,
};

/// `shape` written for x86_64, or `None` when the thunk would need a frame
/// ([`Placement::of`]; the stack area may grow only when `may_grow`), an added value would
/// go in an xmm register, or a far body cannot be reached by a `jmp` without PIC.
pub fn encode(shape: &Shape, is_pic: bool, may_grow: bool) -> Option<RegisterThunk> {
    let sig = shape.signature;
    if !matches!(sig.call_conv, CallConv::SystemV | CallConv::Tail) {
        return None;
    }
    let placement = Placement::of(shape, &REGISTERS, may_grow)?;
    // jmp target: as Cranelift calls it, near when colocated, through the PLT with PIC;
    // a far target without PIC would need an indirect jump: left to Cranelift.
    let jump = if shape.callee_colocated {
        Reloc::X86CallPCRel4
    } else if is_pic {
        Reloc::X86CallPLTRel4
    } else {
        return None;
    };
    let mut code = Code::default();
    if placement.grow > 0 {
        let grow = placement.grow;
        // sub $grow, %rsp (imm8 sign-extended, or imm32)
        match i8::try_from(grow) {
            Ok(small) => code
                .bytes
                .extend_from_slice(&[0x48, 0x83, 0xEC, small as u8]),
            Err(_) => {
                code.bytes.extend_from_slice(&[0x48, 0x81, 0xEC]);
                code.bytes.extend_from_slice(&grow.to_le_bytes());
            }
        }
        let cfa = 8 + grow as i32;
        code.note(CallFrameInstruction::CfaOffset(cfa));
        // The return address (word 0) and the own stack arguments, down by `grow`.
        for word in 0..=placement.own_area / 8 {
            code.load_from_stack(grow + 8 * word);
            code.store_to_stack(8 * word);
            if word == 0 {
                code.note(CallFrameInstruction::Offset(X86_64::RA, -cfa));
            }
        }
    }
    for (i, &added) in shape.added.iter().enumerate() {
        match placement.locations[shape.own + i] {
            Location::Integer(n) => code.load(INTEGER_ARGUMENTS[usize::from(n)], added, is_pic)?,
            Location::Stack(offset) => {
                code.load(SCRATCH, added, is_pic)?;
                // Above the return address.
                code.store_to_stack(8 + offset);
            }
            Location::Vector => return None,
        }
    }
    code.bytes.push(0xE9);
    code.relocs
        .push((code.bytes.len() as u32, jump, shape.callee, -4));
    code.bytes.extend_from_slice(&[0; 4]);
    Some(RegisterThunk {
        bytes: code.bytes,
        alignment: 1,
        relocs: code.relocs,
        frame: code.frame,
    })
}

/// A thunk's code as it is written.
#[derive(Default)]
struct Code {
    bytes: Vec<u8>,
    relocs: Vec<(u32, Reloc, ir::FuncRef, i64)>,
    frame: Vec<(u32, CallFrameInstruction)>,
}

impl Code {
    /// `instruction` holds from here on.
    fn note(&mut self, instruction: CallFrameInstruction) {
        self.frame.push((self.bytes.len() as u32, instruction));
    }

    /// ModRM and SIB of `SCRATCH` and `offset(%rsp)`, with an 8- or 32-bit displacement.
    fn scratch_and_stack(&mut self, offset: u32) {
        let reg = (SCRATCH & 7) << 3;
        match i8::try_from(offset) {
            Ok(small) => {
                self.bytes.extend_from_slice(&[0x40 | reg | RSP, 0x24]);
                self.bytes.push(small as u8);
            }
            Err(_) => {
                self.bytes.extend_from_slice(&[0x80 | reg | RSP, 0x24]);
                self.bytes.extend_from_slice(&offset.to_le_bytes());
            }
        }
    }

    /// `mov offset(%rsp), %r11`
    fn load_from_stack(&mut self, offset: u32) {
        self.bytes.extend_from_slice(&[0x4C, 0x8B]);
        self.scratch_and_stack(offset);
    }

    /// `mov %r11, offset(%rsp)`
    fn store_to_stack(&mut self, offset: u32) {
        self.bytes.extend_from_slice(&[0x4C, 0x89]);
        self.scratch_and_stack(offset);
    }

    /// `added` into the 64-bit register `reg`; `None` for a constant with no value.
    fn load(&mut self, reg: u8, added: Added, is_pic: bool) -> Option<()> {
        let bytes = &mut self.bytes;
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
                    self.relocs.push((bytes.len() as u32, kind, func_ref, -4));
                    bytes.extend_from_slice(&[0; 4]);
                } else {
                    // movabs $sym, %r64
                    bytes.extend_from_slice(&[0x48 | rex_b, 0xB8 | (reg & 7)]);
                    self.relocs
                        .push((bytes.len() as u32, Reloc::Abs8, func_ref, 0));
                    bytes.extend_from_slice(&[0; 8]);
                }
            }
        }
        Some(())
    }
}
