//! The run's side of [`crate::judge::leftovers`]: when attempt 1 started (what this run made is
//! what was born after it), reading an attempt that ended as a refusal to start over the last one's
//! leftovers, and, where the policy relaunches after one, setting them aside or stopping with the
//! reason. The rules are [`crate::judge::leftovers`]'; this only carries the run's state to them
//! and tells what was done.

use std::path::Path;
use std::time::SystemTime;

use crate::decide::policy::{Decision, Next};
use crate::judge::classify::Verdict;
use crate::judge::leftovers::{self, Kind, Look, Plan, Refusal, Retried};
use crate::judge::outcome::{Cause, Outcome};
use crate::supervise::AttemptEnd;

use super::events::RunEvent;

/// What the run keeps for its leftovers between attempts.
#[derive(Debug, Default)]
pub(super) struct Aside {
    /// When attempt 1 was about to be spawned.
    started: Option<SystemTime>,
    /// The last setting aside, and the attempt that ran after it.
    retried: Option<Retried>,
}

impl Aside {
    /// An attempt is about to be spawned: the first one's time is the run's start.
    pub(super) fn attempt_starts(&mut self) {
        self.started.get_or_insert_with(SystemTime::now);
    }
}

/// The verdict on attempt `attempt`, a refusal over the last attempt's leftovers where it was
/// one (cause `leftovers`), with the refusal.
pub(super) fn judge_refusal(
    attempt: u32,
    end: &AttemptEnd,
    verdict: Verdict,
) -> (Verdict, Option<Refusal>) {
    match leftovers::read(attempt, end.ending, end.duration, verdict.cause, &end.tail) {
        Some(refusal) => (
            Verdict {
                cause: Cause::Leftovers,
                evidence: refusal.evidence(end.ending, attempt),
            },
            Some(refusal),
        ),
        None => (verdict, None),
    }
}

impl super::Run<'_> {
    /// The policy relaunches after attempt `attempt` refused (`refusal`): the refused path set
    /// aside and `next` kept, or the run stopped (failed) with the reason.
    pub(super) fn set_aside(&mut self, attempt: u32, refusal: &Refusal, next: Next) -> Decision {
        let path = refusal.path.as_deref().map(Path::new);
        let known = refusal.kind != Kind::Unknown;
        let look = match (path, self.aside.started, known) {
            (Some(path), Some(started), true) => {
                crate::guard::principal::as_user(|| Ok(leftovers::look(path, started)))
                    .unwrap_or_else(|e| {
                        Look::CannotTell(format!("cannot act as the job's user: {e}"))
                    })
            }
            _ => Look::Gone,
        };
        let plan = leftovers::decide(refusal, attempt, path, self.aside.retried, &look);
        let stop = |reason: String| Decision::Stop {
            outcome: Outcome::Failed,
            reason: Some(reason),
        };
        match plan {
            Plan::Stop(reason) => stop(reason),
            Plan::Retry => {
                self.aside.retried = Some(Retried {
                    kind: refusal.kind,
                    attempt: attempt + 1,
                });
                Decision::Relaunch(next)
            }
            Plan::SetAside { path, to } => match leftovers::set_aside(&path, &to) {
                Ok(to) => {
                    self.aside.retried = Some(Retried {
                        kind: refusal.kind,
                        attempt: attempt + 1,
                    });
                    let line = leftovers::set_aside_line(refusal, attempt, &path, &to);
                    self.observers.tell(&RunEvent::SetAside {
                        attempt,
                        from: &path,
                        to: &to,
                        line: &line,
                    });
                    Decision::Relaunch(next)
                }
                Err(e) => stop(format!(
                    "attempt {attempt} refused to start over attempt {}'s leftovers {}, which could not be set aside: {e}",
                    attempt - 1,
                    path.display()
                )),
            },
        }
    }
}
