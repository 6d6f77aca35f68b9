//! One `oomguard run`: a job's attempts, each launched, run, judged, learned from and decided
//! on, until the job succeeds, fails for a reason of its own, or out-of-memory deaths outlast
//! every remedy.
//!
//! [`Run`] owns what a run needs between its attempts: the supervisor, the settings, where the
//! run stands on the knobs ([`ladder`]), the user's config files and everyone who hears how the
//! run goes ([`events`]: console, run directory, job memory, service manager, metrics, hooks).
//! Its loop, [`Run::attempts`], reads as the steps of one attempt; the steps live beside it:
//! [`prepare`] checks what can be checked before anything starts, [`launch`] builds an attempt's
//! argv and environment, [`waits`] holds the waits between attempts (hooks, the GPU letting go,
//! checkpoints settling, the backoff), [`aside`] sets aside what a failed attempt left where
//! the next one refused to start over it.
//!
//! It does not spawn or watch processes ([`crate::supervise`]), name causes
//! ([`crate::judge::classify`]) or choose the next values ([`crate::decide::policy`]): it carries
//! their results from one to the next.
//!
//! It stands at the top with [`crate::commands`]: it may import every folder, and only the
//! crate's entry imports it.

mod aside;
mod events;
mod ladder;
mod launch;
mod prepare;
mod room;
mod waits;

use nix::sys::signal::Signal;

use crate::decide::policy::Decision;
use crate::error::{Error, EXIT_GAVE_UP};
use crate::front::settings::{CgroupPlan, RunSettings};
use crate::judge::classify::{self, AttemptFacts, Verdict};
use crate::judge::outcome::Outcome;
use crate::knobs::patch::Patcher;
use crate::launch::child::Launch;
use crate::observe::sampler::Sampler;
use crate::output::console::Reporter;
use crate::supervise::{AttemptEnd, KernelPaths, Setup, Supervisor};
use crate::{launch::signals, launch::terminal, observe::gpu, output::stream};

use events::{Observers, RunEvent};
use ladder::Ladder;
use prepare::Ready;

/// `oomguard run`: checks what can be checked before anything starts, then runs the attempts
/// in a run directory, and gives the user's files back however the run ends.
pub fn run_job(mut settings: RunSettings, report: Reporter) -> Result<i32, Error> {
    prepare::enter_job_context(&settings, &report)?;
    prepare::places_as_whom(&mut settings)?;
    // Found as the job will be: with its PATH, and as its user (see child::resolve_program_for).
    let context = &settings.job_context;
    let found = crate::launch::child::resolve_program_for(
        &settings.command[0],
        context.path_var().as_deref(),
        context.run_as.as_ref(),
    );
    if let Some(cause) = settings.dry_run {
        // A plan can be made where the job's program is not installed (a codebase's console
        // script on a laptop): one line says so and the command is read as written. Only a
        // program that is there but cannot be run is refused.
        let missing = match found {
            Err(crate::launch::child::SpawnError::NotFound(program))
            | Err(crate::launch::child::SpawnError::NotFoundFor(program, _)) => format!(
                "not installed here: {program} (command not found): the plan reads the command as written; a real run refuses it\n"
            ),
            other => {
                other?;
                String::new()
            }
        };
        // The plan shows a job file's values, which its user wrote: escaped for the terminal.
        print!(
            "{}",
            crate::output::console::printable_lines(&format!(
                "{missing}{}",
                crate::front::dry_run::plan(&settings, cause)
            ))
        );
        return Ok(0);
    }
    found?;
    let mut ready = Ready::new(&settings)?;
    let result = run_in(&settings, &mut ready, report);
    ready.give_back(&result, report);
    result
}

pub use prepare::recover_patched_files;

/// The run itself, once it is ready: its record started, the GPU opened, the runtime and the
/// output writers up, then the attempts.
fn run_in(settings: &RunSettings, ready: &mut Ready, report: Reporter) -> Result<i32, Error> {
    let Ready {
        run_dir,
        files,
        summary,
        cgroup,
        metrics,
    } = ready;
    run_dir.save(summary, false).map_err(Error::RunDir)?;
    let mut observers = Observers::start(settings, report, run_dir, summary, metrics.take())?;
    let (gpu, gpu_off) = gpu::open();
    if let Some(reason) = gpu_off {
        observers.say(&reason);
        if settings.bounds.max_gpu_bytes.is_some() {
            observers.warn("--max-gpu cannot act without GPU monitoring");
        }
    }
    let setup = Setup {
        grace: settings.grace,
        interval: settings.interval,
        kernel_paths: KernelPaths::default(),
        cgroup: cgroup.take(),
        bounds: settings.bounds,
        trend_window: settings.trend_window,
        pty: settings.pty && terminal::wanted(),
        quiet: settings.quiet,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Internal {
            action: "cannot start the async runtime",
            source,
        })?;
    let metrics_server = observers.metrics_server();
    // From here on the job's output and our own lines go through the writer threads, so a slow
    // reader of our output never costs the log, the classifier or the attempt's end a byte.
    stream::install().map_err(|source| Error::Internal {
        action: "cannot start forwarding the job's output",
        source,
    })?;
    let watchdog = observers.watchdog();
    let result = runtime.block_on(async {
        // Pings only while this runtime turns, i.e. while the attempt loop is alive.
        if let Some(watchdog) = watchdog {
            tokio::spawn(watchdog.run());
        }
        if let Some(server) = metrics_server {
            tokio::spawn(server);
        }
        let mut sampler = Sampler::new(gpu);
        sampler.read_pss(settings.pss_interval, settings.bounds.max_rss_bytes);
        let supervisor = Supervisor::new(setup, sampler).map_err(|source| Error::Internal {
            action: "cannot listen for signals",
            source,
        })?;
        Run::new(settings, supervisor, files.as_mut(), observers)
            .attempts()
            .await
    });
    // Like `tee`, oomguard ends only once every byte of the job's output is written out; a stop
    // signal (Ctrl-C at a terminal paused with Ctrl-S) or Ctrl-Z acts on that wait as on `tee`'s.
    signals::default_stops();
    stream::finish();
    result
}

/// A run between its start and its end: what carries over from one attempt to the next.
struct Run<'a> {
    settings: &'a RunSettings,
    supervisor: Supervisor,
    ladder: Ladder,
    /// The user's config files the knobs are written into, given back at the end.
    files: Option<&'a mut Patcher>,
    observers: Observers<'a>,
    /// What the run knows of a shared card between attempts.
    shared: room::Shared,
    /// When attempt 1 started, and the last setting aside of an attempt's leftovers.
    aside: aside::Aside,
    /// Where the probe's `sitecustomize.py` is, for a Python job (not `--no-probe`).
    probe_dir: Option<std::path::PathBuf>,
    /// The probe's pipe of the attempt under way.
    probe: Option<crate::probe::Channel>,
}

/// How the run ends: its outcome and exit status, or oomguard's own error.
type Ended = Result<(Outcome, i32), Error>;

impl<'a> Run<'a> {
    fn new(
        settings: &'a RunSettings,
        mut supervisor: Supervisor,
        files: Option<&'a mut Patcher>,
        mut observers: Observers<'a>,
    ) -> Run<'a> {
        if let Some(files) = files.as_deref() {
            supervisor.guard_files(&files.journal_paths());
        }
        let ladder = Ladder::for_job(settings, observers.job());
        let probe_dir = probe_dir(settings, &mut observers);
        Run {
            settings,
            supervisor,
            ladder,
            files,
            observers,
            shared: room::Shared::default(),
            aside: aside::Aside::default(),
            probe_dir,
            probe: None,
        }
    }

    /// The attempts, one after the other until one decides how the run ends; then the end.
    async fn attempts(mut self) -> Result<i32, Error> {
        let ended = loop {
            match self.attempt().await {
                Ok(None) => continue,
                Ok(Some(done)) => break Ok(done),
                Err(e) => break Err(e),
            }
        };
        self.end(ended).await
    }

    /// One attempt: launch, run, judge, learn, decide, wait. `Some` where the run ends here.
    async fn attempt(&mut self) -> Result<Option<(Outcome, i32)>, Error> {
        let attempt = self.ladder.next_attempt();
        if let Some(signal) = self.before_attempt().await {
            return Ok(Some(interrupted(signal)));
        }
        let mut launch = self.launch()?;
        self.observers.tell(&RunEvent::AttemptStarted {
            attempt,
            values: &self.ladder.values,
            probe: self.probe.as_ref(),
        });
        let log = self.observers.open_log(attempt);
        self.aside.attempt_starts();
        let mut end = self
            .supervisor
            .run_attempt(attempt, &launch, log, &mut self.observers)
            .await?;
        let (probe, stop) = self.probe_heard(&mut launch).await;
        end.probe = probe;
        // Before the attempt is told, so its record has the knobs it ran with; said after.
        let not_taken = self.inside_not_taken(&end);
        let found_inside = self.adopt_inside(&end);
        let verdict = self.judge_taken(&end, judge(&end));
        let (verdict, refusal) = aside::judge_refusal(attempt, &end, verdict);
        self.tell_ended(attempt, &launch, &verdict, &end);
        if let Some(line) = not_taken {
            self.observers.warn(&line);
        }
        if let Some(line) = found_inside {
            self.observers.say(&line);
        }
        self.ladder
            .learn(self.settings, verdict.cause, &end, self.observers.ramp());
        if let Some(signal) = stop {
            // The user stopped the run while the probe's last lines were awaited: the attempt
            // is recorded, nothing more starts.
            return Ok(Some(interrupted(signal)));
        }
        let decision = match self
            .room_for_relaunch(&end, self.ladder.decide(self.settings))
            .await
        {
            Ok(decision) => decision,
            Err(signal) => return Ok(Some(interrupted(signal))),
        };
        let decision = match (refusal, decision) {
            (Some(refusal), Decision::Relaunch(next)) => self.set_aside(attempt, &refusal, next),
            (_, decision) => decision,
        };
        match decision {
            Decision::Relaunch(next) => {
                self.observers.tell(&RunEvent::RelaunchDecided {
                    ended: attempt,
                    cause: verdict.cause,
                    values: &next.values,
                    delay: next.delay,
                });
                Ok(self.between_attempts(&end, next).await.map(interrupted))
            }
            Decision::Stop { outcome, reason } => {
                let reason = self.with_loader_fix(outcome, reason, &end);
                self.observers.tell(&RunEvent::Stopped {
                    outcome,
                    reason: reason.as_deref(),
                });
                Ok(Some((outcome, exit_code(outcome, &end))))
            }
        }
    }

    /// The attempt that ended, as every observer hears it (the ladder still holds the values it
    /// ran with and the hint it was given).
    fn tell_ended(&mut self, attempt: u32, launch: &Launch, verdict: &Verdict, end: &AttemptEnd) {
        let hint = self.ladder.hint_pending.take();
        self.observers.tell(&RunEvent::AttemptEnded {
            attempt,
            argv: &launch.argv,
            values: &self.ladder.values,
            changed: &self.ladder.changed,
            resumed_from: self.ladder.resume_from.as_deref(),
            hint,
            verdict,
            end,
            room_cut: self.ladder.room_cut.as_ref(),
        });
    }

    /// The run's end: the user's files come back while the guard still watches, everyone hears
    /// how it ended, the exit hooks run, then the guard is let go.
    async fn end(mut self, ended: Ended) -> Result<i32, Error> {
        if let Ok((Outcome::Interrupted, _)) = ended {
            self.observers.tell(&RunEvent::Stopped {
                outcome: Outcome::Interrupted,
                reason: None,
            });
        }
        if let Some(files) = self.files.as_deref_mut() {
            for line in files.finish() {
                self.observers.warn(&line);
            }
        }
        let outcome = ended
            .as_ref()
            .map_or(Outcome::Failed, |(outcome, _)| *outcome);
        self.observers.tell(&RunEvent::Ended {
            outcome,
            exit_code: ended.as_ref().ok().map(|(_, code)| *code),
        });
        // A stop signal here only cuts the exit hooks short: the run's status is decided.
        let _ = self.wait_hooks().await;
        self.supervisor.finish();
        self.observers.stopping();
        ended.map(|(_, code)| code)
    }
}

impl Run<'_> {
    /// What the probe said of the attempt that ended: oomguard's write end dropped, then the
    /// job's last lines read where its processes closed theirs within a moment. The wait ends
    /// on the user's stop signal, which is returned.
    async fn probe_heard(
        &mut self,
        launch: &mut Launch,
    ) -> (Option<crate::probe::ProbeSummary>, Option<Signal>) {
        launch.probe_fd = None;
        let Some(channel) = self.probe.take() else {
            return (None, None);
        };
        let deadline = std::time::Instant::now() + PROBE_LAST_LINES;
        let mut stop = None;
        while !channel.wait_closed(PROBE_LOOK) && std::time::Instant::now() < deadline {
            // Signals queue while the thread waits on the pipe; a stop among them ends the wait.
            if let Some(signal) = self.supervisor.pause(std::time::Duration::ZERO).await {
                stop = Some(signal);
                break;
            }
        }
        (Some(channel.summary()), stop)
    }
}

impl Run<'_> {
    /// The knobs the probe saw inside the job join the run's where they fill what the command
    /// lacks (a batch, or its accumulation), in effect from the next attempt; the line that
    /// says so is returned. The attempt that showed them ran at their originals.
    fn adopt_inside(&mut self, end: &AttemptEnd) -> Option<String> {
        let seen = end.probe.as_ref().map(|p| &p.knobs)?;
        let settings = self.settings;
        let adopted = crate::knobs::inside::adopt(
            &self.ladder.knobs,
            &settings.command,
            seen,
            settings.min_batch,
        )?;
        self.observers.adopt_knobs(adopted.set.clone());
        self.ladder
            .adopt(adopted.set, settings, self.observers.job());
        Some(format!("found inside the job: {}", adopted.line))
    }

    /// The warning for an attempt that was to have values set inside the job where no process
    /// said it took them: it ran at the job's own sizes, and the relaunch line did not hold.
    fn inside_not_taken(&self, end: &AttemptEnd) -> Option<String> {
        let asked = crate::knobs::inside::set_var(&self.ladder.knobs, &self.ladder.values)?;
        let took = end
            .probe
            .as_ref()
            .is_some_and(|p| p.knobs.frameworks.iter().any(|f| f.set));
        (!took).then(|| {
            format!(
                "the job built no arguments object the probe could set ({}={asked} was not taken): this attempt ran at the job's own sizes",
                crate::knobs::inside::SET_VAR
            )
        })
    }

    /// A run that gives up with no batch to move says where the job's DataLoader took its
    /// batch, and the fix, where the probe saw one.
    fn with_loader_fix(
        &self,
        outcome: Outcome,
        reason: Option<String>,
        end: &AttemptEnd,
    ) -> Option<String> {
        if outcome != Outcome::GaveUp || self.ladder.knobs.batch().is_some() {
            return reason;
        }
        let line = end
            .probe
            .as_ref()
            .and_then(|p| crate::knobs::inside::loader_line(&p.knobs));
        match line {
            Some(line) => Some(format!(
                "no batch found in the command, its files or inside the job; {line}"
            )),
            None => reason,
        }
    }
}

/// The longest the probe's last lines (a process's final step, written at exit) are waited
/// for once the attempt ended. Every process of the job is gone by then (oomguard is their
/// subreaper and waits for the whole tree), so the pipe is already closed and this is only the
/// reader thread's time to drain it, which a loaded machine can stretch past a fraction of a
/// second; the bound is for a process outside the tree that was handed the descriptor.
const PROBE_LAST_LINES: std::time::Duration = std::time::Duration::from_secs(5);

/// How long one look at the probe's pipe blocks before the user's signals are looked at.
const PROBE_LOOK: std::time::Duration = std::time::Duration::from_millis(50);

/// Where the probe lives for this run: a new `probe-XXXXXX/` in the run directory, for a Python
/// command unless `--no-probe`; `None` (said once) where it cannot be written.
fn probe_dir(settings: &RunSettings, observers: &mut Observers) -> Option<std::path::PathBuf> {
    if !settings.probe || !crate::probe::runs_python(&settings.command) {
        return None;
    }
    match observers.run_dir().write_probe(crate::probe::SITECUSTOMIZE) {
        Ok(dir) => {
            observers.say(
                "probe: on, the job's optimizer steps are seen from inside (--no-probe turns it off)",
            );
            Some(dir)
        }
        Err(e) => {
            observers.warn(&format!(
                "probe off: cannot write it into the run directory: {e}"
            ));
            None
        }
    }
}

/// The run ends on the user's stop signal.
fn interrupted(signal: Signal) -> (Outcome, i32) {
    (Outcome::Interrupted, 128 + signal as i32)
}

/// Why the attempt ended, from everything the supervisor gathered.
fn judge(end: &AttemptEnd) -> Verdict {
    let memory_limit = end.memory_stop.as_ref().map(ToString::to_string);
    classify::classify(&AttemptFacts {
        ending: end.ending,
        tail: &end.tail,
        kernel: &end.kernel,
        // A stop that came after the job had already succeeded (while its leftovers were
        // being cleaned up) does not undo the success.
        user_stopped: end
            .user_stop
            .is_some_and(|stop| !(stop.after_exit && end.ending.is_success())),
        memory_limit: memory_limit.as_deref(),
        sigkilled_descendant: end.sigkilled_descendant,
        quiet_stop: end.quiet_stop.as_ref(),
    })
}

/// The run's exit status for an outcome decided after `end`.
fn exit_code(outcome: Outcome, end: &AttemptEnd) -> i32 {
    match outcome {
        Outcome::Succeeded => 0,
        Outcome::GaveUp => EXIT_GAVE_UP,
        Outcome::Failed => end.ending.shell_code(),
        // With no signal to oomguard, the stop was a cancel through Slurm (see
        // `classify::classify`): SIGTERM, as scancel stops tasks and as oomguard inside sbatch
        // would have got it, so a run ends 143 however scancel reached it.
        Outcome::Interrupted => {
            128 + end.user_stop.map_or(Signal::SIGTERM, |stop| stop.signal) as i32
        }
    }
}

/// `--memory-max`, where given.
fn own_limit_bytes(settings: &RunSettings) -> Option<u64> {
    match settings.cgroup {
        CgroupPlan::Required(limits) => limits.memory_max_bytes,
        _ => None,
    }
}
