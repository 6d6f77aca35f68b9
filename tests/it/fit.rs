//! `--strategy fit` end to end: a job printing real-format CUDA out-of-memory numbers reaches a
//! batch that fits in fewer attempts than halving, the effective batch kept exact; without
//! numbers it halves and says why; a real cgroup kill's peak and limit are read; and the
//! allocator-fragmentation hint relaunches once at the same batch with the variable set, but
//! not when the user set it.

use crate::util;

use std::path::PathBuf;

use serde_json::Value;
use util::{causes, fixture, own_v1_memory_cgroup, stderr_of, Sandbox};

/// The allocator variables, cleared from each test's job unless the test sets one.
const ALLOC_VARS: [&str; 3] = [
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
];

/// Runs fit_cuda_oom.py under oomguard with `extra` flags and job `args`; returns the output
/// and what each attempt recorded.
fn run_cuda(
    sb: &Sandbox,
    extra: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, Vec<Value>) {
    let record: PathBuf = sb.path("record.jsonl");
    let script = fixture("fit_cuda_oom.py");
    let mut job = vec!["python3", &script, "--record", record.to_str().unwrap()];
    job.extend_from_slice(args);
    let mut cmd = sb.run(extra, &job);
    for var in ALLOC_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("oomguard runs");
    let seen = std::fs::read_to_string(&record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record is JSON"))
        .collect();
    (out, seen)
}

fn batches(seen: &[Value]) -> Vec<(u64, Option<u64>)> {
    seen.iter()
        .map(|s| (s["batch"].as_u64().unwrap(), s["accum"].as_u64()))
        .collect()
}

/// Memory 3 GiB + 0.5 GiB × batch on a 24 GiB card; 120 × 1 in the command. Halving needs
/// 120 ✗, 60 ✗, 30; the fit reads the first message and goes to 40 × 3 (the estimate 41,
/// 40 the nearest divisor of 120 below it), below half because the message shows that 60
/// needs at least 31.5 GiB.
#[test]
fn fit_reaches_a_batch_that_fits_in_fewer_attempts_than_halving_with_the_effective_batch_exact() {
    let args = ["--batch_size", "120", "--gradient_accumulation_steps", "1"];
    let sb = Sandbox::new();
    let (out, seen) = run_cuda(&sb, &["--strategy", "halve"], &args, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        batches(&seen),
        [(120, Some(1)), (60, Some(2)), (30, Some(4))]
    );

    let sb = Sandbox::new();
    let (out, seen) = run_cuda(&sb, &[], &args, &[]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(batches(&seen), [(120, Some(1)), (40, Some(3))], "{stderr}");
    assert!(
        stderr.contains(
            "attempt 2 in 0.0s: --batch_size 120→40, --gradient_accumulation_steps 1→3 \
             (GPU 24.0 GiB, need at 120 ≈ 63.0 GiB, per sample ≈ 537.6 MiB, so at 60 it needs \
             at least 31.5 GiB, over the GPU: trying 40)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("effective batch"), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["device_oom", "ok"]);
    assert_eq!(sb.summary()["final"]["batch_size"], 40);
}

/// A bare driver error gives no sizes: the fit halves and says why.
#[test]
fn without_numbers_fit_halves_and_says_why() {
    let sb = Sandbox::new();
    let (out, seen) = run_cuda(
        &sb,
        &[],
        &[
            "--batch_size",
            "120",
            "--gradient_accumulation_steps",
            "1",
            "--no-numbers",
        ],
        &[],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        batches(&seen),
        [(120, Some(1)), (60, Some(2)), (30, Some(4))]
    );
    assert!(
        stderr.contains(
            "attempt 2 in 0.0s: --batch_size 120→60, --gradient_accumulation_steps 1→2 \
             (halving: the attempt left no numbers to estimate from"
        ),
        "{stderr}"
    );
}

/// `factor:F` multiplies by F, at least one down.
#[test]
fn factor_multiplies_the_batch() {
    let sb = Sandbox::new();
    let (out, seen) = run_cuda(
        &sb,
        &["--strategy", "factor:0.75"],
        &["--batch_size", "64", "--capacity-gib", "20"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    // 3 + 0.5 × b ≤ 20: b ≤ 34. 64 → 48 → 36 → 27.
    assert_eq!(
        batches(&seen).iter().map(|b| b.0).collect::<Vec<_>>(),
        [64, 48, 36, 27]
    );
}

/// PyTorch held more reserved-but-unallocated memory than it asked for: one relaunch at the
/// same batch with expandable segments, recorded in summary.json, and the variable stays.
#[test]
fn fragmentation_relaunches_once_at_the_same_batch_with_expandable_segments() {
    let sb = Sandbox::new();
    let (out, seen) = run_cuda(&sb, &[], &["--batch_size", "16", "--fragmented"], &[]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let confs: Vec<(u64, Value)> = seen
        .iter()
        .map(|s| (s["batch"].as_u64().unwrap(), s["alloc_conf"].clone()))
        .collect();
    assert_eq!(
        confs,
        [
            (16, Value::Null),
            (16, Value::from("expandable_segments:True"))
        ]
    );
    assert!(
        stderr.contains(
            "attempt 2 in 0.0s: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (knobs unchanged) \
             (PyTorch held 2.9 GiB reserved but unallocated, at least the 512.0 MiB it tried to allocate"
        ),
        "{stderr}"
    );
    let summary = sb.summary();
    assert_eq!(summary["attempts"][1]["hint"], "allocator_fragmentation");
    assert!(summary["attempts"][0].get("hint").is_none(), "{summary:#}");

    // Out of memory again with the variable set, for want of room this time: the hint is not
    // given twice, the batch moves by the new numbers, and the variable stays.
    let sb = Sandbox::new();
    let (out, seen) = run_cuda(
        &sb,
        &[],
        &["--batch_size", "16", "--fragmented", "--capacity-gib", "8"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let expandable = Value::from("expandable_segments:True");
    let confs: Vec<(u64, Value)> = seen
        .iter()
        .map(|s| (s["batch"].as_u64().unwrap(), s["alloc_conf"].clone()))
        .collect();
    // 3 + 0.5 × 16 = 11 GiB on 8: 0.9 × 8 / (11 / 16) = 10.5.
    assert_eq!(
        confs,
        [
            (16, Value::Null),
            (16, expandable.clone()),
            (10, expandable)
        ]
    );
}

/// The user's own allocator setting (or --no-allocator-hint) is left alone: the batch moves.
#[test]
fn no_fragmentation_hint_when_the_user_set_the_variable_or_turned_it_off() {
    for (extra, env) in [
        (
            vec![],
            vec![(
                "PYTORCH_CUDA_ALLOC_CONF",
                "garbage_collection_threshold:0.6",
            )],
        ),
        (vec!["--no-allocator-hint"], vec![]),
    ] {
        let sb = Sandbox::new();
        let (out, seen) = run_cuda(&sb, &extra, &["--batch_size", "16", "--fragmented"], &env);
        let stderr = stderr_of(&out);
        // The fixture stays fragmented without expandable segments: every attempt dies,
        // each at a smaller batch, down to the floor.
        assert_eq!(out.status.code(), Some(75), "{stderr}");
        let b: Vec<u64> = batches(&seen).iter().map(|b| b.0).collect();
        assert!(b.windows(2).all(|w| w[1] < w[0]), "{b:?} {stderr}");
        assert!(
            !stderr.contains("expandable_segments:True (knobs"),
            "{stderr}"
        );
        let want = env
            .first()
            .map(|(_, v)| Value::from(*v))
            .unwrap_or(Value::Null);
        assert!(seen.iter().all(|s| s["alloc_conf"] == want), "{seen:?}");
        assert!(sb.summary()["attempts"][1].get("hint").is_none());
    }
}

/// A real kernel OOM kill in a 100 MiB cgroup: the fit reads the cgroup limit and the peak. A
/// kill's peak is the limit itself, which says the batch did not fit but not by how much, so
/// the fit halves and says exactly that.
#[test]
fn a_cgroup_kill_is_read_as_the_limit_and_the_peak() {
    if own_v1_memory_cgroup().is_none() {
        eprintln!("SKIPPED a_cgroup_kill_is_read_as_the_limit_and_the_peak: no writable cgroup v1 memory controller here (needs root)");
        return;
    }
    let sb = Sandbox::new();
    let record = sb.path("record.txt");
    let script = fixture("fit_alloc.py");
    let (out, summary) = sb.run_ok(
        &["--memory-max", "100M"],
        &[
            "python3",
            &script,
            "--record",
            record.to_str().unwrap(),
            "--batch_size",
            "16",
            "--fixed-mb",
            "10",
            "--sample-mb",
            "8",
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(causes(&summary), ["oom_killed", "ok"], "{stderr}");
    assert!(
        stderr.contains(
            "attempt 2 in 0.0s: --batch_size 16→8 (halving: cgroup limit 100.0 MiB, need at 16 ≥ 100.0 MiB: \
             that shows 16 does not fit, not by how much)"
        ),
        "{stderr}"
    );
}
