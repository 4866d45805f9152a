//! The same builds for targets this host does not run, aarch64 Linux under qemu and x86_64
//! Windows under Wine: each fixture is built in a `JITModule` for the target whose memory
//! is one mapping at a fixed address ([`jit_region`]), written out as an image, and run by
//! a C program (`walk.c`, then `aarch64.c` or `windows.c`) that maps it at that address and holds the
//! runtime: a handler for the faults (a signal handler in a forked child; a vectored
//! exception handler), a collector and an unwinder over the tables the test writes into
//! it from `Merged::defined_code` (or Cranelift's own `Context`s, unmerged). Its output is
//! turned into the calls [`super::check_build`] checks, as on the host.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use clif_merge::TargetInfo;
use cranelift_jit::JITBuilder;
use cranelift_module::default_libcall_names;

use super::jit_region::{self, Loader, Region};
use super::wine;
use super::{arguments, finalize, Arg, Body, Build, Call, Ended, Finalized, Fixture, Kind};
use super::{MOVED_BY, PAYLOAD_PER_TAG, WORD};

/// A target whose JIT code runs as an image.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// aarch64 Linux, under `qemu-aarch64`.
    Aarch64,
    /// x86_64 Windows, under Wine.
    Windows,
}

impl Target {
    fn triple(self) -> &'static str {
        match self {
            Target::Aarch64 => "aarch64-unknown-linux-gnu",
            Target::Windows => "x86_64-pc-windows-gnu",
        }
    }

    /// The C compiler, and the Debian packages that have it and the runner.
    fn compiler(self) -> (&'static str, &'static str) {
        match self {
            Target::Aarch64 => ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu, qemu-user"),
            Target::Windows => ("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64, wine"),
        }
    }

    /// The runtime's part for the target, after the tables and `walk.c`.
    fn runtime(self) -> &'static str {
        match self {
            Target::Aarch64 => "aarch64.c",
            Target::Windows => "windows.c",
        }
    }

    /// Why this machine cannot run the target's images, if it cannot.
    pub fn unavailable(self) -> Option<String> {
        let have = |tool: &str| {
            Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let (cc, packages) = self.compiler();
        let runner = match self {
            Target::Aarch64 => "qemu-aarch64",
            Target::Windows => "wine",
        };
        if !have(cc) || !have(runner) {
            return Some(format!("needs {cc} and {runner} (Debian: {packages})"));
        }
        match self {
            Target::Aarch64 => None,
            Target::Windows => wine::ready().err(),
        }
    }

    /// The C expression of each of `fixture`'s imports' address in the runtime.
    fn imports(self, fixture: &Fixture) -> Vec<(&'static str, &'static str)> {
        fixture
            .imports
            .iter()
            .map(|&(name, _)| match (name, self) {
                ("gc_point", _) => (name, "&gc_point"),
                ("throw", Target::Aarch64) => (name, "&throw_entry"),
                ("throw", Target::Windows) => (name, "&throw_from_tail"),
                (other, _) => panic!("the runtime has no {other}"),
            })
            .collect()
    }
}

/// Build `fixture` as `build` for `target`, run every function's calls on their
/// [`arguments`] under qemu or Wine in `dir`, and return the build and the calls.
pub fn run(
    target: Target,
    fixture: &Fixture,
    build: Build,
    dir: &Path,
) -> (Finalized, Vec<Vec<Call>>) {
    std::fs::create_dir_all(dir).unwrap();
    let region = Region::new().unwrap();
    let base = region.base();
    let imports = target.imports(fixture);
    let isa = clif_merge::build_isa(
        &TargetInfo::from_triple_str(target.triple()).unwrap(),
        &[
            ("is_pic".to_string(), "false".to_string()),
            ("preserve_frame_pointers".to_string(), "true".to_string()),
        ],
    )
    .unwrap();
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    builder.memory_provider(region.provider());
    let lookup = imports.clone();
    builder.symbol_lookup_fn(Box::new(move |name| {
        let stub = jit_region::stub_address(base, &lookup, name);
        Some(stub.unwrap_or_else(|| panic!("the image imports {name}")) as *const u8)
    }));
    let finalized = finalize(build, fixture, builder);
    let image = dir.join("jit.image");
    std::fs::write(&image, region.bytes(region.used())).unwrap();

    // aarch64's `tail` convention passes the first integer in x2: the runtime calls such
    // a function through a shim. On x86_64 it is System V's register.
    let tail: Vec<bool> = super::parse(fixture)
        .iter()
        .map(|f| {
            f.signature.call_conv == cranelift_codegen::isa::CallConv::Tail
                && matches!(target, Target::Aarch64)
        })
        .collect();
    let mut calls = Vec::new();
    let mut rows = String::new();
    for (n, &tail) in tail.iter().enumerate() {
        for arg in arguments(fixture, n) {
            let (x, word) = match arg {
                Arg::Number(x) => (x, 0),
                Arg::Word => (0, 1),
            };
            let fork = u8::from(fixture.kind == Kind::Traps);
            writeln!(
                rows,
                "  {{0x{:x}ull, {x}ll, {word}, {}, {fork}}},",
                finalized.addresses[n],
                u8::from(tail)
            )
            .unwrap();
            calls.push(n);
        }
    }
    // The runtime's functions, which the loader's stubs name, come after it.
    let mut source = String::from("#include <stdint.h>\n#include <stdio.h>\n");
    let (declarations, loader) = match target {
        Target::Aarch64 => (
            "#define RUNTIME_ABI\nvoid gc_point(int64_t);\nvoid throw_entry(void);\n",
            Loader::LinuxAarch64 {
                guarded: false,
                eh_frame: None,
            },
        ),
        // The runtime walks frames by their frame pointers and catches faults with a
        // vectored handler: no function table.
        Target::Windows => (
            "#define RUNTIME_ABI __attribute__((sysv_abi))\n\
             RUNTIME_ABI void gc_point(int64_t);\nRUNTIME_ABI void throw_from_tail(int64_t);\n",
            Loader::WindowsX64 {
                function_table: None,
            },
        ),
    };
    source += declarations;
    source += &jit_region::loader_c(&image, base, region.used(), &imports, &loader);
    source += &tables(&finalized.table);
    source += &format!(
        "#define MOVED_BY {MOVED_BY}ll\n#define WORD {WORD}ll\n#define PAYLOAD_PER_TAG {PAYLOAD_PER_TAG}ll\n\
         struct call {{ uint64_t entry; int64_t arg; int word, tail, fork; }};\n\
         static const struct call CALLS[] = {{\n{rows}}};\n"
    );
    for part in ["walk.c", target.runtime()] {
        source += &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/compiled_metadata_exec")
                .join(part),
        )
        .unwrap();
    }
    let c = dir.join("harness.c");
    std::fs::write(&c, source).unwrap();
    let (cc, _) = target.compiler();
    let exe = dir.join(match target {
        Target::Aarch64 => "harness",
        Target::Windows => "harness.exe",
    });
    let built = Command::new(cc)
        .args([
            "-O1",
            "-fno-omit-frame-pointer",
            "-static",
            "-Wall",
            "-Werror",
        ])
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{cc} {}: {}",
        c.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    let timeout = |runner: &str| {
        let mut cmd = Command::new("timeout");
        cmd.args(["120", runner]);
        cmd
    };
    let ran = match target {
        Target::Aarch64 => timeout("qemu-aarch64").arg(&exe).output().unwrap(),
        Target::Windows => wine::run(&exe, || timeout("wine")).unwrap().1,
    };
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{} {target:?} {build:?}: {}: {}\n{stdout}{}",
        fixture.file,
        exe.display(),
        ran.status,
        String::from_utf8_lossy(&ran.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        calls.len(),
        "{build:?}: a line a call:\n{stdout}"
    );
    let mut by_function: Vec<Vec<Call>> = tail.iter().map(|_| Vec::new()).collect();
    for (&n, line) in calls.iter().zip(lines) {
        by_function[n].push(call_of(line, &finalized.table));
    }
    (finalized, by_function)
}

/// The C tables of `table`: the bodies (start, end), each stack map's roots (return
/// address, distance from the frame pointer to the stack pointer, root's offset), and
/// each call site's handlers in order (return address, frame offset, tag or -1 for
/// `default`, the offset from the stack pointer of the dynamic context in force or -1,
/// handler). Each list ends in a row no return address matches.
fn tables(table: &[Body]) -> String {
    let mut bodies = String::new();
    let mut roots = String::new();
    let mut sites = String::new();
    for body in table {
        let start = body.start as u64;
        writeln!(
            bodies,
            "  {{0x{start:x}ull, 0x{:x}ull}},",
            start + body.len as u64
        )
        .unwrap();
        for (&at, (span, offsets)) in &body.stack_maps {
            for offset in offsets {
                let ret = start + u64::from(at);
                writeln!(roots, "  {{0x{ret:x}ull, {span}u, {offset}u}},").unwrap();
            }
        }
        for (&at, (frame_offset, catches)) in &body.handlers {
            let ret = start + u64::from(at);
            for catch in catches {
                let tag = catch.tag.map_or(-1, i64::from);
                let context = catch.context.map_or(-1, i64::from);
                let to = start + u64::from(catch.to);
                writeln!(
                    sites,
                    "  {{0x{ret:x}ull, {frame_offset}u, {tag}ll, {context}ll, 0x{to:x}ull}},"
                )
                .unwrap();
            }
        }
    }
    format!(
        "struct body {{ uint64_t start, end; }};\n\
         static const struct body BODIES[] = {{\n{bodies}}};\n\
         struct root {{ uint64_t ret; uint32_t span, offset; }};\n\
         static const struct root ROOTS[] = {{\n{roots}  {{0, 0, 0}},\n}};\n\
         struct site {{ uint64_t ret; uint32_t frame_offset; int64_t tag, context; uint64_t handler; }};\n\
         static const struct site SITES[] = {{\n{sites}  {{0, 0, 0, 0, 0}},\n}};\n"
    )
}

/// A line of the harness's output as a call: `table` is the one it was written from.
fn call_of(line: &str, table: &[Body]) -> Call {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["F", signal, pc] => Call {
            ended: Ended::Faulted(
                signal.parse().unwrap(),
                usize::from_str_radix(pc, 16).unwrap(),
            ),
            walked: Vec::new(),
        },
        ["R", value, "W", bodies @ ..] => Call {
            ended: Ended::Returned(value.parse().unwrap()),
            walked: bodies
                .iter()
                .map(|b| table[b.parse::<usize>().unwrap()].id)
                .collect(),
        },
        _ => panic!("the harness said {line:?}"),
    }
}
