//! Random modules of CLIF made of *families*: functions generated from one template, as
//! exact copies, copies with other value numbers or another block layout, and copies that
//! differ in exactly one integer or float constant, memory offset, callee or address
//! taken, opcode, condition code, memory flag, alias region number or branch order. The
//! pass must fold the first kinds and keep the last apart (or share a body with
//! parameters, or give them one body with the weaker memory flags, under merge-similar),
//! and every one must still compute what it computed.
//!
//! *Near-twin* families (issue #14's alignment merging) come after the others, from an RNG
//! of their own, so a seed's module is the one it gave before they existed with these
//! families appended. Their members differ from the template by one to three *structural
//! edits* ([`Edit`]), as `bench/README.md` §9 found near-twins in real code: an extra pure
//! instruction whose result a shared instruction uses, an extra store to the buffer or call
//! of a helper, a missing instruction, an operation at another width or extended by the
//! other opcode, signed for unsigned division, another branch condition, another block
//! argument to a join or a loop header, an extra instruction in a loop body, an extra
//! block, an entry that reads its frame where its template does not, or a binary
//! operation with its operands exchanged (commutative or not). Their templates
//! also have what only they have: a counted loop, a branch on a comparison, signed
//! division. [`Program::near_twin_pairs`] counts the pairs of members that differ by an
//! edit, [`Program::edits`] the members each kind changed.
//!
//! Then *constant-swap* families of helpers, from an RNG of their own: members that are
//! one template with its three integer constants permuted, every member another
//! permutation, so that any two differ in at least two constants. Each constant reaches the
//! result in its own way (`((a * c0) + c1) ^ (b * c2)`, added to a chain of operations all
//! members share, which makes a shared body pay), so merge-similar gives the family one
//! body with a parameter per constant, and a thunk that passed its constants in another
//! order, or a body that read its parameters in another order, would compute what another
//! member (or none) computes. Other families rarely give a group two constant holes whose
//! exchange changes a printed result. [`Program::constant_swap_families`] names their
//! members, and the harness requires each family to become one body with holes. The
//! *wide* ones, again from an RNG of their own and after those, are `tail` helpers with
//! seven constants (each further one mixed in as `(x * ck) ^ a`, or `b`): with their two
//! parameters more than the six argument registers of `tail` on x86_64 and aarch64, so
//! merge-similar's thunks store up to three constants on the stack (a position every
//! member's permutation leaves in place is no hole), in an area they grow below their own
//! ([`Program::wide_constant_swap_families`]). Then, from an RNG of their own, the
//! *vector* families ([`vector`]): helpers on `i32x4` values whose members permute three
//! constants (holes beside a vector argument) or differ in one site (alignment merging's
//! `select` between two vectors) ([`Program::vector_families`]).
//!
//! Last come the *probes*, again from RNGs of their own: one entry per member of every
//! helper family, which calls it on the entry's first two arguments (narrowed to its
//! parameter types) and returns its result (widened to i64). Helpers are otherwise
//! reached only through the calls of generated functions, whose results are often unused
//! and whose callers are often never called, so a helper merged behind a thunk that passed
//! a wrong value (a register thunk writing the wrong argument register) could compute a
//! wrong result nobody printed. The *tail probes* (`%t<family>_<member>`, for the `tail`
//! helpers) come first, as they did before the others had probes; then the *system_v
//! probes* (`%s<family>_<member>`, every other helper: i64, i32, f64 and i16/i8
//! parameters), then the *vector probes* (`%v<family>_<member>`, for the vector helpers).
//! [`Program::tail_probes`], [`Program::system_v_probes`] and [`Program::vector_probes`]
//! count them.
//!
//! Every generated function is free of traps and undefined behaviour on every input:
//! divisors are forced odd (and positive where division is signed), loops run at most 7
//! times, recursion depth is masked, memory is the 256-byte buffer the
//! harness passes (offsets 0..=232; 240 and 248 hold the frame observations) or a stack
//! slot written before it is read, and float-to-int conversions saturate.
//!
//! *Entries*, called by the harness, all have the signature `(i64 a, i64 b, i64 mem) -> i64`
//! (`system_v`). *Helpers* have other signatures (narrow integers, floats, the `tail`
//! convention), call lower helpers (now and then through the helper's address:
//! `func_addr`, `call_indirect`), and recurse: through `call`, `try_call`, `return_call`
//! or each other. Entries of some families take addresses (`func_addr` of another entry or
//! of themselves, by `func_addr` or by `symbol_value` of the function's symbol), compare
//! them with their arguments, or return them; others read their return address, frame
//! pointer and stack pointer. Some entries tag every access to the buffer with one alias
//! region (only the buffer's accesses: a region never meets another's memory). Some
//! accesses to the buffer are atomic (read-modify-writes of every operation, compare-and-
//! swaps, atomic loads and stores; on aarch64 without LSE each is a load-exclusive/
//! store-exclusive loop, which the breakpoint stepper takes as one step).

use std::fmt::Write as _;

#[path = "../detector_gen/rng.rs"]
#[allow(dead_code)]
mod rng;

use rng::Rng;

mod vector;

/// This generator's RNG for `seed`: the detector generator's, seeded as this generator
/// always was (so every seed's module is the same).
fn rng_for(seed: u64) -> Rng {
    Rng::new(seed ^ 0x9E37_79B9_7F4A_7C15 ^ 0x2545_F491_4F6C_DD1D)
}

/// What the harness must know about an entry.
pub mod flags {
    /// The result depends on whether two function addresses are equal.
    pub const ADDRESS_SENSITIVE: u32 = 1;
    /// The result is a function address: the harness prints the symbols it equals.
    pub const ADDRESS_RESULT: u32 = 2;
    /// Stores its return address at `mem + 248`.
    pub const READS_RETURN_ADDRESS: u32 = 4;
    /// Stores its frame pointer at `mem + 240`.
    pub const READS_FRAME_POINTER: u32 = 8;
}

/// One argument of a call from the harness.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Int(i64),
    /// The address of entry `i`.
    Address(usize),
}

/// An entry function and what the harness must know about it.
pub struct Entry {
    pub name: String,
    pub flags: u32,
}

/// A generated module.
pub struct Program {
    pub clif: String,
    pub entries: Vec<Entry>,
    /// (entry index, a, b)
    pub inputs: Vec<(usize, Arg, Arg)>,
    pub functions: usize,
    /// Pairs of functions of one family (what the pass had to tell equal or apart).
    pub family_pairs: usize,
    /// Pairs of members of a near-twin family that differ and where at least one carries a
    /// structural edit ([`Edit`]): what alignment merging may merge.
    pub near_twin_pairs: usize,
    /// Members each structural edit changed, by [`Edit::ALL`]'s order.
    pub edits: [usize; Edit::ALL.len()],
    /// Entries that call one `tail` helper and return its result (one per member of every
    /// `tail` helper family).
    pub tail_probes: usize,
    /// Entries that call one `system_v` helper and return its result (one per member of
    /// every other helper family), after the tail probes.
    pub system_v_probes: usize,
    /// The members of every constant-swap family (helpers that differ only by a
    /// permutation of their constants), which merge-similar must give one body with holes.
    pub constant_swap_families: Vec<Vec<String>>,
    /// Those of them that are wide (`tail` helpers with more constants than the argument
    /// registers take), whose members merge-similar makes thunks that grow the stack
    /// argument area.
    pub wide_constant_swap_families: Vec<Vec<String>>,
    /// The members of every vector family (helpers on `i32x4` values), and whether the
    /// family is a swap family (members that permute their constants, also among
    /// [`Self::constant_swap_families`]) rather than a twin family (members that differ in
    /// one site, for alignment merging).
    pub vector_families: Vec<(Vec<String>, bool)>,
    /// Entries that call one vector helper and return its result (one per member of every
    /// vector family), after the system_v probes.
    pub vector_probes: usize,
    /// Globs and linkages, as the command line takes them.
    pub linkages: Vec<(String, String)>,
    /// Cranelift settings beyond the harness's own (`NAME=VALUE`, as `--set` takes them),
    /// for every build, merged or not.
    pub settings: Vec<String>,
    /// The one architecture the module is for (a triple's first part, `x86_64`), when its
    /// code is not for every architecture (`windows_fastcall` functions); `None`: all.
    pub architecture: Option<String>,
    /// What a fixture states merging does to it ([`super::stated_merges`]); none for a
    /// generated program, whose families the tests check by other means.
    pub stated_merges: Vec<super::stated_merges::Statement>,
}

impl Program {
    /// The linkage `--linkage` gives function `name` (without `%`): the last glob that
    /// matches decides, as on the command line (one that ends with `*`, or a whole name);
    /// `export` when none does.
    pub fn linkage_of(&self, name: &str) -> &str {
        self.linkages
            .iter()
            .rev()
            .find(|(glob, _)| match glob.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == glob,
            })
            .map_or("export", |(_, linkage)| linkage)
    }

    /// Make every `tail` function reachable only by direct calls, as Cranelift itself needs
    /// where a `tail` function is no landing pad ([`super::Variant::tail_functions_unlanded`]:
    /// aarch64 with `use_bti` and signed return addresses, where Cranelift 0.135 starts one
    /// that signs with `paciaz` or `pacibz` instead of `bti c`). A callee that is not
    /// `colocated` (the preemptible helpers, `%hp…`) is called through a register (loaded
    /// from the GOT with PIC, an absolute address without), and a shared library's callers
    /// reach a function it exports (the preemptible helpers, and those of default linkage)
    /// through the PLT's `br x17`: unmerged code stops there with an illegal instruction,
    /// whatever clif-merge does. Calls of `tail` functions become `colocated`, and those not
    /// local become hidden; nothing an entry computes changes.
    pub fn call_tail_functions_directly(&mut self) {
        let tail_functions: Vec<String> = self
            .clif
            .lines()
            .filter_map(|l| l.strip_prefix("function %"))
            .filter(|rest| rest.ends_with(" tail {"))
            .filter_map(|rest| Some(rest[..rest.find('(')?].to_string()))
            .collect();
        // `    fnN = %NAME(..) -> .. tail`, the declaration of a callee.
        let direct = |line: &str| -> Option<String> {
            let (head, callee) = line.split_once(" = %")?;
            let number = head.trim_start().strip_prefix("fn")?;
            let name = &callee[..callee.find('(')?];
            (number.bytes().all(|b| b.is_ascii_digit()) && tail_functions.iter().any(|f| f == name))
                .then(|| format!("{head} = colocated %{callee}"))
        };
        let mut clif = String::with_capacity(self.clif.len() + 1024);
        for line in self.clif.lines() {
            clif.push_str(&direct(line).unwrap_or_else(|| line.to_string()));
            clif.push('\n');
        }
        self.clif = clif;
        let hidden: Vec<(String, String)> = tail_functions
            .into_iter()
            .filter(|f| self.linkage_of(f) != "local")
            .map(|f| (f, "hidden".to_string()))
            .collect();
        self.linkages.extend(hidden);
    }
}

/// Helper signatures: parameter types, return type, calling convention.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum HelperSig {
    I64,
    I32,
    F64,
    Narrow,
    Tail,
    /// `(i32x4, i64) -> i32x4`: vector families only, never drawn from [`Self::ALL`].
    Vector,
    /// `(i64, i32x4) -> i64 tail`: vector families only.
    VectorTail,
}

impl HelperSig {
    const ALL: [HelperSig; 5] = [
        HelperSig::I64,
        HelperSig::I32,
        HelperSig::F64,
        HelperSig::Narrow,
        HelperSig::Tail,
    ];
    fn params(self) -> [&'static str; 2] {
        match self {
            HelperSig::I64 | HelperSig::Tail => ["i64", "i64"],
            HelperSig::I32 => ["i32", "i32"],
            HelperSig::F64 => ["f64", "i64"],
            HelperSig::Narrow => ["i16", "i8"],
            HelperSig::Vector => ["i32x4", "i64"],
            HelperSig::VectorTail => ["i64", "i32x4"],
        }
    }
    fn ret(self) -> &'static str {
        match self {
            HelperSig::I64 | HelperSig::Tail => "i64",
            HelperSig::I32 => "i32",
            HelperSig::F64 => "f64",
            HelperSig::Narrow => "i16",
            HelperSig::Vector => "i32x4",
            HelperSig::VectorTail => "i64",
        }
    }
    fn conv(self) -> &'static str {
        match self {
            HelperSig::Tail | HelperSig::VectorTail => "tail",
            HelperSig::I64
            | HelperSig::I32
            | HelperSig::F64
            | HelperSig::Narrow
            | HelperSig::Vector => "system_v",
        }
    }
    fn is_vector(self) -> bool {
        matches!(self, HelperSig::Vector | HelperSig::VectorTail)
    }
    fn text(self) -> String {
        let [a, b] = self.params();
        format!("({a}, {b}) -> {} {}", self.ret(), self.conv())
    }
}

const ENTRY_SIG: &str = "(i64, i64, i64) -> i64 system_v";

/// How a recursive helper calls itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recursion {
    None,
    Call,
    TryCall,
    ReturnCall,
    /// Calls its partner (the next member's counterpart), which calls it back.
    PingPong,
}

/// What kind of entry a family holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum EntryKind {
    Plain,
    /// Compares `a` with the address of another entry.
    AddressCompare,
    /// Compares `a` with its own address ("is this pointer me?").
    SelfAddress,
    /// Returns the address of one of two entries.
    AddressReturn,
    /// Stores its return address and frame pointer, compares its stack pointer.
    FrameReader,
}

/// The one place where a variant differs from its family's template.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Site {
    Const,
    Offset,
    Callee,
    Opcode,
    Cond,
    Flags,
    Branch,
    /// A float constant.
    Float,
    /// The number (`user_id`) of the buffer's alias region.
    Region,
}

const SITES: [Site; 9] = [
    Site::Const,
    Site::Offset,
    Site::Callee,
    Site::Opcode,
    Site::Cond,
    Site::Flags,
    Site::Branch,
    Site::Float,
    Site::Region,
];

/// A structural edit: where a member of a near-twin family differs from its template by
/// more than an operand, as alignment merging must handle (`bench/README.md` §9's classes).
/// Each kind has *points* in the template (counted like sites); an edit at point `n` changes
/// the member there and nowhere else, and every later instruction is written as the
/// template's (the member's RNG draws are the template's).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Edit {
    /// An extra pure instruction whose result replaces the first operand of the next
    /// (shared) instruction.
    ExtraPure,
    /// An extra store of a value to the buffer.
    ExtraStore,
    /// An extra call of a helper, its result mixed into the next instruction's operand.
    ExtraCall,
    /// The template's binary operation is missing: its first operand stands for its result.
    Missing,
    /// A narrow computation done at the next width (`i32` becomes `i64`: no extension).
    Width,
    /// `uextend` where the template has `sextend`.
    Extend,
    /// Another division opcode (`sdiv` for `udiv`, `srem` for `urem`, and back); the
    /// divisor is positive and odd, so neither traps.
    Division,
    /// Another condition for the branch that ends the straight-line part.
    BranchCond,
    /// Another value passed to the block where the arms join.
    BlockArg,
    /// An extra instruction (pure, or a store) inside a loop body.
    LoopExtra,
    /// Another value passed into the loop header: another start value or trip count.
    LoopArg,
    /// An extra block, entered on the low bit of a value, that changes the value (and
    /// stores it, in an entry): a block the template lacks.
    ExtraBlock,
    /// The straight-line part goes on in a block of its own, entered by a jump: the same
    /// computation in one block more, whose values the blocks after it read (in a body
    /// merged with unlike blocks, through the dominance repair).
    SplitBlock,
    /// The entry stores its return address and frame pointer (the template does not).
    ReadsFrame,
    /// The template's binary operation with its two operands exchanged: the same result
    /// when it commutes (`iadd`, `imul`, `band`, ...), another when not (`isub`).
    Commuted,
}

impl Edit {
    pub const ALL: [Edit; 15] = [
        Edit::ExtraPure,
        Edit::ExtraStore,
        Edit::ExtraCall,
        Edit::Missing,
        Edit::Width,
        Edit::Extend,
        Edit::Division,
        Edit::BranchCond,
        Edit::BlockArg,
        Edit::LoopExtra,
        Edit::LoopArg,
        Edit::ExtraBlock,
        Edit::SplitBlock,
        Edit::ReadsFrame,
        Edit::Commuted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Edit::ExtraPure => "extra-pure",
            Edit::ExtraStore => "extra-store",
            Edit::ExtraCall => "extra-call",
            Edit::Missing => "missing",
            Edit::Width => "width",
            Edit::Extend => "extend",
            Edit::Division => "division",
            Edit::BranchCond => "branch-cond",
            Edit::BlockArg => "block-arg",
            Edit::LoopExtra => "loop-extra",
            Edit::LoopArg => "loop-arg",
            Edit::ExtraBlock => "extra-block",
            Edit::SplitBlock => "split-block",
            Edit::ReadsFrame => "reads-frame",
            Edit::Commuted => "commuted",
        }
    }

    fn index(self) -> usize {
        Edit::ALL.iter().position(|&e| e == self).unwrap()
    }
}

/// The most structural edits one member carries.
const MAX_EDITS: usize = 3;

/// How one member of a family is written.
#[derive(Clone, Copy, Debug)]
struct Variant {
    /// Value numbers: `n * stride + shift`.
    stride: u32,
    shift: u32,
    /// Non-entry blocks written in reverse order.
    reverse_layout: bool,
    /// The site that differs (kind, its ordinal among sites of that kind).
    mutation: Option<(Site, usize)>,
    /// A member of a near-twin family: the template has the constructs only those
    /// families have (loops, branch conditions, signed division).
    twin: bool,
    /// The structural edits (kind, its ordinal among points of that kind).
    edits: [Option<(Edit, usize)>; MAX_EDITS],
}

impl Variant {
    const SAME: Variant = Variant {
        stride: 1,
        shift: 0,
        reverse_layout: false,
        mutation: None,
        twin: false,
        edits: [None; MAX_EDITS],
    };
    const TWIN: Variant = Variant {
        twin: true,
        ..Variant::SAME
    };
}

const BINOPS: [&str; 6] = ["iadd", "isub", "imul", "bxor", "band", "bor"];
const CONDS: [&str; 10] = [
    "eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge",
];
const MEMFLAGS: [&str; 4] = ["", " notrap", " aligned", " notrap aligned"];
/// Loads may also be `can_move`: every access to the buffer is safe anywhere.
const LOAD_MEMFLAGS: [&str; 6] = [
    "",
    " notrap",
    " aligned",
    " notrap aligned",
    " notrap can_move",
    " aligned can_move",
];
const FLOPS: [&str; 3] = ["fadd", "fsub", "fmul"];
/// The flags of atomic accesses: every access to the buffer is aligned and safe.
const ATOMIC_MEMFLAGS: [&str; 6] = [
    "",
    " little",
    " notrap",
    " aligned",
    " notrap aligned",
    " little aligned user3",
];
/// The kinds of points with draws of their own ([`Writer::draws_of_their_own`]): accesses
/// that may be followed by an atomic one, calls that may be indirect.
const ATOMIC_DRAWS: u64 = 0xA7;
const INDIRECT_CALL_DRAWS: u64 = 0xCA;
const ATOMIC_RMW_OPS: [&str; 11] = [
    "add", "sub", "and", "nand", "or", "xor", "xchg", "umin", "umax", "smin", "smax",
];

/// Writes one function of a family.
struct Writer<'a> {
    rng: Rng,
    /// The template's seed (each structural edit draws its content from its own RNG).
    seed: u64,
    variant: Variant,
    counts: [usize; 9],
    /// Points of each structural edit kind met so far.
    edit_points: [usize; Edit::ALL.len()],
    /// The structural edits that changed this function.
    applied: [bool; Edit::ALL.len()],
    next_value: u32,
    next_global: u32,
    /// The alias region of the buffer's accesses (` region0`), if the template has one.
    region: &'static str,
    next_block: u32,
    blocks: Vec<(u32, String)>,
    decls: Vec<String>,
    callees: Vec<String>,
    sigs: Vec<String>,
    name: String,
    helpers: &'a [HelperFamily],
    /// The level of helpers this function may call (those below it).
    level: usize,
    /// Accesses to the buffer met so far, each of which may be followed by an atomic one
    /// ([`Writer::atomic_access`]).
    atomics: u64,
    /// Calls of helpers met so far, each of which may be indirect ([`Writer::call_helper`]).
    helper_calls: u64,
}

/// A helper family already generated: its members' names, signature and level.
struct HelperFamily {
    names: Vec<String>,
    sig: HelperSig,
    level: usize,
}

impl<'a> Writer<'a> {
    fn new(
        seed: u64,
        variant: Variant,
        name: &str,
        helpers: &'a [HelperFamily],
        level: usize,
    ) -> Self {
        Writer {
            rng: rng_for(seed),
            seed,
            variant,
            counts: [0; 9],
            edit_points: [0; Edit::ALL.len()],
            applied: [false; Edit::ALL.len()],
            next_value: 0,
            next_global: 0,
            region: "",
            next_block: 0,
            blocks: Vec::new(),
            decls: Vec::new(),
            callees: Vec::new(),
            sigs: Vec::new(),
            name: name.to_string(),
            helpers,
            level,
            atomics: 0,
            helper_calls: 0,
        }
    }

    /// Whether this site is the variant's mutation.
    fn site(&mut self, site: Site) -> bool {
        let i = SITES.iter().position(|&s| s == site).unwrap();
        let n = self.counts[i];
        self.counts[i] += 1;
        self.variant.mutation == Some((site, n))
    }

    /// A point of structural edit `kind`: the RNG for the edit's content when the variant
    /// edits this point. Call it on every path the template takes, whatever the variant does,
    /// so that points are numbered alike in every member.
    fn edit(&mut self, kind: Edit) -> Option<Rng> {
        let n = self.edit_points[kind.index()];
        self.edit_points[kind.index()] += 1;
        self.variant.edits.contains(&Some((kind, n))).then(|| {
            let salt = (kind.index() as u64 + 1) << 32 | n as u64;
            Rng::new(rng::mix(self.seed, salt))
        })
    }

    /// The RNG of the `n`th point of kind `kind` (its own, apart from the template's: what
    /// it draws changes nothing else in the module), the same in every member of a family.
    fn draws_of_their_own(&self, kind: u64, n: u64) -> Rng {
        Rng::new(rng::mix(self.seed, kind << 40 | n))
    }

    /// Record that structural edit `kind` changed the function.
    fn applied(&mut self, kind: Edit) {
        self.applied[kind.index()] = true;
    }

    fn value(&mut self) -> u32 {
        let v = self.next_value;
        self.next_value += 1;
        v
    }

    fn v(&self, n: u32) -> String {
        format!("v{}", n * self.variant.stride + self.variant.shift)
    }

    fn block(&mut self) -> u32 {
        let b = self.next_block;
        self.next_block += 1;
        b
    }

    fn line(&mut self, text: &str) {
        let block = self.blocks.last_mut().unwrap();
        block.1.push_str("    ");
        block.1.push_str(text);
        block.1.push('\n');
    }

    /// A helper's entry block with the two parameters of `sig`, and those parameters as
    /// `i64` values.
    fn helper_entry(&mut self, sig: HelperSig) -> (u32, u32) {
        let (pa, pb) = (self.value(), self.value());
        let b0 = self.block();
        let [ta, tb] = sig.params();
        self.start_block(b0, &[(pa, ta), (pb, tb)]);
        let a = self.convert_to_i64(pa, ta);
        let b = self.convert_to_i64(pb, tb);
        (a, b)
    }

    fn start_block(&mut self, b: u32, params: &[(u32, &str)]) {
        let params: Vec<String> = params
            .iter()
            .map(|(v, ty)| format!("{}: {ty}", self.v(*v)))
            .collect();
        let header = if params.is_empty() {
            format!("block{b}:\n")
        } else {
            format!("block{b}({}):\n", params.join(", "))
        };
        self.blocks.push((b, header));
    }

    /// `fnK` for a callee (declared once).
    fn callee(&mut self, name: &str, sig: &str, colocated: bool) -> String {
        if let Some(i) = self.callees.iter().position(|c| c == name) {
            return format!("fn{i}");
        }
        let i = self.callees.len();
        self.callees.push(name.to_string());
        let colocated = if colocated { "colocated " } else { "" };
        self.decls
            .push(format!("    fn{i} = {colocated}%{name}{sig}\n"));
        format!("fn{i}")
    }

    /// A signature declared on its own (`sigN`, for `call_indirect` and exception
    /// tables). They are declared first ([`Writer::text`]), numbered from 100: the reader
    /// numbers the signature of each `fnN` declaration after the highest number declared
    /// before it, so a `sigN` declared after `fnN` declarations could take a number the
    /// reader already gave one of them.
    fn sig(&mut self, sig: &str) -> String {
        let i = self.sigs.len() + 100;
        self.sigs.push(sig.to_string());
        format!("sig{i}")
    }

    /// An integer constant of `ty`; the mutation flips its low bit.
    fn iconst(&mut self, ty: &str, value: i64) -> u32 {
        let value = if self.site(Site::Const) {
            value ^ 1
        } else {
            value
        };
        let v = self.value();
        let line = format!("{} = iconst.{ty} {value}", self.v(v));
        self.line(&line);
        v
    }

    fn pick_binop(&mut self) -> &'static str {
        let i = self.rng.below(BINOPS.len());
        let i = if self.site(Site::Opcode) {
            (i + 1) % BINOPS.len()
        } else {
            i
        };
        BINOPS[i]
    }

    fn pick_cond(&mut self) -> &'static str {
        let i = self.rng.below(CONDS.len());
        let i = if self.site(Site::Cond) {
            (i + 1) % CONDS.len()
        } else {
            i
        };
        CONDS[i]
    }

    fn pick_flags(&mut self, choices: &[&'static str]) -> &'static str {
        let i = self.rng.below(choices.len());
        let i = if self.site(Site::Flags) {
            (i + 1) % choices.len()
        } else {
            i
        };
        choices[i]
    }

    /// Tag the buffer's accesses with an alias region (numbered 100, or 101 where the
    /// variant mutates it).
    fn buffer_region(&mut self) {
        let id = if self.site(Site::Region) { 101 } else { 100 };
        self.decls.push(format!("    region0 = {id} \"buffer\"\n"));
        self.region = " region0";
    }

    /// The address of function `name`: `func_addr`, or `symbol_value` of its symbol.
    fn address_of(&mut self, name: &str, by_symbol: bool) -> u32 {
        let p = self.value();
        let line = if by_symbol {
            let gv = self.next_global;
            self.next_global += 1;
            self.decls
                .push(format!("    gv{gv} = symbol colocated %{name}\n"));
            format!("{} = symbol_value.i64 gv{gv}", self.v(p))
        } else {
            let fref = self.callee(name, ENTRY_SIG, true);
            format!("{} = func_addr.i64 {fref}", self.v(p))
        };
        self.line(&line);
        p
    }

    /// A memory offset in the harness's buffer (multiple of 8, at most 232: 240 and 248
    /// hold the frame observations, which the harness turns into distances).
    fn offset(&mut self) -> i64 {
        let o = self.rng.below(30) as i64 * 8;
        if self.site(Site::Offset) {
            (o + 8) % 240
        } else {
            o
        }
    }

    fn interesting(&mut self) -> i64 {
        const K: [i64; 10] = [0, 1, 2, 3, 7, 255, -1, -128, 0x7fff_ffff, 0x1234_5678_9abc];
        if self.rng.chance(70) {
            self.rng.pick(&K)
        } else {
            self.rng.next_u64() as i64
        }
    }

    /// One operation on the i64 values `pool` (all dominating the current point); returns
    /// the new i64 value. `mem` is the buffer's address, when the function has one.
    fn op(&mut self, pool: &[u32], mem: Option<u32>, stack: bool) -> u32 {
        let a = self.rng.pick(pool);
        let b = self.rng.pick(pool);
        let kind = self.rng.below(13);
        let a = self.extra_before_op(a, b, mem);
        match kind {
            0 | 1 => {
                let op = self.pick_binop();
                let missing = self.edit(Edit::Missing).is_some();
                let commuted = self.edit(Edit::Commuted).is_some();
                let a = self.extra_pure(a, b);
                if missing {
                    self.applied(Edit::Missing);
                    return a;
                }
                let (a, b) = if commuted && a != b {
                    self.applied(Edit::Commuted);
                    (b, a)
                } else {
                    (a, b)
                };
                let r = self.value();
                let line = format!("{} = {op} {}, {}", self.v(r), self.v(a), self.v(b));
                self.line(&line);
                r
            }
            2 | 3 => {
                let k = self.interesting();
                let c = self.iconst("i64", k);
                let op = self.pick_binop();
                let a = self.extra_pure(a, b);
                let r = self.value();
                let line = format!("{} = {op} {}, {}", self.v(r), self.v(a), self.v(c));
                self.line(&line);
                r
            }
            4 => {
                let ty = self.rng.pick(&["i8", "i16", "i32"]);
                let wider = self.edit(Edit::Width).is_some();
                let unsigned = self.edit(Edit::Extend).is_some();
                let ty = match (wider, ty) {
                    (false, ty) => ty,
                    (true, "i8") => "i16",
                    (true, "i16") => "i32",
                    (true, _) => "i64",
                };
                if wider {
                    self.applied(Edit::Width);
                }
                let t = if ty == "i64" {
                    a
                } else {
                    let t = self.value();
                    let line = format!("{} = ireduce.{ty} {}", self.v(t), self.v(a));
                    self.line(&line);
                    t
                };
                let k = self.rng.below(200) as i64 - 100;
                let c = self.iconst(ty, k);
                let op = self.pick_binop();
                let s = self.value();
                let line = format!("{} = {op} {}, {}", self.v(s), self.v(t), self.v(c));
                self.line(&line);
                if ty == "i64" {
                    return s;
                }
                let extend = if unsigned {
                    self.applied(Edit::Extend);
                    "uextend"
                } else {
                    "sextend"
                };
                let r = self.value();
                let line = format!("{} = {extend}.i64 {}", self.v(r), self.v(s));
                self.line(&line);
                r
            }
            5 => {
                // i128: the high half of a full product.
                let (x, y, p, k, h, r) = (
                    self.value(),
                    self.value(),
                    self.value(),
                    self.value(),
                    self.value(),
                    self.value(),
                );
                let lines = [
                    format!("{} = uextend.i128 {}", self.v(x), self.v(a)),
                    format!("{} = sextend.i128 {}", self.v(y), self.v(b)),
                    format!("{} = imul {}, {}", self.v(p), self.v(x), self.v(y)),
                    format!("{} = iconst.i64 64", self.v(k)),
                    format!("{} = ushr {}, {}", self.v(h), self.v(p), self.v(k)),
                    format!("{} = ireduce.i64 {}", self.v(r), self.v(h)),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            6 => {
                let (ty, konst) = self.rng.pick(&[("f64", "f64const"), ("f32", "f32const")]);
                let op = self.rng.pick(&FLOPS);
                let k = self.rng.below(64) as f64 * 0.75 - 20.0;
                let k = if self.site(Site::Float) { k + 0.5 } else { k };
                let k = if ty == "f64" {
                    cranelift_codegen::ir::immediates::Ieee64::with_float(k).to_string()
                } else {
                    cranelift_codegen::ir::immediates::Ieee32::with_float(k as f32).to_string()
                };
                let (x, c, y, r) = (self.value(), self.value(), self.value(), self.value());
                let lines = [
                    format!("{} = fcvt_from_sint.{ty} {}", self.v(x), self.v(a)),
                    format!("{} = {konst} {k}", self.v(c)),
                    format!("{} = {op} {}, {}", self.v(y), self.v(x), self.v(c)),
                    format!("{} = fcvt_to_sint_sat.i64 {}", self.v(r), self.v(y)),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            7 => {
                let (t, s) = (self.value(), self.value());
                let lines = [
                    format!("{} = ireduce.i32 {}", self.v(t), self.v(a)),
                    format!("{} = splat.i32x4 {}", self.v(s), self.v(t)),
                ];
                for l in lines {
                    self.line(&l);
                }
                let k = self.rng.below(1000) as i64;
                let c = self.iconst("i32", k);
                let op = self.rng.pick(&["iadd", "imul", "bxor"]);
                let (cs, m, e, r) = (self.value(), self.value(), self.value(), self.value());
                let lane = self.rng.below(4);
                let lines = [
                    format!("{} = splat.i32x4 {}", self.v(cs), self.v(c)),
                    format!("{} = {op} {}, {}", self.v(m), self.v(s), self.v(cs)),
                    format!("{} = extractlane {}, {lane}", self.v(e), self.v(m)),
                    format!("{} = sextend.i64 {}", self.v(r), self.v(e)),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            8 => {
                let cond = self.pick_cond();
                let (c, r) = (self.value(), self.value());
                let lines = [
                    format!("{} = icmp {cond} {}, {}", self.v(c), self.v(a), self.v(b)),
                    format!("{} = uextend.i64 {}", self.v(r), self.v(c)),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            9 => {
                let cond = self.pick_cond();
                let x = self.rng.pick(pool);
                let (c, r) = (self.value(), self.value());
                let lines = [
                    format!("{} = icmp {cond} {}, {}", self.v(c), self.v(a), self.v(b)),
                    format!(
                        "{} = select {}, {}, {}",
                        self.v(r),
                        self.v(c),
                        self.v(x),
                        self.v(a)
                    ),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            10 if self.variant.twin => {
                // Signed division too: the divisor is odd and positive (never 0 or -1).
                let op = self.rng.pick(&["udiv", "urem", "sdiv", "srem"]);
                let edited = self.edit(Edit::Division).is_some();
                if edited {
                    self.applied(Edit::Division);
                }
                let op = match (edited, op) {
                    (false, op) => op,
                    (true, "udiv") => "sdiv",
                    (true, "urem") => "srem",
                    (true, "sdiv") => "udiv",
                    (true, _) => "urem",
                };
                let (one, d, m, p, r) = (
                    self.value(),
                    self.value(),
                    self.value(),
                    self.value(),
                    self.value(),
                );
                let lines = [
                    format!("{} = iconst.i64 1", self.v(one)),
                    format!("{} = bor {}, {}", self.v(d), self.v(b), self.v(one)),
                    format!("{} = iconst.i64 {}", self.v(m), i64::MAX),
                    format!("{} = band {}, {}", self.v(p), self.v(d), self.v(m)),
                    format!("{} = {op} {}, {}", self.v(r), self.v(a), self.v(p)),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            10 => {
                let (one, d, r) = (self.value(), self.value(), self.value());
                let op = self.rng.pick(&["udiv", "urem"]);
                // Not a mutable constant: the divisor must stay odd.
                let lines = [
                    format!("{} = iconst.i64 1", self.v(one)),
                    format!("{} = bor {}, {}", self.v(d), self.v(b), self.v(one)),
                    format!("{} = {op} {}, {}", self.v(r), self.v(a), self.v(d)),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            11 if mem.is_some() => {
                let mem = mem.unwrap();
                let flags = self.pick_flags(&MEMFLAGS);
                let region = self.region;
                let off = self.offset();
                let (store, load) = self.rng.pick(&[
                    ("store", "load.i64"),
                    ("istore32", "uload32.i64"),
                    ("istore8", "sload8.i64"),
                ]);
                let line = format!(
                    "{store}{flags}{region} {}, {}+{off}",
                    self.v(a),
                    self.v(mem)
                );
                self.line(&line);
                let flags = self.pick_flags(&LOAD_MEMFLAGS);
                let off = self.offset();
                let r = self.value();
                let line = format!(
                    "{} = {load}{flags}{region} {}+{off}",
                    self.v(r),
                    self.v(mem)
                );
                self.line(&line);
                self.atomic_access(mem, a, r)
            }
            12 if stack => {
                let (p, q, r) = (self.value(), self.value(), self.value());
                let (o1, o2) = (self.rng.below(4) * 8, self.rng.below(4) * 8);
                let lines = [
                    format!("{} = stack_addr.i64 ss0+{o1}", self.v(p)),
                    format!("store notrap aligned {}, {}", self.v(a), self.v(p)),
                    format!("{} = stack_addr.i64 ss0+{o2}", self.v(q)),
                    format!("{} = load.i64 notrap aligned {}", self.v(r), self.v(q)),
                ];
                for l in lines {
                    self.line(&l);
                }
                r
            }
            _ => self.call_helper(a, b),
        }
    }

    /// After an access to the buffer, now and then an atomic one (drawn from an RNG of its
    /// own, so that the rest of every seed's module is what it was before atomics): a
    /// read-modify-write 64 or 32 bits wide, a compare-and-swap, or an atomic store and
    /// load, at an aligned offset, with memory flags Cranelift compiles (little-endian or
    /// the target's order: big-endian atomics have no lowering) in the buffer's region.
    /// Every member of a family has the same ones. What it reads is folded into `r`.
    fn atomic_access(&mut self, mem: u32, a: u32, r: u32) -> u32 {
        let n = self.atomics;
        self.atomics += 1;
        let mut at = self.draws_of_their_own(ATOMIC_DRAWS, n);
        if !at.chance(30) {
            return r;
        }
        let flags = at.pick(&ATOMIC_MEMFLAGS);
        let region = self.region;
        let off = at.below(30) * 8;
        let (c, p, old) = (self.value(), self.value(), self.value());
        let mut lines = vec![
            format!("{} = iconst.i64 {off}", self.v(c)),
            format!("{} = iadd {}, {}", self.v(p), self.v(mem), self.v(c)),
        ];
        let (a, r) = (self.v(a), self.v(r));
        match at.below(4) {
            0 => {
                let op = at.pick(&ATOMIC_RMW_OPS);
                lines.push(format!(
                    "{} = atomic_rmw.i64{flags}{region} {op} {}, {a}",
                    self.v(old),
                    self.v(p)
                ));
            }
            1 => {
                let (t, narrow) = (self.value(), self.value());
                let op = at.pick(&ATOMIC_RMW_OPS);
                lines.extend([
                    format!("{} = ireduce.i32 {a}", self.v(t)),
                    format!(
                        "{} = atomic_rmw.i32{flags}{region} {op} {}, {}",
                        self.v(narrow),
                        self.v(p),
                        self.v(t)
                    ),
                    format!("{} = uextend.i64 {}", self.v(old), self.v(narrow)),
                ]);
            }
            2 => lines.push(format!(
                "{} = atomic_cas{flags}{region} {}, {r}, {a}",
                self.v(old),
                self.v(p)
            )),
            _ => lines.extend([
                format!("atomic_store{flags}{region} {a}, {}", self.v(p)),
                format!(
                    "{} = atomic_load.i64{flags}{region} {}",
                    self.v(old),
                    self.v(p)
                ),
            ]),
        }
        let x = self.value();
        lines.push(format!("{} = bxor {r}, {}", self.v(x), self.v(old)));
        for l in lines {
            self.line(&l);
        }
        x
    }

    /// A call to a helper of a lower level, its arguments converted from i64 and its
    /// result back; the mutation picks another member or family of the same signature.
    fn call_helper(&mut self, a: u32, b: u32) -> u32 {
        let candidates = self.callable();
        if candidates.is_empty() {
            let r = self.value();
            let line = format!("{} = iadd {}, {}", self.v(r), self.v(a), self.v(b));
            self.line(&line);
            return r;
        }
        let mut choice = self.rng.below(candidates.len());
        if self.site(Site::Callee) {
            let sig = self.helpers[candidates[choice].0].sig;
            // The next candidate of the same signature, if any.
            if let Some(i) = (1..candidates.len())
                .map(|d| (choice + d) % candidates.len())
                .find(|&i| self.helpers[candidates[i].0].sig == sig)
            {
                choice = i;
            }
        }
        let (f, m) = candidates[choice];
        // A quarter of the calls of `system_v` helpers go through the helper's address
        // (`func_addr`, then `call_indirect`), drawn from an RNG of its own so that the
        // rest of every seed's module is what it was before: a folded helper must be
        // callable through the address its module takes, alias or thunk. Never a `tail`
        // helper: where returns are signed and branch protection is enforced, its entry
        // is no landing pad ([`Program::call_tail_functions_directly`]).
        let n = self.helper_calls;
        self.helper_calls += 1;
        let mut how = self.draws_of_their_own(INDIRECT_CALL_DRAWS, n);
        let indirect = how.chance(25) && self.helpers[f].sig.conv() != "tail";
        self.call(f, m, a, b, indirect)
    }

    /// The helpers this function may call (family, member): those of lower levels.
    fn callable(&self) -> Vec<(usize, usize)> {
        self.helpers
            .iter()
            .enumerate()
            .filter(|(_, h)| h.level < self.level)
            .flat_map(|(f, h)| (0..h.names.len()).map(move |m| (f, m)))
            .collect()
    }

    /// A call of member `m` of helper family `f` on the i64 values `a` and `b`, direct or
    /// through its address (`indirect`); its result as an i64.
    fn call(&mut self, f: usize, m: usize, a: u32, b: u32, indirect: bool) -> u32 {
        let sig = self.helpers[f].sig;
        let name = self.helpers[f].names[m].clone();
        let colocated = !name.starts_with("hp");
        let fref = self.callee(&name, &sig.text(), colocated);
        let [pa, pb] = sig.params();
        let x = self.convert_from_i64(a, pa);
        let y = self.convert_from_i64(b, pb);
        let r = self.value();
        let line = if indirect {
            let p = self.value();
            let line = format!("{} = func_addr.i64 {fref}", self.v(p));
            self.line(&line);
            let sig_ref = self.sig(&sig.text());
            format!(
                "{} = call_indirect {sig_ref}, {}({}, {})",
                self.v(r),
                self.v(p),
                self.v(x),
                self.v(y)
            )
        } else {
            format!("{} = call {fref}({}, {})", self.v(r), self.v(x), self.v(y))
        };
        self.line(&line);
        self.convert_to_i64(r, sig.ret())
    }

    /// A store of `value` to the buffer `mem` that only an edited member has, at an offset
    /// `content` picks (8-aligned, below the frame observations).
    fn extra_store(&mut self, value: u32, mem: u32, content: &mut Rng) {
        let off = content.below(30) * 8;
        let line = format!(
            "store notrap aligned{} {}, {}+{off}",
            self.region,
            self.v(value),
            self.v(mem)
        );
        self.line(&line);
    }

    /// The structural edits at the start of an operation whose first operand is `a`: an
    /// extra store of `a` to the buffer, an extra call whose result is mixed into `a`.
    /// Returns the operand the operation uses.
    fn extra_before_op(&mut self, a: u32, b: u32, mem: Option<u32>) -> u32 {
        if let Some(mem) = mem {
            if let Some(mut content) = self.edit(Edit::ExtraStore) {
                self.applied(Edit::ExtraStore);
                self.extra_store(a, mem, &mut content);
            }
        }
        let callable = self.callable();
        if callable.is_empty() {
            return a;
        }
        let Some(mut content) = self.edit(Edit::ExtraCall) else {
            return a;
        };
        self.applied(Edit::ExtraCall);
        let (f, m) = content.pick(&callable);
        let r = self.call(f, m, a, b, false);
        let x = self.value();
        let line = format!("{} = bxor {}, {}", self.v(x), self.v(a), self.v(r));
        self.line(&line);
        x
    }

    /// The structural edit before a binary operation: an extra pure instruction on its
    /// first operand `a` (and `b`), whose result the operation uses instead.
    fn extra_pure(&mut self, a: u32, b: u32) -> u32 {
        let Some(mut content) = self.edit(Edit::ExtraPure) else {
            return a;
        };
        self.applied(Edit::ExtraPure);
        let t = self.value();
        let line = match content.below(5) {
            0 => format!("{} = bnot {}", self.v(t), self.v(a)),
            1 => format!("{} = ineg {}", self.v(t), self.v(a)),
            2 => format!("{} = bswap {}", self.v(t), self.v(a)),
            3 => format!("{} = rotl {}, {}", self.v(t), self.v(a), self.v(b)),
            _ => format!("{} = popcnt {}", self.v(t), self.v(a)),
        };
        self.line(&line);
        t
    }

    fn convert_from_i64(&mut self, v: u32, ty: &str) -> u32 {
        let op = match ty {
            "i64" => return v,
            "f64" => "fcvt_from_sint.f64",
            _ => &format!("ireduce.{ty}"),
        };
        let r = self.value();
        let line = format!("{} = {op} {}", self.v(r), self.v(v));
        self.line(&line);
        r
    }

    fn convert_to_i64(&mut self, v: u32, ty: &str) -> u32 {
        let op = match ty {
            "i64" => return v,
            "f64" => "fcvt_to_sint_sat.i64",
            _ => "sextend.i64",
        };
        let r = self.value();
        let line = format!("{} = {op} {}", self.v(r), self.v(v));
        self.line(&line);
        r
    }

    /// Straight-line operations, then a branch (`brif`, or `br_table` on the low bits)
    /// into two or three arms that each compute more, meeting in a join block whose
    /// parameter is returned (or handed to `finish`).
    fn body(&mut self, params: &[u32], mem: Option<u32>, stack: bool, ops: usize) -> u32 {
        let mut pool: Vec<u32> = params.to_vec();
        for i in 0..ops {
            // Before the last operation: one instruction is in the new block alone, and
            // the blocks after read its value.
            if i + 1 == ops {
                self.split_block();
            }
            let v = self.op(&pool, mem, stack);
            pool.push(v);
        }
        self.extra_block(&mut pool, mem);
        if self.variant.twin && self.rng.chance(50) {
            self.counted_loop(&mut pool, mem);
        }
        let arms = if self.rng.chance(30) { 3 } else { 2 };
        let arm_blocks: Vec<u32> = (0..arms).map(|_| self.block()).collect();
        let selector = *pool.last().unwrap();
        if arms == 2 {
            let swap = self.site(Site::Branch);
            let (t, e) = if swap {
                (arm_blocks[1], arm_blocks[0])
            } else {
                (arm_blocks[0], arm_blocks[1])
            };
            let condition = if self.variant.twin {
                self.branch_condition(selector, &pool)
            } else {
                selector
            };
            let line = format!("brif {}, block{t}, block{e}", self.v(condition));
            self.line(&line);
        } else {
            let (i, k, m) = (self.value(), self.value(), self.value());
            let lines = [
                format!("{} = ireduce.i32 {}", self.v(i), self.v(selector)),
                format!("{} = iconst.i32 3", self.v(k)),
                format!("{} = band {}, {}", self.v(m), self.v(i), self.v(k)),
            ];
            for l in lines {
                self.line(&l);
            }
            let mut targets = [arm_blocks[1], arm_blocks[2], arm_blocks[0]];
            if self.site(Site::Branch) {
                targets.swap(0, 1);
            }
            let line = format!(
                "br_table {}, block{}, [block{}, block{}, block{}]",
                self.v(m),
                arm_blocks[0],
                targets[0],
                targets[1],
                targets[2]
            );
            self.line(&line);
        }
        let join_block = self.block();
        let joined = self.value();
        for &b in &arm_blocks {
            self.start_block(b, &[]);
            let mut arm_pool = pool.clone();
            for _ in 0..1 + self.rng.below(2) {
                let v = self.op(&arm_pool, mem, stack);
                arm_pool.push(v);
            }
            let mut arg = arm_pool[arm_pool.len() - 1];
            if self.edit(Edit::BlockArg).is_some() {
                let other = arm_pool[arm_pool.len() - 2];
                if other != arg {
                    self.applied(Edit::BlockArg);
                }
                arg = other;
            }
            let line = format!("jump block{join_block}({})", self.v(arg));
            self.line(&line);
        }
        self.start_block(join_block, &[(joined, "i64")]);
        let mut tail_pool = params.to_vec();
        tail_pool.push(joined);
        let v = self.op(&tail_pool, mem, stack);
        let r = self.value();
        let line = format!("{} = iadd {}, {}", self.v(r), self.v(v), self.v(joined));
        self.line(&line);
        r
    }

    /// A point of [`Edit::SplitBlock`]: when edited, the block goes on in a new block
    /// entered by a jump.
    fn split_block(&mut self) {
        if self.edit(Edit::SplitBlock).is_none() {
            return;
        }
        self.applied(Edit::SplitBlock);
        let block = self.block();
        self.line(&format!("jump block{block}"));
        self.start_block(block, &[]);
    }

    /// A point of [`Edit::ExtraBlock`]: when edited, a block the template lacks, entered on
    /// the low bit of the last value of `pool`, which changes that value (and stores it to
    /// the buffer, when there is one); the value where the paths join replaces it.
    fn extra_block(&mut self, pool: &mut [u32], mem: Option<u32>) {
        let Some(mut content) = self.edit(Edit::ExtraBlock) else {
            return;
        };
        self.applied(Edit::ExtraBlock);
        let v = pool[pool.len() - 1];
        let (one, c) = (self.value(), self.value());
        let (extra, join) = (self.block(), self.block());
        let lines = [
            format!("{} = iconst.i64 1", self.v(one)),
            format!("{} = band {}, {}", self.v(c), self.v(v), self.v(one)),
            format!(
                "brif {}, block{extra}, block{join}({})",
                self.v(c),
                self.v(v)
            ),
        ];
        for l in lines {
            self.line(&l);
        }
        self.start_block(extra, &[]);
        if let Some(mem) = mem {
            self.extra_store(v, mem, &mut content);
        }
        let t = self.value();
        let lines = [
            format!("{} = bnot {}", self.v(t), self.v(v)),
            format!("jump block{join}({})", self.v(t)),
        ];
        for l in lines {
            self.line(&l);
        }
        let joined = self.value();
        self.start_block(join, &[(joined, "i64")]);
        pool[pool.len() - 1] = joined;
    }

    /// The loop of near-twin templates: a trip count of 0 to 7 from the last value of
    /// `pool`, an accumulator that starts at a value of `pool` and is combined with another
    /// on each trip, and joins `pool` after the loop. Points of [`Edit::LoopArg`] (another
    /// start value or trip count into the header) and [`Edit::LoopExtra`] (an extra
    /// instruction in the body).
    fn counted_loop(&mut self, pool: &mut Vec<u32>, mem: Option<u32>) {
        let last = pool[pool.len() - 1];
        let start = self.rng.pick(pool);
        let x = self.rng.pick(pool);
        let op = self.pick_binop();
        let other_arg = self.edit(Edit::LoopArg);
        let extra = self.edit(Edit::LoopExtra);
        let (seven, n) = (self.value(), self.value());
        let lines = [
            format!("{} = iconst.i64 7", self.v(seven)),
            format!("{} = band {}, {}", self.v(n), self.v(last), self.v(seven)),
        ];
        for l in lines {
            self.line(&l);
        }
        let (mut start, mut count) = (start, n);
        if let Some(mut content) = other_arg {
            self.applied(Edit::LoopArg);
            if content.chance(50) {
                start = n;
            } else {
                count = seven;
            }
        }
        let (head, body, exit) = (self.block(), self.block(), self.block());
        let line = format!("jump block{head}({}, {})", self.v(start), self.v(count));
        self.line(&line);
        let (acc, i) = (self.value(), self.value());
        self.start_block(head, &[(acc, "i64"), (i, "i64")]);
        let (zero, done) = (self.value(), self.value());
        let lines = [
            format!("{} = iconst.i64 0", self.v(zero)),
            format!("{} = icmp eq {}, {}", self.v(done), self.v(i), self.v(zero)),
            format!("brif {}, block{exit}, block{body}", self.v(done)),
        ];
        for l in lines {
            self.line(&l);
        }
        self.start_block(body, &[]);
        let mut next = self.value();
        let line = format!("{} = {op} {}, {}", self.v(next), self.v(acc), self.v(x));
        self.line(&line);
        if let Some(mut content) = extra {
            self.applied(Edit::LoopExtra);
            match mem {
                Some(mem) if content.chance(50) => {
                    self.extra_store(next, mem, &mut content);
                }
                _ => {
                    let t = self.value();
                    let line = format!("{} = rotl {}, {}", self.v(t), self.v(next), self.v(i));
                    self.line(&line);
                    next = t;
                }
            }
        }
        let (one, less) = (self.value(), self.value());
        let lines = [
            format!("{} = iconst.i64 1", self.v(one)),
            format!("{} = isub {}, {}", self.v(less), self.v(i), self.v(one)),
            format!("jump block{head}({}, {})", self.v(next), self.v(less)),
        ];
        for l in lines {
            self.line(&l);
        }
        self.start_block(exit, &[]);
        pool.push(acc);
    }

    /// The branch condition of near-twin templates: a comparison of the selector with a
    /// value of `pool`; a point of [`Edit::BranchCond`] (another condition).
    fn branch_condition(&mut self, selector: u32, pool: &[u32]) -> u32 {
        let y = self.rng.pick(pool);
        let mut i = self.rng.below(CONDS.len());
        if let Some(mut content) = self.edit(Edit::BranchCond) {
            self.applied(Edit::BranchCond);
            i = (i + 1 + content.below(CONDS.len() - 1)) % CONDS.len();
        }
        let c = self.value();
        let line = format!(
            "{} = icmp {} {}, {}",
            self.v(c),
            CONDS[i],
            self.v(selector),
            self.v(y)
        );
        self.line(&line);
        c
    }

    fn text(&self, sig: &str, slots: &str) -> String {
        let mut out = format!("function %{}{sig} {{\n", self.name);
        out.push_str(slots);
        for (i, sig) in self.sigs.iter().enumerate() {
            let _ = writeln!(out, "    sig{} = {sig}", i + 100);
        }
        for d in &self.decls {
            out.push_str(d);
        }
        let mut blocks: Vec<&(u32, String)> = self.blocks.iter().collect();
        if self.variant.reverse_layout && blocks.len() > 2 {
            blocks[1..].reverse();
        }
        for (_, b) in blocks {
            out.push_str(b);
        }
        out.push_str("}\n\n");
        out
    }
}

/// An entry function of `kind`.
#[allow(clippy::too_many_arguments)]
fn entry(
    seed: u64,
    variant: Variant,
    name: &str,
    kind: EntryKind,
    helpers: &[HelperFamily],
    entries: &[String],
    ops: usize,
) -> String {
    let mut w = Writer::new(seed, variant, name, helpers, usize::MAX);
    if w.rng.chance(40) {
        w.buffer_region();
    }
    let by_symbol = w.rng.chance(40);
    let (a, b, mem) = (w.value(), w.value(), w.value());
    let b0 = w.block();
    w.start_block(b0, &[(a, "i64"), (b, "i64"), (mem, "i64")]);
    // The stack slot is written before anything reads it.
    let zero = w.value();
    let line = format!("{} = iconst.i64 0", w.v(zero));
    w.line(&line);
    let slot = w.value();
    let line = format!("{} = stack_addr.i64 ss0", w.v(slot));
    w.line(&line);
    for off in [0, 8, 16, 24] {
        let line = format!("store notrap aligned {}, {}+{off}", w.v(zero), w.v(slot));
        w.line(&line);
    }
    let mut pool = vec![a, b];
    // Frame readers read theirs in every member; in a plain near-twin family one member may.
    if w.variant.twin && kind == EntryKind::Plain && w.edit(Edit::ReadsFrame).is_some() {
        w.applied(Edit::ReadsFrame);
        let (ra, fp) = (w.value(), w.value());
        let lines = [
            format!("{} = get_return_address.i64", w.v(ra)),
            format!("store notrap aligned {}, {}+248", w.v(ra), w.v(mem)),
            format!("{} = get_frame_pointer.i64", w.v(fp)),
            format!("store notrap aligned {}, {}+240", w.v(fp), w.v(mem)),
        ];
        for l in lines {
            w.line(&l);
        }
    }
    match kind {
        EntryKind::FrameReader => {
            let (ra, fp, sp, c, x) = (w.value(), w.value(), w.value(), w.value(), w.value());
            let lines = [
                format!("{} = get_return_address.i64", w.v(ra)),
                format!("store notrap aligned {}, {}+248", w.v(ra), w.v(mem)),
                format!("{} = get_frame_pointer.i64", w.v(fp)),
                format!("store notrap aligned {}, {}+240", w.v(fp), w.v(mem)),
                format!("{} = get_stack_pointer.i64", w.v(sp)),
                format!("{} = icmp ule {}, {}", w.v(c), w.v(sp), w.v(fp)),
                format!("{} = uextend.i64 {}", w.v(x), w.v(c)),
            ];
            for l in lines {
                w.line(&l);
            }
            pool.push(x);
        }
        EntryKind::AddressCompare | EntryKind::SelfAddress => {
            let target = if kind == EntryKind::SelfAddress {
                name.to_string()
            } else {
                let i = w.rng.below(entries.len());
                let i = if w.site(Site::Callee) {
                    (i + 1) % entries.len()
                } else {
                    i
                };
                entries[i].clone()
            };
            let p = w.address_of(&target, by_symbol);
            let (c, x) = (w.value(), w.value());
            let lines = [
                format!("{} = icmp eq {}, {}", w.v(c), w.v(a), w.v(p)),
                format!("{} = uextend.i64 {}", w.v(x), w.v(c)),
            ];
            for l in lines {
                w.line(&l);
            }
            // `a` may be an address: only its comparison enters the computation.
            pool = vec![b, x];
        }
        EntryKind::Plain | EntryKind::AddressReturn => {}
    }
    let r = w.body(&pool, Some(mem), true, ops);
    if kind == EntryKind::AddressReturn {
        let one = w.iconst("i64", 1);
        let t = w.value();
        let line = format!("{} = band {}, {}", w.v(t), w.v(r), w.v(one));
        w.line(&line);
        let (x, y) = (w.block(), w.block());
        let line = format!("brif {}, block{x}, block{y}", w.v(t));
        w.line(&line);
        for blk in [x, y] {
            w.start_block(blk, &[]);
            let i = w.rng.below(entries.len());
            let i = if w.site(Site::Callee) {
                (i + 1) % entries.len()
            } else {
                i
            };
            let target = if w.rng.chance(25) {
                name.to_string()
            } else {
                entries[i].clone()
            };
            let p = w.address_of(&target, by_symbol);
            let line = format!("return {}", w.v(p));
            w.line(&line);
        }
    } else {
        let line = format!("return {}", w.v(r));
        w.line(&line);
    }
    w.text(ENTRY_SIG, "    ss0 = explicit_slot 32, align = 8\n")
}

/// A helper function: parameters converted to i64, operations, a result converted back;
/// with recursion, a depth (the first parameter's low bits) counts down to zero.
#[allow(clippy::too_many_arguments)]
fn helper(
    seed: u64,
    variant: Variant,
    name: &str,
    partner: Option<&str>,
    sig: HelperSig,
    recursion: Recursion,
    level: usize,
    helpers: &[HelperFamily],
    ops: usize,
) -> String {
    let mut w = Writer::new(seed, variant, name, helpers, level);
    let (a, b) = w.helper_entry(sig);
    let [ta, tb] = sig.params();
    let result = if recursion == Recursion::None {
        w.body(&[a, b], None, false, ops)
    } else {
        // depth = a & mask; if depth > 0 recurse with depth - 1, else the base case.
        let mask = w.iconst("i64", 7);
        let (d, z, c) = (w.value(), w.value(), w.value());
        let lines = [
            format!("{} = band {}, {}", w.v(d), w.v(a), w.v(mask)),
            format!("{} = iconst.i64 0", w.v(z)),
            format!("{} = icmp sgt {}, {}", w.v(c), w.v(d), w.v(z)),
        ];
        for l in lines {
            w.line(&l);
        }
        let (rec, base) = (w.block(), w.block());
        let line = format!("brif {}, block{rec}, block{base}", w.v(c));
        w.line(&line);
        w.start_block(rec, &[]);
        let (one, dm) = (w.value(), w.value());
        let lines = [
            format!("{} = iconst.i64 1", w.v(one)),
            format!("{} = isub {}, {}", w.v(dm), w.v(d), w.v(one)),
        ];
        for l in lines {
            w.line(&l);
        }
        let mut pool = vec![a, b, dm];
        for _ in 0..1 + ops / 2 {
            let v = w.op(&pool, None, false);
            pool.push(v);
        }
        let x = *pool.last().unwrap();
        let target = match recursion {
            Recursion::PingPong => partner.unwrap_or(name).to_string(),
            _ => name.to_string(),
        };
        let fref = w.callee(&target, &sig.text(), true);
        let da = w.convert_from_i64(dm, ta);
        let xb = w.convert_from_i64(x, tb);
        let ret = sig.ret();
        let result = match recursion {
            Recursion::ReturnCall => {
                let line = format!("return_call {fref}({}, {})", w.v(da), w.v(xb));
                w.line(&line);
                None
            }
            Recursion::TryCall => {
                let s = w.sig(&sig.text());
                let cont = w.block();
                let line = format!(
                    "try_call {fref}({}, {}), {s}, block{cont}(ret0), []",
                    w.v(da),
                    w.v(xb)
                );
                w.line(&line);
                let r = w.value();
                w.start_block(cont, &[(r, ret)]);
                Some(r)
            }
            Recursion::Call | Recursion::PingPong => {
                let r = w.value();
                let line = format!("{} = call {fref}({}, {})", w.v(r), w.v(da), w.v(xb));
                w.line(&line);
                Some(r)
            }
            Recursion::None => unreachable!(),
        };
        if let Some(r) = result {
            let r64 = w.convert_to_i64(r, ret);
            let k = w.interesting();
            let c = w.iconst("i64", k);
            let op = w.pick_binop();
            let s = w.value();
            let line = format!("{} = {op} {}, {}", w.v(s), w.v(r64), w.v(c));
            w.line(&line);
            let back = w.convert_from_i64(s, ret);
            let line = format!("return {}", w.v(back));
            w.line(&line);
        }
        w.start_block(base, &[]);
        let mut pool = vec![a, b];
        for _ in 0..1 + ops / 2 {
            let v = w.op(&pool, None, false);
            pool.push(v);
        }
        *pool.last().unwrap()
    };
    let back = w.convert_from_i64(result, sig.ret());
    let line = format!("return {}", w.v(back));
    w.line(&line);
    w.text(&sig.text(), "")
}

/// A member of a constant-swap family: `ops` operations on its two parameters that every
/// member shares (the template's, from `seed`), then `((a * c0) + c1) ^ (b * c2)` of its
/// parameters and the first three `constants`, each further constant `ck` mixed in as
/// `(x * ck) ^ a` (`b` for even `k`), added to the shared chain's last value.
fn constant_swap_helper(
    seed: u64,
    name: &str,
    sig: HelperSig,
    constants: &[i64],
    ops: usize,
) -> String {
    let mut w = Writer::new(seed, Variant::SAME, name, &[], 0);
    let (a, b) = w.helper_entry(sig);
    let mut pool = vec![a, b];
    for _ in 0..ops {
        let v = w.op(&pool, None, false);
        pool.push(v);
    }
    let shared = *pool.last().unwrap();
    let values: Vec<u32> = constants.iter().map(|&c| w.iconst("i64", c)).collect();
    let [c0, c1, c2] = [values[0], values[1], values[2]];
    let (ac0, plus, bc2, mut mixed, result) =
        (w.value(), w.value(), w.value(), w.value(), w.value());
    let mut lines = vec![
        format!("{} = imul {}, {}", w.v(ac0), w.v(a), w.v(c0)),
        format!("{} = iadd {}, {}", w.v(plus), w.v(ac0), w.v(c1)),
        format!("{} = imul {}, {}", w.v(bc2), w.v(b), w.v(c2)),
        format!("{} = bxor {}, {}", w.v(mixed), w.v(plus), w.v(bc2)),
    ];
    for (k, &ck) in values.iter().enumerate().skip(3) {
        let (product, next) = (w.value(), w.value());
        let operand = if k % 2 == 1 { a } else { b };
        lines.push(format!(
            "{} = imul {}, {}",
            w.v(product),
            w.v(mixed),
            w.v(ck)
        ));
        lines.push(format!(
            "{} = bxor {}, {}",
            w.v(next),
            w.v(product),
            w.v(operand)
        ));
        mixed = next;
    }
    lines.push(format!(
        "{} = iadd {}, {}",
        w.v(result),
        w.v(mixed),
        w.v(shared)
    ));
    for l in lines {
        w.line(&l);
    }
    let back = w.convert_from_i64(result, sig.ret());
    let line = format!("return {}", w.v(back));
    w.line(&line);
    w.text(&sig.text(), "")
}

/// Constant-swap helper family number `f` of signature `sig`, its members added to
/// `module`: two to four, the first the template with `width` constants `c0, c1, ...`
/// (distinct, 3 to 252), each other member another permutation of them.
fn constant_swap_family(
    rng: &mut Rng,
    f: usize,
    sig: HelperSig,
    width: usize,
    module: &mut ModuleText,
) -> HelperFamily {
    // Not preemptible: merge-similar leaves those to their definitions.
    let linkage = rng.pick(&["l", "d", "x"]);
    let template_seed = rng.next_u64();
    let ops = 6 + rng.below(6);
    let constants = distinct_constants(rng, width);
    const PERMUTATIONS: [[usize; 3]; 6] = [
        [0, 1, 2],
        [1, 0, 2],
        [0, 2, 1],
        [2, 1, 0],
        [1, 2, 0],
        [2, 0, 1],
    ];
    let n = 2 + rng.below(3);
    let mut orders: Vec<Vec<usize>> = vec![(0..width).collect()];
    while orders.len() < n {
        // Three constants take the permutations of a table (as they always have, so that
        // a seed's module does not change); more, a shuffle.
        let p = match width {
            3 => rng.pick(&PERMUTATIONS[1..]).to_vec(),
            _ => shuffled(rng, width),
        };
        if !orders.contains(&p) {
            orders.push(p);
        }
    }
    let names: Vec<String> = (0..n).map(|m| format!("h{linkage}{f}_{m}")).collect();
    let members: Vec<_> = orders
        .iter()
        .zip(&names)
        .map(|(order, name)| {
            let permuted: Vec<i64> = order.iter().map(|&i| constants[i]).collect();
            let text = constant_swap_helper(template_seed, name, sig, &permuted, ops);
            (text, [false; Edit::ALL.len()])
        })
        .collect();
    module.family(&members);
    module.constant_swap_families.push(names.clone());
    if width > 3 {
        module.wide_constant_swap_families.push(names.clone());
    }
    HelperFamily {
        names,
        sig,
        level: 0,
    }
}

/// `n` distinct constants, 3 to 252, drawn from `rng`.
fn distinct_constants(rng: &mut Rng, n: usize) -> Vec<i64> {
    let mut constants = Vec::with_capacity(n);
    while constants.len() < n {
        let c = 3 + rng.below(250) as i64;
        if !constants.contains(&c) {
            constants.push(c);
        }
    }
    constants
}

/// A permutation of `0..n` drawn from `rng` (Fisher–Yates).
fn shuffled(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        p.swap(i, rng.below(i + 1));
    }
    p
}

/// The variants of a family of `n` members: the first is the template; the others are
/// copies (some renumbered or re-laid-out) or differ in one site.
fn variants(rng: &mut Rng, n: usize, counts: [usize; 9]) -> Vec<Variant> {
    let mut out = vec![Variant::SAME];
    while out.len() < n {
        let mut v = Variant::SAME;
        match rng.below(4) {
            0 => {}
            1 => {
                v.stride = 3;
                v.shift = 5 + rng.below(50) as u32;
            }
            2 => v.reverse_layout = true,
            _ => {
                let available: Vec<usize> = (0..SITES.len()).filter(|&i| counts[i] > 0).collect();
                if !available.is_empty() {
                    let i = rng.pick(&available);
                    v.mutation = Some((SITES[i], rng.below(counts[i])));
                }
                if rng.chance(30) {
                    v.reverse_layout = true;
                }
            }
        }
        out.push(v);
    }
    out
}

/// The variants of a near-twin family of `n` members: the first is the template; most
/// others carry one to [`MAX_EDITS`] structural edits at points the template has (edits
/// of kinds not in `allowed` left out), some also a site mutation; a few are copies.
/// Members keep the template's value numbers and block layout.
fn twin_variants(
    rng: &mut Rng,
    n: usize,
    written: Written,
    allowed: impl Fn(Edit) -> bool,
) -> Vec<Variant> {
    let available: Vec<Edit> = Edit::ALL
        .into_iter()
        .filter(|&e| allowed(e) && written.edit_points[e.index()] > 0)
        .collect();
    let sites: Vec<usize> = (0..SITES.len()).filter(|&i| written.sites[i] > 0).collect();
    let mut out = vec![Variant::TWIN];
    while out.len() < n {
        let mut v = Variant::TWIN;
        if !available.is_empty() && rng.chance(85) {
            for slot in 0..1 + rng.below(MAX_EDITS) {
                let kind = rng.pick(&available);
                let point = rng.below(written.edit_points[kind.index()]);
                if !v.edits.contains(&Some((kind, point))) {
                    v.edits[slot] = Some((kind, point));
                }
            }
            if !sites.is_empty() && rng.chance(25) {
                let i = rng.pick(&sites);
                v.mutation = Some((SITES[i], rng.below(written.sites[i])));
            }
        }
        // No reversed layouts: the reader infers types from values defined above their use
        // in the text, and a loop's values would come below.
        out.push(v);
    }
    out
}

/// Sizes of a generated module.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub helper_families: usize,
    pub entry_families: usize,
    pub family_size: usize,
    pub inputs_per_entry: usize,
    /// Generate frame readers (their results depend on frames, so they need
    /// `preserve_frame_pointers`).
    pub frame_readers: bool,
    /// Let `tail` helpers recurse through `return_call` (which Cranelift compiles for x86_64
    /// only with `preserve_frame_pointers`); without, the draw that would have chosen it
    /// makes a helper that does not recurse (every other draw is the same).
    pub return_calls: bool,
    /// Near-twin families of helpers and of entries (members with structural edits),
    /// written after the others from an RNG of their own: a module is the one the same
    /// seed gave without them, with these families added.
    pub twin_helper_families: usize,
    pub twin_entry_families: usize,
    /// Constant-swap families of helpers (members that permute the template's constants),
    /// written after the near-twins from an RNG of their own.
    pub constant_swap_families: usize,
    /// Wide constant-swap families (`tail` helpers with more constants than the argument
    /// registers take: merge-similar's thunks grow the stack argument area), written after
    /// those from an RNG of their own.
    pub wide_constant_swap_families: usize,
    /// Vector families of helpers (`i32x4` values, [`vector`]), written after those from
    /// an RNG of their own.
    pub vector_families: usize,
}

/// A module being written.
#[derive(Default)]
struct ModuleText {
    clif: String,
    functions: usize,
    family_pairs: usize,
    near_twin_pairs: usize,
    edits: [usize; Edit::ALL.len()],
    constant_swap_families: Vec<Vec<String>>,
    wide_constant_swap_families: Vec<Vec<String>>,
    vector_families: Vec<(Vec<String>, bool)>,
}

impl ModuleText {
    /// Add a family's members (text, and the structural edits that changed each).
    fn family(&mut self, members: &[(String, [bool; Edit::ALL.len()])]) {
        let n = members.len();
        self.functions += n;
        self.family_pairs += n * (n - 1) / 2;
        // A function's text after its name line: members that differ only in the name.
        let body = |text: &str| {
            text.split_once('\n')
                .map_or(String::new(), |(_, b)| b.into())
        };
        for (i, (text, applied)) in members.iter().enumerate() {
            self.clif.push_str(text);
            for (count, &changed) in self.edits.iter_mut().zip(applied) {
                *count += changed as usize;
            }
            for (other, other_applied) in &members[..i] {
                let edited = applied.contains(&true) || other_applied.contains(&true);
                if edited && body(text) != body(other) {
                    self.near_twin_pairs += 1;
                }
            }
        }
    }
}

/// The entry flags of a member of kind `kind` (`applied`: the edits that changed it).
fn entry_flags(kind: EntryKind, applied: &[bool; Edit::ALL.len()]) -> u32 {
    let frame = flags::READS_RETURN_ADDRESS | flags::READS_FRAME_POINTER;
    match kind {
        EntryKind::Plain if applied[Edit::ReadsFrame.index()] => frame,
        EntryKind::Plain => 0,
        EntryKind::AddressCompare | EntryKind::SelfAddress => flags::ADDRESS_SENSITIVE,
        EntryKind::AddressReturn => flags::ADDRESS_RESULT,
        EntryKind::FrameReader => frame,
    }
}

/// Helper family number `f`, its members (near-twins when `twin`) added to `module`.
fn helper_family(
    rng: &mut Rng,
    f: usize,
    level: usize,
    shape: Shape,
    twin: bool,
    helpers: &[HelperFamily],
    module: &mut ModuleText,
) -> HelperFamily {
    let sig = rng.pick(&HelperSig::ALL);
    let recursion = match rng.below(6) {
        0 => Recursion::Call,
        1 => Recursion::TryCall,
        2 if sig == HelperSig::Tail && shape.return_calls => Recursion::ReturnCall,
        3 => Recursion::PingPong,
        _ => Recursion::None,
    };
    let linkage = rng.pick(&["l", "d", "x", "p"]);
    let n = 2 + rng.below(shape.family_size.max(2) / 2);
    let template_seed = rng.next_u64();
    let ops = 2 + rng.below(4);
    let names: Vec<String> = (0..n).map(|m| format!("h{linkage}{f}_{m}")).collect();
    // Ping-pong members call the partner in the second half: h_m <-> h_{m^1}.
    let partner = |m: usize| -> Option<String> {
        (recursion == Recursion::PingPong && (m ^ 1) < n).then(|| names[m ^ 1].clone())
    };
    let write = |v: Variant, m: usize| {
        let text = helper(
            template_seed,
            v,
            &names[m],
            partner(m).as_deref(),
            sig,
            recursion,
            level,
            helpers,
            ops,
        );
        (text, last_written().applied)
    };
    let template = if twin { Variant::TWIN } else { Variant::SAME };
    let _ = write(template, 0);
    let vs = if twin {
        twin_variants(rng, n, last_written(), |_| true)
    } else {
        variants(rng, n, last_counts())
    };
    let members: Vec<_> = vs.iter().enumerate().map(|(m, v)| write(*v, m)).collect();
    module.family(&members);
    HelperFamily { names, sig, level }
}

/// The kind and size of an entry family.
fn entry_kind_and_size(rng: &mut Rng, shape: Shape) -> (EntryKind, usize) {
    let kind = match rng.below(10) {
        0 => EntryKind::AddressCompare,
        1 => EntryKind::SelfAddress,
        2 => EntryKind::AddressReturn,
        3 | 4 if shape.frame_readers => EntryKind::FrameReader,
        _ => EntryKind::Plain,
    };
    (kind, 2 + rng.below(shape.family_size.max(3) - 1))
}

/// The names of the members of entry `families`, numbered from `first`: `e<family>_<m>`.
fn name_entries(names: &mut Vec<String>, first: usize, families: &[(EntryKind, usize)]) {
    for (k, &(_, n)) in families.iter().enumerate() {
        let f = first + k;
        names.extend((0..n).map(|m| format!("e{f}_{m}")));
    }
}

/// Entry family number `f` of `kind` and `n` members (near-twins when `twin`), added to
/// `module` and `entries`.
#[allow(clippy::too_many_arguments)]
fn entry_family(
    rng: &mut Rng,
    f: usize,
    (kind, n): (EntryKind, usize),
    shape: Shape,
    twin: bool,
    helpers: &[HelperFamily],
    entry_names: &[String],
    module: &mut ModuleText,
    entries: &mut Vec<Entry>,
) {
    let template_seed = rng.next_u64();
    let ops = 3 + rng.below(6);
    let write = |v: Variant, name: &str| {
        let text = entry(template_seed, v, name, kind, helpers, entry_names, ops);
        (text, last_written().applied)
    };
    let template = if twin { Variant::TWIN } else { Variant::SAME };
    let _ = write(template, "e");
    let vs = if twin {
        twin_variants(rng, n, last_written(), |e| {
            e != Edit::ReadsFrame || shape.frame_readers
        })
    } else {
        variants(rng, n, last_counts())
    };
    let mut members = Vec::new();
    for (m, v) in vs.iter().enumerate() {
        let name = format!("e{f}_{m}");
        let (text, applied) = write(*v, &name);
        entries.push(Entry {
            name,
            flags: entry_flags(kind, &applied),
        });
        members.push((text, applied));
    }
    module.family(&members);
}

/// Inputs for `entries[first..]`: integers, and for address-sensitive entries sometimes
/// entries' addresses (their own among them).
fn inputs(rng: &mut Rng, entries: &[Entry], first: usize, shape: Shape) -> Vec<(usize, Arg, Arg)> {
    let mut inputs = Vec::new();
    const INTS: [i64; 12] = [
        0,
        1,
        -1,
        2,
        7,
        8,
        255,
        256,
        i64::MIN,
        i64::MAX,
        0x7fff_ffff,
        -129,
    ];
    for (i, e) in entries.iter().enumerate().skip(first) {
        for k in 0..shape.inputs_per_entry {
            let arg = |rng: &mut Rng| {
                if rng.chance(60) {
                    Arg::Int(rng.pick(&INTS))
                } else {
                    Arg::Int(rng.next_u64() as i64)
                }
            };
            let mut a = arg(rng);
            let b = arg(rng);
            if e.flags & flags::ADDRESS_SENSITIVE != 0 && k % 2 == 0 {
                a = Arg::Address(if k == 0 { i } else { rng.below(entries.len()) });
            }
            inputs.push((i, a, b));
        }
    }
    inputs
}

/// The probe of helper `name` (of signature `sig`): entry `probe` calls it on its own
/// first two arguments, narrowed to the helper's parameter types (`ireduce`; a float from
/// the low 32 bits, which it holds exactly, so a recursive helper's depth bits survive),
/// and returns the result widened to i64 (`sextend`; a float's bits, `bitcast`). A `tail`
/// helper's probe converts nothing.
fn helper_probe(probe: &str, name: &str, sig: HelperSig) -> String {
    let colocated = if name.starts_with("hp") {
        ""
    } else {
        "colocated "
    };
    let mut body = String::new();
    let mut next = 3;
    let mut line = |body: &mut String, op: String| {
        body.push_str(&format!("    v{next} = {op}\n"));
        next += 1;
        next - 1
    };
    let mut args = [0, 1];
    for (arg, ty) in args.iter_mut().zip(sig.params()) {
        *arg = match ty {
            "i64" => *arg,
            "f64" => {
                let low = line(&mut body, format!("ireduce.i32 v{arg}"));
                line(&mut body, format!("fcvt_from_sint.f64 v{low}"))
            }
            _ => line(&mut body, format!("ireduce.{ty} v{arg}")),
        };
    }
    let result = line(&mut body, format!("call fn0(v{}, v{})", args[0], args[1]));
    let result = match sig.ret() {
        "i64" => result,
        "f64" => line(&mut body, format!("bitcast.i64 v{result}")),
        _ => line(&mut body, format!("sextend.i64 v{result}")),
    };
    format!(
        "function %{probe}{ENTRY_SIG} {{\n    fn0 = {colocated}%{name}{}\n\n\
         block0(v0: i64, v1: i64, v2: i64):\n{body}    return v{result}\n}}\n\n",
        sig.text()
    )
}

/// Inputs for the probes `entries[first..]`: an integer whose low three bits (the depth
/// of a recursive helper) count 0, 1, 2, ... over an entry's inputs, so that the base case
/// and recursion both run, and any integer.
fn probe_inputs(
    rng: &mut Rng,
    entries: &[Entry],
    first: usize,
    shape: Shape,
) -> Vec<(usize, Arg, Arg)> {
    let mut inputs = Vec::new();
    for i in first..entries.len() {
        for k in 0..shape.inputs_per_entry {
            let a = (rng.next_u64() as i64 & !7) | (k % 8) as i64;
            let b = rng.next_u64() as i64;
            inputs.push((i, Arg::Int(a), Arg::Int(b)));
        }
    }
    inputs
}

/// What families [`Families::add`] writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Members that are copies of the template or differ from it in one site.
    Regular,
    /// Members with structural edits ([`Edit`]).
    NearTwin,
    /// Helpers whose members permute the template's constants (no entry families).
    ConstantSwap,
    /// Constant-swap helpers of the `tail` convention with [`WIDE_CONSTANTS`] constants,
    /// more than the argument registers hold beside their two parameters (no entry
    /// families).
    WideConstantSwap,
    /// Helpers on `i32x4` values ([`vector`]; no entry families).
    Vector,
}

/// Constants of a wide constant-swap family's members: with their two parameters, three
/// more values than the six argument registers the `tail` convention has on x86_64 and
/// aarch64, so merge-similar's thunks store up to three on the stack, in an area they
/// grow (fewer where every member leaves a constant in place).
const WIDE_CONSTANTS: usize = 7;

/// The helper and entry families of a module as they are added, with the entries' inputs.
#[derive(Default)]
struct Families {
    helpers: Vec<HelperFamily>,
    /// Every entry's name, named before the entries are written (address-taking entries
    /// refer to any of them).
    entry_names: Vec<String>,
    entries: Vec<Entry>,
    inputs: Vec<(usize, Arg, Arg)>,
    /// Entry families added.
    entry_families: usize,
}

impl Families {
    /// `helpers` helper families of `kind`, level by level, then `entries` entry families
    /// of `kind`, numbered after those added before, all drawn from `rng`; then their
    /// entries' inputs.
    fn add(
        &mut self,
        rng: &mut Rng,
        shape: Shape,
        kind: Kind,
        (helpers, entries): (usize, usize),
        module: &mut ModuleText,
    ) {
        let twin = kind == Kind::NearTwin;
        assert!(
            !matches!(
                kind,
                Kind::ConstantSwap | Kind::WideConstantSwap | Kind::Vector
            ) || entries == 0,
            "constant-swap and vector families are helpers"
        );
        // Constant-swap families take the signatures in turn, from one drawn: a `tail`
        // family among any five.
        let first_sig = match kind {
            Kind::ConstantSwap => rng.below(HelperSig::ALL.len()),
            _ => 0,
        };
        for k in 0..helpers {
            let f = self.helpers.len();
            let level = k * 3 / helpers.max(1);
            let family = match kind {
                Kind::ConstantSwap => {
                    let sig = HelperSig::ALL[(first_sig + k) % HelperSig::ALL.len()];
                    constant_swap_family(rng, f, sig, 3, module)
                }
                Kind::WideConstantSwap => {
                    constant_swap_family(rng, f, HelperSig::Tail, WIDE_CONSTANTS, module)
                }
                // The two vector signatures in turn.
                Kind::Vector => {
                    let sig = [HelperSig::Vector, HelperSig::VectorTail][k % 2];
                    vector::vector_family(rng, f, sig, module)
                }
                Kind::Regular | Kind::NearTwin => {
                    helper_family(rng, f, level, shape, twin, &self.helpers, module)
                }
            };
            self.helpers.push(family);
        }
        let families: Vec<_> = (0..entries)
            .map(|_| entry_kind_and_size(rng, shape))
            .collect();
        let first_family = self.entry_families;
        self.entry_families += entries;
        name_entries(&mut self.entry_names, first_family, &families);
        let first = self.entries.len();
        for (k, &family) in families.iter().enumerate() {
            entry_family(
                rng,
                first_family + k,
                family,
                shape,
                twin,
                &self.helpers,
                &self.entry_names,
                module,
                &mut self.entries,
            );
        }
        self.inputs.extend(inputs(rng, &self.entries, first, shape));
    }
}

/// A module from `seed`.
pub fn program(seed: u64, shape: Shape) -> Program {
    let mut module = ModuleText::default();

    let mut built = Families::default();
    built.add(
        &mut rng_for(seed),
        shape,
        Kind::Regular,
        (shape.helper_families, shape.entry_families),
        &mut module,
    );
    // Then, each kind from an RNG of its own and numbered after those before it: the
    // near-twin families, the constant-swap families, the wide ones and the vector ones.
    for (kind, mix, counts) in [
        (
            Kind::NearTwin,
            0x7717_4A11_6E5D,
            (shape.twin_helper_families, shape.twin_entry_families),
        ),
        (
            Kind::ConstantSwap,
            0xC05A_A9F1_71E5,
            (shape.constant_swap_families, 0),
        ),
        (
            Kind::WideConstantSwap,
            0x3A1D_E5CA_7A11,
            (shape.wide_constant_swap_families, 0),
        ),
        (Kind::Vector, 0x51ED_7EC7_0A11, (shape.vector_families, 0)),
    ] {
        let mut rng = rng_for(rng::mix(seed, mix));
        built.add(&mut rng, shape, kind, counts, &mut module);
    }
    let Families {
        helpers,
        mut entries,
        mut inputs,
        ..
    } = built;

    // Probes: every member of every helper family called by an entry of its own, inputs
    // from an RNG of their own. The `tail` helpers' first (as they were before the others
    // had probes), then the other scalar helpers', then the vector helpers', each from
    // another RNG.
    let mut probes =
        |probed: fn(HelperSig) -> bool, prefix: &str, mix: u64, inputs: &mut Vec<_>| {
            let first = entries.len();
            for (f, family) in helpers.iter().enumerate() {
                if !probed(family.sig) {
                    continue;
                }
                for (m, name) in family.names.iter().enumerate() {
                    let probe = format!("{prefix}{f}_{m}");
                    let text = match family.sig.is_vector() {
                        true => vector::probe(&probe, name, family.sig),
                        false => helper_probe(&probe, name, family.sig),
                    };
                    module.clif.push_str(&text);
                    module.functions += 1;
                    entries.push(Entry {
                        name: probe,
                        flags: 0,
                    });
                }
            }
            let mut rng = rng_for(rng::mix(seed, mix));
            inputs.extend(probe_inputs(&mut rng, &entries, first, shape));
            entries.len() - first
        };
    let tail_probes = probes(
        |sig| sig == HelperSig::Tail,
        "t",
        0x007A_1196_0BE5,
        &mut inputs,
    );
    let system_v_probes = probes(
        |sig| sig != HelperSig::Tail && !sig.is_vector(),
        "s",
        0x0575_7E3F_0BE5,
        &mut inputs,
    );
    let vector_probes = probes(HelperSig::is_vector, "v", 0x7EC7_0250_0BE5, &mut inputs);

    Program {
        clif: module.clif,
        entries,
        inputs,
        functions: module.functions,
        family_pairs: module.family_pairs,
        near_twin_pairs: module.near_twin_pairs,
        edits: module.edits,
        tail_probes,
        system_v_probes,
        constant_swap_families: module.constant_swap_families,
        wide_constant_swap_families: module.wide_constant_swap_families,
        vector_families: module.vector_families,
        vector_probes,
        linkages: [("hl*", "local"), ("hd*", "hidden"), ("hp*", "preemptible")]
            .map(|(glob, linkage)| (glob.to_string(), linkage.to_string()))
            .into(),
        // Odd seeds are optimized, as wasmtime compiles: the optimizer is what takes
        // memory flags at their word (merge-similar's weaker flags are checked there).
        settings: if seed % 2 == 1 {
            vec!["opt_level=speed".to_string()]
        } else {
            Vec::new()
        },
        architecture: None,
        stated_merges: Vec::new(),
    }
}

/// What writing a function left for choosing its family's variants.
#[derive(Clone, Copy)]
struct Written {
    /// Sites of each kind.
    sites: [usize; 9],
    /// Points of each structural edit kind.
    edit_points: [usize; Edit::ALL.len()],
    /// The structural edits that changed the function.
    applied: [bool; Edit::ALL.len()],
}

/// The site counts of the last function written.
fn last_counts() -> [usize; 9] {
    last_written().sites
}

/// What the last function written left.
fn last_written() -> Written {
    LAST.with(|c| c.get())
}

thread_local! {
    /// What the last function written left (for choosing mutations and edits).
    static LAST: std::cell::Cell<Written> = const {
        std::cell::Cell::new(Written {
            sites: [0; 9],
            edit_points: [0; Edit::ALL.len()],
            applied: [false; Edit::ALL.len()],
        })
    };
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        let written = Written {
            sites: self.counts,
            edit_points: self.edit_points,
            applied: self.applied,
        };
        LAST.with(|c| c.set(written));
    }
}

/// The program as text with a header comment (for a failure's reproduction).
pub fn with_header(p: &Program, seed: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "; differential seed {seed}: {} functions", p.functions);
    s.push_str(&p.clif);
    s
}
