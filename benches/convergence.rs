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
//! batch that fits and divides the effective batch. Then the oracle-free bound on bare bounds
//! (cgroup kills, layered GPU deaths): every fixed sequence of fractions of the batch that
//! died (or of the cap the fixed part gives) from a grid, scored on the same jobs, with the
//! Pareto front of failures against batch kept; and the second run of each job, started by
//! the real `jobs::start_from` from what worked in the first. Under `cargo test` (no
//! `--bench`) the bound searches a 4-value grid as a smoke check.
//!
//! Real timelines are a class of their own: the recordings the replay test plays
//! (tests/fixtures/replay/: the Hugging Face GPT-2 run on an H200, the modelled step-wise
//! ResNet-50 climb), each recorded attempt's GPU samples at 1 s through the real `fit::Ramp`
//! and its recorded message through the real parser; a batch the recording lacks fits or dies
//! by the job's line (fixed + per sample × batch from the recorded peaks).

use std::time::Duration;

use oomguard::api::fit;
use oomguard::api::knobs::{self, Moves, Rule, Step, Value};
use oomguard::api::outcome::Cause;
use oomguard::api::policy::{self, Decision, Limits, StepPlan, Strategy};

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
    // As the supervisor does: a kill came at the limit after the last sample
    // (`fit::Ramp::ended_at`), and the known peak is at least the need (`fit::attach_fixed`).
    if job.death == Death::CgroupKill {
        ramp = ramp.ended_at(died_at_bytes as u64);
    }
    let mut probe = fit::Evidence {
        memory: fit::Memory::Host,
        failed: true,
        bytes: need_bytes as u64,
        limit: None,
        fragmented: None,
        fixed_bytes: None,
    };
    fit::attach_fixed(&mut probe, &ramp, None);
    probe.fixed_bytes
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
    ramp: Option<&mut Lcg>,
    rng: &mut Lcg,
) -> (u32, Option<u64>) {
    let original = vec![Value::Int(job.start), Value::Int(1)];
    let (failures, last) = converge_from(job, strategy, ramp, rng, original);
    (failures, last.map(|values| batch_of(&values)))
}

/// The batch in a job's knob values (batch, accumulation).
fn batch_of(values: &[Value]) -> u64 {
    values[0].as_int().expect("the batch is an integer")
}

/// The policy's limits and plan for a simulated run under `strategy`: up to 30 attempts, no
/// retries, no backoff, the default 10% margin, no evidence yet.
fn policy_for(strategy: Strategy) -> (Limits, StepPlan) {
    let limits = Limits {
        max_attempts: 30,
        retries: 0,
        backoff: Duration::ZERO,
        backoff_max: Duration::ZERO,
    };
    let plan = StepPlan {
        strategy,
        margin: 0.10,
        ..StepPlan::default()
    };
    (limits, plan)
}

/// The two knobs every simulated job has: the batch, halved by default, and its partner.
fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "batch".into(),
            moves: Moves::Step {
                step: Step::Halve,
                min: 1,
            },
            on: knobs::default_causes(),
            partner: Some(1),
        },
        Rule {
            name: "accum".into(),
            moves: Moves::Partner,
            on: knobs::default_causes(),
            partner: None,
        },
    ]
}

/// [`converge`] with the first attempt at `first` (the command itself stays `job.start` with
/// accumulation 1): failed attempts, and the knob values that succeeded.
fn converge_from(
    job: &Job,
    strategy: Strategy,
    mut ramp: Option<&mut Lcg>,
    rng: &mut Lcg,
    first: Vec<Value>,
) -> (u32, Option<Vec<Value>>) {
    let rules = rules();
    let original = vec![Value::Int(job.start), Value::Int(1)];
    let (limits, mut plan) = policy_for(strategy);
    let mut history = Vec::new();
    let mut values = first;
    let mut failures = 0;
    loop {
        let batch = batch_of(&values);
        let per_sample = job.per_sample_bytes * (1.0 + job.noise * (2.0 * rng.unit() - 1.0));
        if job.fixed_bytes + per_sample * batch as f64 <= job.limit_bytes {
            return (failures, Some(values));
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
    if divisor as f64 >= (1.0 - oomguard::api::fit::DIVISOR_SLACK) * largest as f64 {
        divisor
    } else {
        largest
    }
}

/// What a bare-bound policy scales: the batch that died, or the cap on the next batch that
/// the fixed part gives (`batch × (budget − fixed) / (limit − fixed)`, budget = limit less the
/// 10% margin; with no plateau seen, fixed counts as 0 and the cap is 90% of the batch).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Base {
    Batch,
    Cap,
}

/// An oracle-free policy for bare bounds: after the k-th failure the next batch is
/// `fractions[k] × base` (the last fraction repeated), snapped to a divisor of the effective
/// batch by `fit`'s rule. It sees nothing but "batch b died at the limit" and, for
/// [`Base::Cap`], the fixed part the samples showed.
#[derive(Debug, Clone)]
struct Policy {
    base: Base,
    fractions: Vec<f64>,
}

impl Policy {
    fn describe(&self) -> String {
        let base = match self.base {
            Base::Batch => "batch",
            Base::Cap => "cap",
        };
        let steps: Vec<String> = self.fractions.iter().map(|f| format!("{f:.2}")).collect();
        format!(
            "{} × {base}, then ×{} …",
            steps.join(", "),
            steps.last().expect("not empty")
        )
    }
}

/// What one job shows every policy alike (common random numbers): each attempt's per-sample
/// memory, and the fixed part each failed attempt's samples show.
struct Draws {
    per_sample_bytes: Vec<f64>,
    fixed_bytes: Vec<Option<f64>>,
}

/// The attempts a job may make: `--max-attempts` as [`converge`] runs it.
const MAX_ATTEMPTS: usize = 30;

fn draws(job: &Job, rng: &mut Lcg, sampling: &mut Lcg) -> Draws {
    Draws {
        per_sample_bytes: (0..MAX_ATTEMPTS)
            .map(|_| job.per_sample_bytes * (1.0 + job.noise * (2.0 * rng.unit() - 1.0)))
            .collect(),
        // The samples climb to the limit (a kill); the plateau they show is what matters.
        fixed_bytes: (0..MAX_ATTEMPTS)
            .map(|_| {
                sampled_fixed(job, job.limit_bytes, job.limit_bytes, sampling).map(|f| f as f64)
            })
            .collect(),
    }
}

/// `fit`'s divisor rule (`fit::prefer_divisor`, private there): the largest divisor of
/// `effective` within [`fit::DIVISOR_SLACK`] below `candidate`, else `candidate`.
fn prefer_divisor(candidate: u64, effective: u64) -> u64 {
    let lowest = ((candidate as f64 * (1.0 - fit::DIVISOR_SLACK)).ceil() as u64).max(1);
    (lowest..=candidate)
        .rev()
        .find(|d| effective % d == 0)
        .unwrap_or(candidate)
}

/// Runs `job` under `policy`: failed attempts, and the final batch (`None`: gave up).
fn run_policy(job: &Job, draws: &Draws, policy: &Policy) -> (u32, Option<u64>) {
    let budget = job.limit_bytes * 0.9;
    let mut batch = job.start;
    for attempt in 0..MAX_ATTEMPTS {
        if job.fixed_bytes + draws.per_sample_bytes[attempt] * batch as f64 <= job.limit_bytes {
            return (attempt as u32, Some(batch));
        }
        let base = match policy.base {
            Base::Batch => batch as f64,
            Base::Cap => {
                let fixed = draws.fixed_bytes[attempt].unwrap_or(0.0).min(budget);
                batch as f64 * (budget - fixed) / (job.limit_bytes - fixed)
            }
        };
        let f = policy.fractions[attempt.min(policy.fractions.len() - 1)];
        let candidate = ((f * base).floor() as u64).clamp(1, batch.saturating_sub(1).max(1));
        batch = prefer_divisor(candidate, job.start);
    }
    (MAX_ATTEMPTS as u32, None)
}

/// Every sequence of `len` fractions from `grid`, on both bases.
fn policies(grid: &[f64], len: usize) -> Vec<Policy> {
    let mut sequences: Vec<Vec<f64>> = vec![Vec::new()];
    for _ in 0..len {
        sequences = sequences
            .iter()
            .flat_map(|s| {
                grid.iter().map(move |&f| {
                    let mut next = s.clone();
                    next.push(f);
                    next
                })
            })
            .collect();
    }
    [Base::Batch, Base::Cap]
        .iter()
        .flat_map(|&base| {
            sequences.iter().map(move |fractions| Policy {
                base,
                fractions: fractions.clone(),
            })
        })
        .collect()
}

/// One policy's score on a set of jobs: mean failed attempts, mean final / largest feasible
/// (a job given up counts 0%), and how many gave up.
#[derive(Debug, Clone, Copy)]
struct Score {
    failures: f64,
    share: f64,
    gave_up: usize,
}

fn score(jobs: &[(&Job, Draws)], policy: &Policy) -> Score {
    let (mut failures, mut share, mut gave_up) = (0u32, 0.0, 0);
    for (job, draws) in jobs {
        let (f, fin) = run_policy(job, draws, policy);
        failures += f;
        match fin {
            Some(b) => share += b as f64 / best(job) as f64,
            None => gave_up += 1,
        }
    }
    let n = jobs.len() as f64;
    Score {
        failures: failures as f64 / n,
        share: share / n,
        gave_up,
    }
}

/// The policies no other beats on both counts (fewer failures and a larger share), fewest
/// failures first.
fn pareto(scored: &[(usize, Score)]) -> Vec<(usize, Score)> {
    let mut sorted = scored.to_vec();
    sorted.sort_by(|a, b| {
        a.1.failures
            .total_cmp(&b.1.failures)
            .then(b.1.share.total_cmp(&a.1.share))
    });
    let mut front: Vec<(usize, Score)> = Vec::new();
    for entry in sorted {
        if front.last().is_none_or(|last| entry.1.share > last.1.share) {
            front.push(entry);
        }
    }
    front
}

/// A named set of jobs.
type Class = (&'static str, fn(&Job) -> bool);

/// The oracle-free bound on bare bounds: every fixed sequence of fractions, on the cgroup-kill
/// and layered jobs, against `fit` on the same jobs.
fn bare_bound(jobs: &[Job], full: bool) {
    let grid: Vec<f64> = if full {
        (2..=19).map(|k| k as f64 * 0.05).collect()
    } else {
        vec![0.3, 0.5, 0.7, 0.9]
    };
    let len = if full { 4 } else { 2 };
    let family = policies(&grid, len);
    println!();
    println!(
        "Oracle-free bound on bare bounds: {} policies (every sequence of {len} fractions from \
         {}, the last repeated, of the batch or of the cap); a job given up counts 0%",
        family.len(),
        if full {
            "0.10..0.95 step 0.05".to_string()
        } else {
            format!("{grid:?} (smoke: run with --bench for the full grid)")
        },
    );
    let classes: [Class; 3] = [
        ("cgroup kill", |j| j.death == Death::CgroupKill),
        ("gpu message, layered", |j| j.death == Death::GpuLayered),
        ("bare bounds (both)", |j| j.death != Death::GpuWhole),
    ];
    println!(
        "| jobs | policy | mean failed attempts | final / largest feasible (mean) | gave up |"
    );
    println!("|---|---|---:|---:|---:|");
    let mut fronts = Vec::new();
    for (name, wanted) in classes {
        let (mut rng, mut sampling) = (Lcg(44), Lcg(45));
        let chosen: Vec<(&Job, Draws)> = jobs
            .iter()
            .filter(|j| wanted(j))
            .map(|j| (j, draws(j, &mut rng, &mut sampling)))
            .collect();
        let scored: Vec<(usize, Score)> = family
            .iter()
            .enumerate()
            .map(|(k, p)| (k, score(&chosen, p)))
            .collect();
        // `fit` on the same jobs, for comparison (its own noise draws, as in the table above).
        let (mut fit_rng, mut fit_sampling) = (Lcg(42), Lcg(43));
        let (mut fit_failed, mut fit_share) = (0u32, 0.0);
        for (job, _) in &chosen {
            let (f, fin) = converge(job, Strategy::Fit, Some(&mut fit_sampling), &mut fit_rng);
            fit_failed += f;
            fit_share += fin.map_or(0.0, |b| b as f64 / best(job) as f64);
        }
        let n = chosen.len() as f64;
        println!(
            "| {name} | fit | {:.2} | {:.0}% | |",
            fit_failed as f64 / n,
            100.0 * fit_share / n
        );
        for threshold in [0.85, 0.9, 0.95] {
            let best_at = scored
                .iter()
                .filter(|(_, s)| s.share >= threshold)
                .min_by(|a, b| a.1.failures.total_cmp(&b.1.failures));
            match best_at {
                Some((k, s)) => println!(
                    "| {name} | fewest failures at ≥ {:.0}%: {} | {:.2} | {:.1}% | {} |",
                    100.0 * threshold,
                    family[*k].describe(),
                    s.failures,
                    100.0 * s.share,
                    s.gave_up
                ),
                None => println!(
                    "| {name} | none reaches ≥ {:.0}% | | | |",
                    100.0 * threshold
                ),
            }
        }
        fronts.push((name, pareto(&scored)));
    }
    for (name, front) in fronts {
        println!();
        println!(
            "Pareto front, {name} ({} policies; shown from 50%, one per 0.1 failed attempts):",
            front.len()
        );
        println!("| mean failed attempts | final / largest feasible (mean) | policy |");
        println!("|---:|---:|---|");
        let mut shown: Option<f64> = None;
        for (k, s) in front.iter().filter(|(_, s)| s.share >= 0.5) {
            if shown.is_some_and(|f| s.failures < f + 0.1) {
                continue;
            }
            shown = Some(s.failures);
            println!(
                "| {:.2} | {:.1}% | {} |",
                s.failures,
                100.0 * s.share,
                family[*k].describe()
            );
        }
    }
}

/// The second run of each job: the first run under `fit`, its last working knobs remembered
/// as the job's file keeps them, the second run started from them by the real
/// `jobs::start_from` (the code path `oomguard run` takes), then run under `fit`.
fn second_run(jobs: &[Job]) {
    use oomguard::api::jobs::start_from;
    use oomguard::api::jobs::LastSuccess;
    use oomguard::api::knobs::{Knob, KnobSet, Place};
    use oomguard::api::record::KnobValues;
    println!();
    println!("Second run of the same job (the start from the job's memory, `jobs::start_from`):");
    println!("| jobs | run | mean failed attempts | final / largest feasible (mean) | gave up |");
    println!("|---|---|---:|---:|---:|");
    let kinds: [Class; 4] = [
        ("all", |_| true),
        ("gpu message, one allocation", |j| {
            j.death == Death::GpuWhole
        }),
        ("gpu message, layered", |j| j.death == Death::GpuLayered),
        ("cgroup kill", |j| j.death == Death::CgroupKill),
    ];
    for (name, wanted) in kinds {
        let (mut rng, mut sampling) = (Lcg(42), Lcg(43));
        let mut sums = [(0u32, 0.0, 0usize); 2];
        let chosen: Vec<&Job> = jobs.iter().filter(|j| wanted(j)).collect();
        for job in &chosen {
            let original = vec![Value::Int(job.start), Value::Int(1)];
            let (f1, last) = converge_from(
                job,
                Strategy::Fit,
                Some(&mut sampling),
                &mut rng,
                original.clone(),
            );
            let knobs = KnobSet {
                knobs: rules()
                    .into_iter()
                    .zip(&original)
                    .map(|(rule, value)| Knob {
                        name: rule.name.clone(),
                        place: Place::Env(rule.name.to_uppercase()),
                        original: value.clone(),
                        rule,
                    })
                    .collect(),
                files: Vec::new(),
                automatic: false,
                notes: Vec::new(),
                kept_by_job: false,
                no_accumulation: None,
            };
            let first = last.as_ref().and_then(|worked| {
                let remembered = LastSuccess {
                    at: "2026-11-26T00:00:00Z".into(),
                    run: "/runs/1".into(),
                    knobs: KnobValues(
                        knobs
                            .knobs
                            .iter()
                            .zip(worked)
                            .map(|(k, v)| (k.name.clone(), v.to_json()))
                            .collect(),
                    ),
                    room_cut: None,
                    room_limited: None,
                };
                start_from(&remembered, &knobs).map(|start| start.values)
            });
            let (f2, again) = converge_from(
                job,
                Strategy::Fit,
                Some(&mut sampling),
                &mut rng,
                first.unwrap_or(original),
            );
            for (sum, (f, fin)) in sums.iter_mut().zip([(f1, last), (f2, again)]) {
                sum.0 += f;
                match fin {
                    Some(values) => sum.1 += batch_of(&values) as f64 / best(job) as f64,
                    None => sum.2 += 1,
                }
            }
        }
        let n = chosen.len();
        for (run, (failed, share, gave_up)) in ["first", "second"].iter().zip(sums) {
            println!(
                "| {name} | {run} | {:.2} | {:.0}% | {gave_up} |",
                failed as f64 / n as f64,
                100.0 * share / (n - gave_up) as f64
            );
        }
    }
}

/// A recorded GPU job (tests/fixtures/replay/) and the line that stands for the batches it
/// did not record.
struct Recorded {
    name: &'static str,
    file: &'static str,
    start: u64,
    /// Whether the batch has an accumulation partner (the effective batch kept).
    partner: bool,
    fixed_mib: u64,
    per_sample_mib: u64,
}

/// The real jobs: GPT-2's line from its run at 64 (118,108 MiB peak, 518 MiB before the
/// step), ResNet-50's from the model in its recording.
const RECORDED: [Recorded; 2] = [
    Recorded {
        name: "GPT-2 124M, seq 1024, H200 (recorded)",
        file: "hf-gpt2-seq1024-h200.json",
        start: 256,
        partner: true,
        fixed_mib: 518,
        per_sample_mib: 1837,
    },
    Recorded {
        name: "ResNet-50 step-wise climb, H200 (modelled)",
        file: "resnet50-stepwise-h200-modelled.json",
        start: 4096,
        partner: false,
        fixed_mib: 636,
        per_sample_mib: 78,
    },
];

/// One recorded job under `strategy`: the batches tried, the last one the one that fitted.
fn replay_recorded(job: &Recorded, strategy: Strategy) -> Vec<u64> {
    const MIB: u64 = 1 << 20;
    let path = format!(
        "{}/tests/fixtures/replay/{}",
        env!("CARGO_MANIFEST_DIR"),
        job.file
    );
    let text = std::fs::read_to_string(&path).expect("the recordings are in the repository");
    let recording: serde_json::Value = serde_json::from_str(&text).expect("a recording is JSON");
    let total_mib = recording["total_mib"].as_u64().expect("total_mib");
    let mut rules = rules();
    let original = if job.partner {
        vec![Value::Int(job.start), Value::Int(1)]
    } else {
        rules.truncate(1);
        rules[0].partner = None;
        vec![Value::Int(job.start)]
    };
    let (limits, mut plan) = policy_for(strategy);
    let (mut history, mut values, mut tried) = (Vec::new(), original.clone(), Vec::new());
    loop {
        let batch = batch_of(&values);
        tried.push(batch);
        let need_mib = job.fixed_mib + job.per_sample_mib * batch;
        let recorded = &recording["batches"][batch.to_string()];
        let (samples, message): (Vec<Option<u64>>, String) = match recorded["stderr"].as_str() {
            Some(message) => (
                recorded["gpu_mib"]
                    .as_array()
                    .expect("gpu_mib")
                    .iter()
                    .map(serde_json::Value::as_u64)
                    .collect(),
                message.to_string(),
            ),
            None if recorded.is_object() || need_mib <= total_mib => return tried,
            // Not recorded and over the card by the job's line: the weights held, the step's
            // activations the allocation that fails.
            None => (
                vec![Some(job.fixed_mib); 3],
                cuda_message(
                    (total_mib * MIB) as f64,
                    (job.fixed_mib * MIB) as f64,
                    ((need_mib - job.fixed_mib) * MIB) as f64,
                ),
            ),
        };
        let mut ramp = fit::Ramp::default();
        for (k, mib) in samples.iter().enumerate() {
            if let Some(mib) = mib {
                ramp.feed(k as f64 * INTERVAL_S, mib * MIB);
            }
        }
        let mut evidence = fit::observe(&fit::Observed {
            cause: Some(Cause::DeviceOom),
            tail: &message,
            ..fit::Observed::default()
        });
        if let Some(evidence) = evidence.as_mut() {
            let peak = samples.iter().flatten().max().map(|mib| mib * MIB);
            fit::attach_fixed(evidence, &ramp, peak);
        }
        history.push((Cause::DeviceOom, values.clone()));
        plan.evidence.push(evidence);
        match policy::decide_with(&history, &rules, &original, &limits, &plan) {
            Decision::Relaunch(next) => values = next.values,
            Decision::Stop { .. } => return tried,
        }
        if tried.len() > 30 {
            return tried;
        }
    }
}

/// The real timelines, a class of their own: failed attempts, the final batch against the
/// largest that fits (by `best`'s rule), and the batches tried.
fn real_timelines() {
    println!();
    println!("Real timelines (tests/fixtures/replay/, through the real Ramp, parser and policy):");
    println!("| job | strategy | failed attempts | final / largest feasible | batches tried |");
    println!("|---|---|---:|---:|---|");
    for job in &RECORDED {
        // The largest batch that fits by the job's line, and with a partner the rule `best`
        // applies: a divisor of the effective batch within `fit::DIVISOR_SLACK` of it.
        let fits = (143_155 - job.fixed_mib) / job.per_sample_mib;
        let largest = match (1..=fits).rev().find(|b| job.start % b == 0) {
            Some(d) if job.partner && d as f64 >= (1.0 - fit::DIVISOR_SLACK) * fits as f64 => d,
            _ => fits,
        };
        for (name, strategy) in [("halve", Strategy::Halve), ("fit", Strategy::Fit)] {
            let tried = replay_recorded(job, strategy);
            let last = *tried.last().expect("at least one attempt");
            let steps: Vec<String> = tried.iter().map(u64::to_string).collect();
            println!(
                "| {} | {name} | {} | {:.0}% | {} |",
                job.name,
                tried.len() - 1,
                100.0 * last as f64 / largest as f64,
                steps.join(" → ")
            );
        }
    }
}

fn main() {
    real_timelines();
    // Under `cargo test` (no `--bench`) the bound searches a small grid: a smoke check.
    let full = std::env::args().any(|a| a == "--bench");
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
    bare_bound(&jobs, full);
    second_run(&jobs);
}
