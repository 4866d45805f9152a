//! A generator of random Cranelift functions for the detector's property and soundness
//! tests, plus the helpers those tests share (renumbering through text, execution in
//! cranelift-interpreter, systematic single-field mutations).
//!
//! Every function is built by `build(seed, config, variant)`. The seed alone decides the
//! program; the [`Variant`] decides only things that must not change what the comparator
//! says: the order in which blocks, stack slots and values are created (so every entity
//! number changes), the order of blocks in the layout (entry first), extra unreachable
//! blocks, and source locations. Each block's contents come from its own RNG stream, so
//! filling the blocks in another order gives the same program with other numbers.

#![allow(dead_code)]

mod build;
mod exec;
mod mutate;
mod text;

// Each test crate that includes this module uses only some of it.
#[allow(unused_imports)]
pub use build::*;
#[allow(unused_imports)]
pub use exec::*;
#[allow(unused_imports)]
pub use mutate::*;
#[allow(unused_imports)]
pub use text::*;

use std::collections::BTreeSet;

use cranelift_codegen::ir::{Block, Function, InstructionData};

mod rng;
pub use rng::*;

// ---------------------------------------------------------------------------------------
// Inspection.

/// Blocks reachable from the entry.
pub fn reachable_blocks(func: &Function) -> BTreeSet<Block> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<Block> = func.layout.entry_block().into_iter().collect();
    while let Some(b) = stack.pop() {
        if seen.insert(b) {
            stack.extend(func.block_successors(b));
        }
    }
    seen
}

/// Every instruction format and opcode in the reachable part of `func`.
pub fn formats_and_opcodes(func: &Function) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut formats = BTreeSet::new();
    let mut opcodes = BTreeSet::new();
    for b in reachable_blocks(func) {
        for inst in func.layout.block_insts(b) {
            let data = &func.dfg.insts[inst];
            formats.insert(format!("{:?}", InstructionData::opcode(data).format()));
            opcodes.insert(data.opcode().to_string());
        }
    }
    (formats, opcodes)
}
