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
//! 1. [`rewrite`] builds the attempt's argv from the original command and the current sizes;
//! 2. [`supervise`] spawns it ([`child`]), tees its output ([`stream`]), forwards signals, reaps
//!    every descendant and gathers kernel evidence ([`kernel`]);
//! 3. [`classify`] names the cause from the ending, the output tail ([`scan`]) and that evidence;
//! 4. [`report`] saves summary.json and tells the user;
//! 5. [`policy`] decides: relaunch (smaller, after a backoff) or stop with an outcome.

pub mod child;
pub mod classify;
pub mod cli;
pub mod config;
pub mod kernel;
pub mod mem;
pub mod outcome;
pub mod policy;
pub mod report;
pub mod rewrite;
pub mod scan;
pub mod stream;
pub mod supervise;

use std::io::Read;
use std::path::Path;

use nix::sys::signal::Signal;

use crate::child::{Launch, SpawnError};
use crate::classify::{AttemptFacts, Cause};
use crate::cli::{ClassifyArgs, Cli, Command, UsageError};
use crate::config::RunSettings;
use crate::policy::{Decision, Outcome, Sizes};
use crate::report::{AttemptRecord, FinalSizes, Reporter, RunDir, RunDirError, Summary};
use crate::rewrite::{Accum, Changes};
use crate::supervise::{KernelPaths, Supervisor};

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
    #[error("{action}: {source}")]
    Internal {
        action: &'static str,
        source: std::io::Error,
    },
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => EXIT_USAGE,
            Error::Spawn(e) => e.exit_code(),
            // A run directory we cannot create is bad input: nothing was started.
            Error::RunDir(RunDirError::Write { .. }) => EXIT_INTERNAL,
            Error::RunDir(_) => EXIT_USAGE,
            Error::Internal { .. } => EXIT_INTERNAL,
        }
    }
}

/// Runs a parsed command line; returns the process exit status.
pub fn run(cli: Cli) -> Result<i32, Error> {
    let report = Reporter { quiet: cli.quiet };
    report::init_tracing(cli.verbose, cli.quiet);
    match cli.command {
        Command::Run(args) => run_job(args.validate()?, report),
        Command::Classify(args) => Ok(classify_files(&args)),
        Command::Guard => Ok(child::guard_main(std::io::stdin().lock())),
    }
}

/// `oomguard run`: checks what can be checked before anything starts, then runs the attempts.
fn run_job(settings: RunSettings, report: Reporter) -> Result<i32, Error> {
    let path_var = std::env::var_os("PATH");
    child::resolve_program(&settings.command[0], path_var.as_deref())?;
    let run_dir =
        RunDir::create(settings.run_dir.as_deref(), &settings.command[0]).map_err(Error::RunDir)?;
    let original = Sizes {
        batch: settings.knobs.batch.as_ref().map(|k| k.value),
        accum: settings.knobs.accum_value(),
    };
    let mut summary = Summary::new(&settings.command, final_sizes(original));
    run_dir.save(&summary).map_err(Error::RunDir)?;
    report.say(&format!("run directory {}", run_dir.path().display()));
    if settings.knobs.batch.is_none() {
        report.warn("no batch flag found in the command: an out-of-memory death will not be relaunched smaller (name the flag with --batch-arg)");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Internal {
            action: "cannot start the async runtime",
            source,
        })?;
    runtime.block_on(attempt_loop(
        &settings,
        original,
        &run_dir,
        &mut summary,
        report,
    ))
}

/// The attempt loop: launch, supervise, classify, record, decide.
async fn attempt_loop(
    settings: &RunSettings,
    original: Sizes,
    run_dir: &RunDir,
    summary: &mut Summary,
    report: Reporter,
) -> Result<i32, Error> {
    let mut supervisor =
        Supervisor::new(settings.grace, KernelPaths::default()).map_err(|source| {
            Error::Internal {
                action: "cannot listen for signals",
                source,
            }
        })?;
    let mut history: Vec<(Cause, Sizes)> = Vec::new();
    let mut sizes = original;
    let mut warned_effective = false;
    let result = loop {
        let attempt = history.len() as u32 + 1;
        let prev_cause = history.last().map(|(cause, _)| *cause);
        let launch = launch_for(settings, sizes, attempt, prev_cause, run_dir.path());
        let log = run_dir.open_log(attempt, &report);
        let end = match supervisor.run_attempt(&launch, log).await {
            Ok(end) => end,
            Err(e) => break Err(Error::Spawn(e)),
        };
        let verdict = classify::classify(&AttemptFacts {
            ending: end.ending,
            tail: &end.tail,
            kernel: &end.kernel,
            user_stopped: end.user_stop.is_some(),
            memory_limit: None,
        });
        summary.attempts.push(AttemptRecord {
            attempt,
            command: launch.argv.clone(),
            batch_size: sizes.batch,
            accum: sizes.accum,
            cause: verdict.cause,
            evidence: verdict.evidence.clone(),
            exit_code: end.ending.exit_code(),
            signal: end.ending.signal(),
            started_at: report::rfc3339(end.started_at),
            duration_s: end.duration.as_secs_f64(),
        });
        summary.final_sizes = final_sizes(sizes);
        if let Err(e) = run_dir.save(summary) {
            report.error(&e.to_string());
        }
        if verdict.cause != Cause::Ok {
            report.say(&format!(
                "attempt {attempt} ended after {}: {} ({})",
                report::short_duration(end.duration),
                verdict.cause.as_str(),
                verdict.evidence
            ));
        }
        history.push((verdict.cause, sizes));
        match policy::decide(&history, original, &settings.limits) {
            Decision::Relaunch {
                sizes: next,
                effective_note,
                delay,
            } => {
                let changes = Changes {
                    knobs: &settings.knobs,
                    from: (sizes.batch.unwrap_or(0), sizes.accum),
                    to: (next.batch.unwrap_or(0), next.accum),
                };
                report.say(&format!(
                    "attempt {} in {}: {changes}",
                    attempt + 1,
                    report::short_duration(delay)
                ));
                if let Some(note) = effective_note {
                    report.warn(&note);
                }
                if next.batch != sizes.batch
                    && matches!(settings.knobs.accum, Accum::None)
                    && !warned_effective
                {
                    warned_effective = true;
                    report.warn(&format!(
                        "the command has no gradient-accumulation flag, so the effective batch shrinks with the batch ({} → {}); \
                         name the job's flag with --accum-arg to keep it",
                        original.batch.unwrap_or(0),
                        next.batch.unwrap_or(0)
                    ));
                }
                if let Some(signal) = supervisor.pause(delay).await {
                    break Ok((Outcome::Interrupted, 128 + signal as i32));
                }
                sizes = next;
            }
            Decision::Stop { outcome, reason } => {
                if let Some(reason) = reason {
                    report.say(&format!("stopping: {} ({reason})", outcome.as_str()));
                }
                let code = match outcome {
                    Outcome::Succeeded => 0,
                    Outcome::GaveUp => EXIT_GAVE_UP,
                    Outcome::Failed => end.ending.shell_code(),
                    Outcome::Interrupted => 128 + end.user_stop.unwrap_or(Signal::SIGINT) as i32,
                };
                break Ok((outcome, code));
            }
        }
    };
    supervisor.finish();
    let (outcome, code) = result?;
    summary.finish(outcome);
    run_dir.save(summary).map_err(Error::RunDir)?;
    for line in report::table(&summary.attempts) {
        report.say(&line);
    }
    report.say(&format!(
        "{}; summary in {}",
        outcome.as_str(),
        run_dir.path().join("summary.json").display()
    ));
    Ok(code)
}

fn final_sizes(sizes: Sizes) -> FinalSizes {
    FinalSizes {
        batch_size: sizes.batch,
        accum: sizes.accum,
    }
}

/// The argv and environment of one attempt.
fn launch_for(
    settings: &RunSettings,
    sizes: Sizes,
    attempt: u32,
    prev: Option<Cause>,
    run_dir: &Path,
) -> Launch {
    let argv = match sizes.batch {
        Some(batch) => rewrite::apply(&settings.command, &settings.knobs, batch, sizes.accum),
        None => settings.command.clone(),
    };
    let mut env = vec![
        ("OOMGUARD_ATTEMPT".to_string(), attempt.to_string()),
        (
            "OOMGUARD_RUN_DIR".to_string(),
            run_dir.display().to_string(),
        ),
    ];
    let optional = [
        ("OOMGUARD_BATCH_SIZE", sizes.batch.map(|b| b.to_string())),
        ("OOMGUARD_GRAD_ACCUM", sizes.accum.map(|a| a.to_string())),
        ("OOMGUARD_PREV_CAUSE", prev.map(|c| c.as_str().to_string())),
    ];
    env.extend(
        optional
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?))),
    );
    // Python block-buffers a pipe; the user expects live output.
    if std::env::var_os("PYTHONUNBUFFERED").is_none() {
        env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    }
    Launch { argv, env }
}

/// `oomguard classify`: one line per file; exit 1 if a file could not be read.
fn classify_files(args: &ClassifyArgs) -> i32 {
    let mut status = 0;
    for file in &args.files {
        let text = match read_input(file) {
            Ok(text) => text,
            Err(e) => {
                Reporter { quiet: false }.error(&format!("cannot read {}: {e}", file.display()));
                status = 1;
                continue;
            }
        };
        let verdict = classify::classify_text(&text);
        let class = verdict.as_ref().map_or("none", |v| v.cause.as_str());
        if args.json {
            let evidence = verdict.as_ref().map(|v| v.evidence.as_str());
            let line = serde_json::json!({"file": file, "class": class, "evidence": evidence});
            println!("{line}");
        } else {
            println!("{class}\t{}", file.display());
        }
    }
    status
}

fn read_input(file: &Path) -> std::io::Result<String> {
    let bytes = if file == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf)?;
        buf
    } else {
        std::fs::read(file)?
    };
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
