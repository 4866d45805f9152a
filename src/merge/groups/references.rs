//! What each function does with the module's other functions, from the same walk that
//! computes its structural hash: the functions it calls and whose addresses it takes (what
//! [`crate::merge::Module::references`] finds, gathered while the function is in the
//! cache), what the linkages and options say of each function, and the call graph the
//! worklist revisits callers by.

use cranelift_codegen::ir::{Block, FuncRef, GlobalValue, GlobalValueData, InstructionData};
use cranelift_entity::packed_option::PackedOption;
use cranelift_entity::{EntityRef, SecondaryMap};

use super::sized;
use crate::detect::hash::hash_visiting;
use crate::merge::module::{FuncIndex, Linkage, Module};
use crate::merge::MergeOptions;
use crate::names::FuncName;
use crate::target::TargetInfo;

/// What the linkages and options say of each function.
#[derive(Clone)]
pub(super) struct Facts {
    /// Calls to it may be redirected (it is not preemptible).
    pub(super) redirectable: SecondaryMap<FuncIndex, bool>,
    /// Should it fold, its address is its group's body's
    /// ([`MergeOptions::address_is_class`]): its address can be encoded by class.
    pub(super) address_is_class: SecondaryMap<FuncIndex, bool>,
}

impl Facts {
    pub(super) fn new(module: &Module, target: &TargetInfo, options: &MergeOptions) -> Self {
        let mut facts = Facts {
            redirectable: sized(module.len()),
            address_is_class: sized(module.len()),
        };
        for (f, m) in module.iter() {
            facts.redirectable[f] = m.linkage != Linkage::Preemptible;
            facts.address_is_class[f] = options.address_is_class(m, target);
        }
        facts
    }
}

/// One function's structural hash and references, from one walk. The references are kept
/// in buffers shared by the functions of a chunk of the first pass ([`ChunkRefs`]);
/// [`Walked::refs`] reads them.
pub(super) struct Walked {
    pub(super) hash: u64,
    /// How many instructions the walk reached.
    pub(super) insts: u32,
    /// Where, in the chunk's [`ChunkRefs::named`], the function's entries start, and where
    /// those of its func refs and of its global values end.
    named: [u32; 3],
    /// Where, in the chunk's [`ChunkRefs::functions`], the function's entries start, and
    /// where its calls and its addresses end.
    functions: [u32; 3],
}

/// The references of a run of functions, in two buffers rather than a few allocations per
/// function.
#[derive(Default)]
pub(super) struct ChunkRefs {
    /// Per function, for each `FuncRef` and then each global value, the module function it
    /// names, if any.
    named: Vec<PackedOption<FuncIndex>>,
    /// Per function, the module functions it calls and then those whose address it takes.
    functions: Vec<FuncIndex>,
}

impl ChunkRefs {
    /// Buffers sized for about `n` functions.
    pub(super) fn with_capacity(n: usize) -> Self {
        Self {
            named: Vec::with_capacity(n * 6),
            functions: Vec::with_capacity(n * 2),
        }
    }
}

/// Buffers reused from one function's walk to the next.
#[derive(Default)]
pub(super) struct WalkBuffers {
    pub(super) calls: Vec<FuncIndex>,
    pub(super) addresses: Vec<FuncIndex>,
    /// The blocks of the last walk, in walk order.
    pub(super) blocks: Vec<Block>,
}

/// What a merge-similar thunk's hash is mixed with, and the token that ends its shape
/// ([`crate::merge::ModuleFunction::similar_thunk`]): emission writes it as a jump, the
/// same CLIF of the user's as a call, so no function of one kind is equal to one of the
/// other. (The token follows the encoder's trailer, where no encoding has another token.)
pub(super) const SIMILAR_THUNK_TOKEN: u64 = 0x5EA7_7B0D_1E57_A6E5;

impl Walked {
    /// The structural hash ([`crate::detect::function_hash`]) and what
    /// [`Module::references`] finds, in one walk over the reachable blocks; the whole
    /// layout is walked again only when some block is unreachable (its calls count too).
    /// The references are appended to `refs`.
    pub(super) fn new(
        module: &Module,
        f: FuncIndex,
        buffers: &mut WalkBuffers,
        refs: &mut ChunkRefs,
    ) -> Self {
        let func = &module.get(f).func;
        let lookup = |name| PackedOption::from(module.lookup(&FuncName::of_external(func, name)));
        let WalkBuffers {
            calls,
            addresses,
            blocks,
        } = buffers;
        let named_start = refs.named.len();
        refs.named
            .extend(func.dfg.ext_funcs.values().map(|ext| lookup(&ext.name)));
        let func_refs = &refs.named[named_start..];
        calls.clear();
        addresses.clear();
        let visit =
            |data: &InstructionData, calls: &mut Vec<FuncIndex>, addresses: &mut Vec<FuncIndex>| {
                let (list, target) = match *data {
                    InstructionData::Call { func_ref, .. }
                    | InstructionData::TryCall { func_ref, .. } => (calls, func_ref),
                    InstructionData::FuncAddr { func_ref, .. } => (addresses, func_ref),
                    _ => return,
                };
                list.extend(func_refs[target.as_u32() as usize].expand());
            };
        let mut insts = 0u32;
        let (hash, reached) = hash_visiting(func, blocks, |data| {
            insts += 1;
            visit(data, calls, addresses)
        });
        // Merge-similar's thunk compiles to a jump where the same CLIF written by the user
        // compiles to a call: they are never equal ([`SIMILAR_THUNK_TOKEN`]).
        let hash = match module.get(f).similar_thunk {
            true => hash ^ SIMILAR_THUNK_TOKEN,
            false => hash,
        };
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
        let func_refs_end = refs.named.len();
        for gv in func.global_values.values() {
            let named = match gv {
                GlobalValueData::Symbol { name, .. } => lookup(name),
                _ => PackedOption::default(),
            };
            addresses.extend(named.expand());
            refs.named.push(named);
        }
        let named = [named_start, func_refs_end, refs.named.len()];
        calls.sort_unstable();
        calls.dedup();
        addresses.sort_unstable();
        addresses.dedup();
        let functions_start = refs.functions.len();
        refs.functions.extend_from_slice(calls);
        let calls_end = refs.functions.len();
        refs.functions.extend_from_slice(addresses);
        let functions = [functions_start, calls_end, refs.functions.len()];
        Self {
            hash,
            insts,
            named: named.map(|b| b as u32),
            functions: functions.map(|b| b as u32),
        }
    }

    /// The same walk with its references copied from `from`, its chunk's buffers in an
    /// earlier pass ([`super::memory`]), to `into`: taken again without walking.
    pub(super) fn replay(&self, from: &ChunkRefs, into: &mut ChunkRefs) -> Walked {
        let named_start = into.named.len() as u32;
        into.named
            .extend_from_slice(&from.named[self.named[0] as usize..self.named[2] as usize]);
        let functions_start = into.functions.len() as u32;
        into.functions.extend_from_slice(
            &from.functions[self.functions[0] as usize..self.functions[2] as usize],
        );
        let moved = |bounds: [u32; 3], start: u32| bounds.map(|b| b - bounds[0] + start);
        Walked {
            hash: self.hash,
            insts: self.insts,
            named: moved(self.named, named_start),
            functions: moved(self.functions, functions_start),
        }
    }

    /// Its references, in `refs`, its chunk's buffers.
    #[inline]
    pub(super) fn refs<'c>(&self, refs: &'c ChunkRefs) -> Refs<'c> {
        let range = |bounds: &[u32; 3], i: usize| bounds[i] as usize..bounds[i + 1] as usize;
        Refs {
            func_refs: &refs.named[range(&self.named, 0)],
            symbols: &refs.named[range(&self.named, 1)],
            calls: &refs.functions[range(&self.functions, 0)],
            addresses: &refs.functions[range(&self.functions, 1)],
        }
    }
}

/// What one function does with the functions of the module (as [`Module::references`]).
#[derive(Clone, Copy)]
pub(super) struct Refs<'c> {
    /// For each `FuncRef`, the module function it names, if any.
    func_refs: &'c [PackedOption<FuncIndex>],
    /// For each global value, the module function a `symbol` names, if any.
    symbols: &'c [PackedOption<FuncIndex>],
    /// The module functions it calls directly, in index order.
    calls: &'c [FuncIndex],
    /// The module functions whose address it takes, in index order.
    addresses: &'c [FuncIndex],
}

impl<'c> Refs<'c> {
    /// The module function `callee` names, if any.
    pub(super) fn func_ref(&self, callee: FuncRef) -> Option<FuncIndex> {
        self.func_refs.get(callee.index())?.expand()
    }

    /// The module function the `symbol` global value `gv` names, if any.
    pub(super) fn symbol(&self, gv: GlobalValue) -> Option<FuncIndex> {
        self.symbols.get(gv.index())?.expand()
    }

    /// Every module function its `FuncRef`s and `symbol` global values name.
    pub(super) fn named(&self) -> impl Iterator<Item = FuncIndex> + 'c {
        (self.func_refs.iter())
            .chain(self.symbols)
            .filter_map(|n| n.expand())
    }

    pub(super) fn calls(&self) -> impl Iterator<Item = FuncIndex> + 'c {
        self.calls.iter().copied()
    }

    pub(super) fn addresses(&self) -> impl Iterator<Item = FuncIndex> + 'c {
        self.addresses.iter().copied()
    }

    pub(super) fn is_called(&self, f: FuncIndex) -> bool {
        self.calls.binary_search(&f).is_ok()
    }
}

/// The call graph the worklist needs, in one array: for each function, the functions that
/// call it, or take its address when that address is its class's.
pub(super) struct Callers {
    pub(super) start: Vec<u32>,
    pub(super) list: Vec<FuncIndex>,
}

impl Callers {
    pub(super) fn new<'c>(
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

    pub(super) fn of(&self, f: FuncIndex) -> &[FuncIndex] {
        &self.list[self.start[f.index()] as usize..self.start[f.index() + 1] as usize]
    }
}
