//! `attempt-N.log` with a cap (`--log-max`): what is kept on disk of one attempt's output is its
//! first half of the cap and, once the output passes it, its last quarter to half, with a marker
//! line between them saying how many bytes were cut there. The job's output on the terminal is not
//! touched (that is [`crate::output::stream`]'s, which hands every byte here and to the terminal);
//! only what is kept on disk is bounded, so a job printing without end cannot fill the disk the run
//! directory is on.
//!
//! How the tail is kept without holding it in memory: past the head, output is appended to the
//! file; when the part after the head reaches half the cap, its last quarter of the cap is
//! copied down to just after the marker and the file truncated there (each byte is copied at
//! most once more), so the file stays under the cap (plus the marker, and one chunk between two
//! compactions) and always ends with the newest output, even if oomguard dies. The run's
//! closing warning names the logs that were cut ([`cut_summary`]).
//!
//! The hooks' output (`hooks.log`, [`AttemptLog::for_hooks`]) is kept the same way, under the
//! same cap and with the same marker: one more log of the run's, never more than `--log-max`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use crate::observe::units::human_bytes;

/// The default `--log-max`: a human-sized log many times over, bounded.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// The smallest `--log-max`: room for a head and a tail of a few long lines each.
pub const MIN_MAX_BYTES: u64 = 64 << 10;

/// The marker line's fixed length: it is rewritten in place with each new count.
const MARKER_BYTES: u64 = 320;

/// The kept tail starts at a line: the first newline within this many bytes of where the copy
/// would start (a longer line is cut where it falls).
const LINE_ALIGN_BYTES: u64 = 64 << 10;

/// Whose output a log keeps: its marker and the closing warning say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// An attempt's: the job's stdout and stderr, which the terminal also got whole.
    Job,
    /// The hooks' (`hooks.log`): kept here only.
    Hooks,
}

/// One attempt's log file, capped at `max_bytes`.
#[derive(Debug)]
pub struct AttemptLog {
    file: File,
    output: Output,
    /// The file's name (`attempt-2.log`), for the closing warning.
    name: String,
    max_bytes: u64,
    /// The first bytes of the output, kept whole: half the cap.
    head_bytes: u64,
    /// At least this much of the newest output is kept after a compaction: a quarter of the cap.
    tail_bytes: u64,
    /// The file's length: where the next byte goes.
    end: u64,
    /// Whether the head's last byte ended a line (the marker then needs no newline before it).
    head_ends_line: bool,
    /// Bytes of output cut from the middle so far; `None` until the first compaction (before
    /// it the file holds the whole output and has no marker).
    cut_bytes: Option<u64>,
}

impl AttemptLog {
    /// A new, empty log file `name` (`attempt-N.log`), capped at `max_bytes` (at least
    /// [`MIN_MAX_BYTES`]).
    pub fn new(file: File, name: String, max_bytes: u64) -> AttemptLog {
        let max_bytes = max_bytes.max(MIN_MAX_BYTES);
        AttemptLog {
            file,
            output: Output::Job,
            name,
            max_bytes,
            head_bytes: max_bytes / 2,
            tail_bytes: max_bytes / 4,
            end: 0,
            head_ends_line: true,
            cut_bytes: None,
        }
    }

    /// A new, empty log of the hooks' output (`hooks.log`), capped at `max_bytes` as an
    /// attempt's log is.
    pub fn for_hooks(file: File, name: String, max_bytes: u64) -> AttemptLog {
        AttemptLog {
            output: Output::Hooks,
            ..AttemptLog::new(file, name, max_bytes)
        }
    }

    /// Bytes cut from the middle so far (0 before the first cut).
    pub fn cut_bytes(&self) -> u64 {
        self.cut_bytes.unwrap_or(0)
    }

    /// The warning for this log once its middle was cut (`hooks.log kept only the first and last
    /// part of the hooks' output: ...`); `None` while it holds everything.
    pub fn cut_line(&self) -> Option<String> {
        let cut = self.cut_bytes?;
        let whose = match self.output {
            Output::Job => "the job's output",
            Output::Hooks => "the hooks' output",
        };
        Some(format!(
            "{} kept only the first and last part of {whose}: {} cut from the middle (marked where), as --log-max {} allows",
            self.name,
            human_bytes(cut),
            human_bytes(self.max_bytes)
        ))
    }

    /// Adds `bytes` of output: to the head while it has room, else after it, compacting the
    /// part after the head when it reaches half the cap.
    pub fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        if self.end < self.head_bytes {
            let n = bytes.len().min((self.head_bytes - self.end) as usize);
            self.file.write_all_at(&bytes[..n], self.end)?;
            self.end += n as u64;
            if n > 0 {
                self.head_ends_line = bytes[n - 1] == b'\n';
            }
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return Ok(());
        }
        self.file.write_all_at(bytes, self.end)?;
        self.end += bytes.len() as u64;
        let kept_from = self.tail_start();
        // The first time, room for the marker too, so the copy never overlaps what it reads.
        let room = match self.cut_bytes {
            None => 2 * self.tail_bytes + MARKER_BYTES,
            Some(_) => 2 * self.tail_bytes,
        };
        if self.end - kept_from >= room {
            self.compact(kept_from)?;
        }
        Ok(())
    }

    /// Where the part after the head starts: right after it, or after the marker once there
    /// is one.
    fn tail_start(&self) -> u64 {
        match self.cut_bytes {
            None => self.head_bytes,
            Some(_) => self.head_bytes + MARKER_BYTES,
        }
    }

    /// Keeps the last [`AttemptLog::tail_bytes`] (from a line start where one is near) right
    /// after the marker, drops what was between, and rewrites the marker with the new count.
    fn compact(&mut self, kept_from: u64) -> io::Result<()> {
        let mut from = self.end - self.tail_bytes;
        let mut probe = vec![0u8; LINE_ALIGN_BYTES.min(self.tail_bytes) as usize];
        self.file.read_exact_at(&mut probe, from)?;
        if let Some(newline) = probe.iter().position(|&b| b == b'\n') {
            from += newline as u64 + 1;
        }
        let to = self.head_bytes + MARKER_BYTES;
        let mut buf = vec![0u8; 64 << 10];
        let (mut src, mut dst) = (from, to);
        while src < self.end {
            let n = buf.len().min((self.end - src) as usize);
            self.file.read_exact_at(&mut buf[..n], src)?;
            self.file.write_all_at(&buf[..n], dst)?;
            src += n as u64;
            dst += n as u64;
        }
        self.file.set_len(dst)?;
        let cut = self.cut_bytes.unwrap_or(0) + (from - kept_from);
        self.cut_bytes = Some(cut);
        self.end = dst;
        self.file.write_all_at(&self.marker(cut), self.head_bytes)?;
        // The hooks' log is told by its reader ([`AttemptLog::cut_line`]): the hooks at the
        // run's end write after the closing warning.
        if self.output == Output::Job {
            note_cut(&self.name, cut, self.max_bytes);
        }
        Ok(())
    }

    /// The marker line, exactly [`MARKER_BYTES`] long (padded with spaces before its newline).
    fn marker(&self, cut_bytes: u64) -> Vec<u8> {
        let (whose, each, rest) = match self.output {
            Output::Job => (
                "the job's output",
                "each attempt's",
                "; the terminal got all of it",
            ),
            Output::Hooks => ("the hooks' output", "their", ""),
        };
        let text = format!(
            "{}[oomguard: {cut_bytes} bytes ({}) of {whose} cut here; --log-max {} keeps {each} first {} and about {} last {} or more{rest}]",
            if self.head_ends_line { "" } else { "\n" },
            human_bytes(cut_bytes),
            human_bytes(self.max_bytes),
            human_bytes(self.head_bytes),
            if self.output == Output::Job { "its" } else { "their" },
            human_bytes(self.tail_bytes),
        );
        let mut line = text.into_bytes();
        line.truncate(MARKER_BYTES as usize - 1);
        line.resize(MARKER_BYTES as usize - 1, b' ');
        line.push(b'\n');
        line
    }
}

/// The attempt logs cut so far in this run: (file name, bytes cut), and the cap. Process-wide
/// because the logs are written by the stream's reader threads, which hold no handle of the
/// run's.
static CUT: Mutex<(Vec<(String, u64)>, u64)> = Mutex::new((Vec::new(), 0));

fn note_cut(name: &str, cut_bytes: u64, max_bytes: u64) {
    let mut cut = CUT.lock().unwrap_or_else(|e| e.into_inner());
    cut.1 = max_bytes;
    match cut.0.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = cut_bytes,
        None => cut.0.push((name.to_string(), cut_bytes)),
    }
}

/// The run's one closing warning about logs cut to `--log-max`, if any was.
pub fn cut_summary() -> Option<String> {
    let cut = CUT.lock().unwrap_or_else(|e| e.into_inner());
    cut_line(&cut.0, cut.1)
}

fn cut_line(logs: &[(String, u64)], max_bytes: u64) -> Option<String> {
    if logs.is_empty() {
        return None;
    }
    let names: Vec<&str> = logs.iter().map(|(n, _)| n.as_str()).collect();
    let total: u64 = logs.iter().map(|(_, c)| c).sum();
    Some(format!(
        "{} kept only the first and last part of the job's output: {} cut from the middle (marked where), as --log-max {} allows per attempt; the terminal got all of it",
        names.join(", "),
        human_bytes(total),
        human_bytes(max_bytes)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbered lines `line N\n`, `count` of them, as one stream.
    fn lines(count: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|i| format!("line {i:06}\n").into_bytes())
            .collect()
    }

    /// A new file `name` in `dir`, open for reading and writing, as the run directory makes a log.
    fn new_file(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, File) {
        let path = dir.join(name);
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        (path, file)
    }

    /// Writes `output` in `piece`-byte writes to a log capped at `max`; returns the file's text
    /// and the log.
    fn logged(output: &[u8], piece: usize, max: u64) -> (Vec<u8>, AttemptLog) {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = new_file(dir.path(), "attempt-1.log");
        let mut log = AttemptLog::new(file, "attempt-1.log".into(), max);
        for chunk in output.chunks(piece) {
            log.write_all(chunk).unwrap();
        }
        (std::fs::read(&path).unwrap(), log)
    }

    #[test]
    fn output_under_the_cap_is_kept_whole() {
        let max = 64 << 10;
        for (case, output) in [
            ("empty", Vec::new()),
            ("short", lines(10)),
            ("just under the first compaction", lines(5000)),
        ] {
            let (kept, log) = logged(&output, 4096, max);
            assert!(
                kept == output,
                "{case}: {} of {} bytes",
                kept.len(),
                output.len()
            );
            assert_eq!(log.cut_bytes, None, "{case}");
        }
    }

    #[test]
    fn output_past_the_cap_keeps_its_head_its_tail_and_a_marker_with_the_count() {
        // (case, output, write size, cap)
        let table = [
            ("many small writes", lines(60_000), 12, 64 << 10),
            ("64 KiB writes", lines(60_000), 64 << 10, 64 << 10),
            ("a larger cap", lines(200_000), 4096, 1 << 20),
            ("no newline at all", vec![b'x'; 700_000], 1000, 64 << 10),
        ];
        for (case, output, piece, max) in table {
            let (kept, log) = logged(&output, piece, max);
            let head = (max / 2) as usize;
            assert!(kept[..head] == output[..head], "{case}: the head");
            let marker = &kept[head..head + MARKER_BYTES as usize];
            let cut = log.cut_bytes.expect("cut");
            let text = String::from_utf8_lossy(marker);
            assert!(
                text.trim_start_matches('\n')
                    .starts_with(&format!("[oomguard: {cut} bytes ("))
                    && text.ends_with("\n"),
                "{case}: {text}"
            );
            let tail = &kept[head + MARKER_BYTES as usize..];
            assert!(
                output.ends_with(tail),
                "{case}: the tail is the output's end"
            );
            assert_eq!(
                head as u64 + cut + tail.len() as u64,
                output.len() as u64,
                "{case}: the count is what is missing"
            );
            // A quarter of the cap, less the part of a line before the first newline in it.
            assert!(
                tail.len() as u64 >= max / 4 - 12,
                "{case}: {} bytes of tail",
                tail.len()
            );
            assert!(
                kept.len() as u64 <= max + MARKER_BYTES + piece as u64,
                "{case}: {} bytes kept",
                kept.len()
            );
            if output.contains(&b'\n') {
                assert!(
                    tail.starts_with(b"line "),
                    "{case}: the tail starts at a line"
                );
            }
        }
    }

    #[test]
    fn the_hooks_log_is_cut_under_the_same_cap_with_the_same_marker() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = new_file(dir.path(), "hooks.log");
        let max = 64 << 10;
        let mut log = AttemptLog::for_hooks(file, "hooks.log".into(), max);
        let output = lines(60_000);
        for chunk in output.chunks(4096) {
            log.write_all(chunk).unwrap();
        }
        let kept = std::fs::read(&path).unwrap();
        assert!(
            kept.len() as u64 <= max + MARKER_BYTES + 4096,
            "{}",
            kept.len()
        );
        let head = (max / 2) as usize;
        let marker = String::from_utf8_lossy(&kept[head..head + MARKER_BYTES as usize]);
        assert!(
            marker.trim_start_matches('\n').starts_with(&format!(
                "[oomguard: {} bytes (",
                log.cut_bytes.expect("cut")
            )) && marker
                .contains("of the hooks' output cut here; --log-max 64.0 KiB keeps their first"),
            "{marker}"
        );
        assert!(output.ends_with(&kept[head + MARKER_BYTES as usize..]));
        assert_eq!(
            log.cut_line().unwrap(),
            format!(
                "hooks.log kept only the first and last part of the hooks' output: {} cut from the middle (marked where), as --log-max 64.0 KiB allows",
                human_bytes(log.cut_bytes())
            )
        );
        assert!(
            !CUT.lock().unwrap().0.iter().any(|(n, _)| n == "hooks.log"),
            "told by its reader, not in the attempt logs' warning"
        );
    }

    #[test]
    fn a_head_cut_within_a_line_puts_the_marker_on_a_line_of_its_own() {
        let output = [b"ab".repeat(20_000), lines(20_000)].concat();
        let (kept, _) = logged(&output, 4096, 64 << 10);
        let head = 32 << 10;
        assert_eq!(&kept[head..head + 12], b"\n[oomguard: ");
    }

    #[test]
    fn the_closing_warning_names_each_cut_log_once_with_the_total() {
        assert_eq!(cut_line(&[], 64 << 20), None);
        let line = cut_line(
            &[
                ("attempt-1.log".into(), 3 << 20),
                ("attempt-3.log".into(), 1 << 20),
            ],
            64 << 20,
        )
        .unwrap();
        assert!(
            line.starts_with("attempt-1.log, attempt-3.log kept only the first and last part of the job's output: 4.0 MiB cut from the middle (marked where), as --log-max 64.0 MiB allows per attempt"),
            "{line}"
        );
    }
}
