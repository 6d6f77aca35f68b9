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
//! 4. [`report`] saves summary.json and tells the user;
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

pub mod cgroup;
pub mod cgroup_chain;
pub mod child;
pub mod classify;
pub mod cli;
pub mod doctor;
pub mod dry_run;
pub mod fit;
pub mod fsutil;
pub mod gpu;
pub mod hooks;
pub mod install;
pub mod jobfile;
pub mod jobs;
pub mod kernel;
pub mod knobs;
pub mod liveness;
pub mod mem;
pub mod metrics;
pub mod notify;
pub mod oom_numbers;
pub mod outcome;
pub mod pathwalk;
pub mod policy;
pub mod principal;
pub mod quiet;
pub mod report;
pub mod report_cmd;
pub mod resume;
pub mod runas;
pub mod sampler;
pub mod scan;
pub mod settings;
pub mod signals;
pub mod slurm;
pub mod status;
pub mod stream;
pub mod supervise;
pub mod terminal;
pub mod units;
pub mod watch;

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;

use crate::child::{Launch, SpawnError};
use crate::classify::{AttemptFacts, Cause};
use crate::cli::{ClassifyArgs, Cli, Command};
use crate::knobs::patch::Patcher;
use crate::knobs::{KnobSet, Value};
use crate::policy::{Decision, Outcome};
use crate::report::{
    AttemptRecord, FinalSizes, KnobValues, Reporter, RunDir, RunDirError, SamplesCsv, Summary,
};
use crate::sampler::{Sample, Sampler};
use crate::settings::from_args::UsageError;
use crate::settings::{CgroupPlan, RunSettings};
use crate::supervise::{AttemptEnd, GpuWait, KernelPaths, Notice, Observer, Setup, Supervisor};

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
    Report(#[from] report_cmd::ReportError),
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
    report::init_tracing_as(cli.verbose, cli.quiet, cli.log_format);
    match cli.command {
        Command::Run(args) => {
            // Before the knobs are read from the user's files: a file an oomguard killed with
            // its guard left patched must be read as the user has it, not as it was left.
            // (`--dry-run` writes nothing, so it reads the files as they are.)
            if args.dry_run.is_none() {
                recover_patched_files(args.state_dir.clone(), &report);
            }
            run_job(args.validate()?, report)
        }
        Command::Classify(args) => Ok(classify_files(&args)),
        Command::Status(args) => show_status(&args, report),
        Command::Report(args) => show_report(&args),
        Command::Doctor(args) => Ok(doctor::run(report, args.config.as_deref())),
        Command::Completions(args) => print_bytes(&install::completions(args.shell)),
        Command::Man(args) => man(&args),
        Command::Guard => Ok(child::guard_main(std::io::stdin().lock())),
        Command::Hook(args) => Ok(hooks::wrapper_main(args.timeout_ms, &args.argv)),
    }
}

/// `oomguard report RUN_DIR`: the table (or `--json`) on stdout, and `--html FILE` written.
fn show_report(args: &cli::ReportArgs) -> Result<i32, Error> {
    let run = report_cmd::load(&args.run_dir)?;
    if let Some(path) = &args.html {
        std::fs::write(path, run.html()).map_err(|source| Error::Internal {
            action: "cannot write the --html file",
            source,
        })?;
    }
    let mut text = if args.json { run.json() } else { run.text() };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    print_bytes(text.as_bytes())
}

/// `oomguard man`: one page printed, or every page written into `--dir`.
fn man(args: &cli::ManArgs) -> Result<i32, Error> {
    if let Some(dir) = &args.dir {
        install::write_man_pages(dir).map_err(|source| Error::Internal {
            action: "cannot write the man pages",
            source,
        })?;
        return Ok(0);
    }
    match install::man_page(args.command.as_deref()) {
        Ok(page) => print_bytes(&page),
        Err(why) => Err(Error::Usage(UsageError::ManPage(why))),
    }
}

/// Generated text on stdout (a completion script, a man page), for the shell to redirect.
fn print_bytes(bytes: &[u8]) -> Result<i32, Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|source| Error::Internal {
            action: "cannot write to standard output",
            source,
        })?;
    Ok(0)
}

/// `oomguard run`: checks what can be checked before anything starts, then runs the attempts.
fn run_job(mut settings: RunSettings, report: Reporter) -> Result<i32, Error> {
    enter_job_context(&settings, &report)?;
    places_as_whom(&mut settings)?;
    let path_var = std::env::var_os("PATH");
    child::resolve_program(&settings.command[0], path_var.as_deref())?;
    if let Some(cause) = settings.dry_run {
        print!("{}", dry_run::plan(&settings, cause));
        return Ok(0);
    }
    // The backups of patched files go with the job memory: `--state-dir` where given.
    let state_dir = settings.job.state_dir.clone();
    let metrics = start_metrics(&settings)?;
    let cgroup = cgroup_setup(settings.cgroup)?;
    let run_dir = RunDir::create(
        settings.run_dir.as_deref(),
        &settings.command[0].to_string_lossy(),
        settings.run_dir_is_users,
    )
    .map_err(Error::RunDir)?;
    let mut files = match settings.knobs.open_files(
        state_dir.as_deref(),
        run_dir.path(),
        settings.job.state_dir_is_users,
    ) {
        Ok(files) => files,
        Err(e) => {
            run_dir.discard();
            return Err(Error::PatchStart(e));
        }
    };
    let original = settings.knobs.originals();
    let mut summary = Summary::new(
        &lossy(&settings.command),
        final_sizes(&settings.knobs, &original),
    );
    summary.limits = Some(report::RunLimits {
        memory_max_bytes: match settings.cgroup {
            CgroupPlan::Required(limits) => limits.memory_max_bytes,
            _ => None,
        },
        max_rss_bytes: settings.bounds.max_rss_bytes,
        max_gpu_bytes: settings.bounds.max_gpu_bytes,
        gpu_total_bytes: None,
    });
    let result = run_in(
        &settings,
        &run_dir,
        &mut summary,
        cgroup,
        report,
        files.as_mut(),
        metrics,
    );
    // Every way out passes here (a panic through Patcher's Drop): the user's files come back.
    if let Some(files) = files.as_mut() {
        for line in files.finish() {
            report.warn(&line);
        }
    }
    if result.is_err() && summary.attempts().is_empty() {
        // Nothing ran: leave nothing behind, as for any other input we refuse.
        run_dir.discard();
    }
    result
}

/// Files an oomguard killed together with its guard left patched come back, and the user hears
/// so: before anything else, and before any knob is read from them.
/// `state_dir`: `--state-dir`, where this run keeps its backups (else the default).
fn recover_patched_files(state_dir: Option<PathBuf>, report: &Reporter) {
    if let Some(dir) = state_dir.or_else(report::state_dir) {
        // As root, only a state directory nobody else could write: the job's user is not known
        // yet, and root must not act in a place a user could point elsewhere. A user's own
        // entries are finished by their file's lock before the file is read.
        if !matches!(
            runas::place_is_users(&dir, None, "state directory"),
            Ok(false)
        ) {
            return;
        }
        for line in knobs::patch::Patcher::recover(&dir) {
            report.warn(&line);
        }
    }
}

/// A job file's context: its warnings said, and its `workdir` made oomguard's own working
/// directory, so that the job runs there and relative knob files and checkpoint globs are
/// found there (validation already resolved every path given relative to where we started).
fn enter_job_context(settings: &RunSettings, report: &Reporter) -> Result<(), Error> {
    for warning in &settings.job_context.warnings {
        report.warn(warning);
    }
    if let Some(dir) = &settings.job_context.workdir {
        // Entered as the job's user: a directory they could not reach themselves is not one
        // root opens for their job (which inherits it as its working directory).
        principal::as_user(|| std::env::set_current_dir(dir)).map_err(|e| {
            Error::Usage(UsageError::JobFile(format!(
                "cannot enter the job file's workdir {}: {e}",
                dir.display()
            )))
        })?;
    }
    Ok(())
}

/// As root, decides for the run and state directories (given or default, now that the workdir
/// is entered) whether they are used as root or as the job's user, from who can write their
/// path; one someone else could write is refused (see README's "Security model").
fn places_as_whom(settings: &mut RunSettings) -> Result<(), Error> {
    let who = settings.job_context.run_as.as_ref();
    let usage = |why| Error::Usage(UsageError::JobFile(why));
    let run_dir = settings
        .run_dir
        .clone()
        .unwrap_or_else(report::default_runs_base);
    let run_dir = std::path::absolute(&run_dir).unwrap_or(run_dir);
    settings.run_dir_is_users |=
        runas::place_is_users(&run_dir, who, "run directory").map_err(usage)?;
    if let Some(state) = &settings.job.state_dir {
        settings.job.state_dir_is_users |=
            runas::place_is_users(state, who, "state directory").map_err(usage)?;
    }
    Ok(())
}

/// The run itself, in a run directory that is ready: files, GPU, runtime, then the attempts.
fn run_in(
    settings: &RunSettings,
    run_dir: &RunDir,
    summary: &mut Summary,
    cgroup: Option<(cgroup::Parent, cgroup::Limits)>,
    report: Reporter,
    files: Option<&mut Patcher>,
    metrics: Option<metrics::Exporter>,
) -> Result<i32, Error> {
    run_dir.save(summary, false).map_err(Error::RunDir)?;
    let samples = run_dir.open_samples().map_err(Error::RunDir)?;
    report.event(
        "run_started",
        serde_json::json!({"run_dir": run_dir.path(), "command": summary.command}),
        &format!("run directory {}", run_dir.path().display()),
    );
    for note in &settings.knobs.notes {
        report.say(note);
    }
    if let Some(url) = metrics.as_ref().and_then(|m| m.url()) {
        report.say(&format!("metrics at {url}"));
    }
    if settings.knobs.automatic && settings.knobs.index("batch").is_none() {
        report.warn("no batch flag found in the command: an out-of-memory death will not be relaunched smaller (name the flag with --batch-arg)");
    }
    let mut job = open_job(settings, summary, &report);
    let (gpu, gpu_off) = gpu::open();
    if let Some(reason) = gpu_off {
        report.say(&reason);
        if settings.bounds.max_gpu_bytes.is_some() {
            report.warn("--max-gpu cannot act without GPU monitoring");
        }
    }
    let setup = Setup {
        grace: settings.grace,
        interval: settings.interval,
        kernel_paths: KernelPaths::default(),
        cgroup,
        bounds: settings.bounds,
        trend_window: settings.trend_window,
        pty: settings.pty && terminal::wanted(),
        quiet: settings.quiet,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Internal {
            action: "cannot start the async runtime",
            source,
        })?;
    let mut observer = RunObserver {
        report,
        samples,
        warned_no_cgroup: false,
        notify: notify::Notifier::from_env(),
        metrics,
        ramp: AttemptRamp::default(),
        gpu_capacity_bytes: None,
    };
    let metrics_server = observer.metrics.as_mut().and_then(|m| m.server());
    // From here on the job's output and our own lines go through the writer threads, so a slow
    // reader of our output never costs the log, the classifier or the attempt's end a byte.
    stream::install().map_err(|source| Error::Internal {
        action: "cannot start forwarding the job's output",
        source,
    })?;
    let watchdog = observer.notify.watchdog();
    let result = runtime.block_on(async {
        // Pings only while this runtime turns, i.e. while the attempt loop is alive.
        if let Some(watchdog) = watchdog {
            tokio::spawn(watchdog.run());
        }
        if let Some(server) = metrics_server {
            tokio::spawn(server);
        }
        let mut sampler = Sampler::new(gpu);
        sampler.read_pss(settings.pss_interval, settings.bounds.max_rss_bytes);
        let supervisor = Supervisor::new(setup, sampler).map_err(|source| Error::Internal {
            action: "cannot listen for signals",
            source,
        })?;
        attempt_loop(
            supervisor,
            settings,
            run_dir,
            summary,
            &mut observer,
            files,
            &mut job,
        )
        .await
    });
    observer.notify.stopping();
    if let Some(limits) = summary.limits.as_mut() {
        limits.gpu_total_bytes = observer.gpu_capacity_bytes;
    }
    // Like `tee`, oomguard ends only once every byte of the job's output is written out; a stop
    // signal (Ctrl-C at a terminal paused with Ctrl-S) or Ctrl-Z acts on that wait as on `tee`'s.
    signals::default_stops();
    stream::finish();
    result
}

/// The run's job: loads what its earlier runs learned (saying where attempt 1 starts) and
/// names it in summary.json.
fn open_job(settings: &RunSettings, summary: &mut Summary, report: &Reporter) -> jobs::run::JobRun {
    let job = jobs::run::JobRun::open(&settings.job, &settings.knobs, report);
    summary.job = Some(job.name().to_string());
    summary.started_from = job.start().map(|start| start.knob_values(&settings.knobs));
    job
}

/// `--metrics-addr` bound (a port in use is a usage error before anything starts) and the
/// metrics set up, where asked for.
fn start_metrics(settings: &RunSettings) -> Result<Option<metrics::Exporter>, Error> {
    let limit_bytes = match settings.cgroup {
        CgroupPlan::Required(limits) => limits.memory_max_bytes,
        _ => None,
    };
    metrics::Exporter::start(&settings.metrics, limit_bytes)
        .map_err(|why| Error::Usage(UsageError::Metrics(why)))
}

/// Finds where attempt cgroups can be made. `--memory-max` without a writable memory cgroup is
/// a usage error: refusing before anything starts beats running without the promised limit.
fn cgroup_setup(plan: CgroupPlan) -> Result<Option<(cgroup::Parent, cgroup::Limits)>, Error> {
    let limits = match plan {
        CgroupPlan::Off => return Ok(None),
        CgroupPlan::IfAvailable => cgroup::Limits::default(),
        CgroupPlan::Required(limits) => limits,
    };
    let required = limits.memory_max_bytes.is_some();
    // Prepared before any helper process exists: on cgroup v2 a second process in our cgroup
    // would stop the memory controller from being enabled for attempt cgroups.
    let ready = cgroup::Parent::detect_current()
        .map_err(|why| why.to_string())
        .and_then(|parent| parent.prepare().map(|()| parent).map_err(|e| e.to_string()));
    match ready {
        Ok(parent) => {
            for dir in parent.remove_stale_attempts() {
                tracing::info!("removed {}, left by an oomguard that was killed", dir.display());
            }
            Ok(Some((parent, limits)))
        }
        Err(why) if required => Err(Error::Cgroup(format!(
            "--memory-max needs a memory cgroup: {why}; or drop --memory-max and use --max-rss, which needs none"
        ))),
        Err(why) => {
            tracing::info!("attempts run without a memory cgroup: {why}");
            Ok(None)
        }
    }
}

/// Writes samples to samples.csv and tells the user about notices (and the service manager,
/// where there is one, how the attempt stands).
struct RunObserver {
    report: Reporter,
    samples: SamplesCsv,
    warned_no_cgroup: bool,
    notify: notify::Notifier,
    /// `--metrics-addr` / `--metrics-textfile`, where asked for.
    metrics: Option<metrics::Exporter>,
    /// The attempt's memory ramp (the fixed part before the first step), for the fit.
    ramp: AttemptRamp,
    /// The largest capacity of one GPU the job was seen on, for the report's limit line.
    gpu_capacity_bytes: Option<u64>,
}

/// An attempt's GPU and host memory series, each followed by a [`fit::Ramp`] (a few numbers,
/// not the timeline). Host memory is followed twice, in the units of each limit that can stop
/// it: the cgroup's usage (what `--memory-max` applies to) and the number the soft bounds
/// judge (the working set, else PSS, else RSS on ticks that skip PSS).
#[derive(Debug, Clone, Default)]
struct AttemptRamp {
    gpu: fit::Ramp,
    cgroup: fit::Ramp,
    judged: fit::Ramp,
}

impl AttemptRamp {
    fn feed(&mut self, sample: &Sample) {
        // Once the job's processes are gone (the sample after it ended) nothing is its memory.
        if sample.tree.processes == 0 {
            return;
        }
        if let Some(gpu) = sample.gpu_bytes() {
            self.gpu.feed(sample.unix_time_s, gpu);
        }
        if let Some(usage) = sample.cgroup_bytes {
            self.cgroup.feed(sample.unix_time_s, usage);
        }
        if let Some(judged) = sample.reading().job_bytes {
            self.judged.feed(sample.unix_time_s, judged);
        }
    }
}

impl Observer for RunObserver {
    fn sample(&mut self, sample: &Sample) {
        // A full disk costs rows, not the run: the row stays buffered and is tried again with
        // the next one.
        if let Err(e) = self.samples.write(sample) {
            report::unsaved("samples.csv", &e);
        }
        let rss_bytes = (sample.tree.processes > 0).then_some(sample.tree.rss_bytes);
        let gpu_bytes = sample.gpu.as_ref().and_then(|gpu| gpu.job_bytes);
        self.notify.memory(rss_bytes, gpu_bytes);
        if let Some(metrics) = &self.metrics {
            metrics.sample(sample);
        }
        self.ramp.feed(sample);
        let capacity = sample
            .gpu
            .as_ref()
            .and_then(|g| g.job_device_capacity_bytes);
        self.gpu_capacity_bytes = self.gpu_capacity_bytes.max(capacity);
    }

    fn started(&mut self) {
        self.ramp = AttemptRamp::default();
        self.notify.started();
    }

    fn notice(&mut self, notice: &Notice) {
        match notice {
            Notice::Growth {
                bytes_per_s,
                eta,
                ceiling,
            } => self.report.warn(&format!(
                "memory grows steadily at {}/min: at this rate it reaches {ceiling} in about {}",
                units::human_bytes((bytes_per_s * 60.0) as u64),
                report::short_duration(*eta)
            )),
            Notice::MemoryStop(crossing) => self.report.say(&format!(
                "{crossing}: stopping the job (SIGTERM, then SIGKILL after --grace)"
            )),
            Notice::QuietStop(stop) => self.report.say(&format!(
                "{stop}: stopping the job (SIGTERM, then SIGKILL after --grace)"
            )),
            Notice::NoCgroup(why) if !self.warned_no_cgroup => {
                self.warned_no_cgroup = true;
                self.report
                    .warn(&format!("running without a memory cgroup: {why}"));
            }
            Notice::NoCgroup(_) => {}
            Notice::TerminalStop { signal } => self.report.warn(&match *signal {
                Signal::SIGTTIN => "the job is stopped (SIGTTIN): it tried to read the terminal, which a supervised job cannot; \
                     give it its input from a file or pipe (`oomguard run -- CMD < input`), or press Ctrl-C to end the run"
                    .to_string(),
                other => format!(
                    "the job is stopped ({other}): it tried to write to or configure the terminal from the background; \
                     `stty -tostop` lets it write, or press Ctrl-C to end the run"
                ),
            }),
            Notice::GpuUnattributed { pids } => self.report.warn(&format!(
                "the GPU driver lists PIDs {pids:?}, none of them the job's (a container's own PID namespace?): \
                 the job's GPU memory is unknown and --max-gpu cannot act"
            )),
        }
    }
}

/// Where the run stands on the ladder: the values of the knobs for the next attempt, what moved
/// for it, and every attempt's cause with the values it ran with.
struct Ladder {
    rules: Vec<policy::Rule>,
    original: Vec<Value>,
    values: Vec<Value>,
    changed: Vec<usize>,
    history: Vec<(Cause, Vec<Value>)>,
    warned_effective: bool,
    /// The checkpoint the next attempt resumes from (`--resume-arg`), and when the run started
    /// (only checkpoints written since count for a relaunch).
    resume_from: Option<PathBuf>,
    started: SystemTime,
    /// The fit's view of each attempt, in history order.
    evidence: Vec<Option<fit::Evidence>>,
    /// The fit's view of the attempts of the job's earlier runs, with their knob values.
    past: Vec<(Vec<Value>, fit::Evidence)>,
    /// The fragmentation hint: may still be given; given (every later attempt gets the
    /// variable); to be recorded on the next attempt.
    hint_available: bool,
    hint_given: bool,
    hint_pending: Option<policy::Hint>,
}

impl Ladder {
    /// The ladder at the start of a run: the values of what worked in the job's last run (or
    /// of the attempt its killed oomguard was in), else the command's own. `original` stays the
    /// command's, so the effective batch kept on the way down is the command's.
    fn new(settings: &RunSettings, job: &jobs::run::JobRun) -> Ladder {
        let knobs = &settings.knobs;
        let original = knobs.originals();
        Ladder {
            rules: knobs.rules(),
            values: job
                .start()
                .map_or_else(|| original.clone(), |start| start.values.clone()),
            original,
            changed: Vec::new(),
            history: Vec::new(),
            warned_effective: false,
            resume_from: None,
            started: SystemTime::now(),
            evidence: Vec::new(),
            // `--fresh` starts over: neither the values nor the evidence of earlier runs.
            past: if settings.job.fresh {
                Vec::new()
            } else {
                earlier_runs(job, knobs)
            },
            hint_available: settings.allocator_hint && !allocator_conf_set(knobs),
            hint_given: false,
            hint_pending: None,
        }
    }

    /// Takes in how the last attempt ended: its cause with its values, and what its numbers
    /// tell the fit.
    fn learn(&mut self, settings: &RunSettings, cause: Cause, end: &AttemptEnd) {
        self.history.push((cause, self.values.clone()));
        self.evidence
            .push(fit::observe(&observed(settings, cause, end)));
    }

    /// Adds to the last attempt's evidence the fixed part its samples showed before the first
    /// step (the peaks include the cgroup's high-water mark, the limit at a kill).
    fn learn_ramp(&mut self, ramp: &AttemptRamp, end: &AttemptEnd) {
        let Some(Some(evidence)) = self.evidence.last_mut() else {
            return;
        };
        let (series, peak_bytes) = match (evidence.memory, evidence.limit) {
            (fit::Memory::Gpu, _) => (&ramp.gpu, end.peaks.gpu_bytes),
            // A kill at a cgroup's limit, oomguard's own or one further up, read through the
            // attempt cgroup where there is one; without one (`--no-cgroup` under a Slurm job's
            // limit) the tree's own reading is all there is.
            (fit::Memory::Host, Some((_, name))) if name != fit::MAX_RSS => {
                match end.peaks.cgroup_bytes {
                    Some(peak) => (&ramp.cgroup, Some(peak)),
                    None => (&ramp.judged, end.peaks.pss_bytes.or(end.peaks.rss_bytes)),
                }
            }
            // A soft bound (`--max-rss`): its own units; the evidence holds the value it saw.
            (fit::Memory::Host, _) => (&ramp.judged, None),
        };
        fit::attach_fixed(evidence, series, peak_bytes);
    }

    /// The policy's decision after the last attempt.
    fn decide(&self, settings: &RunSettings) -> Decision {
        let plan = policy::StepPlan {
            strategy: settings.strategy,
            margin: settings.margin,
            evidence: self.evidence.clone(),
            past: self.past.clone(),
            allocator_hint: self.hint_available,
        };
        policy::decide_with(
            &self.history,
            &self.rules,
            &self.original,
            &settings.limits,
            &plan,
        )
    }
}

/// The attempt loop: launch, supervise, classify, record, decide.
async fn attempt_loop(
    mut supervisor: Supervisor,
    settings: &RunSettings,
    run_dir: &RunDir,
    summary: &mut Summary,
    observer: &mut RunObserver,
    mut files: Option<&mut Patcher>,
    job: &mut jobs::run::JobRun,
) -> Result<i32, Error> {
    let report = observer.report;
    let knobs = &settings.knobs;
    if let Some(files) = files.as_deref() {
        supervisor.guard_files(&files.journal_paths());
    }
    let mut ladder = Ladder::new(settings, job);
    let mut hooks = hooks::Pending::default();
    let result = loop {
        let attempt = ladder.history.len() as u32 + 1;
        let ready = before_attempt(
            &mut supervisor,
            settings,
            &mut ladder,
            &mut hooks,
            run_dir,
            &report,
        );
        if let Some(signal) = ready.await {
            break Ok((Outcome::Interrupted, 128 + signal as i32));
        }
        let launch = match launch_for(settings, &ladder, files.as_deref_mut(), run_dir.path()) {
            Ok(launch) => launch,
            Err(e) => break Err(e),
        };
        let values_now = knob_values(knobs, &ladder.values);
        job.attempt_started(attempt, values_now, run_dir.path(), &report);
        let log = run_dir.open_log(attempt, &report);
        let knobs_text = knob_text(knobs, &ladder.values);
        observer
            .notify
            .attempt(attempt, settings.limits.max_attempts, &knobs_text);
        if let Some(metrics) = &observer.metrics {
            metrics.attempt(attempt, &knobs_text);
        }
        let end = match supervisor
            .run_attempt(attempt, &launch, log, observer)
            .await
        {
            Ok(end) => end,
            Err(e) => break Err(Error::Spawn(e)),
        };
        let verdict = judge(&end);
        let ran = Ran {
            attempt,
            launch: &launch,
            values: &ladder.values,
            changed: &ladder.changed,
            resumed_from: ladder.resume_from.as_deref(),
            hint: ladder.hint_pending.take(),
        };
        // The card NVML showed the job on, in every save of summary.json (the run's last
        // save comes before `run` regains the observer).
        if let Some(limits) = summary.limits.as_mut() {
            limits.gpu_total_bytes = observer.gpu_capacity_bytes;
        }
        record(summary, run_dir, &report, knobs, &ran, &verdict, &end);
        let recorded = summary
            .attempts()
            .last()
            .expect("record added this attempt");
        job.remember(recorded, run_dir.path(), &report);
        ladder.learn(settings, verdict.cause, &end);
        ladder.learn_ramp(&observer.ramp, &end);
        match ladder.decide(settings) {
            Decision::Relaunch(next) => {
                let told = Told {
                    attempt,
                    cause: verdict.cause,
                    run_dir,
                    report: &report,
                };
                tell_relaunch(settings, job, &mut hooks, observer, &told, &next);
                let between =
                    between_attempts(&mut supervisor, settings, &report, &end, &mut ladder, next);
                if let Some(signal) = between.await {
                    break Ok((Outcome::Interrupted, 128 + signal as i32));
                }
            }
            Decision::Stop { outcome, reason } => {
                observer.notify.ended(outcome.as_str(), reason.as_deref());
                if let Some(reason) = reason {
                    report.say(&format!("stopping: {} ({reason})", outcome.as_str()));
                }
                break Ok((outcome, exit_code(outcome, &end)));
            }
        }
    };
    if let Ok((Outcome::Interrupted, _)) = result {
        observer.notify.ended(Outcome::Interrupted.as_str(), None);
    }
    // The user's files come back while the guard still watches, then the guard is let go.
    if let Some(files) = files {
        for line in files.finish() {
            report.warn(&line);
        }
    }
    let outcome = result
        .as_ref()
        .map_or(Outcome::Failed, |(outcome, _)| *outcome);
    job.ended(outcome, &report);
    let code = close_run(result, summary, run_dir, &report);
    exit_hooks(
        &mut supervisor,
        settings,
        &mut hooks,
        summary,
        outcome,
        run_dir,
        &report,
    )
    .await;
    supervisor.finish();
    code
}

/// Before each attempt: `--resume-first`'s checkpoint for attempt 1, and the relaunch hooks of
/// the last attempt done (or killed at their limit). Returns the user's stop signal if one came.
async fn before_attempt(
    supervisor: &mut Supervisor,
    settings: &RunSettings,
    ladder: &mut Ladder,
    hooks: &mut hooks::Pending,
    run_dir: &RunDir,
    report: &Reporter,
) -> Option<Signal> {
    let first = ladder.history.is_empty();
    if let (true, Some(resume)) = (first, settings.resume.as_ref().filter(|r| r.first)) {
        match resume_first(supervisor, settings, resume, report).await {
            Ok(path) => ladder.resume_from = path,
            Err(signal) => return Some(signal),
        }
    }
    wait_hooks(supervisor, hooks, report, run_dir.path()).await
}

/// What a relaunch is told with: the attempt that ended and why.
struct Told<'a> {
    attempt: u32,
    cause: Cause,
    run_dir: &'a RunDir,
    report: &'a Reporter,
}

/// A relaunch decided: the job's file shows it waiting, the relaunch hooks start, the service
/// manager hears it.
fn tell_relaunch(
    settings: &RunSettings,
    job: &mut jobs::run::JobRun,
    hooks: &mut hooks::Pending,
    observer: &mut RunObserver,
    told: &Told,
    next: &policy::Next,
) {
    let next_knobs = knob_values(&settings.knobs, &next.values);
    job.waiting(
        told.attempt + 1,
        next_knobs.clone(),
        told.run_dir.path(),
        told.report,
    );
    let occasion = hooks::Occasion {
        event: hooks::Event::Relaunch,
        outcome: None,
        attempt: told.attempt,
        cause: Some(told.cause),
        knobs: &next_knobs,
        run_dir: told.run_dir.path(),
    };
    hooks.start(&settings.hooks, &occasion, told.report, || {
        told.run_dir.open_append(hooks::LOG_NAME)
    });
    observer.notify.waiting(next.delay, told.attempt + 1);
    if let Some(metrics) = &observer.metrics {
        metrics.relaunch(told.cause.as_str());
    }
}

/// After summary.json has its end (the hooks may read it): the exit hooks, waited for. A stop
/// signal here only cuts them short: the run's status is decided.
async fn exit_hooks(
    supervisor: &mut Supervisor,
    settings: &RunSettings,
    hooks: &mut hooks::Pending,
    summary: &Summary,
    outcome: Outcome,
    run_dir: &RunDir,
    report: &Reporter,
) {
    let last = summary.attempts().last();
    let last_knobs = last.map(|a| a.knobs.clone()).unwrap_or_default();
    let occasion = hooks::Occasion {
        event: hooks::Event::Exit,
        outcome: Some(outcome),
        attempt: last.map_or(0, |a| a.attempt),
        cause: last.map(|a| a.cause),
        knobs: &last_knobs,
        run_dir: run_dir.path(),
    };
    hooks.start(&settings.hooks, &occasion, report, || {
        run_dir.open_append(hooks::LOG_NAME)
    });
    let _ = wait_hooks(supervisor, hooks, report, run_dir.path()).await;
}

/// Waits for the hooks still running, each at most until its limit; on the user's stop signal
/// kills them and returns it.
async fn wait_hooks(
    supervisor: &mut Supervisor,
    hooks: &mut hooks::Pending,
    report: &Reporter,
    run_dir: &Path,
) -> Option<Signal> {
    while !hooks.check(Instant::now(), report, run_dir) {
        if let Some(signal) = supervisor.pause(hooks::POLL).await {
            hooks.kill_all(report);
            return Some(signal);
        }
    }
    None
}

/// Every knob's value, by name, as summary.json and the job's file type them.
fn knob_values(knobs: &KnobSet, values: &[Value]) -> KnobValues {
    KnobValues(
        knobs
            .knobs
            .iter()
            .zip(values)
            .map(|(k, v)| (k.name.clone(), v.to_json()))
            .collect(),
    )
}

/// Between an attempt and the next: wait for the GPU to let go of the last one, say what moves,
/// wait the backoff, and move the ladder to `next`. Returns the user's stop signal if one came.
async fn between_attempts(
    supervisor: &mut Supervisor,
    settings: &RunSettings,
    report: &Reporter,
    end: &AttemptEnd,
    ladder: &mut Ladder,
    next: policy::Next,
) -> Option<Signal> {
    let knobs = &settings.knobs;
    let attempt = ladder.history.len() as u32;
    let timeout = settings.gpu_free_timeout;
    // Checkpoints written since the run started; any, with --resume-first (a relaunch should
    // not start over where attempt 1 did not).
    let since = settings
        .resume
        .as_ref()
        .and_then(|r| (!r.first).then_some(ladder.started));
    // The first look at the checkpoints as the attempt ends: the GPU wait counts towards the
    // interval over which their sizes must hold.
    let cut = &end.writing_at_stop;
    let mut cut_paths = Vec::new();
    let watch = settings.resume.as_ref().map(|resume| {
        let (files, left_out) = resume::without_cut(resume.scan(since), cut);
        cut_paths = left_out;
        resume::Watch::start(files, Instant::now(), settings.interval)
    });
    if let Some(signal) = wait_gpu_free(supervisor, attempt, &end.pids, timeout, report).await {
        return Some(signal);
    }
    let mut delay = next.delay;
    let mut checkpoint = None;
    if let (Some(resume), Some(watch)) = (&settings.resume, watch) {
        let backoff_end = deadline_after(delay);
        let looks = settle(supervisor, report, resume, since, cut, watch, backoff_end);
        let pick = match looks.await {
            Ok(pick) => pick,
            Err(signal) => return Some(signal),
        };
        // The looks were part of the backoff: what is left of it follows.
        delay = backoff_end.saturating_duration_since(Instant::now());
        checkpoint =
            Some(pick.clause(&resume.pattern, since.is_some()) + &resume::cut_clause(&cut_paths));
        ladder.resume_from = pick.chosen;
    }
    let changes = match next.hint {
        Some(policy::Hint::AllocatorFragmentation) => format!(
            "{}={} (knobs unchanged)",
            policy::ALLOCATOR_HINT_VAR,
            policy::ALLOCATOR_HINT_VALUE
        ),
        None => knobs.describe_changes(&ladder.values, &next.values, &next.changed),
    };
    let relaunch = Relaunch {
        attempt: attempt + 1,
        changes,
        delay,
        reason: next.reason,
        checkpoint,
        knobs: knob_values(knobs, &next.values),
    };
    announce_relaunch(report, &relaunch, next.effective_note);
    let batch_moved = knobs
        .index("batch")
        .is_some_and(|b| next.changed.contains(&b));
    if batch_moved
        && knobs.effective_shrinks()
        && !std::mem::replace(&mut ladder.warned_effective, true)
    {
        warn_effective_shrinks(report, knobs, &ladder.original, &next.values);
    }
    if let Some(signal) = supervisor.pause(delay).await {
        return Some(signal);
    }
    ladder.values = next.values;
    ladder.changed = next.changed;
    if let Some(hint) = next.hint {
        ladder.hint_available = false;
        ladder.hint_given = true;
        ladder.hint_pending = Some(hint);
    }
    None
}

/// `now + delay`, or far in the future where that overflows.
fn deadline_after(delay: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Looks at the checkpoints again whenever the [`resume::Watch`] asks, until it can pick;
/// returns the user's stop signal if one came during a wait.
async fn settle(
    supervisor: &mut Supervisor,
    report: &Reporter,
    resume: &resume::Resume,
    newer_than: Option<SystemTime>,
    cut: &HashSet<(u64, u64)>,
    mut watch: resume::Watch,
    backoff_end: Instant,
) -> Result<resume::Pick, Signal> {
    let mut told = false;
    while let Some(wait) = watch.wait(Instant::now(), backoff_end) {
        if let (Some(path), false) = (watch.changing(), told) {
            told = true;
            report.say(&format!(
                "{} is still being written: waiting up to {} (the rest of the backoff) for it to be complete",
                path.display(),
                report::short_duration(backoff_end.saturating_duration_since(Instant::now()))
            ));
        }
        if let Some(signal) = supervisor.pause(wait).await {
            return Err(signal);
        }
        watch.look(
            resume::without_cut(resume.scan(newer_than), cut).0,
            Instant::now(),
        );
    }
    Ok(watch.pick())
}

/// `--resume-first`: the newest complete checkpoint of any age, for attempt 1.
async fn resume_first(
    supervisor: &mut Supervisor,
    settings: &RunSettings,
    resume: &resume::Resume,
    report: &Reporter,
) -> Result<Option<PathBuf>, Signal> {
    let watch = resume::Watch::start(resume.scan(None), Instant::now(), settings.interval);
    let none_cut = HashSet::new();
    let pick = settle(
        supervisor,
        report,
        resume,
        None,
        &none_cut,
        watch,
        Instant::now(),
    )
    .await?;
    report.say(&format!(
        "attempt 1: {}",
        pick.clause(&resume.pattern, false)
    ));
    Ok(pick.chosen)
}

/// What the job's earlier runs tell the fit: each remembered attempt's knob values (by this
/// run's knob names; a knob it did not have is unset) and what its peaks say. Their output is
/// gone, so only peaks count: a success's measured peak, a kill's cgroup peak.
fn earlier_runs(job: &jobs::run::JobRun, knobs: &KnobSet) -> Vec<(Vec<Value>, fit::Evidence)> {
    job.memory()
        .attempts()
        .iter()
        .filter_map(|past| {
            let peaks = &past.peaks;
            let evidence = fit::observe(&fit::Observed {
                cause: past.cause(),
                peak_gpu_bytes: peaks.peak_gpu_bytes,
                peak_cgroup_bytes: peaks.peak_cgroup_bytes,
                peak_host_bytes: peaks.peak_pss_bytes.or(peaks.peak_rss_bytes),
                ..fit::Observed::default()
            })?;
            let values = knobs
                .knobs
                .iter()
                .map(|k| past.value(&k.name).unwrap_or(Value::Unset))
                .collect();
            Some((values, evidence))
        })
        .collect()
}

/// The numbers of an attempt the fit reads.
fn observed<'a>(settings: &RunSettings, cause: Cause, end: &'a AttemptEnd) -> fit::Observed<'a> {
    // `--memory-max`, else the limit that killed the attempt further up (a Slurm job's, a
    // unit's: the kernel's counter there moved), also with `--no-cgroup`.
    let chain = end.kernel.cgroup_chain_kill.as_ref();
    let own_limit_bytes = match settings.cgroup {
        settings::CgroupPlan::Required(limits) => limits.memory_max_bytes,
        _ => None,
    };
    let chain_limit_bytes = chain.and_then(|kill| kill.limit.as_ref().map(|(_, bytes)| *bytes));
    let cgroup_limit_bytes = own_limit_bytes.or(chain_limit_bytes);
    // Named as the user knows it where it is not oomguard's own (`Slurm job 14's memory limit`),
    // with or without an attempt cgroup of oomguard's inside it.
    let cgroup_limit_name = match own_limit_bytes {
        Some(_) => None,
        None => chain.and_then(|kill| kill.limit_name()),
    };
    fit::Observed {
        cause: Some(cause),
        tail: &end.tail,
        peak_gpu_bytes: end.peaks.gpu_bytes,
        peak_cgroup_bytes: end.peaks.cgroup_bytes,
        peak_host_bytes: end.peaks.pss_bytes.or(end.peaks.rss_bytes),
        cgroup_limit_bytes,
        cgroup_limit_name,
        max_gpu_bytes: settings.bounds.max_gpu_bytes,
        memory_stop: end
            .memory_stop
            .as_ref()
            .map(|c| (c.bound, c.value_bytes, c.limit_bytes)),
    }
}

/// The user set PyTorch's allocator configuration, in oomguard's environment or as a knob:
/// the fragmentation hint would override it, so it is not given.
fn allocator_conf_set(knobs: &KnobSet) -> bool {
    const NAMES: [&str; 3] = [
        policy::ALLOCATOR_HINT_VAR,
        "PYTORCH_HIP_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
    ];
    NAMES.iter().any(|name| std::env::var_os(name).is_some())
        || knobs
            .knobs
            .iter()
            .any(|k| matches!(&k.place, knobs::Place::Env(name) if NAMES.contains(&name.as_str())))
}

/// Why the attempt ended, from everything the supervisor gathered.
fn judge(end: &AttemptEnd) -> classify::Verdict {
    let memory_limit = end.memory_stop.as_ref().map(ToString::to_string);
    classify::classify(&AttemptFacts {
        ending: end.ending,
        tail: &end.tail,
        kernel: &end.kernel,
        // A stop that came after the job had already succeeded (while its leftovers were
        // being cleaned up) does not undo the success.
        user_stopped: end
            .user_stop
            .is_some_and(|stop| !(stop.after_exit && end.ending.is_success())),
        memory_limit: memory_limit.as_deref(),
        sigkilled_descendant: end.sigkilled_descendant,
        quiet_stop: end.quiet_stop.as_ref(),
    })
}

/// One attempt as it ran: its command and knob values, and the knobs moved for it.
struct Ran<'a> {
    attempt: u32,
    launch: &'a Launch,
    values: &'a [Value],
    changed: &'a [usize],
    /// The checkpoint it was given (`--resume-arg`).
    resumed_from: Option<&'a Path>,
    /// The hint this attempt was relaunched with.
    hint: Option<policy::Hint>,
}

/// Writes the attempt into summary.json and, unless it succeeded, tells the user how it died.
fn record(
    summary: &mut Summary,
    run_dir: &RunDir,
    report: &Reporter,
    knobs: &KnobSet,
    ran: &Ran,
    verdict: &classify::Verdict,
    end: &AttemptEnd,
) {
    let attempt = ran.attempt;
    summary.push(AttemptRecord {
        attempt,
        command: lossy(&ran.launch.argv),
        batch_size: knobs.int_of("batch", ran.values),
        accum: knobs.int_of("accum", ran.values),
        knobs: knob_values(knobs, ran.values),
        changed: ran
            .changed
            .iter()
            .map(|&i| knobs.knobs[i].name.clone())
            .collect(),
        cause: verdict.cause,
        evidence: verdict.evidence.clone(),
        exit_code: end.ending.exit_code(),
        signal: end.ending.signal(),
        started_at: report::rfc3339(end.started_at),
        duration_s: end.duration.as_secs_f64(),
        peaks: end.peaks.into(),
        resumed_from: ran.resumed_from.map(|p| p.to_string_lossy().into_owned()),
        hint: ran.hint.map(policy::Hint::as_str),
    });
    summary.final_sizes = final_sizes(knobs, ran.values);
    // Not saved now (a full disk) is tried again with the next attempt: the run goes on from
    // memory.
    match run_dir.save(summary, false) {
        Ok(()) => report::saved("summary.json"),
        Err(e) => report::unsaved("summary.json", &e),
    }
    if verdict.cause != Cause::Ok {
        let last = summary.attempts().last().expect("pushed above");
        report.event(
            "attempt_ended",
            serde_json::json!({
                "attempt": attempt,
                "cause": verdict.cause.as_str(),
                "evidence": verdict.evidence,
                "exit_code": last.exit_code,
                "signal": last.signal,
                "duration_s": last.duration_s,
                "knobs": last.knobs,
                "peaks": last.peaks,
            }),
            &format!(
                "attempt {attempt} ended after {}: {} ({}){}",
                report::short_duration(end.duration),
                verdict.cause.as_str(),
                verdict.evidence,
                report::peaks_clause(&end.peaks)
            ),
        );
    }
}

/// The next attempt, as the relaunch line tells it.
struct Relaunch {
    attempt: u32,
    /// What moved: `--batch_size 16→8, --grad_accum 4→8`.
    changes: String,
    delay: Duration,
    /// With `--resume-arg`: `resuming from ckpt/epoch_4.pt`, or why not.
    checkpoint: Option<String>,
    /// What the step rests on: the fit's estimate, or why it halved.
    reason: Option<String>,
    /// Every knob's value for the next attempt (the JSON log's `knobs`).
    knobs: KnobValues,
}

/// `attempt 3 in 20.0s: --batch_size 16→8, --grad_accum 4→8`, and the note when the effective
/// batch could not be kept exactly.
fn announce_relaunch(report: &Reporter, next: &Relaunch, effective_note: Option<String>) {
    let checkpoint = next
        .checkpoint
        .as_ref()
        .map(|c| format!("; {c}"))
        .unwrap_or_default();
    let reason = next
        .reason
        .as_ref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    report.event(
        "relaunch",
        serde_json::json!({
            "attempt": next.attempt,
            "delay_s": next.delay.as_secs_f64(),
            "knobs": next.knobs,
            "changes": next.changes,
            "reason": next.reason,
            "checkpoint": next.checkpoint,
        }),
        &format!(
            "attempt {} in {}: {}{reason}{checkpoint}",
            next.attempt,
            report::short_duration(next.delay),
            next.changes,
        ),
    );
    if let Some(note) = effective_note {
        report.warn(&note);
    }
}

/// Said once a run: without an accumulation flag, the effective batch shrinks with the batch.
fn warn_effective_shrinks(report: &Reporter, knobs: &KnobSet, original: &[Value], next: &[Value]) {
    report.warn(&format!(
        "the command has no gradient-accumulation flag, so the effective batch shrinks with the batch ({} → {}); \
         name the job's flag with --accum-arg to keep it",
        knobs.int_of("batch", original).unwrap_or(0),
        knobs.int_of("batch", next).unwrap_or(0)
    ));
}

/// The run's exit status for an outcome decided after `end`.
fn exit_code(outcome: Outcome, end: &AttemptEnd) -> i32 {
    match outcome {
        Outcome::Succeeded => 0,
        Outcome::GaveUp => EXIT_GAVE_UP,
        Outcome::Failed => end.ending.shell_code(),
        Outcome::Interrupted => {
            128 + end.user_stop.map_or(Signal::SIGINT, |stop| stop.signal) as i32
        }
    }
}

/// Ends the run: summary.json says how (never left `running`), and the table and the last line
/// are printed.
fn close_run(
    result: Result<(Outcome, i32), Error>,
    summary: &mut Summary,
    run_dir: &RunDir,
    report: &Reporter,
) -> Result<i32, Error> {
    let (outcome, code) = match result {
        Ok(done) => done,
        Err(e) => {
            summary.finish(Outcome::Failed);
            let _ = run_dir.save(summary, true);
            return Err(e);
        }
    };
    summary.finish(outcome);
    // A summary that cannot be written (a full disk) does not turn the job's status into
    // oomguard's failure: the table below has it all, and the warning says what is missing.
    match run_dir.save(summary, true) {
        Ok(()) => report::saved("summary.json"),
        Err(e) => report::unsaved("summary.json", &e),
    }
    if report::log_format() == report::LogFormat::Text {
        for line in report::table(summary.attempts()) {
            report.say(&line);
        }
    }
    let last = summary.attempts().last();
    report.event(
        "run_ended",
        serde_json::json!({
            "outcome": outcome.as_str(),
            "exit_code": code,
            "attempts": summary.attempts().len(),
            "cause": last.map(|a| a.cause.as_str()),
            "knobs": last.map(|a| &a.knobs),
            "summary": run_dir.path().join("summary.json"),
        }),
        &format!(
            "{}; summary in {}",
            outcome.as_str(),
            run_dir.path().join("summary.json").display()
        ),
    );
    // The page for people (`oomguard report`'s --html), after the summary it is drawn from;
    // a page that cannot be written is a warning: the job's exit status stands.
    // It goes into the one closing warning with whatever else could not be saved.
    let page = principal::as_user_if(run_dir.is_users(), || {
        Ok(report_cmd::write_html(
            &run_dir.files(),
            run_dir.path(),
            &summary.render(),
        ))
    })
    .unwrap_or_else(|e| Err(e.to_string()));
    match page {
        Ok(page) => report.event(
            "report_written",
            serde_json::json!({ "report": page }),
            &format!("report in {}", page.display()),
        ),
        Err(why) => report::unsaved("report.html", &why),
    }
    if let Some(line) = report::unsaved_summary() {
        report.warn(&line);
    }
    Ok(code)
}

/// Before a relaunch, waits (bounded, logged) until the GPU driver has let go of the last
/// attempt's processes, so the next attempt does not start on a GPU still full. Returns the
/// user's stop signal if one came during the wait.
async fn wait_gpu_free(
    supervisor: &mut Supervisor,
    attempt: u32,
    pids: &HashSet<u32>,
    timeout: Duration,
    report: &Reporter,
) -> Option<Signal> {
    let started = std::time::Instant::now();
    let holders = match supervisor.wait_gpu_free(pids, Duration::ZERO).await {
        GpuWait::StillHeld(holders) => holders,
        GpuWait::Stopped(signal) => return Some(signal),
        GpuWait::NoGpu | GpuWait::Free => return None,
    };
    report.say(&format!(
        "waiting up to {} for the GPU to free attempt {attempt}'s memory (PIDs {holders:?} still listed)",
        report::short_duration(timeout)
    ));
    let waited = || report::short_duration(started.elapsed());
    match supervisor.wait_gpu_free(pids, timeout).await {
        GpuWait::StillHeld(left) => {
            report.warn(&format!(
                "the GPU still lists PIDs {left:?} after {}; relaunching anyway",
                waited()
            ));
            None
        }
        GpuWait::Stopped(signal) => Some(signal),
        GpuWait::NoGpu | GpuWait::Free => {
            report.say(&format!("GPU free after {}", waited()));
            None
        }
    }
}

/// A command as summary.json records it: text, with bytes that are not UTF-8 replaced (the job
/// itself gets them unchanged).
fn lossy(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|token| token.to_string_lossy().into_owned())
        .collect()
}

fn final_sizes(knobs: &KnobSet, values: &[Value]) -> FinalSizes {
    FinalSizes {
        batch_size: knobs.int_of("batch", values),
        accum: knobs.int_of("accum", values),
    }
}

/// Each knob's name and value as text, for the service manager's status line.
fn knob_text(knobs: &KnobSet, values: &[Value]) -> Vec<(String, String)> {
    knobs
        .knobs
        .iter()
        .zip(values)
        .map(|(knob, value)| (knob.name.clone(), value.to_string()))
        .collect()
}

/// The argv and environment of the next attempt, its config files put where it reads them.
fn launch_for(
    settings: &RunSettings,
    ladder: &Ladder,
    files: Option<&mut Patcher>,
    run_dir: &Path,
) -> Result<Launch, Error> {
    let values = &ladder.values;
    let attempt = ladder.history.len() as u32 + 1;
    let prev = ladder.history.last().map(|(cause, _)| *cause);
    let copies = settings
        .knobs
        .place_files(files, values)
        .map_err(Error::Patch)?;
    let resume = settings
        .resume
        .as_ref()
        .zip(ladder.resume_from.as_deref())
        .map(|(resume, path)| resume.edits(&settings.command, path))
        .unwrap_or_default();
    let input = settings
        .knobs
        .input_with(&settings.command, values, &copies, resume);
    let argv = input.argv;
    let mut env: Vec<(String, OsString)> = vec![
        ("OOMGUARD_ATTEMPT".to_string(), attempt.to_string().into()),
        // The path as bytes: a run directory need not be UTF-8.
        (
            "OOMGUARD_RUN_DIR".to_string(),
            run_dir.as_os_str().to_owned(),
        ),
    ];
    let knobs = &settings.knobs;
    let optional = [
        (
            "OOMGUARD_BATCH_SIZE",
            knobs.int_of("batch", values).map(|b| b.to_string()),
        ),
        (
            "OOMGUARD_GRAD_ACCUM",
            knobs.int_of("accum", values).map(|a| a.to_string()),
        ),
        ("OOMGUARD_PREV_CAUSE", prev.map(|c| c.as_str().to_string())),
    ];
    env.extend(
        optional
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?.into()))),
    );
    env.extend(input.env);
    if ladder.hint_given {
        env.push((
            policy::ALLOCATOR_HINT_VAR.to_string(),
            policy::ALLOCATOR_HINT_VALUE.into(),
        ));
    }
    // Python block-buffers a pipe; the user expects live output.
    let in_job_env = |name: &str| settings.job_context.env.iter().any(|(k, _)| k == name);
    if std::env::var_os("PYTHONUNBUFFERED").is_none() && !in_job_env("PYTHONUNBUFFERED") {
        env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    }
    // The job file's `[env]` first: the attempt's own variables above are oomguard's to set.
    let mut env_all = settings.job_context.env.clone();
    env_all.extend(env);
    Ok(Launch {
        argv,
        env: env_all,
        run_as: settings.job_context.run_as.clone(),
    })
}

/// `oomguard status`: the table, or with `--json` one JSON list, on stdout; a job file that
/// cannot be read is a warning.
fn show_status(args: &cli::StatusArgs, report: Reporter) -> Result<i32, Error> {
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => report::state_dir().ok_or(UsageError::Job(
            "no state directory: neither XDG_STATE_HOME nor HOME is set; give --state-dir DIR"
                .to_string(),
        ))?,
    };
    let (jobs, warnings) = status::collect(&state_dir);
    for warning in &warnings {
        report.warn(warning);
    }
    if args.json {
        report.out(&serde_json::to_string_pretty(&jobs).expect("statuses are plain data"));
    } else if jobs.is_empty() {
        report.say(&format!("no jobs in {}", state_dir.join("jobs").display()));
    } else {
        for line in status::table(&jobs) {
            report.out(&line);
        }
    }
    Ok(0)
}

/// `oomguard classify`: one line per file (with `--explain`, a few lines saying why); exit 1 if
/// a file could not be read.
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
        if args.explain {
            let explanation = classify::explain_text(&text);
            if args.json {
                let mut line =
                    serde_json::to_value(&explanation).expect("an explanation serializes");
                line["file"] = serde_json::json!(file);
                println!("{line}");
            } else {
                print!("{}", explanation.render(&file.display().to_string()));
            }
            continue;
        }
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
