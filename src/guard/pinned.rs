//! A process held by a pidfd ([`Pinned`]): what is read about it after pinning is about that
//! very process, and a signal to it never reaches a process given the number afterwards. Also
//! which numbers the kernel's signal calls may take at all ([`target`]). It signals only the
//! process it is handed; which processes are the job's is [`crate::launch::child`]'s question.

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// The process now numbered `pid`, held by a pidfd: whatever is read about it afterwards (its
/// parent, the cgroup it is listed in) is about that very process or, if it has ended since,
/// a signal goes nowhere (ESRCH), never to a process given the number afterwards. Without
/// pidfds (Linux before 5.3) the number alone, and a plain kill.
pub(crate) enum Pinned {
    Fd(OwnedFd),
    Number(Pid),
}

impl Pinned {
    /// `None` when no process has the number (or it names no single process: see [`target`]).
    pub(crate) fn pin(pid: u32) -> Result<Option<Pinned>, Errno> {
        let Some(target) = target(pid) else {
            return Ok(None);
        };
        // SAFETY: a system call on integers; the descriptor it returns is owned below.
        let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, target.as_raw(), 0) };
        if fd < 0 {
            return match Errno::last() {
                Errno::ENOSYS => Ok(Some(Pinned::Number(target))),
                Errno::ESRCH => Ok(None),
                e => Err(e),
            };
        }
        // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        Ok(Some(Pinned::Fd(fd)))
    }

    /// Sends `signal`; `Ok(false)` when the process has ended.
    pub(crate) fn signal(&self, signal: Signal) -> Result<bool, Errno> {
        let sent = match self {
            Pinned::Number(pid) => nix::sys::signal::kill(*pid, signal),
            Pinned::Fd(fd) => {
                use std::os::fd::AsRawFd;
                // SAFETY: a system call on a descriptor we own, a signal number and a null
                // siginfo.
                let rc = unsafe {
                    nix::libc::syscall(
                        nix::libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        signal as i32,
                        std::ptr::null::<nix::libc::siginfo_t>(),
                        0,
                    )
                };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(Errno::last())
                }
            }
        };
        match sent {
            Ok(()) => Ok(true),
            Err(Errno::ESRCH) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A PID or pgid as the kernel's signal calls take it, or `None` where those calls would hit
/// something else: 0 is our own group, 1 as a pgid means every process we may signal
/// (`killpg(1)` is `kill(-1)`), and anything above `i32::MAX` turns negative (a group, or -1).
pub(crate) fn target(id: u32) -> Option<Pid> {
    i32::try_from(id)
        .ok()
        .filter(|&raw| raw > 1)
        .map(Pid::from_raw)
}
