//! The first pass remembered: what the identical merger learned of each function (its
//! structural hash, its references, its shape), kept for a later run over a module that
//! differs from this one in a few functions, which then takes it again instead of walking
//! and encoding those functions anew.
//!
//! Merge-similar needs the classes of equal functions of the module as read, and the plan
//! needs those of the module it rewrote; the rewrite keeps every function at its index,
//! replaces some bodies (its members become thunks, or take a body whose memory flags
//! meet another's) and appends shared bodies under fresh names, which no function refers
//! to. Without this memory the identical merger walked and encoded every function twice.
//!
//! **Why it holds.** A function's walk (hash and references) is a pure function of its
//! body, the target and the index each name it refers to resolves to; its shape, of the
//! same and of the [`Facts`] of each function it names (whether calls to it may be
//! redirected, whether its address is its class's): the encoder's placeholders are chosen
//! by those facts alone. So what was learned of a function holds for the later module
//! when its body is the same there and every function it names kept its facts; the
//! caller says which bodies changed, and the facts are compared here, named function by
//! named function. Anything else is walked and encoded again. As a guard against a module
//! that is not the one rewritten (a caller's mistake), a body must also be the very
//! allocation the first pass read: the rewrite moves bodies as boxes and replaces them
//! whole, keeping the old ones alive, so an unchanged body keeps its address.

use std::sync::Arc;

use cranelift_entity::EntityRef;

use super::references::{ChunkRefs, Facts, Walked};
use super::shapes::{ChunkShapes, ChunkWalks, EarlyShape, Shard, CHUNK};
use crate::detect::encode::Token;
use crate::merge::module::{FuncIndex, Module};

/// What the first pass learned of a module's functions, as it kept it (in runs of
/// [`CHUNK`] consecutive functions, and its table of shapes), and the facts it learned
/// them with.
pub(crate) struct FirstPassMemory {
    pub(super) facts: Facts,
    /// The address of each function's body as the pass read it.
    pub(super) bodies: Vec<usize>,
    pub(super) walks: Vec<ChunkWalks>,
    pub(super) shapes: Vec<ChunkShapes>,
    /// The table of shapes, its shards unlocked.
    pub(super) table: Vec<Shard>,
}

/// What the first pass learned of one function.
pub(super) struct Learned<'m> {
    pub(super) walked: &'m Walked,
    /// The buffers of its chunk, where its references are.
    pub(super) refs: &'m ChunkRefs,
    /// Its shape, if it was encoded (its hash was shared).
    pub(super) shape: Option<LearnedShape<'m>>,
}

/// A function's shape as the first pass interned it.
pub(super) struct LearnedShape<'m> {
    /// The hash of the encoding (the table's key).
    pub(super) hash: u64,
    /// The encoding, shared with every function of that shape.
    pub(super) tokens: &'m Arc<[Token]>,
    /// The placeholders' callees, in order.
    pub(super) callees: &'m [FuncIndex],
}

/// A memory and what changed since: the later run's view of it.
#[derive(Clone, Copy)]
pub(crate) struct Prior<'m> {
    pub(crate) memory: &'m FirstPassMemory,
    /// Whether a function of the earlier module has the same body in the later one.
    pub(crate) unchanged: &'m (dyn Fn(FuncIndex) -> bool + Sync),
}

impl<'m> Prior<'m> {
    /// What was learned of `f`, if it holds in the later `module`, whose facts are `facts`.
    pub(super) fn learned(
        self,
        f: FuncIndex,
        module: &Module,
        facts: &Facts,
    ) -> Option<Learned<'m>> {
        let memory = self.memory;
        if memory.bodies.get(f.index()) != Some(&body_address(module, f)) {
            return None;
        }
        let (chunk, i) = (f.index() / CHUNK, f.index() % CHUNK);
        let walks = memory.walks.get(chunk)?;
        let walked = walks.walked.get(i)?;
        let then = &memory.facts;
        let same_facts = |g: FuncIndex| {
            then.redirectable[g] == facts.redirectable[g]
                && then.address_is_class[g] == facts.address_is_class[g]
        };
        if !(self.unchanged)(f) || !walked.refs(&walks.refs).named().all(same_facts) {
            return None;
        }
        let shapes = &memory.shapes[chunk];
        let shape = match &shapes.shapes[i] {
            EarlyShape::Interned((shard, at), callees) => {
                let interned = &memory.table[*shard as usize].shapes[*at as usize];
                let callees = &shapes.callees[callees.start as usize..callees.end as usize];
                Some(LearnedShape {
                    hash: interned.hash,
                    tokens: &interned.tokens,
                    callees,
                })
            }
            EarlyShape::No => None,
            EarlyShape::Kept(..) | EarlyShape::Remembered(..) => {
                unreachable!("the first pass interned every shape it kept")
            }
        };
        Some(Learned {
            walked,
            refs: &walks.refs,
            shape,
        })
    }
}

/// Where `f`'s body is: the same address for the same boxed body.
pub(super) fn body_address(module: &Module, f: FuncIndex) -> usize {
    std::ptr::from_ref::<cranelift_codegen::ir::Function>(&module.get(f).func) as usize
}
