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

use crate::outcome::{Cause, Outcome};
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
    if log_format() == LogFormat::Json {
        // `say`/`warn`/`error` lines: the level is the prefix `warn` and `error` add.
        let (level, message) = match (line.strip_prefix("warning: "), line.strip_prefix("error: "))
        {
            (Some(rest), _) => ("warning", rest),
            (_, Some(rest)) => ("error", rest),
            _ => ("info", line),
        };
        own_json(level, "message", message, &serde_json::Map::new());
        return;
    }
    // Through the stream's stderr writer: ordered after the job's output already queued, and
    // on a line of its own even after an unfinished progress bar.
    crate::stream::own_line(format!("oomguard: {line}\n").as_bytes());
}

/// How oomguard's own lines look: `oomguard: ...` text for people, or one JSON object per line
/// for journald and log collectors (`--log-format json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The format chosen on the command line; set once, before the first line, by [`init_tracing`].
/// Process-wide rather than a field of [`Reporter`] because the tracing subscriber, the writer
/// threads and `main`'s last error line all format lines too, and none of them holds a Reporter.
static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The format of oomguard's own lines (text until [`init_tracing`] says otherwise).
pub fn log_format() -> LogFormat {
    LOG_FORMAT.get().copied().unwrap_or_default()
}

impl Reporter {
    /// A line that marks a step of the run (`attempt_ended`, `relaunch`, `run_ended`...): as
    /// text, `line`; as JSON, `line` as the message and `fields` (attempt, cause, knobs...) kept
    /// as values a machine can read without parsing the text.
    pub fn event(&self, event: &str, fields: serde_json::Value, line: &str) {
        if self.quiet {
            return;
        }
        match log_format() {
            LogFormat::Text => print_line(line),
            LogFormat::Json => {
                let fields = match fields {
                    serde_json::Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                own_json("info", event, line, &fields);
            }
        }
    }
}

/// One JSON log line: `{"time", "level", "event", "message", "fields"}`.
fn own_json(
    level: &str,
    event: &str,
    message: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
) {
    let mut text = json_line(SystemTime::now(), level, event, message, fields);
    text.push('\n');
    crate::stream::own_line(text.as_bytes());
}

/// The text of one JSON log line (without its newline); `time` is RFC 3339 UTC with
/// milliseconds, so lines of one second keep their order when sorted.
pub fn json_line(
    time: SystemTime,
    level: &str,
    event: &str,
    message: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> String {
    serde_json::json!({
        "time": humantime::format_rfc3339_millis(time).to_string(),
        "level": level,
        "event": event,
        "message": message,
        "fields": fields,
    })
    .to_string()
}

/// What could not be saved during a run, each with the last error: the run goes on from memory
/// and says so once, at the end ([`unsaved_summary`]). Process-wide because the attempt log is
/// written by the stream's reader threads, which hold no handle of the run's.
static UNSAVED: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// Notes that `what` (`attempt logs`, `samples.csv`, `summary.json`, `job state`) could not be
/// written; detail only with `-v`, the warning comes once at the end of the run.
pub fn unsaved(what: &'static str, error: &dyn std::fmt::Display) {
    tracing::info!(
        "cannot save {what}: {error}; going on from memory, trying again at the next change"
    );
    let mut list = UNSAVED.lock().unwrap_or_else(|e| e.into_inner());
    match list.iter_mut().find(|(w, _)| *w == what) {
        Some(entry) => entry.1 = error.to_string(),
        None => list.push((what, error.to_string())),
    }
}

/// `what` was written in full after all (a retried summary.json or job state): no longer
/// missing.
pub fn saved(what: &'static str) {
    let mut list = UNSAVED.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|(w, _)| *w != what);
}

/// The one warning for what is still missing when the run ends, if anything is.
pub fn unsaved_summary() -> Option<String> {
    let list = UNSAVED.lock().unwrap_or_else(|e| e.into_inner());
    unsaved_line(&list)
}

/// The warning text for a list of (what, last error).
fn unsaved_line(list: &[(&'static str, String)]) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    let items: Vec<String> = list.iter().map(|(w, e)| format!("{w} ({e})")).collect();
    Some(format!(
        "could not save: {}; the run went on from memory and its exit status is the job's (free space where the run directory and state live)",
        items.join(", ")
    ))
}

/// Sets up `tracing` for `-v` (or `RUST_LOG`); by default only warnings and errors, printed
/// like every other oomguard line (`oomguard: warning: ...`, or JSON with `--log-format json`).
/// Colour only on a terminal: under journald or in a file, escape codes are noise.
pub fn init_tracing_as(verbose: u8, quiet: bool, format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
    init_tracing(verbose, quiet);
}

/// [`init_tracing_as`] with the format already chosen (text by default).
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
        .with_ansi(colour_wanted())
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
        if log_format() == LogFormat::Json {
            let mut fields = JsonFields::default();
            event.record(&mut fields);
            let message = fields.message.take().unwrap_or_default();
            let line = json_line(SystemTime::now(), level, "log", &message, &fields.map);
            return writeln!(writer, "{line}");
        }
        write!(writer, "oomguard: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Colour (tracing's field names) only when stderr is a terminal and NO_COLOR is not set
/// (<https://no-color.org>), and never in JSON.
fn colour_wanted() -> bool {
    use std::io::IsTerminal;
    log_format() == LogFormat::Text
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && io::stderr().is_terminal()
}

/// A tracing event's fields as JSON: `message` apart, the rest by name (numbers and booleans as
/// such, anything else as its Display or Debug text).
#[derive(Default)]
struct JsonFields {
    message: Option<String>,
    map: serde_json::Map<String, serde_json::Value>,
}

impl tracing::field::Visit for JsonFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.put(field, value.into());
    }
}

impl JsonFields {
    fn put(&mut self, field: &tracing::field::Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.map.insert(field.name().to_string(), value);
        }
    }
}

/// One attempt as summary.json records it.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub command: Vec<String>,
    pub batch_size: Option<u64>,
    pub accum: Option<u64>,
    /// Every knob's value in this attempt, in ladder order.
    pub knobs: KnobValues,
    /// The knobs that moved for this attempt (empty for attempt 1 and unchanged retries).
    pub changed: Vec<String>,
    pub cause: Cause,
    pub evidence: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub duration_s: f64,
    #[serde(flatten)]
    pub peaks: PeakRecord,
    /// The checkpoint it resumed from (`--resume-arg`); null when none.
    pub resumed_from: Option<String>,
    /// The hint this attempt was relaunched with (`allocator_fragmentation`), absent if none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<&'static str>,
}

/// Knob values by name, in ladder order (a JSON object keeps the order it is written in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnobValues(pub Vec<(String, serde_json::Value)>);

impl Serialize for KnobValues {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// Read back from a job's memory (`jobs`), in the order written.
impl<'de> serde::Deserialize<'de> for KnobValues {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = KnobValues;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of knob values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<KnobValues, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    entries.push(entry);
                }
                Ok(KnobValues(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

/// An attempt's memory peaks in summary.json (and in a job's memory, read back); null where
/// unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PeakRecord {
    pub peak_rss_bytes: Option<u64>,
    pub peak_pss_bytes: Option<u64>,
    pub peak_swap_bytes: Option<u64>,
    pub peak_gpu_bytes: Option<u64>,
    /// The attempt cgroup's high-water mark, where it ran in one (page cache included).
    pub peak_cgroup_bytes: Option<u64>,
    /// The largest resident set one process of the job ever had: its VmHWM while sampled, and
    /// the kernel's `ru_maxrss` when it was reaped, so a spike between samples still counts.
    pub peak_process_rss_bytes: Option<u64>,
}

impl From<Peaks> for PeakRecord {
    fn from(p: Peaks) -> Self {
        PeakRecord {
            peak_rss_bytes: p.rss_bytes,
            peak_pss_bytes: p.pss_bytes,
            peak_swap_bytes: p.swap_bytes,
            peak_gpu_bytes: p.gpu_bytes,
            peak_cgroup_bytes: p.cgroup_bytes,
            peak_process_rss_bytes: p.process_rss_bytes,
        }
    }
}

impl PeakRecord {
    /// The job's memory peak as the table shows it: PSS (its own memory, shared pages counted
    /// once), else RSS; never below what one process was seen to hold, which catches a peak
    /// that fell between samples (a short attempt may have had no sample at its height). Not
    /// the cgroup's peak, which includes page cache.
    pub fn memory_bytes(&self) -> Option<u64> {
        let tree = self.peak_pss_bytes.or(self.peak_rss_bytes);
        match (tree, self.peak_process_rss_bytes) {
            (Some(tree), Some(one)) => Some(tree.max(one)),
            (tree, one) => tree.or(one),
        }
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
    "gpu_used_bytes,cgroup_bytes,sys_swap_free_bytes,psi_some_avg10,",
    "cgroup_working_set_bytes,cgroup_anon_bytes,cgroup_file_bytes,cgroup_shmem_bytes,",
    "cgroup_swap_bytes"
);

/// The cgroup columns that end a samples.csv row (working set, anon, file, shmem, swap), each
/// empty where unknown.
fn cgroup_cells(mem: Option<&crate::cgroup::CgroupMem>) -> String {
    let cells = [
        mem.and_then(|m| m.working_set_bytes),
        mem.and_then(|m| m.anon_bytes),
        mem.and_then(|m| m.file_bytes),
        mem.and_then(|m| m.shmem_bytes),
        mem.and_then(|m| m.swap_bytes),
    ];
    cells
        .map(|v| v.map(|v| v.to_string()).unwrap_or_default())
        .join(",")
}

impl SamplesCsv {
    /// Appends one row and flushes it, so the file is current while the job runs.
    pub fn write(&mut self, s: &Sample) -> Result<(), RunDirError> {
        let cell = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let rss = (s.tree.processes > 0).then_some(s.tree.rss_bytes);
        let row = format!(
            "{:.3},{},{},{},{},{},{},{},{},{},{}\n",
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
            cgroup_cells(s.cgroup.as_ref()),
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
    attempts: Vec<AttemptRecord>,
    #[serde(rename = "final")]
    pub final_sizes: FinalSizes,
    /// The job this run belongs to (`jobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The knob values attempt 1 started from when they came from the job's last success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_from: Option<KnobValues>,
    /// The memory limits the attempts ran under, for `oomguard report`'s chart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<RunLimits>,
    /// The attempts as summary.json holds them, one JSON object per line, each rendered once
    /// when it is added: saving after attempt N costs no re-encoding of the N-1 before it.
    #[serde(skip)]
    attempts_json: Vec<u8>,
}

impl Summary {
    pub fn new(command: &[String], sizes: FinalSizes) -> Self {
        Summary {
            outcome: "running",
            command: command.to_vec(),
            attempts: Vec::new(),
            final_sizes: sizes,
            job: None,
            started_from: None,
            limits: None,
            attempts_json: Vec::new(),
        }
    }

    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.attempts
    }

    pub fn push(&mut self, record: AttemptRecord) {
        if !self.attempts_json.is_empty() {
            self.attempts_json.extend_from_slice(b",\n");
        }
        self.attempts_json.extend_from_slice(b"    ");
        serde_json::to_writer(&mut self.attempts_json, &record)
            .expect("an attempt record is plain data: it always encodes");
        self.attempts.push(record);
    }

    pub fn finish(&mut self, outcome: Outcome) {
        self.outcome = outcome.as_str();
    }

    /// The text of summary.json: the same JSON as serde would give, laid out with one attempt
    /// per line.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.attempts_json.len() + 1024);
        out.extend_from_slice(b"{\n  \"outcome\": ");
        encode(&mut out, &self.outcome);
        out.extend_from_slice(b",\n  \"command\": ");
        encode(&mut out, &self.command);
        out.extend_from_slice(b",\n  \"attempts\": [");
        if !self.attempts_json.is_empty() {
            out.push(b'\n');
            out.extend_from_slice(&self.attempts_json);
            out.extend_from_slice(b"\n  ");
        }
        out.extend_from_slice(b"],\n  \"final\": ");
        encode(&mut out, &self.final_sizes);
        if let Some(job) = &self.job {
            out.extend_from_slice(b",\n  \"job\": ");
            encode(&mut out, job);
        }
        if let Some(start) = &self.started_from {
            out.extend_from_slice(b",\n  \"started_from\": ");
            encode(&mut out, start);
        }
        if let Some(limits) = &self.limits {
            out.extend_from_slice(b",\n  \"limits\": ");
            encode(&mut out, limits);
        }
        out.extend_from_slice(b"\n}\n");
        out
    }
}

/// The memory limits of a run as summary.json records them (`limits`); null where not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct RunLimits {
    /// `--memory-max`: the attempt cgroup's hard limit.
    pub memory_max_bytes: Option<u64>,
    /// `--max-rss`: the soft bound on the job's memory.
    pub max_rss_bytes: Option<u64>,
    /// `--max-gpu`: the soft bound on GPU memory.
    pub max_gpu_bytes: Option<u64>,
    /// The largest capacity of one GPU the job used, as NVML reported it: the room a device
    /// out-of-memory error runs into.
    pub gpu_total_bytes: Option<u64>,
}

impl RunLimits {
    /// `--memory-max 512.0 MiB`, one entry per limit set.
    pub fn describe(&self) -> Vec<String> {
        [
            ("--memory-max", self.memory_max_bytes),
            ("--max-rss", self.max_rss_bytes),
            ("--max-gpu", self.max_gpu_bytes),
            ("GPU capacity", self.gpu_total_bytes),
        ]
        .into_iter()
        .filter_map(|(flag, v)| v.map(|v| format!("{flag} {}", human_bytes(v))))
        .collect()
    }
}

/// Appends `value` as compact JSON.
fn encode(out: &mut Vec<u8>, value: &impl Serialize) {
    serde_json::to_writer(out, value).expect("summary fields are plain data: they always encode");
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
    #[error("run directory {path} already holds {file}, which oomguard would write: choose a new --run-dir so nothing is overwritten")]
    InUse { path: PathBuf, file: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// Whether `name` is a file oomguard writes in a run directory (and so refuses to find there).
fn is_run_file(name: &str) -> bool {
    if matches!(
        name,
        "summary.json" | "samples.csv" | "report.html" | crate::hooks::LOG_NAME
    ) {
        return true;
    }
    name.strip_prefix("attempt-")
        .and_then(|rest| rest.strip_suffix(".log"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The run directory: `attempt-N.log`, `samples.csv` and `summary.json`. oomguard only ever
/// creates files here (O_EXCL), so a file of the user's is never truncated, and it removes
/// only what it created.
///
/// The directory is opened once when it is made or found, and every file in it is reached
/// through that descriptor (`/proc/self/fd/N/NAME`): a directory on its path renamed, or
/// replaced by a symlink, afterwards (by a user who can write a directory above it) cannot send
/// a later file elsewhere.
#[derive(Debug)]
pub struct RunDir {
    /// Absolute: it is handed to the job (OOMGUARD_RUN_DIR), which may change directory.
    path: PathBuf,
    /// The directories we made, deepest last (removed again, deepest first, on a failed start).
    made_dirs: Vec<PathBuf>,
    /// The names of the files we created.
    made_files: std::cell::RefCell<Vec<String>>,
    /// The directory itself, opened once (`O_PATH`).
    pinned: File,
    /// Whether summary.json has been claimed (its first save): later saves only replace it.
    summary_claimed: std::cell::Cell<bool>,
    /// Whether the directory is the job's user's (see [`RunDir::create`]): then every file here
    /// is made as that user ([`crate::principal`]).
    as_user: bool,
}

impl RunDir {
    /// Uses `dir`, or makes a new one under the default location. Refuses a directory that
    /// already holds any file oomguard would write, so nothing there is ever overwritten; other
    /// files in it are left alone.
    ///
    /// `as_user`: the directory is the job's user's (chosen by a job file they could write, or in
    /// a place they can write), so it is made, and every file in it, as that user
    /// ([`crate::principal`]).
    pub fn create(dir: Option<&Path>, program: &str, as_user: bool) -> Result<RunDir, RunDirError> {
        let as_user = as_user && crate::principal::acting_for().is_some();
        let switch_failed = |source| RunDirError::Create {
            path: dir.map(Path::to_path_buf).unwrap_or_default(),
            source,
        };
        let made = || match dir {
            Some(dir) => {
                let dir = std::path::absolute(dir).map_err(|source| RunDirError::Create {
                    path: dir.to_path_buf(),
                    source,
                })?;
                let made = create_dirs(&dir)?;
                Ok((dir, made))
            }
            None => {
                let base = std::path::absolute(default_runs_base()).map_err(|source| {
                    RunDirError::Create {
                        path: default_runs_base(),
                        source,
                    }
                })?;
                let mut made = create_dirs(&base)?;
                let path = make_run_dir_in(&base, program).inspect_err(|_| remove_dirs(&made))?;
                made.push(path.clone());
                Ok((path, made))
            }
        };
        let (path, made_dirs) = crate::principal::as_user_if_or(as_user, made, switch_failed)?;
        let pinned = crate::principal::as_user_if(as_user, || {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_PATH | nix::libc::O_DIRECTORY)
                .open(&path)
        });
        let pinned = match pinned {
            Ok(pinned) => pinned,
            Err(source) => {
                let _ = crate::principal::as_user_if(as_user, || {
                    remove_dirs(&made_dirs);
                    Ok(())
                });
                return Err(RunDirError::Create { path, source });
            }
        };
        let run_dir = RunDir {
            path,
            pinned,
            made_dirs,
            made_files: Default::default(),
            summary_claimed: Default::default(),
            as_user,
        };
        if let Err(e) = run_dir.check_unused() {
            remove_dirs(&run_dir.made_dirs);
            return Err(e);
        }
        Ok(run_dir)
    }

    /// Whether files here are made as the job's user (see [`crate::principal`]).
    pub fn is_users(&self) -> bool {
        self.as_user
    }

    /// Refuses a directory we cannot write, or one holding a file we would write.
    fn check_unused(&self) -> Result<(), RunDirError> {
        // access(2) answers for the real uid (root); acting for a user, the first file made
        // here is the test.
        if !self.as_user && !is_writable_dir(&self.path) {
            return Err(RunDirError::NotWritable {
                path: self.path.clone(),
            });
        }
        let entries =
            crate::principal::as_user_if(self.as_user, || std::fs::read_dir(self.files()))
                .map_err(|source| RunDirError::Create {
                    path: self.path.clone(),
                    source,
                })?;
        let mut found: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| is_run_file(name))
            .collect();
        found.sort();
        match found.into_iter().next() {
            None => Ok(()),
            Some(file) => Err(RunDirError::InUse {
                path: self.path.clone(),
                file,
            }),
        }
    }

    /// Creates `name` in the run directory; fails if it exists (O_EXCL), so a file that
    /// appeared since the check (another run given the same directory) is never truncated.
    fn create_file(&self, name: &str) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.at(name);
        let file = crate::principal::as_user_if(self.as_user, || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)
        })?;
        self.made_files.borrow_mut().push(name.to_string());
        Ok(file)
    }

    /// Undoes `create` when the job could not even start: removes the files oomguard created,
    /// and the directories it made, so a failed start leaves nothing behind.
    pub fn discard(self) {
        let _ = crate::principal::as_user_if(self.as_user, || {
            for name in self.made_files.borrow().iter() {
                let _ = std::fs::remove_file(self.at(name));
            }
            remove_dirs(&self.made_dirs);
            Ok(())
        });
    }

    /// Opens `name` (hooks.log) for appending, made on first use. Refused unless it is a regular
    /// file with one link owned by whoever writes here: the directory was checked free of it
    /// when the run started, so anything else there now (a symlink, a hard link to another
    /// file) was planted by someone else.
    pub fn open_append(&self, name: &str) -> io::Result<File> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let path = self.at(name);
        crate::principal::as_user_if(self.as_user, || {
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o644)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                .open(&path)?;
            let meta = file.metadata()?;
            let writer = match crate::principal::acting_for().filter(|_| self.as_user) {
                Some(who) => who.uid.as_raw(),
                None => nix::unistd::Uid::effective().as_raw(),
            };
            if !meta.is_file() || meta.nlink() != 1 || meta.uid() != writer {
                return Err(io::Error::other(format!(
                    "{} is not a file oomguard made (owner uid {}, {} links): someone else put it there",
                    self.path.join(name).display(),
                    meta.uid(),
                    meta.nlink()
                )));
            }
            Ok(file)
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory as opened (`/proc/self/fd/N`): the path to reach its files by, which
    /// cannot be redirected (see the type's doc). [`RunDir::path`] is the one to show.
    pub fn files(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.pinned.as_raw_fd()))
    }

    /// `name` in the directory as opened.
    fn at(&self, name: &str) -> PathBuf {
        self.files().join(name)
    }

    /// Creates `attempt-N.log`. `None` if it cannot: the job runs regardless, and the run's
    /// last warning says the log is missing ([`unsaved`]).
    pub fn open_log(&self, attempt: u32, _report: &Reporter) -> Option<File> {
        let name = format!("attempt-{attempt}.log");
        self.create_file(&name)
            // Said once at the end of the run, with whatever else could not be saved.
            .map_err(|e| {
                unsaved(
                    "attempt logs",
                    &format!("{}: {e}", self.path.join(&name).display()),
                )
            })
            .ok()
    }

    /// Creates samples.csv with its header row.
    pub fn open_samples(&self) -> Result<SamplesCsv, RunDirError> {
        let path = self.path.join("samples.csv");
        let open = || -> io::Result<io::BufWriter<File>> {
            let mut out = io::BufWriter::new(self.create_file("samples.csv")?);
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

    /// Writes summary.json atomically: the whole text in one buffer, written to a temporary
    /// file in the same directory, then renamed over the old one. `durable` also syncs it to
    /// disk first (the last save of a run); between attempts the rename alone keeps readers from
    /// ever seeing a partial file, and skipping the sync keeps an attempt's cost flat however
    /// long the run.
    pub fn save(&self, summary: &Summary, durable: bool) -> Result<(), RunDirError> {
        let path = self.path.join("summary.json");
        let target = self.at("summary.json");
        let write = || -> io::Result<()> {
            let (tmp, file) = self.create_temp()?;
            crate::principal::as_user_if(self.as_user, || {
                crate::fsutil::write_then_rename(file, &tmp, &target, &summary.render(), durable)
            })
        };
        if !self.summary_claimed.get() {
            // The first save claims the name with O_EXCL: two runs given the same directory at
            // the same moment cannot both pass.
            self.create_file("summary.json")
                .map_err(|source| match source.kind() {
                    io::ErrorKind::AlreadyExists => RunDirError::InUse {
                        path: self.path.clone(),
                        file: "summary.json".into(),
                    },
                    _ => RunDirError::Write {
                        path: path.clone(),
                        source,
                    },
                })?;
            self.summary_claimed.set(true);
        }
        write().map_err(|source| RunDirError::Write { path, source })
    }

    /// A new temporary file for summary.json, made with O_EXCL: never a file (or a symlink)
    /// that was already there, whoever put it there.
    fn create_temp(&self) -> io::Result<(PathBuf, File)> {
        let pid = std::process::id();
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        crate::principal::as_user_if(self.as_user, || {
            crate::fsutil::create_new_numbered(&options, |n| {
                self.at(&format!(".summary.json.{pid}.{n}.tmp"))
            })
        })
    }
}

/// Makes `dir` and any missing parents; returns the ones it made, outermost first.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>, RunDirError> {
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    let mut made = Vec::new();
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(&d) {
            Ok(()) => made.push(d),
            // Made meanwhile by someone else: theirs, not ours to remove.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                remove_dirs(&made);
                // The directory wanted, and which of its parents could not be made.
                let source = match d == dir {
                    true => source,
                    false => io::Error::new(source.kind(), format!("{}: {source}", d.display())),
                };
                return Err(RunDirError::Create {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
    Ok(made)
}

/// Removes directories we made, deepest first; one that is not empty (someone else put a file
/// there) stays.
fn remove_dirs(made: &[PathBuf]) {
    for d in made.iter().rev() {
        let _ = std::fs::remove_dir(d);
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
/// when XDG_STATE_HOME is unset, empty or relative (the XDG spec says to ignore a relative
/// one), and `./oomguard-runs` without a home.
pub fn default_runs_base() -> PathBuf {
    state_dir()
        .map(|state| state.join("runs"))
        .unwrap_or_else(|| PathBuf::from("oomguard-runs"))
}

/// oomguard's state directory: `$XDG_STATE_HOME/oomguard`, with `~/.local/state` when
/// XDG_STATE_HOME is unset, empty or relative; None without a home (no absolute place to keep
/// state that a later run would find again).
pub fn state_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|v| v.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .map(|state| state.join("oomguard"))
}

/// Makes a new `<base>/<UTC time>-<program>[-N]`. The directory is made with mkdir(2), which
/// fails if it exists, so runs started in the same second (a Slurm array on a shared home) each
/// get their own.
fn make_run_dir_in(base: &Path, program: &str) -> Result<PathBuf, RunDirError> {
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
    // A column per knob that ever moved, beside the batch and accumulation columns.
    let mut moved: Vec<&str> = Vec::new();
    for name in attempts.iter().flat_map(|a| &a.changed) {
        if name != "batch" && name != "accum" && !moved.contains(&name.as_str()) {
            moved.push(name);
        }
    }
    let mut header: Vec<String> = ["attempt", "batch", "accum"].map(String::from).to_vec();
    header.extend(moved.iter().map(|n| n.to_string()));
    header.extend(["cause", "exit", "duration", "peak mem", "peak gpu"].map(String::from));
    // Text columns are left-aligned, numbers right-aligned.
    let text_columns = [3 + moved.len(), 4 + moved.len()];
    let mut rows = vec![header];
    for a in attempts {
        let exit = match (a.exit_code, a.signal) {
            (Some(code), _) => code.to_string(),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => "-".into(),
        };
        let mut row = vec![
            a.attempt.to_string(),
            or_dash(a.batch_size),
            or_dash(a.accum),
        ];
        row.extend(moved.iter().map(|name| {
            a.knobs
                .0
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-".to_string(), |(_, v)| match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => "-".to_string(),
                    other => other.to_string(),
                })
        }));
        row.extend([
            a.cause.as_str().to_string(),
            exit,
            short_duration(Duration::from_secs_f64(a.duration_s)),
            or_dash(a.peaks.memory_bytes().map(human_bytes)),
            or_dash(a.peaks.peak_gpu_bytes.map(human_bytes)),
        ]);
        rows.push(row);
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
                .map(|(i, (cell, w))| {
                    if text_columns.contains(&i) {
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
            knobs: KnobValues(vec![("batch".into(), batch.into())]),
            changed: if attempt > 1 {
                vec!["batch".into()]
            } else {
                Vec::new()
            },
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
            resumed_from: None,
            hint: None,
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
        summary.push(record(1, 8, Cause::DeviceOom, Some(1), None));
        summary.finish(Outcome::GaveUp);
        let json: serde_json::Value = serde_json::from_slice(&summary.render()).unwrap();
        assert_eq!(json, serde_json::to_value(&summary).unwrap());
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
    fn the_unsaved_warning_names_each_thing_once_with_its_error() {
        type Unsaved = [(&'static str, String)];
        let table: [(&Unsaved, Option<&str>); 3] = [
            (&[], None),
            (
                &[("summary.json", "No space left on device".into())],
                Some("could not save: summary.json (No space left on device);"),
            ),
            (
                &[
                    ("attempt logs", "full".into()),
                    ("job state", "quota".into()),
                ],
                Some("could not save: attempt logs (full), job state (quota);"),
            ),
        ];
        for (list, want) in table {
            let got = unsaved_line(list);
            match want {
                None => assert_eq!(got, None),
                Some(start) => assert!(got.as_deref().unwrap().starts_with(start), "{got:?}"),
            }
        }
    }

    #[test]
    fn a_json_log_line_has_its_keys() {
        let mut fields = serde_json::Map::new();
        fields.insert("attempt".into(), 2.into());
        let line = json_line(
            SystemTime::UNIX_EPOCH + Duration::from_millis(1500),
            "warning",
            "relaunch",
            "attempt 2 in 0.0s",
            &fields,
        );
        assert!(!line.contains('\n'));
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({
                "time": "1970-01-01T00:00:01.500Z",
                "level": "warning",
                "event": "relaunch",
                "message": "attempt 2 in 0.0s",
                "fields": {"attempt": 2},
            })
        );
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
        let run = RunDir::create(Some(&dir.path().join("r")), "python", false).unwrap();
        let summary = Summary::new(
            &["python".into()],
            FinalSizes {
                batch_size: None,
                accum: None,
            },
        );
        // A symlink planted where the temporary file would go is never followed.
        let precious = dir.path().join("precious.txt");
        std::fs::write(&precious, "precious").unwrap();
        let planted = run
            .path()
            .join(format!(".summary.json.{}.0.tmp", std::process::id()));
        std::os::unix::fs::symlink(&precious, &planted).unwrap();
        run.save(&summary, false).unwrap();
        run.save(&summary, true).unwrap();
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious");
        std::fs::remove_file(&planted).unwrap();
        let left: Vec<_> = std::fs::read_dir(run.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let err = RunDir::create(Some(&dir.path().join("r")), "python", false).unwrap_err();
        assert!(matches!(err, RunDirError::InUse { .. }), "{err}");
    }

    #[test]
    fn run_files_are_recognised() {
        let table = [
            ("summary.json", true),
            ("samples.csv", true),
            ("report.html", true),
            ("attempt-1.log", true),
            ("attempt-204.log", true),
            ("attempt-.log", false),
            ("attempt-1a.log", false),
            ("attempt-1.log.bak", false),
            ("notes.txt", false),
            (".summary.json.12.tmp", false),
        ];
        for (name, want) in table {
            assert_eq!(is_run_file(name), want, "{name}");
        }
    }

    #[test]
    fn summary_text_is_one_json_document_however_many_attempts() {
        let mut summary = Summary::new(
            &["python".into(), "t.py".into()],
            FinalSizes {
                batch_size: Some(64),
                accum: Some(1),
            },
        );
        let empty: serde_json::Value = serde_json::from_slice(&summary.render()).unwrap();
        assert_eq!(empty, serde_json::to_value(&summary).unwrap());
        for n in 1..=3 {
            summary.push(record(n, 64 >> n, Cause::OomKilled, None, Some(9)));
        }
        summary.finish(Outcome::Succeeded);
        let text = summary.render();
        let parsed: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(parsed, serde_json::to_value(&summary).unwrap());
        assert_eq!(parsed["attempts"].as_array().unwrap().len(), 3);
        // One attempt per line, for grep and for people.
        let text = String::from_utf8(text).unwrap();
        assert_eq!(
            text.lines().filter(|l| l.contains("\"attempt\":")).count(),
            3
        );
    }

    #[test]
    fn the_job_and_its_start_render_as_serde_encodes_them() {
        let mut summary = Summary::new(
            &["t.py".into()],
            FinalSizes {
                batch_size: Some(8),
                accum: None,
            },
        );
        summary.job = Some("t-0123456789abcdef".into());
        summary.started_from = Some(KnobValues(vec![("batch".into(), 2.into())]));
        let parsed: serde_json::Value = serde_json::from_slice(&summary.render()).unwrap();
        assert_eq!(parsed, serde_json::to_value(&summary).unwrap());
        assert_eq!(parsed["job"], "t-0123456789abcdef");
        assert_eq!(parsed["started_from"], serde_json::json!({"batch": 2}));
        // Read back in the order written.
        let back: KnobValues = serde_json::from_str(r#"{"z": 1, "a": null, "m": "x"}"#).unwrap();
        let names: Vec<&str> = back.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["z", "a", "m"]);
    }

    #[test]
    fn a_failed_start_removes_only_what_it_made() {
        let base = tempfile::tempdir().unwrap();
        let deep = base.path().join("n1/n2/n3");
        let run = RunDir::create(Some(&deep), "python", false).unwrap();
        assert!(run.path().is_absolute());
        run.save(
            &Summary::new(
                &["python".into()],
                FinalSizes {
                    batch_size: None,
                    accum: None,
                },
            ),
            false,
        )
        .unwrap();
        run.discard();
        assert!(!base.path().join("n1").exists());
        // A directory of the user's, with a file of theirs: both stay.
        let theirs = base.path().join("mine");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("notes.txt"), "keep").unwrap();
        let run = RunDir::create(Some(&theirs), "python", false).unwrap();
        let _log = run.open_log(1, &Reporter { quiet: true }).unwrap();
        run.discard();
        assert!(!theirs.join("attempt-1.log").exists());
        assert_eq!(
            std::fs::read_to_string(theirs.join("notes.txt")).unwrap(),
            "keep"
        );
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
