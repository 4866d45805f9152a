//! Emission: the merged module compiled and written as an object file.
//!
//! - [`compile`]: compile the bodies a plan keeps, with names of our own;
//! - [`fold`]: machine-code folding: bodies with the same bytes and relocations;
//! - [`define`]: declare and define a plan in any `cranelift_module::Module`;
//! - [`object`]: an object file (aliases pointed after `finish()`);
//! - [`jit`]: a `JITModule`, every name callable;
//! - [`clif`]: the merged module as CLIF text (`--emit-clif`);
//! - [`clif_text`]: a function as CLIF text the reader parses back to the same function;
//! - [`reloc`]: which relocations are calls, per ISA;
//! - [`sink`]: where the pipeline's code goes (object, JIT, the plugin's module);
//! - [`stencil`]: bodies that compile alike (equal stencils) compiled once;
//! - [`sizes`]: the bytes each function takes in `.text`, as defined (for reports);
//! - [`thunk`]: thunks per ISA (a single jump) and per calling convention (CLIF);
//! - [`unwind`]: unwind information of every defined body (`.eh_frame`, `.pdata`, JIT
//!   frame registration), so exceptions and panics cross merged code;
//! - [`epilogues`]: Cranelift's epilogues found in its code (x86_64 and aarch64),
//!   described in `.eh_frame` and rewritten for Windows' unwinder, so that unwinding works
//!   at every instruction.

pub mod clif;
pub mod clif_text;
pub mod compile;
pub mod define;
pub mod epilogues;
pub mod fold;
pub mod jit;
pub mod object;
pub mod reloc;
pub mod sink;
pub mod sizes;
pub mod stencil;
pub mod thunk;
pub mod unwind;

pub use object::{build_isa, text_bytes, EmitError, EmitOptions, EmitSummary};

/// Write `bytes` to `path` through a temporary file in the same directory and a rename, so
/// that an error never leaves a partial or stale file at `path`.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
