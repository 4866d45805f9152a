//! Where the pipeline's code goes: the one thing the command line, the object and JIT
//! paths and the plugin do differently.
//!
//! [`crate::pipeline`] runs the same stages for all of them (merge-similar, the merge plan,
//! compiling, machine-code folding, defining); a [`Sink`] supplies the
//! `cranelift_module::Module` the plan is defined in, says how aliases and names are
//! realised there, and turns what was defined into its output: object bytes
//! ([`super::object::ObjectSink`]), a finalized JIT ([`super::jit::JitSink`]), or the
//! plugin's `Merged` for the compiler to finish itself.

use super::compile::Compiled;
use super::define::{AliasStyle, Defined, Naming};
use super::{EmitError, EmitSummary};
use crate::merge::similar::SimilarReport;
use crate::merge::{MergePlan, Module};

/// A destination for the pipeline's code.
pub trait Sink {
    /// The module bodies, thunks and aliases are defined in.
    type Module: cranelift_module::Module;
    /// What the sink gives back once everything is defined.
    type Output;
    /// Its errors (every stage's [`EmitError`] converts into them).
    type Error: From<EmitError>;

    /// The module (its ISA compiles the bodies).
    fn module(&self) -> &Self::Module;

    /// The module, to define in.
    fn module_mut(&mut self) -> &mut Self::Module;

    /// How aliases are realised in the module.
    fn alias_style(&self) -> AliasStyle;

    /// Whether the pipeline declares the module's names or they are declared already.
    fn naming(&self) -> Naming;

    /// Merge-similar appended the shared bodies of `similar`'s groups at the end of
    /// `module`, one a group: give them whatever names the sink's module needs (the plugin
    /// declares them as local functions and renames them to their ids). By default they
    /// keep their names.
    fn shared_bodies(
        &mut self,
        module: Module,
        similar: &SimilarReport,
    ) -> Result<Module, Self::Error> {
        let _ = similar;
        Ok(module)
    }

    /// Run `work` (analysis, compiling) where the sink wants its threads used; by default
    /// on the current rayon pool.
    fn on_pool<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        work()
    }

    /// Everything is defined: produce the output (finish an object, finalize a JIT), and
    /// record what only the output knows in `summary` (`text_bytes`).
    fn finish(
        self,
        emitted: Emitted<'_>,
        summary: &mut EmitSummary,
    ) -> Result<Self::Output, Self::Error>;
}

/// What the stages before [`Sink::finish`] produced.
pub struct Emitted<'m> {
    /// The module the plan is about (after merge-similar).
    pub module: &'m Module,
    /// The final plan: the merge plan plus machine-code folding.
    pub plan: MergePlan,
    /// The compiled bodies.
    pub compiled: Compiled,
    /// What was declared and defined in the sink's module (its `summary` is the pipeline's).
    pub defined: Defined,
}
