//! The waits of a run between its attempts: the hooks still running, `--resume-first`'s
//! checkpoint before attempt 1, and before a relaunch the GPU letting go of the last attempt,
//! the checkpoints settling and the backoff. Each wait ends early on the user's stop signal,
//! which it returns. What to relaunch with is decided before ([`super::ladder`]); nothing here
//! chooses values.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;

use crate::output::console;
use crate::supervise::{self, AttemptEnd, GpuWait, Supervisor};
use crate::{decide::policy, decide::resume, tell::hooks};

use super::events::{Observers, Relaunch, RunEvent};

impl super::Run<'_> {
    /// Before each attempt: `--resume-first`'s checkpoint for attempt 1, and the relaunch hooks
    /// of the last attempt done (or killed at their limit). Returns the user's stop signal if
    /// one came.
    pub(super) async fn before_attempt(&mut self) -> Option<Signal> {
        let settings = self.settings;
        if self.ladder.first() {
            if let Err(signal) = self.room_before_first().await {
                return Some(signal);
            }
        }
        if let (true, Some(resume)) = (
            self.ladder.first(),
            settings.resume.as_ref().filter(|r| r.first),
        ) {
            let (supervisor, observers) = (&mut self.supervisor, &mut self.observers);
            match resume_first(supervisor, settings.interval, resume, observers).await {
                Ok(path) => self.ladder.resume_from = path,
                Err(signal) => return Some(signal),
            }
        }
        self.wait_hooks().await
    }

    /// Waits for the hooks still running, each at most until its limit; on the user's stop
    /// signal kills them and returns it.
    pub(super) async fn wait_hooks(&mut self) -> Option<Signal> {
        let report = self.observers.console();
        let run_dir = self.observers.run_dir().path().to_path_buf();
        let hooks = self.observers.hooks();
        while !hooks.check(Instant::now(), &report, &run_dir) {
            if let Some(signal) = self.supervisor.pause(hooks::POLL).await {
                hooks.kill_all(&report);
                return Some(signal);
            }
        }
        None
    }

    /// Between an attempt and the next: wait for the GPU to let go of the last one, look at
    /// the checkpoints, say what moves, wait the backoff, and move the ladder to `next`.
    /// Returns the user's stop signal if one came.
    pub(super) async fn between_attempts(
        &mut self,
        end: &AttemptEnd,
        next: policy::Next,
    ) -> Option<Signal> {
        let settings = self.settings;
        let attempt = self.ladder.next_attempt() - 1;
        // Checkpoints written since the run started; any, with --resume-first (a relaunch
        // should not start over where attempt 1 did not).
        let since = settings
            .resume
            .as_ref()
            .and_then(|r| (!r.first).then_some(self.ladder.started));
        // The first look at the checkpoints as the attempt ends: the GPU wait counts towards
        // the interval over which their sizes must hold.
        let stop = resume::Stop {
            open: end.writing_at_stop.clone(),
            began: end.stop_began,
            window: settings.interval,
        };
        let watch = settings.resume.as_ref().map(|resume| {
            resume::Watch::start(resume.scan(since), Instant::now(), settings.interval)
        });
        let timeout = settings.gpu_free_timeout;
        let (supervisor, observers) = (&mut self.supervisor, &mut self.observers);
        let gpu = wait_gpu_free(supervisor, attempt, &end.pids, timeout, observers);
        if let Some(signal) = gpu.await {
            return Some(signal);
        }
        let mut delay = next.delay;
        let mut checkpoint = None;
        if let (Some(resume), Some(watch)) = (&settings.resume, watch) {
            let backoff_end: Instant = supervise::deadline_after(delay);
            let looks = Looks {
                resume,
                newer_than: since,
                stop: &stop,
            };
            let pick = match looks
                .settle(
                    &mut self.supervisor,
                    &mut self.observers,
                    watch,
                    backoff_end,
                )
                .await
            {
                Ok(pick) => pick,
                Err(signal) => return Some(signal),
            };
            // The looks were part of the backoff: what is left of it follows.
            delay = backoff_end.saturating_duration_since(Instant::now());
            checkpoint = Some(pick.clause(&resume.pattern, since.is_some()));
            self.ladder.resume_from = pick.chosen;
        }
        self.tell_relaunching(attempt + 1, delay, checkpoint, &next);
        if let Some(signal) = self.supervisor.pause(delay).await {
            return Some(signal);
        }
        self.ladder.advance(next);
        None
    }

    /// The relaunch line (what moves, when, on what grounds, from which checkpoint), and once a
    /// run the warning that the effective batch shrinks.
    fn tell_relaunching(
        &mut self,
        attempt: u32,
        delay: Duration,
        checkpoint: Option<String>,
        next: &policy::Next,
    ) {
        let knobs = &self.ladder.knobs;
        let changes = match next.hint {
            Some(policy::Hint::AllocatorFragmentation) => format!(
                "{}={} (knobs unchanged)",
                policy::ALLOCATOR_HINT_VAR,
                policy::ALLOCATOR_HINT_VALUE
            ),
            None => knobs.describe_changes(&self.ladder.values, &next.values, &next.changed),
        };
        let shrinks = knobs
            .shrink_note(&self.ladder.original, &next.values, &next.changed)
            .filter(|_| !std::mem::replace(&mut self.ladder.warned_effective, true));
        self.observers.tell(&RunEvent::Relaunching(Relaunch {
            attempt,
            changes,
            delay,
            reason: next.reason.clone(),
            checkpoint,
            knobs: knobs.at(&next.values).json(),
            effective_note: next.effective_note.clone(),
            shrinks,
        }));
    }
}

/// Where the checkpoints are looked for before a relaunch: `--checkpoint`'s files written
/// since `newer_than`; the one picked must not be one oomguard's `stop` cut short.
struct Looks<'a> {
    resume: &'a resume::Resume,
    newer_than: Option<SystemTime>,
    stop: &'a resume::Stop,
}

impl Looks<'_> {
    /// Looks at the checkpoints again whenever the [`resume::Watch`] asks, until it can pick;
    /// returns the user's stop signal if one came during a wait.
    async fn settle(
        &self,
        supervisor: &mut Supervisor,
        observers: &mut Observers<'_>,
        mut watch: resume::Watch,
        backoff_end: Instant,
    ) -> Result<resume::Pick, Signal> {
        let mut told = false;
        while let Some(wait) = watch.wait(Instant::now(), backoff_end) {
            if let (Some(path), false) = (watch.changing(), told) {
                told = true;
                observers.say(
                    &format!(
                        "{} is still being written: waiting up to {} (the rest of the backoff) for it to be complete",
                        path.display(),
                        console::short_duration(backoff_end.saturating_duration_since(Instant::now()))
                    ),
                );
            }
            if let Some(signal) = supervisor.pause(wait).await {
                return Err(signal);
            }
            watch.look(self.resume.scan(self.newer_than), Instant::now());
        }
        Ok(watch.pick(|candidate| {
            resume::judge(candidate, self.stop, || resume::read_shape(candidate))
        }))
    }
}

/// `--resume-first`: the newest complete checkpoint of any age, for attempt 1.
async fn resume_first(
    supervisor: &mut Supervisor,
    interval: Duration,
    resume: &resume::Resume,
    observers: &mut Observers<'_>,
) -> Result<Option<PathBuf>, Signal> {
    let watch = resume::Watch::start(resume.scan(None), Instant::now(), interval);
    // No attempt yet, so no stop of oomguard's: only the files' formats are checked.
    let no_stop = resume::Stop::default();
    let looks = Looks {
        resume,
        newer_than: None,
        stop: &no_stop,
    };
    let pick = looks
        .settle(supervisor, observers, watch, Instant::now())
        .await?;
    observers.say(&format!(
        "attempt 1: {}",
        pick.clause(&resume.pattern, false)
    ));
    Ok(pick.chosen)
}

/// Before a relaunch, waits (bounded, logged) until the GPU driver has let go of the last
/// attempt's processes, so the next attempt does not start on a GPU still full. Returns the
/// user's stop signal if one came during the wait.
async fn wait_gpu_free(
    supervisor: &mut Supervisor,
    attempt: u32,
    pids: &HashSet<u32>,
    timeout: Duration,
    observers: &mut Observers<'_>,
) -> Option<Signal> {
    let started = Instant::now();
    let holders = match supervisor.wait_gpu_free(pids, Duration::ZERO).await {
        GpuWait::StillHeld(holders) => holders,
        GpuWait::Stopped(signal) => return Some(signal),
        GpuWait::NoGpu | GpuWait::Free => return None,
    };
    observers.say(
        &format!(
            "waiting up to {} for the GPU to free attempt {attempt}'s memory (PIDs {holders:?} still listed)",
            console::short_duration(timeout)
        ),
    );
    let waited = || console::short_duration(started.elapsed());
    match supervisor.wait_gpu_free(pids, timeout).await {
        GpuWait::StillHeld(left) => {
            observers.warn(&format!(
                "the GPU still lists PIDs {left:?} after {}; relaunching anyway",
                waited()
            ));
            None
        }
        GpuWait::Stopped(signal) => Some(signal),
        GpuWait::NoGpu | GpuWait::Free => {
            observers.say(&format!("GPU free after {}", waited()));
            None
        }
    }
}
