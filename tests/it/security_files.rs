//! Files oomguard keeps or hands on for a job (issue 26, findings 9 and 10): a checkpoint cut short
//! by oomguard's own stop of the job's processes is never handed to the next attempt, whether
//! or not its writer held it open at the stop; and a job's output kept on disk is capped per
//! attempt (head and tail, with a marker saying what was cut), while the terminal still gets all
//! of it; run for another user, its log is written as that user, so root's reserved blocks are
//! not spent on it.

use crate::util;

use std::process::Command;

use serde_json::Value;
use util::{fixture, records, stderr_of, Sandbox};

/// `oomguard run` of tests/fixtures/resume_job.py in the sandbox, resuming from `ckpt/*.pt`.
fn resume_run(sb: &Sandbox, flags: &[&str], env: &[(&str, &str)]) -> Command {
    let run_dir = sb.run_dir();
    let record = sb.path("record");
    let script = fixture("resume_job.py");
    let mut args = vec![
        "run",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--resume-arg",
        "--resume",
        "--checkpoint",
        "ckpt/*.pt",
        "--strategy",
        "halve",
    ];
    args.extend_from_slice(flags);
    args.extend([
        "--",
        "python3",
        &script,
        record.to_str().unwrap(),
        "--batch_size",
        "8",
    ]);
    let mut cmd = sb.oomguard(&args);
    cmd.current_dir(sb.dir.path()).envs(env.iter().copied());
    cmd
}

/// Finding 9: a saver in a session of its own (as a background checkpoint process would be)
/// appends 100 bytes every 0.1 s, opening the file afresh for each piece; the job's main process
/// dies of a CUDA out-of-memory error after the saver's second piece. oomguard stops the saver
/// with the job's leftovers, between two pieces: the file is at no instant open, stops changing
/// at a few hundred of its 4000 bytes, and is the newest match. It must not be handed over; the
/// job's own whole checkpoint (a torch.save zip written just before) is, and the relaunch line
/// says which file was skipped and why.
#[test]
fn a_checkpoint_whose_reopening_writer_the_stop_cut_is_never_resumed_from() {
    let sb = Sandbox::new();
    let out = resume_run(
        &sb,
        &["--backoff", "1s", "--interval", "300ms"],
        &[
            ("RESUME_WRITE", "1"),
            ("RESUME_SAVER", "epoch_1_99.pt"),
            ("RESUME_SAVER_REOPEN", "1"),
        ],
    )
    .output()
    .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let cut = std::fs::metadata(sb.path("ckpt/epoch_1_99.pt"))
        .unwrap()
        .len();
    assert!(
        (200..4000).contains(&cut),
        "the saver was not cut short ({cut} bytes): {stderr}"
    );
    let runs = records(&sb.path("record"));
    assert_eq!(runs.len(), 2, "{stderr}");
    assert_eq!(runs[1]["resume"], "ckpt/epoch_1.pt", "{stderr}");
    assert_eq!(runs[1]["size"], 4096, "the whole zip: {stderr}");
    assert!(
        stderr.contains(
            "resuming from ckpt/epoch_1.pt (ckpt/epoch_1_99.pt was written within 0.3s of oomguard stopping the job's processes and its format cannot show it complete: not used)"
        ),
        "{stderr}"
    );
    assert_eq!(
        sb.summary()["attempts"][1]["resumed_from"],
        Value::from("ckpt/epoch_1.pt")
    );
}
