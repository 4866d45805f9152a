//! Compiling once what compiles alike: functions whose stencils are equal.
//!
//! Cranelift splits a function into its *stencil* (`ir::FunctionStencil`: signature, stack
//! slots, global values, the data-flow graph, the layout, source locations relative to a
//! base) and its *parameters* (`ir::FunctionParameters`: the names its external functions
//! and symbols stand for, and the base source location). Code generation reads the stencil
//! only: a relocation names a callee by its index in the parameters' table, and the base
//! source location is added to the code's locations after compiling
//! (`CompiledCodeStencil::apply_params`). That split is what Cranelift's incremental cache
//! stands on (`Context::compile_with_cache`: equal stencils for one ISA reuse one
//! compilation), and it is used here within one run: of the bodies a plan keeps, those
//! whose stencils (and base source locations) are equal compile once, and each takes the
//! code with its own relocation targets.
//!
//! Such functions are common after merging: a function and its twin that calls the
//! twin of its callee are not equal for the merger (they call different functions) but
//! compile to the same instructions. Machine-code folding ([`super::fold`]) folds some of
//! them afterwards; every other one still cost a compilation, which is what this saves.
//! The output is the same bytes as compiling each on its own: equality is checked on the
//! whole stencil (`FunctionStencil: PartialEq`), never on the key alone (a hash of the
//! parts that tell stencils apart soonest, half the time of hashing all of it), and each
//! body's relocations are read through its own parameters.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use cranelift_codegen::ir;

/// A hash of what tells stencils apart soonest: the signature, the base source location,
/// how many blocks and values there are, and every instruction in layout order. Bodies with
/// equal stencils have equal keys; bodies with equal keys are compared whole
/// ([`compile_alike`]).
pub fn key(func: &ir::Function) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    func.signature.hash(&mut hasher);
    func.params.base_srcloc().hash(&mut hasher);
    func.dfg.num_blocks().hash(&mut hasher);
    func.dfg.num_values().hash(&mut hasher);
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            func.dfg.insts[inst].hash(&mut hasher, &func.dfg.value_lists);
        }
    }
    hasher.finish()
}

/// Whether `a` and `b` compile to the same code but for the names their relocations
/// stand for: the same stencil and base source location.
pub fn compile_alike(a: &ir::Function, b: &ir::Function) -> bool {
    a.params.base_srcloc() == b.params.base_srcloc() && a.stencil == b.stencil
}

/// For each function of `functions` (with its [`key`], `None` for one that is not compiled
/// by Cranelift), the index of the first earlier function that compiles alike, whose code
/// it takes; `None` for a function compiled on its own. The first in the list is always the
/// one compiled, so the choice does not depend on threads.
pub fn sources<'a>(
    functions: impl IntoIterator<Item = (&'a ir::Function, Option<u64>)>,
) -> Vec<Option<usize>> {
    let mut compiled: HashMap<u64, Vec<(usize, &ir::Function)>> = HashMap::new();
    let mut sources = Vec::new();
    for (i, (func, key)) in functions.into_iter().enumerate() {
        let Some(key) = key else {
            sources.push(None);
            continue;
        };
        let same = compiled.entry(key).or_default();
        match same.iter().find(|(_, other)| compile_alike(other, func)) {
            Some(&(first, _)) => sources.push(Some(first)),
            None => {
                same.push((i, func));
                sources.push(None);
            }
        }
    }
    sources
}
