//! Running JIT code in a child process of the test binary.
//!
//! JIT code runs in the process that compiled it, so a merge fault that makes it crash (a
//! thunk jumping to a bad address: SIGSEGV; a trap: SIGILL) would kill the test binary
//! with every test in it, and say nothing about which configuration or call it was. A test
//! therefore re-executes its own binary with only a hidden (`#[ignore]`) test selected,
//! which reads its job from a scratch directory, runs it and writes its results there a
//! line per call as each returns, then [`END`]. The parent reads how the child ended and
//! how far its results got: the call that crashed is the one after the last line.
//! Included with `#[path]` by the test files that run JIT code (`tests/differential.rs`,
//! `tests/similar_exec.rs`).

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};

/// The last line of complete results.
pub const END: &str = "end";

/// Lines of a failed child's standard error shown (its last ones).
const STDERR_LINES: usize = 12;

/// The name the test binary knows a test by: `module_path` (of the module that defines
/// it, from `module_path!()`) without the crate's name, then `test`.
pub fn test_name(module_path: &str, test: &str) -> String {
    let path = module_path
        .split_once("::")
        .map_or(String::new(), |(_, p)| format!("{p}::"));
    format!("{path}{test}")
}

/// Run the current test binary's hidden test `test` (a full name, [`test_name`]) alone,
/// through `launch` (the binary's path to a command: `Command::new`, or a wrapper such
/// as a timeout), with `env_var` set to `dir`, the child's scratch directory.
pub fn run_hidden_test(
    test: &str,
    env_var: &str,
    dir: &Path,
    launch: impl FnOnce(&OsStr) -> Command,
) -> Result<Output, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    launch(exe.as_os_str())
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(env_var, dir)
        .output()
        .map_err(|e| format!("{}: {e}", exe.display()))
}

/// How a child that did not succeed ended, and the last lines of its standard error:
/// `killed by signal 11 (SIGSEGV); the last lines …`. `exited` words an exit status that
/// is not a signal (what a timeout wrapper's status means, say).
pub fn failure(out: &Output, exited: impl Fn(&ExitStatus) -> String) -> (String, String) {
    let how = match signal(&out.status) {
        Some(n) => format!("killed by signal {n} ({})", signal_name(n)),
        None => format!("exited: {}", exited(&out.status)),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let tail = match lines.len() {
        0 => "its standard error is empty".to_string(),
        n => format!(
            "the last lines of its standard error:\n    {}",
            lines[n.saturating_sub(STDERR_LINES)..].join("\n    ")
        ),
    };
    (how, tail)
}

/// The lines of a child's complete results (without the [`END`] line), from what the
/// child of the hidden test `test` wrote (`None`: no file); an error when it wrote
/// nothing or its results stop early.
pub fn complete(written: Option<String>, test: &str) -> Result<String, String> {
    let Some(text) = written else {
        let exe = std::env::current_exe().unwrap_or_default();
        return Err(format!(
            "the JIT child wrote no results (is {test} a test of {}?)",
            exe.display()
        ));
    };
    match text.strip_suffix(&format!("{END}\n")) {
        Some(lines) => Ok(lines.to_string()),
        None => Err("the JIT child's results end early".to_string()),
    }
}

/// In the child: its scratch directory, from `env_var`, with core files off (a crash is
/// expected now and then: a planted one, or a merge fault). `None`, with a notice, when
/// the hidden test runs without it (by hand, `--ignored`): it then has nothing to do.
pub fn child_dir(env_var: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os(env_var) else {
        eprintln!("{env_var} is not set: not started as a child of its test");
        return None;
    };
    no_core_files();
    Some(PathBuf::from(dir))
}

/// In the child: the results file, created when the first call is about to run and
/// written straight through, a line per call, so that after a crash its lines say which
/// calls returned; [`Results::end`] marks them complete.
pub struct Results(std::fs::File);

impl Results {
    pub fn create(path: &Path) -> Results {
        Results(std::fs::File::create(path).unwrap())
    }

    pub fn record(&mut self, line: &str) {
        self.0.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    pub fn end(mut self) {
        self.record(END);
    }
}

fn no_core_files() {
    #[cfg(unix)]
    // SAFETY: setrlimit with a valid pointer to a limit; it changes only this process.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
    }
}

#[cfg(unix)]
fn signal(status: &ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(status)
}

#[cfg(not(unix))]
fn signal(_: &ExitStatus) -> Option<i32> {
    None
}

/// The usual name of signal `n`, for what a crashed child shows.
fn signal_name(n: i32) -> &'static str {
    match n {
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 if cfg!(target_os = "linux") => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        _ => "another signal",
    }
}
