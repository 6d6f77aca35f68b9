//! Shared harness of the integration tests: each test gets its own temporary directory, runs the
//! real `oomguard` binary against real child processes (fixtures in tests/fixtures/), and reads
//! back what it wrote.
#![allow(dead_code)] // each test binary uses a different part of the harness

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_oomguard"))
}

/// A fixture script's path.
pub fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// One test's sandbox: a temp dir used as the run dir's parent and XDG_STATE_HOME.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.path("run")
    }

    /// `oomguard <args>` with the default run dir kept inside the sandbox and fast backoff.
    pub fn oomguard(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .env("XDG_STATE_HOME", self.path("state"))
            .env_remove("RUST_LOG")
            .env_remove("PYTHONUNBUFFERED")
            .stdin(Stdio::null());
        cmd
    }

    /// `oomguard run --run-dir <sandbox>/run --backoff 0s <extra> -- <job>`.
    pub fn run(&self, extra: &[&str], job: &[&str]) -> Command {
        let run_dir = self.run_dir();
        let mut args = vec![
            "run",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--backoff",
            "0s",
        ];
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(job);
        self.oomguard(&args)
    }

    pub fn summary(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.run_dir().join("summary.json"))
            .expect("summary.json written");
        serde_json::from_str(&text).expect("summary.json is JSON")
    }
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` is alive (exists and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

/// Sends a signal to a process.
pub fn kill(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
        .expect("signal delivered");
}

/// Reads the PIDs a fixture wrote, one per line, waiting until `count` are there.
pub fn read_pids(path: &Path, count: usize) -> Vec<u32> {
    let mut pids = Vec::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            pids = std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            pids.len() >= count
        }),
        "fixture did not write {count} pids to {}",
        path.display()
    );
    pids
}

/// oomguard's stderr as text.
pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The cause of every attempt in a summary.json, in order.
pub fn causes(summary: &serde_json::Value) -> Vec<String> {
    summary["attempts"]
        .as_array()
        .expect("attempts is an array")
        .iter()
        .map(|a| a["cause"].as_str().expect("cause is a string").to_string())
        .collect()
}
