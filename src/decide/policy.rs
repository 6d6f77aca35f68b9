//! Decides what happens after an attempt: relaunch (one knob stepped down the ladder, or
//! unchanged for an allowed retry) or stop with a run outcome. Pure: it sees the causes and the
//! knob values of past attempts, the ladder's rules and the settings, nothing else. It does not
//! know where a knob lives (a flag, a variable, a key in a file): [`crate::knobs`] does; waiting,
//! spawning and telling the user are other modules' jobs.
//!
//! The ladder's rule: after a death with cause C, the first knob in order that answers C and
//! can still move takes one step. An integer knob steps by halving or by a fixed amount down to
//! its floor; a value knob steps once, to its value. A knob with a partner raises the partner so
//! that knob × partner stays what it was in the original command (the effective batch). A
//! knob that is only a partner never moves on its own. When no knob can move, the run gives up.
//!
//! How far a halving knob moves is the [`Strategy`]'s: halve, multiply by a factor, or (`fit`) the
//! largest batch the attempts' memory evidence says will fit ([`crate::decide::fit`]), halving with
//! the reason said where the evidence cannot tell. Before anything moves, a CUDA out-of-memory
//! death that the evidence names fragmentation ([`crate::decide::fit::Fragmentation`]: the probe's
//! observer, PyTorch's message, or the allocator's retries climbing) gets one relaunch at the same
//! values with the allocator's expandable segments ([`Hint`]).

use std::time::Duration;

use crate::decide::fit;
use crate::judge::outcome::{Cause, Outcome};
use crate::knobs::{Moves, Rule, Step, Value};

/// The settings the policy reads.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_attempts: u32,
    /// Unchanged restarts allowed after non-memory failures.
    pub retries: u32,
    pub backoff: Duration,
    pub backoff_max: Duration,
}

// A rung is the knob's data (`knobs`); how it steps, and why it cannot, is the ladder's rule,
// which is this module's decision.
impl Rule {
    /// The value this knob moves to from `current`, or `None` where it cannot move (at its
    /// floor, at its value already, only a partner, or not an integer where one is needed).
    fn next(&self, current: &Value) -> Option<Value> {
        match &self.moves {
            Moves::Step { step, min } => {
                let &Value::Int(now) = current else {
                    return None;
                };
                let next = match step {
                    // Halving is `fit::halve`'s alone, the floor included. Where the step lands
                    // is `step_with`'s to say (the strategy, the effective batch); whether it
                    // moves is the same without the effective batch: below `now` exactly when
                    // plain halving is.
                    Step::Halve => fit::halve(now, None, *min),
                    Step::Minus(by) => now.saturating_sub(*by).max(*min),
                };
                (next < now).then_some(Value::Int(next))
            }
            Moves::Set(value) => (!value.same(current)).then(|| value.clone()),
            Moves::Partner => None,
        }
    }

    /// Why it cannot move from `current`, for the give-up reason.
    fn stuck(&self, current: &Value) -> String {
        match &self.moves {
            Moves::Step { min, .. } => format!("{} {current} (floor {min})", self.name),
            Moves::Set(_) | Moves::Partner => format!("{} already {current}", self.name),
        }
    }
}

/// The next attempt: the knobs' values, what moved, and the wait before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Next {
    pub values: Vec<Value>,
    /// The indices of the knobs that moved, the stepped one first (empty for a retry).
    pub changed: Vec<usize>,
    /// Set when knob × partner could not equal the original exactly.
    pub effective_note: Option<String>,
    pub delay: Duration,
    /// What the step rests on, for the relaunch line (the fit's estimate, or why it halved).
    pub reason: Option<String>,
    /// A change to the attempt's environment instead of its knobs.
    pub hint: Option<Hint>,
}

/// How a halving knob moves (`--strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Strategy {
    /// The largest batch the evidence says will fit; halving where it cannot tell.
    Fit,
    #[default]
    Halve,
    /// Times this factor (0 < F < 1), at least one down.
    Factor(f64),
}

impl Strategy {
    /// Parses `fit`, `halve` or `factor:F`.
    pub fn parse(text: &str) -> Result<Strategy, String> {
        match text {
            "fit" => Ok(Strategy::Fit),
            "halve" => Ok(Strategy::Halve),
            _ => match text.strip_prefix("factor:").map(str::parse::<f64>) {
                Some(Ok(f)) if f > 0.0 && f < 1.0 => Ok(Strategy::Factor(f)),
                _ => Err(format!(
                    "`{text}` is not a strategy: use fit, halve, or factor:F with 0 < F < 1 (e.g. factor:0.75)"
                )),
            },
        }
    }
}

/// A relaunch that changes the attempt's environment, not its knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: PyTorch had the memory, in pieces.
    AllocatorFragmentation,
}

impl Hint {
    pub fn as_str(self) -> &'static str {
        match self {
            Hint::AllocatorFragmentation => "allocator_fragmentation",
        }
    }
}

/// What the step may use beyond the ladder.
#[derive(Debug, Clone, Default)]
pub struct StepPlan {
    pub strategy: Strategy,
    /// The share of the limit the fit keeps free (0.10 for `--margin 10`).
    pub margin: f64,
    /// Each attempt's memory evidence, in the order of the history.
    pub evidence: Vec<Option<fit::Evidence>>,
    /// Earlier runs of the same job (`jobs`): each attempt's knob values and evidence. A point
    /// counts only where every other knob (but the stepped one's partner) had the value it has
    /// now: a peak at another sequence length says nothing about this one.
    pub past: Vec<(Vec<Value>, fit::Evidence)>,
    /// Each attempt's memory at its completed steps (the probe's), in the order of the
    /// history; and the earlier runs' with their knob values, counted as `past` is.
    pub steps: Vec<Option<fit::StepsPeak>>,
    pub past_steps: Vec<(Vec<Value>, fit::StepsPeak)>,
    /// The fragmentation hint may still be given (not used yet, the user has not set the
    /// allocator's variable, not `--no-allocator-hint`).
    pub allocator_hint: bool,
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Relaunch(Next),
    Stop {
        outcome: Outcome,
        /// Why, in a few words, when it is not plain from the outcome.
        reason: Option<String>,
    },
}

/// Decides after the last attempt in `history` (causes with the knob values each ran with).
/// `original` holds the command's own values: the products to keep are theirs. Halving knobs
/// move by `plan`'s strategy (halve by default), and `plan` may give the fragmentation hint.
pub fn decide_with(
    history: &[(Cause, Vec<Value>)],
    rules: &[Rule],
    original: &[Value],
    limits: &Limits,
    plan: &StepPlan,
) -> Decision {
    let (cause, current) = history
        .last()
        .expect("decide is called after at least one attempt");
    let cause = *cause;
    let attempts = history.len() as u32;
    let stop = |outcome, reason: Option<String>| Decision::Stop { outcome, reason };
    match cause {
        Cause::Ok => return stop(Outcome::Succeeded, None),
        Cause::Interrupted => return stop(Outcome::Interrupted, None),
        _ => {}
    }
    let memory = cause.is_memory();
    if attempts >= limits.max_attempts {
        let outcome = if memory {
            Outcome::GaveUp
        } else {
            Outcome::Failed
        };
        return stop(
            outcome,
            Some(format!("--max-attempts {} reached", limits.max_attempts)),
        );
    }
    let relaunches_so_far = attempts - 1;
    let delay = backoff_delay(relaunches_so_far, limits);
    let unchanged = || {
        Decision::Relaunch(Next {
            values: current.clone(),
            changed: Vec::new(),
            effective_note: None,
            delay,
            reason: None,
            hint: None,
        })
    };
    if cause == Cause::Leftovers {
        // The job refused to start over the last attempt's leftovers: once they are set aside
        // (`leftovers`, which turns this into a stop where it cannot), the same sizes again at
        // once. Not a step, not one of the `--retries`, no backoff: nothing failed to wait out.
        return Decision::Relaunch(Next {
            values: current.clone(),
            changed: Vec::new(),
            effective_note: None,
            delay: Duration::ZERO,
            reason: None,
            hint: None,
        });
    }
    if !memory {
        // A refusal over leftovers was the run's own doing, not a failure of the job's.
        let failures = history
            .iter()
            .filter(|(c, _)| !c.is_memory() && *c != Cause::Leftovers)
            .count() as u32;
        if failures <= limits.retries {
            return unchanged();
        }
        let reason = (limits.retries > 0).then(|| format!("--retries {} used up", limits.retries));
        return stop(Outcome::Failed, reason);
    }
    if cause.is_taken() {
        // Other processes took the room of a job that fits alone: the same values, once the
        // room is back (the run waits for it; where it never comes, it cuts for room).
        return unchanged();
    }
    let last = plan
        .evidence
        .get(history.len() - 1)
        .and_then(Option::as_ref);
    if let Some(fragmentation) = last
        .and_then(|e| e.fragmented)
        .filter(|_| plan.allocator_hint && cause == Cause::DeviceOom)
    {
        return Decision::Relaunch(Next {
            values: current.clone(),
            changed: Vec::new(),
            effective_note: None,
            delay,
            reason: Some(format!(
                "{}: fragmentation, so first the same values with {ALLOCATOR_HINT_VAR}={ALLOCATOR_HINT_VALUE}",
                fragmentation.describe()
            )),
            hint: Some(Hint::AllocatorFragmentation),
        });
    }
    match step_with(cause, rules, original, history, plan) {
        Ok(stepped) => Decision::Relaunch(Next {
            values: stepped.values,
            changed: stepped.changed,
            effective_note: stepped.effective_note,
            delay,
            reason: stepped.reason,
            hint: None,
        }),
        Err(reason) => stop(Outcome::GaveUp, Some(reason)),
    }
}

/// The variable and value of the fragmentation hint.
pub const ALLOCATOR_HINT_VAR: &str = "PYTORCH_CUDA_ALLOC_CONF";
pub const ALLOCATOR_HINT_VALUE: &str = "expandable_segments:True";

/// One step down the ladder.
#[derive(Debug, Clone, PartialEq)]
pub struct Stepped {
    pub values: Vec<Value>,
    /// The indices of the knobs that moved, the stepped one first.
    pub changed: Vec<usize>,
    /// Set when knob × partner could not equal the original exactly.
    pub effective_note: Option<String>,
    /// What a fit's step rests on, or why it halved.
    pub reason: Option<String>,
}

/// The step after a death of `cause` from the last values in `history`: the first knob that
/// answers `cause` and can move takes one step, a halving knob as far as `plan`'s strategy says.
pub fn step_with(
    cause: Cause,
    rules: &[Rule],
    original: &[Value],
    history: &[(Cause, Vec<Value>)],
    plan: &StepPlan,
) -> Result<Stepped, String> {
    let current = &history
        .last()
        .expect("a step follows at least one attempt")
        .1;
    let answering: Vec<usize> = (0..rules.len())
        .filter(|&i| rules[i].on.contains(&cause) && rules[i].moves != Moves::Partner)
        .collect();
    let Some((i, next)) = answering
        .iter()
        .find_map(|&i| rules[i].next(&current[i]).map(|next| (i, next)))
    else {
        return Err(if rules.is_empty() {
            "the command has no batch flag to reduce (name one with --batch-arg)".to_string()
        } else if answering.is_empty() {
            format!("no knob answers {cause}")
        } else {
            let stuck: Vec<String> = answering
                .iter()
                .map(|&i| rules[i].stuck(&current[i]))
                .collect();
            format!("no knob can move: {}", stuck.join(", "))
        });
    };
    let (next, reason) = match (&rules[i].moves, &current[i]) {
        (
            Moves::Step {
                step: Step::Halve,
                min,
            },
            Value::Int(now),
        ) => {
            let effective = rules[i].partner.and_then(|p| {
                let knob = original[i].as_int()?;
                knob.checked_mul(original[p].as_int().unwrap_or(1))
            });
            let knob = Knob {
                i,
                partner: rules[i].partner,
                min: *min,
                effective,
            };
            let (to, reason) = strategy_step(&knob, *now, history, plan);
            (Value::Int(to), reason)
        }
        _ => (next, None),
    };
    let mut values = current.to_vec();
    let mut changed = vec![i];
    let mut note = None;
    if let (Some(p), Value::Int(new)) = (rules[i].partner, &next) {
        let (partner, effective_note) = keep_product(&original[i], &original[p], *new);
        if !partner.same(&values[p]) {
            values[p] = partner;
            changed.push(p);
        }
        note = effective_note;
    }
    values[i] = next;
    Ok(Stepped {
        values,
        changed,
        effective_note: note,
        reason,
    })
}

/// Where a halving knob `i` goes from `now` (above `min`) under the plan's strategy, and the
/// reason for the relaunch line where there is one to give.
fn strategy_step(
    knob: &Knob,
    now: u64,
    history: &[(Cause, Vec<Value>)],
    plan: &StepPlan,
) -> (u64, Option<String>) {
    let min = knob.min;
    let halved = fit::halve(now, knob.effective, min);
    match plan.strategy {
        Strategy::Halve => (halved, None),
        Strategy::Factor(f) => {
            let to = ((now as f64 * f).floor() as u64).min(now - 1).max(min);
            (to, None)
        }
        Strategy::Fit => match fit_step(knob, halved, history, plan) {
            Ok(estimate) => (estimate.batch, Some(estimate.reason)),
            Err(why) => (halved, Some(format!("halving: {why}"))),
        },
    }
}

/// The knob a strategy steps: its index, partner, floor and the product it keeps.
struct Knob {
    i: usize,
    partner: Option<usize>,
    min: u64,
    effective: Option<u64>,
}

/// The fit's batch for the knob from the attempts' evidence in the last attempt's memory: this
/// run's, and earlier runs' of the same job at the same other settings.
fn fit_step(
    knob: &Knob,
    halved: u64,
    history: &[(Cause, Vec<Value>)],
    plan: &StepPlan,
) -> Result<fit::Estimate, String> {
    let &Knob {
        i,
        partner,
        min,
        effective,
    } = knob;
    let last = plan
        .evidence
        .get(history.len() - 1)
        .and_then(Option::as_ref)
        .filter(|e| e.failed)
        .ok_or("the attempt left no numbers to estimate from (no out-of-memory message with sizes, no cgroup limit and peak)")?;
    let (limit_bytes, limit_name) = last.limit.ok_or("the limit that applied is unknown")?;
    let (_, current) = history.last().expect("decide runs after an attempt");
    let same_setting = |values: &[Value]| {
        values.len() == current.len()
            && (0..current.len())
                .filter(|&j| j != i && Some(j) != partner)
                .all(|j| values[j].same(&current[j]))
    };
    let points: Vec<fit::Point> =
        here_and_before(history, &plan.evidence, &plan.past, &same_setting)
            .filter(|(_, e)| e.memory == last.memory)
            .filter_map(|(values, e)| {
                Some(fit::Point {
                    batch: values.get(i)?.as_int()?,
                    bytes: e.bytes,
                    failed: e.failed,
                })
            })
            .collect();
    // This run's steps too only at the same other settings (a ladder may have moved another
    // knob earlier in the run): a line through two settings' steps means nothing.
    let steps: Vec<(u64, u64)> =
        here_and_before(history, &plan.steps, &plan.past_steps, &same_setting)
            .filter(|(values, _)| same_setting(values))
            .filter_map(|(values, s)| Some((values.get(i)?.as_int()?, s.bytes(last.memory)?)))
            .collect();
    let request = fit::Request {
        points: &points,
        limit_bytes,
        limit_name,
        margin: plan.margin,
        min,
        effective,
        fixed_bytes: fixed_seen(last, &plan.evidence),
        halved,
    };
    // Completed steps at two batches give the line exactly; else the bounds estimate it.
    match fit::exact(&request, &steps) {
        Some(exact) => Ok(exact),
        None => fit::estimate(&request),
    }
}

/// What this run's attempts showed (`here`, in history order, with the values each ran with)
/// and what earlier runs' showed at the same other settings (`before`).
fn here_and_before<'a, T>(
    history: &'a [(Cause, Vec<Value>)],
    here: &'a [Option<T>],
    before: &'a [(Vec<Value>, T)],
    same_setting: &'a impl Fn(&[Value]) -> bool,
) -> impl Iterator<Item = (&'a [Value], &'a T)> {
    let here = history
        .iter()
        .zip(here)
        .filter_map(|((_, values), seen)| Some((values.as_slice(), seen.as_ref()?)));
    let before = before
        .iter()
        .filter(move |(values, _)| same_setting(values))
        .map(|(values, seen)| (values.as_slice(), seen));
    here.chain(before)
}

/// The fixed part seen before the first step: the last attempt's, else the latest one this run
/// saw in the same memory (it does not depend on the batch).
fn fixed_seen(last: &fit::Evidence, evidence: &[Option<fit::Evidence>]) -> Option<u64> {
    last.fixed_bytes.or_else(|| {
        evidence
            .iter()
            .rev()
            .flatten()
            .filter(|e| e.memory == last.memory)
            .find_map(|e| e.fixed_bytes)
    })
}

/// The partner value that keeps the original product at `new`, and a note when only the
/// nearest product above the original is possible. A partner absent from the command counts
/// as 1 (no accumulation). Also used by `jobs` to start a run from remembered values.
pub fn keep_product(original: &Value, partner: &Value, new: u64) -> (Value, Option<String>) {
    let Value::Int(knob0) = *original else {
        return (partner.clone(), None);
    };
    let partner0 = match partner {
        Value::Int(n) => *n,
        _ => 1,
    };
    // Saturating, never wrapping: `knobs` refuses a command whose product does not fit in u64,
    // so saturation only guards this function; a wrapped product once relaunched with
    // accumulation 0.
    let effective = knob0.saturating_mul(partner0);
    // An accumulation of 0 would make the job divide by zero or never step: 1 at least.
    let accum = effective.div_ceil(new.max(1)).max(1);
    let reached = new.saturating_mul(accum);
    let note = (new.checked_mul(accum) != Some(effective)).then(|| {
        format!(
            "effective batch {reached} (was {effective}): {new} does not divide {effective}, so the nearest at or above it"
        )
    });
    (Value::Int(accum), note)
}

/// The wait before relaunch number `n` (0-based): `backoff`, doubling, capped at `backoff_max`.
pub fn backoff_delay(n: u32, limits: &Limits) -> Duration {
    let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
    limits
        .backoff
        .saturating_mul(factor)
        .min(limits.backoff_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decides after the last attempt in `history` (causes with the knob values each ran with).
    /// `original` holds the command's own values: the products to keep are theirs. Halving knobs
    /// halve (the default [`StepPlan`]).
    fn decide(
        history: &[(Cause, Vec<Value>)],
        rules: &[Rule],
        original: &[Value],
        limits: &Limits,
    ) -> Decision {
        decide_with(history, rules, original, limits, &StepPlan::default())
    }
    use crate::knobs::default_causes;

    const LIMITS: Limits = Limits {
        max_attempts: 10,
        retries: 0,
        backoff: Duration::from_secs(10),
        backoff_max: Duration::from_secs(300),
    };

    fn int(n: u64) -> Value {
        Value::Int(n)
    }

    /// The automatic pair: a batch halved down to `min`, raising accumulation as its partner.
    fn batch_accum(min: u64) -> Vec<Rule> {
        vec![
            Rule {
                name: "batch".into(),
                moves: Moves::Step {
                    step: Step::Halve,
                    min,
                },
                on: default_causes(),
                partner: Some(1),
            },
            Rule {
                name: "accum".into(),
                moves: Moves::Partner,
                on: default_causes(),
                partner: None,
            },
        ]
    }

    /// A batch with no partner.
    fn batch_alone() -> Vec<Rule> {
        let mut rules = batch_accum(1);
        rules.truncate(1);
        rules[0].partner = None;
        rules
    }

    fn relaunch(d: Decision) -> (Vec<Value>, Vec<usize>, Option<String>) {
        match d {
            Decision::Relaunch(next) => (next.values, next.changed, next.effective_note),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn memory_deaths_halve_the_batch_and_keep_the_effective_batch() {
        // (original (batch, accum), current, expected next, expect a note)
        type Pair = (u64, u64);
        let table: &[(Pair, Pair, Pair, bool)] = &[
            ((64, 1), (64, 1), (32, 2), false),
            ((64, 1), (32, 2), (16, 4), false),
            ((6, 1), (6, 1), (3, 2), false),
            ((6, 1), (3, 2), (1, 6), false),
            ((10, 1), (5, 2), (2, 5), false),
            ((12, 1), (6, 2), (3, 4), false),
            ((7, 1), (7, 1), (3, 3), true),
            // batch × accumulation beyond u64 saturates instead of wrapping to accumulation 0.
            (
                (1 << 32, 1 << 32),
                (1 << 32, 1 << 32),
                (1 << 31, 1 << 33),
                true,
            ),
            ((u64::MAX, u64::MAX), (3, u64::MAX), (1, u64::MAX), false),
            // u64::MAX is divisible by 3: a third, exact, found in a few steps.
            ((u64::MAX, 1), (u64::MAX, 1), (u64::MAX / 3, 3), false),
            // Halving takes the largest divisor of the effective batch from half down to a
            // quarter: 100 → 50 → 25 → 10 × 10, not 12 × 9 (108).
            ((100, 1), (100, 1), (50, 2), false),
            ((100, 1), (50, 2), (25, 4), false),
            ((100, 1), (25, 4), (10, 10), false),
            ((100, 1), (10, 10), (5, 20), false),
            ((120, 1), (120, 1), (60, 2), false),
            ((96, 1), (24, 4), (12, 8), false),
            // 127 is prime: no divisor from 32 to 63, so half, inexact.
            ((127, 1), (127, 1), (63, 3), true),
            // 36 at 18: 9 divides 36.
            ((36, 1), (18, 2), (9, 4), false),
            // 81 at 81: 27 (a third) before 40.
            ((81, 1), (81, 1), (27, 3), false),
        ];
        for &(original, current, want, note) in table {
            for cause in default_causes() {
                let history = [(cause, vec![int(current.0), int(current.1)])];
                let originals = [int(original.0), int(original.1)];
                let (values, changed, effective_note) =
                    relaunch(decide(&history, &batch_accum(1), &originals, &LIMITS));
                assert_eq!(
                    values,
                    [int(want.0), int(want.1)],
                    "{original:?} {current:?}"
                );
                assert_eq!(changed[0], 0);
                assert_eq!(effective_note.is_some(), note, "{effective_note:?}");
            }
        }
    }

    #[test]
    fn a_gpu_taken_death_relaunches_at_the_same_values() {
        let history = [(Cause::GpuTaken, vec![int(64), int(1)])];
        let (values, changed, note) = relaunch(decide(
            &history,
            &batch_accum(1),
            &[int(64), int(1)],
            &LIMITS,
        ));
        assert_eq!(
            (values, changed, note),
            (vec![int(64), int(1)], vec![], None)
        );
        // It is still a memory death: the attempts' limit ends the run as given up.
        let limits = Limits {
            max_attempts: 1,
            ..LIMITS
        };
        assert!(matches!(
            decide(&history, &batch_accum(1), &[int(64), int(1)], &limits),
            Decision::Stop {
                outcome: Outcome::GaveUp,
                ..
            }
        ));
    }

    #[test]
    fn a_batch_without_partner_just_halves() {
        let rules = &batch_alone();
        let (values, changed, note) = relaunch(decide(
            &[(Cause::DeviceOom, vec![int(8)])],
            rules,
            &[int(8)],
            &LIMITS,
        ));
        assert_eq!((values, changed, note), (vec![int(4)], vec![0], None));
    }

    #[test]
    fn a_partner_absent_from_the_command_counts_as_one() {
        let (values, ..) = relaunch(decide(
            &[(Cause::OomKilled, vec![int(8), Value::Unset])],
            &batch_accum(1),
            &[int(8), Value::Unset],
            &LIMITS,
        ));
        assert_eq!(values, [int(4), int(2)]);
    }

    /// Seed 001 and 004: the first knob in order that answers the cause and can move takes one
    /// step; knobs at their floor or value are passed over; then the run gives up.
    #[test]
    fn the_ladder_steps_the_first_knob_that_answers_and_can_move() {
        let rules = vec![
            Rule {
                name: "workers".into(),
                moves: Moves::Step {
                    step: Step::Halve,
                    min: 0,
                },
                on: vec![Cause::WorkerKilled],
                partner: None,
            },
            Rule {
                name: "batch".into(),
                moves: Moves::Step {
                    step: Step::Minus(1),
                    min: 1,
                },
                on: default_causes(),
                partner: None,
            },
            Rule {
                name: "pin_memory".into(),
                moves: Moves::Set(Value::Bool(false)),
                on: vec![Cause::OomKilled, Cause::WorkerKilled],
                partner: None,
            },
            Rule {
                name: "epochs".into(),
                moves: Moves::Step {
                    step: Step::Halve,
                    min: 1,
                },
                on: default_causes(),
                partner: None,
            },
        ];
        let original = vec![int(2), int(2), Value::Bool(true), int(3)];
        // (cause, current, expected values or the give-up reason's start)
        type Row = (Cause, [Value; 4], Result<[Value; 4], &'static str>);
        let table: &[Row] = &[
            (
                Cause::WorkerKilled,
                [int(2), int(2), Value::Bool(true), int(3)],
                Ok([int(1), int(2), Value::Bool(true), int(3)]),
            ),
            (
                Cause::WorkerKilled,
                [int(0), int(2), Value::Bool(true), int(3)],
                Ok([int(0), int(1), Value::Bool(true), int(3)]),
            ),
            (
                Cause::WorkerKilled,
                [int(0), int(1), Value::Bool(true), int(3)],
                Ok([int(0), int(1), Value::Bool(false), int(3)]),
            ),
            // device_oom: workers and pin_memory do not answer it.
            (
                Cause::DeviceOom,
                [int(2), int(1), Value::Bool(true), int(3)],
                Ok([int(2), int(1), Value::Bool(true), int(1)]),
            ),
            (
                Cause::DeviceOom,
                [int(2), int(1), Value::Bool(true), int(1)],
                Err("no knob can move: batch 1 (floor 1), epochs 1 (floor 1)"),
            ),
            (
                Cause::Failed,
                [int(2), int(1), Value::Bool(true), int(1)],
                Err(""),
            ),
        ];
        for (cause, current, want) in table {
            let history = [(*cause, current.to_vec())];
            match (decide(&history, &rules, &original, &LIMITS), want) {
                (Decision::Relaunch(next), Ok(want)) => {
                    assert_eq!(next.values, want.to_vec(), "{cause:?} {current:?}")
                }
                (Decision::Stop { reason, .. }, Err(want)) => assert!(
                    reason.clone().unwrap_or_default().starts_with(want),
                    "{cause:?}: {reason:?}"
                ),
                (other, want) => panic!("{cause:?} {current:?}: {other:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn stops() {
        let rules = batch_accum(1);
        let with_min = batch_accum(4);
        let none: Vec<Rule> = Vec::new();
        // (cause, batch value, rules, limits, outcome)
        let table: &[(Cause, u64, &[Rule], Limits, Outcome)] = &[
            (Cause::Ok, 8, &rules, LIMITS, Outcome::Succeeded),
            (Cause::Interrupted, 8, &rules, LIMITS, Outcome::Interrupted),
            (Cause::Failed, 8, &rules, LIMITS, Outcome::Failed),
            (Cause::DeviceOom, 1, &rules, LIMITS, Outcome::GaveUp),
            (Cause::DeviceOom, 4, &with_min, LIMITS, Outcome::GaveUp),
            (Cause::DeviceOom, 8, &none, LIMITS, Outcome::GaveUp),
            (
                Cause::DeviceOom,
                8,
                &rules,
                Limits {
                    max_attempts: 1,
                    ..LIMITS
                },
                Outcome::GaveUp,
            ),
            (
                Cause::Failed,
                8,
                &rules,
                Limits {
                    max_attempts: 1,
                    retries: 3,
                    ..LIMITS
                },
                Outcome::Failed,
            ),
        ];
        for &(cause, batch, rules, limits, want) in table {
            let values: Vec<Value> = [int(batch), int(1)][..rules.len()].to_vec();
            match decide(&[(cause, values.clone())], rules, &values, &limits) {
                Decision::Stop { outcome, .. } => assert_eq!(outcome, want, "{cause:?}"),
                other => panic!("{cause:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_refusal_over_leftovers_retries_the_same_sizes_at_once_and_is_no_failure() {
        let rules = batch_accum(1);
        let at8 = vec![int(8), int(1)];
        let at4 = vec![int(4), int(2)];
        // (history, what follows: Some(values) for a relaunch at them with no delay, None for
        // the outcome Failed)
        type Row<'a> = (&'a [(Cause, &'a Vec<Value>)], Option<&'a Vec<Value>>);
        let table: &[Row] = &[
            // After an OOM step the refusal is retried at the stepped sizes, not stepped again.
            (
                &[(Cause::DeviceOom, &at8), (Cause::Leftovers, &at4)],
                Some(&at4),
            ),
            // With --retries 0, a later failure still gets no retry: the refusal used none.
            (
                &[
                    (Cause::DeviceOom, &at8),
                    (Cause::Leftovers, &at4),
                    (Cause::Failed, &at4),
                ],
                None,
            ),
        ];
        for (history, want) in table {
            let history: Vec<(Cause, Vec<Value>)> =
                history.iter().map(|(c, v)| (*c, (*v).clone())).collect();
            match (decide(&history, &rules, &at8, &LIMITS), want) {
                (Decision::Relaunch(next), Some(want)) => {
                    assert_eq!(&next.values, *want, "{history:?}");
                    assert!(next.changed.is_empty(), "{history:?}");
                    assert_eq!(next.delay, Duration::ZERO, "{history:?}");
                }
                (Decision::Stop { outcome, .. }, None) => {
                    assert_eq!(outcome, Outcome::Failed, "{history:?}")
                }
                (other, _) => panic!("{history:?}: {other:?}"),
            }
        }
        // With --retries 1 the later failure gets its one retry (the refusal did not spend it).
        let history = vec![
            (Cause::DeviceOom, at8.clone()),
            (Cause::Leftovers, at4.clone()),
            (Cause::Failed, at4.clone()),
        ];
        let one = Limits {
            retries: 1,
            ..LIMITS
        };
        assert!(matches!(
            decide(&history, &rules, &at8, &one),
            Decision::Relaunch(_)
        ));
        // --max-attempts still ends the run, as a failure.
        let last = Limits {
            max_attempts: 2,
            ..LIMITS
        };
        match decide(&history[..2], &rules, &at8, &last) {
            Decision::Stop { outcome, .. } => assert_eq!(outcome, Outcome::Failed),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_floor_is_the_knobs_min_not_one() {
        let (values, ..) = relaunch(decide(
            &[(Cause::DeviceOom, vec![int(4), int(1)])],
            &batch_accum(3),
            &[int(4), int(1)],
            &LIMITS,
        ));
        assert_eq!(values, [int(3), int(2)]);
    }

    #[test]
    fn retries_restart_unchanged_then_fail() {
        let limits = Limits {
            retries: 2,
            ..LIMITS
        };
        let s = vec![int(8)];
        let rules = &batch_alone();
        let mut history = vec![(Cause::Failed, s.clone())];
        for _ in 0..2 {
            let (values, changed, _) = relaunch(decide(&history, rules, &s, &limits));
            assert_eq!((values, changed), (s.clone(), vec![]));
            history.push((Cause::Failed, s.clone()));
        }
        assert!(matches!(
            decide(&history, rules, &s, &limits),
            Decision::Stop {
                outcome: Outcome::Failed,
                ..
            }
        ));
    }

    /// A batch alone, and a sequence length that halves down to 128: a knob whose other value
    /// makes another job (its points are not this one's).
    fn batch_and_sequence() -> Vec<Rule> {
        let mut rules = batch_alone();
        rules.push(Rule {
            name: "seq".into(),
            moves: Moves::Step {
                step: Step::Halve,
                min: 128,
            },
            on: default_causes(),
            partner: None,
        });
        rules
    }

    fn gpu_failure(need_gib: u64, fragmented: Option<fit::Fragmentation>) -> Option<fit::Evidence> {
        Some(fit::Evidence {
            memory: fit::Memory::Gpu,
            failed: true,
            bytes: need_gib << 30,
            limit: Some((24 << 30, "GPU")),
            fragmented,
            fixed_bytes: None,
        })
    }

    #[test]
    fn strategies_move_a_halving_batch() {
        // (strategy, evidence of the one failure at 120 × 1, expected (batch, accum), reason start)
        type Row = (
            Strategy,
            Option<fit::Evidence>,
            (u64, u64),
            Option<&'static str>,
        );
        let table: Vec<Row> = vec![
            (Strategy::Halve, gpu_failure(63, None), (60, 2), None),
            (Strategy::Factor(0.9), None, (108, 2), None),
            (Strategy::Factor(0.999), None, (119, 2), None),
            (
                Strategy::Fit,
                gpu_failure(63, None),
                (40, 3),
                Some("GPU 24.0 GiB, need at 120"),
            ),
            (
                Strategy::Fit,
                None,
                (60, 2),
                Some("halving: the attempt left no numbers"),
            ),
            // Just over the card: no scale to read.
            (
                Strategy::Fit,
                gpu_failure(25, None),
                (60, 2),
                Some("halving: GPU 24.0 GiB, need at 120 ≥ 25.0 GiB"),
            ),
        ];
        for (strategy, evidence, want, reason) in table {
            let plan = StepPlan {
                strategy,
                margin: 0.10,
                evidence: vec![evidence],
                ..StepPlan::default()
            };
            let history = [(Cause::DeviceOom, vec![int(120), int(1)])];
            let d = decide_with(
                &history,
                &batch_accum(1),
                &[int(120), int(1)],
                &LIMITS,
                &plan,
            );
            let Decision::Relaunch(next) = d else {
                panic!("{strategy:?}: {d:?}")
            };
            assert_eq!(next.values, [int(want.0), int(want.1)], "{strategy:?}");
            match (reason, &next.reason) {
                (None, None) => {}
                (Some(start), Some(got)) => assert!(got.starts_with(start), "{got}"),
                other => panic!("{strategy:?}: {other:?}"),
            }
        }
    }

    /// A failure just over the card has no scale; a success of an earlier run of the job at the
    /// same other settings fixes the line, so the fit need not halve. A point at another
    /// sequence length is not taken.
    #[test]
    fn earlier_runs_at_the_same_settings_are_points() {
        let rules = batch_and_sequence();
        let success = |gib: u64| fit::Evidence {
            memory: fit::Memory::Gpu,
            failed: false,
            bytes: gib << 30,
            limit: None,
            fragmented: None,
            fixed_bytes: None,
        };
        let history = [(Cause::DeviceOom, vec![int(120), int(512)])];
        let original = [int(120), int(512)];
        let step = |past: Vec<(Vec<Value>, fit::Evidence)>| {
            let plan = StepPlan {
                strategy: Strategy::Fit,
                margin: 0.10,
                evidence: vec![gpu_failure(25, None)],
                past,
                ..StepPlan::default()
            };
            match decide_with(&history, &rules, &original, &LIMITS, &plan) {
                Decision::Relaunch(next) => (next.values[0].as_int().unwrap(), next.reason),
                other => panic!("{other:?}"),
            }
        };
        // Alone, or with a point at another sequence length: halved.
        assert_eq!(step(Vec::new()).0, 60);
        let elsewhere = vec![(vec![int(30), int(256)], success(6))];
        assert_eq!(step(elsewhere).0, 60);
        // With the job's earlier success at 30 (12 GiB): the line through both points,
        // (21.6 − 7.7) / 0.144 ≈ 96, further than halving.
        let (batch, reason) = step(vec![(vec![int(30), int(512)], success(12))]);
        assert_eq!(batch, 96, "{reason:?}");
        assert!(reason.unwrap_or_default().contains("12.0 GiB at 30 fitted"));
    }

    /// The probe's completed steps at two batches fix the line exactly. A card of 24 GiB, a
    /// failure at 120 just over it (25 GiB: no scale, today's rules halve to 60), and an
    /// earlier run's steps at the same sequence length, 7 GiB at 20 and 11 GiB at 40: 0.2 GiB
    /// a sample and 3 GiB fixed, which explain the failure (27 GiB at 120), so (21.6 − 3) /
    /// 0.2 → 93. Steps at another sequence length are no point. Within one run, attempts that
    /// died after completed steps at batches the line says fit died of something beyond the
    /// steps: today's rules.
    #[test]
    fn completed_steps_at_two_batches_fit_the_line_exactly() {
        let rules = batch_and_sequence();
        let peak = |gib: u64| fit::StepsPeak {
            gpu_bytes: Some(gib << 30),
        };
        let at = |batch: u64, seq: u64| vec![int(batch), int(seq)];
        struct Row {
            history: Vec<(Cause, Vec<Value>)>,
            evidence: Vec<Option<fit::Evidence>>,
            steps: Vec<Option<fit::StepsPeak>>,
            past_steps: Vec<(Vec<Value>, fit::StepsPeak)>,
            want: u64,
            reason: &'static str,
        }
        let died_at_120 = vec![(Cause::DeviceOom, at(120, 512))];
        let rows = [
            Row {
                history: died_at_120.clone(),
                evidence: vec![gpu_failure(25, None)],
                steps: vec![None],
                past_steps: vec![(at(20, 512), peak(7)), (at(40, 512), peak(11))],
                want: 93,
                reason: "GPU 24.0 GiB, completed steps took 7.0 GiB at 20 and 11.0 GiB at 40, per sample 204.8 MiB, fixed 3.0 GiB: trying 93",
            },
            Row {
                history: died_at_120.clone(),
                evidence: vec![gpu_failure(25, None)],
                steps: vec![None],
                past_steps: vec![(at(20, 256), peak(7)), (at(40, 512), peak(11))],
                want: 60,
                reason: "halving: GPU 24.0 GiB, need at 120 ≥ 25.0 GiB",
            },
            // Both died after their steps (20 GiB of them at 120, 11 GiB at 60), just over the
            // card: the line says both fit.
            Row {
                history: vec![
                    (Cause::DeviceOom, at(120, 512)),
                    (Cause::DeviceOom, at(60, 512)),
                ],
                evidence: vec![gpu_failure(25, None), gpu_failure(25, None)],
                steps: vec![Some(peak(20)), Some(peak(11))],
                past_steps: Vec::new(),
                want: 30,
                reason: "halving: ",
            },
        ];
        for row in rows {
            let plan = StepPlan {
                strategy: Strategy::Fit,
                margin: 0.10,
                evidence: row.evidence,
                steps: row.steps,
                past_steps: row.past_steps,
                ..StepPlan::default()
            };
            let original = [int(120), int(512)];
            let Decision::Relaunch(next) =
                decide_with(&row.history, &rules, &original, &LIMITS, &plan)
            else {
                panic!("relaunches")
            };
            let reason = next.reason.unwrap_or_default();
            assert_eq!(next.values[0], int(row.want), "{reason}");
            assert!(reason.starts_with(row.reason), "{reason}");
        }
    }

    #[test]
    fn fragmentation_relaunches_unchanged_once_when_allowed() {
        let history = [(Cause::DeviceOom, vec![int(16), int(1)])];
        let held = fit::Fragmentation::Unallocated {
            reserved_bytes: 3 << 30,
            tried_bytes: 512 << 20,
        };
        let retries = fit::Fragmentation::RetriesClimbing {
            reports: 4,
            retries: 37,
        };
        // (cause, hint allowed, fragmented, the hint's reason: None where it is not given)
        let table = [
            (
                Cause::DeviceOom,
                true,
                Some(held),
                Some("3.0 GiB reserved but unallocated, at least the 512.0 MiB"),
            ),
            (
                Cause::DeviceOom,
                true,
                Some(retries),
                Some("more at each of its last 4 steps seen (37 retries in all)"),
            ),
            (Cause::DeviceOom, false, Some(held), None),
            (Cause::DeviceOom, true, None, None),
            (Cause::OomKilled, true, Some(held), None),
        ];
        for (cause, allowed, fragmented, want) in table {
            let plan = StepPlan {
                strategy: Strategy::Fit,
                margin: 0.10,
                evidence: vec![gpu_failure(30, fragmented)],
                allocator_hint: allowed,
                ..StepPlan::default()
            };
            let history = [(cause, history[0].1.clone())];
            let Decision::Relaunch(next) = decide_with(
                &history,
                &batch_accum(1),
                &[int(16), int(1)],
                &LIMITS,
                &plan,
            ) else {
                panic!("relaunches")
            };
            let what = format!("{cause:?} {allowed} {fragmented:?}");
            assert_eq!(next.hint.is_some(), want.is_some(), "{what}");
            assert_eq!(next.values == [int(16), int(1)], want.is_some(), "{what}");
            if let Some(want) = want {
                let reason = next.reason.unwrap_or_default();
                assert!(reason.contains(want), "{what}: {reason}");
                assert!(reason.contains(": fragmentation, so first the same values with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), "{reason}");
            }
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let secs: Vec<u64> = (0..8)
            .map(|n| backoff_delay(n, &LIMITS).as_secs())
            .collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300, 300]);
        let zero = Limits {
            backoff: Duration::ZERO,
            ..LIMITS
        };
        assert_eq!(backoff_delay(40, &zero), Duration::ZERO);
    }
}
