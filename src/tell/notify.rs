//! The service manager's notify protocol (sd_notify(3)), for oomguard run as a systemd
//! `Type=notify` service: `READY=1` once the first attempt is running, `STATUS=` whenever the
//! one-line status changes (`attempt 2/10: batch 16 x accum 4, rss 3.1 GiB, gpu 41.2 GiB`,
//! `waiting 40s before attempt 3`, `gave up: ...`), `WATCHDOG=1` every half `WATCHDOG_USEC`
//! while the supervising loop is alive, and `STOPPING=1` on the way out. Where `NOTIFY_SOCKET`
//! is not set every call does nothing.
//!
//! The protocol is one datagram of `KEY=VALUE` lines to the unix socket named by
//! `NOTIFY_SOCKET`: a path, or with a leading `@` a name in the abstract namespace. A few lines
//! over std's `UnixDatagram` rather than the `sd-notify` crate: that crate connects to the
//! variable's text as a path only (no abstract `@` names, which systemd documents and container
//! managers use) and re-reads the environment on every message.
//!
//! What to say and when is decided by the attempt loop ([`mod@crate::run`], through its events);
//! this module only words it and sends it. The job never sees the variables
//! ([`crate::launch::child::FOR_OOMGUARD_ONLY`], removed in [`crate::launch::child::spawn`]): with
//! `NotifyAccess=main` systemd ignores the job's own messages, and a job that read `WATCHDOG_USEC`
//! would think the watchdog was its own to feed.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use crate::knobs::{ACCUM, BATCH};
use crate::observe::units::human_bytes;

/// The link to the service manager, or nothing where there is none.
#[derive(Debug, Default)]
pub struct Notifier {
    socket: Option<UnixDatagram>,
    /// How often to send `WATCHDOG=1`: half the manager's `WATCHDOG_USEC`.
    watchdog_interval: Option<Duration>,
    ready_sent: bool,
    /// The last `STATUS=` sent: a status is sent only when its text changes.
    last_status: Option<String>,
    /// `attempt 2/10: batch 16 x accum 4`, the start of every status while an attempt runs.
    heading: Option<String>,
}

impl Notifier {
    /// From oomguard's environment. A socket that cannot be reached is logged and left off:
    /// the run itself never depends on the service manager.
    pub fn from_env() -> Notifier {
        let var = |name| std::env::var_os(name);
        let Some(address) = var("NOTIFY_SOCKET").filter(|a| !a.is_empty()) else {
            return Notifier::default();
        };
        let socket = match connect(&address) {
            Ok(socket) => socket,
            Err(e) => {
                tracing::warn!(
                    "cannot reach the service manager at NOTIFY_SOCKET={}: {e}; not notifying it",
                    address.to_string_lossy()
                );
                return Notifier::default();
            }
        };
        let usec = var("WATCHDOG_USEC");
        let pid = var("WATCHDOG_PID");
        Notifier {
            socket: Some(socket),
            watchdog_interval: watchdog_interval(
                usec.as_deref().and_then(OsStr::to_str),
                pid.as_deref().and_then(OsStr::to_str),
                std::process::id(),
            ),
            ..Notifier::default()
        }
    }

    /// Whether there is a service manager to tell.
    pub fn enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// An attempt is about to start: its heading leads the status while it runs.
    pub fn attempt(&mut self, attempt: u32, max_attempts: u32, knobs: &[(String, String)]) {
        self.heading = Some(heading(attempt, max_attempts, knobs));
    }

    /// The attempt's job was spawned: `READY=1` the first time, and the heading as status.
    pub fn started(&mut self) {
        if !self.ready_sent && self.enabled() {
            self.ready_sent = true;
            self.send("READY=1");
        }
        if let Some(heading) = self.heading.clone() {
            self.status(&heading);
        }
    }

    /// A sample of the running attempt: the heading with its memory, sent if that changed.
    pub fn memory(&mut self, rss_bytes: Option<u64>, gpu_bytes: Option<u64>) {
        // Every sample comes here: without a service manager, not even the text is built.
        if !self.enabled() {
            return;
        }
        if let Some(heading) = &self.heading {
            let text = with_memory(heading, rss_bytes, gpu_bytes);
            self.status(&text);
        }
    }

    /// Between attempts: `waiting 40s before attempt 3`.
    pub fn waiting(&mut self, delay: Duration, next_attempt: u32) {
        self.heading = None;
        let text = format!(
            "waiting {} before attempt {next_attempt}",
            humantime::format_duration(Duration::from_secs(delay.as_secs()))
        );
        self.status(&text);
    }

    /// The run is decided: `gave up: ...`, `succeeded`, `interrupted`.
    pub fn ended(&mut self, outcome: &str, reason: Option<&str>) {
        self.heading = None;
        let text = ending(outcome, reason);
        self.status(&text);
    }

    /// `STATUS=text`, unless it is the status already sent.
    pub fn status(&mut self, text: &str) {
        if !self.enabled() || self.last_status.as_deref() == Some(text) {
            return;
        }
        // One line: a newline would start a new KEY=VALUE assignment.
        let line = text.replace('\n', " ");
        self.send(&format!("STATUS={line}"));
        self.last_status = Some(text.to_string());
    }

    /// `STOPPING=1`: oomguard is on its way out.
    pub fn stopping(&mut self) {
        if self.enabled() {
            self.send("STOPPING=1");
        }
    }

    /// The pinger to run on the supervising loop's runtime, where the manager asked for a
    /// watchdog: it pings only while that runtime turns, so a stuck loop stops the pings.
    pub fn watchdog(&self) -> Option<Watchdog> {
        let interval = self.watchdog_interval?;
        let socket = self.socket.as_ref()?.try_clone().ok()?;
        Some(Watchdog { socket, interval })
    }

    fn send(&self, message: &str) {
        if let Some(socket) = &self.socket {
            send(socket, message);
        }
    }
}

/// Sends `WATCHDOG=1` every `interval` (half `WATCHDOG_USEC`).
#[derive(Debug)]
pub struct Watchdog {
    socket: UnixDatagram,
    interval: Duration,
}

impl Watchdog {
    /// Pings for as long as the runtime polls it (spawn it on the supervising loop's runtime).
    pub async fn run(self) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            send(&self.socket, "WATCHDOG=1");
        }
    }
}

/// One message; never blocks the supervisor (the socket is non-blocking) and never fails the
/// run: a manager that does not read in time loses a status, which the next one replaces.
fn send(socket: &UnixDatagram, message: &str) {
    if let Err(e) = socket.send(message.as_bytes()) {
        tracing::debug!("service manager notification {message:?} not sent: {e}");
    }
}

/// Connects to `NOTIFY_SOCKET`'s address: `/path`, or `@name` in the abstract namespace.
fn connect(address: &OsStr) -> io::Result<UnixDatagram> {
    let addr = match parse_address(address.as_bytes())? {
        Address::Path(path) => SocketAddr::from_pathname(OsStr::from_bytes(path))?,
        Address::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
    };
    let socket = UnixDatagram::unbound()?;
    socket.connect_addr(&addr)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Where `NOTIFY_SOCKET` points.
#[derive(Debug, PartialEq, Eq)]
enum Address<'a> {
    Path(&'a [u8]),
    Abstract(&'a [u8]),
}

/// sd_notify(3): an absolute path, or `@` and an abstract name; anything else is refused.
fn parse_address(text: &[u8]) -> io::Result<Address<'_>> {
    match text {
        [b'/', ..] => Ok(Address::Path(text)),
        [b'@', name @ ..] if !name.is_empty() => Ok(Address::Abstract(name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an absolute path or an @abstract name",
        )),
    }
}

/// Half of `WATCHDOG_USEC`, as sd_watchdog_enabled(3) reads it: set, positive, and (where
/// `WATCHDOG_PID` is set) meant for this process.
fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok()? != own_pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2).max(Duration::from_millis(1)))
}

/// `attempt 2/10: batch 16 x accum 4`; other knobs as `name value`, joined with `, `.
fn heading(attempt: u32, max_attempts: u32, knobs: &[(String, String)]) -> String {
    let value = |name: &str| knobs.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let mut parts = Vec::new();
    match (value(BATCH), value(ACCUM)) {
        (Some(batch), Some(accum)) => parts.push(format!("batch {batch} x accum {accum}")),
        (Some(batch), None) => parts.push(format!("batch {batch}")),
        (None, Some(accum)) => parts.push(format!("accum {accum}")),
        (None, None) => {}
    }
    parts.extend(
        knobs
            .iter()
            .filter(|(k, _)| k != BATCH && k != ACCUM)
            .map(|(k, v)| format!("{k} {v}")),
    );
    let head = format!("attempt {attempt}/{max_attempts}");
    if parts.is_empty() {
        head
    } else {
        format!("{head}: {}", parts.join(", "))
    }
}

/// The heading and the attempt's memory, each number where it is known.
fn with_memory(heading: &str, rss_bytes: Option<u64>, gpu_bytes: Option<u64>) -> String {
    let mut text = heading.to_string();
    if let Some(rss) = rss_bytes {
        text.push_str(&format!(", rss {}", human_bytes(rss)));
    }
    if let Some(gpu) = gpu_bytes {
        text.push_str(&format!(", gpu {}", human_bytes(gpu)));
    }
    text
}

/// `gave up: no smaller batch (--min-batch 1)`: the outcome in words, and why.
fn ending(outcome: &str, reason: Option<&str>) -> String {
    let words = outcome.replace('_', " ");
    match reason {
        Some(reason) => format!("{words}: {reason}"),
        None => words,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn addresses() {
        let table: [(&[u8], Option<Address>); 6] = [
            (
                b"/run/systemd/notify",
                Some(Address::Path(b"/run/systemd/notify")),
            ),
            (
                b"@/org/sd/notify/1",
                Some(Address::Abstract(b"/org/sd/notify/1")),
            ),
            (b"@x", Some(Address::Abstract(b"x"))),
            (b"@", None),
            (b"run/notify", None),
            (b"", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_address(text).ok(), want, "{text:?}");
        }
    }

    #[test]
    fn watchdog_interval_is_half_and_only_ours() {
        let table = [
            (Some("20000000"), None, Some(Duration::from_secs(10))),
            (Some("20000000"), Some("42"), Some(Duration::from_secs(10))),
            (Some("20000000"), Some("43"), None),
            (Some("20000000"), Some("x"), None),
            (Some("0"), None, None),
            (Some("soon"), None, None),
            (None, Some("42"), None),
            (Some("1"), None, Some(Duration::from_millis(1))),
        ];
        for (usec, pid, want) in table {
            assert_eq!(watchdog_interval(usec, pid, 42), want, "{usec:?} {pid:?}");
        }
    }

    #[test]
    fn statuses_read_as_documented() {
        let table = [
            (
                heading(2, 10, &knobs(&[("batch", "16"), ("accum", "4")])),
                "attempt 2/10: batch 16 x accum 4",
            ),
            (
                heading(1, 3, &knobs(&[("batch", "8")])),
                "attempt 1/3: batch 8",
            ),
            (heading(1, 3, &[]), "attempt 1/3"),
            (
                heading(3, 5, &knobs(&[("workers", "2"), ("batch", "4")])),
                "attempt 3/5: batch 4, workers 2",
            ),
            (
                with_memory(
                    "attempt 2/10: batch 16 x accum 4",
                    Some(3_328_599_654),
                    Some(44_238_163_558),
                ),
                "attempt 2/10: batch 16 x accum 4, rss 3.1 GiB, gpu 41.2 GiB",
            ),
            (with_memory("attempt 1/3", None, None), "attempt 1/3"),
            (
                ending("gave_up", Some("batch 1 still ran out of memory")),
                "gave up: batch 1 still ran out of memory",
            ),
            (ending("succeeded", None), "succeeded"),
        ];
        for (got, want) in table {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn without_a_manager_nothing_is_sent_or_kept() {
        let mut quiet = Notifier::default();
        quiet.attempt(1, 3, &knobs(&[("batch", "8")]));
        quiet.started();
        quiet.status("x");
        quiet.stopping();
        assert!(!quiet.enabled());
        assert!(quiet.watchdog().is_none());
        assert_eq!(quiet.last_status, None);
    }

    #[test]
    fn status_is_sent_when_it_changes_and_ready_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify");
        let manager = UnixDatagram::bind(&path).expect("bind");
        manager.set_nonblocking(true).expect("nonblocking");
        let mut notifier = Notifier {
            socket: Some(connect(path.as_os_str()).expect("connect")),
            ..Notifier::default()
        };
        notifier.attempt(1, 3, &knobs(&[("batch", "8")]));
        notifier.started();
        notifier.memory(None, None); // the heading again: not resent
        notifier.memory(Some(2 << 30), None);
        notifier.attempt(2, 3, &knobs(&[("batch", "4")]));
        notifier.started(); // not READY again
        notifier.waiting(Duration::from_millis(40_300), 3);
        notifier.stopping();
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while let Ok(n) = manager.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        assert_eq!(
            got,
            [
                "READY=1",
                "STATUS=attempt 1/3: batch 8",
                "STATUS=attempt 1/3: batch 8, rss 2.0 GiB",
                "STATUS=attempt 2/3: batch 4",
                "STATUS=waiting 40s before attempt 3",
                "STOPPING=1",
            ]
        );
    }
}
