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
//!
//! Windows x64 unwind information (`.pdata`) cannot say that the return address moved,
//! so there ([`Growth::ByPushes`]) the thunk grows the area with `push qword ptr [rsp]`, a
//! word at a time: each push writes the return address at the new top of the stack as it
//! moves the stack pointer, so at every instruction boundary the return address is at
//! `[rsp]`, where Windows' unwinder looks for it in a function without `.pdata` (a leaf;
//! `tests/unwind.rs` unwinds from every instruction of such a thunk under Wine).
//! The own stack arguments are then copied down as above, which never writes `[rsp]`. An
//! unwinder stopped in the thunk or in its body finds the caller's return address and
//! the caller's frame through its frame pointer, as Cranelift's Windows unwind
//! information always describes a frame (`UWOP_SET_FPREG`), never its stack pointer,
//! which lies lower by the growth until the body returns. Growing by more than
//! [`LARGEST_PUSHED_GROWTH`] bytes is left to Cranelift.

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
/// `push qword ptr [rsp]`: the word at the top of the stack pushed again.
const PUSH_TOP: [u8; 3] = [0xFF, 0x34, 0x24];
/// The most a thunk grows its stack area by pushes ([`Growth::ByPushes`]): 16 pushes.
pub const LARGEST_PUSHED_GROWTH: u32 = 128;

/// How a thunk grows its stack argument area, as the target's unwind information allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// `sub rsp`, the return address copied down, an FDE saying so (`.eh_frame`).
    WithFde,
    /// `push qword ptr [rsp]` per word, the return address always at `[rsp]`: Windows,
    /// whose `.pdata` cannot describe a moved return address.
    ByPushes,
}

/// System V's and `tail`'s argument registers: six integers, eight xmm registers, which
/// take floats and vectors of up to 128 bits but not `f16` (a register thunk does not
/// write Cranelift's special case for it).
pub(super) const REGISTERS: Registers = Registers {
    integers: 6,
    vectors: 8,
    takes_vector: |ty| ty.bits() <= 128 && ty != ir::types::F16,
};

/// `shape` written for x86_64, growing the stack area as `growth` says, or `None` when
/// the thunk would need a frame ([`Placement::of`]; or, by pushes, would grow the area by
/// more than [`LARGEST_PUSHED_GROWTH`]), an added value would go in an xmm register, or a
/// far body cannot be reached by a `jmp` without PIC.
pub fn encode(shape: &Shape, is_pic: bool, growth: Growth) -> Option<RegisterThunk> {
    let sig = shape.signature;
    if !matches!(sig.call_conv, CallConv::SystemV | CallConv::Tail) {
        return None;
    }
    let placement = Placement::of(shape, &REGISTERS, true)?;
    if growth == Growth::ByPushes && placement.grow > LARGEST_PUSHED_GROWTH {
        return None;
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
    let mut code = Code::default();
    if placement.grow > 0 {
        let grow = placement.grow;
        // The stack pointer down by `grow`, and the first word still to copy down with it.
        let first_word = match growth {
            Growth::WithFde => {
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
                code.note(CallFrameInstruction::CfaOffset(8 + grow as i32));
                0
            }
            // Each push leaves the return address (word 0) at the top.
            Growth::ByPushes => {
                for _ in 0..grow / 8 {
                    code.bytes.extend_from_slice(&PUSH_TOP);
                }
                1
            }
        };
        // The return address (word 0) and the own stack arguments, down by `grow`.
        for word in first_word..=placement.own_area / 8 {
            code.load_from_stack(grow + 8 * word);
            code.store_to_stack(8 * word);
            if word == 0 {
                code.note(CallFrameInstruction::Offset(X86_64::RA, -(8 + grow as i32)));
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
        moves_stack_pointer: placement.grow > 0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::build_isa;
    use crate::emit::thunk::register_thunk;
    use crate::TargetInfo;

    /// A `tail` thunk whose body takes two more stack words than its own callers pass: its
    /// own 8 integers fill the six registers and two stack slots (16 bytes), the body's 10
    /// take four (32 bytes), so it grows the area by 16 bytes.
    const GROWN: &str = "
function %thunk(i64, i64, i64, i64, i64, i64, i64, i64) -> i64 tail {
    sig0 = (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64) -> i64 tail
    fn0 = colocated %body sig0
block0(v0: i64, v1: i64, v2: i64, v3: i64, v4: i64, v5: i64, v6: i64, v7: i64):
    v8 = iconst.i64 5
    v9 = iconst.i64 -1
    return_call fn0(v0, v1, v2, v3, v4, v5, v6, v7, v8, v9)
}";

    /// The thunk `GROWN` becomes for `triple`, as `objdump` prints its instructions
    /// ("push QWORD PTR [rsp]", blanks collapsed); `None` (with a notice) without objdump.
    fn written(triple: &str) -> Option<(RegisterThunk, Vec<String>)> {
        let func = *crate::read::parse_clif(GROWN, "thunk.clif")
            .unwrap()
            .remove(0)
            .func;
        let target = TargetInfo::from_triple_str(triple).unwrap();
        let isa = build_isa(&target, &[]).unwrap();
        let thunk = register_thunk(&func, &*isa).expect("a register thunk");
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &thunk.bytes).unwrap();
        let out = std::process::Command::new("objdump")
            .args(["-D", "-b", "binary", "-m", "i386:x86-64", "-M", "intel"])
            .arg(file.path())
            .output();
        let Some(out) = out.ok().filter(|o| o.status.success()) else {
            eprintln!("skipping: no objdump (Debian: binutils)");
            return None;
        };
        let lines = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let mut fields = l.splitn(3, '\t');
                fields.next()?.trim().strip_suffix(':')?;
                fields.next()?;
                let insn = fields.next()?.split('#').next().unwrap();
                Some(insn.split_whitespace().collect::<Vec<_>>().join(" "))
            })
            .collect();
        Some((thunk, lines))
    }

    /// Linux: `sub rsp`, the return address and the two own stack words copied down, an
    /// FDE for the moves.
    #[test]
    fn a_grown_thunk_has_an_fde_on_linux() {
        let Some((thunk, lines)) = written("x86_64-unknown-linux-gnu") else {
            return;
        };
        assert_eq!(lines[0], "sub rsp,0x10");
        assert_eq!(lines[1], "mov r11,QWORD PTR [rsp+0x10]");
        assert_eq!(lines[2], "mov QWORD PTR [rsp+0x0],r11");
        assert!(thunk.moves_stack_pointer);
        assert!(!thunk.frame.is_empty());
    }

    /// Windows: two pushes of the top of the stack grow the area, then the own stack words
    /// (not the return address) are copied down and the added values stored above them:
    /// no instruction writes `[rsp]` or moves the stack pointer otherwise, so the return
    /// address is at `[rsp]` at every instruction boundary, and there is no FDE.
    #[test]
    fn a_grown_thunk_keeps_its_return_address_on_top_on_windows() {
        let Some((thunk, lines)) = written("x86_64-pc-windows-gnu") else {
            return;
        };
        assert_eq!(
            lines,
            [
                "push QWORD PTR [rsp]",
                "push QWORD PTR [rsp]",
                // Own stack words 1 and 2, down by 16 bytes.
                "mov r11,QWORD PTR [rsp+0x18]",
                "mov QWORD PTR [rsp+0x8],r11",
                "mov r11,QWORD PTR [rsp+0x20]",
                "mov QWORD PTR [rsp+0x10],r11",
                // The added values, in the body's stack slots 3 and 4.
                "mov r11d,0x5",
                "mov QWORD PTR [rsp+0x18],r11",
                "mov r11,0xffffffffffffffff",
                "mov QWORD PTR [rsp+0x20],r11",
                "jmp 0x36",
            ]
        );
        assert!(thunk.moves_stack_pointer);
        assert!(thunk.frame.is_empty());
    }
}
