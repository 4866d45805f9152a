//! Writing the merged module as an object file.
//!
//! The plan is carried out, never questioned: each kept function is compiled by
//! cranelift-codegen (in parallel, then defined in module order so the bytes do not depend
//! on the thread count) and defined in a cranelift-object `ObjectModule`; every thunk is
//! defined as a single jump (or CLIF, see [`super::thunk`]); every alias is declared as an
//! import, and after `finish()` its symbol is pointed at the section, offset and size of
//! the body it names, with the binding the linkage asks for (local for `Local`, hidden for
//! `Hidden`, weak for `Preemptible`). Erased functions are not declared at all.
//!
//! Before compiling, names are rewritten: Cranelift's object backend only understands
//! `u0:<FuncId>` (functions) and `u1:<DataId>` (data), so every callee, `func_addr` and
//! `symbol` is mapped to the id of the symbol it must reach after merging: the group's
//! body for erased functions and for redirected calls, the name itself otherwise.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{self, ExternalName, GlobalValueData, UserExternalName, UserFuncName};
use cranelift_codegen::isa::{OwnedTargetIsa, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_module::{default_libcall_names, DataId, FuncId, Module as _, ModuleReloc};
use cranelift_object::object::write::{Object, SymbolId, SymbolSection};
use cranelift_object::object::{
    Object as _, ObjectSection as _, SectionKind, SymbolKind, SymbolScope,
};
use cranelift_object::{ObjectBuilder, ObjectModule};
use rayon::prelude::*;

use super::clif::redirected;
use super::thunk::{clif_thunk, jump_thunk};
use crate::merge::{Action, Body, FuncIndex, Linkage, MergePlan, Module};
use crate::names::FuncName;
use crate::target::TargetInfo;

/// Why an object could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The target has no Cranelift backend in this build, or no object format.
    #[error("unsupported target {target}: {reason}")]
    UnsupportedTarget {
        /// The triple.
        target: String,
        /// Why.
        reason: String,
    },
    /// A `--set NAME=VALUE` Cranelift does not know or accept.
    #[error("setting `{name}={value}`: {reason}")]
    Setting {
        /// The setting's name.
        name: String,
        /// The value given.
        value: String,
        /// Cranelift's words.
        reason: String,
    },
    /// Cranelift failed to compile a function.
    #[error("function {function}: code generation failed: {message}")]
    Codegen {
        /// The function.
        function: String,
        /// Cranelift's words.
        message: String,
    },
    /// cranelift-module rejected a declaration or definition.
    #[error("{context}: {source}")]
    Module {
        /// What was being done.
        context: String,
        /// The error.
        source: Box<cranelift_module::ModuleError>,
    },
    /// The object could not be written.
    #[error("writing the object: {0}")]
    Object(String),
}

/// Options for writing the object.
#[derive(Clone, Debug, Default)]
pub struct EmitOptions {
    /// One section per function, so that linkers can still garbage-collect and fold.
    pub per_function_section: bool,
    /// Write every thunk as compiled CLIF (call and return, or `return_call` for `tail`)
    /// instead of a single jump.
    pub clif_thunks: bool,
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct EmitSummary {
    /// Bodies compiled (kept functions and shared local bodies, plus copies).
    pub compiled: usize,
    /// Thunks written.
    pub thunks: usize,
    /// Aliases written.
    pub aliases: usize,
    /// Folded functions written as a copy of the body because the body is no larger than a
    /// thunk (they are not counted as folded in reports).
    pub copied: Vec<FuncIndex>,
    /// Bytes of code in the object's text sections.
    pub text_bytes: u64,
    /// Seconds spent compiling.
    pub codegen_s: f64,
    /// Seconds spent defining symbols and writing the object.
    pub emit_s: f64,
}

/// Build the Cranelift ISA for `target` with shared or ISA-specific `settings`.
pub fn build_isa(
    target: &TargetInfo,
    settings: &[(String, String)],
) -> Result<OwnedTargetIsa, EmitError> {
    let unsupported = |reason: String| EmitError::UnsupportedTarget {
        target: target.triple().to_string(),
        reason,
    };
    let mut isa_builder = cranelift_codegen::isa::lookup(target.triple().clone())
        .map_err(|e| unsupported(e.to_string()))?;
    let mut shared = settings::builder();
    for (name, value) in settings {
        let setting_error = |reason: String| EmitError::Setting {
            name: name.clone(),
            value: value.clone(),
            reason,
        };
        match shared.set(name, value) {
            Ok(()) => {}
            Err(settings::SetError::BadName(_)) => isa_builder
                .set(name, value)
                .map_err(|e| setting_error(e.to_string()))?,
            Err(e) => return Err(setting_error(e.to_string())),
        }
    }
    isa_builder
        .finish(settings::Flags::new(shared))
        .map_err(|e| unsupported(e.to_string()))
}

/// One compiled body, ready to define.
struct Compiled {
    bytes: Vec<u8>,
    alignment: u64,
    relocs: Vec<ModuleReloc>,
}

/// What a module function's symbol becomes in the object.
#[derive(Clone, Copy)]
enum Definition {
    /// Its own compiled body (kept functions, copies).
    Body,
    /// The body of another symbol (a shared local body).
    SharedBody,
    Thunk(FuncId),
    Alias(FuncId),
}

/// Compile the plan into an object, returned as bytes.
pub fn emit_object(
    module: &Module,
    plan: &MergePlan,
    isa: OwnedTargetIsa,
    options: &EmitOptions,
) -> Result<(Vec<u8>, EmitSummary), EmitError> {
    let codegen_start = Instant::now();
    let isa_arc: Arc<dyn TargetIsa> = isa.clone();
    if isa_arc.triple().binary_format == target_lexicon::BinaryFormat::Unknown {
        return Err(EmitError::UnsupportedTarget {
            target: isa_arc.triple().to_string(),
            reason: "no object format".into(),
        });
    }
    let mut builder =
        ObjectBuilder::new(isa, "clif-merge", default_libcall_names()).map_err(|e| {
            EmitError::Module {
                context: "creating the object".into(),
                source: Box::new(e),
            }
        })?;
    builder.per_function_section(options.per_function_section);
    let mut object = ObjectModule::new(builder);
    let mut names = Names::default();

    // Declare every symbol the object defines, in module order.
    let mut defs: Vec<(FuncIndex, FuncId, Definition)> = Vec::new();
    let mut body_of_group: HashMap<FuncIndex, FuncId> = HashMap::new();
    // Group bodies first: a folded function may come before its kept one.
    for group in plan.groups() {
        let m = module.get(group.kept);
        let body = match &group.body {
            Body::Kept => declare(&mut object, &m.name.symbol(), m.linkage, &m.func.signature)?,
            Body::SharedLocal { symbol } => {
                declare(&mut object, symbol, Linkage::Local, &m.func.signature)?
            }
        };
        body_of_group.insert(group.kept, body);
    }
    for (f, m) in module.iter() {
        let symbol = m.name.symbol();
        let group = plan.group_of(f);
        let action = plan.action(f);
        match action {
            Action::Keep => {
                let id = match body_of_group.get(&f) {
                    Some(&id) => id,
                    None => declare(&mut object, &symbol, m.linkage, &m.func.signature)?,
                };
                names.functions.insert(m.name.clone(), id);
                defs.push((f, id, Definition::Body));
            }
            Action::Erased => {}
            Action::Alias | Action::Thunk => {
                let linkage = if action == Action::Alias {
                    Linkage::Import
                } else {
                    m.linkage
                };
                let id = declare(&mut object, &symbol, linkage, &m.func.signature)?;
                names.functions.insert(m.name.clone(), id);
                let kept = group.expect("a folded function has a group").kept;
                let body = body_of_group[&kept];
                if let Some(g) = group {
                    if g.kept == f {
                        defs.push((f, body, Definition::SharedBody));
                    }
                }
                defs.push((
                    f,
                    id,
                    if action == Action::Alias {
                        Definition::Alias(body)
                    } else {
                        Definition::Thunk(body)
                    },
                ));
            }
        }
    }

    // Rewrite and compile every body.
    let mut jobs: Vec<(usize, ir::Function)> = Vec::new();
    for (i, &(f, id, def)) in defs.iter().enumerate() {
        if matches!(def, Definition::Body | Definition::SharedBody) {
            let func = rewrite_names(module, plan, f, id, &mut object, &mut names)?;
            jobs.push((i, func));
        }
    }
    let mut compiled: HashMap<usize, Compiled> = compile_all(&*isa_arc, module, &defs, jobs)?;

    // Thunks: a jump, CLIF, or a copy of the body when the body is no larger than a jump.
    let jump_size = u64::from(
        TargetInfo::new(isa_arc.triple().clone())
            .ok()
            .and_then(|t| t.jump_thunk_size())
            .unwrap_or(0),
    );
    let body_size: HashMap<FuncId, u64> = defs
        .iter()
        .enumerate()
        .filter_map(|(i, &(_, id, _))| compiled.get(&i).map(|c| (id, c.bytes.len() as u64)))
        .collect();
    let mut summary = EmitSummary::default();
    let mut second: Vec<(usize, ir::Function)> = Vec::new();
    let mut thunk_defs: Vec<(usize, FuncId, FuncId)> = Vec::new();
    for (i, &(f, id, def)) in defs.iter().enumerate() {
        if let Definition::Thunk(body) = def {
            let arch = isa_arc.triple().architecture;
            let small = body_size.get(&body).is_some_and(|&s| s <= jump_size)
                && plan.group_of(f).is_some_and(|g| g.kept != f);
            if small {
                summary.copied.push(f);
                let func = rewrite_names(module, plan, f, id, &mut object, &mut names)?;
                second.push((i, func));
            } else if options.clif_thunks || jump_thunk(arch, body).is_none() {
                let func = clif_thunk(
                    &FuncName::User {
                        namespace: 0,
                        index: id.as_u32(),
                    },
                    &module.get(f).func.signature,
                    &FuncName::User {
                        namespace: 0,
                        index: body.as_u32(),
                    },
                    isa_arc.frontend_config(),
                );
                second.push((i, func));
            } else {
                thunk_defs.push((i, id, body));
            }
        }
    }
    compiled.extend(compile_all(&*isa_arc, module, &defs, second)?);
    summary.codegen_s = codegen_start.elapsed().as_secs_f64();

    // Define in module order.
    let emit_start = Instant::now();
    let thunk_at: HashMap<usize, FuncId> =
        thunk_defs.iter().map(|&(i, _, body)| (i, body)).collect();
    let mut aliases: Vec<(FuncIndex, FuncId, FuncId)> = Vec::new();
    for (i, &(f, id, def)) in defs.iter().enumerate() {
        let context = || format!("defining {}", module.get(f).name);
        let module_err = |source| EmitError::Module {
            context: context(),
            source: Box::new(source),
        };
        if let Some(c) = compiled.remove(&i) {
            object
                .define_function_bytes(id, c.alignment, &c.bytes, &c.relocs)
                .map_err(module_err)?;
            if matches!(def, Definition::Thunk(_)) && !summary.copied.contains(&f) {
                summary.thunks += 1;
            } else {
                summary.compiled += 1;
            }
        } else if let Some(&body) = thunk_at.get(&i) {
            let thunk = jump_thunk(isa_arc.triple().architecture, body).expect("checked above");
            object
                .define_function_bytes(id, thunk.alignment, &thunk.bytes, &[thunk.reloc])
                .map_err(module_err)?;
            summary.thunks += 1;
        } else if let Definition::Alias(body) = def {
            aliases.push((f, id, body));
        }
    }

    let mut product = object.finish();
    for &(f, alias, body) in &aliases {
        let target = product.function_symbol(body);
        let symbol = product.function_symbol(alias);
        point_alias(&mut product.object, symbol, target, module.get(f).linkage);
        summary.aliases += 1;
    }
    let bytes = product
        .object
        .write()
        .map_err(|e| EmitError::Object(e.to_string()))?;
    summary.text_bytes = text_bytes(&bytes);
    summary.emit_s = emit_start.elapsed().as_secs_f64();
    Ok((bytes, summary))
}

fn declare(
    object: &mut ObjectModule,
    name: &str,
    linkage: Linkage,
    signature: &ir::Signature,
) -> Result<FuncId, EmitError> {
    object
        .declare_function(name, linkage, signature)
        .map_err(|source| EmitError::Module {
            context: format!("declaring {name}"),
            source: Box::new(source),
        })
}

/// Symbols declared so far for names the functions refer to.
#[derive(Default)]
struct Names {
    functions: HashMap<FuncName, FuncId>,
    data: HashMap<FuncName, DataId>,
}

/// A copy of function `f` with its references redirected by the plan
/// ([`redirected`]), renamed to `id`, and every external name mapped to the object
/// symbol it names.
fn rewrite_names(
    module: &Module,
    plan: &MergePlan,
    f: FuncIndex,
    id: FuncId,
    object: &mut ObjectModule,
    names: &mut Names,
) -> Result<ir::Function, EmitError> {
    let mut func = redirected(module, plan, f);
    func.name = UserFuncName::user(0, id.as_u32());

    let refs: Vec<ir::FuncRef> = func.dfg.ext_funcs.keys().collect();
    for fref in refs {
        let name = FuncName::of_external(&func, &func.dfg.ext_funcs[fref].name);
        let target_id = match names.functions.get(&name) {
            Some(&id) => id,
            None if module.lookup(&name).is_some() => {
                return Err(EmitError::Object(format!(
                    "{} refers to {name}, which the plan erased",
                    module.get(f).name
                )));
            }
            None => {
                let sig = func.dfg.signatures[func.dfg.ext_funcs[fref].signature].clone();
                let id = declare(object, &name.symbol(), Linkage::Import, &sig)?;
                names.functions.insert(name, id);
                id
            }
        };
        let user = func
            .params
            .ensure_user_func_name(UserExternalName::new(0, target_id.as_u32()));
        func.dfg.ext_funcs[fref].name = ExternalName::User(user);
    }

    let gvs: Vec<ir::GlobalValue> = func.global_values.keys().collect();
    for gv in gvs {
        let GlobalValueData::Symbol { name, tls, .. } = &func.global_values[gv] else {
            continue;
        };
        let tls = *tls;
        let resolved = FuncName::of_external(&func, name);
        let new_name = match names.functions.get(&resolved) {
            Some(id) => UserExternalName::new(0, id.as_u32()),
            None => {
                let id = match names.data.get(&resolved) {
                    Some(&id) => id,
                    None => {
                        let id = object
                            .declare_data(&resolved.symbol(), Linkage::Import, false, tls)
                            .map_err(|source| EmitError::Module {
                                context: format!("declaring data {resolved}"),
                                source: Box::new(source),
                            })?;
                        names.data.insert(resolved.clone(), id);
                        id
                    }
                };
                UserExternalName::new(1, id.as_u32())
            }
        };
        let user = func.params.ensure_user_func_name(new_name);
        if let GlobalValueData::Symbol { name, .. } = &mut func.global_values[gv] {
            *name = ExternalName::User(user);
        }
    }
    Ok(func)
}

/// Compile `jobs` in parallel; results keyed by their position in `defs`.
fn compile_all(
    isa: &dyn TargetIsa,
    module: &Module,
    defs: &[(FuncIndex, FuncId, Definition)],
    jobs: Vec<(usize, ir::Function)>,
) -> Result<HashMap<usize, Compiled>, EmitError> {
    jobs.into_par_iter()
        .map(|(i, func)| {
            let (f, id, _) = defs[i];
            let mut ctx = cranelift_codegen::Context::for_function(func);
            ctx.compile(isa, &mut ControlPlane::default())
                .map_err(|e| EmitError::Codegen {
                    function: module.get(f).name.to_string(),
                    message: format!("{:?}", e.inner),
                })?;
            let code = ctx.compiled_code().expect("compiled above");
            let alignment = u64::from(code.buffer.alignment);
            let bytes = code.buffer.data().to_vec();
            let relocs = code
                .buffer
                .relocs()
                .iter()
                .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, id))
                .collect();
            Ok((
                i,
                Compiled {
                    bytes,
                    alignment,
                    relocs,
                },
            ))
        })
        .collect()
}

/// Point `alias` at the code of `target`, with the binding `linkage` asks for.
fn point_alias(object: &mut Object<'static>, alias: SymbolId, target: SymbolId, linkage: Linkage) {
    let (section, value, size) = {
        let t = object.symbol(target);
        (t.section, t.value, t.size)
    };
    let s = object.symbol_mut(alias);
    s.section = section;
    s.value = value;
    s.size = size;
    s.kind = SymbolKind::Text;
    s.weak = linkage == Linkage::Preemptible;
    s.scope = match linkage {
        Linkage::Local => SymbolScope::Compilation,
        Linkage::Hidden => SymbolScope::Linkage,
        Linkage::Export | Linkage::Preemptible | Linkage::Import => SymbolScope::Dynamic,
    };
    debug_assert!(matches!(section, SymbolSection::Section(_)));
}

/// Bytes of code in the text sections of an object file.
pub fn text_bytes(object_bytes: &[u8]) -> u64 {
    let Ok(file) = cranelift_object::object::File::parse(object_bytes) else {
        return 0;
    };
    file.sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| s.size())
        .sum()
}
