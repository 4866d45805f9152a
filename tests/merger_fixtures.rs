//! Runs every fixture in `fixtures/merger/`, and every fixture in `fixtures/llvm/` (LLVM's
//! MergeFunctions tests restated in CLIF, see `fixtures/llvm/README.md`): each file states,
//! in directive comments, which functions the merger must fold together, which must stay
//! apart, and what each folded name becomes in each mode. Every file is also merged with
//! its functions in reverse order and must give the same groups, kept functions and
//! actions. The directives are listed in `tests/common/merger.rs`; the files in
//! `fixtures/llvm/` may also use the detector's (`tests/common/detector.rs`).

mod common;

use common::{detector, merger};

#[test]
fn every_merger_fixture_holds() {
    let fixtures = merger::fixtures_in("fixtures/merger");
    assert!(fixtures.len() >= 8, "merger fixtures are missing");
    for fx in &fixtures {
        merger::check(fx, merger::Vocabulary::MergerOnly);
    }
}

#[test]
fn every_llvm_fixture_holds() {
    let fixtures = merger::fixtures_in("fixtures/llvm");
    assert!(fixtures.len() >= 25, "LLVM fixtures are missing");
    let mut failures = detector::Failures::default();
    for fx in &fixtures {
        merger::check(fx, merger::Vocabulary::WithDetector);
        let dfx = detector::Fixture::load(
            std::path::Path::new(&fx.path),
            detector::Vocabulary::WithMerger,
        );
        detector::check_fixture(&dfx, &mut failures);
    }
    failures.assert_none();
}
