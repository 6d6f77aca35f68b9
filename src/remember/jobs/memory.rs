//! The job file's format: what one job's `NAME.json` holds ([`JobMemory`]: the knob values of
//! the last success, every attempt seen, the latest run), its version, and reading its bytes
//! ([`parse`]), a file that is not a job file told apart from one of a newer format
//! ([`Unusable`]). It touches no file: reading, locking, writing and moving aside are
//! [`super::store`]'s.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::decide::fit::StepsPeak;
use crate::guard::liveness::ProcessId;
use crate::judge::outcome::Cause;
use crate::judge::outcome::Outcome;
use crate::knobs::Value;
use crate::probe::ProbeSummary;
use crate::remember::record::summary::{AttemptRecord, KnobValues, PeakRecord, RoomCut};

/// The format this build writes and reads. A file with a higher one is moved aside, never
/// overwritten by a format that would drop what it holds.
pub const FORMAT_VERSION: u64 = 1;

/// The most attempts one job's file keeps (the newest): enough points for any estimate, and a
/// file that stays small however often the job runs.
pub const ATTEMPTS_KEPT: usize = 256;

/// One job's file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobMemory {
    pub version: u64,
    pub name: String,
    /// The command of the last run, knob values blanked.
    #[serde(default)]
    pub command: Vec<String>,
    /// The working directory of the last run.
    #[serde(default)]
    pub cwd: String,
    /// The knob values of the last attempt that succeeded.
    #[serde(default)]
    pub last_success: Option<LastSuccess>,
    /// Every attempt seen, oldest first (the newest [`ATTEMPTS_KEPT`]).
    #[serde(default)]
    attempts: Vec<PastAttempt>,
    /// The job's latest run: under way, or how it ended (`oomguard status` reads it). A record
    /// this build cannot read (from a newer one) is dropped, not the whole file.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_run"
    )]
    pub run: Option<CurrentRun>,
}

/// `run` as [`CurrentRun`] if it reads as one, else nothing: the rest of the file stays usable.
fn lenient_run<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<CurrentRun>, D::Error> {
    let raw = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(raw.and_then(|raw| serde_json::from_value(raw).ok()))
}

/// Where a job's latest run stands, as its oomguard last wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// An attempt is running.
    Running,
    /// Between attempts: the next one's values are decided, its backoff is being waited.
    Waiting,
    /// Ended, with this outcome.
    Succeeded,
    GaveUp,
    Failed,
    Interrupted,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Waiting => "waiting",
            RunState::Succeeded => Outcome::Succeeded.as_str(),
            RunState::GaveUp => Outcome::GaveUp.as_str(),
            RunState::Failed => Outcome::Failed.as_str(),
            RunState::Interrupted => Outcome::Interrupted.as_str(),
        }
    }

    /// Running or waiting: its oomguard has not written an end.
    pub fn under_way(self) -> bool {
        matches!(self, RunState::Running | RunState::Waiting)
    }
}

impl From<Outcome> for RunState {
    fn from(outcome: Outcome) -> RunState {
        match outcome {
            Outcome::Succeeded => RunState::Succeeded,
            Outcome::GaveUp => RunState::GaveUp,
            Outcome::Failed => RunState::Failed,
            Outcome::Interrupted => RunState::Interrupted,
        }
    }
}

/// A job's latest run: whose oomguard runs it, where it stands, and the attempt in progress
/// (while running: the attempt running; while waiting: the one about to start; once ended:
/// the last one). Rewritten on every change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurrentRun {
    /// The oomguard running it, named so that a reused PID is not taken for it.
    #[serde(flatten)]
    pub process: ProcessId,
    pub run_dir: String,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub state: RunState,
    pub attempt: u32,
    pub knobs: KnobValues,
    /// The run's command, knob values blanked ([`command_shape`]): a run continues this one
    /// only with the same command (none: written by an older build, taken as the same).
    ///
    /// [`command_shape`]: super::name::command_shape
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The cause of the last attempt that ended in this run, as [`Cause::as_str`] spells it.
    #[serde(default)]
    pub last_cause: Option<String>,
    /// That attempt's memory peaks.
    #[serde(default)]
    pub peaks: Option<PeakRecord>,
    /// RFC 3339 UTC, once ended.
    #[serde(default)]
    pub ended_at: Option<String>,
    /// While waiting for room on a shared card: what for (`waiting for 57.2 GiB free on
    /// GPU 0 before attempt 2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// While an attempt runs: the optimizer steps its job had taken when last written (the
    /// probe's, [`crate::probe`]), and their pace in seconds per step. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_per_step: Option<f64>,
}

impl JobMemory {
    /// Every attempt of earlier runs (and of this one, once recorded), oldest first: points
    /// for an estimate of the job's memory at each size.
    pub fn attempts(&self) -> &[PastAttempt] {
        &self.attempts
    }

    pub fn last_success(&self) -> Option<&LastSuccess> {
        self.last_success.as_ref()
    }

    /// Adds an attempt, dropping the oldest beyond [`ATTEMPTS_KEPT`].
    pub fn push(&mut self, attempt: PastAttempt) {
        self.attempts.push(attempt);
        let extra = self.attempts.len().saturating_sub(ATTEMPTS_KEPT);
        self.attempts.drain(..extra);
    }
}

/// The attempt that last succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastSuccess {
    /// When it started, RFC 3339 UTC.
    pub at: String,
    /// Its run directory.
    pub run: String,
    /// Every knob's value, by name, typed as in summary.json.
    pub knobs: KnobValues,
    /// Set when these values were cut for a shared card's room: the job's own size, apart.
    /// (A build that does not know it starts from `knobs`, the size that worked.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room_cut: Option<RoomCut>,
    /// Set when these values are the job's own size and an earlier run, on a card short of
    /// room, worked at a smaller one: that size, for a later run to start from while the card
    /// is short again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room_limited: Option<RoomLimited>,
}

/// A size that worked on a card short of room, kept beside the job's own size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomLimited {
    /// Every knob's value of that size.
    pub knobs: KnobValues,
    /// The cut it came from: the job's own size, its need there, the room.
    pub cut: RoomCut,
}

impl LastSuccess {
    /// The size to start from while the card is short of room, and its cut: this success's
    /// own where it was cut for room, else the one kept beside the job's own size.
    pub fn room_fallback(&self) -> Option<RoomLimited> {
        match (&self.room_cut, &self.room_limited) {
            (Some(cut), _) => Some(RoomLimited {
                knobs: self.knobs.clone(),
                cut: cut.clone(),
            }),
            (None, limited) => limited.clone(),
        }
    }

    /// The job's own size: what worked, or the values a cut for room came from.
    pub fn own_knobs(&self) -> &KnobValues {
        self.room_cut.as_ref().map_or(&self.knobs, |cut| &cut.own)
    }

    /// This success (at the job's own size, not cut for room) keeps `earlier`'s room-limited
    /// size where it was cut from these very values.
    pub fn keep_room_limited(&mut self, earlier: Option<&LastSuccess>) {
        if self.room_cut.is_some() {
            return;
        }
        self.room_limited = earlier
            .and_then(LastSuccess::room_fallback)
            .filter(|limited| limited.cut.own.same_as(&self.knobs));
    }
}

/// One attempt as the job's file keeps it: the summary.json record's knobs, cause and peaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PastAttempt {
    /// When it started, RFC 3339 UTC.
    pub at: String,
    /// Its run directory.
    pub run: String,
    pub attempt: u32,
    pub knobs: KnobValues,
    /// As [`Cause::as_str`] spells it; kept as text so a cause this build does not know (from
    /// a newer one) is skipped by readers, not a corrupt file.
    pub cause: String,
    #[serde(flatten)]
    pub peaks: PeakRecord,
    /// The cards (NVML indices) it was seen on; absent where none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_devices: Vec<u32>,
    /// What the probe saw of its steps; absent where it saw none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<PastSteps>,
}

/// How far and how fast an attempt went, and its memory at its completed steps, as the probe
/// saw them: the fit's exact points, and the throughput a later run compares settings by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PastSteps {
    /// Optimizer steps done.
    pub steps: u64,
    /// Steps a second × batch × accumulation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_second: Option<f64>,
    /// The CUDA allocator's reserved bytes at their peak over the completed steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_peak_gpu_bytes: Option<u64>,
    /// The peak resident set of a process that stepped, over the completed steps (kept for
    /// the record; the fit does not draw host memory from one process's peak).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_peak_host_bytes: Option<u64>,
}

impl PastSteps {
    /// From what the probe saw of an attempt (with its samples a second where known); `None`
    /// where it saw no step.
    pub fn from_probe(seen: &ProbeSummary, samples_per_second: Option<f64>) -> Option<PastSteps> {
        Some(PastSteps {
            steps: seen.steps.filter(|&n| n > 0)?,
            samples_per_second,
            // Reserved only: allocated bytes are another scale, and two attempts' points on
            // different scales draw no line.
            steps_peak_gpu_bytes: seen.cuda_peak_reserved_bytes,
            steps_peak_host_bytes: seen.rss_peak_bytes,
        })
    }

    /// Its memory at its completed steps, as the fit takes it.
    pub fn peak(&self) -> StepsPeak {
        StepsPeak {
            gpu_bytes: self.steps_peak_gpu_bytes,
        }
    }
}

impl PastAttempt {
    /// From the attempt's summary.json record.
    pub fn from_record(record: &AttemptRecord, run_dir: &Path) -> PastAttempt {
        PastAttempt {
            at: record.started_at.clone(),
            run: run_dir.to_string_lossy().into_owned(),
            attempt: record.attempt,
            knobs: record.knobs.clone(),
            cause: record.cause.as_str().to_string(),
            peaks: record.peaks,
            gpu_devices: record.gpu_devices.clone(),
            steps: record
                .probe
                .as_ref()
                .and_then(|p| PastSteps::from_probe(&p.seen, p.samples_per_second)),
        }
    }

    pub fn cause(&self) -> Option<Cause> {
        Cause::from_name(&self.cause)
    }

    /// The value the knob `name` had, typed as the knob model types it.
    pub fn value(&self, name: &str) -> Option<Value> {
        value_of(&self.knobs, name)
    }
}

/// The value named `name` in `knobs`, typed as [`Value`] (the inverse of [`Value::to_json`]).
pub fn value_of(knobs: &KnobValues, name: &str) -> Option<Value> {
    let (_, json) = knobs.0.iter().find(|(n, _)| n == name)?;
    Some(match json {
        serde_json::Value::Null => Value::Unset,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(n) => Value::Int(n),
            None => Value::Float(n.as_f64()?),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        serde_json::Value::Array(_) | serde_json::Value::Object(_) => return None,
    })
}

/// Why a job file cannot be used as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Unusable {
    /// Not JSON, or not a job file of this format.
    Corrupt(String),
    /// Written by a newer oomguard in a format this one does not read.
    Newer(u64),
}

/// Reads a job file's text.
pub fn parse(bytes: &[u8]) -> Result<JobMemory, Unusable> {
    let raw: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Unusable::Corrupt(e.to_string()))?;
    match raw.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if v > FORMAT_VERSION => return Err(Unusable::Newer(v)),
        Some(v) if v >= 1 => {}
        _ => return Err(Unusable::Corrupt("no format version".into())),
    }
    serde_json::from_value(raw).map_err(|e| Unusable::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_record_this_build_cannot_read_costs_only_the_record() {
        let table = [
            (r#""state": "running""#, true),
            (r#""state": "paused_by_a_newer_build""#, false),
        ];
        for (state, readable) in table {
            let text = format!(
                r#"{{"version": 1, "name": "j", "attempts": [], "run": {{"pid": 5, "run_dir": "/r",
                 "started_at": "t", {state}, "attempt": 2, "knobs": {{"batch": 4}}}}}}"#
            );
            let memory = parse(text.as_bytes()).expect("the file stays usable");
            assert_eq!(memory.run.is_some(), readable, "{state}");
            assert_eq!(memory.name, "j");
        }
        // And an old file, without a run, reads as before.
        assert_eq!(parse(br#"{"version": 1, "name": "j"}"#).unwrap().run, None);
    }

    /// A success at the job's own size keeps the room-limited size an earlier run was cut to
    /// from these values (read back from the file, in another order); not one cut from others.
    #[test]
    fn a_success_at_the_own_size_keeps_the_room_limited_size_beside_it() {
        use serde_json::json;
        let knobs = |batch: u64, accum: u64| {
            KnobValues(vec![
                ("batch".into(), json!(batch)),
                ("accum".into(), json!(accum)),
            ])
        };
        let success = |values, cut: Option<RoomCut>| LastSuccess {
            at: "t".into(),
            run: "/r".into(),
            knobs: values,
            room_cut: cut,
            room_limited: None,
        };
        let cut = RoomCut {
            own: KnobValues(vec![
                ("accum".into(), json!(1)),
                ("batch".into(), json!(64)),
            ]),
            own_need_gpu_bytes: Some(52 << 30),
            room_bytes: 39 << 30,
        };
        let limited = success(knobs(32, 2), Some(cut.clone()));
        assert_eq!(limited.own_knobs(), &cut.own);
        let mut own = success(knobs(64, 1), None);
        own.keep_room_limited(Some(&limited));
        let kept = own.room_fallback().expect("kept beside the own size");
        assert_eq!((kept.knobs, kept.cut), (knobs(32, 2), cut.clone()));
        // The next success at the own size keeps it still; one at other values does not.
        let mut again = success(knobs(64, 1), None);
        again.keep_room_limited(Some(&own));
        assert!(again.room_limited.is_some());
        let mut other = success(knobs(48, 1), None);
        other.keep_room_limited(Some(&own));
        assert_eq!(other.room_fallback(), None);
        // A room-limited success is its own fallback.
        let mut cut_again = success(knobs(16, 4), Some(cut));
        cut_again.keep_room_limited(Some(&own));
        assert_eq!(cut_again.room_fallback().unwrap().knobs, knobs(16, 4));
    }

    #[test]
    fn values_come_back_typed() {
        use serde_json::json;
        let knobs = KnobValues(vec![
            ("a".into(), json!(8)),
            ("b".into(), json!(0.5)),
            ("c".into(), json!(true)),
            ("d".into(), json!("x")),
            ("e".into(), json!(null)),
            ("f".into(), json!(2.0)),
        ]);
        let table = [
            ("a", Some(Value::Int(8))),
            ("b", Some(Value::Float(0.5))),
            ("c", Some(Value::Bool(true))),
            ("d", Some(Value::Str("x".into()))),
            ("e", Some(Value::Unset)),
            ("f", Some(Value::Float(2.0))),
            ("g", None),
        ];
        for (name, want) in table {
            assert_eq!(value_of(&knobs, name), want, "{name}");
        }
    }

    #[test]
    fn unusable_files_are_told_apart() {
        let table: &[(&str, Option<Unusable>)] = &[
            (r#"{"version": 1, "name": "j"}"#, None),
            (r#"{"version": 2, "name": "j"}"#, Some(Unusable::Newer(2))),
            ("", Some(Unusable::Corrupt(String::new()))),
            (
                "{\"version\": 1, \"na",
                Some(Unusable::Corrupt(String::new())),
            ),
            (r#"{"name": "j"}"#, Some(Unusable::Corrupt(String::new()))),
            (
                r#"{"version": 0, "name": "j"}"#,
                Some(Unusable::Corrupt(String::new())),
            ),
            (
                r#"{"version": 1, "name": "j", "attempts": [{"at": 3}]}"#,
                Some(Unusable::Corrupt(String::new())),
            ),
            ("[1, 2]", Some(Unusable::Corrupt(String::new()))),
        ];
        for (text, want) in table {
            let got = parse(text.as_bytes()).err().map(|e| match e {
                Unusable::Corrupt(_) => Unusable::Corrupt(String::new()),
                newer => newer,
            });
            assert_eq!(&got, want, "{text}");
        }
    }
}
