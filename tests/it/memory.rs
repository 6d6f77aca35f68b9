//! The memory watch end to end: sampling (samples.csv, peaks in summary.json), the per-attempt
//! memory cgroup with a real kernel OOM kill, soft bounds that stop the job gracefully, the GPU
//! columns and the wait for a free GPU through the fake probe, the growth warning, and a machine
//! without NVML or writable cgroups.

use crate::util;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use util::{causes, fixture, own_v1_memory_cgroup, stderr_of, Sandbox};

const MIB: u64 = 1 << 20;

fn u64_at(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing or null in {v}"))
}

/// samples.csv as rows of optional numbers, after checking the header.
fn samples(sb: &Sandbox) -> Vec<Vec<Option<f64>>> {
    let text = std::fs::read_to_string(sb.run_dir().join("samples.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(concat!(
            "unix_time,attempt,tree_rss_bytes,tree_pss_bytes,tree_swap_bytes,sys_available_bytes,",
            "gpu_used_bytes,cgroup_bytes,sys_swap_free_bytes,psi_some_avg10,",
            "cgroup_working_set_bytes,cgroup_anon_bytes,cgroup_file_bytes,cgroup_shmem_bytes,",
            "cgroup_swap_bytes,gpu_neighbours_bytes,gpu_driver_bytes,gpu_total_bytes,",
            "gpu_neighbours,slurm_parts,steps"
        ))
    );
    lines
        .map(|l| {
            // Two cells after the 18 numbers, who the GPU's neighbours are and where the Slurm
            // tasks' memory is, are text (quoted where they hold a comma): the 18 are read (the
            // probe's steps after them are probe.rs's).
            let cells: Vec<Option<f64>> = l
                .splitn(19, ',')
                .take(18)
                .map(|c| (!c.is_empty()).then(|| c.parse().unwrap()))
                .collect();
            assert_eq!(cells.len(), 18, "{l}");
            cells
        })
        .collect()
}

fn column_max(rows: &[Vec<Option<f64>>], attempt: u64, col: usize) -> Option<u64> {
    rows.iter()
        .filter(|r| r[1] == Some(attempt as f64))
        .filter_map(|r| r[col])
        .map(|v| v as u64)
        .max()
}

#[test]
fn memory_max_gets_a_real_kernel_oom_kill_attributed_by_the_cgroup_and_converges() {
    let Some(parent) = own_v1_memory_cgroup() else {
        eprintln!("SKIPPED memory_max real OOM: no writable cgroup v1 memory controller here (needs root)");
        return;
    };
    let sb = Sandbox::new();
    let (_, summary) = sb.run_ok(
        &["--memory-max", "100M"],
        &[
            "python3",
            &fixture("alloc.py"),
            "--batch_size",
            "16",
            "--sample-mb",
            "16",
        ],
    );
    let causes = causes(&summary);
    assert_eq!(
        causes.first().map(String::as_str),
        Some("oom_killed"),
        "{summary:#}"
    );
    assert_eq!(causes.last().map(String::as_str), Some("ok"), "{summary:#}");
    let first = &summary["attempts"][0];
    assert_eq!(first["signal"], 9);
    assert!(
        first["evidence"].as_str().unwrap().contains("cgroup"),
        "{first}"
    );
    // The cgroup's high-water mark sits at the limit the kernel enforced.
    let peak = u64_at(first, "peak_cgroup_bytes");
    assert!(peak > 90 * MIB && peak <= 100 * MIB, "{peak}");
    assert!(u64_at(&summary["final"], "batch_size") <= 4);
    // Each attempt ran inside its own cgroup from its first instruction on...
    for n in 1..=summary["attempts"].as_array().unwrap().len() {
        let log = std::fs::read_to_string(sb.run_dir().join(format!("attempt-{n}.log"))).unwrap();
        assert!(
            log.contains(&format!("-attempt-{n} ")) || log.contains(&format!("-attempt-{n}\n")),
            "{log}"
        );
    }
    // ...and every one of them is gone afterwards.
    let log = std::fs::read_to_string(sb.run_dir().join("attempt-1.log")).unwrap();
    let ours = log
        .split("oomguard-")
        .nth(1)
        .and_then(|rest| rest.split('-').next())
        .unwrap();
    let prefix = format!("oomguard-{ours}-attempt-");
    let left: Vec<String> = std::fs::read_dir(&parent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_soft_limit_stops_the_job_gracefully_and_relaunches_it_smaller() {
    let sb = Sandbox::new();
    let checkpoint = sb.path("checkpoint");
    let (out, summary) = sb.run_ok(
        &["--interval", "50ms", "--max-rss", "150M", "--grace", "20s"],
        &[
            "python3",
            &fixture("grow.py"),
            "--batch_size",
            "8",
            "--sample-mb",
            "40",
            "--hold",
            "60",
            "--fits",
            "2",
            "--checkpoint",
            checkpoint.to_str().unwrap(),
        ],
    );
    let stderr = stderr_of(&out);
    let first = &summary["attempts"][0];
    assert_eq!(first["cause"], "memory_limit", "{summary:#}");
    // Stopped with SIGTERM, it saved its state and exited by itself: no SIGKILL was needed.
    assert_eq!(first["exit_code"], 0, "{first}");
    let evidence = first["evidence"].as_str().unwrap();
    assert!(evidence.contains("--max-rss 150.0 MiB"), "{evidence}");
    assert!(std::fs::read_to_string(&checkpoint)
        .unwrap()
        .starts_with("step "));
    assert_eq!(
        causes(&summary).last().map(String::as_str),
        Some("ok"),
        "{summary:#}"
    );
    assert!(u64_at(&summary["final"], "batch_size") <= 4);
    assert!(stderr.contains("stopping the job (SIGTERM"), "{stderr}");
    assert!(
        stderr.contains("peak "),
        "the death line shows the peaks: {stderr}"
    );
}

#[test]
fn min_available_protects_the_machine() {
    // 99% of RAM is never available, so the bound holds from the first samples on.
    let sb = Sandbox::new();
    let out = sb
        .run(
            &[
                "--interval",
                "50ms",
                "--min-available",
                "99%",
                "--min-batch",
                "2",
            ],
            &[
                "python3",
                &fixture("grow.py"),
                "--batch_size",
                "2",
                "--sample-mb",
                "1",
                "--hold",
                "30",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "gave_up");
    assert_eq!(causes(&summary), ["memory_limit"]);
    assert!(summary["attempts"][0]["evidence"]
        .as_str()
        .unwrap()
        .contains("--min-available"));
}

#[test]
fn samples_csv_and_peaks_agree_and_a_forked_tree_is_counted_once() {
    let sb = Sandbox::new();
    let (_, summary) = sb.run_ok(
        // PSS, which this test is about, is read for the record only every --pss-interval.
        &["--interval", "50ms", "--pss-interval", "50ms"],
        &[
            "python3",
            &fixture("grow.py"),
            "--batch_size",
            "10",
            "--sample-mb",
            "20",
            "--fork",
            "4",
            "--hold",
            "1.5",
        ],
    );
    let a = &summary["attempts"][0];
    let rows = samples(&sb);
    assert!(rows.len() >= 10, "{} rows", rows.len());
    assert!(rows.iter().all(|r| r[1] == Some(1.0)));
    // 200 MiB shared by a parent and 4 forked workers: PSS counts it once, RSS five times.
    let peak_pss = u64_at(a, "peak_pss_bytes");
    let peak_rss = u64_at(a, "peak_rss_bytes");
    assert!((190 * MIB..320 * MIB).contains(&peak_pss), "PSS {peak_pss}");
    assert!(peak_rss > 800 * MIB, "RSS {peak_rss}");
    // The peaks are at least what the timeline saw.
    assert!(peak_rss >= column_max(&rows, 1, 2).unwrap());
    assert_eq!(
        peak_pss,
        column_max(&rows, 1, 3).unwrap(),
        "PSS is recorded only where read"
    );
    assert_eq!(
        u64_at(a, "peak_swap_bytes"),
        column_max(&rows, 1, 4).unwrap()
    );
    assert!(a["peak_gpu_bytes"].is_null());
    assert!(rows.iter().all(|r| r[5].is_some() && r[6].is_none()));
    if let Some(peak_cgroup) = a["peak_cgroup_bytes"].as_u64() {
        assert!(peak_cgroup >= column_max(&rows, 1, 7).unwrap());
    }
}

#[test]
fn steady_growth_is_warned_about_once() {
    let sb = Sandbox::new();
    let out = sb
        .run(
            &[
                "--interval",
                "50ms",
                "--trend-window",
                "1s",
                "--max-rss",
                "10G",
                "--no-cgroup",
                // Without a cgroup the trend follows PSS, read every --pss-interval under the
                // bound.
                "--pss-interval",
                "50ms",
            ],
            &[
                "python3",
                &fixture("grow.py"),
                "--batch_size",
                "1",
                "--sample-mb",
                "240",
                "--step-mb",
                "4",
                "--hold",
                "0",
            ],
        )
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("memory grows steadily").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("--max-rss 10.0 GiB"), "{stderr}");
}

/// oomguard's stderr lines, as they come.
fn stderr_lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(rx: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return;
                }
            }
            Err(e) => panic!(
                "no line with {needle:?} ({e}); stderr so far:\n{}",
                seen.join("\n")
            ),
        }
    }
}

/// oomguard with `--max-gpu 1G` over a job that reports batch x 200 MiB of GPU memory through
/// the fake probe's file: batch 8 crosses the bound, batch 4 fits.
fn spawn_fake_gpu_job(sb: &Sandbox, gpu_file: &Path) -> std::process::Child {
    std::fs::write(gpu_file, r#"{"devices":[],"processes":[]}"#).unwrap();
    let job = [
        "python3",
        &fixture("grow.py"),
        "--batch_size",
        "8",
        "--sample-mb",
        "1",
        "--gpu-file",
        gpu_file.to_str().unwrap(),
        "--gpu-mb",
        "200",
        "--hold",
        "60",
        "--fits",
        "4",
    ];
    sb.run(
        &[
            "--interval",
            "50ms",
            "--max-gpu",
            "1G",
            "--gpu-free-timeout",
            "60s",
        ],
        &job,
    )
    .env("OOMGUARD_FAKE_GPU", gpu_file)
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

#[test]
fn the_fake_gpu_drives_max_gpu_the_gpu_columns_and_the_wait_for_a_free_gpu() {
    let sb = Sandbox::new();
    let gpu_file = sb.path("gpu.json");
    let mut child = spawn_fake_gpu_job(&sb, &gpu_file);
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    // Attempt 1 holds 8 x 200 MiB of "GPU": stopped, and the driver still lists its PID.
    wait_for_line(&rx, "over --max-gpu", &mut seen);
    wait_for_line(&rx, "waiting up to", &mut seen);
    // The driver lets go: oomguard goes on.
    std::fs::write(&gpu_file, r#"{"devices":[{"index":0,"name":"Fake GPU","used_bytes":0,"total_bytes":85899345920}],"processes":[]}"#)
        .unwrap();
    wait_for_line(&rx, "GPU free after", &mut seen);
    let status = child.wait().unwrap();
    seen.extend(rx.iter());
    assert_eq!(status.code(), Some(0), "{}", seen.join("\n"));
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["memory_limit", "ok"]);
    assert_eq!(
        u64_at(&summary["attempts"][0], "peak_gpu_bytes"),
        1600 * MIB
    );
    assert_eq!(u64_at(&summary["attempts"][1], "peak_gpu_bytes"), 800 * MIB);
    let rows = samples(&sb);
    assert_eq!(column_max(&rows, 1, 6), Some(1600 * MIB));
    assert_eq!(column_max(&rows, 2, 6), Some(800 * MIB));
    assert!(!seen.iter().any(|l| l.contains("GPU monitoring off")));
}

#[test]
fn without_nvml_or_writable_cgroups_everything_else_runs() {
    let sb = Sandbox::new();
    let no_cgroups = sb.path("no-cgroups");
    std::fs::create_dir(&no_cgroups).unwrap();
    let record = sb.path("record.jsonl");
    let job = [
        "python3",
        &fixture("fake_cuda_oom.py"),
        "--batch_size",
        "8",
        "--fits",
        "4",
        "--record",
        record.to_str().unwrap(),
    ];
    let out = sb
        .run(&["--interval", "50ms"], &job)
        .env("OOMGUARD_CGROUP_ROOT", &no_cgroups)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches("GPU monitoring off").count(), 1, "{stderr}");
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["device_oom", "ok"]);
    for a in summary["attempts"].as_array().unwrap() {
        assert!(
            a["peak_cgroup_bytes"].is_null() && a["peak_gpu_bytes"].is_null(),
            "{a}"
        );
    }
    assert!(samples(&sb)
        .iter()
        .all(|r| r[7].is_none() && r[6].is_none()));

    // --memory-max cannot be honoured there: one line, exit 2, nothing created.
    let sb2 = Sandbox::new();
    let out = sb2
        .run(&["--memory-max", "1G"], &job)
        .env("OOMGUARD_CGROUP_ROOT", &no_cgroups)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--memory-max needs a memory cgroup"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--max-rss"),
        "the line names a fix: {stderr}"
    );
    assert!(!sb2.run_dir().exists());
}

#[test]
fn ctrl_c_while_waiting_for_the_gpu_ends_the_run() {
    let sb = Sandbox::new();
    let gpu_file = sb.path("gpu.json");
    let mut child = spawn_fake_gpu_job(&sb, &gpu_file);
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    wait_for_line(&rx, "waiting up to", &mut seen);
    util::kill(child.id(), nix::sys::signal::Signal::SIGINT);
    let status = child.wait().unwrap();
    seen.extend(rx.iter());
    assert_eq!(status.code(), Some(130), "{}", seen.join("\n"));
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted");
    assert_eq!(
        causes(&summary),
        ["memory_limit"],
        "no relaunch after the user's stop"
    );
}

#[test]
fn a_sigkilled_oomguard_leaves_no_attempt_cgroup_behind() {
    let Some(parent) = own_v1_memory_cgroup() else {
        eprintln!("SKIPPED attempt cgroup cleanup: no writable cgroup v1 memory controller here (needs root)");
        return;
    };
    let sb = Sandbox::new();
    let mut child = sb
        .run(
            &[],
            &[
                "python3",
                &fixture("grow.py"),
                "--batch_size",
                "1",
                "--sample-mb",
                "1",
                "--hold",
                "60",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The job's first line names the cgroup it runs in: wait for it, so the cgroup exists.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let name = format!("oomguard-{}-attempt-1", child.id());
    assert!(first.contains(&name), "{first}");
    let dir = parent.join(&name);
    assert!(dir.is_dir());
    util::kill(child.id(), nix::sys::signal::Signal::SIGKILL);
    child.wait().unwrap();
    assert!(
        util::wait_until(Duration::from_secs(20), || !dir.exists()),
        "{} is still there",
        dir.display()
    );
}

/// A job that touches 300 MiB and ends well within one --interval still has real peaks: the
/// kernel's record of the largest resident set (wait4's ru_maxrss) and, in a cgroup, its
/// high-water mark, not the one sample taken at spawn.
#[test]
fn an_attempt_shorter_than_one_interval_still_has_its_peak() {
    for extra in [&["--no-cgroup"][..], &[][..]] {
        let sb = Sandbox::new();
        let mut args = vec!["--interval", "1h"];
        args.extend_from_slice(extra);
        let out = sb
            .run(
                &args,
                &[
                    "python3",
                    &fixture("alloc.py"),
                    "--batch_size",
                    "30",
                    "--sample-mb",
                    "10",
                ],
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", stderr_of(&out));
        let summary = sb.summary();
        let attempt = &summary["attempts"][0];
        for key in ["peak_rss_bytes", "peak_process_rss_bytes"] {
            let peak = u64_at(attempt, key);
            assert!(peak >= 300 * MIB, "{extra:?}: {key} {peak} in {attempt}");
        }
    }
}

/// A job that is stopped (Ctrl-Z'd on its own, or stopped for reading the terminal) when a soft
/// bound ends it is continued along with the SIGTERM, so it ends within --grace instead of
/// waiting it out and being SIGKILLed without a chance to checkpoint.
#[test]
fn a_stopped_job_over_a_soft_bound_gets_its_sigterm() {
    let sb = Sandbox::new();
    let hog = "import os, signal; b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); \
               print('holding', flush=True); os.kill(os.getpid(), signal.SIGSTOP)";
    let out = sb
        .run(
            &[
                "--interval",
                "50ms",
                "--max-rss",
                "40M",
                // Long enough to tell "continued and ended by SIGTERM" from "SIGKILLed when the
                // grace ran out", short enough to fail quickly.
                "--grace",
                "30s",
                "--max-attempts",
                "1",
            ],
            &["python3", "-c", hog],
        )
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    let first = &sb.summary()["attempts"][0];
    assert_eq!(first["cause"], "memory_limit", "{first}");
    // Ended by the SIGTERM itself: it was continued, not left for the SIGKILL after --grace.
    assert_eq!(first["signal"], 15, "{first}");
}
