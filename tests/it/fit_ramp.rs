//! `--strategy fit` with the fixed part seen before the first step: a real job under
//! `--memory-max` loads a fixed part, holds it for a few ticks, then dies by a cgroup kill in its
//! first step. A kill's peak is the limit, a bare bound ("at least the limit"): with the fixed
//! part seen, it caps the next batch, but it never shows that half of the batch cannot fit, so
//! the fit halves (issue 17: never cut deeper than the evidence shows) and says why.

use crate::util;

use util::{causes, fixture, own_v1_memory_cgroup, stderr_of, Sandbox};

/// 500 MiB limit; the job holds about 430 MiB (420 MiB and the interpreter) until oomguard has
/// sampled it 5 times (at `--interval 100ms`), then needs 5 MiB a sample: at 32 it is killed,
/// and at 16 (≈ 510 MiB). A kill at 16 says per sample > (500 − F) / 16, which caps the next
/// batch at about 3 with the 10% margin, but at 8 the need it shows is only F + (500 − F) / 2,
/// within the limit: 8 is tried, and fits (≈ 470 MiB). Each step starts just after a tick, so
/// its climb and the kill mostly fall before the next one: the kill itself says the plateau
/// was left.
#[test]
fn a_kill_at_the_limit_halves_with_the_fixed_part_seen() {
    if own_v1_memory_cgroup().is_none() {
        eprintln!("SKIPPED a_kill_at_the_limit_halves_with_the_fixed_part_seen: no writable cgroup v1 memory controller here (needs root)");
        return;
    }
    let sb = Sandbox::new();
    let record = sb.path("record.txt");
    let script = fixture("fitramp_alloc.py");
    let (out, summary) = sb.run_ok(
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
            // Held until oomguard has sampled the plateau this often (a plateau is 3 samples),
            // however late a loaded machine's ticks come.
            "--hold-samples",
            "5",
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(
        causes(&summary),
        ["oom_killed", "oom_killed", "ok"],
        "{stderr}"
    );
    let batches: Vec<u64> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(batches, [32, 16, 8], "{stderr}");
    // Halving, and the line says on what: the fixed part seen (the 420 MiB plateau, or the
    // interpreter's few MiB where its start held for a few ticks: the lowest plateau counts)
    // and the kill's bound.
    let line = stderr
        .lines()
        .find(|l| l.contains("attempt 3 in"))
        .unwrap_or_else(|| panic!("no relaunch line: {stderr}"));
    assert!(
        line.contains("--batch_size 16→8 (halving: cgroup limit 500.0 MiB, fixed ")
            && line.contains("seen before the first step, need at 16 ≥ 500.0 MiB"),
        "{line}"
    );
}
