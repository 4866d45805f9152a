//! The detector's fixture runner: one file per detector rule, each stating its expectations
//! in directive comments.
//!
//! Directives (one per comment line):
//! - `; target: <triple>` compare (and verify) under this triple instead of x86_64 Linux;
//! - `; expect: equal %a %b` the comparator calls the two functions equal;
//! - `; expect: differ %a %b <what>` the comparator tells them apart, and the explainer's
//!   `what` for the first difference contains `<what>` (in both directions).
//!
//! For every directive both directions are checked: `compare(a, b)` and `compare(b, a)` are
//! consistent, equal functions have equal hashes and no explanation, `key` orders the same
//! way `compare` does. Every function is also checked against a renumbered copy of itself
//! (the fixture's text with every value and block renamed, parsed again), and every file's
//! functions are checked pairwise for antisymmetry and triple-wise for transitivity. A
//! file fails when it defines a name twice or names a function it does not define; every
//! function must pass Cranelift's verifier (with the triple's ISA when this build has one).
//! With [`Vocabulary::DetectorOnly`] (`fixtures/detector/`) a file also fails when it has no
//! directive or a function no directive names; with [`Vocabulary::WithMerger`]
//! (`fixtures/llvm/`) the merger's `expect-...:`, `linkage:` and `unnamed-addr:` lines are
//! left to the merger's runner (`tests/common/merger.rs`).

use std::cmp::Ordering;
use std::path::Path;

use clif_merge::detect::{explain, ByName, Difference};
use clif_merge::{function_hash, FuncName, FunctionComparator, TargetInfo};
use cranelift_codegen::ir::{Function, GlobalValueData, InstructionData, Type};
use cranelift_codegen::isa;
use cranelift_codegen::{settings, verify_function};

/// Which directives a fixture may use besides the detector's own.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Vocabulary {
    DetectorOnly,
    WithMerger,
}
/// The triple a fixture is compared under when it names none.
pub const DEFAULT_TRIPLE: &str = "x86_64-unknown-linux-gnu";

#[derive(Debug)]
pub enum Expect {
    Equal,
    Differ(String),
}

#[derive(Debug)]
pub struct Directive {
    pub line: usize,
    pub expect: Expect,
    pub a: String,
    pub b: String,
}

pub struct Fixture {
    pub path: String,
    pub text: String,
    pub triple: String,
    pub directives: Vec<Directive>,
    pub functions: Vec<Function>,
    pub vocabulary: Vocabulary,
}

impl Fixture {
    pub fn target(&self) -> TargetInfo {
        TargetInfo::from_triple_str(&self.triple).unwrap_or_else(|e| panic!("{}: {e}", self.path))
    }

    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions
            .iter()
            .find(|f| FuncName::of_function(f).to_string() == name)
    }
}

pub fn fixture_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/detector")
}

/// Parse the directives of one file. Malformed directives are errors, not ignored lines.
pub fn parse_directives(path: &str, text: &str) -> (Option<String>, Vec<Directive>) {
    parse_directives_with(path, text, Vocabulary::DetectorOnly)
}

/// [`parse_directives`], accepting the merger's directives with [`Vocabulary::WithMerger`].
pub fn parse_directives_with(
    path: &str,
    text: &str,
    vocabulary: Vocabulary,
) -> (Option<String>, Vec<Directive>) {
    let mut triple = None;
    let mut directives = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let Some(comment) = line.trim_start().strip_prefix(';') else {
            continue;
        };
        let comment = comment.trim();
        if let Some(rest) = comment.strip_prefix("target:") {
            assert!(
                triple.is_none(),
                "{path}:{line_no}: a second `; target:` directive"
            );
            triple = Some(rest.trim().to_string());
        } else if let Some(rest) = comment.strip_prefix("expect:") {
            let mut words = rest.split_whitespace();
            let kind = words.next();
            let a = words.next();
            let b = words.next();
            let what: Vec<&str> = words.collect();
            let (Some(kind), Some(a), Some(b)) = (kind, a, b) else {
                panic!("{path}:{line_no}: expected `; expect: equal|differ %a %b [what]`");
            };
            let expect = match (kind, what.is_empty()) {
                ("equal", true) => Expect::Equal,
                ("differ", false) => Expect::Differ(what.join(" ")),
                ("equal", false) => panic!("{path}:{line_no}: `equal` takes two names only"),
                ("differ", true) => {
                    panic!(
                        "{path}:{line_no}: `differ` needs the explainer's `what` after the names"
                    )
                }
                _ => panic!("{path}:{line_no}: unknown expectation `{kind}`"),
            };
            directives.push(Directive {
                line: line_no,
                expect,
                a: a.to_string(),
                b: b.to_string(),
            });
        } else if vocabulary == Vocabulary::WithMerger
            && ["expect-", "linkage:", "unnamed-addr:"]
                .iter()
                .any(|p| comment.starts_with(p))
        {
            // The merger's runner reads these.
        } else if comment.starts_with("expect") || comment.starts_with("target") {
            panic!("{path}:{line_no}: malformed directive `{comment}`");
        }
    }
    (triple, directives)
}

pub fn load_fixtures() -> Vec<Fixture> {
    let dir = fixture_dir();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "clif"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 30, "detector fixtures are missing");
    paths
        .into_iter()
        .map(|p| Fixture::load(&p, Vocabulary::DetectorOnly))
        .collect()
}

impl Fixture {
    /// Read and parse the fixture at `p`.
    pub fn load(p: &Path, vocabulary: Vocabulary) -> Fixture {
        let path = p.display().to_string();
        let text = std::fs::read_to_string(p).unwrap();
        let (triple, directives) = parse_directives_with(&path, &text, vocabulary);
        let functions = clif_merge::read::parse_clif(&text, p)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|f| *f.func)
            .collect();
        Fixture {
            path,
            text,
            triple: triple.unwrap_or_else(|| DEFAULT_TRIPLE.to_string()),
            directives,
            functions,
            vocabulary,
        }
    }
}

/// Verify `func` with Cranelift's verifier: with the ISA of `triple` when this build of
/// cranelift-codegen has one, else with default flags plus the pointer-width checks the ISA
/// would have made (`check_address_types`).
pub fn verify(func: &Function, triple: &str, target: &TargetInfo) -> Result<(), String> {
    let flags = settings::Flags::new(settings::builder());
    let parsed: target_lexicon::Triple = triple.parse().map_err(|e| format!("{e}"))?;
    match isa::lookup(parsed) {
        Ok(builder) => {
            let isa = builder.finish(flags).map_err(|e| format!("{e}"))?;
            verify_function(func, isa.as_ref()).map_err(|e| e.to_string())
        }
        Err(_) => {
            verify_function(func, &flags).map_err(|e| e.to_string())?;
            check_address_types(func, target.pointer_type())
        }
    }
}

/// The global-value type checks `verify_function` makes only when it has an ISA, with the
/// pointer type of the target: a `load` global value's base is an address, an `iadd_imm`
/// has its base's type, and `symbol_value`/`tls_value` have their global value's type.
pub fn check_address_types(func: &Function, ptr: Type) -> Result<(), String> {
    let gv_type = |gv| match func.global_values[gv] {
        GlobalValueData::VMContext
        | GlobalValueData::Symbol { .. }
        | GlobalValueData::DynScaleTargetConst { .. } => ptr,
        GlobalValueData::Load { global_type, .. }
        | GlobalValueData::IAddImm { global_type, .. } => global_type,
    };
    for (gv, data) in func.global_values.iter() {
        match *data {
            GlobalValueData::Load { base, .. } if gv_type(base) != ptr => {
                return Err(format!(
                    "{gv}: base {base} is not of the pointer type {ptr}"
                ));
            }
            GlobalValueData::IAddImm {
                base, global_type, ..
            } if gv_type(base) != global_type => {
                return Err(format!("{gv}: iadd_imm of type {global_type} on {base}"));
            }
            _ => {}
        }
    }
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let InstructionData::UnaryGlobalValue { global_value, .. } = func.dfg.insts[inst] {
                let ty = func.dfg.value_type(func.dfg.first_result(inst));
                if ty != gv_type(global_value) {
                    return Err(format!(
                        "{}: type {ty} but {global_value} has type {}",
                        func.dfg.display_inst(inst),
                        gv_type(global_value)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Rename every value `vN` to `v(3N+7)` and every block `blockN` to `block(N+5)` in CLIF
/// text. Names (`%v1`), numbers inside other words and comments are left alone.
pub fn renumber_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for line in text.lines() {
        let (code, comment) = match line.find(';') {
            Some(i) => line.split_at(i),
            None => (line, ""),
        };
        let bytes = code.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let boundary =
                i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || b"_%.".contains(&bytes[i - 1]));
            let rest = &code[i..];
            let prefix = if !boundary {
                None
            } else if rest.starts_with("block") {
                Some("block")
            } else if rest.starts_with('v') {
                Some("v")
            } else {
                None
            };
            if let Some(prefix) = prefix {
                let digits: String = rest[prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                let after = rest[prefix.len() + digits.len()..].chars().next();
                if !digits.is_empty()
                    && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    let n: u64 = digits.parse().unwrap();
                    let renamed = if prefix == "v" { 3 * n + 7 } else { n + 5 };
                    out.push_str(prefix);
                    out.push_str(&renamed.to_string());
                    i += prefix.len() + digits.len();
                    continue;
                }
            }
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
        out.push_str(comment);
        out.push('\n');
    }
    out
}

/// A checker that collects every failure instead of stopping at the first.
#[derive(Default)]
pub struct Failures(pub Vec<String>);

impl Failures {
    pub fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.0.push(msg());
        }
    }
}

pub fn show(d: &Option<Difference>) -> String {
    match d {
        None => "no difference".to_string(),
        Some(d) => format!("`{}` in {} ({} | {})", d.what, d.place, d.left, d.right),
    }
}

/// All the checks of one directive.
pub fn check_directive(fx: &Fixture, target: &TargetInfo, d: &Directive, out: &mut Failures) {
    let here = format!("{}:{}", fx.path, d.line);
    let (Some(a), Some(b)) = (fx.function(&d.a), fx.function(&d.b)) else {
        out.check(false, || {
            format!(
                "{here}: names a function that does not exist ({} or {})",
                d.a, d.b
            )
        });
        return;
    };
    let cmp = FunctionComparator::new(target);
    let (ab, ba) = (cmp.compare(a, b), cmp.compare(b, a));
    let (ea, eb) = (
        explain(target, &ByName, a, b),
        explain(target, &ByName, b, a),
    );
    out.check(ab == ba.reverse(), || {
        format!("{here}: compare is not antisymmetric: {ab:?} one way, {ba:?} the other")
    });
    out.check(cmp.key(a).cmp(&cmp.key(b)) == ab, || {
        format!("{here}: key order disagrees with compare ({ab:?})")
    });
    out.check((ab == Ordering::Equal) == ea.is_none(), || {
        format!("{here}: compare says {ab:?} but explain says {}", show(&ea))
    });
    match &d.expect {
        Expect::Equal => {
            out.check(ab == Ordering::Equal, || {
                format!(
                    "{here}: expected {} == {}, got {ab:?}: {}",
                    d.a,
                    d.b,
                    show(&ea)
                )
            });
            out.check(function_hash(a) == function_hash(b), || {
                format!("{here}: {} and {} are equal but hash differently", d.a, d.b)
            });
            out.check(eb.is_none(), || {
                format!("{here}: explain({}, {}) says {}", d.b, d.a, show(&eb))
            });
        }
        Expect::Differ(what) => {
            out.check(ab != Ordering::Equal, || {
                format!(
                    "{here}: expected {} != {} ({what}), the comparator calls them equal",
                    d.a, d.b
                )
            });
            match (&ea, &eb) {
                (Some(x), Some(y)) => {
                    out.check(x.what.contains(what.as_str()), || {
                        format!(
                            "{here}: expected `{what}`, explain({}, {}) says {}",
                            d.a,
                            d.b,
                            show(&ea)
                        )
                    });
                    out.check(y.what.contains(what.as_str()), || {
                        format!(
                            "{here}: expected `{what}`, explain({}, {}) says {}",
                            d.b,
                            d.a,
                            show(&eb)
                        )
                    });
                    let chunk =
                        |d: &Difference| d.place.split(" (").next().unwrap_or_default().to_string();
                    out.check(
                        chunk(x) == chunk(y) && x.left == y.right && x.right == y.left,
                        || {
                            format!(
                                "{here}: the two explanations disagree: {} vs {}",
                                show(&ea),
                                show(&eb)
                            )
                        },
                    );
                }
                _ => out.check(false, || {
                    format!(
                        "{here}: expected an explanation both ways, got {} and {}",
                        show(&ea),
                        show(&eb)
                    )
                }),
            }
        }
    }
}

/// Checks that need no directive: every function equals a renumbered copy of itself, and
/// the order is antisymmetric and transitive over the file's functions.
pub fn check_file_invariants(fx: &Fixture, target: &TargetInfo, out: &mut Failures) {
    let cmp = FunctionComparator::new(target);
    let renumbered = renumber_text(&fx.text);
    match clif_merge::read::parse_clif(&renumbered, &fx.path) {
        Err(e) => out.check(false, || {
            format!("{}: renumbered copy does not parse: {e}", fx.path)
        }),
        Ok(copies) => {
            out.check(copies.len() == fx.functions.len(), || {
                format!("{}: renumbered copy has another function count", fx.path)
            });
            for (f, copy) in fx.functions.iter().zip(&copies) {
                let name = FuncName::of_function(f);
                out.check(cmp.compare(f, &copy.func) == Ordering::Equal, || {
                    format!(
                        "{}: {name} differs from its renumbered copy: {}",
                        fx.path,
                        show(&explain(target, &ByName, f, &copy.func))
                    )
                });
                out.check(function_hash(f) == function_hash(&copy.func), || {
                    format!(
                        "{}: {name} hashes differently from its renumbered copy",
                        fx.path
                    )
                });
            }
        }
    }
    let fs = &fx.functions;
    for a in fs {
        out.check(cmp.compare(a, a) == Ordering::Equal, || {
            format!(
                "{}: {} is not equal to itself",
                fx.path,
                FuncName::of_function(a)
            )
        });
        for b in fs {
            let ab = cmp.compare(a, b);
            for c in fs {
                let (bc, ac) = (cmp.compare(b, c), cmp.compare(a, c));
                let transitive = match (ab, bc) {
                    (Ordering::Equal, x) | (x, Ordering::Equal) => ac == x,
                    (x, y) if x == y => ac == x,
                    _ => true,
                };
                out.check(transitive, || {
                    format!(
                        "{}: not transitive: {} {ab:?} {}, {} {bc:?} {}, {} {ac:?} {}",
                        fx.path,
                        FuncName::of_function(a),
                        FuncName::of_function(b),
                        FuncName::of_function(b),
                        FuncName::of_function(c),
                        FuncName::of_function(a),
                        FuncName::of_function(c)
                    )
                });
            }
        }
    }
}

/// Every check of one file: its directives, the verifier, and the file invariants.
pub fn check_fixture(fx: &Fixture, out: &mut Failures) {
    let target = fx.target();
    let detector_only = fx.vocabulary == Vocabulary::DetectorOnly;
    out.check(!detector_only || !fx.directives.is_empty(), || {
        format!("{}: no `; expect:` directive", fx.path)
    });
    out.check(!fx.functions.is_empty(), || {
        format!("{}: no function", fx.path)
    });
    for (i, f) in fx.functions.iter().enumerate() {
        let name = FuncName::of_function(f);
        out.check(
            fx.functions[..i]
                .iter()
                .all(|g| FuncName::of_function(g) != name),
            || format!("{}: {name} is defined twice", fx.path),
        );
    }
    for f in &fx.functions {
        if let Err(e) = verify(f, &fx.triple, &target) {
            out.check(false, || {
                format!(
                    "{}: {} fails verification: {e}",
                    fx.path,
                    FuncName::of_function(f)
                )
            });
        }
        let name = FuncName::of_function(f).to_string();
        out.check(
            !detector_only || fx.directives.iter().any(|d| d.a == name || d.b == name),
            || format!("{}: {name} is named by no directive", fx.path),
        );
    }
    for d in &fx.directives {
        check_directive(fx, &target, d, out);
    }
    check_file_invariants(fx, &target, out);
}

impl Failures {
    /// Fail with every collected failure, if any.
    pub fn assert_none(&self) {
        assert!(
            self.0.is_empty(),
            "{} failure(s):\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}
