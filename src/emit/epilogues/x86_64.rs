//! Cranelift's x86_64 epilogues, found in its machine code, so that unwinding is right at
//! every instruction of them: rewritten into a form Windows' unwinder recognizes, and
//! described in the DWARF call frame information Cranelift leaves without them.
//!
//! A Cranelift function with a frame returns through
//!
//! ```text
//! mov rbx, [rsp+..] ... ; the callee-saved registers reloaded (when it saved any)
//! add rsp, N            ; 48 83 c4 ib, or 48 81 c4 id (when it allocated a frame)
//! mov rsp, rbp          ; 48 89 ec
//! pop rbp
//! ret                   ; or, for a tail call, moves and a jump
//! ```
//!
//! Two unwinders go wrong in it, unmerged Cranelift code as well as merged:
//!
//! - **Windows** unwinds a function stopped in its body by undoing the prologue's codes,
//!   and one stopped in an epilogue by running it forward; it knows an epilogue by its
//!   code: `add rsp, N` or `lea rsp, [frame register + d]`, then pops, then `ret` or a
//!   jump. Cranelift's `add` is followed by a `mov`, so stopped at the `mov`, after the
//!   `add` freed the frame, it reads the callee-saved registers from below the stack
//!   pointer, where the exception's own dispatch has just written. The `add` is dead (the
//!   `mov` sets `rsp` again, and nothing after an epilogue reads its flags), so
//!   [`rewrite_for_windows`] makes the two, in the same bytes, a `nop` (3 or 6 bytes) and
//!   `lea rsp, [rbp+0]`: stopped at the `nop` the frame is still allocated, as anywhere in
//!   the body; at the `lea` Windows sees an epilogue (`rbp` is the frame register of the
//!   unwind information [`crate::emit::unwind`] writes) and runs it.
//! - **DWARF**: Cranelift's CFI describes the prologue only, so its rules (CFA `rbp + 16`,
//!   registers saved in the frame) hold to the function's end. After `pop rbp`, `rbp` is
//!   the caller's and the CFA is wrong; after the `add`, the saved registers lie below the
//!   stack pointer, past the red zone for a large save area, where a signal frame writes.
//!   [`cfi`] gives the rules [`crate::emit::unwind`] adds to each FDE: from the `add` the
//!   callee-saved registers hold their own values, from after `pop rbp` the CFA is
//!   `rsp + 8`, and after the epilogue's last instruction the body's rules again (as GCC
//!   says with `.cfi_remember_state` and `.cfi_restore_state`).
//!
//! No offset moves, so relocations, traps, call sites and the prologue's unwind codes stay
//! where Cranelift put them. The instructions are decoded with iced-x86, only where they
//! surely are instructions (see [`super`]), and an epilogue a jump enters anywhere but at
//! its start is left alone.
//!
//! A tail call's epilogue ends in `jmp r10` (after moving the return address up, when the
//! callee takes fewer stack arguments), which Windows' unwinder takes for an epilogue's
//! end only with REX.W, and Wine 8's not at all: [`tail_calls`] gives where their `pop rbp`
//! and jump are, which get `RUNTIME_FUNCTION`s of their own
//! ([`crate::emit::unwind::windows_x64::WindowsFrame::ranges`]). `tests/unwind.rs` checks
//! every step under Wine, and every step on Linux with libgcc's unwinder.
//!
//! On the corpora (Windows x64, `--merge-similar`) every such epilogue is rewritten and
//! nothing else changes (zstd 358, re2 1,830, sqlite 2,802). Recording the block starts and
//! decoding costs about 1.3% of code generation's instructions (zstd, one thread).

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, OpKind, Register};

use super::Rules;
use crate::emit::unwind::windows_x64::TailCall;

/// `lea rsp, [rbp+0]`.
const LEA_RSP_RBP: [u8; 4] = [0x48, 0x8d, 0x65, 0x00];
/// `mov rsp, rbp`.
const MOV_RSP_RBP: [u8; 3] = [0x48, 0x89, 0xec];
/// `pop rbp`.
const POP_RBP: u8 = 0x5d;

/// One epilogue of a function's code, by offsets into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epilogue {
    /// The `add rsp, N` that frees the frame, directly before `frame_freed`, if any.
    pub add: Option<usize>,
    /// The `mov rsp, rbp` (or `lea rsp, [rbp+0]`).
    pub frame_freed: usize,
    /// Just after `pop rbp`: from here the CFA is `rsp + 8`.
    pub popped: usize,
    /// Just after its `ret` or jump.
    pub end: usize,
    /// Whether it ends in a jump (a tail call) rather than a `ret`.
    pub jumps: bool,
}

impl Epilogue {
    /// Where the epilogue starts: from here every callee-saved register holds its own value.
    pub fn start(&self) -> usize {
        self.add.unwrap_or(self.frame_freed)
    }
}

/// The rules an FDE adds for `epilogues` (found by [`epilogues`]) in a function `len`
/// bytes long, as GCC writes them: where an epilogue starts, the body's rules are
/// remembered and every callee-saved register is its own again (each was reloaded before
/// the frame is freed, and its slot may be gone: below the stack pointer, past the red
/// zone for a large save area); after `pop rbp` the CFA is `rsp + 8` and `rbp` its own;
/// after the `ret` or jump the body's rules come back.
pub fn cfi(epilogues: &[Epilogue], len: u32) -> Rules {
    use gimli::write::CallFrameInstruction as Rule;
    use gimli::X86_64 as R;
    // Every register a System V or Windows x64 function keeps but `rbp`: saying one that
    // was not saved is its own says nothing new.
    let kept = [
        R::RBX,
        R::RSI,
        R::RDI,
        R::R12,
        R::R13,
        R::R14,
        R::R15,
        R::XMM6,
        R::XMM7,
        R::XMM8,
        R::XMM9,
        R::XMM10,
        R::XMM11,
        R::XMM12,
        R::XMM13,
        R::XMM14,
        R::XMM15,
    ];
    let mut rules = Rules::new();
    for e in epilogues {
        let at = |offset: usize| offset as u32;
        rules.push((at(e.start()), Rule::RememberState));
        rules.extend(kept.iter().map(|&r| (at(e.start()), Rule::Restore(r))));
        rules.push((at(e.popped), Rule::Cfa(R::RSP, 8)));
        rules.push((at(e.popped), Rule::Restore(R::RBP)));
        if at(e.end) < len {
            rules.push((at(e.end), Rule::RestoreState));
        }
    }
    rules
}

/// The tail calls among `epilogues`: those that end in a jump, by where their `pop rbp` is
/// and where they end, for Windows x64's unwind ranges.
pub fn tail_calls(epilogues: &[Epilogue]) -> Vec<TailCall> {
    epilogues
        .iter()
        .filter(|e| e.jumps)
        .map(|e| TailCall {
            pop: (e.popped - 1) as u32,
            end: e.end as u32,
        })
        .collect()
}

/// Rewrite, in `code`, the `add rsp, N` and `mov rsp, rbp` of each of its `epilogues`
/// into a `nop` and `lea rsp, [rbp+0]` of the same length (see the module docs). Returns
/// how many.
pub fn rewrite_for_windows(code: &mut [u8], epilogues: &[Epilogue]) -> usize {
    let mut rewritten = 0;
    for e in epilogues {
        let Some(at) = e.add else { continue };
        let len = e.frame_freed + MOV_RSP_RBP.len() - at;
        let nop: &[u8] = match len {
            7 => &[0x0f, 0x1f, 0x00],
            10 => &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
            _ => unreachable!("an add of 4 or 7 bytes and a mov of 3"),
        };
        if code[e.frame_freed..e.frame_freed + MOV_RSP_RBP.len()] != MOV_RSP_RBP {
            continue;
        }
        code[at..at + nop.len()].copy_from_slice(nop);
        code[at + nop.len()..at + len].copy_from_slice(&LEA_RSP_RBP);
        rewritten += 1;
    }
    rewritten
}

/// What a run of decoding has seen of an epilogue so far.
#[derive(Clone, Copy)]
enum Seen {
    Nothing,
    /// The frame freed; `pop rbp` must come next.
    FrameFreed {
        add: Option<usize>,
        at: usize,
    },
    /// `rbp` popped; moves may come before the `ret` or jump.
    Popped {
        add: Option<usize>,
        at: usize,
        popped: usize,
    },
}

/// The epilogues of `code` (one function's x86_64 machine code, whose basic blocks start
/// at `block_starts`), in order. The code is decoded from its entries: the function's
/// start, every block start and the target of every direct branch met (Cranelift's
/// sequences such as a float conversion jump inside a block), each run up to its first
/// instruction that does not fall through or the next entry: only what is surely an
/// instruction is read, about once. An epilogue that an entry falls inside is left out.
pub fn epilogues(code: &[u8], block_starts: &[u32]) -> Vec<Epilogue> {
    // Whether each offset is an entry, and whether it was decoded from.
    let mut entries = vec![false; code.len()];
    let mut decoded = vec![false; code.len()];
    let mut to_decode: Vec<usize> = block_starts.iter().map(|&s| s as usize).collect();
    to_decode.push(0);
    to_decode.retain(|&s| s < code.len());
    for &s in &to_decode {
        entries[s] = true;
    }
    let mut found = Vec::new();
    let mut instruction = Instruction::default();
    while let Some(start) = to_decode.pop() {
        if std::mem::replace(&mut decoded[start], true) {
            continue;
        }
        let mut decoder = Decoder::with_ip(64, &code[start..], start as u64, DecoderOptions::NONE);
        let mut previous: Option<Instruction> = None;
        let mut seen = Seen::Nothing;
        while decoder.can_decode() {
            decoder.decode_out(&mut instruction);
            let at = instruction.ip() as usize;
            if instruction.is_invalid() || (at != start && entries[at]) {
                break;
            }
            let bytes = &code[at..at + instruction.len()];
            let flow = instruction.flow_control();
            seen = match seen {
                _ if bytes == MOV_RSP_RBP || bytes == LEA_RSP_RBP => Seen::FrameFreed {
                    add: previous.filter(is_add_rsp).map(|i| i.ip() as usize),
                    at,
                },
                Seen::FrameFreed { add, at: freed } if bytes == [POP_RBP] => Seen::Popped {
                    add,
                    at: freed,
                    popped: instruction.next_ip() as usize,
                },
                Seen::Popped { add, at, popped } => match flow {
                    FlowControl::Return
                    | FlowControl::UnconditionalBranch
                    | FlowControl::IndirectBranch => {
                        found.push(Epilogue {
                            add,
                            frame_freed: at,
                            popped,
                            end: instruction.next_ip() as usize,
                            jumps: flow != FlowControl::Return,
                        });
                        Seen::Nothing
                    }
                    FlowControl::Next => seen,
                    FlowControl::Call
                    | FlowControl::IndirectCall
                    | FlowControl::ConditionalBranch
                    | FlowControl::Interrupt
                    | FlowControl::XbeginXabortXend
                    | FlowControl::Exception => Seen::Nothing,
                },
                Seen::Nothing | Seen::FrameFreed { .. } => Seen::Nothing,
            };
            // A branch's target is code, unless the branch is relocated (a tail call, whose
            // displacement Cranelift leaves zero: it seems to jump to what follows it).
            let branch = matches!(
                flow,
                FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch
            );
            let target = instruction.near_branch_target() as usize;
            if branch
                && instruction.op0_kind() == OpKind::NearBranch64
                && target as u64 != instruction.next_ip()
                && target < code.len()
                && !std::mem::replace(&mut entries[target], true)
            {
                to_decode.push(target);
            }
            match flow {
                FlowControl::Next
                | FlowControl::Call
                | FlowControl::IndirectCall
                | FlowControl::ConditionalBranch => {}
                // What follows may be data (a jump table, constants) or another block.
                FlowControl::UnconditionalBranch
                | FlowControl::IndirectBranch
                | FlowControl::Return
                | FlowControl::Interrupt
                | FlowControl::XbeginXabortXend
                | FlowControl::Exception => break,
            }
            previous = Some(instruction);
        }
    }
    found.retain(|e| !entries[e.start() + 1..e.end].iter().any(|&entry| entry));
    found.sort_unstable_by_key(|e| e.start());
    found.dedup();
    found
}

/// Whether `i` is `add rsp, imm8` or `add rsp, imm32` in Cranelift's encodings (REX.W, no
/// other prefix).
fn is_add_rsp(i: &Instruction) -> bool {
    matches!(i.code(), Code::Add_rm64_imm8 | Code::Add_rm64_imm32)
        && i.op0_register() == Register::RSP
        && matches!(i.len(), 4 | 7)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `add rsp, 0x20; mov rsp, rbp; pop rbp; ret`.
    const EPILOGUE8: [u8; 9] = [0x48, 0x83, 0xc4, 0x20, 0x48, 0x89, 0xec, 0x5d, 0xc3];

    fn rewrite(code: &mut [u8], block_starts: &[u32]) -> usize {
        let found = epilogues(code, block_starts);
        rewrite_for_windows(code, &found)
    }

    #[test]
    fn an_epilogue_is_found_with_its_offsets() {
        assert_eq!(
            epilogues(&EPILOGUE8, &[]),
            [Epilogue {
                add: Some(0),
                frame_freed: 4,
                popped: 8,
                end: 9,
                jumps: false
            }]
        );
        // Without an add, and a tail call's moves between `pop rbp` and its jump.
        let code = [
            0x48, 0x89, 0xec, 0x5d, 0x48, 0x8b, 0x04, 0x24, 0xe9, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            epilogues(&code, &[]),
            [Epilogue {
                add: None,
                frame_freed: 0,
                popped: 4,
                end: 13,
                jumps: true
            }]
        );
        // No `pop rbp` after the `mov`: no epilogue.
        assert_eq!(epilogues(&[0x48, 0x89, 0xec, 0xc3], &[]), []);
    }

    #[test]
    fn both_forms_of_add_become_a_nop_and_a_lea() {
        let mut code = EPILOGUE8.to_vec();
        assert_eq!(rewrite(&mut code, &[]), 1);
        assert_eq!(code, [0x0f, 0x1f, 0x00, 0x48, 0x8d, 0x65, 0x00, 0x5d, 0xc3]);
        // add rsp, 0x1000 (imm32), then the same.
        let mut code = vec![
            0x48, 0x81, 0xc4, 0x00, 0x10, 0x00, 0x00, 0x48, 0x89, 0xec, 0x5d, 0xc3,
        ];
        assert_eq!(rewrite(&mut code, &[]), 1);
        assert_eq!(
            code,
            [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x48, 0x8d, 0x65, 0x00, 0x5d, 0xc3]
        );
        // A rewritten epilogue is still found, without its add.
        assert_eq!(epilogues(&code, &[])[0].frame_freed, 6);
    }

    #[test]
    fn only_instructions_reached_from_entries_are_read() {
        // The epilogue's bytes inside a `movabs rax, imm64` immediate: no instruction.
        let mut code = vec![0x48, 0xb8];
        code.extend_from_slice(&EPILOGUE8[..8]);
        code.push(0xc3);
        let before = code.clone();
        assert_eq!(rewrite(&mut code, &[]), 0);
        assert_eq!(code, before);
        // After a `ret`, without a block starting there: data (a constant pool).
        let mut code = vec![0xc3];
        code.extend_from_slice(&EPILOGUE8);
        let before = code.clone();
        assert_eq!(rewrite(&mut code, &[]), 0);
        assert_eq!(code, before);
        // The same bytes where a block starts: code.
        assert_eq!(rewrite(&mut code, &[1]), 1);
        // The `mov` a block start (a jump there would land inside the `lea`): left alone.
        let mut code = EPILOGUE8.to_vec();
        assert_eq!(rewrite(&mut code, &[4]), 0);
        assert_eq!(code, EPILOGUE8);
        // ... or a branch's target: `jmp` over a `ud2` onto it.
        let mut code = vec![
            0x48, 0x83, 0xc4, 0x20, 0x48, 0x89, 0xec, 0x5d, 0xc3, 0xeb, 0xf9,
        ];
        let before = code.clone();
        assert_eq!(rewrite(&mut code, &[9]), 0);
        assert_eq!(code, before);
        // An add of another register, or a mov that does not follow the add: no add.
        let mut code = vec![0x48, 0x83, 0xc0, 0x20, 0x48, 0x89, 0xec, 0x5d, 0xc3];
        assert_eq!(rewrite(&mut code, &[]), 0);
        let mut code = vec![0x48, 0x83, 0xc4, 0x20, 0x90, 0x48, 0x89, 0xec, 0x5d, 0xc3];
        assert_eq!(rewrite(&mut code, &[]), 0);
    }

    /// A real function compiled for Windows x64 by the ISA [`super::super::compiling_isa`] gives: the
    /// code is the same as the original ISA's, and its epilogue is rewritten.
    #[test]
    fn a_compiled_function_keeps_its_bytes_but_the_epilogue() {
        use cranelift_codegen::control::ControlPlane;
        use cranelift_codegen::isa::TargetIsa;
        let text = std::fs::read_to_string(format!(
            "{}/fixtures/unwind/throw_through_fastcall.clif",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let func = cranelift_reader::parse_functions(&text).unwrap().remove(0);
        let target = crate::TargetInfo::from_triple_str("x86_64-pc-windows-gnu").unwrap();
        let isa = crate::emit::build_isa(&target, &[]).unwrap();
        let twin = super::super::compiling_isa(&*isa)
            .unwrap()
            .expect("an x86_64 ISA without block starts");
        assert!(super::super::compiling_isa(&*twin).unwrap().is_none());
        let compile = |isa: &dyn TargetIsa| {
            let mut ctx = cranelift_codegen::Context::for_function(func.clone());
            ctx.compile(isa, &mut ControlPlane::default()).unwrap();
            ctx.compiled_code().unwrap().clone()
        };
        let (plain, with_starts) = (compile(&*isa), compile(&*twin));
        assert_eq!(plain.buffer.data(), with_starts.buffer.data());
        assert!(plain.bb_starts.is_empty() && !with_starts.bb_starts.is_empty());
        let mut code = with_starts.buffer.data().to_vec();
        assert!(rewrite(&mut code, &with_starts.bb_starts) >= 1);
        let changed: Vec<usize> = (0..code.len())
            .filter(|&i| code[i] != plain.buffer.data()[i])
            .collect();
        assert!(!changed.is_empty() && changed.len() <= 10, "{changed:?}");
        assert!(code.windows(4).any(|w| w == LEA_RSP_RBP));
        assert!(!code.windows(3).any(|w| w == MOV_RSP_RBP));
    }
}
