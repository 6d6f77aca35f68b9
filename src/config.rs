//! Validated settings of one run, built from the command line by `cli`. Everything here has been
//! checked: the command is non-empty, its knobs parse, the limits are consistent.

use std::path::PathBuf;
use std::time::Duration;

use crate::policy::Limits;
use crate::rewrite::Knobs;

/// What `oomguard run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The job's argv as the user wrote it.
    pub command: Vec<String>,
    /// The batch and accumulation knobs found in it.
    pub knobs: Knobs,
    /// Where to put logs and the summary; `None` for the default location.
    pub run_dir: Option<PathBuf>,
    pub limits: Limits,
    pub grace: Duration,
}
