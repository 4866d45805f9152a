//! Differential execution of compiled code (issue #11): generated modules of function
//! families ([`differential_exec::gen`]) run unmerged and merged in every configuration a user
//! can pick — object with PIC in a shared library and without PIC in a non-PIE executable,
//! for x86_64 and aarch64 (under qemu) and x86_64 Windows (under Wine, an executable and a
//! DLL), and cranelift-jit through the plugin (on the host in a child process: a build
//! whose code crashes is a failure naming the signal; for aarch64 and Windows as an image
//! under qemu or Wine) — with
//! `--merge-functions disabled|trampolines|aliases`, the two that merge each with and
//! without `--merge-similar` (under which every constant-swap family of the generator must
//! become one shared body with holes; with merging disabled it does nothing); and builds with each of the
//! command line's other options ([`Variant`]: `--function-sections` linked with
//! `--gc-sections`, `--addresses-insignificant`, `--no-cycles`, `--no-code-folding`,
//! `--no-alignment-merging`, `unwind_info=false`, `--clif-thunks`, `--emit-clif` with the
//! CLIF compiled as written, aarch64's `use_bti=true` where branch protection is enforced,
//! `sign_return_address=true`, and both, and the plugin's same options in the JIT but for
//! function sections and CLIF), one per program in turn.
//! Every entry must return the same results on the same
//! inputs, write the same memory, see the same return address and frame, and return
//! addresses of the same functions. Odd seeds build with `opt_level=speed` (where alias
//! regions and memory flags are taken at their word), even seeds without optimization.
//! Each executable's and shared library's harness (PIC code with its PLT; on Windows DLLs,
//! PIC executables and JIT images, their function table registered, too; the host's JIT
//! child, its frames registered with the plugin's `Merged::register_jit_frames`) also stops
//! at every instruction of each entry's first call and unwinds from there: Linux x86_64 with
//! the trap flag and libgcc
//! (`fixtures/unwind/single_step_linux.c`), Windows x64 under Wine with the trap flag and
//! `RtlVirtualUnwind` (one entry in eight, `fixtures/unwind/single_step_windows.c`), aarch64
//! at breakpoints under qemu and libgcc (one entry in eight,
//! `fixtures/unwind/breakpoints_aarch64.c`). Every stop must reach the call site
//! with the stack pointer and callee-saved registers the call left, through one frame per
//! call the stepper saw made and not returned from.
//!
//! `cargo test --profile test-release --test differential` runs a fixed set of seeds. The long mode,
//! `CLIF_MERGE_DIFF_PAIRS=1000000 cargo test --profile test-release --test differential -- --ignored
//! --nocapture`, runs programs until that many pairs of family members have been built and
//! run (`CLIF_MERGE_DIFF_SEED` sets the first seed), and prints what it ran: programs,
//! functions, family pairs, the near-twin pairs among them (members that differ by
//! structural edits, issue #14), how many members each kind of edit changed and how many
//! probes (entries that return a helper's result, `tail` and `system_v`) it ran. A failing
//! program is written under `target/tmp/differential-failures/` with the configuration
//! and the differences, and printed (`differential: FAILED ...`) as soon as it fails, so
//! that a long run stopped by a timeout still tells. `CLIF_MERGE_DIFF_FIXTURES=TEXT` runs
//! only the exec fixtures whose file names contain TEXT.

mod differential_exec;
#[path = "common/stack_growth.rs"]
mod stack_growth;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use differential_exec::gen::{self, Edit, Shape};
use differential_exec::{
    compare, jit, keep_failure, program_from_fixture, run, same_unmerged,
    unlike_block_bodies_on_this_thread, Arch, Config, Mode, Output, Variant,
};

/// Every configuration for `arch` and its `outputs` (those that this machine can run and
/// the program links into), references first, then the builds with each of `variants` (in
/// `trampolines` and `aliases`, with merge-similar, and unmerged where the variant changes
/// unmerged code; objects, and the JIT where it has the option).
fn configurations(arch: Arch, outputs: &[Output], variants: &[Variant]) -> Vec<Config> {
    let mut out = Vec::new();
    for &output in outputs {
        for mode in Mode::ALL {
            // Merge-similar does nothing when merging is disabled: no second reference.
            let similar_too = mode != Mode::Disabled;
            for similar in [false, true].into_iter().filter(|&s| !s || similar_too) {
                out.push(Config {
                    arch,
                    output,
                    mode,
                    similar,
                    variant: Variant::Plain,
                });
            }
        }
    }
    for &variant in variants.iter().filter(|&&v| v != Variant::Plain) {
        for output in outputs
            .iter()
            .copied()
            .filter(|&output| variant.applies(arch, output))
        {
            if variant.changes_unmerged_code() {
                out.push(Config {
                    arch,
                    output,
                    mode: Mode::Disabled,
                    similar: false,
                    variant,
                });
            }
            for mode in [Mode::Trampolines, Mode::Aliases] {
                out.push(Config {
                    arch,
                    output,
                    mode,
                    similar: true,
                    variant,
                });
            }
        }
    }
    out
}

/// The variant program `n` (a seed, or a fixture's place) is also built with: each in turn.
fn variant_of(n: usize) -> Variant {
    Variant::OTHERS[n % Variant::OTHERS.len()]
}

/// The architectures this machine can run, each missing one with a one-line notice.
fn architectures() -> Vec<Arch> {
    [Arch::X86_64, Arch::Aarch64, Arch::X86_64Windows]
        .into_iter()
        .filter(|&arch| match arch.available() {
            Ok(()) => true,
            Err(why) => {
                eprintln!("differential: skipping {}: {why}", arch.triple());
                false
            }
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    programs: AtomicUsize,
    functions: AtomicUsize,
    pairs: AtomicUsize,
    /// Pairs of near-twin family members that differ by structural edits.
    near_twin_pairs: AtomicUsize,
    /// Members each structural edit changed, by [`Edit::ALL`]'s order.
    edits: [AtomicUsize; Edit::ALL.len()],
    /// Entries that return a `tail` helper's result ([`gen::Program::tail_probes`]).
    tail_probes: AtomicUsize,
    /// Entries that return a `system_v` helper's result ([`gen::Program::system_v_probes`]).
    system_v_probes: AtomicUsize,
    /// Helper families whose members permute their constants
    /// ([`gen::Program::constant_swap_families`]).
    constant_swap_families: AtomicUsize,
    /// Helper families on `i32x4` values ([`gen::Program::vector_families`]), and those of
    /// them whose members differ in one site (for alignment merging).
    vector_families: AtomicUsize,
    vector_twin_families: AtomicUsize,
    /// Entries that return a vector helper's result ([`gen::Program::vector_probes`]).
    vector_probes: AtomicUsize,
    builds: AtomicUsize,
    /// Builds with each of [`Variant::OTHERS`], in its order.
    variant_builds: [AtomicUsize; Variant::OTHERS.len()],
    /// Bodies merged with unlike blocks, in the builds whose merging ran in this process
    /// (objects; the host's JIT builds merge in a child).
    unlike_bodies: AtomicUsize,
    calls: AtomicUsize,
    failures: Mutex<Vec<String>>,
}

/// Build and run program `seed` in every configuration of `archs`; record what failed.
fn check_seed(seed: u64, shape: Shape, archs: &[Arch], tally: &Tally) {
    let variant = variant_of(seed as usize);
    let shape = Shape {
        frame_readers: shape.frame_readers && variant.keeps_frame_pointers(),
        return_calls: shape.return_calls && variant.keeps_frame_pointers(),
        ..shape
    };
    let mut program = gen::program(seed, shape);
    if variant.tail_functions_unlanded() {
        program.call_tail_functions_directly();
    }
    // `CLIF_MERGE_DIFF_DUMP=DIR` keeps every generated module, to look at what it folds.
    if let Ok(dir) = std::env::var("CLIF_MERGE_DIFF_DUMP") {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(
            std::path::Path::new(&dir).join(format!("seed-{seed}.clif")),
            gen::with_header(&program, seed),
        );
    }
    check_program(&program, &format!("seed-{seed}"), archs, &[variant], tally);
}

/// Build and run `program` (called `label` in messages and failure files: `seed-N`, or
/// `fixture-NAME`) in every configuration of `archs`, those of `variants` included.
fn check_program(
    program: &gen::Program,
    label: &str,
    archs: &[Arch],
    variants: &[Variant],
    tally: &Tally,
) {
    let scratch = tempfile::tempdir().unwrap();
    for &arch in archs {
        // The outputs the program builds into; the others by why not, each reason once.
        let mut outputs: Vec<Output> = Vec::new();
        let mut skipped: BTreeMap<String, Vec<Output>> = BTreeMap::new();
        for output in arch.outputs() {
            match arch.links(output, program) {
                Ok(()) => outputs.push(output),
                Err(why) => skipped.entry(why).or_default().push(output),
            }
        }
        for (why, skipped) in skipped {
            eprintln!(
                "differential: {label}: skipping {} {skipped:?}: {why}",
                arch.triple()
            );
        }
        let configs = configurations(arch, &outputs, variants);
        let mut reference = std::collections::HashMap::new();
        for (i, &config) in configs.iter().enumerate() {
            let dir = scratch.path().join(format!("{i}"));
            let unlike_before = unlike_block_bodies_on_this_thread();
            let outcome = run(program, config, &dir);
            tally.unlike_bodies.fetch_add(
                unlike_block_bodies_on_this_thread() - unlike_before,
                Ordering::Relaxed,
            );
            tally.builds.fetch_add(1, Ordering::Relaxed);
            if let Some(v) = Variant::OTHERS.iter().position(|&v| v == config.variant) {
                tally.variant_builds[v].fetch_add(1, Ordering::Relaxed);
            }
            let problems = match (outcome, config.is_reference()) {
                (Ok(results), true) => {
                    tally.calls.fetch_add(results.len(), Ordering::Relaxed);
                    // Unmerged code behaves the same however it is built and loaded: a
                    // loader or harness that got it wrong would fail every build of its
                    // output alike, which comparing with its own reference cannot see.
                    let first = reference.get(&(outputs[0] as u8));
                    let problems = first
                        .map_or_else(Vec::new, |first| same_unmerged(program, first, &results));
                    reference.insert(config.output as u8, results);
                    if problems.is_empty() {
                        continue;
                    }
                    problems
                }
                (Ok(results), false) => {
                    tally.calls.fetch_add(results.len(), Ordering::Relaxed);
                    match reference.get(&(config.reference().output as u8)) {
                        // Its failure is reported already; nothing to compare with.
                        None => vec![format!(
                            "its reference build ({:?}) failed: nothing to compare with",
                            config.reference()
                        )],
                        Some(want) if results.len() != want.len() => vec![format!(
                            "{} results, expected {}",
                            results.len(),
                            want.len()
                        )],
                        Some(want) => compare(program, config, want, &results),
                    }
                }
                (Err(e), _) => vec![e],
            };
            if !problems.is_empty() {
                let kept = keep_failure(program, label, config, &problems);
                let mut message = format!(
                    "{label}, {config:?}: {} differences (program in {})",
                    problems.len(),
                    kept.display()
                );
                for p in problems.iter().take(5) {
                    message.push_str("\n    ");
                    message.push_str(p);
                }
                // Printed as it happens too: a long run stopped by a timeout still tells.
                eprintln!("differential: FAILED {message}");
                tally.failures.lock().unwrap().push(message);
            }
        }
    }
    tally.programs.fetch_add(1, Ordering::Relaxed);
    tally
        .functions
        .fetch_add(program.functions, Ordering::Relaxed);
    tally
        .pairs
        .fetch_add(program.family_pairs, Ordering::Relaxed);
    tally
        .near_twin_pairs
        .fetch_add(program.near_twin_pairs, Ordering::Relaxed);
    for (count, &n) in tally.edits.iter().zip(&program.edits) {
        count.fetch_add(n, Ordering::Relaxed);
    }
    tally
        .tail_probes
        .fetch_add(program.tail_probes, Ordering::Relaxed);
    tally
        .system_v_probes
        .fetch_add(program.system_v_probes, Ordering::Relaxed);
    tally
        .constant_swap_families
        .fetch_add(program.constant_swap_families.len(), Ordering::Relaxed);
    tally
        .vector_families
        .fetch_add(program.vector_families.len(), Ordering::Relaxed);
    let twins = program.vector_families.iter().filter(|(_, swap)| !swap);
    tally
        .vector_twin_families
        .fetch_add(twins.count(), Ordering::Relaxed);
    tally
        .vector_probes
        .fetch_add(program.vector_probes, Ordering::Relaxed);
}

fn report(tally: &Tally) -> String {
    let near_twins = match tally.near_twin_pairs.load(Ordering::Relaxed) {
        0 => String::new(),
        pairs => {
            let edits: Vec<String> = Edit::ALL
                .iter()
                .zip(&tally.edits)
                .map(|(e, n)| format!("{} {}", e.name(), n.load(Ordering::Relaxed)))
                .collect();
            format!(
                " ({pairs} near-twin pairs; members changed by each structural edit: {})",
                edits.join(", ")
            )
        }
    };
    let variants: Vec<String> = Variant::OTHERS
        .iter()
        .zip(&tally.variant_builds)
        .map(|(v, n)| format!("{v:?} {}", n.load(Ordering::Relaxed)))
        .collect();
    format!(
        "{} programs, {} functions, {} family pairs{near_twins}, {} constant-swap families, {} vector families ({} twin), {} tail probes, {} system_v probes, {} vector probes, {} builds (with another option: {}; {} bodies merged with unlike blocks), {} calls compared",
        tally.programs.load(Ordering::Relaxed),
        tally.functions.load(Ordering::Relaxed),
        tally.pairs.load(Ordering::Relaxed),
        tally.constant_swap_families.load(Ordering::Relaxed),
        tally.vector_families.load(Ordering::Relaxed),
        tally.vector_twin_families.load(Ordering::Relaxed),
        tally.tail_probes.load(Ordering::Relaxed),
        tally.system_v_probes.load(Ordering::Relaxed),
        tally.vector_probes.load(Ordering::Relaxed),
        tally.builds.load(Ordering::Relaxed),
        variants.join(", "),
        tally.unlike_bodies.load(Ordering::Relaxed),
        tally.calls.load(Ordering::Relaxed),
    )
}

/// The shape of long mode's programs.
const LONG_SHAPE: Shape = Shape {
    helper_families: 12,
    entry_families: 40,
    family_size: 24,
    inputs_per_entry: 6,
    frame_readers: true,
    return_calls: true,
    twin_helper_families: 4,
    twin_entry_families: 12,
    constant_swap_families: 6,
    wide_constant_swap_families: 3,
    vector_families: 4,
};

const SHAPE: Shape = Shape {
    helper_families: 8,
    entry_families: 14,
    family_size: 8,
    inputs_per_entry: 4,
    frame_readers: true,
    return_calls: true,
    twin_helper_families: 3,
    twin_entry_families: 5,
    constant_swap_families: 4,
    wide_constant_swap_families: 2,
    vector_families: 3,
};

/// The wide constant-swap families reach merge-similar's thunks that grow the stack
/// argument area, which the runs above would otherwise never build: in the fixed seeds'
/// modules, built with merge-similar (`aliases`, an object without PIC) for x86_64 (Linux
/// and Windows) and aarch64, every member of a wide family that merge-similar gave a body
/// with holes starts by moving the stack pointer down (`sub rsp`, `push qword ptr [rsp]`
/// on Windows, `sub sp, sp`), and most families are such groups.
#[test]
fn wide_constant_swap_families_become_thunks_that_grow_the_stack_area() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wide-families");
    std::fs::create_dir_all(&dir).unwrap();
    let (mut families, mut grown) = (0, 0);
    for seed in 1..=4 {
        let program = gen::program(seed, SHAPE);
        let input = dir.join(format!("seed-{seed}.clif"));
        std::fs::write(&input, &program.clif).unwrap();
        for arch in [Arch::X86_64, Arch::X86_64Windows, Arch::Aarch64] {
            let config = Config {
                arch,
                output: Output::Executable,
                mode: Mode::Aliases,
                similar: true,
                variant: Variant::Plain,
            };
            let object = dir.join(format!("seed-{seed}-{}.o", arch.triple()));
            let report = dir.join(format!("seed-{seed}-{}.json", arch.triple()));
            differential_exec::command(
                std::process::Command::new(env!("CARGO_BIN_EXE_clif-merge"))
                    .args(differential_exec::clif_merge_args(
                        &program, config, &input, &object,
                    ))
                    .arg("--report")
                    .arg(&report),
            )
            .unwrap();
            let report: clif_merge::report::Report =
                serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
            let groups = report.similar.map(|s| s.groups).unwrap_or_default();
            for family in &program.wide_constant_swap_families {
                families += 1;
                let grouped = groups.iter().any(|g| {
                    !g.aligned
                        && g.holes >= 2
                        && family.iter().all(|m| g.members.contains(&format!("%{m}")))
                });
                if !grouped {
                    continue;
                }
                grown += 1;
                for member in family {
                    assert!(
                        stack_growth::function_grows_the_stack_area(
                            &object,
                            member,
                            arch != Arch::Aarch64
                        ),
                        "seed {seed}, {arch:?}: {member} is not a thunk that grows the stack area"
                    );
                }
            }
        }
    }
    assert!(
        families > 0 && grown * 4 >= families * 3,
        "{grown} of {families} wide families became thunks that grow the stack area"
    );
}

#[test]
fn merged_builds_behave_as_unmerged_in_every_configuration() {
    let archs = architectures();
    let tally = Tally::default();
    for seed in 1..=Variant::OTHERS.len() as u64 {
        check_seed(seed, SHAPE, &archs, &tally);
    }
    // And one program of long mode's shape built with unlike blocks (seed 20's variant):
    // the few bodies of the seeds above whose uses the dominance repair carries compute
    // the same on their inputs with a wrong carried value, and a fault there passes them;
    // this program's many such bodies show it.
    assert_eq!(variant_of(20), Variant::UnlikeBlocks);
    check_seed(20, LONG_SHAPE, &archs, &tally);
    eprintln!("differential: {}", report(&tally));
    // The near-twin families are really there: pairs that differ by structural edits, and
    // every kind of edit changed some member.
    assert!(
        tally.near_twin_pairs.load(Ordering::Relaxed) >= 100,
        "too few near-twin pairs: {}",
        report(&tally)
    );
    let missing: Vec<&str> = Edit::ALL
        .iter()
        .zip(&tally.edits)
        .filter(|(_, n)| n.load(Ordering::Relaxed) == 0)
        .map(|(e, _)| e.name())
        .collect();
    assert!(
        missing.is_empty(),
        "no member changed by {missing:?}: {}",
        report(&tally)
    );
    // Every `tail` helper's result is printed by an entry of its own (a register thunk
    // that passes a wrong argument to a `tail` body shows).
    assert!(
        tally.tail_probes.load(Ordering::Relaxed) >= 20,
        "too few tail probes: {}",
        report(&tally)
    );
    // And every other helper's (i64, i32, f64 and i16/i8 parameters).
    assert!(
        tally.system_v_probes.load(Ordering::Relaxed) >= 80,
        "too few system_v probes: {}",
        report(&tally)
    );
    // Helper families whose members permute their constants, each (the harness checks)
    // one body with holes under merge-similar, probed like every helper.
    assert!(
        tally.constant_swap_families.load(Ordering::Relaxed) >= 30,
        "too few constant-swap families: {}",
        report(&tally)
    );
    // Helpers on `i32x4` values, of both kinds (the swap families are among the
    // constant-swap families; the harness requires most twin families to be merged by
    // alignment), every member probed.
    let (vectors, twins) = (
        tally.vector_families.load(Ordering::Relaxed),
        tally.vector_twin_families.load(Ordering::Relaxed),
    );
    assert!(
        twins >= 8 && vectors - twins >= 8 && tally.vector_probes.load(Ordering::Relaxed) >= 60,
        "too few vector families or probes: {}",
        report(&tally)
    );
    // The builds with unlike blocks merged some bodies so (the extra-block and
    // split-block edits), not only bodies whose blocks pair: those bodies ran, and behaved.
    assert!(
        tally.unlike_bodies.load(Ordering::Relaxed) > 0,
        "no body merged with unlike blocks (the seed whose variant is align-unlike-blocks \
         may need another place in Variant::OTHERS): {}",
        report(&tally)
    );
    // Every other option of the command line was built with and run (those of an
    // architecture this machine can run).
    let unbuilt: Vec<Variant> = Variant::OTHERS
        .iter()
        .zip(&tally.variant_builds)
        .filter(|(v, n)| {
            let possible = archs
                .iter()
                .any(|&a| v.applies(a, Output::SharedLibrary) || v.applies(a, Output::Jit));
            possible && n.load(Ordering::Relaxed) == 0
        })
        .map(|(&v, _)| v)
        .collect();
    assert!(
        unbuilt.is_empty(),
        "never built with {unbuilt:?}: {}",
        report(&tally)
    );
    let failures = tally.failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The regression fixtures of `fixtures/exec/`: each pins a bug the harness has found or
/// would have found, and runs in every configuration like a generated module. Each states
/// which of its functions merging folds together and which it keeps apart, checked in
/// every object build ([`differential_exec::stated_merges`]), so that a fixture whose merge
/// stopped happening fails instead of running unmerged code.
#[test]
fn exec_fixtures_behave_as_unmerged_in_every_configuration() {
    let archs = architectures();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/exec");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "clif"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "fixtures/exec is missing its fixtures");
    // `CLIF_MERGE_DIFF_FIXTURES=TEXT` runs only the fixtures whose names contain TEXT, each
    // with the variant it takes in the whole set.
    let only = std::env::var("CLIF_MERGE_DIFF_FIXTURES").ok();
    if let Some(only) = &only {
        eprintln!("differential fixtures: only those named *{only}*");
    }
    let tally = Tally::default();
    for (n, path) in paths.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy();
        if only
            .as_ref()
            .is_some_and(|only| !name.contains(only.as_str()))
        {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let program = program_from_fixture(&text);
        // A fixture may name the variants that found its bug (`; variant: NAME`, repeatable);
        // the others take the next in turn.
        let mut variants: Vec<Variant> = text
            .lines()
            .filter_map(|l| l.strip_prefix("; variant: "))
            .map(|name| {
                Variant::by_name(name.trim())
                    .unwrap_or_else(|| panic!("{}: unknown variant {name:?}", path.display()))
            })
            .collect();
        if variants.is_empty() {
            // The first variant from its own in turn that it can take. One that reads its frame
            // or tail-calls needs frame pointers. One with `tail` functions cannot take
            // branch protection with signed return addresses: Cranelift starts a `tail`
            // function with `paciaz`, no landing pad, and a shared library's own calls of an
            // exported function go through its PLT, an indirect branch, so unmerged code
            // stops there (the generator makes such functions hidden and calls them
            // directly: `gen::Program::call_tail_functions_directly`).
            let needs_frame_pointers = ["get_frame_pointer", "get_return_address", "return_call"]
                .iter()
                .any(|op| text.contains(op));
            let has_tail_functions = text
                .lines()
                .any(|l| l.starts_with("function ") && l.trim_end().ends_with(" tail {"));
            let takes = |v: Variant| {
                (!needs_frame_pointers || v.keeps_frame_pointers())
                    && !(has_tail_functions && v.tail_functions_unlanded())
            };
            let variant = (n..)
                .map(variant_of)
                .find(|&v| takes(v))
                .expect("most variants take any fixture");
            variants.push(variant);
        }
        assert!(
            !program.entries.is_empty(),
            "{}: no entries",
            path.display()
        );
        statements_are_checked(&program, &archs, &variants)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let before = tally.failures.lock().unwrap().len();
        let stem = path.file_stem().unwrap().to_string_lossy();
        let unlike_before = tally.unlike_bodies.load(Ordering::Relaxed);
        check_program(
            &program,
            &format!("fixture-{stem}"),
            &archs,
            &variants,
            &tally,
        );
        // A fixture that names unlike blocks has bodies merged so, which ran (the fixtures
        // run one after another on this thread).
        let names_unlike_blocks = text.lines().any(|l| {
            l.strip_prefix("; variant: ")
                .is_some_and(|v| v.trim() == Variant::UnlikeBlocks.name())
        });
        if names_unlike_blocks {
            assert!(
                tally.unlike_bodies.load(Ordering::Relaxed) > unlike_before,
                "{}: no body merged with unlike blocks",
                path.display()
            );
        }
        let mut failures = tally.failures.lock().unwrap();
        for f in failures.iter_mut().skip(before) {
            *f = format!("{}: {f}", path.display());
        }
    }
    eprintln!("differential fixtures: {}", report(&tally));
    let failures = tally.failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether `program` (a fixture) states what merging does to it, and each of its statements
/// is about at least one of the builds it runs in: on the architectures it builds for, with
/// the variants it takes.
fn statements_are_checked(
    program: &differential_exec::gen::Program,
    archs: &[Arch],
    variants: &[Variant],
) -> Result<(), String> {
    if program.stated_merges.is_empty() {
        return Err(
            "no `; folds:` or `; apart:` line says which functions merging folds".to_string(),
        );
    }
    let builds: Vec<Config> = archs
        .iter()
        .flat_map(|&arch| {
            let outputs: Vec<Output> = arch
                .outputs()
                .into_iter()
                .filter(|&o| o == Output::Jit || arch.links(o, program).is_ok())
                .collect();
            configurations(arch, &outputs, variants)
        })
        .collect();
    match program
        .stated_merges
        .iter()
        .find(|s| !builds.iter().any(|&b| s.applies(b)))
    {
        Some(s) => Err(format!("`{}` is about none of its builds", s.line)),
        None => Ok(()),
    }
}

/// The net catches a wrong merge. `fixtures/hand_merged/` holds exec fixtures of near-twins
/// merged by hand into one body with a function identifier, each name a thunk: a right
/// merge and a wrong one (`; differs: %name` names the members it breaks). Built as written
/// in every output of every architecture, the right one must compare equal to the
/// fixture and the wrong one must differ exactly in the members it names.
#[test]
fn a_wrong_merge_is_reported() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let mut merged: Vec<_> = std::fs::read_dir(root.join("hand_merged"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "clif"))
        .collect();
    merged.sort();
    assert!(
        merged
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".wrong.clif")),
        "fixtures/hand_merged has no wrong merge"
    );
    let scratch = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut builds = 0;
    for path in &merged {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture = file.split('.').next().unwrap();
        let original = program_from_fixture(&read(&root.join(format!("exec/{fixture}.clif"))));
        let text = read(path);
        let program = program_from_fixture(&text);
        let names = |p: &differential_exec::gen::Program| -> Vec<String> {
            p.entries.iter().map(|e| e.name.clone()).collect()
        };
        assert_eq!(names(&program), names(&original), "{file}: other entries");
        let mut expected: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("; differs: %"))
            .map(|n| n.trim().to_string())
            .collect();
        expected.sort();
        for arch in architectures() {
            for reference in configurations(arch, &arch.outputs(), &[])
                .into_iter()
                .filter(|c| c.is_reference())
            {
                let dir = scratch.path().join(format!("{builds}"));
                builds += 2;
                let want = run(&original, reference, &dir.join("original")).unwrap();
                let got = run(&program, reference, &dir.join("merged")).unwrap();
                let problems = compare(&original, reference, &want, &got);
                let mut differ: Vec<String> = program
                    .entries
                    .iter()
                    .map(|e| e.name.clone())
                    .filter(|n| problems.iter().any(|p| p.starts_with(&format!("{n} "))))
                    .collect();
                differ.sort();
                if differ != expected {
                    failures.push(format!(
                        "{file}, {reference:?}: entries that differ {differ:?}, expected {expected:?}\n    {}",
                        problems.join("\n    ")
                    ));
                }
            }
        }
    }
    eprintln!(
        "differential hand-merged: {} modules, {builds} builds",
        merged.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A JIT build that crashes fails its configuration and does not end the test process:
/// the child that runs it ([`differential_exec::jit::run_in_child`]) is told to call an
/// unmapped address in place of one entry, and the parent reports the signal and the
/// call, while the same build without the planted crash runs.
#[test]
fn a_crashing_jit_build_is_a_failure_not_the_end() {
    let Some(host) = architectures()
        .into_iter()
        .flat_map(|arch| configurations(arch, &arch.outputs(), &[]))
        .find(|c| {
            c.output == Output::Jit && c.arch.is_host() && c.mode == Mode::Trampolines && c.similar
        })
    else {
        // As every configuration this machine cannot run, with a notice.
        eprintln!("differential: skipping the JIT crash test: no JIT configuration here");
        return;
    };
    let program = gen::program(3, SHAPE);
    let scratch = tempfile::tempdir().unwrap();
    let fault = jit::Fault { call: 5 };
    let crashed = jit::run_in_child(&program, host, scratch.path(), Some(fault))
        .expect_err("the child called address 8 and returned");
    let entry = &program.entries[program.inputs[5].0].name;
    for expected in [
        "JIT child killed by signal 11 (SIGSEGV)".to_string(),
        format!("in call 5, of {entry} (5 calls returned)"),
    ] {
        assert!(
            crashed.contains(&expected),
            "{expected:?} not in {crashed:?}"
        );
    }
    let results = jit::run_in_child(&program, host, scratch.path(), None).unwrap();
    assert_eq!(results.len(), program.inputs.len());
}

/// Code that never returns (a merge fault can make a loop) is killed and reported, and
/// the test goes on: every run of generated code is under a timeout.
#[test]
fn a_run_that_does_not_return_is_killed_and_reported() {
    let started = std::time::Instant::now();
    let error = differential_exec::command(differential_exec::timed_for("sleep", "1").arg("60"))
        .expect_err("sleep 60 under a 1 s timeout returned");
    assert!(
        error.contains("killed by the timeout: it did not return"),
        "{error}"
    );
    assert!(
        started.elapsed().as_secs() < 30,
        "the timeout did not kill it"
    );
}

#[test]
#[ignore = "long mode: CLIF_MERGE_DIFF_PAIRS=1000000 ... -- --ignored --nocapture"]
fn long_mode() {
    let target: usize = std::env::var("CLIF_MERGE_DIFF_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let first: u64 = std::env::var("CLIF_MERGE_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let shape = LONG_SHAPE;
    let archs = architectures();
    let tally = Tally::default();
    let next = AtomicUsize::new(0);
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while tally.pairs.load(Ordering::Relaxed) < target {
                    let seed = first + next.fetch_add(1, Ordering::Relaxed) as u64;
                    check_seed(seed, shape, &archs, &tally);
                    if tally.programs.load(Ordering::Relaxed) % 10 == 0 {
                        eprintln!(
                            "differential: {} ({:.0} s)",
                            report(&tally),
                            start.elapsed().as_secs_f64()
                        );
                    }
                }
            });
        }
    });
    let configs: usize = archs
        .iter()
        .map(|&a| configurations(a, &a.outputs(), &[Variant::OTHERS[0]]).len())
        .sum();
    eprintln!(
        "differential long mode: {}; {configs} configurations per program over {:?} (one other option each, in turn); {} failures; {:.0} s",
        report(&tally),
        archs,
        tally.failures.lock().unwrap().len(),
        start.elapsed().as_secs_f64()
    );
    let failures = tally.failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
