//! MergeFunctions as a drop-in `cranelift_module::Module`.
//!
//! `compile` below is a small compiler written against `impl cranelift_module::Module`,
//! as compilers built on Cranelift are: it declares functions, builds their bodies and
//! calls `define_function`. It knows nothing of clif-merge. `main` runs it twice, on a
//! plain `JITModule` and on `MergingModule<JITModule>`, calls every function in both, and
//! checks that the results are the same; the wrapped run compiled fewer bodies.
//!
//! ```text
//! cargo run --release --example drop_in
//! ```

use std::process::ExitCode;

use clif_merge::{MergeOptions, MergingModule};
use cranelift_codegen::ir::{types::I64, AbiParam, InstBuilder};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module, ModuleError};

/// What each function of the little language computes from `x`.
enum Expr {
    /// `x * x + k`
    SquarePlus(i64),
    /// `f(x) + f(x + 1)`, `f` another function of the program.
    Twice(&'static str),
}

/// The program: generic instantiations written twice, as compilers emit them.
const PROGRAM: [(&str, Expr); 6] = [
    ("square_i64", Expr::SquarePlus(0)),
    ("square_u64", Expr::SquarePlus(0)),
    ("square_plus_one", Expr::SquarePlus(1)),
    ("pair_i64", Expr::Twice("square_i64")),
    ("pair_u64", Expr::Twice("square_u64")),
    ("pair_plus_one", Expr::Twice("square_plus_one")),
];

/// Compile the program into any module: declare every function, then define each body.
fn compile(module: &mut impl Module) -> Result<Vec<(&'static str, FuncId)>, Box<ModuleError>> {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    let mut ids = Vec::new();
    for (name, _) in &PROGRAM {
        ids.push((*name, module.declare_function(name, Linkage::Export, &sig)?));
    }
    let config = module.target_config();
    let mut ctx = module.make_context();
    let mut builder_ctx = FunctionBuilderContext::new();
    for ((_, expr), &(_, id)) in PROGRAM.iter().zip(&ids) {
        ctx.func.signature = sig.clone();
        let callee = match expr {
            Expr::Twice(name) => {
                let &(_, callee) = ids.iter().find(|(n, _)| n == name).expect("declared");
                Some(module.declare_func_in_func(callee, &mut ctx.func))
            }
            Expr::SquarePlus(_) => None,
        };
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut builder_ctx);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        b.seal_block(block);
        let x = b.block_params(block)[0];
        let result = match (expr, callee) {
            (Expr::SquarePlus(k), _) => {
                let square = b.ins().imul(x, x);
                b.ins().iadd_imm_s(square, *k)
            }
            (Expr::Twice(_), Some(f)) => {
                let call = b.ins().call(f, &[x]);
                let first = b.inst_results(call)[0];
                let next = b.ins().iadd_imm_s(x, 1);
                let call = b.ins().call(f, &[next]);
                let second = b.inst_results(call)[0];
                b.ins().iadd(first, second)
            }
            (Expr::Twice(_), None) => unreachable!("a callee is declared above"),
        };
        b.ins().return_(&[result]);
        b.finalize(config);
        module.define_function(id, &mut ctx)?;
        module.clear_context(&mut ctx);
    }
    Ok(ids)
}

/// Call every function on a few inputs.
fn run(module: &JITModule, ids: &[(&str, FuncId)]) -> Vec<String> {
    let mut out = Vec::new();
    for &(name, id) in ids {
        // SAFETY: every function is `fn(i64) -> i64` in the host's default convention.
        let f = unsafe {
            std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(
                module.get_finalized_function(id),
            )
        };
        for x in [0, 3, -7] {
            out.push(format!("{name}({x}) = {}", f(x)));
        }
    }
    out
}

fn main() -> ExitCode {
    let result = (|| -> Result<ExitCode, Box<dyn std::error::Error>> {
        // Without merging: the compiler and its module as they are.
        let mut plain = JITModule::new(JITBuilder::new(default_libcall_names())?);
        let ids = compile(&mut plain)?;
        plain.finalize_definitions()?;
        let expected = run(&plain, &ids);

        // With merging: the same compiler, its module wrapped.
        let jit = JITModule::new(JITBuilder::new(default_libcall_names())?);
        let mut wrapped = MergingModule::new(jit, MergeOptions::default())?;
        let ids = compile(&mut wrapped)?;
        let finalized = wrapped.finalize_definitions()?;
        let (merged_jit, merged) = (&finalized.module, &finalized.merged);
        let got = run(merged_jit, &ids);

        for line in &got {
            println!("{line}");
        }
        for &(name, id) in &ids {
            if merged.body_of(id) != id {
                let body = ids
                    .iter()
                    .find(|(_, i)| *i == merged.body_of(id))
                    .map(|p| p.0);
                eprintln!("{name}: {:?} of {}", merged.action(id), body.unwrap_or("?"));
            }
        }
        eprintln!(
            "{} functions, {} bodies compiled",
            ids.len(),
            merged.summary.compiled
        );
        if got == expected {
            println!("same results with and without merging");
            Ok(ExitCode::SUCCESS)
        } else {
            eprintln!("results differ:\nexpected {expected:?}\ngot {got:?}");
            Ok(ExitCode::FAILURE)
        }
    })();
    result.unwrap_or_else(|e| {
        eprintln!("drop_in: {e}");
        ExitCode::FAILURE
    })
}
