//! Cranelift's epilogues, found in its machine code, so that unwinding is right at every
//! instruction of the functions clif-merge defines, not only at their calls.
//!
//! A C++ exception or a Rust panic unwinds from call sites only, where Cranelift's call
//! frame information is right. A profiler's sampler, a signal handler or a debugger stops
//! a thread at any instruction, and Cranelift's CFI describes the prologue only: its rules
//! (the CFA from the frame pointer, registers saved in the frame) hold to the function's
//! end, so in an epilogue, once the frame pointer is the caller's again or a saved
//! register's slot is freed, an unwinder that reads only `.eh_frame` loses the stack.
//! Unmerged Cranelift code has the same gap; clif-merge's has not:
//!
//! - [`x86_64`]: each epilogue gets GCC's rules in its FDE, and on Windows (whose
//!   unwinder does not know Cranelift's epilogue by its code) it is rewritten, in the same
//!   bytes, into a form Windows' unwinder runs forward; a tail call's, which ends in a jump
//!   no unwinder knows, gets `RUNTIME_FUNCTION`s of its own
//!   ([`super::unwind::windows_x64`]).
//! - [`aarch64`]: each epilogue gets GCC's rules in its FDE, the state of a signed return
//!   address included.
//!
//! Both decode only what is surely an instruction: from the function's start, from each
//! block start and from each direct branch's target, each run up to its first instruction
//! that does not fall through or the next of those starts. The data Cranelift puts among
//! code (jump tables, constant pools, aarch64's literals) always follows an instruction
//! that does not fall through, so bytes that merely look like an epilogue are never read
//! as one. Cranelift reports block starts only with `machine_code_cfg_info`, so the bodies
//! are compiled by a twin of the ISA with that setting on ([`compiling_isa`]); it changes
//! no byte of the code.

pub mod aarch64;
pub mod x86_64;

use cranelift_codegen::isa::{OwnedTargetIsa, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use target_lexicon::{Architecture, OperatingSystem};

use super::unwind::windows_x64::TailCall;

/// Rules an FDE adds to Cranelift's for a function's epilogues, by offset into its code,
/// in order.
pub type Rules = Vec<(u32, gimli::write::CallFrameInstruction)>;

/// Whether `isa` compiles for an architecture whose epilogues are found: x86_64, and
/// little-endian aarch64 (Cranelift's only aarch64).
pub fn applies_to(isa: &dyn TargetIsa) -> bool {
    match isa.triple().architecture {
        Architecture::X86_64 => true,
        Architecture::Aarch64(_) => isa.endianness() == cranelift_codegen::ir::Endianness::Little,
        _ => false,
    }
}

/// The ISA to compile `isa`'s code with so that its epilogues can be found: `None` when
/// `isa` itself does (no epilogues to find, no unwind information, or
/// `machine_code_cfg_info` already on), otherwise the same ISA with
/// `machine_code_cfg_info` on, which records where blocks start and changes no byte of the
/// code.
pub fn compiling_isa(isa: &dyn TargetIsa) -> Result<Option<OwnedTargetIsa>, String> {
    if !applies_to(isa) || !isa.flags().unwind_info() || isa.flags().machine_code_cfg_info() {
        return Ok(None);
    }
    let mut shared = settings::builder();
    for value in isa.flags().iter() {
        shared
            .set(value.name, &value.value_string())
            .map_err(|e| format!("copying the setting {}: {e}", value.name))?;
    }
    shared
        .enable("machine_code_cfg_info")
        .map_err(|e| format!("machine_code_cfg_info: {e}"))?;
    let mut builder = cranelift_codegen::isa::lookup(isa.triple().clone())
        .map_err(|e| format!("the target {}: {e}", isa.triple()))?;
    for value in isa.isa_flags() {
        builder
            .set(value.name, &value.value_string())
            .map_err(|e| format!("copying the setting {}: {e}", value.name))?;
    }
    builder
        .finish(settings::Flags::new(shared))
        .map(Some)
        .map_err(|e| format!("the target {}: {e}", isa.triple()))
}

/// What a function's unwind information needs of its epilogues.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Epilogues {
    /// The rules its FDE adds for them (System V targets).
    pub rules: Rules,
    /// Its tail calls' epilogues, which its `RUNTIME_FUNCTION`s go around (Windows x64).
    pub tail_calls: Vec<TailCall>,
}

/// The epilogues of `code`, one function's machine code that `isa` compiled (its blocks
/// starting at `block_starts`): rewritten in place where Windows needs it, and what its
/// unwind information needs of them. None without unwind information.
pub fn for_unwinding(isa: &dyn TargetIsa, code: &mut [u8], block_starts: &[u32]) -> Epilogues {
    if !applies_to(isa) || !isa.flags().unwind_info() {
        return Epilogues::default();
    }
    match isa.triple().architecture {
        Architecture::X86_64 => {
            let epilogues = x86_64::epilogues(code, block_starts);
            if isa.triple().operating_system == OperatingSystem::Windows {
                x86_64::rewrite_for_windows(code, &epilogues);
                return Epilogues {
                    rules: Rules::new(),
                    tail_calls: x86_64::tail_calls(&epilogues),
                };
            }
            Epilogues {
                rules: x86_64::cfi(&epilogues, code.len() as u32),
                tail_calls: Vec::new(),
            }
        }
        _ => Epilogues {
            rules: aarch64::cfi(code, block_starts),
            tail_calls: Vec::new(),
        },
    }
}
