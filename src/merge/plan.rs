//! `MergePlan`: the seam between analysis and mechanics.
//!
//! Everything before the plan decides what is equal and what each name becomes; everything
//! after it (object emission, a JIT, a report) carries the plan out and never decides what
//! is equal.

use cranelift_entity::SecondaryMap;
use serde::{Deserialize, Serialize};

use super::module::{FuncIndex, Module};

/// What becomes of one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Compiled from its own body (every function not in a group, and each group's kept one).
    #[default]
    Keep,
    /// Gone: every call and address reference is redirected to the group's body.
    Erased,
    /// A second symbol at the address of the group's body.
    Alias,
    /// A distinct function that jumps to the group's body.
    Thunk,
}

impl Action {
    /// The word used in reports: `keep`, `erased`, `alias`, `thunk`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Keep => "keep",
            Action::Erased => "erased",
            Action::Alias => "alias",
            Action::Thunk => "thunk",
        }
    }
}

/// Where a group's one body lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// In the kept function itself.
    Kept,
    /// In a new local function, because the kept function is preemptible (it may be
    /// replaced at link time, and the other names must not follow it).
    SharedLocal {
        /// The new local symbol.
        symbol: String,
    },
}

/// How a group of equal functions was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FoundBy {
    /// LLVM's worklist and tree (identical, or identical once callees were folded).
    Tree,
    /// Class refinement over the call graph (mutually recursive cycles).
    Cycle,
    /// Machine-code folding after code generation: different IR, the same code.
    Code,
}

/// A group of equal functions sharing one body.
#[derive(Clone, Debug)]
pub struct Group {
    /// The function whose body is compiled for everyone.
    pub kept: FuncIndex,
    /// Where that body goes.
    pub body: Body,
    /// The other members and what each becomes, in name order.
    pub folded: Vec<(FuncIndex, Action)>,
    /// How the group was found.
    pub found_by: FoundBy,
}

/// The result of the pass: groups, an action per function, and call redirections.
#[derive(Clone, Debug, Default)]
pub struct MergePlan {
    pub(crate) groups: Vec<Group>,
    pub(crate) actions: SecondaryMap<FuncIndex, Action>,
    pub(crate) redirects: SecondaryMap<FuncIndex, Option<FuncIndex>>,
    pub(crate) group_of: SecondaryMap<FuncIndex, Option<u32>>,
    /// The functions whose address some function of the module takes, as the plan was
    /// made with them (`None` in a plan made without the module: the default). Machine-code
    /// folding plans its groups with the same map rather than walking the module again.
    pub(crate) address_used: Option<SecondaryMap<FuncIndex, bool>>,
}

impl MergePlan {
    /// The groups, ordered by the name of their kept function.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// What becomes of `f`. For a kept function with a shared local body this is the
    /// alias or thunk that its name becomes.
    pub fn action(&self, f: FuncIndex) -> Action {
        self.actions[f]
    }

    /// Where direct calls to `f` go: `Some(kept)` when they are redirected.
    pub fn redirect(&self, f: FuncIndex) -> Option<FuncIndex> {
        self.redirects[f]
    }

    /// The group `f` belongs to, if any.
    pub fn group_of(&self, f: FuncIndex) -> Option<&Group> {
        self.group_of[f].map(|g| &self.groups[g as usize])
    }

    /// The function whose body runs when `f` is called: its group's kept function, or `f`
    /// itself when it is in no group.
    pub fn body_of(&self, f: FuncIndex) -> FuncIndex {
        self.group_of(f).map_or(f, |g| g.kept)
    }

    /// How many functions were folded into another.
    pub fn folded_count(&self) -> usize {
        self.groups.iter().map(|g| g.folded.len()).sum()
    }

    /// Whether `a` and `b` share one body.
    pub fn same_body(&self, a: FuncIndex, b: FuncIndex) -> bool {
        a == b || (self.group_of[a].is_some() && self.group_of[a] == self.group_of[b])
    }

    /// Number of functions whose body is compiled (kept ones and shared local bodies).
    pub fn compiled_count(&self, module: &Module) -> usize {
        module
            .indices()
            .filter(|&f| match self.group_of(f) {
                None => true,
                Some(g) => g.kept == f,
            })
            .count()
    }
}
