//! Job files: the `--config` TOML carries the job (`name`, `command`, `workdir`, `[env]`,
//! `user`/`group`, and `[run]` with `oomguard run`'s options). A job file runs end to end from
//! another directory, its workdir holding a relative knob file; command-line flags beat `[run]`
//! and a command after `--` replaces the file's; every bad input is one line naming the file,
//! the line and the key, exit 2, nothing started; as root, `user = "nobody"` runs the job as
//! nobody while oomguard stays root, and a job file others could write is refused. The job is
//! tests/fixtures/jobfile_job.py, run by /usr/bin/python3 (the `python3` on PATH may be a shim
//! under /root that nobody cannot run).

use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use util::{fixture, is_root, stderr_of, Sandbox};

const PYTHON: &str = "/usr/bin/python3";

/// The words of the warning a root run without `user` gives.
const ROOT_WARNING: &str = "the job runs as root, as the file names no user";

/// `command = [...]` running the fixture.
fn command_line() -> String {
    format!(
        "command = [\"{PYTHON}\", \"{}\"]\n",
        fixture("jobfile_job.py")
    )
}

/// A project in a sandbox: `project/job.toml` (the given text) and `project/work/train.json`
/// with batch_size 8.
fn project(text: &str) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    let work = sb.path("project/work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("train.json"), "{\"batch_size\": 8}\n").unwrap();
    let job = sb.path("project/job.toml");
    std::fs::write(&job, text).unwrap();
    (sb, job)
}

/// The project of the end-to-end runs in `sb`: its job file (returned) with the batch in
/// train.json, found in the workdir, and `[run] max_attempts`.
fn training_project(sb: &Sandbox, max_attempts: u32) -> PathBuf {
    let work = sb.path("project/work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("train.json"), "{\"batch_size\": 8}\n").unwrap();
    let job = sb.path("project/job.toml");
    std::fs::write(&job, training_file(&sb.run_dir(), max_attempts)).unwrap();
    job
}

/// The job file of the end-to-end runs.
fn training_file(sb_run_dir: &Path, max_attempts: u32) -> String {
    format!(
        "name = \"e2e\"\n{}workdir = \"work\"\n\n[env]\nJOB_GREETING = \"hello from the job file\"\nJOB_FITS = \"2\"\n\n\
         [run]\nrun_dir = \"{}\"\nbackoff = \"0s\"\nstrategy = \"halve\"\nmax_attempts = {max_attempts}\n\n\
         [[knob]]\nname = \"batch\"\nfile = \"train.json\"\nkey = \"batch_size\"\n",
        command_line(),
        sb_run_dir.display()
    )
}

/// `oomguard run --config JOB <extra>`, started in `/`: nothing may depend on where it starts.
fn run_config(sb: &Sandbox, job: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["run", "--config", job.to_str().unwrap()];
    args.extend_from_slice(extra);
    sb.oomguard(&args)
        .current_dir("/")
        .output()
        .expect("oomguard runs")
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The values the fixture printed for `key`, in order.
fn printed(out: &Output, key: &str) -> Vec<String> {
    stdout_of(out)
        .lines()
        .filter_map(|line| line.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_job_file_runs_end_to_end_with_env_and_workdir() {
    let sb = Sandbox::new();
    let job = training_project(&sb, 5);
    let out = run_config(&sb, &job, &[]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let work = std::fs::canonicalize(sb.path("project/work")).unwrap();
    // Every attempt ran in the workdir, with [env], its batch read from the workdir's file.
    assert_eq!(printed(&out, "cwd"), vec![work.display().to_string(); 3]);
    assert_eq!(
        printed(&out, "JOB_GREETING"),
        vec!["hello from the job file"; 3]
    );
    assert_eq!(printed(&out, "batch"), ["8", "4", "2"]);
    let summary = sb.summary();
    assert_eq!(util::causes(&summary), ["device_oom", "device_oom", "ok"]);
    assert_eq!(summary["job"], "e2e", "the file's name names the job");
    assert_eq!(
        std::fs::read_to_string(work.join("train.json")).unwrap(),
        "{\"batch_size\": 8}\n",
        "the knob file comes back"
    );
    if is_root() {
        assert_eq!(stderr.matches(ROOT_WARNING).count(), 1, "{stderr}");
        assert_eq!(printed(&out, "uid"), ["0"; 3]);
    }
}

#[test]
fn command_line_flags_beat_the_run_table_and_a_command_after_dashes_replaces_the_files() {
    // [run] max_attempts = 2: attempts at 8 and 4, both out of memory, and the run gives up.
    let sb = Sandbox::new();
    let job = training_project(&sb, 2);
    let out = run_config(&sb, &job, &[]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert_eq!(printed(&out, "batch"), ["8", "4"]);
    assert_eq!(sb.summary()["outcome"], "gave_up");

    // --max-attempts 3 on the command line beats it: the third attempt, at 2, fits.
    let sb = Sandbox::new();
    let job = training_project(&sb, 2);
    let out = run_config(&sb, &job, &["--max-attempts", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(printed(&out, "batch"), ["8", "4", "2"]);
    assert_eq!(util::causes(&sb.summary()).len(), 3);

    // A command after `--` replaces the file's; the rest of the file still applies.
    let sb = Sandbox::new();
    let job = training_project(&sb, 2);
    let out = run_config(
        &sb,
        &job,
        &[
            "--",
            PYTHON,
            "-c",
            "import os; print('replaced in', os.getcwd(), os.environ['JOB_GREETING'])",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let work = std::fs::canonicalize(sb.path("project/work")).unwrap();
    assert_eq!(
        stdout_of(&out).trim(),
        format!("replaced in {} hello from the job file", work.display())
    );
}

#[test]
fn every_bad_job_file_input_is_one_line_naming_file_line_and_key_and_starts_nothing() {
    // (the file, with {cmd} for a valid command line, the message's line, words it must hold)
    let rows: &[(&str, usize, &str)] = &[
        ("{cmd}[run]\nmax_attempt = 3\n", 3, "[run] unknown key \"max_attempt\"; did you mean \"max_attempts\"?"),
        ("{cmd}[run]\nmax-attempts = 3\n", 3, "did you mean \"max_attempts\" (_ for -)?"),
        ("{cmd}[run]\nmax_attempts = 0\n", 3, "[run] max_attempts = 0: invalid value '0' for '--max-attempts <N>'"),
        ("{cmd}[run]\nmemory_max = \"lots\"\n", 3, "[run] memory_max = \"lots\": invalid value 'lots' for '--memory-max <SIZE>'"),
        ("{cmd}[run]\nbackoff = 30\n", 3, "[run] backoff = 30: invalid value '30' for '--backoff <DURATION>'"),
        ("{cmd}[run]\nstrategy = \"double\"\n", 3, "[run] strategy = \"double\""),
        ("{cmd}[run]\nno_pty = \"yes\"\n", 3, "[run] no_pty: is a switch, not a string; write no_pty = true"),
        ("{cmd}[run]\nmax_attempts = [3]\n", 3, "[run] max_attempts: takes one value, not a list"),
        ("{cmd}[run]\nmemory_max = \"1G\"\nno_cgroup = true\n", 2, "[run]: the argument '--memory-max <SIZE>' cannot be used with '--no-cgroup'"),
        ("{cmd}[run]\nconfig = \"other.toml\"\n", 3, "[run] cannot set config"),
        ("{cmd}max_attempts = 3\n", 2, "unknown top-level key \"max_attempts\"; max_attempts is an option of oomguard run: put it in the [run] table"),
        ("command = \"/usr/bin/touch started\"\n", 1, "command must be a list of strings, not a string"),
        ("command = [\"/usr/bin/touch\", 3]\n", 1, "command holds an integer, not a string"),
        ("command = []\n", 1, "command = [] runs nothing"),
        ("{cmd}[env]\nJOB_FITS = 2\n", 3, "[env] JOB_FITS must be a string, not an integer"),
        ("{cmd}workdir = \"missing\"\n", 2, "workdir \"missing\""),
        ("{cmd}user = \"no-such-user-here\"\n", 2, "user \"no-such-user-here\" does not exist on this machine"),
        ("{cmd}group = \"nogroup\"\n", 2, "group without user"),
        ("{cmd}name = \"a/b\"\n", 2, "name \"a/b\" is not usable as a job name"),
    ];
    for (text, line, words) in rows {
        let sb = Sandbox::new();
        let marker = sb.path("started");
        let cmd = format!("command = [\"/usr/bin/touch\", \"{}\"]\n", marker.display());
        let job = sb.path("job.toml");
        std::fs::write(&job, text.replace("{cmd}", &cmd)).unwrap();
        let run_dir = sb.run_dir();
        let out = run_config(&sb, &job, &["--run-dir", run_dir.to_str().unwrap()]);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{text:?}: {stderr}");
        let head = format!("oomguard: error: {}:{line}: ", job.display());
        assert!(
            stderr.starts_with(&head),
            "{text:?}: wanted {head:?}: {stderr}"
        );
        assert!(
            stderr.contains(words),
            "{text:?}: wanted {words:?}: {stderr}"
        );
        assert!(!marker.exists(), "{text:?}: the job started");
        assert!(!run_dir.exists(), "{text:?}: the run directory was made");
    }

    // The command line and [run] parse alone but not together: the file is named.
    for (text, flags, words) in [
        (
            "[run]\nmemory_max = \"1G\"\n",
            &["--no-cgroup"][..],
            "cannot be used with",
        ),
        ("[run]\nswap_max = \"1G\"\n", &[][..], "--memory-max <SIZE>"),
    ] {
        let sb = Sandbox::new();
        let marker = sb.path("started");
        let job = sb.path("job.toml");
        std::fs::write(
            &job,
            format!(
                "command = [\"/usr/bin/touch\", \"{}\"]\n{text}",
                marker.display()
            ),
        )
        .unwrap();
        let out = run_config(&sb, &job, flags);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{text:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "oomguard: error: {}: with the [run] table",
                job.display()
            )),
            "{text:?}: {stderr}"
        );
        assert!(stderr.contains(words), "{text:?}: {stderr}");
        assert!(!marker.exists(), "{text:?}: the job started");
    }
}

#[test]
fn user_nobody_runs_the_job_as_nobody_while_oomguard_stays_root() {
    if !is_root() {
        eprintln!("SKIPPED user_nobody_runs_the_job_as_nobody_while_oomguard_stays_root: not root");
        return;
    }
    let nobody = nix::unistd::User::from_name("nobody")
        .expect("the passwd database reads")
        .expect("user nobody exists");
    let (sb, job) = project(&format!(
        "{}user = \"nobody\"\nworkdir = \"work\"\n",
        command_line()
    ));
    // nobody must be able to reach its workdir (the sandbox is root's, 0700).
    std::fs::set_permissions(sb.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let run_dir = sb.run_dir();
    let out = run_config(&sb, &job, &["--run-dir", run_dir.to_str().unwrap()]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let uid = nobody.uid.to_string();
    let gid = nobody.gid.to_string();
    assert_eq!(printed(&out, "uid"), [uid.as_str()]);
    assert_eq!(printed(&out, "euid"), [uid.as_str()]);
    assert_eq!(printed(&out, "gid"), [gid.as_str()]);
    let groups = printed(&out, "groups");
    assert!(
        !groups[0].split(',').any(|g| g == "0"),
        "root's groups were kept: {groups:?}"
    );
    // oomguard, the job's parent, is still root.
    assert_eq!(printed(&out, "parent_euid"), ["0"]);
    assert_eq!(printed(&out, "HOME"), [nobody.dir.display().to_string()]);
    assert_eq!(printed(&out, "USER"), ["nobody"]);
    assert_eq!(printed(&out, "LOGNAME"), ["nobody"]);
    assert!(!stderr.contains(ROOT_WARNING), "{stderr}");
    // oomguard wrote its run directory as root.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(run_dir.join("summary.json"))
            .unwrap()
            .uid(),
        0
    );
}

#[test]
fn a_job_file_another_user_could_write_is_refused() {
    if !is_root() {
        eprintln!(
            "SKIPPED a_job_file_another_user_could_write_is_refused: not root (chown needs it)"
        );
        return;
    }
    // (what is done to the file and its directory, whether `user = "nobody"`, the refusal's
    // words, or None where it runs)
    type Setup = fn(&Path, &Path);
    let rows: &[(&str, Setup, bool, Option<&str>)] = &[
        ("root's, 0644", |_, _| {}, false, None),
        (
            "owned by nobody",
            |file, _| std::os::unix::fs::chown(file, Some(65534), None).unwrap(),
            false,
            Some("it is owned by uid 65534"),
        ),
        (
            "group-writable",
            |file, _| {
                std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o664)).unwrap()
            },
            false,
            Some("it is group-writable (mode 664)"),
        ),
        (
            "in a group-writable directory",
            |_, dir| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o775)).unwrap(),
            false,
            Some("this directory above it is group-writable"),
        ),
        (
            "in a directory owned by nobody",
            |_, dir| std::os::unix::fs::chown(dir, Some(65534), None).unwrap(),
            false,
            Some("this directory above it is owned by uid 65534"),
        ),
        (
            "in a sticky world-writable directory, like /tmp",
            |_, dir| {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap()
            },
            false,
            None,
        ),
        (
            "owned by its user",
            |file, _| std::os::unix::fs::chown(file, Some(65534), None).unwrap(),
            true,
            None,
        ),
    ];
    for (what, setup, as_nobody, refusal) in rows {
        let sb = Sandbox::new();
        std::fs::set_permissions(sb.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = sb.path("jobs");
        std::fs::create_dir(&dir).unwrap();
        let job = dir.join("job.toml");
        let user = if *as_nobody {
            "user = \"nobody\"\n"
        } else {
            ""
        };
        std::fs::write(&job, format!("{}{user}", command_line())).unwrap();
        setup(&job, &dir);
        let run_dir = sb.run_dir();
        let out = run_config(&sb, &job, &["--run-dir", run_dir.to_str().unwrap()]);
        let stderr = stderr_of(&out);
        match refusal {
            None => {
                assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
                assert_eq!(printed(&out, "cwd"), ["/"], "{what}");
            }
            Some(words) => {
                assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
                assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
                assert!(stderr.contains(words), "{what}: wanted {words:?}: {stderr}");
                let named = if words.starts_with("it ") { &job } else { &dir };
                assert!(
                    stderr.starts_with(&format!(
                        "oomguard: error: {}: refusing the job file",
                        named.display()
                    )),
                    "{what}: {stderr}"
                );
                assert!(stdout_of(&out).is_empty(), "{what}: the job started");
                assert!(!run_dir.exists(), "{what}: the run directory was made");
            }
        }
    }
}
