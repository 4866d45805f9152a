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

/// The host callback of `via_host_*`: `x + 1`, and a panic for a negative `x`, which
/// unwinds through the JIT code back to `run`.
extern "C-unwind" fn host_check(x: i64) -> i64 {
    if x < 0 {
        panic!("{}", common::HOST_FAILURE);
    }
    x + 1
}

fn run(merge: bool) -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = JITBuilder::new(default_libcall_names())?;
    builder.symbol(common::HOST_CALLBACK, host_check as *const u8);
    let mut module = JITModule::new(builder);
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
    // The host's failure unwinds through the merged code, whose frames clif-merge
    // registered. cranelift-jit registers none for what it compiles itself, so without
    // merging the panic could not cross its frames: the call is made only when merged.
    if let Some(id) = names
        .iter()
        .find(|(n, _)| n == common::FAILING_CALL.0)
        .map(|(_, id)| *id)
        .filter(|_| frames.is_some())
    {
        // SAFETY: as above; the callee may unwind, hence `C-unwind`.
        let f = unsafe {
            std::mem::transmute::<*const u8, extern "C-unwind" fn(i64) -> i64>(
                module.get_finalized_function(id),
            )
        };
        std::panic::set_hook(Box::new(|_| {}));
        match std::panic::catch_unwind(|| f(common::FAILING_CALL.1)) {
            Err(_) => println!("{}", common::caught_line()),
            Ok(_) => println!(
                "{}({}) returned",
                common::FAILING_CALL.0,
                common::FAILING_CALL.1
            ),
        }
        let _ = std::panic::take_hook();
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
