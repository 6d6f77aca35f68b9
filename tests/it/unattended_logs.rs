//! Logs for journald and machines (issue 9, item 6): no colour when not a terminal, `--log-format
//! json`, and a full disk under the run directory that does not turn the job's success into
//! oomguard's failure.

use crate::util;

use std::path::{Path, PathBuf};
use std::process::Command;

use util::{fixture, is_root, stderr_of, Sandbox};

/// A 1 MiB tmpfs mounted at a directory of the sandbox, unmounted when dropped.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    /// Mounts one, or says why it cannot (not root, no mount(8)).
    fn mount(at: &Path) -> Result<SmallDisk, String> {
        if !is_root() {
            return Err("mounting a tmpfs needs root".into());
        }
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            at: at.to_path_buf(),
        })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
    }
}

/// The names of temporary files left anywhere under `dir`.
fn temp_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir() {
                todo.push(entry.path());
            } else if name.ends_with(".tmp") {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found
}

/// oomguard's warning lines.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("oomguard: warning:"))
        .collect()
}

#[test]
fn a_full_run_directory_is_not_a_failed_job() {
    let sb = Sandbox::new();
    let disk = match SmallDisk::mount(&sb.path("disk")) {
        Ok(disk) => disk,
        Err(why) => {
            println!("SKIPPED a_full_run_directory_is_not_a_failed_job: {why}");
            return;
        }
    };
    let run_dir = disk.at.join("run");
    let script = fixture("cluster_fill.py");
    // 30000 lines of 80 bytes: 2.4 MB, more than twice the disk.
    let out = sb
        .oomguard(&["run", "--run-dir", run_dir.to_str().unwrap(), "--"])
        .args(["python3", &script, "--batch_size", "8", "--lines", "30000"])
        // The job's memory (state) on the same small disk.
        .env("XDG_STATE_HOME", disk.at.join("state"))
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Every byte of the job reached stdout, and its status is the run's.
    assert_eq!(stdout.lines().count(), 30001, "{stderr}");
    assert!(stdout.ends_with("END\n"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("oomguard: error:"), "{stderr}");
    // No temporary file left behind, in the run directory or the state.
    assert_eq!(temp_files(&disk.at), Vec::<String>::new());
    // One warning says what could not be saved.
    let warned = warnings(&stderr);
    assert_eq!(warned.len(), 1, "{stderr}");
    for what in ["attempt logs", "summary.json", "job state"] {
        assert!(
            warned[0].contains(what),
            "{what} missing from {}",
            warned[0]
        );
    }
    assert!(
        warned[0].contains("No space left on device"),
        "{}",
        warned[0]
    );
}

#[test]
fn saves_that_failed_on_a_full_disk_succeed_at_the_next_change() {
    let sb = Sandbox::new();
    let disk = match SmallDisk::mount(&sb.path("disk")) {
        Ok(disk) => disk,
        Err(why) => {
            println!("SKIPPED saves_that_failed_on_a_full_disk_succeed_at_the_next_change: {why}");
            return;
        }
    };
    let run_dir = disk.at.join("run");
    let state = disk.at.join("state");
    let script = fixture("cluster_fill.py");
    // Attempt 1 fills the disk and dies of a CUDA OOM; attempt 2 frees the space and succeeds.
    let out = sb
        .oomguard(&[
            "run",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--backoff",
            "0s",
            "--",
        ])
        .args([
            "python3",
            &script,
            "--batch_size",
            "8",
            "--fits",
            "4",
            "--filler",
        ])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("oomguard: error:"), "{stderr}");
    assert!(stderr.contains("attempt 2 in"), "relaunched: {stderr}");
    // summary.json, which could not be written after attempt 1, holds both attempts.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(util::causes(&summary), ["device_oom", "ok"]);
    assert_eq!(summary["outcome"], "succeeded");
    // So does the job's memory: attempt 1, not written at the time, came with attempt 2.
    let jobs = std::fs::read_dir(state.join("oomguard/jobs"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .expect("the job's memory was written");
    let memory: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(jobs.path()).unwrap()).unwrap();
    let text = memory.to_string();
    assert!(
        text.contains("device_oom") && text.contains("\"ok\""),
        "{text}"
    );
    assert_eq!(temp_files(&disk.at), Vec::<String>::new());
    // What was saved after all is not in the warning.
    for line in warnings(&stderr) {
        assert!(
            !line.contains("summary.json") && !line.contains("job state"),
            "{line}"
        );
    }
}

#[test]
fn no_colour_when_not_a_terminal() {
    if !is_root() {
        // The event with fields this relies on is the attempt cgroup's, made as root.
        println!("SKIPPED no_colour_when_not_a_terminal: attempt cgroups need root here");
        return;
    }
    let sb = Sandbox::new();
    let run_dir = sb.run_dir();
    // -vv shows tracing's events with fields (`created attempt cgroup dir=...`), whose names
    // tracing colours by default.
    let out = sb
        .oomguard(&[
            "-vv",
            "run",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--",
            "true",
        ])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert!(stderr.contains("created attempt cgroup"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "escape codes in a pipe: {stderr:?}"
    );
}

/// oomguard's JSON lines on stderr (the job's own stderr lines are the others).
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn json_log_lines_carry_the_attempt_cause_and_knobs() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let script = fixture("fake_cuda_oom.py");
    let out = sb
        .run(
            &["--log-format", "json"],
            &[
                "python3",
                &script,
                "--batch_size",
                "8",
                "--fits",
                "4",
                "--record",
                record.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Nothing of oomguard's in the text form: no prefix, no table.
    assert!(!stderr.contains("oomguard:"), "{stderr}");
    let lines = json_lines(&stderr);
    for line in &lines {
        for key in ["time", "level", "event", "message", "fields"] {
            assert!(line.get(key).is_some(), "{key} missing: {line}");
        }
        assert!(line["time"].as_str().unwrap().ends_with('Z'), "{line}");
    }
    let event = |name: &str| -> &serde_json::Value {
        lines
            .iter()
            .find(|l| l["event"] == name)
            .unwrap_or_else(|| panic!("no {name} event in {stderr}"))
    };
    assert_eq!(
        event("run_started")["fields"]["run_dir"],
        sb.run_dir().to_str().unwrap()
    );
    let ended = &event("attempt_ended")["fields"];
    assert_eq!(ended["attempt"], 1);
    assert_eq!(ended["cause"], "device_oom");
    assert_eq!(ended["knobs"]["batch"], 8);
    let relaunch = &event("relaunch")["fields"];
    assert_eq!(relaunch["attempt"], 2);
    assert_eq!(relaunch["knobs"]["batch"], 4);
    let run = &event("run_ended")["fields"];
    assert_eq!(run["outcome"], "succeeded");
    assert_eq!(run["exit_code"], 0);
    assert_eq!(run["attempts"], 2);
    // Plain lines (the GPU note, warnings) are objects too, with their level.
    assert!(lines.iter().any(|l| l["event"] == "message"), "{stderr}");
}

#[test]
fn json_log_format_is_a_global_flag_and_covers_errors() {
    let sb = Sandbox::new();
    // Before the subcommand; an error after the run started to be set up (command not found).
    let out = sb
        .oomguard(&["--log-format", "json", "run", "--", "/nonexistent/train"])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    let lines = json_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert_eq!(lines[0]["level"], "error");
    assert!(lines[0]["message"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/train"));
}
