//! Windows unwind information for JIT code, on x64 and on arm64.
//!
//! Windows finds a function's unwind information through a table of `RUNTIME_FUNCTION`s
//! that the JIT registers with `RtlAddFunctionTable`. Every field of an entry is a 32-bit
//! offset from the one base address the table is registered with, the unwind
//! information's own included. So the unwind information has to lie within 4 GiB of the
//! code, above the base. A heap buffer need not. The `UNWIND_INFO`s (x64) or `.xdata`
//! records (arm64) therefore go into the JIT module itself, as one read-only data object
//! that cranelift-jit allocates beside the code ([`JitUnwindData::define`], before
//! `finalize_definitions()`). Once the module is finalized, the table is made from the
//! addresses cranelift-jit gave ([`JitUnwindData::function_table_in`]). On Windows it is
//! registered with this process when the code is for this process's machine
//! ([`super::JitFrames`]); elsewhere it is handed to whoever runs the code (a JIT image run
//! under Wine in this project's tests).
//!
//! The unwind information is what objects get in `.xdata`: x64's `UNWIND_INFO`s
//! ([`super::windows_x64`]), arm64's records written from each prologue's instructions
//! ([`super::windows_arm64`]), two for a function whose prologue no one code per
//! instruction describes. The entries differ: x64's `RUNTIME_FUNCTION` says where its
//! range begins and ends, arm64's only where it begins ([`WindowsFunctionTable::entries`]).

use cranelift_jit::JITModule;
use cranelift_module::{DataDescription, DataId, FuncId, Module};

use super::windows_x64::Xdata;
use super::Frames;
use crate::emit::EmitError;

/// The Windows a function table is for, which decides how its entries are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowsMachine {
    X64,
    Arm64,
}

impl WindowsMachine {
    /// This process's, when it runs on Windows on x64 or arm64.
    pub const HOST: Option<WindowsMachine> = if cfg!(all(windows, target_arch = "x86_64")) {
        Some(WindowsMachine::X64)
    } else if cfg!(all(windows, target_arch = "aarch64")) {
        Some(WindowsMachine::Arm64)
    } else {
        None
    };
}

/// One entry of a function table: offsets from the table's base address.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeFunction {
    /// Where the range of code starts.
    pub begin: u32,
    /// Where it ends (one past its last byte). Windows on arm64 takes the end from the
    /// record, and its entries leave this out ([`WindowsFunctionTable::entries`]).
    pub end: u32,
    /// Where its `UNWIND_INFO` (x64) or `.xdata` record (arm64) is.
    pub unwind_info: u32,
}

/// The function table of JIT code, as `RtlAddFunctionTable(functions, len, base)` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowsFunctionTable {
    /// The Windows the code is for.
    pub machine: WindowsMachine,
    /// The address every offset is from: the lowest of the code and its unwind information.
    pub base: u64,
    /// One entry per range of each function with a frame, sorted by address (Windows
    /// searches the table by bisection). x64: one range, unless the function has tail
    /// calls ([`super::windows_x64::WindowsFrame::ranges`]); arm64: one, or two when no
    /// single code describes an instruction of its prologue
    /// ([`super::windows_arm64::WindowsArm64Frame::records`]).
    pub functions: Vec<RuntimeFunction>,
}

impl WindowsFunctionTable {
    /// The table in the words `RtlAddFunctionTable` reads on [`Self::machine`], entry after
    /// entry: on x64 begin, end and `UNWIND_INFO` (`RUNTIME_FUNCTION` is three words), on
    /// arm64 begin and record (two words; the record's offset is a multiple of 4, and its
    /// two low bits, zero, say that the word points at a record rather than holding packed
    /// unwind data).
    pub fn entries(&self) -> Vec<u32> {
        self.functions
            .iter()
            .flat_map(|f| match self.machine {
                WindowsMachine::X64 => vec![f.begin, f.end, f.unwind_info],
                WindowsMachine::Arm64 => vec![f.begin, f.unwind_info],
            })
            .collect()
    }
}

/// The unwind information of the Windows functions defined in a JIT module, held by the
/// module as read-only data.
#[derive(Clone, Debug)]
pub struct JitUnwindData {
    /// The Windows the code is for.
    machine: WindowsMachine,
    /// The data object holding the unwind information.
    data: DataId,
    /// Each range of each function: the function's id, where the range begins and ends
    /// in its code, its unwind information's offset in the data.
    ranges: Vec<(FuncId, u32, u32, u32)>,
}

/// The unwind information of a module's Windows functions: the bytes, and each range of
/// each function with the offset of its unwind information in them.
type Layout = (Vec<u8>, Vec<(FuncId, u32, u32, u32)>);

impl JitUnwindData {
    /// Define the unwind information of every Windows x64 or arm64 function of `frames` in
    /// `module`, as one anonymous read-only data object; `None` when there is none
    /// (another target, no function with a frame, or `unwind_info` off). Call it before
    /// the module is finalized. An error, naming the function, when a Windows arm64
    /// prologue is one no unwind code can describe (as when an object is written).
    pub fn define<M: Module>(frames: &Frames, module: &mut M) -> Result<Option<Self>, EmitError> {
        let (machine, (bytes, ranges)) = if frames.windows_x64().next().is_some() {
            (WindowsMachine::X64, x64_layout(frames))
        } else {
            match arm64_layout(frames, module)? {
                (_, ranges) if ranges.is_empty() => return Ok(None),
                layout => (WindowsMachine::Arm64, layout),
            }
        };
        let module_error = |context: &str| {
            let context = context.to_string();
            move |source| EmitError::Module {
                context,
                source: Box::new(source),
            }
        };
        let data = module
            .declare_anonymous_data(false, false)
            .map_err(module_error("declaring the Windows unwind information"))?;
        let mut description = DataDescription::new();
        description.define(bytes.into_boxed_slice());
        description.set_align(4);
        module
            .define_data(data, &description)
            .map_err(module_error("defining the Windows unwind information"))?;
        Ok(Some(Self {
            machine,
            data,
            ranges,
        }))
    }

    /// The function table of the code in `module`, once it is finalized, from the addresses
    /// cranelift-jit gave the functions and the data. An error when they lie 4 GiB or more
    /// apart, which a table cannot say.
    pub fn function_table_in(&self, module: &JITModule) -> Result<WindowsFunctionTable, EmitError> {
        self.function_table(
            |id| module.get_finalized_function(id),
            module.get_finalized_data(self.data).0,
        )
    }

    /// The function table of code whose functions are at `address_of(id)` and whose
    /// unwind information is at `unwind_data`.
    fn function_table(
        &self,
        address_of: impl Fn(FuncId) -> *const u8,
        unwind_data: *const u8,
    ) -> Result<WindowsFunctionTable, EmitError> {
        let unwind_data = unwind_data as u64;
        let code: Vec<(u64, u64, u32)> = self
            .ranges
            .iter()
            .map(|&(id, begin, end, info)| {
                let start = address_of(id) as u64;
                (start + u64::from(begin), start + u64::from(end), info)
            })
            .collect();
        let base = code
            .iter()
            .map(|&(begin, _, _)| begin)
            .fold(unwind_data, u64::min);
        let offset = |address: u64| {
            u32::try_from(address - base).map_err(|_| {
                EmitError::UnwindTable(format!(
                    "the code and its unwind information lie 4 GiB or more apart \
                     (0x{base:x} to 0x{address:x})"
                ))
            })
        };
        let mut functions = code
            .iter()
            .map(|&(begin, end, info)| {
                Ok(RuntimeFunction {
                    begin: offset(begin)?,
                    end: offset(end)?,
                    unwind_info: offset(unwind_data + u64::from(info))?,
                })
            })
            .collect::<Result<Vec<_>, EmitError>>()?;
        functions.sort_unstable_by_key(|f| f.begin);
        Ok(WindowsFunctionTable {
            machine: self.machine,
            base,
            functions,
        })
    }
}

/// The `UNWIND_INFO`s of the Windows x64 functions of `frames`, as `.xdata` lays them out.
fn x64_layout(frames: &Frames) -> Layout {
    let windows: Vec<_> = frames.windows_x64().collect();
    let layout = Xdata::of(windows.iter().map(|&(_, len, frame)| (len, frame)));
    let ranges = windows
        .iter()
        .zip(&layout.functions)
        .flat_map(|(&(id, _, _), ranges)| {
            ranges
                .iter()
                .map(move |(range, info)| (id, range.begin, range.end, *info))
        })
        .collect();
    (layout.bytes, ranges)
}

/// The `.xdata` records of the Windows arm64 functions of `frames` (declared in `module`,
/// which names them in an error), one after another as in an object's `.xdata`.
fn arm64_layout<M: Module>(frames: &Frames, module: &M) -> Result<Layout, EmitError> {
    let mut bytes = Vec::new();
    let mut ranges = Vec::new();
    let name_of = |id| {
        let declaration = module.declarations().get_function_decl(id);
        declaration.linkage_name(id).into_owned()
    };
    for (id, records) in frames.windows_arm64_records(name_of)? {
        for (range, record) in records {
            // Records are whole words; an entry's two low bits must be zero.
            debug_assert_eq!(record.len() % 4, 0);
            let at = u32::try_from(bytes.len()).map_err(|_| {
                EmitError::UnwindTable("more than 4 GiB of unwind information".into())
            })?;
            ranges.push((id, range.start, range.end, at));
            bytes.extend_from_slice(&record);
        }
    }
    Ok((bytes, ranges))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Functions by id, code length and `UNWIND_INFO` offset, each one range.
    fn data(functions: Vec<(FuncId, u32, u32)>) -> JitUnwindData {
        JitUnwindData {
            machine: WindowsMachine::X64,
            data: DataId::from_u32(0),
            ranges: functions
                .into_iter()
                .map(|(id, len, info)| (id, 0, len, info))
                .collect(),
        }
    }

    #[test]
    fn the_table_is_sorted_and_counts_from_the_lowest_address() {
        let f = |i| FuncId::from_u32(i);
        let unwind = data(vec![(f(0), 32, 0), (f(1), 16, 8), (f(2), 48, 20)]);
        let at = [0x1_0000_0100u64, 0x1_0000_0040, 0x1_0000_0200];
        let with_unwind_data_at = |data: u64| {
            unwind
                .function_table(|id| at[id.as_u32() as usize] as *const u8, data as _)
                .unwrap()
        };
        let table = with_unwind_data_at(0x1_0000_1000);
        assert_eq!(table.base, 0x1_0000_0040);
        assert_eq!(
            table.functions,
            [
                RuntimeFunction {
                    begin: 0,
                    end: 0x10,
                    unwind_info: 0xfc8
                },
                RuntimeFunction {
                    begin: 0xc0,
                    end: 0xe0,
                    unwind_info: 0xfc0
                },
                RuntimeFunction {
                    begin: 0x1c0,
                    end: 0x1f0,
                    unwind_info: 0xfd4
                },
            ]
        );
        // Unwind information below the code moves the base down to it.
        let table = with_unwind_data_at(0x1_0000_0000);
        assert_eq!(table.base, 0x1_0000_0000);
        assert_eq!(table.functions[0].begin, 0x40);
    }

    #[test]
    fn entries_are_laid_out_as_each_machine_reads_them() {
        let f = |i| FuncId::from_u32(i);
        let mut unwind = data(vec![(f(0), 32, 0), (f(1), 16, 8)]);
        let at = [0x1000u64, 0x2000];
        let table = |unwind: &JitUnwindData| {
            unwind
                .function_table(|id| at[id.as_u32() as usize] as *const u8, 0x3000u64 as _)
                .unwrap()
                .entries()
        };
        // x64: begin, end, UNWIND_INFO.
        assert_eq!(table(&unwind), [0, 0x20, 0x2000, 0x1000, 0x1010, 0x2008]);
        // arm64: begin and record.
        unwind.machine = WindowsMachine::Arm64;
        assert_eq!(table(&unwind), [0, 0x2000, 0x1000, 0x2008]);
    }

    #[test]
    fn code_4_gib_from_its_unwind_information_is_an_error() {
        let unwind = data(vec![(FuncId::from_u32(0), 32, 0)]);
        let err = unwind
            .function_table(|_| 0x2_0000_0000u64 as *const u8, 0x1000u64 as _)
            .unwrap_err();
        assert!(err.to_string().contains("4 GiB"), "{err}");
    }
}
