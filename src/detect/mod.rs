//! The detector: which functions are equal.
//!
//! - [`walk`]: the CFG-ordered block walk (entry first, successors in terminator order).
//! - [`encode`]: the canonical token encoding of a function, the comparator's ground truth.
//! - [`compare`]: `FunctionComparator`, the total order over functions.
//! - [`hash`]: the structural hash, consistent with the order.
//! - [`explain`]: the first difference between two functions, in words.

pub mod compare;
pub mod encode;
pub mod explain;
pub mod hash;
pub mod walk;

pub use compare::FunctionComparator;
pub use encode::{ByName, CallTarget, CallTargets};
pub use explain::{explain, Difference};
pub use hash::function_hash;
pub use walk::CfgWalk;
