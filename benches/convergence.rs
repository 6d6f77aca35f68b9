//! How fast each `--strategy` converges, on a family of simulated jobs whose memory is
//! `fixed + per_sample × batch` (a benchmark of decisions, not of time; no processes run).
//! Each attempt above the limit dies with the evidence a real job leaves: a PyTorch 2.x CUDA
//! out-of-memory message in the real format (parsed by the real parser), or a cgroup kill
//! whose peak is the limit. The policy and fit code are the real ones.
//!
//! Each attempt is also sampled as oomguard samples it (`--interval 1s`, a random phase): the
//! fixed part loads over several seconds, holds while the first batch is prepared (a pause from
//! 0.1 s to 10 s: under about two ticks no plateau is visible), then the step climbs until the
//! death; ±0.5% noise on each sample. The samples go through the real `fit::Ramp`; `fit` reads
//! the fixed part it finds, `fit (no ramp)` does not.
//!
//! Run: `cargo bench --bench convergence`. Prints, per strategy and per kind of evidence,
//! the mean failed attempts before success and the final batch as a fraction of the largest
//! batch that fits and divides the effective batch.

use std::time::Duration;

use oomguard::classify::Cause;
use oomguard::fit;
use oomguard::knobs::Value;
use oomguard::policy::{self, Decision, Limits, Moves, Rule, Step, StepPlan, Strategy};

const GIB: f64 = (1u64 << 30) as f64;

/// What an attempt that does not fit leaves behind.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Death {
    /// The failing allocation is the batch's activations, the weights already held.
    GpuWhole,
    /// The activations come in 4 layers; the one that crosses the card fails.
    GpuLayered,
    /// The kernel kills the job at the cgroup limit.
    CgroupKill,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    limit_bytes: f64,
    fixed_bytes: f64,
    per_sample_bytes: f64,
    start: u64,
    death: Death,
    /// ± this share of noise on each attempt's per-sample memory.
    noise: f64,
    /// Seconds the fixed part takes to load, the pause before the first step (the plateau),
    /// and the step's climb.
    load_s: f64,
    pause_s: f64,
    step_s: f64,
}

/// oomguard's default `--interval`.
const INTERVAL_S: f64 = 1.0;
/// ± this share of noise on each sample (allocator and page-cache jitter).
const SAMPLE_NOISE: f64 = 0.005;

/// A tiny deterministic generator: the same family on every run.
struct Lcg(u64);

impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn family() -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut rng = Lcg(8);
    // The timings draw from their own generator: the memory numbers stay those of the family
    // measured before the ramp was simulated.
    let mut timing = Lcg(9);
    for death in [Death::GpuWhole, Death::GpuLayered, Death::CgroupKill] {
        for &limit_gib in &[24.0, 40.0, 80.0] {
            for &fixed_share in &[0.05, 0.2, 0.4] {
                // Start batches with many divisors (64, 96, 120, 256) and few (100, 127).
                for &start in &[64u64, 96, 100, 120, 127, 256] {
                    for &fits_share in &[0.15, 0.3, 0.6] {
                        let limit = limit_gib * GIB;
                        let fixed = limit * fixed_share;
                        // The batch that just fits is fits_share of the start, ±10%.
                        let fits = start as f64 * fits_share * (0.9 + 0.2 * rng.unit());
                        let per_sample = (limit - fixed) / fits.max(1.0);
                        let noise = if rng.unit() < 0.5 { 0.05 } else { 0.0 };
                        jobs.push(Job {
                            limit_bytes: limit,
                            fixed_bytes: fixed,
                            per_sample_bytes: per_sample,
                            start,
                            death,
                            noise,
                            load_s: 2.0 + 38.0 * timing.unit(),
                            // Log-uniform over 0.1 s .. 10 s.
                            pause_s: 0.1 * 100f64.powf(timing.unit()),
                            step_s: 0.5 + 4.5 * timing.unit(),
                        });
                    }
                }
            }
        }
    }
    jobs
}

fn size(bytes: f64) -> String {
    let gib = bytes / GIB;
    if gib < 1.0 {
        format!("{:.2} MiB", gib * 1024.0)
    } else {
        format!("{gib:.2} GiB")
    }
}

/// The PyTorch 2.x message of an allocation of `tried` failing with `in_use` held.
fn cuda_message(limit: f64, in_use: f64, tried: f64) -> String {
    format!(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}. GPU 0 has a total capacity of {} of which {} is free. \
         Including non-PyTorch memory, this process has {} memory in use. Of the allocated memory {} is allocated by PyTorch, \
         and {} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n",
        size(tried),
        size(limit),
        size((limit - in_use).max(0.0)),
        size(in_use),
        size(in_use * 0.97),
        size(in_use * 0.01),
    )
}

/// The fixed part the samples of one failed attempt show, through the real `fit::Ramp`: the
/// load's climb, the pause, then the step's climb to `died_at_bytes` (the limit at a kill, what
/// was held when an allocation failed), sampled every [`INTERVAL_S`] from a random phase.
fn sampled_fixed(job: &Job, died_at_bytes: f64, need_bytes: f64, rng: &mut Lcg) -> Option<u64> {
    let climb_s = match job.death {
        // The failing allocation is the whole step: it fails at once.
        Death::GpuWhole => 0.0,
        _ => job.step_s,
    };
    let step_at = job.load_s + job.pause_s;
    let death_at = step_at + climb_s;
    let mut ramp = fit::Ramp::default();
    let mut t = INTERVAL_S * rng.unit();
    while t < death_at {
        let bytes = if t < job.load_s {
            job.fixed_bytes * t / job.load_s
        } else if t < step_at {
            job.fixed_bytes
        } else {
            job.fixed_bytes + (died_at_bytes - job.fixed_bytes) * (t - step_at) / climb_s
        };
        let jitter = 1.0 + SAMPLE_NOISE * (2.0 * rng.unit() - 1.0);
        ramp.feed(t, (bytes * jitter) as u64);
        t += INTERVAL_S;
    }
    // As the supervisor does: the known peak is at least the death's bound.
    ramp.fixed_bytes(Some(need_bytes as u64))
        .filter(|&f| (f as f64) < need_bytes)
}

/// The evidence one failed attempt at `batch` leaves; with `ramp`, the fixed part its samples
/// show.
fn evidence(
    job: &Job,
    batch: u64,
    per_sample: f64,
    ramp: Option<&mut Lcg>,
) -> Option<fit::Evidence> {
    let activations = per_sample * batch as f64;
    let died_at = match job.death {
        Death::GpuWhole => job.fixed_bytes,
        Death::GpuLayered => {
            let layer = activations / 4.0;
            (0..4)
                .map(|k| job.fixed_bytes + layer * k as f64)
                .take_while(|held| held + layer <= job.limit_bytes)
                .last()
                .unwrap_or(job.fixed_bytes)
        }
        Death::CgroupKill => job.limit_bytes,
    };
    let (tail, peak) = match job.death {
        Death::GpuWhole => (
            cuda_message(job.limit_bytes, job.fixed_bytes, activations),
            None,
        ),
        Death::GpuLayered => {
            let layer = activations / 4.0;
            let held = (0..4)
                .map(|k| job.fixed_bytes + layer * k as f64)
                .take_while(|held| held + layer <= job.limit_bytes)
                .last()
                .unwrap_or(job.fixed_bytes);
            (cuda_message(job.limit_bytes, held, layer), None)
        }
        Death::CgroupKill => (String::new(), Some(job.limit_bytes as u64)),
    };
    let (cause, cgroup_limit) = match job.death {
        Death::CgroupKill => (Cause::OomKilled, Some(job.limit_bytes as u64)),
        _ => (Cause::DeviceOom, None),
    };
    let mut evidence = fit::observe(&fit::Observed {
        cause: Some(cause),
        tail: &tail,
        peak_cgroup_bytes: peak,
        cgroup_limit_bytes: cgroup_limit,
        ..fit::Observed::default()
    })?;
    if let Some(rng) = ramp {
        evidence.fixed_bytes = sampled_fixed(job, died_at, evidence.bytes as f64, rng);
    }
    Some(evidence)
}

/// Whether the samples of an attempt of `job` show a plateau (counted for the table).
fn plateau_visible(job: &Job, rng: &mut Lcg) -> bool {
    sampled_fixed(job, job.limit_bytes, job.limit_bytes * 2.0, rng).is_some()
}

/// Runs one job to success under `strategy`: failed attempts, and the final batch (`None`
/// when it gave up).
/// With `ramp`, each failed attempt's samples (drawn from that generator) show the fixed part.
fn converge(
    job: &Job,
    strategy: Strategy,
    mut ramp: Option<&mut Lcg>,
    rng: &mut Lcg,
) -> (u32, Option<u64>) {
    let rules = vec![
        Rule {
            name: "batch".into(),
            moves: Moves::Step {
                step: Step::Halve,
                min: 1,
            },
            on: policy::default_causes(),
            partner: Some(1),
        },
        Rule {
            name: "accum".into(),
            moves: Moves::Partner,
            on: policy::default_causes(),
            partner: None,
        },
    ];
    let original = vec![Value::Int(job.start), Value::Int(1)];
    let limits = Limits {
        max_attempts: 30,
        retries: 0,
        backoff: Duration::ZERO,
        backoff_max: Duration::ZERO,
    };
    let mut plan = StepPlan {
        strategy,
        margin: 0.10,
        evidence: Vec::new(),
        past: Vec::new(),
        allocator_hint: false,
    };
    let mut history = Vec::new();
    let mut values = original.clone();
    let mut failures = 0;
    loop {
        let batch = values[0].as_int().expect("the batch is an integer");
        let per_sample = job.per_sample_bytes * (1.0 + job.noise * (2.0 * rng.unit() - 1.0));
        if job.fixed_bytes + per_sample * batch as f64 <= job.limit_bytes {
            return (failures, Some(batch));
        }
        failures += 1;
        let cause = match job.death {
            Death::CgroupKill => Cause::OomKilled,
            _ => Cause::DeviceOom,
        };
        history.push((cause, values.clone()));
        plan.evidence
            .push(evidence(job, batch, per_sample, ramp.as_deref_mut()));
        match policy::decide_with(&history, &rules, &original, &limits, &plan) {
            Decision::Relaunch(next) => values = next.values,
            Decision::Stop { .. } => return (failures, None),
        }
    }
}

/// The largest batch that fits (without noise) under the effective-batch constraint: the
/// largest divisor of the effective batch that fits, unless none is within
/// `fit::DIVISOR_SLACK` (half) of the largest batch that fits (then that batch, the effective
/// batch the nearest above) — the same rule `fit` chooses by.
fn best(job: &Job) -> u64 {
    let fits = |b: u64| job.fixed_bytes + job.per_sample_bytes * b as f64 <= job.limit_bytes;
    let largest = (1..=job.start).rev().find(|&b| fits(b)).unwrap_or(1);
    let divisor = (1..=largest)
        .rev()
        .find(|b| job.start % b == 0)
        .unwrap_or(1);
    if divisor as f64 >= (1.0 - oomguard::fit::DIVISOR_SLACK) * largest as f64 {
        divisor
    } else {
        largest
    }
}

fn main() {
    let jobs = family();
    let strategies = [
        ("halve", Strategy::Halve, false),
        ("factor:0.9", Strategy::Factor(0.9), false),
        ("fit (no ramp)", Strategy::Fit, false),
        ("fit", Strategy::Fit, true),
    ];
    let mut seen = Lcg(7);
    let visible: Vec<bool> = jobs.iter().map(|j| plateau_visible(j, &mut seen)).collect();
    type Kind<'a> = (&'static str, Box<dyn Fn(usize, &Job) -> bool + 'a>);
    let kinds: Vec<Kind> = vec![
        ("all", Box::new(|_, _| true)),
        (
            "gpu message, one allocation",
            Box::new(|_, j| j.death == Death::GpuWhole),
        ),
        (
            "gpu message, layered",
            Box::new(|_, j| j.death == Death::GpuLayered),
        ),
        ("cgroup kill", Box::new(|_, j| j.death == Death::CgroupKill)),
        ("plateau visible", Box::new(|k, _| visible[k])),
        ("no plateau visible", Box::new(|k, _| !visible[k])),
    ];
    println!(
        "{} simulated jobs (memory = fixed + per_sample × batch; half with ±5% noise per attempt); \
         a plateau visible in the samples of {} of them",
        jobs.len(),
        visible.iter().filter(|v| **v).count()
    );
    println!(
        "| jobs | strategy | mean failed attempts | final / largest feasible (mean) | final / largest feasible (min) | gave up |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for (kind, wanted) in &kinds {
        for (name, strategy, ramp) in strategies {
            let mut rng = Lcg(42);
            let mut sampling = Lcg(43);
            let chosen: Vec<&Job> = jobs
                .iter()
                .enumerate()
                .filter(|(k, j)| wanted(*k, j))
                .map(|(_, j)| j)
                .collect();
            let (mut failed, mut fraction, mut worst, mut gave_up) = (0u32, 0.0, f64::MAX, 0);
            for job in &chosen {
                let (f, fin) = converge(job, strategy, ramp.then_some(&mut sampling), &mut rng);
                failed += f;
                match fin {
                    Some(b) => {
                        let share = b as f64 / best(job) as f64;
                        fraction += share;
                        worst = worst.min(share);
                    }
                    None => gave_up += 1,
                }
            }
            let n = chosen.len() as f64;
            let done = (chosen.len() - gave_up) as f64;
            println!(
                "| {kind} | {name} | {:.2} | {:.0}% | {:.0}% | {gave_up} |",
                failed as f64 / n,
                100.0 * fraction / done,
                100.0 * worst
            );
        }
    }
}
