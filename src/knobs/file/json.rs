//! JSON: finds the scalar at a dotted key (`training.batch_size`: object keys along the path)
//! with `jsonc-parser`, whose syntax tree keeps every value's byte range in the original text,
//! and renders a new value in JSON's spelling. Comments (`//`, `/* */`) and trailing commas are
//! accepted, as in the JSON-with-comments files many tools read; other JSON5 liberties (single
//! quotes, unquoted keys, hex numbers) are syntax errors, since a loader that rejects them would
//! not read the file either. `NaN`, `Infinity` and `-Infinity` are accepted because Python's
//! `json` module reads and writes them. Splicing the new text into the file is
//! [`super::set`]'s job; this module never rewrites anything but the one value's text.
//!
//! Refused, never guessed: objects, arrays, `null`, integers beyond 64 bits, and a key given
//! twice in one object (loaders disagree about which one wins) — `NotScalar`, with the line.
//! A key path cannot name a key that itself contains a dot (`{"a.b": 1}`), nor index into an
//! array: such paths are `NotFound`.

use super::{line_of, EditError, Located, Scalar};
use jsonc_parser::ast::{ObjectProp, Value};
use jsonc_parser::common::Ranged;
use jsonc_parser::{CollectOptions, ParseOptions};

/// The scalar at dotted `key` in JSON `text`: its value, its byte span (quotes included for a
/// string) and its 1-based line.
pub fn locate(text: &str, key: &str) -> Result<Located, EditError> {
    let root = parse(text).map_err(|err| EditError::Syntax {
        format: "JSON",
        detail: format!("line {}: {}", err.line_display(), err.kind()),
    })?;
    let not_found = || EditError::NotFound {
        key: key.to_string(),
    };
    let segments: Vec<&str> = key.split('.').collect();
    let mut value = root.as_ref().ok_or_else(not_found)?;
    for (depth, segment) in segments.iter().enumerate() {
        // Through a scalar or an array there is no such key below it.
        let object = value.as_object().ok_or_else(not_found)?;
        let mut props = object
            .properties
            .iter()
            .filter(|p| p.name.as_str() == *segment);
        let prop = props.next().ok_or_else(not_found)?;
        if let Some(again) = props.next() {
            return Err(EditError::NotScalar {
                key: segments[..=depth].join("."),
                line: line_of(text, again.range.start),
                what: format!(
                    "a key given twice in one object (also on line {})",
                    line_of(text, prop_start(prop))
                ),
            });
        }
        value = &prop.value;
    }
    let range = value.range();
    let span = range.start..range.end;
    let line = line_of(text, span.start);
    let value = scalar_of(value).map_err(|what| EditError::NotScalar {
        key: key.to_string(),
        line,
        what: what.to_string(),
    })?;
    Ok(Located { value, span, line })
}

/// The JSON text for `value`, replacing `old` (the previous value's text). A value equal to the
/// old one keeps its exact spelling (`1e3`, `"\u00e9"`), so writing back what was read
/// reproduces the file byte for byte. Strings are always double-quoted (JSON has no other
/// quote), non-ASCII characters are written as they are; a float that is not finite is written
/// `NaN`, `Infinity` or `-Infinity`, as Python's `json` module does.
pub fn render(value: &Scalar, old: &str) -> String {
    if let Some(before) = parse(old).ok().flatten().and_then(|v| scalar_of(&v).ok()) {
        if Scalar::same(&before, value) {
            return old.to_string();
        }
    }
    match value {
        Scalar::Bool(b) => b.to_string(),
        Scalar::Int(n) => n.to_string(),
        Scalar::Float(x) if x.is_nan() => "NaN".to_string(),
        Scalar::Float(x) if x.is_infinite() => {
            if *x > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
        }
        Scalar::Float(x) => serde_json::to_string(x).expect("a finite f64 serializes"),
        Scalar::Str(s) => serde_json::to_string(s).expect("a string serializes"),
    }
}

/// The syntax tree of `text` (`None` for a file holding only whitespace and comments).
fn parse(text: &str) -> Result<Option<Value<'_>>, jsonc_parser::errors::ParseError> {
    let options = ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_non_finite_numbers: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_extended_string_escapes: false,
    };
    jsonc_parser::parse_to_ast(text, &CollectOptions::default(), &options)
        .map(|parsed| parsed.value)
}

/// Where a property begins: its name.
fn prop_start(prop: &ObjectProp<'_>) -> usize {
    prop.name.range().start
}

/// The scalar a JSON value holds, or a short description of why it is not one.
fn scalar_of(value: &Value<'_>) -> Result<Scalar, &'static str> {
    match value {
        Value::BooleanLit(b) => Ok(Scalar::Bool(b.value)),
        Value::StringLit(s) => Ok(Scalar::Str(s.value.to_string())),
        Value::NumberLit(n) => number(n.value),
        Value::NullKeyword(_) => Err("null"),
        Value::Object(_) => Err("an object"),
        Value::Array(_) => Err("an array"),
    }
}

/// A JSON number literal as an integer when it is written as one, else as a float.
fn number(literal: &str) -> Result<Scalar, &'static str> {
    match literal {
        "NaN" | "-NaN" => return Ok(Scalar::Float(f64::NAN)),
        "Infinity" => return Ok(Scalar::Float(f64::INFINITY)),
        "-Infinity" => return Ok(Scalar::Float(f64::NEG_INFINITY)),
        _ => {}
    }
    if literal.contains(['.', 'e', 'E']) {
        literal
            .parse()
            .map(Scalar::Float)
            .map_err(|_| "a number oomguard cannot read")
    } else {
        literal
            .parse()
            .map(Scalar::Int)
            .map_err(|_| "an integer beyond 64 bits")
    }
}

#[cfg(test)]
mod tests {
    use super::super::{set, Format};
    use super::*;

    /// (file, key, value found, new value, file after the edit).
    use super::super::testing::{self, Row};

    fn rows() -> Vec<Row> {
        use Scalar::*;
        vec![
            // Nesting, key order, indentation and blank lines survive.
            (
                "{\n  \"training\": {\n    \"batch_size\": 8,\n\n    \"lr\": 0.1\n  }\n}\n",
                "training.batch_size",
                Int(8),
                Int(4),
                "{\n  \"training\": {\n    \"batch_size\": 4,\n\n    \"lr\": 0.1\n  }\n}\n",
            ),
            // The same key name in another object is left alone.
            (
                "{\"eval\": {\"batch_size\": 64}, \"training\": {\"batch_size\": 32}}",
                "training.batch_size",
                Int(32),
                Int(16),
                "{\"eval\": {\"batch_size\": 64}, \"training\": {\"batch_size\": 16}}",
            ),
            (
                "{\"eval\": {\"batch_size\": 64}, \"training\": {\"batch_size\": 32}}",
                "eval.batch_size",
                Int(64),
                Int(8),
                "{\"eval\": {\"batch_size\": 8}, \"training\": {\"batch_size\": 32}}",
            ),
            // Comments (full-line, trailing, block) and a trailing comma.
            (
                "// run config\n{\n  \"workers\": 4, // per GPU\n  /* pinned */ \"pin\": true,\n}\n",
                "workers",
                Int(4),
                Int(2),
                "// run config\n{\n  \"workers\": 2, // per GPU\n  /* pinned */ \"pin\": true,\n}\n",
            ),
            (
                "// run config\n{\n  \"workers\": 4, // per GPU\n  /* pinned */ \"pin\": true,\n}\n",
                "pin",
                Bool(true),
                Bool(false),
                "// run config\n{\n  \"workers\": 4, // per GPU\n  /* pinned */ \"pin\": false,\n}\n",
            ),
            // CRLF line endings, and a last line without a newline.
            (
                "{\r\n  \"a\": {\r\n    \"b\": 1\r\n  }\r\n}",
                "a.b",
                Int(1),
                Int(10),
                "{\r\n  \"a\": {\r\n    \"b\": 10\r\n  }\r\n}",
            ),
            // Unicode before the value (byte offsets, not characters), and in the value.
            (
                "{\"名前\": \"ラン\", \"n\": 1}",
                "n",
                Int(1),
                Int(2),
                "{\"名前\": \"ラン\", \"n\": 2}",
            ),
            (
                "{\"名前\": \"ラン\", \"n\": 1}",
                "名前",
                Str("ラン".into()),
                Str("run \"β\"\n\\".into()),
                "{\"名前\": \"run \\\"β\\\"\\n\\\\\", \"n\": 1}",
            ),
            // An escaped key and value are read unescaped.
            (
                "{\"b\\u0061tch\": \"\\u00e9\"}",
                "batch",
                Str("é".into()),
                Str("e".into()),
                "{\"b\\u0061tch\": \"e\"}",
            ),
            // Floats and their spellings; a float that was an integer is written as a float.
            ("{\"lr\": 3e-4}", "lr", Float(3e-4), Float(1e-10), "{\"lr\": 1e-10}"),
            ("{\"lr\": 1E3}", "lr", Float(1000.0), Float(1.0), "{\"lr\": 1.0}"),
            ("{\"lr\": 2}", "lr", Int(2), Float(0.5), "{\"lr\": 0.5}"),
            ("{\"x\": NaN}", "x", Float(f64::NAN), Float(f64::NEG_INFINITY), "{\"x\": -Infinity}"),
            ("{\"n\": -7}", "n", Int(-7), Int(0), "{\"n\": 0}"),
            ("{\"n\": 5}", "n", Int(5), Str("auto".into()), "{\"n\": \"auto\"}"),
            // A deep path.
            (
                "{\"a\": {\"b\": {\"c\": false}}, \"c\": true}",
                "a.b.c",
                Bool(false),
                Bool(true),
                "{\"a\": {\"b\": {\"c\": true}}, \"c\": true}",
            ),
        ]
    }

    #[test]
    fn locates_and_replaces_only_the_value() {
        testing::locates_and_replaces_only_the_value(Format::Json, &rows());
    }

    #[test]
    fn writing_back_the_original_value_reproduces_the_file() {
        testing::writing_back_the_original_value_reproduces_the_file(Format::Json, &rows());
    }

    #[test]
    fn strict_json_edits_stay_strict_json() {
        // Files without comments stay readable by a strict parser after an edit.
        for (text, key, _, new, _) in rows() {
            if text.contains("//")
                || text.contains("NaN")
                || matches!(new, Scalar::Float(x) if !x.is_finite())
            {
                continue;
            }
            let out = set(Format::Json, text, key, &new).expect("located");
            serde_json::from_str::<serde_json::Value>(&out)
                .unwrap_or_else(|e| panic!("{out:?} is not JSON: {e}"));
        }
    }

    #[test]
    fn spans_include_quotes_and_lines_count_from_one() {
        let text = "{\r\n  \"t\": {\r\n    \"name\": \"x\" // c\r\n  }\r\n}\r\n";
        let located = locate(text, "t.name").expect("present");
        assert_eq!(&text[located.span.clone()], "\"x\"");
        assert_eq!(located.line, 3);
    }

    #[test]
    fn refusals() {
        let not_scalar = |line: usize, key: &str, what: &str| EditError::NotScalar {
            key: key.to_string(),
            line,
            what: what.to_string(),
        };
        let not_found = |key: &str| EditError::NotFound {
            key: key.to_string(),
        };
        let cases: Vec<(&str, &str, EditError)> = vec![
            (
                "{\"training\": {\"batch_size\": 8}}",
                "training.accum",
                not_found("training.accum"),
            ),
            (
                "{\"training\": {\"batch_size\": 8}}",
                "eval",
                not_found("eval"),
            ),
            (
                "{\"training\": 8}",
                "training.batch_size",
                not_found("training.batch_size"),
            ),
            ("{\"a.b\": 1}", "a.b", not_found("a.b")),
            ("{\"sizes\": [1, 2]}", "sizes.0", not_found("sizes.0")),
            ("[{\"a\": 1}]", "a", not_found("a")),
            ("// nothing\n", "a", not_found("a")),
            (
                "{\n\"t\": {\"a\": 1}}",
                "t",
                not_scalar(2, "t", "an object"),
            ),
            (
                "{\"sizes\": [1, 2]}",
                "sizes",
                not_scalar(1, "sizes", "an array"),
            ),
            ("{\"x\": null}", "x", not_scalar(1, "x", "null")),
            (
                "{\"n\": 99999999999999999999}",
                "n",
                not_scalar(1, "n", "an integer beyond 64 bits"),
            ),
            (
                "{\"t\": {\"n\": 1,\n \"n\": 2}}",
                "t.n",
                not_scalar(2, "t.n", "a key given twice in one object (also on line 1)"),
            ),
            (
                "{\"t\": {\"n\": 1},\n\"t\": {\"n\": 2}}",
                "t.n",
                not_scalar(2, "t", "a key given twice in one object (also on line 1)"),
            ),
        ];
        for (text, key, expected) in cases {
            assert_eq!(locate(text, key), Err(expected), "{key} in {text:?}");
        }
    }

    #[test]
    fn syntax_errors_are_one_line_with_the_line() {
        for (text, line) in [
            ("{\"a\": 1,\n\"b\": }", 2),
            ("{\n'a': 1}", 2),
            ("{\n\"a\": 0x10}", 2),
            ("{\"a\": 1}\n{}", 2),
        ] {
            match locate(text, "a") {
                Err(EditError::Syntax { format, detail }) => {
                    assert_eq!(format, "JSON");
                    assert!(!detail.contains('\n'), "{detail:?}");
                    assert!(detail.starts_with(&format!("line {line}: ")), "{detail:?}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
