//! The merger: fold every group of equal functions into one body.
//!
//! - [`module`]: the input, functions with names, linkages and address significance;
//! - [`groups`]: which functions are equal (shapes, worklist and tree, then cycles);
//! - [`refine`]: optimistic partition refinement (cycles, and machine-code folding);
//! - [`policy`]: what each folded function becomes (erased, alias, thunk);
//! - [`plan`]: the result, [`MergePlan`] (extended after code generation by
//!   [`crate::emit::fold`], bodies that compiled to the same code);
//! - [`similar`]: merge-similar, one body for functions that differ only in constants
//!   and callees (`--merge-similar`);
//! - [`candidates`]: partners worth aligning, by MinHash and LSH (the candidate source for
//!   merging by alignment).

pub mod aligned;
pub mod candidates;
pub mod groups;
pub mod module;
pub mod plan;
pub mod policy;
pub mod refine;
pub mod similar;

pub use module::{FuncIndex, Linkage, Module, ModuleError, ModuleFunction};
pub use plan::{Action, Body, FoundBy, Group, MergePlan};

use cranelift_codegen::ir::{FuncRef, Function, GlobalValue};

use crate::detect::{CallTarget, CallTargets};
use crate::target::TargetInfo;

/// How folded functions keep their names, in rustc's words (`-Z merge-functions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MergeMode {
    /// Addresses are not significant: a folded function becomes an alias or disappears.
    Aliases,
    /// Address-significant functions keep distinct addresses through thunks.
    #[default]
    Trampolines,
    /// No merging: the baseline for size comparisons.
    Disabled,
}

impl std::str::FromStr for MergeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "aliases" => Ok(MergeMode::Aliases),
            "trampolines" => Ok(MergeMode::Trampolines),
            "disabled" => Ok(MergeMode::Disabled),
            other => Err(format!(
                "unknown merge mode `{other}` (expected aliases, trampolines or disabled)"
            )),
        }
    }
}

/// Options of the pass.
#[derive(Clone, Debug)]
pub struct MergeOptions {
    /// How folded functions keep their names.
    pub mode: MergeMode,
    /// Nobody compares function addresses: every folded function may become an alias.
    pub addresses_insignificant: bool,
    /// Also fold mutually recursive groups (class refinement). On by default.
    pub fold_cycles: bool,
    /// Where the plan goes, a folded function made an alias has its body's address: true
    /// for objects (an alias is a symbol at the body), false in a JIT, where every name a
    /// caller declared keeps a thunk of its own. When true, functions that take the
    /// addresses of such functions fold like callers of them do. Off by default (always
    /// sound); [`crate::pipeline::run`] sets it from its sink, and the command line sets it.
    pub aliases_share_address: bool,
}

impl Default for MergeOptions {
    fn default() -> Self {
        Self {
            mode: MergeMode::Trampolines,
            addresses_insignificant: false,
            fold_cycles: true,
            aliases_share_address: false,
        }
    }
}

impl MergeOptions {
    /// Whether comparing `m`'s address with another function's may be observed, so that a
    /// folded `m` must keep an address of its own: yes unless the mode makes folded
    /// functions aliases, the user declared every address insignificant, or `m` is
    /// `unnamed_addr`. The one statement of this rule; everything else asks it.
    pub fn address_compared(&self, m: &ModuleFunction) -> bool {
        !(self.mode == MergeMode::Aliases || self.addresses_insignificant || m.unnamed_addr)
    }

    /// Whether `m`'s address, should `m` fold, is its group's body's, so that a reference
    /// to its address can be compared by `m`'s class like a call: nobody compares its
    /// address, and it is local (a folded local function is erased and every reference goes
    /// to the body) or not preemptible and made an alias ([`crate::merge::policy`]) where
    /// aliases are symbols at their body (`target` has aliases and
    /// [`MergeOptions::aliases_share_address`]). A preemptible function may be replaced at
    /// link time, and so may its address.
    pub fn address_is_class(&self, m: &ModuleFunction, target: &TargetInfo) -> bool {
        !self.address_compared(m)
            && match m.linkage {
                Linkage::Local => true,
                Linkage::Export | Linkage::Hidden => {
                    self.aliases_share_address && target.supports_aliases()
                }
                Linkage::Preemptible | Linkage::Import => false,
            }
    }
}

/// The first difference between `a` and `b` as the merger sees them: a direct call
/// into the caller's own group is a call to itself, a call into another group is that
/// group, and so is the address of a local function whose address nobody compares;
/// anything else is by name. `None` when they are equal.
pub fn explain_in_plan(
    module: &Module,
    target: &TargetInfo,
    options: &MergeOptions,
    plan: &MergePlan,
    a: FuncIndex,
    b: FuncIndex,
) -> Option<crate::detect::Difference> {
    let by_plan = |caller: FuncIndex| {
        let refs = module.references(caller);
        ByPlan {
            module,
            target,
            options,
            plan,
            func_refs: refs.func_refs,
            symbols: refs.symbols,
            caller,
        }
    };
    let (ma, mb) = (module.get(a), module.get(b));
    if ma.similar_thunk != mb.similar_thunk {
        // The merger keeps them apart whatever their CLIF: one is written as a jump.
        let kind = |m: &ModuleFunction| match m.similar_thunk {
            true => "merge-similar's thunk (a jump)",
            false => "compiled as written",
        };
        return Some(crate::detect::Difference {
            place: "the function".into(),
            what: "kind".into(),
            left: kind(ma).into(),
            right: kind(mb).into(),
        });
    }
    let (left, right) = (by_plan(a), by_plan(b));
    // One policy per side: each side's calls are judged from that side.
    let both = Sided {
        left,
        right,
        left_func: &module.get(a).func,
    };
    crate::detect::explain(target, &both, &module.get(a).func, &module.get(b).func)
}

struct ByPlan<'m> {
    module: &'m Module,
    target: &'m TargetInfo,
    options: &'m MergeOptions,
    plan: &'m MergePlan,
    func_refs: Vec<Option<FuncIndex>>,
    symbols: Vec<Option<FuncIndex>>,
    caller: FuncIndex,
}

impl ByPlan<'_> {
    fn group_token(&self, target: FuncIndex) -> CallTarget {
        let body = self.plan.body_of(target);
        if body == self.plan.body_of(self.caller) {
            CallTarget::SelfCall
        } else {
            CallTarget::Class(body.as_u32())
        }
    }

    /// The driver's rule: a local function whose address nobody compares.
    fn address_is_class(&self, f: FuncIndex) -> bool {
        self.options
            .address_is_class(self.module.get(f), self.target)
    }
}

impl CallTargets for ByPlan<'_> {
    fn call_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        match self
            .func_refs
            .get(callee.as_u32() as usize)
            .copied()
            .flatten()
        {
            Some(c) if self.module.get(c).linkage != Linkage::Preemptible => self.group_token(c),
            _ => CallTarget::Name,
        }
    }

    fn address_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        match self
            .func_refs
            .get(callee.as_u32() as usize)
            .copied()
            .flatten()
        {
            Some(c) if self.address_is_class(c) => self.group_token(c),
            _ => CallTarget::Name,
        }
    }

    fn symbol_target(&self, _func: &Function, gv: GlobalValue) -> CallTarget {
        match self.symbols.get(gv.as_u32() as usize).copied().flatten() {
            Some(c) if self.address_is_class(c) => self.group_token(c),
            _ => CallTarget::Name,
        }
    }
}

/// Two policies, chosen by which function is being encoded.
struct Sided<'a> {
    left: ByPlan<'a>,
    right: ByPlan<'a>,
    left_func: &'a Function,
}

impl Sided<'_> {
    fn side(&self, func: &Function) -> &ByPlan<'_> {
        if std::ptr::eq(func, self.left_func) {
            &self.left
        } else {
            &self.right
        }
    }
}

impl CallTargets for Sided<'_> {
    fn call_target(&self, func: &Function, callee: FuncRef) -> CallTarget {
        self.side(func).call_target(func, callee)
    }

    fn address_target(&self, func: &Function, callee: FuncRef) -> CallTarget {
        self.side(func).address_target(func, callee)
    }

    fn symbol_target(&self, func: &Function, gv: GlobalValue) -> CallTarget {
        self.side(func).symbol_target(func, gv)
    }
}

/// [`merge`] of the module [`similar::merge_similar_keeping_replaced`] returned, with the
/// functions it `replaced`: the same plan, found taking what the identical run merge-similar
/// started from learned of every function it did not replace (`groups/memory.rs`) instead
/// of walking and encoding it again. Takes that memory out of `replaced`; without it (taken
/// already, or merge-similar not run), [`merge`].
pub fn merge_after_similar(
    module: &Module,
    target: &TargetInfo,
    options: &MergeOptions,
    replaced: &mut similar::Replaced,
) -> MergePlan {
    let Some(first_run) = replaced.take_first_run() else {
        return merge(module, target, options);
    };
    if options.mode == MergeMode::Disabled {
        return MergePlan::default();
    }
    let unchanged = |f: FuncIndex| replaced.get(f).is_none();
    let prior = groups::Prior {
        memory: &first_run,
        unchanged: &unchanged,
    };
    let (found, _) = groups::find_groups_remembering(module, target, options, Some(prior), false);
    policy::plan_groups(module, target, options, found.groups, &found.address_used)
}

/// Run the pass on `module` for `target`: find every group of equal functions and decide
/// what each folded function becomes.
pub fn merge(module: &Module, target: &TargetInfo, options: &MergeOptions) -> MergePlan {
    if options.mode == MergeMode::Disabled {
        return MergePlan::default();
    }
    let found = groups::find_groups(module, target, options);
    policy::plan_groups(module, target, options, found.groups, &found.address_used)
}
