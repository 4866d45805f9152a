//! Function names, resolved: what a call or a symbol actually names.
//!
//! Inside a `Function`, a callee is an `ExternalName`, and `ExternalName::User` is only an
//! index into the function's own `user_named_funcs` table. Two functions that call the same
//! callee may use different indices, so every name is resolved through that table first.

use std::fmt;

use cranelift_codegen::ir::{self, ExternalName, Function, UserExternalName, UserFuncName};

/// A resolved function or symbol name, comparable across functions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FuncName {
    /// `u<namespace>:<index>`, as compilers such as wasmtime name their functions.
    User {
        /// The namespace (`u0:` for wasm functions in wasmtime).
        namespace: u32,
        /// The index within the namespace.
        index: u32,
    },
    /// `%name`, a test-case name: the symbol is `name`.
    TestCase(String),
    /// A Cranelift libcall, by its symbol name.
    LibCall(String),
    /// A well-known symbol such as the ELF GOT.
    KnownSymbol(String),
}

impl FuncName {
    /// The name a function is defined under.
    pub fn of_function(func: &Function) -> Self {
        match &func.name {
            UserFuncName::User(u) => FuncName::User {
                namespace: u.namespace,
                index: u.index,
            },
            UserFuncName::Testcase(t) => {
                FuncName::TestCase(String::from_utf8_lossy(t.raw()).into_owned())
            }
        }
    }

    /// The name `name` refers to, resolved inside `func`.
    pub fn of_external(func: &Function, name: &ExternalName) -> Self {
        match name {
            ExternalName::User(r) => {
                let u = &func.params.user_named_funcs()[*r];
                FuncName::User {
                    namespace: u.namespace,
                    index: u.index,
                }
            }
            ExternalName::TestCase(t) => {
                FuncName::TestCase(String::from_utf8_lossy(t.raw()).into_owned())
            }
            ExternalName::LibCall(l) => FuncName::LibCall(l.to_string()),
            ExternalName::KnownSymbol(k) => FuncName::KnownSymbol(k.to_string()),
        }
    }

    /// Parse a name in Cranelift's spelling: `%foo` or `u0:7`.
    pub fn parse(text: &str) -> Option<Self> {
        if let Some(rest) = text.strip_prefix('%') {
            return (!rest.is_empty()).then(|| FuncName::TestCase(rest.to_string()));
        }
        let rest = text.strip_prefix('u')?;
        let (ns, idx) = rest.split_once(':')?;
        Some(FuncName::User {
            namespace: ns.parse().ok()?,
            index: idx.parse().ok()?,
        })
    }

    /// The symbol this name becomes in an object file: `%foo` is `foo`, `u0:7` stays `u0:7`.
    pub fn symbol(&self) -> String {
        match self {
            FuncName::User { namespace, index } => format!("u{namespace}:{index}"),
            FuncName::TestCase(s) | FuncName::LibCall(s) | FuncName::KnownSymbol(s) => s.clone(),
        }
    }
}

/// Whether the external name `name` used inside `func` names `func` itself.
pub(crate) fn names_itself(func: &Function, name: &ExternalName) -> bool {
    match (name, &func.name) {
        (ExternalName::User(r), UserFuncName::User(own)) => {
            func.params.user_named_funcs().get(*r) == Some(own)
        }
        (ExternalName::TestCase(t), UserFuncName::Testcase(own)) => t == own,
        _ => false,
    }
}

impl fmt::Display for FuncName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FuncName::User { namespace, index } => write!(f, "u{namespace}:{index}"),
            FuncName::TestCase(s) => write!(f, "%{s}"),
            FuncName::LibCall(s) | FuncName::KnownSymbol(s) => write!(f, "%{s}"),
        }
    }
}

/// `name` as the name a function is defined under.
pub fn user_func_name(name: &FuncName) -> UserFuncName {
    match name {
        FuncName::User { namespace, index } => UserFuncName::user(*namespace, *index),
        FuncName::TestCase(s) | FuncName::LibCall(s) | FuncName::KnownSymbol(s) => {
            UserFuncName::testcase(s)
        }
    }
}

/// `name` as an external name usable inside `func`.
pub fn external_name(func: &mut ir::Function, name: &FuncName) -> ir::ExternalName {
    match name {
        FuncName::User { namespace, index } => ir::ExternalName::user(
            func.params
                .ensure_user_func_name(UserExternalName::new(*namespace, *index)),
        ),
        FuncName::TestCase(s) | FuncName::LibCall(s) | FuncName::KnownSymbol(s) => {
            ir::ExternalName::testcase(s)
        }
    }
}

/// `base`, or `base_1`, `base_2`, ... : the first that is not in `in_use`, which it joins.
pub(crate) fn fresh_symbol(base: String, in_use: &mut std::collections::HashSet<String>) -> String {
    let mut symbol = base.clone();
    let mut n = 1;
    while in_use.contains(&symbol) {
        symbol = format!("{base}_{n}");
        n += 1;
    }
    in_use.insert(symbol.clone());
    symbol
}
