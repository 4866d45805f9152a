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
//! The walk is Cranelift's own depth-first traversal ([`Dfs`]), whose pre-order takes
//! successors in exactly that order and is iterative, so a chain of 200,000 blocks does not
//! overflow the native stack. Walks are many and short (one per function hashed or
//! encoded), so each thread keeps one `Dfs` and the order buffers of finished walks for the
//! next ones; and a caller that has just walked a function can replay that walk's order
//! instead of walking again (the merger hashes, then encodes, each function).

use std::cell::RefCell;

use cranelift_codegen::ir::{Block, Function};
use cranelift_codegen::traversals::Dfs;

/// Iterator over the reachable blocks of a function in canonical walk order.
pub struct CfgWalk<'f> {
    /// The walk's order, computed at the start (owned), or an earlier walk's (replayed).
    order: Order<'f>,
    /// The next block's position in the order.
    at: usize,
}

enum Order<'f> {
    Walked(Vec<Block>),
    Replayed(&'f [Block]),
}

thread_local! {
    /// This thread's traversal, reused by every walk on it.
    static DFS: RefCell<Dfs> = RefCell::new(Dfs::new());
    /// The order buffers of finished walks on this thread, for the next walks: allocating
    /// is most of a short walk's cost.
    static SPARE: RefCell<Vec<Vec<Block>>> = const { RefCell::new(Vec::new()) };
}

impl<'f> CfgWalk<'f> {
    /// Walk `func` from its entry block (an empty walk for a function with no blocks).
    pub fn new(func: &'f Function) -> Self {
        let mut order = SPARE
            .with(|spare| spare.borrow_mut().pop())
            .unwrap_or_default();
        order.clear();
        DFS.with(|dfs| order.extend(dfs.borrow_mut().pre_order_iter(func)));
        Self {
            order: Order::Walked(order),
            at: 0,
        }
    }

    /// The walk of `func` whose blocks an earlier walk of it gave, in order (a caller that
    /// walked the function once need not pay for the CFG twice).
    pub(crate) fn replay(_func: &'f Function, blocks: &'f [Block]) -> Self {
        Self {
            order: Order::Replayed(blocks),
            at: 0,
        }
    }
}

impl Drop for CfgWalk<'_> {
    fn drop(&mut self) {
        let Order::Walked(order) = &mut self.order else {
            return;
        };
        let order = std::mem::take(order);
        // `try_with`: a walk dropped while the thread exits just frees its buffer.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < 8 && order.capacity() <= 1 << 14 {
                spare.push(order);
            }
        });
    }
}

impl Iterator for CfgWalk<'_> {
    type Item = Block;

    #[inline]
    fn next(&mut self) -> Option<Block> {
        let order = match &self.order {
            Order::Walked(order) => order.as_slice(),
            Order::Replayed(order) => order,
        };
        let block = *order.get(self.at)?;
        self.at += 1;
        Some(block)
    }
}
