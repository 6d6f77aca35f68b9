//! The training commands codebases document, as a newcomer copies them, under `--dry-run` on
//! trimmed copies of their real files (tests/fixtures/codebases/<codebase>/, sources in each
//! folder's README.md): timm's shell launcher with `-b` and its declared `--grad-accum-steps`,
//! detectron2's yacs `KEY VALUE` pairs over a `_BASE_` chain, mmdetection's `--cfg-options`
//! over a Python config's `dict(...)`, Megatron-LM's micro and global batch, a Hugging Face
//! Trainer script's `--per_device_train_batch_size`. Each asserts what the first relaunch moves
//! and the line the user reads.

use std::path::Path;

use crate::util::{self, copy_tree, Sandbox};

/// `--dry-run` of `job` in a project holding the codebase's files: the plan, exit 0.
fn plan(codebase: Option<&str>, job: &[&str]) -> String {
    plan_with(codebase, &[], &[], job)
}

/// [`plan`] with `files` (path, text) written into the project too and `extra` options before
/// the job.
fn plan_with(
    codebase: Option<&str>,
    files: &[(&str, &str)],
    extra: &[&str],
    job: &[&str],
) -> String {
    let sb = Sandbox::new();
    let project = sb.path("project");
    std::fs::create_dir_all(&project).unwrap();
    if let Some(name) = codebase {
        copy_tree(
            Path::new(&util::fixture(&format!("codebases/{name}"))),
            &project,
        );
    }
    for (path, text) in files {
        std::fs::write(project.join(path), text).unwrap();
    }
    let mut options = vec!["--dry-run"];
    options.extend_from_slice(extra);
    let out = sb
        .run(&options, job)
        .current_dir(&project)
        .output()
        .expect("oomguard runs");
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr_of(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn has(plan: &str, want: &str) {
    assert!(plan.contains(want), "missing {want:?} in:\n{plan}");
}

#[test]
fn codebases_timm_short_batch_flag_through_its_launcher_gets_the_declared_accumulation() {
    // timm's README: `./distributed_train.sh 4 --data-dir /imagenet --model ... -b 128 ...`.
    let p = plan(
        Some("timm"),
        &[
            "./distributed_train.sh",
            "4",
            "--data-dir",
            "/imagenet",
            "--model",
            "resnet50",
            "-b",
            "128",
            "--amp",
            "-j",
            "8",
        ],
    );
    has(&p, "found: accumulation: --grad-accum-steps 1, added beside -b when the batch moves (train.py declares it, default 1)");
    has(
        &p,
        "attempt 2 after oom_killed: -b 128→64, --grad-accum-steps 1→2",
    );
    has(&p, "command: ./distributed_train.sh 4 --data-dir /imagenet --model resnet50 -b 64 --amp -j 8 --grad-accum-steps 2");
    assert!(!p.contains("effective batch shrinks"), "{p}");
    // `--batch-size=256`: the partner follows the equals form.
    let p = plan(
        Some("timm"),
        &["./distributed_train.sh", "2", "--batch-size=256"],
    );
    has(
        &p,
        "command: ./distributed_train.sh 2 --batch-size=128 --grad-accum-steps=2",
    );
}

#[test]
fn codebases_timm_short_flag_of_an_undeclaring_script_is_no_batch() {
    // `-b` means nothing without the script's declaration.
    let p = plan_with(
        None,
        &[(
            "other.py",
            "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', type=float)\n",
        )],
        &[],
        &["python3", "other.py", "-b", "128"],
    );
    has(&p, "no batch found");
}

#[test]
fn codebases_detectron2_batch_from_the_base_chain_or_the_commands_pair() {
    let config = "configs/COCO-Detection/faster_rcnn_R_50_FPN_1x.yaml";
    let p = plan(
        Some("detectron2"),
        &[
            "python3",
            "tools/train_net.py",
            "--config-file",
            config,
            "--num-gpus",
            "8",
        ],
    );
    has(
        &p,
        "found: batch: SOLVER.IMS_PER_BATCH in configs/COCO-Detection/../Base-RCNN-FPN.yaml, 16",
    );
    has(&p, &format!("command: python3 tools/train_net.py --config-file {config} --num-gpus 8 SOLVER.IMS_PER_BATCH 8"));
    has(&p, "note: detectron2 has no gradient accumulation, so the effective batch shrinks with the batch (16 → 8)");
    // Said once, at the first relaunch that shrinks it, not at every one after.
    assert_eq!(p.matches("effective batch shrinks").count(), 1, "{p}");
    // The README's single-GPU form: the pair is in the command, rewritten where it is.
    let p = plan(
        Some("detectron2"),
        &[
            "python3",
            "tools/train_net.py",
            "--config-file",
            config,
            "--num-gpus",
            "1",
            "SOLVER.IMS_PER_BATCH",
            "2",
            "SOLVER.BASE_LR",
            "0.0025",
        ],
    );
    has(&p, "attempt 2 after oom_killed: SOLVER.IMS_PER_BATCH 2→1");
    has(&p, "SOLVER.IMS_PER_BATCH 1 SOLVER.BASE_LR 0.0025");
}

#[test]
fn codebases_detectron2_batch_arg_names_the_pair_the_command_has() {
    let sb = Sandbox::new();
    let job = ["python3", "train_net.py", "SOLVER.IMS_PER_BATCH", "16"];
    let out = sb
        .run(&["--dry-run", "--batch-arg", "SOLVER.IMS_PER_BATCH"], &job)
        .output()
        .unwrap();
    let p = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr_of(&out));
    has(&p, "command: python3 train_net.py SOLVER.IMS_PER_BATCH 8");
    // Absent, the example is written in the form the key takes.
    let out = sb
        .run(
            &["--dry-run", "--batch-arg", "SOLVER.IMS_PER_BATCH"],
            &["python3", "train_net.py"],
        )
        .output()
        .unwrap();
    has(
        &util::stderr_of(&out),
        "add it (e.g. `SOLVER.IMS_PER_BATCH 8`)",
    );
    let out = sb
        .run(
            &["--dry-run", "--batch-arg", "data.batch_size"],
            &["python3", "train.py"],
        )
        .output()
        .unwrap();
    has(&util::stderr_of(&out), "add it (e.g. `data.batch_size=8`)");
}

#[test]
fn codebases_mmdetection_cfg_options_over_a_python_config_chain() {
    let config = "configs/faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py";
    let p = plan(Some("mmdetection"), &["python3", "tools/train.py", config]);
    has(&p, "found: batch: `train_dataloader.batch_size` in configs/faster_rcnn/../_base_/datasets/coco_detection.py, 2");
    has(&p, &format!("command: python3 tools/train.py {config} --cfg-options train_dataloader.batch_size=1 optim_wrapper.accumulative_counts=2"));
    // The relaunch line names the keys, not the list flag they are added with.
    has(
        &p,
        "attempt 2 after oom_killed: train_dataloader.batch_size 2→1, optim_wrapper.accumulative_counts 1→2",
    );
    assert!(!p.contains("effective batch shrinks"), "{p}");
    // The command's own list: the accumulation joins it (mmcv 1.x kept only the last list).
    let p = plan(
        Some("mmdetection"),
        &[
            "python3",
            "tools/train.py",
            config,
            "--cfg-options",
            "train_dataloader.batch_size=4",
            "randomness.seed=0",
            "--amp",
        ],
    );
    has(&p, &format!("command: python3 tools/train.py {config} --cfg-options train_dataloader.batch_size=2 randomness.seed=0 optim_wrapper.accumulative_counts=2 --amp"));
    for line in p.lines().filter(|l| l.contains("command:")) {
        assert_eq!(line.matches("--cfg-options").count(), 1, "{line}");
    }
}

/// mmyolo writes the batch as a variable (`batch_size=train_batch_size_per_gpu`): no literal to
/// read, so nothing is moved (a line says so and how to name it), and the plan is still made.
#[test]
fn codebases_mmengine_batch_held_in_a_variable_is_named_not_refused() {
    let p = plan_with(
        None,
        &[(
            "yolov5_s.py",
            "train_batch_size_per_gpu = 16\ntrain_dataloader = dict(batch_size=train_batch_size_per_gpu, num_workers=8)\n",
        )],
        &[],
        &["python3", "tools/train.py", "yolov5_s.py"],
    );
    has(&p, "train_dataloader.batch_size is a name, not a literal");
    has(
        &p,
        "name the batch with --batch-arg and the accumulation with --accum-arg",
    );
    assert!(!p.contains("attempt 2 after oom_killed: "), "{p}");
}

#[test]
fn codebases_mmdetection_file_key_inside_a_dict_call() {
    let key = "configs/_base_/datasets/coco_detection.py:train_dataloader.batch_size";
    let p = plan_with(
        Some("mmdetection"),
        &[],
        &["--batch-arg", key],
        &[
            "python3",
            "tools/train.py",
            "configs/faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py",
        ],
    );
    has(&p, "2→1");
    // The file named is edited where the key sits, and no --cfg-options is added for it (that is
    // the command's own form, without --batch-arg).
    has(&p, "line 13: batch_size=2, → batch_size=1,");
    assert!(!p.contains("--cfg-options"), "{p}");
}

#[test]
fn codebases_megatron_and_litgpt_keep_their_effective_batch() {
    // Megatron-LM's pretrain_gpt.py: accumulation = global ÷ (micro × data-parallel).
    let p = plan(
        None,
        &[
            "python3",
            "pretrain_gpt.py",
            "--micro-batch-size",
            "4",
            "--global-batch-size",
            "256",
            "--seq-length",
            "1024",
        ],
    );
    has(&p, "attempt 2 after oom_killed: --micro-batch-size 4→2\n");
    has(&p, "--micro-batch-size 2 --global-batch-size 256");
    assert!(!p.contains("effective batch shrinks"), "{p}");
    // litgpt's finetune flags (through python -m, the console script being another's part).
    let p = plan(
        None,
        &[
            "python3",
            "-m",
            "litgpt",
            "finetune",
            "microsoft/phi-2",
            "--train.micro_batch_size",
            "4",
            "--train.global_batch_size",
            "16",
        ],
    );
    has(
        &p,
        "attempt 2 after oom_killed: --train.micro_batch_size 4→2\n",
    );
    assert!(!p.contains("effective batch shrinks"), "{p}");
}

#[test]
fn codebases_hf_examples_trainer_batch_gets_the_trainers_accumulation() {
    // transformers' examples/pytorch/language-modeling README.
    let p = plan(
        None,
        &[
            "python3",
            "run_clm.py",
            "--model_name_or_path",
            "openai-community/gpt2",
            "--per_device_train_batch_size",
            "8",
            "--do_train",
            "--output_dir",
            "/tmp/test-clm",
        ],
    );
    has(
        &p,
        "--per_device_train_batch_size 8→4, --gradient_accumulation_steps 1→2",
    );
    has(
        &p,
        "--output_dir /tmp/test-clm --gradient_accumulation_steps 2",
    );
    assert!(!p.contains("effective batch shrinks"), "{p}");
}

/// The job of the recorded H200 run (tests/gpu/hf_gpt2_job.py, which tests/gpu/hf_trainer.sh
/// runs; ../shared/gpu-runs/hf-gpt2-seq1024): `HfArgumentParser((Extra, TrainingArguments))`, no
/// argparse of its own, so the batch flag is the Trainer's and so is its accumulation, added
/// where the command has none. Its recorded command's own `--gradient_accumulation_steps 1`
/// moves where it stands, as the real run's did (256 × 1, then 128 × 2).
#[test]
fn codebases_hf_trainer_the_recorded_real_job_keeps_its_effective_batch() {
    let job = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/gpu/hf_gpt2_job.py"
    ))
    .unwrap();
    let plan = |words: &[&str]| plan_with(None, &[("job.py", &job)], &[], words);
    let p = plan(&[
        "python3",
        "job.py",
        "--output_dir",
        "/tmp/out",
        "--per_device_train_batch_size",
        "8",
    ]);
    has(
        &p,
        "--per_device_train_batch_size 8→4, --gradient_accumulation_steps 1→2",
    );
    has(
        &p,
        "job.py --output_dir /tmp/out --per_device_train_batch_size 4 --gradient_accumulation_steps 2\n",
    );
    let recorded = "python3 job.py --output_dir /tmp/out --per_device_train_batch_size 256 \
                    --gradient_accumulation_steps 1 --max_steps 5 --logging_steps 1 --report_to none \
                    --save_strategy no --dataloader_num_workers 4";
    let words: Vec<&str> = recorded.split_whitespace().collect();
    let p = plan(&words);
    has(
        &p,
        "--per_device_train_batch_size 256→128, --gradient_accumulation_steps 1→2",
    );
    has(
        &p,
        "--per_device_train_batch_size 128 --gradient_accumulation_steps 2 --max_steps 5",
    );
    assert!(!p.contains("effective batch shrinks"), "{p}");
}

/// timm's documented command with a real job: `./distributed_train.sh 1 ... -b 4` runs a
/// stand-in train.py (tests/fixtures/codebases/timm_job/) that declares `-b, --batch-size` and
/// `--grad-accum-steps` as timm does and holds memory by its batch. Killed by the kernel in a
/// memory cgroup at 4, it converges at 2 with `--grad-accum-steps 2` added through the
/// wrapper's `"$@"`: 4 samples a step in every attempt.
#[test]
fn codebases_timm_killed_at_its_short_batch_flag_converges_with_the_declared_accumulation() {
    let sb = Sandbox::new();
    let project = sb.path("project");
    copy_tree(Path::new(&util::fixture("codebases/timm_job")), &project);
    let record = sb.path("record.jsonl");
    let out = sb
        .run(
            &["--memory-max", "160M"],
            &[
                "./distributed_train.sh",
                "1",
                "--data-dir",
                "/imagenet",
                "--model",
                "resnet50",
                "-b",
                "4",
                "--amp",
                "-j",
                "8",
            ],
        )
        .current_dir(&project)
        .env("TIMM_RECORD", &record)
        .output()
        .expect("oomguard runs");
    let Some(seen) = util::killed_once_then_ok("codebases_syntax::codebases_timm_killed_at_its_short_batch_flag_converges_with_the_declared_accumulation", &sb, &out, &record) else {
        return;
    };
    assert_eq!(seen, [(4, 1), (2, 2)], "{}", util::stderr_of(&out));
}
