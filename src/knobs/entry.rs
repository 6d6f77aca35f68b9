//! Entrypoints that keep the batch where no flag of the command names it, found with no knob
//! flag: LightningCLI's `--config` files, a Hugging Face example script's single JSON/YAML
//! argument (`TrainingArguments`), a DeepSpeed config (`--deepspeed`, `--deepspeed_config`) and
//! Hydra's composed primary config ([`hydra`]). Each says where the batch and the
//! accumulation are and what they hold; [`super::resolve`] asks them, in that order, only when
//! no flag of the command is the batch. Reads the files it needs (as the job's user, through
//! the resolver's reader); writes nothing, starts nothing.
//!
//! Where the entrypoint lets the command line override its file (LightningCLI, Hydra), a knob
//! is an override added to the command (`--data.batch_size 128`, `data.batch_size=128`) and
//! the file is left alone; where it does not (a Trainer's JSON, a DeepSpeed config), the knob
//! is the file's key, and the job gets a patched copy through the argv token that names it.

pub mod hydra;

use super::resolve::{KnobError, Reader, Request};
use super::Place;

/// What an entrypoint found: the batch, the accumulation (its place, and its value where the
/// job sets one), and lines for the user saying where they are.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The entrypoint's name, as `--dry-run` and `doctor` say it ("LightningCLI").
    pub entrypoint: &'static str,
    pub batch: (Place, u64),
    /// `None`: the job keeps the effective batch itself (a DeepSpeed config with
    /// `train_batch_size` and no accumulation key derives it), or has no accumulation to move.
    pub accum: Option<(Place, Option<u64>)>,
    /// The job itself keeps the effective batch when the batch moves alone.
    pub kept_by_job: bool,
    /// One line each: where the batch and the accumulation were found ("batch: `data.batch_size`
    /// in configs/config.yaml, 256, set with `--data.batch_size` on the command line").
    pub notes: Vec<String>,
}

/// The first entrypoint that keeps the batch in a file the command names: LightningCLI's
/// `--config`, a Trainer's single JSON/YAML argument, a DeepSpeed config, Hydra's composed
/// config. `None` when none does.
pub(super) fn find(request: &Request, reader: &mut Reader) -> Result<Option<Found>, KnobError> {
    hydra::find(request, reader)
}
