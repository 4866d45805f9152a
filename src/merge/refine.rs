//! Optimistic partition refinement, the heart of lld's ICF, shared by the search for
//! mutually recursive groups ([`super::groups`]) and machine-code folding
//! ([`crate::emit::fold`]).

use cranelift_entity::SecondaryMap;

use super::module::FuncIndex;

/// Optimistic partition refinement, the heart of lld's ICF: split every group until the
/// members of each group call, position by position, callees whose representatives are in
/// one group (or are one function outside every group). `representative` maps a callee to
/// the function that stands for it (its class root, or the body that runs when it is
/// called). Groups of one are dropped. Deterministic: parts are ordered by their callee
/// signature, members keep their order.
pub(crate) fn refine_partition<'c>(
    mut groups: Vec<Vec<FuncIndex>>,
    callees: impl Fn(FuncIndex) -> &'c [FuncIndex],
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
        let mut signatures: Vec<u64> = Vec::new();
        for g in &groups {
            // Most groups do not split: compare every member's callees with the first's
            // before sorting them into parts.
            let signature = |f: FuncIndex| callees(f).iter().map(|&c| class_of(c));
            let (first, rest) = g.split_first().expect("groups have members");
            if rest.iter().all(|&f| signature(f).eq(signature(*first))) {
                next.push(g.clone());
                continue;
            }
            // Parts in order of their signature, members in their order: the members
            // sorted (stably) by signature, cut where the signature changes.
            signatures.clear();
            let mut ranges = Vec::with_capacity(g.len());
            for &f in g {
                let start = signatures.len();
                signatures.extend(signature(f));
                ranges.push(start..signatures.len());
            }
            let of = |i: usize| &signatures[ranges[i].clone()];
            let mut order: Vec<usize> = (0..g.len()).collect();
            order.sort_by(|&a, &b| of(a).cmp(of(b)));
            split = true;
            for part in order.chunk_by(|&a, &b| of(a) == of(b)) {
                if part.len() > 1 {
                    next.push(part.iter().map(|&i| g[i]).collect());
                }
            }
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
