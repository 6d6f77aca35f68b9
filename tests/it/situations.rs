//! The situations of README.md (../shared/SCENARIOS.md), end to end: the real binary runs
//! tests/fixtures/situation_job.py, which reads its settings where each situation keeps them
//! (flags, a YAML file picked inside the script, config.py class attributes read by two rank
//! processes, an environment variable), records what every attempt saw, and dies of
//! out-of-memory until its settings fit. Each test checks the right knob moved in the right
//! order, the effective batch was kept where a partner exists, summary.json names the knobs, and
//! the user's files are byte for byte what they were.

use crate::util;

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

/// `--config examples/NAME` as README.md gives it.
fn example(name: &str) -> String {
    format!("--config={}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Seed 001: `python main.py` picks configs/default.yaml itself. examples/emg-yaml.toml halves
/// the batch with accumulation as its partner (effective batch 64 kept) down to 8, then the
/// workers to 0, then turns pin_memory off for a host-memory death; the YAML comes back byte for
/// byte.
#[test]
fn emg_yaml_keys_move_in_ladder_order_and_the_file_comes_back() {
    let p = Project::new();
    let yaml = "# TDS-LSTM\ntraining:\n  batch_size: 64 # per step\n  gradient_accumulation_steps: 1\n  num_workers: 4\n  pin_memory: true\ndata:\n  stride: 2\n";
    let config = p.write("configs/default.yaml", yaml);
    let out = p.run(
        &[&example("emg-yaml.toml")],
        &[],
        &[
            ("JOB_FITS", "not s['training.pin_memory']"),
            ("JOB_DEATH", "worker_killed"),
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = p.seen();
    let batch = column(&seen, "training.batch_size");
    let accum = column(&seen, "training.gradient_accumulation_steps");
    assert_eq!(batch, [64, 32, 16, 8, 8, 8, 8, 8].map(|n| json!(n)));
    for (b, a) in batch.iter().zip(&accum) {
        assert_eq!(
            b.as_u64().unwrap() * a.as_u64().unwrap(),
            64,
            "effective batch kept"
        );
    }
    assert_eq!(
        column(&seen, "training.num_workers"),
        [4, 4, 4, 4, 2, 1, 0, 0].map(|n| json!(n))
    );
    assert_eq!(
        column(&seen, "training.pin_memory"),
        [true, true, true, true, true, true, true, false].map(|b| json!(b))
    );
    assert!(
        stderr.contains("attempt 8 in 0.0s: training.pin_memory true→false (configs/default.yaml)"),
        "{stderr}"
    );
    let summary = p.sb.summary();
    assert_eq!(
        summary["attempts"][7]["knobs"],
        json!({"batch": 8, "accum": 8, "num_workers": 0, "pin_memory": false})
    );
    assert_eq!(summary["attempts"][1]["changed"], json!(["batch", "accum"]));
    assert_eq!(summary["attempts"][7]["changed"], json!(["pin_memory"]));
    assert_untouched(&config, yaml.as_bytes());
}

/// Seed 002: `--microbatch` under a fixed `--batch_size` (the job keeps the effective batch),
/// then the `--use_fp16` switch added, then PYTORCH_CUDA_ALLOC_CONF set for the job.
#[test]
fn cell_diffusion_steps_the_microbatch_then_fp16_then_the_allocator() {
    let p = Project::new();
    let out = p.run(
        &[&example("cell-diffusion.toml")],
        &["--batch_size", "64", "--microbatch", "16"],
        &[(
            "JOB_FITS",
            "s.get('alloc_conf') == 'expandable_segments:True'",
        )],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = p.seen();
    assert_eq!(
        column(&seen, "microbatch"),
        [16, 8, 4, 4, 4].map(|n| json!(n))
    );
    assert_eq!(column(&seen, "batch_size"), [64; 5].map(|n| json!(n)));
    assert_eq!(
        column(&seen, "use_fp16"),
        [false, false, false, true, true].map(|b| json!(b))
    );
    assert_eq!(
        column(&seen, "alloc_conf"),
        [
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            json!("expandable_segments:True")
        ]
    );
    assert!(
        stderr.contains("attempt 4 in 0.0s: --use_fp16 added"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "attempt 5 in 0.0s: env PYTORCH_CUDA_ALLOC_CONF unset→expandable_segments:True"
        ),
        "{stderr}"
    );
    let summary = p.sb.summary();
    assert_eq!(
        summary["attempts"][4]["knobs"],
        json!({"microbatch": 4, "fp16": true, "alloc_conf": "expandable_segments:True"})
    );
}

/// Seed 003 as README.md runs it: config.py class attributes under a two-rank launcher with
/// `--max-rss`; the batch halves with accumulation raised, then the sequence length steps down.
#[test]
fn t5_config_py_steps_batch_then_sequence_length_for_both_ranks() {
    let p = Project::new();
    let source = "class TrainConfig:\n    batch_size_per_gpu = 2\n    gradient_accumulation_steps = 16\n    max_seq_len = 512\n";
    let config = p.write("config.py", source);
    let out = p.run(
        &[&example("t5-config-py.toml"), "--max-rss", "10G"],
        &[],
        &[("JOB_FITS", "s['max_seq_len'] <= 384 and s['ranks_agree']")],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = p.seen();
    assert_eq!(
        column(&seen, "batch_size_per_gpu"),
        [2, 1, 1].map(|n| json!(n))
    );
    assert_eq!(
        column(&seen, "gradient_accumulation_steps"),
        [16, 32, 32].map(|n| json!(n))
    );
    assert_eq!(
        column(&seen, "max_seq_len"),
        [512, 512, 384].map(|n| json!(n))
    );
    assert_eq!(column(&seen, "ranks_agree"), [true; 3].map(|b| json!(b)));
    assert_untouched(&config, source.as_bytes());
}

/// Seed 004: batch, then group size (floor 2), then epochs, and summary.json names the step
/// that finally fit.
#[test]
fn grpo_steps_batch_then_group_size_then_epochs() {
    let p = Project::new();
    let out = p.run(
        &[&example("grpo.toml")],
        &[
            "--batch_size",
            "2",
            "--group_size",
            "4",
            "--num_epochs",
            "3",
            "--kl_threshold",
            "0.01",
        ],
        &[("JOB_FITS", "s['num_epochs'] <= 2")],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = p.seen();
    assert_eq!(column(&seen, "batch_size"), [2, 1, 1, 1].map(|n| json!(n)));
    assert_eq!(column(&seen, "group_size"), [4, 4, 2, 2].map(|n| json!(n)));
    assert_eq!(column(&seen, "num_epochs"), [3, 3, 3, 2].map(|n| json!(n)));
    let summary = p.sb.summary();
    let changed: Vec<Value> = summary["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["changed"].clone())
        .collect();
    assert_eq!(
        changed,
        [
            json!([]),
            json!(["batch"]),
            json!(["group_size"]),
            json!(["num_epochs"])
        ]
    );
    assert_eq!(summary["outcome"], "succeeded");
    // The table has a column for each knob that moved beside batch.
    assert!(stderr.contains("group_size  num_epochs  cause"), "{stderr}");
}

/// A mistake in the `--config` file: one line with the file, the line and the knob, exit 2,
/// nothing started.
#[test]
fn a_bad_config_file_is_one_line_and_nothing_starts() {
    let p = Project::new();
    let toml = p.write(
        "job.toml",
        "[[knob]]\nname = \"batch\"\nflag = \"--batch_size\"\nstpe = -1\n",
    );
    let out = p.run(
        &["--config", toml.to_str().unwrap()],
        &["--batch_size", "8"],
        &[],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("job.toml:4: knob \"batch\": unknown key \"stpe\""),
        "{stderr}"
    );
    assert!(!p.record().exists(), "the job ran");
    assert!(!p.sb.run_dir().exists());
    // Valid TOML naming a place that is not there: the same shape of line.
    let toml = p.write(
        "job.toml",
        "# ladder\n[[knob]]\nname = \"batch\"\nfile = \"configs/default.yaml\"\nkey = \"training.batch_size\"\n",
    );
    let out = p.run(&["--config", toml.to_str().unwrap()], &[], &[]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("job.toml:2: knob \"batch\": cannot open config file configs/default.yaml"),
        "{stderr}"
    );
    assert!(!p.record().exists(), "the job ran");
}
