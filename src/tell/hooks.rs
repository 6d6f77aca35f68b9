//! Notification hooks: `--on-relaunch CMD` runs when oomguard decides to relaunch the job,
//! `--on-exit CMD` when the run ends, so someone not at the terminal hears of it (a mail, a
//! webhook). CMD is one string split into argv as a POSIX shell splits words (quotes and
//! backslashes honoured, nothing expanded) and run directly: no shell unless the user writes
//! one (`sh -c '...'`). Each hook gets the event in `OOMGUARD_*` variables (see
//! [`Occasion::env`]), its stdin from /dev/null and its output on a pipe that oomguard drains
//! into `<run dir>/hooks.log`, capped by `--log-max` as an attempt's log is (the same writer,
//! [`crate::output::attempt_log`], the same marker where output was cut), in a process group
//! of its own. A pipe and not the file itself: a hook holding the log's descriptor could write
//! past any cap.
//!
//! A hook is never fatal: one that cannot start, fails, or outlives its time limit (its whole
//! group is then killed) costs a warning. Hooks run while the attempt loop goes on (a relaunch
//! hook during the backoff); the loop waits for them only before the next attempt starts and
//! before oomguard exits, each at most until its limit. That wait is the caller's ([`Pending`]
//! is polled): it lives where the stop signals are heard. Waiting before an attempt is needed,
//! not only tidy: oomguard reaps every child while an attempt runs, and a hook reaped there
//! would be mistaken for one of the job's processes.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::judge::outcome::{Cause, Outcome};
use crate::output::attempt_log::AttemptLog;
use crate::output::console::{self, Reporter};
use crate::remember::record::summary::KnobValues;

/// How long a hook may run before it is killed, unless `--hook-timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The file in the run directory that hooks' output is appended to.
pub const LOG_NAME: &str = crate::remember::record::run_dir::HOOKS_LOG_NAME;

/// One hook command: as the user wrote it, and split into argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub text: String,
    pub argv: Vec<String>,
}

impl Hook {
    /// Splits `text` (the value of `flag`) as a shell splits words: `mail -s 'job done' me`
    /// is `["mail", "-s", "job done", "me"]`.
    pub fn parse(flag: &str, text: &str) -> Result<Hook, String> {
        match shlex::split(text) {
            None => Err(format!(
                "{flag} {text:?}: an unclosed quote or a trailing backslash: close the quote"
            )),
            Some(argv) if argv.is_empty() => Err(format!(
                "{flag} is empty: give a command, e.g. {flag} 'mail -s done me@example.org'"
            )),
            Some(argv) => Ok(Hook {
                text: text.to_string(),
                argv,
            }),
        }
    }
}

/// The hooks of a run and their time limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hooks {
    pub on_exit: Vec<Hook>,
    pub on_relaunch: Vec<Hook>,
    /// `--hook-timeout`.
    pub timeout: Duration,
}

impl Default for Hooks {
    fn default() -> Hooks {
        Hooks {
            on_exit: Vec::new(),
            on_relaunch: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// What a hook is run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The job is about to be relaunched.
    Relaunch,
    /// The run ended.
    Exit,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Relaunch => "relaunch",
            Event::Exit => "exit",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Event::Relaunch => "--on-relaunch",
            Event::Exit => "--on-exit",
        }
    }
}

/// Everything a hook is told.
#[derive(Debug, Clone)]
pub struct Occasion<'a> {
    pub event: Event,
    /// The run's outcome (on exit).
    pub outcome: Option<Outcome>,
    /// The attempt that just ended.
    pub attempt: u32,
    /// How it ended.
    pub cause: Option<Cause>,
    /// The knob values from here on: the next attempt's on a relaunch, the last attempt's on
    /// exit.
    pub knobs: &'a KnobValues,
    pub run_dir: &'a Path,
    /// The job file's `[env]`: a hook of the job sees what the job is given (for a job run as
    /// another user, nothing else of root's environment reaches either).
    pub job_env: &'a [(String, OsString)],
}

impl Occasion<'_> {
    /// The hook's variables: the job file's `[env]`, then oomguard's, always all of them, empty
    /// where not known (the outcome of a relaunch), so a `set -u` script need not test for each.
    pub fn env(&self) -> Vec<(String, OsString)> {
        let knobs = serde_json::to_string(self.knobs).expect("knob values are JSON values");
        let summary = self.run_dir.join("summary.json");
        let ours = [
            ("OOMGUARD_EVENT", self.event.as_str().into()),
            (
                "OOMGUARD_OUTCOME",
                self.outcome.map_or("", Outcome::as_str).into(),
            ),
            ("OOMGUARD_ATTEMPT", self.attempt.to_string().into()),
            (
                "OOMGUARD_CAUSE",
                self.cause.map_or("", Cause::as_str).into(),
            ),
            ("OOMGUARD_KNOBS", knobs.into()),
            // Paths as bytes: a run directory need not be UTF-8.
            ("OOMGUARD_RUN_DIR", self.run_dir.as_os_str().to_owned()),
            ("OOMGUARD_SUMMARY", summary.into_os_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v));
        self.job_env.iter().cloned().chain(ours).collect()
    }
}

/// A hook that was started and whose result has not come.
struct Started {
    flag: &'static str,
    text: String,
    /// The wrapper (`oomguard __hook`) that runs it.
    wrapper: Child,
    /// The wrapper's lines: the hook's PID, then its result (see [`wrapper_main`]).
    lines: mpsc::Receiver<String>,
    /// The hook's PID (its process group), once the wrapper said it.
    hook_pid: Option<u32>,
    /// A backstop past the wrapper's own limit, should the wrapper itself hang.
    deadline: Instant,
    timeout: Duration,
    /// The wrapper's result line, once it came.
    result: Option<String>,
    /// Disconnected once the hook's output is all in its log (the pipe's every write end
    /// closed); `None` where its output goes nowhere.
    drained: Option<mpsc::Receiver<()>>,
}

/// The hooks still running.
#[derive(Default)]
pub struct Pending {
    started: Vec<Started>,
    log: HooksLog,
    /// The bytes of the hooks' output already said to be cut from `hooks.log`.
    said_cut_bytes: u64,
}

/// The run's `hooks.log`: opened when the first hook runs, then shared by every hook's drain.
#[derive(Default)]
enum HooksLog {
    #[default]
    NotYet,
    Open(Arc<Mutex<AttemptLog>>),
    /// It could not be made: hooks' output goes to /dev/null.
    Unavailable,
}

impl Pending {
    /// Starts every hook of `occasion.event` without waiting for any; one that cannot start is
    /// a warning.
    ///
    /// Each runs under a wrapper, our own executable as `oomguard __hook`, which starts it,
    /// kills its group at the limit, reaps whatever it left (as a subreaper of its own), and
    /// writes the result on a pipe. The pipe, not waitpid, carries the result because
    /// oomguard reaps any child that ends while it waits between attempts; and nothing of a
    /// hook is left to be reaped by an attempt, where a killed process counts as the job's.
    ///
    /// `open_log` makes the hooks' capped log (`<run dir>/hooks.log`, see
    /// [`crate::remember::record::run_dir::RunDir::open_hooks_log`]); it is called once in a run,
    /// when the first hook is to run.
    pub fn start(
        &mut self,
        hooks: &Hooks,
        occasion: &Occasion,
        report: &Reporter,
        open_log: impl FnOnce() -> std::io::Result<AttemptLog>,
    ) {
        let list = match occasion.event {
            Event::Relaunch => &hooks.on_relaunch,
            Event::Exit => &hooks.on_exit,
        };
        if list.is_empty() {
            return;
        }
        let env = occasion.env();
        if matches!(self.log, HooksLog::NotYet) {
            self.log = match open_log() {
                Ok(log) => HooksLog::Open(Arc::new(Mutex::new(log))),
                Err(e) => {
                    tracing::info!("hooks write to /dev/null: {e}");
                    HooksLog::Unavailable
                }
            };
        }
        let flag = occasion.event.flag();
        for hook in list {
            let output = match &self.log {
                HooksLog::Open(log) => drain_into(Arc::clone(log))
                    .map_err(|e| tracing::info!("{flag} `{}` writes to /dev/null: {e}", hook.text))
                    .ok(),
                HooksLog::NotYet | HooksLog::Unavailable => None,
            };
            let (write_end, drained) = match output {
                Some((write_end, drained)) => (Some(write_end), Some(drained)),
                None => (None, None),
            };
            match spawn_wrapped(hook, &env, write_end, hooks.timeout) {
                Ok((wrapper, lines)) => self.started.push(Started {
                    flag,
                    text: hook.text.clone(),
                    wrapper,
                    lines,
                    hook_pid: None,
                    deadline: Instant::now() + hooks.timeout + WRAPPER_SLACK,
                    timeout: hooks.timeout,
                    result: None,
                    drained,
                }),
                Err(e) => report.warn(&format!(
                    "{flag} `{}` could not start: {e}; the run goes on",
                    hook.text
                )),
            }
        }
    }

    /// Collects the results that came by `now`, warning for each hook that failed or was
    /// killed at its limit. A hook counts as done once its output is all in the log too (or at
    /// its deadline: a process it left holding the pipe is not waited for). Returns whether
    /// none is left.
    pub fn check(&mut self, now: Instant, report: &Reporter, log_dir: &Path) -> bool {
        let mut left = Vec::new();
        for mut hook in self.started.drain(..) {
            if hook.result.is_none() {
                hook.result = loop {
                    match hook.lines.try_recv() {
                        Ok(line) => match line.strip_prefix("pid ") {
                            Some(pid) => hook.hook_pid = pid.trim().parse().ok(),
                            None => break Some(line),
                        },
                        Err(mpsc::TryRecvError::Empty) => break None,
                        // The wrapper ended without a result line.
                        Err(mpsc::TryRecvError::Disconnected) => break Some(String::new()),
                    }
                };
            }
            let drained = hook
                .drained
                .as_ref()
                .is_none_or(|rx| matches!(rx.try_recv(), Err(mpsc::TryRecvError::Disconnected)));
            let why = match hook.result.take() {
                Some(line) if drained || now >= hook.deadline => {
                    match describe(&line, hook.timeout) {
                        None => continue,
                        Some(why) => why,
                    }
                }
                Some(line) => {
                    hook.result = Some(line);
                    left.push(hook);
                    continue;
                }
                None if now >= hook.deadline => {
                    // Looked up while the wrapper is still the hook's parent.
                    let group = hook_group(hook.hook_pid, hook.wrapper.id());
                    let _ = hook.wrapper.kill();
                    if let Some(group) = group {
                        let _ = killpg(group, Signal::SIGKILL);
                    }
                    format!(
                        "did not finish within {}: killed",
                        console::short_duration(hook.timeout)
                    )
                }
                None => {
                    left.push(hook);
                    continue;
                }
            };
            report.warn(&format!(
                "{} `{}` {why} (its output is in {}); the run goes on",
                hook.flag,
                hook.text,
                log_dir.join(LOG_NAME).display()
            ));
        }
        self.started = left;
        // Said once the hooks running are done, and again only where more was cut since: exit
        // hooks run after the run's closing lines, which name the cut attempt logs.
        if let (true, HooksLog::Open(log)) = (self.started.is_empty(), &self.log) {
            let log = log.lock().unwrap_or_else(|e| e.into_inner());
            if log.cut_bytes() > self.said_cut_bytes {
                self.said_cut_bytes = log.cut_bytes();
                if let Some(line) = log.cut_line() {
                    report.warn(&line);
                }
            }
        }
        self.started.is_empty()
    }

    /// Kills every hook still running (the user asked oomguard to stop).
    pub fn kill_all(&mut self, report: &Reporter) {
        for mut hook in self.started.drain(..) {
            while let Ok(line) = hook.lines.try_recv() {
                if let Some(pid) = line.strip_prefix("pid ") {
                    hook.hook_pid = pid.trim().parse().ok();
                }
            }
            if let Some(group) = hook_group(hook.hook_pid, hook.wrapper.id()) {
                let _ = killpg(group, Signal::SIGKILL);
            }
            report.warn(&format!(
                "{} `{}` killed: oomguard was asked to stop",
                hook.flag, hook.text
            ));
        }
    }
}

/// The hook's process group to kill, from the PID its wrapper said: only a process whose parent
/// is that wrapper and which leads its own group. The wrapper may run as the job's user, so its
/// word alone is not enough for root to signal a group: `pid 1` would make it `kill(-1)`.
fn hook_group(said: Option<u32>, wrapper: u32) -> Option<Pid> {
    let pid = said.filter(|&pid| pid > 1)?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the name: state, ppid, pgrp.
    let fields = crate::guard::liveness::stat_fields(&stat);
    let ppid: u32 = fields.get(1)?.parse().ok()?;
    let pgrp: u32 = fields.get(2)?.parse().ok()?;
    (ppid == wrapper && pgrp == pid).then(|| Pid::from_raw(pid as i32))
}

/// How often a caller polls [`Pending::check`] while it waits.
pub const POLL: Duration = Duration::from_millis(20);

/// How long past a hook's limit oomguard waits for its wrapper's word before giving up on it.
const WRAPPER_SLACK: Duration = Duration::from_secs(5);

/// A pipe whose write end is a hook's output: a thread of its own reads the other end into
/// `log` until every writer has closed it, with the job's user's filesystem identity and
/// without `CAP_SYS_RESOURCE` where oomguard acts for one (as the job's output is written:
/// [`crate::guard::principal::write_as_user_from_now`]). The receiver disconnects when it is done.
fn drain_into(log: Arc<Mutex<AttemptLog>>) -> std::io::Result<(OwnedFd, mpsc::Receiver<()>)> {
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (done, drained) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("hook-output".into())
        .spawn(move || {
            let _done = done;
            let mut pipe = std::fs::File::from(read_end);
            // Past a failed switch or write the pipe is still read, so a hook never blocks on it.
            let mut keep = crate::guard::principal::write_as_user_from_now().is_ok();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) if keep => {
                        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                        keep = log.write_all(&buf[..n]).is_ok();
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        })?;
    Ok((write_end, drained))
}

/// Starts `oomguard __hook TIMEOUT_MS -- ARGV...` with the hook's environment, its output
/// going to `output` (a pipe drained into the log), or nowhere; a thread forwards the wrapper's
/// lines.
///
/// A root oomguard acting for a job's `user` ([`crate::guard::principal`]) starts the wrapper, and
/// so the hook, as that user: its groups, gid and uid set between fork and exec as for the job, and
/// its HOME, USER and LOGNAME. Whoever runs a hook never gets a descriptor of oomguard's beyond its
/// stdin, stdout and stderr.
fn spawn_wrapped(
    hook: &Hook,
    env: &[(String, OsString)],
    output: Option<OwnedFd>,
    timeout: Duration,
) -> std::io::Result<(Child, mpsc::Receiver<String>)> {
    let exe = std::env::current_exe()?;
    let who = crate::guard::principal::acting_for().cloned();
    let mut cmd = Command::new(exe);
    cmd.arg("__hook")
        .arg(timeout.as_millis().to_string())
        .arg("--")
        .args(&hook.argv)
        // What the job would inherit (no outer oomguard's variables, none of the service
        // manager's, and for another user only the basics), then the hook's own.
        .env_clear()
        .envs(crate::launch::child::inherited_env(
            std::env::vars_os(),
            who.as_ref(),
        ))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    match output {
        Some(output) => cmd.stderr(output),
        None => cmd.stderr(Stdio::null()),
    };
    if who.is_none() {
        // Its own group: Ctrl-C at the terminal is oomguard's to handle.
        cmd.process_group(0);
    }
    // SAFETY: between fork and exec only system calls are made (no allocation: `who` was
    // cloned before the fork).
    unsafe {
        cmd.pre_exec(move || {
            crate::launch::child::close_other_fds()?;
            if let Some(who) = &who {
                // Another user's hook gets no terminal of root's (see child::leave_terminal).
                crate::launch::child::leave_terminal()?;
                crate::launch::child::become_user(who)?;
            }
            Ok(())
        });
    }
    let mut wrapper = cmd.spawn()?;
    let stdout = wrapper.stdout.take().expect("stdout was piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok((wrapper, rx))
}

/// The warning for a wrapper's result line, or `None` for a success: `exit 0`, `exit N`,
/// `signal N`, `timeout`, `error TEXT`; empty when the wrapper died without one.
fn describe(line: &str, timeout: Duration) -> Option<String> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    Some(match (word, rest.trim().parse::<i32>()) {
        ("exit", Ok(0)) => return None,
        ("exit", Ok(code)) => format!("failed (exit {code})"),
        ("signal", Ok(sig)) => match Signal::try_from(sig) {
            Ok(sig) => format!("was killed by {sig}"),
            Err(_) => format!("was killed by signal {sig}"),
        },
        ("timeout", _) => format!(
            "did not finish within {}: killed",
            console::short_duration(timeout)
        ),
        ("error", _) => format!("could not start: {rest}"),
        _ => "ended without a result (its wrapper died)".to_string(),
    })
}

/// `oomguard __hook TIMEOUT_MS -- ARGV...`: runs one hook and writes `pid N`, then its result,
/// on stdout (see [`describe`]). The hook gets this process's environment and stderr (the
/// hooks' log) as its stdout and stderr, and a process group of its own, killed whole at the
/// limit; this process is a subreaper, so what the hook leaves behind is reaped here.
pub fn wrapper_main(timeout_ms: u64, argv: &[OsString]) -> i32 {
    let mut out = std::io::stdout().lock();
    let Some((program, args)) = argv.split_first() else {
        let _ = writeln!(out, "error no command");
        return 0;
    };
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(Stdio::from);
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).process_group(0);
    if let Ok(stdout) = stdout {
        cmd.stdout(stdout);
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(out, "error {e}");
            return 0;
        }
    };
    let pgid = Pid::from_raw(child.id() as i32);
    let _ = writeln!(out, "pid {}", child.id());
    let _ = out.flush();
    let ended = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(POLL),
            Err(_) => break None,
        }
    };
    // What the hook started in its group may finish within the limit; then it is killed.
    while Instant::now() < deadline && killpg(pgid, None).is_ok() {
        reap_any();
        std::thread::sleep(POLL);
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    if ended.is_none() {
        let _ = child.wait();
    }
    // Killed processes take a moment to die: a short, bounded wait for them.
    let settle = Instant::now() + Duration::from_millis(500);
    while Instant::now() < settle && killpg(pgid, None).is_ok() {
        reap_any();
        std::thread::sleep(Duration::from_millis(5));
    }
    reap_any();
    let line = match ended {
        None => "timeout".to_string(),
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => "exit 1".to_string(),
        },
    };
    let _ = writeln!(out, "{line}");
    0
}

/// Reaps every child that has ended (orphans of the hook that came to this subreaper).
fn reap_any() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hook_is_split_like_shell_words_and_never_run_by_a_shell() {
        // (text, argv, or the words of the refusal)
        let table: &[(&str, Result<&[&str], &str>)] = &[
            ("notify-send done", Ok(&["notify-send", "done"])),
            (
                "mail -s 'job done' me@example.org",
                Ok(&["mail", "-s", "job done", "me@example.org"]),
            ),
            (
                r#"curl -d "{\"text\": \"x\"}" https://h/x"#,
                Ok(&["curl", "-d", r#"{"text": "x"}"#, "https://h/x"]),
            ),
            // Nothing is expanded: the hook gets `$HOME` and `*` as written.
            ("echo $HOME *", Ok(&["echo", "$HOME", "*"])),
            (
                "sh -c 'echo \"$OOMGUARD_EVENT\" | mail me'",
                Ok(&["sh", "-c", "echo \"$OOMGUARD_EVENT\" | mail me"]),
            ),
            // README's webhook: inside double quotes `\"` and `\$` are `"` and `$`, as in sh.
            (
                r#"sh -c "curl -d @\"\$OOMGUARD_SUMMARY\" https://h/x""#,
                Ok(&["sh", "-c", r#"curl -d @"$OOMGUARD_SUMMARY" https://h/x"#]),
            ),
            ("", Err("is empty")),
            ("   ", Err("is empty")),
            ("mail -s 'unclosed", Err("unclosed quote")),
        ];
        for (text, want) in table {
            match (Hook::parse("--on-exit", text), want) {
                (Ok(hook), Ok(argv)) => assert_eq!(hook.argv, *argv, "{text}"),
                (Err(e), Err(words)) => {
                    assert!(e.contains(words), "{text}: {e}");
                    assert!(e.starts_with("--on-exit"), "{text}: {e}");
                }
                (got, _) => panic!("{text}: {got:?}"),
            }
        }
    }

    #[test]
    fn the_environment_tells_the_event() {
        let knobs = KnobValues(vec![("batch".into(), json!(4)), ("accum".into(), json!(2))]);
        let run_dir = Path::new("/runs/r1");
        let get = |env: &[(String, OsString)], key: &str| {
            env.iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.to_string_lossy().into_owned())
                .unwrap_or_else(|| panic!("{key} is set"))
        };
        let relaunch = Occasion {
            event: Event::Relaunch,
            outcome: None,
            attempt: 1,
            cause: Some(Cause::DeviceOom),
            knobs: &knobs,
            run_dir,
            job_env: &[],
        }
        .env();
        let exit = Occasion {
            event: Event::Exit,
            outcome: Some(Outcome::GaveUp),
            attempt: 3,
            cause: Some(Cause::OomKilled),
            knobs: &knobs,
            run_dir,
            job_env: &[],
        }
        .env();
        // (variable, on relaunch, on exit)
        let table = [
            ("OOMGUARD_EVENT", "relaunch", "exit"),
            ("OOMGUARD_OUTCOME", "", "gave_up"),
            ("OOMGUARD_ATTEMPT", "1", "3"),
            ("OOMGUARD_CAUSE", "device_oom", "oom_killed"),
            (
                "OOMGUARD_KNOBS",
                r#"{"batch":4,"accum":2}"#,
                r#"{"batch":4,"accum":2}"#,
            ),
            ("OOMGUARD_RUN_DIR", "/runs/r1", "/runs/r1"),
            (
                "OOMGUARD_SUMMARY",
                "/runs/r1/summary.json",
                "/runs/r1/summary.json",
            ),
        ];
        for (key, on_relaunch, on_exit) in table {
            assert_eq!(get(&relaunch, key), on_relaunch, "{key}");
            assert_eq!(get(&exit, key), on_exit, "{key}");
        }
        assert_eq!(relaunch.len(), table.len());
    }

    #[test]
    fn results_are_worded() {
        let limit = Duration::from_secs(30);
        let table = [
            ("exit 0", None),
            ("exit 3", Some("failed (exit 3)")),
            ("signal 9", Some("was killed by SIGKILL")),
            ("timeout", Some("did not finish within 30.0s: killed")),
            ("error No such file", Some("could not start: No such file")),
            ("", Some("ended without a result (its wrapper died)")),
        ];
        for (line, want) in table {
            assert_eq!(describe(line, limit).as_deref(), want, "{line}");
        }
    }

    #[test]
    fn only_a_group_the_wrapper_started_is_killed() {
        let me = std::process::id();
        // Our own process: its parent is not a wrapper we started, and PID 1 never is.
        assert_eq!(hook_group(Some(me), 12345), None);
        assert_eq!(hook_group(Some(1), 0), None);
        assert_eq!(hook_group(None, me), None);
        // A child of ours leading its own group is.
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        assert_eq!(
            hook_group(Some(child.id()), me),
            Some(Pid::from_raw(child.id() as i32))
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
