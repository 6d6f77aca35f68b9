//! Where a knob sits in argv ([`Place`]: a flag's occurrences, a flag to insert, a bare switch)
//! and the [`Edit`]s that give it a new value, made on a copy of argv by [`apply_edits`] with
//! every index into the original. It finds nothing: [`super::find`] and
//! [`super::locate`](mod@super::locate) say where knobs are.

use std::ffi::{OsStr, OsString};

#[cfg(test)]
use super::knobs::Knobs;
use super::knobs::{Accum, Knob, Site};
use super::names::is_pair_key;
use crate::knobs::Value;

/// Where a knob of the model sits in argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// `--flag N`, `--flag=N` or `key=N`: every occurrence, rewritten together.
    Flag { name: String, sites: Vec<Site> },
    /// Not in the command: inserted as `--flag N` (or `key=N`) at argv index `at` once it moves.
    /// A `name` that ends in `=` (`--batch_size=`, made by [`Place::absent_joined`]) is inserted
    /// as one token, `--batch_size=N`: a nanoGPT configurator takes nothing else, and a partner
    /// follows the batch flag's own spelling. Kept in the name rather than a field so every
    /// construction and pattern of this variant elsewhere reads as before.
    Absent { name: String, at: usize },
    /// A bare switch (`--use_fp16`) whose value is its presence: the indices of its
    /// occurrences (all removed to turn it off), and where to insert it to turn it on.
    Switch {
        name: String,
        sites: Vec<usize>,
        at: usize,
    },
}

impl Place {
    /// A flag absent from the command, inserted as one `NAME=N` token at argv index `at`.
    pub fn absent_joined(name: &str, at: usize) -> Place {
        Place::Absent {
            name: format!("{}=", name.trim_end_matches('=')),
            at,
        }
    }

    /// The flag or key as written (an equals-form absent flag without its `=`, a key added with
    /// its list flag without the flag: `train_dataloader.batch_size`).
    pub fn name(&self) -> &str {
        match self {
            Place::Flag { name, .. } | Place::Switch { name, .. } => name,
            Place::Absent { name, .. } => {
                let name = name.strip_suffix('=').unwrap_or(name);
                name.split_once(' ').map_or(name, |(_, key)| key)
            }
        }
    }

    /// Whether an absent flag is inserted in equals form, as one `--flag=N` token.
    pub fn is_joined(&self) -> bool {
        matches!(self, Place::Absent { name, .. } if name.starts_with('-') && name.ends_with('='))
    }

    /// The edits that give this place `value`. Call only for a value that differs from the
    /// command's own: at its original value a place is left exactly as written.
    pub fn edits(&self, argv: &[OsString], value: &Value, out: &mut Vec<Edit>) {
        match self {
            Place::Flag { sites, .. } => {
                for site in sites {
                    match *site {
                        Site::Separate(i) => {
                            out.push(Edit::Replace(i, value_text(value, &argv[i]).into()))
                        }
                        Site::Joined(i) => {
                            let (key, old) = argv[i]
                                .to_str()
                                .and_then(|t| t.split_once('='))
                                .expect("a joined site is a UTF-8 `key=value` token (find matched it as text)");
                            let token = format!("{key}={}", value_text(value, OsStr::new(old)));
                            out.push(Edit::Replace(i, token.into()));
                        }
                    }
                }
            }
            Place::Absent { name, at } => {
                let text = value_text(value, OsStr::new(""));
                let tokens: Vec<OsString> = if self.is_joined() {
                    vec![format!("{name}{text}").into()]
                } else if let Some((flag, key)) = name.split_once(' ') {
                    // An override added with its list flag (`--cfg-options key=N`).
                    vec![flag.into(), format!("{key}={text}").into()]
                } else if name.starts_with('-') || is_pair_key(name) {
                    vec![name.into(), text.into()]
                } else {
                    vec![format!("{name}={text}").into()]
                };
                out.push(Edit::Insert(*at, tokens));
            }
            Place::Switch { name, sites, at } => {
                if matches!(value, Value::Bool(true)) {
                    if sites.is_empty() {
                        out.push(Edit::Insert(*at, vec![name.into()]));
                    }
                } else {
                    out.extend(sites.iter().map(|&i| Edit::Remove(i)));
                }
            }
        }
    }
}

/// A value as a token, spelled like the one it replaces where that matters: Python's `True` /
/// `False` stay capitalised.
fn value_text(value: &Value, old: &OsStr) -> String {
    match value {
        Value::Bool(b) if old.to_str().is_some_and(|o| o == "True" || o == "False") => {
            if *b { "True" } else { "False" }.to_string()
        }
        other => other.to_string(),
    }
}

/// One change to argv, by index into the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    Replace(usize, OsString),
    Remove(usize),
    /// Tokens inserted before the original token at this index (`argv.len()`: at the end).
    Insert(usize, Vec<OsString>),
}

/// The argv with `edits` made. Indices are those of the original argv, so edits never shift
/// each other; insertions at one index keep their order.
pub fn apply_edits(argv: &[OsString], edits: &[Edit]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len() + edits.len());
    for i in 0..=argv.len() {
        for edit in edits {
            if let Edit::Insert(at, tokens) = edit {
                if *at == i {
                    out.extend(tokens.iter().cloned());
                }
            }
        }
        let Some(token) = argv.get(i) else { break };
        if edits.contains(&Edit::Remove(i)) {
            continue;
        }
        let replaced = edits.iter().rev().find_map(|e| match e {
            Edit::Replace(at, new) if *at == i => Some(new.clone()),
            _ => None,
        });
        out.push(replaced.unwrap_or_else(|| token.clone()));
    }
    out
}

impl Knob {
    /// Where it sits, as the knob model moves it.
    pub fn place(&self) -> Place {
        Place::Flag {
            name: self.name.clone(),
            sites: self.sites.clone(),
        }
    }
}

impl Accum {
    /// Where the accumulation knob sits, where oomguard can move it.
    pub fn place(&self) -> Option<Place> {
        match self {
            Accum::Present(knob) => Some(knob.place()),
            Accum::Appended {
                name, at, joined, ..
            } if *joined => Some(Place::absent_joined(name, *at)),
            Accum::Appended { name, at, .. } => Some(Place::Absent {
                name: name.clone(),
                at: *at,
            }),
            Accum::KeptByJob { .. } | Accum::None => None,
        }
    }
}

/// The command with the automatic batch and accumulation knobs at `batch` and `accum`; a knob
/// at its original value is left exactly as written.
#[cfg(test)]
pub(super) fn apply(
    argv: &[OsString],
    knobs: &Knobs,
    batch: u64,
    accum: Option<u64>,
) -> Vec<OsString> {
    let mut edits = Vec::new();
    if let Some(knob) = knobs.batch.as_ref().filter(|k| k.value != batch) {
        knob.place().edits(argv, &Value::Int(batch), &mut edits);
    }
    if let (Some(place), Some(value)) = (knobs.accum.place(), accum) {
        if knobs.accum_value() != Some(value) {
            place.edits(argv, &Value::Int(value), &mut edits);
        }
    }
    apply_edits(argv, &edits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{argv, words};

    #[test]
    fn a_joined_absent_place_is_one_token_and_named_without_its_equals() {
        let command = argv("python train.py config/train_gpt2.py");
        let place = Place::absent_joined("--batch_size", command.len());
        assert_eq!(place.name(), "--batch_size");
        assert!(place.is_joined());
        assert_eq!(place, Place::absent_joined("--batch_size=", command.len()));
        let mut edits = Vec::new();
        place.edits(&command, &Value::Int(6), &mut edits);
        assert_eq!(
            apply_edits(&command, &edits),
            argv("python train.py config/train_gpt2.py --batch_size=6")
        );
        // The plain forms are as they were.
        for (place, want) in [
            (
                Place::Absent {
                    name: "--batch_size".into(),
                    at: 3,
                },
                "python train.py config/train_gpt2.py --batch_size 6",
            ),
            (
                Place::Absent {
                    name: "data.batch_size".into(),
                    at: 3,
                },
                "python train.py config/train_gpt2.py data.batch_size=6",
            ),
        ] {
            assert!(!place.is_joined());
            let mut edits = Vec::new();
            place.edits(&command, &Value::Int(6), &mut edits);
            assert_eq!(words(&apply_edits(&command, &edits)), want);
        }
    }
}
