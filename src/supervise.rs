//! Runs one attempt from spawn to the last reaped descendant: forwards signals to the job's
//! process group, stops it on the user's SIGINT/SIGTERM (grace, then SIGKILL; a second SIGINT
//! kills at once), reaps everything below us, cleans up processes the job left behind, and hands
//! back a plain record of what happened. The tokio runtime lives here and nowhere else.
//!
//! It does not classify, decide, or print: `classify`, `policy` and `report` do.

use std::collections::HashSet;
use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::sleep_until;

use crate::child::{self, Guard, Launch, SpawnError};
use crate::classify::KernelEvidence;
use crate::kernel::{self, Kmsg};
use crate::mem::tree::ProcTree;
use crate::outcome::Ending;
use crate::scan;
use crate::stream::{self, Sinks, Target};

/// How often the process tree is re-read while the job runs (to know its PIDs for kernel-log
/// attribution) and reaping is retried in case a SIGCHLD was coalesced.
const TICK: Duration = Duration::from_millis(500);

/// How long to wait for the job's pipes to close after every process of the tree is gone (a
/// process outside our tree may hold a copy of them).
const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// Where kernel evidence is read from; fixtures in tests.
#[derive(Debug, Clone)]
pub struct KernelPaths {
    pub vmstat: PathBuf,
    pub kmsg: PathBuf,
}

impl Default for KernelPaths {
    fn default() -> Self {
        Self {
            vmstat: "/proc/vmstat".into(),
            kmsg: "/dev/kmsg".into(),
        }
    }
}

/// What one attempt did, in plain data.
#[derive(Debug)]
pub struct AttemptEnd {
    pub ending: Ending,
    /// The user's first stop signal (SIGINT or SIGTERM), if any.
    pub user_stop: Option<Signal>,
    pub tail: String,
    pub kernel: KernelEvidence,
    pub started_at: SystemTime,
    /// From spawn to the main process's death.
    pub duration: Duration,
}

/// The signals oomguard listens to for the whole run.
struct Signals {
    child: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> std::io::Result<Signals> {
        Ok(Signals {
            child: signal(SignalKind::child())?,
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// The next signal that matters, SIGCHLD included.
    async fn next(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.child.recv() => Signal::SIGCHLD,
            Some(()) = self.int.recv() => Signal::SIGINT,
            Some(()) = self.term.recv() => Signal::SIGTERM,
            Some(()) = self.hup.recv() => Signal::SIGHUP,
            Some(()) = self.quit.recv() => Signal::SIGQUIT,
            Some(()) = self.usr1.recv() => Signal::SIGUSR1,
            Some(()) = self.usr2.recv() => Signal::SIGUSR2,
        }
    }
}

/// Supervises the attempts of one run. Must be created inside the tokio runtime, on the thread
/// that stays alive for the whole run (the children's parent-death signal is tied to it).
pub struct Supervisor {
    signals: Signals,
    guard: Option<Guard>,
    tree: ProcTree,
    grace: Duration,
    kernel_paths: KernelPaths,
}

impl Supervisor {
    pub fn new(grace: Duration, kernel_paths: KernelPaths) -> std::io::Result<Supervisor> {
        let signals = Signals::register()?;
        if let Err(e) = child::become_subreaper() {
            tracing::warn!("cannot become child subreaper, orphaned grandchildren may escape: {e}");
        }
        let guard = Guard::start()
            .map_err(|e| tracing::warn!("cannot start the guard process, a SIGKILLed oomguard may leave grandchildren: {e}"))
            .ok();
        Ok(Supervisor {
            signals,
            guard,
            tree: ProcTree::default(),
            grace,
            kernel_paths,
        })
    }

    /// Every live or zombie descendant of oomguard except the guard: the previous attempt's
    /// leftovers when no attempt runs.
    fn job_processes(&self) -> Vec<u32> {
        let guard = self.guard.as_ref().map(Guard::pid);
        self.tree
            .descendants(std::process::id())
            .into_iter()
            .filter(|p| Some(*p) != guard)
            .collect()
    }

    /// Sends `signal` to the group and to every descendant outside it (a job may `setsid`).
    fn signal_all(&self, pgid: u32, signal: Signal) {
        child::signal_group(pgid, signal);
        for pid in self.job_processes() {
            child::signal_pid(pid, signal);
        }
    }

    /// Runs one attempt to its end. `log` receives a copy of the output.
    pub async fn run_attempt(
        &mut self,
        launch: &Launch,
        log: Option<File>,
    ) -> Result<AttemptEnd, SpawnError> {
        let vmstat_before = kernel::read_vmstat_oom_kill(&self.kernel_paths.vmstat);
        let mut kmsg = Kmsg::open_at_end(&self.kernel_paths.kmsg);
        let started_at = SystemTime::now();
        let started = Instant::now();
        let spawned = child::spawn(launch)?;
        let pgid = spawned.pid;
        if let Some(guard) = self.guard.as_mut() {
            guard.watch(Some(pgid));
        }
        let sinks = Sinks::new(log);
        let (closed_tx, mut closed_rx) = mpsc::unbounded_channel::<()>();
        let mut open_pipes = 0;
        for (pipe, target) in [
            (
                Box::new(spawned.stdout) as Box<dyn std::io::Read + Send>,
                Target::Stdout,
            ),
            (Box::new(spawned.stderr), Target::Stderr),
        ] {
            let tx = closed_tx.clone();
            match stream::spawn_copier(pipe, target, sinks.clone(), move || {
                // The supervisor may have stopped listening; nothing to tell then.
                let _ = tx.send(());
            }) {
                Ok(_) => open_pipes += 1,
                Err(e) => tracing::error!("cannot forward the job's {target:?}: {e}"),
            }
        }
        drop(closed_tx);

        let mut known: HashSet<u32> = HashSet::from([pgid]);
        let mut phase = Phase::Running;
        let mut user_stop: Option<Signal> = None;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut drain_until: Option<tokio::time::Instant> = None;
        let mut ticker = tokio::time::interval(TICK);
        loop {
            let far = tokio::time::Instant::now() + Duration::from_secs(86400);
            tokio::select! {
                sig = self.signals.next() => match sig {
                    Signal::SIGCHLD => {}
                    Signal::SIGINT if user_stop.is_some() => {
                        tracing::info!("second SIGINT: killing the job's processes");
                        self.signal_all(pgid, Signal::SIGKILL);
                    }
                    Signal::SIGINT | Signal::SIGTERM => {
                        child::signal_group(pgid, sig);
                        if user_stop.is_none() {
                            user_stop = Some(sig);
                            kill_at = Some(tokio::time::Instant::now() + self.grace);
                        }
                    }
                    other => {
                        child::signal_group(pgid, other);
                    }
                },
                Some(()) = closed_rx.recv(), if open_pipes > 0 => open_pipes -= 1,
                _ = ticker.tick() => {}
                _ = sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => {
                    tracing::info!("grace period over: killing the job's processes");
                    self.signal_all(pgid, Signal::SIGKILL);
                    kill_at = None;
                }
                _ = sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => {
                    tracing::warn!("the job's output pipes are still open after all its processes ended; not waiting for them");
                    break;
                }
            }
            let alive = self.job_processes();
            known.extend(alive.iter().copied());
            let reaped = child::reap_ready();
            for &(pid, ending) in &reaped {
                known.insert(pid);
                if pid == pgid {
                    phase = Phase::Ended {
                        ending,
                        duration: started.elapsed(),
                        leftovers_stopped: false,
                    };
                }
            }
            let Phase::Ended {
                leftovers_stopped, ..
            } = &mut phase
            else {
                continue;
            };
            let leftovers: Vec<u32> = alive
                .into_iter()
                .filter(|p| !reaped.iter().any(|(r, _)| r == p))
                .collect();
            if !leftovers.is_empty() && !*leftovers_stopped {
                // The main process is gone; what it left behind is ended gently, then for good.
                *leftovers_stopped = true;
                tracing::info!(
                    "main process ended; stopping {} leftover process(es)",
                    leftovers.len()
                );
                self.signal_all(pgid, Signal::SIGTERM);
                kill_at.get_or_insert(tokio::time::Instant::now() + self.grace);
            }
            if leftovers.is_empty() {
                if open_pipes == 0 {
                    break;
                }
                drain_until.get_or_insert(tokio::time::Instant::now() + PIPE_DRAIN);
            }
        }
        if let Some(guard) = self.guard.as_mut() {
            guard.watch(None);
        }
        let Phase::Ended {
            ending, duration, ..
        } = phase
        else {
            unreachable!("the loop ends only after the main process is reaped")
        };
        let kernel = KernelEvidence {
            vmstat_oom_kill_delta: vmstat_before
                .zip(kernel::read_vmstat_oom_kill(&self.kernel_paths.vmstat))
                .map(|(before, after)| after.saturating_sub(before)),
            victim_lines: kmsg
                .as_mut()
                .map(Kmsg::read_new)
                .unwrap_or_default()
                .into_iter()
                .filter(|line| {
                    scan::kernel_oom_victim_pid(line).is_some_and(|pid| known.contains(&pid))
                })
                .collect(),
            cgroup_oom_kills: None,
        };
        Ok(AttemptEnd {
            ending,
            user_stop,
            tail: sinks.tail_text(),
            kernel,
            started_at,
            duration,
        })
    }

    /// Waits `delay` before a relaunch; returns the user's stop signal if one came first.
    pub async fn pause(&mut self, delay: Duration) -> Option<Signal> {
        let until = tokio::time::Instant::now() + delay;
        loop {
            tokio::select! {
                _ = sleep_until(until) => return None,
                sig = self.signals.next() => {
                    if matches!(sig, Signal::SIGINT | Signal::SIGTERM) {
                        return Some(sig);
                    }
                    child::reap_ready();
                }
            }
        }
    }

    /// Ends the run: the guard is told nothing needs killing.
    pub fn finish(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.release();
        }
    }
}

/// Where an attempt stands.
enum Phase {
    Running,
    /// The main process was reaped; leftovers and pipes may still be draining.
    Ended {
        ending: Ending,
        duration: Duration,
        leftovers_stopped: bool,
    },
}
