//! Fuzzing the input path: whatever the CLIF text (or bytes), reading, verifying,
//! merging, writing the merged CLIF and writing the object either succeed or return an
//! `Err`; nothing panics.
//!
//! Two proptest properties drive the library in-process, the way the command does
//! (read → verify → module → merge-similar, in half the cases, with or without alignment
//! merging, unlike blocks and the cost model → merge → emit-clif → object):
//! - `mutated_inputs_never_panic`: the seeds (`fixtures/example.clif`,
//!   `fixtures/fuzz/seeds/*.clif`) with random line, token and byte mutations;
//! - `generated_modules_never_panic`: random modules of valid functions built to fold
//!   (exact copies, near copies, callers of copies, recursion, address-taken functions),
//!   with random linkages, then lightly mutated.
//!
//! When a case panics, its input is written under `$CARGO_TARGET_TMPDIR/fuzz-crashes/`
//! (the panic message names the file), to be kept as a fixture in `fixtures/fuzz/`.
//! `fuzz_fixtures_do_not_panic` replays every file of `fixtures/fuzz/` (crashes found
//! so far and the seeds) under many option sets in-process, and
//! `fuzz_fixtures_do_not_panic_the_command` runs the built command on each of them.
//!
//! Each property runs 200 cases from a fixed seed, so a run is reproducible;
//! `PROPTEST_CASES` and `PROPTEST_RNG_SEED` explore further. The configurations vary the
//! target (x86_64, aarch64), merge mode, merge-similar's options, linkages, settings and
//! emission options; `generated_modules_merge_similar` checks that the generated modules
//! give merge-similar groups and pairs to build.

use std::collections::{BTreeSet, HashMap};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;

use clif_merge::emit::clif::merged_clif;
use clif_merge::emit::{build_isa, EmitOptions};
use clif_merge::emit_object;
use clif_merge::merge::similar::{merge_similar, SimilarOptions};
use clif_merge::merge::{explain_in_plan, merge, Action, Linkage, MergeMode, MergeOptions, Module};
use clif_merge::read::{self, ReadError};
use clif_merge::report::{Report, Timings};
use clif_merge::{FuncName, TargetInfo};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use object::{Object as _, ObjectSymbol as _};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

const TRIPLE: &str = "x86_64-unknown-linux-gnu";
const AARCH64: &str = "aarch64-unknown-linux-gnu";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Every `*.clif` under `dir`, recursively, sorted, as the command line finds them (none
/// when `dir` is missing).
fn clif_files(dir: &Path) -> Vec<PathBuf> {
    clif_merge::read::expand_inputs(&[dir.to_path_buf()]).unwrap_or_default()
}

/// The seed texts mutations start from.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut files = vec![fixtures().join("example.clif")];
        files.extend(clif_files(&fixtures().join("fuzz").join("seeds")));
        let seeds: Vec<Vec<u8>> = files
            .iter()
            .map(|f| std::fs::read(f).expect("seed readable"))
            .collect();
        assert!(seeds.len() >= 2, "seeds missing under fixtures/fuzz/seeds");
        seeds
    })
}

/// One set of options for a run of the pipeline.
#[derive(Clone, Debug)]
struct Config {
    triple: &'static str,
    mode: MergeMode,
    /// Linkages given to the functions in turn (by position in the input).
    linkages: Vec<Linkage>,
    addresses_insignificant: bool,
    fold_cycles: bool,
    /// Settings besides `is_pic=true`.
    settings: Vec<(&'static str, &'static str)>,
    emit: bool,
    function_sections: bool,
    fold_machine_code: bool,
    /// Merge-similar before identical merging (not when merging is disabled): holes
    /// groups, and alignment merging where its options say.
    similar: Option<SimilarOptions>,
}

impl Config {
    fn linkage(&self, i: usize) -> Linkage {
        self.linkages[i % self.linkages.len()]
    }
}

fn config_strategy() -> impl Strategy<Value = Config> {
    let mode = prop_oneof![
        Just(MergeMode::Trampolines),
        Just(MergeMode::Aliases),
        Just(MergeMode::Disabled)
    ];
    let linkage = prop_oneof![
        3 => Just(Linkage::Export),
        2 => Just(Linkage::Local),
        1 => Just(Linkage::Hidden),
        1 => Just(Linkage::Preemptible),
    ];
    let settings = prop_oneof![
        Just(vec![]),
        Just(vec![("opt_level", "speed")]),
        Just(vec![
            ("preserve_frame_pointers", "true"),
            ("opt_level", "speed")
        ]),
        Just(vec![("opt_level", "none"), ("enable_verifier", "false")]),
    ];
    (
        mode,
        prop::collection::vec(linkage, 1..4),
        any::<bool>(),
        prop::bool::weighted(0.8),
        settings,
        prop::bool::weighted(0.7),
        any::<bool>(),
        prop::bool::weighted(0.7),
        prop_oneof![3 => Just(TRIPLE), 1 => Just(AARCH64)],
        similar_strategy(),
    )
        .prop_map(
            |(
                mode,
                linkages,
                addresses_insignificant,
                fold_cycles,
                settings,
                emit,
                fs,
                mc,
                triple,
                similar,
            )| {
                Config {
                    triple,
                    mode,
                    linkages,
                    addresses_insignificant,
                    fold_cycles,
                    settings,
                    emit,
                    function_sections: fs,
                    fold_machine_code: mc,
                    similar,
                }
            },
        )
}

/// Merge-similar's options: off in half the cases; otherwise its default (holes and
/// alignment, by cost), holes alone, or every group and pair merged whatever it costs
/// (what builds the most shared bodies).
fn similar_strategy() -> impl Strategy<Value = Option<SimilarOptions>> {
    prop_oneof![
        5 => Just(None),
        1 => Just(Some(SimilarOptions::default())),
        1 => Just(Some(SimilarOptions {
            cost_model: true,
            alignment: false,
            ..SimilarOptions::default()
        })),
        1 => Just(Some(SimilarOptions {
            cost_model: false,
            alignment: true,
            ..SimilarOptions::default()
        })),
        1 => Just(Some(SimilarOptions {
            cost_model: false,
            alignment: true,
            unlike_blocks: true,
        })),
        1 => Just(Some(SimilarOptions {
            cost_model: true,
            alignment: true,
            unlike_blocks: true,
        })),
    ]
}

/// What a successful run produced.
#[derive(Debug)]
struct Outcome {
    folded: usize,
    /// Merge-similar's thunks in the module (each member of a shared body is one).
    similar_thunks: usize,
    /// Bodies merged by alignment with unlike blocks.
    unlike_bodies: usize,
}

/// The command's path through the library for the file at `path`: read, verify, merge,
/// write the merged CLIF (and read it back, verify it, merge it again) and the object.
/// Every failure must be an `Err` whose message names the place; anything else (a wrong
/// merged CLIF, a missing symbol) is a failed assertion.
fn pipeline(path: &Path, cfg: &Config) -> Result<Outcome, String> {
    let target = TargetInfo::from_triple_str(cfg.triple).expect("known target");
    let display = path.display().to_string();
    let parsed = match read::read_file(path) {
        Ok(p) => p,
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with(&display),
                "a read error must name the file: {message}"
            );
            if let ReadError::Parse { line, .. } = e {
                let text = std::fs::read(path).expect("readable");
                let lines = text.iter().filter(|&&b| b == b'\n').count() + 1;
                assert!(
                    line <= lines,
                    "parse error on line {line} of a {lines}-line file"
                );
                assert!(
                    message.starts_with(&format!("{display}:{line}: ")),
                    "{message}"
                );
            }
            return Err(message);
        }
    };
    if parsed.is_empty() {
        return Err("no functions".into());
    }
    read::check_unique_names(&parsed).map_err(|e| e.to_string())?;
    let mut settings = vec![("is_pic".to_string(), "true".to_string())];
    settings.extend(
        cfg.settings
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string())),
    );
    let isa = build_isa(&target, &settings).expect("the settings of the fuzz configs are valid");
    if let Err(e) = read::verify_all(&parsed, &*isa) {
        let message = e.to_string();
        assert!(
            message.starts_with(&display) && message.contains("fails verification"),
            "{message}"
        );
        return Err(message);
    }

    let mut module = Module::new();
    let mut linkage_of: HashMap<FuncName, Linkage> = HashMap::new();
    for (i, p) in parsed.into_iter().enumerate() {
        let linkage = cfg.linkage(i);
        linkage_of.insert(FuncName::of_function(&p.func), linkage);
        module
            .add(p.func, linkage, false)
            .map_err(|e| e.to_string())?;
    }
    let options = MergeOptions {
        mode: cfg.mode,
        addresses_insignificant: cfg.addresses_insignificant,
        fold_cycles: cfg.fold_cycles,
        // The plan is written as an object, where an alias is a symbol at its body.
        aliases_share_address: true,
    };
    // Merge-similar rewrites the module first, as the command does; everything below
    // (the plan's consistency, the merged CLIF, the object) then checks its thunks and
    // shared bodies too.
    let mut unlike_bodies = 0;
    if let (Some(similar), false) = (&cfg.similar, cfg.mode == MergeMode::Disabled) {
        let report;
        (module, report) = merge_similar(module, &target, &*isa, &options, similar);
        unlike_bodies = report.groups.iter().filter(|g| g.unlike_blocks).count();
    }
    let plan = merge(&module, &target, &options);

    // The plan is consistent, and the members of a group are equal as the plan sees them.
    let mut seen = BTreeSet::new();
    for group in plan.groups() {
        assert!(seen.insert(group.kept), "a function in two groups");
        for &(g, action) in &group.folded {
            assert!(seen.insert(g), "a function in two groups");
            assert_ne!(action, Action::Keep);
            let d = explain_in_plan(&module, &target, &options, &plan, group.kept, g);
            assert!(
                d.is_none(),
                "{} and {} were folded together but differ: {}",
                module.get(group.kept).name,
                module.get(g).name,
                d.map(|d| d.to_string()).unwrap_or_default()
            );
        }
    }
    if cfg.mode == MergeMode::Disabled {
        assert_eq!(plan.folded_count(), 0);
    }
    let indices: Vec<_> = module.indices().collect();
    if indices.len() >= 2 {
        let _ = explain_in_plan(&module, &target, &options, &plan, indices[0], indices[1]);
        let _ = explain_in_plan(&module, &target, &options, &plan, indices[1], indices[0]);
    }

    // The merged CLIF reads back, verifies, and merging it again folds no two of the
    // functions kept the first time.
    let frontend = TargetFrontendConfig {
        default_call_conv: CallConv::SystemV,
        pointer_width: target_lexicon::PointerWidth::U64,
        page_size_align_log2: 12,
    };
    let clif = merged_clif(
        &module,
        &plan,
        frontend,
        clif_merge::target::isa_thunks_tail_call(&*isa),
    );
    let again = read::parse_clif(&clif, "merged.clif")
        .unwrap_or_else(|e| panic!("the merged CLIF does not read back: {e}\n{clif}"));
    if let Err(e) = read::verify_all(&again, &*isa) {
        panic!("the merged CLIF does not verify: {e}\n{clif}");
    }
    let kept: BTreeSet<FuncName> = module
        .iter()
        .filter(|(f, _)| plan.action(*f) == Action::Keep)
        .map(|(_, m)| m.name.clone())
        .collect();
    let mut second = Module::new();
    for p in again {
        let name = FuncName::of_function(&p.func);
        let linkage = linkage_of.get(&name).copied().unwrap_or(Linkage::Local);
        second
            .add(p.func, linkage, false)
            .unwrap_or_else(|e| panic!("the merged CLIF defines a name twice: {e}"));
    }
    let plan2 = merge(&second, &target, &options);
    for group in plan2.groups() {
        let members = std::iter::once(group.kept).chain(group.folded.iter().map(|&(g, _)| g));
        let kept_before: Vec<String> = members
            .map(|g| second.get(g).name.clone())
            .filter(|n| kept.contains(n))
            .map(|n| n.to_string())
            .collect();
        assert!(
            kept_before.len() <= 1,
            "merging the merged CLIF again folds functions kept by the first run: {kept_before:?}\n{clif}"
        );
    }

    if cfg.emit {
        let emit_options = EmitOptions {
            per_function_section: cfg.function_sections,
            clif_thunks: false,
            fold_machine_code: cfg.fold_machine_code,
        };
        let (bytes, summary) =
            emit_object(&module, &plan, isa, &options, &emit_options).map_err(|e| e.to_string())?;
        let report = Report::new(
            cfg.triple.to_string(),
            format!("{:?}", cfg.mode),
            &module,
            &summary.plan,
            Some(&summary),
            Timings::default(),
        );
        serde_json::to_string(&report).expect("the report serializes");
        let _ = report.table();
        let file = object::File::parse(&*bytes).expect("the object parses");
        let defined: BTreeSet<String> = file
            .symbols()
            .filter(|s| s.is_definition())
            .filter_map(|s| s.name().ok().map(str::to_string))
            .collect();
        for (f, m) in module.iter() {
            if summary.plan.action(f) != Action::Erased {
                assert!(
                    defined.contains(&m.name.symbol()),
                    "{} is not defined in the object",
                    m.name
                );
            }
        }
    }
    Ok(Outcome {
        folded: plan.folded_count(),
        similar_thunks: module.iter().filter(|(_, m)| m.similar_thunk).count(),
        unlike_bodies,
    })
}

/// Run the pipeline on `bytes`; on a panic, keep the input under the target's temporary
/// directory and fail with its path.
fn check(bytes: &[u8], cfg: &Config) -> Result<Outcome, String> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("fuzz.clif");
    std::fs::write(&path, bytes).expect("write the case");
    match panic::catch_unwind(AssertUnwindSafe(|| pipeline(&path, cfg))) {
        Ok(result) => result,
        Err(payload) => {
            let crashes = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-crashes");
            std::fs::create_dir_all(&crashes).expect("crash directory");
            let name = format!("crash-{:016x}.clif", fnv(bytes));
            std::fs::write(crashes.join(&name), bytes).expect("keep the crash");
            std::fs::write(
                crashes.join(&name).with_extension("config"),
                format!("{cfg:#?}"),
            )
            .expect("keep the config");
            panic!(
                "the input path panicked ({}): {}",
                crashes.join(name).display(),
                panic_message(&*payload)
            );
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

// ---------------------------------------------------------------------------------------
// Mutations.

/// Tokens worth splicing into CLIF: names, types, opcodes, entities, odd numbers.
const TOKENS: &[&str] = &[
    "v0",
    "v1",
    "v2",
    "v7",
    "v99",
    "v4294967295",
    "block0",
    "block1",
    "block2",
    "block9",
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "f32",
    "f64",
    "i8x16",
    "i32x4",
    "f64x2",
    "iadd",
    "isub",
    "imul",
    "udiv",
    "sdiv",
    "ishl",
    "band",
    "icmp",
    "fcmp",
    "select",
    "call",
    "call_indirect",
    "return_call",
    "try_call",
    "func_addr",
    "symbol_value",
    "stack_addr",
    "load",
    "store",
    "iconst",
    "f64const",
    "vconst",
    "brif",
    "br_table",
    "jump",
    "return",
    "trap",
    "fn0",
    "fn1",
    "fn9",
    "sig0",
    "sig1",
    "ss0",
    "ss1",
    "gv0",
    "gv1",
    "gv9",
    "jt0",
    "region0",
    "colocated",
    "system_v",
    "tail",
    "fast",
    "cold",
    "vmctx",
    "sret",
    "uext",
    "sext",
    "notrap",
    "aligned",
    "readonly",
    "%f",
    "%add_one",
    "%slots",
    "u0:0",
    "u0:1",
    "u0:3",
    "u1:0",
    "u4294967295:4294967295",
    "-1",
    "0",
    "1",
    "255",
    "0x7fffffff",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "0x1.8p1",
    "NaN",
    "-Inf",
    "+8",
    "-16",
    "=",
    ",",
    ":",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "->",
    ".",
    "@10",
    ";",
    "\"",
    "explicit_slot",
    "stack_limit",
    "load.i64",
    "iadd_imm.i64",
    "symbol",
    "tls",
    "uadd_overflow_trap",
    "user1",
    "eq",
    "ult",
    "slt",
    "default:",
    "dt0",
    "dt9",
    "dss0",
    "i32x4xN",
    "sret",
    "cold",
    "inline",
    "patchable",
    "try_call_indirect",
    "stack_switch",
    "dyn_scale_target_const.i32x4",
    "explicit_dynamic_slot",
    "*",
];

/// Whole lines worth inserting.
const LINES: &[&str] = &[
    "target aarch64\n",
    "target x86_64\n",
    "target riscv64\n",
    "target\tx86_64\n",
    "target nosuch\n",
    "set opt_level=none\n",
    "set nosuch=1\n",
    "test compile\n",
    "test run\n",
    "function %f(i32) -> i32 {\n",
    "function %f() {\nblock0:\n    return\n}\n",
    "function u0:0(i64) -> i64 system_v {\nblock0(v0: i64):\n    return v0\n}\n",
    "block0:\n",
    "block1(v5: i32):\n",
    "    return\n",
    "    jump block1\n",
    "    v50 = iconst.i32 0\n",
    "    v51 = iconst.i64 0\n",
    "    trap user1\n",
    "    fn7 = %ext(i64) -> i64\n",
    "    fn8 = colocated %f(i32) -> i32 system_v\n",
    "    sig5 = (i64) -> i64 tail\n",
    "    ss7 = explicit_slot 1073741824\n",
    "    ss8 = explicit_slot 8, align = 4096\n",
    "    gv5 = vmctx\n",
    "    gv6 = load.i64 notrap aligned gv5+8\n",
    "    stack_limit = gv6\n",
    "    v60 = func_addr.i64 fn0\n",
    "    v61 = call fn0(v0)\n",
    "    gv7 = dyn_scale_target_const.i32x4\n",
    "    dt0 = i32x4*gv7\n",
    "    dss0 = explicit_dynamic_slot dt0\n",
    "    v62 = iconst.i64 1\n    v63 = stack_addr.i64 ss0\n",
    "    jt0 = jump_table [block1, block2]\n",
    "    const0 = 0x00000000000000000000000000000001\n",
    "    v64 = vconst.i32x4 const0\n",
    "    v65 = symbol_value.i64 gv0\n",
    "    v66 = get_pinned_reg.i64\n",
    "    v67 = atomic_rmw.i64 add v0, v0\n",
    "}\n",
    "\n",
];

#[derive(Clone, Debug)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize, usize),
    SwapLines(usize, usize),
    InsertLine(usize, usize),
    ReplaceToken(usize, usize),
    InsertToken(usize, usize),
    DeleteBytes(usize, usize),
    InsertBytes(usize, Vec<u8>),
    Truncate(usize),
    DuplicateFunction(usize),
    RenameCopy(usize),
    /// Replace a token with another of its kind (a value, a block, a type, an opcode, a
    /// number), which keeps the text closer to valid CLIF.
    Similar(usize, usize),
}

/// Tokens of one kind each: `Similar` swaps a token for another of its kind.
const KINDS: &[&[&str]] = &[
    &[
        "i8", "i16", "i32", "i64", "i128", "f32", "f64", "i32x4", "i64x2",
    ],
    &[
        "iadd",
        "isub",
        "imul",
        "band",
        "bor",
        "bxor",
        "rotl",
        "ushr",
        "sshr",
        "ishl",
        "udiv",
        "srem",
        "umin",
        "smax",
        "iadd_cout",
    ],
    &["fadd", "fsub", "fmul", "fdiv", "fmin", "fmax", "fcopysign"],
    &[
        "system_v",
        "fast",
        "tail",
        "cold",
        "windows_fastcall",
        "preserve_all",
    ],
    &["eq", "ne", "ult", "slt", "uge", "sgt"],
    &["jump", "brif", "br_table", "return", "trap"],
    &[
        "colocated",
        "notrap",
        "aligned",
        "readonly",
        "can_move",
        "little",
        "big",
    ],
];

fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    let ix = any::<usize>;
    prop_oneof![
        3 => ix().prop_map(Mutation::DeleteLine),
        2 => (ix(), ix()).prop_map(|(a, b)| Mutation::DuplicateLine(a, b)),
        2 => (ix(), ix()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        3 => (ix(), ix()).prop_map(|(a, b)| Mutation::InsertLine(a, b)),
        6 => (ix(), ix()).prop_map(|(a, b)| Mutation::ReplaceToken(a, b)),
        2 => (ix(), ix()).prop_map(|(a, b)| Mutation::InsertToken(a, b)),
        2 => (ix(), 1..8usize).prop_map(|(a, b)| Mutation::DeleteBytes(a, b)),
        1 => (ix(), prop::collection::vec(any::<u8>(), 1..4))
            .prop_map(|(a, b)| Mutation::InsertBytes(a, b)),
        1 => ix().prop_map(Mutation::Truncate),
        1 => ix().prop_map(Mutation::DuplicateFunction),
        2 => ix().prop_map(Mutation::RenameCopy),
        8 => (ix(), ix()).prop_map(|(a, b)| Mutation::Similar(a, b)),
    ]
}

fn lines_of(text: &[u8]) -> Vec<Vec<u8>> {
    text.split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// Byte ranges of the tokens of `text` (runs of non-space, non-punctuation bytes, and
/// single punctuation bytes).
fn token_ranges(text: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b.is_ascii_whitespace() {
            i += 1;
        } else if b"(),=:[]{}".contains(&b) {
            out.push((i, i + 1));
            i += 1;
        } else {
            let start = i;
            while i < text.len()
                && !text[i].is_ascii_whitespace()
                && !b"(),=:[]{}".contains(&text[i])
            {
                i += 1;
            }
            out.push((start, i));
        }
    }
    out
}

/// Byte offsets where each `function` keyword starts a line, and the matching ends.
fn function_spans(text: &[u8]) -> Vec<(usize, usize)> {
    let mut starts = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b"function") {
            starts.push(offset);
        }
        offset += line.len();
    }
    let mut spans = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let limit = starts.get(k + 1).copied().unwrap_or(text.len());
        let end = text[s..limit]
            .windows(2)
            .position(|w| w == b"\n}")
            .map_or(limit, |p| (s + p + 2).min(limit));
        spans.push((s, end));
    }
    spans
}

fn apply(text: &mut Vec<u8>, m: &Mutation) {
    let mut lines = lines_of(text);
    match m {
        Mutation::DeleteLine(i) if !lines.is_empty() => {
            let n = lines.len();
            lines.remove(i % n);
            *text = lines.concat();
        }
        Mutation::DuplicateLine(i, j) if !lines.is_empty() => {
            let n = lines.len();
            let line = lines[i % n].clone();
            lines.insert(j % (n + 1), line);
            *text = lines.concat();
        }
        Mutation::SwapLines(i, j) if !lines.is_empty() => {
            let n = lines.len();
            lines.swap(i % n, j % n);
            *text = lines.concat();
        }
        Mutation::InsertLine(i, which) => {
            let n = lines.len();
            lines.insert(i % (n + 1), LINES[which % LINES.len()].as_bytes().to_vec());
            *text = lines.concat();
        }
        Mutation::ReplaceToken(i, which) => {
            let tokens = token_ranges(text);
            if !tokens.is_empty() {
                let (s, e) = tokens[i % tokens.len()];
                text.splice(s..e, TOKENS[which % TOKENS.len()].bytes());
            }
        }
        Mutation::InsertToken(i, which) => {
            let at = i % (text.len() + 1);
            let token = format!(" {} ", TOKENS[which % TOKENS.len()]);
            text.splice(at..at, token.bytes());
        }
        Mutation::DeleteBytes(i, n) if !text.is_empty() => {
            let s = i % text.len();
            let e = (s + n).min(text.len());
            text.drain(s..e);
        }
        Mutation::InsertBytes(i, bytes) => {
            let at = i % (text.len() + 1);
            text.splice(at..at, bytes.iter().copied());
        }
        Mutation::Truncate(i) => {
            let at = i % (text.len() + 1);
            text.truncate(at);
        }
        Mutation::DuplicateFunction(i) => {
            let spans = function_spans(text);
            if !spans.is_empty() {
                let (s, e) = spans[i % spans.len()];
                let copy = text[s..e].to_vec();
                text.extend_from_slice(b"\n");
                text.extend_from_slice(&copy);
                text.extend_from_slice(b"\n");
            }
        }
        Mutation::RenameCopy(i) => {
            // A copy of a function under a fresh name: something for the merger to fold.
            let spans = function_spans(text);
            if !spans.is_empty() {
                let (s, e) = spans[i % spans.len()];
                let copy = String::from_utf8_lossy(&text[s..e]).into_owned();
                let header_end = copy.find('(').unwrap_or(0);
                let header = &copy[..header_end];
                let renamed = match header.rsplit_once(' ') {
                    Some((kw, name)) if name.starts_with('%') => {
                        format!("{kw} {name}_copy{i}{}", &copy[header_end..])
                    }
                    Some((kw, name)) if name.starts_with('u') => {
                        let ns = name.split(':').next().unwrap_or("u0");
                        format!("{kw} {ns}:{}{}", 100_000 + i % 1000, &copy[header_end..])
                    }
                    _ => copy.clone(),
                };
                text.extend_from_slice(b"\n");
                text.extend_from_slice(renamed.as_bytes());
                text.extend_from_slice(b"\n");
            }
        }
        Mutation::Similar(i, which) => {
            let tokens = token_ranges(text);
            if tokens.is_empty() {
                return;
            }
            let (s, e) = tokens[i % tokens.len()];
            let token = String::from_utf8_lossy(&text[s..e]).into_owned();
            // Values, blocks and entities keep their prefix and get another number.
            let digits = token.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            let prefix = &token[..token.len() - digits.len()];
            let replacement = if !prefix.is_empty()
                && !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && ["v", "block", "fn", "sig", "ss", "gv", "region"].contains(&prefix)
            {
                format!("{prefix}{}", which % 12)
            } else if let Ok(n) = token.parse::<i64>() {
                [
                    n.wrapping_add(1),
                    n.wrapping_sub(1),
                    0,
                    n.wrapping_neg(),
                    n.wrapping_shl(1),
                ][which % 5]
                    .to_string()
            } else if let Some(kind) = KINDS.iter().find(|k| k.contains(&token.as_str())) {
                kind[which % kind.len()].to_string()
            } else {
                // Opcodes with a type suffix (`iconst.i32`, `load.i64`).
                match token.split_once('.') {
                    Some((op, ty)) if KINDS[0].contains(&ty) => {
                        format!("{op}.{}", KINDS[0][which % KINDS[0].len()])
                    }
                    _ => return,
                }
            };
            text.splice(s..e, replacement.bytes());
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------
// Generated modules: valid functions built to fold.

/// A small deterministic generator (xorshift64*), so a case is its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Clone)]
enum Op {
    Const(i64),
    Bin(&'static str, usize, usize),
    /// A call to function `callee` of the module (or an external one past the end).
    Call(usize, Vec<usize>),
    /// The address of function `callee`, reduced to the function's type.
    Addr(usize),
}

#[derive(Clone)]
struct FnDesc {
    name: String,
    sig: usize,
    colocated: bool,
    ops: Vec<Op>,
    /// `None`: return the last value; `Some((cond, a, b))`: branch on `cond` to returns.
    branch: Option<(usize, usize, usize)>,
}

/// Callee indices from here on name external functions.
const EXTERNAL: usize = 1000;

/// Signatures: (parameter count, type).
const SIGS: &[(usize, &str)] = &[(1, "i64"), (2, "i64"), (1, "i32"), (2, "i32")];

fn render(f: &FnDesc, all: &[FnDesc], value_offset: usize, conv: &str) -> String {
    let (nparams, ty) = SIGS[f.sig];
    let sig_text = |s: usize| {
        let (n, t) = SIGS[s];
        format!("({}) -> {t} {conv}", vec![t; n].join(", "))
    };
    let v = |i: usize| format!("v{}", i + value_offset);
    let mut out = format!("function {}{} {{\n", f.name, sig_text(f.sig));
    // External functions, one per distinct callee, in first-use order.
    let mut refs: Vec<usize> = Vec::new();
    for op in &f.ops {
        if let Op::Call(c, _) | Op::Addr(c) = op {
            if !refs.contains(c) {
                refs.push(*c);
            }
        }
    }
    for (k, &c) in refs.iter().enumerate() {
        let (name, sig, colocated) = match all.get(c) {
            Some(callee) => (callee.name.clone(), callee.sig, callee.colocated),
            // Named by signature too: one import, one signature.
            None => (format!("%ext{c}_{}", f.sig), f.sig, false),
        };
        let colocated = if colocated { "colocated " } else { "" };
        out.push_str(&format!("    fn{k} = {colocated}{name}{}\n", sig_text(sig)));
    }
    let params: Vec<String> = (0..nparams).map(|i| format!("{}: {ty}", v(i))).collect();
    out.push_str(&format!("block0({}):\n", params.join(", ")));
    let mut n = nparams;
    for op in &f.ops {
        let line = match op {
            Op::Const(c) => format!("{} = iconst.{ty} {c}", v(n)),
            Op::Bin(opcode, a, b) => format!("{} = {opcode} {}, {}", v(n), v(*a), v(*b)),
            Op::Call(c, args) => {
                let k = refs.iter().position(|r| r == c).expect("declared");
                let args: Vec<String> = args.iter().map(|&a| v(a)).collect();
                format!("{} = call fn{k}({})", v(n), args.join(", "))
            }
            Op::Addr(c) => {
                let k = refs.iter().position(|r| r == c).expect("declared");
                if ty == "i64" {
                    format!("{} = func_addr.i64 fn{k}", v(n))
                } else {
                    let tmp = 1000 + n + value_offset;
                    format!(
                        "v{tmp} = func_addr.i64 fn{k}\n    {} = ireduce.i32 v{tmp}",
                        v(n)
                    )
                }
            }
        };
        out.push_str(&format!("    {line}\n"));
        n += 1;
    }
    match f.branch {
        None => out.push_str(&format!("    return {}\n", v(n - 1))),
        Some((c, a, b)) => {
            out.push_str(&format!("    brif {}, block1, block2\n", v(c)));
            out.push_str(&format!("block1:\n    return {}\n", v(a)));
            out.push_str(&format!("block2:\n    return {}\n", v(b)));
        }
    }
    out.push_str("}\n");
    out
}

/// A module of 2 to 12 valid functions, many of them equal or equal up to their callees.
fn generate(seed: u64) -> String {
    let mut rng = Rng(seed | 1);
    const BINOPS: &[&str] = &["iadd", "isub", "imul", "band", "bor", "bxor", "rotl"];
    let count = 2 + rng.below(11);
    let conv = ["system_v", "fast", "tail"][rng.below(3)];
    let user_names = rng.chance(30);
    let name = |i: usize| {
        if user_names {
            format!("u0:{i}")
        } else {
            format!("%g{i}")
        }
    };
    let mut funcs: Vec<FnDesc> = Vec::new();
    for i in 0..count {
        // Half of the functions start as a copy of an earlier one.
        if i > 0 && rng.chance(50) {
            let mut copy = funcs[rng.below(i)].clone();
            copy.name = name(i);
            copy.colocated = rng.chance(70);
            // A near copy: one constant or one callee changed.
            if rng.chance(40) && !copy.ops.is_empty() {
                let k = rng.below(copy.ops.len());
                match &mut copy.ops[k] {
                    Op::Const(c) => *c += 1,
                    Op::Call(callee, _) | Op::Addr(callee) => {
                        let same_sig: Vec<usize> = (0..count)
                            .filter(|&j| j < funcs.len() && funcs[j].sig == copy.sig)
                            .collect();
                        if !same_sig.is_empty() {
                            *callee = same_sig[rng.below(same_sig.len())];
                        }
                    }
                    Op::Bin(op, _, _) => *op = BINOPS[rng.below(BINOPS.len())],
                }
            }
            // Or with its blocks changed: a branch to two returns added or taken away, so
            // that alignment merging meets other block counts (unlike blocks).
            if rng.chance(40) {
                let values = SIGS[copy.sig].0 + copy.ops.len();
                copy.branch = match copy.branch {
                    Some(_) => None,
                    None => Some((rng.below(values), rng.below(values), rng.below(values))),
                };
            }
            funcs.push(copy);
            continue;
        }
        let sig = rng.below(SIGS.len());
        let (nparams, _) = SIGS[sig];
        let mut ops = Vec::new();
        let mut values = nparams;
        for _ in 0..1 + rng.below(6) {
            let op = match rng.below(10) {
                0..=2 => Op::Const([0, 1, -1, 7, 255, 1 << 20][rng.below(6)]),
                3..=6 => Op::Bin(
                    BINOPS[rng.below(BINOPS.len())],
                    rng.below(values),
                    rng.below(values),
                ),
                7 | 8 => {
                    // Any function with this signature, this one and later ones included
                    // (recursion, mutual recursion), or an external one.
                    let callee = rng.below(count + 2);
                    let args = (0..nparams).map(|_| rng.below(values)).collect();
                    Op::Call(
                        if callee < count {
                            callee
                        } else {
                            EXTERNAL + callee
                        },
                        args,
                    )
                }
                _ => Op::Addr(rng.below(count)),
            };
            ops.push(op);
            values += 1;
        }
        let branch = rng
            .chance(40)
            .then(|| (rng.below(values), rng.below(values), rng.below(values)));
        funcs.push(FnDesc {
            name: name(i),
            sig,
            colocated: rng.chance(70),
            ops,
            branch,
        });
    }
    // Calls to module functions need the callee's signature: where it differs, call an
    // external function of the caller's signature instead.
    let sigs: Vec<usize> = funcs.iter().map(|f| f.sig).collect();
    for f in &mut funcs {
        let my = f.sig;
        for op in &mut f.ops {
            if let Op::Call(c, _) = op {
                if *c < sigs.len() && sigs[*c] != my {
                    *c += EXTERNAL;
                }
            }
        }
    }
    let mut out = String::new();
    for f in &funcs {
        let offset = [0, 0, 3, 10][rng.below(4)];
        out.push_str(&render(f, &funcs, offset, conv));
        out.push('\n');
    }
    out
}

/// 200 cases per property from a fixed seed, so that a run is reproducible;
/// `PROPTEST_CASES` and `PROPTEST_RNG_SEED` explore further.
fn proptest_config() -> ProptestConfig {
    let from_env = ProptestConfig::default();
    let set = |name: &str| std::env::var_os(name).is_some();
    ProptestConfig {
        cases: if set("PROPTEST_CASES") {
            from_env.cases
        } else {
            200
        },
        rng_seed: if set("PROPTEST_RNG_SEED") {
            from_env.rng_seed
        } else {
            RngSeed::Fixed(0x5eed_c11f)
        },
        // Crashing inputs are kept as fixtures in fixtures/fuzz/, not in a regressions file.
        failure_persistence: None,
        max_shrink_iters: 256,
        ..from_env
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn mutated_inputs_never_panic(
        seed in 0..64usize,
        mutations in prop::collection::vec(mutation_strategy(), 0..6),
        cfg in config_strategy(),
    ) {
        let seeds = seeds();
        let mut text = seeds[seed % seeds.len()].clone();
        for m in &mutations {
            apply(&mut text, m);
        }
        let _ = check(&text, &cfg);
    }

    #[test]
    fn generated_modules_never_panic(
        seed in any::<u64>(),
        mutations in prop::collection::vec(mutation_strategy(), 0..2),
        cfg in config_strategy(),
    ) {
        let mut text = generate(seed).into_bytes();
        for m in &mutations {
            apply(&mut text, m);
        }
        let _ = check(&text, &cfg);
    }
}

/// The generator is worth its name: unmutated, its modules read, verify, and fold.
#[test]
fn generated_modules_are_valid_and_fold() {
    let cfg = Config {
        triple: TRIPLE,
        mode: MergeMode::Trampolines,
        linkages: vec![Linkage::Export],
        addresses_insignificant: false,
        fold_cycles: true,
        settings: vec![("preserve_frame_pointers", "true")],
        emit: false,
        function_sections: false,
        fold_machine_code: false,
        similar: None,
    };
    let mut folded = 0;
    for seed in 0..100u64 {
        let text = generate(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let outcome =
            check(text.as_bytes(), &cfg).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        folded += outcome.folded;
    }
    assert!(folded >= 50, "generated modules fold too little: {folded}");
}

/// The generated modules give merge-similar work too (near copies differ in a constant,
/// callee or operation, or gain or lose a branch), so that the fuzzing configurations with
/// it build shared bodies, thunks, aligned pairs and bodies with unlike blocks from what
/// the generator and the mutations make.
#[test]
fn generated_modules_merge_similar() {
    let (mut thunks, mut unlike) = (0, 0);
    for (target, similar) in [
        (
            TRIPLE,
            SimilarOptions {
                cost_model: false,
                alignment: true,
                ..SimilarOptions::default()
            },
        ),
        (AARCH64, SimilarOptions::default()),
        (
            TRIPLE,
            SimilarOptions {
                cost_model: false,
                alignment: true,
                unlike_blocks: true,
            },
        ),
    ] {
        let cfg = Config {
            triple: target,
            mode: MergeMode::Aliases,
            linkages: vec![Linkage::Export, Linkage::Local],
            addresses_insignificant: false,
            fold_cycles: true,
            settings: vec![("preserve_frame_pointers", "true"), ("opt_level", "speed")],
            emit: true,
            function_sections: false,
            fold_machine_code: true,
            similar: Some(similar),
        };
        for seed in 0..40u64 {
            let text = generate(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let outcome = check(text.as_bytes(), &cfg)
                .unwrap_or_else(|e| panic!("seed {seed}, {target}: {e}\n{text}"));
            thunks += outcome.similar_thunks;
            unlike += outcome.unlike_bodies;
        }
    }
    assert!(
        thunks >= 40,
        "merge-similar made too few thunks of generated modules: {thunks}"
    );
    // Copies whose branch was added or taken away meet alignment merging with unlike
    // blocks (the third configuration).
    assert!(
        unlike >= 2,
        "too few bodies of generated modules merged with unlike blocks: {unlike}"
    );
}

/// Every configuration a fixture is replayed under.
fn replay_configs() -> Vec<Config> {
    let mut configs = Vec::new();
    for triple in [TRIPLE, AARCH64] {
        for mode in [
            MergeMode::Trampolines,
            MergeMode::Aliases,
            MergeMode::Disabled,
        ] {
            // Merge-similar's options go round with the linkages: each is replayed with
            // several linkages, on both targets, in both merging modes.
            let similar = [
                None,
                Some(SimilarOptions::default()),
                Some(SimilarOptions {
                    cost_model: false,
                    alignment: true,
                    ..SimilarOptions::default()
                }),
                Some(SimilarOptions {
                    cost_model: true,
                    alignment: false,
                    ..SimilarOptions::default()
                }),
                Some(SimilarOptions {
                    cost_model: false,
                    alignment: false,
                    ..SimilarOptions::default()
                }),
                Some(SimilarOptions {
                    cost_model: false,
                    alignment: true,
                    unlike_blocks: true,
                }),
            ];
            for (linkages, similar) in [
                vec![Linkage::Export],
                vec![Linkage::Local],
                vec![Linkage::Hidden],
                vec![Linkage::Preemptible],
                vec![Linkage::Export, Linkage::Local, Linkage::Preemptible],
                vec![Linkage::Hidden, Linkage::Export],
            ]
            .into_iter()
            .zip(similar)
            {
                for addresses_insignificant in [false, true] {
                    for settings in [
                        vec![],
                        vec![("preserve_frame_pointers", "true"), ("opt_level", "speed")],
                    ] {
                        configs.push(Config {
                            triple,
                            mode,
                            linkages: linkages.clone(),
                            addresses_insignificant,
                            fold_cycles: true,
                            settings,
                            emit: true,
                            function_sections: addresses_insignificant,
                            fold_machine_code: !addresses_insignificant,
                            similar: similar.clone(),
                        });
                    }
                }
            }
        }
    }
    configs
}

fn crash_fixtures() -> Vec<PathBuf> {
    let files = clif_files(&fixtures().join("fuzz"));
    assert!(!files.is_empty(), "no fixtures under fixtures/fuzz");
    files
}

#[test]
fn fuzz_fixtures_do_not_panic() {
    let mut failures = Vec::new();
    for file in crash_fixtures() {
        for cfg in replay_configs() {
            let result = panic::catch_unwind(AssertUnwindSafe(|| pipeline(&file, &cfg)));
            if let Err(payload) = result {
                failures.push(format!(
                    "{} with {cfg:?}: {}",
                    file.display(),
                    panic_message(&*payload)
                ));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "panics:\n{}", failures.join("\n"));
}

#[test]
fn fuzz_fixtures_do_not_panic_the_command() {
    let out = tempfile::tempdir().expect("temporary directory");
    let mut failures = Vec::new();
    for file in crash_fixtures() {
        for extra in [
            &[][..],
            &["--set", "preserve_frame_pointers=true"][..],
            &["--merge-functions", "aliases", "--merge-similar"][..],
            &["--merge-similar", "--align-unlike-blocks"][..],
        ] {
            let output = Command::new(env!("CARGO_BIN_EXE_clif-merge"))
                .arg(&file)
                .args(["--target", TRIPLE, "-q", "-o"])
                .arg(out.path().join("out.o"))
                .arg("--emit-clif")
                .arg(out.path().join("out.clif"))
                .arg("--report")
                .arg(out.path().join("out.json"))
                .args(extra)
                .output()
                .expect("the command runs");
            let stderr = String::from_utf8_lossy(&output.stderr);
            match output.status.code() {
                Some(0) => {}
                Some(1) if stderr.starts_with("error: ") && !stderr.contains("panicked") => {
                    for name in ["out.o", "out.clif", "out.json"] {
                        assert!(
                            !out.path().join(name).exists(),
                            "{name} left behind after an error on {}",
                            file.display()
                        );
                    }
                }
                code => failures.push(format!(
                    "{} {extra:?}: exit {code:?}\n{}",
                    file.display(),
                    stderr.lines().take(3).collect::<Vec<_>>().join("\n")
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "the command failed badly:\n{}",
        failures.join("\n")
    );
}
