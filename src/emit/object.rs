//! Writing the merged module as an object file.
//!
//! The plan is carried out: kept bodies are compiled ([`super::compile`]), bodies that
//! compiled to the same machine code are folded too ([`super::fold`]), every
//! symbol is declared and defined in a cranelift-object `ObjectModule`
//! ([`super::define`]): thunks as a single jump, erased functions not at all, aliases as
//! imports that, after `finish()`, are pointed at the section, offset and size of the body
//! they name, with the binding the linkage asks for (local for `Local`, hidden for
//! `Hidden`, weak for `Preemptible`).
//!
//! Then the unwind information of every defined body is written ([`super::unwind`]):
//! `.eh_frame` (and `.pdata`/`.xdata` for Windows x64), unless Cranelift's `unwind_info`
//! setting is off. cranelift-object's own `unwind_info` option is left off: it covers only
//! functions compiled through `define_function`, and every body here is defined as bytes.

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_module::{default_libcall_names, FuncId};
use cranelift_object::object::write::{Object, SymbolId, SymbolSection};
use cranelift_object::object::{
    Object as _, ObjectSection as _, SectionKind, SymbolKind, SymbolScope,
};
use cranelift_object::{ObjectBuilder, ObjectModule, ObjectProduct};

use super::define::{AliasStyle, Naming};
use super::sink::{Emitted, Sink};
use super::unwind::Frames;
use crate::merge::{FuncIndex, Linkage, MergePlan};
use crate::target::{ObjectFormat, TargetInfo};

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
    /// The plan was made for aliases that share their body's address
    /// (`MergeOptions::aliases_share_address`), and the sink makes every alias a thunk.
    #[error(
        "the merge plan counts on aliases sharing their body's address, and this output makes \
         aliases thunks (a JIT): make the plan with `aliases_share_address: false`"
    )]
    AliasesNotShared,
    /// The code refers to a symbol a JIT must find outside the module (an imported function
    /// or data object, or a Cranelift libcall), and neither the symbols given nor the
    /// process define it.
    #[error(
        "function {function} refers to `{symbol}`, which neither the module, the symbols \
         given to the JIT, nor this process defines"
    )]
    UnresolvedSymbol {
        /// A function whose code refers to it (the first in module order).
        function: String,
        /// The symbol, as the JIT looks it up.
        symbol: String,
    },
    /// cranelift-jit failed to finalize the module (it panics where it cannot go on).
    #[error("finalizing the JIT module: {0}")]
    Jit(String),
    /// The Windows function table of JIT code cannot be made.
    #[error("the Windows unwind table of the JIT code: {0}")]
    UnwindTable(String),
}

/// Options for writing the object.
#[derive(Clone, Debug)]
pub struct EmitOptions {
    /// One section per function, so that linkers can still garbage-collect and fold.
    pub per_function_section: bool,
    /// Write every thunk as compiled CLIF (call and return, or `return_call` for `tail`)
    /// instead of a single jump.
    pub clif_thunks: bool,
    /// After code generation, also fold bodies that compiled to the same machine code
    /// ([`super::fold`]).
    pub fold_machine_code: bool,
}

impl Default for EmitOptions {
    fn default() -> Self {
        Self {
            per_function_section: false,
            clif_thunks: false,
            fold_machine_code: true,
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct EmitSummary {
    /// Bodies compiled (kept functions and shared local bodies, plus copies).
    pub compiled: usize,
    /// Of the bodies compiled, how many took the code of another that compiles alike (the
    /// same stencil: [`super::stencil`]) instead of being compiled by Cranelift.
    pub compiled_alike: usize,
    /// Thunks written.
    pub thunks: usize,
    /// Aliases written.
    pub aliases: usize,
    /// Folded functions written as a copy of the body because the body is no larger than a
    /// thunk (they are not counted as folded in reports).
    pub copied: Vec<FuncIndex>,
    /// Bytes of code in the object's text sections.
    pub text_bytes: u64,
    /// Bytes of `.text` per function, as defined ([`super::sizes`]).
    pub sizes: super::sizes::CodeSizes,
    /// Bytes of code the functions would take unmerged, estimated as the size of the body
    /// each function runs (equal functions compile to the same code), without padding.
    pub unmerged_code_bytes_estimate: u64,
    /// Seconds spent compiling.
    pub codegen_s: f64,
    /// Seconds spent folding bodies that compiled to the same machine code
    /// ([`super::fold`]): merging work done after code generation.
    pub fold_s: f64,
    /// Seconds spent defining symbols and writing the object.
    pub emit_s: f64,
    /// The final plan: the plan given, plus machine-code folding.
    pub plan: MergePlan,
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

/// The object sink: bodies, thunks and aliases defined in an `ObjectModule`; finishing
/// points the aliases, writes the unwind information and the object's bytes.
pub struct ObjectSink {
    object: ObjectModule,
}

impl ObjectSink {
    /// A sink writing an object for `isa`, with one section per function if `options` say
    /// so.
    pub fn new(isa: OwnedTargetIsa, options: &EmitOptions) -> Result<Self, EmitError> {
        let target =
            TargetInfo::new(isa.triple().clone()).map_err(|e| EmitError::UnsupportedTarget {
                target: isa.triple().to_string(),
                reason: e.to_string(),
            })?;
        if target.object_format() == ObjectFormat::Other {
            return Err(EmitError::UnsupportedTarget {
                target: isa.triple().to_string(),
                reason: "no object file format for this triple".into(),
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
        Ok(Self {
            object: ObjectModule::new(builder),
        })
    }
}

impl Sink for ObjectSink {
    type Module = ObjectModule;
    type Output = Vec<u8>;
    type Error = EmitError;

    fn module(&self) -> &ObjectModule {
        &self.object
    }

    fn module_mut(&mut self) -> &mut ObjectModule {
        &mut self.object
    }

    fn alias_style(&self) -> AliasStyle {
        AliasStyle::PatchedSymbol
    }

    fn naming(&self) -> Naming {
        Naming::Declare
    }

    fn finish(self, emitted: Emitted<'_>, summary: &mut EmitSummary) -> Result<Vec<u8>, EmitError> {
        let mut product = self.object.finish();
        let aliases: Vec<(FuncId, FuncId, Linkage)> = emitted
            .defined
            .aliases
            .iter()
            .map(|&(f, alias, body)| (alias, body, emitted.module.get(f).linkage))
            .collect();
        finish_product(&mut product, &aliases, &emitted.defined.frames)?;
        let bytes = product
            .object
            .write()
            .map_err(|e| EmitError::Object(e.to_string()))?;
        summary.text_bytes = text_bytes(&bytes);
        Ok(bytes)
    }
}

/// Finish an object that `ObjectModule::finish` wrote: point every alias
/// `(alias, body, linkage)` at its body's code, and write the unwind information of the
/// bodies defined as bytes (`frames`).
pub fn finish_product(
    product: &mut ObjectProduct,
    aliases: &[(FuncId, FuncId, Linkage)],
    frames: &Frames,
) -> Result<(), EmitError> {
    for &(alias, body, linkage) in aliases {
        let target = product.function_symbol(body);
        let symbol = product.function_symbol(alias);
        point_alias(&mut product.object, symbol, target, linkage);
    }
    let ObjectProduct {
        object, functions, ..
    } = product;
    frames.write_object(object, |id| {
        functions[id].expect("a defined function has a symbol").0
    })
}

/// Point `alias` at the code of `target`, with the binding `linkage` asks for.
pub fn point_alias(
    object: &mut Object<'static>,
    alias: SymbolId,
    target: SymbolId,
    linkage: Linkage,
) {
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
