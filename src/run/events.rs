//! How a run tells what happens to everyone who listens: one [`RunEvent`] per step (the run
//! started, an attempt started, a sample, a notice of the supervisor's, an attempt ended, a
//! relaunch decided and announced, a wait's or the room's line, the run stopped and ended),
//! delivered by [`Observers::tell`] to each listener in a fixed order: the run directory
//! (summary.json, samples.csv, report.html), the console, the job's memory, the service manager,
//! the metrics and the hooks. The listeners do not decide anything about the run and do not
//! wait: a listener that cannot write says so and the run goes on. Each sample goes out with the
//! job's optimizer steps by then, read from the running attempt's probe pipe (held from its start
//! to its end).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::decide::policy;
use crate::error::Error;
use crate::front::settings::RunSettings;
use crate::judge::classify::Verdict;
use crate::judge::outcome::{Cause, Outcome};
use crate::knobs::Value;
use crate::observe::sampler::Sample;
use crate::output::attempt_log::AttemptLog;
use crate::output::console::{self, Reporter};
use crate::probe::{Channel, Progress};
use crate::remember::jobs::run::JobRun;
use crate::remember::record::run_dir::RunDir;
use crate::remember::record::samples::SamplesCsv;
use crate::remember::record::summary::{AttemptRecord, KnobValues, RoomCut, Summary};
use crate::supervise::{AttemptEnd, Notice, Observer};
use crate::{
    decide::room, guard::principal, observe::units, tell::hooks, tell::metrics, tell::notify,
};
use crate::{remember::record, tell::report};

use super::ladder::AttemptRamp;
use super::prepare::{self, lossy};

/// What happened in the run, as its listeners hear it.
pub(super) enum RunEvent<'a> {
    /// The run directory is ready and its listeners open: the run's first lines.
    RunStarted,
    /// Attempt `attempt` is about to be spawned with these knob values, and the probe's pipe
    /// where it has one.
    AttemptStarted {
        attempt: u32,
        values: &'a [Value],
        probe: Option<&'a Channel>,
    },
    /// The job's memory, read on the supervisor's tick, and how far its steps had got by then
    /// (`None` without a probe, or before the first step).
    Sample {
        sample: &'a Sample,
        progress: Option<Progress>,
    },
    /// Something the supervisor saw while the attempt runs (memory growing, a stop begun, no
    /// cgroup, the job stopped at the terminal).
    Notice(&'a Notice),
    /// A line as the console says it (`warn`: as a warning), for what has no event of its
    /// own: the waits between attempts (the GPU letting go, the checkpoints settling), the room
    /// on a shared card, the probe, the files the run patched.
    Said { warn: bool, line: &'a str },
    /// Attempt `attempt` ended: how it ran (its argv, knob values, the knobs moved for it, the
    /// checkpoint and hint it was given) and why it ended.
    AttemptEnded {
        attempt: u32,
        argv: &'a [OsString],
        values: &'a [Value],
        changed: &'a [usize],
        resumed_from: Option<&'a Path>,
        hint: Option<policy::Hint>,
        verdict: &'a Verdict,
        end: &'a AttemptEnd,
        /// Where the batch was cut for a shared card's room earlier in the run.
        room_cut: Option<&'a RoomCut>,
    },
    /// After attempt `ended` (`cause`), the next attempt will run with `values` after `delay`.
    RelaunchDecided {
        ended: u32,
        cause: Cause,
        values: &'a [Value],
        delay: Duration,
    },
    /// Attempt `attempt` refused to start over the last attempt's leftovers: `from` was
    /// renamed to `to` (`line` says so), and the next attempt retries at the same sizes.
    SetAside {
        attempt: u32,
        from: &'a Path,
        to: &'a Path,
        line: &'a str,
    },
    /// The waits before the relaunch are done: what moves, and when it starts.
    Relaunching(Relaunch),
    /// Attempt `attempt` (with `values`) waits for `need_bytes` of room on a shared card;
    /// `status` says so in a few words (the service manager's status line, `oomguard status`).
    WaitingForRoom {
        attempt: u32,
        values: &'a [Value],
        need_bytes: u64,
        status: &'a str,
    },
    /// The wait for room is over (found, run out, or stopped).
    RoomWaitOver,
    /// The run stops with `outcome` (after the last attempt, or on the user's stop signal).
    Stopped {
        outcome: Outcome,
        reason: Option<&'a str>,
    },
    /// The run is over, with its exit status; `None` where oomguard itself failed
    /// (summary.json then says `failed`, and oomguard's error is the last line).
    Ended {
        outcome: Outcome,
        exit_code: Option<i32>,
    },
}

/// The next attempt, as the relaunch line tells it.
pub(super) struct Relaunch {
    pub attempt: u32,
    /// What moved: `--batch_size 16→8, --grad_accum 4→8`.
    pub changes: String,
    pub delay: Duration,
    /// With `--resume-arg`: `resuming from ckpt/epoch_4.pt`, or why not.
    pub checkpoint: Option<String>,
    /// What the step rests on: the fit's estimate, or why it halved.
    pub reason: Option<String>,
    /// Every knob's value for the next attempt (the JSON log's `knobs`).
    pub knobs: KnobValues,
    /// Set when knob × partner could not equal the original exactly.
    pub effective_note: Option<String>,
    /// The line saying that the effective batch shrinks with the batch
    /// ([`crate::knobs::KnobSet::shrink_line`]), told once a run.
    pub shrinks: Option<String>,
}

/// Everyone who hears how the run goes.
pub(super) struct Observers<'a> {
    settings: &'a RunSettings,
    /// The run's knobs, as the ladder holds them (those found inside the job added).
    knobs: crate::knobs::KnobSet,
    console: Reporter,
    run_dir: &'a RunDir,
    summary: &'a mut Summary,
    samples: SamplesCsv,
    /// The job's memory: opened once the run's first lines are said.
    job: Option<JobRun>,
    notify: notify::Notifier,
    /// `--metrics-addr` / `--metrics-textfile`, where asked for.
    metrics: Option<metrics::Exporter>,
    hooks: hooks::Pending,
    /// The attempt's memory ramp (the fixed part before the first step), for the fit.
    ramp: AttemptRamp,
    warned_no_cgroup: bool,
    /// report.html as written at the end, or why it was not.
    page: Option<Result<PathBuf, String>>,
    /// The room claimed on a shared card for the attempt about to run or running: the claims,
    /// the need they stand for, and since when the attempt runs (see `room::claims_done`).
    claims: Option<(Vec<room::claims::Claim>, u64, Option<Instant>)>,
    /// The probe's pipe of the attempt running, read on each of its samples.
    probe: Option<Channel>,
}

impl<'a> Observers<'a> {
    /// The listeners of a run whose directory is `run_dir`, started: samples.csv opened there,
    /// the run's first lines said, and the job's memory opened (which says where attempt 1
    /// starts).
    pub(super) fn start(
        settings: &'a RunSettings,
        console: Reporter,
        run_dir: &'a RunDir,
        summary: &'a mut Summary,
        metrics: Option<metrics::Exporter>,
    ) -> Result<Observers<'a>, Error> {
        let samples = run_dir.open_samples().map_err(Error::RunDir)?;
        let mut observers = Observers {
            settings,
            knobs: settings.knobs.clone(),
            console,
            run_dir,
            summary,
            samples,
            notify: notify::Notifier::from_env(),
            metrics,
            hooks: hooks::Pending::default(),
            ramp: AttemptRamp::default(),
            warned_no_cgroup: false,
            page: None,
            claims: None,
            probe: None,
            job: None,
        };
        // Said before the job's memory is opened, which says where attempt 1 starts.
        observers.tell(&RunEvent::RunStarted);
        observers.job = Some(prepare::open_job(settings, observers.summary, &console));
        Ok(observers)
    }

    /// A line for everyone who listens; the console says it.
    pub(super) fn say(&mut self, line: &str) {
        self.tell(&RunEvent::Said { warn: false, line });
    }

    /// The knobs found inside the job join the run's: later events render values with them.
    pub(super) fn adopt_knobs(&mut self, knobs: crate::knobs::KnobSet) {
        self.knobs = knobs;
    }

    /// A warning for everyone who listens; the console warns.
    pub(super) fn warn(&mut self, line: &str) {
        self.tell(&RunEvent::Said { warn: true, line });
    }

    /// Delivers `event` to each listener, in an order that keeps what the user reads in the
    /// order things happened.
    pub(super) fn tell(&mut self, event: &RunEvent) {
        // The job's file hears the end before the closing lines are printed (a warning that it
        // cannot be saved comes before the table); of an attempt, after it is recorded.
        let ended = matches!(event, RunEvent::Ended { .. });
        if ended {
            self.keep_in_job(event);
        }
        self.record_in_run_dir(event);
        self.say_on_console(event);
        if !ended {
            self.keep_in_job(event);
        }
        self.tell_service_manager(event);
        self.count_in_metrics(event);
        self.start_hooks(event);
        if let RunEvent::Sample { sample, .. } = event {
            self.ramp.feed(sample);
        }
        self.release_claims(event);
        self.follow_probe(event);
    }

    /// Holds the probe's pipe from its attempt's start to its end, for the samples between.
    fn follow_probe(&mut self, event: &RunEvent) {
        match event {
            RunEvent::AttemptStarted { probe, .. } => self.probe = probe.cloned(),
            RunEvent::AttemptEnded { .. } => self.probe = None,
            _ => {}
        }
    }

    /// Attempt 1 starts from `knobs` after all (the room-limited size of an earlier run's cut).
    pub(super) fn started_from(&mut self, knobs: KnobValues) {
        self.summary.started_from = Some(knobs);
    }

    /// Holds claims on a shared card's room for the next attempt.
    pub(super) fn hold_claims(&mut self, claims: Vec<room::claims::Claim>, need_bytes: u64) {
        self.claims = (!claims.is_empty()).then_some((claims, need_bytes, None));
    }

    /// Lets the claims go once the job shows on its cards with what it claimed, when its
    /// attempt ends, or after the longest hold (dropping a claim removes its file).
    fn release_claims(&mut self, event: &RunEvent) {
        let Some((held, need_bytes, since)) = &mut self.claims else {
            return;
        };
        let done = match event {
            RunEvent::AttemptStarted { .. } => {
                *since = Some(Instant::now());
                false
            }
            RunEvent::Sample { sample, .. } => since.is_some_and(|since| {
                room::claims_done(held, *need_bytes, sample.gpu.as_ref(), since)
            }),
            RunEvent::AttemptEnded { .. } | RunEvent::Ended { .. } => true,
            _ => false,
        };
        if done {
            self.claims = None;
        }
    }

    pub(super) fn console(&self) -> Reporter {
        self.console
    }

    pub(super) fn run_dir(&self) -> &RunDir {
        self.run_dir
    }

    pub(super) fn job(&self) -> &JobRun {
        self.job.as_ref().expect("opened as the run starts")
    }

    pub(super) fn ramp(&self) -> &AttemptRamp {
        &self.ramp
    }

    pub(super) fn hooks(&mut self) -> &mut hooks::Pending {
        &mut self.hooks
    }

    /// The attempt's log, `<run dir>/attempt-N.log`, capped at `--log-max`.
    pub(super) fn open_log(&self, attempt: u32) -> Option<AttemptLog> {
        self.run_dir
            .open_log(attempt, self.settings.log_max_bytes, &self.console)
    }

    /// The service manager's watchdog, where it asks for one.
    pub(super) fn watchdog(&self) -> Option<notify::Watchdog> {
        self.notify.watchdog()
    }

    /// The metrics endpoint's server, where `--metrics-addr` asked for one.
    pub(super) fn metrics_server(
        &mut self,
    ) -> Option<impl std::future::Future<Output = ()> + 'static> {
        self.metrics.as_mut().and_then(|m| m.server())
    }

    /// The service manager hears that oomguard is stopping.
    pub(super) fn stopping(&mut self) {
        self.notify.stopping();
    }

    /// summary.json (each attempt, saved as it ends; the end), samples.csv, and report.html.
    fn record_in_run_dir(&mut self, event: &RunEvent) {
        let knobs = &self.knobs;
        match *event {
            RunEvent::Sample { sample, progress } => {
                // A full disk costs rows, not the run: the row stays buffered and is tried again
                // with the next one.
                if let Err(e) = self.samples.write(sample, progress.map(|p| p.steps)) {
                    crate::output::unsaved::unsaved("samples.csv", &e);
                }
                // The largest card NVML showed the job on, in every save of summary.json.
                let capacity = sample
                    .gpu
                    .as_ref()
                    .and_then(|g| g.job_device_capacity_bytes);
                if let Some(limits) = self.summary.limits.as_mut() {
                    limits.gpu_total_bytes = limits.gpu_total_bytes.max(capacity);
                }
            }
            RunEvent::AttemptEnded {
                attempt,
                argv,
                values,
                changed,
                resumed_from,
                hint,
                verdict,
                end,
                room_cut,
            } => {
                let at = knobs.at(values);
                self.summary.push(AttemptRecord {
                    attempt,
                    command: lossy(argv),
                    batch_size: knobs.batch_of(values),
                    accum: knobs.accum_of(values),
                    knobs: at.json(),
                    changed: changed
                        .iter()
                        .map(|&i| knobs.knobs[i].name.clone())
                        .collect(),
                    cause: verdict.cause,
                    evidence: verdict.evidence.clone(),
                    exit_code: end.ending.exit_code(),
                    signal: end.ending.signal(),
                    started_at: record::summary::rfc3339(end.started_at),
                    duration_s: end.duration.as_secs_f64(),
                    peaks: end.peaks.into(),
                    resumed_from: resumed_from.map(|p| p.to_string_lossy().into_owned()),
                    hint: hint.map(policy::Hint::as_str),
                    gpu_devices: end
                        .gpu_at_end
                        .iter()
                        .flat_map(|g| g.job_bytes_by_device.iter().map(|(i, _)| *i))
                        .collect(),
                    room_cut: room_cut.cloned(),
                    probe: end.probe.as_ref().filter(|p| !p.is_empty()).map(|seen| {
                        crate::probe::ProbeRecord {
                            seen: seen.clone(),
                            samples_per_second: seen.samples_per_second(
                                knobs
                                    .batch_of(values)
                                    .map(|b| b * knobs.accum_of(values).unwrap_or(1)),
                            ),
                        }
                    }),
                });
                self.summary.final_sizes = at.sizes();
                // Not saved now (a full disk) is tried again with the next attempt: the run goes
                // on from memory.
                match self.run_dir.save(self.summary, false) {
                    Ok(()) => crate::output::unsaved::saved("summary.json"),
                    Err(e) => crate::output::unsaved::unsaved("summary.json", &e),
                }
            }
            RunEvent::Ended { outcome, exit_code } => self.close(outcome, exit_code.is_some()),
            _ => {}
        }
    }

    /// Ends summary.json (never left `running`) and, unless oomguard itself failed, writes the
    /// page for people (`oomguard report`'s --html) from it. A summary or page that cannot be
    /// written is a warning in the closing lines: the job's exit status stands.
    fn close(&mut self, outcome: Outcome, ran_to_end: bool) {
        let (summary, run_dir) = (&mut *self.summary, self.run_dir);
        if !ran_to_end {
            summary.finish(Outcome::Failed);
            let _ = run_dir.save(summary, true);
            return;
        }
        summary.finish(outcome);
        match run_dir.save(summary, true) {
            Ok(()) => crate::output::unsaved::saved("summary.json"),
            Err(e) => crate::output::unsaved::unsaved("summary.json", &e),
        }
        let page = principal::as_user_if(run_dir.is_users(), || {
            Ok(report::html::write_html(
                &run_dir.files(),
                run_dir.path(),
                &summary.render(),
            ))
        })
        .unwrap_or_else(|e| Err(e.to_string()));
        self.page = Some(page);
    }

    /// The lines the user reads.
    fn say_on_console(&mut self, event: &RunEvent) {
        let report = self.console;
        match event {
            RunEvent::RunStarted => prepare::say_run_started(
                self.settings,
                self.run_dir,
                self.summary,
                report,
                self.metrics.as_ref(),
            ),
            RunEvent::Notice(notice) => self.say_notice(notice),
            RunEvent::Said { warn, line } => match warn {
                true => report.warn(line),
                false => report.say(line),
            },
            RunEvent::AttemptEnded {
                attempt,
                verdict,
                end,
                ..
            } if verdict.cause != Cause::Ok => {
                let last = self.summary.attempts().last().expect("recorded first");
                report.event(
                    "attempt_ended",
                    serde_json::json!({
                        "attempt": attempt,
                        "cause": verdict.cause.as_str(),
                        "evidence": verdict.evidence,
                        "exit_code": last.exit_code,
                        "signal": last.signal,
                        "duration_s": last.duration_s,
                        "knobs": last.knobs,
                        "peaks": last.peaks,
                        "probe": last.probe,
                    }),
                    &format!(
                        "attempt {attempt} ended after {}: {} ({}){}{}",
                        console::short_duration(end.duration),
                        verdict.cause.as_str(),
                        verdict.evidence,
                        console::peaks_clause(&end.peaks),
                        last.probe
                            .as_ref()
                            .map(crate::probe::ProbeRecord::died_at)
                            .map_or(String::new(), |c| format!("; {c}"))
                    ),
                );
            }
            RunEvent::SetAside {
                attempt,
                from,
                to,
                line,
            } => report.event(
                "leftovers_set_aside",
                serde_json::json!({ "attempt": attempt, "from": from, "to": to }),
                line,
            ),
            RunEvent::Relaunching(next) => announce_relaunch(report, next),
            RunEvent::Stopped {
                outcome,
                reason: Some(reason),
            } => report.say(&format!("stopping: {} ({reason})", outcome.as_str())),
            RunEvent::Ended {
                outcome,
                exit_code: Some(code),
            } => self.say_ended(*outcome, *code),
            _ => {}
        }
    }

    /// The table, the last line and where the report page is, then one warning for whatever
    /// could not be saved.
    fn say_ended(&mut self, outcome: Outcome, exit_code: i32) {
        let report = self.console;
        let summary = &*self.summary;
        let summary_path = self.run_dir.path().join("summary.json");
        if console::log_format() == console::LogFormat::Text {
            for line in crate::tell::table::table(summary.attempts()) {
                report.say(&line);
            }
        }
        let last = summary.attempts().last();
        report.event(
            "run_ended",
            serde_json::json!({
                "outcome": outcome.as_str(),
                "exit_code": exit_code,
                "attempts": summary.attempts().len(),
                "cause": last.map(|a| a.cause.as_str()),
                "knobs": last.map(|a| &a.knobs),
                "summary": summary_path,
            }),
            &format!(
                "{}; summary in {}",
                outcome.as_str(),
                summary_path.display()
            ),
        );
        match self.page.take() {
            Some(Ok(page)) => report.event(
                "report_written",
                serde_json::json!({ "report": page }),
                &format!("report in {}", page.display()),
            ),
            Some(Err(why)) => crate::output::unsaved::unsaved("report.html", &why),
            None => {}
        }
        if let Some(line) = crate::output::unsaved::unsaved_summary() {
            report.warn(&line);
        }
        if let Some(line) = crate::output::attempt_log::cut_summary() {
            report.warn(&line);
        }
    }

    /// The job's file: running, waiting, each attempt's values and peaks, how the run ended.
    fn keep_in_job(&mut self, event: &RunEvent) {
        let knobs = &self.knobs;
        let (report, run_dir) = (&self.console, self.run_dir.path());
        // Not yet open while the run's first lines are said.
        let Some(job) = self.job.as_mut() else {
            return;
        };
        match *event {
            RunEvent::AttemptStarted {
                attempt, values, ..
            } => job.attempt_started(attempt, knobs.at(values).json(), run_dir, report),
            RunEvent::Sample {
                sample,
                progress: Some(progress),
            } => job.progress(progress, sample.unix_time_s, report),
            RunEvent::AttemptEnded { .. } => {
                let recorded = self.summary.attempts().last().expect("recorded first");
                job.remember(recorded, run_dir, report);
            }
            RunEvent::RelaunchDecided { ended, values, .. } => {
                job.waiting(ended + 1, knobs.at(values).json(), run_dir, report)
            }
            RunEvent::WaitingForRoom {
                attempt,
                values,
                status,
                ..
            } => job.waiting_for_room(attempt, knobs.at(values).json(), status, run_dir, report),
            RunEvent::Ended { outcome, .. } => job.ended(outcome, report),
            _ => {}
        }
    }

    /// The service manager (systemd's status line, READY=1, the watchdog's memory).
    fn tell_service_manager(&mut self, event: &RunEvent) {
        let knobs = &self.knobs;
        match *event {
            RunEvent::AttemptStarted {
                attempt, values, ..
            } => self.notify.attempt(
                attempt,
                self.settings.limits.max_attempts,
                &knobs.at(values).text(),
            ),
            RunEvent::Sample { sample, .. } => {
                let rss_bytes = (sample.tree.processes > 0).then_some(sample.tree.rss_bytes);
                let gpu_bytes = sample.gpu.as_ref().and_then(|gpu| gpu.job_bytes);
                self.notify.memory(rss_bytes, gpu_bytes);
            }
            RunEvent::RelaunchDecided { ended, delay, .. } => self.notify.waiting(delay, ended + 1),
            RunEvent::WaitingForRoom { status, .. } => self.notify.status(status),
            RunEvent::Stopped { outcome, reason } => self.notify.ended(outcome.as_str(), reason),
            _ => {}
        }
    }

    /// `--metrics-addr` / `--metrics-textfile`.
    fn count_in_metrics(&self, event: &RunEvent) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        match *event {
            RunEvent::AttemptStarted {
                attempt, values, ..
            } => metrics.attempt(attempt, &self.knobs.at(values).text()),
            RunEvent::Sample { sample, progress } => {
                metrics.sample(sample, progress.map(|p| p.steps))
            }
            RunEvent::RelaunchDecided { cause, .. } => metrics.relaunch(cause.as_str()),
            RunEvent::WaitingForRoom { need_bytes, .. } => {
                metrics.waiting_for_room(Some(need_bytes))
            }
            RunEvent::RoomWaitOver => metrics.waiting_for_room(None),
            _ => {}
        }
    }

    /// `--on-relaunch` as a relaunch is decided, `--on-exit` once summary.json has its end (the
    /// hooks may read it); started here, waited for by the run.
    fn start_hooks(&mut self, event: &RunEvent) {
        let (report, run_dir) = (&self.console, self.run_dir);
        let log_max = self.settings.log_max_bytes;
        let open_log = || run_dir.open_hooks_log(log_max);
        match *event {
            RunEvent::RelaunchDecided {
                ended,
                cause,
                values,
                ..
            } => {
                let knobs = self.knobs.at(values).json();
                let occasion = hooks::Occasion {
                    event: hooks::Event::Relaunch,
                    outcome: None,
                    attempt: ended,
                    cause: Some(cause),
                    knobs: &knobs,
                    run_dir: run_dir.path(),
                    job_env: &self.settings.job_context.env,
                };
                self.hooks
                    .start(&self.settings.hooks, &occasion, report, open_log);
            }
            RunEvent::Ended { outcome, .. } => {
                let last = self.summary.attempts().last();
                let last_knobs = last.map(|a| a.knobs.clone()).unwrap_or_default();
                let occasion = hooks::Occasion {
                    event: hooks::Event::Exit,
                    outcome: Some(outcome),
                    attempt: last.map_or(0, |a| a.attempt),
                    cause: last.map(|a| a.cause),
                    knobs: &last_knobs,
                    run_dir: run_dir.path(),
                    job_env: &self.settings.job_context.env,
                };
                self.hooks
                    .start(&self.settings.hooks, &occasion, report, open_log);
            }
            _ => {}
        }
    }
}

impl Observer for Observers<'_> {
    fn sample(&mut self, sample: &Sample) {
        // Read once, at the tick: every listener hears the same steps.
        let progress = self.probe.as_ref().and_then(Channel::progress);
        self.tell(&RunEvent::Sample { sample, progress });
    }

    fn started(&mut self) {
        self.ramp = AttemptRamp::default();
        self.notify.started();
    }

    fn notice(&mut self, notice: &Notice) {
        self.tell(&RunEvent::Notice(notice));
    }
}

impl Observers<'_> {
    /// A notice of the supervisor's, as the console says it (no cgroup: once a run).
    fn say_notice(&mut self, notice: &Notice) {
        let report = self.console;
        match notice {
            Notice::Growth {
                bytes_per_s,
                eta,
                ceiling,
            } => report.warn(&format!(
                "memory grows steadily at {}/min: at this rate it reaches {ceiling} in about {}",
                units::human_bytes((bytes_per_s * 60.0) as u64),
                console::short_duration(*eta)
            )),
            Notice::MemoryStop(crossing) => report.say(&format!(
                "{crossing}: stopping the job (SIGTERM, then SIGKILL after --grace)"
            )),
            Notice::QuietStop(stop) => report.say(&format!(
                "{stop}: stopping the job (SIGTERM, then SIGKILL after --grace)"
            )),
            Notice::NoCgroup(why) if !self.warned_no_cgroup => {
                self.warned_no_cgroup = true;
                report.warn(&format!("running without a memory cgroup: {why}"));
            }
            Notice::NoCgroup(_) => {}
            Notice::TerminalStop { signal } => report.warn(&match *signal {
                Signal::SIGTTIN => "the job is stopped (SIGTTIN): it tried to read the terminal, which a supervised job cannot; \
                     give it its input from a file or pipe (`oomguard run -- CMD < input`), or press Ctrl-C to end the run"
                    .to_string(),
                other => format!(
                    "the job is stopped ({other}): it tried to write to or configure the terminal from the background; \
                     `stty -tostop` lets it write, or press Ctrl-C to end the run"
                ),
            }),
            Notice::GpuUnattributed { pids } => report.warn(&format!(
                "the GPU driver lists PIDs {pids:?}, which appeared with the job but are not in this PID namespace: \
                 oomguard seems to run in a container with its own (run it with the host's, e.g. docker --pid=host); \
                 until then the job's GPU memory is unknown and --max-gpu cannot act"
            )),
        }
    }
}

/// `attempt 3 in 20.0s: --batch_size 16→8, --grad_accum 4→8`, the note when the effective batch
/// could not be kept exactly, and (once a run) that it shrinks without an accumulation flag.
fn announce_relaunch(report: Reporter, next: &Relaunch) {
    let checkpoint = next
        .checkpoint
        .as_ref()
        .map(|c| format!("; {c}"))
        .unwrap_or_default();
    let reason = next
        .reason
        .as_ref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    report.event(
        "relaunch",
        serde_json::json!({
            "attempt": next.attempt,
            "delay_s": next.delay.as_secs_f64(),
            "knobs": next.knobs,
            "changes": next.changes,
            "reason": next.reason,
            "checkpoint": next.checkpoint,
        }),
        &format!(
            "attempt {} in {}: {}{reason}{checkpoint}",
            next.attempt,
            console::short_duration(next.delay),
            next.changes,
        ),
    );
    if let Some(note) = &next.effective_note {
        report.warn(note);
    }
    if let Some(line) = &next.shrinks {
        report.warn(line);
    }
}
