//! Everything oomguard tells people and files: its own stderr lines (prefixed `oomguard:` so they
//! stand apart from the job's output), the final table, and the run directory (attempt logs and
//! `summary.json`, rewritten atomically after every attempt).
//!
//! It decides nothing; it formats what the attempt loop hands it.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::classify::Cause;
use crate::policy::Outcome;
use crate::sampler::{Peaks, Sample};
use crate::units::human_bytes;

/// The `oomguard:` lines on stderr. `-q` keeps only errors.
#[derive(Debug, Clone, Copy)]
pub struct Reporter {
    pub quiet: bool,
}

impl Reporter {
    /// A normal progress line.
    pub fn say(&self, line: &str) {
        if !self.quiet {
            print_line(line);
        }
    }

    /// Something the user should act on, but the run goes on.
    pub fn warn(&self, line: &str) {
        if !self.quiet {
            print_line(&format!("warning: {line}"));
        }
    }

    /// A line of a command's own output (`doctor`), on stdout, unprefixed.
    pub fn out(&self, line: &str) {
        let _ = writeln!(io::stdout().lock(), "{line}");
    }

    /// Shown even with `-q`.
    pub fn error(&self, line: &str) {
        print_line(&format!("error: {line}"));
    }
}

fn print_line(line: &str) {
    // Through the stream's stderr writer: ordered after the job's output already queued, and
    // on a line of its own even after an unfinished progress bar.
    crate::stream::own_line(format!("oomguard: {line}\n").as_bytes());
}

/// Sets up `tracing` for `-v` (or `RUST_LOG`); by default only warnings and errors, printed
/// like every other oomguard line (`oomguard: warning: ...`).
pub fn init_tracing(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "oomguard=info",
        (false, _) => "oomguard=debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| crate::stream::OwnStderr)
        .event_format(OomguardFormat)
        .try_init();
}

/// `oomguard: warning: message`: tracing events look like the rest of oomguard's lines.
struct OomguardFormat;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for OomguardFormat
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        write!(writer, "oomguard: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// One attempt as summary.json records it.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub command: Vec<String>,
    pub batch_size: Option<u64>,
    pub accum: Option<u64>,
    pub cause: Cause,
    pub evidence: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub duration_s: f64,
    #[serde(flatten)]
    pub peaks: PeakRecord,
}

/// An attempt's memory peaks in summary.json; null where unknown.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PeakRecord {
    pub peak_rss_bytes: Option<u64>,
    pub peak_pss_bytes: Option<u64>,
    pub peak_swap_bytes: Option<u64>,
    pub peak_gpu_bytes: Option<u64>,
    /// The attempt cgroup's high-water mark, where it ran in one (page cache included).
    pub peak_cgroup_bytes: Option<u64>,
}

impl From<Peaks> for PeakRecord {
    fn from(p: Peaks) -> Self {
        PeakRecord {
            peak_rss_bytes: p.rss_bytes,
            peak_pss_bytes: p.pss_bytes,
            peak_swap_bytes: p.swap_bytes,
            peak_gpu_bytes: p.gpu_bytes,
            peak_cgroup_bytes: p.cgroup_bytes,
        }
    }
}

impl PeakRecord {
    /// The job's memory peak as the table shows it: PSS (its own memory, shared pages counted
    /// once), else RSS. Not the cgroup's peak, which includes page cache.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.peak_pss_bytes.or(self.peak_rss_bytes)
    }
}

/// `; peak RSS 1.2 GiB, PSS 900.0 MiB, GPU 70.0 GiB` for the death line; empty when nothing is known.
pub fn peaks_clause(peaks: &Peaks) -> String {
    let parts: Vec<String> = [
        ("RSS", peaks.rss_bytes),
        ("PSS", peaks.pss_bytes),
        ("swap", peaks.swap_bytes.filter(|s| *s > 0)),
        ("cgroup", peaks.cgroup_bytes),
        ("GPU", peaks.gpu_bytes),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} {}", human_bytes(v))))
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("; peak {}", parts.join(", "))
    }
}

/// `samples.csv`: one row per tick of every attempt.
pub struct SamplesCsv {
    path: PathBuf,
    out: io::BufWriter<File>,
}

/// The columns of samples.csv, in order. Later versions add columns at the end.
pub const SAMPLE_COLUMNS: &str = concat!(
    "unix_time,attempt,tree_rss_bytes,tree_pss_bytes,tree_swap_bytes,sys_available_bytes,",
    "gpu_used_bytes,cgroup_bytes,sys_swap_free_bytes,psi_some_avg10"
);

impl SamplesCsv {
    /// Appends one row and flushes it, so the file is current while the job runs.
    pub fn write(&mut self, s: &Sample) -> Result<(), RunDirError> {
        let cell = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let rss = (s.tree.processes > 0).then_some(s.tree.rss_bytes);
        let row = format!(
            "{:.3},{},{},{},{},{},{},{},{},{}\n",
            s.unix_time_s,
            s.attempt,
            cell(rss),
            cell(s.tree.pss_bytes),
            cell(s.tree.swap_bytes),
            cell(s.system.map(|m| m.available_bytes)),
            cell(s.gpu_bytes()),
            cell(s.cgroup_bytes),
            cell(s.system.map(|m| m.swap_free_bytes)),
            s.system
                .and_then(|m| m.psi_some_avg10)
                .map(|p| p.to_string())
                .unwrap_or_default(),
        );
        let written = self
            .out
            .write_all(row.as_bytes())
            .and_then(|()| self.out.flush());
        written.map_err(|source| RunDirError::Write {
            path: self.path.clone(),
            source,
        })
    }
}

/// The sizes of the last attempt.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FinalSizes {
    pub batch_size: Option<u64>,
    pub accum: Option<u64>,
}

/// `summary.json`. Field names are a contract: later versions add, never rename.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// `running` until the run ends, then an [`Outcome`].
    pub outcome: &'static str,
    pub command: Vec<String>,
    pub attempts: Vec<AttemptRecord>,
    #[serde(rename = "final")]
    pub final_sizes: FinalSizes,
}

impl Summary {
    pub fn new(command: &[String], sizes: FinalSizes) -> Self {
        Summary {
            outcome: "running",
            command: command.to_vec(),
            attempts: Vec::new(),
            final_sizes: sizes,
        }
    }

    pub fn finish(&mut self, outcome: Outcome) {
        self.outcome = outcome.as_str();
    }
}

/// Formats a time as RFC 3339 UTC with seconds, e.g. `2026-11-26T00:00:09Z`.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

/// Why the run directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot create run directory {path}: {source} (choose another with --run-dir)")]
    Create { path: PathBuf, source: io::Error },
    #[error("run directory {path} is not writable (choose another with --run-dir)")]
    NotWritable { path: PathBuf },
    #[error("run directory {path} already holds a run (summary.json): choose a new --run-dir so nothing is overwritten")]
    InUse { path: PathBuf },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// The run directory: `attempt-N.log`, `samples.csv` and `summary.json`.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    /// Whether we made the directory (and may remove it again).
    created: bool,
}

impl RunDir {
    /// Uses `dir`, or makes a new one under the default location. Refuses a directory that
    /// already holds a run, so an earlier run's logs are never overwritten.
    pub fn create(dir: Option<&Path>, program: &str) -> Result<RunDir, RunDirError> {
        let (path, created) = match dir {
            Some(dir) => {
                let created = !dir.exists();
                std::fs::create_dir_all(dir).map_err(|source| RunDirError::Create {
                    path: dir.to_path_buf(),
                    source,
                })?;
                (dir.to_path_buf(), created)
            }
            None => (make_run_dir_in(&default_runs_base(), program)?, true),
        };
        if !is_writable_dir(&path) {
            return Err(RunDirError::NotWritable { path });
        }
        // Claiming summary.json with O_EXCL makes the check and the claim one step: two runs
        // given the same directory cannot both pass it.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path.join("summary.json"))
        {
            Ok(_) => Ok(RunDir { path, created }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(RunDirError::InUse { path }),
            Err(source) => Err(RunDirError::Write {
                path: path.join("summary.json"),
                source,
            }),
        }
    }

    /// Undoes `create` when the job could not even start: removes the files oomguard wrote,
    /// and the directory if oomguard made it, so a failed start leaves nothing behind.
    pub fn discard(self) {
        for name in ["summary.json", "samples.csv", "attempt-1.log"] {
            let _ = std::fs::remove_file(self.path.join(name));
        }
        if self.created {
            let _ = std::fs::remove_dir(&self.path);
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates `attempt-N.log`. `None` (with a warning) if it cannot: the job runs regardless.
    pub fn open_log(&self, attempt: u32, report: &Reporter) -> Option<File> {
        let path = self.path.join(format!("attempt-{attempt}.log"));
        File::create(&path)
            .map_err(|e| {
                report.warn(&format!(
                    "cannot create {}: {e}; this attempt is not logged",
                    path.display()
                ))
            })
            .ok()
    }

    /// Creates samples.csv with its header row.
    pub fn open_samples(&self) -> Result<SamplesCsv, RunDirError> {
        let path = self.path.join("samples.csv");
        let open = || -> io::Result<io::BufWriter<File>> {
            let mut out = io::BufWriter::new(File::create(&path)?);
            writeln!(out, "{SAMPLE_COLUMNS}")?;
            out.flush()?;
            Ok(out)
        };
        let out = open().map_err(|source| RunDirError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(SamplesCsv { path, out })
    }

    /// Writes summary.json atomically: a temporary file in the same directory, then rename.
    pub fn save(&self, summary: &Summary) -> Result<(), RunDirError> {
        let path = self.path.join("summary.json");
        let tmp = self
            .path
            .join(format!(".summary.json.{}.tmp", std::process::id()));
        let write = || -> io::Result<()> {
            let mut file = File::create(&tmp)?;
            serde_json::to_writer_pretty(&mut file, summary)?;
            file.write_all(b"\n")?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|source| RunDirError::Write { path, source })
    }
}

/// Whether `path` names an existing directory we could create files in.
fn is_writable_dir(path: &Path) -> bool {
    nix::unistd::access(
        path,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .is_ok()
}

/// Where default run directories go: `$XDG_STATE_HOME/oomguard/runs`, with `~/.local/state`
/// when XDG_STATE_HOME is unset, and `./oomguard-runs` without a home.
pub fn default_runs_base() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .map(|state| state.join("oomguard/runs"))
        .unwrap_or_else(|| PathBuf::from("oomguard-runs"))
}

/// Makes a new `<base>/<UTC time>-<program>[-N]`. The directory is made with mkdir(2), which
/// fails if it exists, so runs started in the same second (a Slurm array on a shared home) each
/// get their own.
fn make_run_dir_in(base: &Path, program: &str) -> Result<PathBuf, RunDirError> {
    std::fs::create_dir_all(base).map_err(|source| RunDirError::Create {
        path: base.to_path_buf(),
        source,
    })?;
    let stamp: String = rfc3339(SystemTime::now())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("job");
    for n in 1u32.. {
        let path = match n {
            1 => base.join(format!("{stamp}-{name}")),
            n => base.join(format!("{stamp}-{name}-{n}")),
        };
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(RunDirError::Create { path, source }),
        }
    }
    unreachable!("some suffix is free")
}

/// `12.3s`, `4m05s`, `2h03m`.
pub fn short_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, d.as_secs() / 60 % 60)
    }
}

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The final table, one row per attempt.
pub fn table(attempts: &[AttemptRecord]) -> Vec<String> {
    let header = [
        "attempt", "batch", "accum", "cause", "exit", "duration", "peak mem", "peak gpu",
    ];
    let mut rows = vec![header.map(String::from)];
    for a in attempts {
        let exit = match (a.exit_code, a.signal) {
            (Some(code), _) => code.to_string(),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => "-".into(),
        };
        rows.push([
            a.attempt.to_string(),
            or_dash(a.batch_size),
            or_dash(a.accum),
            a.cause.as_str().to_string(),
            exit,
            short_duration(Duration::from_secs_f64(a.duration_s)),
            or_dash(a.peaks.memory_bytes().map(human_bytes)),
            or_dash(a.peaks.peak_gpu_bytes.map(human_bytes)),
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .enumerate()
                // Text columns left-aligned, numbers right-aligned.
                .map(|(i, (cell, w))| {
                    if i == 3 || i == 4 {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        attempt: u32,
        batch: u64,
        cause: Cause,
        exit: Option<i32>,
        signal: Option<i32>,
    ) -> AttemptRecord {
        AttemptRecord {
            attempt,
            command: vec!["python".into()],
            batch_size: Some(batch),
            accum: None,
            cause,
            evidence: String::new(),
            exit_code: exit,
            signal,
            started_at: rfc3339(SystemTime::UNIX_EPOCH),
            duration_s: 12.34,
            peaks: PeakRecord {
                peak_pss_bytes: Some((attempt as u64 * 1536) << 20),
                ..PeakRecord::default()
            },
        }
    }

    #[test]
    fn table_lines_up() {
        let rows = table(&[
            record(1, 64, Cause::DeviceOom, Some(1), None),
            record(2, 32, Cause::OomKilled, None, Some(9)),
            record(3, 16, Cause::Ok, Some(0), None),
        ]);
        assert_eq!(
            rows,
            [
                "attempt  batch  accum  cause       exit      duration  peak mem  peak gpu",
                "      1     64      -  device_oom  1            12.3s   1.5 GiB         -",
                "      2     32      -  oom_killed  signal 9     12.3s   3.0 GiB         -",
                "      3     16      -  ok          0            12.3s   4.5 GiB         -",
            ]
        );
    }

    #[test]
    fn summary_has_the_contract_names() {
        let mut summary = Summary::new(
            &["python".into()],
            FinalSizes {
                batch_size: Some(8),
                accum: None,
            },
        );
        summary
            .attempts
            .push(record(1, 8, Cause::DeviceOom, Some(1), None));
        summary.finish(Outcome::GaveUp);
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["outcome"], "gave_up");
        assert_eq!(json["final"]["batch_size"], 8);
        assert!(json["final"]["accum"].is_null());
        let a = &json["attempts"][0];
        for key in [
            "attempt",
            "command",
            "batch_size",
            "accum",
            "cause",
            "evidence",
            "exit_code",
            "signal",
            "started_at",
            "duration_s",
        ] {
            assert!(a.get(key).is_some(), "{key}");
        }
        assert_eq!(a["cause"], "device_oom");
        assert_eq!(a["started_at"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short_duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(short_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(short_duration(Duration::from_secs(7380)), "2h03m");
    }

    #[test]
    fn run_dir_refuses_an_earlier_run_and_saves_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(Some(&dir.path().join("r")), "python").unwrap();
        let summary = Summary::new(
            &["python".into()],
            FinalSizes {
                batch_size: None,
                accum: None,
            },
        );
        run.save(&summary).unwrap();
        let tmp = format!(".summary.json.{}.tmp", std::process::id());
        assert!(!run.path().join(tmp).exists());
        let err = RunDir::create(Some(&dir.path().join("r")), "python").unwrap_err();
        assert!(matches!(err, RunDirError::InUse { .. }), "{err}");
    }

    #[test]
    fn runs_started_together_get_their_own_directories() {
        let base = tempfile::tempdir().unwrap();
        let made: std::collections::HashSet<PathBuf> = (0..5)
            .map(|_| make_run_dir_in(base.path(), "/usr/bin/python3").unwrap())
            .collect();
        assert_eq!(made.len(), 5);
        assert!(made
            .iter()
            .all(|p| p.is_dir() && p.to_string_lossy().contains("-python3")));
    }
}
