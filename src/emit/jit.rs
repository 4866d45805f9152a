//! Running a merged module in this process with cranelift-jit.
//!
//! The same plan as for an object: kept bodies compiled once, thunks where addresses must
//! differ, erased functions gone. A JIT has no symbol aliases, so an alias resolves to its
//! body's id: asking for an alias's pointer gives the kept function's code.
//!
//! cranelift-jit registers no unwind information, so after `finalize_definitions()` the
//! frames of every defined body are registered with the process's unwinder
//! ([`super::unwind::Frames::register_jit`]) and stay registered as long as the
//! [`JitFunctions`] lives: a panic or a C++ exception thrown by a host function can cross
//! the JIT code to a `catch_unwind` or `catch` outside.

use std::collections::HashMap;

use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId};

use super::define::{AliasStyle, Naming};
use super::sink::{Emitted, Sink};
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
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        builder.symbols(symbols);
        Ok(Self {
            jit: JITModule::new(builder),
        })
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
        self.jit
            .finalize_definitions()
            .map_err(|e| EmitError::Module {
                context: "finalizing the JIT module".into(),
                source: Box::new(e),
            })?;
        let jit = self.jit;
        let frames = emitted
            .defined
            .frames
            .register_jit(|id| jit.get_finalized_function(id))?;
        Ok(JitFunctions {
            frames,
            module: jit,
            ids: emitted.defined.ids,
            summary: EmitSummary::default(),
        })
    }
}
