//! Where the bytes of `.text` went: per function, what emission actually defined.
//!
//! Size reports must come from the code that was written, not from an estimate, so
//! [`super::define`] records here, for every module function, two numbers as it defines
//! the function:
//!
//! - **own**: the bytes the name takes in `.text` by itself: its compiled body, a copy of
//!   its group's body, or its thunk; 0 for an alias or an erased function, and 0 for the
//!   kept function of a group whose body moved into a new local symbol (that body is
//!   counted by [`CodeSizes::body`], once per group);
//! - **runs**: the bytes of the compiled body a call to the name runs: its own body, or
//!   its group's.
//!
//! Every size is padded to its alignment, as the object lays it out. (Definitions are sorted
//! most-aligned first, so only the last definition of each alignment may be followed by
//! less padding than counted: sums are exact to within the largest alignment.) With these
//! two numbers a group saves, against compiling every member from its own (equal) body,
//! `Σ runs − Σ own − shared body`.

use cranelift_entity::SecondaryMap;

use crate::merge::{Body, FuncIndex, MergePlan};

/// Bytes per function, as defined ([`super::define::define_all`] fills it).
#[derive(Clone, Debug, Default)]
pub struct CodeSizes {
    /// Bytes each function takes in `.text` by itself.
    pub own: SecondaryMap<FuncIndex, u64>,
    /// Bytes of the body a call to each function runs.
    pub runs: SecondaryMap<FuncIndex, u64>,
}

impl CodeSizes {
    /// Bytes of the body a group keeps, counted once for the group when it is a new local
    /// symbol (the kept function's `own` bytes count it otherwise). `kept` is the group's
    /// kept function.
    pub fn body(&self, plan: &MergePlan, kept: FuncIndex) -> u64 {
        match plan.group_of(kept).map(|g| &g.body) {
            Some(Body::SharedLocal { .. }) => self.runs[kept],
            _ => 0,
        }
    }

    /// Bytes a group saves against compiling every member from its own body: what its
    /// members' calls run, minus what they take now, minus a shared local body. Negative
    /// when its thunks are larger than the bodies they replace.
    pub fn saved_by_group(&self, plan: &MergePlan, members: &[FuncIndex]) -> i64 {
        let Some(&first) = members.first() else {
            return 0;
        };
        let kept = plan.body_of(first);
        let runs: u64 = members.iter().map(|&f| self.runs[f]).sum();
        let own: u64 = members.iter().map(|&f| self.own[f]).sum();
        runs as i64 - own as i64 - self.body(plan, kept) as i64
    }
}

/// `len` bytes rounded up to `alignment` (what a definition takes before the next one).
pub fn padded(len: usize, alignment: u64) -> u64 {
    (len as u64).div_ceil(alignment.max(1)) * alignment.max(1)
}
