//! The user's config files are never left modified (issue 7, deliverable 4), through the guard:
//! a process holding a real `oomguard::api::knobs::patch::Patcher` (this test binary, re-run as the
//! `holder` below) patches a file and is SIGKILLed, as oomguard would be; the real
//! `oomguard __guard`, told the journal entry with a `restore` line, puts the file back when its
//! stdin closes without `done`, and leaves it alone with `done` (the next start's
//! `Patcher::recover` then does it). End-to-end runs of `oomguard run` are in the knob tests.

use crate::util;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use nix::sys::signal::Signal;
use oomguard::api::knobs::patch::{Mode, Patcher};
use util::Sandbox;

const ORIGINAL: &str = "# training settings, read by main.py\ntraining:\n  batch_size: 64      # per GPU\n  gradient_accumulation_steps: 1\n  pin_memory: true\n";
const PATCHED: &str = "# training settings, read by main.py\ntraining:\n  batch_size: 32      # per GPU\n  gradient_accumulation_steps: 2\n  pin_memory: true\n";

/// Not a test of its own: the process the tests SIGKILL while it holds a Patcher. It runs only
/// when `PATCHING_HOLDER_FILE` is set (by [`Holder::start`]): opens a Patcher on that file,
/// writes the patched text, prints the journal entry and the copy (if any), and waits to be
/// killed.
#[test]
fn holder() {
    let Some(file) = std::env::var_os("PATCHING_HOLDER_FILE") else {
        return;
    };
    let var = |name: &str| std::env::var(name).expect("the test sets every holder variable");
    let mode = match var("PATCHING_HOLDER_MODE").as_str() {
        "copy" => Mode::Copy,
        _ => Mode::InPlace,
    };
    let mut patcher = Patcher::open(
        Path::new(&var("PATCHING_HOLDER_STATE")),
        Path::new(&var("PATCHING_HOLDER_RUN")),
        vec![(PathBuf::from(file), mode)],
    )
    .expect("the holder claims its file");
    let copy = patcher.write(0, PATCHED).expect("the holder patches");
    let mut out = std::io::stdout().lock();
    // The harness has begun a line ("test holder ... "): ours start on their own.
    writeln!(out).unwrap();
    for journal in patcher.journal_paths() {
        writeln!(out, "JOURNAL {}", journal.display()).unwrap();
    }
    if let Some(copy) = copy {
        writeln!(out, "COPY {}", copy.display()).unwrap();
    }
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    drop(out);
    // Until the test kills us; if the test itself is gone, leave as a SIGKILL would.
    let _ = std::io::stdin().read_line(&mut String::new());
    patcher.abandon();
}

/// A running holder and what it printed.
struct Holder {
    child: Child,
    journal: PathBuf,
    copy: Option<PathBuf>,
}

impl Holder {
    fn start(sandbox: &Sandbox, file: &Path, mode: &str) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "patching::holder",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PATCHING_HOLDER_FILE", file)
            .env("PATCHING_HOLDER_MODE", mode)
            .env("PATCHING_HOLDER_STATE", sandbox.path("state"))
            .env("PATCHING_HOLDER_RUN", sandbox.path("run"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the test binary runs again as the holder");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (mut journal, mut copy) = (None, None);
        for line in stdout.lines() {
            let line = line.unwrap();
            if let Some(path) = line.strip_prefix("JOURNAL ") {
                journal = Some(PathBuf::from(path));
            } else if let Some(path) = line.strip_prefix("COPY ") {
                copy = Some(PathBuf::from(path));
            } else if line == "READY" {
                break;
            }
        }
        Holder {
            child,
            journal: journal.expect("the holder printed its journal entry"),
            copy,
        }
    }

    /// SIGKILL, as oomguard dies in the scenario: no destructor, no finish.
    fn kill(mut self) {
        util::kill(self.child.id(), Signal::SIGKILL);
        let status = self.child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }
}

/// The real guard, its stdin ours.
fn start_guard() -> (Child, ChildStdin) {
    let mut guard = Command::new(util::bin())
        .arg("__guard")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oomguard __guard starts");
    let stdin = guard.stdin.take().unwrap();
    (guard, stdin)
}

/// Closes the guard's stdin and waits for it: its exit code and stderr.
fn end_guard(guard: Child, stdin: ChildStdin) -> (i32, String) {
    drop(stdin);
    let out = guard.wait_with_output().unwrap();
    (
        out.status.code().expect("the guard exits"),
        util::stderr_of(&out),
    )
}

/// The sandbox's config file, written with an mtime in the past so a rewrite shows in it.
fn config(sandbox: &Sandbox) -> PathBuf {
    let dir = sandbox.path("configs");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("default.yaml");
    std::fs::write(&path, ORIGINAL).unwrap();
    let old = std::time::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 5);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(old))
        .unwrap();
    path
}

fn mtime(path: &Path) -> (i64, i64) {
    let meta = std::fs::metadata(path).unwrap();
    (meta.mtime(), meta.mtime_nsec())
}

/// What is left in the state's patches directory.
fn entries(sandbox: &Sandbox) -> Vec<String> {
    std::fs::read_dir(sandbox.path("state/patches"))
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_guard_restores_a_file_patched_in_place_when_oomguard_is_killed() {
    let sandbox = Sandbox::new();
    let file = config(&sandbox);
    let before = mtime(&file);
    let (guard, mut to_guard) = start_guard();
    let holder = Holder::start(&sandbox, &file, "in_place");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), PATCHED);
    writeln!(to_guard, "watch -").unwrap();
    writeln!(to_guard, "restore {}", holder.journal.display()).unwrap();
    // The attempt ended: `unwatch` must not drop the restore.
    writeln!(to_guard, "unwatch").unwrap();
    to_guard.flush().unwrap();
    holder.kill();
    // Dead but not restored yet: only the guard's EOF does it.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), PATCHED);
    let (code, stderr) = end_guard(guard, to_guard);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), ORIGINAL.as_bytes());
    assert_eq!(mtime(&file), before, "the restore must give back the mtime");
    assert!(
        stderr.contains(&format!("restored {}", file.display())),
        "{stderr}"
    );
    assert_eq!(entries(&sandbox), Vec::<String>::new());
    let dir = sandbox.path("configs");
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1, "a stray file");
}

#[test]
fn the_guard_removes_a_patched_copy_when_oomguard_is_killed() {
    let sandbox = Sandbox::new();
    let file = config(&sandbox);
    let (guard, mut to_guard) = start_guard();
    let holder = Holder::start(&sandbox, &file, "copy");
    let copy = holder.copy.clone().expect("the holder made a copy");
    assert_eq!(
        copy.parent(),
        file.parent(),
        "the copy goes beside the file"
    );
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), PATCHED);
    writeln!(to_guard, "restore {}", holder.journal.display()).unwrap();
    holder.kill();
    let (code, stderr) = end_guard(guard, to_guard);
    assert_eq!(code, 0, "{stderr}");
    assert!(!copy.exists(), "the guard left {}", copy.display());
    assert_eq!(std::fs::read(&file).unwrap(), ORIGINAL.as_bytes());
    assert_eq!(entries(&sandbox), Vec::<String>::new());
}

#[test]
fn with_done_the_guard_leaves_the_file_and_the_next_start_restores_it() {
    let sandbox = Sandbox::new();
    let file = config(&sandbox);
    let before = mtime(&file);
    let (guard, mut to_guard) = start_guard();
    let holder = Holder::start(&sandbox, &file, "in_place");
    writeln!(to_guard, "restore {}", holder.journal.display()).unwrap();
    writeln!(to_guard, "done").unwrap();
    to_guard.flush().unwrap();
    let (code, stderr) = end_guard(guard, to_guard);
    assert_eq!(code, 0, "{stderr}");
    // `done` came while the holder was alive: nothing for the guard to do.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), PATCHED);
    // Both gone (oomguard and its guard SIGKILLed): the next start puts it back and says so.
    let pid = holder.child.id();
    holder.kill();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), PATCHED);
    let lines = Patcher::recover(&sandbox.path("state"));
    assert_eq!(
        lines,
        vec![format!(
            "restored {}, left patched by oomguard {pid} (run dir {})",
            file.display(),
            sandbox.path("run").display()
        )]
    );
    assert_eq!(std::fs::read(&file).unwrap(), ORIGINAL.as_bytes());
    assert_eq!(mtime(&file), before);
    assert_eq!(entries(&sandbox), Vec::<String>::new());
}

#[test]
fn a_guard_of_a_live_owner_does_not_take_its_file() {
    // Defence in depth: should a guard's stdin close while its oomguard still holds the file
    // (it cannot in practice), the guard must not restore under a live run.
    let sandbox = Sandbox::new();
    let file = config(&sandbox);
    let (guard, mut to_guard) = start_guard();
    let holder = Holder::start(&sandbox, &file, "in_place");
    writeln!(to_guard, "restore {}", holder.journal.display()).unwrap();
    let (code, stderr) = end_guard(guard, to_guard);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), PATCHED);
    holder.kill();
    assert_eq!(Patcher::recover(&sandbox.path("state")).len(), 1);
    assert_eq!(std::fs::read(&file).unwrap(), ORIGINAL.as_bytes());
}
