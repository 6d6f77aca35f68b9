//! Shared-server safety, third round (issue 41): what is new since round two, attacked as a user
//! of a shared server would attack a root-run oomguard, each finding run for real through the
//! binary. `install-units` from a binary another user could change, the probe's look at the
//! command's first line, the entrypoint readers' memory, who may read a run directory, a run
//! directory (and its `probe/`) another user made first, and the hooks' output past
//! `--log-max`. oomguard runs as root (as the system unit does) where the finding needs it;
//! `nobody` and users made here are the attackers. Without root those tests say SKIPPED.

use crate::attacker::*;
use crate::util;

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use util::{bin, stderr_of, Sandbox};

const EXIT_CANT_CREATE: i32 = 73;

/// `oomguard ARGS` as root, from `/`, its state in the world's `rootstate`; not `-q`, so its
/// warnings show.
fn as_root(w: &World, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("XDG_STATE_HOME", w.path("rootstate"))
        .env_remove("RUST_LOG")
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .expect("oomguard runs")
}

/// `oomguard ARGS` as nobody (no root anywhere), from nobody's directory, its state there.
fn as_nobody_oomguard(w: &World, args: &[&str]) -> Output {
    let home = w.path("nobody");
    as_nobody(bin().to_str().expect("a UTF-8 path"), args)
        .env("HOME", &home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env_remove("RUST_LOG")
        .current_dir(&home)
        .stdin(Stdio::null())
        .output()
        .expect("oomguard runs")
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .mode()
        & 0o7777
}

fn owner(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .uid()
}

/// The entries of `dir`, sorted.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("an entry").path())
        .collect();
    all.sort();
    all
}

/// Whether `user` (uid, gid) can run `program args` successfully: what that user can see.
fn user_can(uid: u32, gid: u32, program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .uid(uid)
        .gid(gid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the command starts")
        .success()
}

/// This oomguard's binary at `dir/oomguard` (a hard link where it can be one, else a copy), as
/// a pip or conda install would put it there.
fn binary_in(dir: &Path) -> PathBuf {
    let exe = dir.join("oomguard");
    if std::fs::hard_link(bin(), &exe).is_err() {
        std::fs::copy(bin(), &exe).expect("the binary copied");
    }
    exe
}

/// 1. `install-units` as root from a binary in a directory another user owns (their virtual
///    environment), or one a group may write (a shared conda env), refuses the system unit
///    with exit 73 and one line naming who could change which path and what to do, writing
///    nothing; the same binary's `--user` unit is its user's own business.
#[test]
fn install_units_as_root_refuses_a_binary_another_user_could_change() {
    let Some(w) = World::new("install_units_as_root_refuses_a_binary_another_user_could_change")
    else {
        return;
    };
    let venv = w.nobody_dir("nobody/venv/bin");
    let conda = w.path("conda/bin");
    std::fs::create_dir_all(&conda).unwrap();
    chmod(&conda, 0o775);
    // (binary, the directory named, what the line says of it)
    let cases = [
        (
            binary_in(&venv),
            w.path("nobody"),
            "this directory above it is owned by uid 65534, so user nobody could change",
        ),
        (
            binary_in(&conda),
            conda.clone(),
            "this directory above it is group-writable (mode 775), so the members of group root could change",
        ),
    ];
    for (exe, dir, words) in cases {
        // The first directory on the path that someone else could change is the one named.
        let units = w.path("units");
        let out = Command::new(&exe)
            .args(["install-units", "--dir", units.to_str().unwrap()])
            .env("HOME", w.path("roothome"))
            .output()
            .expect("oomguard runs");
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(EXIT_CANT_CREATE), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "refusing to install the system unit for {}",
                exe.display()
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("{}: {words}", dir.display())),
            "{stderr}"
        );
        assert!(
            stderr.contains("copy it to /usr/local/bin") && stderr.contains("the .deb"),
            "{stderr}"
        );
        assert!(!units.exists(), "something was written: {stderr}");
        assert!(out.stdout.is_empty());

        let user_units = w.path("userunits");
        let out = Command::new(&exe)
            .args([
                "install-units",
                "--user",
                "--dir",
                user_units.to_str().unwrap(),
            ])
            .env("HOME", w.path("roothome"))
            .output()
            .expect("oomguard runs");
        assert!(out.status.success(), "--user: {}", stderr_of(&out));
        std::fs::remove_dir_all(&user_units).unwrap();
    }
}

/// 2. Whether the command runs Python is read from its first line as the job's user: a script
///    nobody may run but not read (root's, 0711) whose `#!` line names Python gets no probe, so
///    root tells nobody nothing of what the file holds; the same script readable gets one.
#[test]
fn the_probe_reads_the_commands_first_line_as_the_jobs_user() {
    let Some(w) = World::new("the_probe_reads_the_commands_first_line_as_the_jobs_user") else {
        return;
    };
    let dir = w.path("xonly");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o711);
    for (name, script_mode, probed) in [("unreadable", 0o711, false), ("readable", 0o755, true)] {
        let script = dir.join(name);
        std::fs::write(&script, "#!/usr/bin/env python3\nprint('ran')\n").unwrap();
        chmod(&script, script_mode);
        let job = w.root_job(
            &format!("rootjobs-{name}"),
            &format!("user = \"nobody\"\ncommand = [{:?}]\n", script),
        );
        let run_dir = w.path(&format!("run-{name}"));
        let out = w.run(&[
            "--config",
            job.to_str().unwrap(),
            "--run-dir",
            run_dir.to_str().unwrap(),
        ]);
        let probes: Vec<PathBuf> = entries(&run_dir)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("probe")
            })
            .collect();
        assert_eq!(
            !probes.is_empty(),
            probed,
            "{name}: probe directories {probes:?}; {}",
            stderr_of(&out)
        );
    }
}

/// A Hydra app whose config's defaults list names the next level twice, 16 levels deep (each
/// level 2 KB): composed without a bound, 131,070 configs.
fn doubling_hydra_tree(dir: &Path) {
    let conf = dir.join("conf");
    let pad = format!("pad: \"{}\"\n", "x".repeat(2000));
    let entry = |level: u32| format!("  - /l{level}@a: x\n  - /l{level}@b: x\n");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        dir.join("train.py"),
        "import hydra\n\n\n@hydra.main(version_base=None, config_path=\"conf\", config_name=\"config\")\ndef main(cfg):\n    print(cfg)\n\n\nif __name__ == \"__main__\":\n    main()\n",
    )
    .unwrap();
    std::fs::write(
        conf.join("config.yaml"),
        format!("defaults:\n{}  - _self_\nbatch_size: 32\n", entry(1)),
    )
    .unwrap();
    for level in 1..=16 {
        let group = conf.join(format!("l{level}"));
        std::fs::create_dir_all(&group).unwrap();
        let defaults = match level {
            16 => String::new(),
            _ => format!("defaults:\n{}  - _self_\n", entry(level + 1)),
        };
        std::fs::write(group.join("x.yaml"), format!("{defaults}{pad}")).unwrap();
    }
}

/// The most oomguard may hold reading one command's entrypoint files here: a debug build's own
/// 20 MiB or so and a 4 MiB config read once (about 55 MiB with its parse), far below what the
/// readers held before (hundreds of MiB, growing with the tree or the count).
const READERS_MAX_RSS_BYTES: u64 = 100 << 20;

/// `oomguard ARGS` in `dir` (its state in `state`), started by a small Python parent, and the
/// kernel's high-water mark of its resident memory. Not started from here: a child of this
/// test process starts from this process's resident set (the kernel keeps the high-water mark
/// across exec), which other tests running beside it make what it will; the parent's few MiB
/// are all it starts from there.
fn peak_rss_apart(dir: &Path, state: &Path, args: &[&str]) -> (Output, u64) {
    let mark = dir.join(".peak-rss-kib");
    let parent = "import resource, subprocess, sys\nrun = subprocess.run(sys.argv[2:])\nopen(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\nsys.exit(run.returncode)\n";
    let out = Command::new("python3")
        .args(["-c", parent])
        .arg(&mark)
        .arg(bin())
        .args(args)
        .current_dir(dir)
        .env("XDG_STATE_HOME", state)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let kib: u64 = read(&mark).trim().parse().expect("ru_maxrss in KiB");
    (out, kib << 10)
}

/// 3. The entrypoint readers' memory is bounded: a Hydra tree whose levels each name the next
///    twice is given up with one line past the bound (the run goes on without a found batch),
///    and a LightningCLI command naming one 4 MiB config 30 times reads it once, finding its
///    batch as before.
#[test]
fn the_entrypoint_readers_hold_a_bounded_memory() {
    let sb = Sandbox::new();
    let hydra = sb.path("hydra");
    doubling_hydra_tree(&hydra);
    let state = sb.path("state");
    let (out, peak_rss_bytes) = peak_rss_apart(
        &hydra,
        &state,
        &["run", "--dry-run", "--", "python3", "train.py"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
    let gave_up: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("Hydra: gave up composing config"))
        .collect();
    assert_eq!(gave_up.len(), 1, "{said}");
    assert!(
        gave_up[0].contains("more than 1000 configs composed")
            && gave_up[0].contains("name it with --batch-arg"),
        "{said}"
    );
    assert!(
        peak_rss_bytes < READERS_MAX_RSS_BYTES,
        "Hydra: {} MiB",
        peak_rss_bytes >> 20
    );

    let lightning = sb.path("lightning");
    std::fs::create_dir_all(&lightning).unwrap();
    let comment = format!("# {}\n", "y".repeat(1022));
    let big = format!(
        "data:\n  batch_size: 32\ntrainer:\n  accumulate_grad_batches: 2\n{}",
        comment.repeat(4096)
    );
    std::fs::write(lightning.join("big.yaml"), big).unwrap();
    let mut args = vec!["run", "--dry-run", "--", "python3", "main.py", "fit"];
    for _ in 0..30 {
        args.extend_from_slice(&["--config", "big.yaml"]);
    }
    let (out, peak_rss_bytes) = peak_rss_apart(&lightning, &state, &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
    assert!(
        said.contains("batch: `data.batch_size` in big.yaml, 32: LightningCLI"),
        "{said}"
    );
    assert!(
        peak_rss_bytes < READERS_MAX_RSS_BYTES,
        "LightningCLI: {} MiB",
        peak_rss_bytes >> 20
    );

    // Past the number of configs: one line, and the run goes on without a found batch.
    let mut args = vec!["run", "--dry-run", "--", "python3", "main.py", "fit"];
    for _ in 0..65 {
        args.extend_from_slice(&["--config", "big.yaml"]);
    }
    let mut cmd = sb.oomguard(&args);
    cmd.current_dir(&lightning);
    let out = cmd.output().expect("oomguard runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
    assert!(
        said.contains(
            "LightningCLI: the command names 65 --config files, more than the 64 oomguard reads"
        ),
        "{said}"
    );
}

/// 4. Under root's own place (the system unit's `/var/lib/oomguard/runs`), a run directory is
///    its job's user's alone (0700, given to them) and `runs/` lists for root alone (0711):
///    another user reads neither the job's output nor the runs' names. A run directory left
///    readable by an earlier version is made private at the job's next run.
#[test]
fn run_directories_in_roots_place_are_the_jobs_users_alone() {
    let Some(w) = World::new("run_directories_in_roots_place_are_the_jobs_users_alone") else {
        return;
    };
    let other = TestUser::new("ogsr_t41a");
    let job = w.root_job(
        "rootjobs4",
        "user = \"nobody\"\ncommand = [\"sh\", \"-c\", \"echo token-of-nobody\"]\n",
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let runs = w.path("rootstate/oomguard/runs");
    let first = entries(&runs).pop().expect("the run's directory");
    let log = first.join("attempt-1.log");
    assert_eq!(mode(&runs), 0o711);
    assert_eq!((mode(&first), owner(&first)), (0o700, NOBODY));
    assert_eq!(owner(&log), NOBODY, "the user's output is the user's file");
    assert!(read(&log).contains("token-of-nobody"));
    let (runs_arg, log_arg) = (runs.to_str().unwrap(), log.to_str().unwrap());
    assert!(
        user_can(NOBODY, NOBODY, "cat", &[log_arg]),
        "nobody reads its log"
    );
    assert!(
        !user_can(other.uid, other.gid, "ls", &[runs_arg]),
        "runs/ listed"
    );
    assert!(
        !user_can(other.uid, other.gid, "cat", &[log_arg]),
        "the log read"
    );

    // As an earlier version left it: root's, 0755, in a runs/ anyone lists.
    std::os::unix::fs::lchown(&first, Some(0), Some(0)).unwrap();
    chmod(&first, 0o755);
    chmod(&runs, 0o755);
    assert!(
        user_can(other.uid, other.gid, "cat", &[log_arg]),
        "the test's own premise"
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(entries(&runs).len(), 2);
    assert_eq!(mode(&runs), 0o711);
    assert_eq!((mode(&first), owner(&first)), (0o700, NOBODY));
    assert!(
        !user_can(other.uid, other.gid, "cat", &[log_arg]),
        "still readable"
    );
    assert!(
        user_can(NOBODY, NOBODY, "cat", &[log_arg]),
        "nobody lost its log"
    );
}

/// 4b. Where the job's user keeps the job memory (a `state_dir` of theirs), the run directories
///     it names are not made private by handing them to that user: the user could name another
///     job's there, one an earlier version left readable, and root would give it to them.
#[test]
fn a_job_memory_its_user_writes_gets_them_no_other_run_directory() {
    let Some(w) = World::new("a_job_memory_its_user_writes_gets_them_no_other_run_directory")
    else {
        return;
    };
    let state = w.nobody_dir("nobody/state");
    let job = w.nobody_file(
        &w.path("nobody/job.toml"),
        &format!("user = \"nobody\"\ncommand = [\"true\"]\n[run]\nstate_dir = {state:?}\n"),
    );
    // Another job's run directory, as an earlier version left it: root's, 0755.
    let runs = w.path("rootstate/oomguard/runs");
    let theirs = runs.join("20250101T000000Z-theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    chmod(&theirs, 0o755);
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let mine = entries(&runs)
        .into_iter()
        .find(|d| *d != theirs)
        .expect("the run's directory");
    let memory = entries(&state.join("jobs"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("the job memory");
    // nobody's own file: nobody names the other directory in it.
    let text = read(&memory);
    let forged = text.replace(mine.to_str().unwrap(), theirs.to_str().unwrap());
    assert_ne!(forged, text, "the memory names no run directory");
    std::fs::write(&memory, forged).unwrap();
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!((mode(&theirs), owner(&theirs)), (0o755, 0), "handed over");
}

/// 5. Without root: a run directory another user made first (with a `probe/` of theirs, mode
///    777) is refused with one line before the job starts; in a run directory of one's own a
///    `probe/` from before is never used nor rewritten (the probe gets a new, private
///    directory); one's own world-writable run directory is used, with a warning.
#[test]
fn a_run_directory_another_user_made_is_refused_and_the_probe_is_never_reused() {
    let Some(w) =
        World::new("a_run_directory_another_user_made_is_refused_and_the_probe_is_never_reused")
    else {
        return;
    };
    let bob = TestUser::new("ogsr_t41b");
    let shared = w.path("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let planted = shared.join("run-for-alice");
    let bobs = format!(
        "mkdir -m 777 {0} {0}/probe && echo \"open('{1}', 'w')\" > {0}/probe/sitecustomize.py && chmod 666 {0}/probe/sitecustomize.py",
        planted.display(),
        w.path("bob-ran").display()
    );
    assert!(
        user_can(bob.uid, bob.gid, "sh", &["-c", &bobs]),
        "bob's plant"
    );
    let mark = w.path("nobody/ran");
    let touch = format!("open({:?}, 'w')", mark.to_str().unwrap());
    let run_dir = planted.to_str().unwrap();
    let out = as_nobody_oomguard(
        &w,
        &[
            "run",
            "--no-cgroup",
            "--run-dir",
            run_dir,
            "--",
            "python3",
            "-c",
            &touch,
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "run directory {run_dir}: it is owned by user ogsr_t41b"
        )),
        "{stderr}"
    );
    assert!(!mark.exists(), "the job ran");
    assert!(
        !w.path("bob-ran").exists(),
        "bob's sitecustomize ran as nobody"
    );

    // nobody's own run directory, with a probe/ of its own from before.
    let own = w.nobody_dir("nobody/own-run");
    let old_probe = w.nobody_dir("nobody/own-run/probe");
    let old_text = format!(
        "open({:?}, 'w')\n",
        w.path("nobody/old-probe-ran").to_str().unwrap()
    );
    w.nobody_file(&old_probe.join("sitecustomize.py"), &old_text);
    let show = "import os; print(os.environ['PYTHONPATH'].split(':')[0])";
    let own_arg = own.to_str().unwrap();
    let out = as_nobody_oomguard(
        &w,
        &[
            "run",
            "--no-cgroup",
            "--run-dir",
            own_arg,
            "--",
            "python3",
            "-c",
            show,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let probe = PathBuf::from(&first);
    assert_eq!(probe.parent(), Some(own.as_path()), "{first}");
    assert!(
        probe
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("probe-"),
        "{first}"
    );
    assert_eq!((mode(&probe), owner(&probe)), (0o700, NOBODY));
    assert!(probe.join("sitecustomize.py").is_file());
    assert_eq!(
        read(&old_probe.join("sitecustomize.py")),
        old_text,
        "rewritten"
    );
    assert!(
        !w.path("nobody/old-probe-ran").exists(),
        "the old probe/ was imported"
    );

    // One's own directory that every user may write: used, and said.
    let open = w.nobody_dir("nobody/open-run");
    chmod(&open, 0o777);
    let out = as_nobody_oomguard(
        &w,
        &[
            "run",
            "--no-cgroup",
            "--run-dir",
            open.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: run directory {} is world-writable (mode 777)",
            open.display()
        )),
        "{stderr}"
    );
}

/// 6. A user's job file's hook printing 8 MiB into root's run directory: `hooks.log` is kept
///    under `--log-max` as an attempt's log is, marked where its middle was cut, named in the
///    closing warning, and (made as the job's user) the user's file.
#[test]
fn hooks_output_is_capped_and_marked_like_an_attempts_log() {
    let Some(w) = World::new("hooks_output_is_capped_and_marked_like_an_attempts_log") else {
        return;
    };
    let job = w.root_job(
        "rootjobs6",
        "user = \"nobody\"\ncommand = [\"true\"]\n[run]\non_exit = [\"sh -c 'head -c 8388608 /dev/zero'\"]\n",
    );
    let out = as_root(
        &w,
        &[
            "run",
            "--no-cgroup",
            "--log-max",
            "1MiB",
            "--config",
            job.to_str().unwrap(),
        ],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let run_dir = entries(&w.path("rootstate/oomguard/runs"))
        .pop()
        .expect("the run's directory");
    let log = run_dir.join("hooks.log");
    let kept = std::fs::read(&log).unwrap();
    // The cap, its marker line, and one 64 KiB read between two compactions at most.
    assert!(
        kept.len() as u64 <= (1 << 20) + 320 + (64 << 10),
        "hooks.log holds {} bytes",
        kept.len()
    );
    let text = String::from_utf8_lossy(&kept);
    assert!(
        text.contains("[oomguard: ")
            && text.contains("bytes (")
            && text.contains("of the hooks' output cut here"),
        "no marker in hooks.log"
    );
    assert!(
        stderr.contains("hooks.log kept only the first and last part of the hooks' output"),
        "{stderr}"
    );
    assert_eq!(owner(&log), NOBODY);
}
