//! Running the `clif-merge` binary from a test: its exit status and what it printed.
//! Included with `#[path]` by the test files that run the command; each adds the checks it
//! needs as methods of [`Run`].

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// Arguments from strings and paths.
#[allow(unused_macros)]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        vec![$(std::ffi::OsString::from($a)),*]
    };
}

/// What one run of the command did.
pub struct Run {
    /// The exit status (`None` when a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `clif-merge args` in `dir` (the test's working directory if `None`).
pub fn run_in<I, S>(dir: Option<&Path>, args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let mut command = Command::new(env!("CARGO_BIN_EXE_clif-merge"));
    command.args(args.into_iter().map(Into::into));
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let output = command.output().expect("the command runs");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
