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
//! The folders, in the order an attempt meets them (docs/ARCHITECTURE.md draws the same map):
//!
//! | folder | what it holds |
//! |---|---|
//! | [`front`] | the flags, the `--config` job file, the run's settings, `--dry-run`'s plan |
//! | [`knobs`] | where the job keeps its batch and accumulation, and how to change them |
//! | [`probe`] | the probe inside a Python job, and what it reports |
//! | [`launch`] | spawning the job: process group, cgroup, identity, terminal; oomguard's signals |
//! | [`output`] | the job's output passed through and logged, oomguard's own lines |
//! | [`observe`] | the job's memory: processes, cgroups, GPUs, the kernel, Slurm |
//! | [`supervise`] | one attempt, from spawn to the last reaped descendant |
//! | [`judge`] | why it ended: the output read, the kernel's evidence, the verdict |
//! | [`decide`] | relaunch or stop, how much smaller, room on a shared card, the checkpoint |
//! | [`remember`] | the run directory and each job's memory across runs |
//! | [`tell`] | hooks, the service manager, metrics, `status` and `report` |
//! | [`guard`] | acting for the job's user as root: credentials, files, processes |
//! | [`commands`] | the commands that run no job: `status`, `classify`, `report`, `doctor`, ... |
//!
//! A folder imports only folders below it in this order of layers: guard; observe; judge and
//! output; knobs; probe; launch and decide; remember; tell and supervise; front; commands and
//! run. Each folder's first paragraph names what it must not import.
//!
//! How oomguard itself ends early, and every exit status it ends with, is [`error`]'s.
//! Everything is private to the crate except the binary's entry ([`run()`], [`parse_from`],
//! [`Reporter`], [`Error`] and the exit statuses) and [`api`], the short list the benchmarks and
//! integration tests drive.

// The crate's pages are its developers' map, read with `--document-private-items`: the public
// items (the binary's entry, `api` for the tests) may name the private modules they stand on.
#![allow(rustdoc::private_intra_doc_links)]

mod error;
// In the order of the layers above, lowest first.
mod commands;
mod decide;
mod front;
mod guard;
mod judge;
mod knobs;
mod launch;
mod observe;
mod output;
mod probe;
mod remember;
mod run;
mod supervise;
mod tell;

use crate::front::cli::Command;

/// Its exit statuses, and the error that ends it early with one.
pub use crate::error::{Error, EXIT_CANT_CREATE, EXIT_GAVE_UP, EXIT_INTERNAL, EXIT_USAGE};
/// What the binary uses: the command line parsed, and the one line it prints on an error.
pub use crate::front::cli::{parse_from, Cli, ParseError};
pub use crate::output::console::Reporter;

/// What the benchmarks (benches/) and the integration tests (tests/it/) drive directly, under
/// the module paths they have inside the crate. Nothing else of the crate is public, so the
/// compiler sees every item nothing uses.
pub mod api {
    pub mod cgroup {
        pub use crate::observe::cgroup::{JobCgroup, Limits, Parent};
    }
    pub mod classify {
        pub use crate::judge::classify::{classify_text, memory_error_shown};
    }
    pub mod fit {
        pub use crate::decide::fit::{
            attach_fixed, observe, Evidence, Memory, Observed, Ramp, DIVISOR_SLACK,
        };
    }
    pub mod gpu {
        pub use crate::observe::gpu::{GpuError, GpuProbe, GpuSnapshot};
    }
    pub mod jobs {
        pub use crate::remember::jobs::memory::LastSuccess;
        pub use crate::remember::jobs::start::start_from;
    }
    pub mod knobs {
        pub use crate::knobs::{default_causes, Knob, KnobSet, Moves, Place, Rule, Step, Value};
        pub mod patch {
            pub use crate::knobs::patch::{Mode, Patcher};
        }
    }
    pub mod mem {
        pub use crate::observe::mem::process::ProcReader;
        pub use crate::observe::mem::system::{parse_meminfo, SystemReader};
        pub use crate::observe::mem::tree::ProcTree;
        pub use crate::observe::mem::tree_mem::read_tree;
    }
    pub mod outcome {
        pub use crate::judge::outcome::Cause;
    }
    pub mod policy {
        pub use crate::decide::policy::{decide_with, Decision, Limits, StepPlan, Strategy};
    }
    pub mod record {
        pub use crate::remember::record::run_dir::RunDir;
        pub use crate::remember::record::summary::{
            rfc3339, AttemptRecord, FinalSizes, KnobValues, PeakRecord, Summary,
        };
    }
    pub mod report {
        pub use crate::tell::report::RunReport;
    }
    pub mod sampler {
        pub use crate::observe::sampler::Sampler;
    }
    pub mod units {
        pub use crate::observe::units::human_bytes;
    }
}

/// Runs a parsed command line; returns the process exit status.
pub fn run(cli: Cli) -> Result<i32, Error> {
    let report = Reporter { quiet: cli.quiet };
    output::logging::init_tracing_as(cli.verbose, cli.quiet, cli.log_format);
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
        Command::Doctor(args) => Ok(commands::doctor::run(
            report,
            args.config.as_deref(),
            &args.command,
        )),
        Command::Completions(args) => {
            commands::print_bytes(&commands::install::completions(args.shell))
        }
        Command::Man(args) => commands::man(&args),
        Command::InstallUnits(args) => commands::install_units(&args),
        Command::Guard => Ok(launch::child::guard_main(std::io::stdin().lock())),
        Command::Hook(args) => Ok(tell::hooks::wrapper_main(args.timeout_ms, &args.argv)),
    }
}

/// What the unit tests share: a command written as one line of words turned into the argv a
/// process gets, an argv back into one line for an assertion, and the project with a YAML
/// training config that both knob resolvers (the command's and a job file's) read. Compiled
/// for tests only, so no production code can come to lean on it; table rows stay with their
/// tests.
#[cfg(test)]
mod test_util {
    use std::ffi::OsString;

    /// `"python train.py --batch_size 8"` as the argv it stands for: split on whitespace, with no
    /// quoting (a word with a space in it needs an argv written out).
    pub fn argv(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    /// An argv as one line, its words joined by single spaces (bytes that are not UTF-8 shown as
    /// U+FFFD).
    pub fn words(argv: &[OsString]) -> String {
        argv.iter()
            .map(|t| t.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The training config of [`yaml_project`]'s `configs/default.yaml`.
    pub const TRAINING_YAML: &str = "training:\n  batch_size: 64\n  gradient_accumulation_steps: 1\n  num_workers: 4\n  pin_memory: true\n  lr: 3e-4\n";

    /// A project directory whose `configs/default.yaml` is [`TRAINING_YAML`].
    pub fn yaml_project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("configs")).unwrap();
        std::fs::write(dir.path().join("configs/default.yaml"), TRAINING_YAML).unwrap();
        dir
    }
}
