//! Candidate partners for merging by alignment, found in near-linear time: MinHash
//! fingerprints and locality-sensitive hashing, after F3M (CGO 2022).
//!
//! Aligning every pair of functions costs N² alignments; F3M instead gives each function a
//! short fingerprint from which the Jaccard similarity of two functions' instruction
//! *shingles* can be estimated, and hashes the fingerprints so that similar functions
//! meet in a bucket. Here:
//!
//! 1. **Shingles.** A function is linearised ([`crate::detect::fingerprint`]: one
//!    fingerprint per block and instruction, constants, offsets, callees and value numbers
//!    left out) and every run of [`SHINGLE`] consecutive fingerprints is hashed into a
//!    shingle (a function shorter than that is one shingle).
//! 2. **MinHash.** For each of [`HASHES`] hash functions (double hashing from two mixes of
//!    the shingle), the function keeps the least value over its shingles. Two functions
//!    agree in one position with probability equal to the Jaccard similarity of their
//!    shingle sets, so the share of positions where they agree estimates it.
//! 3. **Banding.** The signature is cut into [`BANDS`] bands of [`ROWS`] values; each band
//!    hashed is a bucket key. Two functions of similarity s share a bucket in at least one
//!    band with probability 1 − (1 − s^ROWS)^BANDS: 0.95 at s = 0.6, 0.8 at 0.5, 0.4 at
//!    0.35, 0.09 at 0.2.
//! 4. **Partners.** Each band's entries are sorted by (key, the next band's key, function),
//!    so that within a bucket functions that share two bands sit together, and every
//!    function is compared with the next [`CandidateOptions::window`] functions of its
//!    bucket (this caps the work of a bucket that many functions share at N × window per
//!    band, whatever its size). Of all the functions met, each keeps the one whose
//!    signature agrees with its own in the most positions (the lower index on ties), when
//!    that estimate reaches [`CandidateOptions::min_similarity`].
//!
//! The result is the set of pairs (function, best partner), each pair once. Work and memory
//! are linear in the number of functions and their instructions: the signatures
//! (`HASHES` × 4 bytes per function) and band keys (`BANDS` × 8) are the only per-function
//! state, and each thread sorts one band's entries at a time. Every step is a function of the
//! input alone (fixed seeds, sorts on total orders, maxima on total orders), so the pairs
//! are the same whatever the number of threads.

use cranelift_codegen::ir::Function;
use rayon::prelude::*;

use super::module::{FuncIndex, Module};
use crate::detect::fingerprint::{linearise, Linearised};
use crate::target::TargetInfo;

/// Consecutive fingerprints per shingle.
pub const SHINGLE: usize = 3;
/// Bands of the signature.
pub const BANDS: usize = 12;
/// Values per band.
pub const ROWS: usize = 3;
/// MinHash values per function.
pub const HASHES: usize = BANDS * ROWS;

/// A function's MinHash signature.
pub type Signature = [u32; HASHES];

/// How candidate partners are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CandidateOptions {
    /// Functions after each one in its bucket (in the bucket's order) that it is compared with.
    pub window: usize,
    /// The least estimated similarity (share of agreeing signature positions, 0 to 1) for
    /// a partner.
    pub min_similarity: f64,
}

impl Default for CandidateOptions {
    fn default() -> Self {
        Self {
            window: 4,
            min_similarity: 0.3,
        }
    }
}

/// Two functions worth aligning: one is the other's best partner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CandidatePair {
    /// The lower index.
    pub left: FuncIndex,
    /// The higher index.
    pub right: FuncIndex,
    /// The estimated Jaccard similarity of their shingles (agreeing signature positions).
    pub similarity: f64,
}

/// Candidate pairs among `members` of `module` (each function with its best partner, each
/// pair once, ordered by index), under `target` (whose pointer type decides which offsets
/// are holes).
pub fn find_candidates(
    module: &Module,
    target: &TargetInfo,
    members: &[FuncIndex],
    options: &CandidateOptions,
) -> Vec<CandidatePair> {
    let signatures: Vec<Option<Signature>> = members
        .par_iter()
        .map(|&f| signature(&module.get(f).func, target))
        .collect();
    candidates_among(members, &signatures, None, options)
}

/// [`find_candidates`] with the members' signatures already computed (`signatures[i]` is
/// `members[i]`'s): for a search run again on fewer members. With `groups` (`groups[i]`
/// is `members[i]`'s), partners are searched within each group apart: a bucket is the
/// functions of one group whose band agrees, exactly as if each group were searched alone.
pub fn candidates_among(
    members: &[FuncIndex],
    signatures: &[Option<Signature>],
    groups: Option<&[u32]>,
    options: &CandidateOptions,
) -> Vec<CandidatePair> {
    let best = best_partners(signatures, groups, options);
    let mut pairs: Vec<CandidatePair> = best
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let (j, agree) = (*b)?;
            let (a, b) = (members[i], members[j as usize]);
            Some(CandidatePair {
                left: a.min(b),
                right: a.max(b),
                similarity: f64::from(agree) / HASHES as f64,
            })
        })
        .collect();
    pairs.sort_by_key(|p| (p.left, p.right));
    pairs.dedup_by_key(|p| (p.left, p.right));
    pairs
}

/// The MinHash signature of `func`, or `None` when it has no reachable block.
pub fn signature(func: &Function, target: &TargetInfo) -> Option<Signature> {
    signature_of(&linearise(func, target))
}

/// The MinHash signature of a function linearised ([`linearise`]), or `None` when it has
/// no reachable block.
pub fn signature_of(linearised: &Linearised) -> Option<Signature> {
    let shapes: Vec<u64> = linearised.items.values().map(|i| i.shape).collect();
    if shapes.is_empty() {
        return None;
    }
    let mut sig = [u32::MAX; HASHES];
    for window in shapes.windows(SHINGLE.min(shapes.len())) {
        let shingle = window.iter().fold(0x5151_u64, |h, &s| mix(h ^ s));
        // Double hashing: the t-th hash function is h1 + t·h2 (Kirsch and Mitzenmacher).
        let (h1, h2) = (mix(shingle), mix(shingle ^ 0x9E37_79B9_7F4A_7C15) | 1);
        for (t, slot) in sig.iter_mut().enumerate() {
            let v = (h1.wrapping_add((t as u64).wrapping_mul(h2)) >> 32) as u32;
            *slot = (*slot).min(v);
        }
    }
    Some(sig)
}

/// For each signature, its best partner (position in `signatures`) and how many positions
/// agree, when a partner reaches the threshold.
fn best_partners(
    signatures: &[Option<Signature>],
    groups: Option<&[u32]>,
    options: &CandidateOptions,
) -> Vec<Option<(u32, u16)>> {
    let group = |i: u32| groups.map_or(0, |g| g[i as usize]);
    let keys: Vec<[u64; BANDS]> = signatures
        .par_iter()
        .map(|s| s.as_ref().map_or([0; BANDS], band_keys))
        .collect();
    let least = (options.min_similarity * HASHES as f64).ceil().max(1.0) as u16;
    let present: Vec<u32> = (0..signatures.len() as u32)
        .filter(|&i| signatures[i as usize].is_some())
        .collect();
    // The bands are searched in parallel, each on one thread (one band's sorted entries in
    // memory per thread), each thread's share of the bands keeping the best partners it
    // met in one table; the tables meet at the end. `offer` keeps the same partner
    // whatever the order of the offers.
    let none = || vec![None; signatures.len()];
    let per_thread = BANDS.div_ceil(rayon::current_num_threads());
    let best = (0..BANDS)
        .into_par_iter()
        .with_min_len(per_thread)
        .fold(none, |mut best, band| {
            let mut entries: Vec<((u32, u64), u64, u32)> = present
                .iter()
                .map(|&i| {
                    (
                        (group(i), keys[i as usize][band]),
                        keys[i as usize][(band + 1) % BANDS],
                        i,
                    )
                })
                .collect();
            entries.sort_unstable();
            // Buckets: runs of one group and key. Each entry meets the next `window` of
            // its run.
            for (k, &(key, _, i)) in entries.iter().enumerate() {
                let next = entries[k + 1..].iter().take(options.window);
                for &(_, _, j) in next.take_while(|e| e.0 == key) {
                    let agree = agreement(signatures, i, j);
                    if agree >= least {
                        offer(&mut best[i as usize], j, agree);
                        offer(&mut best[j as usize], i, agree);
                    }
                }
            }
            best
        })
        .reduce(none, |mut best, other| {
            for (b, o) in best.iter_mut().zip(other) {
                if let Some((partner, agree)) = o {
                    offer(b, partner, agree);
                }
            }
            best
        });
    best
}

/// Keep `partner` if it agrees more than the best so far, or as much with a lower index.
fn offer(best: &mut Option<(u32, u16)>, partner: u32, agree: u16) {
    let better = match *best {
        None => true,
        Some((p, a)) => agree > a || (agree == a && partner < p),
    };
    if better {
        *best = Some((partner, agree));
    }
}

/// Positions where two signatures agree.
fn agreement(signatures: &[Option<Signature>], i: u32, j: u32) -> u16 {
    match (&signatures[i as usize], &signatures[j as usize]) {
        (Some(a), Some(b)) => a.iter().zip(b).filter(|(x, y)| x == y).count() as u16,
        _ => 0,
    }
}

/// Each band of `sig` hashed into a bucket key (the band's number mixed in, so that equal
/// values in different bands are different keys).
fn band_keys(sig: &Signature) -> [u64; BANDS] {
    let mut keys = [0; BANDS];
    for (band, key) in keys.iter_mut().enumerate() {
        let rows = &sig[band * ROWS..(band + 1) * ROWS];
        *key = rows
            .iter()
            .fold(band as u64 + 1, |h, &v| mix(h ^ u64::from(v)));
    }
    keys
}

/// splitmix64's finalizer: a fixed, well-spread mix.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
