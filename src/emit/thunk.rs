//! Thunks: a folded name that must keep a distinct address, jumping to the shared body.
//!
//! The members of a group are equal, so their signatures are identical (the comparator
//! compares calling convention, every parameter and every return): a thunk never has to
//! convert arguments. On x86_64 and aarch64 it is therefore a single tail jump with one
//! relocation, written as bytes (`jmp rel32`, `E9` + R_X86_64_PLT32; `b imm26`,
//! `0x14000000` + R_AARCH64_CALL26, after a `bti c` landing pad when branch protection is
//! on, as Cranelift starts its own functions). Elsewhere, or when asked, the thunk is CLIF compiled
//! like any function: `return_call` for the `tail` convention (the verifier allows it only
//! there), a call followed by a return of its results otherwise.
//!
//! Merge-similar's thunks add arguments (constants, function addresses) before jumping.
//! Such a CLIF thunk (marked as merge-similar's,
//! [`crate::merge::ModuleFunction::similar_thunk`], and of the shape [`shape`] finds) is
//! written directly ([`register_thunk`]), with no frame, by the encoder of its ISA:
//! - x86_64 (System V and `tail`): a `mov` per added argument into its register, then the
//!   same `jmp`;
//! - aarch64 (AAPCS64 and `tail`, whose integers start at x2): `movz`/`movn`/`movk` per
//!   constant, a function address as Cranelift loads it (GOT with PIC, `adrp` + `add` or
//!   a literal without), then `b`.
//!
//! An added argument past the registers is stored to its stack slot. Where the body's
//! stack arguments take more room than the thunk's own, the `tail` convention (whose
//! callee pops its stack arguments) lets the thunk grow the area below its own before
//! the jump, as Cranelift grows it for a `return_call` ([`layout`]); such a thunk moves
//! its stack pointer, so it has an FDE ([`RegisterThunk::frame`]), or on Windows x64, whose
//! `.pdata` cannot describe it, grows by pushes that keep the return address at the top of
//! the stack ([`x86_64::Growth::ByPushes`]). System V's caller pops
//! what it pushed: there the added arguments must fit in registers or the area's padding.
//!
//! A thunk without a frame is what lets merge-similar put a body that reads its return
//! address or frame pointer behind it (the frame rule of [`crate::merge::similar`]), and it
//! costs a few cycles where one with a frame costs a call's worth (bench/README.md §7).
//! It is only for merge-similar's thunks: the user's own function of the same shape is
//! Cranelift's code, a call and a return, because its callee may read the return address
//! or frame it was called with, and a jump would show it the caller's instead.

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir::{self, InstBuilder};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig, TargetIsa};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, ModuleReloc, ModuleRelocTarget};
use target_lexicon::{Architecture, OperatingSystem};

use crate::merge::{FuncIndex, Module};
use crate::names::{external_name, user_func_name, FuncName};

pub mod aarch64;
pub mod layout;
pub mod shape;
pub mod x86_64;

/// A single-jump thunk as bytes and its relocation.
pub struct JumpThunk {
    /// The machine code.
    pub bytes: Vec<u8>,
    /// Its alignment.
    pub alignment: u64,
    /// The one relocation, naming the target.
    pub reloc: ModuleReloc,
}

/// `bti c`: the landing pad Cranelift puts at the entry of every function when branch
/// protection is on (`use_bti`), where an indirect call (`blr`) may arrive.
pub const BTI_C: u32 = 0xD503_245F;

/// The single-jump thunk to `target` for `arch`, if the architecture has one. With
/// `branch_protection` (aarch64's `use_bti`) the thunk starts with `bti c`, as Cranelift's
/// own functions do: a caller may reach it through a function pointer.
pub fn jump_thunk(
    arch: Architecture,
    target: FuncId,
    branch_protection: bool,
) -> Option<JumpThunk> {
    let name = ModuleRelocTarget::user(0, target.as_u32());
    match arch {
        Architecture::X86_64 => Some(JumpThunk {
            bytes: vec![0xE9, 0, 0, 0, 0],
            alignment: 1,
            reloc: ModuleReloc {
                offset: 1,
                kind: Reloc::X86CallPCRel4,
                name,
                addend: -4,
            },
        }),
        Architecture::Aarch64(_) => {
            let pad: &[u32] = if branch_protection { &[BTI_C] } else { &[] };
            let words = pad.iter().chain(&[0x1400_0000u32]);
            Some(JumpThunk {
                bytes: words.flat_map(|w| w.to_le_bytes()).collect(),
                alignment: 4,
                reloc: ModuleReloc {
                    offset: 4 * pad.len() as u32,
                    kind: Reloc::Arm64Call,
                    name,
                    addend: 0,
                },
            })
        }
        _ => None,
    }
}

/// Whether calling `f` runs code that reads its return address, frame pointer or stack
/// pointer in the frame `f` was called in: `f` reads them itself, or `f` is merge-similar's
/// thunk ([`crate::merge::ModuleFunction::similar_thunk`]) into a function that does.
/// Merge-similar puts a body that reads its frame behind no thunk but a frameless jump (the
/// frame rule of [`crate::merge::similar`]), so the body sees the frame of whoever called
/// the thunk. A folded name whose group runs such code must not be a thunk that adds a
/// frame of its own: it is a jump, or a copy. Any other function of a thunk's shape is
/// compiled with its call: its callee sees that function's frame, not its caller's.
///
/// A chain of merge-similar's thunks longer than a few (only CLIF written by hand with
/// their mark makes one) counts as reading its frame: a copy is always sound.
pub fn reaches_a_frame_reader(module: &Module, f: FuncIndex) -> bool {
    let mut at = f;
    for _ in 0..8 {
        let m = module.get(at);
        if m.observes_its_frame() {
            return true;
        }
        let Some(thunk) = shape::of(&m.func).filter(|_| m.similar_thunk) else {
            return false;
        };
        let callee = &m.func.dfg.ext_funcs[thunk.callee].name;
        match module.lookup(&FuncName::of_external(&m.func, callee)) {
            Some(next) => at = next,
            None => return false,
        }
    }
    true
}

/// A thunk as CLIF: a function named `name` with `signature` that passes its arguments to
/// `target` and returns what it returns. With `tail_calls` (where Cranelift compiles it:
/// [`crate::target::thunks_tail_call`]), a `tail` thunk is a `return_call`; otherwise it
/// calls and returns.
pub fn clif_thunk(
    name: &FuncName,
    signature: &ir::Signature,
    target: &FuncName,
    frontend_config: TargetFrontendConfig,
    tail_calls: bool,
) -> ir::Function {
    let mut func = ir::Function::with_name_signature(user_func_name(name), signature.clone());
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let sig = b.import_signature(signature.clone());
    let callee_name = external_name(b.func, target);
    let callee = b.import_function(ir::ExtFuncData {
        name: callee_name,
        signature: sig,
        colocated: true,
        patchable: false,
    });
    let args = b.block_params(block).to_vec();
    if tail_calls && signature.call_conv == CallConv::Tail {
        b.ins().return_call(callee, &args);
    } else {
        let call = b.ins().call(callee, &args);
        let results = b.inst_results(call).to_vec();
        b.ins().return_(&results);
    }
    b.finalize(frontend_config);
    func
}

/// A thunk that passes its own arguments on unchanged, adds constant and function-address
/// arguments after them and tail-calls the target, written directly as machine code: each
/// added argument is loaded into its argument register (or stored to its stack slot), then
/// a jump. Merge-similar's thunks have this shape; compiled by Cranelift they would also
/// set up a frame.
pub struct RegisterThunk {
    /// The machine code.
    pub bytes: Vec<u8>,
    /// Its alignment (that of an instruction: 1 on x86_64, 4 on aarch64). The code is a
    /// whole number of instructions, so it takes exactly its length in `.text`.
    pub alignment: u64,
    /// Relocations: offset, kind, the `FuncRef` named, addend.
    pub relocs: Vec<(u32, Reloc, ir::FuncRef, i64)>,
    /// How the CFA and the return address move from the CIE's initial rules, at offsets
    /// into the code: empty unless the thunk grows its stack argument area
    /// ([`layout::Placement::grow`]), the only time its stack pointer moves, with an FDE
    /// (on Windows it grows with the return address always at the top of the stack,
    /// [`x86_64::Growth::ByPushes`], and has none).
    pub frame: Vec<(u32, gimli::write::CallFrameInstruction)>,
    /// Whether the thunk moves its stack pointer: it grows the stack argument area.
    pub moves_stack_pointer: bool,
}

/// `func` as a [`RegisterThunk`] for `isa` when it has that shape ([`shape`]) and its
/// arguments can be placed without a frame ([`layout::Placement::of`]; x86_64: System V or
/// `tail`; aarch64: AAPCS64 or `tail`); `None` otherwise (Cranelift compiles it). `is_pic` chooses how
/// function addresses are loaded, as Cranelift does: through the GOT, or PC-relative or
/// absolute without PIC.
pub fn register_thunk(func: &ir::Function, isa: &dyn TargetIsa) -> Option<RegisterThunk> {
    let is_pic = isa.flags().is_pic();
    // A thunk that grows its stack area has an FDE (`.eh_frame`); Windows' `.pdata` cannot
    // say that the return address moved, so there an x86_64 thunk grows by pushing the
    // return address a word at a time, and an aarch64 one is left to Cranelift.
    let windows = isa.triple().operating_system == OperatingSystem::Windows;
    match isa.triple().architecture {
        Architecture::X86_64 => {
            let growth = match windows {
                true => x86_64::Growth::ByPushes,
                false => x86_64::Growth::WithFde,
            };
            x86_64::encode(&shape::of(func)?, is_pic, growth)
        }
        Architecture::Aarch64(_) => aarch64::encode(
            &shape::of(func)?,
            is_pic,
            isa.is_branch_protection_enabled(),
            // May grow: with an FDE, which Windows does not read.
            !windows,
        ),
        _ => None,
    }
}
