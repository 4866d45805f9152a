//! The compilation target, as far as merging cares: pointer width, object format, ISA.
//!
//! Cranelift IR has no pointer type: an address is an integer of the target's pointer
//! width. LLVM's comparator coerces a pointer to that integer type before it compares two
//! types; the equivalent here is that every entity whose type is *implicitly* an address
//! (the `vmctx`, `symbol` and `dyn_scale_target_const` global values, and through them the
//! `stack_limit`) is encoded by the comparator as `TargetInfo::pointer_type()`. Explicit
//! types (`load.i64`, `func_addr.i64`, `stack_addr.i32`, block parameters, `AbiParam`s)
//! are already integers and are compared as written. Two functions are therefore only ever
//! compared under one `TargetInfo`, and a 32-bit target (`i686`, `armv7`, `riscv32`) sees
//! its global values as `i32`.

use std::str::FromStr;

use cranelift_codegen::ir::{types, Type};
use cranelift_codegen::isa::TargetIsa;
use target_lexicon::{Architecture, BinaryFormat, Triple};

use crate::Error;

/// What the pass needs to know about the target it merges for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    triple: Triple,
    pointer_type: Type,
}

/// The object file format of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectFormat {
    /// ELF (Linux, BSDs).
    Elf,
    /// Mach-O (macOS, iOS).
    MachO,
    /// COFF (Windows).
    Coff,
    /// Anything else (wasm, XCOFF, unknown): no object file can be written.
    Other,
}

impl TargetInfo {
    /// The target described by `triple`.
    ///
    /// Fails when the triple has no known pointer width.
    pub fn new(triple: Triple) -> Result<Self, Error> {
        let width = triple
            .pointer_width()
            .map_err(|()| Error::UnknownTarget(format!("{triple}: unknown pointer width")))?;
        let pointer_type = Type::int(width.bits().into()).unwrap_or(types::I64);
        Ok(Self {
            triple,
            pointer_type,
        })
    }

    /// Parse a target triple such as `x86_64-unknown-linux-gnu` or `aarch64-apple-darwin`.
    pub fn from_triple_str(triple: &str) -> Result<Self, Error> {
        let parsed =
            Triple::from_str(triple).map_err(|e| Error::UnknownTarget(format!("{triple}: {e}")))?;
        Self::new(parsed)
    }

    /// The machine this program runs on.
    pub fn host() -> Self {
        Self::new(Triple::host()).expect("the host has a pointer width")
    }

    /// The target triple.
    pub fn triple(&self) -> &Triple {
        &self.triple
    }

    /// The integer type an address has on this target (`i64` or `i32`).
    pub fn pointer_type(&self) -> Type {
        self.pointer_type
    }

    /// The object format that cranelift-object writes for this target.
    pub fn object_format(&self) -> ObjectFormat {
        match self.triple.binary_format {
            BinaryFormat::Elf => ObjectFormat::Elf,
            BinaryFormat::Macho => ObjectFormat::MachO,
            BinaryFormat::Coff => ObjectFormat::Coff,
            _ => ObjectFormat::Other,
        }
    }

    /// Whether a second symbol may name the same code (an alias).
    ///
    /// ELF and COFF symbols may share an address. Mach-O links with
    /// `.subsections_via_symbols`, where every global symbol starts an atom the linker
    /// may move or drop on its own, so an alias there is not reliable: thunks are used.
    pub fn supports_aliases(&self) -> bool {
        matches!(self.object_format(), ObjectFormat::Elf | ObjectFormat::Coff)
    }

    /// The size in bytes of a single-jump thunk on this target, when one can be written.
    pub fn jump_thunk_size(&self) -> Option<u32> {
        match self.triple.architecture {
            Architecture::X86_64 => Some(5),
            Architecture::Aarch64(_) => Some(4),
            _ => None,
        }
    }
}

/// Whether the ISA setting `name` (an `isa_flags` entry, such as aarch64's
/// `sign_return_address`) is on in `isa`.
pub fn isa_flag(isa: &dyn TargetIsa, name: &str) -> bool {
    isa.isa_flags()
        .iter()
        .any(|v| v.name == name && v.as_bool() == Some(true))
}

/// Whether a CLIF thunk of a `tail` function can tail-call its body (`return_call`) on
/// `architecture`, frame pointers kept or not (`preserve_frame_pointers`). Cranelift
/// 0.135's x86_64 backend compiles `return_call` only with frame pointers (so does every
/// x86_64 module that makes tail calls); aarch64's compiles it either way. A thunk that
/// cannot tail-call calls and returns, and so adds a frame to every tail call made through
/// it.
pub fn thunks_tail_call(architecture: Architecture, preserve_frame_pointers: bool) -> bool {
    preserve_frame_pointers || matches!(architecture, Architecture::Aarch64(_))
}

/// [`thunks_tail_call`] for the code `isa` compiles.
pub fn isa_thunks_tail_call(isa: &dyn TargetIsa) -> bool {
    thunks_tail_call(
        isa.triple().architecture,
        isa.flags().preserve_frame_pointers(),
    )
}
