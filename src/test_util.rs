//! What the unit tests share: a command written as one line of words turned into the argv a
//! process gets, and an argv back into one line for an assertion. Compiled for tests only, so
//! no production code can come to lean on it; fixtures and table rows stay with their tests.

use std::ffi::OsString;

/// `"python train.py --batch_size 8"` as the argv it stands for: split on whitespace, with no
/// quoting (a word with a space in it needs an argv written out).
pub fn argv(line: &str) -> Vec<OsString> {
    line.split_whitespace().map(OsString::from).collect()
}

/// An argv as one line, its words joined by single spaces (bytes that are not UTF-8 shown as
/// U+FFFD).
pub fn words(argv: &[OsString]) -> String {
    argv.iter()
        .map(|t| t.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
