//! The knobs and the job's input (issue 6, items 5, 10 and 12): which flag moves and when, what
//! extreme input is refused, and what of oomguard's own environment and argv reaches the job.
//! Every job is tests/fixtures/knob_record.py, which records the exact argv bytes and OOMGUARD_*
//! variables of each attempt, dies of a CUDA out-of-memory error the first KNOB_OOMS times
//! (default 1), then succeeds.

use crate::util;

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::process::Output;

use serde_json::Value;
use util::{fixture, records, stderr_of, Sandbox};

/// One attempt's arguments (after the record path) as the bytes the job received.
fn argv_bytes(record: &Value) -> Vec<Vec<u8>> {
    record["argv_hex"]
        .as_array()
        .expect("argv_hex is an array")
        .iter()
        .map(|h| unhex(h.as_str().expect("hex string")))
        .collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digits"))
        .collect()
}

fn bytes(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

/// Runs the record fixture under oomguard with `extra` flags and `args` after the record path.
fn run_recorded(sb: &Sandbox, extra: &[&str], args: &[&str]) -> (Output, std::path::PathBuf) {
    let record = sb.path("record.jsonl");
    let script = fixture("knob_record.py");
    let mut job = vec!["python3", script.as_str(), record.to_str().unwrap()];
    job.extend_from_slice(args);
    let out = sb.run(extra, &job).output().expect("oomguard runs");
    (out, record)
}

/// A usage error: exit 2, one line naming the problem, nothing started and nothing created.
fn assert_refused(sb: &Sandbox, out: &Output, record: &Path, words: &[&str]) {
    let stderr = stderr_of(out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("oomguard: error: "), "{stderr}");
    for w in words {
        assert!(stderr.contains(w), "`{w}` missing from: {stderr}");
    }
    assert!(!record.exists(), "the job must not start: {stderr}");
    assert!(!sb.run_dir().exists(), "no run directory: {stderr}");
}

#[test]
fn attempt_one_runs_the_command_as_given_and_only_the_named_programs_flag_moves() {
    // A launcher's flag given twice, and a worker's flag of the same name after `--`.
    let sb = Sandbox::new();
    let args = [
        "--batch_size",
        "64",
        "--batch_size=48",
        "--",
        "worker.py",
        "--batch_size",
        "8",
    ];
    let (out, record) = run_recorded(&sb, &["--batch-arg", "--batch_size@1"], &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let seen = records(&record);
    assert_eq!(seen.len(), 2);
    assert_eq!(
        argv_bytes(&seen[0]),
        bytes(&args),
        "attempt 1 is the command as given"
    );
    assert_eq!(
        argv_bytes(&seen[1]),
        bytes(&[
            "--batch_size",
            "24",
            "--batch_size=24",
            "--",
            "worker.py",
            "--batch_size",
            "8"
        ]),
        "only part 1's flag moves, from its last value"
    );

    // A flag only after the launcher's `--` (`uv run -- python train.py ...`) is found there.
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let script = fixture("knob_record.py");
    let job = [
        "env",
        "--",
        "python3",
        script.as_str(),
        record.to_str().unwrap(),
        "--batch_size",
        "8",
    ];
    let out = sb.run(&[], &job).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let seen = records(&record);
    assert_eq!(argv_bytes(&seen[1]), bytes(&["--batch_size", "4"]));
}

#[test]
fn a_flag_in_two_programs_arguments_is_refused_not_guessed() {
    let args = ["--batch_size", "64", "--", "worker.py", "--batch_size", "8"];
    for extra in [&[][..], &["--batch-arg", "--batch_size"][..]] {
        let sb = Sandbox::new();
        let (out, record) = run_recorded(&sb, extra, &args);
        assert_refused(
            &sb,
            &out,
            &record,
            &[
                "--batch_size is in the arguments of more than one program",
                "64 in part 1 (python3 …)",
                "8 in part 2 (worker.py …)",
                "--batch-arg --batch_size@1 or --batch-arg --batch_size@2",
            ],
        );
    }
}

#[test]
fn a_training_batch_is_preferred_to_a_validation_one_and_the_choice_is_told() {
    let sb = Sandbox::new();
    let args = [
        "data.val_batch_size=64",
        "data.train_batch_size=32",
        "trainer.accumulate_grad_batches=1",
    ];
    let (out, record) = run_recorded(&sb, &[], &args);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = records(&record);
    assert_eq!(argv_bytes(&seen[0]), bytes(&args));
    assert_eq!(
        argv_bytes(&seen[1]),
        bytes(&[
            "data.val_batch_size=64",
            "data.train_batch_size=16",
            "trainer.accumulate_grad_batches=2"
        ])
    );
    let note = "oomguard: batch knob data.train_batch_size (also found: data.val_batch_size; pick another with --batch-arg)";
    assert_eq!(stderr.matches(note).count(), 1, "told once: {stderr}");
}

#[test]
fn one_flag_for_both_roles_is_refused() {
    let table: &[(&[&str], &[&str], &str)] = &[
        (
            &["--accum-arg", "--batch_size"],
            &["--batch_size", "8"],
            "--batch_size cannot be both the batch and the accumulation flag: name the other one with --accum-arg",
        ),
        (
            &["--batch-arg", "--grad_accum"],
            &["--batch_size", "8", "--grad_accum", "2"],
            "--grad_accum cannot be both the batch and the accumulation flag: name the other one with --batch-arg",
        ),
    ];
    for &(extra, args, words) in table {
        let sb = Sandbox::new();
        let (out, record) = run_recorded(&sb, extra, args);
        assert_refused(&sb, &out, &record, &[words]);
    }
}

#[test]
fn extreme_numbers_are_usage_errors() {
    let batch = ["--batch_size", "8"];
    let table: &[(&[&str], &[&str], &str)] = &[
        (
            &[],
            &["--batch_size", "4294967296", "--grad_accum", "4294967296"],
            "--batch_size 4294967296 × --grad_accum 4294967296 (the effective batch) does not fit in 64 bits",
        ),
        (&["--grace", "500000000000years"], &batch, "--grace"),
        (
            &["--backoff", "500000000000years", "--backoff-max", "500000000000years"],
            &batch,
            "--backoff",
        ),
        (&["--gpu-free-timeout", "30d"], &batch, "longer than the 7days allowed"),
        (&["--interval", "2h"], &batch, "longer than the 1h allowed"),
        (&["--memory-max", "0"], &batch, "--memory-max 0 B is too small"),
        (&["--memory-max", "100"], &batch, "use at least 32M"),
        (&["--memory-max", "1k"], &batch, "use at least 32M"),
    ];
    for &(extra, args, words) in table {
        let sb = Sandbox::new();
        let (out, record) = run_recorded(&sb, extra, args);
        assert_refused(&sb, &out, &record, &[words]);
    }
    // The floor is enough for a real Python job, where a memory cgroup can be made.
    let sb = Sandbox::new();
    let (out, record) = run_recorded(&sb, &["--memory-max", "32M"], &batch);
    if out.status.code() == Some(2) && stderr_of(&out).contains("needs a memory cgroup") {
        eprintln!(
            "SKIPPED --memory-max 32M runs python: no writable memory cgroup here (needs root)"
        );
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(records(&record).len(), 2);
}

#[test]
fn oomguard_variables_of_its_own_environment_do_not_reach_the_job() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let script = fixture("knob_record.py");
    let job = [
        "python3",
        script.as_str(),
        record.to_str().unwrap(),
        "--batch_size",
        "8",
    ];
    // Without the probe, whose own variables (OOMGUARD_PROBE_*) tests/it/probe_run.rs checks.
    let out = sb
        .run(&["--no-probe"], &job)
        .env("OOMGUARD_PREV_CAUSE", "device_oom")
        .env("OOMGUARD_ATTEMPT", "7")
        .env("OOMGUARD_X", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let seen = records(&record);
    assert_eq!(seen.len(), 2);
    let run_dir = sb.run_dir().to_str().unwrap().to_string();
    assert_eq!(
        seen[0]["env"],
        serde_json::json!({
            "OOMGUARD_ATTEMPT": "1",
            "OOMGUARD_RUN_DIR": run_dir,
            "OOMGUARD_BATCH_SIZE": "8",
        }),
        "attempt 1 sees only what oomguard sets for it"
    );
    assert_eq!(
        seen[1]["env"],
        serde_json::json!({
            "OOMGUARD_ATTEMPT": "2",
            "OOMGUARD_RUN_DIR": run_dir,
            "OOMGUARD_BATCH_SIZE": "4",
            "OOMGUARD_PREV_CAUSE": "device_oom",
        })
    );
}

#[test]
fn arguments_that_are_not_utf8_reach_the_job_byte_for_byte() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let script = fixture("knob_record.py");
    let odd = |b: &[u8]| OsString::from_vec(b.to_vec());
    let tail = [
        odd(b"caf\xff"),
        "--batch_size".into(),
        "8".into(),
        odd(b"--name=\xfe\xff"),
    ];
    let out = sb
        .run(&[], &["python3", script.as_str(), record.to_str().unwrap()])
        .args(&tail)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let seen = records(&record);
    assert_eq!(seen.len(), 2);
    let want = |batch: &str| -> Vec<Vec<u8>> {
        vec![
            b"caf\xff".to_vec(),
            b"--batch_size".to_vec(),
            batch.as_bytes().to_vec(),
            b"--name=\xfe\xff".to_vec(),
        ]
    };
    assert_eq!(argv_bytes(&seen[0]), want("8"));
    assert_eq!(
        argv_bytes(&seen[1]),
        want("4"),
        "the knob beside them still moves"
    );
    // summary.json is text: the odd bytes are replaced there, and only there.
    let summary = sb.summary();
    assert_eq!(summary["command"][3], "caf\u{fffd}");
    assert_eq!(summary["attempts"][1]["command"][5], "4");
    assert_eq!(tail[0].as_bytes(), b"caf\xff");
}
