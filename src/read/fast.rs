//! A fast reader for the CLIF that compilers write, exact or silent.
//!
//! cranelift-reader is built for Cranelift's filetests: it keeps every entity's source
//! location in a SipHash map, gathers comments, and lexes one `char` at a time. On a
//! corpus of thousands of small files written by wasmtime that is most of the time
//! clif-merge spends reading. This module reads the same text in one pass over its bytes
//! and builds the same [`Function`]s, or declines.
//!
//! **Exact.** Whatever it accepts, it builds exactly as `cranelift_reader::parse_test`
//! (default calling convention `fast`, no test commands) would: the same
//! `DataFlowGraph`, `Layout` and pools, entity for entity, because it makes the same calls
//! into `cranelift-codegen` in the same order. Values are numbered as written, with the
//! parser's invalid placeholders for the gaps (`make_invalid_value_for_parser`), results
//! made by `make_inst_results_for_parser`, aliases by
//! `make_value_alias_for_serialization` and typed at the end; blocks are made up to the
//! number written and appended to the layout as their headers come; stack slots, global
//! values, signatures and external functions fill the gaps as the parser does; memory
//! flags are interned in the order they are read, value lists and block calls allocated in
//! the parser's order (a `try_call`'s exception table before its arguments). Numbers,
//! types, opcodes, condition codes, trap codes, calling conventions and memory flags are
//! decoded by the very `FromStr` implementations the parser uses.
//!
//! **Or silent.** It returns `None` ("declined") for the whole file as soon as it meets
//! anything it does not handle, or anything the parser would reject, so that the caller
//! reads that file with cranelift-reader: every error message stays the parser's, line
//! numbers included, and no text is ever read two ways. A panic inside Cranelift's own
//! helpers (which assert instead of failing) is contained and declines too. It declines:
//!
//! - anything before the first `function` but blanks and comments (`test`, `target`,
//!   `set`, `feature` lines);
//! - dynamic types, debug tags (`<...>`), stack maps, constants (`const0`),
//!   dynamic stack slots, memory types, `userextname` references, `sarg` parameters,
//!   stack-slot `key`s, `dyn_scale_target_const` global values, and every instruction
//!   format not listed in `Reader::operands` (SIMD shuffles and lanes, atomics,
//!   `const`s, ...);
//! - a sign not followed by a digit, `NaN`, `Inf` or `sNaN`; bare `+`, `-`, `*`, `!`,
//!   `@`, `<`, `>`, `#...`; characters the lexer rejects;
//! - entity numbers above [`MAX_ENTITY`] (the parser would allocate every entity up to
//!   them), and blocks numbered 100,000 or more;
//! - every error the parser reports: duplicate or undefined entities, wrong result counts,
//!   types that cannot be inferred, alias cycles, malformed numbers, unexpected tokens.

use cranelift_codegen::entity::{EntityRef, PrimaryMap};
use cranelift_codegen::ir::immediates::{Ieee16, Ieee32, Ieee64, Imm64, Offset32};
use cranelift_codegen::ir::instructions::{InstructionData, InstructionFormat, VariableArgs};
use cranelift_codegen::ir::types::{self, Type};
use cranelift_codegen::ir::{
    self, AbiParam, ArgumentExtension, ArgumentPurpose, Block, BlockArg, ExtFuncData, ExternalName,
    FuncRef, Function, GlobalValue, GlobalValueData, JumpTableData, MemFlagsData, Opcode, SigRef,
    Signature, StackSlot, StackSlotData, StackSlotKind, UserExternalName, UserExternalNameRef,
    UserFuncName, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::packed_option::ReservedValue;

/// Entity numbers above this are declined: the parser makes every entity up to the number
/// written, which for a large number is a long wait rather than a reading.
pub const MAX_ENTITY: u32 = 1 << 20;

/// The parser's limit on block numbers (`MAX_BLOCKS_IN_A_FUNCTION`).
const MAX_BLOCKS: u32 = 100_000;

/// Read every function of `text` (whose preamble is already blanked), each with the line
/// of its `function` keyword, exactly as cranelift-reader would; `None` when declined.
pub fn read(text: &str) -> Option<Vec<(Box<Function>, usize)>> {
    crate::guard::unpanicked(|| Reader::new(text)?.file())
        .ok()
        .flatten()
}

/// A token: cranelift-reader's `Token`, less what this reader declines.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Tok<'a> {
    LPar,
    RPar,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Dot,
    Colon,
    Equal,
    Arrow,
    Int(&'a str),
    Float(&'a str),
    Type(Type),
    Value(Value),
    Block(Block),
    StackSlot(u32),
    GlobalValue(u32),
    FuncRef(u32),
    SigRef(u32),
    UserRef(u32),
    Region(u32),
    Tag(u32),
    Ret(u32),
    Exn(u32),
    /// `%name`, without the `%`.
    Name(&'a str),
    /// `"text"`, without the quotes.
    Str(&'a str),
    /// `@1a2b`, without the `@`.
    SrcLoc(&'a str),
    Ident(&'a str),
    Cold,
    Eof,
}

/// The lexer: cranelift-reader's token boundaries over bytes. `None` is "declined".
struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

/// Byte classes, by table: the lexer spends most of its time in runs of blanks and words.
const WORD: u8 = 1;
const SPACE: u8 = 2;
const CLASSES: [u8; 256] = {
    let mut classes = [0; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c == b'_' || c.is_ascii_alphanumeric() {
            classes[b] = WORD;
        } else if c == b' ' || (c >= 0x09 && c <= 0x0d) {
            classes[b] = SPACE;
        }
        b += 1;
    }
    classes
};

fn is_word_byte(b: u8) -> bool {
    CLASSES[b as usize] == WORD
}

impl<'a> Lexer<'a> {
    /// The next token and where it starts.
    fn next(&mut self) -> Option<(Tok<'a>, usize)> {
        let bytes = self.text.as_bytes();
        loop {
            self.skip_while(|b| CLASSES[b as usize] == SPACE);
            let start = self.pos;
            let Some(&b) = bytes.get(start) else {
                return Some((Tok::Eof, start));
            };
            let single = |tok| Some((tok, start));
            self.pos += 1;
            return match b {
                b';' => {
                    self.skip_while(|b| b != b'\n');
                    continue;
                }
                b'(' => single(Tok::LPar),
                b')' => single(Tok::RPar),
                b'{' => single(Tok::LBrace),
                b'}' => single(Tok::RBrace),
                b'[' => single(Tok::LBracket),
                b']' => single(Tok::RBracket),
                b',' => single(Tok::Comma),
                b'.' => single(Tok::Dot),
                b':' => single(Tok::Colon),
                b'=' => single(Tok::Equal),
                b'-' if bytes.get(self.pos) == Some(&b'>') => {
                    self.pos += 1;
                    single(Tok::Arrow)
                }
                b'-' | b'+' | b'0'..=b'9' => self.number(start),
                b'a'..=b'z' | b'A'..=b'Z' => self.word(start),
                b'%' => {
                    self.skip_while(is_word_byte);
                    single(Tok::Name(&self.text[start + 1..self.pos]))
                }
                b'"' => {
                    let end = start + 1 + bytes[start + 1..].iter().position(|&b| b == b'"')?;
                    self.pos = end + 1;
                    single(Tok::Str(&self.text[start + 1..end]))
                }
                b'@' if bytes.get(self.pos).is_some_and(u8::is_ascii_hexdigit) => {
                    self.skip_while(|b| b.is_ascii_hexdigit());
                    single(Tok::SrcLoc(&self.text[start + 1..self.pos]))
                }
                _ => None,
            };
        }
    }

    fn skip_while(&mut self, keep: impl Fn(u8) -> bool) {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() && keep(bytes[self.pos]) {
            self.pos += 1;
        }
    }

    /// A number (`scan_number`): an optional sign, then a digit, `NaN`, `Inf` or (after a
    /// sign) `sNaN`, then letters, digits, `_`, `-` and `.`; a float if it is a `NaN` or an
    /// `Inf` or has a `.`. A NaN with a payload (`NaN:0x1`) takes its `:` too. (The parser
    /// also reads a sign before `-`, `+` or `.`: declined.)
    fn number(&mut self, start: usize) -> Option<(Tok<'a>, usize)> {
        let bytes = self.text.as_bytes();
        let signed = matches!(bytes[start], b'-' | b'+');
        let first = if signed { start + 1 } else { start };
        let rest = &self.text[first..];
        let nan_or_inf = rest.starts_with("NaN")
            || rest.starts_with("Inf")
            || (signed && rest.starts_with("sNaN"));
        if !nan_or_inf && !rest.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.pos = first;
        if rest.starts_with("NaN:") || rest.starts_with("sNaN:") {
            self.pos += rest.find(':')?;
        }
        self.pos += 1;
        self.skip_while(|b| b == b'-' || b == b'.' || is_word_byte(b));
        let text = &self.text[start..self.pos];
        let tok = if nan_or_inf || text.bytes().any(|b| b == b'.') {
            Tok::Float(text)
        } else {
            Tok::Int(text)
        };
        Some((tok, start))
    }

    /// A word: an entity (`v12`, `block3`, `gv0`, ...), a scalar type, or an identifier.
    fn word(&mut self, start: usize) -> Option<(Tok<'a>, usize)> {
        let rest = &self.text[start..];
        if matches!(rest.as_bytes()[0], b'N' | b'I')
            && (rest.starts_with("NaN") || rest.starts_with("Inf"))
        {
            return self.number(start);
        }
        self.skip_while(is_word_byte);
        let text = &self.text[start..self.pos];
        Some((classify_word(text)?, start))
    }
}

/// What cranelift-reader's lexer makes of a word (`scan_word`): a numbered entity, a type,
/// or an identifier; `None` for what this reader declines.
fn classify_word(text: &str) -> Option<Tok<'_>> {
    let digits = text.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (head, tail) = text.split_at(text.len() - digits);
    // `split_entity_name`: no leading zero, and the number fits a u32.
    let number = if tail.len() > 1 && tail.starts_with('0') {
        None
    } else {
        tail.parse::<u32>().ok()
    };
    if let Some(n) = number {
        let small = |tok: fn(u32) -> Tok<'static>| (n <= MAX_ENTITY).then(|| tok(n));
        match head {
            "v" => return small(|n| Tok::Value(Value::from_u32(n))),
            "block" => return small(|n| Tok::Block(Block::from_u32(n))),
            "ss" => return small(Tok::StackSlot),
            "gv" => return small(Tok::GlobalValue),
            "fn" => return small(Tok::FuncRef),
            "sig" => return small(Tok::SigRef),
            "region" => return small(Tok::Region),
            "u" => return Some(Tok::UserRef(n)),
            "tag" => return Some(Tok::Tag(n)),
            "ret" => return Some(Tok::Ret(n)),
            "exn" => return Some(Tok::Exn(n)),
            "dss" | "dt" | "mt" | "const" | "userextname" | "extable" => return None,
            _ => {}
        }
        // `value_type`: a scalar, or a vector of a scalar by a lane count.
        if let Some(lane) = head.strip_suffix('x') {
            if let Some(vector) = scalar_type(lane)
                .filter(|_| n <= u32::from(u16::MAX))
                .and_then(|ty| ty.by(n))
            {
                return Some(Tok::Type(vector));
            }
        } else if let Some(ty) = scalar_type(text) {
            return Some(Tok::Type(ty));
        }
    }
    match text {
        "cold" => Some(Tok::Cold),
        _ => Some(Tok::Ident(text)),
    }
}

fn scalar_type(text: &str) -> Option<Type> {
    Some(match text {
        "i8" => types::I8,
        "i16" => types::I16,
        "i32" => types::I32,
        "i64" => types::I64,
        "i128" => types::I128,
        "f16" => types::F16,
        "f32" => types::F32,
        "f64" => types::F64,
        "f128" => types::F128,
        _ => return None,
    })
}

/// cranelift-reader's `match_imm!`: a signed immediate written signed, unsigned or in hex.
macro_rules! signed_imm {
    ($signed:ty, $unsigned:ty, $text:expr) => {{
        let text: &str = $text;
        let negative = text.starts_with('-');
        let positive = text.starts_with('+');
        let text = if negative || positive {
            &text[1..]
        } else {
            text
        };
        let value: $unsigned = if text.starts_with("0x") {
            let text = text.replace("_", "");
            <$unsigned>::from_str_radix(&text[2..], 16).ok()?
        } else {
            text.parse().ok()?
        };
        if negative {
            let value = value.wrapping_neg() as $signed;
            if value > 0 {
                return None;
            }
            value
        } else {
            value as $signed
        }
    }};
}

/// Which entities of a function are defined so far: the parser's `SourceMap`, as bits.
#[derive(Default)]
struct Defined(Vec<bool>);

impl Defined {
    /// Define entity `i`; `None` if it already is.
    fn define(&mut self, i: usize) -> Option<()> {
        if self.0.len() <= i {
            self.0.resize(i + 1, false);
        }
        (!std::mem::replace(&mut self.0[i], true)).then_some(())
    }

    fn contains(&self, i: usize) -> bool {
        self.0.get(i).copied().unwrap_or(false)
    }
}

/// One function as it is read.
struct Body {
    /// Boxed from the start: it moves into the module as a pointer.
    func: Box<Function>,
    values: Defined,
    blocks: Defined,
    stack_slots: Defined,
    global_values: Defined,
    signatures: Defined,
    functions: Defined,
    /// Aliases to type once every value is known.
    aliases: Vec<Value>,
    /// `u1:2` names in the order met, declared when the function ends.
    names: PrimaryMap<UserExternalNameRef, UserExternalName>,
}

/// The parser: cranelift-reader's grammar for the subset, one token of lookahead.
struct Reader<'a> {
    lex: Lexer<'a>,
    tok: Tok<'a>,
    /// Where `tok` starts.
    start: usize,
    /// Newlines before `counted`, for the line of each `function`.
    line: usize,
    counted: usize,
}

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Option<Self> {
        let mut lex = Lexer { text, pos: 0 };
        let (tok, start) = lex.next()?;
        Some(Reader {
            lex,
            tok,
            start,
            line: 1,
            counted: 0,
        })
    }

    /// Move to the next token.
    fn bump(&mut self) -> Option<()> {
        (self.tok, self.start) = self.lex.next()?;
        Some(())
    }

    /// Consume `want`, or decline.
    fn expect(&mut self, want: Tok<'_>) -> Option<()> {
        if self.tok == want {
            self.bump()
        } else {
            None
        }
    }

    /// Consume `want` if it is next.
    fn optional(&mut self, want: Tok<'_>) -> Option<bool> {
        if self.tok == want {
            self.bump()?;
            Some(true)
        } else {
            Some(false)
        }
    }

    /// Consume the token and return it.
    fn take(&mut self) -> Option<Tok<'a>> {
        let tok = self.tok;
        self.bump()?;
        Some(tok)
    }

    fn value(&mut self) -> Option<Value> {
        match self.take()? {
            Tok::Value(v) => Some(v),
            _ => None,
        }
    }

    fn block(&mut self) -> Option<Block> {
        match self.take()? {
            Tok::Block(b) => Some(b),
            _ => None,
        }
    }

    fn ty(&mut self) -> Option<Type> {
        match self.take()? {
            Tok::Type(t) => Some(t),
            _ => None,
        }
    }

    fn int(&mut self) -> Option<&'a str> {
        match self.take()? {
            Tok::Int(text) => Some(text),
            _ => None,
        }
    }

    fn float(&mut self) -> Option<&'a str> {
        match self.take()? {
            Tok::Float(text) => Some(text),
            _ => None,
        }
    }

    fn ident(&mut self) -> Option<&'a str> {
        match self.take()? {
            Tok::Ident(text) => Some(text),
            _ => None,
        }
    }

    /// An identifier decoded by its `FromStr` (`match_enum`).
    fn parsed<T: std::str::FromStr>(&mut self) -> Option<T> {
        self.ident()?.parse().ok()
    }

    fn imm64(&mut self) -> Option<Imm64> {
        self.int()?.parse().ok()
    }

    /// `optional_offset32`: a signed integer, or nothing.
    fn offset32(&mut self) -> Option<Offset32> {
        match self.tok {
            Tok::Int(text) if text.starts_with(['+', '-']) => {
                self.bump()?;
                text.parse().ok()
            }
            _ => Some(Offset32::new(0)),
        }
    }

    /// `optional_offset_imm64`: a signed integer, or nothing.
    fn offset_imm64(&mut self) -> Option<Imm64> {
        match self.tok {
            Tok::Int(text) if text.starts_with(['+', '-']) => {
                self.bump()?;
                text.parse().ok()
            }
            _ => Some(Imm64::new(0)),
        }
    }

    /// `match_uimm8`.
    fn uimm8(&mut self) -> Option<u8> {
        let text = self.int()?;
        match text.strip_prefix("0x") {
            Some(hex) => u8::from_str_radix(hex, 16).ok(),
            None => text.parse().ok(),
        }
    }

    /// The whole file: functions and nothing else.
    fn file(mut self) -> Option<Vec<(Box<Function>, usize)>> {
        let mut functions = Vec::new();
        while self.tok != Tok::Eof {
            functions.push(self.function()?);
        }
        Some(functions)
    }

    /// The line `self.start` is on.
    fn line_of_token(&mut self) -> usize {
        let bytes = &self.lex.text.as_bytes()[self.counted..self.start];
        self.line += bytes.iter().filter(|&&b| b == b'\n').count();
        self.counted = self.start;
        self.line
    }

    /// `function name signature { preamble body }`.
    fn function(&mut self) -> Option<(Box<Function>, usize)> {
        if self.tok != Tok::Ident("function") {
            return None;
        }
        let line = self.line_of_token();
        self.bump()?;
        let name = match self.take()? {
            Tok::Name(s) => UserFuncName::testcase(s),
            Tok::UserRef(namespace) => {
                self.expect(Tok::Colon)?;
                let index = self.int()?.parse::<u32>().ok()?;
                UserFuncName::user(namespace, index)
            }
            _ => return None,
        };
        let signature = self.signature()?;
        let mut body = Body {
            func: Box::new(Function::with_name_signature(name, signature)),
            values: Defined::default(),
            blocks: Defined::default(),
            stack_slots: Defined::default(),
            global_values: Defined::default(),
            signatures: Defined::default(),
            functions: Defined::default(),
            aliases: Vec::new(),
            names: PrimaryMap::new(),
        };
        self.expect(Tok::LBrace)?;
        self.preamble(&mut body)?;
        while self.tok != Tok::RBrace {
            self.basic_block(&mut body)?;
        }
        finish_body(&mut body)?;
        self.bump()?;
        for (name_ref, name) in std::mem::take(&mut body.names) {
            if body.func.declare_imported_user_function(name) != name_ref {
                return None;
            }
        }
        Some((body.func, line))
    }

    /// `( params ) [-> returns] [callconv]`, the default convention being `fast`.
    fn signature(&mut self) -> Option<Signature> {
        let mut sig = Signature::new(CallConv::Fast);
        self.expect(Tok::LPar)?;
        if self.tok != Tok::RPar {
            sig.params = self.abi_params()?;
        }
        self.expect(Tok::RPar)?;
        if self.optional(Tok::Arrow)? {
            sig.returns = self.abi_params()?;
        }
        if let Tok::Ident(text) = self.tok {
            sig.call_conv = text.parse().ok()?;
            self.bump()?;
        }
        Some(sig)
    }

    fn abi_params(&mut self) -> Option<Vec<AbiParam>> {
        let mut list = vec![self.abi_param()?];
        while self.optional(Tok::Comma)? {
            list.push(self.abi_param()?);
        }
        Some(list)
    }

    fn abi_param(&mut self) -> Option<AbiParam> {
        let mut param = AbiParam::new(self.ty()?);
        while let Tok::Ident(s) = self.tok {
            match s {
                "uext" => param.extension = ArgumentExtension::Uext,
                "sext" => param.extension = ArgumentExtension::Sext,
                "sarg" => return None,
                _ => match s.parse::<ArgumentPurpose>() {
                    Ok(purpose) => param.purpose = purpose,
                    Err(_) => break,
                },
            }
            self.bump()?;
        }
        Some(param)
    }

    /// Declarations before the first block, in any order.
    fn preamble(&mut self, body: &mut Body) -> Option<()> {
        loop {
            match self.tok {
                Tok::StackSlot(n) => self.stack_slot(body, n)?,
                Tok::GlobalValue(n) => self.global_value(body, n)?,
                Tok::SigRef(n) => {
                    self.bump()?;
                    self.expect(Tok::Equal)?;
                    let data = self.signature()?;
                    let sig = SigRef::from_u32(n);
                    body.signatures.define(n as usize)?;
                    while body.func.dfg.signatures.next_key().index() <= sig.index() {
                        body.func.import_signature(Signature::new(CallConv::Fast));
                    }
                    body.func.dfg.signatures[sig] = data;
                }
                Tok::FuncRef(n) => self.function_decl(body, n)?,
                Tok::Ident("stack_limit") => {
                    self.bump()?;
                    self.expect(Tok::Equal)?;
                    let Tok::GlobalValue(n) = self.take()? else {
                        return None;
                    };
                    if body.func.stack_limit.is_some() {
                        return None;
                    }
                    body.func.stack_limit = Some(GlobalValue::from_u32(n));
                }
                Tok::Region(n) => {
                    self.bump()?;
                    self.expect(Tok::Equal)?;
                    let user_id = self.int()?.parse::<u32>().ok()?;
                    let Tok::Str(description) = self.take()? else {
                        return None;
                    };
                    let regions = &mut body.func.dfg.alias_regions;
                    if regions.len() != n as usize {
                        return None;
                    }
                    regions.push(ir::AliasRegionData {
                        user_id,
                        description: std::borrow::Cow::Owned(description.to_owned()),
                    });
                }
                _ => return Some(()),
            }
        }
    }

    /// `ssN = kind bytes [, align = N]`.
    fn stack_slot(&mut self, body: &mut Body, n: u32) -> Option<()> {
        self.bump()?;
        self.expect(Tok::Equal)?;
        let kind: StackSlotKind = self.parsed()?;
        let bytes: i64 = self.imm64()?.into();
        if bytes < 0 || bytes > i64::from(u32::MAX) {
            return None;
        }
        let mut align = 1;
        while self.optional(Tok::Comma)? {
            if self.ident()? != "align" {
                return None;
            }
            self.expect(Tok::Equal)?;
            align = u32::try_from(i64::from(self.imm64()?)).ok()?;
        }
        if !align.is_power_of_two() {
            return None;
        }
        let data = StackSlotData::new(kind, bytes as u32, align.ilog2() as u8);
        let ss = StackSlot::from_u32(n);
        body.stack_slots.define(n as usize)?;
        while body.func.sized_stack_slots.next_key().index() <= ss.index() {
            body.func.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                0,
                0,
            ));
        }
        body.func.sized_stack_slots[ss] = data;
        Some(())
    }

    /// `gvN = vmctx | load.T flags gvM[+off] | iadd_imm.T gvM, imm | symbol ...`.
    fn global_value(&mut self, body: &mut Body, n: u32) -> Option<()> {
        self.bump()?;
        self.expect(Tok::Equal)?;
        let data = match self.ident()? {
            "vmctx" => GlobalValueData::VMContext,
            "load" => {
                self.expect(Tok::Dot)?;
                let global_type = self.ty()?;
                let flags = self.memflags()?;
                let Tok::GlobalValue(base) = self.take()? else {
                    return None;
                };
                let offset = self.offset32()?;
                if !(flags.notrap() && flags.aligned()) {
                    return None;
                }
                GlobalValueData::Load {
                    base: GlobalValue::from_u32(base),
                    offset,
                    global_type,
                    flags: body.func.dfg.mem_flags.insert(flags).ok()?,
                }
            }
            "iadd_imm" => {
                self.expect(Tok::Dot)?;
                let global_type = self.ty()?;
                let Tok::GlobalValue(base) = self.take()? else {
                    return None;
                };
                self.expect(Tok::Comma)?;
                GlobalValueData::IAddImm {
                    base: GlobalValue::from_u32(base),
                    offset: self.imm64()?,
                    global_type,
                }
            }
            "symbol" => {
                let colocated = self.optional(Tok::Ident("colocated"))?;
                let tls = self.optional(Tok::Ident("tls"))?;
                let name = self.external_name(body)?;
                GlobalValueData::Symbol {
                    name,
                    offset: self.offset_imm64()?,
                    colocated,
                    tls,
                }
            }
            _ => return None,
        };
        let gv = GlobalValue::from_u32(n);
        body.global_values.define(n as usize)?;
        while body.func.global_values.next_key().index() <= gv.index() {
            body.func.create_global_value(GlobalValueData::Symbol {
                name: ExternalName::testcase(""),
                offset: Imm64::new(0),
                colocated: false,
                tls: false,
            });
        }
        body.func.global_values[gv] = data;
        Some(())
    }

    /// `fnN = [colocated] [patchable] name (sigM | signature)`.
    fn function_decl(&mut self, body: &mut Body, n: u32) -> Option<()> {
        self.bump()?;
        self.expect(Tok::Equal)?;
        let colocated = self.optional(Tok::Ident("colocated"))?;
        let patchable = self.optional(Tok::Ident("patchable"))?;
        let name = self.external_name(body)?;
        let signature = match self.tok {
            // A signature of its own, numbered after those made so far.
            Tok::LPar => {
                let sig = self.signature()?;
                let sig = body.func.import_signature(sig);
                body.signatures.define(sig.index())?;
                sig
            }
            Tok::SigRef(sig) => {
                if !body.signatures.contains(sig as usize) {
                    return None;
                }
                self.bump()?;
                SigRef::from_u32(sig)
            }
            _ => return None,
        };
        let data = ExtFuncData {
            name,
            signature,
            colocated,
            patchable,
        };
        let fn_ = FuncRef::from_u32(n);
        body.functions.define(n as usize)?;
        while body.func.dfg.ext_funcs.next_key().index() <= fn_.index() {
            body.func.import_function(ExtFuncData {
                name: ExternalName::testcase(""),
                signature: SigRef::reserved_value(),
                colocated: false,
                patchable: false,
            });
        }
        body.func.dfg.ext_funcs[fn_] = data;
        Some(())
    }

    /// `%name` or `uN:M`, the latter numbered in the order first met (`parse_external_name`).
    fn external_name(&mut self, body: &mut Body) -> Option<ExternalName> {
        match self.take()? {
            Tok::Name(s) => s.parse().ok(),
            Tok::UserRef(namespace) => {
                self.expect(Tok::Colon)?;
                let index = self.int()?.parse::<u32>().ok()?;
                let name_ref = body
                    .names
                    .iter()
                    .find_map(|(r, name)| {
                        (name.index == index && name.namespace == namespace).then_some(r)
                    })
                    .unwrap_or_else(|| body.names.push(UserExternalName { namespace, index }));
                Some(ExternalName::user(name_ref))
            }
            _ => None,
        }
    }

    /// Memory flags and an alias region, in any order (`optional_memflags`).
    fn memflags(&mut self) -> Option<MemFlagsData> {
        let mut flags = MemFlagsData::new();
        loop {
            match self.tok {
                Tok::Ident(text) => match flags.set_by_name(text) {
                    Ok(true) => self.bump()?,
                    Ok(false) => return Some(flags),
                    Err(_) => return None,
                },
                Tok::Region(n) => {
                    if flags.alias_region().is_some() {
                        return None;
                    }
                    flags.set_alias_region(Some(ir::AliasRegion::new(n as usize)));
                    self.bump()?;
                }
                _ => return Some(flags),
            }
        }
    }

    /// Interned memory flags for an instruction.
    fn inst_memflags(&mut self, body: &mut Body) -> Option<ir::MemFlags> {
        let flags = self.memflags()?;
        body.func.dfg.mem_flags.insert(flags).ok()
    }

    /// `blockN[(params)]:` and its instructions.
    fn basic_block(&mut self, body: &mut Body) -> Option<()> {
        let block = self.block()?;
        body.blocks.define(block.index())?;
        while body.func.dfg.num_blocks() <= block.index() {
            body.func.dfg.make_block();
        }
        body.func.layout.append_block(block);
        if block.as_u32() >= MAX_BLOCKS {
            return None;
        }
        if self.optional(Tok::LPar)? && !self.optional(Tok::RPar)? {
            loop {
                let v = self.value()?;
                self.expect(Tok::Colon)?;
                pad_values(body, v);
                let ty = self.ty()?;
                body.func.dfg.append_block_param_for_parser(block, ty, v);
                body.values.define(v.index())?;
                if !self.optional(Tok::Comma)? {
                    break;
                }
            }
            self.expect(Tok::RPar)?;
        }
        if self.optional(Tok::Cold)? {
            body.func.layout.set_cold(block);
        }
        self.expect(Tok::Colon)?;
        let mut results: Vec<Value> = Vec::new();
        while matches!(
            self.tok,
            Tok::Value(_) | Tok::Ident(_) | Tok::SrcLoc(_) | Tok::LBracket
        ) {
            let srcloc = match self.tok {
                Tok::SrcLoc(text) => {
                    self.bump()?;
                    ir::SourceLoc::new(u32::from_str_radix(text, 16).ok()?)
                }
                _ => ir::SourceLoc::default(),
            };
            results.clear();
            if let Tok::Value(v) = self.tok {
                self.bump()?;
                results.push(v);
                while self.optional(Tok::Comma)? {
                    results.push(self.value()?);
                }
            }
            for &v in &results {
                pad_values(body, v);
            }
            match self.tok {
                Tok::Arrow => {
                    self.bump()?;
                    self.alias(body, &results)?;
                }
                Tok::Equal => {
                    self.bump()?;
                    self.instruction(body, block, &results, srcloc)?;
                }
                _ if !results.is_empty() => return None,
                _ => self.instruction(body, block, &results, srcloc)?,
            }
        }
        Some(())
    }

    /// `vN -> vM` (`parse_value_alias`).
    fn alias(&mut self, body: &mut Body, results: &[Value]) -> Option<()> {
        let [result] = results else {
            return None;
        };
        let dest = self.value()?;
        if body.values.contains(result.index()) {
            // A repeated alias with the same destination is allowed.
            if body.func.dfg.value_alias_dest_for_serialization(*result) != Some(dest) {
                return None;
            }
        } else {
            body.values.define(result.index())?;
        }
        if !body.values.contains(dest.index()) {
            return None;
        }
        body.func
            .dfg
            .make_value_alias_for_serialization(dest, *result);
        body.aliases.push(*result);
        Some(())
    }

    /// `[results =] opcode[.type] operands` (`parse_instruction`).
    fn instruction(
        &mut self,
        body: &mut Body,
        block: Block,
        results: &[Value],
        srcloc: ir::SourceLoc,
    ) -> Option<()> {
        for v in results {
            body.values.define(v.index())?;
        }
        let opcode: Opcode = self.ident()?.parse().ok()?;
        let explicit = if self.optional(Tok::Dot)? {
            Some(self.ty()?)
        } else {
            None
        };
        let data = self.operands(body, opcode, explicit)?;
        let ctrl_typevar = ctrl_typevar(body, opcode, explicit, &data)?;
        let inst = body.func.dfg.make_inst(data);
        if self.tok == Tok::Comma {
            return None; // a stack map
        }
        let num_results = body
            .func
            .dfg
            .make_inst_results_for_parser(inst, ctrl_typevar, results);
        body.func.layout.append_inst(inst, block);
        if !srcloc.is_default() {
            body.func.set_srcloc(inst, srcloc);
        }
        (results.len() == num_results).then_some(())
    }

    /// The operands of `opcode`, one arm per instruction format (`parse_inst_operands`).
    fn operands(
        &mut self,
        body: &mut Body,
        opcode: Opcode,
        explicit: Option<Type>,
    ) -> Option<InstructionData> {
        use InstructionFormat as F;
        Some(match opcode.format() {
            F::NullAry => InstructionData::NullAry { opcode },
            F::Unary => InstructionData::Unary {
                opcode,
                arg: self.value()?,
            },
            F::UnaryImm => {
                let text = self.int()?;
                let imm = match explicit {
                    Some(types::I8) => signed_imm!(i8, u8, text) as u8 as i64,
                    Some(types::I16) => signed_imm!(i16, u16, text) as u16 as i64,
                    Some(types::I32) => signed_imm!(i32, u32, text) as u32 as i64,
                    Some(types::I64) => text.parse::<Imm64>().ok()?.bits(),
                    _ => return None,
                };
                InstructionData::UnaryImm {
                    opcode,
                    imm: Imm64::new(imm),
                }
            }
            F::UnaryIeee16 => InstructionData::UnaryIeee16 {
                opcode,
                imm: self.float()?.parse::<Ieee16>().ok()?,
            },
            F::UnaryIeee32 => InstructionData::UnaryIeee32 {
                opcode,
                imm: self.float()?.parse::<Ieee32>().ok()?,
            },
            F::UnaryIeee64 => InstructionData::UnaryIeee64 {
                opcode,
                imm: self.float()?.parse::<Ieee64>().ok()?,
            },
            F::UnaryGlobalValue => {
                let Tok::GlobalValue(gv) = self.take()? else {
                    return None;
                };
                if !body.global_values.contains(gv as usize) {
                    return None;
                }
                InstructionData::UnaryGlobalValue {
                    opcode,
                    global_value: GlobalValue::from_u32(gv),
                }
            }
            F::Binary => InstructionData::Binary {
                opcode,
                args: self.values_2()?,
            },
            F::BinaryImm8 => {
                let arg = self.value()?;
                self.expect(Tok::Comma)?;
                InstructionData::BinaryImm8 {
                    opcode,
                    arg,
                    imm: self.uimm8()?,
                }
            }
            F::Ternary => {
                let [a, b] = self.values_2()?;
                self.expect(Tok::Comma)?;
                InstructionData::Ternary {
                    opcode,
                    args: [a, b, self.value()?],
                }
            }
            F::MultiAry => {
                let args = self.value_list()?;
                InstructionData::MultiAry {
                    opcode,
                    args: args.into_value_list(&[], &mut body.func.dfg.value_lists),
                }
            }
            F::IntCompare => InstructionData::IntCompare {
                opcode,
                cond: self.parsed()?,
                args: self.values_2()?,
            },
            F::FloatCompare => InstructionData::FloatCompare {
                opcode,
                cond: self.parsed()?,
                args: self.values_2()?,
            },
            F::Trap => InstructionData::Trap {
                opcode,
                code: self.parsed()?,
            },
            F::CondTrap => {
                let arg = self.value()?;
                self.expect(Tok::Comma)?;
                InstructionData::CondTrap {
                    opcode,
                    arg,
                    code: self.parsed()?,
                }
            }
            F::IntAddTrap => {
                let args = self.values_2()?;
                self.expect(Tok::Comma)?;
                InstructionData::IntAddTrap {
                    opcode,
                    args,
                    code: self.parsed()?,
                }
            }
            F::Load => InstructionData::Load {
                opcode,
                flags: self.inst_memflags(body)?,
                arg: self.value()?,
                offset: self.offset32()?,
            },
            F::Store => {
                let flags = self.inst_memflags(body)?;
                InstructionData::Store {
                    opcode,
                    flags,
                    args: self.values_2()?,
                    offset: self.offset32()?,
                }
            }
            F::LoadNoOffset => InstructionData::LoadNoOffset {
                opcode,
                flags: self.inst_memflags(body)?,
                arg: self.value()?,
            },
            F::StoreNoOffset => {
                let flags = self.inst_memflags(body)?;
                InstructionData::StoreNoOffset {
                    opcode,
                    flags,
                    args: self.values_2()?,
                }
            }
            F::StackAddr => {
                let Tok::StackSlot(ss) = self.take()? else {
                    return None;
                };
                if !body.stack_slots.contains(ss as usize) {
                    return None;
                }
                InstructionData::StackAddr {
                    opcode,
                    stack_slot: StackSlot::from_u32(ss),
                    offset: self.offset32()?,
                }
            }
            F::FuncAddr => InstructionData::FuncAddr {
                opcode,
                func_ref: self.func_ref(body)?,
            },
            F::Jump => InstructionData::Jump {
                opcode,
                destination: self.block_call(body)?,
            },
            F::Brif => {
                let arg = self.value()?;
                self.expect(Tok::Comma)?;
                let then = self.block_call(body)?;
                self.expect(Tok::Comma)?;
                InstructionData::Brif {
                    opcode,
                    arg,
                    blocks: [then, self.block_call(body)?],
                }
            }
            F::BranchTable => {
                let arg = self.value()?;
                self.expect(Tok::Comma)?;
                let default = self.block_call(body)?;
                self.expect(Tok::Comma)?;
                InstructionData::BranchTable {
                    opcode,
                    arg,
                    table: self.jump_table(body, default)?,
                }
            }
            F::Call => {
                let func_ref = self.func_ref(body)?;
                let args = self.call_args()?;
                InstructionData::Call {
                    opcode,
                    func_ref,
                    args: args.into_value_list(&[], &mut body.func.dfg.value_lists),
                }
            }
            F::CallIndirect => {
                let Tok::SigRef(sig) = self.take()? else {
                    return None;
                };
                if !body.signatures.contains(sig as usize) {
                    return None;
                }
                self.expect(Tok::Comma)?;
                let callee = self.value()?;
                let args = self.call_args()?;
                InstructionData::CallIndirect {
                    opcode,
                    sig_ref: SigRef::from_u32(sig),
                    args: args.into_value_list(&[callee], &mut body.func.dfg.value_lists),
                }
            }
            F::TryCall => {
                let func_ref = self.func_ref(body)?;
                let args = self.call_args()?;
                self.expect(Tok::Comma)?;
                // The table's block calls take their value lists before the arguments.
                let exception = self.exception_table(body)?;
                InstructionData::TryCall {
                    opcode,
                    func_ref,
                    args: args.into_value_list(&[], &mut body.func.dfg.value_lists),
                    exception,
                }
            }
            F::TryCallIndirect => {
                let callee = self.value()?;
                let args = self.call_args()?;
                self.expect(Tok::Comma)?;
                let exception = self.exception_table(body)?;
                InstructionData::TryCallIndirect {
                    opcode,
                    args: args.into_value_list(&[callee], &mut body.func.dfg.value_lists),
                    exception,
                }
            }
            F::ExceptionHandlerAddress => {
                let block = self.block()?;
                self.expect(Tok::Comma)?;
                InstructionData::ExceptionHandlerAddress {
                    opcode,
                    block,
                    imm: self.imm64()?,
                }
            }
            _ => return None,
        })
    }

    /// `vA, vB`.
    fn values_2(&mut self) -> Option<[Value; 2]> {
        let a = self.value()?;
        self.expect(Tok::Comma)?;
        Some([a, self.value()?])
    }

    /// `[v {, v}]` (`parse_value_list`).
    fn value_list(&mut self) -> Option<VariableArgs> {
        let mut args = VariableArgs::new();
        if let Tok::Value(v) = self.tok {
            self.bump()?;
            args.push(v);
            while self.optional(Tok::Comma)? {
                args.push(self.value()?);
            }
        }
        Some(args)
    }

    /// `( values )`.
    fn call_args(&mut self) -> Option<VariableArgs> {
        self.expect(Tok::LPar)?;
        let args = self.value_list()?;
        self.expect(Tok::RPar)?;
        Some(args)
    }

    /// A declared `fnN`.
    fn func_ref(&mut self, body: &Body) -> Option<FuncRef> {
        let Tok::FuncRef(n) = self.take()? else {
            return None;
        };
        body.functions
            .contains(n as usize)
            .then(|| FuncRef::from_u32(n))
    }

    /// `blockN[(args)]`, made into a block call.
    fn block_call(&mut self, body: &mut Body) -> Option<ir::BlockCall> {
        let block = self.block()?;
        let args = self.block_call_args()?;
        Some(body.func.dfg.block_call(block, &args))
    }

    /// `parse_opt_block_call_args`: `(arg, ...)`, a trailing comma allowed, or nothing.
    fn block_call_args(&mut self) -> Option<Vec<BlockArg>> {
        let mut args = Vec::new();
        if !self.optional(Tok::LPar)? {
            return Some(args);
        }
        while self.tok != Tok::RPar {
            args.push(match self.take()? {
                Tok::Value(v) => BlockArg::Value(v),
                Tok::Ret(i) => BlockArg::TryCallRet(i),
                Tok::Exn(i) => BlockArg::TryCallExn(i),
                _ => return None,
            });
            if !self.optional(Tok::Comma)? {
                break;
            }
        }
        self.expect(Tok::RPar)?;
        Some(args)
    }

    /// `[block(args), ...]` after a `br_table`'s default.
    fn jump_table(&mut self, body: &mut Body, default: ir::BlockCall) -> Option<ir::JumpTable> {
        self.expect(Tok::LBracket)?;
        let mut entries = Vec::new();
        if self.tok != Tok::RBracket {
            loop {
                entries.push(self.block_call(body)?);
                match self.take()? {
                    Tok::Comma => {}
                    Tok::RBracket => break,
                    _ => return None,
                }
            }
        } else {
            self.bump()?;
        }
        let table = JumpTableData::new(default, &entries);
        Some(body.func.dfg.jump_tables.push(table))
    }

    /// `sigN, block(args), [ tagN: block(args), default: block(args), context vN, ... ]`.
    fn exception_table(&mut self, body: &mut Body) -> Option<ir::ExceptionTable> {
        // The parser does not check that the signature is declared; the verifier does.
        let Tok::SigRef(sig) = self.take()? else {
            return None;
        };
        self.expect(Tok::Comma)?;
        let normal_return = self.block_call(body)?;
        self.expect(Tok::Comma)?;
        self.expect(Tok::LBracket)?;
        let mut handlers = Vec::new();
        while self.tok != Tok::RBracket {
            handlers.push(match self.take()? {
                Tok::Tag(tag) => {
                    self.expect(Tok::Colon)?;
                    let call = self.block_call(body)?;
                    ir::ExceptionTableItem::Tag(ir::ExceptionTag::from_u32(tag), call)
                }
                Tok::Ident("default") => {
                    self.expect(Tok::Colon)?;
                    ir::ExceptionTableItem::Default(self.block_call(body)?)
                }
                Tok::Ident("context") => ir::ExceptionTableItem::Context(self.value()?),
                _ => return None,
            });
            if !self.optional(Tok::Comma)? {
                break;
            }
        }
        self.expect(Tok::RBracket)?;
        let data = ir::ExceptionTableData::new(SigRef::from_u32(sig), normal_return, handlers);
        Some(body.func.dfg.exception_tables.push(data))
    }
}

/// Make the parser's invalid placeholder values up to `v`.
fn pad_values(body: &mut Body, v: Value) {
    while body.func.dfg.num_values() <= v.index() {
        body.func.dfg.make_invalid_value_for_parser();
    }
}

/// The controlling type variable of an instruction (`infer_typevar`): the explicit type, or
/// the type of its type-variable operand, which must be defined above it.
fn ctrl_typevar(
    body: &Body,
    opcode: Opcode,
    explicit: Option<Type>,
    data: &InstructionData,
) -> Option<Type> {
    let constraints = opcode.constraints();
    let ctrl_type = match explicit {
        Some(t) => t,
        None if constraints.use_typevar_operand() => {
            let dfg = &body.func.dfg;
            let v = data.typevar_operand(&dfg.value_lists)?;
            if !body.values.contains(v.index()) || !dfg.value_is_valid_for_parser(v) {
                return None;
            }
            dfg.value_type(v)
        }
        None if constraints.is_polymorphic() => return None,
        None => types::INVALID,
    };
    match constraints.ctrl_typeset() {
        Some(typeset) => typeset.contains(ctrl_type).then_some(ctrl_type),
        None => (ctrl_type == types::INVALID).then_some(ctrl_type),
    }
}

/// What the parser checks when a function's body ends: every operand is defined, and
/// aliases take their types (or form a cycle).
fn finish_body(body: &mut Body) -> Option<()> {
    let func = &body.func;
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if !func
                .dfg
                .inst_values(inst)
                .all(|v| body.values.contains(v.index()))
            {
                return None;
            }
        }
    }
    for &alias in &body.aliases {
        if !body.func.dfg.set_alias_type_for_parser(alias) {
            return None;
        }
    }
    Some(())
}
