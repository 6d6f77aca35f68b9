//! `oomguard status`: every job in the state directory and where its latest run stands, read from
//! the job files ([`crate::remember::jobs`]) that each oomguard rewrites on every change. A run
//! whose file says it is under way is checked, not believed: its oomguard must still be alive,
//! named by PID *and* start time (so a PID reused by another process does not count), on this boot
//! of this machine; otherwise it is `dead`. A run recorded on another machine (a state directory on
//! a shared filesystem) cannot be checked from here and is shown as recorded, with its host. A
//! running attempt's optimizer steps (where the probe sees them) are shown as its oomguard last
//! wrote them, which is every few seconds while they move.
//!
//! This module only reads: it never takes the jobs' locks nor moves a file aside (a file it
//! cannot read is skipped with a warning). Printing is left to the caller ([`crate::commands`]);
//! the table's cells are escaped for the terminal here ([`crate::output::console::printable`]).

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::guard::liveness::{liveness, Liveness, ProcessId};
use crate::observe::units::human_bytes;
use crate::remember::jobs::memory::{self, JobMemory, RunState};
use crate::remember::record::summary::{KnobValues, PeakRecord};

/// One job as `oomguard status --json` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobStatus {
    pub name: String,
    /// `running`, `waiting`, the last run's outcome (`succeeded`, `gave_up`, `failed`,
    /// `interrupted`), `dead` (its oomguard is gone without writing an end), or `unknown` (no
    /// run recorded: the job was last run by an oomguard that did not record runs).
    pub state: String,
    /// The run's oomguard.
    pub pid: Option<u32>,
    pub attempt: Option<u32>,
    pub knobs: Option<KnobValues>,
    pub last_cause: Option<String>,
    pub peaks: Option<PeakRecord>,
    pub run_dir: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// The machine the run was recorded on.
    pub host: Option<String>,
    /// While the run is `waiting` for room on a shared card: what for (`waiting for 57.2 GiB
    /// free on GPU 0 before attempt 2`). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// While an attempt is `running`: the optimizer steps its job has taken, and their pace,
    /// where the probe saw them. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_per_step: Option<f64>,
}

/// A job's status from its file, its run's oomguard checked with `live`.
pub fn of_job(memory: &JobMemory, live: impl Fn(&ProcessId) -> Liveness) -> JobStatus {
    let Some(run) = &memory.run else {
        // Recorded before runs were: the last attempt says what little is known.
        let last = memory.attempts().last();
        return JobStatus {
            name: memory.name.clone(),
            state: "unknown".to_string(),
            pid: None,
            attempt: last.map(|a| a.attempt),
            knobs: last.map(|a| a.knobs.clone()),
            last_cause: last.map(|a| a.cause.clone()),
            peaks: last.map(|a| a.peaks),
            run_dir: last.map(|a| a.run.clone()),
            started_at: None,
            ended_at: None,
            host: None,
            waiting_for: None,
            steps: None,
            seconds_per_step: None,
        };
    };
    let state = if run.state.under_way() && live(&run.process) == Liveness::Dead {
        "dead"
    } else {
        run.state.as_str()
    };
    // Only while it runs: a dead run's steps are history, and say nothing of now.
    let running = state == RunState::Running.as_str();
    JobStatus {
        name: memory.name.clone(),
        state: state.to_string(),
        pid: Some(run.process.pid),
        attempt: Some(run.attempt),
        knobs: Some(run.knobs.clone()),
        last_cause: run.last_cause.clone(),
        peaks: run.peaks,
        run_dir: Some(run.run_dir.clone()),
        started_at: Some(run.started_at.clone()),
        ended_at: run.ended_at.clone(),
        host: run.process.host.clone(),
        // Only while it still waits: a dead run's or an ended one's is history.
        waiting_for: run
            .waiting_for
            .clone()
            .filter(|_| state == RunState::Waiting.as_str()),
        steps: run.steps.filter(|_| running),
        seconds_per_step: run.seconds_per_step.filter(|_| running),
    }
}

/// Every job file in `<state_dir>/jobs`, by name, each checked; and a warning per file that
/// cannot be read. A state directory with no jobs yet gives none.
pub fn collect(state_dir: &Path) -> (Vec<JobStatus>, Vec<String>) {
    let dir = state_dir.join("jobs");
    let mut warnings = Vec::new();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), warnings),
        Err(e) => {
            warnings.push(format!("cannot read {}: {e}", dir.display()));
            return (Vec::new(), warnings);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            // `NAME.json` only: not the temporary `.NAME.json.PID.tmp` nor a moved-aside
            // `NAME.json.corrupt-...`.
            name.is_some_and(|n| !n.starts_with('.') && n.ends_with(".json"))
        })
        .collect();
    paths.sort();
    let mut jobs = Vec::new();
    for path in paths {
        let parsed = crate::guard::fsutil::read_regular_capped(
            &path,
            crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
        )
        .map_err(|e| e.to_string())
        .and_then(|bytes| {
            memory::parse(&bytes).map_err(|why| match why {
                memory::Unusable::Corrupt(e) => format!("not a valid job file ({e})"),
                memory::Unusable::Newer(v) => {
                    format!("written by a newer oomguard (format {v})")
                }
            })
        });
        match parsed {
            Ok(memory) => jobs.push(of_job(&memory, liveness)),
            Err(why) => warnings.push(format!("skipping {}: {why}", path.display())),
        }
    }
    (jobs, warnings)
}

/// The table for people: one line per job under a header, columns aligned; a column STEPS
/// after ATTEMPT where a running attempt's steps are known (`1,204 (0.41 s/step)`), and a last
/// column, NOTE, where a job waits for room on a shared card (what for), each only then.
pub fn table(jobs: &[JobStatus]) -> Vec<String> {
    let dash = || "-".to_string();
    let notes = jobs.iter().any(|j| j.waiting_for.is_some());
    let stepped = jobs.iter().any(|j| j.steps.is_some());
    let mut header = vec!["NAME", "STATE", "PID", "ATTEMPT"];
    if stepped {
        header.push("STEPS");
    }
    header.extend([
        "KNOBS",
        "LAST CAUSE",
        "PEAK RSS",
        "PEAK GPU",
        "STARTED",
        "ENDED",
        "RUN DIR",
    ]);
    if notes {
        header.push("NOTE");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for job in jobs {
        let peak = |f: fn(&PeakRecord) -> Option<u64>| {
            job.peaks
                .as_ref()
                .and_then(f)
                .map_or_else(dash, human_bytes)
        };
        let mut row = vec![
            job.name.clone(),
            job.state.clone(),
            job.pid.map_or_else(dash, |p| p.to_string()),
            job.attempt.map_or_else(dash, |a| a.to_string()),
        ];
        if stepped {
            row.push(steps_text(job).unwrap_or_else(dash));
        }
        row.extend([
            job.knobs.as_ref().map_or_else(dash, knobs_text),
            job.last_cause.clone().unwrap_or_else(dash),
            peak(|p| p.peak_pss_bytes.or(p.peak_rss_bytes)),
            peak(|p| p.peak_gpu_bytes),
            job.started_at.clone().unwrap_or_else(dash),
            job.ended_at.clone().unwrap_or_else(dash),
            job.run_dir.clone().unwrap_or_else(dash),
        ]);
        if notes {
            row.push(job.waiting_for.clone().unwrap_or_else(dash));
        }
        // Every cell may come from a file a user wrote (a knob's text value, a cause, a note):
        // no control character reaches the terminal, nor breaks the table.
        rows.push(
            row.iter()
                .map(|cell| crate::output::console::printable(cell).into_owned())
                .collect(),
        );
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

/// `1,204 (0.41 s/step)`: a running attempt's steps and their pace, where known.
fn steps_text(job: &JobStatus) -> Option<String> {
    let steps = crate::observe::units::thousands(job.steps?);
    Some(match job.seconds_per_step {
        Some(seconds) => format!("{steps} ({})", crate::probe::per_step_text(seconds)),
        None => steps,
    })
}

/// `batch=4 accum=2`.
fn knobs_text(knobs: &KnobValues) -> String {
    if knobs.0.is_empty() {
        return "-".to_string();
    }
    knobs
        .0
        .iter()
        .map(|(name, value)| match value {
            serde_json::Value::String(s) => format!("{name}={s}"),
            other => format!("{name}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::liveness::tests::recorded;
    use crate::remember::jobs::memory::{CurrentRun, RunState};
    use serde_json::json;

    fn named(name: &str) -> JobMemory {
        let mut memory = JobMemory::default();
        memory.name = name.into();
        memory
    }

    fn memory(state: RunState) -> JobMemory {
        let mut memory = named("nightly");
        memory.version = memory::FORMAT_VERSION;
        memory.run = Some(CurrentRun {
            process: recorded(Some(1)),
            run_dir: "/runs/1".into(),
            started_at: "2026-11-25T10:00:00Z".into(),
            state,
            attempt: 2,
            knobs: KnobValues(vec![("batch".into(), json!(4))]),
            command: None,
            last_cause: Some("device_oom".into()),
            peaks: None,
            ended_at: None,
            waiting_for: None,
            steps: None,
            seconds_per_step: None,
        });
        memory
    }

    #[test]
    fn the_state_shown_is_the_recorded_one_unless_its_oomguard_is_gone() {
        use Liveness::*;
        // (recorded, liveness of its oomguard, shown)
        let table = [
            (RunState::Running, Alive, "running"),
            (RunState::Running, Dead, "dead"),
            (RunState::Running, Unknown, "running"),
            (RunState::Waiting, Alive, "waiting"),
            (RunState::Waiting, Dead, "dead"),
            // An ended run is what it ended as, whatever became of its PID.
            (RunState::Succeeded, Dead, "succeeded"),
            (RunState::GaveUp, Alive, "gave_up"),
            (RunState::Failed, Dead, "failed"),
            (RunState::Interrupted, Dead, "interrupted"),
        ];
        for (state, live, want) in table {
            let shown = of_job(&memory(state), |_| live);
            assert_eq!(shown.state, want, "{state:?} {live:?}");
            assert_eq!(shown.pid, Some(4242));
            assert_eq!(shown.attempt, Some(2));
        }
        let none = of_job(&JobMemory::default(), |_| panic!("nothing to look up"));
        assert_eq!(none.state, "unknown");
    }

    #[test]
    fn a_run_waiting_for_room_says_what_for_while_it_waits() {
        use Liveness::*;
        let what = "waiting for 57.2 GiB free on GPU 0 before attempt 2";
        // (recorded, liveness of its oomguard, shown state, shown note)
        let table = [
            (RunState::Waiting, Alive, "waiting", Some(what)),
            (RunState::Waiting, Unknown, "waiting", Some(what)),
            // Gone, or no longer waiting: what it waited for is history.
            (RunState::Waiting, Dead, "dead", None),
            (RunState::Running, Alive, "running", None),
            (RunState::GaveUp, Dead, "gave_up", None),
        ];
        for (state, live, want_state, want_note) in table {
            let mut recorded = memory(state);
            recorded.run.as_mut().unwrap().waiting_for = Some(what.into());
            let shown = of_job(&recorded, |_| live);
            assert_eq!(shown.state, want_state, "{state:?} {live:?}");
            assert_eq!(
                shown.waiting_for.as_deref(),
                want_note,
                "{state:?} {live:?}"
            );
            let json = serde_json::to_value(&shown).unwrap();
            assert_eq!(
                json.get("waiting_for").and_then(|v| v.as_str()),
                want_note,
                "--json carries it only while waiting"
            );
        }
    }

    #[test]
    fn the_table_has_a_note_column_only_where_a_job_waits_for_room() {
        let waiting = |name: &str, note: &str| {
            let mut m = memory(RunState::Waiting);
            m.name = name.into();
            m.run.as_mut().unwrap().waiting_for = Some(note.into());
            of_job(&m, |_| Liveness::Alive)
        };
        let running = of_job(&memory(RunState::Running), |_| Liveness::Alive);
        // None waits: the table it always was.
        let plain = table(std::slice::from_ref(&running));
        assert!(!plain[0].contains("NOTE"), "{plain:?}");
        assert!(plain[0].ends_with("RUN DIR"), "{plain:?}");

        let lines = table(&[
            running,
            waiting("sg", "waiting for 57.2 GiB free on GPU 0 before attempt 2"),
            waiting("evil", "x\n\u{1b}[2Jy"),
        ]);
        assert_eq!(lines.len(), 4, "{lines:?}");
        let note = lines[0].find("NOTE").expect("a NOTE column");
        let run_dir = lines[0].find("RUN DIR").unwrap();
        assert!(note > run_dir, "the note comes last: {lines:?}");
        // Every row's cells start where the header's do.
        assert_eq!(&lines[1][note..], "-");
        assert_eq!(
            &lines[2][note..],
            "waiting for 57.2 GiB free on GPU 0 before attempt 2"
        );
        assert_eq!(
            &lines[3][note..],
            "x\\n\\u{1b}[2Jy",
            "no control characters reach the terminal"
        );
        let state = lines[0].find("STATE").unwrap();
        assert_eq!(&lines[2][state..state + 7], "waiting");
        assert_eq!(&lines[2][run_dir..run_dir + 7], "/runs/1");
    }

    #[test]
    fn a_running_attempt_s_steps_are_shown_while_it_runs() {
        use Liveness::*;
        // (recorded, liveness of its oomguard, shown steps and pace)
        let table = [
            (RunState::Running, Alive, Some((1204, Some(0.41)))),
            (RunState::Running, Unknown, Some((1204, Some(0.41)))),
            // Gone, or no attempt running: its steps say nothing of now.
            (RunState::Running, Dead, None),
            (RunState::Waiting, Alive, None),
            (RunState::Succeeded, Dead, None),
        ];
        for (state, live, want) in table {
            let mut recorded = memory(state);
            let run = recorded.run.as_mut().unwrap();
            (run.steps, run.seconds_per_step) = (Some(1204), Some(0.41));
            let shown = of_job(&recorded, |_| live);
            assert_eq!(
                shown.steps.map(|s| (s, shown.seconds_per_step)),
                want,
                "{state:?} {live:?}"
            );
            let json = serde_json::to_value(&shown).unwrap();
            assert_eq!(
                json.get("steps").and_then(|v| v.as_u64()),
                want.map(|(s, _)| s),
                "--json carries them only while running"
            );
        }
    }

    #[test]
    fn the_table_has_a_steps_column_only_where_an_attempt_s_steps_are_known() {
        let running = |name: &str, steps: Option<u64>, pace: Option<f64>| {
            let mut m = memory(RunState::Running);
            m.name = name.into();
            let run = m.run.as_mut().unwrap();
            (run.steps, run.seconds_per_step) = (steps, pace);
            of_job(&m, |_| Liveness::Alive)
        };
        let plain = table(&[running("a", None, None)]);
        assert!(!plain[0].contains("STEPS"), "{plain:?}");

        let lines = table(&[
            running("a", Some(1204), Some(0.41)),
            running("b", Some(40_000), Some(0.035)),
            running("c", Some(1), None),
            running("d", None, None),
        ]);
        let steps = lines[0].find("STEPS").expect("a STEPS column");
        assert!(lines[0][..steps].ends_with("ATTEMPT  "), "{lines:?}");
        let knobs = lines[0].find("KNOBS").unwrap();
        // (row, its cell)
        for (row, want) in [
            (1, "1,204 (0.41 s/step)"),
            (2, "40,000 (35 ms/step)"),
            (3, "1"),
            (4, "-"),
        ] {
            assert_eq!(lines[row][steps..knobs].trim_end(), want, "{lines:?}");
        }
    }

    #[test]
    fn the_table_aligns_and_fills_blanks() {
        let jobs = [
            of_job(&memory(RunState::Running), |_| Liveness::Alive),
            of_job(&named("j"), |_| Liveness::Alive),
        ];
        let lines = table(&jobs);
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME     STATE    PID"), "{lines:?}");
        assert!(lines[1].contains("batch=4"), "{lines:?}");
        assert!(lines[1].contains("device_oom"), "{lines:?}");
        let state_col = lines[0].find("STATE").unwrap();
        assert_eq!(&lines[2][state_col..state_col + 7], "unknown");
    }
}
