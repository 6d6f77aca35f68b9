//! Shared harness of the integration tests: each test gets its own temporary directory, runs the
//! real `oomguard` binary against real child processes (fixtures in tests/fixtures/), and reads
//! back what it wrote.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

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

    /// [`Sandbox::run`] to its end, which must be a success (exit 0; its stderr shown
    /// otherwise): its output and the summary.json it wrote.
    pub fn run_ok(&self, extra: &[&str], job: &[&str]) -> (Output, serde_json::Value) {
        let out = self.run(extra, job).output().expect("oomguard runs");
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        (out, self.summary())
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

/// What each attempt of a fixture recorded in the JSON-lines file `path`, in order.
pub fn records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the job recorded its attempts")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record is JSON"))
        .collect()
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
        records(&self.record())
            .into_iter()
            .map(|r| r["settings"].clone())
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

/// Whether python3 imports `modules`; prints why a test skips where it does not (CI installs
/// them: see .ci/run).
pub fn python_has(test: &str, modules: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED {test}: python3 cannot import {modules} (see .ci/run)");
    }
    ok
}

/// Every attempt's `--batch_size` and `--grad_accum`, from the commands in a summary.json.
pub fn sizes(summary: &serde_json::Value) -> Vec<(u64, u64)> {
    summary["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                flag_value(&a["command"], "--batch_size"),
                flag_value(&a["command"], "--grad_accum"),
            )
        })
        .collect()
}

/// The number after `flag` in a command line kept as JSON (an array of strings).
pub fn flag_value(argv: &serde_json::Value, flag: &str) -> u64 {
    let argv: Vec<&str> = argv
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let i = argv.iter().position(|a| *a == flag).unwrap();
    argv[i + 1].parse().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Processes: identity that survives PID reuse, and cleanup on drop.
// ---------------------------------------------------------------------------------------------

/// The start time of `pid` (field 22 of /proc/PID/stat), to tell it from a later reuse of its PID.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state); the start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// One process, as it was when first seen.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: u32,
    start: u64,
}

impl Proc {
    fn of(pid: u32) -> Option<Proc> {
        Some(Proc {
            pid,
            start: start_time(pid)?,
        })
    }

    /// Whether this very process still exists (zombie or not).
    fn exists(&self) -> bool {
        start_time(self.pid) == Some(self.start)
    }
}

/// The command line of `pid`, for messages.
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_string()
        })
        .unwrap_or_else(|_| "<gone>".into())
}

/// The direct children of `pid`, over all its threads.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|s| s.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Every live process whose environment holds `OOMGUARD_RUN_DIR=<run_dir>`: oomguard sets it
/// for the job, so every process of every attempt of this run carries it (unless it rewrote its
/// environment), wherever it sits in the process tree.
pub fn processes_of_run(run_dir: &Path) -> Vec<u32> {
    let needle = format!("OOMGUARD_RUN_DIR={}", run_dir.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
        })
        .filter(|&pid| alive(pid))
        .collect()
}

/// Kills, when dropped, every process registered with it that still exists (and, for a group,
/// the whole group while its leader exists) and every process of the run, so a failing test
/// leaks nothing.
pub struct Cleanup {
    procs: Vec<Proc>,
    groups: Vec<Proc>,
    run_dir: PathBuf,
}

impl Cleanup {
    pub fn track(&mut self, pid: u32) {
        if let Some(p) = Proc::of(pid) {
            self.procs.push(p);
        }
    }

    pub fn track_group(&mut self, leader: u32) {
        if let Some(p) = Proc::of(leader) {
            self.groups.push(p);
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for g in &self.groups {
            if g.exists() {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(g.pid as i32),
                    Signal::SIGKILL,
                );
            }
        }
        for p in &self.procs {
            if p.exists() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p.pid as i32),
                    Signal::SIGKILL,
                );
            }
        }
        // A few passes: a process may fork while the sweep runs.
        for _ in 0..3 {
            for pid in processes_of_run(&self.run_dir) {
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A running oomguard: its output read by threads, waits with deadlines.
// ---------------------------------------------------------------------------------------------

/// One output pipe of a running process, drained by a thread for the whole run (so the process
/// never blocks on a full pipe): every byte is kept as it arrives and every whole line is also
/// sent on a channel, so a test can wait for a line and still read the whole output.
struct Stream {
    bytes: Arc<Mutex<Vec<u8>>>,
    lines: Receiver<String>,
    reader: JoinHandle<()>,
}

impl Stream {
    fn drain(mut pipe: impl Read + Send + 'static) -> Stream {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&bytes);
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut partial = Vec::new();
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("no reader panics holding the buffer")
                    .extend_from_slice(&buf[..n]);
                partial.extend_from_slice(&buf[..n]);
                while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = partial.drain(..=end).collect();
                    let text = String::from_utf8_lossy(&line[..end]);
                    // Nobody listening any more is fine: the bytes are kept.
                    let _ = tx.send(text.strip_suffix('\r').unwrap_or(&text).to_string());
                }
            }
        });
        Stream {
            bytes,
            lines,
            reader,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .bytes
                .lock()
                .expect("no reader panics holding the buffer"),
        )
        .into_owned()
    }

    /// Waits up to `timeout` for the pipe's end (every writer gone); whether it came.
    fn ended_within(&self, timeout: Duration) -> bool {
        wait_until(timeout, || self.reader.is_finished())
    }
}

/// oomguard running in the background, its stdout and stderr drained by threads. Dropping it
/// SIGKILLs oomguard if it still runs, then everything registered in `cleanup` and every
/// process of its run.
pub struct Running {
    pub child: Child,
    exited: bool,
    stdout: Stream,
    stderr: Stream,
    /// The stdout lines read so far by [`Running::expect_line`].
    pub stdout_seen: Vec<String>,
    pub cleanup: Cleanup,
}

impl Running {
    /// Starts `cmd`, an `oomguard run` of sandbox `sb`, with its stdout and stderr piped.
    pub fn start(sb: &Sandbox, mut cmd: Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("oomguard starts");
        let stdout = Stream::drain(child.stdout.take().expect("stdout piped"));
        let stderr = Stream::drain(child.stderr.take().expect("stderr piped"));
        Running {
            child,
            exited: false,
            stdout,
            stderr,
            stdout_seen: Vec::new(),
            cleanup: Cleanup {
                procs: Vec::new(),
                groups: Vec::new(),
                run_dir: sb.run_dir(),
            },
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// oomguard's stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// Sends `signal` to oomguard itself (not to its group).
    pub fn signal(&self, signal: Signal) {
        assert!(
            !self.exited,
            "oomguard already exited; cannot send {signal}"
        );
        kill(self.pid(), signal);
    }

    /// Whether oomguard has ended (its status is kept for [`Running::wait`]).
    pub fn ended(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Reads oomguard's stdout until the line `want`; panics on timeout or end of output.
    pub fn expect_line(&mut self, want: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line == want;
                    self.stdout_seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no line {want:?} on oomguard's stdout within {timeout:?}\nstdout so far: {:?}\nstderr: {}",
                    self.stdout_seen,
                    self.stderr()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "oomguard's stdout ended before the line {want:?}\nstdout: {:?}\nstderr: {}",
                    self.stdout_seen,
                    self.stderr()
                ),
            }
        }
    }

    /// The next line of oomguard's stderr not taken yet; panics if none comes within `timeout`.
    pub fn stderr_line(&self, timeout: Duration) -> String {
        self.stderr
            .lines
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("no line on oomguard's stderr ({e}): {}", self.stderr()))
    }

    /// Waits for oomguard to exit within `timeout`; on timeout SIGKILLs it and panics.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let mut status = None;
        if !wait_until(timeout, || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        }) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.exited = true;
            panic!(
                "oomguard did not exit within {timeout:?}\nstdout: {:?}\nstderr: {}",
                self.stdout_seen,
                self.stderr()
            );
        }
        self.exited = true;
        // The stderr pipe closes when oomguard (and nothing else) holds it; bounded wait.
        self.stderr.ended_within(Duration::from_secs(5));
        status.expect("ended")
    }

    /// Waits for oomguard to exit within `timeout` (on timeout SIGKILLs it and panics) and for
    /// the end of both its pipes: its whole output.
    pub fn finish(mut self, timeout: Duration) -> Output {
        let status = self.wait(timeout);
        assert!(
            self.stdout.ended_within(timeout) && self.stderr.ended_within(timeout),
            "oomguard's pipes were still open {timeout:?} after it ended; stderr:\n{}",
            self.stderr()
        );
        Output {
            status,
            stdout: self.stdout.bytes.lock().expect("reader ended").clone(),
            stderr: self.stderr.bytes.lock().expect("reader ended").clone(),
        }
    }

    /// oomguard's children, as (job, guard): the job is the one that is not `oomguard __guard`.
    pub fn job_and_guard(&self) -> (Option<u32>, Option<u32>) {
        let mut job = None;
        let mut guard = None;
        for pid in children(self.pid()) {
            if cmdline(pid).ends_with("__guard") {
                guard = Some(pid);
            } else {
                job = Some(pid);
            }
        }
        (job, guard)
    }

    /// Registers the running job (and its group) and the guard for cleanup; returns the job PID.
    pub fn track_job(&mut self) -> u32 {
        let (job, guard) = self.job_and_guard();
        let job = job.unwrap_or_else(|| {
            panic!(
                "oomguard {} has no job child; stderr: {}",
                self.pid(),
                self.stderr()
            )
        });
        self.cleanup.track_group(job);
        self.cleanup.track(job);
        if let Some(guard) = guard {
            self.cleanup.track(guard);
        }
        job
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // `cleanup` is dropped next and kills whatever the job left.
    }
}

/// Makes the FIFO `hold`, starts `cmd` (whose job, a fixture given `JOB_HOLD=hold`, blocks
/// reading it) and returns once an attempt waits there (the fixture's `hold.waiting` exists).
pub fn start_holding(sb: &Sandbox, cmd: Command, hold: &Path) -> Running {
    nix::unistd::mkfifo(hold, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let run = Running::start(sb, cmd);
    let waiting = hold.with_extension("waiting");
    assert!(
        wait_until(Duration::from_secs(60), || waiting.exists()),
        "no attempt reached {}; stderr: {}",
        hold.display(),
        run.stderr()
    );
    run
}

/// A pseudo-terminal opened by the test, `rows` x `cols`, as (master, slave), both ends
/// close-on-exec so that no process spawned by another test holds it open.
pub fn test_pty(rows: u16, cols: u16) -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::AsRawFd;
    let size = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pair = nix::pty::openpty(&size, None).expect("a pseudo-terminal can be opened");
    for fd in [pair.master.as_raw_fd(), pair.slave.as_raw_fd()] {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).unwrap();
    }
    (std::fs::File::from(pair.master), pair.slave)
}

/// A copy of the tree at `from` in `to`, made as needed; files keep their modes (a launcher
/// script stays executable).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A run under `--memory-max` that the kernel OOM-killed once and that then succeeded: the
/// `(batch, accum)` each attempt's job wrote to `record` (a JSON line each). `None`, with
/// SKIPPED printed for `test`, where no memory cgroup can be made here.
pub fn killed_once_then_ok(
    test: &str,
    sb: &Sandbox,
    out: &Output,
    record: &Path,
) -> Option<Vec<(u64, u64)>> {
    let err = stderr_of(out);
    if out.status.code() == Some(2) && err.contains("needs a memory cgroup") {
        eprintln!("SKIPPED {test}: no writable memory cgroup here (needs root)");
        return None;
    }
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(causes(&sb.summary()), ["oom_killed", "ok"], "{err}");
    Some(
        records(record)
            .iter()
            .map(|r| (r["batch"].as_u64().unwrap(), r["accum"].as_u64().unwrap()))
            .collect(),
    )
}
