//! Runs every fixture in `fixtures/detector/`: one file per detector rule, each stating its
//! expectations in directive comments (the runner is `tests/common/detector.rs`).
//!
//! Directives (one per comment line):
//! - `; target: <triple>` compare (and verify) under this triple instead of x86_64 Linux;
//! - `; expect: equal %a %b` the comparator calls the two functions equal;
//! - `; expect: differ %a %b <what>` the comparator tells them apart, and the explainer's
//!   `what` for the first difference contains `<what>` (in both directions).
//!
//! For every directive both directions are checked: `compare(a, b)` and `compare(b, a)` are
//! consistent, equal functions have equal hashes and no explanation, `key` orders the same
//! way `compare` does. Every function is also checked against a renumbered copy of itself
//! (the fixture's text with every value and block renamed, parsed again), and every file's
//! functions are checked pairwise for antisymmetry and triple-wise for transitivity. A
//! file fails when it has no directive, defines a name twice, has a function no directive
//! names, or names a function it does not define; every function must pass Cranelift's
//! verifier (with the triple's ISA when this build has one).
//!
//! Besides the fixtures: the pointer-type rule of `src/target.rs`, and a 200,000-block chain
//! compared against a renumbered copy of itself on the test thread's default stack.

mod common;

use std::cmp::Ordering;

use clif_merge::detect::{explain, ByName};
use clif_merge::{function_hash, FuncName, FunctionComparator, TargetInfo};
use common::detector::*;
use cranelift_codegen::ir::{
    types, AbiParam, BlockArg, Function, GlobalValue, GlobalValueData, InstBuilder,
    InstructionData, Signature, UserFuncName,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

#[test]
fn detector_fixtures() {
    let mut out = Failures::default();
    for fx in &load_fixtures() {
        check_fixture(fx, &mut out);
    }
    out.assert_none();
}

#[test]
fn malformed_directives_are_rejected() {
    let bad = [
        "; expect: equal %a\n",
        "; expect: differ %a %b\n",
        "; expect: same %a %b\n",
        "; expect: equal %a %b opcode\n",
        "; expected: equal %a %b\n",
        "; target: i686-unknown-linux-gnu\n; target: x86_64-unknown-linux-gnu\n",
    ];
    for text in bad {
        let r = std::panic::catch_unwind(|| parse_directives("t.clif", text));
        assert!(r.is_err(), "accepted: {text:?}");
    }
    let (triple, ds) = parse_directives(
        "t.clif",
        "; target: i686-unknown-linux-gnu\n; a comment\n; expect: differ %a %b immediate (f64 bits)\n",
    );
    assert_eq!(triple.as_deref(), Some("i686-unknown-linux-gnu"));
    assert!(
        matches!(&ds[..], [Directive { expect: Expect::Differ(w), .. }] if w == "immediate (f64 bits)")
    );
}

#[test]
fn renumbering_renames_values_and_blocks_only() {
    let text = "function %v1(i32) {\n    fn0 = %block2(i32)\nblock0(v0: i32):\n    v1 -> v0\n    call fn0(v1) ; v1 block3\n    return\n}\n";
    let got = renumber_text(text);
    assert!(got.contains("function %v1(i32)"), "{got}");
    assert!(got.contains("fn0 = %block2(i32)"), "{got}");
    assert!(got.contains("block5(v7: i32):"), "{got}");
    assert!(got.contains("v10 -> v7"), "{got}");
    assert!(got.contains("call fn0(v10) ; v1 block3"), "{got}");
}

// ---------------------------------------------------------------------------------------
// The pointer-type rule (src/target.rs).

#[test]
fn pointer_type_follows_the_triple() {
    let cases = [
        ("x86_64-unknown-linux-gnu", types::I64),
        ("aarch64-apple-darwin", types::I64),
        ("riscv64gc-unknown-linux-gnu", types::I64),
        ("i686-unknown-linux-gnu", types::I32),
        ("i686-pc-windows-msvc", types::I32),
        ("armv7-unknown-linux-gnueabihf", types::I32),
        ("riscv32imac-unknown-none-elf", types::I32),
        ("wasm32-unknown-unknown", types::I32),
    ];
    for (triple, ty) in cases {
        let t = TargetInfo::from_triple_str(triple).unwrap();
        assert_eq!(t.pointer_type(), ty, "{triple}");
    }
    // No pointer width, no target: nothing is compared under a guessed pointer type.
    assert!(TargetInfo::from_triple_str("unknown-unknown-unknown").is_err());
}

fn pointer_fixture() -> Fixture {
    load_fixtures()
        .into_iter()
        .find(|f| {
            f.path
                .ends_with("pointer_type_is_i32_on_32_bit_targets.clif")
        })
        .expect("the 32-bit pointer fixture")
}

/// The global values `func` reaches: its `stack_limit`, those its instructions name, and
/// their bases.
fn reached_global_values(func: &Function) -> Vec<GlobalValue> {
    let mut todo: Vec<GlobalValue> = func.stack_limit.into_iter().collect();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let InstructionData::UnaryGlobalValue { global_value, .. } = func.dfg.insts[inst] {
                todo.push(global_value);
            }
        }
    }
    let mut seen = Vec::new();
    while let Some(gv) = todo.pop() {
        if seen.contains(&gv) {
            continue;
        }
        seen.push(gv);
        if let GlobalValueData::Load { base, .. } | GlobalValueData::IAddImm { base, .. } =
            func.global_values[gv]
        {
            todo.push(base);
        }
    }
    seen
}

/// Under a 32-bit triple the implicit address type of `vmctx`, `symbol` and
/// `dyn_scale_target_const` global values is encoded as `i32`, under a 64-bit one as `i64`:
/// the two keys of a function differ exactly there, and only for those global values.
#[test]
fn implicit_address_types_are_encoded_as_the_pointer_type() {
    let fx = pointer_fixture();
    let t32 = TargetInfo::from_triple_str("i686-unknown-linux-gnu").unwrap();
    let t64 = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    let (c32, c64) = (FunctionComparator::new(&t32), FunctionComparator::new(&t64));
    let (i32_token, i64_token) = (types::I32.index() as u64, types::I64.index() as u64);
    let mut checked = 0;
    for f in &fx.functions {
        let (k32, k64) = (c32.key(f), c64.key(f));
        assert_eq!(k32.len(), k64.len());
        let diffs: Vec<(u64, u64)> = k32
            .iter()
            .zip(&k64)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| (*a, *b))
            .collect();
        assert!(
            diffs.iter().all(|&d| d == (i32_token, i64_token)),
            "{}: keys differ in something other than i32 vs i64: {diffs:?}",
            FuncName::of_function(f)
        );
        // Each implicit-address global value the function reaches is encoded once.
        let implicit = reached_global_values(f)
            .into_iter()
            .filter(|&gv| {
                matches!(
                    f.global_values[gv],
                    GlobalValueData::VMContext
                        | GlobalValueData::Symbol { .. }
                        | GlobalValueData::DynScaleTargetConst { .. }
                )
            })
            .count();
        assert_eq!(diffs.len(), implicit, "{}", FuncName::of_function(f));
        checked += implicit;
    }
    assert!(
        checked >= 3,
        "the fixture reaches too few implicit addresses"
    );
    // The fixture really is 32-bit code: under x86_64 the verifier rejects its `load` and
    // `symbol_value` global values, whose addresses must be i64 there.
    let rejected = fx
        .functions
        .iter()
        .filter(|f| verify(f, DEFAULT_TRIPLE, &t64).is_err())
        .count();
    assert!(
        rejected >= 4,
        "only {rejected} functions need a 32-bit target"
    );
    // And the runner's own check of address types rejects them under a 64-bit pointer type.
    let rejected_by_check = fx
        .functions
        .iter()
        .filter(|f| check_address_types(f, types::I64).is_err())
        .count();
    assert_eq!(rejected, rejected_by_check);
}

/// What the rule cannot do: the pointer type is one constant per target, and it is pushed
/// right after a global value kind tag that already says "vmctx", "symbol" or
/// "dyn_scale_target_const". Two encodings that agree up to that tag both push it, so it is
/// never the first difference: every comparison and explanation is the same under a 32-bit
/// and a 64-bit triple. (This documents that the rule is vacuous for `compare`; it only
/// shows in `key`.)
#[test]
fn pointer_type_never_decides_a_comparison() {
    let t32 = TargetInfo::from_triple_str("i686-unknown-linux-gnu").unwrap();
    let t64 = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    let (c32, c64) = (FunctionComparator::new(&t32), FunctionComparator::new(&t64));
    let all: Vec<Function> = load_fixtures()
        .into_iter()
        .flat_map(|f| f.functions)
        .collect();
    for a in &all {
        for b in &all {
            assert_eq!(
                c32.compare(a, b),
                c64.compare(a, b),
                "{} vs {}",
                FuncName::of_function(a),
                FuncName::of_function(b)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// A long chain of blocks.

const CHAIN_BLOCKS: usize = 200_000;

/// `f(x)`: block0 jumps through `CHAIN_BLOCKS - 1` blocks, each adding its index to the
/// running value, and the last returns it. With `reverse`, blocks and values are created
/// and laid out in another order: the same function, numbered differently. `last` is the
/// constant the last block adds (to make a difference at the very end).
fn chain(reverse: bool, last: i64) -> Function {
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.push(AbiParam::new(types::I64));
    sig.returns.push(AbiParam::new(types::I64));
    let name = if reverse { "chain_b" } else { "chain_a" };
    let mut func = Function::with_name_signature(UserFuncName::testcase(name), sig);
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    let entry = b.create_block();
    let mut blocks = vec![entry; CHAIN_BLOCKS];
    let order: Vec<usize> = if reverse {
        (1..CHAIN_BLOCKS).rev().collect()
    } else {
        (1..CHAIN_BLOCKS).collect()
    };
    for &i in &order {
        blocks[i] = b.create_block();
    }
    b.append_block_params_for_function_params(entry);
    for &i in &order {
        b.append_block_param(blocks[i], types::I64);
    }
    // The entry block first (it must lead the layout), then the rest in `order`.
    for i in std::iter::once(0).chain(order.iter().copied()) {
        let block = blocks[i];
        b.switch_to_block(block);
        let x = b.block_params(block)[0];
        let k = b.ins().iconst(
            types::I64,
            if i == CHAIN_BLOCKS - 1 {
                last
            } else {
                i as i64
            },
        );
        let y = b.ins().iadd(x, k);
        if i + 1 < CHAIN_BLOCKS {
            b.ins().jump(blocks[i + 1], &[BlockArg::Value(y)]);
        } else {
            b.ins().return_(&[y]);
        }
    }
    b.seal_all_blocks();
    b.finalize(TargetFrontendConfig {
        default_call_conv: CallConv::SystemV,
        pointer_width: target_lexicon::PointerWidth::U64,
        page_size_align_log2: 12,
    });
    func
}

/// 200,000 blocks in a chain, against a copy numbered and laid out the other way round:
/// equal, same hash, no explanation, and no stack overflow on the test thread. A copy that
/// differs only in the last block's constant differs there.
#[test]
fn long_chain_is_compared_without_recursion() {
    let target = TargetInfo::from_triple_str(DEFAULT_TRIPLE).unwrap();
    let a = chain(false, (CHAIN_BLOCKS - 1) as i64);
    let b = chain(true, (CHAIN_BLOCKS - 1) as i64);
    let c = chain(true, 0);
    assert_eq!(a.layout.blocks().count(), CHAIN_BLOCKS);
    // The copy really is numbered differently: the entry block jumps to another block
    // number, with another value number as its parameter.
    let second = |f: &Function| {
        let entry = f.layout.entry_block().unwrap();
        let next = f.block_successors(entry).next().unwrap();
        (next, f.dfg.block_params(next)[0])
    };
    let ((a_block, a_param), (b_block, b_param)) = (second(&a), second(&b));
    assert_ne!(a_block, b_block);
    assert_ne!(a_param, b_param);
    let cmp = FunctionComparator::new(&target);
    assert_eq!(cmp.compare(&a, &b), Ordering::Equal);
    assert_eq!(cmp.compare(&b, &a), Ordering::Equal);
    assert_eq!(function_hash(&a), function_hash(&b));
    assert_eq!(explain(&target, &ByName, &a, &b), None);
    assert_ne!(cmp.compare(&a, &c), Ordering::Equal);
    assert_eq!(cmp.compare(&a, &c), cmp.compare(&c, &a).reverse());
    let d = explain(&target, &ByName, &a, &c).expect("a difference");
    assert_eq!(d.what, "immediate", "{d}");
    // The last block of the walk (chunk 0 is the header), at its constant.
    assert!(d.place.contains(&CHAIN_BLOCKS.to_string()), "{d}");
    assert!(
        d.left.contains("iconst.i64") && d.right.ends_with("iconst.i64 0"),
        "{d}"
    );
}
