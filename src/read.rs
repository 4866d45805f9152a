//! Reading CLIF: files and directories in, functions with their source places out.
//!
//! Every error names its place: the file and line for a parse error, the function and the
//! verifier's words for a function that fails `verify_function`, both places for a name
//! defined twice. Preamble lines (`test`, `target`, `set`) are blanked out before parsing,
//! so that a `target` line in a file never overrides the target the user chose and line
//! numbers stay true.
//!
//! A file is parsed by [`fast`] when it takes it (what compilers write: every file of the
//! corpora), which builds the functions cranelift-reader would, entity for entity, in a
//! fraction of the time; anything else, every malformed file included, is parsed by
//! cranelift-reader, so errors are always its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cranelift_codegen::ir::Function;
use cranelift_codegen::settings::FlagsOrIsa;
use cranelift_codegen::verify_function;
use cranelift_reader::{ParseResult, TestFile};

use crate::names::FuncName;

pub mod fast;

/// A function read from CLIF text, with where it came from.
pub struct ParsedFunction {
    /// The function (boxed: functions are large, and move into the module as pointers).
    pub func: Box<Function>,
    /// The file it was read from.
    pub file: PathBuf,
    /// The line of its `function` keyword.
    pub line: usize,
    /// Whether the line before it is [`SIMILAR_THUNK_MARK`]: merge-similar's thunk, as
    /// `--emit-clif` writes it.
    pub similar_thunk: bool,
}

/// The comment `--emit-clif` writes on the line before each of merge-similar's thunks
/// ([`crate::merge::ModuleFunction::similar_thunk`]), and that reading marks the function
/// by: clif-merge writes such a thunk as register loads and a jump where the target allows,
/// so that the body it jumps to sees the frame of the thunk's caller. A function without
/// the mark is compiled as written, its call a call, whatever its shape.
pub const SIMILAR_THUNK_MARK: &str = "; clif-merge: merge-similar's thunk, a jump";

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
    let mut cleaned = text.as_bytes().to_vec();
    blank_preamble(&mut cleaned);
    parse_cleaned(as_text(&cleaned, path)?, path)
}

/// Parse text whose preamble is already blanked: with the fast reader when it takes the
/// file, else with cranelift-reader (which then gives every error).
fn parse_cleaned(cleaned: &str, path: &Path) -> Result<Vec<ParsedFunction>, ReadError> {
    let marked = marked_lines(cleaned);
    let parsed = |func: Box<Function>, line: usize| ParsedFunction {
        func,
        file: path.to_path_buf(),
        line,
        similar_thunk: marked.binary_search(&line).is_ok(),
    };
    if let Some(functions) = fast::read(cleaned) {
        return Ok(functions
            .into_iter()
            .map(|(func, line)| parsed(func, line))
            .collect());
    }
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
    let file = match parse(cleaned) {
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
        .map(|(func, details)| parsed(Box::new(func), details.location.line_number))
        .collect())
}

/// The (1-based) lines that follow a [`SIMILAR_THUNK_MARK`] line, in ascending order:
/// where a marked function's `function` keyword is.
fn marked_lines(text: &str) -> Vec<usize> {
    if !text.contains(SIMILAR_THUNK_MARK) {
        return Vec::new();
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.trim() == SIMILAR_THUNK_MARK)
        .map(|(i, _)| i + 2)
        .collect()
}

/// Blank out `test`, `target` and `set` lines that stand before the first function, in
/// place: their bytes become spaces, so line numbers stay true and the text stays UTF-8.
fn blank_preamble(text: &mut [u8]) {
    for line in preamble_directives(text) {
        text[line].fill(b' ');
    }
}

/// Where the `test`, `target` and `set` lines before the first function are (without
/// their line ends).
fn preamble_directives(text: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut lines = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let end = text[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(text.len(), |i| start + i);
        let line = &text[start..end];
        let indent = line.iter().take_while(|b| b.is_ascii_whitespace()).count();
        let trimmed = &line[indent..];
        if trimmed.starts_with(b"function") {
            break;
        }
        if [&b"test "[..], b"target ", b"set "]
            .iter()
            .any(|d| trimmed.starts_with(d))
        {
            lines.push(start..end);
        }
        start = end + 1;
    }
    lines
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
            // In `Path` order, compared once per path rather than parsed into components
            // at every comparison (re2's 6,450 files: 39 M instructions fewer). Below one
            // directory the paths differ only in plain components, which compare as
            // their bytes in both orders.
            files[before..].sort_by_cached_key(|path| {
                path.components()
                    .map(|c| c.as_os_str().to_os_string())
                    .collect::<Vec<_>>()
            });
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
        let entry = entry.map_err(io)?;
        let path = entry.path();
        // The directory entry knows its type without a `stat`; a symbolic link is followed.
        let file_type = entry.file_type().map_err(io)?;
        let is_dir = file_type.is_dir() || (file_type.is_symlink() && path.is_dir());
        if is_dir {
            collect_clif(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "clif") {
            out.push(path);
        }
    }
    Ok(())
}

/// Read one file of CLIF.
pub fn read_file(path: &Path) -> Result<Vec<ParsedFunction>, ReadError> {
    read_file_with(path, &mut Vec::new())
}

/// Read one file of CLIF into `buffer` (cleared first; reused across files so that reading
/// thousands of small files does not allocate and fault in fresh memory for each).
fn read_file_with(path: &Path, buffer: &mut Vec<u8>) -> Result<Vec<ParsedFunction>, ReadError> {
    use std::io::Read;
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    buffer.clear();
    let file = std::fs::File::open(path).map_err(io)?;
    // `take` hides the file's size hint, which `File::read_to_end` would `stat` for: the
    // buffer is already large enough for most files.
    file.take(u64::MAX).read_to_end(buffer).map_err(io)?;
    let text = as_text(buffer, path)?;
    let directives = preamble_directives(text.as_bytes());
    if directives.is_empty() {
        // What compilers write: nothing to blank, and the text is checked once.
        return parse_cleaned(text, path);
    }
    for line in directives {
        buffer[line].fill(b' ');
    }
    parse_cleaned(as_text(buffer, path)?, path)
}

/// `bytes` as CLIF text: UTF-8 without NUL bytes.
fn as_text<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str, ReadError> {
    let not_text = |offset| ReadError::NotText {
        path: path.to_path_buf(),
        offset,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| not_text(e.valid_up_to()))?;
    match text.find('\0') {
        Some(offset) => Err(not_text(offset)),
        None => Ok(text),
    }
}

/// What [`read_files`] read: the functions in file order, and the first of them, in that
/// order, that fails Cranelift's verifier (when asked to verify).
pub struct ReadFunctions {
    /// Every function, in file order.
    pub functions: Vec<ParsedFunction>,
    /// The first function that fails verification, if any. It is reported after the
    /// errors that come before it when files are read one by one: unreadable files, an
    /// empty input, names defined twice.
    pub verify_failure: Option<ReadError>,
}

/// Read and parse `files` in parallel (rayon), calling `on_file` after each, and verify
/// their functions with `verify_with` if given: each file's functions as soon as it is
/// parsed, while they are in the cache. The functions come in file order, and the error is
/// that of the first failing file in that order: the same result as reading them one by one.
pub fn read_files(
    files: &[PathBuf],
    verify_with: Option<FlagsOrIsa<'_>>,
    on_file: impl Fn() + Sync,
) -> Result<ReadFunctions, ReadError> {
    use rayon::prelude::*;
    let per_file: Vec<Result<ReadFunctions, ReadError>> = files
        .par_iter()
        .map_init(Vec::new, |buffer, file| {
            let functions = read_file_with(file, buffer).map(|functions| ReadFunctions {
                verify_failure: verify_with
                    .and_then(|fisa| functions.iter().find_map(|f| verify_failure(f, fisa))),
                functions,
            });
            on_file();
            functions
        })
        .collect();
    let mut read = ReadFunctions {
        functions: Vec::new(),
        verify_failure: None,
    };
    for file in per_file {
        let file = file?;
        read.functions.extend(file.functions);
        read.verify_failure = read.verify_failure.or(file.verify_failure);
    }
    Ok(read)
}

/// Read every input, in order, and check that no name is defined twice (without verifying).
pub fn read_inputs(inputs: &[PathBuf]) -> Result<Vec<ParsedFunction>, ReadError> {
    let files = expand_inputs(inputs)?;
    let functions = read_files(&files, None, || {})?;
    if functions.functions.is_empty() {
        let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
        return Err(ReadError::Empty(names.join(", ")));
    }
    check_unique_names(&functions.functions)?;
    Ok(functions.functions)
}

/// Fail when two functions share a name.
// Never inlined: a stage boundary that `bench/ratios_instructions.sh` counts at.
#[inline(never)]
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
    match functions
        .par_iter()
        .find_map_first(|f| verify_failure(f, fisa))
    {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Why `f` fails Cranelift's verifier (or what Cranelift would assume of it unchecked).
fn verify_failure<'a>(
    f: &ParsedFunction,
    fisa: impl Into<FlagsOrIsa<'a>> + Copy,
) -> Option<ReadError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory's files come in `Path` order (component by component), which is not
    /// the order of the paths as strings: `a/b.clif` before `a-b.clif`.
    #[test]
    fn a_directory_is_read_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "a-b.clif",
            "a/b.clif",
            "a/z/y.clif",
            "a.b/c.clif",
            "ab.clif",
            "a b.clif",
            "A.clif",
            "a0.clif",
            "a.clif",
            "b/a.clif",
        ];
        for name in names {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
        let files = expand_inputs(&[dir.path().to_path_buf()]).unwrap();
        let mut expected: Vec<PathBuf> = names.iter().map(|n| dir.path().join(n)).collect();
        expected.sort();
        assert_eq!(files, expected);
        let position = |name: &str| files.iter().position(|f| *f == dir.path().join(name));
        assert!(position("a/b.clif") < position("a-b.clif"));
    }

    /// A function is merge-similar's thunk when the line right before its `function` line
    /// is the mark, with the fast reader and with cranelift-reader (which a debug tag
    /// sends the text to); a mark with a blank line after it marks nothing.
    #[test]
    fn the_similar_thunk_mark_is_read_by_both_readers() {
        let body = |last: &str| {
            format!(
                "function %first(i64) -> i64 system_v {{
block0(v0: i64):
    return v0
}}

; another comment
function %second(i64) -> i64 system_v {{
block0(v0: i64):
    return v0
}}

function %third(i64) -> i64 system_v {{
block0(v0: i64):
{last}
}}
"
            )
        };
        let plain = body("    return v0");
        let tagged = body("    <7> sequence_point\n    return v0");
        let cases = [
            (format!("{SIMILAR_THUNK_MARK}\n{plain}"), true, true),
            (format!("{SIMILAR_THUNK_MARK}\n{tagged}"), false, true),
            (format!("{SIMILAR_THUNK_MARK}\n\n{plain}"), true, false),
        ];
        for (text, fast_reads, first_marked) in cases {
            assert_eq!(fast::read(&text).is_some(), fast_reads, "{text}");
            let marks: Vec<bool> = parse_clif(&text, "t.clif")
                .unwrap()
                .iter()
                .map(|p| p.similar_thunk)
                .collect();
            assert_eq!(marks, [first_marked, false, false], "{text}");
        }
    }
}
