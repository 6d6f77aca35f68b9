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
//! [`mod@run`] holds one `oomguard run`: its loop reads as the steps of one attempt, launch →
//! run → judge → learn → decide → wait, and each step tells what happened as one event to
//! everyone who listens (console, run directory, job memory, service manager, metrics, hooks).
//! The modules, by the stage of the data path they serve:
//!
//! | stage | modules |
//! |---|---|
//! | settings | [`cli`] (the flags), [`settings`] (flags and job file → the run's settings), [`jobfile`] (`--config`: the knob ladder and the job), [`runas`] and [`principal`] (as root: whom the job and its files belong to), [`pathwalk`], [`fsutil`], [`units`] (sizes and durations) |
//! | knobs | [`knobs`] (flags, overrides, environment, config files: found, rewritten, patched and given back), [`resume`] (the checkpoint to hand a relaunch) |
//! | run | [`mod@run`] (the attempt loop), [`supervise`] (one attempt: spawn, watch, stop, reap; its rules apart in `supervise::attempt`), [`child`], [`pinned`], [`terminal`], [`stream`], [`signals`], [`slurm`], [`quiet`], [`watch`] |
//! | observe | [`sampler`], [`mem`], [`gpu`], [`cgroup`], [`cgroup_chain`], [`kernel`], [`liveness`] |
//! | judge | [`classify`] (the verdict), [`taken`] (a device OOM that neighbours on a shared card caused), [`scan`] (reading the output), [`oom_numbers`], [`outcome`] (the words of an ending) |
//! | decide | [`policy`] (relaunch or stop, and with what), [`leftovers`] (a relaunch refused over the last attempt's files: set them aside or stop), [`fit`] (how much smaller, from the evidence), [`room`] (room on a shared card, the cards `--gpus` picks, other oomguards' claims) |
//! | record | [`record`] (summary.json, samples.csv, the run directory), [`jobs`] (each job's memory), [`console`] and [`logging`] (what the user reads), [`notify`], [`metrics`], [`hooks`] |
//! | commands | [`commands`] (`status`, `classify`, `report`, `man`), [`status`], [`report`], [`doctor`], [`install`], [`install_units`], [`dry_run`] |
//!
//! How oomguard itself ends early, and every exit status it ends with, is [`error`]'s.
//! Everything is private to the crate except the binary's entry ([`run()`], [`parse_from`],
//! [`Reporter`], [`Error`] and the exit statuses) and [`api`], the short list the benchmarks and
//! integration tests drive.

// The crate's pages are its developers' map, read with `--document-private-items`: the public
// items (the binary's entry, `api` for the tests) may name the private modules they stand on.
#![allow(rustdoc::private_intra_doc_links)]

mod error;
#[cfg(test)]
mod test_util;
// settings
mod cli;
mod fsutil;
mod jobfile;
mod pathwalk;
mod principal;
mod runas;
mod settings;
mod units;
// knobs
mod knobs;
mod resume;
// run
mod child;
mod pinned;
mod probe;
mod quiet;
mod run;
mod signals;
mod slurm;
mod stream;
mod supervise;
mod terminal;
mod watch;
// observe
mod cgroup;
mod cgroup_chain;
mod gpu;
mod kernel;
mod liveness;
mod mem;
mod sampler;
// judge
mod classify;
mod oom_numbers;
mod outcome;
mod scan;
mod taken;
// decide
mod fit;
mod leftovers;
mod policy;
mod room;
// record
mod console;
mod hooks;
mod jobs;
mod logging;
mod metrics;
mod notify;
mod record;
// commands
mod commands;
mod doctor;
mod dry_run;
mod install;
mod install_units;
mod report;
mod status;

use crate::cli::Command;

/// What the binary uses: the command line parsed, and the one line it prints on an error.
pub use crate::cli::{parse_from, Cli, ParseError};
pub use crate::console::Reporter;
/// Its exit statuses, and the error that ends it early with one.
pub use crate::error::{Error, EXIT_CANT_CREATE, EXIT_GAVE_UP, EXIT_INTERNAL, EXIT_USAGE};

/// What the benchmarks (benches/) and the integration tests (tests/it/) drive directly, under
/// the module paths they have inside the crate. Nothing else of the crate is public, so the
/// compiler sees every item nothing uses.
pub mod api {
    pub mod cgroup {
        pub use crate::cgroup::{JobCgroup, Limits, Parent};
    }
    pub mod classify {
        pub use crate::classify::{classify_text, memory_error_shown};
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
        Command::Doctor(args) => Ok(doctor::run(report, args.config.as_deref(), &args.command)),
        Command::Completions(args) => commands::print_bytes(&install::completions(args.shell)),
        Command::Man(args) => commands::man(&args),
        Command::InstallUnits(args) => commands::install_units(&args),
        Command::Guard => Ok(child::guard_main(std::io::stdin().lock())),
        Command::Hook(args) => Ok(hooks::wrapper_main(args.timeout_ms, &args.argv)),
    }
}
