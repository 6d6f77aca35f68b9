//! The job's memory: one tick's readings of every process in its tree, summed. Resident sets
//! count a page shared by forked DataLoader workers once per worker, so a tree that allocates
//! 200 MB and forks 4 workers shows ~1 GB of summed RSS; proportional set sizes (PSS) split each
//! shared page among its users and sum to the ~200 MB really held, at a cost that grows with RSS
//! (see `process`), so the caller asks for PSS only when it wants it.
//!
//! Finding the PIDs is `tree`'s job, reading one process is `process`'s; how often to pay for
//! PSS is the sampler's choice.

use super::process::{ProcMem, ProcReader};

/// A process tree's memory at one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeMem {
    /// Processes read (those that vanished mid-read are not counted).
    pub processes: u32,
    /// Summed resident sets: shared pages counted once per process mapping them.
    pub rss_bytes: u64,
    /// Summed proportional set sizes; `None` when not asked for or unreadable for every process
    /// (kernel < 4.14, another user's processes).
    pub pss_bytes: Option<u64>,
    /// Summed swap: SwapPss (shared swap counted once) for processes whose PSS was read, VmSwap
    /// for the others; `None` when no process reported swap.
    pub swap_bytes: Option<u64>,
    /// The highest peak RSS (VmHWM) of any single process; `None` where only statm was read.
    pub max_hwm_bytes: Option<u64>,
    /// The largest resident set of any single process now.
    pub largest_rss_bytes: Option<u64>,
}

/// Sums over `pids` (processes that vanished mid-read are skipped). PSS (and swap from SwapPss
/// so shared swap counts once) is read only when `with_pss`. A process whose status reads but
/// whose smaps_rollup then does not (it exited in between, or belongs to another user) adds its
/// RSS but no PSS.
pub fn read_tree(reader: &ProcReader, pids: &[u32], with_pss: bool) -> TreeMem {
    read_tree_when(reader, pids, |_| with_pss)
}

/// Like [`read_tree`], but decides whether to pay for PSS after seeing the cheap numbers
/// (the sampler reads PSS early when the tree's RSS moved a lot).
pub fn read_tree_when(
    reader: &ProcReader,
    pids: &[u32],
    with_pss: impl FnOnce(&TreeMem) -> bool,
) -> TreeMem {
    read_tree_from(reader, pids, PerProcess::Status, with_pss)
}

/// Which file each process's cheap numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerProcess {
    /// /proc/PID/status: RSS, swap and the process's peak (VmHWM).
    Status,
    /// /proc/PID/statm: RSS alone, for half the cost (the kernel formats ~55 status lines,
    /// summing per-CPU counters on the way). Enough where a cgroup counts the swap, and the
    /// reaped processes' `ru_maxrss` gives their peaks.
    Statm,
}

/// Like [`read_tree_when`], reading each process's cheap numbers from `per_process`.
pub fn read_tree_from(
    reader: &ProcReader,
    pids: &[u32],
    per_process: PerProcess,
    with_pss: impl FnOnce(&TreeMem) -> bool,
) -> TreeMem {
    let mut out = TreeMem::default();
    let mut read: Vec<(u32, Option<u64>)> = Vec::with_capacity(pids.len());
    for &pid in pids {
        let mem = match per_process {
            PerProcess::Status => reader.read(pid),
            PerProcess::Statm => reader.read_rss_bytes(pid).map(|rss_bytes| ProcMem {
                rss_bytes,
                ..ProcMem::default()
            }),
        };
        let Some(mem) = mem else {
            continue;
        };
        out.processes += 1;
        out.rss_bytes = out.rss_bytes.saturating_add(mem.rss_bytes);
        out.max_hwm_bytes = out.max_hwm_bytes.max(mem.hwm_bytes);
        out.largest_rss_bytes = out.largest_rss_bytes.max(Some(mem.rss_bytes));
        read.push((pid, mem.swap_bytes));
    }
    let pss_too = with_pss(&out);
    for (pid, mut swap) in read {
        if pss_too {
            if let Some(pss) = reader.read_pss(pid) {
                out.pss_bytes = Some(out.pss_bytes.unwrap_or(0).saturating_add(pss.pss_bytes));
                swap = pss.swap_pss_bytes.or(swap);
            }
        }
        if let Some(swap) = swap {
            out.swap_bytes = Some(out.swap_bytes.unwrap_or(0).saturating_add(swap));
        }
    }
    reader.keep_only(pids);
    out
}

/// The CPU time `pids` have used, user plus system, summed in clock ticks; `None` when none of
/// them could be read (all vanished). A process that ends leaves the sum (its time goes to
/// whoever reaps it), so the sum may drop: it is compared for change, not growth.
pub fn read_tree_cpu_ticks(reader: &ProcReader, pids: &[u32]) -> Option<u64> {
    pids.iter()
        .filter_map(|&pid| reader.read_cpu_ticks(pid))
        .fold(None, |sum, ticks| {
            Some(sum.unwrap_or(0u64).saturating_add(ticks))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};

    fn write_process(root: &std::path::Path, pid: u32, rss_kb: u64, hwm_kb: u64, rollup: &str) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let status = format!(
            "Name:\tpython3\nState:\tS (sleeping)\nVmHWM:\t{hwm_kb:>8} kB\n\
             VmRSS:\t{rss_kb:>8} kB\nVmSwap:\t       8 kB\nThreads:\t1\n"
        );
        std::fs::write(dir.join("status"), status).unwrap();
        std::fs::write(dir.join("smaps_rollup"), rollup).unwrap();
    }

    fn rollup(pss_kb: u64, swap_pss_kb: u64) -> String {
        format!(
            "00400000-7ffe3a7c5000 ---p 00000000 00:00 0  [rollup]\n\
             Rss:  1 kB\nPss:  {pss_kb} kB\nSwap:  8 kB\nSwapPss:  {swap_pss_kb} kB\n"
        )
    }

    #[test]
    fn sums_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        // A parent and two forked workers sharing most of 1000 kB, each 8 kB of shared swap.
        write_process(dir.path(), 10, 1000, 1200, &rollup(400, 4));
        write_process(dir.path(), 11, 1000, 1000, &rollup(300, 2));
        write_process(dir.path(), 12, 1000, 1000, &rollup(300, 2));
        // 13 vanished before it was read.
        let reader = ProcReader::new(dir.path());
        let pids = [10, 11, 12, 13];

        let cheap = read_tree(&reader, &pids, false);
        assert_eq!(
            cheap,
            TreeMem {
                processes: 3,
                rss_bytes: 3000 * 1024,
                pss_bytes: None,
                swap_bytes: Some(24 * 1024),
                max_hwm_bytes: Some(1200 * 1024),
                largest_rss_bytes: Some(1000 * 1024),
            }
        );
        let full = read_tree(&reader, &pids, true);
        assert_eq!(
            full,
            TreeMem {
                pss_bytes: Some(1000 * 1024),
                swap_bytes: Some(8 * 1024),
                ..cheap
            }
        );
        assert_eq!(read_tree(&reader, &[], true), TreeMem::default());
        // statm: the RSS alone (these fixtures have none: vanished, as far as statm goes).
        for pid in [10, 11, 12] {
            std::fs::write(
                dir.path().join(format!("{pid}/statm")),
                "765 250 380 5 0 123 0\n",
            )
            .unwrap();
        }
        let statm = read_tree_from(&reader, &pids, PerProcess::Statm, |_| false);
        let rss = 250 * procfs::page_size();
        assert_eq!(
            statm,
            TreeMem {
                processes: 3,
                rss_bytes: 3 * rss,
                largest_rss_bytes: Some(rss),
                ..TreeMem::default()
            }
        );
    }

    #[test]
    fn sums_cpu_ticks_of_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        for (pid, utime, stime) in [(10, 120, 30), (11, 5, 0)] {
            let proc_dir = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&proc_dir).unwrap();
            let stat = format!("{pid} (python3) S 1 10 10 0 -1 4194560 5 0 0 0 {utime} {stime} 0 0 20 0 1 0 9 1 1\n");
            std::fs::write(proc_dir.join("stat"), stat).unwrap();
        }
        let reader = ProcReader::new(dir.path());
        // 12 vanished before it was read.
        assert_eq!(read_tree_cpu_ticks(&reader, &[10, 11, 12]), Some(155));
        assert_eq!(read_tree_cpu_ticks(&reader, &[12]), None);
        assert_eq!(read_tree_cpu_ticks(&reader, &[]), None);
    }

    #[test]
    fn pss_falls_back_per_process() {
        let dir = tempfile::tempdir().unwrap();
        write_process(dir.path(), 10, 1000, 1000, &rollup(400, 4));
        write_process(dir.path(), 11, 1000, 1000, ""); // exited between its two reads
        let tree = read_tree(&ProcReader::new(dir.path()), &[10, 11], true);
        assert_eq!(tree.processes, 2);
        assert_eq!(tree.pss_bytes, Some(400 * 1024));
        assert_eq!(tree.swap_bytes, Some((4 + 8) * 1024));
    }

    /// A python3 that allocates and touches 200 MiB, forks 4 children that block reading its
    /// stdin, says `ready`, then waits for stdin to close and reaps them.
    const SHARED_TREE_PY: &str = "
import os, sys
n = 200 << 20
buf = bytearray(n)
for i in range(0, n, 4096):
    buf[i] = 1
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os.read(0, 1)
        os._exit(0)
    kids.append(pid)
sys.stdout.write('ready\\n')
sys.stdout.flush()
os.read(0, 1)
for pid in kids:
    os.waitpid(pid, 0)
";

    /// Closes the children's stdin (ending all of them) and reaps the parent, even on panic.
    struct Reaped(Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            drop(self.0.stdin.take());
            let _ = self.0.wait();
        }
    }

    #[test]
    fn pss_counts_forked_workers_pages_once() {
        let Ok(child) = Command::new("python3")
            .args(["-c", SHARED_TREE_PY])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
        else {
            eprintln!("skipped: no python3");
            return;
        };
        let mut job = Reaped(child);
        let mut line = String::new();
        BufReader::new(job.0.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");

        let parent = job.0.id();
        let mut pids = vec![parent];
        pids.extend(crate::observe::mem::tree::ProcTree::default().descendants(parent));
        assert_eq!(pids.len(), 5, "{pids:?}");

        let reader = ProcReader::default();
        let tree = read_tree(&reader, &pids, true);
        const MIB: u64 = 1 << 20;
        assert_eq!(tree.processes, 5);
        assert!(tree.rss_bytes > 800 * MIB, "{tree:?}");
        let pss = tree.pss_bytes.expect("smaps_rollup readable");
        assert!((200 * MIB..300 * MIB).contains(&pss), "{tree:?}");
        assert!(tree.max_hwm_bytes.unwrap() >= 200 * MIB, "{tree:?}");
        assert_eq!(read_tree(&reader, &pids, false).pss_bytes, None);

        drop(job);
        // Everything reaped: the parent's /proc entry is gone.
        assert!(!std::path::Path::new(&format!("/proc/{parent}")).exists());
    }
}
