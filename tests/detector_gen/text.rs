//! Verifying, and rewriting functions through their CLIF text.

use std::collections::{BTreeSet, HashMap};

use cranelift_codegen::ir::Function;
use cranelift_codegen::settings;

use super::Rng;

// ---------------------------------------------------------------------------------------
// Checking, printing, renumbering through text.

pub fn flags() -> settings::Flags {
    settings::Flags::new(settings::builder())
}

/// Panics with the verifier's words when `func` is not valid CLIF.
pub fn verify(func: &Function) {
    if let Err(e) = cranelift_codegen::verify_function(func, &flags()) {
        panic!(
            "generated function fails verification:\n{e}\n{}",
            func.display()
        );
    }
}

pub fn is_valid(func: &Function) -> bool {
    cranelift_codegen::verify_function(func, &flags()).is_ok()
}

/// Print `func` (as `--emit-clif` does: Cranelift's printer leaves out the memory flags of
/// atomic read-modify-writes), rename every `vN` and `blockN` by a random permutation, and
/// parse it back with clif-merge's reader.
pub fn renumber_via_text(func: &Function, seed: u64) -> Function {
    let text = clif_merge::emit::clif_text::function_text(func);
    let renamed = rename_tokens(&text, seed);
    let mut parsed = clif_merge::read::parse_clif(&renamed, "renumbered.clif")
        .unwrap_or_else(|e| panic!("renamed text does not parse: {e}\n{renamed}"));
    assert_eq!(parsed.len(), 1);
    *parsed.remove(0).func
}

/// Print `func`, make some instruction results go through value aliases (`v900 -> v5`,
/// with every use of `v5` written as `v900`), and parse it back.
pub fn alias_via_text(func: &Function, seed: u64) -> Function {
    let text = clif_merge::emit::clif_text::function_text(func);
    let mut rng = Rng::new(seed);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Results defined by instructions: `    vN = ...` (single result).
    let defs: Vec<(usize, String)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let t = l.trim_start();
            let (lhs, _) = t.split_once(" = ")?;
            (l.starts_with("    ")
                && lhs.starts_with('v')
                && lhs[1..].chars().all(|c| c.is_ascii_digit()))
            .then(|| (i, lhs.to_string()))
        })
        .collect();
    let mut chosen: Vec<(usize, String, String)> = Vec::new();
    let base = 100_000 + rng.below(1000);
    for (k, (i, name)) in defs.iter().enumerate() {
        if rng.chance(30) {
            chosen.push((*i, name.clone(), format!("v{}", base + k)));
        }
    }
    for (def_line, old, new) in &chosen {
        for (i, l) in lines.iter_mut().enumerate() {
            if i == *def_line {
                // Keep the definition, rename its uses on the right-hand side.
                if let Some((lhs, rhs)) = l.split_once(" = ") {
                    *l = format!("{lhs} = {}", replace_word(rhs, old, new));
                }
            } else {
                *l = replace_word(l, old, new);
            }
        }
    }
    // Insert the alias definitions after their originals, last line first.
    chosen.sort_by_key(|c| std::cmp::Reverse(c.0));
    for (def_line, old, new) in &chosen {
        lines.insert(def_line + 1, format!("    {new} -> {old}"));
    }
    let text = lines.join("\n");
    let mut parsed = clif_merge::read::parse_clif(&text, "aliased.clif")
        .unwrap_or_else(|e| panic!("aliased text does not parse: {e}\n{text}"));
    *parsed.remove(0).func
}

/// Print `func`, rename the function to `new_name` (`%name` or `u0:N`) everywhere,
/// including its calls to itself, and parse it back.
pub fn rename_function_via_text(func: &Function, new_name: &str) -> Function {
    let text = clif_merge::emit::clif_text::function_text(func);
    let old = func.name.to_string();
    let renamed: Vec<String> = text
        .lines()
        .map(|l| replace_word(l, &old, new_name))
        .collect();
    let text = renamed.join("\n");
    let mut parsed = clif_merge::read::parse_clif(&text, "renamed.clif")
        .unwrap_or_else(|e| panic!("renamed text does not parse: {e}\n{text}"));
    *parsed.remove(0).func
}

/// Replace the whole word `old` (not a prefix of a longer word) by `new`.
fn replace_word(s: &str, old: &str, new: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let bytes = s.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'%' || c == b'.';
    let mut i = 0;
    while i < s.len() {
        if s[i..].starts_with(old)
            && (i == 0 || !is_ident(bytes[i - 1]))
            && (i + old.len() == s.len() || !is_ident(bytes[i + old.len()]))
        {
            out.push_str(new);
            i += old.len();
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Rename `v<N>` and `block<N>` tokens in CLIF text by a random injective map into a
/// range twice as large as needed. Tokens are whole words: a prefix followed by digits,
/// with no identifier character on either side.
pub fn rename_tokens(text: &str, seed: u64) -> String {
    enum Piece<'t> {
        Text(&'t str),
        Token(&'static str, u64),
    }
    let bytes = text.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'%' || c == b'.';
    let mut pieces: Vec<Piece> = Vec::new();
    let (mut i, mut plain) = (0, 0);
    while i < bytes.len() {
        let boundary = i == 0 || !is_ident(bytes[i - 1]);
        let mut matched = None;
        if boundary {
            for prefix in ["block", "v"] {
                if text[i..].starts_with(prefix) {
                    let start = i + prefix.len();
                    let mut end = start;
                    while end < bytes.len() && bytes[end].is_ascii_digit() {
                        end += 1;
                    }
                    if end > start && (end == bytes.len() || !is_ident(bytes[end])) {
                        matched = Some((prefix, text[start..end].parse::<u64>().unwrap(), end));
                        break;
                    }
                }
            }
        }
        match matched {
            Some((prefix, n, end)) => {
                pieces.push(Piece::Text(&text[plain..i]));
                pieces.push(Piece::Token(prefix, n));
                i = end;
                plain = end;
            }
            None => i += 1,
        }
    }
    pieces.push(Piece::Text(&text[plain..]));
    let mut rng = Rng::new(seed);
    let mut maps: HashMap<(&'static str, u64), u64> = HashMap::new();
    for prefix in ["block", "v"] {
        let distinct: BTreeSet<u64> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Token(q, n) if *q == prefix => Some(*n),
                _ => None,
            })
            .collect();
        let mut fresh: Vec<u64> = (0..2 * distinct.len() as u64 + 4).collect();
        rng.shuffle(&mut fresh);
        for (n, new) in distinct.into_iter().zip(fresh) {
            maps.insert((prefix, n), new);
        }
    }
    let mut out = String::with_capacity(text.len() + 64);
    for p in pieces {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Token(prefix, n) => {
                out.push_str(prefix);
                out.push_str(&maps[&(prefix, n)].to_string());
            }
        }
    }
    out
}
