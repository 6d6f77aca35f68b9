//! The job's share of a [`GpuSnapshot`]: which listed processes are the job's and how much device
//! memory they hold, or, when that cannot be told, which processes are left unattributed. A pure
//! function of the snapshot and the job's PIDs.
//!
//! Finding the job's PIDs and keeping peaks over ticks are the caller's.

use std::collections::{BTreeMap, HashSet};

use super::{GpuProcess, GpuSnapshot};

/// The job's share of one snapshot. See [`attribute`] for the rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobGpu {
    /// Device memory held by the job's processes over all devices. `None` when the job's share
    /// is unknown: no job PID is listed, or a listed job process's memory is unavailable (MIG,
    /// permissions). Never a guess, never a silent zero.
    pub job_bytes: Option<u64>,
    /// Used memory of every device, whoever holds it (all processes plus the driver's own).
    /// With [`JobGpu::job_bytes`] `None`, an upper bound of the job's share on a dedicated
    /// machine.
    pub devices_used_bytes: u64,
    pub devices_total_bytes: u64,
    /// The largest capacity among the devices the job's processes are listed on: the room a
    /// device out-of-memory error runs into (one card's, however many the job uses); `None`
    /// where no job PID is listed.
    pub job_device_capacity_bytes: Option<u64>,
    /// The job's PIDs that NVML lists, sorted, each once.
    pub job_pids_listed: Vec<u32>,
    /// The job's memory per device index, sorted by device, for the devices where a job PID is
    /// listed; `None` for a device where a job process's memory is unavailable.
    pub job_bytes_by_device: Vec<(u32, Option<u64>)>,
    /// Processes that may or may not be the job's: every listed process when no job PID is
    /// listed; empty otherwise.
    pub unattributed: Vec<GpuProcess>,
}

/// Splits a snapshot into the job's share and the rest.
///
/// NVML names processes by their PID in the driver's PID namespace, the host's. When oomguard
/// shares it (bare metal, a VM, a container run with `--pid=host`), the job's PIDs appear as
/// they are; inside a container with its own PID namespace they never do, and other PIDs that
/// happen to be listed may well be the job's own processes under their host numbers. Hence:
///
/// * **some job PID is listed**: we share the driver's PID namespace. The job's share is the
///   memory of its listed processes ([`JobGpu::job_bytes`], per device in
///   [`JobGpu::job_bytes_by_device`]); the other processes belong to others (other users,
///   other jobs) and are not reported; `unattributed` is empty. (A host PID that equals one of
///   ours by chance inside a container would fool this; with container PIDs being small and few,
///   that is accepted.)
/// * **no job PID is listed**: either the job holds no GPU memory yet, or it runs in another PID
///   namespace; a snapshot cannot tell which. The job's share is unknown (`job_bytes` `None`),
///   and every listed process is `unattributed`, for the caller to report as such (e.g. "GPU
///   memory of 2 processes not attributable to the job: 31.2 GiB"). No processes listed at all
///   (the job has not touched the GPU, or the driver hides processes in this container) gives
///   `None` and an empty list; `devices_used_bytes` still shows what the devices hold.
///
/// `job_pids` should hold every PID of the job's process tree, its root included.
pub fn attribute(snapshot: &GpuSnapshot, job_pids: &HashSet<u32>) -> JobGpu {
    let devices_used_bytes = snapshot
        .devices
        .iter()
        .fold(0u64, |sum, d| sum.saturating_add(d.used_bytes));
    let devices_total_bytes = snapshot
        .devices
        .iter()
        .fold(0u64, |sum, d| sum.saturating_add(d.total_bytes));

    let (mine, others): (Vec<&GpuProcess>, Vec<&GpuProcess>) = snapshot
        .processes
        .iter()
        .partition(|p| job_pids.contains(&p.pid));

    if mine.is_empty() {
        return JobGpu {
            job_bytes: None,
            devices_used_bytes,
            devices_total_bytes,
            job_device_capacity_bytes: None,
            job_pids_listed: Vec::new(),
            job_bytes_by_device: Vec::new(),
            unattributed: others.into_iter().cloned().collect(),
        };
    }

    let mut job_pids_listed: Vec<u32> = mine.iter().map(|p| p.pid).collect();
    job_pids_listed.sort_unstable();
    job_pids_listed.dedup();

    let mut by_device: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for p in &mine {
        let slot = by_device.entry(p.device).or_insert(Some(0));
        *slot = slot.zip(p.used_bytes).map(|(a, b)| a.saturating_add(b));
    }
    let job_bytes = by_device
        .values()
        .try_fold(0u64, |sum, bytes| bytes.map(|b| sum.saturating_add(b)));

    let job_device_capacity_bytes = snapshot
        .devices
        .iter()
        .filter(|d| by_device.contains_key(&d.index))
        .map(|d| d.total_bytes)
        .max();

    JobGpu {
        job_bytes,
        devices_used_bytes,
        devices_total_bytes,
        job_device_capacity_bytes,
        job_pids_listed,
        job_bytes_by_device: by_device.into_iter().collect(),
        unattributed: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::GpuDevice;
    use super::*;

    const GIB: u64 = 1 << 30;

    fn dev(index: u32, used: u64, total: u64) -> GpuDevice {
        GpuDevice {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            used_bytes: used,
            total_bytes: total,
        }
    }

    fn proc_(pid: u32, device: u32, used: Option<u64>) -> GpuProcess {
        GpuProcess {
            pid,
            device,
            used_bytes: used,
        }
    }

    fn pids(list: &[u32]) -> HashSet<u32> {
        list.iter().copied().collect()
    }

    struct Case {
        name: &'static str,
        snapshot: GpuSnapshot,
        job: &'static [u32],
        want: JobGpu,
    }

    #[test]
    fn attributes_by_the_table() {
        let one_gpu = vec![dev(0, 30 * GIB, 80 * GIB)];
        let two_gpus = vec![dev(0, 30 * GIB, 80 * GIB), dev(1, 50 * GIB, 80 * GIB)];
        let cases = [
            Case {
                name: "job pids listed among others: others are not ours, not unattributed",
                snapshot: GpuSnapshot {
                    devices: one_gpu.clone(),
                    processes: vec![
                        proc_(100, 0, Some(20 * GIB)),
                        proc_(101, 0, Some(GIB)),
                        proc_(999, 0, Some(8 * GIB)),
                    ],
                },
                job: &[100, 101, 102],
                want: JobGpu {
                    job_bytes: Some(21 * GIB),
                    devices_used_bytes: 30 * GIB,
                    devices_total_bytes: 80 * GIB,
                    job_device_capacity_bytes: Some(80 * GIB),
                    job_pids_listed: vec![100, 101],
                    job_bytes_by_device: vec![(0, Some(21 * GIB))],
                    unattributed: vec![],
                },
            },
            Case {
                name: "nothing listed: unknown, nothing unattributed",
                snapshot: GpuSnapshot {
                    devices: one_gpu.clone(),
                    processes: vec![],
                },
                job: &[100],
                want: JobGpu {
                    job_bytes: None,
                    devices_used_bytes: 30 * GIB,
                    devices_total_bytes: 80 * GIB,
                    ..JobGpu::default()
                },
            },
            Case {
                name: "container: host pids never match ours, all unattributed",
                snapshot: GpuSnapshot {
                    devices: two_gpus.clone(),
                    processes: vec![
                        proc_(2_345_678, 0, Some(29 * GIB)),
                        proc_(2_345_690, 1, Some(49 * GIB)),
                    ],
                },
                job: &[1, 7, 8],
                want: JobGpu {
                    job_bytes: None,
                    devices_used_bytes: 80 * GIB,
                    devices_total_bytes: 160 * GIB,
                    job_device_capacity_bytes: None,
                    job_pids_listed: vec![],
                    job_bytes_by_device: vec![],
                    unattributed: vec![
                        proc_(2_345_678, 0, Some(29 * GIB)),
                        proc_(2_345_690, 1, Some(49 * GIB)),
                    ],
                },
            },
            Case {
                name: "no job pids known yet: all unattributed",
                snapshot: GpuSnapshot {
                    devices: one_gpu.clone(),
                    processes: vec![proc_(5, 0, Some(GIB))],
                },
                job: &[],
                want: JobGpu {
                    job_bytes: None,
                    devices_used_bytes: 30 * GIB,
                    devices_total_bytes: 80 * GIB,
                    unattributed: vec![proc_(5, 0, Some(GIB))],
                    ..JobGpu::default()
                },
            },
            Case {
                name: "job memory unavailable (MIG): listed but unknown, never zero",
                snapshot: GpuSnapshot {
                    devices: one_gpu.clone(),
                    processes: vec![proc_(100, 0, None), proc_(999, 0, None)],
                },
                job: &[100],
                want: JobGpu {
                    job_bytes: None,
                    devices_used_bytes: 30 * GIB,
                    devices_total_bytes: 80 * GIB,
                    job_device_capacity_bytes: Some(80 * GIB),
                    job_pids_listed: vec![100],
                    job_bytes_by_device: vec![(0, None)],
                    unattributed: vec![],
                },
            },
            Case {
                name: "other process's memory unavailable: does not matter",
                snapshot: GpuSnapshot {
                    devices: one_gpu.clone(),
                    processes: vec![proc_(100, 0, Some(3 * GIB)), proc_(999, 0, None)],
                },
                job: &[100],
                want: JobGpu {
                    job_bytes: Some(3 * GIB),
                    devices_used_bytes: 30 * GIB,
                    devices_total_bytes: 80 * GIB,
                    job_device_capacity_bytes: Some(80 * GIB),
                    job_pids_listed: vec![100],
                    job_bytes_by_device: vec![(0, Some(3 * GIB))],
                    unattributed: vec![],
                },
            },
            Case {
                name: "multiple devices: one process on two devices, per device and total",
                snapshot: GpuSnapshot {
                    devices: two_gpus.clone(),
                    processes: vec![
                        proc_(100, 0, Some(10 * GIB)),
                        proc_(101, 0, Some(2 * GIB)),
                        proc_(999, 0, Some(GIB)),
                        proc_(100, 1, Some(40 * GIB)),
                    ],
                },
                job: &[100, 101],
                want: JobGpu {
                    job_bytes: Some(52 * GIB),
                    devices_used_bytes: 80 * GIB,
                    devices_total_bytes: 160 * GIB,
                    job_device_capacity_bytes: Some(80 * GIB),
                    job_pids_listed: vec![100, 101],
                    job_bytes_by_device: vec![(0, Some(12 * GIB)), (1, Some(40 * GIB))],
                    unattributed: vec![],
                },
            },
            Case {
                name: "multiple devices, one unavailable: per-device known, total unknown",
                snapshot: GpuSnapshot {
                    devices: two_gpus.clone(),
                    processes: vec![proc_(100, 0, Some(10 * GIB)), proc_(100, 1, None)],
                },
                job: &[100],
                want: JobGpu {
                    job_bytes: None,
                    devices_used_bytes: 80 * GIB,
                    devices_total_bytes: 160 * GIB,
                    job_device_capacity_bytes: Some(80 * GIB),
                    job_pids_listed: vec![100],
                    job_bytes_by_device: vec![(0, Some(10 * GIB)), (1, None)],
                    unattributed: vec![],
                },
            },
            Case {
                name: "no devices at all (NullProbe)",
                snapshot: GpuSnapshot::default(),
                job: &[100],
                want: JobGpu::default(),
            },
        ];
        for case in cases {
            assert_eq!(
                attribute(&case.snapshot, &pids(case.job)),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn sums_saturate() {
        let snap = GpuSnapshot {
            devices: vec![dev(0, u64::MAX, u64::MAX), dev(1, 1, 1)],
            processes: vec![proc_(1, 0, Some(u64::MAX)), proc_(1, 1, Some(1))],
        };
        let got = attribute(&snap, &pids(&[1]));
        assert_eq!(got.job_bytes, Some(u64::MAX));
        assert_eq!(got.devices_used_bytes, u64::MAX);
    }
}
