//! The size-regression workflow, run as CI runs it: the bytes in the report add up to what
//! the object shows, `--compare` lists exactly the changes made between two versions of a
//! module, `--fail-on-regression` exits 3 for a lost fold and for growth past the
//! threshold and 0 otherwise, `--plot` writes well-formed SVG, every output is the same
//! whatever the thread count, and the README's worked example runs as written.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[path = "common/command.rs"]
#[macro_use]
mod command;

use command::{run_in, Run};
use object::{Object as _, ObjectSection as _, SectionKind};
use serde_json::{json, Value};

const X86: &str = "x86_64-unknown-linux-gnu";
const ARM: &str = "aarch64-unknown-linux-gnu";
/// The exit status of a size regression (README, "Exit status").
const REGRESSION: i32 = 3;

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(path)
}

impl Run {
    #[track_caller]
    fn status(self, code: i32) -> Self {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit {code}:\nstdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        self
    }
}

fn run_here(dir: &Path, args: &[OsString]) -> Run {
    run_in(Some(dir), args)
}

/// Bytes of the object's text sections, read with the `object` crate.
fn text_size(object_file: &Path) -> u64 {
    let bytes = std::fs::read(object_file).expect("object written");
    let file = object::File::parse(&*bytes).expect("a valid object");
    file.sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| s.size())
        .sum()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report written"))
        .expect("report is JSON")
}

/// Every group's `saved_bytes`, identical and merge-similar.
fn saved_bytes(report: &Value) -> Vec<(String, i64)> {
    let mut saved = Vec::new();
    for g in report["groups"].as_array().unwrap() {
        saved.push((g["keep"].to_string(), g["saved_bytes"].as_i64().unwrap()));
    }
    if let Some(similar) = report["similar"]["groups"].as_array() {
        for g in similar {
            saved.push((g["body"].to_string(), g["saved_bytes"].as_i64().unwrap()));
        }
    }
    saved
}

/// For every input and configuration, the groups' `saved_bytes` add up to what merging
/// saves in `.text` against `--merge-functions disabled`, to within the padding of one
/// alignment (merge-similar's members are compiled from their bodies as read for the
/// report, so its groups are exact too); each function's `bytes` add up to `.text` the same way; and the report's
/// `text_bytes` is the object's.
#[test]
fn saved_bytes_add_up_to_the_text_merging_saves() {
    let tmp = tempfile::tempdir().unwrap();
    let fp = ["--set", "preserve_frame_pointers=true"];
    let inputs = [
        "example.clif",
        "size-regression/before.clif",
        "size-regression/after.clif",
        "similar/constants.clif",
        "similar/groups.clif",
        "similar/callees.clif",
        "similar/offsets.clif",
        "cli/callers.clif",
    ];
    let configs: [&[&str]; 6] = [
        &["--merge-functions", "trampolines"],
        &["--merge-functions", "aliases"],
        &["--merge-functions", "trampolines", "--merge-similar"],
        &["--merge-functions", "aliases", "--merge-similar"],
        // Every name preemptible: bodies move into new local symbols.
        &["--linkage", "*=preemptible"],
        // Every name local: folded functions are erased.
        &["--linkage", "*=local", "--addresses-insignificant"],
    ];
    let (mut checked, mut saving) = (0, 0);
    for target in [X86, ARM] {
        for input in inputs {
            let base = [
                fixture(input).into_os_string(),
                "--target".into(),
                target.into(),
            ];
            let unmerged = tmp.path().join("unmerged.o");
            let mut a = base.to_vec();
            a.extend(args!["--merge-functions", "disabled", "-o", &unmerged]);
            a.extend(fp.iter().map(OsString::from));
            run_here(tmp.path(), &a).status(0);
            let unmerged = text_size(&unmerged);
            for config in configs {
                let (merged, report) = (tmp.path().join("merged.o"), tmp.path().join("r.json"));
                let mut a = base.to_vec();
                a.extend(args!["-o", &merged, "--report", &report]);
                a.extend(config.iter().chain(&fp).map(OsString::from));
                run_here(tmp.path(), &a).status(0);
                let report = read_json(&report);
                let merged = text_size(&merged);
                let what = format!("{input} on {target} with {config:?}");
                assert_eq!(report["text_bytes"], json!(merged), "{what}");
                let saved = saved_bytes(&report);
                let total: i64 = saved.iter().map(|s| s.1).sum();
                // x86_64 bodies are byte-aligned and aarch64 code is all 4-byte words, so
                // the padding is 0 here; the bound is one alignment in general.
                let slack = 16;
                assert!(
                    (unmerged as i64 - merged as i64 - total).abs() < slack,
                    "{what}: unmerged {unmerged}, merged {merged}, groups save {total}: {saved:?}"
                );
                // Every byte of .text belongs to a name, to a group's body in a new local
                // symbol (named by its members' `body`, not a function), or to a
                // merge-similar shared body.
                let symbols = report["symbols"].as_array().unwrap();
                let names: BTreeSet<&str> = symbols
                    .iter()
                    .map(|s| s["name"].as_str().unwrap())
                    .collect();
                let own: u64 = symbols.iter().map(|s| s["bytes"].as_u64().unwrap()).sum();
                let local_bodies: BTreeMap<&str, u64> = symbols
                    .iter()
                    .filter_map(|s| Some((s["body"].as_str()?, s["body_bytes"].as_u64()?)))
                    .filter(|(body, _)| !names.contains(body))
                    .collect();
                let similar_bodies: u64 = report["similar"]["groups"].as_array().map_or(0, |g| {
                    g.iter().map(|g| g["body_bytes"].as_u64().unwrap()).sum()
                });
                let accounted = own + local_bodies.values().sum::<u64>() + similar_bodies;
                assert!(
                    (merged as i64 - accounted as i64).abs() < slack,
                    "{what}: names {own}, local bodies {local_bodies:?}, similar bodies \
                     {similar_bodies}, of {merged} bytes"
                );
                checked += 1;
                saving += usize::from(total > 0);
            }
        }
    }
    // The inputs do fold: the sums above compared real savings, not zeros.
    assert!(
        saving > checked / 2,
        "{saving} of {checked} runs saved bytes"
    );
}

/// A scratch directory with `name.clif` files, and the runs made in it.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Self {
        Scratch(tempfile::tempdir().unwrap())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Run on `input` for x86_64, writing `<stem>.o` and `<stem>.json`.
    fn build(&self, input: &Path, stem: &str, extra: &[&str]) -> Run {
        let mut a = args![
            input,
            "--target",
            X86,
            "-o",
            self.path(&format!("{stem}.o")),
            "--report",
            self.path(&format!("{stem}.json"))
        ];
        a.extend(extra.iter().map(OsString::from));
        run_here(self.0.path(), &a)
    }

    /// The comparison in `<stem>.json`.
    fn comparison(&self, stem: &str) -> Value {
        read_json(&self.path(&format!("{stem}.json")))["comparison"].clone()
    }
}

/// The identical group that `name` is a member of.
fn group_with(report: &Value, name: &str) -> Value {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| {
            g["keep"] == json!(name)
                || g["folded"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["name"] == json!(name))
        })
        .unwrap_or_else(|| panic!("{name} is in no group"))
        .clone()
}

/// `(change, group, joined, left)` of each group change.
fn group_changes(comparison: &Value) -> Vec<(String, String, Value, Value)> {
    comparison["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["change"].as_str().unwrap().to_string(),
                g["group"].as_str().unwrap().to_string(),
                g["joined"].clone(),
                g["left"].clone(),
            )
        })
        .collect()
}

/// `(function, was_with)` of each lost fold.
fn lost_folds(comparison: &Value) -> Vec<(String, String)> {
    comparison["lost_folds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                f["was_with"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn change(c: &str, group: &str, joined: &[&str], left: &[&str]) -> (String, String, Value, Value) {
    (c.into(), group.into(), json!(joined), json!(left))
}

/// The README's two versions: after.clif changes one clamp's constant, adds a third copy
/// of the hash loop and drops a function. The comparison says exactly that, with the
/// constant as the lost fold's first difference, and the `.text` of both objects.
#[test]
fn compare_lists_exactly_the_changes_between_the_fixtures() {
    let s = Scratch::new();
    let before = fixture("size-regression/before.clif");
    let after = fixture("size-regression/after.clif");
    s.build(&before, "before", &[]).status(0);
    let base = s.path("before.json");
    s.build(&after, "after", &["--compare", base.to_str().unwrap()])
        .status(0);
    let c = s.comparison("after");
    assert_eq!(c["baseline"], json!(base.to_str().unwrap()));
    assert_eq!(c["functions_added"], json!(["%hash_path"]));
    assert_eq!(c["functions_removed"], json!(["%legacy_checksum"]));
    assert_eq!(
        group_changes(&c),
        [
            change("grew", "%hash_key", &["%hash_path"], &[]),
            change("shrank", "%clamp_green", &[], &["%clamp_blue"]),
        ]
    );
    assert_eq!(
        lost_folds(&c),
        [("%clamp_blue".into(), "%clamp_green".into())]
    );
    let why = c["lost_folds"][0]["first_difference"].as_str().unwrap();
    assert!(
        why.contains("iconst.i32 127") && why.contains("iconst.i32 255"),
        "{why}"
    );
    assert_eq!(
        c["text_bytes_before"],
        json!(text_size(&s.path("before.o")))
    );
    assert_eq!(c["text_bytes_after"], json!(text_size(&s.path("after.o"))));
    // The lost fold is where the bytes went: %clamp_blue kept its body, and the group
    // kept by %clamp_green saves one thunk's worth less than one body.
    let base_report = read_json(&base);
    let now = read_json(&s.path("after.json"));
    let clamp_before = group_with(&base_report, "%clamp_green");
    let clamp_after = group_with(&now, "%clamp_green");
    let thunk = now["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == json!("%clamp_red"))
        .unwrap()["bytes"]
        .as_i64()
        .unwrap();
    let saved = |g: &Value| g["saved_bytes"].as_i64().unwrap();
    let body = clamp_after["body_bytes"].as_i64().unwrap();
    assert_eq!(saved(&clamp_before) - saved(&clamp_after), body - thunk);

    // Compared with itself, nothing changed.
    s.build(&before, "again", &["--compare", base.to_str().unwrap()])
        .status(0);
    let c = s.comparison("again");
    for key in [
        "functions_added",
        "functions_removed",
        "groups",
        "lost_folds",
        "size_changes",
    ] {
        assert_eq!(c[key], json!([]), "{key}");
    }
}

/// Groups that appear, disappear and change members, on edits of the example: a copy of
/// `%add_two` added, `%sum_to_copy` changed, `%twice_b` renamed.
#[test]
fn compare_tells_groups_that_appear_disappear_and_change() {
    let s = Scratch::new();
    let example = std::fs::read_to_string(fixture("example.clif")).unwrap();
    let add_two_start = example.find("function %add_two(").unwrap();
    let add_two_len = example[add_two_start..].find("}\n").unwrap() + 2;
    let add_two = &example[add_two_start..add_two_start + add_two_len];
    let sum_start = example.find("function %sum_to_copy(").unwrap();
    let mut edited = example.clone();
    // %sum_to_copy adds 2 instead of 1 in its recursive step.
    let sum_len = example[sum_start..].find("}\n").unwrap();
    let changed =
        example[sum_start..sum_start + sum_len].replace("v1 = iconst.i64 1", "v1 = iconst.i64 2");
    edited.replace_range(sum_start..sum_start + sum_len, &changed);
    let edited = edited.replace("%twice_b", "%twice_c")
        + "\n"
        + &add_two.replace("%add_two", "%add_two_copy");
    let base = s.build(&fixture("example.clif"), "base", &[]).status(0);
    drop(base);
    let input = s.write("edited.clif", &edited);
    let base = s.path("base.json");
    s.build(&input, "edited", &["--compare", base.to_str().unwrap()])
        .status(0);
    let c = s.comparison("edited");
    assert_eq!(c["functions_added"], json!(["%add_two_copy", "%twice_c"]));
    assert_eq!(c["functions_removed"], json!(["%twice_b"]));
    assert_eq!(
        group_changes(&c),
        [
            change("appeared", "%add_two", &["%add_two", "%add_two_copy"], &[]),
            change("changed", "%twice_a", &["%twice_c"], &["%twice_b"]),
            change("disappeared", "%sum_to", &[], &["%sum_to", "%sum_to_copy"]),
        ]
    );
    assert_eq!(lost_folds(&c), [("%sum_to_copy".into(), "%sum_to".into())]);
    let why = c["lost_folds"][0]["first_difference"].as_str().unwrap();
    assert!(
        why.contains("iconst.i64 2") && why.contains("iconst.i64 1"),
        "{why}"
    );
}

/// Merge-similar groups compare too: when a member stops being similar, its group goes
/// and the lost fold says where the two differ even with holes.
#[test]
fn compare_tells_lost_merge_similar_folds() {
    let s = Scratch::new();
    let groups = std::fs::read_to_string(fixture("similar/groups.clif")).unwrap();
    let start = groups.find("function %five_b(").unwrap();
    let len = groups[start..].find("}\n").unwrap();
    let mut edited = groups.clone();
    let changed = groups[start..start + len].replace("bxor", "bor");
    assert_ne!(changed, groups[start..start + len]);
    edited.replace_range(start..start + len, &changed);
    let input = s.write("edited.clif", &edited);
    s.build(
        &fixture("similar/groups.clif"),
        "base",
        &["--merge-similar"],
    )
    .status(0);
    let base = s.path("base.json");
    s.build(
        &input,
        "edited",
        &["--merge-similar", "--compare", base.to_str().unwrap()],
    )
    .status(0);
    let c = s.comparison("edited");
    assert_eq!(c["functions_added"], json!([]));
    assert_eq!(c["functions_removed"], json!([]));
    let similar: Vec<&Value> = c["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["kind"] == json!("similar"))
        .collect();
    assert_eq!(similar.len(), 1, "{c:#}");
    assert_eq!(similar[0]["change"], json!("disappeared"));
    assert_eq!(similar[0]["group"], json!("%clif_merge_similar_five_a"));
    let lost: Vec<&Value> = c["lost_folds"].as_array().unwrap().iter().collect();
    assert_eq!(lost.len(), 1, "{c:#}");
    assert_eq!(lost[0]["kind"], json!("similar"));
    assert_eq!(lost[0]["function"], json!("%five_b"));
    assert_eq!(lost[0]["was_with"], json!("%five_a"));
    let why = lost[0]["first_difference"].as_str().unwrap();
    assert!(why.contains("bor") && why.contains("bxor"), "{why}");
}

/// Exit 3 with a one-line reason for a lost fold (whatever the threshold) and for growth
/// past the threshold, in bytes or percent; 0 for growth within it, no change, or a
/// smaller object. Outputs are written either way: a regression is not an error.
#[test]
fn fail_on_regression_exits_3_for_a_lost_fold_or_growth_past_the_threshold() {
    let s = Scratch::new();
    let before = fixture("size-regression/before.clif");
    s.build(&before, "before", &[]).status(0);
    let base = s.path("before.json");
    let base = base.to_str().unwrap();
    let gate = |input: &Path, threshold: &str| {
        s.build(
            input,
            "now",
            &["--compare", base, "--fail-on-regression", threshold, "-q"],
        )
    };
    let message = |run: &Run| -> String {
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {}", run.stderr);
        assert!(lines[0].starts_with("size regression: "), "{}", run.stderr);
        lines[0].to_string()
    };

    // The README's after.clif loses a fold: a regression even at 1000%.
    let after = fixture("size-regression/after.clif");
    let run = gate(&after, "1000%").status(REGRESSION);
    let why = message(&run);
    assert!(
        why.contains("fold(s) lost") && why.contains("%clamp_blue"),
        "{why}"
    );
    assert!(!why.contains("grew"), "{why}");
    assert!(read_json(&s.path("now.json"))["comparison"].is_object());
    assert!(s.path("now.o").exists());

    // A new function, nothing lost: growth only.
    let grown_text = std::fs::read_to_string(&before).unwrap()
        + "\nfunction %extra(i64) -> i64 system_v {\nblock0(v0: i64):\n    v1 = imul v0, v0\n    v2 = iadd v1, v0\n    return v2\n}\n";
    let grown = s.write("grown.clif", &grown_text);
    s.build(&grown, "probe", &[]).status(0);
    let (old, new) = (
        text_size(&s.path("before.o")),
        text_size(&s.path("probe.o")),
    );
    assert!(new > old);
    let growth = new - old;
    gate(&grown, &growth.to_string()).status(0);
    let run = gate(&grown, &(growth - 1).to_string()).status(REGRESSION);
    let why = message(&run);
    assert!(
        why.contains(&format!("{old} -> {new}")) && !why.contains("lost"),
        "{why}"
    );
    let percent = growth as f64 * 100.0 / old as f64;
    gate(&grown, &format!("{:.3}%", percent + 0.01)).status(0);
    gate(&grown, &format!("{:.3}%", percent - 0.01)).status(REGRESSION);
    gate(&grown, "0").status(REGRESSION);

    // The same module, and a smaller one (a function removed), pass at 0.
    gate(&before, "0").status(0);
    let smaller_text = std::fs::read_to_string(&before).unwrap();
    let cut = smaller_text.find("function %area(").unwrap();
    let end = cut + smaller_text[cut..].find("}\n").unwrap() + 2;
    let smaller = s.write(
        "smaller.clif",
        &format!("{}{}", &smaller_text[..cut], &smaller_text[end..]),
    );
    gate(&smaller, "0").status(0);
}

/// Bad thresholds, a missing, broken, foreign or old baseline, a baseline without an
/// object: each a clear message naming the value or file, never a panic, and no output
/// left behind.
#[test]
fn bad_regression_arguments_are_clear_errors() {
    let s = Scratch::new();
    let before = fixture("size-regression/before.clif");
    s.build(&before, "before", &[]).status(0);
    let base = s.path("before.json");
    let base = base.to_str().unwrap();

    // Usage errors (status 2).
    let run = s
        .build(&before, "x", &["--fail-on-regression", "2%"])
        .status(2);
    assert!(run.stderr.contains("--compare"), "{}", run.stderr);
    for bad in ["abc", "-5", "2%%", "1e3%", "5kb"] {
        let flag = format!("--fail-on-regression={bad}");
        let run = s.build(&before, "x", &["--compare", base, &flag]).status(2);
        assert!(run.stderr.contains(&format!("`{bad}`")), "{}", run.stderr);
    }

    // Errors (status 1) naming the baseline.
    let mut report = read_json(&s.path("before.json"));
    report.as_object_mut().unwrap().remove("format_version");
    let old = s.write("old.json", &report.to_string());
    report["format_version"] = json!(999);
    let future = s.write("future.json", &report.to_string());
    let broken = s.write("broken.json", "{\"format_version\": 1, \"groups\": ");
    let foreign = s.write("foreign.json", "{\"name\": \"a bloaty report\"}");
    let missing = s.path("missing.json");
    for (file, says) in [
        (&old, "older clif-merge"),
        (&future, "report format 999"),
        (&broken, "not a JSON report"),
        (&foreign, "not a clif-merge report"),
        (&missing, "missing.json"),
    ] {
        let run = s
            .build(
                &before,
                "x",
                &["--compare", file.to_str().unwrap(), "--plot", "x.svg"],
            )
            .status(1);
        assert!(
            run.stderr
                .starts_with(&format!("error: --compare {}", file.display()))
                && run.stderr.contains(says),
            "{}",
            run.stderr
        );
        for out in ["x.o", "x.json", "x.svg"] {
            assert!(
                !s.path(out).exists(),
                "{out} left behind after: {}",
                run.stderr
            );
        }
    }

    // A baseline made without -o has no .text to compare.
    let mut a = args![&before, "--report", s.path("noobj.json")];
    a.extend(args!["--target", X86]);
    run_here(s.0.path(), &a).status(0);
    let run = s
        .build(
            &before,
            "x",
            &[
                "--compare",
                s.path("noobj.json").to_str().unwrap(),
                "--fail-on-regression",
                "0",
            ],
        )
        .status(1);
    assert!(
        run.stderr.contains("noobj.json has no .text size"),
        "{}",
        run.stderr
    );
}

/// `--plot` writes well-formed SVG: the top groups, or the comparison, each group a bar
/// labelled with its name.
#[test]
fn plot_is_valid_svg() {
    let s = Scratch::new();
    s.build(
        &fixture("size-regression/before.clif"),
        "before",
        &["--plot", "top.svg"],
    )
    .status(0);
    let base = s.path("before.json");
    s.build(
        &fixture("size-regression/after.clif"),
        "after",
        &["--compare", base.to_str().unwrap(), "--plot", "compare.svg"],
    )
    .status(0);
    for (file, report, two_bars) in [
        ("top.svg", "before.json", false),
        ("compare.svg", "after.json", true),
    ] {
        let text = std::fs::read_to_string(s.path(file)).unwrap();
        let doc =
            roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{file} is not XML: {e}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg", "{file}");
        assert_eq!(
            root.tag_name().namespace(),
            Some("http://www.w3.org/2000/svg")
        );
        let texts: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(|t| t.trim().to_string())
            .collect();
        let report = read_json(&s.path(report));
        let groups: Vec<String> = if two_bars {
            report["comparison"]["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["group"].as_str().unwrap().to_string())
                .collect()
        } else {
            report["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["keep"].as_str().unwrap().to_string())
                .collect()
        };
        assert!(!groups.is_empty());
        for g in &groups {
            assert!(
                texts.iter().any(|t| t.contains(g.as_str())),
                "{file}: no label for {g} in {texts:?}"
            );
        }
        let bars = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|n| n.attribute("fill") == Some("#3182BD"))
            .count();
        // One bar per group now, plus the legend's.
        assert_eq!(bars, groups.len() + usize::from(two_bars), "{file}");
    }
}

/// The README's "Size regressions in CI" example, run exactly as written there (from a
/// copy of the fixtures, so the outputs land in a scratch directory): every command, its
/// output (standard output, then standard error) and the exit status `echo $?` shows.
#[test]
fn the_readme_example_runs_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("\n## Size regressions in CI\n")
        .nth(1)
        .expect("the README has a \"Size regressions in CI\" section");
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section has a text block");
    // (command, expected output) pairs.
    let mut steps: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push((command.to_string(), String::new())),
            None => {
                let (_, out) = steps.last_mut().expect("the block starts with a command");
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    assert!(steps.len() >= 3, "{block}");

    let dir = tempfile::tempdir().unwrap();
    let fixtures = dir.path().join("fixtures/size-regression");
    std::fs::create_dir_all(&fixtures).unwrap();
    for name in ["before.clif", "after.clif"] {
        std::fs::copy(
            fixture(&format!("size-regression/{name}")),
            fixtures.join(name),
        )
        .unwrap();
    }
    let mut status = None;
    for (command, expected) in &steps {
        let words: Vec<&str> = command.split_whitespace().collect();
        let output = match words[..] {
            ["echo", "$?"] => format!("{}\n", status.expect("a command ran before")),
            ["clif-merge", ref rest @ ..] => {
                let run = run_here(
                    dir.path(),
                    &rest.iter().map(OsString::from).collect::<Vec<_>>(),
                );
                assert!(
                    !run.stderr.contains("panicked"),
                    "{command}: {}",
                    run.stderr
                );
                status = run.code;
                run.stdout + &run.stderr
            }
            _ => panic!("the README example runs only clif-merge and `echo $?`: {command}"),
        };
        assert_eq!(
            output, *expected,
            "`{command}` printed something else than the README"
        );
    }
    assert_eq!(
        status,
        Some(REGRESSION),
        "the example ends with the regression status"
    );
    // What it wrote is what the text says.
    let report = read_json(&dir.path().join("after.json"));
    assert!(report["comparison"].is_object());
    let svg = std::fs::read_to_string(dir.path().join("size.svg")).unwrap();
    roxmltree::Document::parse(&svg).expect("size.svg is XML");
}

/// The summary ends with the groups that save the most, most first, as many as asked:
/// checked on a real report read back as the library's `Report`.
#[test]
fn the_summary_lists_the_top_groups_by_bytes_saved() {
    let s = Scratch::new();
    s.build(&fixture("similar/groups.clif"), "r", &["--merge-similar"])
        .status(0);
    let report: clif_merge::report::Report =
        serde_json::from_str(&std::fs::read_to_string(s.path("r.json")).unwrap()).unwrap();
    let json = read_json(&s.path("r.json"));
    let mut saved: Vec<i64> = saved_bytes(&json).into_iter().map(|(_, b)| b).collect();
    saved.sort_unstable_by(|a, b| b.cmp(a));
    assert!(
        saved.len() > 3 && saved[0] > saved[saved.len() - 1],
        "{saved:?}"
    );
    for top in [0, 1, 3, saved.len(), saved.len() + 5] {
        let table = report.table_with_top(top);
        let listed: Vec<i64> = table
            .split_once("groups by bytes saved\n")
            .map_or("", |(_, rows)| rows)
            .lines()
            .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            listed,
            saved[..top.min(saved.len())],
            "--top {top}:\n{table}"
        );
        let heading = format!("top {} of {} groups", top.min(saved.len()), saved.len());
        assert_eq!(
            table.contains(&heading),
            top > 0 && top < saved.len(),
            "{table}"
        );
    }
    assert!(report.table_with_top(10).contains("(similar)"));
}

/// The report (but its timings), the comparison table and the SVG are the same bytes
/// whatever the thread count.
#[test]
fn outputs_do_not_depend_on_the_thread_count() {
    let s = Scratch::new();
    for (base, input, flags) in [
        (
            "size-regression/before.clif",
            "size-regression/after.clif",
            &[][..],
        ),
        (
            "similar/groups.clif",
            "similar/constants.clif",
            &["--merge-similar"][..],
        ),
    ] {
        s.build(&fixture(base), "base", flags).status(0);
        let mut outputs = Vec::new();
        for threads in ["1", "2"] {
            let mut a = vec![
                "--threads",
                threads,
                "--compare",
                "base.json",
                "--plot",
                "p.svg",
            ];
            a.extend(flags);
            let run = s.build(&fixture(input), "now", &a).status(0);
            let mut report = read_json(&s.path("now.json"));
            report.as_object_mut().unwrap().remove("timings");
            let svg = std::fs::read(s.path("p.svg")).unwrap();
            outputs.push((run.stdout, report, svg));
        }
        assert!(
            outputs[0].0.contains("compared with base.json"),
            "{}",
            outputs[0].0
        );
        assert!(
            outputs[0] == outputs[1],
            "{input}: outputs differ between 1 and 2 threads"
        );
    }
}
