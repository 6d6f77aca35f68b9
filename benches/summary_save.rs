//! The cost of saving summary.json after an attempt, as the run grows: oomguard saves it after
//! every attempt, so with `--retries 2000` on a job that fails in milliseconds this cost must not
//! climb with the attempts before it. Prints the time of one save after 10, 100, 1000 and 2000
//! attempts, its ratio to the first, and, as a baseline measured in the same run, the way it
//! used to be written (pretty JSON streamed into an unbuffered file, then fsync).
//!
//! `cargo bench --bench summary_save` takes the median of 50 saves per size; under `cargo test`
//! (no `--bench`) it runs 3 saves per size as a smoke check.

use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use oomguard::api::outcome::Cause;
use oomguard::api::record::RunDir;
use oomguard::api::record::{rfc3339, AttemptRecord, FinalSizes, KnobValues, PeakRecord, Summary};

fn record(attempt: u32) -> AttemptRecord {
    AttemptRecord {
        attempt,
        command: [
            "python3",
            "train.py",
            "--batch_size",
            "8",
            "--grad_accum",
            "2",
        ]
        .map(String::from)
        .to_vec(),
        batch_size: Some(8),
        accum: Some(2),
        knobs: KnobValues(vec![("batch".into(), 8.into()), ("accum".into(), 2.into())]),
        changed: vec!["batch".into(), "accum".into()],
        cause: Cause::Failed,
        evidence:
            "exit 1; last output: \"RuntimeError: the data loader could not open shard 17 of 64\""
                .into(),
        exit_code: Some(1),
        signal: None,
        started_at: rfc3339(SystemTime::now()),
        gpu_devices: Vec::new(),
        room_cut: None,
        duration_s: 0.0123,
        peaks: PeakRecord {
            peak_rss_bytes: Some(123 << 20),
            peak_pss_bytes: Some(100 << 20),
            ..PeakRecord::default()
        },
        resumed_from: None,
        hint: None,
        probe: None,
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full { 50 } else { 3 };
    let base = tempfile::tempdir().expect("temp dir");
    let run_dir =
        RunDir::create(Some(&base.path().join("run")), "python3", false).expect("run dir");
    let old_path = base.path().join("old-summary.json");
    let mut summary = Summary::new(
        &["python3".into(), "train.py".into()],
        FinalSizes {
            batch_size: Some(8),
            accum: Some(2),
        },
    );
    println!(
        "{:>9}  {:>12}  {:>7}  {:>14}  {:>7}",
        "attempts", "save", "ratio", "old way", "ratio"
    );
    let mut first: Option<(Duration, Duration)> = None;
    let mut n = 0u32;
    for size in [10u32, 100, 1000, 2000] {
        while n < size {
            n += 1;
            summary.push(record(n));
        }
        let now = median(
            (0..rounds)
                .map(|_| {
                    let t = Instant::now();
                    run_dir.save(&summary, false).expect("save");
                    t.elapsed()
                })
                .collect(),
        );
        let old = median(
            (0..rounds)
                .map(|_| {
                    let t = Instant::now();
                    let mut file = std::fs::File::create(&old_path).expect("create");
                    serde_json::to_writer_pretty(&mut file, &summary).expect("write");
                    file.write_all(b"\n").expect("write");
                    file.sync_all().expect("sync");
                    t.elapsed()
                })
                .collect(),
        );
        let (now0, old0) = *first.get_or_insert((now, old));
        println!(
            "{size:>9}  {:>10.1}µs  {:>6.1}x  {:>12.1}µs  {:>6.1}x",
            now.as_secs_f64() * 1e6,
            now.as_secs_f64() / now0.as_secs_f64(),
            old.as_secs_f64() * 1e6,
            old.as_secs_f64() / old0.as_secs_f64()
        );
    }
}
