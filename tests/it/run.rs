//! `oomguard run` end to end: the real binary supervising real child processes. Output
//! passthrough, convergence after out-of-memory deaths, kernel OOM kills in a real memory cgroup,
//! SIGKILL without OOM, and every kind of bad input.

use crate::util;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use util::{causes, fixture, stderr_of, Sandbox};

fn column(summary: &Value, key: &str) -> Vec<Value> {
    summary["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a[key].clone())
        .collect()
}

#[test]
fn output_passes_through_byte_for_byte() {
    let sb = Sandbox::new();
    let mut stdout_bytes = Vec::new();
    for i in 0..300 {
        write!(
            stdout_bytes,
            "\r{:3}%|{:<30}| \x1b[32m{i}/300\x1b[0m",
            i / 3,
            "#".repeat(i / 10)
        )
        .unwrap();
    }
    stdout_bytes.extend_from_slice(
        b"\ninvalid utf-8: \xff\xfe\xc3 then \xe2\x82 and no newline at the end",
    );
    let stderr_bytes: Vec<u8> = (0..=255u8).cycle().take(50_000).collect();
    std::fs::write(sb.path("out.bin"), &stdout_bytes).unwrap();
    std::fs::write(sb.path("err.bin"), &stderr_bytes).unwrap();
    let out = sb
        .run(
            &["-q"],
            &[
                "python3",
                &fixture("emit.py"),
                sb.path("out.bin").to_str().unwrap(),
                sb.path("err.bin").to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(
        out.stdout == stdout_bytes,
        "stdout differs: {} vs {} bytes",
        out.stdout.len(),
        stdout_bytes.len()
    );
    assert!(
        out.stderr == stderr_bytes,
        "stderr differs: {} vs {} bytes",
        out.stderr.len(),
        stderr_bytes.len()
    );
    // The log holds both streams, interleaved at line boundaries: the same bytes, plus a newline
    // where one stream's unfinished line was written out at its end and the other's followed.
    let log = std::fs::read(sb.run_dir().join("attempt-1.log")).unwrap();
    let added = (log
        .len()
        .checked_sub(stdout_bytes.len() + stderr_bytes.len()))
    .expect("the log holds every byte");
    assert!(added <= 1, "{added} bytes added to the log");
    let mut sorted_log = log.clone();
    sorted_log.sort_unstable();
    let mut both = [stdout_bytes, stderr_bytes, b"\n".repeat(added)].concat();
    both.sort_unstable();
    assert!(
        sorted_log == both,
        "the log holds other bytes than the job wrote"
    );
}

/// A 200 MiB line with no newline goes through while oomguard's own peak RSS stays small.
#[test]
fn a_long_line_keeps_oomguard_memory_bounded() {
    const MIB: usize = 200;
    let sb = Sandbox::new();
    let mut child = sb
        .run(
            &["-q"],
            &["python3", &fixture("long_line.py"), &MIB.to_string()],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    while total < MIB << 20 {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "oomguard's stdout closed after {total} bytes");
        assert!(buf[..n].iter().all(|&b| b == b'x'));
        total += n;
    }
    // Every byte has passed through; the job now blocks on stdin, so oomguard is still alive.
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert_eq!(total, MIB << 20);
    assert!(
        hwm_kib < 32 * 1024,
        "oomguard peaked at {hwm_kib} KiB while forwarding a {MIB} MiB line"
    );
}

#[test]
fn converges_after_cuda_oom_keeping_the_effective_batch() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    // The halving ladder: fake_cuda_oom.py prints the same sizes at every batch, which no fit
    // could read (tests/it/fit.rs has the fit's own).
    let (out, summary) = sb.run_ok(
        &["--strategy", "halve"],
        &[
            "python3",
            &fixture("fake_cuda_oom.py"),
            "--batch_size",
            "64",
            "--gradient_accumulation_steps",
            "1",
            "--fits",
            "10",
            "--record",
            record.to_str().unwrap(),
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(summary["outcome"], "succeeded");
    assert_eq!(
        causes(&summary),
        ["device_oom", "device_oom", "device_oom", "ok"]
    );
    let batches = column(&summary, "batch_size");
    let accums = column(&summary, "accum");
    assert_eq!(batches, [64, 32, 16, 8]);
    assert_eq!(accums, [1, 2, 4, 8]);
    assert_eq!(
        summary["final"],
        serde_json::json!({"batch_size": 8, "accum": 8})
    );
    for a in summary["attempts"].as_array().unwrap() {
        assert!(a["evidence"].as_str().unwrap().len() > 3, "{a}");
        assert!(a["started_at"].as_str().unwrap().ends_with('Z'));
        assert!(a["duration_s"].as_f64().unwrap() >= 0.0);
    }
    // The relaunched commands carry the new values; everything else is as the user wrote it.
    let cmd4: Vec<&str> = summary["attempts"][3]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        cmd4[2..6],
        ["--batch_size", "8", "--gradient_accumulation_steps", "8"]
    );
    assert_eq!(cmd4[6..8], ["--fits", "10"]);
    // What each attempt saw.
    let seen: Vec<Value> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen.len(), 4);
    for (i, s) in seen.iter().enumerate() {
        let env = &s["env"];
        assert_eq!(env["OOMGUARD_ATTEMPT"], (i + 1).to_string());
        assert_eq!(env["OOMGUARD_BATCH_SIZE"], s["batch"].to_string());
        assert_eq!(env["OOMGUARD_GRAD_ACCUM"], s["accum"].to_string());
        assert_eq!(env["OOMGUARD_RUN_DIR"], sb.run_dir().to_str().unwrap());
        assert_eq!(env["PYTHONUNBUFFERED"], "1");
        assert_eq!(
            s["batch"].as_u64().unwrap() * s["accum"].as_u64().unwrap(),
            64
        );
        if i == 0 {
            assert!(env.get("OOMGUARD_PREV_CAUSE").is_none());
        } else {
            assert_eq!(env["OOMGUARD_PREV_CAUSE"], "device_oom");
        }
    }
    // One line per death and per relaunch, then the table.
    assert!(
        stderr.matches("oomguard: attempt ").count() >= 6,
        "{stderr}"
    );
    assert!(
        stderr.contains("--batch_size 64→32, --gradient_accumulation_steps 1→2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("oomguard: attempt  batch  accum  cause"),
        "{stderr}"
    );
}

#[test]
fn gives_up_at_min_batch_with_its_own_exit_code() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let out = sb
        .run(
            // Halving, and no fragmentation hint: at batch 2 the fixed message's 1.12 GiB
            // reserved-but-unallocated exceeds the 1 GiB it tries to allocate.
            &[
                "--min-batch",
                "2",
                "--strategy",
                "halve",
                "--no-allocator-hint",
            ],
            &[
                "python3",
                &fixture("fake_cuda_oom.py"),
                "--batch_size",
                "5",
                "--fits",
                "1",
                "--record",
                record.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "gave_up");
    assert_eq!(column(&summary, "batch_size"), [5, 2]);
    assert_eq!(column(&summary, "accum"), [Value::Null, Value::Null]);
    assert_eq!(summary["final"]["accum"], Value::Null);
    assert!(
        stderr_of(&out).contains("no knob can move: batch 2 (floor 2)"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn without_an_accumulation_flag_it_warns_once_that_the_effective_batch_shrinks() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let (out, summary) = sb.run_ok(
        &[],
        &[
            "python3",
            &fixture("fake_cuda_oom.py"),
            "--batch-size=16",
            "--fits",
            "3",
            "--record",
            record.to_str().unwrap(),
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(column(&summary, "batch_size"), [16, 8, 4, 2]);
    assert_eq!(
        stderr.matches("effective batch shrinks").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("--accum-arg"), "{stderr}");
}

#[test]
fn a_named_accumulation_flag_is_appended() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let (_, summary) = sb.run_ok(
        &["--accum-arg", "--gradient_accumulation_steps"],
        &[
            "python3",
            &fixture("fake_cuda_oom.py"),
            "--batch_size",
            "6",
            "--fits",
            "3",
            "--record",
            record.to_str().unwrap(),
        ],
    );
    assert_eq!(column(&summary, "batch_size"), [6, 3]);
    assert_eq!(column(&summary, "accum"), [1, 2]);
    let cmd2 = summary["attempts"][1]["command"].as_array().unwrap();
    assert_eq!(
        cmd2[cmd2.len() - 2..],
        [
            Value::from("--gradient_accumulation_steps"),
            Value::from("2")
        ]
    );
    // The first attempt runs the command exactly as given.
    assert_eq!(summary["attempts"][0]["command"], summary["command"]);
}

#[test]
fn sigkill_without_oom_evidence_is_killed_not_oom_killed() {
    let sb = Sandbox::new();
    let (_, summary) = sb.run_ok(
        &[],
        &[
            "python3",
            &fixture("self_kill.py"),
            "--batch_size",
            "8",
            "--fits",
            "4",
        ],
    );
    assert_eq!(causes(&summary), ["killed", "ok"]);
    assert_eq!(summary["attempts"][0]["signal"], 9);
    assert_eq!(summary["attempts"][0]["exit_code"], Value::Null);
}

/// A memory cgroup below our own with `limit_bytes`, removed on drop. `None` (with the reason)
/// where this machine does not let us make one.
struct TestCgroup {
    path: PathBuf,
}

impl TestCgroup {
    fn new(limit_bytes: u64) -> Result<TestCgroup, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let name = format!("oomguard-test-{}-{}", std::process::id(), rand_suffix());
        // cgroup v1: the `memory` hierarchy.
        if let Some(rel) = own
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
        {
            let path = Path::new("/sys/fs/cgroup/memory")
                .join(rel.trim_start_matches('/'))
                .join(&name);
            std::fs::create_dir(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let cg = TestCgroup { path };
            std::fs::write(
                cg.path.join("memory.limit_in_bytes"),
                limit_bytes.to_string(),
            )
            .map_err(|e| e.to_string())?;
            let _ = std::fs::write(
                cg.path.join("memory.memsw.limit_in_bytes"),
                limit_bytes.to_string(),
            );
            return Ok(cg);
        }
        // cgroup v2: the unified hierarchy, memory controller enabled for children.
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or("no cgroup found")?;
        let parent = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
        let controllers =
            std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        if !controllers.contains("memory") {
            return Err(format!(
                "memory controller not enabled in {}",
                parent.display()
            ));
        }
        let path = parent.join(&name);
        std::fs::create_dir(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let cg = TestCgroup { path };
        std::fs::write(cg.path.join("memory.max"), limit_bytes.to_string())
            .map_err(|e| e.to_string())?;
        let _ = std::fs::write(cg.path.join("memory.swap.max"), "0");
        Ok(cg)
    }

    fn procs(&self) -> String {
        self.path.join("cgroup.procs").display().to_string()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Empty once oomguard has reaped the job; retry briefly in case the kernel lags.
        util::wait_until(std::time::Duration::from_secs(5), || {
            std::fs::remove_dir(&self.path).is_ok()
        });
    }
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

#[test]
fn a_real_kernel_oom_kill_is_oom_killed_and_the_batch_converges() {
    if !Path::new("/dev/kmsg").exists() || std::fs::File::open("/dev/kmsg").is_err() {
        eprintln!("SKIPPED a_real_kernel_oom_kill: /dev/kmsg is not readable here (needs root)");
        return;
    }
    let cg = match TestCgroup::new(80 << 20) {
        Ok(cg) => cg,
        Err(reason) => {
            eprintln!("SKIPPED a_real_kernel_oom_kill: no writable memory cgroup ({reason})");
            return;
        }
    };
    let sb = Sandbox::new();
    let procs = cg.procs();
    // The job moves itself into the small cgroup, then becomes the allocator (same PID).
    let (_, summary) = sb.run_ok(
        &[],
        &[
            "sh",
            "-c",
            "echo $$ > \"$1\" && shift && exec python3 \"$@\"",
            "sh",
            &procs,
            &fixture("alloc.py"),
            "--batch_size",
            "8",
            "--sample-mb",
            "12",
        ],
    );
    let causes = causes(&summary);
    assert_eq!(
        causes.first().map(String::as_str),
        Some("oom_killed"),
        "{summary:#}"
    );
    assert_eq!(causes.last().map(String::as_str), Some("ok"));
    assert_eq!(summary["attempts"][0]["signal"], 9);
    let evidence = summary["attempts"][0]["evidence"].as_str().unwrap();
    assert!(evidence.to_lowercase().contains("kill"), "{evidence}");
    assert!(summary["final"]["batch_size"].as_u64().unwrap() <= 4);
}

/// Every bad input: one clear line, exit 2, nothing started, nothing written.
#[test]
fn bad_input_is_one_line_exit_2_and_nothing_happens() {
    let sb = Sandbox::new();
    let marker = sb.path("started");
    let job = |batch: &'static str| -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            "touch \"$0\"".into(),
            marker.to_str().unwrap().into(),
            "--batch_size".into(),
            batch.into(),
        ]
    };
    std::fs::write(sb.path("a-file"), "").unwrap();
    let under_file = sb.path("a-file/run");
    let held = sb.path("held");
    std::fs::create_dir(&held).unwrap();
    std::fs::write(held.join("summary.json"), "{}").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["run".into(), "--".into()], "no command given"),
        (vec!["run".into()], "no command given"),
        (
            [
                vec![
                    "run".into(),
                    "--batch-arg".into(),
                    "--bsz".into(),
                    "--".into(),
                ],
                job("8"),
            ]
            .concat(),
            "--bsz is not in the command",
        ),
        (
            [vec!["run".into(), "--".into()], job("eight")].concat(),
            "not a whole number",
        ),
        (
            [
                vec!["run".into(), "--min-batch".into(), "16".into(), "--".into()],
                job("8"),
            ]
            .concat(),
            "--min-batch 16",
        ),
        (
            [
                vec![
                    "run".into(),
                    "--run-dir".into(),
                    under_file.to_str().unwrap().into(),
                    "--".into(),
                ],
                job("8"),
            ]
            .concat(),
            "run directory",
        ),
        (
            [
                vec![
                    "run".into(),
                    "--run-dir".into(),
                    held.to_str().unwrap().into(),
                    "--".into(),
                ],
                job("8"),
            ]
            .concat(),
            "already holds summary.json",
        ),
        (
            [
                vec!["run".into(), "--grace".into(), "10".into(), "--".into()],
                job("8"),
            ]
            .concat(),
            "not a duration",
        ),
        (
            [
                vec!["run".into(), "--backoff".into(), "soon".into(), "--".into()],
                job("8"),
            ]
            .concat(),
            "not a duration",
        ),
        (
            [
                vec!["run".into(), "--frobnicate".into(), "--".into()],
                job("8"),
            ]
            .concat(),
            "--frobnicate",
        ),
        (
            [
                vec![
                    "run".into(),
                    "--max-attempts".into(),
                    "0".into(),
                    "--".into(),
                ],
                job("8"),
            ]
            .concat(),
            "--max-attempts",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sb.oomguard(&args).output().unwrap();
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("oomguard: error: "),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(want), "{args:?}: want {want:?} in {stderr}");
        assert!(!marker.exists(), "{args:?} started the job");
        assert!(
            !sb.path("state").exists(),
            "{args:?} created the default run directory"
        );
        assert_eq!(
            std::fs::read_to_string(held.join("summary.json")).unwrap(),
            "{}"
        );
    }
}
