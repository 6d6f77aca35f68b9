//! Samples the job's memory once per tick: the tree's memory, the machine's available memory and
//! pressure, and the job's GPU memory; keeps the peaks of an attempt. A tick costs the same
//! however much memory the job holds.
//!
//! The tree's memory is the cgroup's counters, else per-process files. Where the attempt has a
//! cgroup, its own counters say what the job holds (usage, working set, anon, file cache, shmem,
//! swap: the usage file and one read of `memory.stat`), O(1) and counting shared pages once;
//! its processes come from `cgroup.procs` (the caller's job), and each gives its RSS from
//! /proc/PID/statm (~2 µs) for the per-process figures (the largest process; a process's peak
//! comes from its `ru_maxrss` when reaped). Without a cgroup each process is read from
//! /proc/PID/status (~6 µs: VmRSS, VmSwap and the peak VmHWM in one read) and summed.
//!
//! PSS (smaps_rollup) is the one read whose cost grows with the job (the kernel walks the page
//! tables: ~14 ms for 4 GiB), so it is read only where it decides or reports something, never on a
//! clock that makes a big job pay more for sitting still. Without a cgroup's working set: on ticks
//! where the tree's summed RSS reaches `--max-rss` (PSS ≤ RSS, so below the bound it cannot cross
//! it), and for the record on the first tick of the tree and whenever its summed RSS has moved by
//! more than [`PSS_MOVE_SHARE`] since the last read (so the record's PSS follows the job within
//! that share, its peak included, and a steady job reads it once). With a cgroup its counters are
//! the record (exact, O(1)): no PSS. `--pss-interval` (off by default) adds a read at most that
//! often for those who want the clock. A PSS is never guessed: ticks that did not read it leave it
//! unknown, in the timeline and for the growth trend, which then count only ticks with a real
//! reading. Deciding what a sample means is [`crate::observe::watch`]'s job; writing it down is
//! [`crate::remember::record`]'s.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use crate::observe::cgroup::{CgroupMem, JobCgroup};
use crate::observe::gpu::{self, GpuProbe, JobGpu};
use crate::observe::mem::process::ProcReader;
use crate::observe::mem::system::{SystemMem, SystemReader};
use crate::observe::mem::tree_mem::{read_tree_cpu_ticks, read_tree_from, PerProcess, TreeMem};
use crate::observe::watch::Reading;

/// How far the tree's summed RSS moves, as a share of what it was at the last PSS read, before
/// PSS is read again for the record (without a cgroup). The record's peak PSS, which the fit
/// takes for the job's host memory without a cgroup, is then within this share of the truth,
/// inside the fit's 10% margin; a job growing 1000-fold reads it about 140 times on the way.
pub const PSS_MOVE_SHARE: f64 = 0.05;

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
    /// All the job cgroup's counters of this tick (`cgroup_bytes` and
    /// `cgroup_working_set_bytes` repeat two of them).
    pub cgroup: Option<CgroupMem>,
    /// The tree's CPU time, user plus system, in clock ticks (USER_HZ): read only when asked
    /// for (`--stall-timeout`, see [`Sampler::read_cpu_time`]), `None` otherwise.
    pub cpu_ticks: Option<u64>,
    /// The memory of the job's srun tasks whose cgroup cannot be read here (tasks on other
    /// nodes), as Slurm's `sstat` reports it: added to what the bounds judge.
    pub remote_tasks_bytes: Option<u64>,
    /// Where the memory of the job's Slurm tasks is, part by part: each node whose step cgroup
    /// is read here, and each step whose tasks `sstat` reports as a whole (see [`SlurmPart`]).
    /// Empty for a job without srun steps. The parts sum to what the steps add to
    /// [`Sample::job_bytes`].
    pub slurm_parts: Vec<SlurmPart>,
}

/// The memory of some of a job's Slurm tasks, read in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmPart {
    pub place: SlurmPlace,
    /// The working set of the node's step cgroups (usage where the working set is unknown), or
    /// the step's `mem=` in sstat's `TRESUsageInTot`.
    pub bytes: u64,
}

/// Where a [`SlurmPart`] was read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SlurmPlace {
    /// A node's step cgroups, read here (several slurmd on one host each have their own tree):
    /// the node's name.
    Node(String),
    /// Every task of one step, on all its nodes, as `sstat` sums them (some node's cgroup
    /// cannot be read here).
    Step(crate::observe::slurm::Step),
}

/// What one sample reads as the job's ([`Sampler::sample_scope`]).
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    /// The processes read from /proc (the tree's numbers) and counted as the job's on the GPU.
    pub pids: &'a [u32],
    /// Processes counted as the job's on the GPU only: their memory is counted elsewhere (the
    /// tasks of a Slurm step that `sstat` reports as a whole).
    pub gpu_only_pids: &'a [u32],
    /// The cgroups whose counters are summed into the sample's: the attempt's, and the Slurm
    /// steps' on this host, each of these with its node.
    pub cgroups: &'a [(Option<SlurmPlace>, &'a JobCgroup)],
}

impl Sample {
    /// The job's memory as the bounds and the trend read it: its cgroup's working set when it
    /// has one (exact, cheap, and blind to droppable page cache, so streaming a data set does
    /// not count), else the tree's PSS on ticks that read it, else — where PSS cannot be read
    /// at all — its RSS. `None` on ticks that skipped PSS: unknown is not a guess.
    /// Plus the srun tasks Slurm reports for ([`Sample::remote_tasks_bytes`]).
    pub fn job_bytes(&self) -> Option<u64> {
        self.own_bytes()
            .map(|b| b + self.remote_tasks_bytes.unwrap_or(0))
    }

    /// [`Sample::job_bytes`] of what is read here.
    fn own_bytes(&self) -> Option<u64> {
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

    /// The numbers the soft bounds judge. On a tick that skipped PSS the job's memory is the
    /// summed RSS, an upper bound of the PSS: PSS is skipped only while RSS is under `--max-rss`
    /// (see the module docs), so this says "under" truthfully and breaks a streak of crossings.
    pub fn reading(&self) -> Reading {
        let under_bound = (!self.pss_read && self.tree.processes > 0)
            .then(|| self.tree.rss_bytes + self.remote_tasks_bytes.unwrap_or(0));
        Reading {
            job_bytes: self.job_bytes().or(under_bound),
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
    /// What other processes held on the job's cards.
    pub gpu_neighbours_bytes: Option<u64>,
}

impl Peaks {
    pub fn update(&mut self, s: &Sample) {
        // A process's VmHWM is a floor for the tree's peak RSS: it catches spikes between ticks.
        let rss = (s.tree.processes > 0)
            .then_some(s.tree.rss_bytes.max(s.tree.max_hwm_bytes.unwrap_or(0)));
        // srun tasks that only sstat sees (other nodes) are part of the job's memory, as the
        // bounds judge it: the peaks the table and the fit read hold them too.
        let remote =
            |bytes: Option<u64>| bytes.map(|b| b.saturating_add(s.remote_tasks_bytes.unwrap_or(0)));
        for (peak, value) in [
            (&mut self.rss_bytes, remote(rss)),
            (&mut self.pss_bytes, s.tree.pss_bytes),
            (&mut self.swap_bytes, s.tree.swap_bytes),
            (&mut self.gpu_bytes, s.gpu_bytes()),
            (
                &mut self.gpu_neighbours_bytes,
                s.gpu.as_ref().map(JobGpu::neighbours_bytes),
            ),
            (&mut self.cgroup_bytes, remote(s.cgroup_bytes)),
            (
                &mut self.process_rss_bytes,
                s.tree.max_hwm_bytes.max(s.tree.largest_rss_bytes),
            ),
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

/// When to read PSS: on ticks where a soft bound needs it, where the tree's RSS moved (without a
/// cgroup), and at most every `every` on a clock.
#[derive(Debug, Clone)]
struct PssPolicy {
    /// `--pss-interval`; `None`: no clock.
    every: Option<Duration>,
    /// `--max-rss`: at or above it, a tree without a cgroup working set reads PSS every tick.
    bound_bytes: Option<u64>,
    /// When the next read on the clock is due.
    next_at: Option<Instant>,
    /// The tree's summed RSS at the last read; `None` before the first.
    read_at_rss_bytes: Option<u64>,
}

impl PssPolicy {
    fn new(every: Option<Duration>, bound_bytes: Option<u64>, now: Instant) -> Self {
        PssPolicy {
            every,
            bound_bytes,
            next_at: every.and_then(|e| now.checked_add(e)),
            read_at_rss_bytes: None,
        }
    }

    /// Whether this tick reads PSS, given the tree's summed RSS now and whether the bounds
    /// judge the cgroup's working set (then PSS decides nothing).
    fn due(&mut self, now: Instant, rss_bytes: u64, judged_by_cgroup: bool) -> bool {
        let bound = !judged_by_cgroup && self.bound_bytes.is_some_and(|b| rss_bytes >= b);
        let clock = self.next_at.is_some_and(|at| now >= at);
        let moved = !judged_by_cgroup
            && rss_bytes > 0
            && self
                .read_at_rss_bytes
                .is_none_or(|last| rss_bytes.abs_diff(last) as f64 > last as f64 * PSS_MOVE_SHARE);
        let due = bound || clock || moved;
        if due {
            // Any read serves the record: the clock and the move count from it.
            self.next_at = self.every.and_then(|e| now.checked_add(e));
            self.read_at_rss_bytes = Some(rss_bytes);
        }
        due
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
    pss: PssPolicy,
    /// Whether samples read the tree's CPU time (one more small read per process).
    read_cpu: bool,
    /// Who the other processes on the card are, looked up once per listed PID.
    names: gpu::who::Names,
}

impl Sampler {
    /// A sampler reading PSS where the tree's RSS moved, on no clock and for no bound (see
    /// [`Sampler::read_pss`]).
    pub fn new(gpu: Box<dyn GpuProbe>) -> Sampler {
        Sampler {
            procs: ProcReader::default(),
            system: SystemReader::default(),
            gpu,
            gpu_failing: false,
            pss: PssPolicy::new(None, None, Instant::now()),
            read_cpu: false,
            names: gpu::who::Names::default(),
        }
    }

    /// When to pay for PSS besides the moves of the tree's RSS: at most every `every` on a clock
    /// (zero: no clock), and on every tick where the summed RSS of a tree without a cgroup
    /// working set is at or over `max_rss_bytes` (`--max-rss`, which then judges the PSS).
    pub fn read_pss(&mut self, every: Duration, max_rss_bytes: Option<u64>) {
        let every = Some(every).filter(|e| !e.is_zero());
        self.pss = PssPolicy::new(every, max_rss_bytes, Instant::now());
    }

    /// Whether samples read the tree's CPU time ([`Sample::cpu_ticks`]): only the stall watch
    /// needs it, so it costs nothing without `--stall-timeout`.
    pub fn read_cpu_time(&mut self, on: bool) {
        self.read_cpu = on;
    }

    /// Starts a new attempt: its first tick reads PSS (without a cgroup), the clock's next read
    /// is one interval away.
    pub fn reset(&mut self) {
        self.pss = PssPolicy::new(self.pss.every, self.pss.bound_bytes, Instant::now());
    }

    /// One sample of the processes `pids` (the job's tree: with a cgroup, its `cgroup.procs`)
    /// and of `cgroup`.
    pub fn sample(&mut self, attempt: u32, pids: &[u32], cgroup: Option<&JobCgroup>) -> Sample {
        let cgroups: Vec<_> = cgroup.map(|cg| (None, cg)).into_iter().collect();
        self.sample_scope(
            attempt,
            &Scope {
                pids,
                gpu_only_pids: &[],
                cgroups: &cgroups,
            },
        )
    }

    /// One sample of what `scope` says is the job's: its cgroups' counters summed (each
    /// Slurm node's also kept apart in [`Sample::slurm_parts`]), its processes read from /proc.
    pub fn sample_scope(&mut self, attempt: u32, scope: &Scope) -> Sample {
        let Scope {
            pids,
            gpu_only_pids,
            cgroups,
        } = *scope;
        let unix_time_s = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let now = Instant::now();
        let mut slurm_parts: Vec<SlurmPart> = Vec::new();
        let mut cgroup_mem: Option<CgroupMem> = None;
        for (place, cg) in cgroups {
            let Some(mem) = cg.memory() else {
                continue;
            };
            if let Some(place) = place {
                let bytes = mem.working_set_bytes.unwrap_or(mem.usage_bytes);
                match slurm_parts.iter_mut().find(|p| p.place == *place) {
                    Some(part) => part.bytes = part.bytes.saturating_add(bytes),
                    None => slurm_parts.push(SlurmPart {
                        place: place.clone(),
                        bytes,
                    }),
                }
            }
            cgroup_mem = Some(cgroup_mem.map_or(mem, |sum| sum.plus(&mem)));
        }
        let judged_by_cgroup = cgroup_mem.is_some_and(|m| m.working_set_bytes.is_some());
        let mut pss_read = false;
        // With a cgroup counting swap, statm's RSS is all a process adds (its peak comes from
        // `ru_maxrss` when it is reaped); without one (or one that does not count swap: v1
        // without swap accounting), status gives swap and VmHWM too.
        let cgroup_swap_bytes = cgroup_mem.and_then(|m| m.swap_bytes);
        let per_process = if cgroup_swap_bytes.is_some() {
            PerProcess::Statm
        } else {
            PerProcess::Status
        };
        let mut tree = read_tree_from(&self.procs, pids, per_process, |cheap| {
            pss_read = self.pss.due(now, cheap.rss_bytes, judged_by_cgroup);
            pss_read
        });
        // The cgroup holds exactly the tree: its swap is the tree's (for the peaks, the
        // timeline and the metrics) where no process's own figure was read.
        if tree.swap_bytes.is_none() && tree.processes > 0 {
            tree.swap_bytes = cgroup_swap_bytes;
        }
        // The PID set is built only when there is a snapshot to attribute.
        let gpu = self.gpu_snapshot().map(|snap| {
            let job_pids = pids.iter().chain(gpu_only_pids).copied().collect();
            self.shares(&snap, &job_pids)
        });
        Sample {
            unix_time_s,
            attempt,
            tree,
            pss_read,
            system: self.system.read(),
            gpu,
            cgroup_bytes: cgroup_mem.map(|m| m.usage_bytes),
            cgroup_working_set_bytes: cgroup_mem.and_then(|m| m.working_set_bytes),
            cgroup: cgroup_mem,
            cpu_ticks: self
                .read_cpu
                .then(|| read_tree_cpu_ticks(&self.procs, pids))
                .flatten(),
            remote_tasks_bytes: None,
            slurm_parts,
        }
    }

    /// The card now, split by whose it is (`pids`' processes are the job's), the neighbours
    /// named.
    pub fn gpu_now(&mut self, pids: &HashSet<u32>) -> Option<JobGpu> {
        let snap = self.gpu_snapshot()?;
        Some(self.shares(&snap, pids))
    }

    /// `snap` split by whose it is, the neighbours named.
    fn shares(&mut self, snap: &gpu::GpuSnapshot, pids: &HashSet<u32>) -> JobGpu {
        let mut shares = gpu::attribute(snap, pids);
        self.names
            .keep_only(|pid| snap.processes.iter().any(|p| p.pid == pid));
        for device in &mut shares.devices {
            for n in &mut device.neighbours {
                n.who = self.names.who(n.pid);
            }
        }
        shares
    }

    /// The machine's memory now.
    pub fn system_now(&self) -> Option<SystemMem> {
        self.system.read()
    }

    /// The devices as the driver lists them (index, name, UUID, memory), for picking cards.
    pub fn gpu_devices(&mut self) -> Option<Vec<gpu::GpuDevice>> {
        self.gpu_snapshot().map(|snap| snap.devices)
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

/// `node:NAME` or `step:JOB.STEP`: a place as samples.csv's `slurm_parts` names it (the record
/// writes it, the report parses it back with `str::parse`).
impl std::fmt::Display for SlurmPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlurmPlace::Node(name) => write!(f, "node:{name}"),
            SlurmPlace::Step(step) => write!(f, "step:{step}"),
        }
    }
}

/// Text that names no [`SlurmPlace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotASlurmPlace;

impl std::str::FromStr for SlurmPlace {
    type Err = NotASlurmPlace;

    /// `node:NAME` (a name of at least one character) or `step:JOB.STEP` (two unsigned
    /// numbers), as [`SlurmPlace`]'s `Display` writes them.
    fn from_str(text: &str) -> Result<SlurmPlace, NotASlurmPlace> {
        if let Some(name) = text.strip_prefix("node:") {
            return (!name.is_empty())
                .then(|| SlurmPlace::Node(name.to_string()))
                .ok_or(NotASlurmPlace);
        }
        let (job, step) = text
            .strip_prefix("step:")
            .and_then(|s| s.split_once('.'))
            .ok_or(NotASlurmPlace)?;
        // Digits only: `parse` alone would take a leading `+`.
        let number = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse::<u64>().ok())
                .flatten()
                .ok_or(NotASlurmPlace)
        };
        Ok(SlurmPlace::Step(crate::observe::slurm::Step {
            job: number(job)?,
            step: number(step)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How often PSS is read on a clock (`--pss-interval`'s default): never; see the module
    /// docs.
    const DEFAULT_PSS_INTERVAL: Duration = Duration::ZERO;
    use crate::observe::cgroup::Version;
    use crate::observe::gpu::FakeProbe;

    const KIB: u64 = 1024;

    /// A fake /proc with processes 10, 11, 12 of `rss_kb` each (status and smaps_rollup), and
    /// a fake v1 cgroup charged 3000 kB, 100 kB of it inactive file cache.
    fn fake_machine(rss_kb: u64) -> (tempfile::TempDir, Sampler, JobCgroup) {
        let dir = tempfile::tempdir().unwrap();
        for pid in [10, 11, 12] {
            let proc_dir = dir.path().join("proc").join(pid.to_string());
            std::fs::create_dir_all(&proc_dir).unwrap();
            let status = format!(
                "Name:\tpython3\nVmHWM:\t{rss_kb} kB\nVmRSS:\t{rss_kb} kB\nVmSwap:\t0 kB\n"
            );
            std::fs::write(proc_dir.join("status"), status).unwrap();
            let pages = rss_kb * KIB / procfs::page_size();
            std::fs::write(proc_dir.join("statm"), format!("9999 {pages} 0 0 0 0 0\n")).unwrap();
            let rollup = format!("0-1 ---p 00000000 00:00 0  [rollup]\nRss: {rss_kb} kB\nPss: {} kB\nSwapPss: 0 kB\n", rss_kb / 2);
            std::fs::write(proc_dir.join("smaps_rollup"), rollup).unwrap();
        }
        let cg = dir.path().join("cgroup");
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(
            cg.join("memory.usage_in_bytes"),
            format!("{}\n", 3000 * KIB),
        )
        .unwrap();
        let stat = format!(
            "total_cache {}\ntotal_rss {}\ntotal_shmem 0\ntotal_inactive_file {}\ntotal_swap 0\n",
            200 * KIB,
            2800 * KIB,
            100 * KIB
        );
        std::fs::write(cg.join("memory.stat"), stat).unwrap();
        let mut sampler = Sampler::new(Box::new(FakeProbe::new(dir.path().join("no-gpu"))));
        sampler.procs = ProcReader::new(dir.path().join("proc"));
        sampler.system = SystemReader::new(dir.path().join("proc"));
        (dir, sampler, JobCgroup::fake(cg, Version::V1))
    }

    #[test]
    fn with_a_cgroup_a_tick_reads_no_pss_even_over_the_bound() {
        let (_dir, mut sampler, cgroup) = fake_machine(1000);
        // --max-rss far below the tree's 3000 kB: the bound judges the working set, not PSS.
        sampler.read_pss(DEFAULT_PSS_INTERVAL, Some(100 * KIB));
        for _ in 0..5 {
            let s = sampler.sample(1, &[10, 11, 12], Some(&cgroup));
            assert!(!s.pss_read);
            assert_eq!(s.tree.pss_bytes, None);
            assert_eq!(s.tree.rss_bytes, 3000 * KIB, "per-process files still read");
            // statm, not status (which alone gives VmHWM); the swap is the cgroup's.
            assert_eq!(s.tree.max_hwm_bytes, None);
            assert_eq!(s.tree.swap_bytes, Some(0));
            assert_eq!(s.job_bytes(), Some(2900 * KIB), "the cgroup's working set");
            let mem = s.cgroup.unwrap();
            assert_eq!(
                (mem.anon_bytes, mem.file_bytes),
                (Some(2800 * KIB), Some(200 * KIB))
            );
        }
        assert_eq!(sampler.procs.pss_reads(), 0);
    }

    #[test]
    fn without_a_cgroup_pss_is_read_on_the_first_tick_and_at_or_over_the_bound() {
        // (each process's RSS in kB, --max-rss in kB, smaps_rollup reads in 4 ticks of a
        // steady tree: the first tick reads for the record, then only the bound reads)
        let table = [
            (1000, None, 3),
            (1000, Some(3001), 3),
            (1000, Some(3000), 4 * 3),
            (1000, Some(10), 4 * 3),
        ];
        for (rss_kb, bound_kb, reads) in table {
            let (_dir, mut sampler, _) = fake_machine(rss_kb);
            sampler.read_pss(DEFAULT_PSS_INTERVAL, bound_kb.map(|b: u64| b * KIB));
            for tick in 0..4 {
                let s = sampler.sample(1, &[10, 11, 12], None);
                let read = tick == 0 || reads > 3;
                assert_eq!(s.pss_read, read, "{bound_kb:?} tick {tick}");
                let want = read.then_some(1500 * KIB);
                assert_eq!(s.tree.pss_bytes, want);
                assert_eq!(s.job_bytes(), want, "never a guess");
                // Under the bound the bounds see the RSS, which is under it too.
                assert_eq!(s.reading().job_bytes, Some(want.unwrap_or(3000 * KIB)));
            }
            assert_eq!(sampler.procs.pss_reads(), reads, "{bound_kb:?}");
        }
    }

    /// Rewrites the fake processes' RSS (status and statm) to `rss_kb` each.
    fn set_rss(dir: &std::path::Path, rss_kb: u64) {
        for pid in [10, 11, 12] {
            let proc_dir = dir.join("proc").join(pid.to_string());
            let status = format!(
                "Name:\tpython3\nVmHWM:\t{rss_kb} kB\nVmRSS:\t{rss_kb} kB\nVmSwap:\t0 kB\n"
            );
            std::fs::write(proc_dir.join("status"), status).unwrap();
            let pages = rss_kb * KIB / procfs::page_size();
            std::fs::write(proc_dir.join("statm"), format!("9999 {pages} 0 0 0 0 0\n")).unwrap();
        }
    }

    #[test]
    fn without_a_cgroup_pss_is_read_where_the_tree_moved_not_on_a_clock() {
        // Each tick's RSS per process in kB, and whether it reads PSS: a steady tree reads once
        // however long it runs; a move of more than 5% from the last read, up or down, reads.
        let ticks = [
            (1000, true),
            (1000, false),
            (1030, false),
            (1049, false),
            (1051, true),
            (1051, false),
            (1100, false),
            (1104, true),
            (1000, true),
            (1000, false),
        ];
        let (dir, mut sampler, _) = fake_machine(1000);
        sampler.read_pss(DEFAULT_PSS_INTERVAL, None);
        for (rss_kb, read) in ticks {
            set_rss(dir.path(), rss_kb);
            let s = sampler.sample(1, &[10, 11, 12], None);
            assert_eq!(s.pss_read, read, "{rss_kb} kB");
        }
        assert_eq!(sampler.procs.pss_reads(), 4 * 3);
        // The same ticks with a cgroup: its counters are the record, no PSS at all.
        let (dir, mut sampler, cgroup) = fake_machine(1000);
        for (rss_kb, _) in ticks {
            set_rss(dir.path(), rss_kb);
            assert!(!sampler.sample(1, &[10, 11, 12], Some(&cgroup)).pss_read);
        }
        assert_eq!(sampler.procs.pss_reads(), 0);
        // A new attempt reads on its first tick again.
        let (_dir, mut sampler, _) = fake_machine(1000);
        assert!(sampler.sample(1, &[10, 11, 12], None).pss_read);
        assert!(!sampler.sample(1, &[10, 11, 12], None).pss_read);
        sampler.reset();
        assert!(sampler.sample(2, &[10, 11, 12], None).pss_read);
    }

    #[test]
    fn pss_on_the_clock_is_read_at_most_every_interval() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        // With a cgroup's working set (no moves count): the clock alone.
        let mut p = PssPolicy::new(Some(Duration::from_secs(60)), None, start);
        let ticks: Vec<bool> = [0, 1, 59, 60, 61, 119, 120, 200]
            .map(|t| p.due(at(t), 1000, true))
            .to_vec();
        assert_eq!(ticks, [false, false, false, true, false, false, true, true]);
        // No clock (the default): a steady tree without a cgroup reads once, a bound every tick
        // at or over it.
        let mut never = PssPolicy::new(None, Some(500), start);
        assert!(never.due(at(0), 100, false), "the first tick");
        assert!(!never.due(at(1000), 100, false));
        assert!(never.due(at(1001), 600, false));
        assert!(never.due(at(1002), 600, false));
        assert!(
            !never.due(at(1003), 600, true),
            "a cgroup working set decides"
        );
        assert!(
            !never.due(at(1004), 0, false),
            "no process, nothing to read"
        );
        let mut both = PssPolicy::new(Some(Duration::from_secs(60)), Some(500), start);
        assert!(both.due(at(50), 600, false));
        assert!(
            !both.due(at(60), 590, true),
            "the bound's read at 50 s served the clock"
        );
        assert!(both.due(at(110), 590, true));
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
            ..skipped.clone()
        };
        assert_eq!(
            in_cgroup.job_bytes(),
            Some(400),
            "the working set, not the page cache"
        );
        let with_remote = Sample {
            remote_tasks_bytes: Some(5000),
            ..in_cgroup.clone()
        };
        assert_eq!(
            with_remote.job_bytes(),
            Some(5400),
            "srun's tasks elsewhere"
        );
        let skipped_remote = Sample {
            remote_tasks_bytes: Some(5000),
            ..skipped.clone()
        };
        assert_eq!(skipped_remote.job_bytes(), None);
        assert_eq!(skipped_remote.reading().job_bytes, Some(5900));
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
        // Tasks on another node, as sstat sums them: the job's peak holds them.
        s.remote_tasks_bytes = Some(1000);
        s.cgroup_bytes = Some(4000);
        peaks.update(&s);
        assert_eq!(peaks.rss_bytes, Some(1150));
        assert_eq!(peaks.cgroup_bytes, Some(5000));
        assert_eq!(peaks.process_rss_bytes, Some(150), "a process of its own");
    }
}
