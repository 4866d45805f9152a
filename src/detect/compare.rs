//! `FunctionComparator`: LLVM's total order over functions.
//!
//! Both functions are encoded chunk by chunk ([`Encoder`]): the header, then each block of
//! the CFG-ordered walk, then the trailer. The chunks are compared in lockstep and the first
//! difference decides, so two functions that differ in their signature or first block are
//! told apart without encoding the rest. Comparing chunk by chunk gives the same answer as
//! comparing the whole encodings: no chunk is a proper prefix of another (each ends in a
//! tag that nothing else can match at that place).

use std::cmp::Ordering;

use cranelift_codegen::ir::Function;

use super::encode::{ByName, CallTargets, Encoder, Token};
use crate::target::TargetInfo;

/// The total order over functions. `compare(f, g) == Equal` means the two functions do the
/// same thing and may share one body.
pub struct FunctionComparator<'a, C: CallTargets = ByName> {
    target: &'a TargetInfo,
    calls: &'a C,
}

impl<'a> FunctionComparator<'a, ByName> {
    /// The detector's comparator: callees by name, a call to oneself equal to another
    /// function's call to itself.
    pub fn new(target: &'a TargetInfo) -> Self {
        Self {
            target,
            calls: &ByName,
        }
    }
}

impl<'a, C: CallTargets> FunctionComparator<'a, C> {
    /// A comparator that encodes direct call targets by `calls` (the merger's classes).
    pub fn with_call_targets(target: &'a TargetInfo, calls: &'a C) -> Self {
        Self { target, calls }
    }

    /// Compare two functions. Reflexive, antisymmetric and transitive.
    pub fn compare(&self, left: &Function, right: &Function) -> Ordering {
        let mut l = Encoder::new(left, self.target, self.calls);
        let mut r = Encoder::new(right, self.target, self.calls);
        let (mut lbuf, mut rbuf) = (Vec::new(), Vec::new());
        loop {
            lbuf.clear();
            rbuf.clear();
            let lmore = l.next_chunk(&mut lbuf).is_ok();
            let rmore = r.next_chunk(&mut rbuf).is_ok();
            match (lmore, rmore) {
                (false, false) => return Ordering::Equal,
                // Both encoders finish after the same trailer chunk; a difference in length
                // is found inside the chunks first. Kept total for safety.
                (false, true) => return Ordering::Less,
                (true, false) => return Ordering::Greater,
                (true, true) => match lbuf.cmp(&rbuf) {
                    Ordering::Equal => {}
                    other => return other,
                },
            }
        }
    }

    /// The whole encoding of `func`: two functions compare equal exactly when their keys
    /// are equal, and keys order the same way `compare` does.
    pub fn key(&self, func: &Function) -> Vec<Token> {
        let mut key = Vec::with_capacity(func.dfg.num_insts() * 6 + 16);
        Encoder::new(func, self.target, self.calls).encode_all(&mut key);
        key
    }
}
