//! The detector on real CLIF (wasmtime's output for re2, sqlite and zstd): no panic, every
//! function equal to itself (and to a renumbered copy of itself, read back from its own
//! printed text), the hash consistent with the order, and the order a total order on
//! neighbouring functions. Skips with a notice where ../shared/corpus is absent.

use std::cmp::Ordering;
use std::path::Path;

use clif_merge::detect::{explain, ByName};
use clif_merge::{function_hash, FunctionComparator, TargetInfo};

#[test]
fn every_corpus_function_equals_itself_and_the_order_is_consistent() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if !root.is_dir() {
        eprintln!("skipping: ../shared/corpus is absent");
        return;
    }
    let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    let cmp = FunctionComparator::new(&target);
    for corpus in ["re2", "sqlite", "zstd"] {
        let functions = clif_merge::read::read_inputs(&[root.join(corpus)]).unwrap();
        let mut equal_pairs = 0;
        for (i, p) in functions.iter().enumerate() {
            let f = &p.func;
            assert_eq!(cmp.compare(f, f), Ordering::Equal, "{}", p.place());
            assert!(explain(&target, &ByName, f, f).is_none(), "{}", p.place());
            // The printed text, read back: same function, fresh numbering of entities.
            if i % 7 == 0 {
                let again = clif_merge::read::parse_clif(&f.display().to_string(), "again.clif")
                    .unwrap()
                    .remove(0)
                    .func;
                assert_eq!(cmp.compare(f, &again), Ordering::Equal, "{}", p.place());
                assert_eq!(function_hash(f), function_hash(&again), "{}", p.place());
            }
            if let Some(next) = functions.get(i + 1) {
                let (g, ab, ba) = (
                    &next.func,
                    cmp.compare(f, &next.func),
                    cmp.compare(&next.func, f),
                );
                assert_eq!(ab, ba.reverse(), "{} / {}", p.place(), next.place());
                if ab == Ordering::Equal {
                    equal_pairs += 1;
                    assert_eq!(function_hash(f), function_hash(g));
                }
                if let Some(third) = functions.get(i + 2) {
                    let (bc, ac) = (cmp.compare(g, &third.func), cmp.compare(f, &third.func));
                    if ab != Ordering::Greater && bc != Ordering::Greater {
                        assert_ne!(ac, Ordering::Greater, "transitivity at {}", p.place());
                    }
                }
            }
        }
        eprintln!(
            "{corpus}: {} functions, {equal_pairs} equal neighbours",
            functions.len()
        );
    }
}
