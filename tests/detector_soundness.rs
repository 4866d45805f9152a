//! Soundness of the detector by execution: functions the comparator calls equal must do
//! the same thing. Every function of a generated population is run in
//! cranelift-interpreter on random inputs, and every group of functions the comparator
//! puts together must give identical results (return values bit for bit, or the same trap).
//!
//! The population is built so that equal pairs are many and not trivially the same object:
//! - small executable programs from many seeds (different seeds often make the same
//!   program, under different function names);
//! - larger executable programs and their variants: other creation order and layout,
//!   values and blocks renamed through the text, unreachable blocks, source locations;
//! - single-field mutants of those programs, which the comparator must keep apart: if it
//!   ever puts one with its original, the interpreter sees the difference. A separate
//!   check makes sure the random inputs are good enough to see such differences.

mod detector_gen;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use clif_merge::detect::{explain, ByName};
use clif_merge::{FunctionComparator, TargetInfo};
use cranelift_codegen::data_value::DataValue;
use cranelift_codegen::ir::Function;

use detector_gen::*;

fn target() -> TargetInfo {
    TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap()
}

/// Where a member of the population came from.
#[derive(Clone, Debug)]
struct Origin {
    seed: u64,
    kind: &'static str,
    mutant: bool,
}

const INPUTS: usize = 6;

fn inputs_for(func: &Function, seed: u64) -> Vec<Vec<DataValue>> {
    let mut rng = Rng::new(seed);
    (0..INPUTS)
        .map(|_| random_args(&mut rng, &func.signature))
        .collect()
}

#[test]
fn functions_the_comparator_calls_equal_behave_the_same() {
    let t = target();
    let cmp = FunctionComparator::new(&t);
    let callees = callees();

    let mut pop: Vec<(Function, Origin)> = Vec::new();
    let small = Config::exec_small();
    for seed in 0..1500u64 {
        let origin = Origin {
            seed,
            kind: "small program",
            mutant: false,
        };
        pop.push((build(seed, &small, &Variant::canonical()), origin));
    }
    let cfg = Config::exec();
    let mut bases = Vec::new();
    for seed in 0..110u64 {
        let base = build(seed, &cfg, &Variant::canonical());
        let variants: Vec<(&'static str, Function)> = vec![
            (
                "creation order and layout",
                build(
                    seed,
                    &cfg,
                    &Variant {
                        order: Some(mix(seed, 30)),
                        ..Variant::default()
                    },
                ),
            ),
            ("renamed in the text", renumber_via_text(&base, seed)),
            (
                "function renamed, calls to itself follow",
                rename_function_via_text(&renumber_via_text(&base, seed + 7), &format!("%g{seed}")),
            ),
            (
                "unreachable blocks and source locations",
                build(
                    seed,
                    &cfg,
                    &Variant {
                        order: Some(mix(seed, 31)),
                        unreachable: 2,
                        unreachable_seed: mix(seed, 32),
                        srclocs: Some(seed),
                    },
                ),
            ),
        ];
        for (kind, f) in variants {
            pop.push((
                f,
                Origin {
                    seed,
                    kind,
                    mutant: false,
                },
            ));
        }
        bases.push((seed, base.clone()));
        pop.push((
            base,
            Origin {
                seed,
                kind: "base",
                mutant: false,
            },
        ));
    }
    // Mutants that the interpreter can run.
    let mut mutant_count = 0;
    for (seed, base) in bases.iter().take(60) {
        let mut ms: Vec<Mutant> = mutants(base, mix(*seed, 33))
            .into_iter()
            .filter(|m| m.exec_safe && is_valid(&m.func))
            .collect();
        let mut rng = Rng::new(mix(*seed, 34));
        rng.shuffle(&mut ms);
        for m in ms.into_iter().take(12) {
            mutant_count += 1;
            pop.push((
                m.func,
                Origin {
                    seed: *seed,
                    kind: m.what,
                    mutant: true,
                },
            ));
        }
    }
    for (f, _) in &pop {
        verify(f);
    }

    // Classes of equal functions: sort by the comparator, then cut where it says Less.
    let mut idx: Vec<usize> = (0..pop.len()).collect();
    idx.sort_by(|&a, &b| cmp.compare(&pop[a].0, &pop[b].0));
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for &i in &idx {
        match classes.last_mut() {
            Some(c) if cmp.compare(&pop[c[0]].0, &pop[i].0) == Ordering::Equal => c.push(i),
            _ => classes.push(vec![i]),
        }
    }

    let mut outcomes: Vec<Option<Vec<Outcome>>> = vec![None; pop.len()];
    let mut equal_pairs = 0usize;
    let mut cross_seed_pairs = 0usize;
    let mut variant_pairs = 0usize;
    let mut runs = 0usize;
    let mut returned = 0usize;
    for class in classes.iter().filter(|c| c.len() > 1) {
        let first = class[0];
        let inputs = inputs_for(&pop[first].0, first as u64);
        for &i in class {
            let f = &pop[i].0;
            let res: Vec<Outcome> = inputs.iter().map(|a| run(f, &callees, a)).collect();
            runs += res.len();
            returned += res
                .iter()
                .filter(|o| matches!(o, Outcome::Return(_)))
                .count();
            if !pop[i].1.mutant {
                for o in &res {
                    assert!(
                        !matches!(o, Outcome::Error(_)),
                        "the interpreter could not run a generated function: {o:?}\n{}",
                        f.display()
                    );
                }
            }
            outcomes[i] = Some(res);
        }
        let reference = outcomes[first].clone().unwrap();
        for &i in &class[1..] {
            let (a, b) = (&pop[first], &pop[i]);
            assert_eq!(cmp.compare(&a.0, &b.0), Ordering::Equal);
            let got = outcomes[i].as_ref().unwrap();
            for (k, (x, y)) in reference.iter().zip(got).enumerate() {
                assert_eq!(
                    x,
                    y,
                    "the comparator calls these equal, but on input {:?} they differ\n\
                     left: seed {} ({}), right: seed {} ({})\n{}\n--- left:\n{}\n--- right:\n{}",
                    inputs[k],
                    a.1.seed,
                    a.1.kind,
                    b.1.seed,
                    b.1.kind,
                    explain(&t, &ByName, &a.0, &b.0)
                        .map_or("no difference".into(), |d| d.to_string()),
                    a.0.display(),
                    b.0.display()
                );
            }
        }
        let n = class.len();
        equal_pairs += n * (n - 1) / 2;
        let seeds: BTreeSet<(u64, bool)> = class
            .iter()
            .map(|&i| (pop[i].1.seed, pop[i].1.kind == "small program"))
            .collect();
        if seeds.len() > 1 {
            cross_seed_pairs += n * (n - 1) / 2;
        }
        variant_pairs += class
            .iter()
            .filter(|&&i| !pop[i].1.mutant && pop[i].1.kind != "small program")
            .count()
            .saturating_sub(1);
    }
    eprintln!(
        "population {} ({} mutants), {} classes, {} equal pairs ({} across seeds, {} variant \
         pairs), {} runs, {} returned normally",
        pop.len(),
        mutant_count,
        classes.len(),
        equal_pairs,
        cross_seed_pairs,
        variant_pairs,
        runs,
        returned
    );
    assert!(
        cross_seed_pairs >= 500,
        "only {cross_seed_pairs} equal pairs from different seeds"
    );
    assert!(
        variant_pairs >= 300,
        "only {variant_pairs} equal pairs of variants"
    );
    assert!(
        returned * 2 >= runs,
        "most runs trap ({returned} of {runs} returned): the comparison of results is weak"
    );
    // No mutant may sit in its original's class: the mutation tests say so too, but here
    // it would also have been caught by execution.
    for class in &classes {
        let members: Vec<&Origin> = class.iter().map(|&i| &pop[i].1).collect();
        for m in members.iter().filter(|o| o.mutant) {
            assert!(
                !members
                    .iter()
                    .any(|o| !o.mutant && o.seed == m.seed && o.kind != "small program"),
                "a mutant ({}) is equal to its original (seed {})",
                m.kind,
                m.seed
            );
        }
    }
}

/// The random inputs are good enough to see the differences the comparator must not
/// ignore: most single-field changes to values, operations and callees change some
/// output. Without this, the soundness test above could pass with a comparator that
/// ignores, say, constants.
#[test]
fn random_inputs_expose_semantic_changes() {
    let callees = callees();
    let cfg = Config::exec();
    let observable = [
        "iconst immediate",
        "opcode",
        "icmp condition code",
        "operand",
        "callee name",
        "f64 bits",
        "f32 bits",
        "memflags endianness",
    ];
    let mut seen: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for seed in 0..80u64 {
        let base = build(seed, &cfg, &Variant::canonical());
        let inputs = inputs_for(&base, seed);
        let expected: Vec<Outcome> = inputs.iter().map(|a| run(&base, &callees, a)).collect();
        let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for m in mutants(&base, mix(seed, 40)) {
            if !m.exec_safe || !observable.contains(&m.what) {
                continue;
            }
            // At most a few of each kind per function.
            let k = per_kind.entry(m.what).or_default();
            *k += 1;
            if *k > 6 || !is_valid(&m.func) {
                continue;
            }
            let got: Vec<Outcome> = inputs.iter().map(|a| run(&m.func, &callees, a)).collect();
            let e = seen.entry(m.what).or_default();
            e.0 += 1;
            e.1 += (got != expected) as usize;
        }
    }
    eprintln!("{seen:?}");
    for what in observable {
        let (total, differ) = seen.get(what).copied().unwrap_or((0, 0));
        assert!(total >= 10, "only {total} mutants of kind `{what}`");
        // Some changes are invisible on any input (a dead store, a comparison whose
        // other outcome leads to the same place); most must show.
        let percent = if what == "memflags endianness" {
            10
        } else {
            30
        };
        assert!(
            differ * 100 >= total * percent,
            "only {differ} of {total} `{what}` mutants change an output on the random inputs"
        );
    }
}
