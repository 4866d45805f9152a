//! How a thunk that grows its stack argument area begins: by moving the stack pointer
//! down. Merge-similar writes such a thunk when its body takes more stack arguments than
//! the thunk's own callers pass (`src/emit/thunk/layout.rs`); the tests that must reach
//! one check its first instruction.

use std::path::Path;

use cranelift_object::object::{Object as _, ObjectSection as _, ObjectSymbol as _};

/// Whether `code` starts by moving the stack pointer down: `sub rsp, imm` on x86_64
/// (`x86_64`), or there `push qword ptr [rsp]` (how a thunk grows the area on Windows,
/// keeping its return address on top); `sub sp, sp, #imm` on aarch64. Functions Cranelift
/// compiles with a frame begin by saving the frame pointer instead.
pub fn grows_the_stack_area(code: &[u8], x86_64: bool) -> bool {
    if x86_64 {
        // REX.W 83 /5 ib or REX.W 81 /5 id, with rsp as the operand; FF /6 with [rsp].
        code.starts_with(&[0x48, 0x83, 0xec])
            || code.starts_with(&[0x48, 0x81, 0xec])
            || code.starts_with(&[0xff, 0x34, 0x24])
    } else {
        // SUB (immediate), 64-bit, Rd = Rn = sp.
        code.get(..4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .is_some_and(|word| word & 0xff80_03ff == 0xd100_03ff)
    }
}

/// Whether the function `name` defined in the object file `object` starts by growing the
/// stack area ([`grows_the_stack_area`]).
pub fn function_grows_the_stack_area(object: &Path, name: &str, x86_64: bool) -> bool {
    let bytes = std::fs::read(object).unwrap();
    let file = cranelift_object::object::File::parse(&*bytes).unwrap();
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok(name) && s.is_definition())
        .unwrap_or_else(|| panic!("{}: no {name}", object.display()));
    let text = file.section_by_name(".text").unwrap().data().unwrap();
    grows_the_stack_area(&text[sym.address() as usize..], x86_64)
}
