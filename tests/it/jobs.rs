//! Job memory end to end: the real binary runs tests/fixtures/situation_job.py (which fits only
//! at a batch of 2 or less) several times in one project, and each run finds in
//! `<state>/jobs/NAME.json` what the runs before it learned.

use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{json, Value};
use util::{causes, fixture, sizes, stderr_of, wait_until, Project};

/// The job fits at a batch of 2 or less: from 8, run 1 needs 3 attempts.
const FITS: (&str, &str) = ("JOB_FITS", "s['batch_size'] <= 2");

/// `oomguard run --run-dir <sandbox>/<run> <extra> -- python3 situation_job.py RECORD <args>`
/// in the project: like `Project::command`, with a run directory per run.
fn job(p: &Project, run: &str, extra: &[&str], args: &[&str], env: &[(&str, &str)]) -> Command {
    let script = fixture("situation_job.py");
    let record = p.record();
    let run_dir = p.sb.path(run);
    let mut all = vec![
        "run",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--backoff",
        "0s",
    ];
    all.extend_from_slice(extra);
    all.extend_from_slice(&["--", "python3", &script, record.to_str().unwrap()]);
    all.extend_from_slice(args);
    let mut cmd = p.sb.oomguard(&all);
    cmd.current_dir(&p.dir)
        .env_remove("PYTORCH_CUDA_ALLOC_CONF");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run(p: &Project, run: &str, extra: &[&str], args: &[&str]) -> Output {
    job(p, run, extra, args, &[FITS])
        .output()
        .expect("oomguard runs")
}

fn summary(p: &Project, run: &str) -> Value {
    let text =
        std::fs::read_to_string(p.sb.path(run).join("summary.json")).expect("summary.json written");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

fn jobs_dir(p: &Project) -> PathBuf {
    p.sb.path("state").join("oomguard/jobs")
}

fn job_file(dir: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(format!("{name}.json")))
        .expect("the job's file is written");
    serde_json::from_str(&text).expect("the job's file is JSON")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn starting_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("starting from what worked last time"))
        .collect()
}

#[test]
fn the_second_run_of_a_job_starts_from_what_worked() {
    let p = Project::new();
    let args = ["--batch_size", "8", "--grad_accum", "1"];
    let first = run(&p, "run-1", &[], &args);
    let stderr = stderr_of(&first);
    assert_eq!(first.status.code(), Some(0), "{stderr}");
    let s1 = summary(&p, "run-1");
    assert_eq!(sizes(&s1), [(8, 1), (4, 2), (2, 4)]);
    assert!(starting_lines(&stderr).is_empty(), "{stderr}");
    assert!(s1.get("started_from").is_none(), "{s1}");
    let name = s1["job"].as_str().expect("summary.json names the job");
    assert!(name.starts_with("situation_job-"), "{name}");

    let second = run(&p, "run-2", &[], &args);
    let stderr = stderr_of(&second);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    let s2 = summary(&p, "run-2");
    assert_eq!(sizes(&s2), [(2, 4)], "one attempt, at what worked");
    assert_eq!(s2["job"], name);
    assert_eq!(s2["started_from"], json!({"batch": 2, "accum": 4}));
    // The effective batch is the command's, and summary.json's final sizes are the last
    // attempt's.
    assert_eq!(s2["final"], json!({"batch_size": 2, "accum": 4}));
    let lines = starting_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    let day = &s1["attempts"][2]["started_at"].as_str().unwrap()[..10];
    assert!(
        lines[0].ends_with(&format!(
            "starting from what worked last time ({day}): batch 2, accum 4; --fresh to start from the command's values"
        )),
        "{stderr}"
    );

    // The file: private, versioned, every attempt of both runs with its knobs, cause and peaks.
    let dir = jobs_dir(&p);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join(format!("{name}.json"))), 0o600);
    let file = job_file(&dir, name);
    assert_eq!(file["version"], 1);
    assert_eq!(file["name"], name);
    assert_eq!(
        file["last_success"]["knobs"],
        json!({"batch": 2, "accum": 4})
    );
    let attempts = file["attempts"].as_array().unwrap();
    let seen: Vec<(Value, Value)> = attempts
        .iter()
        .map(|a| (a["knobs"]["batch"].clone(), a["cause"].clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (json!(8), json!("device_oom")),
            (json!(4), json!("device_oom")),
            (json!(2), json!("ok")),
            (json!(2), json!("ok")),
        ]
    );
    for (a, (record, run)) in attempts.iter().zip([
        (&s1["attempts"][0], "run-1"),
        (&s1["attempts"][1], "run-1"),
        (&s1["attempts"][2], "run-1"),
        (&s2["attempts"][0], "run-2"),
    ]) {
        assert_eq!(a["run"], p.sb.path(run).to_str().unwrap());
        assert_eq!(a["knobs"], record["knobs"]);
        for peak in ["peak_rss_bytes", "peak_pss_bytes", "peak_process_rss_bytes"] {
            assert_eq!(a[peak], record[peak], "{peak}");
        }
    }
    assert!(
        attempts[0]["peak_process_rss_bytes"].as_u64().unwrap() > 0,
        "{}",
        attempts[0]
    );
}

#[test]
fn fresh_starts_from_the_commands_values_and_is_still_remembered() {
    let p = Project::new();
    let args = ["--batch_size", "8", "--grad_accum", "1"];
    assert_eq!(run(&p, "run-1", &[], &args).status.code(), Some(0));
    let fresh = run(&p, "run-2", &["--fresh"], &args);
    let stderr = stderr_of(&fresh);
    assert_eq!(fresh.status.code(), Some(0), "{stderr}");
    let s2 = summary(&p, "run-2");
    assert_eq!(sizes(&s2), [(8, 1), (4, 2), (2, 4)]);
    assert!(s2.get("started_from").is_none(), "{s2}");
    assert!(starting_lines(&stderr).is_empty(), "{stderr}");
    let name = s2["job"].as_str().unwrap();
    assert_eq!(
        job_file(&jobs_dir(&p), name)["attempts"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    // The next run without --fresh starts from what worked again.
    assert_eq!(run(&p, "run-3", &[], &args).status.code(), Some(0));
    assert_eq!(sizes(&summary(&p, "run-3")), [(2, 4)]);
}

#[test]
fn a_job_is_its_command_without_the_knob_values() {
    let p = Project::new();
    assert_eq!(
        run(
            &p,
            "run-1",
            &[],
            &["--batch_size", "8", "--grad_accum", "1"]
        )
        .status
        .code(),
        Some(0)
    );
    let name = summary(&p, "run-1")["job"].clone();
    // Another flag: another job, which starts from the command's values.
    let other = run(
        &p,
        "run-2",
        &[],
        &[
            "--batch_size",
            "8",
            "--grad_accum",
            "1",
            "--num_epochs",
            "2",
        ],
    );
    assert_eq!(other.status.code(), Some(0), "{}", stderr_of(&other));
    let s2 = summary(&p, "run-2");
    assert_ne!(s2["job"], name);
    assert_eq!(sizes(&s2), [(8, 1), (4, 2), (2, 4)]);
    // Other batch and accumulation values: the same job. It starts from the batch that
    // worked, with the accumulation that keeps this command's effective batch (16 × 1).
    let same = run(
        &p,
        "run-3",
        &[],
        &["--batch_size", "16", "--grad_accum", "1"],
    );
    let stderr = stderr_of(&same);
    assert_eq!(same.status.code(), Some(0), "{stderr}");
    let s3 = summary(&p, "run-3");
    assert_eq!(s3["job"], name);
    assert_eq!(sizes(&s3), [(2, 8)]);
    assert_eq!(s3["started_from"], json!({"batch": 2, "accum": 8}));
    // --name puts runs of any command in one job.
    let named = run(
        &p,
        "run-4",
        &["--name", name.as_str().unwrap()],
        &[
            "--batch_size",
            "8",
            "--grad_accum",
            "1",
            "--num_epochs",
            "3",
        ],
    );
    assert_eq!(named.status.code(), Some(0), "{}", stderr_of(&named));
    assert_eq!(sizes(&summary(&p, "run-4")), [(2, 4)]);
}

#[test]
fn an_unusable_job_file_is_moved_aside_and_the_run_goes_on() {
    for (text, why) in [
        (
            "{\"version\": 1, \"attempts\": [",
            "is not a valid job file",
        ),
        (
            "{\"version\": 7, \"name\": \"nightly\", \"shards\": []}",
            "was written by a newer oomguard (format 7",
        ),
    ] {
        let p = Project::new();
        // --state-dir puts job memory elsewhere than $XDG_STATE_HOME/oomguard.
        let state = p.sb.path("elsewhere");
        let dir = state.join("jobs");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("nightly.json"), text).unwrap();
        let out = run(
            &p,
            "run-1",
            &["--name", "nightly", "--state-dir", state.to_str().unwrap()],
            &["--batch_size", "8", "--grad_accum", "1"],
        );
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("oomguard: warning:"))
            .collect();
        assert_eq!(warnings.len(), 1, "one warning: {stderr}");
        assert!(warnings[0].contains(why), "{stderr}");
        assert!(warnings[0].contains("moved aside to"), "{stderr}");
        let aside: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("nightly.json.corrupt-")
            })
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), text);
        assert!(warnings[0].contains(aside[0].to_str().unwrap()), "{stderr}");
        // Run from scratch, and remembered in a new, valid file.
        let s = summary(&p, "run-1");
        assert_eq!(s["job"], "nightly");
        assert_eq!(causes(&s), ["device_oom", "device_oom", "ok"]);
        let file = job_file(&dir, "nightly");
        assert_eq!(file["version"], 1);
        assert_eq!(file["attempts"].as_array().unwrap().len(), 3);
        assert!(!jobs_dir(&p).exists(), "--state-dir was not used");
    }
}

#[test]
fn job_memory_that_cannot_be_used_costs_one_warning_and_never_stops_the_run() {
    // (what is in the way, the words of the one warning)
    type Block = fn(&Path);
    let cases: [(Block, &str); 2] = [
        // A file where the state directory should be: nothing can be read or written there.
        (
            |state| std::fs::write(state, "").unwrap(),
            "cannot read job memory",
        ),
        // A directory where the job's lock file should be: it reads, but every write fails.
        (
            |state| std::fs::create_dir_all(state.join("jobs/nightly.lock")).unwrap(),
            "cannot open the job lock",
        ),
    ];
    for (block, words) in cases {
        let p = Project::new();
        let state = p.sb.path("blocked");
        block(&state);
        let out = run(
            &p,
            "run-1",
            &["--name", "nightly", "--state-dir", state.to_str().unwrap()],
            &["--batch_size", "8", "--grad_accum", "1"],
        );
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(
            causes(&summary(&p, "run-1")),
            ["device_oom", "device_oom", "ok"]
        );
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("oomguard: warning:"))
            .collect();
        assert_eq!(
            warnings.len(),
            1,
            "one warning for three attempts: {stderr}"
        );
        assert!(warnings[0].contains(words), "{stderr}");
        assert!(warnings[0].contains(state.to_str().unwrap()), "{stderr}");
    }
}

/// A FIFO or a symlink to /dev/zero in place of the job's file used to hang oomguard before the
/// job started (the read waited for a writer, or never ended): it is refused at once, one
/// warning, and the run goes on; `oomguard status` says what is wrong with it.
#[test]
fn a_fifo_or_a_device_in_place_of_the_job_file_never_stops_the_run() {
    type Block = fn(&Path);
    let cases: [(Block, &str); 2] = [
        (
            |file| {
                nix::unistd::mkfifo(file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
            },
            "a FIFO",
        ),
        (
            |file| std::os::unix::fs::symlink("/dev/zero", file).unwrap(),
            "a device",
        ),
    ];
    for (block, what) in cases {
        let p = Project::new();
        let state = p.sb.path("st");
        std::fs::create_dir_all(state.join("jobs")).unwrap();
        block(&state.join("jobs/jb.json"));
        let state_arg = ["--name", "jb", "--state-dir", state.to_str().unwrap()];
        let out = util::output_within(
            &mut job(
                &p,
                "run-1",
                &state_arg,
                &["--batch_size", "8", "--grad_accum", "1"],
                &[FITS],
            ),
            Duration::from_secs(60),
        );
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("oomguard: warning:"))
            .collect();
        assert_eq!(warnings.len(), 1, "{stderr}");
        assert!(
            warnings[0].contains("jb.json") && warnings[0].contains(what),
            "{stderr}"
        );
        let status = util::output_within(
            &mut p
                .sb
                .oomguard(&["status", "--state-dir", state.to_str().unwrap()]),
            Duration::from_secs(60),
        );
        assert!(stderr_of(&status).contains(what), "{}", stderr_of(&status));
    }
}

#[test]
fn a_bad_name_is_refused_before_anything_starts() {
    let p = Project::new();
    let out = run(
        &p,
        "run-1",
        &["--name", "../escape"],
        &["--batch_size", "8"],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("oomguard: error: --name \"../escape\""),
        "{stderr}"
    );
    assert!(!p.record().exists(), "the job ran");
    assert!(!p.sb.path("run-1").exists());
    assert!(!p.sb.path("state").exists());
}

#[test]
fn two_runs_of_one_job_at_once_keep_both_runs_attempts() {
    let p = Project::new();
    let args = ["--batch_size", "8", "--grad_accum", "1"];
    let holds: Vec<PathBuf> = ["hold-1", "hold-2"].map(|h| p.sb.path(h)).to_vec();
    let mut children = Vec::new();
    for (i, hold) in holds.iter().enumerate() {
        nix::unistd::mkfifo(hold, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let child = job(
            &p,
            &format!("run-{}", i + 1),
            &["--name", "shared"],
            &args,
            &[FITS, ("JOB_HOLD", hold.to_str().unwrap())],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
        children.push(child);
    }
    // Both runs are in their third attempt, which fits and waits on its FIFO.
    for hold in &holds {
        let waiting = hold.with_extension("waiting");
        assert!(
            wait_until(Duration::from_secs(60), || waiting.exists()),
            "{} never waited",
            hold.display()
        );
    }
    // Hold the job's lock, as a third run in its read-modify-write would, and release both:
    // their successes are recorded while the lock is held, so both must wait for it, then
    // take it one after the other.
    let lock_path = jobs_dir(&p).join("shared.lock");
    let lock = nix::fcntl::Flock::lock(
        std::fs::File::open(&lock_path).expect("the runs made the job's lock file"),
        nix::fcntl::FlockArg::LockExclusive,
    )
    .expect("the test takes the job's lock");
    let mut writers: Vec<std::fs::File> = holds
        .iter()
        .map(|h| std::fs::OpenOptions::new().write(true).open(h).unwrap())
        .collect();
    for w in &mut writers {
        use std::io::Write;
        w.write_all(b"go\n").unwrap();
    }
    drop(writers);
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&lock_path).unwrap());
    assert!(
        wait_until(Duration::from_secs(60), || blocked_on(inode) == 2),
        "the two runs did not both wait for the job's lock: {}",
        std::fs::read_to_string("/proc/locks").unwrap_or_default()
    );
    drop(lock);
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    }
    let file = job_file(&jobs_dir(&p), "shared");
    assert_eq!(file["version"], 1);
    let attempts = file["attempts"].as_array().unwrap();
    for run in ["run-1", "run-2"] {
        let path = p.sb.path(run);
        let mine: Vec<(Value, Value)> = attempts
            .iter()
            .filter(|a| a["run"] == path.to_str().unwrap())
            .map(|a| (a["attempt"].clone(), a["knobs"]["batch"].clone()))
            .collect();
        assert_eq!(
            mine,
            [
                (json!(1), json!(8)),
                (json!(2), json!(4)),
                (json!(3), json!(2))
            ],
            "{run}: {file:#}"
        );
    }
    assert_eq!(attempts.len(), 6, "{file:#}");
    assert_eq!(
        file["last_success"]["knobs"],
        json!({"batch": 2, "accum": 4})
    );
    let left: Vec<String> = std::fs::read_dir(jobs_dir(&p))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.contains("corrupt"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// How many processes wait for a flock on the file with this inode (/proc/locks marks a
/// waiter `->`: `3: -> FLOCK  ADVISORY  WRITE 28103 fe:00:10010653 0 EOF`).
fn blocked_on(inode: u64) -> usize {
    let suffix = format!(":{inode}");
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.get(1) == Some(&"->")
                && fields.get(2) == Some(&"FLOCK")
                && fields.get(6).is_some_and(|f| f.ends_with(&suffix))
        })
        .count()
}
