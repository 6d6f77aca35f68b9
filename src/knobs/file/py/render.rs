//! Spells a new Python literal for a value, in the style of the literal it replaces: an int
//! keeps its base and digit grouping, a float its exponent style, a string its quote and
//! prefix, and a value the old text already spells keeps it verbatim. It reads no file and
//! finds nothing: [`super::locate`](mod@super::locate) finds the span this text goes into.

use super::literal::read_literal;
use crate::knobs::file::Scalar;

/// The Python literal for `value`. A value that `old` already spells keeps `old` verbatim (so
/// `1_000`, `0x10`, `1e-3` or an escape survive a rewrite to the same value); otherwise an int
/// keeps `old`'s base and digit grouping, a float `old`'s exponent style, and a string `old`'s
/// quote character and prefix (a raw prefix only while the new text needs no escape).
pub fn render(value: &Scalar, old: &str) -> String {
    if read_literal(old).as_ref() == Some(value) {
        return old.to_string();
    }
    match value {
        Scalar::Bool(true) => "True".to_string(),
        Scalar::Bool(false) => "False".to_string(),
        Scalar::Int(n) => render_int(*n, old),
        Scalar::Float(x) => render_float(*x, old),
        Scalar::Str(s) => render_str(s, old),
    }
}

/// Whether `old` is a number literal, whose style a new number follows.
fn is_number(old: &str) -> bool {
    old.trim_start_matches(['-', ' '])
        .starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// `n` in `old`'s base (`0x`/`0o`/`0b`, hex digit case) and `_` grouping, when `old` is a number.
fn render_int(n: i64, old: &str) -> String {
    let old = if is_number(old) {
        old.trim_start_matches(['-', ' '])
    } else {
        "0"
    };
    let lower = old.to_ascii_lowercase();
    let (radix, group) = match lower.get(..2) {
        Some("0x") => (16, 4),
        Some("0o") => (8, 3),
        Some("0b") => (2, 4),
        _ => (10, 3),
    };
    let magnitude = n.unsigned_abs();
    let mut digits = match radix {
        16 if old[2..].bytes().any(|b| b.is_ascii_uppercase()) => format!("{magnitude:X}"),
        16 => format!("{magnitude:x}"),
        8 => format!("{magnitude:o}"),
        2 => format!("{magnitude:b}"),
        _ => magnitude.to_string(),
    };
    let grouped = old
        .get(if radix == 10 { 0 } else { 2 }..)
        .is_some_and(|d| d.contains('_'));
    if grouped {
        digits = group_digits(&digits, group);
    }
    let prefix = if radix == 10 { "" } else { &old[..2] };
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{prefix}{digits}")
}

/// `1234567` → `1_234_567`.
fn group_digits(digits: &str, size: usize) -> String {
    let mut out = String::new();
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k) % size == 0 {
            out.push('_');
        }
        out.push(c);
    }
    out
}

/// `x` as a Python float literal (exponent form when `old` had one); non-finite values need a
/// call, which `locate` would then refuse as an expression.
fn render_float(x: f64, old: &str) -> String {
    if x.is_nan() {
        return "float(\"nan\")".to_string();
    }
    if x.is_infinite() {
        let sign = if x < 0.0 { "-" } else { "" };
        return format!("float(\"{sign}inf\")");
    }
    let digits = old.trim_start_matches(['-', ' ']).to_ascii_lowercase();
    let decimal = is_number(old) && !digits.starts_with("0x");
    if decimal && old.contains('e') {
        format!("{x:e}")
    } else if decimal && old.contains('E') {
        format!("{x:E}")
    } else {
        // Debug always writes a `.0` or an exponent, so the literal stays a float in Python.
        format!("{x:?}")
    }
}

/// `s` quoted like `old` (quote character, `u`/`r` prefix), escaped so Python reads it back
/// exactly: backslash, the quote, CR/LF and control characters.
fn render_str(s: &str, old: &str) -> String {
    let prefix_len = old.find(['\'', '"']).unwrap_or(0);
    let (prefix, quote) = match old[prefix_len..].chars().next() {
        Some(q @ ('\'' | '"')) if old[..prefix_len].chars().all(|c| "rRuU".contains(c)) => {
            (&old[..prefix_len], q)
        }
        _ => ("", '"'),
    };
    let raw = prefix.contains(['r', 'R']);
    let raw_fits =
        !s.contains(quote) && !s.ends_with('\\') && !s.chars().any(|c| c.is_control() && c != '\t');
    if raw && raw_fits {
        return format!("{prefix}{quote}{s}{quote}");
    }
    let prefix: String = prefix.chars().filter(|c| !"rR".contains(*c)).collect();
    let mut out = format!("{prefix}{quote}");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            _ if c == quote => {
                out.push('\\');
                out.push(c);
            }
            _ if c.is_control() => {
                let code = c as u32;
                if code <= 0xff {
                    out.push_str(&format!("\\x{code:02x}"));
                } else {
                    out.push_str(&format!("\\u{code:04x}"));
                }
            }
            _ => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(n: i64) -> Scalar {
        Scalar::Int(n)
    }
    fn float(x: f64) -> Scalar {
        Scalar::Float(x)
    }
    fn string(s: &str) -> Scalar {
        Scalar::Str(s.to_string())
    }

    /// A new value rendered fresh (not equal to `old`) reads back as itself, in every quote
    /// style, for text that needs escapes.
    #[test]
    fn rendered_strings_read_back() {
        for old in STRING_STYLES {
            for v in AWKWARD_STRINGS {
                let text = render(&string(v), old);
                assert_eq!(
                    read_literal(&text),
                    Some(string(v)),
                    "{v:?} rendered over {old}: {text}"
                );
            }
        }
    }

    const AWKWARD_STRINGS: &[&str] = &[
        "",
        "plain",
        "it's",
        "say \"hi\"",
        "both ' and \"",
        "back\\slash",
        "ends\\",
        "new\nline",
        "cr\rlf",
        "tab\there",
        "bell\x07",
        "del\x7f",
        "c1\u{85}",
        "ünï ✓ 😀",
        "{braces}",
        "# not a comment",
        "\\N{BULLET}",
        "\\x41",
        "\u{2028}",
    ];
    const STRING_STYLES: &[&str] = &["'x'", "\"x\"", "r'x'", "R\"x\"", "u'x'", "8", "True"];

    /// Real Python reads every freshly rendered string as the intended value.
    #[test]
    fn python_agrees_with_rendered_strings() {
        let probe = std::process::Command::new("python3")
            .arg("-c")
            .arg("pass")
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            println!("SKIPPED python_agrees_with_rendered_strings: no python3 on PATH");
            return;
        }
        let mut module = String::from("import json\nV = []\n");
        let mut want = Vec::new();
        for old in STRING_STYLES {
            for v in AWKWARD_STRINGS {
                module.push_str(&format!("V.append({})\n", render(&string(v), old)));
                want.push(*v);
            }
        }
        module.push_str("print(json.dumps(V))\n");
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("strings.py");
        std::fs::write(&path, &module).expect("temp file written");
        let run = std::process::Command::new("python3")
            .arg(&path)
            .output()
            .expect("python3 runs");
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let got: Vec<String> = serde_json::from_slice(&run.stdout).expect("python printed JSON");
        assert_eq!(got, want);
    }

    #[test]
    fn rendered_numbers_and_bools() {
        let cases: &[(Scalar, &str, &str)] = &[
            (int(4), "8", "4"),
            (int(-4), "8", "-4"),
            (int(1_234_567), "1_000", "1_234_567"),
            (int(-1_234_567), "-1_000", "-1_234_567"),
            (int(255), "0x10", "0xff"),
            (int(255), "0X1A", "0XFF"),
            (int(0x1_0000_0000), "0xffff_ffff", "0x1_0000_0000"),
            (int(8), "0o10", "0o10"),
            (int(9), "0o10", "0o11"),
            (int(5), "0b1", "0b101"),
            (int(i64::MIN), "0", "-9223372036854775808"),
            (int(3), "'three'", "3"),
            (float(0.5), "1", "0.5"),
            (float(4.0), "0.1", "4.0"),
            (float(1e-7), "0.1", "1e-7"),
            (float(2.0), "1e-3", "2e0"),
            (float(2.5e-5), "1E-3", "2.5E-5"),
            (float(f64::INFINITY), "1.0", "float(\"inf\")"),
            (float(f64::NEG_INFINITY), "1.0", "float(\"-inf\")"),
            (float(f64::NAN), "1.0", "float(\"nan\")"),
            (float(0.5), "'true'", "0.5"),
            (Scalar::Bool(true), "False", "True"),
            (Scalar::Bool(false), "1", "False"),
        ];
        for (value, old, want) in cases {
            assert_eq!(render(value, old), *want, "{value:?} over {old}");
        }
        // Every finite rendering reads back as the value.
        for (value, old, _) in cases {
            let text = render(value, old);
            if !text.starts_with("float(") {
                assert_eq!(read_literal(&text).as_ref(), Some(value), "{text}");
            }
        }
    }

    #[test]
    fn the_same_value_keeps_its_spelling() {
        for old in [
            "1_000", "0x3E8", "1000", "1e3", "'\\x41'", "r'A'", "- 5", "1000.0",
        ] {
            let value = read_literal(old).expect("a literal");
            assert_eq!(render(&value, old), old);
        }
    }
}
