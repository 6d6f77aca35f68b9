//! `--strategy fit` with the fixed part seen before the first step: a real job under
//! `--memory-max` loads a fixed part, holds it for a few ticks, then dies by a cgroup kill in its
//! first step. A kill's peak is the limit, a bare bound; with the fixed part sampled on the
//! plateau, the fit caps the next batch below what halving would try and lands a batch that
//! fits in one relaunch.

mod util;

use util::{causes, fixture, own_v1_memory_cgroup, stderr_of, Sandbox};

/// 500 MiB limit; the job holds about 430 MiB (420 MiB and the interpreter) for 1.5 s
/// (15 ticks at `--interval 100ms`), then needs 5 MiB a sample: at 32 it is killed. Halving
/// tries 16 (≈ 510 MiB: killed again), then 8. With the fixed part F seen, the kill says per
/// sample > (500 − F) / 32, so with the 10% margin at most 32 × (450 − F) / (500 − F) ≈ 9
/// can fit: under half, so that is the batch, and it fits (≈ 475 MiB).
#[test]
fn a_fixed_part_seen_before_the_step_lands_a_fitting_batch_in_one_relaunch() {
    if own_v1_memory_cgroup().is_none() {
        eprintln!("SKIPPED a_fixed_part_seen_before_the_step_lands_a_fitting_batch_in_one_relaunch: no writable cgroup v1 memory controller here (needs root)");
        return;
    }
    let sb = Sandbox::new();
    let record = sb.path("record.txt");
    let script = fixture("fitramp_alloc.py");
    let out = sb
        .run(
            &["--memory-max", "500M", "--interval", "100ms"],
            &[
                "python3",
                &script,
                "--record",
                record.to_str().unwrap(),
                "--batch_size",
                "32",
                "--fixed-mb",
                "420",
                "--sample-mb",
                "5",
                "--hold-s",
                "1.5",
            ],
        )
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["oom_killed", "ok"], "{stderr}");
    let batches: Vec<u64> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(batches.len(), 2, "{batches:?}\n{stderr}");
    assert_eq!(batches[0], 32);
    // Below halving's 16 (which dies: 420 + 80 MiB and the interpreter exceed 500), a batch
    // that fits, and not the floor: the plateau put a number on the fixed part.
    assert!((2..16).contains(&batches[1]), "{batches:?}\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("attempt 2 in"))
        .unwrap_or_else(|| panic!("no relaunch line: {stderr}"));
    assert!(
        line.contains(&format!("--batch_size 32→{}", batches[1]))
            && line.contains("seen before the first step")
            && line.contains(&format!("so at most {} fits", batches[1])),
        "{line}"
    );
}
