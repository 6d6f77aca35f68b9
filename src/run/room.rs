//! The run's part on a shared card: a device out-of-memory death that the neighbours caused is
//! named `gpu_taken` ([`crate::judge::taken`]), and the run then waits for room (`--gpu-wait`)
//! instead of cutting the batch; only when the wait runs out is the batch fitted into the room
//! left, and that cut is kept apart from the job's own size
//! ([`crate::remember::record::summary::RoomCut`]). Before attempt 1 it picks the cards (`--gpus
//! N`), and where the job's memory says what the job needs, waits for that room rather than
//! launching into a certain out-of-memory error, or starts from the room-limited size while the
//! card is still short. Before launching into room it waited for, it claims it
//! ([`crate::decide::room::claims`]), so two oomguards do not both take the same room.
//!
//! What room means, and the claims' files, are [`crate::decide::room`]'s; the fit is
//! [`crate::decide::policy`]'s.

use std::collections::HashSet;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::decide::fit;
use crate::decide::policy::Decision;
use crate::decide::room::claims::{Claim, Place};
use crate::decide::room::{self, Need, Steady};
use crate::judge::classify::Verdict;
use crate::judge::outcome::Cause;
use crate::judge::taken::{self, HostTaken, Taken};
use crate::observe::gpu::{DeviceShare, JobGpu};
use crate::observe::sampler::Sample;
use crate::observe::units::human_bytes;
use crate::output::console;
use crate::supervise::AttemptEnd;

use super::events::RunEvent;

/// What the run keeps about the card between attempts.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Where claims go, looked up the first time one is needed (`Some(None)`: nowhere).
    place: Option<Option<Place>>,
    /// `--gpus N`'s `CUDA_VISIBLE_DEVICES` (and `CUDA_DEVICE_ORDER`) for every attempt.
    pub(super) cards_env: Vec<(String, OsString)>,
    /// The job's cards where they are known before it touches them (`--gpus`,
    /// `CUDA_VISIBLE_DEVICES`), as NVML indices.
    cards: Option<Vec<u32>>,
    /// The last attempt's evidence that the neighbours took its room on the card, or in the
    /// machine's memory.
    pub(super) taken: Option<Taken>,
    host_taken: Option<HostTaken>,
}

/// What a wait for room waits for.
#[derive(Debug, Clone, Copy)]
enum Want<'n> {
    /// Room on the job's cards.
    Card(&'n Need),
    /// This much of the machine's memory available (the margin included).
    Host(u64),
}

impl Want<'_> {
    fn bytes(&self) -> u64 {
        match self {
            Want::Card(need) => need.bytes,
            Want::Host(bytes) => *bytes,
        }
    }
}

/// How a wait for room ended.
enum RoomWait {
    /// The room held for several readings and is claimed (the claims go with the attempt).
    Room {
        claims: Vec<Claim>,
        waited: Duration,
    },
    /// The wait ran out (or `--gpu-wait 0`): the least room there is on the job's cards.
    Short {
        room_bytes: u64,
        waited: Duration,
    },
    /// No readings (no GPU or a needed card not listed; no /proc/meminfo): nothing to wait on.
    NoReading,
    Stopped(Signal),
}

impl super::Run<'_> {
    /// The verdict, with a device out-of-memory error that the neighbours caused named
    /// `gpu_taken` (the evidence kept for the wait).
    pub(super) fn judge_taken(&mut self, end: &AttemptEnd, verdict: Verdict) -> Verdict {
        self.shared.taken = None;
        self.shared.host_taken = None;
        if verdict.cause == Cause::OomKilled {
            let peak = end
                .peaks
                .cgroup_bytes
                .or(end.peaks.pss_bytes)
                .or(end.peaks.rss_bytes);
            let Some(taken) = taken::host_taken(
                &end.kernel,
                end.host_at_start.as_ref(),
                end.host_at_end.as_ref(),
                peak,
            ) else {
                return verdict;
            };
            self.shared.host_taken = Some(taken);
            return Verdict {
                cause: Cause::MemoryTaken,
                evidence: format!("{}; {}", verdict.evidence, taken.evidence()),
            };
        }
        if verdict.cause != Cause::DeviceOom {
            return verdict;
        }
        let Some(taken) = taken::gpu_taken(&taken::Evidence {
            tail: &end.tail,
            at_start: end.gpu_at_start.as_ref(),
            at_death: end.gpu_at_end.as_ref(),
            measured_need_bytes: self.ladder.measured_gpu_need(),
            job_pids: Some(&end.pids),
        }) else {
            return verdict;
        };
        // The room came back, the card was clear at this attempt's start, and it died at the same
        // values again: what held the rest came with the job (its srun tasks, processes in a
        // container of its own), so it is the job's size, and waiting again would not help.
        let again = self.ladder.previous_cause() == Some(Cause::GpuTaken)
            && self.ladder.same_as_previous()
            && taken
                .neighbours_bytes_at_start
                .is_some_and(|bytes| bytes < taken::NEIGHBOUR_MIN_BYTES);
        if again {
            return Verdict {
                evidence: format!(
                    "{}; not gpu_taken again: GPU {} was clear when this attempt started at the values the last one died at, so what holds the rest came with the job",
                    verdict.evidence, taken.device
                ),
                ..verdict
            };
        }
        let evidence = format!("{}; {}", verdict.evidence, taken.evidence());
        self.shared.taken = Some(taken);
        Verdict {
            cause: Cause::GpuTaken,
            evidence,
        }
    }

    /// After a `gpu_taken` death: waits for the room the job needs and relaunches as decided
    /// (the same values); where the wait runs out, the decision becomes a cut into the room
    /// left, said to be for room. Other deaths pass `decision` through.
    pub(super) async fn room_for_relaunch(
        &mut self,
        end: &AttemptEnd,
        decision: Decision,
    ) -> Result<Decision, Signal> {
        if let (Decision::Relaunch(_), Some(taken)) = (&decision, self.shared.host_taken) {
            return self.host_room_for_relaunch(decision, taken).await;
        }
        let (Decision::Relaunch(next), Some(taken)) = (&decision, self.shared.taken.clone()) else {
            return Ok(decision);
        };
        let devices = match end.gpu_at_end.as_ref().map(job_cards) {
            Some(cards) if !cards.is_empty() => cards,
            _ => vec![taken.device],
        };
        let need = Need::with_margin(taken.need_bytes, self.settings.margin, devices);
        let attempt = self.ladder.next_attempt();
        let why = format!(
            "the job alone fits, so {} stays",
            self.ladder.knobs.at(&next.values).text_short()
        );
        let waited = self.wait_for_room(Want::Card(&need), &end.pids, attempt, &why);
        let (room_bytes, after) = match waited.await {
            RoomWait::Stopped(signal) => return Err(signal),
            // Nothing to wait on (the message alone told): the room the message showed.
            RoomWait::NoReading => (
                taken
                    .room_alone_bytes
                    .saturating_sub(taken.neighbours_bytes_at_death),
                "with no GPU readings to wait on".to_string(),
            ),
            RoomWait::Room { claims, waited } => {
                self.observers.hold_claims(claims, need.bytes);
                let mut next = next.clone();
                next.reason = Some(format!(
                    "{} has room again after {}: the batch stays",
                    need.cards(),
                    console::short_duration(waited)
                ));
                return Ok(Decision::Relaunch(next));
            }
            RoomWait::Short { room_bytes, waited } => (
                room_bytes,
                format!("after {}", console::short_duration(waited)),
            ),
        };
        let place = format!(
            "{} has {} free beside its other processes",
            need.cards(),
            human_bytes(room_bytes)
        );
        Ok(self.cut_for_room(
            fit::Memory::Gpu,
            room_bytes,
            taken.need_bytes,
            &format!("{after}, {place}"),
        ))
    }

    /// The cut into `room_bytes` of `memory` once waiting is over, its line saying that it is
    /// for room (`why`: how long was waited and what is left), not for the job's size.
    fn cut_for_room(
        &mut self,
        memory: fit::Memory,
        room_bytes: u64,
        need_bytes: u64,
        why: &str,
    ) -> Decision {
        match self
            .ladder
            .cut_for_room(self.settings, memory, room_bytes, need_bytes)
        {
            Decision::Relaunch(mut next) => {
                next.reason = Some(format!(
                    "cut for room, not for the job's size: {why}; {}",
                    next.reason.unwrap_or_else(|| "halving".to_string())
                ));
                Decision::Relaunch(next)
            }
            stop => stop,
        }
    }

    /// After a `memory_taken` death: waits for the machine's memory the job held, at most
    /// `--gpu-wait`, and relaunches at the same values; where it runs out, cuts for the room left.
    async fn host_room_for_relaunch(
        &mut self,
        decision: Decision,
        taken: HostTaken,
    ) -> Result<Decision, Signal> {
        let bytes = Need::with_margin(taken.need_bytes, self.settings.margin, Vec::new()).bytes;
        let attempt = self.ladder.next_attempt();
        let why = "the job fitted beside the others at its start";
        match self
            .wait_for_room(Want::Host(bytes), &HashSet::new(), attempt, why)
            .await
        {
            RoomWait::Stopped(signal) => Err(signal),
            RoomWait::NoReading | RoomWait::Room { .. } => Ok(decision),
            RoomWait::Short { room_bytes, waited } => {
                let why = format!(
                    "after {}, the machine has {} available",
                    console::short_duration(waited),
                    human_bytes(room_bytes)
                );
                Ok(self.cut_for_room(fit::Memory::Host, room_bytes, taken.need_bytes, &why))
            }
        }
    }

    /// Before attempt 1: the cards `--gpus` picks, and, where the job's memory says what the
    /// job needs at its starting values, the room for it: waited for, else the room-limited
    /// size of an earlier run's cut. Returns the user's stop signal if one came.
    pub(super) async fn room_before_first(&mut self) -> Result<(), Signal> {
        self.pick_cards();
        let Some((need_bytes, own)) = self.ladder.first_need() else {
            return Ok(());
        };
        let devices = match (&self.shared.cards, self.ladder.first_devices()) {
            (Some(cards), _) => cards.clone(),
            (None, remembered) if !remembered.is_empty() => remembered,
            _ => vec![0],
        };
        let need = Need::with_margin(need_bytes, self.settings.margin, devices);
        let why = format!(
            "the job's memory says it needs {} per card at {}",
            human_bytes(need_bytes),
            self.ladder.knobs.at(&self.ladder.values).text_short()
        );
        match self
            .wait_for_room(Want::Card(&need), &HashSet::new(), 1, &why)
            .await
        {
            RoomWait::Stopped(signal) => Err(signal),
            RoomWait::NoReading => Ok(()),
            RoomWait::Room { claims, .. } => {
                if own {
                    let line = format!("{} has room for the job's own size", need.cards());
                    self.observers.say(&line);
                }
                self.observers.hold_claims(claims, need.bytes);
                Ok(())
            }
            RoomWait::Short { room_bytes, .. } => {
                if let Some(line) = self.ladder.start_room_limited() {
                    let knobs = self.ladder.knobs.at(&self.ladder.values).json();
                    self.observers.started_from(knobs);
                    let line = format!(
                        "{} still has only {} free beside its other processes: {line}",
                        need.cards(),
                        human_bytes(room_bytes)
                    );
                    self.observers.say(&line);
                }
                Ok(())
            }
        }
    }

    /// `--gpus N`: picks the cards once, says which, and gives every attempt them.
    fn pick_cards(&mut self) {
        let listed = self.supervisor.gpu_devices();
        // The job's own value: its job file's `[env]`, else what oomguard was given.
        let visible = self
            .settings
            .job_context
            .env
            .iter()
            .rev()
            .find(|(name, _)| name == "CUDA_VISIBLE_DEVICES")
            .map(|(_, value)| value.to_string_lossy().into_owned())
            .or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok());
        let among = match (&listed, &visible) {
            (Some(devices), Some(value)) => room::visible_devices(value, devices),
            _ => None,
        };
        self.shared.cards = among.clone().filter(|cards| !cards.is_empty());
        let Some(n) = self.settings.gpus else {
            return;
        };
        let Some(devices) = listed.filter(|d| !d.is_empty()) else {
            self.observers.warn(
                &format!("--gpus {n}: no GPU is listed (no NVIDIA driver here?); the job keeps CUDA_VISIBLE_DEVICES as it is"),
            );
            return;
        };
        if visible.is_some() && among.is_none() {
            self.observers.warn(
                &format!(
                    "--gpus {n}: CUDA_VISIBLE_DEVICES={} names cards NVML does not list (MIG instances are not picked); picking among all cards",
                    visible.as_deref().unwrap_or_default()
                ),
            );
        }
        match room::pick_cards(&devices, n, among.as_deref().filter(|a| !a.is_empty())) {
            Ok(picked) => {
                let (value, by_index) = room::visible_value(&picked);
                let described: Vec<String> =
                    picked.iter().map(|d| room::describe_card(d)).collect();
                self.observers.say(&format!(
                    "--gpus {n}: giving the job {} (CUDA_VISIBLE_DEVICES={value})",
                    described.join(", ")
                ));
                self.shared.cards = Some(picked.iter().map(|d| d.index).collect());
                self.shared.cards_env = vec![("CUDA_VISIBLE_DEVICES".to_string(), value.into())];
                if by_index {
                    // Without it CUDA numbers the cards fastest first, not as NVML does.
                    self.shared
                        .cards_env
                        .push(("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".into()));
                }
            }
            Err(line) => self.observers.warn(&format!(
                "{line}; the job keeps CUDA_VISIBLE_DEVICES as it is"
            )),
        }
    }

    /// Waits until the room `want`s has held for [`room::STEADY_READINGS`] readings in a row,
    /// at most `--gpu-wait`, then (on a card) claims it; `own` are PIDs whose memory is the job's
    /// (its last attempt's, still being freed). Says once what it waits for, and tells the job's
    /// memory, the service manager and the metrics.
    async fn wait_for_room(
        &mut self,
        want: Want<'_>,
        own: &HashSet<u32>,
        attempt: u32,
        why: &str,
    ) -> RoomWait {
        let place = match want {
            Want::Card(_) => self.claims_place(),
            Want::Host(_) => None,
        };
        let started = Instant::now();
        let limit = self.settings.gpu_wait;
        let interval = self.settings.interval.max(Duration::from_millis(100));
        let mut steady = Steady::default();
        let mut told = false;
        let waited = |told: bool| {
            if told {
                started.elapsed()
            } else {
                Duration::ZERO
            }
        };
        let claimed_by = |place: &Option<Place>, device: &DeviceShare, earlier: Option<&Claim>| {
            place.as_ref().map_or(0, |p| {
                p.others(device.index, device.uuid.as_deref())
                    .iter()
                    .filter(|c| earlier.is_none_or(|mine| c.before(&mine.record)))
                    .fold(0u64, |sum, c| sum.saturating_add(c.bytes))
            })
        };
        let result = loop {
            // One reading of the machine's memory a tick: the room waited for (host) and the
            // record.
            let system = self.supervisor.system_now();
            let (room_bytes, gpu) = match want {
                Want::Card(need) => {
                    let Some(gpu) = self.supervisor.gpu_now(own) else {
                        break RoomWait::NoReading;
                    };
                    let card = |i: u32| gpu.devices.iter().find(|d| d.index == i);
                    let claimed = |i: u32| card(i).map_or(0, |d| claimed_by(&place, d, None));
                    match room::least_room(&gpu, need, claimed) {
                        Some(room_bytes) => (room_bytes, Some(gpu)),
                        None => break RoomWait::NoReading,
                    }
                }
                Want::Host(_) => match system {
                    Some(system) => (system.available_bytes, None),
                    None => break RoomWait::NoReading,
                },
            };
            // The wait is part of the record: the card's holders (or the machine's memory) on
            // samples.csv's rows of the attempt that waits, no job process among them.
            let sample = Sample {
                unix_time_s: unix_now_s(),
                attempt,
                gpu,
                system,
                ..Sample::default()
            };
            self.observers.tell(&RunEvent::Sample {
                sample: &sample,
                progress: None,
            });
            let gpu = sample.gpu;
            let fits = room_bytes >= want.bytes();
            // `--gpu-wait 0`: one look decides.
            if (limit.is_zero() && fits) || steady.observe(fits) {
                let claims = match (want, &gpu) {
                    (Want::Card(need), Some(gpu)) => claim(&place, need, gpu, claimed_by),
                    _ => Some(Vec::new()),
                };
                match claims {
                    Some(claims) => {
                        break RoomWait::Room {
                            claims,
                            waited: waited(told),
                        }
                    }
                    // An earlier claim took the room first: look again.
                    None => steady.reset(),
                }
            }
            if started.elapsed() >= limit {
                let room_bytes = match (want, &gpu) {
                    (Want::Card(need), Some(gpu)) => {
                        room::least_room(gpu, need, |_| 0).unwrap_or(room_bytes)
                    }
                    _ => room_bytes,
                };
                break RoomWait::Short {
                    room_bytes,
                    waited: waited(told),
                };
            }
            if !told && !fits {
                told = true;
                let (place_words, held) = match (want, &gpu) {
                    (Want::Card(need), Some(gpu)) => (
                        format!("free on {}", need.cards()),
                        format!("; held by {}", room::holders(gpu, need)),
                    ),
                    _ => ("of host memory available".to_string(), String::new()),
                };
                self.observers.say(&format!(
                    "waiting up to {} for {} {place_words} (room now {}{held}): {why}",
                    console::short_duration(limit),
                    human_bytes(want.bytes()),
                    human_bytes(room_bytes),
                ));
                self.observers.tell(&RunEvent::WaitingForRoom {
                    attempt,
                    values: &self.ladder.values,
                    need_bytes: want.bytes(),
                    status: &format!(
                        "waiting for {} {place_words} before attempt {attempt}",
                        human_bytes(want.bytes()),
                    ),
                });
            }
            if let Some(signal) = self.supervisor.pause(interval).await {
                break RoomWait::Stopped(signal);
            }
        };
        if told {
            self.observers.tell(&RunEvent::RoomWaitOver);
        }
        result
    }

    /// Where claims go, looked up once (the note about an untrusted shared place said once).
    fn claims_place(&mut self) -> Option<Place> {
        if self.shared.place.is_none() {
            // As root, never a directory of the state directory's choosing (a job file's writer
            // may have chosen it): without the shared place, root's runs take no claims.
            let own_dir = match nix::unistd::geteuid().is_root() {
                true => None,
                false => self
                    .settings
                    .job
                    .state_dir
                    .as_ref()
                    .map(|d| d.join("claims")),
            };
            let (place, note) = Place::find(own_dir);
            if let Some(note) = note {
                tracing::info!("{note}");
            }
            self.shared.place = Some(place);
        }
        self.shared.place.clone().flatten()
    }
}

/// Claims `need` on each of its cards, then looks at the claims again: where one made before
/// ours leaves too little room, ours is withdrawn (`None`). Without a place for claims the room
/// is taken unclaimed.
fn claim(
    place: &Option<Place>,
    need: &Need,
    gpu: &JobGpu,
    claimed_by: impl Fn(&Option<Place>, &DeviceShare, Option<&Claim>) -> u64,
) -> Option<Vec<Claim>> {
    let Some(p) = place else {
        return Some(Vec::new());
    };
    let mut claims = Vec::new();
    for &device in &need.devices {
        let uuid = gpu
            .devices
            .iter()
            .find(|d| d.index == device)
            .and_then(|d| d.uuid.as_deref());
        match p.claim(device, uuid, need.bytes) {
            Ok(claim) => claims.push(claim),
            Err(e) => {
                tracing::warn!("cannot claim GPU {device}'s room: {e}; launching unclaimed");
                return Some(claims);
            }
        }
    }
    let still_room = claims.iter().all(|mine| {
        gpu.devices
            .iter()
            .find(|d| d.index == mine.record.device)
            .is_some_and(|share| {
                let earlier = claimed_by(place, share, Some(mine));
                room::room_bytes(share, earlier) >= need.bytes
            })
    });
    // Dropping the claims removes their files.
    still_room.then_some(claims)
}

fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The cards the job was listed on (NVML indices).
fn job_cards(gpu: &JobGpu) -> Vec<u32> {
    gpu.job_bytes_by_device.iter().map(|(i, _)| *i).collect()
}
