//! Unwind information: how an exception or a panic crosses the functions clif-merge defines.
//!
//! Every body is defined with `Module::define_function_bytes` (the code is compiled before
//! the module exists, see [`super::compile`]), and neither cranelift-object nor
//! cranelift-jit writes or registers unwind information for bytes. So Cranelift's own unwind
//! information (`CompiledCode::create_unwind_info`) is kept with each compiled body
//! ([`super::compile::CompiledBody::unwind`]), collected per defined id while defining
//! ([`Frames`]), and written here:
//!
//! - **Objects (ELF, and COFF with System V unwind info):** one `.eh_frame` section written
//!   after `ObjectModule::finish()`, with one CIE (the ISA's) and one FDE per defined body:
//!   every kept body, every copy, every CLIF thunk. This follows cranelift-object's own
//!   `unwind.rs` (gimli's `FrameTable`, relocations against each function) with two
//!   differences: FDEs locate their function pc-relative (`DW_EH_PE_pcrel | sdata4`, what
//!   GCC and LLVM write) rather than with an absolute pointer, so the object links into a
//!   shared library or a PIE without text relocations; and each relocation names the
//!   function's section plus its offset rather than the function's symbol, so an exported
//!   or preemptible function never needs a dynamic relocation in `.eh_frame`. An alias has
//!   no FDE of its own: it is a second symbol at its body's address, and the body's FDE
//!   covers that address.
//! - **Windows x64 objects (COFF):** for Windows triples, each function with a frame gets
//!   an `UNWIND_INFO` in `.xdata`, written by [`windows_x64`] from the prologue Cranelift
//!   describes (Cranelift's own `UnwindInfo::WindowsX64` says wrongly where callee-saved
//!   registers are), and a `RUNTIME_FUNCTION` in `.pdata` (begin, end, unwind data, as
//!   image-relative `ADDR32NB` relocations); a function with tail calls gets one per range
//!   around each tail call's `pop rbp` and jump, which no unwinder knows as an epilogue
//!   ([`windows_x64::WindowsFrame::ranges`]).
//! - **Windows arm64 objects (COFF):** each function with a frame gets a record in
//!   `.xdata`, written by [`windows_arm64`] from its prologue's instructions (Cranelift's
//!   own `UnwindInfo::WindowsArm64` is wrong for a pair of callee-saved registers with a
//!   gap and for a frame set up twice), and a `RUNTIME_FUNCTION` in `.pdata` (begin and
//!   record, `ADDR32NB`); two when no code describes an instruction of its prologue, the
//!   body's own.
//! - **Mach-O objects:** the same `__eh_frame`, each FDE's function a pointer-sized
//!   pc-relative address as LLVM writes it there, relocated by a `SUBTRACTOR` pair (the
//!   start of this data, the function's symbol): Apple's ld64 applies only such pairs and
//!   plain `UNSIGNED`s to `__eh_frame` before it parses it, so the pc-relative relocation
//!   ELF takes would leave each FDE pointing at nothing (`subtractor_relocations`).
//! - **JIT:** cranelift-jit 0.135.8 registers no unwind information at all (not even for
//!   what it compiles itself), so after `finalize_definitions()` the FDEs are written with
//!   the functions' final addresses (absolute pointers) into a buffer owned by a
//!   [`JitFrames`] and registered with the unwinder's `__register_frame` (libgcc takes the
//!   whole table, ended by a zero length; LLVM's libunwind takes one FDE per call: told apart
//!   at run time as wasmtime does). Dropping the [`JitFrames`] deregisters them. Code
//!   for another architecture than this process's (a JIT image run under an emulator or
//!   in another process) is never registered here: [`Frames::jit_eh_frame`] (and the
//!   plugin's `Merged::jit_eh_frame`) hands out the same bytes for its own unwinder.
//! - **Windows x64 and arm64 JIT:** Windows finds unwind information through a table of
//!   `RUNTIME_FUNCTION`s registered with `RtlAddFunctionTable`, whose offsets from one base
//!   address must reach the unwind information too. So the plugin defines the
//!   `UNWIND_INFO`s (x64) or records (arm64) of `.xdata` in
//!   the JIT module itself, as read-only data beside the code, before it is finalized, and
//!   makes the table from the final addresses ([`windows_jit`]); on Windows it is
//!   registered with the process, and the plugin's `Merged::jit_function_table` hands it
//!   out for code run elsewhere.
//!
//! **aarch64 pointer authentication** (`sign_return_address`): Cranelift says where a
//! function's return address is signed by setting the `RA_SIGN_STATE` pseudo-register with
//! `DW_CFA_val_expression`, which libgcc before GCC 13 (Debian 12's) does not read, so an
//! exception crossing a signed frame crashed there. Each change of that state is written as
//! the toggle every unwinder reads, `DW_CFA_AARCH64_negate_ra_state`, as GCC and LLVM write
//! it (`fde_every_unwinder_reads`). With the B key (`sign_return_address_with_bkey`) the CIE
//! carries the `B` augmentation, so the unwinder authenticates with that key
//! (`mark_b_key`); Cranelift 0.135.8 itself panics when asked for that CIE. `tail`
//! functions sign with a zero modifier, which no DWARF state can say: their FDEs read the
//! return address with its signature stripped instead (`stripped_x30`).
//!
//! **Epilogues**: Cranelift's CFI describes the prologue only, so after x86_64's `pop rbp`
//! or aarch64's `ldp x29, x30, [sp], #16` its rule (CFA = frame pointer + 16) reads the
//! caller's frame pointer, and a callee-saved register reloaded from a slot that is then
//! freed is still said to be in it. Each FDE of an x86_64 or aarch64 body adds the rules of
//! its epilogues, found in its code by [`super::epilogues`], as GCC writes them;
//! `tests/unwind.rs` unwinds with libgcc at every instruction, on x86_64 Linux and on
//! aarch64 Linux under qemu.
//!
//! All of it follows Cranelift's `unwind_info` setting (on by default): with
//! `unwind_info=false` nothing is written or registered. Cranelift still hands out
//! (empty, hence wrong) unwind information then, so the setting is checked here.
//!
//! **Thunks that are a single jump have an FDE of the CIE's rules** (`jmp rel32` on
//! x86_64, `b imm26` on aarch64, and merge-similar's register thunks that keep the stack
//! pointer where it is, moves followed by `jmp` or `b`, written as bytes by
//! [`super::thunk`]): an FDE without instructions. They make no call and do not touch the
//! stack pointer, so a synchronous unwinder (a C++ `throw`, a Rust panic) never looks one
//! up; but libgcc's `uw_frame_state_for` answers `_URC_END_OF_STACK` for a PC it has no
//! FDE for, so a profiler or a signal handler that samples the stack while the PC is on a
//! thunk's instructions would see the stack end there. The CIE's initial rules (x86_64:
//! CFA = `rsp`+8, return address at CFA-8; aarch64: CFA = `sp`, return address in `x30`)
//! are exact at every instruction of such a thunk (`tests/unwind.rs` unwinds from each
//! with libgcc on x86_64 and aarch64 Linux). A register thunk that grows its stack
//! argument area does move the stack pointer (and on x86_64 the return address), so the
//! CIE's rules are wrong after its first instruction: its FDE has the rules it moves
//! through ([`FrameInfo::Written`]), which `tests/unwind.rs` checks with readelf and, at
//! every instruction, with gdb and libgcc (x86_64 and aarch64). CLIF thunks (a call and a
//! return, or a `tail` thunk that sets up a frame) are compiled by Cranelift and have their
//! FDE.

use cranelift_codegen::isa::unwind::UnwindInfo;
use cranelift_codegen::isa::{CallConv, TargetIsa};
use cranelift_module::FuncId;
use cranelift_object::object::write::{
    Object, Relocation as ObjectRelocation, SectionId, StandardSection, Symbol, SymbolId,
    SymbolSection,
};
use cranelift_object::object::{
    BinaryFormat, RelocationEncoding, RelocationFlags, RelocationKind, SectionKind, SymbolFlags,
    SymbolKind, SymbolScope,
};
use gimli::write::{
    Address, CieId, CommonInformationEntry, EhFrame, EndianVec, FrameDescriptionEntry, FrameTable,
    RelocateWriter, Relocation, RelocationTarget,
};

use super::epilogues::{Epilogues, Rules};
use super::EmitError;
use crate::target::isa_flag;
use windows_jit::{WindowsFunctionTable, WindowsMachine};

pub mod windows_arm64;
pub mod windows_jit;
pub mod windows_x64;

/// The unwind information of the functions defined in one module, by id.
#[derive(Clone, Debug)]
pub struct Frames {
    /// Whether Cranelift's `unwind_info` setting is on.
    enabled: bool,
    /// The ISA's System V CIE, if it has one.
    cie: Option<CommonInformationEntry>,
    /// Return addresses are signed with aarch64's B key ([`b_key_cie`]): the CIE says so
    /// with the `B` augmentation.
    b_key: bool,
    /// Return addresses may be signed (aarch64's `sign_return_address`): FDEs say where
    /// with `DW_CFA_AARCH64_negate_ra_state` ([`fde_every_unwinder_reads`]).
    signs_return_addresses: bool,
    /// Little-endian target.
    little_endian: bool,
    /// Bytes in a pointer.
    pointer_bytes: u8,
    /// Whether the code runs on this process's architecture: frames of other code are
    /// never registered with this process's unwinder.
    host_code: bool,
    /// Each defined function with frame information: its id, its code's length, its info.
    entries: Vec<(FuncId, u32, FrameInfo)>,
}

/// A defined function's frame information.
#[derive(Clone, Debug)]
pub enum FrameInfo {
    /// Cranelift's, for what it compiled (`CompiledCode::create_unwind_info`), with the
    /// function's calling convention (on aarch64 it decides what a signed return address
    /// is signed with: `tail` functions with a zero modifier, which their FDE must say
    /// apart) and the rules of its epilogues, which Cranelift's do not describe
    /// ([`super::epilogues`]), to add to its FDE.
    Compiled(UnwindInfo, CallConv, Rules),
    /// Windows x64 unwind information, written by [`windows_x64`] from the prologue
    /// Cranelift compiled (Cranelift's own says wrongly where callee-saved registers are),
    /// with the tail calls its `RUNTIME_FUNCTION`s go around.
    WindowsX64(windows_x64::WindowsFrame),
    /// Windows on arm64 unwind codes, written by [`windows_arm64`] from the prologue's
    /// instructions (Cranelift's own are wrong for two kinds of frame); `Err` with what no
    /// code can say, an error when an object is written or the JIT's unwind information
    /// defined.
    WindowsArm64(Result<windows_arm64::WindowsArm64Frame, String>),
    /// The rules a thunk written as bytes moves through, at offsets into its code, from
    /// the CIE's initial ones ([`super::thunk::RegisterThunk::frame`]).
    Written(Vec<(u32, gimli::write::CallFrameInstruction)>),
}

impl FrameInfo {
    /// The frame information of a thunk written as bytes for `isa`, which moves through
    /// `rules` from the CIE's initial ones: an FDE of them, even of none (a sampler's
    /// unwinder stops at a PC without an FDE); none on Windows, whose unwinder takes a
    /// function without `.pdata` for a leaf, its return address on the stack.
    pub fn of_written_thunk(
        isa: &dyn TargetIsa,
        rules: Vec<(u32, gimli::write::CallFrameInstruction)>,
    ) -> Option<Self> {
        let windows = isa.triple().operating_system == target_lexicon::OperatingSystem::Windows;
        (!windows || !rules.is_empty()).then_some(FrameInfo::Written(rules))
    }

    /// The frame information of `code`, which `isa` compiled from a function of calling
    /// convention `call_conv`; `None` when it has none (a leaf without a frame).
    pub fn of_compiled(
        code: &cranelift_codegen::CompiledCode,
        isa: &dyn TargetIsa,
        call_conv: CallConv,
        epilogues: Epilogues,
    ) -> Result<Option<Self>, String> {
        let info = code
            .create_unwind_info(isa)
            .map_err(|e| format!("unwind information: {e:?}"))?;
        Ok(match info {
            None => None,
            Some(UnwindInfo::WindowsX64(_)) => Some(FrameInfo::WindowsX64(
                windows_x64::WindowsFrame::new(&code.buffer.unwind_info, epilogues.tail_calls)
                    .map_err(|e| format!("Windows x64 unwind information: {e}"))?,
            )),
            Some(UnwindInfo::WindowsArm64(_)) => {
                // The prologue ends where Cranelift's last unwind instruction is.
                let prologue = code.buffer.unwind_info.iter().map(|(at, _)| *at).max();
                Some(FrameInfo::WindowsArm64(
                    windows_arm64::WindowsArm64Frame::new(
                        code.buffer.data(),
                        prologue.unwrap_or(0),
                    ),
                ))
            }
            Some(info) => Some(FrameInfo::Compiled(info, call_conv, epilogues.rules)),
        })
    }
}

impl Frames {
    /// An empty table for functions compiled by `isa`.
    pub fn new(isa: &dyn TargetIsa) -> Result<Self, EmitError> {
        let enabled = isa.flags().unwind_info();
        let b_key = signs_with_b_key(isa);
        Ok(Self {
            enabled,
            cie: match (enabled, b_key) {
                (false, _) => None,
                (true, false) => isa.create_systemv_cie(),
                // gimli writes no `B`: the CIE says `S` (no data either), and
                // [`mark_b_key`] turns it into the `B` in the bytes written.
                (true, true) => b_key_cie(isa)?.map(|mut cie| {
                    cie.signal_trampoline = true;
                    cie
                }),
            },
            b_key,
            signs_return_addresses: is_aarch64(isa) && isa_flag(isa, "sign_return_address"),
            little_endian: isa.endianness() == cranelift_codegen::ir::Endianness::Little,
            pointer_bytes: isa.pointer_bytes(),
            host_code: isa.triple().architecture == target_lexicon::HOST.architecture,
            entries: Vec::new(),
        })
    }

    /// Record the unwind information of the function defined as `id`, `len` bytes long.
    pub fn add(&mut self, id: FuncId, len: usize, info: Option<&FrameInfo>) {
        if let (true, Some(info)) = (self.enabled, info) {
            self.entries.push((id, len as u32, info.clone()));
        }
    }

    /// The ids that have unwind information, in the order defined.
    pub fn ids(&self) -> impl Iterator<Item = FuncId> + '_ {
        self.entries.iter().map(|(id, _, _)| *id)
    }

    /// The entries an `.eh_frame` describes: Cranelift's System V information, and the
    /// written thunks'.
    fn system_v(&self) -> impl Iterator<Item = (FuncId, u32, SystemV<'_>)> {
        self.entries
            .iter()
            .filter_map(|(id, len, info)| match info {
                FrameInfo::Compiled(UnwindInfo::SystemV(s), call_conv, epilogues) => {
                    Some((*id, *len, SystemV::Compiled(s, *call_conv, epilogues)))
                }
                FrameInfo::Written(rules) => Some((*id, *len, SystemV::Written(rules))),
                FrameInfo::Compiled(..) | FrameInfo::WindowsX64(_) | FrameInfo::WindowsArm64(_) => {
                    None
                }
            })
    }

    /// The FDE of a function at `address`, `len` bytes long, whose unwind information is
    /// `info`.
    fn fde(
        &self,
        info: SystemV<'_>,
        address: Address,
        len: u32,
    ) -> Result<FrameDescriptionEntry, EmitError> {
        match (info, self.signs_return_addresses, &self.cie) {
            (SystemV::Compiled(info, call_conv, epilogues), true, Some(cie)) => {
                fde_every_unwinder_reads(cie, info, epilogues, call_conv, address, self.endian())
            }
            (SystemV::Compiled(info, _, epilogues), _, _) => {
                let mut fde = info.to_fde(address);
                for (offset, rule) in epilogues {
                    fde.add_instruction(*offset, rule.clone());
                }
                Ok(fde)
            }
            // A written thunk never signs its return address: no state to say.
            (SystemV::Written(rules), _, _) => {
                let mut fde = FrameDescriptionEntry::new(address, len);
                for (offset, rule) in rules {
                    fde.add_instruction(*offset, rule.clone());
                }
                Ok(fde)
            }
        }
    }

    /// The entries with Windows x64 unwind information: id, code length, the information.
    fn windows_x64(&self) -> impl Iterator<Item = (FuncId, u32, &windows_x64::WindowsFrame)> {
        self.entries
            .iter()
            .filter_map(|(id, len, info)| match info {
                FrameInfo::WindowsX64(w) => Some((*id, *len, w)),
                FrameInfo::Compiled(..) | FrameInfo::WindowsArm64(_) | FrameInfo::Written(_) => {
                    None
                }
            })
    }

    /// The records of each Windows arm64 function
    /// ([`windows_arm64::WindowsArm64Frame::records`]), in order; an error naming (by
    /// `name_of`) a function whose prologue or length no record can describe.
    fn windows_arm64_records(
        &self,
        name_of: impl Fn(FuncId) -> String,
    ) -> Result<Vec<(FuncId, Vec<windows_arm64::Record>)>, EmitError> {
        self.entries
            .iter()
            .filter_map(|(id, len, info)| match info {
                FrameInfo::WindowsArm64(frame) => Some((*id, *len, frame)),
                FrameInfo::Compiled(..) | FrameInfo::WindowsX64(_) | FrameInfo::Written(_) => None,
            })
            .map(|(id, len, frame)| {
                let records = frame
                    .as_ref()
                    .map_err(String::clone)
                    .and_then(|f| f.records(len));
                records.map(|r| (id, r)).map_err(|e| {
                    EmitError::Object(format!(
                        "Windows arm64 unwind information of {}: {e}",
                        name_of(id)
                    ))
                })
            })
            .collect()
    }

    fn endian(&self) -> gimli::RunTimeEndian {
        if self.little_endian {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        }
    }

    /// Write the unwind sections into `object`, finished by cranelift-object: `symbol_of`
    /// gives the symbol each id was defined as.
    pub fn write_object(
        &self,
        object: &mut Object<'static>,
        symbol_of: impl Fn(FuncId) -> SymbolId,
    ) -> Result<(), EmitError> {
        if !self.enabled || self.entries.is_empty() {
            return Ok(());
        }
        match object.format() {
            BinaryFormat::Elf | BinaryFormat::Coff | BinaryFormat::MachO => {}
            _ => return Ok(()),
        }
        self.write_eh_frame(object, &symbol_of)?;
        if object.format() == BinaryFormat::Coff {
            self.write_pdata(object, &symbol_of)?;
            self.write_pdata_arm64(object, &symbol_of)?;
        }
        Ok(())
    }

    fn write_eh_frame(
        &self,
        object: &mut Object<'static>,
        symbol_of: &impl Fn(FuncId) -> SymbolId,
    ) -> Result<(), EmitError> {
        let Some(mut cie) = self.cie.clone() else {
            return Ok(());
        };
        if self.system_v().next().is_none() {
            return Ok(());
        }
        let macho = subtractor_relocations(object)?;
        cie.fde_address_encoding = if macho.is_some() {
            // A pointer's size, as LLVM writes it for Mach-O.
            gimli::DW_EH_PE_pcrel
        } else {
            gimli::constants::DwEhPe(gimli::DW_EH_PE_pcrel.0 | gimli::DW_EH_PE_sdata4.0)
        };
        let mut table = FrameTable::default();
        let cie_id: CieId = table.add_cie(cie);
        // gimli's symbol numbers are indices into `targets`: (symbol, offset from it).
        let mut targets: Vec<(SymbolId, i64)> = Vec::new();
        for (id, len, info) in self.system_v() {
            let address = Address::Symbol {
                symbol: targets.len(),
                addend: 0,
            };
            targets.push(match macho {
                // Mach-O has no interposition within an image: the function's own symbol.
                Some(_) => (symbol_of(id), 0),
                None => section_relative(object, symbol_of(id))?,
            });
            table.add_fde(cie_id, self.fde(info, address, len)?);
        }
        let mut eh_frame = EhFrame(Section {
            writer: EndianVec::new(self.endian()),
            relocations: Vec::new(),
        });
        table
            .write_eh_frame(&mut eh_frame)
            .map_err(|e| EmitError::Object(format!("writing .eh_frame: {e}")))?;
        let EhFrame(Section {
            writer,
            relocations,
        }) = eh_frame;
        let mut bytes = writer.into_vec();
        if self.b_key {
            mark_b_key(&mut bytes)?;
        }
        let section = object.section_id(StandardSection::EhFrame);
        // Appended: a caller's own cranelift-object (plugin) may have written one already.
        let base = object.append_section_data(section, &bytes, u64::from(self.pointer_bytes));
        // Mach-O: a local symbol where this data starts, which pc-relative pointers count
        // from ([`subtractor_relocations`]), with the type of their `UNSIGNED` half.
        let macho = macho.map(|unsigned| {
            let start = object.add_symbol(Symbol {
                name: b"clif_merge_eh_frame".to_vec(),
                value: base,
                size: 0,
                kind: SymbolKind::Data,
                scope: SymbolScope::Compilation,
                weak: false,
                section: SymbolSection::Section(section),
                flags: SymbolFlags::None,
            });
            (unsigned, start)
        });
        for r in relocations {
            let RelocationTarget::Symbol(index) = r.target else {
                continue; // gimli writes section offsets only for debug sections
            };
            let (symbol, offset) = targets[index];
            let pe = r.eh_pe.unwrap_or(gimli::DW_EH_PE_absptr);
            let pcrel = pe.application() == gimli::DW_EH_PE_pcrel;
            let added = match macho {
                Some((unsigned, start)) if pcrel => {
                    // `symbol - start + addend`, the addend less the distance from `start`
                    // to the place: `symbol + addend - place`.
                    let relocation = ObjectRelocation {
                        offset: base + r.offset as u64,
                        symbol,
                        addend: r.addend + offset - r.offset as i64,
                        flags: RelocationFlags::MachO {
                            r_type: unsigned,
                            r_pcrel: false,
                            r_length: r.size.trailing_zeros() as u8,
                        },
                    };
                    object.add_relocation_with_subtractor(section, relocation, Some(start))
                }
                _ => object.add_relocation(
                    section,
                    ObjectRelocation {
                        offset: base + r.offset as u64,
                        symbol,
                        addend: r.addend + offset,
                        flags: RelocationFlags::Generic {
                            kind: if pcrel {
                                RelocationKind::Relative
                            } else {
                                RelocationKind::Absolute
                            },
                            encoding: RelocationEncoding::Generic,
                            size: r.size * 8,
                        },
                    },
                ),
            };
            added.map_err(|e| EmitError::Object(format!(".eh_frame relocation: {e}")))?;
        }
        Ok(())
    }

    /// Windows x64: `.xdata` (each function's `UNWIND_INFO`s, [`windows_x64::Xdata`]) and
    /// `.pdata` (a `RUNTIME_FUNCTION` per range of each function: one, unless it has tail
    /// calls).
    fn write_pdata(
        &self,
        object: &mut Object<'static>,
        symbol_of: &impl Fn(FuncId) -> SymbolId,
    ) -> Result<(), EmitError> {
        let windows: Vec<_> = self.windows_x64().collect();
        if windows.is_empty() {
            return Ok(());
        }
        let layout = windows_x64::Xdata::of(windows.iter().map(|&(_, len, frame)| (len, frame)));
        let xdata = object.add_section(Vec::new(), b".xdata".to_vec(), SectionKind::ReadOnlyData);
        let pdata = object.add_section(Vec::new(), b".pdata".to_vec(), SectionKind::ReadOnlyData);
        object.append_section_data(xdata, &layout.bytes, 4);
        let xdata_symbol = object.section_symbol(xdata);
        let addr32nb = RelocationFlags::Coff {
            typ: cranelift_object::object::pe::IMAGE_REL_AMD64_ADDR32NB,
        };
        for ((id, _, _), ranges) in windows.iter().zip(&layout.functions) {
            let (symbol, offset) = section_relative(object, symbol_of(*id))?;
            for (range, info) in ranges {
                let fields = [
                    (symbol, offset + i64::from(range.begin)),
                    (symbol, offset + i64::from(range.end)),
                    (xdata_symbol, i64::from(*info)),
                ];
                pdata_entry(object, pdata, &fields, addr32nb)?;
            }
        }
        Ok(())
    }

    /// Windows on arm64: `.xdata` (each range's record, [`windows_arm64`]) and `.pdata` (a
    /// `RUNTIME_FUNCTION` per range of each function: its start and its record).
    fn write_pdata_arm64(
        &self,
        object: &mut Object<'static>,
        symbol_of: &impl Fn(FuncId) -> SymbolId,
    ) -> Result<(), EmitError> {
        let functions = self.windows_arm64_records(|id| {
            String::from_utf8_lossy(&object.symbol(symbol_of(id)).name).into_owned()
        })?;
        if functions.is_empty() {
            return Ok(());
        }
        let xdata = object.add_section(Vec::new(), b".xdata".to_vec(), SectionKind::ReadOnlyData);
        let pdata = object.add_section(Vec::new(), b".pdata".to_vec(), SectionKind::ReadOnlyData);
        let xdata_symbol = object.section_symbol(xdata);
        let addr32nb = RelocationFlags::Coff {
            typ: cranelift_object::object::pe::IMAGE_REL_ARM64_ADDR32NB,
        };
        for (id, records) in functions {
            let (symbol, offset) = section_relative(object, symbol_of(id))?;
            for (range, record) in records {
                let at = object.append_section_data(xdata, &record, 4);
                let fields = [
                    (symbol, offset + i64::from(range.start)),
                    (xdata_symbol, at as i64),
                ];
                pdata_entry(object, pdata, &fields, addr32nb)?;
            }
        }
        Ok(())
    }

    /// The `.eh_frame` of the functions that are now at `address_of(id)`, as
    /// `__register_frame` takes it: one CIE, an FDE per function with frame information at
    /// its absolute address, ended by a zero length. Empty when `unwind_info` is off or
    /// the target has no System V unwind information. For an unwinder other than this
    /// process's: code run in another process or under an emulator, or an embedder that
    /// registers frames itself.
    pub fn jit_eh_frame(
        &self,
        address_of: impl Fn(FuncId) -> *const u8,
    ) -> Result<Vec<u8>, EmitError> {
        let (true, Some(cie)) = (self.enabled, self.cie.clone()) else {
            return Ok(Vec::new());
        };
        if self.system_v().next().is_none() {
            return Ok(Vec::new());
        }
        // Absolute addresses (the CIE's default encoding): the code does not move.
        let mut table = FrameTable::default();
        let cie_id = table.add_cie(cie);
        for (id, len, info) in self.system_v() {
            let address = Address::Constant(address_of(id) as u64);
            table.add_fde(cie_id, self.fde(info, address, len)?);
        }
        let mut eh_frame = EhFrame(EndianVec::new(self.endian()));
        table
            .write_eh_frame(&mut eh_frame)
            .map_err(|e| EmitError::Object(format!("writing .eh_frame: {e}")))?;
        let mut bytes = eh_frame.0.into_vec();
        if self.b_key {
            mark_b_key(&mut bytes)?;
        }
        // libgcc reads entries until one of length zero.
        bytes.extend_from_slice(&[0; 4]);
        Ok(bytes)
    }

    /// Register the FDEs of functions that are now at `address_of(id)` with this process's
    /// unwinder ([`Frames::jit_eh_frame`]). Call it after the JIT module's
    /// `finalize_definitions()`; keep the result as long as the code may run (dropping it
    /// deregisters the frames). Code for another architecture (a JIT image run elsewhere)
    /// is not this process's to unwind: nothing is registered for it.
    pub fn register_jit(
        &self,
        address_of: impl Fn(FuncId) -> *const u8,
    ) -> Result<JitFrames, EmitError> {
        let mut frames = JitFrames::default();
        if !self.host_code {
            return Ok(frames);
        }
        let bytes = self.jit_eh_frame(address_of)?;
        if bytes.is_empty() {
            return Ok(frames);
        }
        // Aligned for the unwinder's word reads.
        let mut buffer = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `buffer` has at least `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                buffer.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            );
        }
        frames.buffer = buffer;
        frames.register(bytes.len());
        Ok(frames)
    }
}

/// An entry of the `.eh_frame`, borrowed ([`Frames::system_v`]).
#[derive(Clone, Copy)]
enum SystemV<'a> {
    Compiled(
        &'a cranelift_codegen::isa::unwind::systemv::UnwindInfo,
        CallConv,
        &'a [(u32, gimli::write::CallFrameInstruction)],
    ),
    Written(&'a [(u32, gimli::write::CallFrameInstruction)]),
}

fn is_aarch64(isa: &dyn TargetIsa) -> bool {
    matches!(
        isa.triple().architecture,
        target_lexicon::Architecture::Aarch64(_)
    )
}

/// Whether `isa` signs return addresses with aarch64's B key where a System V CIE
/// describes its frames (not on Darwin, whose CIE Cranelift writes without saying so).
fn signs_with_b_key(isa: &dyn TargetIsa) -> bool {
    is_aarch64(isa)
        && !isa.triple().operating_system.is_like_darwin()
        && isa_flag(isa, "sign_return_address")
        && isa_flag(isa, "sign_return_address_with_bkey")
}

/// AArch64's DWARF register `RA_SIGN_STATE`: bit 0 set while the return address is signed.
const RA_SIGN_STATE: gimli::Register = gimli::Register(34);

/// `info`'s FDE at `address`, with the return address's signing state said the way every
/// unwinder reads it. Cranelift sets `RA_SIGN_STATE` with `DW_CFA_val_expression`
/// (`DW_OP_lit1` after signing, `DW_OP_lit0` after authenticating), which AArch64's DWARF
/// ABI allows but libgcc before GCC 13 ignores: it reads only the toggle
/// `DW_CFA_AARCH64_negate_ra_state` (what GCC and LLVM write), so it took a signed return
/// address for a plain one and an exception crossing such a frame crashed. Here each change
/// of the state becomes that toggle; every other instruction is kept.
///
/// **`tail` functions** are signed differently: Cranelift signs their return address with
/// a zero modifier (`paciaz`, `pacibz`), since a tail call may leave with another stack
/// pointer than the function entered with. DWARF can only say "signed with the CFA as
/// modifier", which every unwinder then authenticates with; for such a frame the
/// authentication fails and the exception crashes (Cranelift's own unwind information
/// has the same fault). So for a `tail` function no state is said at all, and while its
/// return address is signed, its rule (`x30` where it is, or where it was saved) becomes
/// a `DW_CFA_val_expression` that strips the signature instead ([`stripped_x30`]): the
/// unwinder reads a plain address and does not authenticate it (the function itself
/// still authenticates before it returns).
///
/// The FDE, with the rules of the function's `epilogues` ([`super::epilogues`], which say
/// where an epilogue authenticates the return address as Cranelift's prologue says where it
/// is signed), is written with `cie`, read back (gimli's writer keeps its instructions to
/// itself) and rebuilt.
fn fde_every_unwinder_reads(
    cie: &CommonInformationEntry,
    info: &cranelift_codegen::isa::unwind::systemv::UnwindInfo,
    epilogues: &[(u32, gimli::write::CallFrameInstruction)],
    call_conv: CallConv,
    address: Address,
    endian: gimli::RunTimeEndian,
) -> Result<FrameDescriptionEntry, EmitError> {
    use gimli::read::{self, CallFrameInstruction as Read, UnwindSection};
    use gimli::write::CallFrameInstruction as Write;
    let fail =
        |what: String| EmitError::Object(format!("return-address signing in .eh_frame: {what}"));
    let mut table = FrameTable::default();
    let cie_id = table.add_cie(cie.clone());
    let mut fde = info.to_fde(Address::Constant(0));
    for (offset, rule) in epilogues {
        fde.add_instruction(*offset, rule.clone());
    }
    table.add_fde(cie_id, fde);
    let mut written = EhFrame(EndianVec::new(endian));
    table
        .write_eh_frame(&mut written)
        .map_err(|e| fail(e.to_string()))?;
    let bytes = written.0.into_vec();
    let section = read::EhFrame::new(&bytes, endian);
    let bases = read::BaseAddresses::default();
    let mut entries = section.entries(&bases);
    let fde = loop {
        match entries.next().map_err(|e| fail(e.to_string()))? {
            Some(read::CieOrFde::Fde(partial)) => {
                break partial
                    .parse(read::EhFrame::cie_from_offset)
                    .map_err(|e| fail(e.to_string()))?
            }
            Some(read::CieOrFde::Cie(_)) => {}
            None => return Err(fail("the FDE did not read back".to_string())),
        }
    };
    let (code_factor, data_factor) = (
        fde.cie().code_alignment_factor() as u32,
        fde.cie().data_alignment_factor(),
    );
    let zero_modifier = call_conv == CallConv::Tail;
    let mut out = FrameDescriptionEntry::new(address, fde.len() as u32);
    let mut offset = 0u32;
    // The signing state and where x30 is (`None`: in its register; else saved at that
    // offset from the CFA), and those `DW_CFA_remember_state` saved.
    let (mut state, mut remembered) = (RaState::default(), Vec::new());
    let mut instructions = fde.instructions(&section, &bases);
    while let Some(instruction) = instructions.next().map_err(|e| fail(e.to_string()))? {
        let converted = match instruction {
            Read::AdvanceLoc { delta } => {
                offset += delta * code_factor;
                continue;
            }
            Read::Nop => continue,
            Read::ValExpression {
                register: RA_SIGN_STATE,
                expression,
            } => {
                let expression = expression.get(&section).map_err(|e| fail(e.to_string()))?;
                let now = match expression.0.slice() {
                    [op] if *op == gimli::DW_OP_lit1.0 => true,
                    [op] if *op == gimli::DW_OP_lit0.0 => false,
                    other => return Err(fail(format!("RA_SIGN_STATE set to {other:x?}"))),
                };
                if now == state.signed {
                    continue;
                }
                state.change_to(now, zero_modifier)
            }
            Read::NegateRaState => state.change_to(!state.signed, zero_modifier),
            Read::RememberState => {
                remembered.push(state);
                Write::RememberState
            }
            Read::RestoreState => {
                state = remembered
                    .pop()
                    .ok_or_else(|| fail("a restore without a remember".to_string()))?;
                Write::RestoreState
            }
            Read::DefCfa { register, offset } => Write::Cfa(register, offset as i32),
            Read::DefCfaRegister { register } => Write::CfaRegister(register),
            // An epilogue's, after it pops a `tail` function's stack arguments.
            Read::DefCfaSf {
                register,
                factored_offset,
            } => Write::Cfa(register, (factored_offset * data_factor) as i32),
            Read::DefCfaOffset { offset } => Write::CfaOffset(offset as i32),
            Read::Offset {
                register,
                factored_offset,
            } => {
                let at = factored_offset as i64 * data_factor;
                state.moved(register, Some(at));
                state.rule(register, Write::Offset(register, at as i32), zero_modifier)
            }
            Read::Restore { register } => {
                state.moved(register, None);
                state.rule(register, Write::Restore(register), zero_modifier)
            }
            Read::SameValue { register } => {
                state.moved(register, None);
                state.rule(register, Write::SameValue(register), zero_modifier)
            }
            Read::Undefined { register } => Write::Undefined(register),
            Read::Register {
                dest_register,
                src_register,
            } => Write::Register(dest_register, src_register),
            Read::ArgsSize { size } => Write::ArgsSize(size as u32),
            // What Cranelift does not write for aarch64: refused rather than guessed.
            Read::SetLoc { .. }
            | Read::DefCfaOffsetSf { .. }
            | Read::DefCfaExpression { .. }
            | Read::OffsetExtendedSf { .. }
            | Read::ValOffset { .. }
            | Read::ValOffsetSf { .. }
            | Read::Expression { .. }
            | Read::ValExpression { .. } => {
                return Err(fail(format!("an unexpected instruction {instruction:?}")))
            }
        };
        out.add_instruction(offset, converted);
    }
    Ok(out)
}

/// aarch64's link register, which holds the return address.
const X30: gimli::Register = gimli::Register(30);

/// The bits of a user-space address on aarch64 Linux: a process's addresses are below
/// 2^48 unless it asks for more (even with 52-bit address spaces), and a pointer's
/// signature lives above its address bits. Where the kernel gives processes fewer address
/// bits (39 on many Android kernels) part of the signature stays below this mask, and an
/// unwinder crossing a signed `tail` frame still fails there.
const USER_ADDRESS_MASK: u64 = (1 << 48) - 1;

/// Where the unwinder is, reading an FDE: whether the return address is signed, and where
/// x30 is.
#[derive(Clone, Copy, Debug, Default)]
struct RaState {
    signed: bool,
    /// x30's offset from the CFA once it is saved; `None` while it is in its register.
    x30_saved_at: Option<i64>,
}

impl RaState {
    /// The instruction that says the return address is now signed (`now`) or not: the
    /// toggle, or with a zero modifier x30's rule as it now reads.
    fn change_to(&mut self, now: bool, zero_modifier: bool) -> gimli::write::CallFrameInstruction {
        use gimli::write::CallFrameInstruction as Write;
        self.signed = now;
        match (zero_modifier, now, self.x30_saved_at) {
            (false, _, _) => Write::NegateRaState,
            (true, true, at) => stripped_x30(at),
            (true, false, Some(at)) => Write::Offset(X30, at as i32),
            (true, false, None) => Write::SameValue(X30),
        }
    }

    /// `register` is now saved at `saved_at` off the CFA, or back in itself (`None`).
    fn moved(&mut self, register: gimli::Register, saved_at: Option<i64>) {
        if register == X30 {
            self.x30_saved_at = saved_at;
        }
    }

    /// `plain`, the rule just read for `register`, as written: x30's stripped while a
    /// zero-modifier signature is on it.
    fn rule(
        &self,
        register: gimli::Register,
        plain: gimli::write::CallFrameInstruction,
        zero_modifier: bool,
    ) -> gimli::write::CallFrameInstruction {
        match register == X30 && zero_modifier && self.signed {
            true => stripped_x30(self.x30_saved_at),
            false => plain,
        }
    }
}

/// The rule for x30 in a frame whose return address is signed with a zero modifier: its
/// value (in its register, or loaded from `saved_at` bytes off the CFA, which the
/// unwinder pushes before evaluating) with the signature's bits cleared.
fn stripped_x30(saved_at: Option<i64>) -> gimli::write::CallFrameInstruction {
    use gimli::write::Expression;
    let mut expression = Expression::new();
    match saved_at {
        Some(at) => {
            expression.op_consts(at);
            expression.op(gimli::DW_OP_plus);
            expression.op_deref();
        }
        None => expression.op_breg(X30, 0),
    }
    expression.op_constu(USER_ADDRESS_MASK);
    expression.op(gimli::DW_OP_and);
    gimli::write::CallFrameInstruction::ValExpression(X30, expression)
}

/// The CIE of an ISA that signs return addresses with the B key. Cranelift 0.135.8 does not
/// write one (its `create_systemv_cie` panics: "specifying that the B key is used ... in the
/// CIE is not implemented"), and the rules it starts from do not depend on the key: they
/// are those of the same target's ISA with default settings. [`mark_b_key`] adds the `B`.
fn b_key_cie(isa: &dyn TargetIsa) -> Result<Option<CommonInformationEntry>, EmitError> {
    let builder = cranelift_codegen::isa::lookup(isa.triple().clone())
        .map_err(|e| EmitError::Object(format!("the B key's CIE: {e}")))?;
    let plain = builder
        .finish(cranelift_codegen::settings::Flags::new(
            cranelift_codegen::settings::builder(),
        ))
        .map_err(|e| EmitError::Object(format!("the B key's CIE: {e}")))?;
    Ok(plain.create_systemv_cie())
}

/// Say in the CIE at the start of `eh_frame` that return addresses are signed with the B
/// key: its augmentation string gets a `B` (AArch64's DWARF ABI; libgcc's unwinder then
/// authenticates them with that key). gimli writes no `B`, so the CIE was written with the
/// `S` augmentation instead, a letter that has no data either: it becomes the `B`, and no
/// length or offset changes.
fn mark_b_key(eh_frame: &mut [u8]) -> Result<(), EmitError> {
    // A 32-bit length, the CIE id, the version, then the augmentation string.
    const AUGMENTATION: usize = 9;
    let string = eh_frame
        .get(AUGMENTATION..)
        .and_then(|rest| rest.iter().position(|&b| b == 0))
        .map(|end| AUGMENTATION..AUGMENTATION + end);
    let at = string
        .filter(|s| eh_frame[s.start] == b'z')
        .and_then(|s| {
            eh_frame[s.clone()]
                .iter()
                .position(|&b| b == b'S')
                .map(|i| s.start + i)
        })
        .ok_or_else(|| {
            EmitError::Object("the B key's CIE has no augmentation to mark".to_string())
        })?;
    eh_frame[at] = b'B';
    Ok(())
}

/// The section symbol of `symbol`'s section and `symbol`'s offset in it.
/// Append a `RUNTIME_FUNCTION` to `.pdata`: a 32-bit image-relative word per field, each
/// a symbol and an addend.
fn pdata_entry(
    object: &mut Object<'static>,
    pdata: SectionId,
    fields: &[(SymbolId, i64)],
    flags: RelocationFlags,
) -> Result<(), EmitError> {
    let entry = object.append_section_data(pdata, &vec![0u8; 4 * fields.len()], 4);
    for (n, &(symbol, addend)) in fields.iter().enumerate() {
        let relocation = ObjectRelocation {
            offset: entry + 4 * n as u64,
            symbol,
            addend,
            flags,
        };
        object
            .add_relocation(pdata, relocation)
            .map_err(|e| EmitError::Object(format!(".pdata relocation: {e}")))?;
    }
    Ok(())
}

/// For a Mach-O `object`, the type of the `UNSIGNED` relocation that, after a `SUBTRACTOR`
/// naming the start of `__eh_frame`'s data, makes a pc-relative pointer: what LLVM writes
/// there, and what Apple's ld64 reads (it applies `SUBTRACTOR` pairs and `UNSIGNED` alone
/// to `__eh_frame` before parsing it, and no other type: a plain pc-relative relocation
/// would leave the FDE pointing at nothing). `None` for other formats.
fn subtractor_relocations(object: &Object<'static>) -> Result<Option<u8>, EmitError> {
    use cranelift_object::object::{macho, Architecture};
    if object.format() != BinaryFormat::MachO {
        return Ok(None);
    }
    match object.architecture() {
        Architecture::X86_64 => Ok(Some(macho::X86_64_RELOC_UNSIGNED)),
        Architecture::Aarch64 => Ok(Some(macho::ARM64_RELOC_UNSIGNED)),
        other => Err(EmitError::Object(format!(
            "unwind information for Mach-O on {other:?}"
        ))),
    }
}

fn section_relative(
    object: &mut Object<'static>,
    symbol: SymbolId,
) -> Result<(SymbolId, i64), EmitError> {
    let s = object.symbol(symbol);
    let (section, value): (SectionId, u64) = match s.section {
        SymbolSection::Section(section) => (section, s.value),
        _ => {
            return Err(EmitError::Object(format!(
                "{} has unwind information but no code",
                String::from_utf8_lossy(&s.name)
            )))
        }
    };
    Ok((object.section_symbol(section), value as i64))
}

struct Section {
    writer: EndianVec<gimli::RunTimeEndian>,
    relocations: Vec<Relocation>,
}

impl RelocateWriter for Section {
    type Writer = EndianVec<gimli::RunTimeEndian>;

    fn writer(&self) -> &Self::Writer {
        &self.writer
    }

    fn writer_mut(&mut self) -> &mut Self::Writer {
        &mut self.writer
    }

    fn relocate(&mut self, relocation: Relocation) {
        self.relocations.push(relocation);
    }
}

/// Frames of JIT code registered with this process's unwinder; dropping it deregisters
/// them. It must live as long as the code may run or be unwound through.
#[derive(Default)]
pub struct JitFrames {
    /// The `.eh_frame` bytes, 8-byte aligned.
    buffer: Vec<u64>,
    /// The addresses passed to `__register_frame`.
    registered: Vec<usize>,
    /// The Windows function table passed to `RtlAddFunctionTable`, if one was, in the
    /// words of this machine's `RUNTIME_FUNCTION`s: Windows reads it in place until it is
    /// deleted.
    function_table: Vec<u32>,
}

impl std::fmt::Debug for JitFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitFrames")
            .field("registered", &self.registered.len())
            .finish()
    }
}

impl JitFrames {
    /// How many registrations were made (libgcc: one for the whole table; libunwind: one
    /// per FDE; Windows: one function table; none where unwind information is off or
    /// unsupported).
    pub fn registrations(&self) -> usize {
        self.registered.len() + usize::from(!self.function_table.is_empty())
    }

    /// Register the function table of Windows JIT code with this process
    /// (`RtlAddFunctionTable`), when the code is for this process's machine: other code is
    /// not this process's to unwind, and nothing is registered. Deleted when `self` drops.
    pub fn register_windows(&mut self, table: WindowsFunctionTable) -> Result<(), EmitError> {
        if !self.function_table.is_empty() {
            return Err(EmitError::UnwindTable(
                "a function table is registered already".into(),
            ));
        }
        if WindowsMachine::HOST != Some(table.machine) || table.functions.is_empty() {
            return Ok(());
        }
        let len = u32::try_from(table.functions.len())
            .map_err(|_| EmitError::UnwindTable("more than 2^32 functions".into()))?;
        self.add_function_table(table.entries(), len, table.base)
    }

    /// `RtlAddFunctionTable(entries, len, base)`, `entries` laid out as this machine's
    /// `RUNTIME_FUNCTION`s ([`WindowsFunctionTable::entries`]).
    #[cfg(all(windows, any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn add_function_table(
        &mut self,
        entries: Vec<u32>,
        len: u32,
        base: u64,
    ) -> Result<(), EmitError> {
        // SAFETY: `len` entries as Windows declares `RUNTIME_FUNCTION` on this machine, kept
        // in `self` (not moved: a `Vec`'s buffer stays put) until `drop` deletes the table.
        let added = unsafe { RtlAddFunctionTable(entries.as_ptr(), len, base) };
        if added == 0 {
            return Err(EmitError::UnwindTable(
                "RtlAddFunctionTable refused the table".into(),
            ));
        }
        self.function_table = entries;
        Ok(())
    }

    /// No Windows here ([`WindowsMachine::HOST`] is `None`): never called.
    #[cfg(not(all(windows, any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fn add_function_table(
        &mut self,
        _entries: Vec<u32>,
        _len: u32,
        _base: u64,
    ) -> Result<(), EmitError> {
        Ok(())
    }

    #[cfg(unix)]
    fn register(&mut self, len: usize) {
        let start = self.buffer.as_ptr().cast::<u8>();
        if using_libunwind() {
            // One FDE per call: walk the entries, skip the CIE (the first), stop before
            // the terminator.
            let mut offset = 0usize;
            while offset + 4 < len {
                // SAFETY: `offset + 4 <= len` bytes of the buffer are initialised.
                let entry_len = unsafe { start.add(offset).cast::<u32>().read_unaligned() };
                if entry_len == 0 {
                    break;
                }
                if offset != 0 {
                    // SAFETY: an FDE of a table that lives as long as `self`.
                    unsafe { __register_frame(start.add(offset)) };
                    self.registered.push(start as usize + offset);
                }
                offset += entry_len as usize + 4;
            }
        } else {
            // SAFETY: a whole table ended by a zero length, living as long as `self`.
            unsafe { __register_frame(start) };
            self.registered.push(start as usize);
        }
    }

    #[cfg(not(unix))]
    fn register(&mut self, _len: usize) {
        // Windows JITs register `RUNTIME_FUNCTION`s instead: not done (see the module docs).
        self.buffer.clear();
    }
}

impl Drop for JitFrames {
    fn drop(&mut self) {
        #[cfg(all(windows, any(target_arch = "x86_64", target_arch = "aarch64")))]
        if !self.function_table.is_empty() {
            // SAFETY: the table `register_windows` added, still alive.
            unsafe { RtlDeleteFunctionTable(self.function_table.as_ptr()) };
        }
        #[cfg(unix)]
        for &p in self.registered.iter().rev() {
            // SAFETY: registered by `register` from a buffer that is still alive.
            unsafe { __deregister_frame(p as *const u8) };
        }
    }
}

#[cfg(all(windows, any(target_arch = "x86_64", target_arch = "aarch64")))]
#[link(name = "kernel32")]
extern "system" {
    // BOOLEAN RtlAddFunctionTable(PRUNTIME_FUNCTION, DWORD, DWORD64);
    fn RtlAddFunctionTable(functions: *const u32, len: u32, base: u64) -> u8;
    // BOOLEAN RtlDeleteFunctionTable(PRUNTIME_FUNCTION);
    fn RtlDeleteFunctionTable(functions: *const u32) -> u8;
}

#[cfg(unix)]
extern "C" {
    // libgcc: the start of a table of CIEs and FDEs ended by a zero length.
    // LLVM's libunwind: one FDE.
    fn __register_frame(fde: *const u8);
    fn __deregister_frame(fde: *const u8);
}

/// Whether the process unwinds with LLVM's libunwind (which takes one FDE per
/// `__register_frame`) rather than libgcc (a whole table): only libunwind has
/// `__unw_add_dynamic_fde`. macOS always uses libunwind.
#[cfg(unix)]
fn using_libunwind() -> bool {
    if cfg!(target_os = "macos") {
        return true;
    }
    static USING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USING.get_or_init(|| {
        // SAFETY: looking a symbol up by a NUL-terminated name.
        !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__unw_add_dynamic_fde".as_ptr()) }.is_null()
    })
}
