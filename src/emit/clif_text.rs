//! A function as CLIF text that cranelift-reader parses back to the same function.
//!
//! Cranelift 0.135's printer (`Function::display`) leaves out the memory flags of
//! `atomic_rmw` and `atomic_cas`, which the reader parses (`atomic_rmw.i64 big notrap add
//! v0, v1`): printed and read back, such an access would take the default flags, little
//! or big endian as the target is, trapping with `heap_oob`, in no alias region. So
//! `--emit-clif` would hand its reader another program. It also leaves out the
//! declarations of dynamic vector types (`dt0 = i32x4*gv0`), so a function with a dynamic
//! stack slot (`dss0 = explicit_dynamic_slot dt0`) would not read back at all. This is
//! Cranelift's printer with those flags and declarations written in; every other line is
//! the printer's own.

use std::fmt;

use cranelift_codegen::entity::SecondaryMap;
use cranelift_codegen::ir::{Block, Function, Inst, InstructionData, Value};
use cranelift_codegen::write::{decorate_function, write_operands, FuncWriter, PlainWriter};

/// `func` as CLIF text, every instruction's memory flags and every dynamic type included.
pub fn function_text(func: &Function) -> String {
    let mut text = String::new();
    decorate_function(&mut Complete, &mut text, func)
        .expect("writing CLIF into a String does not fail");
    text
}

/// Cranelift's [`PlainWriter`], which writes the flags of the atomic read-modify-writes
/// and the dynamic types.
struct Complete;

impl FuncWriter for Complete {
    /// The dynamic types first (the reader looks up neither what they name nor what names
    /// them until the whole preamble is read), then the printer's own preamble.
    fn write_preamble(
        &mut self,
        w: &mut dyn fmt::Write,
        func: &Function,
    ) -> Result<bool, fmt::Error> {
        let mut any = false;
        for (dt, data) in func.dfg.dynamic_types.iter() {
            any = true;
            let definition = format_args!("{}*{}", data.base_vector_ty, data.dynamic_scale);
            self.write_entity_definition(w, func, dt.into(), &definition)?;
        }
        Ok(self.super_preamble(w, func)? || any)
    }

    fn write_block_header(
        &mut self,
        w: &mut dyn fmt::Write,
        func: &Function,
        block: Block,
        indent: usize,
    ) -> fmt::Result {
        PlainWriter.write_block_header(w, func, block, indent)
    }

    fn write_instruction(
        &mut self,
        w: &mut dyn fmt::Write,
        func: &Function,
        aliases: &SecondaryMap<Value, Vec<Value>>,
        inst: Inst,
        indent: usize,
    ) -> fmt::Result {
        let flags = match func.dfg.insts[inst] {
            InstructionData::AtomicRmw { flags, .. } | InstructionData::AtomicCas { flags, .. } => {
                flags
            }
            _ => return PlainWriter.write_instruction(w, func, aliases, inst, indent),
        };
        // The printer writes the instruction's line as its results, its opcode and then
        // what `write_operands` writes, then a line per alias of a result: the flags go
        // between the opcode and the operands, as for a load.
        let mut lines = String::new();
        PlainWriter.write_instruction(&mut lines, func, aliases, inst, indent)?;
        let mut operands = String::new();
        write_operands(&mut operands, &func.dfg, inst)?;
        operands.push('\n');
        let at = lines.find(&operands).ok_or(fmt::Error)?;
        let flags = func.dfg.mem_flags[flags].to_string();
        w.write_str(&lines[..at])?;
        w.write_str(&flags)?;
        w.write_str(&lines[at..])
    }
}

#[cfg(test)]
mod tests {
    use super::function_text;

    fn parse(text: &str) -> cranelift_codegen::ir::Function {
        let mut parsed = crate::read::parse_clif(text, "atomics.clif").expect("parses");
        *parsed.remove(0).func
    }

    const ATOMICS: &str = "function %f(i64, i64) -> i64 {
    region0 = 7 \"shared\"

block0(v0: i64, v1: i64):
    v2 = atomic_rmw.i64 big user3 add v0, v1
    v3 = atomic_cas notrap aligned region0 v0, v1, v2
    v5 = iconst.i32 1
    v4 = atomic_rmw.i32 little xchg v0, v5  ; v5 = 1
    v6 = uextend.i64 v4
    v7 = iadd v3, v6
    v8 -> v7
    return v8
}
";

    #[test]
    fn atomic_flags_are_written_and_read_back() {
        let func = parse(ATOMICS);
        let text = function_text(&func);
        for line in [
            "v2 = atomic_rmw.i64 user3 big add v0, v1\n",
            "v3 = atomic_cas notrap aligned region0 v0, v1, v2\n",
            "v4 = atomic_rmw.i32 little xchg v0, v5  ; v5 = 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        // Cranelift's own printer leaves them out: what this module is for.
        assert!(!func.display().to_string().contains("user3 big"));
        let again = parse(&text);
        assert_eq!(function_text(&again), text);
        assert_eq!(memory_flags(&func), memory_flags(&again));
        assert_eq!(memory_flags(&func).len(), 3);
    }

    /// The memory flags of `func`'s instructions, in layout order.
    fn memory_flags(
        func: &cranelift_codegen::ir::Function,
    ) -> Vec<cranelift_codegen::ir::MemFlagsData> {
        let insts = func
            .layout
            .blocks()
            .flat_map(|b| func.layout.block_insts(b));
        insts
            .filter_map(|i| func.dfg.insts[i].memflags_data(&func.dfg))
            .collect()
    }

    /// Every function of every fixture that reads, written and read back: the same text
    /// again, what Cranelift's printer prints of it and every instruction's memory flags
    /// as the function written, and a function that verifies if that one did (a
    /// declaration left out would leave a name undefined).
    #[test]
    fn every_fixture_function_reads_back_as_written() {
        use cranelift_codegen::settings::{self, Flags};
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let files = crate::read::expand_inputs(&[root]).expect("fixtures");
        let flags = Flags::new(settings::builder());
        let (mut functions, mut dynamic) = (0, 0);
        for file in &files {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            let Ok(parsed) = crate::read::parse_clif(&text, file) else {
                continue;
            };
            for f in parsed {
                let written = function_text(&f.func);
                let again = crate::read::parse_clif(&written, file)
                    .unwrap_or_else(|e| panic!("{}: {e}\n{written}", file.display()));
                assert_eq!(again.len(), 1, "{}:\n{written}", file.display());
                assert_eq!(function_text(&again[0].func), written, "{}", file.display());
                let (before, after) = (&f.func, &again[0].func);
                assert_eq!(before.display().to_string(), after.display().to_string());
                assert_eq!(memory_flags(before), memory_flags(after), "{written}");
                if crate::read::verify_all(std::slice::from_ref(&f), &flags).is_ok() {
                    if let Err(e) = crate::read::verify_all(&again, &flags) {
                        panic!("{}: read back, {e}\n{written}", file.display());
                    }
                }
                functions += 1;
                dynamic += usize::from(!f.func.dfg.dynamic_types.is_empty());
            }
        }
        assert!(functions > 1000, "only {functions} functions");
        assert!(
            dynamic > 0,
            "no function with a dynamic type among {functions}"
        );
    }

    #[test]
    fn every_other_instruction_is_written_as_cranelift_writes_it() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut files = vec![root.join("example.clif")];
        for dir in ["exec", "similar/exec"] {
            let mut more: Vec<_> = std::fs::read_dir(root.join(dir))
                .expect("fixtures")
                .map(|e| e.expect("an entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "clif"))
                .collect();
            more.sort();
            files.extend(more);
        }
        let mut functions = 0;
        for file in &files {
            let text = std::fs::read_to_string(file).expect("readable");
            for f in crate::read::parse_clif(&text, file).expect("parses") {
                assert_eq!(function_text(&f.func), f.func.display().to_string());
                functions += 1;
            }
        }
        assert!(
            functions > 100,
            "only {functions} functions in {}",
            files.len()
        );
    }
}
