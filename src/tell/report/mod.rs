//! `oomguard report RUN_DIR`: the story of a finished (or running) run, read back from its run
//! directory (`summary.json`, `samples.csv`): the attempts table in the terminal, one JSON
//! document (`--json`), or a self-contained HTML page (`--html FILE`, [`html`]) with an SVG chart
//! of memory over time ([`chart`]). `oomguard run` writes the same page as `report.html` into the
//! run directory when it ends. This file loads a run directory into a [`RunReport`] and renders
//! its text and JSON; samples.csv is read by [`samples`]. A job whose Slurm tasks ran on several
//! nodes gets each attempt's peak per node (and per step sstat sums) under its evidence, from
//! the timeline's Slurm parts; a job the probe saw step gets the steps its attempts had taken
//! at a few times, from the timeline's steps.
//!
//! It reads and formats only: what the run directory holds is written by
//! [`crate::remember::record`], and the causes and knob values are the ones the attempt loop
//! recorded.

pub mod chart;
pub mod html;
pub mod samples;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::observe::sampler::SlurmPlace;
use crate::observe::units::human_bytes;
use crate::remember::record::summary::{KnobValues, PeakRecord, RunLimits};
use crate::tell::report::samples::{read_samples, Row, TimelinePoint};

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
    /// What the probe saw of its steps; absent where it saw nothing (or an older run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<crate::probe::ProbeRecord>,
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
    /// What of samples.csv was not read (lines too long skipped, the read stopped at a cap), so
    /// the timeline and chart are known to be partial; absent when every row was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_note: Option<String>,
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
    #[serde(default)]
    probe: Option<crate::probe::ProbeRecord>,
}

/// Reads a run directory into a [`RunReport`].
pub fn load(dir: &Path) -> Result<RunReport, ReportError> {
    if !dir.is_dir() {
        return Err(ReportError::Missing {
            path: dir.to_path_buf(),
        });
    }
    let summary_path = dir.join("summary.json");
    let read = crate::guard::fsutil::read_regular_capped(
        &summary_path,
        crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
    )
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

/// The most samples.csv rows a report holds (its `--json` timeline lists each): two weeks at
/// `--interval 1s`, about 190 MiB in memory (168 bytes a row, and 16 more for each Slurm part,
/// at most [`samples::SLURM_PLACES_MAX`] a row). Past it the timeline stops, with a note.
pub const TIMELINE_ROWS_MAX: usize = 1_200_000;

/// A report from summary.json's text (read from `dir` or handed over by the run that holds it)
/// and `dir`'s samples.csv, every row of it up to [`TIMELINE_ROWS_MAX`].
fn from_summary(dir: &Path, summary_text: &str) -> Result<RunReport, String> {
    let summary: SummaryIn = serde_json::from_str(summary_text).map_err(|e| e.to_string())?;
    let mut samples = Vec::new();
    let read = read_samples(dir, |row| {
        if samples.len() >= TIMELINE_ROWS_MAX {
            return ControlFlow::Break(());
        }
        samples.push(row);
        ControlFlow::Continue(())
    });
    let mut report = build(dir, summary, samples);
    report.samples_note = read.note();
    Ok(report)
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

fn build(dir: &Path, summary: SummaryIn, samples: Vec<Row>) -> RunReport {
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
    // Consumed: the rows' memory becomes the timeline's (collected in place), not a second copy.
    let timeline: Vec<TimelinePoint> = samples
        .into_iter()
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
            probe: a.probe.clone(),
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
        samples_note: None,
    }
}

/// The Slurm places `points` name, sorted (nodes by name, then steps), each once.
fn places_of<'a>(points: impl Iterator<Item = &'a TimelinePoint>) -> Vec<Arc<SlurmPlace>> {
    let mut places: Vec<Arc<SlurmPlace>> = Vec::new();
    for part in points.flat_map(|p| p.slurm_parts.iter()) {
        if !places.contains(&part.place) {
            places.push(Arc::clone(&part.place));
        }
    }
    places.sort();
    places
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
        crate::output::console::short_duration(std::time::Duration::from_secs_f64(
            self.duration_s.max(0.0),
        ))
    }

    /// What the probe saw: `1,204 optimizer steps, 0.41 s/step, 156 samples/s`.
    pub fn steps_text(&self) -> Option<String> {
        let probe = self.probe.as_ref()?;
        let steps = format!(
            "{} optimizer step(s)",
            crate::observe::units::thousands(probe.seen.steps?)
        );
        Some(match probe.pace() {
            Some(pace) => format!("{steps}, {pace}"),
            None => steps,
        })
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

/// How many times of an attempt the report gives its steps at: enough to see them climb (or
/// stall), few enough for one line.
const STEPS_TIMES_SHOWN: usize = 5;

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
    /// tree, swap, GPU, the cgroup's high-water mark), each attempt's evidence (and its peak
    /// per Slurm node where its tasks' memory was read per node), the result.
    pub fn text(&self) -> String {
        use crate::output::console::printable;
        let mut out = String::new();
        // Every line below is one line: escaped whole ([`printable`]), so a newline or an
        // escape sequence in what summary.json holds (its user's to write) stays in its line.
        let mut line = |text: String| {
            out.push_str(&printable(&text));
            out.push('\n');
        };
        line(format!("run {}", self.run_dir));
        line(format!("command: {}", self.command.join(" ")));
        let limits = self.limits.describe();
        if !limits.is_empty() {
            line(format!("limits: {}", limits.join(", ")));
        }
        line(String::new());
        let mut rows = vec![COLUMNS.map(String::from).to_vec()];
        // Cells escaped before they are measured, so the columns line up.
        rows.extend(self.attempts.iter().map(|a| {
            a.cells()
                .iter()
                .map(|c| printable(c).into_owned())
                .collect::<Vec<_>>()
        }));
        let widths: Vec<usize> = (0..COLUMNS.len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let cells: Vec<String> = row
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
            line(cells.join("  ").trim_end().to_string());
        }
        line(String::new());
        for a in &self.attempts {
            line(format!(
                "attempt {} ({}): {}: {}",
                a.attempt,
                knobs_text(&a.knobs),
                a.cause,
                a.evidence
            ));
            if let Some(peaks) = self.slurm_peaks_text(a.attempt) {
                line(format!("  peak per node: {peaks}"));
            }
            if let Some(steps) = a.steps_text() {
                line(format!("  steps: {steps}"));
            }
            if let Some(steps) = self.steps_over_time_text(a) {
                line(format!("  steps over time: {steps}"));
            }
        }
        if let Some(compared) = self.throughput_text() {
            line(format!("samples/s by setting: {compared}"));
        }
        line(String::new());
        if let Some(note) = &self.samples_note {
            line(format!("note: {note}"));
        }
        line(self.result_line());
        out
    }

    /// The samples a second of each setting the probe measured, where it measured two or more:
    /// `batch=32 accum=1: 156 (attempt 1); batch=16 accum=2: 141 (attempt 2); fastest batch=32
    /// accum=1` (knobs in summary.json's order). A setting run twice shows its latest attempt's.
    pub(crate) fn throughput_text(&self) -> Option<String> {
        let mut settings: Vec<(String, f64, u32)> = Vec::new();
        for a in &self.attempts {
            let Some(rate) = a.probe.as_ref().and_then(|p| p.samples_per_second) else {
                continue;
            };
            let knobs = knobs_text(&a.knobs);
            match settings.iter_mut().find(|(k, _, _)| *k == knobs) {
                Some(seen) => (seen.1, seen.2) = (rate, a.attempt),
                None => settings.push((knobs, rate, a.attempt)),
            }
        }
        if settings.len() < 2 {
            return None;
        }
        let (fastest, _, _) = settings.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
        let each: Vec<String> = settings
            .iter()
            .map(|(knobs, rate, attempt)| {
                format!(
                    "{knobs}: {} (attempt {attempt})",
                    crate::observe::units::rate(*rate)
                )
            })
            .collect();
        Some(format!("{}; fastest {fastest}", each.join("; ")))
    }

    /// The Slurm places the timeline names, in order (nodes by name, then steps), each once.
    pub(crate) fn slurm_places(&self) -> Vec<Arc<SlurmPlace>> {
        places_of(self.timeline.iter())
    }

    /// `n1 1.0 GiB, n2 3.0 GiB, step 12.0 (all nodes, sstat) 5.0 GiB`: the highest each Slurm
    /// place held in `attempt`'s samples, in [`RunReport::slurm_places`]' order; `None` for an
    /// attempt without Slurm parts.
    pub(crate) fn slurm_peaks_text(&self, attempt: u32) -> Option<String> {
        let own: Vec<&TimelinePoint> = self
            .timeline
            .iter()
            .filter(|p| p.attempt == attempt && !p.slurm_parts.is_empty())
            .collect();
        if own.is_empty() {
            return None;
        }
        let peaks: Vec<String> = places_of(own.iter().copied())
            .iter()
            .filter_map(|place| {
                let peak = own.iter().filter_map(|p| p.slurm_bytes(place)).max()?;
                Some(match &**place {
                    SlurmPlace::Node(name) => format!("{name} {}", human_bytes(peak)),
                    SlurmPlace::Step(step) => {
                        format!("step {step} (all nodes, sstat) {}", human_bytes(peak))
                    }
                })
            })
            .collect();
        Some(peaks.join(", "))
    }

    /// `2 at 1.2s, 40 at 30.0s, 1,204 at 2m05s`: the steps `attempt`'s job had taken at up to
    /// [`STEPS_TIMES_SHOWN`] of its samples spread evenly over them (first and last among them),
    /// timed from the attempt's start; `None` where no sample has steps (no probe, or a
    /// samples.csv from before the column).
    pub(crate) fn steps_over_time_text(&self, attempt: &AttemptReport) -> Option<String> {
        let own: Vec<(f64, u64)> = self
            .timeline
            .iter()
            .filter(|p| p.attempt == attempt.attempt)
            .filter_map(|p| Some((p.t_s, p.steps?)))
            .collect();
        let last = own.len().checked_sub(1)?;
        let shown = own.len().min(STEPS_TIMES_SHOWN);
        let mut picked: Vec<usize> = (0..shown)
            .map(|i| (i * last).checked_div(shown - 1).unwrap_or(0))
            .collect();
        picked.dedup();
        let times: Vec<String> = picked
            .into_iter()
            .map(|i| {
                let (t_s, steps) = own[i];
                let since = std::time::Duration::from_secs_f64((t_s - attempt.start_s).max(0.0));
                format!(
                    "{} at {}",
                    crate::observe::units::thousands(steps),
                    crate::output::console::short_duration(since)
                )
            })
            .collect();
        Some(times.join(", "))
    }

    /// The `--json` document.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data: it always encodes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(pairs: &[(&str, serde_json::Value)]) -> KnobValues {
        KnobValues(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn the_text_carries_no_control_character_of_summary_json() {
        let evil = "\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{9b}1m\nfake line";
        let summary = serde_json::json!({
            "outcome": evil,
            "command": [evil],
            "job": evil,
            "attempts": [{
                "attempt": 1,
                "knobs": {"alloc": evil},
                "cause": evil,
                "evidence": evil,
                "exit_code": 1,
                "signal": null,
            }],
        });
        let dir = tempfile::tempdir().unwrap();
        let report = from_summary(dir.path(), &summary.to_string()).unwrap();
        let text = report.text();
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
        assert!(
            !text.contains("\nfake line"),
            "a value broke its line: {text}"
        );
        assert!(text.contains("\\u{1b}]0;PWNED\\u{7}"), "{text}");
        let json = crate::output::console::json_printable(&report.json()).into_owned();
        assert!(!json.chars().any(|c| c.is_control() && c != '\n'), "{json}");
        assert!(!json.contains('\u{9b}'), "{json}");
    }

    #[test]
    fn each_attempt_of_a_slurm_job_shows_its_peak_per_node() {
        let summary = serde_json::json!({
            "outcome": "succeeded",
            "command": ["srun", "-N", "2", "python3"],
            "attempts": [
                {"attempt": 1, "cause": "host_oom", "exit_code": 1, "signal": null},
                {"attempt": 2, "cause": "ok", "exit_code": 0, "signal": null},
                {"attempt": 3, "cause": "ok", "exit_code": 0, "signal": null},
            ],
        });
        let gib = 1u64 << 30;
        let csv = format!(
            "unix_time,attempt,tree_rss_bytes,slurm_parts\n\
             1.0,1,5,node:n2={};node:n1={}\n\
             2.0,1,5,node:n2={};node:n1={};step:12.0={}\n\
             3.0,2,5,node:n1={gib}\n\
             4.0,3,5,\n",
            3 * gib,
            gib / 2,
            gib,
            gib,
            5 * gib,
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("samples.csv"), csv).unwrap();
        let report = from_summary(dir.path(), &summary.to_string()).unwrap();
        // (attempt, its peaks: each place's highest, nodes by name, then steps)
        let table: [(u32, Option<&str>); 3] = [
            (
                1,
                Some("n1 1.0 GiB, n2 3.0 GiB, step 12.0 (all nodes, sstat) 5.0 GiB"),
            ),
            (2, Some("n1 1.0 GiB")),
            (3, None),
        ];
        let text = report.text();
        let html = report.html();
        for (attempt, want) in table {
            assert_eq!(
                report.slurm_peaks_text(attempt).as_deref(),
                want,
                "{attempt}"
            );
            if let Some(want) = want {
                assert!(
                    text.contains(&format!("\n  peak per node: {want}\n")),
                    "{text}"
                );
                assert!(
                    html.contains(&format!("<p>attempt {attempt}, peak per node: {want}</p>")),
                    "{html}"
                );
            }
        }
        assert_eq!(text.matches("peak per node").count(), 2, "{text}");
        // A run without Slurm parts: no such line.
        std::fs::write(dir.path().join("samples.csv"), "unix_time,attempt\n1.0,1\n").unwrap();
        let plain = from_summary(dir.path(), &summary.to_string()).unwrap();
        assert!(!plain.text().contains("peak per node"));
        assert!(!plain.html().contains("peak per node"));
    }

    /// Settings compared by their samples a second where the probe measured two or more; a
    /// setting run twice counts its latest attempt.
    #[test]
    fn the_settings_the_probe_measured_are_compared_by_samples_a_second() {
        let attempt = |n: u32, batch: u64, rate: Option<f64>| {
            let probe = rate.map(|r| serde_json::json!({"steps": 10, "samples_per_second": r}));
            serde_json::json!({"attempt": n, "cause": "device_oom", "exit_code": 1, "signal": null,
                "knobs": {"batch": batch, "accum": 64 / batch}, "probe": probe})
        };
        let report = |attempts: Vec<serde_json::Value>| {
            let summary = serde_json::json!({"outcome": "succeeded", "command": ["python3", "t.py"],
                "attempts": attempts});
            let dir = tempfile::tempdir().unwrap();
            from_summary(dir.path(), &summary.to_string()).unwrap()
        };
        // (attempts, the comparison)
        let table = [
            (vec![attempt(1, 64, Some(900.0)), attempt(2, 32, None)], None),
            (
                vec![attempt(1, 64, Some(900.0)), attempt(2, 32, Some(1234.5))],
                Some("accum=1 batch=64: 900 (attempt 1); accum=2 batch=32: 1,235 (attempt 2); fastest accum=2 batch=32"),
            ),
            (
                vec![attempt(1, 64, Some(900.0)), attempt(2, 32, Some(1000.0)), attempt(3, 64, Some(1100.0))],
                Some("accum=1 batch=64: 1,100 (attempt 3); accum=2 batch=32: 1,000 (attempt 2); fastest accum=1 batch=64"),
            ),
        ];
        for (attempts, want) in table {
            let report = report(attempts);
            assert_eq!(report.throughput_text().as_deref(), want);
            let line = want.map(|w| format!("\nsamples/s by setting: {w}\n"));
            assert_eq!(
                line.is_some_and(|l| report.text().contains(&l)),
                want.is_some(),
                "{}",
                report.text()
            );
            let p = want.map(|w| format!("<p>samples/s by setting: {w}</p>"));
            assert_eq!(
                p.is_some_and(|p| report.html().contains(&p)),
                want.is_some()
            );
        }
    }

    #[test]
    fn each_attempt_the_probe_saw_step_shows_its_steps_over_time() {
        let summary = serde_json::json!({
            "outcome": "succeeded",
            "command": ["python3", "train.py"],
            "attempts": [
                {"attempt": 1, "cause": "device_oom", "exit_code": 1, "signal": null},
                {"attempt": 2, "cause": "ok", "exit_code": 0, "signal": null},
                {"attempt": 3, "cause": "ok", "exit_code": 0, "signal": null},
            ],
        });
        // Attempt 1 steps in 7 of its 8 samples (5 of them shown, spread evenly), attempt 2 in
        // one of its two, attempt 3 never.
        let mut csv = String::from("unix_time,attempt,tree_rss_bytes,slurm_parts,steps\n");
        for (t, steps) in [(100, ""), (101, "2"), (102, "4"), (103, "6"), (104, "8")] {
            csv.push_str(&format!("{t}.0,1,5,,{steps}\n"));
        }
        for (t, steps) in [(105, "10"), (106, "1200"), (167, "1204")] {
            csv.push_str(&format!("{t}.0,1,5,,{steps}\n"));
        }
        csv.push_str("170.0,2,5,,\n171.5,2,5,,3\n172.0,3,5,,\n");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("samples.csv"), &csv).unwrap();
        let report = from_summary(dir.path(), &summary.to_string()).unwrap();
        // (attempt, its steps over time)
        let table: [(u32, Option<&str>); 3] = [
            (
                1,
                Some("2 at 1.0s, 4 at 2.0s, 8 at 4.0s, 10 at 5.0s, 1,204 at 1m07s"),
            ),
            (2, Some("3 at 1.5s")),
            (3, None),
        ];
        let (text, html) = (report.text(), report.html());
        for (attempt, want) in table {
            let a = &report.attempts[attempt as usize - 1];
            assert_eq!(report.steps_over_time_text(a).as_deref(), want, "{attempt}");
            if let Some(want) = want {
                let line = format!("\n  steps over time: {want}\n");
                assert!(text.contains(&line), "{text}");
                let p = format!("<p>attempt {attempt}, steps over time: {want}</p>");
                assert!(html.contains(&p), "{html}");
            }
        }
        assert_eq!(text.matches("steps over time").count(), 2, "{text}");
        let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(json["timeline"][1]["steps"], 2);
        assert!(json["timeline"][0].get("steps").is_none(), "no step yet");

        // The same run without the column (an older oomguard's): as it always read.
        let old: String = csv
            .lines()
            .map(|l| format!("{}\n", &l[..l.rfind(',').unwrap()]))
            .collect();
        std::fs::write(dir.path().join("samples.csv"), old).unwrap();
        let plain = from_summary(dir.path(), &summary.to_string()).unwrap();
        assert_eq!(plain.timeline.len(), report.timeline.len());
        assert!(plain.timeline.iter().all(|p| p.steps.is_none()));
        assert!(!plain.text().contains("steps over time"));
        assert!(!plain.html().contains("steps over time"));
        assert!(!plain.json().contains("\"steps\""));
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
}
