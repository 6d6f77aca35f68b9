//! Clusters (issue 9, item 7): one oomguard wraps the step launcher (`srun`, `torchrun`) and
//! decides for every rank. The fixture launchers (tests/fixtures/cluster_srun.py,
//! cluster_torchrun.py) run two ranks of tests/fixtures/cluster_task.py, which records each
//! rank's argv per attempt: a relaunch must give every rank the same smaller batch, and nothing
//! of a stopped step may be left running.

use crate::util;

use std::collections::BTreeMap;
use std::path::Path;

use util::{alive, causes, fixture, flag_value, is_root, stderr_of, Sandbox};

/// What the launchers and ranks recorded: per attempt, each rank's `--batch_size`; and every
/// PID (launchers' and ranks') and cgroup the fixtures made.
struct Recorded {
    batches: BTreeMap<u32, BTreeMap<u64, u64>>,
    pids: Vec<u32>,
    cgroups: Vec<String>,
}

fn recorded(path: &Path) -> Recorded {
    let mut rec = Recorded {
        batches: BTreeMap::new(),
        pids: Vec::new(),
        cgroups: Vec::new(),
    };
    for line in std::fs::read_to_string(path)
        .expect("the fixtures recorded")
        .lines()
    {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(pid) = v["launcher"].as_u64() {
            rec.pids.push(pid as u32);
            if let Some(cg) = v["cgroup"].as_str() {
                rec.cgroups.push(cg.to_string());
            }
            continue;
        }
        rec.pids.push(v["pid"].as_u64().unwrap() as u32);
        let attempt: u32 = v["attempt"].as_str().unwrap().parse().unwrap();
        let batch = flag_value(&v["argv"], "--batch_size");
        rec.batches
            .entry(attempt)
            .or_default()
            .insert(v["rank"].as_u64().unwrap(), batch);
    }
    rec
}

/// Every attempt ran both ranks with one batch; the relaunch's batch is smaller; nothing the
/// fixtures started is alive, and their cgroups are gone.
fn check_step(rec: &Recorded, stderr: &str) {
    let per_attempt: Vec<(u32, Vec<u64>)> = rec
        .batches
        .iter()
        .map(|(a, ranks)| (*a, ranks.values().copied().collect()))
        .collect();
    assert_eq!(per_attempt.len(), 2, "{per_attempt:?}\n{stderr}");
    for (attempt, ranks) in &per_attempt {
        assert_eq!(
            ranks.len(),
            2,
            "attempt {attempt}: both ranks ran: {per_attempt:?}"
        );
        assert_eq!(
            ranks[0], ranks[1],
            "attempt {attempt}: one batch for all ranks"
        );
    }
    assert_eq!(per_attempt[0].1[0], 8);
    assert!(
        per_attempt[1].1[0] < 8,
        "relaunched smaller: {per_attempt:?}"
    );
    for pid in &rec.pids {
        assert!(!alive(*pid), "pid {pid} of the step is still running");
    }
    for cg in &rec.cgroups {
        assert!(!Path::new(cg).exists(), "{cg} left behind");
    }
}

fn task(record: &Path, oom: &str) -> Vec<String> {
    [
        "python3",
        &fixture("cluster_task.py"),
        "--batch_size",
        "8",
        "--fits",
        "4",
        "--oom",
        oom,
        "--record",
        record.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

/// `python3 LAUNCHER --record RECORD FLAGS -- TASK`: a launcher fixture (srun, torchrun) running
/// cluster_task.py's tasks, the one named in `oom` running out of memory that way.
fn launched(launcher: &str, record: &Path, flags: &[&str], oom: &str) -> Vec<String> {
    let mut job = vec![
        "python3".to_string(),
        fixture(launcher),
        "--record".into(),
        record.to_str().unwrap().into(),
    ];
    job.extend(flags.iter().map(|f| f.to_string()));
    job.push("--".into());
    job.extend(task(record, oom));
    job
}

/// `oomguard run` with a short hang timeout (and a stall timeout, so a build that never sees
/// the OOM ends too, as `stalled`, instead of hanging the test).
fn run_step(sb: &Sandbox, job: &[String]) -> std::process::Output {
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    sb.run(
        &[
            "--hang-timeout",
            "1s",
            "--stall-timeout",
            "30s",
            "--grace",
            "5s",
        ],
        &job,
    )
    .output()
    .expect("oomguard runs")
}

#[test]
fn srun_task_killed_by_a_cgroup_oom_stops_the_step_and_relaunches_every_task_smaller() {
    if !is_root() {
        println!("SKIPPED srun_task_killed_by_a_cgroup_oom_stops_the_step_and_relaunches_every_task_smaller: a child memory cgroup needs root");
        return;
    }
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let job = launched("cluster_srun.py", &record, &["--oom-cgroup"], "alloc");
    let out = run_step(&sb, &job);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The kernel killed task 1, and the launcher said so the way slurmstepd and srun do.
    assert!(
        stderr.contains("slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("srun: error: node2: task 1: Out Of Memory"),
        "{stderr}"
    );
    // Task 0 stayed up: oomguard stopped the whole step and relaunched it smaller.
    assert_eq!(causes(&sb.summary()), ["hung_after_oom", "ok"], "{stderr}");
    check_step(&recorded(&record), &stderr);
}

#[test]
fn srun_labelled_out_of_memory_of_one_task_is_read_through_the_labels() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    // Task 1 dies with a bare `MemoryError` (srun shows it as `1: MemoryError`); task 0 waits.
    let job = launched("cluster_srun.py", &record, &[], "host");
    let out = run_step(&sb, &job);
    let stderr = stderr_of(&out);
    assert!(stderr.contains("1: MemoryError"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["hung_after_oom", "ok"], "{stderr}");
    check_step(&recorded(&record), &stderr);
}

#[test]
fn torchrun_rank_out_of_memory_while_another_rank_hangs_stops_the_step() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let job = launched("cluster_torchrun.py", &record, &[], "cuda");
    let out = run_step(&sb, &job);
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("[rank1]:torch.OutOfMemoryError: CUDA out of memory"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["hung_after_oom", "ok"], "{stderr}");
    check_step(&recorded(&record), &stderr);
}

#[test]
fn torchrun_child_failed_error_is_read_as_the_rank_out_of_memory() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let job = launched(
        "cluster_torchrun.py",
        &record,
        &["--stop-on-failure"],
        "cuda",
    );
    let out = run_step(&sb, &job);
    let stderr = stderr_of(&out);
    // The agent stopped rank 0 itself and raised ChildFailedError naming rank 1's exit 1: the
    // root cause is rank 1's CUDA OOM, not the generic failure.
    assert!(stderr.contains("ChildFailedError"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["device_oom", "ok"], "{stderr}");
    check_step(&recorded(&record), &stderr);
}
