//! The machine's memory: total and available RAM and swap from /proc/meminfo, and memory
//! pressure (PSI, kernel >= 4.20) from /proc/pressure/memory, read once a tick; plus a one-off
//! description of the machine for `oomguard doctor`.
//!
//! It reports; deciding that the machine, not the job, is short of memory is the classifier's
//! job.
//!
//! Both files are parsed by hand. procfs's `Meminfo` turns all ~55 lines into owned `String`
//! keys of a `HashMap` and insists on ~15 fields that we never read (a fixture or an unusual
//! kernel lacking one fails whole), for 4 numbers a tick: `cargo bench --bench sample_cost`
//! measured 16.5 µs against 5.5 µs by hand, read included (7.7 µs with the PSI read). procfs's
//! pressure records hold `f32`, which widens 0.1 to 0.10000000149.

use std::path::PathBuf;

use super::{parse_kib_as_bytes, KeptFiles};

/// The machine's memory at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SystemMem {
    pub total_bytes: u64,
    /// The kernel's estimate of memory available to start new work without swapping
    /// (MemAvailable): free memory plus what can be reclaimed from caches.
    pub available_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_free_bytes: u64,
    /// Percent of the last 10 s in which some task stalled waiting for memory.
    pub psi_some_avg10: Option<f64>,
    /// Percent of the last 10 s in which all non-idle tasks stalled waiting for memory.
    pub psi_full_avg10: Option<f64>,
}

/// Reads the machine's memory under a /proc root.
#[derive(Debug, Clone)]
pub struct SystemReader {
    proc_root: PathBuf,
    /// meminfo and pressure/memory, read every tick, kept open.
    kept: std::sync::Arc<KeptFiles<&'static str>>,
}

impl Default for SystemReader {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl SystemReader {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: proc_root.into(),
            kept: std::sync::Arc::new(KeptFiles::new(2).missing_stays()),
        }
    }

    /// Memory now; `None` if /proc/meminfo is unreadable or lacks a needed field. The PSI
    /// fields are `None` where PSI is missing (kernel < 4.20, `psi=0`, CONFIG_PSI off).
    pub fn read(&self) -> Option<SystemMem> {
        let text = self
            .kept
            .read("meminfo", || self.proc_root.join("meminfo"), 4096)
            .ok()?;
        let mut mem = parse_meminfo(&text)?;
        if let Some((some, full)) = self.read_pressure() {
            mem.psi_some_avg10 = Some(some);
            mem.psi_full_avg10 = full;
        }
        Some(mem)
    }

    /// Whether memory pressure (PSI) can be read on this machine.
    pub fn psi_available(&self) -> bool {
        self.read_pressure().is_some()
    }

    fn read_pressure(&self) -> Option<(f64, Option<f64>)> {
        let path = || self.proc_root.join("pressure").join("memory");
        parse_pressure(&self.kept.read("pressure", path, 256).ok()?)
    }
}

/// Parses MemTotal, MemAvailable, SwapTotal and SwapFree of /proc/meminfo (values in KiB,
/// returned in bytes; the PSI fields are left `None`). `None` if any is missing: MemAvailable
/// exists since 3.14, and estimating it from MemFree + Cached on older kernels overstates what
/// can really be reclaimed, so no guess is made. A real sample (kernel 6.18, 2-core VM, trimmed
/// from 55 lines):
///
/// ```text
/// MemTotal:       24683656 kB
/// MemFree:        21381948 kB
/// MemAvailable:   24125884 kB
/// Buffers:           12052 kB
/// Cached:          2923908 kB
/// SwapCached:            0 kB
/// SwapTotal:             0 kB
/// SwapFree:              0 kB
/// Zswap:                 0 kB
/// HugePages_Total:       0
/// Hugepagesize:       2048 kB
/// ```
pub fn parse_meminfo(text: &str) -> Option<SystemMem> {
    let (mut total, mut available, mut swap_total, mut swap_free) = (None, None, None, None);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "MemTotal" => &mut total,
            "MemAvailable" => &mut available,
            "SwapTotal" => &mut swap_total,
            "SwapFree" => &mut swap_free,
            _ => continue,
        };
        *slot = parse_kib_as_bytes(value);
        // SwapFree is the last of the four, 16 lines in; the other ~40 lines are not needed.
        if total.is_some() && available.is_some() && swap_total.is_some() && swap_free.is_some() {
            break;
        }
    }
    Some(SystemMem {
        total_bytes: total?,
        available_bytes: available?,
        swap_total_bytes: swap_total?,
        swap_free_bytes: swap_free?,
        psi_some_avg10: None,
        psi_full_avg10: None,
    })
}

/// Parses the avg10 of the `some` and `full` lines of /proc/pressure/memory. A real sample
/// (kernel 6.18):
///
/// ```text
/// some avg10=0.00 avg60=0.00 avg300=0.00 total=587
/// full avg10=0.00 avg60=0.00 avg300=0.00 total=361
/// ```
///
/// `None` without a `some` line; the `full` part is `None` without a `full` line.
pub fn parse_pressure(text: &str) -> Option<(f64, Option<f64>)> {
    let avg10 = |kind: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(kind)?.strip_prefix(' '))
            .and_then(|fields| {
                fields
                    .split_ascii_whitespace()
                    .find_map(|field| field.strip_prefix("avg10="))
            })
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite())
    };
    Some((avg10("some")?, avg10("full")))
}

/// A short description of the machine for `oomguard doctor`, e.g.
/// `"host vm: Linux 6.18.44-fc-v769 (Debian GNU/Linux 12), 2 CPUs (2 usable)\nmemory 23.5 GiB,
/// swap none"`.
/// Uses sysinfo, which reads the same /proc files once; call it once, not every tick.
pub fn machine_summary() -> String {
    use sysinfo::{CpuRefreshKind, System};

    let mut sys = System::new();
    sys.refresh_memory();
    sys.refresh_cpu_list(CpuRefreshKind::nothing());
    let host = System::host_name().unwrap_or_else(|| "?".into());
    let kernel = System::kernel_version().unwrap_or_else(|| "?".into());
    // `long_os_version()` would repeat "Linux": "Linux (Debian GNU/Linux 12)".
    let os = match (System::name(), System::os_version()) {
        (Some(name), Some(version)) => format!(" ({name} {version})"),
        (Some(name), None) => format!(" ({name})"),
        _ => String::new(),
    };
    // The process may be limited to fewer CPUs (affinity, cgroup quota) than the machine has.
    let usable = std::thread::available_parallelism()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    let swap = match sys.total_swap() {
        0 => "none".to_string(),
        bytes => gib(bytes),
    };
    format!(
        "host {host}: Linux {kernel}{os}, {} CPUs ({usable} usable)\nmemory {}, swap {swap}",
        sys.cpus().len(),
        gib(sys.total_memory()),
    )
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/meminfo of a 2-core VM on kernel 6.18 (all 55 lines).
    const MEMINFO_6_18: &str = "MemTotal:       24683656 kB
MemFree:        21381948 kB
MemAvailable:   24125884 kB
Buffers:           12052 kB
Cached:          2923908 kB
SwapCached:            0 kB
Active:          1156760 kB
Inactive:        1818240 kB
Active(anon):       1560 kB
Inactive(anon):    46412 kB
Active(file):    1155200 kB
Inactive(file):  1771828 kB
Unevictable:       12224 kB
Mlocked:           11212 kB
SwapTotal:             0 kB
SwapFree:              0 kB
Zswap:                 0 kB
Zswapped:              0 kB
Dirty:            249364 kB
Writeback:             0 kB
AnonPages:         51332 kB
Mapped:            45456 kB
Shmem:              8924 kB
KReclaimable:     114028 kB
Slab:             143176 kB
SReclaimable:     114028 kB
SUnreclaim:        29148 kB
KernelStack:        1708 kB
PageTables:         2252 kB
SecPageTables:         0 kB
NFS_Unstable:          0 kB
Bounce:                0 kB
WritebackTmp:          0 kB
CommitLimit:    12341828 kB
Committed_AS:     133676 kB
VmallocTotal:   34359738367 kB
VmallocUsed:       14476 kB
VmallocChunk:          0 kB
Percpu:              712 kB
AnonHugePages:         0 kB
ShmemHugePages:        0 kB
ShmemPmdMapped:        0 kB
FileHugePages:     43008 kB
FilePmdMapped:         0 kB
Balloon:               0 kB
HugePages_Total:       0
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:               0 kB
DirectMap4k:       26624 kB
DirectMap2M:     2070528 kB
DirectMap1G:    25165824 kB
";

    /// The first lines of a RHEL 7 meminfo (kernel 3.10 with MemAvailable backported), with
    /// swap; the values are illustrative.
    const MEMINFO_3_10: &str = "MemTotal:       65808216 kB
MemFree:         1153132 kB
MemAvailable:   40360116 kB
Buffers:            1060 kB
Cached:         38532604 kB
SwapCached:        18652 kB
Active:         30470292 kB
Inactive:       24318592 kB
SwapTotal:       8388604 kB
SwapFree:        8177020 kB
";

    /// The first lines of a 3.2 kernel's meminfo, before MemAvailable (3.14); the values are
    /// illustrative.
    const MEMINFO_3_2: &str = "MemTotal:        2052252 kB
MemFree:          109396 kB
Buffers:          110108 kB
Cached:          1152792 kB
SwapCached:         3024 kB
Active:           997708 kB
Inactive:         785040 kB
SwapTotal:       2097148 kB
SwapFree:        2087520 kB
";

    #[test]
    fn parses_meminfo() {
        let table = [
            (
                MEMINFO_6_18,
                Some(SystemMem {
                    total_bytes: 24683656 * 1024,
                    available_bytes: 24125884 * 1024,
                    swap_total_bytes: 0,
                    swap_free_bytes: 0,
                    ..SystemMem::default()
                }),
            ),
            (
                MEMINFO_3_10,
                Some(SystemMem {
                    total_bytes: 65808216 * 1024,
                    available_bytes: 40360116 * 1024,
                    swap_total_bytes: 8388604 * 1024,
                    swap_free_bytes: 8177020 * 1024,
                    ..SystemMem::default()
                }),
            ),
            (MEMINFO_3_2, None),
            ("", None),
            ("MemTotal: lots\n", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_meminfo(text), want, "{text}");
        }
    }

    #[test]
    fn parses_pressure() {
        let table = [
            (
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=587\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=361\n",
                Some((0.0, Some(0.0))),
            ),
            (
                "some avg10=4.50 avg60=0.91 avg300=0.00 total=681245\n\
                 full avg10=2.10 avg60=0.12 avg300=0.00 total=391926\n",
                Some((4.5, Some(2.1))),
            ),
            // /proc/pressure/cpu before 5.13 had no full line; tolerate it here too.
            (
                "some avg10=12.25 avg60=3.00 avg300=1.00 total=5\n",
                Some((12.25, None)),
            ),
            ("full avg10=2.10 avg60=0.12 avg300=0.00 total=1\n", None),
            ("something avg10=1.00\n", None),
            ("some avg10=NaN\n", None),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_pressure(text), want, "{text}");
        }
    }

    #[test]
    fn reads_a_fixture_machine() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meminfo"), MEMINFO_3_10).unwrap();
        let reader = SystemReader::new(dir.path());
        // No /proc/pressure: PSI fields are None, the rest reads.
        assert!(!reader.psi_available());
        let mem = reader.read().unwrap();
        assert_eq!(mem.available_bytes, 40360116 * 1024);
        assert_eq!((mem.psi_some_avg10, mem.psi_full_avg10), (None, None));

        std::fs::create_dir(dir.path().join("pressure")).unwrap();
        std::fs::write(
            dir.path().join("pressure/memory"),
            "some avg10=4.50 avg60=0.91 avg300=0.00 total=681245\n\
             full avg10=2.10 avg60=0.12 avg300=0.00 total=391926\n",
        )
        .unwrap();
        // A machine with PSI (a reader does not look again for a file that was missing: on a
        // real machine /proc/pressure does not appear later).
        assert!(!reader.psi_available());
        let reader = SystemReader::new(dir.path());
        assert!(reader.psi_available());
        let mem = reader.read().unwrap();
        assert_eq!(
            (mem.psi_some_avg10, mem.psi_full_avg10),
            (Some(4.5), Some(2.1))
        );

        // An old kernel without MemAvailable, and a root with no meminfo at all.
        std::fs::write(dir.path().join("meminfo"), MEMINFO_3_2).unwrap();
        assert_eq!(reader.read(), None);
        assert_eq!(SystemReader::new("/no/such/proc").read(), None);
    }

    #[test]
    fn reads_this_machine() {
        let mem = SystemReader::default().read().unwrap();
        // MemAvailable is an estimate from per-CPU counters: no exact relation to MemTotal.
        assert!(mem.total_bytes > 0 && mem.available_bytes > 0, "{mem:?}");
        let summary = machine_summary();
        assert!(
            summary.contains("CPUs") && summary.contains("GiB"),
            "{summary}"
        );
    }
}
