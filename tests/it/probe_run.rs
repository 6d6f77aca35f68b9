//! The probe (issue 32) through the real binary: a real torch loop on the CPU reports its
//! optimizer steps into summary.json, the final table and `oomguard report`; `--no-probe`
//! leaves no trace in the job; a probe that fails (a torch without the global step hook) never
//! changes the job's exit; the job's stdout is the same byte for byte with and without it. The
//! Python half has its own tests (tests/probe/check_probe.py, run by .ci/run).

use crate::util::{fixture, stderr_of, Sandbox};

/// Skips (returns) where python3 cannot import torch; CI installs it (.ci/run).
macro_rules! need_torch {
    ($name:literal) => {
        let have = std::process::Command::new("python3")
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !have {
            println!(
                "SKIPPED {}: python3 cannot import torch (see .ci/run)",
                $name
            );
            return;
        }
    };
}

/// The torch loop fixture: `steps` optimizer steps at batch 16.
fn torch_loop(steps: &str) -> Vec<String> {
    [
        "python3",
        &fixture("probe/torch_loop.py"),
        "--steps",
        steps,
        "--batch",
        "16",
    ]
    .map(String::from)
    .to_vec()
}

fn run(sb: &Sandbox, extra: &[&str], job: &[String]) -> (String, String, i32) {
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let mut args = vec!["--no-pty"];
    if job.contains(&"--batch") {
        args.extend(["--batch-arg", "--batch"]);
    }
    args.extend_from_slice(extra);
    let out = sb.run(&args, &job).output().expect("oomguard runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr_of(&out),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn a_torch_loops_steps_reach_the_summary_the_table_and_the_report() {
    need_torch!("a_torch_loops_steps_reach_the_summary_the_table_and_the_report");
    let sb = Sandbox::new();
    let (_, stderr, code) = run(&sb, &[], &torch_loop("12"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("probe: on"), "{stderr}");
    let probe = &sb.summary()["attempts"][0]["probe"];
    assert_eq!(probe["steps"], 12, "{probe}");
    assert_eq!(probe["ranks"], 1, "{probe}");
    assert!(probe["rss_peak_bytes"].as_u64().unwrap_or(0) > 0, "{probe}");
    assert!(
        probe["torch"].as_str().is_some_and(|t| !t.is_empty()),
        "{probe}"
    );
    let per_step = probe["seconds_per_step"].as_f64().expect("a pace");
    let rate = probe["samples_per_second"].as_f64().expect("samples/s");
    assert!(per_step > 0.0, "{probe}");
    assert!((rate - 16.0 / per_step).abs() < 1e-6 * rate, "{probe}");
    assert!(
        stderr.contains("steps  samples/s"),
        "the final table: {stderr}"
    );
    let report = sb
        .oomguard(&["report", sb.run_dir().to_str().unwrap()])
        .output()
        .expect("oomguard report runs");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("  steps: 12 optimizer step(s), "), "{text}");
}

#[test]
fn no_probe_leaves_no_trace_in_the_job() {
    need_torch!("no_probe_leaves_no_trace_in_the_job");
    let sb = Sandbox::new();
    let job: Vec<String> = [
        "python3",
        "-c",
        "import os, sys, torch.optim; print(os.environ.get('OOMGUARD_PROBE_FD'), os.environ.get('PYTHONPATH')); print('sitecustomize' in sys.modules)",
    ]
    .map(String::from)
    .to_vec();
    let (stdout, stderr, code) = run(&sb, &["--no-probe"], &job);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().next(), Some("None None"), "{stdout}");
    assert!(!stderr.contains("probe"), "{stderr}");
    assert!(!sb.run_dir().join("probe").exists());
    assert!(sb.summary()["attempts"][0].get("probe").is_none());
    // The same job with the probe: it is there, and a job without steps records none.
    let sb = Sandbox::new();
    let (stdout, stderr, code) = run(&sb, &[], &job);
    assert_eq!(code, 0, "{stderr}");
    let probe_dir = sb.run_dir().join("probe");
    assert_eq!(
        stdout.lines().next(),
        Some(format!("7 {}", probe_dir.display()).as_str()),
        "{stdout}"
    );
    assert!(probe_dir.join("sitecustomize.py").is_file());
}

#[test]
fn a_failing_probe_never_changes_the_jobs_exit() {
    let sb = Sandbox::new();
    // A stand-in torch without the global optimizer-step hook (an old torch), and a job that
    // exits 3 after importing it.
    let old = fixture("probe/old_torch");
    let job: Vec<String> = [
        "python3",
        "-c",
        "import torch.optim.optimizer; print('job ran'); raise SystemExit(3)",
    ]
    .map(String::from)
    .to_vec();
    let job_refs: Vec<&str> = job.iter().map(String::as_str).collect();
    let out = sb
        .run(&["--no-pty", "--max-attempts", "1"], &job_refs)
        .env("PYTHONPATH", &old)
        .output()
        .expect("oomguard runs");
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "job ran\n");
    let attempt = &sb.summary()["attempts"][0];
    assert_eq!(attempt["cause"], "failed", "{stderr}");
    let error = attempt["probe"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("register_optimizer_step_post_hook"),
        "{attempt}"
    );
}

#[test]
fn the_jobs_stdout_is_the_same_with_and_without_the_probe() {
    need_torch!("the_jobs_stdout_is_the_same_with_and_without_the_probe");
    let with = Sandbox::new();
    let (stdout_with, stderr, code) = run(&with, &[], &torch_loop("5"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("probe: on"), "{stderr}");
    let without = Sandbox::new();
    let (stdout_without, stderr, code) = run(&without, &["--no-probe"], &torch_loop("5"));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout_with.is_empty());
    assert_eq!(stdout_with, stdout_without);
}
