//! An ahead-of-time compiler with MergeFunctions as a backend plugin.
//!
//! It builds the program of `common/mod.rs` (35 functions, some equal, some equal up to
//! recursion, some different) in a cranelift-object `ObjectModule`, hands the functions to
//! a `FunctionMerger` instead of defining them, writes the object, and links it with `c++`
//! and a generated C++ `main` into an executable that prints every function's result for a
//! few inputs. The host callback that `via_host_*` call throws a C++ exception for a
//! negative argument: the last call's exception unwinds through the merged code (its
//! `.eh_frame`) and is caught in `main`.
//!
//! ```text
//! cargo run --release --example aot                          # merged
//! cargo run --release --example aot -- --no-merge            # every function defined directly
//! cargo run --release --example aot -- -o /tmp/demo          # where to write the executable
//! ```
//!
//! It prints the number of folded functions (and what each became), the `.text` size of the
//! object and of the executable, and where it wrote the executable (`EXE`; the object is
//! `EXE.o`, the C++ `main` is `EXE.main.cc`). `CXX` overrides the C++ compiler.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clif_merge::TargetInfo;
use cranelift_module::default_libcall_names;
use cranelift_object::object::{Object, ObjectSection, SectionKind};
use cranelift_object::{ObjectBuilder, ObjectModule};

struct Args {
    merge: bool,
    exe: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut merge = true;
    let mut exe = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-merge" => merge = false,
            "-o" => exe = Some(PathBuf::from(args.next().ok_or("-o needs a path")?)),
            "-h" | "--help" => {
                return Err("usage: aot [--no-merge] [-o EXECUTABLE]".into());
            }
            other => return Err(format!("unknown argument `{other}` (try --help)")),
        }
    }
    let default = if merge {
        "clif-merge-aot-demo"
    } else {
        "clif-merge-aot-demo-unmerged"
    };
    let exe = exe.unwrap_or_else(|| std::env::temp_dir().join(default));
    Ok(Args { merge, exe })
}

/// A C++ `main` that calls every function for every input and prints one line per call,
/// in the format of `common::result_line`; provides the host callback, which throws for a
/// negative argument; and makes the failing call last, catching the exception that
/// unwinds through the merged code.
fn cxx_main(names: &[String]) -> String {
    let mut c = String::from("#include <cstdio>\n#include <stdexcept>\n#include <string>\n\n");
    writeln!(
        c,
        "extern \"C\" long long {}(long long x) {{\n\
         \x20   if (x < 0) throw std::runtime_error(\"{}\");\n\
         \x20   return x + 1;\n\
         }}\n",
        common::HOST_CALLBACK,
        common::HOST_FAILURE
    )
    .unwrap();
    for name in names {
        writeln!(c, "extern \"C\" long long {name}(long long);").unwrap();
    }
    c.push_str("\nstatic const struct {\n    const char *name;\n    long long (*f)(long long);\n} functions[] = {\n");
    for name in names {
        writeln!(c, "    {{\"{name}\", {name}}},").unwrap();
    }
    let inputs: Vec<String> = common::INPUTS.iter().map(|x| format!("{x}LL")).collect();
    writeln!(
        c,
        "}};\n\nstatic const long long inputs[] = {{{}}};\n",
        inputs.join(", ")
    )
    .unwrap();
    let (failing, arg) = common::FAILING_CALL;
    let (failure, caught) = (common::HOST_FAILURE, common::caught_line());
    writeln!(
        c,
        "int main(void) {{\n\
         \x20   for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++)\n\
         \x20       for (size_t j = 0; j < sizeof inputs / sizeof inputs[0]; j++)\n\
         \x20           std::printf(\"%s(%lld) = %lld\\n\", functions[i].name, inputs[j],\n\
         \x20                       functions[i].f(inputs[j]));\n\
         \x20   try {{\n\
         \x20       {failing}({arg}LL);\n\
         \x20       std::printf(\"{failing}({arg}) returned\\n\");\n\
         \x20   }} catch (const std::exception &e) {{\n\
         \x20       if (std::string(e.what()) == \"{failure}\") std::puts(\"{caught}\");\n\
         \x20       else std::printf(\"{failing}({arg}): unexpected exception %s\\n\", e.what());\n\
         \x20   }}\n\
         \x20   return 0;\n\
         }}"
    )
    .unwrap();
    c
}

/// Bytes in the `.text` sections of an object file or executable.
fn text_bytes(path: &Path) -> Result<u64, Box<dyn std::error::Error>> {
    let data = std::fs::read(path)?;
    let file = cranelift_object::object::File::parse(&*data)?;
    Ok(file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text && s.name() == Ok(".text"))
        .map(|s| s.size())
        .sum())
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    // The host, position-independent so that the object links into a PIE.
    let isa = clif_merge::build_isa(
        &TargetInfo::host(),
        &[
            ("is_pic".into(), "true".into()),
            ("opt_level".into(), "speed".into()),
        ],
    )?;
    // Unwind information for what the module compiles itself (`--no-merge`); the merger
    // writes its own bodies' (`finish_object`).
    let mut builder = ObjectBuilder::new(isa, "aot_demo", default_libcall_names())?;
    builder.unwind_info(true);
    let mut module = ObjectModule::new(builder);
    let functions = common::build(&mut module)?;
    let names: Vec<(String, cranelift_module::FuncId)> =
        functions.iter().map(|f| (f.name.clone(), f.id)).collect();

    let merged = common::define(&mut module, functions, args.merge, |merger, module| {
        merger.define_in_object(module)
    })?;
    let mut product = module.finish();
    if let Some(merged) = &merged {
        // point the aliases at their bodies, write the bodies' .eh_frame
        merged.finish_object(&mut product)?;
    }
    let object_bytes = product.emit()?;

    let exe = &args.exe;
    if let Some(dir) = exe.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let object_path = exe.with_extension("o");
    let main_path = exe.with_extension("main.cc");
    std::fs::write(&object_path, &object_bytes)?;
    let just_names: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
    std::fs::write(&main_path, cxx_main(&just_names))?;
    let cc = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cc)
        .arg("-o")
        .arg(exe)
        .arg(&main_path)
        .arg(&object_path)
        .status()
        .map_err(|e| format!("running {cc}: {e}"))?;
    if !status.success() {
        return Err(format!("{cc} failed ({status})").into());
    }

    common::print_summary(&mut std::io::stdout(), &names, merged.as_ref())?;
    println!("object .text bytes: {}", text_bytes(&object_path)?);
    println!("executable .text bytes: {}", text_bytes(exe)?);
    println!("wrote object: {}", object_path.display());
    println!("wrote executable: {}", exe.display());
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aot: {e}");
            ExitCode::FAILURE
        }
    }
}
