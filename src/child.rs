//! Spawns the job from its argv (never through a shell) as the leader of a new process group,
//! signals that group, and reaps whatever exits below oomguard. Also the *guard*: a tiny helper
//! process that kills the job's group if oomguard itself dies without cleaning up (SIGKILL, OOM).
//!
//! It does not decide when to signal or what an ending means; `supervise` and `classify` do.

use std::ffi::OsStr;
use std::io::{self, BufRead, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};

use nix::errno::Errno;
use nix::sys::signal::{killpg, signal, SigHandler, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getppid, Pid};

use crate::outcome::Ending;

/// Why a command could not be started. Exit codes follow the shell: 127 not found, 126 not
/// executable.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("command not found: {0} (check the spelling, or give its full path)")]
    NotFound(String),
    #[error("command not executable: {0} (check its permissions: chmod +x)")]
    NotExecutable(String),
    #[error("cannot run {0}: the interpreter on its first `#!` line was not found")]
    BadInterpreter(String),
    #[error("cannot prepare the attempt: {0}")]
    Setup(String),
    #[error("could not start {program}: {source}")]
    Other { program: String, source: io::Error },
}

impl SpawnError {
    pub fn exit_code(&self) -> i32 {
        match self {
            SpawnError::NotFound(_) => 127,
            SpawnError::NotExecutable(_)
            | SpawnError::BadInterpreter(_)
            | SpawnError::Other { .. } => 126,
            SpawnError::Setup(_) => crate::EXIT_INTERNAL,
        }
    }
}

/// Finds the program a launch would run, the way execvp(3) would, so a typo is reported before
/// anything is created or started.
pub fn resolve_program(program: &str, path_var: Option<&OsStr>) -> Result<PathBuf, SpawnError> {
    let candidates: Vec<PathBuf> = if program.contains('/') {
        vec![PathBuf::from(program)]
    } else {
        let path_var = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
        std::env::split_paths(path_var)
            .map(|dir| dir.join(program))
            .collect()
    };
    let mut not_executable = None;
    for candidate in candidates {
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(candidate)
            }
            Ok(_) => {
                not_executable.get_or_insert(candidate);
            }
            Err(_) => {}
        }
    }
    match not_executable {
        Some(path) => Err(SpawnError::NotExecutable(path.display().to_string())),
        None => Err(SpawnError::NotFound(program.to_string())),
    }
}

/// What to start for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub argv: Vec<String>,
    /// Variables set on top of oomguard's own environment.
    pub env: Vec<(String, String)>,
}

/// A started job: its PID (also its process group id) and its output pipes.
pub struct Spawned {
    pub pid: u32,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Starts the launch in a new process group with piped stdout/stderr and inherited stdin. The
/// child gets SIGKILL if oomguard dies (PR_SET_PDEATHSIG), so it never outlives us. The caller
/// must run on the thread that stays alive for the whole run: the parent-death signal fires when
/// the *thread* that forked exits.
///
/// With `cgroup_procs` (an fd on a cgroup's `cgroup.procs`, see [`crate::cgroup::JobCgroup`]), the
/// child moves itself into that cgroup between fork and exec, so the job's first instruction
/// already runs under the cgroup's limit and accounting.
pub fn spawn(launch: &Launch, cgroup_procs: Option<OwnedFd>) -> Result<Spawned, SpawnError> {
    let program = &launch.argv[0];
    let mut cmd = Command::new(program);
    cmd.args(&launch.argv[1..])
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let parent = Pid::this();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls
    // (prctl, getppid, write); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = &cgroup_procs {
                crate::cgroup::JobCgroup::join_from_child(fd.as_fd())?;
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // If oomguard died between fork and prctl, the signal will never come: stop here.
            if getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc_esrch()));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| match source.kind() {
        // The file is there, so what is missing is the interpreter its `#!` line names.
        io::ErrorKind::NotFound if Path::new(program).is_file() => {
            SpawnError::BadInterpreter(program.clone())
        }
        io::ErrorKind::NotFound => SpawnError::NotFound(program.clone()),
        io::ErrorKind::PermissionDenied => SpawnError::NotExecutable(program.clone()),
        _ => SpawnError::Other {
            program: program.clone(),
            source,
        },
    })?;
    // The Child handle is dropped without waiting: reaping is done by `reap_ready`, which sees
    // every descendant as we are a subreaper.
    Ok(Spawned {
        pid: child.id(),
        stdout: child.stdout.take().expect("stdout was piped"),
        stderr: child.stderr.take().expect("stderr was piped"),
    })
}

fn libc_esrch() -> i32 {
    Errno::ESRCH as i32
}

/// Sends `signal` to every process of group `pgid`. Returns false when the group is gone.
pub fn signal_group(pgid: u32, signal: Signal) -> bool {
    killpg(Pid::from_raw(pgid as i32), signal).is_ok()
}

/// Sends `signal` to one process. Returns false when it is gone.
pub fn signal_pid(pid: u32, signal: Signal) -> bool {
    nix::sys::signal::kill(Pid::from_raw(pid as i32), signal).is_ok()
}

/// Makes oomguard the reaper of every orphaned descendant (PR_SET_CHILD_SUBREAPER), so a job's
/// grandchildren whose parent died are re-parented to us, seen, and reaped.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    Ok(())
}

/// Reaps every child that has ended, without blocking: `waitpid(-1, WNOHANG)` until none is left.
pub fn reap_ready() -> Vec<(u32, Ending)> {
    let mut reaped = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => {
                reaped.push((pid.as_raw() as u32, Ending::Exited(code)))
            }
            Ok(WaitStatus::Signaled(pid, signal, core_dumped)) => reaped.push((
                pid.as_raw() as u32,
                Ending::Signaled {
                    signal: signal as i32,
                    core_dumped,
                },
            )),
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    reaped
}

/// The guard: a second oomguard process (`oomguard __guard`) that holds the read end of a pipe
/// from us. If we die without saying goodbye, the pipe reads EOF and the guard kills the job's
/// process group. Grandchildren do not get the parent-death signal; this catches them.
pub struct Guard {
    child: Child,
    stdin: ChildStdin,
}

impl Guard {
    /// Starts the guard from our own executable, in its own process group so a terminal's Ctrl-C
    /// does not reach it.
    pub fn start() -> io::Result<Guard> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .arg("__guard")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take().expect("stdin was piped");
        Ok(Guard { child, stdin })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tells the guard which group to kill if we die; `None` when no attempt is running.
    pub fn watch(&mut self, pgid: Option<u32>) {
        let line = match pgid {
            Some(pgid) => format!("watch {pgid}\n"),
            None => "unwatch\n".to_string(),
        };
        // A dead guard cannot protect anything, but must not stop the job either.
        if let Err(e) = self.stdin.write_all(line.as_bytes()) {
            tracing::warn!("guard process gone: {e}");
        }
    }

    /// Says goodbye (nothing to kill) and reaps the guard.
    pub fn release(mut self) {
        let _ = self.stdin.write_all(b"done\n");
        drop(self.stdin);
        let _ = waitpid(Pid::from_raw(self.child.id() as i32), None);
    }
}

/// The guard's main loop (`oomguard __guard`): follow `watch`/`unwatch`/`done` lines on stdin; at
/// EOF without `done`, SIGKILL the watched group. Returns the exit code.
pub fn guard_main(input: impl BufRead) -> i32 {
    ignore_stop_signals();
    guard_loop(input)
}

fn ignore_stop_signals() {
    // Only our parent's death should end us; signals meant for the terminal or the unit are not.
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: SIG_IGN installs no handler code.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
}

fn guard_loop(input: impl BufRead) -> i32 {
    let mut watched: Option<u32> = None;
    for line in input.lines() {
        let Ok(line) = line else { break };
        match line.split_once(' ') {
            Some(("watch", pgid)) => watched = pgid.trim().parse().ok(),
            _ if line == "unwatch" => watched = None,
            _ if line == "done" => return 0,
            _ => {}
        }
    }
    if let Some(pgid) = watched {
        signal_group(pgid, Signal::SIGKILL);
    }
    0
}

/// Whether `path` names an existing directory we could create files in.
pub fn is_writable_dir(path: &Path) -> bool {
    nix::unistd::access(
        path,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_execvp() {
        assert!(resolve_program("sh", std::env::var_os("PATH").as_deref()).is_ok());
        assert!(matches!(
            resolve_program("no-such-program-oomguard", None),
            Err(SpawnError::NotFound(_))
        ));
        assert!(matches!(
            resolve_program("/no/such/file", None),
            Err(SpawnError::NotFound(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("train.py");
        std::fs::write(&script, "print(1)").unwrap();
        let err = resolve_program(script.to_str().unwrap(), None).unwrap_err();
        assert!(matches!(err, SpawnError::NotExecutable(_)));
        assert_eq!(err.exit_code(), 126);
        // A directory is not a program either.
        assert!(matches!(
            resolve_program(dir.path().to_str().unwrap(), None),
            Err(SpawnError::NotExecutable(_))
        ));
    }

    #[test]
    fn guard_kills_only_without_goodbye() {
        let spawn_group = || {
            let child = Command::new("sleep")
                .arg("30")
                .process_group(0)
                .spawn()
                .unwrap();
            child
        };
        // EOF while watching: the group dies.
        let mut victim = spawn_group();
        let input = format!("watch {}\n", victim.id());
        guard_loop(input.as_bytes());
        let status = victim.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        // `done` or `unwatch`: nothing is killed.
        for tail in ["done\n", "unwatch\n"] {
            let mut survivor = spawn_group();
            let input = format!("watch {}\n{tail}", survivor.id());
            guard_loop(input.as_bytes());
            assert!(survivor.try_wait().unwrap().is_none(), "{tail}");
            survivor.kill().unwrap();
            survivor.wait().unwrap();
        }
    }
}
