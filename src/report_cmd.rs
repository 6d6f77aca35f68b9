//! `oomguard report RUN_DIR`: the story of a finished (or running) run, read back from its run
//! directory (`summary.json`, `samples.csv`): the attempts table in the terminal, one JSON
//! document (`--json`), or a self-contained HTML page (`--html FILE`) with an SVG chart of memory
//! over time drawn by plotters' SVG backend. `oomguard run` writes the same page as
//! `report.html` into the run directory when it ends.
//!
//! It reads and formats only: what the run directory holds is written by [`crate::report`], and
//! the causes and knob values are the ones the attempt loop recorded.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::record::summary::{KnobValues, PeakRecord, RunLimits};
use crate::units::human_bytes;

/// Why a run directory cannot be reported on. Each message names the directory and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path} is not a directory: give the run directory `oomguard run` printed (its `run directory ...` line)")]
    Missing { path: PathBuf },
    #[error("{path} is not an oomguard run directory (no summary.json): give the directory `oomguard run` printed (its `run directory ...` line)")]
    NotRunDir { path: PathBuf },
    #[error("cannot read {path}: {reason} (is it a run directory written by this oomguard?)")]
    Unreadable { path: PathBuf, reason: String },
}

/// One knob's move between two attempts: `batch 32→16`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobChange {
    pub knob: String,
    pub from: serde_json::Value,
    pub to: serde_json::Value,
}

/// One knob's value in an attempt (a list, not a map, so the ladder order survives JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobValue {
    pub knob: String,
    pub value: serde_json::Value,
}

/// One attempt as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptReport {
    pub attempt: u32,
    pub knobs: Vec<KnobValue>,
    /// The knobs that moved from the attempt before, old → new (empty for attempt 1).
    pub changes: Vec<KnobChange>,
    pub cause: String,
    /// The line that shows the cause (`exit 1; output: "MemoryError"`).
    pub evidence: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub started_at: String,
    pub duration_s: f64,
    /// When it started and ended on the chart's clock (seconds since the first attempt
    /// started), from its samples and its duration.
    pub start_s: f64,
    pub end_s: f64,
    pub peaks: PeakRecord,
}

/// One row of samples.csv, in seconds since the run's first attempt started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub t_s: f64,
    pub attempt: u32,
    pub rss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub gpu_bytes: Option<u64>,
    pub cgroup_bytes: Option<u64>,
}

impl TimelinePoint {
    /// The tree's own memory: PSS (shared pages once) where read, else RSS.
    fn tree_bytes(&self) -> Option<u64> {
        self.pss_bytes.or(self.rss_bytes)
    }
}

/// The whole report: what `--json` prints and what the table and page are drawn from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub run_dir: String,
    /// `succeeded`, `gave_up`, `running`... as summary.json has it.
    pub outcome: String,
    pub command: Vec<String>,
    pub job: Option<String>,
    /// The memory limits the attempts ran under (absent in run directories of older versions).
    pub limits: RunLimits,
    pub attempts: Vec<AttemptReport>,
    /// The attempt that finished with exit 0, if one did.
    pub fit_attempt: Option<u32>,
    /// The knob values of that attempt: what fit.
    pub fit_knobs: Vec<KnobValue>,
    pub timeline: Vec<TimelinePoint>,
}

/// summary.json as this module reads it: only the fields it shows, unknown ones ignored.
#[derive(Deserialize)]
struct SummaryIn {
    outcome: String,
    command: Vec<String>,
    attempts: Vec<AttemptIn>,
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    limits: Option<RunLimits>,
}

#[derive(Deserialize)]
struct AttemptIn {
    attempt: u32,
    #[serde(default)]
    knobs: KnobValues,
    cause: String,
    #[serde(default)]
    evidence: String,
    exit_code: Option<i32>,
    signal: Option<i32>,
    #[serde(default)]
    started_at: String,
    #[serde(default)]
    duration_s: f64,
    #[serde(flatten)]
    peaks: PeakRecord,
}

/// Reads a run directory into a [`RunReport`].
pub fn load(dir: &Path) -> Result<RunReport, ReportError> {
    if !dir.is_dir() {
        return Err(ReportError::Missing {
            path: dir.to_path_buf(),
        });
    }
    let summary_path = dir.join("summary.json");
    let read =
        crate::fsutil::read_regular_capped(&summary_path, crate::fsutil::SMALL_FILE_MAX_BYTES)
            .and_then(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
            });
    let text = match read {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReportError::NotRunDir {
                path: dir.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(ReportError::Unreadable {
                path: summary_path,
                reason: e.to_string(),
            })
        }
    };
    from_summary(dir, &text).map_err(|reason| ReportError::Unreadable {
        path: summary_path,
        reason,
    })
}

/// A report from summary.json's text (read from `dir` or handed over by the run that holds it)
/// and `dir`'s samples.csv, every row of it.
fn from_summary(dir: &Path, summary_text: &str) -> Result<RunReport, String> {
    let summary: SummaryIn = serde_json::from_str(summary_text).map_err(|e| e.to_string())?;
    let mut samples = Vec::new();
    read_samples(dir, |row| samples.push(row));
    Ok(build(dir, summary, &samples))
}

/// [`from_summary`] for the page a run writes at its end: of a long run's samples it keeps
/// only what the chart can show ([`ChartRows`]), so the memory this takes at the end of a
/// week at `--interval 1s` (600,000 rows) stays that of a few thousand rows.
fn for_chart(dir: &Path, summary_text: &str) -> Result<RunReport, String> {
    let summary: SummaryIn = serde_json::from_str(summary_text).map_err(|e| e.to_string())?;
    let first = summary.attempts.first().and_then(|a| unix_s(&a.started_at));
    let last = summary
        .attempts
        .last()
        .and_then(|a| Some(unix_s(&a.started_at)? + a.duration_s.max(0.0)));
    let (Some(first), Some(last)) = (first, last) else {
        return from_summary(dir, summary_text);
    };
    let mut rows = ChartRows::new(first, (last + 1.0 - first) / CHART_COLUMNS);
    read_samples(dir, |row| rows.push(row));
    Ok(build(dir, summary, &rows.finish()))
}

/// Streams `dir`'s samples.csv into `row`, line by line. It is optional: an attempt that died
/// before its first tick has no rows.
fn read_samples(dir: &Path, row: impl FnMut(Row)) {
    // Streamed, so not capped; but a FIFO or a device there is no run's samples.
    if let Ok(file) = crate::fsutil::open_regular(&dir.join("samples.csv")) {
        parse_samples(std::io::BufReader::new(file), row);
    }
}

/// A samples.csv row: unix time and the columns the chart uses.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Row {
    unix_time_s: f64,
    point: TimelinePoint,
}

/// Parses samples.csv by its header's column names (later versions add columns at the end);
/// rows that do not parse are skipped (a row cut short by a crash).
fn parse_samples(mut csv: impl std::io::BufRead, mut row: impl FnMut(Row)) {
    let mut header = String::new();
    if csv.read_line(&mut header).unwrap_or(0) == 0 {
        return;
    }
    let names: Vec<&str> = header.trim_end().split(',').collect();
    let col = |name: &str| names.iter().position(|n| *n == name);
    let (Some(time), Some(attempt)) = (col("unix_time"), col("attempt")) else {
        return;
    };
    let [rss, pss, swap, gpu, cgroup] = [
        "tree_rss_bytes",
        "tree_pss_bytes",
        "tree_swap_bytes",
        "gpu_used_bytes",
        "cgroup_bytes",
    ]
    .map(col);
    let mut line = String::new();
    while csv.read_line(&mut line).unwrap_or(0) > 0 {
        let cells: Vec<&str> = line.trim_end().split(',').collect();
        let num = |i: Option<usize>| i.and_then(|i| cells.get(i)?.parse::<u64>().ok());
        let parsed = (|| {
            Some(Row {
                unix_time_s: cells.get(time)?.parse().ok()?,
                point: TimelinePoint {
                    t_s: 0.0,
                    attempt: cells.get(attempt)?.parse().ok()?,
                    rss_bytes: num(rss),
                    pss_bytes: num(pss),
                    swap_bytes: num(swap),
                    gpu_bytes: num(gpu),
                    cgroup_bytes: num(cgroup),
                },
            })
        })();
        if let Some(parsed) = parsed {
            row(parsed);
        }
        line.clear();
    }
}

/// The rows a chart `CHART_COLUMNS` wide can show: of each attempt's rows in each column of
/// time, the first and those holding each series' highest value (so every peak is drawn), in
/// time order. A column's rows are held only until the next column starts.
struct ChartRows {
    origin_s: f64,
    column_s: f64,
    column: Option<(u32, i64)>,
    pending: Vec<Row>,
    kept: Vec<Row>,
}

impl ChartRows {
    fn new(origin_s: f64, column_s: f64) -> ChartRows {
        ChartRows {
            origin_s,
            column_s: column_s.max(f64::MIN_POSITIVE),
            column: None,
            pending: Vec::new(),
            kept: Vec::new(),
        }
    }

    fn push(&mut self, row: Row) {
        let column = (
            row.point.attempt,
            ((row.unix_time_s - self.origin_s) / self.column_s).floor() as i64,
        );
        if self.column != Some(column) {
            self.flush();
            self.column = Some(column);
        }
        self.pending.push(row);
    }

    fn flush(&mut self) {
        let series: [fn(&TimelinePoint) -> Option<u64>; 4] = [
            TimelinePoint::tree_bytes,
            |p| p.swap_bytes,
            |p| p.gpu_bytes,
            |p| p.cgroup_bytes,
        ];
        let mut chosen: Vec<usize> = series
            .iter()
            .filter_map(|value| {
                (0..self.pending.len()).max_by_key(|&i| value(&self.pending[i].point))
            })
            .collect();
        if !self.pending.is_empty() {
            chosen.push(0);
        }
        chosen.sort_unstable();
        chosen.dedup();
        self.kept
            .extend(chosen.into_iter().map(|i| self.pending[i]));
        self.pending.clear();
    }

    fn finish(mut self) -> Vec<Row> {
        self.flush();
        self.kept
    }
}

fn knob_list(values: &KnobValues) -> Vec<KnobValue> {
    values
        .0
        .iter()
        .map(|(knob, value)| KnobValue {
            knob: knob.clone(),
            value: value.clone(),
        })
        .collect()
}

/// The knobs whose value differs from the attempt before (a knob new in `now` counts as moved
/// from null).
fn changes(before: Option<&KnobValues>, now: &KnobValues) -> Vec<KnobChange> {
    let Some(before) = before else {
        return Vec::new();
    };
    now.0
        .iter()
        .filter_map(|(knob, to)| {
            let from = before
                .0
                .iter()
                .find(|(k, _)| k == knob)
                .map_or(serde_json::Value::Null, |(_, v)| v.clone());
            (from != *to).then(|| KnobChange {
                knob: knob.clone(),
                from,
                to: to.clone(),
            })
        })
        .collect()
}

/// Seconds since the epoch of an RFC 3339 time, if it parses.
fn unix_s(rfc3339: &str) -> Option<f64> {
    let t = humantime::parse_rfc3339_weak(rfc3339).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64())
}

fn build(dir: &Path, summary: SummaryIn, samples: &[Row]) -> RunReport {
    // Time zero: the first attempt's start. summary.json keeps whole seconds, so where the
    // first sample falls within the second after it, the sample (taken at the spawn) is the
    // better clock.
    let first_start = summary.attempts.first().and_then(|a| unix_s(&a.started_at));
    let first_sample = samples.first().map(|r| r.unix_time_s);
    let origin = match (first_start, first_sample) {
        (Some(a), Some(b)) if b >= a && b - a < 1.0 => b,
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(0.0),
    };
    let ms = |t: f64| (t * 1000.0).round() / 1000.0;
    let timeline: Vec<TimelinePoint> = samples
        .iter()
        .map(|r| TimelinePoint {
            // Milliseconds, as samples.csv has them: the JSON round-trips exactly.
            t_s: ms(r.unix_time_s - origin),
            ..r.point
        })
        .collect();
    let mut attempts = Vec::with_capacity(summary.attempts.len());
    let mut previous_end = 0.0_f64;
    for (i, a) in summary.attempts.iter().enumerate() {
        let before = i.checked_sub(1).map(|j| &summary.attempts[j].knobs);
        let mut own = timeline.iter().filter(|p| p.attempt == a.attempt);
        let first = own.next().map(|p| p.t_s);
        let last = own.next_back().map(|p| p.t_s).or(first);
        // An attempt starts at its first sample, else at its recorded start, never before
        // the one before it ended; it ends after its duration, never before its last sample.
        let start = first
            .or_else(|| unix_s(&a.started_at).map(|s| s - origin))
            .unwrap_or(previous_end)
            .max(previous_end);
        let end = (start + a.duration_s.max(0.0)).max(last.unwrap_or(0.0));
        previous_end = end;
        attempts.push(AttemptReport {
            attempt: a.attempt,
            knobs: knob_list(&a.knobs),
            changes: changes(before, &a.knobs),
            cause: a.cause.clone(),
            evidence: a.evidence.clone(),
            exit_code: a.exit_code,
            signal: a.signal,
            started_at: a.started_at.clone(),
            duration_s: a.duration_s,
            start_s: ms(start),
            end_s: ms(end),
            peaks: a.peaks,
        });
    }
    let fit = summary.attempts.iter().rev().find(|a| a.cause == "ok");
    RunReport {
        run_dir: dir.display().to_string(),
        outcome: summary.outcome,
        command: summary.command,
        job: summary.job,
        limits: summary.limits.unwrap_or_default(),
        fit_attempt: fit.map(|a| a.attempt),
        fit_knobs: fit.map(|a| knob_list(&a.knobs)).unwrap_or_default(),
        attempts,
        timeline,
    }
}

fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn or_dash(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), human_bytes)
}

impl AttemptReport {
    /// `batch 32→16, accum 2→4`, or `-` when nothing moved.
    pub fn change_text(&self) -> String {
        if self.changes.is_empty() {
            return "-".into();
        }
        self.changes
            .iter()
            .map(|c| format!("{} {}→{}", c.knob, value_text(&c.from), value_text(&c.to)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn exit_text(&self) -> String {
        match (self.exit_code, self.signal) {
            (Some(code), _) => code.to_string(),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => "-".into(),
        }
    }

    fn duration_text(&self) -> String {
        crate::console::short_duration(std::time::Duration::from_secs_f64(self.duration_s.max(0.0)))
    }

    /// The table's cells, in [`COLUMNS`] order.
    fn cells(&self) -> Vec<String> {
        let p = &self.peaks;
        vec![
            self.attempt.to_string(),
            self.change_text(),
            self.cause.clone(),
            self.exit_text(),
            self.duration_text(),
            or_dash(p.peak_rss_bytes),
            or_dash(p.peak_pss_bytes),
            or_dash(p.peak_swap_bytes),
            or_dash(p.peak_gpu_bytes),
            or_dash(p.peak_cgroup_bytes),
        ]
    }
}

/// The attempts table's header.
const COLUMNS: [&str; 10] = [
    "attempt",
    "knobs moved",
    "cause",
    "exit",
    "duration",
    "RSS",
    "PSS",
    "swap",
    "GPU",
    "cgroup",
];

/// `batch=16 accum=4`.
fn knobs_text(knobs: &[KnobValue]) -> String {
    knobs
        .iter()
        .map(|k| format!("{}={}", k.knob, value_text(&k.value)))
        .collect::<Vec<_>>()
        .join(" ")
}

impl RunReport {
    /// The closing line: what fit, or how the run ended without a fit.
    pub fn result_line(&self) -> String {
        match self.fit_attempt {
            Some(n) if self.fit_knobs.is_empty() => {
                format!("result: {}; attempt {n} succeeded", self.outcome)
            }
            Some(n) => format!(
                "result: {}; attempt {n} fit with {}",
                self.outcome,
                knobs_text(&self.fit_knobs)
            ),
            None => format!(
                "result: {}; no attempt fit ({} attempt{})",
                self.outcome,
                self.attempts.len(),
                if self.attempts.len() == 1 { "" } else { "s" }
            ),
        }
    }

    /// The terminal report: a heading, the attempts table with peaks (PSS/RSS of the process
    /// tree, swap, GPU, the cgroup's high-water mark), each attempt's evidence, the result.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "run {}", self.run_dir);
        let _ = writeln!(out, "command: {}", self.command.join(" "));
        let limits = self.limits.describe();
        if !limits.is_empty() {
            let _ = writeln!(out, "limits: {}", limits.join(", "));
        }
        out.push('\n');
        let mut rows = vec![COLUMNS.map(String::from).to_vec()];
        rows.extend(self.attempts.iter().map(AttemptReport::cells));
        let widths: Vec<usize> = (0..COLUMNS.len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, &w))| {
                    // Knobs and cause are text (left); numbers and sizes right-aligned.
                    let pad = w.saturating_sub(cell.chars().count());
                    if matches!(i, 1 | 2) {
                        format!("{cell}{}", " ".repeat(pad))
                    } else {
                        format!("{}{cell}", " ".repeat(pad))
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", line.join("  ").trim_end());
        }
        out.push('\n');
        for a in &self.attempts {
            let _ = writeln!(
                out,
                "attempt {} ({}): {}: {}",
                a.attempt,
                knobs_text(&a.knobs),
                a.cause,
                a.evidence
            );
        }
        out.push('\n');
        let _ = writeln!(out, "{}", self.result_line());
        out
    }

    /// The `--json` document.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data: it always encodes")
    }

    /// The self-contained HTML page: the chart inlined as SVG, then the table. No script, no
    /// external resource.
    pub fn html(&self) -> String {
        let mut out = String::new();
        let title = format!("oomguard report: {}", self.command.join(" "));
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{}</title>\n<style>\
             body{{font-family:sans-serif;margin:1.5em;color:#222;background:#fff}}\
             table{{border-collapse:collapse;margin-top:1em}}\
             th,td{{border:1px solid #bbb;padding:.25em .6em;text-align:right;vertical-align:top}}\
             td.t,th.t{{text-align:left}} code{{font-size:90%}}\
             </style></head><body>\n<h1>oomguard report</h1>\n<p><code>{}</code></p>\n<p>{}</p>\n",
            escape(&title),
            escape(&self.command.join(" ")),
            escape(&format!(
                "{} — run directory {}",
                self.result_line(),
                self.run_dir
            )),
        );
        out.push_str(&self.svg());
        out.push_str("\n<table>\n<tr>");
        for (i, c) in COLUMNS.iter().enumerate() {
            let class = if matches!(i, 1 | 2) {
                " class=\"t\""
            } else {
                ""
            };
            let _ = write!(out, "<th{class}>{}</th>", escape(c));
        }
        out.push_str("<th class=\"t\">evidence</th></tr>\n");
        for a in &self.attempts {
            out.push_str("<tr>");
            for (i, cell) in a.cells().iter().enumerate() {
                let class = if matches!(i, 1 | 2) {
                    " class=\"t\""
                } else {
                    ""
                };
                let _ = write!(out, "<td{class}>{}</td>", escape(cell));
            }
            let _ = writeln!(out, "<td class=\"t\">{}</td></tr>", escape(&a.evidence));
        }
        out.push_str("</table>\n</body></html>\n");
        out
    }

    /// The chart: memory over time across all attempts, the limits as horizontal lines, a
    /// marker and label at each death and relaunch.
    pub fn svg(&self) -> String {
        let mut svg = String::new();
        if let Err(e) = self.draw(&mut svg) {
            // Drawing into a string fails only on a plotting bug; the page keeps its table.
            tracing::warn!("cannot draw the memory chart: {e}");
            return "<p>(no chart: drawing failed)</p>".into();
        }
        svg
    }

    fn draw(&self, svg: &mut String) -> Result<(), Box<dyn std::error::Error + '_>> {
        use plotters::prelude::*;
        use plotters::style::text_anchor::{HPos, Pos, VPos};

        const SIZE: (u32, u32) = (1100, 520);
        let span_s = self
            .attempts
            .iter()
            .map(|a| a.end_s)
            .chain(self.timeline.iter().map(|p| p.t_s))
            .fold(1.0_f64, f64::max);
        let (unit, per_unit) = time_unit(span_s);
        let x_max = span_s / per_unit * 1.02;

        let series: [(&str, RGBColor, Reading); 4] = [
            ("tree memory (PSS, else RSS)", RGBColor(31, 119, 180), |p| {
                p.tree_bytes()
            }),
            ("cgroup usage", RGBColor(44, 160, 44), |p| p.cgroup_bytes),
            ("swap", RGBColor(255, 127, 14), |p| {
                p.swap_bytes.filter(|s| *s > 0)
            }),
            ("GPU", RGBColor(148, 103, 189), |p| p.gpu_bytes),
        ];
        let red = RGBColor(214, 39, 40);
        let limits: Vec<(String, u64, RGBColor)> = [
            ("--memory-max", self.limits.memory_max_bytes, red),
            ("--max-rss", self.limits.max_rss_bytes, red),
            ("--max-gpu", self.limits.max_gpu_bytes, red),
            // The card itself, in the GPU line's colour: what a device OOM ran into.
            (
                "GPU capacity",
                self.limits.gpu_total_bytes,
                RGBColor(148, 103, 189),
            ),
        ]
        .into_iter()
        .filter_map(|(flag, v, colour)| {
            v.map(|v| (format!("limit {flag} {}", human_bytes(v)), v, colour))
        })
        .collect();
        let peak_seen = self
            .timeline
            .iter()
            .flat_map(|p| series.iter().filter_map(move |s| (s.2)(p)))
            .chain(limits.iter().map(|l| l.1))
            .chain(self.attempts.iter().filter_map(|a| a.peaks.memory_bytes()))
            .max()
            .unwrap_or(1 << 20);
        // The axis counts in one binary unit, so its ticks fall on round numbers of it.
        let (y_unit, per_y_unit) = size_unit(peak_seen);
        let y_max = (peak_seen as f64 * 1.25 / per_y_unit).max(1.0);

        {
            let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption("memory over time, all attempts", ("sans-serif", 22))
                .margin(12)
                .x_label_area_size(45)
                .y_label_area_size(80)
                .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
            let x_fmt = |v: &f64| format!("{v:.1}");
            let y_fmt = |v: &f64| format!("{v} {y_unit}");
            chart
                .configure_mesh()
                .x_desc(format!("time since the first attempt started ({unit})"))
                .y_desc("memory")
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .light_line_style(RGBColor(238, 238, 238))
                // One faint line between labelled ones: ten made the grid louder than the data.
                .max_light_lines(1)
                .draw()?;

            for (name, colour, value) in series {
                let mut labelled = false;
                for a in &self.attempts {
                    let line: Vec<(f64, f64)> = self
                        .timeline
                        .iter()
                        .filter(|p| p.attempt == a.attempt)
                        .filter_map(|p| value(p).map(|v| (p.t_s / per_unit, v as f64 / per_y_unit)))
                        .collect();
                    if line.is_empty() {
                        continue;
                    }
                    // A day at 1s is 86,400 samples an attempt: keep what a pixel column shows.
                    let line = thin(line, x_max / CHART_COLUMNS);
                    let dots = line.len() <= MAX_DOTS;
                    // One segment per attempt: no line across a death and relaunch.
                    let drawn =
                        chart.draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))?;
                    if !labelled {
                        drawn.label(name).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                        });
                        labelled = true;
                    }
                    if dots {
                        chart.draw_series(PointSeries::of_element(
                            line,
                            2,
                            colour.filled(),
                            &|c, s, st| Circle::new(c, s, st),
                        ))?;
                    }
                }
            }
            for (label, bytes, colour) in &limits {
                let y = *bytes as f64 / per_y_unit;
                let colour = *colour;
                chart
                    .draw_series(LineSeries::new(
                        vec![(0.0, y), (x_max, y)],
                        colour.stroke_width(1),
                    ))?
                    .label(label.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(1))
                    });
            }
            // A marker at each attempt's end: the cause, and the knobs the next one moved.
            let marker = RGBColor(90, 90, 90);
            for (i, a) in self.attempts.iter().enumerate() {
                let x = a.end_s / per_unit;
                let mut label = format!("#{} {}", a.attempt, a.cause);
                if let Some(next) = self.attempts.get(i + 1) {
                    if !next.changes.is_empty() {
                        let _ = write!(label, "; {}", next.change_text());
                    } else {
                        label.push_str("; relaunched unchanged");
                    }
                }
                chart.draw_series(LineSeries::new(
                    vec![(x, 0.0), (x, y_max * 0.97)],
                    marker.stroke_width(1),
                ))?;
                // Labels step down the chart so the ends of short attempts do not overwrite
                // each other.
                let y = y_max * (0.95 - 0.06 * (i % 6) as f64);
                chart.draw_series(std::iter::once(Circle::new(
                    (x, y_max * 0.97),
                    4,
                    marker.filled(),
                )))?;
                // Right of the marker, or left of it in the chart's last third, so it stays inside.
                let anchor = if x > x_max * 0.66 {
                    Pos::new(HPos::Right, VPos::Top)
                } else {
                    Pos::new(HPos::Left, VPos::Top)
                };
                let style = ("sans-serif", 13).into_font().color(&BLACK).pos(anchor);
                chart.draw_series(std::iter::once(Text::new(
                    format!(" {label} "),
                    (x, y),
                    style,
                )))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(180, 180, 180))
                .draw()?;
            root.present()?;
        }
        Ok(())
    }
}

/// The time axis unit for a span: seconds up to 2 minutes, minutes up to 3 hours, else hours.
fn time_unit(span_s: f64) -> (&'static str, f64) {
    if span_s <= 120.0 {
        ("s", 1.0)
    } else if span_s <= 3.0 * 3600.0 {
        ("min", 60.0)
    } else {
        ("h", 3600.0)
    }
}

/// How the chart reads one series from a sample.
type Reading = fn(&TimelinePoint) -> Option<u64>;

/// The unit of the memory axis for a peak: KiB, MiB or GiB, whichever keeps the numbers
/// between 1 and a few thousand.
fn size_unit(peak_bytes: u64) -> (&'static str, f64) {
    if peak_bytes >= 2 << 30 {
        ("GiB", (1u64 << 30) as f64)
    } else if peak_bytes >= 2 << 20 {
        ("MiB", (1u64 << 20) as f64)
    } else {
        ("KiB", 1024.0)
    }
}

/// Text for HTML element content and attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes `report.html` into a run directory at the end of a run, from the run's own
/// summary.json text (so a summary.json the disk refused still makes a page); returns its path.
/// A page cut short (a full disk) is removed.
///
/// `files` is the directory to read and write in (a run's pinned `/proc/self/fd/N`), `dir` the
/// one to name on the page and in messages.
pub fn write_html(files: &Path, dir: &Path, summary_json: &[u8]) -> Result<PathBuf, String> {
    let text = String::from_utf8_lossy(summary_json);
    let mut report = for_chart(files, &text)?;
    report.run_dir = dir.display().to_string();
    let shown = dir.join("report.html");
    let path = files.join("report.html");
    // Created, never replaced: the run directory was checked free of it before the run, so
    // one there now is someone else's file.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("cannot create {}: {e}", shown.display()))?;
    if let Err(e) = std::io::Write::write_all(&mut file, report.html().as_bytes()) {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(format!("cannot write {}: {e}", shown.display()));
    }
    Ok(shown)
}

/// How many columns of the chart's width the timeline is thinned to.
const CHART_COLUMNS: f64 = 1000.0;

/// A dot for each sample only while they are few enough to tell apart.
const MAX_DOTS: usize = 300;

/// `line` (in time order) with, for each column `column_width` wide, only its lowest and
/// highest points, in their order: the drawn shape is the same at the chart's resolution,
/// peaks included, while the page stays small however long the run.
fn thin(line: Vec<(f64, f64)>, column_width: f64) -> Vec<(f64, f64)> {
    if column_width <= 0.0 || line.len() <= 2 * CHART_COLUMNS as usize {
        return line;
    }
    let column = |p: &(f64, f64)| (p.0 / column_width).floor();
    let mut out = Vec::new();
    let mut start = 0;
    while start < line.len() {
        let key = column(&line[start]);
        let (mut low, mut high, mut end) = (start, start, start);
        while end < line.len() && column(&line[end]) == key {
            if line[end].1 < line[low].1 {
                low = end;
            }
            if line[end].1 > line[high].1 {
                high = end;
            }
            end += 1;
        }
        out.push(line[low.min(high)]);
        if low != high {
            out.push(line[low.max(high)]);
        }
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_timeline_is_thinned_to_the_columns_keeping_peaks() {
        // Two days at 1s, flat at 1.0 with one spike to 9.0 and one dip to 0.0.
        let mut line: Vec<(f64, f64)> = (0..172_800).map(|t| (t as f64, 1.0)).collect();
        line[100_000].1 = 9.0;
        line[50_000].1 = 0.0;
        let thinned = thin(line.clone(), 172_800.0 / CHART_COLUMNS);
        assert!(
            thinned.len() <= 2 * CHART_COLUMNS as usize + 2,
            "{}",
            thinned.len()
        );
        assert!(thinned.contains(&(100_000.0, 9.0)) && thinned.contains(&(50_000.0, 0.0)));
        assert!(
            thinned.windows(2).all(|w| w[0].0 < w[1].0),
            "time order kept"
        );
        // A short one is left as it is.
        assert_eq!(thin(line[..500].to_vec(), 1.0), line[..500].to_vec());
    }

    fn knobs(pairs: &[(&str, serde_json::Value)]) -> KnobValues {
        KnobValues(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn changes_list_old_and_new_values_of_moved_knobs_only() {
        use serde_json::json;
        type Moves = Vec<(&'static str, serde_json::Value, serde_json::Value)>;
        let table: [(Option<KnobValues>, KnobValues, Moves); 4] = [
            (None, knobs(&[("batch", json!(32))]), vec![]),
            (
                Some(knobs(&[("batch", json!(32)), ("accum", json!(1))])),
                knobs(&[("batch", json!(16)), ("accum", json!(2))]),
                vec![
                    ("batch", json!(32), json!(16)),
                    ("accum", json!(1), json!(2)),
                ],
            ),
            (
                Some(knobs(&[("batch", json!(8)), ("fp16", json!(false))])),
                knobs(&[("batch", json!(8)), ("fp16", json!(true))]),
                vec![("fp16", json!(false), json!(true))],
            ),
            (
                Some(knobs(&[("batch", json!(8))])),
                knobs(&[("batch", json!(8)), ("workers", json!(2))]),
                vec![("workers", json!(null), json!(2))],
            ),
        ];
        for (before, now, want) in table {
            let got: Vec<(String, serde_json::Value, serde_json::Value)> =
                changes(before.as_ref(), &now)
                    .into_iter()
                    .map(|c| (c.knob, c.from, c.to))
                    .collect();
            let want: Vec<_> = want
                .into_iter()
                .map(|(k, f, t)| (k.to_string(), f, t))
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn samples_parse_by_header_name_and_skip_broken_rows() {
        let csv = "unix_time,attempt,tree_rss_bytes,tree_pss_bytes,tree_swap_bytes,sys_available_bytes,gpu_used_bytes,cgroup_bytes,extra\n\
                   100.5,1,2048,1024,,9,,4096,x\n\
                   garbage\n\
                   101.5,2,,,,9,77,,\n";
        let mut rows = Vec::new();
        parse_samples(csv.as_bytes(), |row| rows.push(row));
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].unix_time_s, 100.5);
        assert_eq!(rows[0].point.tree_bytes(), Some(1024));
        assert_eq!(rows[0].point.cgroup_bytes, Some(4096));
        assert_eq!(rows[1].point.attempt, 2);
        assert_eq!(rows[1].point.gpu_bytes, Some(77));
        assert_eq!(rows[1].point.tree_bytes(), None);
    }

    #[test]
    fn chart_rows_keep_each_columns_first_row_and_peaks() {
        let row = |t: f64, attempt: u32, rss: u64, gpu: Option<u64>| Row {
            unix_time_s: t,
            point: TimelinePoint {
                t_s: 0.0,
                attempt,
                rss_bytes: Some(rss),
                pss_bytes: None,
                swap_bytes: None,
                gpu_bytes: gpu,
                cgroup_bytes: None,
            },
        };
        // Two days at 1s in 1,000 columns of 172.8 s; a host spike and a GPU spike.
        let mut rows = ChartRows::new(0.0, 172.8);
        for t in 0..172_800u32 {
            let rss = if t == 100_000 { 9_000 } else { 1_000 };
            let gpu = (t == 50_001).then_some(5_000).or(Some(10));
            rows.push(row(f64::from(t), 1, rss, gpu));
        }
        // An attempt boundary inside a column starts a column of its own.
        rows.push(row(172_800.5, 2, 7, None));
        let kept = rows.finish();
        assert!(kept.len() <= 3 * 1_001 + 1, "{}", kept.len());
        assert!(kept.iter().any(|r| r.point.rss_bytes == Some(9_000)));
        assert!(kept.iter().any(|r| r.point.gpu_bytes == Some(5_000)));
        assert!(kept.windows(2).all(|w| w[0].unix_time_s < w[1].unix_time_s));
        assert_eq!(kept.last().map(|r| r.point.attempt), Some(2));
        // A short run keeps every row.
        let mut rows = ChartRows::new(0.0, 0.01);
        for t in 0..50u32 {
            rows.push(row(f64::from(t) * 0.1, 1, 5, None));
        }
        assert_eq!(rows.finish().len(), 50);
    }

    #[test]
    fn time_axis_unit_follows_the_span() {
        let table = [
            (30.0, "s"),
            (120.0, "s"),
            (600.0, "min"),
            (8.0 * 3600.0, "h"),
        ];
        for (span, unit) in table {
            assert_eq!(time_unit(span).0, unit, "{span}");
        }
    }

    #[test]
    fn memory_axis_unit_follows_the_peak() {
        let table = [
            (1 << 20, "KiB"),
            (3 << 20, "MiB"),
            (1 << 30, "MiB"),
            (5 << 30, "GiB"),
        ];
        for (peak, unit) in table {
            assert_eq!(size_unit(peak).0, unit, "{peak}");
        }
    }

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
