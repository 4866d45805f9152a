//! The input of the merger: functions with names, linkages and address significance, and
//! the call graph between them.
//!
//! A function's address is *taken* when another function (or itself) uses it other than as
//! a direct call target (`func_addr`, a `symbol` global value), or when its linkage lets
//! other objects see it (anything but `Local`). An address-taken function is
//! *address-significant* unless the user says addresses are not observed (LLVM's
//! `unnamed_addr`, rustc's view of its own functions).

use std::collections::{HashMap, HashSet};

use cranelift_codegen::ir::{ExternalName, FuncRef, Function, GlobalValueData, InstructionData};
pub use cranelift_module::Linkage;

use crate::detect::hash::StableState;
use crate::names::FuncName;

/// A function's index in a [`Module`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FuncIndex(u32);
cranelift_entity::entity_impl!(FuncIndex, "func");

/// One function of the module.
#[derive(Clone)]
pub struct ModuleFunction {
    /// Its name (the symbol it is defined under).
    pub name: FuncName,
    /// Its body, boxed: merge-similar swaps a member's body for its thunk by moving a
    /// pointer, not the 960 bytes of a `Function` (copies that wrote fresh memory).
    pub func: Box<Function>,
    /// How other objects see it. `Import` is not allowed for a definition.
    pub linkage: Linkage,
    /// `true` when the user promises nobody compares this function's address
    /// (`unnamed_addr`).
    pub unnamed_addr: bool,
    /// Whether this is merge-similar's thunk into a shared body ([`crate::merge::similar`]),
    /// which loads the values its member differs in and passes them on with its own
    /// arguments. Emission writes such a thunk as register loads and a jump where the target
    /// allows ([`crate::emit::thunk::register_thunk`]), so that the body runs in the frame
    /// of whoever called the member, as the member did. Every other function is compiled as
    /// written, even when it has a thunk's shape: its call stays a call, and the callee sees
    /// the frame it was called from. Merge-similar sets it; `--emit-clif` writes it as a
    /// comment that reading the CLIF again takes back ([`crate::read::SIMILAR_THUNK_MARK`]).
    pub similar_thunk: bool,
}

impl ModuleFunction {
    /// Whether the function reads where it runs: its return address, frame pointer or
    /// stack pointer (`get_return_address`, `get_frame_pointer`, `get_stack_pointer`).
    /// Such a body must run in its caller's frame exactly as it would unmerged, so it is
    /// never put behind a thunk that adds a frame of its own (a call and a return).
    pub fn observes_its_frame(&self) -> bool {
        use cranelift_codegen::ir::Opcode;
        self.func.layout.blocks().any(|block| {
            self.func.layout.block_insts(block).any(|inst| {
                matches!(
                    self.func.dfg.insts[inst].opcode(),
                    Opcode::GetReturnAddress | Opcode::GetFramePointer | Opcode::GetStackPointer
                )
            })
        })
    }
}

/// Why a module could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// Two functions with one name.
    #[error("function {0} is defined twice")]
    Duplicate(FuncName),
    /// A definition with `Import` linkage.
    #[error("function {0} is defined but its linkage is Import")]
    ImportDefinition(FuncName),
}

/// A set of functions to merge, with their call graph.
#[derive(Clone, Default)]
pub struct Module {
    functions: cranelift_entity::PrimaryMap<FuncIndex, ModuleFunction>,
    by_name: HashMap<FuncName, FuncIndex, StableState>,
}

/// What one function does with the functions of the module.
#[derive(Clone, Debug, Default)]
pub struct References {
    /// For each `FuncRef` of the function: the module function it names, if any.
    pub func_refs: Vec<Option<FuncIndex>>,
    /// Module functions it calls directly.
    pub calls: Vec<FuncIndex>,
    /// Module functions whose address it takes (`func_addr`, `symbol`).
    pub addresses: Vec<FuncIndex>,
    /// For each global value of the function: the module function a `symbol` names, if any.
    pub symbols: Vec<Option<FuncIndex>>,
}

impl Module {
    /// An empty module.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty module with room for `n` functions.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            functions: cranelift_entity::PrimaryMap::with_capacity(n),
            by_name: HashMap::with_capacity_and_hasher(n, StableState::default()),
        }
    }

    /// A module of `functions`, all with `Export` linkage.
    pub fn from_functions(
        functions: impl IntoIterator<Item = impl Into<Box<Function>>>,
    ) -> Result<Self, ModuleError> {
        let mut module = Self::new();
        for func in functions {
            module.add(func, Linkage::Export, false)?;
        }
        Ok(module)
    }

    /// Add a function (a `Function`, or one already boxed, which is not copied again).
    pub fn add(
        &mut self,
        func: impl Into<Box<Function>>,
        linkage: Linkage,
        unnamed_addr: bool,
    ) -> Result<FuncIndex, ModuleError> {
        let func: Box<Function> = func.into();
        let name = FuncName::of_function(&func);
        if linkage == Linkage::Import {
            return Err(ModuleError::ImportDefinition(name));
        }
        if self.by_name.contains_key(&name) {
            return Err(ModuleError::Duplicate(name));
        }
        let index = self.functions.push(ModuleFunction {
            name: name.clone(),
            func,
            linkage,
            unnamed_addr,
            similar_thunk: false,
        });
        self.by_name.insert(name, index);
        Ok(index)
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// Whether the module has no function.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// The function at `index`.
    pub fn get(&self, index: FuncIndex) -> &ModuleFunction {
        &self.functions[index]
    }

    /// Mutable access to the function at `index` (linkage, unnamed_addr).
    pub fn get_mut(&mut self, index: FuncIndex) -> &mut ModuleFunction {
        &mut self.functions[index]
    }

    /// The symbols starting with `prefix` that the module defines or refers to (calls,
    /// function addresses, `symbol` global values): what a name made up for a new
    /// function must not be, or it would take the place of a function the program calls.
    pub fn symbols_starting_with(&self, prefix: &str) -> HashSet<String> {
        let mut found = HashSet::new();
        let mut note = |symbol: &[u8]| {
            if symbol.starts_with(prefix.as_bytes()) {
                found.insert(String::from_utf8_lossy(symbol).into_owned());
            }
        };
        // `u<namespace>:<index>`: only an empty prefix or one starting with `u` can match a
        // user name (and formatting thousands of names to find out costs more than the rest
        // of the scan).
        let user_names_match = prefix.is_empty() || prefix.starts_with('u');
        for m in self.functions.values() {
            if user_names_match || !matches!(m.name, FuncName::User { .. }) {
                note(m.name.symbol().as_bytes());
            }
            let names = m.func.dfg.ext_funcs.values().map(|ext| &ext.name);
            let symbols = m.func.global_values.values().filter_map(|gv| match gv {
                GlobalValueData::Symbol { name, .. } => Some(name),
                _ => None,
            });
            for name in names.chain(symbols) {
                match name {
                    ExternalName::TestCase(t) => note(t.raw()),
                    ExternalName::User(_) if !user_names_match => {}
                    ExternalName::User(_)
                    | ExternalName::LibCall(_)
                    | ExternalName::KnownSymbol(_) => {
                        note(FuncName::of_external(&m.func, name).symbol().as_bytes())
                    }
                }
            }
        }
        found
    }

    /// The function named `name`.
    pub fn lookup(&self, name: &FuncName) -> Option<FuncIndex> {
        self.by_name.get(name).copied()
    }

    /// All functions, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (FuncIndex, &ModuleFunction)> {
        self.functions.iter()
    }

    /// Every function with its index, taking the module apart.
    pub fn into_functions(self) -> impl Iterator<Item = (FuncIndex, ModuleFunction)> {
        self.functions.into_iter()
    }

    /// All indices.
    pub fn indices(&self) -> impl Iterator<Item = FuncIndex> + '_ {
        self.functions.keys()
    }

    /// What `index` calls and whose addresses it takes, among the module's functions.
    pub fn references(&self, index: FuncIndex) -> References {
        let func = &self.functions[index].func;
        let func_refs: Vec<Option<FuncIndex>> = func
            .dfg
            .ext_funcs
            .values()
            .map(|ext| self.lookup(&FuncName::of_external(func, &ext.name)))
            .collect();
        let target = |f: FuncRef| func_refs[f.as_u32() as usize];
        let mut refs = References::default();
        for block in func.layout.blocks() {
            for inst in func.layout.block_insts(block) {
                match func.dfg.insts[inst] {
                    InstructionData::Call { func_ref, .. }
                    | InstructionData::TryCall { func_ref, .. } => {
                        refs.calls.extend(target(func_ref));
                    }
                    InstructionData::FuncAddr { func_ref, .. } => {
                        refs.addresses.extend(target(func_ref));
                    }
                    _ => {}
                }
            }
        }
        for gv in func.global_values.values() {
            let named = match gv {
                GlobalValueData::Symbol { name, .. } => {
                    self.lookup(&FuncName::of_external(func, name))
                }
                _ => None,
            };
            refs.addresses.extend(named);
            refs.symbols.push(named);
        }
        refs.func_refs = func_refs;
        refs.calls.sort_unstable();
        refs.calls.dedup();
        refs.addresses.sort_unstable();
        refs.addresses.dedup();
        refs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature, UserFuncName};
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    /// A function named `name` that calls `u7:3` and `%clif_merge_x`.
    fn caller(name: UserFuncName) -> Function {
        let mut func = Function::with_name_signature(name, Signature::new(CallConv::SystemV));
        let mut ctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut ctx);
        let block = b.create_block();
        b.switch_to_block(block);
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params
            .push(AbiParam::new(cranelift_codegen::ir::types::I32));
        let sig = b.import_signature(sig);
        let x = b.ins().iconst(cranelift_codegen::ir::types::I32, 1);
        for callee in [
            crate::names::FuncName::User {
                namespace: 7,
                index: 3,
            },
            crate::names::FuncName::TestCase("clif_merge_x".into()),
        ] {
            let name = crate::names::external_name(b.func, &callee);
            let f = b.import_function(cranelift_codegen::ir::ExtFuncData {
                name,
                signature: sig,
                colocated: false,
                patchable: false,
            });
            b.ins().call(f, &[x]);
        }
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(cranelift_codegen::isa::TargetFrontendConfig {
            default_call_conv: CallConv::SystemV,
            pointer_width: target_lexicon::PointerWidth::U64,
            page_size_align_log2: 12,
        });
        func
    }

    #[test]
    fn symbols_by_prefix_include_user_names_only_where_they_can_match() {
        let mut module = Module::with_capacity(2);
        module
            .add(caller(UserFuncName::user(0, 1)), Linkage::Local, false)
            .unwrap();
        module
            .add(
                caller(UserFuncName::testcase("clif_merge_y")),
                Linkage::Local,
                false,
            )
            .unwrap();
        let found = |prefix: &str| {
            let mut v: Vec<String> = module.symbols_starting_with(prefix).into_iter().collect();
            v.sort();
            v
        };
        assert_eq!(found("clif_merge_"), ["clif_merge_x", "clif_merge_y"]);
        assert_eq!(found("u0"), ["u0:1"]);
        assert_eq!(found("u7:"), ["u7:3"]);
        assert_eq!(found(""), ["clif_merge_x", "clif_merge_y", "u0:1", "u7:3"]);
    }
}
