//! Property tests of the detector: the comparator is a total order, the hash agrees with
//! it, numbering/layout/unreachable code/source locations never change its answer, and
//! every single-field change to a function is seen.
//!
//! The functions come from the generator in `detector_gen` (cranelift-frontend's
//! `FunctionBuilder` driven by a seeded RNG). Populations:
//! - tiny: i32 arithmetic over 1-2 blocks from very few choices, so that many seeds give
//!   the same program and all of Less/Equal/Greater are frequent;
//! - exec: what cranelift-interpreter runs (ints, floats, i8x16, stack slots with all kinds
//!   of memory flags, atomics, calls, call_indirect, traps, loops, br_table, recursion);
//! - rich: everything the verifier accepts, including symbol_value/tls_value, try_call,
//!   try_call_indirect, exception handler addresses, dynamic stack slots, f16, libcalls,
//!   user-named callees, stack limits, cold blocks and return_call.

mod detector_gen;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use clif_merge::detect::{explain, ByName};
use clif_merge::{function_hash, FunctionComparator, TargetInfo};
use cranelift_codegen::ir::Function;

use detector_gen::*;

fn target() -> TargetInfo {
    TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap()
}

/// The first difference, for assertion messages.
fn why(t: &TargetInfo, a: &Function, b: &Function) -> String {
    match explain(t, &ByName, a, b) {
        Some(d) => d.to_string(),
        None => "explain: no difference".to_string(),
    }
}

fn show_pair(t: &TargetInfo, a: &Function, b: &Function) -> String {
    format!(
        "{}\n--- left:\n{}\n--- right:\n{}",
        why(t, a, b),
        a.display(),
        b.display()
    )
}

/// The 36 instruction formats of cranelift-codegen 0.135.
const ALL_FORMATS: &[&str] = &[
    "AtomicCas",
    "AtomicRmw",
    "Binary",
    "BinaryImm8",
    "BranchTable",
    "Brif",
    "Call",
    "CallIndirect",
    "CondTrap",
    "DynamicStackAddr",
    "ExceptionHandlerAddress",
    "FloatCompare",
    "FuncAddr",
    "IntAddTrap",
    "IntCompare",
    "Jump",
    "Load",
    "LoadNoOffset",
    "MultiAry",
    "NullAry",
    "Shuffle",
    "StackAddr",
    "Store",
    "StoreNoOffset",
    "Ternary",
    "TernaryImm8",
    "Trap",
    "TryCall",
    "TryCallIndirect",
    "Unary",
    "UnaryConst",
    "UnaryGlobalValue",
    "UnaryIeee16",
    "UnaryIeee32",
    "UnaryIeee64",
    "UnaryImm",
];

/// Formats the interpreter cannot run (or that need features it lacks).
const NOT_EXECUTABLE: &[&str] = &[
    "DynamicStackAddr",
    "ExceptionHandlerAddress",
    "TryCall",
    "TryCallIndirect",
    "UnaryGlobalValue",
    "UnaryIeee16",
];

#[test]
fn generated_functions_are_valid_and_cover_every_instruction_format() {
    let mut formats: BTreeMap<Flavor, BTreeSet<String>> = BTreeMap::new();
    let mut opcodes: BTreeSet<String> = BTreeSet::new();
    for (cfg, n) in [
        (Config::rich(), 400u64),
        (Config::exec(), 400),
        (Config::tiny(), 200),
    ] {
        for seed in 0..n {
            let variants = [
                Variant::canonical(),
                Variant {
                    order: Some(mix(seed, 1)),
                    unreachable: 2,
                    unreachable_seed: seed,
                    srclocs: Some(seed),
                },
            ];
            for v in variants {
                let f = build(seed, &cfg, &v);
                verify(&f);
                let (fm, op) = formats_and_opcodes(&f);
                formats.entry(cfg.flavor).or_default().extend(fm);
                opcodes.extend(op);
            }
        }
    }
    let rich = &formats[&Flavor::Rich];
    let missing: Vec<&&str> = ALL_FORMATS.iter().filter(|f| !rich.contains(**f)).collect();
    assert!(missing.is_empty(), "formats never generated: {missing:?}");
    let exec = &formats[&Flavor::Exec];
    let missing: Vec<&&str> = ALL_FORMATS
        .iter()
        .filter(|f| !NOT_EXECUTABLE.contains(f) && !exec.contains(**f))
        .collect();
    assert!(
        missing.is_empty(),
        "formats never generated in executable functions: {missing:?}"
    );
    assert!(
        opcodes.len() >= 100,
        "only {} opcodes generated: {opcodes:?}",
        opcodes.len()
    );
}

/// All pairs of `pop`: reflexive, antisymmetric, consistent with `key` and the hash, and
/// (through a sort and a check of every sorted pair) transitive on every triple. Returns
/// the matrix.
fn check_total_order(t: &TargetInfo, pop: &[Function]) -> Vec<Vec<Ordering>> {
    let cmp = FunctionComparator::new(t);
    let keys: Vec<Vec<u64>> = pop.iter().map(|f| cmp.key(f)).collect();
    let hashes: Vec<u64> = pop.iter().map(function_hash).collect();
    let n = pop.len();
    let m: Vec<Vec<Ordering>> = pop
        .iter()
        .map(|a| pop.iter().map(|b| cmp.compare(a, b)).collect())
        .collect();
    for i in 0..n {
        assert_eq!(
            m[i][i],
            Ordering::Equal,
            "not reflexive:\n{}",
            pop[i].display()
        );
        for j in 0..n {
            assert_eq!(
                m[i][j],
                m[j][i].reverse(),
                "not antisymmetric: compare(a,b) = {:?}, compare(b,a) = {:?}\n{}",
                m[i][j],
                m[j][i],
                show_pair(t, &pop[i], &pop[j])
            );
            assert_eq!(
                m[i][j],
                keys[i].cmp(&keys[j]),
                "compare disagrees with key order\n{}",
                show_pair(t, &pop[i], &pop[j])
            );
            if m[i][j] == Ordering::Equal {
                assert_eq!(
                    hashes[i],
                    hashes[j],
                    "equal functions with different hashes\n{}",
                    show_pair(t, &pop[i], &pop[j])
                );
            }
            // `explain` finds a difference exactly when the comparator sees one (on every
            // equal pair, and on a sample of the others).
            if m[i][j] == Ordering::Equal || (i * n + j).is_multiple_of(16) {
                assert_eq!(
                    explain(t, &ByName, &pop[i], &pop[j]).is_none(),
                    m[i][j] == Ordering::Equal,
                    "explain disagrees with compare ({:?})\n{}",
                    m[i][j],
                    show_pair(t, &pop[i], &pop[j])
                );
            }
        }
    }
    // Transitivity on every triple: insertion-sort by the matrix (which never panics on an
    // inconsistent order), cut the sorted sequence into runs of equal neighbours, and
    // require that the matrix is exactly the order of the runs. A relation with that
    // property is a total preorder, so this checks every triple of the population.
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for (i, row) in m.iter().enumerate() {
        let at = order
            .iter()
            .position(|&j| row[j] == Ordering::Less)
            .unwrap_or(order.len());
        order.insert(at, i);
    }
    let mut run = vec![0usize; n];
    for k in 1..n {
        let (a, b) = (order[k - 1], order[k]);
        run[b] = run[a] + usize::from(m[a][b] != Ordering::Equal);
    }
    for (i, row) in m.iter().enumerate() {
        for (j, &o) in row.iter().enumerate() {
            assert_eq!(
                o,
                run[i].cmp(&run[j]),
                "not transitive: the order disagrees with the sorted population\n{}",
                show_pair(t, &pop[i], &pop[j])
            );
        }
    }
    m
}

/// Random triples, biased towards equal functions: checks the transitivity rules one by
/// one and counts how often each combination of outcomes occurred.
fn check_triples(
    t: &TargetInfo,
    pop: &[Function],
    m: &[Vec<Ordering>],
    count: usize,
    seed: u64,
) -> HashMap<(Ordering, Ordering), usize> {
    use Ordering::*;
    let n = pop.len();
    // Classes of equal functions, to draw equal partners often.
    let mut class_of: Vec<usize> = vec![usize::MAX; n];
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for i in 0..n {
        if class_of[i] == usize::MAX {
            let members: Vec<usize> = (0..n).filter(|&j| m[i][j] == Equal).collect();
            for &j in &members {
                class_of[j] = classes.len();
            }
            classes.push(members);
        }
    }
    let mut rng = Rng::new(seed);
    let mut combos: HashMap<(Ordering, Ordering), usize> = HashMap::new();
    let partner = |rng: &mut Rng, i: usize| -> usize {
        let class = &classes[class_of[i]];
        if class.len() > 1 && rng.chance(35) {
            class[rng.below(class.len())]
        } else {
            rng.below(n)
        }
    };
    for _ in 0..count {
        let a = rng.below(n);
        let b = partner(&mut rng, a);
        let c = partner(&mut rng, b);
        let (ab, bc, ac) = (m[a][b], m[b][c], m[a][c]);
        *combos.entry((ab, bc)).or_default() += 1;
        let expected = match (ab, bc) {
            (Equal, x) | (x, Equal) => Some(x),
            (Less, Less) => Some(Less),
            (Greater, Greater) => Some(Greater),
            _ => None,
        };
        if let Some(x) = expected {
            assert_eq!(
                ac,
                x,
                "not transitive: a?b = {ab:?}, b?c = {bc:?}, a?c = {ac:?}\n--- a:\n{}\n--- b:\n{}\n--- c:\n{}",
                pop[a].display(),
                pop[b].display(),
                pop[c].display()
            );
        }
        // Computed afresh, not only through the matrix.
        let cmp = FunctionComparator::new(t);
        assert_eq!(cmp.compare(&pop[c], &pop[a]), ac.reverse());
    }
    combos
}

#[test]
fn order_is_total_on_a_population_where_many_functions_collide() {
    let t = target();
    let cfg = Config::tiny();
    let mut pop = Vec::new();
    for seed in 0..600 {
        pop.push(build(seed, &cfg, &Variant::canonical()));
    }
    // Renumbered and re-laid-out copies of some of them.
    for seed in 0..200u64 {
        let v = Variant {
            order: Some(mix(seed, 2)),
            ..Variant::default()
        };
        pop.push(build(seed * 3 % 600, &cfg, &v));
    }
    let m = check_total_order(&t, &pop);
    let n = pop.len();
    let mut counts: HashMap<Ordering, usize> = HashMap::new();
    for (i, row) in m.iter().enumerate() {
        for (j, &o) in row.iter().enumerate() {
            if i != j {
                *counts.entry(o).or_default() += 1;
            }
        }
    }
    let pairs = (n * (n - 1)) as f64;
    for o in [Ordering::Less, Ordering::Equal, Ordering::Greater] {
        let share = *counts.get(&o).unwrap_or(&0) as f64 / pairs;
        assert!(
            share > 0.02,
            "{o:?} is too rare among ordered pairs ({share:.4}): the population does not collide enough"
        );
    }
    let combos = check_triples(&t, &pop, &m, 30_000, 7);
    for ab in [Ordering::Less, Ordering::Equal, Ordering::Greater] {
        for bc in [Ordering::Less, Ordering::Equal, Ordering::Greater] {
            let k = *combos.get(&(ab, bc)).unwrap_or(&0);
            assert!(k >= 100, "only {k} triples with a?b = {ab:?}, b?c = {bc:?}");
        }
    }
}

#[test]
fn order_is_total_on_rich_and_executable_functions() {
    let t = target();
    let mut pop = Vec::new();
    for (cfg, n) in [(Config::rich(), 130u64), (Config::exec(), 130)] {
        for seed in 0..n {
            pop.push(build(seed, &cfg, &Variant::canonical()));
            if seed % 2 == 0 {
                let v = Variant {
                    order: Some(mix(seed, 3)),
                    unreachable: 1,
                    unreachable_seed: seed,
                    srclocs: Some(seed),
                };
                pop.push(build(seed, &cfg, &v));
            }
        }
    }
    // Small executable programs collide across seeds; they bring in many equal pairs.
    for seed in 0..150 {
        pop.push(build(seed, &Config::exec_small(), &Variant::canonical()));
    }
    let m = check_total_order(&t, &pop);
    let combos = check_triples(&t, &pop, &m, 20_000, 11);
    for ab in [Ordering::Less, Ordering::Equal, Ordering::Greater] {
        for bc in [Ordering::Less, Ordering::Equal, Ordering::Greater] {
            let k = *combos.get(&(ab, bc)).unwrap_or(&0);
            assert!(k >= 20, "only {k} triples with a?b = {ab:?}, b?c = {bc:?}");
        }
    }
}

/// `v` must be equal to `base`, with the same key and hash, and must order like `base`
/// against every function in `thirds`.
fn assert_same_answer(
    t: &TargetInfo,
    what: &str,
    base: &Function,
    v: &Function,
    thirds: &[Function],
) {
    let cmp = FunctionComparator::new(t);
    assert_eq!(
        cmp.compare(base, v),
        Ordering::Equal,
        "{what} changed the answer\n{}",
        show_pair(t, base, v)
    );
    assert_eq!(
        cmp.compare(v, base),
        Ordering::Equal,
        "{what}: not symmetric"
    );
    assert_eq!(cmp.key(base), cmp.key(v), "{what} changed the key");
    assert_eq!(
        function_hash(base),
        function_hash(v),
        "{what} changed the hash\n{}",
        show_pair(t, base, v)
    );
    for g in thirds {
        let expected = cmp.compare(base, g);
        assert_eq!(
            cmp.compare(v, g),
            expected,
            "{what} changed the order against a third function\n{}",
            show_pair(t, v, g)
        );
        assert_eq!(cmp.compare(g, v), expected.reverse());
    }
}

#[test]
fn numbering_layout_unreachable_blocks_and_source_locations_never_matter() {
    let t = target();
    let mut checked: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (cfg, n) in [
        (Config::rich(), 150u64),
        (Config::exec(), 150),
        (Config::tiny(), 60),
    ] {
        // Third functions: other seeds, and a few that equal some of the bases.
        let thirds: Vec<Function> = (0..6)
            .map(|k| build(1000 + k, &cfg, &Variant::canonical()))
            .chain((0..3).map(|k| build(k * 7, &cfg, &Variant::canonical())))
            .collect();
        for seed in 0..n {
            let base = build(seed, &cfg, &Variant::canonical());
            let base_text = base.display().to_string();
            let reordered = build(
                seed,
                &cfg,
                &Variant {
                    order: Some(mix(seed, 10)),
                    ..Variant::default()
                },
            );
            let mut variants: Vec<(&str, Function)> = vec![
                ("creation order and layout", reordered.clone()),
                (
                    "unreachable blocks",
                    build(
                        seed,
                        &cfg,
                        &Variant {
                            unreachable: 1 + (seed % 3) as usize,
                            unreachable_seed: mix(seed, 11),
                            ..Variant::default()
                        },
                    ),
                ),
                (
                    "source locations",
                    build(
                        seed,
                        &cfg,
                        &Variant {
                            srclocs: Some(mix(seed, 12)),
                            ..Variant::default()
                        },
                    ),
                ),
            ];
            let all_at_once = build(
                seed,
                &cfg,
                &Variant {
                    order: Some(mix(seed, 13)),
                    unreachable: 2,
                    unreachable_seed: mix(seed, 14),
                    srclocs: Some(mix(seed, 15)),
                },
            );
            // cranelift 0.135's printer does not print dynamic type declarations
            // (`dt0 = i32x4*gv0`), so functions with dynamic stack slots do not survive
            // printing; they are renumbered by the builder only.
            if base.dynamic_stack_slots.is_empty() {
                variants.push((
                    "renaming values and blocks in the text",
                    renumber_via_text(&base, seed),
                ));
                variants.push((
                    "renaming the text of a reordered build",
                    renumber_via_text(&reordered, seed + 1),
                ));
                variants.push((
                    "all of them at once, then renaming the text",
                    renumber_via_text(&all_at_once, seed + 2),
                ));
                variants.push((
                    "renaming the function (its calls to itself follow)",
                    rename_function_via_text(&base, &format!("%other{seed}")),
                ));
                variants.push((
                    "renaming the function to a user name",
                    rename_function_via_text(&base, &format!("u7:{seed}")),
                ));
                let aliased = alias_via_text(&base, seed + 3);
                let has_alias = aliased.dfg.values().any(|v| aliased.dfg.value_is_alias(v));
                if has_alias {
                    variants.push(("uses through value aliases", aliased));
                }
            } else {
                variants.push(("all of them at once", all_at_once));
            }
            for (what, v) in &variants {
                verify(v);
                assert_same_answer(&t, what, &base, v, &thirds);
                // Count the variants that really differ from the base (a reordering of a
                // function with one or two blocks may well be the identity).
                if *what == "creation order and layout" && base.layout.blocks().count() < 3 {
                    continue;
                }
                let e = checked.entry(what).or_default();
                e.0 += 1;
                let differs = match *what {
                    "source locations" => {
                        base.srclocs.values().all(|l| l.is_default())
                            && v.srclocs.values().any(|l| !l.is_default())
                    }
                    "unreachable blocks" => {
                        v.layout.blocks().count() > base.layout.blocks().count()
                    }
                    _ => v.display().to_string() != base_text,
                };
                e.1 += differs as usize;
            }
        }
    }
    for (what, (total, differs)) in &checked {
        assert!(*total >= 20, "{what}: only {total} variants were checked");
        assert!(
            *differs * 10 >= *total * 9,
            "{what}: only {differs} of {total} variants differ from their base: the test would be vacuous"
        );
    }
}

/// Categories every run must exercise with valid (verifier-accepted) mutants, and how
/// many at least.
const REQUIRED_MUTATIONS: &[(&str, usize)] = &[
    ("opcode", 50),
    ("iconst immediate", 50),
    ("f64 zero sign (0.0 vs -0.0)", 10),
    ("f64 NaN payload", 10),
    ("f64 bits", 10),
    ("f32 zero sign (0.0 vs -0.0)", 10),
    ("f32 NaN payload", 10),
    ("f32 bits", 10),
    ("f16 zero sign (0.0 vs -0.0)", 2),
    ("f16 NaN payload", 2),
    ("f16 bits", 2),
    ("vconst bytes", 10),
    ("shuffle mask", 5),
    ("lane immediate", 10),
    ("icmp condition code", 30),
    ("fcmp condition code", 10),
    ("memory offset", 20),
    ("stack_addr offset", 10),
    ("stack slot operand", 5),
    ("atomic_rmw operation", 5),
    ("trap code", 20),
    ("exception handler index", 3),
    ("memflags aligned", 20),
    ("memflags readonly", 20),
    ("memflags endianness", 20),
    ("memflags explicit little endian", 20),
    ("memflags can_move", 20),
    ("memflags trap code", 20),
    ("memflags alias region", 20),
    ("operand", 100),
    ("block argument", 50),
    ("result type", 20),
    ("callee name", 20),
    ("callee name (a call to itself)", 5),
    ("func_addr name", 5),
    ("callee colocated", 20),
    ("callee patchable", 3),
    ("callee signature", 20),
    ("exception tag", 3),
    ("exception payload index", 3),
    ("user stack map entry", 5),
    ("branch target", 20),
    ("stack_limit", 3),
    ("symbol name", 5),
    ("symbol offset", 5),
    ("symbol colocated", 5),
    ("global value load offset", 3),
    ("global value load flags", 3),
    ("global value iadd_imm offset", 3),
    ("dynamic type", 3),
    ("stack slot size", 20),
    ("stack slot alignment", 20),
    ("stack slot added", 20),
    ("calling convention", 20),
    ("parameter extension", 10),
    ("return extension", 5),
    ("cold block flag", 20),
];

#[test]
fn every_single_field_mutation_is_seen() {
    let t = target();
    let cmp = FunctionComparator::new(&t);
    let mut valid: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut invalid: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (cfg, n) in [(Config::rich(), 110u64), (Config::exec(), 70)] {
        for seed in 0..n {
            let base = build(seed, &cfg, &Variant::canonical());
            // The same function under other numbers: a mutant must differ from it too.
            let renamed = build(
                seed,
                &cfg,
                &Variant {
                    order: Some(mix(seed, 20)),
                    srclocs: Some(seed),
                    ..Variant::default()
                },
            );
            // All kinds, but at most a dozen mutants of each kind per function (the
            // folding code of executable functions would otherwise dominate).
            let mut ms = mutants(&base, mix(seed, 21));
            Rng::new(mix(seed, 22)).shuffle(&mut ms);
            let mut per_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
            ms.retain(|m| {
                let k = per_kind.entry(m.what).or_default();
                *k += 1;
                *k <= 12
            });
            for m in ms {
                if !is_valid(&m.func) {
                    *invalid.entry(m.what).or_default() += 1;
                    continue;
                }
                *valid.entry(m.what).or_default() += 1;
                let o = cmp.compare(&base, &m.func);
                assert_ne!(
                    o,
                    Ordering::Equal,
                    "changing the {} is not seen\n--- base:\n{}\n--- mutant:\n{}",
                    m.what,
                    base.display(),
                    m.func.display()
                );
                assert_eq!(cmp.compare(&m.func, &base), o.reverse());
                assert_ne!(
                    cmp.compare(&renamed, &m.func),
                    Ordering::Equal,
                    "changing the {} is not seen against a renumbered copy\n{}",
                    m.what,
                    show_pair(&t, &renamed, &m.func)
                );
                let d = explain(&t, &ByName, &base, &m.func);
                assert!(d.is_some(), "explain finds no difference for {}", m.what);
            }
        }
    }
    let mut report = String::new();
    for (what, k) in &valid {
        report.push_str(&format!(
            "{what:40} {k:6} valid {:6} rejected by the verifier\n",
            invalid.get(what).unwrap_or(&0)
        ));
    }
    eprintln!("{report}");
    for &(what, min) in REQUIRED_MUTATIONS {
        let k = *valid.get(what).unwrap_or(&0);
        assert!(
            k >= min,
            "only {k} valid mutations of kind `{what}` (want {min})\n{report}"
        );
    }
}

/// Minimal reproduction of a crash found by the text round trip: cranelift 0.135 prints a
/// dynamic stack slot (`dss0 = explicit_dynamic_slot dt0`) but not the declaration of its
/// dynamic type (`dt0 = i32x4*gv0`), and the reader accepts the undeclared `dt0`; so does
/// the verifier. Any function with a dynamic stack slot that went through text once is
/// such a function, and the comparator must not panic on it.
#[test]
fn comparator_does_not_panic_on_a_dynamic_slot_whose_type_is_not_declared() {
    let clif = "
function %f() -> i64 fast {
    dss0 = explicit_dynamic_slot dt0
block0:
    v0 = dynamic_stack_addr.i64 dss0
    return v0
}
";
    let parsed = clif_merge::read::parse_clif(clif, "dyn.clif").expect("the reader accepts it");
    let f = &parsed[0].func;
    assert!(is_valid(f), "the verifier accepts it");
    let t = target();
    let cmp = FunctionComparator::new(&t);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cmp.compare(f, f)));
    assert!(
        matches!(result, Ok(Ordering::Equal)),
        "compare(f, f) panicked or was not Equal on:\n{clif}"
    );
}
