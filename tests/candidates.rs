//! Candidate search by MinHash and LSH (`clif_merge::merge::candidates`): near-twins are
//! found among unrelated functions, unrelated functions are not paired, and the pairs are
//! the same whatever the number of threads.

use clif_merge::merge::candidates::{
    candidates_among, find_candidates, signature, CandidateOptions, CandidatePair,
};
use clif_merge::merge::{FuncIndex, Linkage, Module};
use clif_merge::TargetInfo;
use cranelift_codegen::ir::{types, AbiParam, Function, InstBuilder, Signature, UserFuncName};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

fn target() -> TargetInfo {
    TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap()
}

/// Function `u0:index`: the operations `ops` (0..10) in turn on its two parameters.
fn function(index: u32, ops: &[u32]) -> Function {
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.push(AbiParam::new(types::I64));
    sig.params.push(AbiParam::new(types::I64));
    sig.returns.push(AbiParam::new(types::I64));
    let mut func = Function::with_name_signature(UserFuncName::user(0, index), sig);
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let (x, y) = (b.block_params(block)[0], b.block_params(block)[1]);
    let mut v = x;
    for &op in ops {
        v = match op {
            0 => b.ins().iadd(v, y),
            1 => b.ins().isub(v, y),
            2 => b.ins().imul(v, y),
            3 => b.ins().band(v, y),
            4 => b.ins().bor(v, y),
            5 => b.ins().bxor(v, y),
            6 => b.ins().ishl(v, y),
            7 => b.ins().ushr(v, y),
            8 => b.ins().rotl(v, y),
            _ => b.ins().smin(v, y),
        };
    }
    b.ins().return_(&[v]);
    b.finalize(TargetFrontendConfig {
        default_call_conv: CallConv::SystemV,
        pointer_width: target_lexicon::PointerWidth::U64,
        page_size_align_log2: 12,
    });
    func
}

/// 400 functions of 30 random operations; the 40 with an index that is a multiple of 10
/// have a near-twin at index + 1 (one operation replaced, one inserted). Returns the
/// module and the twins' index pairs.
fn module() -> (Module, Vec<(u32, u32)>) {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |bound: u32| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as u32 % bound
    };
    let mut module = Module::new();
    let mut twins = Vec::new();
    let mut index = 0;
    while index < 400 {
        let ops: Vec<u32> = (0..30).map(|_| next(10)).collect();
        module
            .add(function(index, &ops), Linkage::Export, false)
            .unwrap();
        if index % 10 == 0 {
            let mut twin = ops.clone();
            twin[next(30) as usize] = next(10);
            twin.insert(next(30) as usize, next(10));
            module
                .add(function(index + 1, &twin), Linkage::Export, false)
                .unwrap();
            twins.push((index, index + 1));
            index += 1;
        }
        index += 1;
    }
    (module, twins)
}

fn pairs_with_threads(module: &Module, threads: usize) -> Vec<CandidatePair> {
    let members: Vec<FuncIndex> = module.indices().collect();
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(|| find_candidates(module, &target(), &members, &CandidateOptions::default()))
}

fn index_of(module: &Module, f: FuncIndex) -> u32 {
    let name = module.get(f).name.to_string();
    name.strip_prefix("u0:").unwrap().parse().unwrap()
}

#[test]
fn near_twins_are_found_and_strangers_are_not_paired() {
    let (module, twins) = module();
    let pairs = pairs_with_threads(&module, 2);
    let found: Vec<(u32, u32, f64)> = pairs
        .iter()
        .map(|p| {
            let (a, b) = (index_of(&module, p.left), index_of(&module, p.right));
            (a.min(b), a.max(b), p.similarity)
        })
        .collect();
    for &(a, b) in &twins {
        let pair = found.iter().find(|p| (p.0, p.1) == (a, b));
        let Some(&(_, _, similarity)) = pair else {
            panic!("twins u0:{a} and u0:{b} not paired: {found:?}");
        };
        assert!(similarity >= 0.5, "u0:{a} u0:{b}: {similarity}");
    }
    // Random sequences of 30 operations out of 10 share few 3-shingles: no other pair.
    assert_eq!(found.len(), twins.len(), "{found:?}");
}

#[test]
fn the_pairs_do_not_depend_on_the_thread_count() {
    let (mut module, _) = module();
    // A family of 60 functions, each the same 30 operations with two replaced: their
    // buckets are crowded, and who meets whom depends on the window.
    let base: Vec<u32> = (0..30).map(|k| (k * 7 + 3) % 10).collect();
    for member in 0..60u32 {
        let mut ops = base.clone();
        ops[(member * 13 % 30) as usize] = member % 10;
        ops[(member * 7 % 30) as usize] = (member / 10) % 10;
        module
            .add(function(1000 + member, &ops), Linkage::Export, false)
            .unwrap();
    }
    let one = pairs_with_threads(&module, 1);
    assert!(one.len() > 60, "{}", one.len());
    for threads in [2, 4] {
        assert_eq!(
            pairs_with_threads(&module, threads),
            one,
            "{threads} threads"
        );
    }
}

#[test]
fn a_signature_estimates_similarity() {
    // The same operations: the same signature. Disjoint operations: no agreement.
    let t = target();
    let same = signature(&function(0, &[0, 1, 2, 3, 4, 5]), &t).unwrap();
    assert_eq!(
        same,
        signature(&function(1, &[0, 1, 2, 3, 4, 5]), &t).unwrap()
    );
    let other = signature(&function(2, &[6, 7, 8, 9, 6, 7, 8, 9]), &t).unwrap();
    let agree = same.iter().zip(&other).filter(|(a, b)| a == b).count();
    assert!(agree <= 2, "{agree}");
}

#[test]
fn no_members_no_pairs() {
    let (module, _) = module();
    let pairs = find_candidates(&module, &target(), &[], &CandidateOptions::default());
    assert!(pairs.is_empty());
    // One function alone has no partner.
    let one: Vec<FuncIndex> = module.indices().take(1).collect();
    assert!(find_candidates(&module, &target(), &one, &CandidateOptions::default()).is_empty());
}

/// With groups, partners are searched within each group exactly as if each were searched
/// alone: no pair crosses groups, and the pairs are the union of the groups' own searches.
#[test]
fn a_search_by_groups_is_each_group_searched_alone() {
    let (module, twins) = module();
    let members: Vec<FuncIndex> = module.indices().collect();
    let signatures: Vec<_> = members
        .iter()
        .map(|&f| signature(&module.get(f).func, &target()))
        .collect();
    // Three groups, a twin's members split between two of them now and then.
    let groups: Vec<u32> = members.iter().map(|f| (f.as_u32() / 7) % 3).collect();
    let options = CandidateOptions::default();
    let together = candidates_among(&members, &signatures, Some(&groups), &options);
    let mut apart = Vec::new();
    for g in 0..3 {
        let at: Vec<usize> = (0..members.len()).filter(|&i| groups[i] == g).collect();
        let group_members: Vec<FuncIndex> = at.iter().map(|&i| members[i]).collect();
        let group_signatures: Vec<_> = at.iter().map(|&i| signatures[i]).collect();
        apart.extend(candidates_among(
            &group_members,
            &group_signatures,
            None,
            &options,
        ));
    }
    apart.sort_by_key(|p| (p.left, p.right));
    assert_eq!(together, apart);
    let group_of = |f: FuncIndex| groups[f.as_u32() as usize];
    assert!(together
        .iter()
        .all(|p| group_of(p.left) == group_of(p.right)));
    // Twins in one group are still found; those split are not.
    let split = twins
        .iter()
        .filter(|&&(a, b)| groups[a as usize] != groups[b as usize])
        .count();
    assert!(
        split > 0 && split < twins.len(),
        "{split} of {}",
        twins.len()
    );
    assert_eq!(together.len(), twins.len() - split, "{together:?}");
}
