//! Samples the job's memory once per tick: the whole process tree's RSS, PSS and swap, the
//! machine's available memory and pressure, the job's cgroup usage, and the job's GPU memory.
//! Keeps the peaks of an attempt. Each tick costs a few small reads per process of the job's
//! tree and nothing per process of the machine.
//!
//! PSS is the costly number (smaps_rollup walks every mapping: ~0.15 ms for a small process,
//! ~14 ms for a 4 GiB one), so it is read on every tick only while a full PSS pass costs under
//! 5% of the interval; otherwise every Nth tick, with N chosen from the measured cost (at least
//! every 60 ticks). It is read at once, whatever the schedule, when the tree gains or loses a
//! process (a fork shares pages, which only PSS sees) or its RSS moved by more than 10% since the
//! last read. Between reads, the soft bounds use the last PSS plus the RSS growth since (exact
//! for private pages, which is what grows without a fork); the timeline shows PSS only on ticks
//! that read it. Deciding what a sample means is `watch`'s job; writing it down is `report`'s.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use crate::cgroup::JobCgroup;
use crate::gpu::{self, GpuProbe, JobGpu};
use crate::mem::process::ProcReader;
use crate::mem::system::{SystemMem, SystemReader};
use crate::mem::tree_mem::{read_tree, TreeMem};
use crate::watch::Reading;

/// The share of the interval a PSS pass may take before it is spread over several ticks.
const PSS_BUDGET: f64 = 0.05;
/// PSS is read at least this often, however costly.
const PSS_MAX_EVERY: u32 = 60;

/// One tick's numbers.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub unix_time_s: f64,
    pub attempt: u32,
    /// `tree.pss_bytes` is `Some` only on ticks that read PSS.
    pub tree: TreeMem,
    /// The tree's PSS as read this tick, or estimated from the last read.
    pub pss_estimate_bytes: Option<u64>,
    pub system: Option<SystemMem>,
    pub gpu: Option<JobGpu>,
    pub cgroup_bytes: Option<u64>,
}

impl Sample {
    /// The job's memory as the bounds read it: its cgroup's usage (exact, page cache and
    /// kernel memory included) when it has one, else the tree's PSS, else its RSS.
    pub fn job_bytes(&self) -> Option<u64> {
        self.cgroup_bytes
            .or(self.tree.pss_bytes)
            .or((self.tree.processes > 0).then_some(self.tree.rss_bytes))
    }

    /// The job's GPU memory, where its processes are listed by the driver.
    pub fn gpu_bytes(&self) -> Option<u64> {
        self.gpu.as_ref().and_then(|g| g.job_bytes)
    }

    pub fn reading(&self) -> Reading {
        Reading {
            job_bytes: self.job_bytes(),
            gpu_bytes: self.gpu_bytes(),
            available_bytes: self.system.map(|s| s.available_bytes),
            total_bytes: self.system.map(|s| s.total_bytes),
        }
    }
}

/// The highest values of one attempt; `None` where never known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peaks {
    pub rss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub gpu_bytes: Option<u64>,
    pub cgroup_bytes: Option<u64>,
}

impl Peaks {
    pub fn update(&mut self, s: &Sample) {
        // A process's VmHWM is a floor for the tree's peak RSS: it catches spikes between ticks.
        let rss = (s.tree.processes > 0)
            .then_some(s.tree.rss_bytes.max(s.tree.max_hwm_bytes.unwrap_or(0)));
        for (peak, value) in [
            (&mut self.rss_bytes, rss),
            (&mut self.pss_bytes, s.tree.pss_bytes),
            (&mut self.swap_bytes, s.tree.swap_bytes),
            (&mut self.gpu_bytes, s.gpu_bytes()),
            (&mut self.cgroup_bytes, s.cgroup_bytes),
        ] {
            raise(peak, value);
        }
    }

    /// Folds in the cgroup's own high-water mark, exact where the samples may miss a spike.
    pub fn fold_cgroup_peak(&mut self, cgroup_peak_bytes: Option<u64>) {
        raise(&mut self.cgroup_bytes, cgroup_peak_bytes);
    }
}

fn raise(peak: &mut Option<u64>, value: Option<u64>) {
    if let Some(v) = value {
        *peak = Some(peak.map_or(v, |p| p.max(v)));
    }
}

/// When to read PSS: every `every` ticks, adapted to its measured cost, and at once when the
/// tree changed.
#[derive(Debug, Clone)]
struct PssSchedule {
    every: u32,
    countdown: u32,
    /// What the last read saw: the tree's PSS, its RSS, and its PIDs.
    last: Option<LastPss>,
}

#[derive(Debug, Clone, PartialEq)]
struct LastPss {
    pss_bytes: u64,
    rss_bytes: u64,
    pids: Vec<u32>,
}

/// RSS moving by more than this fraction since the last PSS read forces a new read.
const PSS_RSS_DRIFT: f64 = 0.10;

impl PssSchedule {
    fn new() -> Self {
        PssSchedule {
            every: 1,
            countdown: 0,
            last: None,
        }
    }

    /// Whether this tick reads PSS, given the tree's PIDs (sorted) and RSS.
    fn due(&mut self, pids: &[u32], rss_bytes: u64) -> bool {
        let changed = match &self.last {
            None => true,
            Some(last) => {
                let drift = (rss_bytes as f64 - last.rss_bytes as f64).abs();
                last.pids != pids || drift > PSS_RSS_DRIFT * last.rss_bytes as f64
            }
        };
        if changed || self.countdown == 0 {
            self.countdown = self.every.saturating_sub(1);
            true
        } else {
            self.countdown -= 1;
            false
        }
    }

    /// Spreads the next reads so one costs at most PSS_BUDGET of the interval on average.
    fn measured(&mut self, cost: Duration, interval: Duration) {
        let budget = interval.as_secs_f64() * PSS_BUDGET;
        self.every = ((cost.as_secs_f64() / budget).ceil() as u32).clamp(1, PSS_MAX_EVERY);
        self.countdown = self.every - 1;
    }

    /// The tree's PSS between reads: the last one plus the RSS grown since.
    fn estimate(&self, rss_bytes: u64) -> Option<u64> {
        let last = self.last.as_ref()?;
        Some((last.pss_bytes + rss_bytes).saturating_sub(last.rss_bytes))
    }
}

/// Takes samples for one run (the GPU probe and the PSS schedule live across attempts).
pub struct Sampler {
    procs: ProcReader,
    system: SystemReader,
    gpu: Box<dyn GpuProbe>,
    /// Whether the last snapshot failed: a failure is reported when it starts and when it ends,
    /// not on every tick, and the probe is asked again each tick.
    gpu_failing: bool,
    interval: Duration,
    pss: PssSchedule,
}

impl Sampler {
    pub fn new(gpu: Box<dyn GpuProbe>, interval: Duration) -> Sampler {
        Sampler {
            procs: ProcReader::default(),
            system: SystemReader::default(),
            gpu,
            gpu_failing: false,
            interval,
            pss: PssSchedule {
                every: 1,
                countdown: 0,
                last: None,
            },
        }
    }

    /// Starts a new attempt: the tree is new, so PSS is read on its first tick.
    pub fn reset(&mut self) {
        self.pss = PssSchedule {
            every: self.pss.every,
            ..PssSchedule::new()
        };
    }

    /// One sample of the processes `pids` (the job's tree) and of `cgroup`.
    pub fn sample(&mut self, attempt: u32, pids: &[u32], cgroup: Option<&JobCgroup>) -> Sample {
        let unix_time_s = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut sorted = pids.to_vec();
        sorted.sort_unstable();
        let mut tree = read_tree(&self.procs, pids, false);
        let mut pss_estimate_bytes = self.pss.estimate(tree.rss_bytes);
        if self.pss.due(&sorted, tree.rss_bytes) {
            let started = Instant::now();
            tree = read_tree(&self.procs, pids, true);
            self.pss.measured(started.elapsed(), self.interval);
            self.pss.last = tree.pss_bytes.map(|pss_bytes| LastPss {
                pss_bytes,
                rss_bytes: tree.rss_bytes,
                pids: sorted,
            });
            pss_estimate_bytes = tree.pss_bytes;
        }
        let job_pids: HashSet<u32> = pids.iter().copied().collect();
        Sample {
            unix_time_s,
            attempt,
            tree,
            pss_estimate_bytes,
            system: self.system.read(),
            gpu: self
                .gpu_snapshot()
                .map(|snap| gpu::attribute(&snap, &job_pids)),
            cgroup_bytes: cgroup.and_then(JobCgroup::usage_bytes),
        }
    }

    fn gpu_snapshot(&mut self) -> Option<gpu::GpuSnapshot> {
        match self.gpu.snapshot() {
            Ok(snap) => {
                if std::mem::take(&mut self.gpu_failing) {
                    tracing::warn!("GPU readings are back");
                }
                Some(snap)
            }
            Err(e) => {
                if !std::mem::replace(&mut self.gpu_failing, true) {
                    tracing::warn!("no GPU readings until the driver answers again: {e}");
                }
                None
            }
        }
    }

    /// Which of `pids` the GPU driver still lists; `None` when there is no GPU to ask.
    pub fn gpu_holders(&mut self, pids: &HashSet<u32>) -> Option<Vec<u32>> {
        let snap = self.gpu_snapshot()?;
        Some(
            snap.processes
                .iter()
                .map(|p| p.pid)
                .filter(|p| pids.contains(p))
                .collect(),
        )
    }

    /// How the GPU is watched, for `doctor` and `-v`.
    pub fn gpu_description(&self) -> String {
        self.gpu.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_once(s: &mut PssSchedule, pids: &[u32], rss: u64, pss: u64) {
        assert!(s.due(pids, rss));
        s.last = Some(LastPss {
            pss_bytes: pss,
            rss_bytes: rss,
            pids: pids.to_vec(),
        });
    }

    #[test]
    fn pss_is_spread_over_ticks_by_its_cost() {
        let interval = Duration::from_secs(1);
        // (cost of one PSS pass, expected spacing): 5% of 1 s is 50 ms.
        let table = [(1, 1), (50, 1), (51, 2), (140, 3), (10_000, PSS_MAX_EVERY)];
        for (cost_ms, every) in table {
            let mut s = PssSchedule::new();
            read_once(&mut s, &[1], 1000, 500);
            s.measured(Duration::from_millis(cost_ms), interval);
            assert_eq!(s.every, every, "{cost_ms} ms");
            let pattern: Vec<bool> = (0..every * 2).map(|_| s.due(&[1], 1000)).collect();
            assert_eq!(
                pattern.iter().filter(|d| **d).count(),
                2,
                "{cost_ms} ms: {pattern:?}"
            );
            assert!(pattern[every as usize - 1], "{pattern:?}");
        }
    }

    #[test]
    fn a_changed_tree_is_read_at_once() {
        let mut s = PssSchedule::new();
        read_once(&mut s, &[1], 1000, 500);
        s.measured(Duration::from_secs(10), Duration::from_secs(1));
        assert!(!s.due(&[1], 1050), "5% drift waits for the schedule");
        assert!(s.due(&[1, 2], 1050), "a fork is read at once");
        read_once(&mut s, &[1, 2], 1050, 520);
        assert!(s.due(&[1, 2], 1200), "15% drift is read at once");
    }

    #[test]
    fn pss_between_reads_adds_the_rss_growth() {
        let mut s = PssSchedule::new();
        assert_eq!(s.estimate(1000), None);
        read_once(&mut s, &[1], 1000, 200);
        assert_eq!(s.estimate(1000), Some(200));
        assert_eq!(s.estimate(1500), Some(700));
        assert_eq!(s.estimate(100), Some(0));
    }

    #[test]
    fn peaks_keep_the_highest_known_value() {
        let mut peaks = Peaks::default();
        let mut s = Sample {
            tree: TreeMem {
                processes: 2,
                rss_bytes: 100,
                pss_bytes: Some(80),
                ..TreeMem::default()
            },
            ..Sample::default()
        };
        peaks.update(&s);
        s.tree.rss_bytes = 50;
        s.tree.pss_bytes = None;
        s.pss_estimate_bytes = Some(500); // an estimate is not a peak
        peaks.update(&s);
        assert_eq!(peaks.rss_bytes, Some(100));
        assert_eq!(peaks.pss_bytes, Some(80));
        assert_eq!(peaks.gpu_bytes, None);
        s.tree.max_hwm_bytes = Some(150);
        peaks.update(&s);
        assert_eq!(peaks.rss_bytes, Some(150));
        peaks.fold_cgroup_peak(Some(4096));
        assert_eq!(peaks.cgroup_bytes, Some(4096));
        // A tree with no process yet has no RSS, not zero.
        let mut empty = Peaks::default();
        empty.update(&Sample::default());
        assert_eq!(empty.rss_bytes, None);
    }
}
