//! Samples the job's memory once per tick: the whole process tree's RSS, PSS and swap, the
//! machine's available memory and pressure, the job's cgroup usage, and the job's GPU memory.
//! Keeps the peaks of an attempt. Each tick costs a few small reads per process of the job's
//! tree and nothing per process of the machine.
//!
//! PSS is the costly number (smaps_rollup walks every mapping: ~0.15 ms for a small process,
//! ~14 ms for a 4 GiB one), so it is read on every tick only while a full PSS pass costs under
//! 5% of the interval; otherwise every Nth tick, with N chosen from the measured cost (at least
//! every 60 ticks). It is read at once, whatever the schedule, when the tree's summed RSS moved
//! by more than 10% since the last read (a fork of DataLoader workers, a sudden allocation).
//! A PSS is never guessed: ticks that did not read it leave it unknown, in the timeline and for
//! the soft bounds and the growth trend, which then count only ticks with a real reading.
//! Deciding what a sample means is `watch`'s job; writing it down is `report`'s.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use crate::cgroup::JobCgroup;
use crate::gpu::{self, GpuProbe, JobGpu};
use crate::mem::process::ProcReader;
use crate::mem::system::{SystemMem, SystemReader};
use crate::mem::tree_mem::{read_tree_cpu_ticks, read_tree_when, TreeMem};
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
    /// Whether this tick tried to read PSS (it may still be unreadable: kernel < 4.14).
    pub pss_read: bool,
    pub system: Option<SystemMem>,
    pub gpu: Option<JobGpu>,
    /// The job cgroup's usage, page cache included (what its hard limit applies to).
    pub cgroup_bytes: Option<u64>,
    /// The job cgroup's usage less the inactive file cache the kernel can drop for free.
    pub cgroup_working_set_bytes: Option<u64>,
    /// The tree's CPU time, user plus system, in clock ticks (USER_HZ): read only when asked
    /// for (`--stall-timeout`, see [`Sampler::read_cpu_time`]), `None` otherwise.
    pub cpu_ticks: Option<u64>,
}

impl Sample {
    /// The job's memory as the bounds and the trend read it: its cgroup's working set when it
    /// has one (exact, cheap, and blind to droppable page cache, so streaming a data set does
    /// not count), else the tree's PSS on ticks that read it, else — where PSS cannot be read
    /// at all — its RSS. `None` on ticks that skipped PSS: unknown is not a guess.
    pub fn job_bytes(&self) -> Option<u64> {
        if let Some(ws) = self.cgroup_working_set_bytes {
            return Some(ws);
        }
        match (self.pss_read, self.tree.pss_bytes) {
            (true, Some(pss)) => Some(pss),
            (true, None) => (self.tree.processes > 0).then_some(self.tree.rss_bytes),
            (false, _) => None,
        }
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
    /// The largest resident set of any single process of the job (VmHWM while it ran,
    /// `ru_maxrss` when it was reaped).
    pub process_rss_bytes: Option<u64>,
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
            (&mut self.process_rss_bytes, s.tree.max_hwm_bytes),
        ] {
            raise(peak, value);
        }
    }

    /// Folds in the largest resident set one process ever had (wait4's `ru_maxrss` when it was
    /// reaped): a floor for the tree's peak RSS, exact even for a spike shorter than a tick.
    pub fn fold_process_peak(&mut self, max_rss_bytes: u64) {
        if max_rss_bytes > 0 {
            raise(&mut self.rss_bytes, Some(max_rss_bytes));
            raise(&mut self.process_rss_bytes, Some(max_rss_bytes));
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
/// tree's RSS moved.
#[derive(Debug, Clone)]
struct PssSchedule {
    every: u32,
    countdown: u32,
    /// The tree's summed RSS at the last read.
    rss_at_read: Option<u64>,
}

/// RSS moving by more than this fraction since the last PSS read forces a new read.
const PSS_RSS_DRIFT: f64 = 0.10;

impl PssSchedule {
    fn new() -> Self {
        PssSchedule {
            every: 1,
            countdown: 0,
            rss_at_read: None,
        }
    }

    /// Whether this tick reads PSS, given the tree's summed RSS now.
    fn due(&mut self, rss_bytes: u64) -> bool {
        let drifted = self.rss_at_read.is_none_or(|then| {
            (rss_bytes as f64 - then as f64).abs() > PSS_RSS_DRIFT * then as f64
        });
        if drifted || self.countdown == 0 {
            self.countdown = self.every.saturating_sub(1);
            self.rss_at_read = Some(rss_bytes);
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
    /// Whether samples read the tree's CPU time (one more small read per process).
    read_cpu: bool,
}

impl Sampler {
    pub fn new(gpu: Box<dyn GpuProbe>, interval: Duration) -> Sampler {
        Sampler {
            procs: ProcReader::default(),
            system: SystemReader::default(),
            gpu,
            gpu_failing: false,
            interval,
            pss: PssSchedule::new(),
            read_cpu: false,
        }
    }

    /// Whether samples read the tree's CPU time ([`Sample::cpu_ticks`]): only the stall watch
    /// needs it, so it costs nothing without `--stall-timeout`.
    pub fn read_cpu_time(&mut self, on: bool) {
        self.read_cpu = on;
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
        let started = Instant::now();
        let mut pss_read = false;
        let tree = read_tree_when(&self.procs, pids, |cheap| {
            pss_read = self.pss.due(cheap.rss_bytes);
            pss_read
        });
        if pss_read {
            // The cheap part is a few µs per process: the elapsed time is the PSS pass.
            self.pss.measured(started.elapsed(), self.interval);
        }
        // The PID set is built only when there is a snapshot to attribute.
        let gpu = self
            .gpu_snapshot()
            .map(|snap| gpu::attribute(&snap, &pids.iter().copied().collect()));
        Sample {
            unix_time_s,
            attempt,
            tree,
            pss_read,
            system: self.system.read(),
            gpu,
            cgroup_bytes: cgroup.and_then(JobCgroup::usage_bytes),
            cgroup_working_set_bytes: cgroup.and_then(JobCgroup::working_set_bytes),
            cpu_ticks: self
                .read_cpu
                .then(|| read_tree_cpu_ticks(&self.procs, pids))
                .flatten(),
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
            let mut s = PssSchedule::new();
            assert!(s.due(1000), "the first tick reads");
            s.measured(Duration::from_millis(cost_ms), interval);
            assert_eq!(s.every, every, "{cost_ms} ms");
            let pattern: Vec<bool> = (0..every * 2).map(|_| s.due(1000)).collect();
            assert_eq!(
                pattern.iter().filter(|d| **d).count(),
                2,
                "{cost_ms} ms: {pattern:?}"
            );
            assert!(pattern[every as usize - 1], "{pattern:?}");
        }
    }

    #[test]
    fn a_moving_rss_is_read_at_once() {
        let mut s = PssSchedule::new();
        assert!(s.due(1000));
        s.measured(Duration::from_secs(10), Duration::from_secs(1));
        assert!(!s.due(1050), "5% drift waits for the schedule");
        assert!(!s.due(950));
        assert!(s.due(5000), "a fork of workers is read at once");
        assert!(!s.due(5100));
        assert!(s.due(4000), "so is a big release");
    }

    #[test]
    fn job_bytes_never_guesses() {
        let tree = TreeMem {
            processes: 3,
            rss_bytes: 900,
            pss_bytes: Some(300),
            ..TreeMem::default()
        };
        let read = Sample {
            tree,
            pss_read: true,
            ..Sample::default()
        };
        assert_eq!(read.job_bytes(), Some(300));
        let skipped = Sample {
            tree: TreeMem {
                pss_bytes: None,
                ..tree
            },
            pss_read: false,
            ..Sample::default()
        };
        assert_eq!(skipped.job_bytes(), None);
        let unreadable = Sample {
            tree: TreeMem {
                pss_bytes: None,
                ..tree
            },
            pss_read: true,
            ..Sample::default()
        };
        assert_eq!(
            unreadable.job_bytes(),
            Some(900),
            "no PSS on this kernel: RSS"
        );
        let in_cgroup = Sample {
            cgroup_bytes: Some(2000),
            cgroup_working_set_bytes: Some(400),
            ..skipped
        };
        assert_eq!(
            in_cgroup.job_bytes(),
            Some(400),
            "the working set, not the page cache"
        );
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
        s.tree.pss_bytes = None; // a tick that skipped PSS
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
