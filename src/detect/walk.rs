//! The CFG-ordered block walk shared by the comparator and the hash.
//!
//! LLVM's `FunctionComparator` does "a CFG-ordered walk since the actual ordering of the
//! blocks in the linked list is immaterial": it starts at the entry block and takes each
//! block from each terminator in order, so block layout does not matter and unreachable
//! blocks are never seen. This is that walk for Cranelift IR: a depth-first preorder from
//! the entry block, visiting the successors of a terminator in the order the terminator
//! names them (`brif`: then, else; `br_table`: default, then the table entries;
//! `try_call`: the catch targets in table order, then the normal return).
//!
//! The walk is iterative (an explicit stack), so a chain of 200,000 blocks does not
//! overflow the native stack. Walks are many and short (one per function hashed or
//! encoded), so a finished walk leaves its stack and visited set to the next one on its
//! thread; and a caller that has just walked a function can replay that walk's order
//! instead of walking again (the merger hashes, then encodes, each function).

use std::cell::RefCell;

use cranelift_codegen::ir::{Block, Function};
use cranelift_entity::EntityRef;

/// Iterator over the reachable blocks of a function in canonical walk order.
pub struct CfgWalk<'f> {
    func: &'f Function,
    stack: Vec<Block>,
    /// One bit per block: visited.
    visited: Vec<u64>,
    /// The order of an earlier walk of the same function, replayed instead of walking.
    replay: Option<std::slice::Iter<'f, Block>>,
}

thread_local! {
    /// The buffers of finished walks on this thread, for the next walks: walks are many
    /// and short (one per function hashed or encoded), and allocating is most of a short
    /// walk's cost.
    static SPARE: RefCell<Vec<(Vec<Block>, Vec<u64>)>> = const { RefCell::new(Vec::new()) };
}

impl<'f> CfgWalk<'f> {
    /// Start a walk at the entry block of `func` (an empty walk for a function with no blocks).
    pub fn new(func: &'f Function) -> Self {
        let (mut stack, mut visited) = SPARE
            .with(|spare| spare.borrow_mut().pop())
            .unwrap_or_default();
        stack.clear();
        stack.extend(func.layout.entry_block());
        visited.clear();
        visited.resize(func.dfg.num_blocks().div_ceil(64), 0);
        Self {
            func,
            stack,
            visited,
            replay: None,
        }
    }

    /// The walk of `func` whose blocks an earlier walk of it gave, in order (a caller that
    /// walked the function once need not pay for the CFG twice).
    pub(crate) fn replay(func: &'f Function, blocks: &'f [Block]) -> Self {
        Self {
            func,
            stack: Vec::new(),
            visited: Vec::new(),
            replay: Some(blocks.iter()),
        }
    }

    /// Mark `block` visited; `false` if it already was.
    #[inline]
    fn insert(&mut self, block: Block) -> bool {
        let (word, bit) = (block.index() / 64, 1u64 << (block.index() % 64));
        if word >= self.visited.len() {
            self.visited.resize(word + 1, 0);
        }
        let fresh = self.visited[word] & bit == 0;
        self.visited[word] |= bit;
        fresh
    }

    #[inline]
    fn contains(&self, block: Block) -> bool {
        let (word, bit) = (block.index() / 64, 1u64 << (block.index() % 64));
        self.visited.get(word).is_some_and(|w| w & bit != 0)
    }
}

impl Drop for CfgWalk<'_> {
    fn drop(&mut self) {
        if self.replay.is_some() {
            return;
        }
        let buffers = (
            std::mem::take(&mut self.stack),
            std::mem::take(&mut self.visited),
        );
        // `try_with`: a walk dropped while the thread exits just frees its buffers.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < 8 && buffers.0.capacity() + buffers.1.capacity() <= 1 << 16 {
                spare.push(buffers);
            }
        });
    }
}

impl Iterator for CfgWalk<'_> {
    type Item = Block;

    fn next(&mut self) -> Option<Block> {
        if let Some(replay) = &mut self.replay {
            return replay.next().copied();
        }
        while let Some(block) = self.stack.pop() {
            if !self.insert(block) {
                continue;
            }
            // Push in reverse so that the first successor is visited first.
            let start = self.stack.len();
            let func = self.func;
            for succ in func.block_successors(block) {
                if !self.contains(succ) {
                    self.stack.push(succ);
                }
            }
            self.stack[start..].reverse();
            return Some(block);
        }
        None
    }
}
