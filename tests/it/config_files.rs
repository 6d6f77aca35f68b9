//! The user's config file comes back byte for byte after every way a run can end: success,
//! a failure of the job's own, giving up, SIGINT, SIGTERM, oomguard SIGKILLed (its guard
//! restores the file), oomguard and its guard both SIGKILLed (the next `oomguard run` restores it
//! first and says so). Also: a file the command names gets a patched copy and is never touched;
//! a second oomguard that would patch a file being patched is refused; someone else's edit during
//! the run is kept with the original left beside it. The job is tests/fixtures/situation_job.py,
//! which reads configs/default.yaml itself, so oomguard patches it in place.

use crate::util;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;
use util::{alive, guard_of, kill, stderr_of, wait_until, Project, Running};

/// How long oomguard may take to end once told to, on a slow, busy machine.
const LONG: Duration = Duration::from_secs(60);

/// Comments, order, quoting and blank lines an edit must not disturb.
const YAML: &str = "# EMG training\ntraining:\n  # per step\n  batch_size: 64   # fits 24G\n\n  gradient_accumulation_steps: 1\n  num_workers: 4\n  pin_memory: true\n  optimizer: 'adamw'\n";

const BATCH: &str = "--batch-arg=configs/default.yaml:training.batch_size";
const ACCUM: &str = "--accum-arg=configs/default.yaml:training.gradient_accumulation_steps";

fn project() -> (Project, PathBuf) {
    let p = Project::new();
    let config = p.write("configs/default.yaml", YAML);
    (p, config)
}

fn assert_untouched(path: &Path) {
    assert_eq!(
        std::fs::read_to_string(path).expect("the user's file is still there"),
        YAML,
        "{} changed",
        path.display()
    );
}

/// Nothing of oomguard's is left beside the user's file.
fn assert_nothing_beside(p: &Project) {
    let names: Vec<String> = std::fs::read_dir(p.dir.join("configs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["default.yaml"]);
}

#[test]
fn the_file_is_identical_after_success_failure_and_giving_up() {
    // (what happens, extra flags, job variables, exit status)
    type Row<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], i32);
    let table: &[Row] = &[
        (
            "success",
            &[],
            &[("JOB_FITS", "s['training.batch_size'] <= 16")],
            0,
        ),
        (
            "failure",
            &[],
            &[("JOB_FITS", "False"), ("JOB_FAIL_AT", "2")],
            1,
        ),
        (
            "give-up",
            &["--max-attempts", "3"],
            &[("JOB_FITS", "False")],
            75,
        ),
        (
            "floor",
            &["--min-batch", "32"],
            &[("JOB_FITS", "False")],
            75,
        ),
    ];
    for (what, extra, env, code) in table {
        let (p, config) = project();
        let mut flags = vec![BATCH, ACCUM];
        flags.extend_from_slice(extra);
        let out = p.run(&flags, &[], env);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(*code), "{what}: {stderr}");
        assert_untouched(&config);
        assert_nothing_beside(&p);
        // The job read the patched values, the effective batch kept.
        let seen = p.seen();
        assert_eq!(seen[1]["training.batch_size"], json!(32), "{what}");
        assert_eq!(
            seen[1]["training.gradient_accumulation_steps"],
            json!(2),
            "{what}"
        );
        let summary = p.sb.summary();
        assert_eq!(
            summary["attempts"][1]["knobs"],
            json!({"batch": 32, "accum": 2}),
            "{what}"
        );
        assert_eq!(summary["attempts"][1]["changed"], json!(["batch", "accum"]));
    }
}

/// Starts oomguard with attempt 2 (patched in place) holding on the FIFO `hold`; returns once
/// the job waits there.
fn start_holding(p: &Project, hold: &Path, extra: &[&str]) -> Running {
    let mut flags = vec![BATCH, ACCUM];
    flags.extend_from_slice(extra);
    let cmd = p.command(
        &flags,
        &[],
        &[
            ("JOB_FITS", "s['training.batch_size'] <= 32"),
            ("JOB_HOLD", hold.to_str().unwrap()),
        ],
    );
    util::start_holding(&p.sb, cmd, hold)
}

#[test]
fn the_file_is_identical_after_sigint_and_sigterm() {
    for (signal, code) in [(Signal::SIGINT, 130), (Signal::SIGTERM, 143)] {
        let (p, config) = project();
        let hold = p.sb.path("hold");
        let child = start_holding(&p, &hold, &[]);
        // While attempt 2 runs, the file holds its values.
        assert!(std::fs::read_to_string(&config)
            .unwrap()
            .contains("batch_size: 32   # fits 24G"));
        kill(child.pid(), signal);
        let out = child.finish(LONG);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{signal}: {}",
            stderr_of(&out)
        );
        assert_untouched(&config);
        assert_nothing_beside(&p);
    }
}

#[test]
fn the_guard_restores_the_file_when_oomguard_is_sigkilled() {
    let (p, config) = project();
    let hold = p.sb.path("hold");
    let mut child = start_holding(&p, &hold, &[]);
    kill(child.pid(), Signal::SIGKILL);
    child.wait(LONG);
    assert!(
        wait_until(Duration::from_secs(30), || {
            std::fs::read_to_string(&config).is_ok_and(|t| t == YAML)
        }),
        "the guard did not restore {}",
        config.display()
    );
    assert_untouched(&config);
    assert_nothing_beside(&p);
}

#[test]
fn after_oomguard_and_its_guard_are_sigkilled_the_next_start_restores_the_file_first() {
    let (p, config) = project();
    let hold = p.sb.path("hold");
    let mut child = start_holding(&p, &hold, &[]);
    let guard = guard_of(child.pid());
    kill(guard, Signal::SIGKILL);
    assert!(wait_until(Duration::from_secs(10), || !alive(guard)));
    kill(child.pid(), Signal::SIGKILL);
    child.wait(LONG);
    assert_ne!(
        std::fs::read_to_string(&config).unwrap(),
        YAML,
        "left patched"
    );
    // Any next run, even one with no knob in that file, puts it back before anything else.
    let next =
        p.sb.oomguard(&[
            "run",
            "--run-dir",
            p.sb.path("run2").to_str().unwrap(),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let stderr = stderr_of(&next);
    assert_eq!(next.status.code(), Some(0), "{stderr}");
    assert_untouched(&config);
    assert!(
        stderr.contains("restored") && stderr.contains("default.yaml"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().next().map(|l| l.contains("restored")),
        Some(true),
        "said first: {stderr}"
    );
}

/// The next run of the same job, after oomguard and its guard were both SIGKILLed with the file
/// patched, reads the user's values (restored first), not the dead run's; also when it keeps
/// its state under another XDG_STATE_HOME (the system unit's and a shell's differ): the file's
/// own lock names the dead run's journal entry.
#[test]
fn the_next_run_after_both_were_killed_starts_from_the_users_values() {
    for other_state in [false, true] {
        let (p, config) = project();
        let hold = p.sb.path("hold");
        let mut child = start_holding(&p, &hold, &[]);
        let guard = guard_of(child.pid());
        kill(guard, Signal::SIGKILL);
        assert!(wait_until(Duration::from_secs(10), || !alive(guard)));
        kill(child.pid(), Signal::SIGKILL);
        child.wait(LONG);
        assert!(std::fs::read_to_string(&config)
            .unwrap()
            .contains("batch_size: 32"));
        // A fresh record and run directory for the next run (the killed one's are the test's).
        std::fs::remove_file(p.record()).unwrap();
        std::fs::remove_dir_all(p.sb.run_dir()).unwrap();
        let mut next = p.command(&[BATCH, ACCUM, "--fresh"], &[], &[]);
        if other_state {
            next.env("XDG_STATE_HOME", p.sb.path("state-b"));
        }
        let next = next.output().unwrap();
        let stderr = stderr_of(&next);
        assert_eq!(next.status.code(), Some(0), "{stderr}");
        assert_eq!(
            p.seen()[0]["training.batch_size"],
            json!(64),
            "other state dir: {other_state}: {stderr}"
        );
        assert_untouched(&config);
        assert_nothing_beside(&p);
    }
}

/// Refused whatever the second one's state directory: the lock is the file's, not the state
/// directory's (two XDG_STATE_HOME used to let both patch, and leave the file at the first
/// one's values with the original beside it).
#[test]
fn a_second_oomguard_patching_the_same_file_is_refused() {
    for other_state in [false, true] {
        let (p, config) = project();
        let hold = p.sb.path("hold");
        let first = start_holding(&p, &hold, &[]);
        let run2 = p.sb.path("run2");
        let script = util::fixture("situation_job.py");
        let mut second = p.sb.oomguard(&[
            "run",
            "--run-dir",
            run2.to_str().unwrap(),
            BATCH,
            "--",
            "python3",
            &script,
            "rec",
        ]);
        if other_state {
            second.env("XDG_STATE_HOME", p.sb.path("state-b"));
        }
        let second = second.current_dir(&p.dir).output().unwrap();
        let stderr = stderr_of(&second);
        assert_eq!(second.status.code(), Some(2), "{other_state}: {stderr}");
        assert!(
            stderr.contains(&format!("oomguard {}", first.pid()))
                && stderr.contains("default.yaml"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!p.sb.path("run2").exists(), "nothing created");
        std::fs::write(&hold, "go\n").unwrap();
        let out = first.finish(LONG);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        assert_untouched(&config);
        assert_nothing_beside(&p);
    }
}

#[test]
fn someone_elses_edit_during_the_run_is_kept_and_the_original_left_beside_it() {
    let (p, config) = project();
    let hold = p.sb.path("hold");
    let first = start_holding(&p, &hold, &[]);
    let theirs = YAML.replace("pin_memory: true", "pin_memory: false");
    std::fs::write(&config, &theirs).unwrap();
    std::fs::write(&hold, "go\n").unwrap();
    let out = first.finish(LONG);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), theirs);
    assert_eq!(
        std::fs::read_to_string(p.dir.join("configs/default.yaml.oomguard-original")).unwrap(),
        YAML
    );
    assert!(
        stderr.contains("default.yaml.oomguard-original"),
        "{stderr}"
    );
}

#[test]
fn a_file_named_in_the_command_gets_a_patched_copy_and_is_never_touched() {
    let (p, config) = project();
    let mtime = std::fs::metadata(&config).unwrap().modified().unwrap();
    let out = p.run(
        &[BATCH, ACCUM],
        &["--config", "configs/default.yaml"],
        &[("JOB_FITS", "s['training.batch_size'] <= 32")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let seen = p.seen();
    let pid_copy = seen[1]["yaml_path"].as_str().unwrap().to_string();
    assert!(
        pid_copy.starts_with("configs/default.oomguard-") && pid_copy.ends_with(".yaml"),
        "{pid_copy}"
    );
    assert_eq!(seen[0]["yaml_path"], json!("configs/default.yaml"));
    assert_eq!(seen[1]["training.batch_size"], json!(32));
    assert_untouched(&config);
    assert_eq!(
        std::fs::metadata(&config).unwrap().modified().unwrap(),
        mtime
    );
    assert_nothing_beside(&p);
}

/// A file, key or value that cannot be a knob: one line naming file and key, exit 2, nothing
/// started (the job records nothing) and nothing created.
#[test]
fn a_bad_file_knob_is_one_line_and_nothing_starts() {
    // (--batch-arg, words of the message)
    let table: &[(&str, &[&str])] = &[
        (
            "configs/missing.yaml:training.batch_size",
            &["configs/missing.yaml"],
        ),
        (
            "configs/default.yaml:training.batch",
            &["training.batch", "configs/default.yaml"],
        ),
        (
            "configs/default.yaml:training.optimizer",
            &["training.optimizer", "`'adamw'`", "whole number"],
        ),
        (
            "env:OOMGUARD_TEST_NO_SUCH_VAR",
            &["OOMGUARD_TEST_NO_SUCH_VAR", "not set"],
        ),
    ];
    for (arg, words) in table {
        let (p, config) = project();
        let flag = format!("--batch-arg={arg}");
        let out = p.run(&[&flag], &[], &[]);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{arg}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        for word in *words {
            assert!(stderr.contains(word), "{arg}: {stderr}");
        }
        assert!(!p.record().exists(), "{arg}: the job ran");
        assert!(!p.sb.run_dir().exists(), "{arg}: a run dir was made");
        assert_untouched(&config);
    }
}

/// A FIFO where the knob's file should be is one line and exit 2, at once: it used to wait for
/// a writer forever.
#[test]
fn a_fifo_for_a_knob_file_is_refused_at_once() {
    let p = Project::new();
    let fifo = p.dir.join("configs/default.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let out = util::output_within(&mut p.command(&[BATCH], &[], &[]), Duration::from_secs(60));
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("configs/default.yaml") && stderr.contains("a FIFO"),
        "{stderr}"
    );
    assert!(!p.record().exists(), "the job ran");
}

/// A value that is not a whole number is quoted as the file spells it: JSON's `6.4e1` reads
/// as 64.0, and "`64`, not a whole number" would puzzle.
#[test]
fn a_non_integer_value_is_quoted_as_the_file_writes_it() {
    let p = Project::new();
    p.write(
        "configs/train.json",
        "{\"training\": {\"batch_size\": 6.4e1}}\n",
    );
    let out = p.run(
        &["--batch-arg=configs/train.json:training.batch_size"],
        &[],
        &[],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`6.4e1`, not a whole number"), "{stderr}");
}

/// `--dry-run` prints every attempt down the ladder and starts and writes nothing: no job, no
/// run directory, no state, the file untouched.
#[test]
fn dry_run_prints_the_ladder_and_touches_nothing() {
    let (p, config) = project();
    let out = p.run(
        &["--dry-run=device_oom", BATCH, ACCUM],
        &["--num_workers", "2"],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("attempt 1: python3 "), "{stdout}");
    assert!(
        lines.contains(&"attempt 2 after device_oom: training.batch_size 64→32 (configs/default.yaml), training.gradient_accumulation_steps 1→2 (configs/default.yaml)"),
        "{stdout}"
    );
    assert!(
        lines.contains(
            &"  file configs/default.yaml (patched in place, restored when the run ends):"
        ),
        "{stdout}"
    );
    assert!(
        lines.contains(&"    line 4: batch_size: 64   # fits 24G → batch_size: 32   # fits 24G"),
        "{stdout}"
    );
    // Halved down to 1 (64, 32, 16, 8, 4, 2, 1): attempt 7, then it gives up; the workers flag
    // does not answer a device OOM.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("attempt 7 after device_oom")),
        "{stdout}"
    );
    assert!(!stdout.contains("attempt 8"), "{stdout}");
    assert!(!stdout.contains("--num_workers 2→"), "{stdout}");
    assert_eq!(
        lines.last(),
        Some(&"then: gave_up (no knob can move: batch 1 (floor 1))"),
        "{stdout}"
    );
    assert!(!p.record().exists(), "the job ran");
    assert!(!p.sb.run_dir().exists());
    assert!(!p.sb.path("state").exists());
    assert_untouched(&config);
}

/// In the patched copy the job reads, only the value's text changed: comments, key order,
/// quoting, indentation and blank lines survive, for each format oomguard edits.
#[test]
fn the_patched_copy_keeps_everything_but_the_value_in_every_format() {
    // (file name, key, text, the same text with the batch halved)
    let table: &[(&str, &str, &str, &str)] = &[
        (
            "train.yaml",
            "training.batch_size",
            "# top\ntraining:\n\n  batch_size: 64   # per step\n  name: 'run a'\n",
            "# top\ntraining:\n\n  batch_size: 32   # per step\n  name: 'run a'\n",
        ),
        (
            "train.json",
            "training.batch_size",
            "{\n  // JSONC comment\n  \"training\": { \"name\": \"run a\", \"batch_size\": 64 },\n  \"z\": [1, 2]\n}\n",
            "{\n  // JSONC comment\n  \"training\": { \"name\": \"run a\", \"batch_size\": 32 },\n  \"z\": [1, 2]\n}\n",
        ),
        (
            "train.toml",
            "training.batch_size",
            "# top\n[training]\nname = 'run a'\nbatch_size = 64 # per step\n\n[data]\nstride = 2\n",
            "# top\n[training]\nname = 'run a'\nbatch_size = 32 # per step\n\n[data]\nstride = 2\n",
        ),
        (
            "train_config.py",
            "TrainConfig.batch_size",
            "# settings\nclass TrainConfig:\n    name = \"run a\"\n    batch_size = 64  # per rank\n\n    lr = 3e-4\n",
            "# settings\nclass TrainConfig:\n    name = \"run a\"\n    batch_size = 32  # per rank\n\n    lr = 3e-4\n",
        ),
        // A UTF-8 byte order mark first, which Python skips: the key is found, the mark kept.
        ("bom.py", "BATCH", "\u{feff}BATCH = 64\n", "\u{feff}BATCH = 32\n"),
        (
            "bom_class.py",
            "TrainConfig.batch_size",
            "\u{feff}class TrainConfig:\n    batch_size = 64\n",
            "\u{feff}class TrainConfig:\n    batch_size = 32\n",
        ),
    ];
    for (name, key, text, want) in table {
        let p = Project::new();
        let config = p.write(&format!("configs/{name}"), text);
        let outdir = p.sb.path("seen");
        std::fs::create_dir(&outdir).unwrap();
        let batch = format!("--batch-arg=configs/{name}:{key}");
        let script = util::fixture("copy_config.py");
        let relative = format!("configs/{name}");
        let out =
            p.sb.run(
                &[&batch],
                &[
                    "python3",
                    &script,
                    outdir.to_str().unwrap(),
                    "--config",
                    &relative,
                ],
            )
            .current_dir(&p.dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr_of(&out));
        let read = |f: &str| std::fs::read_to_string(outdir.join(f)).unwrap();
        assert_eq!(read("attempt-1"), *text, "{name}");
        assert_eq!(read("attempt-2"), *want, "{name}");
        assert_ne!(
            read("attempt-2.path"),
            relative,
            "{name}: attempt 2 read a copy"
        );
        assert_eq!(std::fs::read_to_string(&config).unwrap(), *text, "{name}");
    }
}
