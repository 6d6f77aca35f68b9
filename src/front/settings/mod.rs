//! Validated settings of one run, built from the command line's flags by [`from_args`] (clap's
//! definitions are [`crate::front::cli`]'s), its knobs by [`job_knobs`] (from a job file's ladder,
//! else found in the command). Everything here has been checked: the command is non-empty, its
//! knobs parse, the limits are consistent. This module holds the result only; it parses nothing.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::decide::policy::Limits;
use crate::judge::outcome::Cause;
use crate::knobs::KnobSet;
use crate::observe::cgroup;
use crate::observe::watch::Bounds;

pub mod from_args;
pub mod job_knobs;

/// What `oomguard run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The job's argv as the user wrote it: bytes, not necessarily UTF-8.
    pub command: Vec<OsString>,
    /// The knobs oomguard turns, in ladder order.
    pub knobs: KnobSet,
    /// `--min-batch`: the floor of a batch found inside the job once it runs (the command's
    /// own batch knob carries it in its rule).
    pub min_batch: u64,
    /// `--dry-run`: print the ladder for deaths of this cause, run nothing.
    pub dry_run: Option<Cause>,
    /// Where to put logs and the summary; `None` for the default location.
    pub run_dir: Option<PathBuf>,
    /// `--log-max`: the most of one attempt's output kept in its log.
    pub log_max_bytes: u64,
    pub limits: Limits,
    pub grace: Duration,
    /// How often the job's memory is sampled.
    pub interval: Duration,
    /// `--pss-interval`: how often PSS is also read on a clock (zero: no clock; see `sampler`).
    pub pss_interval: Duration,
    pub cgroup: CgroupPlan,
    /// Soft bounds that stop the job gracefully.
    pub bounds: Bounds,
    /// How long to wait for the GPU to release the previous attempt's processes.
    pub gpu_free_timeout: Duration,
    /// `--gpu-wait`: the longest wait for room on a shared card (zero: no wait).
    pub gpu_wait: Duration,
    /// `--gpus N`: the job gets the N cards with the most free memory.
    pub gpus: Option<u32>,
    /// The window of the steady-growth warning.
    pub trend_window: Duration,
    /// How a halving knob moves after an out-of-memory death (`--strategy`).
    pub strategy: crate::decide::policy::Strategy,
    /// The share of the limit `--strategy fit` keeps free (`--margin`, 0.10 for 10%).
    pub margin: f64,
    /// The fragmentation hint may be given (not `--no-allocator-hint`).
    pub allocator_hint: bool,
    /// Give the job a pseudo-terminal when oomguard's stdout and stderr are terminals (not
    /// `--no-pty`).
    pub pty: bool,
    /// Look inside a Python job with the probe (not `--no-probe`).
    pub probe: bool,
    /// The job this run belongs to, and where its memory is kept (`--name`, `--state-dir`,
    /// `--fresh`).
    pub job: crate::remember::jobs::name::JobSettings,
    /// `--resume-arg` / `--checkpoint`: hand a relaunch the newest complete checkpoint.
    pub resume: Option<crate::decide::resume::Resume>,
    /// `--on-exit`, `--on-relaunch` and their `--hook-timeout`.
    pub hooks: crate::tell::hooks::Hooks,
    /// `--hang-timeout` and `--stall-timeout` (`None` where off).
    pub quiet: crate::judge::quiet::Timeouts,
    /// From the job file: where the job runs, its `[env]`, and whom it runs as.
    pub job_context: crate::front::runas::JobContext,
    /// Whether `run_dir` was chosen by a job file its user could write: its files are then made
    /// as that user ([`crate::guard::principal`]).
    pub run_dir_is_users: bool,
    /// `--metrics-addr` / `--metrics-textfile`.
    pub metrics: crate::tell::metrics::MetricsPlan,
}

/// Whether attempts run in their own memory cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupPlan {
    /// `--no-cgroup`.
    Off,
    /// Use one where a writable memory cgroup exists, for exact accounting; carry on without.
    IfAvailable,
    /// `--memory-max`: a cgroup with these limits, or refuse to start.
    Required(cgroup::Limits),
}
