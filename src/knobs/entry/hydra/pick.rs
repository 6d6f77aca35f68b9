//! Picking the knobs from the composed config: the training batch (a key ending in `batch_size`
//! that holds a whole number; an evaluation one only when it is the only kind), the accumulation
//! (`accumulate_grad_batches`, `gradient_accumulation_steps`, else one added to a `trainer`
//! mapping), where each was set, and the notes that say so. Both move by overrides on the
//! command line: an override the command has is changed there, a key set in a file gets one
//! added. A value that is no number (an interpolation, `???`) is said, never guessed. Composing
//! the config is [`super::compose`]'s.

use std::ffi::OsString;

use super::command_line::CommandLine;
use super::compose::Composer;
use super::tree::{leaves, Leaf, Node, Origin};
use super::NAME;
use crate::knobs::argv;
use crate::knobs::entry::Found;
use crate::knobs::file::{yaml, Scalar};
use crate::knobs::reader::KnobError;
use crate::knobs::Place;

/// Accumulation key suffixes, as [`argv`] knows them on the command line.
const ACCUM_SUFFIXES: &[&str] = &["accumulate_grad_batches", "gradient_accumulation_steps"];

/// A value of the composed config, read as a count.
#[derive(Debug, Clone, PartialEq)]
enum Reading {
    Count(u64),
    /// `${…}`: OmegaConf resolves it when the job reads it; oomguard does not guess.
    Interpolation(String),
    /// Anything else, as written or why it cannot be read.
    Other(String),
}

/// A key of the composed config: its value and where it was set.
struct Entry<'a> {
    key: String,
    leaf: &'a Leaf,
}

impl Composer<'_> {
    /// What `leaf` holds, read as its file types it.
    fn read(&self, argv: &[OsString], leaf: &Leaf) -> Reading {
        let text = match &leaf.text {
            Some(t) => t.clone(),
            None => return Reading::Other("a YAML alias".into()),
        };
        if text.contains("${") {
            return Reading::Interpolation(text);
        }
        match &leaf.from {
            Origin::Override { index } => {
                let written = argv[*index]
                    .to_str()
                    .and_then(|t| t.split_once('='))
                    .map_or(text.clone(), |(_, v)| v.to_string());
                match written.parse::<u64>() {
                    Ok(n) if n >= 1 => Reading::Count(n),
                    _ => Reading::Other(format!("`{written}`")),
                }
            }
            Origin::File { file, key } => match yaml::locate(&self.sources[*file].text, key) {
                Ok(found) => match found.value {
                    Scalar::Int(n) if n >= 1 => Reading::Count(n as u64),
                    _ => Reading::Other(format!("`{}`", &self.sources[*file].text[found.span])),
                },
                Err(e) => Reading::Other(e.to_string()),
            },
        }
    }

    /// "in conf/data/mnist.yaml (group data=mnist)" or "on the command line (`k=v`)".
    fn origin(&self, argv: &[OsString], leaf: &Leaf) -> String {
        match &leaf.from {
            Origin::File { file, .. } => {
                let s = &self.sources[*file];
                match &s.choice {
                    Some(choice) => format!("in {} (group {choice})", s.shown.display()),
                    None => format!("in {}", s.shown.display()),
                }
            }
            Origin::Override { index } => {
                format!("on the command line (`{}`)", argv[*index].to_string_lossy())
            }
        }
    }
}

/// Training keys before evaluation ones, each kind in config order.
fn training_first<'a, 'b>(mut v: Vec<&'a Entry<'b>>) -> Vec<&'a Entry<'b>> {
    v.sort_by_key(|e| argv::is_eval_like(&e.key));
    v
}
/// The batch and accumulation of the composed `config`.
pub(super) fn pick(
    argv: &[OsString],
    line: &CommandLine,
    composer: &Composer,
    config: &Node,
) -> Result<Option<Found>, KnobError> {
    let entries = entries(config);
    let batches = training_first(
        entries
            .iter()
            .filter(|e| last_segment(&e.key).ends_with("batch_size") && !e.leaf.is_null())
            .collect(),
    );
    if batches.is_empty() {
        return Ok(None);
    }
    let (batch, value) = choose_batch(argv, composer, &batches)?;
    let batch_place = place_of(argv, line, batch, "--batch-arg")?;
    let mut notes = batch_notes(argv, composer, &batches, batch, value);
    let accum = accumulation(argv, line, composer, config, &entries, &mut notes)?;
    Ok(Some(Found {
        entrypoint: NAME,
        batch: (Place::Argv(batch_place), value),
        accum,
        kept_by_job: false,
        no_accumulation: None,
        notes,
    }))
}

/// Every key of the composed config with its value, Hydra's own (`hydra.*`) left out: it is no
/// knob of the job's.
fn entries(config: &Node) -> Vec<Entry<'_>> {
    let mut all = Vec::new();
    leaves(config, "", &mut all);
    all.into_iter()
        .filter(|(key, _)| key != "hydra" && !key.starts_with("hydra."))
        .map(|(key, leaf)| Entry { key, leaf })
        .collect()
}

/// The last segment of a dotted key (`data.batch_size` → `batch_size`).
fn last_segment(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

/// The first training batch that is a number; an evaluation one only when no other is there.
/// None that is a number → refused, naming the first and how to give it.
fn choose_batch<'a, 'b>(
    argv: &[OsString],
    composer: &Composer,
    batches: &[&'a Entry<'b>],
) -> Result<(&'a Entry<'b>, u64), KnobError> {
    let first = batches[0];
    let chosen = batches
        .iter()
        .filter(|e| argv::is_eval_like(&e.key) == argv::is_eval_like(&first.key))
        .find_map(|e| match composer.read(argv, e.leaf) {
            Reading::Count(n) => Some((*e, n)),
            _ => None,
        });
    chosen.ok_or_else(|| {
        let why = match composer.read(argv, first.leaf) {
            Reading::Interpolation(text) => format!(
                "is `{text}`, an interpolation, not a number: oomguard does not guess what it resolves to"
            ),
            Reading::Other(what) => format!("is {what}, not a whole number above 0"),
            Reading::Count(_) => unreachable!("a count would have been chosen"),
        };
        KnobError::Knob {
            where_: format!("{NAME} config"),
            problem: format!(
                "the batch `{}` {} {why}; give it on the command line ({}=N) to have it moved",
                first.key,
                composer.origin(argv, first.leaf),
                first.key
            ),
        }
    })
}

/// Where the override for `entry` goes: the command's own word where an override set it (found
/// as `flag` would name it), else a `key=N` added where the script's arguments end.
fn place_of(
    argv: &[OsString],
    line: &CommandLine,
    entry: &Entry,
    flag: &str,
) -> Result<argv::Place, KnobError> {
    Ok(match &entry.leaf.from {
        Origin::Override { .. } => argv::locate_flag(argv, &entry.key, flag)?.0,
        Origin::File { .. } => argv::Place::Absent {
            name: entry.key.clone(),
            at: line.end,
        },
    })
}

/// What the notes say of the batch chosen: where it was set and how it moves, that it looks
/// like an evaluation setting, and the other batches left alone.
fn batch_notes(
    argv: &[OsString],
    composer: &Composer,
    batches: &[&Entry],
    batch: &Entry,
    value: u64,
) -> Vec<String> {
    let mut notes = vec![format!(
        "batch: `{}` {}, {value}; changed with the override {}=N",
        batch.key,
        composer.origin(argv, batch.leaf),
        batch.key
    )];
    if argv::is_eval_like(&batch.key) {
        notes.push(format!(
            "batch: `{}` looks like an evaluation setting, the only batch in the config: give the training one on the command line (KEY=N) to have it moved instead",
            batch.key
        ));
    }
    let others: Vec<String> = batches
        .iter()
        .filter(|e| e.key != batch.key)
        .map(|e| format!("`{}`", e.key))
        .collect();
    if !others.is_empty() {
        notes.push(format!(
            "batch: the config also has {}, left alone",
            others.join(", ")
        ));
    }
    notes
}

/// The accumulation: the first training key ending in an [`ACCUM_SUFFIXES`] suffix, moved where
/// it was set; without one, an override added to the `trainer` mapping (Lightning's) where there
/// is one; else none, and the note says the effective batch will shrink.
fn accumulation(
    argv: &[OsString],
    line: &CommandLine,
    composer: &Composer,
    config: &Node,
    entries: &[Entry],
    notes: &mut Vec<String>,
) -> Result<Option<(Place, Option<u64>)>, KnobError> {
    let accums = training_first(
        entries
            .iter()
            .filter(|e| {
                let last = last_segment(&e.key);
                ACCUM_SUFFIXES.iter().any(|s| last.ends_with(s)) && !e.leaf.is_null()
            })
            .collect(),
    );
    let has_trainer = matches!(config, Node::Map(entries) if entries.iter().any(|(k, v)| k == "trainer" && matches!(v, Node::Map(_))));
    Ok(match accums.first() {
        Some(a) => match composer.read(argv, a.leaf) {
            Reading::Count(n) => {
                let how = match &a.leaf.from {
                    Origin::Override { .. } => "changed there".to_string(),
                    Origin::File { .. } => format!("changed with the override {}=N", a.key),
                };
                notes.push(format!(
                    "accumulation: `{}` {}, {n}; {how}",
                    a.key,
                    composer.origin(argv, a.leaf)
                ));
                let place = place_of(argv, line, a, "--accum-arg")?;
                Some((Place::Argv(place), Some(n)))
            }
            reading => {
                notes.push(not_a_count(argv, composer, a, reading));
                None
            }
        },
        None if has_trainer => {
            let name = "+trainer.accumulate_grad_batches";
            notes.push(format!(
                "accumulation: none in the config; the `trainer` mapping gets the override {name}=N when the batch moves"
            ));
            Some((
                Place::Argv(argv::Place::Absent {
                    name: name.to_string(),
                    at: line.end,
                }),
                None,
            ))
        }
        None => {
            notes.push(format!(
                "accumulation: none in the config (no key ending in {}) and no `trainer` mapping: the effective batch will shrink with the batch",
                ACCUM_SUFFIXES.join(" or ")
            ));
            None
        }
    })
}

/// The note for an accumulation that holds no count: left alone, so the effective batch shrinks.
fn not_a_count(argv: &[OsString], composer: &Composer, accum: &Entry, reading: Reading) -> String {
    let what = match reading {
        Reading::Interpolation(text) => format!("`{text}`, an interpolation, not a number"),
        Reading::Other(what) => format!("{what}, not a whole number above 0"),
        Reading::Count(_) => unreachable!("a count is moved, not noted"),
    };
    format!(
        "accumulation: `{}` {} is {what}: oomguard leaves it alone, so the effective batch will shrink with the batch",
        accum.key,
        composer.origin(argv, accum.leaf)
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::{absent, found};
    use super::*;
    use crate::test_util::argv;

    /// One fixture run: project, command, the batch found (key, value), the accumulation found
    /// (key, value), and words the notes must hold.
    type Row = (
        &'static str,
        &'static str,
        (&'static str, u64),
        Option<(&'static str, Option<u64>)>,
        &'static [&'static str],
    );

    /// The fixture runs of [`composed_configs_give_the_batch_and_accumulation`], a composition
    /// rule each.
    const COMPOSED: &[Row] = &[
        // A group's option under its group key; _self_ last, the primary keeps trainer's 2.
        (
            "basic",
            "python train.py",
            ("data.batch_size", 256),
            Some(("trainer.accumulate_grad_batches", Some(2))),
            &["batch: `data.batch_size` in conf/data/mnist.yaml (group data=mnist), 256; changed with the override data.batch_size=N"],
        ),
        // A group choice on the command line reads the other option.
        (
            "basic",
            "python train.py data=cifar",
            ("data.batch_size", 128),
            Some(("trainer.accumulate_grad_batches", Some(2))),
            &["(group data=cifar), 128"],
        ),
        // -cn picks another primary: _self_ first, so the group's value wins over its own.
        (
            "basic",
            "python train.py -cn self_first",
            ("data.batch_size", 256),
            Some(("trainer.accumulate_grad_batches", Some(2))),
            &["conf/data/mnist.yaml"],
        ),
        // _self_ last: the primary's own data.batch_size wins.
        (
            "basic",
            "python train.py --config-name self_last",
            ("data.batch_size", 64),
            Some(("trainer.accumulate_grad_batches", Some(2))),
            &["batch: `data.batch_size` in conf/self_last.yaml, 64"],
        ),
        // No accumulation but a trainer mapping: +trainer.accumulate_grad_batches.
        (
            "basic",
            "python train.py ~trainer.accumulate_grad_batches",
            ("data.batch_size", 256),
            Some(("+trainer.accumulate_grad_batches", None)),
            &["the `trainer` mapping gets the override +trainer.accumulate_grad_batches=N"],
        ),
        // An accumulation set on the command line is changed there.
        (
            "basic",
            "python train.py trainer.accumulate_grad_batches=4",
            ("data.batch_size", 256),
            Some(("trainer.accumulate_grad_batches", Some(4))),
            &["on the command line (`trainer.accumulate_grad_batches=4`), 4; changed there"],
        ),
        // @package _global_, optional missing option, override entry, training before eval.
        (
            "packages",
            "python app/main.py",
            ("loader.batch_size", 32),
            Some(("optim.gradient_accumulation_steps", Some(3))),
            &[
                "(group data=big), 32",
                "the config also has `loader.eval_batch_size`",
            ],
        ),
        // Nothing to accumulate with: the batch alone, said.
        (
            "packages",
            "python app/main.py optim=plain",
            ("loader.batch_size", 32),
            None,
            &["the effective batch will shrink"],
        ),
        // An interpolated accumulation is said, not guessed.
        (
            "packages",
            "python app/main.py optim=interp",
            ("loader.batch_size", 32),
            None,
            &["`${oc.env:ACCUM,2}`, an interpolation, not a number"],
        ),
    ];

    /// The fixture trees, each a composition rule: what is found, where, and what the job
    /// would read (checked against the real Hydra in tests/it/entrypoints_hydra.rs).
    #[test]
    fn composed_configs_give_the_batch_and_accumulation() {
        let table = COMPOSED;
        for (project, command, (batch, value), accum, notes) in table {
            let found = found(project, command)
                .unwrap_or_else(|e| panic!("{command}: {e}"))
                .unwrap_or_else(|| panic!("{command}: nothing found"));
            let end = argv(command).len();
            assert_eq!(found.entrypoint, "Hydra");
            assert_eq!(found.batch, (absent(batch, end), *value), "{command}");
            let want_accum = accum.map(|(key, n)| {
                let place = if command.contains(&format!("{key}=")) {
                    Place::Argv(
                        argv::locate_flag(&argv(command), key, "--accum-arg")
                            .unwrap()
                            .0,
                    )
                } else {
                    absent(key, end)
                };
                (place, n)
            });
            assert_eq!(found.accum, want_accum, "{command}");
            let text = found.notes.join("\n");
            for note in *notes {
                assert!(text.contains(note), "{command}: {note:?} not in\n{text}");
            }
        }
    }
}
