//! Root acts only for its principal: each reproduction of README's "Security model" run for
//! real. oomguard runs as root (as the system unit does); `nobody` is the attacker, acting
//! through files it owns and, where the attack needs it, a process of its own (a real
//! unprivileged process, started with its uid and gid). Root's own files live in
//! `<T>/rootonly`, mode 0700. Without root these tests cannot make the files or switch users:
//! they say SKIPPED (CI runs them as root).

use crate::attacker::*;
use crate::util;

use std::os::unix::fs::{symlink, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use util::{bin, stderr_of, wait_until};

/// 1. A job file its `user` owns: the hooks run as that user, with its HOME and no descriptor
///    of oomguard's.
#[test]
fn hooks_run_as_the_jobs_user_with_its_home_and_no_oomguard_descriptors() {
    let Some(w) =
        World::new("hooks_run_as_the_jobs_user_with_its_home_and_no_oomguard_descriptors")
    else {
        return;
    };
    let dir = w.path("nobody");
    let out_file = dir.join("hook-id");
    // Every descriptor the hook has (the one listing them is closed by the time it is looked
    // at).
    let check = w.nobody_file(
        &dir.join("check.py"),
        &format!(
            "import os\nfds = [fd for fd in os.listdir('/proc/self/fd') if os.path.exists('/proc/self/fd/' + fd)]\nopen({:?}, 'w').write('%d\\n%s %s\\n%s\\n' % (os.getuid(), os.environ['HOME'], os.environ['USER'], ' '.join(sorted(fds))))\n",
            out_file.to_str().unwrap()
        ),
    );
    let hook = format!("python3 {}", check.display());
    let job = w.nobody_file(
        &dir.join("job.toml"),
        &format!("user = \"nobody\"\ncommand = [\"true\"]\n[run]\non_exit = [{hook:?}]\n"),
    );
    let run_dir = w.path("run1");
    let out = w.run(&[
        "--config",
        job.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let seen = read(&out_file);
    let mut lines = seen.lines();
    assert_eq!(lines.next(), Some("65534"), "the hook ran as root: {seen}");
    let home = nix::unistd::User::from_uid(NOBODY.into())
        .unwrap()
        .unwrap()
        .dir;
    assert_eq!(
        lines.next(),
        Some(format!("{} nobody", home.display()).as_str())
    );
    assert_eq!(
        lines.next(),
        Some("0 1 2"),
        "the hook inherited more: {seen}"
    );
}

/// 2. A job file its user could write may give the job only one of the user's groups.
#[test]
fn a_group_the_user_lacks_is_refused_in_a_file_the_user_could_write() {
    let Some(w) = World::new("a_group_the_user_lacks_is_refused_in_a_file_the_user_could_write")
    else {
        return;
    };
    let dir = w.path("nobody");
    for group in ["shadow", "root"] {
        let marker = dir.join(format!("ran-{group}"));
        let job = w.nobody_file(
            &dir.join("job.toml"),
            &format!(
                "user = \"nobody\"\ngroup = \"{group}\"\ncommand = {}\n",
                toml_list(&["sh", "-c", &format!("id > {}", marker.display())])
            ),
        );
        let out = w.run(&["--config", job.to_str().unwrap()]);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{group}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "group \"{group}\" is not one of user \"nobody\"'s groups"
            )),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!marker.exists(), "{group}: the job ran");
    }
    // Root alone wrote this one: root may name any group.
    let marker = w.path("nobody/ran-root-file");
    let job = w.root_job(
        "rootjobs2",
        &format!(
            "user = \"nobody\"\ngroup = \"shadow\"\ncommand = {}\n",
            toml_list(&["sh", "-c", &format!("id -g > {}", marker.display())])
        ),
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(read(&marker).trim(), "42");
}

/// 3. A job file nobody wrote cannot make root write into root's directories: its
///    metrics_textfile, run_dir and state_dir are used as nobody (refused), and a knob file
///    that is nobody's symlink to root's file is read as nobody (refused).
#[test]
fn paths_in_a_users_job_file_are_used_as_that_user() {
    let Some(w) = World::new("paths_in_a_users_job_file_are_used_as_that_user") else {
        return;
    };
    let dir = w.path("nobody");
    let secret = w.root_file("secret.yaml", "training:\n  batch_size: 64\n");
    let secret_before = std::fs::metadata(&secret).unwrap();
    symlink(&secret, dir.join("cfg.yaml")).unwrap();
    give_to_nobody(&dir.join("cfg.yaml"));
    let ro = w.root_only();
    let cases = [
        (
            format!("metrics_textfile = \"{}\"", ro.join("owned.prom").display()),
            "owned.prom",
            "--metrics-textfile",
        ),
        (
            format!("run_dir = \"{}\"", ro.join("run").display()),
            "run",
            "run directory",
        ),
    ];
    for (line, made, words) in cases {
        let job = w.nobody_file(
            &dir.join("job.toml"),
            &format!("user = \"nobody\"\ncommand = [\"true\"]\n[run]\n{line}\n"),
        );
        let out = w.run(&["--config", job.to_str().unwrap()]);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{line}: {stderr}");
        assert!(stderr.contains(words), "{line}: {stderr}");
        assert!(!ro.join(made).exists(), "{line}: root made it");
    }
    // state_dir: the job memory cannot be kept there (a warning), and nothing appears.
    let job = w.nobody_file(
        &dir.join("job.toml"),
        &format!(
            "user = \"nobody\"\ncommand = [\"true\"]\n[run]\nstate_dir = \"{}\"\nrun_dir = \"{}\"\n",
            ro.join("state").display(),
            dir.join("run3").display()
        ),
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(!ro.join("state").exists(), "root made the state dir");
    // The run directory nobody chose is nobody's.
    let summary = std::fs::metadata(dir.join("run3/summary.json")).unwrap();
    assert_eq!(summary.uid(), NOBODY);
    // A knob file through nobody's symlink into root's directory.
    std::fs::write(dir.join("oom.py"), OOM_ONCE).unwrap();
    let job = w.nobody_file(
        &dir.join("job.toml"),
        "user = \"nobody\"\ncommand = [\"python3\", \"oom.py\"]\n[[knob]]\nname = \"batch\"\nfile = \"cfg.yaml\"\nkey = \"training.batch_size\"\n",
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cfg.yaml"), "{stderr}");
    assert_eq!(read(&secret), "training:\n  batch_size: 64\n");
    let after = std::fs::metadata(&secret).unwrap();
    assert_eq!(
        (after.mtime(), after.mtime_nsec(), after.ino()),
        (
            secret_before.mtime(),
            secret_before.mtime_nsec(),
            secret_before.ino()
        ),
        "root's file was rewritten"
    );
}

/// 4. A root-owned job file for `user = "nobody"`: its hook runs as nobody, so nobody's
///    `json.py` in the workdir runs with nobody's rights, not root's.
#[test]
fn a_hook_in_the_users_workdir_never_runs_their_code_as_root() {
    let Some(w) = World::new("a_hook_in_the_users_workdir_never_runs_their_code_as_root") else {
        return;
    };
    let work = w.path("nobody");
    let mark = work.join("imported-as");
    w.nobody_file(
        &work.join("json.py"),
        &format!(
            "import os\nopen({:?}, 'w').write(str(os.getuid()))\n",
            mark.to_str().unwrap()
        ),
    );
    let job = w.root_job(
        "rootjobs4",
        &format!(
            "user = \"nobody\"\nworkdir = \"{}\"\ncommand = [\"true\"]\n[run]\non_exit = [\"python3 -c 'import json'\"]\nrun_dir = \"{}\"\n",
            work.display(),
            w.path("run4").display()
        ),
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(read(&mark), "65534", "nobody's module ran as root");
}

/// 5. The job file is opened once: nobody swapping `job.toml` between a link to its own file
///    (`user = "root"`) and a link to root's legitimate one (`user = "nobody"`) while root runs
///    it 400 times never gets its own file run as root.
#[test]
fn a_job_file_swapped_under_the_check_never_runs_as_root() {
    let Some(w) = World::new("a_job_file_swapped_under_the_check_never_runs_as_root") else {
        return;
    };
    let dir = w.nobody_dir("sec5");
    let pwned = dir.join("pwned-uid");
    let evil = w.nobody_file(
        &dir.join("evil.toml"),
        &format!(
            "user = \"root\"\ncommand = {}\n",
            toml_list(&["sh", "-c", &format!("id -u > {}", pwned.display())])
        ),
    );
    let legit = w.root_job(
        "rootjobs5",
        "user = \"nobody\"\ncommand = [\"true\"]\n[run]\nmax_attempts = 1\n",
    );
    let job = dir.join("job.toml");
    symlink(&legit, &job).unwrap();
    give_to_nobody(&job);
    let stop = dir.join("stop");
    let swapper = format!(
        "import os\nd, evil, legit, stop = {:?}, {:?}, {:?}, {:?}\nwhile not os.path.exists(stop):\n    for target in (evil, legit):\n        os.symlink(target, d + '/tmp.toml')\n        os.rename(d + '/tmp.toml', d + '/job.toml')\n",
        dir.to_str().unwrap(),
        evil.to_str().unwrap(),
        legit.to_str().unwrap(),
        stop.to_str().unwrap()
    );
    let mut attacker = as_nobody("python3", &["-c", &swapper])
        .spawn()
        .expect("the attacker starts");
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..400 {
        let out = w.run(&[
            "--config",
            job.to_str().unwrap(),
            "--run-dir",
            w.path("run5").to_str().unwrap(),
            "--max-attempts",
            "1",
        ]);
        let _ = std::fs::remove_dir_all(w.path("run5"));
        match out.status.code() {
            Some(0) => accepted += 1,
            _ => refused += 1,
        }
        assert!(
            !pwned.exists(),
            "nobody's job file ran: uid {}",
            read(&pwned)
        );
    }
    std::fs::write(&stop, "").unwrap();
    let _ = attacker.wait();
    // Both files were really met: root's ran as nobody, nobody's was refused.
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}

/// 6. A root-owned job file for nobody, with nobody's workdir: knob files are read, edited,
///    copied and their `__pycache__` cleaned as nobody, so nobody's symlinks into root's
///    directory lead nowhere.
#[test]
fn knob_files_never_follow_the_users_symlinks_into_roots_files() {
    let Some(w) = World::new("knob_files_never_follow_the_users_symlinks_into_roots_files") else {
        return;
    };
    let work = w.path("nobody");
    w.nobody_file(&work.join("oom.py"), OOM_ONCE);
    let job_file = |knob: &str, command: &[&str]| {
        w.root_job(
            "rootjobs6",
            &format!(
                "user = \"nobody\"\nworkdir = \"{}\"\ncommand = {}\n[run]\nrun_dir = \"{}\"\n[[knob]]\nname = \"batch\"\n{knob}\n",
                work.display(),
                toml_list(command),
                w.path("run6").display()
            ),
        )
    };
    // (a) in place, through a link to root's file.
    let secret = w.root_file("secret.yaml", "training:\n  batch_size: 64\n");
    symlink(&secret, work.join("cfg.yaml")).unwrap();
    give_to_nobody(&work.join("cfg.yaml"));
    let job = job_file(
        "file = \"cfg.yaml\"\nkey = \"training.batch_size\"",
        &["python3", "oom.py"],
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert_eq!(read(&secret), "training:\n  batch_size: 64\n");
    // (b) a copy of a file nobody cannot read (0644 under root's 0700 directory).
    let public = w.root_only().join("pub.yaml");
    std::fs::write(&public, "batch: 8\nsecret: hunter2\n").unwrap();
    chmod(&public, 0o644);
    symlink(&public, work.join("leak.yaml")).unwrap();
    give_to_nobody(&work.join("leak.yaml"));
    let job = job_file(
        "file = \"leak.yaml\"\nkey = \"batch\"",
        &["sh", "-c", "cat \"$1\"", "sh", "leak.yaml"],
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("hunter2"));
    let copies: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".oomguard-"))
        .collect();
    assert!(copies.is_empty(), "a copy was written: {copies:?}");
    // (c) a Python config whose __pycache__ is a link to root's directory.
    w.nobody_file(&work.join("config.py"), "BATCH = 8\n");
    let pyc = w.root_only().join("pyc");
    std::fs::create_dir(&pyc).unwrap();
    let names = [
        "config.cpython-39.pyc",
        "config.cpython-311.pyc",
        "config.cpython-312.pyc",
    ];
    for name in names {
        std::fs::write(pyc.join(name), "root's").unwrap();
    }
    symlink(&pyc, work.join("__pycache__")).unwrap();
    give_to_nobody(&work.join("__pycache__"));
    std::fs::remove_file(work.join("oomed")).ok();
    let job = job_file(
        "file = \"config.py\"\nkey = \"BATCH\"",
        &["python3", "oom.py"],
    );
    let _ = std::fs::remove_dir_all(w.path("run6"));
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    for name in names {
        assert!(pyc.join(name).exists(), "root's {name} was deleted");
    }
    assert_eq!(read(&work.join("config.py")), "BATCH = 8\n");
}

/// 7a. The metrics textfile in a directory nobody can write: on root's own command line it is
///     refused (nobody could plant a link there); for a job run as nobody it is written as
///     nobody, its temporary file always new, so nobody's links planted at its names are never
///     written through.
#[test]
fn the_metrics_textfile_never_writes_through_a_planted_link() {
    let Some(w) = World::new("the_metrics_textfile_never_writes_through_a_planted_link") else {
        return;
    };
    let promdir = w.nobody_dir("promdir");
    let victim = w.root_file("victim2", "root's victim2\n");
    let prom = promdir.join("x.prom");
    let out = w.run(&["--metrics-textfile", prom.to_str().unwrap(), "--", "true"]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("could redirect what oomguard writes there as root"),
        "{stderr}"
    );
    assert!(!prom.exists());
    // The same directory for a job of nobody's: used as nobody.
    let hold = promdir.join("hold");
    nix::unistd::mkfifo(&hold, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let job = w.root_job(
        "rootjobs7",
        &format!(
            "user = \"nobody\"\ncommand = {}\n",
            toml_list(&["sh", "-c", &format!("read line < {}", hold.display())])
        ),
    );
    let mut run = w
        .oomguard(&[
            "--config",
            job.to_str().unwrap(),
            "--metrics-textfile",
            prom.to_str().unwrap(),
            "--interval",
            "100ms",
            "--run-dir",
            w.path("run7").to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || prom.exists()));
    assert_eq!(std::fs::metadata(&prom).unwrap().uid(), NOBODY);
    // The names oomguard's temporary file may take: as this build names it, and as builds
    // before it did.
    let pid = run.id();
    let mut names = vec![format!(".x.prom.{pid}.tmp")];
    names.extend((0..5).map(|n| format!(".x.prom.{pid}.{n}.tmp")));
    for name in &names {
        let link = promdir.join(name);
        let args = ["-s", victim.to_str().unwrap(), link.to_str().unwrap()];
        assert!(as_nobody("ln", &args).status().unwrap().success());
    }
    let planted = std::fs::metadata(&prom).unwrap().ino();
    assert!(
        wait_until(Duration::from_secs(20), || {
            std::fs::metadata(&prom).is_ok_and(|m| m.ino() != planted)
        }),
        "the textfile was not replaced after the links were planted"
    );
    util::release_fifo(&hold);
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        read(&victim),
        "root's victim2\n",
        "root wrote through nobody's link"
    );
    assert!(read(&prom).contains("oomguard"));
}

/// 7b. A run directory nobody can write: on root's own command line it is refused, whatever
///     nobody planted there (here `hooks.log`, a link to root's file); for a job of nobody's it
///     is used as nobody, and a `hooks.log` already there makes it refused like a summary.json.
#[test]
fn a_run_directory_with_a_planted_hooks_log_is_refused() {
    let Some(w) = World::new("a_run_directory_with_a_planted_hooks_log_is_refused") else {
        return;
    };
    let nrun = w.nobody_dir("nrun");
    let victim = w.root_file("victim3", "root's victim3\n");
    let log = nrun.join("hooks.log");
    let args = ["-s", victim.to_str().unwrap(), log.to_str().unwrap()];
    assert!(as_nobody("ln", &args).status().unwrap().success());
    let marker = w.path("nobody/ran");
    let touch = format!("touch {}", marker.display());
    let hook = ["--on-exit", "echo appended-by-hook"];
    let mut args = vec!["--run-dir", nrun.to_str().unwrap()];
    args.extend_from_slice(&hook);
    args.extend_from_slice(&["--", "sh", "-c", &touch]);
    let out = w.run(&args);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("could redirect what oomguard writes there as root"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the job started");
    // For nobody's job, the directory is nobody's: the planted log refuses it.
    let job = w.root_job(
        "rootjobs7b",
        &format!(
            "user = \"nobody\"\ncommand = {}\n",
            toml_list(&["sh", "-c", &touch])
        ),
    );
    let mut args = vec![
        "--config",
        job.to_str().unwrap(),
        "--run-dir",
        nrun.to_str().unwrap(),
    ];
    args.extend_from_slice(&hook);
    let out = w.run(&args);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already holds hooks.log"), "{stderr}");
    assert!(!marker.exists(), "the job started");
    assert_eq!(read(&victim), "root's victim3\n");
}

/// 7c. A run directory root would make below a directory nobody can write (a link nobody could
///     plant there beforehand, `oomguard-runs -> /etc/logrotate.d`, would have root write the
///     job's output into root's directory) is refused before anything starts; so is a state
///     directory there.
#[test]
fn a_place_below_a_directory_another_user_can_write_is_refused() {
    let Some(w) = World::new("a_place_below_a_directory_another_user_can_write_is_refused") else {
        return;
    };
    let parent = w.nobody_dir("nparent");
    let link = parent.join("oomguard-runs");
    let root_only = w.root_only();
    let args = ["-s", root_only.to_str().unwrap(), link.to_str().unwrap()];
    assert!(as_nobody("ln", &args).status().unwrap().success());
    let marker = w.path("attempted");
    let touch = format!("touch {}", marker.display());
    for flag in ["--run-dir", "--state-dir"] {
        let place = link.join("run");
        let out = w.run(&[flag, place.to_str().unwrap(), "--", "sh", "-c", &touch]);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains(&parent.display().to_string()), "{stderr}");
        assert!(stderr.contains("is owned by uid 65534"), "{stderr}");
        assert!(!marker.exists(), "{flag}: the job started");
    }
    let in_root: Vec<_> = std::fs::read_dir(w.root_only())
        .unwrap()
        .flatten()
        .collect();
    assert!(
        in_root.is_empty(),
        "root wrote into its own directory: {in_root:?}"
    );
}

/// Without root, a job file naming another user is refused as before; the wording for a file
/// another user owns with `user = "root"` names root alone.
#[test]
fn a_users_file_naming_root_is_refused_in_words_that_name_root_alone() {
    let Some(w) = World::new("a_users_file_naming_root_is_refused_in_words_that_name_root_alone")
    else {
        return;
    };
    let job = w.nobody_file(
        &w.path("nobody/job.toml"),
        "user = \"root\"\ncommand = [\"true\"]\n",
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("a user other than root could choose what runs"),
        "{stderr}"
    );
    assert!(!stderr.contains("root or root"), "{stderr}");
}

/// `oomguard doctor --config` says whom the hooks and file edits run as.
#[test]
fn doctor_says_whom_a_job_files_hooks_and_edits_run_as() {
    let Some(w) = World::new("doctor_says_whom_a_job_files_hooks_and_edits_run_as") else {
        return;
    };
    let job = w.nobody_file(
        &w.path("nobody/job.toml"),
        "user = \"nobody\"\ncommand = [\"true\"]\n",
    );
    let out = Command::new(bin())
        .args(["doctor", "--config", job.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("hooks, knob files, __pycache__ and checkpoints run as nobody (uid 65534"),
        "{stdout}"
    );
    assert!(stdout.contains("nobody can write the job file"), "{stdout}");
}

/// A workdir the job's user cannot reach is not entered for them by root (the job would inherit
/// it as its working directory).
#[test]
fn a_workdir_the_user_cannot_reach_is_refused() {
    let Some(w) = World::new("a_workdir_the_user_cannot_reach_is_refused") else {
        return;
    };
    let hidden = w.root_only().join("project");
    std::fs::create_dir(&hidden).unwrap();
    chmod(&hidden, 0o777);
    let job = w.root_job(
        "rootjobs8",
        &format!(
            "user = \"nobody\"\nworkdir = \"{}\"\ncommand = [\"sh\", \"-c\", \"ls > listing\"]\n",
            hidden.display()
        ),
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot enter the job file's workdir"),
        "{stderr}"
    );
    assert!(
        !hidden.join("listing").exists(),
        "the job ran in root's directory"
    );
}

/// A job name chosen in a job file its user could write is that user's: nobody naming another's
/// job (`name = "bobs-job"`) keeps its memory apart in root's state directory, and bob's stays
/// as it was.
#[test]
fn a_job_name_in_a_users_file_never_reaches_another_users_job_memory() {
    let Some(w) = World::new("a_job_name_in_a_users_file_never_reaches_another_users_job_memory")
    else {
        return;
    };
    let jobs = w.path("rootstate/oomguard/jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let bobs = jobs.join("bobs-job.json");
    std::fs::write(&bobs, "{}\n").unwrap();
    let job = w.nobody_file(
        &w.path("nobody/job.toml"),
        "name = \"bobs-job\"\nuser = \"nobody\"\ncommand = [\"true\"]\n",
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(read(&bobs), "{}\n", "bob's job memory was touched");
    assert!(jobs.join("65534-nobody.bobs-job.json").exists());
}

/// Second round, 0. A job and a hook run as another user cannot type into the terminal of the
/// root who started oomguard: each starts in a session of its own, with no controlling terminal. The attacker is nobody's
/// job and hook, each opening `/dev/tty` and pushing a command with TIOCSTI; the terminal is
/// a real pseudo-terminal, root's oomguard's controlling one, and what reached its input is read
/// back: nothing may have. With or without a pseudo-terminal of its own, the job has no
/// controlling terminal.
#[test]
fn a_job_run_as_another_user_cannot_type_into_roots_terminal() {
    let Some(w) = World::new("a_job_run_as_another_user_cannot_type_into_roots_terminal") else {
        return;
    };
    let dir = w.path("nobody");
    let typer = w.nobody_file(
        &dir.join("typer.py"),
        "import fcntl, os, sys, termios\n\
         out = []\n\
         try:\n    fd = os.open('/dev/tty', os.O_RDWR)\n    out.append('tty open')\n\
         \x20   try:\n        for ch in b'echo typed-by-the-job\\n':\n            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))\n        out.append('tiocsti done')\n\
         \x20   except OSError as e:\n        out.append('tiocsti refused %d' % e.errno)\n\
         except OSError as e:\n    out.append('tty none %d' % e.errno)\n\
         open(sys.argv[1], 'w').write('\\n'.join(out) + '\\n')\n",
    );
    for (case, stdout_on_terminal) in [("pipes", false), ("pty", true)] {
        let said = |who: &str| dir.join(format!("{case}-{who}"));
        let hook = format!("python3 {} {}", typer.display(), said("hook").display());
        let job = w.nobody_file(
            &dir.join(format!("{case}.toml")),
            &format!(
                "user = \"nobody\"\ncommand = {}\n[run]\non_exit = [{hook:?}]\n",
                toml_list(&[
                    "python3",
                    typer.to_str().unwrap(),
                    said("job").to_str().unwrap()
                ])
            ),
        );
        let (terminal, slave) = util::test_pty(24, 80);
        let mut cmd = w.oomguard(&["--config", job.to_str().unwrap()]);
        cmd.stdin(slave.try_clone().unwrap());
        if stdout_on_terminal {
            cmd.stdout(slave.try_clone().unwrap());
        }
        // SAFETY: two system calls between fork and exec. oomguard leads a session whose
        // controlling terminal is the test's, as a shell's command would.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        assert!(
            wait_until(Duration::from_secs(60), || child
                .try_wait()
                .unwrap()
                .is_some()),
            "{case}: oomguard still runs"
        );
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{case}: {}", stderr_of(&out));
        // Neither the job (with pipes or a pseudo-terminal) nor the hook has a controlling
        // terminal at all.
        let job_saw = read(&said("job"));
        let hook_saw = read(&said("hook"));
        assert!(
            hook_saw.starts_with("tty none"),
            "{case}: the hook reached a terminal: {hook_saw}"
        );
        assert!(
            job_saw.starts_with("tty none"),
            "{case}: the job reached a terminal: {job_saw}"
        );
        // Root's terminal's input: a line typed into it would be readable now.
        nix::fcntl::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&slave),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .unwrap();
        let mut typed = [0u8; 256];
        let got = nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&slave), &mut typed);
        assert_eq!(
            got,
            Err(nix::errno::Errno::EAGAIN),
            "{case}: the job typed into root's terminal: {:?} (job: {job_saw}, hook: {hook_saw})",
            got.map(|n| String::from_utf8_lossy(&typed[..n]).into_owned())
        );
        drop(terminal);
    }
}

/// Second round, 8. Root's environment is not lent: a job and its hooks run as another user
/// start from a clean environment (that user's HOME, USER and LOGNAME, root's PATH, LANG, LC_*,
/// TERM and TZ, and the job file's `[env]`), and neither gets the service manager's variables.
#[test]
fn a_job_and_its_hooks_run_as_another_user_get_none_of_roots_environment() {
    let Some(w) =
        World::new("a_job_and_its_hooks_run_as_another_user_get_none_of_roots_environment")
    else {
        return;
    };
    let dir = w.path("nobody");
    let dump = w.nobody_file(
        &dir.join("dump.py"),
        "import os, sys\nopen(sys.argv[1], 'w').write(''.join('%s=%s\\n' % kv for kv in sorted(os.environ.items())))\n",
    );
    let said = |who: &str| dir.join(format!("env-{who}"));
    let hook = format!("python3 {} {}", dump.display(), said("hook").display());
    let job = w.nobody_file(
        &dir.join("job.toml"),
        &format!(
            "user = \"nobody\"\ncommand = {}\n[env]\nJOBS_OWN = \"from the job file\"\n[run]\non_exit = [{hook:?}]\n",
            toml_list(&["python3", dump.to_str().unwrap(), said("job").to_str().unwrap()])
        ),
    );
    let out = w
        .oomguard(&["--config", job.to_str().unwrap()])
        .env("SECRET_ROOT_TOKEN", "root's secret")
        .env("NOTIFY_SOCKET", w.path("no-such-socket"))
        .env("WATCHDOG_USEC", "100000000")
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let home = nix::unistd::User::from_uid(NOBODY.into())
        .unwrap()
        .unwrap()
        .dir;
    for who in ["job", "hook"] {
        let env = read(&said(who));
        let has = |line: &str| env.lines().any(|l| l == line);
        let named = |name: &str| env.lines().any(|l| l.starts_with(&format!("{name}=")));
        for secret in ["SECRET_ROOT_TOKEN", "NOTIFY_SOCKET", "WATCHDOG_USEC"] {
            assert!(!named(secret), "the {who} got root's {secret}:\n{env}");
        }
        assert!(has(&format!("HOME={}", home.display())), "{who}:\n{env}");
        assert!(has("USER=nobody") && has("LOGNAME=nobody"), "{who}:\n{env}");
        assert!(has("LANG=C.UTF-8") && named("PATH"), "{who}:\n{env}");
        assert!(has("JOBS_OWN=from the job file"), "{who}:\n{env}");
    }
}

/// Second round, 5. What exists in a directory only root can read is not told to a job file's
/// user: the command and the workdir are looked up as that user, so a file that is there and
/// one that is not give the same exit code and the same words.
#[test]
fn a_job_file_cannot_probe_for_files_in_roots_directories() {
    let Some(w) = World::new("a_job_file_cannot_probe_for_files_in_roots_directories") else {
        return;
    };
    let dir = w.path("nobody");
    let there = w.root_file("there", "#!/bin/sh\nexit 0\n");
    chmod(&there, 0o755);
    std::fs::create_dir(w.root_only().join("there-dir")).unwrap();
    chmod(&w.root_only().join("there-dir"), 0o777);
    let answer = |name: &str, text: &str| {
        let job = w.nobody_file(&dir.join(format!("{name}.toml")), text);
        let out = w.run(&["--config", job.to_str().unwrap()]);
        (out.status.code(), stderr_of(&out))
    };
    let command = |path: &Path| format!("user = \"nobody\"\ncommand = [{:?}]\n", path);
    let workdir = |path: &Path| {
        format!(
            "user = \"nobody\"\nworkdir = {:?}\ncommand = [\"true\"]\n",
            path
        )
    };
    let root = w.root_only();
    let cases = [
        ("command", command(&there), command(&root.join("not-there"))),
        (
            "workdir",
            workdir(&root.join("there-dir")),
            workdir(&root.join("not-there-dir")),
        ),
    ];
    for (what, exists, missing) in cases {
        let (code_there, said_there) = answer(&format!("{what}-1"), &exists);
        let (code_missing, said_missing) = answer(&format!("{what}-2"), &missing);
        assert_ne!(
            code_there,
            Some(0),
            "{what}: root's file ran for nobody: {said_there}"
        );
        assert_eq!(
            code_there, code_missing,
            "{what}: the exit code tells:\n{said_there}\n{said_missing}"
        );
        let blank = |said: &str| {
            said.replace(&format!("{what}-2.toml"), "FILE")
                .replace(&format!("{what}-1.toml"), "FILE")
                .replace("not-there-dir", "NAME")
                .replace("there-dir", "NAME")
                .replace("not-there", "NAME")
                .replace("there", "NAME")
        };
        assert_eq!(
            blank(&said_there),
            blank(&said_missing),
            "{what}: the words tell whether root's file exists"
        );
        assert!(
            said_there.contains("nobody"),
            "{what}: the message does not name the user: {said_there}"
        );
    }
}

/// Second round, 4. A job file its user could write has root listen only where that user
/// could: a privileged port is refused (nobody alone gets EACCES), before anything starts.
#[test]
fn a_users_job_file_never_has_root_bind_a_privileged_port() {
    let Some(w) = World::new("a_users_job_file_never_has_root_bind_a_privileged_port") else {
        return;
    };
    let dir = w.path("nobody");
    let ran = dir.join("ran");
    let job = w.nobody_file(
        &dir.join("job.toml"),
        &format!(
            "user = \"nobody\"\ncommand = {}\n[run]\nmetrics_addr = \"127.0.0.1:81\"\n",
            toml_list(&["touch", ran.to_str().unwrap()])
        ),
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("port 81 is privileged"), "{stderr}");
    assert!(!ran.exists(), "the job started");
    // The port stays as it was: nobody listens there (no listener, or not oomguard's).
    assert!(
        std::net::TcpStream::connect("127.0.0.1:81").is_err(),
        "something listens on 127.0.0.1:81"
    );
}
