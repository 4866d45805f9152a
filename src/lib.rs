//! clif-merge: LLVM's MergeFunctions pass for Cranelift IR.
//!
//! Compilers emit many functions that do exactly the same thing: generic instantiations,
//! generated trampolines, code written twice. clif-merge finds them in a module of
//! Cranelift IR functions, keeps one body per group, and makes every other name still work
//! as an alias, a thunk, or (for local functions nobody can observe) nothing at all.
//!
//! The stages, each fed only by the one before ([`pipeline::run`] runs them all; see
//! `ARCHITECTURE.md`), with the [`MergePlan`] as the seam between analysis and mechanics:
//! - [`read`]: CLIF text in, verified functions with their places out;
//! - [`detect`](mod@detect): a total order over functions ([`FunctionComparator`]) and a
//!   structural hash consistent with it;
//! - [`merge`](mod@merge): the worklist and tree of unique functions, callers revisited
//!   until nothing changes, then class refinement over the call graph for recursive cycles;
//!   and merge-similar;
//! - [`emit`]: the kept functions compiled by cranelift-codegen, bodies that compiled to the
//!   same machine code folded, and everything defined in a sink (cranelift-object,
//!   cranelift-jit, or a compiler's own module), with aliases and thunks.
//!
//! ```
//! use clif_merge::{Module, MergeOptions, TargetInfo, read::parse_clif};
//! let clif = "
//! function %a(i32) -> i32 system_v {
//! block0(v0: i32):
//!     v1 = iconst.i32 1
//!     v2 = iadd v0, v1
//!     return v2
//! }
//! function %b(i32) -> i32 system_v {
//! block0(v7: i32):
//!     v8 = iconst.i32 1
//!     v9 = iadd v7, v8
//!     return v9
//! }
//! ";
//! let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
//! let functions = parse_clif(clif, "example.clif").unwrap();
//! let module = Module::from_functions(functions.into_iter().map(|f| f.func)).unwrap();
//! let plan = clif_merge::merge(&module, &target, &MergeOptions::default());
//! assert_eq!(plan.folded_count(), 1);
//! ```

pub mod detect;
pub mod emit;
pub mod estimate;
mod guard;
pub mod merge;
pub mod merging_module;
pub mod names;
pub mod pipeline;
pub mod plugin;
pub mod read;
pub mod report;
pub mod target;

pub use detect::{function_hash, FunctionComparator};
pub use emit::{build_isa, EmitError, EmitOptions, EmitSummary};
pub use merge::{merge, Action, FuncIndex, Linkage, MergeMode, MergeOptions, MergePlan, Module};
pub use merging_module::MergingModule;
pub use names::FuncName;
pub use pipeline::{emit_jit, emit_object, PipelineOptions};
pub use read::ReadError;
pub use target::TargetInfo;

/// Errors that do not belong to one layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The target triple is unknown or has no pointer width.
    #[error("unknown target {0}")]
    UnknownTarget(String),
}

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
