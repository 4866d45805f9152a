//! Windows x64 unwind information for JIT code.
//!
//! Windows finds a function's `UNWIND_INFO` through a table of `RUNTIME_FUNCTION`s that
//! the JIT registers with `RtlAddFunctionTable`. Every field of an entry is a 32-bit offset
//! from the one base address the table is registered with, the `UNWIND_INFO`'s own
//! included. So the unwind information has to lie within 4 GiB of the code, above the base.
//! A heap buffer need not. The `UNWIND_INFO`s therefore go into the JIT module itself, as one
//! read-only data object that cranelift-jit allocates beside the code
//! ([`JitUnwindData::define`], before `finalize_definitions()`). Once the module is
//! finalized, the table is made from the addresses cranelift-jit gave
//! ([`JitUnwindData::function_table_in`]). On Windows it is registered with this process
//! ([`super::JitFrames`]); elsewhere it is handed to whoever runs the code (a JIT image run
//! under Wine in this project's tests).
//!
//! The `UNWIND_INFO`s are those of `.xdata` in objects ([`super::windows_x64`]).

use cranelift_jit::JITModule;
use cranelift_module::{DataDescription, DataId, FuncId, Module};

use super::windows_x64::Xdata;
use super::Frames;
use crate::emit::EmitError;

/// One entry of a function table, as Windows declares `RUNTIME_FUNCTION` on x64: offsets
/// from the table's base address.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeFunction {
    /// Where the function's code starts.
    pub begin: u32,
    /// Where it ends (one past its last byte).
    pub end: u32,
    /// Where its `UNWIND_INFO` is.
    pub unwind_info: u32,
}

/// The function table of JIT code, as `RtlAddFunctionTable(functions, len, base)` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowsFunctionTable {
    /// The address every offset is from: the lowest of the code and its unwind information.
    pub base: u64,
    /// One entry per range of each function with a frame (one range, unless it has tail
    /// calls: [`super::windows_x64::WindowsFrame::ranges`]), sorted by address (Windows
    /// searches the table by bisection).
    pub functions: Vec<RuntimeFunction>,
}

/// The `UNWIND_INFO`s of the Windows x64 functions defined in a JIT module, held by the
/// module as read-only data.
#[derive(Clone, Debug)]
pub struct JitUnwindData {
    /// The data object holding every `UNWIND_INFO`.
    data: DataId,
    /// Each range of each function: the function's id, where the range begins and ends
    /// in its code, its `UNWIND_INFO`'s offset in the data.
    ranges: Vec<(FuncId, u32, u32, u32)>,
}

impl JitUnwindData {
    /// Define the `UNWIND_INFO` of every Windows x64 function of `frames` in `module`, as
    /// one anonymous read-only data object; `None` when there is none (another target, no
    /// function with a frame, or `unwind_info` off). Call it before the module is
    /// finalized.
    pub fn define<M: Module>(frames: &Frames, module: &mut M) -> Result<Option<Self>, EmitError> {
        let windows: Vec<_> = frames.windows_x64().collect();
        if windows.is_empty() {
            return Ok(None);
        }
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
        description.define(layout.bytes.into_boxed_slice());
        description.set_align(4);
        module
            .define_data(data, &description)
            .map_err(module_error("defining the Windows unwind information"))?;
        Ok(Some(Self { data, ranges }))
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
    /// `UNWIND_INFO`s are at `unwind_data`.
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
        Ok(WindowsFunctionTable { base, functions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Functions by id, code length and `UNWIND_INFO` offset, each one range.
    fn data(functions: Vec<(FuncId, u32, u32)>) -> JitUnwindData {
        JitUnwindData {
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
    fn code_4_gib_from_its_unwind_information_is_an_error() {
        let unwind = data(vec![(FuncId::from_u32(0), 32, 0)]);
        let err = unwind
            .function_table(|_| 0x2_0000_0000u64 as *const u8, 0x1000u64 as _)
            .unwrap_err();
        assert!(err.to_string().contains("4 GiB"), "{err}");
    }
}
