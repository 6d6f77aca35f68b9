//! The training entrypoints that keep the batch in a file, found with no knob flag (issue 28):
//! LightningCLI's `--config` files (overridden on the command line), a Hugging Face script's
//! single arguments file and a DeepSpeed config (both given a patched copy). The job is
//! tests/fixtures/entry_job.py, which reads its sizes the way each entrypoint does (DeepSpeed's
//! batch check included) and dies of a CUDA out-of-memory error until they fit. Each test
//! checks the run converges keeping the effective batch, `--dry-run` says what it found, and
//! the user's files are byte for byte what they were.

use crate::util::{self, causes, python_has, Sandbox};

use serde_json::Value;

/// `oomguard run [extra] -- python3 entry_job.py ARGS` in `sb`'s project directory, the job
/// fitting batches up to `fits`; its output, summary and what each attempt saw.
fn run(
    sb: &Sandbox,
    extra: &[&str],
    args: &[&str],
    fits: u64,
) -> (std::process::Output, Value, Vec<Value>) {
    let script = util::fixture("entry_job.py");
    let record = sb.path("record.jsonl");
    let mut job = vec!["python3", script.as_str()];
    job.extend_from_slice(args);
    let out = sb
        .run(extra, &job)
        .current_dir(sb.path("project"))
        .env("ENTRY_RECORD", &record)
        .env("ENTRY_FITS", fits.to_string())
        .output()
        .expect("oomguard runs");
    let summary = if extra.contains(&"--dry-run") {
        Value::Null
    } else {
        sb.summary()
    };
    let seen = if record.exists() {
        util::records(&record)
    } else {
        Vec::new()
    };
    (out, summary, seen)
}

fn project(files: &[(&str, &str)]) -> Sandbox {
    let sb = Sandbox::new();
    for (name, text) in files {
        let path = sb.path("project").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    sb
}

fn unchanged(sb: &Sandbox, files: &[(&str, &str)]) {
    for (name, text) in files {
        let now = std::fs::read_to_string(sb.path("project").join(name)).unwrap();
        assert_eq!(&now, text, "{name} was changed");
    }
}

/// (batch, accumulation) each attempt saw.
fn sizes(seen: &[Value]) -> Vec<(u64, u64)> {
    seen.iter()
        .map(|s| (s["batch"].as_u64().unwrap(), s["accum"].as_u64().unwrap()))
        .collect()
}

#[test]
fn lightning_cli_configs_are_overridden_on_the_command_line_and_never_edited() {
    let files = [
        (
            "configs/base.yaml",
            "data:\n  batch_size: 512\n  num_workers: 2\ntrainer:\n  max_epochs: 3\n",
        ),
        ("configs/run.yaml", "data:\n  batch_size: 256\n"),
    ];
    let sb = project(&files);
    let args = [
        "fit",
        "--config",
        "configs/base.yaml",
        "--config",
        "configs/run.yaml",
    ];
    let (out, _, seen) = run(&sb, &["--dry-run"], &args, 64);
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(seen.is_empty(), "a dry run starts nothing");
    assert!(
        plan.contains("found: batch: `data.batch_size` in configs/run.yaml, 256"),
        "{plan}"
    );
    assert!(
        plan.contains("--trainer.accumulate_grad_batches, absent, will be added"),
        "{plan}"
    );

    let (out, summary, seen) = run(&sb, &[], &args, 64);
    assert_eq!(summary["outcome"], "succeeded", "{}", util::stderr_of(&out));
    assert_eq!(sizes(&seen), [(256, 1), (128, 2), (64, 4)]);
    assert_eq!(causes(&summary), ["device_oom", "device_oom", "ok"]);
    let last: Vec<&str> = seen[2]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        last[5..],
        [
            "--data.batch_size",
            "64",
            "--trainer.accumulate_grad_batches",
            "4"
        ]
    );
    unchanged(&sb, &files);
}

#[test]
fn a_trainers_arguments_file_reaches_the_job_as_a_patched_copy() {
    let files = [(
        "args.json",
        "{\n  \"output_dir\": \"out\",\n  \"per_device_train_batch_size\": 32,\n  \"learning_rate\": 5e-5\n}\n",
    )];
    let sb = project(&files);
    let (out, summary, seen) = run(&sb, &[], &["args.json"], 8);
    assert_eq!(summary["outcome"], "succeeded", "{}", util::stderr_of(&out));
    // The accumulation, absent (1), written into the copy as the batch moves.
    assert_eq!(sizes(&seen), [(32, 1), (16, 2), (8, 4)]);
    // The job read a copy, not the user's file, which is as it was.
    let read = seen[1]["argv"][0].as_str().unwrap();
    assert_ne!(read, "args.json", "attempt 2 reads a patched copy");
    unchanged(&sb, &files);
}

#[test]
fn a_deepspeed_config_moves_micro_batch_and_accumulation_together() {
    // train_batch_size must stay micro x accumulation x world, or the fixture (as DeepSpeed)
    // refuses to start.
    let ds = "{\n  \"train_batch_size\": 64,\n  \"train_micro_batch_size_per_gpu\": 32,\n  \"gradient_accumulation_steps\": 2,\n  \"zero_optimization\": {\"stage\": 2}\n}\n";
    let files = [("ds_config.json", ds)];
    let sb = project(&files);
    let (out, summary, seen) = run(&sb, &[], &["--deepspeed_config", "ds_config.json"], 8);
    assert_eq!(summary["outcome"], "succeeded", "{}", util::stderr_of(&out));
    assert_eq!(sizes(&seen), [(32, 2), (16, 4), (8, 8)]);
    unchanged(&sb, &files);

    // With train_batch_size and no accumulation key, DeepSpeed derives the accumulation: the
    // micro-batch moves alone and the effective batch is kept.
    let ds = "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 32}\n";
    let files = [("ds_config.json", ds)];
    let sb = project(&files);
    let (out, summary, seen) = run(&sb, &[], &["--deepspeed", "ds_config.json"], 16);
    assert_eq!(summary["outcome"], "succeeded", "{}", util::stderr_of(&out));
    assert_eq!(sizes(&seen), [(32, 2), (16, 4)]);
    unchanged(&sb, &files);
}

/// `oomguard run [extra] -- python3 real_entry_job.py ARGS` in the project directory.
fn run_real(sb: &Sandbox, args: &[&str], fits: u64) -> (std::process::Output, Value, Vec<Value>) {
    let script = util::fixture("real_entry_job.py");
    let record = sb.path("record.jsonl");
    let mut job = vec!["python3", script.as_str()];
    job.extend_from_slice(args);
    let out = sb
        .run(&[], &job)
        .current_dir(sb.path("project"))
        .env("ENTRY_RECORD", &record)
        .env("ENTRY_FITS", fits.to_string())
        .output()
        .expect("oomguard runs");
    let seen = if record.exists() {
        util::records(&record)
    } else {
        Vec::new()
    };
    (out, sb.summary(), seen)
}

/// transformers' own HfArgumentParser reads every patched copy of a Trainer's arguments file,
/// the accumulation written in where the file left it out.
#[test]
fn real_transformers_reads_each_patched_arguments_file() {
    if !python_has(
        "entrypoints::real_transformers_reads_each_patched_arguments_file",
        "transformers",
    ) {
        return;
    }
    let files = [(
        "args.yaml",
        "output_dir: out\nper_device_train_batch_size: 32\nreport_to: none\n",
    )];
    let sb = project(&files);
    let (out, summary, seen) = run_real(&sb, &["args.yaml"], 8);
    assert_eq!(summary["outcome"], "succeeded", "{}", util::stderr_of(&out));
    assert_eq!(sizes(&seen), [(32, 1), (16, 2), (8, 4)]);
    unchanged(&sb, &files);
}

/// DeepSpeed's own DeepSpeedConfig accepts every relaunched config: micro-batch and
/// accumulation moved together keep its train_batch_size check true.
#[test]
fn real_deepspeed_accepts_each_relaunched_config() {
    if !python_has(
        "entrypoints::real_deepspeed_accepts_each_relaunched_config",
        "deepspeed",
    ) {
        return;
    }
    let ds = "{\n  \"train_batch_size\": 64,\n  \"train_micro_batch_size_per_gpu\": 32,\n  \"gradient_accumulation_steps\": 2\n}\n";
    let files = [("ds_config.json", ds)];
    let sb = project(&files);
    let (out, summary, seen) = run_real(&sb, &["--deepspeed_config", "ds_config.json"], 8);
    assert_eq!(summary["outcome"], "succeeded", "{}", util::stderr_of(&out));
    assert_eq!(sizes(&seen), [(32, 2), (16, 4), (8, 8)]);
    unchanged(&sb, &files);
}

/// The real LightningCLI on the CPU with its batch only in its `--config` file, no knob flag:
/// OOM-killed by the kernel in a memory cgroup at 32, it converges at 16 with the accumulation
/// added, the config file untouched (and the config LightningCLI saved in its log directory by
/// attempt 1 set aside, see tests/it/leftovers.rs).
#[test]
fn real_lightning_cli_with_its_batch_in_a_config_converges_with_no_knob_flag() {
    if !python_has(
        "entrypoints::real_lightning_cli_with_its_batch_in_a_config_converges_with_no_knob_flag",
        "lightning, jsonargparse, torch",
    ) {
        return;
    }
    let config = "trainer:\n  logger: false\n  default_root_dir: logs\n  max_steps: 2\n  accelerator: cpu\n  enable_checkpointing: false\n  enable_progress_bar: false\n  enable_model_summary: false\ndata:\n  sample_mb: 32\n  batch_size: 32\n";
    let files = [("configs/train.yaml", config)];
    let sb = project(&files);
    let script = util::fixture("lightning_cli_job.py");
    let job = [
        "python3",
        script.as_str(),
        "fit",
        "--config",
        "configs/train.yaml",
    ];
    let out = sb
        .run(&["--memory-max", "1200M"], &job)
        .current_dir(sb.path("project"))
        .output()
        .expect("oomguard runs");
    let err = util::stderr_of(&out);
    if out.status.code() == Some(2) && err.contains("needs a memory cgroup") {
        eprintln!("SKIPPED entrypoints::real_lightning_cli_with_its_batch_in_a_config_converges_with_no_knob_flag: no writable memory cgroup here (needs root)");
        return;
    }
    let summary = sb.summary();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(causes(&summary)[0], "oom_killed", "{err}");
    assert_eq!(summary["outcome"], "succeeded", "{err}");
    let last = summary["attempts"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (
            util::flag_value(&last["command"], "--data.batch_size"),
            util::flag_value(&last["command"], "--trainer.accumulate_grad_batches")
        ),
        (16, 2),
        "{summary:#}"
    );
    assert!(
        err.contains("`data.batch_size` in configs/train.yaml, 32"),
        "{err}"
    );
    unchanged(&sb, &files);
}
