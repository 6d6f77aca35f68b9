//! Finds the batch-size and gradient-accumulation knobs in a job's argv and writes new values
//! into a copy of it. Pure: no I/O, no process knowledge; the policy decides the numbers.
//!
//! Flags are recognised as `--flag N`, `--flag=N`, and Hydra/OmegaConf overrides
//! (`data.batch_size=N`, `+trainer.accumulate_grad_batches=N`). A flag given several times is
//! read from its last occurrence (argparse's rule) and, once its value changes, every occurrence
//! is rewritten so the job sees one consistent value; at the original sizes the argv is returned
//! exactly as given.
//!
//! A command can hold several programs' arguments, separated by standalone `--` tokens
//! (`uv run -- python train.py --batch_size 8`, a launcher and its worker). Those are the
//! command's *parts*: part 1 is before the first `--`, part 2 after it, and so on. A knob is
//! searched within each part; a name found in two parts is ambiguous and must be picked with
//! `NAME@N` (the occurrence in part N). Only the chosen part's tokens are ever rewritten.
//!
//! Only the script's own arguments are searched: a launcher in front of it (`torchrun`,
//! `accelerate launch`, `srun`, `uv run`, ...: [`mod@launch`]) keeps its options, which are never
//! read nor rewritten, and the parts are cut to begin at the script's first argument.
//!
//! LightningCLI's (jsonargparse's) dotted flags are knobs too (`--data.batch_size 256`,
//! `--data.init_args.batch_size=256`, `--trainer.accumulate_grad_batches 2`); a LightningCLI
//! command without the accumulation flag gets it added once the batch moves.
//!
//! A flag oomguard adds beside a batch flag written `--batch_size=32` is written the same way,
//! as one `--flag=N` token ([`Place::absent_joined`]): nanoGPT's configurator takes no other
//! form, and argparse takes both.
//!
//! argv is bytes on Linux: tokens that are not UTF-8 are never knobs and pass through untouched.
//!
//! Layout: [`names`] holds the names knobs go by and how candidates are ordered, [`parts`]
//! cuts the command into its parts and reads `NAME@N`, [`find`] finds one name's occurrences
//! and value, [`mod@locate`] chooses the batch and accumulation knobs ([`knobs`] holds what it
//! returns), [`place`] says where a knob sits and rewrites argv, [`lightning`] and [`context`]
//! tell LightningCLI commands and the notes about launchers and `--auto_find_batch_size`, and
//! [`path_token`] finds a config file's token.

use std::ffi::OsString;

mod context;
pub mod declared;
mod find;
mod knobs;
mod launch;
mod lightning;
mod locate;
mod names;
mod parts;
mod path_token;
mod place;

pub use context::{auto_find_note, context_notes};
pub use find::{find_workers, locate_flag, locate_switch, parse_count};
pub use knobs::{Accum, Site};
pub use launch::launch;
pub use lightning::{is_lightning_cli, lightning_configs, LIGHTNING_SUBCOMMANDS};
pub use locate::locate_with;
pub(crate) use names::is_eval_like;
pub use names::{is_pair_key, ACCUM_FLAGS, BATCH_FLAGS};
pub use parts::part_end;
pub use path_token::{find_path, PathToken};
pub use place::{apply_edits, Edit, Place};

/// Why a command's knobs could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("batch flag {name} is not in the command: add it (e.g. `{}`) or name another with --batch-arg", example_word(.name))]
    BatchFlagMissing { name: String },
    #[error("{name} has no value: write `{name} N` or `{name}=N`")]
    NoValue { name: String },
    #[error("{name} value `{value}` is not a whole number above 0: oomguard can only halve an integer batch")]
    NotAnInteger { name: String, value: String },
    #[error("{name} value `{value}` is too large: at most {max}", max = u64::MAX)]
    TooLarge { name: String, value: String },
    #[error("{name} is in the arguments of more than one program: {places}, parts being separated by `--`; name the one to change with {choices}")]
    Ambiguous {
        name: String,
        places: String,
        choices: String,
    },
    #[error(
        "{spec}: the command has {parts} part(s) separated by `--`; N in NAME@N counts them from 1"
    )]
    NoSuchPart { spec: String, parts: usize },
    #[error(
        "{name} cannot be both the batch and the accumulation flag: name the other one with {fix}"
    )]
    BothRoles { name: String, fix: &'static str },
}

/// `name` with a value, in the form the command takes it: `--flag 8`, a yacs `KEY 8` pair, an
/// override `key=8`.
fn example_word(name: &str) -> String {
    if name.starts_with('-') || is_pair_key(name) {
        format!("{name} 8")
    } else {
        format!("{name}=8")
    }
}

/// The token at `i` as text, where it is UTF-8.
fn text(argv: &[OsString], i: usize) -> Option<&str> {
    argv.get(i).and_then(|t| t.to_str())
}
