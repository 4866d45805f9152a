//! Where the aarch64 breakpoint stepper (`fixtures/unwind/breakpoints_aarch64.c`) stops:
//! the instructions a first run under qemu ran, read from `qemu-aarch64 -d in_asm`'s log.
//! qemu translates a block of instructions only when it runs, and a block ends at each
//! branch, so the log names no word of data among the code (a literal, a jump table).
//! Shared by `tests/unwind.rs` and the differential harness.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `qemu`, a qemu-aarch64 command, made the first run of `exe` (its harness linked with the
/// stepper, no instructions to stop at): qemu logs the instructions it translates, and the
/// stepper writes where the code under test was loaded, each into a file beside `exe`
/// that [`stops_from_first_run`] reads.
pub fn first_run<'c>(qemu: &'c mut Command, exe: &Path) -> &'c mut Command {
    qemu.args(log_options(&exe.with_extension("log")))
        .env(CODE_RANGE_VARIABLE, exe.with_extension("range"))
        .arg(exe)
}

/// After [`first_run`] of `exe`: the file, beside it, of the instructions to stop at (the
/// offsets into the code under test of those the first run ran), for the second run.
pub fn stops_from_first_run(exe: &Path) -> Result<PathBuf, String> {
    let stops = exe.with_extension("stops");
    let text = code_range(&exe.with_extension("range"))?;
    write_stops(&exe.with_extension("log"), text, &stops)?;
    Ok(stops)
}

/// The qemu-aarch64 options that log the instructions it translates to `log`.
fn log_options(log: &Path) -> Vec<std::ffi::OsString> {
    vec!["-d".into(), "in_asm".into(), "-D".into(), log.into()]
}

/// The offsets into `text` (its address and length) of the instructions `log` (written
/// with [`log_options`]) names, written one hexadecimal number a line into `stops`, the
/// file the stepper reads; an error when there are none.
fn write_stops(log: &Path, (start, len): (u64, u64), stops: &Path) -> Result<(), String> {
    let log = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let offsets: BTreeSet<u64> = log
        .lines()
        .filter_map(|l| l.strip_prefix("0x")?.split(':').next())
        .filter_map(|a| u64::from_str_radix(a, 16).ok())
        .filter(|a| (start..start + len).contains(a))
        .map(|a| a - start)
        .collect();
    if offsets.is_empty() {
        return Err("qemu's log names no instruction of the code under test".into());
    }
    let listed: String = offsets.iter().map(|o| format!("{o:x}\n")).collect();
    std::fs::write(stops, listed).map_err(|e| format!("{}: {e}", stops.display()))
}

/// `objcopy`'s options that rename every code section of the relocatable `object`
/// (`.text`, and `.text.NAME` with a section per function) `merged_text`: the linker then
/// puts the code under test in one output section of that name, each input section still
/// kept or dropped by `--gc-sections` on its own.
pub fn rename_code_sections(object: &Path) -> Result<Vec<String>, String> {
    use cranelift_object::object::{Object as _, ObjectSection as _};
    let bytes = std::fs::read(object).map_err(|e| format!("{}: {e}", object.display()))?;
    let file = cranelift_object::object::File::parse(&*bytes)
        .map_err(|e| format!("{}: {e}", object.display()))?;
    let names: BTreeSet<String> = file
        .sections()
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .filter(|n| n == ".text" || n.starts_with(".text."))
        .collect();
    if names.is_empty() {
        return Err(format!("{}: no code section", object.display()));
    }
    Ok(names
        .into_iter()
        .flat_map(|n| ["--rename-section".to_owned(), format!("{n}=merged_text")])
        .collect())
}

/// GNU ld's option, for the link that puts the code under test (renamed `merged_text` by
/// [`rename_code_sections`]) into an executable or a shared library, that give that code
/// pages of its own: `merged_text` starts a page, and the next section starts another.
/// qemu-user drops every block it translated from a page when the page is written, and
/// the stepper writes a breakpoint at every stop: code of the harness or of libgcc that
/// shared a page with the code under test (`__clear_cache`, which the stepper calls at
/// every stop, lands there when the harness's own `.text` ends just before it) was
/// translated again at every stop, which made one stepped executable take 6.9 s instead
/// of 0.4 s. The linker script is written into `dir`.
pub fn code_on_pages_of_its_own(dir: &Path) -> Result<std::ffi::OsString, String> {
    // 64 KiB, the largest page an aarch64 Linux kernel uses (qemu-user's is 4 KiB).
    const SCRIPT: &str = "SECTIONS\n{\n  merged_text ALIGN(0x10000) : { *(merged_text) }\n  \
                          . = ALIGN(0x10000);\n}\nINSERT AFTER .text;\n";
    let script = dir.join("merged_text.ld");
    std::fs::write(&script, SCRIPT).map_err(|e| format!("{}: {e}", script.display()))?;
    let mut option = std::ffi::OsString::from("-Wl,-T,");
    option.push(&script);
    Ok(option)
}

/// The environment variable naming the file where the stepper, run without instructions to
/// stop at, writes the bounds of the code it was handed (where the code was loaded, in an
/// executable or a shared library): two hexadecimal addresses, [`code_range`] reads them.
const CODE_RANGE_VARIABLE: &str = "BREAKPOINTS_CODE_RANGE";

/// The address and length of the code whose bounds the stepper wrote into `file`
/// ([`CODE_RANGE_VARIABLE`]).
fn code_range(file: &Path) -> Result<(u64, u64), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let bad = || {
        format!(
            "{}: not two hexadecimal addresses: {text:?}",
            file.display()
        )
    };
    let mut words = text.split_whitespace().map(|w| u64::from_str_radix(w, 16));
    match (words.next(), words.next(), words.next()) {
        (Some(Ok(start)), Some(Ok(end)), None) if start < end => Ok((start, end - start)),
        _ => Err(bad()),
    }
}
