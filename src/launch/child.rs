//! Spawns the job from its argv (never through a shell) as the leader of a new process group
//! (of a new session, with no terminal of oomguard's, when it runs as another user), with the
//! environment it inherits ([`inherited_env`]), signals that group and the job's processes
//! (through pidfds), and reaps whatever exits below oomguard. Also the *guard*: a tiny helper
//! process that kills the job's group, and everything in the attempt's cgroup, and removes that
//! cgroup, if oomguard itself dies without cleaning up (SIGKILL, OOM), and then puts back the
//! config files oomguard had patched (see [`crate::knobs::patch::restore_entry`]).
//!
//! It does not decide when to signal or what an ending means; [`crate::supervise`] and
//! [`crate::judge::classify`] do.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufRead, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, signal, SigHandler, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{getppid, Pid};

use crate::guard::pinned::{target, Pinned};
use crate::guard::principal::RunAs;
use crate::guard::program::Missing;
use crate::judge::outcome::Ending;
use crate::launch::terminal::Pty;

/// Why a command could not be started. Exit codes follow the shell: 127 not found, 126 not
/// executable ([`SpawnError::exit_code`], which [`crate::error`] keeps with every other status).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("command not found: {0} (check the spelling, or give its full path)")]
    NotFound(String),
    #[error("command not executable: {0} (check its permissions: chmod +x)")]
    NotExecutable(String),
    #[error(
        "command not found as user {1}: {0} (the job runs as {1}: give a path that user can reach)"
    )]
    NotFoundFor(String, String),
    #[error(
        "command not executable by user {1}: {0} (the job runs as {1}: check its permissions)"
    )]
    NotExecutableFor(String, String),
    #[error("cannot run {0}: the interpreter on its first `#!` line was not found")]
    BadInterpreter(String),
    #[error("cannot prepare the attempt: {0}")]
    Setup(String),
    #[error("could not start {program}: {source}")]
    Other { program: String, source: io::Error },
}

/// [`resolve_program`] as `who` would find it (a job file's `user`, when oomguard is root): with
/// that user's filesystem identity, so root's lookup never tells anyone whether a file exists
/// where they cannot look (a program in `/root` is "not found" for them either way).
pub fn resolve_program_for(
    program: impl AsRef<OsStr>,
    path_var: Option<&OsStr>,
    who: Option<&RunAs>,
) -> Result<PathBuf, SpawnError> {
    let mut found = None;
    crate::guard::principal::as_recorded(who, || {
        found = Some(resolve_program(program.as_ref(), path_var));
        Ok(())
    })
    .map_err(|e| SpawnError::Setup(e.to_string()))?;
    let user = |e: SpawnError| match (e, who) {
        (SpawnError::NotFound(program), Some(who)) => {
            SpawnError::NotFoundFor(program, who.name.clone())
        }
        (SpawnError::NotExecutable(program), Some(who)) => {
            SpawnError::NotExecutableFor(program, who.name.clone())
        }
        (e, _) => e,
    };
    found.expect("the lookup ran").map_err(user)
}

/// Finds the program a launch would run ([`crate::guard::program::find`]), so a typo is
/// reported before anything is created or started, as the launch's error.
pub fn resolve_program(
    program: impl AsRef<OsStr>,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, SpawnError> {
    crate::guard::program::find(program.as_ref(), path_var).map_err(|missing| match missing {
        Missing::NotExecutable(path) => SpawnError::NotExecutable(path),
        Missing::NotFound(program) => SpawnError::NotFound(program),
    })
}

/// What to start for one attempt.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Bytes, passed to execve as they are: not necessarily UTF-8.
    pub argv: Vec<OsString>,
    /// Variables set on top of oomguard's own environment.
    pub env: Vec<(String, OsString)>,
    /// Another user to run the job as (a job file's `user`); oomguard keeps its own identity.
    pub run_as: Option<RunAs>,
    /// The write end of the probe's pipe (see [`crate::probe`]), which the job inherits at
    /// [`crate::probe::PROBE_FD`].
    pub probe_fd: Option<std::sync::Arc<OwnedFd>>,
}

/// Between fork and exec: drops root for `who`, groups first (setgroups, setgid) and uid last,
/// since after setuid no other change is allowed. Async-signal-safe: three system calls on
/// data prepared before the fork, no allocation.
pub(crate) fn become_user(who: &RunAs) -> io::Result<()> {
    nix::unistd::setgroups(&who.groups)?;
    nix::unistd::setgid(who.gid)?;
    nix::unistd::setuid(who.uid)?;
    Ok(())
}

/// Between fork and exec: every descriptor above stderr is marked close-on-exec, so what runs
/// next (a hook) inherits nothing of oomguard's but stdin, stdout and stderr, whichever way a
/// descriptor was opened. `close_range(2)` (Linux 5.11) with `CLOSE_RANGE_CLOEXEC`; on an older
/// kernel the descriptors oomguard opens are close-on-exec already (Rust's default).
pub(crate) fn close_other_fds() -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: nix::libc::c_uint = 1 << 2;
    // SAFETY: a system call on integers only.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_close_range,
            3 as nix::libc::c_uint,
            nix::libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    match rc {
        0 => Ok(()),
        _ if io::Error::last_os_error().raw_os_error() == Some(nix::libc::ENOSYS) => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Between fork and exec: the probe's pipe `fd` at [`crate::probe::PROBE_FD`], open across
/// exec (dup2 makes the copy so; a pipe already there keeps its close-on-exec flag, cleared).
fn give_probe_fd(fd: std::os::fd::RawFd) -> io::Result<()> {
    let target = crate::probe::PROBE_FD;
    // SAFETY: system calls on integers only.
    let rc = unsafe {
        if fd == target {
            nix::libc::fcntl(fd, nix::libc::F_SETFD, 0)
        } else {
            nix::libc::dup2(fd, target)
        }
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A started job: its PID (also its process group id) and its output.
pub struct Spawned {
    pub pid: u32,
    pub output: JobOutput,
    /// Whether it leads a session of its own ([`leave_terminal`]): then job control stops it
    /// with SIGSTOP, as the kernel drops a SIGTSTP to a group with no parent in its session.
    pub own_session: bool,
}

/// Where the job's stdout and stderr can be read.
pub enum JobOutput {
    /// Two pipes.
    Pipes {
        stdout: ChildStdout,
        stderr: ChildStderr,
    },
    /// Both on a pseudo-terminal, read from its master (see [`crate::launch::terminal`]).
    Terminal { master: File },
}

/// Starts the launch in a new process group (a new session for another user: see
/// [`leave_terminal`]), its stdout and stderr on pipes or a pseudo-terminal (below), stdin
/// inherited (but never root's terminal for another user). The
/// child gets SIGKILL if oomguard dies (PR_SET_PDEATHSIG), so it never outlives us. The caller
/// must run on the thread that stays alive for the whole run: the parent-death signal fires when
/// the *thread* that forked exits.
///
/// With `cgroup_procs` (an fd on a cgroup's `cgroup.procs`, see
/// [`crate::observe::cgroup::JobCgroup`]), the child moves itself into that cgroup between fork and
/// exec, so the job's first instruction already runs under the cgroup's limit and accounting.
///
/// With `pty`, the job's stdout and stderr are that pseudo-terminal's slave (our copy is closed
/// on return) and its master is handed back to read; without, they are pipes.
pub fn spawn(
    launch: &Launch,
    cgroup_procs: Option<OwnedFd>,
    pty: Option<Pty>,
) -> Result<Spawned, SpawnError> {
    let program = &launch.argv[0];
    let mut cmd = Command::new(program);
    // Before the launch's own variables, so that an `[env]` HOME still wins.
    cmd.env_clear()
        .envs(inherited_env(std::env::vars_os(), launch.run_as.as_ref()));
    let run_as = launch.run_as.clone();
    // A job run as another user never gets root's terminal: from it, TIOCSTI could type into
    // root's shell. It reads /dev/null instead, and starts a session of its own (below).
    let stdin = match &launch.run_as {
        Some(_) if std::io::IsTerminal::is_terminal(&std::io::stdin()) => Stdio::null(),
        _ => Stdio::inherit(),
    };
    cmd.args(&launch.argv[1..])
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin);
    let own_session = launch.run_as.is_some();
    if !own_session {
        cmd.process_group(0);
    }
    let master = match pty {
        Some(Pty { master, slave }) => {
            let for_stderr = slave.try_clone().map_err(|e| {
                SpawnError::Setup(format!("cannot duplicate the pseudo-terminal: {e}"))
            })?;
            cmd.stdout(Stdio::from(slave))
                .stderr(Stdio::from(for_stderr));
            Some(master)
        }
        None => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            None
        }
    };
    let parent = Pid::this();
    let probe_fd = launch.probe_fd.as_ref().map(|fd| fd.as_raw_fd());
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls
    // (setsid, setgroups, setgid, setuid, close_range, dup2, fcntl, prctl, getppid, write); it
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = &cgroup_procs {
                crate::observe::cgroup::JobCgroup::join_from_child(fd.as_fd())?;
            }
            if own_session {
                leave_terminal()?;
            }
            // Before the parent-death signal: changing the uid or gid clears it. A job run as
            // another user inherits no descriptor of root's beyond its stdio.
            if let Some(who) = &run_as {
                close_other_fds()?;
                become_user(who)?;
            }
            if let Some(fd) = probe_fd {
                give_probe_fd(fd)?;
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // If oomguard died between fork and prctl, the signal will never come: stop here.
            if getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc_esrch()));
            }
            Ok(())
        });
    }
    let shown = program.to_string_lossy().into_owned();
    let mut child = cmd.spawn().map_err(|source| match source.kind() {
        // The file is there, so what is missing is the interpreter its `#!` line names.
        io::ErrorKind::NotFound if Path::new(program).is_file() => {
            SpawnError::BadInterpreter(shown)
        }
        io::ErrorKind::NotFound => SpawnError::NotFound(shown),
        io::ErrorKind::PermissionDenied => SpawnError::NotExecutable(shown),
        _ => SpawnError::Other {
            program: shown,
            source,
        },
    })?;
    // The Child handle is dropped without waiting: reaping is done by `reap_ready`, which sees
    // every descendant as we are a subreaper.
    // Dropping the command closes our copies of the slave: the master then reads EIO (EOF)
    // once the job's last process has closed it.
    drop(cmd);
    let output = match master {
        Some(master) => JobOutput::Terminal { master },
        None => JobOutput::Pipes {
            stdout: child.stdout.take().expect("stdout was piped"),
            stderr: child.stderr.take().expect("stderr was piped"),
        },
    };
    Ok(Spawned {
        pid: child.id(),
        output,
        own_session,
    })
}

/// Between fork and exec, for a job or hook run as another user: a new session (its PID its
/// session's and group's id, as `process_group(0)` would make it a group's), so it has no
/// controlling terminal and cannot reach oomguard's with `/dev/tty` or TIOCSTI. Its
/// pseudo-terminal, when it has one, is not made its controlling terminal: `isatty` holds
/// without it, and a controlling terminal would SIGHUP the job's leftovers the moment its main
/// process (the session leader) exits, before oomguard's SIGTERM and `--grace`.
pub(crate) fn leave_terminal() -> io::Result<()> {
    nix::unistd::setsid()?;
    Ok(())
}

/// What a job or hook inherits of oomguard's environment `vars`. Never oomguard's own
/// `OOMGUARD_` namespace (the job sees only what this attempt says: an `OOMGUARD_PREV_CAUSE`
/// in oomguard's environment must not reach attempt 1) or the service manager's variables
/// ([`FOR_OOMGUARD_ONLY`]). For a job run as another user (`run_as`), only
/// [`KEPT_FOR_ANOTHER_USER`] of root's environment and that user's HOME, USER and LOGNAME:
/// root's tokens and settings are not lent; the job file's `[env]` adds what the job needs.
pub(crate) fn inherited_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    run_as: Option<&RunAs>,
) -> Vec<(OsString, OsString)> {
    let mut kept: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(key, _)| {
            let key = key.as_bytes();
            !key.starts_with(b"OOMGUARD_")
                && !FOR_OOMGUARD_ONLY.iter().any(|own| own.as_bytes() == key)
                && (run_as.is_none() || kept_for_another_user(key))
        })
        .collect();
    if let Some(who) = run_as {
        kept.retain(|(key, _)| !matches!(key.as_bytes(), b"HOME" | b"USER" | b"LOGNAME"));
        kept.push(("HOME".into(), who.home.clone().into_os_string()));
        kept.push(("USER".into(), who.name.clone().into()));
        kept.push(("LOGNAME".into(), who.name.clone().into()));
    }
    kept
}

/// The variables the service manager sets for oomguard alone ([`crate::tell::notify`] speaks to
/// it); the job does not inherit them: with `NotifyAccess=main` systemd ignores the job's messages,
/// and a job that read `WATCHDOG_USEC` would think the watchdog its own to feed.
pub const FOR_OOMGUARD_ONLY: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// The variables of root's environment a job or hook run as another user keeps: where programs
/// are found, the language and the time zone, and the terminal's kind (its output goes to that
/// terminal). Nothing else: a secret of root's (a token, a proxy password) stays root's.
pub const KEPT_FOR_ANOTHER_USER: [&str; 5] = ["PATH", "LANG", "LANGUAGE", "TERM", "TZ"];

fn kept_for_another_user(key: &[u8]) -> bool {
    key.starts_with(b"LC_") || KEPT_FOR_ANOTHER_USER.iter().any(|k| k.as_bytes() == key)
}

fn libc_esrch() -> i32 {
    Errno::ESRCH as i32
}

/// Sends `signal` to every process of group `pgid`. Returns false when the group is gone, and
/// for a pgid that names no single group: 0 (our own), 1 (`killpg(1)` is `kill(-1)`, every
/// process we may signal), above `i32::MAX`.
pub fn signal_group(pgid: u32, signal: Signal) -> bool {
    target(pgid).is_some_and(|pgid| killpg(pgid, signal).is_ok())
}

/// Sends `signal` to group `pgid` only while the group has a member known to be the job's: its
/// leader, not yet reaped (its parent is still oomguard), or one of `members` (the job's
/// processes as listed a moment ago). A group whose last member ended frees its number, which
/// the kernel may give to someone else's process and group.
pub fn signal_known_group(pgid: u32, members: &[u32], signal: Signal) -> bool {
    let me = std::process::id();
    let stat_of = |pid: u32| -> Option<(u32, u32)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields = crate::guard::liveness::stat_fields(&stat);
        Some((fields.get(1)?.parse().ok()?, fields.get(2)?.parse().ok()?))
    };
    let leader_ours = stat_of(pgid).is_some_and(|(parent, group)| parent == me && group == pgid);
    let member_in_it = || {
        members
            .iter()
            .any(|&pid| stat_of(pid).is_some_and(|(_, group)| group == pgid))
    };
    (leader_ours || member_in_it()) && signal_group(pgid, signal)
}

/// Sends `signal` to each of `pids`, the job's processes as listed a moment ago (our
/// descendants), each only while it still is one: its parent is oomguard or another of
/// `pids`. Through a pidfd, so a process that ended after the listing, and whose number the
/// kernel gave to someone else's process, is never signalled (as root, that could be anyone's).
pub fn signal_processes(pids: &[u32], signal: Signal) {
    signal_processes_of(pids, pids, signal);
}

/// [`signal_processes`] for `pids` among the job's processes `all` (whose children they may be).
pub fn signal_processes_of(pids: &[u32], all: &[u32], signal: Signal) {
    let me = std::process::id();
    for &pid in pids {
        signal_if(pid, signal, |parent| parent == me || all.contains(&parent));
    }
}

/// Sends `signal` to the process now numbered `pid` if `ours(its parent's PID)`.
fn signal_if(pid: u32, signal: Signal, ours: impl Fn(u32) -> bool) -> bool {
    let parent = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                crate::guard::liveness::stat_fields(&stat)
                    .get(1)?
                    .parse()
                    .ok()
            })
    };
    signal_pinned(pid, signal, || parent().is_some_and(ours)).unwrap_or(false)
}

/// Sends `signal` to the process numbered `pid` if `still_ours()` says so once a pidfd pins it
/// (see [`Pinned`]). `Ok(false)`: gone, or not ours.
pub(crate) fn signal_pinned(
    pid: u32,
    signal: Signal,
    still_ours: impl FnOnce() -> bool,
) -> Result<bool, Errno> {
    match Pinned::pin(pid)? {
        Some(pinned) if still_ours() => pinned.signal(signal),
        _ => Ok(false),
    }
}

/// Makes oomguard the reaper of every orphaned descendant (PR_SET_CHILD_SUBREAPER), so a job's
/// grandchildren whose parent died are re-parented to us, seen, and reaped.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    Ok(())
}

/// What `waitpid` reported about one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEvent {
    /// The child ended and was reaped.
    Ended(Reaped),
    /// The child was stopped by `signal` (job control: SIGTSTP, SIGTTIN, SIGTTOU, SIGSTOP).
    Stopped { pid: u32, signal: Signal },
}

/// A reaped child: how it ended, and the most memory it (or any descendant it reaped) ever held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub pid: u32,
    pub ending: Ending,
    /// `ru_maxrss` from wait4(2): the largest resident set of the child or of a descendant it
    /// waited for, in bytes. It catches a peak that fell between two samples.
    pub max_rss_bytes: u64,
}

/// Reaps every child that has ended, without blocking, and reports children that stopped:
/// wait4(-1, WNOHANG | WUNTRACED) until none is left.
pub fn reap_ready() -> Vec<ChildEvent> {
    let mut events = Vec::new();
    loop {
        let mut status: nix::libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value of that plain C struct.
        let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to live locals of the right types. nix has no wait4, and
        // waitpid cannot return the child's rusage.
        let pid = unsafe {
            nix::libc::wait4(
                -1,
                &mut status,
                nix::libc::WNOHANG | nix::libc::WUNTRACED,
                &mut usage,
            )
        };
        if pid == 0 {
            break; // children remain, none ready
        }
        if pid < 0 {
            match Errno::last() {
                Errno::EINTR => continue,
                _ => break, // ECHILD: no children at all
            }
        }
        // Linux reports ru_maxrss in KiB.
        let max_rss_bytes = u64::try_from(usage.ru_maxrss)
            .unwrap_or(0)
            .saturating_mul(1024);
        match WaitStatus::from_raw(Pid::from_raw(pid), status) {
            Ok(WaitStatus::Exited(pid, code)) => events.push(ChildEvent::Ended(Reaped {
                pid: pid.as_raw() as u32,
                ending: Ending::Exited(code),
                max_rss_bytes,
            })),
            Ok(WaitStatus::Signaled(pid, signal, core_dumped)) => {
                events.push(ChildEvent::Ended(Reaped {
                    pid: pid.as_raw() as u32,
                    ending: Ending::Signaled {
                        signal: signal as i32,
                        core_dumped,
                    },
                    max_rss_bytes,
                }))
            }
            Ok(WaitStatus::Stopped(pid, signal)) => events.push(ChildEvent::Stopped {
                pid: pid.as_raw() as u32,
                signal,
            }),
            _ => continue,
        }
    }
    events
}

/// How long the guard waits for the killed processes to leave the attempt cgroup before giving
/// up on removing it. Longer than oomguard's own wait: nothing waits on the guard, and a big job
/// (tens of GiB, a GPU context) can take seconds to exit after SIGKILL.
const GUARD_REMOVE_WAIT: Duration = Duration::from_secs(30);

/// How long the guard waits for a dead oomguard's lock on a patched file to be let go (see
/// [`crate::knobs::patch::restore_entry`]); the kernel closes a dying process's files within
/// moments, so this is only a bound.
const GUARD_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The guard: a second oomguard process (`oomguard __guard`) that holds the read end of a pipe
/// from us. If we die without saying goodbye, the pipe reads EOF and the guard kills the job's
/// process group, then everything in the attempt's cgroup, and removes the cgroup.
/// Grandchildren do not get the parent-death signal and may leave the group (`setsid`); the
/// cgroup catches those, and a cgroup left behind would keep its name and, on v1, its charges.
///
/// On cgroup v2, start it only after [`crate::observe::cgroup::Parent::prepare`]: it lives in our
/// cgroup.
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

    /// Tells the guard what to kill if we die: the attempt's process group and the directory of its
    /// cgroup (see [`crate::observe::cgroup::JobCgroup::dir`]); `(None, None)` when no attempt is
    /// running. Each call replaces what was watched before.
    pub fn watch(&mut self, pgid: Option<u32>, cgroup: Option<&Path>) {
        if cgroup.is_some_and(|dir| dir.as_os_str().as_bytes().contains(&b'\n')) {
            tracing::warn!("the attempt cgroup's path holds a newline: the guard cannot be told it, and will not remove it if oomguard dies");
        }
        // A dead guard cannot protect anything, but must not stop the job either.
        if let Err(e) = self.stdin.write_all(&guard_line(pgid, cgroup)) {
            tracing::warn!("guard process gone: {e}");
        }
    }

    /// Tells the guard which patch journal entries to act on if we die (see
    /// [`crate::knobs::patch::Patcher::journal_paths`]). They add up over the run: `watch` and
    /// `unwatch` leave them, and acting on an entry already finished does nothing.
    pub fn restore_on_death(&mut self, journals: &[PathBuf]) {
        for journal in journals {
            let Some(line) = restore_line(journal) else {
                tracing::warn!("the patch journal path {} holds a newline: the guard cannot be told it; the next oomguard start restores instead", journal.display());
                continue;
            };
            if let Err(e) = self.stdin.write_all(&line) {
                tracing::warn!("guard process gone: {e}");
                return;
            }
        }
    }

    /// Says goodbye (nothing to kill) and reaps the guard.
    pub fn release(mut self) {
        let _ = self.stdin.write_all(b"done\n");
        drop(self.stdin);
        let _ = waitpid(Pid::from_raw(self.child.id() as i32), None);
    }
}

/// One line oomguard sends the guard on its stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GuardCommand {
    /// `watch <pgid> [<cgroup dir>]`: what to kill at EOF, replacing what was watched. The
    /// pgid is `-` for none; the directory is the rest of the line (it may hold spaces) and may
    /// be absent.
    Watch {
        pgid: Option<u32>,
        cgroup: Option<PathBuf>,
    },
    /// `unwatch`: no attempt running; nothing to kill.
    Unwatch,
    /// `done`: oomguard is ending normally; exit without killing.
    Done,
    /// `restore <journal path>`: a patch journal entry to act on at EOF, after the kill. The
    /// path is the rest of the line. Accumulated: nothing but `done` drops them.
    Restore(PathBuf),
}

/// The line [`Guard::restore_on_death`] sends, or None for a path the line cannot carry.
fn restore_line(journal: &Path) -> Option<Vec<u8>> {
    let bytes = journal.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.contains(&b'\n') {
        return None;
    }
    let mut line = b"restore ".to_vec();
    line.extend_from_slice(bytes);
    line.push(b'\n');
    Some(line)
}

/// The line [`Guard::watch`] sends, e.g. `watch 4242 /sys/fs/cgroup/memory/x/oomguard-1-attempt-1`.
/// The path goes last and raw (any bytes but a newline; one with a newline is left out).
fn guard_line(pgid: Option<u32>, cgroup: Option<&Path>) -> Vec<u8> {
    let cgroup = cgroup
        .map(|dir| dir.as_os_str().as_bytes())
        .filter(|bytes| !bytes.is_empty() && !bytes.contains(&b'\n'));
    if pgid.is_none() && cgroup.is_none() {
        return b"unwatch\n".to_vec();
    }
    let mut line = match pgid {
        Some(pgid) => format!("watch {pgid}").into_bytes(),
        None => b"watch -".to_vec(),
    };
    if let Some(bytes) = cgroup {
        line.push(b' ');
        line.extend_from_slice(bytes);
    }
    line.push(b'\n');
    line
}

/// Parses one line of the guard's input (without its newline). A pgid that is not a number
/// oomguard could have sent (see [`target`]) reads as none, so a garbled line never makes the
/// guard signal a group it was not told; unknown lines are `None`.
fn parse_guard_line(line: &[u8]) -> Option<GuardCommand> {
    match line {
        b"unwatch" => return Some(GuardCommand::Unwatch),
        b"done" => return Some(GuardCommand::Done),
        _ => {}
    }
    if let Some(path) = line.strip_prefix(b"restore ") {
        return (!path.is_empty()).then(|| GuardCommand::Restore(OsStr::from_bytes(path).into()));
    }
    let rest = line.strip_prefix(b"watch ")?;
    let (pgid, cgroup) = match rest.iter().position(|&b| b == b' ') {
        Some(space) => (&rest[..space], Some(&rest[space + 1..])),
        None => (rest, None),
    };
    let pgid = std::str::from_utf8(pgid)
        .ok()
        .and_then(|text| text.parse().ok())
        .filter(|&pgid| target(pgid).is_some());
    let cgroup = cgroup
        .filter(|bytes| !bytes.is_empty())
        .map(|bytes| PathBuf::from(OsStr::from_bytes(bytes)));
    Some(GuardCommand::Watch { pgid, cgroup })
}

/// The guard's main loop (`oomguard __guard`): follow `watch`/`unwatch`/`restore`/`done` lines on
/// stdin; at EOF without `done`, SIGKILL the watched group and everything in the watched cgroup,
/// remove that cgroup, then restore the patched files of every `restore` entry. Returns the exit
/// code: 1 if the cgroup could not be removed or a file could not be restored.
pub fn guard_main(input: impl BufRead) -> i32 {
    ignore_stop_signals();
    guard_loop(input, GUARD_REMOVE_WAIT)
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

fn guard_loop(input: impl BufRead, remove_wait: Duration) -> i32 {
    let (mut pgid, mut cgroup) = (None, None);
    let mut restores: Vec<PathBuf> = Vec::new();
    for line in input.split(b'\n') {
        let Ok(line) = line else { break };
        match parse_guard_line(&line) {
            Some(GuardCommand::Watch {
                pgid: group,
                cgroup: dir,
            }) => (pgid, cgroup) = (group, dir),
            Some(GuardCommand::Unwatch) => (pgid, cgroup) = (None, None),
            Some(GuardCommand::Restore(journal)) if !restores.contains(&journal) => {
                restores.push(journal)
            }
            Some(GuardCommand::Restore(_)) => {}
            Some(GuardCommand::Done) => return 0,
            None => {}
        }
    }
    // The group first: it also reaches processes outside the cgroup (or where there is none).
    if let Some(pgid) = pgid {
        signal_group(pgid, Signal::SIGKILL);
    }
    // The user's files before the cgroup: emptying it can wait on the reaping of zombies that
    // init now owns (up to `remove_wait`), and the job, SIGKILLed, reads no file any more.
    let restored = guard_restore(&restores);
    let removed = guard_remove_cgroup(cgroup, remove_wait);
    if removed && restored {
        0
    } else {
        1
    }
}

/// The patched files put back after oomguard died, each entry as the next start would; every
/// line said through tracing (the guard's stderr is oomguard's). Returns false if one failed.
fn guard_restore(journals: &[PathBuf]) -> bool {
    let mut all = true;
    for journal in journals {
        match crate::knobs::patch::restore_entry(journal, GUARD_LOCK_WAIT) {
            Ok(Some(line)) => tracing::warn!("oomguard died; its guard {line}"),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!("oomguard died; its guard could not restore a patched file (the next oomguard start retries): {err}");
                all = false;
            }
        }
    }
    all
}

/// The watched cgroup at EOF: every process in it killed, and the cgroup removed. Returns false
/// if it could not be removed.
fn guard_remove_cgroup(cgroup: Option<PathBuf>, remove_wait: Duration) -> bool {
    if let Some(dir) = cgroup {
        if let Err(err) = crate::observe::cgroup::kill_and_remove(&dir, remove_wait) {
            tracing::warn!("oomguard died; its guard could not clean up the attempt cgroup: {err}");
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_inherits_all_but_oomguards_own_and_one_of_another_user_only_the_basics() {
        let who = RunAs {
            name: "alice".into(),
            uid: nix::unistd::Uid::from_raw(1000),
            gid: nix::unistd::Gid::from_raw(1000),
            groups: vec![],
            home: "/home/alice".into(),
        };
        // (variable, kept for a job of oomguard's own user, kept for alice's)
        let table = [
            ("OOMGUARD_PREV_CAUSE", false, false),
            ("OOMGUARD_", false, false),
            ("oomguard_attempt", true, false),
            ("MY_OOMGUARD_X", true, false),
            ("NOTIFY_SOCKET", false, false),
            ("WATCHDOG_USEC", false, false),
            ("WATCHDOG_PID", false, false),
            ("SECRET_ROOT_TOKEN", true, false),
            ("CUDA_VISIBLE_DEVICES", true, false),
            ("PATH", true, true),
            ("LANG", true, true),
            ("LC_ALL", true, true),
            ("LC_MESSAGES", true, true),
            ("TERM", true, true),
            ("TZ", true, true),
            ("HOME", true, false),
            ("USER", true, false),
        ];
        let vars = || table.iter().map(|(k, _, _)| (k.into(), "root's".into()));
        for (run_as, column) in [(None, 1), (Some(&who), 2)] {
            let kept: Vec<(OsString, OsString)> = inherited_env(vars(), run_as);
            for (key, own, other) in table {
                let want = if column == 1 { own } else { other };
                let value = kept.iter().find(|(k, _)| k == key).map(|(_, v)| v);
                match (key, run_as) {
                    ("HOME", Some(_)) => assert_eq!(value, Some(&"/home/alice".into())),
                    ("USER", Some(_)) => assert_eq!(value, Some(&"alice".into())),
                    _ => assert_eq!(value.is_some(), want, "{key} for {run_as:?}"),
                }
            }
        }
        let alices = inherited_env(vars(), Some(&who));
        assert!(alices.iter().any(|(k, v)| k == "LOGNAME" && v == "alice"));
        assert_eq!(alices.iter().filter(|(k, _)| k == "HOME").count(), 1);
    }

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
        assert_eq!(guard_loop(input.as_bytes(), Duration::ZERO), 0);
        let status = victim.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        // `done` or `unwatch`: nothing is killed.
        for tail in ["done\n", "unwatch\n", "watch -\n", "watch 1\n"] {
            let mut survivor = spawn_group();
            let input = format!("watch {}\n{tail}", survivor.id());
            guard_loop(input.as_bytes(), Duration::ZERO);
            assert!(survivor.try_wait().unwrap().is_none(), "{tail}");
            survivor.kill().unwrap();
            survivor.wait().unwrap();
        }
    }

    #[test]
    fn guard_lines_round_trip() {
        let dir = Path::new("/sys/fs/cgroup/memory/my jobs/oomguard-4242-attempt-1");
        let watch = |pgid, cgroup: Option<&str>| GuardCommand::Watch {
            pgid,
            cgroup: cgroup.map(PathBuf::from),
        };
        let table: [(_, Option<&Path>, &[u8], _); 5] = [
            (
                Some(4242),
                Some(dir),
                b"watch 4242 /sys/fs/cgroup/memory/my jobs/oomguard-4242-attempt-1\n",
                watch(
                    Some(4242),
                    Some("/sys/fs/cgroup/memory/my jobs/oomguard-4242-attempt-1"),
                ),
            ),
            (Some(4242), None, b"watch 4242\n", watch(Some(4242), None)),
            (
                None,
                Some(Path::new("/cg/a")),
                b"watch - /cg/a\n",
                watch(None, Some("/cg/a")),
            ),
            (None, None, b"unwatch\n", GuardCommand::Unwatch),
            // A newline would end the line early: such a path is not sent.
            (
                Some(7),
                Some(Path::new("/cg/a\nb")),
                b"watch 7\n",
                watch(Some(7), None),
            ),
        ];
        for (pgid, cgroup, line, command) in table {
            let sent = guard_line(pgid, cgroup);
            assert_eq!(sent, line, "{}", String::from_utf8_lossy(line));
            assert_eq!(parse_guard_line(&sent[..sent.len() - 1]), Some(command));
        }
        // Paths need not be UTF-8.
        let raw = Path::new(OsStr::from_bytes(b"/cg/\xff x"));
        let sent = guard_line(Some(9), Some(raw));
        assert_eq!(
            parse_guard_line(&sent[..sent.len() - 1]),
            Some(GuardCommand::Watch {
                pgid: Some(9),
                cgroup: Some(raw.to_path_buf())
            })
        );
    }

    #[test]
    fn parses_guard_lines() {
        let table: [(&[u8], Option<GuardCommand>); 10] = [
            (b"done", Some(GuardCommand::Done)),
            (b"unwatch", Some(GuardCommand::Unwatch)),
            (b"", None),
            (b"watch", None),
            (b"hello 12", None),
            // A pgid oomguard could not have sent reads as none, never as 0, 1 or negative.
            (
                b"watch 0",
                Some(GuardCommand::Watch {
                    pgid: None,
                    cgroup: None,
                }),
            ),
            (
                b"watch 1",
                Some(GuardCommand::Watch {
                    pgid: None,
                    cgroup: None,
                }),
            ),
            (
                b"watch 4294967295",
                Some(GuardCommand::Watch {
                    pgid: None,
                    cgroup: None,
                }),
            ),
            (
                b"watch x12 /cg",
                Some(GuardCommand::Watch {
                    pgid: None,
                    cgroup: Some("/cg".into()),
                }),
            ),
            (
                b"watch 12 ",
                Some(GuardCommand::Watch {
                    pgid: Some(12),
                    cgroup: None,
                }),
            ),
        ];
        for (line, want) in table {
            assert_eq!(
                parse_guard_line(line),
                want,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn restore_lines_round_trip_and_accumulate() {
        let journal = Path::new(OsStr::from_bytes(b"/state/patches/in place \xff.json"));
        let sent = restore_line(journal).unwrap();
        assert_eq!(
            parse_guard_line(&sent[..sent.len() - 1]),
            Some(GuardCommand::Restore(journal.to_path_buf()))
        );
        assert_eq!(restore_line(Path::new("/a\nb.json")), None);
        assert_eq!(restore_line(Path::new("")), None);
        assert_eq!(parse_guard_line(b"restore "), None);
        assert_eq!(parse_guard_line(b"restore"), None);
    }

    #[test]
    fn guard_restores_patched_files_only_without_goodbye() {
        use crate::knobs::patch::{Mode, Patcher};
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("default.yaml");
        let original = "training:\n  batch_size: 64 # per GPU\n";
        std::fs::write(&config, original).unwrap();
        let patch = || {
            let mut patcher = Patcher::open(
                &tmp.path().join("state"),
                &tmp.path().join("run"),
                vec![(config.clone(), Mode::InPlace)],
            )
            .unwrap();
            patcher
                .write(0, "training:\n  batch_size: 32 # per GPU\n")
                .unwrap();
            let journal = patcher.journal_paths().remove(0);
            patcher.abandon(); // as if SIGKILLed
            journal
        };
        let journal = patch();
        let restore = restore_line(&journal).unwrap();
        // `unwatch` does not drop it; `done` means nothing to do.
        let mut input = restore.clone();
        input.extend_from_slice(b"unwatch\ndone\n");
        assert_eq!(guard_loop(&input[..], Duration::ZERO), 0);
        assert_ne!(std::fs::read_to_string(&config).unwrap(), original);
        // EOF without goodbye: restored, twice named or not.
        let mut input = restore.clone();
        input.extend_from_slice(b"unwatch\n");
        input.extend_from_slice(&restore);
        assert_eq!(guard_loop(&input[..], Duration::ZERO), 0);
        assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    }

    /// A group is signalled only while a member is known to be the job's: once its leader is
    /// reaped, only through a listed member still in it.
    #[test]
    fn a_group_is_signalled_only_while_a_known_member_is_in_it() {
        use std::io::BufRead as _;
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = leader.id();
        let mut line = String::new();
        io::BufReader::new(leader.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let member: u32 = line.trim().parse().unwrap();
        let alive = |pid: u32| nix::sys::signal::kill(Pid::from_raw(pid as i32), None).is_ok();
        // While the leader is ours (not reaped), the group is the job's.
        assert!(signal_known_group(pgid, &[], Signal::SIGCONT));
        leader.kill().unwrap();
        leader.wait().unwrap();
        // Reaped: its number is free; the group is signalled only through a listed member.
        assert!(!signal_known_group(pgid, &[], Signal::SIGKILL));
        assert!(
            alive(member),
            "signalled through a group no known member is in"
        );
        assert!(signal_known_group(pgid, &[member], Signal::SIGKILL));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{member}/stat")).is_ok_and(|s| {
            crate::guard::liveness::stat_fields(&s)
                .first()
                .is_none_or(|st| *st != "Z")
        }) {
            assert!(
                std::time::Instant::now() < deadline,
                "the member outlived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A process is signalled only while its parent is one the caller counts as the job's; the
    /// one still at the listed number is the one signalled.
    #[test]
    fn only_a_process_whose_parent_is_ours_is_signalled() {
        let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = sleeper.id();
        assert!(!signal_if(pid, Signal::SIGKILL, |_| false));
        assert_eq!(
            sleeper.try_wait().unwrap(),
            None,
            "signalled though not ours"
        );
        // Its parent is this process: oomguard's place in signal_processes.
        signal_processes(&[pid], Signal::SIGKILL);
        let status = sleeper.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }

    #[test]
    fn signals_only_single_targets() {
        let table = [
            (0, None),
            (1, None),
            (2, Some(2)),
            (4242, Some(4242)),
            (i32::MAX as u32, Some(i32::MAX)),
            (i32::MAX as u32 + 1, None),
            (u32::MAX, None),
        ];
        for (id, want) in table {
            assert_eq!(target(id), want.map(Pid::from_raw), "{id}");
        }
        assert!(!signal_group(0, Signal::SIGKILL));
        assert!(!signal_group(1, Signal::SIGKILL));
        assert!(!signal_if(u32::MAX, Signal::SIGKILL, |_| true));
    }

    #[test]
    fn guard_removes_the_watched_cgroup_only_without_goodbye() {
        // A fake cgroup: a plain directory whose cgroup.procs is empty.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("oomguard-1-attempt 1");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        let input = format!("watch - {}\ndone\n", dir.display());
        assert_eq!(guard_loop(input.as_bytes(), Duration::ZERO), 0);
        assert!(dir.exists(), "removed despite the goodbye");
        let input = format!("watch - {}\n", dir.display());
        assert_eq!(guard_loop(input.as_bytes(), Duration::ZERO), 0);
        assert!(!dir.exists(), "not removed at EOF");
    }

    /// `program args` in its own process group, moved into `job` between fork and exec.
    fn spawn_in_cgroup(
        job: &crate::observe::cgroup::JobCgroup,
        program: &str,
        args: &[&str],
    ) -> Child {
        let procs = job.open_procs().unwrap();
        let mut command = Command::new(program);
        command.args(args).process_group(0);
        // SAFETY: one write(2) on an fd opened before fork: async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                crate::observe::cgroup::JobCgroup::join_from_child(procs.as_fd())
            });
        }
        command.spawn().unwrap()
    }

    #[test]
    fn guard_kills_everything_in_a_real_cgroup_and_removes_it() {
        let test = "guard_kills_everything_in_a_real_cgroup_and_removes_it";
        let parent = match crate::observe::cgroup::Parent::detect_current() {
            Ok(parent) => parent,
            Err(err) => {
                eprintln!("SKIPPED {test}: {err}");
                return;
            }
        };
        // A space in the name: the guard takes the rest of the line as the path.
        let name = format!("oomguard-test-{}-guard cg", std::process::id());
        let job = parent
            .create_child(&name, &crate::observe::cgroup::Limits::default())
            .unwrap();
        let leader = spawn_in_cgroup(&job, "sleep", &["1000"]);
        // In a group of its own, as after `setsid`: only the cgroup reaches it.
        let escaped = spawn_in_cgroup(&job, "sleep", &["1000"]);
        let pgid = leader.id();
        let mut pids = job.pids();
        pids.sort();
        let mut want = vec![leader.id(), escaped.id()];
        want.sort();
        assert_eq!(pids, want);
        // Reap as the subreaper or init that inherits them would: a zombie may keep a cgroup busy.
        let reapers: Vec<_> = [leader, escaped]
            .into_iter()
            .map(|mut child| std::thread::spawn(move || child.wait().unwrap()))
            .collect();
        let dir = job.dir().to_path_buf();
        let input = guard_line(Some(pgid), Some(&dir));
        assert_eq!(guard_loop(&input[..], Duration::from_secs(10)), 0);
        for reaper in reapers {
            let status = reaper.join().unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9)
            );
        }
        assert!(!dir.exists(), "the guard left {}", dir.display());
        job.remove().unwrap(); // already gone: fine
    }
}
