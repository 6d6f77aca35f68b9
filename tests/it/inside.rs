//! The batch where real scripts keep it, seen from inside the job by the probe (issue 39): an
//! argparse script run on its defaults, a script given its batch but not its accumulation, a
//! Hugging Face `TrainingArguments` and a Lightning `Trainer` and DataModule built in code, and
//! a plain DataLoader with its batch written in. Each job is OOM-killed by the kernel in a
//! memory cgroup (`--memory-max`) at its own batch and must converge with the effective batch
//! kept, the script byte for byte what it was; each skips with a printed reason where no memory
//! cgroup can be made (not root) or a library is missing (CI installs them: see .ci/run).

use std::path::Path;

use serde_json::Value;

use crate::util::{self, causes, python_has, Sandbox};

/// Whether a run refused for want of a memory cgroup (then the test says it skips).
fn no_cgroup(test: &str, out: &std::process::Output) -> bool {
    let err = util::stderr_of(out);
    let refused = out.status.code() == Some(2) && err.contains("needs a memory cgroup");
    if refused {
        eprintln!("SKIPPED inside::{test}: no writable memory cgroup here (needs root)");
    }
    refused
}

/// (batch, accumulation) each attempt ran with, as the job itself recorded them.
fn ran_with(record: &Path) -> Vec<(u64, u64)> {
    util::records(record)
        .iter()
        .map(|r| (r["batch"].as_u64().unwrap(), r["accum"].as_u64().unwrap()))
        .collect()
}

/// The run converged after kernel OOM kills, each attempt at the same effective batch, the
/// batch smaller each time, starting from the job's own `first`.
fn converged_keeping_effective(summary: &Value, seen: &[(u64, u64)], first: (u64, u64), err: &str) {
    assert_eq!(summary["outcome"], "succeeded", "{err}");
    assert_eq!(causes(summary)[0], "oom_killed", "{err}");
    assert!(seen.len() >= 2, "{seen:?}\n{err}");
    assert_eq!(seen[0], first, "{err}");
    let effective = first.0 * first.1;
    for pair in seen.windows(2) {
        assert!(pair[1].0 < pair[0].0, "the batch went down: {seen:?}");
    }
    for (batch, accum) in seen {
        assert_eq!(
            batch * accum,
            effective,
            "effective batch kept: {seen:?}\n{err}"
        );
    }
    assert!(!err.contains("effective batch shrinks"), "{err}");
}

/// A copy of fixture `name` in the sandbox, and its text (to check it is left unchanged).
fn script(sb: &Sandbox, name: &str) -> (String, String) {
    let text = std::fs::read_to_string(util::fixture(&format!("inside/{name}"))).unwrap();
    let path = sb.path(name);
    std::fs::write(&path, &text).unwrap();
    (path.to_str().unwrap().to_string(), text)
}

/// `oomguard run --memory-max LIMIT [extra] -- python3 SCRIPT ARGS` with the job's record.
fn run(
    sb: &Sandbox,
    limit: &str,
    extra: &[&str],
    job: &[&str],
) -> (std::process::Output, std::path::PathBuf) {
    run_with(sb, limit, extra, job, &[])
}

/// [`run`] with variables for the job.
fn run_with(
    sb: &Sandbox,
    limit: &str,
    extra: &[&str],
    job: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, std::path::PathBuf) {
    let record = sb.path("record.jsonl");
    let mut flags = vec!["--memory-max", limit];
    flags.extend_from_slice(extra);
    let out = sb
        .run(&flags, job)
        .current_dir(sb.dir.path())
        .env("INSIDE_RECORD", &record)
        .envs(env.iter().copied())
        .output()
        .expect("oomguard runs");
    (out, record)
}

/// `python train.py` on argparse's defaults: the batch and accumulation options of the
/// script's parser become flags added to the command.
#[test]
fn argparse_defaults_are_read_inside_and_added_as_flags() {
    let sb = Sandbox::new();
    let (path, text) = script(&sb, "argparse_job.py");
    let (out, record) = run(&sb, "200M", &[], &["python3", &path]);
    if no_cgroup("argparse_defaults_are_read_inside_and_added_as_flags", &out) {
        return;
    }
    let err = util::stderr_of(&out);
    let summary = sb.summary();
    converged_keeping_effective(&summary, &ran_with(&record), (64, 1), &err);
    assert!(
        err.contains("found inside the job: batch: --batch_size of the script's parser, 64"),
        "{err}"
    );
    let last = summary["attempts"].as_array().unwrap().last().unwrap();
    let (b, a) = (
        util::flag_value(&last["command"], "--batch_size"),
        util::flag_value(&last["command"], "--gradient_accumulation_steps"),
    );
    assert_eq!(b * a, 64, "{summary:#}");
    assert_eq!(last["batch_size"], b, "summary.json records them as knobs");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

/// `python train.py --batch_size 64` whose parser is built in another module (no option in the
/// script's own text, which oomguard reads before the start): the accumulation option the probe
/// sees, left at its default, is added beside the batch instead of the effective batch
/// shrinking.
#[test]
fn the_parsers_accumulation_fills_what_the_command_lacks() {
    let sb = Sandbox::new();
    script(&sb, "train_options.py");
    let (path, _) = script(&sb, "split_job.py");
    let (out, record) = run(&sb, "200M", &[], &["python3", &path, "--batch_size", "64"]);
    if no_cgroup(
        "the_parsers_accumulation_fills_what_the_command_lacks",
        &out,
    ) {
        return;
    }
    let err = util::stderr_of(&out);
    converged_keeping_effective(&sb.summary(), &ran_with(&record), (64, 1), &err);
    assert!(
        err.contains("accumulation: --gradient_accumulation_steps of the script's parser, 1"),
        "{err}"
    );
}

/// `--no-probe` is today's behaviour: nothing is read inside, the run gives up on the first
/// out-of-memory death; `--dry-run` says where the batch will be read.
#[test]
fn without_the_probe_nothing_is_read_inside() {
    let sb = Sandbox::new();
    let (path, _) = script(&sb, "argparse_job.py");
    let (out, record) = run(&sb, "200M", &["--no-probe"], &["python3", &path]);
    if no_cgroup("without_the_probe_nothing_is_read_inside", &out) {
        return;
    }
    let err = util::stderr_of(&out);
    assert_eq!(sb.summary()["outcome"], "gave_up", "{err}");
    assert_eq!(ran_with(&record), [(64, 1)]);
    let plan = sb
        .run(&["--dry-run"], &["python3", &path])
        .output()
        .expect("oomguard runs");
    let plan = String::from_utf8_lossy(&plan.stdout).into_owned();
    assert!(
        plan.contains("it will be read inside the job once it starts"),
        "{plan}"
    );
}

/// A framework's arguments built in code, set inside the job: `fixture` run under a 1200M
/// memory cgroup (with `env`) is OOM-killed at batch 32 and converges keeping 32 × 1, its
/// relaunch said with `said`, the script unchanged.
fn set_inside(test: &str, modules: &str, fixture: &str, env: &[(&str, &str)], said: &str) {
    if !python_has(&format!("inside::{test}"), modules) {
        return;
    }
    let sb = Sandbox::new();
    let (path, text) = script(&sb, fixture);
    let (out, record) = run_with(&sb, "1200M", &[], &["python3", &path], env);
    if no_cgroup(test, &out) {
        return;
    }
    let err = util::stderr_of(&out);
    converged_keeping_effective(&sb.summary(), &ran_with(&record), (32, 1), &err);
    assert!(err.contains(said), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

/// Hugging Face `TrainingArguments` built in code, with a real `Trainer`: the probe sets the
/// batch and accumulation at construction, before the framework checks them.
#[test]
fn real_training_arguments_in_code_are_set_inside_the_job() {
    set_inside(
        "real_training_arguments_in_code_are_set_inside_the_job",
        "transformers, torch, accelerate",
        "hf_job.py",
        &[],
        "set inside the job: per_device_train_batch_size 32→16, gradient_accumulation_steps 1→2",
    );
}

/// TRL's `SFTConfig` (a `TrainingArguments` subclass with a `__post_init__` of its own) built in
/// code: set inside the job the same way, and the Trainer runs with it.
#[test]
fn real_trl_config_in_code_is_set_inside_the_job() {
    set_inside(
        "real_trl_config_in_code_is_set_inside_the_job",
        "trl, transformers, torch",
        "hf_job.py",
        &[("ARGS", "trl")],
        "of the job's SFTConfig",
    );
}

/// Lightning's `Trainer(accumulate_grad_batches=1)` and a DataModule with `batch_size` built in
/// code: the batch is set where Lightning's own BatchSizeFinder looks for it.
#[test]
fn real_lightning_trainer_and_datamodule_in_code_are_set_inside_the_job() {
    set_inside(
        "real_lightning_trainer_and_datamodule_in_code_are_set_inside_the_job",
        "lightning, torch",
        "lightning_job.py",
        &[],
        "set inside the job: batch_size 32→16, accumulate_grad_batches 1→2",
    );
}

/// A plain loop whose DataLoader has its batch written in: nothing moves, and the line that
/// ends the run names the place and the fix.
#[test]
fn a_dataloaders_constant_batch_is_named_with_the_fix() {
    let test = "a_dataloaders_constant_batch_is_named_with_the_fix";
    if !python_has(&format!("inside::{test}"), "torch") {
        return;
    }
    let sb = Sandbox::new();
    let (path, _) = script(&sb, "loader_job.py");
    let (out, _) = run(&sb, "600M", &[], &["python3", &path, "16"]);
    if no_cgroup(test, &out) {
        return;
    }
    let err = util::stderr_of(&out);
    assert_eq!(sb.summary()["outcome"], "gave_up", "{err}");
    assert!(
        err.contains("the job's DataLoader at loader_job.py:10 has batch_size 64 written in"),
        "{err}"
    );
    assert_eq!(sb.summary()["attempts"].as_array().unwrap().len(), 1);
}
