//! Room on a shared card: what a job needs on each of its cards, whether the cards have it now
//! (free memory, plus what the job's own last attempt still holds, less other oomguards' live
//! [`claims`]), whether that room has held for several readings in a row (people on shared
//! cards come and go), and which cards `--gpus N` gives the job and how `CUDA_VISIBLE_DEVICES`
//! names them. Pure numbers and lists; the claims' files are [`claims`]'s.
//!
//! Waiting (the clock, the user's stop signal, what is said) is [`mod@crate::run`]'s; whether a
//! death was a neighbour's doing is [`crate::judge::taken`]'s.

pub mod claims;

use crate::observe::gpu::{DeviceShare, GpuDevice, JobGpu};
use crate::observe::units::human_bytes;

/// Room counts once it has held for this many readings in a row: a neighbour between two
/// allocations shows free memory for a moment, not for three ticks.
pub const STEADY_READINGS: u32 = 3;

/// The room a job waits for: `bytes` free on each of `devices` (NVML indices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// Per card, the margin included.
    pub bytes: u64,
    pub devices: Vec<u32>,
}

impl Need {
    /// The need of `bytes` per card with `margin` (0.10 for `--margin 10`) on top.
    pub fn with_margin(bytes: u64, margin: f64, devices: Vec<u32>) -> Need {
        Need {
            bytes: bytes.saturating_add((bytes as f64 * margin) as u64),
            devices,
        }
    }

    /// `GPU 0` / `GPUs 0, 1`.
    pub fn cards(&self) -> String {
        let list: Vec<String> = self.devices.iter().map(u32::to_string).collect();
        match list.len() {
            1 => format!("GPU {}", list[0]),
            _ => format!("GPUs {}", list.join(", ")),
        }
    }
}

/// The room the job has on one card: what is free, what its own last attempt still holds (the
/// driver frees it soon: it is the job's, not a neighbour's), less what other oomguards have
/// claimed and not yet taken.
pub fn room_bytes(share: &DeviceShare, claimed_by_others: u64) -> u64 {
    share
        .free_bytes()
        .saturating_add(share.job_bytes.unwrap_or(0))
        .saturating_sub(claimed_by_others)
}

/// The least room among the needed cards now (`None` where a needed card is not listed), given
/// what others claimed on each.
pub fn least_room(gpu: &JobGpu, need: &Need, claimed: impl Fn(u32) -> u64) -> Option<u64> {
    need.devices
        .iter()
        .map(|&i| {
            let share = gpu.devices.iter().find(|d| d.index == i)?;
            Some(room_bytes(share, claimed(i)))
        })
        .try_fold(u64::MAX, |least, room| room.map(|r| least.min(r)))
}

/// Who holds the needed cards besides the job: `PID 4242 (alice: python3 big.py) 40.0 GiB`,
/// the largest first, for the waiting line.
pub fn holders(gpu: &JobGpu, need: &Need) -> String {
    let mut all: Vec<_> = gpu
        .devices
        .iter()
        .filter(|d| need.devices.contains(&d.index))
        .flat_map(|d| d.neighbours.iter())
        .collect();
    all.sort_by_key(|n| std::cmp::Reverse(n.used_bytes.unwrap_or(0)));
    match all.len() {
        0 => "nobody listed".to_string(),
        1 => all[0].describe(),
        n => format!(
            "{} and {} other{}",
            all[0].describe(),
            n - 1,
            if n == 2 { "" } else { "s" }
        ),
    }
}

/// Whether claims held for an attempt are done: the job shows on each claimed card with at least
/// 90% of `need_bytes` (the claim carries the margin; the need is what must show), or
/// [`claims::CLAIM_HOLD`] has passed since the attempt started.
pub fn claims_done(
    held: &[claims::Claim],
    need_bytes: u64,
    gpu: Option<&JobGpu>,
    since: std::time::Instant,
) -> bool {
    if since.elapsed() >= claims::CLAIM_HOLD {
        return true;
    }
    let Some(gpu) = gpu else {
        return false;
    };
    held.iter().all(|c| {
        gpu.devices
            .iter()
            .find(|d| d.index == c.record.device)
            .and_then(|d| d.job_bytes)
            .is_some_and(|job| job as f64 >= need_bytes as f64 * 0.9)
    })
}

/// Counts readings with room in a row.
#[derive(Debug, Clone, Copy, Default)]
pub struct Steady {
    in_a_row: u32,
}

impl Steady {
    /// Takes one reading; `true` once the room has held for [`STEADY_READINGS`] in a row.
    pub fn observe(&mut self, room: bool) -> bool {
        self.in_a_row = if room { self.in_a_row + 1 } else { 0 };
        self.in_a_row >= STEADY_READINGS
    }

    /// Starts counting again (a claim lost to an earlier one).
    pub fn reset(&mut self) {
        self.in_a_row = 0;
    }
}

/// The cards named by a `CUDA_VISIBLE_DEVICES` value, as NVML indices: integers (NVML's order,
/// which is CUDA's under `CUDA_DEVICE_ORDER=PCI_BUS_ID`) and `GPU-…` UUIDs (or their unique
/// prefixes, as CUDA accepts). `None` where an entry names no listed card (a MIG instance, a
/// typo): the job's cards are then not known here.
pub fn visible_devices(value: &str, devices: &[GpuDevice]) -> Option<Vec<u32>> {
    let value = value.trim();
    if value.is_empty() {
        return Some(Vec::new());
    }
    value
        .split(',')
        .map(|entry| {
            let entry = entry.trim();
            if let Ok(i) = entry.parse::<u32>() {
                return devices.iter().find(|d| d.index == i).map(|d| d.index);
            }
            let mut matching = devices
                .iter()
                .filter(|d| d.uuid.as_deref().is_some_and(|u| u.starts_with(entry)));
            match (matching.next(), matching.next()) {
                (Some(d), None) => Some(d.index),
                _ => None,
            }
        })
        .collect()
}

/// `--gpus N`: the `n` cards with the most free memory among `among` (all where `None`), most
/// free first (ties: the lower index). An error line where there are not that many.
pub fn pick_cards<'d>(
    devices: &'d [GpuDevice],
    n: u32,
    among: Option<&[u32]>,
) -> Result<Vec<&'d GpuDevice>, String> {
    let mut candidates: Vec<&GpuDevice> = devices
        .iter()
        .filter(|d| among.is_none_or(|allowed| allowed.contains(&d.index)))
        .collect();
    if candidates.len() < n as usize {
        let within = if among.is_some() {
            " within CUDA_VISIBLE_DEVICES"
        } else {
            ""
        };
        return Err(format!(
            "--gpus {n}: only {} card{} listed{within}; ask for fewer",
            candidates.len(),
            if candidates.len() == 1 { "" } else { "s" }
        ));
    }
    candidates.sort_by_key(|d| {
        (
            std::cmp::Reverse(d.total_bytes.saturating_sub(d.used_bytes)),
            d.index,
        )
    });
    candidates.truncate(n as usize);
    Ok(candidates)
}

/// The `CUDA_VISIBLE_DEVICES` value naming `cards`: their UUIDs, which mean the same cards
/// whatever CUDA's numbering; their indices where a card has none (then
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID` must go with it, `true` in the second place).
pub fn visible_value(cards: &[&GpuDevice]) -> (String, bool) {
    match cards
        .iter()
        .map(|d| d.uuid.clone())
        .collect::<Option<Vec<String>>>()
    {
        Some(uuids) => (uuids.join(","), false),
        None => (
            cards
                .iter()
                .map(|d| d.index.to_string())
                .collect::<Vec<_>>()
                .join(","),
            true,
        ),
    }
}

/// `GPU 1 (74.2 GiB free of 79.6 GiB)`, for the line saying which cards were picked.
pub fn describe_card(d: &GpuDevice) -> String {
    format!(
        "GPU {} ({} free of {})",
        d.index,
        human_bytes(d.total_bytes.saturating_sub(d.used_bytes)),
        human_bytes(d.total_bytes)
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::observe::gpu::{attribute, GpuProcess, GpuSnapshot};

    const GIB: u64 = 1 << 30;

    fn dev(index: u32, used_gib: u64, uuid: Option<&str>) -> GpuDevice {
        GpuDevice {
            index,
            name: "H100".into(),
            uuid: uuid.map(String::from),
            used_bytes: used_gib * GIB,
            total_bytes: 80 * GIB,
        }
    }

    #[test]
    fn room_counts_the_jobs_own_leftovers_and_not_others_claims() {
        // Card 0: the job's last attempt (PID 100) still holds 30 GiB, a neighbour 20, the
        // driver 1: 29 free. Card 1: 70 used by a neighbour.
        let snap = GpuSnapshot {
            devices: vec![dev(0, 51, None), dev(1, 70, None)],
            processes: vec![
                GpuProcess {
                    pid: 100,
                    device: 0,
                    used_bytes: Some(30 * GIB),
                },
                GpuProcess {
                    pid: 7,
                    device: 0,
                    used_bytes: Some(20 * GIB),
                },
                GpuProcess {
                    pid: 8,
                    device: 1,
                    used_bytes: Some(70 * GIB),
                },
            ],
        };
        let gpu = attribute(&snap, &HashSet::from([100]));
        assert_eq!(room_bytes(&gpu.devices[0], 0), 59 * GIB);
        assert_eq!(room_bytes(&gpu.devices[0], 9 * GIB), 50 * GIB);
        let need = Need::with_margin(50 * GIB, 0.10, vec![0]);
        assert_eq!(need.bytes, 55 * GIB);
        assert_eq!(least_room(&gpu, &need, |_| 0), Some(59 * GIB));
        let both = Need::with_margin(GIB, 0.0, vec![0, 1]);
        assert_eq!(least_room(&gpu, &both, |_| 0), Some(10 * GIB));
        assert_eq!(both.cards(), "GPUs 0, 1");
        let missing = Need::with_margin(GIB, 0.0, vec![5]);
        assert_eq!(least_room(&gpu, &missing, |_| 0), None);
        assert_eq!(holders(&gpu, &need), "PID 7 20.0 GiB");
    }

    #[test]
    fn claims_are_done_once_the_job_shows_its_need_on_each_claimed_card() {
        let dir = tempfile::tempdir().unwrap();
        let place = claims::Place::at(dir.path());
        let held = vec![place.claim(0, None, 55 * GIB).unwrap()];
        let snap = |job_gib: u64| GpuSnapshot {
            devices: vec![dev(0, job_gib, None)],
            processes: vec![GpuProcess {
                pid: 100,
                device: 0,
                used_bytes: Some(job_gib * GIB),
            }],
        };
        let now = std::time::Instant::now();
        let at = |job_gib| attribute(&snap(job_gib), &HashSet::from([100]));
        assert!(!claims_done(&held, 50 * GIB, None, now), "no reading");
        assert!(
            !claims_done(&held, 50 * GIB, Some(&at(20)), now),
            "still climbing"
        );
        assert!(
            claims_done(&held, 50 * GIB, Some(&at(45)), now),
            "90% of the need shows"
        );
        let long_ago = now - claims::CLAIM_HOLD;
        assert!(
            claims_done(&held, 50 * GIB, Some(&at(1)), long_ago),
            "held long enough"
        );
    }

    #[test]
    fn room_must_hold_for_several_readings_in_a_row() {
        let mut steady = Steady::default();
        let readings = [true, true, false, true, true, true];
        let got: Vec<bool> = readings.iter().map(|&r| steady.observe(r)).collect();
        assert_eq!(got, [false, false, false, false, false, true]);
        steady.reset();
        assert!(!steady.observe(true));
    }

    #[test]
    fn cuda_visible_devices_by_index_and_uuid() {
        let devices = [
            dev(0, 0, Some("GPU-aaaa-1111")),
            dev(1, 0, Some("GPU-bbbb-2222")),
        ];
        // (value, cards)
        let table: [(&str, Option<Vec<u32>>); 7] = [
            ("1", Some(vec![1])),
            ("1,0", Some(vec![1, 0])),
            ("GPU-bbbb-2222", Some(vec![1])),
            ("GPU-bbbb", Some(vec![1])),
            ("GPU-", None),
            ("MIG-1234", None),
            ("", Some(vec![])),
        ];
        for (value, want) in table {
            assert_eq!(visible_devices(value, &devices), want, "{value:?}");
        }
    }

    #[test]
    fn gpus_n_picks_the_most_free_and_names_them_by_uuid() {
        let devices = [
            dev(0, 60, Some("GPU-a")),
            dev(1, 10, Some("GPU-b")),
            dev(2, 10, Some("GPU-c")),
            dev(3, 0, None),
        ];
        let picked: Vec<u32> = pick_cards(&devices, 2, None)
            .unwrap()
            .iter()
            .map(|d| d.index)
            .collect();
        assert_eq!(picked, [3, 1]);
        let among: Vec<u32> = pick_cards(&devices, 2, Some(&[0, 2]))
            .unwrap()
            .iter()
            .map(|d| d.index)
            .collect();
        assert_eq!(among, [2, 0]);
        let err = pick_cards(&devices, 3, Some(&[0, 2])).unwrap_err();
        assert!(
            err.contains("only 2 cards") && err.contains("CUDA_VISIBLE_DEVICES"),
            "{err}"
        );
        let two = pick_cards(&devices, 2, Some(&[1, 2])).unwrap();
        assert_eq!(visible_value(&two), ("GPU-b,GPU-c".to_string(), false));
        let with_3 = pick_cards(&devices, 1, None).unwrap();
        assert_eq!(visible_value(&with_3), ("3".to_string(), true));
        assert_eq!(
            describe_card(&devices[1]),
            "GPU 1 (70.0 GiB free of 80.0 GiB)"
        );
    }
}
