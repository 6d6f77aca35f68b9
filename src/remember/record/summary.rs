//! The model of `summary.json`: each attempt's record ([`AttemptRecord`], its knob values and
//! memory peaks), the run's final sizes and limits, and the document's text, laid out one attempt
//! per line and re-encoded only for what changed.
//!
//! It holds and renders data only; the run directory writes it
//! ([`crate::remember::record::run_dir`]) and `oomguard report` reads it back
//! ([`crate::tell::report`]).

use std::time::SystemTime;

use serde::Serialize;

use crate::judge::outcome::{Cause, Outcome};
pub use crate::knobs::values::{FinalSizes, KnobValues};
use crate::observe::sampler::Peaks;
use crate::observe::units::human_bytes;

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
    /// The cards (NVML indices) the job was seen on at its last reading; absent if none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_devices: Vec<u32>,
    /// Set when the batch was cut for the room other processes left on the card, not for the
    /// job's own size (this attempt or an earlier one of the run): what the job alone runs at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room_cut: Option<RoomCut>,
    /// What the probe saw of the job's steps (Python jobs, not `--no-probe`); absent if none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<crate::probe::ProbeRecord>,
}

/// A cut made for room on a shared card: the values the job would run at alone, what it needs
/// there, and the room the cut was fitted into. Kept apart from the job's own size, so a later
/// run grows back once the card has room.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RoomCut {
    /// Every knob's value before the cut: the job's own size.
    pub own: KnobValues,
    /// What the job needs per card at its own size, at least (`None`: unknown).
    pub own_need_gpu_bytes: Option<u64>,
    /// The room left on the card when the cut was made.
    pub room_bytes: u64,
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
    /// The most that other processes (a shared card's neighbours) held on the job's cards.
    #[serde(default)]
    pub peak_gpu_neighbours_bytes: Option<u64>,
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
            peak_gpu_neighbours_bytes: p.gpu_neighbours_bytes,
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn record(
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
            gpu_devices: Vec::new(),
            room_cut: None,
            resumed_from: None,
            hint: None,
            probe: None,
        }
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
}
