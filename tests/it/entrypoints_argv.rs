//! Entrypoints on the command line (issue 28): a LightningCLI command's dotted flags found with
//! no knob flag and its accumulation added as `--trainer.accumulate_grad_batches`; a launcher in
//! front of the script (`accelerate launch`, `python -m torch.distributed.run`) whose own flags
//! are never read nor moved; `--auto_find_batch_size` told. The jobs are
//! tests/fixtures/lightning_job.py (parses `fit --data.batch_size N
//! --trainer.accumulate_grad_batches M` as jsonargparse would) and fake_cuda_oom.py, both dying
//! of a CUDA out-of-memory error above a size; launchers are stand-ins written in the sandbox.

use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};
use util::{fixture, records, stderr_of, Sandbox};

/// Every attempt's command from summary.json, as words.
fn commands(summary: &Value) -> Vec<String> {
    summary["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a["command"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The sandbox's `bin/` with an executable `name` holding `script`, and a PATH that finds it
/// first (set on the commands this test spawns, never on the test process).
fn fake_program(sb: &Sandbox, name: &str, script: &str) -> String {
    let bin = sb.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The LightningCLI stand-in under oomguard with no knob flag, fitting `fits` samples a step.
fn run_lightning(sb: &Sandbox, extra: &[&str], args: &[&str], fits: u64) -> (Output, PathBuf) {
    let record = sb.path("lightning.jsonl");
    let script = fixture("lightning_job.py");
    let mut job = vec!["python3", script.as_str()];
    job.extend_from_slice(args);
    let out = sb
        .run(extra, &job)
        .env("LIGHTNING_RECORD", &record)
        .env("LIGHTNING_FITS", fits.to_string())
        .output()
        .expect("oomguard runs");
    (out, record)
}

fn seen_sizes(record: &Path) -> Vec<Value> {
    records(record)
        .iter()
        .map(|r| json!([r["subcommand"], r["batch"], r["accum"]]))
        .collect()
}

#[test]
fn lightning_converges_with_its_accumulation_added_and_no_knob_flag() {
    let sb = Sandbox::new();
    let (out, record) = run_lightning(&sb, &[], &["fit", "--data.batch_size", "256"], 64);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        seen_sizes(&record),
        [
            json!(["fit", 256, 1]),
            json!(["fit", 128, 2]),
            json!(["fit", 64, 4])
        ],
        "the effective batch is kept: {stderr}"
    );
    let summary = sb.summary();
    let commands = commands(&summary);
    assert!(
        commands[0].ends_with("lightning_job.py fit --data.batch_size 256"),
        "attempt 1 is the command as given: {commands:?}"
    );
    assert!(
        commands[2].ends_with(
            "lightning_job.py fit --data.batch_size 64 --trainer.accumulate_grad_batches 4"
        ),
        "{commands:?}"
    );
    assert!(
        stderr.contains("accumulation --trainer.accumulate_grad_batches absent, will be added"),
        "the run's first lines say where the knobs are: {stderr}"
    );
    assert!(!stderr.contains("effective batch shrinks"), "{stderr}");

    // Given on the command line, the accumulation moves where it is, in its `=` spelling.
    let sb = Sandbox::new();
    let args = [
        "fit",
        "--data.batch_size=64",
        "--trainer.accumulate_grad_batches=2",
    ];
    let (out, record) = run_lightning(&sb, &[], &args, 32);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        seen_sizes(&record),
        [json!(["fit", 64, 2]), json!(["fit", 32, 4])]
    );
}

#[test]
fn dry_run_names_the_launcher_the_batch_and_the_accumulation_to_add() {
    let sb = Sandbox::new();
    let script = fixture("lightning_job.py");
    let job = [
        "python3",
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        script.as_str(),
        "fit",
        "--data.batch_size",
        "256",
    ];
    let out = sb
        .run(&["--dry-run=device_oom"], &job)
        .env("LIGHTNING_RECORD", sb.path("lightning.jsonl"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    for line in [
        format!("  found: launcher: python -m torch.distributed.run; their own arguments are not searched for knobs, only {script}'s"),
        "  found: LightningCLI batch --data.batch_size 256; accumulation --trainer.accumulate_grad_batches absent, will be added when the batch moves".to_string(),
        "attempt 2 after device_oom: --data.batch_size 256→128, --trainer.accumulate_grad_batches 1→2".to_string(),
        format!("  command: python3 -m torch.distributed.run --nproc_per_node 2 {script} fit --data.batch_size 128 --trainer.accumulate_grad_batches 2"),
    ] {
        assert!(stdout.lines().any(|l| l == line), "`{line}` missing from:\n{stdout}");
    }
    assert!(!sb.path("lightning.jsonl").exists(), "nothing runs");
    assert!(!sb.run_dir().exists(), "nothing is written");
}

/// A stand-in for `accelerate launch`: skips its own options as the real one parses them,
/// records its own `--gradient_accumulation_steps`, and runs the script with python3.
const FAKE_ACCELERATE: &str = r#"#!/bin/sh
[ "$1" = launch ] || { echo "usage: accelerate launch [options] script [args]" >&2; exit 2; }
shift
own=none
while [ $# -gt 0 ]; do
  case "$1" in
    --gradient_accumulation_steps) own="$2"; shift 2 ;;
    --num_processes|--mixed_precision) shift 2 ;;
    --*) shift ;;
    *) break ;;
  esac
done
echo "$own" >> "$ACCELERATE_RECORD"
exec python3 "$@"
"#;

#[test]
fn accelerates_own_accumulation_is_never_moved_only_the_scripts_flags() {
    /// Each attempt's batch and accumulation as the script saw them.
    type Sizes = &'static [(u64, Option<u64>)];
    // (the script's own flags, what it saw)
    let table: &[(&[&str], Sizes)] = &[
        (&["--batch_size", "8"], &[(8, None), (4, None), (2, None)]),
        (
            &["--batch_size", "8", "--gradient_accumulation_steps", "1"],
            &[(8, Some(1)), (4, Some(2)), (2, Some(4))],
        ),
    ];
    for &(own, want) in table {
        let sb = Sandbox::new();
        let path = fake_program(&sb, "accelerate", FAKE_ACCELERATE);
        let record = sb.path("record.jsonl");
        let launcher_record = sb.path("accelerate.txt");
        let script = fixture("fake_cuda_oom.py");
        let mut job = vec![
            "accelerate",
            "launch",
            "--num_processes",
            "2",
            "--gradient_accumulation_steps",
            "4",
            script.as_str(),
        ];
        job.extend_from_slice(own);
        job.extend_from_slice(&["--fits", "2", "--record", record.to_str().unwrap()]);
        let out = sb
            .run(&[], &job)
            .env("PATH", &path)
            .env("ACCELERATE_RECORD", &launcher_record)
            .output()
            .expect("oomguard runs");
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{own:?}: {stderr}");
        let seen: Vec<(u64, Option<u64>)> = records(&record)
            .iter()
            .map(|r| (r["batch"].as_u64().unwrap(), r["accum"].as_u64()))
            .collect();
        assert_eq!(seen, want, "{own:?}: {stderr}");
        assert_eq!(
            std::fs::read_to_string(&launcher_record).unwrap(),
            "4\n4\n4\n",
            "accelerate's own accumulation is the user's in every attempt: {stderr}"
        );
        assert_eq!(
            stderr
                .matches("launcher: accelerate launch; their own arguments are not searched")
                .count(),
            1,
            "{stderr}"
        );
    }
}

#[test]
fn auto_find_batch_size_is_told_once_at_start_and_in_dry_run() {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let script = fixture("knob_record.py");
    let job = [
        "python3",
        script.as_str(),
        record.to_str().unwrap(),
        "--per_device_train_batch_size",
        "8",
        "--gradient_accumulation_steps",
        "1",
        "--auto_find_batch_size",
    ];
    let note = "--auto_find_batch_size is on: after a CUDA out-of-memory error the Trainer halves the batch itself";
    let out = sb.run(&["--dry-run"], &job).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let told: Vec<&str> = stdout.lines().filter(|l| l.contains(note)).collect();
    assert_eq!(told.len(), 1, "{stdout}");
    assert!(
        told[0].ends_with("at half the batch with twice the accumulation. Remove the flag to keep the effective batch."),
        "{stdout}"
    );
    assert!(!record.exists(), "nothing runs");

    let out = sb.run(&[], &job).output().unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches(note).count(), 1, "once, at start: {stderr}");
    assert_eq!(records(&record).len(), 2, "{stderr}");
}
