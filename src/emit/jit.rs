//! Running a merged module in this process with cranelift-jit.
//!
//! The same plan as for an object: kept bodies compiled once, thunks where addresses must
//! differ, erased functions gone. A JIT has no symbol aliases, so an alias resolves to its
//! body's id: asking for an alias's pointer gives the kept function's code.
//!
//! cranelift-jit registers no unwind information, so after `finalize_definitions()` the
//! frames of every defined body are registered with the process's unwinder
//! ([`super::unwind::Frames::register_jit`]; on Windows a function table whose
//! `UNWIND_INFO`s the module holds as data, [`super::unwind::windows_jit`]) and stay
//! registered as long as the [`JitFunctions`] lives: a panic or a C++ exception thrown by
//! a host function can cross the JIT code to a `catch_unwind` or `catch` outside.
//!
//! cranelift-jit panics when a relocation names a symbol it cannot find (an imported
//! function, a data object, a libcall such as `__cranelift_x86_pshufb`, which Cranelift
//! calls on an x86_64 without SSSE3 and leaves to its embedder). So before finalizing,
//! every such symbol the compiled code refers to is looked up as cranelift-jit would (the
//! symbols given, then the process's own), and one that is not found is an error naming it
//! and a function that refers to it; what panics anyway is caught.

use std::collections::{HashMap, HashSet};

use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, ModuleRelocTarget};

use super::compile::FUNCTION_NAMESPACE;
use super::define::{AliasStyle, Naming};
use super::sink::{Emitted, Sink};
use super::unwind::windows_jit::JitUnwindData;
use super::unwind::JitFrames;
use super::{EmitError, EmitSummary};
use crate::names::FuncName;
use crate::target::TargetInfo;

/// A merged module compiled into executable memory.
pub struct JitFunctions {
    /// Declared first: deregistered before the module goes.
    frames: JitFrames,
    module: JITModule,
    ids: HashMap<FuncName, FuncId>,
    /// What was defined; `summary.plan` is the final plan.
    pub summary: EmitSummary,
}

impl JitFunctions {
    /// The code to call for `name`, or `None` when the module has no such function.
    ///
    /// Cast it to the function's type with `std::mem::transmute`; calling it is `unsafe`
    /// and must match the function's signature and calling convention.
    pub fn pointer(&self, name: &FuncName) -> Option<*const u8> {
        self.ids
            .get(name)
            .map(|&id| self.module.get_finalized_function(id))
    }

    /// With `summary` as what was compiled and defined.
    pub(crate) fn with_summary(self, summary: EmitSummary) -> Self {
        Self { summary, ..self }
    }

    /// The frames registered with the unwinder ([`JitFrames::registrations`]).
    pub fn frames(&self) -> &JitFrames {
        &self.frames
    }
}

/// The JIT sink: everything defined in a `JITModule` for the host (`is_pic` off, frame
/// pointers kept); finishing finalizes it and registers the frames.
pub struct JitSink {
    jit: JITModule,
    /// The names of the symbols given to [`JitSink::new`].
    given: HashSet<String>,
}

impl JitSink {
    /// A sink compiling for the host; `symbols` resolves functions the module calls but
    /// does not define.
    pub fn new(symbols: impl IntoIterator<Item = (String, *const u8)>) -> Result<Self, EmitError> {
        let host = TargetInfo::host();
        let unsupported = |reason: String| EmitError::UnsupportedTarget {
            target: host.triple().to_string(),
            reason,
        };
        let mut flags = settings::builder();
        for (name, value) in [("is_pic", "false"), ("preserve_frame_pointers", "true")] {
            flags
                .set(name, value)
                .map_err(|e| unsupported(e.to_string()))?;
        }
        let isa = cranelift_native::builder()
            .map_err(|e| unsupported(e.to_string()))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| unsupported(e.to_string()))?;
        let symbols: Vec<(String, *const u8)> = symbols.into_iter().collect();
        let given = symbols.iter().map(|(name, _)| name.clone()).collect();
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        builder.symbols(symbols);
        Ok(Self {
            jit: JITModule::new(builder),
            given,
        })
    }

    /// Whether cranelift-jit will find `symbol` outside the module: among the symbols
    /// given, or in the process (`dlsym`, as cranelift-jit looks). Elsewhere than on Unix
    /// it is taken to be found, and finalizing is left to say otherwise.
    fn finds(&self, symbol: &str) -> bool {
        if self.given.contains(symbol) {
            return true;
        }
        #[cfg(unix)]
        {
            let Ok(c_name) = std::ffi::CString::new(symbol) else {
                return false;
            };
            // SAFETY: `dlsym` with `RTLD_DEFAULT` and a NUL-terminated name only looks the
            // name up.
            !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c_name.as_ptr()) }.is_null()
        }
        #[cfg(not(unix))]
        {
            true
        }
    }

    /// The first symbol outside the module (by function in module order, then relocation)
    /// that the compiled code refers to and cranelift-jit would not find, as an error.
    fn check_outside_symbols(&self, emitted: &Emitted<'_>) -> Result<(), EmitError> {
        let symbols = &emitted.compiled.symbols;
        let mut bodies: Vec<_> = emitted.compiled.bodies.iter().collect();
        bodies.sort_unstable_by_key(|(f, _)| **f);
        let libcall_name = default_libcall_names();
        // Each name looked up once, however many relocations name it.
        let mut found: HashSet<String> = HashSet::new();
        for (&f, body) in bodies {
            for reloc in &body.relocs {
                let outside = match &reloc.name {
                    ModuleRelocTarget::User { namespace, index } => {
                        if *namespace == FUNCTION_NAMESPACE {
                            let name = symbols.function_name(*index);
                            emitted.module.lookup(name).is_none().then(|| name.symbol())
                        } else {
                            // Every data object is outside: the module defines functions.
                            Some(symbols.data_names()[*index as usize].0.symbol())
                        }
                    }
                    ModuleRelocTarget::LibCall(libcall) => Some(libcall_name(*libcall)),
                    // cranelift-jit resolves no well-known symbol (a GOT or TLS index);
                    // a JIT compiles without PIC, which never asks for one.
                    ModuleRelocTarget::KnownSymbol(known) => Some(format!("{known:?}")),
                    ModuleRelocTarget::FunctionOffset(..) => None,
                };
                let Some(symbol) = outside.filter(|s| !found.contains(s)) else {
                    continue;
                };
                if !self.finds(&symbol) {
                    return Err(EmitError::UnresolvedSymbol {
                        function: emitted.module.get(f).name.to_string(),
                        symbol,
                    });
                }
                found.insert(symbol);
            }
        }
        Ok(())
    }
}

impl Sink for JitSink {
    type Module = JITModule;
    type Output = JitFunctions;
    type Error = EmitError;

    fn module(&self) -> &JITModule {
        &self.jit
    }

    fn module_mut(&mut self) -> &mut JITModule {
        &mut self.jit
    }

    fn alias_style(&self) -> AliasStyle {
        AliasStyle::BodyId
    }

    fn naming(&self) -> Naming {
        Naming::Declare
    }

    fn finish(
        mut self,
        emitted: Emitted<'_>,
        _summary: &mut EmitSummary,
    ) -> Result<JitFunctions, EmitError> {
        self.check_outside_symbols(&emitted)?;
        let windows_unwind = JitUnwindData::define(&emitted.defined.frames, &mut self.jit)?;
        crate::guard::unpanicked(|| self.jit.finalize_definitions().map_err(Box::new))
            .map_err(EmitError::Jit)?
            .map_err(|source| EmitError::Module {
                context: "finalizing the JIT module".into(),
                source,
            })?;
        let jit = self.jit;
        let mut frames = emitted
            .defined
            .frames
            .register_jit(|id| jit.get_finalized_function(id))?;
        if let Some(unwind) = windows_unwind {
            frames.register_windows(unwind.function_table_in(&jit)?)?;
        }
        Ok(JitFunctions {
            frames,
            module: jit,
            ids: emitted.defined.ids,
            summary: EmitSummary::default(),
        })
    }
}
