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
    let found = match locate(format, text, key) {
        Ok(found) => found,
        Err(EditError::NotFound { .. }) if !key.contains('.') => {
            return insert_top_level(format, text, key, value);
        }
        Err(e) => return Err(e),
    };
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

/// The text with `key: value` added to its top-level mapping, where the key is absent: a
/// Trainer's JSON arguments or a DeepSpeed config that leaves the accumulation at its default
/// gets `gradient_accumulation_steps` written in. JSON gets the member first in its object,
/// indented as the first member is; YAML gets a line at the end of a block mapping. Other
/// formats, and files whose top level is not such a mapping, are refused (the key is absent).
fn insert_top_level(
    format: Format,
    text: &str,
    key: &str,
    value: &Scalar,
) -> Result<String, EditError> {
    let absent = || EditError::NotFound {
        key: key.to_string(),
    };
    let rendered = match format {
        Format::Json => json::render(value, "0"),
        Format::Yaml => yaml::render(value, "0"),
        // A module-level name the module lacks is appended (`GRAD_ACCUM = 2`): a script that
        // execs its config file over its globals (nanoGPT's configurator) then reads it.
        Format::Python => return py::append(text, key, value),
        Format::Toml => return Err(absent()),
    };
    let out = match format {
        Format::Json => {
            let open = text.find('{').ok_or_else(absent)?;
            if !text[..open].trim().is_empty() {
                return Err(absent());
            }
            let after = &text[open + 1..];
            let gap_len = after.len() - after.trim_start().len();
            let (gap, rest) = after.split_at(gap_len);
            let member = format!(
                "{}: {rendered}",
                json::render(&Scalar::Str(key.into()), "\"\"")
            );
            if rest.starts_with('}') {
                format!("{}{{{member}{after}", &text[..open])
            } else {
                format!("{}{{{gap}{member},{gap}{rest}", &text[..open])
            }
        }
        _ => {
            let block = text.lines().find(|l| {
                let t = l.trim_start();
                !t.is_empty() && !t.starts_with('#') && !t.starts_with("---") && !t.starts_with('%')
            });
            // A flow mapping or a document that is not a mapping at all: not ours to extend.
            if block.is_none_or(|l| l.starts_with(['{', '[', '-', ' ', '\t'])) {
                return Err(absent());
            }
            let sep = if text.is_empty() || text.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            format!("{text}{sep}{key}: {rendered}\n")
        }
    };
    // The edit must read back as the value, or it is not made.
    match locate(format, &out, key) {
        Ok(found) if found.value.same(value) => Ok(out),
        _ => Err(absent()),
    }
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

#[cfg(test)]
mod insert_tests {
    use super::{set, EditError, Format, Scalar};

    #[test]
    fn an_absent_top_level_key_is_written_in_where_the_format_allows() {
        let two = Scalar::Int(2);
        let key = "gradient_accumulation_steps";
        for (format, text, expected) in [
            (
                Format::Json,
                "{\n  \"per_device_train_batch_size\": 8,\n  \"output_dir\": \"out\"\n}\n",
                "{\n  \"gradient_accumulation_steps\": 2,\n  \"per_device_train_batch_size\": 8,\n  \"output_dir\": \"out\"\n}\n",
            ),
            (
                Format::Json,
                "{\"train_micro_batch_size_per_gpu\": 16}",
                "{\"gradient_accumulation_steps\": 2,\"train_micro_batch_size_per_gpu\": 16}",
            ),
            (Format::Json, "{}", "{\"gradient_accumulation_steps\": 2}"),
            (
                Format::Yaml,
                "# args\nper_device_train_batch_size: 8\noutput_dir: out\n",
                "# args\nper_device_train_batch_size: 8\noutput_dir: out\ngradient_accumulation_steps: 2\n",
            ),
            (
                Format::Yaml,
                "per_device_train_batch_size: 8",
                "per_device_train_batch_size: 8\ngradient_accumulation_steps: 2\n",
            ),
        ] {
            assert_eq!(set(format, text, key, &two).unwrap(), expected, "{text:?}");
        }
    }

    #[test]
    fn nested_keys_other_formats_and_odd_documents_stay_absent() {
        let two = Scalar::Int(2);
        for (format, text, key) in [
            (
                Format::Json,
                "{\"trainer\": {}}",
                "trainer.accumulate_grad_batches",
            ),
            (Format::Json, "[1, 2]", "gradient_accumulation_steps"),
            (Format::Yaml, "{a: 1}\n", "gradient_accumulation_steps"),
            (Format::Yaml, "- 1\n- 2\n", "gradient_accumulation_steps"),
            (Format::Toml, "a = 1\n", "gradient_accumulation_steps"),
            (Format::Python, "class A:\n    b = 1\n", "A.grad_accum"),
        ] {
            assert!(
                matches!(
                    set(format, text, key, &two),
                    Err(EditError::NotFound { .. })
                ),
                "{key} in {text:?}"
            );
        }
    }
}
