//! Process hygiene of `oomguard run`, end to end against the real binary: signals sent to
//! oomguard reach the job's process group, a user's stop is final (no relaunch) and escalates to
//! SIGKILL, exit statuses follow the shell, and no process of the job outlives oomguard.
//!
//! Synchronisation is by pipes (the job's stdout is forwarded byte for byte to oomguard's), files
//! the fixtures write atomically, and polling with deadlines; never by sleeping. Every wait has a
//! deadline so that a bug fails a test instead of hanging it, and every test kills what it
//! started, even when it fails.

use crate::util;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use util::{cmdline, processes_of_run, Running, Sandbox};

/// How long anything that should happen "at once" may take on a slow, busy machine.
const PROMPT: Duration = Duration::from_secs(20);

/// The real Python interpreter. `python3` on PATH may be a wrapper script (pyenv's shim forks the
/// interpreter as its child), which would put a shell between oomguard and the fixture.
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "python3 -c failed: {out:?}");
        let exe = String::from_utf8(out.stdout).expect("utf-8 path");
        let exe = exe.trim().to_string();
        assert!(!exe.is_empty(), "python3 did not name its executable");
        exe
    })
}

/// A status's exit code, or a clear panic when a signal ended it.
fn code(status: ExitStatus, stderr: &str) -> i32 {
    status.code().unwrap_or_else(|| {
        panic!(
            "oomguard was killed by signal {:?} instead of exiting; stderr: {stderr}",
            status.signal()
        )
    })
}

/// summary.json, with its single attempt; panics with the whole summary otherwise.
fn single_attempt(summary: &Value) -> &Value {
    let attempts = summary["attempts"]
        .as_array()
        .unwrap_or_else(|| panic!("no attempts array in {summary:#}"));
    assert_eq!(
        attempts.len(),
        1,
        "expected exactly one attempt (no relaunch): {summary:#}"
    );
    &attempts[0]
}

fn read_record(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn signals_job(record: &Path, extra: &[&str]) -> Vec<String> {
    let mut job = vec![
        python().to_string(),
        util::fixture("signals.py"),
        record.to_str().unwrap().to_string(),
    ];
    job.extend(extra.iter().map(|s| s.to_string()));
    job
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------------------------
// 1-4: signals
// ---------------------------------------------------------------------------------------------

#[test]
fn forwarded_signals_reach_the_job_and_a_user_term_is_not_relaunched() {
    let sb = Sandbox::new();
    let record = sb.path("record");
    let job = signals_job(&record, &["--term", "exit", "--batch_size", "8"]);
    let mut run = Running::start(&sb, sb.run(&[], &as_strs(&job)));
    run.expect_line("ready", PROMPT);
    run.track_job();

    let mut expected = Vec::new();
    for (signal, name) in [(Signal::SIGUSR1, "USR1"), (Signal::SIGUSR2, "USR2")] {
        run.signal(signal);
        run.expect_line(&format!("got {name}"), PROMPT);
        expected.push(name.to_string());
        assert_eq!(read_record(&record), expected, "after {name}");
    }
    run.signal(Signal::SIGTERM);
    run.expect_line("got TERM", PROMPT);
    expected.push("TERM".into());
    let status = run.wait(PROMPT);
    let stderr = run.stderr();

    assert_eq!(read_record(&record), expected);
    assert_eq!(code(status, &stderr), 128 + 15, "stderr: {stderr}");
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted", "{summary:#}");
    let attempt = single_attempt(&summary);
    assert_eq!(attempt["cause"], "interrupted", "{summary:#}");
    // The batch flag was found, so an OOM-like ending would have been relaunched smaller.
    assert_eq!(attempt["batch_size"], 8, "{summary:#}");
    // The fixture exits 0 on SIGTERM: the status comes from the user's signal, not the job.
    assert_eq!(attempt["exit_code"], 0, "{summary:#}");
}

#[test]
fn user_sigint_is_not_relaunched() {
    let sb = Sandbox::new();
    let record = sb.path("record");
    let job = signals_job(&record, &["--int", "raise", "--batch_size", "8"]);
    let mut run = Running::start(&sb, sb.run(&[], &as_strs(&job)));
    run.expect_line("ready", PROMPT);
    run.track_job();

    run.signal(Signal::SIGINT);
    let status = run.wait(PROMPT);
    let stderr = run.stderr();

    assert_eq!(code(status, &stderr), 128 + 2, "stderr: {stderr}");
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted", "{summary:#}");
    let attempt = single_attempt(&summary);
    assert_eq!(attempt["cause"], "interrupted", "{summary:#}");
    // Python ends an unhandled KeyboardInterrupt by re-raising SIGINT: the forwarded SIGINT
    // reached the job and ended it.
    assert_eq!(attempt["signal"], 2, "{summary:#}");
}

#[test]
fn second_sigint_kills_the_job_at_once() {
    let sb = Sandbox::new();
    let record = sb.path("record");
    // The fixture ignores SIGINT (after recording it) and the grace is long: only the
    // escalation can end the job within the deadline.
    let job = signals_job(&record, &["--int", "record", "--term", "ignore"]);
    let mut run = Running::start(&sb, sb.run(&["--grace", "60s"], &as_strs(&job)));
    run.expect_line("ready", PROMPT);
    run.track_job();

    run.signal(Signal::SIGINT);
    run.expect_line("got INT", PROMPT);
    assert!(
        util::wait_until(PROMPT, || read_record(&record) == ["INT"]),
        "record: {:?}",
        read_record(&record)
    );
    run.signal(Signal::SIGINT);
    let status = run.wait(Duration::from_secs(15));
    let stderr = run.stderr();

    assert_eq!(code(status, &stderr), 128 + 2, "stderr: {stderr}");
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted", "{summary:#}");
    let attempt = single_attempt(&summary);
    assert_eq!(attempt["cause"], "interrupted", "{summary:#}");
    assert_eq!(attempt["signal"], 9, "{summary:#}");
    // The second SIGINT is not forwarded: it becomes the SIGKILL.
    assert_eq!(read_record(&record), ["INT"]);
}

#[test]
fn grace_runs_out_then_sigkill() {
    let sb = Sandbox::new();
    let record = sb.path("record");
    let job = signals_job(&record, &["--term", "ignore"]);
    let mut run = Running::start(&sb, sb.run(&["--grace", "1s"], &as_strs(&job)));
    run.expect_line("ready", PROMPT);
    run.track_job();

    let sent = Instant::now();
    run.signal(Signal::SIGTERM);
    run.expect_line("got TERM", PROMPT);
    let status = run.wait(PROMPT);
    let elapsed = sent.elapsed();
    let stderr = run.stderr();

    assert_eq!(code(status, &stderr), 128 + 15, "stderr: {stderr}");
    assert!(
        elapsed >= Duration::from_millis(900),
        "the job was killed {elapsed:?} after SIGTERM, before the 1s grace ran out"
    );
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted", "{summary:#}");
    let attempt = single_attempt(&summary);
    assert_eq!(attempt["cause"], "interrupted", "{summary:#}");
    assert_eq!(attempt["signal"], 9, "{summary:#}");
    assert_eq!(read_record(&record), ["TERM"]);
}

/// A hangup (the terminal or ssh session went away) or a quit sent to oomguard is the user's
/// stop, like SIGINT/SIGTERM: forwarded, never relaunched, even with retries left.
#[test]
fn hangup_and_quit_are_user_stops_never_relaunched() {
    for (signal, name) in [(Signal::SIGHUP, "HUP"), (Signal::SIGQUIT, "QUIT")] {
        let sb = Sandbox::new();
        let record = sb.path("record");
        // The job dies of the forwarded signal, as most training scripts would.
        let job = signals_job(&record, &["--default", name, "--batch_size", "8"]);
        let mut run = Running::start(&sb, sb.run(&["--retries", "2"], &as_strs(&job)));
        run.expect_line("ready", PROMPT);
        run.track_job();

        run.signal(signal);
        let status = run.wait(PROMPT);
        let stderr = run.stderr();

        assert_eq!(
            code(status, &stderr),
            128 + signal as i32,
            "{name}: {stderr}"
        );
        let summary = sb.summary();
        assert_eq!(summary["outcome"], "interrupted", "{name}: {summary:#}");
        let attempt = single_attempt(&summary);
        assert_eq!(attempt["cause"], "interrupted", "{name}: {summary:#}");
        // It reached the job: the job died of it.
        assert_eq!(attempt["signal"], signal as i32, "{name}: {summary:#}");
    }
}

#[test]
fn a_hangup_during_the_wait_before_a_relaunch_ends_the_run() {
    let sb = Sandbox::new();
    // Fails at once; one retry allowed, an hour away.
    let cmd = sb.oomguard(&[
        "run",
        "--run-dir",
        sb.run_dir().to_str().unwrap(),
        "--retries",
        "1",
        "--backoff",
        "1h",
        "--backoff-max",
        "1h",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    let mut run = Running::start(&sb, cmd);
    assert!(
        util::wait_until(PROMPT, || run.stderr().contains("attempt 2 in")),
        "no relaunch announced: {}",
        run.stderr()
    );
    run.signal(Signal::SIGHUP);
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), 128 + 1, "{stderr}");
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted", "{summary:#}");
    single_attempt(&summary);
}

/// Whether `signal` is pending for the whole process `pid` (ShdPnd of /proc/PID/status): sent,
/// but no thread has taken it yet.
fn pending(pid: u32, signal: Signal) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("ShdPnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal as i32 - 1)) != 0)
}

/// Two SIGINTs delivered before oomguard's loop looks are two: the second kills at once instead
/// of waiting out --grace.
///
/// To make "before the loop looks" certain, oomguard's main thread (the one running the loop) is
/// held in a ptrace stop while both are delivered: the kernel then hands them to one of its other
/// threads, whose handler records each. Each is sent only once the kernel has taken the one
/// before: two sent while the first is still pending are merged by the kernel itself (a standard
/// signal is not queued twice), and no program can tell them apart.
#[test]
fn two_sigints_delivered_before_the_loop_looks_are_two() {
    use nix::sys::ptrace;
    use nix::sys::wait::{waitpid, WaitPidFlag};
    use nix::unistd::Pid;

    let sb = Sandbox::new();
    let record = sb.path("record");
    let job = signals_job(&record, &["--int", "record", "--term", "ignore"]);
    let mut run = Running::start(&sb, sb.run(&["--grace", "1h"], &as_strs(&job)));
    run.expect_line("ready", PROMPT);
    run.track_job();

    let main_thread = Pid::from_raw(run.pid() as i32);
    ptrace::seize(main_thread, ptrace::Options::empty()).expect("PTRACE_SEIZE oomguard");
    ptrace::interrupt(main_thread).expect("PTRACE_INTERRUPT");
    waitpid(main_thread, Some(WaitPidFlag::__WALL)).expect("the main thread stops");
    for _ in 0..2 {
        run.signal(Signal::SIGINT);
        assert!(
            util::wait_until(PROMPT, || !pending(run.pid(), Signal::SIGINT)),
            "no thread of oomguard took the SIGINT"
        );
    }
    ptrace::detach(main_thread, None).expect("PTRACE_DETACH");

    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), 128 + 2, "stderr: {stderr}");
    let summary = sb.summary();
    let attempt = single_attempt(&summary);
    assert_eq!(attempt["cause"], "interrupted", "{summary:#}");
    assert_eq!(attempt["signal"], 9, "{summary:#}");
}

/// A pseudo-terminal that oomguard takes as its controlling terminal, as a shell's job would.
struct Terminal {
    master: std::fs::File,
    slave: std::os::fd::OwnedFd,
}

impl Terminal {
    fn open() -> Terminal {
        let (master, slave) = util::test_pty(0, 0);
        Terminal { master, slave }
    }

    /// Makes `cmd` a session leader whose stdin and controlling terminal is this terminal, so
    /// its process group is the terminal's foreground group (Ctrl-Z and Ctrl-C reach it).
    fn attach(&self, cmd: &mut Command) {
        cmd.stdin(Stdio::from(self.slave.try_clone().expect("dup slave")));
        // SAFETY: setsid and ioctl are async-signal-safe; nothing is allocated.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, || {
                nix::unistd::setsid()?;
                if nix::libc::ioctl(0, nix::libc::TIOCSCTTY as _, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Types `bytes` at the keyboard.
    fn type_keys(&mut self, bytes: &[u8]) {
        std::io::Write::write_all(&mut self.master, bytes).expect("write to the pty");
    }
}

/// The state letter of /proc/PID/stat (`T` stopped, `S` sleeping, ...).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn wait_state(pid: u32, stopped: bool, who: &str) {
    assert!(
        util::wait_until(PROMPT, || state(pid).is_some_and(|s| (s == 'T') == stopped)),
        "{who} (PID {pid}) is in state {:?}, expected {}",
        state(pid),
        if stopped { "stopped" } else { "running" }
    );
}

/// Ctrl-Z in the terminal stops the job and then oomguard, as a shell's job control stops a
/// pipeline; `fg` (SIGCONT to oomguard) continues both; Ctrl-C still stops the run.
#[test]
fn ctrl_z_stops_the_job_and_oomguard_and_fg_continues_both() {
    let sb = Sandbox::new();
    let record = sb.path("record");
    let job = signals_job(&record, &["--int", "raise"]);
    let mut cmd = sb.run(&[], &as_strs(&job));
    let mut terminal = Terminal::open();
    terminal.attach(&mut cmd);
    let mut run = Running::start(&sb, cmd);
    run.expect_line("ready", PROMPT);
    let job_pid = run.track_job();

    terminal.type_keys(b"\x1a"); // Ctrl-Z: SIGTSTP to the foreground group, oomguard's
    wait_state(job_pid, true, "the job");
    wait_state(run.pid(), true, "oomguard");

    run.signal(Signal::SIGCONT); // what `fg` or `bg` sends
    wait_state(run.pid(), false, "oomguard");
    wait_state(job_pid, false, "the job");

    terminal.type_keys(b"\x03"); // Ctrl-C
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), 128 + 2, "{stderr}");
    assert_eq!(single_attempt(&sb.summary())["cause"], "interrupted");
}

/// The same for a job run as another user, which leads a session of its own (no terminal of
/// root's to type into): Ctrl-Z still stops it, then oomguard; `fg` continues both; Ctrl-C
/// still stops the run.
#[test]
fn ctrl_z_stops_a_job_run_as_another_user_in_its_own_session() {
    if !util::is_root() {
        eprintln!("SKIPPED ctrl_z_stops_a_job_run_as_another_user_in_its_own_session: not root (needs a second user)");
        return;
    }
    let sb = Sandbox::new();
    let job_file = sb.path("job.toml");
    let script = "import time; print('ready', flush=True); time.sleep(120)";
    std::fs::write(
        &job_file,
        format!("user = \"nobody\"\ncommand = [\"python3\", \"-c\", {script:?}]\n"),
    )
    .unwrap();
    let run_dir = sb.run_dir();
    let mut cmd = sb.oomguard(&[
        "run",
        "--config",
        job_file.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
    ]);
    let mut terminal = Terminal::open();
    terminal.attach(&mut cmd);
    let mut run = Running::start(&sb, cmd);
    run.expect_line("ready", PROMPT);
    let job_pid = run.track_job();
    let session = |pid: u32| nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid as i32)));
    assert_ne!(
        session(job_pid),
        session(run.pid()),
        "the job shares oomguard's session"
    );

    terminal.type_keys(b"\x1a");
    wait_state(job_pid, true, "the job");
    wait_state(run.pid(), true, "oomguard");

    run.signal(Signal::SIGCONT);
    wait_state(run.pid(), false, "oomguard");
    wait_state(job_pid, false, "the job");

    terminal.type_keys(b"\x03");
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), 128 + 2, "{stderr}");
    assert_eq!(single_attempt(&sb.summary())["cause"], "interrupted");
}

/// A job that reads the terminal from its own (background) process group is stopped by the
/// kernel (SIGTTIN): the user is told why, and a stop request still ends it without waiting
/// out --grace (SIGTERM, then SIGCONT so it can act on it).
#[test]
fn a_job_stopped_for_reading_the_terminal_is_explained_and_still_stoppable() {
    let sb = Sandbox::new();
    let reader = "import sys; print('ready', flush=True); sys.stdin.read()";
    let mut cmd = sb.run(&["--grace", "1h"], &[python(), "-c", reader]);
    let terminal = Terminal::open();
    terminal.attach(&mut cmd);
    let mut run = Running::start(&sb, cmd);
    run.expect_line("ready", PROMPT);
    let job_pid = run.track_job();
    wait_state(job_pid, true, "the job");
    assert!(
        util::wait_until(PROMPT, || run
            .stderr()
            .contains("the job is stopped (SIGTTIN)")),
        "no explanation: {}",
        run.stderr()
    );

    run.signal(Signal::SIGTERM);
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), 128 + 15, "{stderr}");
    let attempt = single_attempt(&sb.summary()).clone();
    assert_eq!(attempt["cause"], "interrupted");
    assert_eq!(attempt["signal"], 15, "{attempt}");
}

// ---------------------------------------------------------------------------------------------
// 5: exit statuses
// ---------------------------------------------------------------------------------------------

/// Runs `sh -c SCRIPT` under oomguard (no batch flag, no retries) and returns its exit code,
/// stderr and summary.
fn run_sh(script: &str) -> (i32, String, Value) {
    let sb = Sandbox::new();
    let mut cmd = sb.run(&["--retries", "0"], &["sh", "-c", script]);
    // A core dump (SIGSEGV, SIGABRT) must not land in the crate.
    cmd.current_dir(sb.dir.path());
    let mut run = Running::start(&sb, cmd);
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    let code = code(status, &stderr);
    (code, stderr, sb.summary())
}

#[test]
fn job_exit_codes_are_oomguards() {
    for n in [0, 1, 2, 3, 42, 100, 126, 127, 128, 200, 255] {
        let (code, stderr, summary) = run_sh(&format!("exit {n}"));
        assert_eq!(code, n, "sh -c 'exit {n}'; stderr: {stderr}");
        let attempt = single_attempt(&summary);
        let (outcome, cause) = if n == 0 {
            ("succeeded", "ok")
        } else {
            ("failed", "failed")
        };
        assert_eq!(summary["outcome"], outcome, "exit {n}: {summary:#}");
        assert_eq!(attempt["cause"], cause, "exit {n}: {summary:#}");
        assert_eq!(attempt["exit_code"], n, "exit {n}: {summary:#}");
        assert_eq!(attempt["signal"], Value::Null, "exit {n}: {summary:#}");
    }
}

#[test]
fn job_death_by_signal_is_128_plus_n() {
    // SIGKILL is left out: without OOM evidence it is `killed`, which is relaunched. SIGINT here
    // comes from the job itself, not the user, so it is an ordinary failure.
    for (name, n) in [
        ("HUP", 1),
        ("INT", 2),
        ("QUIT", 3),
        ("ABRT", 6),
        ("USR1", 10),
        ("SEGV", 11),
        ("USR2", 12),
        ("TERM", 15),
    ] {
        let (code, stderr, summary) = run_sh(&format!("ulimit -c 0; kill -{name} $$"));
        assert_eq!(code, 128 + n, "kill -{name}; stderr: {stderr}");
        assert_eq!(summary["outcome"], "failed", "kill -{name}: {summary:#}");
        let attempt = single_attempt(&summary);
        assert_eq!(attempt["cause"], "failed", "kill -{name}: {summary:#}");
        assert_eq!(attempt["signal"], n, "kill -{name}: {summary:#}");
        assert_eq!(
            attempt["exit_code"],
            Value::Null,
            "kill -{name}: {summary:#}"
        );
    }
}

/// Runs a command that cannot start; checks the one-line error and that nothing was created.
fn assert_cannot_start(sb: &Sandbox, program: &str, want_code: i32) {
    let mut run = Running::start(sb, sb.run(&[], &[program, "--batch_size", "8"]));
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), want_code, "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {stderr}");
    assert!(lines[0].starts_with("oomguard: error:"), "stderr: {stderr}");
    assert!(
        lines[0].contains(program),
        "stderr does not name {program}: {stderr}"
    );
    assert!(
        !sb.run_dir().exists(),
        "a run directory was created for a command that cannot start"
    );
    assert!(
        !sb.path("state").exists(),
        "the default state dir was created"
    );
    assert!(run.stdout_seen.is_empty());
}

#[test]
fn command_not_found_is_127() {
    let sb = Sandbox::new();
    assert_cannot_start(&sb, "no-such-command-xyz", 127);
}

#[test]
fn command_not_executable_is_126() {
    let sb = Sandbox::new();
    let script = sb.path("train.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    // A plain file, mode 0644: not executable.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_cannot_start(&sb, script.to_str().unwrap(), 126);
}

// ---------------------------------------------------------------------------------------------
// 6: no orphans
// ---------------------------------------------------------------------------------------------

/// The PIDs tree.py records, in its order.
struct Tree {
    main: u32,
    sleep_in_group: u32,
    forked_child: u32,
    forked_grandchild: u32,
    setsid_sleep: u32,
}

impl Tree {
    fn all(&self) -> [u32; 5] {
        [
            self.main,
            self.sleep_in_group,
            self.forked_child,
            self.forked_grandchild,
            self.setsid_sleep,
        ]
    }

    /// The processes in the job's process group.
    fn in_group(&self) -> [u32; 4] {
        [
            self.main,
            self.sleep_in_group,
            self.forked_child,
            self.forked_grandchild,
        ]
    }
}

/// Starts oomguard on tree.py and reads the tree's PIDs, registering them all for cleanup.
fn start_tree(sb: &Sandbox, then: &str) -> (Running, Tree) {
    let pidfile = sb.path("pids");
    let job = [
        python().to_string(),
        util::fixture("tree.py"),
        pidfile.to_str().unwrap().to_string(),
        "--then".into(),
        then.into(),
    ];
    let mut run = Running::start(sb, sb.run(&["--grace", "10s"], &as_strs(&job)));
    let pids = util::read_pids(&pidfile, 5);
    assert_eq!(pids.len(), 5, "pid file: {pids:?}");
    // Register every process first, so that a failed assertion below leaks nothing.
    run.cleanup.track_group(pids[0]);
    for &pid in &pids {
        run.cleanup.track(pid);
    }
    if let (_, Some(guard)) = run.job_and_guard() {
        run.cleanup.track(guard);
    }
    let tree = Tree {
        main: pids[0],
        sleep_in_group: pids[1],
        forked_child: pids[2],
        forked_grandchild: pids[3],
        setsid_sleep: pids[4],
    };
    (run, tree)
}

/// Waits up to `timeout` for every one of `pids` to be gone; panics naming the survivors.
fn assert_all_gone(pids: &[u32], timeout: Duration, when: &str) {
    let gone = util::wait_until(timeout, || pids.iter().all(|&p| !util::alive(p)));
    if !gone {
        let survivors: Vec<String> = pids
            .iter()
            .filter(|&&p| util::alive(p))
            .map(|&p| format!("{p} ({})", cmdline(p)))
            .collect();
        panic!("{when}: processes of the job outlived oomguard: {survivors:?}");
    }
}

/// Waits up to `timeout` until no process of the run (found by its environment, so also those
/// the fixture did not record) is alive but those in `except`.
fn assert_run_gone(sb: &Sandbox, except: &[u32], timeout: Duration, when: &str) {
    let run_dir = sb.run_dir();
    let rest = || -> Vec<u32> {
        processes_of_run(&run_dir)
            .into_iter()
            .filter(|p| !except.contains(p))
            .collect()
    };
    if !util::wait_until(timeout, || rest().is_empty()) {
        let survivors: Vec<String> = rest()
            .into_iter()
            .map(|p| format!("{p} ({})", cmdline(p)))
            .collect();
        panic!("{when}: processes of the run outlived oomguard: {survivors:?}");
    }
}

#[test]
fn no_orphans_after_success() {
    let sb = Sandbox::new();
    let (mut run, tree) = start_tree(&sb, "exit");
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), 0, "stderr: {stderr}");
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "succeeded", "{summary:#}");
    assert_eq!(single_attempt(&summary)["cause"], "ok", "{summary:#}");
    // oomguard reaps every descendant; a short poll allows for a zombie handed to init.
    assert_all_gone(&tree.all(), Duration::from_secs(5), "after success");
    assert_run_gone(&sb, &[], Duration::from_secs(5), "after success");
}

#[test]
fn no_orphans_after_user_stop() {
    let sb = Sandbox::new();
    let (mut run, tree) = start_tree(&sb, "wait");
    run.signal(Signal::SIGTERM);
    let status = run.wait(PROMPT);
    let stderr = run.stderr();
    assert_eq!(code(status, &stderr), 128 + 15, "stderr: {stderr}");
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted", "{summary:#}");
    assert_eq!(
        single_attempt(&summary)["cause"],
        "interrupted",
        "{summary:#}"
    );
    // The setsid'd sleep is outside the job's group, but still a descendant: stopped too.
    assert_all_gone(&tree.all(), Duration::from_secs(5), "after a user stop");
    assert_run_gone(&sb, &[], Duration::from_secs(5), "after a user stop");
}

#[test]
fn no_orphans_in_the_group_after_oomguard_is_sigkilled() {
    let sb = Sandbox::new();
    let (mut run, tree) = start_tree(&sb, "wait");
    let (job, guard) = run.job_and_guard();
    assert_eq!(
        job,
        Some(tree.main),
        "oomguard's job child is tree.py's main process"
    );
    let guard = guard.expect("oomguard runs its guard process");

    run.signal(Signal::SIGKILL);
    let status = run.wait(PROMPT);
    assert_eq!(status.signal(), Some(9), "oomguard: {status:?}");

    // The main process dies of its parent-death signal, the rest of the group by the guard.
    // The setsid'd sleep left the group and has no parent-death signal: once oomguard is
    // SIGKILLed nothing can reach it, so it is not asserted here (Cleanup kills it).
    assert_all_gone(
        &tree.in_group(),
        Duration::from_secs(10),
        "after oomguard was SIGKILLed",
    );
    assert_run_gone(
        &sb,
        &[tree.setsid_sleep],
        Duration::from_secs(10),
        "after oomguard was SIGKILLed",
    );
    // The guard itself does not linger either.
    assert_all_gone(&[guard], Duration::from_secs(10), "the guard process");
}
