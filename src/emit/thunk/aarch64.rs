//! Register thunks on aarch64: each added value moved into its argument register (or
//! stored to its stack slot), then `b` to the body, with no frame.
//!
//! Which registers carry arguments (cranelift-codegen 0.135.8, `isa/aarch64/abi.rs`,
//! `compute_arg_locs`): in AAPCS64 (`system_v`) integers go in x0–x7, floats and vectors
//! in v0–v7, each class counted on its own; Cranelift's `tail` convention keeps x0 for a
//! return area and x1 for indirect callees, so its integers go in x2–x7 and its floats in
//! v0–v7. What does not fit goes on the stack ([`super::layout`]): an added value bound
//! there is written into x16 and stored to its slot, at `sp` plus its offset. When the
//! body's stack area is larger than the thunk's (`tail` only,
//! [`super::layout::Placement::grow`]), the thunk first moves `sp` down by the difference
//! (`sub sp, sp, #grow`) and copies its own stack arguments down with it through x16,
//! lowest first; the return address stays in x30. Its FDE says the CFA is `sp` + `grow`
//! from there on ([`super::RegisterThunk::frame`]).
//!
//! How each value is written:
//! - a constant: the shortest `movz`/`movn` then `movk` sequence, one instruction per
//!   16-bit half that differs from the background (all zeros for `movz`, all ones for
//!   `movn`), into the W register for types of 32 bits or fewer (the value masked to its
//!   width) and the X register for 64 bits;
//! - a function address, as Cranelift writes `func_addr` (`load_ext_name` in
//!   `inst.isle`, the `LoadExtName*` instructions in `inst/emit.rs`): with PIC through
//!   the GOT (`adrp` + `ldr`, `Aarch64AdrGotPage21` + `Aarch64Ld64GotLo12Nc`, colocated or
//!   not); without PIC `adrp` + `add` for a colocated function (`Aarch64AdrPrelPgHi21` +
//!   `Aarch64AddAbsLo12Nc`) and otherwise a literal: `ldr xN, #8; b #12` and the 8-byte
//!   address (`Abs8`);
//! - the jump: `b body` with `Arm64Call` (R_AARCH64_CALL26), as Cranelift writes a
//!   `return_call` to a colocated function; the linker (or cranelift-jit's veneer) reaches
//!   a body beyond ±128 MiB through x16, which no argument uses (the thunk is done with
//!   x16 by then). A callee that is not
//!   colocated is left to Cranelift (it would load the address and branch to a register).
//!
//! cranelift-object writes all these relocations for ELF and Mach-O, and cranelift-jit
//! (which needs `is_pic=false`) resolves the non-PIC ones. With branch protection
//! (`use_bti`) the thunk starts with `bti c`, the landing pad Cranelift puts at the entry
//! of a function without a frame, since its address may be called indirectly.

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir;
use cranelift_codegen::isa::CallConv;

use gimli::write::CallFrameInstruction;

use super::layout::{Location, Placement, Registers};
use super::shape::{Added, Shape};
use super::{RegisterThunk, BTI_C};

/// AAPCS64's (`system_v`) and Cranelift's `tail` argument registers: the first integer
/// register, and the counts; floats and vectors of 32, 64 and 128 bits in v0–v7. `None`
/// for the other conventions.
fn registers(call_conv: CallConv) -> Option<(u8, Registers)> {
    let takes_vector: fn(ir::Type) -> bool = |ty| {
        ty == ir::types::F32
            || ty == ir::types::F64
            || (ty.is_vector() && matches!(ty.bits(), 64 | 128))
    };
    let (first_integer, integers) = match call_conv {
        CallConv::SystemV => (0, 8),
        CallConv::Tail => (2, 6),
        CallConv::Fast
        | CallConv::WindowsFastcall
        | CallConv::AppleAarch64
        | CallConv::Probestack
        | CallConv::Winch
        | CallConv::PreserveAll => return None,
    };
    Some((
        first_integer,
        Registers {
            integers,
            vectors: 8,
            takes_vector,
        },
    ))
}

/// `movz`, `movn` and `movk` (move wide immediate), 32-bit forms; `SIXTY_FOUR` selects
/// the 64-bit form.
const MOVZ: u32 = 0x5280_0000;
const MOVN: u32 = 0x1280_0000;
const MOVK: u32 = 0x7280_0000;
const SIXTY_FOUR: u32 = 1 << 31;
/// `adrp xN, 0` (the page offset from the relocation).
const ADRP: u32 = 0x9000_0000;
/// `ldr xN, [xN, #0]` without its registers (unsigned offset, 64-bit).
const LDR_X: u32 = 0xF940_0000;
/// `add xN, xN, #0` without its registers (64-bit, immediate).
const ADD_X: u32 = 0x9100_0000;
/// `ldr xN, #8` without its register (literal, 64-bit: the word two instructions on).
const LDR_LITERAL_8: u32 = 0x5800_0040;
/// `b #12`: over itself and an 8-byte literal.
const B_OVER_LITERAL: u32 = 0x1400_0003;
/// `b 0` (the offset from the relocation).
const B: u32 = 0x1400_0000;
/// `sub sp, sp, #0` (64-bit, immediate; the amount in bits 10–21).
const SUB_SP: u32 = 0xD100_03FF;
/// `str xN, [xN, #0]` without its registers (unsigned offset, 64-bit).
const STR_X: u32 = 0xF900_0000;
/// The scratch register: x16 (IP0), which no convention passes an argument in.
const SCRATCH: u8 = 16;
/// `sp` as a base register.
const SP: u32 = 31;

/// `ldr` or `str` (`op`) of `SCRATCH` at `sp` + `offset` (a multiple of 8).
fn scratch_at_stack(op: u32, offset: u32) -> u32 {
    op | ((offset / 8) << 10) | (SP << 5) | u32::from(SCRATCH)
}

/// One move-wide instruction: `op` into `rd`, `imm16` shifted left by 16 × `half`.
fn move_wide(op: u32, sixty_four: bool, rd: u8, imm16: u16, half: u32) -> u32 {
    let sf = if sixty_four { SIXTY_FOUR } else { 0 };
    op | sf | (half << 21) | (u32::from(imm16) << 5) | u32::from(rd)
}

/// The shortest `movz`/`movn` + `movk` sequence that leaves `value` in `rd` (the W
/// register when not `sixty_four`: `value` must then fit 32 bits, and the upper half of
/// xN is cleared). One instruction per 16-bit half that is neither all zeros (`movz`) nor
/// all ones (`movn`), whichever leaves fewer; at least one.
pub(super) fn move_constant(rd: u8, value: u64, sixty_four: bool) -> Vec<u32> {
    let halves: u32 = if sixty_four { 4 } else { 2 };
    let half = |i: u32| (value >> (16 * i)) as u16;
    let zeros = (0..halves).filter(|&i| half(i) == 0).count();
    let ones = (0..halves).filter(|&i| half(i) == 0xFFFF).count();
    let inverted = ones > zeros;
    let background = if inverted { 0xFFFF } else { 0 };
    let mut words = Vec::new();
    for i in (0..halves).filter(|&i| half(i) != background) {
        let word = match (words.is_empty(), inverted) {
            (true, false) => move_wide(MOVZ, sixty_four, rd, half(i), i),
            (true, true) => move_wide(MOVN, sixty_four, rd, !half(i), i),
            (false, _) => move_wide(MOVK, sixty_four, rd, half(i), i),
        };
        words.push(word);
    }
    if words.is_empty() {
        // Every half is the background: 0 or all ones.
        let op = if inverted { MOVN } else { MOVZ };
        words.push(move_wide(op, sixty_four, rd, 0, 0));
    }
    words
}

/// `shape` written for aarch64, or `None` when the thunk would need a frame
/// ([`Placement::of`]; the stack area may grow only when `may_grow`), an added value would
/// go in a vector register, or the body is not colocated.
pub fn encode(
    shape: &Shape,
    is_pic: bool,
    branch_protection: bool,
    may_grow: bool,
) -> Option<RegisterThunk> {
    if !shape.callee_colocated {
        return None;
    }
    let (first_integer, registers) = registers(shape.signature.call_conv)?;
    let placement = Placement::of(shape, &registers, may_grow)?;
    let mut words: Vec<u32> = Vec::new();
    let mut relocs = Vec::new();
    let mut frame = Vec::new();
    let offset = |words: &Vec<u32>| 4 * words.len() as u32;
    if branch_protection {
        words.push(BTI_C);
    }
    if placement.grow > 0 {
        let grow = placement.grow;
        words.push(SUB_SP | (grow << 10));
        frame.push((offset(&words), CallFrameInstruction::CfaOffset(grow as i32)));
        for word in 0..placement.own_area / 8 {
            words.push(scratch_at_stack(LDR_X, grow + 8 * word));
            words.push(scratch_at_stack(STR_X, 8 * word));
        }
    }
    for (i, &added) in shape.added.iter().enumerate() {
        let (rd, slot) = match placement.locations[shape.own + i] {
            Location::Integer(n) => (first_integer + n, None),
            Location::Stack(at) => (SCRATCH, Some(at)),
            Location::Vector => return None,
        };
        match added {
            Added::Constant { ty, .. } => {
                words.extend(move_constant(rd, added.constant_value()?, ty.bits() > 32));
            }
            Added::Address {
                func_ref,
                colocated,
            } => {
                let rd32 = u32::from(rd);
                if is_pic {
                    relocs.push((offset(&words), Reloc::Aarch64AdrGotPage21, func_ref, 0));
                    words.push(ADRP | rd32);
                    relocs.push((offset(&words), Reloc::Aarch64Ld64GotLo12Nc, func_ref, 0));
                    words.push(LDR_X | (rd32 << 5) | rd32);
                } else if colocated {
                    relocs.push((offset(&words), Reloc::Aarch64AdrPrelPgHi21, func_ref, 0));
                    words.push(ADRP | rd32);
                    relocs.push((offset(&words), Reloc::Aarch64AddAbsLo12Nc, func_ref, 0));
                    words.push(ADD_X | (rd32 << 5) | rd32);
                } else {
                    words.push(LDR_LITERAL_8 | rd32);
                    words.push(B_OVER_LITERAL);
                    relocs.push((offset(&words), Reloc::Abs8, func_ref, 0));
                    words.extend([0, 0]);
                }
            }
        }
        if let Some(at) = slot {
            words.push(scratch_at_stack(STR_X, at));
        }
    }
    relocs.push((offset(&words), Reloc::Arm64Call, shape.callee, 0));
    words.push(B);
    Some(RegisterThunk {
        bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        alignment: 4,
        relocs,
        frame,
        moves_stack_pointer: placement.grow > 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::build_isa;
    use crate::emit::thunk::register_thunk;
    use crate::TargetInfo;

    /// The instructions of `bytes` as `aarch64-linux-gnu-objdump` prints them ("mov x3,
    /// #0x8", comments dropped, blanks collapsed), one per word; `None` (with a notice)
    /// when the disassembler is not installed.
    fn disassemble(bytes: &[u8]) -> Option<Vec<String>> {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), bytes).unwrap();
        let out = std::process::Command::new("aarch64-linux-gnu-objdump")
            .args(["-D", "-z", "-b", "binary", "-m", "aarch64"])
            .arg(file.path())
            .output();
        let out = match out {
            Ok(out) if out.status.success() => out,
            _ => {
                eprintln!(
                    "skipping: no aarch64-linux-gnu-objdump (Debian: binutils-aarch64-linux-gnu)"
                );
                return None;
            }
        };
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<String> = text
            .lines()
            .filter_map(|l| {
                // "   4:\tf2a00023 \tmovk\tx3, #0x1, lsl #16"
                let mut fields = l.splitn(3, '\t');
                let address = fields.next()?;
                address.trim().strip_suffix(':')?;
                fields.next()?;
                let insn = fields.next()?;
                let insn = insn.split("//").next().unwrap();
                Some(insn.split_whitespace().collect::<Vec<_>>().join(" "))
            })
            .collect();
        assert_eq!(lines.len(), bytes.len() / 4, "{text}");
        Some(lines)
    }

    /// What a `mov`/`movz`/`movn`/`movk` line leaves in its register, given what was there.
    fn simulate(line: &str, before: u64) -> (String, u64) {
        let (mnemonic, operands) = line.split_once(' ').unwrap();
        let ops: Vec<&str> = operands.split(", ").collect();
        let register = ops[0].to_string();
        let width = if register.starts_with('w') { 32 } else { 64 };
        let mask = if width == 32 {
            u64::from(u32::MAX)
        } else {
            u64::MAX
        };
        let imm = u64::from_str_radix(ops[1].strip_prefix("#0x").unwrap(), 16).unwrap();
        let shift = ops.get(2).map_or(0, |s| {
            s.strip_prefix("lsl #").unwrap().parse::<u32>().unwrap()
        });
        let value = match mnemonic {
            "mov" => imm,
            "movz" => imm << shift,
            "movn" => !(imm << shift) & mask,
            "movk" => (before & !(0xFFFF << shift)) | (imm << shift),
            _ => panic!("not a move: {line}"),
        };
        (register, value & mask)
    }

    /// Values worth writing: every pattern of zero, all-ones and other halves, and more.
    fn interesting_values() -> Vec<u64> {
        let mut values = vec![0, 1, 8, 0xFFFF, 0x1_0000, u64::MAX, u64::MAX - 1, 1 << 63];
        values.extend([0x8000_0000, 0xFFFF_FFFF, 0xFFFF_0000, 0x0000_FFFF_FFFF_0000]);
        values.extend([-4661i64 as u64, -65536i64 as u64, 0x1234_5678_9ABC_DEF0]);
        for pattern in 0..81u32 {
            // each half 0, 0xFFFF or something else
            let mut v = 0u64;
            for i in 0..4 {
                let half = match pattern / 3u32.pow(i) % 3 {
                    0 => 0,
                    1 => 0xFFFF,
                    _ => 0x1234 + 0x1111 * u64::from(i),
                };
                v |= half << (16 * i);
            }
            values.push(v);
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x);
        }
        values
    }

    /// Every constant is written with one instruction per half that differs from the
    /// better background, and objdump reads back the value in the register asked for.
    #[test]
    fn constants_decode_to_their_values_in_the_fewest_moves() {
        let mut cases: Vec<(u8, u64, bool, usize)> = Vec::new();
        let mut words: Vec<u32> = Vec::new();
        for (i, v) in interesting_values().into_iter().enumerate() {
            for sixty_four in [true, false] {
                let value = if sixty_four {
                    v
                } else {
                    v & u64::from(u32::MAX)
                };
                let rd = (i % 8) as u8;
                let seq = move_constant(rd, value, sixty_four);
                let halves: Vec<u64> = (0..if sixty_four { 4 } else { 2 })
                    .map(|h| (value >> (16 * h)) & 0xFFFF)
                    .collect();
                let not_zero = halves.iter().filter(|&&h| h != 0).count();
                let not_ones = halves.iter().filter(|&&h| h != 0xFFFF).count();
                assert_eq!(
                    seq.len(),
                    not_zero.min(not_ones).max(1),
                    "{value:#x} (64-bit: {sixty_four})"
                );
                cases.push((rd, value, sixty_four, seq.len()));
                words.extend(seq);
            }
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let Some(lines) = disassemble(&bytes) else {
            return;
        };
        let mut at = 0;
        for (rd, value, sixty_four, len) in cases {
            let want = format!("{}{rd}", if sixty_four { 'x' } else { 'w' });
            let mut register = 0;
            for line in &lines[at..at + len] {
                let (name, after) = simulate(line, register);
                assert_eq!(name, want, "{line}");
                register = after;
            }
            assert_eq!(register, value, "{value:#x}: {:?}", &lines[at..at + len]);
            at += len;
        }
    }

    /// Encodings from the Arm ARM, by hand: `movz`, `movn` (64- and 32-bit), `movk`.
    #[test]
    fn known_encodings() {
        assert_eq!(move_constant(3, 8, true), [0xD280_0103]); // movz x3, #8
        assert_eq!(move_constant(4, u64::MAX, true), [0x9280_0004]); // movn x4, #0
        assert_eq!(move_constant(1, -4661i64 as u64, true), [0x9282_4681]); // movn x1, #0x1234
        assert_eq!(move_constant(2, 0xFFFF_FFFD, false), [0x1280_0042]); // movn w2, #2
        assert_eq!(move_constant(5, 0xFFFF_0000, false), [0x52BF_FFE5]); // movz w5, #0xffff, lsl #16
        assert_eq!(
            move_constant(0, 0x1234_5678_9ABC_DEF0, true),
            // movz x0, #0xdef0; movk x0, #0x9abc, lsl #16; movk ..., lsl #32; lsl #48
            [0xD29B_DE00, 0xF2B3_5780, 0xF2CA_CF00, 0xF2E2_4680]
        );
    }

    fn isa(settings: &[(&str, &str)]) -> cranelift_codegen::isa::OwnedTargetIsa {
        let target = TargetInfo::from_triple_str("aarch64-unknown-linux-gnu").unwrap();
        let settings: Vec<(String, String)> = settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        build_isa(&target, &settings).unwrap()
    }

    fn function(clif: &str) -> ir::Function {
        *crate::read::parse_clif(clif, "thunk.clif")
            .unwrap()
            .remove(0)
            .func
    }

    /// A thunk's relocations as (instruction index, kind, name).
    type Relocations = Vec<(usize, Reloc, String)>;

    /// The thunk's instructions, and its relocations.
    fn written(clif: &str, settings: &[(&str, &str)]) -> Option<(Vec<String>, Relocations)> {
        let func = function(clif);
        let isa = isa(settings);
        let thunk = register_thunk(&func, &*isa).expect("a register thunk");
        assert_eq!(thunk.alignment, 4);
        assert_eq!(thunk.bytes.len() % 4, 0);
        let relocs = thunk
            .relocs
            .iter()
            .map(|&(offset, kind, func_ref, addend)| {
                assert_eq!(offset % 4, 0);
                assert_eq!(addend, 0);
                let name = func.dfg.ext_funcs[func_ref]
                    .name
                    .display(Some(&func.params));
                ((offset / 4) as usize, kind, name.to_string())
            })
            .collect();
        Some((disassemble(&thunk.bytes)?, relocs))
    }

    const SYSTEM_V: &str = "
function %thunk(i64, f64, i32) -> i64 system_v {
    sig0 = (i64, f64, i32, i64, i32, i8, i64, i64, i64) -> i64 system_v
    fn0 = colocated %body sig0
block0(v0: i64, v1: f64, v2: i32):
    v3 = iconst.i64 0x1234_5678_9abc_def0
    v4 = iconst.i32 -3
    v5 = iconst.i8 -1
    v6 = iconst.i64 -2
    v7 = iconst.i64 0
    v8 = iconst.i64 0xffff_0000
    v9 = call fn0(v0, v1, v2, v3, v4, v5, v6, v7, v8)
    return v9
}";

    /// AAPCS64: the own integer arguments in x0 and x1 (the float in d0), the added
    /// ones in x2..x7, each the fewest moves; then `b` with R_AARCH64_CALL26.
    #[test]
    fn system_v_constants_go_to_x2_and_on() {
        let Some((lines, relocs)) = written(SYSTEM_V, &[]) else {
            return;
        };
        assert_eq!(
            lines,
            [
                "mov x2, #0xdef0",
                "movk x2, #0x9abc, lsl #16",
                "movk x2, #0x5678, lsl #32",
                "movk x2, #0x1234, lsl #48",
                "mov w3, #0xfffffffd",
                "mov w4, #0xff",
                "mov x5, #0xfffffffffffffffe",
                "mov x6, #0x0",
                "mov x7, #0xffff0000",
                "b 0x24",
            ]
        );
        assert_eq!(relocs, [(9, Reloc::Arm64Call, "%body".to_string())]);
    }

    const TAIL: &str = "
function %thunk(i64, i64) -> i64 tail {
    sig0 = (i64, i64) -> i64 tail
    sig1 = (i64, i64, i64, i64, i64, i64) -> i64 tail
    fn0 = colocated %near sig0
    fn1 = %far sig0
    fn2 = colocated %body sig1
block0(v0: i64, v1: i64):
    v2 = func_addr.i64 fn0
    v3 = func_addr.i64 fn1
    v4 = iconst.i64 -7
    v5 = iconst.i64 0x7fff_ffff
    return_call fn2(v0, v1, v2, v3, v4, v5)
}";

    /// `tail`: the own arguments in x2 and x3, the added ones in x4..x7; function
    /// addresses as Cranelift loads them, per PIC and colocation.
    #[test]
    fn tail_arguments_start_at_x2_and_addresses_load_as_cranelift_does() {
        let Some((lines, relocs)) = written(TAIL, &[("is_pic", "true")]) else {
            return;
        };
        assert_eq!(
            lines,
            [
                "adrp x4, 0x0",
                "ldr x4, [x4]",
                "adrp x5, 0x0",
                "ldr x5, [x5]",
                "mov x6, #0xfffffffffffffff9",
                "mov x7, #0xffff",
                "movk x7, #0x7fff, lsl #16",
                "b 0x1c",
            ]
        );
        let want = [
            (0, Reloc::Aarch64AdrGotPage21, "%near"),
            (1, Reloc::Aarch64Ld64GotLo12Nc, "%near"),
            (2, Reloc::Aarch64AdrGotPage21, "%far"),
            (3, Reloc::Aarch64Ld64GotLo12Nc, "%far"),
            (7, Reloc::Arm64Call, "%body"),
        ];
        let want: Relocations = want
            .iter()
            .map(|&(i, k, n)| (i, k, n.to_string()))
            .collect();
        assert_eq!(relocs, want);

        let (lines, relocs) = written(TAIL, &[("is_pic", "false")]).unwrap();
        assert_eq!(
            lines,
            [
                "adrp x4, 0x0",
                "add x4, x4, #0x0",
                "ldr x5, 0x10",
                "b 0x18",
                "udf #0",
                "udf #0",
                "mov x6, #0xfffffffffffffff9",
                "mov x7, #0xffff",
                "movk x7, #0x7fff, lsl #16",
                "b 0x24",
            ]
        );
        let want = [
            (0, Reloc::Aarch64AdrPrelPgHi21, "%near"),
            (1, Reloc::Aarch64AddAbsLo12Nc, "%near"),
            (4, Reloc::Abs8, "%far"),
            (9, Reloc::Arm64Call, "%body"),
        ];
        let want: Relocations = want
            .iter()
            .map(|&(i, k, n)| (i, k, n.to_string()))
            .collect();
        assert_eq!(relocs, want);
    }

    /// With branch protection the thunk starts with a landing pad for indirect calls.
    #[test]
    fn branch_protection_starts_with_bti_c() {
        let Some((lines, _)) = written(TAIL, &[("is_pic", "true"), ("use_bti", "true")]) else {
            return;
        };
        assert_eq!(lines[0], "bti c");
        assert_eq!(lines.len(), 9);
    }

    /// Left to Cranelift: an added argument beyond the registers in AAPCS64 (a ninth
    /// integer: the caller pops the stack area, which the thunk cannot grow), a body that
    /// is not colocated, extended or 128-bit parameters, other conventions. Written: an
    /// added argument past the registers in `tail` (a seventh integer), and own arguments
    /// on the stack (a ninth float) when the added ones take registers.
    #[test]
    fn what_does_not_fit_the_registers_is_left_to_cranelift() {
        let isa = isa(&[]);
        let declined = |clif: &str| register_thunk(&function(clif), &*isa).is_none();
        let thunk = |params: &str, body_params: &str, conv: &str, colocated: &str| {
            format!(
                "function %t({params}) -> i64 {conv} {{
    sig0 = ({params}, {body_params}) -> i64 {conv}
    fn0 = {colocated} %body sig0
block0({}):
    v100000 = iconst.i64 1
    v100001 = call fn0({}, v100000)
    return v100001
}}",
                params
                    .split(", ")
                    .enumerate()
                    .map(|(i, t)| format!("v{i}: {}", t.split(' ').next().unwrap()))
                    .collect::<Vec<_>>()
                    .join(", "),
                (0..params.split(", ").count())
                    .map(|i| format!("v{i}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        };
        let ints = |n: usize| vec!["i64"; n].join(", ");
        let floats = |n: usize| vec!["f64"; n].join(", ");
        // The largest that fit, then one more.
        assert!(!declined(&thunk(&ints(7), "i64", "system_v", "colocated")));
        assert!(declined(&thunk(&ints(8), "i64", "system_v", "colocated")));
        assert!(!declined(&thunk(&ints(5), "i64", "tail", "colocated")));
        assert!(!declined(&thunk(&ints(6), "i64", "tail", "colocated")));
        // The largest stack area handled: 4,080 bytes (510 words past x2..x7), not 4,096.
        assert!(!declined(&thunk(&ints(515), "i64", "tail", "colocated")));
        assert!(declined(&thunk(&ints(516), "i64", "tail", "colocated")));
        let eight_floats = format!("i64, {}", floats(8));
        assert!(!declined(&thunk(
            &eight_floats,
            "i64",
            "system_v",
            "colocated"
        )));
        let nine_floats = format!("i64, {}", floats(9));
        assert!(!declined(&thunk(
            &nine_floats,
            "i64",
            "system_v",
            "colocated"
        )));
        // In AAPCS64, an added integer past the registers fits in the padding of an own
        // stack area of one word, not of two.
        let padded = format!("{}, {}", ints(8), floats(9));
        assert!(!declined(&thunk(&padded, "i64", "system_v", "colocated")));
        let full = format!("{}, {}", ints(8), floats(10));
        assert!(declined(&thunk(&full, "i64", "system_v", "colocated")));
        assert!(declined(&thunk("i64", "i64", "system_v", "")));
        assert!(declined(&thunk("i64 uext", "i64", "system_v", "colocated")));
        assert!(declined(&thunk("i64", "i64 sext", "system_v", "colocated")));
        assert!(declined(&thunk("i128", "i64", "system_v", "colocated")));
        assert!(declined(&thunk("f16", "i64", "system_v", "colocated")));
        assert!(declined(&thunk("i64", "i64", "apple_aarch64", "colocated")));
        assert!(declined(&thunk("i64", "i64", "fast", "colocated")));
    }
}
