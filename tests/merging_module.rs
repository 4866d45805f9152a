//! `MergingModule<M>` as a drop-in `cranelift_module::Module` (issue #12): code written
//! against the trait works unchanged, finishing leaves nothing to forget (aliases pointed,
//! every JIT id callable), errors come back at `define_function` naming the declared
//! function, shared bodies are anonymous, and the thread count does not change the output.

// The helpers return `ModuleError` as the `Module` trait does.
#![allow(clippy::result_large_err)]

use clif_merge::merge::similar::SimilarOptions;
use clif_merge::{Action, MergeOptions, MergingModule, TargetInfo};
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module, ModuleError};
use cranelift_object::object::{Object as _, ObjectSymbol as _};
use cranelift_object::{ObjectBuilder, ObjectModule};

/// `name(x) = x * k + c`, exported.
fn define_affine(
    module: &mut impl Module,
    name: &str,
    k: i64,
    c: i64,
) -> Result<FuncId, ModuleError> {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    let id = module.declare_function(name, Linkage::Export, &sig)?;
    let mut ctx = affine_body(module, sig, k, c);
    module.define_function(id, &mut ctx)?;
    Ok(id)
}

/// A context holding `fn(x) = x * k + c` with signature `sig`.
fn affine_body(module: &impl Module, sig: Signature, k: i64, c: i64) -> Context {
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let x = b.block_params(block)[0];
    let y = b.ins().imul_imm_s(x, k);
    let z = b.ins().iadd_imm_s(y, c);
    b.ins().return_(&[z]);
    b.finalize(module.target_config());
    ctx
}

fn object_module() -> ObjectModule {
    object_module_for("x86_64-unknown-linux-gnu")
}

fn object_module_for(triple: &str) -> ObjectModule {
    let isa = clif_merge::build_isa(
        &TargetInfo::from_triple_str(triple).unwrap(),
        &[("is_pic".to_string(), "true".to_string())],
    )
    .unwrap();
    ObjectModule::new(ObjectBuilder::new(isa, "wrapped", default_libcall_names()).unwrap())
}

/// The bytes of the function `name` in the object `bytes`.
fn function_bytes(bytes: &[u8], name: &str) -> Vec<u8> {
    use cranelift_object::object::ObjectSection as _;
    let file = cranelift_object::object::File::parse(bytes).unwrap();
    let symbol = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    let section = file
        .section_by_index(symbol.section_index().expect("a defined symbol"))
        .unwrap();
    let start = (symbol.address() - section.address()) as usize;
    let data = section.data().unwrap();
    // The next symbol of the section, or its end, ends the function.
    let end = file
        .symbols()
        .filter(|s| s.section_index() == symbol.section_index())
        .map(|s| (s.address() - section.address()) as usize)
        .filter(|&at| at > start)
        .min()
        .unwrap_or(data.len());
    data[start..end].to_vec()
}

fn aliases_options() -> MergeOptions {
    MergeOptions {
        mode: clif_merge::MergeMode::Aliases,
        ..MergeOptions::default()
    }
}

#[test]
fn an_object_finishes_with_its_aliases_pointed() {
    let mut m = MergingModule::new(object_module(), aliases_options()).unwrap();
    let a = define_affine(&mut m, "triple_a", 3, 1).unwrap();
    let b = define_affine(&mut m, "triple_b", 3, 1).unwrap();
    let other = define_affine(&mut m, "other", 5, 1).unwrap();
    let (product, merged) = m.finish().unwrap();
    assert_eq!(merged.action(b), Action::Alias);
    assert_eq!(merged.body_of(b), a);
    assert_eq!(merged.action(other), Action::Keep);
    let bytes = product.emit().unwrap();
    let file = cranelift_object::object::File::parse(&*bytes).unwrap();
    let address = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no symbol {name}"))
            .address()
    };
    // The alias is at its body's address, not a zero-length function at the end.
    assert_eq!(address("triple_b"), address("triple_a"));
    assert_ne!(address("other"), address("triple_a"));
}

#[test]
fn every_jit_id_is_callable_after_finalizing() {
    let jit = JITModule::new(JITBuilder::new(default_libcall_names()).unwrap());
    let mut m = MergingModule::new(jit, MergeOptions::default()).unwrap();
    let ids = [
        define_affine(&mut m, "f", 3, 1).unwrap(),
        define_affine(&mut m, "g", 3, 1).unwrap(),
        define_affine(&mut m, "h", 3, 2).unwrap(),
    ];
    let finalized = m.finalize_definitions().unwrap();
    let (jit, merged) = (&finalized.module, &finalized.merged);
    assert_eq!(merged.body_of(ids[1]), ids[0]);
    for (id, c) in ids.iter().zip([1, 1, 2]) {
        // SAFETY: `fn(i64) -> i64` in the host's default convention.
        let f = unsafe {
            std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(
                jit.get_finalized_function(*id),
            )
        };
        assert_eq!(f(5), 15 + c);
    }
}

#[test]
fn a_bad_function_is_refused_at_define_function_by_its_declared_name() {
    let mut m = MergingModule::new(object_module(), MergeOptions::default()).unwrap();
    let mut sig = m.make_signature();
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    let id = m.declare_function("broken", Linkage::Export, &sig).unwrap();
    // A function with a block that has no terminator fails the verifier.
    let mut ctx = m.make_context();
    ctx.func.signature = sig.clone();
    let block = ctx.func.dfg.make_block();
    ctx.func.layout.append_block(block);
    let err = m.define_function(id, &mut ctx).unwrap_err();
    assert!(
        matches!(err, ModuleError::Compilation(_)),
        "expected a verifier error, got {err:?}"
    );
    // A signature that is not the declared one names the function.
    let mut wrong = m.make_context();
    wrong.func.signature = m.make_signature();
    let err = m.define_function(id, &mut wrong).unwrap_err();
    assert!(err.to_string().contains("broken"), "{err}");
    // The id can still be defined correctly, and the module finishes.
    let good = define_affine(&mut m, "good", 2, 0).unwrap();
    let mut ctx = affine_body(&m, sig, 1, 0);
    m.define_function(id, &mut ctx).unwrap();
    // Defining twice is refused by name.
    let err = m.define_function(id, &mut ctx).unwrap_err();
    assert!(
        matches!(&err, ModuleError::DuplicateDefinition(n) if n == "broken"),
        "{err:?}"
    );
    let (product, merged) = m.finish().unwrap();
    assert_eq!(merged.action(good), Action::Keep);
    assert!(!product.emit().unwrap().is_empty());
}

#[test]
fn shared_bodies_are_anonymous() {
    let mut m = MergingModule::new(object_module(), aliases_options())
        .unwrap()
        .with_merge_similar(SimilarOptions {
            cost_model: false,
            alignment: false,
            ..SimilarOptions::default()
        });
    let ids: Vec<FuncId> = [11, 22, 33]
        .into_iter()
        .enumerate()
        .map(|(i, c)| define_affine(&mut m, &format!("affine_{i}"), 0x1234_5678, c).unwrap())
        .collect();
    let (product, merged) = m.finish().unwrap();
    // Each name is a thunk into one body, under an id of its own that no name stands for,
    // whose code the merger compiled.
    let body = merged
        .shared_body_of(ids[0])
        .expect("affine_0 calls a shared body");
    for &id in &ids {
        assert_eq!(merged.shared_body_of(id), Some(body));
        assert_eq!(merged.body_of(id), id, "a thunk runs its own code first");
    }
    assert!(!ids.contains(&body));
    assert_eq!(merged.shared_body_of(body), None);
    assert!(merged.defined_code().any(|(id, _)| id == body));
    let bytes = product.emit().unwrap();
    let file = cranelift_object::object::File::parse(&*bytes).unwrap();
    let names: Vec<String> = file
        .symbols()
        .filter_map(|s| s.name().ok().map(String::from))
        .collect();
    assert!(names.iter().any(|n| n == "affine_2"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.contains("clif_merge_similar")),
        "a shared body took a name in the compiler's namespace: {names:?}"
    );
}

#[test]
fn the_thread_count_does_not_change_the_object() {
    let build = |threads: Option<usize>| {
        let mut m = MergingModule::new(object_module(), MergeOptions::default()).unwrap();
        if let Some(n) = threads {
            m = m.with_threads(n).unwrap();
        }
        for i in 0..12 {
            define_affine(&mut m, &format!("f{i}"), 3 + (i % 4), 1).unwrap();
        }
        m.finish().unwrap().0.emit().unwrap()
    };
    let default = build(None);
    assert_eq!(build(Some(1)), default);
    assert_eq!(build(Some(3)), default);
}

/// `name(x, y) = gc_point(x) ; x / y` with `x` in a user stack map at the call: a trap
/// (division by zero) and a stack map, for the metadata test.
fn define_with_metadata(
    module: &mut impl Module,
    name: &str,
    gc_point: FuncId,
) -> Result<(FuncId, cranelift_codegen::ir::Function), ModuleError> {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(I64));
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    let id = module.declare_function(name, Linkage::Export, &sig)?;
    let config = module.target_config();
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let callee = module.declare_func_in_func(gc_point, &mut ctx.func);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let (x, y) = (b.block_params(block)[0], b.block_params(block)[1]);
    b.declare_value_needs_stack_map(x);
    b.ins().call(callee, &[y]);
    let q = b.ins().udiv(x, y);
    b.ins().return_(&[q]);
    b.finalize(config);
    let func = ctx.func.clone();
    module.define_function(id, &mut ctx)?;
    Ok((id, func))
}

/// What `merged.compiled_code(id)` gives a compiler for its trap tables, GC maps and
/// disassembly: `Context::compile`'s metadata, and the bytes defined in the object, for
/// Linux and for Windows x64 (where Cranelift's epilogues that free the frame with `add
/// rsp` are written otherwise).
#[test]
fn compiled_metadata_matches_compiling_the_function_alone() {
    for triple in ["x86_64-unknown-linux-gnu", "x86_64-pc-windows-gnu"] {
        compiled_metadata_matches_for(triple);
    }
}

fn compiled_metadata_matches_for(triple: &str) {
    let mut m = MergingModule::new(object_module_for(triple), MergeOptions::default()).unwrap();
    let mut sig = m.make_signature();
    sig.params.push(AbiParam::new(I64));
    let gc_point = m
        .declare_function("gc_point", Linkage::Import, &sig)
        .unwrap();
    let (kept, func) = define_with_metadata(&mut m, "divide", gc_point).unwrap();
    let (folded, _) = define_with_metadata(&mut m, "divide_again", gc_point).unwrap();
    // The function alone, as `ObjectModule::define_function` would compile it.
    let mut alone = cranelift_codegen::Context::for_function(func);
    alone
        .compile(m.isa(), &mut Default::default())
        .map_err(|e| format!("{:?}", e.inner))
        .unwrap();
    let want = alone.compiled_code().unwrap();
    let (product, merged) = m.finish().unwrap();
    let defined = function_bytes(&product.emit().unwrap(), "divide");
    // Windows x64's epilogue frees the frame with `lea rsp, [rbp+0]` instead.
    let windows = triple.contains("windows");
    assert_eq!(
        defined != want.buffer.data(),
        windows,
        "{triple}: the code defined is Cranelift's but on Windows"
    );
    assert_eq!(merged.body_of(folded), kept);
    for id in [kept, folded] {
        let got = merged
            .compiled_code(id)
            .expect("metadata for every merged id");
        assert_eq!(
            got.buffer.data(),
            &defined[..],
            "{triple}: not the bytes defined"
        );
        assert!(!want.buffer.traps().is_empty(), "the division traps");
        assert_eq!(got.buffer.traps(), want.buffer.traps());
        assert!(
            !want.buffer.user_stack_maps().is_empty(),
            "x is live across the call"
        );
        assert_eq!(got.buffer.user_stack_maps(), want.buffer.user_stack_maps());
        assert_eq!(
            got.buffer
                .call_sites()
                .map(|c| c.ret_addr)
                .collect::<Vec<_>>(),
            want.buffer
                .call_sites()
                .map(|c| c.ret_addr)
                .collect::<Vec<_>>()
        );
    }
}
