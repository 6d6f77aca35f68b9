//! The run's knobs: those a `--config` job file's `[[knob]]` ladder names, each read where it lives
//! (a flag or override of the command, a variable of the job's environment, a key in a config file)
//! and checked to move as its entry asks, else those [`crate::knobs::resolve`] finds in the
//! command. The ladder's text is checked by [`crate::front::jobfile`] first; what a knob is, how
//! its value is read and how it is written back are [`crate::knobs`]'s. Writes nothing.

use std::ffi::OsString;
use std::path::Path;

use crate::front::jobfile::ladder::{self, KnobSpec, PlaceSpec};
use crate::front::jobfile::JobFile;
use crate::knobs::argv::{self, RewriteError};
use crate::knobs::reader::{count, env_value, label_of, Reader};
use crate::knobs::resolve::{self, KnobError, Request};
use crate::knobs::{default_causes, Knob, KnobSet, Moves, Place, Rule, Value};

/// Builds the knobs of a run: from the job file's ladder where it has one, else from the
/// command. `config`: the `--config` file's path (for messages) and its contents.
pub fn resolve(request: &Request, config: Option<(&Path, &JobFile)>) -> Result<KnobSet, KnobError> {
    match config.filter(|(_, c)| !c.knobs.is_empty()) {
        Some((path, config)) => Ok(resolve::with_context_notes(
            from_config(request, path, config)?,
            request.command,
        )),
        None => resolve::resolve(request),
    }
}

/// From `[[knob]]` entries, in file order.
fn from_config(request: &Request, path: &Path, config: &JobFile) -> Result<KnobSet, KnobError> {
    if let Some(flag) = [
        ("--batch-arg", request.batch_arg),
        ("--accum-arg", request.accum_arg),
    ]
    .iter()
    .find_map(|(flag, v)| v.map(|_| flag))
    {
        return Err(KnobError::Knob {
            where_: flag.to_string(),
            problem: "--config has [[knob]] entries, which name every knob: drop the flag, or add the knob to the file".into(),
        });
    }
    let partners: Vec<&str> = config
        .knobs
        .iter()
        .filter_map(|k| k.keep_product_with.as_deref())
        .collect();
    let mut reader = Reader::new(request);
    let mut knobs = Vec::new();
    for spec in &config.knobs {
        let is_partner = partners.contains(&spec.name.as_str());
        knobs.push(config_knob(&mut reader, path, spec, is_partner)?);
    }
    for (i, spec) in config.knobs.iter().enumerate() {
        let Some(partner) = &spec.keep_product_with else {
            continue;
        };
        let p = knobs
            .iter()
            .position(|k: &Knob| &k.name == partner)
            .expect("jobfile checked that every partner exists");
        knobs[i].rule.partner = Some(p);
        let (a, b) = (
            knobs[i].original.as_int(),
            knobs[p].original.as_int().unwrap_or(1),
        );
        // A file holds signed 64-bit integers: the product must fit there too.
        let fits = a
            .and_then(|a| a.checked_mul(b))
            .is_some_and(|n| n <= i64::MAX as u64);
        if !fits {
            return Err(KnobError::Knob {
                where_: format!("{}:{}: knob \"{}\"", path.display(), spec.line, spec.name),
                problem: format!(
                    "{} × {} (the product kept) does not fit in 64 bits: lower them",
                    knobs[i].original, knobs[p].original
                ),
            });
        }
    }
    Ok(KnobSet {
        knobs,
        files: reader.files,
        automatic: false,
        notes: Vec::new(),
        kept_by_job: false,
        no_accumulation: None,
    })
}

/// One `[[knob]]` entry read where it lives.
fn config_knob(
    reader: &mut Reader,
    path: &Path,
    spec: &KnobSpec,
    is_partner: bool,
) -> Result<Knob, KnobError> {
    let who = format!("{}:{}: knob \"{}\"", path.display(), spec.line, spec.name);
    let moves = if is_partner {
        Moves::Partner
    } else {
        match &spec.moves {
            ladder::Moves::Step { step, min } => Moves::Step {
                step: *step,
                min: *min,
            },
            ladder::Moves::Set(value) => Moves::Set(value.clone()),
        }
    };
    let integer = !matches!(moves, Moves::Set(_));
    let (place, original) = match &spec.place {
        PlaceSpec::Flag(text) | PlaceSpec::Override(text) => {
            argv_knob(reader.request.command, text, &moves, is_partner, &who)?
        }
        PlaceSpec::Env(name) => match env_value(name, &who)? {
            // A partner variable not set means no accumulation yet: 1.
            Value::Unset if is_partner => (Place::Env(name.clone()), Value::Int(1)),
            value => (Place::Env(name.clone()), value),
        },
        PlaceSpec::File { path, key } => {
            let i = reader.file(path, &who)?;
            let value = reader.file_value(i, key, &who)?;
            if let Moves::Set(target) = &moves {
                if target.to_scalar().is_none() {
                    return Err(KnobError::Knob {
                        where_: who,
                        problem: format!(
                            "set = {target} does not fit in a config file's 64-bit integer"
                        ),
                    });
                }
            }
            (
                Place::File {
                    file: i,
                    key: key.clone(),
                },
                value,
            )
        }
    };
    if integer {
        let written = match &place {
            Place::File { file, key } => reader.file_text(*file, key),
            _ => None,
        };
        let label = label_of(&place, &reader.files);
        count(&original, 0, &label, &who, written.as_deref())?;
    }
    Ok(Knob {
        name: spec.name.clone(),
        place,
        original,
        rule: Rule {
            name: spec.name.clone(),
            moves,
            on: spec.on.clone().unwrap_or_else(default_causes),
            partner: None,
        },
    })
}

/// A flag, switch or override knob: its place and the value the command gives it.
fn argv_knob(
    command: &[OsString],
    text: &str,
    moves: &Moves,
    is_partner: bool,
    who: &str,
) -> Result<(Place, Value), KnobError> {
    let context = |e: RewriteError| KnobError::Knob {
        where_: who.to_string(),
        problem: e.to_string(),
    };
    if let Moves::Set(Value::Bool(_)) = moves {
        if let Some(place) = argv::locate_switch(command, text, "--config").map_err(context)? {
            let present = matches!(&place, argv::Place::Switch { sites, .. } if !sites.is_empty());
            return Ok((Place::Argv(place), Value::Bool(present)));
        }
    }
    let (place, raw) = argv::locate_flag(command, text, "--config").map_err(context)?;
    let value = match raw {
        Some(raw) => Value::parse_text(&raw),
        None if is_partner => Value::Int(1),
        None if matches!(moves, Moves::Set(_)) => Value::Unset,
        None => {
            let name = place.name();
            let sample = if name.starts_with('-') {
                format!("{name} 8")
            } else {
                format!("{name}=8")
            };
            return Err(KnobError::Knob {
                where_: who.to_string(),
                problem: format!(
                    "{name} is not in the command: add it (e.g. `{sample}`) or fix the name"
                ),
            });
        }
    };
    Ok((Place::Argv(place), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::jobfile::ladder::{Moves as SpecMoves, Step as SpecStep};
    use crate::test_util::{argv, yaml_project as project};

    fn request<'a>(command: &'a [OsString], cwd: &'a Path) -> Request<'a> {
        Request::plain(command, cwd)
    }

    fn spec(name: &str, place: PlaceSpec, moves: SpecMoves, partner: Option<&str>) -> KnobSpec {
        KnobSpec {
            name: name.into(),
            place,
            moves,
            keep_product_with: partner.map(String::from),
            on: None,
            line: 1,
        }
    }

    fn halve(min: u64) -> SpecMoves {
        SpecMoves::Step {
            step: SpecStep::Halve,
            min,
        }
    }

    fn file(key: &str) -> PlaceSpec {
        PlaceSpec::File {
            path: "configs/default.yaml".into(),
            key: key.into(),
        }
    }

    /// Seed 001: the YAML ladder of the issue, batch with accumulation, then workers, then
    /// pin_memory; the partner only moves with the batch.
    #[test]
    fn config_knobs_keep_file_order_and_partners() {
        let dir = project();
        let command = argv("python main.py");
        let config = JobFile {
            job: Default::default(),
            knobs: vec![
                spec(
                    "batch",
                    file("training.batch_size"),
                    halve(1),
                    Some("accum"),
                ),
                spec(
                    "accum",
                    file("training.gradient_accumulation_steps"),
                    halve(1),
                    None,
                ),
                spec("workers", file("training.num_workers"), halve(0), None),
                spec(
                    "pin_memory",
                    file("training.pin_memory"),
                    SpecMoves::Set(Value::Bool(false)),
                    None,
                ),
            ],
        };
        let set = resolve(
            &request(&command, dir.path()),
            Some((Path::new("job.toml"), &config)),
        )
        .unwrap();
        assert!(!set.automatic);
        assert_eq!(set.knobs[0].rule.partner, Some(1));
        assert_eq!(set.knobs[1].rule.moves, Moves::Partner);
        assert_eq!(
            set.originals(),
            [
                Value::Int(64),
                Value::Int(1),
                Value::Int(4),
                Value::Bool(true)
            ]
        );
        let mut req = request(&command, dir.path());
        req.batch_arg = Some("--bs");
        let message = resolve(&req, Some((Path::new("job.toml"), &config)))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("--batch-arg: --config has [[knob]] entries"),
            "{message}"
        );
    }

    /// Seed 002 and 004: flags, a switch and a variable as config knobs.
    #[test]
    fn config_knobs_in_the_command_and_the_environment() {
        let command = argv(
            "python -m train.train_grpo --batch_size 2 --group_size 4 --num_epochs 3 --use_fp16",
        );
        let cwd = Path::new("/");
        let config = JobFile {
            job: Default::default(),
            knobs: vec![
                spec(
                    "batch",
                    PlaceSpec::Flag("--batch_size".into()),
                    halve(1),
                    None,
                ),
                spec(
                    "group",
                    PlaceSpec::Flag("--group_size".into()),
                    halve(1),
                    None,
                ),
                spec(
                    "epochs",
                    PlaceSpec::Flag("--num_epochs".into()),
                    SpecMoves::Step {
                        step: SpecStep::Minus(1),
                        min: 1,
                    },
                    None,
                ),
                spec(
                    "fp16",
                    PlaceSpec::Flag("--use_fp16".into()),
                    SpecMoves::Set(Value::Bool(true)),
                    None,
                ),
                spec(
                    "bf16",
                    PlaceSpec::Flag("--bf16".into()),
                    SpecMoves::Set(Value::Bool(true)),
                    None,
                ),
                spec(
                    "alloc",
                    PlaceSpec::Env("OOMGUARD_TEST_RESOLVE_ALLOC".into()),
                    SpecMoves::Set(Value::Str("expandable_segments:True".into())),
                    None,
                ),
            ],
        };
        let set = resolve(
            &request(&command, cwd),
            Some((Path::new("job.toml"), &config)),
        )
        .unwrap();
        assert_eq!(
            set.originals(),
            [
                Value::Int(2),
                Value::Int(4),
                Value::Int(3),
                Value::Bool(true),
                Value::Bool(false),
                Value::Unset
            ]
        );
        let missing = JobFile {
            job: Default::default(),
            knobs: vec![spec(
                "batch",
                PlaceSpec::Flag("--bsz".into()),
                halve(1),
                None,
            )],
        };
        let message = resolve(
            &request(&command, cwd),
            Some((Path::new("job.toml"), &missing)),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            message,
            "job.toml:1: knob \"batch\": --bsz is not in the command: add it (e.g. `--bsz 8`) or fix the name"
        );
    }

    /// A Hydra/OmegaConf override token as a knob, with its partner absent from the command:
    /// inserted as `key=value` once it moves.
    #[test]
    fn an_override_knob_and_an_absent_partner() {
        let command = argv("python train.py training.batch_size=64 model=t5");
        let config = JobFile {
            job: Default::default(),
            knobs: vec![
                spec(
                    "batch",
                    PlaceSpec::Override("training.batch_size".into()),
                    halve(1),
                    Some("accum"),
                ),
                spec(
                    "accum",
                    PlaceSpec::Override("+training.accumulate".into()),
                    halve(1),
                    None,
                ),
            ],
        };
        let set = resolve(
            &request(&command, Path::new("/")),
            Some((Path::new("job.toml"), &config)),
        )
        .unwrap();
        assert_eq!(set.originals(), [Value::Int(64), Value::Int(1)]);
        let input = set.input(&command, &[Value::Int(32), Value::Int(2)], &[]);
        let words: Vec<String> = input
            .argv
            .iter()
            .map(|t| t.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            words.join(" "),
            "python train.py training.batch_size=32 model=t5 +training.accumulate=2"
        );
    }
}
