//! The signals oomguard listens to, delivered one by one. Each delivery of a watched signal
//! writes its number, as one byte, to a socket pair from inside the handler; the supervisor
//! reads the bytes back in order. Unlike a stream that only says "this signal arrived at least
//! once" (tokio's, signalfd's pending set), two SIGINTs sent back to back are two events: the
//! second one is the user's "kill it now".
//!
//! The kernel itself still merges a standard signal sent while the same one is pending and not
//! yet handled; what the handler saw is what we count. Deciding what a signal means is
//! [`crate::supervise`]'s job.

use std::collections::VecDeque;
use std::io;
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;

use nix::sys::signal::Signal;

/// Every signal oomguard handles: the user's stop requests, the ones it forwards, job control,
/// and SIGCHLD (a child ended or stopped).
pub const WATCHED: &[Signal] = &[
    Signal::SIGCHLD,
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGCONT,
    Signal::SIGWINCH,
];

/// Gives the user's stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and job control (SIGTSTP,
/// SIGTTIN, SIGTTOU) back their default actions, once no attempt or wait is left to act on
/// them: the last wait (for a slow reader of oomguard's output) then ends or stops as any
/// program's would.
pub fn default_stops() {
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        // SAFETY: restoring the default action installs no handler code.
        let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) };
    }
}

/// The reading end of the handlers' socket, with deliveries read but not yet handed out.
pub struct Deliveries {
    reader: tokio::net::UnixStream,
    queued: VecDeque<Signal>,
}

impl Deliveries {
    /// Installs the handlers. Must be called inside the tokio runtime, once per process.
    pub fn register() -> io::Result<Deliveries> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        // A full socket must drop a byte in the handler, never block it.
        writer.set_nonblocking(true)?;
        // Deliberately never closed: the handlers stay installed for the life of the process,
        // and a handler writing to a closed fd number could hit whatever file reused it.
        let fd = writer.into_raw_fd();
        for &signal in WATCHED {
            let byte = signal as i32 as u8;
            // SAFETY: the action only calls write(2), which is async-signal-safe; the registry
            // saves and restores errno around it. `fd` is never closed (above).
            unsafe {
                signal_hook_registry::register(signal as i32, move || {
                    let _ = nix::libc::write(fd, (&byte as *const u8).cast(), 1);
                })
            }?;
        }
        Ok(Deliveries {
            reader: tokio::net::UnixStream::from_std(reader)?,
            queued: VecDeque::new(),
        })
    }

    /// The next delivery, in the order the handler ran.
    pub async fn next(&mut self) -> Signal {
        loop {
            if let Some(signal) = self.queued.pop_front() {
                return signal;
            }
            if self.reader.readable().await.is_err() {
                // The socket is ours and registered; readiness cannot fail short of a broken
                // runtime. Wait forever rather than spin.
                std::future::pending::<()>().await;
            }
            let mut buf = [0u8; 64];
            match self.reader.try_read(&mut buf) {
                Ok(n) => self.queued.extend(
                    buf[..n]
                        .iter()
                        .filter_map(|&b| Signal::try_from(i32::from(b)).ok()),
                ),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => std::future::pending::<()>().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_deliveries_in_a_row_are_two_events() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut deliveries = Deliveries::register().unwrap();
            // Raised synchronously: each raise(3) runs the handler before it returns, so
            // neither can be merged with the other by the kernel.
            nix::sys::signal::raise(Signal::SIGUSR2).unwrap();
            nix::sys::signal::raise(Signal::SIGUSR2).unwrap();
            nix::sys::signal::raise(Signal::SIGWINCH).unwrap();
            // Other tests of this binary end children meanwhile: their SIGCHLDs are not ours.
            let mut got = Vec::new();
            while got.len() < 3 {
                match deliveries.next().await {
                    Signal::SIGCHLD => {}
                    other => got.push(other),
                }
            }
            assert_eq!(got, [Signal::SIGUSR2, Signal::SIGUSR2, Signal::SIGWINCH]);
        });
    }
}
