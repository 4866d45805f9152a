//! The structural hash: cheap, stable, and consistent with the comparator.
//!
//! As in LLVM's `FunctionComparator::functionHash` and the function-merging paper that builds on it, the
//! hash looks only at the number of parameters, the blocks in CFG-walk order and the opcode
//! of every instruction. Everything it reads is also part of the comparator's encoding, in
//! the same walk order, so `compare(f, g) == Equal` implies `hash(f) == hash(g)`. Because
//! it ignores constants and call targets, functions that differ only there share a hash:
//! that is what lets near-identical merging find its candidates.
//!
//! The mixing is a fixed multiply-rotate over 64-bit words followed by a finalizer: the
//! same value on every run and every machine (no `RandomState`). The same mixing, as a
//! [`Hasher`], keys the merger's hash maps.

use std::hash::{BuildHasherDefault, Hasher};

use cranelift_codegen::ir::{Block, Function, InstructionData};

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

/// [`function_hash`] (the same value), calling `visit` on every instruction of the walk
/// (the reachable blocks, in walk order) on the way, so that a caller that also needs to
/// look at the instructions walks them once; the blocks of the walk are left in `blocks`,
/// in order. Also returns how many blocks of the layout the walk reached: fewer than the
/// layout holds means some are unreachable, and their instructions were not visited.
#[inline]
pub(crate) fn hash_visiting(
    func: &Function,
    blocks: &mut Vec<Block>,
    mut visit: impl FnMut(&InstructionData),
) -> (u64, usize) {
    let mut h = StableHasher::new();
    let mut reached = 0;
    blocks.clear();
    h.word(func.signature.params.len() as u64);
    for block in CfgWalk::new(func) {
        blocks.push(block);
        reached += usize::from(func.layout.is_block_inserted(block));
        h.word(BLOCK_MARK);
        for inst in func.layout.block_insts(block) {
            let data = &func.dfg.insts[inst];
            h.word(data.opcode() as u64);
            visit(data);
        }
    }
    (h.finish(), reached)
}

/// A small deterministic word hasher (FxHash's step with a splitmix64 finalizer).
pub(crate) struct StableHasher(u64);

impl StableHasher {
    pub(crate) fn new() -> Self {
        Self(SEED)
    }

    #[inline]
    pub(crate) fn word(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    pub(crate) fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Default for StableHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// The same mixing as a [`Hasher`], for the merger's hash maps: fast, and the same on every
/// run (no `RandomState`).
impl Hasher for StableHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(w) ^ (rest.len() as u64) << 56);
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.word(i.into());
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.word(i.into());
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.word(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.word(i as u64);
    }

    fn finish(&self) -> u64 {
        StableHasher::finish(self)
    }
}

/// A [`std::collections::HashMap`] hasher state built on [`StableHasher`].
pub(crate) type StableState = BuildHasherDefault<StableHasher>;
