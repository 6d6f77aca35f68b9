//! The job's share of a [`GpuSnapshot`]: which listed processes are the job's and how much device
//! memory they hold; and, per device, whose the rest is: the neighbours' (processes that are not
//! the job's: on a shared card, other users') and the driver's own share (used memory no listed
//! process accounts for). A pure function of the snapshot and the job's PIDs.
//!
//! Finding the job's PIDs, naming the neighbours (user, command: [`super::who`]) and keeping
//! peaks over ticks are the caller's.

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
    /// Every device, by index: what the job, its neighbours and the driver hold on it.
    pub devices: Vec<DeviceShare>,
}

/// One device's memory by whose it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceShare {
    pub index: u32,
    /// The card's UUID where the driver gives it (what claims on its room name it by).
    pub uuid: Option<String>,
    pub total_bytes: u64,
    pub used_bytes: u64,
    /// What the job's processes hold on it; `None` where no job PID is listed on it, or one's
    /// memory is unavailable.
    pub job_bytes: Option<u64>,
    /// The listed processes that are not the job's, largest first. Where no job PID is listed
    /// anywhere they may still be the job's own under other PIDs (a container); the caller
    /// weighs that (see [`attribute`]).
    pub neighbours: Vec<Neighbour>,
    /// What they hold (a memory the driver does not give counts as none).
    pub neighbours_bytes: u64,
    /// Used memory that no listed process accounts for: the driver's own reservations and
    /// contexts NVML does not list. Part of the card the job can never have.
    pub driver_bytes: u64,
}

impl DeviceShare {
    /// What is free on the card now, whoever holds the rest.
    pub fn free_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.used_bytes)
    }

    /// The room a job alone on the card would have: all of it but the driver's share.
    pub fn room_alone_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.driver_bytes)
    }
}

/// A process on a device that is not the job's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Neighbour {
    pub pid: u32,
    pub used_bytes: Option<u64>,
    /// Whose it is and what it runs, where this PID namespace's /proc shows it (filled by the
    /// sampler through [`super::who`]; [`attribute`] leaves it `None`).
    pub who: Option<super::who::Who>,
}

impl Neighbour {
    /// `PID 4242 (alice: python3 train.py) 40.0 GiB`.
    pub fn describe(&self) -> String {
        let who = self
            .who
            .as_ref()
            .map(|w| format!(" ({}: {})", w.user, w.command))
            .unwrap_or_default();
        let bytes = self
            .used_bytes
            .map(|b| format!(" {}", crate::observe::units::human_bytes(b)))
            .unwrap_or_default();
        format!("PID {}{who}{bytes}", self.pid)
    }
}

/// Each device's share: the job's processes on it, the others largest first, the driver's rest.
fn device_shares(snapshot: &GpuSnapshot, job_pids: &HashSet<u32>) -> Vec<DeviceShare> {
    let mut shares: Vec<DeviceShare> = snapshot
        .devices
        .iter()
        .map(|d| {
            let on_it = snapshot.processes.iter().filter(|p| p.device == d.index);
            let listed_bytes = on_it
                .clone()
                .fold(0u64, |sum, p| sum.saturating_add(p.used_bytes.unwrap_or(0)));
            let (mine, others): (Vec<&GpuProcess>, Vec<&GpuProcess>) =
                on_it.partition(|p| job_pids.contains(&p.pid));
            let job_bytes = (!mine.is_empty())
                .then(|| {
                    mine.iter()
                        .try_fold(0u64, |sum, p| p.used_bytes.map(|b| sum.saturating_add(b)))
                })
                .flatten();
            let mut neighbours: Vec<Neighbour> = others
                .iter()
                .map(|p| Neighbour {
                    pid: p.pid,
                    used_bytes: p.used_bytes,
                    who: None,
                })
                .collect();
            neighbours.sort_by_key(|n| (std::cmp::Reverse(n.used_bytes.unwrap_or(0)), n.pid));
            let neighbours_bytes = neighbours
                .iter()
                .fold(0u64, |sum, n| sum.saturating_add(n.used_bytes.unwrap_or(0)));
            DeviceShare {
                index: d.index,
                uuid: d.uuid.clone(),
                total_bytes: d.total_bytes,
                used_bytes: d.used_bytes,
                job_bytes,
                neighbours,
                neighbours_bytes,
                driver_bytes: d.used_bytes.saturating_sub(listed_bytes),
            }
        })
        .collect();
    shares.sort_by_key(|s| s.index);
    shares
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
///   other jobs): the neighbours of [`JobGpu::devices`]. (A host PID that equals one of
///   ours by chance inside a container would fool this; with container PIDs being small and few,
///   that is accepted.)
/// * **no job PID is listed**: either the job holds no GPU memory yet, or it runs in another PID
///   namespace; a snapshot cannot tell which. The job's share is unknown (`job_bytes` `None`),
///   and every listed process is a neighbour that may be the job's own: the caller weighs that
///   ([`crate::supervise`] warns of a PID namespace only where the evidence points to one). No
///   processes listed at all (the job has not touched the GPU, or the driver hides processes in
///   this container) gives `None` and an empty list; `devices_used_bytes` still shows what the
///   devices hold.
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

    let mine: Vec<&GpuProcess> = snapshot
        .processes
        .iter()
        .filter(|p| job_pids.contains(&p.pid))
        .collect();

    let devices = device_shares(snapshot, job_pids);
    if mine.is_empty() {
        return JobGpu {
            job_bytes: None,
            devices_used_bytes,
            devices_total_bytes,
            job_device_capacity_bytes: None,
            job_pids_listed: Vec::new(),
            job_bytes_by_device: Vec::new(),
            devices,
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
        devices,
    }
}

impl JobGpu {
    /// The devices the job is listed on; all of them where it is listed on none (it has not
    /// touched the card yet, or it runs in another PID namespace).
    pub fn job_devices(&self) -> impl Iterator<Item = &DeviceShare> {
        let listed = self.devices.iter().any(|d| d.job_bytes.is_some())
            || !self.job_bytes_by_device.is_empty();
        self.devices
            .iter()
            .filter(move |d| !listed || self.job_bytes_by_device.iter().any(|(i, _)| *i == d.index))
    }

    /// What the neighbours hold on the job's devices (see [`JobGpu::job_devices`]).
    pub fn neighbours_bytes(&self) -> u64 {
        self.job_devices()
            .fold(0u64, |sum, d| sum.saturating_add(d.neighbours_bytes))
    }

    /// The driver's share on the job's devices.
    pub fn driver_bytes(&self) -> u64 {
        self.job_devices()
            .fold(0u64, |sum, d| sum.saturating_add(d.driver_bytes))
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
            uuid: None,
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
        /// The processes that may or may not be the job's: every listed one where no job PID is
        /// listed, none otherwise.
        unattributed: Vec<GpuProcess>,
    }

    /// [`Case::unattributed`] as the shares show it: the neighbours, where no job PID is listed.
    fn unattributed(got: &JobGpu) -> Vec<GpuProcess> {
        if !got.job_pids_listed.is_empty() {
            return Vec::new();
        }
        let mut all: Vec<GpuProcess> = got
            .devices
            .iter()
            .flat_map(|d| {
                d.neighbours
                    .iter()
                    .map(|n| proc_(n.pid, d.index, n.used_bytes))
            })
            .collect();
        all.sort_by_key(|p| (p.device, p.pid));
        all
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
                    devices: vec![],
                },
                unattributed: vec![],
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
                unattributed: vec![],
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
                    devices: vec![],
                },
                unattributed: vec![
                    proc_(2_345_678, 0, Some(29 * GIB)),
                    proc_(2_345_690, 1, Some(49 * GIB)),
                ],
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
                    ..JobGpu::default()
                },
                unattributed: vec![proc_(5, 0, Some(GIB))],
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
                    devices: vec![],
                },
                unattributed: vec![],
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
                    devices: vec![],
                },
                unattributed: vec![],
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
                    devices: vec![],
                },
                unattributed: vec![],
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
                    devices: vec![],
                },
                unattributed: vec![],
            },
            Case {
                name: "no devices at all (NullProbe)",
                snapshot: GpuSnapshot::default(),
                job: &[100],
                want: JobGpu::default(),
                unattributed: vec![],
            },
        ];
        for case in cases {
            // The per-device shares have a table of their own, below.
            let mut got = attribute(&case.snapshot, &pids(case.job));
            assert_eq!(
                got.devices.len(),
                case.snapshot.devices.len(),
                "{}",
                case.name
            );
            assert_eq!(unattributed(&got), case.unattributed, "{}", case.name);
            got.devices.clear();
            assert_eq!(got, case.want, "{}", case.name);
        }
    }

    fn neighbour(pid: u32, used: u64) -> Neighbour {
        Neighbour {
            pid,
            used_bytes: Some(used),
            who: None,
        }
    }

    #[test]
    fn each_device_splits_into_the_job_the_neighbours_and_the_driver() {
        // Card 0: the job (100, 101) 21 GiB, neighbours 999 (8 GiB) and 998 (unknown), and
        // 1 GiB the driver holds. Card 1: only a neighbour, 40 of 50 GiB used.
        let snapshot = GpuSnapshot {
            devices: vec![dev(0, 30 * GIB, 80 * GIB), dev(1, 50 * GIB, 80 * GIB)],
            processes: vec![
                proc_(100, 0, Some(20 * GIB)),
                proc_(101, 0, Some(GIB)),
                proc_(998, 0, None),
                proc_(999, 0, Some(8 * GIB)),
                proc_(777, 1, Some(40 * GIB)),
            ],
        };
        let got = attribute(&snapshot, &pids(&[100, 101]));
        assert_eq!(
            got.devices,
            vec![
                DeviceShare {
                    index: 0,
                    uuid: None,
                    total_bytes: 80 * GIB,
                    used_bytes: 30 * GIB,
                    job_bytes: Some(21 * GIB),
                    neighbours: vec![
                        neighbour(999, 8 * GIB),
                        Neighbour {
                            pid: 998,
                            used_bytes: None,
                            who: None
                        }
                    ],
                    neighbours_bytes: 8 * GIB,
                    driver_bytes: GIB,
                },
                DeviceShare {
                    index: 1,
                    uuid: None,
                    total_bytes: 80 * GIB,
                    used_bytes: 50 * GIB,
                    job_bytes: None,
                    neighbours: vec![neighbour(777, 40 * GIB)],
                    neighbours_bytes: 40 * GIB,
                    driver_bytes: 10 * GIB,
                },
            ]
        );
        // The job is on card 0 only: card 1's neighbour is not its neighbour.
        let on: Vec<u32> = got.job_devices().map(|d| d.index).collect();
        assert_eq!(on, [0]);
        assert_eq!((got.neighbours_bytes(), got.driver_bytes()), (8 * GIB, GIB));
        assert_eq!(got.devices[0].free_bytes(), 50 * GIB);
        assert_eq!(got.devices[0].room_alone_bytes(), 79 * GIB);

        // Before the job touches a card, every card may be its own.
        let before = attribute(&snapshot, &pids(&[5]));
        assert_eq!(before.job_devices().count(), 2);
        assert_eq!(before.neighbours_bytes(), 69 * GIB);
        assert_eq!(
            neighbour(999, 8 * GIB).describe(),
            "PID 999 8.0 GiB",
            "no /proc entry: the PID and its memory"
        );
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
