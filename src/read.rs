//! Reading CLIF: files and directories in, functions with their source places out.
//!
//! Every error names its place: the file and line for a parse error, the function and the
//! verifier's words for a function that fails `verify_function`, both places for a name
//! defined twice. Preamble lines (`test`, `target`, `set`) are blanked out before parsing,
//! so that a `target` line in a file never overrides the target the user chose and line
//! numbers stay true.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cranelift_codegen::ir::Function;
use cranelift_codegen::settings::FlagsOrIsa;
use cranelift_codegen::verify_function;
use cranelift_reader::{ParseResult, TestFile};

use crate::names::FuncName;

/// A function read from CLIF text, with where it came from.
pub struct ParsedFunction {
    /// The function.
    pub func: Function,
    /// The file it was read from.
    pub file: PathBuf,
    /// The line of its `function` keyword.
    pub line: usize,
}

impl ParsedFunction {
    /// `file:line`, for messages.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
}

/// Why input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not UTF-8 text.
    #[error("{path}: not a text file (invalid UTF-8 at byte {offset})")]
    NotText {
        /// The file.
        path: PathBuf,
        /// Where the first invalid byte is.
        offset: usize,
    },
    /// The CLIF parser rejected a file.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A function failed Cranelift's verifier.
    #[error("{place}: function {name} fails verification:\n{message}")]
    Verify {
        /// `file:line` of the function.
        place: String,
        /// The function's name.
        name: String,
        /// The verifier's words.
        message: String,
    },
    /// Two functions have the same name.
    #[error("function {name} is defined twice: at {first} and at {second}")]
    Duplicate {
        /// The name.
        name: String,
        /// The first definition.
        first: String,
        /// The second definition.
        second: String,
    },
    /// A directory holds no `.clif` file.
    #[error("{path}: no .clif files in this directory")]
    NoClifFiles {
        /// The directory.
        path: PathBuf,
    },
    /// The input holds no function at all.
    #[error("no functions in the input ({0})")]
    Empty(String),
}

/// Parse the CLIF `text` of `path` into functions.
pub fn parse_clif(text: &str, path: impl AsRef<Path>) -> Result<Vec<ParsedFunction>, ReadError> {
    let path = path.as_ref();
    let cleaned = blank_preamble(text);
    fn parse(text: &str) -> Result<ParseResult<TestFile<'_>>, String> {
        crate::guard::unpanicked(|| {
            cranelift_reader::parse_test(
                text,
                cranelift_reader::ParseOptions {
                    default_calling_convention: cranelift_codegen::isa::CallConv::Fast,
                    ..Default::default()
                },
            )
        })
    }
    let file = match parse(&cleaned) {
        Ok(Ok(file)) => file,
        Ok(Err(e)) => {
            return Err(ReadError::Parse {
                path: path.to_path_buf(),
                line: e.location.line_number,
                message: e.message,
            })
        }
        // The parser panics on some malformed input (an `assert!`): the line is the first
        // one whose prefix of the text makes it panic.
        Err(message) => {
            let ends: Vec<usize> = cleaned.match_indices('\n').map(|(i, _)| i + 1).collect();
            let panics = |lines: usize| {
                let end = ends.get(lines - 1).copied().unwrap_or(cleaned.len());
                parse(&cleaned[..end]).is_err()
            };
            let (mut lo, mut hi) = (1, ends.len() + 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if panics(mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            return Err(ReadError::Parse {
                path: path.to_path_buf(),
                line: lo,
                message: format!("the CLIF parser failed: {message}"),
            });
        }
    };
    Ok(file
        .functions
        .into_iter()
        .map(|(func, details)| ParsedFunction {
            func,
            file: path.to_path_buf(),
            line: details.location.line_number,
        })
        .collect())
}

/// Blank out `test`, `target` and `set` lines that stand before the first function.
fn blank_preamble(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_preamble = true;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if in_preamble && trimmed.starts_with("function") {
            in_preamble = false;
        }
        let is_directive = ["test ", "target ", "set "]
            .iter()
            .any(|d| trimmed.starts_with(d));
        if in_preamble && is_directive {
            out.extend(line.chars().filter(|&c| c == '\n'));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// Expand the inputs: files as given, directories searched recursively for `*.clif` in
/// sorted path order.
pub fn expand_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, ReadError> {
    let mut files = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input).map_err(|source| ReadError::Io {
            path: input.clone(),
            source,
        })?;
        if meta.is_dir() {
            let before = files.len();
            collect_clif(input, &mut files)?;
            if files.len() == before {
                return Err(ReadError::NoClifFiles {
                    path: input.clone(),
                });
            }
            files[before..].sort();
        } else {
            files.push(input.clone());
        }
    }
    Ok(files)
}

fn collect_clif(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReadError> {
    let io = |source| ReadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_dir() {
            collect_clif(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "clif") {
            out.push(path);
        }
    }
    Ok(())
}

/// Read one file of CLIF.
pub fn read_file(path: &Path) -> Result<Vec<ParsedFunction>, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| ReadError::NotText {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    if text.contains('\0') {
        return Err(ReadError::NotText {
            path: path.to_path_buf(),
            offset: text.find('\0').unwrap_or(0),
        });
    }
    parse_clif(&text, path)
}

/// Read and parse `files` in parallel (rayon), calling `on_file` after each. The functions
/// come in file order, and the error is that of the first failing file in that order: the
/// same result as reading them one by one.
pub fn read_files(
    files: &[PathBuf],
    on_file: impl Fn() + Sync,
) -> Result<Vec<ParsedFunction>, ReadError> {
    use rayon::prelude::*;
    let per_file: Vec<Result<Vec<ParsedFunction>, ReadError>> = files
        .par_iter()
        .map(|file| {
            let functions = read_file(file);
            on_file();
            functions
        })
        .collect();
    let mut functions = Vec::new();
    for file in per_file {
        functions.extend(file?);
    }
    Ok(functions)
}

/// Read every input, in order, and check that no name is defined twice.
pub fn read_inputs(inputs: &[PathBuf]) -> Result<Vec<ParsedFunction>, ReadError> {
    let files = expand_inputs(inputs)?;
    let functions = read_files(&files, || {})?;
    if functions.is_empty() {
        let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
        return Err(ReadError::Empty(names.join(", ")));
    }
    check_unique_names(&functions)?;
    Ok(functions)
}

/// Fail when two functions share a name.
pub fn check_unique_names(functions: &[ParsedFunction]) -> Result<(), ReadError> {
    let mut seen: HashMap<FuncName, usize> = HashMap::with_capacity(functions.len());
    for (i, f) in functions.iter().enumerate() {
        if let Some(&first) = seen.get(&FuncName::of_function(&f.func)) {
            return Err(ReadError::Duplicate {
                name: FuncName::of_function(&f.func).to_string(),
                first: functions[first].place(),
                second: f.place(),
            });
        }
        seen.insert(FuncName::of_function(&f.func), i);
    }
    Ok(())
}

/// Run Cranelift's verifier on every function, in parallel; the error is that of the
/// first failing function in order.
pub fn verify_all<'a>(
    functions: &[ParsedFunction],
    fisa: impl Into<FlagsOrIsa<'a>> + Copy + Sync,
) -> Result<(), ReadError> {
    use rayon::prelude::*;
    let failure = |f: &ParsedFunction| -> Option<ReadError> {
        let message = unchecked_by_cranelift(&f.func).or_else(|| {
            crate::guard::unpanicked(|| verify_function(&f.func, fisa).map_err(|e| e.to_string()))
                .unwrap_or_else(|message| Err(format!("- the verifier failed: {message}")))
                .err()
        })?;
        Some(ReadError::Verify {
            place: f.place(),
            name: FuncName::of_function(&f.func).to_string(),
            message,
        })
    };
    match functions.par_iter().find_map_first(failure) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// What Cranelift assumes instead of checking, as a verifier error: the parser accepts
/// references to undefined global values and dynamic types in declarations, which the
/// verifier, the comparator or code generation then index with (and panic); the verifier
/// panics on a `vmctx` global value when the entry block is missing or has fewer
/// parameters than the signature; code generation panics on a function without blocks.
fn unchecked_by_cranelift(func: &Function) -> Option<String> {
    use cranelift_codegen::ir::GlobalValueData;
    let gv_ok = |gv| func.global_values.is_valid(gv);
    if let Some(gv) = func.stack_limit.filter(|&gv| !gv_ok(gv)) {
        return Some(format!("- stack_limit: undefined global value {gv}"));
    }
    for (gv, data) in func.global_values.iter() {
        if let GlobalValueData::Load { base, .. } | GlobalValueData::IAddImm { base, .. } = data {
            if !gv_ok(*base) {
                return Some(format!("- {gv}: undefined global value {base}"));
            }
        }
    }
    for (dt, data) in func.dfg.dynamic_types.iter() {
        if !gv_ok(data.dynamic_scale) {
            return Some(format!(
                "- {dt}: undefined global value {}",
                data.dynamic_scale
            ));
        }
    }
    for (dss, data) in func.dynamic_stack_slots.iter() {
        if !func.dfg.dynamic_types.is_valid(data.dyn_ty) {
            return Some(format!("- {dss}: undefined dynamic type {}", data.dyn_ty));
        }
    }
    let Some(entry) = func.layout.entry_block() else {
        return Some("- the function has no blocks".to_string());
    };
    let (have, want) = (
        func.dfg.num_block_params(entry),
        func.signature.params.len(),
    );
    (have != want).then(|| {
        format!("- {entry}: entry block parameters ({have}) must match function signature ({want})")
    })
}
