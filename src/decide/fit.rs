//! The fit model: a job's memory is `fixed + per_sample × batch`. From what this run's attempts
//! showed — a failure's lower bound on what it needed (an out-of-memory message's in-use plus
//! tried-to-allocate, or the cgroup's peak at a kill), a success's measured peak — and the
//! limit that applied (the card's room from the message, `--max-gpu`, the cgroup limit,
//! `--max-rss`), it picks the largest batch expected to fit with a margin to spare, and says
//! in one line what the estimate rests on.
//!
//! The fixed part of the line (weights, optimizer state, CUDA context) shows in the memory
//! sampled before the first training step: [`Ramp`] follows an attempt's samples in constant
//! memory and finds the lowest plateau before the peak, an estimate that can be too low but
//! not too high. With it, one failure whose bound carries scale gives the line through
//! `(0, fixed)`, and a bare bound (a kill at the limit) at least caps the next batch.
//!
//! A failure's number is a lower bound ("at least"): it moves the batch below half of the
//! last one only where the need it implies at half, with the fixed part as small as the
//! evidence allows, is already over the limit ([`need_at_least`]); otherwise the caller
//! halves.
//!
//! Where the probe saw attempts at two batches complete their steps, [`exact`] draws the line
//! from those measured points instead ([`StepsPeak`], GPU memory), under the same guard below
//! half; where it cannot, [`estimate`] does as above.
//!
//! Pure numbers in, a batch out: [`observe`] turns one attempt's numbers into [`Evidence`],
//! [`exact`] or [`estimate`] fits the line. Which knob moves, and what happens when there is no
//! estimate (it halves), is [`crate::decide::policy`]'s decision.

use crate::judge::oom_numbers;
use crate::judge::outcome::Cause;
use crate::observe::units::human_bytes;

/// Which memory the evidence is about: points of different memories do not share a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    Gpu,
    Host,
}

/// The name of the limit of oomguard's own attempt cgroup (`--memory-max`) in the fit's lines.
pub const CGROUP_LIMIT: &str = "cgroup limit";

/// The name of the room other processes left on a shared card, in the fit's lines.
pub const ROOM: &str = "room left on the GPU";

/// The name of the room other processes left in the machine's memory, in the fit's lines.
pub const HOST_ROOM: &str = "room left in host memory";

/// The name of the soft host bound in the fit's lines (and what tells it from a cgroup's).
pub const MAX_RSS: &str = "--max-rss";

/// What one attempt showed about its memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub memory: Memory,
    /// A failure: `bytes` is a lower bound on what the attempt needed. Otherwise it is the
    /// measured peak of an attempt that fitted.
    pub failed: bool,
    pub bytes: u64,
    /// The limit that applied, and its name for the user (`GPU`, `cgroup limit`, `--max-rss`).
    pub limit: Option<(u64, &'static str)>,
    /// Why the death was the allocator's fragmentation rather than the batch, where it was.
    pub fragmented: Option<Fragmentation>,
    /// The memory held on the lowest plateau before the attempt's peak (the fixed part seen
    /// before the first step, an estimate that may be too low, never too high), in this
    /// evidence's memory; `None` where no plateau showed.
    pub fixed_bytes: Option<u64>,
}

/// What names a CUDA out-of-memory death as the allocator's fragmentation, not the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fragmentation {
    /// PyTorch held this much reserved but unallocated, at least the allocation that failed:
    /// the memory was there, in pieces too small.
    Unallocated {
        reserved_bytes: u64,
        tried_bytes: u64,
    },
    /// The allocator's retries (freeing its cache to try again) grew in each of this many
    /// reports of the probe in a row before the death, to `retries` in all.
    RetriesClimbing { reports: u32, retries: u64 },
}

impl Fragmentation {
    /// What was seen, for the relaunch line: `PyTorch held 3.0 GiB reserved but unallocated,
    /// at least the 512.0 MiB it tried to allocate`.
    pub fn describe(&self) -> String {
        match *self {
            Fragmentation::Unallocated {
                reserved_bytes,
                tried_bytes,
            } => format!(
                "PyTorch held {} reserved but unallocated, at least the {} it tried to allocate",
                human_bytes(reserved_bytes),
                human_bytes(tried_bytes)
            ),
            Fragmentation::RetriesClimbing { reports, retries } => format!(
                "PyTorch's allocator retried allocations more at each of its last {reports} steps seen ({retries} retries in all)"
            ),
        }
    }
}

/// One attempt's numbers, as the supervisor gathered them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    pub cause: Option<Cause>,
    pub tail: &'a str,
    pub peak_gpu_bytes: Option<u64>,
    pub peak_cgroup_bytes: Option<u64>,
    /// The tree's peak PSS (or RSS): what `--max-rss` reads without a cgroup.
    pub peak_host_bytes: Option<u64>,
    /// `--memory-max`, else the limit that killed further up (a Slurm job's, a unit's).
    pub cgroup_limit_bytes: Option<u64>,
    /// That limit's name for people where it is not oomguard's own attempt cgroup's
    /// (`Slurm job 14's memory limit`); `None`: `cgroup limit`.
    pub cgroup_limit_name: Option<&'static str>,
    pub max_gpu_bytes: Option<u64>,
    /// The soft bound that stopped the attempt: its flag, the value seen, the bound.
    pub memory_stop: Option<(&'a str, u64, u64)>,
    /// The allocator's figures at a CUDA out-of-memory error, from the probe (PyTorch's
    /// observer, before the allocator unwinds): used where the message gives no sizes, and
    /// for fragmentation before the message's own reading.
    pub probe_oom: Option<crate::probe::OomFigures>,
    /// The probe saw the allocator's retries grow in this many reports in a row, to this
    /// many: fragmentation where nothing else names it.
    pub probe_retries_rising: Option<(u32, u64)>,
}

/// What the attempt's numbers say, or `None` when they say nothing about its memory need (a
/// kill with no cgroup, a failure that was not about memory, a message without sizes).
pub fn observe(o: &Observed) -> Option<Evidence> {
    let failure = |memory, bytes, limit| {
        Some(Evidence {
            memory,
            failed: true,
            bytes,
            limit: Some(limit),
            fragmented: None,
            fixed_bytes: None,
        })
    };
    match (o.cause?, o.memory_stop) {
        (Cause::Ok, _) => {
            let (memory, bytes) = match (o.peak_gpu_bytes, o.peak_cgroup_bytes) {
                (Some(gpu), _) => (Memory::Gpu, gpu),
                (None, Some(host)) => (Memory::Host, host),
                (None, None) => (Memory::Host, o.peak_host_bytes?),
            };
            Some(Evidence {
                memory,
                failed: false,
                bytes,
                limit: None,
                fragmented: None,
                fixed_bytes: None,
            })
        }
        (_, Some(("--max-gpu", value, limit))) => failure(
            Memory::Gpu,
            value.max(o.peak_gpu_bytes.unwrap_or(0)),
            (limit, "--max-gpu"),
        ),
        (_, Some(("--max-rss", value, limit))) => failure(Memory::Host, value, (limit, MAX_RSS)),
        // A job stopped for hanging after an out-of-memory error (one rank died, the others
        // wait) shows the same message, sizes and all.
        // A death the neighbours caused still bounds what the job needs from below.
        (Cause::DeviceOom | Cause::GpuTaken | Cause::HungAfterOom, _) => {
            let Some(numbers) = oom_numbers::parse(o.tail) else {
                return from_probe(o);
            };
            let need = numbers.need_bytes()?;
            // The card as the job would have it alone: another process's memory on it is room
            // taken (`gpu_taken`, a wait and a cut kept apart), not the job's size.
            let card = numbers.alone_limit_bytes().map(|l| (l, "GPU"));
            let limit = match (card, o.max_gpu_bytes) {
                (Some(card), Some(max)) if max < card.0 => (max, "--max-gpu"),
                (Some(card), _) => card,
                (None, Some(max)) => (max, "--max-gpu"),
                (None, None) => return None,
            };
            let mut evidence = failure(Memory::Gpu, need, limit)?;
            let from_message = numbers.fragmented().then(|| Fragmentation::Unallocated {
                reserved_bytes: numbers.reserved_unallocated_bytes.unwrap_or(0),
                tried_bytes: numbers.tried_bytes.unwrap_or(0),
            });
            let message_shows =
                numbers.reserved_unallocated_bytes.is_some() && numbers.tried_bytes.is_some();
            evidence.fragmented = probe_fragmentation(o)
                .or(from_message)
                .or_else(|| retries_rising(o).filter(|_| !message_shows));
            Some(evidence)
        }
        (Cause::OomKilled, _) => {
            let limit = o.cgroup_limit_bytes?;
            // The kill came at the limit: the peak is at least the limit, whatever was sampled
            // (without an attempt cgroup, the tree's own peak is what was sampled).
            let peak = o.peak_cgroup_bytes.or(o.peak_host_bytes)?.max(limit);
            let name = o.cgroup_limit_name.unwrap_or(CGROUP_LIMIT);
            failure(Memory::Host, peak, (limit, name))
        }
        _ => None,
    }
}

/// A CUDA out-of-memory death whose message gave no sizes, read from the probe's figures:
/// what the job held plus what it asked for is a lower bound on its need, the card's total
/// (or `--max-gpu`, where lower) the limit.
fn from_probe(o: &Observed) -> Option<Evidence> {
    let oom = o.probe_oom?;
    let need = oom.allocated_bytes?.checked_add(oom.requested_bytes?)?;
    let card = oom.device_total_bytes.map(|total| (total, "GPU"));
    let limit = match (card, o.max_gpu_bytes) {
        (Some(card), Some(max)) if max < card.0 => (max, "--max-gpu"),
        (Some(card), _) => card,
        (None, Some(max)) => (max, "--max-gpu"),
        (None, None) => return None,
    };
    Some(Evidence {
        memory: Memory::Gpu,
        failed: true,
        bytes: need,
        limit: Some(limit),
        fragmented: probe_fragmentation(o).or_else(|| retries_rising(o)),
        fixed_bytes: None,
    })
}

/// Fragmentation as the probe's out-of-memory observer saw it (before the allocator unwound):
/// it stands before the message's reading.
fn probe_fragmentation(o: &Observed) -> Option<Fragmentation> {
    let (reserved_bytes, tried_bytes) = o.probe_oom?.fragmented()?;
    Some(Fragmentation::Unallocated {
        reserved_bytes,
        tried_bytes,
    })
}

/// Fragmentation as the retries climbing over the steps before the death show it: the weakest
/// sign (retries also grow on any card that is nearly full), read only where neither the
/// observer's figures nor the message's say how much was reserved but unallocated. Where they
/// do and it was less than the request, the death was the batch's.
fn retries_rising(o: &Observed) -> Option<Fragmentation> {
    let observer_shows = o
        .probe_oom
        .is_some_and(|f| f.reserved_bytes.is_some() && f.allocated_bytes.is_some());
    if observer_shows {
        return None;
    }
    let (reports, retries) = o.probe_retries_rising?;
    Some(Fragmentation::RetriesClimbing { reports, retries })
}

/// Gives `evidence` the fixed part that `series` (the attempt's samples of the same memory, in
/// the units of the limit that applied) showed before its first step. `peak_bytes` is the
/// attempt's known peak of that memory, if any; the evidence's own bytes count as one too. A
/// plateau at or above what the attempt needed is no part of it.
pub fn attach_fixed(evidence: &mut Evidence, series: &Ramp, peak_bytes: Option<u64>) {
    let peak_bytes = peak_bytes.max(Some(evidence.bytes));
    evidence.fixed_bytes = series
        .fixed_bytes(peak_bytes)
        .filter(|&fixed| fixed < evidence.bytes);
}

/// One attempt on the line: its batch and bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub batch: u64,
    pub bytes: u64,
    /// A failure: `bytes` is a lower bound.
    pub failed: bool,
}

/// What the estimate needs.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// This run's attempts at this knob, in the same memory.
    pub points: &'a [Point],
    pub limit_bytes: u64,
    /// How the user knows that limit: `GPU`, `cgroup limit`, `--max-rss`.
    pub limit_name: &'a str,
    /// The share of the limit kept free: 0.10 for `--margin 10`.
    pub margin: f64,
    /// The knob's floor.
    pub min: u64,
    /// batch × partner in the command, where the knob has a partner: divisors of it keep the
    /// effective batch exact.
    pub effective: Option<u64>,
    /// The fixed part seen before the first step ([`Ramp`]), in this memory.
    pub fixed_bytes: Option<u64>,
    /// Where halving the last batch goes ([`halve`]): a batch below it needs evidence that it
    /// cannot fit.
    pub halved: u64,
}

/// The batch to try next and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub batch: u64,
    pub reason: String,
}

/// A failure's lower bound within this share above the limit says only that the batch did not
/// fit, not by how much (a cgroup kill's peak is the limit; an allocation that barely crossed
/// the card): it cannot scale the batch. Measured on the convergence benchmark: 10% keeps fit
/// from creeping down in 10% steps behind such bounds.
pub const BARE_BOUND: f64 = 0.10;

/// How far below the estimate a divisor of the effective batch may be and still be preferred
/// to the estimate itself (which then needs an effective batch above the original). Half: the
/// user chose the effective batch for their training, and a slower step is a smaller change
/// than a different batch. On the H200 (tests/gpu/check.sh, effective batch 32), 10% took 14
/// with accumulation 3, an effective batch of 42; half takes 8 × 4 = 32, which also fits.
pub const DIVISOR_SLACK: f64 = 0.5;

/// The largest batch expected to fit under `limit × (1 − margin)`, never above the smallest
/// failed batch − 1, never below the floor; or why the evidence cannot tell (the caller
/// halves and says so).
pub fn estimate(req: &Request) -> Result<Estimate, String> {
    let limit = req.limit_bytes as f64;
    let mut failed: Vec<Point> = req.points.iter().filter(|p| p.failed).copied().collect();
    // At one batch the largest lower bound holds (a fragmented death shows less than a later
    // one at the same batch).
    failed.sort_by_key(|p| (p.batch, std::cmp::Reverse(p.bytes)));
    failed.dedup_by_key(|p| p.batch);
    let lowest = *failed.first().ok_or("no failed attempt to fit under")?;
    let cap = lowest.batch.saturating_sub(1);
    if cap < req.min {
        return Err(format!("{} is the floor", req.min));
    }
    let usable = |p: &Point| p.bytes as f64 >= limit * (1.0 + BARE_BOUND);
    let fitted = req
        .points
        .iter()
        .filter(|p| !p.failed && p.batch < lowest.batch)
        .max_by_key(|p| p.batch);
    let gib = |b: f64| human_bytes(b.max(0.0) as u64);
    let (fixed, per_sample, basis) = if let Some(s) = fitted.filter(|s| lowest.bytes > s.bytes) {
        let per = (lowest.bytes - s.bytes) as f64 / (lowest.batch - s.batch) as f64;
        let fixed = (s.bytes as f64 - per * s.batch as f64).max(0.0);
        let basis = format!(
            "{} at {} fitted, need at {} ≥ {}",
            gib(s.bytes as f64),
            s.batch,
            lowest.batch,
            gib(lowest.bytes as f64)
        );
        (fixed, per, basis)
    } else if let Some(seen) = req.fixed_bytes.filter(|&f| (f as f64) < limit) {
        let seen_clause = format!("fixed {} {SEEN}", gib(seen as f64));
        if usable(&lowest) && lowest.bytes > seen {
            // The line through (0, fixed) and the failure's bound: the bound is a lower one, so
            // per sample is too; the fixed part no longer inflates it.
            let per = (lowest.bytes - seen) as f64 / lowest.batch as f64;
            let basis = format!(
                "{seen_clause}, need at {} ≈ {}",
                lowest.batch,
                gib(lowest.bytes as f64)
            );
            (seen as f64, per, basis)
        } else {
            return bare_with_fixed(req, lowest, seen, &seen_clause, cap);
        }
    } else {
        let line = failed.get(1).and_then(|next| {
            // Both bounds must carry scale: a line through a bare one overshoots.
            if !usable(&lowest) || !usable(next) {
                return None;
            }
            let per =
                (next.bytes as f64 - lowest.bytes as f64) / (next.batch - lowest.batch) as f64;
            let fixed = lowest.bytes as f64 - per * lowest.batch as f64;
            (per > 0.0 && fixed >= 0.0).then(|| {
                let basis = format!(
                    "need at {} ≈ {}, at {} ≈ {}",
                    lowest.batch,
                    gib(lowest.bytes as f64),
                    next.batch,
                    gib(next.bytes as f64)
                );
                (fixed, per, basis)
            })
        });
        match line {
            Some(line) => line,
            None => {
                // One point: as if all of it grew with the batch (the largest guess it allows).
                // Only the smallest failure's: a larger one's would guess above it.
                let Some(p) = Some(lowest).filter(usable) else {
                    return Err(format!(
                        "{} {}, need at {} ≥ {}: that shows {} does not fit, not by how much",
                        req.limit_name,
                        gib(limit),
                        lowest.batch,
                        gib(lowest.bytes as f64),
                        lowest.batch
                    ));
                };
                let per = p.bytes as f64 / p.batch as f64;
                (
                    0.0,
                    per,
                    format!("need at {} ≈ {}", p.batch, gib(p.bytes as f64)),
                )
            }
        }
    };
    let budget = limit * (1.0 - req.margin);
    let raw = ((budget - fixed) / per_sample).floor();
    let candidate = if raw.is_finite() && raw >= 1.0 {
        (raw as u64).clamp(req.min, cap)
    } else {
        req.min
    };
    let batch = prefer_divisor(candidate, req.effective, req.min);
    let fixed_part = if fixed > 0.0 && !basis.contains(SEEN) {
        format!(", fixed ≈ {}", gib(fixed))
    } else {
        String::new()
    };
    let head = format!(
        "{} {}, {basis}, per sample ≈ {}{fixed_part}",
        req.limit_name,
        gib(limit),
        gib(per_sample)
    );
    let below_half = below_half(req, batch, &head)?;
    Ok(Estimate {
        batch,
        reason: format!("{head}{below_half}: trying {batch}"),
    })
}

/// An attempt's memory at its completed steps, from the probe: what steps at its batch took
/// (a point on the line), where a failure's number is only a lower bound. GPU memory only: a
/// card's limit counts one rank's allocator, which the probe reads, while a host limit counts
/// every rank and DataLoader worker, of which the probe sees one process's peak (a slope from
/// it would be a fraction of the tree's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepsPeak {
    /// The CUDA allocator's reserved bytes at their peak over the completed steps.
    pub gpu_bytes: Option<u64>,
}

impl StepsPeak {
    /// The peak in `memory`; none for host memory.
    pub fn bytes(&self, memory: Memory) -> Option<u64> {
        match memory {
            Memory::Gpu => self.gpu_bytes,
            Memory::Host => None,
        }
    }
}

/// The exact line, where attempts at two batches completed steps (the probe's peaks, `steps`
/// as `(batch, bytes)`): per sample and fixed part from those two points, no bound involved.
/// The steps' peaks are the allocator's (or one process's), not what the limit counts (the
/// CUDA context, other processes, page cache): what the limit counts beyond the line is the
/// most a point with scale shows over it (a success's peak, a failure's bound well over the
/// limit), taken as constant, which for a batch below the failed one is the larger reading.
/// A failure barely over the limit must be one the line explains (its batch over the limit
/// on the line): one the line says fits died of something beyond the steps (a long sample,
/// an evaluation) by an amount nothing shows. The batch is the largest the line plus that puts
/// under the limit less the margin, never at or above a failed batch, and below half of the
/// last batch only where half cannot fit by the least the evidence allows. `None` where fewer
/// than two batches completed a step, memory did not grow with the batch, a failure is not
/// explained, or the line would go below half unshown (the caller estimates as without the
/// probe).
pub fn exact(req: &Request, steps: &[(u64, u64)]) -> Option<Estimate> {
    // At each batch, its largest peak (steps at one batch differ by their inputs).
    let mut at: Vec<(u64, u64)> = steps.to_vec();
    at.sort_by_key(|&(batch, bytes)| (batch, std::cmp::Reverse(bytes)));
    at.dedup_by_key(|(batch, _)| *batch);
    // The two furthest apart: the slope's error from any one step's noise is smallest.
    let (&(b0, m0), &(b1, m1)) = (at.first()?, at.last()?);
    if b1 == b0 || m1 <= m0 {
        return None;
    }
    let per_sample = (m1 - m0) as f64 / (b1 - b0) as f64;
    let fixed = m0 as f64 - per_sample * b0 as f64;
    let line = |batch: u64| fixed + per_sample * batch as f64;
    let limit = req.limit_bytes as f64;
    let bare = |p: &Point| p.failed && (p.bytes as f64) < limit * (1.0 + BARE_BOUND);
    let beyond = req
        .points
        .iter()
        .filter(|p| !bare(p))
        .map(|p| p.bytes as f64 - line(p.batch))
        .fold(0.0_f64, f64::max);
    let explained = |p: &Point| line(p.batch) + beyond >= limit;
    if req.points.iter().any(|p| bare(p) && !explained(p)) {
        return None;
    }
    let cap = req
        .points
        .iter()
        .filter(|p| p.failed)
        .map(|p| p.batch.saturating_sub(1))
        .min()
        .unwrap_or(u64::MAX);
    if cap < req.min {
        return None; // the floor failed: `estimate` says so
    }
    let budget = limit * (1.0 - req.margin);
    let raw = ((budget - beyond - fixed) / per_sample).floor();
    let candidate = if raw.is_finite() && raw >= 1.0 {
        (raw as u64).min(cap).max(req.min)
    } else {
        req.min
    };
    let batch = prefer_divisor(candidate, req.effective, req.min);
    // Below half only where half cannot fit even by the least the evidence allows (the line
    // without what lies beyond it, the bounds scaled down): the constant beyond the line is
    // one reading of a lower bound, and an outlier's (an evaluation's one large allocation)
    // would otherwise send the batch to the floor. Else the rules without the probe decide.
    if batch < req.halved {
        let least = need_at_least(req.points, fixed.max(0.0) as u64, req.halved)
            .max(line(req.halved).max(0.0) as u64);
        if least <= req.limit_bytes {
            return None;
        }
    }
    let gib = |b: f64| human_bytes(b.max(0.0) as u64);
    let beyond = if beyond >= 1.0 {
        format!(", {} beyond them", gib(beyond))
    } else {
        String::new()
    };
    Some(Estimate {
        batch,
        reason: format!(
            "{} {}, completed steps took {} at {b0} and {} at {b1}, per sample {}, fixed {}{beyond}: trying {batch}",
            req.limit_name,
            gib(limit),
            gib(m0 as f64),
            gib(m1 as f64),
            gib(per_sample),
            gib(fixed),
        ),
    })
}

/// Lets a batch below [`Request::halved`] through only where the evidence shows that the
/// halved batch cannot fit either: what it needs at least ([`need_at_least`], with the fixed
/// part as small as the evidence allows) is above the limit. Returns the clause saying so for
/// the relaunch line (empty at or above half), or why the caller halves instead.
fn below_half(req: &Request, batch: u64, head: &str) -> Result<String, String> {
    if batch >= req.halved {
        return Ok(String::new());
    }
    let fixed = req
        .fixed_bytes
        .filter(|&f| f < req.limit_bytes)
        .unwrap_or(0);
    let need = need_at_least(req.points, fixed, req.halved);
    let at_half = format!("at {} it needs at least {}", req.halved, human_bytes(need));
    if need > req.limit_bytes {
        Ok(format!(", so {at_half}, over the {}", req.limit_name))
    } else {
        Err(format!(
            "{head}: {at_half}, which is within the {}, so the evidence does not show that half cannot fit",
            req.limit_name
        ))
    }
}

/// The least `batch` can need, from the points alone: memory grows with the batch and is
/// `fixed + per_sample × batch` with the fixed part at least `fixed_bytes`. A failure's bound
/// at a larger batch scales down through `(0, fixed)`; one at a smaller batch holds as it is;
/// a success below and a failure above draw a line whose slope is at least the true one.
/// Bounds are not ordered by batch (a death later in a step shows more at a smaller batch),
/// so each counts on its own and the largest holds.
pub fn need_at_least(points: &[Point], fixed_bytes: u64, batch: u64) -> u64 {
    let fixed = fixed_bytes as f64;
    let at = batch as f64;
    let mut need = fixed;
    for p in points {
        let bytes = p.bytes as f64;
        if p.batch <= batch {
            // Fitted or not, at least what a smaller batch showed.
            need = need.max(bytes);
            continue;
        }
        if !p.failed {
            continue;
        }
        need = need.max(fixed + (bytes - fixed).max(0.0) * at / p.batch as f64);
        for s in points
            .iter()
            .filter(|s| !s.failed && s.batch < batch && s.bytes < p.bytes)
        {
            let slope = (bytes - s.bytes as f64) / (p.batch - s.batch) as f64;
            need = need.max(s.bytes as f64 + slope * (batch - s.batch) as f64);
        }
    }
    need as u64
}

/// Where halving takes a batch of `now`: the largest divisor of the effective batch from half
/// down to a quarter (so batch × accumulation stays exact: 100 → 50 → 25 → 10, not 12 with an
/// effective batch of 108), else half; never below `min`. Below `now` exactly where plain
/// halving is, whatever the effective batch: the policy asks it, without one, whether a halving
/// knob can move at all.
pub fn halve(now: u64, effective: Option<u64>, min: u64) -> u64 {
    let half = (now / 2).max(min);
    let Some(effective) = effective.filter(|e| *e > 0) else {
        return half;
    };
    let quarter = now.div_ceil(4).max(min).max(1);
    if quarter > half {
        return half;
    }
    // A divisor d in [quarter, half] is effective / k for k in [effective / half, effective /
    // quarter]: walk whichever range is shorter, so a batch near u64::MAX costs a few steps.
    const STEPS: u64 = 1 << 16;
    let first_k = effective.div_ceil(half);
    let last_k = effective / quarter;
    let found = if half - quarter <= last_k.saturating_sub(first_k) {
        (quarter..=half)
            .rev()
            .take(STEPS as usize)
            .find(|d| effective % d == 0)
    } else {
        (first_k..=last_k)
            .take(STEPS as usize)
            .find(|k| effective % k == 0)
            .map(|k| effective / k)
    };
    found.unwrap_or(half)
}

/// A bare bound with the fixed part known: the attempt died, so `fixed + per_sample × batch >
/// limit`, i.e. per sample > (limit − fixed) / batch. That caps the next batch at
/// `batch × (budget − fixed) / (limit − fixed)` but says nothing of how far below: where the cap
/// is under half the batch (a fixed part near the budget) it is the batch to try; above half it
/// says less than halving does, and the caller halves.
fn bare_with_fixed(
    req: &Request,
    lowest: Point,
    fixed_bytes: u64,
    seen_clause: &str,
    cap: u64,
) -> Result<Estimate, String> {
    let limit = req.limit_bytes as f64;
    let fixed = fixed_bytes as f64;
    let budget = limit * (1.0 - req.margin);
    let at_most = ((budget - fixed) * lowest.batch as f64 / (limit - fixed)).floor();
    let head = format!(
        "{} {}, {seen_clause}, need at {} ≥ {}",
        req.limit_name,
        human_bytes(req.limit_bytes),
        lowest.batch,
        human_bytes(lowest.bytes)
    );
    if at_most >= (lowest.batch / 2) as f64 {
        return Err(format!(
            "{head}: that shows {} does not fit, not by how much; the fixed part caps it only at {}",
            lowest.batch, at_most as u64
        ));
    }
    let candidate = if at_most >= 1.0 {
        (at_most as u64).clamp(req.min, cap)
    } else {
        req.min
    };
    let batch = prefer_divisor(candidate, req.effective, req.min);
    let head = format!("{head}, so at most {} fits", at_most.max(0.0) as u64);
    let below_half = below_half(req, batch, &head)?;
    Ok(Estimate {
        batch,
        reason: format!("{head}{below_half}: trying {batch}"),
    })
}

/// How the explanation names a fixed part taken from a [`Ramp`].
const SEEN: &str = "seen before the first step";

/// Samples in a row within the band that make a plateau...
pub const PLATEAU_SAMPLES: u32 = 3;
/// ...or, with at least two samples, this long within it (a slow `--interval`).
pub const PLATEAU_S: f64 = 1.0;
/// A plateau's samples lie within this share of its highest one (allocator noise, a logger's
/// buffers), or within [`PLATEAU_BAND_MIN_BYTES`] for small jobs.
pub const PLATEAU_BAND: f64 = 0.02;
pub const PLATEAU_BAND_MIN_BYTES: u64 = 4 << 20;
/// A plateau at or above this share of the attempt's peak is where the job trained (or died
/// training), not what it held before its first step.
pub const PLATEAU_PEAK_SHARE: f64 = 0.9;

/// A run of samples within the band.
#[derive(Debug, Clone, Copy)]
struct Level {
    first_s: f64,
    last_s: f64,
    low_bytes: u64,
    high_bytes: u64,
    samples: u32,
}

impl Level {
    fn start(time_s: f64, bytes: u64) -> Level {
        Level {
            first_s: time_s,
            last_s: time_s,
            low_bytes: bytes,
            high_bytes: bytes,
            samples: 1,
        }
    }

    fn admits(&self, bytes: u64) -> bool {
        let low = self.low_bytes.min(bytes);
        let high = self.high_bytes.max(bytes);
        high - low <= PLATEAU_BAND_MIN_BYTES.max((high as f64 * PLATEAU_BAND) as u64)
    }

    fn is_plateau(&self) -> bool {
        self.samples >= PLATEAU_SAMPLES
            || (self.samples >= 2 && self.last_s - self.first_s >= PLATEAU_S)
    }
}

/// Follows one memory series of an attempt (GPU bytes, or the job's host bytes) and finds the
/// fixed part: the lowest plateau memory left for a higher peak. Fed one sample at a time, it
/// keeps a few numbers, not the timeline.
///
/// A plateau is [`PLATEAU_SAMPLES`] samples (or [`PLATEAU_S`]) within [`PLATEAU_BAND`]. The
/// estimate must never be too high, since a fixed part that is too high makes the fit cut
/// too deep, so three kinds of plateau do not count: one at or after the highest sample (a
/// real job keeps its memory for a few ticks after a CUDA out-of-memory error while Python
/// unwinds: GPT-2 on an H200 held 131.2 GiB twice after dying at 128); a higher plateau
/// where a lower one came before (a long forward pass climbs in steps: ResNet-50 held 636 MiB,
/// then 15.2 GiB and 64.6 GiB for three ticks each on its way to 138 GiB); and one at
/// [`PLATEAU_PEAK_SHARE`] of the peak or above (training, not loading). A timeline that only
/// climbs has none.
#[derive(Debug, Clone, Default)]
pub struct Ramp {
    current: Option<Level>,
    /// The lowest plateau memory has left so far.
    lowest_left_bytes: Option<u64>,
    /// [`Self::lowest_left_bytes`] when the highest sample came: the plateaus before the peak.
    before_peak_bytes: Option<u64>,
    peak_bytes: u64,
}

impl Ramp {
    /// Takes in one sample.
    pub fn feed(&mut self, time_s: f64, bytes: u64) {
        match &mut self.current {
            Some(level) if level.admits(bytes) => {
                level.last_s = time_s;
                level.low_bytes = level.low_bytes.min(bytes);
                level.high_bytes = level.high_bytes.max(bytes);
                level.samples += 1;
            }
            current => {
                // Kept whether memory rose or fell after it: a fall (a checkpoint loaded on the
                // host and freed) is followed by whatever comes next, and only the lowest
                // plateau is kept.
                if let Some(level) = current.filter(Level::is_plateau) {
                    self.lowest_left_bytes = Some(
                        self.lowest_left_bytes
                            .map_or(level.high_bytes, |low| low.min(level.high_bytes)),
                    );
                }
                *current = Some(Level::start(time_s, bytes));
            }
        }
        if bytes > self.peak_bytes {
            self.peak_bytes = bytes;
            self.before_peak_bytes = self.lowest_left_bytes;
        }
    }

    /// The series as it ended at a kill: memory reached `bytes` (the limit) after the last
    /// sample, so the level it held last was left for that peak, whether or not a tick fell
    /// in the climb (a step that allocates in 30 ms falls between ticks 100 ms apart).
    pub fn ended_at(&self, bytes: u64) -> Ramp {
        let mut ended = self.clone();
        // At the last sample's time: the peak starts a level of its own, never a plateau.
        ended.feed(self.current.map_or(0.0, |level| level.last_s), bytes);
        ended
    }

    /// The fixed part: the lowest plateau memory left before its highest sample, if under
    /// [`PLATEAU_PEAK_SHARE`] of the peak (the highest sample or `known_peak_bytes`, a cgroup's
    /// high-water mark or the limit at a kill, whichever is higher). `None` when no plateau
    /// showed before the peak.
    pub fn fixed_bytes(&self, known_peak_bytes: Option<u64>) -> Option<u64> {
        let peak = self.peak_bytes.max(known_peak_bytes.unwrap_or(0));
        self.before_peak_bytes
            .filter(|&p| (p as f64) < peak as f64 * PLATEAU_PEAK_SHARE)
    }
}

/// The largest divisor of `effective` within [`DIVISOR_SLACK`] below `candidate` (and not
/// below `min`), so batch × partner stays exact; else `candidate`.
fn prefer_divisor(candidate: u64, effective: Option<u64>, min: u64) -> u64 {
    let Some(effective) = effective.filter(|e| *e > 0) else {
        return candidate;
    };
    let lowest = ((candidate as f64 * (1.0 - DIVISOR_SLACK)).ceil() as u64).max(min.max(1));
    (lowest..=candidate)
        .rev()
        .find(|d| effective % d == 0)
        .unwrap_or(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn fail(batch: u64, bytes: u64) -> Point {
        Point {
            batch,
            bytes,
            failed: true,
        }
    }

    fn fitted(batch: u64, bytes: u64) -> Point {
        Point {
            batch,
            bytes,
            failed: false,
        }
    }

    fn request(points: &[Point], limit_bytes: u64, effective: Option<u64>) -> Request<'_> {
        Request {
            points,
            limit_bytes,
            limit_name: "GPU",
            margin: 0.10,
            min: 1,
            effective,
            fixed_bytes: None,
            // The line's arithmetic, unguarded: `halving_needs_evidence_to_go_below_half`
            // tests the guard.
            halved: 1,
        }
    }

    /// The exact line from completed steps: per sample and fixed part from the two batches
    /// furthest apart, what the limit counts beyond it from the points with scale, a failure
    /// barely over the limit only where the line explains it; nothing where the steps cannot
    /// draw a rising line.
    #[test]
    fn completed_steps_draw_the_line_exactly_or_not_at_all() {
        // (steps as (batch, GiB), points, effective, batch or none); the card is 80 GiB.
        type Row = (&'static [(u64, u64)], Vec<Point>, Option<u64>, Option<u64>);
        let table: Vec<Row> = vec![
            // 8 GiB + 1 GiB a sample; a failure at 100 bounded at exactly its line: (72 − 8) / 1.
            (
                &[(16, 24), (32, 40)],
                vec![fail(100, 108 * GIB)],
                None,
                Some(64),
            ),
            // A third batch between them and a second peak at one batch change nothing (the
            // largest peak at 32, the two furthest apart).
            (
                &[(16, 24), (24, 31), (32, 40), (32, 39)],
                vec![fail(100, 108 * GIB)],
                None,
                Some(64),
            ),
            // A success 2 GiB over its line (the CUDA context): 2 GiB less room.
            (
                &[(16, 24), (32, 40)],
                vec![fail(100, 108 * GIB), fitted(32, 42 * GIB)],
                None,
                Some(62),
            ),
            // A failure at 60 whose bound is 30 GiB over the line: 30 GiB less room.
            (
                &[(16, 24), (32, 40)],
                vec![fail(60, 98 * GIB)],
                None,
                Some(34),
            ),
            // The effective batch 64 kept exact.
            (
                &[(16, 24), (32, 40)],
                vec![fail(100, 108 * GIB)],
                Some(128),
                Some(64),
            ),
            (
                &[(16, 24), (32, 40)],
                vec![fail(100, 108 * GIB)],
                Some(124),
                Some(62),
            ),
            // A bound barely over the card at 90, where the line says 98 GiB: explained.
            (
                &[(16, 24), (32, 40)],
                vec![fail(90, 81 * GIB)],
                None,
                Some(64),
            ),
            // The same at 70, where the line says 78 GiB: something beyond the steps (a long
            // sample) killed it, by how much nothing shows.
            (&[(16, 24), (32, 40)], vec![fail(70, 81 * GIB)], None, None),
            // Past the limit even at the floor: the floor; the floor failed: no batch.
            (&[(1, 75), (2, 80)], vec![fail(4, 90 * GIB)], None, Some(1)),
            (&[(1, 75), (2, 80)], vec![fail(1, 90 * GIB)], None, None),
            // One batch, one peak, memory not growing: no exact line.
            (&[(16, 24)], vec![fail(100, 108 * GIB)], None, None),
            (
                &[(16, 24), (16, 30)],
                vec![fail(100, 108 * GIB)],
                None,
                None,
            ),
            (
                &[(16, 24), (32, 24)],
                vec![fail(100, 108 * GIB)],
                None,
                None,
            ),
            (
                &[(16, 30), (32, 24)],
                vec![fail(100, 108 * GIB)],
                None,
                None,
            ),
            (&[], vec![fail(100, 108 * GIB)], None, None),
        ];
        for (steps, points, effective, want) in table {
            let steps: Vec<(u64, u64)> = steps.iter().map(|&(b, g)| (b, g * GIB)).collect();
            let got = exact(&request(&points, 80 * GIB, effective), &steps);
            assert_eq!(
                got.as_ref().map(|e| e.batch),
                want,
                "{steps:?} {points:?}: {got:?}"
            );
        }
        // Below half (of 60, 30) only where half cannot fit by the least the evidence allows:
        // a bound 102 GiB over the line at 60 says (72 − 102 − 8) / 1: below 1, the floor, but
        // at 30 the least it shows is 8 + 102 / 2 = 59 GiB, within the card: not shown. A bound
        // of 200 GiB shows 104 GiB at 30: the floor stands.
        let steps = [(16, 24 * GIB), (32, 40 * GIB)];
        for (bound_gib, want) in [(110, None), (200, Some(1))] {
            let points = [fail(60, bound_gib * GIB)];
            let req = Request {
                halved: 30,
                ..request(&points, 80 * GIB, None)
            };
            let got = exact(&req, &steps).map(|e| e.batch);
            assert_eq!(got, want, "{bound_gib} GiB at 60");
        }
    }

    #[test]
    fn the_estimate_from_the_points() {
        // (points, limit, effective, batch or the start of why not)
        type Row = (Vec<Point>, u64, Option<u64>, Result<u64, &'static str>);
        let table: Vec<Row> = vec![
            // One failure far over the card: as if all of it scaled, 80 × 0.9 / 160 × 64 = 28.8.
            (vec![fail(64, 160 * GIB)], 80 * GIB, None, Ok(28)),
            // The effective batch 64 is kept exact with 16, its largest divisor down to half.
            (vec![fail(64, 160 * GIB)], 80 * GIB, Some(64), Ok(16)),
            // 62 has no divisor in [14, 28] (31 is above): the estimate itself, inexact.
            (vec![fail(64, 160 * GIB)], 80 * GIB, Some(62), Ok(28)),
            // 84 has 28.
            (vec![fail(64, 160 * GIB)], 80 * GIB, Some(84), Ok(28)),
            // 27 divides 54: kept exact rather than 28 with 56.
            (vec![fail(64, 160 * GIB)], 80 * GIB, Some(54), Ok(27)),
            // Two failures fix the line: need = 8 GiB + 1 GiB × batch; (72 − 8) / 1 = 64.
            (
                vec![fail(100, 108 * GIB), fail(80, 88 * GIB)],
                80 * GIB,
                None,
                Ok(64),
            ),
            // At one batch the largest bound counts.
            (
                vec![fail(64, 70 * GIB), fail(64, 160 * GIB)],
                80 * GIB,
                None,
                Ok(28),
            ),
            // Never above the smallest failure − 1.
            (vec![fail(10, 100 * GIB)], 80 * GIB, None, Ok(7)),
            // A line needs two bounds that carry scale: 74 GiB at 66 is below the card (others
            // held the rest), so it bounds nothing and the fit does not draw a line through it
            // (on the benchmark's layered deaths such lines overshot: 2.16 failed attempts
            // against halving's 2.00; without them 2.01).
            (
                vec![fail(100, 108 * GIB), fail(66, 74 * GIB)],
                80 * GIB,
                None,
                Err("GPU 80.0 GiB, need at 66 ≥ 74.0 GiB"),
            ),
            // The fixed part alone fills the budget: the floor.
            (
                vec![fail(4, 100 * GIB), fail(2, 90 * GIB)],
                80 * GIB,
                None,
                Ok(1),
            ),
            // A bare bound (a cgroup kill at the limit) cannot scale anything.
            (
                vec![fail(16, 100 * MIB)],
                100 * MIB,
                None,
                Err("GPU 100.0 MiB, need at 16 ≥ 100.0 MiB: that shows 16 does not fit"),
            ),
            (
                vec![fail(16, 104 * MIB), fail(32, 101 * MIB)],
                100 * MIB,
                None,
                Err("GPU 100.0 MiB, need at 16"),
            ),
            (vec![], 100 * MIB, None, Err("no failed attempt")),
            (
                vec![fail(1, 200 * MIB)],
                100 * MIB,
                None,
                Err("1 is the floor"),
            ),
        ];
        for (points, limit, effective, want) in table {
            let got = estimate(&request(&points, limit, effective));
            match (&got, want) {
                (Ok(e), Ok(b)) => assert_eq!(e.batch, b, "{points:?}: {}", e.reason),
                (Err(why), Err(start)) => assert!(why.starts_with(start), "{why}"),
                _ => panic!("{points:?}: {got:?}, wanted {want:?}"),
            }
        }
    }

    /// The policy's "can it move" and its step are both `halve`: they must agree.
    #[test]
    fn whether_halving_moves_does_not_depend_on_the_effective_batch() {
        for now in 0..=64 {
            for min in 0..=66 {
                let moves = halve(now, None, min) < now;
                assert_eq!(moves, now > min && now > 0, "{now} (floor {min})");
                for effective in [0, 1, 7, 97, 108, now, now * 3, u64::MAX] {
                    let to = halve(now, Some(effective), min);
                    assert_eq!(
                        to < now,
                        moves,
                        "{now} (floor {min}), effective {effective}"
                    );
                }
            }
        }
    }

    #[test]
    fn halving_needs_evidence_to_go_below_half() {
        let guarded = |points: &[Point], fixed_gib: Option<u64>, halved: u64| {
            estimate(&Request {
                fixed_bytes: fixed_gib.map(|f| f * GIB),
                halved,
                ..request(points, 80 * GIB, Some(128))
            })
        };
        // 160 GiB at 64: at 32 at least 80 GiB with no fixed part, not over the card: halve.
        let why = guarded(&[fail(64, 160 * GIB)], None, 32).unwrap_err();
        assert!(
            why.ends_with("at 32 it needs at least 80.0 GiB, which is within the GPU, so the evidence does not show that half cannot fit"),
            "{why}"
        );
        // 200 GiB at 64: at 32 at least 100 GiB, over the card: the estimate goes below half.
        let e = guarded(&[fail(64, 200 * GIB)], None, 32).unwrap();
        assert_eq!(e.batch, 16, "{}", e.reason);
        assert!(
            e.reason
                .contains(", so at 32 it needs at least 100.0 GiB, over the GPU: trying 16"),
            "{}",
            e.reason
        );
        // The recorded GPT-2 run: 155 GiB at least at 128 with 518 MiB seen before the first
        // step; the line says 103, snapped to 64 (divides 256), which is half: no guard needed.
        let h200 = 150_110_011_392;
        let gpt2 = [fail(256, 143_821 * MIB), fail(128, 158_669 * MIB)];
        let with_fixed = |fixed_bytes: u64| {
            estimate(&Request {
                fixed_bytes: Some(fixed_bytes),
                halved: 64,
                ..request(&gpt2, h200, Some(256))
            })
            .unwrap()
        };
        let e = with_fixed(518 * MIB);
        assert_eq!(e.batch, 64, "{}", e.reason);
        // With the post-OOM hold taken for the fixed part (131.2 GiB, as before the fix) the
        // line said 1; the guard alone keeps it at half: at 64 the bound with that fixed part
        // is 143 GiB, which is over the card, so the guard must be fed a fixed part that is
        // never too high (the Ramp's).
        let too_high = with_fixed(134_310 * MIB);
        assert_eq!(too_high.batch, 1, "{}", too_high.reason);
        // A bare bound with a fixed part near the budget capped 64 at 12 (under half); the
        // bound at 32 is 70 + 10 / 2 = 75 GiB, within the card: halve.
        let why = guarded(&[fail(64, 80 * GIB)], Some(70), 32).unwrap_err();
        assert!(
            why.contains("so at most 12 fits: at 32 it needs at least 75.0 GiB"),
            "{why}"
        );
    }

    #[test]
    fn need_at_least_from_the_points() {
        let success = |batch, bytes| Point {
            batch,
            bytes,
            failed: false,
        };
        // (points, fixed GiB, batch, GiB)
        type Row = (Vec<Point>, u64, u64, u64);
        let table: Vec<Row> = vec![
            (vec![], 3, 10, 3),
            // Scaled through (0, fixed): 10 + 90 / 2.
            (vec![fail(64, 100 * GIB)], 10, 32, 55),
            // A bound at a smaller batch holds as it is; bounds are not ordered by batch.
            (vec![fail(64, 100 * GIB), fail(16, 120 * GIB)], 0, 32, 120),
            // A success below and a failure above: 60 + (100 − 60) × 16 / 32 = 80, above the
            // failure's own 100 × 48 / 64 = 75.
            (vec![fail(64, 100 * GIB), success(32, 60 * GIB)], 0, 48, 80),
            // A success above says nothing of a lower bound.
            (vec![success(64, 100 * GIB)], 0, 32, 0),
        ];
        for (points, fixed, batch, want) in table {
            assert_eq!(
                need_at_least(&points, fixed * GIB, batch),
                want * GIB,
                "{points:?}"
            );
        }
    }

    #[test]
    fn a_success_and_a_failure_fix_the_line() {
        let points = [
            fail(64, 70 * GIB),
            Point {
                batch: 16,
                bytes: 22 * GIB,
                failed: false,
            },
        ];
        // per sample (70 − 22) / 48 = 1 GiB, fixed 6 GiB: (72 − 6) / 1 = 66, capped at 63.
        let e = estimate(&request(&points, 80 * GIB, None)).unwrap();
        assert_eq!(e.batch, 63, "{}", e.reason);
        assert!(e.reason.contains("22.0 GiB at 16 fitted"), "{}", e.reason);
    }

    #[test]
    fn the_reason_says_what_it_rests_on() {
        let e = estimate(&request(&[fail(64, 38 * GIB)], 24 * GIB, None)).unwrap();
        assert_eq!(
            e.reason,
            "GPU 24.0 GiB, need at 64 ≈ 38.0 GiB, per sample ≈ 608.0 MiB: trying 36"
        );
    }

    /// What the fit reads of a death: the need, the limit, fragmentation.
    type ProbeRead = (u64, (u64, &'static str), Option<Fragmentation>);

    const HELD_8_OF_2: Fragmentation = Fragmentation::Unallocated {
        reserved_bytes: 8 * GIB,
        tried_bytes: 2 * GIB,
    };

    #[test]
    fn the_probes_figures_stand_where_the_message_has_no_sizes_and_name_fragmentation() {
        let probe = crate::probe::OomFigures {
            requested_bytes: Some(2 * GIB),
            device_total_bytes: Some(80 * GIB),
            reserved_bytes: Some(78 * GIB),
            allocated_bytes: Some(70 * GIB),
            ..Default::default()
        };
        let bare = Observed {
            cause: Some(Cause::DeviceOom),
            tail: "RuntimeError: CUDA error: out of memory",
            probe_oom: Some(probe),
            ..Observed::default()
        };
        // (what, observed, evidence: need, limit, fragmented)
        let rows: &[(&str, Observed, Option<ProbeRead>)] = &[
            (
                "no sizes, no probe",
                Observed {
                    probe_oom: None,
                    ..bare
                },
                None,
            ),
            (
                "no sizes: the probe's",
                bare,
                Some((72 * GIB, (80 * GIB, "GPU"), Some(HELD_8_OF_2))),
            ),
            (
                "--max-gpu below the card",
                Observed {
                    max_gpu_bytes: Some(60 * GIB),
                    ..bare
                },
                Some((72 * GIB, (60 * GIB, "--max-gpu"), Some(HELD_8_OF_2))),
            ),
            (
                "no card total, no bound",
                Observed {
                    probe_oom: Some(crate::probe::OomFigures {
                        device_total_bytes: None,
                        ..probe
                    }),
                    ..bare
                },
                None,
            ),
            (
                "room enough in none of the free pieces: no fragmentation",
                Observed {
                    probe_oom: Some(crate::probe::OomFigures {
                        requested_bytes: Some(9 * GIB),
                        ..probe
                    }),
                    ..bare
                },
                Some((79 * GIB, (80 * GIB, "GPU"), None)),
            ),
        ];
        for (what, o, want) in rows {
            let got = observe(o).map(|e| (e.bytes, e.limit.unwrap(), e.fragmented));
            assert_eq!(got, *want, "{what}");
        }
        // With sizes in the message, the probe still names fragmentation the message does not.
        let cuda = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 0.50 GiB is reserved by PyTorch but unallocated.";
        let e = observe(&Observed { tail: cuda, ..bare }).unwrap();
        assert_eq!(e.fragmented, Some(HELD_8_OF_2));
        // Retries climbing name it only where no figures say how much was reserved but
        // unallocated: not over the observer's or the message's, whether they name it or show
        // it was the batch; over a message without that clause, yes.
        let climbing = Fragmentation::RetriesClimbing {
            reports: 3,
            retries: 9,
        };
        let rising = Observed {
            probe_retries_rising: Some((3, 9)),
            ..bare
        };
        let fragmented = |o: Observed| observe(&o).and_then(|e| e.fragmented);
        assert_eq!(fragmented(rising), Some(HELD_8_OF_2));
        let tight = crate::probe::OomFigures {
            requested_bytes: Some(9 * GIB),
            ..probe
        };
        let unnamed = Observed {
            probe_oom: Some(tight),
            ..rising
        };
        assert_eq!(
            fragmented(unnamed),
            None,
            "the observer showed it was the batch"
        );
        let named = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 4.00 GiB is reserved by PyTorch but unallocated.";
        let by_message = fragmented(Observed {
            tail: named,
            probe_oom: None,
            ..rising
        });
        assert!(
            matches!(by_message, Some(Fragmentation::Unallocated { .. })),
            "{by_message:?}"
        );
        let sizes = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free. Of the allocated memory 76.00 GiB is allocated by PyTorch, and 0.50 GiB is reserved by PyTorch but unallocated.";
        let with_sizes = Observed {
            tail: sizes,
            probe_oom: None,
            ..rising
        };
        assert_eq!(
            fragmented(with_sizes),
            None,
            "the message showed it was the batch"
        );
        let older = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use.";
        let without_clause = Observed {
            tail: older,
            probe_oom: None,
            ..rising
        };
        assert_eq!(fragmented(without_clause), Some(climbing));
        assert_eq!(
            fragmented(Observed {
                probe_retries_rising: None,
                ..with_sizes
            }),
            None
        );
    }

    #[test]
    fn observe_reads_each_kind_of_death() {
        let cuda = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the allocated memory 76.30 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but unallocated.";
        let o = Observed {
            cause: Some(Cause::DeviceOom),
            tail: cuda,
            ..Observed::default()
        };
        let e = observe(&o).unwrap();
        assert_eq!(
            (e.memory, e.failed, e.fragmented),
            (Memory::Gpu, true, None)
        );
        assert_eq!(e.limit.unwrap().1, "GPU");
        assert!(e.bytes > 110 * GIB && e.bytes < 111 * GIB, "{}", e.bytes);
        // A job stopped hanging after that message: the same sizes.
        let hung = observe(&Observed {
            cause: Some(Cause::HungAfterOom),
            ..o
        });
        assert_eq!(hung, Some(e.clone()));
        // --max-gpu below the card is the limit.
        let e = observe(&Observed {
            max_gpu_bytes: Some(40 * GIB),
            ..o
        })
        .unwrap();
        assert_eq!(e.limit, Some((40 * GIB, "--max-gpu")));
        // A cgroup kill: the peak is at least the limit.
        let kill = Observed {
            cause: Some(Cause::OomKilled),
            peak_cgroup_bytes: Some(95 * MIB),
            cgroup_limit_bytes: Some(96 * MIB),
            ..Observed::default()
        };
        let e = observe(&kill).unwrap();
        assert_eq!(
            (e.memory, e.bytes, e.limit),
            (Memory::Host, 96 * MIB, Some((96 * MIB, "cgroup limit")))
        );
        // Nothing to go on.
        for o in [
            Observed {
                cause: Some(Cause::OomKilled),
                ..Observed::default()
            },
            Observed {
                cause: Some(Cause::DeviceOom),
                tail: "RuntimeError: CUDA error: out of memory",
                ..Observed::default()
            },
            Observed {
                cause: Some(Cause::Failed),
                ..Observed::default()
            },
        ] {
            assert_eq!(observe(&o), None, "{o:?}");
        }
        // A soft bound's stop.
        let e = observe(&Observed {
            cause: Some(Cause::HostOom),
            memory_stop: Some(("--max-rss", 3 * GIB, 2 * GIB)),
            ..Observed::default()
        })
        .unwrap();
        assert_eq!(e.limit, Some((2 * GIB, "--max-rss")));
    }

    /// A timeline of (seconds, GiB) at 0.1 s ticks from a list of GiB levels.
    fn ramp_of(gib: &[f64]) -> Ramp {
        let mut ramp = Ramp::default();
        for (k, g) in gib.iter().enumerate() {
            ramp.feed(k as f64 * 0.1, (g * GIB as f64) as u64);
        }
        ramp
    }

    #[test]
    fn the_fixed_part_from_the_timeline() {
        // (what, samples in GiB, known peak in GiB, fixed in GiB)
        type Row = (&'static str, Vec<f64>, Option<f64>, Option<f64>);
        let table: Vec<Row> = vec![
            (
                "load, plateau, then the step's climb",
                vec![0.5, 5.0, 10.0, 20.0, 20.0, 20.0, 20.0, 30.0, 40.0, 60.0],
                None,
                Some(20.0),
            ),
            (
                "a kill: the samples end on their highest level, which may be the death's hold",
                vec![1.0, 10.0, 20.0, 20.0, 20.0],
                Some(40.0),
                None,
            ),
            (
                "a kill, then the emptied cgroup's last sample",
                vec![1.0, 10.0, 20.0, 20.0, 20.0, 0.01],
                Some(40.0),
                None,
            ),
            (
                "a kill after a plateau the memory left",
                vec![1.0, 10.0, 10.0, 10.0, 20.0, 20.0],
                Some(40.0),
                Some(10.0),
            ),
            (
                "loaded on the host, freed, then the step: the later, lower plateau",
                vec![1.0, 30.0, 30.0, 30.0, 12.0, 12.0, 12.0, 40.0, 60.0],
                None,
                Some(12.0),
            ),
            (
                "step at once: memory only climbs",
                vec![0.5, 3.0, 8.0, 15.0, 24.0, 33.0, 40.0],
                Some(40.0),
                None,
            ),
            (
                "died while loading, before any plateau",
                vec![0.5, 5.0, 10.0],
                Some(40.0),
                None,
            ),
            (
                "noisy plateau (±1%): its highest sample",
                vec![2.0, 10.0, 20.0, 20.2, 19.8, 20.1, 19.9, 35.0, 50.0],
                None,
                Some(20.2),
            ),
            (
                "noise wider than the band breaks every level: none",
                vec![2.0, 10.0, 20.0, 22.0, 19.0, 21.5, 18.5, 35.0, 50.0],
                None,
                None,
            ),
            (
                "DataLoader workers fork after the load: the lower plateau (never too high)",
                vec![1.0, 8.0, 8.0, 8.0, 11.0, 11.0, 11.0, 25.0, 40.0],
                None,
                Some(8.0),
            ),
            (
                "a success: trained at its peak with dips, the plateau before the climb",
                vec![
                    1.0, 12.0, 12.0, 12.0, 30.0, 30.0, 28.5, 28.5, 28.5, 30.0, 30.0, 30.0,
                ],
                None,
                Some(12.0),
            ),
            (
                "a plateau at 90% of the peak is training, not loading",
                vec![1.0, 37.0, 37.0, 37.0, 37.0],
                Some(40.0),
                None,
            ),
            (
                "a short pause (two ticks) is not a plateau",
                vec![1.0, 10.0, 10.0, 30.0, 40.0],
                None,
                None,
            ),
        ];
        for (what, samples, peak, want) in table {
            let got = ramp_of(&samples).fixed_bytes(peak.map(|p| (p * GIB as f64) as u64));
            let want = want.map(|w| (w * GIB as f64) as u64);
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn two_samples_a_second_apart_are_a_plateau() {
        let mut ramp = Ramp::default();
        for (t, g) in [(0.0, 1), (2.0, 20), (3.5, 20), (5.0, 60)] {
            ramp.feed(t, g * GIB);
        }
        assert_eq!(ramp.fixed_bytes(None), Some(20 * GIB));
    }

    #[test]
    fn a_long_climb_in_steps_keeps_its_lowest_plateau() {
        let mut ramp = Ramp::default();
        for k in 0..10_000u64 {
            ramp.feed(k as f64, (1 + k / 3) * 100 * MIB);
        }
        assert_eq!(ramp.fixed_bytes(None), Some(100 * MIB));
    }

    /// A timeline at `--interval 1s` in MiB, `None` where the process was not yet listed.
    fn ramp_of_mib(mib: &[Option<u64>]) -> Ramp {
        let mut ramp = Ramp::default();
        for (k, m) in mib.iter().enumerate() {
            if let Some(m) = m {
                ramp.feed(k as f64, m * MIB);
            }
        }
        ramp
    }

    /// The fixed part of real timelines (tests/fixtures/replay/): it may be too low, never
    /// too high.
    #[test]
    fn the_fixed_part_of_recorded_timelines() {
        // (what, GPU MiB at 1 s, the message's need in MiB, the fixed part in MiB)
        type Row = (&'static str, Vec<Option<u64>>, u64, Option<u64>);
        let table: Vec<Row> = vec![
            (
                "GPT-2 at 128 on an H200: the 131.2 GiB held after the OOM is no fixed part",
                vec![
                    None,
                    None,
                    Some(518),
                    Some(518),
                    Some(1048),
                    Some(134310),
                    Some(133542),
                    Some(133542),
                ],
                158_669,
                Some(518),
            ),
            (
                "GPT-2 at 256: the context appears, the weights load, the step dies",
                vec![
                    Some(14),
                    Some(518),
                    Some(518),
                    Some(518),
                    Some(1908),
                    Some(140744),
                    Some(140744),
                ],
                143_872,
                Some(518),
            ),
            (
                "ResNet-50 at 4096 (modelled from the issue): a forward pass climbing in steps",
                [
                    vec![Some(636); 17],
                    vec![Some(15_565); 3],
                    vec![Some(25_293), Some(37_888), Some(53_248)],
                    vec![Some(66_150); 3],
                    vec![Some(141_312)],
                ]
                .concat(),
                150_000,
                Some(636),
            ),
            (
                "GPT-2 at 64, the clean case: loaded, then trains at its peak",
                [
                    vec![Some(518), Some(518), Some(2444), Some(105_540)],
                    vec![Some(118_106); 4],
                    vec![Some(118_108); 22],
                ]
                .concat(),
                0,
                Some(518),
            ),
        ];
        for (what, mib, need_mib, want_mib) in table {
            let ramp = ramp_of_mib(&mib);
            let mut evidence = Evidence {
                memory: Memory::Gpu,
                failed: need_mib > 0,
                bytes: need_mib * MIB,
                limit: None,
                fragmented: None,
                fixed_bytes: None,
            };
            let peak = mib.iter().flatten().max().map(|m| m * MIB);
            if evidence.failed {
                attach_fixed(&mut evidence, &ramp, peak);
                assert_eq!(evidence.fixed_bytes, want_mib.map(|m| m * MIB), "{what}");
            } else {
                assert_eq!(ramp.fixed_bytes(peak), want_mib.map(|m| m * MIB), "{what}");
            }
        }
    }

    #[test]
    fn a_fixed_part_seen_fixes_the_line() {
        let with = |points: &[Point], fixed_gib: u64| {
            estimate(&Request {
                fixed_bytes: Some(fixed_gib * GIB),
                ..request(points, 80 * GIB, None)
            })
        };
        // A bound with scale: 160 GiB at 64 with 32 GiB fixed: per sample 2 GiB, (72 − 32) / 2
        // = 20 (without the fixed part: 72 / 2.5 = 28, which does not fit: 32 + 56 = 88).
        let e = with(&[fail(64, 160 * GIB)], 32).unwrap();
        assert_eq!(e.batch, 20, "{}", e.reason);
        assert_eq!(
            e.reason,
            "GPU 80.0 GiB, fixed 32.0 GiB seen before the first step, need at 64 ≈ 160.0 GiB, per sample ≈ 2.0 GiB: trying 20"
        );
        // A bare bound (a kill at the limit) with a fixed part near the budget: the cap
        // 64 × (72 − 70) / (80 − 70) = 12 is under half, so it is the batch.
        let e = with(&[fail(64, 80 * GIB)], 70).unwrap();
        assert_eq!(e.batch, 12, "{}", e.reason);
        assert!(
            e.reason
                .contains("fixed 70.0 GiB seen before the first step")
                && e.reason.ends_with("so at most 12 fits: trying 12"),
            "{}",
            e.reason
        );
        // A bare bound with a small fixed part caps at 64 × 52 / 60 = 55: halving says more.
        let why = with(&[fail(64, 80 * GIB)], 20).unwrap_err();
        assert!(
            why.ends_with(
                "that shows 64 does not fit, not by how much; the fixed part caps it only at 55"
            ),
            "{why}"
        );
        // A success and a failure still fix the line from two measurements.
        let points = [
            fail(64, 70 * GIB),
            Point {
                batch: 16,
                bytes: 22 * GIB,
                failed: false,
            },
        ];
        assert_eq!(with(&points, 2).unwrap().batch, 63);
        // A fixed part at or above the limit is no part of a line.
        let e = with(&[fail(64, 160 * GIB)], 90).unwrap();
        assert_eq!(e.batch, 28, "{}", e.reason);
    }

    #[test]
    fn attach_fixed_takes_a_plateau_below_the_need_only() {
        let kill = observe(&Observed {
            cause: Some(Cause::OomKilled),
            peak_cgroup_bytes: Some(95 * MIB),
            cgroup_limit_bytes: Some(96 * MIB),
            ..Observed::default()
        })
        .unwrap();
        let ramp = |level: u64| {
            let mut ramp = Ramp::default();
            for (t, bytes) in [(0.0, MIB), (1.0, level), (2.0, level), (3.0, level)] {
                ramp.feed(t, bytes);
            }
            ramp.feed(4.0, 96 * MIB);
            ramp
        };
        let mut e = kill.clone();
        attach_fixed(&mut e, &ramp(40 * MIB), Some(96 * MIB));
        assert_eq!(e.fixed_bytes, Some(40 * MIB));
        // A plateau at the limit is the death, not a fixed part.
        let mut e = kill;
        attach_fixed(&mut e, &ramp(96 * MIB), Some(96 * MIB));
        assert_eq!(e.fixed_bytes, None);
    }

    /// A kill's climb can fall between two ticks: the series ended at the limit leaves its last
    /// level for it all the same, and that level counts only as any left level would. The last
    /// column: what the samples alone show.
    #[test]
    fn a_kill_between_ticks_leaves_the_last_level_for_the_limit() {
        type Row = (&'static str, &'static [u64], Option<u64>, Option<u64>);
        let table: &[Row] = &[
            (
                "held its fixed part, killed before the next tick",
                &[3, 429, 429, 429, 429, 429],
                Some(429),
                None,
            ),
            (
                "the dying process's freeing sample after it",
                &[3, 429, 429, 429, 414],
                Some(429),
                None,
            ),
            (
                "a tick in the climb: the same as before",
                &[3, 429, 429, 429, 499],
                Some(429),
                Some(429),
            ),
            (
                "the interpreter's start held too: the lowest",
                &[3, 3, 3, 429, 429, 429],
                Some(3),
                Some(3),
            ),
            ("two ticks are not a plateau", &[3, 429, 429], None, None),
            (
                "a last level within the band of the limit is the death",
                &[3, 492, 492, 492],
                None,
                None,
            ),
            (
                "a last level at 90% of the limit is training",
                &[3, 455, 455, 455],
                None,
                None,
            ),
            ("memory only climbed", &[3, 100, 200, 300, 400], None, None),
        ];
        let limit = 500 * MIB;
        for &(what, samples_mib, ended_mib, alone_mib) in table {
            let mut ramp = Ramp::default();
            for (k, &mib) in samples_mib.iter().enumerate() {
                ramp.feed(k as f64 * 0.1, mib * MIB);
            }
            let got = ramp.ended_at(limit).fixed_bytes(Some(limit));
            assert_eq!(got, ended_mib.map(|m| m * MIB), "{what}");
            let alone = ramp.fixed_bytes(Some(limit));
            assert_eq!(
                alone,
                alone_mib.map(|m| m * MIB),
                "{what}: the samples alone"
            );
        }
    }
}
