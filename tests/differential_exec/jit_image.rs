//! cranelift-jit for aarch64 on a host that is not: the plugin defines the program in a
//! `JITModule` built for aarch64, whose memory ([`Region`]) is one mapping at a fixed
//! address of this process; once finalized (every relocation applied by cranelift-jit
//! itself, veneers included) the mapping is written out as an image, and a C loader run
//! under `qemu-aarch64` maps it at the same address and calls the entries as the object
//! configurations' harness does ([`super::c_harness`]).
//!
//! The code is cranelift-jit's, byte for byte: only the memory it lands in and the
//! addresses of imported functions are the loader's. Imports resolve to stubs in the
//! region's first page (`ldr x16, #8; br x16; .quad address`) that the loader fills with
//! its own libc's functions, so an import the loader does not know is an error here, not
//! a crash there.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use clif_merge::TargetInfo;
use cranelift_jit::{BranchProtection, JITMemoryKind, JITMemoryProvider};
use cranelift_module::ModuleResult;

use super::{c_harness, command, parse_results, Config, Entries, Program, Results};

/// Build `program` as `config` (an aarch64 JIT configuration) into an image, and run it
/// under qemu with the C harness; `dir` is a scratch directory of its own.
pub fn run(program: &Program, config: Config, dir: &Path) -> Result<Results, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let target = TargetInfo::from_triple_str(config.arch.triple()).map_err(|e| e.to_string())?;
    let region = Region::new()?;
    let base = region.base();
    let unknown: Arc<Mutex<Vec<String>>> = Arc::default();
    let missing = unknown.clone();
    let (module, address) = super::jit::build_for(program, config, &target, |builder| {
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
    let entries = Entries::Image {
        path: &image,
        base,
        len,
        addresses: &addresses,
    };
    let harness = dir.join("harness.c");
    std::fs::write(&harness, c_harness(program, &entries)).map_err(|e| e.to_string())?;
    let exe = dir.join("run");
    command(
        Command::new(config.arch.cc())
            .args(["-O1", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(&harness)
            .arg("-lm"),
    )?;
    let stdout = command(
        super::timed("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(&exe),
    )?;
    parse_results(&stdout)
}

/// Where regions go: this far apart from `FIRST_BASE`, one per build, in an address range
/// that neither this process nor qemu's guest uses otherwise.
const FIRST_BASE: usize = 0x2000_0000_0000;
const REGION_BYTES: usize = 64 << 20;
/// The first page holds the import stubs, 16 bytes each.
const STUB_PAGE: usize = 4096;
const STUB_BYTES: usize = 16;

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
    let i = LOADER_IMPORTS.iter().position(|(n, _)| *n == name)?;
    Some(base + i * STUB_BYTES)
}

/// One mapping at a fixed address that cranelift-jit allocates from (code, read-only and
/// writable data alike), never made executable here: the code runs in the loader.
pub struct Region {
    base: *mut u8,
    /// The end of what was allocated, shared with the provider.
    used: Arc<AtomicUsize>,
}

// The region is only touched by the thread that builds into it.
unsafe impl Send for Region {}

static NEXT_REGION: AtomicUsize = AtomicUsize::new(0);

impl Region {
    /// A fresh region at an address nothing else in this process (or in another test
    /// process) has mapped.
    pub fn new() -> Result<Region, String> {
        for _ in 0..4096 {
            let k = NEXT_REGION.fetch_add(1, Ordering::Relaxed);
            let want = FIRST_BASE + k * REGION_BYTES;
            // SAFETY: a new anonymous mapping; MAP_FIXED_NOREPLACE never replaces one.
            let got = unsafe {
                libc::mmap(
                    want as *mut libc::c_void,
                    REGION_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE
                        | libc::MAP_ANONYMOUS
                        | libc::MAP_NORESERVE
                        | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if got as usize == want {
                return Ok(Region {
                    base: got as *mut u8,
                    used: Arc::new(AtomicUsize::new(STUB_PAGE)),
                });
            }
            if got != libc::MAP_FAILED {
                // An old kernel took the address as a hint only.
                unsafe { libc::munmap(got, REGION_BYTES) };
            }
        }
        Err("no free address for a JIT image region".into())
    }

    pub fn base(&self) -> usize {
        self.base as usize
    }

    /// A provider for cranelift-jit that allocates from this region (which stays this
    /// value's to read and unmap: the provider shares its pointer).
    pub fn provider(&self) -> Box<dyn JITMemoryProvider + Send> {
        Box::new(Provider {
            base: self.base,
            used: self.used.clone(),
        })
    }

    /// The bytes from the region's start to the end of the last allocation.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The region's bytes up to `len` (everything cranelift-jit allocated lies below the
    /// highest address it returned).
    pub fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: the mapping is REGION_BYTES long and readable.
        unsafe { std::slice::from_raw_parts(self.base, len.min(REGION_BYTES)) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the module that allocated from it is gone.
        unsafe { libc::munmap(self.base as *mut libc::c_void, REGION_BYTES) };
    }
}

struct Provider {
    base: *mut u8,
    used: Arc<AtomicUsize>,
}

unsafe impl Send for Provider {}

impl JITMemoryProvider for Provider {
    fn allocate(
        &mut self,
        size: usize,
        align: u64,
        _kind: JITMemoryKind,
    ) -> std::io::Result<*mut u8> {
        let align = (align as usize).max(16);
        let at = self.used.load(Ordering::Relaxed).div_ceil(align) * align;
        if at + size > REGION_BYTES {
            return Err(std::io::Error::other("the JIT image region is full"));
        }
        self.used.store(at + size, Ordering::Relaxed);
        // SAFETY: inside the mapping.
        Ok(unsafe { self.base.add(at) })
    }

    unsafe fn free_memory(&mut self) {}

    fn finalize(&mut self, _: BranchProtection) -> ModuleResult<()> {
        // Never executed here: the loader maps it executable.
        Ok(())
    }
}

/// The loader's part of the C harness: map `image` (written from a region at `base`,
/// `len` bytes) at `base`, fill the import stubs, make it executable.
pub fn loader_c(image: &Path, base: usize, len: usize) -> String {
    let mut s = String::from(
        "#include <math.h>\n#include <string.h>\n#include <stdlib.h>\n#include <sys/mman.h>\n",
    );
    s.push_str("static void load_image(void) {\n");
    s.push_str(&format!(
        "  void *want = (void *)0x{base:x}ull;\n  size_t len = {len}u;\n  size_t mapped = (len + 65535) & ~(size_t)65535;\n"
    ));
    s.push_str(
        "  void *p = mmap(want, mapped, PROT_READ | PROT_WRITE, \
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);\n\
         \x20 if (p != want) { perror(\"mmap of the JIT image\"); exit(3); }\n",
    );
    s.push_str(&format!(
        "  FILE *f = fopen(\"{}\", \"rb\");\n  if (!f || fread(p, 1, len, f) != len) {{ perror(\"the JIT image\"); exit(3); }}\n  fclose(f);\n",
        image.display()
    ));
    s.push_str("  uint32_t *stub;\n");
    for (i, (_, address)) in LOADER_IMPORTS.iter().enumerate() {
        s.push_str(&format!(
            "  stub = (uint32_t *)((char *)p + {});\n  stub[0] = 0x58000050u; /* ldr x16, #8 */\n  stub[1] = 0xd61f0200u; /* br x16 */\n  memcpy(&stub[2], &(uint64_t){{(uint64_t)(uintptr_t){address}}}, 8);\n",
            i * STUB_BYTES
        ));
    }
    s.push_str(
        "  if (mprotect(p, mapped, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) { perror(\"mprotect\"); exit(3); }\n\
         \x20 __builtin___clear_cache((char *)p, (char *)p + len);\n}\n",
    );
    s
}
