//! The tokenizer: cuts a Python source into logical lines of tokens (names, numbers, strings,
//! operators), as Python's own tokenizer cuts them, so what sits in a comment, a docstring or
//! an f-string is never taken for code and brackets and backslashes join physical lines. It
//! knows every string prefix, triple quotes and f-strings' nested replacement fields, and
//! refuses what Python refuses (an unclosed bracket or string, a stray backslash, non-ASCII
//! whitespace). It reads no statement and decodes no value: that is [`super::stmt`]'s and
//! [`super::literal`]'s.

use std::ops::Range;

use crate::knobs::file::{line_of, EditError};

const FORMAT: &str = "Python";

/// A token's class; keywords are names (the statement walker tells them apart).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    Name,
    Number,
    Str(StrTok),
    Op,
}

/// A string literal's shape, kept so the value can be decoded or refused by kind.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StrTok {
    /// Lower-cased prefix letters (`""`, `"r"`, `"rb"`, `"f"`, ...).
    pub(super) prefix: String,
    pub(super) quote: u8,
    pub(super) triple: bool,
    /// The text between the quotes.
    pub(super) body: Range<usize>,
}

/// One token and its byte span in the text.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub(super) kind: Kind,
    pub(super) span: Range<usize>,
}

/// One logical line, as Python's tokenizer cuts them: open brackets and trailing backslashes
/// join physical lines; blank and comment-only lines make none; comments are dropped.
#[derive(Debug)]
pub(super) struct Line {
    /// Column of the first token, tabs to multiples of 8 as Python counts them.
    pub(super) indent: usize,
    pub(super) tokens: Vec<Token>,
}

/// A `Syntax` error naming the line of byte offset `at`.
fn syntax(text: &str, at: usize, detail: &str) -> EditError {
    EditError::Syntax {
        format: FORMAT,
        detail: format!("line {}: {detail}", line_of(text, at)),
    }
}

/// Identifier characters, approximated: any non-ASCII non-space character counts, which is
/// harmless because only exact key names are ever compared.
fn is_name_start(c: char) -> bool {
    c == '_' || c.is_alphabetic() || (!c.is_ascii() && !c.is_whitespace())
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

/// Whether `s` is one Python name, as a key part must be to be found.
pub(super) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(is_name_start) && chars.all(is_name_char)
}

const STRING_PREFIXES: &[&str] = &["r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"];

const OPERATORS_3: &[&str] = &["**=", "//=", ">>=", "<<=", "..."];
const OPERATORS_2: &[&str] = &[
    "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", ":=", "->", "**",
    "//", "<<", ">>",
];
/// Splits `text` into logical lines.
pub(super) fn tokenize(text: &str) -> Result<Vec<Line>, EditError> {
    let mut reader = Tokenizer::new(text);
    while reader.i < reader.bytes.len() {
        if reader.at_line_start {
            reader.measure_indent();
        } else {
            reader.step()?;
        }
    }
    reader.finish()
}

/// The tokenizer's state while it reads the text once, left to right.
struct Tokenizer<'t> {
    text: &'t str,
    bytes: &'t [u8],
    /// Byte offset of the next character to read.
    i: usize,
    lines: Vec<Line>,
    /// The tokens of the logical line being read.
    tokens: Vec<Token>,
    /// The indentation column of the logical line being read.
    indent: usize,
    /// The brackets open, with their offsets: a newline inside one does not end the line.
    brackets: Vec<(u8, usize)>,
    at_line_start: bool,
}

impl<'t> Tokenizer<'t> {
    fn new(text: &'t str) -> Tokenizer<'t> {
        Tokenizer {
            text,
            bytes: text.as_bytes(),
            // A UTF-8 byte order mark opens the file, as Python's tokenizer skips it (PEP 263).
            i: if text.starts_with('\u{feff}') { 3 } else { 0 },
            lines: Vec::new(),
            tokens: Vec::new(),
            indent: 0,
            brackets: Vec::new(),
            at_line_start: true,
        }
    }

    /// Measures a physical line's indentation, which tells which block a statement is in; a
    /// blank or comment-only line is no logical line, so the next line's measure replaces its.
    fn measure_indent(&mut self) {
        let mut col = 0;
        while self.i < self.bytes.len() {
            match self.bytes[self.i] {
                b' ' => col += 1,
                b'\t' => col = (col / 8 + 1) * 8,
                b'\x0c' => col = 0,
                _ => break,
            }
            self.i += 1;
        }
        self.indent = col;
        self.at_line_start = false;
    }

    /// Reads what starts at the current offset: blank space, a comment, a line's end, a
    /// continuation, or one token.
    fn step(&mut self) -> Result<(), EditError> {
        let (bytes, i) = (self.bytes, self.i);
        let c = bytes[i];
        match c {
            b' ' | b'\t' | b'\x0c' | b'\r' => self.i += 1,
            b'#' => self.skip_comment(),
            b'\n' => self.end_of_line(),
            b'\\' => self.continuation()?,
            b'\'' | b'"' => self.string(i, i)?,
            b'0'..=b'9' => self.i = push_number(bytes, i, &mut self.tokens),
            b'.' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                self.i = push_number(bytes, i, &mut self.tokens)
            }
            b'(' | b'[' | b'{' => {
                self.brackets.push((c, i));
                self.push_op(1);
            }
            b')' | b']' | b'}' => self.close_bracket(c)?,
            _ => self.word_or_operator()?,
        }
        Ok(())
    }

    /// A comment runs to the end of the physical line and is no token.
    fn skip_comment(&mut self) {
        while self.i < self.bytes.len() && self.bytes[self.i] != b'\n' {
            self.i += 1;
        }
    }

    /// A newline ends the logical line unless a bracket is open (then the statement goes on);
    /// a line that made no token (blank, comment-only) is no line.
    fn end_of_line(&mut self) {
        self.i += 1;
        if self.brackets.is_empty() {
            if !self.tokens.is_empty() {
                self.lines.push(Line {
                    indent: self.indent,
                    tokens: std::mem::take(&mut self.tokens),
                });
            }
            self.at_line_start = true;
        }
    }

    /// A backslash outside a string joins the next physical line, and is legal only as the
    /// line's last character, as Python has it.
    fn continuation(&mut self) -> Result<(), EditError> {
        let rest = &self.bytes[self.i + 1..];
        if rest.starts_with(b"\n") {
            self.i += 2;
        } else if rest.starts_with(b"\r\n") {
            self.i += 3;
        } else {
            return Err(syntax(self.text, self.i, "a backslash outside a string"));
        }
        Ok(())
    }

    /// The string literal whose prefix starts at `start` and whose quote is at `quote_at`.
    fn string(&mut self, start: usize, quote_at: usize) -> Result<(), EditError> {
        let (tok, end) = scan_string(self.text, start, quote_at)?;
        self.tokens.push(tok);
        self.i = end;
        Ok(())
    }

    /// An operator token `len_bytes` long at the current offset.
    fn push_op(&mut self, len_bytes: usize) {
        self.tokens.push(Token {
            kind: Kind::Op,
            span: self.i..self.i + len_bytes,
        });
        self.i += len_bytes;
    }

    /// A closing bracket must match the last one opened: Python refuses anything else, and a
    /// tokenizer that went on would join the wrong lines.
    fn close_bracket(&mut self, c: u8) -> Result<(), EditError> {
        let open = match c {
            b')' => b'(',
            b']' => b'[',
            _ => b'{',
        };
        if self.brackets.pop().map(|(b, _)| b) != Some(open) {
            return Err(syntax(
                self.text,
                self.i,
                &format!("unmatched '{}'", c as char),
            ));
        }
        self.push_op(1);
        Ok(())
    }

    /// A name, a prefixed string (`r'...'`, `f"..."`: the letters are its prefix only right
    /// before a quote), or an operator, longest spelling first.
    fn word_or_operator(&mut self) -> Result<(), EditError> {
        let (text, i) = (self.text, self.i);
        let ch = text[i..]
            .chars()
            .next()
            .expect("i is below len, on a char boundary");
        if is_name_start(ch) {
            let end = name_end(text, i);
            if is_string_prefix(text, i, end) {
                return self.string(i, end);
            }
            self.tokens.push(Token {
                kind: Kind::Name,
                span: i..end,
            });
            self.i = end;
        } else if ch.is_ascii() {
            self.push_op(operator_len_bytes(&text[i..]));
        } else {
            // Non-ASCII whitespace (e.g. NBSP) outside a string: Python refuses it.
            return Err(syntax(text, i, &format!("unexpected character {ch:?}")));
        }
        Ok(())
    }

    /// The lines read, once the text ends: a bracket still open is an error (Python's too),
    /// and the last line needs no newline.
    fn finish(mut self) -> Result<Vec<Line>, EditError> {
        if let Some(&(b, at)) = self.brackets.last() {
            return Err(syntax(
                self.text,
                at,
                &format!("'{}' is never closed", b as char),
            ));
        }
        if !self.tokens.is_empty() {
            self.lines.push(Line {
                indent: self.indent,
                tokens: self.tokens,
            });
        }
        Ok(self.lines)
    }
}

/// The offset after the name that starts at `start`.
fn name_end(text: &str, start: usize) -> usize {
    text[start..]
        .char_indices()
        .find(|&(_, ch)| !is_name_char(ch))
        .map_or(text.len(), |(k, _)| start + k)
}

/// Whether the word `text[start..end]` opens a string: a prefix Python knows, right before a
/// quote (`rb'...'`); otherwise it is a name.
fn is_string_prefix(text: &str, start: usize, end: usize) -> bool {
    let quoted = matches!(text.as_bytes().get(end), Some(b'\'' | b'"'));
    quoted && STRING_PREFIXES.contains(&text[start..end].to_ascii_lowercase().as_str())
}

/// The length of the operator that `rest` starts with: the longest Python spells, so `**=` is
/// one token and not `**` and `=`.
fn operator_len_bytes(rest: &str) -> usize {
    if OPERATORS_3.iter().any(|op| rest.starts_with(op)) {
        3
    } else if OPERATORS_2.iter().any(|op| rest.starts_with(op)) {
        2
    } else {
        1
    }
}

/// Pushes the number token starting at `start` (digits, `_`, `.`, letters for bases, suffixes
/// and exponents, an exponent's sign); returns the offset after it.
fn push_number(bytes: &[u8], start: usize, tokens: &mut Vec<Token>) -> usize {
    let hex = bytes[start..].starts_with(b"0x") || bytes[start..].starts_with(b"0X");
    let mut i = start;
    while i < bytes.len() {
        let c = bytes[i];
        let exponent_sign = matches!(c, b'+' | b'-') && !hex && matches!(bytes[i - 1], b'e' | b'E');
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || exponent_sign {
            i += 1;
        } else {
            break;
        }
    }
    tokens.push(Token {
        kind: Kind::Number,
        span: start..i,
    });
    i
}

/// Scans the string literal whose prefix starts at `start` and whose opening quote is at
/// `quote_at`; returns its token and the offset after the closing quote.
fn scan_string(text: &str, start: usize, quote_at: usize) -> Result<(Token, usize), EditError> {
    let bytes = text.as_bytes();
    let prefix = text[start..quote_at].to_ascii_lowercase();
    let quote = bytes[quote_at];
    let triple = bytes[quote_at..].starts_with(&[quote; 3]);
    let body_start = quote_at + if triple { 3 } else { 1 };
    let formatted = prefix.contains('f') || prefix.contains('t');
    let mut i = body_start;
    loop {
        let Some(&c) = bytes.get(i) else {
            return Err(syntax(text, start, "a string is never closed"));
        };
        match c {
            // Even in a raw string a backslash keeps the next character from closing it.
            b'\\' => i += 2,
            b'\n' if !triple => return Err(syntax(text, start, "a string is never closed")),
            b'{' if formatted && bytes.get(i + 1) == Some(&b'{') => i += 2,
            b'{' if formatted => i = skip_replacement_field(text, i + 1, quote, triple)?,
            _ if c == quote => {
                if !triple {
                    break;
                }
                if bytes[i..].starts_with(&[quote; 3]) {
                    break;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    let end = i + if triple { 3 } else { 1 };
    let tok = Token {
        kind: Kind::Str(StrTok {
            prefix,
            quote,
            triple,
            body: body_start..i,
        }),
        span: start..end,
    };
    Ok((tok, end))
}

/// Skips an f-string replacement field whose expression starts at `i` (after `{`); returns the
/// offset after its closing `}`. Nested strings, brackets and format specs are followed, so a
/// quote or `#` inside the field never ends the enclosing string early.
fn skip_replacement_field(
    text: &str,
    mut i: usize,
    outer_quote: u8,
    outer_triple: bool,
) -> Result<usize, EditError> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let unclosed = |at: usize| syntax(text, at, "an f-string replacement field is never closed");
    let start = i;
    loop {
        let Some(&c) = bytes.get(i) else {
            return Err(unclosed(start));
        };
        match c {
            b'\'' | b'"' => i = scan_string(text, i, i)?.1,
            b'(' | b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b')' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'}' if depth == 0 => return Ok(i + 1),
            b'}' => {
                depth -= 1;
                i += 1;
            }
            b'!' if bytes.get(i + 1) == Some(&b'=') => i += 2,
            b':' if depth == 0 => {
                // The format spec: literal text with nested `{...}` fields, up to the `}`.
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return Err(unclosed(start)),
                        Some(b'{') => {
                            i = skip_replacement_field(text, i + 1, outer_quote, outer_triple)?
                        }
                        Some(b'}') => return Ok(i + 1),
                        Some(b'\n') if !outer_triple => return Err(unclosed(start)),
                        Some(&q) if q == outer_quote && !outer_triple => {
                            return Err(unclosed(start))
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            b'\n' if !outer_triple => return Err(unclosed(start)),
            _ => {
                let ch = text[i..].chars().next().expect("i is on a char boundary");
                if is_name_start(ch) {
                    // A prefixed nested string (`f"{f'x'}"`), else just a name.
                    let end = name_end(text, i);
                    i = if is_string_prefix(text, i, end) {
                        scan_string(text, i, end)?.1
                    } else {
                        end
                    };
                } else {
                    i += ch.len_utf8();
                }
            }
        }
    }
}
