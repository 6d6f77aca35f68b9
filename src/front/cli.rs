//! The command line: clap definitions, each flag documented once, and the parse-level checks
//! of each flag's own value (units, bounds). Turning `oomguard run`'s flags into validated
//! [`RunSettings`](crate::front::settings::RunSettings) is [`crate::front::settings::from_args`]'s.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::front::jobfile;
use crate::observe::watch::Available;

/// Supervise an ML training command: know why an attempt died of out-of-memory and relaunch it
/// with a smaller batch (and larger gradient accumulation) until it fits.
// `--version` names the build: the crate's version and the git commit it was built from, where
// the build knew it (build.rs), so a pasted `--version` says which source a wheel came from.
#[derive(Debug, Parser)]
#[command(name = "oomguard", version = env!("OOMGUARD_VERSION"), about, propagate_version = true)]
pub struct Cli {
    /// Print only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail about what oomguard does (repeat for more; RUST_LOG also works).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// How oomguard's own lines look: `text` (`oomguard: ...`), or `json`, one object per line
    /// (time, level, event, message, fields) for journald and log collectors.
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = crate::output::console::LogFormat::Text)]
    pub log_format: crate::output::console::LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a training command, relaunching it smaller after out-of-memory deaths.
    Run(Box<RunArgs>),
    // The doc is clap's help text, printed as written: `<TAB>` there is no HTML tag.
    #[allow(rustdoc::invalid_html_tags)]
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
    /// Print a shell completion script: `oomguard completions bash >
    /// /etc/bash_completion.d/oomguard`.
    Completions(CompletionsArgs),
    /// Print a man page (roff), generated from these same definitions: `oomguard man | man -l -`.
    Man(ManArgs),
    /// Write the systemd unit oomguard@.service into /etc/systemd/system (or, with --user,
    /// ~/.config/systemd/user), for installs without the Debian package (pip, uv, cargo).
    /// Exits 73 when it cannot: a different file in the way, a directory it may not write.
    InstallUnits(InstallUnitsArgs),
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
    /// The most of each attempt's output kept in its attempt-N.log (at least 64K): past it the
    /// log keeps the first half and the last quarter to half, with a line saying how many bytes
    /// were cut there; the terminal still gets every byte. A job file its user can write may
    /// raise it only with a run_dir of its own.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_log_max)]
    pub log_max: u64,
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
    /// When other processes on the card took the room of a job that fits alone (cause
    /// gpu_taken), wait at most this long for that room and relaunch at the same batch; after
    /// it, fit the batch into the room left. Also before attempt 1 where the job's memory says
    /// what it needs. 0: never wait.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = parse_duration)]
    pub gpu_wait: Duration,
    /// Give the job the N cards with the most free memory (among those in CUDA_VISIBLE_DEVICES
    /// where it is set), named by UUID in CUDA_VISIBLE_DEVICES.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub gpus: Option<u32>,
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
    /// Do not look inside a Python job: by default oomguard puts a small sitecustomize.py
    /// first on its PYTHONPATH that reports each optimizer step (count, pace, peak memory) on a
    /// pipe of its own, never the job's output (see README, "The probe").
    #[arg(long)]
    pub no_probe: bool,
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
    /// held for one --interval, goes to --resume-arg. A torch.save zip or safetensors file cut
    /// short is never passed, nor one written within an --interval of oomguard stopping the
    /// job's processes unless its format shows it whole.
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
    #[arg(long, value_name = "fit|halve|factor:F", default_value = "fit", value_parser = crate::decide::policy::Strategy::parse)]
    pub strategy: crate::decide::policy::Strategy,
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
    /// A training command: say where its batch and accumulation are (a flag, LightningCLI's
    /// configs, a Trainer's arguments file, a DeepSpeed config, Hydra's composed config) and
    /// how oomguard would change them, as `oomguard run` would find them with no knob flag.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
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
    #[error("{}: with the [run] table of this file: {}; give such options together, in [run] or on the command line (see `oomguard run --help`)", file.display(), jobfile::job::clap_message(error))]
    Merged { file: PathBuf, error: clap::Error },
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
    let file = jobfile::load(&path, &run_command())?;
    let Some(("run", run_matches)) = matches.subcommand() else {
        unreachable!("config was read from the run subcommand's matches");
    };
    let file_options: Vec<&jobfile::job::RunOption> = file
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
pub struct InstallUnitsArgs {
    /// The unit for `systemctl --user` (no root), into $XDG_CONFIG_HOME/systemd/user.
    #[arg(long)]
    pub user: bool,
    /// Write into DIR instead (an image being built, a drop-in directory of your own).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Replace a unit (or drop-in) already there that differs from this oomguard's.
    #[arg(long)]
    pub force: bool,
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
    // The doc is clap's help text, printed as written: `<TAB>` there is no HTML tag.
    #[allow(rustdoc::invalid_html_tags)]
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

/// Parses `--log-max`: a size of at least [`crate::output::attempt_log::MIN_MAX_BYTES`].
pub fn parse_log_max(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if bytes < crate::output::attempt_log::MIN_MAX_BYTES {
        return Err(format!(
            "`{text}` is too small to keep a head and a tail of the output: use 64K or more"
        ));
    }
    Ok(bytes)
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
    crate::observe::units::parse_size(text)
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn parse(args: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("oomguard").chain(args.split_whitespace()))
    }

    pub(crate) fn run_args(args: &str) -> RunArgs {
        match parse(args).unwrap().command {
            Command::Run(run) => *run,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn log_format_goes_before_or_after_the_subcommand() {
        use crate::output::console::LogFormat;
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
}
