//! Whether a device out-of-memory death was the job's size or its neighbours' memory: on a shared
//! card another user's process can take the room the job needs, and cutting the batch for that
//! would make the job slower for good. A pure rule over the evidence of one attempt: the
//! message's numbers (what the job held, what it tried to allocate, what was free, the other
//! processes it names), the card's readings at the attempt's start and at its death, and the
//! job's need where earlier attempts measured it.
//!
//! The same for host memory ([`host_taken`]): a kernel OOM kill of the whole machine (no limit
//! of the job's own: the global counter moved and the kernel named the job) while the other
//! processes' memory grew into the room the job had at its start.
//!
//! It does not classify the output ([`crate::judge::classify`] has said `device_oom` or
//! `oom_killed` before this is asked), wait for room or choose values ([`mod@crate::run`]'s `room`,
//! [`crate::decide::policy`]).

use std::collections::HashSet;

use crate::judge::classify::KernelEvidence;
use crate::judge::oom_numbers;
use crate::observe::gpu::{JobGpu, Neighbour};
use crate::observe::units::human_bytes;

/// A job "fits alone" only with this share of the card's room to spare at most: one that needs
/// the last 2% would die of fragmentation on an empty card too, and waiting would not help it.
pub const FITS_ALONE_SHARE: f64 = 0.98;

/// Neighbours holding less than this (a desktop's X server, a monitoring agent's context) did not
/// take the job's room in any sense worth waiting for.
pub const NEIGHBOUR_MIN_BYTES: u64 = 256 << 20;

/// The evidence that other processes took the room of a job that fits alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    /// The card (NVML's index where the readings tell, else the message's ordinal).
    pub device: u32,
    /// What the job needed at least: held plus tried to allocate, or a measured peak.
    pub need_bytes: u64,
    /// The card less the driver's share: what the job would have alone.
    pub room_alone_bytes: u64,
    /// The other processes at the death, largest first (with user and command where known).
    pub neighbours: Vec<Neighbour>,
    /// What they held at the death, and at the attempt's start (`None`: no reading then).
    pub neighbours_bytes_at_death: u64,
    pub neighbours_bytes_at_start: Option<u64>,
}

impl Taken {
    /// The verdict's evidence after the output's: who took the card, how much, and why the
    /// job alone fits.
    pub fn evidence(&self) -> String {
        let who = match self.neighbours.first() {
            Some(first) if self.neighbours.len() == 1 => first.describe(),
            Some(first) => format!(
                "{} and {} other process{}",
                first.describe(),
                self.neighbours.len() - 1,
                if self.neighbours.len() == 2 { "" } else { "es" }
            ),
            None => "other processes".to_string(),
        };
        let start = match self.neighbours_bytes_at_start {
            Some(bytes) => format!(", {} at the attempt's start", human_bytes(bytes)),
            None => String::new(),
        };
        format!(
            "GPU {} taken by {who}: others held {} at the death{start}; the job alone needs at least {} of the card's {} it can have",
            self.device,
            human_bytes(self.neighbours_bytes_at_death),
            human_bytes(self.need_bytes),
            human_bytes(self.room_alone_bytes),
        )
    }
}

/// What one attempt that died of a device out-of-memory error shows about its card.
#[derive(Debug, Clone, Copy, Default)]
pub struct Evidence<'a> {
    /// The attempt's output tail (the message).
    pub tail: &'a str,
    /// The card at the attempt's first and last readings while the job ran.
    pub at_start: Option<&'a JobGpu>,
    pub at_death: Option<&'a JobGpu>,
    /// The job's GPU memory at these knob values where an attempt that fitted measured it.
    pub measured_need_bytes: Option<u64>,
    /// Every PID of the job's tree: a process the message names may be one of its own.
    pub job_pids: Option<&'a HashSet<u32>>,
}

/// `Some` where the job alone fits the card but the other processes' memory left it short: the
/// need (the larger of the message's held-plus-tried and a measured peak at these values) is
/// within [`FITS_ALONE_SHARE`] of the card less the driver's share, yet over that room less what
/// the others held at the death, and they held at least [`NEIGHBOUR_MIN_BYTES`]. Without a
/// need, or without the card's size (neither a reading nor the message's `total capacity`), it
/// cannot tell, and says `None`: the death is the job's own.
pub fn gpu_taken(e: &Evidence) -> Option<Taken> {
    let numbers = oom_numbers::parse(e.tail);
    let need_bytes = numbers
        .and_then(|n| n.need_bytes())
        .max(e.measured_need_bytes)?;
    // PyTorch names every process on the card, the failing one too where it cannot tell which
    // is itself (in a container, or a rank it does not know as its own): only beside its own
    // `this process has`, and only PIDs not of the job, are the named ones others.
    let named: Vec<(u32, u64)> = match numbers.and_then(|n| n.process_bytes) {
        Some(_) => oom_numbers::others_named(e.tail)
            .into_iter()
            .filter(|(pid, _)| e.job_pids.is_none_or(|job| !job.contains(pid)))
            .collect(),
        None => Vec::new(),
    };
    let named_bytes = named.iter().map(|(_, b)| *b).sum::<u64>();
    // The job's card at the death, from the readings: the one whose neighbours held the most
    // among those it is listed on.
    let reading = e
        .at_death
        .and_then(|g| g.job_devices().max_by_key(|d| d.neighbours_bytes));
    let (device, room_alone_bytes, neighbours, read_bytes) = match reading {
        Some(d) => (
            d.index,
            d.room_alone_bytes(),
            d.neighbours.clone(),
            d.neighbours_bytes,
        ),
        None => {
            // No reading (no NVML here, or none in time): the message alone. The driver's share
            // is what neither the job, the others nor the free memory account for.
            let n = numbers?;
            let total = n.total_bytes?;
            let driver = total
                .saturating_sub(n.free_bytes.unwrap_or(0))
                .saturating_sub(n.process_bytes.unwrap_or(0))
                .saturating_sub(named_bytes);
            (
                n.device.unwrap_or(0),
                total.saturating_sub(driver),
                Vec::new(),
                0,
            )
        }
    };
    // The message names the others at the very moment of the failure; a reading may have
    // come a tick before.
    let neighbours_bytes_at_death = read_bytes.max(named_bytes);
    let neighbours = if neighbours.is_empty() {
        named
            .iter()
            .map(|&(pid, bytes)| Neighbour {
                pid,
                used_bytes: Some(bytes),
                who: None,
            })
            .collect()
    } else {
        neighbours
    };
    let fits_alone = (need_bytes as f64) <= room_alone_bytes as f64 * FITS_ALONE_SHARE;
    let short_beside_them = need_bytes > room_alone_bytes.saturating_sub(neighbours_bytes_at_death);
    if !(fits_alone && short_beside_them && neighbours_bytes_at_death >= NEIGHBOUR_MIN_BYTES) {
        return None;
    }
    let neighbours_bytes_at_start = e
        .at_start
        .and_then(|g| g.devices.iter().find(|d| d.index == device))
        .map(|d| d.neighbours_bytes);
    Some(Taken {
        device,
        need_bytes,
        room_alone_bytes,
        neighbours,
        neighbours_bytes_at_death,
        neighbours_bytes_at_start,
    })
}

/// The machine's memory at one reading, and the job's share of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostReading {
    pub total_bytes: u64,
    pub available_bytes: u64,
    /// What the job held (its cgroup's working set, else its PSS, else its RSS).
    pub job_bytes: u64,
}

impl HostReading {
    /// What everything but the job held: the machine's used memory less the job's.
    pub fn others_bytes(&self) -> u64 {
        self.total_bytes
            .saturating_sub(self.available_bytes)
            .saturating_sub(self.job_bytes)
    }
}

/// Other processes grew by at least this before a machine-wide OOM kill counts as theirs, or
/// a tenth of the job's need where that is more: the machine's own churn is not a neighbour.
pub const HOST_GROWTH_MIN_BYTES: u64 = 1 << 30;

/// The evidence that other processes took the host memory of a job that fitted beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostTaken {
    /// What the job held at most.
    pub need_bytes: u64,
    pub total_bytes: u64,
    /// What everything but the job held at the attempt's start and at its last reading.
    pub others_at_start_bytes: u64,
    pub others_at_death_bytes: u64,
}

impl HostTaken {
    pub fn evidence(&self) -> String {
        format!(
            "host memory taken: other processes grew from {} to {} of the machine's {} while the job held at most {}",
            human_bytes(self.others_at_start_bytes),
            human_bytes(self.others_at_death_bytes),
            human_bytes(self.total_bytes),
            human_bytes(self.need_bytes),
        )
    }
}

/// `Some` where the kernel's OOM killer acted for the whole machine (its counter moved and a
/// kernel line names the job; no cgroup of the job's counted a kill, so no limit of its own was
/// reached), the job's peak fitted beside what the others held at its start (within
/// [`FITS_ALONE_SHARE`] of the machine), and the others then grew by at least
/// [`HOST_GROWTH_MIN_BYTES`] (or a tenth of the job's need) into that room.
pub fn host_taken(
    kernel: &KernelEvidence,
    at_start: Option<&HostReading>,
    at_death: Option<&HostReading>,
    peak_bytes: Option<u64>,
) -> Option<HostTaken> {
    let machine_wide = kernel.vmstat_oom_kill_delta.unwrap_or(0) > 0
        && !kernel.victim_lines.is_empty()
        && kernel.cgroup_oom_kills.unwrap_or(0) == 0
        && kernel.cgroup_chain_kill.is_none();
    let (start, death) = (at_start?, at_death?);
    let need_bytes = peak_bytes.unwrap_or(0).max(death.job_bytes);
    let (before, after) = (start.others_bytes(), death.others_bytes());
    let fitted =
        (need_bytes.saturating_add(before)) as f64 <= start.total_bytes as f64 * FITS_ALONE_SHARE;
    let grew = after >= before.saturating_add(HOST_GROWTH_MIN_BYTES.max(need_bytes / 10));
    (machine_wide && need_bytes > 0 && fitted && grew).then_some(HostTaken {
        need_bytes,
        total_bytes: start.total_bytes,
        others_at_start_bytes: before,
        others_at_death_bytes: after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::gpu::{attribute, GpuDevice, GpuProcess, GpuSnapshot};

    const GIB: u64 = 1 << 30;

    /// PyTorch 2.x's message on an 80 GiB card: `this` GiB held, `tried` GiB asked for, and
    /// the neighbour PIDs with what they held.
    fn message(this: f64, tried: f64, others: &[(u32, f64)]) -> String {
        let used: f64 = this + others.iter().map(|(_, g)| g).sum::<f64>();
        let free_mib = ((80.0 - 0.5 - used) * 1024.0).max(0.0);
        let named: String = others
            .iter()
            .map(|(pid, g)| format!("Process {pid} has {g:.2} GiB memory in use. "))
            .collect();
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2} GiB. GPU 0 has a total capacity of 80.00 GiB of which {free_mib:.2} MiB is free. {named}Including non-PyTorch memory, this process has {this:.2} GiB memory in use. Of the allocated memory {this:.2} GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.\n"
        )
    }

    /// The card as the job (PID 100) and its neighbours (PID, GiB) hold it, the driver 0.5 GiB.
    fn card(job_gib: f64, others: &[(u32, f64)]) -> JobGpu {
        let gib = |g: f64| (g * GIB as f64) as u64;
        let mut processes = vec![GpuProcess {
            pid: 100,
            device: 0,
            used_bytes: Some(gib(job_gib)),
        }];
        processes.extend(others.iter().map(|&(pid, g)| GpuProcess {
            pid,
            device: 0,
            used_bytes: Some(gib(g)),
        }));
        let used = gib(0.5) + processes.iter().map(|p| p.used_bytes.unwrap()).sum::<u64>();
        let snap = GpuSnapshot {
            devices: vec![GpuDevice {
                index: 0,
                name: "H100".into(),
                uuid: None,
                used_bytes: used,
                total_bytes: 80 * GIB,
            }],
            processes,
        };
        attribute(&snap, &HashSet::from([100]))
    }

    /// A case of the table: its name, the message, the card at the start and at the death, a
    /// measured need, and whether the neighbours took the room.
    type Case<'a> = (
        &'static str,
        String,
        Option<&'a JobGpu>,
        Option<&'a JobGpu>,
        Option<u64>,
        bool,
    );

    #[test]
    fn taken_or_the_jobs_own_by_the_table() {
        // (case, message, card at start, card at death, measured need, taken?)
        let neighbour_40 = card(20.0, &[(999_999, 40.0)]);
        let alone = card(20.0, &[]);
        let small = card(20.0, &[(4242, 0.1)]);
        let grown_start = card(20.0, &[(999_999, 5.0)]);
        let grown = card(20.0, &[(999_999, 40.0)]);
        let cases: [Case; 7] = [
            (
                "a neighbour of 40 GiB; the job needs 20 + 32 = 52 GiB of 79.5: taken",
                message(20.0, 32.0, &[(999_999, 40.0)]),
                Some(&neighbour_40),
                Some(&neighbour_40),
                None,
                true,
            ),
            (
                "the same from the message alone (no NVML readings)",
                message(20.0, 32.0, &[(999_999, 40.0)]),
                None,
                None,
                None,
                true,
            ),
            (
                "alone and too big: 20 + 70 = 90 GiB on an 80 GiB card is the job's own",
                message(20.0, 70.0, &[]),
                Some(&alone),
                Some(&alone),
                None,
                false,
            ),
            (
                "too big even alone, a neighbour present: the job's own",
                message(20.0, 70.0, &[(999_999, 40.0)]),
                Some(&neighbour_40),
                Some(&neighbour_40),
                None,
                false,
            ),
            (
                "a 100 MiB neighbour (X server) does not make a job that needs 79.4 GiB fit",
                message(20.0, 59.4, &[(4242, 0.1)]),
                Some(&small),
                Some(&small),
                None,
                false,
            ),
            (
                "a neighbour that grew during the attempt (5 → 40 GiB): taken",
                message(20.0, 32.0, &[(999_999, 40.0)]),
                Some(&grown_start),
                Some(&grown),
                None,
                true,
            ),
            (
                "no sizes in the message, but a fitted attempt measured 52 GiB at these values",
                "torch.OutOfMemoryError: CUDA out of memory.\n".to_string(),
                Some(&neighbour_40),
                Some(&neighbour_40),
                Some(52 * GIB),
                true,
            ),
        ];
        for (name, tail, at_start, at_death, measured, want) in cases {
            let got = gpu_taken(&Evidence {
                tail: &tail,
                at_start,
                at_death,
                measured_need_bytes: measured,
                job_pids: None,
            });
            assert_eq!(got.is_some(), want, "{name}: {got:?}");
        }
    }

    fn host(available_gib: u64, job_gib: u64) -> HostReading {
        HostReading {
            total_bytes: 64 * GIB,
            available_bytes: available_gib * GIB,
            job_bytes: job_gib * GIB,
        }
    }

    #[test]
    fn host_memory_taken_or_the_jobs_own_by_the_table() {
        let global = KernelEvidence {
            vmstat_oom_kill_delta: Some(1),
            victim_lines: vec!["Out of memory: Killed process 100 (python3)".into()],
            cgroup_oom_kills: None,
            cgroup_chain_kill: None,
        };
        let own_cgroup = KernelEvidence {
            cgroup_oom_kills: Some(1),
            ..global.clone()
        };
        // (case, kernel, at start, at death, peak, taken?)
        let cases = [
            // 64 GiB machine: others 4 → 40 GiB while the job held 20: theirs.
            (
                "others grew into the job's room",
                &global,
                host(40, 20),
                host(0, 24),
                24,
                true,
            ),
            (
                "the job grew alone: its own",
                &global,
                host(40, 20),
                host(0, 60),
                60,
                false,
            ),
            (
                "a limit of the job's own cgroup: its own",
                &own_cgroup,
                host(40, 20),
                host(0, 24),
                24,
                false,
            ),
            (
                "the job never fitted beside them",
                &global,
                host(10, 20),
                host(0, 34),
                60,
                false,
            ),
            (
                "others grew by less than 1 GiB",
                &global,
                host(40, 20),
                host(39, 20),
                20,
                false,
            ),
        ];
        for (name, kernel, start, death, peak, want) in cases {
            let got = host_taken(kernel, Some(&start), Some(&death), Some(peak * GIB));
            assert_eq!(got.is_some(), want, "{name}: {got:?}");
        }
        let taken = host_taken(
            &global,
            Some(&host(40, 20)),
            Some(&host(0, 24)),
            Some(24 * GIB),
        )
        .unwrap();
        assert_eq!(
            taken.evidence(),
            "host memory taken: other processes grew from 4.0 GiB to 40.0 GiB of the machine's 64.0 GiB while the job held at most 24.0 GiB"
        );
        assert_eq!(host_taken(&global, None, Some(&host(0, 24)), None), None);
    }

    #[test]
    fn processes_the_message_names_are_others_only_beside_its_own_and_not_the_jobs() {
        // torchrun's rank as PyTorch prints it without knowing itself: the one process named
        // is the rank, not a neighbour.
        let rank = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 158.00 MiB. GPU 1 has a total capacity of 23.69 GiB of which 115.69 MiB is free. Process 21422 has 23.57 GiB memory in use. Of the allocated memory 22.10 GiB is allocated by PyTorch, and 1.01 GiB is reserved by PyTorch but unallocated.\n";
        assert_eq!(
            gpu_taken(&Evidence {
                tail: rank,
                ..Evidence::default()
            }),
            None
        );
        // With its own `this process has`, the named one is another's, unless it is the job's.
        let tail = message(20.0, 32.0, &[(999_999, 40.0)]);
        let jobs = HashSet::from([999_999]);
        let evidence = |job_pids| Evidence {
            tail: &tail,
            job_pids,
            ..Evidence::default()
        };
        assert!(gpu_taken(&evidence(None)).is_some());
        assert_eq!(gpu_taken(&evidence(Some(&jobs))), None);
    }

    #[test]
    fn the_evidence_names_the_neighbour_and_both_moments() {
        let tail = message(20.0, 32.0, &[(999_999, 40.0)]);
        let start = card(20.0, &[(999_999, 5.0)]);
        let death = card(20.0, &[(999_999, 40.0)]);
        let taken = gpu_taken(&Evidence {
            tail: &tail,
            at_start: Some(&start),
            at_death: Some(&death),
            measured_need_bytes: None,
            job_pids: None,
        })
        .unwrap();
        assert_eq!(taken.device, 0);
        assert_eq!(taken.need_bytes, 52 * GIB);
        assert_eq!(taken.room_alone_bytes, 80 * GIB - GIB / 2);
        assert_eq!(
            taken.evidence(),
            "GPU 0 taken by PID 999999 40.0 GiB: others held 40.0 GiB at the death, 5.0 GiB at the attempt's start; \
             the job alone needs at least 52.0 GiB of the card's 79.5 GiB it can have"
        );
        // Without readings the message still names them, with no start.
        let alone = gpu_taken(&Evidence {
            tail: &tail,
            ..Evidence::default()
        })
        .unwrap();
        assert_eq!(alone.neighbours_bytes_at_start, None);
        assert_eq!(alone.neighbours[0].pid, 999_999);
        assert!(!alone.evidence().contains("start"), "{}", alone.evidence());
    }
}
