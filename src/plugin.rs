//! MergeFunctions inside a Cranelift-based compiler: the backend plugin.
//!
//! A compiler built on Cranelift declares its functions in a `cranelift_module::Module`
//! (`ObjectModule` for AOT, `JITModule` for JIT) and defines them one by one with
//! `define_function`. With the plugin it hands each function to a [`FunctionMerger`]
//! instead, and then lets the merger define them all: equal functions are compiled once,
//! the other names become aliases or thunks, and calls are redirected. Everything the
//! compiler declared stays declared and defined, so the rest of its pipeline (relocations,
//! `get_finalized_function`, `finish`) works as before.
//!
//! Linkage comes from the module's declarations. Address significance follows the
//! [`MergeOptions`]: by default an exported function's address is significant (it gets a
//! thunk, not an alias); mark functions whose address nobody compares with
//! [`FunctionMerger::set_unnamed_addr`], or set `addresses_insignificant`.
//!
//! In a JIT every id the compiler declared must be defined, so a name the plan makes an
//! alias or erases is a thunk there, at an address of its own: callers that take the
//! addresses of exported functions folded as aliases are therefore not folded in a JIT
//! (the pipeline asks its sink, [`MergeOptions::aliases_share_address`]). Inside the
//! module every reference to an erased local function goes to the body; only the
//! compiler's own `get_finalized_function` of that id returns the thunk, so do not compare
//! that pointer with an address the module's code computes.
//!
//! [`FunctionMerger::with_merge_similar`] adds merge-similar: functions that differ only in
//! constants, offsets and callees share a body that the merger declares in the module as a
//! local function; the compiler's own ids all stay functions (thunks into that body).
//!
//! Unwind information: the merger defines every body as bytes, so neither
//! cranelift-object's `unwind_info` option nor anything in cranelift-jit covers them.
//! [`Merged::finish_object`] writes their `.eh_frame`, and in a JIT
//! [`Merged::register_jit_frames`], called after `finalize_definitions()`, registers their
//! frames, so that exceptions and panics cross merged code ([`crate::emit::unwind`]). For
//! Windows (x64 and arm64), defining in a JIT also defines their unwind information in the
//! module, and [`Merged::jit_function_table`] gives the table Windows registers.
//!
//! ```
//! use clif_merge::plugin::FunctionMerger;
//! use clif_merge::MergeOptions;
//! use cranelift_codegen::ir::{types::I32, AbiParam, Function, InstBuilder, Signature, UserFuncName};
//! use cranelift_codegen::isa::CallConv;
//! use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
//! use cranelift_module::{default_libcall_names, Linkage, Module};
//! use cranelift_object::{ObjectBuilder, ObjectModule};
//!
//! let isa = clif_merge::build_isa(
//!     &clif_merge::TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap(),
//!     &[("is_pic".into(), "true".into())],
//! )
//! .unwrap();
//! let mut module =
//!     ObjectModule::new(ObjectBuilder::new(isa, "demo", default_libcall_names()).unwrap());
//! let mut sig = Signature::new(CallConv::SystemV);
//! sig.params.push(AbiParam::new(I32));
//! sig.returns.push(AbiParam::new(I32));
//!
//! // Two functions that double their argument, written twice.
//! let mut merger = FunctionMerger::new(module.isa(), MergeOptions::default()).unwrap();
//! for name in ["double", "twice"] {
//!     let id = module.declare_function(name, Linkage::Export, &sig).unwrap();
//!     let mut func = Function::with_name_signature(UserFuncName::user(0, id.as_u32()), sig.clone());
//!     let mut ctx = FunctionBuilderContext::new();
//!     let mut b = FunctionBuilder::new(&mut func, &mut ctx);
//!     let block = b.create_block();
//!     b.append_block_params_for_function_params(block);
//!     b.switch_to_block(block);
//!     b.seal_block(block);
//!     let x = b.block_params(block)[0];
//!     let y = b.ins().iadd(x, x);
//!     b.ins().return_(&[y]);
//!     b.finalize(module.target_config());
//!     merger.add(id, func).unwrap(); // instead of module.define_function
//! }
//! let merged = merger.define_in_object(&mut module).unwrap();
//! assert_eq!(merged.plan().folded_count(), 1);
//! let mut product = module.finish();
//! merged.finish_object(&mut product).unwrap();
//! let bytes = product.emit().unwrap();
//! assert!(!bytes.is_empty());
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use cranelift_codegen::ir::{Function, UserFuncName};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::CompiledCode;
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module as CraneliftModule, ModuleDeclarations};
use cranelift_object::{ObjectModule, ObjectProduct};

use crate::emit::define::{AliasStyle, Naming};
use crate::emit::sink::{Emitted, Sink};
use crate::emit::unwind::windows_jit::{JitUnwindData, WindowsFunctionTable};
use crate::emit::unwind::{Frames, JitFrames};
use crate::emit::{EmitError, EmitOptions, EmitSummary};
use crate::merge::similar::{SimilarOptions, SimilarReport};
use crate::merge::{merge, Action, FuncIndex, Linkage, MergeOptions, MergePlan, Module};
use crate::names::FuncName;
use crate::pipeline::{self, PipelineOptions};
use crate::target::TargetInfo;

/// What a caller of the plugin can get wrong, as a value.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The id is not a function the module declared.
    #[error("function {0} is not declared in the module")]
    UnknownFunction(FuncId),
    /// The function was handed over twice.
    #[error("function {0} was added twice")]
    AddedTwice(FuncId),
    /// The function's signature differs from its declaration.
    #[error(
        "function {id} ({name}): signature {actual} does not match its declaration {declared}"
    )]
    SignatureMismatch {
        /// The id.
        id: FuncId,
        /// Its declared name.
        name: String,
        /// The function's signature.
        actual: String,
        /// The declared signature.
        declared: String,
    },
    /// The function is declared as an import.
    #[error("function {id} ({name}) is declared as an import and cannot be defined")]
    ImportDefinition {
        /// The id.
        id: FuncId,
        /// Its declared name.
        name: String,
    },
    /// The target has no pointer width or object format this build supports.
    #[error("unsupported target {0}")]
    UnsupportedTarget(String),
    /// Compiling or defining failed.
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// The thread pool asked for could not be built.
    #[error("building the thread pool: {0}")]
    ThreadPool(String),
    /// The wrapped module failed after everything was defined (finalizing a JIT).
    #[error("{0}")]
    Module(String),
}

/// Collects a compiler's functions, merges equal ones, and defines them in its module.
pub struct FunctionMerger {
    target: TargetInfo,
    options: MergeOptions,
    emit: EmitOptions,
    /// By id: the merger numbers functions in declaration order, whatever order they were
    /// added in, so that the output does not depend on it.
    functions: BTreeMap<FuncId, Function>,
    unnamed_addr: HashSet<FuncId>,
    similar: Option<SimilarOptions>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

/// The result of [`FunctionMerger::define_in_object`] or [`FunctionMerger::define_in_jit`].
pub struct Merged {
    plan: MergePlan,
    index: HashMap<FuncId, FuncIndex>,
    aliases: Vec<(FuncId, FuncId, Linkage)>,
    style: AliasStyle,
    frames: Frames,
    /// In a JIT for Windows x64: the `UNWIND_INFO`s of the bodies the merger defined, as
    /// data of the module ([`JitUnwindData`]).
    windows_unwind: Option<JitUnwindData>,
    /// What Cranelift said about the code defined under each id ([`crate::emit::define::Defined::code`]).
    code: BTreeMap<FuncId, Arc<CompiledCode>>,
    /// The id each group's body is defined under, by the group's kept function.
    group_bodies: HashMap<FuncIndex, FuncId>,
    /// The shared body each merge-similar thunk calls, by their ids.
    similar_bodies: HashMap<FuncId, FuncId>,
    /// What was compiled and written.
    pub summary: EmitSummary,
    /// What merge-similar did, when it ran ([`FunctionMerger::with_merge_similar`]).
    pub similar: Option<SimilarReport>,
}

impl FunctionMerger {
    /// A merger for functions compiled by `isa` (usually `module.isa()`). Fails when the
    /// triple has no pointer width.
    pub fn new(isa: &dyn TargetIsa, options: MergeOptions) -> Result<Self, PluginError> {
        let target = TargetInfo::new(isa.triple().clone())
            .map_err(|e| PluginError::UnsupportedTarget(e.to_string()))?;
        Ok(Self {
            target,
            options,
            emit: EmitOptions::default(),
            functions: BTreeMap::new(),
            unnamed_addr: HashSet::new(),
            similar: None,
            pool: None,
        })
    }

    /// Merge and compile on `pool` (by default, rayon's global pool).
    pub fn with_thread_pool(mut self, pool: std::sync::Arc<rayon::ThreadPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Also merge functions that differ only in integer constants, memory offsets and
    /// direct callees ([`crate::merge::similar`]) when defining. Each shared body is
    /// declared in the module as a local function named `clif_merge_similar_…`; every id
    /// the compiler declared stays a function of its own (a thunk into the body).
    pub fn with_merge_similar(mut self, options: SimilarOptions) -> Self {
        self.similar = Some(options);
        self
    }

    /// Use `emit` (thunk style, machine-code folding, sections) when defining.
    pub fn with_emit_options(mut self, emit: EmitOptions) -> Self {
        self.emit = emit;
        self
    }

    /// Hand over the body of the declared function `id`, instead of `define_function`.
    /// Its name becomes `u0:<id>`, the name `declare_func_in_func` gives callees. Functions
    /// may be added in any order (as a compiler's threads finish them): the merger takes
    /// them in `FuncId` order, so the output is the same whatever the order.
    pub fn add(&mut self, id: FuncId, mut func: Function) -> Result<(), PluginError> {
        if self.functions.contains_key(&id) {
            return Err(PluginError::AddedTwice(id));
        }
        func.name = UserFuncName::user(0, id.as_u32());
        self.functions.insert(id, func);
        Ok(())
    }

    /// Promise that nobody compares the address of `id` (LLVM's `unnamed_addr`): a folded
    /// `id` may then become an alias of an equal function.
    pub fn set_unnamed_addr(&mut self, id: FuncId) {
        self.unnamed_addr.insert(id);
    }

    /// The merge plan for the functions added so far, with linkages from `module`'s
    /// declarations, and the merger's view of them (index order = `FuncId` order, whatever
    /// order they were added in).
    ///
    /// This is identical merging only: merge-similar ([`FunctionMerger::with_merge_similar`])
    /// declares its shared bodies in the module, which happens in `define_in_*`.
    pub fn plan<M: CraneliftModule>(&self, module: &M) -> Result<(Module, MergePlan), PluginError> {
        let merge_module = self.merge_module(module)?;
        let plan = merge(&merge_module, &self.target, &self.options);
        Ok((merge_module, plan))
    }

    /// The functions added so far as a [`Module`], with linkages from `module`'s
    /// declarations (index order = `FuncId` order).
    fn merge_module<M: CraneliftModule>(&self, module: &M) -> Result<Module, PluginError> {
        let declared: HashSet<FuncId> = module
            .declarations()
            .get_functions()
            .map(|(id, _)| id)
            .collect();
        let mut merge_module = Module::new();
        for (id, func) in &self.functions {
            if !declared.contains(id) {
                return Err(PluginError::UnknownFunction(*id));
            }
            let decl = module.declarations().get_function_decl(*id);
            let name = decl.linkage_name(*id).into_owned();
            if decl.linkage == Linkage::Import {
                return Err(PluginError::ImportDefinition { id: *id, name });
            }
            if decl.signature != func.signature {
                return Err(PluginError::SignatureMismatch {
                    id: *id,
                    name,
                    actual: func.signature.to_string(),
                    declared: decl.signature.to_string(),
                });
            }
            merge_module
                .add(func.clone(), decl.linkage, self.unnamed_addr.contains(id))
                .map_err(|_| PluginError::AddedTwice(*id))?;
        }
        Ok(merge_module)
    }

    /// Merge and define every function added in `module`. Call
    /// [`Merged::finish_object`] on the product of `module.finish()` to point the aliases.
    pub fn define_in_object(self, module: &mut ObjectModule) -> Result<Merged, PluginError> {
        self.define_in(module, AliasStyle::PatchedSymbol)
    }

    /// Merge and define every function added in `module`. A JIT has no aliases: a folded
    /// function that would be an alias gets a single-jump thunk, so that every id the
    /// compiler declared can be finalized and called.
    pub fn define_in_jit(self, module: &mut JITModule) -> Result<Merged, PluginError> {
        self.define_in(module, AliasStyle::Thunk)
    }

    /// Merge and define in any module, aliases realised as `style`; errors name functions
    /// as the module declared them.
    pub(crate) fn define_in<M: CraneliftModule>(
        self,
        module: &mut M,
        style: AliasStyle,
    ) -> Result<Merged, PluginError> {
        self.define(module, style)
            .map_err(|e| with_declared_names(e, module.declarations()))
    }

    fn define<M: CraneliftModule>(
        self,
        module: &mut M,
        style: AliasStyle,
    ) -> Result<Merged, PluginError> {
        let merge_module = self.merge_module(module)?;
        let sink = ModuleSink {
            module,
            style,
            ids: self.functions.keys().copied().collect(),
            similar_bodies: HashMap::new(),
            pool: self.pool.clone(),
        };
        let options = PipelineOptions {
            merge: self.options.clone(),
            similar: self.similar.clone(),
            emit: self.emit.clone(),
        };
        let (analysis, done) = pipeline::run(merge_module, &self.target, &options, sink)?;
        Ok(Merged {
            summary: done.summary,
            similar: analysis.similar,
            ..done.output
        })
    }
}

/// The plugin's sink: the compiler's own module, whose functions are declared already
/// (`u0:N` is its `FuncId` N).
struct ModuleSink<'m, M: CraneliftModule> {
    module: &'m mut M,
    style: AliasStyle,
    /// The id of each merger function, by index (shared bodies appended).
    ids: Vec<FuncId>,
    /// The shared body each merge-similar thunk calls, by their ids.
    similar_bodies: HashMap<FuncId, FuncId>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

impl<M: CraneliftModule> Sink for ModuleSink<'_, M> {
    type Module = M;
    type Output = Merged;
    type Error = PluginError;

    fn module(&self) -> &M {
        self.module
    }

    fn module_mut(&mut self) -> &mut M {
        self.module
    }

    fn alias_style(&self) -> AliasStyle {
        self.style
    }

    fn naming(&self) -> Naming {
        Naming::Existing
    }

    fn shared_bodies(
        &mut self,
        module: Module,
        similar: &SimilarReport,
    ) -> Result<Module, PluginError> {
        let (module, bodies) = declare_shared_bodies(self.module, module, similar, &mut self.ids)?;
        self.similar_bodies = bodies;
        Ok(module)
    }

    fn on_pool<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        match &self.pool {
            Some(pool) => pool.install(work),
            None => work(),
        }
    }

    fn finish(
        self,
        emitted: Emitted<'_>,
        _summary: &mut EmitSummary,
    ) -> Result<Merged, PluginError> {
        let ids = self.ids;
        let index = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, FuncIndex::from_u32(i as u32)))
            .collect();
        let aliases = emitted
            .defined
            .aliases
            .iter()
            .map(|&(f, alias, body)| (alias, body, emitted.module.get(f).linkage))
            .collect();
        // Aliases as thunks: a JIT (or `MergingModule::define_all`), where Windows unwind
        // information must lie beside the code, as data of the module.
        let windows_unwind = match self.style {
            AliasStyle::Thunk => JitUnwindData::define(&emitted.defined.frames, self.module)?,
            AliasStyle::PatchedSymbol | AliasStyle::BodyId => None,
        };
        Ok(Merged {
            plan: emitted.plan,
            index,
            aliases,
            style: self.style,
            frames: emitted.defined.frames,
            windows_unwind,
            code: emitted.defined.code,
            group_bodies: emitted.defined.group_bodies,
            similar_bodies: self.similar_bodies,
            summary: EmitSummary::default(),
            similar: None,
        })
    }
}

impl Merged {
    /// The final plan (indices are in `FuncId` order: the order the compiler declared the
    /// functions it added, not the order it added them in).
    pub fn plan(&self) -> &MergePlan {
        &self.plan
    }

    /// What became of `id` in the module (`Keep` for functions the merger was not given).
    ///
    /// Never `Erased`: every id the caller declared stays defined, so a function the plan
    /// erases is a local alias in an object. A JIT has no aliases: there, aliases are
    /// thunks. [`Merged::plan`] has the plan's own actions.
    pub fn action(&self, id: FuncId) -> Action {
        let planned = self
            .index
            .get(&id)
            .map_or(Action::Keep, |&f| self.plan.action(f));
        match (planned, self.style) {
            (Action::Erased | Action::Alias, AliasStyle::Thunk) => Action::Thunk,
            (Action::Erased, _) => Action::Alias,
            (action, _) => action,
        }
    }

    /// The id whose body runs when `id` is called: `id` itself, or the body of its group,
    /// defined under the kept function's id or, for a group of preemptible functions,
    /// under the anonymous id of the local body they share (every name of such a group is
    /// a thunk into it). Where a body is no larger than a jump, a folded name runs a copy
    /// of it at its own address: [`Merged::defined_code`] lists such copies by their ids.
    pub fn body_of(&self, id: FuncId) -> FuncId {
        match self.index.get(&id).and_then(|&f| self.plan.group_of(f)) {
            Some(group) => self.group_bodies[&group.kept],
            None => id,
        }
    }

    /// The merge-similar shared body that `id` became a thunk into, if it did
    /// ([`FunctionMerger::with_merge_similar`]): an anonymous id of the module. Together
    /// with [`Merged::body_of`] it leads from a name to the code that does its work: the
    /// thunk's body, then the shared body's own (which identical merging or machine-code
    /// folding may have folded with another).
    pub fn shared_body_of(&self, id: FuncId) -> Option<FuncId> {
        self.similar_bodies.get(&id).copied()
    }

    /// What `Context::compile` returned for the code that runs when `id` is called (the
    /// kept body of its group, or its own): traps, call sites and exception handlers of
    /// `try_call`, user stack maps and source locations, at offsets into that code, as a
    /// compiler reads them for its trap tables, GC maps and line tables. The offsets are
    /// from the address of [`Merged::body_of`]`(id)`, which in a JIT is not `id`'s own when
    /// `id` is a thunk. `None` for a function the merger was not given, and for
    /// merge-similar's thunks written directly as machine code (they have no traps, calls
    /// or stack maps). The code that a call to `id` runs may lie in more than one body
    /// (merge-similar's thunk, then its shared body; a preemptible name's thunk, then the
    /// group's local body): a table of every address the module's code can fault or call
    /// from is built from [`Merged::defined_code`]. The relocations inside
    /// name clif-merge's own symbol numbers; the module holds the real ones. Its bytes are
    /// the code defined: Cranelift's, but on Windows x64, where epilogues that free the
    /// frame with `add rsp` are rewritten at the same offsets so that Windows' unwinder
    /// knows them ([`crate::emit::epilogues::x86_64`]).
    pub fn compiled_code(&self, id: FuncId) -> Option<&CompiledCode> {
        self.code.get(&self.body_of(id)).map(|code| &**code)
    }

    /// Every body the merger compiled, by the id it is defined under, in id order, with
    /// what `Context::compile` returned for it: the kept functions, thunks compiled from
    /// IR, and the bodies that no name of the compiler's stands for, which merge-similar
    /// and groups of preemptible functions share (anonymous ids of the module). Together
    /// they cover every instruction of merged code that can trap, call or hold a stack map,
    /// so a trap table or GC map built from them, each at its id's address in the module
    /// (`get_finalized_function`, or the id's symbol in an object), maps every faulting or
    /// return address to what the function called would have said. What they leave out is
    /// thunks written as machine code: moves and a jump, which neither trap nor call.
    pub fn defined_code(&self) -> impl Iterator<Item = (FuncId, &CompiledCode)> {
        self.code.iter().map(|(&id, code)| (id, &**code))
    }

    /// Finish an object written by `ObjectModule::finish`: point every alias at its body's
    /// code, and write the unwind information of every body the merger defined
    /// (`.eh_frame`; [`crate::emit::unwind`]) unless Cranelift's `unwind_info` setting is
    /// off. The merger defines bodies as bytes, which cranelift-object's own `unwind_info`
    /// option does not cover; functions the compiler defined itself keep whatever that
    /// option gives them.
    pub fn finish_object(&self, product: &mut ObjectProduct) -> Result<(), EmitError> {
        crate::emit::object::finish_product(product, &self.aliases, &self.frames)
    }

    /// Register the frames of every body the merger defined in `module` with this
    /// process's unwinder, so that a panic or an exception can cross them. Call it after
    /// `module.finalize_definitions()` (cranelift-jit registers no unwind information of
    /// its own) and keep the result as long as the code may run: dropping it deregisters
    /// the frames. Nothing is registered for code of another architecture than this
    /// process's: see [`Merged::jit_eh_frame`].
    pub fn register_jit_frames(&self, module: &JITModule) -> Result<JitFrames, EmitError> {
        let mut frames = self
            .frames
            .register_jit(|id| module.get_finalized_function(id))?;
        if let Some(table) = self.jit_function_table(module)? {
            frames.register_windows(table)?;
        }
        Ok(frames)
    }

    /// For a JIT compiling for Windows (x64 or arm64): the table of `RUNTIME_FUNCTION`s that
    /// [`Merged::register_jit_frames`] registers with `RtlAddFunctionTable` on that Windows,
    /// for code run elsewhere or an embedder that registers it itself. Its entries are
    /// offsets from its base address, into the code and into the unwind information (x64's
    /// `UNWIND_INFO`s, arm64's `.xdata` records), which the merger defined in the module as
    /// read-only data; `WindowsFunctionTable::entries` lays them out as that Windows reads
    /// them. `None` for other targets. Call it after `module.finalize_definitions()`.
    pub fn jit_function_table(
        &self,
        module: &JITModule,
    ) -> Result<Option<WindowsFunctionTable>, EmitError> {
        self.windows_unwind
            .as_ref()
            .map(|unwind| unwind.function_table_in(module))
            .transpose()
    }

    /// The `.eh_frame` that [`Merged::register_jit_frames`] registers, as bytes with every
    /// function's final address, for an unwinder other than this process's (code run
    /// elsewhere, or an embedder that registers frames itself). Call it after
    /// `module.finalize_definitions()`.
    pub fn jit_eh_frame(&self, module: &JITModule) -> Result<Vec<u8>, EmitError> {
        self.frames
            .jit_eh_frame(|id| module.get_finalized_function(id))
    }
}

/// Declare the shared bodies merge-similar appended to `rewritten` for `similar`'s groups
/// as local functions of `module`, and give them (and every call to them) the names of
/// their new ids; their ids are appended to `ids`. Also returns the body each group's
/// members (now its thunks) call, by their ids.
fn declare_shared_bodies<M: CraneliftModule>(
    module: &mut M,
    rewritten: Module,
    similar: &SimilarReport,
    ids: &mut Vec<FuncId>,
) -> Result<(Module, HashMap<FuncId, FuncId>), PluginError> {
    let count = similar.groups.len();
    if count == 0 {
        return Ok((rewritten, HashMap::new()));
    }
    let first_body = rewritten.len() - count;
    let mut renamed: HashMap<FuncName, FuncName> = HashMap::new();
    let mut declared: HashMap<String, FuncId> = HashMap::with_capacity(count);
    for (f, m) in rewritten.iter().skip(first_body) {
        // Anonymous: a shared body adds no name to the compiler's namespace.
        let id = module
            .declare_anonymous_function(&m.func.signature)
            .map_err(|e| EmitError::Object(format!("declaring {}: {e}", m.name)))?;
        debug_assert_eq!(f.as_u32() as usize, ids.len());
        ids.push(id);
        renamed.insert(m.name.clone(), func_name(id));
        declared.insert(m.name.to_string(), id);
    }
    let mut bodies = HashMap::new();
    for group in &similar.groups {
        let body = *declared.get(&group.body).ok_or_else(|| {
            EmitError::Object(format!(
                "merge-similar's body {} is not in the module",
                group.body
            ))
        })?;
        for member in &group.members {
            let id = declared_id(member).ok_or_else(|| {
                EmitError::Object(format!(
                    "merge-similar's member {member} is not a function of the module"
                ))
            })?;
            bodies.insert(id, body);
        }
    }
    let mut out = Module::new();
    for (_, mut m) in rewritten.into_functions() {
        if let Some(new) = renamed.get(&m.name) {
            m.func.name = crate::names::user_func_name(new);
        }
        let refs: Vec<cranelift_codegen::ir::FuncRef> = m.func.dfg.ext_funcs.keys().collect();
        for r in refs {
            let name = FuncName::of_external(&m.func, &m.func.dfg.ext_funcs[r].name);
            if let Some(new) = renamed.get(&name) {
                m.func.dfg.ext_funcs[r].name = crate::names::external_name(&mut m.func, new);
            }
        }
        let index = out
            .add(m.func, m.linkage, m.unnamed_addr)
            .map_err(|e| EmitError::Object(e.to_string()))?;
        out.get_mut(index).similar_thunk = m.similar_thunk;
    }
    Ok((out, bodies))
}

/// `error` with every function the merger calls `u0:N` named as the module declared it.
fn with_declared_names(error: PluginError, declarations: &ModuleDeclarations) -> PluginError {
    let declared = |text: &str| -> String {
        match declared_id(text) {
            Some(id) => match declarations.get_functions().find(|(i, _)| *i == id) {
                Some((_, decl)) => decl.linkage_name(id).into_owned(),
                None => text.to_string(),
            },
            None => text.to_string(),
        }
    };
    match error {
        PluginError::Emit(EmitError::Codegen { function, message }) => {
            PluginError::Emit(EmitError::Codegen {
                function: declared(&function),
                message,
            })
        }
        PluginError::Emit(EmitError::Module { context, source }) => {
            let context = context
                .split(' ')
                .map(declared)
                .collect::<Vec<_>>()
                .join(" ");
            PluginError::Emit(EmitError::Module { context, source })
        }
        other => other,
    }
}

/// The name the merger gives a function declared as `id`.
pub fn func_name(id: FuncId) -> FuncName {
    FuncName::User {
        namespace: 0,
        index: id.as_u32(),
    }
}

/// The id a name the merger gave (`u0:N`, [`func_name`]) stands for; `None` for any other
/// name.
fn declared_id(text: &str) -> Option<FuncId> {
    match FuncName::parse(text)? {
        FuncName::User {
            namespace: 0,
            index,
        } => Some(FuncId::from_u32(index)),
        _ => None,
    }
}
