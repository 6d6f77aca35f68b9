//! Runs one attempt from spawn to the last reaped descendant, and the waits between attempts that
//! need its signals: the async side of an attempt (signal streams, timers; [`mod@crate::run`]
//! awaits these methods) and the one place where the running job's processes are signalled
//! ([`crate::launch::child`] holds the calls). It puts the job in its own memory cgroup where it
//! can, gives it a pseudo-terminal under a terminal, streams its output, reaps everything below us,
//! and hands back a plain record of what happened ([`AttemptEnd`]).
//!
//! What to do about each wake-up (a signal, the grace period over, the main process's end, its
//! leftovers, a soft bound held, the job gone quiet) is decided by the attempt's rules,
//! [`attempt`], which touch nothing: this module turns wake-ups into calls of
//! [`attempt::Attempt::on_wake`] and its acts into signals. Sampling and the quiet watch's tick
//! are [`sampling`]'s, the kernel's evidence [`evidence`]'s, the job's Slurm steps [`steps`]'s.
//!
//! It does not classify, decide or print: [`crate::judge::classify`], [`crate::decide::policy`] and
//! [`crate::output::console`] do (samples and notices go to an [`Observer`] the caller provides);
//! it only asks `classify` whether a silent job's output shows an out-of-memory error.
//!
//! It may import the layers below it (launch, output, observe, judge, remember, ...), never
//! [`crate::tell`] beside it nor the front door or the run loop above.

use std::collections::HashSet;
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant as TokioInstant};

use crate::judge::classify::KernelEvidence;
use crate::judge::outcome::Ending;
use crate::judge::quiet::{self, QuietStop, QuietWatch};
use crate::judge::taken::HostReading;
use crate::launch::child::{self, ChildEvent, Guard, JobOutput, Launch, SpawnError};
use crate::launch::signals::Deliveries;
use crate::launch::terminal::{self, Pty};
use crate::observe::cgroup::{self, JobCgroup, Parent};
use crate::observe::gpu::JobGpu;
use crate::observe::mem::tree::ProcTree;
use crate::observe::sampler::{Peaks, Sample, Sampler};
use crate::observe::slurm::{self, Step};
use crate::observe::watch::{Bounds, Crossing};
use crate::output::attempt_log::AttemptLog;
use crate::output::stream::{self, Sinks, Target};

mod attempt;
mod evidence;
mod sampling;
mod steps;

use attempt::{Act, Attempt};
use evidence::{is_unexplained_sigkill, EvidenceBefore};
pub use evidence::{open_for_writing, KernelPaths};
use sampling::{Look, SampleWatch};
use steps::SrunSteps;

/// Once every process of the tree is gone, how long the job's pipes may stay open with nothing
/// coming through them before oomguard stops waiting (a process outside our tree may hold a copy
/// of them). Any byte read starts the wait again.
const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// How often the GPU is asked whether the last attempt's processes are gone.
const GPU_FREE_POLL: Duration = Duration::from_millis(200);

/// How attempts are supervised.
pub struct Setup {
    pub grace: Duration,
    pub interval: Duration,
    pub kernel_paths: KernelPaths,
    /// Where attempt cgroups are made, and their limits; `None` to run without.
    pub cgroup: Option<(Parent, cgroup::Limits)>,
    pub bounds: Bounds,
    pub trend_window: Duration,
    /// Give the job a pseudo-terminal for its stdout and stderr (oomguard's own are terminals
    /// and `--no-pty` was not given); pipes otherwise.
    pub pty: bool,
    /// `--hang-timeout` and `--stall-timeout`: how long the job may stay quiet.
    pub quiet: quiet::Timeouts,
}

/// Something the user should hear about while an attempt runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// Memory grows steadily and would reach `ceiling` in `eta`.
    Growth {
        bytes_per_s: f64,
        eta: Duration,
        ceiling: String,
    },
    /// A soft bound held for several samples: the job is being stopped gracefully.
    MemoryStop(Crossing),
    /// The attempt's cgroup could not be made; it runs without one.
    NoCgroup(String),
    /// The job stopped itself by reading (SIGTTIN) or writing (SIGTTOU, with `stty tostop`) the
    /// terminal from the background: it waits for input oomguard cannot give it.
    TerminalStop { signal: Signal },
    /// The GPU driver lists, while the job runs, processes that appeared after it started and
    /// that this PID namespace cannot see, none of them the job's: oomguard most likely runs in
    /// a container with its own PID namespace, the job's GPU memory is unknown, and `--max-gpu`
    /// cannot act. (Processes listed before the job started are a shared card's neighbours,
    /// not evidence of a namespace.)
    GpuUnattributed { pids: Vec<u32> },
    /// The job went quiet (see [`QuietStop`]): it is being stopped gracefully.
    QuietStop(QuietStop),
}

/// How the wait for a free GPU ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuWait {
    /// There is no GPU to ask.
    NoGpu,
    /// The driver no longer lists any of the attempt's processes.
    Free,
    /// The timeout passed with these PIDs still listed.
    StillHeld(Vec<u32>),
    /// The user asked oomguard to stop.
    Stopped(Signal),
}

/// Receives what an attempt produces while it runs.
pub trait Observer {
    fn sample(&mut self, sample: &Sample);
    fn notice(&mut self, notice: &Notice);
    /// The attempt's job was spawned and runs (the service manager hears `READY=1`).
    fn started(&mut self) {}
}

/// What one attempt did, in plain data.
#[derive(Debug)]
pub struct AttemptEnd {
    pub ending: Ending,
    /// The user's first stop request, if any.
    pub user_stop: Option<UserStop>,
    /// The soft bound that made oomguard stop the job, if any.
    pub memory_stop: Option<Crossing>,
    pub tail: String,
    pub kernel: KernelEvidence,
    pub started_at: SystemTime,
    /// From spawn to the main process's death.
    pub duration: Duration,
    pub peaks: Peaks,
    /// Every PID seen in the job's tree.
    pub pids: HashSet<u32>,
    /// A process of the job other than the main one that died of SIGKILL and was reaped
    /// before oomguard stopped the job's leftovers (so oomguard did not send that SIGKILL).
    pub sigkilled_descendant: Option<u32>,
    /// Why oomguard stopped the job for going quiet, if it did.
    pub quiet_stop: Option<QuietStop>,
    /// The files (device, inode) a process of the job had open for writing when oomguard
    /// stopped it (its leftovers after the main process ended, or the job on a soft bound or
    /// going quiet): a checkpoint among them was cut short and is never resumed from.
    pub writing_at_stop: HashSet<(u64, u64)>,
    /// When oomguard first asked living processes of the job to stop (its leftovers after the
    /// main process ended, or the job on a soft bound or going quiet); `None` when it never had
    /// to. A checkpoint written shortly before may have been cut by the stop although no
    /// process had it open at that instant ([`crate::decide::resume::judge`]).
    pub stop_began: Option<SystemTime>,
    /// The card at the attempt's first and last readings while the job had processes (who
    /// held what at its start and at its death); `None` without GPU readings.
    pub gpu_at_start: Option<JobGpu>,
    pub gpu_at_end: Option<JobGpu>,
    /// The machine's memory and the job's share at the same two moments.
    pub host_at_start: Option<HostReading>,
    pub host_at_end: Option<HostReading>,
    /// What the probe saw of the job's steps (set by the run, which holds the probe's pipe).
    pub probe: Option<crate::probe::ProbeSummary>,
}

/// The user asked the job to stop (SIGINT, SIGTERM, SIGHUP or SIGQUIT to oomguard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserStop {
    pub signal: Signal,
    /// The request came after the main process had already exited, while its leftovers were
    /// being cleaned up: it does not change how the attempt ended.
    pub after_exit: bool,
}

/// Signals that ask oomguard to stop the job for good: forwarded, never relaunched, honoured
/// while waiting between attempts, and the run exits 128 + N.
pub fn is_user_stop(signal: Signal) -> bool {
    matches!(
        signal,
        Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP | Signal::SIGQUIT
    )
}

/// Job-control stops (Ctrl-Z, a background read or write of the terminal): the job's group is
/// stopped first, then oomguard, as a shell's job control would stop the whole pipeline.
fn is_job_control_stop(signal: Signal) -> bool {
    matches!(signal, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU)
}

/// The signal that stops the job for a job-control `signal`: the signal itself, or SIGSTOP for
/// a job in a session of its own, whose group has no parent in its session (it is "orphaned"),
/// so the kernel would discard a SIGTSTP, SIGTTIN or SIGTTOU it has no handler for.
fn job_control_signal(signal: Signal, own_session: bool) -> Signal {
    if own_session {
        Signal::SIGSTOP
    } else {
        signal
    }
}

/// Sends `signal` to the job's group and to each of its processes `pids` (a job may `setsid`),
/// each only while it is still the job's (see [`child::signal_known_group`] and
/// [`child::signal_processes`]).
fn signal_listed(pgid: u32, pids: &[u32], signal: Signal) {
    child::signal_known_group(pgid, pids, signal);
    child::signal_processes(pids, signal);
}

/// Stops oomguard itself (after the job), as the default action of the job-control signal
/// would have; a SIGCONT resumes it and is then forwarded to the job.
fn stop_self() {
    // SIGSTOP cannot be caught: it stops every thread until a SIGCONT.
    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
}

/// Handles a signal that came while no attempt runs: a user's stop is returned (the run ends);
/// Ctrl-Z stops oomguard; anything else only reaps what may have ended.
fn between_attempts(signal: Signal) -> Option<Signal> {
    if is_user_stop(signal) {
        return Some(signal);
    }
    if is_job_control_stop(signal) {
        stop_self();
    }
    child::reap_ready();
    None
}

/// `now + d`, or a far-off instant where that would overflow (`--grace 500000000000years`),
/// as a std or a tokio instant.
pub fn deadline_after<I: From<Instant>>(d: Duration) -> I {
    I::from(after(Instant::now(), d))
}

/// `now + d`, or a far-off instant where that would overflow.
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or_else(|| now + FAR)
}

/// Further away than any wait oomguard takes; stands for "never".
const FAR: Duration = Duration::from_secs(86400 * 365);

/// Supervises the attempts of one run. Must be created inside the tokio runtime, on the thread
/// that stays alive for the whole run (the children's parent-death signal is tied to it).
pub struct Supervisor {
    setup: Setup,
    signals: Deliveries,
    guard: Option<Guard>,
    tree: ProcTree,
    sampler: Sampler,
    /// Whether Slurm's `scontrol` is on PATH: only then are the job's processes looked at for
    /// `srun`s whose steps a stop must reach through Slurm.
    slurm: bool,
}

/// A started attempt: the job, where its output goes, and what was read before it began.
struct StartedJob {
    attempt: u32,
    /// The main process's PID, also its process group.
    pgid: u32,
    /// Whether it leads a session of its own (a job run as another user): see
    /// [`job_control_signal`].
    own_session: bool,
    cgroup: Option<JobCgroup>,
    before: EvidenceBefore,
    started_at: SystemTime,
    started: Instant,
    sinks: Sinks,
    /// One message per reader that reached EOF.
    closed_rx: mpsc::UnboundedReceiver<()>,
    open_pipes: usize,
    /// Lifts the readers' back-pressure once the job's processes are gone.
    unbounded: Arc<AtomicBool>,
    /// The job's pseudo-terminal, to resize; `None` with pipes.
    pty_master: Option<File>,
    /// When to look again whether the pipes, held open after the job is gone, still carry bytes.
    drain_until: Option<TokioInstant>,
    drained_bytes: u64,
}

impl StartedJob {
    /// Every process of the job is gone but a pipe is still open: read it to the end at once,
    /// and look again in [`PIPE_DRAIN`].
    fn start_draining(&mut self) {
        if self.drain_until.is_none() {
            stream::Forwarder::release(&self.unbounded);
            self.drained_bytes = self.sinks.bytes_read();
            self.drain_until = Some(TokioInstant::now() + PIPE_DRAIN);
        }
    }

    /// Whether the pipes carried nothing since the last look (a process outside the job's tree
    /// holds them open): then oomguard stops waiting. Otherwise it looks again later.
    /// `user_stopped`: the user asked to stop, so oomguard stops waiting whatever the pipes do.
    fn drain_stalled(&mut self, user_stopped: bool) -> bool {
        // What was in the pipes when the job ended has been read by the first look: anything
        // later comes from a stray writer, back-pressured again rather than buffered without end.
        self.unbounded.store(false, Ordering::Release);
        if user_stopped || self.sinks.bytes_read() == self.drained_bytes {
            tracing::warn!("the job's output pipes are held open by a process outside its tree and carried nothing for {PIPE_DRAIN:?} (or you asked to stop); not waiting for them");
            return true;
        }
        self.drained_bytes = self.sinks.bytes_read();
        self.drain_until = Some(TokioInstant::now() + PIPE_DRAIN);
        false
    }
}

/// What an attempt has seen so far.
struct AttemptState {
    /// The attempt's rules: where it stands, why it is stopping.
    rules: Attempt,
    watch: SampleWatch,
    /// Every PID seen in the job's tree.
    known: HashSet<u32>,
    sigkilled_descendant: Option<u32>,
    told_terminal_stop: bool,
    /// When the job's output and CPU time last moved (`--hang-timeout`, `--stall-timeout`).
    quiet: QuietWatch,
    /// The Slurm steps of the job's `srun`s.
    steps: SrunSteps,
    /// See [`AttemptEnd::writing_at_stop`].
    writing_at_stop: HashSet<(u64, u64)>,
    /// See [`AttemptEnd::stop_began`].
    stop_began: Option<SystemTime>,
}

impl AttemptState {
    fn new(setup: &Setup, job: &StartedJob) -> Self {
        AttemptState {
            rules: Attempt::new(setup.grace, job.own_session),
            watch: SampleWatch::new(setup),
            known: HashSet::from([job.pgid]),
            sigkilled_descendant: None,
            told_terminal_stop: false,
            quiet: QuietWatch::new(setup.quiet, Instant::now()),
            steps: SrunSteps::default(),
            writing_at_stop: HashSet::new(),
            stop_began: None,
        }
    }
}

/// What woke the attempt's loop.
enum Wakeup {
    Signal(Signal),
    PipeClosed,
    Tick,
    GraceOver,
    DrainCheck,
}

impl Supervisor {
    pub fn new(setup: Setup, mut sampler: Sampler) -> std::io::Result<Supervisor> {
        sampler.read_cpu_time(setup.quiet.stall.is_some());
        let signals = Deliveries::register()?;
        if let Err(e) = child::become_subreaper() {
            tracing::warn!("cannot become child subreaper, orphaned grandchildren may escape: {e}");
        }
        let guard = Guard::start()
            .map_err(|e| tracing::warn!("cannot start the guard process, a SIGKILLed oomguard may leave grandchildren: {e}"))
            .ok();
        Ok(Supervisor {
            setup,
            signals,
            guard,
            tree: ProcTree::default(),
            sampler,
            slurm: child::resolve_program("scontrol", std::env::var_os("PATH").as_deref()).is_ok(),
        })
    }

    /// Every live or zombie descendant of oomguard except the guard: the job's whole tree,
    /// including processes that left its process group.
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
        signal_listed(pgid, &self.job_processes(), signal);
    }

    /// The Slurm steps of the job's live `srun`s (see [`SrunSteps::refresh`]), with the srun
    /// PIDs.
    fn srun_steps(
        &self,
        state: &mut AttemptState,
        pids: &[u32],
        main_pid: u32,
    ) -> (Vec<Step>, Vec<u32>) {
        if !self.slurm {
            return (Vec::new(), Vec::new());
        }
        let sruns =
            steps::real_slurm(|slurm| state.steps.refresh(pids, main_pid, Instant::now(), slurm));
        (state.steps.known(), sruns)
    }

    /// Asks the job to stop with `signal`, and continues it (a stopped job cannot act on the
    /// signal): its process group, or with `whole_tree` every process of it. The tasks of its
    /// srun steps get the signal from Slurm, and srun none: srun answers SIGTERM, SIGHUP and
    /// SIGQUIT by SIGKILLing every task (`srun: forcing job termination`), and the tasks run
    /// under slurmstepd, out of our reach.
    fn ask_to_stop(
        &self,
        job: &StartedJob,
        state: &mut AttemptState,
        signal: Signal,
        whole_tree: bool,
    ) {
        // The tree is walked once: the signal and the SIGCONT after it go to the same list.
        let all = self.job_processes();
        // An srun whose step is not known yet would get the signal itself, and end its tasks
        // its own way: Slurm is asked now, whatever its wait.
        state.steps.ask_at_once();
        let (steps, sruns) = self.srun_steps(state, &all, job.pgid);
        if steps.is_empty() {
            for signal in [signal, Signal::SIGCONT] {
                if whole_tree {
                    signal_listed(job.pgid, &all, signal);
                } else {
                    child::signal_group(job.pgid, signal);
                }
            }
            return;
        }
        slurm::signal_steps(&steps, signal);
        let others: Vec<u32> = all.iter().copied().filter(|p| !sruns.contains(p)).collect();
        for signal in [signal, Signal::SIGCONT] {
            // An srun is not signalled, but its children are still the job's.
            child::signal_processes_of(&others, &all, signal);
        }
    }

    /// Makes the attempt's cgroup. Without `--memory-max` a failure only costs exact
    /// accounting, so the attempt runs without one; with it, the run cannot keep its promise.
    fn make_cgroup(
        &self,
        attempt: u32,
        observer: &mut dyn Observer,
    ) -> Result<Option<JobCgroup>, SpawnError> {
        let Some((parent, limits)) = &self.setup.cgroup else {
            return Ok(None);
        };
        let name = cgroup::attempt_name(std::process::id(), attempt);
        match parent.create_child(&name, limits) {
            Ok(cg) => Ok(Some(cg)),
            Err(e) if limits.memory_max_bytes.is_some() => Err(SpawnError::Setup(e.to_string())),
            Err(e) => {
                observer.notice(&Notice::NoCgroup(e.to_string()));
                Ok(None)
            }
        }
    }

    /// A pseudo-terminal for the attempt when the job should get one; on failure the attempt
    /// runs with pipes.
    fn open_pty(&self) -> Option<Pty> {
        if !self.setup.pty {
            return None;
        }
        terminal::Pty::open()
            .map_err(|e| {
                tracing::warn!("cannot open a pseudo-terminal for the job, it gets pipes: {e}")
            })
            .ok()
    }

    /// Runs attempt number `attempt` to its end. `log` receives a copy of the output.
    pub async fn run_attempt(
        &mut self,
        attempt: u32,
        launch: &Launch,
        log: Option<AttemptLog>,
        observer: &mut dyn Observer,
    ) -> Result<AttemptEnd, SpawnError> {
        let mut job = self.start(attempt, launch, log, observer)?;
        let mut state = AttemptState::new(&self.setup, &job);
        // The first sample one interval after spawn, not at once: at spawn the job is still
        // oomguard's fork or an interpreter starting up, and its numbers would stand as the
        // peaks of a short attempt. The end of the main process is sampled in any case.
        let mut ticker =
            tokio::time::interval_at(deadline_after(self.setup.interval), self.setup.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let wake = self.next_wake(&mut job, &state, &mut ticker).await;
            let tick = matches!(wake, Wakeup::Tick);
            match wake {
                Wakeup::Signal(signal) => self.follow(
                    attempt::Wake::Signal(signal),
                    &[],
                    &job,
                    &mut state,
                    observer,
                ),
                Wakeup::PipeClosed => job.open_pipes -= 1,
                Wakeup::Tick => {}
                Wakeup::GraceOver => {
                    self.follow(attempt::Wake::GraceOver, &[], &job, &mut state, observer)
                }
                Wakeup::DrainCheck => {
                    // A user's stop ends the wait for a pipe a stray writer keeps busy.
                    if job.drain_stalled(state.rules.user_stopped()) {
                        break;
                    }
                }
            }
            let main_ended = self.reap(&job, &mut state, observer);
            if self.look(tick, main_ended, &mut job, &mut state, observer) == Look::Done {
                break;
            }
        }
        Ok(self.end(job, state))
    }

    /// Step 1: the attempt's cgroup and kernel counters before it, the spawn, the guard told,
    /// and the readers of the job's output started.
    fn start(
        &mut self,
        attempt: u32,
        launch: &Launch,
        log: Option<AttemptLog>,
        observer: &mut dyn Observer,
    ) -> Result<StartedJob, SpawnError> {
        let cgroup = self.make_cgroup(attempt, observer)?;
        let procs_fd = match &cgroup {
            Some(cg) => Some(cg.open_procs().map_err(|e| {
                SpawnError::Setup(format!(
                    "cannot open {}/cgroup.procs: {e}",
                    cg.dir().display()
                ))
            })?),
            None => None,
        };
        let before = EvidenceBefore::read(&self.setup.kernel_paths, cgroup.is_none());
        let started_at = SystemTime::now();
        let started = Instant::now();
        let pty = self.open_pty();
        let spawned = child::spawn(launch, procs_fd, pty)?;
        let pgid = spawned.pid;
        let own_session = spawned.own_session;
        observer.started();
        if let Some(guard) = self.guard.as_mut() {
            guard.watch(Some(pgid), cgroup.as_ref().map(JobCgroup::dir));
        }
        let sinks = Sinks::new(log);
        let (closed_tx, closed_rx) = mpsc::unbounded_channel::<()>();
        let mut open_pipes = 0;
        // Set once the job's processes are all gone: its readers then drain the pipes to EOF
        // however slowly our own stdout is read.
        let unbounded = Arc::new(AtomicBool::new(false));
        let (pipes, pty_master) = job_streams(spawned.output);
        for (pipe, target) in pipes {
            let tx = closed_tx.clone();
            let done = move || {
                // The supervisor may have stopped listening; nothing to tell then.
                let _ = tx.send(());
            };
            match stream::spawn_copier(pipe, target, sinks.clone(), unbounded.clone(), done) {
                Ok(_) => open_pipes += 1,
                Err(e) => tracing::error!("cannot forward the job's {target:?}: {e}"),
            }
        }
        self.sampler.reset();
        Ok(StartedJob {
            attempt,
            pgid,
            own_session,
            cgroup,
            before,
            started_at,
            started,
            sinks,
            closed_rx,
            open_pipes,
            unbounded,
            pty_master,
            drain_until: None,
            drained_bytes: 0,
        })
    }

    /// Waits for the next thing that needs doing: a signal, a pipe closed, a tick, the grace
    /// period over, or time to see whether the pipes still carry anything.
    async fn next_wake(
        &mut self,
        job: &mut StartedJob,
        state: &AttemptState,
        ticker: &mut tokio::time::Interval,
    ) -> Wakeup {
        let far: TokioInstant = deadline_after(FAR);
        let kill_at = state.rules.kill_at().map(TokioInstant::from_std);
        tokio::select! {
            signal = self.signals.next() => Wakeup::Signal(signal),
            Some(()) = job.closed_rx.recv(), if job.open_pipes > 0 => Wakeup::PipeClosed,
            _ = ticker.tick() => Wakeup::Tick,
            _ = sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => Wakeup::GraceOver,
            _ = sleep_until(job.drain_until.unwrap_or(far)), if job.drain_until.is_some() => Wakeup::DrainCheck,
        }
    }

    /// Hands `wake` to the attempt's rules and carries out what they ask. `seen`: the job's
    /// processes the wake-up just saw (what a stop notes as open for writing).
    fn follow(
        &self,
        wake: attempt::Wake,
        seen: &[u32],
        job: &StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) {
        for act in state.rules.on_wake(wake, Instant::now()) {
            self.act(act, seen, job, state, observer);
        }
    }

    /// Carries out one act of the rules: the only place they reach processes.
    fn act(
        &self,
        act: Act,
        seen: &[u32],
        job: &StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) {
        let pgid = job.pgid;
        match act {
            Act::SignalGroup(signal) => {
                child::signal_group(pgid, signal);
            }
            // Our terminal was resized: the job's pseudo-terminal follows first.
            Act::Resize => match &job.pty_master {
                Some(master) => resize_job(master, pgid),
                None => {
                    child::signal_group(pgid, Signal::SIGWINCH);
                }
            },
            Act::AskToStop { signal, whole_tree } => {
                self.ask_to_stop(job, state, signal, whole_tree)
            }
            Act::KillTree => self.signal_all(pgid, Signal::SIGKILL),
            Act::KillSlurmSteps => {
                slurm::signal_steps(&state.steps.known(), Signal::SIGKILL);
            }
            Act::KillCgroup => {
                if let Some(cg) = &job.cgroup {
                    let _ = cg.kill_all();
                }
            }
            Act::NoteWriting { walk } => {
                let writing = match walk {
                    true => open_for_writing(&self.job_processes()),
                    false => open_for_writing(seen),
                };
                state.writing_at_stop.extend(writing);
                state.stop_began.get_or_insert_with(SystemTime::now);
            }
            Act::StopSelf => stop_self(),
            Act::RestartQuietClock => state.quiet.restart(Instant::now()),
            Act::Say(line) => tracing::info!("{line}"),
            Act::Tell(notice) => observer.notice(&notice),
        }
    }

    /// Reaps what ended (noting peaks, SIGKILLs and the main process's end) and what stopped
    /// (a job stopped for reading the terminal is explained once). Returns whether the main
    /// process ended just now.
    fn reap(
        &mut self,
        job: &StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) -> bool {
        let pgid = job.pgid;
        let mut main_ended = false;
        for event in child::reap_ready() {
            let reaped = match event {
                ChildEvent::Ended(reaped) => reaped,
                ChildEvent::Stopped { pid, signal } => {
                    let terminal = matches!(signal, Signal::SIGTTIN | Signal::SIGTTOU);
                    if pid == pgid
                        && terminal
                        && !state.rules.stopped_by_us()
                        && !state.told_terminal_stop
                    {
                        state.told_terminal_stop = true;
                        observer.notice(&Notice::TerminalStop { signal });
                    }
                    continue;
                }
            };
            state.known.insert(reaped.pid);
            state.watch.peaks.fold_process_peak(reaped.max_rss_bytes);
            if is_unexplained_sigkill(
                reaped.pid,
                pgid,
                reaped.ending,
                state.rules.leftovers_stopped(),
            ) {
                state.sigkilled_descendant.get_or_insert(reaped.pid);
            }
            if reaped.pid == pgid {
                main_ended = true;
                let ended = attempt::Wake::MainEnded {
                    ending: reaped.ending,
                    duration: job.started.elapsed(),
                };
                self.follow(ended, &[], job, state, observer);
            }
        }
        main_ended
    }

    /// Last step: the guard released, the kernel's evidence read, the attempt cgroup emptied and
    /// removed, and the record handed back.
    fn end(&mut self, job: StartedJob, state: AttemptState) -> AttemptEnd {
        if let Some(guard) = self.guard.as_mut() {
            guard.watch(None, None);
        }
        let ended = state
            .rules
            .ended()
            .expect("the loop ends only after the main process is reaped");
        let mut peaks = state.watch.peaks;
        let mut kernel = job.before.after(&self.setup.kernel_paths, &state.known);
        if let Some(cg) = job.cgroup {
            // A fresh cgroup per attempt: its counter is this attempt's alone.
            kernel.cgroup_oom_kills = cg.oom_kills();
            peaks.fold_cgroup_peak(cg.peak_bytes());
            if let Err(e) = cg.remove() {
                tracing::warn!("{e}");
            }
        }
        if job.open_pipes > 0 {
            // Pipes given up on: a line they left unfinished still reaches the log.
            job.sinks.end_streams();
        }
        AttemptEnd {
            ending: ended.ending,
            user_stop: ended.user_stop,
            memory_stop: ended.memory_stop,
            tail: job.sinks.tail_text(),
            kernel,
            started_at: job.started_at,
            duration: ended.duration,
            peaks,
            pids: state.known,
            sigkilled_descendant: state.sigkilled_descendant,
            quiet_stop: ended.quiet_stop,
            writing_at_stop: state.writing_at_stop,
            stop_began: state.stop_began,
            gpu_at_start: state.watch.gpu_first,
            gpu_at_end: state.watch.gpu_last,
            probe: None,
            host_at_start: state.watch.host_first,
            host_at_end: state.watch.host_last,
        }
    }

    /// Waits until the GPU driver no longer lists any of `pids` (the last attempt's), at most
    /// `timeout`, polling every 200 ms. A user's stop signal ends the wait.
    pub async fn wait_gpu_free(&mut self, pids: &HashSet<u32>, timeout: Duration) -> GpuWait {
        let deadline = deadline_after(timeout);
        loop {
            let Some(holders) = self.sampler.gpu_holders(pids) else {
                return GpuWait::NoGpu;
            };
            if holders.is_empty() {
                return GpuWait::Free;
            }
            if TokioInstant::now() >= deadline {
                return GpuWait::StillHeld(holders);
            }
            tokio::select! {
                // A stop already delivered wins over a poll that is also due.
                biased;
                sig = self.signals.next() => {
                    if let Some(stop) = between_attempts(sig) {
                        return GpuWait::Stopped(stop);
                    }
                }
                _ = tokio::time::sleep(GPU_FREE_POLL) => {}
            }
        }
    }

    /// The card now, split by whose it is (`pids`' processes are the job's); `None` without
    /// GPU readings.
    pub fn gpu_now(&mut self, pids: &HashSet<u32>) -> Option<JobGpu> {
        self.sampler.gpu_now(pids)
    }

    /// The machine's memory now.
    pub fn system_now(&self) -> Option<crate::observe::mem::system::SystemMem> {
        self.sampler.system_now()
    }

    /// The cards as the driver lists them; `None` without GPU readings.
    pub fn gpu_devices(&mut self) -> Option<Vec<crate::observe::gpu::GpuDevice>> {
        self.sampler.gpu_devices()
    }

    /// Waits `delay` before a relaunch; returns the user's stop signal if one came first.
    pub async fn pause(&mut self, delay: Duration) -> Option<Signal> {
        let until = deadline_after(delay);
        loop {
            tokio::select! {
                // A stop already delivered wins over a delay that is also over (`--backoff 0s`).
                biased;
                sig = self.signals.next() => {
                    if let Some(stop) = between_attempts(sig) {
                        return Some(stop);
                    }
                }
                _ = sleep_until(until) => return None,
            }
        }
    }

    /// Tells the guard which patch journal entries to restore if oomguard dies (see
    /// [`Guard::restore_on_death`]); without a guard, the next oomguard start restores them.
    pub fn guard_files(&mut self, journals: &[std::path::PathBuf]) {
        if let Some(guard) = self.guard.as_mut() {
            guard.restore_on_death(journals);
        }
    }

    /// Ends the run: the guard is told nothing needs killing.
    pub fn finish(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.release();
        }
    }
}

/// A reader of the job's output paired with our stream it goes to.
type JobStream = (Box<dyn std::io::Read + Send>, Target);

/// The job's output as streams to read, and a handle on its pseudo-terminal (to resize), if any.
fn job_streams(output: JobOutput) -> (Vec<JobStream>, Option<File>) {
    match output {
        JobOutput::Pipes { stdout, stderr } => (
            vec![
                (Box::new(stdout), Target::Stdout),
                (Box::new(stderr), Target::Stderr),
            ],
            None,
        ),
        JobOutput::Terminal { master } => {
            // A second handle for resizing; a failure only costs resizing.
            let resize = master
                .try_clone()
                .map_err(|e| tracing::warn!("the job's terminal will not follow resizes: {e}"))
                .ok();
            (vec![(Box::new(master), Target::Stdout)], resize)
        }
    }
}

/// Our terminal was resized: the job's pseudo-terminal follows, and the job is told (it is not
/// in the pseudo-terminal's session, so the kernel does not signal it).
fn resize_job(master: &File, pgid: u32) {
    if let Err(e) = terminal::copy_size(master) {
        tracing::debug!("cannot resize the job's terminal: {e}");
        return;
    }
    child::signal_group(pgid, Signal::SIGWINCH);
}
