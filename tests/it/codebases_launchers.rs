//! The training commands the codebases with their own launchers document (issue 40: torchtune,
//! LLaMA-Factory, axolotl, TRL, ultralytics), on copies of their real configs
//! (tests/fixtures/codebases/), through the binary with `--dry-run`: what moves, the words added
//! and the notes. The job's PATH is the sandbox's `bin/` and the system's, so whether a
//! launcher is "installed" is the test's choice: a pip-style wrapper there, or nothing.

use std::path::Path;
use std::process::Output;

use crate::util::{self, copy_tree, Sandbox};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/codebases");

/// A sandbox whose `project/` holds copies of the codebases' fixture files.
fn project() -> Sandbox {
    let sb = Sandbox::new();
    copy_tree(Path::new(FIXTURES), &sb.path("project"));
    std::fs::create_dir_all(sb.path("bin")).unwrap();
    sb
}

/// Installs console script `name` in a fake environment `sb/venv` as pip writes it, running
/// `module`'s `main`, and links it into the job's PATH.
fn install(sb: &Sandbox, name: &str, module: &str) {
    let bin = sb.path("venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let wrapper = format!(
        "#!{}/venv/bin/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import main\nif __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n",
        sb.dir.path().display()
    );
    let path = bin.join(name);
    std::fs::write(&path, wrapper).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&path, sb.path("bin").join(name)).unwrap();
}

/// torchtune's `tune`, with the installed package's built-in configs
/// (site-packages/recipes/configs/).
fn install_torchtune(sb: &Sandbox) {
    install(sb, "tune", "torchtune._cli.tune");
    copy_tree(
        &sb.path("project/torchtune"),
        &sb.path("venv/lib/python3.11/site-packages/recipes/configs"),
    );
}

/// `oomguard run --dry-run -- JOB` in the project directory, with the sandbox's PATH.
fn plan(sb: &Sandbox, job: &str) -> (String, Output) {
    let words: Vec<&str> = job.split_whitespace().collect();
    let out = sb
        .run(&["--dry-run"], &words)
        .current_dir(sb.path("project"))
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", sb.path("bin").display()),
        )
        .output()
        .expect("oomguard runs");
    assert!(out.status.success(), "{job}: {}", util::stderr_of(&out));
    (String::from_utf8_lossy(&out.stdout).into_owned(), out)
}

/// The plan's `attempt 2` line and the command under it.
fn second(plan: &str) -> (&str, &str) {
    let mut lines = plan.lines().skip_while(|l| !l.starts_with("attempt 2"));
    let head = lines
        .next()
        .unwrap_or_else(|| panic!("no attempt 2: {plan}"));
    let command = lines
        .find_map(|l| l.trim().strip_prefix("command: "))
        .unwrap_or_else(|| panic!("no command: {plan}"));
    (head, command)
}

#[test]
fn codebases_torchtune_built_in_config_moves_both_from_the_configs_values() {
    let sb = project();
    install_torchtune(&sb);
    let doc = "tune run lora_finetune_single_device --config llama3_2/1B_lora_single_device";
    let (out, _) = plan(&sb, doc);
    assert!(out.contains("tune runs torchtune._cli.tune"), "{out}");
    assert!(out.contains("torchtune's built-in config"), "{out}");
    let (head, command) = second(&out);
    assert!(
        head.ends_with("batch_size 4→2, gradient_accumulation_steps 8→16"),
        "{head}"
    );
    assert_eq!(
        command,
        format!("{doc} batch_size=2 gradient_accumulation_steps=16")
    );

    // The README's override: the batch from the command, its partner from the config (8).
    let (out, _) = plan(&sb, &format!("{doc} batch_size=8"));
    let (head, command) = second(&out);
    assert!(
        head.ends_with("batch_size 8→4, gradient_accumulation_steps 8→16"),
        "{head}"
    );
    assert_eq!(
        command,
        format!("{doc} batch_size=4 gradient_accumulation_steps=16")
    );

    // Renamed, it is known by what it runs; another package's `tune` is not torchtune.
    install(&sb, "tt", "torchtune._cli.tune");
    let (out, _) = plan(&sb, "tt run --nproc_per_node 2 lora_finetune_single_device --config llama3_2/1B_lora_single_device");
    assert!(
        second(&out)
            .0
            .ends_with("batch_size 4→2, gradient_accumulation_steps 8→16"),
        "{out}"
    );
    let other = project();
    install(&other, "tune", "othertune.cli");
    let (out, _) = plan(&other, &format!("{doc} batch_size=8"));
    assert!(!out.contains("torchtune"), "{out}");
    assert!(!out.contains("gradient_accumulation_steps"), "{out}");
    // ...but a command with a batch override all the same, halved where it is written.
    assert!(second(&out).0.ends_with("batch_size 8→4"), "{out}");
}

#[test]
fn codebases_a_launcher_not_installed_is_planned_by_its_name_and_a_run_refuses_it() {
    let sb = project();
    let (out, _) = plan(
        &sb,
        "tune run lora_finetune_single_device --config torchtune/llama3_2/1B_lora_single_device.yaml",
    );
    assert!(
        out.starts_with("not installed here: tune (command not found)"),
        "{out}"
    );
    assert!(
        out.contains("tune is not installed here, so it is known by its name"),
        "{out}"
    );
    assert!(
        second(&out)
            .0
            .ends_with("batch_size 4→2, gradient_accumulation_steps 8→16"),
        "{out}"
    );

    // A built-in config name with no torchtune here: the command's words only, and the batch
    // moves alone rather than overriding an accumulation oomguard could not read.
    let (out, _) = plan(
        &sb,
        "tune run lora_finetune_single_device --config llama3_2/1B_lora_single_device batch_size=8",
    );
    assert!(out.contains("no installed torchtune here has it"), "{out}");
    let (head, _) = second(&out);
    assert!(head.ends_with("batch_size 8→4"), "{head}");

    // A real run still refuses a program that is not there.
    let out = sb
        .run(&[], &["tune", "run", "x", "--config", "c.yaml"])
        .current_dir(sb.path("project"))
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", sb.path("bin").display()),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", util::stderr_of(&out));
}

/// A job file's `[env]` PATH is the one the job's programs are found with: its launcher is
/// looked up there, not on oomguard's own PATH, where another package's `tune` comes first.
#[test]
fn codebases_a_job_files_path_finds_the_launcher_the_job_will_run() {
    let sb = project();
    install_torchtune(&sb);
    let elsewhere = project();
    install(&elsewhere, "tune", "othertune.cli");
    let job = sb.path("project/job.toml");
    std::fs::write(
        &job,
        format!(
            "command = [\"tune\", \"run\", \"lora_finetune_single_device\", \"--config\", \"llama3_2/1B_lora_single_device\"]\n\n[env]\nPATH = \"{}:/usr/bin:/bin\"\n",
            sb.path("venv/bin").display()
        ),
    )
    .unwrap();
    let out = sb
        .oomguard(&["run", "--dry-run", "--config", job.to_str().unwrap()])
        .current_dir(sb.path("project"))
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", elsewhere.path("bin").display()),
        )
        .output()
        .expect("oomguard runs");
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", util::stderr_of(&out));
    assert!(plan.contains("tune runs torchtune._cli.tune"), "{plan}");
    assert!(!plan.contains("othertune"), "{plan}");
    assert!(
        second(&plan)
            .0
            .ends_with("batch_size 4→2, gradient_accumulation_steps 8→16"),
        "{plan}"
    );
}

#[test]
fn codebases_llamafactory_override_and_config() {
    let sb = project();
    let cfg = "llamafactory/examples/train_lora/qwen3_lora_sft.yaml";
    let (out, _) = plan(
        &sb,
        &format!("llamafactory-cli train {cfg} per_device_train_batch_size=4"),
    );
    assert!(
        out.contains(&format!("`gradient_accumulation_steps` in {cfg}, 8")),
        "{out}"
    );
    let (head, command) = second(&out);
    assert!(
        head.ends_with("per_device_train_batch_size 4→2, gradient_accumulation_steps 8→16"),
        "{head}"
    );
    assert_eq!(
        command,
        format!("llamafactory-cli train {cfg} per_device_train_batch_size=2 gradient_accumulation_steps=16")
    );
}

#[test]
fn codebases_axolotl_cli_and_module_take_its_own_keys_never_the_trainers() {
    let sb = project();
    let cfg = "axolotl/examples/llama-3/lora-1b.yml";
    for job in [
        format!("axolotl train {cfg}"),
        format!("accelerate launch -m axolotl.cli.train {cfg}"),
    ] {
        let (out, _) = plan(&sb, &job);
        assert!(!out.contains("per_device_train_batch_size"), "{out}");
        let (head, command) = second(&out);
        assert!(
            head.ends_with("--micro-batch-size 2→1, --gradient-accumulation-steps 2→4"),
            "{head}"
        );
        assert_eq!(
            command,
            format!("{job} --micro-batch-size=1 --gradient-accumulation-steps=4")
        );
    }
    // A global batch_size and no accumulation: axolotl derives it, the micro batch moves alone.
    let text = std::fs::read_to_string(sb.path("project").join(cfg)).unwrap();
    let global = text.replace("gradient_accumulation_steps: 2\n", "batch_size: 16\n");
    std::fs::write(sb.path("project/global.yml"), global).unwrap();
    let (out, _) = plan(&sb, "axolotl train global.yml");
    assert!(
        out.contains("derives the accumulation as batch_size ÷ micro_batch_size"),
        "{out}"
    );
    let (head, command) = second(&out);
    assert!(head.ends_with("--micro-batch-size 2→1"), "{head}");
    assert_eq!(command, "axolotl train global.yml --micro-batch-size=1");
    // The global batch on the command line over a YAML with neither, the micro batch in the
    // command's underscore spelling: that word moves where it is, and no accumulation is
    // added (axolotl refuses one beside a global batch).
    let micro_only = text.replace("gradient_accumulation_steps: 2\n", "");
    std::fs::write(sb.path("project/micro.yml"), micro_only).unwrap();
    let job = "axolotl train micro.yml --batch-size=16 --micro_batch_size=4";
    let (out, _) = plan(&sb, job);
    assert!(
        out.contains("batch: `--micro_batch_size=4` in the command"),
        "{out}"
    );
    assert!(out.contains("`batch_size` in the command"), "{out}");
    let (head, command) = second(&out);
    assert!(head.ends_with("--micro_batch_size 4→2"), "{head}");
    assert_eq!(command, job.replace("size=4", "size=2"));
}

#[test]
fn codebases_trl_flags_added_from_the_trainers_defaults() {
    let sb = project();
    let job = "trl sft --config trl/example_config.yaml --output_dir test-sft";
    let (out, _) = plan(&sb, job);
    assert!(out.contains("TRL's default 8"), "{out}");
    let (head, command) = second(&out);
    assert!(
        head.ends_with("--per_device_train_batch_size 8→4, --gradient_accumulation_steps 1→2"),
        "{head}"
    );
    assert_eq!(
        command,
        format!("{job} --per_device_train_batch_size 4 --gradient_accumulation_steps 2")
    );
    // A config named but not here may set the batch: the Trainer's default is no guess to
    // override it with.
    let (out, _) = plan(&sb, "trl sft --config missing.yaml --output_dir test-sft");
    assert!(out.contains("config: missing.yaml is not here"), "{out}");
    assert!(!out.contains("TRL's default 8"), "{out}");
    assert!(!out.contains("attempt 2"), "{out}");
}

#[test]
fn codebases_ultralytics_keeps_its_effective_batch_through_nbs() {
    let sb = project();
    let job = "yolo detect train data=coco8.yaml model=yolo11n.pt batch=16";
    let (out, _) = plan(&sb, job);
    assert!(out.contains("round(nbs 64 ÷ batch)"), "{out}");
    assert!(!out.contains("shrinks"), "{out}");
    let (head, command) = second(&out);
    assert!(head.ends_with("batch 16→8"), "{head}");
    assert_eq!(command, job.replace("batch=16", "batch=8"));
    // Its cfg= file's batch, added as a word.
    let (out, _) = plan(&sb, "yolo train cfg=ultralytics/default.yaml");
    assert_eq!(
        second(&out).1,
        "yolo train cfg=ultralytics/default.yaml batch=8"
    );
    // Above nbs it accumulates 1 step either way: the effective batch shrinks, said so.
    let (out, _) = plan(&sb, "yolo train data=coco8.yaml batch=128");
    assert!(out.contains("1 for a batch of 128"), "{out}");
    assert!(
        out.contains("effective batch shrinks with the batch (128 → 64)"),
        "{out}"
    );
    // Once as the note at the first halving (the found line above says why, in its own words).
    assert_eq!(
        out.matches("effective batch shrinks with the batch")
            .count(),
        1,
        "{out}"
    );
    // AutoBatch is its own.
    let (out, _) = plan(&sb, "yolo train data=coco8.yaml batch=-1");
    assert!(out.contains("AutoBatch"), "{out}");
    assert!(!out.contains("attempt 2"), "{out}");
}

/// The console-script path with a real job: a `tune` installed as pip installs it, running a
/// stand-in torchtune (tests/fixtures/codebases/torchtune_job/) that reads its built-in config
/// and `key=value` overrides as torchtune does and holds memory by its batch. Killed by the
/// kernel in a memory cgroup at the config's batch of 4, it converges at 2 with the config's
/// accumulation of 8 doubled: the same 32 samples a step in every attempt, the config untouched.
#[test]
fn codebases_a_console_script_killed_at_its_configs_batch_converges_with_both_moved() {
    let sb = project();
    install(&sb, "tune", "torchtune._cli.tune");
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    let python = String::from_utf8(python.stdout).unwrap();
    std::os::unix::fs::symlink(python.trim(), sb.path("venv/bin/python3")).unwrap();
    let site = sb.path("venv/lib/python3.11/site-packages");
    copy_tree(&Path::new(FIXTURES).join("torchtune_job"), &site);
    copy_tree(&sb.path("project/torchtune"), &site.join("recipes/configs"));
    let config = site.join("recipes/configs/llama3_2/1B_lora_single_device.yaml");
    let before = std::fs::read_to_string(&config).unwrap();
    let record = sb.path("record.jsonl");
    let out = sb
        .run(
            &["--memory-max", "160M"],
            &[
                "tune",
                "run",
                "lora_finetune_single_device",
                "--config",
                "llama3_2/1B_lora_single_device",
            ],
        )
        .current_dir(sb.path("project"))
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", sb.path("bin").display()),
        )
        .env("PYTHONPATH", &site)
        .env("TUNE_RECORD", &record)
        .output()
        .expect("oomguard runs");
    let Some(seen) = util::killed_once_then_ok("codebases_launchers::codebases_a_console_script_killed_at_its_configs_batch_converges_with_both_moved", &sb, &out, &record) else {
        return;
    };
    assert_eq!(seen, [(4, 8), (2, 16)], "{}", util::stderr_of(&out));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), before);
}
