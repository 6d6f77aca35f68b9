//! A Hugging Face example script (`run_clm.py` and its many copies) given its
//! `TrainingArguments` as a single `.json` / `.yaml` argument: `HfArgumentParser` then reads
//! that file and nothing else from the command line, so the knobs are the file's
//! `per_device_train_batch_size` and `gradient_accumulation_steps`, and the job gets a patched
//! copy through its one argument. A key the file leaves out is the Trainer's default (8 and 1)
//! and is written into the copy when it moves.
//!
//! The rule fires only where the script is an `HfArgumentParser` script (a `.py` whose text
//! names it), or, for a module or a script that cannot be read or names no such parser, where
//! the file is unmistakably a `TrainingArguments` file: `output_dir` and a key in
//! `TrainingArguments`' own spelling that other trainers' configs spell differently, and none of
//! theirs. A known codebase's launcher or module ([`super::console`]) is never this rule's:
//! axolotl's YAML has `output_dir` too, and a key written there that axolotl ignores would move
//! nothing. Where unsure, nothing is found rather than the wrong key.

use super::{count_at, read_config, script_args_start, Found};
use crate::knobs::file;
use crate::knobs::reader::{KnobError, Reader, Request};
use crate::knobs::Place;

const BATCH_KEY: &str = "per_device_train_batch_size";
const ACCUM_KEY: &str = "gradient_accumulation_steps";
/// Keys `TrainingArguments` spells so and other trainers' configs do not (axolotl says
/// `micro_batch_size`, `num_epochs`).
const OWN_KEYS: &[&str] = &[
    BATCH_KEY,
    "auto_find_batch_size",
    "num_train_epochs",
    "per_device_eval_batch_size",
];

/// Keys of other trainers' configs that `TrainingArguments` has none of.
const OTHER_KEYS: &[&str] = &["micro_batch_size", "base_model", "batch_size"];

/// Whether `text` is unmistakably a `TrainingArguments` file (see the module's rule).
fn unmistakable(format: file::Format, text: &str) -> bool {
    let has = |key: &str| file::locate(format, text, key).is_ok();
    has("output_dir") && OWN_KEYS.iter().any(|k| has(k)) && !OTHER_KEYS.iter().any(|k| has(k))
}

/// Whether the script is an `HfArgumentParser` script: a `.py` that can be read and names it.
fn hf_script(request: &Request) -> bool {
    let Some(script) = crate::knobs::argv::launch(request.command).script else {
        return false;
    };
    script.ends_with(".py")
        && crate::guard::principal::read_text(
            &request.cwd.join(&script),
            crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
        )
        .is_some_and(|text| text.contains("HfArgumentParser"))
}

/// `TrainingArguments`' defaults for the two keys.
const DEFAULT_BATCH: u64 = 8;

/// The batch and the accumulation of a script whose only argument is its arguments file;
/// `None` for any other command, a codebase's own launcher (`codebase_launcher`), or a file
/// that is no Trainer's (no `output_dir`, no batch).
pub(in crate::knobs) fn find(
    request: &Request,
    reader: &mut Reader,
    codebase_launcher: bool,
) -> Result<Option<Found>, KnobError> {
    let argv = request.command;
    if codebase_launcher {
        return Ok(None);
    }
    let [only] = &argv[script_args_start(argv)..] else {
        return Ok(None);
    };
    let Some(path) = only.to_str().filter(|p| {
        !p.starts_with('-') && [".json", ".yaml", ".yml"].iter().any(|e| p.ends_with(e))
    }) else {
        return Ok(None);
    };
    let who = format!("the Trainer's arguments file {path}");
    let (format, text) = read_config(request, path, &who)?;
    let read = |key: &str| {
        count_at(format, &text, key).map_err(|held| KnobError::Knob {
            where_: who.clone(),
            problem: format!("{key} is {held}, not a whole number of at least 1"),
        })
    };
    let batch = read(BATCH_KEY)?;
    // A Trainer's arguments name where it writes; a file with neither key is something else.
    if batch.is_none() && file::locate(format, &text, "output_dir").is_err() {
        return Ok(None);
    }
    if !hf_script(request) && !unmistakable(format, &text) {
        return Ok(None);
    }
    // Registered for patching only now that it is the Trainer's: the job gets a copy.
    let i = reader.file(std::path::Path::new(path), &who)?;
    let accum = read(ACCUM_KEY)?;
    let mut notes = vec![match batch {
        Some(n) => format!(
            "batch: `{BATCH_KEY}` in {path}, {n}: the script's only argument (HfArgumentParser reads nothing else), so the job gets a patched copy"
        ),
        None => format!(
            "batch: `{BATCH_KEY}` absent from {path}: the Trainer's default {DEFAULT_BATCH}, written into the job's patched copy when it moves"
        ),
    }];
    notes.push(match accum {
        Some(n) => format!("accumulation: `{ACCUM_KEY}` in {path}, {n}"),
        None => format!(
            "accumulation: `{ACCUM_KEY}` absent from {path} (1), written into the job's patched copy when the batch moves"
        ),
    });
    if file::locate(format, &text, "auto_find_batch_size")
        .is_ok_and(|f| f.value == file::Scalar::Bool(true))
    {
        notes.push(crate::knobs::argv::auto_find_note(
            &format!("auto_find_batch_size (in {path})"),
            true,
        ));
    }
    Ok(Some(Found {
        entrypoint: "Hugging Face Trainer arguments file",
        batch: (
            Place::File {
                file: i,
                key: BATCH_KEY.into(),
            },
            batch.unwrap_or(DEFAULT_BATCH),
        ),
        accum: Some((
            Place::File {
                file: i,
                key: ACCUM_KEY.into(),
            },
            accum,
        )),
        kept_by_job: false,
        no_accumulation: None,
        notes,
    }))
}
