//! What an embedder reads about merged code besides its bytes, checked by running it: the
//! trap code of a fault, the stack maps of a collector's walk, and the exception handlers
//! of an unwinder's.
//!
//! A compiler that runs its code (a Wasm runtime, say) builds tables from what
//! `Context::compile` returned for each body, at the address where the module put it: a
//! signal handler asks which trap a faulting instruction was, a collector walking the
//! stack asks which slots of each frame hold references, and an unwinder which handler of
//! a call site catches an exception's tag. Through the merger, those tables
//! are built from [`Merged::defined_code`]: every body it compiled, each at its id's address,
//! merge-similar's shared bodies and a preemptible group's local body among them, which no
//! name of the compiler's stands for.
//!
//! Each fixture (`fixtures/compiled_metadata/`) is built in a JIT unmerged (Cranelift's own
//! `define_function`, tables from its `Context`) and through `MergingModule` in both modes,
//! with and without merge-similar. Its functions come in pairs that fold, pairs that differ
//! only in their metadata and so compile to the same bytes, pairs that merge-similar
//! merges, a preemptible pair, and a caller of a folded function.
//!
//! - `traps.clif`: functions that fault at 0 (a `trapz`, a load and an atomic add through
//!   a null pointer, a division by zero), each with a trap code of its own. Each is called
//!   with 0 in a forked child whose signal handler writes where it faulted, and the table
//!   must give the trap code the function called was written with.
//! - `stack_maps.clif`: functions that keep references in stack slots across a
//!   call to a collector, which walks the frames above it by their frame pointers and
//!   moves every root their stack maps name; each function returns its roots reloaded.
//! - `exceptions.clif`: functions whose `try_call`s catch tags of a runtime's
//!   `throw`, which walks the frames the same way and resumes at the first handler for its
//!   tag with a payload, as Wasmtime's unwinder does; a throw that nothing catches
//!   returns. Each function returns what its handler or normal return computed. Some
//!   handlers are under a dynamic context (`[context v, ...]`, Wasmtime's per-instance
//!   tags): they catch only a throw for the instance the context holds, which the unwinder
//!   reads from the frame where the call site's table says it is; merge-similar makes
//!   two functions' contexts a parameter of their shared body.
//!
//! Every build is run on this host (x86_64: the runtime's entries are assembly), for
//! aarch64 Linux under qemu and for x86_64 Windows under Wine (`compiled_metadata_exec/`:
//! the JIT's code written out as an image and run by a C program that holds the same
//! runtime), where this machine has their C compilers and runners.
//!
//! An AOT compiler writes the same tables with offsets from each body's symbol: in objects
//! for x86_64, aarch64 and x86_64 Windows, with and without PIC, every body of
//! `defined_code` must be the code its id's symbol defines.
//!
//! In every build, every function must return what it returns unmerged, and the merges the
//! fixture's comments promise must have happened, with the fault or the walk in the body
//! they say, so that the test cannot pass without folded and shared code.
//!
//! Only on Linux x86_64 and aarch64 hosts (the signal handler reads the program counter
//! from the signal's context).

#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

#[path = "compiled_metadata_exec/image.rs"]
mod image;
#[path = "common/jit_region.rs"]
mod jit_region;
#[path = "common/wine.rs"]
mod wine;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use clif_merge::merge::similar::SimilarOptions;
use clif_merge::merging_module::MergingModule;
use clif_merge::{Action, MergeMode, MergeOptions};
use cranelift_codegen::ir::{types::I64, AbiParam, Function, Signature, TrapCode};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::{
    CompiledCode, Context, ExceptionContextLoc, FinalizedMachExceptionHandler,
};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};

/// A module of the tests: its CLIF, its imports (declared first, as `u0:0`...), and its
/// functions (`u0:N` after them) by name and linkage.
struct Fixture {
    file: &'static str,
    /// What its functions do, so what a call of each shows.
    kind: Kind,
    /// Imports by name and calling convention, each `fn(i64)`.
    imports: &'static [(&'static str, CallConv)],
    functions: &'static [(&'static str, Linkage)],
    /// What merging does with the functions, by their index in `functions`.
    merges: Merges,
}

/// What a fixture's functions do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Fault at 0 ([`TRAP_CODES`]).
    Traps,
    /// Keep roots across a call to `gc_point` ([`with_roots_moved`]).
    StackMaps,
    /// Catch the tags `throw` throws ([`with_tag_thrown`]).
    Exceptions,
}

/// The merges a fixture's comments promise.
struct Merges {
    /// (folded, kept): the first folds into the second.
    folds: &'static [(usize, usize)],
    /// (caller, callee): the caller's event is in the callee's body.
    through: &'static [(usize, usize)],
    /// (a, b): equal but for their metadata: both kept, each in its own body.
    apart: &'static [(usize, usize)],
    /// Equal preemptible pairs: the event of both in one anonymous local body.
    preemptible: &'static [(usize, usize)],
    /// Pairs that merge-similar merges: with it, the event of both in one anonymous body.
    similar: &'static [(usize, usize)],
    /// Functions that differ by instructions: with merge-similar, alignment merging gives
    /// two of them one anonymous body, where both have their events (which two depends
    /// on the target's sizes).
    aligned: &'static [usize],
}

const TRAPS: Fixture = Fixture {
    file: "traps.clif",
    kind: Kind::Traps,
    imports: &[],
    functions: &[
        ("trap3", Linkage::Local),
        ("trap3_again", Linkage::Local),
        ("trap4", Linkage::Export),
        ("load7", Linkage::Export),
        ("load8", Linkage::Export),
        ("trap9_plus_1000", Linkage::Export),
        ("trap9_plus_2000", Linkage::Export),
        ("trap10", Linkage::Preemptible),
        ("trap10_again", Linkage::Preemptible),
        ("calls_trap3_again", Linkage::Export),
        ("divide_100", Linkage::Export),
        ("divide_200", Linkage::Export),
        ("add11", Linkage::Export),
        ("add12", Linkage::Export),
        ("trap14_times_3", Linkage::Export),
        ("trap15_plus_1", Linkage::Export),
        ("trap16_times_3", Linkage::Export),
        ("trap16_plus_1", Linkage::Export),
    ],
    merges: Merges {
        folds: &[(1, 0)],
        through: &[(9, 0)],
        apart: &[(2, 0), (4, 3), (13, 12)],
        preemptible: &[(7, 8)],
        similar: &[(5, 6), (10, 11)],
        aligned: &[14, 15, 16, 17],
    },
};

/// The trap code of each of [`TRAPS`]' functions' fault at 0.
const TRAP_CODES: [&str; 18] = [
    "user3", "user3", "user4", "user7", "user8", "user9", "user9", "user10", "user10", "user3",
    "int_divz", "int_divz", "user11", "user12", "user14", "user15", "user16", "user16",
];

/// [`TRAPS`]' functions that read or write through their argument.
const THROUGH_POINTER: [usize; 4] = [3, 4, 12, 13];

const STACK_MAPS: Fixture = Fixture {
    file: "stack_maps.clif",
    kind: Kind::StackMaps,
    imports: &[("gc_point", CallConv::SystemV)],
    functions: &[
        ("one_root", Linkage::Export),
        ("one_root_again", Linkage::Local),
        ("first_of_two", Linkage::Export),
        ("second_of_two", Linkage::Export),
        ("root_plus_1000", Linkage::Export),
        ("root_plus_2000", Linkage::Export),
        ("root_times_3", Linkage::Preemptible),
        ("root_times_3_again", Linkage::Preemptible),
        ("two_frames", Linkage::Export),
        ("root_times_4", Linkage::Export),
        ("root_times_4_plus_1", Linkage::Export),
        ("second_of_two_plus_1", Linkage::Export),
        ("mixed_root", Linkage::Export),
        ("mixed_root_plus_1", Linkage::Export),
        ("mixed_first_of_two", Linkage::Export),
        ("mixed_second_of_two_plus_1", Linkage::Export),
    ],
    merges: Merges {
        folds: &[(1, 0)],
        through: &[(8, 0)],
        apart: &[(3, 2)],
        preemptible: &[(6, 7)],
        similar: &[(4, 5)],
        aligned: &[12, 13, 14, 15],
    },
};

const EXCEPTIONS: Fixture = Fixture {
    file: "exceptions.clif",
    kind: Kind::Exceptions,
    imports: &[("throw", CallConv::Tail)],
    functions: &[
        ("catch_1", Linkage::Export),
        ("catch_1_again", Linkage::Local),
        ("catch_2", Linkage::Export),
        ("catch_1_minus_1000", Linkage::Export),
        ("catch_1_minus_2000", Linkage::Export),
        ("catch_1_times_3", Linkage::Preemptible),
        ("catch_1_times_3_again", Linkage::Preemptible),
        ("outer", Linkage::Export),
        ("catch_3_times_5", Linkage::Export),
        ("catch_3_times_5_plus_1", Linkage::Export),
        ("catch_1_in_7", Linkage::Export),
        ("catch_1_in_9", Linkage::Export),
        ("catch_1_in_own", Linkage::Export),
        ("catch_2_before_default", Linkage::Export),
    ],
    merges: Merges {
        folds: &[(1, 0)],
        through: &[(7, 0)],
        apart: &[(2, 0)],
        preemptible: &[(5, 6)],
        similar: &[(3, 4), (10, 11)],
        aligned: &[8, 9],
    },
};

/// One build of a module.
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

/// A body in the embedder's tables: where it is, its traps and its stack maps by offset.
#[derive(Clone)]
struct Body {
    id: FuncId,
    start: usize,
    len: usize,
    traps: BTreeMap<u32, TrapCode>,
    /// By return address: the distance from the frame pointer down to the stack pointer
    /// at the call, and the offsets from that stack pointer of the frame's roots.
    stack_maps: BTreeMap<u32, (u32, Vec<u32>)>,
    /// By return address: the distance from the frame pointer down to the stack pointer
    /// at the call, and the exception handlers of the call site.
    handlers: BTreeMap<u32, (u32, Vec<Catch>)>,
}

/// One exception handler of a call site, as the runtimes match it.
#[derive(Clone, Copy, Debug)]
struct Catch {
    /// The tag it catches; `None` for `default`, which catches any.
    tag: Option<u32>,
    /// Where the dynamic context in force for it is (Cranelift's `context` items apply to
    /// the tags after them, until the next): an offset from the stack pointer at the call.
    context: Option<u32>,
    /// The handler's offset in the body.
    to: u32,
}

impl Catch {
    /// A call site's handlers, each with the context in force for it.
    fn all_of(handlers: &[FinalizedMachExceptionHandler]) -> Vec<Catch> {
        let mut context = None;
        let mut catches = Vec::new();
        for handler in handlers {
            let (tag, to) = match *handler {
                FinalizedMachExceptionHandler::Tag(tag, to) => (Some(tag.as_u32()), to),
                FinalizedMachExceptionHandler::Default(to) => (None, to),
                FinalizedMachExceptionHandler::Context(ExceptionContextLoc::SPOffset(at)) => {
                    context = Some(at);
                    continue;
                }
                // The fixtures call in the `tail` convention, which keeps no register across
                // a call: a context lives in the frame.
                FinalizedMachExceptionHandler::Context(ExceptionContextLoc::GPR(r)) => {
                    panic!("a dynamic context in register {r}")
                }
            };
            catches.push(Catch { tag, context, to });
        }
        // A `default` matches only when no tag does, wherever the table lists it
        // (Cranelift's `ExceptionTable`): the runtimes, which take the first that matches,
        // see the tags first, in their order.
        catches.sort_by_key(|c| c.tag.is_none());
        catches
    }

    /// Whether it catches `thrown` ([`thrown`]) at a call whose stack pointer was `sp`: its
    /// tag is the thrown one and, under a context, the context is the thrown instance; or
    /// it is a `default`.
    ///
    /// # Safety
    /// `sp` is the stack pointer at the call of a live frame of the call site.
    unsafe fn takes(&self, thrown: i64, sp: usize) -> bool {
        let (tag, instance) = self::thrown(thrown);
        match (self.tag, self.context) {
            (None, _) => true,
            (Some(t), None) => i64::from(t) == tag,
            (Some(t), Some(at)) => {
                i64::from(t) == tag && ((sp + at as usize) as *const i64).read() == instance
            }
        }
    }
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
            stack_maps: code
                .buffer
                .user_stack_maps()
                .iter()
                .map(|(at, span, map)| {
                    (
                        *at,
                        (*span, map.entries().map(|(_, offset)| offset).collect()),
                    )
                })
                .collect(),
            handlers: code
                .buffer
                .call_sites()
                .filter(|site| !site.exception_handlers.is_empty())
                .map(|site| {
                    let frame_offset = site.frame_offset.expect("a try_call's frame offset");
                    (
                        site.ret_addr,
                        (frame_offset, Catch::all_of(site.exception_handlers)),
                    )
                })
                .collect(),
        }
    }

    fn holds(&self, address: usize) -> bool {
        (self.start..self.start + self.len).contains(&address)
    }
}

/// A finalized build: the module (its code stays mapped while it lives), each function's
/// entry, the tables an embedder builds, and what the merger did.
struct Finalized {
    _module: JITModule,
    /// Each function's address.
    addresses: Vec<usize>,
    table: Vec<Body>,
    merged: Option<MergedFacts>,
}

/// What the merger did, by function index.
struct MergedFacts {
    ids: Vec<FuncId>,
    actions: Vec<Action>,
    bodies: Vec<FuncId>,
    /// The bodies of the table that no name of ours stands for.
    anonymous: Vec<FuncId>,
}

fn parse(fixture: &Fixture) -> Vec<Function> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/compiled_metadata")
        .join(fixture.file);
    let text = std::fs::read_to_string(&path).unwrap();
    let functions = cranelift_reader::parse_functions(&text).unwrap();
    assert_eq!(functions.len(), fixture.functions.len(), "{}", fixture.file);
    functions
}

/// Declare the imports, then the functions; the functions' ids.
fn declare_all(module: &mut dyn Module, fixture: &Fixture, functions: &[Function]) -> Vec<FuncId> {
    for (n, &(name, call_conv)) in fixture.imports.iter().enumerate() {
        let mut import = Signature::new(call_conv);
        import.params.push(AbiParam::new(I64));
        let id = module
            .declare_function(name, Linkage::Import, &import)
            .unwrap();
        assert_eq!(id.as_u32() as usize, n, "{name} is u0:{n}");
    }
    fixture
        .functions
        .iter()
        .zip(functions)
        .enumerate()
        .map(|(n, (&(name, linkage), func))| {
            let id = module
                .declare_function(name, linkage, &func.signature)
                .unwrap();
            let want = fixture.imports.len() + n;
            assert_eq!(id.as_u32() as usize, want, "{name} is u0:{want}");
            id
        })
        .collect()
}

fn addresses(module: &JITModule, ids: &[FuncId]) -> Vec<usize> {
    ids.iter()
        .map(|&id| module.get_finalized_function(id) as usize)
        .collect()
}

impl Finalized {
    /// Function `n`, to call in this process (a JIT for the host).
    fn entry(&self, n: usize) -> extern "C" fn(i64) -> i64 {
        // SAFETY: every function of the fixtures takes and returns one integer, in System
        // V or in `tail`, which pass them in the same registers on x86_64.
        unsafe { std::mem::transmute(self.addresses[n] as *const u8) }
    }
}

/// A JIT for this host whose imports resolve to `imports`.
fn host_builder(fixture: &Fixture, imports: &[*const u8]) -> JITBuilder {
    let mut builder = JITBuilder::new(default_libcall_names()).unwrap();
    for (&(name, _), &address) in fixture.imports.iter().zip(imports) {
        builder.symbol(name, address);
    }
    builder
}

/// Build `fixture` as `build` in a JIT made by `builder`.
fn finalize(build: Build, fixture: &Fixture, builder: JITBuilder) -> Finalized {
    let functions = parse(fixture);
    let jit = JITModule::new(builder);
    match build {
        Build::Unmerged => {
            let mut module = jit;
            let ids = declare_all(&mut module, fixture, &functions);
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
                addresses: addresses(&module, &ids),
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
            let ids = declare_all(&mut module, fixture, &functions);
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
                ids,
            };
            Finalized {
                addresses: addresses(&module, &facts.ids),
                _module: module,
                table,
                merged: Some(facts),
            }
        }
    }
}

/// The merges `merges` promises, so that the events ran in folded and shared code and not
/// only in each function's own: `ran_in` is the body each function's fault or innermost
/// walked frame was in, by function index. With merge-similar, whose alignment merging may
/// also give functions of other shapes one body, only what it must do is checked: the
/// pairs that differ in a constant run in an anonymous body, and what folds or calls runs
/// where its twin or callee does.
fn check_what_merged(build: Build, merges: &Merges, facts: &MergedFacts, ran_in: &[FuncId]) {
    let Build::Merged { similar, .. } = build else {
        return;
    };
    let id = |n: usize| facts.ids[n];
    for &(folded, kept) in merges.folds {
        assert_ne!(facts.actions[folded], Action::Keep, "{build:?}: {folded}");
        assert_eq!(facts.bodies[folded], id(kept), "{build:?}: {folded} folds");
        assert_eq!(
            ran_in[folded], ran_in[kept],
            "{build:?}: {folded} ran in {kept}'s"
        );
    }
    for &(caller, callee) in merges.through {
        assert_eq!(
            ran_in[caller], ran_in[callee],
            "{build:?}: {caller} in {callee}'s"
        );
    }
    let mut shared = merges.preemptible.to_vec();
    if similar {
        shared.extend(merges.similar);
    }
    for &(a, b) in &shared {
        assert_eq!(ran_in[a], ran_in[b], "{build:?}: {a} and {b} share a body");
        assert!(
            facts.anonymous.contains(&ran_in[a]),
            "{build:?}: {a} ran in an anonymous body, not {}",
            ran_in[a]
        );
    }
    if similar {
        let aligned = merges.aligned;
        assert!(
            aligned.is_empty()
                || aligned.iter().any(|&a| {
                    facts.anonymous.contains(&ran_in[a])
                        && aligned.iter().any(|&b| b != a && ran_in[b] == ran_in[a])
                }),
            "{build:?}: two of {aligned:?} run in one anonymous body: {:?}",
            aligned.iter().map(|&a| ran_in[a]).collect::<Vec<_>>()
        );
        return;
    }
    for &(folded, kept) in merges.folds {
        assert_eq!(
            ran_in[folded],
            id(kept),
            "{build:?}: {folded} ran in the kept body"
        );
    }
    for &(a, b) in merges.apart {
        for n in [a, b] {
            assert_eq!(facts.actions[n], Action::Keep, "{build:?}: {n} kept");
            assert_eq!(ran_in[n], id(n), "{build:?}: {n} ran in its own body");
        }
    }
    for &(a, b) in merges.preemptible {
        assert_eq!(facts.bodies[a], ran_in[a], "{build:?}: {a}'s body_of");
        assert_eq!(facts.bodies[b], ran_in[b], "{build:?}: {b}'s body_of");
    }
    assert_eq!(
        facts.anonymous.len(),
        merges.preemptible.len(),
        "{build:?}: anonymous bodies"
    );
}

// ---- Traps -------------------------------------------------------------------------------

/// How a call in a child ended.
#[derive(Debug)]
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
        .find(|b| b.holds(pc))
        .ok_or_else(|| format!("{pc:#x} is in no body of the table"))?;
    let offset = (pc - body.start) as u32;
    body.traps
        .get(&offset)
        .map(|&code| (body.id, code))
        .ok_or_else(|| format!("no trap at {}+{offset:#x}", body.id))
}

/// An argument of a call: a number, or the address of a word of the caller's (which holds
/// [`WORD`] in every build).
#[derive(Clone, Copy, Debug)]
enum Arg {
    Number(i64),
    Word,
}

/// What the word an [`Arg::Word`] points to holds before the call.
const WORD: i64 = 0x5eed;

/// What the collector adds to a root it moves.
const MOVED_BY: i64 = 1 << 32;

/// What the payload of an exception is per unit of its tag (the C runtimes' too).
const PAYLOAD_PER_TAG: i64 = 100;

/// The payload of an exception thrown as `thrown` ([`thrown`]).
fn payload(thrown: i64) -> i64 {
    PAYLOAD_PER_TAG * self::thrown(thrown).0
}

/// What `throw(x)` throws: the tag `x % 16` for the instance `x / 16` (the C runtimes
/// read it so too). A handler under a dynamic context catches only its own instance's.
fn thrown(x: i64) -> (i64, i64) {
    (x & 15, x >> 4)
}

/// The arguments each call of `fixture`'s function `n` takes: for a trap, first the one
/// that faults.
fn arguments(fixture: &Fixture, n: usize) -> Vec<Arg> {
    let numbers = |xs: &[i64]| xs.iter().map(|&x| Arg::Number(x)).collect::<Vec<_>>();
    match fixture.kind {
        Kind::Traps if THROUGH_POINTER.contains(&n) => vec![Arg::Number(0), Arg::Word],
        Kind::Traps => numbers(&[0, 1, 7, -3, i64::MAX]),
        Kind::StackMaps => numbers(&[1, 7, -3, 1 << 40]),
        // Tag 1 of instances 7 and 9, tag 2 of instance 7, tag 1 of instance 0.
        Kind::Exceptions if n >= 10 => numbers(&[1 + 16 * 7, 1 + 16 * 9, 2 + 16 * 7, 1]),
        Kind::Exceptions => numbers(&[1, 2, 3]),
    }
}

/// What each of [`STACK_MAPS`]' functions returns when the collector moves its roots.
fn with_roots_moved(n: usize, x: i64) -> i64 {
    match n {
        0 | 1 => x + MOVED_BY,
        2 => MOVED_BY - 1,
        3 => -(MOVED_BY + 1),
        4 => x + MOVED_BY + 1000,
        5 => x + MOVED_BY + 2000,
        6 | 7 => 3 * (x + MOVED_BY),
        8 => (x + MOVED_BY) + (x + 7 + MOVED_BY),
        9 => 4 * (x + MOVED_BY),
        10 => 4 * (x + MOVED_BY) + 1,
        11 => -MOVED_BY,
        12 => mix(x + MOVED_BY, 4),
        13 => mix(x + MOVED_BY, 4).wrapping_add(1),
        14 => mix((x + MOVED_BY) ^ (x + 1), 12),
        15 => mix(x ^ (x + 1 + MOVED_BY), 12).wrapping_add(1),
        _ => unreachable!("{n}"),
    }
}

/// `rounds` rounds of `y = y * c; y ^= y >> 29` (logical), the multipliers SplitMix64's
/// and xorshift's in turn, as the stack-map fixture's `mixed_*` functions compute.
fn mix(x: i64, rounds: usize) -> i64 {
    const C: [u64; 4] = [
        0x9E37_79B9_7F4A_7C15,
        0xBF58_476D_1CE4_E5B9,
        0x94D0_49BB_1331_11EB,
        0x2545_F491_4F6C_DD1D,
    ];
    let mut y = x as u64;
    for c in C.iter().cycle().take(rounds) {
        y = y.wrapping_mul(*c);
        y ^= y >> 29;
    }
    y as i64
}

/// What each of [`EXCEPTIONS`]' functions returns when `x` is thrown ([`thrown`]).
fn with_tag_thrown(n: usize, x: i64) -> i64 {
    let (tag, instance) = thrown(x);
    let caught = |t: i64, then: i64| if tag == t { then } else { -1 };
    let caught_in = |i: i64, then: i64| if instance == i { caught(1, then) } else { -1 };
    let payload = payload(x);
    match n {
        0 | 1 => caught(1, payload + 1),
        2 => caught(2, payload + 1),
        3 => caught(1, payload - 1000),
        4 => caught(1, payload - 2000),
        5 | 6 => caught(1, payload * 3),
        7 if tag == 2 => payload + 50,
        7 => caught(1, payload + 1) + 7,
        8 => caught(3, payload * 5),
        9 => caught(3, payload * 5 + 1),
        10 => caught_in(7, payload + 7),
        11 => caught_in(9, payload + 9),
        12 => caught(1, payload + instance),
        // `default` catches what no tag does, wherever the table lists it.
        13 if tag == 2 => payload + 2,
        13 => payload - 5,
        _ => unreachable!("{n}"),
    }
}

/// One call: how it ended, and the bodies its runtime's walk went through, innermost
/// first (none for a call that walked nothing).
#[derive(Debug)]
struct Call {
    ended: Ended,
    walked: Vec<FuncId>,
}

/// Check one build of `fixture`: `calls[n]` are function `n`'s calls on its
/// [`arguments`], wherever they ran. Every fault must be the trap code the function
/// called was written with, every result what the function returns unmerged (the first
/// build, `reference`, whose results must be the ones the fixture says), and the merges
/// the fixture promises must have happened.
fn check_build(
    fixture: &Fixture,
    build: Build,
    finalized: &Finalized,
    calls: &[Vec<Call>],
    reference: &mut Vec<Vec<i64>>,
) {
    let context = format!("{} {build:?}", fixture.file);
    // The body each function's fault or innermost walked frame was in.
    let mut ran_in = Vec::new();
    for (n, calls) in calls.iter().enumerate() {
        let name = fixture.functions[n].0;
        let args = arguments(fixture, n);
        assert_eq!(calls.len(), args.len(), "{context}: {name}'s calls");
        let mut returned = calls.iter().zip(&args);
        if fixture.kind == Kind::Traps {
            let (call, arg) = returned.next().expect("the call that faults");
            let Ended::Faulted(signal, pc) = call.ended else {
                panic!("{context}: {name}({arg:?}) did not fault: {call:?}");
            };
            let (body, code) = trap_at(&finalized.table, pc)
                .unwrap_or_else(|e| panic!("{context}: {name} faulted ({signal}): {e}"));
            assert_eq!(
                code.to_string(),
                TRAP_CODES[n],
                "{context}: {name} faulted in {body}, which the table says is trap {code}"
            );
            ran_in.push(body);
        } else {
            ran_in.push(
                *calls[0].walked.first().unwrap_or_else(|| {
                    panic!("{context}: {name}'s walk met no frame of the table")
                }),
            );
        }
        let results: Vec<i64> = returned
            .map(|(call, arg)| match call.ended {
                Ended::Returned(v) => v,
                Ended::Faulted(..) => panic!("{context}: {name}({arg:?}) ended {call:?}"),
            })
            .collect();
        if fixture.kind == Kind::StackMaps {
            let frames = if n == 8 { 2 } else { 1 };
            for call in calls {
                assert_eq!(call.walked.len(), frames, "{context}: {name}: {call:?}");
            }
        }
        if let Build::Merged { .. } = build {
            assert_eq!(results, reference[n], "{context}: {name}");
            continue;
        }
        let number = |arg: &Arg| match *arg {
            Arg::Number(x) => x,
            Arg::Word => WORD,
        };
        let want: Option<Vec<i64>> = match fixture.kind {
            Kind::Traps => None,
            Kind::StackMaps => Some(
                args.iter()
                    .map(|a| with_roots_moved(n, number(a)))
                    .collect(),
            ),
            Kind::Exceptions => Some(args.iter().map(|a| with_tag_thrown(n, number(a))).collect()),
        };
        if let Some(want) = want {
            assert_eq!(results, want, "{context}: {name}");
        }
        reference.push(results);
    }
    if let Some(facts) = &finalized.merged {
        check_what_merged(build, &fixture.merges, facts, &ran_in);
    }
}

/// Call `entry` on `arg` in this process: a word of ours for [`Arg::Word`].
fn call_here(arg: Arg, call: impl FnOnce(i64) -> Ended) -> Ended {
    let mut word = WORD;
    let x = match arg {
        Arg::Number(x) => x,
        Arg::Word => &mut word as *mut i64 as i64,
    };
    call(x)
}

#[test]
fn a_fault_in_merged_code_maps_to_the_trap_code_of_the_function_called() {
    let mut reference = Vec::new();
    for build in Build::ALL {
        let finalized = finalize(build, &TRAPS, host_builder(&TRAPS, &[]));
        let calls: Vec<Vec<Call>> = (0..TRAPS.functions.len())
            .map(|n| {
                let entry = finalized.entry(n);
                // Each in a child: the word's writes stay there, so every call sees WORD.
                arguments(&TRAPS, n)
                    .into_iter()
                    .map(|arg| Call {
                        ended: call_here(arg, |x| call_in_child(entry, x)),
                        walked: Vec::new(),
                    })
                    .collect()
            })
            .collect();
        check_build(&TRAPS, build, &finalized, &calls, &mut reference);
    }
}

// ---- A runtime: a collector and an unwinder over the tables ------------------------------

/// The runtime's imports, `gc_point(x)` and `throw(tag)`: each walks the frames of the
/// code in the table of its thread, from its caller's up, by their frame pointers
/// (Cranelift's frame record: the caller's frame pointer at `[fp]`, the return address
/// into it at `[fp + 8]`), as `compiled_metadata_exec/walk.c` does for the other targets.
#[cfg(target_arch = "x86_64")]
mod runtime {
    use std::cell::{Cell, RefCell};

    use cranelift_module::FuncId;

    use super::{payload, Body, MOVED_BY};

    thread_local! {
        /// The table of the build running on this thread.
        static TABLE: RefCell<Vec<Body>> = const { RefCell::new(Vec::new()) };
        /// The bodies of the frames the last walk went through, innermost first.
        static WALKED: RefCell<Vec<FuncId>> = const { RefCell::new(Vec::new()) };
        /// How many frames' stack pointers the two ways of finding them disagreed on.
        static DISAGREED: Cell<usize> = const { Cell::new(0) };
    }

    // Each entry hands the return address's place and its caller's frame pointer, as
    // they are at the call, to a Rust function, which returns to the caller itself.
    // `resume(pc, sp, fp, payload)` enters an exception handler as Cranelift expects
    // it: the stack and frame pointers of the call site's frame, the payload in rax and
    // rdx.
    std::arch::global_asm!(
        ".text",
        ".p2align 4",
        ".globl clif_merge_test_gc_point",
        "clif_merge_test_gc_point:",
        "mov rsi, rsp",
        "mov rdx, rbp",
        "jmp {collect}",
        ".p2align 4",
        ".globl clif_merge_test_throw",
        "clif_merge_test_throw:",
        "mov rsi, rsp",
        "mov rdx, rbp",
        "jmp {throw}",
        ".p2align 4",
        ".globl clif_merge_test_resume",
        "clif_merge_test_resume:",
        "mov rsp, rsi",
        "mov rbp, rdx",
        "mov rax, rcx",
        "xor edx, edx",
        "jmp rdi",
        collect = sym collect,
        throw = sym throw,
    );

    extern "C" {
        fn clif_merge_test_gc_point(x: i64);
        fn clif_merge_test_throw(tag: i64);
        fn clif_merge_test_resume(pc: usize, sp: usize, fp: usize, payload: i64) -> !;
    }

    /// The address the fixtures' `gc_point` import resolves to.
    pub fn gc_point() -> *const u8 {
        clif_merge_test_gc_point as *const u8
    }

    /// The address the fixtures' `throw` import resolves to.
    pub fn throw_entry() -> *const u8 {
        clif_merge_test_throw as *const u8
    }

    /// Walk the frames of the table's code from the one whose return address is at
    /// `return_address` and whose frame pointer is `frame`, calling `visit` with each
    /// frame's body, the return address's offset in it, and the frame's frame pointer,
    /// until it gives a result; the bodies walked are kept for [`walked`]. The stack
    /// pointer at a call is the frame pointer less the distance the call site's stack map
    /// or exception table gives, as Wasmtime finds it (the aarch64 runtime does the same);
    /// here it is also the address above the return address, which the walk checks
    /// ([`stack_pointers_disagreed`]).
    ///
    /// # Safety
    /// The frames are the JIT code's, which keeps frame pointers; the walk stops at the
    /// first return address outside the table's code.
    unsafe fn walk<T>(
        return_address: *const usize,
        mut frame: *const usize,
        mut visit: impl FnMut(&Body, u32, usize) -> Option<T>,
    ) -> Option<T> {
        TABLE.with_borrow(|table| {
            let mut walked = Vec::new();
            let mut at = *return_address;
            let mut sp = return_address as usize + 8;
            let mut found = None;
            while let Some(body) = table.iter().find(|b| b.holds(at)) {
                walked.push(body.id);
                let offset = (at - body.start) as u32;
                let fp = frame as usize;
                let distances = [
                    body.stack_maps.get(&offset).map(|(span, _)| *span),
                    body.handlers
                        .get(&offset)
                        .map(|(frame_offset, _)| *frame_offset),
                ];
                if distances
                    .into_iter()
                    .flatten()
                    .any(|d| fp - d as usize != sp)
                {
                    DISAGREED.set(DISAGREED.get() + 1);
                }
                found = visit(body, offset, fp);
                if found.is_some() {
                    break;
                }
                at = *frame.add(1);
                sp = frame as usize + 16;
                frame = *frame as *const usize;
            }
            WALKED.set(walked);
            found
        })
    }

    /// `gc_point`: move every root the stack maps of the frames name.
    extern "C" fn collect(_x: i64, return_address: *const usize, frame: *const usize) {
        // SAFETY: called by `gc_point` from the JIT code.
        unsafe {
            walk(return_address, frame, |body, offset, fp| {
                if let Some((span, roots)) = body.stack_maps.get(&offset) {
                    let sp = fp - *span as usize;
                    for &root in roots {
                        let root = (sp + root as usize) as *mut i64;
                        root.write(root.read().wrapping_add(MOVED_BY));
                    }
                }
                None::<()>
            });
        }
    }

    /// `throw`: resume at the first handler of a call site in the frames that takes
    /// `thrown` ([`Catch::takes`]), or return when there is none.
    extern "C" fn throw(thrown: i64, return_address: *const usize, frame: *const usize) {
        // SAFETY: called by `throw` from the JIT code.
        let handler = unsafe {
            walk(return_address, frame, |body, offset, fp| {
                let (frame_offset, catches) = body.handlers.get(&offset)?;
                let sp = fp - *frame_offset as usize;
                let catch = catches.iter().find(|c| c.takes(thrown, sp))?;
                Some((body.start + catch.to as usize, sp, fp))
            })
        };
        // Every borrow and allocation of the walk is over: nothing of this frame is
        // needed after the jump.
        if let Some((pc, sp, fp)) = handler {
            // SAFETY: `pc` is a handler of the call site whose frame `sp` and `fp` are.
            unsafe { clif_merge_test_resume(pc, sp, fp, payload(thrown)) }
        }
    }

    /// Run `calls` with `table` as the runtime's.
    pub fn with_table<T>(table: &[Body], calls: impl FnOnce() -> T) -> T {
        TABLE.set(table.to_vec());
        let result = calls();
        TABLE.set(Vec::new());
        result
    }

    /// The bodies the last walk went through, innermost first.
    pub fn walked() -> Vec<FuncId> {
        WALKED.take()
    }

    /// How many frames' stack pointers at their call sites were not the address above
    /// their return addresses, since the last call.
    pub fn stack_pointers_disagreed() -> usize {
        DISAGREED.take()
    }
}

// ---- Stack maps and exceptions -----------------------------------------------------------

/// Run every function of `fixture` as `build` on this host, with the runtime.
#[cfg(target_arch = "x86_64")]
fn run_with_the_runtime(fixture: &Fixture, build: Build, reference: &mut Vec<Vec<i64>>) {
    let imports = [runtime::gc_point(), runtime::throw_entry()];
    let imports: Vec<*const u8> = fixture
        .imports
        .iter()
        .map(|&(name, _)| imports[usize::from(name == "throw")])
        .collect();
    let finalized = finalize(build, fixture, host_builder(fixture, &imports));
    let calls: Vec<Vec<Call>> = (0..fixture.functions.len())
        .map(|n| {
            let entry = finalized.entry(n);
            arguments(fixture, n)
                .into_iter()
                .map(|arg| {
                    let (ended, walked) = runtime::with_table(&finalized.table, || {
                        let ended = call_here(arg, |x| Ended::Returned(entry(x)));
                        (ended, runtime::walked())
                    });
                    assert_eq!(
                        runtime::stack_pointers_disagreed(),
                        0,
                        "the frame pointer less the call site's distance is the stack pointer"
                    );
                    Call { ended, walked }
                })
                .collect()
        })
        .collect();
    check_build(fixture, build, &finalized, &calls, reference);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_collector_walking_merged_frames_finds_every_root_by_the_stack_maps() {
    let mut reference = Vec::new();
    for build in Build::ALL {
        run_with_the_runtime(&STACK_MAPS, build, &mut reference);
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn an_exception_thrown_through_merged_frames_lands_in_the_handler_for_its_tag() {
    let mut reference = Vec::new();
    for build in Build::ALL {
        run_with_the_runtime(&EXCEPTIONS, build, &mut reference);
    }
}

// ---- Other targets, as images ------------------------------------------------------------

/// Every fixture as `target`'s JIT code, run as an image (`compiled_metadata_exec/`): the
/// same checks of the same builds, its faults caught and its frames walked by a runtime
/// written in C.
fn the_tables_hold_for(target: image::Target) {
    if let Some(why) = target.unavailable() {
        eprintln!("skipping {target:?}: {why}");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    for fixture in [&TRAPS, &STACK_MAPS, &EXCEPTIONS] {
        let mut reference = Vec::new();
        for (i, build) in Build::ALL.into_iter().enumerate() {
            let dir = scratch.path().join(format!("{}-{i}", fixture.file));
            let (finalized, calls) = image::run(target, fixture, build, &dir);
            check_build(fixture, build, &finalized, &calls, &mut reference);
        }
    }
}

/// aarch64 Linux, under qemu.
#[test]
fn the_tables_hold_for_aarch64_code_under_qemu() {
    the_tables_hold_for(image::Target::Aarch64);
}

/// x86_64 Windows, under Wine.
#[test]
fn the_tables_hold_for_windows_code_under_wine() {
    the_tables_hold_for(image::Target::Windows);
}

// ---- Objects -----------------------------------------------------------------------------

/// The bytes a relocation of `kind` writes, which the object holds other than the code.
fn relocated_bytes(kind: cranelift_codegen::binemit::Reloc) -> usize {
    match kind {
        cranelift_codegen::binemit::Reloc::Abs8 => 8,
        _ => 4,
    }
}

/// An AOT compiler writes its tables with offsets from each body's symbol: in an object,
/// every body of `defined_code` must be the code its id's symbol defines, byte for byte
/// but where a relocation writes, for every fixture, on x86_64 and aarch64 (ELF) and x86_64
/// Windows (COFF, whose epilogues the merger rewrites), with and without PIC, in both modes
/// with and without merge-similar, and the anonymous bodies among them.
#[test]
fn every_body_of_defined_code_is_the_code_of_its_symbol_in_an_object() {
    use clif_merge::TargetInfo;
    use cranelift_object::{ObjectBuilder, ObjectModule};

    for triple in [
        "x86_64-unknown-linux-gnu",
        "aarch64-unknown-linux-gnu",
        "x86_64-pc-windows-gnu",
    ] {
        for pic in ["true", "false"] {
            let mut anonymous = 0;
            for fixture in [&TRAPS, &STACK_MAPS, &EXCEPTIONS] {
                for build in Build::ALL {
                    let Build::Merged { mode, similar } = build else {
                        continue;
                    };
                    let context = format!("{triple}, is_pic={pic}, {}, {build:?}", fixture.file);
                    let isa = clif_merge::build_isa(
                        &TargetInfo::from_triple_str(triple).unwrap(),
                        &[("is_pic".to_string(), pic.to_string())],
                    )
                    .unwrap();
                    let object = ObjectModule::new(
                        ObjectBuilder::new(isa, "metadata", default_libcall_names()).unwrap(),
                    );
                    let options = MergeOptions {
                        mode,
                        ..MergeOptions::default()
                    };
                    let mut module = MergingModule::new(object, options).unwrap();
                    if similar {
                        module = module.with_merge_similar(SimilarOptions {
                            cost_model: false,
                            ..SimilarOptions::default()
                        });
                    }
                    let functions = parse(fixture);
                    let ids = declare_all(&mut module, fixture, &functions);
                    for (&id, func) in ids.iter().zip(functions) {
                        module
                            .define_function(id, &mut Context::for_function(func))
                            .unwrap();
                    }
                    let (product, merged) = module.finish().unwrap();
                    let mut bodies = 0;
                    for (id, code) in merged.defined_code() {
                        let symbol = product.object.symbol(product.function_symbol(id));
                        let object::write::SymbolSection::Section(section) = symbol.section else {
                            panic!("{context}: {id} is not defined in a section");
                        };
                        let start = symbol.value as usize;
                        let want = code.buffer.data();
                        let data = product.object.section(section).data();
                        let mut got = data[start..start + want.len()].to_vec();
                        let mut want = want.to_vec();
                        for reloc in code.buffer.relocs() {
                            let at = reloc.offset as usize;
                            for bytes in [&mut got, &mut want] {
                                bytes[at..at + relocated_bytes(reloc.kind)].fill(0);
                            }
                        }
                        assert_eq!(got, want, "{context}: {id}'s code");
                        assert_eq!(symbol.size as usize, want.len(), "{context}: {id}'s size");
                        bodies += 1;
                        // The merger's own: declared anonymous, after the fixture's.
                        anonymous += usize::from(!ids.contains(&id));
                    }
                    assert!(bodies >= ids.len() / 2, "{context}: {bodies} bodies");
                }
            }
            assert!(anonymous > 0, "{triple}: anonymous bodies checked");
        }
    }
}
