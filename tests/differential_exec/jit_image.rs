//! cranelift-jit for a target this host does not run: the plugin defines the program in a
//! `JITModule` built for aarch64 Linux or x86_64 Windows, whose memory ([`Region`]) is one
//! mapping at a fixed address of this process; once finalized (every relocation applied by
//! cranelift-jit itself, veneers included) the mapping is written out as an image, and a C
//! loader run under `qemu-aarch64` or Wine maps it at the same address and calls the
//! entries as the object configurations' harness does ([`super::c_harness`]).
//!
//! The code is cranelift-jit's, byte for byte: only the memory it lands in and the
//! addresses of imported functions are the loader's. Imports resolve to stubs in the
//! region's first page that the loader fills with its own C library's functions, so an
//! import the loader does not know is an error here, not a crash there.
//!
//! The loader registers the merger's unwind information, as a JIT registers its code's:
//! on Windows the function table (`Merged::jit_function_table`) with
//! `RtlAddFunctionTable`, on aarch64 the `.eh_frame` (`Merged::jit_eh_frame`) with its
//! libgcc. The harness then stops at every instruction of one entry's first call in eight
//! (other entries in each build) and unwinds from there, as an executable's harness does: on Windows with the trap flag
//! and Windows' own unwinder, on aarch64 at breakpoints with libgcc.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use clif_merge::TargetInfo;

use super::jit_region::{self, Loader, Region};
use super::{
    breakpoint_stepper, c_harness, command, outcome, parse_results, run_with_breakpoints, timed,
    windows_stepper, wine, Arch, Config, Entries, Program, Results, STEP_LIMIT,
};

/// Build `program` as `config` (an aarch64 or Windows JIT configuration) into an image,
/// and run it under qemu or Wine with the C harness; `dir` is a scratch directory of its
/// own.
pub fn run(program: &Program, config: Config, dir: &Path) -> Result<Results, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let target = TargetInfo::from_triple_str(config.arch.triple()).map_err(|e| e.to_string())?;
    let region = Region::new()?;
    let base = region.base();
    let unknown: Arc<Mutex<Vec<String>>> = Arc::default();
    let missing = unknown.clone();
    let (module, address, merged) = super::jit::build_for(program, config, &target, |builder| {
        builder.memory_provider(region.provider());
        builder.symbol_lookup_fn(Box::new(move |name| {
            Some(stub_address(base, name).unwrap_or_else(|| {
                missing.lock().unwrap().push(name.to_string());
                base
            }) as *const u8)
        }));
    })?;
    // The unwind information the merger gives, for the loader to register: Windows' function
    // table, or aarch64's `.eh_frame` (none for Cranelift's own reference build).
    let (table, eh_frame) = match (&merged, config.arch) {
        (Some(merged), Arch::X86_64Windows) => (
            merged
                .jit_function_table(&module)
                .map_err(|e| e.to_string())?,
            Vec::new(),
        ),
        (Some(merged), Arch::Aarch64) => (
            None,
            merged.jit_eh_frame(&module).map_err(|e| e.to_string())?,
        ),
        (None, _) | (Some(_), Arch::X86_64) => (None, Vec::new()),
    };
    let registers = table.is_some() || !eh_frame.is_empty();
    if !registers && super::jit::has_unwind_info(config) {
        return Err(format!("{config:?}: the plugin gave no unwind information"));
    }
    drop(module);
    let unknown = unknown.lock().unwrap();
    if !unknown.is_empty() {
        return Err(format!(
            "the JIT image imports {} (the loader has {:?})",
            unknown.join(", "),
            LOADER_IMPORTS.map(|(name, _)| name)
        ));
    }
    let image = dir.join("jit.image");
    let len = region.used();
    std::fs::write(&image, region.bytes(len)).map_err(|e| e.to_string())?;
    let addresses: Vec<usize> = address.iter().map(|&a| a as usize).collect();
    let loader = match config.arch {
        Arch::Aarch64 => Loader::LinuxAarch64 {
            guarded: config.variant.guarded(),
            eh_frame: (!eh_frame.is_empty()).then_some(&eh_frame[..]),
        },
        Arch::X86_64Windows => Loader::WindowsX64 {
            function_table: table.as_ref(),
        },
        Arch::X86_64 => unreachable!("x86_64 Linux JIT code runs in a child process"),
    };
    // The loader registers the merger's unwind information, and the harness steps through
    // entries as an executable's does ([`super::c_harness`]): the same harness for every
    // build, stepping nothing (-1) where there is none to register (Cranelift's own
    // reference build, `NoUnwindInfo`), so that entries that read their frame see the
    // same stack in each.
    let limit = if registers { STEP_LIMIT } else { -1 };
    let stepping = Some((config.arch, limit, super::first_stepped(config, program)));
    let stepper: Vec<std::ffi::OsString> = match config.arch {
        Arch::X86_64Windows => vec![windows_stepper()?.into()],
        Arch::Aarch64 => breakpoint_stepper(config),
        Arch::X86_64 => unreachable!("x86_64 Linux JIT code runs in a child process"),
    };
    let entries = Entries::Image {
        path: &image,
        base,
        len,
        addresses: &addresses,
        loader,
    };
    let harness = dir.join("harness.c");
    std::fs::write(&harness, c_harness(program, &entries, stepping)).map_err(|e| e.to_string())?;
    let exe = dir.join(match config.arch {
        Arch::X86_64Windows => "run.exe",
        Arch::X86_64 | Arch::Aarch64 => "run",
    });
    command(
        Command::new(config.arch.cc())
            .args(["-O1", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(&harness)
            .args(&stepper)
            .arg("-lm"),
    )?;
    let stdout = match config.arch {
        Arch::X86_64Windows => {
            let (cmd, out) = wine::run(&exe, || timed("wine")).map_err(|e| format!("wine: {e}"))?;
            outcome(&cmd, out)?
        }
        // Stopped at breakpoints: a first run finds the instructions to stop at.
        Arch::Aarch64 if limit >= 0 => run_with_breakpoints(&exe)?,
        Arch::X86_64 | Arch::Aarch64 => command(
            timed("qemu-aarch64")
                .args(["-L", "/usr/aarch64-linux-gnu"])
                .arg(&exe),
        )?,
    };
    parse_results(&stdout)
}

/// The functions the loader can stand in for imports: the name cranelift-jit looks up,
/// and the C expression of its address in the loader.
pub const LOADER_IMPORTS: [(&str, &str); 10] = [
    ("ceilf", "&ceilf"),
    ("floor", "&floor"),
    ("ceil", "&ceil"),
    ("floorf", "&floorf"),
    ("truncf", "&truncf"),
    ("trunc", "&trunc"),
    ("memcpy", "&memcpy"),
    ("memset", "&memset"),
    ("memmove", "&memmove"),
    ("memcmp", "&memcmp"),
];

/// The address of import `name`'s stub in a region at `base`, if the loader has it.
pub fn stub_address(base: usize, name: &str) -> Option<usize> {
    jit_region::stub_address(base, &LOADER_IMPORTS, name)
}

/// The loader's part of the C harness: map `image` (written from a region at `base`,
/// `len` bytes) at `base`, fill the import stubs, make it executable as `loader` says.
pub fn loader_c(image: &Path, base: usize, len: usize, loader: &Loader<'_>) -> String {
    jit_region::loader_c(image, base, len, &LOADER_IMPORTS, loader)
}
