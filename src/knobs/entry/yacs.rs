//! A yacs config (detectron2's `tools/train_net.py --config-file configs/X.yaml --num-gpus 8
//! SOLVER.IMS_PER_BATCH 16`): the batch is `SOLVER.IMS_PER_BATCH`, the total images per step
//! across the job, kept in the YAML the `--config-file` names or in a `_BASE_` file under it
//! (each `_BASE_` path relative to the file naming it, the naming file winning), and
//! overridden by `KEY VALUE` pairs after the flags (argparse's `opts`, `nargs=REMAINDER`).
//! Reads the YAML chain as the job's user; writes nothing.
//!
//! A relaunch rewrites the command's own pair, or adds `SOLVER.IMS_PER_BATCH N` at the end of
//! the arguments, where `opts` collects it; the files are left alone. detectron2's trainer has
//! no gradient accumulation, so the effective batch shrinks with the batch: the run says so in
//! one line ([`Found::no_accumulation`]) rather than proposing an `--accum-arg`.

use std::path::Path;

use super::{count_at, flag_values, read_config, script_args_start, Found};
use crate::knobs::argv;
use crate::knobs::reader::{KnobError, Request};
use crate::knobs::Place;

/// The batch key detectron2 reads (images per step, over all workers).
const KEY: &str = "SOLVER.IMS_PER_BATCH";

/// How many `_BASE_` files deep a chain is followed: detectron2's go two or three.
const MAX_DEPTH: usize = 8;

const ENTRYPOINT: &str = "yacs config (detectron2)";

/// The batch of a command with `--config-file` whose YAML chain (or whose `KEY VALUE` pairs)
/// set `SOLVER.IMS_PER_BATCH`; `None` where neither does.
pub(super) fn find(request: &Request) -> Result<Option<Found>, KnobError> {
    let argv = request.command;
    let from = script_args_start(argv);
    let Some(&(_, config)) = flag_values(argv, from, &["--config-file"]).last() else {
        return Ok(None);
    };
    let who = format!("--config-file {config}");
    let in_command = argv::locate_flag(argv, KEY, "--batch-arg").map_err(|e| KnobError::Knob {
        where_: who.clone(),
        problem: e.to_string(),
    })?;
    let (place, value, note) = match in_command {
        (place @ argv::Place::Flag { .. }, Some(raw)) => {
            let n = argv::parse_count(KEY, raw.as_ref(), 1).map_err(|e| KnobError::Knob {
                where_: who.clone(),
                problem: e.to_string(),
            })?;
            let note = format!("batch: {KEY} {n}, a `KEY VALUE` pair of the command over {config}, rewritten there");
            (place, n, note)
        }
        (place, _) => match chain_value(request, config, &who)? {
            Some((file, n)) => {
                let note = format!("batch: {KEY} in {file}, {n}, changed with a `{KEY} N` pair added to the command (the files are left alone)");
                (place, n, note)
            }
            None => return Ok(None),
        },
    };
    Ok(Some(Found {
        entrypoint: ENTRYPOINT,
        batch: (Place::Argv(place), value),
        accum: None,
        kept_by_job: false,
        no_accumulation: Some("detectron2".to_string()),
        notes: vec![note],
    }))
}

/// The file of the chain that sets the key, and its value: `config` first, then its `_BASE_`.
fn chain_value(
    request: &Request,
    config: &str,
    who: &str,
) -> Result<Option<(String, u64)>, KnobError> {
    let mut path = config.to_string();
    for _ in 0..MAX_DEPTH {
        // A file that is not there or not YAML is no detectron2 config: nothing found here.
        let Ok((format, text)) = read_config(request, &path, who) else {
            return Ok(None);
        };
        match count_at(format, &text, KEY) {
            Ok(Some(n)) => return Ok(Some((path, n))),
            Ok(None) => {}
            Err(what) => {
                return Err(KnobError::Knob {
                    where_: who.to_string(),
                    problem: format!("{KEY} in {path} is {what}, not a whole number above 0"),
                })
            }
        }
        let base = match crate::knobs::file::locate(format, &text, "_BASE_") {
            Ok(found) => match found.value {
                crate::knobs::file::Scalar::Str(base) => base,
                _ => return Ok(None),
            },
            Err(_) => return Ok(None),
        };
        path = Path::new(&path)
            .parent()
            .unwrap_or(Path::new(""))
            .join(base)
            .to_string_lossy()
            .into_owned();
    }
    Ok(None)
}
