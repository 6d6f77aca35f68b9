//! Resume from the checkpoint (`--resume-arg FLAG --checkpoint GLOB [--resume-first]`): before
//! a relaunch, find the newest file matching GLOB that the run wrote (newer than its start) and
//! that is complete, and hand it to the job as `FLAG PATH`.
//!
//! "Complete" is judged from outside: its size and modification time stayed the same for one
//! `--interval`; where its format tells ([`shape`]: torch.save's zip, safetensors), it is whole;
//! and oomguard's own stop of the job's processes did not cut it short ([`judge`]): a file the stop
//! cut stops changing too, so one a process of the job had open for writing at the stop is never
//! used, nor one modified within an interval of the stop (or after it) whose format cannot say it
//! is whole (a writer that reopens the file per piece holds it open at no instant oomguard could
//! catch). A [`Watch`] keeps the looks at the candidates and says how long to wait before the next
//! one; it is pure (the caller lists the files with [`Resume::scan`] and does the waiting, during
//! the backoff it waits anyway), so the rules are table-tested. It does not read checkpoints beyond
//! the few bytes a format check needs, and knows nothing of what the job's processes were doing.
//! Where the flag sits in the command, and how it is rewritten, is [`crate::knobs::argv`]'s:
//! [`Resume::edits`] returns the [`Edit`]s that put the path there. Saying what was chosen is the
//! caller's: the run's events (`RunEvent`, in [`mod@crate::run`]).

use std::cmp::Ordering;
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::knobs::argv::{self, Edit, Place, RewriteError, Site};
use crate::knobs::{self, KnobSet};

/// The validated `--resume-arg` / `--checkpoint` / `--resume-first` settings of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// Where the flag's value sits in the command, or where the flag is added: at the end of
    /// the part holding the batch knob (the job's own flags are there), else of the last part.
    pub place: Place,
    /// The glob, relative to the working directory (which the job shares).
    pub pattern: String,
    /// `--resume-first`: attempt 1 also gets the newest matching file, however old.
    pub first: bool,
}

/// Why the resume flags do not make a run.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("--resume-arg {flag}: {source}")]
    Flag { flag: String, source: RewriteError },
    #[error("--checkpoint `{pattern}` is not a valid glob ({why}): use `*`, `?`, `[...]` and `**`, quoted so the shell leaves them alone")]
    Pattern { pattern: String, why: String },
    #[error("--resume-arg {name} is also the knob {knob}: name the job's checkpoint flag")]
    IsAKnob { name: String, knob: String },
}

impl Resume {
    /// Checks `flag` against the command (a flag in two programs' arguments needs `@N`; a
    /// valued flag needs its value) and compiles `pattern`.
    pub fn new(
        command: &[OsString],
        flag: &str,
        pattern: &str,
        first: bool,
        knobs: &KnobSet,
    ) -> Result<Resume, ResumeError> {
        glob::Pattern::new(pattern).map_err(|e| ResumeError::Pattern {
            pattern: pattern.to_string(),
            why: e.msg.to_string(),
        })?;
        if pattern.trim().is_empty() {
            // Valid as a glob, and matches nothing ever: the run would never resume.
            return Err(ResumeError::Pattern {
                pattern: pattern.to_string(),
                why: "it is empty".to_string(),
            });
        }
        let to_error = |source| ResumeError::Flag {
            flag: flag.to_string(),
            source,
        };
        let (mut place, _) = argv::locate_flag(command, flag, "--resume-arg").map_err(to_error)?;
        for knob in &knobs.knobs {
            if let knobs::Place::Argv(at) = &knob.place {
                if at.name() == place.name() {
                    return Err(ResumeError::IsAKnob {
                        name: place.name().to_string(),
                        knob: knob.name.clone(),
                    });
                }
            }
        }
        // Absent, and no part named with `@N`: it goes with the batch flag, not after a
        // launcher's `--` worker arguments that hold no batch.
        if let (Place::Absent { at, .. }, false) = (&mut place, flag.contains('@')) {
            if let Some(end) = batch_part_end(command, knobs) {
                *at = end;
            }
        }
        Ok(Resume {
            place,
            pattern: pattern.to_string(),
            first,
        })
    }

    /// The edits that give the job `FLAG path`: every occurrence's value replaced, or the flag
    /// added where [`Resume::place`] says.
    pub fn edits(&self, command: &[OsString], path: &Path) -> Vec<Edit> {
        let path = path.as_os_str();
        match &self.place {
            Place::Flag { sites, .. } => sites
                .iter()
                .map(|site| match *site {
                    Site::Separate(i) => Edit::Replace(i, path.to_owned()),
                    Site::Joined(i) => {
                        let token = command[i].as_bytes();
                        let eq = token
                            .iter()
                            .position(|&b| b == b'=')
                            .expect("a joined site is a `key=value` token");
                        let mut new = token[..=eq].to_vec();
                        new.extend_from_slice(path.as_bytes());
                        Edit::Replace(i, OsStr::from_bytes(&new).to_owned())
                    }
                })
                .collect(),
            Place::Absent { name, at } if name.starts_with('-') => {
                vec![Edit::Insert(*at, vec![name.into(), path.to_owned()])]
            }
            Place::Absent { name, at } => {
                let mut token = OsString::from(format!("{name}="));
                token.push(path);
                vec![Edit::Insert(*at, vec![token])]
            }
            Place::Switch { .. } => {
                unreachable!("locate_flag gives a valued flag's place, never a switch")
            }
        }
    }

    /// The regular files matching the glob now, with their size and modification time; only
    /// those modified after `newer_than` where given. Unreadable entries are skipped: a
    /// checkpoint oomguard cannot see is one it cannot vouch for.
    ///
    /// As the job's user when a root oomguard acts for one ([`crate::guard::principal`]): a
    /// checkpoint the user could not read is not one to hand their job.
    pub fn scan(&self, newer_than: Option<SystemTime>) -> Vec<Candidate> {
        crate::guard::principal::as_user(|| Ok(self.scan_here(newer_than))).unwrap_or_default()
    }

    fn scan_here(&self, newer_than: Option<SystemTime>) -> Vec<Candidate> {
        let Ok(paths) = glob::glob(&self.pattern) else {
            return Vec::new();
        };
        paths
            .filter_map(Result::ok)
            .filter_map(|path| {
                let meta = std::fs::metadata(&path).ok()?;
                let modified = meta.modified().ok()?;
                (meta.is_file() && newer_than.is_none_or(|start| modified > start)).then_some(
                    Candidate {
                        path,
                        modified,
                        size_bytes: meta.len(),
                        file_id: (meta.dev(), meta.ino()),
                    },
                )
            })
            .collect()
    }
}

/// What oomguard's own stop of the job's processes may have cut short: the facts of an
/// attempt's end that [`judge`] weighs. Between attempts every process of the job is gone, so
/// a file that stopped changing proves nothing by itself when oomguard stopped its writers.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    /// The files (device, inode) a process of the job had open for writing when oomguard
    /// stopped it ([`crate::supervise::AttemptEnd::writing_at_stop`]).
    pub open: HashSet<(u64, u64)>,
    /// When oomguard first asked living processes of the job to stop (its leftovers once the
    /// main process ended, or the job on a soft bound or going quiet); `None` when it never
    /// had to ([`crate::supervise::AttemptEnd::stop_began`]).
    pub began: Option<SystemTime>,
    /// How long a file must have held still before [`Stop::began`] to count as complete: the
    /// run's `--interval`, the same span [`Watch`] asks of a file while its writers live.
    pub window: Duration,
}

/// File times come from the kernel's coarse clock, which runs up to a tick (1-10 ms) behind
/// the time oomguard reads: a file written just before the stop began may carry an earlier
/// time. This much more is counted as near the stop.
const COARSE_CLOCK_SLACK: Duration = Duration::from_millis(50);

/// Why a settled candidate is not handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// A process of the job had it open for writing when oomguard stopped the job.
    OpenAtStop,
    /// Modified within [`Stop::window`] of oomguard stopping the job's processes (or after),
    /// and in no format that shows whether it is whole: a writer that opens the file for each
    /// piece holds it open at no instant oomguard can catch.
    NearStop { window: Duration },
    /// Its format says it is cut short (see [`Shape::Short`]).
    Short(String),
}

impl Unfit {
    /// The relaunch line's words on `path`.
    fn note(&self, path: &Path) -> String {
        let path = path.display();
        match self {
            Unfit::OpenAtStop => {
                format!("{path} was being written when oomguard stopped the job: not used")
            }
            Unfit::NearStop { window } => format!(
                "{path} was written within {} of oomguard stopping the job's processes and its format cannot show it complete: not used",
                crate::output::console::short_duration(*window)
            ),
            Unfit::Short(why) => format!("{path} is cut short ({why}): not used"),
        }
    }
}

/// Whether `candidate`, settled, may be handed over: `None` when it may, else why not.
/// `shape` reads its format (only when the stop leaves a doubt, or to find it cut short): a
/// torch.save zip or a safetensors file that is whole is used even when written during the
/// stop (a job's own SIGTERM handler saving one), one that is cut short never.
pub fn judge(candidate: &Candidate, stop: &Stop, shape: impl FnOnce() -> Shape) -> Option<Unfit> {
    if stop.open.contains(&candidate.file_id) {
        return Some(Unfit::OpenAtStop);
    }
    match shape() {
        Shape::Whole => None,
        Shape::Short(why) => Some(Unfit::Short(why)),
        Shape::Unknown => {
            let began = stop.began?;
            let near = began
                .checked_sub(stop.window + COARSE_CLOCK_SLACK)
                .unwrap_or(SystemTime::UNIX_EPOCH);
            (candidate.modified >= near).then_some(Unfit::NearStop {
                window: stop.window,
            })
        }
    }
}

/// What a checkpoint's own bytes say of its completeness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A format that tells, and the file is whole by it.
    Whole,
    /// A format that tells, and the file ends before it should (why, in a few words).
    Short(String),
    /// No format oomguard can check (a pickle, a format of the job's own).
    Unknown,
}

/// The longest safetensors header read to check a file (the format's own reader refuses
/// headers over 100 MB; a model's real header is a few hundred KiB): past it, the file is not
/// checked, so a crafted header costs no more memory than this.
const SAFETENSORS_HEADER_MAX_BYTES: u64 = 16 << 20;

/// A zip's end-of-central-directory record: its signature, and its fixed length (the comment,
/// up to 64 KiB - 1, follows it, and the record ends the file).
const ZIP_EOCD_SIGNATURE: &[u8; 4] = b"PK\x05\x06";
const ZIP_EOCD_BYTES: u64 = 22;
const ZIP_COMMENT_MAX_BYTES: u64 = 0xFFFF;

/// Reads the format of a file `len_bytes` long from `file`: torch.save's zip (PyTorch 1.6+,
/// also `.ckpt`, `.bin`) must end with its end-of-central-directory record, which the writer
/// puts last; a safetensors file (an 8-byte little-endian header length, a JSON header, the
/// data) must reach the largest `data_offsets` end its header names. Reads at most the first
/// 9 bytes, the safetensors header (bounded) and the zip's last 64 KiB + 22 bytes.
pub fn shape<R: std::io::Read + std::io::Seek>(
    file: &mut R,
    len_bytes: u64,
) -> std::io::Result<Shape> {
    use std::io::SeekFrom;
    let mut head = [0u8; 9];
    let head_len = read_up_to(file, &mut head)?;
    let head = &head[..head_len];
    if head.starts_with(b"PK\x03\x04") || head.starts_with(ZIP_EOCD_SIGNATURE) {
        // The record is in the last 22 + 64 KiB - 1 bytes; search it backwards.
        let window = len_bytes.min(ZIP_EOCD_BYTES + ZIP_COMMENT_MAX_BYTES);
        let start = len_bytes - window;
        file.seek(SeekFrom::Start(start))?;
        let mut tail = vec![0u8; window as usize];
        let got = read_up_to(file, &mut tail)?;
        tail.truncate(got);
        return Ok(zip_shape(&tail, start, len_bytes));
    }
    if head.len() == 9 && head[8] == b'{' {
        let header_bytes = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let Some(header_end) = header_bytes.checked_add(8) else {
            return Ok(Shape::Unknown);
        };
        if header_end > len_bytes {
            return Ok(Shape::Short(format!(
                "its safetensors header is {header_bytes} bytes, the file {len_bytes}"
            )));
        }
        if header_bytes > SAFETENSORS_HEADER_MAX_BYTES {
            return Ok(Shape::Unknown);
        }
        file.seek(SeekFrom::Start(8))?;
        let mut header = vec![0u8; header_bytes as usize];
        file.read_exact(&mut header)?;
        return Ok(safetensors_shape(&header, header_end, len_bytes));
    }
    Ok(Shape::Unknown)
}

/// Reads until `buf` is full or the file ends; returns how much was read.
fn read_up_to<R: std::io::Read>(file: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A zip's shape from its last bytes (`tail`, starting at offset `start` of a file
/// `len_bytes` long): whole when an end record sits where its comment ends the file and its
/// central directory lies before it.
fn zip_shape(tail: &[u8], start: u64, len_bytes: u64) -> Shape {
    let records = (0..tail.len().saturating_sub(ZIP_EOCD_BYTES as usize - 1))
        .rev()
        .filter(|&i| tail[i..].starts_with(ZIP_EOCD_SIGNATURE));
    for i in records {
        let field = |at: usize, n: usize| -> u64 {
            tail[i + at..i + at + n]
                .iter()
                .rev()
                .fold(0, |v, &b| (v << 8) | u64::from(b))
        };
        let at = start + i as u64;
        if at + ZIP_EOCD_BYTES + field(20, 2) != len_bytes {
            continue; // the signature's bytes inside the data or the comment
        }
        let (cd_bytes, cd_offset) = (field(12, 4), field(16, 4));
        // 0xFFFFFFFF: the real values are in the zip64 record (torch.save's large files).
        let zip64 = cd_offset == 0xFFFF_FFFF || cd_bytes == 0xFFFF_FFFF;
        if zip64 || cd_offset + cd_bytes <= at {
            return Shape::Whole;
        }
    }
    Shape::Short("its zip end record is missing".to_string())
}

/// A safetensors file's shape from its `header` (JSON) and where the data starts.
fn safetensors_shape(header: &[u8], data_start: u64, len_bytes: u64) -> Shape {
    let Ok(serde_json::Value::Object(tensors)) = serde_json::from_slice(header) else {
        return Shape::Short("its safetensors header is not whole JSON".to_string());
    };
    let data_end = tensors
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .filter_map(|(_, t)| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let need = data_start.saturating_add(data_end);
    if len_bytes < need {
        Shape::Short(format!(
            "its safetensors data ends at {need} bytes, the file at {len_bytes}"
        ))
    } else {
        Shape::Whole
    }
}

/// [`shape`] of the file `candidate` saw, opened as the job's user (a file they could not
/// read is not theirs to be handed): `Short` when it is no longer the file seen (replaced or
/// grown since), `Unknown` when it cannot be read.
pub fn read_shape(candidate: &Candidate) -> Shape {
    use std::os::unix::fs::OpenOptionsExt;
    let read = || -> std::io::Result<Shape> {
        // O_NONBLOCK: a FIFO put in the file's place does not hang the open.
        let mut file = std::fs::File::options()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
            .open(&candidate.path)?;
        let meta = file.metadata()?;
        if !meta.is_file()
            || (meta.dev(), meta.ino()) != candidate.file_id
            || meta.len() != candidate.size_bytes
        {
            return Ok(Shape::Short("it changed as oomguard read it".to_string()));
        }
        shape(&mut file, meta.len())
    };
    crate::guard::principal::as_user(read).unwrap_or(Shape::Unknown)
}

/// The end of the part holding the batch knob, where it is a flag of the command.
fn batch_part_end(command: &[OsString], knobs: &KnobSet) -> Option<usize> {
    let batch = &knobs.knobs[knobs.batch()?];
    let index = match &batch.place {
        knobs::Place::Argv(Place::Flag { sites, .. }) => match sites.first()? {
            Site::Separate(i) | Site::Joined(i) => *i,
        },
        knobs::Place::Argv(Place::Absent { at, .. } | Place::Switch { at, .. }) => *at,
        knobs::Place::Env(_) | knobs::Place::File { .. } | knobs::Place::Inside { .. } => {
            return None
        }
    };
    Some(argv::part_end(command, index))
}

/// A file matching the glob, as one look saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    pub modified: SystemTime,
    pub size_bytes: u64,
    /// Device and inode, as the look saw them.
    pub file_id: (u64, u64),
}

/// Newest first: by modification time, then (written within one timestamp tick) by name with
/// numbers compared as numbers, so `epoch_10.pt` is newer than `epoch_9.pt`.
fn newer(a: &Candidate, b: &Candidate) -> Ordering {
    a.modified
        .cmp(&b.modified)
        .then_with(|| natural(&a.path, &b.path))
}

/// Compares two paths with their runs of digits as numbers.
fn natural(a: &Path, b: &Path) -> Ordering {
    let (a, b) = (a.as_os_str().as_bytes(), b.as_os_str().as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let run = |s: &[u8], k: usize| {
                let end = s[k..]
                    .iter()
                    .position(|c| !c.is_ascii_digit())
                    .map_or(s.len(), |n| k + n);
                let digits = &s[k..end];
                let first = digits
                    .iter()
                    .position(|&c| c != b'0')
                    .unwrap_or(digits.len());
                (digits[first..].to_vec(), end)
            };
            let ((x, ei), (y, ej)) = (run(a, i), run(b, j));
            let order = x.len().cmp(&y.len()).then_with(|| x.cmp(&y));
            if order != Ordering::Equal {
                return order;
            }
            (i, j) = (ei, ej);
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            (i, j) = (i + 1, j + 1);
        }
    }
    (a.len() - i).cmp(&(b.len() - j)).then_with(|| a.cmp(b))
}

/// The looks at the candidates between an attempt's end and its relaunch. The newest one is
/// taken once its size and modification time have held for one interval; while it is still
/// changing, oomguard looks again each time it could have settled, until the backoff is over
/// (and at least one interval after the first look, so every file can be judged); then the
/// newest file that did settle is taken.
#[derive(Debug, Clone)]
pub struct Watch {
    interval: Duration,
    first_at: Instant,
    last_at: Instant,
    /// The last look: each file, and since when it has been seen exactly so.
    files: Vec<(Candidate, Instant)>,
}

/// What the looks found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    /// The newest complete file.
    pub chosen: Option<PathBuf>,
    /// Newer files still being written when oomguard stopped looking, newest first.
    pub unsettled: Vec<PathBuf>,
    /// Newer files that settled but were judged not complete ([`judge`]), newest first.
    pub unfit: Vec<(PathBuf, Unfit)>,
}

impl Watch {
    /// The first look, taken at `now`.
    pub fn start(files: Vec<Candidate>, now: Instant, interval: Duration) -> Watch {
        Watch {
            interval,
            first_at: now,
            last_at: now,
            files: files.into_iter().map(|c| (c, now)).collect(),
        }
    }

    /// Another look, taken at `now`: a file seen the same as before keeps its "since".
    pub fn look(&mut self, files: Vec<Candidate>, now: Instant) {
        let before = std::mem::take(&mut self.files);
        self.files = files
            .into_iter()
            .map(|c| {
                let since = before
                    .iter()
                    .find(|(old, _)| *old == c)
                    .map_or(now, |(_, since)| *since);
                (c, since)
            })
            .collect();
        self.last_at = now;
    }

    fn settled(&self, since: Instant) -> bool {
        self.last_at.saturating_duration_since(since) >= self.interval
    }

    fn newest(&self) -> Option<&(Candidate, Instant)> {
        self.files.iter().max_by(|a, b| newer(&a.0, &b.0))
    }

    /// How long to wait before the next look, or `None` when the pick is decided: nothing
    /// matches, the newest file has settled, or the looks went on until `backoff_end` (and
    /// one interval past the first look) already.
    pub fn wait(&self, now: Instant, backoff_end: Instant) -> Option<Duration> {
        let (_, since) = self.newest()?;
        if self.settled(*since) {
            return None;
        }
        let horizon = backoff_end.max(self.first_at + self.interval);
        let next = (*since + self.interval).min(horizon);
        if next <= self.last_at {
            return None;
        }
        Some(next.saturating_duration_since(now))
    }

    /// The newest file, where it has changed since the first look and has not settled yet:
    /// worth telling the user why the relaunch waits.
    pub fn changing(&self) -> Option<&Path> {
        let (candidate, since) = self.newest()?;
        (*since > self.first_at && !self.settled(*since)).then_some(candidate.path.as_path())
    }

    /// The newest settled file that `judge` finds complete ([`judge`], given the stop), and
    /// the newer ones passed over. `judge` is asked about settled files only, newest first,
    /// until one passes.
    pub fn pick(&self, mut judge: impl FnMut(&Candidate) -> Option<Unfit>) -> Pick {
        let mut files: Vec<&(Candidate, Instant)> = self.files.iter().collect();
        files.sort_by(|a, b| newer(&b.0, &a.0));
        let mut unsettled = Vec::new();
        let mut unfit = Vec::new();
        for (candidate, since) in files {
            if !self.settled(*since) {
                unsettled.push(candidate.path.clone());
                continue;
            }
            match judge(candidate) {
                None => {
                    return Pick {
                        chosen: Some(candidate.path.clone()),
                        unsettled,
                        unfit,
                    }
                }
                Some(why) => unfit.push((candidate.path.clone(), why)),
            }
        }
        Pick {
            chosen: None,
            unsettled,
            unfit,
        }
    }
}

impl Pick {
    /// The relaunch line's clause: `resuming from ckpt/epoch_4.pt`, with the files passed
    /// over, or why there is no checkpoint. `since_start`: only files newer than the run's
    /// start were candidates.
    pub fn clause(&self, pattern: &str, since_start: bool) -> String {
        let shown = |p: &PathBuf| p.display().to_string();
        let passed = match self.unsettled.as_slice() {
            [] => String::new(),
            [one] => format!(" ({} is still being written)", shown(one)),
            more => format!(
                " ({} are still being written)",
                more.iter().map(shown).collect::<Vec<_>>().join(", ")
            ),
        };
        let unfit: String = self
            .unfit
            .iter()
            .map(|(path, why)| format!(" ({})", why.note(path)))
            .collect();
        match &self.chosen {
            Some(path) => format!("resuming from {}{passed}{unfit}", shown(path)),
            None if !self.unsettled.is_empty() || !self.unfit.is_empty() => {
                format!("no complete checkpoint to resume from{passed}{unfit}")
            }
            None if since_start => format!(
                "no checkpoint to resume from (nothing matching {pattern} written since the run started)"
            ),
            None => format!("no checkpoint to resume from (nothing matches {pattern})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{argv, words};

    fn knobs_of(command: &[OsString]) -> KnobSet {
        let cwd = std::env::current_dir().unwrap();
        knobs::resolve::resolve(&knobs::resolve::Request::plain(command, &cwd)).unwrap()
    }

    #[test]
    fn the_flag_is_replaced_where_present_and_added_with_the_batch_flag_otherwise() {
        // (command, --resume-arg, the command given ckpt/e4.pt)
        let table = [
            (
                "python t.py --resume none --batch_size 8",
                "--resume",
                "python t.py --resume ckpt/e4.pt --batch_size 8",
            ),
            (
                "python t.py --resume=old.pt --batch_size 8 --resume=older.pt",
                "--resume",
                "python t.py --resume=ckpt/e4.pt --batch_size 8 --resume=ckpt/e4.pt",
            ),
            (
                "python t.py --batch_size 8",
                "--resume",
                "python t.py --batch_size 8 --resume ckpt/e4.pt",
            ),
            (
                "python train.py trainer.max_epochs=3 data.batch_size=8",
                "ckpt_path",
                "python train.py trainer.max_epochs=3 data.batch_size=8 ckpt_path=ckpt/e4.pt",
            ),
            // With the batch flag in part 1, not after the launcher's `--`.
            (
                "python launch.py --batch_size 8 -- worker.py --rank 0",
                "--resume",
                "python launch.py --batch_size 8 --resume ckpt/e4.pt -- worker.py --rank 0",
            ),
            // No batch flag: the end of the last part.
            (
                "uv run -- python t.py --lr 1",
                "--resume",
                "uv run -- python t.py --lr 1 --resume ckpt/e4.pt",
            ),
            // `@N` picks the part.
            (
                "python launch.py --batch_size 8 -- worker.py --rank 0",
                "--resume@2",
                "python launch.py --batch_size 8 -- worker.py --rank 0 --resume ckpt/e4.pt",
            ),
        ];
        for (command, flag, want) in table {
            let command = argv(command);
            let resume = Resume::new(&command, flag, "ckpt/*.pt", false, &knobs_of(&command))
                .unwrap_or_else(|e| panic!("{flag}: {e}"));
            let edits = resume.edits(&command, Path::new("ckpt/e4.pt"));
            assert_eq!(words(&argv::apply_edits(&command, &edits)), want);
        }
    }

    #[test]
    fn bad_settings_are_refused_with_the_fix() {
        // (command, --resume-arg, --checkpoint, words of the refusal)
        let table = [
            (
                "python t.py --batch_size 8 --resume",
                "--resume",
                "ckpt/*.pt",
                "--resume has no value",
            ),
            (
                "python a.py --resume x -- b.py --resume y",
                "--resume",
                "ckpt/*.pt",
                "--resume-arg --resume@1 or --resume-arg --resume@2",
            ),
            (
                "python t.py --batch_size 8",
                "--resume",
                "ckpt/[.pt",
                "not a valid glob",
            ),
            (
                "python t.py --batch_size 8",
                "--batch_size",
                "ckpt/*.pt",
                "--resume-arg --batch_size is also the knob batch",
            ),
        ];
        for (command, flag, pattern, want) in table {
            let command = argv(command);
            let err = Resume::new(&command, flag, pattern, false, &knobs_of(&command))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{flag} {pattern}: {err}");
        }
    }

    #[test]
    fn paths_order_with_numbers_as_numbers() {
        let table = [
            ("ckpt/epoch_10.pt", "ckpt/epoch_9.pt", Ordering::Greater),
            ("ckpt/epoch_09.pt", "ckpt/epoch_9.pt", Ordering::Less),
            (
                "ckpt/step_100/model.pt",
                "ckpt/step_20/model.pt",
                Ordering::Greater,
            ),
            ("a.pt", "b.pt", Ordering::Less),
            ("epoch_2.pt", "epoch_2.pt.tmp", Ordering::Less),
            ("same.pt", "same.pt", Ordering::Equal),
        ];
        for (a, b, want) in table {
            assert_eq!(natural(Path::new(a), Path::new(b)), want, "{a} vs {b}");
        }
    }

    /// A file `name` modified `modified_s` seconds after an epoch, `size_bytes` long.
    fn file(name: &str, modified_s: u64, size_bytes: u64) -> Candidate {
        Candidate {
            path: name.into(),
            modified: SystemTime::UNIX_EPOCH + Duration::from_secs(modified_s),
            size_bytes,
            file_id: (0, 0),
        }
    }

    /// One scenario: the looks (milliseconds after the first, the files then), the backoff
    /// (ms), and what must come of it: the waits asked for after each look (`None`: decided),
    /// then the pick.
    struct Case {
        name: &'static str,
        looks: Vec<(u64, Vec<Candidate>)>,
        backoff_ms: u64,
        waits_ms: Vec<Option<u64>>,
        chosen: Option<&'static str>,
        unsettled: Vec<&'static str>,
    }

    #[test]
    fn the_newest_complete_checkpoint_is_chosen() {
        let interval = Duration::from_millis(1000);
        let cases = vec![
            Case {
                name: "nothing matches: decided at once, no wait",
                looks: vec![(0, vec![])],
                backoff_ms: 10_000,
                waits_ms: vec![None],
                chosen: None,
                unsettled: vec![],
            },
            Case {
                name: "all stable over one interval: the newest by time",
                looks: vec![
                    (
                        0,
                        vec![file("e1", 1, 10), file("e3", 3, 10), file("e2", 2, 10)],
                    ),
                    (
                        1000,
                        vec![file("e1", 1, 10), file("e3", 3, 10), file("e2", 2, 10)],
                    ),
                ],
                backoff_ms: 10_000,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e3"),
                unsettled: vec![],
            },
            Case {
                name: "seen stable already (the GPU wait took an interval): no extra wait",
                looks: vec![
                    (0, vec![file("e1", 1, 10)]),
                    (1500, vec![file("e1", 1, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec![],
            },
            Case {
                name: "same timestamp: the higher epoch number",
                looks: vec![
                    (0, vec![file("epoch_10", 5, 10), file("epoch_9", 5, 10)]),
                    (1000, vec![file("epoch_10", 5, 10), file("epoch_9", 5, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("epoch_10"),
                unsettled: vec![],
            },
            Case {
                name: "the newest grows, then settles within the backoff: it is taken",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 4)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                    (2000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                ],
                backoff_ms: 10_000,
                waits_ms: vec![Some(1000), Some(1000), None],
                chosen: Some("e2"),
                unsettled: vec![],
            },
            Case {
                name: "the newest still grows when the backoff ends: the older one",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 4)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                    (2000, vec![file("e1", 1, 10), file("e2", 4, 12)]),
                    (2500, vec![file("e1", 1, 10), file("e2", 4, 16)]),
                ],
                backoff_ms: 2500,
                waits_ms: vec![Some(1000), Some(1000), Some(500), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "a backoff shorter than the interval: one interval all the same",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 4)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "same size, rewritten (new mtime): still being written",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 10)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "a file that appears at the last look cannot be vouched for",
                looks: vec![
                    (0, vec![file("e1", 1, 10)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 2, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "only one file, never settling: nothing complete",
                looks: vec![(0, vec![file("e1", 1, 4)]), (1000, vec![file("e1", 2, 8)])],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: None,
                unsettled: vec!["e1"],
            },
        ];
        for case in cases {
            let t0 = Instant::now();
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let backoff_end = at(case.backoff_ms);
            let mut looks = case.looks.into_iter();
            let (first_ms, first) = looks.next().expect("a first look");
            let mut watch = Watch::start(first, at(first_ms), interval);
            let mut waits = vec![watch.wait(at(first_ms), backoff_end)];
            assert_eq!(
                watch.changing(),
                None,
                "{}: nothing seen to change",
                case.name
            );
            for (ms, files) in looks {
                watch.look(files, at(ms));
                waits.push(watch.wait(at(ms), backoff_end));
            }
            let want: Vec<Option<Duration>> = case
                .waits_ms
                .iter()
                .map(|w| w.map(Duration::from_millis))
                .collect();
            assert_eq!(waits, want, "{}", case.name);
            let pick = watch.pick(|_| None);
            assert_eq!(
                pick.chosen.as_deref(),
                case.chosen.map(Path::new),
                "{}",
                case.name
            );
            let unsettled: Vec<PathBuf> = case.unsettled.iter().map(PathBuf::from).collect();
            assert_eq!(pick.unsettled, unsettled, "{}", case.name);
        }
    }

    #[test]
    fn a_newest_file_seen_changing_is_told() {
        let interval = Duration::from_millis(1000);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut watch = Watch::start(vec![file("e1", 1, 10), file("e2", 2, 4)], t0, interval);
        watch.look(vec![file("e1", 1, 10), file("e2", 3, 8)], at(1000));
        assert_eq!(watch.changing(), Some(Path::new("e2")));
        watch.look(vec![file("e1", 1, 10), file("e2", 3, 8)], at(2000));
        assert_eq!(watch.changing(), None, "settled");
        // An older file that changed is not the one the relaunch waits for.
        let mut watch = Watch::start(vec![file("e1", 1, 4), file("e2", 9, 4)], t0, interval);
        watch.look(vec![file("e1", 2, 8), file("e2", 9, 4)], at(1000));
        assert_eq!(watch.changing(), None);
    }

    #[test]
    fn the_clause_names_the_checkpoint_or_why_none() {
        let pick = |chosen: Option<&str>, unsettled: &[&str]| Pick {
            chosen: chosen.map(PathBuf::from),
            unsettled: unsettled.iter().map(PathBuf::from).collect(),
            unfit: Vec::new(),
        };
        let table = [
            (pick(Some("ckpt/epoch_4.pt"), &[]), true, "resuming from ckpt/epoch_4.pt"),
            (
                pick(Some("ckpt/epoch_3.pt"), &["ckpt/epoch_4.pt"]),
                true,
                "resuming from ckpt/epoch_3.pt (ckpt/epoch_4.pt is still being written)",
            ),
            (
                pick(None, &["b", "a"]),
                true,
                "no complete checkpoint to resume from (b, a are still being written)",
            ),
            (
                pick(None, &[]),
                true,
                "no checkpoint to resume from (nothing matching ckpt/*.pt written since the run started)",
            ),
            (
                pick(None, &[]),
                false,
                "no checkpoint to resume from (nothing matches ckpt/*.pt)",
            ),
        ];
        for (pick, since_start, want) in table {
            assert_eq!(pick.clause("ckpt/*.pt", since_start), want);
        }
    }

    #[test]
    fn scan_lists_matching_files_newer_than_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("ckpt");
        std::fs::create_dir_all(ckpt.join("sub")).unwrap();
        std::fs::write(ckpt.join("old.pt"), b"old").unwrap();
        let old = std::fs::metadata(ckpt.join("old.pt"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(ckpt.join("sub/new.pt"), b"newer").unwrap();
        let new_mtime = old + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(ckpt.join("sub/new.pt"))
            .unwrap()
            .set_modified(new_mtime)
            .unwrap();
        std::fs::create_dir(ckpt.join("dir.pt")).unwrap();
        let resume = Resume {
            place: Place::Absent {
                name: "--resume".into(),
                at: 1,
            },
            pattern: format!("{}/**/*.pt", ckpt.display()),
            first: false,
        };
        let mut all: Vec<(PathBuf, u64)> = resume
            .scan(None)
            .into_iter()
            .map(|c| (c.path, c.size_bytes))
            .collect();
        all.sort();
        assert_eq!(
            all,
            [(ckpt.join("old.pt"), 3), (ckpt.join("sub/new.pt"), 5)],
            "regular files only, `**` reaching down"
        );
        let newer = resume.scan(Some(old));
        assert_eq!(newer.len(), 1);
        assert_eq!(newer[0].path, ckpt.join("sub/new.pt"));
        assert_eq!(newer[0].modified, new_mtime);
    }

    /// A torch.save-like archive written by Python's `zipfile` (ZIP_STORED, members
    /// `archive/data.pkl`, whose bytes hold a stray end-record signature, and `archive/version`):
    /// `zipfile.ZipFile(b, "w").writestr(...)` twice.
    fn python_zip() -> Vec<u8> {
        let pieces: [&[u8]; 11] = [
        b"\x50\x4b\x03\x04\x14\x00\x00\x00\x00\x00\x58\x4b\x7c\x5d\x8f\x30\x64\x2d\x16\x00\x00\x00\x16\x00",
        b"\x00\x00\x10\x00\x00\x00\x61\x72\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x80\x02",
        b"\x77\x65\x69\x67\x68\x74\x73\x20\x50\x4b\x05\x06\x20\x69\x6e\x73\x69\x64\x65\x2e\x50\x4b\x03\x04",
        b"\x14\x00\x00\x00\x00\x00\x58\x4b\x7c\x5d\xd1\x9e\x67\x55\x02\x00\x00\x00\x02\x00\x00\x00\x0f\x00",
        b"\x00\x00\x61\x72\x63\x68\x69\x76\x65\x2f\x76\x65\x72\x73\x69\x6f\x6e\x33\x0a\x50\x4b\x01\x02\x14",
        b"\x03\x14\x00\x00\x00\x00\x00\x58\x4b\x7c\x5d\x8f\x30\x64\x2d\x16\x00\x00\x00\x16\x00\x00\x00\x10",
        b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00\x61\x72\x63\x68\x69\x76\x65",
        b"\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x58\x4b\x7c",
        b"\x5d\xd1\x9e\x67\x55\x02\x00\x00\x00\x02\x00\x00\x00\x0f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\x00\x80\x01\x44\x00\x00\x00\x61\x72\x63\x68\x69\x76\x65\x2f\x76\x65\x72\x73\x69\x6f\x6e\x50\x4b",
        b"\x05\x06\x00\x00\x00\x00\x02\x00\x02\x00\x7b\x00\x00\x00\x73\x00\x00\x00\x00\x00",
        ];
        pieces.concat()
    }

    /// A safetensors file: the 8-byte header length, the JSON header, then `data_bytes` bytes.
    fn safetensors(data_bytes: usize) -> Vec<u8> {
        let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"__metadata__":{"format":"pt"}}"#;
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header);
        file.extend(std::iter::repeat_n(7u8, data_bytes));
        file
    }

    fn shape_of(bytes: &[u8]) -> Shape {
        shape(&mut std::io::Cursor::new(bytes), bytes.len() as u64).unwrap()
    }

    #[test]
    fn a_checkpoints_format_says_whether_it_is_whole() {
        let zip = python_zip();
        let with_comment = {
            let mut z = zip.clone();
            let n = z.len();
            z[n - 2..].copy_from_slice(&5u16.to_le_bytes());
            z.extend_from_slice(b"hello");
            z
        };
        let whole = || Shape::Whole;
        let short = |why: &str| Shape::Short(why.to_string());
        let no_end = short("its zip end record is missing");
        // (case, file, what its format says)
        let table: Vec<(&str, Vec<u8>, Shape)> = vec![
            ("a whole zip from Python's zipfile", zip.clone(), whole()),
            ("a whole zip with a comment", with_comment.clone(), whole()),
            (
                "a zip cut in its end record",
                zip[..zip.len() - 5].to_vec(),
                no_end.clone(),
            ),
            (
                "a zip cut in its central directory",
                zip[..200].to_vec(),
                no_end.clone(),
            ),
            (
                "a zip cut past the stray signature in its data",
                zip[..80].to_vec(),
                no_end.clone(),
            ),
            (
                "a zip cut after its first bytes",
                zip[..9].to_vec(),
                no_end.clone(),
            ),
            (
                "a zip cut in its comment",
                with_comment[..with_comment.len() - 2].to_vec(),
                no_end.clone(),
            ),
            (
                "a zip with bytes after its end",
                [zip.clone(), b"tail".to_vec()].concat(),
                no_end.clone(),
            ),
            ("a whole safetensors file", safetensors(12), whole()),
            (
                "safetensors cut in its data",
                safetensors(11),
                short("its safetensors data ends at 159 bytes, the file at 158"),
            ),
            (
                "safetensors cut in its header",
                safetensors(0)[..40].to_vec(),
                short("its safetensors header is 139 bytes, the file 40"),
            ),
            (
                "safetensors with a header that is not JSON",
                [&135u64.to_le_bytes()[..], &[b'{'; 135]].concat(),
                short("its safetensors header is not whole JSON"),
            ),
            (
                "a pickle (torch.save's legacy format)",
                b"\x80\x02\x8a\x0alw\x9cF\xf9 j\xa8P\x19.".to_vec(),
                Shape::Unknown,
            ),
            (
                "a format of the job's own",
                b"epoch 1\n".repeat(64),
                Shape::Unknown,
            ),
            ("an empty file", Vec::new(), Shape::Unknown),
        ];
        for (case, bytes, want) in table {
            assert_eq!(shape_of(&bytes), want, "{case}");
        }
    }

    #[test]
    fn a_file_the_stop_may_have_cut_is_not_used_unless_its_format_shows_it_whole() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let window = Duration::from_millis(500);
        let at = |ms: i64| {
            if ms >= 0 {
                t0 + Duration::from_millis(ms as u64)
            } else {
                t0 - Duration::from_millis((-ms) as u64)
            }
        };
        let candidate = |modified_ms: i64, inode: u64| Candidate {
            path: "ckpt/e.pt".into(),
            modified: at(modified_ms),
            size_bytes: 10,
            file_id: (1, inode),
        };
        let stopped = |open: &[u64]| Stop {
            open: open.iter().map(|&i| (1, i)).collect(),
            began: Some(t0),
            window,
        };
        let near = Some(Unfit::NearStop { window });
        let cut = || Some(Unfit::Short("its zip end record is missing".into()));
        // (case, the file, the stop, its format (`None`: must not be read), the verdict)
        type Row = (&'static str, Candidate, Stop, Option<Shape>, Option<Unfit>);
        let table: Vec<Row> = vec![
            (
                "no stop, a format that cannot tell",
                candidate(-10, 1),
                Stop::default(),
                Some(Shape::Unknown),
                None,
            ),
            (
                "no stop, a zip cut short",
                candidate(-5000, 1),
                Stop::default(),
                Some(Shape::Short("its zip end record is missing".into())),
                cut(),
            ),
            (
                "open for writing at the stop",
                candidate(-5000, 7),
                stopped(&[7]),
                None,
                Some(Unfit::OpenAtStop),
            ),
            (
                "written within the window before the stop",
                candidate(-100, 1),
                stopped(&[]),
                Some(Shape::Unknown),
                near.clone(),
            ),
            (
                "written just past the window (coarse clock)",
                candidate(-520, 1),
                stopped(&[]),
                Some(Shape::Unknown),
                near.clone(),
            ),
            (
                "written after the stop began",
                candidate(300, 1),
                stopped(&[]),
                Some(Shape::Unknown),
                near.clone(),
            ),
            (
                "held still for well over the window before the stop",
                candidate(-2000, 1),
                stopped(&[]),
                Some(Shape::Unknown),
                None,
            ),
            (
                "written during the stop, whole by its format",
                candidate(300, 1),
                stopped(&[]),
                Some(Shape::Whole),
                None,
            ),
            (
                "written long before, cut short by its format",
                candidate(-9000, 1),
                stopped(&[]),
                Some(Shape::Short("its zip end record is missing".into())),
                cut(),
            ),
        ];
        for (case, file, stop, shape, want) in table {
            let got = judge(&file, &stop, || {
                shape.clone().unwrap_or_else(|| panic!("{case}: read"))
            });
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn a_settled_file_judged_unfit_is_passed_over_and_named() {
        let interval = Duration::from_millis(1000);
        let t0 = Instant::now();
        let files = vec![file("e1", 1, 10), file("e2", 2, 10), file("e3", 3, 10)];
        let mut watch = Watch::start(files.clone(), t0, interval);
        watch.look(files, t0 + interval);
        let mut asked = Vec::new();
        let pick = watch.pick(|c| {
            asked.push(c.path.clone());
            (c.path == Path::new("e3")).then_some(Unfit::NearStop {
                window: Duration::from_millis(200),
            })
        });
        assert_eq!(
            asked,
            [PathBuf::from("e3"), PathBuf::from("e2")],
            "newest first, until one passes"
        );
        assert_eq!(pick.chosen.as_deref(), Some(Path::new("e2")));
        assert_eq!(
            pick.clause("ckpt/*.pt", true),
            "resuming from e2 (e3 was written within 0.2s of oomguard stopping the job's processes and its format cannot show it complete: not used)"
        );
        let none = watch.pick(|c| {
            Some(if c.path == Path::new("e1") {
                Unfit::OpenAtStop
            } else {
                Unfit::Short("its zip end record is missing".into())
            })
        });
        assert_eq!(
            none.clause("ckpt/*.pt", true),
            "no complete checkpoint to resume from (e3 is cut short (its zip end record is missing): not used) (e2 is cut short (its zip end record is missing): not used) (e1 was being written when oomguard stopped the job: not used)"
        );
    }

    #[test]
    fn the_format_is_read_from_the_file_the_look_saw() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.pt");
        std::fs::write(&path, python_zip()).unwrap();
        let resume = Resume {
            place: Place::Absent {
                name: "--resume".into(),
                at: 1,
            },
            pattern: format!("{}/*.pt", dir.path().display()),
            first: false,
        };
        let seen = resume.scan(None).remove(0);
        assert_eq!(read_shape(&seen), Shape::Whole);
        std::fs::write(&path, &python_zip()[..100]).unwrap();
        assert_eq!(
            read_shape(&seen),
            Shape::Short("it changed as oomguard read it".into()),
            "cut since the look"
        );
        let now = resume.scan(None).remove(0);
        assert_eq!(
            read_shape(&now),
            Shape::Short("its zip end record is missing".into())
        );
    }
}
