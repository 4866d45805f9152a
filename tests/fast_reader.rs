//! The fast reader (`clif_merge::read::fast`) against cranelift-reader: for any text it
//! either declines or builds functions `==` to cranelift-reader's (same entities, same
//! numbering, same pools), with the same `function` lines; and it never takes a text that
//! cranelift-reader rejects (or panics on).
//!
//! - `corpora_read_exactly`: every file of `../shared/corpus/{re2,sqlite,zstd}` (skipped
//!   with a notice where absent); prints the share of files and functions taken and
//!   requires at least 99% of them.
//! - `fixtures_read_exactly`: every `.clif` under `fixtures/`.
//! - `tricky_spellings_read_exactly`: hand-written texts with the spellings that matter
//!   (gaps, aliases, inline and out-of-order signatures, NaN payloads, vectors, cold
//!   blocks, CRLF), taken; and near misses, declined.
//! - `mutated_real_text_reads_exactly_or_declines`: corpus files and fixtures with random
//!   line and token mutations (deleted, duplicated, swapped, numbers, words and characters
//!   replaced, text cut short).
//! - `generated_text_reads_exactly_or_declines`: functions of the detector's generator
//!   (every format it knows, aliases, source locations) and modules of the differential
//!   generator, printed, then taken as they are and mutated.
//!
//! Each property runs 1,000 cases from a fixed seed (`PROPTEST_CASES`, `PROPTEST_RNG_SEED`
//! explore further).

// Both generators include the same small RNG module.
#![allow(clippy::duplicate_mod)]

mod detector_gen;
#[allow(dead_code)]
mod differential_exec;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use clif_merge::read::fast;
use cranelift_codegen::ir::Function;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `*.clif` under `dir`, recursively, sorted, as the command line finds them (none
/// when `dir` is missing).
fn clif_files(dir: &Path) -> Vec<PathBuf> {
    clif_merge::read::expand_inputs(&[dir.to_path_buf()]).unwrap_or_default()
}

/// The text as clif-merge hands it to a reader: `test`, `target` and `set` lines before
/// the first function blanked (as `read::blank_preamble` does).
fn blanked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_preamble = true;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("function") {
            in_preamble = false;
        }
        let directive = ["test ", "target ", "set "]
            .iter()
            .any(|d| trimmed.starts_with(d));
        if in_preamble && directive {
            let body = line.trim_end_matches('\n');
            out.extend(std::iter::repeat_n(' ', body.len()));
            out.push_str(&line[body.len()..]);
        } else {
            out.push_str(line);
        }
    }
    out
}

thread_local!(static QUIET: Cell<bool> = const { Cell::new(false) });

/// Run `f`, a panic turned into `Err`, without printing the panics of this thread.
fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, ()> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    result.map_err(|_| ())
}

/// cranelift-reader's functions and their lines, as `read.rs` calls it; `None` when it
/// fails or panics.
fn reference(text: &str) -> Option<Vec<(Function, usize)>> {
    let options = cranelift_reader::ParseOptions {
        default_calling_convention: cranelift_codegen::isa::CallConv::Fast,
        ..Default::default()
    };
    let file = quietly(|| cranelift_reader::parse_test(text, options))
        .ok()?
        .ok()?;
    Some(
        file.functions
            .into_iter()
            .map(|(f, d)| (f, d.location.line_number))
            .collect(),
    )
}

/// What the fast reader did with a text.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Taken, with this many functions, all equal to cranelift-reader's.
    Taken(usize),
    Declined,
}

/// The fast reader on `text`, checked against cranelift-reader: `Err` says how it differs.
fn check(text: &str) -> Result<Outcome, String> {
    let Some(fast) = quietly(|| fast::read(text)).map_err(|()| "the fast reader panicked")? else {
        return Ok(Outcome::Declined);
    };
    let Some(slow) = reference(text) else {
        return Err("the fast reader takes a text cranelift-reader rejects".into());
    };
    if fast.len() != slow.len() {
        return Err(format!(
            "{} functions, cranelift-reader reads {}",
            fast.len(),
            slow.len()
        ));
    }
    for ((f, fl), (s, sl)) in fast.iter().zip(&slow) {
        if fl != sl {
            return Err(format!("function {} on line {fl}, not {sl}", s.name));
        }
        if **f != *s {
            let parts = [
                ("name", f.name == s.name),
                ("signature", f.signature == s.signature),
                ("stack slots", f.sized_stack_slots == s.sized_stack_slots),
                ("global values", f.global_values == s.global_values),
                ("stack limit", f.stack_limit == s.stack_limit),
                ("data flow graph", f.dfg == s.dfg),
                ("layout", f.layout == s.layout),
                ("source locations", f.srclocs == s.srclocs),
                ("parameters", f.params == s.params),
            ];
            let differ: Vec<&str> = parts.iter().filter(|p| !p.1).map(|p| p.0).collect();
            return Err(format!(
                "function {} differs in {differ:?}:\n--- fast\n{}\n--- cranelift-reader\n{}",
                s.name,
                f.display(),
                s.display(),
            ));
        }
    }
    Ok(Outcome::Taken(fast.len()))
}

fn corpus_root() -> Option<PathBuf> {
    let root = manifest().join("../shared/corpus");
    if root.is_dir() {
        Some(root)
    } else {
        println!("../shared/corpus is absent: skipped");
        None
    }
}

#[test]
fn corpora_read_exactly() {
    use rayon::prelude::*;
    let Some(root) = corpus_root() else { return };
    for name in ["re2", "sqlite", "zstd"] {
        let files = clif_files(&root.join(name));
        let (taken_files, taken_functions, all_functions) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        files.par_iter().for_each(|path| {
            let text = blanked(&std::fs::read_to_string(path).expect("corpus file"));
            let functions =
                text.matches("\nfunction ").count() + text.starts_with("function ") as usize;
            all_functions.fetch_add(functions, Ordering::Relaxed);
            match check(&text) {
                Ok(Outcome::Taken(n)) => {
                    taken_files.fetch_add(1, Ordering::Relaxed);
                    taken_functions.fetch_add(n, Ordering::Relaxed);
                }
                Ok(Outcome::Declined) => println!("declined: {}", path.display()),
                Err(e) => panic!("{}: {e}", path.display()),
            }
        });
        let (tf, tn, an) = (
            taken_files.into_inner(),
            taken_functions.into_inner(),
            all_functions.into_inner(),
        );
        println!(
            "{name}: the fast reader takes {tf} of {} files ({:.2}%), {tn} of {an} functions",
            files.len(),
            100.0 * tf as f64 / files.len() as f64
        );
        assert!(
            tf * 100 >= files.len() * 99,
            "{name}: the fast reader takes only {tf} of {} files",
            files.len()
        );
    }
}

#[test]
fn fixtures_read_exactly() {
    let files = clif_files(&manifest().join("fixtures"));
    assert!(files.len() > 50, "fixtures not found");
    let mut taken = 0;
    for path in &files {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue; // not UTF-8: no reader sees it
        };
        match check(&blanked(&text)) {
            Ok(Outcome::Taken(_)) => taken += 1,
            Ok(Outcome::Declined) => println!("declined: {}", path.display()),
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    println!(
        "fixtures: the fast reader takes {taken} of {} files",
        files.len()
    );
    assert!(
        taken * 2 > files.len(),
        "the fast reader takes almost no fixture"
    );
}

// ---------------------------------------------------------------------------------------
// Mutations.

/// One change to a text, its positions taken modulo what there is.
#[derive(Clone, Debug)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    DeleteToken(usize),
    DuplicateToken(usize),
    SwapTokens(usize, usize),
    /// Replace the token by one of [`WORDS`].
    ReplaceToken(usize, usize),
    /// Change the digits of a token that has some, or write them with a leading zero.
    ChangeNumber(usize, usize),
    /// Insert one of [`CHARS`] before the token.
    InsertChar(usize, usize),
    /// Cut the text short at this per mille of its length.
    Truncate(usize),
}

const WORDS: &[&str] = &[
    "v0",
    "v1",
    "v2",
    "v7",
    "v99",
    "v4294967295",
    "v01",
    "block0",
    "block1",
    "block3",
    "block99999",
    "block100000",
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "f32",
    "f64",
    "f16",
    "i32x4",
    "iconst",
    "iadd",
    "isub",
    "load",
    "store",
    "call",
    "jump",
    "brif",
    "return",
    "select",
    "icmp",
    "eq",
    "slt",
    "uextend",
    "br_table",
    "try_call",
    "trap",
    "trapz",
    "notrap",
    "aligned",
    "readonly",
    "little",
    "big",
    "can_move",
    "heap",
    "user1",
    "region0",
    "region1",
    "region7",
    "ss0",
    "ss1",
    "gv0",
    "gv1",
    "gv9",
    "sig0",
    "sig1",
    "sig7",
    "fn0",
    "fn1",
    "fn9",
    "u0",
    "u1:2",
    "%f",
    "%",
    "tail",
    "fast",
    "system_v",
    "vmctx",
    "uext",
    "sext",
    "sarg",
    "stack_limit",
    "explicit_slot",
    "align",
    "key",
    "colocated",
    "patchable",
    "default",
    "context",
    "tag0",
    "ret0",
    "exn0",
    "cold",
    "NaN",
    "Inf",
    "0",
    "1",
    "-1",
    "+8",
    "-0",
    "0x10",
    "0xffffffff",
    "4294967296",
    "99999999999999999999",
    "1.5",
    "0x1.0p1",
    "+Inf",
    "-Inf",
    "-NaN",
    "NaN:0x1",
    "sNaN:0x1",
    "-sNaN:0x1",
    "+NaN:",
    "Infinity",
    "0x1p3",
    "function",
    "const0",
    "dss0",
    "dt0",
    "mt0",
    "\"text\"",
    "@1a",
    "@",
    "<0>",
    "->",
    "=",
    ",",
    ":",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ".",
    "_",
];

const CHARS: &[&str] = &[
    "<", ">", "@", "(", ")", ",", "=", "->", ":", ".", "-", "+", "_", "\"", ";", "\n", "é", "#",
    "*", "!", "%", " ", "0", "x", "v", "[", "]", "{", "}",
];

/// Byte ranges of tokens: runs of word characters, or single other characters.
fn tokens(text: &str) -> Vec<std::ops::Range<usize>> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '%';
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        let mut end = i + c.len_utf8();
        if word(c) {
            while let Some(&(j, d)) = chars.peek() {
                if !word(d) {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
        }
        out.push(i..end);
    }
    out
}

fn mutate(text: &str, mutation: &Mutation) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let toks = tokens(text);
    let splice = |range: std::ops::Range<usize>, with: &str| {
        format!("{}{with}{}", &text[..range.start], &text[range.end..])
    };
    let line = |i: usize| i % lines.len().max(1);
    let tok = |i: usize| toks[i % toks.len()].clone();
    if lines.is_empty() || toks.is_empty() {
        return text.to_string();
    }
    match *mutation {
        Mutation::DeleteLine(i) => {
            let mut l = lines.clone();
            l.remove(line(i));
            l.concat()
        }
        Mutation::DuplicateLine(i) => {
            let mut l = lines.clone();
            l.insert(line(i), lines[line(i)]);
            l.concat()
        }
        Mutation::SwapLines(i, j) => {
            let mut l = lines.clone();
            l.swap(line(i), line(j));
            l.concat()
        }
        Mutation::DeleteToken(i) => splice(tok(i), ""),
        Mutation::DuplicateToken(i) => {
            let r = tok(i);
            let t = format!("{} {}", &text[r.clone()], &text[r.clone()]);
            splice(r, &t)
        }
        Mutation::SwapTokens(i, j) => {
            let (a, b) = (tok(i), tok(j));
            let (a, b) = if a.start <= b.start { (a, b) } else { (b, a) };
            if a == b {
                return text.to_string();
            }
            format!(
                "{}{}{}{}{}",
                &text[..a.start],
                &text[b.clone()],
                &text[a.end..b.start],
                &text[a.clone()],
                &text[b.end..]
            )
        }
        Mutation::ReplaceToken(i, w) => splice(tok(i), WORDS[w % WORDS.len()]),
        Mutation::ChangeNumber(i, n) => {
            let with_digits: Vec<_> = toks
                .iter()
                .filter(|r| text[(*r).clone()].bytes().any(|b| b.is_ascii_digit()))
                .collect();
            if with_digits.is_empty() {
                return text.to_string();
            }
            let r = with_digits[i % with_digits.len()].clone();
            let t = &text[r.clone()];
            let head = t.trim_end_matches(|c: char| c.is_ascii_digit());
            let digits: u64 = t[head.len()..].parse().unwrap_or(0);
            let new = match n % 9 {
                0 => 0,
                1 => digits + 1,
                2 => digits.saturating_sub(1),
                3 => digits + 2,
                4 => 65_536,
                5 => 4_294_967_295,
                6 => n as u64 % 64,
                7 => 100_000,
                // The same number with a leading zero (`v05`, `block012`).
                _ => return splice(r, &format!("{head}0{digits}")),
            };
            splice(r, &format!("{head}{new}"))
        }
        Mutation::InsertChar(i, c) => {
            let r = tok(i);
            splice(r.start..r.start, CHARS[c % CHARS.len()])
        }
        Mutation::Truncate(per_mille) => {
            let mut cut = text.len() * (per_mille % 1000) / 1000;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text[..cut].to_string()
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let n = 0usize..1_000_000;
    prop_oneof![
        1 => n.clone().prop_map(Mutation::DeleteLine),
        1 => n.clone().prop_map(Mutation::DuplicateLine),
        1 => (n.clone(), n.clone()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        1 => n.clone().prop_map(Mutation::DeleteToken),
        1 => n.clone().prop_map(Mutation::DuplicateToken),
        1 => (n.clone(), n.clone()).prop_map(|(a, b)| Mutation::SwapTokens(a, b)),
        3 => (n.clone(), n.clone()).prop_map(|(a, b)| Mutation::ReplaceToken(a, b)),
        3 => (n.clone(), n.clone()).prop_map(|(a, b)| Mutation::ChangeNumber(a, b)),
        1 => (n.clone(), n.clone()).prop_map(|(a, b)| Mutation::InsertChar(a, b)),
        1 => n.prop_map(Mutation::Truncate),
    ]
}

/// Real texts to mutate: the smaller files of each corpus and the fixtures.
fn real_seeds() -> &'static [String] {
    static SEEDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut seeds = Vec::new();
        if let Some(root) = corpus_root() {
            for name in ["re2", "sqlite", "zstd"] {
                let mut texts: Vec<String> = clif_files(&root.join(name))
                    .iter()
                    .filter_map(|p| std::fs::read_to_string(p).ok())
                    .filter(|t| t.len() < 6_000)
                    .collect();
                // Every 40th, so that every kind of function in the corpus has a chance.
                texts.sort();
                seeds.extend(texts.into_iter().step_by(40));
            }
        }
        for path in clif_files(&manifest().join("fixtures")) {
            if let Ok(text) = std::fs::read_to_string(&path) {
                seeds.push(blanked(&text));
            }
        }
        seeds
    })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 1000,
        rng_seed: RngSeed::Fixed(0x0fa5_7ead),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// How many texts each property saw taken and declined: both must happen, or the
/// property tests nothing.
struct Tally {
    taken: AtomicUsize,
    declined: AtomicUsize,
}

impl Tally {
    const fn new() -> Self {
        Tally {
            taken: AtomicUsize::new(0),
            declined: AtomicUsize::new(0),
        }
    }

    fn check(&self, text: &str) -> Result<(), TestCaseError> {
        match check(text) {
            Ok(Outcome::Taken(_)) => self.taken.fetch_add(1, Ordering::Relaxed),
            Ok(Outcome::Declined) => self.declined.fetch_add(1, Ordering::Relaxed),
            Err(e) => return Err(TestCaseError::fail(format!("{e}\n--- text\n{text}"))),
        };
        Ok(())
    }

    fn report(&self, what: &str) {
        let (t, d) = (
            self.taken.load(Ordering::Relaxed),
            self.declined.load(Ordering::Relaxed),
        );
        println!("{what}: {t} texts taken, {d} declined");
        assert!(t > 0 && d > 0, "{what}: {t} taken, {d} declined");
    }
}

#[test]
fn mutated_real_text_reads_exactly_or_declines() {
    static TALLY: Tally = Tally::new();
    let seeds = real_seeds();
    proptest!(config(), |(seed in 0..seeds.len(), mutations in prop::collection::vec(mutation(), 1..4))| {
        let mut text = seeds[seed].clone();
        for m in &mutations {
            text = mutate(&text, m);
        }
        TALLY.check(&text)?;
    });
    TALLY.report("mutated real text");
}

/// A generated text: a function of the detector's generator (the rich flavour, with every
/// format it knows, or the executable one; permuted numbering, unreachable blocks, source
/// locations, some values through aliases), or a module of the differential generator.
fn generated(seed: u64) -> String {
    use detector_gen::{alias_via_text, build, Config, Variant};
    if seed % 4 == 3 {
        let shape = differential_exec::gen::Shape {
            helper_families: 2,
            entry_families: 2,
            family_size: 2,
            inputs_per_entry: 1,
            frame_readers: seed % 8 == 3,
            return_calls: true,
            twin_helper_families: 1,
            twin_entry_families: 1,
            constant_swap_families: 1,
            wide_constant_swap_families: 1,
            vector_families: 1,
        };
        return differential_exec::gen::program(seed, shape).clif;
    }
    let variant = Variant {
        order: Some(seed),
        unreachable: (seed % 3) as usize,
        unreachable_seed: seed,
        srclocs: seed.is_multiple_of(2).then_some(seed),
    };
    let config = match seed % 4 {
        0 => Config::rich(),
        1 => Config::exec(),
        _ => Config::exec_small(),
    };
    let func = build(seed, &config, &variant);
    let func = if seed % 8 < 4 {
        quietly(|| alias_via_text(&func, seed)).unwrap_or(func)
    } else {
        func
    };
    func.display().to_string()
}

#[test]
fn generated_text_reads_exactly_or_declines() {
    static PLAIN: Tally = Tally::new();
    static MUTATED: Tally = Tally::new();
    proptest!(config(), |(seed in any::<u64>(), mutations in prop::collection::vec(mutation(), 0..3))| {
        let text = generated(seed);
        PLAIN.check(&text)?;
        let mut mutated = text;
        for m in &mutations {
            mutated = mutate(&mutated, m);
        }
        MUTATED.check(&mutated)?;
    });
    PLAIN.report("generated text");
    MUTATED.report("mutated generated text");
}

/// Spellings the parser gives a meaning the fast reader must reproduce, each taken and
/// equal: value and block gaps, aliases (repeated, and chained), out-of-order and inline
/// signatures, names met twice, NaN payloads and infinities, vectors, cold blocks,
/// regions, source locations, comments, CRLF line ends; and near misses, declined.
#[test]
fn tricky_spellings_read_exactly() {
    let texts = [
        "; a comment before\r\nfunction %gaps(i64) -> i64 fast {\r\n\
         block3(v10: i64):\r\n    v12 = iconst.i64 -1\r\n    v20 -> v12\r\n    v20 -> v12\r\n\
         v21 -> v20\r\n    v30 = iadd v10, v21\r\n    jump block1(v30)\r\n\
         block1(v5: i64) cold:\r\n    return v5\r\n}\r\n",
        "function u0:7(i64 vmctx, i32 uext) -> f64 tail {\n\
         sig2 = (i64) -> i64 system_v\n    sig0 = (i64 vmctx) tail\n\
         fn1 = colocated u0:3 sig2\n    fn0 = u0:3 sig0\n    fn3 = %memcpy(i64, i64, i64) -> i64 system_v\n\
         region0 = 8 \"VMContext+0x8\"\n    region1 = 16 \"a string\nover two lines\"\n\
         gv0 = vmctx\n    gv1 = load.i64 notrap aligned readonly gv0+8\n    stack_limit = gv1\n\
         ss2 = explicit_slot 16, align = 8\n\
         block0(v0: i64, v1: i32):\n\
         @00ff                  v2 = f64const +Inf\n\
         @0100                  v3 = f64const -NaN:0x1\n\
         @0101                  v4 = f32const -sNaN:0x1\n\
         v5 = fadd v2, v3  ; v5 = NaN\n\
         v6 = load.i8x16 notrap aligned little region1 v0+16\n\
         store little region0 v6, v0-16\n\
         v7 = stack_addr.i64 ss2+4\n\
         v8 = call fn1(v7)\n\
         v9 = iconst.i32 0xffff_ffff\n\
         v10 = icmp ult v1, v9\n\
         brif v10, block1, block2(v5)\n\
         block2(v11: f64):\n    return v11\n\
         block1:\n    trap user9\n}\n",
        "function %a() system_v {\nblock0:\n    return\n}\n\n\
         function %b(i8) -> i8 system_v {\nblock0(v0: i8):\n\
         v1 = iconst.i8 -128\n    v2 = iconst.i16 65535\n    v3 = ireduce.i8 v2\n\
         v4 = select v0, v1, v3\n    br_table v0, block1, [block1, block2]\n\
         block1:\n    return v4\nblock2:\n    return v1\n}\n",
    ];
    for text in texts {
        assert_eq!(
            check(text),
            Ok(Outcome::Taken(text.matches("function").count())),
            "{text}"
        );
    }
    // Near misses: what the parser rejects (an unsigned `sNaN` is a word, `v01` is not a
    // value, `block0` twice, an operand never defined) and what the fast reader leaves to
    // it (debug tags, a `test` line, dynamic types).
    let body = |inst: &str| {
        format!("function %f(f32) system_v {{\nblock0(v0: f32):\n{inst}\n    return\n}}\n")
    };
    for text in [
        body("    v1 = f32const sNaN:0x1"),
        body("    v1 = fadd v01, v0"),
        body("    v1 = fadd v0, v9"),
        body("    jump block0\nblock0:"),
        body("    <7> v1 = fadd v0, v0"),
        format!("test optimize\n{}", body("")),
        body("    v1 = load.dt0 v0"),
    ] {
        assert_eq!(check(&text), Ok(Outcome::Declined), "{text}");
    }
}
