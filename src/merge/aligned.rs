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
//!    A pair whose two thunks (weighed first: they depend on the body's signature alone;
//!    [`Thunks`] writes them for the pairs chosen only) take at least the smaller member's
//!    estimated bytes is dropped before aligning: that is all sharing could save when the
//!    body holds at least the larger member (on the corpora this bound never dropped a
//!    pair that would have paid: re2 154 of 1,226 pairs built before, sqlite 18 of 1,048,
//!    zstd 8 of 124).
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
//! 6. **Unlike blocks** (opt-in: `unlike_blocks` of [`merge_aligned`], the command
//!    line's `--align-unlike-blocks`). After the rounds above, the functions still free
//!    search again ([`UNLIKE_BLOCKS_ROUNDS`] each): among functions with as many blocks,
//!    whatever their parameter types, then among all whose signatures merge. Functions
//!    with other block counts are aligned as wholes (at most [`UNLIKE_BLOCKS_CELLS`]
//!    cells; [`crate::detect::align::align_for_merging`]), so blocks may be on one side
//!    only: each is its member's block alone in the body; a paired block whose parameter
//!    types differ takes both sides' parameters; terminators going to other blocks each
//!    run behind the identifier; and the uses that control flow no longer dominates are
//!    carried by block parameters (`dominance`). On the corpora this saves 0.15-1.1% more
//!    of `.text` and makes the merge stage 1.4-3.3 times slower, which is why it is off
//!    (bench/README.md §10).
//!
//! The left member (lower index) passes identifier 1, the right 0. Recursion through the
//! pair needs nothing special: a call to a member is a call to its thunk. Deterministic:
//! candidates are in index order, the choice is a function of the sizes and indices.

pub mod build;
mod dominance;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Mutex, OnceLock};

use cranelift_codegen::ir::{self, Function, Type};
use cranelift_codegen::isa::TargetIsa;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::candidates::{candidates_among, signature_of, CandidateOptions, Signature};
use super::module::{FuncIndex, Module};
use super::similar::CodeFacts;
use crate::detect::align::align_for_merging;
use crate::detect::fingerprint::{linearise, Linearised};
use crate::detect::hash::StableHasher;
use crate::detect::walk::CfgWalk;
use crate::target::TargetInfo;
use build::UseCounts;

/// Writes a member's thunk into a body: the member, the body's signature, and the integer
/// values (type, bits) it passes after its own arguments. The thunk may take the member's
/// name and signature, nothing else of it: [`Thunks`] weighs one thunk for every member of
/// the same signature passing the same values into bodies of the same signature.
pub type ThunkWriter<'a> =
    dyn Fn(FuncIndex, &ir::Signature, &[(Type, i64)]) -> Option<Function> + Sync + 'a;

/// What the cost model asks of a thunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ThunkWeight {
    /// Its bytes in `.text` ([`CodeFacts::thunk_size`]).
    bytes: u64,
    /// Whether the body behind it sees the caller's stack
    /// ([`CodeFacts::keeps_the_callers_stack`]).
    keeps_the_callers_stack: bool,
}

/// What a thunk's weight depends on: the member's signature, the body's, and the values
/// passed.
type ThunkKey = (ir::Signature, ir::Signature, Vec<(Type, i64)>);

/// Members' thunks into merged bodies, written by a [`ThunkWriter`] only for the pairs
/// chosen, and weighed once per kind (the member's signature, the body's, the values
/// passed: what the weight depends on): re2's pair tries ask for the weights of 2,692
/// thunks, of which 152 differ other than by the member's name (sqlite 2,348 and 103, zstd
/// 320 and 59).
pub struct Thunks<'w> {
    write: &'w ThunkWriter<'w>,
    weights: Mutex<FxHashMap<ThunkKey, Option<ThunkWeight>>>,
}

impl<'w> Thunks<'w> {
    /// Thunks written by `write`.
    pub fn new(write: &'w ThunkWriter<'w>) -> Self {
        Thunks {
            write,
            weights: Mutex::default(),
        }
    }

    /// The weight of `member`'s thunk into a body of `body`, passing identifier `id`;
    /// `None` when it cannot be written. The same whichever member of the kind asks first:
    /// a function of the kind alone.
    fn weigh(
        &self,
        module: &Module,
        isa: &dyn TargetIsa,
        member: FuncIndex,
        body: &ir::Signature,
        id: i64,
    ) -> Option<ThunkWeight> {
        let own = &module.get(member).func.signature;
        let key = (own.clone(), body.clone(), passed_values(own, body, id));
        let known = self.lock().get(&key).copied();
        known.unwrap_or_else(|| {
            let weight = (self.write)(member, body, &key.2).map(|t| ThunkWeight {
                bytes: isa.thunk_size(&t),
                keeps_the_callers_stack: isa.keeps_the_callers_stack(&t),
            });
            self.lock().insert(key, weight);
            weight
        })
    }

    /// The table of weights (a writer that panicked on another thread left nothing half
    /// inserted: each insertion is one call).
    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<ThunkKey, Option<ThunkWeight>>> {
        self.weights.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The two members' thunks into `merged`'s body; `None` when one cannot be written
    /// (never for a pair [`try_pair`] built: it weighed an equal thunk).
    pub fn write(
        &self,
        module: &Module,
        merged: &AlignedMerge,
    ) -> Option<Vec<(FuncIndex, Box<Function>)>> {
        let body = &merged.body.signature;
        [(merged.left, 1), (merged.right, 0)]
            .into_iter()
            .map(|(member, id)| {
                let values = passed_values(&module.get(member).func.signature, body, id);
                Some((member, Box::new((self.write)(member, body, &values)?)))
            })
            .collect()
    }
}

/// What a member with signature `own` passes into a body of signature `body` after its own
/// arguments: zeros for the parameters only the other member has, then its identifier.
fn passed_values(own: &ir::Signature, body: &ir::Signature, id: i64) -> Vec<(Type, i64)> {
    let all = &body.params;
    all[own.params.len()..all.len() - 1]
        .iter()
        .map(|p| (p.value_type, 0))
        .chain([(build::ID_TYPE, id)])
        .collect()
}

/// Candidate searches among functions whose blocks pair one to one: after each, the
/// functions still free search again (a function whose best partner was taken by a better
/// pair may pair with another).
pub const ROUNDS: usize = 3;

/// With unlike blocks ([`merge_aligned`]), candidate searches after those among the
/// functions still free: first among functions with as many blocks, then among functions
/// whose signatures merge, whatever their blocks.
pub const UNLIKE_BLOCKS_ROUNDS: usize = 1;

/// Most cells of the alignment table of two functions whose block counts differ (aligned
/// as wholes, [`align_for_merging`]): larger pairs are declined before aligning. On the
/// corpora, larger pairs that differ in their blocks rarely paid and took most of the time
/// (bench/README.md §10).
pub const UNLIKE_BLOCKS_CELLS: usize = 1 << 14;

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
    /// Whether the body has blocks of one member alone, or branches where the members go
    /// to other blocks ([`PairToTry::unlike_blocks`]).
    pub unlike_blocks: bool,
}

/// A pair merged by alignment with its members' thunks.
pub type MergedPair = (AlignedMerge, Vec<(FuncIndex, Box<Function>)>);

/// The pairs of `free` (functions nothing else merged) worth merging by alignment, chosen
/// as the module docs say. `thunk(member, body signature, values)` writes the member's thunk
/// that passes its own arguments and then `values` (zeros for parameters only the other
/// member has, then its identifier), as merge-similar writes its own; `cost_model` off takes every
/// pair that builds (tests). Also returns how many bodies chosen failed Cranelift's
/// verifier and were dropped: always 0 unless the builder has a bug, which the tests
/// check (release builds drop such a body rather than stop).
pub fn merge_aligned(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    free: &[FuncIndex],
    cost_model: bool,
    unlike_blocks: bool,
    thunk: &ThunkWriter<'_>,
) -> (Vec<MergedPair>, usize) {
    let kinds: Vec<Partners> = (Partners::searches(unlike_blocks).iter())
        .map(|&(kind, _)| kind)
        .collect();
    let Prepared { free, keys, facts } = prepare(module, target, free, &kinds);
    let thunks = Thunks::new(thunk);
    let mut merged = Vec::new();
    let mut failed_verifier = 0;
    let mut tried: HashSet<(FuncIndex, FuncIndex)> = HashSet::new();
    // Positions in `free` of the functions still free.
    let mut left: Vec<usize> = (0..free.len()).collect();
    for &(partners, rounds) in Partners::searches(unlike_blocks) {
        for _ in 0..rounds {
            let keys = keys.of(partners);
            let round = Round {
                members: left.iter().map(|&i| free[i]).collect(),
                facts: left.iter().map(|&i| &facts[i]).collect(),
                keys: left.iter().map(|&i| keys[i]).collect(),
                unlike_blocks: partners != Partners::SameBlocks,
            };
            let (found, failed) =
                one_round(module, target, isa, &round, cost_model, &thunks, &mut tried);
            failed_verifier += failed;
            if found.is_empty() {
                break;
            }
            let used: HashSet<FuncIndex> =
                found.iter().flat_map(|(m, _)| [m.left, m.right]).collect();
            left.retain(|&i| !used.contains(&free[i]));
            merged.extend(found);
        }
    }
    (merged, failed_verifier)
}

/// The functions of a search, each with its facts for every round.
struct Prepared {
    /// The functions with a possible partner ([`with_possible_partners`]), in index order.
    free: Vec<FuncIndex>,
    /// Each one's keys, numbered.
    keys: Keys,
    facts: Vec<MemberFacts>,
}

/// What the search and the pair tries read of one function, each found at most once
/// however many pairs the function is tried in.
struct MemberFacts {
    linearised: Linearised,
    signature: Option<Signature>,
    /// Its estimated `.text` bytes, found when it is first in a pair (most functions are
    /// in none).
    bytes: OnceLock<u64>,
    /// How often its values are read, found when a body first guards its instructions.
    uses: OnceLock<UseCounts>,
}

impl MemberFacts {
    fn new(linearised: Linearised) -> Self {
        MemberFacts {
            signature: signature_of(&linearised),
            linearised,
            bytes: OnceLock::new(),
            uses: OnceLock::new(),
        }
    }

    /// `member`'s half of a pair to try (its estimated bytes found now if not yet).
    fn half<'f>(&'f self, module: &Module, isa: &dyn TargetIsa, member: FuncIndex) -> Half<'f> {
        Half {
            member,
            linearised: &self.linearised,
            uses: &self.uses,
            bytes: *self
                .bytes
                .get_or_init(|| isa.text_size(&module.get(member).func)),
        }
    }
}

fn prepare(
    module: &Module,
    target: &TargetInfo,
    free: &[FuncIndex],
    kinds: &[Partners],
) -> Prepared {
    let mut free = free.to_vec();
    free.sort_unstable();
    free.dedup();
    let (free, keys) = with_possible_partners(module, &free, kinds);
    let facts = free
        .par_iter()
        .map(|&f| MemberFacts::new(linearise(&module.get(f).func, target)))
        .collect();
    Prepared { free, keys, facts }
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
    let prepared = prepare(module, target, free, &[Partners::SameBlocks]);
    let signatures: Vec<Option<Signature>> = prepared.facts.iter().map(|f| f.signature).collect();
    let pairs = candidates_among(
        &prepared.free,
        &signatures,
        Some(prepared.keys.of(Partners::SameBlocks)),
        &CandidateOptions::default(),
    );
    let thunks = Thunks::new(thunk);
    pairs
        .par_iter()
        .filter_map(|p| {
            let half = |f| {
                let at = prepared
                    .free
                    .binary_search(&f)
                    .expect("a candidate is free");
                prepared.facts[at].half(module, isa, f)
            };
            let pair = PairToTry {
                halves: [half(p.left), half(p.right)],
                unlike_blocks: false,
            };
            let merged = try_pair(module, target, isa, &pair, false, &thunks).ok()?;
            let written = thunks.write(module, &merged)?;
            Some((merged, written))
        })
        .collect()
}

/// What merging `a` and `b` (of `module` as read) by alignment would weigh, were they each
/// other's candidate partner: the estimated bytes before and after, or why not. For
/// `--explain`; `thunk` as for [`merge_aligned`].
pub fn explain_pair(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    a: FuncIndex,
    b: FuncIndex,
    unlike_blocks: bool,
    thunk: &ThunkWriter<'_>,
) -> Result<(u64, u64), Declined> {
    let (left, right) = (a.min(b), a.max(b));
    let facts = |f: FuncIndex| MemberFacts::new(linearise(&module.get(f).func, target));
    let (lf, rf) = (facts(left), facts(right));
    let pair = PairToTry {
        halves: [lf.half(module, isa, left), rf.half(module, isa, right)],
        unlike_blocks,
    };
    try_pair(module, target, isa, &pair, true, &Thunks::new(thunk))
        .map(|merged| (merged.before, merged.after))
}

/// Which functions a search looks for partners among: those of equal keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Partners {
    /// Functions whose blocks pair one to one by position, with equal parameter types
    /// ([`same_blocks_key`]).
    SameBlocks,
    /// Functions with as many blocks, whatever their parameter types
    /// ([`block_count_key`]): a body block of two whose types differ takes both members'
    /// parameters.
    SameBlockCount,
    /// Functions whose signatures merge, whatever their blocks ([`signature_key`]).
    AnyBlocks,
}

/// What two functions must have in common for their blocks to pair one to one, hashed:
/// [`signature_key`]'s, and, block by block in walk order, the parameter types of every
/// block after the entry (the entry's are the signatures', where one may be a prefix of
/// the other).
fn same_blocks_key(func: &Function) -> u64 {
    let mut h = StableHasher::new();
    h.word(signature_key(func));
    for block in CfgWalk::new(func).skip(1) {
        // A block's parameters, after a separator.
        h.word(u64::MAX);
        for &v in func.dfg.block_params(block) {
            h.word(func.dfg.value_type(v).index() as u64);
        }
    }
    h.finish()
}

/// [`signature_key`]'s, and the number of reachable blocks.
fn block_count_key(func: &Function) -> u64 {
    let mut h = StableHasher::new();
    h.word(signature_key(func));
    h.word(CfgWalk::new(func).count() as u64);
    h.finish()
}

/// What two functions must have in common for [`try_pair`] to build their body at all,
/// hashed: the calling convention and returns ([`build::body_signature`]; the parameters
/// may differ by a suffix, and blocks may be on one side only). Functions that could pair
/// have equal keys; two that could not share one only by a collision of the hash, which
/// costs a declined pair, nothing else.
fn signature_key(func: &Function) -> u64 {
    let mut h = StableHasher::new();
    func.signature.call_conv.hash(&mut h);
    func.signature.returns.hash(&mut h);
    h.finish()
}

/// Keys numbered in order of first appearance, and how many functions have each.
fn numbered(keys: &[u64]) -> (Vec<u32>, Vec<u32>) {
    let mut number: HashMap<u64, u32> = HashMap::with_capacity(keys.len());
    let mut count: Vec<u32> = Vec::new();
    let numbers = keys
        .iter()
        .map(|&key| {
            let next = number.len() as u32;
            let n = *number.entry(key).or_insert(next);
            if n == next {
                count.push(0);
            }
            count[n as usize] += 1;
            n
        })
        .collect();
    (numbers, count)
}

/// The functions of `free` (in index order) that have a possible partner in a search of
/// `kinds`: another with the same key, without which [`try_pair`] declines any pair of
/// them; with each, its keys for every kind of search numbered ([`Partners`]). The others
/// are neither linearised nor weighed.
fn with_possible_partners(
    module: &Module,
    free: &[FuncIndex],
    kinds: &[Partners],
) -> (Vec<FuncIndex>, Keys) {
    // Only the keys of the kinds searched are computed.
    let numbered: Vec<(Partners, Vec<u32>, Vec<u32>)> = kinds
        .iter()
        .map(|&kind| {
            let hashed: Vec<u64> = free
                .par_iter()
                .map(|&f| kind.key(&module.get(f).func))
                .collect();
            let (numbers, count) = numbered(&hashed);
            (kind, numbers, count)
        })
        .collect();
    let mut kept = Vec::new();
    let mut keys = Keys::default();
    for (i, &f) in free.iter().enumerate() {
        if numbered
            .iter()
            .any(|(_, n, count)| count[n[i] as usize] > 1)
        {
            kept.push(f);
            for (kind, numbers, _) in &numbered {
                keys.0[kind.index()].push(numbers[i]);
            }
        }
    }
    (kept, keys)
}

/// Each function's key for every kind of search, numbered (by [`Partners::index`]; empty
/// for a kind not searched).
#[derive(Default)]
struct Keys([Vec<u32>; 3]);

impl Keys {
    fn of(&self, partners: Partners) -> &[u32] {
        &self.0[partners.index()]
    }
}

impl Partners {
    /// A function's key for this kind of search.
    fn key(self, func: &Function) -> u64 {
        match self {
            Partners::SameBlocks => same_blocks_key(func),
            Partners::SameBlockCount => block_count_key(func),
            Partners::AnyBlocks => signature_key(func),
        }
    }

    fn index(self) -> usize {
        match self {
            Partners::SameBlocks => 0,
            Partners::SameBlockCount => 1,
            Partners::AnyBlocks => 2,
        }
    }

    /// The searches of merging by alignment, in order, and how many rounds each.
    fn searches(unlike_blocks: bool) -> &'static [(Partners, usize)] {
        if unlike_blocks {
            &[
                (Partners::SameBlocks, ROUNDS),
                (Partners::SameBlockCount, UNLIKE_BLOCKS_ROUNDS),
                (Partners::AnyBlocks, UNLIKE_BLOCKS_ROUNDS),
            ]
        } else {
            &[(Partners::SameBlocks, ROUNDS)]
        }
    }
}

/// Two functions to merge by alignment: the left (lower index) and the right.
pub struct PairToTry<'l> {
    /// The left and the right function.
    pub halves: [Half<'l>; 2],
    /// Whether their blocks may be unlike: other parameter types, blocks one side lacks
    /// (otherwise they must pair one to one by position).
    pub unlike_blocks: bool,
}

/// One function of a [`PairToTry`], with what the try reads of it.
pub struct Half<'l> {
    /// The function.
    pub member: FuncIndex,
    /// Its linearisation.
    pub linearised: &'l Linearised,
    /// How often its values are read, or where to keep them once counted.
    pub uses: &'l OnceLock<UseCounts>,
    /// Its estimated `.text` bytes.
    pub bytes: u64,
}

/// Why a pair is not merged by alignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declined {
    /// Other calling conventions or returns, or parameters of which neither list is a
    /// prefix of the other (the rest plain integers).
    Signatures,
    /// Other numbers of reachable blocks, without unlike blocks ([`merge_aligned`]).
    BlockCounts,
    /// Other numbers of reachable blocks, and functions too large to align as wholes
    /// ([`UNLIKE_BLOCKS_CELLS`]).
    LargeUnlikeBlocks {
        /// Cells of the table.
        cells: usize,
    },
    /// The body cannot be built: without unlike blocks, a block on one side only or with
    /// other parameter types, or terminators going to other blocks; either way entry
    /// blocks, terminators or stack limits that do not pair, or something outside the
    /// builder's scope (jump tables, dynamic stack slots, a value without a
    /// zero).
    OutOfScope {
        /// Whether unlike blocks were allowed for this pair.
        unlike_blocks: bool,
    },
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
            Declined::LargeUnlikeBlocks { cells } => write!(
                f,
                "they have other numbers of blocks, and aligning them as wholes takes \
                 {cells} cells (at most {UNLIKE_BLOCKS_CELLS})"
            ),
            Declined::OutOfScope {
                unlike_blocks: false,
            } => write!(
                f,
                "their blocks do not all pair (parameters, terminators; unlike blocks are \
                 off) or they use what a merged body cannot hold yet"
            ),
            Declined::OutOfScope {
                unlike_blocks: true,
            } => write!(
                f,
                "their entry blocks, terminators or stack limits do not pair, or they use \
                 what a merged body cannot hold yet (jump tables, dynamic stack slots, stack \
                 maps, a value of a type without a zero)"
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

/// Build the merged body of `pair` and weigh it with its members' thunks (written later,
/// by [`Thunks::write`], for the pairs chosen), or say why not (with `cost_model` off, a
/// pair that does not pay is built too).
pub fn try_pair(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    pair: &PairToTry<'_>,
    cost_model: bool,
    thunks: &Thunks<'_>,
) -> Result<AlignedMerge, Declined> {
    let [lh, rh] = &pair.halves;
    let (left, right) = (lh.member, rh.member);
    let (l, r): (&Function, &Function) = (&module.get(left).func, &module.get(right).func);
    let signature = build::body_signature(&l.signature, &r.signature)
        .filter(|_| l.dfg.num_blocks() > 0)
        .ok_or(Declined::Signatures)?;
    let (ll, rl) = (lh.linearised, rh.linearised);
    // The thunks depend on the body's signature alone: weighed first.
    let weigh = |member: FuncIndex, id: i64| {
        (thunks.weigh(module, isa, member, &signature, id)).ok_or(Declined::Thunk)
    };
    let weights = [weigh(left, 1)?, weigh(right, 0)?];
    // A member that reads its frame runs behind thunks that keep the caller's stack only.
    let reads_frame =
        module.get(left).observes_its_frame() || module.get(right).observes_its_frame();
    if reads_frame && !weights.iter().all(|w| w.keeps_the_callers_stack) {
        return Err(Declined::FrameReader);
    }
    let thunk_bytes: u64 = weights.iter().map(|w| w.bytes).sum();
    let member_bytes = [lh.bytes, rh.bytes];
    // The body holds at least the larger member, so the pair saves at most the smaller
    // one less the thunks: when that is nothing, the pair is not even aligned.
    let smaller = member_bytes[0].min(member_bytes[1]);
    if cost_model && smaller <= thunk_bytes {
        return Err(Declined::Thunks {
            thunks: thunk_bytes,
            smaller,
        });
    }
    // Block by block when the block counts agree, as wholes otherwise.
    // Blocks that do not pair by position are aligned with the whole functions: only
    // while the table stays small.
    let cells = (ll.items.len() + 1).saturating_mul(rl.items.len() + 1);
    match (ll.block_count() == rl.block_count(), pair.unlike_blocks) {
        (true, _) => {}
        (false, false) => return Err(Declined::BlockCounts),
        (false, true) if cells > UNLIKE_BLOCKS_CELLS => {
            return Err(Declined::LargeUnlikeBlocks { cells })
        }
        (false, true) => {}
    }
    let alignment = align_for_merging(ll, rl);
    let uses = (lh.uses, rh.uses);
    let (body, unlike_blocks) = build::build_body(
        l,
        r,
        (ll, rl),
        uses,
        &alignment,
        target.pointer_type(),
        pair.unlike_blocks,
    )
    .ok_or(Declined::OutOfScope {
        unlike_blocks: pair.unlike_blocks,
    })?;
    debug_assert_eq!(body.signature, signature);
    if super::similar::BranchProtection::of(isa)
        .is_some_and(|p| super::similar::adds_unlanded_indirect_branches(&body, [l, r], p))
    {
        return Err(Declined::UnlandedIndirectBranch);
    }
    let before = member_bytes[0] + member_bytes[1];
    let after = isa.text_size(&body) + thunk_bytes;
    if cost_model && after >= before {
        return Err(Declined::Cost { before, after });
    }
    Ok(AlignedMerge {
        left,
        right,
        body,
        member_bytes,
        before,
        after,
        unlike_blocks,
    })
}

/// The functions one search runs on, each with its facts.
struct Round<'l> {
    members: Vec<FuncIndex>,
    facts: Vec<&'l MemberFacts>,
    /// Each member's key for the round's kind of search ([`Partners`]), numbered:
    /// partners are searched among equal keys.
    keys: Vec<u32>,
    /// Whether the search is for unlike blocks ([`PairToTry::unlike_blocks`]).
    unlike_blocks: bool,
}

/// One search: the best pairs among the round's members, skipping pairs already `tried`
/// (and adding those it tries).
fn one_round(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    round: &Round<'_>,
    cost_model: bool,
    thunks: &Thunks<'_>,
    tried: &mut HashSet<(FuncIndex, FuncIndex)>,
) -> (Vec<MergedPair>, usize) {
    let signatures: Vec<Option<Signature>> = round.facts.iter().map(|f| f.signature).collect();
    let mut pairs = candidates_among(
        &round.members,
        &signatures,
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
    let half = |f: FuncIndex| round.facts[position(f)].half(module, isa, f);
    let mut built: Vec<AlignedMerge> = pairs
        .par_iter()
        .filter_map(|p| {
            let pair = PairToTry {
                halves: [half(p.left), half(p.right)],
                unlike_blocks: round.unlike_blocks,
            };
            try_pair(module, target, isa, &pair, cost_model, thunks).ok()
        })
        .collect();
    // Greedily by saving, then by members (a pair's members are unique within a round).
    built.sort_unstable_by_key(|m| {
        let saving = m.before as i64 - m.after as i64;
        (std::cmp::Reverse(saving), m.left, m.right)
    });
    let mut used = HashSet::new();
    let built: Vec<AlignedMerge> = (built.into_iter())
        .filter(|m| {
            let free = !used.contains(&m.left) && !used.contains(&m.right);
            if free {
                used.insert(m.left);
                used.insert(m.right);
            }
            free
        })
        .collect();
    // Every body taken is verified, in parallel; one that fails is a bug, and dropped
    // (and counted). The thunks of those taken are written.
    let chosen = built.len();
    let verified: Vec<AlignedMerge> = built
        .into_par_iter()
        .filter(|m| match cranelift_codegen::verify_function(&m.body, isa) {
            Ok(()) => true,
            Err(errors) => {
                debug_assert!(false, "an aligned body does not verify: {errors}");
                false
            }
        })
        .collect();
    let failed = chosen - verified.len();
    let written = verified
        .into_par_iter()
        .filter_map(|m| {
            let written = thunks.write(module, &m);
            debug_assert!(written.is_some(), "a thunk weighed cannot be written");
            Some((m, written?))
        })
        .collect();
    (written, failed)
}
