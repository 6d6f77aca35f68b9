//! Resume from the checkpoint (issue 8, deliverable 4): `--resume-arg FLAG --checkpoint GLOB
//! [--resume-first]`. Every job is tests/fixtures/resume_job.py, which records its arguments and
//! the checkpoint it was given (with that file's size as it started), writes complete
//! checkpoints ckpt/epoch_N.pt on its first run, and dies of a CUDA out-of-memory error.
//!
//! A checkpoint "still being written" is written by this test, outside oomguard's process tree
//! (whatever the job leaves running is stopped before a relaunch), while the job is held on a
//! FIFO: the file is provably growing when the attempt ends.

use crate::util;

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use util::{fixture, records, stderr_of, wait_until, Sandbox};

/// `oomguard run --run-dir <sandbox>/run <flags> -- python3 resume_job.py RECORD <job args>`,
/// run in the sandbox (where ckpt/ is).
fn oomguard(sb: &Sandbox, flags: &[&str], job: &[&str], env: &[(&str, &str)]) -> Command {
    let run_dir = sb.run_dir();
    let record = sb.path("record");
    let script = fixture("resume_job.py");
    let mut args = vec!["run", "--run-dir", run_dir.to_str().unwrap()];
    args.extend_from_slice(flags);
    args.extend(["--", "python3", &script, record.to_str().unwrap()]);
    args.extend_from_slice(job);
    let mut cmd = sb.oomguard(&args);
    cmd.current_dir(sb.dir.path()).envs(env.iter().copied());
    cmd
}

const BATCH: &[&str] = &["--batch_size", "8", "--grad_accum", "1"];
/// The resume flags; halving, so the relaunch lines carry no estimate between the knobs and
/// the checkpoint clause.
const RESUME: &[&str] = &[
    "--resume-arg",
    "--resume",
    "--checkpoint",
    "ckpt/*.pt",
    "--strategy",
    "halve",
];

/// `ckpt/NAME` written before the run, dated `age` ago.
fn old_checkpoint(sb: &Sandbox, name: &str, age: Duration) -> PathBuf {
    let path = sb.path("ckpt").join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"an older run's weights\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
    path
}

fn flags(extra: &[&str]) -> Vec<String> {
    RESUME.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_relaunch_resumes_from_the_newest_checkpoint_and_attempt_1_never_does() {
    let sb = Sandbox::new();
    old_checkpoint(&sb, "epoch_0.pt", Duration::from_secs(3600));
    let f = flags(&["--backoff", "0s", "--interval", "100ms"]);
    let out = oomguard(&sb, &strs(&f), BATCH, &[("RESUME_WRITE", "1,2,3")])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs = records(&sb.path("record"));
    assert_eq!(runs.len(), 2, "{stderr}");
    // A checkpoint older than the run existed, yet attempt 1 ran as written.
    assert_eq!(runs[0]["argv"], json!(BATCH), "{stderr}");
    assert_eq!(
        runs[1]["argv"],
        json!([
            "--batch_size",
            "4",
            "--grad_accum",
            "2",
            "--resume",
            "ckpt/epoch_3.pt"
        ]),
        "{stderr}"
    );
    assert_eq!(runs[1]["size"], json!(4096), "the whole file was there");
    assert!(
        stderr.contains("--batch_size 8→4, --grad_accum 1→2; resuming from ckpt/epoch_3.pt\n"),
        "{stderr}"
    );
    let summary = sb.summary();
    assert_eq!(summary["attempts"][0]["resumed_from"], Value::Null);
    assert_eq!(summary["attempts"][1]["resumed_from"], "ckpt/epoch_3.pt");
    assert_eq!(
        summary["attempts"][1]["command"].as_array().unwrap().last(),
        Some(&json!("ckpt/epoch_3.pt"))
    );
}

#[test]
fn the_flags_existing_value_is_replaced() {
    let sb = Sandbox::new();
    let f = flags(&["--backoff", "0s", "--interval", "100ms"]);
    let job = ["--resume=scratch", "--batch_size", "8", "--grad_accum", "1"];
    let out = oomguard(&sb, &strs(&f), &job, &[("RESUME_WRITE", "1,2")])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs = records(&sb.path("record"));
    assert_eq!(runs[0]["argv"], json!(job), "{stderr}");
    assert_eq!(
        runs[1]["argv"],
        json!([
            "--resume=ckpt/epoch_2.pt",
            "--batch_size",
            "4",
            "--grad_accum",
            "2"
        ]),
        "{stderr}"
    );
}

#[test]
fn resume_first_gives_attempt_1_the_newest_checkpoint_however_old() {
    let sb = Sandbox::new();
    old_checkpoint(&sb, "epoch_0.pt", Duration::from_secs(7200));
    old_checkpoint(&sb, "epoch_1.pt", Duration::from_secs(3600));
    let f = flags(&["--resume-first", "--backoff", "0s", "--interval", "100ms"]);
    let out = oomguard(&sb, &strs(&f), BATCH, &[("RESUME_WRITE", "5")])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs = records(&sb.path("record"));
    assert_eq!(runs[0]["resume"], "ckpt/epoch_1.pt", "{stderr}");
    assert!(
        stderr.contains("attempt 1: resuming from ckpt/epoch_1.pt"),
        "{stderr}"
    );
    // The relaunch takes the one attempt 1 wrote.
    assert_eq!(runs[1]["resume"], "ckpt/epoch_5.pt", "{stderr}");
    let summary = sb.summary();
    assert_eq!(summary["attempts"][0]["resumed_from"], "ckpt/epoch_1.pt");
    assert_eq!(summary["attempts"][1]["resumed_from"], "ckpt/epoch_5.pt");
}

#[test]
fn with_resume_first_a_relaunch_falls_back_to_the_old_checkpoint() {
    let sb = Sandbox::new();
    old_checkpoint(&sb, "epoch_1.pt", Duration::from_secs(3600));
    let f = flags(&["--resume-first", "--backoff", "0s", "--interval", "100ms"]);
    let out = oomguard(&sb, &strs(&f), BATCH, &[]).output().unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs = records(&sb.path("record"));
    assert_eq!(runs[0]["resume"], "ckpt/epoch_1.pt", "{stderr}");
    assert_eq!(runs[1]["resume"], "ckpt/epoch_1.pt", "{stderr}");
}

#[test]
fn without_a_checkpoint_from_this_run_the_relaunch_starts_over_and_says_so() {
    let sb = Sandbox::new();
    old_checkpoint(&sb, "epoch_0.pt", Duration::from_secs(3600));
    let f = flags(&["--backoff", "0s", "--interval", "100ms"]);
    let out = oomguard(&sb, &strs(&f), BATCH, &[]).output().unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs = records(&sb.path("record"));
    assert_eq!(
        runs[1]["argv"],
        json!(["--batch_size", "4", "--grad_accum", "2"]),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "--grad_accum 1→2; no checkpoint to resume from (nothing matching ckpt/*.pt written since the run started)"
        ),
        "{stderr}"
    );
    assert_eq!(sb.summary()["attempts"][1]["resumed_from"], Value::Null);
}

/// Appends to `path` in pieces (one per pacing tick: a slow disk, not a synchronisation) until
/// told to finish; then writes a last piece and returns the file's final size.
fn slow_writer(path: PathBuf) -> (mpsc::Sender<()>, std::thread::JoinHandle<u64>) {
    let (finish, told) = mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        loop {
            file.write_all(&[b'w'; 256]).unwrap();
            match told.recv_timeout(Duration::from_millis(20)) {
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                _ => break,
            }
        }
        file.write_all(b"end\n").unwrap();
        file.sync_all().unwrap();
        std::fs::metadata(&path).unwrap().len()
    });
    (finish, writer)
}

/// Starts a run whose attempt 1 writes epoch_1 and epoch_2 and then dies while this test is
/// writing epoch_3; returns oomguard, its stderr lines as they come, and the writer.
fn run_while_writing(
    sb: &Sandbox,
    extra: &[&str],
) -> (
    std::process::Child,
    mpsc::Receiver<String>,
    mpsc::Sender<()>,
    std::thread::JoinHandle<u64>,
) {
    let hold = sb.path("hold");
    nix::unistd::mkfifo(&hold, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let f = flags(extra);
    let mut child = oomguard(
        sb,
        &strs(&f),
        BATCH,
        &[
            ("RESUME_WRITE", "1,2"),
            ("RESUME_FIFO", hold.to_str().unwrap()),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (line_tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let epoch_2 = sb.path("ckpt/epoch_2.pt");
    assert!(
        wait_until(Duration::from_secs(30), || std::fs::metadata(&epoch_2)
            .is_ok_and(|m| m.len() == 4096)),
        "attempt 1 never wrote its checkpoints"
    );
    let (finish, writer) = slow_writer(sb.path("ckpt/epoch_3.pt"));
    util::release_fifo(&hold);
    (child, lines, finish, writer)
}

#[test]
fn a_checkpoint_still_being_written_is_passed_over() {
    let sb = Sandbox::new();
    let (mut child, lines, finish, writer) =
        run_while_writing(&sb, &["--backoff", "0s", "--interval", "1s"]);
    let status = child.wait().unwrap();
    finish.send(()).unwrap();
    writer.join().unwrap();
    let stderr: Vec<String> = lines.try_iter().collect();
    let stderr = stderr.join("\n");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let runs = records(&sb.path("record"));
    assert_eq!(runs[0]["resume"], Value::Null, "{stderr}");
    assert_eq!(runs[1]["resume"], "ckpt/epoch_2.pt", "{stderr}");
    assert_eq!(runs[1]["size"], json!(4096), "{stderr}");
    assert!(
        stderr.contains("; resuming from ckpt/epoch_2.pt (ckpt/epoch_3.pt is still being written)"),
        "{stderr}"
    );
    assert_eq!(
        sb.summary()["attempts"][1]["resumed_from"],
        "ckpt/epoch_2.pt"
    );
}

#[test]
fn the_relaunch_waits_within_the_backoff_for_the_newest_to_be_complete() {
    let sb = Sandbox::new();
    let (mut child, lines, finish, writer) =
        run_while_writing(&sb, &["--backoff", "5s", "--interval", "500ms"]);
    let mut seen = Vec::new();
    let waiting = "ckpt/epoch_3.pt is still being written: waiting up to";
    for line in lines.iter() {
        seen.push(line);
        if seen.last().unwrap().contains(waiting) {
            break;
        }
    }
    // Told that oomguard waits for it, the writer ends the file.
    finish.send(()).unwrap();
    let size = writer.join().unwrap();
    let status = child.wait().unwrap();
    seen.extend(lines.try_iter());
    let stderr = seen.join("\n");
    assert!(stderr.contains(waiting), "{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let runs = records(&sb.path("record"));
    assert_eq!(runs[1]["resume"], "ckpt/epoch_3.pt", "{stderr}");
    assert_eq!(runs[1]["size"], json!(size), "the whole file: {stderr}");
    assert!(
        seen.iter().any(
            |l| l.contains("--grad_accum 1→2; resuming from ckpt/epoch_3.pt")
                && !l.contains("still being written")
        ),
        "{stderr}"
    );
}

/// A setsid saver still writing when the job dies is stopped with the job's leftovers; its file,
/// cut short, stops changing and would look complete: it is never handed over.
#[test]
fn a_checkpoint_cut_short_by_stopping_the_leftovers_is_never_resumed_from() {
    let sb = Sandbox::new();
    let f = flags(&["--backoff", "1s", "--interval", "200ms"]);
    let out = oomguard(
        &sb,
        &strs(&f),
        BATCH,
        &[("RESUME_WRITE", "1"), ("RESUME_SAVER", "epoch_1_99.pt")],
    )
    .output()
    .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let cut = std::fs::metadata(sb.path("ckpt/epoch_1_99.pt"))
        .unwrap()
        .len();
    assert!(
        cut < 4000,
        "the saver was not cut short ({cut} bytes): {stderr}"
    );
    let runs = records(&sb.path("record"));
    assert_eq!(runs.len(), 2, "{stderr}");
    assert_eq!(runs[1]["resume"], "ckpt/epoch_1.pt", "{stderr}");
    assert!(
        stderr.contains(
            "resuming from ckpt/epoch_1.pt (ckpt/epoch_1_99.pt was being written when oomguard stopped the job: not used)"
        ),
        "{stderr}"
    );
}

#[test]
fn resume_flags_alone_are_usage_errors() {
    // (oomguard's flags, words of the refusal)
    let table: &[(&[&str], &str)] = &[
        (
            &["--checkpoint", "ckpt/*.pt"],
            "resuming from a checkpoint needs --resume-arg FLAG",
        ),
        (
            &["--resume-arg", "--resume"],
            "resuming from a checkpoint needs --checkpoint GLOB",
        ),
        (
            &["--resume-first", "--checkpoint", "ckpt/*.pt"],
            "needs --resume-arg FLAG",
        ),
        (
            &["--resume-arg", "--resume", "--checkpoint", "ckpt/[.pt"],
            "--checkpoint `ckpt/[.pt` is not a valid glob",
        ),
        // Valid as a glob, but it matches nothing, ever.
        (
            &["--resume-arg", "--resume", "--checkpoint", ""],
            "--checkpoint `` is not a valid glob (it is empty)",
        ),
        (
            &["--resume-arg", "--batch_size", "--checkpoint", "ckpt/*.pt"],
            "--resume-arg --batch_size is also the knob batch",
        ),
    ];
    for (extra, want) in table {
        let sb = Sandbox::new();
        let out = oomguard(&sb, extra, BATCH, &[]).output().unwrap();
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{extra:?}: {stderr}");
        assert!(stderr.contains(want), "{extra:?}: {stderr}");
        assert!(!sb.run_dir().exists(), "{extra:?}: nothing created");
        assert!(!sb.path("record").exists(), "{extra:?}: nothing started");
    }
}
