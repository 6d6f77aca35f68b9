//! The front door: the flags ([`cli`]), a `--config` job file ([`jobfile`]), both made into the
//! run's settings ([`settings`]) with the job's context checked before anything starts
//! ([`runas`]), and the commands that run no job: `doctor`, `--dry-run`'s plan ([`dry_run`]),
//! `install` and `install-units`.
//!
//! It may import every folder below it, [`crate::tell`] and [`crate::supervise`] included; only
//! [`crate::commands`], [`mod@crate::run`] and the crate's entry import it.

pub(crate) mod cli;
pub(crate) mod dry_run;
pub(crate) mod install_units;
pub(crate) mod jobfile;
pub(crate) mod runas;
pub(crate) mod settings;
