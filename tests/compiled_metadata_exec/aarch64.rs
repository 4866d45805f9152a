//! The same builds for aarch64, run under qemu: each fixture is built in a `JITModule` for
//! aarch64 whose memory is one mapping at a fixed address ([`jit_region`]), written out as
//! an image, and run by a C program (`aarch64.c`, built with `aarch64-linux-gnu-gcc`)
//! that maps it at that address and holds the runtime: a signal handler for the faults, a
//! collector and an unwinder over the tables the test writes into it from
//! `Merged::defined_code` (or Cranelift's own `Context`s, unmerged). Its output is turned
//! into the calls [`super::check_build`] checks, as on the host.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use clif_merge::TargetInfo;
use cranelift_codegen::FinalizedMachExceptionHandler as Handler;
use cranelift_jit::JITBuilder;
use cranelift_module::default_libcall_names;

use super::jit_region::{self, Loader, Region};
use super::{arguments, finalize, Arg, Body, Build, Call, Ended, Finalized, Fixture, Kind};
use super::{MOVED_BY, WORD};

const CC: &str = "aarch64-linux-gnu-gcc";

/// Why this machine cannot run the test, if it cannot.
pub fn unavailable() -> Option<String> {
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    (!have(CC) || !have("qemu-aarch64"))
        .then(|| format!("needs {CC} and qemu-aarch64 (Debian: gcc-aarch64-linux-gnu, qemu-user)"))
}

/// The C expression of each import's address in the runtime.
fn runtime_imports(fixture: &Fixture) -> Vec<(&'static str, &'static str)> {
    fixture
        .imports
        .iter()
        .map(|&(name, _)| match name {
            "gc_point" => (name, "&gc_point"),
            "throw" => (name, "&throw_entry"),
            other => panic!("the runtime has no {other}"),
        })
        .collect()
}

/// Build `fixture` as `build` for aarch64, run every function's calls on their
/// [`arguments`] under qemu in `dir`, and return the build and the calls.
pub fn run(fixture: &Fixture, build: Build, dir: &Path) -> (Finalized, Vec<Vec<Call>>) {
    std::fs::create_dir_all(dir).unwrap();
    let region = Region::new().unwrap();
    let base = region.base();
    let imports = runtime_imports(fixture);
    let isa = clif_merge::build_isa(
        &TargetInfo::from_triple_str("aarch64-unknown-linux-gnu").unwrap(),
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

    let tail: Vec<bool> = super::parse(fixture)
        .iter()
        .map(|f| f.signature.call_conv == cranelift_codegen::isa::CallConv::Tail)
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
    let mut source = String::from(
        "#include <stdint.h>\n#include <stdio.h>\nvoid gc_point(int64_t);\nvoid throw_entry(void);\n",
    );
    source += &jit_region::loader_c(
        &image,
        base,
        region.used(),
        &imports,
        &Loader::LinuxAarch64 {
            guarded: false,
            eh_frame: None,
        },
    );
    source += &tables(&finalized.table);
    source += &format!(
        "#define MOVED_BY {MOVED_BY}ll\n#define WORD {WORD}ll\n\
         struct call {{ uint64_t entry; int64_t arg; int word, tail, fork; }};\n\
         static const struct call CALLS[] = {{\n{rows}}};\n"
    );
    source += &std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/compiled_metadata_exec/aarch64.c"),
    )
    .unwrap();
    let c = dir.join("harness.c");
    std::fs::write(&c, source).unwrap();
    let exe = dir.join("harness");
    let built = Command::new(CC)
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
        "{CC} {}: {}",
        c.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new("timeout")
        .args(["120", "qemu-aarch64"])
        .arg(&exe)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{} {build:?}: qemu-aarch64 {}: {}\n{stdout}{}",
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
/// `default`, handler). Each list ends in a row no return address matches.
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
        for (&at, (frame_offset, handlers)) in &body.handlers {
            let ret = start + u64::from(at);
            for handler in handlers {
                let (tag, to) = match *handler {
                    Handler::Tag(tag, to) => (i64::from(tag.as_u32()), to),
                    Handler::Default(to) => (-1, to),
                    Handler::Context(_) => continue,
                };
                let to = start + u64::from(to);
                writeln!(
                    sites,
                    "  {{0x{ret:x}ull, {frame_offset}u, {tag}ll, 0x{to:x}ull}},"
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
         struct site {{ uint64_t ret; uint32_t frame_offset; int64_t tag; uint64_t handler; }};\n\
         static const struct site SITES[] = {{\n{sites}  {{0, 0, 0, 0}},\n}};\n"
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
