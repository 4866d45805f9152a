//! [`MergingModule`]: MergeFunctions as a drop-in `cranelift_module::Module`.
//!
//! A compiler written against the `Module` trait wraps its module and changes nothing
//! else: `declare_*` pass through to the inner module; `define_function` checks the
//! function at once (a verifier error comes back there, naming the function as declared,
//! and the context stays reusable) and records it instead of compiling it; data and
//! `define_function_bytes` pass through. Finishing merges the recorded functions, compiles
//! the bodies it keeps in parallel (on the caller's thread pool, if given) and defines every
//! declared id in the inner module, so no step can be forgotten:
//!
//! - [`MergingModule::finish`] on an `ObjectModule` returns the `ObjectProduct` with every
//!   alias already pointed at its body;
//! - [`MergingModule::finalize_definitions`] on a `JITModule` defines and finalizes, after
//!   which every declared id resolves with `get_finalized_function` and the merged code's
//!   unwind frames are registered ([`FinalizedJit::frames`]);
//! - [`MergingModule::define_all`] does it for any other `M: Module` (folded ids that would
//!   be aliases are single-jump thunks there: every id is defined).
//!
//! The result ([`Merged`]) reports what became of each id by the compiler's own
//! [`FuncId`]s. Merge-similar's shared bodies are declared anonymous: they add no name to
//! the compiler's namespace.

use std::sync::Arc;

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir;
use cranelift_codegen::isa::{TargetFrontendConfig, TargetIsa};
use cranelift_codegen::Context;
use cranelift_jit::JITModule;
use cranelift_module::{
    DataDescription, DataId, FuncId, Linkage, Module, ModuleDeclarations, ModuleError, ModuleReloc,
    ModuleResult,
};
use cranelift_object::{ObjectModule, ObjectProduct};

use crate::emit::define::AliasStyle;
use crate::emit::unwind::JitFrames;
use crate::merge::similar::SimilarOptions;
use crate::merge::MergeOptions;
use crate::plugin::{FunctionMerger, Merged, PluginError};

/// A `cranelift_module::Module` that merges equal (and, if asked, similar) functions of
/// the module it wraps. See the [module docs](self).
pub struct MergingModule<M: Module> {
    inner: M,
    merger: FunctionMerger,
}

impl<M: Module> MergingModule<M> {
    /// Wrap `inner`; functions defined through the wrapper are merged with `options`.
    pub fn new(inner: M, options: MergeOptions) -> Result<Self, PluginError> {
        let merger = FunctionMerger::new(inner.isa(), options)?;
        Ok(Self { inner, merger })
    }

    /// Also share bodies between functions that differ only in constants, offsets and
    /// callees ([`crate::merge::similar`]).
    pub fn with_merge_similar(mut self, options: SimilarOptions) -> Self {
        self.merger = self.merger.with_merge_similar(options);
        self
    }

    /// Merge and compile on `pool` (by default, rayon's global pool).
    pub fn with_thread_pool(mut self, pool: Arc<rayon::ThreadPool>) -> Self {
        self.merger = self.merger.with_thread_pool(pool);
        self
    }

    /// Merge and compile on a pool of its own with `threads` threads.
    pub fn with_threads(self, threads: usize) -> Result<Self, PluginError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build()
            .map_err(|e| PluginError::ThreadPool(e.to_string()))?;
        Ok(self.with_thread_pool(Arc::new(pool)))
    }

    /// Promise that nobody compares the address of `id` (LLVM's `unnamed_addr`).
    pub fn set_unnamed_addr(&mut self, id: FuncId) {
        self.merger.set_unnamed_addr(id);
    }

    /// The wrapped module (functions defined through the wrapper are not in it yet).
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Merge, compile and define every recorded function in the inner module, and return
    /// it. Folded ids that would be aliases become single-jump thunks: every declared id is
    /// defined, whatever the module can do with symbols.
    pub fn define_all(self) -> Result<(M, Merged), PluginError> {
        self.define(AliasStyle::Thunk)
    }

    fn define(mut self, style: AliasStyle) -> Result<(M, Merged), PluginError> {
        let merged = self.merger.define_in(&mut self.inner, style)?;
        Ok((self.inner, merged))
    }
}

impl MergingModule<ObjectModule> {
    /// Merge, compile, define, and finish the object: the product's aliases already point
    /// at their bodies.
    pub fn finish(self) -> Result<(ObjectProduct, Merged), PluginError> {
        let (inner, merged) = self.define(AliasStyle::PatchedSymbol)?;
        let mut product = inner.finish();
        merged.finish_object(&mut product)?;
        Ok((product, merged))
    }
}

/// A finalized JIT: the module, what the merger did, and the registered unwind frames.
pub struct FinalizedJit {
    /// The module: every declared id resolves with `get_finalized_function`.
    pub module: JITModule,
    /// What became of each id.
    pub merged: Merged,
    /// The frames of the merged code, registered with this process's unwinder so that a
    /// panic or an exception can cross them; keep it as long as the code may run
    /// (dropping it deregisters them).
    pub frames: JitFrames,
}

impl MergingModule<JITModule> {
    /// Merge, compile, define, finalize and register the unwind frames: every declared id
    /// then resolves with `JITModule::get_finalized_function`.
    pub fn finalize_definitions(self) -> Result<FinalizedJit, PluginError> {
        let (mut module, merged) = self.define(AliasStyle::Thunk)?;
        module
            .finalize_definitions()
            .map_err(|e| PluginError::Module(e.to_string()))?;
        let frames = merged.register_jit_frames(&module)?;
        Ok(FinalizedJit {
            module,
            merged,
            frames,
        })
    }
}

impl<M: Module> Module for MergingModule<M> {
    fn isa(&self) -> &dyn TargetIsa {
        self.inner.isa()
    }

    fn declarations(&self) -> &ModuleDeclarations {
        self.inner.declarations()
    }

    fn target_config(&self) -> TargetFrontendConfig {
        self.inner.target_config()
    }

    fn declare_function(
        &mut self,
        name: &str,
        linkage: Linkage,
        signature: &ir::Signature,
    ) -> ModuleResult<FuncId> {
        self.inner.declare_function(name, linkage, signature)
    }

    fn declare_anonymous_function(&mut self, signature: &ir::Signature) -> ModuleResult<FuncId> {
        self.inner.declare_anonymous_function(signature)
    }

    fn declare_data(
        &mut self,
        name: &str,
        linkage: Linkage,
        writable: bool,
        tls: bool,
    ) -> ModuleResult<DataId> {
        self.inner.declare_data(name, linkage, writable, tls)
    }

    fn declare_anonymous_data(&mut self, writable: bool, tls: bool) -> ModuleResult<DataId> {
        self.inner.declare_anonymous_data(writable, tls)
    }

    /// Checks `ctx.func` against its declaration and the verifier, and records it; it is
    /// compiled when the module is finished. `ctx` is left as it was.
    fn define_function_with_control_plane(
        &mut self,
        func: FuncId,
        ctx: &mut Context,
        _ctrl_plane: &mut ControlPlane,
    ) -> ModuleResult<()> {
        let decl = self.inner.declarations().get_function_decl(func);
        let name = decl.linkage_name(func).into_owned();
        if decl.linkage == Linkage::Import {
            return Err(ModuleError::InvalidImportDefinition(name));
        }
        if decl.signature != ctx.func.signature {
            return Err(ModuleError::IncompatibleSignature(
                name,
                decl.signature.clone(),
                ctx.func.signature.clone(),
            ));
        }
        cranelift_codegen::verify_function(&ctx.func, self.inner.isa()).map_err(|errors| {
            ModuleError::Compilation(cranelift_codegen::CodegenError::Verifier(errors))
        })?;
        self.merger
            .add(func, ctx.func.clone())
            .map_err(|e| match e {
                PluginError::AddedTwice(_) => ModuleError::DuplicateDefinition(name),
                other => ModuleError::Backend(anyhow::anyhow!("{name}: {other}")),
            })
    }

    fn define_function_bytes(
        &mut self,
        func_id: FuncId,
        alignment: u64,
        bytes: &[u8],
        relocs: &[ModuleReloc],
    ) -> ModuleResult<()> {
        self.inner
            .define_function_bytes(func_id, alignment, bytes, relocs)
    }

    fn define_data(&mut self, data_id: DataId, data: &DataDescription) -> ModuleResult<()> {
        self.inner.define_data(data_id, data)
    }
}
