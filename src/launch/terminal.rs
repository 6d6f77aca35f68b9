//! The job's pseudo-terminal: when oomguard's own stdout and stderr are terminals, the job gets a
//! pseudo-terminal for its stdout and stderr instead of pipes, so it behaves as it would without
//! oomguard (`isatty()` true, the real window size: tqdm and rich draw their bars as usual).
//! The window size is copied from oomguard's terminal at the start and on every SIGWINCH.
//!
//! Output post-processing is off on the pseudo-terminal (no OPOST: `\n` stays `\n`, as through a
//! pipe); oomguard's real terminal does its own. The job's stdin is not touched. Reading the master
//! is [`crate::output::stream`]'s job; when to resize and whom to signal is [`crate::supervise`]'s.

use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::pty::{openpty, Winsize};
use nix::sys::termios::{tcgetattr, tcsetattr, OutputFlags, SetArg};

/// Whether the job should get a pseudo-terminal: oomguard's stdout and stderr are both terminals.
pub fn wanted() -> bool {
    io::stdout().is_terminal() && io::stderr().is_terminal()
}

/// A new pseudo-terminal pair for one attempt.
pub struct Pty {
    /// oomguard's side: read for the job's output, resized on SIGWINCH.
    pub master: File,
    /// The job's side, its stdout and stderr; oomguard closes its copy once the job is spawned,
    /// so that reading the master ends (EIO) when the job's last process closes it.
    pub slave: OwnedFd,
}

impl Pty {
    /// Opens a pseudo-terminal the size of oomguard's terminal, with output post-processing off.
    /// Both ends are close-on-exec, so no later attempt, and no helper, inherits them.
    pub fn open() -> io::Result<Pty> {
        let size = window_size(io::stdout().as_fd());
        let pair = openpty(size.as_ref(), None)?;
        for fd in [&pair.master, &pair.slave] {
            fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        }
        let mut termios = tcgetattr(&pair.slave)?;
        termios.output_flags.remove(OutputFlags::OPOST);
        tcsetattr(&pair.slave, SetArg::TCSANOW, &termios)?;
        Ok(Pty {
            master: File::from(pair.master),
            slave: pair.slave,
        })
    }
}

/// Gives the pseudo-terminal behind `master` the size of oomguard's terminal (its stdout).
pub fn copy_size(master: &File) -> io::Result<()> {
    let size = window_size(io::stdout().as_fd())
        .ok_or_else(|| io::Error::other("oomguard's stdout has no window size"))?;
    // SAFETY: TIOCSWINSZ reads one `struct winsize` from the pointer, which lives across the call.
    let rc = unsafe { nix::libc::ioctl(master.as_raw_fd(), nix::libc::TIOCSWINSZ, &size) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The window size of the terminal on `fd`, if it is one.
fn window_size(fd: BorrowedFd<'_>) -> Option<Winsize> {
    let mut size = Winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `struct winsize` through the pointer, which is valid and
    // exclusively borrowed for the call.
    let rc = unsafe { nix::libc::ioctl(fd.as_raw_fd(), nix::libc::TIOCGWINSZ, &mut size) };
    (rc == 0).then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pty_keeps_newlines_and_its_size() {
        let pty = Pty::open().expect("a pseudo-terminal can be opened");
        let termios = tcgetattr(&pty.slave).unwrap();
        assert!(!termios.output_flags.contains(OutputFlags::OPOST));
        for fd in [pty.master.as_raw_fd(), pty.slave.as_raw_fd()] {
            let flags = FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD).unwrap());
            assert!(flags.contains(FdFlag::FD_CLOEXEC));
        }
        // The slave is a terminal the job can size itself from.
        assert!(window_size(pty.slave.as_fd()).is_some());
    }
}
