//! TOML: finds the scalar at a dotted key (`training.batch_size`) with `toml_edit`, whose
//! parsed document keeps every value's byte span in the original text, and renders a new value
//! in TOML's spelling. The key path walks tables (`[training]`), dotted keys
//! (`training.batch_size = 8`) and inline tables (`training = { batch_size = 8 }`) alike, since
//! toml_edit gives all three the same shape. Splicing the new text into the file is
//! [`super::set`]'s job; this module never rewrites anything but the one value's text.
//!
//! Refused, never guessed: tables, arrays, arrays of tables, date-times, and strings that span
//! lines (`NotScalar`, with the line). A key path cannot name a key that itself contains a dot
//! (`"a.b" = 1`), nor index into an array or array of tables: such paths are `NotFound`.

use super::{line_of, EditError, Located, Scalar};
use toml_edit::{Document, Item, Table, Value};

/// The scalar at dotted `key` in TOML `text`: its value, its byte span (quotes included for a
/// string) and its 1-based line.
pub fn locate(text: &str, key: &str) -> Result<Located, EditError> {
    let doc = Document::parse(text).map_err(|err| syntax(text, &err))?;
    let segments: Vec<&str> = key.split('.').collect();
    let (last, parents) = segments
        .split_last()
        .expect("str::split yields at least one segment");

    // Walk the parents: each must be a table (standard, implicit or dotted) or an inline table.
    let mut scope = Scope::Table(doc.as_table());
    for (depth, segment) in parents.iter().enumerate() {
        let prefix = segments[..=depth].join(".");
        scope = match scope.get(segment).ok_or_else(|| not_found(key))? {
            Found::Item(Item::Table(table)) => Scope::Table(table),
            Found::Item(Item::Value(Value::InlineTable(table)))
            | Found::Value(Value::InlineTable(table)) => Scope::Inline(table),
            Found::Item(item @ Item::ArrayOfTables(_)) => {
                return Err(EditError::NotScalar {
                    key: prefix,
                    line: line_of(text, item.span().map_or(0, |span| span.start)),
                    what: "an array of tables".to_string(),
                });
            }
            // A scalar or an array where a table was expected: there is no such key below it.
            _ => return Err(not_found(key)),
        };
    }

    let value = match scope.get(last).ok_or_else(|| not_found(key))? {
        Found::Item(Item::Value(value)) | Found::Value(value) => value,
        Found::Item(other) => {
            let what = match other {
                Item::ArrayOfTables(_) => "an array of tables",
                _ => "a table",
            };
            // A table header's span may be absent (implicit tables); then the key's line stands.
            let at = other
                .span()
                .or_else(|| scope.key_span(last))
                .map_or(0, |span| span.start);
            return Err(EditError::NotScalar {
                key: key.to_string(),
                line: line_of(text, at),
                what: what.to_string(),
            });
        }
    };
    let span = value
        .span()
        .expect("a value parsed from text by toml_edit::Document keeps its span");
    let line = line_of(text, span.start);
    let refuse = |what: &str| EditError::NotScalar {
        key: key.to_string(),
        line,
        what: what.to_string(),
    };
    if text[span.clone()].contains('\n') {
        return Err(refuse(match value {
            Value::String(_) => "a multi-line string",
            Value::Array(_) => "an array",
            _ => "an inline table",
        }));
    }
    let value = scalar_of(value).map_err(refuse)?;
    Ok(Located { value, span, line })
}

/// The TOML text for `value`, replacing `old` (the previous value's text). A value equal to the
/// old one keeps its exact spelling (`1_000`, `0x10`, `'x'`), so writing back what was read
/// reproduces the file byte for byte. A string keeps the old quote style (basic `"`, literal
/// `'`, and their single-line triple-quoted forms) unless a literal string cannot hold it, then
/// it becomes a basic string; an integer keeps a hexadecimal, octal or binary prefix.
pub fn render(value: &Scalar, old: &str) -> String {
    if let Some(before) = old.parse::<Value>().ok().and_then(|v| scalar_of(&v).ok()) {
        if Scalar::same(&before, value) {
            return old.to_string();
        }
    }
    match value {
        Scalar::Bool(b) => b.to_string(),
        Scalar::Int(n) => render_int(*n, old),
        Scalar::Float(x) => render_float(*x),
        Scalar::Str(s) => render_str(s, old),
    }
}

/// Where the walk stands: a table (standard, implicit, dotted) or an inline table.
#[derive(Clone, Copy)]
enum Scope<'a> {
    Table(&'a Table),
    Inline(&'a toml_edit::InlineTable),
}

/// What a key names inside a [`Scope`].
enum Found<'a> {
    Item(&'a Item),
    Value(&'a Value),
}

impl<'a> Scope<'a> {
    fn get(self, key: &str) -> Option<Found<'a>> {
        match self {
            Scope::Table(table) => table.get(key).map(Found::Item),
            Scope::Inline(table) => table.get(key).map(Found::Value),
        }
    }

    /// The span of `key`'s own text, for errors about a table that has no header of its own.
    fn key_span(self, key: &str) -> Option<std::ops::Range<usize>> {
        match self {
            Scope::Table(table) => table.key(key)?.span(),
            Scope::Inline(table) => table.key(key)?.span(),
        }
    }
}

/// The scalar a TOML value holds, or a short description of why it is not one.
fn scalar_of(value: &Value) -> Result<Scalar, &'static str> {
    match value {
        Value::Integer(n) => Ok(Scalar::Int(*n.value())),
        Value::Float(x) => Ok(Scalar::Float(*x.value())),
        Value::Boolean(b) => Ok(Scalar::Bool(*b.value())),
        Value::String(s) => Ok(Scalar::Str(s.value().clone())),
        Value::Datetime(_) => Err("a date-time"),
        Value::Array(_) => Err("an array"),
        Value::InlineTable(_) => Err("an inline table"),
    }
}

fn render_int(n: i64, old: &str) -> String {
    // A mask written in hex stays hex; TOML allows these prefixes on non-negative integers only.
    match old.get(..2) {
        Some("0x") if n >= 0 => format!("0x{n:x}"),
        Some("0o") if n >= 0 => format!("0o{n:o}"),
        Some("0b") if n >= 0 => format!("0b{n:b}"),
        _ => n.to_string(),
    }
}

fn render_float(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        // Debug, unlike Display, always writes a float as one (`1.0`, not `1`) and switches to
        // an exponent for very large or small magnitudes; both spellings are valid TOML.
        format!("{x:?}")
    }
}

fn render_str(s: &str, old: &str) -> String {
    // A literal string holds no escapes: no `'`, and no control character but tab.
    let literal_ok = !s.contains('\'') && !s.chars().any(|c| c != '\t' && c.is_control());
    if old.starts_with("'''") && literal_ok {
        format!("'''{s}'''")
    } else if old.starts_with('\'') && !old.starts_with("'''") && literal_ok {
        format!("'{s}'")
    } else if old.starts_with("\"\"\"") {
        format!("\"\"\"{}\"\"\"", escape_basic(s))
    } else {
        format!("\"{}\"", escape_basic(s))
    }
}

/// `s` escaped for a TOML basic string (single-line): quote, backslash and control characters.
fn escape_basic(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn not_found(key: &str) -> EditError {
    EditError::NotFound {
        key: key.to_string(),
    }
}

/// The first line of toml_edit's message, which may be several (a snippet with a caret).
pub fn first_line(err: &toml_edit::TomlError) -> &str {
    err.message()
        .lines()
        .next()
        .unwrap_or("invalid TOML")
        .trim()
}

/// toml_edit's error as one line: its message (first line) and where.
fn syntax(text: &str, err: &toml_edit::TomlError) -> EditError {
    let message = first_line(err);
    let detail = match err.span() {
        Some(span) => format!("line {}: {message}", line_of(text, span.start)),
        None => message.to_string(),
    };
    EditError::Syntax {
        format: "TOML",
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::*;

    /// (file, key, value found, new value, file after the edit).
    use super::super::testing::{self, Row};

    fn rows() -> Vec<Row> {
        use Scalar::*;
        vec![
            // A table, comments (full-line and inline) and key order survive.
            (
                "# training\n[training]\nbatch_size = 8 # per GPU\nlr = 0.1\n",
                "training.batch_size",
                Int(8),
                Int(4),
                "# training\n[training]\nbatch_size = 4 # per GPU\nlr = 0.1\n",
            ),
            // The same key name in another table is left alone; indentation and blank lines stay.
            (
                "[eval]\nbatch_size = 64\n\n[training]\n  batch_size   =   32\n\n",
                "training.batch_size",
                Int(32),
                Int(16),
                "[eval]\nbatch_size = 64\n\n[training]\n  batch_size   =   16\n\n",
            ),
            (
                "[eval]\nbatch_size = 64\n\n[training]\nbatch_size = 32\n",
                "eval.batch_size",
                Int(64),
                Int(8),
                "[eval]\nbatch_size = 8\n\n[training]\nbatch_size = 32\n",
            ),
            // CRLF line endings, and a last line without a newline.
            (
                "[training]\r\nbatch_size = 8\r\nworkers = 4",
                "training.workers",
                Int(4),
                Int(2),
                "[training]\r\nbatch_size = 8\r\nworkers = 2",
            ),
            // Dotted keys at the top level and inline tables.
            (
                "training.batch_size = 8\ntraining.accum = 1\n",
                "training.accum",
                Int(1),
                Int(2),
                "training.batch_size = 8\ntraining.accum = 2\n",
            ),
            (
                "training = { batch_size = 8, accum = 1 } # inline\n",
                "training.batch_size",
                Int(8),
                Int(4),
                "training = { batch_size = 4, accum = 1 } # inline\n",
            ),
            // Nested tables.
            (
                "[a.b]\nc = 1\n[a]\nc = 2\n",
                "a.b.c",
                Int(1),
                Int(7),
                "[a.b]\nc = 7\n[a]\nc = 2\n",
            ),
            // Quoting: basic, literal, triple-quoted on one line; unicode; escapes.
            (
                "name = \"run-α\" # 名前\n",
                "name",
                Str("run-α".into()),
                Str("run-β \"b\"".into()),
                "name = \"run-β \\\"b\\\"\" # 名前\n",
            ),
            (
                "path = 'C:\\data' # literal\n",
                "path",
                Str("C:\\data".into()),
                Str("D:\\data".into()),
                "path = 'D:\\data' # literal\n",
            ),
            (
                "path = 'a'\n",
                "path",
                Str("a".into()),
                Str("it's".into()),
                "path = \"it's\"\n",
            ),
            (
                "s = \"\"\"one line\"\"\"\n",
                "s",
                Str("one line".into()),
                Str("tab\there \"q\"".into()),
                "s = \"\"\"tab\\there \\\"q\\\"\"\"\"\n",
            ),
            (
                "s = '''raw'''\n",
                "s",
                Str("raw".into()),
                Str("r\\aw".into()),
                "s = '''r\\aw'''\n",
            ),
            // A quoted key segment spelled without quotes in the path.
            (
                "[\"training\"]\n\"batch_size\" = 8\n",
                "training.batch_size",
                Int(8),
                Int(4),
                "[\"training\"]\n\"batch_size\" = 4\n",
            ),
            // Booleans and floats in TOML spelling.
            (
                "[training]\npin_memory = true # fast\n",
                "training.pin_memory",
                Bool(true),
                Bool(false),
                "[training]\npin_memory = false # fast\n",
            ),
            ("lr = 3e-4\n", "lr", Float(3e-4), Float(1.0), "lr = 1.0\n"),
            ("lr = 0.5\n", "lr", Float(0.5), Float(1e-10), "lr = 1e-10\n"),
            (
                "x = nan\n",
                "x",
                Float(f64::NAN),
                Float(f64::INFINITY),
                "x = inf\n",
            ),
            // Integer spellings: underscores, hex (the radix is kept), sign.
            ("n = 1_000\n", "n", Int(1000), Int(500), "n = 500\n"),
            ("mask = 0xff\n", "mask", Int(255), Int(15), "mask = 0xf\n"),
            ("n = +5\n", "n", Int(5), Int(-3), "n = -3\n"),
            // A string replacing a number becomes a basic string.
            ("n = 5\n", "n", Int(5), Str("auto".into()), "n = \"auto\"\n"),
            // Tables in an array of tables elsewhere do not disturb the walk.
            (
                "[[knob]]\nname = \"batch\"\n\n[training]\nbatch_size = 2\n",
                "training.batch_size",
                Int(2),
                Int(1),
                "[[knob]]\nname = \"batch\"\n\n[training]\nbatch_size = 1\n",
            ),
        ]
    }

    #[test]
    fn locates_and_replaces_only_the_value() {
        testing::locates_and_replaces_only_the_value(Format::Toml, &rows());
    }

    #[test]
    fn writing_back_the_original_value_reproduces_the_file() {
        testing::writing_back_the_original_value_reproduces_the_file(Format::Toml, &rows());
    }

    #[test]
    fn spans_include_quotes_and_lines_count_from_one() {
        let text = "# c\r\n[t]\r\nname = 'x' # c\r\n";
        let located = locate(text, "t.name").expect("present");
        assert_eq!(&text[located.span.clone()], "'x'");
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
                "[training]\nbatch_size = 8\n",
                "training.accum",
                not_found("training.accum"),
            ),
            (
                "[training]\nbatch_size = 8\n",
                "eval.batch_size",
                not_found("eval.batch_size"),
            ),
            // Through a scalar: there is nothing below it.
            (
                "training = 8\n",
                "training.batch_size",
                not_found("training.batch_size"),
            ),
            // A key with a dot inside cannot be named by a dotted path.
            ("\"a.b\" = 1\n", "a.b", not_found("a.b")),
            // No array indexing.
            ("sizes = [1, 2]\n", "sizes.0", not_found("sizes.0")),
            (
                "\n[training]\nbatch_size = 8\n",
                "training",
                not_scalar(2, "training", "a table"),
            ),
            ("a.b = 1\n", "a", not_scalar(1, "a", "a table")),
            (
                "t = { a = 1 }\n",
                "t",
                not_scalar(1, "t", "an inline table"),
            ),
            (
                "sizes = [1, 2]\n",
                "sizes",
                not_scalar(1, "sizes", "an array"),
            ),
            (
                "sizes = [\n  1,\n]\n",
                "sizes",
                not_scalar(1, "sizes", "an array"),
            ),
            (
                "x = 1\n[[knob]]\nname = 'a'\n",
                "knob",
                not_scalar(2, "knob", "an array of tables"),
            ),
            (
                "x = 1\n[[knob]]\nname = 'a'\n",
                "knob.name",
                not_scalar(2, "knob", "an array of tables"),
            ),
            (
                "s = \"\"\"\nline one\nline two\"\"\"\n",
                "s",
                not_scalar(1, "s", "a multi-line string"),
            ),
            (
                "when = 2024-01-01T00:00:00Z\n",
                "when",
                not_scalar(1, "when", "a date-time"),
            ),
        ];
        for (text, key, expected) in cases {
            assert_eq!(locate(text, key), Err(expected), "{key} in {text:?}");
        }
    }

    #[test]
    fn syntax_errors_are_one_line_with_the_line() {
        for (text, line) in [("a = 1\nb = \n", 2), ("a = 1\na = 2\n", 2), ("[t\n", 1)] {
            match locate(text, "a") {
                Err(EditError::Syntax { format, detail }) => {
                    assert_eq!(format, "TOML");
                    assert!(!detail.contains('\n'), "{detail:?}");
                    assert!(detail.starts_with(&format!("line {line}: ")), "{detail:?}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
