//! What merged code costs at run time: calls through merge-similar's thunks against the
//! same functions unmerged, in nanoseconds per call.
//!
//! One program is built twice with cranelift-frontend, in a cranelift-jit `JITModule` for
//! the host (`opt_level=speed`, `preserve_frame_pointers=true`, no PIC): unmerged (every
//! function compiled as written) and through clif-merge's `MergingModule` with
//! merge-similar (its cost model off, so that every family below is merged whatever it
//! saves). Four families of four functions each, the members differing only in a constant
//! or a callee:
//!
//! - `affine`: `x * 3 + c` (System V). Merged: a register thunk (`mov $c, %esi; jmp body`)
//!   into one body that reads `c` from its second argument;
//! - `callee`: `leaf(x) + 1`, each member calling its own leaf (four functions of
//!   different shapes, not merged). Merged: a register thunk loading the leaf's address
//!   (`lea`), and a body that calls it with `call_indirect`;
//! - `loop`: `Σ i·c for i < x`, a loop (here x = 16): the thunk's cost next to a body
//!   that does some work;
//! - `tail6`: six `i64` arguments in the `tail` convention (wasmtime's), plus the constant:
//!   seven arguments do not fit the six argument registers, so the thunk grows the stack
//!   argument area and stores the constant there (written as bytes, no frame; before
//!   `1bf5635` it was CLIF that Cranelift compiled, with a frame). Called through one
//!   System V driver (`call_indirect` of the member's address, not merged), in both builds.
//!
//! - `aligned`: four members of two shapes, `mix_i(x)`, built as a program of their own
//!   and merged with alignment merging (cost model off): the two of each shape differ in
//!   one opcode (`bxor` against `isub`) and in a call to `note` that only the second has.
//!   Merged: two bodies with an identifier parameter, each member a register thunk passing
//!   its identifier; in the body the differing opcode is computed both ways and selected
//!   (`select` on the identifier), and the call runs behind a branch on it.
//!
//! Each iteration calls the four members once (for `tail6`, the driver once per member);
//! the tables give criterion's median divided by 4. Before measuring, the bench checks
//! that both builds return the same results and that the merged build has the shape
//! described (thunks written as bytes, one shared body per family).
//!
//! `cargo bench --bench runtime` (about 2 minutes); as a test (`cargo test --benches`) it
//! builds, checks and runs each benchmark once.

// The builders return `ModuleError` as the `Module` trait does.
#![allow(clippy::result_large_err)]

mod common;

use std::hint::black_box;
use std::time::Duration;

use clif_merge::merge::similar::SimilarOptions;
use clif_merge::{MergeOptions, MergingModule};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{AbiParam, Function, InstBuilder, Signature};
use cranelift_codegen::isa::{CallConv, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module, ModuleError};
use criterion::Criterion;

/// Members per family.
const MEMBERS: usize = 4;
/// Each member's constant.
const CONSTANTS: [i64; MEMBERS] = [11, 222, 3_333, 44_444];
/// The loop family's trip count.
const TRIPS: i64 = 16;

/// The ids of one build.
struct Program {
    affine: [FuncId; MEMBERS],
    callee: [FuncId; MEMBERS],
    leaves: [FuncId; MEMBERS],
    sums: [FuncId; MEMBERS],
    tail6: [FuncId; MEMBERS],
    driver: FuncId,
}

fn isa() -> OwnedTargetIsa {
    let mut flags = settings::builder();
    for (k, v) in [
        ("opt_level", "speed"),
        ("preserve_frame_pointers", "true"),
        ("is_pic", "false"),
    ] {
        flags.set(k, v).expect("a Cranelift setting");
    }
    cranelift_native::builder()
        .expect("the host is supported")
        .finish(settings::Flags::new(flags))
        .expect("the host ISA")
}

fn jit() -> JITModule {
    JITModule::new(JITBuilder::with_isa(isa(), default_libcall_names()))
}

/// `fn(i64 × params) -> i64` in `call_conv` (the host's default when `None`).
fn signature(m: &impl Module, params: usize, call_conv: Option<CallConv>) -> Signature {
    let mut sig = m.make_signature();
    if let Some(cc) = call_conv {
        sig.call_conv = cc;
    }
    sig.params = vec![AbiParam::new(I64); params];
    sig.returns = vec![AbiParam::new(I64)];
    sig
}

/// Declare `name` with `sig`, build its body with `body` and define it.
fn define<M: Module>(
    m: &mut M,
    name: &str,
    sig: Signature,
    body: impl FnOnce(&mut M, &mut Function, &mut FunctionBuilderContext),
) -> Result<FuncId, ModuleError> {
    let id = m.declare_function(name, Linkage::Export, &sig)?;
    let mut ctx = m.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    body(m, &mut ctx.func, &mut fctx);
    m.define_function(id, &mut ctx)?;
    Ok(id)
}

/// A builder on `func` positioned in its entry block, whose parameters it returns.
fn entry<'a>(
    func: &'a mut Function,
    fctx: &'a mut FunctionBuilderContext,
) -> (FunctionBuilder<'a>, Vec<cranelift_codegen::ir::Value>) {
    let mut b = FunctionBuilder::new(func, fctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let params = b.block_params(block).to_vec();
    (b, params)
}

fn build<M: Module>(m: &mut M) -> Result<Program, ModuleError> {
    let config = m.target_config();
    let one = |m: &M| signature(m, 1, None);
    let mut affine = Vec::new();
    let mut leaves = Vec::new();
    let mut callee = Vec::new();
    let mut sums = Vec::new();
    let mut tail6 = Vec::new();
    for (i, &c) in CONSTANTS.iter().enumerate() {
        affine.push(define(m, &format!("affine_{i}"), one(m), |_, f, fctx| {
            let (mut b, p) = entry(f, fctx);
            let three = b.ins().iconst(I64, 3);
            let y = b.ins().imul(p[0], three);
            let k = b.ins().iconst(I64, c);
            let z = b.ins().iadd(y, k);
            b.ins().return_(&[z]);
            b.finalize(config);
        })?);
        // Leaves of four different shapes: never similar to each other.
        leaves.push(define(m, &format!("leaf_{i}"), one(m), |_, f, fctx| {
            let (mut b, p) = entry(f, fctx);
            let x = p[0];
            let r = match i {
                0 => b.ins().imul(x, x),
                1 => b.ins().iadd(x, x),
                2 => {
                    let sq = b.ins().imul(x, x);
                    b.ins().bxor(x, sq)
                }
                _ => b.ins().bnot(x),
            };
            b.ins().return_(&[r]);
            b.finalize(config);
        })?);
        let leaf = leaves[i];
        callee.push(define(m, &format!("callee_{i}"), one(m), |m, f, fctx| {
            let leaf = m.declare_func_in_func(leaf, f);
            let (mut b, p) = entry(f, fctx);
            let call = b.ins().call(leaf, &[p[0]]);
            let r = b.inst_results(call)[0];
            let k = b.ins().iconst(I64, 1);
            let z = b.ins().iadd(r, k);
            b.ins().return_(&[z]);
            b.finalize(config);
        })?);
        sums.push(define(m, &format!("sum_{i}"), one(m), |_, f, fctx| {
            let (mut b, p) = entry(f, fctx);
            let n = p[0];
            let head = b.create_block();
            let step = b.create_block();
            let exit = b.create_block();
            b.append_block_param(head, I64);
            b.append_block_param(head, I64);
            b.append_block_param(exit, I64);
            let zero = b.ins().iconst(I64, 0);
            b.ins().jump(head, &[zero.into(), zero.into()]);
            b.switch_to_block(head);
            let (j, acc) = (b.block_params(head)[0], b.block_params(head)[1]);
            let more = b.ins().icmp(IntCC::SignedLessThan, j, n);
            b.ins().brif(more, step, &[], exit, &[acc.into()]);
            b.switch_to_block(step);
            let k = b.ins().iconst(I64, c);
            let t = b.ins().imul(j, k);
            let acc2 = b.ins().iadd(acc, t);
            let one = b.ins().iconst(I64, 1);
            let j2 = b.ins().iadd(j, one);
            b.ins().jump(head, &[j2.into(), acc2.into()]);
            b.switch_to_block(exit);
            let r = b.block_params(exit)[0];
            b.ins().return_(&[r]);
            b.seal_all_blocks();
            b.finalize(config);
        })?);
        let sig = signature(m, 6, Some(CallConv::Tail));
        tail6.push(define(m, &format!("tail6_{i}"), sig, |_, f, fctx| {
            let (mut b, p) = entry(f, fctx);
            let ab = b.ins().imul(p[0], p[1]);
            let cd = b.ins().imul(p[2], p[3]);
            let ef = b.ins().imul(p[4], p[5]);
            let s = b.ins().iadd(ab, cd);
            let s = b.ins().iadd(s, ef);
            let k = b.ins().iconst(I64, c);
            let z = b.ins().iadd(s, k);
            b.ins().return_(&[z]);
            b.finalize(config);
        })?);
    }
    // driver(f, x) = f(x, x+1, .., x+5) through a `tail` function pointer.
    let driver = define(m, "driver", signature(m, 2, None), |m, f, fctx| {
        let tail_sig = signature(m, 6, Some(CallConv::Tail));
        let sig_ref = f.import_signature(tail_sig);
        let (mut b, p) = entry(f, fctx);
        let mut args = vec![p[1]];
        for d in 1..6 {
            let k = b.ins().iconst(I64, d);
            args.push(b.ins().iadd(p[1], k));
        }
        let call = b.ins().call_indirect(sig_ref, p[0], &args);
        let r = b.inst_results(call)[0];
        b.ins().return_(&[r]);
        b.finalize(config);
    })?;
    let array = |v: Vec<FuncId>| -> [FuncId; MEMBERS] { v.try_into().expect("four members") };
    Ok(Program {
        affine: array(affine),
        callee: array(callee),
        leaves: array(leaves),
        sums: array(sums),
        tail6: array(tail6),
        driver,
    })
}

/// The `aligned` family (module docs): its members and the function the odd ones call.
fn build_aligned<M: Module>(m: &mut M) -> Result<[FuncId; MEMBERS], ModuleError> {
    let config = m.target_config();
    // `note` returns an `i32`: no member's signature, so alignment never pairs it.
    let mut note_sig = m.make_signature();
    note_sig.params = vec![AbiParam::new(I64)];
    note_sig.returns = vec![AbiParam::new(I32)];
    let note = define(m, "note", note_sig, |_, f, fctx| {
        let (mut b, p) = entry(f, fctx);
        let seven = b.ins().iconst(I64, 7);
        let y = b.ins().imul(p[0], seven);
        let r = b.ins().ireduce(I32, y);
        b.ins().return_(&[r]);
        b.finalize(config);
    })?;
    let mut mix = Vec::new();
    for i in 0..MEMBERS {
        let (shape, second) = (i / 2, i % 2 == 1);
        mix.push(define(
            m,
            &format!("mix_{i}"),
            signature(m, 1, None),
            |m, f, fctx| {
                let note = m.declare_func_in_func(note, f);
                let (mut b, p) = entry(f, fctx);
                let x = p[0];
                let a = match shape {
                    0 => b.ins().imul_imm_s(x, 3),
                    _ => {
                        let t = b.ins().imul_imm_s(x, 5);
                        let t = b.ins().rotl_imm_s(t, 7);
                        b.ins().bor(t, x)
                    }
                };
                let s = b.ins().sshr_imm_s(x, 2);
                let mut y = match second {
                    false => b.ins().bxor(a, s),
                    true => b.ins().isub(a, s),
                };
                if second {
                    let call = b.ins().call(note, &[y]);
                    let r = b.inst_results(call)[0];
                    let r = b.ins().uextend(I64, r);
                    y = b.ins().iadd(y, r);
                }
                let z = b.ins().iadd_imm_s(y, 7);
                b.ins().return_(&[z]);
                b.finalize(config);
            },
        )?);
    }
    Ok(mix.try_into().expect("four members"))
}

type Unary = extern "C" fn(i64) -> i64;
type Driver = extern "C" fn(*const u8, i64) -> i64;

/// The callable code of one build.
struct Code {
    aligned: [Unary; MEMBERS],
    affine: [Unary; MEMBERS],
    callee: [Unary; MEMBERS],
    sums: [Unary; MEMBERS],
    tail6: [*const u8; MEMBERS],
    driver: Driver,
}

/// The members `ids` of `jit`, callable.
fn unary(jit: &JITModule, ids: &[FuncId; MEMBERS]) -> [Unary; MEMBERS] {
    // SAFETY: each id is a finalized function of `jit` taking and returning one `i64`, in
    // the host's default calling convention (`extern "C"`).
    ids.map(|id| unsafe { std::mem::transmute::<*const u8, Unary>(jit.get_finalized_function(id)) })
}

/// The callable code of one build: `p` in `jit`, and the aligned family's `aligned` in
/// `aligned_jit` (a program of its own).
fn code(
    jit: &JITModule,
    p: &Program,
    aligned_jit: &JITModule,
    aligned: &[FuncId; MEMBERS],
) -> Code {
    Code {
        aligned: unary(aligned_jit, aligned),
        affine: unary(jit, &p.affine),
        callee: unary(jit, &p.callee),
        sums: unary(jit, &p.sums),
        // The `tail` functions are only called through `driver`, which calls them in their
        // own convention.
        tail6: p.tail6.map(|id| jit.get_finalized_function(id)),
        // SAFETY: `driver` is finalized, `(fn pointer, i64) -> i64` in the host's convention.
        driver: unsafe {
            std::mem::transmute::<*const u8, Driver>(jit.get_finalized_function(p.driver))
        },
    }
}

/// A JIT whose functions go through clif-merge: merge-similar with its cost model off (so
/// that every family is merged), with or without alignment merging.
fn merging_jit(alignment: bool) -> MergingModule<JITModule> {
    MergingModule::new(jit(), MergeOptions::default())
        .expect("a merger for the host")
        .with_merge_similar(SimilarOptions {
            cost_model: false,
            alignment,
            ..SimilarOptions::default()
        })
}

/// One family's four calls, summed.
fn run(code: &Code, family: &str, x: i64) -> i64 {
    let mut s = 0i64;
    match family {
        "affine" => code.affine.iter().for_each(|f| s = s.wrapping_add(f(x))),
        "aligned" => code.aligned.iter().for_each(|f| s = s.wrapping_add(f(x))),
        "callee" => code.callee.iter().for_each(|f| s = s.wrapping_add(f(x))),
        "loop" => code.sums.iter().for_each(|f| s = s.wrapping_add(f(x))),
        "tail6" => code
            .tail6
            .iter()
            .for_each(|&f| s = s.wrapping_add((code.driver)(f, x))),
        _ => unreachable!("a family of this bench"),
    }
    s
}

const FAMILIES: [(&str, i64); 5] = [
    ("affine", 5),
    ("callee", 5),
    ("loop", TRIPS),
    ("tail6", 5),
    ("aligned", 5),
];

fn main() {
    // Unmerged: every function compiled as written.
    let mut plain = jit();
    let p_plain = build(&mut plain).expect("the program builds");
    plain.finalize_definitions().expect("finalized");
    let mut plain_aligned = jit();
    let a_plain = build_aligned(&mut plain_aligned).expect("the program builds");
    plain_aligned.finalize_definitions().expect("finalized");
    let unmerged = code(&plain, &p_plain, &plain_aligned, &a_plain);

    // Merged: merge-similar (cost model off) then identical merging, in the JIT.
    let mut wrapped = merging_jit(false);
    let p_merged = build(&mut wrapped).expect("the program builds");
    let finalized = wrapped
        .finalize_definitions()
        .expect("merged and finalized");
    // The aligned family, merged by alignment in a program of its own (so that alignment
    // merging pairs nothing of the families above).
    let mut wrapped_aligned = merging_jit(true);
    let a_merged = build_aligned(&mut wrapped_aligned).expect("the program builds");
    let finalized_aligned = wrapped_aligned
        .finalize_definitions()
        .expect("merged and finalized");
    let merged = code(
        &finalized.module,
        &p_merged,
        &finalized_aligned.module,
        &a_merged,
    );
    let am = &finalized_aligned.merged;
    assert_eq!(
        am.summary.compiled,
        MEMBERS + 1 + 2,
        "aligned: two bodies with an identifier (and the four names, and note)"
    );
    for &id in &a_merged {
        assert!(
            am.compiled_code(id).is_none(),
            "aligned: every member is a register thunk written as bytes"
        );
    }

    // The merged build has the shape this bench measures.
    let m = &finalized.merged;
    let functions = 5 * MEMBERS + 1;
    assert_eq!(
        m.summary.compiled,
        functions + 4,
        "one shared body per family (affine, callee, loop, tail6)"
    );
    for (family, ids) in [
        ("affine", &p_merged.affine),
        ("callee", &p_merged.callee),
        ("loop", &p_merged.sums),
        ("tail6", &p_merged.tail6),
    ] {
        for &id in ids {
            assert!(
                m.compiled_code(id).is_none(),
                "{family}: every member is a thunk written as bytes"
            );
        }
    }
    for &id in p_merged.leaves.iter().chain([&p_merged.driver]) {
        assert!(
            m.compiled_code(id).is_some(),
            "leaves and the driver are kept"
        );
    }
    for (family, x) in FAMILIES {
        for x in [x, -7, 1_000_003] {
            assert_eq!(
                run(&unmerged, family, x),
                run(&merged, family, x),
                "{family}({x}): merged code returns what unmerged code returns"
            );
        }
    }

    let started = common::since();
    let summary_only = common::summary_only();
    if !summary_only {
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4))
            .configure_from_args();
        for (family, x) in FAMILIES {
            let mut g = c.benchmark_group(format!("runtime_{family}"));
            for (which, code) in [("unmerged", &unmerged), ("merged", &merged)] {
                g.bench_function(which, |b| b.iter(|| run(code, family, black_box(x))));
            }
            g.finish();
        }
        c.final_summary();
    }
    if !common::measuring() && !summary_only {
        return;
    }
    println!();
    println!("ns per call (criterion's median over 4 calls, its 95% interval in brackets):");
    println!(
        "  {:<8} {:>22} {:>22} {:>10} {:>8}",
        "family", "unmerged", "merged", "merged −", "ratio"
    );
    for (family, _) in FAMILIES {
        let est =
            |which: &str| common::criterion_estimate(&format!("runtime_{family}/{which}"), started);
        let (Some(u), Some(m)) = (est("unmerged"), est("merged")) else {
            println!("  {family}: no estimate (run `cargo bench --bench runtime`)");
            continue;
        };
        let per = |e: f64| e / MEMBERS as f64;
        let cell = |e: common::Estimate| {
            format!(
                "{:.2} [{:.2}–{:.2}]",
                per(e.median_ns),
                per(e.median_lo_ns),
                per(e.median_hi_ns)
            )
        };
        println!(
            "  {:<8} {:>22} {:>22} {:>+10.2} {:>7.2}×",
            family,
            cell(u),
            cell(m),
            per(m.median_ns - u.median_ns),
            m.median_ns / u.median_ns
        );
    }
}
