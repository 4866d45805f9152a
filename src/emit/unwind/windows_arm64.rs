//! Windows on arm64 unwind information (`.xdata` records, and the ranges of code their
//! `RUNTIME_FUNCTION`s cover), written from the instructions of each function's prologue
//! rather than taken from Cranelift.
//!
//! Windows undoes a frame by running unwind codes, one per prologue instruction, last
//! first; stopped inside the prologue, it skips the codes of the instructions that have
//! not run (Microsoft's "ARM64 exception handling"). Cranelift 0.135.8's own
//! `winarm64::UnwindInfo` is wrong for two frames its aarch64 backend makes:
//! - a pair of callee-saved registers that are not consecutive (`stp x23, x25, [sp,
//!   #-16]!`, whenever the clobbered registers have a gap) is said to be `x23` and `x24`:
//!   an exception crossing the frame gives the catching code `x25`'s value in `x24` and
//!   leaves `x25` as the frame had it;
//! - a `tail` function that grows its incoming argument area sets up its frame twice
//!   (`stp x29, x30, [sp, #-16]!; mov x29, sp; sub sp, sp, #N; ldur x29, [sp, #N]; stp
//!   x29, x30, [sp]; mov x29, sp`), which it describes with `add_fp`: undone, the stack
//!   pointer becomes the caller's frame pointer less `N`, and the caller's frame is lost.
//!
//! So each prologue instruction is read here and given the code that undoes it
//! ([`WindowsArm64Frame::new`]): `mov x29, sp` becomes `set_fp` only where it sets the
//! frame pointer the body keeps (an earlier one is undone by restoring `x29` itself), the
//! reload of `x29` a `nop`, and a pair that no code describes (registers not consecutive)
//! two codes, one per register. Two codes for one instruction break the count Windows
//! keeps inside the prologue, so such a function gets two `RUNTIME_FUNCTION`s: the
//! prologue's, and the body's, whose record starts with `end_c`, an empty prologue, so
//! that every stop in the body runs all the codes. An exception or a panic only ever
//! unwinds a frame stopped in its body; a sampler stopping such a function inside its
//! prologue may not unwind it.
//!
//! Epilogues are described too (`epilogues`), which Wasmtime's records do not: a frame
//! stopped at a call is never in its epilogue, but a sampler or a debugger that stops a
//! thread inside one unwinds it from there. Windows unwinds a frame stopped in an
//! epilogue by running the epilogue's codes from the instruction it stopped at, each code
//! doing to the stack pointer and the registers what its instruction does, so the codes
//! of any run of instructions that each have one (loads of callee-saved registers from the
//! stack, `add sp`, `autibsp`), ending in the return or a tail call's branch after the
//! frame record is reloaded, describe it wherever it stops, however many of them belong
//! to the body rather than to the epilogue proper.

use std::ops::Range;

/// A range of a function's code and the `.xdata` record of its `RUNTIME_FUNCTION`.
pub type Record = (Range<u32>, Vec<u8>);

/// The codes of each prologue instruction and the prologue's length: what the records
/// of one function are written from.
#[derive(Clone, Debug)]
pub struct WindowsArm64Frame {
    /// The prologue's length in bytes.
    prologue: u32,
    /// The codes, in the order the unwinder runs them (the last instruction's first).
    codes: Vec<u8>,
    /// Whether each instruction has exactly one code, so that Windows' count of them
    /// inside the prologue is right.
    one_each: bool,
    /// The epilogues, in order.
    epilogues: Vec<Epilogue>,
}

/// An epilogue: where its first described instruction is, and the codes of its
/// instructions in the order they run, the last (`end`) the return's or the tail call's.
#[derive(Clone, Debug, PartialEq)]
struct Epilogue {
    start: u32,
    codes: Vec<u8>,
}

/// One prologue instruction, as far as unwinding is concerned.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// A store of a pair of registers (`first`, `second`; d registers with `simd`) at
    /// `sp + offset`, or pre-indexed: at `sp - size` with `sp` moved there.
    StorePair {
        first: u32,
        second: u32,
        simd: bool,
        at: Address,
    },
    /// A store of one register.
    Store { reg: u32, simd: bool, at: Address },
    /// `add x29, sp, #offset` (`mov x29, sp` for 0).
    SetFp { offset: u32 },
    /// `sub sp, sp, #size` (or by a scratch register set just before).
    Alloc { size: u32 },
    /// `add sp, sp, #size`: an unrolled stack probe giving back what it took.
    Free { size: u32 },
    /// `pacibsp` (or a `tail` function's `pacibz`): the return address signed with the B
    /// key, as Windows signs it.
    SignLr,
    /// An instruction whose effect the other codes undo or that changes nothing they
    /// restore: a reload of `x29` from the stack, a constant into a scratch register, a
    /// stack probe's stores and loop, a `bti` landing pad.
    Nop,
}

/// Where a store puts its first register.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Address {
    /// `[sp, #offset]`.
    Offset(u32),
    /// `[sp, #-size]!`.
    PreIndexed(u32),
}

/// `paciasp` and `paciaz`: signed with the A key.
const PACIASP: u32 = 0xd503_233f;
const PACIAZ: u32 = 0xd503_231f;
/// `pacibsp` and `pacibz` (a `tail` function's, whose modifier is zero).
const PACIBSP: u32 = 0xd503_237f;
const PACIBZ: u32 = 0xd503_235f;
/// `autibsp` and `autibz`: the return address authenticated with the B key.
const AUTIBSP: u32 = 0xd503_23ff;
const AUTIBZ: u32 = 0xd503_23df;
/// `ret`.
const RET: u32 = 0xd65f_03c0;
/// `retab`: `autibsp` and `ret` in one instruction, which Cranelift writes where the target
/// has pointer authentication (`has_pauth`).
const RETAB: u32 = 0xd65f_0fff;
/// The `end` code.
const END: u8 = 0xe4;
/// The `end_c` code: ends an (empty) prologue; the codes after it are still run.
const END_C: u8 = 0xe5;
/// The `nop` code.
const NOP: u8 = 0xe3;
/// The `pac_sign_lr` code: the return address signed with the B key (`pacibsp`), and
/// authenticated where an epilogue runs it.
const PAC_SIGN_LR: u8 = 0xfc;
/// The function length a header holds, in words (18 bits).
const MAX_WORDS: u32 = (1 << 18) - 1;
/// The code words a header holds without its extension word (5 bits).
const MAX_HEADER_CODE_WORDS: u32 = (1 << 5) - 1;
/// The epilogue scopes a header holds without its extension word (5 bits).
const MAX_HEADER_EPILOGUES: u32 = (1 << 5) - 1;
/// The first code index an epilogue scope cannot name (10 bits).
const MAX_EPILOGUE_INDEX: usize = 1 << 10;

impl WindowsArm64Frame {
    /// The frame of a function whose code is `code` and whose prologue ends at
    /// `prologue` (the offset after its last instruction, where Cranelift's last unwind
    /// instruction is). `Err` names an instruction no unwind code can undo.
    pub fn new(code: &[u8], prologue: u32) -> Result<Self, String> {
        let words = code
            .get(..prologue as usize)
            .ok_or("the prologue is longer than the function")?
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("four bytes")));
        let mut scratch = [None; 2];
        let mut steps = Vec::new();
        for (n, insn) in words.enumerate() {
            steps.push(step(insn, &mut scratch).ok_or_else(|| {
                if matches!(insn, PACIASP | PACIAZ) {
                    return "return addresses signed with the A key, where Windows' unwind \
                            codes say the B key: set sign_return_address_with_bkey=true (or \
                            unwind_info=false)"
                        .to_string();
                }
                format!(
                    "prologue instruction {insn:#010x} at offset {}: no Windows arm64 unwind \
                     code undoes it",
                    n * 4
                )
            })?);
        }
        // An unrolled stack probe (`sub sp` and a store of zero, page by page, then `add
        // sp` of them all) leaves the stack pointer as it found it: no code for any of it.
        for i in 0..steps.len() {
            let Step::Free { size } = steps[i] else {
                continue;
            };
            let unmatched = || {
                format!(
                    "the prologue frees {size} bytes of stack at offset {} that it did not \
                     just take: no Windows arm64 unwind code says so",
                    i * 4
                )
            };
            let mut left = size;
            for j in (0..i).rev() {
                match steps[j] {
                    _ if left == 0 => break,
                    Step::Nop => {}
                    Step::Alloc { size: taken } if taken <= left => {
                        left -= taken;
                        steps[j] = Step::Nop;
                    }
                    _ => return Err(unmatched()),
                }
            }
            if left != 0 {
                return Err(unmatched());
            }
            steps[i] = Step::Nop;
        }
        // Only the last `x29` the prologue sets is the frame the body keeps.
        let last_fp = steps.iter().rposition(|s| defines_fp(*s));
        let mut codes = Vec::new();
        let mut one_each = true;
        for (n, s) in steps.iter().enumerate().rev() {
            one_each &= encode(*s, Some(n) == last_fp, &mut codes)? == 1;
        }
        Ok(Self {
            prologue,
            codes,
            one_each,
            epilogues: epilogues(code, prologue),
        })
    }

    /// The records of a function `len` bytes long: each range of its code that a
    /// `RUNTIME_FUNCTION` covers, with that range's `.xdata` record. `Err` when a range
    /// is longer than a record covers (1 MiB).
    pub fn records(&self, len: u32) -> Result<Vec<Record>, String> {
        if self.one_each || self.prologue >= len {
            return Ok(vec![(
                0..len,
                record(len, &[], &self.codes, &self.epilogues, 0)?,
            )]);
        }
        Ok(vec![
            (
                0..self.prologue,
                record(self.prologue, &[], &self.codes, &[], 0)?,
            ),
            (
                self.prologue..len,
                record(
                    len - self.prologue,
                    &[END_C],
                    &self.codes,
                    &self.epilogues,
                    self.prologue,
                )?,
            ),
        ])
    }
}

/// Whether `s` sets the frame pointer.
fn defines_fp(s: Step) -> bool {
    match s {
        Step::SetFp { .. } => true,
        // A reload of x29 is a `Nop` step: see `step`.
        Step::StorePair { .. }
        | Step::Store { .. }
        | Step::Alloc { .. }
        | Step::Free { .. }
        | Step::SignLr
        | Step::Nop => false,
    }
}

/// The record of a range `len` bytes long that starts `from` bytes into its function: the
/// header, a scope per epilogue in the range, `before` (an `end_c` for a range without a
/// prologue), the codes, `end`, each epilogue's codes (one copy of codes that several
/// epilogues share), and `nop`s to the word. An epilogue whose codes would start further
/// in than a scope can say is left out, as are those after it.
fn record(
    len: u32,
    before: &[u8],
    codes: &[u8],
    epilogues: &[Epilogue],
    from: u32,
) -> Result<Vec<u8>, String> {
    let words = len / 4;
    if words > MAX_WORDS {
        return Err(format!(
            "{len} bytes of code are more than one Windows arm64 unwind record covers"
        ));
    }
    let mut all: Vec<u8> = before.iter().chain(codes).copied().collect();
    all.push(END);
    // Each scope: its first instruction, in words from the range's start, and the index
    // of its first code.
    let mut scopes: Vec<u32> = Vec::new();
    let mut placed: Vec<(&[u8], usize)> = Vec::new();
    for epilogue in epilogues
        .iter()
        .filter(|e| (from..from + len).contains(&e.start))
    {
        let index = match placed.iter().find(|(c, _)| *c == epilogue.codes.as_slice()) {
            Some(&(_, index)) => index,
            None if all.len() >= MAX_EPILOGUE_INDEX => break,
            None => {
                placed.push((&epilogue.codes, all.len()));
                all.extend(&epilogue.codes);
                all.len() - epilogue.codes.len()
            }
        };
        scopes.push(((epilogue.start - from) / 4) | ((index as u32) << 22));
    }
    while !all.len().is_multiple_of(4) {
        all.push(NOP);
    }
    let code_words = (all.len() / 4) as u32;
    if code_words > 0xff {
        return Err("more unwind codes than a Windows arm64 record holds".to_string());
    }
    let count = scopes.len() as u32;
    let mut out = Vec::with_capacity(8 + 4 * scopes.len() + all.len());
    if code_words <= MAX_HEADER_CODE_WORDS && count <= MAX_HEADER_EPILOGUES {
        out.extend((words | count << 22 | code_words << 27).to_le_bytes());
    } else {
        // Code words and epilogue count both zero in the header: the next word holds them.
        out.extend(words.to_le_bytes());
        out.extend((count | code_words << 16).to_le_bytes());
    }
    for scope in scopes {
        out.extend(scope.to_le_bytes());
    }
    out.extend(all);
    Ok(out)
}

/// The epilogues of a function whose code is `code` and whose prologue ends at `prologue`:
/// each return (`ret`, or `retab`, whose authentication takes a `pac_sign_lr` code of its
/// own before the end), and each tail call's branch out of the function (`b`, or `br`),
/// after the run of instructions before it that each have one unwind code doing what the
/// instruction does ([`epilogue_step`]), when that run reloads the frame record (`x29` and
/// `x30`: before that, the return address is not the caller's). The run stops at an
/// instruction that has no such code, at one that would take two (a pair of registers
/// that are not consecutive), at an `add sp` of a scratch register it does not see set,
/// and at the prologue.
fn epilogues(code: &[u8], prologue: u32) -> Vec<Epilogue> {
    let words: Vec<u32> = code
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().expect("four bytes")))
        .collect();
    let first = (prologue / 4) as usize;
    let mut out = Vec::new();
    for (at, &insn) in words.iter().enumerate().skip(first) {
        if !leaves_the_function(insn) {
            continue;
        }
        // The run of described instructions before it, found backwards.
        let mut start = at;
        // (Any size will do for an `add sp` of a scratch register here: its move is before.)
        while start > first && epilogue_step(words[start - 1], &mut [Some(0); 2]).is_some() {
            start -= 1;
        }
        // Its codes, forwards (the scratch registers' values come from their moves); a
        // run cut short starts again after what cuts it.
        let mut scratch = [None; 2];
        let mut codes = Vec::new();
        let mut reloads_frame = false;
        let mut begin = start;
        for (n, &insn) in words.iter().enumerate().take(at).skip(start) {
            let step = epilogue_step(insn, &mut scratch);
            let mut one = Vec::new();
            match step.map(|s| (s, encode(s, true, &mut one))) {
                Some((s, Ok(1))) => {
                    reloads_frame |= matches!(
                        s,
                        Step::StorePair {
                            first: 29,
                            second: 30,
                            simd: false,
                            ..
                        }
                    );
                    codes.extend(one);
                }
                _ => {
                    codes.clear();
                    reloads_frame = false;
                    begin = n + 1;
                }
            }
        }
        if reloads_frame {
            if insn == RETAB {
                codes.push(PAC_SIGN_LR);
            }
            codes.push(END);
            out.push(Epilogue {
                start: begin as u32 * 4,
                codes,
            });
        }
    }
    out
}

/// Whether `insn` may leave the function: `ret`, `br` of a register other than `x30`, or
/// `b`. A `b` to another function has no offset until it is relocated, so it is told from a
/// branch within the function only by what comes before it: after the frame record is
/// reloaded, a branch can only leave ([`epilogues`] requires that reload).
fn leaves_the_function(insn: u32) -> bool {
    match insn {
        RET | RETAB => true,
        _ if insn & 0xffff_fc1f == 0xd61f_0000 => (insn >> 5) & 0x1f != 30,
        _ => insn & 0xfc00_0000 == 0x1400_0000,
    }
}

/// What an instruction before an epilogue's return does, as the prologue instruction whose
/// code does the same to the stack pointer and the registers Windows restores: a load of a
/// pair or of one register from the stack (post-indexed: the code of the pre-indexed
/// store), `add sp` (an allocation's code), `mov sp, x29` (`set_fp`), the B key's `autibsp`
/// or `autibz` (`pac_sign_lr`, which strips the signature) and the moves into x16 and x17
/// that a large `add sp` adds (`nop`, their values in `scratch`, `None` until set). `None`
/// for anything else.
fn epilogue_step(insn: u32, scratch: &mut [Option<u64>; 2]) -> Option<Step> {
    // A load of a pair or of one register, post-indexed or at an offset.
    if let Some(access) = StackAccess::of(insn) {
        return match (access.load, access.indexing) {
            (true, Indexing::Post(offset)) if offset > 0 => {
                Some(access.step(Address::PreIndexed(offset as u32)))
            }
            (true, Indexing::Offset(offset)) => Some(access.step(Address::Offset(offset))),
            _ => None,
        };
    }
    let bits = |hi: u32, lo: u32| (insn >> lo) & ((1 << (hi - lo + 1)) - 1);
    Some(match insn {
        AUTIBSP | AUTIBZ => Step::SignLr,
        // mov sp, x29.
        0x9100_03bf => Step::SetFp { offset: 0 },
        // add sp, sp, #imm{, lsl #12}.
        _ if insn & 0xff80_03ff == 0x9100_03ff => Step::Alloc {
            size: bits(21, 10) << (12 * bits(22, 22)),
        },
        // movz / movk into x16 or x17 (or w16, w17).
        _ if moves_to_scratch(insn, scratch) => Step::Nop,
        // add sp, sp, x16 or x17 (uxtx): a size set before, within the epilogue.
        _ if insn & 0xffe0_ffff == 0x8b20_63ff && matches!(bits(20, 16), 16 | 17) => Step::Alloc {
            size: u32::try_from(scratch[bits(20, 16) as usize - 16]?).ok()?,
        },
        _ => return None,
    })
}

/// A store or a load of x or d registers at the stack pointer: `stp`/`ldp` of a pair, or
/// `str`/`ldr` of one (64 bits, scaled offset or indexed).
#[derive(Clone, Copy, Debug)]
struct StackAccess {
    load: bool,
    first: u32,
    /// The pair's second register.
    second: Option<u32>,
    simd: bool,
    indexing: Indexing,
}

/// How a [`StackAccess`] addresses the stack.
#[derive(Clone, Copy, Debug)]
enum Indexing {
    /// `[sp, #offset]`.
    Offset(u32),
    /// `[sp, #offset]!`: at `sp + offset`, which `sp` then becomes.
    Pre(i32),
    /// `[sp], #offset`: at `sp`, which then moves by `offset`.
    Post(i32),
}

impl StackAccess {
    /// `insn` decoded, if it is one.
    fn of(insn: u32) -> Option<StackAccess> {
        let bits = |hi: u32, lo: u32| (insn >> lo) & ((1 << (hi - lo + 1)) - 1);
        let (rt, rn, rt2) = (bits(4, 0), bits(9, 5), bits(14, 10));
        const SP: u32 = 31;
        if rn != SP {
            return None;
        }
        // stp / ldp of x (opc 10) or d (opc 01, V) registers.
        if bits(29, 27) == 0b101 {
            let simd = match (bits(31, 30), bits(26, 26)) {
                (0b10, 0) => false,
                (0b01, 1) => true,
                _ => return None,
            };
            let offset = ((bits(21, 15) << 25) as i32 >> 25) * 8;
            let indexing = match bits(25, 23) {
                0b001 => Indexing::Post(offset),
                0b010 => Indexing::Offset(u32::try_from(offset).ok()?),
                0b011 => Indexing::Pre(offset),
                _ => return None,
            };
            return Some(StackAccess {
                load: bits(22, 22) == 1,
                first: rt,
                second: Some(rt2),
                simd,
                indexing,
            });
        }
        // str / ldr of an x or d register (size 64): scaled offset, pre- or post-indexed.
        if bits(31, 30) == 0b11 && bits(29, 27) == 0b111 && bits(23, 23) == 0 {
            let offset = (bits(20, 12) << 23) as i32 >> 23;
            let indexing = match (bits(25, 24), bits(21, 21), bits(11, 10)) {
                (0b01, _, _) => Indexing::Offset(bits(21, 10) * 8),
                (0b00, 0, 0b11) => Indexing::Pre(offset),
                (0b00, 0, 0b01) => Indexing::Post(offset),
                _ => return None,
            };
            return Some(StackAccess {
                load: bits(22, 22) == 1,
                first: rt,
                second: None,
                simd: bits(26, 26) == 1,
                indexing,
            });
        }
        None
    }

    /// The prologue step of a store of these registers at `at`.
    fn step(self, at: Address) -> Step {
        match self.second {
            Some(second) => Step::StorePair {
                first: self.first,
                second,
                simd: self.simd,
                at,
            },
            None => Step::Store {
                reg: self.first,
                simd: self.simd,
                at,
            },
        }
    }
}

/// What `insn`, an instruction of a Cranelift prologue, does; `scratch` holds the
/// constants moved into x16 and x17 for a large allocation. `None` for anything else.
fn step(insn: u32, scratch: &mut [Option<u64>; 2]) -> Option<Step> {
    // A store of a pair or of one register, pre-indexed or at an offset.
    if let Some(access) = StackAccess::of(insn) {
        return match (access.load, access.indexing) {
            (false, Indexing::Pre(offset)) if offset < 0 => {
                Some(access.step(Address::PreIndexed(offset.unsigned_abs())))
            }
            (false, Indexing::Offset(offset)) => Some(access.step(Address::Offset(offset))),
            _ => None,
        };
    }
    let bits = |hi: u32, lo: u32| (insn >> lo) & ((1 << (hi - lo + 1)) - 1);
    let (rt, rn) = (bits(4, 0), bits(9, 5));
    const SP: u32 = 31;
    Some(match insn {
        // Windows' unwinder strips the signature (`pac_sign_lr` says `pacibsp`; it does not
        // authenticate, so a `tail` function's zero modifier reads the same).
        PACIBSP | PACIBZ => Step::SignLr,
        // bti {c, j, jc}
        0xd503_241f | 0xd503_245f | 0xd503_249f | 0xd503_24df => Step::Nop,
        // ldur x29, [sp, #offset]: the caller's frame pointer reloaded, which the store
        // of x29 after it and its code restore.
        _ if insn & 0xffe0_0fff == 0xf840_03fd => Step::Nop,
        // add x29, sp, #imm (mov x29, sp).
        _ if insn & 0xffc0_03ff == 0x9100_03fd => Step::SetFp {
            offset: bits(21, 10),
        },
        // sub sp, sp, #imm{, lsl #12}; add sp, sp, #imm{, lsl #12}.
        _ if insn & 0xff80_03ff == 0xd100_03ff => Step::Alloc {
            size: bits(21, 10) << (12 * bits(22, 22)),
        },
        _ if insn & 0xff80_03ff == 0x9100_03ff => Step::Free {
            size: bits(21, 10) << (12 * bits(22, 22)),
        },
        // movz / movk into x16 or x17 (or w16, w17): a large allocation's size.
        _ if moves_to_scratch(insn, scratch) => Step::Nop,
        // An inline stack probe's loop (`enable_probestack`): arithmetic on x16 and x17,
        // a comparison of them, zeros stored below the stack pointer, the branch back. None
        // changes what unwinding restores.
        _ if insn & 0xff80_0000 == 0xd100_0000 && matches!((rt, rn), (16 | 17, 16 | 17)) => {
            Step::Nop
        }
        _ if insn & 0xffe0_fc1f == 0xab00_001f
            && matches!((rn, bits(20, 16)), (16 | 17, 16 | 17)) =>
        {
            Step::Nop
        }
        _ if insn & 0xbfe0_0c00 == 0xb820_0800 && rt == 31 && rn == SP => Step::Nop,
        // stur wzr or xzr, [sp, #imm]: an unrolled probe's store.
        _ if insn & 0xbfe0_0c00 == 0xb800_0000 && rt == 31 && rn == SP => Step::Nop,
        _ if insn & 0xff00_0010 == 0x5400_0000 && (insn >> 5) & 0x4_0000 != 0 => Step::Nop,
        // sub sp, sp, x16 or x17 (uxtx).
        _ if insn & 0xffe0_ffff == 0xcb20_63ff && matches!(bits(20, 16), 16 | 17) => Step::Alloc {
            size: u32::try_from(scratch[bits(20, 16) as usize - 16]?).ok()?,
        },
        _ => return None,
    })
}

/// Whether `insn` is a `movz` or `movk` into x16 or x17 (or w16, w17), the scratch
/// registers a large allocation's size is built in; if so, its value is kept in
/// `scratch` (`None` while a `movk` has no `movz` before it).
fn moves_to_scratch(insn: u32, scratch: &mut [Option<u64>; 2]) -> bool {
    let bits = |hi: u32, lo: u32| (insn >> lo) & ((1 << (hi - lo + 1)) - 1);
    let rt = bits(4, 0);
    if !matches!(bits(30, 23), 0b10_100101 | 0b11_100101) || !matches!(rt, 16 | 17) {
        return false;
    }
    let shift = 16 * bits(22, 21);
    let imm = u64::from(bits(20, 5)) << shift;
    let r = &mut scratch[rt as usize - 16];
    *r = match (bits(30, 29), *r) {
        (0b10, _) => Some(imm),
        (_, Some(r)) => Some(r & !(0xffff << shift) | imm),
        (_, None) => None,
    };
    true
}

/// Append the codes that undo `s` (in the order the unwinder runs them) to `out`: how
/// many (one, but two for a pair no code describes). `frame` says whether a `SetFp` sets
/// the frame the body keeps.
fn encode(s: Step, frame: bool, out: &mut Vec<u8>) -> Result<usize, String> {
    // The codes' fields: a multiple of `unit` below `limit` units.
    let field = |value: u32, unit: u32, limit: u32, what: &str| -> Result<u32, String> {
        if !value.is_multiple_of(unit) || value / unit >= limit {
            return Err(format!(
                "no Windows arm64 unwind code says {what} of {value}"
            ));
        }
        Ok(value / unit)
    };
    Ok(match s {
        Step::StorePair {
            first: 29,
            second: 30,
            simd: false,
            at,
        } => match at {
            Address::PreIndexed(size) => {
                let z = field(size, 8, 65, "a frame record's allocation")?;
                out.push(0x80 | (z - 1) as u8);
                1
            }
            Address::Offset(offset) => {
                out.push(0x40 | field(offset, 8, 64, "a frame record's offset")? as u8);
                1
            }
        },
        Step::StorePair {
            first,
            second,
            simd,
            at,
        } if second == first + 1 => {
            let reg = register(first, simd)?;
            let (pair_at, pair_pre) = if simd {
                (0xd800, 0xda00)
            } else {
                (0xc800, 0xcc00)
            };
            let code = match at {
                Address::PreIndexed(size) => {
                    pair_pre | reg << 6 | (field(size, 8, 65, "a pair's allocation")? - 1)
                }
                Address::Offset(offset) => {
                    pair_at | reg << 6 | field(offset, 8, 64, "a pair's offset")?
                }
            };
            out.extend((code as u16).to_be_bytes());
            1
        }
        // Registers that are not consecutive: no code says so; one per register, the
        // second's first (it is above the first's).
        Step::StorePair {
            first,
            second,
            simd,
            at,
        } => {
            let second_at = match at {
                Address::PreIndexed(_) => Address::Offset(8),
                Address::Offset(offset) => Address::Offset(offset + 8),
            };
            let above = Step::Store {
                reg: second,
                simd,
                at: second_at,
            };
            let below = Step::Store {
                reg: first,
                simd,
                at,
            };
            encode(above, frame, out)? + encode(below, frame, out)?
        }
        Step::Store { reg, simd, at } => {
            let r = register(reg, simd)?;
            let code = match (at, simd) {
                (Address::Offset(offset), false) => {
                    0xd000 | r << 6 | field(offset, 8, 64, "a register's offset")?
                }
                (Address::Offset(offset), true) => {
                    0xdc00 | r << 6 | field(offset, 8, 64, "a register's offset")?
                }
                (Address::PreIndexed(size), false) => {
                    0xd400 | r << 5 | (field(size, 8, 33, "a register's allocation")? - 1)
                }
                (Address::PreIndexed(size), true) => {
                    0xde00 | r << 5 | (field(size, 8, 33, "a register's allocation")? - 1)
                }
            };
            out.extend((code as u16).to_be_bytes());
            1
        }
        Step::SetFp { .. } if !frame => {
            out.push(NOP);
            1
        }
        Step::SetFp { offset: 0 } => {
            out.push(0xe1);
            1
        }
        Step::SetFp { offset } => {
            out.extend([
                0xe2,
                field(offset, 8, 256, "a frame pointer's offset")? as u8,
            ]);
            1
        }
        Step::Alloc { size } => {
            let units = field(size, 16, 1 << 24, "an allocation")?;
            if units < 32 {
                out.push(units as u8);
            } else if units < 1 << 11 {
                out.extend((0xc000 | units as u16).to_be_bytes());
            } else {
                out.push(0xe0);
                out.extend(&units.to_be_bytes()[1..]);
            }
            1
        }
        Step::SignLr => {
            out.push(PAC_SIGN_LR);
            1
        }
        Step::Free { size } => {
            return Err(format!(
                "no Windows arm64 unwind code frees {size} bytes of stack"
            ))
        }
        Step::Nop => {
            out.push(NOP);
            1
        }
    })
}

/// A callee-saved register's number in the codes (from x19, or from d8).
fn register(reg: u32, simd: bool) -> Result<u32, String> {
    let (first, last, name) = if simd { (8, 15, "d") } else { (19, 28, "x") };
    if !(first..=last).contains(&reg) {
        return Err(format!(
            "no Windows arm64 unwind code saves {name}{reg}, which is not callee-saved"
        ));
    }
    Ok(reg - first)
}
