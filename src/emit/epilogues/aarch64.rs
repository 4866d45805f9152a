//! Cranelift's aarch64 epilogues, found in its machine code and described in the DWARF
//! call frame information Cranelift leaves without them.
//!
//! A Cranelift function with a frame returns through
//!
//! ```text
//! add sp, sp, #N          ; the fixed frame freed (when it has one)
//! ldp d8, d9, [sp], #16   ; the callee-saved registers reloaded, each pair's slot freed:
//! ldr d10, [sp], #16      ;   floats first, then integers, by pairs and one alone
//! ldp x19, x20, [sp], #16
//! ldr x21, [sp], #16
//! ldp x29, x30, [sp], #16 ; the frame pointer and the return address
//! add sp, sp, #K          ; a `tail` function pops its stack arguments
//! autiasp                 ; with `sign_return_address`: the return address authenticated
//! ret                     ; or `retaa`, or a tail call's `b` or `br`
//! ```
//!
//! Its CFI describes the prologue only (CFA = `x29 + 16`, each register saved at its slot,
//! the return address signed), which goes wrong inside that sequence, unmerged code as well
//! as merged: after a register's `ldp` or `ldr` its slot lies below the stack pointer,
//! where a signal frame writes (aarch64 has no red zone); after `ldp x29, x30` the CFA
//! reads the caller's `x29`; after `autiasp` the return address is no longer signed, and an
//! unwinder authenticating it again gets a corrupt address (or a fault with FEAT_FPAC).
//! [`cfi`] gives the rules GCC writes: from the first reload the body's rules are
//! remembered, after each reload its registers are their own, after `ldp x29, x30` the CFA
//! is `sp` (`sp - K` after the arguments are popped) and `x29` and `x30` are their own,
//! after an authentication `RA_SIGN_STATE` is 0, and after the `ret` or jump the body's
//! rules come back. A function without a frame that signs its return address
//! (`sign_return_address_all`) gets the authentication's rule alone.
//!
//! Instructions are read only where they surely are ([`super`]): aarch64's are four bytes,
//! and Cranelift's literals (`ldr x1, pc+8; b pc+12; .8byte ...`), jump tables and
//! constant pools follow an instruction that does not fall through. An epilogue is taken
//! only whole, in one run of instructions: the reloads it starts with must be followed by
//! nothing but the forms above.

use gimli::write::CallFrameInstruction as Rule;
use gimli::AArch64 as R;

use super::Rules;

/// `ldp x29, x30, [sp], #16`.
const LDP_FP_LR: u32 = 0xa8c1_7bfd;
/// `ret` (through `x30`).
const RET: u32 = 0xd65f_03c0;
/// `retaa`, `retab`.
const RETAA: u32 = 0xd65f_0bff;
const RETAB: u32 = 0xd65f_0fff;

/// What an instruction does to the flow of control, as far as finding code needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Runs on to the next instruction (a call does too).
    Next,
    /// May branch to its target or run on.
    Conditional(i64),
    /// Branches to its target (`b`).
    Jump(i64),
    /// Does not run on, and its target is not known here: `br`, `ret` and their
    /// authenticating forms, traps (`udf`, `brk`, `hlt`).
    Stops,
}

/// The flow of the instruction `word`, at `at`.
fn flow(word: u32, at: usize) -> Flow {
    let signed = |bits: u32, width: u32| -> i64 {
        let shift = 32 - width;
        i64::from(((bits << shift) as i32) >> shift)
    };
    let target = |offset: i64| at as i64 + offset * 4;
    if word & 0xfc00_0000 == 0x1400_0000 {
        Flow::Jump(target(signed(word & 0x03ff_ffff, 26)))
    } else if word & 0xff00_0010 == 0x5400_0000 || word & 0x7e00_0000 == 0x3400_0000 {
        // b.cond, cbz, cbnz: imm19 at bits 5..24.
        Flow::Conditional(target(signed((word >> 5) & 0x7_ffff, 19)))
    } else if word & 0x7e00_0000 == 0x3600_0000 {
        // tbz, tbnz: imm14 at bits 5..19.
        Flow::Conditional(target(signed((word >> 5) & 0x3fff, 14)))
    } else if word & 0xffff_fc1f == 0xd61f_0000 // br
        || word & 0xffff_fc1f == 0xd65f_0000 // ret
        || word & 0xfeff_f800 == 0xd61f_0800 // braa, brab, braaz, brabz
        || word == RETAA
        || word == RETAB
        || word & 0xffff_0000 == 0x0000_0000 // udf
        || word & 0xffe0_001f == 0xd420_0000 // brk
        || word & 0xffe0_001f == 0xd440_0000
    // hlt
    {
        Flow::Stops
    } else {
        Flow::Next
    }
}

/// The callee-saved registers a Cranelift epilogue reloads with `word`, popping 16 bytes:
/// `ldp` or `ldr` of `x` or `d` registers, post-indexed from `sp` by 16. None for another
/// instruction.
fn reloaded(word: u32) -> Option<Vec<gimli::Register>> {
    let (rt, rt2) = (word & 31, (word >> 10) & 31);
    let x = |n: u32| gimli::Register(n as u16);
    let d = |n: u32| gimli::Register(R::V0.0 + n as u16);
    match word {
        // ldp xT, xT2, [sp], #16
        w if w & 0xffff_83e0 == 0xa8c1_03e0 && w != LDP_FP_LR => Some(vec![x(rt), x(rt2)]),
        // ldr xT, [sp], #16
        w if w & 0xffff_ffe0 == 0xf841_07e0 => Some(vec![x(rt)]),
        // ldp dT, dT2, [sp], #16
        w if w & 0xffff_83e0 == 0x6cc1_03e0 => Some(vec![d(rt), d(rt2)]),
        // ldr dT, [sp], #16
        w if w & 0xffff_ffe0 == 0xfc41_07e0 => Some(vec![d(rt)]),
        _ => None,
    }
}

/// The bytes `word` adds to `sp` if it is `add sp, sp, #imm` (12 bits, shifted by 12 or
/// not).
fn sp_added(word: u32) -> Option<u32> {
    (word & 0xff80_03ff == 0x9100_03ff).then(|| {
        let imm = (word >> 10) & 0xfff;
        if word & (1 << 22) != 0 {
            imm << 12
        } else {
            imm
        }
    })
}

/// Whether `word` authenticates `x30` in place: `autiasp`, `autibsp`, `autiaz`, `autibz`.
fn authenticates(word: u32) -> bool {
    word & 0xffff_ff9f == 0xd503_239f
}

/// Whether `word` leaves a function: `ret`, `retaa`, `retab`, or a tail call's `b` or
/// `br`.
fn leaves(word: u32) -> bool {
    matches!(word, RET | RETAA | RETAB)
        || word & 0xfc00_0000 == 0x1400_0000
        || word & 0xffff_fc1f == 0xd61f_0000
}

/// The rules an FDE adds for the epilogues of `code` (one function's aarch64 machine code,
/// whose basic blocks start at `block_starts`), in order (see the module docs).
pub fn cfi(code: &[u8], block_starts: &[u32]) -> Rules {
    let words: Vec<u32> = code
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    let index = |offset: i64| {
        (offset >= 0 && offset % 4 == 0 && (offset / 4) < words.len() as i64)
            .then_some(offset as usize / 4)
    };
    // Whether each instruction starts a run, and whether a run was read from it.
    let mut entries = vec![false; words.len()];
    let mut read = vec![false; words.len()];
    let mut to_read: Vec<usize> = block_starts
        .iter()
        .filter_map(|&s| index(i64::from(s)))
        .collect();
    to_read.push(0);
    to_read.retain(|&s| s < words.len());
    for &s in &to_read {
        entries[s] = true;
    }
    let mut rules = Vec::new();
    while let Some(start) = to_read.pop() {
        if std::mem::replace(&mut read[start], true) {
            continue;
        }
        let mut end = start;
        while end < words.len() {
            let at = end;
            end += 1;
            let (target, runs_on) = match flow(words[at], at * 4) {
                Flow::Next => (None, true),
                Flow::Conditional(target) => (Some(target), true),
                Flow::Jump(target) => (Some(target), false),
                Flow::Stops => (None, false),
            };
            // A relocated branch (a tail call) has a zero offset: it is no target here.
            if let Some(target) = target.filter(|&t| t != at as i64 * 4).and_then(index) {
                if !std::mem::replace(&mut entries[target], true) {
                    to_read.push(target);
                }
            }
            if !runs_on || end < words.len() && entries[end] {
                break;
            }
        }
        rules.extend(epilogue(&words[start..end], start, code.len()));
    }
    // Runs were read in no particular order; each one's rules are in order, and no two
    // share an offset.
    rules.sort_by_key(|(offset, _)| *offset);
    rules
}

/// The rules for the epilogue that `run` (instructions from `first`, in a function `len`
/// bytes long) ends with, if it ends with one.
fn epilogue(run: &[u32], first: usize, len: usize) -> Rules {
    let Some((&last, mut rest)) = run.split_last() else {
        return Rules::new();
    };
    if !leaves(last) {
        return Rules::new();
    }
    // Backwards from the instruction that leaves: an authentication, stack arguments
    // popped, the frame pointer and return address reloaded, callee-saved registers.
    let after = |i: usize| ((first + i + 1) * 4) as u32;
    let mut authenticated = None;
    if let Some((&w, before)) = rest.split_last() {
        if authenticates(w) {
            authenticated = Some(before.len());
            rest = before;
        }
    }
    let mut popped = Vec::new();
    while let Some((&w, before)) = rest.split_last() {
        let Some(bytes) = sp_added(w) else { break };
        popped.push((before.len(), bytes));
        rest = before;
    }
    popped.reverse();
    let frame = match rest.split_last() {
        Some((&LDP_FP_LR, before)) => {
            let at = before.len();
            rest = before;
            Some(at)
        }
        _ => None,
    };
    let mut reloads = Vec::new();
    if frame.is_some() {
        while let Some((&w, before)) = rest.split_last() {
            let Some(registers) = reloaded(w) else { break };
            reloads.push((before.len(), registers));
            rest = before;
        }
        reloads.reverse();
    }
    // Stack arguments popped without a frame: not Cranelift's, left alone.
    if frame.is_none() && (!popped.is_empty() || authenticated.is_none()) {
        return Rules::new();
    }
    let changes = reloads
        .first()
        .map(|(i, _)| *i)
        .or(frame)
        .or(authenticated)
        .expect("an epilogue changes a rule");
    let mut rules = vec![(after(changes), Rule::RememberState)];
    for (i, registers) in reloads {
        rules.extend(registers.into_iter().map(|r| (after(i), Rule::Restore(r))));
    }
    if let Some(i) = frame {
        rules.push((after(i), Rule::Cfa(R::SP, 0)));
        rules.push((after(i), Rule::Restore(R::X29)));
        rules.push((after(i), Rule::Restore(R::X30)));
    }
    let mut freed = 0i32;
    for (i, bytes) in popped {
        freed += bytes as i32;
        rules.push((after(i), Rule::Cfa(R::SP, -freed)));
    }
    if let Some(i) = authenticated {
        let mut unsigned = gimli::write::Expression::new();
        unsigned.op(gimli::DW_OP_lit0);
        rules.push((after(i), Rule::ValExpression(R::RA_SIGN_STATE, unsigned)));
    }
    let end = after(run.len() - 1);
    if (end as usize) < len {
        rules.push((end, Rule::RestoreState));
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD_SP_16: u32 = 0x9100_43ff;
    const LDP_X19_X20: u32 = 0xa8c1_53f3;
    const LDR_X21: u32 = 0xf841_07f5;
    const LDP_D8_D9: u32 = 0x6cc1_27e8;
    const AUTIASP: u32 = 0xd503_23bf;
    /// `b .` as Cranelift leaves a relocated tail call.
    const B_RELOCATED: u32 = 0x1400_0000;
    /// `mov x0, x1`.
    const MOV: u32 = 0xaa01_03e0;

    fn bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn offsets(rules: &Rules) -> Vec<u32> {
        rules.iter().map(|(o, _)| *o).collect()
    }

    #[test]
    fn a_frame_epilogue_gets_a_rule_after_each_reload() {
        let code = bytes(&[
            MOV,
            ADD_SP_16,
            LDP_D8_D9,
            LDP_X19_X20,
            LDR_X21,
            LDP_FP_LR,
            RET,
        ]);
        let rules = cfi(&code, &[]);
        let d = |n: u16| gimli::Register(R::V0.0 + n);
        assert_eq!(
            rules,
            vec![
                (12, Rule::RememberState),
                (12, Rule::Restore(d(8))),
                (12, Rule::Restore(d(9))),
                (16, Rule::Restore(R::X19)),
                (16, Rule::Restore(R::X20)),
                (20, Rule::Restore(R::X21)),
                (24, Rule::Cfa(R::SP, 0)),
                (24, Rule::Restore(R::X29)),
                (24, Rule::Restore(R::X30)),
            ]
        );
    }

    #[test]
    fn popped_arguments_authentication_and_a_tail_call() {
        // ldp x29, x30; add sp, sp, #0x30; autiasp; b (relocated); then a block.
        let code = bytes(&[LDP_FP_LR, 0x9100_c3ff, AUTIASP, B_RELOCATED, MOV, RET]);
        let rules = cfi(&code, &[16]);
        let mut lit0 = gimli::write::Expression::new();
        lit0.op(gimli::DW_OP_lit0);
        assert_eq!(
            rules,
            vec![
                (4, Rule::RememberState),
                (4, Rule::Cfa(R::SP, 0)),
                (4, Rule::Restore(R::X29)),
                (4, Rule::Restore(R::X30)),
                (8, Rule::Cfa(R::SP, -0x30)),
                (12, Rule::ValExpression(R::RA_SIGN_STATE, lit0.clone())),
                (16, Rule::RestoreState),
            ]
        );
        // A function without a frame that signs its return address.
        let rules = cfi(&bytes(&[MOV, AUTIASP, RET]), &[]);
        assert_eq!(
            rules,
            vec![
                (8, Rule::RememberState),
                (8, Rule::ValExpression(R::RA_SIGN_STATE, lit0)),
            ]
        );
        // Neither: nothing to say.
        assert!(cfi(&bytes(&[MOV, RET]), &[]).is_empty());
        assert!(cfi(&bytes(&[MOV, ADD_SP_16, RET]), &[]).is_empty());
    }

    /// Real functions compiled for aarch64 by the ISA [`super::super::compiling_isa`]
    /// gives: the same code as the original ISA's, and a rule set per epilogue.
    #[test]
    fn compiled_functions_keep_their_bytes_and_get_their_epilogues_rules() {
        use cranelift_codegen::control::ControlPlane;
        use cranelift_codegen::isa::TargetIsa;
        let text = std::fs::read_to_string(format!(
            "{}/fixtures/unwind/throw_through.clif",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let target = crate::TargetInfo::from_triple_str("aarch64-unknown-linux-gnu").unwrap();
        let isa = crate::emit::build_isa(&target, &[]).unwrap();
        let twin = super::super::compiling_isa(&*isa)
            .unwrap()
            .expect("an aarch64 ISA without block starts");
        let compile = |isa: &dyn TargetIsa, func: &cranelift_codegen::ir::Function| {
            let mut ctx = cranelift_codegen::Context::for_function(func.clone());
            ctx.compile(isa, &mut ControlPlane::default()).unwrap();
            ctx.compiled_code().unwrap().clone()
        };
        let mut epilogues = 0;
        for func in cranelift_reader::parse_functions(&text).unwrap() {
            let (plain, with_starts) = (compile(&*isa, &func), compile(&*twin, &func));
            assert_eq!(plain.buffer.data(), with_starts.buffer.data());
            assert!(!with_starts.bb_starts.is_empty());
            let code = with_starts.buffer.data();
            let rules = cfi(code, &with_starts.bb_starts);
            let remembered = rules
                .iter()
                .filter(|(_, r)| *r == Rule::RememberState)
                .count();
            let frames_freed = code
                .chunks_exact(4)
                .filter(|w| *w == LDP_FP_LR.to_le_bytes())
                .count();
            assert_eq!(remembered, frames_freed, "{}", func.name);
            epilogues += remembered;
        }
        assert!(epilogues > 10);
    }

    #[test]
    fn only_instructions_reached_from_entries_are_read() {
        // A literal that looks like an epilogue, jumped over: `b` over two words.
        let jump_over = 0x1400_0003;
        let code = bytes(&[jump_over, LDP_FP_LR, RET, MOV, RET]);
        assert!(cfi(&code, &[]).is_empty());
        // After a `ret` where no block starts: data.
        let code = bytes(&[RET, LDP_FP_LR, RET]);
        assert!(cfi(&code, &[]).is_empty());
        // The same words where a block starts: code.
        assert_eq!(offsets(&cfi(&code, &[4]))[0], 8);
        // A conditional branch's target is read: `cbz x0` to the epilogue.
        let code = bytes(&[0xb400_0060, RET, MOV, LDP_FP_LR, RET]);
        assert_eq!(offsets(&cfi(&code, &[])), [16, 16, 16, 16]);
        // A block start inside an epilogue splits it: the reloads before the start are
        // not taken for part of the epilogue after it.
        let code = bytes(&[LDP_X19_X20, LDP_FP_LR, RET]);
        assert_eq!(offsets(&cfi(&code, &[])), [4, 4, 4, 8, 8, 8]);
        assert_eq!(offsets(&cfi(&code, &[4])), [8, 8, 8, 8]);
    }
}
