//! Phase 1, LLVM's algorithm: the worklist of functions that share a shape, strong
//! definitions first, and the table of unique functions keyed by (shape, callees'
//! classes); folding a function puts its callers back on the worklist until nothing
//! changes.

use std::collections::HashMap;

use cranelift_entity::SecondaryMap;

use super::classes::Classes;
use super::references::{Callers, Facts};
use super::shapes::Shapes;
use super::sized;
use crate::detect::hash::{StableHasher, StableState};
use crate::merge::module::FuncIndex;
use crate::merge::plan::FoundBy;

/// Phase 1: LLVM's worklist and table of unique functions.
pub(super) fn fold_in_tree(
    facts: &Facts,
    callers: &Callers,
    shapes: &Shapes,
    classes: &mut Classes,
) {
    let mut table = Table::new(shapes, shapes.shared.len());
    let strong_first = |list: &mut Vec<FuncIndex>| {
        list.sort_by_key(|&f| (!facts.redirectable[f], f));
    };
    let mut worklist = shapes.shared.clone();
    strong_first(&mut worklist);
    let mut deferred: Vec<FuncIndex> = Vec::new();
    while !worklist.is_empty() {
        for &f in &worklist {
            if classes.root[f] != f || table.contains(f) {
                continue;
            }
            match table.find(f, classes) {
                Ok(existing) => {
                    // Callers of f's class will now call `existing`'s class: their keys
                    // change, so take them out of the table and look at them again.
                    for member in classes.members(f) {
                        for &caller in callers.of(member) {
                            let r = classes.root[caller];
                            if table.contains(r) {
                                table.remove(r);
                                deferred.push(r);
                            }
                        }
                    }
                    classes.union(existing, f, FoundBy::Tree);
                }
                Err(hash) => table.insert(f, hash),
            }
        }
        // The next round: the deferred functions still at the root of their class.
        deferred.retain(|&f| classes.root[f] == f);
        std::mem::swap(&mut worklist, &mut deferred);
        deferred.clear();
        strong_first(&mut worklist);
        worklist.dedup();
    }
}

/// Phase 1's table of unique functions. A function's key is its shape, then for each
/// placeholder the callee's class (0 for the function's own class, else 1 + the class's
/// root). The table maps a hash of the key to the functions with that hash (almost always
/// one), and a lookup compares the keys themselves. The key of a function in the table is
/// always current (a fold takes out every function whose key it changes), so it is
/// recomputed rather than stored.
pub(super) struct Table<'s> {
    pub(super) shapes: &'s Shapes,
    /// Key hash → the last function added with it; the others follow through `next`.
    pub(super) by_hash: HashMap<u64, FuncIndex, StableState>,
    pub(super) next: SecondaryMap<FuncIndex, Option<FuncIndex>>,
    /// For each function in the table, its key's hash; `None` for the others.
    pub(super) hash: SecondaryMap<FuncIndex, Option<u64>>,
    pub(super) key: Vec<u32>,
    pub(super) other: Vec<u32>,
}

impl<'s> Table<'s> {
    pub(super) fn new(shapes: &'s Shapes, capacity: usize) -> Self {
        Self {
            shapes,
            by_hash: HashMap::with_capacity_and_hasher(capacity, StableState::default()),
            next: sized(shapes.count),
            hash: sized(shapes.count),
            key: Vec::new(),
            other: Vec::new(),
        }
    }

    /// Write `f`'s key into `key`.
    pub(super) fn write_key(shapes: &Shapes, f: FuncIndex, classes: &Classes, key: &mut Vec<u32>) {
        let own = classes.root[f];
        key.clear();
        key.push(shapes.shape[f]);
        key.extend(shapes.callees.of(f).iter().map(|&c| match classes.root[c] {
            class if class == own => 0,
            class => class.as_u32() + 1,
        }));
    }

    pub(super) fn key_hash(key: &[u32]) -> u64 {
        let mut h = StableHasher::new();
        for &k in key {
            h.word(k.into());
        }
        h.finish()
    }

    pub(super) fn contains(&self, f: FuncIndex) -> bool {
        self.hash[f].is_some()
    }

    /// The function in the table whose key is `f`'s, or the hash of `f`'s key to insert it
    /// under.
    pub(super) fn find(&mut self, f: FuncIndex, classes: &Classes) -> Result<FuncIndex, u64> {
        Self::write_key(self.shapes, f, classes, &mut self.key);
        let hash = Self::key_hash(&self.key);
        let mut at = self.by_hash.get(&hash).copied();
        while let Some(g) = at {
            Self::write_key(self.shapes, g, classes, &mut self.other);
            if self.other == self.key {
                return Ok(g);
            }
            at = self.next[g];
        }
        Err(hash)
    }

    /// Add `f`, whose key hashes to `hash` and is in no other function of the table.
    pub(super) fn insert(&mut self, f: FuncIndex, hash: u64) {
        self.next[f] = self.by_hash.insert(hash, f);
        self.hash[f] = Some(hash);
    }

    /// Take `f` out.
    pub(super) fn remove(&mut self, f: FuncIndex) {
        let hash = self.hash[f].take().expect("in the table");
        let after = self.next[f].take();
        let head = self.by_hash[&hash];
        if head == f {
            match after {
                Some(g) => self.by_hash.insert(hash, g),
                None => self.by_hash.remove(&hash),
            };
            return;
        }
        let mut at = head;
        while self.next[at] != Some(f) {
            at = self.next[at].expect("f is in its hash's list");
        }
        self.next[at] = after;
    }
}
