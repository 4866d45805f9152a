//! Windows x64 unwind information (`UNWIND_INFO`, one per function in `.xdata`), written
//! from the prologue Cranelift describes (`MachBufferFinalized::unwind_info`) rather than
//! taken from Cranelift.
//!
//! Cranelift 0.135.8's own `winx64::UnwindInfo` gets right where the return address and the
//! caller's `rbp` are, and wrong where every other callee-saved register is: it writes the
//! frame register's offset (a count of 16-byte units in four bits) as the clobber area's
//! size in bytes shifted left by four, which truncates to zero, and it scales
//! `UWOP_SAVE_NONVOL` offsets by 16 where Windows scales them by 8. An exception that
//! crosses a Cranelift function then reloads `rbx`, `rsi`, `rdi`, `r12`–`r15` (and a
//! `windows_fastcall` function's `xmm6`–`xmm15`) from the wrong slots, and the frame that
//! catches it runs on with values it never had (`tests/unwind.rs` saw a C++ catch block print
//! a corrupted string under Wine, merged or not).
//!
//! Cranelift's x64 frame is `push rbp; mov rbp, rsp; sub rsp, N`, with the callee-saved
//! registers stored by `mov` at the top of the allocation, just below `rbp`. Windows
//! addresses saved registers from the *establisher frame*, `rbp - 16 × FrameOffset`, and
//! only at non-negative offsets, so the frame is described as MSVC's frames are: the clobber
//! area allocated (`UWOP_ALLOC_*`), then `rbp` set to the top of it (`UWOP_SET_FPREG` with
//! `FrameOffset` = its size / 16), then each register saved at its offset from the bottom.
//! Undone in reverse, the saves are read from `rbp - size + offset`, `rsp` becomes `rbp`,
//! and `rbp` and the return address are popped from where Cranelift pushed them. The
//! allocation below the clobber area is left out: with a frame register, the unwinder finds
//! the frame from `rbp`, wherever `rsp` is (a `tail` callee that popped its arguments, an
//! outgoing argument area).

use cranelift_codegen::binemit::CodeOffset;
use cranelift_codegen::isa::unwind::UnwindInst;
use cranelift_codegen::RegClass;

/// `rbp`'s number in unwind codes.
const RBP: u8 = 5;
/// The largest `FrameOffset`: four bits of 16-byte units.
const MAX_FRAME_OFFSET: u32 = 15 * 16;

/// One unwind operation, at the offset just past the prologue instruction it describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    /// `push reg`.
    Push { at: u8, reg: u8 },
    /// `sub rsp, size`.
    Alloc { at: u8, size: u32 },
    /// The frame register set to `rsp` + 16 × `FrameOffset`.
    SetFrame { at: u8 },
    /// An integer register stored at `offset` from the establisher frame.
    Save { at: u8, reg: u8, offset: u32 },
    /// An XMM register stored (all 128 bits) at `offset` from the establisher frame.
    SaveXmm { at: u8, reg: u8, offset: u32 },
}

impl Code {
    /// The code's 16-bit slots, as Windows lays them out: the first holds the prologue
    /// offset, the operation (low four bits) and its information (high four bits).
    fn slots(self) -> Vec<u16> {
        let first = |at: u8, op: u8, info: u8| u16::from(at) | u16::from(op | info << 4) << 8;
        let long = |value: u32| [value as u16, (value >> 16) as u16];
        match self {
            Code::Push { at, reg } => vec![first(at, 0, reg)],
            Code::Alloc { at, size } if size <= 128 => vec![first(at, 2, (size / 8 - 1) as u8)],
            Code::Alloc { at, size } if size / 8 <= u32::from(u16::MAX) => {
                vec![first(at, 1, 0), (size / 8) as u16]
            }
            Code::Alloc { at, size } => [vec![first(at, 1, 1)], long(size).to_vec()].concat(),
            Code::SetFrame { at } => vec![first(at, 3, 0)],
            Code::Save { at, reg, offset } if offset / 8 <= u32::from(u16::MAX) => {
                vec![first(at, 4, reg), (offset / 8) as u16]
            }
            Code::Save { at, reg, offset } => {
                [vec![first(at, 5, reg)], long(offset).to_vec()].concat()
            }
            Code::SaveXmm { at, reg, offset } if offset / 16 <= u32::from(u16::MAX) => {
                vec![first(at, 8, reg), (offset / 16) as u16]
            }
            Code::SaveXmm { at, reg, offset } => {
                [vec![first(at, 9, reg)], long(offset).to_vec()].concat()
            }
        }
    }

    fn at(self) -> u8 {
        match self {
            Code::Push { at, .. }
            | Code::Alloc { at, .. }
            | Code::SetFrame { at }
            | Code::Save { at, .. }
            | Code::SaveXmm { at, .. } => at,
        }
    }
}

/// The `UNWIND_INFO` of a function whose prologue Cranelift described as `insts`, or why
/// Windows cannot describe it.
pub fn unwind_info(insts: &[(CodeOffset, UnwindInst)]) -> Result<Vec<u8>, String> {
    let mut codes = Vec::new();
    // The clobber area's size once `rbp` is set.
    let mut frame: Option<u32> = None;
    for (offset, inst) in insts {
        let at = u8::try_from(*offset).map_err(|_| {
            format!("a prologue of {offset} bytes: Windows x64 unwind codes reach 255")
        })?;
        match inst {
            UnwindInst::PushFrameRegs { .. } => codes.push(Code::Push { at, reg: RBP }),
            UnwindInst::DefineNewFrame {
                offset_downward_to_clobbers,
                ..
            } => {
                let size = *offset_downward_to_clobbers;
                if size % 16 != 0 || size > MAX_FRAME_OFFSET {
                    return Err(format!(
                        "{size} bytes of saved registers: a Windows x64 frame register sits \
                         at most {MAX_FRAME_OFFSET} bytes above them, in 16-byte steps"
                    ));
                }
                if size > 0 {
                    codes.push(Code::Alloc { at, size });
                }
                codes.push(Code::SetFrame { at });
                frame = Some(size);
            }
            UnwindInst::StackAlloc { size } => {
                if *size == 0 || size % 8 != 0 {
                    return Err(format!("a stack allocation of {size} bytes"));
                }
                codes.push(Code::Alloc { at, size: *size });
            }
            UnwindInst::SaveReg {
                clobber_offset,
                reg,
            } => {
                if frame.is_none() {
                    return Err("a register saved before the frame is set".into());
                }
                let (class, reg, offset) = (reg.class(), reg.hw_enc(), *clobber_offset);
                codes.push(match class {
                    RegClass::Int if offset % 8 == 0 => Code::Save { at, reg, offset },
                    RegClass::Float if offset % 16 == 0 => Code::SaveXmm { at, reg, offset },
                    RegClass::Int | RegClass::Float | RegClass::Vector => {
                        return Err(format!(
                            "a {class:?} register saved at offset {offset}, which Windows x64 \
                             unwind codes cannot say"
                        ))
                    }
                });
            }
            UnwindInst::RegStackOffset { .. } | UnwindInst::Aarch64SetPointerAuth { .. } => {
                return Err(format!("{inst:?} has no Windows x64 unwind code"));
            }
        }
    }
    let prologue = codes.iter().map(|c| c.at()).max().unwrap_or(0);
    // Windows reads the codes from the end of the prologue back to its start.
    let slots: Vec<u16> = codes.iter().rev().flat_map(|c| c.slots()).collect();
    let count = u8::try_from(slots.len())
        .map_err(|_| format!("{} unwind code slots: Windows x64 allows 255", slots.len()))?;
    let frame_register = match frame {
        Some(size) => RBP | ((size / 16) as u8) << 4,
        None => 0,
    };
    let mut bytes = vec![1, prologue, count, frame_register];
    for slot in slots.iter().chain((slots.len() % 2 == 1).then_some(&0)) {
        bytes.extend_from_slice(&slot.to_le_bytes());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::TargetInfo;
    use cranelift_codegen::control::ControlPlane;

    /// A code read back: prologue offset, operation, information, the slots after the first.
    type Decoded = (u8, u8, u8, Vec<u16>);

    /// `UNWIND_INFO` read back: prologue size, frame register byte, and the codes.
    fn decode(bytes: &[u8]) -> (u8, u8, Vec<Decoded>) {
        assert_eq!(bytes[0], 1, "version 1, no flags");
        let slots: Vec<u16> = bytes[4..4 + 2 * usize::from(bytes[2])]
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let mut codes = Vec::new();
        let mut i = 0;
        while i < slots.len() {
            let (at, op, info) = (
                slots[i] as u8,
                (slots[i] >> 8) as u8 & 15,
                (slots[i] >> 12) as u8,
            );
            let extra = match (op, info) {
                (0 | 2 | 3, _) => 0,
                (1, 0) | (4 | 8, _) => 1,
                (1, _) | (5 | 9, _) => 2,
                _ => panic!("operation {op}"),
            };
            codes.push((at, op, info, slots[i + 1..i + 1 + extra].to_vec()));
            i += 1 + extra;
        }
        (bytes[1], bytes[3], codes)
    }

    /// A `windows_fastcall` function that saves every callee-saved register: the unwind
    /// information puts each where the prologue's own `mov`/`movdqu` stored it, counted from
    /// `rbp - 16 × FrameOffset` as Windows counts (8-byte units for integers, 16 for XMM).
    #[test]
    fn every_saved_register_is_where_the_prologue_stored_it() {
        let text = std::fs::read_to_string(format!(
            "{}/fixtures/unwind/throw_through_fastcall.clif",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let func = cranelift_reader::parse_functions(&text).unwrap().remove(0);
        let target = TargetInfo::from_triple_str("x86_64-pc-windows-gnu").unwrap();
        let isa = crate::emit::build_isa(&target, &[]).unwrap();
        let mut ctx = cranelift_codegen::Context::for_function(func);
        ctx.compile(&*isa, &mut ControlPlane::default()).unwrap();
        let code = ctx.compiled_code().unwrap();
        let (prologue, frame_register, codes) =
            decode(&unwind_info(&code.buffer.unwind_info).unwrap());
        let bytes = code.buffer.data();
        // push rbp; mov rbp, rsp; sub rsp, imm32 (Cranelift's frame, which the codes follow).
        assert_eq!(&bytes[..7], &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x81, 0xec]);
        let allocated = u32::from_le_bytes(bytes[7..11].try_into().unwrap());
        assert_eq!(frame_register & 15, RBP);
        let above_frame = u32::from(frame_register >> 4) * 16;
        // Each save's store: `mov reg, disp(rsp)` / `movdqu xmm, disp(rsp)`, its
        // displacement from rsp after the allocation, by register; rbp - allocated = rsp.
        let mut stored = std::collections::BTreeMap::new();
        let mut saves = 0;
        for (at, op, info, extra) in &codes {
            match op {
                0 => assert_eq!((*at, *info), (1, RBP), "push rbp"),
                2 => assert_eq!(u32::from(*info) * 8 + 8, above_frame, "the clobber area"),
                1 => assert_eq!(u32::from(extra[0]) * 8, above_frame, "the clobber area"),
                3 => assert_eq!(*at, 4, "rbp set after mov rbp, rsp"),
                4 | 8 => {
                    let scale = if *op == 4 { 8 } else { 16 };
                    let from_rsp = allocated - above_frame + u32::from(extra[0]) * scale;
                    stored.insert((*op, *info), from_rsp);
                    saves += 1;
                    assert!(*at <= prologue);
                }
                other => panic!("unexpected operation {other}"),
            }
        }
        assert_eq!(saves, 17, "rbx, rsi, rdi, r12-r15 and xmm6-xmm15");
        // Every store of the prologue, found in its bytes.
        let prologue_code = &bytes[..usize::from(prologue)];
        for ((op, reg), from_rsp) in stored {
            let disp = from_rsp.to_le_bytes();
            let rex_r = u8::from(reg >= 8) << 2;
            let modrm = |m: u8| [m | ((reg & 7) << 3), 0x24];
            let store: Vec<u8> = match (op, from_rsp < 128) {
                (4, true) => [&[0x48 | rex_r, 0x89][..], &modrm(0x44), &[disp[0]]].concat(),
                (4, false) => [&[0x48 | rex_r, 0x89][..], &modrm(0x84), &disp].concat(),
                (_, small) => {
                    let rex: &[u8] = if rex_r != 0 { &[0x44] } else { &[] };
                    let tail: &[u8] = if small { &disp[..1] } else { &disp };
                    let m = if small { 0x44 } else { 0x84 };
                    [&[0xf3][..], rex, &[0x0f, 0x7f], &modrm(m), tail].concat()
                }
            };
            assert!(
                prologue_code.windows(store.len()).any(|w| w == store),
                "register {reg} (operation {op}) said to be at rsp+{from_rsp:#x}: no such \
                 store in the prologue {prologue_code:02x?}"
            );
        }
    }
}
