//! Finding the groups of equal functions: the seeds' worklist and tree, then class
//! refinement over the call graph for what the tree cannot see (recursive cycles).
//!
//! **Phase 1, the seeds' algorithm.** Every function gets the structural hash; functions
//! whose hash is unique are never compared. The others go through a worklist, strong
//! (not preemptible) definitions before preemptible ones, into a tree of unique functions
//! ordered by (hash, comparator): a `BTreeMap` keyed by the hash and the comparator's full
//! encoding, so a lookup is O(log N) comparisons. A function equal to one already in the
//! tree is folded into it. Folding G into F changes every caller of G (its calls now go to
//! F), so those callers are taken out of the tree and put back on the worklist ("Deferred"
//! in LLVM); the loop runs until the worklist is empty. A caller chain (h1 calls g1, h2
//! calls g2, g1 equal to g2) folds at every level this way.
//!
//! Direct calls are encoded by the callee's current class: a call into the caller's own
//! class is "a call to itself" (the seeds' self-reference rule), a call into another class
//! is that class. Calls to preemptible functions and to functions outside the module are
//! encoded by name: they are never redirected, so they must match exactly.
//!
//! **Phase 2, cycles (beyond LLVM).** ping calls pong and pong calls ping; ping2 and pong2
//! have the same shape. Neither pair is equal until the other is, so the tree never folds
//! them (LLVM gives up here: its comparator is not transitive for cross-references).
//! Linkers fold such sections by optimistic partition refinement (lld's ICF), and so does
//! this phase: the remaining classes are first grouped optimistically by their encoding
//! with every redirectable callee replaced by a placeholder, assuming all callees equal;
//! then, round after round, a group is split wherever its members call, at the same place,
//! callees from different groups. When no group splits, every group is a set of functions
//! that do the same thing step for step, provided their callees do, which the same
//! partition guarantees: a greatest fixed point, and sound by the same argument as ICF.
//! The result does not depend on the order of the input.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use cranelift_codegen::ir::{FuncRef, Function, GlobalValue};
use cranelift_entity::SecondaryMap;
use rayon::prelude::*;

use super::module::{FuncIndex, Linkage, Module};
use super::plan::FoundBy;
use super::{MergeMode, MergeOptions};
use crate::detect::encode::{CallTarget, CallTargets, Encoder, Token};
use crate::detect::function_hash;
use crate::target::TargetInfo;

/// The classes of equal functions, as a union of sets with eagerly updated roots.
struct Classes {
    root: SecondaryMap<FuncIndex, FuncIndex>,
    members: SecondaryMap<FuncIndex, Vec<FuncIndex>>,
    found_by: SecondaryMap<FuncIndex, Option<FoundBy>>,
}

impl Classes {
    fn new(module: &Module) -> Self {
        let mut root = SecondaryMap::with_capacity(module.len());
        let mut members = SecondaryMap::with_capacity(module.len());
        for f in module.indices() {
            root[f] = f;
            members[f] = vec![f];
        }
        Self {
            root,
            members,
            found_by: SecondaryMap::new(),
        }
    }

    /// Move every member of `from`'s class into `into`'s class.
    fn union(&mut self, into: FuncIndex, from: FuncIndex, how: FoundBy) {
        let (into, from) = (self.root[into], self.root[from]);
        if into == from {
            return;
        }
        let moved = std::mem::take(&mut self.members[from]);
        for &m in &moved {
            self.root[m] = into;
        }
        self.members[into].extend(moved);
        if self.found_by[into].is_none() || how == FoundBy::Cycle {
            self.found_by[into] = Some(how);
        }
    }
}

/// Per-function facts the driver needs.
struct Facts {
    func_refs: SecondaryMap<FuncIndex, Vec<Option<FuncIndex>>>,
    symbols: SecondaryMap<FuncIndex, Vec<Option<FuncIndex>>>,
    /// Functions that call it, or take the address of it when that address is its class's.
    callers: SecondaryMap<FuncIndex, Vec<FuncIndex>>,
    redirectable: SecondaryMap<FuncIndex, bool>,
    /// Local, and nobody compares its address: if it folds it is erased, and its address
    /// becomes its group's body's. Its address can be encoded by class.
    address_is_class: SecondaryMap<FuncIndex, bool>,
    /// Some function takes its address (`func_addr`, `symbol`).
    address_used: SecondaryMap<FuncIndex, bool>,
    hash: SecondaryMap<FuncIndex, u64>,
}

impl Facts {
    fn new(module: &Module, options: &MergeOptions) -> Self {
        let mut facts = Facts {
            func_refs: SecondaryMap::with_capacity(module.len()),
            symbols: SecondaryMap::with_capacity(module.len()),
            callers: SecondaryMap::with_capacity(module.len()),
            redirectable: SecondaryMap::with_capacity(module.len()),
            address_is_class: SecondaryMap::with_capacity(module.len()),
            address_used: SecondaryMap::with_capacity(module.len()),
            hash: SecondaryMap::with_capacity(module.len()),
        };
        for (f, m) in module.iter() {
            facts.redirectable[f] = m.linkage != Linkage::Preemptible;
            facts.address_is_class[f] = m.linkage == Linkage::Local
                && (options.mode == MergeMode::Aliases
                    || options.addresses_insignificant
                    || m.unnamed_addr);
        }
        // References and hashes are independent per function: computed in parallel, then
        // gathered in index order (the result does not depend on the thread count).
        let indices: Vec<FuncIndex> = module.indices().collect();
        let per_function: Vec<(super::module::References, u64)> = indices
            .par_iter()
            .map(|&f| (module.references(f), function_hash(&module.get(f).func)))
            .collect();
        for (&f, (refs, hash)) in indices.iter().zip(per_function) {
            for &callee in &refs.calls {
                facts.callers[callee].push(f);
            }
            for &target in &refs.addresses {
                facts.address_used[target] = true;
                if facts.address_is_class[target] && !refs.calls.contains(&target) {
                    facts.callers[target].push(f);
                }
            }
            facts.func_refs[f] = refs.func_refs;
            facts.symbols[f] = refs.symbols;
            facts.hash[f] = hash;
        }
        facts
    }

    /// The module function a call through `callee` reaches and may be redirected, if any.
    fn redirectable_callee(&self, caller: FuncIndex, callee: FuncRef) -> Option<FuncIndex> {
        self.func_refs[caller]
            .get(callee.as_u32() as usize)
            .copied()
            .flatten()
            .filter(|&c| self.redirectable[c])
    }

    /// The module function whose address `func_addr` of `callee` takes, when that address
    /// is its class's.
    fn class_address(&self, caller: FuncIndex, callee: FuncRef) -> Option<FuncIndex> {
        self.func_refs[caller]
            .get(callee.as_u32() as usize)
            .copied()
            .flatten()
            .filter(|&c| self.address_is_class[c])
    }

    /// The same for the `symbol` global value `gv`.
    fn class_symbol(&self, caller: FuncIndex, gv: GlobalValue) -> Option<FuncIndex> {
        self.symbols[caller]
            .get(gv.as_u32() as usize)
            .copied()
            .flatten()
            .filter(|&c| self.address_is_class[c])
    }
}

/// Phase 1's policy: callees by their current class.
struct ByClass<'d> {
    facts: &'d Facts,
    classes: &'d Classes,
    caller: FuncIndex,
}

impl ByClass<'_> {
    fn class_token(&self, target: Option<FuncIndex>) -> CallTarget {
        match target {
            None => CallTarget::Name,
            Some(c) => {
                let class = self.classes.root[c];
                if class == self.classes.root[self.caller] {
                    CallTarget::SelfCall
                } else {
                    CallTarget::Class(class.as_u32())
                }
            }
        }
    }
}

impl CallTargets for ByClass<'_> {
    fn call_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        self.class_token(self.facts.redirectable_callee(self.caller, callee))
    }

    fn address_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        self.class_token(self.facts.class_address(self.caller, callee))
    }

    fn symbol_target(&self, _func: &Function, gv: GlobalValue) -> CallTarget {
        self.class_token(self.facts.class_symbol(self.caller, gv))
    }
}

/// Phase 2's policy: every redirectable callee is a placeholder, recorded in order.
struct Placeholder<'d> {
    facts: &'d Facts,
    caller: FuncIndex,
    recorded: RefCell<Vec<FuncIndex>>,
}

impl Placeholder<'_> {
    fn placeholder(&self, target: Option<FuncIndex>) -> CallTarget {
        match target {
            None => CallTarget::Name,
            Some(c) => {
                self.recorded.borrow_mut().push(c);
                CallTarget::Class(0)
            }
        }
    }
}

impl CallTargets for Placeholder<'_> {
    fn call_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        self.placeholder(self.facts.redirectable_callee(self.caller, callee))
    }

    fn address_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        self.placeholder(self.facts.class_address(self.caller, callee))
    }

    fn symbol_target(&self, _func: &Function, gv: GlobalValue) -> CallTarget {
        self.placeholder(self.facts.class_symbol(self.caller, gv))
    }
}

type TreeKey = (u64, Vec<Token>);

/// Find every group of equal functions. Each group is returned with its members in index
/// order; groups are in order of their first member.
pub(crate) fn find_groups(module: &Module, target: &TargetInfo, options: &MergeOptions) -> Found {
    let facts = Facts::new(module, options);
    let mut classes = Classes::new(module);

    let mut hash_count: HashMap<u64, u32> = HashMap::new();
    for f in module.indices() {
        *hash_count.entry(facts.hash[f]).or_default() += 1;
    }
    let candidates: Vec<FuncIndex> = module
        .indices()
        .filter(|&f| hash_count[&facts.hash[f]] > 1)
        .collect();

    fold_in_tree(module, target, &facts, &mut classes, candidates.clone());
    if options.fold_cycles {
        refine_cycles(module, target, &facts, &mut classes, &candidates);
    }

    let groups = module
        .indices()
        .filter(|&f| classes.root[f] == f && classes.members[f].len() > 1)
        .map(|f| {
            let mut members = classes.members[f].clone();
            members.sort_unstable();
            (members, classes.found_by[f].unwrap_or(FoundBy::Tree))
        })
        .collect();
    Found {
        groups,
        address_used: facts.address_used,
    }
}

/// The groups of equal functions, and what the policy needs from the call graph.
pub(crate) struct Found {
    /// Each group with its members in index order, in order of their first member.
    pub groups: Vec<(Vec<FuncIndex>, FoundBy)>,
    /// Functions whose address some function takes.
    pub address_used: SecondaryMap<FuncIndex, bool>,
}

/// Phase 1: the seeds' worklist and tree of unique functions.
fn fold_in_tree(
    module: &Module,
    target: &TargetInfo,
    facts: &Facts,
    classes: &mut Classes,
    candidates: Vec<FuncIndex>,
) {
    let mut tree: BTreeMap<TreeKey, FuncIndex> = BTreeMap::new();
    let mut tree_key: SecondaryMap<FuncIndex, Option<TreeKey>> = SecondaryMap::new();
    let strong_first = |list: &mut Vec<FuncIndex>| {
        list.sort_by_key(|&f| (!facts.redirectable[f], f));
    };
    // First-round keys, encoded in parallel before any class changes. A fold makes the
    // keys of the folded function's callers stale; those are encoded again when reached.
    let encode = |f: FuncIndex, classes: &Classes| -> TreeKey {
        let calls = ByClass {
            facts,
            classes,
            caller: f,
        };
        let mut tokens = Vec::new();
        Encoder::new(&module.get(f).func, target, &calls).encode_all(&mut tokens);
        (facts.hash[f], tokens)
    };
    let mut precomputed: SecondaryMap<FuncIndex, Option<TreeKey>> = SecondaryMap::new();
    {
        let classes: &Classes = classes;
        let keys: Vec<TreeKey> = candidates.par_iter().map(|&f| encode(f, classes)).collect();
        for (&f, key) in candidates.iter().zip(keys) {
            precomputed[f] = Some(key);
        }
    }
    let mut worklist = candidates;
    strong_first(&mut worklist);
    while !worklist.is_empty() {
        let mut deferred: BTreeSet<FuncIndex> = BTreeSet::new();
        for f in worklist {
            if classes.root[f] != f || tree_key[f].is_some() {
                continue;
            }
            let key = match precomputed[f].take() {
                Some(key) => key,
                None => encode(f, classes),
            };
            match tree.get(&key) {
                Some(&existing) => {
                    // Callers of f's class will now call `existing`'s class: their keys
                    // change, so take them out of the tree and look at them again.
                    for &member in &classes.members[f] {
                        for &caller in &facts.callers[member] {
                            let r = classes.root[caller];
                            precomputed[r] = None;
                            if let Some(old) = tree_key[r].take() {
                                tree.remove(&old);
                                deferred.insert(r);
                            }
                        }
                    }
                    deferred.remove(&f);
                    classes.union(existing, f, FoundBy::Tree);
                }
                None => {
                    tree.insert(key.clone(), f);
                    tree_key[f] = Some(key);
                }
            }
        }
        worklist = deferred
            .into_iter()
            .filter(|&f| classes.root[f] == f)
            .collect();
        strong_first(&mut worklist);
    }
}

/// Phase 2: optimistic partition refinement over the classes left after phase 1.
fn refine_cycles(
    module: &Module,
    target: &TargetInfo,
    facts: &Facts,
    classes: &mut Classes,
    candidates: &[FuncIndex],
) {
    // Only class roots that still share their hash with another root can be in a cycle
    // group (the placeholder encoding contains everything the hash reads).
    let mut roots_per_hash: HashMap<u64, u32> = HashMap::new();
    let roots: Vec<FuncIndex> = candidates
        .iter()
        .copied()
        .filter(|&f| classes.root[f] == f)
        .collect();
    for &f in &roots {
        *roots_per_hash.entry(facts.hash[f]).or_default() += 1;
    }
    let roots: Vec<FuncIndex> = roots
        .into_iter()
        .filter(|f| roots_per_hash[&facts.hash[*f]] > 1)
        .collect();
    // Optimistic start: group them by their encoding with callees as placeholders
    // (encoded in parallel, gathered in index order).
    let encoded: Vec<(TreeKey, Vec<FuncIndex>)> = roots
        .par_iter()
        .map(|&f| {
            let calls = Placeholder {
                facts,
                caller: f,
                recorded: RefCell::new(Vec::new()),
            };
            let mut tokens = Vec::new();
            Encoder::new(&module.get(f).func, target, &calls).encode_all(&mut tokens);
            ((facts.hash[f], tokens), calls.recorded.into_inner())
        })
        .collect();
    let mut by_shape: BTreeMap<TreeKey, Vec<FuncIndex>> = BTreeMap::new();
    let mut callees: SecondaryMap<FuncIndex, Vec<FuncIndex>> = SecondaryMap::new();
    for (&f, (key, recorded)) in roots.iter().zip(encoded) {
        callees[f] = recorded;
        by_shape.entry(key).or_default().push(f);
    }
    let groups: Vec<Vec<FuncIndex>> = by_shape.into_values().filter(|g| g.len() > 1).collect();
    if groups.is_empty() {
        return;
    }

    let groups = refine_partition(groups, &callees, |f| classes.root[f]);
    for g in groups {
        for &f in &g[1..] {
            classes.union(g[0], f, FoundBy::Cycle);
        }
    }
}

/// Optimistic partition refinement, the heart of lld's ICF: split every group until the
/// members of each group call, position by position, callees whose representatives are in
/// one group (or are one function outside every group). `representative` maps a callee to
/// the function that stands for it (its class root, or the body that runs when it is
/// called). Groups of one are dropped. Deterministic: parts are ordered by their callee
/// signature, members keep their order.
pub(crate) fn refine_partition(
    mut groups: Vec<Vec<FuncIndex>>,
    callees: &SecondaryMap<FuncIndex, Vec<FuncIndex>>,
    representative: impl Fn(FuncIndex) -> FuncIndex,
) -> Vec<Vec<FuncIndex>> {
    const OUTSIDE: u64 = 1 << 32;
    let mut group_id: SecondaryMap<FuncIndex, u64> = SecondaryMap::new();
    let assign = |groups: &Vec<Vec<FuncIndex>>, group_id: &mut SecondaryMap<FuncIndex, u64>| {
        for (i, g) in groups.iter().enumerate() {
            for &f in g {
                group_id[f] = i as u64 + 1;
            }
        }
    };
    groups.retain(|g| g.len() > 1);
    assign(&groups, &mut group_id);
    loop {
        let class_of = |f: FuncIndex| {
            let r = representative(f);
            match group_id[r] {
                0 => OUTSIDE | u64::from(r.as_u32()),
                id => id,
            }
        };
        let mut next: Vec<Vec<FuncIndex>> = Vec::with_capacity(groups.len());
        let mut split = false;
        for g in &groups {
            let mut parts: BTreeMap<Vec<u64>, Vec<FuncIndex>> = BTreeMap::new();
            for &f in g {
                let signature: Vec<u64> = callees[f].iter().map(|&c| class_of(c)).collect();
                parts.entry(signature).or_default().push(f);
            }
            split |= parts.len() > 1;
            next.extend(parts.into_values().filter(|p| p.len() > 1));
        }
        if !split {
            return groups;
        }
        for g in &groups {
            for &f in g {
                group_id[f] = 0;
            }
        }
        groups = next;
        assign(&groups, &mut group_id);
    }
}
