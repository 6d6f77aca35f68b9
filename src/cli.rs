//! The command line: clap definitions, each flag documented once, and the step from raw flags to
//! validated [`RunSettings`](crate::config::RunSettings). Validation failures are one line each,
//! naming the flag and the fix; they exit 2 before anything is created or started.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::cgroup;
use crate::config::{CgroupPlan, RunSettings};
use crate::jobfile;
use crate::knobs::resolve;
use crate::outcome::Cause;
use crate::watch::{Available, Bounds};

/// Supervise an ML training command: know why an attempt died of out-of-memory and relaunch it
/// with a smaller batch (and larger gradient accumulation) until it fits.
#[derive(Debug, Parser)]
#[command(name = "oomguard", version, about, propagate_version = true)]
pub struct Cli {
    /// Print only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail about what oomguard does (repeat for more; RUST_LOG also works).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// How oomguard's own lines look: `text` (`oomguard: ...`), or `json`, one object per line
    /// (time, level, event, message, fields) for journald and log collectors.
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = crate::console::LogFormat::Text)]
    pub log_format: crate::console::LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a training command, relaunching it smaller after out-of-memory deaths.
    Run(Box<RunArgs>),
    /// Tell why a log's job died, from its text alone: prints CLASS<TAB>FILE per file.
    Classify(ClassifyArgs),
    /// Every job in the state directory and where its latest run stands: running, waiting
    /// between attempts, how it ended, or dead (its oomguard gone without finishing).
    Status(StatusArgs),
    /// Show what this machine allows and what oomguard will use (cgroups, kernel log, PSI,
    /// NVML), with the sampling cost measured on the spot.
    Doctor(DoctorArgs),
    /// The story of one run from its run directory: each attempt's knobs, cause and evidence,
    /// memory peaks and duration, and what fit; `--json` for machines, `--html` for a page
    /// with a chart of memory over time.
    Report(ReportArgs),
    /// Print a shell completion script: `oomguard completions bash > /etc/bash_completion.d/oomguard`.
    Completions(CompletionsArgs),
    /// Print a man page (roff), generated from these same definitions: `oomguard man | man -l -`.
    Man(ManArgs),
    /// Internal: the guard process that kills the job if oomguard itself is killed.
    #[command(name = "__guard", hide = true)]
    Guard,
    /// Internal: runs one notification hook with its time limit (see `hooks`).
    #[command(name = "__hook", hide = true)]
    Hook(HookArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Directory for attempt logs and summary.json [default: a new timestamped directory under
    /// $XDG_STATE_HOME/oomguard/runs, i.e. ~/.local/state/oomguard/runs].
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// The batch-size knob to reduce: a flag (--batch-arg --bsz), a Hydra key (data.batch_size),
    /// a key in a config file (configs/default.yaml:training.batch_size) or a variable
    /// (env:BATCH_SIZE). NAME@N takes a flag from part N of the command only, where standalone
    /// `--` tokens separate the parts (part 1 is before the first `--`).
    #[arg(
        long,
        value_name = "NAME|FILE:KEY|env:NAME",
        allow_hyphen_values = true
    )]
    pub batch_arg: Option<String>,
    /// The gradient-accumulation knob to raise, named as for --batch-arg; a flag absent from
    /// the command is added to the end of the batch flag's part.
    #[arg(
        long,
        value_name = "NAME|FILE:KEY|env:NAME",
        allow_hyphen_values = true
    )]
    pub accum_arg: Option<String>,
    /// A TOML file whose `[[knob]]` entries give the ladder of knobs to step (batch, workers,
    /// pin_memory, fp16, sequence length...), each where the job keeps it. See README.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the command, environment and file edits of attempt 1 and of each relaunch down the
    /// ladder after deaths of CAUSE (default oom_killed), then exit; runs and writes nothing.
    #[arg(long, value_name = "CAUSE", num_args = 0..=1, require_equals = true, default_missing_value = "oom_killed")]
    pub dry_run: Option<String>,
    /// Never reduce the batch below this.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub min_batch: u64,
    /// Stop after this many attempts in all.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
    /// Unchanged restarts allowed after failures that are not out-of-memory.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retries: u32,
    /// Wait before the first relaunch; doubles for each later one (0s allowed; at most 7 days,
    /// as for every duration but --interval).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub backoff: Duration,
    /// The longest wait between attempts.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub backoff_max: Duration,
    /// After a stop request (SIGTERM to the job), wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Sample the job's memory this often (at least 50ms, at most 1h).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Also read the tree's PSS (smaps_rollup, whose cost grows with the job's memory) at most
    /// this often, on a clock; `0` (the default) no clock. Without a cgroup PSS is read anyway
    /// on the first tick, where the tree's RSS moved by more than 5% since the last read, and
    /// (--max-rss) on the ticks where RSS reaches the bound.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration)]
    pub pss_interval: Duration,
    /// Hard memory limit of each attempt, in its own memory cgroup (e.g. 12G): the kernel's OOM
    /// killer acts inside the cgroup only, and the death is attributed exactly. At least 32M.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_max: Option<u64>,
    /// Swap each attempt may use on top of --memory-max.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "memory_max")]
    pub swap_max: Option<u64>,
    /// Do not put attempts in a memory cgroup, even where one could be made.
    #[arg(long, conflicts_with_all = ["memory_max", "swap_max"])]
    pub no_cgroup: bool,
    /// Stop the job gracefully (SIGTERM, --grace, SIGKILL) and relaunch it smaller when its
    /// memory (tree PSS, or its cgroup's usage) stays above SIZE for 3 samples.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_rss: Option<u64>,
    /// The same for the job's GPU memory (NVML).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_gpu: Option<u64>,
    /// The same when the machine's available memory stays below SIZE or PERCENT of RAM
    /// (protects other users of a shared server).
    #[arg(long, value_name = "SIZE|PERCENT", value_parser = parse_available)]
    pub min_available: Option<Available>,
    /// After an attempt, wait at most this long for the GPU to release its processes.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub gpu_free_timeout: Duration,
    /// After the job's output shows an out-of-memory error, stop it (SIGTERM, --grace, SIGKILL)
    /// and relaunch it smaller when it has neither exited nor written a byte for this long
    /// (cause hung_after_oom); 0 turns this off.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub hang_timeout: Duration,
    /// Stop the job the same way when it wrote nothing and used no CPU for this long (cause
    /// stalled, relaunched unchanged only within --retries) [default: off].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stall_timeout: Option<Duration>,
    /// Serve Prometheus metrics at http://ADDR/metrics: a port (9184) listens on loopback only,
    /// IP:PORT (0.0.0.0:9184) as given.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Write the same metrics to PATH for node_exporter's textfile collector, replaced
    /// atomically at every sample (the directory must exist).
    #[arg(long, value_name = "PATH")]
    pub metrics_textfile: Option<PathBuf>,
    /// Give the job pipes for its stdout and stderr even when oomguard's are a terminal (by
    /// default the job then gets a pseudo-terminal, so progress bars draw as without oomguard).
    #[arg(long)]
    pub no_pty: bool,
    /// The job this run belongs to: runs of one job remember what worked, and the next starts
    /// from it [default: derived from the command without its knob values, and the working
    /// directory]. Letters, digits, '.', '_' and '-'.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Where job memory is kept, as DIR/jobs/NAME.json, and the backups of config files
    /// patched in place, in DIR/patches/ [default: $XDG_STATE_HOME/oomguard, i.e.
    /// ~/.local/state/oomguard].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Start from the command's own knob values, not from what worked in the job's last run
    /// (this run is still remembered).
    #[arg(long)]
    pub fresh: bool,
    /// With --checkpoint: on a relaunch, pass the newest complete checkpoint to the job as
    /// FLAG PATH (replacing FLAG's value where the command has it, else added with the batch
    /// flag). A flag (--resume), a Hydra key (ckpt_path), or NAME@N for part N of the command.
    #[arg(long, value_name = "FLAG", allow_hyphen_values = true)]
    pub resume_arg: Option<String>,
    /// The checkpoint files, as a glob relative to the working directory (`ckpt/*.pt`,
    /// `out/**/*.ckpt`; quote it): the newest one written since the run started, once its size
    /// held for one --interval, goes to --resume-arg.
    #[arg(long, value_name = "GLOB")]
    pub checkpoint: Option<String>,
    /// Attempt 1 also resumes, and every attempt takes the newest matching file however old
    /// (not only those written since the run started).
    #[arg(long)]
    pub resume_first: bool,
    /// How a halving knob (the batch) moves after an out-of-memory death: `fit` picks the
    /// largest batch the attempt's numbers (an out-of-memory message's sizes, a cgroup kill's
    /// peak and limit) say will fit, halving where they cannot tell; `halve`; or `factor:F`,
    /// times F (0 < F < 1), at least one down.
    #[arg(long, value_name = "fit|halve|factor:F", default_value = "fit", value_parser = crate::policy::Strategy::parse)]
    pub strategy: crate::policy::Strategy,
    /// The share of the limit `--strategy fit` keeps free, in percent (0 to 90).
    #[arg(long, value_name = "PERCENT", default_value = "10", value_parser = parse_margin)]
    pub margin: f64,
    /// Never relaunch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True after a PyTorch
    /// message that shows fragmentation (reserved-but-unallocated memory at least the failed
    /// allocation).
    #[arg(long)]
    pub no_allocator_hint: bool,
    /// Run CMD when the run ends (repeatable). CMD is split into words as a shell would
    /// (quotes honoured) and run directly, no shell unless you write one (`sh -c '...'`); it gets
    /// OOMGUARD_EVENT, OOMGUARD_OUTCOME, OOMGUARD_ATTEMPT, OOMGUARD_CAUSE, OOMGUARD_KNOBS (JSON),
    /// OOMGUARD_RUN_DIR and OOMGUARD_SUMMARY. Its failure is a warning, never the run's.
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub on_exit: Vec<String>,
    /// Run CMD when oomguard relaunches the job (repeatable), as for --on-exit; the next attempt
    /// waits for it, at most --hook-timeout.
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub on_relaunch: Vec<String>,
    /// Kill a hook (--on-exit, --on-relaunch) still running after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub hook_timeout: Duration,
    /// The window over which steady memory growth is judged.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration, hide = true)]
    pub trend_window: Duration,
    /// The training command and its arguments, after `--`. Passed to the job byte for byte
    /// (arguments need not be UTF-8); only the knobs' values are rewritten on relaunch.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND",
        value_parser = clap::value_parser!(OsString)
    )]
    pub command: Vec<OsString>,
    /// The `--config` file as read by [`parse_from`], its `[run]` already merged into the flags
    /// (read again by `validate` where the args were parsed another way).
    #[arg(skip)]
    pub job_file: Option<jobfile::JobFile>,
    /// The clap ids of the options whose value came from the job file's `[run]` (not the command
    /// line): a path among them was chosen by whoever could write the file.
    #[arg(skip)]
    pub from_job_file: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A job file: say whom its hooks and file edits would run as (as root: its `user`), and
    /// whether it would be refused.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The clap definition of `oomguard run` alone: what a job file's `[run]` keys are checked
/// against.
pub fn run_command() -> clap::Command {
    RunArgs::augment_args(clap::Command::new("run"))
}

/// Why the command line makes no run: clap's own error (help and version included), or a job
/// file that cannot be used; both exit 2 (help and version 0).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{0}")]
    Clap(#[from] clap::Error),
    #[error("{0}")]
    JobFile(#[from] jobfile::JobFileError),
    /// The command line and the `[run]` table parse alone but not together.
    #[error("{}: with the [run] table of this file: {}; give such options together, in [run] or on the command line (see `oomguard run --help`)", file.display(), clap_message(error))]
    Merged { file: PathBuf, error: clap::Error },
}

/// clap's message on one line: its first paragraph (a list such as the missing arguments
/// joined on), without `error: ` and the help footer.
pub fn clap_message(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.is_empty())
        .collect();
    let joined = paragraph.join(" ");
    let text = joined.strip_prefix("error: ").unwrap_or(&joined);
    if text.is_empty() {
        "invalid arguments".to_string()
    } else {
        text.to_string()
    }
}

/// Parses oomguard's argv. For `run --config FILE`, the file's `[run]` options (and `name`)
/// are added to the flags the command line did not give (clap's `value_source` tells), and the
/// whole is parsed again, so a value in the file means exactly what the flag means; the file's
/// `command` is used where the command line has none.
pub fn parse_from(args: Vec<OsString>) -> Result<Cli, ParseError> {
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches_from(&args)?;
    let config = match matches.subcommand() {
        Some(("run", run)) => run.get_one::<PathBuf>("config").cloned(),
        _ => None,
    };
    let Some(path) = config else {
        return Ok(Cli::from_arg_matches(&matches)?);
    };
    let file = jobfile::load(&path)?;
    let Some(("run", run_matches)) = matches.subcommand() else {
        unreachable!("config was read from the run subcommand's matches");
    };
    let file_options: Vec<&jobfile::RunOption> = file
        .job
        .run
        .iter()
        .filter(|option| run_matches.value_source(&option.id) != Some(ValueSource::CommandLine))
        .collect();
    let from_job_file: Vec<String> = file_options.iter().map(|o| o.id.clone()).collect();
    let from_file: Vec<OsString> = file_options
        .iter()
        .flat_map(|option| option.tokens.iter().map(OsString::from))
        .collect();
    let matches = if from_file.is_empty() {
        matches
    } else {
        // Global flags before `run` are switches, so the subcommand is the first word that is
        // not an option; the file's options go right after it, before the job's command.
        let at = args
            .iter()
            .skip(1)
            .position(|arg| !arg.as_encoded_bytes().starts_with(b"-"))
            .map(|index| index + 2)
            .expect("the run subcommand was parsed from these args");
        let mut merged = args;
        merged.splice(at..at, from_file);
        Cli::command()
            .try_get_matches_from(merged)
            .map_err(|error| ParseError::Merged {
                file: path.clone(),
                error,
            })?
    };
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let Command::Run(run) = &mut cli.command {
        if run.command.is_empty() {
            if let Some(command) = &file.job.command {
                run.command = command.iter().map(OsString::from).collect();
            }
        }
        run.job_file = Some(file);
        run.from_job_file = from_job_file;
    }
    Ok(cli)
}

/// `oomguard __hook TIMEOUT_MS -- ARGV...`.
#[derive(Debug, Args)]
pub struct HookArgs {
    pub timeout_ms: u64,
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_parser = clap::value_parser!(OsString)
    )]
    pub argv: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print a JSON list of objects (name, state, pid, attempt, knobs, last_cause, peaks,
    /// run_dir, started_at, ended_at) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The state directory the jobs were run with (`oomguard run --state-dir`) [default:
    /// $XDG_STATE_HOME/oomguard, i.e. ~/.local/state/oomguard].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run directory `oomguard run` printed (`run directory ...`), holding summary.json.
    #[arg(value_name = "RUN_DIR")]
    pub run_dir: PathBuf,
    /// Also write a self-contained HTML page (chart and table, no network needed) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Print one JSON document (attempts, knob changes, causes, peaks, durations, timeline)
    /// instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The page of one command (`oomguard man run` is oomguard-run(1)) [default: oomguard(1)].
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
    /// Write every page (oomguard.1, oomguard-run.1, ...) into DIR instead of printing one.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ClassifyArgs {
    /// Print one JSON object per file instead of CLASS<TAB>FILE.
    #[arg(long)]
    pub json: bool,
    /// Say why: the lines that decided each file's class (with line numbers), the signature
    /// family that matched, and the runner-up. Paste it when reporting a misclassified log.
    #[arg(long)]
    pub explain: bool,
    /// Log files to read; `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// The longest value of any duration flag but `--interval`: a week. Longer is a typo
/// (`5000h`), and a bound keeps `Instant + duration` far from overflowing.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest sampling interval: sampled less often than hourly, a job's memory is not watched.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Parses `30s`, `5m`, `1h 30m`, `0s`, at most [`MAX_DURATION`]; a bare number is refused
/// (seconds or minutes?).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_up_to(text, MAX_DURATION)
}

/// Parses `--interval`: a duration of at most [`MAX_INTERVAL`].
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    parse_duration_up_to(text, MAX_INTERVAL)
}

fn parse_duration_up_to(text: &str, max: Duration) -> Result<Duration, String> {
    let too_long = || {
        format!(
            "`{text}` is longer than the {} allowed",
            humantime::format_duration(max)
        )
    };
    match humantime::parse_duration(text) {
        Ok(duration) if duration > max => Err(too_long()),
        Ok(duration) => Ok(duration),
        Err(humantime::DurationError::NumberOverflow) => Err(too_long()),
        Err(_) => Err(format!(
            "`{text}` is not a duration: use a number with a unit, e.g. 30s, 5m, 1h"
        )),
    }
}

/// Parses `8G`, `512MiB` (binary units).
pub fn parse_size(text: &str) -> Result<u64, String> {
    crate::units::parse_size(text)
}

/// Parses `--margin`: a percentage from 0 to 90, `%` optional; returned as a share (0.1).
pub fn parse_margin(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches('%').trim();
    match number.parse::<f64>() {
        Ok(p) if (0.0..=90.0).contains(&p) => Ok(p / 100.0),
        _ => Err(format!(
            "`{text}` is not a margin: use a percentage from 0 to 90, e.g. 10"
        )),
    }
}

/// Parses `--min-available`: a size, or a percentage of RAM such as `10%`.
pub fn parse_available(text: &str) -> Result<Available, String> {
    match text.trim().strip_suffix('%') {
        Some(percent) => match percent.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p < 100.0 => Ok(Available::Percent(p)),
            _ => Err(format!("`{text}` is not a percentage between 0 and 100")),
        },
        None => parse_size(text).map(Available::Bytes),
    }
}

/// The shortest sampling interval: below it, sampling a large tree costs more than it tells.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// The smallest `--memory-max`. Measured as root on cgroup v1 (kernel 6.x): below about 16 KiB
/// the forked child dies before exec (the kernel names the victim `oomguard`); `true` and
/// `sh -c :` need about 256 KiB; `python3 -c pass` needs 6.5 to 7 MiB. Every smaller limit kills
/// every attempt before the job does anything, blamed on the job; 32 MiB leaves a margin over an
/// empty Python for page cache charged on a cold start.
pub const MIN_MEMORY_MAX_BYTES: u64 = 32 << 20;

/// Why the flags do not make a run.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("no command given: put the training command after `--`, e.g. oomguard run -- python train.py --batch_size 8 (or command = [...] in the --config file)")]
    NoCommand,
    #[error("unknown option {0}: see `oomguard run --help`; the training command goes after `--`")]
    UnknownOption(String),
    #[error("{0}")]
    Knobs(#[from] resolve::KnobError),
    #[error("{0}")]
    Config(#[from] jobfile::JobFileError),
    /// The job file's `workdir`, `user` or permissions (see [`crate::runas`]).
    #[error("{0}")]
    JobFile(String),
    #[error("--dry-run={0}: not a cause oomguard relaunches after; use one of {list}", list = relaunched_causes())]
    DryRunCause(String),
    #[error("cannot read the working directory: {0}")]
    Cwd(std::io::Error),
    #[error("--interval {0:?} is too short: use 50ms or more")]
    IntervalTooShort(Duration),
    #[error("--backoff-max {max:?} is shorter than --backoff {backoff:?}: raise --backoff-max")]
    BackoffMax { backoff: Duration, max: Duration },
    /// `--name` is not a file name, or `--state-dir` not a path.
    #[error("{0}")]
    Job(String),
    #[error("{0}")]
    Resume(#[from] crate::resume::ResumeError),
    #[error("resuming from a checkpoint needs {0} too")]
    ResumeHalf(&'static str),
    /// An `--on-exit` / `--on-relaunch` command that does not split or whose program is
    /// missing.
    #[error("{0}")]
    Hook(String),
    #[error("--memory-max {} is too small for any job to start (an empty python3 needs about 7 MiB): use at least 32M", crate::units::human_bytes(*.0))]
    MemoryMaxTooSmall(u64),
    /// `--memory-max` around `srun`: the attempt cgroup would hold srun alone, its tasks run in
    /// Slurm's step cgroup.
    #[error("--memory-max around srun would cap srun alone (its tasks run in Slurm's cgroup): ask Slurm for the limit (sbatch --mem / srun --mem), or run oomguard inside the step (srun oomguard run --memory-max SIZE -- ...)")]
    MemoryMaxAroundSrun,
    /// `oomguard man COMMAND` names no command with a page.
    #[error("{0}")]
    ManPage(String),
    /// `--metrics-addr` that does not parse or cannot be bound, `--metrics-textfile` in a
    /// directory that does not exist.
    #[error("{0}")]
    Metrics(String),
}

/// The causes `--dry-run=CAUSE` and `on = [...]` accept.
fn relaunched_causes() -> String {
    crate::knobs::default_causes()
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Splits each hook command and finds its program as the run would (a typo is a usage error
/// before anything starts, not a warning at 3 a.m.).
fn hooks_of(
    on_exit: &[String],
    on_relaunch: &[String],
    timeout: Duration,
) -> Result<crate::hooks::Hooks, UsageError> {
    let path_var = std::env::var_os("PATH");
    let parse = |flag: &str, texts: &[String]| -> Result<Vec<crate::hooks::Hook>, UsageError> {
        texts
            .iter()
            .map(|text| {
                let hook = crate::hooks::Hook::parse(flag, text).map_err(UsageError::Hook)?;
                crate::child::resolve_program(&hook.argv[0], path_var.as_deref())
                    .map_err(|e| UsageError::Hook(format!("{flag} {text:?}: {e}")))?;
                Ok(hook)
            })
            .collect()
    };
    Ok(crate::hooks::Hooks {
        on_exit: parse("--on-exit", on_exit)?,
        on_relaunch: parse("--on-relaunch", on_relaunch)?,
        timeout,
    })
}

impl RunArgs {
    /// Checks the flags against the command and builds the settings of a run.
    pub fn validate(mut self) -> Result<RunSettings, UsageError> {
        match self.command.first() {
            None => return Err(UsageError::NoCommand),
            // clap hands an unknown option before the command over as the command itself.
            Some(first) if first.as_encoded_bytes().starts_with(b"-") => {
                return Err(UsageError::UnknownOption(
                    first.to_string_lossy().into_owned(),
                ))
            }
            Some(_) => {}
        }
        let dry_run = match self.dry_run.as_deref() {
            None => None,
            Some(name) => Some(
                Cause::from_name(name)
                    .filter(|c| c.is_memory())
                    .ok_or_else(|| UsageError::DryRunCause(name.to_string()))?,
            ),
        };
        let job_file = match self.job_file.take() {
            Some(file) => Some(file),
            None => self.config.as_deref().map(jobfile::load).transpose()?,
        };
        let started_in = std::env::current_dir().map_err(UsageError::Cwd)?;
        // The job file's workdir, env and user; its workdir is where the job runs and relative
        // knob files are found. Relative paths of flags stay relative to where oomguard started.
        let job_context = match (self.config.as_deref(), job_file.as_ref()) {
            (Some(path), Some(file)) => {
                crate::runas::JobContext::prepare(path, &file.job).map_err(UsageError::JobFile)?
            }
            _ => crate::runas::JobContext::default(),
        };
        // From here on every file of the job's (knob files first) is touched as its user.
        crate::principal::act_for(job_context.run_as.as_ref());
        // A path the job file chose is the file's writers' to use: as the user where the user
        // could have written it, as root where only root could; one from the command line is
        // the invoker's.
        let users_path = |id: &str| {
            job_context.writers == crate::runas::Writers::User
                && self.from_job_file.iter().any(|from| from == id)
        };
        let run_dir_is_users = users_path("run_dir");
        let state_dir_is_users = users_path("state_dir");
        let textfile_is_users = users_path("metrics_textfile");
        let cwd = job_context
            .workdir
            .clone()
            .unwrap_or_else(|| started_in.clone());
        if job_context.workdir.is_some() {
            self.run_dir = self.run_dir.map(|dir| started_in.join(dir));
            self.state_dir = self.state_dir.map(|dir| started_in.join(dir));
        }
        let knobs = resolve::resolve(
            &resolve::Request {
                command: &self.command,
                batch_arg: self.batch_arg.as_deref(),
                accum_arg: self.accum_arg.as_deref(),
                min_batch: self.min_batch,
                cwd: &cwd,
            },
            self.config.as_deref().zip(job_file.as_ref()),
        )?;
        let mut job = crate::jobs::JobSettings::new(
            self.name,
            self.state_dir,
            self.fresh,
            &self.command,
            &knobs,
            &cwd,
        )
        .map_err(UsageError::Job)?;
        job.state_dir_is_users = state_dir_is_users;
        // A name chosen in a job file its user could write is that user's: kept apart from the
        // same name of anyone else's (root's state directory holds every user's jobs), so one
        // user's runs never read or write another's job memory.
        if let (crate::runas::Writers::User, Some(who)) =
            (job_context.writers, job_context.run_as.as_ref())
        {
            job.name = format!(
                "{}.{}",
                crate::fsutil::file_safe(&who.name, &['-', '_']),
                job.name
            );
        }
        let resume = match (self.resume_arg.as_deref(), self.checkpoint.as_deref()) {
            (Some(flag), Some(pattern)) => Some(crate::resume::Resume::new(
                &self.command,
                flag,
                pattern,
                self.resume_first,
                &knobs,
            )?),
            (None, None) if !self.resume_first => None,
            (None, _) => return Err(UsageError::ResumeHalf("--resume-arg FLAG (the job's flag that takes the checkpoint's path, e.g. --resume-arg --resume)")),
            (Some(_), None) => return Err(UsageError::ResumeHalf("--checkpoint GLOB (the checkpoint files, e.g. --checkpoint 'ckpt/*.pt')")),
        };
        let hooks = hooks_of(&self.on_exit, &self.on_relaunch, self.hook_timeout)?;
        if let Some(bytes) = self.memory_max.filter(|b| *b < MIN_MEMORY_MAX_BYTES) {
            return Err(UsageError::MemoryMaxTooSmall(bytes));
        }
        let program = self.command.first().map(OsString::as_os_str);
        if self.memory_max.is_some() && program.is_some_and(crate::slurm::is_srun_command) {
            return Err(UsageError::MemoryMaxAroundSrun);
        }
        if self.backoff_max < self.backoff {
            return Err(UsageError::BackoffMax {
                backoff: self.backoff,
                max: self.backoff_max,
            });
        }
        if self.interval < MIN_INTERVAL {
            return Err(UsageError::IntervalTooShort(self.interval));
        }
        let metrics = crate::metrics::MetricsPlan::new(
            self.metrics_addr.as_deref(),
            self.metrics_textfile.as_deref(),
            textfile_is_users,
        )
        .map_err(UsageError::Metrics)?;
        let cgroup = if self.no_cgroup {
            CgroupPlan::Off
        } else if self.memory_max.is_some() {
            CgroupPlan::Required(cgroup::Limits {
                memory_max_bytes: self.memory_max,
                swap_max_bytes: self.swap_max,
            })
        } else {
            CgroupPlan::IfAvailable
        };
        Ok(RunSettings {
            interval: self.interval,
            pss_interval: self.pss_interval,
            cgroup,
            bounds: Bounds {
                max_rss_bytes: self.max_rss,
                max_gpu_bytes: self.max_gpu,
                min_available: self.min_available,
            },
            gpu_free_timeout: self.gpu_free_timeout,
            trend_window: self.trend_window,
            pty: !self.no_pty,
            job,
            resume,
            hooks,
            quiet: crate::quiet::Timeouts {
                // `0` turns a watch off: a zero timeout would stop every job at its first tick.
                hang: Some(self.hang_timeout).filter(|d| !d.is_zero()),
                stall: self.stall_timeout.filter(|d| !d.is_zero()),
            },
            command: self.command,
            knobs,
            run_dir: self.run_dir,
            run_dir_is_users,
            dry_run,
            limits: crate::policy::Limits {
                max_attempts: self.max_attempts,
                retries: self.retries,
                backoff: self.backoff,
                backoff_max: self.backoff_max,
            },
            grace: self.grace,
            strategy: self.strategy,
            margin: self.margin,
            allocator_hint: !self.no_allocator_hint,
            job_context,
            metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("oomguard").chain(args.split_whitespace()))
    }

    fn run_args(args: &str) -> RunArgs {
        match parse(args).unwrap().command {
            Command::Run(run) => *run,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn log_format_goes_before_or_after_the_subcommand() {
        use crate::console::LogFormat;
        let table = [
            ("run -- t", Ok(LogFormat::Text)),
            ("--log-format json run -- t", Ok(LogFormat::Json)),
            ("run --log-format json -- t", Ok(LogFormat::Json)),
            ("run --log-format text -- t", Ok(LogFormat::Text)),
            ("run --log-format xml -- t", Err(())),
        ];
        for (args, want) in table {
            assert_eq!(
                parse(args).map(|c| c.log_format).map_err(|_| ()),
                want,
                "{args}"
            );
        }
    }

    #[test]
    fn defaults() {
        let run = run_args("run -- python t.py --batch_size 8");
        assert_eq!(run.command, ["python", "t.py", "--batch_size", "8"]);
        assert_eq!((run.min_batch, run.max_attempts, run.retries), (1, 10, 0));
        assert_eq!(run.backoff, Duration::from_secs(10));
        assert_eq!(run.backoff_max, Duration::from_secs(300));
        assert_eq!(run.grace, Duration::from_secs(30));
        assert_eq!(run.interval, Duration::from_secs(1));
        assert_eq!(run.gpu_free_timeout, Duration::from_secs(60));
        assert_eq!(
            (
                run.memory_max,
                run.swap_max,
                run.max_rss,
                run.max_gpu,
                run.min_available
            ),
            (None, None, None, None, None)
        );
        assert!(!run.no_cgroup);
        assert!(!run.no_pty);
        let settings = run.validate().unwrap();
        assert!(settings.pty);
        assert_eq!(
            settings.quiet,
            crate::quiet::Timeouts {
                hang: Some(Duration::from_secs(60)),
                stall: None
            }
        );
        assert_eq!(settings.cgroup, CgroupPlan::IfAvailable);
        assert_eq!(settings.bounds, Bounds::default());
    }

    #[test]
    fn memory_flags_parse() {
        let run = run_args(
            "run --interval 200ms --memory-max 12G --swap-max 1G --max-rss 10GiB --max-gpu 70G \
             --min-available 10% --gpu-free-timeout 5s -- python t.py",
        );
        assert_eq!(run.interval, Duration::from_millis(200));
        assert_eq!(run.memory_max, Some(12 << 30));
        assert_eq!(run.swap_max, Some(1 << 30));
        assert_eq!(run.max_rss, Some(10 << 30));
        assert_eq!(run.max_gpu, Some(70 << 30));
        assert_eq!(run.min_available, Some(Available::Percent(10.0)));
        let settings = run.validate().unwrap();
        assert_eq!(
            settings.cgroup,
            CgroupPlan::Required(cgroup::Limits {
                memory_max_bytes: Some(12 << 30),
                swap_max_bytes: Some(1 << 30)
            })
        );
        assert_eq!(settings.bounds.max_rss_bytes, Some(10 << 30));
        assert!(
            !run_args("run --no-pty -- python t.py")
                .validate()
                .unwrap()
                .pty
        );
        for (line, refused) in [
            ("run --memory-max 1G -- srun python t.py", true),
            (
                "run --memory-max 1G -- /usr/bin/srun -n 2 python t.py",
                true,
            ),
            ("run --max-rss 1G -- srun python t.py", false),
            ("run --memory-max 1G -- python t.py srun", false),
        ] {
            let got = run_args(line).validate();
            assert_eq!(
                matches!(got, Err(UsageError::MemoryMaxAroundSrun)),
                refused,
                "{line}"
            );
        }
        let run = run_args("run --min-available 2G --no-cgroup -- python t.py");
        assert_eq!(run.min_available, Some(Available::Bytes(2 << 30)));
        assert_eq!(run.validate().unwrap().cgroup, CgroupPlan::Off);
    }

    #[test]
    fn each_flag_parses() {
        let run = run_args(
            "run --run-dir /tmp/x --batch-arg --bsz --accum-arg --ga --min-batch 2 --max-attempts 3 \
             --retries 1 --backoff 0s --backoff-max 1m --grace 5s -- python t.py --bsz 8",
        );
        assert_eq!(run.run_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(run.batch_arg.as_deref(), Some("--bsz"));
        assert_eq!(run.accum_arg.as_deref(), Some("--ga"));
        assert_eq!((run.min_batch, run.max_attempts, run.retries), (2, 3, 1));
        assert_eq!(run.backoff, Duration::ZERO);
        assert_eq!(run.backoff_max, Duration::from_secs(60));
        assert_eq!(run.grace, Duration::from_secs(5));
        // Without `--`, the command starts at the first positional and keeps its own flags.
        let run = run_args("run python t.py --batch_size 8 -q");
        assert_eq!(run.command, ["python", "t.py", "--batch_size", "8", "-q"]);
        let cli = parse("-q classify --json a.log -").unwrap();
        assert!(cli.quiet);
        assert!(
            matches!(cli.command, Command::Classify(ClassifyArgs { json: true, ref files, .. }) if files.len() == 2)
        );
    }

    #[test]
    fn quiet_timeouts_parse_and_zero_turns_them_off() {
        // (flags, --hang-timeout, --stall-timeout)
        let table: &[(&str, Option<u64>, Option<u64>)] = &[
            ("", Some(60_000), None),
            ("--hang-timeout 1s", Some(1_000), None),
            ("--hang-timeout 0", None, None),
            ("--hang-timeout 0s", None, None),
            ("--stall-timeout 5m", Some(60_000), Some(300_000)),
            ("--hang-timeout 0 --stall-timeout 250ms", None, Some(250)),
            ("--stall-timeout 0", Some(60_000), None),
        ];
        for &(flags, hang_ms, stall_ms) in table {
            let settings = run_args(&format!("run {flags} -- python t.py"))
                .validate()
                .unwrap();
            let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
            assert_eq!(ms(settings.quiet.hang), hang_ms, "{flags}");
            assert_eq!(ms(settings.quiet.stall), stall_ms, "{flags}");
        }
        for bad in [
            "--hang-timeout 60",
            "--hang-timeout soon",
            "--stall-timeout 5",
            "--stall-timeout 8d",
        ] {
            assert!(
                parse(&format!("run {bad} -- python t.py")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_flags_are_refused() {
        for args in [
            "run --backoff 10 -- python t.py",
            "run --grace soon -- python t.py",
            "run --min-batch 0 -- python t.py",
            "run --max-attempts 0 -- python t.py",
            "run --min-batch x -- python t.py",
            "classify",
            "-q -v classify a.log",
            "run --memory-max lots -- python t.py",
            "run --swap-max 1G -- python t.py",
            "run --no-cgroup --memory-max 1G -- python t.py",
            "run --min-available 150% -- python t.py",
            "run --min-available 0% -- python t.py",
        ] {
            assert!(parse(args).is_err(), "{args}");
        }
    }

    #[test]
    fn validation_names_the_problem() {
        let table = [
            ("run", "no command given"),
            ("run -- python t.py --batch_size x", "not a whole number"),
            (
                "run --batch-arg --bsz -- python t.py --batch_size 8",
                "--bsz is not in the command",
            ),
            (
                "run --min-batch 16 -- python t.py --batch_size 8",
                "--min-batch 16 is larger",
            ),
            ("run --backoff 10m -- python t.py", "--backoff-max"),
            (
                "run --frobnicate -- python t.py",
                "unknown option --frobnicate",
            ),
            (
                "run -- python t.py --batch_size 4294967296 --grad_accum 4294967296",
                "--batch_size 4294967296 × --grad_accum 4294967296 (the effective batch) does not fit in 64 bits",
            ),
            (
                "run -- python show.py --batch_size 64 -- worker.py --batch_size 8",
                "--batch-arg --batch_size@1 or --batch-arg --batch_size@2",
            ),
            (
                "run --accum-arg --batch_size -- python t.py --batch_size 8",
                "--batch_size cannot be both the batch and the accumulation flag",
            ),
            ("run --memory-max 0 -- python t.py", "--memory-max 0 B is too small"),
            ("run --memory-max 100 -- python t.py", "use at least 32M"),
            ("run --memory-max 1k -- python t.py", "use at least 32M"),
            ("run --memory-max 31M -- python t.py", "use at least 32M"),
            (
                "run --checkpoint ckpt/*.pt -- python t.py",
                "needs --resume-arg FLAG",
            ),
            (
                "run --resume-first --checkpoint ckpt/*.pt -- python t.py",
                "needs --resume-arg FLAG",
            ),
            ("run --resume-arg --resume -- python t.py", "needs --checkpoint GLOB"),
            ("run --resume-first -- python t.py", "needs --resume-arg FLAG"),
        ];
        for (args, want) in table {
            let err = run_args(args).validate().unwrap_err().to_string();
            assert!(err.contains(want), "{args}: {err}");
        }
        assert!(run_args("run -- python t.py --batch_size 8")
            .validate()
            .is_ok());
        for ok in [
            "run --memory-max 32M -- python t.py",
            "run -- python t.py --batch_size 4294967296 --grad_accum 4294967295",
        ] {
            assert!(run_args(ok).validate().is_ok(), "{ok}");
        }
    }

    #[test]
    fn job_flags_parse_and_a_name_must_be_a_file_name() {
        let settings = run_args("run -- python t.py --batch_size 8")
            .validate()
            .unwrap();
        assert!(!settings.job.fresh);
        assert!(settings.job.name.starts_with("t-"), "{}", settings.job.name);
        assert_eq!(
            settings.job.command,
            ["python", "t.py", "--batch_size", "<batch>"]
        );
        let settings = run_args("run --name nightly --state-dir /tmp/s --fresh -- python t.py")
            .validate()
            .unwrap();
        assert_eq!(settings.job.name, "nightly");
        assert_eq!(settings.job.state_dir, Some(PathBuf::from("/tmp/s")));
        assert!(settings.job.fresh);
        for bad in ["a/b", ".x", "x%y"] {
            let err = run_args(&format!("run --name {bad} -- python t.py"))
                .validate()
                .unwrap_err();
            assert!(matches!(err, UsageError::Job(_)), "{bad}: {err}");
            assert!(err.to_string().starts_with("--name "), "{bad}: {err}");
        }
    }

    #[test]
    fn strategy_and_margin() {
        use crate::policy::Strategy;
        let run = run_args("run -- python t.py");
        assert_eq!((run.strategy, run.margin), (Strategy::Fit, 0.10));
        assert!(!run.no_allocator_hint);
        let run =
            run_args("run --strategy factor:0.9 --margin 25% --no-allocator-hint -- python t.py");
        assert_eq!((run.strategy, run.margin), (Strategy::Factor(0.9), 0.25));
        let settings = run.validate().unwrap();
        assert!(!settings.allocator_hint);
        assert_eq!(
            run_args("run --strategy halve -- t").strategy,
            Strategy::Halve
        );
        for (args, words) in [
            (
                "run --strategy factor:1 -- t",
                "use fit, halve, or factor:F",
            ),
            (
                "run --strategy factor:0 -- t",
                "use fit, halve, or factor:F",
            ),
            ("run --strategy double -- t", "use fit, halve, or factor:F"),
            ("run --margin 95 -- t", "percentage from 0 to 90"),
            ("run --margin -1 -- t", "percentage from 0 to 90"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(words), "{args}: {err}");
        }
    }

    #[test]
    fn durations_are_bounded() {
        // (flags, accepted, or the words of the refusal)
        let table: &[(&str, Result<(), &str>)] = &[
            ("--grace 7d", Ok(())),
            (
                "--grace 500000000000years",
                Err("longer than the 7days allowed"),
            ),
            (
                "--grace 99999999999999999999999s",
                Err("longer than the 7days allowed"),
            ),
            (
                "--backoff 8d --backoff-max 8d",
                Err("longer than the 7days allowed"),
            ),
            ("--backoff-max 1year", Err("longer than the 7days allowed")),
            (
                "--gpu-free-timeout 169h",
                Err("longer than the 7days allowed"),
            ),
            ("--trend-window 30d", Err("longer than the 7days allowed")),
            ("--interval 1h", Ok(())),
            ("--interval 61m", Err("longer than the 1h allowed")),
            ("--interval 10", Err("is not a duration")),
        ];
        for &(flags, want) in table {
            let args = format!("run {flags} -- python t.py");
            match (parse(&args), want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(words)) => {
                    let first = e.to_string();
                    let first = first.lines().next().unwrap_or_default();
                    assert!(first.contains(words), "{flags}: {first}");
                    let flag = flags.split_whitespace().next().unwrap();
                    assert!(first.contains(flag), "{flags}: {first}");
                }
                (got, _) => panic!("{flags}: {got:?}"),
            }
        }
    }

    /// `[run]` fills what the command line leaves out, and no more; the file's command runs
    /// only where the command line has none. (args after `oomguard`, max_attempts, backoff in
    /// seconds, the command)
    #[test]
    fn the_run_table_fills_only_what_the_command_line_leaves_out() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let job = dir.path().join("job.toml");
        fs_write(
            &job,
            "name = \"nightly\"\ncommand = [\"python\", \"t.py\"]\n[run]\nmax_attempts = 2\nbackoff = \"30s\"\nno_pty = true\n",
        );
        let config = job.to_str().unwrap();
        let table: &[(Vec<&str>, u32, u64, &[&str])] = &[
            (vec!["run", "--config", config], 2, 30, &["python", "t.py"]),
            (
                vec!["-q", "run", "--config", config, "--max-attempts", "3"],
                3,
                30,
                &["python", "t.py"],
            ),
            (
                vec!["run", "--max-attempts=4", "--config", config, "-v"],
                4,
                30,
                &["python", "t.py"],
            ),
            (
                vec![
                    "run",
                    "--config",
                    config,
                    "--backoff",
                    "1s",
                    "--",
                    "sh",
                    "x",
                ],
                2,
                1,
                &["sh", "x"],
            ),
            (
                vec!["run", "--config", config, "other.py", "--max-attempts", "9"],
                2,
                30,
                &["other.py", "--max-attempts", "9"],
            ),
        ];
        for (args, attempts, backoff_s, command) in table {
            let argv = std::iter::once("oomguard")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect();
            let cli = parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let Command::Run(run) = cli.command else {
                panic!("{args:?}: run parses");
            };
            assert_eq!(run.max_attempts, *attempts, "{args:?}");
            assert_eq!(run.backoff, Duration::from_secs(*backoff_s), "{args:?}");
            assert_eq!(run.command, *command, "{args:?}");
            assert_eq!(run.name.as_deref(), Some("nightly"), "{args:?}");
            assert!(run.no_pty, "{args:?}");
            assert!(run.job_file.is_some(), "{args:?}");
        }
    }

    fn fs_write(path: &std::path::Path, text: &str) {
        std::fs::write(path, text).expect("the temporary directory is writable");
    }

    #[test]
    fn the_command_is_bytes() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let args = [
            "oomguard",
            "run",
            "--",
            "python",
            "t.py",
            "--batch_size",
            "8",
        ]
        .map(OsString::from)
        .into_iter()
        .chain([OsString::from_vec(b"caf\xff".to_vec())]);
        let Command::Run(run) = Cli::try_parse_from(args).unwrap().command else {
            panic!("run parses");
        };
        assert_eq!(run.command[4].as_bytes(), b"caf\xff");
        let settings = run.validate().unwrap();
        assert_eq!(
            settings.knobs.batch_of(&settings.knobs.originals()),
            Some(8)
        );
    }
}
