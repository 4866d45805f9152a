//! Shapes: each function's encoding with every callee whose class matters written as a
//! placeholder, the callees recorded in order. The first pass walks every function in
//! parallel (hash and references), encodes those whose hash another function shares, and
//! interns equal encodings in a sharded table, so that later phases compare functions by
//! (shape, callees' classes) and never encode a function twice.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use cranelift_codegen::ir::{FuncRef, Function, GlobalValue};
use cranelift_entity::{EntityRef, SecondaryMap};

use rayon::prelude::*;

use super::memory::{body_address, FirstPassMemory, Learned, LearnedShape, Prior};
use super::references::{
    Callers, ChunkRefs, Facts, Refs, WalkBuffers, Walked, SIMILAR_THUNK_TOKEN,
};
use super::sized;
use crate::detect::encode::{CallTarget, CallTargets, Encoder, Token};
use crate::detect::hash::{StableHasher, StableState};
use crate::detect::walk::CfgWalk;
use crate::merge::module::{FuncIndex, Module};
use crate::target::TargetInfo;

/// The shape's policy: every redirectable callee, and every address that is its class's,
/// is a placeholder, recorded in order.
struct Placeholder<'d> {
    pub(super) facts: &'d Facts,
    pub(super) refs: Refs<'d>,
    pub(super) recorded: &'d RefCell<Vec<FuncIndex>>,
}

impl Placeholder<'_> {
    pub(super) fn placeholder(&self, target: Option<FuncIndex>) -> CallTarget {
        match target {
            None => CallTarget::Name,
            Some(c) => {
                self.recorded.borrow_mut().push(c);
                CallTarget::Class(0)
            }
        }
    }

    pub(super) fn func_ref(&self, callee: FuncRef) -> Option<FuncIndex> {
        self.refs.func_ref(callee)
    }
}

impl CallTargets for Placeholder<'_> {
    fn call_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        let callee = self.func_ref(callee);
        self.placeholder(callee.filter(|&c| self.facts.redirectable[c]))
    }

    fn address_target(&self, _func: &Function, callee: FuncRef) -> CallTarget {
        let callee = self.func_ref(callee);
        self.placeholder(callee.filter(|&c| self.facts.address_is_class[c]))
    }

    fn symbol_target(&self, _func: &Function, gv: GlobalValue) -> CallTarget {
        let named = self.refs.symbol(gv);
        self.placeholder(named.filter(|&c| self.facts.address_is_class[c]))
    }
}

/// The table of shapes, filled by the workers as they go: sharded by hash, each shard under
/// its own lock, and each distinct shape's encoding kept once. A shape is numbered by the
/// first function (in index order) that has it, whatever the order the workers reached
/// them in.
struct ShapeTable {
    pub(super) shards: Vec<Padded<Mutex<Shard>>>,
}

#[derive(Default)]
pub(super) struct Shard {
    /// Hash → the last shape added with that hash; the others follow through `next`.
    pub(super) by_hash: HashMap<u64, u32, StableState>,
    pub(super) shapes: Vec<InternedShape>,
}

pub(super) struct InternedShape {
    pub(super) tokens: Arc<[Token]>,
    /// The hash it is kept under.
    pub(super) hash: u64,
    /// The first function with this shape so far.
    pub(super) first: FuncIndex,
    /// How many functions have it.
    pub(super) uses: u32,
    /// The next shape with the same hash, if any.
    pub(super) next: Option<u32>,
}

/// Where a [`ShapeTable`] keeps a shape: (shard, index in the shard).
type ShapeAt = (u32, u32);

impl ShapeTable {
    const SHARDS: usize = 64;

    pub(super) fn new() -> Self {
        Self {
            shards: (0..Self::SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    /// Record that `f` has the shape `tokens`, hashed to `hash`.
    pub(super) fn intern(&self, hash: u64, tokens: &[Token], f: FuncIndex) -> ShapeAt {
        self.intern_with(hash, tokens, f, || tokens.into())
    }

    /// [`Self::intern`], with `shared` for the encoding should the shape be new (the
    /// encoding an earlier pass interned, taken again without a copy).
    pub(super) fn intern_shared(&self, hash: u64, shared: &Arc<[Token]>, f: FuncIndex) -> ShapeAt {
        self.intern_with(hash, shared, f, || shared.clone())
    }

    fn intern_with(
        &self,
        hash: u64,
        tokens: &[Token],
        f: FuncIndex,
        keep: impl FnOnce() -> Arc<[Token]>,
    ) -> ShapeAt {
        let shard_index = (hash >> 58) as usize % Self::SHARDS;
        let mut shard = lock(&self.shards[shard_index].0);
        let shard = &mut *shard;
        let mut at = shard.by_hash.get(&hash).copied();
        while let Some(i) = at {
            let shape = &mut shard.shapes[i as usize];
            if *shape.tokens == *tokens {
                shape.first = shape.first.min(f);
                shape.uses += 1;
                return (shard_index as u32, i);
            }
            at = shape.next;
        }
        let i = shard.shapes.len() as u32;
        let next = shard.by_hash.insert(hash, i);
        shard.shapes.push(InternedShape {
            tokens: keep(),
            hash,
            first: f,
            uses: 1,
            next,
        });
        (shard_index as u32, i)
    }

    /// Its shards, unlocked.
    fn into_shards(self) -> Vec<Shard> {
        (self.shards.into_iter())
            .map(|shard| {
                (shard.0)
                    .into_inner()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
            })
            .collect()
    }

    /// The shape kept at `at`: its number (its first function) and how many functions
    /// have it.
    pub(super) fn get(&mut self, (shard, i): ShapeAt) -> (FuncIndex, u32) {
        let shard = self.shards[shard as usize]
            .0
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let shape = &shard.shapes[i as usize];
        (shape.first, shape.uses)
    }
}

/// A shard of a table, alone on its cache lines (two workers locking neighbouring shards
/// would otherwise slow each other down).
#[derive(Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// A lock that a panicking holder did not leave unusable (the panic is re-raised anyway).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How many functions have each structural hash, counted by the workers as they go.
struct HashCounts {
    pub(super) shards: Vec<Padded<Mutex<HashMap<u64, u32, StableState>>>>,
}

impl HashCounts {
    const SHARDS: usize = 64;

    pub(super) fn new() -> Self {
        Self {
            shards: (0..Self::SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    /// Count one more function with `hash`; `true` if it is not the first.
    pub(super) fn add(&self, hash: u64) -> bool {
        let mut shard = lock(&self.shards[(hash >> 58) as usize % Self::SHARDS].0);
        let count = shard.entry(hash).or_default();
        *count += 1;
        *count > 1
    }

    /// Whether more than one function has `hash` (one has).
    pub(super) fn shared(&self, hash: u64) -> bool {
        lock(&self.shards[(hash >> 58) as usize % Self::SHARDS].0)[&hash] > 1
    }
}

/// A hash of a shape's encoding, in four independent lanes (the encodings are long).
fn hash_tokens(seed: u64, tokens: &[Token]) -> u64 {
    let mut lanes = [
        StableHasher::new(),
        StableHasher::new(),
        StableHasher::new(),
        StableHasher::new(),
    ];
    lanes[0].word(seed);
    // Two tokens per step of a lane (the exact comparison makes up for a weaker mix).
    let mut chunks = tokens.chunks_exact(8);
    for c in &mut chunks {
        for (lane, pair) in lanes.iter_mut().zip(c.chunks_exact(2)) {
            lane.word(pair[0] ^ pair[1].rotate_left(32));
        }
    }
    let mut h = StableHasher::new();
    h.word(tokens.len() as u64);
    for &t in chunks.remainder() {
        h.word(t);
    }
    for lane in &lanes {
        h.word(lane.finish());
    }
    h.finish()
}

/// Buffers reused from one function to the next.
#[derive(Default)]
struct Buffers {
    pub(super) walk: WalkBuffers,
    pub(super) tokens: Vec<Token>,
    pub(super) recorded: RefCell<Vec<FuncIndex>>,
}

/// Functions per task of the first pass. A task keeps what it learns of its functions in a
/// few buffers of its own (a [`Chunk`]) rather than in a few allocations per function.
pub(super) const CHUNK: usize = 64;

/// What the first pass learns of the walks of a run of consecutive functions.
pub(super) struct ChunkWalks {
    /// Per function, its walk.
    pub(super) walked: Vec<Walked>,
    /// The functions' references ([`Walked::refs`]).
    pub(super) refs: ChunkRefs,
}

/// What the first pass learns of the shapes of a run of consecutive functions.
pub(super) struct ChunkShapes {
    /// Per function, what became of its shape.
    pub(super) shapes: Vec<EarlyShape>,
    /// The placeholders' callees of the encoded functions.
    pub(super) callees: Vec<FuncIndex>,
    /// The encodings kept but not interned.
    pub(super) tokens: Vec<Token>,
}

/// What became of a function's shape. Ranges are in its chunk's buffers.
pub(super) enum EarlyShape {
    /// Not encoded (its hash was new, and it is not small; or nobody shares its hash).
    No,
    /// Encoded and interned: where the table keeps the shape, and the placeholders'
    /// callees.
    Interned(ShapeAt, Range<u32>),
    /// Encoded but not interned, because nobody else had its hash yet: a small function,
    /// encoded while it was in the cache in case another function turns out to share its
    /// hash (most small functions do). Its encoding, that encoding's hash, its callees.
    Kept(Range<u32>, u64, Range<u32>),
    /// Taken from an earlier pass ([`Prior`]) but not interned yet, because nobody else
    /// had its hash yet: its encoding, that encoding's hash, its callees.
    Remembered(Arc<[Token]>, u64, Range<u32>),
}

/// Functions of at most this many (reachable) instructions are encoded in the first pass
/// even when their hash is new.
const ENCODE_EARLY: usize = 16;

/// Append `items` to `to`; where they are.
fn append<T: Copy>(to: &mut Vec<T>, items: &[T]) -> Range<u32> {
    let start = to.len() as u32;
    to.extend_from_slice(items);
    start..to.len() as u32
}

/// Encode `f`'s shape into `buffers.tokens` (its placeholders' callees into
/// `buffers.recorded`). Returns the encoding's hash. `just_walked`: `buffers` hold the
/// blocks of `f`'s walk.
#[allow(clippy::too_many_arguments)]
fn encode_shape(
    module: &Module,
    target: &TargetInfo,
    facts: &Facts,
    f: FuncIndex,
    walked: &Walked,
    refs: Refs<'_>,
    just_walked: bool,
    buffers: &mut Buffers,
) -> u64 {
    buffers.recorded.get_mut().clear();
    let calls = Placeholder {
        facts,
        refs,
        recorded: &buffers.recorded,
    };
    let func = &module.get(f).func;
    let walk = match just_walked {
        true => CfgWalk::replay(func, &buffers.walk.blocks),
        false => CfgWalk::new(func),
    };
    let tokens = &mut buffers.tokens;
    tokens.clear();
    Encoder::with_walk(func, target, &calls, walk).encode_all(tokens);
    if module.get(f).similar_thunk {
        tokens.push(SIMILAR_THUNK_TOKEN);
    }
    hash_tokens(walked.hash, tokens)
}

/// Lists of functions, one per function, in one array.
pub(super) struct Lists {
    pub(super) start: Vec<u32>,
    pub(super) items: Vec<FuncIndex>,
}

impl Lists {
    pub(super) fn of(&self, f: FuncIndex) -> &[FuncIndex] {
        &self.items[self.start[f.index()] as usize..self.start[f.index() + 1] as usize]
    }
}

/// The shapes of the functions whose hash is shared.
pub(super) struct Shapes {
    /// Each candidate's shape: the index of the first function with that shape.
    pub(super) shape: SecondaryMap<FuncIndex, u32>,
    /// Each function's placeholders' callees, in order.
    pub(super) callees: Lists,
    /// The functions whose shape another function has, in index order.
    pub(super) shared: Vec<FuncIndex>,
    /// Shape numbers are below this.
    pub(super) count: usize,
}

/// What the first pass learns of the whole module.
pub(super) struct FirstPass {
    /// The shapes of the functions whose hash is shared.
    pub(super) shapes: Shapes,
    /// Who calls each function (or takes its address, where that address is its class's).
    pub(super) callers: Callers,
    /// Functions whose address some function takes.
    pub(super) address_used: SecondaryMap<FuncIndex, bool>,
    /// Every function's structural hash ([`crate::detect::function_hash`]), by index.
    pub(super) hashes: Vec<u64>,
}

/// The first pass: every function walked (hash, references) and, where its hash is
/// shared, its shape interned; then the call graph. What `prior` remembers of a function
/// that still holds is taken instead of walking and encoding it ([`super::memory`]); with
/// `remember`, what this pass learned is kept too.
pub(super) fn first_pass(
    module: &Module,
    target: &TargetInfo,
    facts: &Facts,
    prior: Option<Prior<'_>>,
    remember: bool,
) -> (FirstPass, Option<FirstPassMemory>) {
    let indices: Vec<FuncIndex> = module.indices().collect();
    // One parallel pass: each function is walked (hash, references) and, when another
    // function already had its hash (it is a candidate), encoded at once, while its
    // instructions are still in the cache. The first function of each shared hash is
    // encoded afterwards. Which function is first depends on the workers' timing; nothing
    // else does (shapes are compared exactly, and numbered by their first function).
    let hashes = HashCounts::new();
    let mut table = ShapeTable::new();
    let (walks, mut chunks): (Vec<ChunkWalks>, Vec<ChunkShapes>) = indices
        .par_chunks(CHUNK)
        .map_init(Buffers::default, |buffers, functions| {
            let n = functions.len();
            let mut walks = ChunkWalks {
                walked: Vec::with_capacity(n),
                refs: ChunkRefs::with_capacity(n),
            };
            let mut chunk = ChunkShapes {
                shapes: Vec::with_capacity(n),
                callees: Vec::with_capacity(n * 2),
                tokens: Vec::new(),
            };
            for &f in functions {
                let learned = prior.and_then(|prior| prior.learned(f, module, facts));
                // A function taken from the earlier pass is not walked: its blocks are not
                // in `buffers`, and it is encoded (if at all) only when its hash is shared.
                let (walked, just_walked) = match &learned {
                    Some(Learned { walked, refs, .. }) => {
                        (walked.replay(refs, &mut walks.refs), false)
                    }
                    None => (
                        Walked::new(module, f, &mut buffers.walk, &mut walks.refs),
                        true,
                    ),
                };
                let shared = hashes.add(walked.hash);
                let shape = match learned.and_then(|learned| learned.shape) {
                    Some(LearnedShape {
                        hash,
                        tokens,
                        callees,
                    }) => {
                        let callees = append(&mut chunk.callees, callees);
                        match shared {
                            true => {
                                EarlyShape::Interned(table.intern_shared(hash, tokens, f), callees)
                            }
                            false => EarlyShape::Remembered(tokens.clone(), hash, callees),
                        }
                    }
                    None if shared || (just_walked && walked.insts as usize <= ENCODE_EARLY) => {
                        let refs = walked.refs(&walks.refs);
                        let hash = encode_shape(
                            module,
                            target,
                            facts,
                            f,
                            &walked,
                            refs,
                            just_walked,
                            buffers,
                        );
                        let callees = append(&mut chunk.callees, buffers.recorded.get_mut());
                        match shared {
                            true => EarlyShape::Interned(
                                table.intern(hash, &buffers.tokens, f),
                                callees,
                            ),
                            false => EarlyShape::Kept(
                                append(&mut chunk.tokens, &buffers.tokens),
                                hash,
                                callees,
                            ),
                        }
                    }
                    None => EarlyShape::No,
                };
                walks.walked.push(walked);
                chunk.shapes.push(shape);
            }
            (walks, chunk)
        })
        .unzip();
    // Two jobs at once: the first function of each shared hash, interned now (encoded now
    // if it was not); and the call graph.
    let ((), (callers, address_used)) = rayon::join(
        || {
            chunks.par_iter_mut().zip(&walks).enumerate().for_each_init(
                Buffers::default,
                |buffers, (c, (chunk, walks))| {
                    let ChunkShapes {
                        shapes,
                        callees,
                        tokens,
                    } = chunk;
                    for (i, (walked, shape)) in walks.walked.iter().zip(shapes).enumerate() {
                        let f = FuncIndex::new(c * CHUNK + i);
                        *shape = match std::mem::replace(shape, EarlyShape::No) {
                            EarlyShape::Interned(at, list) => EarlyShape::Interned(at, list),
                            _ if !hashes.shared(walked.hash) => EarlyShape::No,
                            EarlyShape::Kept(encoding, hash, list) => {
                                let encoding =
                                    &tokens[encoding.start as usize..encoding.end as usize];
                                EarlyShape::Interned(table.intern(hash, encoding, f), list)
                            }
                            EarlyShape::Remembered(encoding, hash, list) => {
                                EarlyShape::Interned(table.intern_shared(hash, &encoding, f), list)
                            }
                            EarlyShape::No => {
                                let refs = walked.refs(&walks.refs);
                                let hash = encode_shape(
                                    module, target, facts, f, walked, refs, false, buffers,
                                );
                                let list = append(callees, buffers.recorded.get_mut());
                                EarlyShape::Interned(table.intern(hash, &buffers.tokens, f), list)
                            }
                        };
                    }
                },
            )
        },
        || {
            let all_refs = || {
                walks
                    .iter()
                    .flat_map(|w| w.walked.iter().map(|walked| walked.refs(&w.refs)))
            };
            let callers = Callers::new(module, facts, all_refs());
            let mut address_used: SecondaryMap<FuncIndex, bool> = sized(module.len());
            for refs in all_refs() {
                for target in refs.addresses() {
                    address_used[target] = true;
                }
            }
            (callers, address_used)
        },
    );
    let hashes: Vec<u64> = walks
        .iter()
        .flat_map(|w| w.walked.iter().map(|walked| walked.hash))
        .collect();
    let walks = match remember {
        true => Some(walks),
        false => {
            drop(walks);
            None
        }
    };

    let mut shapes = Shapes {
        shape: sized(module.len()),
        callees: Lists {
            start: Vec::with_capacity(module.len() + 1),
            items: Vec::new(),
        },
        shared: Vec::new(),
        count: module.len(),
    };
    shapes.callees.start.push(0);
    let all = chunks
        .iter()
        .flat_map(|chunk| chunk.shapes.iter().map(move |shape| (chunk, shape)));
    for (f, (chunk, shape)) in indices.iter().copied().zip(all) {
        if let EarlyShape::Interned(at, callees) = shape {
            let (first, uses) = table.get(*at);
            shapes.shape[f] = first.as_u32();
            let callees = &chunk.callees[callees.start as usize..callees.end as usize];
            shapes.callees.items.extend_from_slice(callees);
            if uses > 1 {
                shapes.shared.push(f);
            }
        }
        shapes.callees.start.push(shapes.callees.items.len() as u32);
    }
    // Kept for a later pass, or freed (the walks' buffers after the call graph was made,
    // the table after the shapes were numbered).
    let memory = walks.map(|walks| {
        for chunk in &mut chunks {
            // Encodings kept but never interned: no later pass reads them.
            chunk.tokens = Vec::new();
        }
        FirstPassMemory {
            facts: facts.clone(),
            bodies: module.indices().map(|f| body_address(module, f)).collect(),
            walks,
            shapes: chunks,
            table: table.into_shards(),
        }
    });

    let first = FirstPass {
        shapes,
        callers,
        address_used,
        hashes,
    };
    (first, memory)
}
