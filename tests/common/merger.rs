//! The merger's fixture runner: a fixture states, in directive comments, which functions
//! the merger must fold together, which must stay apart, and what each folded name becomes
//! in each mode. Every file is also merged with its functions in reverse order and must give
//! the same groups, kept functions and actions.
//!
//! Directives (one per comment line):
//! - `; linkage: %name local|hidden|export|preemptible` (default export)
//! - `; unnamed-addr: %name` nobody compares %name's address (LLVM's `unnamed_addr`)
//! - `; target: <triple>` merge under this triple instead of x86_64 Linux
//! - `; expect-group: %a %b ...` all share one body
//! - `; expect-apart: %a %b` do not share one body
//! - `; expect-kept: %a` %a is the kept function of its group
//! - `; expect-found-by: tree|cycle %a` how %a's group was found
//! - `; expect-without-cycles: apart %a %b` apart when cycle folding is off (LLVM's behaviour)
//! - `; expect-action: aliases|trampolines %g keep|erased|alias|thunk`
//! - `; expect-redirect: %g yes|no` whether direct calls to %g go to the kept function
//! - `; expect-shared-body: %a` the group of %a has its body in a new local function
//! - `; expect-emitted: aliases|trampolines %g body|copy|thunk|alias|none` what the object
//!   file compiled for the fixture's triple holds under %g's name: its own compiled body, a
//!   copy of the group's body (a body no larger than a jump is copied, not thunked), a
//!   single-jump thunk, a second symbol at the body's address, or no symbol at all.
//!   Checked in release builds only (emission trips a debug assertion, see below).
//!
//! The detector's `; expect: equal|differ ...` lines are accepted (and left to the
//! detector's runner) only in files run with [`Vocabulary::WithDetector`].

use std::path::Path;

use clif_merge::emit::{build_isa, EmitOptions, EmitSummary};
use clif_merge::emit_object;
use clif_merge::merge::{
    Action, Body, FoundBy, Linkage, MergeMode, MergeOptions, MergePlan, Module,
};
use clif_merge::{FuncName, TargetInfo};
use cranelift_object::object::{self, Object as _, ObjectSection as _, ObjectSymbol as _};

/// The triple a fixture is merged under when it names none.
pub const DEFAULT_TRIPLE: &str = "x86_64-unknown-linux-gnu";

pub struct Fixture {
    pub path: String,
    pub text: String,
}

/// Which directives a fixture may use besides the merger's own.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Vocabulary {
    MergerOnly,
    WithDetector,
}

/// Every `.clif` file in `dir` (relative to the crate), in path order.
pub fn fixtures_in(dir: &str) -> Vec<Fixture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "clif"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| Fixture {
            text: std::fs::read_to_string(&p).unwrap(),
            path: p.display().to_string(),
        })
        .collect()
}

/// The merger's directives of `text` as (key, words); `expect:` (the detector's) and
/// `target:` lines are included with their keys.
pub fn directives(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("; "))
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, _)| {
            k.starts_with("expect") || ["linkage", "unnamed-addr", "target"].contains(k)
        })
        .map(|(k, v)| {
            (
                k.to_string(),
                v.split_whitespace().map(String::from).collect(),
            )
        })
        .collect()
}

/// The fixture's `; target:` triple, or [`DEFAULT_TRIPLE`].
pub fn triple(fx: &Fixture) -> String {
    let targets: Vec<_> = directives(&fx.text)
        .into_iter()
        .filter(|(k, _)| k == "target")
        .collect();
    assert!(targets.len() <= 1, "{}: more than one target", fx.path);
    targets
        .first()
        .map_or(DEFAULT_TRIPLE.to_string(), |(_, v)| v.join(" "))
}

pub fn build(fx: &Fixture, reverse: bool) -> Module {
    let mut functions: Vec<_> = clif_merge::read::parse_clif(&fx.text, &fx.path)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|p| p.func)
        .collect();
    if reverse {
        functions.reverse();
    }
    let dirs = directives(&fx.text);
    let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
    let mut module = Module::new();
    for func in functions {
        cranelift_codegen::verify_function(&func, &flags)
            .unwrap_or_else(|e| panic!("{}: {} fails verification: {e}", fx.path, func.name));
        let name = FuncName::of_function(&func).to_string();
        let linkage = dirs
            .iter()
            .rev()
            .find(|(k, v)| k == "linkage" && v[0] == name)
            .map(|(_, v)| match v[1].as_str() {
                "local" => Linkage::Local,
                "hidden" => Linkage::Hidden,
                "export" => Linkage::Export,
                "preemptible" => Linkage::Preemptible,
                other => panic!("{}: unknown linkage {other}", fx.path),
            })
            .unwrap_or(Linkage::Export);
        let unnamed_addr = dirs
            .iter()
            .any(|(k, v)| k == "unnamed-addr" && v.contains(&name));
        module.add(func, linkage, unnamed_addr).unwrap();
    }
    for (k, v) in &dirs {
        if k == "linkage" || k == "unnamed-addr" {
            let name = &v[0];
            assert!(
                FuncName::parse(name).is_some_and(|n| module.lookup(&n).is_some()),
                "{}: `{k}: {}` names no function of the file",
                fx.path,
                v.join(" ")
            );
        }
    }
    module
}

pub fn index(module: &Module, fx: &Fixture, name: &str) -> clif_merge::FuncIndex {
    module
        .lookup(&FuncName::parse(name).unwrap_or_else(|| panic!("{}: bad name {name}", fx.path)))
        .unwrap_or_else(|| panic!("{}: no function {name}", fx.path))
}

/// A group as (kept name, folded names with actions, how it was found).
type GroupSummary = (String, Vec<(String, Action)>, FoundBy);

/// Groups as (kept name, sorted folded names with actions, found_by), sorted.
fn summary(module: &Module, plan: &MergePlan) -> Vec<GroupSummary> {
    let mut groups: Vec<_> = plan
        .groups()
        .iter()
        .map(|g| {
            let mut folded: Vec<_> = g
                .folded
                .iter()
                .map(|&(f, a)| (module.get(f).name.to_string(), a))
                .collect();
            folded.sort_by(|a, b| a.0.cmp(&b.0));
            (module.get(g.kept).name.to_string(), folded, g.found_by)
        })
        .collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    groups
}

/// The options of a fixture's mode: plans for objects, as the command line makes them
/// (aliases are symbols at their body).
pub fn options(mode: MergeMode, fold_cycles: bool) -> MergeOptions {
    MergeOptions {
        mode,
        fold_cycles,
        aliases_share_address: true,
        ..Default::default()
    }
}

fn mode_named(at: &str, word: &str) -> MergeMode {
    match word {
        "aliases" => MergeMode::Aliases,
        "trampolines" => MergeMode::Trampolines,
        other => panic!("{at}: unknown mode {other}"),
    }
}

/// What the object holds under one function's name.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Emitted {
    Body,
    Copy,
    Thunk,
    Alias,
    None,
}

/// The object file for `module` under `target` in `mode` (default emission options,
/// position-independent code), and what each checked name became in it.
pub struct Emission {
    bytes: Vec<u8>,
    summary: EmitSummary,
    jump_size: u64,
}

impl Emission {
    pub fn new(module: &Module, target: &TargetInfo, mode: MergeMode) -> Self {
        let settings = [("is_pic".to_string(), "true".to_string())];
        let isa = build_isa(target, &settings)
            .unwrap_or_else(|e| panic!("expect-emitted needs an ISA for {}: {e}", target.triple()));
        let opts = options(mode, true);
        let plan = clif_merge::merge(module, target, &opts);
        let (bytes, summary) = emit_object(module, &plan, isa, &opts, &EmitOptions::default())
            .unwrap_or_else(|e| panic!("emission failed: {e}"));
        let jump_size = u64::from(target.jump_thunk_size().expect("a jump thunk size"));
        Self {
            bytes,
            summary,
            jump_size,
        }
    }

    /// (address, size, bytes) of the defined text symbol `symbol`, if any.
    fn symbol(&self, symbol: &str) -> Option<(u64, u64, Vec<u8>)> {
        let file = object::File::parse(&*self.bytes).unwrap();
        let sym = file.symbols().find(|s| {
            s.is_definition()
                && s.kind() == object::SymbolKind::Text
                && s.name().is_ok_and(|n| n.trim_start_matches('_') == symbol)
        })?;
        let section = file.section_by_index(sym.section_index()?).unwrap();
        let data = section.data().unwrap();
        let start = (sym.address() - section.address()) as usize;
        let bytes = data[start..start + sym.size() as usize].to_vec();
        Some((sym.address(), sym.size(), bytes))
    }

    /// What `f` became.
    pub fn of(&self, module: &Module, f: clif_merge::FuncIndex) -> Emitted {
        let plan = &self.summary.plan;
        let Some((address, size, bytes)) = self.symbol(&module.get(f).name.symbol()) else {
            return Emitted::None;
        };
        let Some(group) = plan.group_of(f) else {
            return Emitted::Body;
        };
        let body_symbol = match &group.body {
            Body::Kept => module.get(group.kept).name.symbol(),
            Body::SharedLocal { symbol } => symbol.clone(),
        };
        if body_symbol == module.get(f).name.symbol() {
            return Emitted::Body;
        }
        let (body_address, _, body_bytes) = self
            .symbol(&body_symbol)
            .unwrap_or_else(|| panic!("no symbol for the body {body_symbol}"));
        if self.summary.copied.contains(&f) {
            assert_eq!(
                bytes, body_bytes,
                "a copy of {body_symbol} is not its bytes"
            );
            assert!(size <= self.jump_size, "a copy larger than a jump");
            Emitted::Copy
        } else if address == body_address {
            Emitted::Alias
        } else if size == self.jump_size && plan.action(f) == Action::Thunk {
            Emitted::Thunk
        } else {
            panic!(
                "{} is neither the body, a copy, an alias nor a jump ({size} bytes)",
                module.get(f).name
            )
        }
    }
}

/// Run every directive of `fx` in both modes.
pub fn check(fx: &Fixture, vocabulary: Vocabulary) {
    let target =
        TargetInfo::from_triple_str(&triple(fx)).unwrap_or_else(|e| panic!("{}: {e}", fx.path));
    let module = build(fx, false);
    let reversed = build(fx, true);
    let dirs = directives(&fx.text);
    assert!(
        dirs.iter().any(|(k, _)| k.starts_with("expect")),
        "{}: no expectations",
        fx.path
    );
    for mode in [MergeMode::Trampolines, MergeMode::Aliases] {
        let plan = clif_merge::merge(&module, &target, &options(mode, true));
        let plan_rev = clif_merge::merge(&reversed, &target, &options(mode, true));
        assert_eq!(
            summary(&module, &plan),
            summary(&reversed, &plan_rev),
            "{}: the result depends on input order ({mode:?})",
            fx.path
        );
        let without_cycles = clif_merge::merge(&module, &target, &options(mode, false));
        let mut emission = None;
        let idx = |name: &str| index(&module, fx, name);
        for (kind, args) in &dirs {
            let at = format!("{}: `{kind}: {}` ({mode:?})", fx.path, args.join(" "));
            match kind.as_str() {
                "linkage" | "unnamed-addr" | "target" => {}
                "expect" if vocabulary == Vocabulary::WithDetector => {}
                "expect-group" => {
                    for pair in args.windows(2) {
                        assert!(plan.same_body(idx(&pair[0]), idx(&pair[1])), "{at}");
                    }
                }
                "expect-apart" => {
                    assert!(!plan.same_body(idx(&args[0]), idx(&args[1])), "{at}");
                }
                "expect-kept" => {
                    let f = idx(&args[0]);
                    assert_eq!(plan.group_of(f).map(|g| g.kept), Some(f), "{at}");
                }
                "expect-found-by" => {
                    let want = match args[0].as_str() {
                        "tree" => FoundBy::Tree,
                        "cycle" => FoundBy::Cycle,
                        other => panic!("{at}: unknown {other}"),
                    };
                    let group = plan.group_of(idx(&args[1])).expect(&at);
                    assert_eq!(group.found_by, want, "{at}");
                }
                "expect-without-cycles" => {
                    assert_eq!(args[0], "apart", "{at}");
                    assert!(
                        !without_cycles.same_body(idx(&args[1]), idx(&args[2])),
                        "{at}"
                    );
                }
                "expect-action" => {
                    if mode_named(&at, &args[0]) != mode {
                        continue;
                    }
                    let want = match args[2].as_str() {
                        "keep" => Action::Keep,
                        "erased" => Action::Erased,
                        "alias" => Action::Alias,
                        "thunk" => Action::Thunk,
                        other => panic!("{at}: unknown action {other}"),
                    };
                    assert_eq!(plan.action(idx(&args[1])), want, "{at}");
                }
                "expect-redirect" => {
                    let want = match args[1].as_str() {
                        "yes" => true,
                        "no" => false,
                        other => panic!("{at}: expected yes or no, got {other}"),
                    };
                    assert_eq!(plan.redirect(idx(&args[0])).is_some(), want, "{at}");
                }
                "expect-shared-body" => {
                    let group = plan.group_of(idx(&args[0])).expect(&at);
                    assert!(matches!(group.body, Body::SharedLocal { .. }), "{at}");
                }
                "expect-emitted" => {
                    if mode_named(&at, &args[0]) != mode {
                        continue;
                    }
                    let want = match args[2].as_str() {
                        "body" => Emitted::Body,
                        "copy" => Emitted::Copy,
                        "thunk" => Emitted::Thunk,
                        "alias" => Emitted::Alias,
                        "none" => Emitted::None,
                        other => panic!("{at}: unknown emission {other}"),
                    };
                    let emission =
                        emission.get_or_insert_with(|| Emission::new(&module, &target, mode));
                    assert_eq!(emission.of(&module, idx(&args[1])), want, "{at}");
                }
                other => panic!("{}: unknown directive {other}", fx.path),
            }
        }
    }
    let disabled = clif_merge::merge(&module, &target, &options(MergeMode::Disabled, true));
    assert_eq!(
        disabled.folded_count(),
        0,
        "{}: disabled mode folded",
        fx.path
    );
}
