//! Differential execution: a generated module ([`gen`]) compiled unmerged and merged in every
//! configuration a user can pick, each build run on the same inputs, the results compared.
//!
//! Configurations: an object written by the `clif-merge` command line, with PIC (linked
//! into a shared library that a C harness calls) and without (linked into a non-PIE
//! executable), for x86_64 (run natively) and aarch64 (run under `qemu-aarch64` with the
//! cross toolchain), and for x86_64 Windows with PIC and without, each linked into an
//! executable by MinGW-w64's gcc and run under Wine ([`wine`]); and cranelift-jit through the backend
//! plugin, on the host in a child process of the test binary ([`jit`], so that JIT code
//! that crashes fails its configuration instead of ending the test process; on an x86_64
//! Linux host the child registers the code's frames as an embedder does and steps through
//! each entry's first call as an executable's harness does), and for
//! aarch64 and Windows as an image run under qemu or Wine ([`jit_image`]); every run of generated code
//! is under a timeout (120 s, `CLIF_MERGE_DIFF_TIMEOUT`), so code a merge fault makes loop
//! forever fails its configuration instead of hanging the test. Each is built with
//! `--merge-functions disabled`, `trampolines` and `aliases`, each with and without
//! `--merge-similar`; the reference is `disabled` without merge-similar, which defines
//! every function as written. Each program is also built with one of the command line's
//! other options ([`Variant`]: `--function-sections` linked with `--gc-sections`,
//! `--addresses-insignificant`, `--no-cycles`, `--no-code-folding`,
//! `--no-alignment-merging`, `unwind_info=false`, `--clif-thunks` (the thunks of targets
//! without a jump thunk; also with `preserve_frame_pointers=false`), `--emit-clif`, whose
//! CLIF is compiled as written into the object that runs, and aarch64's branch protection
//! and pointer authentication, alone and together, with the A key and with the B key in
//! every function; the JIT builds with the plugin's same options, but for function sections
//! and CLIF), in `trampolines` and `aliases` with merge-similar, and unmerged where the
//! option changes code that is not merged ([`Variant::changes_unmerged_code`]); each
//! program takes one, in turn.
//!
//! What is compared, for every entry and input: the result, a hash of the memory buffer
//! the entry may write, the return address the entry saw (as an offset into the harness
//! function that called it) and its frame pointer (as a distance from that function's
//! buffer). A function address an entry returns is compared by the set of entries whose
//! address it is. With `aliases` or `--addresses-insignificant` (addresses insignificant
//! by the user's word) an address
//! may equal more names than before, and results that compare addresses are not compared.

#[path = "../common/breakpoint_stops.rs"]
pub mod breakpoint_stops;
#[path = "../common/child.rs"]
pub mod child;
pub mod gen;
pub mod jit_image;
#[path = "../common/jit_region.rs"]
pub mod jit_region;
pub mod stated_merges;
#[path = "../common/wine.rs"]
pub mod wine;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use gen::{flags, Arg, Program};

/// Target architectures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
    /// x86_64 Windows (`x86_64-pc-windows-gnu`: COFF, `.pdata` unwind information): an
    /// executable linked by MinGW-w64's gcc, run under Wine ([`wine`]).
    X86_64Windows,
}

impl Arch {
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
            Arch::X86_64Windows => "x86_64-pc-windows-gnu",
        }
    }
    pub fn cc(self) -> &'static str {
        match self {
            Arch::X86_64 => "cc",
            Arch::Aarch64 => "aarch64-linux-gnu-gcc",
            Arch::X86_64Windows => "x86_64-w64-mingw32-gcc",
        }
    }
    /// The outputs built for it on this machine: objects linked into a shared library and
    /// into an executable, and cranelift-jit's code (on the host in a child process,
    /// elsewhere as an image: aarch64's under qemu, Windows' under Wine); for Windows
    /// also an executable from the object with PIC.
    pub fn outputs(self) -> Vec<Output> {
        match self {
            Arch::X86_64Windows => vec![
                Output::PicExecutable,
                Output::Executable,
                Output::SharedLibrary,
                Output::Jit,
            ],
            Arch::X86_64 | Arch::Aarch64 => {
                let mut outputs = vec![Output::SharedLibrary, Output::Executable];
                if self.is_host() || self == Arch::Aarch64 {
                    outputs.push(Output::Jit);
                }
                outputs
            }
        }
    }

    /// Whether `program` builds into `output` for the architecture; why not, when it does
    /// not: a module for another architecture only ([`Program::architecture`]), or, for a
    /// Windows object, a preemptible entry. MinGW's GNU ld (2.40) does not resolve a weak
    /// external whose search type is `IMAGE_WEAK_EXTERN_SEARCH_ALIAS`, which is how
    /// cranelift-object (through the `object` crate) writes a preemptible function in COFF,
    /// from another object: the harness's reference to a preemptible entry stays
    /// undefined, merged or not (GCC writes `SEARCH_NOLIBRARY`). Calls within the object
    /// resolve, and a JIT links nothing.
    pub fn links(self, output: Output, program: &Program) -> Result<(), String> {
        if let Some(only) = &program.architecture {
            if self.triple().split('-').next() != Some(only.as_str()) {
                return Err(format!("the module is for {only} only"));
            }
        }
        let preemptible = program
            .entries
            .iter()
            .find(|e| program.linkage_of(&e.name) == "preemptible");
        match (self, output, preemptible) {
            (
                Arch::X86_64Windows,
                Output::SharedLibrary | Output::Executable | Output::PicExecutable,
                Some(entry),
            ) => Err(format!(
                "MinGW's ld does not link the harness's reference to the preemptible entry {} (a COFF weak external)",
                entry.name
            )),
            (Arch::X86_64Windows | Arch::X86_64 | Arch::Aarch64, _, _) => Ok(()),
        }
    }

    /// Whether this machine runs the architecture's code natively (and cranelift-jit's
    /// code in this process).
    pub fn is_host(self) -> bool {
        match self {
            Arch::X86_64 => cfg!(all(target_arch = "x86_64", target_os = "linux")),
            Arch::Aarch64 => cfg!(all(target_arch = "aarch64", target_os = "linux")),
            Arch::X86_64Windows => false,
        }
    }
    /// Whether this machine can link and run code for the architecture; a one-line
    /// notice says what is missing when not.
    pub fn available(self) -> Result<(), String> {
        // The first of `tools` (each with the packages that give it) this machine lacks.
        let need = |tools: &[(&str, &str)]| match tools.iter().find(|(tool, _)| {
            !Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        }) {
            None => Ok(()),
            Some((tool, "")) => Err(format!("no {tool}")),
            Some((tool, packages)) => Err(format!("no {tool} (Debian: {packages})")),
        };
        match self {
            Arch::X86_64 if self.is_host() => need(&[("cc", "")]),
            Arch::X86_64 => Err("not an x86_64 Linux host".into()),
            Arch::X86_64Windows => need(&[
                ("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64"),
                ("wine", "wine64"),
            ])
            .and_then(|()| wine::ready()),
            Arch::Aarch64 => need(&[
                (
                    "aarch64-linux-gnu-gcc",
                    "gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
                ),
                ("qemu-aarch64", "qemu-user"),
            ]),
        }
    }
}

/// How the code is built and loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// An object with PIC, linked into a shared library (on Windows a DLL, which exports
    /// every function and whose entries the harness calls through its import table).
    SharedLibrary,
    /// An object without PIC, linked into a non-PIE executable.
    Executable,
    /// An object with PIC, linked into an executable: for Windows, where `is_pic=true`
    /// (the command line's default) is how most objects are written, DLL or not.
    PicExecutable,
    /// cranelift-jit through the plugin (no PIC): on the host in a child process of the test
    /// binary, elsewhere as an image ([`jit_image`]) under qemu (aarch64) or Wine (Windows).
    Jit,
}

/// `--merge-functions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Disabled,
    Trampolines,
    Aliases,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Disabled, Mode::Trampolines, Mode::Aliases];
    fn flag(self) -> &'static str {
        match self {
            Mode::Disabled => "disabled",
            Mode::Trampolines => "trampolines",
            Mode::Aliases => "aliases",
        }
    }
}

/// The command line's other options, each a configuration a user can pick (and the
/// plugin's, for those a JIT has: [`Variant::applies`]); builds are made with them besides
/// the default options (`Plain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The default options.
    Plain,
    /// `--function-sections`, linked with `--gc-sections` as such objects are: every
    /// function reached from an entry must be reached through a relocation or symbol.
    FunctionSections,
    /// `--addresses-insignificant`: the user's word that no function's address is
    /// compared, which makes folded functions aliases in `trampolines` mode too.
    AddressesInsignificant,
    /// `--no-cycles`: mutually recursive groups are left apart.
    NoCycles,
    /// `--no-code-folding`: no folding of bodies that compile to the same machine code.
    NoCodeFolding,
    /// `--no-alignment-merging`: merge-similar's groups with holes only.
    NoAlignmentMerging,
    /// `--align-unlike-blocks`: alignment merging also pairs functions whose blocks do not
    /// pair one to one (blocks one side lacks, other parameter types), so that the
    /// near-twin families' extra blocks are merged.
    UnlikeBlocks,
    /// `--set unwind_info=false`: no `.eh_frame`.
    NoUnwindInfo,
    /// `--emit-clif`: the merged module written as CLIF, which is then compiled as it is
    /// (`--merge-functions disabled`) into the object that runs (objects only).
    EmittedClif,
    /// `--clif-thunks`: thunks compiled from CLIF (a call and a return, or a tail call)
    /// instead of written as a jump, as on targets that have no jump thunk.
    ClifThunks,
    /// aarch64's branch protection, `--set use_bti=true` (the plugin's ISA the same), where
    /// it is enforced, so that an indirect call into the code (the harness calls every
    /// entry through a pointer) or an indirect branch within it that lands anywhere but a
    /// landing pad is an illegal instruction under qemu: the shared library and the
    /// executable are linked with `-z force-bti`, so that the loader maps their code
    /// guarded (without the C runtime's start files, which in this cross toolchain have
    /// no landing pads: the executable starts at [`START_WITH_LANDING_PAD`], and its
    /// harness has landing pads, [`harness_flags`]); the JIT image's loader maps the image's
    /// code guarded (`PROT_BTI`), all but the page of its import stubs.
    BranchProtection,
    /// aarch64's pointer authentication, `--set sign_return_address=true`: every function
    /// that saves its return address signs it on entry and authenticates it before
    /// returning (qemu's CPU has the instructions, so a wrong signature faults), and a
    /// function that reads its return address strips the signature (`xpaclri`).
    PointerAuthentication,
    /// Both, as `-mbranch-protection=standard` builds C code, for a target with pointer
    /// authentication (FEAT_PAuth, which qemu's CPU has): `--set use_bti=true --set
    /// sign_return_address=true --set has_pauth=true`, enforced as with
    /// [`Variant::BranchProtection`]. A function that signs its return address then starts
    /// with `paciasp`, which is its landing pad, instead of `bti c`, and returns with
    /// `retaa`, which authenticates and returns in one instruction (the other variants'
    /// `autiasp` and `ret` are hints that run on any aarch64).
    StandardBranchProtection,
    /// Both with the B key, in every function, as `-mbranch-protection=pac-ret+leaf+b-key+bti`
    /// builds C code: `--set use_bti=true --set sign_return_address=true --set
    /// sign_return_address_with_bkey=true --set sign_return_address_all=true`, enforced as
    /// with [`Variant::BranchProtection`]. Every function, with a frame or without, signs
    /// its return address and starts with `pacibsp` (`pacibz` for a `tail` function, which
    /// is no landing pad), and the CIE of its unwind information says `B`.
    BKeyBranchProtection,
    /// `--clif-thunks --set preserve_frame_pointers=false`: a target without a jump thunk at
    /// Cranelift's default settings (every other build keeps frame pointers, as wasmtime
    /// does). Leaf functions have no frame (aarch64), and the thunks of `tail` functions call
    /// and return instead of tail-calling, which needs frame pointers on x86_64. Its
    /// programs have no frame readers and no `return_call` (both need frame pointers:
    /// [`Variant::keeps_frame_pointers`]).
    ClifThunksNoFramePointers,
}

impl Variant {
    /// Every variant but `Plain`, in the order seeds take them.
    pub const OTHERS: [Variant; 14] = [
        Variant::FunctionSections,
        Variant::AddressesInsignificant,
        Variant::NoCycles,
        Variant::NoCodeFolding,
        Variant::NoAlignmentMerging,
        Variant::NoUnwindInfo,
        // Seed 6 of the default run: its program has pairs that merge with unlike blocks.
        Variant::UnlikeBlocks,
        Variant::ClifThunks,
        Variant::BranchProtection,
        Variant::PointerAuthentication,
        Variant::StandardBranchProtection,
        Variant::BKeyBranchProtection,
        Variant::ClifThunksNoFramePointers,
        Variant::EmittedClif,
    ];

    /// The command-line arguments it adds: its options, then `--set` for each of its
    /// [`Variant::settings`].
    fn args(self) -> Vec<String> {
        let options: &[&str] = match self {
            Variant::FunctionSections => &["--function-sections"],
            Variant::AddressesInsignificant => &["--addresses-insignificant"],
            Variant::NoCycles => &["--no-cycles"],
            Variant::NoCodeFolding => &["--no-code-folding"],
            Variant::NoAlignmentMerging => &["--no-alignment-merging"],
            Variant::UnlikeBlocks => &["--align-unlike-blocks"],
            Variant::ClifThunks | Variant::ClifThunksNoFramePointers => &["--clif-thunks"],
            // The CLIF is written besides the object ([`run_object`] names the file).
            Variant::EmittedClif => &[],
            Variant::Plain
            | Variant::NoUnwindInfo
            | Variant::BranchProtection
            | Variant::PointerAuthentication
            | Variant::StandardBranchProtection
            | Variant::BKeyBranchProtection => &[],
        };
        let settings = self
            .settings()
            .iter()
            .flat_map(|(name, value)| ["--set".to_string(), format!("{name}={value}")]);
        options
            .iter()
            .map(|o| o.to_string())
            .chain(settings)
            .collect()
    }

    /// The code-generation settings it sets (`NAME`, `VALUE`), on the command line as in the
    /// plugin's ISA.
    pub fn settings(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Variant::NoUnwindInfo => &[("unwind_info", "false")],
            Variant::BranchProtection => &[("use_bti", "true")],
            Variant::PointerAuthentication => &[("sign_return_address", "true")],
            Variant::StandardBranchProtection => &[
                ("use_bti", "true"),
                ("sign_return_address", "true"),
                ("has_pauth", "true"),
            ],
            Variant::BKeyBranchProtection => &[
                ("use_bti", "true"),
                ("sign_return_address", "true"),
                ("sign_return_address_with_bkey", "true"),
                ("sign_return_address_all", "true"),
            ],
            Variant::ClifThunksNoFramePointers => &[("preserve_frame_pointers", "false")],
            Variant::Plain
            | Variant::FunctionSections
            | Variant::AddressesInsignificant
            | Variant::NoCycles
            | Variant::NoCodeFolding
            | Variant::NoAlignmentMerging
            | Variant::UnlikeBlocks
            | Variant::EmittedClif
            | Variant::ClifThunks => &[],
        }
    }

    /// Whether it sets the code-generation setting `name` to `value` ([`Variant::settings`]).
    fn sets(self, name: &str, value: &str) -> bool {
        self.settings().contains(&(name, value))
    }

    /// Whether it changes the code of functions that are not merged (a code-generation
    /// setting, or how the object is written or linked), so that it is also built with
    /// `--merge-functions disabled`: what then fails is not a merge.
    pub fn changes_unmerged_code(self) -> bool {
        !self.settings().is_empty()
            || matches!(self, Variant::FunctionSections | Variant::EmittedClif)
    }

    /// Whether Cranelift starts a `tail` function that signs its return address with an
    /// instruction that is no landing pad (`paciaz`, `pacibz`) where branch protection is
    /// enforced: such a function can only be called directly
    /// ([`gen::Program::call_tail_functions_directly`]).
    pub fn tail_functions_unlanded(self) -> bool {
        self.guarded() && self.sets("sign_return_address", "true")
    }

    /// Whether thunks are compiled from CLIF (`--clif-thunks`).
    pub fn clif_thunks(self) -> bool {
        matches!(
            self,
            Variant::ClifThunks | Variant::ClifThunksNoFramePointers
        )
    }

    /// Whether it keeps frame pointers, which reading the frame (`get_frame_pointer`,
    /// `get_return_address`) and, on x86_64, `return_call` need: its programs have neither
    /// otherwise.
    pub fn keeps_frame_pointers(self) -> bool {
        !self.sets("preserve_frame_pointers", "false")
    }

    /// Whether its code runs where aarch64's branch protection is enforced (guarded pages):
    /// with `use_bti`.
    pub fn guarded(self) -> bool {
        self.sets("use_bti", "true")
    }

    /// The variant called `name` ([`Variant::name`]), if any.
    pub fn by_name(name: &str) -> Option<Variant> {
        std::iter::once(Variant::Plain)
            .chain(Variant::OTHERS)
            .find(|v| v.name() == name)
    }

    /// Its name in job and failure files, and in exec fixtures' `; variant:` lines.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::FunctionSections => "function-sections",
            Variant::AddressesInsignificant => "addresses-insignificant",
            Variant::NoCycles => "no-cycles",
            Variant::NoCodeFolding => "no-code-folding",
            Variant::NoAlignmentMerging => "no-alignment-merging",
            Variant::UnlikeBlocks => "align-unlike-blocks",
            Variant::NoUnwindInfo => "no-unwind-info",
            Variant::EmittedClif => "emitted-clif",
            Variant::ClifThunks => "clif-thunks",
            Variant::BranchProtection => "branch-protection",
            Variant::PointerAuthentication => "pointer-authentication",
            Variant::StandardBranchProtection => "branch-protection-standard",
            Variant::BKeyBranchProtection => "branch-protection-bkey",
            Variant::ClifThunksNoFramePointers => "clif-thunks-no-frame-pointers",
        }
    }

    /// Whether it applies to builds of `output` for `arch` (a JIT module has no sections of
    /// its own, and the plugin writes no CLIF).
    pub fn applies(self, arch: Arch, output: Output) -> bool {
        match self {
            Variant::BranchProtection
            | Variant::PointerAuthentication
            | Variant::StandardBranchProtection
            | Variant::BKeyBranchProtection => arch == Arch::Aarch64,
            Variant::FunctionSections | Variant::EmittedClif => output != Output::Jit,
            Variant::Plain
            | Variant::AddressesInsignificant
            | Variant::NoCycles
            | Variant::NoCodeFolding
            | Variant::NoAlignmentMerging
            | Variant::UnlikeBlocks
            | Variant::NoUnwindInfo
            | Variant::ClifThunks
            | Variant::ClifThunksNoFramePointers => true,
        }
    }
}

/// One build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub arch: Arch,
    pub output: Output,
    pub mode: Mode,
    pub similar: bool,
    pub variant: Variant,
}

impl Config {
    pub fn reference(self) -> Config {
        Config {
            mode: Mode::Disabled,
            similar: false,
            variant: Variant::Plain,
            ..self
        }
    }
    pub fn is_reference(self) -> bool {
        self == self.reference()
    }

    /// Whether the user said that no function's address is compared: a returned address
    /// may then name more entries than before, and results that compare addresses may
    /// change.
    fn addresses_insignificant(self) -> bool {
        self.mode == Mode::Aliases || self.variant == Variant::AddressesInsignificant
    }

    /// Whether merge-similar runs (`--merge-functions disabled` merges nothing, by
    /// merge-similar neither).
    fn merges_similar(self) -> bool {
        self.similar && self.mode != Mode::Disabled
    }
}

/// What one call printed: the result (or `@` and the entries its address equals) and the
/// hash of the buffer.
pub type Results = BTreeMap<(usize, usize), (String, u64)>;

/// Run `program` built as `config`; `dir` is a scratch directory of its own.
pub fn run(program: &Program, config: Config, dir: &Path) -> Result<Results, String> {
    match config.output {
        Output::Jit if config.arch.is_host() => jit::run_in_child(program, config, dir, None),
        Output::Jit => jit_image::run(program, config, dir),
        Output::SharedLibrary | Output::Executable | Output::PicExecutable => {
            run_object(program, config, dir)
        }
    }
}

/// Generated code that never returns (a merge fault can make a loop of it) must not hang
/// the test: every run of it is killed after this many seconds (`CLIF_MERGE_DIFF_TIMEOUT`
/// sets another).
fn run_timeout() -> String {
    std::env::var("CLIF_MERGE_DIFF_TIMEOUT").unwrap_or_else(|_| "120".into())
}

/// A command that runs `program` (generated code, or what runs it) under coreutils'
/// `timeout`, which stops it after [`run_timeout`] seconds (SIGTERM, then SIGKILL 10 s
/// later) and then exits with 124 (a program that dies of a signal, timeout dies of the
/// same).
pub fn timed(program: impl AsRef<std::ffi::OsStr>) -> Command {
    timed_for(program, &run_timeout())
}

/// [`timed`], killed after `seconds`.
pub fn timed_for(program: impl AsRef<std::ffi::OsStr>, seconds: &str) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "10", seconds]).arg(program);
    cmd
}

/// How a process of [`timed`] ended, in words, when it did not succeed.
pub fn ended(status: &std::process::ExitStatus) -> String {
    match status.code() {
        Some(124) => "killed by the timeout: it did not return".to_string(),
        _ => status.to_string(),
    }
}

pub fn command(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    outcome(cmd, out)
}

/// What `cmd` printed, or why it failed, from its `out`put ([`command`]).
pub fn outcome(cmd: &Command, out: std::process::Output) -> Result<String, String> {
    if !out.status.success() {
        // A crashed program printed every entry before the one that crashed: its last
        // lines say where it stopped; the rest would bury them.
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        let shown = lines.len().min(SHOWN_LINES);
        let cut = match lines.len() - shown {
            0 => String::new(),
            n => format!("({n} lines before these left out)\n"),
        };
        return Err(format!(
            "{cmd:?} failed ({}):\n{cut}{}\n{}",
            ended(&out.status),
            lines[lines.len() - shown..].join("\n"),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Lines of a failed command's output shown (its last ones).
const SHOWN_LINES: usize = 8;

/// The command line that writes the object of `config`.
pub fn clif_merge_args(
    program: &Program,
    config: Config,
    input: &Path,
    object: &Path,
) -> Vec<String> {
    let pic = matches!(config.output, Output::SharedLibrary | Output::PicExecutable);
    let mut args: Vec<String> = vec![
        input.display().to_string(),
        "--target".into(),
        config.arch.triple().into(),
        "--set".into(),
        format!("is_pic={pic}"),
        "--set".into(),
        "preserve_frame_pointers=true".into(),
        "--merge-functions".into(),
        config.mode.flag().into(),
        "-q".into(),
        "-o".into(),
        object.display().to_string(),
    ];
    if config.similar {
        args.push("--merge-similar".into());
    }
    args.extend(config.variant.args());
    for setting in &program.settings {
        args.push("--set".into());
        args.push(setting.clone());
    }
    for (glob, linkage) in &program.linkages {
        args.push("--linkage".into());
        args.push(format!("{glob}={linkage}"));
    }
    args
}

thread_local! {
    /// Bodies merged by alignment with unlike blocks ([`Variant::UnlikeBlocks`]) in the
    /// builds this thread ran in-process ([`run`] of objects, and of JIT images for
    /// another architecture): the tests require some, so that such bodies are known to
    /// have run.
    static UNLIKE_BLOCK_BODIES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The bodies merged with unlike blocks by the builds this thread has run so far.
pub fn unlike_block_bodies_on_this_thread() -> usize {
    UNLIKE_BLOCK_BODIES.with(|n| n.get())
}

/// Count the bodies merged with unlike blocks in `similar` ([`UNLIKE_BLOCK_BODIES`]).
fn count_unlike_block_bodies(similar: Option<&clif_merge::merge::similar::SimilarReport>) {
    let n = similar.map_or(0, |r| r.groups.iter().filter(|g| g.unlike_blocks).count());
    UNLIKE_BLOCK_BODIES.with(|count| count.set(count.get() + n));
}

/// Merging by alignment drops a body Cranelift's verifier rejects (release builds do not
/// stop for it): the pair runs unmerged and behaves, so the outputs cannot tell. Such a
/// body is a bug of the builder, an error here.
fn no_body_failed_the_verifier(
    similar: Option<&clif_merge::merge::similar::SimilarReport>,
) -> Result<(), String> {
    match similar.map_or(0, |r| r.aligned_bodies_failing_the_verifier) {
        0 => Ok(()),
        n => Err(format!(
            "{n} bod(ies) merged by alignment failed Cranelift's verifier"
        )),
    }
}

/// Under merge-similar, the constant-swap families of `program` must be groups with a
/// shared body taking their constants: otherwise nothing would see a thunk that passes
/// them in another order. The cost model may turn down a family whose body it estimates no
/// smaller (long-mode seed 97037 has one on x86_64), so one family in four beyond the
/// first may stay apart (a fixed seed's module has six to nine such families, wide and
/// vector swap families included, so one or two may; long mode's nine to thirteen, two or
/// three). `name` spells a function's name as the report does.
fn constant_swaps_share_a_body(
    program: &Program,
    config: Config,
    similar: Option<&clif_merge::merge::similar::SimilarReport>,
    name: impl Fn(&str) -> String,
) -> Result<(), String> {
    if !config.merges_similar() {
        return Ok(());
    }
    let groups = similar.map_or(&[][..], |r| &r.groups[..]);
    let apart: Vec<&Vec<String>> = program
        .constant_swap_families
        .iter()
        .filter(|family| {
            !groups.iter().any(|g| {
                !g.aligned && g.holes >= 2 && family.iter().all(|m| g.members.contains(&name(m)))
            })
        })
        .collect();
    if apart.len() > program.constant_swap_families.len().saturating_sub(1) / 4 {
        return Err(format!(
            "constant-swap families {apart:?} are not one body with holes under merge-similar"
        ));
    }
    Ok(())
}

/// Under merge-similar with alignment merging, the twin vector families of `program`
/// (members that differ in one site: an opcode, the vector constant, an extra operation,
/// a lane or shuffle immediate) must mostly be merged by alignment, each at least once
/// within the family: otherwise no aligned body would select between two vectors. At most
/// half may stay apart. `name` spells a function's name as the report does.
fn vector_twins_merge_by_alignment(
    program: &Program,
    config: Config,
    similar: Option<&clif_merge::merge::similar::SimilarReport>,
    name: impl Fn(&str) -> String,
) -> Result<(), String> {
    if !config.merges_similar() || config.variant == Variant::NoAlignmentMerging {
        return Ok(());
    }
    let groups = similar.map_or(&[][..], |r| &r.groups[..]);
    let twins: Vec<&Vec<String>> = (program.vector_families.iter())
        .filter(|(_, swap)| !swap)
        .map(|(members, _)| members)
        .collect();
    let apart: Vec<&&Vec<String>> = twins
        .iter()
        .filter(|family| {
            let names: Vec<String> = family.iter().map(|m| name(m)).collect();
            !groups
                .iter()
                .any(|g| g.aligned && g.members.iter().all(|m| names.contains(m)))
        })
        .collect();
    if apart.len() * 2 > twins.len() {
        return Err(format!(
            "vector twin families {apart:?} are not merged by alignment under merge-similar"
        ));
    }
    Ok(())
}

fn run_object(program: &Program, config: Config, dir: &Path) -> Result<Results, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let input = dir.join("gen.clif");
    std::fs::write(&input, &program.clif).map_err(|e| e.to_string())?;
    let object = dir.join("gen.o");
    let report = dir.join("report.json");
    let emitted = dir.join("merged.clif");
    let mut merge = Command::new(env!("CARGO_BIN_EXE_clif-merge"));
    merge
        .args(clif_merge_args(program, config, &input, &object))
        .arg("--report")
        .arg(&report);
    if config.variant == Variant::EmittedClif {
        merge.arg("--emit-clif").arg(&emitted);
    }
    command(&mut merge)?;
    if config.variant == Variant::EmittedClif {
        // The merged CLIF compiled as written, in place of the merged object.
        let unmerged = Config {
            mode: Mode::Disabled,
            similar: false,
            variant: Variant::Plain,
            ..config
        };
        command(
            Command::new(env!("CARGO_BIN_EXE_clif-merge"))
                .args(clif_merge_args(program, unmerged, &emitted, &object)),
        )?;
    }
    let report: clif_merge::report::Report =
        serde_json::from_str(&std::fs::read_to_string(&report).map_err(|e| e.to_string())?)
            .map_err(|e| format!("the report: {e}"))?;
    no_body_failed_the_verifier(report.similar.as_ref())?;
    let bodies = stated_merges::object_bodies(&report);
    stated_merges::check(&program.stated_merges, config, &bodies)?;
    count_unlike_block_bodies(report.similar.as_ref());
    constant_swaps_share_a_body(program, config, report.similar.as_ref(), |n| {
        format!("%{n}")
    })?;
    vector_twins_merge_by_alignment(program, config, report.similar.as_ref(), |n| {
        format!("%{n}")
    })?;
    let harness = dir.join("harness.c");
    let entries = match (config.arch, config.output) {
        (Arch::X86_64Windows, Output::SharedLibrary) => Entries::Imported,
        _ => Entries::Linked,
    };
    // Asynchronous unwinding through the code of every configuration that has unwind
    // information: an executable or a shared library (PIC code with its PLT; on Windows a
    // DLL) stops at every instruction of each entry's first call, x86_64's with the trap
    // flag (unwound by libgcc, or under Wine by Windows' own unwinder), aarch64's at
    // breakpoints (with its code guarded where branch protection is enforced, and with a
    // section per function). Windows JIT images step too ([`jit_image::run`]), and so does
    // the host's JIT child on x86_64 Linux ([`jit`]).
    let limit = match config.variant {
        Variant::NoUnwindInfo => -1,
        _ => STEP_LIMIT,
    };
    let stepping = match (config.arch, config.output) {
        (_, Output::Jit) => None,
        (_, Output::Executable | Output::SharedLibrary | Output::PicExecutable) => {
            Some((config.arch, limit, first_stepped(config, program)))
        }
    };
    std::fs::write(&harness, c_harness(program, &entries, stepping)).map_err(|e| e.to_string())?;
    // What the executable's harness is linked with to step, and what the shared library is
    // linked with besides the object (aarch64's stepping: [`MERGED_TEXT_BOUNDS`]).
    type Sources = Vec<std::ffi::OsString>;
    let (step_sources, library_sources): (Sources, Sources) = match stepping {
        Some((Arch::Aarch64, ..)) => {
            // The object's code in one output section, whose bounds the linker names: every
            // code section of the object (one per function with `--function-sections`,
            // which `--gc-sections` still drops one by one) renamed `merged_text`. The
            // bounds are handed out where that section is, in the executable or the
            // library, with landing pads for a guarded library's PLT, on pages of its own
            // (else each breakpoint written makes qemu translate what shares them again).
            command(
                Command::new("aarch64-linux-gnu-objcopy")
                    .args(breakpoint_stops::rename_code_sections(&object)?)
                    .arg(&object),
            )?;
            let bounds = dir.join("bounds.c");
            std::fs::write(&bounds, MERGED_TEXT_BOUNDS).map_err(|e| e.to_string())?;
            let bounds = bounds.into_os_string();
            let own_pages = breakpoint_stops::code_on_pages_of_its_own(dir)?;
            let (in_executable, library_sources) = match config.output {
                Output::SharedLibrary => {
                    let flags = ["-fPIC".into(), "-mbranch-protection=bti".into(), bounds];
                    (Vec::new(), flags.into_iter().chain([own_pages]).collect())
                }
                _ => (vec![own_pages, bounds], Vec::new()),
            };
            let step_sources = breakpoint_stepper(config)
                .into_iter()
                .chain(in_executable)
                .collect();
            (step_sources, library_sources)
        }
        Some((Arch::X86_64, ..)) => (
            vec![
                "-DSINGLE_STEP_NO_CALLBACKS".into(),
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(SINGLE_STEP_LINUX)
                    .into(),
            ],
            Vec::new(),
        ),
        Some((Arch::X86_64Windows, ..)) => (vec![windows_stepper()?.into()], Vec::new()),
        None => (Vec::new(), Vec::new()),
    };
    // MinGW's gcc names an executable `.exe` whatever `-o` says.
    let exe = dir.join(match config.arch {
        Arch::X86_64Windows => "run.exe",
        Arch::X86_64 | Arch::Aarch64 => "run",
    });
    let cc = config.arch.cc();
    // How the object is linked, into the shared library and into the executable: with a
    // section per function as its users link it (sections no relocation or symbol keeps
    // alive are dropped); with branch protection guarded ([`Variant::guarded`]), the
    // executable from a start file with a landing pad; otherwise as it is.
    let (library_flags, executable_flags): (&[&str], Vec<std::ffi::OsString>) = match config.variant
    {
        Variant::FunctionSections => {
            // On aarch64 the references to `__start_merged_text` keep no section alive
            // (`-z start-stop-gc`): the stepped builds keep what the others do.
            let flags: &[&str] = match config.arch {
                Arch::Aarch64 => &["-Wl,--gc-sections", "-Wl,-z,start-stop-gc"],
                Arch::X86_64 | Arch::X86_64Windows => &["-Wl,--gc-sections"],
            };
            (flags, flags.iter().map(Into::into).collect())
        }
        _ if config.variant.guarded() => {
            let start = dir.join("start.S");
            std::fs::write(&start, START_WITH_LANDING_PAD).map_err(|e| e.to_string())?;
            let flags = GUARDED_LINK.iter().map(Into::into).chain([start.into()]);
            (GUARDED_LINK, flags.collect())
        }
        _ => (&[], Vec::new()),
    };
    match config.output {
        Output::SharedLibrary => {
            // Wine finds a DLL beside the executable; Linux, through the run path.
            let (lib, search): (_, &[String]) = match config.arch {
                Arch::X86_64Windows => (dir.join("gen.dll"), &[]),
                Arch::X86_64 | Arch::Aarch64 => (
                    dir.join("libgen.so"),
                    &[format!("-Wl,-rpath,{}", dir.display())],
                ),
            };
            command(
                Command::new(cc)
                    .arg("-shared")
                    .args(library_flags)
                    .arg("-o")
                    .arg(&lib)
                    .arg(&object)
                    .args(&library_sources),
            )?;
            command(
                Command::new(cc)
                    .args(["-O1", "-fno-omit-frame-pointer", "-o"])
                    .arg(&exe)
                    .arg(&harness)
                    .args(&step_sources)
                    .arg(&lib)
                    .args(search)
                    .arg("-lm"),
            )?;
        }
        Output::Executable | Output::PicExecutable => {
            command(
                Command::new(cc)
                    .args(["-O1", "-fno-omit-frame-pointer"])
                    .args(harness_flags(config.arch))
                    .args(&executable_flags)
                    .arg("-o")
                    .arg(&exe)
                    .arg(&harness)
                    .args(&step_sources)
                    .arg(&object)
                    .arg("-lm"),
            )?;
        }
        Output::Jit => unreachable!(),
    }
    let stdout = match config.arch {
        Arch::X86_64 => command(&mut timed(&exe))?,
        Arch::Aarch64 => match stepping {
            Some((_, limit, _)) if limit >= 0 => run_with_breakpoints(&exe)?,
            _ => command(
                timed("qemu-aarch64")
                    .args(["-L", "/usr/aarch64-linux-gnu"])
                    .arg(&exe),
            )?,
        },
        Arch::X86_64Windows => {
            let (cmd, out) = wine::run(&exe, || timed("wine")).map_err(|e| format!("wine: {e}"))?;
            outcome(&cmd, out)?
        }
    };
    parse_results(&stdout)
}

/// How the harness of an executable is compiled besides its defaults: not position
/// independent on Linux; on aarch64 with landing pads ([`Variant::BranchProtection`] links
/// it guarded), in every build alike, so that the return addresses entries see (offsets
/// into the harness's code) are the same with and without branch protection.
fn harness_flags(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::Aarch64 => &["-no-pie", "-mbranch-protection=bti"],
        Arch::X86_64 => &["-no-pie"],
        Arch::X86_64Windows => &[],
    }
}

/// How code guarded by branch protection is linked: marked so whatever its inputs say, and
/// without the C runtime's start files, which in this cross toolchain have no landing pads
/// (an executable starts at [`START_WITH_LANDING_PAD`] instead).
const GUARDED_LINK: &[&str] = &["-nostartfiles", "-Wl,-z,force-bti"];

/// The start of an aarch64 executable whose code is guarded by branch protection: the
/// C runtime's `_start` (`crt1.o`) of this cross toolchain has no landing pad, and the
/// loader enters the program with an indirect branch. This one has one, and calls
/// `__libc_start_main` as `crt1.o` does (glibc 2.34 and later run the constructors
/// themselves: no `init` or `fini` is passed).
pub const START_WITH_LANDING_PAD: &str = "\
\t.text
\t.globl _start
\t.type _start, %function
_start:
\tbti jc
\tmov x29, #0
\tmov x30, #0
\tmov x5, x0
\tldr x1, [sp]
\tadd x2, sp, #8
\tmov x6, sp
\tadrp x0, main
\tadd x0, x0, :lo12:main
\tmov x3, #0
\tmov x4, #0
\tbl __libc_start_main
\tbrk #0
\t.size _start, .-_start
\t.section .note.GNU-stack,\"\",%progbits
";

fn parse_results(stdout: &str) -> Result<Results, String> {
    let mut results = Results::new();
    for line in stdout.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [e, i, r, h] = parts[..] else {
            return Err(format!("bad harness line {line:?}"));
        };
        let parse = |s: &str| s.parse::<usize>().map_err(|e| format!("{line:?}: {e}"));
        let hash = u64::from_str_radix(h, 16).map_err(|e| format!("{line:?}: {e}"))?;
        results.insert((parse(e)?, parse(i)?), (r.to_string(), hash));
    }
    Ok(results)
}

/// Where the harness finds the entries it calls.
pub enum Entries<'a> {
    /// Linked with it, by name.
    Linked,
    /// In a Windows DLL, by name, each address read from the executable's import table
    /// (`__declspec(dllimport)`) when the harness starts: the address the DLL's own code
    /// takes, as on Linux, where the executable's reference goes through the GOT. (Without
    /// it MinGW's linker hands the executable the address of an import stub of its own.)
    Imported,
    /// In a JIT image ([`jit_image`]) that it loads first: the image file, the address
    /// it was built at and its length, each entry's address, and how it is loaded.
    Image {
        path: &'a Path,
        base: usize,
        len: usize,
        addresses: &'a [usize],
        loader: jit_region::Loader<'a>,
    },
}

/// The trap-flag stepper that x86_64 Linux executables' and shared libraries' harnesses link
/// ([`c_harness`]'s `stepping`): libgcc's unwinder at every instruction.
const SINGLE_STEP_LINUX: &str = "fixtures/unwind/single_step_linux.c";

/// The trap-flag stepper that Windows executables' and DLLs' harnesses link ([`c_harness`]'s
/// `stepping`): Windows' own unwinder (`RtlVirtualUnwind`, under Wine) at every instruction.
const SINGLE_STEP_WINDOWS: &str = "fixtures/unwind/single_step_windows.c";

/// [`SINGLE_STEP_WINDOWS`] compiled, once per test process ([`compiled_once`]):
/// `<windows.h>` takes most of a second to compile, which every Windows build would
/// otherwise spend again.
fn windows_stepper() -> Result<PathBuf, String> {
    static OBJECT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    OBJECT
        .get_or_init(|| {
            compiled_once("single_step_windows.o", |output| {
                let mut cmd = Command::new(Arch::X86_64Windows.cc());
                cmd.args(["-O1", "-c", "-DSINGLE_STEP_NO_CALLBACKS", "-o"])
                    .arg(output)
                    .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(SINGLE_STEP_WINDOWS));
                cmd
            })
        })
        .clone()
}

/// [`SINGLE_STEP_LINUX`] compiled into a shared library, once per test process, for the
/// host's JIT child to load ([`jit`]'s `Stepper`): its calls stepped through with the trap
/// flag and unwound by this process's libgcc, through the frames the merger registered.
fn linux_jit_stepper() -> Result<PathBuf, String> {
    static LIBRARY: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            compiled_once("single_step_linux.so", |output| {
                let mut cmd = Command::new("cc");
                cmd.args(["-O1", "-Wall", "-Werror", "-shared", "-fPIC"])
                    .arg("-DSINGLE_STEP_NO_CALLBACKS")
                    .arg("-o")
                    .arg(output)
                    .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(SINGLE_STEP_LINUX));
                cmd
            })
        })
        .clone()
}

/// `name` in the test target's scratch directory, written by the command `compile` gives
/// for an output path: under a name of this process's own, then renamed, so that test
/// processes running at once never use one that another is writing.
fn compiled_once(name: &str, compile: impl FnOnce(&Path) -> Command) -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let written = dir.join(format!("{}-{name}", std::process::id()));
    command(&mut compile(&written))?;
    let output = dir.join(name);
    std::fs::rename(&written, &output).map_err(|e| format!("{}: {e}", output.display()))?;
    Ok(output)
}

/// The breakpoint stepper that aarch64 Linux executables' and shared libraries' harnesses
/// link ([`c_harness`]'s `stepping`), run under qemu by [`run_with_breakpoints`].
const BREAKPOINTS_AARCH64: &str = "fixtures/unwind/breakpoints_aarch64.c";

/// What an aarch64 harness is compiled with to stop at breakpoints in `config`'s code:
/// [`BREAKPOINTS_AARCH64`], which maps the code writable to write its breakpoints, and
/// guarded again where branch protection is enforced.
fn breakpoint_stepper(config: Config) -> Vec<std::ffi::OsString> {
    let guarded = config
        .variant
        .guarded()
        .then(|| "-DBREAKPOINTS_GUARDED".into());
    let sources = [
        "-DBREAKPOINTS_NO_CALLBACKS".into(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(BREAKPOINTS_AARCH64)
            .into(),
    ];
    guarded.into_iter().chain(sources).collect()
}

/// Run the aarch64 executable `exe` (its harness linked with [`BREAKPOINTS_AARCH64`]) under
/// qemu twice: first as it is, with qemu logging the instructions that run
/// ([`breakpoint_stops`]) and the stepper writing where the code under test was loaded,
/// then with those instructions in that code as the ones to stop at. Both must print the
/// same; what the first printed.
fn run_with_breakpoints(exe: &Path) -> Result<String, String> {
    let qemu = || {
        let mut cmd = timed("qemu-aarch64");
        cmd.args(["-L", "/usr/aarch64-linux-gnu"]);
        cmd
    };
    let printed = command(breakpoint_stops::first_run(&mut qemu(), exe))?;
    let file = breakpoint_stops::stops_from_first_run(exe)?;
    let stepped = command(qemu().arg(exe).arg(&file))?;
    if stepped != printed {
        return Err(format!(
            "{}: stopped at breakpoints, the entries printed other results:\n{stepped}",
            exe.display()
        ));
    }
    Ok(printed)
}

/// Where the code an aarch64 harness steps through lies, linked with the object (into the
/// executable, or into the shared library, whose linker-made `__start_` symbols it does not
/// export): the bounds of the section its code sections were renamed to.
const MERGED_TEXT_BOUNDS: &str = "\
#include <stdint.h>
extern uint32_t __start_merged_text[] __attribute__((weak));
extern uint32_t __stop_merged_text[] __attribute__((weak));
uint32_t *const merged_text_bounds[2] = {__start_merged_text, __stop_merged_text};
";

/// Where a stop is dear, the first calls of one entry in this many are stopped in: on
/// aarch64, whose breakpoints cost qemu the translation of the code again at every stop,
/// and on Windows, where Wine turns every step into a signal and an exception dispatched
/// to the stepper.
const EMULATED_STEP_EVERY: u32 = 8;

/// How many entries of `p` take turns to be stepped through where stops are dear: one in
/// [`EMULATED_STEP_EVERY`], or one in as many as there are (a fixture's few).
fn emulated_step_every(p: &Program) -> u32 {
    EMULATED_STEP_EVERY.min(p.entries.len().max(1) as u32)
}

/// Which entries build `config` of `p` steps through where stops are dear: those whose
/// index leaves this remainder ([`emulated_step_every`]). Each build takes another, from a
/// hash of its configuration, so that a program's builds step through other entries, not
/// the same one in every build; the same build always steps the same ones. Read at run
/// time (`step_first`), so that the harness's code is the same in every build.
fn first_stepped(config: Config, p: &Program) -> u32 {
    let hash = format!("{config:?}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    (hash % u64::from(emulated_step_every(p))) as u32
}

/// The most steps of one call that are unwound; the rest of the call runs without the trap
/// flag (a long loop would take seconds).
const STEP_LIMIT: i64 = 4000;

/// A C program that calls every entry on its inputs and prints what it saw. With
/// `stepping` (an architecture and a limit), it is linked with that architecture's stepper
/// ([`SINGLE_STEP_LINUX`] and [`SINGLE_STEP_WINDOWS`], x86_64's trap flag;
/// [`BREAKPOINTS_AARCH64`], breakpoints) and stops at every instruction of each entry's
/// first call (on aarch64 and Windows one entry's in [`EMULATED_STEP_EVERY`], which ones
/// [`first_stepped`] says), unwinding at
/// each, up to that many stops a call (-1: none, the code otherwise the same), and fails
/// (exit status 5, the stops that did not unwind on its standard error) when an unwind did
/// not reach the call.
fn c_harness(p: &Program, entries: &Entries<'_>, stepping: Option<(Arch, i64, u32)>) -> String {
    let mut s = String::from(
        "#include <stdint.h>\n#include <stdio.h>\n\
         /* Entries are `system_v` functions, on Windows too. */\n\
         #ifdef _WIN32\n#define ENTRY_ABI __attribute__((sysv_abi))\n#else\n#define ENTRY_ABI\n#endif\n\
         typedef int64_t (ENTRY_ABI *entry_fn)(int64_t, int64_t, int64_t);\n",
    );
    if let Some((arch, limit, first)) = stepping {
        s.push_str(match arch {
            Arch::Aarch64 => {
                "void start_stepping(int, char **, void *, void *);\n\
                 extern uint32_t *const merged_text_bounds[2];\n"
            }
            Arch::X86_64 | Arch::X86_64Windows => "void start_stepping(void);\n",
        });
        s.push_str(
            "void step_begin(const void *, int, long);\nvoid step_end(void);\n\
             int step_totals(FILE *);\n",
        );
        // Read at run time, so that no code differs (a frame reader may see `main`'s).
        // Each entry's first call is stepped through (on aarch64 and Windows some
        // entries', [`EMULATED_STEP_EVERY`], other ones in each build): the others mostly run the same instructions
        // again.
        let every = match arch {
            Arch::Aarch64 | Arch::X86_64Windows => emulated_step_every(p),
            Arch::X86_64 => 1,
        };
        // Every entry's, where each is stepped.
        let first = first % every;
        let _ = writeln!(
            s,
            "static volatile long step_limit = {limit};\nstatic int first_call;\n\
             static const unsigned step_every = {every};\n\
             static volatile unsigned step_first = {first};"
        );
    }
    match entries {
        Entries::Linked => {
            for e in &p.entries {
                let _ = writeln!(s, "extern void {}(void);", e.name);
            }
            s.push_str("static void load_image(void) {}\n");
        }
        Entries::Imported => {
            for e in &p.entries {
                let _ = writeln!(s, "__declspec(dllimport) extern void {}(void);", e.name);
            }
            let _ = writeln!(s, "static void (*SYMS[{}])(void);", p.entries.len().max(1));
            s.push_str("static void load_image(void) {\n");
            for (i, e) in p.entries.iter().enumerate() {
                let _ = writeln!(s, "  SYMS[{i}] = {};", e.name);
            }
            s.push_str("}\n");
        }
        Entries::Image {
            path,
            base,
            len,
            loader,
            ..
        } => {
            s.push_str(&jit_image::loader_c(path, *base, *len, loader));
            if let Some((Arch::Aarch64, ..)) = stepping {
                // The code cranelift-jit wrote: the image after its page of import stubs
                // (the loader's stand-ins for a linker's, which have no FDE).
                let _ = writeln!(
                    s,
                    "uint32_t *const merged_text_bounds[2] = {{(uint32_t *)0x{:x}ull, \
                     (uint32_t *)0x{:x}ull}};",
                    base + jit_region::STUB_PAGE,
                    base + len
                );
            }
        }
    }
    if !matches!(entries, Entries::Imported) {
        s.push_str("static void (*const SYMS[])(void) = {\n");
        for (i, e) in p.entries.iter().enumerate() {
            match entries {
                Entries::Linked => {
                    let _ = writeln!(s, "  {},", e.name);
                }
                Entries::Image { addresses, .. } => {
                    let _ = writeln!(s, "  (void (*)(void))0x{:x}ull,", addresses[i]);
                }
                Entries::Imported => unreachable!("filled by load_image"),
            }
        }
        s.push_str("};\n");
    }
    s.push_str("static const unsigned FLAGS[] = {");
    for e in &p.entries {
        let _ = write!(s, "{},", e.flags);
    }
    s.push_str(
        "};\nstruct input { unsigned e; unsigned ak; int64_t a; unsigned bk; int64_t b; };\n\
         static const struct input INPUTS[] = {\n",
    );
    let arg = |a: Arg| match a {
        Arg::Int(v) => format!("0, (int64_t){}ull", v as u64),
        Arg::Address(i) => format!("1, {i}"),
    };
    for &(e, a, b) in &p.inputs {
        let _ = writeln!(s, "  {{{e}, {}, {}}},", arg(a), arg(b));
    }
    let n = p.entries.len();
    // The same code whether it steps or not (entries that read their frame see the same
    // stack): what changes is the limit, -1 for none.
    let (begin, end, start, totals, first) = if let Some((arch, ..)) = stepping {
        (
            "step_begin((const void *)f, 0, first_call ? step_limit : -1);\n  ",
            "\n  step_end();",
            match arch {
                Arch::Aarch64 => {
                    "start_stepping(argc, argv, merged_text_bounds[0], merged_text_bounds[1]);\n"
                }
                Arch::X86_64 | Arch::X86_64Windows => "start_stepping();\n",
            },
            "\n  if (step_limit >= 0 && !step_totals(stderr)) return 5;",
            "first_call = k == 0 && in->e % step_every == step_first;\n    ",
        )
    } else {
        ("", "", "", "", "")
    };
    let _ = write!(
        s,
        r#"}};
#define NSYMS {n}
__attribute__((noinline)) static void call_entry(entry_fn f, int64_t a, int64_t b,
                                                 unsigned flags, int64_t *res, uint64_t *hash) {{
  uint64_t mem[32];
  for (int i = 0; i < 32; i++) mem[i] = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
  {begin}*res = f(a, b, (int64_t)(uintptr_t)mem);{end}
  if (flags & {ra}) mem[31] -= (uint64_t)(uintptr_t)&call_entry;
  if (flags & {fp}) mem[30] = (uint64_t)(uintptr_t)mem - mem[30];
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 32; i++) {{ h ^= mem[i]; h *= 0x100000001b3ull; }}
  *hash = h;
}}
int main(int argc, char **argv) {{
  (void)argc;
  (void)argv;
  /* Line by line: a call that crashes is the one after the last line printed. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  load_image();
  {start}
  unsigned n = sizeof INPUTS / sizeof INPUTS[0];
  unsigned seen[NSYMS] = {{0}};
  for (unsigned i = 0; i < n; i++) {{
    const struct input *in = &INPUTS[i];
    unsigned k = seen[in->e]++;
    int64_t a = in->ak ? (int64_t)(uintptr_t)SYMS[in->a] : in->a;
    int64_t b = in->bk ? (int64_t)(uintptr_t)SYMS[in->b] : in->b;
    int64_t r; uint64_t h;
    {first}call_entry((entry_fn)SYMS[in->e], a, b, FLAGS[in->e], &r, &h);
    printf("%u %u ", in->e, k);
    if (FLAGS[in->e] & {addr}) {{
      printf("@");
      for (unsigned s = 0; s < NSYMS; s++)
        if ((uintptr_t)SYMS[s] == (uintptr_t)r) printf("%u,", s);
    }} else {{
      printf("%016llx", (unsigned long long)r);
    }}
    printf(" %016llx\n", (unsigned long long)h);
    /* Windows' C runtime buffers `_IOLBF` output fully. */
    fflush(stdout);
  }}{totals}
  return 0;
}}
"#,
        ra = flags::READS_RETURN_ADDRESS,
        fp = flags::READS_FRAME_POINTER,
        addr = flags::ADDRESS_RESULT,
    );
    s
}

/// The differences between the reference's results and a build's, as messages.
pub fn compare(
    program: &Program,
    config: Config,
    reference: &Results,
    got: &Results,
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, (want, want_hash)) in reference {
        let flags = program.entries[key.0].flags;
        let name = &program.entries[key.0].name;
        let Some((have, have_hash)) = got.get(key) else {
            out.push(format!("{name} input {}: no result", key.1));
            continue;
        };
        let insignificant = config.addresses_insignificant();
        let same = if insignificant && flags & flags::ADDRESS_SENSITIVE != 0 {
            true
        } else if flags & flags::ADDRESS_RESULT != 0
            && insignificant
            && config.variant == Variant::EmittedClif
        {
            // CLIF has no aliases: `--emit-clif` writes an alias as a function of its own
            // (a thunk, or a copy of a body that reads its frame), so an address taken in
            // the body names the body, not the alias. Still an address.
            have.starts_with('@') && want_hash == have_hash
        } else if flags & flags::ADDRESS_RESULT != 0 && insignificant {
            // Every entry the address was before it still is.
            let set = |s: &str| -> Vec<String> {
                s.trim_start_matches('@')
                    .split(',')
                    .filter(|x| !x.is_empty())
                    .map(String::from)
                    .collect()
            };
            let have = set(have);
            set(want).iter().all(|w| have.contains(w)) && want_hash == have_hash
        } else {
            want == have && want_hash == have_hash
        };
        if !same {
            out.push(format!(
                "{name} input {}: expected {want} (memory {want_hash:016x}), got {have} (memory {have_hash:016x})",
                key.1
            ));
        }
    }
    out
}

/// The differences between two unmerged builds of `program` (two outputs' references: the
/// architecture's first output, [`Arch::outputs`], and another), as messages. Entries that read their return address or frame are left out: they see the
/// harness's own code, which is not the same in the C harness and in this process.
pub fn same_unmerged(program: &Program, first: &Results, other: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for (key, (want, want_hash)) in first {
        let flags = program.entries[key.0].flags;
        if flags & (flags::READS_RETURN_ADDRESS | flags::READS_FRAME_POINTER) != 0 {
            continue;
        }
        let name = &program.entries[key.0].name;
        match other.get(key) {
            None => out.push(format!("{name} input {}: no result unmerged", key.1)),
            Some((have, have_hash)) if (have, have_hash) != (want, want_hash) => out.push(format!(
                "{name} input {}, unmerged: {want} (memory {want_hash:016x}) in the first output, {have} (memory {have_hash:016x}) here",
                key.1
            )),
            Some(_) => {}
        }
    }
    out
}

/// Where a failing program is written for a look (and to become a fixture).
/// One file per program and configuration (`seed-3-aarch64-jit-aliases-similar.clif`), so
/// that configurations failing together do not overwrite each other's differences.
pub fn keep_failure(
    program: &Program,
    label: &str,
    config: Config,
    problems: &[String],
) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("differential-failures");
    let _ = std::fs::create_dir_all(&dir);
    let arch = match config.arch {
        Arch::X86_64 => "x86_64",
        Arch::Aarch64 => "aarch64",
        Arch::X86_64Windows => "x86_64-windows",
    };
    let output = match config.output {
        Output::SharedLibrary if config.arch == Arch::X86_64Windows => "dll",
        Output::SharedLibrary => "so",
        Output::Executable => "exe",
        Output::PicExecutable => "pic-exe",
        Output::Jit => "jit",
    };
    let similar = if config.similar { "-similar" } else { "" };
    let variant = match config.variant {
        Variant::Plain => String::new(),
        v => format!("-{}", v.name()),
    };
    let path = dir.join(format!(
        "{label}-{arch}-{output}-{}{similar}{variant}.clif",
        config.mode.flag()
    ));
    let mut text = format!(
        "; differential {label}: {} functions\n{}",
        program.functions, program.clif
    );
    let _ = writeln!(text, "; failed in {config:?}:");
    for p in problems.iter().take(20) {
        let _ = writeln!(text, ";   {p}");
    }
    let _ = std::fs::write(&path, text);
    path
}

/// cranelift-jit through the plugin, in a child process.
///
/// JIT code runs in the process that compiled it, so a merge fault that makes it crash
/// (a thunk jumping to a bad address: SIGSEGV; a trap: SIGILL) would kill the process
/// that runs it. [`run_in_child`] therefore re-executes the current test binary with only
/// the hidden test [`child`] selected, which builds and runs one (program, configuration)
/// and writes its results to a file, a line per call as each returns; a child killed by a
/// signal is one failed configuration, and the harness goes on with the others. The
/// program and configuration travel in a file of the scratch directory ([`write_job`]).
///
/// The child registers the merged code's frames with its own libgcc
/// (`Merged::register_jit_frames`), as an embedder does, and on an x86_64 Linux host loads
/// the trap-flag stepper ([`Stepper`]) to stop at every instruction of each entry's first
/// call and unwind from there: a sampling profiler or debugger in the embedder's process
/// must find the caller of JIT code wherever it stops it.
pub mod jit {
    use super::*;
    use clif_merge::merge::similar::SimilarOptions;
    use clif_merge::plugin::{FunctionMerger, Merged};
    use clif_merge::{EmitOptions, MergeMode, MergeOptions, TargetInfo};
    use cranelift_codegen::ir::{ExternalName, GlobalValueData, UserExternalName, UserFuncName};
    use cranelift_jit::{JITBuilder, JITModule};
    use cranelift_module::{default_libcall_names, FuncId, Linkage, Module as _};

    type EntryFn = extern "C" fn(i64, i64, i64) -> i64;

    extern "C" fn ceilf(x: f32) -> f32 {
        x.ceil()
    }

    extern "C" fn floor(x: f64) -> f64 {
        x.floor()
    }

    /// Call `f` on `a`, `b` and a block of memory; with `stepping`, through the stepper
    /// up to that many steps (-1: none; the same code runs whatever the limit, so that
    /// entries that read their frame see the same stack in every build).
    #[inline(never)]
    fn call_entry(
        f: EntryFn,
        a: i64,
        b: i64,
        flags: u32,
        stepping: Option<(&Stepper, i64)>,
    ) -> (i64, u64) {
        let mut mem = [0u64; 32];
        for (i, m) in mem.iter_mut().enumerate() {
            *m = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1);
        }
        let base = mem.as_mut_ptr();
        if let Some((stepper, limit)) = stepping {
            stepper.begin(f as *const u8, limit);
        }
        let r = f(a, b, std::hint::black_box(base) as i64);
        if let Some((stepper, _)) = stepping {
            stepper.end();
        }
        let mut mem = std::hint::black_box(mem);
        if flags & flags::READS_RETURN_ADDRESS != 0 {
            mem[31] = mem[31].wrapping_sub(call_entry as *const () as u64);
        }
        if flags & flags::READS_FRAME_POINTER != 0 {
            mem[30] = (base as u64).wrapping_sub(mem[30]);
        }
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for m in mem {
            h ^= m;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        (r, h)
    }

    /// Build `program` as `config` with the plugin, in this process, and register its
    /// frames with this process's unwinder (`Merged::register_jit_frames`), as an
    /// embedder does: the address of every entry, and whether frames were registered.
    /// The module's code and its frames stay until the process (the child) ends.
    fn build(program: &Program, config: Config) -> Result<(Vec<*const u8>, bool), String> {
        let (module, address, merged) =
            build_for(program, config, &TargetInfo::host(), |builder| {
                // The libcalls the fixtures call by name, as an embedder provides them.
                builder.symbol("ceilf", ceilf as *const u8);
                builder.symbol("floor", floor as *const u8);
            })?;
        let registered = match &merged {
            Some(merged) => {
                let frames = merged
                    .register_jit_frames(&module)
                    .map_err(|e| e.to_string())?;
                let registered = frames.registrations() > 0;
                std::mem::forget(frames);
                registered
            }
            None => false,
        };
        if !registered && has_unwind_info(config) {
            return Err(format!("{config:?}: no frames were registered"));
        }
        std::mem::forget(module);
        Ok((address, registered))
    }

    /// Whether the merger gives `config`'s code unwind information: every merged build but
    /// [`Variant::NoUnwindInfo`]'s (Cranelift's own reference build has none).
    pub fn has_unwind_info(config: Config) -> bool {
        !config.is_reference() && config.variant != Variant::NoUnwindInfo
    }

    /// Build `program` as `config` with the plugin into a JIT module for `target`, its
    /// builder set up by `setup` (imports, memory): the finalized module, the address of
    /// every entry, and what the plugin gave (none for Cranelift's own reference build).
    pub fn build_for(
        program: &Program,
        config: Config,
        target: &TargetInfo,
        setup: impl FnOnce(&mut JITBuilder),
    ) -> Result<(JITModule, Vec<*const u8>, Option<Merged>), String> {
        let mut settings = vec![
            ("is_pic".to_string(), "false".to_string()),
            ("preserve_frame_pointers".into(), "true".into()),
        ];
        settings.extend(
            config
                .variant
                .settings()
                .iter()
                .map(|&(name, value)| (name.to_string(), value.to_string())),
        );
        for setting in &program.settings {
            let (name, value) = setting.split_once('=').expect("settings are NAME=VALUE");
            settings.push((name.into(), value.into()));
        }
        let isa = clif_merge::build_isa(target, &settings).map_err(|e| e.to_string())?;
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        setup(&mut builder);
        let mut module = JITModule::new(builder);
        let functions =
            clif_merge::read::parse_clif(&program.clif, "gen.clif").map_err(|e| e.to_string())?;
        let linkage_of = |name: &str| match program.linkage_of(name) {
            "local" => Linkage::Local,
            "hidden" => Linkage::Hidden,
            "preemptible" => Linkage::Preemptible,
            "export" => Linkage::Export,
            other => panic!("unknown linkage {other:?} for {name}"),
        };
        let mut ids: BTreeMap<String, FuncId> = BTreeMap::new();
        for f in &functions {
            let name = f.func.name.to_string().trim_start_matches('%').to_string();
            let id = module
                .declare_function(&name, linkage_of(&name), &f.func.signature)
                .map_err(|e| e.to_string())?;
            ids.insert(name, id);
        }
        let mut bodies = Vec::new();
        for f in functions {
            let mut func = *f.func;
            let name = func.name.to_string().trim_start_matches('%').to_string();
            func.name = UserFuncName::user(0, ids[&name].as_u32());
            let refs: Vec<_> = func.dfg.ext_funcs.keys().collect();
            for r in refs {
                if let ExternalName::TestCase(t) = &func.dfg.ext_funcs[r].name {
                    let callee = t.to_string().trim_start_matches('%').to_string();
                    let user = func
                        .params
                        .ensure_user_func_name(UserExternalName::new(0, ids[&callee].as_u32()));
                    func.dfg.ext_funcs[r].name = ExternalName::User(user);
                }
            }
            // Symbols of the module's functions (`symbol_value`) name them as functions.
            let gvs: Vec<_> = func.global_values.keys().collect();
            for gv in gvs {
                if let GlobalValueData::Symbol {
                    name: ExternalName::TestCase(t),
                    ..
                } = &func.global_values[gv]
                {
                    let target = t.to_string().trim_start_matches('%').to_string();
                    let user = func
                        .params
                        .ensure_user_func_name(UserExternalName::new(0, ids[&target].as_u32()));
                    if let GlobalValueData::Symbol { name, .. } = &mut func.global_values[gv] {
                        *name = ExternalName::User(user);
                    }
                }
            }
            bodies.push((ids[&name], func));
        }
        let merged = if config.is_reference() {
            for (id, func) in bodies {
                let mut ctx = cranelift_codegen::Context::for_function(func);
                module
                    .define_function(id, &mut ctx)
                    .map_err(|e| format!("{e:?}"))?;
            }
            None
        } else {
            let mode = match config.mode {
                Mode::Disabled => MergeMode::Disabled,
                Mode::Trampolines => MergeMode::Trampolines,
                Mode::Aliases => MergeMode::Aliases,
            };
            // The plugin's options for the command line's (`Variant::args`).
            let options = MergeOptions {
                mode,
                addresses_insignificant: config.variant == Variant::AddressesInsignificant,
                fold_cycles: config.variant != Variant::NoCycles,
                ..MergeOptions::default()
            };
            let mut merger = FunctionMerger::new(module.isa(), options)
                .map_err(|e| e.to_string())?
                .with_emit_options(EmitOptions {
                    fold_machine_code: config.variant != Variant::NoCodeFolding,
                    clif_thunks: config.variant.clif_thunks(),
                    ..EmitOptions::default()
                });
            if config.similar {
                merger = merger.with_merge_similar(SimilarOptions {
                    alignment: config.variant != Variant::NoAlignmentMerging,
                    unlike_blocks: config.variant == Variant::UnlikeBlocks,
                    ..SimilarOptions::default()
                });
            }
            for (id, func) in bodies {
                merger.add(id, func).map_err(|e| e.to_string())?;
            }
            let merged = merger
                .define_in_jit(&mut module)
                .map_err(|e| e.to_string())?;
            no_body_failed_the_verifier(merged.similar.as_ref())?;
            let bodies = stated_merges::jit_bodies(&merged, &ids);
            stated_merges::check(&program.stated_merges, config, &bodies)?;
            count_unlike_block_bodies(merged.similar.as_ref());
            // The plugin names functions by their ids (`u0:ID`).
            let name = |n: &str| UserFuncName::user(0, ids[n].as_u32()).to_string();
            constant_swaps_share_a_body(program, config, merged.similar.as_ref(), name)?;
            vector_twins_merge_by_alignment(program, config, merged.similar.as_ref(), name)?;
            Some(merged)
        };
        module.finalize_definitions().map_err(|e| e.to_string())?;
        let address: Vec<*const u8> = program
            .entries
            .iter()
            .map(|e| module.get_finalized_function(ids[&e.name]))
            .collect();
        Ok((module, address, merged))
    }

    /// Call every entry of `program` (built at `address`) on its inputs; `record` gets
    /// each call's result line (as [`parse_results`] reads them) as soon as it returns.
    /// With `fault`, call number `fault.call` jumps to address 8 instead of its entry.
    /// With `stepping`, every call goes through the stepper, and each entry's first call
    /// is stepped through up to that many steps (-1: none).
    fn call_all(
        program: &Program,
        address: &[*const u8],
        fault: Option<Fault>,
        stepping: Option<(&Stepper, i64)>,
        record: &mut dyn FnMut(&str),
    ) {
        let mut seen = vec![0usize; program.entries.len()];
        for (call, &(e, a, b)) in program.inputs.iter().enumerate() {
            let value = |x: Arg| match x {
                Arg::Int(v) => v,
                Arg::Address(i) => address[i] as i64,
            };
            let code = match fault {
                // Not null: a function pointer may not be. Address 8 is as unmapped.
                Some(fault) if fault.call == call => std::hint::black_box(8usize) as *const u8,
                _ => address[e],
            };
            let f: EntryFn = unsafe { std::mem::transmute(code) };
            let flags = program.entries[e].flags;
            let stepping =
                stepping.map(|(stepper, limit)| (stepper, if seen[e] == 0 { limit } else { -1 }));
            let (r, h) = call_entry(f, value(a), value(b), flags, stepping);
            let shown = if flags & flags::ADDRESS_RESULT != 0 {
                let mut s = String::from("@");
                for (i, &p) in address.iter().enumerate() {
                    if p as i64 == r {
                        let _ = write!(s, "{i},");
                    }
                }
                s
            } else {
                format!("{:016x}", r as u64)
            };
            record(&format!("{e} {} {shown} {h:016x}", seen[e]));
            seen[e] += 1;
        }
    }

    /// A crash planted in the child, to show that it is reported: call number `call`
    /// of the program's inputs jumps to an unmapped address instead of its entry.
    #[derive(Clone, Copy, Debug)]
    pub struct Fault {
        pub call: usize,
    }

    /// The environment variable that makes a process of the test binary the child of
    /// [`run_in_child`]: the scratch directory that holds the job.
    const CHILD_DIR: &str = "CLIF_MERGE_JIT_CHILD";
    /// The job: the program and configuration ([`write_job`]).
    const JOB: &str = "jit-job";
    /// The child's results, a line per call as it returns, then [`child::END`].
    const RESULTS: &str = "jit-results";
    /// The child's error, when building or running failed without a crash.
    const ERROR: &str = "jit-error";

    /// Build and run `program` as `config` (a JIT configuration) in a child process;
    /// `dir` is a scratch directory of its own. A child killed by a signal or exiting
    /// with an error is an error naming the signal, the call it was in, and the last
    /// lines of its standard error. `fault` plants a crash in the child.
    pub fn run_in_child(
        program: &Program,
        config: Config,
        dir: &Path,
        fault: Option<Fault>,
    ) -> Result<Results, String> {
        assert_eq!(config.output, Output::Jit, "{config:?} is not a JIT build");
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        for stale in [RESULTS, ERROR] {
            let _ = std::fs::remove_file(dir.join(stale));
        }
        // On an x86_64 Linux host the child steps through the code.
        let stepper = if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            Some(linux_jit_stepper()?)
        } else {
            None
        };
        let job = write_job(program, config, fault, stepper.as_deref());
        std::fs::write(dir.join(JOB), job).map_err(|e| e.to_string())?;
        let out = child::run_hidden_test(&child_test_name(), CHILD_DIR, dir, |exe| timed(exe))?;
        let results = std::fs::read_to_string(dir.join(RESULTS)).ok();
        if !out.status.success() {
            let (how, tail) = child::failure(&out, ended);
            // Each result line is one call that returned: the child was in the next.
            let place = match &results {
                None => "before its first call (while building)".to_string(),
                Some(text) => {
                    let done = text.lines().count();
                    match program.inputs.get(done) {
                        Some(&(e, ..)) => format!(
                            "in call {done}, of {} ({done} calls returned)",
                            program.entries[e].name
                        ),
                        None => format!("after its {done} calls"),
                    }
                }
            };
            return Err(format!("JIT child {how} {place}; {tail}"));
        }
        if let Ok(error) = std::fs::read_to_string(dir.join(ERROR)) {
            return Err(error);
        }
        parse_results(&child::complete(results, &child_test_name())?)
    }

    /// The child's test name as the test binary knows it: this module's path without the
    /// crate's name (`differential_exec::jit::child`).
    fn child_test_name() -> String {
        child::test_name(module_path!(), "child")
    }

    /// The job file: `mode`, `similar`, `variant`, `fault` (when planted), `stepper PATH`
    /// (the stepper to load, if any), `setting NAME=VALUE`, `linkage GLOB LINKAGE`, `entry
    /// NAME FLAGS`, `swaps NAME...` (the members of a constant-swap family) and `input
    /// ENTRY A B` lines (an argument `iVALUE` or `@ENTRY`, an entry's address) in the
    /// program's order, then `clif` and the module's text.
    fn write_job(
        program: &Program,
        config: Config,
        fault: Option<Fault>,
        stepper: Option<&Path>,
    ) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "mode {}", config.mode.flag());
        let _ = writeln!(s, "similar {}", config.similar);
        let _ = writeln!(s, "variant {}", config.variant.name());
        if let Some(fault) = fault {
            let _ = writeln!(s, "fault {}", fault.call);
        }
        if let Some(stepper) = stepper {
            let _ = writeln!(s, "stepper {}", stepper.display());
        }
        for setting in &program.settings {
            let _ = writeln!(s, "setting {setting}");
        }
        for (glob, linkage) in &program.linkages {
            let _ = writeln!(s, "linkage {glob} {linkage}");
        }
        for e in &program.entries {
            let _ = writeln!(s, "entry {} {}", e.name, e.flags);
        }
        for family in &program.constant_swap_families {
            let _ = writeln!(s, "swaps {}", family.join(" "));
        }
        let arg = |a: Arg| match a {
            Arg::Int(v) => format!("i{v}"),
            Arg::Address(i) => format!("@{i}"),
        };
        for &(e, a, b) in &program.inputs {
            let _ = writeln!(s, "input {e} {} {}", arg(a), arg(b));
        }
        s.push_str("clif\n");
        s.push_str(&program.clif);
        s
    }

    /// What a job file says ([`write_job`]).
    struct Job {
        program: Program,
        config: Config,
        fault: Option<Fault>,
        stepper: Option<PathBuf>,
    }

    /// The job of a job file ([`write_job`]).
    fn read_job(text: &str) -> Job {
        let mut program = program_from_fixture("");
        let mut config = Config {
            arch: if cfg!(target_arch = "aarch64") {
                Arch::Aarch64
            } else {
                Arch::X86_64
            },
            output: Output::Jit,
            mode: Mode::Disabled,
            similar: false,
            variant: Variant::Plain,
        };
        let mut fault = None;
        let mut stepper = None;
        let (head, clif) = text
            .split_once("\nclif\n")
            .expect("a job ends in its module");
        program.clif = clif.to_string();
        program.stated_merges = stated_merges::parse(clif).unwrap_or_else(|e| panic!("{e}"));
        let arg = |s: &str| match s.strip_prefix('@') {
            Some(i) => Arg::Address(i.parse().unwrap()),
            None => Arg::Int(s.strip_prefix('i').unwrap().parse().unwrap()),
        };
        for line in head.lines() {
            if let Some(path) = line.strip_prefix("stepper ") {
                stepper = Some(PathBuf::from(path));
                continue;
            }
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["mode", m] => {
                    config.mode = *Mode::ALL.iter().find(|x| x.flag() == m).unwrap();
                }
                ["similar", s] => config.similar = s.parse().unwrap(),
                ["variant", v] => {
                    config.variant =
                        Variant::by_name(v).unwrap_or_else(|| panic!("unknown variant {v:?}"));
                }
                ["fault", call] => {
                    fault = Some(Fault {
                        call: call.parse().unwrap(),
                    })
                }
                ["setting", s] => program.settings.push(s.to_string()),
                ["linkage", glob, linkage] => program
                    .linkages
                    .push((glob.to_string(), linkage.to_string())),
                ["entry", name, flags] => program.entries.push(gen::Entry {
                    name: name.to_string(),
                    flags: flags.parse().unwrap(),
                }),
                ["swaps", ..] => program
                    .constant_swap_families
                    .push(words[1..].iter().map(|w| w.to_string()).collect()),
                ["input", e, a, b] => program.inputs.push((e.parse().unwrap(), arg(a), arg(b))),
                _ => panic!("bad job line {line:?}"),
            }
        }
        Job {
            program,
            config,
            fault,
            stepper,
        }
    }

    /// Not a test: the child process of [`run_in_child`], which starts it with the job's
    /// directory in `CLIF_MERGE_JIT_CHILD`. It builds and runs the job and writes the
    /// results; run by hand (`--ignored`), without the variable, it has nothing to do.
    #[test]
    #[ignore = "the child process of a JIT build, started by differential_exec::jit::run_in_child"]
    fn child() {
        let Some(dir) = child::child_dir(CHILD_DIR) else {
            return;
        };
        let job = std::fs::read_to_string(dir.join(JOB)).unwrap();
        let Job {
            program,
            config,
            fault,
            stepper,
        } = read_job(&job);
        let fail = |e: String| std::fs::write(dir.join(ERROR), e).unwrap();
        let (address, registered) = match build(&program, config) {
            Ok(built) => built,
            Err(e) => return fail(e),
        };
        let stepper = match stepper.map(|path| Stepper::load(&path)).transpose() {
            Ok(stepper) => stepper,
            Err(e) => return fail(e),
        };
        // Steps are unwound where frames were registered; the other builds run the same
        // code without stepping.
        let limit = if registered { STEP_LIMIT } else { -1 };
        // Created once built (no file: none was made).
        let mut results = child::Results::create(&dir.join(RESULTS));
        let stepping = stepper.as_ref().map(|stepper| (stepper, limit));
        call_all(&program, &address, fault, stepping, &mut |line| {
            results.record(line)
        });
        results.end();
        if let (Some(stepper), true) = (&stepper, registered) {
            if let Err(e) = stepper.totals(&dir.join(STEPS)) {
                fail(format!("{config:?}, stepped through in the JIT child: {e}"));
            }
        }
    }

    /// The stepped calls' totals, as the stepper wrote them.
    const STEPS: &str = "jit-steps";

    /// [`SINGLE_STEP_LINUX`] loaded into the child ([`linux_jit_stepper`]): the entries'
    /// calls run with the trap flag, and each step is unwound by this process's libgcc
    /// through the frames the merger registered, as a sampling profiler or a debugger
    /// unwinds an embedder's JIT code. It stays loaded until the child ends.
    struct Stepper {
        begin: StepBegin,
        end: StepEnd,
        totals: StepTotals,
    }

    /// The stepper's functions (`fixtures/unwind/single_step_linux.c`, `step_totals.h`).
    type StartStepping = unsafe extern "C" fn();
    type StepBegin = unsafe extern "C" fn(*const u8, libc::c_int, libc::c_long);
    type StepEnd = unsafe extern "C" fn();
    type StepTotals = unsafe extern "C" fn(*mut libc::FILE) -> libc::c_int;

    impl Stepper {
        /// Load the stepper at `path` and install its SIGTRAP handler.
        fn load(path: &Path) -> Result<Stepper, String> {
            let c_path = c_path(path)?;
            // SAFETY: the library is the stepper, whose only initialisation is its own.
            let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW) };
            if handle.is_null() {
                return Err(format!("{}: dlopen failed", path.display()));
            }
            let symbol = |name: &std::ffi::CStr| {
                // SAFETY: `handle` is open, `name` a C string.
                let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
                match address.is_null() {
                    true => Err(format!("{}: no {name:?}", path.display())),
                    false => Ok(address),
                }
            };
            type Symbol = *mut libc::c_void;
            // SAFETY: the stepper's functions have these C signatures.
            unsafe {
                let start =
                    std::mem::transmute::<Symbol, StartStepping>(symbol(c"start_stepping")?);
                start();
                Ok(Stepper {
                    begin: std::mem::transmute::<Symbol, StepBegin>(symbol(c"step_begin")?),
                    end: std::mem::transmute::<Symbol, StepEnd>(symbol(c"step_end")?),
                    totals: std::mem::transmute::<Symbol, StepTotals>(symbol(c"step_totals")?),
                })
            }
        }

        /// Step through the next call of `entry` (System V), at most `limit` steps (-1:
        /// none): the trap flag is set from here.
        fn begin(&self, entry: *const u8, limit: i64) {
            // SAFETY: the stepper's `step_begin`.
            unsafe { (self.begin)(entry, 0, limit as libc::c_long) }
        }

        /// The call returned: the trap flag cleared, its steps added to the totals.
        fn end(&self) {
            // SAFETY: the stepper's `step_end`.
            unsafe { (self.end)() }
        }

        /// Write the stepped calls' totals to `file`; an error with them unless every
        /// stepped call was stepped through and every step unwound.
        fn totals(&self, file: &Path) -> Result<(), String> {
            let c_path = c_path(file)?;
            // SAFETY: a file of the child's scratch directory, opened, written and closed.
            let ok = unsafe {
                let out = libc::fopen(c_path.as_ptr(), c"w".as_ptr());
                if out.is_null() {
                    return Err(format!("{}: cannot write", file.display()));
                }
                let ok = (self.totals)(out);
                libc::fclose(out);
                ok
            };
            let totals = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
            match ok {
                0 => Err(format!(
                    "libgcc's unwinder did not find the caller of every step: {}",
                    totals.trim()
                )),
                _ => Ok(()),
            }
        }
    }

    /// `path` as a C string, for the C library's functions.
    fn c_path(path: &Path) -> Result<std::ffi::CString, String> {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// A hand-written module of `fixtures/exec/`: its entries (`; entry: %name [flags]`, with
/// `address-sensitive`, `address-result` or `reads-frame`), each called on a fixed set of
/// integers and, when it compares addresses, on the address of every entry; the linkages
/// of its functions (`; linkage: GLOB=LINKAGE`, as `--linkage` takes them); and `; set:
/// NAME=VALUE` adds a Cranelift setting to every build (`opt_level=speed`, for what only
/// the optimizer would show); `; arch: NAME` builds it for that architecture only (a
/// triple's first part: `x86_64` for `windows_fastcall` functions, which Cranelift compiles
/// for x86_64 alone).
pub fn program_from_fixture(text: &str) -> Program {
    let mut entries = Vec::new();
    let mut linkages = Vec::new();
    let mut settings = Vec::new();
    let mut architecture = None;
    for line in text.lines() {
        if let Some(arch) = line.strip_prefix("; arch: ") {
            architecture = Some(arch.trim().to_string());
            continue;
        }
        if let Some(setting) = line.strip_prefix("; set: ") {
            settings.push(setting.trim().to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("; linkage: ") {
            let (glob, linkage) = rest.trim().split_once('=').expect("GLOB=LINKAGE");
            linkages.push((glob.to_string(), linkage.to_string()));
            continue;
        }
        let Some(rest) = line.strip_prefix("; entry: %") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let name = words.next().expect("an entry names a function").to_string();
        let mut f = 0;
        for word in words {
            f |= match word {
                "address-sensitive" => flags::ADDRESS_SENSITIVE,
                "address-result" => flags::ADDRESS_RESULT,
                "reads-frame" => flags::READS_RETURN_ADDRESS | flags::READS_FRAME_POINTER,
                other => panic!("unknown entry flag {other:?}"),
            };
        }
        entries.push(gen::Entry { name, flags: f });
    }
    const INTS: [(i64, i64); 6] = [(0, 0), (1, 2), (3, -1), (7, 5), (-1, 255), (2, 1 << 40)];
    let mut inputs = Vec::new();
    for (e, entry) in entries.iter().enumerate() {
        for &(a, b) in &INTS {
            inputs.push((e, Arg::Int(a), Arg::Int(b)));
        }
        if entry.flags & flags::ADDRESS_SENSITIVE != 0 {
            for i in 0..entries.len() {
                inputs.push((e, Arg::Address(i), Arg::Int(1)));
            }
        }
    }
    Program {
        clif: text.to_string(),
        functions: text.matches("\nfunction %").count(),
        entries,
        inputs,
        family_pairs: 0,
        near_twin_pairs: 0,
        edits: Default::default(),
        tail_probes: 0,
        system_v_probes: 0,
        constant_swap_families: Vec::new(),
        wide_constant_swap_families: Vec::new(),
        vector_families: Vec::new(),
        vector_probes: 0,
        linkages,
        settings,
        architecture,
        stated_merges: stated_merges::parse(text).unwrap_or_else(|e| panic!("{e}")),
    }
}
