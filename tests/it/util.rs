//! Shared harness of the integration tests: each test gets its own temporary directory, runs the
//! real `oomguard` binary against real child processes (fixtures in tests/fixtures/), and reads
//! back what it wrote.

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

/// A project directory (the job's working directory) inside a sandbox, for jobs run from
/// tests/fixtures/situation_job.py.
pub struct Project {
    pub sb: Sandbox,
    pub dir: PathBuf,
}

impl Project {
    pub fn new() -> Project {
        let sb = Sandbox::new();
        let dir = sb.path("project");
        std::fs::create_dir_all(dir.join("configs")).unwrap();
        Project { sb, dir }
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn record(&self) -> PathBuf {
        self.sb.path("record.jsonl")
    }

    /// `oomguard run <extra> -- python3 situation_job.py RECORD <args>` in the project, with
    /// the job's JOB_* variables.
    pub fn command(
        &self,
        extra: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Command {
        let script = fixture("situation_job.py");
        let record = self.record();
        let mut job = vec!["python3", script.as_str(), record.to_str().unwrap()];
        job.extend_from_slice(args);
        let mut cmd = self.sb.run(extra, &job);
        cmd.current_dir(&self.dir)
            .env_remove("PYTORCH_CUDA_ALLOC_CONF");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    pub fn run(&self, extra: &[&str], args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        self.command(extra, args, env)
            .output()
            .expect("oomguard runs")
    }

    /// What each attempt saw, in order.
    pub fn seen(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.record())
            .expect("the job recorded its attempts")
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).expect("a record is JSON")["settings"]
                    .clone()
            })
            .collect()
    }
}

/// Runs `cmd` to its end and returns its output; panics (after killing it) if it has not ended
/// within `timeout`: for what must never hang (a FIFO where a file should be).
pub fn output_within(cmd: &mut Command, timeout: Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let pid = child.id();
    // The child's output is small: its pipes do not fill before it ends.
    if !wait_until(timeout, || child.try_wait().expect("wait").is_some()) {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "{cmd:?} (PID {pid}) still ran after {timeout:?}: {}",
            stderr_of(&out)
        );
    }
    child.wait_with_output().unwrap()
}

/// Lets a job blocked reading the FIFO `hold` go on. The job may not have opened it yet (it
/// says it is about to, then opens): a non-blocking open fails (ENXIO) until it does, so the
/// open is polled rather than missed or left hanging.
pub fn release_fifo(hold: &Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut writer = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            writer = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                .open(hold)
                .ok();
            writer.is_some()
        }),
        "nothing read {}",
        hold.display()
    );
    writer
        .expect("opened above")
        .write_all(b"go\n")
        .expect("the job reads the FIFO");
}

/// Our own memory cgroup directory (v1) where this machine has one we can write: the tests
/// that cause real kernel OOM kills need it (root on a v1 host, as in CI).
pub fn own_v1_memory_cgroup() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))?;
    let dir = Path::new("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/'));
    nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK)
        .ok()
        .map(|()| dir)
}

/// Whether the tests run as root (cgroups, tmpfs mounts, other users).
pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// The PID of oomguard's guard process (`oomguard __guard`, its child).
pub fn guard_of(pid: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    children
        .split_whitespace()
        .map(|c| c.parse::<u32>().unwrap())
        .find(|c| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .is_ok_and(|cmd| cmd.split(|&b| b == 0).any(|arg| arg == b"__guard"))
        })
        .expect("oomguard runs a guard")
}

/// Every attempt's `--batch_size` and `--grad_accum`, from the commands in a summary.json.
pub fn sizes(summary: &serde_json::Value) -> Vec<(u64, u64)> {
    summary["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let command: Vec<&str> = a["command"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            let after = |flag: &str| -> u64 {
                let i = command.iter().position(|t| *t == flag).unwrap();
                command[i + 1].parse().unwrap()
            };
            (after("--batch_size"), after("--grad_accum"))
        })
        .collect()
}
