//! The alignment of two functions (`clif_merge::detect::align`), on the fixture
//! `fixtures/align/explain.clif` and on generated functions too large for the whole table:
//! what pairs, what is left over on each side, and that the result depends on the two
//! functions alone.

use std::collections::HashMap;

use clif_merge::detect::align::{
    align, align_blocks, align_within, operand_mismatches, pair_kind, Alignment, AlignmentCounts,
    Method, PairKind, Step, GAP,
};
use clif_merge::detect::fingerprint::{linearise, ItemKind, Linearised};
use clif_merge::detect::side_by_side::{align_functions, explain_alignment, MAX_LINES};
use clif_merge::read::parse_clif;
use clif_merge::{FuncName, TargetInfo};
use cranelift_codegen::ir::{types, AbiParam, Function, InstBuilder, Signature, UserFuncName};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

fn target() -> TargetInfo {
    TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap()
}

/// The fixture's functions by name.
fn fixture() -> HashMap<String, Function> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/align/explain.clif");
    let text = std::fs::read_to_string(path).unwrap();
    parse_clif(&text, path)
        .unwrap()
        .into_iter()
        .map(|p| (FuncName::of_function(&p.func).to_string(), *p.func))
        .collect()
}

fn counts(a: &str, b: &str) -> AlignmentCounts {
    let f = fixture();
    align_functions(&target(), &f[a], &f[b]).counts
}

#[test]
fn a_function_aligns_with_itself_item_for_item() {
    let f = fixture();
    for func in f.values() {
        let l = linearise(func, &target());
        let alignment = align(&l, &l);
        assert_eq!(alignment.method, Method::Full);
        for (k, step) in alignment.steps.iter().enumerate() {
            match step {
                Step::Pair(a, b, PairKind::Same) if a == b && a.as_u32() as usize == k => {}
                other => panic!("step {k}: {other:?}"),
            }
        }
        assert!(alignment.counts(&l, &l).all_same());
    }
}

#[test]
fn one_opcode_and_one_extra_call() {
    let c = counts("%scale_add", "%scale_sub_logged");
    assert_eq!(
        c,
        AlignmentCounts {
            same: 5,
            opcode: 1,
            right_only_insts: 1,
            same_blocks: 1,
            ..Default::default()
        }
    );
    // The same seen from the other side.
    let back = counts("%scale_sub_logged", "%scale_add");
    assert_eq!((back.left_only_insts, back.right_only_insts), (1, 0));
    assert_eq!((back.same, back.opcode), (5, 1));
}

#[test]
fn the_same_code_on_other_types_pairs_as_type_differences() {
    let c = counts("%scale_add", "%scale_wide");
    assert_eq!(
        c,
        AlignmentCounts {
            types: 6,
            block_headers: 1,
            ..Default::default()
        }
    );
    assert_eq!(c.matched_fraction(), 0.0);
}

#[test]
fn a_block_more_is_a_gap_of_a_block_and_its_instructions() {
    let c = counts("%sum_loop", "%sum_loop_twice");
    assert_eq!(c.same, 9);
    assert_eq!((c.right_only_insts, c.right_only_blocks), (2, 1));
    assert_eq!((c.left_only_insts, c.left_only_blocks), (0, 0));
    assert_eq!(c.opcode + c.types + c.details + c.block_headers, 0);
}

#[test]
fn constants_callees_and_value_numbers_do_not_change_a_fingerprint() {
    // %scale_add and %scale_sub_logged's first two instructions: other constants (3, 5),
    // the same fingerprints.
    let f = fixture();
    let (l, r) = (
        linearise(&f["%scale_add"], &target()),
        linearise(&f["%scale_sub_logged"], &target()),
    );
    let (ls, rs) = (shapes(&l), shapes(&r));
    assert_eq!(ls[..3], rs[..3]);
    assert_eq!(ls[4..], rs[5..]);
    assert_ne!(ls[3], rs[4], "iadd against isub");
    // An extra instruction with a result renumbers every value after it in the
    // comparator's encoding; the fingerprints after it stay the same.
    let (l, r) = (
        linearise(&chain(20, &[], None), &target()),
        linearise(&chain(20, &[], Some(3)), &target()),
    );
    let (ls, rs) = (shapes(&l), shapes(&r));
    assert_eq!(ls[..5], rs[..5]);
    assert_eq!(ls[5..], rs[6..]);
}

fn shapes(s: &Linearised) -> Vec<u64> {
    s.items.values().map(|i| i.shape).collect()
}

/// A straight-line function: `n` operations on its parameter, the `k`th an `isub` when
/// `k` is in `isubs` (an `iadd` otherwise), with an extra `imul` after operation `extra`.
fn chain(n: usize, isubs: &[usize], extra: Option<usize>) -> Function {
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.push(AbiParam::new(types::I64));
    sig.returns.push(AbiParam::new(types::I64));
    let mut func = Function::with_name_signature(UserFuncName::user(0, 0), sig);
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let x = b.block_params(block)[0];
    let mut v = x;
    for k in 0..n {
        v = if isubs.contains(&k) {
            b.ins().isub(v, x)
        } else {
            b.ins().iadd(v, x)
        };
        if extra == Some(k) {
            v = b.ins().imul(v, x);
        }
    }
    b.ins().return_(&[v]);
    b.finalize(TargetFrontendConfig {
        default_call_conv: CallConv::SystemV,
        pointer_width: target_lexicon::PointerWidth::U64,
        page_size_align_log2: 12,
    });
    func
}

#[test]
fn large_functions_align_within_a_band_and_say_so() {
    // 6,000 items a side: 36 million cells, over the cap of 16 million.
    let left = linearise(&chain(6_000, &[100, 4_000], None), &target());
    let right = linearise(&chain(6_000, &[], Some(3_000)), &target());
    let alignment = align(&left, &right);
    assert!(
        matches!(alignment.method, Method::Banded { half_width } if half_width < 2_000),
        "{:?}",
        alignment.method
    );
    let c = alignment.counts(&left, &right);
    assert_eq!(c.right_only_insts, 1, "{c:?}");
    assert_eq!(c.opcode, 2, "{c:?}");
    assert_eq!(c.same, 6_000 + 1 - 2, "{c:?}");
    // Every item of both sides appears once, in order.
    let (mut next_l, mut next_r) = (0, 0);
    for step in &alignment.steps {
        match *step {
            Step::Pair(l, r, _) => {
                assert_eq!((l.as_u32(), r.as_u32()), (next_l, next_r));
                next_l += 1;
                next_r += 1;
            }
            Step::LeftOnly(l) => {
                assert_eq!(l.as_u32(), next_l);
                next_l += 1;
            }
            Step::RightOnly(r) => {
                assert_eq!(r.as_u32(), next_r);
                next_r += 1;
            }
        }
    }
    assert_eq!(
        (next_l as usize, next_r as usize),
        (left.items.len(), right.items.len())
    );
}

#[test]
fn alignment_is_deterministic_and_blocks_never_pair_with_instructions() {
    let f = fixture();
    let mut names: Vec<&String> = f.keys().collect();
    names.sort();
    for a in &names {
        for b in &names {
            let (l, r) = (linearise(&f[*a], &target()), linearise(&f[*b], &target()));
            let once = align(&l, &r);
            assert_eq!(once, align(&l, &r), "{a} {b}");
            for step in &once.steps {
                if let Step::Pair(x, y, _) = *step {
                    let block = |k: ItemKind| matches!(k, ItemKind::Block(_));
                    assert_eq!(block(l.items[x].kind), block(r.items[y].kind), "{a} {b}");
                }
            }
            // The best score is the same whichever side is on the left.
            assert_eq!(once.score, align(&r, &l).score, "{a} {b}");
        }
    }
}

/// The score of `alignment`'s steps, recomputed; panics on a step that is not a valid
/// alignment of `left` and `right` (every item once, in order, pairs only where allowed).
fn rescore(left: &Linearised, right: &Linearised, alignment: &Alignment) -> i64 {
    let (mut next_l, mut next_r, mut score) = (0u32, 0u32, 0i64);
    for step in &alignment.steps {
        match *step {
            Step::Pair(l, r, kind) => {
                assert_eq!((l.as_u32(), r.as_u32()), (next_l, next_r));
                let (k, s) = pair_kind(&left.items[l], &right.items[r]).expect("may pair");
                assert_eq!(k, kind);
                score += i64::from(s);
                next_l += 1;
                next_r += 1;
            }
            Step::LeftOnly(l) => {
                assert_eq!(l.as_u32(), next_l);
                score += i64::from(GAP);
                next_l += 1;
            }
            Step::RightOnly(r) => {
                assert_eq!(r.as_u32(), next_r);
                score += i64::from(GAP);
                next_r += 1;
            }
        }
    }
    assert_eq!(
        (next_l as usize, next_r as usize),
        (left.items.len(), right.items.len())
    );
    score
}

/// The block headers of `alignment`, as (left position, right position) among each
/// side's blocks, when they pair.
fn block_pairs(
    left: &Linearised,
    right: &Linearised,
    alignment: &Alignment,
) -> Vec<(usize, usize)> {
    let rank = |lin: &Linearised, at: u32| {
        lin.items
            .values()
            .take(at as usize)
            .filter(|i| i.is_block())
            .count()
    };
    alignment
        .steps
        .iter()
        .filter_map(|step| match *step {
            Step::Pair(l, r, _) if left.items[l].is_block() => {
                Some((rank(left, l.as_u32()), rank(right, r.as_u32())))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn block_by_block_alignment_pairs_every_block_in_order_and_is_the_best_such() {
    let f = fixture();
    let mut names: Vec<&String> = f.keys().collect();
    names.sort();
    let (mut aligned, mut same_as_whole) = (0, 0);
    for a in &names {
        for b in &names {
            let (l, r) = (linearise(&f[*a], &target()), linearise(&f[*b], &target()));
            let Some(by_blocks) = align_blocks(&l, &r) else {
                assert_ne!(l.block_count(), r.block_count(), "{a} {b}");
                continue;
            };
            aligned += 1;
            assert_eq!(l.block_count(), r.block_count(), "{a} {b}");
            // A valid alignment, its score right, every block with its namesake.
            assert_eq!(rescore(&l, &r, &by_blocks), by_blocks.score, "{a} {b}");
            let expected: Vec<(usize, usize)> = (0..l.block_count()).map(|k| (k, k)).collect();
            assert_eq!(block_pairs(&l, &r, &by_blocks), expected, "{a} {b}");
            assert_eq!(by_blocks, align_blocks(&l, &r).unwrap(), "{a} {b}");
            // Never better than the whole table; as good when the whole table's best
            // alignment pairs the blocks so too.
            let whole = align(&l, &r);
            assert!(by_blocks.score <= whole.score, "{a} {b}");
            if block_pairs(&l, &r, &whole) == expected {
                assert_eq!(by_blocks.score, whole.score, "{a} {b}");
                same_as_whole += 1;
            }
        }
    }
    assert!(
        aligned > 20 && same_as_whole > 10,
        "{aligned} {same_as_whole}"
    );
}

#[test]
fn a_band_gives_a_valid_alignment_never_better_than_the_whole_table() {
    // Pseudo-random chains (a fixed LCG): other opcodes here and there, an extra
    // instruction somewhere, lengths apart; each aligned whole and within bands of
    // several widths.
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |bound: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % bound
    };
    let mut banded = 0;
    for _ in 0..60 {
        let (n, m) = (5 + next(60), 5 + next(60));
        let subs_l: Vec<usize> = (0..next(6)).map(|_| next(n)).collect();
        let subs_r: Vec<usize> = (0..next(6)).map(|_| next(m)).collect();
        let left = linearise(&chain(n, &subs_l, Some(next(n))), &target());
        let right = linearise(&chain(m, &subs_r, None), &target());
        let whole = align(&left, &right);
        assert_eq!(whole.method, Method::Full);
        assert_eq!(rescore(&left, &right, &whole), whole.score);
        for cells in [16, 64, 200, 1_000] {
            let band = align_within(&left, &right, cells);
            if matches!(band.method, Method::Banded { .. }) {
                banded += 1;
            }
            assert_eq!(rescore(&left, &right, &band), band.score);
            assert!(band.score <= whole.score);
        }
    }
    assert!(banded > 100, "the bands were exercised: {banded}");
}

#[test]
fn operands_that_the_alignment_does_not_pair_are_counted() {
    let f = fixture();
    let mismatches = |a: &str, b: &str| {
        let (l, r) = (linearise(&f[a], &target()), linearise(&f[b], &target()));
        operand_mismatches(&align(&l, &r), (&l, &f[a]), (&r, &f[b]))
    };
    assert_eq!(mismatches("%scale_add", "%scale_add"), 0);
    // The extra call takes nothing from the rest; every operand still pairs.
    assert_eq!(mismatches("%scale_add", "%scale_sub_logged"), 0);
    // %sum_loop's `v6 = iadd v3, v5` pairs with `v9 = iadd v8, v5`: v3 against v8, a
    // parameter of the extra block, is the one mismatch (the jumps back pass v6 and v9,
    // which pair).
    assert_eq!(mismatches("%sum_loop", "%sum_loop_twice"), 1);
}

#[test]
fn a_long_alignment_is_cut_after_its_first_lines_but_counted_whole() {
    let (a, b) = (chain(3_000, &[10], None), chain(3_000, &[], Some(2_500)));
    let name = |n: &str| FuncName::parse(n).unwrap();
    let text = explain_alignment(&target(), &name("%a"), &a, &name("%b"), &b);
    let steps = 1 + 3_000 + 1 + 1; // block, operations, the extra imul, return
    assert!(
        text.contains(&format!("  ... {} more steps\n", steps - MAX_LINES)),
        "{}",
        &text[text.len().saturating_sub(600)..]
    );
    assert!(
        text.contains("(3000 of 3001 in %a, 3000 of 3002 in %b pair with an equal one); 1 opcode difference(s)"),
        "{}",
        &text[text.len().saturating_sub(600)..]
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("  ")).count(),
        MAX_LINES + 1
    );
}
