//! Emission: the objects clif-merge writes, read back by objdump and the object crate,
//! linked with a C program and run, and the same module run through cranelift-jit.

use std::path::{Path, PathBuf};
use std::process::Command;

use clif_merge::emit::{build_isa, EmitOptions, EmitSummary};
use clif_merge::emit_jit;
use clif_merge::emit_object;
use clif_merge::merge::{Linkage, MergeMode, MergeOptions, Module};
use clif_merge::{FuncName, TargetInfo};
use cranelift_object::object::{self, Object as _, ObjectSection as _, ObjectSymbol as _};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The functions of the CLIF `text` (called `path` in errors), every one exported.
fn exported_module(text: &str, path: &str) -> Module {
    let mut module = Module::new();
    for p in clif_merge::read::parse_clif(text, path).unwrap() {
        module.add(p.func, Linkage::Export, false).unwrap();
    }
    module
}

fn example_module(linkages: &[(&str, Linkage)]) -> Module {
    let text = std::fs::read_to_string(root().join("fixtures/example.clif")).unwrap();
    let mut module = Module::new();
    for p in clif_merge::read::parse_clif(&text, "example.clif").unwrap() {
        let name = FuncName::of_function(&p.func).to_string();
        let linkage = linkages
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(Linkage::Export, |&(_, l)| l);
        module.add(p.func, linkage, false).unwrap();
    }
    module
}

fn options(mode: MergeMode) -> MergeOptions {
    MergeOptions {
        mode,
        ..Default::default()
    }
}

fn object_for(
    module: &Module,
    triple: &str,
    mode: MergeMode,
    emit: &EmitOptions,
) -> (Vec<u8>, EmitSummary) {
    let target = TargetInfo::from_triple_str(triple).unwrap();
    let settings = [("is_pic".to_string(), "true".to_string())];
    let isa = build_isa(&target, &settings).unwrap();
    let plan = clif_merge::merge(module, &target, &options(mode));
    emit_object(module, &plan, isa, &options(mode), emit).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// (name, address, size) of every defined function symbol.
fn symbols(bytes: &[u8]) -> Vec<(String, u64, u64)> {
    let file = object::File::parse(bytes).unwrap();
    file.symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
        .map(|s| {
            (
                s.name().unwrap().trim_start_matches('_').to_string(),
                s.address(),
                s.size(),
            )
        })
        .collect()
}

fn symbol<'a>(syms: &'a [(String, u64, u64)], name: &str) -> &'a (String, u64, u64) {
    syms.iter()
        .find(|s| s.0 == name)
        .unwrap_or_else(|| panic!("no symbol {name} in {syms:?}"))
}

const FOLDED: [(&str, &str); 5] = [
    ("add_one_again", "add_one"),
    ("twice_b", "twice_a"),
    ("sum_to_copy", "sum_to"),
    ("ping2", "ping"),
    ("pong2", "pong"),
];

#[test]
fn objdump_shows_thunks_as_single_jumps_and_aliases_at_their_target() {
    let dir = tempfile::tempdir().unwrap();
    let module = example_module(&[]);
    let (thunks, summary) = object_for(
        &module,
        "x86_64-unknown-linux-gnu",
        MergeMode::Trampolines,
        &EmitOptions::default(),
    );
    assert_eq!(summary.thunks, FOLDED.len());
    let path = write(dir.path(), "thunks.o", &thunks);
    let table = run(Command::new("objdump").arg("-t").arg(&path));
    let disassembly = run(Command::new("objdump")
        .args(["-dr", "--no-show-raw-insn"])
        .arg(&path));
    for (folded, kept) in FOLDED {
        assert!(
            table.contains(&format!(" {folded}\n")),
            "{folded} is not a symbol:\n{table}"
        );
        // The thunk's disassembly: one jmp and its relocation to the kept function.
        let start = disassembly
            .find(&format!("<{folded}>:"))
            .unwrap_or_else(|| panic!("{folded} not disassembled:\n{disassembly}"));
        let body: Vec<&str> = disassembly[start..]
            .lines()
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(body.len(), 2, "{folded}: {body:?}");
        assert!(body[0].contains("jmp"), "{folded}: {body:?}");
        assert!(
            body[1].contains("R_X86_64_PLT32") && body[1].contains(kept),
            "{folded}: {body:?}"
        );
    }

    let (aliases, summary) = object_for(
        &module,
        "x86_64-unknown-linux-gnu",
        MergeMode::Aliases,
        &EmitOptions::default(),
    );
    assert_eq!((summary.aliases, summary.thunks), (FOLDED.len(), 0));
    let path = write(dir.path(), "aliases.o", &aliases);
    let table = run(Command::new("objdump").arg("-t").arg(&path));
    let addr = |name: &str| {
        table
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} missing:\n{table}"))
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    for (folded, kept) in FOLDED {
        assert_eq!(
            addr(folded),
            addr(kept),
            "{folded} is not at {kept}'s address"
        );
    }
    assert!(aliases.len() < thunks.len());
}

#[test]
fn linked_program_gives_the_same_results_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let module = example_module(&[]);
    let harness = root().join("fixtures/c/example_harness.c");
    let mut outputs = Vec::new();
    for (mode, name) in [
        (MergeMode::Disabled, "disabled"),
        (MergeMode::Trampolines, "trampolines"),
        (MergeMode::Aliases, "aliases"),
    ] {
        let (bytes, _) = object_for(
            &module,
            "x86_64-unknown-linux-gnu",
            mode,
            &EmitOptions::default(),
        );
        let obj = write(dir.path(), &format!("{name}.o"), &bytes);
        let exe = dir.path().join(name);
        run(Command::new("cc")
            .arg("-o")
            .arg(&exe)
            .arg(&harness)
            .arg(&obj));
        outputs.push(run(&mut Command::new(&exe)));
    }
    let values = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("distinct"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        values(&outputs[0]),
        values(&outputs[1]),
        "trampolines changed a result"
    );
    assert_eq!(
        values(&outputs[0]),
        values(&outputs[2]),
        "aliases changed a result"
    );
    assert!(outputs[0].contains("add_one(2)=3 add_one_again=3 add_two=4 twice_a=4 twice_b=4"));
    assert!(outputs[0].contains("sum_to(12)=78 sum_to_copy=78"));
    // Address-significant (exported) functions keep distinct addresses through thunks...
    assert!(outputs[1].contains("add_one/add_one_again=1 sum_to/sum_to_copy=1 ping/ping2=1"));
    // ...and in aliases mode they share one.
    assert!(outputs[2].contains("add_one/add_one_again=0 sum_to/sum_to_copy=0 ping/ping2=0"));
}

#[test]
fn clif_thunks_link_and_run_too() {
    let dir = tempfile::tempdir().unwrap();
    let module = example_module(&[]);
    let emit = EmitOptions {
        clif_thunks: true,
        ..Default::default()
    };
    let (bytes, summary) = object_for(
        &module,
        "x86_64-unknown-linux-gnu",
        MergeMode::Trampolines,
        &emit,
    );
    assert_eq!(summary.thunks, FOLDED.len());
    let syms = symbols(&bytes);
    assert!(
        symbol(&syms, "add_one_again").2 > 5,
        "a CLIF thunk is a full call and return"
    );
    let obj = write(dir.path(), "clif_thunks.o", &bytes);
    let exe = dir.path().join("clif_thunks");
    run(Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(root().join("fixtures/c/example_harness.c"))
        .arg(&obj));
    let out = run(&mut Command::new(&exe));
    assert!(out.contains("add_one(2)=3 add_one_again=3"));
    assert!(out.contains("add_one/add_one_again=1"));
}

#[test]
fn linkage_sets_binding_and_visibility_of_aliases() {
    let module = example_module(&[
        ("%add_one_again", Linkage::Hidden),
        ("%twice_b", Linkage::Preemptible),
        ("%sum_to_copy", Linkage::Local),
    ]);
    let (bytes, _) = object_for(
        &module,
        "x86_64-unknown-linux-gnu",
        MergeMode::Aliases,
        &EmitOptions::default(),
    );
    let file = object::File::parse(&*bytes).unwrap();
    let find = |name: &str| file.symbols().find(|s| s.name() == Ok(name));
    let hidden = find("add_one_again").expect("hidden alias");
    assert_eq!(hidden.scope(), object::SymbolScope::Linkage);
    let weak = find("twice_b").expect("preemptible alias");
    assert!(weak.is_weak());
    assert_eq!(find("twice_a").unwrap().address(), weak.address());
    assert!(
        find("sum_to_copy").is_none(),
        "a local function nobody observes is erased"
    );
}

#[test]
fn aarch64_thunk_is_one_branch_with_one_relocation() {
    let module = example_module(&[]);
    let (bytes, _) = object_for(
        &module,
        "aarch64-unknown-linux-gnu",
        MergeMode::Trampolines,
        &EmitOptions::default(),
    );
    let file = object::File::parse(&*bytes).unwrap();
    let text = file.section_by_name(".text").unwrap();
    let data = text.data().unwrap();
    for (folded, kept) in FOLDED {
        let sym = file.symbols().find(|s| s.name() == Ok(folded)).unwrap();
        assert_eq!(sym.size(), 4, "{folded}");
        let at = sym.address() as usize;
        assert_eq!(
            &data[at..at + 4],
            &0x1400_0000u32.to_le_bytes(),
            "{folded} is not `b`"
        );
        let (_, reloc) = text
            .relocations()
            .find(|(off, _)| *off == sym.address())
            .unwrap_or_else(|| panic!("{folded} has no relocation"));
        assert_eq!(
            reloc.flags(),
            object::RelocationFlags::Elf {
                r_type: object::elf::R_AARCH64_CALL26
            }
        );
        let object::RelocationTarget::Symbol(target) = reloc.target() else {
            panic!("{folded}: relocation target is not a symbol");
        };
        assert_eq!(file.symbol_by_index(target).unwrap().name(), Ok(kept));
    }
}

#[test]
fn macho_has_no_aliases_so_folded_names_are_thunks() {
    let module = example_module(&[]);
    let (bytes, summary) = object_for(
        &module,
        "x86_64-apple-darwin",
        MergeMode::Aliases,
        &EmitOptions::default(),
    );
    assert_eq!((summary.aliases, summary.thunks), (0, FOLDED.len()));
    let syms = symbols(&bytes);
    let file = object::File::parse(&*bytes).unwrap();
    let text = file
        .sections()
        .find(|s| s.kind() == object::SectionKind::Text)
        .unwrap();
    let data = text.data().unwrap();
    for (folded, kept) in FOLDED {
        let at = (symbol(&syms, folded).1 - text.address()) as usize;
        assert_eq!(
            data[at], 0xE9,
            "{folded} is not a jmp (Mach-O symbols have no size)"
        );
        assert!(
            text.relocations().any(|(off, _)| off == at as u64 + 1),
            "{folded}"
        );
        assert_ne!(symbol(&syms, folded).1, symbol(&syms, kept).1);
    }
}

#[test]
fn per_function_sections_give_each_function_its_own_section() {
    let module = example_module(&[]);
    let emit = EmitOptions {
        per_function_section: true,
        ..Default::default()
    };
    let (bytes, _) = object_for(
        &module,
        "x86_64-unknown-linux-gnu",
        MergeMode::Disabled,
        &emit,
    );
    let file = object::File::parse(&*bytes).unwrap();
    let text_sections = file
        .sections()
        .filter(|s| s.kind() == object::SectionKind::Text)
        .count();
    assert_eq!(text_sections, module.len());
}

#[test]
fn output_does_not_depend_on_input_order() {
    let module = example_module(&[]);
    let text = std::fs::read_to_string(root().join("fixtures/example.clif")).unwrap();
    let mut reversed = Module::new();
    let mut parsed = clif_merge::read::parse_clif(&text, "example.clif").unwrap();
    parsed.reverse();
    for p in parsed {
        reversed.add(p.func, Linkage::Export, false).unwrap();
    }
    for mode in [MergeMode::Trampolines, MergeMode::Aliases] {
        let (a, _) = object_for(
            &module,
            "x86_64-unknown-linux-gnu",
            mode,
            &EmitOptions::default(),
        );
        let (b, _) = object_for(
            &reversed,
            "x86_64-unknown-linux-gnu",
            mode,
            &EmitOptions::default(),
        );
        let mut sa = symbols(&a);
        let mut sb = symbols(&b);
        sa.sort();
        sb.sort();
        // Same symbols of the same sizes, and the same names share an address.
        let shape = |s: &[(String, u64, u64)]| {
            s.iter()
                .map(|(n, a, z)| {
                    (
                        n.clone(),
                        *z,
                        s.iter().filter(|o| o.1 == *a).map(|o| o.0.clone()).min(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(shape(&sa), shape(&sb), "{mode:?}");
    }
}

#[test]
fn jit_calls_every_name_of_every_group() {
    if TargetInfo::host().jump_thunk_size().is_none() {
        eprintln!("skipping: the host has no single-jump thunks");
        return;
    }
    let module = example_module(&[]);
    let target = TargetInfo::host();
    for mode in [
        MergeMode::Disabled,
        MergeMode::Trampolines,
        MergeMode::Aliases,
    ] {
        let plan = clif_merge::merge(&module, &target, &options(mode));
        let jit = emit_jit(&module, &plan, &options(mode), &EmitOptions::default(), []).unwrap();
        let i32_fn = |name: &str| -> extern "C" fn(i32) -> i32 {
            let p = jit.pointer(&FuncName::parse(name).unwrap()).unwrap();
            unsafe { std::mem::transmute::<*const u8, extern "C" fn(i32) -> i32>(p) }
        };
        let i64_fn = |name: &str| -> extern "C" fn(i64) -> i64 {
            let p = jit.pointer(&FuncName::parse(name).unwrap()).unwrap();
            unsafe { std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(p) }
        };
        for x in [-5, 0, 7] {
            assert_eq!(i32_fn("%add_one")(x), x + 1);
            assert_eq!(i32_fn("%add_one_again")(x), x + 1);
            assert_eq!(i32_fn("%twice_a")(x), x + 2);
            assert_eq!(i32_fn("%twice_b")(x), x + 2);
        }
        for n in [0i64, 1, 10] {
            assert_eq!(i64_fn("%sum_to")(n), n * (n + 1) / 2);
            assert_eq!(i64_fn("%sum_to_copy")(n), n * (n + 1) / 2);
            assert_eq!(i64_fn("%ping")(n), i64_fn("%ping2")(n));
            assert_eq!(i64_fn("%pong")(n), i64_fn("%pong2")(n));
        }
        assert_eq!(
            i64_fn("%ping")(2),
            8,
            "ping(2) = pong(1) + 3 = ping(0) + 5 + 3"
        );
        let expected_folded = if mode == MergeMode::Disabled {
            0
        } else {
            FOLDED.len()
        };
        assert_eq!(jit.summary.plan.folded_count(), expected_folded, "{mode:?}");
    }
}

#[test]
fn a_body_no_larger_than_a_jump_is_copied_instead_of_thunked() {
    // On aarch64 a leaf that returns its argument is one `ret`: 4 bytes, as large as `b`.
    let clif = "function %id_a(i64) -> i64 system_v {\nblock0(v0: i64):\n    return v0\n}\n\
                function %id_b(i64) -> i64 system_v {\nblock0(v0: i64):\n    return v0\n}\n";
    let module = exported_module(clif, "tiny.clif");
    let (bytes, summary) = object_for(
        &module,
        "aarch64-unknown-linux-gnu",
        MergeMode::Trampolines,
        &EmitOptions::default(),
    );
    let b = module.lookup(&FuncName::parse("%id_b").unwrap()).unwrap();
    assert_eq!(summary.copied, vec![b]);
    assert_eq!(summary.thunks, 0);
    let syms = symbols(&bytes);
    let file = object::File::parse(&*bytes).unwrap();
    let data = file
        .section_by_name(".text")
        .unwrap()
        .data()
        .unwrap()
        .to_vec();
    let code = |name: &str| {
        let (_, at, size) = symbol(&syms, name);
        data[*at as usize..(*at + *size) as usize].to_vec()
    };
    assert_eq!(code("id_a"), code("id_b"));
    assert_ne!(
        symbol(&syms, "id_a").1,
        symbol(&syms, "id_b").1,
        "addresses stay distinct"
    );
}

#[test]
fn coff_objects_have_aliases_too() {
    let module = example_module(&[]);
    let (bytes, summary) = object_for(
        &module,
        "x86_64-pc-windows-gnu",
        MergeMode::Aliases,
        &EmitOptions::default(),
    );
    assert_eq!((summary.aliases, summary.thunks), (FOLDED.len(), 0));
    let file = object::File::parse(&*bytes).unwrap();
    assert_eq!(file.format(), object::BinaryFormat::Coff);
    let addr = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap()
            .address()
    };
    for (folded, kept) in FOLDED {
        assert_eq!(addr(folded), addr(kept), "{folded}");
    }
}

#[test]
fn addresses_of_folded_local_functions_follow_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        root().join("fixtures/merger/address_of_erased_function_is_its_body.clif"),
    )
    .unwrap();
    let c = "#include <stdio.h>\nlong p(void), q(void);\nint main(void) { printf(\"%d\\n\", p() == q()); return 0; }\n";
    let harness = write(dir.path(), "addr.c", c.as_bytes());
    for (mode, same) in [
        (MergeMode::Aliases, "1"),
        (MergeMode::Trampolines, "0"),
        (MergeMode::Disabled, "0"),
    ] {
        let mut module = Module::new();
        for p in clif_merge::read::parse_clif(&text, "addr.clif").unwrap() {
            let local = matches!(
                FuncName::of_function(&p.func).to_string().as_str(),
                "%x1" | "%x2"
            );
            module
                .add(
                    p.func,
                    if local {
                        Linkage::Local
                    } else {
                        Linkage::Export
                    },
                    false,
                )
                .unwrap();
        }
        let (bytes, _) = object_for(
            &module,
            "x86_64-unknown-linux-gnu",
            mode,
            &EmitOptions::default(),
        );
        let obj = write(dir.path(), &format!("addr_{mode:?}.o"), &bytes);
        let exe = dir.path().join(format!("addr_{mode:?}"));
        run(Command::new("cc")
            .arg("-o")
            .arg(&exe)
            .arg(&harness)
            .arg(&obj));
        assert_eq!(run(&mut Command::new(&exe)).trim(), same, "{mode:?}");
    }
}

/// `clif` read into a module (every function exported) and rewritten by merge-similar for
/// `isa`, without its cost model or alignment merging: the groups of holes the thunk tests
/// look at.
fn similar_rewritten(
    clif: &str,
    target: &TargetInfo,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
) -> (Module, clif_merge::merge::similar::SimilarReport) {
    use clif_merge::merge::similar::{merge_similar, SimilarOptions};
    let module = exported_module(clif, "similar.clif");
    let similar = SimilarOptions {
        cost_model: false,
        alignment: false,
        ..SimilarOptions::default()
    };
    merge_similar(module, target, isa, &MergeOptions::default(), &similar)
}

/// Merge-similar's thunks on x86_64 are register loads and a jump, written directly: no
/// frame, one `mov` per added argument into the System V argument register it travels in
/// (including r8/r9, and 64-bit constants), function addresses through the GOT with PIC
/// and by `lea` without, then `jmp` to the shared body.
#[test]
fn similar_thunks_are_register_loads_and_a_jump() {
    let clif = "
function %callee_a(i64) -> i64 system_v {
block0(v0: i64):
    return v0
}
function %callee_b(i64) -> i64 system_v {
block0(v0: i64):
    v1 = iconst.i64 1
    v2 = iadd v0, v1
    return v2
}
function %five_a(i64, i32) -> i64 system_v {
    sig0 = (i64) -> i64 system_v
    fn0 = colocated %callee_a sig0
block0(v0: i64, v1: i32):
    v2 = iconst.i64 0x1234_5678_9abc
    v3 = iconst.i32 -3
    v4 = iconst.i8 200
    v5 = iconst.i64 -9
    v6 = call fn0(v0)
    v7 = iadd v6, v2
    v8 = iadd v1, v3
    v9 = uextend.i64 v8
    v10 = uextend.i64 v4
    v11 = iadd v7, v9
    v12 = iadd v11, v10
    v13 = imul v12, v5
    return v13
}
function %five_b(i64, i32) -> i64 system_v {
    sig0 = (i64) -> i64 system_v
    fn0 = colocated %callee_b sig0
block0(v0: i64, v1: i32):
    v2 = iconst.i64 7
    v3 = iconst.i32 3
    v4 = iconst.i8 -1
    v5 = iconst.i64 -9
    v6 = call fn0(v0)
    v7 = iadd v6, v2
    v8 = iadd v1, v3
    v9 = uextend.i64 v8
    v10 = uextend.i64 v4
    v11 = iadd v7, v9
    v12 = iadd v11, v10
    v13 = imul v12, v5
    return v13
}
";
    let dir = tempfile::tempdir().unwrap();
    let target = TargetInfo::from_triple_str("x86_64-unknown-linux-gnu").unwrap();
    for pic in [true, false] {
        let settings = [("is_pic".to_string(), pic.to_string())];
        let isa = build_isa(&target, &settings).unwrap();
        let options = MergeOptions::default();
        let (module, report) = similar_rewritten(clif, &target, &*isa);
        let five = report
            .groups
            .iter()
            .find(|g| g.members.contains(&"%five_a".to_string()))
            .expect("five_a and five_b are merged");
        assert_eq!(five.holes, 4, "{report:?}");
        let plan = clif_merge::merge(&module, &target, &options);
        let (bytes, _) =
            emit_object(&module, &plan, isa, &options, &EmitOptions::default()).unwrap();
        let path = write(dir.path(), &format!("similar_{pic}.o"), &bytes);
        let disassembly = run(Command::new("objdump")
            .args(["-dr", "--no-show-raw-insn"])
            .arg(&path));
        let start = disassembly.find("<five_a>:").unwrap();
        let body: Vec<&str> = disassembly[start..]
            .lines()
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        let text = body.join("\n");
        // rdi and rsi hold the own arguments; the four added ones (the callee and three
        // constants; the fourth constant agrees) go to rdx, rcx, r8 and r9.
        let loads: Vec<&&str> = body
            .iter()
            .filter(|l| l.contains("mov") || l.contains("lea"))
            .collect();
        assert_eq!(loads.len(), 4, "four loads:\n{text}");
        assert!(!text.contains("push"), "no frame:\n{text}");
        assert!(text.contains("movabs $0x123456789abc"), "{text}");
        assert!(text.contains("%r8") && text.contains("%r9"), "{text}");
        assert!(
            body.last().unwrap().contains("clif_merge_similar_five_a"),
            "ends with the jump's relocation:\n{text}"
        );
        if pic {
            assert!(text.contains("R_X86_64_GOTPCREL\tcallee_a"), "{text}");
        } else {
            assert!(text.contains("lea"), "{text}");
        }
    }
}

/// Merge-similar's thunks on aarch64 are register thunks too: written directly, no frame,
/// each added value in its argument register (x3.. after three own `system_v` arguments;
/// x4.. after two own `tail` arguments, whose integers start at x2), function addresses
/// through the GOT with PIC and PC-relative or from a literal without, then `b` to the
/// body. Each thunk's symbol is exactly as large as the cost model weighed it.
#[test]
fn aarch64_similar_thunks_are_register_moves_and_a_branch() {
    use clif_merge::merge::similar::CodeFacts;
    use object::{RelocationFlags, RelocationTarget};
    let clif = "
function %leaf_a(i64, i64, i64) -> i64 system_v {
block0(v0: i64, v1: i64, v2: i64):
    return v0
}
function %leaf_b(i64, i64, i64) -> i64 system_v {
block0(v0: i64, v1: i64, v2: i64):
    return v1
}
function %far_a(i64, i64, i64) -> i64 system_v {
block0(v0: i64, v1: i64, v2: i64):
    return v2
}
function %far_b(i64, i64, i64) -> i64 system_v {
block0(v0: i64, v1: i64, v2: i64):
    v3 = iadd v0, v1
    return v3
}
function %sv_a(i64, i64, i64) -> i64 system_v {
    sig0 = (i64, i64, i64) -> i64 system_v
    fn0 = colocated %leaf_a sig0
    fn1 = %far_a sig0
block0(v0: i64, v1: i64, v2: i64):
    v3 = func_addr.i64 fn0
    v4 = func_addr.i64 fn1
    v5 = iconst.i64 0x1234_5678_9abc_def0
    v6 = call_indirect sig0, v3(v0, v1, v2)
    v7 = call_indirect sig0, v4(v6, v5, v2)
    v8 = imul v7, v5
    return v8
}
function %sv_b(i64, i64, i64) -> i64 system_v {
    sig0 = (i64, i64, i64) -> i64 system_v
    fn0 = colocated %leaf_b sig0
    fn1 = %far_b sig0
block0(v0: i64, v1: i64, v2: i64):
    v3 = func_addr.i64 fn0
    v4 = func_addr.i64 fn1
    v5 = iconst.i64 -2
    v6 = call_indirect sig0, v3(v0, v1, v2)
    v7 = call_indirect sig0, v4(v6, v5, v2)
    v8 = imul v7, v5
    return v8
}
function %tl_a(i64, i64) -> i64 tail {
block0(v0: i64, v1: i64):
    v2 = iconst.i32 -3
    v3 = sextend.i64 v2
    v4 = iadd v0, v3
    v5 = imul v4, v1
    return v5
}
function %tl_b(i64, i64) -> i64 tail {
block0(v0: i64, v1: i64):
    v2 = iconst.i32 77
    v3 = sextend.i64 v2
    v4 = iadd v0, v3
    v5 = imul v4, v1
    return v5
}
";
    let elf = |r_type| RelocationFlags::Elf { r_type };
    let target = TargetInfo::from_triple_str("aarch64-unknown-linux-gnu").unwrap();
    for pic in [true, false] {
        let settings = [
            ("is_pic".to_string(), pic.to_string()),
            ("preserve_frame_pointers".to_string(), "true".to_string()),
        ];
        let isa = build_isa(&target, &settings).unwrap();
        let options = MergeOptions::default();
        let (module, report) = similar_rewritten(clif, &target, &*isa);
        assert_eq!(report.groups.len(), 2, "{report:?}");
        let weighed: Vec<(String, u64)> = ["%sv_a", "%sv_b", "%tl_a", "%tl_b"]
            .iter()
            .map(|name| {
                let f = module.lookup(&FuncName::parse(name).unwrap()).unwrap();
                let thunk = &module.get(f).func;
                assert!(isa.keeps_the_callers_stack(thunk), "{name}");
                (name[1..].to_string(), CodeFacts::thunk_size(&*isa, thunk))
            })
            .collect();
        let plan = clif_merge::merge(&module, &target, &options);
        let (bytes, _) =
            emit_object(&module, &plan, isa, &options, &EmitOptions::default()).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let text = file.section_by_name(".text").unwrap();
        let data = text.data().unwrap();
        let relocs: Vec<(u64, RelocationFlags, String)> = text
            .relocations()
            .map(|(offset, r)| {
                let RelocationTarget::Symbol(s) = r.target() else {
                    panic!("relocation at {offset:#x} does not name a symbol")
                };
                let name = file.symbol_by_index(s).unwrap().name().unwrap();
                (offset, r.flags(), name.to_string())
            })
            .collect();
        for (name, size) in &weighed {
            let sym = file.symbols().find(|s| s.name() == Ok(name)).unwrap();
            assert_eq!(sym.size(), *size, "{name}: as large as weighed");
            let at = sym.address() as usize;
            let words: Vec<u32> = data[at..at + sym.size() as usize]
                .chunks(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            // No frame: no `stp x29, x30, [sp, #-16]!` (0xA9BF7BFD) anywhere.
            assert!(!words.contains(&0xA9BF_7BFD), "{name}: {words:x?}");
            let reloc_at = |i: usize| {
                let offset = sym.address() + 4 * i as u64;
                relocs
                    .iter()
                    .find(|r| r.0 == offset)
                    .map(|r| (r.1, r.2.as_str()))
            };
            let last = words.len() - 1;
            assert_eq!(words[last], 0x1400_0000, "{name} ends with `b`");
            // The body is named after the group's first member.
            let body = format!("clif_merge_similar_{}_a", &name[..name.len() - 2]);
            assert_eq!(
                reloc_at(last),
                Some((elf(object::elf::R_AARCH64_CALL26), body.as_str()))
            );
            let member = &name[name.len() - 1..];
            let (leaf, far) = (format!("leaf_{member}"), format!("far_{member}"));
            let rd = |w: u32| w & 0x1F;
            if name.starts_with("sv") {
                // The two addresses in x3 and x4, the constant in x5.
                let got = [
                    elf(object::elf::R_AARCH64_ADR_GOT_PAGE),
                    elf(object::elf::R_AARCH64_LD64_GOT_LO12_NC),
                ];
                if pic {
                    for (i, reg, target) in [(0, 3, &leaf), (2, 4, &far)] {
                        assert_eq!(words[i] & 0x9F00_0000, 0x9000_0000, "{name}: adrp");
                        assert_eq!(rd(words[i]), reg);
                        assert_eq!(reloc_at(i), Some((got[0], target.as_str())));
                        assert_eq!(reloc_at(i + 1), Some((got[1], target.as_str())));
                    }
                } else {
                    // adrp + add for the colocated leaf, a literal for the other.
                    assert_eq!(rd(words[0]), 3);
                    let near = elf(object::elf::R_AARCH64_ADR_PREL_PG_HI21);
                    assert_eq!(reloc_at(0), Some((near, leaf.as_str())));
                    let lo12 = elf(object::elf::R_AARCH64_ADD_ABS_LO12_NC);
                    assert_eq!(reloc_at(1), Some((lo12, leaf.as_str())));
                    assert_eq!(words[2], 0x5800_0044, "{name}: ldr x4, #8");
                    assert_eq!(words[3], 0x1400_0003, "{name}: b over the literal");
                    let abs = elf(object::elf::R_AARCH64_ABS64);
                    assert_eq!(reloc_at(4), Some((abs, far.as_str())));
                }
                let constant = &words[if pic { 4 } else { 6 }..last];
                assert!(constant.iter().all(|&w| rd(w) == 5), "{name}: {words:x?}");
            } else {
                // tail: own arguments in x2 and x3, the constant (i32) in w4.
                assert_eq!(words.len(), 2, "{name}: one move and `b`");
                assert_eq!(rd(words[0]), 4, "{name}");
                assert_eq!(words[0] >> 31, 0, "{name}: a W register");
            }
        }
    }
}

/// The frame rule on both targets: members that read their frame are merged behind
/// register thunks (`%depth_*`, `tail`, three constants) and kept apart when a thunk would
/// need a frame (`%deep_*`, whose seventh integer argument goes on the stack); the report
/// counts the group kept apart. (Groups of holes only: alignment merging, which needs one
/// parameter where the holes need two, merges `%deep_*` behind register thunks.)
#[test]
fn frame_readers_are_merged_behind_register_thunks_only() {
    use clif_merge::merge::similar::{merge_similar, SimilarOptions};
    let path = root().join("fixtures/exec/register_thunks_pass_every_kind_of_value.clif");
    let text = std::fs::read_to_string(path).unwrap();
    for triple in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        let target = TargetInfo::from_triple_str(triple).unwrap();
        let settings = [("preserve_frame_pointers".to_string(), "true".to_string())];
        let isa = build_isa(&target, &settings).unwrap();
        let mut module = Module::new();
        for p in clif_merge::read::parse_clif(&text, "fixture.clif").unwrap() {
            module.add(p.func, Linkage::Export, false).unwrap();
        }
        let (_, report) = merge_similar(
            module,
            &target,
            &*isa,
            &MergeOptions::default(),
            &SimilarOptions {
                alignment: false,
                ..SimilarOptions::default()
            },
        );
        let merged = |prefix: &str| {
            report
                .groups
                .iter()
                .any(|g| g.members.iter().all(|m| m.starts_with(prefix)))
        };
        assert!(merged("%depth_"), "{triple}: {report:?}");
        assert!(!merged("%deep_"), "{triple}: {report:?}");
        assert_eq!(report.frame_readers_behind_framed_thunks, 1, "{triple}");
    }
}

/// Alignment merging in the debug profile, where `src/merge/aligned.rs` checks every body
/// it takes with Cranelift's verifier under `debug_assert!` (release builds only drop a
/// body that fails): the near-twins of `fixtures/similar/aligned.clif` and
/// `fixtures/exec/aligned_*.clif`, merged by merge-similar with alignment merging and no
/// cost model (every pair that builds is taken), with and without unlike blocks, for
/// x86_64 and aarch64, each file in its order and reversed (the lower index is the left member, so a member's instructions
/// are built on each side), the rewritten module compiled into an object. Every file but
/// one has pairs merged by alignment, so the assertion runs on each.
#[test]
fn aligned_bodies_verify_in_debug_builds() {
    use clif_merge::merge::similar::{merge_similar, SimilarOptions};
    let mut paths = vec![root().join("fixtures/similar/aligned.clif")];
    let mut exec: Vec<PathBuf> = std::fs::read_dir(root().join("fixtures/exec"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("aligned_") && name.ends_with(".clif")
        })
        .collect();
    exec.sort();
    assert!(
        exec.len() >= 10,
        "fixtures/exec is missing its aligned_* fixtures"
    );
    paths.extend(exec);
    let (mut pairs, mut unlike) = (0, 0);
    for triple in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        let target = TargetInfo::from_triple_str(triple).unwrap();
        let settings = [("preserve_frame_pointers".to_string(), "true".to_string())];
        let isa = build_isa(&target, &settings).unwrap();
        let runs = paths
            .iter()
            .flat_map(|p| [(p, false), (p, true)])
            .flat_map(|(p, r)| [(p, r, false), (p, r, true)]);
        for (path, reversed, unlike_blocks) in runs {
            let file = path.file_name().unwrap().to_string_lossy();
            let text = std::fs::read_to_string(path).unwrap();
            let mut functions = clif_merge::read::parse_clif(&text, path).unwrap();
            if reversed {
                functions.reverse();
            }
            let mut module = Module::new();
            for p in functions {
                module.add(p.func, Linkage::Export, false).unwrap();
            }
            let options = MergeOptions::default();
            let (rewritten, report) = merge_similar(
                module,
                &target,
                &*isa,
                &options,
                &SimilarOptions {
                    cost_model: false,
                    alignment: true,
                    unlike_blocks,
                },
            );
            let aligned = report.groups.iter().filter(|g| g.aligned).count();
            unlike += report.groups.iter().filter(|g| g.unlike_blocks).count();
            // `aligned_unlike_blocks.clif` has pairs only with unlike blocks.
            if unlike_blocks || file != "aligned_unlike_blocks.clif" {
                assert!(
                    aligned > 0,
                    "{triple}, {file} (reversed: {reversed}, unlike blocks: {unlike_blocks}): \
                     no pair merged by alignment: {report:?}"
                );
            }
            pairs += aligned;
            let plan = clif_merge::merge(&rewritten, &target, &options);
            emit_object(
                &rewritten,
                &plan,
                isa.clone(),
                &options,
                &EmitOptions::default(),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "{triple}, {file} (reversed: {reversed}, unlike blocks: {unlike_blocks}): {e}"
                )
            });
        }
    }
    // With unlike blocks, pairs whose blocks do not pair one to one were built too.
    assert!(unlike >= 8, "{unlike} pairs merged with unlike blocks");
    eprintln!(
        "aligned bodies: {pairs} pairs merged by alignment ({unlike} with unlike blocks) over \
         {} files, both orders, with and without unlike blocks, two targets",
        paths.len()
    );
}

extern "C" fn ext_two(a: i64, b: i64) -> i64 {
    a * 1000 + b
}

/// A function that only adds an argument and calls a function outside the module has the
/// shape of a register thunk; in a JIT (no PIC) the outside function may lie beyond a
/// `jmp rel32`, so Cranelift compiles it (an indirect call) instead.
#[test]
fn jit_thunk_shaped_call_to_a_far_outside_function() {
    let clif = "
function %wrap(i64) -> i64 system_v {
    sig0 = (i64, i64) -> i64 system_v
    fn0 = %ext_two sig0
block0(v0: i64):
    v1 = iconst.i64 5
    v2 = call fn0(v0, v1)
    return v2
}
";
    let module = exported_module(clif, "wrap.clif");
    let target = TargetInfo::host();
    let plan = clif_merge::merge(&module, &target, &options(MergeMode::Trampolines));
    let jit = emit_jit(
        &module,
        &plan,
        &options(MergeMode::Trampolines),
        &EmitOptions::default(),
        [("ext_two".to_string(), ext_two as *const u8)],
    )
    .unwrap();
    let p = jit.pointer(&FuncName::parse("%wrap").unwrap()).unwrap();
    let wrap = unsafe { std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(p) };
    assert_eq!(wrap(7), 7005);
}

/// A JIT of a module that calls a function nobody defines, or a Cranelift libcall nobody
/// provides (`__cranelift_x86_pshufb`, which an x86_64 without SSSE3 calls for a byte-wise
/// shuffle; the JIT compiles for the host, so on x86_64 the test asks for it by name
/// through a function the module imports), is an error that names the symbol and a
/// function that refers to it, not a panic inside cranelift-jit.
#[test]
fn jit_with_an_unresolvable_symbol_is_an_error() {
    let clif = "
function %uses_missing(i64) -> i64 system_v {
    sig0 = (i64) -> i64 system_v
    fn0 = %clif_merge_test_nobody_defines_this sig0
block0(v0: i64):
    v1 = call fn0(v0)
    return v1
}

function %fine(i64) -> i64 system_v {
block0(v0: i64):
    return v0
}

function %uses_pshufb(i8x16, i8x16) -> i8x16 system_v {
    sig0 = (i8x16, i8x16) -> i8x16 system_v
    fn0 = %X86Pshufb sig0
block0(v0: i8x16, v1: i8x16):
    v2 = call fn0(v0, v1)
    return v2
}
";
    let module = exported_module(clif, "missing.clif");
    let target = TargetInfo::host();
    let plan = clif_merge::merge(&module, &target, &options(MergeMode::Trampolines));
    let jit = |symbols: Vec<(String, *const u8)>| {
        emit_jit(
            &module,
            &plan,
            &options(MergeMode::Trampolines),
            &EmitOptions::default(),
            symbols,
        )
    };
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| jit(Vec::new()).map(|_| ())));
    let Ok(result) = outcome else {
        panic!("emit_jit panicked on a symbol it cannot resolve");
    };
    let message = result
        .expect_err("an unresolvable symbol must be an error")
        .to_string();
    assert!(
        message.contains("clif_merge_test_nobody_defines_this")
            && message.contains("%uses_missing"),
        "{message}"
    );
    // Given in `symbols`, it resolves; then the libcall is the one left.
    let missing = (
        "clif_merge_test_nobody_defines_this".to_string(),
        ext_one as *const u8,
    );
    let message = jit(vec![missing.clone()])
        .err()
        .expect("an unprovided libcall must be an error")
        .to_string();
    assert!(
        message.contains("__cranelift_x86_pshufb") && message.contains("%uses_pshufb"),
        "{message}"
    );
    let jit = jit(vec![
        missing,
        ("__cranelift_x86_pshufb".to_string(), ext_one as *const u8),
    ])
    .unwrap();
    let p = jit
        .pointer(&FuncName::parse("%uses_missing").unwrap())
        .unwrap();
    let f = unsafe { std::mem::transmute::<*const u8, extern "C" fn(i64) -> i64>(p) };
    assert_eq!(f(4), 5);
}

extern "C" fn ext_one(a: i64) -> i64 {
    a + 1
}

/// A sink that makes every alias a thunk at an address of its own, as the plugin's JIT
/// does for the names a compiler declared.
struct ThunkAliasesJit(clif_merge::emit::jit::JitSink);

impl clif_merge::emit::sink::Sink for ThunkAliasesJit {
    type Module = cranelift_jit::JITModule;
    type Output = clif_merge::emit::jit::JitFunctions;
    type Error = clif_merge::EmitError;

    fn module(&self) -> &Self::Module {
        self.0.module()
    }

    fn module_mut(&mut self) -> &mut Self::Module {
        self.0.module_mut()
    }

    fn alias_style(&self) -> clif_merge::emit::define::AliasStyle {
        clif_merge::emit::define::AliasStyle::Thunk
    }

    fn naming(&self) -> clif_merge::emit::define::Naming {
        self.0.naming()
    }

    fn finish(
        self,
        emitted: clif_merge::emit::sink::Emitted<'_>,
        summary: &mut EmitSummary,
    ) -> Result<Self::Output, Self::Error> {
        self.0.finish(emitted, summary)
    }
}

/// Functions that take the addresses of functions folded as aliases fold only where an
/// alias is at its body: a plan made counting on that is refused by a sink whose aliases
/// are thunks, and `pipeline::run` asks its sink, so that `&g2` keeps one value.
#[test]
fn callers_of_aliased_addresses_fold_only_where_aliases_share_the_address() {
    use clif_merge::emit::jit::JitSink;
    use clif_merge::emit::sink::Sink as _;
    use clif_merge::pipeline::{self, PipelineOptions};
    if TargetInfo::host().jump_thunk_size().is_none() {
        eprintln!("skipping: the host has no single-jump thunks");
        return;
    }
    let text =
        std::fs::read_to_string(root().join("fixtures/exec/aliased_function_addresses.clif"))
            .unwrap();
    let mut module = Module::new();
    for p in clif_merge::read::parse_clif(&text, "aliased_function_addresses.clif").unwrap() {
        module.add(p.func, Linkage::Export, false).unwrap();
    }
    let index = |module: &Module, name: &str| module.lookup(&FuncName::parse(name).unwrap());
    let target = TargetInfo::host();
    let shared = MergeOptions {
        mode: MergeMode::Aliases,
        aliases_share_address: true,
        ..Default::default()
    };
    let plan = clif_merge::merge(&module, &target, &shared);
    let ret_g2 = index(&module, "%ret_g2").unwrap();
    assert!(plan.group_of(ret_g2).is_some(), "%ret_g2 folds for objects");
    let sink = ThunkAliasesJit(JitSink::new([]).unwrap());
    assert!(!sink.alias_style().shares_address());
    let refused = pipeline::emit(&module, &plan, &shared, &EmitOptions::default(), sink);
    assert!(
        matches!(refused, Err(clif_merge::EmitError::AliasesNotShared)),
        "a thunk sink took a plan made for shared alias addresses"
    );

    let options = PipelineOptions {
        merge: shared,
        ..Default::default()
    };
    let sink = ThunkAliasesJit(JitSink::new([]).unwrap());
    let (analysis, done) = pipeline::run(module, &target, &options, sink).unwrap();
    assert!(
        analysis.plan.group_of(ret_g2).is_none(),
        "%ret_g2 folded in a JIT"
    );
    let g1 = index(&analysis.module, "%g1").unwrap();
    assert!(
        analysis.plan.group_of(g1).is_some(),
        "%g1 and %g2 still fold"
    );
    let entry = |name: &str| -> extern "C" fn(i64, i64, i64) -> i64 {
        let p = done
            .output
            .pointer(&FuncName::parse(name).unwrap())
            .unwrap();
        unsafe { std::mem::transmute::<*const u8, extern "C" fn(i64, i64, i64) -> i64>(p) }
    };
    assert_eq!(entry("%same_g2")(1, 2, 3), 1, "&g2 has two values");
    let g2 = done
        .output
        .pointer(&FuncName::parse("%g2").unwrap())
        .unwrap();
    assert_eq!(entry("%ret_g2")(0, 0, 0), g2 as i64);
}

/// With branch protection on aarch64 (`use_bti`), Cranelift starts every function with
/// `bti c`, the landing pad an indirect call (`blr`) must find where the pages are guarded.
/// Identical merging's single-jump thunk is reached the same ways as the function it
/// replaces, so it starts with `bti c` too, then `b` to the body; without branch
/// protection it is the `b` alone.
#[test]
fn aarch64_jump_thunks_land_indirect_calls_under_branch_protection() {
    use object::RelocationTarget;
    let clif = "
function %f(i64) -> i64 system_v {
block0(v0: i64):
    v1 = imul v0, v0
    v2 = iadd v1, v0
    v3 = imul v2, v1
    return v3
}
function %g(i64) -> i64 system_v {
block0(v0: i64):
    v1 = imul v0, v0
    v2 = iadd v1, v0
    v3 = imul v2, v1
    return v3
}
";
    let target = TargetInfo::from_triple_str("aarch64-unknown-linux-gnu").unwrap();
    for bti in [true, false] {
        let settings = [("use_bti".to_string(), bti.to_string())];
        let isa = build_isa(&target, &settings).unwrap();
        let mut module = Module::new();
        for p in clif_merge::read::parse_clif(clif, "bti.clif").unwrap() {
            module.add(p.func, Linkage::Export, false).unwrap();
        }
        // Trampolines: `%g`'s address stays its own, so it becomes a jump thunk.
        let options = MergeOptions {
            mode: MergeMode::Trampolines,
            ..MergeOptions::default()
        };
        let plan = clif_merge::merge(&module, &target, &options);
        let (bytes, _) =
            emit_object(&module, &plan, isa, &options, &EmitOptions::default()).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let text = file.section_by_name(".text").unwrap();
        let symbol = |name: &str| file.symbols().find(|s| s.name() == Ok(name)).unwrap();
        let (f, g) = (symbol("f"), symbol("g"));
        let words: Vec<u32> = text.data().unwrap()[g.address() as usize..][..g.size() as usize]
            .chunks(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        let (expected, branch_at) = match bti {
            true => (vec![0xD503_245F, 0x1400_0000], g.address() + 4),
            false => (vec![0x1400_0000], g.address()),
        };
        assert_eq!(words, expected, "use_bti={bti}: g is {words:x?}");
        let reloc = text
            .relocations()
            .find(|(offset, _)| *offset == branch_at)
            .map(|(_, r)| r.target());
        assert_eq!(
            reloc,
            Some(RelocationTarget::Symbol(f.index())),
            "use_bti={bti}: the branch goes to f"
        );
        // Cranelift's own functions start with the landing pad too.
        let first = &text.data().unwrap()[f.address() as usize..][..4];
        assert_eq!(
            u32::from_le_bytes(first.try_into().unwrap()) == 0xD503_245F,
            bti
        );
    }
}

/// With merging disabled, every function in the object is Cranelift's own code for it,
/// byte for byte (relocated fields are zero in both): emission adds nothing and rewrites
/// nothing of the user's code, whatever its shape. The example, every exec fixture and
/// every merge-similar fixture, for x86_64 and aarch64, with and without PIC.
#[test]
fn disabled_merging_writes_cranelifts_own_code() {
    let mut paths = vec![root().join("fixtures/example.clif")];
    for dir in ["fixtures/exec", "fixtures/similar", "fixtures/similar/exec"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "clif"))
            .collect();
        files.sort();
        paths.extend(files);
    }
    let options = options(MergeMode::Disabled);
    let mut compared = 0;
    for triple in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        let target = TargetInfo::from_triple_str(triple).unwrap();
        for pic in [true, false] {
            let settings = [
                ("is_pic".to_string(), pic.to_string()),
                ("preserve_frame_pointers".to_string(), "true".to_string()),
            ];
            for path in &paths {
                let text = std::fs::read_to_string(path).unwrap();
                let parsed = clif_merge::read::parse_clif(&text, path).unwrap();
                let mut module = Module::new();
                for p in &parsed {
                    module.add(p.func.clone(), Linkage::Export, false).unwrap();
                }
                let plan = clif_merge::merge(&module, &target, &options);
                let isa = build_isa(&target, &settings).unwrap();
                let (bytes, _) =
                    emit_object(&module, &plan, isa, &options, &EmitOptions::default()).unwrap();
                let file = object::File::parse(&*bytes).unwrap();
                let data = file.section_by_name(".text").unwrap().data().unwrap();
                let syms = symbols(&bytes);
                let isa = build_isa(&target, &settings).unwrap();
                for p in parsed {
                    let name = FuncName::of_function(&p.func).to_string();
                    let (_, at, size) = symbol(&syms, name.trim_start_matches('%'));
                    let written = &data[*at as usize..(*at + *size) as usize];
                    let mut ctx = cranelift_codegen::Context::for_function(*p.func);
                    ctx.compile(&*isa, &mut Default::default())
                        .unwrap_or_else(|e| panic!("{}: {name}: {:?}", path.display(), e.inner));
                    let code = ctx.compiled_code().unwrap().code_buffer();
                    assert!(
                        written == code,
                        "{triple}, is_pic={pic}, {}: {name} is not Cranelift's code\n\
                         written:   {written:02x?}\nCranelift: {code:02x?}",
                        path.display()
                    );
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > 1000, "{compared} functions compared");
}

/// Every body as data that can be compared: bytes, alignment, relocations (with whether
/// each is a call) and unwind information, by function name.
fn bodies_by_name(
    module: &Module,
    compiled: &clif_merge::emit::compile::Compiled,
) -> std::collections::BTreeMap<String, String> {
    compiled
        .bodies
        .iter()
        .map(|(&f, body)| {
            let relocs: Vec<String> = body
                .relocs_with_calls()
                .map(|(r, call)| {
                    format!("{} {:?} {:?} {} {call}", r.offset, r.kind, r.name, r.addend)
                })
                .collect();
            let text = format!(
                "{:02x?} align {} relocs {relocs:?} unwind {:?}",
                body.bytes, body.alignment, body.unwind
            );
            (module.get(f).name.to_string(), text)
        })
        .collect()
}

/// Bodies whose stencils are equal compile once, and each keeps its own relocations
/// (`src/emit/stencil.rs`): over the fixtures, on x86_64 and aarch64, with PIC and without,
/// every body is what it compiles to on its own. The fixture written for it shares four
/// compilations (calls, an address, self-recursion, names in another order) and compiles
/// the member that names its callee without `colocated` on its own.
#[test]
fn bodies_that_compile_alike_are_what_each_compiles_to() {
    use clif_merge::emit::compile::compile_bodies;
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["fixtures/exec", "fixtures/similar", "fixtures/merger"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "clif") {
                files.push(path);
            }
        }
    }
    files.sort();
    let written_for_it = "bodies_that_compile_alike_keep_their_own_targets.clif";
    assert!(files.iter().any(|p| p.ends_with(written_for_it)));
    let mut shared = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let module = exported_module(&text, &path.display().to_string());
        for triple in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
            for pic in ["true", "false"] {
                let target = TargetInfo::from_triple_str(triple).unwrap();
                let settings = [("is_pic".to_string(), pic.to_string())];
                let isa = build_isa(&target, &settings).unwrap();
                let plan = clif_merge::merge(&module, &target, &options(MergeMode::Aliases));
                let alike = compile_bodies(&module, &plan, &*isa, true);
                let alone = compile_bodies(&module, &plan, &*isa, false);
                let place = format!("{} on {triple}, is_pic={pic}", path.display());
                let (alike, alone) = match (alike, alone) {
                    (Ok(alike), Ok(alone)) => (alike, alone),
                    // x86_64's conventions on aarch64: the same error either way.
                    (Err(a), Err(b)) => {
                        assert_eq!(a.to_string(), b.to_string(), "{place}");
                        continue;
                    }
                    (a, b) => panic!("{place}: {:?} against {:?}", a.err(), b.err()),
                };
                assert_eq!(alone.alike, 0, "{place}");
                assert_eq!(
                    bodies_by_name(&module, &alike),
                    bodies_by_name(&module, &alone),
                    "{place}"
                );
                if path.ends_with(written_for_it) {
                    assert_eq!(alike.alike, 4, "{place}");
                }
                shared += alike.alike;
            }
        }
    }
    assert!(
        shared > 4,
        "the other fixtures share compilations too: {shared}"
    );
}
