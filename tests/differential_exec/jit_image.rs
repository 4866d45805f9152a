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
//! The Windows loader registers the function table of the merger's unwind information
//! (`Merged::jit_function_table`) with `RtlAddFunctionTable`, and the harness steps through
//! one entry's first call in eight with the trap flag, unwinding at every instruction with
//! Windows' own unwinder, as an executable's harness does.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use clif_merge::TargetInfo;

use super::jit_region::{self, Loader, Region};
use super::{
    c_harness, command, outcome, parse_results, timed, windows_stepper, wine, Arch, Config,
    Entries, Program, Results, STEP_LIMIT,
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
    let (module, address, table) = super::jit::build_for(program, config, &target, |builder| {
        builder.memory_provider(region.provider());
        builder.symbol_lookup_fn(Box::new(move |name| {
            Some(stub_address(base, name).unwrap_or_else(|| {
                missing.lock().unwrap().push(name.to_string());
                base
            }) as *const u8)
        }));
    })?;
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
        },
        Arch::X86_64Windows => Loader::WindowsX64 {
            function_table: table.as_ref(),
        },
        Arch::X86_64 => unreachable!("x86_64 Linux JIT code runs in a child process"),
    };
    // Windows builds register the merger's function table, and their harness steps
    // through entries as an executable's does ([`super::c_harness`]): the same harness
    // for every build, stepping nothing (-1) where there is no table (Cranelift's own
    // reference build, `NoUnwindInfo`), so that entries that read their frame see the
    // same stack in each.
    let stepping = match config.arch {
        Arch::X86_64Windows => Some((config.arch, if table.is_some() { STEP_LIMIT } else { -1 })),
        Arch::Aarch64 | Arch::X86_64 => None,
    };
    let stepper = match stepping {
        Some(_) => Some(windows_stepper()?),
        None => None,
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
