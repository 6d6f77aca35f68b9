//! The run directory end to end: oomguard creates only files of its own there, refuses a
//! directory holding one it would write, removes only what it made when the job cannot start,
//! and hands the job absolute paths.

use crate::util;

use std::path::Path;

use util::{stderr_of, Sandbox};

/// Without a home oomguard can write (HOME below /proc: not even root can make it), the default
/// run directory cannot be made: the message names that directory, and the parent that failed,
/// not only the parent. With `--state-dir` and `--run-dir` given, a run that patches a file in
/// place needs no home at all: its backups go to the state directory.
#[test]
fn without_a_writable_home_the_messages_name_the_directory_and_state_dir_is_enough() {
    let p = util::Project::new();
    let home = "/proc/oomguard-no-home";
    let out =
        p.sb.oomguard(&["run", "--", "true"])
            .env_remove("XDG_STATE_HOME")
            .env("HOME", home)
            .output()
            .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot create run directory {home}/.local/state/oomguard/runs: {home}: "
        )),
        "{stderr}"
    );
    let config = p.write("configs/default.yaml", "training:\n  batch_size: 64\n");
    let state = p.sb.path("st");
    let out = p
        .command(
            &[
                "--state-dir",
                state.to_str().unwrap(),
                "--batch-arg=configs/default.yaml:training.batch_size",
            ],
            &[],
            &[("JOB_FITS", "s['training.batch_size'] <= 32")],
        )
        .env_remove("XDG_STATE_HOME")
        .env("HOME", home)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(p.seen()[1]["training.batch_size"], 32, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "training:\n  batch_size: 64\n"
    );
    assert!(
        state.join("patches").is_dir(),
        "the backups went to --state-dir"
    );
}

/// A directory of the user's with files named like oomguard's: refused, nothing touched.
#[test]
fn a_run_dir_holding_files_oomguard_would_write_is_refused_untouched() {
    let sb = Sandbox::new();
    let dir = sb.path("mine");
    std::fs::create_dir(&dir).unwrap();
    let theirs = [
        ("samples.csv", "epoch,loss\n1,0.5\n"),
        ("attempt-1.log", "my own log\n"),
        ("notes.txt", "keep me\n"),
    ];
    for (name, text) in theirs {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let marker = sb.path("started");
    let out = sb
        .oomguard(&[
            "run",
            "--run-dir",
            dir.to_str().unwrap(),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("already holds attempt-1.log"), "{stderr}");
    assert!(stderr.contains("--run-dir"), "{stderr}");
    assert!(!marker.exists(), "the job started");
    for (name, text) in theirs {
        assert_eq!(
            std::fs::read_to_string(dir.join(name)).unwrap(),
            text,
            "{name}"
        );
    }
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), theirs.len(), "{names:?}");
}

/// Other files in the run directory stay as they were through a whole run.
#[test]
fn other_files_in_the_run_dir_are_left_alone() {
    let sb = Sandbox::new();
    let dir = sb.run_dir();
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), "batch_size: 8\n").unwrap();
    let out = sb.run(&[], &["sh", "-c", "echo hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("config.yaml")).unwrap(),
        "batch_size: 8\n"
    );
    assert!(dir.join("attempt-1.log").exists());
}

/// A script whose `#!` interpreter is missing: found and executable, but it cannot start (126).
fn unstartable(sb: &Sandbox) -> String {
    let script = sb.path("train.sh");
    std::fs::write(&script, "#!/no/such/interpreter\necho hi\n").unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    script.to_str().unwrap().to_string()
}

/// A failed start removes what oomguard made, and nothing else: the user's directory and files
/// stay, and of `n1/n2/n3` nothing is left when none of it existed.
#[test]
fn a_failed_start_removes_only_what_oomguard_made() {
    let sb = Sandbox::new();
    let script = unstartable(&sb);

    let dir = sb.path("mine");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "keep me\n").unwrap();
    let out = sb
        .oomguard(&["run", "--run-dir", dir.to_str().unwrap(), "--", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr_of(&out));
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["notes.txt"], "left behind");
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "keep me\n"
    );

    // Relative to oomguard's working directory, three levels that do not exist yet.
    let out = sb
        .oomguard(&["run", "--run-dir", "n1/n2/n3", "--", &script])
        .current_dir(sb.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr_of(&out));
    assert!(!sb.path("n1").exists(), "n1 left behind");
}

/// The job may change directory (Hydra does): the run directory it is told is absolute.
#[test]
fn the_job_is_told_an_absolute_run_dir() {
    let sb = Sandbox::new();
    let out = sb
        .oomguard(&[
            "run",
            "--run-dir",
            "rel/run",
            "--",
            "sh",
            "-c",
            "cd / && printf '%s' \"$OOMGUARD_RUN_DIR\" > \"$OOMGUARD_RUN_DIR/seen\"",
        ])
        .current_dir(sb.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let seen = std::fs::read_to_string(sb.path("rel/run/seen")).unwrap();
    assert!(Path::new(&seen).is_absolute(), "{seen}");
    assert_eq!(
        std::fs::canonicalize(&seen).unwrap(),
        std::fs::canonicalize(sb.path("rel/run")).unwrap()
    );
}

/// A relative XDG_STATE_HOME is ignored, as the XDG spec says: runs go under
/// $HOME/.local/state, never into a directory relative to wherever oomguard was started.
#[test]
fn a_relative_xdg_state_home_is_ignored() {
    let sb = Sandbox::new();
    let home = sb.path("home");
    std::fs::create_dir(&home).unwrap();
    let out = sb
        .oomguard(&["run", "--", "sh", "-c", "true"])
        .env("XDG_STATE_HOME", "relstate")
        .env("HOME", &home)
        .current_dir(sb.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(
        !sb.path("relstate").exists(),
        "used the relative XDG_STATE_HOME"
    );
    let runs: Vec<_> = std::fs::read_dir(home.join(".local/state/oomguard/runs"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].path().join("summary.json").exists());
}
