//! Runs one attempt from spawn to the last reaped descendant: puts it in its own memory cgroup
//! where it can, gives it a pseudo-terminal under a terminal, forwards signals to the job's
//! process group (SIGWINCH after resizing that terminal; job control stops the job, then
//! oomguard), samples its memory every interval, stops it on the user's SIGINT, SIGTERM, SIGHUP
//! or SIGQUIT (grace, then SIGKILL; a second SIGINT kills at once) or when a soft memory bound
//! holds for several samples, or the same way when the job goes quiet (see `quiet`: silent after
//! an out-of-memory error its output shows, as the classifier reads it, or silent and idle),
//! reaps everything below us, cleans up processes the job left behind, and hands back a plain
//! record of what happened.
//! The async side of oomguard (signal streams, timers) lives here; `lib` only builds the
//! runtime and awaits these methods.
//!
//! It does not classify, decide or print: `classify`, `policy` and `report` do (samples and
//! notices go to an [`Observer`] the caller provides); it only asks `classify` whether a silent
//! job's output shows an out-of-memory error.

use std::collections::HashSet;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant as TokioInstant};

use crate::cgroup::{self, JobCgroup, Parent};
use crate::cgroup_chain;
use crate::child::{self, ChildEvent, Guard, JobOutput, Launch, SpawnError};
use crate::classify::{self, KernelEvidence};
use crate::gpu::JobGpu;
use crate::kernel::{self, Kmsg};
use crate::mem::tree::ProcTree;
use crate::outcome::Ending;
use crate::quiet::{self, QuietStop, QuietWatch};
use crate::record::attempt_log::AttemptLog;
use crate::sampler::{Peaks, Sample, Sampler, Scope};
use crate::scan;
use crate::signals::Deliveries;
use crate::slurm::{self, Step};

mod steps;
use crate::stream::{self, Sinks, Target};
use crate::taken::HostReading;
use crate::terminal::{self, Pty};
use crate::watch::{self, BoundWatch, Bounds, Crossing, Trend};
use steps::SrunSteps;

/// Once every process of the tree is gone, how long the job's pipes may stay open with nothing
/// coming through them before oomguard stops waiting (a process outside our tree may hold a copy
/// of them). Any byte read starts the wait again.
const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// How often the GPU is asked whether the last attempt's processes are gone.
const GPU_FREE_POLL: Duration = Duration::from_millis(200);

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
    /// process had it open at that instant ([`crate::resume::judge`]).
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

/// The files (device, inode) that `pids` hold open for writing, from `/proc/PID/fd` and the
/// access mode in `/proc/PID/fdinfo` (`flags:` octal; O_WRONLY 1, O_RDWR 2). Pipes and sockets
/// are files too; they never match a checkpoint, so they are not told apart.
pub fn open_for_writing(pids: &[u32]) -> HashSet<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut files = HashSet::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue; // gone, or not ours to read
        };
        for fd in fds.filter_map(Result::ok) {
            let flags = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            });
            if flags.is_some_and(|f| f & 0o3 != 0) {
                if let Ok(meta) = std::fs::metadata(fd.path()) {
                    if meta.is_file() {
                        files.insert((meta.dev(), meta.ino()));
                    }
                }
            }
        }
    }
    files
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
    let now = Instant::now();
    I::from(now.checked_add(d).unwrap_or_else(|| now + FAR))
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

/// What one attempt's samples add up to: peaks, soft-bound streaks, the growth trend, and
/// which notices were already given.
struct SampleWatch {
    peaks: Peaks,
    bounds: BoundWatch,
    trend: Trend,
    growth_warned: bool,
    gpu_unattributed_told: bool,
    /// The PIDs the driver listed on the attempt's first reading: the card's neighbours then.
    gpu_listed_at_start: Option<Vec<u32>>,
    /// The attempt's first and last readings of the card while the job had processes: who held
    /// what at its start and at its death.
    gpu_first: Option<JobGpu>,
    gpu_last: Option<JobGpu>,
    /// The machine's memory and the job's share at the same two moments.
    host_first: Option<HostReading>,
    host_last: Option<HostReading>,
}

impl SampleWatch {
    fn new(setup: &Setup) -> Self {
        SampleWatch {
            peaks: Peaks::default(),
            bounds: BoundWatch::new(setup.bounds),
            trend: Trend::new(setup.trend_window),
            growth_warned: false,
            gpu_unattributed_told: false,
            gpu_listed_at_start: None,
            gpu_first: None,
            gpu_last: None,
            host_first: None,
            host_last: None,
        }
    }

    /// The notice that the job seems to live in another PID namespace, where this reading shows
    /// it (see [`Notice::GpuUnattributed`]).
    fn namespace_notice(&mut self, sample: &Sample) -> Option<Notice> {
        let gpu = sample.gpu.as_ref()?;
        let listed = || {
            gpu.devices
                .iter()
                .flat_map(|d| d.neighbours.iter())
                .map(|n| n.pid)
        };
        let at_start = self
            .gpu_listed_at_start
            .get_or_insert_with(|| listed().collect());
        if self.gpu_unattributed_told
            || sample.tree.processes == 0
            || !gpu.job_pids_listed.is_empty()
        {
            return None;
        }
        let unseen: Vec<u32> = gpu
            .devices
            .iter()
            .flat_map(|d| d.neighbours.iter())
            .filter(|n| n.who.is_none() && !at_start.contains(&n.pid))
            .map(|n| n.pid)
            .collect();
        if unseen.is_empty() {
            return None;
        }
        self.gpu_unattributed_told = true;
        Some(Notice::GpuUnattributed { pids: unseen })
    }

    /// Takes in a sample taken `at` after spawn; returns the crossing that should stop the job,
    /// unless it is already `stopping`.
    fn observe(
        &mut self,
        sample: &Sample,
        at: Duration,
        setup: &Setup,
        cgroup: Option<&JobCgroup>,
        stopping: bool,
        observer: &mut dyn Observer,
    ) -> Option<Crossing> {
        self.peaks.update(sample);
        if let Some(notice) = self.namespace_notice(sample) {
            observer.notice(&notice);
        }
        if let (Some(gpu), true) = (&sample.gpu, sample.tree.processes > 0) {
            self.gpu_first.get_or_insert_with(|| gpu.clone());
            self.gpu_last = Some(gpu.clone());
        }
        if let (Some(system), Some(job_bytes)) = (sample.system, sample.reading().job_bytes) {
            let reading = HostReading {
                total_bytes: system.total_bytes,
                available_bytes: system.available_bytes,
                job_bytes,
            };
            self.host_first.get_or_insert(reading);
            self.host_last = Some(reading);
        }
        if let (false, Some(job_bytes)) = (self.growth_warned, sample.job_bytes()) {
            self.trend.push(at, job_bytes);
            if let Some(notice) = growth_notice(&self.trend, job_bytes, sample, setup, cgroup) {
                observer.notice(&notice);
                self.growth_warned = true;
            }
        }
        let crossing = self.bounds.observe(&sample.reading())?;
        if stopping {
            return None;
        }
        observer.notice(&Notice::MemoryStop(crossing.clone()));
        Some(crossing)
    }
}

/// A growth notice when memory rises steadily toward the nearest ceiling within the hour:
/// `--max-rss`, the cgroup's limit, or what the machine still has available.
fn growth_notice(
    trend: &Trend,
    job_bytes: u64,
    sample: &Sample,
    setup: &Setup,
    cgroup: Option<&JobCgroup>,
) -> Option<Notice> {
    let growth = trend.growth()?;
    let mut ceilings: Vec<(u64, String)> = Vec::new();
    if let Some(max) = setup.bounds.max_rss_bytes {
        ceilings.push((max, format!("--max-rss {}", crate::units::human_bytes(max))));
    }
    if let Some(limit) = cgroup.and_then(JobCgroup::limit_bytes) {
        ceilings.push((
            limit,
            format!("the memory limit {}", crate::units::human_bytes(limit)),
        ));
    }
    if let Some(sys) = sample.system {
        ceilings.push((
            job_bytes + sys.available_bytes,
            "the machine's memory".to_string(),
        ));
    }
    let (ceiling_bytes, ceiling) = ceilings.into_iter().min_by_key(|(bytes, _)| *bytes)?;
    let eta = watch::time_to_reach(job_bytes, ceiling_bytes, growth)?;
    (eta < Duration::from_secs(3600)).then_some(Notice::Growth {
        bytes_per_s: growth.bytes_per_s,
        eta,
        ceiling,
    })
}

/// Whether reaping `pid` with `ending` shows a process of the job (not its main process,
/// `pgid`) killed by a SIGKILL that oomguard did not send: oomguard sends SIGKILL only to
/// leftovers after the main process ended (and on the user's or a memory bound's stop, whose
/// verdicts do not look at this).
fn is_unexplained_sigkill(pid: u32, pgid: u32, ending: Ending, phase: &Phase) -> bool {
    let leftovers_stopped = matches!(
        phase,
        Phase::Ended {
            leftovers_stopped: true,
            ..
        }
    );
    pid != pgid && matches!(ending, Ending::Signaled { signal: 9, .. }) && !leftovers_stopped
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
    phase: Phase,
    user_stop: Option<UserStop>,
    memory_stop: Option<Crossing>,
    /// When the job gets SIGKILL (the grace period after a stop request).
    kill_at: Option<TokioInstant>,
    watch: SampleWatch,
    /// Every PID seen in the job's tree.
    known: HashSet<u32>,
    sigkilled_descendant: Option<u32>,
    /// Whether oomguard stopped the job's group for job control (Ctrl-Z) and has not yet
    /// continued it: a job stopped by SIGTTIN on its own is the one to tell the user about.
    stopped_by_us: bool,
    told_terminal_stop: bool,
    /// When the job's output and CPU time last moved (`--hang-timeout`, `--stall-timeout`).
    quiet: QuietWatch,
    /// Set when oomguard asked the job to stop for going quiet.
    quiet_stop: Option<QuietStop>,
    /// The Slurm steps of the job's `srun`s.
    steps: SrunSteps,
    /// See [`AttemptEnd::writing_at_stop`].
    writing_at_stop: HashSet<(u64, u64)>,
    /// See [`AttemptEnd::stop_began`].
    stop_began: Option<SystemTime>,
}

impl AttemptState {
    fn new(setup: &Setup, pgid: u32) -> Self {
        AttemptState {
            phase: Phase::Running,
            user_stop: None,
            memory_stop: None,
            kill_at: None,
            watch: SampleWatch::new(setup),
            known: HashSet::from([pgid]),
            sigkilled_descendant: None,
            stopped_by_us: false,
            told_terminal_stop: false,
            quiet: QuietWatch::new(setup.quiet, Instant::now()),
            quiet_stop: None,
            steps: SrunSteps::default(),
            writing_at_stop: HashSet::new(),
            stop_began: None,
        }
    }
}

/// What woke the attempt's loop.
enum Wake {
    Signal(Signal),
    PipeClosed,
    Tick,
    GraceOver,
    DrainCheck,
}

/// Whether the attempt goes on after a look at the job's tree.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    Going,
    Done,
}

/// Kernel evidence read before an attempt, to compare with after it.
struct EvidenceBefore {
    vmstat_oom_kills: Option<u64>,
    /// The cgroups the job lives in when it gets no attempt cgroup (oomguard's own and those
    /// above it, whose OOM-kill counters any user can read), and their counters. An attempt
    /// cgroup's own counter already sees every kill of the job's processes.
    chain: Option<(cgroup_chain::Chain, Vec<cgroup_chain::Level>)>,
    kmsg: Option<Kmsg>,
}

impl EvidenceBefore {
    fn read(paths: &KernelPaths, without_attempt_cgroup: bool) -> Self {
        let chain = without_attempt_cgroup
            .then(cgroup_chain::Chain::detect_current)
            .flatten()
            .map(|chain| {
                let levels = chain.read();
                (chain, levels)
            });
        EvidenceBefore {
            vmstat_oom_kills: kernel::read_vmstat_oom_kill(&paths.vmstat),
            chain,
            kmsg: Kmsg::open_at_end(&paths.kmsg),
        }
    }

    /// The evidence after the attempt: counters' deltas, and the kernel log's victim lines that
    /// name a PID of the job (`known`).
    fn after(mut self, paths: &KernelPaths, known: &HashSet<u32>) -> KernelEvidence {
        KernelEvidence {
            vmstat_oom_kill_delta: self
                .vmstat_oom_kills
                .zip(kernel::read_vmstat_oom_kill(&paths.vmstat))
                .map(|(before, after)| after.saturating_sub(before)),
            victim_lines: self
                .kmsg
                .as_mut()
                .map(Kmsg::read_new)
                .unwrap_or_default()
                .into_iter()
                .filter(|line| {
                    scan::kernel_oom_victim_pid(line).is_some_and(|pid| known.contains(&pid))
                })
                .collect(),
            cgroup_oom_kills: None,
            cgroup_chain_kill: self
                .chain
                .and_then(|(chain, before)| cgroup_chain::attribute(&before, &chain.read())),
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

    /// Kills everything of the job: its tree, its attempt cgroup, and its srun steps' tasks.
    fn kill_job(&self, job: &StartedJob, state: &mut AttemptState) {
        // Our own processes first, and no new lookup: Slurm's answer may be slow to come.
        self.signal_all(job.pgid, Signal::SIGKILL);
        slurm::signal_steps(&state.steps.known(), Signal::SIGKILL);
        if let Some(cg) = &job.cgroup {
            let _ = cg.kill_all();
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
        let mut state = AttemptState::new(&self.setup, job.pgid);
        // The first sample one interval after spawn, not at once: at spawn the job is still
        // oomguard's fork or an interpreter starting up, and its numbers would stand as the
        // peaks of a short attempt. The end of the main process is sampled in any case.
        let mut ticker =
            tokio::time::interval_at(deadline_after(self.setup.interval), self.setup.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let wake = self.next_wake(&mut job, &state, &mut ticker).await;
            let tick = matches!(wake, Wake::Tick);
            match wake {
                Wake::Signal(signal) => self.on_signal(signal, &job, &mut state),
                Wake::PipeClosed => job.open_pipes -= 1,
                Wake::Tick => {}
                Wake::GraceOver => self.on_grace_over(&job, &mut state),
                Wake::DrainCheck => {
                    // A user's stop ends the wait for a pipe a stray writer keeps busy.
                    if job.drain_stalled(state.user_stop.is_some()) {
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
    ) -> Wake {
        let far: TokioInstant = deadline_after(FAR);
        tokio::select! {
            signal = self.signals.next() => Wake::Signal(signal),
            Some(()) = job.closed_rx.recv(), if job.open_pipes > 0 => Wake::PipeClosed,
            _ = ticker.tick() => Wake::Tick,
            _ = sleep_until(state.kill_at.unwrap_or(far)), if state.kill_at.is_some() => Wake::GraceOver,
            _ = sleep_until(job.drain_until.unwrap_or(far)), if job.drain_until.is_some() => Wake::DrainCheck,
        }
    }

    /// A signal to oomguard while the attempt runs: a user's stop (a second SIGINT kills), job
    /// control, a resize, or one to pass on.
    fn on_signal(&mut self, signal: Signal, job: &StartedJob, state: &mut AttemptState) {
        let pgid = job.pgid;
        match signal {
            Signal::SIGCHLD => {}
            Signal::SIGINT if state.user_stop.is_some() => {
                tracing::info!("second SIGINT: killing the job's processes");
                self.signal_all(pgid, Signal::SIGKILL);
                slurm::signal_steps(&state.steps.known(), Signal::SIGKILL);
            }
            signal if is_user_stop(signal) => {
                self.ask_to_stop(job, state, signal, false);
                if state.user_stop.is_none() {
                    let after_exit = matches!(state.phase, Phase::Ended { .. });
                    state.user_stop = Some(UserStop { signal, after_exit });
                    state
                        .kill_at
                        .get_or_insert(deadline_after(self.setup.grace));
                }
            }
            signal if is_job_control_stop(signal) => {
                tracing::info!("{signal}: stopping the job, then oomguard");
                state.stopped_by_us = true;
                child::signal_group(pgid, job_control_signal(signal, job.own_session));
                stop_self();
            }
            Signal::SIGCONT => {
                state.stopped_by_us = false;
                state.quiet.restart(Instant::now());
                child::signal_group(pgid, Signal::SIGCONT);
            }
            // Our terminal was resized: the job's pseudo-terminal follows first.
            Signal::SIGWINCH => match &job.pty_master {
                Some(master) => resize_job(master, pgid),
                None => {
                    child::signal_group(pgid, Signal::SIGWINCH);
                }
            },
            other => {
                child::signal_group(pgid, other);
            }
        }
    }

    /// `--grace` ran out after a stop request: everything of the job is killed.
    fn on_grace_over(&self, job: &StartedJob, state: &mut AttemptState) {
        tracing::info!("grace period over: killing the job's processes");
        self.kill_job(job, state);
        state.kill_at = None;
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
                    if pid == pgid && terminal && !state.stopped_by_us && !state.told_terminal_stop
                    {
                        state.told_terminal_stop = true;
                        observer.notice(&Notice::TerminalStop { signal });
                    }
                    continue;
                }
            };
            state.known.insert(reaped.pid);
            state.watch.peaks.fold_process_peak(reaped.max_rss_bytes);
            if is_unexplained_sigkill(reaped.pid, pgid, reaped.ending, &state.phase) {
                state.sigkilled_descendant.get_or_insert(reaped.pid);
            }
            if reaped.pid == pgid {
                main_ended = true;
                state.phase = Phase::Ended {
                    ending: reaped.ending,
                    duration: job.started.elapsed(),
                    leftovers_stopped: false,
                };
            }
        }
        main_ended
    }

    /// Looks at the job's tree: on a tick while it runs, samples it (a soft bound held stops
    /// it); when the main process has `just_ended`, samples what it left once (DataLoader
    /// workers, ranks still hold memory: a short attempt gets real peaks); once it ended, stops
    /// its leftovers and, when they are gone, lets the readers drain. The tree is walked once,
    /// on ticks and, after the end, on every wake-up (to see the leftovers go); not on each
    /// SIGCHLD of a busy job.
    fn look(
        &mut self,
        tick: bool,
        just_ended: bool,
        job: &mut StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) -> Look {
        let ended = matches!(state.phase, Phase::Ended { .. });
        if !tick && !ended {
            return Look::Going;
        }
        let alive = match (&job.cgroup, ended) {
            // The kernel's list of the job's processes: one read, not a walk of /proc.
            (Some(cgroup), false) => cgroup.tree_pids(),
            _ => self.job_processes(),
        };
        state.known.extend(alive.iter().copied());
        if !ended {
            self.sample(&alive, job, state, observer);
            return Look::Going;
        }
        if just_ended {
            let sample = self
                .sampler
                .sample(job.attempt, &alive, job.cgroup.as_ref());
            observer.sample(&sample);
            state.watch.peaks.update(&sample);
        }
        let Phase::Ended {
            leftovers_stopped, ..
        } = &mut state.phase
        else {
            unreachable!("checked above")
        };
        if !alive.is_empty() && !*leftovers_stopped {
            // The main process is gone; what it left behind is ended gently, then for good.
            *leftovers_stopped = true;
            tracing::info!(
                "main process ended; stopping {} leftover process(es)",
                alive.len()
            );
            state.writing_at_stop.extend(open_for_writing(&alive));
            state.stop_began.get_or_insert_with(SystemTime::now);
            self.ask_to_stop(job, state, Signal::SIGTERM, true);
            state
                .kill_at
                .get_or_insert(deadline_after(self.setup.grace));
        }
        if !alive.is_empty() {
            return Look::Going;
        }
        if job.open_pipes == 0 {
            return Look::Done;
        }
        job.start_draining();
        Look::Going
    }

    /// One tick's sample of a running job: written down, watched for peaks, growth and soft
    /// bounds; a bound held for long enough asks the job to stop.
    fn sample(
        &mut self,
        alive: &[u32],
        job: &StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) {
        // An srun's tasks run in its step's cgroup, not below oomguard: they are what the
        // bounds and peaks judge (the step's counters stand for the attempt cgroup's, which
        // holds srun alone).
        self.srun_steps(state, alive, job.pgid);
        let here = state.steps.read_here();
        let mut sample = if here.cgroups.is_empty() && here.gpu_only_pids.is_empty() {
            self.sampler.sample(job.attempt, alive, job.cgroup.as_ref())
        } else {
            // The attempt cgroup (srun, and whatever else the job runs here) and each node's
            // step cgroups hold different processes: their counters add up.
            let cgroups: Vec<_> = job
                .cgroup
                .iter()
                .map(|cg| (None, cg))
                .chain(here.cgroups.into_iter().map(|(node, cg)| (Some(node), cg)))
                .collect();
            let pids: Vec<u32> = alive.iter().copied().chain(here.pids).collect();
            self.sampler.sample_scope(
                job.attempt,
                &Scope {
                    pids: &pids,
                    gpu_only_pids: &here.gpu_only_pids,
                    cgroups: &cgroups,
                },
            )
        };
        let sstat = state
            .steps
            .sstat_parts(Instant::now(), &slurm::step_memory_bytes);
        if !sstat.is_empty() {
            sample.remote_tasks_bytes = Some(sstat.iter().map(|p| p.bytes).sum());
        }
        sample.slurm_parts.extend(sstat);
        observer.sample(&sample);
        let stopping =
            state.memory_stop.is_some() || state.user_stop.is_some() || state.quiet_stop.is_some();
        if let Some(crossing) = state.watch.observe(
            &sample,
            job.started.elapsed(),
            &self.setup,
            job.cgroup.as_ref(),
            stopping,
            observer,
        ) {
            state.writing_at_stop.extend(open_for_writing(alive));
            state.stop_began.get_or_insert_with(SystemTime::now);
            self.ask_to_stop(job, state, Signal::SIGTERM, false);
            state
                .kill_at
                .get_or_insert(deadline_after(self.setup.grace));
            state.memory_stop = Some(crossing);
        }
        self.watch_quiet(&sample, job, state, observer);
    }

    /// One tick of the quiet watch: a job silent for `--hang-timeout` after an out-of-memory
    /// error, or silent and idle for `--stall-timeout`, is asked to stop as for a soft memory
    /// bound (SIGTERM, then SIGKILL after `--grace`). The tail is read only when the job has been
    /// silent that long (see [`QuietWatch::tick`]): a tick costs the same however much it printed.
    fn watch_quiet(
        &self,
        sample: &Sample,
        job: &StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) {
        let stopping =
            state.memory_stop.is_some() || state.user_stop.is_some() || state.quiet_stop.is_some();
        if stopping || !state.quiet.is_on() {
            return;
        }
        let sinks = &job.sinks;
        let Some(stop) = state.quiet.tick(
            Instant::now(),
            sinks.bytes_read(),
            sinks.output_waiting(),
            sample.cpu_ticks,
            || classify::memory_error_shown(&sinks.tail_text()),
        ) else {
            return;
        };
        observer.notice(&Notice::QuietStop(stop.clone()));
        state
            .writing_at_stop
            .extend(open_for_writing(&self.job_processes()));
        state.stop_began.get_or_insert_with(SystemTime::now);
        self.ask_to_stop(job, state, Signal::SIGTERM, false);
        state
            .kill_at
            .get_or_insert(deadline_after(self.setup.grace));
        state.quiet_stop = Some(stop);
    }

    /// Last step: the guard released, the kernel's evidence read, the attempt cgroup emptied and
    /// removed, and the record handed back.
    fn end(&mut self, job: StartedJob, state: AttemptState) -> AttemptEnd {
        if let Some(guard) = self.guard.as_mut() {
            guard.watch(None, None);
        }
        let Phase::Ended {
            ending, duration, ..
        } = state.phase
        else {
            unreachable!("the loop ends only after the main process is reaped")
        };
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
            ending,
            user_stop: state.user_stop,
            memory_stop: state.memory_stop,
            tail: job.sinks.tail_text(),
            kernel,
            started_at: job.started_at,
            duration,
            peaks,
            pids: state.known,
            sigkilled_descendant: state.sigkilled_descendant,
            quiet_stop: state.quiet_stop,
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
    pub fn system_now(&self) -> Option<crate::mem::system::SystemMem> {
        self.sampler.system_now()
    }

    /// The cards as the driver lists them; `None` without GPU readings.
    pub fn gpu_devices(&mut self) -> Option<Vec<crate::gpu::GpuDevice>> {
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
