//! Windows x64 unwind information (`UNWIND_INFO`s in `.xdata`, and the ranges of code their
//! `RUNTIME_FUNCTION`s cover), written from the prologue Cranelift describes
//! (`MachBufferFinalized::unwind_info`) rather than taken from Cranelift.
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
//!
//! A function is one range, unless it makes tail calls. Cranelift's tail call leaves through
//! `pop rbp` and `jmp r10`, which Windows' unwinder does not know for an epilogue (it
//! wants REX.W on an indirect jump; Wine 8 takes neither `jmp r10` nor a jump to the
//! function's own start for one), so stopped there it
//! undid the prologue's codes from an `rbp` that was already the caller's. Each tail
//! call's `pop rbp` and the rest of its epilogue get `RUNTIME_FUNCTION`s of their own,
//! which say what is left on the stack there, and the code after it the function's codes
//! with none skipped ([`WindowsFrame::ranges`]): right under every unwinder, whatever it
//! recognizes. The code after a tail call could have chained unwind information instead
//! (`UNW_FLAG_CHAININFO`), but that holds the function's `RUNTIME_FUNCTION` itself,
//! whose addresses a JIT knows only once the module is finalized, when its data is no
//! longer writable.

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

    /// The same operation at prologue offset zero.
    fn at_start(self) -> Self {
        let at = 0;
        match self {
            Code::Push { reg, .. } => Code::Push { at, reg },
            Code::Alloc { size, .. } => Code::Alloc { at, size },
            Code::SetFrame { .. } => Code::SetFrame { at },
            Code::Save { reg, offset, .. } => Code::Save { at, reg, offset },
            Code::SaveXmm { reg, offset, .. } => Code::SaveXmm { at, reg, offset },
        }
    }
}

/// `UNWIND_INFO` of a range where only the caller's `rbp` is on the stack above the return
/// address: a tail call's `pop rbp` (no prologue, one code: `rbp` pushed).
const FRAME_POINTER_PUSHED: [u8; 8] = [1, 0, 1, 0, 0, RBP << 4, 0, 0];
/// `UNWIND_INFO` of a range where the return address is at the top of the stack: from a
/// tail call's `pop rbp` to its jump (no prologue, no codes).
const RETURN_ADDRESS_ON_TOP: [u8; 4] = [1, 0, 0, 0];

/// A tail call's epilogue, by offsets into the function's code: its `pop rbp` (one byte),
/// and just past its jump. Between the two the return address is at the top of the stack
/// (Cranelift moves it up there when the call shrinks the stack argument area, and the old
/// slot keeps it until `rsp` moves up to the new one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailCall {
    /// Where its `pop rbp` is.
    pub pop: u32,
    /// Just past its jump.
    pub end: u32,
}

/// How a range of a function's code unwinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwound {
    /// By the function's codes, its prologue included: the range at its start.
    Prologue,
    /// By the function's codes, every one in effect: a range after a tail call.
    Body,
    /// `rbp` popped, then the return address: a tail call's `pop rbp`.
    FramePointerPushed,
    /// The return address at the top of the stack: a tail call's jump, and whatever
    /// Cranelift puts between it and `pop rbp`.
    ReturnAddressOnTop,
}

/// One range of a function's code (offsets into it) with its own `RUNTIME_FUNCTION`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Its first byte.
    pub begin: u32,
    /// Just past its last byte.
    pub end: u32,
    /// What its `UNWIND_INFO` says.
    pub unwound: Unwound,
}

/// A Windows x64 function's unwind information: the codes of its prologue, and its tail
/// calls, which the ranges of its `RUNTIME_FUNCTION`s go around.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowsFrame {
    /// In prologue order.
    codes: Vec<Code>,
    /// The clobber area's size once `rbp` is set, if it is.
    frame: Option<u32>,
    /// In code order.
    tail_calls: Vec<TailCall>,
}

impl WindowsFrame {
    /// The unwind information of a function whose prologue Cranelift described as `insts`
    /// and whose tail calls' epilogues are `tail_calls` (in code order), or why Windows
    /// cannot describe it.
    pub fn new(
        insts: &[(CodeOffset, UnwindInst)],
        tail_calls: Vec<TailCall>,
    ) -> Result<Self, String> {
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
                            "{size} bytes of saved registers: a Windows x64 frame register \
                             sits at most {MAX_FRAME_OFFSET} bytes above them, in 16-byte steps"
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
                                "a {class:?} register saved at offset {offset}, which Windows \
                                 x64 unwind codes cannot say"
                            ))
                        }
                    });
                }
                UnwindInst::RegStackOffset { .. } | UnwindInst::Aarch64SetPointerAuth { .. } => {
                    return Err(format!("{inst:?} has no Windows x64 unwind code"));
                }
            }
        }
        let slots: usize = codes.iter().map(|c| c.slots().len()).sum();
        if slots > usize::from(u8::MAX) {
            return Err(format!("{slots} unwind code slots: Windows x64 allows 255"));
        }
        let prologue_end = codes.iter().map(|c| u32::from(c.at())).max().unwrap_or(0);
        if let Some(t) = tail_calls.iter().find(|t| t.pop < prologue_end) {
            return Err(format!(
                "a tail call's epilogue at offset {} inside the prologue",
                t.pop
            ));
        }
        Ok(Self {
            codes,
            frame,
            tail_calls,
        })
    }

    /// The ranges of a function `len` bytes long, in order, which together cover it: the
    /// start to the first tail call's `pop rbp` by the prologue's codes, each tail call's
    /// `pop rbp` and the rest of its epilogue by what is left on the stack there, and the
    /// code after a tail call by the codes again.
    ///
    /// Windows' unwinder knows an epilogue by its code, but only one that ends in `ret`, a
    /// direct jump out of the function (or to its own start), or an indirect jump with
    /// REX.W; Cranelift's tail calls jump through a register without it (`jmp r10`,
    /// `41 ff e2`), which Wine 8 does not take for one either (nor a jump to the
    /// function's own start, which Windows does). Stopped at such an epilogue's `pop rbp`
    /// or jump, the unwinder would undo the prologue's codes from an `rbp` that is already
    /// the caller's. Ranges of their own say what is on the stack there, so every unwinder
    /// reads it right without recognizing anything.
    pub fn ranges(&self, len: u32) -> Vec<Range> {
        let mut ranges = Vec::with_capacity(3 * self.tail_calls.len() + 1);
        let mut at = 0;
        let mut unwound = Unwound::Prologue;
        let mut push = |begin: u32, end: u32, unwound| {
            if begin < end {
                ranges.push(Range {
                    begin,
                    end,
                    unwound,
                });
            }
        };
        for t in &self.tail_calls {
            push(at, t.pop, unwound);
            push(t.pop, t.pop + 1, Unwound::FramePointerPushed);
            push(t.pop + 1, t.end, Unwound::ReturnAddressOnTop);
            at = t.end;
            unwound = Unwound::Body;
        }
        push(at, len, unwound);
        ranges
    }

    /// The `UNWIND_INFO` of a range that unwinds as `unwound`.
    ///
    /// A range after a tail call (`Body`) has the function's codes with every prologue
    /// offset zero and no prologue: Windows undoes a code only where the distance from its
    /// range's start reaches the code's offset, and here every one is done.
    pub fn info(&self, unwound: Unwound) -> Vec<u8> {
        let (codes, prologue): (Vec<Code>, u8) = match unwound {
            Unwound::Prologue => {
                let codes = self.codes.clone();
                let prologue = codes.iter().map(|c| c.at()).max().unwrap_or(0);
                (codes, prologue)
            }
            Unwound::Body => (self.codes.iter().map(|c| c.at_start()).collect(), 0),
            Unwound::FramePointerPushed => return FRAME_POINTER_PUSHED.to_vec(),
            Unwound::ReturnAddressOnTop => return RETURN_ADDRESS_ON_TOP.to_vec(),
        };
        // Windows reads the codes from the end of the prologue back to its start.
        let slots: Vec<u16> = codes.iter().rev().flat_map(|c| c.slots()).collect();
        let frame_register = match self.frame {
            Some(size) => RBP | ((size / 16) as u8) << 4,
            None => 0,
        };
        // At most 255 slots: checked by `new`.
        let mut bytes = vec![1, prologue, slots.len() as u8, frame_register];
        for slot in slots.iter().chain((slots.len() % 2 == 1).then_some(&0)) {
            bytes.extend_from_slice(&slot.to_le_bytes());
        }
        bytes
    }
}

/// The `UNWIND_INFO`s of several functions laid out as one `.xdata`, and their
/// `RUNTIME_FUNCTION`s: the ranges of every function, each with its `UNWIND_INFO`'s
/// offset. The two infos of tail calls' epilogues are written once and shared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Xdata {
    /// Every `UNWIND_INFO`, each at a 4-byte boundary.
    pub bytes: Vec<u8>,
    /// By function (in the order given): its ranges, each with its `UNWIND_INFO`'s offset
    /// in `bytes`.
    pub functions: Vec<Vec<(Range, u32)>>,
}

impl Xdata {
    /// The layout of `functions`: each one's code length and unwind information.
    pub fn of<'a>(functions: impl IntoIterator<Item = (u32, &'a WindowsFrame)>) -> Self {
        let mut xdata = Xdata::default();
        let mut shared: Vec<(Unwound, u32)> = Vec::new();
        for (len, frame) in functions {
            let mut own: Vec<(Unwound, u32)> = Vec::new();
            let mut ranges = Vec::new();
            for range in frame.ranges(len) {
                let known = match range.unwound {
                    Unwound::Prologue | Unwound::Body => &mut own,
                    Unwound::FramePointerPushed | Unwound::ReturnAddressOnTop => &mut shared,
                };
                let offset = match known.iter().find(|(u, _)| *u == range.unwound) {
                    Some(&(_, offset)) => offset,
                    None => {
                        let offset = xdata.push(&frame.info(range.unwound));
                        known.push((range.unwound, offset));
                        offset
                    }
                };
                ranges.push((range, offset));
            }
            xdata.functions.push(ranges);
        }
        xdata
    }

    /// Append `info` at a 4-byte boundary (Windows reads it there): its offset.
    fn push(&mut self, info: &[u8]) -> u32 {
        self.bytes.resize(self.bytes.len().next_multiple_of(4), 0);
        let offset = self.bytes.len() as u32;
        self.bytes.extend_from_slice(info);
        offset
    }
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
        assert_eq!(
            bytes.len(),
            4 + 2 * usize::from(bytes[2]).next_multiple_of(2)
        );
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
        let (prologue, frame_register, codes) = decode(
            &WindowsFrame::new(&code.buffer.unwind_info, Vec::new())
                .unwrap()
                .info(Unwound::Prologue),
        );
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

    /// A Cranelift frame: `push rbp` (1), `mov rbp, rsp` (4), `sub rsp, 32` (8).
    fn frame(tail_calls: Vec<TailCall>) -> WindowsFrame {
        let insts = [
            (
                1,
                UnwindInst::PushFrameRegs {
                    offset_upward_to_caller_sp: 16,
                },
            ),
            (
                4,
                UnwindInst::DefineNewFrame {
                    offset_upward_to_caller_sp: 16,
                    offset_downward_to_clobbers: 0,
                },
            ),
            (8, UnwindInst::StackAlloc { size: 32 }),
        ];
        WindowsFrame::new(&insts, tail_calls).unwrap()
    }

    #[test]
    fn a_function_without_tail_calls_is_one_range() {
        let f = frame(Vec::new());
        let ranges = f.ranges(40);
        assert_eq!(
            ranges,
            [Range {
                begin: 0,
                end: 40,
                unwound: Unwound::Prologue
            }]
        );
        let (prologue, frame_register, codes) = decode(&f.info(Unwound::Prologue));
        assert_eq!((prologue, frame_register), (8, RBP));
        let offsets: Vec<u8> = codes.iter().map(|c| c.0).collect();
        assert_eq!(offsets, [8, 4, 1], "last prologue instruction first");
    }

    /// Each tail call's `pop rbp` and jump get ranges of their own, and the code after it
    /// the function's codes with none of them skipped.
    #[test]
    fn tail_calls_split_the_function_into_ranges() {
        let f = frame(vec![
            TailCall { pop: 30, end: 34 },
            TailCall { pop: 50, end: 60 },
        ]);
        let r = |begin, end, unwound| Range {
            begin,
            end,
            unwound,
        };
        use Unwound::*;
        assert_eq!(
            f.ranges(70),
            [
                r(0, 30, Prologue),
                r(30, 31, FramePointerPushed),
                r(31, 34, ReturnAddressOnTop),
                r(34, 50, Body),
                r(50, 51, FramePointerPushed),
                r(51, 60, ReturnAddressOnTop),
                r(60, 70, Body),
            ]
        );
        // A tail call that ends the function leaves no range after it.
        assert_eq!(f.ranges(60).last(), Some(&r(51, 60, ReturnAddressOnTop)));
        let (prologue, frame_register, codes) = decode(&f.info(Body));
        assert_eq!((prologue, frame_register), (0, RBP));
        let (_, _, prologue_codes) = decode(&f.info(Prologue));
        assert_eq!(codes.len(), prologue_codes.len());
        for (body, with_offset) in codes.iter().zip(&prologue_codes) {
            assert_eq!(body.0, 0);
            let operation = |c: &Decoded| (c.1, c.2, c.3.clone());
            assert_eq!(operation(body), operation(with_offset));
        }
        assert_eq!(
            decode(&f.info(FramePointerPushed)),
            (0, 0, vec![(0, 0, RBP, vec![])])
        );
        assert_eq!(decode(&f.info(ReturnAddressOnTop)), (0, 0, vec![]));
    }

    #[test]
    fn xdata_shares_the_epilogue_infos() {
        let plain = frame(Vec::new());
        let tail = frame(vec![TailCall { pop: 30, end: 34 }]);
        let xdata = Xdata::of([(40, &tail), (20, &plain), (40, &tail)]);
        let offsets = |f: &Vec<(Range, u32)>| f.iter().map(|(_, o)| *o).collect::<Vec<_>>();
        // tail: its prologue info (12 bytes), the two shared (8 and 4), its body info (12).
        assert_eq!(offsets(&xdata.functions[0]), [0, 12, 20, 24]);
        assert_eq!(offsets(&xdata.functions[1]), [36]);
        assert_eq!(offsets(&xdata.functions[2]), [48, 12, 20, 60]);
        assert_eq!(xdata.bytes.len(), 72);
        for (ranges, frame) in xdata.functions.iter().zip([&tail, &plain, &tail]) {
            for (range, offset) in ranges {
                let info = frame.info(range.unwound);
                let at = *offset as usize;
                assert_eq!(&xdata.bytes[at..at + info.len()], &info[..]);
            }
        }
    }
}
