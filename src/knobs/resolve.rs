//! Finds a run's knobs in its command before anything starts: the batch, its accumulation and
//! a workers flag (`--batch-arg` / `--accum-arg` may name a flag, `FILE:KEY` or `env:NAME`), or
//! where a training entrypoint keeps them ([`super::entry`]), a Python script's globals
//! included ([`super::entry::pyconfig`]). Reads what it must to know each knob's value — the
//! job's environment, the config files — and checks every knob can move as asked, so a missing
//! file, a key that is not there or a value that is not a number is one line before any process
//! or file exists. Writes nothing. The knobs a job file's `[[knob]]` ladder
//! names instead are read by [`crate::front::settings::job_knobs`].

use std::ffi::OsString;
use std::path::Path;

use super::argv;
use super::file::Format;
use super::reader::{count, env_value, label_of, Reader};
use super::{default_causes, Knob, KnobSet, Moves, Place, Rule, Step, Value};
use crate::judge::outcome::Cause;

pub use super::reader::{KnobError, Request};

/// A knob's place as `--batch-arg` / `--accum-arg` name it.
enum ArgSpec<'a> {
    Argv(&'a str),
    Env(&'a str),
    File { path: &'a str, key: &'a str },
}

impl<'a> ArgSpec<'a> {
    /// `env:NAME`, `FILE:KEY` (a file with an extension oomguard edits), else a flag or key.
    fn parse(text: &'a str) -> ArgSpec<'a> {
        if let Some(name) = text.strip_prefix("env:") {
            return ArgSpec::Env(name);
        }
        match text.rsplit_once(':') {
            Some((path, key))
                if !key.is_empty() && Format::from_path(Path::new(path)).is_some() =>
            {
                ArgSpec::File { path, key }
            }
            _ => ArgSpec::Argv(text),
        }
    }
}

/// The knobs found in the command, with the notes that say how they were found.
pub fn resolve(request: &Request) -> Result<KnobSet, KnobError> {
    Ok(with_context_notes(automatic(request)?, request.command))
}

/// `set` with the notes on the command's launchers put first: which were passed over, and what
/// the job itself does on an OOM. Whoever found the knobs, the notes are the command's.
pub fn with_context_notes(mut set: KnobSet, command: &[OsString]) -> KnobSet {
    let accum_moves = set.accum().is_some() || set.kept_by_job;
    set.notes
        .splice(0..0, argv::context_notes(command, accum_moves));
    set
}

/// Found automatically: the batch and accumulation of the command (or the places
/// `--batch-arg` / `--accum-arg` name), and a workers flag.
fn automatic(request: &Request) -> Result<KnobSet, KnobError> {
    let batch_spec = request.batch_arg.map(ArgSpec::parse);
    let accum_spec = request.accum_arg.map(ArgSpec::parse);
    // What the script's parser declares: short aliases of known flags, an accumulation flag.
    let declared = argv::declared::read(request.command, request.cwd).unwrap_or_default();
    let found = argv::locate_with(
        request.command,
        argv_name(&batch_spec),
        argv_name(&accum_spec),
        &declared,
    )?;
    let mut reader = Reader::new(request);
    let mut set = KnobSet {
        automatic: true,
        ..KnobSet::default()
    };
    if let Some(workers) = argv::find_workers(request.command) {
        set.knobs.push(Knob {
            name: "workers".into(),
            place: Place::Argv(workers.place()),
            original: Value::Int(workers.value),
            rule: Rule {
                name: "workers".into(),
                moves: Moves::Step {
                    step: Step::Halve,
                    min: 0,
                },
                on: vec![Cause::WorkerKilled],
                partner: None,
            },
        });
    }
    // The batch: the file key or variable named, or a flag found in the command.
    let batch = match named_place(&mut reader, "--batch-arg", batch_spec.as_ref(), false)? {
        Some((place, value)) => Some((place, value.expect("required above"))),
        None => {
            set.notes = found.choice_notes();
            set.kept_by_job = matches!(found.accum, argv::Accum::KeptByJob { .. });
            found
                .batch
                .as_ref()
                .map(|k| (Place::Argv(k.place()), k.value))
        }
    };
    let accum = match named_place(&mut reader, "--accum-arg", accum_spec.as_ref(), true)? {
        Some(named) => Some(named),
        None => found.accum.place().map(|place| {
            let value = match &found.accum {
                argv::Accum::Present(k) => Some(k.value),
                argv::Accum::Appended { from, .. } => *from,
                _ => None,
            };
            (Place::Argv(place), value)
        }),
    };
    // A Trainer flag the command moves must not be pinned by its DeepSpeed config as well.
    let moved: Vec<&str> = [found.batch.as_ref().map(|k| k.name.as_str())]
        .into_iter()
        .chain([match &found.accum {
            argv::Accum::Present(k) => Some(k.name.as_str()),
            _ => None,
        }])
        .flatten()
        .collect();
    super::entry::deepspeed::check_flags_agree(request, &moved)?;
    // LightningCLI's flag added to the command starts from what its configs set, not 1: else
    // the first relaunch would override a config's 4 with 2.
    let accum = match accum {
        Some((place, None)) if found.lightning && accum_spec.is_none() => {
            let configured = super::entry::lightning::configured_accum(request)?;
            set.notes.extend(found.lightning_note(configured));
            Some((place, configured))
        }
        other => other,
    };
    // A batch flag of a script that execs a configurator (nanoGPT's `--batch_size=32`): the
    // accumulation is one of its globals, so the partner added starts from the value they hold
    // (40, not 1) and is written as the configurator takes it, `--key=value`.
    let batch_is_flag = matches!(&batch, Some((Place::Argv(argv::Place::Flag { .. }), _)));
    let accum = match accum {
        None if batch_is_flag && accum_spec.is_none() && !set.kept_by_job => {
            super::entry::pyconfig::partner(request, None)
                .or_else(|| super::entry::mmengine::partner(request))
                .map(|(place, n, note)| {
                    set.notes.push(note);
                    (place, Some(n))
                })
        }
        Some((Place::Argv(argv::Place::Absent { name, at }), None))
            if batch_is_flag && matches!(accum_spec, Some(ArgSpec::Argv(_))) =>
        {
            match super::entry::pyconfig::partner(request, Some(&name)) {
                Some((place, n, note)) => {
                    set.notes.push(note);
                    Some((place, Some(n)))
                }
                None => Some((Place::Argv(argv::Place::Absent { name, at }), None)),
            }
        }
        other => other,
    };
    // A codebase's own launcher (`tune run`, `llamafactory-cli train`) reads its words its own
    // way: it decides both knobs, even where a word of the command is the batch (`batch_size=8`),
    // whose partner is in the config the command names. What the flags said is not its.
    // Looked up once (its PATH entry and wrapper read): the entrypoints below are told whether
    // a codebase's launcher runs the command, whose files are its own.
    let launcher = (batch_spec.is_none() && accum_spec.is_none())
        .then(|| super::entry::console::identify(request.command, request.path_var))
        .flatten();
    if let Some(launcher) = &launcher {
        let mut lines = Vec::new();
        if let Some(found) = super::entry::console::find(request, launcher, &mut lines)? {
            set.notes = found.notes;
            set.kept_by_job = found.kept_by_job;
            set.no_accumulation = found.no_accumulation;
            return push_knobs(set, request, reader, Some(found.batch), found.accum);
        }
        set.notes.extend(lines);
    }
    // No flag of the command is the batch: an entrypoint may keep it in a file.
    let (batch, accum) = match (batch, batch_spec.is_none() && accum_spec.is_none()) {
        (None, true) => {
            match super::entry::find(request, &mut reader, &mut set.notes, launcher.is_some())? {
                Some(found) => {
                    set.notes.extend(found.notes);
                    set.kept_by_job |= found.kept_by_job;
                    set.no_accumulation = found.no_accumulation;
                    (Some(found.batch), found.accum)
                }
                None => (None, accum),
            }
        }
        (batch, _) => (batch, accum),
    };
    push_knobs(set, request, reader, batch, accum)
}

/// `set` with the batch knob and its accumulation partner added (checked against `--min-batch`
/// and for an effective batch that overflows), and the files read.
fn push_knobs(
    mut set: KnobSet,
    request: &Request,
    reader: Reader,
    batch: Option<(Place, u64)>,
    accum: Option<(Place, Option<u64>)>,
) -> Result<KnobSet, KnobError> {
    let batch_rule = |partner| Rule {
        name: super::BATCH.into(),
        moves: Moves::Step {
            step: Step::Halve,
            min: request.min_batch,
        },
        on: default_causes(),
        partner,
    };
    if let Some((place, value)) = batch {
        if request.min_batch > value {
            return Err(KnobError::MinBatchAboveBatch {
                min: request.min_batch,
                flag: label_of(&place, &reader.files),
                batch: value,
            });
        }
        let partner = accum.as_ref().map(|_| set.knobs.len() + 1);
        set.knobs.push(Knob {
            name: super::BATCH.into(),
            place,
            original: Value::Int(value),
            rule: batch_rule(partner),
        });
        if let Some((place, value)) = accum {
            let b = &set.knobs[set.knobs.len() - 1];
            if let (Some(a), Some(n)) = (value, b.original.as_int()) {
                if n.checked_mul(a).is_none() {
                    return Err(KnobError::EffectiveBatchOverflow {
                        batch_flag: label_of(&b.place, &reader.files),
                        batch: n,
                        accum_flag: label_of(&place, &reader.files),
                        accum: a,
                    });
                }
            }
            set.knobs.push(Knob {
                name: super::ACCUM.into(),
                // Absent from the command, it is inserted once it moves; until then the job
                // runs without accumulation, i.e. 1.
                original: Value::Int(value.unwrap_or(1)),
                place,
                rule: Rule {
                    name: super::ACCUM.into(),
                    moves: Moves::Partner,
                    on: default_causes(),
                    partner: None,
                },
            });
        }
    }
    set.files = reader.files;
    Ok(set)
}

/// The flag or key an `--batch-arg` / `--accum-arg` names in the command, if that is its place.
fn argv_name<'a>(spec: &Option<ArgSpec<'a>>) -> Option<&'a str> {
    match spec {
        Some(ArgSpec::Argv(name)) => Some(name),
        _ => None,
    }
}

/// The place and value `flag` (`--batch-arg` / `--accum-arg`) names as `env:NAME` or
/// `FILE:KEY`, read and checked to be a whole number above 0; `None` for a flag of the command.
/// A variable that is not set has no value where `unset_ok` (an accumulation starts at 1).
fn named_place(
    reader: &mut Reader,
    flag: &str,
    spec: Option<&ArgSpec>,
    unset_ok: bool,
) -> Result<Option<(Place, Option<u64>)>, KnobError> {
    match spec {
        Some(ArgSpec::Env(name)) => {
            let who = format!("{flag} env:{name}");
            let value = match env_value(name, &who)? {
                Value::Unset if unset_ok => None,
                v => Some(count(&v, 1, name, &who, None)?),
            };
            Ok(Some((Place::Env(name.to_string()), value)))
        }
        Some(ArgSpec::File { path, key }) => {
            let who = format!("{flag} {path}:{key}");
            let i = reader.file(Path::new(path), &who)?;
            let value = reader.file_value(i, key, &who)?;
            let n = count(&value, 1, key, &who, reader.file_text(i, key).as_deref())?;
            let place = Place::File {
                file: i,
                key: key.to_string(),
            };
            Ok(Some((place, Some(n))))
        }
        Some(ArgSpec::Argv(_)) | None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{argv, yaml_project as project, TRAINING_YAML as YAML};

    fn request<'a>(command: &'a [OsString], cwd: &'a Path) -> Request<'a> {
        Request::plain(command, cwd)
    }

    #[test]
    fn automatic_knobs_are_workers_batch_and_accum_in_that_order() {
        let cwd = Path::new("/");
        let command = argv("python t.py --num_workers 4 --batch_size 8 --grad_accum 2");
        let set = resolve(&request(&command, cwd)).unwrap();
        let names: Vec<&str> = set.knobs.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["workers", "batch", "accum"]);
        assert_eq!(set.knobs[0].rule.on, [Cause::WorkerKilled]);
        assert_eq!(set.knobs[1].rule.partner, Some(2));
        assert_eq!(
            set.originals(),
            [Value::Int(4), Value::Int(8), Value::Int(2)]
        );
        // Without an accumulation flag, an --accum-arg absent from the command starts at 1.
        let command = argv("python t.py --batch_size 8");
        let mut req = request(&command, cwd);
        req.accum_arg = Some("--accum");
        let set = resolve(&req).unwrap();
        assert_eq!(set.originals(), [Value::Int(8), Value::Int(1)]);
        assert!(!set.effective_shrinks());
        assert!(resolve(&request(&command, cwd))
            .unwrap()
            .effective_shrinks());
    }

    #[test]
    fn batch_arg_names_a_file_key_or_a_variable() {
        let dir = project();
        let command = argv("python main.py");
        let mut req = request(&command, dir.path());
        req.batch_arg = Some("configs/default.yaml:training.batch_size");
        req.accum_arg = Some("configs/default.yaml:training.gradient_accumulation_steps");
        let set = resolve(&req).unwrap();
        assert_eq!(set.files.len(), 1, "one file, read once");
        assert_eq!(set.files[0].in_command, None);
        assert_eq!(set.originals(), [Value::Int(64), Value::Int(1)]);
        assert_eq!(
            set.file_texts(&[Value::Int(32), Value::Int(2)])[0],
            YAML.replace("64", "32").replace("steps: 1", "steps: 2")
        );

        std::env::set_var("OOMGUARD_TEST_RESOLVE_BS", "12");
        let mut req = request(&command, dir.path());
        req.batch_arg = Some("env:OOMGUARD_TEST_RESOLVE_BS");
        let set = resolve(&req).unwrap();
        assert_eq!(
            set.knobs[0].place,
            Place::Env("OOMGUARD_TEST_RESOLVE_BS".into())
        );
        assert_eq!(set.originals(), [Value::Int(12)]);
    }

    #[test]
    fn a_file_named_in_the_command_gets_a_copy() {
        let dir = project();
        let command = argv("python main.py --config ./configs/../configs/default.yaml");
        let mut req = request(&command, dir.path());
        req.batch_arg = Some("configs/default.yaml:training.batch_size");
        let set = resolve(&req).unwrap();
        assert_eq!(
            set.files[0].in_command,
            Some(argv::PathToken {
                index: 3,
                prefix_len: 0
            })
        );
    }

    #[test]
    fn bad_places_are_one_line_naming_file_and_key() {
        let dir = project();
        let command = argv("python main.py --batch_size 8");
        // (--batch-arg, words the message must hold)
        let table: &[(&str, &[&str])] = &[
            (
                "configs/missing.yaml:training.batch_size",
                &["configs/missing.yaml", "cannot open"],
            ),
            (
                "configs/default.yaml:training.batch",
                &["key training.batch is not in configs/default.yaml"],
            ),
            (
                "configs/default.yaml:training.lr",
                &["training.lr", "`3e-4`", "not a whole number"],
            ),
            (
                "configs/default.yaml:training.pin_memory",
                &["training.pin_memory", "`true`"],
            ),
            (
                "configs/default.yaml:training",
                &["configs/default.yaml", "training"],
            ),
            (
                "env:OOMGUARD_TEST_RESOLVE_UNSET",
                &["OOMGUARD_TEST_RESOLVE_UNSET is not set"],
            ),
        ];
        for (arg, words) in table {
            let mut req = request(&command, dir.path());
            req.batch_arg = Some(arg);
            let message = resolve(&req).unwrap_err().to_string();
            assert!(!message.contains('\n'), "{message}");
            assert!(
                message.starts_with(&format!("--batch-arg {arg}")),
                "{message}"
            );
            for word in *words {
                assert!(message.contains(word), "{arg}: {message}");
            }
        }
    }
}

#[cfg(test)]
mod lightning_on_the_command_line {
    //! Issue 28: a LightningCLI command's batch on the command line, its accumulation added as
    //! a flag that starts from what the `--config` files set.
    use super::*;
    use crate::test_util::argv;

    #[test]
    fn the_added_accumulation_starts_from_the_configs_value() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("base.yaml"),
            "trainer:\n  accumulate_grad_batches: 2\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("run.yaml"),
            "fit:\n  trainer:\n    accumulate_grad_batches: 4\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("none.json"), "{\"trainer\": {}}").unwrap();
        std::fs::write(
            dir.path().join("auto.yaml"),
            "trainer:\n  accumulate_grad_batches: auto\n",
        )
        .unwrap();
        // (command, the accumulation's start, a word of the note)
        let table: &[(&str, u64, &str)] = &[
            (
                "python main.py fit --data.batch_size 64",
                1,
                "absent, will be added",
            ),
            (
                "python main.py -c none.json fit --data.batch_size 64",
                1,
                "absent",
            ),
            (
                "python main.py fit -c base.yaml --data.batch_size 64",
                2,
                "2 in its --config",
            ),
            // The later config wins, under its subcommand too.
            (
                "python main.py --config base.yaml --config=run.yaml fit --data.batch_size 64",
                4,
                "4 in its --config",
            ),
            (
                "python main.py -c run.yaml -c base.yaml fit --data.batch_size 64",
                2,
                "2 in its --config",
            ),
        ];
        for &(cmd, start, note) in table {
            let command = argv(cmd);
            let request = Request::plain(&command, dir.path());
            let set = resolve(&request).unwrap();
            let accum = set.accum().expect("an accumulation knob");
            assert_eq!(set.knobs[accum].original, Value::Int(start), "{cmd}");
            assert!(
                set.notes.iter().any(|n| n.contains(note)),
                "{cmd}: {:?}",
                set.notes
            );
        }
        let command = argv("python main.py fit -c auto.yaml --data.batch_size 64");
        let request = Request::plain(&command, dir.path());
        let err = resolve(&request).unwrap_err().to_string();
        assert!(
            err.starts_with("LightningCLI --config auto.yaml: "),
            "{err}"
        );
        assert!(err.contains("`auto`"), "{err}");
    }
}
