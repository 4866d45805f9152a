//! clif-merge against the linker's identical code folding on real code (re2, compiled by
//! wasmtime). The unmerged object is written one function per section and linked by
//! `ld.lld -shared --icf=all`, with and without `-Bsymbolic` (without it every exported
//! function is preemptible and lld will not fold calls to different symbols); clif-merge's
//! object (aliases mode, the same assumption as `--icf=all`: addresses do not matter) is
//! linked without ICF. Functions folded and `.text` bytes are printed side by side.
//!
//! Needs ../shared/corpus (skips with a notice where it is absent) and ld.lld.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clif_merge::emit::{build_isa, EmitOptions};
use clif_merge::emit_object;
use clif_merge::merge::{Linkage, MergeMode, MergeOptions, Module};
use clif_merge::TargetInfo;
use cranelift_object::object::{self, Object as _, ObjectSection as _, ObjectSymbol as _};

fn corpus(name: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus")
        .join(name);
    dir.is_dir().then_some(dir)
}

/// Functions folded (symbols sharing an address) and `.text` bytes of a linked library.
fn linked_stats(so: &Path) -> (usize, u64) {
    let bytes = std::fs::read(so).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let mut at: HashMap<u64, usize> = HashMap::new();
    for s in file
        .symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
    {
        *at.entry(s.address()).or_default() += 1;
    }
    let folded = at.values().map(|n| n - 1).sum();
    let text = file.section_by_name(".text").map_or(0, |s| s.size());
    (folded, text)
}

fn ld(args: &[&str], inputs: &Path, out: &Path) {
    let status = Command::new("ld.lld")
        .args(args)
        .arg(inputs)
        .arg("-o")
        .arg(out)
        .status()
        .expect("ld.lld runs");
    assert!(status.success(), "ld.lld {args:?} failed");
}

#[test]
fn re2_folds_at_least_what_lld_icf_folds_in_no_more_text() {
    let Some(dir) = corpus("re2") else {
        eprintln!("skipping: ../shared/corpus/re2 is absent");
        return;
    };
    if Command::new("ld.lld").arg("--version").output().is_err() {
        panic!("ld.lld is needed (apt-get install lld)");
    }
    let functions = clif_merge::read::read_inputs(&[dir]).unwrap();
    let mut module = Module::new();
    for p in functions {
        module.add(p.func, Linkage::Export, false).unwrap();
    }
    let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    let settings: Vec<(String, String)> = [
        ("is_pic", "true"),
        ("preserve_frame_pointers", "true"),
        ("opt_level", "speed"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let tmp = tempfile::tempdir().unwrap();
    let write_object = |mode: MergeMode, per_function_section: bool, name: &str| {
        let options = MergeOptions {
            mode,
            ..Default::default()
        };
        let plan = clif_merge::merge(&module, &target, &options);
        let emit = EmitOptions {
            per_function_section,
            ..Default::default()
        };
        let isa = build_isa(&target, &settings).unwrap();
        let (bytes, summary) = emit_object(&module, &plan, isa, &options, &emit).unwrap();
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        (path, summary)
    };

    let (unmerged, _) = write_object(MergeMode::Disabled, true, "unmerged.o");
    let icf = tmp.path().join("icf.so");
    ld(&["-shared", "--icf=all"], &unmerged, &icf);
    let icf_symbolic = tmp.path().join("icf_symbolic.so");
    ld(
        &["-shared", "-Bsymbolic", "--icf=all"],
        &unmerged,
        &icf_symbolic,
    );
    let plain = tmp.path().join("plain.so");
    ld(&["-shared"], &unmerged, &plain);

    let (aliases, aliases_summary) = write_object(MergeMode::Aliases, false, "aliases.o");
    let ours = tmp.path().join("ours.so");
    ld(&["-shared"], &aliases, &ours);
    let (trampolines, _) = write_object(MergeMode::Trampolines, false, "trampolines.o");
    let ours_thunks = tmp.path().join("ours_thunks.so");
    ld(&["-shared"], &trampolines, &ours_thunks);

    let (_, plain_text) = linked_stats(&plain);
    let (icf_folded, icf_text) = linked_stats(&icf);
    let (sym_folded, sym_text) = linked_stats(&icf_symbolic);
    let (our_folded, our_text) = linked_stats(&ours);
    let (_, thunk_text) = linked_stats(&ours_thunks);
    let our_plan_folded = aliases_summary.plan.folded_count() - aliases_summary.copied.len();

    eprintln!("re2, x86_64, {} functions:", module.len());
    eprintln!("  {:<44} {:>8} {:>10}", "", "folded", ".text");
    eprintln!("  {:<44} {:>8} {:>10}", "unmerged", 0, plain_text);
    eprintln!(
        "  {:<44} {:>8} {:>10}",
        "ld.lld -shared --icf=all", icf_folded, icf_text
    );
    eprintln!(
        "  {:<44} {:>8} {:>10}",
        "ld.lld -shared -Bsymbolic --icf=all", sym_folded, sym_text
    );
    eprintln!(
        "  {:<44} {:>8} {:>10}",
        "clif-merge --merge-functions aliases", our_folded, our_text
    );
    eprintln!(
        "  {:<44} {:>8} {:>10}",
        "clif-merge --merge-functions trampolines", our_plan_folded, thunk_text
    );

    assert_eq!(
        our_folded, our_plan_folded,
        "every folded name is an alias in the library"
    );
    assert!(
        our_folded >= icf_folded && our_folded >= sym_folded,
        "lld folds more"
    );
    assert!(
        our_text <= icf_text && our_text <= sym_text,
        "lld leaves less text"
    );
    assert!(
        thunk_text < icf_text,
        "with thunks, still less text than lld without -Bsymbolic"
    );
}
