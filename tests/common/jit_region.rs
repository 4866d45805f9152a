//! A fixed-address memory region for cranelift-jit, so that code JIT-compiled for another
//! architecture can run elsewhere: the JIT module allocates from one mapping of this
//! process at an address chosen to be free in a qemu guest and a Wine process too, the finalized mapping is
//! written out as an image, and a C or C++ loader maps it at the same address (every
//! address cranelift-jit resolved stays right): under qemu for aarch64 Linux, under Wine
//! for x86_64 Windows ([`Loader`]). Imports resolve to stubs in the region's first page
//! (`ldr x16, #8; br x16; .quad address` on aarch64, `jmp [rip]; .quad address` on x86_64)
//! that the loader fills with its own functions' addresses. Shared by the differential
//! tests (`jit_image`) and `tests/unwind.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cranelift_jit::{BranchProtection, JITMemoryKind, JITMemoryProvider};
use cranelift_module::ModuleResult;

/// Where regions go: this far apart from `FIRST_BASE`, one per build, in an address range
/// that neither this process nor qemu's guest uses otherwise.
const FIRST_BASE: usize = 0x2000_0000_0000;
const REGION_BYTES: usize = 64 << 20;
/// The first page holds the import stubs, 16 bytes each: the code allocated follows it.
pub const STUB_PAGE: usize = 4096;
const STUB_BYTES: usize = 16;

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

/// The address of import `name`'s stub in a region at `base`, where the loader fills one
/// stub per entry of `imports` (the name cranelift-jit looks up, and the C expression of
/// its address in the loader), in order.
pub fn stub_address(base: usize, imports: &[(&str, &str)], name: &str) -> Option<usize> {
    let i = imports.iter().position(|(n, _)| *n == name)?;
    Some(base + i * STUB_BYTES)
}

/// How the loader runs the image: where, and what it does besides mapping it.
pub enum Loader<'a> {
    /// aarch64 Linux, under qemu. With `guarded`, everything after the stubs' page (the
    /// code cranelift-jit wrote for aarch64 with `use_bti`) is mapped guarded
    /// (`PROT_BTI`): an indirect branch into it that lands anywhere but a landing pad is an
    /// illegal instruction. `eh_frame` (the plugin's `Merged::jit_eh_frame`), if any, is
    /// registered with the loader's libgcc (`__register_frame`), as a JIT registers its
    /// code's frames.
    LinuxAarch64 {
        guarded: bool,
        eh_frame: Option<&'a [u8]>,
    },
    /// x86_64 Linux, natively (`tests/unwind.rs`; the differential tests run x86_64 Linux
    /// JIT code in their own process), its `eh_frame` registered as aarch64's is.
    #[allow(dead_code)]
    LinuxX86_64 { eh_frame: Option<&'a [u8]> },
    /// x86_64 Windows, under Wine: the image's function table (the plugin's
    /// `Merged::jit_function_table`), if any, is registered with `RtlAddFunctionTable`,
    /// as a Windows JIT registers its code's.
    WindowsX64 {
        function_table: Option<&'a clif_merge::emit::unwind::windows_jit::WindowsFunctionTable>,
    },
}

/// What the Windows loader calls, declared as `<windows.h>` declares it (which takes the
/// compiler most of a second to read, more than the rest of a harness).
const WINDOWS_DECLARATIONS: &str = "\
#ifdef __cplusplus
extern \"C\" {
#endif
#define MEM_COMMIT 0x1000
#define MEM_RESERVE 0x2000
#define PAGE_READWRITE 0x04
#define PAGE_EXECUTE_READWRITE 0x40
__declspec(dllimport) void *VirtualAlloc(void *, size_t, unsigned long, unsigned long);
__declspec(dllimport) int VirtualProtect(void *, size_t, unsigned long, unsigned long *);
__declspec(dllimport) unsigned long GetLastError(void);
__declspec(dllimport) void *GetCurrentProcess(void);
__declspec(dllimport) int FlushInstructionCache(void *, const void *, size_t);
/* RUNTIME_FUNCTION */
struct runtime_function { uint32_t begin, end, unwind_info; };
__declspec(dllimport) unsigned char RtlAddFunctionTable(struct runtime_function *, unsigned long, unsigned long long);
#ifdef __cplusplus
}
#endif
";

/// The loader's part of a C or C++ harness (`load_image()`): map `image` (written from a
/// region at `base`, `len` bytes) at `base`, fill a stub per entry of `imports` (see
/// [`stub_address`]), make it executable, as `loader` says. Valid C and C++; the harness
/// includes `<stdint.h>` and `<stdio.h>` before it.
pub fn loader_c(
    image: &std::path::Path,
    base: usize,
    len: usize,
    imports: &[(&str, &str)],
    loader: &Loader<'_>,
) -> String {
    let mut s = String::from("#include <math.h>\n#include <string.h>\n#include <stdlib.h>\n");
    s.push_str(match loader {
        Loader::LinuxAarch64 { .. } | Loader::LinuxX86_64 { .. } => "#include <sys/mman.h>\n",
        Loader::WindowsX64 { .. } => WINDOWS_DECLARATIONS,
    });
    let eh_frame = match loader {
        Loader::LinuxAarch64 { eh_frame, .. } | Loader::LinuxX86_64 { eh_frame } => *eh_frame,
        Loader::WindowsX64 { .. } => None,
    };
    if let Some(eh_frame) = eh_frame {
        // `__register_frame` takes the section's first word, 8-byte aligned.
        s.push_str(
            "#ifdef __cplusplus\nextern \"C\"\n#endif\nvoid __register_frame(void *);\n\
             static uint64_t EH_FRAME[] = {\n",
        );
        for word in eh_frame.chunks(8) {
            let mut bytes = [0u8; 8];
            bytes[..word.len()].copy_from_slice(word);
            s.push_str(&format!("  0x{:x}ull,\n", u64::from_le_bytes(bytes)));
        }
        s.push_str("};\n");
    }
    if let Loader::WindowsX64 {
        function_table: Some(table),
    } = loader
    {
        s.push_str("static struct runtime_function FUNCTION_TABLE[] = {\n");
        for f in &table.functions {
            s.push_str(&format!(
                "  {{0x{:x}, 0x{:x}, 0x{:x}}},\n",
                f.begin, f.end, f.unwind_info
            ));
        }
        s.push_str("};\n");
    }
    s.push_str("static void load_image(void) {\n");
    s.push_str(&format!(
        "  void *want = (void *)0x{base:x}ull;\n  size_t len = {len}u;\n  size_t mapped = (len + 65535) & ~(size_t)65535;\n"
    ));
    s.push_str(match loader {
        Loader::LinuxAarch64 { .. } | Loader::LinuxX86_64 { .. } => {
            "  void *p = mmap(want, mapped, PROT_READ | PROT_WRITE, \
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);\n\
             \x20 if (p != want) { perror(\"mmap of the JIT image\"); exit(3); }\n"
        }
        Loader::WindowsX64 { .. } => {
            "  void *p = VirtualAlloc(want, mapped, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);\n\
             \x20 if (p != want) { fprintf(stderr, \"VirtualAlloc of the JIT image at %p: error %lu\\n\", want, (unsigned long)GetLastError()); exit(3); }\n"
        }
    });
    s.push_str(&format!(
        "  FILE *f = fopen(\"{}\", \"rb\");\n  if (!f || fread(p, 1, len, f) != len) {{ perror(\"the JIT image\"); exit(3); }}\n  fclose(f);\n",
        image.display().to_string().replace('\\', "\\\\")
    ));
    for (i, (_, address)) in imports.iter().enumerate() {
        let at = i * STUB_BYTES;
        s.push_str(&format!(
            "  {{ unsigned char *stub = (unsigned char *)p + {at}; uint64_t to = (uint64_t)(uintptr_t){address};\n"
        ));
        s.push_str(match loader {
            // ldr x16, #8; br x16; .quad to
            Loader::LinuxAarch64 { .. } => {
                "    static const uint32_t code[2] = {0x58000050u, 0xd61f0200u}; memcpy(stub, code, 8); memcpy(stub + 8, &to, 8); }\n"
            }
            // jmp [rip + 0]; .quad to
            Loader::WindowsX64 { .. } | Loader::LinuxX86_64 { .. } => {
                "    static const unsigned char code[6] = {0xff, 0x25, 0, 0, 0, 0}; memcpy(stub, code, 6); memcpy(stub + 6, &to, 8); }\n"
            }
        });
    }
    match loader {
        Loader::LinuxAarch64 { .. } | Loader::LinuxX86_64 { .. } => {
            s.push_str(
                "  if (mprotect(p, mapped, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) { perror(\"mprotect\"); exit(3); }\n",
            );
            if let Loader::LinuxAarch64 { guarded: true, .. } = loader {
                s.push_str(&format!(
                    "  if (mprotect((char *)p + {STUB_PAGE}, mapped - {STUB_PAGE}, PROT_READ | PROT_WRITE | PROT_EXEC | PROT_BTI) != 0) {{ perror(\"mprotect with PROT_BTI\"); exit(3); }}\n"
                ));
            }
            s.push_str("  __builtin___clear_cache((char *)p, (char *)p + len);\n");
            if eh_frame.is_some() {
                s.push_str("  __register_frame(EH_FRAME);\n");
            }
            s.push_str("}\n");
        }
        Loader::WindowsX64 { function_table } => {
            s.push_str(
                "  unsigned long old;\n  if (!VirtualProtect(p, mapped, PAGE_EXECUTE_READWRITE, &old)) { fprintf(stderr, \"VirtualProtect: error %lu\\n\", (unsigned long)GetLastError()); exit(3); }\n",
            );
            if let Some(table) = function_table {
                s.push_str(&format!(
                    "  if (!RtlAddFunctionTable(FUNCTION_TABLE, {}, 0x{:x}ull)) {{ fprintf(stderr, \"RtlAddFunctionTable failed\\n\"); exit(3); }}\n",
                    table.functions.len(),
                    table.base
                ));
            }
            s.push_str("  FlushInstructionCache(GetCurrentProcess(), p, len);\n}\n");
        }
    }
    s
}
