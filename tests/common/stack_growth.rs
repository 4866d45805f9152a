//! How a thunk that grows its stack argument area begins: by moving the stack pointer
//! down. Merge-similar writes such a thunk when its body takes more stack arguments than
//! the thunk's own callers pass (`src/emit/thunk/layout.rs`); the tests that must reach
//! one check its first instruction.

/// Whether `code` starts by moving the stack pointer down by an immediate: `sub rsp, imm`
/// on x86_64 (`x86_64`), `sub sp, sp, #imm` on aarch64. Functions Cranelift compiles with
/// a frame begin by saving the frame pointer instead.
pub fn grows_the_stack_area(code: &[u8], x86_64: bool) -> bool {
    if x86_64 {
        // REX.W 83 /5 ib or REX.W 81 /5 id, with rsp as the operand.
        code.starts_with(&[0x48, 0x83, 0xec]) || code.starts_with(&[0x48, 0x81, 0xec])
    } else {
        // SUB (immediate), 64-bit, Rd = Rn = sp.
        code.get(..4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .is_some_and(|word| word & 0xff80_03ff == 0xd100_03ff)
    }
}
