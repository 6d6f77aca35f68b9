//! What the job's memory keeps of the probe (issue 32) across runs, through the real binary:
//! the samples a second of each setting that fitted, and a run that starts from the faster of
//! two rather than from the last success. Needs torch (CPU only); SKIPPED where python3 cannot
//! import it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Numbers each run's directory.
static RUNS: AtomicU32 = AtomicU32::new(0);

use crate::probe::torch_or_skip;
use crate::util::{fixture, stderr_of, Running, Sandbox};

/// `oomguard run --name paced -- python3 paced.py --batch_size B --grad_accum A` to its end,
/// which must be a success: its stderr, and the first attempt's batch and accumulation.
fn paced_run(sb: &Sandbox, batch: u64, accum: u64) -> (String, (u64, u64)) {
    let script = fixture("probe/paced.py");
    let run_dir = sb.path(&format!(
        "run-{batch}x{accum}-{}",
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let (batch, accum) = (batch.to_string(), accum.to_string());
    let mut cmd = sb.oomguard(&[
        "run",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--no-pty",
        "--name",
        "paced",
        "--",
        "python3",
        &script,
        "--batch_size",
        &batch,
        "--grad_accum",
        &accum,
    ]);
    cmd.env_remove("PYTHONPATH");
    let out = Running::start(sb, cmd).finish(Duration::from_secs(240));
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("summary.json")).unwrap()).unwrap();
    let first = &summary["attempts"][0];
    let value = |name: &str| {
        first[name]
            .as_u64()
            .unwrap_or_else(|| panic!("no {name} in {first:#}"))
    };
    (stderr, (value("batch_size"), value("accum")))
}

/// 16 × 1 fitted at twice the samples a second of 8 × 2 (each micro-batch takes the same
/// time); 8 × 2 is the last success. A run of 16 × 1 then starts from 16 × 1, the faster, and
/// says why; without the probe's measurements it would start from the last success, 8 × 2.
#[test]
fn a_run_starts_from_the_faster_of_two_settings_that_fitted() {
    if torch_or_skip("a_run_starts_from_the_faster_of_two_settings_that_fitted").is_none() {
        return;
    }
    let sb = Sandbox::new();
    let (_, first) = paced_run(&sb, 16, 1);
    assert_eq!(first, (16, 1));
    let (_, second) = paced_run(&sb, 8, 2);
    assert_eq!(second, (8, 2));
    let (stderr, third) = paced_run(&sb, 16, 1);
    let said = stderr
        .lines()
        .find(|l| l.contains("starting from the fastest setting that fitted"))
        .unwrap_or_else(|| panic!("no start line: {stderr}"));
    assert!(
        said.contains(": the command's values at ")
            && said.contains("where the last success, batch 8, accum 2, ran "),
        "{said}"
    );
    assert_eq!(third, (16, 1), "{stderr}");

    // The job's file keeps each attempt's samples a second.
    let file = sb.path("state/oomguard/jobs/paced.json");
    let memory: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("the job's file")).unwrap();
    let rates: Vec<f64> = memory["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["steps"]["samples_per_second"].as_f64().expect("measured"))
        .collect();
    assert_eq!(rates.len(), 3, "{memory:#}");
    assert!(rates[0] > rates[1] * 1.5, "16 × 1 is faster: {rates:?}");
}
