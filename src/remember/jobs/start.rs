//! The start rule: where a run's first attempt starts ([`Start`]), from the job's last success
//! ([`start_from`]) or from the attempt an oomguard that died was in ([`continue_from`]), the
//! command staying the authority over every value. Pure: it reads no file and tells no one;
//! [`super::run`] loads the job's memory and says where the run starts.

use super::memory::{value_of, CurrentRun, LastSuccess, PastAttempt};
use crate::decide::policy;
use crate::judge::outcome::Cause;
use crate::knobs::Moves;
use crate::knobs::{KnobSet, Value};
use crate::remember::record::summary::KnobValues;

/// The first attempt's values, from what worked last time.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// Every knob's value, in ladder order.
    pub values: Vec<Value>,
    /// The knobs whose value is not the command's.
    pub changed: Vec<usize>,
    /// When the remembered attempt started (RFC 3339).
    pub at: String,
    /// Set when batch × accumulation cannot equal the command's exactly.
    pub effective_note: Option<String>,
    /// What the values are.
    pub from: StartFrom,
}

/// Where the first attempt's values come from.
#[derive(Debug, Clone, PartialEq)]
pub enum StartFrom {
    /// The job's last successful attempt.
    LastSuccess,
    /// The attempt in progress when the job's last oomguard died without finishing (killed,
    /// or its machine went down): this run continues it.
    Interrupted {
        /// That attempt's number in its run.
        attempt: u32,
        /// The oomguard that died.
        pid: u32,
        run_dir: String,
    },
}

impl Start {
    /// `batch 16, accum 4`: the knobs that differ from the command, by name.
    pub fn describe(&self, knobs: &KnobSet) -> String {
        self.changed
            .iter()
            .map(|&i| format!("{} {}", knobs.knobs[i].name, self.values[i]))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where the first attempt starts given what worked last time, or `None` to start from the
/// command's own values: when the remembered knobs are not the same names, or nothing would
/// differ. The command stays the authority: an integer knob starts at the remembered value
/// only below the command's (a command asking for less gets less) and never under the knob's
/// floor; a set knob takes its set value only if that is what worked; a partner is computed
/// from the command's values so that knob × partner stays the command's effective batch.
pub fn start_from(last: &LastSuccess, knobs: &KnobSet) -> Option<Start> {
    let same_names = last.knobs.0.len() == knobs.knobs.len()
        && knobs
            .knobs
            .iter()
            .all(|k| value_of(&last.knobs, &k.name).is_some());
    if !same_names || knobs.knobs.is_empty() {
        return None;
    }
    let original = knobs.originals();
    let mut values = original.clone();
    for (i, knob) in knobs.knobs.iter().enumerate() {
        let remembered = value_of(&last.knobs, &knob.name).expect("checked above");
        match (&knob.rule.moves, &remembered, &original[i]) {
            (Moves::Step { min, .. }, Value::Int(r), Value::Int(o)) => {
                values[i] = Value::Int((*r).max(*min).min(*o));
            }
            (Moves::Set(to), r, _) if r.same(to) => values[i] = to.clone(),
            _ => {}
        }
    }
    let mut effective_note = None;
    for (i, knob) in knobs.knobs.iter().enumerate() {
        if let (Some(p), Value::Int(new)) = (knob.rule.partner, &values[i]) {
            if !values[i].same(&original[i]) {
                let (partner, note) = policy::keep_product(&original[i], &original[p], *new);
                values[p] = partner;
                effective_note = effective_note.or(note);
            }
        }
    }
    let changed: Vec<usize> = (0..values.len())
        .filter(|&i| !values[i].same(&original[i]))
        .collect();
    if changed.is_empty() {
        return None;
    }
    Some(Start {
        values,
        changed,
        at: last.at.clone(),
        effective_note,
        from: StartFrom::LastSuccess,
    })
}

/// How much faster a setting's samples a second must be than the last success's for a run to
/// start from it: below this, two measurements on a shared machine differ by its load as much
/// as by the setting.
pub const FASTER_BY: f64 = 1.05;

/// A setting that fitted and trained faster than the last success.
#[derive(Debug, Clone, PartialEq)]
pub struct Fastest {
    /// Its knob values.
    pub knobs: KnobValues,
    pub samples_per_second: f64,
    /// The last success's setting and samples a second, which it beat.
    pub last: (KnobValues, f64),
}

/// The fastest setting that fitted, where the job's memory holds the samples a second (the
/// probe's) of the last success's setting and of another that also fitted, differing from it
/// only in batch and accumulation: a run starts from it where it is [`FASTER_BY`] faster.
/// Each setting counts its latest measurement, and only while its latest attempt succeeded; a
/// setting the command would not start from (a batch above the command's) does not count.
/// The rates may come from other cards than the next run's (the job's file keeps no card
/// model). `None`: start from the last success.
pub fn fastest_fit(
    attempts: &[PastAttempt],
    last: &LastSuccess,
    knobs: &KnobSet,
) -> Option<Fastest> {
    // Batch and accumulation may differ; any other knob (a sequence length) makes another
    // job, whose speed is no comparison.
    let paired: Vec<bool> = (0..knobs.knobs.len())
        .map(|i| {
            knobs.knobs[i].rule.partner.is_some()
                || knobs.knobs.iter().any(|k| k.rule.partner == Some(i))
        })
        .collect();
    let comparable = |values: &KnobValues| {
        knobs.knobs.iter().zip(&paired).all(|(knob, &paired)| {
            match (
                value_of(values, &knob.name),
                value_of(&last.knobs, &knob.name),
            ) {
                (Some(_), Some(_)) if paired => true,
                (Some(a), Some(b)) => a.same(&b),
                _ => false,
            }
        })
    };
    // A setting the start rule would reach as it is (not clamped to the command's values).
    let reachable = |values: &KnobValues| {
        let as_last = LastSuccess {
            knobs: values.clone(),
            ..last.clone()
        };
        let start = start_from(&as_last, knobs).map_or_else(|| knobs.originals(), |s| s.values);
        knobs
            .knobs
            .iter()
            .zip(&start)
            .all(|(knob, v)| value_of(values, &knob.name).is_some_and(|r| r.same(v)))
    };
    // Each setting's latest rate, while its latest attempt succeeded: one that fitted once and
    // died later (new data, another card) fits no more, and starting there would cost every
    // run a death.
    let mut measured: Vec<(KnobValues, Option<f64>)> = Vec::new();
    for attempt in attempts.iter().filter(|a| comparable(&a.knobs)) {
        let i = match measured.iter().position(|(k, _)| k.same_as(&attempt.knobs)) {
            Some(i) => i,
            None => {
                measured.push((attempt.knobs.clone(), None));
                measured.len() - 1
            }
        };
        let rate = &mut measured[i].1;
        match attempt.cause() {
            Some(Cause::Ok) => {
                if let Some(r) = attempt.steps.and_then(|s| s.samples_per_second) {
                    *rate = Some(r);
                }
            }
            _ => *rate = None,
        }
    }
    let measured: Vec<(KnobValues, f64)> = measured
        .into_iter()
        .filter_map(|(k, rate)| Some((k, rate?)))
        .collect();
    let (_, last_rate) = measured
        .iter()
        .find(|(k, _)| k.same_as(&last.knobs))?
        .clone();
    let (knobs_fastest, rate) = measured
        .into_iter()
        .filter(|(k, _)| !k.same_as(&last.knobs) && reachable(k))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (rate >= last_rate * FASTER_BY).then(|| Fastest {
        knobs: knobs_fastest,
        samples_per_second: rate,
        last: (last.knobs.clone(), last_rate),
    })
}

/// The first attempt continues `run`, whose oomguard died mid-run: every knob takes the value
/// of the attempt that was in progress (running, or about to start after a backoff), which the
/// dead run had already stepped down to. `None` when the command (`shape`, as
/// [`command_shape`] makes it) is not the dead run's, the knobs are not the same names, or a
/// value is not of the knob's type (the command changed). As for [`start_from`], the command
/// stays the authority: an integer knob never starts above the command's own value (an admin
/// who lowered the batch after a crash gets the lower one), and a partner is then computed from
/// the command's values.
///
/// [`command_shape`]: super::name::command_shape
pub fn continue_from(run: &CurrentRun, knobs: &KnobSet, shape: &[String]) -> Option<Start> {
    if run.command.as_ref().is_some_and(|theirs| theirs != shape) {
        return None;
    }
    let same_names = run.knobs.0.len() == knobs.knobs.len()
        && knobs
            .knobs
            .iter()
            .all(|k| value_of(&run.knobs, &k.name).is_some());
    if !same_names || knobs.knobs.is_empty() {
        return None;
    }
    let original = knobs.originals();
    let mut values = Vec::with_capacity(original.len());
    for (knob, original) in knobs.knobs.iter().zip(&original) {
        let value = value_of(&run.knobs, &knob.name).expect("checked above");
        let same_type = std::mem::discriminant(&value) == std::mem::discriminant(original)
            || matches!(value, Value::Unset)
            || matches!(original, Value::Unset);
        if !same_type {
            return None;
        }
        values.push(value);
    }
    for (i, knob) in knobs.knobs.iter().enumerate() {
        let (Moves::Step { .. }, Value::Int(theirs), Value::Int(command)) =
            (&knob.rule.moves, &values[i], &original[i])
        else {
            continue;
        };
        if theirs <= command {
            continue;
        }
        let new = *command;
        values[i] = Value::Int(new);
        if let Some(p) = knob.rule.partner {
            values[p] = policy::keep_product(&original[i], &original[p], new).0;
        }
    }
    let changed = (0..values.len())
        .filter(|&i| !values[i].same(&original[i]))
        .collect();
    Some(Start {
        values,
        changed,
        at: run.started_at.clone(),
        effective_note: None,
        from: StartFrom::Interrupted {
            attempt: run.attempt,
            pid: run.process.pid,
            run_dir: run.run_dir.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::liveness::ProcessId;
    use crate::remember::jobs::memory::RunState;
    use crate::remember::jobs::name::command_shape;
    use crate::remember::jobs::name::tests::knobs_of;
    use crate::remember::record::summary::KnobValues;
    use crate::test_util::argv;

    fn last(knobs: &[(&str, serde_json::Value)]) -> LastSuccess {
        LastSuccess {
            at: "2026-11-25T10:00:00Z".into(),
            run: "/runs/1".into(),
            knobs: KnobValues(
                knobs
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .collect(),
            ),
            room_cut: None,
            room_limited: None,
        }
    }

    #[test]
    fn the_start_comes_from_what_worked_within_the_commands_bounds() {
        use serde_json::json;
        // (command, min batch, remembered, the start's batch and accum, or None)
        type Case<'a> = (
            &'a str,
            u64,
            &'a [(&'a str, serde_json::Value)],
            Option<(u64, u64)>,
        );
        let table: &[Case] = &[
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 4)),
            ),
            // Another batch in the command: the effective batch stays the command's.
            (
                "t.py --batch_size 16 --grad_accum 1",
                1,
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 8)),
            ),
            // The command asks for less than what worked: the command's.
            (
                "t.py --batch_size 1 --grad_accum 8",
                1,
                &[("batch", json!(2)), ("accum", json!(4))],
                None,
            ),
            // Never below the floor.
            (
                "t.py --batch_size 8 --grad_accum 1",
                4,
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((4, 2)),
            ),
            // Other knob names: not this knob set's memory.
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(2))],
                None,
            ),
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(2)), ("workers", json!(4))],
                None,
            ),
            // A value of the wrong type is ignored.
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!("two")), ("accum", json!(4))],
                None,
            ),
            // The same values: nothing to say.
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(8)), ("accum", json!(1))],
                None,
            ),
        ];
        for (command, min, remembered, want) in table {
            let command = argv(command);
            let knobs = knobs_of(&command, *min);
            let start = start_from(&last(remembered), &knobs);
            let got = start.as_ref().map(|s| {
                (
                    knobs.batch_of(&s.values).unwrap(),
                    knobs.accum_of(&s.values).unwrap(),
                )
            });
            assert_eq!(got, *want, "{command:?} from {remembered:?}");
        }
    }

    #[test]
    fn an_inexact_effective_batch_is_said_and_the_line_names_the_knobs() {
        use serde_json::json;
        let command = argv("t.py --batch_size 10 --grad_accum 1");
        let knobs = knobs_of(&command, 1);
        let start = start_from(&last(&[("batch", json!(4)), ("accum", json!(2))]), &knobs)
            .expect("a start below the command's");
        assert_eq!(start.describe(&knobs), "batch 4, accum 3");
        assert!(start.effective_note.as_deref().unwrap().contains("12"));
        assert_eq!(
            serde_json::to_string(&knobs.at(&start.values).json()).unwrap(),
            r#"{"batch":4,"accum":3}"#
        );
        // Without a partner, only the batch moves.
        let command = argv("t.py --batch_size 10");
        let knobs = knobs_of(&command, 1);
        let start = start_from(&last(&[("batch", json!(4))]), &knobs).unwrap();
        assert_eq!(start.describe(&knobs), "batch 4");
        assert_eq!(start.effective_note, None);
    }

    /// The fastest setting that fitted, by the samples a second the job's memory holds: only
    /// against the last success's own measurement, only settings that fitted, differ in batch
    /// and accumulation alone, and that the command would start from; each setting's latest
    /// measurement; faster by at least [`FASTER_BY`].
    #[test]
    fn a_run_starts_from_the_fastest_setting_that_fitted() {
        use crate::remember::jobs::memory::PastSteps;
        use crate::remember::record::summary::PeakRecord;
        use serde_json::json;
        let command = argv("t.py --batch_size 64 --grad_accum 1 --num_workers 4");
        let knobs = knobs_of(&command, 1);
        let names: Vec<&str> = knobs.knobs.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["workers", "batch", "accum"]);
        let values = |batch: u64, accum: u64, workers: u64| {
            KnobValues(vec![
                ("workers".to_string(), json!(workers)),
                ("batch".to_string(), json!(batch)),
                ("accum".to_string(), json!(accum)),
            ])
        };
        let attempt = |(batch, accum, workers): (u64, u64, u64),
                       cause: Cause,
                       rate: Option<f64>| PastAttempt {
            at: "t".into(),
            run: "/r".into(),
            attempt: 1,
            knobs: values(batch, accum, workers),
            cause: cause.as_str().into(),
            peaks: PeakRecord::default(),
            gpu_devices: Vec::new(),
            steps: Some(PastSteps {
                steps: 100,
                samples_per_second: rate,
                steps_peak_gpu_bytes: None,
                steps_peak_host_bytes: None,
            }),
        };
        let last = LastSuccess {
            knobs: values(32, 2, 4),
            ..self::last(&[])
        };
        let ok = Cause::Ok;
        let last_ran = |rate| attempt((32, 2, 4), ok, Some(rate));
        // (what, attempts, the start's (batch, accum) or None)
        type Row = (&'static str, Vec<PastAttempt>, Option<(u64, u64)>);
        let table: Vec<Row> = vec![
            (
                "faster by 10%",
                vec![attempt((16, 4, 4), ok, Some(330.0)), last_ran(300.0)],
                Some((16, 4)),
            ),
            (
                "faster by 3%: noise",
                vec![attempt((16, 4, 4), ok, Some(309.0)), last_ran(300.0)],
                None,
            ),
            (
                "it did not fit",
                vec![
                    attempt((16, 4, 4), Cause::DeviceOom, Some(400.0)),
                    last_ran(300.0),
                ],
                None,
            ),
            (
                "the last success unmeasured",
                vec![
                    attempt((16, 4, 4), ok, Some(400.0)),
                    attempt((32, 2, 4), ok, None),
                ],
                None,
            ),
            (
                "its latest measurement counts",
                vec![
                    attempt((16, 4, 4), ok, Some(400.0)),
                    last_ran(300.0),
                    attempt((16, 4, 4), ok, Some(290.0)),
                ],
                None,
            ),
            (
                "above the command's batch",
                vec![attempt((128, 1, 4), ok, Some(900.0)), last_ran(300.0)],
                None,
            ),
            (
                "the command's own values",
                vec![attempt((64, 1, 4), ok, Some(400.0)), last_ran(300.0)],
                Some((64, 1)),
            ),
            (
                "another knob differs",
                vec![attempt((16, 4, 2), ok, Some(400.0)), last_ran(300.0)],
                None,
            ),
            (
                "it fitted, then died at the same values: no more",
                vec![
                    attempt((16, 4, 4), ok, Some(400.0)),
                    attempt((16, 4, 4), Cause::DeviceOom, None),
                    last_ran(300.0),
                ],
                None,
            ),
            (
                "it died, then fitted again",
                vec![
                    attempt((16, 4, 4), Cause::DeviceOom, None),
                    attempt((16, 4, 4), ok, Some(400.0)),
                    last_ran(300.0),
                ],
                Some((16, 4)),
            ),
        ];
        for (what, attempts, want) in table {
            let got = fastest_fit(&attempts, &last, &knobs).map(|f| {
                let start = start_from(
                    &LastSuccess {
                        knobs: f.knobs,
                        ..last.clone()
                    },
                    &knobs,
                )
                .map_or_else(|| knobs.originals(), |s| s.values);
                (
                    knobs.batch_of(&start).unwrap(),
                    knobs.accum_of(&start).unwrap(),
                )
            });
            assert_eq!(got, want, "{what}");
        }
    }

    fn dead_run(knobs: &[(&str, serde_json::Value)]) -> CurrentRun {
        CurrentRun {
            process: ProcessId {
                pid: 77,
                pid_start_ticks: Some(1),
                boot_id: None,
                host: None,
                pid_ns: None,
            },
            run_dir: "/runs/2".into(),
            started_at: "2026-11-26T01:00:00Z".into(),
            state: RunState::Running,
            attempt: 3,
            knobs: KnobValues(
                knobs
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .collect(),
            ),
            command: None,
            last_cause: Some("device_oom".into()),
            peaks: None,
            ended_at: None,
            waiting_for: None,
            steps: None,
            seconds_per_step: None,
        }
    }

    #[test]
    fn a_dead_run_is_continued_with_its_attempts_values_as_they_were() {
        use serde_json::json;
        // (command, the dead run's knobs, the start's batch and accum, or None)
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, serde_json::Value)],
            Option<(u64, u64)>,
        );
        let table: &[Case] = &[
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 4)),
            ),
            // Taken as they were, not recomputed from the command (the dead run had stepped
            // down from it already).
            (
                "t.py --batch_size 16 --grad_accum 1",
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 4)),
            ),
            // The command's own values: continued all the same (the line still tells).
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!(8)), ("accum", json!(1))],
                Some((8, 1)),
            ),
            // Other knob names, or a value of another type: the command changed.
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!(2))],
                None,
            ),
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!("two")), ("accum", json!(4))],
                None,
            ),
            // Never above the command's own values: a command lowered after the crash wins,
            // its partner taken from the command.
            (
                "t.py --batch_size 4 --grad_accum 2",
                &[("batch", json!(64)), ("accum", json!(1))],
                Some((4, 2)),
            ),
            (
                "t.py --batch_size 4 --grad_accum 3",
                &[("batch", json!(16)), ("accum", json!(1))],
                Some((4, 3)),
            ),
        ];
        for (command, knobs, want) in table {
            let command = argv(command);
            let set = knobs_of(&command, 1);
            let shape: Vec<String> = command_shape(&command, &set)
                .iter()
                .map(|t| t.to_string_lossy().into_owned())
                .collect();
            let mut dead = dead_run(knobs);
            let start = continue_from(&dead, &set, &shape);
            // The same run with its command recorded continues the same; another command
            // (a flag more) does not continue at all.
            dead.command = Some(shape.clone());
            assert_eq!(continue_from(&dead, &set, &shape), start, "{command:?}");
            let mut other = shape.clone();
            other.extend(["--other_model".to_string(), "big".to_string()]);
            assert_eq!(continue_from(&dead, &set, &other), None, "{command:?}");
            let got = start.as_ref().map(|s| {
                (
                    set.batch_of(&s.values).unwrap(),
                    set.accum_of(&s.values).unwrap(),
                )
            });
            assert_eq!(got, *want, "{command:?} from {knobs:?}");
            if let Some(start) = start {
                assert_eq!(
                    start.from,
                    StartFrom::Interrupted {
                        attempt: 3,
                        pid: 77,
                        run_dir: "/runs/2".into()
                    }
                );
            }
        }
    }
}
