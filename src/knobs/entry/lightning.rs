//! LightningCLI (jsonargparse): where no flag of the command gives the batch, it is read from
//! the `--config` files (several, merged in order, later wins, as LightningCLI merges them)
//! and changed by adding its flag to the end of the command line, which LightningCLI gives
//! precedence over every config. The files are never edited. The accumulation is
//! `trainer.accumulate_grad_batches`, read the same way and added as a flag when absent.
//! A command is LightningCLI's when its script is followed by a subcommand (`fit`, ...) or
//! carries jsonargparse's dotted flags (`--trainer.`, `--data.`, `--model.`), and names a
//! `--config`.

use super::{count_at, read_config, script_args_start, Found};
use crate::knobs::argv;
use crate::knobs::file::Format;
use crate::knobs::reader::{KnobError, Request};
use crate::knobs::Place;

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
    let start = script_args_start(argv);
    if !argv::is_lightning_cli(argv, start) {
        return Ok(None);
    }
    let Some(configs) = Configs::read(request)? else {
        return Ok(None);
    };
    let subcommand = configs.subcommand;
    let lookup = |key: &str| configs.lookup(key);
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

/// A LightningCLI command's `--config` files, read in order, and its subcommand.
struct Configs<'a> {
    /// (path as given, format, text), in the command's order.
    texts: Vec<(String, Format, String)>,
    subcommand: Option<&'a str>,
}

impl<'a> Configs<'a> {
    /// `None` where the command names no config.
    fn read(request: &Request<'a>) -> Result<Option<Configs<'a>>, KnobError> {
        let argv = request.command;
        let paths = argv::lightning_configs(argv);
        if paths.is_empty() {
            return Ok(None);
        }
        let mut texts = Vec::with_capacity(paths.len());
        for path in paths {
            let (format, text) =
                read_config(request, &path, &format!("LightningCLI --config {path}"))?;
            texts.push((path, format, text));
        }
        // The subcommand: the first of LightningCLI's that is no flag's value (a config may
        // come before it: `main.py -c c.yaml fit`).
        let start = script_args_start(argv);
        let subcommand = (start..argv.len())
            .filter(|&i| {
                i == start
                    || argv[i - 1]
                        .to_str()
                        .is_none_or(|p| !p.starts_with('-') || p.contains('='))
            })
            .filter_map(|i| argv[i].to_str())
            .find(|t| argv::LIGHTNING_SUBCOMMANDS.contains(t));
        Ok(Some(Configs { texts, subcommand }))
    }

    /// The last config that has `key` (or, for a config given before the subcommand, the key
    /// under it), with the key as written there and the file; an error where it holds no
    /// whole number.
    fn lookup(&self, key: &str) -> Result<Option<(String, &str, u64)>, KnobError> {
        let prefixes: Vec<String> = std::iter::once(String::new())
            .chain(self.subcommand.map(|s| format!("{s}.")))
            .collect();
        for (path, format, text) in self.texts.iter().rev() {
            for prefix in &prefixes {
                let full = format!("{prefix}{key}");
                match count_at(*format, text, &full) {
                    Ok(Some(n)) => return Ok(Some((full, path.as_str(), n))),
                    Ok(None) => {}
                    Err(held) => {
                        return Err(KnobError::Knob {
                            where_: format!("LightningCLI --config {path}"),
                            problem: format!(
                                "{full} is `{held}`, not a whole number of at least 1: give it on the command line (--{key} N) or name the knob with --batch-arg / --accum-arg"
                            ),
                        })
                    }
                }
            }
        }
        Ok(None)
    }
}

/// The accumulation a LightningCLI command's configs set (`trainer.accumulate_grad_batches`,
/// the later config winning): where the batch is a flag of the command and the accumulation
/// flag is added, it starts from this, not 1, or the first relaunch would override a
/// config's 4 with 2.
pub(in crate::knobs) fn configured_accum(request: &Request) -> Result<Option<u64>, KnobError> {
    Ok(match Configs::read(request)? {
        Some(configs) => configs.lookup(ACCUM_KEY)?.map(|(.., n)| n),
        None => None,
    })
}

/// A key read under the subcommand (`fit.data.batch_size`) is given on the command line after
/// the subcommand, without it.
fn strip_subcommand<'k>(key: &'k str, subcommand: Option<&str>) -> &'k str {
    subcommand
        .and_then(|s| key.strip_prefix(s))
        .and_then(|k| k.strip_prefix('.'))
        .unwrap_or(key)
}
