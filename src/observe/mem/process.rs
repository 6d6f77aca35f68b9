//! One process's memory: its resident set, swap and peak RSS every tick (cheap, from
//! /proc/PID/status, or its resident set alone from /proc/PID/statm, cheaper still, where the
//! job's cgroup counts the rest), and on demand its proportional set size (costly, from
//! /proc/PID/smaps_rollup). A process that vanished reads as `None`, never as an error: the job's
//! processes come and go between finding them and reading them.
//!
//! Which PIDs to read is `tree`'s job, summing them is `tree_mem`'s, and judging the numbers is
//! the supervisor's.
//!
//! Hand parsing or the procfs crate: `cargo bench --bench sample_cost` on this machine (kernel
//! 6.18, 2 busy cores, release build), one read of the bench's own small process:
//!
//! | what                                              | µs per read |
//! |---------------------------------------------------|-------------|
//! | statm, read + hand parse                          | 2.4         |
//! | statm via `procfs::process::Process::statm()`     | 2.8         |
//! | status, read + hand parse (RSS, swap and HWM)     | 5.7         |
//! | statm + status, both by hand                      | 7.7         |
//! | status via `procfs::process::Process::status()`   | 22.7        |
//! | smaps_rollup, read only                           | 14.2        |
//! | smaps_rollup, read + procfs `MemoryMaps` parse    | 16.4        |
//!
//! So the every-tick [`ProcReader::read`] reads status alone and parses it by hand: status
//! already holds VmRSS, VmSwap and VmHWM, and VmRSS is the counter statm's resident field shows
//! (both are the mm's anon + file + shmem pages), so reading statm as well only adds a second
//! open/read/close (+2 µs); procfs's `Status` fills ~50 fields through a `HashMap` of owned
//! strings and opens the /proc/PID directory first: 4× the cost for three numbers. statm stays
//! hand-parsed for [`ProcReader::read_rss_bytes`], the cheapest RSS when swap and peak do not
//! matter (procfs would add ~0.4 µs, the directory open). smaps_rollup's cost is the kernel
//! walking the process's page tables (it grows with RSS: ~0.3 ms for a 50 MiB python, ~14 ms
//! for 4 GiB), so parsing is noise there and procfs's tested `MemoryMaps` parser is used.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use procfs::process::MemoryMaps;
use procfs::FromRead;

use super::{parse_kib_as_bytes, read_proc_file, KeptFiles};

/// One process's memory, as read every tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcMem {
    /// Resident set: anonymous + file-backed + shmem pages mapped by the process, shared pages
    /// counted in full (so forked workers count them once each).
    pub rss_bytes: u64,
    /// Swapped-out anonymous memory (VmSwap, kernel >= 2.6.34).
    pub swap_bytes: Option<u64>,
    /// The peak resident set since the process started (VmHWM).
    pub hwm_bytes: Option<u64>,
}

/// The memory fields of /proc/PID/status, in bytes; each absent when the line is (old kernels
/// lack VmSwap; zombies and kernel threads have no Vm* lines at all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusMem {
    pub rss_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub hwm_bytes: Option<u64>,
}

/// One process's proportional share of memory: each page divided by the number of processes
/// mapping it, so a tree's sum counts shared pages once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PssMem {
    pub pss_bytes: u64,
    /// The proportional share of swapped-out pages (SwapPss, kernel >= 4.3).
    pub swap_pss_bytes: Option<u64>,
}

/// Reads processes' memory under a /proc root.
#[derive(Debug, Clone)]
pub struct ProcReader {
    proc_root: PathBuf,
    page_size_bytes: u64,
    /// smaps_rollup reads tried, shared by clones: the costly read is counted so that tests
    /// (and `doctor`) can see how often it happens.
    pss_reads: Arc<AtomicU64>,
    /// The per-tick files (statm, status) of the tree's processes, kept open.
    kept: Arc<KeptFiles<(u32, &'static str)>>,
}

/// The most per-process handles kept open: far below the usual 1,024-descriptor limit, so a
/// tree of thousands of processes is read path by path beyond it rather than running oomguard
/// out of descriptors.
const MAX_KEPT_FILES: usize = 256;

impl Default for ProcReader {
    fn default() -> Self {
        Self::new("/proc")
    }
}

/// Bytes to read /proc/PID/status in one go: ~1.5 KiB usually, more with long CPU and NUMA
/// masks (Cpus_allowed, Mems_allowed) on big machines.
const STATUS_CAPACITY: usize = 4096;

impl ProcReader {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: proc_root.into(),
            page_size_bytes: procfs::page_size(),
            pss_reads: Arc::default(),
            kept: Arc::new(KeptFiles::new(MAX_KEPT_FILES)),
        }
    }

    /// `/proc/PID/<name>` read whole, through a kept-open handle (see [`KeptFiles`]).
    fn read_kept(&self, pid: u32, name: &'static str, capacity: usize) -> io::Result<String> {
        self.kept
            .read((pid, name), || self.file(pid, name), capacity)
    }

    /// Closes the kept handles of processes not in `pids` (the tree just read): those that
    /// ended, or left the tree.
    pub fn keep_only(&self, pids: &[u32]) {
        let wanted: std::collections::HashSet<u32> = pids.iter().copied().collect();
        self.kept.retain(|(pid, _)| wanted.contains(pid));
    }

    fn file(&self, pid: u32, name: &str) -> PathBuf {
        let mut path = self.proc_root.join(pid.to_string());
        path.push(name);
        path
    }

    /// Cheap, every tick (~6 µs): RSS, VmSwap and VmHWM from one read of /proc/PID/status.
    /// `None` if the process vanished (never an error). A zombie reads as 0 bytes resident.
    pub fn read(&self, pid: u32) -> Option<ProcMem> {
        let text = self.read_kept(pid, "status", STATUS_CAPACITY).ok()?;
        let status = parse_status(&text);
        Some(ProcMem {
            rss_bytes: status.rss_bytes.unwrap_or(0),
            swap_bytes: status.swap_bytes,
            hwm_bytes: status.hwm_bytes,
        })
    }

    /// The cheapest RSS (~2 µs): statm's resident pages × the page size. `None` if the process
    /// vanished.
    pub fn read_rss_bytes(&self, pid: u32) -> Option<u64> {
        let text = self.read_kept(pid, "statm", 128).ok()?;
        parse_statm_resident_pages(&text)?.checked_mul(self.page_size_bytes)
    }

    /// How many smaps_rollup reads [`ProcReader::read_pss`] tried so far, over this reader
    /// and its clones (what the sampler's tests count).
    #[cfg(test)]
    pub fn pss_reads(&self) -> u64 {
        self.pss_reads.load(Ordering::Relaxed)
    }

    /// Cheap (one small read, like status): the CPU time the process has used, user plus
    /// system, in clock ticks (USER_HZ, 100 a second on Linux), from /proc/PID/stat. `None` if
    /// the process vanished. What `--stall-timeout` watches: a tree whose total stands still
    /// used no CPU.
    pub fn read_cpu_ticks(&self, pid: u32) -> Option<u64> {
        let text = self.read_kept(pid, "stat", 512).ok()?;
        parse_stat_cpu_ticks(&text)
    }

    /// Costly (grows with RSS: ~0.15 ms for a small process, ~14 ms for 4 GiB): Pss and SwapPss
    /// from /proc/PID/smaps_rollup (kernel >= 4.14). `None` if the process vanished or the file
    /// is unreadable (older kernel, another user's process).
    pub fn read_pss(&self, pid: u32) -> Option<PssMem> {
        self.pss_reads.fetch_add(1, Ordering::Relaxed);
        let text = read_proc_file(&self.file(pid, "smaps_rollup"), 2048).ok()?;
        parse_smaps_rollup(&text)
    }
}

/// Parses the memory lines of /proc/PID/status (values in KiB, returned in bytes). A real sample
/// (kernel 6.18, trimmed from ~55 lines; the kernel separates key and value with a tab):
///
/// ```text
/// Name:           cat
/// State:          R (running)
/// Tgid:           548
/// VmPeak:             3060 kB
/// VmSize:             3060 kB
/// VmLck:                 0 kB
/// VmPin:                 0 kB
/// VmHWM:              1612 kB
/// VmRSS:              1612 kB
/// RssAnon:             108 kB
/// RssFile:            1504 kB
/// RssShmem:              0 kB
/// VmData:              360 kB
/// VmPTE:                44 kB
/// VmSwap:                0 kB
/// HugetlbPages:          0 kB
/// Threads:        1
/// ```
pub fn parse_status(text: &str) -> StatusMem {
    let mut out = StatusMem::default();
    for line in text.lines() {
        // Every wanted key starts with "Vm"; skip the other ~45 lines with one comparison.
        let Some(rest) = line.strip_prefix("Vm") else {
            continue;
        };
        let Some((key, value)) = rest.split_once(':') else {
            continue;
        };
        let slot = match key {
            "RSS" => &mut out.rss_bytes,
            "Swap" => &mut out.swap_bytes,
            "HWM" => &mut out.hwm_bytes,
            _ => continue,
        };
        *slot = parse_kib_as_bytes(value);
    }
    out
}

/// Parses utime + stime (fields 14 and 15, in clock ticks) from /proc/PID/stat. The command
/// name (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields
/// are counted from the last `)`. A real sample (kernel 6.18, `cat`):
///
/// ```text
/// 14312 (cat) R 14310 14310 9600 0 -1 4194304 101 0 0 0 3 2 0 0 20 0 1 0 1095205 14721024 420 ...
/// ```
///
/// (after `)`: state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt, majflt,
/// cmajflt, utime = 3, stime = 2, ...).
pub fn parse_stat_cpu_ticks(text: &str) -> Option<u64> {
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// Parses the resident field (the second, in pages) of /proc/PID/statm. A real sample:
///
/// ```text
/// 765 409 380 5 0 123 0
/// ```
///
/// (size resident shared text lib data dt, all in pages).
pub fn parse_statm_resident_pages(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Parses Pss and SwapPss from /proc/PID/smaps_rollup (values in KiB, returned in bytes) with
/// procfs's smaps parser. A real sample (kernel 6.18):
///
/// ```text
/// 5607fa5a6000-7ffc01419000 ---p 00000000 00:00 0                          [rollup]
/// Rss:                1612 kB
/// Pss:                 277 kB
/// Pss_Dirty:           108 kB
/// Pss_Anon:            108 kB
/// Pss_File:            169 kB
/// Pss_Shmem:             0 kB
/// Shared_Clean:       1460 kB
/// Shared_Dirty:          0 kB
/// Private_Clean:        44 kB
/// Private_Dirty:       108 kB
/// Referenced:         1612 kB
/// Anonymous:           108 kB
/// KSM:                   0 kB
/// LazyFree:              0 kB
/// AnonHugePages:         0 kB
/// ShmemPmdMapped:        0 kB
/// FilePmdMapped:         0 kB
/// Shared_Hugetlb:        0 kB
/// Private_Hugetlb:       0 kB
/// Swap:                  0 kB
/// SwapPss:               0 kB
/// Locked:                0 kB
/// ```
///
/// `None` when the text is not a rollup or lacks Pss (a zombie's file is empty).
pub fn parse_smaps_rollup(text: &str) -> Option<PssMem> {
    let maps = MemoryMaps::from_read(text.as_bytes()).ok()?;
    let rollup = &maps.0.first()?.extension.map;
    Some(PssMem {
        pss_bytes: *rollup.get("Pss")?,
        swap_pss_bytes: rollup.get("SwapPss").copied(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/self/status of `cat` on kernel 6.18.
    const STATUS_6_18: &str = "Name:\tcat\nUmask:\t0022\nState:\tR (running)\nTgid:\t548\n\
Ngid:\t0\nPid:\t548\nPPid:\t544\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n\
FDSize:\t256\nGroups:\t \nNStgid:\t548\nNSpid:\t548\nNSpgid:\t544\nNSsid:\t27713\nKthread:\t0\n\
VmPeak:\t    3060 kB\nVmSize:\t    3060 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n\
VmHWM:\t    1612 kB\nVmRSS:\t    1612 kB\nRssAnon:\t     108 kB\nRssFile:\t    1504 kB\n\
RssShmem:\t       0 kB\nVmData:\t     360 kB\nVmStk:\t     132 kB\nVmExe:\t      20 kB\n\
VmLib:\t    1528 kB\nVmPTE:\t      44 kB\nVmSwap:\t       0 kB\nHugetlbPages:\t       0 kB\n\
CoreDumping:\t0\nTHP_enabled:\t1\nThreads:\t1\nSigQ:\t0/96364\n\
Cpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n\
voluntary_ctxt_switches:\t0\nnonvoluntary_ctxt_switches:\t0\n";

    /// The layout of a 2.6.32 kernel's status, before VmSwap (added in 2.6.34).
    const STATUS_2_6_32: &str = "Name:\tbash\nState:\tS (sleeping)\nTgid:\t1234\nPid:\t1234\n\
PPid:\t1\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t256\nGroups:\t\n\
VmPeak:\t  108472 kB\nVmSize:\t  108344 kB\nVmLck:\t       0 kB\nVmHWM:\t    1948 kB\n\
VmRSS:\t    1944 kB\nVmData:\t     324 kB\nVmStk:\t      88 kB\nVmExe:\t     848 kB\n\
VmLib:\t    1552 kB\nVmPTE:\t      56 kB\nThreads:\t1\nSigQ:\t0/62733\n";

    /// A zombie's status (kernel 6.18, trimmed): no Vm* lines, its mm is gone.
    const STATUS_ZOMBIE: &str = "Name:\tsleep\nUmask:\t0022\nState:\tZ (zombie)\nTgid:\t4242\n\
Pid:\t4242\nPPid:\t4200\nKthread:\t0\nThreads:\t1\nSigQ:\t0/96364\n";

    const SMAPS_ROLLUP_6_18: &str = "\
5607fa5a6000-7ffc01419000 ---p 00000000 00:00 0                          [rollup]
Rss:                1612 kB
Pss:                 277 kB
Pss_Dirty:           108 kB
Pss_Anon:            108 kB
Pss_File:            169 kB
Pss_Shmem:             0 kB
Shared_Clean:       1460 kB
Shared_Dirty:          0 kB
Private_Clean:        44 kB
Private_Dirty:       108 kB
Referenced:         1612 kB
Anonymous:           108 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
";

    /// The fields of a 4.14 kernel's rollup (the first to have it: no Pss_* or KSM lines); the
    /// values are made up for a tree with swap in use.
    const SMAPS_ROLLUP_4_14: &str = "\
00400000-7ffe3a7c5000 ---p 00000000 00:00 0                              [rollup]
Rss:              884012 kB
Pss:              221003 kB
Shared_Clean:       3340 kB
Shared_Dirty:     880544 kB
Private_Clean:        32 kB
Private_Dirty:        96 kB
Referenced:       884012 kB
Anonymous:        880640 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:              40960 kB
SwapPss:           10240 kB
Locked:                0 kB
";

    #[test]
    fn parses_cpu_ticks_from_stat() {
        let table: &[(&str, Option<u64>)] = &[
            (
                "14312 (cat) R 14310 14310 9600 0 -1 4194304 101 0 0 0 3 2 0 0 20 0 1 0 1095205 14721024 420 18446744073709551615\n",
                Some(5),
            ),
            // A command name with spaces and a parenthesis of its own.
            (
                "77 (my (odd) job) S 1 77 77 0 -1 4194560 5 0 0 0 1200 34 0 0 20 0 4 0 9 1 1\n",
                Some(1234),
            ),
            // A zombie keeps its times.
            ("88 (python3) Z 1 88 88 0 -1 4227084 9 0 0 0 7 0 0 0 20 0 1 0 9 0 0\n", Some(7)),
            ("88 (python3) Z 1 88", None),
            ("", None),
            ("garbage", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_stat_cpu_ticks(text), *want, "{text:?}");
        }
        let own = ProcReader::default().read_cpu_ticks(std::process::id());
        assert!(own.is_some(), "our own stat reads");
        assert_eq!(ProcReader::default().read_cpu_ticks(u32::MAX), None);
    }

    #[test]
    fn parses_status() {
        let table = [
            (
                STATUS_6_18,
                StatusMem {
                    rss_bytes: Some(1612 * 1024),
                    swap_bytes: Some(0),
                    hwm_bytes: Some(1612 * 1024),
                },
            ),
            (
                STATUS_2_6_32,
                StatusMem {
                    rss_bytes: Some(1944 * 1024),
                    swap_bytes: None,
                    hwm_bytes: Some(1948 * 1024),
                },
            ),
            (STATUS_ZOMBIE, StatusMem::default()),
            ("", StatusMem::default()),
            (
                "VmRSS:\tgarbage kB\nVmSwap:\t 7 kB\n",
                StatusMem {
                    rss_bytes: None,
                    swap_bytes: Some(7 * 1024),
                    hwm_bytes: None,
                },
            ),
        ];
        for (text, want) in table {
            assert_eq!(parse_status(text), want, "{text}");
        }
    }

    #[test]
    fn parses_statm() {
        let table = [
            ("765 409 380 5 0 123 0\n", Some(409)),
            ("0 0 0 0 0 0 0\n", Some(0)), // a zombie
            ("765\n", None),
            ("", None),
            ("765 x 380\n", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_statm_resident_pages(text), want, "{text:?}");
        }
    }

    #[test]
    fn parses_smaps_rollup() {
        let table = [
            (
                SMAPS_ROLLUP_6_18,
                Some(PssMem {
                    pss_bytes: 277 * 1024,
                    swap_pss_bytes: Some(0),
                }),
            ),
            (
                SMAPS_ROLLUP_4_14,
                Some(PssMem {
                    pss_bytes: 221003 * 1024,
                    swap_pss_bytes: Some(10240 * 1024),
                }),
            ),
            // Before SwapPss (4.3) there was no rollup, but a rollup-shaped text without it
            // still gives Pss.
            (
                "00400000-7ffe3a7c5000 ---p 00000000 00:00 0  [rollup]\nRss:  8 kB\nPss:  4 kB\n",
                Some(PssMem {
                    pss_bytes: 4096,
                    swap_pss_bytes: None,
                }),
            ),
            ("", None),             // a zombie
            ("Pss:  4 kB\n", None), // no header line: not a rollup
            (
                "00400000-7ffe3a7c5000 ---p 00000000 00:00 0  [rollup]\nRss:  8 kB\n",
                None,
            ),
        ];
        for (text, want) in table {
            assert_eq!(parse_smaps_rollup(text), want, "{text}");
        }
    }

    /// Writes `/proc/PID/{status,statm,smaps_rollup}` under a temporary root.
    fn fixture(pid: u32, status: &str, statm: &str, rollup: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let proc_dir = dir.path().join(pid.to_string());
        std::fs::create_dir_all(&proc_dir).unwrap();
        std::fs::write(proc_dir.join("status"), status).unwrap();
        std::fs::write(proc_dir.join("statm"), statm).unwrap();
        if let Some(rollup) = rollup {
            std::fs::write(proc_dir.join("smaps_rollup"), rollup).unwrap();
        }
        dir
    }

    #[test]
    fn reads_a_fixture_process() {
        let dir = fixture(
            548,
            STATUS_6_18,
            "765 409 380 5 0 123 0\n",
            Some(SMAPS_ROLLUP_6_18),
        );
        let reader = ProcReader::new(dir.path());
        assert_eq!(
            reader.read(548),
            Some(ProcMem {
                rss_bytes: 1612 * 1024,
                swap_bytes: Some(0),
                hwm_bytes: Some(1612 * 1024),
            })
        );
        assert_eq!(reader.read_rss_bytes(548), Some(409 * procfs::page_size()));
        assert_eq!(
            reader.read_pss(548),
            Some(PssMem {
                pss_bytes: 277 * 1024,
                swap_pss_bytes: Some(0),
            })
        );
        // Vanished: no /proc/PID at all.
        assert_eq!(reader.read(549), None);
        assert_eq!(reader.read_rss_bytes(549), None);
        assert_eq!(reader.read_pss(549), None);
    }

    #[test]
    fn reads_zombies_and_old_kernels() {
        let dir = fixture(4242, STATUS_ZOMBIE, "0 0 0 0 0 0 0\n", Some(""));
        let reader = ProcReader::new(dir.path());
        assert_eq!(reader.read(4242), Some(ProcMem::default()));
        assert_eq!(reader.read_rss_bytes(4242), Some(0));
        assert_eq!(reader.read_pss(4242), None);

        // Before 4.14: no smaps_rollup.
        let dir = fixture(1234, STATUS_2_6_32, "27086 486 368 212 0 81 0\n", None);
        let reader = ProcReader::new(dir.path());
        let mem = reader.read(1234).unwrap();
        assert_eq!(mem.swap_bytes, None);
        assert_eq!(mem.hwm_bytes, Some(1948 * 1024));
        assert_eq!(reader.read_pss(1234), None);
    }

    #[test]
    fn reads_itself() {
        let reader = ProcReader::default();
        let me = std::process::id();
        let mem = reader.read(me).unwrap();
        assert!(mem.rss_bytes > 0, "{mem:?}");
        // task_mem() reports VmHWM as max(high-water mark, current RSS).
        assert!(mem.hwm_bytes.unwrap() >= mem.rss_bytes, "{mem:?}");
        assert!(reader.read_rss_bytes(me).unwrap() > 0);
        // smaps_rollup needs CONFIG_PROC_PAGE_MONITOR; check it only where it exists.
        if std::path::Path::new("/proc/self/smaps_rollup").exists() {
            // Read after status, while other test threads allocate: no exact relation to RSS.
            let pss = reader.read_pss(me).unwrap();
            assert!(pss.pss_bytes > 0, "{pss:?}");
        }
    }

    #[test]
    fn a_kept_handle_follows_its_process_and_lets_go_when_it_is_gone() {
        let reader = ProcReader::default();
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        // Read twice through the kept handle: a live process reads each time.
        assert!(reader.read_rss_bytes(pid).is_some());
        assert!(reader.read(pid).is_some());
        assert!(reader.read_rss_bytes(pid).is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        // Reaped: the kept handle's read fails (ESRCH), it is dropped, and the path is gone.
        assert_eq!(reader.read_rss_bytes(pid), None);
        assert_eq!(reader.read(pid), None);
    }

    #[test]
    fn a_name_cut_inside_a_utf8_character_still_reads() {
        let dir = fixture(91, STATUS_6_18, "100 10 0 0 0 0 0\n", None);
        // The kernel cuts names at 15 bytes: `trainer_é` can end in half a character.
        let status = STATUS_6_18.replacen("Name:\tcat", "Name:\ttrainer_\u{e9}", 1);
        let mut bytes = status.into_bytes();
        let cut = bytes.iter().position(|&b| b == 0xa9).unwrap();
        bytes.remove(cut);
        std::fs::write(dir.path().join("91/status"), bytes).unwrap();
        let reader = ProcReader::new(dir.path());
        assert!(reader.read(91).is_some_and(|m| m.rss_bytes > 0));
    }

    #[test]
    fn handles_of_processes_out_of_the_tree_are_closed() {
        let dir = fixture(77, STATUS_6_18, "100 10 0 0 0 0 0\n", None);
        let reader = ProcReader::new(dir.path());
        assert_eq!(reader.read_rss_bytes(77), Some(10 * reader.page_size_bytes));
        // The process left the tree and its files went: a kept handle would still read them.
        reader.keep_only(&[78]);
        std::fs::remove_dir_all(dir.path().join("77")).unwrap();
        assert_eq!(reader.read_rss_bytes(77), None);
    }
}
