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

// ---------------------------------------------------------------------------------------
// A small deterministic RNG (splitmix64): the same population on every run and machine.

#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x2545_F491_4F6C_DD1D)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0);
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent as usize
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i + 1);
            xs.swap(i, j);
        }
    }
}

/// Derive an independent seed.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut r = Rng::new(a.wrapping_mul(0x100_0000_01B3) ^ b.rotate_left(29));
    r.next_u64()
}

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
