//! One run's hold on its job ([`JobRun`]): loads the job's memory at the start and says where the
//! first attempt starts, then records each attempt and where the run stands (running, waiting,
//! ended; while running, how far the attempt's steps have got, every few seconds) in the job's
//! file; a problem with the file is told once and the run goes on. The
//! file's format, its lock and the start rule are [`super::memory`]'s, [`super::store`]'s and
//! [`super::start`]'s.

use std::path::Path;
use std::time::SystemTime;

use super::memory::{CurrentRun, JobMemory, LastSuccess, PastAttempt, RunState};
use super::name::JobSettings;
use super::start::{continue_from, fastest_fit, start_from, Start, StartFrom};
use super::store::JobStore;
use crate::guard::liveness::{Liveness, ProcessId};
use crate::judge::outcome::Cause;
use crate::judge::outcome::Outcome;
use crate::knobs::KnobSet;
use crate::output::console::Reporter;
use crate::probe::Progress;
use crate::remember::record::summary::{AttemptRecord, KnobValues};

/// One run's hold on its job: the memory loaded at the start, the first attempt's values,
/// and the store each attempt is added to.
#[derive(Debug)]
pub struct JobRun {
    settings: JobSettings,
    store: Option<JobStore>,
    memory: JobMemory,
    start: Option<Start>,
    /// Where the last run's success was cut for a shared card's room: `start` is then the job's
    /// own size, and this the room-limited one, for while the card is still short.
    room_start: Option<Start>,
    /// A problem with the store has been told: later ones are only logged, so a read-only
    /// state directory costs one line, not one per attempt.
    warned: bool,
    /// Attempts (and the success among them) not yet in the file because a write failed (a full
    /// disk): written with the next attempt's.
    pending: Vec<PastAttempt>,
    pending_success: Option<LastSuccess>,
    /// This run as the job's file shows it (`oomguard status`), once an attempt has started.
    current: Option<CurrentRun>,
    /// What the next state written waits for (room on a shared card), once.
    waiting_for: Option<String>,
    /// When (the sample's Unix time) the running attempt's steps were last written.
    steps_saved_at_s: Option<f64>,
}

/// The least time between two writes of the running attempt's steps into the job's file: a
/// status that is a few seconds old costs the file one rewrite per interval, not one per tick.
const STEPS_SAVE_INTERVAL_S: f64 = 5.0;

impl JobRun {
    /// Loads the job and, unless `--fresh`, works out where the first attempt starts, saying
    /// so in one line. Any problem with the file is a warning: the run goes on.
    pub fn open(settings: &JobSettings, knobs: &KnobSet, report: &Reporter) -> JobRun {
        let mut run = JobRun::unloaded(settings);
        let Some(state_dir) = &settings.state_dir else {
            report.warn(&format!(
                "no state directory (neither XDG_STATE_HOME nor HOME is set): job {} is not remembered; give --state-dir DIR",
                settings.name
            ));
            return run;
        };
        run.load(state_dir, report);
        // Not where the job's user could write the job memory that names the run directories
        // (a `state_dir` of theirs): it could name another job's, which root would then hand
        // to them.
        if !settings.state_dir_is_users {
            run.tighten_earlier_run_dirs();
        }
        // Before `--fresh` is looked at: another oomguard running the job is told either way.
        let died = run.died_run(report);
        if settings.fresh {
            return run;
        }
        run.choose_start(died.as_ref(), knobs, report);
        run
    }

    /// The run before anything is loaded: what a job without a state directory keeps.
    fn unloaded(settings: &JobSettings) -> JobRun {
        JobRun {
            settings: settings.clone(),
            store: None,
            memory: JobMemory::default(),
            start: None,
            room_start: None,
            waiting_for: None,
            warned: false,
            pending: Vec::new(),
            pending_success: None,
            current: None,
            steps_saved_at_s: None,
        }
    }

    /// Opens the job's store in `state_dir` and loads its memory; a file that cannot be read
    /// is told and the run starts from the command's values, with the store kept for writing.
    fn load(&mut self, state_dir: &Path, report: &Reporter) {
        let settings = &self.settings;
        let store = JobStore::new(state_dir, &settings.name)
            .touched_as_user(settings.state_dir_is_users)
            .with_legacy_name(settings.legacy_name.clone());
        match store.load() {
            Ok((memory, moved)) => {
                if let Some(moved) = moved {
                    self.warn(report, &moved.to_string());
                }
                self.memory = memory;
            }
            Err(e) => self.warn(
                report,
                &format!("{e}; this run starts from the command's values"),
            ),
        }
        self.store = Some(store);
    }

    /// Makes private the run directories of this job that an earlier version left readable by
    /// every user.
    fn tighten_earlier_run_dirs(&self) {
        let earlier = self.memory.attempts().iter().map(|a| a.run.as_str());
        let latest = self.memory.run.iter().map(|r| r.run_dir.as_str());
        let tightened = crate::remember::record::run_dir::tighten_earlier(earlier.chain(latest));
        if tightened > 0 {
            tracing::info!("made {tightened} earlier run directories of the job private");
        }
    }

    /// The job's last run, if its oomguard died without writing an end: the one a run may
    /// continue. One still alive is told, since the job's file then shows only the latest.
    fn died_run(&self, report: &Reporter) -> Option<CurrentRun> {
        self.memory.run.clone().filter(|last| {
            last.state.under_way()
                && match crate::guard::liveness::liveness(&last.process) {
                    Liveness::Dead => true,
                    Liveness::Alive => {
                        report.warn(&format!(
                            "job {} is also being run by oomguard {} (run directory {}): `oomguard status` shows only the latest run; give --name for a job of its own",
                            self.settings.name, last.process.pid, last.run_dir
                        ));
                        false
                    }
                    Liveness::Unknown => false,
                }
        })
    }

    /// Where the first attempt starts, in order of preference: the attempt a dead run was in,
    /// the last success's own and room-limited sizes, the fastest setting that fitted, the
    /// last success. Each is said in one line.
    fn choose_start(&mut self, died: Option<&CurrentRun>, knobs: &KnobSet, report: &Reporter) {
        if self.continue_died(died, knobs, report) {
            return;
        }
        let Some(last) = self.memory.last_success().cloned() else {
            return;
        };
        if self.start_room_limited(&last, knobs, report) || self.start_fastest(&last, knobs, report)
        {
            return;
        }
        self.start_from_last(&last, knobs, report);
    }

    /// Continues the attempt the `died` run was in, if it ran the same command; whether it did.
    fn continue_died(
        &mut self,
        died: Option<&CurrentRun>,
        knobs: &KnobSet,
        report: &Reporter,
    ) -> bool {
        let continued = died.and_then(|last| {
            let start = continue_from(last, knobs, &self.settings.command);
            if start.is_none() {
                report.say(&format!(
                    "the job's last run (oomguard {}, {}) died during attempt {} with another command: not continuing it",
                    last.process.pid, last.run_dir, last.attempt
                ));
            }
            start
        });
        let Some(start) = continued else {
            return false;
        };
        let StartFrom::Interrupted {
            attempt,
            pid,
            run_dir,
        } = &start.from
        else {
            unreachable!("continue_from continues an interrupted run");
        };
        let values = match start.describe(knobs) {
            described if described.is_empty() => "the command's".to_string(),
            described => described,
        };
        report.say(&format!(
            "the job's last run (oomguard {pid}, {run_dir}) died during attempt {attempt}: continuing with that attempt's values: {values}; --fresh to start from the command's values"
        ));
        self.start = Some(start);
        true
    }

    /// When the last success was cut for a shared card's room: starts from the job's own size,
    /// with the room-limited one kept for while the card is short; whether it was cut.
    fn start_room_limited(
        &mut self,
        last: &LastSuccess,
        knobs: &KnobSet,
        report: &Reporter,
    ) -> bool {
        let Some(limited) = last.room_fallback() else {
            return false;
        };
        let at = |values: &KnobValues| LastSuccess {
            knobs: values.clone(),
            ..last.clone()
        };
        self.start = start_from(&at(last.own_knobs()), knobs);
        self.room_start = start_from(&at(&limited.knobs), knobs);
        let described = |start: &Option<Start>| match start {
            Some(start) => start.describe(knobs),
            None => "the command's values".to_string(),
        };
        let day = last.at.get(..10).unwrap_or(&last.at);
        report.say(&format!(
            "starting from the job's own size ({}) where the card has room for it; on a card short of room ({day}) {} worked; --fresh to start from the command's values",
            described(&self.start),
            described(&self.room_start),
        ));
        true
    }

    /// Starts from the fastest setting that fitted when it is not the last success's; whether
    /// there was one.
    fn start_fastest(&mut self, last: &LastSuccess, knobs: &KnobSet, report: &Reporter) -> bool {
        let Some(fastest) = fastest_fit(self.memory.attempts(), last, knobs) else {
            return false;
        };
        let faster = LastSuccess {
            knobs: fastest.knobs.clone(),
            ..last.clone()
        };
        self.start = start_from(&faster, knobs);
        let (last_knobs, last_rate) = &fastest.last;
        let last_start = LastSuccess {
            knobs: last_knobs.clone(),
            ..last.clone()
        };
        let described = |start: Option<Start>| match start {
            Some(start) => start.describe(knobs),
            None => "the command's values".to_string(),
        };
        report.say(&format!(
            "starting from the fastest setting that fitted: {} at {} samples/s, where the last success, {}, ran {} samples/s; --fresh to start from the command's values",
            described(self.start.clone()),
            crate::observe::units::rate(fastest.samples_per_second),
            described(start_from(&last_start, knobs)),
            crate::observe::units::rate(*last_rate),
        ));
        if let Some(note) = self.start.as_ref().and_then(|s| s.effective_note.as_ref()) {
            report.warn(note);
        }
        true
    }

    /// Starts from what worked last time, as it was.
    fn start_from_last(&mut self, last: &LastSuccess, knobs: &KnobSet, report: &Reporter) {
        self.start = start_from(last, knobs);
        if let Some(start) = &self.start {
            let day = start.at.get(..10).unwrap_or(&start.at);
            report.say(&format!(
                "starting from what worked last time ({day}): {}; --fresh to start from the command's values",
                start.describe(knobs)
            ));
            if let Some(note) = &start.effective_note {
                report.warn(note);
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// What earlier runs learned, as loaded at the start.
    pub fn memory(&self) -> &JobMemory {
        &self.memory
    }

    /// Where the first attempt starts, when not at the command's values.
    pub fn start(&self) -> Option<&Start> {
        self.start.as_ref()
    }

    /// Where it starts instead while a shared card is short of room for `start` (the last run
    /// was cut for room).
    pub fn room_start(&self) -> Option<&Start> {
        self.room_start.as_ref()
    }

    /// Adds an attempt (its summary.json record) to the job's file; a success also becomes
    /// what the next run starts from.
    pub fn remember(&mut self, record: &AttemptRecord, run_dir: &Path, report: &Reporter) {
        let past = PastAttempt::from_record(record, run_dir);
        let success = (record.cause == Cause::Ok).then(|| LastSuccess {
            at: past.at.clone(),
            run: past.run.clone(),
            knobs: past.knobs.clone(),
            room_cut: record.room_cut.clone(),
            room_limited: None,
        });
        if let Some(current) = &mut self.current {
            current.last_cause = Some(past.cause.clone());
            current.peaks = Some(past.peaks);
        }
        let Some(store) = &self.store else {
            return;
        };
        self.pending.push(past);
        if success.is_some() {
            self.pending_success = success;
        }
        let settings = &self.settings;
        let (pending, pending_success) = (&self.pending, &self.pending_success);
        let current = self.current.clone();
        // A success is what the next run starts from: synced. A death is synced with the
        // run's end.
        let updated = store.update_with(record.cause == Cause::Ok, |memory| {
            memory.command = settings.command.clone();
            memory.cwd = settings.cwd.to_string_lossy().into_owned();
            for past in pending {
                memory.push(past.clone());
            }
            if let Some(success) = pending_success {
                let mut success = success.clone();
                success.keep_room_limited(memory.last_success.as_ref());
                memory.last_success = Some(success);
            }
            if current.is_some() {
                memory.run = current;
            }
        });
        match updated {
            Ok(moved) => {
                self.pending.clear();
                self.pending_success = None;
                crate::output::unsaved::saved("job state");
                if let Some(moved) = moved {
                    self.warn(report, &moved.to_string());
                }
            }
            // No space (or quota): the attempts stay pending, tried again with the next one;
            // the run's last warning says so if they never get written.
            Err(e) if e.is_out_of_space() => crate::output::unsaved::unsaved("job state", &e),
            Err(e) => self.warn(
                report,
                &format!("{e}; the job's next run will not start from this one"),
            ),
        }
    }

    /// Attempt `attempt` is about to start with `knobs`: the run is `running` it.
    pub fn attempt_started(
        &mut self,
        attempt: u32,
        knobs: KnobValues,
        run_dir: &Path,
        report: &Reporter,
    ) {
        self.set_run(RunState::Running, attempt, knobs, run_dir, report);
    }

    /// Attempt `attempt` will start with `knobs` after the backoff: the run is `waiting`.
    pub fn waiting(&mut self, attempt: u32, knobs: KnobValues, run_dir: &Path, report: &Reporter) {
        self.set_run(RunState::Waiting, attempt, knobs, run_dir, report);
    }

    /// Attempt `attempt` waits for room on a shared card (`what`): the run is `waiting`, and
    /// says for what.
    pub fn waiting_for_room(
        &mut self,
        attempt: u32,
        knobs: KnobValues,
        what: &str,
        run_dir: &Path,
        report: &Reporter,
    ) {
        self.waiting_for = Some(what.to_string());
        self.set_run(RunState::Waiting, attempt, knobs, run_dir, report);
    }

    /// The running attempt's job has got this far (`at_s`: the sample's Unix time): written
    /// for `oomguard status` where the steps moved, the first time at once, then at most every
    /// [`STEPS_SAVE_INTERVAL_S`].
    pub fn progress(&mut self, progress: Progress, at_s: f64, report: &Reporter) {
        let Some(current) = &mut self.current else {
            return;
        };
        let due = self
            .steps_saved_at_s
            .is_none_or(|saved| at_s - saved >= STEPS_SAVE_INTERVAL_S);
        if current.steps == Some(progress.steps) || !due {
            return;
        }
        current.steps = Some(progress.steps);
        current.seconds_per_step = progress.seconds_per_step;
        self.steps_saved_at_s = Some(at_s);
        self.save_run(report);
    }

    /// The run ended with `outcome`.
    pub fn ended(&mut self, outcome: Outcome, report: &Reporter) {
        let Some(current) = &mut self.current else {
            // No attempt started: the job's last run stays the one shown.
            return;
        };
        current.state = outcome.into();
        forget_steps(current);
        current.ended_at = Some(crate::remember::record::summary::rfc3339(SystemTime::now()));
        self.save_run(report);
    }

    fn set_run(
        &mut self,
        state: RunState,
        attempt: u32,
        knobs: KnobValues,
        run_dir: &Path,
        report: &Reporter,
    ) {
        let current = self.current.get_or_insert_with(|| CurrentRun {
            process: ProcessId::current(),
            run_dir: run_dir.to_string_lossy().into_owned(),
            started_at: crate::remember::record::summary::rfc3339(SystemTime::now()),
            state,
            attempt,
            knobs: KnobValues::default(),
            command: Some(self.settings.command.clone()),
            last_cause: None,
            peaks: None,
            ended_at: None,
            waiting_for: None,
            steps: None,
            seconds_per_step: None,
        });
        current.state = state;
        current.waiting_for = self.waiting_for.take();
        // A new state is a new attempt, or none running: no steps yet.
        forget_steps(current);
        self.steps_saved_at_s = None;
        current.attempt = attempt;
        current.knobs = knobs;
        self.save_run(report);
    }

    /// Writes this run into the job's file (a failure is told once, as for attempts).
    fn save_run(&mut self, report: &Reporter) {
        let (Some(store), Some(current)) = (&self.store, &self.current) else {
            return;
        };
        let current = current.clone();
        // Running and waiting are for `oomguard status` while the run lives; its end is synced.
        let durable = current.ended_at.is_some();
        match store.update_with(durable, |memory| memory.run = Some(current)) {
            Ok(None) => {}
            Ok(Some(moved)) => self.warn(report, &moved.to_string()),
            // A full disk is told once, at the end, with everything else left unsaved.
            Err(e) if e.is_out_of_space() => crate::output::unsaved::unsaved("job state", &e),
            Err(e) => self.warn(
                report,
                &format!("{e}; `oomguard status` will not show this run as it is"),
            ),
        }
    }

    fn warn(&mut self, report: &Reporter, line: &str) {
        if std::mem::replace(&mut self.warned, true) {
            tracing::info!("{line}");
        } else {
            report.warn(line);
        }
    }
}

/// Steps are the running attempt's: once it is over (or before the next starts), none.
fn forget_steps(run: &mut CurrentRun) {
    run.steps = None;
    run.seconds_per_step = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of job `j` whose file is in `state_dir`.
    fn run_in(state_dir: &Path) -> JobRun {
        let settings = JobSettings {
            name: "j".into(),
            state_dir: Some(state_dir.to_path_buf()),
            state_dir_is_users: false,
            fresh: true,
            command: vec!["python3".into()],
            cwd: state_dir.to_path_buf(),
            legacy_name: None,
        };
        JobRun::open(&settings, &KnobSet::default(), &Reporter { quiet: true })
    }

    /// The steps and pace the job's file holds now.
    fn saved(state_dir: &Path) -> (Option<u64>, Option<f64>) {
        let (memory, _) = JobStore::new(state_dir, "j").load().unwrap();
        let run = memory.run.expect("a run written");
        (run.steps, run.seconds_per_step)
    }

    #[test]
    fn the_running_attempt_s_steps_are_written_when_they_move_at_most_every_interval() {
        let dir = tempfile::tempdir().unwrap();
        let report = Reporter { quiet: true };
        let mut run = run_in(dir.path());
        let at = |steps, seconds_per_step| Progress {
            steps,
            seconds_per_step,
        };
        // Before an attempt started there is no run to write into.
        run.progress(at(1, None), 0.0, &report);
        run.attempt_started(1, KnobValues::default(), dir.path(), &report);
        assert_eq!(saved(dir.path()), (None, None));
        // (steps, pace, the sample's time, what the file holds then)
        let table = [
            (1, None, 100.0, (Some(1), None)),
            // Too soon after the first write: kept for a later tick.
            (2, Some(0.5), 101.0, (Some(1), None)),
            (2, Some(0.5), 104.9, (Some(1), None)),
            (2, Some(0.5), 105.0, (Some(2), Some(0.5))),
            // Unmoved steps are not written again, however long after.
            (2, Some(0.4), 200.0, (Some(2), Some(0.5))),
            (9, Some(0.3), 200.1, (Some(9), Some(0.3))),
        ];
        for (steps, pace, at_s, want) in table {
            run.progress(at(steps, pace), at_s, &report);
            assert_eq!(saved(dir.path()), want, "{steps} at {at_s}");
        }
        // The next attempt starts with none, and its first steps are written at once.
        run.waiting(2, KnobValues::default(), dir.path(), &report);
        assert_eq!(saved(dir.path()), (None, None));
        run.attempt_started(2, KnobValues::default(), dir.path(), &report);
        run.progress(at(1, None), 200.2, &report);
        assert_eq!(saved(dir.path()), (Some(1), None));
        run.ended(Outcome::Succeeded, &report);
        assert_eq!(saved(dir.path()), (None, None), "an ended run has none");
    }
}
