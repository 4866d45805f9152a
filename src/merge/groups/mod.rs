//! Finding the groups of equal functions: LLVM's worklist and tree, then class
//! refinement over the call graph for what the tree cannot see (recursive cycles).
//!
//! - `references`: each function's hash and references from one walk; the call graph;
//! - `shapes`: the first pass, encodings with placeholders interned as shapes;
//! - `tree`: phase 1, LLVM's worklist and table of unique functions;
//! - `cycles`: phase 2, mutually recursive groups by partition refinement;
//! - `classes`: the classes of equal functions as they grow;
//! - `memory`: what the first pass learned, for a later run over a rewritten module.
//!
//! **Shapes.** The tree compares functions by their encoding
//! ([`crate::detect::encode::Encoder`]) with direct callees written by their current class, and classes change as functions fold. Instead
//! of encoding functions again after every fold, each function is encoded once, into its
//! *shape*: the encoding with every callee whose class matters (a redirectable callee, or
//! a function whose address is its class's, below) written as one placeholder, those
//! callees recorded in order. The encoder takes the same path through a function however
//! callees are written, so the encoding by class is the shape with each placeholder
//! replaced by that callee's class, at the same place. Two functions with one shape and,
//! position by position, callees in the same classes therefore have equal encodings by
//! class; and equal encodings by class mean the two encoders made the same choices all
//! along (a token means the same kind of thing at the same place, the comparator's
//! premise), so they wrote the same shape and the same classes. (shape, callees' classes)
//! stands for the encoding, and a fold, which changes only classes, never makes a function
//! be encoded again. Equal shapes are interned by exact comparison of the encodings (a
//! hash only picks where to look) and numbered by the first function, in index order,
//! that has them. A function whose shape no other function has is never equal to another,
//! and goes no further.
//!
//! **One pass over the module.** Every function gets the structural hash and its
//! references (the module functions it calls, and those whose address it takes) from one
//! walk over its instructions; only functions whose hash another function shares can be
//! equal to anything, so only those are encoded. The functions are walked in parallel,
//! and each is encoded right after its walk, while it is still in the cache, as soon as
//! another function is known to have its hash; small functions are encoded then even when
//! their hash is new (most small functions turn out to share it), the encoding kept aside.
//! The rest, the first function of a shared hash, are encoded when the pass is over. Which
//! functions come first depends on the workers' timing, nothing else does.
//!
//! **Phase 1, LLVM's algorithm.** The functions that share their shape go through a
//! worklist, strong (not preemptible) definitions before preemptible ones, into a table of
//! unique functions keyed by (shape, callees' classes). (LLVM keeps a tree because
//! their comparator only orders functions; this key is exact, so a hash table finds the
//! equal one.) A function equal to one already in the table is folded into it. Folding G
//! into F changes every caller of G (its calls now go to F), so those callers are taken out
//! of the table and put back on the worklist ("Deferred" in LLVM); the loop runs until the
//! worklist is empty. A caller chain (h1 calls g1, h2 calls g2, g1 equal to g2) folds at
//! every level this way.
//!
//! Direct calls are encoded by the callee's current class: a call into the caller's own
//! class is "a call to itself" (LLVM's self-reference rule), a call into another class
//! is that class. Calls to preemptible functions and to functions outside the module are
//! encoded by name (in the shape): they are never redirected, so they must match exactly.
//! The address of a local function whose address nobody compares is encoded by class like
//! a call: if that function folds, it is erased into its group's body.
//!
//! **Phase 2, cycles (beyond LLVM).** ping calls pong and pong calls ping; ping2 and pong2
//! have the same shape. Neither pair is equal until the other is, so the table never folds
//! them (LLVM gives up here: its comparator is not transitive for cross-references).
//! Linkers fold such sections by optimistic partition refinement (lld's ICF), and so does
//! this phase: the remaining classes are first grouped optimistically by their shape,
//! assuming all callees equal; then, round after round, a group is split wherever its
//! members call, at the same place, callees from different groups. When no group splits,
//! every group is a set of functions that do the same thing step for step, provided their
//! callees do, which the same partition guarantees: a greatest fixed point, and sound by
//! the same argument as ICF.
//!
//! The result does not depend on the order of the input, nor on the number of threads:
//! the parallel pass computes per-function facts (hash, references, shape) that are
//! gathered in index order, and both phases then run on one thread.

mod classes;
mod cycles;
mod memory;
mod references;
mod shapes;
mod tree;

use cranelift_entity::SecondaryMap;

use crate::merge::module::{FuncIndex, Module};
use crate::merge::plan::FoundBy;
use crate::merge::MergeOptions;
use crate::target::TargetInfo;
use classes::Classes;
use cycles::refine_cycles;
use references::Facts;
use shapes::{first_pass, FirstPass};
use tree::fold_in_tree;

pub(crate) use memory::{FirstPassMemory, Prior};

/// A map with a value for each of the first `n` functions (growing it on every write would
/// cost more than the writes).
fn sized<V: Clone + Default>(n: usize) -> SecondaryMap<FuncIndex, V> {
    let mut map = SecondaryMap::new();
    map.resize(n);
    map
}

/// Find every group of equal functions. Each group is returned with its members in index
/// order; groups are in order of their first member.
pub(crate) fn find_groups(module: &Module, target: &TargetInfo, options: &MergeOptions) -> Found {
    find_groups_remembering(module, target, options, None, false).0
}

/// [`find_groups`], taking what `prior` remembers of an earlier run where it still holds
/// ([`memory`]), and with `remember`, keeping what this run learned for a later one. The
/// groups are those [`find_groups`] finds.
pub(crate) fn find_groups_remembering(
    module: &Module,
    target: &TargetInfo,
    options: &MergeOptions,
    prior: Option<Prior<'_>>,
    remember: bool,
) -> (Found, Option<FirstPassMemory>) {
    let facts = Facts::new(module, target, options);
    let (
        FirstPass {
            shapes,
            callers,
            address_used,
            hashes,
        },
        memory,
    ) = first_pass(module, target, &facts, prior, remember);
    let mut classes = Classes::new(module);
    fold_in_tree(&facts, &callers, &shapes, &mut classes);
    if options.fold_cycles {
        refine_cycles(&shapes, &mut classes);
    }

    let groups = module
        .indices()
        .filter(|&f| classes.root[f] == f && classes.size[f] > 1)
        .map(|f| {
            let mut members: Vec<FuncIndex> = classes.members(f).collect();
            members.sort_unstable();
            (members, classes.found_by[f].unwrap_or(FoundBy::Tree))
        })
        .collect();
    let found = Found {
        groups,
        address_used,
        hashes,
    };
    (found, memory)
}

/// The groups of equal functions, and what the policy needs from the call graph.
pub(crate) struct Found {
    /// Each group with its members in index order, in order of their first member.
    pub groups: Vec<(Vec<FuncIndex>, FoundBy)>,
    /// Functions whose address some function takes.
    pub address_used: SecondaryMap<FuncIndex, bool>,
    /// Every function's structural hash ([`crate::detect::function_hash`]), by index: for
    /// merge-similar, whose groups share it too (it reads neither constants nor callees).
    pub hashes: Vec<u64>,
}
