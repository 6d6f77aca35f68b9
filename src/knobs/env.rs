//! Environment variables as knobs: the job's value of a variable (what oomguard itself was started
//! with, since the job inherits it), and a knob's value as a variable's text. Setting it for an
//! attempt is [`crate::launch::child`]'s job, through [`crate::launch::child::Launch::env`].

use std::ffi::OsString;

use super::Value;

/// The value the job would see: oomguard's own, `Unset` when it has none.
pub fn current(name: &str) -> Result<Value, OsString> {
    match std::env::var_os(name) {
        None => Ok(Value::Unset),
        Some(raw) => match raw.to_str() {
            Some(text) => Ok(Value::parse_text(text)),
            None => Err(raw),
        },
    }
}

/// A value as a variable's text: `true`/`false` for booleans, digits for numbers.
pub fn value_text(value: &Value) -> OsString {
    match value {
        Value::Unset => OsString::new(),
        other => other.to_string().into(),
    }
}
