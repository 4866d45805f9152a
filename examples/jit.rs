//! A JIT compiler with MergeFunctions as a backend plugin.
//!
//! The same program as the `aot` example (`common/mod.rs`), in a cranelift-jit
//! `JITModule`: the functions go to a `FunctionMerger`, `define_in_jit` defines them all
//! (a JIT has no symbol aliases, so every folded function that is still called by its own
//! id is a single-jump thunk), and every function is called through
//! `get_finalized_function`.
//!
//! ```text
//! cargo run --release --example jit                 # merged
//! cargo run --release --example jit -- --no-merge   # every function defined directly
//! ```
//!
//! The results go to standard output, in the same format as the `aot` executable's output;
//! what the pass did goes to standard error.

mod common;

use std::process::ExitCode;

use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId};

fn run(merge: bool) -> Result<(), Box<dyn std::error::Error>> {
    let mut module = JITModule::new(JITBuilder::new(default_libcall_names())?);
    let functions = common::build(&mut module)?;
    let names: Vec<(String, FuncId)> = functions.iter().map(|f| (f.name.clone(), f.id)).collect();

    let merged = common::define(&mut module, functions, merge, |merger, module| {
        merger.define_in_jit(module)
    })?;
    module.finalize_definitions()?;
    // Panics and exceptions can cross the merged code while `_frames` lives.
    let frames = merged
        .as_ref()
        .map(|m| m.register_jit_frames(&module))
        .transpose()?;
    common::print_summary(&mut std::io::stderr(), &names, merged.as_ref())?;

    for (name, id) in &names {
        let code = module.get_finalized_function(*id);
        // SAFETY: every function of the program is `fn(i64) -> i64` in the host's default
        // calling convention (`Module::make_signature`), which is `extern "C"`.
        let f = unsafe { std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(code) };
        for x in common::INPUTS {
            // The format of the C `main` of the aot example: "%s(%lld) = %lld\n".
            println!("{name}({x}) = {}", f(x));
        }
    }
    drop(frames);
    // SAFETY: no pointer into the module's code is used after this.
    unsafe { module.free_memory() };
    Ok(())
}

fn main() -> ExitCode {
    let mut merge = true;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-merge" => merge = false,
            other => {
                eprintln!("unknown argument `{other}` (usage: jit [--no-merge])");
                return ExitCode::from(2);
            }
        }
    }
    match run(merge) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jit: {e}");
            ExitCode::FAILURE
        }
    }
}
