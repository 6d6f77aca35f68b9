//! Tees the job's stdout and stderr: every chunk read from a pipe is written at once, unchanged,
//! to oomguard's own stdout/stderr and to the attempt log, and its last bytes are kept in a
//! bounded tail for the classifier. No line buffering anywhere: tqdm's `\r` bars, ANSI colour and
//! invalid UTF-8 pass through byte for byte, and a 200 MB line without a newline costs only the
//! tail's fixed size.
//!
//! One OS thread per pipe does the copying (blocking reads and writes are the simplest correct
//! way to forward bytes promptly and apply the terminal's back-pressure to the job); the
//! supervisor only learns when both pipes are closed. Nothing here looks at the bytes' meaning.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Bytes read per `read(2)`: the default pipe capacity, so one read takes all that is there.
/// (A larger pipe, F_SETPIPE_SZ, measured no faster: the attempt log's writes dominate.)
const CHUNK_BYTES: usize = 64 * 1024;

/// The size of the tail the classifier sees: the last bytes of stdout and stderr, interleaved.
pub const TAIL_BYTES: usize = 256 * 1024;

/// The last `capacity` bytes written to it: a ring buffer filled with at most two copies per
/// chunk, since it sits on the output hot path.
#[derive(Debug)]
pub struct Tail {
    ring: Vec<u8>,
    /// Where the next byte goes.
    head: usize,
    /// Bytes held, up to `ring.len()`.
    len: usize,
}

impl Tail {
    pub fn new(capacity: usize) -> Self {
        Self {
            ring: vec![0; capacity],
            head: 0,
            len: 0,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let capacity = self.ring.len();
        let chunk = &chunk[chunk.len().saturating_sub(capacity)..];
        let first = chunk.len().min(capacity - self.head);
        self.ring[self.head..self.head + first].copy_from_slice(&chunk[..first]);
        self.ring[..chunk.len() - first].copy_from_slice(&chunk[first..]);
        self.head = (self.head + chunk.len()) % capacity;
        self.len = (self.len + chunk.len()).min(capacity);
    }

    /// The tail as text; invalid UTF-8 becomes U+FFFD (the classifier reads words, not bytes).
    pub fn text(&self) -> String {
        let start = (self.head + self.ring.len() - self.len) % self.ring.len();
        let mut joined = Vec::with_capacity(self.len);
        if start + self.len <= self.ring.len() {
            joined.extend_from_slice(&self.ring[start..start + self.len]);
        } else {
            joined.extend_from_slice(&self.ring[start..]);
            joined.extend_from_slice(&self.ring[..self.head]);
        }
        String::from_utf8_lossy(&joined).into_owned()
    }
}

/// Where a pipe's bytes are copied to, shared by the two pipes of one attempt.
#[derive(Clone)]
pub struct Sinks {
    log: Arc<Mutex<Option<File>>>,
    tail: Arc<Mutex<Tail>>,
}

impl Sinks {
    /// `log` is the attempt log; `None` when it could not be opened (the job still runs).
    pub fn new(log: Option<File>) -> Self {
        Self {
            log: Arc::new(Mutex::new(log)),
            tail: Arc::new(Mutex::new(Tail::new(TAIL_BYTES))),
        }
    }

    /// The tail text once both copiers are done.
    pub fn tail_text(&self) -> String {
        self.tail
            .lock()
            .expect("no copier panics while holding the tail")
            .text()
    }

    fn record(&self, chunk: &[u8]) {
        let mut log = self
            .log
            .lock()
            .expect("no copier panics while holding the log");
        if let Some(file) = log.as_mut() {
            if let Err(e) = file.write_all(chunk) {
                // A full disk must not kill the job: stop logging, keep forwarding.
                tracing::warn!("attempt log write failed, logging stops for this attempt: {e}");
                *log = None;
            }
        }
        drop(log);
        self.tail
            .lock()
            .expect("no copier panics while holding the tail")
            .push(chunk);
    }
}

/// Which of oomguard's own streams a pipe is forwarded to.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Stdout,
    Stderr,
}

/// Starts copying `pipe` to `target` and the sinks until EOF. `done` is called once at the end
/// (the supervisor uses it to wake up). Returns the number of bytes copied.
pub fn spawn_copier(
    pipe: impl Read + Send + 'static,
    target: Target,
    sinks: Sinks,
    done: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<u64>> {
    // An unbuffered handle on our fd 1 / fd 2: std's Stdout would hold back a partial line.
    let out = match target {
        Target::Stdout => io::stdout().as_fd().try_clone_to_owned()?,
        Target::Stderr => io::stderr().as_fd().try_clone_to_owned()?,
    };
    let out = File::from(out);
    std::thread::Builder::new()
        .name(format!("oomguard-{target:?}").to_lowercase())
        .spawn(move || {
            let copied = copy(pipe, out, &sinks);
            done();
            copied
        })
}

fn copy(mut pipe: impl Read, mut out: File, sinks: &Sinks) -> u64 {
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut total = 0u64;
    let mut out_ok = true;
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        if out_ok && out.write_all(chunk).is_err() {
            // Our reader went away (`oomguard run ... | head`): keep draining the job's pipe into
            // the log so the job is not killed by SIGPIPE on our account.
            out_ok = false;
        }
        sinks.record(chunk);
        total += n as u64;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut tail = Tail::new(8);
        tail.push(b"abc");
        tail.push(b"defgh");
        assert_eq!(tail.text(), "abcdefgh");
        tail.push(b"ij");
        assert_eq!(tail.text(), "cdefghij");
        tail.push(b"0123456789ABCDEF");
        assert_eq!(tail.text(), "89ABCDEF");
        tail.push(&[0xff, b'x']);
        assert_eq!(tail.text(), "ABCDEF\u{fffd}x");
        tail.push(b"12345678");
        assert_eq!(tail.text(), "12345678");
        let mut empty = Tail::new(4);
        assert_eq!(empty.text(), "");
        empty.push(b"");
        assert_eq!(empty.text(), "");
    }

    #[test]
    fn copies_bytes_unchanged_to_log_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("attempt-1.log");
        let sinks = Sinks::new(Some(File::create(&log_path).unwrap()));
        let out_path = dir.path().join("out");
        let data: Vec<u8> = b"epoch 1\r 50%|##   |\x1b[31mred\x1b[0m\xff\xfe no newline".to_vec();
        let copied = copy(&data[..], File::create(&out_path).unwrap(), &sinks);
        assert_eq!(copied, data.len() as u64);
        assert_eq!(std::fs::read(&out_path).unwrap(), data);
        assert_eq!(std::fs::read(&log_path).unwrap(), data);
        assert!(sinks.tail_text().ends_with(" no newline"));
    }
}
