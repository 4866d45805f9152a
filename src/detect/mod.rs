//! The detector: which functions are equal.
//!
//! - [`walk`]: the CFG-ordered block walk (entry first, successors in terminator order).
//! - [`encode`]: the canonical token encoding of a function, the comparator's ground truth.
//! - [`compare`]: `FunctionComparator`, the total order over functions.
//! - [`hash`]: the structural hash, consistent with the order.
//! - [`explain`](mod@explain): the first difference between two functions, in words.
//! - [`holes`]: merge-similar's mode, equal except for constants, offsets, callees,
//!   addresses and memory-flag permissions.
//! - [`permissions`]: which memory flags only permit optimisation, and their intersection.
//! - [`fingerprint`]: a function as one fingerprint per block and instruction.
//! - [`align`]: the alignment of two functions' fingerprints (Needleman–Wunsch).
//! - [`side_by_side`]: an alignment printed as CLIF, with what kept two functions apart.

pub mod align;
pub mod compare;
pub mod encode;
pub mod explain;
pub mod fingerprint;
pub mod hash;
pub mod holes;
pub mod permissions;
pub mod side_by_side;
pub mod walk;

pub use compare::FunctionComparator;
pub use encode::{ByName, CallTarget, CallTargets, HoleSite};
pub use explain::{explain, Difference};
pub use hash::function_hash;
pub use holes::{similar, Hole, HoleDifference, HoleValue};
pub use permissions::Permissions;
pub use walk::CfgWalk;
