//! Alignment merging: pairs of functions that merge-similar leaves apart but whose
//! instructions align become one body with a function-identifier parameter (FMSA, CGO
//! 2019; HyFM, LCTES 2021), each member a thunk that passes its identifier.
//!
//! Holes ([`super::similar`]) merge functions equal but for constants, offsets and
//! callees. What separates most of the rest is a few instructions: another opcode, an
//! extra store, a missing conversion (bench/README.md §9: with instructions one side lacks
//! inside blocks that pair, the corpora reach issue #14's targets). This pass runs inside
//! merge-similar, after its groups are decided, on the functions left (one representative
//! per class of equal functions, none already thunked):
//!
//! 1. **Partners.** Only functions with the same pairing key can make a body: the same
//!    calling convention and returns, as many reachable blocks, and the same parameter
//!    types block by block after the entry. A function whose key no other has is left out
//!    before anything is computed for it, and [`super::candidates::candidates_among`]
//!    (MinHash and LSH) searches partners among the functions of each key apart, so that a
//!    bucket's window holds no function the pair would be declined for. On the corpora,
//!    against one search over all of them, this runs about half the instructions on sqlite
//!    and zstd and 12% fewer on re2, and saves 16 kB more on zstd, 0.3 kB more on re2 and
//!    0.5 kB less on sqlite, where other pairs win the greedy choice (bench/README.md §10).
//!    A pair whose two thunks (written first: they depend on the body's signature alone)
//!    take at least the smaller member's estimated bytes is dropped before aligning: that
//!    is all sharing could save when the body holds at least the larger member (on the
//!    corpora this bound never dropped a pair that would have paid: re2 154 of 1,226 pairs
//!    built before, sqlite 18 of 1,048, zstd 8 of 124).
//! 2. **Alignment.** Each pair is aligned block by block
//!    ([`crate::detect::align::align_blocks`]: the k-th block of one walk with the k-th of
//!    the other, the instructions of each pair of blocks aligned) and built
//!    ([`build::build_body`]): the *same blocks* variant — every block pairs, with equal
//!    parameter types, and paired terminators merge; inside blocks instructions may
//!    differ or exist on one side only. Anything else is declined.
//! 3. **Frames.** A member that reads its frame is merged only when both thunks keep the
//!    caller's stack, as in merge-similar.
//! 4. **Cost.** A pair is kept when the body and both thunks take fewer `.text` bytes
//!    than the two members by [`CodeFacts::text_size`] (the calibrated IR estimate);
//!    nothing is compiled.
//! 5. **Choice.** Pairs are taken greedily by estimated saving (then by member index),
//!    each function in one pair at most; every body taken is checked by Cranelift's
//!    verifier (a body that fails is dropped, and debug builds panic: it is a bug). The
//!    functions still free search again, up to [`ROUNDS`] times, pairs tried once not
//!    tried again.
//!
//! The left member (lower index) passes identifier 1, the right 0. Recursion through the
//! pair needs nothing special: a call to a member is a call to its thunk. Deterministic:
//! candidates are in index order, the choice is a function of the sizes and indices.

pub mod build;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::OnceLock;

use cranelift_codegen::ir::{self, Function, Type};
use cranelift_codegen::isa::TargetIsa;
use rayon::prelude::*;

use super::candidates::{candidates_among, signature_of, CandidateOptions, Signature};
use super::module::{FuncIndex, Module};
use super::similar::CodeFacts;
use crate::detect::align::align_blocks;
use crate::detect::fingerprint::{linearise, Linearised};
use crate::detect::hash::StableHasher;
use crate::detect::walk::CfgWalk;
use crate::target::TargetInfo;

/// Writes a member's thunk into a body: the member, the body's signature, and the integer
/// values (type, bits) it passes after its own arguments.
pub type ThunkWriter<'a> =
    dyn Fn(FuncIndex, &ir::Signature, &[(Type, i64)]) -> Option<Function> + Sync + 'a;

/// Candidate searches: after each, the functions still free search again (a function
/// whose best partner was taken by a better pair may pair with another).
pub const ROUNDS: usize = 3;

/// A pair merged by alignment: its body (not yet named) and what the cost model weighed.
pub struct AlignedMerge {
    /// The member passing identifier 1 (the lower index).
    pub left: FuncIndex,
    /// The member passing identifier 0.
    pub right: FuncIndex,
    /// The merged body: the members' signature and the identifier last.
    pub body: Box<Function>,
    /// `.text` bytes of the left and of the right member, estimated.
    pub member_bytes: [u64; 2],
    /// `.text` bytes of the two members, estimated.
    pub before: u64,
    /// `.text` bytes of the body and both thunks, estimated.
    pub after: u64,
}

/// A pair merged by alignment with its members' thunks.
pub type MergedPair = (AlignedMerge, Vec<(FuncIndex, Box<Function>)>);

/// The pairs of `free` (functions nothing else merged) worth merging by alignment, chosen
/// as the module docs say. `thunk(member, body signature, values)` writes the member's thunk that
/// passes its own arguments and then `values` (zeros for parameters only the other member
/// has, then its identifier), as merge-similar writes its own; `cost_model` off takes every
/// pair that builds (tests). Also returns how many bodies chosen failed Cranelift's
/// verifier and were dropped: always 0 unless the builder has a bug, which the tests
/// check (release builds drop such a body rather than stop).
pub fn merge_aligned(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    free: &[FuncIndex],
    cost_model: bool,
    thunk: &ThunkWriter<'_>,
) -> (Vec<MergedPair>, usize) {
    let Prepared {
        free,
        keys,
        linearised,
        signatures,
    } = prepare(module, target, free);
    // Each function's size estimated once, when it is first in a candidate pair (a function
    // may be in several; most are in none).
    let sizes: Vec<OnceLock<u64>> = free.iter().map(|_| OnceLock::new()).collect();
    let size_of = |i: usize| *sizes[i].get_or_init(|| isa.text_size(&module.get(free[i]).func));
    let mut merged = Vec::new();
    let mut failed_verifier = 0;
    let mut tried: HashSet<(FuncIndex, FuncIndex)> = HashSet::new();
    // Positions in `free` of the functions still free.
    let mut left: Vec<usize> = (0..free.len()).collect();
    for _ in 0..ROUNDS {
        let round = Round {
            members: left.iter().map(|&i| free[i]).collect(),
            linearised: left.iter().map(|&i| &linearised[i]).collect(),
            signatures: left.iter().map(|&i| signatures[i]).collect(),
            size_of: &|at: usize| size_of(left[at]),
            keys: left.iter().map(|&i| keys[i]).collect(),
        };
        let (found, failed) = one_round(module, target, isa, &round, cost_model, thunk, &mut tried);
        failed_verifier += failed;
        if found.is_empty() {
            break;
        }
        let used: HashSet<FuncIndex> = found.iter().flat_map(|(m, _)| [m.left, m.right]).collect();
        left.retain(|&i| !used.contains(&free[i]));
        merged.extend(found);
    }
    (merged, failed_verifier)
}

/// The functions of a search, each linearised and signed once for every round.
struct Prepared {
    /// The functions with a possible partner ([`with_possible_partners`]), in index order.
    free: Vec<FuncIndex>,
    /// Each one's pairing key, numbered.
    keys: Vec<u32>,
    linearised: Vec<Linearised>,
    signatures: Vec<Option<Signature>>,
}

fn prepare(module: &Module, target: &TargetInfo, free: &[FuncIndex]) -> Prepared {
    let mut free = free.to_vec();
    free.sort_unstable();
    free.dedup();
    let (free, keys) = with_possible_partners(module, &free);
    let linearised: Vec<Linearised> = free
        .par_iter()
        .map(|&f| linearise(&module.get(f).func, target))
        .collect();
    let signatures = linearised.par_iter().map(signature_of).collect();
    Prepared {
        free,
        keys,
        linearised,
        signatures,
    }
}

/// Every pair the first candidate search finds among `free`, built whether it pays or not
/// and whichever other pairs its members are in: what the cost model is asked about, for
/// calibrating it against compiled sizes. `thunk` as for [`merge_aligned`].
pub fn candidate_pairs(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    free: &[FuncIndex],
    thunk: &ThunkWriter<'_>,
) -> Vec<MergedPair> {
    let prepared = prepare(module, target, free);
    let pairs = candidates_among(
        &prepared.free,
        &prepared.signatures,
        Some(&prepared.keys),
        &CandidateOptions::default(),
    );
    pairs
        .par_iter()
        .filter_map(|p| {
            let at = |f| {
                prepared
                    .free
                    .binary_search(&f)
                    .expect("a candidate is free")
            };
            let bytes = |f: FuncIndex| isa.text_size(&module.get(f).func);
            let pair = PairToTry {
                members: [p.left, p.right],
                linearised: [
                    &prepared.linearised[at(p.left)],
                    &prepared.linearised[at(p.right)],
                ],
                member_bytes: [bytes(p.left), bytes(p.right)],
            };
            try_pair(module, target, isa, &pair, false, thunk).ok()
        })
        .collect()
}

/// What two functions must have in common for [`try_pair`] to build their body, hashed:
/// the calling convention and returns ([`build::body_signature`]), and, block by block in
/// walk order (the blocks pair so), the parameter types of every block after the entry
/// (the entry's are the signatures', where one may be a prefix of the other). Functions
/// that could pair have equal keys; two that could not share one only by a collision of
/// the hash, which costs a declined pair, nothing else.
fn pairing_key(func: &Function) -> u64 {
    let mut h = StableHasher::new();
    func.signature.call_conv.hash(&mut h);
    func.signature.returns.hash(&mut h);
    for block in CfgWalk::new(func).skip(1) {
        // A block's parameters, after a separator.
        h.word(u64::MAX);
        for &v in func.dfg.block_params(block) {
            h.word(func.dfg.value_type(v).index() as u64);
        }
    }
    h.finish()
}

/// The functions of `free` (in index order) that have a possible partner: another with the
/// same [`pairing_key`], without which [`try_pair`] declines any pair of them (signatures,
/// block counts, blocks that do not pair); with each, its key numbered in order of first
/// appearance. The others are neither linearised nor weighed.
fn with_possible_partners(module: &Module, free: &[FuncIndex]) -> (Vec<FuncIndex>, Vec<u32>) {
    let keys: Vec<u64> = free
        .par_iter()
        .map(|&f| pairing_key(&module.get(f).func))
        .collect();
    let mut count: HashMap<u64, (u32, u32)> = HashMap::with_capacity(keys.len());
    for &key in &keys {
        let next = count.len() as u32;
        count.entry(key).or_insert((next, 0)).1 += 1;
    }
    free.iter()
        .zip(&keys)
        .filter(|(_, key)| count[key].1 > 1)
        .map(|(&f, key)| (f, count[key].0))
        .unzip()
}

/// Two functions to merge by alignment: the left (lower index) and the right, their
/// linearisations and estimated sizes.
pub struct PairToTry<'l> {
    /// Left, right.
    pub members: [FuncIndex; 2],
    /// Their linearisations.
    pub linearised: [&'l Linearised; 2],
    /// Their estimated `.text` bytes.
    pub member_bytes: [u64; 2],
}

/// Why a pair is not merged by alignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declined {
    /// Other calling conventions or returns, or parameters of which neither list is a
    /// prefix of the other (the rest plain integers).
    Signatures,
    /// Another number of reachable blocks (every block must pair with one of the other).
    BlockCounts,
    /// The body cannot be built: a block on one side only or with other parameter types,
    /// terminators that do not merge, or something outside the builder's scope (jump
    /// tables, dynamic stack slots, stack maps, a value without a zero).
    OutOfScope,
    /// A member's thunk cannot be written.
    Thunk,
    /// A member reads its frame, and a thunk would add one.
    FrameReader,
    /// Under branch protection, the body would branch through a register onto what may be
    /// no landing pad where the members called directly
    /// ([`super::similar::adds_unlanded_indirect_branches`]).
    UnlandedIndirectBranch,
    /// The two thunks take at least what the smaller member would save (the body holds at
    /// least the larger member): not aligned.
    Thunks {
        /// The two thunks' bytes.
        thunks: u64,
        /// The smaller member's estimated bytes.
        smaller: u64,
    },
    /// The body and both thunks are not smaller than the members (estimated bytes).
    Cost {
        /// The two members.
        before: u64,
        /// The body and both thunks.
        after: u64,
    },
}

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declined::Signatures => write!(
                f,
                "their signatures differ beyond parameters of one a prefix of the other's"
            ),
            Declined::BlockCounts => write!(f, "they have other numbers of blocks"),
            Declined::OutOfScope => write!(
                f,
                "their blocks do not all pair (parameters, terminators) or they use what a \
                 merged body cannot hold yet"
            ),
            Declined::Thunk => write!(f, "a thunk into the merged body cannot be written"),
            Declined::FrameReader => write!(
                f,
                "one reads its frame, and a thunk into the merged body would add a frame"
            ),
            Declined::UnlandedIndirectBranch => write!(
                f,
                "the merged body would call through a register where the two call directly, \
                 onto code that is no landing pad under branch protection (a tail call, or a \
                 call of a `tail` function when return addresses are signed)"
            ),
            Declined::Thunks { thunks, smaller } => write!(
                f,
                "the two thunks ({thunks} bytes) take at least what sharing the smaller \
                 function (about {smaller} bytes) would save"
            ),
            Declined::Cost { before, after } => write!(
                f,
                "the merged body and its thunks (about {after} bytes) are not smaller than the \
                 two functions (about {before} bytes)"
            ),
        }
    }
}

/// Build the merged body of `pair` and its members' thunks, or say why not (with
/// `cost_model` off, a pair that does not pay is built too).
pub fn try_pair(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    pair: &PairToTry<'_>,
    cost_model: bool,
    thunk: &ThunkWriter<'_>,
) -> Result<MergedPair, Declined> {
    let [left, right] = pair.members;
    let (l, r): (&Function, &Function) = (&module.get(left).func, &module.get(right).func);
    let signature = build::body_signature(&l.signature, &r.signature)
        .filter(|_| l.dfg.num_blocks() > 0)
        .ok_or(Declined::Signatures)?;
    let [ll, rl] = pair.linearised;
    if ll.block_count() != rl.block_count() {
        return Err(Declined::BlockCounts);
    }
    // Each member passes zeros for the parameters only the other has, then its
    // identifier. The thunks depend on the body's signature alone: written first.
    let values = |own: &Function, id: i64| -> Vec<(Type, i64)> {
        let all = &signature.params;
        all[own.signature.params.len()..all.len() - 1]
            .iter()
            .map(|p| (p.value_type, 0))
            .chain([(build::ID_TYPE, id)])
            .collect()
    };
    let thunks = vec![
        (
            left,
            Box::new(thunk(left, &signature, &values(l, 1)).ok_or(Declined::Thunk)?),
        ),
        (
            right,
            Box::new(thunk(right, &signature, &values(r, 0)).ok_or(Declined::Thunk)?),
        ),
    ];
    // A member that reads its frame runs behind thunks that keep the caller's stack only.
    let reads_frame =
        module.get(left).observes_its_frame() || module.get(right).observes_its_frame();
    if reads_frame && !thunks.iter().all(|(_, t)| isa.keeps_the_callers_stack(t)) {
        return Err(Declined::FrameReader);
    }
    let thunk_bytes: u64 = thunks.iter().map(|(_, t)| isa.thunk_size(t)).sum();
    // The body holds at least the larger member, so the pair saves at most the smaller
    // one less the thunks: when that is nothing, the pair is not even aligned.
    let smaller = pair.member_bytes[0].min(pair.member_bytes[1]);
    if cost_model && smaller <= thunk_bytes {
        return Err(Declined::Thunks {
            thunks: thunk_bytes,
            smaller,
        });
    }
    // Blocks pair one to one, in walk order: aligned block by block.
    let alignment = align_blocks(ll, rl).ok_or(Declined::BlockCounts)?;
    let body = build::build_body(l, r, (ll, rl), &alignment, target.pointer_type())
        .ok_or(Declined::OutOfScope)?;
    debug_assert_eq!(body.signature, signature);
    if super::similar::BranchProtection::of(isa)
        .is_some_and(|p| super::similar::adds_unlanded_indirect_branches(&body, [l, r], p))
    {
        return Err(Declined::UnlandedIndirectBranch);
    }
    let before = pair.member_bytes[0] + pair.member_bytes[1];
    let after = isa.text_size(&body) + thunk_bytes;
    if cost_model && after >= before {
        return Err(Declined::Cost { before, after });
    }
    Ok((
        AlignedMerge {
            left,
            right,
            body,
            member_bytes: pair.member_bytes,
            before,
            after,
        },
        thunks,
    ))
}

/// The functions one search runs on, each with its linearisation, signature and
/// estimated size.
struct Round<'l> {
    members: Vec<FuncIndex>,
    linearised: Vec<&'l Linearised>,
    signatures: Vec<Option<Signature>>,
    /// The estimated `.text` bytes of the member at a position.
    size_of: &'l (dyn Fn(usize) -> u64 + Sync),
    /// Each member's [`pairing_key`], numbered: partners are searched among equal keys.
    keys: Vec<u32>,
}

/// One search: the best pairs among the round's members, skipping pairs already `tried`
/// (and adding those it tries).
fn one_round(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    round: &Round<'_>,
    cost_model: bool,
    thunk: &ThunkWriter<'_>,
    tried: &mut HashSet<(FuncIndex, FuncIndex)>,
) -> (Vec<MergedPair>, usize) {
    let mut pairs = candidates_among(
        &round.members,
        &round.signatures,
        Some(&round.keys),
        &CandidateOptions::default(),
    );
    pairs.retain(|p| tried.insert((p.left, p.right)));
    let position = |f: FuncIndex| {
        round
            .members
            .binary_search(&f)
            .expect("a candidate is a member")
    };
    let built: Vec<MergedPair> = pairs
        .par_iter()
        .filter_map(|p| {
            let (at_left, at_right) = (position(p.left), position(p.right));
            let pair = PairToTry {
                members: [p.left, p.right],
                linearised: [round.linearised[at_left], round.linearised[at_right]],
                member_bytes: [(round.size_of)(at_left), (round.size_of)(at_right)],
            };
            try_pair(module, target, isa, &pair, cost_model, thunk).ok()
        })
        .collect();
    // Greedily by saving, then by members (a pair's members are unique within a round).
    let mut built = built;
    built.sort_unstable_by_key(|(m, _)| {
        let saving = m.before as i64 - m.after as i64;
        (std::cmp::Reverse(saving), m.left, m.right)
    });
    let mut used = HashSet::new();
    let built: Vec<MergedPair> = (built.into_iter())
        .filter(|(m, _)| {
            let free = !used.contains(&m.left) && !used.contains(&m.right);
            if free {
                used.insert(m.left);
                used.insert(m.right);
            }
            free
        })
        .collect();
    // Every body taken is verified, in parallel; one that fails is a bug, and dropped
    // (and counted).
    let chosen = built.len();
    let verified: Vec<_> = built
        .into_par_iter()
        .filter(
            |(m, _)| match cranelift_codegen::verify_function(&m.body, isa) {
                Ok(()) => true,
                Err(errors) => {
                    debug_assert!(false, "an aligned body does not verify: {errors}");
                    false
                }
            },
        )
        .collect();
    let failed = chosen - verified.len();
    (verified, failed)
}
