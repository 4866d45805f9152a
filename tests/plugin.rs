//! The backend plugin's errors: everything a caller of `FunctionMerger` can get wrong comes
//! back as a `PluginError` value (from `add`, `plan`, `define_in_object`, `define_in_jit`),
//! never as a panic; and a call rejected for bad input defines nothing, so the caller can
//! still define its functions itself.

use clif_merge::merge::similar::SimilarOptions;
use clif_merge::plugin::{FunctionMerger, Merged, PluginError};
use clif_merge::{Action, EmitError, MergeOptions, TargetInfo};
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{
    AbiParam, Function, InstBuilder, MemFlagsData, Signature, Type, UserFuncName,
};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, DataDescription, DataId, FuncId, Linkage, Module};
use cranelift_object::object::{self, Object as _, ObjectSymbol as _};
use cranelift_object::{ObjectBuilder, ObjectModule};

fn object_module() -> ObjectModule {
    let isa = clif_merge::build_isa(
        &TargetInfo::host(),
        &[("is_pic".to_string(), "true".to_string())],
    )
    .unwrap();
    ObjectModule::new(ObjectBuilder::new(isa, "plugin_test", default_libcall_names()).unwrap())
}

fn jit_module() -> JITModule {
    JITModule::new(JITBuilder::new(default_libcall_names()).unwrap())
}

fn signature(module: &dyn Module, ty: Type) -> Signature {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(ty));
    sig.returns.push(AbiParam::new(ty));
    sig
}

/// `fn(x: ty) -> ty { x + c }`, named after `id`.
fn add_const(module: &dyn Module, id: FuncId, ty: Type, c: i64) -> Function {
    let mut func =
        Function::with_name_signature(UserFuncName::user(0, id.as_u32()), signature(module, ty));
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let x = b.block_params(block)[0];
    let y = b.ins().iadd_imm_s(x, c);
    b.ins().return_(&[y]);
    b.finalize(module.target_config());
    func
}

/// Declare `name` as `fn(i64) -> i64` with `linkage`.
fn declare(module: &mut dyn Module, name: &str, linkage: Linkage) -> FuncId {
    let sig = signature(module, I64);
    module.declare_function(name, linkage, &sig).unwrap()
}

/// Where the merger's error is observed.
#[derive(Clone, Copy, Debug)]
enum EntryPoint {
    Plan,
    Object,
    Jit,
}

const ENTRY_POINTS: [EntryPoint; 3] = [EntryPoint::Plan, EntryPoint::Object, EntryPoint::Jit];

/// Hands functions to the merger and returns the well-formed ones, to define directly once
/// the merger has refused.
type Setup = fn(&mut dyn Module, &mut FunctionMerger) -> Vec<(FuncId, Function)>;

impl EntryPoint {
    /// Run `setup`, then the merger, which must fail; then check that the module is as
    /// before: the well-formed functions can still be defined directly and the module
    /// finishes (object written, JIT finalized and callable).
    fn error(self, setup: Setup) -> PluginError {
        match self {
            EntryPoint::Plan | EntryPoint::Object => {
                let mut module = object_module();
                let mut merger = FunctionMerger::new(module.isa(), MergeOptions::default())
                    .expect("a supported target");
                let fallback = setup(&mut module, &mut merger);
                let err = if let EntryPoint::Plan = self {
                    merger.plan(&module).err()
                } else {
                    merger.define_in_object(&mut module).err()
                }
                .unwrap_or_else(|| panic!("{self:?}: the merger accepted the input"));
                for (id, func) in fallback {
                    module
                        .define_function(id, &mut Context::for_function(func))
                        .unwrap_or_else(|e| panic!("{self:?}: defining {id} after the error: {e}"));
                }
                assert!(!module.finish().emit().unwrap().is_empty());
                err
            }
            EntryPoint::Jit => {
                let mut module = jit_module();
                let mut merger = FunctionMerger::new(module.isa(), MergeOptions::default())
                    .expect("a supported target");
                let fallback = setup(&mut module, &mut merger);
                let err = merger
                    .define_in_jit(&mut module)
                    .err()
                    .expect("Jit: the merger accepted the input");
                let ids: Vec<FuncId> = fallback.iter().map(|(id, _)| *id).collect();
                for (id, func) in fallback {
                    module
                        .define_function(id, &mut Context::for_function(func))
                        .unwrap_or_else(|e| panic!("Jit: defining {id} after the error: {e}"));
                }
                module.finalize_definitions().unwrap();
                for id in ids {
                    let f = unsafe {
                        std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(
                            module.get_finalized_function(id),
                        )
                    };
                    assert_eq!(f(40), 41, "Jit: the directly defined function runs");
                }
                err
            }
        }
    }
}

#[test]
fn function_not_declared_in_the_module() {
    for entry in ENTRY_POINTS {
        let err = entry.error(|module, merger| {
            let id = declare(module, "declared", Linkage::Export);
            merger.add(id, add_const(module, id, I64, 1)).unwrap();
            // An id this module never gave out (e.g. one from another module).
            let stray = FuncId::from_u32(41);
            merger.add(stray, add_const(module, stray, I64, 2)).unwrap();
            vec![(id, add_const(module, id, I64, 1))]
        });
        match &err {
            PluginError::UnknownFunction(id) => assert_eq!(id.as_u32(), 41, "{entry:?}"),
            other => panic!("{entry:?}: expected UnknownFunction, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "function funcid41 is not declared in the module"
        );
    }
}

#[test]
fn function_added_twice() {
    let mut module = jit_module();
    let id = declare(&mut module, "f", Linkage::Export);
    let mut merger =
        FunctionMerger::new(module.isa(), MergeOptions::default()).expect("a supported target");
    merger.add(id, add_const(&module, id, I64, 1)).unwrap();
    let err = merger
        .add(id, add_const(&module, id, I64, 2))
        .expect_err("a second body for the same id is refused");
    assert!(
        matches!(err, PluginError::AddedTwice(twice) if twice == id),
        "{err:?}"
    );
    assert_eq!(err.to_string(), format!("function {id} was added twice"));

    // The refusal is not fatal: the first body is the one defined.
    let merged = merger.define_in_jit(&mut module).unwrap();
    assert_eq!(merged.action(id), Action::Keep);
    module.finalize_definitions().unwrap();
    let f = unsafe {
        std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(
            module.get_finalized_function(id),
        )
    };
    assert_eq!(f(40), 41);
}

#[test]
fn signature_not_matching_its_declaration() {
    for entry in ENTRY_POINTS {
        let err = entry.error(|module, merger| {
            let good = declare(module, "good", Linkage::Export);
            merger.add(good, add_const(module, good, I64, 1)).unwrap();
            // Declared as fn(i64) -> i64, built as fn(i32) -> i32.
            let bad = declare(module, "narrow", Linkage::Export);
            merger.add(bad, add_const(module, bad, I32, 1)).unwrap();
            vec![
                (good, add_const(module, good, I64, 1)),
                (bad, add_const(module, bad, I64, 1)),
            ]
        });
        match &err {
            PluginError::SignatureMismatch {
                id,
                name,
                actual,
                declared,
            } => {
                assert_eq!((id.as_u32(), name.as_str()), (1, "narrow"), "{entry:?}");
                assert!(
                    actual.contains("i32") && !actual.contains("i64"),
                    "{actual}"
                );
                assert!(
                    declared.contains("i64") && !declared.contains("i32"),
                    "{declared}"
                );
            }
            other => panic!("{entry:?}: expected SignatureMismatch, got {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message.contains("narrow") && message.contains("does not match its declaration"),
            "{message}"
        );
    }
}

#[test]
fn function_declared_as_an_import() {
    for entry in ENTRY_POINTS {
        let err = entry.error(|module, merger| {
            let good = declare(module, "good", Linkage::Export);
            merger.add(good, add_const(module, good, I64, 1)).unwrap();
            let import = declare(module, "elsewhere", Linkage::Import);
            merger
                .add(import, add_const(module, import, I64, 1))
                .unwrap();
            vec![(good, add_const(module, good, I64, 1))]
        });
        match &err {
            PluginError::ImportDefinition { id, name } => {
                assert_eq!((id.as_u32(), name.as_str()), (1, "elsewhere"), "{entry:?}")
            }
            other => panic!("{entry:?}: expected ImportDefinition, got {other:?}"),
        }
        assert!(err.to_string().contains("declared as an import"), "{err}");
    }
}

#[test]
fn function_that_does_not_compile() {
    // `plan` does not compile, so only the define calls see it. Of several that do not
    // compile (in parallel), the first in the module's order is named, every time.
    for entry in [EntryPoint::Object, EntryPoint::Jit].repeat(4) {
        let err = entry.error(|module, merger| {
            let good = declare(module, "good", Linkage::Export);
            merger.add(good, add_const(module, good, I64, 1)).unwrap();
            // A block without a terminator: the verifier rejects it. (Each with another
            // number of parameters, so that identical merging does not fold them.)
            let mut bad = Vec::new();
            for (i, name) in ["unterminated", "unterminated_too", "unterminated_three"]
                .into_iter()
                .enumerate()
            {
                let f = declare(module, name, Linkage::Export);
                let mut func = Function::with_name_signature(
                    UserFuncName::user(0, f.as_u32()),
                    signature(module, I64),
                );
                let block = func.dfg.make_block();
                func.layout.append_block(block);
                for _ in 0..=i {
                    func.dfg.append_block_param(block, I64);
                }
                merger.add(f, func).unwrap();
                bad.push(f);
            }
            let mut calls = vec![(good, add_const(module, good, I64, 1))];
            calls.extend(bad.iter().map(|&f| (f, add_const(module, f, I64, 1))));
            calls
        });
        match &err {
            // Named as the module declared it, not by the merger's `u0:N`.
            PluginError::Emit(EmitError::Codegen { function, .. }) => {
                assert_eq!(function, "unterminated", "{entry:?}")
            }
            other => panic!("{entry:?}: expected Emit(Codegen), got {other:?}"),
        }
    }
}

#[test]
fn function_also_defined_directly() {
    // The caller defined `f` itself and handed it to the merger too: an error, not a panic.
    let mut module = object_module();
    let f = declare(&mut module, "f", Linkage::Export);
    module
        .define_function(f, &mut Context::for_function(add_const(&module, f, I64, 1)))
        .unwrap();
    let mut merger =
        FunctionMerger::new(module.isa(), MergeOptions::default()).expect("a supported target");
    merger.add(f, add_const(&module, f, I64, 1)).unwrap();
    match merger.define_in_object(&mut module) {
        Err(PluginError::Emit(EmitError::Module { context, .. })) => {
            assert!(context.ends_with(" f"), "{context}")
        }
        Err(other) => panic!("expected Emit(Module), got {other:?}"),
        Ok(_) => panic!("a function defined twice was accepted"),
    }
}

#[test]
fn functions_never_added_are_kept_as_they_are() {
    // A function the caller defined itself, next to merged ones: `action` and `body_of`
    // answer for it too, and calls from merged code reach it.
    let mut module = jit_module();
    let own = declare(&mut module, "own", Linkage::Export);
    module
        .define_function(
            own,
            &mut Context::for_function(add_const(&module, own, I64, 1)),
        )
        .unwrap();
    let mut merger =
        FunctionMerger::new(module.isa(), MergeOptions::default()).expect("a supported target");
    let a = declare(&mut module, "a", Linkage::Export);
    let b = declare(&mut module, "b", Linkage::Export);
    for id in [a, b] {
        merger.add(id, add_const(&module, id, I64, 5)).unwrap();
    }
    let merged = merger.define_in_jit(&mut module).unwrap();
    assert_eq!(merged.plan().folded_count(), 1);
    assert_eq!(merged.action(own), Action::Keep);
    assert_eq!(merged.body_of(own), own);
    assert_eq!(merged.body_of(b), a);
    module.finalize_definitions().unwrap();
    for (id, expected) in [(own, 41), (a, 45), (b, 45)] {
        let f = unsafe {
            std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(
                module.get_finalized_function(id),
            )
        };
        assert_eq!(f(40), expected, "{id}");
    }
}

/// `fn(x: i64) -> i64`: `y = (x + *data)² - (x + *data)` when `data` is given (else `y = x`),
/// then `callee(y)` when `callee` is given (else `y`).
fn body_with(
    module: &mut dyn Module,
    id: FuncId,
    data: Option<DataId>,
    callee: Option<FuncId>,
) -> Function {
    let mut func =
        Function::with_name_signature(UserFuncName::user(0, id.as_u32()), signature(module, I64));
    let gv = data.map(|d| module.declare_data_in_func(d, &mut func));
    let fref = callee.map(|c| module.declare_func_in_func(c, &mut func));
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let mut y = b.block_params(block)[0];
    if let Some(gv) = gv {
        let addr = b.ins().symbol_value(I64, gv);
        let v = b.ins().load(I64, MemFlagsData::trusted(), addr, 0);
        let s = b.ins().iadd(y, v);
        let sq = b.ins().imul(s, s);
        y = b.ins().isub(sq, s);
    }
    if let Some(f) = fref {
        let call = b.ins().call(f, &[y]);
        y = b.inst_results(call)[0];
    }
    b.ins().return_(&[y]);
    b.finalize(module.target_config());
    func
}

/// The ids of [`fold_everything`]: `a`, `b` local and equal, `c` calls `b`; `x`, `y`, `z`
/// exported and equal, calling `a`; nobody compares `y`'s address.
struct Folding {
    a: FuncId,
    b: FuncId,
    c: FuncId,
    x: FuncId,
    y: FuncId,
    z: FuncId,
}

/// Declare a data object holding 42 and the functions of [`Folding`], all reading it, and
/// hand them to `merger` (nobody compares `y`'s address).
fn fold_everything(module: &mut dyn Module, merger: &mut FunctionMerger) -> Folding {
    let (folding, bodies) = folding_bodies(module);
    for (id, func) in bodies {
        merger.add(id, func).unwrap();
    }
    merger.set_unnamed_addr(folding.y);
    folding
}

/// [`fold_everything`]'s declarations, and its bodies in declaration order.
fn folding_bodies(module: &mut dyn Module) -> (Folding, Vec<(FuncId, Function)>) {
    let data = module
        .declare_data("forty_two", Linkage::Export, false, false)
        .unwrap();
    let mut desc = DataDescription::new();
    desc.define(42i64.to_le_bytes().to_vec().into_boxed_slice());
    module.define_data(data, &desc).unwrap();
    let [a, b, c, x, y, z] = [
        ("a", Linkage::Local),
        ("b", Linkage::Local),
        ("c", Linkage::Export),
        ("x", Linkage::Export),
        ("y", Linkage::Export),
        ("z", Linkage::Export),
    ]
    .map(|(name, linkage)| declare(module, name, linkage));
    let bodies = [
        (a, Some(data), None),
        (b, Some(data), None),
        (c, None, Some(b)),
        (x, Some(data), Some(a)),
        (y, Some(data), Some(a)),
        (z, Some(data), Some(a)),
    ]
    .into_iter()
    .map(|(id, data, callee)| (id, body_with(module, id, data, callee)))
    .collect();
    (Folding { a, b, c, x, y, z }, bodies)
}

fn count(merged: &Merged, ids: &[FuncId], action: Action) -> usize {
    ids.iter()
        .filter(|&&id| merged.action(id) == action)
        .count()
}

#[test]
fn action_says_what_each_id_became_in_an_object() {
    let mut module = object_module();
    let mut merger =
        FunctionMerger::new(module.isa(), MergeOptions::default()).expect("a supported target");
    let f = fold_everything(&mut module, &mut merger);
    let merged = merger.define_in_object(&mut module).unwrap();
    let all = [f.a, f.b, f.c, f.x, f.y, f.z];
    assert_eq!(merged.plan().folded_count(), 3);
    // The plan erases `b` (local, nobody observes it), but the caller declared it: it
    // stays defined, as a local alias of `a`.
    let actions = all.map(|id| merged.action(id));
    use Action::*;
    assert_eq!(actions, [Keep, Alias, Keep, Keep, Alias, Thunk]);
    assert_eq!(
        all.map(|id| merged.body_of(id)),
        [f.a, f.a, f.c, f.x, f.x, f.x]
    );
    assert_eq!(count(&merged, &all, Alias), merged.summary.aliases);
    assert_eq!(count(&merged, &all, Thunk), merged.summary.thunks);

    let mut product = module.finish();
    merged.finish_object(&mut product).unwrap();
    let bytes = product.emit().unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let symbol = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no symbol {name}"))
    };
    assert_eq!(symbol("b").address(), symbol("a").address());
    assert!(symbol("b").is_local());
    assert_eq!(symbol("y").address(), symbol("x").address());
    assert!(symbol("y").is_global());
    assert_ne!(symbol("z").address(), symbol("x").address());
    assert_eq!(symbol("z").size(), 5, "a thunk is one jmp rel32");
}

#[test]
fn action_says_what_each_id_became_in_a_jit() {
    let mut module = jit_module();
    let mut merger =
        FunctionMerger::new(module.isa(), MergeOptions::default()).expect("a supported target");
    let f = fold_everything(&mut module, &mut merger);
    let merged = merger.define_in_jit(&mut module).unwrap();
    let all = [f.a, f.b, f.c, f.x, f.y, f.z];
    // A JIT has no aliases: what the object makes an alias is a thunk here.
    use Action::*;
    assert_eq!(
        all.map(|id| merged.action(id)),
        [Keep, Thunk, Keep, Keep, Thunk, Thunk]
    );
    assert_eq!(merged.summary.aliases, 0);
    assert_eq!(count(&merged, &all, Thunk), merged.summary.thunks);
    module.finalize_definitions().unwrap();
    let call = |id: FuncId| {
        let f = unsafe {
            std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(
                module.get_finalized_function(id),
            )
        };
        f(1)
    };
    // (1 + 42)² - 43 = 1806; x..z: the same on 1806.
    assert_eq!(all.map(call), [1806, 1806, 1806, 3413256, 3413256, 3413256]);
    let addresses = all.map(|id| module.get_finalized_function(id) as usize);
    let mut distinct = addresses.to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 6, "every id has its own code in a JIT");
}

/// With merge-similar, functions that differ only in a constant share one body, declared by
/// the merger as a local function of the module; every id the compiler declared is still a
/// function of its own that returns what it returned before (JIT), and the object defines
/// the body as a local symbol beside them.
#[test]
fn merge_similar_declares_the_shared_body_and_keeps_every_id() {
    let constants = [-1i64, 999, 1999, 0x7fff_ffff_ffff, -0x8000_0000];
    let mut module = jit_module();
    let ids: Vec<FuncId> = (0..constants.len())
        .map(|i| declare(&mut module, &format!("add_{i}"), Linkage::Export))
        .collect();
    let mut merger = FunctionMerger::new(module.isa(), MergeOptions::default())
        .unwrap()
        .with_merge_similar(SimilarOptions {
            cost_model: false,
            alignment: false,
            ..SimilarOptions::default()
        });
    for (&id, &c) in ids.iter().zip(&constants) {
        merger.add(id, add_const(&module, id, I64, c)).unwrap();
    }
    merger.define_in_jit(&mut module).unwrap();
    module.finalize_definitions().unwrap();
    for (&id, &c) in ids.iter().zip(&constants) {
        let f: extern "C" fn(i64) -> i64 =
            unsafe { std::mem::transmute(module.get_finalized_function(id)) };
        for x in [0i64, 5, -7, i64::MAX] {
            assert_eq!(f(x), x.wrapping_add(c), "add_{c}({x})");
        }
    }
    // The shared body is anonymous: it adds no name to the compiler's namespace.
    let bodies = module
        .declarations()
        .get_functions()
        .filter(|(_, d)| d.name.is_none())
        .count();
    assert_eq!(bodies, 1, "one shared body declared");

    let mut module = object_module();
    let ids: Vec<FuncId> = (0..constants.len())
        .map(|i| declare(&mut module, &format!("add_{i}"), Linkage::Export))
        .collect();
    let mut merger = FunctionMerger::new(module.isa(), MergeOptions::default())
        .unwrap()
        .with_merge_similar(SimilarOptions {
            cost_model: false,
            alignment: false,
            ..SimilarOptions::default()
        });
    for (&id, &c) in ids.iter().zip(&constants) {
        merger.add(id, add_const(&module, id, I64, c)).unwrap();
    }
    let merged = merger.define_in_object(&mut module).unwrap();
    let mut product = module.finish();
    merged.finish_object(&mut product).unwrap();
    let bytes = product.emit().unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let defined: Vec<(String, bool)> = file
        .symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
        .map(|s| {
            (
                s.name().unwrap().trim_start_matches('_').to_string(),
                s.is_global(),
            )
        })
        .collect();
    for i in 0..constants.len() {
        assert!(defined.contains(&(format!("add_{i}"), true)), "{defined:?}");
    }
    assert!(
        defined
            .iter()
            .any(|(n, global)| n.starts_with(".L") && !global),
        "a local, anonymous shared body: {defined:?}"
    );
}

#[test]
fn a_shared_body_takes_no_name_in_the_callers_module() {
    // Equal preemptible functions share a local body. In the caller's module it is
    // anonymous: a name of ours could be one the caller declared for something else (here
    // an import spelled as the body's name would be, which must stay an import).
    let mut module = jit_module();
    let a = declare(&mut module, "a", Linkage::Preemptible);
    let b = declare(&mut module, "b", Linkage::Preemptible);
    let symbol = format!("clif_merge_body_u0_{}", a.as_u32());
    let import = declare(&mut module, &symbol, Linkage::Import);
    let mut merger = FunctionMerger::new(module.isa(), MergeOptions::default()).unwrap();
    for id in [a, b] {
        merger.add(id, add_const(&module, id, I64, 7)).unwrap();
    }
    let merged = merger.define_in_jit(&mut module).unwrap();
    assert_eq!(merged.plan().folded_count(), 1);
    let decls = module.declarations();
    assert_eq!(decls.get_function_decl(import).linkage, Linkage::Import);
    assert_eq!(
        decls
            .get_functions()
            .filter(|(_, d)| d.name.is_none())
            .count(),
        1,
        "one anonymous shared body"
    );
    module.finalize_definitions().unwrap();
    for id in [a, b] {
        let f: extern "C" fn(i64) -> i64 =
            unsafe { std::mem::transmute(module.get_finalized_function(id)) };
        assert_eq!(f(35), 42, "{id}");
    }
}

/// The object the merger writes for one set of functions, handed to it in `order` (indices
/// into the declaration order): [`fold_everything`]'s, and `add_0`..`add_4`, which differ
/// in a constant.
fn object_adding_in(order: &[usize], similar: Option<SimilarOptions>) -> Vec<u8> {
    let mut module = object_module();
    let mut merger = FunctionMerger::new(module.isa(), MergeOptions::default()).unwrap();
    if let Some(similar) = similar {
        merger = merger.with_merge_similar(similar);
    }
    let (folding, mut functions) = folding_bodies(&mut module);
    for (i, constant) in [3i64, 5, 7, 11, 13].into_iter().enumerate() {
        let id = declare(&mut module, &format!("add_{i}"), Linkage::Export);
        functions.push((id, add_const(&module, id, I64, constant)));
    }
    assert_eq!(order.len(), functions.len());
    for &i in order {
        let (id, func) = functions[i].clone();
        merger.add(id, func).unwrap();
    }
    merger.set_unnamed_addr(folding.y);
    let merged = merger.define_in_object(&mut module).unwrap();
    assert!(merged.plan().folded_count() > 0, "something folds");
    let mut product = module.finish();
    merged.finish_object(&mut product).unwrap();
    product.emit().unwrap()
}

/// A compiler that hands its functions over as its threads finish them adds them in any
/// order: the object depends on the functions and their declarations, not on that order.
#[test]
fn the_order_functions_are_added_in_changes_no_byte() {
    let n = 11;
    let forward: Vec<usize> = (0..n).collect();
    let backward: Vec<usize> = (0..n).rev().collect();
    let shuffled: Vec<usize> = (0..n).map(|i| (i * 7 + 3) % n).collect();
    let without_cost = SimilarOptions {
        cost_model: false,
        alignment: false,
        ..SimilarOptions::default()
    };
    for similar in [None, Some(SimilarOptions::default()), Some(without_cost)] {
        let reference = object_adding_in(&forward, similar.clone());
        for order in [&backward, &shuffled] {
            assert!(
                object_adding_in(order, similar.clone()) == reference,
                "adding in order {order:?} (merge-similar {similar:?}) wrote another object"
            );
        }
    }
}
