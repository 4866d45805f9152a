//! Merge-similar: one body for functions that differ only in constants, offsets, call
//! targets and addresses, each original name a thunk that passes its own values; and one
//! body with the weaker memory flags for functions that differ only in those.
//!
//! Identical merging (the rest of [`crate::merge`](mod@crate::merge)) cannot fold `f(x) = x + 1` and
//! `g(x) = x + 2`, nor two trampolines that each call their own target, nor two copies of
//! a template that read a field at different offsets, nor two functions of which one says
//! a load is `aligned`. This pass can, as Swift's MergeFunctions, LLVM's GlobalMergeFunc
//! and Binaryen's MergeSimilarFunctions do:
//!
//! 1. **Classes.** The identical driver runs first; one representative per class of equal
//!    functions goes on. A callee is identified by its class when calls to it may be
//!    redirected (so two members calling equal functions agree), by name otherwise.
//! 2. **Groups.** Every representative is encoded in the comparator's hole mode
//!    ([`crate::detect::holes`]): integer and float constants, memory offsets, direct
//!    callees, `func_addr` and `symbol_value` targets, and the permissions among memory
//!    flags are holes. Equal encodings form a group; a value hole where all members agree
//!    is no hole, the others become parameters (permissions never do). Callees agree when
//!    they are equal functions, addresses only when they name the same symbol. A group
//!    needing more parameters than allowed is split, greedily and in order.
//! 3. **Bodies.** The shared body is the first member with a parameter appended per
//!    differing hole: a constant's or an address's uses read the parameter, a float
//!    constant becomes a `bitcast` of it (it travels as its bits, an integer), a load or
//!    store adds it to its address (offset 0), a call becomes `call_indirect` (or
//!    `return_call_indirect`) through it. Each memory access takes the permissions every
//!    member grants there ([`crate::detect::permissions`]). Every member of every class in
//!    the group becomes a thunk with its own name, signature and linkage that passes its
//!    values (`iconst`, `func_addr`, `symbol_value`) and tail-calls the body (`return_call`
//!    for the `tail` convention where Cranelift allows it, otherwise a call and a return).
//!    A group that needs no parameter (its members differ only in permissions, or in how
//!    their alias regions are numbered) gets no shared body and no thunk: every member
//!    takes the body itself, and the identical merger folds them as equal functions.
//! 4. **Frames.** A member that reads its return address, frame pointer or stack pointer
//!    is merged only when every thunk of its group keeps the caller's stack
//!    ([`CodeFacts::keeps_the_callers_stack`]: a register thunk, on x86_64 and aarch64,
//!    whose added values all travel in registers or in stack slots the caller gave): a
//!    thunk that calls the body and returns would stand between the body and its caller,
//!    and the body would see the thunk's frame; one that grows the stack argument area
//!    moves the body's frame down by what it adds. The report counts the groups this rule
//!    keeps apart.
//! 5. **Branch protection.** With aarch64's `use_bti`, a group is not merged when its
//!    body branches through a register, where the members branched directly (a callee
//!    hole), onto code that is no landing pad for that branch
//!    ([`adds_unlanded_indirect_branches`]; merging by alignment follows the same rule):
//!    - a tail call: Cranelift's `return_call_indirect` is a `br` through any register,
//!      which may land only on a `bti j` or `bti jc` pad, and every function it compiles
//!      starts with `bti c`;
//!    - with `sign_return_address` too, a call of a `tail` function: Cranelift signs the
//!      return address of a `tail` function that has a frame with `paciaz` (a zero
//!      modifier, since tail calls move the stack pointer) and starts it with that instead
//!      of `bti c`, and unlike `paciasp` it is no landing pad, so such a function can be
//!      called directly only (the differential tests found it, running
//!      `-mbranch-protection=standard`'s pair of settings where branch protection is
//!      enforced).
//!
//!    Either way the merged code would stop with an illegal instruction where the members
//!    ran.
//! 6. **Cost.** A group is merged only when the body and the thunks take fewer `.text`
//!    bytes than the originals, by the sizes [`CodeFacts`] gives: exact for a thunk
//!    written directly as machine code, estimated from the IR for everything else
//!    ([`crate::estimate`], calibrated per target against real compiles). Nothing is
//!    compiled here: the estimate decides profitability only, and every group built is
//!    sound whether it pays or not. A group without parameters is always taken: it adds
//!    no code.
//!
//! Recursion and cycles need no special case: a call to a member, itself included, is a
//! callee hole like any other, filled with the member's own address, so the shared body
//! calls the member's thunk, which passes the member's values again. A member that takes
//! its own address (`func_addr` or `symbol_value` of its name) likewise gets its thunk's
//! address, which is the member's address. Agreement between
//! callees uses only the identical merger's classes, which are sound (cycle classes
//! included); no optimistic assumption is made here.
//!
//! The result is a new module that the identical merger and the emitter take as usual (the
//! identical merger taking again what its first run learned of every function this pass
//! left as it was: [`crate::merge::merge_after_similar`]). Each
//! name keeps a body of its own (its thunk), so no address changes and every linkage is
//! kept: the linkage and address rules of identical merging apply unchanged to the new
//! module. Deterministic: groups are ordered by their encoding, members by index, and the
//! new bodies are appended in group order.

use std::collections::{BTreeMap, HashMap, HashSet};

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::{
    self, AbiParam, ExtFuncData, Function, InstBuilder, InstructionData, Opcode,
};
use cranelift_codegen::isa::{CallConv, TargetIsa};
use cranelift_entity::packed_option::ReservedValue;
use cranelift_entity::SecondaryMap;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::groups;
use super::module::{FuncIndex, Linkage, Module};
use super::MergeOptions;
use crate::detect::encode::Token;
use crate::detect::hash::StableState;
use crate::detect::holes::{address_operand, encode_with_holes, Hole, HoleValue};
use crate::detect::walk::CfgWalk;
use crate::detect::Permissions;
use crate::names::{external_name, fresh_symbol, user_func_name, FuncName};
use crate::target::{isa_flag, TargetInfo};

/// Most parameters a shared body may add, whatever the calling convention. For `tail`
/// functions, whose thunks pass what does not fit the argument registers on the stack,
/// the cost model weighs the rest: on the corpora, 12 merges every group that 16 or 32
/// would that pays (zstd: three groups of 9 to 11 holes, 10.7 kB; 8 left them apart),
/// while 16 and 32 let re2's cost model take three groups that turned out larger.
pub const MAX_HOLES: usize = 12;

/// One group merged by this pass.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SimilarGroup {
    /// The new local function holding the shared body.
    pub body: String,
    /// Every name that became a thunk into it, in index order.
    pub members: Vec<String>,
    /// Parameters the body takes beyond the members' own.
    pub holes: usize,
    /// `.text` bytes of the members' distinct bodies before, as the cost model weighs
    /// them ([`CodeFacts::text_size`]: estimated from the IR).
    pub bytes_before: u64,
    /// `.text` bytes of the shared body and the thunks after, weighed the same way.
    pub bytes_after: u64,
    /// `.text` bytes of every member compiled from its own body, equal members each
    /// counted (what the group takes unmerged), as the cost model weighs them (estimated
    /// from the IR; 0 without the cost model). The command line replaces it with the
    /// members compiled from their bodies as read when it shows sizes.
    pub unmerged_bytes: u64,
    /// Merged by alignment ([`super::aligned`]): two members whose differing instructions
    /// the body guards by its one parameter, an identifier (1 for the first member, 0 for
    /// the second); `false` for a group of holes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aligned: bool,
    /// Merged by alignment with unlike blocks ([`SimilarOptions::unlike_blocks`]): the
    /// body has blocks of one member alone, or branches where the members go to other
    /// blocks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unlike_blocks: bool,
    /// Bytes of the shared body in the object written (filled by the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_bytes: Option<u64>,
    /// Bytes the group saves in the object written: `unmerged_bytes` minus the shared
    /// body and the code its members' calls run (their thunks). Filled by the report when
    /// an object was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_bytes: Option<i64>,
}

/// Options of merge-similar.
#[derive(Clone, Debug)]
pub struct SimilarOptions {
    /// Merge a group only when its shared body and thunks take fewer bytes than its
    /// members, by the cost model's estimate (on by default). Off, every group within the
    /// parameter limit is merged: for tests of the rewriting itself.
    pub cost_model: bool,
    /// After the groups of holes, merge pairs of the functions left whose instructions
    /// align, differences guarded by an identifier parameter ([`super::aligned`]; on by
    /// default).
    pub alignment: bool,
    /// Alignment merging also pairs functions whose blocks do not pair one to one by
    /// position: blocks with other parameter types, blocks only one side has (each side's
    /// alone in the body). More is merged at a higher cost (off by default; README).
    pub unlike_blocks: bool,
}

impl Default for SimilarOptions {
    fn default() -> Self {
        Self {
            cost_model: true,
            alignment: true,
            unlike_blocks: false,
        }
    }
}

/// What the pass did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SimilarReport {
    /// The groups merged.
    pub groups: Vec<SimilarGroup>,
    /// Groups of similar functions the cost model turned down.
    pub rejected_by_cost: usize,
    /// Similar functions left alone because their group needed too many parameters.
    pub over_hole_limit: usize,
    /// Groups left apart because a member reads its frame (return address, frame
    /// pointer, stack pointer) and a thunk of the group would add a frame (it is not a
    /// register thunk of the target).
    #[serde(default)]
    pub frame_readers_behind_framed_thunks: usize,
    /// Groups of functions that needed no parameter: equal but for the permissions of
    /// their memory flags, the numbering of their alias regions, or callees of one class.
    /// Each member was given one body (the first's, with the intersection of the
    /// permissions), so that the identical merger folds them as it folds any equal
    /// functions: no shared body, no thunk. Every name, in index order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub made_equal: Vec<Vec<String>>,
    /// Bodies merging by alignment built and chose but Cranelift's verifier rejected
    /// (dropped, their pairs left unmerged). Always 0 unless the builder has a bug: the
    /// tests require 0 (debug builds panic instead).
    #[serde(default)]
    pub aligned_bodies_failing_the_verifier: usize,
}

impl SimilarReport {
    /// Names turned into thunks.
    pub fn thunk_count(&self) -> usize {
        self.groups.iter().map(|g| g.members.len()).sum()
    }

    /// Bytes saved by the groups merged, by the cost model's estimate.
    pub fn bytes_saved(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.bytes_before.saturating_sub(g.bytes_after))
            .sum()
    }
}

/// What merge-similar asks of the code generator: facts about machine code, which belong
/// to emission. Emission implements it for every `TargetIsa` ([`crate::emit::compile`]);
/// this analysis stage owns the question and never imports the answer's code.
pub trait CodeFacts {
    /// The bytes `func` takes in `.text` once compiled by Cranelift, as the cost model
    /// weighs them. For a `TargetIsa`: estimated from the IR ([`crate::estimate`]),
    /// without compiling. A pure function of `func` and the target.
    fn text_size(&self, func: &Function) -> u64;
    /// `thunk` (a merge-similar thunk) as emission writes it directly as machine code, a
    /// jump after moving the added values into place; `None` when Cranelift compiles it.
    fn written_thunk(&self, thunk: &Function) -> Option<WrittenThunk>;
    /// The bytes `thunk` (a merge-similar thunk) takes in `.text`: exact for a written
    /// thunk, [`Self::text_size`] otherwise.
    fn thunk_size(&self, thunk: &Function) -> u64 {
        match self.written_thunk(thunk) {
            Some(written) => written.bytes,
            None => self.text_size(thunk),
        }
    }
    /// Whether the body behind `thunk` (a merge-similar thunk) sees the stack exactly as
    /// the thunk's caller left it: a written thunk that adds no frame and does not grow
    /// the stack argument area, so a body that reads its frame pointer, stack pointer or
    /// return address reads what the member it replaces would have.
    fn keeps_the_callers_stack(&self, thunk: &Function) -> bool {
        self.written_thunk(thunk)
            .is_some_and(|written| !written.moves_stack_pointer)
    }
}

/// What [`CodeFacts::written_thunk`] tells of a thunk written as machine code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrittenThunk {
    /// Its exact bytes in `.text`.
    pub bytes: u64,
    /// It moves the stack pointer before its jump: it grows the stack argument area for
    /// values that travel on the stack. No frame, but the body's frame sits lower than
    /// the member's would.
    pub moves_stack_pointer: bool,
}

/// A hole value's identity for agreement: two calls agree when they reach equal
/// functions; two addresses when they name the same symbol (equal functions may still
/// have different addresses).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Identity {
    Constant(usize, i64),
    Class(FuncIndex),
    Name(FuncName),
    Address(FuncName, i64),
    /// Never a parameter: the body takes the intersection.
    Flags(Permissions),
}

/// A group of representatives, its differing hole positions, and what was built for it.
#[derive(Clone)]
struct Candidate {
    members: Vec<FuncIndex>,
    /// The body's extra parameters, each the hole positions it fills.
    params: Vec<Vec<usize>>,
    /// A pair merged by alignment (its one parameter the identifier).
    aligned: bool,
    /// Merged by alignment with unlike blocks ([`SimilarGroup::unlike_blocks`]).
    unlike_blocks: bool,
}

/// A group merge-similar can merge, as built before the cost model decides: one member
/// per class of equal functions, the shared body (not yet named) and each member's thunk.
pub struct SimilarCandidate {
    /// The members, in index order.
    pub members: Vec<FuncIndex>,
    /// The shared body.
    pub body: Box<Function>,
    /// Each member's thunk into the body.
    pub thunks: Vec<(FuncIndex, Box<Function>)>,
}

impl SimilarCandidate {
    /// The `.text` bytes of the members before and of the body and thunks after, by
    /// `facts`: what the cost model compares (a group is merged when `after < before`).
    pub fn cost<F: CodeFacts + ?Sized>(&self, module: &Module, facts: &F) -> (u64, u64) {
        let (sizes, after) = group_cost(module, &self.members, &self.body, &self.thunks, facts);
        (sizes.iter().sum(), after)
    }
}

/// The size of each member, and of the body and thunks together (see
/// [`SimilarCandidate::cost`]).
fn group_cost<F: CodeFacts + ?Sized>(
    module: &Module,
    members: &[FuncIndex],
    body: &Function,
    thunks: &[(FuncIndex, Box<Function>)],
    facts: &F,
) -> (Vec<u64>, u64) {
    let before = members
        .iter()
        .map(|&m| facts.text_size(&module.get(m).func))
        .collect();
    let after =
        facts.text_size(body) + thunks.iter().map(|(_, t)| facts.thunk_size(t)).sum::<u64>();
    (before, after)
}

/// Every group merge-similar would consider in `module`, built (shared body and thunks)
/// but not weighed: for calibrating and testing the cost model. Groups whose members read
/// their frame and whose thunks would add one are left out, as [`merge_similar`] does.
pub fn similar_candidates(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    options: &MergeOptions,
) -> Vec<SimilarCandidate> {
    let analysis = analyse(module, target, options, false);
    build_all(module, target, isa, &analysis)
        .into_iter()
        .flatten()
        .filter(|(c, _)| !c.params.is_empty())
        .map(|(c, b)| SimilarCandidate {
            members: c.members,
            body: b.body,
            thunks: b.thunks,
        })
        .collect()
}

/// Every pair alignment merging's first search finds among the representatives that no
/// group with holes would take, built (body and thunks) but not weighed, whatever other
/// pair its members are in: for calibrating and testing the cost model on what alignment
/// merging asks it ([`super::aligned::candidate_pairs`]).
pub fn aligned_candidates(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    options: &MergeOptions,
) -> Vec<SimilarCandidate> {
    let analysis = analyse(module, target, options, false);
    let taken = analysis
        .candidates
        .iter()
        .flat_map(|c| c.members.iter().copied());
    let free = left_for_alignment(module, &analysis.siblings, taken);
    let identifier = identifier_thunks(module, isa);
    super::aligned::candidate_pairs(module, target, isa, &free, &identifier)
        .into_iter()
        .map(|(merged, thunks)| SimilarCandidate {
            members: vec![merged.left, merged.right],
            body: merged.body,
            thunks,
        })
        .collect()
}

/// The classes of equal functions, the representatives' holes, and the groups that fit
/// the parameter limit.
struct Analysis {
    siblings: SecondaryMap<FuncIndex, Vec<FuncIndex>>,
    /// What the identical run learned of the module, when asked to remember it.
    first_run: Option<groups::FirstPassMemory>,
    holes: SecondaryMap<FuncIndex, Vec<Hole>>,
    candidates: Vec<Candidate>,
    over_hole_limit: usize,
}

fn analyse(
    module: &Module,
    target: &TargetInfo,
    options: &MergeOptions,
    remember: bool,
) -> Analysis {
    let (found, first_run) =
        groups::find_groups_remembering(module, target, options, None, remember);
    let mut class_of: SecondaryMap<FuncIndex, FuncIndex> = SecondaryMap::new();
    let mut siblings: SecondaryMap<FuncIndex, Vec<FuncIndex>> = SecondaryMap::new();
    for f in module.indices() {
        class_of[f] = f;
    }
    for (members, _) in &found.groups {
        for &m in members {
            class_of[m] = members[0];
        }
        siblings[members[0]] = members.clone();
    }
    // Merge-similar's own thunks (from CLIF it wrote, read again) are never members: a
    // group of them would put a shared body, which calls, where a jump was.
    let reps: Vec<FuncIndex> = module
        .indices()
        .filter(|&f| class_of[f] == f && !module.get(f).similar_thunk)
        .collect();

    // Hole encodings of the representatives that share their hash with another (the hash
    // reads neither constants nor callees; the identical driver's walk computed it), in
    // parallel.
    let mut per_hash: HashMap<u64, u32, StableState> = HashMap::default();
    let hashes: Vec<u64> = reps
        .iter()
        .map(|&f| found.hashes[f.as_u32() as usize])
        .collect();
    for &h in &hashes {
        *per_hash.entry(h).or_default() += 1;
    }
    let shared: Vec<(FuncIndex, u64)> = reps
        .iter()
        .zip(&hashes)
        .filter(|(_, h)| per_hash[*h] > 1)
        .map(|(&f, &h)| (f, h))
        .collect();
    let encoded: Vec<(Vec<Token>, Vec<Hole>)> = shared
        .par_iter()
        .map(|&(f, _)| encode_with_holes(&module.get(f).func, target))
        .collect();
    let mut by_shape: BTreeMap<(u64, Vec<Token>), Vec<FuncIndex>> = BTreeMap::new();
    let mut holes: SecondaryMap<FuncIndex, Vec<Hole>> = SecondaryMap::new();
    for (&(f, h), (tokens, hs)) in shared.iter().zip(encoded) {
        if hs.is_empty() {
            continue;
        }
        holes[f] = hs;
        by_shape.entry((h, tokens)).or_default().push(f);
    }
    let groups: Vec<Vec<FuncIndex>> = by_shape.into_values().filter(|m| m.len() > 1).collect();

    // Identities, and the groups that fit the parameter limit, in parallel.
    let identity = |hole: &Hole| -> Identity {
        match &hole.value {
            HoleValue::Constant { ty, bits } | HoleValue::Offset { ty, bits } => {
                Identity::Constant(ty.index(), *bits)
            }
            HoleValue::Float { ty, bits } => Identity::Constant(ty.index(), *bits as i64),
            HoleValue::Callee { name, .. } => match module.lookup(name) {
                Some(c) if module.get(c).linkage != Linkage::Preemptible => {
                    Identity::Class(class_of[c])
                }
                _ => Identity::Name(name.clone()),
            },
            HoleValue::Address { name, .. } => Identity::Address(name.clone(), 0),
            HoleValue::Symbol { name, offset, .. } => Identity::Address(name.clone(), *offset),
            HoleValue::Flags(permissions) => Identity::Flags(*permissions),
        }
    };
    let split: Vec<(Vec<Candidate>, usize)> = groups
        .par_iter()
        .map(|members| {
            let values: Vec<Vec<Identity>> = members
                .iter()
                .map(|&f| holes[f].iter().map(identity).collect())
                .collect();
            let func = &module.get(members[0]).func;
            split_by_limit(members, &values, hole_limit(target, &func.signature))
        })
        .collect();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut over_hole_limit = 0;
    for (fitting, over) in split {
        over_hole_limit += over;
        candidates.extend(fitting);
    }
    Analysis {
        siblings,
        first_run,
        holes,
        candidates,
        over_hole_limit,
    }
}

/// Why a candidate group was not built.
enum NotBuilt {
    /// The body or a thunk cannot be written (a hole of a kind without a parameter).
    Unbuildable,
    /// A member reads its frame and a thunk would add one (the frame rule).
    FrameReaderBehindFramedThunk,
    /// The body would branch through a register onto no landing pad under branch
    /// protection.
    UnlandedIndirectBranch,
}

/// What aarch64's branch protection, where `isa` has it on (`use_bti`), lets an indirect
/// branch land on in code Cranelift compiled (the branch-protection rule above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchProtection {
    /// Return addresses are signed (`sign_return_address`): a `tail` function with a
    /// frame (with `sign_return_address_all`, every one) starts with `paciaz` (`pacibz`
    /// with the B key), no landing pad, and can be called directly only.
    pub signs_return_addresses: bool,
}

impl BranchProtection {
    /// `isa`'s, or `None` when it has no branch protection.
    pub fn of(isa: &dyn TargetIsa) -> Option<BranchProtection> {
        // Asked for every group and pair: the flags are listed only where it matters.
        isa.is_branch_protection_enabled()
            .then(|| BranchProtection {
                signs_return_addresses: isa_flag(isa, "sign_return_address"),
            })
    }
}

/// Whether `body` branches through a register onto what may be no landing pad under
/// `protection` more often than any of `members` does: where a merge turned direct calls
/// into calls through a register (a callee hole) that branch protection stops. Counted
/// apart: tail calls through a register (`return_call_indirect`, a `br` that no function
/// Cranelift compiled accepts), and, when return addresses are signed, other calls
/// through a register of a `tail` function (whose `paciaz` is no landing pad). Only
/// blocks reachable from the entry count: one a member never runs must not stand for a
/// call its body makes.
pub fn adds_unlanded_indirect_branches<'f>(
    body: &Function,
    members: impl IntoIterator<Item = &'f Function>,
    protection: BranchProtection,
) -> bool {
    let count = |f: &Function| {
        let mut counts = [0usize; 2];
        for inst in CfgWalk::new(f).flat_map(|b| f.layout.block_insts(b)) {
            let tail_callee = || {
                f.dfg
                    .call_signature(inst)
                    .is_some_and(|sig| f.dfg.signatures[sig].call_conv == CallConv::Tail)
            };
            match f.dfg.insts[inst].opcode() {
                ir::Opcode::ReturnCallIndirect => counts[0] += 1,
                ir::Opcode::CallIndirect | ir::Opcode::TryCallIndirect
                    if protection.signs_return_addresses && tail_callee() =>
                {
                    counts[1] += 1
                }
                _ => {}
            }
        }
        counts
    };
    let most = members
        .into_iter()
        .map(count)
        .fold([0, 0], |a, b| [a[0].max(b[0]), a[1].max(b[1])]);
    let added = count(body);
    added[0] > most[0] || added[1] > most[1]
}

/// Build every candidate in parallel (in candidate order), or say why not: the body cannot
/// be built, it reads its frame behind a thunk that would add one, or it would tail-call
/// through a register under branch protection.
fn build_all(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    analysis: &Analysis,
) -> Vec<Result<(Candidate, Built), NotBuilt>> {
    let tail_calls = crate::target::isa_thunks_tail_call(isa);
    let config = isa.frontend_config();
    analysis
        .candidates
        .par_iter()
        .map(|c| {
            let built = build(module, target, config, tail_calls, &analysis.holes, c)
                .ok_or(NotBuilt::Unbuildable)?;
            // A body that reads its frame runs behind thunks that keep the caller's stack
            // only (a jump after loading registers): a thunk that calls would be the
            // body's caller, one that grows the stack area would move the body's frame.
            let reads_frame = c
                .members
                .iter()
                .any(|&m| module.get(m).observes_its_frame());
            let keeps = |t: &Function| isa.keeps_the_callers_stack(t);
            if reads_frame && !built.thunks.iter().all(|(_, t)| keeps(t)) {
                return Err(NotBuilt::FrameReaderBehindFramedThunk);
            }
            let members = c.members.iter().map(|&m| &*module.get(m).func);
            if BranchProtection::of(isa)
                .is_some_and(|p| adds_unlanded_indirect_branches(&built.body, members, p))
            {
                return Err(NotBuilt::UnlandedIndirectBranch);
            }
            Ok((c.clone(), built))
        })
        .collect()
}

/// Run merge-similar on `module` (after which the identical merger and the emitter run on
/// the returned module as usual). `isa` is the target the thunks are written for and
/// whose [`CodeFacts`] the cost model weighs with; `options` are the identical merger's,
/// whose classes come first.
pub fn merge_similar(
    module: Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    options: &MergeOptions,
    similar: &SimilarOptions,
) -> (Module, SimilarReport) {
    let (module, report, replaced) =
        merge_similar_keeping_replaced(module, target, isa, options, similar);
    // The replaced bodies are many and large: freed on every thread.
    replaced.by_index.into_par_iter().for_each(drop);
    (module, report)
}

/// The bodies merge-similar replaced, as they were read: every function it turned into a
/// thunk or gave a made-equal body. Handed back rather than freed by the pass: freeing
/// thousands of bodies is work a caller can do once the code is compiled, and with the
/// rewritten module they are the module as read, for whoever needs it (the command line's
/// size reports) without a copy of the whole module made beforehand.
#[derive(Default)]
pub struct Replaced {
    /// Each replaced function and its body, in index order once [`Self::sorted`]. The
    /// bodies are boxed as the module keeps them: one moves out of the module, and is
    /// sorted here, as a pointer.
    by_index: Vec<(FuncIndex, Box<Function>)>,
    /// What the identical run merge-similar started from learned of the module as read,
    /// for the identical run of the rewritten module
    /// ([`crate::merge::merge_after_similar`], which takes it).
    first_run: Option<groups::FirstPassMemory>,
}

impl Replaced {
    /// `f`'s body as read, if merge-similar replaced it.
    pub fn get(&self, f: FuncIndex) -> Option<&Function> {
        let at = self.by_index.binary_search_by_key(&f, |(g, _)| *g).ok()?;
        Some(&self.by_index[at].1)
    }

    /// `f`'s body as read: the one replaced, or `module`'s (the module merge-similar
    /// returned, in which every function read keeps its index).
    pub fn as_read<'a>(&'a self, module: &'a Module, f: FuncIndex) -> &'a Function {
        self.get(f).unwrap_or(&module.get(f).func)
    }

    /// How many bodies were replaced.
    pub fn len(&self) -> usize {
        self.by_index.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.by_index.is_empty()
    }

    /// What the identical run of the module as read learned, taken out (once).
    pub(crate) fn take_first_run(&mut self) -> Option<groups::FirstPassMemory> {
        self.first_run.take()
    }

    /// Keep `body`, which `f` had (each function at most once); [`Self::sorted`] when done.
    fn push(&mut self, f: FuncIndex, body: Box<Function>) {
        self.by_index.push((f, body));
    }

    /// Room for `n` more bodies.
    fn reserve(&mut self, n: usize) {
        self.by_index.reserve(n);
    }

    /// Ready to be looked up.
    fn sorted(mut self) -> Self {
        self.by_index.sort_unstable_by_key(|(f, _)| *f);
        self
    }
}

/// [`merge_similar`], handing back the bodies it replaced instead of freeing them.
pub fn merge_similar_keeping_replaced(
    module: Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    options: &MergeOptions,
    similar: &SimilarOptions,
) -> (Module, SimilarReport, Replaced) {
    let mut report = SimilarReport::default();
    let mut replaced = Replaced::default();
    let mut analysis = analyse(&module, target, options, true);
    report.over_hole_limit = analysis.over_hole_limit;
    replaced.first_run = analysis.first_run.take();
    let built_or_not = build_all(&module, target, isa, &analysis);
    report.frame_readers_behind_framed_thunks = built_or_not
        .iter()
        .filter(|b| matches!(b, Err(NotBuilt::FrameReaderBehindFramedThunk)))
        .count();
    let built: Vec<Option<(Candidate, Built)>> = built_or_not
        .into_par_iter()
        .map(|entry| {
            let (c, built) = entry.ok()?;
            if !similar.cost_model || c.params.is_empty() {
                return Some((c, built));
            }
            let (sizes, after) = group_cost(&module, &c.members, &built.body, &built.thunks, isa);
            let before = sizes.iter().sum();
            let unmerged = c
                .members
                .iter()
                .zip(&sizes)
                .map(|(&m, &bytes)| bytes * analysis.siblings[m].len().max(1) as u64)
                .sum();
            Some((
                c,
                Built {
                    before,
                    after,
                    unmerged,
                    ..built
                },
            ))
        })
        .collect();
    let siblings = analysis.siblings;

    // The groups that pay, each body named (in group order, so names do not depend on
    // threads).
    let mut in_use: Option<HashSet<String>> = None;
    let mut accepted: Vec<(Candidate, Built, FuncName)> = Vec::new();
    let mut made_equal: Vec<(Vec<FuncIndex>, Box<Function>)> = Vec::new();
    for (candidate, b) in built.into_iter().flatten() {
        if candidate.params.is_empty() {
            // Equal once their permissions meet (and their regions and callees are named
            // alike): every member takes the body, and the identical merger folds them as
            // it folds any equal functions. Never larger.
            let mut names: Vec<FuncIndex> = candidate
                .members
                .iter()
                .flat_map(|&rep| match siblings[rep].as_slice() {
                    [] => vec![rep],
                    class => class.to_vec(),
                })
                .collect();
            names.sort_unstable();
            made_equal.push((names, b.body));
            continue;
        }
        if similar.cost_model && b.after >= b.before {
            report.rejected_by_cost += 1;
            continue;
        }
        let in_use = in_use.get_or_insert_with(|| module.symbols_starting_with(BODY_PREFIX));
        let name = unique_body_name(in_use, "", &module.get(candidate.members[0]).name);
        accepted.push((candidate, b, name));
    }
    if similar.alignment {
        let in_use = in_use.get_or_insert_with(|| module.symbols_starting_with(BODY_PREFIX));
        let (pairs, failed) = aligned_pairs(
            &module,
            target,
            isa,
            similar,
            &siblings,
            &accepted,
            &made_equal,
            in_use,
        );
        report.aligned_bodies_failing_the_verifier = failed;
        accepted.extend(pairs);
    }
    let mut module = module;
    for (members, body) in made_equal {
        report.made_equal.push(
            members
                .iter()
                .map(|&m| module.get(m).name.to_string())
                .collect(),
        );
        for m in members {
            let mut func = body.clone();
            func.name = module.get(m).func.name.clone();
            replaced.push(m, std::mem::replace(&mut module.get_mut(m).func, func));
        }
    }
    if accepted.is_empty() {
        return (module, report, replaced.sorted());
    }

    // Every member of every class in a group gets the thunk of its representative (equal
    // functions have equal signatures: it fits every one of them), in parallel.
    type Finished = (SimilarGroup, Box<Function>, Vec<(FuncIndex, Box<Function>)>);
    let finished: Vec<Finished> = accepted
        .into_par_iter()
        .map(|(candidate, b, name)| {
            let mut body = b.body;
            body.name = user_func_name(&name);
            let mut thunks = Vec::new();
            for (rep, mut thunk) in b.thunks {
                rename_body_calls(&mut thunk, &name);
                let class = siblings[rep].as_slice();
                for &m in class.iter().filter(|&&m| m != rep) {
                    let mut t = thunk.clone();
                    t.name = module.get(m).func.name.clone();
                    thunks.push((m, t));
                }
                thunks.push((rep, thunk));
            }
            thunks.sort_unstable_by_key(|(m, _)| *m);
            let members: Vec<String> = thunks
                .iter()
                .map(|(m, _)| module.get(*m).name.to_string())
                .collect();
            let group = SimilarGroup {
                body: name.to_string(),
                members,
                holes: candidate.params.len(),
                aligned: candidate.aligned,
                unlike_blocks: candidate.unlike_blocks,
                bytes_before: b.before,
                bytes_after: b.after,
                unmerged_bytes: b.unmerged,
                body_bytes: None,
                saved_bytes: None,
            };
            (group, body, thunks)
        })
        .collect();

    // The new module: thunks in place of members, shared bodies appended in group order.
    let mut bodies: Vec<Box<Function>> = Vec::with_capacity(finished.len());
    replaced.reserve(finished.iter().map(|(_, _, thunks)| thunks.len()).sum());
    for (group, body, thunks) in finished {
        for (m, thunk) in thunks {
            let member = module.get_mut(m);
            member.similar_thunk = true;
            replaced.push(m, std::mem::replace(&mut member.func, thunk));
        }
        report.groups.push(group);
        bodies.push(body);
    }
    for body in bodies {
        module
            .add(body, Linkage::Local, true)
            .expect("shared body names are fresh");
    }
    (module, report, replaced.sorted())
}

/// The functions alignment merging may pair, in index order: the representatives of
/// their classes of equal functions (classmates after the first are represented by it)
/// that are not `taken` by a group with holes, nor merge-similar's thunks.
fn left_for_alignment(
    module: &Module,
    siblings: &SecondaryMap<FuncIndex, Vec<FuncIndex>>,
    taken: impl Iterator<Item = FuncIndex>,
) -> Vec<FuncIndex> {
    let mut busy: HashSet<FuncIndex> = taken.collect();
    for f in module.indices() {
        busy.extend(siblings[f].iter().skip(1).copied());
    }
    module
        .indices()
        .filter(|&f| !busy.contains(&f) && !module.get(f).similar_thunk)
        .collect()
}

/// The pairs alignment merging takes among the representatives that no group of holes
/// took ([`super::aligned`]), as candidates with their bodies and thunks, each named.
#[allow(clippy::too_many_arguments)]
fn aligned_pairs(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    similar: &SimilarOptions,
    siblings: &SecondaryMap<FuncIndex, Vec<FuncIndex>>,
    accepted: &[(Candidate, Built, FuncName)],
    made_equal: &[(Vec<FuncIndex>, Box<Function>)],
    in_use: &mut HashSet<String>,
) -> (Vec<(Candidate, Built, FuncName)>, usize) {
    let taken = accepted
        .iter()
        .flat_map(|(c, _, _)| c.members.iter().copied())
        .chain(made_equal.iter().flat_map(|(m, _)| m.iter().copied()));
    let free = left_for_alignment(module, siblings, taken);
    let identifier = identifier_thunks(module, isa);
    let (merged, failed) = super::aligned::merge_aligned(
        module,
        target,
        isa,
        &free,
        similar.cost_model,
        similar.unlike_blocks,
        &identifier,
    );
    let pairs = merged
        .into_iter()
        .map(|(merged, thunks)| {
            let members = vec![merged.left, merged.right];
            let unmerged = members
                .iter()
                .zip(merged.member_bytes)
                .map(|(&m, bytes)| bytes * siblings[m].len().max(1) as u64)
                .sum();
            let name = unique_body_name(in_use, "aligned_", &module.get(merged.left).name);
            (
                Candidate {
                    members,
                    // Only the identifier is reported.
                    params: vec![vec![0]],
                    aligned: true,
                    unlike_blocks: merged.unlike_blocks,
                },
                Built {
                    body: merged.body,
                    thunks,
                    before: merged.before,
                    after: merged.after,
                    unmerged,
                },
                name,
            )
        })
        .collect();
    (pairs, failed)
}

/// The thunk writer of merging by alignment: a member's thunk passes its own arguments,
/// then the integer values given (zeros and its identifier), as merge-similar's thunks
/// pass their holes.
fn identifier_thunks<'m>(
    module: &'m Module,
    isa: &'m dyn TargetIsa,
) -> impl Fn(FuncIndex, &ir::Signature, &[(ir::Type, i64)]) -> Option<Function> + Sync + 'm {
    let tail_calls = crate::target::isa_thunks_tail_call(isa);
    let config = isa.frontend_config();
    move |member: FuncIndex, body: &ir::Signature, values: &[(ir::Type, i64)]| {
        let holes: Vec<Hole> = values
            .iter()
            .map(|&(ty, bits)| Hole {
                inst: ir::Inst::reserved_value(),
                value: HoleValue::Constant { ty, bits },
            })
            .collect();
        let params: Vec<Vec<usize>> = (0..holes.len()).map(|i| vec![i]).collect();
        thunk(
            &module.get(member).func,
            &holes,
            &params,
            body,
            config,
            tail_calls,
        )
    }
}

/// Whether merging by alignment would merge `a` and `b` (of `module` as read) if each
/// were the other's candidate partner: the estimated bytes before and after, or why not.
/// For `--explain`; the pass itself also needs them to be partners and free.
pub fn explain_aligned(
    module: &Module,
    target: &TargetInfo,
    isa: &dyn TargetIsa,
    a: FuncIndex,
    b: FuncIndex,
    unlike_blocks: bool,
) -> Result<(u64, u64), super::aligned::Declined> {
    let writer = identifier_thunks(module, isa);
    super::aligned::explain_pair(module, target, isa, a, b, unlike_blocks, &writer)
}

/// A candidate's shared body (named later) and one thunk per representative.
struct Built {
    body: Box<Function>,
    thunks: Vec<(FuncIndex, Box<Function>)>,
    before: u64,
    after: u64,
    unmerged: u64,
}

/// What the names of shared bodies start with.
const BODY_PREFIX: &str = "clif_merge_similar_";

/// The name every thunk calls before the body is named.
const BODY_PLACEHOLDER: &str = "clif_merge_similar_body";

/// How many parameters a shared body with `signature` may add: within the argument
/// registers for conventions that cannot tail-call, at most [`MAX_HOLES`] for `tail`.
fn hole_limit(target: &TargetInfo, signature: &ir::Signature) -> usize {
    if signature.call_conv == CallConv::Tail {
        return MAX_HOLES;
    }
    let registers: usize = match (target.triple().architecture, signature.call_conv) {
        (_, CallConv::WindowsFastcall) => 4,
        (target_lexicon::Architecture::Aarch64(_), _) => 8,
        (target_lexicon::Architecture::X86_64, _) => 6,
        _ => 0,
    };
    let used: usize = if signature.call_conv == CallConv::WindowsFastcall {
        // Fastcall counts registers by position, whatever the parameter's class.
        signature.params.len()
    } else {
        signature
            .params
            .iter()
            .map(|p| match p.value_type {
                t if t.is_int() && t.bits() > 64 => 2,
                t if t.is_int() => 1,
                _ => 0,
            })
            .sum()
    };
    // More than one result may need a return area, whose pointer takes a register.
    let return_area = usize::from(signature.returns.len() > 1);
    registers.saturating_sub(used + return_area).min(MAX_HOLES)
}

/// The parameters a shared body for `run` needs: the value holes where the members do
/// not all agree, those with the same values in every member sharing one parameter, in
/// order of their first hole. Permissions are never parameters.
fn parameters(run: &[usize], values: &[Vec<Identity>]) -> Vec<Vec<usize>> {
    let mut params: Vec<Vec<usize>> = Vec::new();
    let mut by_column: HashMap<Vec<&Identity>, usize, StableState> = HashMap::default();
    let first = &values[run[0]];
    for (i, value) in first.iter().enumerate() {
        if matches!(value, Identity::Flags(_)) || run.iter().all(|&m| values[m][i] == *value) {
            continue;
        }
        let column: Vec<&Identity> = run.iter().map(|&m| &values[m][i]).collect();
        match by_column.get(&column) {
            Some(&p) => params[p].push(i),
            None => {
                by_column.insert(column, params.len());
                params.push(vec![i]);
            }
        }
    }
    params
}

/// Split `members` (with their hole values) into runs whose parameters fit `limit`.
/// Members are taken in order of their values, so that similar values end up together;
/// a run of one is left alone. A run that needs no parameter is a candidate too: its
/// members become equal. Returns the candidates and how many members were left out.
///
/// Each member that joins a run costs time in the holes alone ([`RunParameters`]), not in
/// the run's length: 20,000 trampolines that differ only in their callees are one run.
fn split_by_limit(
    members: &[FuncIndex],
    values: &[Vec<Identity>],
    limit: usize,
) -> (Vec<Candidate>, usize) {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| values[a].cmp(&values[b]).then(members[a].cmp(&members[b])));
    let mut out = Vec::new();
    let mut left_out = 0;
    let flush = |run: &mut Vec<usize>, out: &mut Vec<Candidate>, left_out: &mut usize| {
        if run.len() < 2 {
            *left_out += run.len();
        } else {
            let mut ms: Vec<FuncIndex> = run.iter().map(|&i| members[i]).collect();
            ms.sort_unstable();
            out.push(Candidate {
                members: ms,
                params: parameters(run, values),
                aligned: false,
                unlike_blocks: false,
            });
        }
        run.clear();
    };
    let interned = intern(values);
    let mut run: Vec<usize> = Vec::new();
    let mut counted = RunParameters::with_holes(values.first().map_or(0, Vec::len));
    for (k, &i) in order.iter().enumerate() {
        if k == 0 {
            counted.start(&interned, i);
        } else if !counted.join(&interned, i, limit) {
            flush(&mut run, &mut out, &mut left_out);
            counted.start(&interned, i);
        }
        run.push(i);
    }
    flush(&mut run, &mut out, &mut left_out);
    (out, left_out)
}

/// The hole values of each member as numbers, equal numbers for equal values (in order of
/// first appearance), each with whether it is a permission (never a parameter).
fn intern(values: &[Vec<Identity>]) -> Vec<Vec<(u32, bool)>> {
    let all = values.iter().map(Vec::len).sum();
    let mut numbers: FxHashMap<&Identity, u32> =
        FxHashMap::with_capacity_and_hasher(all, Default::default());
    values
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| {
                    let next = numbers.len() as u32;
                    let n = *numbers.entry(v).or_insert(next);
                    (n, matches!(v, Identity::Flags(_)))
                })
                .collect()
        })
        .collect()
}

/// Whether a run of members still fits the parameter limit when one more joins: how many
/// parameters it needs ([`parameters`]`(run).len()`), found in time linear in the holes
/// whatever the run's length.
///
/// Two hole positions share a parameter when their columns (the values of every member of
/// the run) are equal, so the positions are kept partitioned by column: a member that
/// joins splits each class by its own values there. A class is a parameter when its column
/// is not one value throughout and its first value is no permission.
#[derive(Default)]
struct RunParameters {
    /// The first member's values.
    first: Vec<(u32, bool)>,
    /// Each position's class of equal columns, numbered from 0.
    class: Vec<u32>,
    /// Whether some member's value at the position differs from the first member's.
    varies: Vec<bool>,
    /// Scratch for a member that may join.
    next_class: Vec<u32>,
    next_varies: Vec<bool>,
    renumber: FxHashMap<(u32, u32), u32>,
    seen: Vec<bool>,
}

impl RunParameters {
    /// An empty run of members with `holes` holes each.
    fn with_holes(holes: usize) -> Self {
        let mut run = RunParameters::default();
        run.renumber.reserve(holes);
        run
    }

    /// A run of `member` alone (it needs no parameter).
    fn start(&mut self, values: &[Vec<(u32, bool)>], member: usize) {
        self.first.clone_from(&values[member]);
        self.varies.clear();
        self.varies.resize(self.first.len(), false);
        self.class.clear();
        self.renumber.clear();
        for &(n, _) in &self.first {
            let next = self.renumber.len() as u32;
            self.class
                .push(*self.renumber.entry((0, n)).or_insert(next));
        }
    }

    /// Let `member` join the run [`start`](Self::start)ed when it then needs at most
    /// `limit` parameters; whether it joined.
    fn join(&mut self, values: &[Vec<(u32, bool)>], member: usize, limit: usize) -> bool {
        let row = &values[member];
        debug_assert_eq!(
            row.len(),
            self.first.len(),
            "members of a shape have its holes"
        );
        self.renumber.clear();
        self.next_class.clear();
        self.next_varies.clear();
        for (p, &(n, _)) in row.iter().enumerate() {
            let next = self.renumber.len() as u32;
            let class = *self.renumber.entry((self.class[p], n)).or_insert(next);
            self.next_class.push(class);
            self.next_varies
                .push(self.varies[p] || n != self.first[p].0);
        }
        self.seen.clear();
        self.seen.resize(self.renumber.len(), false);
        let mut count = 0;
        for p in 0..row.len() {
            let class = self.next_class[p] as usize;
            if self.next_varies[p] && !self.first[p].1 && !self.seen[class] {
                self.seen[class] = true;
                count += 1;
            }
        }
        if count > limit {
            return false;
        }
        std::mem::swap(&mut self.class, &mut self.next_class);
        std::mem::swap(&mut self.varies, &mut self.next_varies);
        true
    }
}

/// The shared body of `candidate` and a thunk per member (none when it needs no
/// parameter: then every member takes the body itself).
fn build(
    module: &Module,
    target: &TargetInfo,
    config: cranelift_codegen::isa::TargetFrontendConfig,
    tail_calls: bool,
    holes: &SecondaryMap<FuncIndex, Vec<Hole>>,
    candidate: &Candidate,
) -> Option<Built> {
    let first = candidate.members[0];
    let mut body = module.get(first).func.clone();
    let entry = body.layout.entry_block()?;
    let pointer = target.pointer_type();
    for positions in &candidate.params {
        let ty = holes[first][positions[0]].value.parameter_type(pointer)?;
        let param = body.dfg.append_block_param(entry, ty);
        body.signature.params.push(AbiParam::new(ty));
        for &i in positions {
            fill_hole(&mut body, &holes[first][i], param)?;
        }
    }
    intersect_permissions(&mut body, holes, &candidate.members)?;
    if candidate.params.is_empty() {
        return Some(Built {
            body,
            thunks: Vec::new(),
            before: 0,
            after: 0,
            unmerged: 0,
        });
    }
    let body_signature = body.signature.clone();
    let thunks = candidate
        .members
        .iter()
        .map(|&m| {
            let thunk = thunk(
                &module.get(m).func,
                &holes[m],
                &candidate.params,
                &body_signature,
                config,
                tail_calls,
            )?;
            Some((m, Box::new(thunk)))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Built {
        body,
        thunks,
        before: 0,
        after: 0,
        unmerged: 0,
    })
}

/// Make `hole` of the body read the parameter `param`: a constant or an address is
/// `param` itself, a float its bits `bitcast`, an offset is added to the address (offset
/// 0), a call goes through `param` with `call_indirect` (or `return_call_indirect`).
fn fill_hole(body: &mut Function, hole: &Hole, param: ir::Value) -> Option<()> {
    match &hole.value {
        HoleValue::Constant { .. } | HoleValue::Address { .. } | HoleValue::Symbol { .. } => {
            let result = *body.dfg.inst_results(hole.inst).first()?;
            body.dfg.clear_results(hole.inst);
            body.layout.remove_inst(hole.inst);
            body.dfg.change_to_alias(result, param);
        }
        HoleValue::Float { ty, .. } => {
            // Same result value, now `bitcast` of the bits: the same float, NaN payload
            // and sign of zero included.
            body.replace(hole.inst)
                .bitcast(*ty, ir::MemFlagsData::new(), param);
        }
        HoleValue::Offset { .. } => {
            let address = address_operand(body, hole.inst)?;
            let mut pos = FuncCursor::new(body).at_inst(hole.inst);
            let moved = pos.ins().iadd(address, param);
            match &mut body.dfg.insts[hole.inst] {
                InstructionData::Load { arg, offset, .. } => {
                    *arg = moved;
                    *offset = 0.into();
                }
                InstructionData::Store { args, offset, .. } => {
                    args[1] = moved;
                    *offset = 0.into();
                }
                _ => return None,
            }
        }
        HoleValue::Callee { func_ref, .. } => {
            let sig = body.dfg.ext_funcs[*func_ref].signature;
            let InstructionData::Call { opcode, args, .. } = body.dfg.insts[hole.inst] else {
                return None;
            };
            let args: Vec<ir::Value> = args.as_slice(&body.dfg.value_lists).to_vec();
            match opcode {
                Opcode::Call => {
                    body.replace(hole.inst).call_indirect(sig, param, &args);
                }
                Opcode::ReturnCall => {
                    body.replace(hole.inst)
                        .return_call_indirect(sig, param, &args);
                }
                _ => return None,
            }
        }
        HoleValue::Flags(_) => return None,
    }
    Some(())
}

/// Give every memory access of `body` (a copy of `members[0]`) the permissions all
/// `members` grant at it ([`Permissions::meet`]): the flags of each member's access at
/// the same hole.
fn intersect_permissions(
    body: &mut Function,
    holes: &SecondaryMap<FuncIndex, Vec<Hole>>,
    members: &[FuncIndex],
) -> Option<()> {
    let first = &holes[members[0]];
    for (i, hole) in first.iter().enumerate() {
        let HoleValue::Flags(own) = hole.value else {
            continue;
        };
        // Equal encodings hold permissions at the same holes (`None` otherwise: no body).
        let mut meet = own;
        for &m in members {
            let HoleValue::Flags(p) = holes[m].get(i)?.value else {
                return None;
            };
            meet = meet.meet(p);
        }
        if meet == own {
            continue;
        }
        let flags = body.dfg.insts[hole.inst].memflags()?;
        let weaker = meet.apply(body.dfg.mem_flags[flags]);
        let weaker = body.dfg.mem_flags.insert(weaker).ok()?;
        *body.dfg.insts[hole.inst].memflags_mut()? = weaker;
    }
    Some(())
}

/// A function with `member`'s name and signature that calls the shared body with its own
/// arguments followed by its value for each of the body's extra parameters. One block
/// without variables: written with a cursor, the same entities in the same order as
/// `FunctionBuilder` would write them, without the bookkeeping it keeps for variables and
/// for blocks not yet sealed.
fn thunk(
    member: &Function,
    holes: &[Hole],
    params: &[Vec<usize>],
    body_signature: &ir::Signature,
    config: cranelift_codegen::isa::TargetFrontendConfig,
    tail_calls: bool,
) -> Option<Function> {
    let mut func = Function::with_name_signature(member.name.clone(), member.signature.clone());
    let block = func.dfg.make_block();
    func.layout.append_block(block);
    for param in &member.signature.params {
        func.dfg.append_block_param(block, param.value_type);
    }
    let mut args = func.dfg.block_params(block).to_vec();
    let pointer = config.pointer_type();
    let mut pos = FuncCursor::new(&mut func).at_bottom(block);
    for positions in params {
        let value = match &holes[positions[0]].value {
            HoleValue::Constant { ty, bits } | HoleValue::Offset { ty, bits } => {
                pos.ins().iconst(*ty, *bits)
            }
            HoleValue::Float { ty, bits } => {
                let int = ir::Type::int(ty.bits() as u16)?;
                pos.ins().iconst(int, *bits as i64)
            }
            HoleValue::Callee { name, func_ref } | HoleValue::Address { name, func_ref } => {
                let data = &member.dfg.ext_funcs[*func_ref];
                let signature = member.dfg.signatures[data.signature].clone();
                let sig = pos.func.import_signature(signature);
                let callee_name = external_name(pos.func, name);
                let callee = pos.func.import_function(ExtFuncData {
                    name: callee_name,
                    signature: sig,
                    colocated: data.colocated,
                    patchable: false,
                });
                pos.ins().func_addr(pointer, callee)
            }
            HoleValue::Symbol {
                name,
                offset,
                colocated,
            } => {
                let symbol = external_name(pos.func, name);
                let gv = pos.func.create_global_value(ir::GlobalValueData::Symbol {
                    name: symbol,
                    offset: (*offset).into(),
                    colocated: *colocated,
                    tls: false,
                });
                pos.ins().symbol_value(pointer, gv)
            }
            HoleValue::Flags(_) => return None,
        };
        args.push(value);
    }
    let sig = pos.func.import_signature(body_signature.clone());
    let body_name = external_name(pos.func, &FuncName::TestCase(BODY_PLACEHOLDER.into()));
    let body = pos.func.import_function(ExtFuncData {
        name: body_name,
        signature: sig,
        colocated: true,
        patchable: false,
    });
    if tail_calls && member.signature.call_conv == CallConv::Tail {
        pos.ins().return_call(body, &args);
    } else {
        let call = pos.ins().call(body, &args);
        let results = pos.func.dfg.inst_results(call).to_vec();
        pos.ins().return_(&results);
    }
    Some(func)
}

/// Point a thunk's call to the body at `name`. The call is found by what it is (the
/// thunk's one direct call), not by the placeholder's name, which a member might also
/// take the address of.
fn rename_body_calls(thunk: &mut Function, name: &FuncName) {
    let entry = thunk.layout.entry_block().expect("a thunk has a body");
    let calls: Vec<ir::FuncRef> = thunk
        .layout
        .block_insts(entry)
        .filter_map(|inst| match thunk.dfg.insts[inst] {
            InstructionData::Call { func_ref, .. } => Some(func_ref),
            _ => None,
        })
        .collect();
    debug_assert_eq!(calls.len(), 1, "a thunk calls its body once");
    for r in calls {
        thunk.dfg.ext_funcs[r].name = external_name(thunk, name);
    }
}

/// `clif_merge_similar_<infix><first member>`, made unique against the symbols the module
/// defines or refers to and earlier bodies' (`in_use`, from [`Module::symbols_starting_with`]).
fn unique_body_name(in_use: &mut HashSet<String>, infix: &str, first: &FuncName) -> FuncName {
    let base = format!(
        "{BODY_PREFIX}{infix}{}",
        super::policy::shared_body_symbol(first).trim_start_matches("clif_merge_body_")
    );
    FuncName::TestCase(fresh_symbol(base, in_use))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(clif: &str) -> Function {
        cranelift_reader::parse_functions(clif)
            .expect("the CLIF parses")
            .remove(0)
    }

    /// A member's `return_call_indirect` in a block it never reaches does not stand for
    /// the one its body makes where a direct tail call became a hole.
    #[test]
    fn an_unreachable_indirect_tail_call_is_not_counted() {
        let body = function(
            "function %body(i64, i64) -> i64 tail {
                sig0 = (i64) -> i64 tail
            block0(v0: i64, v1: i64):
                return_call_indirect sig0, v1(v0)
            }",
        );
        let member = |callee: &str, unreachable: bool| {
            let dead = if unreachable {
                "block1(v2: i64):\n    return_call_indirect sig0, v2(v0)"
            } else {
                ""
            };
            function(&format!(
                "function %m(i64) -> i64 tail {{
                    sig0 = (i64) -> i64 tail
                    fn0 = colocated %{callee}(i64) -> i64 tail
                block0(v0: i64):
                    return_call fn0(v0)
                {dead}
                }}"
            ))
        };
        let (with_dead, plain) = (member("a", true), member("b", false));
        let bti = BranchProtection {
            signs_return_addresses: false,
        };
        assert!(adds_unlanded_indirect_branches(
            &body,
            [&with_dead, &plain],
            bti
        ));
        assert!(adds_unlanded_indirect_branches(&body, [&with_dead], bti));
        // A member that makes the call itself, where it runs (the body's own CLIF): nothing
        // is added.
        assert!(!adds_unlanded_indirect_branches(
            &body,
            [&body, &plain],
            bti
        ));
    }

    /// With return addresses signed, a call through a register of a `tail` function is
    /// one branch protection stops (its `paciaz` is no landing pad); of another function,
    /// or with return addresses not signed, it is not.
    #[test]
    fn a_call_of_a_tail_function_through_a_register_is_unlanded_when_returns_are_signed() {
        let body = |conv: &str| {
            function(&format!(
                "function %body(i64, i64) -> i64 system_v {{
                    sig0 = (i64) -> i64 {conv}
                block0(v0: i64, v1: i64):
                    v2 = call_indirect sig0, v1(v0)
                    return v2
                }}"
            ))
        };
        let member = |conv: &str| {
            function(&format!(
                "function %m(i64) -> i64 system_v {{
                    fn0 = colocated %callee(i64) -> i64 {conv}
                block0(v0: i64):
                    v1 = call fn0(v0)
                    return v1
                }}"
            ))
        };
        let [signed, unsigned] = [true, false].map(|signs_return_addresses| BranchProtection {
            signs_return_addresses,
        });
        let (tail, system_v) = (member("tail"), member("system_v"));
        assert!(adds_unlanded_indirect_branches(
            &body("tail"),
            [&tail],
            signed
        ));
        assert!(!adds_unlanded_indirect_branches(
            &body("tail"),
            [&tail],
            unsigned
        ));
        assert!(!adds_unlanded_indirect_branches(
            &body("system_v"),
            [&system_v],
            signed
        ));
        // A member that already calls it through a register: nothing is added.
        let tail_body = body("tail");
        assert!(!adds_unlanded_indirect_branches(
            &tail_body,
            [&tail_body, &tail],
            signed
        ));
    }

    /// A run's members and its parameters' hole positions.
    type Run = (Vec<FuncIndex>, Vec<Vec<usize>>);

    /// The split of a group into runs that fit the parameter limit, as it was written
    /// before [`RunParameters`]: every member that joins counts the run's parameters
    /// again.
    fn split_by_limit_counting_again(
        members: &[FuncIndex],
        values: &[Vec<Identity>],
        limit: usize,
    ) -> (Vec<Run>, usize) {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| values[a].cmp(&values[b]).then(members[a].cmp(&members[b])));
        let (mut runs, mut left_out) = (Vec::new(), 0);
        let mut flush = |run: &mut Vec<usize>| {
            if run.len() < 2 {
                left_out += run.len();
            } else {
                let mut ms: Vec<FuncIndex> = run.iter().map(|&i| members[i]).collect();
                ms.sort_unstable();
                runs.push((ms, parameters(run, values)));
            }
            run.clear();
        };
        let mut run: Vec<usize> = Vec::new();
        for &i in &order {
            run.push(i);
            if parameters(&run, values).len() > limit {
                run.pop();
                flush(&mut run);
                run.push(i);
            }
        }
        flush(&mut run);
        (runs, left_out)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Counting a run's parameters as members join splits every group as counting
        /// them all again does: the same runs, parameters and members left out. Few
        /// distinct values, so that columns often agree and permissions often lead.
        #[test]
        fn parameters_counted_as_members_join_split_as_before(
            rows in proptest::collection::vec(proptest::collection::vec(0u8..6, 5), 1..14),
            limit in 0usize..5,
        ) {
            let flags = |aligned: bool| Permissions {
                aligned,
                readonly: false,
                can_move: false,
                notrap: false,
            };
            let identity = |v: u8| match v {
                0..=2 => Identity::Constant(0, i64::from(v)),
                3 => Identity::Class(FuncIndex::from_u32(7)),
                4 => Identity::Flags(flags(false)),
                _ => Identity::Flags(flags(true)),
            };
            let values: Vec<Vec<Identity>> =
                rows.iter().map(|r| r.iter().map(|&v| identity(v)).collect()).collect();
            let members: Vec<FuncIndex> =
                (0..values.len() as u32).map(|i| FuncIndex::from_u32(3 * i + 1)).collect();
            let (candidates, left_out) = split_by_limit(&members, &values, limit);
            let (runs, expected_left_out) =
                split_by_limit_counting_again(&members, &values, limit);
            let got: Vec<Run> = candidates
                .into_iter()
                .map(|c| (c.members, c.params))
                .collect();
            proptest::prop_assert_eq!(got, runs);
            proptest::prop_assert_eq!(left_out, expected_left_out);
        }
    }

    /// `%name`: a constant after its own argument, then a call of `%g` with both: a register
    /// thunk's shape, whether merge-similar made it or the user wrote it.
    fn thunk_shaped(name: &str, constant: i64) -> Function {
        function(&format!(
            "function %{name}(i64) -> i64 system_v {{
                fn0 = colocated %g(i64, i64) -> i64 system_v
            block0(v0: i64):
                v1 = iconst.i64 {constant}
                v2 = call fn0(v0, v1)
                return v2
            }}"
        ))
    }

    /// `%g`, which reads its return address, and `functions`, each Local, `marked` ones
    /// marked as merge-similar's thunks.
    fn module_with(functions: &[(Function, bool)]) -> Module {
        let g = function(
            "function %g(i64, i64) -> i64 system_v {
            block0(v0: i64, v1: i64):
                v2 = get_return_address.i64
                v3 = iadd v0, v1
                v4 = iadd v3, v2
                return v4
            }",
        );
        let mut module = Module::new();
        module.add(g, Linkage::Local, true).unwrap();
        for (func, marked) in functions {
            let f = module.add(func.clone(), Linkage::Local, true).unwrap();
            module.get_mut(f).similar_thunk = *marked;
        }
        module
    }

    /// Merge-similar's thunk is a jump where the same CLIF of the user's is a call: the
    /// identical merger never folds one into the other, and folds two thunks.
    #[test]
    fn a_similar_thunk_is_never_equal_to_a_function_of_the_user() {
        let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
        let options = MergeOptions {
            mode: crate::merge::MergeMode::Aliases,
            addresses_insignificant: true,
            ..MergeOptions::default()
        };
        let module = module_with(&[
            (thunk_shaped("thunk_a", 5), true),
            (thunk_shaped("users", 5), false),
            (thunk_shaped("thunk_b", 5), true),
        ]);
        let plan = crate::merge::merge(&module, &target, &options);
        let index = |name: &str| module.lookup(&FuncName::parse(name).unwrap()).unwrap();
        let group = |name: &str| plan.group_of(index(name)).map(|g| g.kept);
        assert_eq!(group("%users"), None);
        assert_eq!(group("%thunk_a"), Some(index("%thunk_a")));
        assert_eq!(group("%thunk_b"), Some(index("%thunk_a")));
        // `--explain` says why.
        let explain = |a: &str, b: &str| {
            crate::merge::explain_in_plan(&module, &target, &options, &plan, index(a), index(b))
        };
        assert_eq!(explain("%users", "%thunk_a").unwrap().what, "kind");
        assert!(explain("%thunk_b", "%thunk_a").is_none());
    }

    /// Merge-similar takes the user's functions of a thunk's shape as members, never its
    /// own thunks (read again from `--emit-clif` output): a shared body of thunks would
    /// call where they jumped.
    #[test]
    fn merge_similar_never_takes_its_own_thunks() {
        let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
        let isa = crate::emit::build_isa(&target, &[]).unwrap();
        let similar = SimilarOptions {
            cost_model: false,
            ..SimilarOptions::default()
        };
        for marked in [false, true] {
            let module = module_with(&[
                (thunk_shaped("a", 5), marked),
                (thunk_shaped("b", 7), marked),
            ]);
            let (_, report) =
                merge_similar(module, &target, &*isa, &MergeOptions::default(), &similar);
            assert_eq!(
                report.groups.len(),
                usize::from(!marked),
                "marked: {marked}"
            );
        }
    }
}
