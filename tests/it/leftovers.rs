//! An attempt's own leftovers never stop the next one, end to end: a job that refuses to start
//! over what the attempt before it left (tests/fixtures/leftovers_job.py behaves like
//! LightningCLI's SaveConfigCallback and a Hugging Face example script, with their exact words;
//! tests/fixtures/lightning_cli_job.py is the real LightningCLI, OOM-killed in a memory cgroup)
//! gets them set aside beside themselves and a retry at the same sizes; what existed before the
//! run, a second refusal and a refusal of a kind oomguard does not know end the run, each with
//! its line, and nothing is moved.

use crate::util;

use std::path::Path;

use util::{causes, fixture, flag_value, sizes, stderr_of, Sandbox};

/// Runs the fixture in the sandbox (its working directory) with `like`, `dir` and `extra` job
/// flags, starting at batch 8 where batch 4 fits: oomguard's output and the summary.
fn run_like(
    sb: &Sandbox,
    like: &str,
    dir: &str,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let script = fixture("leftovers_job.py");
    let mut job = vec![
        "python3",
        script.as_str(),
        "--like",
        like,
        "--dir",
        dir,
        "--batch_size",
        "8",
        "--grad_accum",
        "1",
        "--fits",
        "4",
    ];
    job.extend_from_slice(extra);
    let out = sb
        .run(
            &["--batch-arg", "--batch_size", "--accum-arg", "--grad_accum"],
            &job,
        )
        .current_dir(sb.dir.path())
        .output()
        .expect("oomguard runs");
    (out, sb.summary())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names in `dir` that start with `prefix`, sorted.
fn names(dir: &Path, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

#[test]
fn lightning_config_left_by_an_oom_is_set_aside_and_the_run_converges() {
    let sb = Sandbox::new();
    let (out, summary) = run_like(&sb, "lightning", "logs", &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(causes(&summary), ["device_oom", "leftovers", "ok"], "{err}");
    // The retry ran at the sizes the refusal had: no second step for it.
    assert_eq!(sizes(&summary), [(8, 1), (4, 2), (4, 2)], "{summary:#}");
    assert!(
        err.contains("attempt 2 refused to start over attempt 1's leftovers (LightningCLI's saved config logs/config.yaml): set aside as logs/config.yaml.oomguard-attempt1; attempt 3 retries at the same sizes"),
        "{err}"
    );
    let evidence = summary["attempts"][1]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("SaveConfigCallback expected logs/config.yaml to NOT exist")
            && evidence.ends_with("(attempt 1's leftovers)"),
        "{evidence}"
    );
    // Attempt 1's file is kept beside the new one, not deleted.
    let logs = sb.path("logs");
    assert_eq!(
        names(&logs, "config.yaml"),
        ["config.yaml", "config.yaml.oomguard-attempt1"]
    );
    assert!(read(&logs.join("config.yaml.oomguard-attempt1")).contains("batch_size: 8"));
    assert!(read(&logs.join("config.yaml")).contains("batch_size: 4"));
}

#[test]
fn hugging_face_output_dir_left_by_an_oom_is_set_aside_and_the_run_converges() {
    let sb = Sandbox::new();
    let (out, summary) = run_like(&sb, "hf", "out", &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(causes(&summary), ["device_oom", "leftovers", "ok"], "{err}");
    assert!(
        err.contains(
            "(the Hugging Face script's output directory out): set aside as out.oomguard-attempt1"
        ),
        "{err}"
    );
    assert_eq!(
        read(&sb.path("out.oomguard-attempt1/runs/events")),
        "batch 8\n"
    );
    assert_eq!(read(&sb.path("out/runs/events")), "batch 4\n");
}

#[test]
fn a_second_refusal_right_after_the_setting_aside_ends_the_run() {
    let sb = Sandbox::new();
    // From attempt 3 on the job makes its config itself before it checks.
    let (out, summary) = run_like(&sb, "lightning", "logs", &["--refuse-from", "3"]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(summary["outcome"], "failed", "{summary:#}");
    assert_eq!(
        causes(&summary),
        ["device_oom", "leftovers", "leftovers"],
        "{err}"
    );
    assert!(
        err.contains("stopping: failed (attempt 3 refused again \"logs/config.yaml\" after the leftovers were set aside"),
        "{err}"
    );
    // Attempt 1's was set aside; attempt 3's own stays where it made it.
    let logs = sb.path("logs");
    assert_eq!(
        names(&logs, "config.yaml"),
        ["config.yaml", "config.yaml.oomguard-attempt1"]
    );
}

#[test]
fn an_output_dir_that_existed_before_the_run_is_not_moved() {
    let sb = Sandbox::new();
    // The user's own (empty) directory: attempt 1 starts in it, then leaves files there.
    std::fs::create_dir(sb.path("out")).unwrap();
    let (out, summary) = run_like(&sb, "hf", "out", &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(causes(&summary), ["device_oom", "leftovers"], "{err}");
    assert!(
        err.contains("attempt 2 refused to start over the Hugging Face script's output directory \"out\", which existed before this run started: not oomguard's to move"),
        "{err}"
    );
    assert_eq!(names(sb.dir.path(), "out"), ["out"]);
    assert_eq!(read(&sb.path("out/runs/events")), "batch 8\n");
}

#[test]
fn an_unknown_refusal_is_named_as_the_last_attempts_leftovers_and_nothing_moves() {
    let sb = Sandbox::new();
    let (out, summary) = run_like(&sb, "plain", "work", &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(causes(&summary), ["device_oom", "leftovers"], "{err}");
    assert!(
        err.contains("attempt 2 refused to start over attempt 1's leftovers \"work\", not a bug of the job's"),
        "{err}"
    );
    assert_eq!(names(sb.dir.path(), "work"), ["work"]);
}

#[test]
fn attempt_ones_own_refusal_is_the_jobs_failure() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.path("work")).unwrap();
    let (out, summary) = run_like(&sb, "plain", "work", &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(causes(&summary), ["failed"], "{err}");
    assert!(!err.contains("'s leftovers"), "{err}");
}

/// The real LightningCLI (torch and lightning on the CPU), OOM-killed by the kernel in a memory
/// cgroup at batch 32 after SaveConfigCallback wrote logs/config.yaml, fits at 16: the run
/// converges, with attempt 1's config set aside.
#[test]
fn real_lightning_cli_oom_killed_in_a_cgroup_converges() {
    let have = std::process::Command::new("python3")
        .args(["-c", "import lightning, jsonargparse, torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("SKIPPED real LightningCLI: python3 cannot import lightning, jsonargparse and torch (see .ci/run)");
        return;
    }
    let sb = Sandbox::new();
    let script = fixture("lightning_cli_job.py");
    let job = [
        "python3",
        script.as_str(),
        "fit",
        "--trainer.logger",
        "false",
        "--trainer.default_root_dir",
        "logs",
        "--trainer.max_steps",
        "2",
        "--trainer.accelerator",
        "cpu",
        "--trainer.enable_checkpointing",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--data.sample_mb",
        "32",
        "--data.batch_size",
        "32",
        "--trainer.accumulate_grad_batches",
        "1",
    ];
    let out = sb
        .run(
            // No knob flag: LightningCLI's dotted flags are found by themselves.
            &["--memory-max", "1200M"],
            &job,
        )
        .current_dir(sb.dir.path())
        .output()
        .expect("oomguard runs");
    let err = stderr_of(&out);
    if out.status.code() == Some(2) && err.contains("needs a memory cgroup") {
        eprintln!("SKIPPED real LightningCLI: no writable memory cgroup here (needs root)");
        return;
    }
    let summary = sb.summary();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(causes(&summary), ["oom_killed", "leftovers", "ok"], "{err}");
    let sizes: Vec<(u64, u64)> = summary["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                flag_value(&a["command"], "--data.batch_size"),
                flag_value(&a["command"], "--trainer.accumulate_grad_batches"),
            )
        })
        .collect();
    assert_eq!(sizes, [(32, 1), (16, 2), (16, 2)], "{summary:#}");
    assert!(
        err.contains("set aside as logs/config.yaml.oomguard-attempt1"),
        "{err}"
    );
    let logs = sb.path("logs");
    assert_eq!(
        names(&logs, "config.yaml"),
        ["config.yaml", "config.yaml.oomguard-attempt1"]
    );
    assert!(read(&logs.join("config.yaml.oomguard-attempt1")).contains("batch_size: 32"));
    assert!(read(&logs.join("config.yaml")).contains("batch_size: 16"));
}
