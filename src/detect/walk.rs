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
//! overflow the native stack.

use cranelift_codegen::ir::{Block, Function};
use cranelift_entity::EntitySet;

/// Iterator over the reachable blocks of a function in canonical walk order.
pub struct CfgWalk<'f> {
    func: &'f Function,
    stack: Vec<Block>,
    visited: EntitySet<Block>,
}

impl<'f> CfgWalk<'f> {
    /// Start a walk at the entry block of `func` (an empty walk for a function with no blocks).
    pub fn new(func: &'f Function) -> Self {
        let mut stack = Vec::new();
        stack.extend(func.layout.entry_block());
        Self {
            func,
            stack,
            visited: EntitySet::with_capacity(func.dfg.num_blocks()),
        }
    }
}

impl Iterator for CfgWalk<'_> {
    type Item = Block;

    fn next(&mut self) -> Option<Block> {
        while let Some(block) = self.stack.pop() {
            if !self.visited.insert(block) {
                continue;
            }
            // Push in reverse so that the first successor is visited first.
            let start = self.stack.len();
            self.stack.extend(
                self.func
                    .block_successors(block)
                    .filter(|succ| !self.visited.contains(*succ)),
            );
            self.stack[start..].reverse();
            return Some(block);
        }
        None
    }
}
