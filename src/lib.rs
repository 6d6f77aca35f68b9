//! # oomguard
//!
//! Supervises a machine-learning training command. It spawns the job (never through a shell) in
//! its own process group, streams its output untouched, and when an attempt dies it names the
//! cause: an accelerator or host out-of-memory error in the output, a DataLoader worker killed,
//! the kernel OOM killer (with evidence from /proc/vmstat and the kernel log), a plain SIGKILL, or
//! an ordinary failure. After an out-of-memory death it relaunches the job with the batch halved
//! and gradient accumulation raised so that batch × accumulation stays the same, until the job
//! fits, succeeds, or a limit is reached. Each attempt's output goes to `<run-dir>/attempt-N.log`
//! and the story of the run to `<run-dir>/summary.json`.
//!
//! ## How it works
//!
//! One run is a loop of attempts, each in named steps:
//!
//! 1. [`knobs`] builds the attempt's argv, environment and config files from the knobs' values;
//! 2. [`supervise`] spawns it ([`child`]; on a pseudo-terminal from [`terminal`] when oomguard
//!    runs under one), records and forwards its output ([`stream`]), acts on signals counted
//!    per delivery ([`signals`]), samples its memory ([`sampler`], [`mem`], [`gpu`], [`cgroup`]),
//!    reaps every descendant and gathers kernel evidence ([`kernel`], [`cgroup_chain`]);
//! 3. [`classify`] names the cause from the ending, the output tail ([`scan`]) and that evidence;
//! 4. [`record`] saves summary.json and [`console`] tells the user;
//! 5. [`policy`] decides: relaunch (smaller, after a backoff; how much smaller from the
//!    attempts' out-of-memory numbers, [`oom_numbers`], through the model in [`fit`]) or stop
//!    with an outcome.
//!
//! What moves between attempts are [`knobs`]: flags, switches, overrides, environment variables
//! and keys in config files ([`jobfile`] reads the `--config` ladder, and the job a job file
//! carries: [`runas`] readies its workdir, environment and user); [`knobs::patch`] gives the
//! user's files back however the run ends, and `--dry-run` prints the ladder ([`dry_run`]).
//! [`jobs`] remembers, per job, what each attempt ran with and how it ended: a run starts from
//! the knob values that worked in its job's last run. Before a relaunch, [`resume`] picks the
//! newest complete checkpoint to hand the job (`--resume-arg FLAG --checkpoint GLOB`), looking
//! at it while the backoff is waited.
//!
//! The job's file also holds its latest run (running, waiting, how it ended), rewritten on each
//! change, which `oomguard status` ([`status`]) reads and checks; a run whose oomguard was
//! killed is continued by the job's next start with the values of the attempt it was in.
//! [`hooks`] runs `--on-relaunch` and `--on-exit` commands to tell someone not watching.

mod cgroup;
mod cgroup_chain;
mod child;
mod classify;
mod cli;
mod commands;
mod console;
mod doctor;
mod dry_run;
mod fit;
mod fsutil;
mod gpu;
mod hooks;
mod install;
mod jobfile;
mod jobs;
mod kernel;
mod knobs;
mod liveness;
mod logging;
mod mem;
mod metrics;
mod notify;
mod oom_numbers;
mod outcome;
mod pathwalk;
mod policy;
mod principal;
mod quiet;
mod record;
mod report;
mod resume;
mod run;
mod runas;
mod sampler;
mod scan;
mod settings;
mod signals;
mod slurm;
mod status;
mod stream;
mod supervise;
mod terminal;
mod units;
mod watch;

use crate::child::SpawnError;
use crate::cli::Command;
use crate::record::run_dir::RunDirError;
use crate::settings::from_args::UsageError;

/// What the binary uses: the command line parsed, and the one line it prints on an error.
pub use crate::cli::{parse_from, Cli, ParseError};
pub use crate::console::Reporter;

/// What the benchmarks (benches/) and the integration tests (tests/it/) drive directly, under
/// the module paths they have inside the crate. Nothing else of the crate is public, so the
/// compiler sees every item nothing uses.
pub mod api {
    pub mod cgroup {
        pub use crate::cgroup::{JobCgroup, Limits, Parent};
    }
    pub mod classify {
        pub use crate::classify::classify_text;
    }
    pub mod fit {
        pub use crate::fit::{
            attach_fixed, observe, Evidence, Memory, Observed, Ramp, DIVISOR_SLACK,
        };
    }
    pub mod gpu {
        pub use crate::gpu::{GpuError, GpuProbe, GpuSnapshot};
    }
    pub mod jobs {
        pub use crate::jobs::memory::LastSuccess;
        pub use crate::jobs::start::start_from;
    }
    pub mod knobs {
        pub use crate::knobs::{default_causes, Knob, KnobSet, Moves, Place, Rule, Step, Value};
        pub mod patch {
            pub use crate::knobs::patch::{Mode, Patcher};
        }
    }
    pub mod mem {
        pub use crate::mem::process::ProcReader;
        pub use crate::mem::system::{parse_meminfo, SystemReader};
        pub use crate::mem::tree::ProcTree;
        pub use crate::mem::tree_mem::read_tree;
    }
    pub mod outcome {
        pub use crate::outcome::Cause;
    }
    pub mod policy {
        pub use crate::policy::{decide_with, Decision, Limits, StepPlan, Strategy};
    }
    pub mod record {
        pub use crate::record::run_dir::RunDir;
        pub use crate::record::summary::{
            rfc3339, AttemptRecord, FinalSizes, KnobValues, PeakRecord, Summary,
        };
    }
    pub mod report {
        pub use crate::report::RunReport;
    }
    pub mod sampler {
        pub use crate::sampler::Sampler;
    }
    pub mod units {
        pub use crate::units::human_bytes;
    }
}

/// Exit status when out-of-memory deaths outlasted every remedy (EX_TEMPFAIL in sysexits.h:
/// more memory, or a lower --min-batch, would let a retry succeed).
pub const EXIT_GAVE_UP: i32 = 75;
/// Exit status for usage errors: bad flags, no command, unusable run directory.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when oomguard itself failed (cannot write its files, cannot listen to signals).
pub const EXIT_INTERNAL: i32 = 70;

/// Everything that ends oomguard early, each with its exit status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error(transparent)]
    RunDir(RunDirError),
    #[error("{0}")]
    Cgroup(String),
    /// A config file cannot be claimed for patching: nothing was started.
    #[error("{0}")]
    PatchStart(knobs::patch::PatchError),
    /// A config file could not be patched for an attempt.
    #[error("{0}")]
    Patch(knobs::patch::PatchError),
    /// `oomguard report` was given something that is not a readable run directory.
    #[error(transparent)]
    Report(#[from] report::ReportError),
    #[error("{action}: {source}")]
    Internal {
        action: &'static str,
        source: std::io::Error,
    },
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Cgroup(_) | Error::PatchStart(_) => EXIT_USAGE,
            Error::Patch(_) => EXIT_INTERNAL,
            Error::Spawn(e) => e.exit_code(),
            // A run directory we cannot create is bad input: nothing was started.
            Error::RunDir(RunDirError::Write { .. }) => EXIT_INTERNAL,
            Error::RunDir(_) => EXIT_USAGE,
            Error::Internal { .. } => EXIT_INTERNAL,
            Error::Report(_) => EXIT_USAGE,
        }
    }
}

/// Runs a parsed command line; returns the process exit status.
pub fn run(cli: Cli) -> Result<i32, Error> {
    let report = Reporter { quiet: cli.quiet };
    logging::init_tracing_as(cli.verbose, cli.quiet, cli.log_format);
    match cli.command {
        Command::Run(args) => {
            // Before the knobs are read from the user's files: a file an oomguard killed with
            // its guard left patched must be read as the user has it, not as it was left.
            // (`--dry-run` writes nothing, so it reads the files as they are.)
            if args.dry_run.is_none() {
                run::recover_patched_files(args.state_dir.clone(), &report);
            }
            run::run_job(args.validate()?, report)
        }
        Command::Classify(args) => Ok(commands::classify_files(&args)),
        Command::Status(args) => commands::show_status(&args, report),
        Command::Report(args) => commands::show_report(&args),
        Command::Doctor(args) => Ok(doctor::run(report, args.config.as_deref())),
        Command::Completions(args) => commands::print_bytes(&install::completions(args.shell)),
        Command::Man(args) => commands::man(&args),
        Command::Guard => Ok(child::guard_main(std::io::stdin().lock())),
        Command::Hook(args) => Ok(hooks::wrapper_main(args.timeout_ms, &args.argv)),
    }
}
