//! LightningCLI (jsonargparse): where no flag of the command gives the batch, it is read from
//! the `--config` files (several, merged in order, later wins, as LightningCLI merges them)
//! and changed by adding its flag to the end of the command line, which LightningCLI gives
//! precedence over every config. The files are never edited. The accumulation is
//! `trainer.accumulate_grad_batches`, read the same way and added as a flag when absent.
//! A command is LightningCLI's when its script is followed by a subcommand (`fit`, ...) or
//! carries jsonargparse's dotted flags (`--trainer.`, `--data.`, `--model.`), and names a
//! `--config`.
//!
//! What root's oomguard holds of the configs is bounded before any limit of the job's exists:
//! each file is read once however often the command names it (by the file its open reached),
//! at most [`MAX_CONFIGS`] configs and [`MAX_TOTAL_BYTES`] of text; past either the entrypoint
//! is given up with one line and the run goes on as one without a found batch.

use std::rc::Rc;

use super::{count_at, script_args_start, Found};
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

/// The most `--config` files one command may name for oomguard to read them: real commands
/// name a few.
const MAX_CONFIGS: usize = 64;

/// The most config text read for one command, each distinct file counted once. Real configs
/// are a few KB; each is parsed again for every key looked up, so the bound is on CPU as much
/// as memory (48 configs of 1.3 MB took minutes of root's time before anything started).
const MAX_TOTAL_BYTES: u64 = 8 << 20;
const _: () = assert!(MAX_TOTAL_BYTES <= crate::guard::fsutil::SMALL_FILE_MAX_BYTES);

/// The batch and the accumulation of a LightningCLI command's configs; `None` when the command
/// is not LightningCLI's, names no config, or no config holds a batch.
/// A config set past the bounds is given up with one line in `notes`.
pub(in crate::knobs) fn find(
    request: &Request,
    notes: &mut Vec<String>,
) -> Result<Option<Found>, KnobError> {
    let argv = request.command;
    let start = script_args_start(argv);
    if !argv::is_lightning_cli(argv, start) {
        return Ok(None);
    }
    let configs = match Configs::read(request)? {
        Read::Configs(configs) => configs,
        Read::NoConfig => return Ok(None),
        Read::GaveUp(line) => {
            notes.push(line);
            return Ok(None);
        }
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
        no_accumulation: None,
        notes,
    }))
}

/// A LightningCLI command's `--config` files, read in order, and its subcommand.
struct Configs<'a> {
    /// (path as given, format, text), in the command's order; a file named twice shares its
    /// text.
    texts: Vec<(String, Format, Rc<str>)>,
    subcommand: Option<&'a str>,
}

/// What [`Configs::read`] made of a command's configs.
enum Read<'a> {
    Configs(Configs<'a>),
    /// The command names no config.
    NoConfig,
    /// Past [`MAX_CONFIGS`] or [`MAX_TOTAL_BYTES`]: the line that says so.
    GaveUp(String),
}

impl<'a> Configs<'a> {
    fn read(request: &Request<'a>) -> Result<Read<'a>, KnobError> {
        let argv = request.command;
        let paths = argv::lightning_configs(argv);
        if paths.is_empty() {
            return Ok(Read::NoConfig);
        }
        let gave_up = |why: String| {
            Read::GaveUp(format!(
                "LightningCLI: {why}: the batch is not looked for in its --config files (name it with --batch-arg)"
            ))
        };
        if paths.len() > MAX_CONFIGS {
            return Ok(gave_up(format!(
                "the command names {} --config files, more than the {MAX_CONFIGS} oomguard reads",
                paths.len()
            )));
        }
        let mut read = crate::guard::fsutil::ReadOnce::default();
        let mut total_bytes = 0u64;
        let mut texts = Vec::with_capacity(paths.len());
        for path in paths {
            let who = format!("LightningCLI --config {path}");
            let (format, text) = match read_once(
                request,
                &path,
                &who,
                &mut read,
                MAX_TOTAL_BYTES - total_bytes,
            )? {
                Once::Text(format, text, new_bytes) => {
                    total_bytes += new_bytes;
                    (format, text)
                }
                Once::PastBound => {
                    return Ok(gave_up(format!(
                        "its --config files hold more than {} of text",
                        crate::observe::units::human_bytes(MAX_TOTAL_BYTES)
                    )))
                }
            };
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
        Ok(Read::Configs(Configs { texts, subcommand }))
    }

    /// The last config that has `key` (or, for a config given before the subcommand, the key
    /// under it), with the key as written there and the file; an error where it holds no
    /// whole number.
    fn lookup(&self, key: &str) -> Result<Option<(String, &str, u64)>, KnobError> {
        let prefixes: Vec<String> = std::iter::once(String::new())
            .chain(self.subcommand.map(|s| format!("{s}.")))
            .collect();
        // A file named again holds what it held: looked at once, where it counts (the last).
        let mut looked: Vec<&Rc<str>> = Vec::new();
        for (path, format, text) in self.texts.iter().rev() {
            if looked.iter().any(|seen| Rc::ptr_eq(seen, text)) {
                continue;
            }
            looked.push(text);
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
/// Configs past the bounds set none here: the flag starts from 1.
pub(in crate::knobs) fn configured_accum(request: &Request) -> Result<Option<u64>, KnobError> {
    Ok(match Configs::read(request)? {
        Read::Configs(configs) => configs.lookup(ACCUM_KEY)?.map(|(.., n)| n),
        Read::NoConfig | Read::GaveUp(_) => None,
    })
}

/// One config's text, and how many bytes were read for it (0 where it was read before).
enum Once {
    Text(Format, Rc<str>, u64),
    /// Reading it would pass the bound on the text read.
    PastBound,
}

/// Reads the config `path` (relative to the command's directory) as the job's user, a regular
/// file only, unless the file its open reaches was read before (`read`): then its text is
/// shared. At most `left_bytes` new.
fn read_once(
    request: &Request,
    path: &str,
    who: &str,
    read: &mut crate::guard::fsutil::ReadOnce,
    left_bytes: u64,
) -> Result<Once, KnobError> {
    use crate::guard::fsutil::Once as FileText;
    let fail = |problem: String| KnobError::Knob {
        where_: who.to_string(),
        problem,
    };
    let format = super::config_format(path, who)?;
    let absolute = request.cwd.join(path);
    let cap = crate::guard::fsutil::SMALL_FILE_MAX_BYTES.min(left_bytes);
    match crate::guard::principal::as_user(|| read.text(&absolute, cap)) {
        Ok(FileText::Again(text)) => Ok(Once::Text(format, text, 0)),
        Ok(FileText::New(text)) => {
            let len = text.len() as u64;
            Ok(Once::Text(format, text, len))
        }
        Ok(FileText::TooLong) => Ok(Once::PastBound),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            Err(fail(format!("config file {path} is not UTF-8 text")))
        }
        Err(e) => Err(fail(format!("cannot read config file {path}: {e}"))),
    }
}

/// A key read under the subcommand (`fit.data.batch_size`) is given on the command line after
/// the subcommand, without it.
fn strip_subcommand<'k>(key: &'k str, subcommand: Option<&str>) -> &'k str {
    subcommand
        .and_then(|s| key.strip_prefix(s))
        .and_then(|k| k.strip_prefix('.'))
        .unwrap_or(key)
}
