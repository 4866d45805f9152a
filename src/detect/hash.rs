//! The structural hash: cheap, stable, and consistent with the comparator.
//!
//! As in LLVM's `FunctionComparator::functionHash` and the paper excerpt in the seeds, the
//! hash looks only at the number of parameters, the blocks in CFG-walk order and the opcode
//! of every instruction. Everything it reads is also part of the comparator's encoding, in
//! the same walk order, so `compare(f, g) == Equal` implies `hash(f) == hash(g)`. Because
//! it ignores constants and call targets, functions that differ only there share a hash:
//! that is what lets near-identical merging find its candidates.
//!
//! The mixing is a fixed multiply-rotate over 64-bit words followed by a finalizer: the
//! same value on every run and every machine (no `RandomState`).

use cranelift_codegen::ir::Function;

use super::walk::CfgWalk;

const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
const BLOCK_MARK: u64 = 0xB10C_B10C_B10C_B10C;

/// A stable structural hash of `func`.
pub fn function_hash(func: &Function) -> u64 {
    let mut h = StableHasher::new();
    h.word(func.signature.params.len() as u64);
    for block in CfgWalk::new(func) {
        h.word(BLOCK_MARK);
        for inst in func.layout.block_insts(block) {
            h.word(func.dfg.insts[inst].opcode() as u64);
        }
    }
    h.finish()
}

/// A small deterministic word hasher (FxHash's step with a splitmix64 finalizer).
struct StableHasher(u64);

impl StableHasher {
    fn new() -> Self {
        Self(SEED)
    }

    #[inline]
    fn word(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
