//! Decides what happens after an attempt: relaunch (smaller, or unchanged for an allowed retry)
//! or stop with a run outcome. Pure: it sees the causes and sizes of past attempts and the
//! settings, nothing else; waiting, spawning and telling the user are other modules' jobs.

use std::time::Duration;

use serde::Serialize;

use crate::classify::Cause;

/// The batch and accumulation one attempt runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sizes {
    pub batch: Option<u64>,
    pub accum: Option<u64>,
}

/// How the whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Succeeded,
    /// Out-of-memory deaths outlasted every remedy (batch at its floor, or attempts used up).
    GaveUp,
    /// A non-memory failure: the job's own error.
    Failed,
    Interrupted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::GaveUp => "gave_up",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
        }
    }
}

/// The settings the policy reads.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub min_batch: u64,
    pub max_attempts: u32,
    /// Unchanged restarts allowed after non-memory failures.
    pub retries: u32,
    pub backoff: Duration,
    pub backoff_max: Duration,
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Relaunch {
        sizes: Sizes,
        /// Set when batch × accumulation could not equal the original exactly.
        effective_note: Option<String>,
        delay: Duration,
    },
    Stop {
        outcome: Outcome,
        /// Why, in a few words, when it is not plain from the outcome.
        reason: Option<String>,
    },
}

/// Decides after the last attempt in `history` (causes with the sizes each ran with).
/// `original` is the command's own sizes; the effective batch to keep is theirs.
pub fn decide(history: &[(Cause, Sizes)], original: Sizes, limits: &Limits) -> Decision {
    let &(cause, current) = history
        .last()
        .expect("decide is called after at least one attempt");
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
    if !memory {
        let failures = history.iter().filter(|(c, _)| !c.is_memory()).count() as u32;
        if failures <= limits.retries {
            return Decision::Relaunch {
                sizes: current,
                effective_note: None,
                delay,
            };
        }
        let reason = (limits.retries > 0).then(|| format!("--retries {} used up", limits.retries));
        return stop(Outcome::Failed, reason);
    }
    let Some(batch) = current.batch else {
        return stop(
            Outcome::GaveUp,
            Some("the command has no batch flag to reduce (name one with --batch-arg)".into()),
        );
    };
    if batch <= limits.min_batch {
        return stop(
            Outcome::GaveUp,
            Some(format!("batch already at --min-batch {}", limits.min_batch)),
        );
    }
    let new_batch = (batch / 2).max(limits.min_batch);
    let (accum, effective_note) = keep_effective(original, new_batch);
    Decision::Relaunch {
        sizes: Sizes {
            batch: Some(new_batch),
            accum,
        },
        effective_note,
        delay,
    }
}

/// The accumulation that keeps the original effective batch at `new_batch`, and a note when only
/// the nearest effective batch above the original is possible.
fn keep_effective(original: Sizes, new_batch: u64) -> (Option<u64>, Option<String>) {
    let (Some(batch0), Some(accum0)) = (original.batch, original.accum) else {
        return (original.accum, None);
    };
    // Saturating, never wrapping: `cli` refuses a command whose product does not fit in u64, so
    // saturation only guards this function; a wrapped product once relaunched with accumulation 0.
    let effective = batch0.saturating_mul(accum0);
    // An accumulation of 0 would make the job divide by zero or never step: 1 at least.
    let accum = effective.div_ceil(new_batch.max(1)).max(1);
    let reached = new_batch.saturating_mul(accum);
    let note = (new_batch.checked_mul(accum) != Some(effective)).then(|| {
        format!(
            "effective batch {reached} (was {effective}): {new_batch} does not divide {effective}, so the nearest at or above it"
        )
    });
    (Some(accum), note)
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

    const LIMITS: Limits = Limits {
        min_batch: 1,
        max_attempts: 10,
        retries: 0,
        backoff: Duration::from_secs(10),
        backoff_max: Duration::from_secs(300),
    };

    fn sizes(batch: u64, accum: Option<u64>) -> Sizes {
        Sizes {
            batch: Some(batch),
            accum,
        }
    }

    #[test]
    fn memory_deaths_halve_the_batch_and_keep_the_effective_batch() {
        // (original, current, expected next sizes, expect a note)
        let table: &[(Sizes, Sizes, Sizes, bool)] = &[
            (
                sizes(64, Some(1)),
                sizes(64, Some(1)),
                sizes(32, Some(2)),
                false,
            ),
            (
                sizes(64, Some(1)),
                sizes(32, Some(2)),
                sizes(16, Some(4)),
                false,
            ),
            (sizes(8, None), sizes(8, None), sizes(4, None), false),
            (
                sizes(6, Some(1)),
                sizes(6, Some(1)),
                sizes(3, Some(2)),
                false,
            ),
            (
                sizes(6, Some(1)),
                sizes(3, Some(2)),
                sizes(1, Some(6)),
                false,
            ),
            (
                sizes(10, Some(1)),
                sizes(5, Some(2)),
                sizes(2, Some(5)),
                false,
            ),
            (
                sizes(12, Some(1)),
                sizes(6, Some(2)),
                sizes(3, Some(4)),
                false,
            ),
            (
                sizes(7, Some(1)),
                sizes(7, Some(1)),
                sizes(3, Some(3)),
                true,
            ),
            // batch × accumulation beyond u64 saturates instead of wrapping to accumulation 0.
            (
                sizes(1 << 32, Some(1 << 32)),
                sizes(1 << 32, Some(1 << 32)),
                sizes(1 << 31, Some(1 << 33)),
                true,
            ),
            (
                sizes(u64::MAX, Some(u64::MAX)),
                sizes(3, Some(u64::MAX)),
                sizes(1, Some(u64::MAX)),
                false,
            ),
            (
                sizes(u64::MAX, Some(1)),
                sizes(u64::MAX, Some(1)),
                sizes(u64::MAX / 2, Some(3)),
                true,
            ),
        ];
        for &(original, current, want, note) in table {
            for cause in [
                Cause::DeviceOom,
                Cause::HostOom,
                Cause::WorkerKilled,
                Cause::OomKilled,
                Cause::Killed,
            ] {
                match decide(&[(cause, current)], original, &LIMITS) {
                    Decision::Relaunch {
                        sizes,
                        effective_note,
                        ..
                    } => {
                        assert_eq!(sizes, want, "{original:?} {current:?}");
                        assert_eq!(effective_note.is_some(), note, "{effective_note:?}");
                    }
                    other => panic!("{cause:?} {current:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn stops() {
        let table: &[(Cause, Sizes, Limits, Outcome)] = &[
            (Cause::Ok, sizes(8, None), LIMITS, Outcome::Succeeded),
            (
                Cause::Interrupted,
                sizes(8, None),
                LIMITS,
                Outcome::Interrupted,
            ),
            (Cause::Failed, sizes(8, None), LIMITS, Outcome::Failed),
            (Cause::DeviceOom, sizes(1, None), LIMITS, Outcome::GaveUp),
            (
                Cause::DeviceOom,
                sizes(4, None),
                Limits {
                    min_batch: 4,
                    ..LIMITS
                },
                Outcome::GaveUp,
            ),
            (
                Cause::DeviceOom,
                Sizes {
                    batch: None,
                    accum: None,
                },
                LIMITS,
                Outcome::GaveUp,
            ),
            (
                Cause::DeviceOom,
                sizes(8, None),
                Limits {
                    max_attempts: 1,
                    ..LIMITS
                },
                Outcome::GaveUp,
            ),
            (
                Cause::Failed,
                sizes(8, None),
                Limits {
                    max_attempts: 1,
                    retries: 3,
                    ..LIMITS
                },
                Outcome::Failed,
            ),
        ];
        for &(cause, current, limits, want) in table {
            match decide(&[(cause, current)], current, &limits) {
                Decision::Stop { outcome, .. } => assert_eq!(outcome, want, "{cause:?}"),
                other => panic!("{cause:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_floor_is_min_batch_not_one() {
        let limits = Limits {
            min_batch: 3,
            ..LIMITS
        };
        match decide(
            &[(Cause::DeviceOom, sizes(4, Some(1)))],
            sizes(4, Some(1)),
            &limits,
        ) {
            Decision::Relaunch { sizes: s, .. } => assert_eq!(s, sizes(3, Some(2))),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retries_restart_unchanged_then_fail() {
        let limits = Limits {
            retries: 2,
            ..LIMITS
        };
        let s = sizes(8, None);
        let mut history = vec![(Cause::Failed, s)];
        for _ in 0..2 {
            assert!(
                matches!(decide(&history, s, &limits), Decision::Relaunch { sizes, .. } if sizes == s)
            );
            history.push((Cause::Failed, s));
        }
        assert!(matches!(
            decide(&history, s, &limits),
            Decision::Stop {
                outcome: Outcome::Failed,
                ..
            }
        ));
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
