//! Knobs seen from inside the job: what the probe reported of where a Python job keeps its
//! batch when the command and the files it names do not say (issue 39). Three kinds of report
//! come from the probe ([`crate::probe`] reads them off its pipe): the options of the
//! command-line parser the job built (argparse and what builds on it), with their parsed values;
//! a framework's arguments object at its construction (a row of the probe's one table:
//! Hugging Face `TrainingArguments`, Lightning's `Trainer` with the batch where its
//! BatchSizeFinder looks); and the DataLoaders the job made, with where.
//!
//! [`adopt`] turns such a report into knobs, once, after the attempt that made it: a parser's
//! batch and accumulation options become flags added to the command as separate words (the
//! command stays the authority: they only fill what it lacks), a framework's fields become
//! [`Place::Inside`] knobs that the probe sets in the next attempt before the framework checks
//! them. It decides nothing else and reads no file: everything here is the job's word, so it is
//! bounded, a flag is added only under a name oomguard knows already (never one the job sent),
//! and a field name is taken only as a plain identifier. [`loader_line`] names the DataLoader
//! where nothing could be adopted.

use std::ffi::OsString;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::argv::{self, ACCUM_FLAGS, BATCH_FLAGS};
use super::{default_causes, Knob, KnobSet, Moves, Place, Rule, Step, Value, ACCUM, BATCH};

/// The environment variable that asks the probe to set a framework's batch and accumulation:
/// `ROW BATCH ACCUM` (`transformers 16 2`).
pub const SET_VAR: &str = "OOMGUARD_PROBE_SET";

/// The most of each kind of report kept from one attempt (the probe sends fewer; a job that
/// sends more is not believed further).
pub const OPTIONS_MAX: usize = 64;
pub const FRAMEWORKS_MAX: usize = 16;
pub const LOADERS_MAX: usize = 16;
/// The longest text kept of any reported string.
const TEXT_MAX_CHARS: usize = 200;

/// What the probe saw of the job's knobs in one attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Seen {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<SeenOption>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub frameworks: Vec<SeenFramework>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loaders: Vec<SeenLoader>,
}

impl Seen {
    pub fn is_empty(&self) -> bool {
        self.options.is_empty() && self.frameworks.is_empty() && self.loaders.is_empty()
    }

    /// Keeps a report within the bounds.
    pub fn option(&mut self, option: SeenOption) {
        if self.options.len() < OPTIONS_MAX {
            self.options.push(option);
        }
    }

    pub fn framework(&mut self, framework: SeenFramework) {
        if self.frameworks.len() < FRAMEWORKS_MAX {
            self.frameworks.push(framework);
        }
    }

    pub fn loader(&mut self, loader: SeenLoader) {
        if self.loaders.len() < LOADERS_MAX {
            self.loaders.push(loader);
        }
    }
}

/// One option of a parser the job built for its command line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SeenOption {
    pub pid: u32,
    /// The parser's number within its process.
    pub parser: u32,
    /// The process's `sys.argv[0]`: the script that parsed.
    pub argv0: String,
    /// Its option strings (`-b`, `--batch-size`).
    pub strings: Vec<String>,
    pub dest: String,
    /// The parsed value, where it is a whole number.
    pub value: Option<u64>,
}

/// A framework's arguments object, as the probe's table row reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SeenFramework {
    pub pid: u32,
    /// The row of the probe's table (`transformers`, `lightning`).
    pub row: String,
    pub class: String,
    pub batch_field: String,
    pub accum_field: String,
    pub batch: Option<u64>,
    pub accum: Option<u64>,
    /// The user's code that built it (`train.py:40`).
    #[serde(rename = "where")]
    pub place: String,
    /// The probe set the values oomguard asked for.
    pub set: bool,
}

/// A DataLoader the job made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SeenLoader {
    pub pid: u32,
    pub batch: Option<u64>,
    #[serde(rename = "where")]
    pub place: String,
}

/// A reported string cut to the bound, its control characters shown as `?`: the probe's texts
/// are the job's, and some reach oomguard's own lines.
pub fn bounded(text: &str) -> String {
    text.chars()
        .take(TEXT_MAX_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Knobs found inside the job, and the line that says where.
#[derive(Debug, Clone)]
pub struct Adopted {
    pub set: KnobSet,
    pub line: String,
}

/// What `seen` adds to `set`, where it adds anything: a batch (with its accumulation where the
/// job has one) where the command had none, or the accumulation the command's batch lacked.
/// Only for knobs found automatically (a job file's `[[knob]]` ladder is the user's word), and
/// only from the parser of the command's own script.
pub fn adopt(set: &KnobSet, command: &[OsString], seen: &Seen, min_batch: u64) -> Option<Adopted> {
    if !set.automatic {
        return None;
    }
    match set.batch() {
        Some(batch) => fill_accum(set, command, seen, batch),
        None => add_batch(set, command, seen, min_batch),
    }
}

/// The command's batch flag has no accumulation beside it: the script's parser's
/// accumulation option, added as a flag.
fn fill_accum(set: &KnobSet, command: &[OsString], seen: &Seen, batch: usize) -> Option<Adopted> {
    if set.accum().is_some() || set.kept_by_job || set.knobs[batch].rule.partner.is_some() {
        return None;
    }
    let Place::Argv(place) = &set.knobs[batch].place else {
        return None;
    };
    let batch_name = place.name();
    let parser = parsers(command, seen)
        .into_iter()
        .find(|p| p.iter().any(|o| o.strings.iter().any(|s| s == batch_name)))?;
    let (name, value) = known(&parser, ACCUM_FLAGS)?;
    // Beside the batch: at the end of the part of the command its flag is in.
    let at = match place {
        argv::Place::Flag { sites, .. } => sites.last().map_or(command.len(), |site| {
            let (argv::Site::Separate(i) | argv::Site::Joined(i)) = site;
            argv::part_end(command, *i)
        }),
        _ => command.len(),
    };
    let mut set = set.clone();
    let joined = joined_in_command(command, batch_name);
    set.knobs.push(accum_knob(name, value, at, joined));
    set.knobs[batch].rule.partner = Some(set.knobs.len() - 1);
    let line = format!(
        "accumulation: {name} of the script's parser, {value} (its default), added beside {batch_name} to keep the effective batch"
    );
    Some(Adopted { set, line })
}

/// No batch in the command: the script's parser's batch option (with its accumulation), else a
/// framework's arguments object that holds both.
fn add_batch(set: &KnobSet, command: &[OsString], seen: &Seen, min_batch: u64) -> Option<Adopted> {
    let mut set = set.clone();
    for parser in parsers(command, seen) {
        let Some((name, value)) = known(&parser, BATCH_FLAGS) else {
            continue;
        };
        let accum = known(&parser, ACCUM_FLAGS);
        let partner = accum.map(|_| set.knobs.len() + 1);
        set.knobs.push(Knob {
            name: BATCH.into(),
            place: Place::Argv(argv::Place::Absent {
                name: name.to_string(),
                at: command.len(),
            }),
            original: Value::Int(value),
            rule: batch_rule(min_batch, partner),
        });
        let mut line = format!("batch: {name} of the script's parser, {value} (its value when no flag gives one), added to the command on a relaunch");
        if let Some((accum_name, accum_value)) = accum {
            set.knobs
                .push(accum_knob(accum_name, accum_value, command.len(), false));
            line.push_str(&format!(", with {accum_name} {accum_value}"));
        }
        return Some(Adopted { set, line });
    }
    let framework = seen.frameworks.iter().find(|f| {
        f.batch.is_some_and(|b| b >= 1)
            && f.accum.is_some_and(|a| a >= 1)
            && [&f.row, &f.batch_field, &f.accum_field, &f.class]
                .iter()
                .all(|t| identifier(t))
    })?;
    let (batch, accum) = (framework.batch?, framework.accum?);
    let inside = |field: &str| Place::Inside {
        row: framework.row.clone(),
        field: field.to_string(),
    };
    let first = set.knobs.len();
    set.knobs.push(Knob {
        name: BATCH.into(),
        place: inside(&framework.batch_field),
        original: Value::Int(batch),
        rule: batch_rule(min_batch, Some(first + 1)),
    });
    set.knobs.push(Knob {
        name: ACCUM.into(),
        place: inside(&framework.accum_field),
        original: Value::Int(accum),
        rule: partner_rule(),
    });
    let line = format!(
        "batch: {} {batch} and {} {accum} of the job's {} (built at {}), set inside the job on a relaunch",
        framework.batch_field,
        framework.accum_field,
        framework.class,
        framework.place,
    );
    Some(Adopted { set, line })
}

/// Where the job's DataLoader took a batch oomguard cannot move, for the line that ends a run
/// with no batch: `the job's DataLoader at train.py:30 has batch_size 64 written in: make it a
/// flag, or name it with --batch-arg`.
pub fn loader_line(seen: &Seen) -> Option<String> {
    let loader = seen
        .loaders
        .iter()
        .find(|l| l.batch.is_some_and(|b| b > 1))?;
    Some(format!(
        "the job's DataLoader at {} has batch_size {} written in: make it a flag of the script, or name it with --batch-arg",
        loader.place,
        loader.batch?,
    ))
}

/// The options of each parser that parsed the command's own script's arguments, one list per
/// parser, in the order they were reported.
fn parsers<'a>(command: &[OsString], seen: &'a Seen) -> Vec<Vec<&'a SeenOption>> {
    let script = script_stem(command);
    let mut out: Vec<((u32, u32), Vec<&SeenOption>)> = Vec::new();
    for option in &seen.options {
        if script.as_deref() != Some(stem(&option.argv0)) {
            continue;
        }
        let key = (option.pid, option.parser);
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, options)) => options.push(option),
            None => out.push((key, vec![option])),
        }
    }
    out.into_iter().map(|(_, options)| options).collect()
}

/// The command's script as `sys.argv[0]` names it, without directory or `.py`: `train` for
/// `python dir/train.py`, `train` for `python -m pkg.train`, the program itself for a console
/// script (`trl`).
fn script_stem(command: &[OsString]) -> Option<String> {
    let launch = argv::launch(command);
    match launch.script {
        Some(script) => {
            let last = if script.ends_with(".py") || script.contains('/') {
                stem(&script)
            } else {
                script.rsplit('.').next().unwrap_or(&script)
            };
            Some(last.to_string())
        }
        None => command
            .first()
            .map(|p| stem(&p.to_string_lossy()).to_string()),
    }
}

fn stem(path: &str) -> &str {
    let name = Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path);
    name.strip_suffix(".py").unwrap_or(name)
}

/// The first of `names` (oomguard's own list, most specific first) that the parser has, with
/// its parsed value where that is a whole number of at least 1: the name is always oomguard's
/// spelling, never one the job sent.
fn known(parser: &[&SeenOption], names: &'static [&'static str]) -> Option<(&'static str, u64)> {
    names.iter().find_map(|name| {
        parser
            .iter()
            .find(|o| o.strings.iter().any(|s| s == name))
            .and_then(|o| o.value.filter(|&v| v >= 1))
            .map(|v| (*name, v))
    })
}

/// Whether the command writes `name` as `name=VALUE`: an added partner is then written the
/// same way (a configurator that takes `--key=value` only).
fn joined_in_command(command: &[OsString], name: &str) -> bool {
    command.iter().any(|t| {
        t.to_str()
            .and_then(|t| t.strip_prefix(name))
            .is_some_and(|rest| rest.starts_with('='))
    })
}

fn accum_knob(name: &str, value: u64, at: usize, joined: bool) -> Knob {
    let place = match joined {
        true => argv::Place::absent_joined(name, at),
        false => argv::Place::Absent {
            name: name.to_string(),
            at,
        },
    };
    Knob {
        name: ACCUM.into(),
        place: Place::Argv(place),
        original: Value::Int(value),
        rule: partner_rule(),
    }
}

fn batch_rule(min_batch: u64, partner: Option<usize>) -> Rule {
    Rule {
        name: BATCH.into(),
        moves: Moves::Step {
            step: Step::Halve,
            min: min_batch,
        },
        on: default_causes(),
        partner,
    }
}

fn partner_rule() -> Rule {
    Rule {
        name: ACCUM.into(),
        moves: Moves::Partner,
        on: default_causes(),
        partner: None,
    }
}

/// A plain identifier of at most 64 characters: what a row, class or field name must be to be
/// shown and passed back to the probe.
fn identifier(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !text.starts_with(|c: char| c.is_ascii_digit())
}

/// The value of [`SET_VAR`] that gives the inside knobs of `set` the values `values`; `None`
/// where no inside knob moved from its original (the job then runs as it would alone).
pub fn set_var(set: &KnobSet, values: &[Value]) -> Option<String> {
    let mut row = None;
    let mut moved = false;
    for (knob, value) in set.knobs.iter().zip(values) {
        if let Place::Inside { row: r, .. } = &knob.place {
            row = Some(r.clone());
            moved |= !knob.original.same(value);
        }
    }
    let row = row.filter(|_| moved)?;
    Some(format!(
        "{row} {} {}",
        set.batch_of(values)?,
        set.accum_of(values)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{argv, words};

    fn option(argv0: &str, strings: &str, value: Option<u64>) -> SeenOption {
        SeenOption {
            pid: 10,
            parser: 1,
            argv0: argv0.into(),
            strings: strings.split(' ').map(String::from).collect(),
            dest: strings
                .rsplit(' ')
                .next()
                .unwrap()
                .trim_start_matches('-')
                .replace('-', "_"),
            value,
        }
    }

    fn hf(batch: Option<u64>, accum: Option<u64>) -> SeenFramework {
        SeenFramework {
            pid: 10,
            row: "transformers".into(),
            class: "TrainingArguments".into(),
            batch_field: "per_device_train_batch_size".into(),
            accum_field: "gradient_accumulation_steps".into(),
            batch,
            accum,
            place: "train.py:40".into(),
            set: false,
        }
    }

    fn automatic() -> KnobSet {
        KnobSet {
            automatic: true,
            ..KnobSet::default()
        }
    }

    /// The command's own knobs, as the resolver finds them.
    fn resolved(command: &[OsString]) -> KnobSet {
        let cwd = std::env::temp_dir();
        crate::knobs::resolve::resolve(&crate::knobs::reader::Request::plain(command, &cwd))
            .unwrap()
    }

    /// (name, where, original) of each knob, and the relaunch's argv and variable with the
    /// batch halved and the accumulation doubled.
    fn after(command: &str, seen: &Seen) -> Option<(Vec<String>, String, Option<String>)> {
        let command = argv(command);
        let set = resolved(&command);
        let adopted = adopt(&set, &command, seen, 1)?;
        let set = adopted.set;
        let knobs = set
            .knobs
            .iter()
            .enumerate()
            .filter(|(_, k)| k.name != "workers")
            .map(|(i, k)| format!("{} {} {}", k.name, set.label(i), k.original))
            .collect();
        let mut values = set.originals();
        let (b, a) = (set.batch().unwrap(), set.accum().unwrap());
        values[b] = Value::Int(set.batch_of(&values).unwrap() / 2);
        values[a] = Value::Int(set.accum_of(&values).unwrap() * 2);
        let input = set.input(&command, &values, &[]);
        Some((knobs, words(&input.argv), set_var(&set, &values)))
    }

    #[test]
    fn what_the_job_showed_becomes_knobs_only_where_the_command_lacks_them() {
        let parser = |argv0: &str| Seen {
            options: vec![
                option(argv0, "-b --batch-size", Some(64)),
                option(argv0, "--gradient_accumulation_steps", Some(1)),
                option(argv0, "--num_workers", Some(4)),
            ],
            ..Seen::default()
        };
        const BOTH: [&str; 2] = [
            "batch --batch-size 64",
            "accum --gradient_accumulation_steps 1",
        ];
        const HF: [&str; 2] = [
            "batch per_device_train_batch_size 32",
            "accum gradient_accumulation_steps 1",
        ];
        // (command, what the probe saw, the knobs added, the relaunch's command and variable)
        type Want = Option<(&'static [&'static str], &'static str, Option<&'static str>)>;
        let table: Vec<(&str, Seen, Want)> = vec![
            // The parser's defaults: both added as separate words at the end.
            (
                "python train.py --lr 3e-4",
                parser("train.py"),
                Some((&BOTH, "python train.py --lr 3e-4 --batch-size 32 --gradient_accumulation_steps 2", None)),
            ),
            // Behind torchrun, the script named with its directory.
            (
                "torchrun --nproc_per_node 2 src/train.py",
                parser("/work/src/train.py"),
                Some((&BOTH, "torchrun --nproc_per_node 2 src/train.py --batch-size 32 --gradient_accumulation_steps 2", None)),
            ),
            // Another program's parser (a launcher's) is not the script's.
            ("python train.py", parser("accelerate"), None),
            // The command's batch lacks its accumulation: the parser's is added beside it...
            (
                "python train.py --batch-size 64",
                parser("train.py"),
                Some((&BOTH, "python train.py --batch-size 32 --gradient_accumulation_steps 2", None)),
            ),
            // ... in the equals form where the command writes its batch so.
            (
                "python train.py --batch-size=64",
                parser("train.py"),
                Some((&BOTH, "python train.py --batch-size=32 --gradient_accumulation_steps=2", None)),
            ),
            // In the batch's own part of the command.
            (
                "uv run -- python train.py --batch-size 64 -- --extra",
                parser("train.py"),
                Some((&BOTH, "uv run -- python train.py --batch-size 32 --gradient_accumulation_steps 2 -- --extra", None)),
            ),
            // The command has both: nothing is added.
            ("python train.py --batch-size 64 --gradient_accumulation_steps 1", parser("train.py"), None),
            // A framework's arguments object: set inside the job, the command unchanged.
            (
                "python train.py",
                Seen { frameworks: vec![hf(Some(32), Some(1))], ..Seen::default() },
                Some((&HF, "python train.py", Some("transformers 16 2"))),
            ),
            // A framework without its accumulation is not moved inside the job.
            ("python train.py", Seen { frameworks: vec![hf(Some(32), None)], ..Seen::default() }, None),
            // Field names that are not plain identifiers are not the probe's.
            (
                "python train.py",
                Seen {
                    frameworks: vec![SeenFramework { batch_field: "a b\u{1b}[2J".into(), ..hf(Some(32), Some(1)) }],
                    ..Seen::default()
                },
                None,
            ),
            // A parser's batch that is no whole number is no knob.
            ("python train.py", Seen { options: vec![option("train.py", "--batch_size", None)], ..Seen::default() }, None),
            // A name the job made up is never added: only oomguard's own names count.
            ("python train.py", Seen { options: vec![option("train.py", "--batch_size;rm", Some(8))], ..Seen::default() }, None),
        ];
        for (command, seen, want) in table {
            let want = want.map(|(knobs, line, var)| {
                (
                    knobs.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                    line.to_string(),
                    var.map(String::from),
                )
            });
            assert_eq!(after(command, &seen), want, "{command}");
        }
    }

    #[test]
    fn a_job_file_ladder_is_never_added_to() {
        let seen = Seen {
            frameworks: vec![hf(Some(32), Some(1))],
            ..Seen::default()
        };
        let set = KnobSet::default();
        assert!(adopt(&set, &argv("python train.py"), &seen, 1).is_none());
        assert!(adopt(&automatic(), &argv("python train.py"), &seen, 1).is_some());
    }

    #[test]
    fn the_dataloader_is_named_where_nothing_moves() {
        let seen = Seen {
            loaders: vec![
                SeenLoader {
                    pid: 1,
                    batch: Some(1),
                    place: "eval.py:3".into(),
                },
                SeenLoader {
                    pid: 1,
                    batch: Some(64),
                    place: bounded("train.py:30\u{1b}[2J\n"),
                },
            ],
            ..Seen::default()
        };
        let line = loader_line(&seen).unwrap();
        assert!(
            line.starts_with("the job's DataLoader at train.py:30"),
            "{line}"
        );
        assert!(!line.contains('\u{1b}'), "{line}");
        assert!(line.contains("batch_size 64"), "{line}");
        assert_eq!(loader_line(&Seen::default()), None);
    }
}
