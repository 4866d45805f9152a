//! Compiling the bodies a plan keeps, before any object or JIT module exists.
//!
//! Every name a body refers to is first given a symbol number of our own (namespace 0 for
//! functions, 1 for data), so that compiled code can be compared, folded at the machine
//! level and only then defined in an `ObjectModule` or a `JITModule`, whose own ids are
//! assigned in the final order. Bodies compile in parallel (rayon); the results are keyed
//! by function, so the output does not depend on the thread count.
//!
//! Each body keeps, besides its bytes and relocations, Cranelift's unwind information
//! ([`CompiledBody::unwind`]): bodies are defined as bytes, and cranelift-object and
//! cranelift-jit write no unwind information for bytes, so [`super::unwind`] writes it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{self, ExternalName, GlobalValueData, UserExternalName};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::CompiledCode;
use cranelift_entity::packed_option::ReservedValue;
use cranelift_module::{FuncId, ModuleReloc, ModuleRelocTarget};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use super::clif::redirected;
use super::stencil;
use super::thunk::register_thunk;
use super::unwind::FrameInfo;
use super::EmitError;
use crate::estimate::SizeModel;
use crate::merge::similar::WrittenThunk;
use crate::merge::{FuncIndex, MergePlan, Module};
use crate::names::FuncName;

/// At most this many bodies compile one after another on a thread before the rest may be
/// taken by another. Without a bound, rayon splits the list into a few long runs, and the
/// run holding the costliest bodies (merge-similar's shared bodies, appended at the end of
/// the module, or a module's largest functions where they sit together) finishes alone
/// while the other threads wait: on re2 with two threads, code generation after
/// merge-similar took 199.4 ms against 181.9 ms with the bound (bench/README.md §10).
const MAX_FUNCTIONS_PER_TASK: usize = 32;

/// Namespace of function symbols in compiled relocations.
pub const FUNCTION_NAMESPACE: u32 = 0;
/// Namespace of data symbols in compiled relocations.
pub const DATA_NAMESPACE: u32 = 1;

/// The names compiled code refers to, numbered.
#[derive(Default, Debug)]
pub struct SymbolTable {
    functions: Vec<FuncName>,
    function_index: FxHashMap<FuncName, u32>,
    data: Vec<(FuncName, bool)>,
    data_index: FxHashMap<FuncName, u32>,
    /// The signature each function name is called with (first use in module order).
    pub signatures: FxHashMap<FuncName, ir::Signature>,
}

impl SymbolTable {
    fn function(&mut self, name: &FuncName) -> u32 {
        if let Some(&i) = self.function_index.get(name) {
            return i;
        }
        let i = self.functions.len() as u32;
        self.functions.push(name.clone());
        self.function_index.insert(name.clone(), i);
        i
    }

    fn data(&mut self, name: &FuncName, tls: bool) -> u32 {
        if let Some(&i) = self.data_index.get(name) {
            return i;
        }
        let i = self.data.len() as u32;
        self.data.push((name.clone(), tls));
        self.data_index.insert(name.clone(), i);
        i
    }

    /// The function name of symbol `i`.
    pub fn function_name(&self, i: u32) -> &FuncName {
        &self.functions[i as usize]
    }

    /// Every function name, in the order first referred to.
    pub fn function_names(&self) -> &[FuncName] {
        &self.functions
    }

    /// Every data name with its `tls` flag, in the order first referred to.
    pub fn data_names(&self) -> &[(FuncName, bool)] {
        &self.data
    }
}

/// The machine code of one body.
#[derive(Clone)]
pub struct CompiledBody {
    /// The code.
    pub bytes: Vec<u8>,
    /// Its alignment.
    pub alignment: u64,
    /// Relocations: `User { namespace, index }` names a symbol of the [`SymbolTable`];
    /// `FunctionOffset` is an offset inside this body.
    pub relocs: Vec<ModuleReloc>,
    /// For each relocation, whether its instruction is a direct call or jump
    /// ([`super::reloc::is_call`]): only those may be sent to another body; any other
    /// relocation takes an address, which must stay the name's own.
    pub reloc_is_call: Vec<bool>,
    /// The code's unwind information: Cranelift's (`CompiledCode::create_unwind_info`), or
    /// a written thunk's when it moves its stack pointer; `None` for a written thunk that
    /// does not ([`super::unwind`]).
    pub unwind: Option<FrameInfo>,
    /// Everything Cranelift said about the body (traps, call sites and exception
    /// handlers, user stack maps, source locations, at offsets into `bytes`), as
    /// `Context::compile` returns it; `None` for thunks written directly as machine code.
    /// Its relocations name this crate's symbol numbers: `relocs` are the ones to use.
    pub code: Option<Arc<CompiledCode>>,
}

impl CompiledBody {
    fn new(
        isa: &dyn TargetIsa,
        bytes: Vec<u8>,
        alignment: u64,
        relocs: Vec<ModuleReloc>,
        unwind: Option<FrameInfo>,
    ) -> Self {
        let arch = isa.triple().architecture;
        let reloc_is_call = relocs
            .iter()
            .map(|r| super::reloc::is_call(arch, r.kind, &bytes, r.offset))
            .collect();
        Self {
            bytes,
            alignment,
            relocs,
            reloc_is_call,
            unwind,
            code: None,
        }
    }

    /// This body's code for `func`, which compiles alike ([`stencil::compile_alike`]): the
    /// same code, with relocations naming `func`'s own symbols.
    fn with_relocations_of(&self, func: &ir::Function) -> CompiledBody {
        let code = self.code.as_ref().expect("a body compiled by Cranelift");
        CompiledBody {
            relocs: module_relocs(code, func),
            ..self.clone()
        }
    }

    /// Each relocation with whether it is a call.
    pub fn relocs_with_calls(&self) -> impl Iterator<Item = (&ModuleReloc, bool)> {
        self.relocs.iter().zip(self.reloc_is_call.iter().copied())
    }
}

/// Compiled bodies and the names they refer to.
#[derive(Default)]
pub struct Compiled {
    /// The names.
    pub symbols: SymbolTable,
    /// The code of each compiled function (the kept function of a group, or a function in
    /// no group).
    pub bodies: HashMap<FuncIndex, CompiledBody>,
    /// How many of `bodies` took the code of an earlier body that compiles alike
    /// ([`stencil`]) rather than being compiled.
    pub alike: usize,
    /// Seconds spent.
    pub seconds: f64,
}

/// Compile every function whose body the plan keeps.
///
/// Four steps, so that only the numbering and the grouping run on one thread: each kept
/// body is copied with its calls redirected and its symbol uses listed (in parallel); the
/// uses are numbered in module order, which makes the numbers independent of the thread
/// count; each body takes its numbers (in parallel); then each compiles (in parallel),
/// except, with `share_alike`, a body whose stencil equals an earlier one's, which takes
/// that body's code with its own relocations once it is compiled ([`stencil`]). The
/// pipeline shares unless the plan comes from `--merge-functions disabled`, whose compile
/// is Cranelift's, function by function.
// Never inlined: a stage boundary that `bench/ratios_instructions.sh` counts at.
#[inline(never)]
pub fn compile_bodies(
    module: &Module,
    plan: &MergePlan,
    isa: &dyn TargetIsa,
    share_alike: bool,
) -> Result<Compiled, EmitError> {
    let start = std::time::Instant::now();
    let twin = compiling_isa(isa)?;
    let isa = twin.as_deref().unwrap_or(isa);
    let mut compiled = Compiled::default();
    let indices: Vec<FuncIndex> = module.indices().collect();
    // Names called as functions anywhere are functions; other symbol names are data.
    let called: FxHashSet<FuncName> = indices
        .par_iter()
        .fold(FxHashSet::default, |mut called, &f| {
            let m = module.get(f);
            called.insert(m.name.clone());
            for ext in m.func.dfg.ext_funcs.values() {
                called.insert(FuncName::of_external(&m.func, &ext.name));
            }
            called
        })
        .reduce(FxHashSet::default, |mut a, b| {
            a.extend(b);
            a
        });
    let kept = |f: FuncIndex| plan.group_of(f).is_none_or(|g| g.kept == f);
    // Bodies are boxed: the steps below move them between lists on one thread, as
    // pointers rather than copies of a `Function` each.
    let jobs: Vec<(FuncIndex, Box<ir::Function>, Vec<SymbolUse>)> = indices
        .par_iter()
        .filter(|&&f| kept(f))
        .map(|&f| {
            let func = Box::new(redirected(module, plan, f));
            let uses = symbol_uses(&func, &called);
            (f, func, uses)
        })
        .collect();
    // Numbered in module order: each function's own signature, then its uses'.
    let mut numbers: Vec<Vec<UserExternalName>> = Vec::with_capacity(jobs.len());
    let mut next_job = jobs.iter().peekable();
    for (f, m) in module.iter() {
        let symbols = &mut compiled.symbols;
        symbols
            .signatures
            .entry(m.name.clone())
            .or_insert_with(|| m.func.signature.clone());
        let Some((_, func, uses)) = next_job.next_if(|(k, ..)| *k == f) else {
            continue;
        };
        numbers.push(uses.iter().map(|u| symbols.number(func, u)).collect());
    }
    // Each body with its numbers, and what decides whether it compiles alike with
    // another ([`stencil`]): merge-similar's thunks are mostly written as machine code, and
    // are never shared.
    let symbolized: Vec<(FuncIndex, Box<ir::Function>, Option<u64>)> = jobs
        .into_par_iter()
        .zip(numbers)
        .map(|((f, mut func, uses), numbers)| {
            symbolize(&mut func, &uses, numbers);
            let key = (share_alike && !module.get(f).similar_thunk).then(|| stencil::key(&func));
            (f, func, key)
        })
        .collect();
    let sources = stencil::sources(symbolized.iter().map(|(_, func, key)| (&**func, *key)));
    let (alone, alike): (Vec<_>, Vec<_>) = symbolized
        .into_iter()
        .zip(sources)
        .enumerate()
        .partition(|(_, (_, source))| source.is_none());
    let mut results: Vec<Option<(FuncIndex, Result<CompiledBody, String>)>> =
        (0..alone.len() + alike.len()).map(|_| None).collect();
    let compiled_alone: Vec<(usize, FuncIndex, Result<CompiledBody, String>)> = alone
        .into_par_iter()
        .with_max_len(MAX_FUNCTIONS_PER_TASK)
        .map(|(i, ((f, func, _), _))| (i, f, compile_one(isa, *func, module.get(f).similar_thunk)))
        .collect();
    for (i, f, result) in compiled_alone {
        results[i] = Some((f, result));
    }
    let taken: Vec<(usize, FuncIndex, Result<CompiledBody, String>)> = alike
        .into_par_iter()
        .map(|(i, ((f, func, _), source))| {
            let source = source.expect("partitioned by source");
            let (_, compiled) = results[source].as_ref().expect("compiled before");
            (
                i,
                f,
                compiled
                    .as_ref()
                    .map(|body| body.with_relocations_of(&func))
                    .map_err(Clone::clone),
            )
        })
        .collect();
    compiled.alike = taken.len();
    for (i, f, result) in taken {
        results[i] = Some((f, result));
    }
    // The first failure in module order, whichever thread met it first.
    let mut bodies = HashMap::with_capacity(results.len());
    for (f, result) in results
        .into_iter()
        .map(|r| r.expect("every body compiled or taken"))
    {
        let body = result.map_err(|message| EmitError::Codegen {
            function: module.get(f).name.to_string(),
            message,
        })?;
        bodies.insert(f, body);
    }
    compiled.bodies = bodies;
    compiled.seconds = start.elapsed().as_secs_f64();
    Ok(compiled)
}

/// A place in a function that names a symbol, other than a libcall or a well-known symbol:
/// those stay as they are, so that relocations name them as Cranelift does
/// (`ModuleRelocTarget::LibCall`, `KnownSymbol`) and the module they are defined in
/// spells them with its own libcall names (`ceilf` for `%CeilF32` with
/// `default_libcall_names()`), exactly as in an unmerged object.
enum SymbolUse {
    /// An external function (called, or its address taken).
    Function { fref: ir::FuncRef, name: FuncName },
    /// A `symbol` global value: a function when some function calls it, otherwise data.
    Global {
        gv: ir::GlobalValue,
        name: FuncName,
        function: bool,
        tls: bool,
    },
}

/// The symbol uses of `func`: its external functions in order, then its `symbol` global
/// values in order.
fn symbol_uses(func: &ir::Function, called: &FxHashSet<FuncName>) -> Vec<SymbolUse> {
    let own_symbol = |name: &ExternalName| {
        !matches!(
            name,
            ExternalName::LibCall(_) | ExternalName::KnownSymbol(_)
        )
    };
    let functions = func.dfg.ext_funcs.iter().filter(|(_, data)| {
        // cranelift-reader fills gaps in `fnN` numbering with placeholders whose signature
        // reference is invalid; nothing uses them.
        func.dfg.signatures.is_valid(data.signature) && own_symbol(&data.name)
    });
    let functions = functions.map(|(fref, data)| SymbolUse::Function {
        fref,
        name: FuncName::of_external(func, &data.name),
    });
    let globals = func
        .global_values
        .iter()
        .filter_map(|(gv, data)| match data {
            GlobalValueData::Symbol { name, tls, .. } if own_symbol(name) => {
                let name = FuncName::of_external(func, name);
                Some(SymbolUse::Global {
                    gv,
                    function: called.contains(&name),
                    name,
                    tls: *tls,
                })
            }
            _ => None,
        });
    functions.chain(globals).collect()
}

impl SymbolTable {
    /// The number of the symbol `u` (a use in `func`) names, given one on first use; a
    /// function's signature is the one it is first named with.
    fn number(&mut self, func: &ir::Function, u: &SymbolUse) -> UserExternalName {
        match u {
            SymbolUse::Function { fref, name } => {
                if !self.signatures.contains_key(name) {
                    let sig = &func.dfg.signatures[func.dfg.ext_funcs[*fref].signature];
                    self.signatures.insert(name.clone(), sig.clone());
                }
                UserExternalName::new(FUNCTION_NAMESPACE, self.function(name))
            }
            SymbolUse::Global {
                name,
                function: true,
                ..
            } => UserExternalName::new(FUNCTION_NAMESPACE, self.function(name)),
            SymbolUse::Global {
                name,
                function: false,
                tls,
                ..
            } => UserExternalName::new(DATA_NAMESPACE, self.data(name, *tls)),
        }
    }
}

/// `func` with every symbol use of `uses` ([`symbol_uses`]) replaced by its number.
fn symbolize(func: &mut ir::Function, uses: &[SymbolUse], numbers: Vec<UserExternalName>) {
    for (u, number) in uses.iter().zip(numbers) {
        let user = ExternalName::User(func.params.ensure_user_func_name(number));
        match u {
            SymbolUse::Function { fref, .. } => func.dfg.ext_funcs[*fref].name = user,
            SymbolUse::Global { gv, .. } => {
                if let GlobalValueData::Symbol { name, .. } = &mut func.global_values[*gv] {
                    *name = user;
                }
            }
        }
    }
}

/// The bytes `func` takes in `.text` once compiled by Cranelift for `isa`: its code,
/// padded to its alignment. This compiles `func`; merge-similar's cost model estimates the
/// same number without compiling ([`crate::estimate`]), and `cargo bench --bench
/// calibrate` fits the estimate to it.
pub fn text_size(isa: &dyn TargetIsa, func: ir::Function) -> Result<u64, String> {
    with_compiled(isa, func, |ctx| {
        let code = ctx.compiled_code().expect("compiled above");
        super::sizes::padded(code.buffer.data().len(), u64::from(code.buffer.alignment))
    })
}

/// The bytes merge-similar's `thunk` takes in `.text` once emitted for `isa`: a register
/// thunk's exactly ([`register_thunk`]), else its code compiled by Cranelift, padded
/// ([`text_size`]). What [`crate::merge::similar::CodeFacts::thunk_size`] estimates.
pub fn similar_thunk_size(isa: &dyn TargetIsa, thunk: ir::Function) -> Result<u64, String> {
    match register_thunk(&thunk, isa) {
        Some(written) => Ok(written.bytes.len() as u64),
        None => text_size(isa, thunk),
    }
}

/// Merge-similar's questions about machine code, answered for any target without
/// compiling: a thunk written directly as machine code has its exact size, every other
/// function the estimate of the target's calibrated [`SizeModel`].
impl crate::merge::similar::CodeFacts for dyn TargetIsa + '_ {
    fn text_size(&self, func: &ir::Function) -> u64 {
        SizeModel::for_architecture(self.triple().architecture).estimate(func)
    }

    fn written_thunk(&self, thunk: &ir::Function) -> Option<WrittenThunk> {
        register_thunk(thunk, self).map(|written| WrittenThunk {
            bytes: written.bytes.len() as u64,
            moves_stack_pointer: written.moves_stack_pointer,
        })
    }
}

thread_local! {
    /// This thread's compilation context, reused by every function compiled on it, as
    /// Cranelift asks ("should be reused for compiling multiple functions in order to avoid
    /// needless allocator thrashing"): the register allocator's tables, the CFG, the
    /// dominator tree and the loop analysis keep their memory from one function to the next.
    static CONTEXT: RefCell<cranelift_codegen::Context> =
        RefCell::new(cranelift_codegen::Context::new());
}

/// `f` of the context that compiled `func` for `isa`; a panic in Cranelift turned into an
/// error. The context is this thread's ([`CONTEXT`]): a panic leaves a fresh one in its
/// place, and the compiled code is the same as from a context of its own (Cranelift clears
/// everything a compilation reads).
fn with_compiled<R>(
    isa: &dyn TargetIsa,
    func: ir::Function,
    f: impl FnOnce(&cranelift_codegen::Context) -> R,
) -> Result<R, String> {
    CONTEXT.with(|context| {
        let mut ctx = context.borrow_mut();
        ctx.clear();
        ctx.func = func;
        // Cranelift's backends assert some things the verifier does not check (i128
        // arguments without the LLVM ABI flag, `sret` returns, ...): a panic is an error.
        let compiled = crate::guard::unpanicked(|| {
            ctx.compile(isa, &mut ControlPlane::default())
                .map(|_| ())
                .map_err(|e| format!("{:?}", e.inner))
        });
        match compiled {
            Ok(Ok(())) => Ok(f(&ctx)),
            Ok(Err(error)) => Err(error),
            Err(panic) => {
                *ctx = cranelift_codegen::Context::new();
                Err(format!("Cranelift failed: {panic}"))
            }
        }
    })
}

/// The ISA to compile `isa`'s bodies with ([`super::epilogues::compiling_isa`]: on
/// x86_64 and aarch64, a twin that records block starts, for the epilogues), once for many bodies:
/// [`compile_one`] makes the twin itself when it is handed an ISA that needs one.
pub(super) fn compiling_isa(
    isa: &dyn TargetIsa,
) -> Result<Option<cranelift_codegen::isa::OwnedTargetIsa>, EmitError> {
    super::epilogues::compiling_isa(isa).map_err(|reason| EmitError::UnsupportedTarget {
        target: isa.triple().to_string(),
        reason,
    })
}

/// `func` compiled for `isa`; a merge-similar thunk (`similar_thunk`,
/// [`crate::merge::ModuleFunction::similar_thunk`]) is written directly when it is a
/// register thunk for `isa`. Any other function is Cranelift's code, whatever its shape.
pub(super) fn compile_one(
    isa: &dyn TargetIsa,
    func: ir::Function,
    similar_thunk: bool,
) -> Result<CompiledBody, String> {
    let written = similar_thunk.then(|| register_thunk(&func, isa)).flatten();
    if let Some(thunk) = written {
        let mut relocs = Vec::with_capacity(thunk.relocs.len());
        for (offset, kind, func_ref, addend) in thunk.relocs {
            let ExternalName::User(r) = func.dfg.ext_funcs[func_ref].name else {
                return Err("a thunk names a function that has no symbol number".into());
            };
            let name = &func.params.user_named_funcs()[r];
            relocs.push(ModuleReloc {
                offset,
                kind,
                name: ModuleRelocTarget::user(name.namespace, name.index),
                addend,
            });
        }
        let frame = FrameInfo::of_written_thunk(isa, thunk.frame);
        return Ok(CompiledBody::new(
            isa,
            thunk.bytes,
            thunk.alignment,
            relocs,
            frame,
        ));
    }
    let call_conv = func.signature.call_conv;
    // With the block starts its epilogues are found by ([`super::epilogues`]): the ISA
    // given when it records them, else its twin.
    let twin = super::epilogues::compiling_isa(isa)?;
    let isa = twin.as_deref().unwrap_or(isa);
    let (mut code, relocs) = with_compiled(isa, func, |ctx| {
        let code = ctx.compiled_code().expect("compiled above").clone();
        let relocs = module_relocs(&code, &ctx.func);
        (code, relocs)
    })?;
    // Rewritten in place (on Windows x64 some epilogues, at the same offsets), so that the
    // compiler's copy ([`crate::plugin::Merged::compiled_code`]) holds the bytes defined.
    let epilogues = super::epilogues::for_unwinding(isa, code.buffer.data_mut(), &code.bb_starts);
    let bytes = code.buffer.data().to_vec();
    let unwind = FrameInfo::of_compiled(&code, isa, call_conv, epilogues)?;
    let mut body = CompiledBody::new(isa, bytes, u64::from(code.buffer.alignment), relocs, unwind);
    body.code = Some(Arc::new(code));
    Ok(body)
}

/// The relocations of `code`, compiled from `func` or from a function that compiles alike,
/// with the names of `func`'s parameters. `FunctionOffset` relocations name "no function"
/// (the reserved id, which no module hands out); definition replaces it with the body's own
/// id.
fn module_relocs(code: &CompiledCode, func: &ir::Function) -> Vec<ModuleReloc> {
    let placeholder = FuncId::reserved_value();
    code.buffer
        .relocs()
        .iter()
        .map(|r| ModuleReloc::from_mach_reloc(r, func, placeholder))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::TargetInfo;

    fn functions(path: &str) -> Vec<ir::Function> {
        let path = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("the fixture reads");
        cranelift_reader::parse_functions(&text).expect("the fixture parses")
    }

    /// The bytes of `func` from a context of its own, as Cranelift compiles without reuse.
    fn fresh_bytes(isa: &dyn TargetIsa, func: &ir::Function) -> Vec<u8> {
        let mut ctx = cranelift_codegen::Context::for_function(func.clone());
        ctx.compile(isa, &mut ControlPlane::default())
            .expect("the fixture compiles");
        ctx.compiled_code()
            .expect("compiled")
            .buffer
            .data()
            .to_vec()
    }

    /// The thread's reused context compiles every function to the bytes a context of its
    /// own gives, whatever it compiled before, a function that panicked Cranelift included.
    #[test]
    fn a_reused_context_compiles_as_a_fresh_one() {
        let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").expect("known");
        let settings = [("preserve_frame_pointers", "true"), ("opt_level", "speed")]
            .map(|(k, v)| (k.to_string(), v.to_string()));
        let isa = super::super::build_isa(&target, &settings).expect("x86_64 is built in");
        let mut funcs = functions("fixtures/example.clif");
        funcs.extend(functions(
            "fixtures/exec/aligned_differing_opcodes_and_types.clif",
        ));
        assert!(
            funcs.len() > 4,
            "enough functions to compile one after another"
        );
        let panics = functions("fixtures/fuzz/i128_params_without_llvm_abi.clif");
        let expected: Vec<Vec<u8>> = funcs.iter().map(|f| fresh_bytes(&*isa, f)).collect();
        // Forwards, a panic, then backwards: each body after different predecessors.
        let mut order: Vec<usize> = (0..funcs.len()).collect();
        order.extend((0..funcs.len()).rev());
        for (step, &i) in order.iter().enumerate() {
            if step == funcs.len() {
                let error = with_compiled(&*isa, panics[0].clone(), |_| ()).err();
                assert!(
                    error
                        .as_deref()
                        .is_some_and(|e| e.contains("Cranelift failed")),
                    "the i128 fixture panics Cranelift: {error:?}"
                );
            }
            let bytes = with_compiled(&*isa, funcs[i].clone(), |ctx| {
                ctx.compiled_code()
                    .expect("compiled")
                    .buffer
                    .data()
                    .to_vec()
            })
            .expect("compiles");
            assert_eq!(
                bytes, expected[i],
                "{} compiled by the reused context (step {step})",
                funcs[i].name
            );
        }
    }
}
