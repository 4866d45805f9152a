//! Windows executables run under Wine, for the tests that run x86_64 Windows code (the
//! differential tests' `Arch::X86_64Windows`, `tests/unwind.rs`'s SEH exceptions; included
//! with `#[path]`): one Wine prefix for every run of the test process,
//! made once (Wine makes a prefix on its first run, which takes seconds and must not race),
//! and a Wine server that stays for five minutes after its last client, so that each run
//! costs a process, not a Wine start.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The prefix: under the test target's scratch directory, never the user's `~/.wine`.
fn prefix() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wine")
}

/// `program` (a Wine tool or `wine`) with the prefix and without Wine's diagnostics.
fn with_prefix(cmd: &mut Command) -> &mut Command {
    cmd.env("WINEPREFIX", prefix()).env("WINEDEBUG", "-all")
}

/// Start the Wine server, kept for 300 s after its last client, unless one runs (then it
/// does nothing). Its output goes nowhere: the server stays behind as a daemon, and would
/// hold a pipe open for as long as it lives.
fn start_server() -> std::io::Result<std::process::ExitStatus> {
    with_prefix(&mut Command::new("wineserver"))
        .arg("-p300")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
}

/// Make the prefix, once per process; why not, when it fails.
pub fn ready() -> Result<(), String> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    READY
        .get_or_init(|| {
            std::fs::create_dir_all(prefix()).map_err(|e| e.to_string())?;
            start_server().map_err(|e| format!("wineserver: {e}"))?;
            let status = with_prefix(&mut Command::new("wineboot"))
                .arg("-i")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|e| format!("wineboot: {e}"))?;
            match status.success() {
                true => Ok(()),
                false => Err(format!("wineboot -i failed ({status})")),
            }
        })
        .clone()
}

/// `exe` under Wine, run by the command `wine()` makes (`wine`, or `wine` under a
/// timeout), the server started first if it has gone: the command and what it did. A run
/// that ends with status 1 having written nothing at all did not start (Wine's own failure,
/// seen once under load, when the server left as the run began: a program that crashes
/// says so on standard error and ends otherwise) and is run again, at most twice.
pub fn run(
    exe: &std::path::Path,
    wine: impl Fn() -> Command,
) -> std::io::Result<(Command, std::process::Output)> {
    let mut attempts = 0;
    loop {
        let _ = start_server();
        let mut cmd = wine();
        with_prefix(cmd.arg(exe));
        let out = cmd.output()?;
        let did_not_start =
            out.status.code() == Some(1) && out.stdout.is_empty() && out.stderr.is_empty();
        attempts += 1;
        if !did_not_start || attempts == 3 {
            return Ok((cmd, out));
        }
    }
}
