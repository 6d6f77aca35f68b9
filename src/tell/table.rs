//! The table printed when a run ends: one row per attempt, its batch and accumulation, a column
//! per other knob that moved, the cause, exit, duration and memory peaks, and the probe's steps
//! where it saw them. It renders what [`crate::remember::record`] kept; it prints nothing.

use std::time::Duration;

use crate::knobs::{ACCUM, BATCH};
use crate::observe::units::human_bytes;
use crate::output::console::{printable, short_duration};
use crate::remember::record::summary::AttemptRecord;

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The final table, one row per attempt.
pub fn table(attempts: &[AttemptRecord]) -> Vec<String> {
    // A column per knob that ever moved, beside the batch and accumulation columns.
    let mut moved: Vec<&str> = Vec::new();
    for name in attempts.iter().flat_map(|a| &a.changed) {
        if name != BATCH && name != ACCUM && !moved.contains(&name.as_str()) {
            moved.push(name);
        }
    }
    let mut header: Vec<String> = ["attempt", BATCH, ACCUM].map(String::from).to_vec();
    header.extend(moved.iter().map(|n| n.to_string()));
    header.extend(["cause", "exit", "duration", "peak mem", "peak gpu"].map(String::from));
    // The probe's columns where it saw steps in some attempt.
    let probed = attempts
        .iter()
        .any(|a| a.probe.as_ref().is_some_and(|p| p.seen.steps.is_some()));
    if probed {
        header.extend(["steps", "samples/s"].map(String::from));
    }
    // Text columns are left-aligned, numbers right-aligned.
    let text_columns = [3 + moved.len(), 4 + moved.len()];
    let mut rows = vec![header];
    for a in attempts {
        let exit = match (a.exit_code, a.signal) {
            (Some(code), _) => code.to_string(),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => "-".into(),
        };
        let mut row = vec![
            a.attempt.to_string(),
            or_dash(a.batch_size),
            or_dash(a.accum),
        ];
        row.extend(moved.iter().map(|name| {
            a.knobs
                .0
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-".to_string(), |(_, v)| match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => "-".to_string(),
                    other => other.to_string(),
                })
        }));
        row.extend([
            a.cause.as_str().to_string(),
            exit,
            short_duration(Duration::from_secs_f64(a.duration_s)),
            or_dash(a.peaks.memory_bytes().map(human_bytes)),
            or_dash(a.peaks.peak_gpu_bytes.map(human_bytes)),
        ]);
        if probed {
            let probe = a.probe.as_ref();
            row.extend([
                or_dash(
                    probe
                        .and_then(|p| p.seen.steps)
                        .map(crate::observe::units::thousands),
                ),
                or_dash(
                    probe
                        .and_then(|p| p.samples_per_second)
                        .map(crate::observe::units::rate),
                ),
            ]);
        }
        rows.push(
            row.into_iter()
                .map(|c| printable(&c).into_owned())
                .collect(),
        );
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    if text_columns.contains(&i) {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::outcome::Cause;
    use crate::remember::record::summary::tests::record;

    #[test]
    fn table_lines_up() {
        let rows = table(&[
            record(1, 64, Cause::DeviceOom, Some(1), None),
            record(2, 32, Cause::OomKilled, None, Some(9)),
            record(3, 16, Cause::Ok, Some(0), None),
        ]);
        assert_eq!(
            rows,
            [
                "attempt  batch  accum  cause       exit      duration  peak mem  peak gpu",
                "      1     64      -  device_oom  1            12.3s   1.5 GiB         -",
                "      2     32      -  oom_killed  signal 9     12.3s   3.0 GiB         -",
                "      3     16      -  ok          0            12.3s   4.5 GiB         -",
            ]
        );
    }

    #[test]
    fn the_probe_s_columns_group_steps_and_samples_a_second() {
        let probed = |attempt, batch, cause, steps, rate| {
            let mut r = record(attempt, batch, cause, Some(0), None);
            r.probe = Some(crate::probe::ProbeRecord {
                seen: crate::probe::ProbeSummary {
                    steps,
                    ..Default::default()
                },
                samples_per_second: rate,
            });
            r
        };
        let rows = table(&[
            probed(1, 64, Cause::DeviceOom, Some(1204), Some(12_345.4)),
            probed(2, 32, Cause::DeviceOom, Some(3), Some(2.54)),
            probed(3, 16, Cause::Ok, None, None),
        ]);
        let cells = |row: &str| -> Vec<String> {
            row.split_whitespace()
                .rev()
                .take(2)
                .map(String::from)
                .collect()
        };
        // (row, samples/s, steps): the last two columns, read from the right.
        for (row, want) in [
            (0, ["samples/s", "steps"]),
            (1, ["12,345", "1,204"]),
            (2, ["2.5", "3"]),
            (3, ["-", "-"]),
        ] {
            assert_eq!(cells(&rows[row]), want, "{rows:#?}");
        }
        let width = rows[0].len();
        assert!(rows.iter().all(|r| r.len() == width), "{rows:#?}");
    }
}
