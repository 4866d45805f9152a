//! Phase 2, beyond LLVM: mutually recursive groups (ping calls pong, ping2 calls pong2)
//! that the table never folds, found by optimistic partition refinement over the classes
//! left after phase 1 ([`crate::merge::refine`]).

use super::classes::Classes;
use super::shapes::Shapes;
use crate::merge::module::FuncIndex;
use crate::merge::plan::FoundBy;
use crate::merge::refine::refine_partition;

/// Phase 2: optimistic partition refinement over the classes left after phase 1.
pub(super) fn refine_cycles(shapes: &Shapes, classes: &mut Classes) {
    // Optimistic start: the class roots grouped by shape (members in index order).
    let mut group_of_shape: Vec<Option<usize>> = vec![None; shapes.count];
    let mut groups: Vec<Vec<FuncIndex>> = Vec::new();
    for &f in &shapes.shared {
        if classes.root[f] != f {
            continue;
        }
        let group = *group_of_shape[shapes.shape[f] as usize].get_or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[group].push(f);
    }
    groups.retain(|g| g.len() > 1);
    if groups.is_empty() {
        return;
    }

    let groups = refine_partition(groups, |f| shapes.callees.of(f), |f| classes.root[f]);
    for g in groups {
        for &f in &g[1..] {
            classes.union(g[0], f, FoundBy::Cycle);
        }
    }
}
