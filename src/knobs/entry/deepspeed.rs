//! A DeepSpeed config named by `--deepspeed FILE` (the Hugging Face Trainer) or
//! `--deepspeed_config FILE` (the `deepspeed` launcher's scripts): its
//! `train_micro_batch_size_per_gpu` is the batch and `gradient_accumulation_steps` the
//! accumulation, and the job gets a patched copy through the token that names the file; the
//! user's file is never edited. DeepSpeed refuses a config whose `train_batch_size` is not
//! micro × accumulation × world size: moving the two together keeps that product, so
//! `train_batch_size` stays as written. With `train_batch_size` and no accumulation key,
//! DeepSpeed derives the accumulation itself, so the batch moves alone and the job keeps the
//! effective batch. `"auto"` values are the Trainer's to fill from its own flags: those flags
//! are the knobs then (found in the command before this module is asked), and the config is
//! left alone.

use super::{count_at, flag_values, read_config, Found};
use crate::knobs::reader::{KnobError, Reader, Request};
use crate::knobs::Place;

const MICRO_KEY: &str = "train_micro_batch_size_per_gpu";
const ACCUM_KEY: &str = "gradient_accumulation_steps";
const TOTAL_KEY: &str = "train_batch_size";

/// The batch and the accumulation of the DeepSpeed config the command names; `None` when it
/// names none, or its micro-batch is `"auto"` or absent (then the Trainer's flags decide).
pub(in crate::knobs) fn find(
    request: &Request,
    reader: &mut Reader,
) -> Result<Option<Found>, KnobError> {
    let argv = request.command;
    let Some(&(_, path)) = flag_values(argv, 1, &["--deepspeed", "--deepspeed_config"]).last()
    else {
        return Ok(None);
    };
    let who = format!("DeepSpeed config {path}");
    // `--deepspeed` may also carry the config inline as JSON text, or name a file the job
    // itself will complain about: neither is a knob file of ours.
    let Ok((format, text)) = read_config(request, path, &who) else {
        return Ok(None);
    };
    let read = |key: &str| count_at(format, &text, key);
    let Ok(Some(micro)) = read(MICRO_KEY) else {
        return Ok(None);
    };
    let total = read(TOTAL_KEY).ok().flatten();
    let accum = match read(ACCUM_KEY) {
        Ok(n) => n,
        Err(held) => {
            return Err(KnobError::Knob {
                where_: who,
                problem: format!(
                    "{ACCUM_KEY} is {held} beside a {MICRO_KEY} of {micro}: give both as numbers, or both as \"auto\" with the Trainer's flags on the command line"
                ),
            })
        }
    };
    let i = reader.file(std::path::Path::new(path), &who)?;
    let mut notes = vec![format!(
        "batch: `{MICRO_KEY}` in {path}, {micro}: the job gets a patched copy (the config is not edited)"
    )];
    let (accum_place, kept_by_job) = match (accum, total) {
        (Some(n), _) => {
            notes.push(format!(
                "accumulation: `{ACCUM_KEY}` in {path}, {n}, moved with the batch{}",
                total.map_or(String::new(), |t| format!(
                    " (`{TOTAL_KEY}` {t} stays: micro × accumulation × GPUs is kept)"
                ))
            ));
            (
                Some((
                    Place::File {
                        file: i,
                        key: ACCUM_KEY.into(),
                    },
                    Some(n),
                )),
                false,
            )
        }
        (None, Some(t)) => {
            notes.push(format!(
                "accumulation: none in {path}; DeepSpeed derives it from `{TOTAL_KEY}` {t}, so the effective batch is kept as the batch moves"
            ));
            (None, true)
        }
        (None, None) => {
            notes.push(format!(
                "accumulation: `{ACCUM_KEY}` absent from {path} (1), written into the job's patched copy when the batch moves"
            ));
            (
                Some((
                    Place::File {
                        file: i,
                        key: ACCUM_KEY.into(),
                    },
                    None,
                )),
                false,
            )
        }
    };
    Ok(Some(Found {
        entrypoint: "DeepSpeed config",
        batch: (
            Place::File {
                file: i,
                key: MICRO_KEY.into(),
            },
            micro,
        ),
        accum: accum_place,
        kept_by_job,
        no_accumulation: None,
        notes,
    }))
}

/// The Trainer's flags that fill a DeepSpeed config's `"auto"` values, and the keys they fill.
const TRAINER_FLAGS: &[(&str, &str)] = &[
    ("--per_device_train_batch_size", MICRO_KEY),
    ("--gradient_accumulation_steps", ACCUM_KEY),
];

/// Where the batch is a Trainer flag of the command and its DeepSpeed config sets the same
/// size as a number, the Trainer refuses any relaunch that changes the flag alone ("Please
/// correct the following DeepSpeed config values that mismatch TrainingArguments values"):
/// one line naming the fix before anything starts.
pub(in crate::knobs) fn check_flags_agree(
    request: &Request,
    flags: &[&str],
) -> Result<(), KnobError> {
    let argv = request.command;
    let Some(&(_, path)) = flag_values(argv, 1, &["--deepspeed"]).last() else {
        return Ok(());
    };
    let who = format!("DeepSpeed config {path}");
    let Ok((format, text)) = read_config(request, path, &who) else {
        return Ok(());
    };
    for (flag, key) in TRAINER_FLAGS.iter().filter(|(f, _)| flags.contains(f)) {
        if let Ok(Some(n)) = count_at(format, &text, key) {
            return Err(KnobError::Knob {
                where_: who,
                problem: format!(
                    "{key} is {n} beside the command's {flag}: the Trainer requires them to match, so a relaunch cannot move the flag alone; set {key} (and its partner) to \"auto\" in {path}, and the Trainer fills it from the flag"
                ),
            });
        }
    }
    Ok(())
}
