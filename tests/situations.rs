//! The situations of README.md (../shared/SCENARIOS.md), end to end: the real binary runs
//! tests/fixtures/situation_job.py, which reads its settings where each situation keeps them
//! (flags, a YAML file picked inside the script, config.py class attributes read by two rank
//! processes, an environment variable), records what every attempt saw, and dies of
//! out-of-memory until its settings fit. Each test checks the right knob moved in the right
//! order, the effective batch was kept where a partner exists, summary.json names the knobs, and
//! the user's files are byte for byte what they were.

mod util;

use std::path::Path;

use serde_json::{json, Value};
use util::{stderr_of, Project};

/// One setting across attempts.
fn column(seen: &[Value], key: &str) -> Vec<Value> {
    seen.iter().map(|s| s[key].clone()).collect()
}

/// summary.json's `knobs` and `changed` of every attempt.
fn knobs_and_changed(summary: &Value) -> Vec<(Value, Value)> {
    summary["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["knobs"].clone(), a["changed"].clone()))
        .collect()
}

/// Seed 000 (ACT): `--batch_size` and no accumulation flag. The batch halves until it fits and
/// the user hears once that the effective batch shrinks with it.
#[test]
fn act_halves_the_batch_and_says_the_effective_batch_shrinks() {
    let p = Project::new();
    let out = p.run(
        &[],
        &[
            "--task_name",
            "sim_transfer_cube",
            "--batch_size",
            "8",
            "--chunk_size",
            "20",
        ],
        &[("JOB_FITS", "s['batch_size'] <= 2")],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        column(&p.seen(), "batch_size"),
        [json!(8), json!(4), json!(2)]
    );
    assert_eq!(
        stderr.matches("effective batch shrinks").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        knobs_and_changed(&p.sb.summary()),
        [
            (json!({"batch": 8}), json!([])),
            (json!({"batch": 4}), json!(["batch"])),
            (json!({"batch": 2}), json!(["batch"])),
        ]
    );
}

/// A DataLoader worker killed: a `--num_workers` flag is halved (to 0 at most) before the batch
/// is touched, and only for that cause.
#[test]
fn a_killed_worker_halves_the_workers_before_the_batch() {
    let p = Project::new();
    let out = p.run(
        &[],
        &["--batch_size", "8", "--num_workers", "4"],
        &[
            ("JOB_FITS", "s['num_workers'] <= 1"),
            ("JOB_DEATH", "worker_killed"),
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = p.seen();
    assert_eq!(column(&seen, "num_workers"), [json!(4), json!(2), json!(1)]);
    assert_eq!(column(&seen, "batch_size"), [json!(8), json!(8), json!(8)]);
    assert!(
        stderr.contains("attempt 2 in 0.0s: --num_workers 4→2"),
        "{stderr}"
    );
    let summary = p.sb.summary();
    assert_eq!(
        summary["attempts"][2]["knobs"],
        json!({"workers": 1, "batch": 8})
    );
    // The table shows the workers column, since that knob moved.
    assert!(
        stderr
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "oomguard:",
                    "attempt",
                    "batch",
                    "accum",
                    "workers",
                    "cause",
                    "exit",
                    "duration",
                    "peak",
                    "mem",
                    "peak",
                    "gpu"
                ]),
        "{stderr}"
    );
    // A device OOM does not touch the workers: the batch moves.
    let p = Project::new();
    let out = p.run(
        &[],
        &["--batch_size", "8", "--num_workers", "4"],
        &[("JOB_FITS", "s['batch_size'] <= 4")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(column(&p.seen(), "num_workers"), [json!(4), json!(4)]);
}

/// The user's file is byte for byte what it was.
fn assert_untouched(path: &Path, before: &[u8]) {
    assert_eq!(
        std::fs::read(path).expect("the user's file is still there"),
        before,
        "{} changed",
        path.display()
    );
}

/// Seed 003: settings as class attributes in config.py, read by two rank processes of a
/// launcher; `--max-rss` as the ceiling. The edit 8→4 keeps the file's size, and runs within the
/// same second as Python's cached bytecode of it: the ranks must still see it, and after the run
/// Python must see the restored file again.
#[test]
fn config_py_class_attributes_reach_every_rank_and_come_back() {
    let p = Project::new();
    let source = "class TrainConfig:\n    batch_size_per_gpu = 8  # per rank\n    gradient_accumulation_steps = 1\n    max_seq_len = 512\n";
    let config = p.write("config.py", source);
    // The bytecode cache a previous run left, valid for the original file.
    let warm = std::process::Command::new("python3")
        .args(["-c", "import config"])
        .current_dir(&p.dir)
        .status()
        .unwrap();
    assert!(warm.success());
    let out = p.run(
        &[
            "--max-rss",
            "10G",
            "--batch-arg",
            "config.py:TrainConfig.batch_size_per_gpu",
            "--accum-arg",
            "config.py:TrainConfig.gradient_accumulation_steps",
        ],
        &[],
        &[(
            "JOB_FITS",
            "s['batch_size_per_gpu'] <= 4 and s['ranks_agree']",
        )],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = p.seen();
    assert_eq!(column(&seen, "batch_size_per_gpu"), [json!(8), json!(4)]);
    assert_eq!(
        column(&seen, "gradient_accumulation_steps"),
        [json!(1), json!(2)]
    );
    assert_eq!(column(&seen, "ranks_agree"), [json!(true), json!(true)]);
    assert_untouched(&config, source.as_bytes());
    let now = std::process::Command::new("python3")
        .args([
            "-c",
            "from config import TrainConfig as C; print(C.batch_size_per_gpu)",
        ])
        .current_dir(&p.dir)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&now.stdout).trim(), "8");
}
