//! One Python literal read from tokens: an int in any base with `_` grouping, a float, `True`
//! / `False`, a one-line string with its escapes decoded; and what anything else is instead (a
//! list, a call, a name, an f-string, ...), said in words for the user. Arithmetic is
//! [`super::arithmetic`]'s; spelling a new literal is [`super::render`](mod@super::render)'s.

use std::ops::Range;

use super::stmt::Stmt;
use super::tokenize::{tokenize, Kind, StrTok};
use crate::knobs::file::Scalar;

/// Reads a whole token sequence as one literal.
pub(super) fn literal(v: &Stmt) -> Result<(Scalar, Range<usize>), String> {
    let expression = || Err("an expression".to_string());
    let Some(first) = v.toks.first() else {
        return expression();
    };
    if v.top_level().iter().any(|&k| v.is_op(k, ",")) {
        return Err("a tuple".to_string());
    }
    let (value, used) = match &first.kind {
        Kind::Op if v.s(0) == "[" => return Err("a list".to_string()),
        Kind::Op if v.s(0) == "{" => return Err("a dict or set".to_string()),
        Kind::Op if v.s(0) == "(" => return Err("a value in parentheses".to_string()),
        Kind::Op if v.s(0) == "-" && v.toks.get(1).is_some_and(|t| t.kind == Kind::Number) => {
            let digits = v.s(1);
            (number(&format!("-{digits}"))?, 2)
        }
        Kind::Number => (number(v.s(0))?, 1),
        Kind::Name => match v.s(0) {
            "True" => (Scalar::Bool(true), 1),
            "False" => (Scalar::Bool(false), 1),
            "None" => return Err("None".to_string()),
            _ if v.is_op(1, "(") => return Err("a call".to_string()),
            _ if v.toks.len() == 1 => return Err("a name, not a literal".to_string()),
            _ => return expression(),
        },
        Kind::Str(s) => {
            if v.toks
                .get(1)
                .is_some_and(|t| matches!(t.kind, Kind::Str(_)))
            {
                return Err("implicitly concatenated strings".to_string());
            }
            (Scalar::Str(string_value(v.text, s)?), 1)
        }
        Kind::Op => return expression(),
    };
    if v.toks.len() > used {
        return expression();
    }
    Ok((value, first.span.start..v.toks[used - 1].span.end))
}

/// A number token's value (with a leading `-` when negative).
pub(super) fn number(spelled: &str) -> Result<Scalar, String> {
    let cleaned: String = spelled
        .chars()
        .filter(|&c| c != '_' && !c.is_whitespace())
        .collect();
    let (negative, digits) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.as_str()),
    };
    let lower = digits.to_ascii_lowercase();
    if lower.ends_with('j') {
        return Err("a complex number".to_string());
    }
    let radix = match lower.get(..2) {
        Some("0x") => Some(16),
        Some("0o") => Some(8),
        Some("0b") => Some(2),
        _ => None,
    };
    let unreadable = || format!("a number oomguard cannot read ({spelled})");
    if let Some(radix) = radix {
        let sign = if negative { "-" } else { "" };
        return i64::from_str_radix(&format!("{sign}{}", &lower[2..]), radix)
            .map(Scalar::Int)
            .map_err(|_| unreadable());
    }
    if lower.contains(['.', 'e']) {
        return cleaned
            .parse::<f64>()
            .map(Scalar::Float)
            .map_err(|_| unreadable());
    }
    if lower.len() > 1 && lower.starts_with('0') && lower.bytes().any(|b| b != b'0') {
        return Err(unreadable()); // `08`: not Python
    }
    cleaned
        .parse::<i64>()
        .map(Scalar::Int)
        .map_err(|e| match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "an integer beyond 64 bits".to_string()
            }
            _ => unreadable(),
        })
}

/// The value of a one-line `'...'`/`"..."` string (prefix `r` or `u`), escapes decoded.
pub(super) fn string_value(text: &str, s: &StrTok) -> Result<String, String> {
    if s.triple {
        return Err("a triple-quoted string".to_string());
    }
    if s.prefix.contains('b') {
        return Err("a bytes literal".to_string());
    }
    if s.prefix.contains('f') {
        return Err("an f-string".to_string());
    }
    if s.prefix.contains('t') {
        return Err("a template string".to_string());
    }
    let body = &text[s.body.clone()];
    if s.prefix.contains('r') {
        return Ok(body.to_string());
    }
    decode_escapes(body)
}

/// A string body's backslash escapes decoded as Python decodes them; one it cannot decode
/// (`\N{...}`, a short `\x`) refuses the string rather than change its meaning.
fn decode_escapes(body: &str) -> Result<String, String> {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    let bad = |esc: &str| {
        Err(format!(
            "a string with an escape oomguard cannot read (`\\{esc}`)"
        ))
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            return bad("");
        };
        match e {
            '\\' | '\'' | '"' => out.push(e),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '0'..='7' => {
                let mut code = e.to_digit(8).expect("an octal digit");
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            code = code * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(code).expect("at most 0o777, a valid char"));
            }
            'x' | 'u' | 'U' => {
                let len = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = (0..len).filter_map(|_| chars.next()).collect();
                let code = (hex.len() == len)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten();
                match code.and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => return bad(&format!("{e}{hex}")),
                }
            }
            'N' => return bad("N{...}"),
            // Python keeps an unknown escape as it is (with a warning).
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    Ok(out)
}

/// The value `old` spells, if it is one literal.
pub(super) fn read_literal(old: &str) -> Option<Scalar> {
    let lines = tokenize(old).ok()?;
    let [line] = lines.as_slice() else {
        return None;
    };
    let v = Stmt {
        text: old,
        toks: &line.tokens,
    };
    literal(&v).ok().map(|(value, _)| value)
}
