//! The program both examples compile: 35 functions of type `fn(i64) -> i64`, built with
//! cranelift-frontend the way a compiler would emit them.
//!
//! - equal: "generic instantiations" (`sum_to_*`, `hash_*`, `clamp_*`, marked
//!   `unnamed_addr` as rustc marks them), and `checksum_*`, equal once their callees fold;
//! - equal up to recursion: self-recursive copies (`fact_*`, `fib_*`) and a mutually
//!   recursive pair of pairs (`is_even_a`/`is_odd_a` and `is_even_b`/`is_odd_b`);
//! - different: by a constant (`hash_alt`, `fact_twice`, `add_*`, `poly_*`, and `pong2`,
//!   which makes `ping2` differ from `ping` through its callee only) or by an operation
//!   (`scale_add`, `scale_sub`).
//!
//! - calling the host: `via_host_a` and `via_host_b` (equal) call [`HOST_CALLBACK`], which
//!   the executable provides: it fails for a negative argument (a C++ exception in the AOT
//!   executable, a Rust panic in the JIT), and the failure unwinds through the merged code
//!   to be caught outside ([`FAILING_CALL`]).
//!
//! Every function is exported and called with each of [`INPUTS`]; both examples print one
//! line per call, `name(x) = y`, so that their outputs can be compared.

use std::collections::HashMap;
use std::io::Write;

use clif_merge::plugin::{FunctionMerger, Merged, PluginError};
use clif_merge::MergeOptions;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{AbiParam, FuncRef, Function, InstBuilder, UserFuncName, Value};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module, ModuleError};

/// The arguments every function is called with.
pub const INPUTS: [i64; 4] = [0, 1, 7, 20];

/// The host function `via_host_*` call: `x + 1`, and a failure (exception or panic) with
/// [`HOST_FAILURE`] for a negative `x`.
pub const HOST_CALLBACK: &str = "host_check";

/// What the host says when it fails.
pub const HOST_FAILURE: &str = "host_check: negative input";

/// The call whose host callback fails, made after the others, and caught by the caller.
pub const FAILING_CALL: (&str, i64) = ("via_host_b", -1);

/// The line both examples print when the failure of [`FAILING_CALL`] is caught.
pub fn caught_line() -> String {
    format!(
        "{}({}) failed in the host, caught outside: {HOST_FAILURE}",
        FAILING_CALL.0, FAILING_CALL.1
    )
}

/// One function of the program, built and not yet defined.
pub struct DemoFunction {
    /// Its symbol name.
    pub name: String,
    /// Its id in the module.
    pub id: FuncId,
    /// Its body.
    pub func: Function,
    /// Nobody compares its address (a folded copy may become an alias).
    pub unnamed_addr: bool,
}

/// What a function computes; callees are named.
enum Body {
    /// The sum of `i * i` for `i` in `0..n`.
    SumTo,
    /// A 64-bit mix with this multiplier.
    Hash(i64),
    /// `x` clamped to `0..=10`.
    Clamp,
    /// `sum(n) ^ hash(n)`.
    Checksum(&'static str, &'static str),
    /// `n <= 1 ? base : n * self(n - 1)`.
    Fact(i64),
    /// `n < 2 ? n : self(n - 1) + self(n - 2)`.
    Fib,
    /// `n == 0 ? at_zero : other(n - 1)`.
    Parity(i64, &'static str),
    /// `n == 0 ? 0 : other(n - 1) + step`.
    Ping(i64, &'static str),
    /// `x + c`.
    AddConst(i64),
    /// `x * 3 + 1` (`true`) or `x * 3 - 1` (`false`).
    Scale(bool),
    /// `5x² + 3x + c`.
    Poly(i64),
    /// `host(x) * 2`, the host being [`HOST_CALLBACK`].
    ViaHost,
}

impl Body {
    fn callees<'a>(&self, own: &'a str) -> Vec<&'a str> {
        match *self {
            Body::Checksum(a, b) => vec![a, b],
            Body::Fact(_) | Body::Fib => vec![own],
            Body::Parity(_, other) | Body::Ping(_, other) => vec![other],
            Body::ViaHost => vec![HOST_CALLBACK],
            _ => vec![],
        }
    }
}

fn program() -> Vec<(String, Body, bool)> {
    const MIX: i64 = 0xff51_afd7_ed55_8ccd_u64 as i64;
    const ALT: i64 = 0xc4ce_b9fe_1a85_ec53_u64 as i64;
    let mut p = Vec::new();
    let mut add =
        |name: &str, body: Body, unnamed_addr: bool| p.push((name.to_string(), body, unnamed_addr));
    for t in ["i64", "u64", "isize", "usize"] {
        add(&format!("sum_to_{t}"), Body::SumTo, true);
    }
    for t in ["i64", "u64", "usize"] {
        add(&format!("hash_{t}"), Body::Hash(MIX), true);
    }
    add("hash_alt", Body::Hash(ALT), true);
    for t in ["meters", "seconds", "percent"] {
        add(&format!("clamp_{t}"), Body::Clamp, true);
    }
    add(
        "checksum_i64",
        Body::Checksum("sum_to_i64", "hash_i64"),
        false,
    );
    add(
        "checksum_u64",
        Body::Checksum("sum_to_u64", "hash_u64"),
        false,
    );
    for name in ["fact_a", "fact_b", "fact_c"] {
        add(name, Body::Fact(1), false);
    }
    add("fact_twice", Body::Fact(2), false);
    add("fib_a", Body::Fib, false);
    add("fib_b", Body::Fib, false);
    // A mutually recursive pair, twice.
    add("is_even_a", Body::Parity(1, "is_odd_a"), false);
    add("is_odd_a", Body::Parity(0, "is_even_a"), false);
    add("is_even_b", Body::Parity(1, "is_odd_b"), false);
    add("is_odd_b", Body::Parity(0, "is_even_b"), false);
    // Another pair, and one that differs from it only in `pong2`'s constant.
    add("ping", Body::Ping(1, "pong"), false);
    add("pong", Body::Ping(3, "ping"), false);
    add("ping2", Body::Ping(1, "pong2"), false);
    add("pong2", Body::Ping(2, "ping2"), false);
    add("add_1", Body::AddConst(1), false);
    add("add_2", Body::AddConst(2), false);
    add("scale_add", Body::Scale(true), false);
    add("scale_sub", Body::Scale(false), false);
    add("poly_7", Body::Poly(7), false);
    add("poly_8", Body::Poly(8), false);
    add("via_host_a", Body::ViaHost, false);
    add("via_host_b", Body::ViaHost, false);
    p
}

/// Declare every function of the program in `module` (exported, `fn(i64) -> i64` in the
/// module's default calling convention) and build its body.
pub fn build<M: Module>(module: &mut M) -> Result<Vec<DemoFunction>, Box<ModuleError>> {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    let program = program();
    let mut ids = HashMap::new();
    for (name, _, _) in &program {
        let id = module.declare_function(name, Linkage::Export, &sig)?;
        ids.insert(name.clone(), id);
    }
    let host = module.declare_function(HOST_CALLBACK, Linkage::Import, &sig)?;
    ids.insert(HOST_CALLBACK.to_string(), host);
    let config = module.target_config();
    let mut ctx = FunctionBuilderContext::new();
    let mut functions = Vec::new();
    for (name, body, unnamed_addr) in program {
        let id = ids[&name];
        let mut func =
            Function::with_name_signature(UserFuncName::user(0, id.as_u32()), sig.clone());
        let callees: Vec<FuncRef> = body
            .callees(&name)
            .into_iter()
            .map(|callee| module.declare_func_in_func(ids[callee], &mut func))
            .collect();
        let mut b = FunctionBuilder::new(&mut func, &mut ctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let x = b.block_params(entry)[0];
        let result = emit_body(&mut b, &body, x, &callees);
        b.ins().return_(&[result]);
        b.seal_all_blocks();
        b.finalize(config);
        functions.push(DemoFunction {
            name,
            id,
            func,
            unnamed_addr,
        });
    }
    Ok(functions)
}

fn call(b: &mut FunctionBuilder, callee: FuncRef, arg: Value) -> Value {
    let call = b.ins().call(callee, &[arg]);
    b.inst_results(call)[0]
}

/// `cond ? then : otherwise()`, with `otherwise` emitted in its own block.
fn if_else(
    b: &mut FunctionBuilder,
    cond: Value,
    then: i64,
    otherwise: impl FnOnce(&mut FunctionBuilder) -> Value,
) -> Value {
    let (then_block, else_block, join) = (b.create_block(), b.create_block(), b.create_block());
    let result = b.append_block_param(join, I64);
    b.ins().brif(cond, then_block, &[], else_block, &[]);
    b.switch_to_block(then_block);
    let v = b.ins().iconst(I64, then);
    b.ins().jump(join, &[v.into()]);
    b.switch_to_block(else_block);
    let v = otherwise(b);
    b.ins().jump(join, &[v.into()]);
    b.switch_to_block(join);
    result
}

/// Emit `body` applied to `x` from the current block on; returns the result, in the block
/// the builder is left in.
fn emit_body(b: &mut FunctionBuilder, body: &Body, x: Value, callees: &[FuncRef]) -> Value {
    match *body {
        Body::SumTo => {
            let (i, acc) = (b.declare_var(I64), b.declare_var(I64));
            let zero = b.ins().iconst(I64, 0);
            b.def_var(i, zero);
            b.def_var(acc, zero);
            let (header, step, exit) = (b.create_block(), b.create_block(), b.create_block());
            b.ins().jump(header, &[]);
            b.switch_to_block(header);
            let iv = b.use_var(i);
            let more = b.ins().icmp(IntCC::SignedLessThan, iv, x);
            b.ins().brif(more, step, &[], exit, &[]);
            b.switch_to_block(step);
            let (iv, av) = (b.use_var(i), b.use_var(acc));
            let sq = b.ins().imul(iv, iv);
            let av = b.ins().iadd(av, sq);
            b.def_var(acc, av);
            let iv = b.ins().iadd_imm_s(iv, 1);
            b.def_var(i, iv);
            b.ins().jump(header, &[]);
            b.switch_to_block(exit);
            b.use_var(acc)
        }
        Body::Hash(multiplier) => {
            let s = b.ins().ushr_imm_u(x, 33);
            let h = b.ins().bxor(x, s);
            let m = b.ins().iconst(I64, multiplier);
            let h = b.ins().imul(h, m);
            let s = b.ins().ushr_imm_u(h, 29);
            b.ins().bxor(h, s)
        }
        Body::Clamp => {
            let (lo, hi) = (b.ins().iconst(I64, 0), b.ins().iconst(I64, 10));
            let below = b.ins().icmp(IntCC::SignedLessThan, x, lo);
            let v = b.ins().select(below, lo, x);
            let above = b.ins().icmp(IntCC::SignedGreaterThan, v, hi);
            b.ins().select(above, hi, v)
        }
        Body::Checksum(..) => {
            let sum = call(b, callees[0], x);
            let hash = call(b, callees[1], x);
            b.ins().bxor(sum, hash)
        }
        Body::Fact(base) => {
            let small = b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, x, 1);
            if_else(b, small, base, |b| {
                let n1 = b.ins().iadd_imm_s(x, -1);
                let r = call(b, callees[0], n1);
                b.ins().imul(x, r)
            })
        }
        Body::Fib => {
            let small = b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 2);
            let (then_block, else_block, join) =
                (b.create_block(), b.create_block(), b.create_block());
            let result = b.append_block_param(join, I64);
            b.ins().brif(small, then_block, &[], else_block, &[]);
            b.switch_to_block(then_block);
            b.ins().jump(join, &[x.into()]);
            b.switch_to_block(else_block);
            let n1 = b.ins().iadd_imm_s(x, -1);
            let n2 = b.ins().iadd_imm_s(x, -2);
            let r1 = call(b, callees[0], n1);
            let r2 = call(b, callees[0], n2);
            let sum = b.ins().iadd(r1, r2);
            b.ins().jump(join, &[sum.into()]);
            b.switch_to_block(join);
            result
        }
        Body::Parity(at_zero, _) => {
            let zero = b.ins().icmp_imm_s(IntCC::Equal, x, 0);
            if_else(b, zero, at_zero, |b| {
                let n1 = b.ins().iadd_imm_s(x, -1);
                call(b, callees[0], n1)
            })
        }
        Body::Ping(step, _) => {
            let zero = b.ins().icmp_imm_s(IntCC::Equal, x, 0);
            if_else(b, zero, 0, |b| {
                let n1 = b.ins().iadd_imm_s(x, -1);
                let r = call(b, callees[0], n1);
                b.ins().iadd_imm_s(r, step)
            })
        }
        Body::AddConst(c) => b.ins().iadd_imm_s(x, c),
        Body::ViaHost => {
            let y = call(b, callees[0], x);
            b.ins().imul_imm_s(y, 2)
        }
        Body::Scale(add) => {
            let t = b.ins().imul_imm_s(x, 3);
            let one = b.ins().iconst(I64, 1);
            if add {
                b.ins().iadd(t, one)
            } else {
                b.ins().isub(t, one)
            }
        }
        Body::Poly(c) => {
            let sq = b.ins().imul(x, x);
            let a = b.ins().imul_imm_s(sq, 5);
            let bx = b.ins().imul_imm_s(x, 3);
            let s = b.ins().iadd(a, bx);
            b.ins().iadd_imm_s(s, c)
        }
    }
}

/// Define every function in `module`: through the merger (`Some`), or each one directly
/// with `define_function`, as a compiler without the pass does (`None`).
pub fn define<M: Module>(
    module: &mut M,
    functions: Vec<DemoFunction>,
    merge: bool,
    define_merged: impl FnOnce(FunctionMerger, &mut M) -> Result<Merged, PluginError>,
) -> Result<Option<Merged>, Box<dyn std::error::Error>> {
    if !merge {
        for f in functions {
            let mut ctx = Context::for_function(f.func);
            module
                .define_function(f.id, &mut ctx)
                .map_err(|e| format!("defining {}: {e}", f.name))?;
        }
        return Ok(None);
    }
    let mut merger =
        FunctionMerger::new(module.isa(), MergeOptions::default()).expect("a supported target");
    for f in functions {
        if f.unnamed_addr {
            merger.set_unnamed_addr(f.id);
        }
        merger.add(f.id, f.func)?; // instead of module.define_function
    }
    Ok(Some(define_merged(merger, module)?))
}

/// Print what the pass did: the number of folded functions, and for each one the function
/// whose body it runs and what its name became.
pub fn print_summary(
    out: &mut impl Write,
    names: &[(String, FuncId)],
    merged: Option<&Merged>,
) -> std::io::Result<()> {
    writeln!(out, "functions: {}", names.len())?;
    let Some(merged) = merged else {
        return writeln!(out, "folded: 0 (merging off)");
    };
    let s = &merged.summary;
    writeln!(
        out,
        "folded: {} ({} aliases, {} thunks, {} copies; {} bodies compiled)",
        merged.plan().folded_count(),
        s.aliases,
        s.thunks,
        s.copied.len(),
        s.compiled
    )?;
    let name_of: HashMap<FuncId, &str> = names.iter().map(|(n, id)| (*id, n.as_str())).collect();
    // How each folded function was found; plan indices are in the order functions were
    // added, which is the order of `names`.
    let mut found_by = HashMap::new();
    for group in merged.plan().groups() {
        for (f, _) in &group.folded {
            found_by.insert(f.as_u32() as usize, group.found_by);
        }
    }
    for (i, (name, id)) in names.iter().enumerate() {
        let action = merged.action(*id);
        if let Some(how) = found_by.get(&i) {
            // A group of preemptible functions runs a local body no name stands for.
            let body = name_of
                .get(&merged.body_of(*id))
                .copied()
                .unwrap_or("their local body");
            let how = format!("{how:?}").to_lowercase();
            writeln!(
                out,
                "  {name} -> {body} ({}, found by {how})",
                action.as_str()
            )?;
        }
    }
    Ok(())
}
