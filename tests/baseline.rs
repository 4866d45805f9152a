//! Regression guard: on every corpus and in every merging mode, the current code folds at
//! least as many functions and writes no more `.text` bytes than `bench/baseline.json`
//! records (x86_64-unknown-linux-gnu, is_pic=true, preserve_frame_pointers=true,
//! opt_level=speed; the object as `clif-merge DIR --merge-functions MODE -o OUT` writes it).
//!
//! The same for merge-similar before each mode (`similar-trampolines`, `similar-aliases`:
//! `clif-merge DIR --merge-functions MODE --merge-similar -o OUT`): no more `.text` bytes,
//! and no fewer names without a body of their own (`folded_or_thunked`: folded by the
//! identical merger, or turned into a thunk into a shared body, each name once). Its
//! `folded` and `similar_thunks` are recorded beside it but not guarded one by one: a name
//! may move from one to the other as the passes improve.
//!
//! Regenerate the baseline after an improvement (or a deliberate change) with
//!
//! ```sh
//! CLIF_MERGE_UPDATE_BASELINE=1 cargo test --profile test-release --test baseline
//! ```
//!
//! Corpora absent from ../shared/corpus are skipped with a notice (and keep their entry in
//! the baseline when it is regenerated).

#[path = "../bench/common/mod.rs"]
mod common;

use std::time::Instant;

use clif_merge::merge::MergeMode;
use serde_json::{json, Map, Value};

const MODES: [MergeMode; 2] = [MergeMode::Trampolines, MergeMode::Aliases];

/// The baseline's key for `mode`, with or without merge-similar.
fn key(mode: MergeMode, similar: bool) -> String {
    let name = common::mode_name(mode);
    if similar {
        format!("similar-{name}")
    } else {
        name.to_string()
    }
}

#[test]
fn folds_no_fewer_functions_and_writes_no_more_text_than_the_baseline() {
    let started = Instant::now();
    let path = common::bench_dir().join("baseline.json");
    let update = std::env::var_os("CLIF_MERGE_UPDATE_BASELINE").is_some_and(|v| v != "0");
    let corpora = common::present_corpora("baseline");
    if corpora.is_empty() {
        return;
    }
    let baseline: Value = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display())),
        Err(_) if update => json!({}),
        Err(e) => panic!("reading {}: {e}", path.display()),
    };
    if !update {
        assert_eq!(baseline["target"], common::TRIPLE, "baseline target");
        for (k, v) in common::SETTINGS {
            assert_eq!(baseline["settings"][k], v, "baseline setting {k}");
        }
    }

    let mut measured: Map<String, Value> = Map::new();
    let mut failures = Vec::new();
    let mut better = Vec::new();
    for (name, dir) in &corpora {
        let module = common::load_module(dir);
        let mut entry = Map::new();
        entry.insert("functions".into(), json!(module.len()));
        let old = &baseline["corpora"][name];
        if !update {
            assert!(
                old.is_object(),
                "{} has no entry for {name}: regenerate it (CLIF_MERGE_UPDATE_BASELINE=1 cargo test --profile test-release --test baseline)",
                path.display()
            );
            assert_eq!(
                old["functions"].as_u64(),
                Some(module.len() as u64),
                "the {name} corpus changed since the baseline was written: regenerate it"
            );
        }
        for (mode, similar) in MODES
            .into_iter()
            .map(|m| (m, false))
            .chain(MODES.into_iter().map(|m| (m, true)))
        {
            let mode_key = key(mode, similar);
            let mode_name = mode_key.as_str();
            let e = if similar {
                common::emit_similar(&module, mode).0
            } else {
                common::emit(&module, mode, false)
            };
            let pass = e.similar.map_or(String::new(), |s| {
                format!(
                    ", similar thunks {} into {} bodies (pass {})",
                    s.thunks,
                    s.bodies,
                    common::fmt_s(s.pass_s)
                )
            });
            eprintln!(
                "baseline: {name:<7} {mode_name:<20} folded {:>5}  .text {:>9}  ({} compiled, merge {}, codegen {}{pass})",
                e.folded,
                e.text_bytes,
                e.compiled,
                common::fmt_s(e.merge_s),
                common::fmt_s(e.codegen_s)
            );
            // What is guarded as "folded": the identical merger's folds, or with
            // merge-similar every name without a body of its own.
            let folded_key = if similar {
                "folded_or_thunked"
            } else {
                "folded"
            };
            let value = match e.similar {
                Some(s) => json!({
                    "folded": e.folded,
                    "similar_thunks": s.thunks,
                    "folded_or_thunked": e.folded_or_thunked(),
                    "text_bytes": e.text_bytes,
                }),
                None => json!({ "folded": e.folded, "text_bytes": e.text_bytes }),
            };
            entry.insert(mode_name.into(), value);
            if update {
                continue;
            }
            let want_folded = old[mode_name][folded_key].as_u64().unwrap_or_else(|| {
                panic!(
                    "{}: no {name}.{mode_name}.{folded_key}: regenerate it (CLIF_MERGE_UPDATE_BASELINE=1 cargo test --profile test-release --test baseline)",
                    path.display()
                )
            });
            let want_text = old[mode_name]["text_bytes"]
                .as_u64()
                .unwrap_or_else(|| panic!("{}: no {name}.{mode_name}.text_bytes", path.display()));
            let (folded, text) = (e.folded_or_thunked() as u64, e.text_bytes);
            if folded < want_folded {
                failures.push(format!(
                    "{name} {mode_name}: {folded_key} {folded} functions, the baseline {want_folded}"
                ));
            }
            if text > want_text {
                failures.push(format!(
                    "{name} {mode_name}: writes {text} .text bytes, the baseline {want_text} (+{})",
                    text - want_text
                ));
            }
            if folded > want_folded || text < want_text {
                better.push(format!(
                    "{name} {mode_name}: {folded_key} {want_folded} → {folded}, .text {want_text} → {text}"
                ));
            }
        }
        measured.insert((*name).to_string(), Value::Object(entry));
    }

    if update {
        // Corpora absent here keep their old entry.
        let mut corpora_json = baseline["corpora"].as_object().cloned().unwrap_or_default();
        corpora_json.extend(measured);
        let settings: Map<String, Value> = common::SETTINGS
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let doc = json!({
            "about": "clif-merge's regression baseline: functions folded and object .text bytes per corpus and mode; similar-MODE is --merge-similar before MODE (folded_or_thunked: names without a body of their own, each once). tests/baseline.rs fails when the code folds fewer (folded_or_thunked with merge-similar) or writes more.",
            "regenerate": "CLIF_MERGE_UPDATE_BASELINE=1 cargo test --profile test-release --test baseline",
            "commit": common::git_commit(),
            "target": common::TRIPLE,
            "settings": settings,
            "corpora": corpora_json,
        });
        let text = serde_json::to_string_pretty(&doc).expect("serializable") + "\n";
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        eprintln!("baseline: wrote {}", path.display());
    } else if !better.is_empty() {
        eprintln!(
            "baseline: better than {} (regenerate it to keep the gain: CLIF_MERGE_UPDATE_BASELINE=1 cargo test --profile test-release --test baseline):",
            path.display()
        );
        for b in &better {
            eprintln!("  {b}");
        }
    }
    eprintln!(
        "baseline: {} in all",
        common::fmt_s(started.elapsed().as_secs_f64())
    );
    assert!(
        failures.is_empty(),
        "worse than {}:\n  {}",
        path.display(),
        failures.join("\n  ")
    );
}
