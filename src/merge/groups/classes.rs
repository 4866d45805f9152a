//! The classes of equal functions while groups are found: a union of sets whose members
//! form a ring, so that a union moves no memory and a class's members are listed in
//! the order they joined.

use cranelift_entity::SecondaryMap;

use super::sized;
use crate::merge::module::{FuncIndex, Module};
use crate::merge::plan::FoundBy;

/// The classes of equal functions, as a union of sets with eagerly updated roots. Each
/// class's members form a ring (`next`), so that a union moves no memory.
pub(super) struct Classes {
    pub(super) root: SecondaryMap<FuncIndex, FuncIndex>,
    pub(super) next: SecondaryMap<FuncIndex, FuncIndex>,
    pub(super) size: SecondaryMap<FuncIndex, u32>,
    pub(super) found_by: SecondaryMap<FuncIndex, Option<FoundBy>>,
}

impl Classes {
    pub(super) fn new(module: &Module) -> Self {
        let mut root = sized(module.len());
        let mut size = sized(module.len());
        for f in module.indices() {
            root[f] = f;
            size[f] = 1;
        }
        Self {
            next: root.clone(),
            root,
            size,
            found_by: sized(module.len()),
        }
    }

    /// The members of `f`'s class, starting with `f`.
    pub(super) fn members(&self, f: FuncIndex) -> impl Iterator<Item = FuncIndex> + '_ {
        let mut at = Some(f);
        std::iter::from_fn(move || {
            let m = at?;
            let next = self.next[m];
            at = (next != f).then_some(next);
            Some(m)
        })
    }

    /// Move every member of `from`'s class into `into`'s class.
    pub(super) fn union(&mut self, into: FuncIndex, from: FuncIndex, how: FoundBy) {
        let (into, from) = (self.root[into], self.root[from]);
        if into == from {
            return;
        }
        let mut m = from;
        loop {
            self.root[m] = into;
            m = self.next[m];
            if m == from {
                break;
            }
        }
        // Splice the two rings.
        let after_into = self.next[into];
        self.next[into] = self.next[from];
        self.next[from] = after_into;
        self.size[into] += self.size[from];
        if self.found_by[into].is_none() || how == FoundBy::Cycle {
            self.found_by[into] = Some(how);
        }
    }
}
