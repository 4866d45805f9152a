//! Finding the groups of equal functions: LLVM's worklist and tree, then class
//! refinement over the call graph for what the tree cannot see (recursive cycles).
//!
//! **Shapes.** The tree compares functions by their encoding ([`Encoder`]) with direct
//! callees written by their current class, and classes change as functions fold. Instead
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

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

use cranelift_codegen::ir::{
    Block, FuncRef, Function, GlobalValue, GlobalValueData, InstructionData,
};
use cranelift_entity::{EntityRef, SecondaryMap};
use rayon::prelude::*;

use super::module::{FuncIndex, Linkage, Module};
use super::plan::FoundBy;
use super::MergeOptions;
use crate::detect::encode::{CallTarget, CallTargets, Encoder, Token};
use crate::detect::hash::{hash_visiting, StableHasher, StableState};
use crate::detect::walk::CfgWalk;
use crate::names::FuncName;
use crate::target::TargetInfo;

/// A map with a value for each of the first `n` functions (growing it on every write would
/// cost more than the writes).
fn sized<V: Clone + Default>(n: usize) -> SecondaryMap<FuncIndex, V> {
    let mut map = SecondaryMap::new();
    map.resize(n);
    map
}

/// The classes of equal functions, as a union of sets with eagerly updated roots. Each
/// class's members form a ring (`next`), so that a union moves no memory.
struct Classes {
    root: SecondaryMap<FuncIndex, FuncIndex>,
    next: SecondaryMap<FuncIndex, FuncIndex>,
    size: SecondaryMap<FuncIndex, u32>,
    found_by: SecondaryMap<FuncIndex, Option<FoundBy>>,
}

impl Classes {
    fn new(module: &Module) -> Self {
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
    fn members(&self, f: FuncIndex) -> impl Iterator<Item = FuncIndex> + '_ {
        let mut at = Some(f);
        std::iter::from_fn(move || {
            let m = at?;
            let next = self.next[m];
            at = (next != f).then_some(next);
            Some(m)
        })
    }

    /// Move every member of `from`'s class into `into`'s class.
    fn union(&mut self, into: FuncIndex, from: FuncIndex, how: FoundBy) {
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

/// What the linkages and options say of each function.
struct Facts {
    /// Calls to it may be redirected (it is not preemptible).
    redirectable: SecondaryMap<FuncIndex, bool>,
    /// Local, and nobody compares its address: if it folds it is erased, and its address
    /// becomes its group's body's. Its address can be encoded by class.
    address_is_class: SecondaryMap<FuncIndex, bool>,
}

impl Facts {
    fn new(module: &Module, options: &MergeOptions) -> Self {
        let mut facts = Facts {
            redirectable: sized(module.len()),
            address_is_class: sized(module.len()),
        };
        for (f, m) in module.iter() {
            facts.redirectable[f] = m.linkage != Linkage::Preemptible;
            facts.address_is_class[f] = options.address_is_class(m);
        }
        facts
    }
}

/// One function's structural hash and references, from one walk. The references are kept
/// in a buffer shared by the functions of a [`Chunk`]; [`Walked::refs`] reads them.
struct Walked {
    hash: u64,
    /// How many instructions the walk reached.
    insts: u32,
    /// Where, in the chunk's buffer, the function's references start, and where its func
    /// refs, global values, calls and addresses end.
    bounds: [u32; 5],
}

/// In a chunk's references: names no module function.
const NO_FUNCTION: u32 = u32::MAX;

/// Buffers reused from one function's walk to the next.
#[derive(Default)]
struct WalkBuffers {
    calls: Vec<u32>,
    addresses: Vec<u32>,
    /// The blocks of the last walk, in walk order.
    blocks: Vec<Block>,
}

impl Walked {
    /// The structural hash ([`crate::detect::function_hash`]) and what
    /// [`Module::references`] finds, in one walk over the reachable blocks; the whole
    /// layout is walked again only when some block is unreachable (its calls count too).
    /// The references are appended to `refs`.
    fn new(module: &Module, f: FuncIndex, buffers: &mut WalkBuffers, refs: &mut Vec<u32>) -> Self {
        let func = &module.get(f).func;
        let lookup = |name| {
            module
                .lookup(&FuncName::of_external(func, name))
                .map_or(NO_FUNCTION, |f| f.as_u32())
        };
        let WalkBuffers {
            calls,
            addresses,
            blocks,
        } = buffers;
        let start = refs.len();
        refs.extend(func.dfg.ext_funcs.values().map(|ext| lookup(&ext.name)));
        let func_refs = &refs[start..];
        calls.clear();
        addresses.clear();
        let visit = |data: &InstructionData, calls: &mut Vec<u32>, addresses: &mut Vec<u32>| {
            let (list, target) = match *data {
                InstructionData::Call { func_ref, .. }
                | InstructionData::TryCall { func_ref, .. } => (calls, func_ref),
                InstructionData::FuncAddr { func_ref, .. } => (addresses, func_ref),
                _ => return,
            };
            match func_refs[target.as_u32() as usize] {
                NO_FUNCTION => {}
                f => list.push(f),
            }
        };
        let mut insts = 0u32;
        let (hash, reached) = hash_visiting(func, blocks, |data| {
            insts += 1;
            visit(data, calls, addresses)
        });
        // Every block of the layout reached, unless fewer blocks were reached than exist
        // and than the layout holds.
        if reached < func.dfg.num_blocks() && reached < func.layout.blocks().count() {
            calls.clear();
            addresses.clear();
            for block in func.layout.blocks() {
                for inst in func.layout.block_insts(block) {
                    visit(&func.dfg.insts[inst], calls, addresses);
                }
            }
        }
        let func_refs_end = refs.len();
        for gv in func.global_values.values() {
            let named = match gv {
                GlobalValueData::Symbol { name, .. } => lookup(name),
                _ => NO_FUNCTION,
            };
            if named != NO_FUNCTION {
                addresses.push(named);
            }
            refs.push(named);
        }
        let symbols_end = refs.len();
        calls.sort_unstable();
        calls.dedup();
        addresses.sort_unstable();
        addresses.dedup();
        refs.extend_from_slice(calls);
        let calls_end = refs.len();
        refs.extend_from_slice(addresses);
        let bounds = [start, func_refs_end, symbols_end, calls_end, refs.len()];
        Self {
            hash,
            insts,
            bounds: bounds.map(|b| b as u32),
        }
    }

    /// Its references, in `refs`, its chunk's buffer.
    #[inline]
    fn refs<'c>(&self, refs: &'c [u32]) -> Refs<'c> {
        let part = |i: usize| &refs[self.bounds[i] as usize..self.bounds[i + 1] as usize];
        Refs {
            func_refs: part(0),
            symbols: part(1),
            calls: part(2),
            addresses: part(3),
        }
    }
}

/// What one function does with the functions of the module (as [`Module::references`]).
#[derive(Clone, Copy)]
struct Refs<'c> {
    /// For each `FuncRef`, the module function it names, or [`NO_FUNCTION`].
    func_refs: &'c [u32],
    /// For each global value, the module function a `symbol` names, or [`NO_FUNCTION`].
    symbols: &'c [u32],
    /// The module functions it calls directly, in index order.
    calls: &'c [u32],
    /// The module functions whose address it takes, in index order.
    addresses: &'c [u32],
}

impl<'c> Refs<'c> {
    fn function(index: Option<&u32>) -> Option<FuncIndex> {
        index
            .filter(|&&f| f != NO_FUNCTION)
            .map(|&f| FuncIndex::from_u32(f))
    }

    /// The module function `callee` names, if any.
    fn func_ref(&self, callee: FuncRef) -> Option<FuncIndex> {
        Self::function(self.func_refs.get(callee.as_u32() as usize))
    }

    /// The module function the `symbol` global value `gv` names, if any.
    fn symbol(&self, gv: GlobalValue) -> Option<FuncIndex> {
        Self::function(self.symbols.get(gv.as_u32() as usize))
    }

    fn calls(&self) -> impl Iterator<Item = FuncIndex> + 'c {
        self.calls.iter().map(|&f| FuncIndex::from_u32(f))
    }

    fn addresses(&self) -> impl Iterator<Item = FuncIndex> + 'c {
        self.addresses.iter().map(|&f| FuncIndex::from_u32(f))
    }

    fn is_called(&self, f: FuncIndex) -> bool {
        self.calls.binary_search(&f.as_u32()).is_ok()
    }
}

/// The call graph the worklist needs, in one array: for each function, the functions that
/// call it, or take its address when that address is its class's.
struct Callers {
    start: Vec<u32>,
    list: Vec<FuncIndex>,
}

impl Callers {
    fn new<'c>(
        module: &Module,
        facts: &Facts,
        refs: impl Iterator<Item = Refs<'c>> + Clone,
    ) -> Self {
        let edges = |r: Refs<'c>| {
            let addresses = r
                .addresses()
                .filter(move |&t| facts.address_is_class[t] && !r.is_called(t));
            r.calls().chain(addresses)
        };
        let mut start = vec![0u32; module.len() + 1];
        for r in refs.clone() {
            for callee in edges(r) {
                start[callee.index() + 1] += 1;
            }
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut list = vec![FuncIndex::from_u32(0); start[module.len()] as usize];
        let mut next = start.clone();
        for (caller, r) in module.indices().zip(refs) {
            for callee in edges(r) {
                list[next[callee.index()] as usize] = caller;
                next[callee.index()] += 1;
            }
        }
        Self { start, list }
    }

    fn of(&self, f: FuncIndex) -> &[FuncIndex] {
        &self.list[self.start[f.index()] as usize..self.start[f.index() + 1] as usize]
    }
}

/// The shape's policy: every redirectable callee, and every address that is its class's,
/// is a placeholder, recorded in order.
struct Placeholder<'d> {
    facts: &'d Facts,
    refs: Refs<'d>,
    recorded: &'d RefCell<Vec<FuncIndex>>,
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

    fn func_ref(&self, callee: FuncRef) -> Option<FuncIndex> {
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
    shards: Vec<Padded<Mutex<Shard>>>,
}

#[derive(Default)]
struct Shard {
    /// Hash → the last shape added with that hash; the others follow through `next`.
    by_hash: HashMap<u64, u32, StableState>,
    shapes: Vec<InternedShape>,
}

struct InternedShape {
    tokens: Box<[Token]>,
    /// The first function with this shape so far.
    first: FuncIndex,
    /// How many functions have it.
    uses: u32,
    /// The next shape with the same hash, if any.
    next: Option<u32>,
}

/// Where a [`ShapeTable`] keeps a shape: (shard, index in the shard).
type ShapeAt = (u32, u32);

impl ShapeTable {
    const SHARDS: usize = 64;

    fn new() -> Self {
        Self {
            shards: (0..Self::SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    /// Record that `f` has the shape `tokens`, hashed to `hash`.
    fn intern(&self, hash: u64, tokens: &[Token], f: FuncIndex) -> ShapeAt {
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
            tokens: tokens.into(),
            first: f,
            uses: 1,
            next,
        });
        (shard_index as u32, i)
    }

    /// The shape kept at `at`: its number (its first function) and how many functions
    /// have it.
    fn get(&mut self, (shard, i): ShapeAt) -> (FuncIndex, u32) {
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
    shards: Vec<Padded<Mutex<HashMap<u64, u32, StableState>>>>,
}

impl HashCounts {
    const SHARDS: usize = 64;

    fn new() -> Self {
        Self {
            shards: (0..Self::SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    /// Count one more function with `hash`; `true` if it is not the first.
    fn add(&self, hash: u64) -> bool {
        let mut shard = lock(&self.shards[(hash >> 58) as usize % Self::SHARDS].0);
        let count = shard.entry(hash).or_default();
        *count += 1;
        *count > 1
    }

    /// Whether more than one function has `hash` (one has).
    fn shared(&self, hash: u64) -> bool {
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
    walk: WalkBuffers,
    tokens: Vec<Token>,
    recorded: RefCell<Vec<FuncIndex>>,
}

/// Functions per task of the first pass. A task keeps what it learns of its functions in a
/// few buffers of its own (a [`Chunk`]) rather than in a few allocations per function.
const CHUNK: usize = 64;

/// What the first pass learns of the walks of a run of consecutive functions.
struct ChunkWalks {
    /// Per function, its walk.
    walked: Vec<Walked>,
    /// The functions' references ([`Walked::refs`]).
    refs: Vec<u32>,
}

/// What the first pass learns of the shapes of a run of consecutive functions.
struct ChunkShapes {
    /// Per function, what became of its shape.
    shapes: Vec<FirstPass>,
    /// The placeholders' callees of the encoded functions.
    callees: Vec<FuncIndex>,
    /// The encodings kept but not interned.
    tokens: Vec<Token>,
}

/// What became of a function's shape. Ranges are in its chunk's buffers.
enum FirstPass {
    /// Not encoded (its hash was new, and it is not small; or nobody shares its hash).
    No,
    /// Encoded and interned: where the table keeps the shape, and the placeholders'
    /// callees.
    Interned(ShapeAt, Range<u32>),
    /// Encoded but not interned, because nobody else had its hash yet: a small function,
    /// encoded while it was in the cache in case another function turns out to share its
    /// hash (most small functions do). Its encoding, that encoding's hash, its callees.
    Kept(Range<u32>, u64, Range<u32>),
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
    hash_tokens(walked.hash, tokens)
}

/// Lists of functions, one per function, in one array.
struct Lists {
    start: Vec<u32>,
    items: Vec<FuncIndex>,
}

impl Lists {
    fn of(&self, f: FuncIndex) -> &[FuncIndex] {
        &self.items[self.start[f.index()] as usize..self.start[f.index() + 1] as usize]
    }
}

/// The shapes of the functions whose hash is shared.
struct Shapes {
    /// Each candidate's shape: the index of the first function with that shape.
    shape: SecondaryMap<FuncIndex, u32>,
    /// Each function's placeholders' callees, in order.
    callees: Lists,
    /// The functions whose shape another function has, in index order.
    shared: Vec<FuncIndex>,
    /// Shape numbers are below this.
    count: usize,
}

/// Find every group of equal functions. Each group is returned with its members in index
/// order; groups are in order of their first member.
pub(crate) fn find_groups(module: &Module, target: &TargetInfo, options: &MergeOptions) -> Found {
    let facts = Facts::new(module, options);
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
                refs: Vec::with_capacity(n * 8),
            };
            let mut chunk = ChunkShapes {
                shapes: Vec::with_capacity(n),
                callees: Vec::with_capacity(n * 2),
                tokens: Vec::new(),
            };
            for &f in functions {
                let walked = Walked::new(module, f, &mut buffers.walk, &mut walks.refs);
                let shared = hashes.add(walked.hash);
                let shape = if shared || walked.insts as usize <= ENCODE_EARLY {
                    let refs = walked.refs(&walks.refs);
                    let hash =
                        encode_shape(module, target, &facts, f, &walked, refs, true, buffers);
                    let callees = append(&mut chunk.callees, buffers.recorded.get_mut());
                    match shared {
                        true => {
                            FirstPass::Interned(table.intern(hash, &buffers.tokens, f), callees)
                        }
                        false => FirstPass::Kept(
                            append(&mut chunk.tokens, &buffers.tokens),
                            hash,
                            callees,
                        ),
                    }
                } else {
                    FirstPass::No
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
                        *shape = match std::mem::replace(shape, FirstPass::No) {
                            FirstPass::Interned(at, list) => FirstPass::Interned(at, list),
                            _ if !hashes.shared(walked.hash) => FirstPass::No,
                            FirstPass::Kept(encoding, hash, list) => {
                                let encoding =
                                    &tokens[encoding.start as usize..encoding.end as usize];
                                FirstPass::Interned(table.intern(hash, encoding, f), list)
                            }
                            FirstPass::No => {
                                let refs = walked.refs(&walks.refs);
                                let hash = encode_shape(
                                    module, target, &facts, f, walked, refs, false, buffers,
                                );
                                let list = append(callees, buffers.recorded.get_mut());
                                FirstPass::Interned(table.intern(hash, &buffers.tokens, f), list)
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
            let callers = Callers::new(module, &facts, all_refs());
            let mut address_used: SecondaryMap<FuncIndex, bool> = sized(module.len());
            for refs in all_refs() {
                for target in refs.addresses() {
                    address_used[target] = true;
                }
            }
            (callers, address_used)
        },
    );
    drop(walks);

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
        if let FirstPass::Interned(at, callees) = shape {
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
    drop(table);
    drop(chunks);

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
    Found {
        groups,
        address_used,
    }
}

/// The groups of equal functions, and what the policy needs from the call graph.
pub(crate) struct Found {
    /// Each group with its members in index order, in order of their first member.
    pub groups: Vec<(Vec<FuncIndex>, FoundBy)>,
    /// Functions whose address some function takes.
    pub address_used: SecondaryMap<FuncIndex, bool>,
}

/// Phase 1: LLVM's worklist and table of unique functions.
fn fold_in_tree(facts: &Facts, callers: &Callers, shapes: &Shapes, classes: &mut Classes) {
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
struct Table<'s> {
    shapes: &'s Shapes,
    /// Key hash → the last function added with it; the others follow through `next`.
    by_hash: HashMap<u64, FuncIndex, StableState>,
    next: SecondaryMap<FuncIndex, Option<FuncIndex>>,
    /// For each function in the table, its key's hash; `None` for the others.
    hash: SecondaryMap<FuncIndex, Option<u64>>,
    key: Vec<u32>,
    other: Vec<u32>,
}

impl<'s> Table<'s> {
    fn new(shapes: &'s Shapes, capacity: usize) -> Self {
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
    fn write_key(shapes: &Shapes, f: FuncIndex, classes: &Classes, key: &mut Vec<u32>) {
        let own = classes.root[f];
        key.clear();
        key.push(shapes.shape[f]);
        key.extend(shapes.callees.of(f).iter().map(|&c| match classes.root[c] {
            class if class == own => 0,
            class => class.as_u32() + 1,
        }));
    }

    fn key_hash(key: &[u32]) -> u64 {
        let mut h = StableHasher::new();
        for &k in key {
            h.word(k.into());
        }
        h.finish()
    }

    fn contains(&self, f: FuncIndex) -> bool {
        self.hash[f].is_some()
    }

    /// The function in the table whose key is `f`'s, or the hash of `f`'s key to insert it
    /// under.
    fn find(&mut self, f: FuncIndex, classes: &Classes) -> Result<FuncIndex, u64> {
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
    fn insert(&mut self, f: FuncIndex, hash: u64) {
        self.next[f] = self.by_hash.insert(hash, f);
        self.hash[f] = Some(hash);
    }

    /// Take `f` out.
    fn remove(&mut self, f: FuncIndex) {
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

/// Phase 2: optimistic partition refinement over the classes left after phase 1.
fn refine_cycles(shapes: &Shapes, classes: &mut Classes) {
    // Optimistic start: the class roots grouped by shape (members in index order).
    const NONE: u32 = u32::MAX;
    let mut group_of_shape = vec![NONE; shapes.count];
    let mut groups: Vec<Vec<FuncIndex>> = Vec::new();
    for &f in &shapes.shared {
        if classes.root[f] != f {
            continue;
        }
        let slot = &mut group_of_shape[shapes.shape[f] as usize];
        if *slot == NONE {
            *slot = groups.len() as u32;
            groups.push(Vec::new());
        }
        groups[*slot as usize].push(f);
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
