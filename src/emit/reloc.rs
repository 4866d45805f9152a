//! Which relocations of compiled code are calls: a fact about each ISA's instructions.
//!
//! A relocation kind alone does not say whether the instruction calls its target or takes
//! its address. Without PIC, Cranelift writes `func_addr` of a colocated function on x86_64
//! as `lea sym(%rip), %reg` with `X86CallPCRel4`, the same kind a `call`/`jmp` uses. A call
//! to a folded function may be sent to its group's body (the body behaves the same), but an
//! address must stay the name's own: it is observable (compared, returned, stored). Taking
//! an address for a call would fold `&f` with `&g` and send `func_addr g` to `f`.
//!
//! So a relocation is a call only when the instruction it patches is a direct call or jump,
//! read from the code itself:
//! - x86_64: the 32-bit displacement directly follows the opcode byte `E8` (`call rel32`) or
//!   `E9` (`jmp rel32`). In a `lea`/`mov` the byte before a RIP-relative displacement is a
//!   ModRM byte with `mod = 00, rm = 101` (`0x05`, `0x0D`, … `0x3D`), never `E8`/`E9`.
//! - aarch64: the relocated word is `bl imm26` (`100101` in the top six bits) or `b imm26`
//!   (`000101`); `adrp`/`add`/`ldr` and literal words never are.
//!
//! Every other kind (absolute, GOT, TLS, page-relative) takes an address, whatever the
//! instruction.

use cranelift_codegen::binemit::Reloc;
use target_lexicon::Architecture;

/// Whether the relocation of `kind` at `offset` in `code` (compiled for `arch`) is the
/// target of a direct call or jump instruction, so that only control reaches the target.
pub fn is_call(arch: Architecture, kind: Reloc, code: &[u8], offset: u32) -> bool {
    let offset = offset as usize;
    match kind {
        Reloc::X86CallPCRel4 | Reloc::X86CallPLTRel4 => {
            matches!(arch, Architecture::X86_64)
                && offset >= 1
                && offset + 4 <= code.len()
                && matches!(code[offset - 1], 0xE8 | 0xE9)
        }
        Reloc::Arm64Call => {
            matches!(arch, Architecture::Aarch64(_))
                && code.get(offset..offset + 4).is_some_and(|word| {
                    let word = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                    matches!(word >> 26, 0b100101 | 0b000101)
                })
        }
        Reloc::Abs4
        | Reloc::Abs8
        | Reloc::X86PCRel4
        | Reloc::X86GOTPCRel4
        | Reloc::X86SecRel
        | Reloc::ElfX86_64TlsGd
        | Reloc::MachOX86_64Tlv
        | Reloc::MachOAarch64TlsAdrPage21
        | Reloc::MachOAarch64TlsAdrPageOff12
        | Reloc::Aarch64TlsDescAdrPage21
        | Reloc::Aarch64TlsDescLd64Lo12
        | Reloc::Aarch64TlsDescAddLo12
        | Reloc::Aarch64TlsDescCall
        | Reloc::Aarch64AdrGotPage21
        | Reloc::Aarch64AdrPrelPgHi21
        | Reloc::Aarch64AddAbsLo12Nc
        | Reloc::Aarch64Ld64GotLo12Nc
        // Targets this crate does not compile for: never taken for a call.
        | Reloc::Arm32Call
        | Reloc::S390xPCRel32Dbl
        | Reloc::S390xPLTRel32Dbl
        | Reloc::S390xTlsGd64
        | Reloc::S390xTlsGdCall
        | Reloc::RiscvCallPlt
        | Reloc::RiscvTlsGdHi20
        | Reloc::RiscvPCRelLo12I
        | Reloc::RiscvGotHi20
        | Reloc::RiscvPCRelHi20
        | Reloc::PulleyPcRel
        | Reloc::PulleyCallIndirectHost => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_call_and_jump_are_calls_lea_is_not() {
        let call = [0xE8, 0, 0, 0, 0];
        let jump = [0xE9, 0, 0, 0, 0];
        let lea = [0x48, 0x8D, 0x05, 0, 0, 0, 0];
        let x86 = Architecture::X86_64;
        assert!(is_call(x86, Reloc::X86CallPCRel4, &call, 1));
        assert!(is_call(x86, Reloc::X86CallPLTRel4, &jump, 1));
        assert!(!is_call(x86, Reloc::X86CallPCRel4, &lea, 3));
        assert!(!is_call(x86, Reloc::X86GOTPCRel4, &call, 1));
    }

    #[test]
    fn aarch64_bl_and_b_are_calls_adrp_is_not() {
        let arm = Architecture::Aarch64(target_lexicon::Aarch64Architecture::Aarch64);
        let bl = 0x9400_0000u32.to_le_bytes();
        let b = 0x1400_0000u32.to_le_bytes();
        let adrp = 0x9000_0000u32.to_le_bytes();
        assert!(is_call(arm, Reloc::Arm64Call, &bl, 0));
        assert!(is_call(arm, Reloc::Arm64Call, &b, 0));
        assert!(!is_call(arm, Reloc::Arm64Call, &adrp, 0));
        assert!(!is_call(arm, Reloc::Aarch64AdrPrelPgHi21, &adrp, 0));
    }
}
