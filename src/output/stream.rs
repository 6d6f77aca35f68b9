//! Carries the job's output: a *reader* thread per job stream (a pipe, or the master of the job's
//! pseudo-terminal) reads a chunk, hands it first to the attempt's record (attempt log and the
//! classifier's tail), then to a *writer* thread that owns oomguard's own stdout or stderr and
//! writes the bytes out unchanged. oomguard's own `oomguard: ...` lines go through the same
//! writer, so they come after every byte of the job already queued, and on a line of their own.
//!
//! Why two sides: a slow reader of oomguard's output (`| less`, a terminal paused with Ctrl-S,
//! ssh) must not cost a byte of the log or the tail, nor keep an attempt from ending. The writer's
//! queue is capped ([`QUEUE_CAP_BYTES`]): past it, readers wait, so a slow terminal still slows
//! down a running job as `tee` would; once the job's processes are all gone the supervisor lifts
//! the cap ([`Forwarder::release`]) and the readers drain the pipes to EOF (what is left is bounded
//! by the pipes' capacity). Writers keep going across attempts, in order, and oomguard waits for
//! them before it exits ([`finish`]); a closed stdout (EPIPE) only stops forwarding.
//!
//! The record is assembled per stream at line boundaries, so a stdout line and a stderr line never
//! splice in the log or in the tail: a chunk's complete lines go in at once, its unfinished rest
//! waits for its newline (at most [`LINE_CAP_BYTES`], so a `\r` progress bar or a 200 MB line
//! cannot grow memory). Where one stream's unfinished line had to be written out (its stream
//! ended, or it passed the cap) and the other stream's output follows, a newline is put between
//! them. Nothing here looks at the bytes' meaning; what oomguard's stdout and stderr receive is
//! exactly what the job wrote. What the log keeps of it is bounded by the log itself
//! ([`crate::output::attempt_log`], `--log-max`); run for another user, the readers write it with
//! that user's filesystem identity ([`crate::guard::principal::write_as_user_from_now`]).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::output::attempt_log::AttemptLog;

/// Bytes read per `read(2)`: the default pipe capacity, so one read takes all that is there.
/// (A larger pipe, F_SETPIPE_SZ, measured no faster: the attempt log's writes dominate.)
const CHUNK_BYTES: usize = 64 * 1024;

/// The size of the tail the classifier sees: the last bytes of stdout and stderr, interleaved
/// at line boundaries.
pub const TAIL_BYTES: usize = 256 * 1024;

/// How much of the job's output may wait for a slow reader of oomguard's stdout or stderr before
/// the job's readers stop reading (and the job, once its pipe is full, blocks as under `tee`).
pub const QUEUE_CAP_BYTES: usize = 4 << 20;

/// The longest unfinished line kept back from the log and tail while its newline is awaited.
pub const LINE_CAP_BYTES: usize = 64 * 1024;

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
        // Valid UTF-8 (the common case) is taken as it is, not copied a second time.
        String::from_utf8(joined)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

/// Which of the job's streams a chunk came from, and which of oomguard's own streams it is
/// forwarded to (a pseudo-terminal's single stream is `Stdout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Stdout,
    Stderr,
}

impl Target {
    fn index(self) -> usize {
        match self {
            Target::Stdout => 0,
            Target::Stderr => 1,
        }
    }
}

/// Assembles one stream's bytes into whole lines: [`push`](Self::push) returns what may go into
/// the record now (everything through the chunk's last newline, or the unfinished line once it
/// passes `cap`), keeping the rest back.
#[derive(Debug)]
pub struct LineAssembler {
    pending: Vec<u8>,
    cap: usize,
}

impl LineAssembler {
    pub fn new(cap: usize) -> Self {
        Self {
            pending: Vec::new(),
            cap,
        }
    }

    /// Takes a chunk; calls `emit` with the pieces ready for the record, in order.
    pub fn push(&mut self, chunk: &[u8], mut emit: impl FnMut(&[u8])) {
        match chunk.iter().rposition(|&b| b == b'\n') {
            Some(last_newline) => {
                let (lines, rest) = chunk.split_at(last_newline + 1);
                if !self.pending.is_empty() {
                    emit(&self.pending);
                    self.pending.clear();
                }
                emit(lines);
                self.pending.extend_from_slice(rest);
            }
            None => self.pending.extend_from_slice(chunk),
        }
        if self.pending.len() >= self.cap {
            emit(&self.pending);
            self.pending.clear();
        }
    }

    /// The stream ended: what is still held back, if anything.
    pub fn finish(&mut self, emit: impl FnOnce(&[u8])) {
        if !self.pending.is_empty() {
            emit(&self.pending);
            self.pending.clear();
        }
    }
}

/// The attempt's record: each stream's line assembler in front of the log and tail.
struct Record {
    lines: [LineAssembler; 2],
    out: RecordOut,
}

/// The attempt log and the tail, fed whole lines from both streams.
struct RecordOut {
    log: Option<AttemptLog>,
    tail: Tail,
    /// The stream that wrote last, and whether its last byte ended a line.
    last: Option<(Target, bool)>,
}

impl RecordOut {
    fn write(&mut self, stream: Target, piece: &[u8]) {
        if matches!(self.last, Some((other, false)) if other != stream) {
            // The other stream's unfinished line was written out (its stream ended, or it passed
            // the cap): end it, so the two streams' lines do not splice.
            self.append(b"\n");
        }
        self.append(piece);
        self.last = Some((stream, piece.last() == Some(&b'\n')));
    }

    fn append(&mut self, bytes: &[u8]) {
        if let Some(file) = self.log.as_mut() {
            if let Err(e) = file.write_all(bytes) {
                // A full disk must not kill the job: stop logging, keep forwarding; the run's
                // last warning says the log is cut short.
                crate::output::unsaved::unsaved("attempt logs", &e);
                self.log = None;
            }
        }
        self.tail.push(bytes);
    }
}

/// Where the job's bytes are recorded, shared by the readers of one attempt.
#[derive(Clone)]
pub struct Sinks {
    record: Arc<Mutex<Record>>,
    bytes_read: Arc<AtomicU64>,
    /// Readers handing a chunk to oomguard's own stdout or stderr right now (waiting for room
    /// there while a slow reader of oomguard's output holds the job back).
    forwarding: Arc<AtomicUsize>,
}

impl Sinks {
    /// `log` is the attempt log; `None` when it could not be opened (the job still runs).
    pub fn new(log: Option<AttemptLog>) -> Self {
        Self {
            record: Arc::new(Mutex::new(Record {
                lines: [
                    LineAssembler::new(LINE_CAP_BYTES),
                    LineAssembler::new(LINE_CAP_BYTES),
                ],
                out: RecordOut {
                    log,
                    tail: Tail::new(TAIL_BYTES),
                    last: None,
                },
            })),
            bytes_read: Arc::new(AtomicU64::new(0)),
            forwarding: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The tail text once the readers are done. An unfinished line still held back (a reader gave
    /// up on by the supervisor, its pipe held open by a stray process) is added at the end on a
    /// line of its own: the classifier sees every byte read.
    pub fn tail_text(&self) -> String {
        let record = self.lock();
        let mut text = record.out.tail.text();
        for held in record.lines.iter().filter(|l| !l.pending.is_empty()) {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&String::from_utf8_lossy(&held.pending));
        }
        text
    }

    /// Bytes read from the job so far: the supervisor watches it to tell a pipe that still
    /// carries output from one held open by a stray process.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Whether a reader holds a chunk of the job's output it is still handing to oomguard's own
    /// stdout or stderr (waiting for room there): the job is writing, oomguard's reader is slow.
    /// The quiet watch (`--hang-timeout`) does not count that as silence.
    pub fn output_waiting(&self) -> bool {
        self.forwarding.load(Ordering::Relaxed) > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record
            .lock()
            .expect("no reader panics while holding the record")
    }

    fn record(&self, stream: Target, chunk: &[u8]) {
        self.bytes_read
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        let mut record = self.lock();
        let Record { lines, out } = &mut *record;
        lines[stream.index()].push(chunk, |piece| out.write(stream, piece));
    }

    /// The supervisor gives up on pipes a process outside the job still holds: what each
    /// stream holds back as an unfinished line goes to the log and the tail now, as at EOF.
    pub fn end_streams(&self) {
        self.end_stream(Target::Stdout);
        self.end_stream(Target::Stderr);
    }

    fn end_stream(&self, stream: Target) {
        let mut record = self.lock();
        let Record { lines, out } = &mut *record;
        lines[stream.index()].finish(|piece| out.write(stream, piece));
    }
}

/// Starts reading `pipe` (one of the job's streams) until EOF: each chunk goes to the sinks, then
/// to oomguard's own `target` stream through the installed [`Forwarder`] (or straight to our
/// fd 1 / fd 2 when none is installed). While the writer's queue is full the reader waits, unless
/// `unbounded` is set (see [`Forwarder::release`]). `done` is called once at the end (the
/// supervisor uses it to wake up). Returns the number of bytes read.
pub fn spawn_copier(
    pipe: impl Read + Send + 'static,
    target: Target,
    sinks: Sinks,
    unbounded: Arc<AtomicBool>,
    done: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<u64>> {
    let direct = match FORWARDER.get() {
        Some(_) => None,
        // An unbuffered handle on our fd 1 / fd 2: std's Stdout would hold back a partial line.
        None => Some(File::from(match target {
            Target::Stdout => io::stdout().as_fd().try_clone_to_owned()?,
            Target::Stderr => io::stderr().as_fd().try_clone_to_owned()?,
        })),
    };
    std::thread::Builder::new()
        .name(format!("oomguard-{target:?}").to_lowercase())
        .spawn(move || {
            // Run for another user, the log is written with that user's filesystem identity and
            // without CAP_SYS_RESOURCE: their output never spends root's reserved blocks.
            if let Err(e) = crate::guard::principal::write_as_user_from_now() {
                tracing::warn!("the job's output is written to its log as root: {e}");
            }
            let mut direct = direct;
            let copied = pump(pipe, target, &sinks, |chunk| {
                if let Some(forwarder) = FORWARDER.get() {
                    return forwarder.forward(target, chunk, &unbounded);
                }
                if let Some(out) = direct.as_mut() {
                    if out.write_all(&chunk).is_err() {
                        // Our reader went away (`oomguard run ... | head`): keep draining the
                        // job's pipe into the log so the job is not killed by SIGPIPE on our
                        // account.
                        direct = None;
                    }
                }
                refill(chunk)
            });
            done();
            copied
        })
}

/// Reads `pipe` to EOF (or a read error: a pseudo-terminal's master reads EIO once the job's
/// side is closed), recording each chunk before forwarding it. `forward` takes the chunk's
/// buffer and hands back one to read into next ([`CHUNK_BYTES`] long), so buffers circulate
/// between reader and writer without a copy.
fn pump(
    mut pipe: impl Read,
    stream: Target,
    sinks: &Sinks,
    mut forward: impl FnMut(Vec<u8>) -> Vec<u8>,
) -> u64 {
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut total = 0u64;
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // The record first: a reader that never reads oomguard's output must not cost the log
        // or the classifier a byte.
        sinks.record(stream, &buf[..n]);
        buf.truncate(n);
        sinks.forwarding.fetch_add(1, Ordering::Relaxed);
        buf = forward(buf);
        sinks.forwarding.fetch_sub(1, Ordering::Relaxed);
        total += n as u64;
    }
    sinks.end_stream(stream);
    total
}

/// A buffer back to its full [`CHUNK_BYTES`] length, ready for the next read.
fn refill(mut buf: Vec<u8>) -> Vec<u8> {
    buf.resize(CHUNK_BYTES, 0);
    buf
}

/// Read buffers kept for reuse per destination: enough for the reader(s) to never wait on an
/// allocation in steady state, few enough to be nothing next to the queue's cap.
const SPARE_BUFFERS: usize = 4;

/// One of oomguard's output files (its fd 1 and fd 2 are one destination when they are the same
/// file, e.g. a terminal or `>log 2>&1`): a queue of chunks, each tagged with the fd to write.
struct Destination {
    queue: Mutex<Queue>,
    /// The writer waits here for chunks.
    filled: Condvar,
    /// Readers wait here for room below the cap.
    drained: Condvar,
}

struct Queue {
    chunks: VecDeque<(Target, Vec<u8>)>,
    bytes: usize,
    /// No writer any more: oomguard is ending. Own lines are written directly from now on.
    closed: bool,
    /// Whether the last byte queued here ended a line (or nothing was queued yet).
    at_line_start: bool,
    /// The writer waits on `filled`; readers waiting on `drained`. Counted so that the hot path
    /// makes no futex call when nobody waits.
    writer_waits: bool,
    readers_waiting: usize,
    /// Written-out chunk buffers, returned to the readers.
    spare: Vec<Vec<u8>>,
}

/// oomguard's own stdout and stderr, each written by its own thread from a queue (one thread when
/// they are the same file). Installed once per run with [`install`].
pub struct Forwarder {
    dests: Vec<Arc<Destination>>,
    /// Which destination each of fd 1 and fd 2 goes to.
    route: [usize; 2],
    /// Unbuffered handles on fd 1 and fd 2 (`None` where that fd is closed).
    outs: Arc<[Option<File>; 2]>,
    /// Set by a writer when a write to that fd failed (EPIPE: our reader went away).
    broken: Arc<[AtomicBool; 2]>,
    writers: Mutex<Vec<JoinHandle<()>>>,
}

static FORWARDER: OnceLock<Forwarder> = OnceLock::new();

/// Starts the writer threads for oomguard's stdout and stderr; from now on the job's output and
/// oomguard's own lines go through them, until [`finish`]. Installing twice is a no-op.
pub fn install() -> io::Result<()> {
    if FORWARDER.get().is_some() {
        return Ok(());
    }
    // A closed fd 1 or fd 2 (`>&-`) is a reader that went away: nothing is forwarded there.
    let outs = Arc::new([
        io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .map(File::from),
        io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .map(File::from),
    ]);
    let same_file = match (&outs[0], &outs[1]) {
        (Some(out), Some(err)) => match (out.metadata(), err.metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        },
        _ => false,
    };
    let route = if same_file { [0, 0] } else { [0, 1] };
    let broken = Arc::new([
        AtomicBool::new(outs[0].is_none()),
        AtomicBool::new(outs[1].is_none()),
    ]);
    let mut dests = Vec::new();
    let mut writers = Vec::new();
    for name in if same_file {
        &["out"][..]
    } else {
        &["out", "err"][..]
    } {
        let dest = Arc::new(Destination {
            queue: Mutex::new(Queue {
                chunks: VecDeque::new(),
                bytes: 0,
                closed: false,
                at_line_start: true,
                writer_waits: false,
                readers_waiting: 0,
                spare: Vec::new(),
            }),
            filled: Condvar::new(),
            drained: Condvar::new(),
        });
        let (d, o, b) = (dest.clone(), outs.clone(), broken.clone());
        writers.push(
            std::thread::Builder::new()
                .name(format!("oomguard-write-{name}"))
                .spawn(move || write_loop(&d, &o, &b))?,
        );
        dests.push(dest);
    }
    let forwarder = Forwarder {
        dests,
        route,
        outs,
        broken,
        writers: Mutex::new(writers),
    };
    if FORWARDER.set(forwarder).is_err() {
        unreachable!("install runs on the main thread only, once per run");
    }
    Ok(())
}

/// Waits until every queued byte is written to oomguard's stdout and stderr (as `tee` would, this
/// blocks while nobody reads them), then stops the writers. Later own lines are written directly.
pub fn finish() {
    let Some(forwarder) = FORWARDER.get() else {
        return;
    };
    for dest in &forwarder.dests {
        let mut queue = dest.lock();
        queue.closed = true;
        drop(queue);
        dest.filled.notify_all();
        dest.drained.notify_all();
    }
    let writers = std::mem::take(
        &mut *forwarder
            .writers
            .lock()
            .expect("no thread panics while holding the writer list"),
    );
    for writer in writers {
        let _ = writer.join();
    }
}

/// Writes one of oomguard's own lines (`text` ends with its newline) to its stderr, after every
/// byte of the job's output already queued there, starting a new line first if the last byte
/// queued there did not end one (an unfinished tqdm bar).
pub fn own_line(text: &[u8]) {
    match FORWARDER.get() {
        Some(forwarder) => forwarder.own(Target::Stderr, text),
        // One write per line, so our line never interleaves mid-way with another writer's.
        None => {
            let _ = io::stderr().lock().write_all(text);
        }
    }
}

/// `io::Write` for `tracing`: each write is one formatted line, sent as [`own_line`] does.
pub struct OwnStderr;

impl Write for OwnStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        own_line(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The writer thread of one destination.
fn write_loop(dest: &Destination, outs: &[Option<File>; 2], broken: &[AtomicBool; 2]) {
    let mut written: Option<Vec<u8>> = None;
    loop {
        let (target, chunk) = {
            let mut queue = dest.lock();
            if let Some(buf) = written.take() {
                if buf.capacity() >= CHUNK_BYTES && queue.spare.len() < SPARE_BUFFERS {
                    queue.spare.push(buf);
                }
            }
            let next = loop {
                if let Some(next) = queue.chunks.pop_front() {
                    queue.bytes -= next.1.len();
                    break next;
                }
                if queue.closed {
                    return;
                }
                queue.writer_waits = true;
                queue = dest
                    .filled
                    .wait(queue)
                    .expect("no thread panics while holding a queue");
                queue.writer_waits = false;
            };
            if queue.readers_waiting > 0 {
                dest.drained.notify_all();
            }
            next
        };
        if let Some(mut out) = outs[target.index()].as_ref() {
            if !broken[target.index()].load(Ordering::Relaxed) && out.write_all(&chunk).is_err() {
                // Our reader went away (`oomguard run ... | head`): stop forwarding; the readers
                // keep draining the job's pipes into the log so the job is not killed by SIGPIPE
                // on our account.
                broken[target.index()].store(true, Ordering::Relaxed);
            }
        }
        written = Some(chunk);
    }
}

impl Destination {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .expect("no thread panics while holding a queue")
    }
}

impl Forwarder {
    /// Queues a chunk of the job's output for our `target`, waiting while the queue holds more
    /// than the cap, unless `unbounded` is set. Returns a buffer for the next read.
    fn forward(&self, target: Target, chunk: Vec<u8>, unbounded: &AtomicBool) -> Vec<u8> {
        let broken = &self.broken[target.index()];
        let dest = &self.dests[self.route[target.index()]];
        let mut queue = dest.lock();
        while queue.bytes > QUEUE_CAP_BYTES
            && !queue.closed
            && !unbounded.load(Ordering::Acquire)
            && !broken.load(Ordering::Relaxed)
        {
            queue.readers_waiting += 1;
            queue = dest
                .drained
                .wait(queue)
                .expect("no thread panics while holding a queue");
            queue.readers_waiting -= 1;
        }
        if queue.closed || broken.load(Ordering::Relaxed) || chunk.is_empty() {
            return refill(chunk);
        }
        queue.at_line_start = chunk.last() == Some(&b'\n');
        queue.bytes += chunk.len();
        queue.chunks.push_back((target, chunk));
        if queue.writer_waits {
            dest.filled.notify_one();
        }
        let spare = queue.spare.pop();
        drop(queue);
        spare.map_or_else(|| vec![0u8; CHUNK_BYTES], refill)
    }

    /// Lifts the queue cap for readers given `unbounded`: the job's processes are gone, and what
    /// is left in its pipes is bounded by their capacity, so it is read to EOF at once.
    pub fn release(unbounded: &AtomicBool) {
        unbounded.store(true, Ordering::Release);
        let Some(forwarder) = FORWARDER.get() else {
            return;
        };
        for dest in &forwarder.dests {
            // Taking the lock orders this wake-up after any reader's check of the flag.
            drop(dest.lock());
            dest.drained.notify_all();
        }
    }

    /// Queues (or, once closed, writes) one of oomguard's own lines; never waits for room, so a
    /// slow terminal never stalls supervision.
    fn own(&self, target: Target, text: &[u8]) {
        let dest = &self.dests[self.route[target.index()]];
        let mut queue = dest.lock();
        let mut line = Vec::with_capacity(text.len() + 1);
        if !queue.at_line_start {
            line.push(b'\n');
        }
        line.extend_from_slice(text);
        queue.at_line_start = line.last() == Some(&b'\n');
        if queue.closed {
            // Write while holding the lock, so lines from two threads do not interleave.
            if let Some(mut out) = self.outs[target.index()].as_ref() {
                let _ = out.write_all(&line);
            }
            return;
        }
        queue.bytes += line.len();
        queue.chunks.push_back((target, line));
        if queue.writer_waits {
            dest.filled.notify_one();
        }
    }
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

    /// Chunks pushed, the cap, and the pieces emitted (the finish included).
    type AssemblerRow = (&'static [&'static [u8]], usize, &'static [&'static [u8]]);

    #[test]
    fn line_assembler_holds_back_unfinished_lines() {
        let table: &[AssemblerRow] = &[
            (&[b"a\nb\n"], 64, &[b"a\nb\n"]),
            (&[b"out 6", b"\n"], 64, &[b"out 6", b"\n"]),
            (
                &[b"ab", b"c\nde", b"f\n"],
                64,
                &[b"ab", b"c\n", b"de", b"f\n"],
            ),
            (&[b"no newline"], 64, &[b"no newline"]),
            (
                &[b"\r 10%", b"\r 20%", b"\r 30%"],
                10,
                &[b"\r 10%\r 20%", b"\r 30%"],
            ),
            (&[b"x\n0123456789abc"], 8, &[b"x\n", b"0123456789abc"]),
            (&[b"", b"\n"], 64, &[b"\n"]),
        ];
        for (chunks, cap, want) in table {
            let mut lines = LineAssembler::new(*cap);
            let mut got: Vec<Vec<u8>> = Vec::new();
            for chunk in *chunks {
                lines.push(chunk, |piece| got.push(piece.to_vec()));
            }
            lines.finish(|piece| got.push(piece.to_vec()));
            let want: Vec<Vec<u8>> = want.iter().map(|p| p.to_vec()).collect();
            assert_eq!(got, want, "{chunks:?} cap {cap}");
        }
    }

    #[test]
    fn record_never_splices_two_streams() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("attempt-1.log");
        let sinks = Sinks::new(Some(AttemptLog::new(
            File::create(&log_path).unwrap(),
            "attempt-1.log".into(),
            64 << 20,
        )));
        sinks.record(Target::Stdout, b"out 6");
        sinks.record(Target::Stderr, b"err 0\n");
        sinks.record(Target::Stdout, b"\n");
        sinks.record(Target::Stderr, b"...not writable");
        sinks.record(Target::Stdout, b"step 10: OOM\n");
        sinks.end_stream(Target::Stderr);
        sinks.record(Target::Stdout, b"after\n");
        sinks.end_stream(Target::Stdout);
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert_eq!(log, "err 0\nout 6\nstep 10: OOM\n...not writable\nafter\n");
        assert_eq!(sinks.tail_text(), log);
        assert_eq!(sinks.bytes_read(), 46);
    }

    #[test]
    fn the_tail_holds_a_line_still_unfinished_when_the_attempt_ends() {
        // A reader given up on (its pipe held open by a stray process) never ends its stream:
        // what it read is still the classifier's.
        let sinks = Sinks::new(None);
        sinks.record(Target::Stdout, b"step 9\n");
        sinks.record(Target::Stderr, b"MemoryError");
        assert_eq!(sinks.tail_text(), "step 9\nMemoryError");
    }

    #[test]
    fn a_chunk_being_forwarded_is_output_waiting() {
        let sinks = Sinks::new(None);
        let mut seen_waiting = Vec::new();
        pump(&b"step 1\nstep 2\n"[..], Target::Stdout, &sinks, |chunk| {
            seen_waiting.push(sinks.output_waiting());
            refill(chunk)
        });
        assert_eq!(seen_waiting, [true]);
        assert!(!sinks.output_waiting(), "nothing held once forwarded");
    }

    #[test]
    fn copies_bytes_unchanged_to_log_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("attempt-1.log");
        let sinks = Sinks::new(Some(AttemptLog::new(
            File::create(&log_path).unwrap(),
            "attempt-1.log".into(),
            64 << 20,
        )));
        let data: Vec<u8> = b"epoch 1\r 50%|##   |\x1b[31mred\x1b[0m\xff\xfe no newline".to_vec();
        let mut forwarded = Vec::new();
        let copied = pump(&data[..], Target::Stdout, &sinks, |chunk| {
            forwarded.extend_from_slice(&chunk);
            refill(chunk)
        });
        assert_eq!(copied, data.len() as u64);
        assert_eq!(forwarded, data);
        assert_eq!(std::fs::read(&log_path).unwrap(), data);
        assert!(sinks.tail_text().ends_with(" no newline"));
    }
}
