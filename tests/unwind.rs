//! Unwind information (#12): exceptions and panics cross the code clif-merge writes.
//!
//! - `cxx_exceptions_cross_merged_code`: `fixtures/unwind/throw_through.clif` compiled by
//!   the command line in every configuration (`--merge-functions disabled|trampolines|aliases`,
//!   the two that merge each with and without `--merge-similar`, and `--clif-thunks` for
//!   thunks with a frame),
//!   linked with a C++ harness whose callback `cb` throws: PIC into a shared library, and
//!   without PIC into a non-PIE executable. Every entry must return the same value as
//!   unmerged, and the exception thrown for 13 must be caught by the harness (without
//!   unwind information, `std::terminate`). x86_64 always; aarch64 when
//!   `aarch64-linux-gnu-g++` and `qemu-aarch64` are installed, where every merging
//!   configuration also runs with pointer authentication (A key; B key in every function),
//!   whose signed return addresses the unwinder must authenticate with the right key, or,
//!   for `tail` functions (signed with a zero modifier), read with the signature stripped.
//!   In every merge-similar configuration `%grow_a` must be a thunk that grows the stack
//!   argument area, so the exception crosses a body whose frame lies below its caller's
//!   stack pointer.
//! - `every_function_with_a_frame_has_an_fde`: `readelf --debug-dump=frames` of the same
//!   objects shows an FDE starting at every function whose code sets up a frame, and at
//!   every thunk that grows the stack argument area (`%grow_*` under merge-similar, the
//!   one check that sees a missing FDE of such a thunk on aarch64, where gdb's prologue
//!   analysis hides it); with `--set unwind_info=false` there is no `.eh_frame` at all.
//! - `gdb_finds_the_caller_at_every_instruction_of_a_grown_thunk`: a merge-similar thunk
//!   that grows its stack argument area moves the stack pointer, so it has an FDE; gdb,
//!   stepping through one instruction at a time, sees the same CFA and finds the thunk's
//!   caller at every step (x86_64 natively; aarch64 with `gdb-multiarch` under
//!   `qemu-aarch64 -g`).
//! - `linux_x86_64_unwinds_at_every_instruction`: asynchronous unwinding (a sampler, a
//!   signal handler) on x86_64 Linux: `fixtures/unwind/single_step_linux.c` steps through
//!   every entry of both fixtures with the trap flag, in every configuration, PIC and not,
//!   and at every instruction unwinds with libgcc's `_Unwind_Backtrace` from its SIGTRAP
//!   handler to the harness's call site, which it must reach with the stack pointer and
//!   callee-saved registers the call left, through one frame per call it followed, each
//!   with the CFA its callee was entered with: through Cranelift's epilogues (whose rules
//!   clif-merge adds) and through thunks that are a single jump (whose FDE it writes);
//!   then the same for the functions defined in a `JITModule` through the plugin, with
//!   `Merged::jit_eh_frame`'s frames registered.
//! - `linux_aarch64_unwinds_at_every_instruction`: the same on aarch64 Linux under qemu,
//!   which has no single-step: `fixtures/unwind/breakpoints_aarch64.c` writes a breakpoint
//!   over every instruction the entries run (qemu's log of a first run names them), writes
//!   each again at the next stop, and unwinds with libgcc at each stop, through one frame
//!   per call it followed, in every configuration (pointer authentication with either key
//!   included), PIC and not, and for the functions defined in a `JITModule` through the
//!   plugin: through Cranelift's epilogues, whose rules clif-merge adds (reloaded
//!   registers, the CFA after `ldp x29, x30`, the return address after `autiasp`).
//! - `macho_objects_have_the_fdes_of_elf_objects`: for `x86_64-apple-darwin` and
//!   `aarch64-apple-darwin`, in every configuration, the object linked into a dylib by
//!   `ld64.lld` has every function's FDE with the rows the same module linked for Linux
//!   has, and the object's FDEs as Apple's ld64 computes them from `__eh_frame`'s
//!   relocations are the dylib's (macOS code is not run here).
//!   `macho_plugin_objects_give_anonymous_bodies_their_fdes`: the same for the plugin's
//!   objects, whose shared bodies are anonymous functions (`_.LfnN`): each body with a
//!   frame has its FDE in the dylib.
//! - `windows_arm64_unwind_codes_undo_every_prologue_instruction`: for
//!   `aarch64-pc-windows-msvc`, in every configuration and for
//!   `fixtures/unwind/windows_arm64_frames.clif` too (large allocations), every function
//!   with a frame has `RUNTIME_FUNCTION`s covering it, and the codes of its records, run
//!   as Windows' unwinder runs them on an emulated prologue, restore what the function
//!   entered with after each prologue instruction (in the body, for a function with a
//!   second record for it); and each epilogue scope's codes, run from each of its
//!   instructions, leave what the rest of the epilogue leaves (and every return of a
//!   function with a frame ends one). `windows_arm64_jit_function_table_undoes_every_prologue_instruction`:
//!   the same for the functions defined through the plugin in a `JITModule` for that
//!   target, with `Merged::jit_function_table`'s table and the records the merger defined
//!   beside the code. `windows_arm64_a_key_signing_is_an_error_naming_the_function`: a
//!   prologue no code describes (the A key) stops the object and the JIT with an error.
//! - `windows_x64_objects_have_pdata`: for `x86_64-pc-windows-gnu`, a `RUNTIME_FUNCTION`
//!   in `.pdata` per function with a frame.
//! - `cxx_exceptions_cross_windows_x64_code`: the same C++ harness and fixture (`%cb` called
//!   as `windows_fastcall`) for `x86_64-pc-windows-gnu`, in every configuration, with PIC
//!   and without, linked by MinGW-w64's g++ and run under Wine, whose unwinder reads
//!   `.pdata` and `.xdata` as Windows does (SEH). There too `%grow_a` must be a thunk that
//!   grows the stack area under merge-similar (by pushes that keep its return address on
//!   top, with no `.pdata`).
//! - `windows_x64_unwinds_at_every_instruction`: asynchronous unwinding (a sampler, a
//!   debugger), for the same Windows objects: a harness steps through every entry with the
//!   trap flag under Wine and, at every instruction, unwinds with `RtlVirtualUnwind` to its
//!   call site, which it must reach with the stack pointer and callee-saved registers it
//!   left, at every instruction, Cranelift's epilogues included: clif-merge rewrites
//!   them into a form Windows recognizes (`src/emit/epilogues/x86_64.rs`), and the steps
//!   stopped at their `lea` must unwind too. Under merge-similar it steps through the pushes
//!   of `%grow_*`'s thunks. The same
//!   for the functions defined in a `JITModule` through the plugin in every mode, with
//!   `Merged::jit_function_table`'s table registered by `RtlAddFunctionTable`.
//! - `windows_x64_unwinds_through_tail_calls_at_every_instruction`: the same stepping
//!   through `fixtures/unwind/tail_calls.clif`'s tail calls (to itself, to another function,
//!   through an address, shrinking the stack arguments), objects and JIT, every mode: their
//!   `pop rbp` and jump need `RUNTIME_FUNCTION`s of their own, which each object must have.
//! - `panic_crosses_jit_frames`: the same functions defined in a `JITModule` through the
//!   plugin (and through `emit_jit`) in every mode; an `extern "C-unwind"` Rust callback
//!   panics under them and `catch_unwind` outside catches it. It runs in a child process,
//!   because a panic that finds no frame information aborts the process.
//! - `cxx_exceptions_cross_aarch64_jit_code`: the same functions defined through the plugin
//!   in a `JITModule` for aarch64 (on an x86_64 host, in a fixed-address region), written
//!   out as an image with `Merged::jit_eh_frame`'s table; a C++ loader under qemu maps the
//!   image at the same address, registers the table with its libgcc, and `cb` throws
//!   through every entry in every mode (and with pointer authentication, A key and B key).
//!   The frames are not registered with this process.
//! - `cxx_exceptions_cross_windows_x64_jit_code`: the functions of the Windows harness
//!   defined through the plugin in a `JITModule` for `x86_64-pc-windows-gnu`, written out
//!   as an image; a C++ loader under Wine maps it at the same address, registers
//!   `Merged::jit_function_table`'s `RUNTIME_FUNCTION`s with `RtlAddFunctionTable`, and
//!   `cb` throws through every entry in every mode.
//!
//! On x86_64 (Linux and Windows) the harness also throws through
//! `fixtures/unwind/throw_through_fastcall.clif`, `windows_fastcall` functions (a Windows
//! triple's default convention) that save and use every callee-saved register of that
//! convention, `rsi`, `rdi` and `xmm6`-`xmm15` included.
//!
//! In every harness the frame that catches keeps more values across the call than there
//! are callee-saved registers, and checks them after the catch: an unwinder that skipped a
//! frame, or restored a register from the wrong slot, changes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clif_merge::emit::EmitOptions;
use clif_merge::emit_jit;
use clif_merge::merge::similar::SimilarOptions;
use clif_merge::merge::{Linkage as MergeLinkage, MergeMode, MergeOptions, Module as MergeModule};
use clif_merge::names::FuncName;
use clif_merge::plugin::{FunctionMerger, Merged};
use clif_merge::TargetInfo;
use cranelift_codegen::ir::{types, ExternalName, Function, UserExternalName, UserFuncName};
use cranelift_codegen::isa::CallConv;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};
use cranelift_object::object::{Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind};

const FIXTURE: &str = "fixtures/unwind/throw_through.clif";
/// Frames of Windows on arm64 that the fixtures above do not make: large allocations, and
/// callee-saved registers from x20 on.
const WINDOWS_ARM64_FRAMES: &str = "fixtures/unwind/windows_arm64_frames.clif";
/// The `windows_fastcall` functions the C++ harnesses of x86_64 also throw through (their
/// callee-saved registers include `rsi`, `rdi` and `xmm6`-`xmm15`).
const FASTCALL_FIXTURE: &str = "fixtures/unwind/throw_through_fastcall.clif";
/// The argument for which the callback throws (or panics).
const THROWS: i64 = 13;
/// The argument for which every entry returns.
const RETURNS: i64 = 1;
/// `stp x29, x30, [sp, #-16]!`, how aarch64 functions set up a frame.
const AARCH64_FRAME: &[u8] = &[0xfd, 0x7b, 0xbf, 0xa9];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("unwind")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn functions() -> Vec<Function> {
    let text = std::fs::read_to_string(root().join(FIXTURE)).unwrap();
    cranelift_reader::parse_functions(&text).unwrap()
}

/// The entries of the fixture (`; entry: %name`), with whether their parameter is `i32`.
fn entries() -> Vec<(String, bool)> {
    entries_of(FIXTURE)
}

/// The entries of `fixture` (a path from the repository's root), as [`entries`].
fn entries_of(fixture: &str) -> Vec<(String, bool)> {
    let text = std::fs::read_to_string(root().join(fixture)).unwrap();
    let funcs = cranelift_reader::parse_functions(&text).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("; entry: %"))
        .map(|name| {
            let name = name.trim().to_string();
            let f = funcs
                .iter()
                .find(|f| f.name.to_string() == format!("%{name}"))
                .unwrap_or_else(|| panic!("entry {name} is not in {fixture}"));
            let narrow = f.signature.params[0].value_type == types::I32;
            (name, narrow)
        })
        .collect()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether MinGW-w64's `compiler` (Debian package `package`) and Wine are here, with
/// Wine's prefix made; without them a Windows test is skipped, saying so.
fn mingw_and_wine(compiler: &str, package: &str) -> bool {
    if !have(compiler) || !have("wine") {
        eprintln!("skipping: needs {compiler} (Debian: {package}) and wine (Debian: wine64)");
        return false;
    }
    if let Err(e) = wine::ready() {
        panic!("Wine's prefix could not be made: {e}");
    }
    true
}

struct Arch {
    triple: &'static str,
    cxx: &'static str,
    /// How to run its executables (empty: natively).
    runner: Vec<&'static str>,
    /// The first instruction of a function that sets up a frame.
    frame_prologue: &'static [u8],
}

/// The architectures to test: x86_64, and aarch64 when its cross compiler and qemu exist.
fn arches() -> Vec<Arch> {
    let mut arches = Vec::new();
    if cfg!(target_arch = "x86_64") {
        arches.push(Arch {
            triple: "x86_64-unknown-linux-gnu",
            cxx: "g++",
            runner: vec![],
            frame_prologue: &[0x55], // push %rbp
        });
    }
    if have("aarch64-linux-gnu-g++") && have("qemu-aarch64") {
        arches.push(Arch {
            triple: "aarch64-unknown-linux-gnu",
            cxx: "aarch64-linux-gnu-g++",
            runner: vec!["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"],
            frame_prologue: AARCH64_FRAME,
        });
    } else {
        eprintln!("skipping aarch64: needs aarch64-linux-gnu-g++ and qemu-aarch64 (Debian: g++-aarch64-linux-gnu, qemu-user)");
    }
    arches
}

/// Every configuration: its name and command-line options.
fn configurations() -> Vec<(String, Vec<&'static str>)> {
    let mut configs = Vec::new();
    for mode in ["disabled", "trampolines", "aliases"] {
        // Merge-similar does nothing when merging is disabled.
        for similar in [false, true]
            .into_iter()
            .filter(|&s| !s || mode != "disabled")
        {
            let mut args = vec!["--merge-functions", mode];
            if similar {
                args.push("--merge-similar");
            }
            configs.push((args.join(" "), args));
        }
    }
    for similar in [false, true] {
        let mut args = vec!["--merge-functions", "trampolines", "--clif-thunks"];
        if similar {
            args.push("--merge-similar");
        }
        configs.push((args.join(" "), args));
    }
    configs
}

/// aarch64's pointer authentication: return addresses signed with the A key, and with the
/// B key in every function (the CIE then says `B`). An unwinder crossing a signed frame
/// authenticates its return address with the key the CIE names, so a wrong CIE faults.
/// Each is a name and its Cranelift settings (`NAME=VALUE`).
const POINTER_AUTHENTICATION: [(&str, &[&str]); 2] = [
    ("A key", &["sign_return_address=true"]),
    (
        "B key, every function",
        &[
            "sign_return_address=true",
            "sign_return_address_with_bkey=true",
            "sign_return_address_all=true",
        ],
    ),
];

/// Command-line arguments that set `settings` (`NAME=VALUE` each).
fn set_args(settings: &[&'static str]) -> Vec<&'static str> {
    settings.iter().flat_map(|s| ["--set", *s]).collect()
}

/// [`configurations`], and on aarch64 each merging one with pointer authentication too.
fn configurations_for(triple: &str) -> Vec<(String, Vec<&'static str>)> {
    let mut configs = configurations();
    if triple.starts_with("aarch64") {
        for (key, settings) in POINTER_AUTHENTICATION {
            for (name, args) in configurations() {
                if name.contains("disabled") {
                    continue;
                }
                let mut args = args.clone();
                args.extend(set_args(settings));
                configs.push((format!("{name}, pointer authentication ({key})"), args));
            }
        }
    }
    configs
}

/// Compile the fixture with clif-merge into `out`.
fn clif_merge(triple: &str, pic: bool, args: &[&str], extra: &[&str], out: &Path) {
    clif_merge_fixture(FIXTURE, triple, pic, args, extra, out);
}

/// Compile `fixture` (a path from the repository's root, or an absolute one) with
/// clif-merge into `out`.
fn clif_merge_fixture(
    fixture: &str,
    triple: &str,
    pic: bool,
    args: &[&str],
    extra: &[&str],
    out: &Path,
) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clif-merge"));
    cmd.arg(root().join(fixture))
        .args(["--target", triple, "-q", "-o"])
        .arg(out)
        .args(args)
        .args(["--set", if pic { "is_pic=true" } else { "is_pic=false" }])
        .args(extra);
    run(&mut cmd);
}

/// The C++ harness: `cb` throws for [`THROWS`]; `main` calls every entry with
/// [`RETURNS`] and [`THROWS`] and prints what happened. With `fastcall` (x86_64), the
/// entries of [`FASTCALL_FIXTURE`] too, as `ms_abi` functions.
fn harness(fastcall: bool) -> String {
    let mut s = harness_prelude();
    let mut declare = |entries: &[(String, bool)], convention: &str| {
        for (name, narrow) in entries {
            let param = if *narrow { "int32_t" } else { "int64_t" };
            s += &format!("extern \"C\" {convention} int64_t {name}({param});\n");
        }
    };
    declare(&entries(), "SYSV");
    if fastcall {
        declare(&entries_of(FASTCALL_FIXTURE), "MSABI");
    }
    s += "int main() {\n";
    s += &harness_checks(&harness_entries(fastcall), |name, _| name.to_string());
    s += "  return 0;\n}\n";
    s
}

/// The entries [`harness`] calls.
fn harness_entries(fastcall: bool) -> Vec<(String, bool)> {
    let mut all = entries();
    if fastcall {
        all.extend(entries_of(FASTCALL_FIXTURE));
    }
    all
}

/// What every harness starts with: `cb`, which throws for [`THROWS`], and `check`, which
/// calls an entry with [`RETURNS`] and [`THROWS`] and prints what happened.
///
/// `check` keeps [`KEPT_VALUES`] integers and as many floats live across the throwing call,
/// more than the callee-saved registers hold, so that some are in each of them (`rbx`,
/// `rbp`, `r12`-`r15`, and on Windows `rsi`, `rdi` and `xmm6`-`xmm15`; `x19`-`x28` and
/// `d8`-`d15` on aarch64). The entries save and use those registers too, so the values
/// come back right only if the unwinder restores each register from where every frame the
/// exception crossed saved it: a frame it skipped, or a save described at the wrong place,
/// changes them. After the catch `check` compares each with its value computed again.
///
/// The entries are System V functions (`SYSV`: GCC's `sysv_abi` on Windows), and `cb` is
/// the platform's C function (`windows_fastcall` on Windows, [`windows_fixture`]): GCC
/// writes no SEH unwind information for a `sysv_abi` function, so an exception could not
/// leave one. On x86_64, [`FASTCALL_FIXTURE`]'s entries are `MSABI` (GCC's `ms_abi` on
/// Linux) and call `cb_fastcall`, which calls `cb`.
fn harness_prelude() -> String {
    format!(
        "#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n\
         #include <stdint.h>\n#include <stdio.h>\n\
         #if defined(_WIN32)\n#define SYSV __attribute__((sysv_abi))\n#define MSABI\n\
         #elif defined(__x86_64__)\n#define SYSV\n#define MSABI __attribute__((ms_abi))\n\
         #else\n#define SYSV\n#endif\n\
         struct Thrown {{ int64_t value; }};\n\
         extern \"C\" int64_t cb(int64_t x) {{\n\
         \x20 if (x == 13) throw Thrown{{x}};\n\
         \x20 return x * 2 + 1;\n}}\n\
         #ifdef MSABI\n\
         extern \"C\" MSABI int64_t cb_fastcall(int64_t x) {{ return cb(x); }}\n\
         #endif\n\
         static volatile int64_t seed = 0x5eed;\n\
         template <class F> static void check(const char *name, F f) {{\n\
         \x20 std::printf(\"%s(1) = %lld\\n\", name, (long long)f(1));\n\
         {loads}\
         \x20 try {{\n\
         \x20   f(13);\n\
         \x20   std::printf(\"%s(13) returned\\n\", name);\n\
         \x20 }} catch (const Thrown &t) {{\n\
         \x20   std::printf(\"%s(13) threw %lld, caught outside\\n\", name, (long long)t.value);\n\
         \x20 }}\n\
         \x20 bool same = true;\n\
         {checks}\
         \x20 if (same) std::printf(\"%s(13) {KEPT}\\n\", name);\n\
         \x20 std::fflush(stdout);\n}}\n",
        // Scalars, which the compiler keeps in registers.
        loads = (0..KEPT_VALUES)
            .map(|i| {
                format!(
                    "  int64_t kept{i} = seed * {};\n  double kept_float{i} = seed * {i}.5;\n",
                    2 * i + 3
                )
            })
            .collect::<String>(),
        checks = (0..KEPT_VALUES)
            .map(|i| format!(
                "  if (kept{i} != seed * {}) {{ std::printf(\"%s(13) changed the caller's value {i}\\n\", name); same = false; }}\n\
                 \x20 if (kept_float{i} != seed * {i}.5) {{ std::printf(\"%s(13) changed the caller's float {i}\\n\", name); same = false; }}\n",
                2 * i + 3
            ))
            .collect::<String>(),
    )
}

/// How many integers, and how many floats, `check` keeps across the throwing call
/// ([`harness_prelude`]): more than any target's callee-saved registers of either kind.
const KEPT_VALUES: usize = 12;
/// What `check` prints when every value it kept came back.
const KEPT: &str = "kept the caller's values";

/// `main`'s checks of every entry, each called as `callee(name, narrow)` (a function or a
/// function pointer of the entry's type).
fn harness_checks(entries: &[(String, bool)], callee: impl Fn(&str, bool) -> String) -> String {
    let mut s = String::new();
    for (name, narrow) in entries {
        let cast = if *narrow { "(int32_t)" } else { "" };
        let callee = callee(name, *narrow);
        s += &format!("  check(\"{name}\", [](int64_t x) {{ return {callee}({cast}x); }});\n");
    }
    s
}

/// What a harness run by `cmd` printed; it must exit successfully (an exception that found
/// no handler ends it with `std::terminate`).
fn harness_output(cmd: &mut Command, context: &str) -> String {
    harness_printed(cmd.output().unwrap(), context)
}

/// What a harness that ended with `out` printed ([`harness_output`]).
fn harness_printed(out: std::process::Output, context: &str) -> String {
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{context}: the harness failed ({}), the exception was not caught:\n{got}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    got
}

/// Every configuration must print what the first one (unmerged) printed: each entry's value
/// for [`RETURNS`], and for [`THROWS`] the exception caught by the harness with the values
/// it kept unchanged.
fn check_output(entries: &[(String, bool)], reference: &str, got: &str, context: &str) {
    for (name, _) in entries {
        let caught = format!("{name}({THROWS}) threw {THROWS}, caught outside");
        assert!(
            got.lines().any(|l| l == caught),
            "{context}: {name} did not pass the exception to the harness:\n{got}"
        );
        let kept = format!("{name}({THROWS}) {KEPT}");
        assert!(
            got.lines().any(|l| l == kept),
            "{context}: the exception through {name} left the harness's callee-saved \
             registers changed (an unwinder that skipped a frame, or read a register from \
             the wrong place):\n{got}"
        );
    }
    assert_eq!(
        reference, got,
        "{context}: results differ from the unmerged build"
    );
}

#[test]
fn cxx_exceptions_cross_merged_code() {
    if !have("g++") {
        eprintln!("skipping: needs g++");
        return;
    }
    for arch in arches() {
        let dir = scratch(&format!("cxx-{}", arch.triple));
        let fastcall = arch.triple.starts_with("x86_64");
        let source = dir.join("harness.cpp");
        std::fs::write(&source, harness(fastcall)).unwrap();
        let mut reference: Option<String> = None;
        for (pic, link) in [(true, "shared library"), (false, "non-PIE executable")] {
            let main_o = dir.join(format!("harness-{pic}.o"));
            let mut cc = Command::new(arch.cxx);
            cc.args(["-O1", "-c"]).arg(&source).arg("-o").arg(&main_o);
            cc.arg(if pic { "-fPIE" } else { "-fno-pie" });
            run(&mut cc);
            for (i, (config, args)) in configurations_for(arch.triple).iter().enumerate() {
                let context = format!("{} {link}, {config}", arch.triple);
                let obj = dir.join(format!("m{i}-{pic}.o"));
                clif_merge(arch.triple, pic, args, &[], &obj);
                let mut objects = vec![obj.clone()];
                if fastcall {
                    let fast = dir.join(format!("f{i}-{pic}.o"));
                    clif_merge_fixture(FASTCALL_FIXTURE, arch.triple, pic, args, &[], &fast);
                    objects.push(fast);
                }
                // The exception must cross a body behind a thunk that grew the stack
                // argument area (merge-similar's thunks are written as machine code with
                // and without `--clif-thunks`); a change that left %grow_* framed or
                // apart would otherwise pass unnoticed.
                assert_eq!(
                    stack_growth::function_grows_the_stack_area(
                        &obj,
                        "grow_a",
                        arch.triple.starts_with("x86_64")
                    ),
                    args.contains(&"--merge-similar"),
                    "{context}: %grow_a should be a thunk that grows the stack area exactly \
                     under merge-similar"
                );
                let exe = dir.join(format!("run{i}-{pic}"));
                if pic {
                    let lib = dir.join(format!("libm{i}.so"));
                    run(Command::new(arch.cxx)
                        .arg("-shared")
                        .args(&objects)
                        .arg("-o")
                        .arg(&lib));
                    run(Command::new(arch.cxx)
                        .arg(&main_o)
                        .arg(&lib)
                        .arg(format!("-Wl,-rpath,{}", dir.display()))
                        .arg("-o")
                        .arg(&exe));
                } else {
                    run(Command::new(arch.cxx)
                        .arg("-no-pie")
                        .arg(&main_o)
                        .args(&objects)
                        .arg("-o")
                        .arg(&exe));
                }
                let mut cmd = match arch.runner.split_first() {
                    Some((first, rest)) => {
                        let mut c = Command::new(first);
                        c.args(rest).arg(&exe);
                        c
                    }
                    None => Command::new(&exe),
                };
                let got = harness_output(&mut cmd, &context);
                let reference = reference.get_or_insert_with(|| got.clone());
                check_output(&harness_entries(fastcall), reference, &got, &context);
            }
        }
    }
}

#[path = "common/stack_growth.rs"]
mod stack_growth;

/// FDE address ranges `readelf --debug-dump=frames` shows for `obj`.
fn fde_ranges(obj: &Path) -> Vec<(u64, u64)> {
    let out = run(Command::new("readelf").arg("--debug-dump=frames").arg(obj));
    out.lines()
        .filter(|l| l.contains(" FDE "))
        .map(|l| {
            let pc = l.split("pc=").nth(1).expect("an FDE line has pc=");
            let (a, b) = pc.trim().split_once("..").unwrap();
            (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            )
        })
        .collect()
}

#[test]
fn every_function_with_a_frame_has_an_fde() {
    if !have("readelf") {
        eprintln!("skipping: needs readelf");
        return;
    }
    let mut triples = vec![Arch {
        triple: "x86_64-unknown-linux-gnu",
        cxx: "",
        runner: vec![],
        frame_prologue: &[0x55],
    }];
    triples.push(Arch {
        triple: "aarch64-unknown-linux-gnu",
        cxx: "",
        runner: vec![],
        frame_prologue: AARCH64_FRAME,
    });
    for arch in triples {
        let dir = scratch(&format!("fde-{}", arch.triple));
        for (i, (config, args)) in configurations().iter().enumerate() {
            let context = format!("{} {config}", arch.triple);
            let obj = dir.join(format!("m{i}.o"));
            clif_merge(arch.triple, true, args, &[], &obj);
            let bytes = std::fs::read(&obj).unwrap();
            let file = cranelift_object::object::File::parse(&*bytes).unwrap();
            let text = file.section_by_name(".text").unwrap();
            let data = text.data().unwrap();
            let fdes = fde_ranges(&obj);
            let (mut framed, mut grown) = (0, 0);
            for sym in file.symbols() {
                if sym.kind() != SymbolKind::Text || sym.size() == 0 {
                    continue;
                }
                let start = sym.address();
                let code = &data[start as usize..(start + sym.size()) as usize];
                if code.starts_with(arch.frame_prologue) {
                    framed += 1;
                    assert!(
                        fdes.contains(&(start, start + sym.size())),
                        "{context}: {} sets up a frame but has no FDE (FDEs: {fdes:x?})",
                        sym.name().unwrap()
                    );
                }
                // A thunk that grows the stack argument area moves the stack pointer: it
                // needs an FDE as much (%grow_* under merge-similar).
                if stack_growth::grows_the_stack_area(code, arch.triple.starts_with("x86_64")) {
                    grown += 1;
                    assert!(
                        fdes.contains(&(start, start + sym.size())),
                        "{context}: {} grows the stack area but has no FDE (FDEs: {fdes:x?})",
                        sym.name().unwrap()
                    );
                }
            }
            assert!(framed > 0, "{context}: no function with a frame?");
            // Merge-similar makes %grow_a, %grow_b and %grow_c such thunks.
            assert_eq!(
                grown,
                if config.contains("--merge-similar") {
                    3
                } else {
                    0
                },
                "{context}: thunks that grow the stack area"
            );
            // Every FDE starts at a function.
            for (a, _) in &fdes {
                assert!(
                    file.symbols()
                        .any(|s| s.kind() == SymbolKind::Text && s.address() == *a),
                    "{context}: an FDE at {a:#x} starts at no function"
                );
            }
            // `--set unwind_info=false` writes none.
            let off = dir.join(format!("off{i}.o"));
            clif_merge(
                arch.triple,
                true,
                args,
                &["--set", "unwind_info=false"],
                &off,
            );
            let bytes = std::fs::read(&off).unwrap();
            let file = cranelift_object::object::File::parse(&*bytes).unwrap();
            assert!(
                file.section_by_name(".eh_frame").is_none(),
                "{context}: unwind_info=false still wrote .eh_frame"
            );
        }
    }
    // aarch64 pointer authentication: the toggle every unwinder reads, and with the B key
    // a CIE that says `B` (Cranelift 0.135.8 panics when asked for that CIE).
    let dir = scratch("fde-aarch64-pointer-authentication");
    for (key, settings) in POINTER_AUTHENTICATION {
        let obj = dir.join(format!("{}.o", key.replace([' ', ','], "-")));
        let mut args = vec!["--merge-functions", "trampolines", "--merge-similar"];
        args.extend(set_args(settings));
        clif_merge("aarch64-unknown-linux-gnu", true, &args, &[], &obj);
        let frames = run(Command::new("readelf").arg("--debug-dump=frames").arg(&obj));
        let augmentation = if key.starts_with("B") {
            "\"zRB\""
        } else {
            "\"zR\""
        };
        assert!(
            frames.contains(&format!("Augmentation:          {augmentation}")),
            "aarch64 {key}: the CIE's augmentation is not {augmentation}:\n{frames}"
        );
        assert!(
            frames.contains("DW_CFA_AARCH64_negate_ra_state")
                && !frames.contains("DW_CFA_val_expression: r34"),
            "aarch64 {key}: signed return addresses not marked by the toggle:\n{frames}"
        );
        // `tail` functions (%grow_*'s shared body) sign with a zero modifier, which no
        // toggle can say: their return address is read with its signature stripped.
        assert!(
            frames.contains(
                "DW_CFA_val_expression: r30 (x30) (DW_OP_consts: -8; DW_OP_plus; DW_OP_deref; \
                 DW_OP_constu: 281474976710655; DW_OP_and)"
            ),
            "aarch64 {key}: no stripped return address for the `tail` functions:\n{frames}"
        );
    }
}

/// A linker for Mach-O that reads `__eh_frame` (LLVM 15 or later's `ld64.lld`; Debian's
/// `lld-19`), if this machine has one.
fn macho_linker() -> Option<&'static str> {
    ["ld64.lld-19", "ld64.lld-20", "ld64.lld-21", "ld64.lld-22"]
        .into_iter()
        .find(|tool| have(tool))
}

/// Link the Mach-O `object` for `arch` into the dylib `dylib` with `ld64` (`ld64.lld`),
/// for macOS 11, its undefined symbols left to the loader.
fn link_dylib(ld64: &str, arch: &str, object: &Path, dylib: &Path) {
    run(Command::new(ld64)
        .args(["-dylib", "-arch", arch])
        .args(["-platform_version", "macos", "11.0", "11.0"])
        .args(["-undefined", "dynamic_lookup"])
        .arg(object)
        .arg("-o")
        .arg(dylib));
}

/// The FDEs of an eh_frame section's `data`, at `address`, by the functions they start at
/// (`names` by address; more than one where aliases share a body): each one's count of
/// names, its length and its unwind table's rows (each as an offset range in the
/// function, the CFA's rule and the registers' rules).
fn fdes_in(
    data: &[u8],
    address: u64,
    names: &BTreeMap<u64, Vec<String>>,
    context: &str,
) -> BTreeMap<String, (usize, u64, Vec<String>)> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, UnwindContext, UnwindSection};
    let mut eh_frame = EhFrame::new(data, gimli::LittleEndian);
    eh_frame.set_address_size(8);
    let bases = BaseAddresses::default().set_eh_frame(address);
    let mut unwind = UnwindContext::new();
    let mut fdes = BTreeMap::new();
    let mut entries = eh_frame.entries(&bases);
    while let Some(entry) = entries.next().unwrap() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial
            .parse(|section, bases, o| section.cie_from_offset(bases, o))
            .unwrap();
        let start = fde.initial_address();
        let at = names
            .get(&start)
            .unwrap_or_else(|| panic!("{context}: an FDE at {start:#x} starts at no function"));
        let mut rows = Vec::new();
        let mut table = fde.rows(&eh_frame, &bases, &mut unwind).unwrap();
        while let Some(row) = table.next_row().unwrap() {
            rows.push(format!(
                "{}..{}: {:?} {:?}",
                row.start_address() - start,
                row.end_address() - start,
                row.cfa(),
                row.registers().collect::<Vec<_>>()
            ));
        }
        for name in at {
            fdes.insert(name.clone(), (at.len(), fde.len(), rows.clone()));
        }
    }
    fdes
}

/// The functions of `file` by address (their names without Mach-O's `_`).
fn function_names(file: &cranelift_object::object::File) -> BTreeMap<u64, Vec<String>> {
    let macho = file.format() == cranelift_object::object::BinaryFormat::MachO;
    let mut names: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for symbol in file.symbols() {
        if symbol.kind() == SymbolKind::Text && symbol.is_definition() {
            let name = symbol.name().unwrap();
            let name = if macho { &name[1..] } else { name };
            names
                .entry(symbol.address())
                .or_default()
                .push(name.to_string());
        }
    }
    names
}

/// The FDEs ([`fdes_in`]) of the linked image `path`.
fn fde_rows(path: &Path) -> BTreeMap<String, (usize, u64, Vec<String>)> {
    let bytes = std::fs::read(path).unwrap();
    let file = cranelift_object::object::File::parse(&*bytes).unwrap();
    let name = match file.format() {
        cranelift_object::object::BinaryFormat::MachO => "__eh_frame",
        _ => ".eh_frame",
    };
    let context = path.display().to_string();
    let section = file
        .section_by_name(name)
        .unwrap_or_else(|| panic!("{context}: no {name}"));
    fdes_in(
        section.data().unwrap(),
        section.address(),
        &function_names(&file),
        &context,
    )
}

/// The FDEs ([`fdes_in`]) of the Mach-O object `path` as Apple's ld64 reads them: it
/// applies `__eh_frame`'s relocations to its bytes, a `SUBTRACTOR` pair as the difference
/// of its symbols' addresses in the object plus the bytes there, an `UNSIGNED` alone as its
/// symbol's address plus the bytes (and takes no other type), then parses the result at
/// the section's address in the object (ld64's `CFISection::cfiParse`). `ld64.lld` locates
/// an FDE by its relocation's symbol instead, so this is what tells a wrong addend.
fn fde_rows_as_ld64_reads(path: &Path) -> BTreeMap<String, (usize, u64, Vec<String>)> {
    use cranelift_object::object::{ObjectSymbolTable as _, RelocationTarget};
    let bytes = std::fs::read(path).unwrap();
    let file = cranelift_object::object::File::parse(&*bytes).unwrap();
    let context = path.display().to_string();
    let section = file.section_by_name("__eh_frame").unwrap();
    let mut data = section.data().unwrap().to_vec();
    let symbols = file.symbol_table().unwrap();
    let address = |index| symbols.symbol_by_index(index).unwrap().address();
    for (offset, relocation) in section.relocations() {
        let RelocationTarget::Symbol(target) = relocation.target() else {
            panic!("{context}: a relocation at {offset:#x} names no symbol");
        };
        let minus = relocation.subtractor().map_or(0, address);
        let value = address(target).wrapping_sub(minus);
        let at = offset as usize;
        match relocation.size() {
            64 => {
                let old = u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
                data[at..at + 8].copy_from_slice(&value.wrapping_add(old).to_le_bytes());
            }
            32 => {
                let old = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                let new = (value as u32).wrapping_add(old);
                data[at..at + 4].copy_from_slice(&new.to_le_bytes());
            }
            size => panic!("{context}: a relocation of {size} bits at {offset:#x}"),
        }
        assert!(
            relocation.kind() == cranelift_object::object::RelocationKind::Absolute,
            "{context}: ld64 applies no {:?} relocation in __eh_frame",
            relocation.flags()
        );
    }
    fdes_in(&data, section.address(), &function_names(&file), &context)
}

/// What macOS's unwinder reads first, the dylib `path`'s `__unwind_info` (the compact
/// unwind table `ld64` builds), against its `__eh_frame`: libunwind looks a return address
/// up in `__unwind_info` and, where the entry says "DWARF" (all `ld64.lld` writes for code
/// with only `__eh_frame`), parses the FDE at the offset the entry gives, and nothing else.
/// So every function with an FDE must have an entry of its own, starting at its first
/// instruction, in DWARF mode, naming that FDE's offset, and no other entry may start
/// inside the FDE's range (the lookup of a return address there would find that one).
/// Returns how many functions it checked. (Apple's "compact unwind encoding" format, as
/// in its `compact_unwind_encoding.h` and LLVM's `MachOObjectFile`.)
fn unwind_info_points_at_fdes(path: &Path, context: &str) -> usize {
    use cranelift_object::object::ObjectSegment as _;
    use gimli::{BaseAddresses, CieOrFde, EhFrame, UnwindSection};
    let bytes = std::fs::read(path).unwrap();
    let file = cranelift_object::object::File::parse(&*bytes).unwrap();
    let dwarf_mode = match file.architecture() {
        cranelift_object::object::Architecture::X86_64 => 0x0400_0000,
        cranelift_object::object::Architecture::Aarch64 => 0x0300_0000,
        other => panic!("{context}: no compact unwind for {other:?}"),
    };
    // Function offsets are from the image's base, its `__TEXT` segment.
    let base = file
        .segments()
        .find(|s| s.name().ok().flatten() == Some("__TEXT"))
        .unwrap_or_else(|| panic!("{context}: no __TEXT segment"))
        .address();
    let info = file
        .section_by_name("__unwind_info")
        .unwrap_or_else(|| panic!("{context}: no __unwind_info"));
    let info = info.data().unwrap();
    let word = |at: usize| u32::from_le_bytes(info[at..at + 4].try_into().unwrap());
    let half = |at: usize| u16::from_le_bytes(info[at..at + 2].try_into().unwrap()) as usize;
    assert_eq!(word(0), 1, "{context}: __unwind_info's version");
    let common: Vec<u32> = (0..word(8) as usize)
        .map(|i| word(word(4) as usize + 4 * i))
        .collect();
    let (index_at, index_count) = (word(20) as usize, word(24) as usize);
    // Every entry, as the address it starts at and its encoding, in address order.
    let mut entries: Vec<(u64, u32)> = Vec::new();
    for i in 0..index_count {
        let at = index_at + 12 * i;
        let (first, page) = (base + u64::from(word(at)), word(at + 4) as usize);
        if page == 0 {
            // The last index: where the last function ends.
            continue;
        }
        match word(page) {
            // Regular: (function offset, encoding) pairs.
            2 => {
                let (at, count) = (page + half(page + 4), half(page + 6));
                entries.extend(
                    (0..count).map(|e| (base + u64::from(word(at + 8 * e)), word(at + 8 * e + 4))),
                );
            }
            // Compressed: the offset from the page's first function in 24 bits, an
            // encoding's index in 8, common encodings first, then the page's own.
            3 => {
                let (at, count) = (page + half(page + 4), half(page + 6));
                let own = page + half(page + 8);
                for e in 0..count {
                    let w = word(at + 4 * e);
                    let index = (w >> 24) as usize;
                    let encoding = match common.get(index) {
                        Some(&encoding) => encoding,
                        None => word(own + 4 * (index - common.len())),
                    };
                    entries.push((first + u64::from(w & 0xff_ffff), encoding));
                }
            }
            kind => panic!("{context}: a second-level page of kind {kind}"),
        }
    }
    assert!(
        entries.windows(2).all(|w| w[0].0 < w[1].0),
        "{context}: __unwind_info's entries are not in address order"
    );
    // The FDEs, by their offset in `__eh_frame`: the range each covers.
    let section = file.section_by_name("__eh_frame").unwrap();
    let mut eh_frame = EhFrame::new(section.data().unwrap(), gimli::LittleEndian);
    eh_frame.set_address_size(8);
    let bases = BaseAddresses::default().set_eh_frame(section.address());
    let mut fdes: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut parsed = eh_frame.entries(&bases);
    while let Some(entry) = parsed.next().unwrap() {
        if let CieOrFde::Fde(partial) = entry {
            let fde = partial
                .parse(|section, bases, o| section.cie_from_offset(bases, o))
                .unwrap();
            let start = fde.initial_address();
            fdes.insert(fde.offset() as u64, (start, start + fde.len()));
        }
    }
    let names = function_names(&file);
    for (&offset, &(start, end)) in &fdes {
        let name = names.get(&start).map_or(&[][..], Vec::as_slice);
        let at = entries.partition_point(|&(a, _)| a <= start);
        let found = at.checked_sub(1).map(|i| entries[i]);
        assert_eq!(
            found,
            Some((start, dwarf_mode | offset as u32)),
            "{context}: {name:?} at {start:#x} (its FDE at {offset:#x} in __eh_frame): \
             __unwind_info's entry there is not its own in DWARF mode"
        );
        if let Some(&(inside, _)) = entries.get(at).filter(|&&(a, _)| a < end) {
            panic!("{context}: {name:?}: an entry starts at {inside:#x}, inside its FDE");
        }
    }
    fdes.len()
}

/// Mach-O objects (macOS, x86_64 and arm64) carry the unwind information ELF objects do:
/// linked into a dylib by `ld64.lld`, every function has the FDE, with the same rows, that
/// the same module linked for Linux has, and the object's FDEs as Apple's ld64 reads them
/// ([`fde_rows_as_ld64_reads`]) are the dylib's,
/// which the Linux tests above unwind through at every instruction; the dylib's
/// `__unwind_info`, which macOS's unwinder reads first, leads each function to its FDE
/// ([`unwind_info_points_at_fdes`]). (An alias of ELF is a thunk in Mach-O, with an FDE of
/// its own.) This machine cannot run macOS code: the rows are what an unwinder there reads.
/// In every configuration.
#[test]
fn macho_objects_have_the_fdes_of_elf_objects() {
    let Some(ld64) = macho_linker() else {
        eprintln!("skipping: needs ld64.lld from LLVM 15 or later (Debian: lld-19)");
        return;
    };
    if !have("ld.lld") {
        eprintln!("skipping: needs ld.lld (Debian: lld)");
        return;
    }
    for (linux, apple, arch) in [
        ("x86_64-unknown-linux-gnu", "x86_64-apple-darwin", "x86_64"),
        ("aarch64-unknown-linux-gnu", "aarch64-apple-darwin", "arm64"),
    ] {
        let dir = scratch(&format!("macho-{arch}"));
        for (i, (config, args)) in configurations().iter().enumerate() {
            let context = format!("{apple} {config}");
            let (elf, macho) = (
                dir.join(format!("m{i}.o")),
                dir.join(format!("m{i}.macho.o")),
            );
            clif_merge(linux, true, args, &[], &elf);
            clif_merge(apple, true, args, &[], &macho);
            let (so, dylib) = (
                dir.join(format!("m{i}.so")),
                dir.join(format!("m{i}.dylib")),
            );
            run(Command::new("ld.lld")
                .arg("-shared")
                .arg(&elf)
                .arg("-o")
                .arg(&so));
            link_dylib(ld64, arch, &macho, &dylib);
            assert!(unwind_info_points_at_fdes(&dylib, &context) > 0);
            let (want, got) = (fde_rows(&so), fde_rows(&dylib));
            assert!(!want.is_empty(), "{context}: no FDE in the Linux build");
            assert_eq!(
                fde_rows_as_ld64_reads(&macho),
                got,
                "{context}: the object's FDEs as ld64 reads them, against the dylib's"
            );
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                "{context}: the functions with an FDE"
            );
            for (name, fde) in want.iter().filter(|(_, (names, ..))| *names == 1) {
                assert_eq!(&got[name], fde, "{context}: {name}'s FDE");
            }
        }
    }
}

// ---- Windows on arm64 -------------------------------------------------------------------

/// What a Windows arm64 unwinder finds, emulated: registers and memory as a prologue
/// leaves them, from distinct values at entry.
#[derive(Clone, Debug, PartialEq)]
struct Arm64State {
    /// x0..x30, then sp.
    x: [u64; 32],
    /// d8..d15.
    d: [u64; 8],
    /// Whether the return address in x30 is signed (`paciasp`, `pacibsp`).
    signed: bool,
    /// Words written, by address.
    memory: BTreeMap<u64, u64>,
}

const SP: usize = 31;

impl Arm64State {
    fn at_entry() -> Self {
        let mut x = [0; 32];
        for (n, r) in x.iter_mut().enumerate() {
            *r = 0x7700 + n as u64;
        }
        x[SP] = 0x10_0000;
        let mut d = [0; 8];
        for (n, r) in d.iter_mut().enumerate() {
            *r = 0xd800 + n as u64;
        }
        Arm64State {
            x,
            d,
            signed: false,
            memory: BTreeMap::new(),
        }
    }

    fn load(&self, address: u64) -> u64 {
        // A word the prologue never wrote: a value no register had.
        self.memory.get(&address).copied().unwrap_or(0xdead)
    }

    /// Run one prologue instruction: the stores, loads and arithmetic Cranelift's
    /// prologues use. `None` for any other instruction.
    fn step(&mut self, insn: u32) -> Option<()> {
        let bits = |hi: u32, lo: u32| (insn >> lo) & ((1 << (hi - lo + 1)) - 1);
        let signed =
            |value: u32, width: u32| ((value << (32 - width)) as i32 >> (32 - width)) as i64;
        let (rt, rn, rt2) = (bits(4, 0), bits(9, 5), bits(14, 10));
        match insn {
            // paciasp, pacibsp, paciaz, pacibz
            0xd503_233f | 0xd503_237f | 0xd503_231f | 0xd503_235f => self.signed = true,
            // autibsp, autibz (an epilogue's)
            0xd503_23ff | 0xd503_23df => self.signed = false,
            // bti
            0xd503_241f | 0xd503_245f | 0xd503_249f | 0xd503_24df => {}
            // stp / ldp of x or d registers: offset, pre-index, post-index.
            _ if bits(29, 27) == 0b101 && matches!(bits(25, 23), 0b001..=0b011) => {
                let simd = bits(26, 26) == 1;
                if (simd, bits(31, 30)) != (false, 0b10) && (simd, bits(31, 30)) != (true, 0b01) {
                    return None;
                }
                let offset = signed(bits(21, 15), 7) * 8;
                let base = self.x[rn as usize];
                let mode = bits(25, 23);
                let address = if mode == 0b001 {
                    base
                } else {
                    base.wrapping_add(offset as u64)
                };
                if bits(22, 22) == 1 {
                    let (a, b) = (self.load(address), self.load(address + 8));
                    self.set(simd, rt, a);
                    self.set(simd, rt2, b);
                } else {
                    let (a, b) = (self.get(simd, rt), self.get(simd, rt2));
                    self.memory.insert(address, a);
                    self.memory.insert(address + 8, b);
                }
                if mode != 0b010 {
                    self.x[rn as usize] = base.wrapping_add(offset as u64);
                }
            }
            // str / ldr (unsigned offset), stur / ldur, str / ldr pre- and post-index, of x or d.
            _ if bits(31, 30) == 0b11 && bits(29, 27) == 0b111 => {
                let simd = bits(26, 26) == 1;
                let load = bits(22, 22) == 1;
                let base = self.x[rn as usize];
                let (address, writeback) = match (bits(25, 24), bits(21, 21), bits(11, 10)) {
                    (0b01, _, _) => (base + u64::from(bits(21, 10)) * 8, None),
                    (0b00, 0, 0b00) => (base.wrapping_add(signed(bits(20, 12), 9) as u64), None),
                    (0b00, 0, 0b11) => {
                        let a = base.wrapping_add(signed(bits(20, 12), 9) as u64);
                        (a, Some(a))
                    }
                    (0b00, 0, 0b01) => (
                        base,
                        Some(base.wrapping_add(signed(bits(20, 12), 9) as u64)),
                    ),
                    _ => return None,
                };
                if load {
                    let v = self.load(address);
                    self.set(simd, rt, v);
                } else {
                    self.memory.insert(address, self.get(simd, rt));
                }
                if let Some(w) = writeback {
                    self.x[rn as usize] = w;
                }
            }
            // A store of wzr or xzr (a stack probe): below the frame, never read back.
            _ if bits(29, 27) == 0b111 && bits(26, 26) == 0 && bits(23, 22) == 0 && rt == 31 => {}
            // cmn / cmp of registers, b.cond (a probe's loop, run once here): flags only.
            _ if insn & 0x7f20_001f == 0x2b00_001f || insn & 0xff00_0010 == 0x5400_0000 => {}
            // movz / movk, of x or w registers (a large allocation's size).
            _ if matches!(bits(30, 23), 0b10_100101 | 0b11_100101) => {
                let shift = 16 * bits(22, 21);
                let imm = u64::from(bits(20, 5)) << shift;
                let old = self.x[rt as usize];
                let mut value = if bits(30, 29) == 0b10 {
                    imm
                } else {
                    old & !(0xffff << shift) | imm
                };
                if bits(31, 31) == 0 {
                    value &= 0xffff_ffff;
                }
                self.x[rt as usize] = value;
            }
            // sub sp, sp, xM (uxtx), and an epilogue's add sp, sp, xM.
            _ if insn & 0xffe0_ffff == 0xcb20_63ff => {
                self.x[SP] = self.x[SP].wrapping_sub(self.x[bits(20, 16) as usize]);
            }
            _ if insn & 0xffe0_ffff == 0x8b20_63ff => {
                self.x[SP] = self.x[SP].wrapping_add(self.x[bits(20, 16) as usize]);
            }
            // add / sub (immediate), 64-bit, sp allowed.
            _ if bits(31, 31) == 1 && bits(29, 23) == 0b0100010 => {
                let imm = u64::from(bits(21, 10)) << (12 * bits(22, 22));
                let base = self.x[rn as usize];
                self.x[rt as usize] = if bits(30, 30) == 0 {
                    base.wrapping_add(imm)
                } else {
                    base.wrapping_sub(imm)
                };
            }
            _ => return None,
        }
        Some(())
    }

    fn get(&self, simd: bool, n: u32) -> u64 {
        if simd {
            self.d[n as usize - 8]
        } else {
            self.x[n as usize]
        }
    }

    fn set(&mut self, simd: bool, n: u32, value: u64) {
        if simd {
            self.d[n as usize - 8] = value;
        } else {
            self.x[n as usize] = value;
        }
    }

    /// Undo the prologue by `codes` (Windows' unwind codes, last instruction first), as
    /// Windows' unwinder runs them (`RtlpUnwindFunctionFull`: `set_fp` takes the stack
    /// pointer from x29, `add_fp` from x29 less its offset, a `_x` form loads from the
    /// stack pointer and then moves it up).
    fn unwind(&mut self, codes: &[Arm64Code]) {
        for code in codes {
            let sp = self.x[SP];
            match *code {
                Arm64Code::Alloc(size) => self.x[SP] = sp + size,
                Arm64Code::SavePair {
                    first,
                    offset,
                    simd,
                    pre,
                } => {
                    let at = if pre { sp } else { sp + offset };
                    let (a, b) = (self.load(at), self.load(at + 8));
                    self.set(simd, first, a);
                    self.set(simd, first + 1, b);
                    if pre {
                        self.x[SP] = sp + offset;
                    }
                }
                Arm64Code::Save {
                    reg,
                    offset,
                    simd,
                    pre,
                } => {
                    let at = if pre { sp } else { sp + offset };
                    let v = self.load(at);
                    self.set(simd, reg, v);
                    if pre {
                        self.x[SP] = sp + offset;
                    }
                }
                Arm64Code::SetFp => self.x[SP] = self.x[29],
                Arm64Code::AddFp(offset) => self.x[SP] = self.x[29] - offset,
                Arm64Code::PacSignLr => self.signed = false,
                Arm64Code::Nop => {}
            }
        }
    }
}

/// Windows arm64 unwind codes, decoded (the `save_*` forms pair registers with the next
/// register; `pre` is the pre-indexed `_x` form, whose offset is also the allocation).
#[derive(Clone, Copy, Debug)]
enum Arm64Code {
    Alloc(u64),
    SavePair {
        first: u32,
        offset: u64,
        simd: bool,
        pre: bool,
    },
    Save {
        reg: u32,
        offset: u64,
        simd: bool,
        pre: bool,
    },
    SetFp,
    AddFp(u64),
    PacSignLr,
    Nop,
}

/// The codes of `bytes` up to `end` (Microsoft's "ARM64 exception handling" encodings),
/// and how many of them the prologue has: those before `end` or `end_c`.
fn arm64_codes(bytes: &[u8], context: &str) -> (Vec<Arm64Code>, usize) {
    use Arm64Code::*;
    let pair = |first, offset, simd, pre| SavePair {
        first,
        offset,
        simd,
        pre,
    };
    let one = |reg, offset, simd, pre| Save {
        reg,
        offset,
        simd,
        pre,
    };
    let mut codes = Vec::new();
    let mut prologue = None;
    let mut i = 0;
    loop {
        let b = u32::from(bytes[i]);
        let next = |n: usize| u32::from(bytes[i + n]);
        // The two bytes of a two-byte code, their register field and their offset field.
        let v = b << 8 | bytes.get(i + 1).map_or(0, |&n| u32::from(n));
        let z = u64::from(v & 0x3f);
        let (code, len) = match b {
            0x00..=0x1f => (Alloc(u64::from(b) * 16), 1),
            0x20..=0x3f => (pair(19, u64::from(b & 0x1f) * 8, false, true), 1),
            0x40..=0x7f => (pair(29, u64::from(b & 0x3f) * 8, false, false), 1),
            0x80..=0xbf => (pair(29, (u64::from(b & 0x3f) + 1) * 8, false, true), 1),
            0xc0..=0xc7 => (Alloc(u64::from((b & 7) << 8 | next(1)) * 16), 2),
            0xc8..=0xcb => (pair(19 + ((v >> 6) & 0xf), z * 8, false, false), 2),
            0xcc..=0xcf => (pair(19 + ((v >> 6) & 0xf), (z + 1) * 8, false, true), 2),
            0xd0..=0xd3 => (one(19 + ((v >> 6) & 0xf), z * 8, false, false), 2),
            0xd4 | 0xd5 => (one(19 + ((v >> 5) & 0xf), (z % 32 + 1) * 8, false, true), 2),
            0xd8 | 0xd9 => (pair(8 + ((v >> 6) & 0x7), z * 8, true, false), 2),
            0xda | 0xdb => (pair(8 + ((v >> 6) & 0x7), (z + 1) * 8, true, true), 2),
            0xdc | 0xdd => (one(8 + ((v >> 6) & 0x7), z * 8, true, false), 2),
            0xde => (one(8 + ((v >> 5) & 0x7), (z % 32 + 1) * 8, true, true), 2),
            0xe0 => (
                Alloc(u64::from(next(1) << 16 | next(2) << 8 | next(3)) * 16),
                4,
            ),
            0xe1 => (SetFp, 1),
            0xe2 => (AddFp(u64::from(next(1)) * 8), 2),
            0xe3 => (Nop, 1),
            0xe4 => return (codes.clone(), prologue.unwrap_or(codes.len())),
            0xe5 => {
                prologue.get_or_insert(codes.len());
                i += 1;
                continue;
            }
            0xfc => (PacSignLr, 1),
            _ => panic!("{context}: unwind code {b:#x} at {i}"),
        };
        codes.push(code);
        i += len;
    }
}

/// A `.xdata` record: the length of code it covers, its codes, how many of them are its
/// prologue's (one per instruction), and its epilogue scopes: where each starts (in bytes
/// from the record's start) and its codes, up to `end`.
type Arm64Record = (u64, Vec<Arm64Code>, usize, Vec<Arm64Scope>);

/// An epilogue scope: where it starts, in bytes from its record's start, and its codes.
type Arm64Scope = (u64, Vec<Arm64Code>);

fn arm64_record(record: &[u8], context: &str) -> Arm64Record {
    let word = |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().unwrap());
    let header = word(0);
    assert_eq!(
        header >> 18 & 0xf,
        0,
        "{context}: version, exception data, packed epilogue"
    );
    let (epilogues, words, start) = match (header >> 22 & 0x1f, header >> 27) {
        (0, 0) => (word(4) & 0xffff, word(4) >> 16 & 0xff, 8),
        (epilogues, words) => (epilogues, words, 4),
    };
    let codes_at = start + 4 * epilogues as usize;
    let bytes = &record[codes_at..codes_at + words as usize * 4];
    let (codes, prologue) = arm64_codes(bytes, context);
    let mut last = None;
    let scopes = (0..epilogues as usize)
        .map(|n| {
            let scope = word(start + 4 * n);
            let (at, index) = (u64::from(scope & 0x3ffff) * 4, (scope >> 22) as usize);
            assert!(last < Some(at), "{context}: epilogue scopes out of order");
            last = Some(at);
            (at, arm64_codes(&bytes[index..], context).0)
        })
        .collect();
    (u64::from(header & 0x3ffff) * 4, codes, prologue, scopes)
}

/// [`check_arm64_epilogues`] for each record of a function (`fragments` as
/// [`check_arm64_function`] takes them; `epilogues`: each record's start, length and
/// scopes): how many scopes.
fn check_arm64_epilogues_of(
    fragments: &[(u64, u64, Vec<Arm64Code>, usize)],
    epilogues: &[(u64, u64, Vec<Arm64Scope>)],
    code: &[u8],
    context: &str,
) -> usize {
    let prologue = match fragments {
        [(_, _, _, n)] => *n,
        [(_, len, ..), ..] => (*len / 4) as usize,
        [] => 0,
    };
    epilogues
        .iter()
        .map(|(begin, len, scopes)| {
            check_arm64_epilogues(code, (*begin, *len), prologue, scopes, context)
        })
        .sum()
}

/// `retab`: authenticate the return address with the B key, and return.
const RETAB: u32 = 0xd65f_0fff;

/// Check the epilogue scopes of a record that starts `begin` bytes into a function whose
/// code is `code`: each starts after the prologue's `prologue` instructions and ends (its
/// codes' count of instructions on) at the function's return or a branch out of it, or
/// (one code earlier: its `pac_sign_lr` and its end are both `retab`'s) at a `retab`; and
/// stopped before each of its instructions, Windows' unwinder (running the scope's codes
/// from that instruction's) leaves the stack pointer, the callee-saved registers, the
/// frame pointer, the return address and its signing as the epilogue leaves them, from
/// any values the body left. Every `ret` and `retab` the record of a function with a frame
/// covers, and
/// every branch just after its frame record is reloaded (a tail call), ends a scope. How
/// many scopes.
fn check_arm64_epilogues(
    code: &[u8],
    (begin, len): (u64, u64),
    prologue: usize,
    scopes: &[Arm64Scope],
    context: &str,
) -> usize {
    let insn = |at: u64| u32::from_le_bytes(code[at as usize..at as usize + 4].try_into().unwrap());
    let seen = |s: &Arm64State| (s.x[SP], s.x[19..=30].to_vec(), s.d, s.signed);
    let mut ends = Vec::new();
    for (start, codes) in scopes {
        let start = begin + start;
        assert!(
            start >= prologue as u64 * 4,
            "{context}: an epilogue scope at {start} in the prologue"
        );
        let mut end = start + 4 * codes.len() as u64;
        let authenticating_return = matches!(codes.last(), Some(Arm64Code::PacSignLr))
            && end >= start + 4
            && insn(end - 4) == RETAB;
        if authenticating_return {
            end -= 4;
        }
        assert!(
            end < begin + len,
            "{context}: the epilogue at {start} ends past its record"
        );
        let exit = insn(end);
        assert!(
            exit == 0xd65f_03c0
                || authenticating_return
                || exit & 0xffff_fc1f == 0xd61f_0000
                || exit & 0xfc00_0000 == 0x1400_0000,
            "{context}: the epilogue at {start} ends at {exit:#010x}, not a return or a branch"
        );
        ends.push(end);
        // The body's values: the entry's, but every register Windows restores changed, and
        // the return address signed where the epilogue authenticates it.
        let mut state = Arm64State::at_entry();
        for r in state.x.iter_mut().take(31).skip(19) {
            *r ^= 0xb0d7_0000;
        }
        for r in &mut state.d {
            *r ^= 0xb0d7_0000;
        }
        state.signed = authenticating_return
            || (start..end)
                .step_by(4)
                .any(|at| matches!(insn(at), 0xd503_23ff | 0xd503_23df));
        let mut states = vec![state.clone()];
        for at in (start..end).step_by(4) {
            state.step(insn(at)).unwrap_or_else(|| {
                panic!("{context}: epilogue instruction at {at} ({:#010x}) is not one this emulator runs", insn(at))
            });
            states.push(state.clone());
        }
        // `retab` authenticates before it returns: stopped at it, the unwinder runs its
        // `pac_sign_lr`, and what the epilogue leaves is authenticated.
        if authenticating_return {
            state.signed = false;
        }
        for (k, before) in states.iter().enumerate() {
            let mut unwound = before.clone();
            unwound.unwind(&codes[k..]);
            assert_eq!(
                seen(&unwound),
                seen(&state),
                "{context}: unwound after {k} of the epilogue's {} instructions at {start} ({codes:?})",
                codes.len()
            );
        }
    }
    // (A function without a frame has no prologue, and nothing to restore.) A return, and
    // a branch right after the frame record is reloaded (and the return address
    // authenticated), a tail call, must each end a scope.
    let framed = prologue > 0;
    let reload = |at: u64| insn(at) == 0xa8c1_7bfd;
    for at in (begin..begin + len)
        .step_by(4)
        .filter(|&at| framed && at >= prologue as u64 * 4 + 4)
    {
        let w = insn(at);
        let branch = w & 0xfc00_0000 == 0x1400_0000 || w & 0xffff_fc1f == 0xd61f_0000;
        let after_reload = reload(at - 4)
            || (matches!(insn(at - 4), 0xd503_23ff | 0xd503_23df) && at >= 8 && reload(at - 8));
        if w == 0xd65f_03c0 || w == RETAB || (branch && after_reload) {
            assert!(
                ends.contains(&at),
                "{context}: the return or tail call at {at} ends no epilogue scope"
            );
        }
    }
    scopes.len()
}

/// Check the records (`fragments`: offset, length, codes, prologue's codes) that cover a
/// function whose code is `code`: they cover it all, and stopped after each instruction of
/// its prologue, Windows' unwinder ([`Arm64State::unwind`], skipping the codes of the
/// instructions that have not run) restores what the function entered with. A function
/// with two records (a prologue with a pair of registers no code describes) is checked in
/// its body, where an exception or a panic finds it.
fn check_arm64_function(
    fragments: &[(u64, u64, Vec<Arm64Code>, usize)],
    code: &[u8],
    context: &str,
) {
    let covered: u64 = fragments.iter().map(|f| f.1).sum();
    assert_eq!(
        covered,
        code.len() as u64,
        "{context}: the records cover the function"
    );
    let prologue = match fragments {
        [(_, _, _, n)] => *n,
        [(_, len, ..), (_, _, _, 0)] => (*len / 4) as usize,
        _ => panic!("{context}: records {fragments:?}"),
    };
    let entry = Arm64State::at_entry();
    let mut state = entry.clone();
    let seen = |s: &Arm64State| (s.x[SP], s.x[19..=30].to_vec(), s.d, s.signed);
    for k in 0..=prologue {
        if k > 0 {
            let insn = u32::from_le_bytes(code[(k - 1) * 4..k * 4].try_into().unwrap());
            state.step(insn).unwrap_or_else(|| {
                panic!("{context}: prologue instruction {k} ({insn:#010x}) is not one this emulator runs")
            });
        }
        let at = k as u64 * 4;
        if fragments.len() > 1 && at < fragments[1].0 {
            continue;
        }
        let (start, _, codes, scope) = fragments
            .iter()
            .rev()
            .find(|f| f.0 <= at)
            .expect("a record covers the prologue");
        let skipped = scope.saturating_sub(((at - start) / 4) as usize);
        let mut unwound = state.clone();
        unwound.unwind(&codes[skipped..]);
        assert_eq!(
            seen(&unwound),
            seen(&entry),
            "{context}: unwound after {k} of the prologue's {prologue} instructions ({codes:?})"
        );
    }
}

/// Mach-O through the plugin (`define_in_object`, `finish_object`), whose shared bodies
/// are the module's anonymous functions (`_.LfnN` symbols) where the command line names
/// them: for `x86_64-apple-darwin` and `aarch64-apple-darwin`, with merge-similar, in both
/// modes, the object links into a dylib with `ld64.lld`, every function with a frame
/// (anonymous bodies included) has an FDE there, which the dylib's `__unwind_info` leads
/// to ([`unwind_info_points_at_fdes`]), and the object's FDEs as Apple's ld64 computes them
/// from its relocations are the dylib's.
#[test]
fn macho_plugin_objects_give_anonymous_bodies_their_fdes() {
    use cranelift_object::{ObjectBuilder, ObjectModule};
    let Some(ld64) = macho_linker() else {
        eprintln!("skipping: needs ld64.lld from LLVM 15 or later (Debian: lld-19)");
        return;
    };
    for (apple, arch, frame) in [
        ("x86_64-apple-darwin", "x86_64", &[0x55u8][..]),
        ("aarch64-apple-darwin", "arm64", AARCH64_FRAME),
    ] {
        let dir = scratch(&format!("macho-plugin-{arch}"));
        for mode in [MergeMode::Trampolines, MergeMode::Aliases] {
            let context = format!("{apple} plugin {mode:?}, merge-similar");
            let target = TargetInfo::from_triple_str(apple).unwrap();
            let isa = clif_merge::build_isa(&target, &[("is_pic".into(), "true".into())]).unwrap();
            let mut module =
                ObjectModule::new(ObjectBuilder::new(isa, "m", default_libcall_names()).unwrap());
            let (merger, _) = plugin_merger(&mut module, functions(), mode, true, false);
            let merged = merger.define_in_object(&mut module).unwrap();
            let mut product = module.finish();
            merged.finish_object(&mut product).unwrap();
            let (object, dylib) = (
                dir.join(format!("{mode:?}.o")),
                dir.join(format!("{mode:?}.dylib")),
            );
            std::fs::write(&object, product.emit().unwrap()).unwrap();
            link_dylib(ld64, arch, &object, &dylib);
            assert!(unwind_info_points_at_fdes(&dylib, &context) > 0);
            let got = fde_rows(&dylib);
            assert_eq!(
                fde_rows_as_ld64_reads(&object),
                got,
                "{context}: the object's FDEs as ld64 reads them, against the dylib's"
            );
            let bytes = std::fs::read(&object).unwrap();
            let file = cranelift_object::object::File::parse(&*bytes).unwrap();
            let text = file.section_by_name("__text").unwrap();
            let code = text.data().unwrap();
            let framed: Vec<String> = function_names(&file)
                .into_iter()
                .filter(|&(at, _)| code[(at - text.address()) as usize..].starts_with(frame))
                .flat_map(|(_, names)| names)
                .collect();
            let anonymous = framed.iter().filter(|n| n.starts_with(".Lfn")).count();
            assert!(
                anonymous > 0,
                "{context}: no anonymous body with a frame: {framed:?}"
            );
            for name in &framed {
                assert!(
                    got.contains_key(name),
                    "{context}: {name} has a frame but no FDE in the dylib"
                );
            }
        }
    }
}

/// Windows on arm64 (`aarch64-pc-windows-msvc`, COFF): every function with a frame has a
/// `RUNTIME_FUNCTION` in `.pdata`, and its `.xdata` record's codes, undone as Windows'
/// unwinder undoes them (the rules of Microsoft's "ARM64 exception handling", as in the
/// unwinder Windows and .NET share), restore the stack pointer, the frame pointer, the
/// return address and every callee-saved register after each instruction of its prologue,
/// in every configuration. This machine runs no Windows arm64 code, so both the prologue
/// and the unwinder are emulated ([`Arm64State`]).
#[test]
fn windows_arm64_unwind_codes_undo_every_prologue_instruction() {
    use cranelift_object::object::RelocationTarget;
    let dir = scratch("windows-arm64");
    let mut checked = 0;
    let mut scopes = 0;
    // Every configuration; return addresses signed (with the B key, as Windows does) and
    // branch targets marked (`bti` before the prologue).
    let mut signed = vec!["--merge-functions", "trampolines", "--merge-similar"];
    signed.extend(set_args(&[
        "sign_return_address=true",
        "sign_return_address_with_bkey=true",
        "use_bti=true",
    ]));
    // The same where the target has pointer authentication (`has_pauth`): the epilogue
    // authenticates and returns in one instruction, `retab`.
    let mut retab = signed.clone();
    retab.extend(set_args(&["has_pauth=true"]));
    // And stack probes (unrolled below 4 pages, a loop above), in every function's prologue.
    let mut probes = vec!["--merge-functions", "aliases", "--merge-similar"];
    probes.extend(set_args(&[
        "enable_probestack=true",
        "probestack_strategy=inline",
    ]));
    let runs = configurations()
        .into_iter()
        .chain([
            (signed.join(" "), signed),
            (retab.join(" "), retab),
            (probes.join(" "), probes),
        ])
        .flat_map(|c| {
            [FIXTURE, WINDOWS_ARM64_FRAMES, TAIL_CALLS_FIXTURE].map(|fixture| (c.clone(), fixture))
        });
    for (i, ((config, args), fixture)) in runs.enumerate() {
        let context = format!("aarch64-pc-windows-msvc {fixture} {config}");
        let obj = dir.join(format!("m{i}.o"));
        clif_merge_fixture(fixture, "aarch64-pc-windows-msvc", false, &args, &[], &obj);
        let bytes = std::fs::read(&obj).unwrap();
        let file = cranelift_object::object::File::parse(&*bytes).unwrap();
        let text = file.section_by_name(".text").unwrap().data().unwrap();
        let xdata = file.section_by_name(".xdata").unwrap().data().unwrap();
        let pdata = file.section_by_name(".pdata").unwrap();
        let pdata_bytes = pdata.data().unwrap();
        // Each entry: the function's address and its record's offset (COFF's addends are in
        // the data).
        let mut fields = BTreeMap::new();
        for (offset, relocation) in pdata.relocations() {
            let RelocationTarget::Symbol(symbol) = relocation.target() else {
                panic!("{context}: a .pdata relocation names no symbol");
            };
            let symbol = file.symbol_by_index(symbol).unwrap();
            let at = offset as usize;
            let addend = u32::from_le_bytes(pdata_bytes[at..at + 4].try_into().unwrap());
            fields.insert(offset, symbol.address() + u64::from(addend));
        }
        let records: BTreeMap<u64, usize> = (0..pdata_bytes.len() as u64 / 8)
            .map(|e| (fields[&(e * 8)], fields[&(e * 8 + 4)] as usize))
            .collect();
        assert_eq!(
            records.len() * 8,
            pdata_bytes.len(),
            "{context}: one entry a range"
        );
        let mut in_a_function = std::collections::BTreeSet::new();
        // COFF symbols have no size: each function ends where the next begins.
        let mut starts: Vec<u64> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
            .map(|s| s.address())
            .chain([text.len() as u64])
            .collect();
        starts.sort_unstable();
        starts.dedup();
        for sym in file.symbols() {
            if sym.kind() != SymbolKind::Text || !sym.is_definition() {
                continue;
            }
            let (start, name) = (sym.address(), sym.name().unwrap());
            let end = starts[starts.partition_point(|&s| s <= start)];
            let code = &text[start as usize..end as usize];
            let framed = code.starts_with(AARCH64_FRAME);
            in_a_function.extend(records.range(start..end).map(|(b, _)| *b));
            let mut epilogues = Vec::new();
            let fragments: Vec<_> = records
                .range(start..end)
                .map(|(&begin, &at)| {
                    let (len, codes, prologue, scopes) = arm64_record(&xdata[at..], &context);
                    epilogues.push((begin - start, len, scopes));
                    (begin - start, len, codes, prologue)
                })
                .collect();
            if fragments.is_empty() {
                assert!(
                    !framed,
                    "{context}: {name} has a frame but no RUNTIME_FUNCTION"
                );
                continue;
            }
            check_arm64_function(&fragments, code, &format!("{context}: {name}"));
            scopes += check_arm64_epilogues_of(
                &fragments,
                &epilogues,
                code,
                &format!("{context}: {name}"),
            );
            checked += 1;
        }
        let stray: Vec<_> = records
            .keys()
            .filter(|b| !in_a_function.contains(b))
            .collect();
        assert!(
            stray.is_empty(),
            "{context}: RUNTIME_FUNCTIONs in no function: {stray:x?}"
        );
    }
    assert!(checked > 0, "no function was checked");
    assert!(scopes > 0, "no epilogue was checked");
}

/// What the Windows arm64 JIT image of [`windows_arm64_jit_function_table_undoes_every_prologue_instruction`]
/// imports.
const WINDOWS_ARM64_IMAGE_IMPORTS: [(&str, &str); 2] = [("cb", "&cb"), ("ext", "&ext")];

/// Windows on arm64, JIT: the plugin defines [`FIXTURE`] and [`WINDOWS_ARM64_FRAMES`] in a
/// `JITModule` for `aarch64-pc-windows-msvc` (a fixed-address region of this process, never
/// run), and `Merged::jit_function_table` must give a table whose entries, laid out as
/// Windows on arm64 reads them (begin and record, two words), cover every function with a
/// frame from its first byte, its records the data the merger defined beside the code; and
/// each function's records must undo its prologue after every instruction, emulated as for
/// objects ([`check_arm64_function`]), in every mode, with and without merge-similar and
/// CLIF thunks, and with return addresses signed with the B key and `bti` landing pads, or
/// authenticated by `retab`.
#[test]
fn windows_arm64_jit_function_table_undoes_every_prologue_instruction() {
    let target = TargetInfo::from_triple_str("aarch64-pc-windows-msvc").unwrap();
    let signed = [
        ("sign_return_address", "true"),
        ("sign_return_address_with_bkey", "true"),
        ("use_bti", "true"),
    ];
    // With pointer authentication in the target, epilogues end in `retab`.
    let retab = [
        ("sign_return_address", "true"),
        ("sign_return_address_with_bkey", "true"),
        ("has_pauth", "true"),
    ];
    let mut checked = 0;
    let mut scopes = 0;
    for mode in [MergeMode::Trampolines, MergeMode::Aliases] {
        for (similar, clif_thunks, settings) in [
            (false, false, &[][..]),
            (true, false, &[][..]),
            (true, true, &[][..]),
            (true, false, &signed[..]),
            (true, false, &retab[..]),
        ] {
            let context = format!(
                "aarch64-pc-windows-msvc JIT {mode:?}, merge-similar {similar}, CLIF thunks \
                 {clif_thunks}, {settings:?}"
            );
            let (region, mut module) =
                image_module_for(&target, settings, &WINDOWS_ARM64_IMAGE_IMPORTS);
            let mut funcs = functions();
            let frames = std::fs::read_to_string(root().join(WINDOWS_ARM64_FRAMES)).unwrap();
            funcs.extend(cranelift_reader::parse_functions(&frames).unwrap());
            let (merged, _) = define_with_plugin(&mut module, funcs, mode, similar, clif_thunks);
            module.finalize_definitions().unwrap();
            let table = merged
                .jit_function_table(&module)
                .unwrap()
                .unwrap_or_else(|| panic!("{context}: no function table"));
            assert_eq!(
                table.machine,
                clif_merge::emit::unwind::windows_jit::WindowsMachine::Arm64,
                "{context}"
            );
            let words = table.entries();
            assert_eq!(
                words.len(),
                2 * table.functions.len(),
                "{context}: two words an entry"
            );
            // Where each entry's range begins, and where its record is, as addresses.
            let mut records = BTreeMap::new();
            for entry in words.chunks(2) {
                assert_eq!(
                    entry[1] % 4,
                    0,
                    "{context}: a record, not packed unwind data"
                );
                records.insert(
                    table.base + u64::from(entry[0]),
                    table.base + u64::from(entry[1]),
                );
            }
            // Every function the module defines, the merger's anonymous bodies included, by
            // address; each ends at the latest where the next begins.
            let mut starts: Vec<u64> = module
                .declarations()
                .get_functions()
                .filter(|(_, decl)| decl.linkage != Linkage::Import)
                .map(|(id, _)| module.get_finalized_function(id) as u64)
                .collect();
            starts.sort_unstable();
            let base = region.base() as u64;
            let memory = region.bytes(region.used());
            let at = |address: u64| &memory[(address - base) as usize..];
            let mut in_a_function = 0;
            for (k, &start) in starts.iter().enumerate() {
                let next = starts
                    .get(k + 1)
                    .copied()
                    .unwrap_or(base + memory.len() as u64);
                let mut epilogues = Vec::new();
                let fragments: Vec<_> = records
                    .range(start..next)
                    .map(|(&begin, &record)| {
                        let (len, codes, prologue, scopes) = arm64_record(at(record), &context);
                        epilogues.push((begin - start, len, scopes));
                        (begin - start, len, codes, prologue)
                    })
                    .collect();
                in_a_function += fragments.len();
                let name = format!("{context}: the function at 0x{start:x}");
                if fragments.is_empty() {
                    assert!(
                        !at(start).starts_with(AARCH64_FRAME),
                        "{name} has a frame but no RUNTIME_FUNCTION"
                    );
                    continue;
                }
                let covered: u64 = fragments.iter().map(|f| f.1).sum();
                assert_eq!(
                    fragments[0].0, 0,
                    "{name}: its first record is not at its start"
                );
                assert!(
                    start + covered <= next,
                    "{name}: its records run into the next function"
                );
                let code = &at(start)[..covered as usize];
                check_arm64_function(&fragments, code, &name);
                scopes += check_arm64_epilogues_of(&fragments, &epilogues, code, &name);
                checked += 1;
            }
            assert_eq!(
                in_a_function,
                records.len(),
                "{context}: RUNTIME_FUNCTIONs in no function"
            );
            drop(module);
        }
    }
    assert!(checked > 0, "no function was checked");
    assert!(scopes > 0, "no epilogue was checked");
}

/// Windows on arm64 with return addresses signed with the A key, where Windows' unwind
/// codes say the B key: writing an object, and defining JIT code, is an error that names a
/// function and the setting that avoids it, not unwind information that would lie (and no
/// object is left behind).
#[test]
fn windows_arm64_a_key_signing_is_an_error_naming_the_function() {
    let dir = scratch("windows-arm64-a-key");
    let object = dir.join("m.o");
    let out = Command::new(env!("CARGO_BIN_EXE_clif-merge"))
        .arg(root().join(FIXTURE))
        .args(["--target", "aarch64-pc-windows-msvc", "-q", "-o"])
        .arg(&object)
        .args(set_args(&["is_pic=false", "sign_return_address=true"]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let says = |message: &str| {
        message.contains("Windows arm64 unwind information of ")
            && message.contains("signed with the A key")
            && message.contains("sign_return_address_with_bkey=true")
    };
    assert!(!out.status.success() && says(&stderr), "{stderr}");
    assert!(!object.exists(), "an object was left behind");
    let target = TargetInfo::from_triple_str("aarch64-pc-windows-msvc").unwrap();
    let a_key = [("sign_return_address", "true")];
    let (_region, mut module) = image_module_for(&target, &a_key, &WINDOWS_ARM64_IMAGE_IMPORTS);
    let (merged, _) =
        try_define_with_plugin(&mut module, functions(), MergeMode::Aliases, true, false);
    let error = merged
        .err()
        .expect("the JIT defined A-key-signed Windows arm64 code")
        .to_string();
    assert!(says(&error), "{error}");
}

/// Windows x64 (COFF): a `RUNTIME_FUNCTION` in `.pdata` for every function with a frame,
/// and no `.eh_frame` (Cranelift makes Windows unwind information for Windows triples).
/// Checked by reading the object; not run on Windows.
#[test]
fn windows_x64_objects_have_pdata() {
    let dir = scratch("pdata");
    for (i, (config, args)) in configurations().iter().enumerate() {
        let obj = dir.join(format!("m{i}.o"));
        clif_merge("x86_64-pc-windows-gnu", true, args, &[], &obj);
        let bytes = std::fs::read(&obj).unwrap();
        let file = cranelift_object::object::File::parse(&*bytes).unwrap();
        let data = file
            .section_by_name(".text")
            .unwrap()
            .data()
            .unwrap()
            .to_vec();
        let framed = file
            .symbols()
            // COFF symbols have no size: every defined function symbol, by address.
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
            .filter(|s| data[s.address() as usize..].starts_with(&[0x55]))
            .map(|s| s.address())
            .collect::<std::collections::BTreeSet<u64>>()
            .len();
        let pdata = file
            .section_by_name(".pdata")
            .unwrap_or_else(|| panic!("{config}: no .pdata"));
        assert_eq!(
            pdata.size(),
            12 * framed as u64,
            "{config}: one RUNTIME_FUNCTION per body with a frame"
        );
        assert!(
            file.section_by_name(".xdata").is_some(),
            "{config}: no .xdata"
        );
        assert!(file.section_by_name(".eh_frame").is_none(), "{config}");
    }
}

/// The fixture for Windows ([`harness_prelude`]): `%cb` called as `windows_fastcall`, the
/// C convention there, since GCC writes no SEH unwind information for the `sysv_abi`
/// function `cb` would otherwise have to be. Written into `dir`; its path.
fn windows_fixture(dir: &Path) -> PathBuf {
    let text: String = windows_functions()
        .iter()
        .map(|func| format!("{}\n", func.display()))
        .collect();
    let path = dir.join("throw_through_windows.clif");
    std::fs::write(&path, text).unwrap();
    path
}

/// The fixture's functions, `%cb` called as `windows_fastcall` ([`windows_fixture`]).
fn windows_functions() -> Vec<Function> {
    let mut funcs = functions();
    let mut changed = 0;
    for func in &mut funcs {
        let callbacks: Vec<_> = func
            .dfg
            .ext_funcs
            .values()
            .filter(|f| f.name.display(Some(&func.params)).to_string() == "%cb")
            .map(|f| f.signature)
            .collect();
        for sig in callbacks {
            func.dfg.signatures[sig].call_conv = CallConv::WindowsFastcall;
            changed += 1;
        }
    }
    assert!(changed > 0, "no function of {FIXTURE} calls %cb");
    funcs
}

/// Windows x64 (COFF, SEH; `tests/unwind.rs`'s module docs): [`windows_fixture`] compiled
/// for `x86_64-pc-windows-gnu` with PIC and without, in every configuration, linked by
/// MinGW-w64's g++ into an executable (static: Wine has no MinGW runtime DLLs) and run
/// under Wine, whose unwinder reads `.pdata` and `.xdata` as Windows does. Each entry must
/// return what it returns unmerged, and the exception thrown for 13 must reach the
/// harness with the values it kept in callee-saved registers unchanged.
#[test]
fn cxx_exceptions_cross_windows_x64_code() {
    const CXX: &str = "x86_64-w64-mingw32-g++";
    if !mingw_and_wine(CXX, "g++-mingw-w64-x86-64") {
        return;
    }
    let dir = scratch("cxx-windows");
    let fixture = windows_fixture(&dir);
    let source = dir.join("harness.cpp");
    std::fs::write(&source, harness(true)).unwrap();
    let harness = dir.join("harness.o");
    run(Command::new(CXX)
        .args(["-O1", "-c"])
        .arg(&source)
        .arg("-o")
        .arg(&harness));
    let mut reference: Option<String> = None;
    for pic in [true, false] {
        for (i, (config, args)) in configurations().iter().enumerate() {
            let context = format!("x86_64-pc-windows-gnu, is_pic={pic}, {config}");
            let (obj, fast) = windows_objects(&dir, &fixture, i, pic, args);
            // As on Linux, the exception must cross a body behind a thunk that grew the
            // stack argument area, which Windows' thunks do by pushes (no `.pdata`).
            assert_eq!(
                stack_growth::function_grows_the_stack_area(&obj, "grow_a", true),
                args.contains(&"--merge-similar"),
                "{context}: %grow_a should be a thunk that grows the stack area exactly \
                 under merge-similar"
            );
            let exe = dir.join(format!("run{i}-{pic}.exe"));
            run(Command::new(CXX)
                .arg("-static")
                .arg(&harness)
                .arg(&obj)
                .arg(&fast)
                .arg("-o")
                .arg(&exe));
            let got = run_under_wine(&exe, &context);
            let reference = reference.get_or_insert_with(|| got.clone());
            check_output(&harness_entries(true), reference, &got, &context);
        }
    }
}

#[path = "common/wine.rs"]
mod wine;

/// `exe` run under Wine (stopped after two minutes): what it printed, its exit checked as
/// [`harness_printed`] does.
fn run_under_wine(exe: &Path, context: &str) -> String {
    let (_, out) = wine::run(exe, || {
        let mut c = Command::new("timeout");
        c.args(["-k", "10", "120", "wine"]);
        c
    })
    .unwrap_or_else(|e| panic!("{context}: wine: {e}"));
    harness_printed(out, context)
}

/// `fixture` ([`windows_fixture`]) and [`FASTCALL_FIXTURE`] compiled for
/// `x86_64-pc-windows-gnu` with `is_pic` = `pic` and the configuration `args` (the `i`-th)
/// into `dir`: the two objects.
fn windows_objects(
    dir: &Path,
    fixture: &Path,
    i: usize,
    pic: bool,
    args: &[&str],
) -> (PathBuf, PathBuf) {
    let obj = dir.join(format!("m{i}-{pic}.o"));
    let fixture = fixture.to_str().unwrap();
    clif_merge_fixture(fixture, "x86_64-pc-windows-gnu", pic, args, &[], &obj);
    let fast = dir.join(format!("f{i}-{pic}.o"));
    clif_merge_fixture(
        FASTCALL_FIXTURE,
        "x86_64-pc-windows-gnu",
        pic,
        args,
        &[],
        &fast,
    );
    (obj, fast)
}

/// The harness of [`windows_x64_unwinds_at_every_instruction`] (its comment says what it
/// checks and prints): `start_stepping` and `step_through`, called by a `main` of the test's.
const SINGLE_STEP_HARNESS: &str = "fixtures/unwind/single_step_windows.c";

/// What a `main` calling [`SINGLE_STEP_HARNESS`] declares.
const SINGLE_STEP_DECLARATIONS: &str = "#include <stdint.h>\n#include <stdio.h>\n\
    #define SYSV __attribute__((sysv_abi))\n#define MSABI __attribute__((ms_abi))\n\
    void start_stepping(void);\nvoid step_through(const char *, const void *, int);\n\
    int64_t cb(int64_t);\nMSABI int64_t cb_fastcall(int64_t);\n";

/// The entries stepped through, each with whether it is `windows_fastcall` (`MSABI`).
fn stepped_entries() -> Vec<(String, bool)> {
    let fastcall: Vec<String> = entries_of(FASTCALL_FIXTURE)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    harness_entries(true)
        .into_iter()
        .map(|(name, _)| {
            let msabi = fastcall.contains(&name);
            (name, msabi)
        })
        .collect()
}

/// A `main` that steps through every entry, each entry's address written by `entry`,
/// after `setup` (statements).
fn single_step_main(
    entries: &[(String, bool)],
    setup: &str,
    entry: impl Fn(&str) -> String,
) -> String {
    let mut s = format!("int main(void) {{\n{setup}  start_stepping();\n");
    for (name, msabi) in entries {
        s += &format!(
            "  step_through(\"{name}\", (const void *){}, {});\n",
            entry(name),
            u8::from(*msabi)
        );
    }
    s + "  return 0;\n}\n"
}

/// [`SINGLE_STEP_HARNESS`] compiled into `dir`.
fn single_step_harness(dir: &Path) -> PathBuf {
    let object = dir.join("single_step.o");
    run(Command::new("x86_64-w64-mingw32-gcc")
        .args(["-O1", "-Wall", "-Werror", "-c"])
        .arg(root().join(SINGLE_STEP_HARNESS))
        .arg("-o")
        .arg(&object));
    object
}

/// `main` (C source) compiled and linked with the harness and `objects` into `exe`, run
/// under Wine: what it printed.
fn run_single_step(
    main: &str,
    harness: &Path,
    objects: &[&Path],
    exe: &Path,
    context: &str,
) -> String {
    let source = exe.with_extension("c");
    std::fs::write(&source, main).unwrap();
    run(Command::new("x86_64-w64-mingw32-gcc")
        .args(["-O1", "-static"])
        .arg(&source)
        .arg(harness)
        .args(objects)
        .arg("-o")
        .arg(exe));
    run_under_wine(exe, context)
}

/// One line a single-step harness prints, `NAME(1) = VALUE: ` and its counts (and the
/// addresses where unwinding went wrong) as words.
struct StepLine<'l> {
    name: &'l str,
    value: &'l str,
    words: Vec<&'l str>,
}

impl<'l> StepLine<'l> {
    fn of(line: &'l str, context: &str) -> Self {
        let bad = || -> ! { panic!("{context}: unexpected line from the harness: {line}") };
        let (name, rest) = line.split_once("(1) = ").unwrap_or_else(|| bad());
        let (value, rest) = rest.split_once(": ").unwrap_or_else(|| bad());
        StepLine {
            name,
            value,
            words: rest.split_whitespace().collect(),
        }
    }

    /// The count at word `i` of `line`.
    fn number(words: &[&str], i: usize, line: &str, context: &str) -> u64 {
        words
            .get(i)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{context}: unexpected line from the harness: {line}"))
    }
}

/// Check what [`SINGLE_STEP_HARNESS`] printed: every entry stepped through, every step
/// unwound, none stopped in an epilogue Windows does not recognize, some at the `lea` of
/// a rewritten epilogue, `%call_grow_*` through a thunk's pushes exactly when `grown`.
/// Each entry's value, by name.
fn check_stepped(
    printed: &str,
    grown: bool,
    exe: &Path,
    context: &str,
) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    let mut lea_steps = 0;
    for line in printed.lines() {
        // S steps, P pushes, E in epilogue windows, L at lea epilogues, W wrong [rip...]
        let StepLine { name, value, words } = StepLine::of(line, context);
        let number = |i| StepLine::number(&words, i, line, context);
        let (steps, pushes, windows, leas, wrong) =
            (number(0), number(2), number(4), number(8), number(12));
        assert!(
            steps > 0,
            "{context}: {name} was not stepped through:\n{printed}"
        );
        assert_eq!(
            wrong,
            0,
            "{context}: stopped at {}, the unwinder did not find {name}'s caller with its \
             stack pointer and callee-saved registers (disassemble {}):\n{printed}",
            words.get(14..).map(|w| w.join(" ")).unwrap_or_default(),
            exe.display()
        );
        // Cranelift's `add rsp, N; mov rsp, rbp`, which Windows does not take for an
        // epilogue: stopped at the `mov`, the registers saved in the frame were read from
        // below the stack pointer. Each is rewritten into a `nop` and a `lea`.
        assert_eq!(
            windows,
            0,
            "{context}: {name} stopped {windows} times at a `mov rsp, rbp` after `add rsp, N` \
             where the unwinder did not find its caller: an epilogue left as Cranelift wrote \
             it (disassemble {}):\n{printed}",
            exe.display()
        );
        lea_steps += leas;
        assert_eq!(
            pushes > 0,
            grown && name.starts_with("call_grow_"),
            "{context}: {name} should step through a thunk growing its stack area by pushes \
             exactly under merge-similar:\n{printed}"
        );
        values.insert(name.to_string(), value.to_string());
    }
    let names: std::collections::BTreeSet<String> = stepped_entries()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert!(
        values.keys().eq(names.iter()),
        "{context}: the harness did not step through every entry:\n{printed}"
    );
    // The fixtures' functions with stack frames return through rewritten epilogues.
    assert!(
        lea_steps > 0,
        "{context}: no step stopped at a rewritten epilogue's `lea rsp, [rbp+0]`:\n{printed}"
    );
    values
}

/// Asynchronous unwinding on Windows x64 (`fixtures/unwind/single_step_windows.c`): a
/// profiler's sampler or a debugger stops a thread at any instruction, not only at calls,
/// and Windows' unwinder must find the callers from there. [`windows_fixture`] and
/// [`FASTCALL_FIXTURE`] compiled for `x86_64-pc-windows-gnu` with PIC and without, in every
/// configuration, linked with a harness that calls each entry with the trap flag set and,
/// at every instruction the call runs (the entry, the functions and thunks it reaches,
/// the callback), unwinds with `RtlLookupFunctionEntry` and `RtlVirtualUnwind` to the
/// harness's call site, under Wine. Every step must get there with the stack pointer and
/// the callee-saved registers of the entry's convention the call left, through one frame
/// per call followed with the stack pointer of that call (but above a leaf, which Windows
/// unwinds by the word on top of the stack whatever the leaf did), Cranelift's
/// epilogues included: its `add rsp, N` then `mov rsp, rbp` is no epilogue Windows
/// recognizes (stopped at the `mov`, the registers saved in the frame lie below the stack
/// pointer, where the exception's dispatch writes), so clif-merge writes a `nop` and
/// `lea rsp, [rbp+0]` instead, and steps stop at that `lea` too. Under merge-similar,
/// `%call_grow_*` must
/// step through the pushes of a thunk that grows its stack area: the return address on
/// top at every one of them is what lets this thunk have no `.pdata`. (Writing that
/// thunk as on Linux, `sub rsp` and the return address copied down, fails here at the two
/// instructions before the copy.) Then the same for the functions defined in a `JITModule`
/// through the plugin in every mode, loaded as an image under Wine with the function table
/// `Merged::jit_function_table` gives registered by `RtlAddFunctionTable`.
#[test]
fn windows_x64_unwinds_at_every_instruction() {
    const CC: &str = "x86_64-w64-mingw32-gcc";
    if !mingw_and_wine(CC, "gcc-mingw-w64-x86-64") {
        return;
    }
    let dir = scratch("single-step-windows");
    let harness = single_step_harness(&dir);
    let fixture = windows_fixture(&dir);
    let mut main = String::from(SINGLE_STEP_DECLARATIONS);
    for (name, msabi) in stepped_entries() {
        let abi = if msabi { "MSABI" } else { "SYSV" };
        main += &format!("extern {abi} int64_t {name}(int64_t);\n");
    }
    main += &single_step_main(&stepped_entries(), "", |name| name.to_string());
    let mut reference: Option<BTreeMap<String, String>> = None;
    for pic in [true, false] {
        for (i, (config, args)) in configurations().iter().enumerate() {
            let context = format!("x86_64-pc-windows-gnu, is_pic={pic}, {config}");
            let (obj, fast) = windows_objects(&dir, &fixture, i, pic, args);
            let exe = dir.join(format!("step{i}-{pic}.exe"));
            let printed = run_single_step(&main, &harness, &[&obj, &fast], &exe, &context);
            let grown = args.contains(&"--merge-similar");
            let values = check_stepped(&printed, grown, &exe, &context);
            let reference = reference.get_or_insert_with(|| values.clone());
            assert_eq!(
                reference, &values,
                "{context}: stepped entries returned other values than unmerged"
            );
        }
    }
    // The same functions defined in a `JITModule` through the plugin, their unwind
    // information the function table `Merged::jit_function_table` gives, registered with
    // `RtlAddFunctionTable` (the image's fixed addresses are this process's: x86_64 only).
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping the JIT: needs an x86_64 host");
        return;
    }
    let reference = reference.expect("the objects ran");
    for (mode, similar, clif_thunks) in jit_configurations() {
        let name = format!("{mode:?}-{similar}-{clif_thunks}");
        let context = format!("x86_64-pc-windows-gnu JIT, {name}");
        let jit_dir = dir.join(format!("jit-{name}"));
        std::fs::create_dir_all(&jit_dir).unwrap();
        let image = windows_jit_image(&jit_dir, mode, similar, clif_thunks, &context);
        let main = format!(
            "{SINGLE_STEP_DECLARATIONS}{}{}",
            image.loader(true),
            single_step_main(&stepped_entries(), "  load_image();\n", |entry| {
                format!("0x{:x}ull", image.addresses[entry])
            })
        );
        let exe = jit_dir.join("step.exe");
        let printed = run_single_step(&main, &harness, &[], &exe, &context);
        let values = check_stepped(&printed, similar, &exe, &context);
        assert_eq!(
            reference, values,
            "{context}: stepped entries returned other values than unmerged objects"
        );
    }
}

/// The fixture of [`windows_x64_unwinds_through_tail_calls_at_every_instruction`].
const TAIL_CALLS_FIXTURE: &str = "fixtures/unwind/tail_calls.clif";

/// Windows' unwinder at Cranelift's tail calls (`fixtures/unwind/tail_calls.clif`, whose
/// comment says which kinds): the fixture compiled for `x86_64-pc-windows-gnu` (frame
/// pointers kept, which Cranelift's tail calls need) with PIC and without, in every
/// configuration, and defined through the plugin in a JIT image in every mode; each entry
/// stepped through under Wine as in [`windows_x64_unwinds_at_every_instruction`]. A tail
/// call leaves through `pop rbp` and a jump that no unwinder takes for an epilogue's end,
/// so only `RUNTIME_FUNCTION`s of their own make the steps there unwind
/// ([`clif_merge::emit::unwind::windows_x64`]). Every step must reach the harness's call
/// site, every object must give each tail call's `pop rbp` a range of one byte, and every
/// entry must return what it returns unmerged.
#[test]
fn windows_x64_unwinds_through_tail_calls_at_every_instruction() {
    const CC: &str = "x86_64-w64-mingw32-gcc";
    if !mingw_and_wine(CC, "gcc-mingw-w64-x86-64") {
        return;
    }
    let dir = scratch("single-step-tail-calls");
    let harness = single_step_harness(&dir);
    let entries = entries_of(TAIL_CALLS_FIXTURE);
    let frame_pointers = ["--set", "preserve_frame_pointers=true"];
    let mut main = String::from(SINGLE_STEP_DECLARATIONS);
    for (name, _) in &entries {
        main += &format!("extern SYSV int64_t {name}(int64_t);\n");
    }
    main += &single_step_main(&entries, "", |name| name.to_string());
    let mut reference: Option<BTreeMap<String, String>> = None;
    for pic in [true, false] {
        for (i, (config, args)) in configurations().iter().enumerate() {
            let context = format!("x86_64-pc-windows-gnu, is_pic={pic}, {config}");
            let obj = dir.join(format!("t{i}-{pic}.o"));
            let triple = "x86_64-pc-windows-gnu";
            clif_merge_fixture(TAIL_CALLS_FIXTURE, triple, pic, args, &frame_pointers, &obj);
            let pops = one_byte_ranges_at_pop_rbp(&obj, &context);
            assert!(
                pops >= 4,
                "{context}: {pops} tail calls' `pop rbp` with a RUNTIME_FUNCTION of their own"
            );
            let exe = dir.join(format!("tail{i}-{pic}.exe"));
            let printed = run_single_step(&main, &harness, &[&obj], &exe, &context);
            let values = tail_call_steps(&printed, &entries, &exe, &context);
            let reference = reference.get_or_insert_with(|| values.clone());
            assert_eq!(
                reference, &values,
                "{context}: stepped entries returned other values than unmerged"
            );
        }
    }
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping the JIT: needs an x86_64 host");
        return;
    }
    let reference = reference.expect("the objects ran");
    let text = std::fs::read_to_string(root().join(TAIL_CALLS_FIXTURE)).unwrap();
    for plugin in jit_configurations() {
        let (mode, similar, clif_thunks) = plugin;
        let name = format!("{mode:?}-{similar}-{clif_thunks}");
        let context = format!("x86_64-pc-windows-gnu JIT, {name}");
        let jit_dir = dir.join(format!("jit-{name}"));
        std::fs::create_dir_all(&jit_dir).unwrap();
        let funcs = cranelift_reader::parse_functions(&text).unwrap();
        let settings = [("preserve_frame_pointers", "true")];
        let image = windows_jit_image_of(&jit_dir, funcs, &settings, &entries, plugin, &context);
        let main = format!(
            "{SINGLE_STEP_DECLARATIONS}{}{}",
            image.loader(true),
            single_step_main(&entries, "  load_image();\n", |entry| {
                format!("0x{:x}ull", image.addresses[entry])
            })
        );
        let exe = jit_dir.join("step.exe");
        let printed = run_single_step(&main, &harness, &[], &exe, &context);
        let values = tail_call_steps(&printed, &entries, &exe, &context);
        assert_eq!(
            reference, values,
            "{context}: stepped entries returned other values than unmerged objects"
        );
    }
}

/// How many `RUNTIME_FUNCTION`s of the Windows x64 object `obj` cover one byte, a
/// `pop rbp` (0x5d) in `.text`: a tail call's (the entries' begin and end are `.text`
/// offsets, the addends of relocations against its section symbol).
fn one_byte_ranges_at_pop_rbp(obj: &Path, context: &str) -> usize {
    let bytes = std::fs::read(obj).unwrap();
    let file = cranelift_object::object::File::parse(&*bytes).unwrap();
    let text = file.section_by_name(".text").unwrap().data().unwrap();
    let pdata = file
        .section_by_name(".pdata")
        .unwrap_or_else(|| panic!("{context}: no .pdata"));
    let data = pdata.data().unwrap();
    let word = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    let mut pops = 0;
    for entry in data.chunks(12).enumerate().map(|(i, _)| 12 * i) {
        let (begin, end) = (word(entry), word(entry + 4));
        assert!(begin < end, "{context}: .pdata entry {begin:#x}..{end:#x}");
        if end - begin == 1 {
            assert_eq!(
                text[begin], 0x5d,
                "{context}: a one-byte range at {begin:#x}, not a `pop rbp`"
            );
            pops += 1;
        }
    }
    pops
}

/// Check what the single-step harness printed for `entries` (each stepped through, no step
/// that did not unwind, no epilogue left as Cranelift wrote it): each entry's value.
fn tail_call_steps(
    printed: &str,
    entries: &[(String, bool)],
    exe: &Path,
    context: &str,
) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for line in printed.lines() {
        // S steps, P pushes, E in epilogue windows, L at lea epilogues, W wrong [rip...]
        let StepLine { name, value, words } = StepLine::of(line, context);
        let number = |i| StepLine::number(&words, i, line, context);
        let (steps, windows, wrong) = (number(0), number(4), number(12));
        assert!(
            steps > 0 && windows == 0 && wrong == 0,
            "{context}: {name}: {steps} steps, {windows} in epilogue windows, {wrong} where \
             the unwinder did not find its caller, at {} (disassemble {}):\n{printed}",
            words.get(14..).map(|w| w.join(" ")).unwrap_or_default(),
            exe.display()
        );
        values.insert(name.to_string(), value.to_string());
    }
    let names: std::collections::BTreeSet<&String> = entries.iter().map(|(n, _)| n).collect();
    assert!(
        values.keys().eq(names),
        "{context}: the harness did not step through every entry:\n{printed}"
    );
    values
}

/// The harness of [`linux_x86_64_unwinds_at_every_instruction`].
const SINGLE_STEP_LINUX: &str = "fixtures/unwind/single_step_linux.c";

/// Asynchronous unwinding on Linux x86_64 (`fixtures/unwind/single_step_linux.c`), as
/// [`windows_x64_unwinds_at_every_instruction`] on Windows: the fixture and
/// [`FASTCALL_FIXTURE`] compiled for `x86_64-unknown-linux-gnu` with PIC and without, in
/// every configuration, linked with a harness that calls each entry with the trap flag set
/// and, at every instruction the call runs, unwinds with libgcc's `_Unwind_Backtrace` from
/// its SIGTRAP handler, which reads `.eh_frame` only (a sampler's unwinder does the same;
/// gdb would not do: its own epilogue analysis hides a wrong rule at a `ret`). Every step
/// must reach the harness's call site with the stack pointer and callee-saved registers the
/// call left, through one frame per call followed, each with the CFA its callee was entered
/// with (so that an unwind reading a stale copy of a return address, which a frame that
/// grew its stack argument area leaves behind, does not pass), Cranelift's epilogues
/// included: its CFI says the CFA is `rbp + 16` up to the
/// function's end, which after `pop rbp` is the caller's `rbp`, so clif-merge's FDEs add
/// the rules of each epilogue ([`clif_merge::emit::epilogues`]). Then the same for both
/// fixtures' functions defined in a `JITModule` through the plugin in every mode, loaded
/// as an image with the frames `Merged::jit_eh_frame` gives registered with libgcc.
#[test]
fn linux_x86_64_unwinds_at_every_instruction() {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) || !have("cc") {
        eprintln!("skipping: needs an x86_64 Linux host and cc");
        return;
    }
    let dir = scratch("single-step-linux");
    let harness = dir.join("single_step.o");
    run(Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-c"])
        .arg(root().join(SINGLE_STEP_LINUX))
        .arg("-o")
        .arg(&harness));
    let mut main = String::from(SINGLE_STEP_DECLARATIONS);
    for (name, msabi) in stepped_entries() {
        let abi = if msabi { "MSABI" } else { "SYSV" };
        main += &format!("extern {abi} int64_t {name}(int64_t);\n");
    }
    main += &single_step_main(&stepped_entries(), "", |name| name.to_string());
    let source = dir.join("main.c");
    std::fs::write(&source, &main).unwrap();
    let triple = "x86_64-unknown-linux-gnu";
    let mut reference: Option<BTreeMap<String, String>> = None;
    for pic in [true, false] {
        for (i, (config, args)) in configurations().iter().enumerate() {
            let context = format!("{triple}, is_pic={pic}, {config}");
            let obj = dir.join(format!("m{i}-{pic}.o"));
            clif_merge_fixture(FIXTURE, triple, pic, args, &[], &obj);
            let fast = dir.join(format!("f{i}-{pic}.o"));
            clif_merge_fixture(FASTCALL_FIXTURE, triple, pic, args, &[], &fast);
            let exe = dir.join(format!("step{i}-{pic}"));
            let values = run_single_step_linux(&source, &harness, &[&obj, &fast], &exe, &context);
            let reference = reference.get_or_insert_with(|| values.clone());
            assert_eq!(
                reference, &values,
                "{context}: stepped entries returned other values than unmerged"
            );
        }
    }
    // The same functions defined in a `JITModule` through the plugin, loaded as an image
    // with the frames `Merged::jit_eh_frame` gives registered with libgcc.
    let reference = reference.expect("the objects ran");
    for (mode, similar, clif_thunks) in jit_configurations() {
        let name = format!("{mode:?}-{similar}-{clif_thunks}");
        let context = format!("{triple} JIT, {name}");
        let jit_dir = dir.join(format!("jit-{name}"));
        let image = LinuxJitImage::x86_64(&jit_dir, mode, similar, clif_thunks);
        let main = format!(
            "{SINGLE_STEP_DECLARATIONS}void skip_unwinding(const void *, const void *);\n{}{}",
            image.loader(),
            single_step_main(
                &stepped_entries(),
                &format!(
                    "  load_image();\n  \
                     skip_unwinding((void *)0x{:x}ull, (void *)0x{:x}ull);\n",
                    image.base,
                    image.code().0
                ),
                |entry| format!("0x{:x}ull", image.addresses[entry])
            )
        );
        let source = jit_dir.join("main.c");
        std::fs::write(&source, &main).unwrap();
        let values = run_single_step_linux(&source, &harness, &[], &jit_dir.join("step"), &context);
        assert_eq!(
            reference, values,
            "{context}: stepped entries returned other values than unmerged objects"
        );
    }
}

/// `source` (a `main` for [`SINGLE_STEP_LINUX`]) linked with the `harness` and `objects`
/// into `exe` and run: every entry stepped through, every step unwound. Each entry's
/// value, by name.
fn run_single_step_linux(
    source: &Path,
    harness: &Path,
    objects: &[&Path],
    exe: &Path,
    context: &str,
) -> BTreeMap<String, String> {
    run(Command::new("cc")
        .args(["-O1", "-no-pie", "-static"])
        .arg(source)
        .arg(harness)
        .args(objects)
        .arg("-o")
        .arg(exe));
    let printed = run(&mut Command::new(exe));
    linux_steps(&printed, true, stepped_entries().len(), "", exe, context)
}

/// Check what a Linux single-step or breakpoint harness printed: a line per entry,
/// `NAME(1) = VALUE: S steps, W wrong [PLACE...]`, `entries` of them, each entry stepped
/// through exactly when `stepped`, and no step that did not unwind (`places` says, in the
/// message, what the places printed for those are). Each entry's value, by name.
fn linux_steps(
    printed: &str,
    stepped: bool,
    entries: usize,
    places: &str,
    exe: &Path,
    context: &str,
) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for line in printed.lines() {
        let StepLine { name, value, words } = StepLine::of(line, context);
        let number = |i| StepLine::number(&words, i, line, context);
        let (steps, wrong) = (number(0), number(2));
        assert_eq!(
            steps > 0,
            stepped,
            "{context}: {name} was {}stepped through:\n{printed}",
            if stepped { "not " } else { "" }
        );
        assert_eq!(
            wrong,
            0,
            "{context}: stopped at {}{places}, libgcc's unwinder did not find {name}'s \
             caller with its stack pointer and callee-saved registers (disassemble {}):\n\
             {printed}",
            words.get(4..).map(|w| w.join(" ")).unwrap_or_default(),
            exe.display()
        );
        values.insert(name.to_string(), value.to_string());
    }
    assert_eq!(
        values.len(),
        entries,
        "{context}: the harness did not run every entry:\n{printed}"
    );
    values
}

/// The harness of [`linux_aarch64_unwinds_at_every_instruction`].
const BREAKPOINTS_AARCH64: &str = "fixtures/unwind/breakpoints_aarch64.c";

/// What a `main` calling [`BREAKPOINTS_AARCH64`] declares.
const BREAKPOINTS_DECLARATIONS: &str = "#include <stdint.h>\n#include <stdio.h>\n\
    void start_stepping(int, char **, void *, void *);\n\
    void step_through(const char *, const void *);\nint64_t cb(int64_t);\n";

/// A `main` for [`BREAKPOINTS_AARCH64`] that runs `setup` (statements), then steps through
/// every entry of the fixture, the code under test lying from `code` to `code_end` (C
/// expressions), each entry's address written by `entry`.
fn breakpoints_main(
    setup: &str,
    code: &str,
    code_end: &str,
    entry: impl Fn(&str) -> String,
) -> String {
    let mut s = format!(
        "int main(int argc, char **argv) {{\n{setup}  start_stepping(argc, argv, (void *)({code}), (void *)({code_end}));\n"
    );
    for (name, _) in entries() {
        s += &format!(
            "  step_through(\"{name}\", (const void *){});\n",
            entry(&name)
        );
    }
    s + "  return 0;\n}\n"
}

/// Run `exe`, linked with [`BREAKPOINTS_AARCH64`], under qemu: first with
/// `-d in_asm`, whose log names every instruction run, then with the offsets
/// of those in the code under test (the range the harness handed the stepper, which writes
/// it in the first run) as the instructions to stop at. Every entry must be stepped
/// through and unwind at every step, and return what it returned without breakpoints.
/// Each entry's value, by name.
fn breakpoints_run(exe: &Path, context: &str) -> BTreeMap<String, String> {
    let qemu = || {
        let mut cmd = Command::new("qemu-aarch64");
        cmd.args(["-L", "/usr/aarch64-linux-gnu"]);
        cmd
    };
    let traced = run(breakpoint_stops::first_run(&mut qemu(), exe));
    let stops =
        breakpoint_stops::stops_from_first_run(exe).unwrap_or_else(|e| panic!("{context}: {e}"));
    let printed = run(qemu().arg(exe).arg(&stops));
    let values = |printed: &str, stepped: bool| {
        let places = " (offsets into the code under test)";
        linux_steps(printed, stepped, entries().len(), places, exe, context)
    };
    let stepped = values(&printed, true);
    assert_eq!(
        values(&traced, false),
        stepped,
        "{context}: entries returned other values with breakpoints"
    );
    stepped
}

/// Asynchronous unwinding on Linux aarch64 (`fixtures/unwind/breakpoints_aarch64.c`), as
/// [`linux_x86_64_unwinds_at_every_instruction`] on x86_64, under qemu-user, which has no
/// single-step: the fixture compiled for `aarch64-unknown-linux-gnu` with PIC and without,
/// in every configuration (pointer authentication with the A key and with the B key
/// included), linked with a harness that writes a breakpoint over every instruction the
/// entries run (qemu's log of a first run names them), writes each again at the next stop
/// (so it stops at every instruction each time it runs, and follows the calls and
/// returns) and, stopped at each, unwinds with libgcc's `_Unwind_Backtrace` from its
/// SIGTRAP handler. Every stop must reach the harness's call site with the stack pointer
/// and callee-saved registers the call left, through one frame per call made and not
/// returned from, each callee's CFA the stack pointer it was entered with (with the
/// epilogue rules dropped, a stop in `%equal_b`'s epilogue,
/// called from `%call_equal_b`, unwound past `%call_equal_b`'s frame and arrived right
/// before the stepper followed calls), Cranelift's epilogues included: its CFI keeps CFA = `x29 + 16` and every saved
/// register in its slot up to the function's end, and says the return address is signed
/// after `autiasp`, so clif-merge's FDEs add the rules of each epilogue
/// ([`clif_merge::emit::epilogues`]). Then the same for the functions defined in a
/// `JITModule` through the plugin in every mode, loaded as an image with the frames
/// `Merged::jit_eh_frame` gives registered. Needs `aarch64-linux-gnu-gcc` and
/// `qemu-aarch64`.
#[test]
fn linux_aarch64_unwinds_at_every_instruction() {
    const CC: &str = "aarch64-linux-gnu-gcc";
    if !have(CC) || !have("qemu-aarch64") {
        eprintln!(
            "skipping: needs {CC} and qemu-aarch64 (Debian: gcc-aarch64-linux-gnu, qemu-user)"
        );
        return;
    }
    let dir = scratch("breakpoints-aarch64");
    let harness = dir.join("breakpoints.o");
    run(Command::new(CC)
        .args(["-O1", "-Wall", "-Werror", "-c"])
        .arg(root().join(BREAKPOINTS_AARCH64))
        .arg("-o")
        .arg(&harness));
    let mut main = String::from(BREAKPOINTS_DECLARATIONS);
    main += "extern uint32_t __start_merged_text[], __stop_merged_text[];\n";
    for (name, _) in entries() {
        main += &format!("extern int64_t {name}(int64_t);\n");
    }
    main += &breakpoints_main("", "__start_merged_text", "__stop_merged_text", |name| {
        name.to_string()
    });
    let source = dir.join("main.c");
    std::fs::write(&source, &main).unwrap();
    let triple = "aarch64-unknown-linux-gnu";
    let mut reference: Option<BTreeMap<String, String>> = None;
    for pic in [true, false] {
        for (i, (config, args)) in configurations_for(triple).iter().enumerate() {
            let context = format!("{triple}, is_pic={pic}, {config}");
            let obj = dir.join(format!("m{i}-{pic}.o"));
            clif_merge_fixture(FIXTURE, triple, pic, args, &[], &obj);
            // The code under test in a section of its own, whose bounds the linker names.
            let renamed = dir.join(format!("r{i}-{pic}.o"));
            run(Command::new("aarch64-linux-gnu-objcopy")
                .args(breakpoint_stops::rename_code_sections(&obj).unwrap())
                .arg(&obj)
                .arg(&renamed));
            let exe = dir.join(format!("step{i}-{pic}"));
            run(Command::new(CC)
                .args(["-O1", "-no-pie", "-static"])
                .arg(breakpoint_stops::code_on_pages_of_its_own(&dir).unwrap())
                .arg(&source)
                .arg(&harness)
                .arg(&renamed)
                .arg("-o")
                .arg(&exe));
            let values = breakpoints_run(&exe, &context);
            let reference = reference.get_or_insert_with(|| values.clone());
            assert_eq!(
                reference, &values,
                "{context}: stepped entries returned other values than unmerged"
            );
        }
    }
    // The same functions defined in a `JITModule` through the plugin, their frames the
    // `.eh_frame` `Merged::jit_eh_frame` gives (the image's fixed addresses are this
    // process's: x86_64 only).
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping the JIT: needs an x86_64 host");
        return;
    }
    let reference = reference.expect("the objects ran");
    let mut jit = jit_configurations()
        .into_iter()
        .map(|(mode, similar, clif_thunks)| (mode, similar, clif_thunks, &[][..]))
        .collect::<Vec<_>>();
    for (_, settings) in POINTER_AUTHENTICATION {
        jit.push((MergeMode::Trampolines, true, false, settings));
    }
    for (mode, similar, clif_thunks, settings) in jit {
        let name = format!("{mode:?}-{similar}-{clif_thunks}-{}", settings.len());
        let context = format!("aarch64 JIT, {name}, {settings:?}");
        let jit_dir = dir.join(format!("jit-{name}"));
        let image =
            LinuxJitImage::aarch64(&jit_dir, mode, similar, clif_thunks, settings, &context);
        let main = format!(
            "{BREAKPOINTS_DECLARATIONS}{}{}",
            image.loader(),
            breakpoints_main(
                "  load_image();\n",
                &format!("0x{:x}ull", image.code().0),
                &format!("0x{:x}ull", image.code().0 + image.code().1),
                |entry| format!("0x{:x}ull", image.addresses[entry])
            )
        );
        let source = jit_dir.join("main.c");
        std::fs::write(&source, &main).unwrap();
        let exe = jit_dir.join("step");
        run(Command::new(CC)
            .args(["-O1", "-no-pie", "-static"])
            .arg(&source)
            .arg(&harness)
            .arg("-o")
            .arg(&exe));
        // The code under test is what the image holds after its page of import stubs (the
        // loader's stand-ins for a linker's, which have no FDE): `image.code()`, handed to
        // the stepper above.
        let values = breakpoints_run(&exe, &context);
        assert_eq!(
            reference, values,
            "{context}: stepped entries returned other values than unmerged objects"
        );
    }
}

// ---- JIT ----

/// The payload of the callback's panic.
#[derive(Debug, PartialEq)]
struct Thrown(i64);

extern "C-unwind" fn cb(x: i64) -> i64 {
    if x == THROWS {
        std::panic::panic_any(Thrown(x));
    }
    x * 2 + 1
}

/// Call the entry at `code` with `x`; `Err` with the payload when it panicked.
fn call(code: *const u8, narrow: bool, x: i64) -> Result<i64, Box<dyn std::any::Any + Send>> {
    std::panic::catch_unwind(|| {
        if narrow {
            // SAFETY: the fixture's `(i32 sext) -> i64 system_v` entries.
            let f =
                unsafe { std::mem::transmute::<*const u8, extern "C-unwind" fn(i32) -> i64>(code) };
            f(x as i32)
        } else {
            // SAFETY: the fixture's `(i64) -> i64 system_v` entries.
            let f =
                unsafe { std::mem::transmute::<*const u8, extern "C-unwind" fn(i64) -> i64>(code) };
            f(x)
        }
    })
}

/// Call every entry at `address_of(name)`; what each returned for [`RETURNS`], after
/// checking that the panic for [`THROWS`] reached `catch_unwind` here.
fn results(context: &str, address_of: impl Fn(&str) -> *const u8) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (name, narrow) in entries() {
        let code = address_of(&name);
        let value = call(code, narrow, RETURNS)
            .unwrap_or_else(|_| panic!("{context}: {name}({RETURNS}) panicked"));
        let payload =
            call(code, narrow, THROWS).expect_err(&format!("{context}: {name}({THROWS}) returned"));
        assert_eq!(
            payload.downcast_ref::<Thrown>(),
            Some(&Thrown(THROWS)),
            "{context}: {name}: another panic"
        );
        out.insert(name, value);
    }
    out
}

fn modes() -> [MergeMode; 3] {
    [
        MergeMode::Disabled,
        MergeMode::Trampolines,
        MergeMode::Aliases,
    ]
}

/// The JIT configurations run: every mode, with and without merge-similar, with
/// single-jump and CLIF thunks; `disabled` once, since it merges nothing (merge-similar
/// does nothing then, and there is no thunk to write).
fn jit_configurations() -> Vec<(MergeMode, bool, bool)> {
    let mut all = vec![(MergeMode::Disabled, false, false)];
    for mode in [MergeMode::Trampolines, MergeMode::Aliases] {
        for similar in [false, true] {
            for clif_thunks in [false, true] {
                all.push((mode, similar, clif_thunks));
            }
        }
    }
    all
}

/// Through the plugin: the fixture's functions declared in a `JITModule` and defined by a
/// `FunctionMerger`; with `clif_thunks`, thunks are compiled CLIF with a frame (a call and
/// a return) instead of a single jump.
fn plugin_results(mode: MergeMode, similar: bool, clif_thunks: bool) -> BTreeMap<String, i64> {
    let context = format!("plugin {mode:?}, merge-similar {similar}, CLIF thunks {clif_thunks}");
    let mut builder = JITBuilder::new(default_libcall_names()).unwrap();
    builder.symbol("cb", cb as *const u8);
    let mut module = JITModule::new(builder);
    let (merged, ids) = define_with_plugin(&mut module, functions(), mode, similar, clif_thunks);
    module.finalize_definitions().unwrap();
    let frames = merged.register_jit_frames(&module).unwrap();
    assert!(
        frames.registrations() > 0,
        "{context}: no frames registered"
    );
    let got = results(&context, |name| module.get_finalized_function(ids[name]));
    drop(frames);
    // SAFETY: no pointer into the module is used after this.
    unsafe { module.free_memory() };
    got
}

/// `funcs` declared in `module` (the functions they call but do not define, such as `cb`,
/// imported) and defined there by a `FunctionMerger` in `mode`: what the merger did, and
/// the id of each name.
fn define_with_plugin(
    module: &mut JITModule,
    funcs: Vec<Function>,
    mode: MergeMode,
    similar: bool,
    clif_thunks: bool,
) -> (Merged, BTreeMap<String, FuncId>) {
    let (merged, ids) = try_define_with_plugin(module, funcs, mode, similar, clif_thunks);
    (merged.unwrap(), ids)
}

/// [`define_with_plugin`], with the merger's error if it fails.
fn try_define_with_plugin(
    module: &mut JITModule,
    funcs: Vec<Function>,
    mode: MergeMode,
    similar: bool,
    clif_thunks: bool,
) -> (
    Result<Merged, clif_merge::plugin::PluginError>,
    BTreeMap<String, FuncId>,
) {
    let (merger, ids) = plugin_merger(module, funcs, mode, similar, clif_thunks);
    (merger.define_in_jit(module), ids)
}

/// `funcs` declared in `module` (exported; the functions they call but do not define
/// imported) and added to a `FunctionMerger` in `mode` for it, ready to define them: the
/// merger, and the id of each name.
fn plugin_merger<M: Module>(
    module: &mut M,
    funcs: Vec<Function>,
    mode: MergeMode,
    similar: bool,
    clif_thunks: bool,
) -> (FunctionMerger, BTreeMap<String, FuncId>) {
    let mut ids: BTreeMap<String, FuncId> = BTreeMap::new();
    for f in &funcs {
        let name = f.name.to_string().trim_start_matches('%').to_string();
        let id = module
            .declare_function(&name, Linkage::Export, &f.signature)
            .unwrap();
        ids.insert(name, id);
    }
    let options = MergeOptions {
        mode,
        ..MergeOptions::default()
    };
    let mut merger = FunctionMerger::new(module.isa(), options)
        .unwrap()
        .with_emit_options(EmitOptions {
            clif_thunks,
            ..EmitOptions::default()
        });
    if similar {
        merger = merger.with_merge_similar(SimilarOptions::default());
    }
    for mut func in funcs {
        let name = func.name.to_string().trim_start_matches('%').to_string();
        func.name = UserFuncName::user(0, ids[&name].as_u32());
        let refs: Vec<_> = func.dfg.ext_funcs.keys().collect();
        for r in refs {
            if let ExternalName::TestCase(t) = &func.dfg.ext_funcs[r].name {
                let callee = t.to_string().trim_start_matches('%').to_string();
                let id = match ids.get(&callee) {
                    Some(&id) => id,
                    None => {
                        let sig = func.dfg.signatures[func.dfg.ext_funcs[r].signature].clone();
                        let id = module
                            .declare_function(&callee, Linkage::Import, &sig)
                            .unwrap();
                        ids.insert(callee, id);
                        id
                    }
                };
                let user = func
                    .params
                    .ensure_user_func_name(UserExternalName::new(0, id.as_u32()));
                func.dfg.ext_funcs[r].name = ExternalName::User(user);
            }
        }
        merger.add(ids[&name], func).unwrap();
    }
    (merger, ids)
}

/// Through `emit_jit`.
fn emit_jit_results(mode: MergeMode) -> BTreeMap<String, i64> {
    let mut module = MergeModule::new();
    for f in functions() {
        module.add(f, MergeLinkage::Export, false).unwrap();
    }
    let options = MergeOptions {
        mode,
        ..MergeOptions::default()
    };
    let plan = clif_merge::merge(&module, &TargetInfo::host(), &options);
    let jit = emit_jit(
        &module,
        &plan,
        &options,
        &EmitOptions::default(),
        [("cb".to_string(), cb as *const u8)],
    )
    .unwrap();
    assert!(jit.frames().registrations() > 0);
    results(&format!("emit_jit {mode:?}"), |name| {
        jit.pointer(&FuncName::parse(&format!("%{name}")).unwrap())
            .unwrap()
    })
}

const CHILD: &str = "CLIF_MERGE_UNWIND_JIT_CHILD";

/// The body of `panic_crosses_jit_frames`, run in a child process (it does nothing unless
/// the parent asked for it).
#[test]
fn jit_panic_child_process() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // The callback's panics are expected: no message for them.
    std::panic::set_hook(Box::new(|info| {
        if info.payload().downcast_ref::<Thrown>().is_none() {
            eprintln!("{info}");
        }
    }));
    let reference = plugin_results(MergeMode::Disabled, false, false);
    // The first configuration, `disabled`, is the reference itself.
    for (mode, similar, clif_thunks) in jit_configurations().into_iter().skip(1) {
        assert_eq!(
            plugin_results(mode, similar, clif_thunks),
            reference,
            "plugin {mode:?}, merge-similar {similar}, CLIF thunks {clif_thunks}"
        );
    }
    for mode in modes() {
        assert_eq!(emit_jit_results(mode), reference, "emit_jit {mode:?}");
    }
    println!("every panic crossed the JIT frames");
}

#[test]
fn panic_crosses_jit_frames() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "jit_panic_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("every panic crossed the JIT frames"),
        "a panic did not cross the JIT frames ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// Whether the FDEs of `eh_frame` (little-endian, as the aarch64 JIT writes it) toggle the
/// return-address signing state with `DW_CFA_AARCH64_negate_ra_state`, and whether any
/// sets that state (`RA_SIGN_STATE`, register 34) with `DW_CFA_val_expression`, which
/// libgcc before GCC 13 reads as a stray bit of the expression's address (whether an
/// exception crosses a signed frame then depends on where the table lies in memory: a run
/// alone cannot tell). The stripped return address of `tail` functions is a
/// `DW_CFA_val_expression` of x30, which does not count.
fn ra_state_forms(eh_frame: &[u8]) -> (bool, bool) {
    use gimli::{
        BaseAddresses, CallFrameInstruction, CieOrFde, EhFrame, LittleEndian, UnwindSection,
    };
    // gimli reads no `B` augmentation (the B key): each CIE's `B` is read as `S`, also a
    // letter without data, as clif-merge writes it before marking it. Entries are (32-bit
    // length, CIE id or pointer, ...); a CIE's id is 0, and its augmentation string starts
    // after the version byte.
    let mut bytes = eh_frame.to_vec();
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let mut at = 0;
    while at + 8 <= bytes.len() && word(&bytes, at) != 0 {
        let next = at + 4 + word(&bytes, at) as usize;
        if word(&bytes, at + 4) == 0 {
            for letter in bytes[at + 9..next].iter_mut().take_while(|c| **c != 0) {
                if *letter == b'B' {
                    *letter = b'S';
                }
            }
        }
        at = next;
    }
    let mut section = EhFrame::new(&bytes[..], LittleEndian);
    section.set_vendor(gimli::Vendor::AArch64);
    let bases = BaseAddresses::default();
    let mut entries = section.entries(&bases);
    let (mut negate, mut val_expression) = (false, false);
    while let Some(entry) = entries.next().expect("the .eh_frame reads") {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial
            .parse(EhFrame::cie_from_offset)
            .expect("the FDE reads");
        let mut instructions = fde.instructions(&section, &bases);
        while let Some(instruction) = instructions.next().expect("the FDE's instructions read") {
            match instruction {
                CallFrameInstruction::NegateRaState => negate = true,
                CallFrameInstruction::ValExpression {
                    register: gimli::Register(34),
                    ..
                } => val_expression = true,
                _ => {}
            }
        }
    }
    (negate, val_expression)
}

#[path = "common/jit_region.rs"]
mod jit_region;

#[path = "common/breakpoint_stops.rs"]
mod breakpoint_stops;

/// A `JITModule` for `isa` that allocates from a fresh fixed-address region
/// ([`jit_region`]), each of `imports` resolved to its stub there: the region (which must
/// outlive the module) and the module.
fn image_module(
    isa: cranelift_codegen::isa::OwnedTargetIsa,
    imports: &'static [(&'static str, &'static str)],
) -> (jit_region::Region, JITModule) {
    let region = jit_region::Region::new().unwrap();
    let base = region.base();
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    builder.memory_provider(region.provider());
    builder.symbol_lookup_fn(Box::new(move |name| {
        let stub = jit_region::stub_address(base, imports, name);
        Some(stub.unwrap_or_else(|| panic!("the image imports {name}")) as *const u8)
    }));
    (region, JITModule::new(builder))
}

/// [`image_module`] for `target` without PIC (as a JIT compiles), with the Cranelift
/// `settings`.
fn image_module_for(
    target: &TargetInfo,
    settings: &[(&str, &str)],
    imports: &'static [(&'static str, &'static str)],
) -> (jit_region::Region, JITModule) {
    let settings: Vec<(String, String)> = [("is_pic", "false")]
        .iter()
        .chain(settings)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    image_module(clif_merge::build_isa(target, &settings).unwrap(), imports)
}

/// The address of each of `entries` in the finalized `module` (its functions' `ids`),
/// and `region`, which it allocated from, written out as `dir/jit.image`: the image's path
/// and the addresses.
fn write_image(
    dir: &Path,
    region: &jit_region::Region,
    module: JITModule,
    ids: &BTreeMap<String, FuncId>,
    entries: &[(String, bool)],
) -> (PathBuf, BTreeMap<String, usize>) {
    let addresses = entries
        .iter()
        .map(|(name, _)| {
            let address = module.get_finalized_function(ids[name]) as usize;
            (name.clone(), address)
        })
        .collect();
    drop(module);
    std::fs::create_dir_all(dir).unwrap();
    let image = dir.join("jit.image");
    std::fs::write(&image, region.bytes(region.used())).unwrap();
    (image, addresses)
}

/// What the aarch64 JIT image imports: `cb`, the harness's own.
const IMAGE_IMPORTS: [(&str, &str); 1] = [("cb", "&cb")];

/// Functions defined through the plugin in a `JITModule` for Linux (aarch64, or x86_64),
/// written out as an image with the `.eh_frame` the plugin gives for it: where, and what a
/// C loader needs.
struct LinuxJitImage {
    image: PathBuf,
    /// The `.eh_frame` the plugin gives for it (`Merged::jit_eh_frame`).
    eh_frame: Vec<u8>,
    base: usize,
    len: usize,
    /// Each entry's address.
    addresses: BTreeMap<String, usize>,
    aarch64: bool,
}

impl LinuxJitImage {
    /// What the image for `aarch64` or x86_64 imports.
    fn imports(aarch64: bool) -> &'static [(&'static str, &'static str)] {
        if aarch64 {
            &IMAGE_IMPORTS
        } else {
            &X86_64_IMAGE_IMPORTS
        }
    }
}

impl LinuxJitImage {
    /// The fixture defined through the plugin in a `JITModule` for aarch64 (a
    /// fixed-address region of this process, [`jit_region`]) with `settings`
    /// (`NAME=VALUE`), written out into `dir` with the `.eh_frame` the plugin gives for it
    /// (`Merged::jit_eh_frame`).
    fn aarch64(
        dir: &Path,
        mode: MergeMode,
        similar: bool,
        clif_thunks: bool,
        settings: &[&str],
        context: &str,
    ) -> Self {
        let image = Self::new(
            dir,
            "aarch64-unknown-linux-gnu",
            functions(),
            &entries(),
            (mode, similar, clif_thunks),
            settings,
        );
        let signs = settings.contains(&"sign_return_address=true");
        assert_eq!(
            ra_state_forms(&image.eh_frame),
            (signs, false),
            "{context}: (DW_CFA_AARCH64_negate_ra_state, DW_CFA_val_expression of \
             RA_SIGN_STATE) in the JIT's .eh_frame"
        );
        image
    }

    /// Both fixtures, [`FIXTURE`]'s and [`FASTCALL_FIXTURE`]'s functions, defined through
    /// the plugin in a `JITModule` for x86_64 Linux and written out into `dir` as
    /// [`LinuxJitImage::aarch64`] does.
    fn x86_64(dir: &Path, mode: MergeMode, similar: bool, clif_thunks: bool) -> Self {
        let mut funcs = functions();
        let fastcall = std::fs::read_to_string(root().join(FASTCALL_FIXTURE)).unwrap();
        funcs.extend(cranelift_reader::parse_functions(&fastcall).unwrap());
        Self::new(
            dir,
            "x86_64-unknown-linux-gnu",
            funcs,
            &harness_entries(true),
            (mode, similar, clif_thunks),
            &[],
        )
    }

    /// `funcs` defined for `triple` in `mode`, with merge-similar or not, with CLIF
    /// thunks or not, with `settings` and without PIC; the addresses of `entries`.
    fn new(
        dir: &Path,
        triple: &str,
        funcs: Vec<Function>,
        entries: &[(String, bool)],
        (mode, similar, clif_thunks): (MergeMode, bool, bool),
        settings: &[&str],
    ) -> Self {
        let target = TargetInfo::from_triple_str(triple).unwrap();
        let settings: Vec<(String, String)> = std::iter::once("is_pic=false")
            .chain(settings.iter().copied())
            .map(|s| {
                let (name, value) = s.split_once('=').expect("NAME=VALUE");
                (name.to_string(), value.to_string())
            })
            .collect();
        let aarch64 = triple.starts_with("aarch64");
        let isa = clif_merge::build_isa(&target, &settings).unwrap();
        let (region, mut module) = image_module(isa, Self::imports(aarch64));
        let (merged, ids) = define_with_plugin(&mut module, funcs, mode, similar, clif_thunks);
        module.finalize_definitions().unwrap();
        if aarch64 {
            // Frames of aarch64 code are not this x86_64 process's to unwind.
            assert_eq!(
                merged.register_jit_frames(&module).unwrap().registrations(),
                0,
                "{triple}: frames of foreign code were registered"
            );
        }
        let eh_frame = merged.jit_eh_frame(&module).unwrap();
        assert!(!eh_frame.is_empty(), "{triple}: no .eh_frame");
        let (image, addresses) = write_image(dir, &region, module, &ids, entries);
        LinuxJitImage {
            image,
            eh_frame,
            base: region.base(),
            len: region.used(),
            addresses,
            aarch64,
        }
    }

    /// C (or C++) that defines `load_image()`, which maps the image where the JIT put it
    /// and registers its frames with the program's own libgcc.
    fn loader(&self) -> String {
        let mut s = String::from("#include <stdint.h>\n#include <stdio.h>\n");
        let eh_frame = Some(&self.eh_frame[..]);
        s += &jit_region::loader_c(
            &self.image,
            self.base,
            self.len,
            Self::imports(self.aarch64),
            &if self.aarch64 {
                jit_region::Loader::LinuxAarch64 {
                    guarded: false,
                    eh_frame,
                }
            } else {
                jit_region::Loader::LinuxX86_64 { eh_frame }
            },
        );
        s
    }

    /// Where the code cranelift-jit wrote lies: what the image holds after its page of
    /// import stubs (the loader's stand-ins for a linker's, which have no FDE).
    fn code(&self) -> (u64, u64) {
        let start = self.base + jit_region::STUB_PAGE;
        (start as u64, (self.len - jit_region::STUB_PAGE) as u64)
    }
}

/// The fixture defined through the plugin in a `JITModule` for aarch64 ([`LinuxJitImage`]),
/// run under qemu by a C++ loader that maps the image where the JIT put it, registers the
/// frames with its own libgcc and calls every entry: what it printed.
fn aarch64_jit_output(
    dir: &Path,
    mode: MergeMode,
    similar: bool,
    clif_thunks: bool,
    settings: &[&str],
) -> String {
    let context = format!(
        "aarch64 JIT {mode:?}, merge-similar {similar}, CLIF thunks {clif_thunks}, {settings:?}"
    );
    let image = LinuxJitImage::aarch64(dir, mode, similar, clif_thunks, settings, &context);
    let mut source = harness_prelude();
    source += &image.loader();
    source += "int main() {\n  load_image();\n";
    source += &harness_checks(&entries(), |name, narrow| {
        let param = if narrow { "int32_t" } else { "int64_t" };
        format!("((int64_t (*)({param}))0x{:x}ull)", image.addresses[name])
    });
    source += "  return 0;\n}\n";
    let harness = dir.join("harness.cpp");
    std::fs::write(&harness, source).unwrap();
    let exe = dir.join("run");
    run(Command::new("aarch64-linux-gnu-g++")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&harness));
    harness_output(
        Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(&exe),
        &context,
    )
}

/// `Merged::jit_eh_frame` on aarch64, run: a C++ exception thrown by `cb` crosses the
/// merged JIT code of every mode (with and without merge-similar, single-jump and CLIF
/// thunks) and is caught by the harness, every entry returning what it returns unmerged.
/// Needs an x86_64 host (the image's fixed addresses are this process's), qemu-aarch64 and
/// aarch64-linux-gnu-g++.
#[test]
fn cxx_exceptions_cross_aarch64_jit_code() {
    if !cfg!(target_arch = "x86_64") || !have("aarch64-linux-gnu-g++") || !have("qemu-aarch64") {
        eprintln!("skipping: needs an x86_64 host, aarch64-linux-gnu-g++ and qemu-aarch64 (Debian: g++-aarch64-linux-gnu, qemu-user)");
        return;
    }
    let dir = scratch("aarch64-jit");
    let mut reference: Option<String> = None;
    for (mode, similar, clif_thunks) in jit_configurations() {
        let name = format!("{mode:?}-{similar}-{clif_thunks}");
        let got = aarch64_jit_output(&dir.join(&name), mode, similar, clif_thunks, &[]);
        let reference = reference.get_or_insert_with(|| got.clone());
        check_output(&entries(), reference, &got, &format!("aarch64 JIT {name}"));
    }
    // With pointer authentication: trampolines with merge-similar, both kinds of thunk.
    let reference = reference.expect("the runs above");
    for (key, settings) in POINTER_AUTHENTICATION {
        for clif_thunks in [false, true] {
            let name = format!("{}-{clif_thunks}", key.replace([' ', ','], "-"));
            let got = aarch64_jit_output(
                &dir.join(&name),
                MergeMode::Trampolines,
                true,
                clif_thunks,
                settings,
            );
            check_output(&entries(), &reference, &got, &format!("aarch64 JIT {name}"));
        }
    }
}

/// What an x86_64 JIT image (Windows or Linux) imports: `cb` and `cb_fastcall`, the
/// harness's own.
const X86_64_IMAGE_IMPORTS: [(&str, &str); 2] = [("cb", "&cb"), ("cb_fastcall", "&cb_fastcall")];

/// The functions of [`windows_fixture`] and [`FASTCALL_FIXTURE`] defined through the plugin
/// in a `JITModule` for `x86_64-pc-windows-gnu` (a fixed-address region of this process,
/// [`jit_region`]), written out as an image, and run under Wine by a C++ loader that maps
/// the image where the JIT put it, registers the function table the plugin gives for it
/// (`Merged::jit_function_table`: `RUNTIME_FUNCTION`s into the code and into the
/// `UNWIND_INFO`s the merger defined in the module) with `RtlAddFunctionTable`, as a
/// Windows JIT does, and calls every entry: what it printed. With `register` false the
/// table is left out.
fn windows_jit_output(
    dir: &Path,
    mode: MergeMode,
    similar: bool,
    clif_thunks: bool,
    register: bool,
) -> String {
    let context = format!(
        "x86_64-pc-windows-gnu JIT {mode:?}, merge-similar {similar}, CLIF thunks {clif_thunks}"
    );
    let image = windows_jit_image(dir, mode, similar, clif_thunks, &context);
    let fastcall: Vec<String> = entries_of(FASTCALL_FIXTURE)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let mut source = harness_prelude();
    source += &image.loader(register);
    source += "int main() {\n  load_image();\n";
    source += &harness_checks(&harness_entries(true), |name, narrow| {
        let param = if narrow { "int32_t" } else { "int64_t" };
        let convention = if fastcall.iter().any(|f| f == name) {
            "MSABI"
        } else {
            "SYSV"
        };
        format!(
            "((int64_t ({convention} *)({param}))0x{:x}ull)",
            image.addresses[name]
        )
    });
    source += "  return 0;\n}\n";
    let harness = dir.join("harness.cpp");
    std::fs::write(&harness, source).unwrap();
    let exe = dir.join("run.exe");
    run(Command::new("x86_64-w64-mingw32-g++")
        .args(["-O1", "-static", "-o"])
        .arg(&exe)
        .arg(&harness));
    run_under_wine(&exe, &context)
}

/// The functions of [`windows_fixture`] and [`FASTCALL_FIXTURE`] defined through the plugin
/// in a `JITModule` for `x86_64-pc-windows-gnu` (no PIC), written out as an image into
/// `dir`, with the function table the plugin gives for it.
struct WindowsJitImage {
    image: PathBuf,
    base: usize,
    len: usize,
    table: clif_merge::emit::unwind::windows_jit::WindowsFunctionTable,
    /// Each entry's address.
    addresses: BTreeMap<String, usize>,
}

impl WindowsJitImage {
    /// The loader's C (`load_image()`): map the image, and register its table with
    /// `register`.
    fn loader(&self, register: bool) -> String {
        jit_region::loader_c(
            &self.image,
            self.base,
            self.len,
            &X86_64_IMAGE_IMPORTS,
            &jit_region::Loader::WindowsX64 {
                function_table: register.then_some(&self.table),
            },
        )
    }
}

fn windows_jit_image(
    dir: &Path,
    mode: MergeMode,
    similar: bool,
    clif_thunks: bool,
    context: &str,
) -> WindowsJitImage {
    let mut funcs = windows_functions();
    let fastcall = std::fs::read_to_string(root().join(FASTCALL_FIXTURE)).unwrap();
    funcs.extend(cranelift_reader::parse_functions(&fastcall).unwrap());
    let plugin = (mode, similar, clif_thunks);
    windows_jit_image_of(dir, funcs, &[], &harness_entries(true), plugin, context)
}

/// `funcs` defined through the plugin (merge mode, merge-similar, CLIF thunks) in a
/// `JITModule` for `x86_64-pc-windows-gnu` (no PIC, and the Cranelift `settings`), written
/// out as an image into `dir`, with the function table the plugin gives for it and the
/// addresses of `entries`.
fn windows_jit_image_of(
    dir: &Path,
    funcs: Vec<Function>,
    settings: &[(&str, &str)],
    entries: &[(String, bool)],
    (mode, similar, clif_thunks): (MergeMode, bool, bool),
    context: &str,
) -> WindowsJitImage {
    let target = TargetInfo::from_triple_str("x86_64-pc-windows-gnu").unwrap();
    let (region, mut module) = image_module_for(&target, settings, &X86_64_IMAGE_IMPORTS);
    let (merged, ids) = define_with_plugin(&mut module, funcs, mode, similar, clif_thunks);
    module.finalize_definitions().unwrap();
    let table = merged
        .jit_function_table(&module)
        .unwrap()
        .unwrap_or_else(|| panic!("{context}: no function table"));
    assert!(!table.functions.is_empty(), "{context}: an empty table");
    let (image, addresses) = write_image(dir, &region, module, &ids, entries);
    WindowsJitImage {
        image,
        base: region.base(),
        len: region.used(),
        table,
        addresses,
    }
}

/// `Merged::jit_function_table`, run: a C++ exception thrown by `cb` crosses the merged
/// JIT code for Windows x64 of every mode (with and without merge-similar, single-jump and
/// CLIF thunks) under Wine, whose unwinder finds the code's `UNWIND_INFO`s through the
/// registered table, and is caught by the harness with the values it kept in callee-saved
/// registers unchanged, every entry returning what it returns unmerged. Without the table
/// the exception finds no handler. Needs an x86_64 host (the image's fixed addresses are
/// this process's), MinGW-w64's g++ and Wine.
#[test]
fn cxx_exceptions_cross_windows_x64_jit_code() {
    const CXX: &str = "x86_64-w64-mingw32-g++";
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping: needs an x86_64 host");
        return;
    }
    if !mingw_and_wine(CXX, "g++-mingw-w64-x86-64") {
        return;
    }
    let dir = scratch("windows-jit");
    let entries = harness_entries(true);
    let mut reference: Option<String> = None;
    for (mode, similar, clif_thunks) in jit_configurations() {
        let name = format!("{mode:?}-{similar}-{clif_thunks}");
        let got = windows_jit_output(&dir.join(&name), mode, similar, clif_thunks, true);
        let reference = reference.get_or_insert_with(|| got.clone());
        check_output(&entries, reference, &got, &format!("Windows JIT {name}"));
    }
}

/// The exec fixture whose merge-similar thunks grow the stack argument area.
const GROWN: &str = "fixtures/exec/similar_thunks_that_grow_the_stack_area.clif";

/// A thunk that grows its stack argument area moves the stack pointer (and, on x86_64,
/// the return address) before it jumps, so the CIE's initial rules stop being true after
/// its first instruction; its FDE says where the CFA and the return address are from
/// there on. gdb, stopped at every instruction of `%g_a`'s thunk (linked into an
/// executable), must see the same frame at each stop: the same CFA as at the thunk's entry
/// (where the CIE's rules hold), its caller `%run_g_a` (or the body merge-similar makes of
/// the entries) above it, then `main`.
///
/// - x86_64: gdb runs the executable. Without the FDE gdb loses the caller after the
///   `sub`; with a CFA offset 16 bytes off, the CFA moves.
/// - aarch64: `gdb-multiarch` debugs it under `qemu-aarch64 -g`. The return address stays
///   in x30 and the caller has a frame pointer, so a wrong rule shows in the CFA only (a CFA
///   offset 16 bytes off moved it; the test then fails). Without any FDE gdb's own prologue
///   analysis reads the `sub` right, so there gdb cannot tell a missing FDE; an unwinder
///   without a prologue analyser (libgcc) would stop at the thunk.
#[test]
fn gdb_finds_the_caller_at_every_instruction_of_a_grown_thunk() {
    let mut ran = 0;
    if cfg!(target_arch = "x86_64") && have("gdb") {
        gdb_steps_through_a_grown_thunk(&GdbTarget::X86_64);
        ran += 1;
    } else {
        eprintln!("skipping x86_64: needs an x86_64 host and gdb (Debian: gdb)");
    }
    if have("gdb-multiarch") && have("qemu-aarch64") && have("aarch64-linux-gnu-gcc") {
        gdb_steps_through_a_grown_thunk(&GdbTarget::Aarch64);
        ran += 1;
    } else {
        eprintln!(
            "skipping aarch64: needs gdb-multiarch, qemu-aarch64 and aarch64-linux-gnu-gcc \
             (Debian: gdb-multiarch, qemu-user, gcc-aarch64-linux-gnu)"
        );
    }
    if ran == 0 {
        eprintln!("skipping: no target could be debugged");
    }
}

/// Where [`gdb_steps_through_a_grown_thunk`] builds and debugs.
enum GdbTarget {
    /// Natively, with `gdb`.
    X86_64,
    /// Under `qemu-aarch64 -g`, with `gdb-multiarch`.
    Aarch64,
}

impl GdbTarget {
    fn triple(&self) -> &'static str {
        match self {
            GdbTarget::X86_64 => "x86_64-unknown-linux-gnu",
            GdbTarget::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// Whether a disassembled line is the `sub` that grows the stack area.
    fn grows(&self, line: &str) -> bool {
        match self {
            GdbTarget::X86_64 => line.contains("sub") && line.contains("%rsp"),
            GdbTarget::Aarch64 => line.contains("sub\tsp, sp, #"),
        }
    }
}

fn gdb_steps_through_a_grown_thunk(target: &GdbTarget) {
    let triple = target.triple();
    let dir = scratch(&format!("grown_thunk_gdb-{triple}"));
    let obj = dir.join("grown.o");
    let similar = ["--merge-functions", "aliases", "--merge-similar"];
    clif_merge_fixture(GROWN, triple, false, &similar, &[], &obj);
    let (objdump, cc) = match target {
        GdbTarget::X86_64 => ("objdump", "cc"),
        GdbTarget::Aarch64 => ("aarch64-linux-gnu-objdump", "aarch64-linux-gnu-gcc"),
    };
    let disassembly = run(Command::new(objdump).arg("-d").arg(&obj));
    let thunk: Vec<&str> = disassembly
        .lines()
        .skip_while(|l| !l.ends_with("<g_a>:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // An instruction's line has its address, bytes and text; a continuation of long
        // bytes has no text.
        .filter(|l| l.split('\t').count() >= 3)
        .collect();
    assert!(
        thunk.first().is_some_and(|l| target.grows(l)),
        "{triple}: g_a is not a thunk that grows its stack area:\n{}",
        thunk.join("\n")
    );
    let main = dir.join("main.c");
    std::fs::write(
        &main,
        "#include <stdint.h>\n#include <stdio.h>\n\
         extern int64_t run_g_a(int64_t, int64_t, int64_t *);\n\
         int main(void) {\n\
         \x20 static int64_t memory[32] = {0, 5};\n\
         \x20 printf(\"%lld\\n\", (long long)run_g_a(1, 2, memory));\n\
         \x20 return 0;\n}\n",
    )
    .unwrap();
    let exe = dir.join("grown");
    // Static on aarch64, so that gdb needs no sysroot for the emulated process.
    let link: &[&str] = match target {
        GdbTarget::X86_64 => &["-no-pie"],
        GdbTarget::Aarch64 => &["-no-pie", "-static"],
    };
    run(Command::new(cc)
        .args(link)
        .arg("-o")
        .arg(&exe)
        .arg(&main)
        .arg(&obj));
    let (mut gdb, mut emulator) = match target {
        GdbTarget::X86_64 => {
            let mut gdb = Command::new("gdb");
            gdb.args(["-batch", "-nx", "-ex", "break *g_a", "-ex", "run"]);
            (gdb, None)
        }
        GdbTarget::Aarch64 => {
            // A free port for qemu's gdb stub; gdb retries until it listens.
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let qemu = Command::new("qemu-aarch64")
                .args(["-g", &port.to_string()])
                .arg(&exe)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let mut gdb = Command::new("gdb-multiarch");
            gdb.args(["-batch", "-nx", "-ex", "set tcp connect-timeout 30"]);
            gdb.args(["-ex", &format!("target remote 127.0.0.1:{port}")]);
            gdb.args(["-ex", "break *g_a", "-ex", "continue"]);
            (gdb, Some(qemu))
        }
    };
    // One stop per instruction of the thunk, its jump included.
    for _ in 0..thunk.len() {
        gdb.args(["-ex", "info frame", "-ex", "bt", "-ex", "stepi"]);
    }
    gdb.arg(&exe);
    let out = gdb.output();
    if let Some(qemu) = emulator.as_mut() {
        let _ = qemu.kill();
        let _ = qemu.wait();
    }
    let out = out.unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Each stop: `Stack level 0, frame at CFA:`, the frame's lines, then the backtrace.
    let stops: Vec<(&str, Vec<&str>)> = out
        .split("Stack level 0, frame at ")
        .skip(1)
        .map(|stop| {
            let cfa = stop.split(':').next().unwrap_or("");
            let backtrace = stop.lines().filter(|l| l.starts_with('#')).collect();
            (cfa, backtrace)
        })
        .filter(|(_, bt): &(&str, Vec<&str>)| bt.first().is_some_and(|l| l.contains(" in g_a ")))
        .collect();
    assert_eq!(
        stops.len(),
        thunk.len(),
        "{triple}: a stop per instruction:\n{out}"
    );
    let entry_cfa = stops[0].0;
    for (cfa, bt) in &stops {
        assert_eq!(
            *cfa,
            entry_cfa,
            "{triple}: the CFA moved inside the thunk:\n{}\n\nall of gdb's output:\n{out}",
            bt.join("\n")
        );
        let callers = &bt[1..];
        assert!(
            // The entry itself, or the body merge-similar shares between the entries.
            callers.first().is_some_and(|l| l.contains("run_g_a ()")),
            "{triple}: the caller is lost:\n{}\n\nall of gdb's output:\n{out}",
            bt.join("\n")
        );
        assert!(
            callers.iter().any(|l| l.contains(" main ()")),
            "{triple}: main is lost:\n{}",
            bt.join("\n")
        );
    }
}
