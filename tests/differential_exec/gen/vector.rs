//! Vector families of the differential generator: helpers that compute on `i32x4` values,
//! as WebAssembly's SIMD code does in the functions wasmtime hands Cranelift.
//!
//! The other families compute on integers and floats (a vector splat and a lane read here
//! and there, inside one function), so nothing generated passed a
//! vector through merge-similar's thunks, selected between two vectors in an aligned body,
//! or carried a vector constant (`vconst`, a constant pool entry) or a shuffle mask into a
//! shared body. These families do. A member takes a vector and an integer and returns a
//! vector (`system_v`), or takes an integer and a vector and returns an integer (`tail`,
//! wasmtime's convention); it multiplies and mixes its vector with three integer constants
//! splatted to every lane, adds a vector constant, inserts the integer into a lane and
//! adds a shuffle of that with the vector argument, runs a chain of lane operations every
//! member shares (arithmetic, shifts by a scalar, shuffles, lane inserts and broadcasts,
//! `bitselect`, a round trip through a 16-byte stack slot), mixes the constants' value in
//! again (so whatever the chain forgot of it, the result depends on every constant), and
//! branches on the sign of lane 0 into two arms that meet in a block with a vector
//! parameter. Shuffles move whole lanes, as SSE2 can: a byte-wise mask would make
//! Cranelift call `__cranelift_x86_pshufb`, a libcall its embedder provides, on an x86_64
//! without SSSE3 (the harness's baseline).
//!
//! A family is one of two kinds, drawn per family:
//! - *swap*: every member permutes the three constants, so any two differ in at least two
//!   of them, and merge-similar gives the family one body with holes (a thunk or a body
//!   that passed or read its constants in another order computes another member's vector);
//! - *twin*: every member differs from the template in one site — an opcode of the
//!   constants' mix, the vector constant, an extra operation, an arm's opcode, the lane an
//!   `insertlane` writes or the lanes of a `shuffle` (immediates: the same opcode and
//!   types with another lane or mask) — which alignment merging turns into a `select` of
//!   two vectors on the identifier or keeps apart.
//!
//! Every member is free of traps and undefined behaviour: lane arithmetic wraps, shifts
//! take their amount modulo the lane width, and the stack slot is written before it is
//! read. The probes ([`probe`]) build the vector argument from the entry's two integers
//! (different lanes) and fold a vector result into an i64 that every lane changes.

use std::fmt::Write as _;

use super::rng::Rng;
use super::{Edit, HelperFamily, HelperSig, ModuleText};

/// The opcodes a twin may swap at the constants' mix and in the arms.
const MIX: [&str; 3] = ["iadd", "isub", "bxor"];

/// One member's choices: where a twin differs from its template.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Member {
    constants: [i32; 3],
    /// Opcodes (indices into [`MIX`]) of the two steps that mix in the constants.
    mix: [usize; 2],
    /// The lanes of the vector constant added after the mix.
    lanes: [i32; 4],
    /// An extra `iadd` of the integer argument's splat before the shared chain.
    extra: bool,
    /// The opcode (index into [`MIX`]) of the first arm.
    arm: usize,
    /// The lane the integer argument is inserted into, before the chain.
    lane: u8,
    /// The source lanes of a shuffle of the constants' value with the vector argument,
    /// before the chain ([`lane_mask`]).
    shuffle: [usize; 4],
}

/// A vector family numbered `f`, of signature `sig` ([`HelperSig::Vector`] or
/// [`HelperSig::VectorTail`]), its members added to `module`: two to four. Swap families
/// are also recorded among the module's constant-swap families (the harness requires
/// each to become one body with holes).
pub(super) fn vector_family(
    rng: &mut Rng,
    f: usize,
    sig: HelperSig,
    module: &mut ModuleText,
) -> HelperFamily {
    // Not preemptible: merge-similar leaves those to their definitions.
    let linkage = rng.pick(&["l", "d", "x"]);
    let chain_seed = rng.next_u64();
    let swap = rng.chance(50);
    let drawn = super::distinct_constants(rng, 3);
    let constants = [0, 1, 2].map(|k| drawn[k] as i32);
    let lanes = [0; 4].map(|_| rng.next_u64() as i32);
    let template = Member {
        constants,
        mix: [rng.below(MIX.len()), rng.below(MIX.len())],
        lanes,
        extra: false,
        arm: rng.below(MIX.len()),
        lane: rng.below(4) as u8,
        shuffle: lane_mask(rng),
    };
    let n = 2 + rng.below(3);
    let mut members = vec![template];
    while members.len() < n {
        let mut m = template;
        if swap {
            let order = super::shuffled(rng, 3);
            m.constants = [0, 1, 2].map(|k| constants[order[k]]);
        } else {
            match rng.below(6) {
                0 => {
                    let at = rng.below(2);
                    m.mix[at] = (m.mix[at] + 1 + rng.below(MIX.len() - 1)) % MIX.len();
                }
                1 => m.lanes[rng.below(4)] ^= 1 << rng.below(31),
                2 => m.extra = true,
                3 => m.arm = (m.arm + 1 + rng.below(MIX.len() - 1)) % MIX.len(),
                4 => m.lane = (m.lane + 1 + rng.below(3) as u8) % 4,
                _ => m.shuffle = lane_mask(rng),
            }
        }
        if !members.contains(&m) {
            members.push(m);
        }
    }
    let names: Vec<String> = (0..n).map(|m| format!("h{linkage}{f}_{m}")).collect();
    let texts: Vec<_> = members
        .iter()
        .zip(&names)
        .map(|(m, name)| (helper(name, sig, m, chain_seed), [false; Edit::ALL.len()]))
        .collect();
    module.family(&texts);
    if swap {
        module.constant_swap_families.push(names.clone());
    }
    module.vector_families.push((names.clone(), swap));
    HelperFamily {
        names,
        sig,
        level: 0,
    }
}

/// The source lanes of a shuffle of two `i32x4` values (0 to 3 the first's, 4 to 7 the
/// second's), as SSE2 shuffles whole lanes: all from one operand (`pshufd`), or the low two
/// from the first and the high two from the second (`shufps`). A byte-wise mask needs
/// SSSE3's `pshufb`, which Cranelift, without it, calls as a libcall
/// (`__cranelift_x86_pshufb`) the embedder provides.
fn lane_mask(rng: &mut Rng) -> [usize; 4] {
    let from = match rng.below(3) {
        0 => [0; 4],
        1 => [4; 4],
        _ => [0, 0, 4, 4],
    };
    from.map(|first| first + rng.below(4))
}

/// A function's text, its values numbered in order.
struct Text {
    body: String,
    next: u32,
}

impl Text {
    /// `v<next> = op`, and that value.
    fn def(&mut self, op: impl AsRef<str>) -> String {
        let v = format!("v{}", self.next);
        self.next += 1;
        writeln!(self.body, "    {v} = {}", op.as_ref()).unwrap();
        v
    }

    fn line(&mut self, text: impl AsRef<str>) {
        writeln!(self.body, "    {}", text.as_ref()).unwrap();
    }

    /// `shuffle` of the `i32x4` values `a` and `b` by source lanes `lanes`.
    fn shuffle(&mut self, a: &str, b: &str, lanes: [usize; 4]) -> String {
        let a = self.def(format!("bitcast.i8x16 little {a}"));
        let b = self.def(format!("bitcast.i8x16 little {b}"));
        let mask: Vec<String> = (0..16)
            .map(|byte| format!("{:02x}", lanes[byte / 4] * 4 + byte % 4))
            .rev()
            .collect();
        let s = self.def(format!("shuffle {a}, {b}, 0x{}", mask.concat()));
        self.def(format!("bitcast.i32x4 little {s}"))
    }

    /// An i64 that every lane of the `i32x4` value `v` changes: lanes 0 and 1 as the low
    /// and high half of one word, lanes 2 and 3 of another, the second multiplied by an
    /// odd constant and added (an exchange of lanes shows).
    fn fold_to_i64(&mut self, v: &str) -> String {
        let lanes: Vec<String> = (0..4)
            .map(|k| {
                let lane = self.def(format!("extractlane {v}, {k}"));
                self.def(format!("uextend.i64 {lane}"))
            })
            .collect();
        let shift = self.def("iconst.i64 32");
        let high = self.def(format!("ishl {}, {shift}", lanes[1]));
        let low = self.def(format!("bor {}, {high}", lanes[0]));
        let high = self.def(format!("ishl {}, {shift}", lanes[3]));
        let other = self.def(format!("bor {}, {high}", lanes[2]));
        let odd = self.def("iconst.i64 0x9E37_79B9_7F4A_7C15");
        let spread = self.def(format!("imul {other}, {odd}"));
        self.def(format!("iadd {low}, {spread}"))
    }
}

/// The text of member `m` named `name`.
fn helper(name: &str, sig: HelperSig, m: &Member, chain_seed: u64) -> String {
    let (vector, int) = match sig {
        HelperSig::Vector => ("v0", "v1"),
        HelperSig::VectorTail => ("v1", "v0"),
        other => unreachable!("{other:?} is not a vector signature"),
    };
    let mut t = Text {
        body: String::new(),
        next: 2,
    };
    let narrow = t.def(format!("ireduce.i32 {int}"));
    let spread = t.def(format!("splat.i32x4 {narrow}"));
    let splat = |t: &mut Text, c: i32| {
        let c = t.def(format!("iconst.i32 {c}"));
        t.def(format!("splat.i32x4 {c}"))
    };
    let [c0, c1, c2] = m.constants;
    let s0 = splat(&mut t, c0);
    let scaled = t.def(format!("imul {vector}, {s0}"));
    let s1 = splat(&mut t, c1);
    let mixed = t.def(format!("{} {scaled}, {s1}", MIX[m.mix[0]]));
    let s2 = splat(&mut t, c2);
    let other = t.def(format!("imul {spread}, {s2}"));
    let mixed = t.def(format!("{} {mixed}, {other}", MIX[m.mix[1]]));
    let constant = t.def("vconst.i32x4 const0");
    let mut keep = t.def(format!("iadd {mixed}, {constant}"));
    if m.extra {
        keep = t.def(format!("iadd {keep}, {spread}"));
    }
    let inserted = t.def(format!("insertlane {keep}, {narrow}, {}", m.lane));
    let shuffled = t.shuffle(&inserted, vector, m.shuffle);
    keep = t.def(format!("iadd {keep}, {shuffled}"));
    let mut last = keep.clone();

    // The chain every member shares.
    let mut rng = Rng::new(chain_seed);
    let mut pool = vec![vector.to_string(), spread.clone(), last.clone()];
    let mut slot = false;
    for _ in 0..4 + rng.below(5) {
        // Never `last` itself (`isub x, x` and the like would forget the constants).
        let other = pool[rng.below(pool.len() - 1)].clone();
        last = match rng.below(8) {
            0 => {
                let op = rng.pick(&["iadd", "isub", "imul", "bxor", "band", "bor"]);
                t.def(format!("{op} {last}, {other}"))
            }
            1 => {
                let op = rng.pick(&["ishl", "ushr", "sshr"]);
                let amount = t.def(format!("iconst.i32 {}", 1 + rng.below(40)));
                t.def(format!("{op} {last}, {amount}"))
            }
            2 => {
                let lanes = lane_mask(&mut rng);
                t.shuffle(&last, &other, lanes)
            }
            3 => t.def(format!("insertlane {last}, {narrow}, {}", rng.below(4))),
            4 => {
                let lane = t.def(format!("extractlane {last}, {}", rng.below(4)));
                let broadcast = t.def(format!("splat.i32x4 {lane}"));
                t.def(format!("bxor {broadcast}, {other}"))
            }
            5 => {
                let op = rng.pick(&["iabs", "ineg", "bnot"]);
                t.def(format!("{op} {last}"))
            }
            6 => t.def(format!("bitselect {other}, {last}, {spread}")),
            _ => {
                slot = true;
                let at = t.def("stack_addr.i64 ss0");
                t.line(format!("store notrap aligned {last}, {at}"));
                let back = t.def(format!("load.i32x4 notrap aligned {at}"));
                t.def(format!("iadd {back}, {other}"))
            }
        };
        pool.push(last.clone());
    }

    // Whatever the chain kept of it, the constants' value reaches the branch and the
    // result whole.
    last = t.def(format!("bxor {last}, {keep}"));

    // Two arms on the sign of lane 0, meeting in a block with a vector parameter.
    let signs = t.def(format!("vhigh_bits.i8 {last}"));
    let one = t.def("iconst.i8 1");
    let negative = t.def(format!("band {signs}, {one}"));
    t.line(format!("brif {negative}, block1, block2"));
    t.body.push_str("\nblock1:\n");
    let first = t.def(format!("{} {last}, {spread}", MIX[m.arm]));
    t.line(format!("jump block3({first})"));
    t.body.push_str("\nblock2:\n");
    let second = t.def(format!("band {last}, {vector}"));
    t.line(format!("jump block3({second})"));
    let joined = format!("v{}", t.next);
    t.next += 1;
    writeln!(t.body, "\nblock3({joined}: i32x4):").unwrap();
    let joined = t.def(format!("iadd {joined}, {keep}"));
    let result = match sig {
        HelperSig::VectorTail => {
            let folded = t.fold_to_i64(&joined);
            t.def(format!("iadd {folded}, {int}"))
        }
        _ => joined,
    };
    t.line(format!("return {result}"));

    let [a, b] = sig.params();
    let lanes: String = m
        .lanes
        .iter()
        .rev()
        .map(|l| format!("{:08x}", *l as u32))
        .collect();
    let slot = if slot {
        "    ss0 = explicit_slot 16, align = 16\n"
    } else {
        ""
    };
    format!(
        "function %{name}{} {{\n{slot}    const0 = 0x{lanes}\n\nblock0(v0: {a}, v1: {b}):\n{}}}\n\n",
        sig.text(),
        t.body
    )
}

/// The probe `probe` of vector helper `name`: an entry that calls it with a vector whose
/// lanes hold its first argument and (lane 1) its second, narrowed to `i32`, and the
/// first argument as the integer, and returns the result (a vector folded into an i64).
pub(super) fn probe(probe: &str, name: &str, sig: HelperSig) -> String {
    let colocated = if name.starts_with("hp") {
        ""
    } else {
        "colocated "
    };
    let mut t = Text {
        body: String::new(),
        next: 3,
    };
    let a = t.def("ireduce.i32 v0");
    let b = t.def("ireduce.i32 v1");
    let spread = t.def(format!("splat.i32x4 {a}"));
    let vector = t.def(format!("insertlane {spread}, {b}, 1"));
    let result = match sig {
        HelperSig::Vector => {
            let r = t.def(format!("call fn0({vector}, v0)"));
            t.fold_to_i64(&r)
        }
        HelperSig::VectorTail => t.def(format!("call fn0(v0, {vector})")),
        other => unreachable!("{other:?} is not a vector signature"),
    };
    format!(
        "function %{probe}{} {{\n    fn0 = {colocated}%{name}{}\n\n\
         block0(v0: i64, v1: i64, v2: i64):\n{}    return {result}\n}}\n\n",
        super::ENTRY_SIG,
        sig.text(),
        t.body
    )
}
