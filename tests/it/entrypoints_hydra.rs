//! Hydra as an entrypoint (issue 28): a real `@hydra.main` app (hydra-core, the library) whose
//! batch and accumulation live in its composed config, with no knob flag and no override of the
//! batch on the command line. oomguard reads them from the config and moves them by adding
//! overrides; the config files stay byte for byte what they were. The job is
//! tests/fixtures/hydra/job/train.py, copied with its conf/ tree into the test's project: it
//! records what Hydra gave it and dies of a CUDA out-of-memory error above $HYDRA_JOB_FITS.
//!
//! Needs hydra-core (`pip install hydra-core`); without it each test says SKIPPED and passes.

use crate::util;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use util::{records, stderr_of, Sandbox};

/// The fixture app and its config tree.
fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hydra/job")
}

/// Whether hydra-core is importable; says SKIPPED for `test` when not.
fn hydra_or_skip(test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import hydra"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED {test}: hydra-core is not importable (pip install hydra-core)");
    }
    ok
}

/// Every file under `dir`, relative to it, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("a fixture directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).expect("under dir").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// A project: the fixture app and its conf/ tree copied into the sandbox.
fn project(sb: &Sandbox) -> PathBuf {
    let dir = sb.path("project");
    for rel in files_under(&fixture_dir()) {
        let to = dir.join(&rel);
        std::fs::create_dir_all(to.parent().expect("a parent")).unwrap();
        std::fs::copy(fixture_dir().join(&rel), to).unwrap();
    }
    dir
}

/// Each config file of the project is byte for byte the fixture's.
fn assert_configs_untouched(project: &Path) {
    let conf = fixture_dir().join("conf");
    let files = files_under(&conf);
    assert_eq!(
        files,
        files_under(&project.join("conf")),
        "files added or removed"
    );
    for rel in files {
        assert_eq!(
            std::fs::read(project.join("conf").join(&rel)).unwrap(),
            std::fs::read(conf.join(&rel)).unwrap(),
            "conf/{} changed",
            rel.display()
        );
    }
}

/// `oomguard run <extra> -- python3 train.py <overrides>` in the project.
fn run(sb: &Sandbox, project: &Path, extra: &[&str], overrides: &[&str], fits: u64) -> Output {
    let mut job = vec!["python3", "train.py"];
    job.extend_from_slice(overrides);
    sb.run(extra, &job)
        .current_dir(project)
        .env("HYDRA_JOB_RECORD", sb.path("record.jsonl"))
        .env("HYDRA_JOB_FITS", fits.to_string())
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .output()
        .expect("oomguard runs")
}

/// (batch, accumulation) of each attempt as the app read them from its composed config.
fn seen(sb: &Sandbox) -> Vec<(u64, u64)> {
    records(&sb.path("record.jsonl"))
        .iter()
        .map(|r| {
            (
                r["batch"].as_u64().expect("batch"),
                r["accum"].as_u64().expect("accum"),
            )
        })
        .collect()
}

#[test]
fn the_batch_in_the_composed_config_moves_by_overrides_keeping_the_effective_batch() {
    if !hydra_or_skip("entrypoints_hydra::the_batch_in_the_composed_config_moves") {
        return;
    }
    // (overrides given, what attempt 1 read, the overrides the job got last with {b} and {a}
    // standing for the last batch and accumulation, a note)
    type Row<'a> = (&'a [&'a str], (u64, u64), &'a str, &'a str);
    let table: &[Row] = &[
        // Both in group options: data/mnist.yaml and trainer/default.yaml.
        (
            &[],
            (256, 1),
            "data.batch_size={b} trainer.accumulate_grad_batches={a}",
            "batch: `data.batch_size` in conf/data/mnist.yaml (group data=mnist), 256; changed with the override data.batch_size=N",
        ),
        // Group choices on the command line pick the files; a trainer with no accumulation
        // gets one with `+`.
        (
            &["data=cifar", "trainer=noaccum"],
            (128, 1),
            "data=cifar trainer=noaccum data.batch_size={b} +trainer.accumulate_grad_batches={a}",
            "the `trainer` mapping gets the override +trainer.accumulate_grad_batches=N",
        ),
    ];
    for (given, first, last, note) in table {
        let sb = Sandbox::new();
        let project = project(&sb);
        let out = run(&sb, &project, &[], given, 64);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{given:?}: {stderr}");
        assert!(stderr.contains(note), "{given:?}: {note:?} not in {stderr}");
        let seen = seen(&sb);
        assert!(seen.len() >= 2, "{given:?}: relaunched: {stderr}");
        assert_eq!(seen[0], *first, "{given:?}: attempt 1 runs as given");
        // Every attempt keeps the effective batch; the last fits.
        assert!(
            seen.iter().all(|(b, a)| b * a == first.0 * first.1),
            "{given:?}: {seen:?}"
        );
        let (b, a) = seen[seen.len() - 1];
        assert!(b <= 64 && a > 1, "{given:?}: {seen:?}");
        let records = records(&sb.path("record.jsonl"));
        let want = last
            .replace("{b}", &b.to_string())
            .replace("{a}", &a.to_string());
        assert_eq!(
            records[records.len() - 1]["overrides"],
            json!(want.split(' ').collect::<Vec<_>>()),
            "{given:?}"
        );
        assert_eq!(
            sb.summary()["attempts"][seen.len() - 1]["knobs"],
            json!({"batch": b, "accum": a}),
            "{given:?}"
        );
        assert_configs_untouched(&project);
    }
}

/// `--dry-run` names the keys it found and the overrides each attempt would get; nothing runs.
#[test]
fn dry_run_names_the_config_keys_and_the_overrides() {
    if !hydra_or_skip("entrypoints_hydra::dry_run_names_the_config_keys_and_the_overrides") {
        return;
    }
    let sb = Sandbox::new();
    let project = project(&sb);
    let out = run(&sb, &project, &["--dry-run=device_oom"], &[], 64);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    // What was found, where, then the plan.
    assert!(
        stdout.contains(
            "  found: batch: `data.batch_size` in conf/data/mnist.yaml (group data=mnist), 256"
        ),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with("  found: "))
        .collect();
    assert_eq!(lines[0], "attempt 1: python3 train.py", "{stdout}");
    assert_eq!(
        lines[1],
        "attempt 2 after device_oom: data.batch_size 256→128, trainer.accumulate_grad_batches 1→2",
        "{stdout}"
    );
    assert_eq!(
        lines[2],
        "  command: python3 train.py data.batch_size=128 trainer.accumulate_grad_batches=2",
        "{stdout}"
    );
    assert!(!sb.path("record.jsonl").exists(), "the job ran");
    assert!(!project.join("outputs").exists(), "Hydra ran");
    assert_configs_untouched(&project);
}

/// A near miss: the batch already overridden on the command line is today's knob, moved in
/// place; the config's accumulation is not looked for, so none is added.
#[test]
fn a_batch_overridden_on_the_command_line_keeps_todays_behaviour() {
    if !hydra_or_skip("entrypoints_hydra::a_batch_overridden_on_the_command_line") {
        return;
    }
    let sb = Sandbox::new();
    let project = project(&sb);
    let out = run(&sb, &project, &[], &["data.batch_size=128"], 64);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(seen(&sb), [(128, 1), (64, 1)], "{stderr}");
    let records: Vec<Value> = records(&sb.path("record.jsonl"));
    assert_eq!(records[1]["overrides"], json!(["data.batch_size=64"]));
    assert!(!stderr.contains("conf/data/mnist.yaml"), "{stderr}");
    assert_configs_untouched(&project);
}
