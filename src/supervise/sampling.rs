//! An attempt's samples while it runs: the tree looked at on each tick ([`Supervisor::look`]),
//! sampled with its Slurm steps' memory ([`Supervisor::sample`]), what the samples add up to
//! ([`SampleWatch`]: peaks, soft-bound streaks, the growth trend and its notice, the GPU
//! processes a PID namespace hides), and the quiet watch's tick. What a bound held or a silence
//! means for the attempt is its rules' ([`super::attempt`]); this file only tells them.

use std::time::{Duration, Instant};

use super::{attempt, AttemptState, Notice, Observer, Setup, StartedJob, Supervisor};
use crate::judge::classify;
use crate::judge::taken::HostReading;
use crate::observe::cgroup::JobCgroup;
use crate::observe::gpu::JobGpu;
use crate::observe::sampler::{Peaks, Sample, Scope};
use crate::observe::slurm;
use crate::observe::watch::{self, BoundWatch, Crossing, Trend};

/// What one attempt's samples add up to: peaks, soft-bound streaks, the growth trend, and
/// which notices were already given.
pub(super) struct SampleWatch {
    pub(super) peaks: Peaks,
    bounds: BoundWatch,
    trend: Trend,
    growth_warned: bool,
    gpu_unattributed_told: bool,
    /// The PIDs the driver listed on the attempt's first reading: the card's neighbours then.
    gpu_listed_at_start: Option<Vec<u32>>,
    /// The attempt's first and last readings of the card while the job had processes: who held
    /// what at its start and at its death.
    pub(super) gpu_first: Option<JobGpu>,
    pub(super) gpu_last: Option<JobGpu>,
    /// The machine's memory and the job's share at the same two moments.
    pub(super) host_first: Option<HostReading>,
    pub(super) host_last: Option<HostReading>,
}

impl SampleWatch {
    pub(super) fn new(setup: &Setup) -> Self {
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
        ceilings.push((
            max,
            format!("--max-rss {}", crate::observe::units::human_bytes(max)),
        ));
    }
    if let Some(limit) = cgroup.and_then(JobCgroup::limit_bytes) {
        ceilings.push((
            limit,
            format!(
                "the memory limit {}",
                crate::observe::units::human_bytes(limit)
            ),
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

/// Whether the attempt goes on after a look at the job's tree.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Look {
    Going,
    Done,
}

impl Supervisor {
    /// Looks at the job's tree: on a tick while it runs, samples it (a soft bound held stops
    /// it); when the main process has `just_ended`, samples what it left once (DataLoader
    /// workers, ranks still hold memory: a short attempt gets real peaks); once it ended, stops
    /// its leftovers and, when they are gone, lets the readers drain. The tree is walked once,
    /// on ticks and, after the end, on every wake-up (to see the leftovers go); not on each
    /// SIGCHLD of a busy job.
    pub(super) fn look(
        &mut self,
        tick: bool,
        just_ended: bool,
        job: &mut StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) -> Look {
        let ended = state.rules.main_ended();
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
        // The main process is gone; what it left behind is ended gently, then for good.
        let leftovers = attempt::Wake::Leftovers { alive: alive.len() };
        self.follow(leftovers, &alive, job, state, observer);
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
        if let Some(crossing) = state.watch.observe(
            &sample,
            job.started.elapsed(),
            &self.setup,
            job.cgroup.as_ref(),
            state.rules.stopping(),
            observer,
        ) {
            self.follow(
                attempt::Wake::MemoryBound(crossing),
                alive,
                job,
                state,
                observer,
            );
        }
        self.watch_quiet(&sample, job, state, observer);
    }

    /// One tick of the quiet watch: a job silent for `--hang-timeout` after an out-of-memory error,
    /// or silent and idle for `--stall-timeout`, is asked to stop as for a soft memory bound
    /// (SIGTERM, then SIGKILL after `--grace`). The tail is read only when the job has been silent
    /// that long (see [`crate::judge::quiet::QuietWatch::tick`]): a tick costs the same however
    /// much it printed.
    fn watch_quiet(
        &self,
        sample: &Sample,
        job: &StartedJob,
        state: &mut AttemptState,
        observer: &mut dyn Observer,
    ) {
        if state.rules.stopping() || !state.quiet.is_on() {
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
        self.follow(attempt::Wake::Quiet(stop), &[], job, state, observer);
    }
}
