//! Never hang, end to end: a job that goes silent after an out-of-memory error is stopped after
//! `--hang-timeout` and relaunched smaller (cause `hung_after_oom`); one that keeps printing
//! after its OOM is left alone; `--hang-timeout 0` waits; a job silent and idle for
//! `--stall-timeout` is stopped (cause `stalled`) and relaunched unchanged only within
//! `--retries`, while a silent job busy on the CPU is not. Real binary, real processes
//! (tests/fixtures/hang_job.py); nothing here waits on the clock: the tests read the job's
//! output, the run directory and the job's own record.

use crate::util;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use util::{alive, causes, fixture, release_fifo, stderr_of, wait_until, Running, Sandbox};

/// A real PyTorch 2.5 out-of-memory traceback (RLinf issue #255) from the corpus: a worker that
/// ran out of memory while its main process waits on it.
fn oom_text() -> String {
    fixture("oom-corpus/cuda_oom__v2_5_multi_process_info.txt")
}

/// Longer than any of these runs takes; only reached when oomguard waits on a quiet job for
/// good, which is the bug under test: it is then killed and the test fails.
const NEVER: Duration = Duration::from_secs(120);

/// Waits until oomguard has taken `n` more samples of the job (each `--interval` after the
/// last at least); fails if it ended first.
fn wait_ticks(running: &mut Running, sb: &Sandbox, n: usize) {
    let from = ticks(sb);
    let mut ended = false;
    wait_until(NEVER, || {
        ended = running.ended();
        ended || ticks(sb) >= from + n
    });
    assert!(
        !ended && ticks(sb) >= from + n,
        "oomguard ended (or stopped sampling) while the job should have been left running"
    );
}

/// The job's own record: per attempt, its PID and batch.
fn record(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record line is JSON"))
        .collect()
}

/// The batch each attempt ran with, as summary.json says.
fn batches(summary: &Value) -> Vec<u64> {
    summary["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["batch_size"].as_u64().expect("batch_size"))
        .collect()
}

/// Rows of samples.csv so far (one per tick, after the header).
fn ticks(sb: &Sandbox) -> usize {
    std::fs::read_to_string(sb.run_dir().join("samples.csv"))
        .map(|t| t.lines().count().saturating_sub(1))
        .unwrap_or(0)
}

fn hang_job(mode: &str, record: &Path, extra: &[&str]) -> Vec<String> {
    let mut job: Vec<String> = [
        "python3",
        &fixture("hang_job.py"),
        mode,
        "--oom",
        &oom_text(),
        "--record",
        record.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    job.extend(extra.iter().map(|s| s.to_string()));
    job
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_job_silent_after_an_oom_is_stopped_and_relaunched_smaller() {
    let sb = Sandbox::new();
    let rec = sb.path("record.jsonl");
    let job = hang_job("pause", &rec, &["--batch_size", "8", "--fits", "4"]);
    let out = Running::start(
        &sb,
        sb.run(
            &[
                "--hang-timeout",
                "1s",
                "--interval",
                "100ms",
                "--grace",
                "5s",
            ],
            &strs(&job),
        ),
    )
    .finish(NEVER);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "no output for 1s after an out-of-memory error: stopping the job (SIGTERM, then SIGKILL after --grace)"
        ),
        "{err}"
    );
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["hung_after_oom", "ok"], "{summary:#}");
    assert_eq!(batches(&summary), [8, 4], "relaunched smaller");
    let first = &summary["attempts"][0];
    assert_eq!(first["signal"], 15, "stopped with SIGTERM: {first}");
    let evidence = first["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("no output for 1s after an out-of-memory error")
            && evidence.contains("CUDA out of memory. Tried to allocate 86.00 MiB"),
        "{evidence}"
    );
    // The fit reads the message's sizes as it does a device_oom's (issue 17).
    let relaunch = err
        .lines()
        .find(|l| l.contains("attempt 2 in"))
        .unwrap_or_else(|| panic!("no relaunch line: {err}"));
    assert!(
        relaunch.contains("need at 8 ≥")
            && !relaunch.contains("no out-of-memory message with sizes"),
        "{relaunch}"
    );
    let seen = record(&rec);
    assert_eq!(seen.len(), 2, "{seen:?}");
    let hung_pid = seen[0]["pid"].as_u64().unwrap() as u32;
    assert!(!alive(hung_pid), "the hung job is gone");
}

#[test]
fn a_job_that_keeps_printing_after_its_oom_is_not_touched() {
    let sb = Sandbox::new();
    let rec = sb.path("record.jsonl");
    let job = hang_job("print", &rec, &["--batch_size", "8"]);
    let out = Running::start(
        &sb,
        sb.run(
            &["--hang-timeout", "1s", "--interval", "100ms"],
            &strs(&job),
        ),
    )
    .finish(NEVER);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("no output for"), "{err}");
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["ok"], "{summary:#}");
    assert_eq!(record(&rec).len(), 1, "never relaunched");
    let log = std::fs::read_to_string(sb.run_dir().join("attempt-1.log")).unwrap();
    assert!(log.contains("step 29: loss"), "ran to its end:\n{log}");
    // Not left alone for want of reading it: had it gone silent here, the output shows an
    // out-of-memory error it did not say it survived.
    let classified = sb
        .oomguard(&[
            "classify",
            sb.run_dir().join("attempt-1.log").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&classified.stdout).starts_with("device_oom\t"),
        "{classified:?}"
    );
}

#[test]
fn hang_timeout_zero_waits_for_the_job() {
    let sb = Sandbox::new();
    let rec = sb.path("record.jsonl");
    let fifo = sb.path("release");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let job = hang_job(
        "fifo",
        &rec,
        &["--batch_size", "8", "--release", fifo.to_str().unwrap()],
    );
    let mut running = Running::start(
        &sb,
        sb.run(&["--hang-timeout", "0", "--interval", "50ms"], &strs(&job)),
    );
    let log = sb.run_dir().join("attempt-1.log");
    assert!(
        wait_until(NEVER, || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("torch.OutOfMemoryError"))),
        "the job printed its OOM"
    );
    // 40 ticks at least 50 ms apart: more than 2 s of silence after the OOM, twice what
    // `--hang-timeout 1s` waits.
    wait_ticks(&mut running, &sb, 40);
    let pid = record(&rec)[0]["pid"].as_u64().unwrap() as u32;
    assert!(alive(pid), "the job was left waiting");
    util::release_fifo(&fifo);
    let out = running.finish(NEVER);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("no output for"), "{err}");
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["ok"], "{summary:#}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("released"), "{log}");
}

#[test]
fn a_stalled_job_is_stopped_and_relaunched_unchanged_within_retries() {
    let sb = Sandbox::new();
    let rec = sb.path("record.jsonl");
    let job = hang_job("silent", &rec, &["--batch_size", "8"]);
    let out = Running::start(
        &sb,
        sb.run(
            &[
                "--stall-timeout",
                "1s",
                "--retries",
                "1",
                "--interval",
                "100ms",
                "--grace",
                "5s",
            ],
            &strs(&job),
        ),
    )
    .finish(NEVER);
    let err = stderr_of(&out);
    // Not a memory death: relaunched once (--retries 1), unchanged, then the run fails with the
    // job's own ending (SIGTERM).
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert_eq!(
        err.matches("no output and no CPU time for 1s: stopping the job")
            .count(),
        2,
        "{err}"
    );
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["stalled", "stalled"], "{summary:#}");
    assert_eq!(batches(&summary), [8, 8], "relaunched unchanged");
    assert_eq!(summary["outcome"], "failed");
    let seen = record(&rec);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for attempt in &seen {
        assert!(!alive(attempt["pid"].as_u64().unwrap() as u32));
    }
}

#[test]
fn a_silent_job_busy_on_the_cpu_is_not_stalled() {
    let sb = Sandbox::new();
    let rec = sb.path("record.jsonl");
    let done = sb.path("done");
    let job = hang_job(
        "busy",
        &rec,
        &["--batch_size", "8", "--release", done.to_str().unwrap()],
    );
    let mut running = Running::start(
        &sb,
        sb.run(
            &["--stall-timeout", "1s", "--interval", "50ms"],
            &strs(&job),
        ),
    );
    assert!(
        wait_until(NEVER, || !record(&rec).is_empty()),
        "the job started"
    );
    // More than 2 s of silence, twice the stall timeout.
    wait_ticks(&mut running, &sb, 40);
    std::fs::write(&done, "").unwrap();
    let out = running.finish(NEVER);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("no CPU time"), "{err}");
    assert_eq!(causes(&sb.summary()), ["ok"]);
}

/// oomguard's peak resident set (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("oomguard runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in kB")
}

#[test]
fn reading_a_silent_job_without_an_oom_leaves_oomguard_as_small_as_before() {
    // (issue 21) The hang watch reads a job's output once it has been silent for
    // --hang-timeout. Output that shows no memory error at all (a step line that mentions
    // memory, as training logs do) is turned away before the classifier's signature table is
    // compiled, which otherwise kept about 13 MiB of heap for the rest of the run. Measured
    // against the same run without the watch, while the job still runs (its end is classified,
    // which compiles the table, rightly).
    let peak = |hang: &str| {
        let sb = Sandbox::new();
        let fifo = sb.path("hold");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let job =
            "echo 'step 10 | loss 2.31 | mem 1.2G | max_memory_allocated 1.0 GiB'; exec cat \"$0\"";
        let mut running = Running::start(
            &sb,
            sb.run(
                &["--interval", "100ms", "--no-cgroup", "--hang-timeout", hang],
                &["sh", "-c", job, fifo.to_str().unwrap()],
            ),
        );
        // 2 s of ticks: the job has been silent for 1 s, and the watch has read it.
        wait_ticks(&mut running, &sb, 20);
        let peak_kib = peak_rss_kib(running.child.id());
        release_fifo(&fifo);
        let out = running.finish(NEVER);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        peak_kib
    };
    let unwatched_kib = peak("0");
    let watched_kib = peak("1s");
    assert!(
        watched_kib < unwatched_kib + 4096,
        "peak RSS {watched_kib} KiB with the hang watch, {unwatched_kib} KiB without"
    );
}
