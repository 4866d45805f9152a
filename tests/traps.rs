//! What an embedder reads about merged code besides its bytes: the trap code of a fault.
//!
//! A compiler that runs its code (a Wasm runtime, say) catches a fault in its signal
//! handler and asks its own table which trap the faulting instruction was: it builds that
//! table from what `Context::compile` returned for each body, at the address where the
//! module put the body. Through the merger, that is [`Merged::defined_code`]: every body
//! it compiled (merge-similar's shared bodies and a preemptible group's local body among
//! them, which no name of the compiler's stands for), each at its id's address.
//!
//! Here a JIT module of functions that fault when their argument is 0, each with a trap
//! code of its own (`fixtures/traps/traps.clif`: a `trapz`, a load and an atomic add
//! through a null pointer, a division by zero; pairs that fold, pairs that differ only in
//! their trap code and so compile to the same bytes, pairs that merge-similar merges, a
//! caller whose callee faults), is built unmerged and merged in every mode, with and
//! without merge-similar. Each function is called with 0 in a forked child of the test,
//! whose signal handler writes where it faulted; the test looks that address up in the
//! table and must find the trap code of the function called, the one its CLIF says, in
//! every build. Called with other arguments, every function returns what it returned
//! unmerged. The builds must also have merged what the comments say they merge, so that
//! the test cannot pass without faults in folded and shared code.
//!
//! Only on Linux x86_64 and aarch64 hosts (the handler reads the program counter from the
//! signal's context); elsewhere it skips with a notice.

#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use clif_merge::merge::similar::SimilarOptions;
use clif_merge::merging_module::MergingModule;
use clif_merge::{Action, MergeMode, MergeOptions};
use cranelift_codegen::ir::{Function, TrapCode};
use cranelift_codegen::{CompiledCode, Context};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};

/// The fixture's functions, by FuncId: name, linkage, the trap code of its fault at 0.
const FUNCTIONS: [(&str, Linkage, &str); 14] = [
    ("trap3", Linkage::Local, "user3"),
    ("trap3_again", Linkage::Local, "user3"),
    ("trap4", Linkage::Export, "user4"),
    ("load7", Linkage::Export, "user7"),
    ("load8", Linkage::Export, "user8"),
    ("trap9_plus_1000", Linkage::Export, "user9"),
    ("trap9_plus_2000", Linkage::Export, "user9"),
    ("trap10", Linkage::Preemptible, "user10"),
    ("trap10_again", Linkage::Preemptible, "user10"),
    ("calls_trap3_again", Linkage::Export, "user3"),
    ("divide_100", Linkage::Export, "int_divz"),
    ("divide_200", Linkage::Export, "int_divz"),
    ("add11", Linkage::Export, "user11"),
    ("add12", Linkage::Export, "user12"),
];

/// The functions that read or write through their argument (the others take a number).
const THROUGH_POINTER: [usize; 4] = [3, 4, 12, 13];

/// One build of the module.
#[derive(Clone, Copy, Debug)]
enum Build {
    /// Every function defined by the JIT itself, as without the merger.
    Unmerged,
    /// Through `MergingModule` in `mode`, with or without merge-similar.
    Merged { mode: MergeMode, similar: bool },
}

impl Build {
    const ALL: [Build; 5] = [
        Build::Unmerged,
        Build::Merged {
            mode: MergeMode::Trampolines,
            similar: false,
        },
        Build::Merged {
            mode: MergeMode::Aliases,
            similar: false,
        },
        Build::Merged {
            mode: MergeMode::Trampolines,
            similar: true,
        },
        Build::Merged {
            mode: MergeMode::Aliases,
            similar: true,
        },
    ];
}

/// A body in the embedder's trap table: where it is, and its traps by offset.
struct Body {
    id: FuncId,
    start: usize,
    len: usize,
    traps: BTreeMap<u32, TrapCode>,
}

impl Body {
    fn new(id: FuncId, start: *const u8, code: &CompiledCode) -> Body {
        Body {
            id,
            start: start as usize,
            len: code.buffer.data().len(),
            traps: code
                .buffer
                .traps()
                .iter()
                .map(|t| (t.offset, t.code))
                .collect(),
        }
    }
}

/// A finalized build: the module (its code stays mapped while it lives), each id's entry,
/// and the trap table an embedder builds.
struct Finalized {
    _module: JITModule,
    entries: Vec<extern "C" fn(i64) -> i64>,
    table: Vec<Body>,
    /// What the merger did, for the merged builds: each id's action and body, and the ids
    /// of `table` that are anonymous.
    merged: Option<MergedFacts>,
}

struct MergedFacts {
    actions: Vec<Action>,
    bodies: Vec<FuncId>,
    /// The bodies of the table that no name of ours stands for.
    anonymous: Vec<FuncId>,
}

fn fixture() -> Vec<Function> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/traps/traps.clif");
    let text = std::fs::read_to_string(&path).unwrap();
    let functions = cranelift_reader::parse_functions(&text).unwrap();
    assert_eq!(functions.len(), FUNCTIONS.len());
    functions
}

fn declare_all(module: &mut dyn Module, functions: &[Function]) -> Vec<FuncId> {
    FUNCTIONS
        .iter()
        .zip(functions)
        .enumerate()
        .map(|(n, (&(name, linkage, _), func))| {
            let id = module
                .declare_function(name, linkage, &func.signature)
                .unwrap();
            assert_eq!(id.as_u32() as usize, n, "u0:{n} is FuncId {n}");
            id
        })
        .collect()
}

fn entries(module: &JITModule, ids: &[FuncId]) -> Vec<extern "C" fn(i64) -> i64> {
    ids.iter()
        .map(|&id| unsafe { std::mem::transmute(module.get_finalized_function(id)) })
        .collect()
}

fn finalize(build: Build) -> Finalized {
    let functions = fixture();
    let jit = JITModule::new(JITBuilder::new(default_libcall_names()).unwrap());
    match build {
        Build::Unmerged => {
            let mut module = jit;
            let ids = declare_all(&mut module, &functions);
            let mut code = Vec::new();
            for (&id, func) in ids.iter().zip(functions) {
                let mut ctx = Context::for_function(func);
                module.define_function(id, &mut ctx).unwrap();
                code.push((id, ctx.compiled_code().unwrap().clone()));
            }
            module.finalize_definitions().unwrap();
            let table = code
                .iter()
                .map(|(id, code)| Body::new(*id, module.get_finalized_function(*id), code))
                .collect();
            Finalized {
                entries: entries(&module, &ids),
                _module: module,
                table,
                merged: None,
            }
        }
        Build::Merged { mode, similar } => {
            let options = MergeOptions {
                mode,
                ..MergeOptions::default()
            };
            let mut module = MergingModule::new(jit, options).unwrap();
            if similar {
                // Without the cost model, which may find these bodies too small to share.
                module = module.with_merge_similar(SimilarOptions {
                    cost_model: false,
                    ..SimilarOptions::default()
                });
            }
            let ids = declare_all(&mut module, &functions);
            for (&id, func) in ids.iter().zip(functions) {
                module
                    .define_function(id, &mut Context::for_function(func))
                    .unwrap();
            }
            let done = module.finalize_definitions().unwrap();
            let (module, merged) = (done.module, done.merged);
            let table: Vec<Body> = merged
                .defined_code()
                .map(|(id, code)| Body::new(id, module.get_finalized_function(id), code))
                .collect();
            // What `compiled_code(id)` says agrees with the table, at the body's address.
            for &id in &ids {
                if let Some(code) = merged.compiled_code(id) {
                    let body = module.get_finalized_function(merged.body_of(id)) as usize;
                    let row = table.iter().find(|b| b.start == body);
                    let row = row.unwrap_or_else(|| panic!("{build:?}: {id}'s body in the table"));
                    assert_eq!(row.len, code.buffer.data().len(), "{build:?}: {id}");
                }
            }
            let decls = module.declarations();
            let facts = MergedFacts {
                actions: ids.iter().map(|&id| merged.action(id)).collect(),
                bodies: ids.iter().map(|&id| merged.body_of(id)).collect(),
                anonymous: table
                    .iter()
                    .map(|b| b.id)
                    .filter(|&id| decls.get_function_decl(id).name.is_none())
                    .collect(),
            };
            Finalized {
                entries: entries(&module, &ids),
                _module: module,
                table,
                merged: Some(facts),
            }
        }
    }
}

/// How a call in a child ended.
#[derive(Debug, PartialEq)]
enum Ended {
    Returned(i64),
    /// The signal, and the program counter it was raised at.
    Faulted(i32, usize),
}

/// The write end of the pipe to the parent, in the child.
static TO_PARENT: AtomicI32 = AtomicI32::new(-1);

/// A record: a kind byte (`R` returned, `F` faulted), the signal, then the value.
fn send(kind: u8, signal: i32, value: u64) {
    let mut record = [0u8; 16];
    record[0] = kind;
    record[4..8].copy_from_slice(&signal.to_le_bytes());
    record[8..16].copy_from_slice(&value.to_le_bytes());
    let fd = TO_PARENT.load(Ordering::Relaxed);
    // SAFETY: writing a buffer of ours; async-signal-safe.
    unsafe { libc::write(fd, record.as_ptr().cast(), record.len()) };
}

#[cfg(target_arch = "x86_64")]
unsafe fn program_counter(context: *mut libc::c_void) -> usize {
    (*(context as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RIP as usize] as usize
}

#[cfg(target_arch = "aarch64")]
unsafe fn program_counter(context: *mut libc::c_void) -> usize {
    (*(context as *const libc::ucontext_t)).uc_mcontext.pc as usize
}

extern "C" fn on_fault(signal: i32, _info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes the interrupted context.
    let pc = unsafe { program_counter(context) };
    send(b'F', signal, pc as u64);
    // SAFETY: leaving the child at once; nothing of it is needed after the fault.
    unsafe { libc::_exit(0) };
}

const FAULTS: [i32; 5] = [
    libc::SIGILL,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGTRAP,
];

/// Call `entry(arg)` in a forked child, whose handler reports a fault's program counter.
/// The child does nothing that may allocate or lock: it installs the handlers, sets an
/// alarm, calls, writes and exits.
fn call_in_child(entry: extern "C" fn(i64) -> i64, arg: i64) -> Ended {
    let mut fds = [0i32; 2];
    // SAFETY: plain system calls on our own descriptors; the child below only makes
    // async-signal-safe calls and runs the JIT's code.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            libc::close(fds[0]);
            TO_PARENT.store(fds[1], Ordering::Relaxed);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction =
                on_fault as extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) as usize;
            action.sa_flags = libc::SA_SIGINFO;
            for signal in FAULTS {
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
            libc::alarm(20);
            let value = entry(arg);
            send(b'R', 0, value as u64);
            libc::_exit(0);
        }
        libc::close(fds[1]);
        let mut record = [0u8; 16];
        let mut got = 0;
        while got < record.len() {
            let n = libc::read(
                fds[0],
                record[got..].as_mut_ptr().cast(),
                record.len() - got,
            );
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        libc::close(fds[0]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(
            got == record.len() && libc::WIFEXITED(status),
            "the child ended without a report (status {status:#x}, {got} bytes)"
        );
        let signal = i32::from_le_bytes(record[4..8].try_into().unwrap());
        let value = u64::from_le_bytes(record[8..16].try_into().unwrap());
        match record[0] {
            b'R' => Ended::Returned(value as i64),
            b'F' => Ended::Faulted(signal, value as usize),
            other => panic!("a record of kind {other}"),
        }
    }
}

/// The trap code the table gives for a fault at `pc`, or why there is none.
fn trap_at(table: &[Body], pc: usize) -> Result<(FuncId, TrapCode), String> {
    let body = table
        .iter()
        .find(|b| (b.start..b.start + b.len).contains(&pc))
        .ok_or_else(|| format!("{pc:#x} is in no body of the table"))?;
    let offset = (pc - body.start) as u32;
    body.traps
        .get(&offset)
        .map(|&code| (body.id, code))
        .ok_or_else(|| format!("no trap at {}+{offset:#x}", body.id))
}

/// The arguments that do not fault: numbers, or for the functions that go through their
/// argument, the address of a word of ours.
fn arguments(n: usize, word: &mut i64) -> Vec<i64> {
    if THROUGH_POINTER.contains(&n) {
        vec![word as *mut i64 as i64]
    } else {
        vec![1, 7, -3, i64::MAX]
    }
}

#[test]
fn a_fault_in_merged_code_maps_to_the_trap_code_of_the_function_called() {
    let mut reference: Vec<Vec<i64>> = Vec::new();
    for build in Build::ALL {
        let finalized = finalize(build);
        // The body each function's fault was in.
        let mut faulted_in = Vec::new();
        for (n, &(name, _, code)) in FUNCTIONS.iter().enumerate() {
            let entry = finalized.entries[n];
            let ended = call_in_child(entry, 0);
            let Ended::Faulted(signal, pc) = ended else {
                panic!("{build:?}: {name}(0) did not fault: {ended:?}");
            };
            let (body, found) = trap_at(&finalized.table, pc)
                .unwrap_or_else(|e| panic!("{build:?}: {name}(0) faulted ({signal}): {e}"));
            assert_eq!(
                found.to_string(),
                code,
                "{build:?}: {name}(0) faulted in {body}, which the table says is trap {found}"
            );
            faulted_in.push(body);
            // Called with other arguments, it returns what it returned unmerged. The word
            // that the pointer functions load and add to starts at the same value in every
            // build; the child's writes stay in the child.
            let mut word = 0x5eed;
            let results: Vec<i64> = arguments(n, &mut word)
                .into_iter()
                .map(|arg| match call_in_child(entry, arg) {
                    Ended::Returned(v) => v,
                    ended => panic!("{build:?}: {name}({arg}) ended {ended:?}"),
                })
                .collect();
            match build {
                Build::Unmerged => reference.push(results),
                Build::Merged { .. } => assert_eq!(results, reference[n], "{build:?}: {name}"),
            }
        }
        if let (Build::Merged { mode, similar }, Some(facts)) = (build, &finalized.merged) {
            check_what_merged(mode, similar, facts, &faulted_in);
        }
    }
}

/// The merges the fixture's comments promise, so that the faults above happened in
/// folded and shared code and not only in each function's own: `faulted_in` is the body
/// each function faulted in.
fn check_what_merged(mode: MergeMode, similar: bool, facts: &MergedFacts, faulted_in: &[FuncId]) {
    let id = FuncId::from_u32;
    let context = format!("{mode:?}, merge-similar {similar}");
    for n in [1, 9] {
        assert_eq!(
            faulted_in[n],
            id(0),
            "{context}: u0:{n} faults in trap3's body"
        );
    }
    assert_eq!(
        facts.bodies[1],
        id(0),
        "{context}: trap3_again folds into trap3"
    );
    assert_ne!(
        facts.actions[1],
        Action::Keep,
        "{context}: trap3_again folded"
    );
    for (n, twin) in [(2, 0), (4, 3), (13, 12)] {
        assert_eq!(facts.actions[n], Action::Keep, "{context}: u0:{n} kept");
        assert_ne!(
            facts.bodies[n], facts.bodies[twin],
            "{context}: u0:{n} apart"
        );
        assert_eq!(
            faulted_in[n],
            id(n as u32),
            "{context}: u0:{n} in its own body"
        );
    }
    // The preemptible pair faults in the local body they share, and with merge-similar
    // each pair that differs in a constant in the body it shares: all anonymous.
    let mut shared = vec![(7, 8)];
    if similar {
        shared.extend([(5, 6), (10, 11)]);
    }
    assert_eq!(
        facts.bodies[7], faulted_in[7],
        "{context}: trap10's body_of"
    );
    assert_eq!(
        facts.bodies[8], faulted_in[8],
        "{context}: trap10_again's body_of"
    );
    for &(a, b) in &shared {
        assert_eq!(faulted_in[a], faulted_in[b], "{context}: u0:{a} and u0:{b}");
        assert!(
            facts.anonymous.contains(&faulted_in[a]),
            "{context}: u0:{a} faults in an anonymous body, not {}",
            faulted_in[a]
        );
    }
    assert_eq!(
        facts.anonymous.len(),
        shared.len(),
        "{context}: anonymous bodies"
    );
}
