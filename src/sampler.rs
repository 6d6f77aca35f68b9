//! Samples the job's memory once per tick: the whole process tree's RSS, PSS and swap, the
//! machine's available memory and pressure, the job's cgroup usage, and the job's GPU memory.
//! Keeps the peaks of an attempt. Each tick costs a few small reads per process of the job's
//! tree and nothing per process of the machine.
//!
//! PSS is the costly number (smaps_rollup walks every mapping: ~0.15 ms for a small process,
//! ~14 ms for a 4 GiB one), so it is read on every tick only while a full PSS pass costs under
//! 5% of the interval; otherwise every Nth tick, with N chosen from the measured cost, and the
//! ticks between scale the last PSS by the tree's RSS change. Deciding what a sample means is
//! `watch`'s job; writing it down is `report`'s.

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
    pub tree: TreeMem,
    /// Whether `tree.pss_bytes` was read this tick (else estimated from the last read).
    pub pss_measured: bool,
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
        let pss = s.tree.pss_bytes.filter(|_| s.pss_measured);
        for (peak, value) in [
            (&mut self.rss_bytes, rss),
            (&mut self.pss_bytes, pss),
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

/// When to read PSS: every `every` ticks, adapted to its measured cost.
#[derive(Debug, Clone)]
struct PssSchedule {
    every: u32,
    countdown: u32,
    /// The last measured tree PSS and the tree RSS at that moment.
    last: Option<(u64, u64)>,
}

impl PssSchedule {
    fn due(&mut self) -> bool {
        if self.countdown == 0 {
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
}

/// Scales a PSS measured at `rss_then` to the tree's RSS now: the shared fraction of a tree
/// changes slowly, its size can change fast.
fn estimate_pss(last: (u64, u64), rss_now: u64) -> u64 {
    let (pss, rss_then) = last;
    if rss_then == 0 {
        return pss;
    }
    (pss as f64 * rss_now as f64 / rss_then as f64) as u64
}

/// Takes samples for one run (the GPU probe and the PSS schedule live across attempts).
pub struct Sampler {
    procs: ProcReader,
    system: SystemReader,
    gpu: Box<dyn GpuProbe>,
    /// Set after the probe failed once: the failure is reported once, then GPU columns stay empty.
    gpu_failed: bool,
    interval: Duration,
    pss: PssSchedule,
}

impl Sampler {
    pub fn new(gpu: Box<dyn GpuProbe>, interval: Duration) -> Sampler {
        Sampler {
            procs: ProcReader::default(),
            system: SystemReader::default(),
            gpu,
            gpu_failed: false,
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
        self.pss.countdown = 0;
        self.pss.last = None;
    }

    /// One sample of the processes `pids` (the job's tree) and of `cgroup`.
    pub fn sample(&mut self, attempt: u32, pids: &[u32], cgroup: Option<&JobCgroup>) -> Sample {
        let unix_time_s = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let with_pss = self.pss.due();
        let started = Instant::now();
        let mut tree = read_tree(&self.procs, pids, with_pss);
        if with_pss {
            self.pss.measured(started.elapsed(), self.interval);
            self.pss.last = tree.pss_bytes.map(|pss| (pss, tree.rss_bytes));
        } else {
            tree.pss_bytes = self.pss.last.map(|last| estimate_pss(last, tree.rss_bytes));
        }
        let job_pids: HashSet<u32> = pids.iter().copied().collect();
        Sample {
            unix_time_s,
            attempt,
            pss_measured: with_pss && tree.pss_bytes.is_some(),
            tree,
            system: self.system.read(),
            gpu: self
                .gpu_snapshot()
                .map(|snap| gpu::attribute(&snap, &job_pids)),
            cgroup_bytes: cgroup.and_then(JobCgroup::usage_bytes),
        }
    }

    fn gpu_snapshot(&mut self) -> Option<gpu::GpuSnapshot> {
        if self.gpu_failed {
            return None;
        }
        match self.gpu.snapshot() {
            Ok(snap) => Some(snap),
            Err(e) => {
                tracing::warn!("GPU monitoring stops: {e}");
                self.gpu_failed = true;
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

    #[test]
    fn pss_is_spread_over_ticks_by_its_cost() {
        let interval = Duration::from_secs(1);
        // (cost of one PSS pass, expected spacing): 5% of 1 s is 50 ms.
        let table = [(1, 1), (50, 1), (51, 2), (140, 3), (10_000, PSS_MAX_EVERY)];
        for (cost_ms, every) in table {
            let mut s = PssSchedule {
                every: 1,
                countdown: 0,
                last: None,
            };
            assert!(s.due());
            s.measured(Duration::from_millis(cost_ms), interval);
            assert_eq!(s.every, every, "{cost_ms} ms");
            let pattern: Vec<bool> = (0..every * 2).map(|_| s.due()).collect();
            assert_eq!(
                pattern.iter().filter(|d| **d).count(),
                2,
                "{cost_ms} ms: {pattern:?}"
            );
            assert!(pattern[every as usize - 1], "{pattern:?}");
        }
    }

    #[test]
    fn pss_between_reads_follows_rss() {
        assert_eq!(estimate_pss((200, 1000), 1000), 200);
        assert_eq!(estimate_pss((200, 1000), 1500), 300);
        assert_eq!(estimate_pss((200, 0), 1500), 200);
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
            pss_measured: true,
            ..Sample::default()
        };
        peaks.update(&s);
        s.tree.rss_bytes = 50;
        s.tree.pss_bytes = Some(500);
        s.pss_measured = false; // an estimate is not a peak
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
