//! Format-preserving edits of one scalar in a config file: YAML, JSON, TOML, and Python config
//! modules (class attributes, module-level assignments). Each format module *locates* the value
//! at a dotted key with a real parser (or, for Python, a tokenizer of the one-line assignment)
//! and returns its byte span; [`set`] then replaces only that span, so comments, key order,
//! quoting, indentation and blank lines survive byte for byte. What a format cannot edit safely
//! (a value spread over several lines, a YAML alias, a Python expression) is refused with a
//! line number, never guessed.
//!
//! Reading and writing the file itself, backups and restores are the caller's job.

pub mod json;
pub mod py;
pub mod toml;
pub mod yaml;

use std::ops::Range;
use std::path::Path;

/// The formats oomguard can edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
    Toml,
    Python,
}

impl Format {
    /// The format a file's extension names: `.yaml`/`.yml`, `.json`, `.toml`, `.py`.
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            "toml" => Some(Format::Toml),
            "py" => Some(Format::Python),
            _ => None,
        }
    }
}

/// A scalar value as a config file holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Int(n) => write!(f, "{n}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Str(s) => write!(f, "{s}"),
        }
    }
}

impl Scalar {
    /// Equal as values, NaN equal to NaN: writing back the value a file already holds is then
    /// recognised as a no-op, and `.nan` or `NaN` keeps its spelling.
    pub fn same(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Float(x), Scalar::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
            _ => self == other,
        }
    }
}

/// Where a key's value sits in the text, and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub value: Scalar,
    /// The byte range of the value's own text (quotes included for a quoted string).
    pub span: Range<usize>,
    /// 1-based line of the value.
    pub line: usize,
}

/// Why a value cannot be read or written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EditError {
    #[error("the file does not parse as {format}: {detail}")]
    Syntax {
        format: &'static str,
        detail: String,
    },
    #[error("key {key} is not in the file")]
    NotFound { key: String },
    #[error("line {line}: {key} is {what}, not a single value oomguard can edit in place")]
    NotScalar {
        key: String,
        line: usize,
        what: String,
    },
}

/// Finds the value at `key` (dotted: `training.batch_size`; Python: `TrainConfig.batch_size` or
/// `BATCH_SIZE`).
pub fn locate(format: Format, text: &str, key: &str) -> Result<Located, EditError> {
    match format {
        Format::Yaml => yaml::locate(text, key),
        Format::Json => json::locate(text, key),
        Format::Toml => toml::locate(text, key),
        Format::Python => py::locate(text, key),
    }
}

/// The text with the value at `key` replaced by `value`, and nothing else changed. A string
/// keeps the quoting style it had where the format allows.
pub fn set(format: Format, text: &str, key: &str, value: &Scalar) -> Result<String, EditError> {
    let found = locate(format, text, key)?;
    let old = &text[found.span.clone()];
    let new = match format {
        Format::Yaml => yaml::render(value, old),
        Format::Json => json::render(value, old),
        Format::Toml => toml::render(value, old),
        Format::Python => py::render(value, old),
    };
    let mut out = String::with_capacity(text.len() + new.len());
    out.push_str(&text[..found.span.start]);
    out.push_str(&new);
    out.push_str(&text[found.span.end..]);
    Ok(out)
}

/// The 1-based line of byte offset `at`.
pub(crate) fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// Table-test checks shared by the editors whose rows read (file, key, value found, new value,
/// file after the edit).
#[cfg(test)]
pub(crate) mod testing {
    use super::{locate, set, Format, Scalar};

    pub(crate) type Row = (&'static str, &'static str, Scalar, Scalar, &'static str);

    /// Each row's value is found, the edit gives exactly the expected file, and the edited file
    /// still parses and holds the new value.
    pub(crate) fn locates_and_replaces_only_the_value(format: Format, rows: &[Row]) {
        for (text, key, found, new, expected) in rows {
            let located =
                locate(format, text, key).unwrap_or_else(|e| panic!("{key} in {text:?}: {e}"));
            assert!(
                Scalar::same(&located.value, found),
                "{key} in {text:?}: {located:?}"
            );
            let out = set(format, text, key, new).expect("located above");
            assert_eq!(&out, expected, "{key} := {new:?} in {text:?}");
            let again = locate(format, &out, key).expect("the edited file still parses");
            assert!(
                Scalar::same(&again.value, new),
                "{key} in {out:?}: {again:?}"
            );
        }
    }

    /// Writing back the value a file holds changes no byte.
    pub(crate) fn writing_back_the_original_value_reproduces_the_file(
        format: Format,
        rows: &[Row],
    ) {
        for (text, key, ..) in rows {
            let located = locate(format, text, key).expect("every row locates");
            let out = set(format, text, key, &located.value).expect("located above");
            assert_eq!(&out, text, "{key} in {text:?}");
        }
    }
}
