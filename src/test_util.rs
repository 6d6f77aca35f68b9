//! What the unit tests share: a command written as one line of words turned into the argv a
//! process gets, an argv back into one line for an assertion, and the project with a YAML
//! training config that both knob resolvers (the command's and a job file's) read. Compiled
//! for tests only, so no production code can come to lean on it; table rows stay with their
//! tests.

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

/// The training config of [`yaml_project`]'s `configs/default.yaml`.
pub const TRAINING_YAML: &str = "training:\n  batch_size: 64\n  gradient_accumulation_steps: 1\n  num_workers: 4\n  pin_memory: true\n  lr: 3e-4\n";

/// A project directory whose `configs/default.yaml` is [`TRAINING_YAML`].
pub fn yaml_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join("configs/default.yaml"), TRAINING_YAML).unwrap();
    dir
}
