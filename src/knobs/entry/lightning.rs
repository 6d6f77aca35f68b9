//! LightningCLI (jsonargparse): where no flag of the command gives the batch, it is read from
//! the `--config` files (several, merged in order, later wins, as LightningCLI merges them)
//! and changed by adding its flag to the end of the command line, which LightningCLI gives
//! precedence over every config. The files are never edited. The accumulation is
//! `trainer.accumulate_grad_batches`, read the same way and added as a flag when absent.
//! A command is LightningCLI's when its script is followed by a subcommand (`fit`, ...) or
//! carries jsonargparse's dotted flags (`--trainer.`, `--data.`, `--model.`), and names a
//! `--config`.

use super::{count_at, flag_values, read_config, script_args_start, Found};
use crate::knobs::argv;
use crate::knobs::resolve::{KnobError, Request};
use crate::knobs::Place;

const SUBCOMMANDS: &[&str] = &["fit", "validate", "test", "predict"];

/// Where a LightningCLI config keeps the training batch, most likely first: the datamodule's
/// (as a class's own argument or a subclass's `init_args`), then the model's.
const BATCH_KEYS: &[&str] = &[
    "data.batch_size",
    "data.init_args.batch_size",
    "data.train_batch_size",
    "data.init_args.train_batch_size",
    "model.batch_size",
    "model.init_args.batch_size",
];

const ACCUM_KEY: &str = "trainer.accumulate_grad_batches";

/// The batch and the accumulation of a LightningCLI command's configs; `None` when the command
/// is not LightningCLI's, names no config, or no config holds a batch.
pub(in crate::knobs) fn find(request: &Request) -> Result<Option<Found>, KnobError> {
    let argv = request.command;
    let Some(start) = script_args_start(argv) else {
        return Ok(None);
    };
    // The subcommand: the first of LightningCLI's that is no flag's value (a config may come
    // before it: `main.py -c c.yaml fit`).
    let subcommand = (start..argv.len())
        .filter(|&i| i == start || argv[i - 1].to_str().is_none_or(|p| !p.starts_with('-')))
        .filter_map(|i| argv[i].to_str())
        .find(|t| SUBCOMMANDS.contains(t));
    let dotted = argv[start..].iter().any(|t| {
        t.to_str().is_some_and(|t| {
            ["--trainer.", "--data.", "--model."]
                .iter()
                .any(|p| t.starts_with(p))
        })
    });
    let configs = flag_values(argv, start, &["--config", "-c"]);
    if configs.is_empty() || (subcommand.is_none() && !dotted) {
        return Ok(None);
    }
    let mut texts = Vec::with_capacity(configs.len());
    for &(_, path) in &configs {
        let (format, text) = read_config(request, path, &format!("LightningCLI --config {path}"))?;
        texts.push((path, format, text));
    }
    // A config given before the subcommand nests its keys under it (`fit: {data: ...}`).
    let prefixes: Vec<String> = std::iter::once(String::new())
        .chain(subcommand.map(|s| format!("{s}.")))
        .collect();
    // The last config that has the key, with the key as written there.
    let lookup = |key: &str| -> Result<Option<(String, &str, u64)>, KnobError> {
        for (path, format, text) in texts.iter().rev() {
            for prefix in &prefixes {
                let full = format!("{prefix}{key}");
                match count_at(*format, text, &full) {
                    Ok(Some(n)) => return Ok(Some((full, *path, n))),
                    Ok(None) => {}
                    Err(held) => {
                        return Err(KnobError::Knob {
                            where_: format!("LightningCLI --config {path}"),
                            problem: format!(
                                "{full} is {held}, not a whole number of at least 1: give the batch on the command line (--{key} N) or name it with --batch-arg"
                            ),
                        })
                    }
                }
            }
        }
        Ok(None)
    };
    let mut batch = None;
    for key in BATCH_KEYS {
        if let Some(found) = lookup(key)? {
            batch = Some(found);
            break;
        }
    }
    let Some((batch_key, batch_file, batch_value)) = batch else {
        return Ok(None);
    };
    let at = argv.len();
    let flag = |key: &str| format!("--{}", strip_subcommand(key, subcommand));
    let batch_flag = flag(&batch_key);
    let mut notes = vec![format!(
        "batch: `{batch_key}` in {batch_file}, {batch_value}: LightningCLI, changed with {batch_flag} added to the command line (the config is not edited)"
    )];
    let accum = lookup(ACCUM_KEY)?;
    let accum_flag = flag(accum.as_ref().map_or(ACCUM_KEY, |(key, ..)| key.as_str()));
    notes.push(match &accum {
        Some((key, file, n)) => {
            format!("accumulation: `{key}` in {file}, {n}, changed with {accum_flag}")
        }
        None => format!(
            "accumulation: LightningCLI's {accum_flag}, absent, will be added when the batch moves"
        ),
    });
    Ok(Some(Found {
        entrypoint: "LightningCLI",
        batch: (
            Place::Argv(argv::Place::Absent {
                name: batch_flag,
                at,
            }),
            batch_value,
        ),
        accum: Some((
            Place::Argv(argv::Place::Absent {
                name: accum_flag,
                at,
            }),
            accum.map(|(.., n)| n),
        )),
        kept_by_job: false,
        notes,
    }))
}

/// A key read under the subcommand (`fit.data.batch_size`) is given on the command line after
/// the subcommand, without it.
fn strip_subcommand<'k>(key: &'k str, subcommand: Option<&str>) -> &'k str {
    subcommand
        .and_then(|s| key.strip_prefix(s))
        .and_then(|k| k.strip_prefix('.'))
        .unwrap_or(key)
}
