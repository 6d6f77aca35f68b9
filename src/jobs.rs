//! Job memory: what earlier runs of the same job learned. Every run belongs to a job, named by
//! `--name` or derived from the command with its knob values blanked out and the working
//! directory, so `train.py --batch_size 64` and `train.py --batch_size 32` in one project are
//! one job. Per job, one JSON file `<state dir>/jobs/NAME.json` keeps the knob values of the
//! last successful attempt and every attempt seen (knob values, cause, memory peaks), which the
//! next run starts from and the fit strategy reads as points.
//!
//! The file is versioned, written atomically (temporary file, fsync, rename in the same
//! directory), private (0600 in a 0700 directory), and every read-modify-write holds an
//! exclusive `flock` on `NAME.lock` beside it, so concurrent runs of one job each add their
//! attempts and never corrupt it. A file that does not parse, or comes from a newer format, is
//! moved aside (`NAME.json.corrupt-<time>`) and the run goes on as the job's first: job memory
//! never stops a run. Which values an attempt runs with is the attempt loop's business; this
//! module only proposes the first attempt's (see [`start_from`]) and says it through `report`.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::console::Reporter;
use crate::fsutil::{file_safe, write_then_rename, Fnv64};
use crate::knobs::{argv, KnobSet, Moves, Place, Value};
use crate::outcome::{Cause, Outcome};
use crate::policy;
use crate::record::summary::{AttemptRecord, KnobValues, PeakRecord};
use crate::status::{Liveness, ProcessId};

/// The format this build writes and reads. A file with a higher one is moved aside, never
/// overwritten by a format that would drop what it holds.
pub const FORMAT_VERSION: u64 = 1;

/// The most attempts one job's file keeps (the newest): enough points for any estimate, and a
/// file that stays small however often the job runs.
pub const ATTEMPTS_KEPT: usize = 256;

/// The longest `--name`.
pub const NAME_MAX_LEN: usize = 100;

/// What a run knows of its job before it starts: built from the command line by `cli`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// `--name`, or derived from the command and the working directory.
    pub name: String,
    /// The base of job memory (`--state-dir`, else `$XDG_STATE_HOME/oomguard`); files go in
    /// its `jobs/`. `None` without any (no HOME): the job is not remembered.
    pub state_dir: Option<PathBuf>,
    /// Whether `state_dir` was chosen by a job file its user could write: then a root
    /// oomguard acting for that user keeps the job memory as the user ([`crate::principal`]).
    /// Set by the caller; the default place, and one root chose, are oomguard's own.
    pub state_dir_is_users: bool,
    /// `--fresh`: the first attempt takes the command's values.
    pub fresh: bool,
    /// The command with the knob values blanked (as the name is derived from it), for people
    /// reading the file.
    pub command: Vec<String>,
    /// The canonical working directory.
    pub cwd: PathBuf,
}

impl JobSettings {
    /// Checks `--name` (a file name: see [`check_name`]) or derives one, and settles the state
    /// directory. `cwd` is canonicalized here, so a symlinked path to the project is one job.
    pub fn new(
        name: Option<String>,
        state_dir: Option<PathBuf>,
        fresh: bool,
        command: &[OsString],
        knobs: &KnobSet,
        cwd: &Path,
    ) -> Result<JobSettings, String> {
        let cwd = fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
        let shape = command_shape(command, knobs);
        let name = match name {
            Some(name) => {
                check_name(&name)?;
                name
            }
            None => derive_name(&shape, &cwd),
        };
        let state_dir = match state_dir {
            Some(dir) => Some(std::path::absolute(&dir).map_err(|e| {
                format!("--state-dir {}: {e}: give a directory path", dir.display())
            })?),
            None => crate::record::run_dir::state_dir(),
        };
        Ok(JobSettings {
            name,
            state_dir,
            state_dir_is_users: false,
            fresh,
            command: shape
                .iter()
                .map(|t| t.to_string_lossy().into_owned())
                .collect(),
            cwd,
        })
    }
}

/// A job name must be a plain file name: letters, digits, `.`, `_`, `-`, not starting with `.`
/// (no hidden files, no `..`), at most [`NAME_MAX_LEN`] bytes.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX_LEN
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--name {name:?} is not usable as a file name: use letters, digits, '.', '_' and '-' \
             (at most {NAME_MAX_LEN}, not starting with '.')"
        ))
    }
}

/// The command as a job is known by: every argv knob's value replaced by `<NAME>`, and switch
/// knobs removed (their presence is their value). Environment and file knobs are not in argv.
pub fn command_shape(command: &[OsString], knobs: &KnobSet) -> Vec<OsString> {
    let mut edits = Vec::new();
    for knob in &knobs.knobs {
        let Place::Argv(place) = &knob.place else {
            continue;
        };
        match place {
            argv::Place::Flag { .. } => {
                place.edits(command, &Value::Str(format!("<{}>", knob.name)), &mut edits)
            }
            argv::Place::Switch { .. } => place.edits(command, &Value::Bool(false), &mut edits),
            // Not in the command: nothing to blank.
            argv::Place::Absent { .. } => {}
        }
    }
    argv::apply_edits(command, &edits)
}

/// `situation_job-1f0c9a2b3d4e5f60`: a readable stem (the script, module or program) and a
/// hash of the command's shape and the working directory. The hash is FNV-1a, written out
/// here because it must not change between builds (std's hasher may).
pub fn derive_name(shape: &[OsString], cwd: &Path) -> String {
    let mut hash = Fnv64::new();
    hash.write(b"oomguard-job-1\0");
    hash.write_len_prefixed(cwd.as_os_str().as_bytes());
    for token in shape {
        hash.write_len_prefixed(token.as_bytes());
    }
    format!("{}-{:016x}", stem(shape), hash.0)
}

/// The part of a command a person recognises: the first `.py`/`.sh` script, the module after
/// `-m`, else the program's file name.
fn stem(shape: &[OsString]) -> String {
    let text: Vec<String> = shape
        .iter()
        .map(|t| t.to_string_lossy().into_owned())
        .collect();
    let script = text
        .iter()
        .skip(1)
        .find(|t| !t.starts_with('-') && (t.ends_with(".py") || t.ends_with(".sh")))
        .map(|t| {
            Path::new(t)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
    let module = text.windows(2).find(|w| w[0] == "-m").map(|w| w[1].clone());
    let program = text.first().map(|p| {
        Path::new(p)
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let raw = script.or(module).or(program).unwrap_or_default();
    let clean = file_safe(&raw, &['.', '_', '-']);
    let clean = clean.trim_start_matches('.');
    if clean.is_empty() {
        "job".to_string()
    } else {
        clean.to_string()
    }
}

/// One job's file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobMemory {
    pub version: u64,
    pub name: String,
    /// The command of the last run, knob values blanked.
    #[serde(default)]
    pub command: Vec<String>,
    /// The working directory of the last run.
    #[serde(default)]
    pub cwd: String,
    /// The knob values of the last attempt that succeeded.
    #[serde(default)]
    pub last_success: Option<LastSuccess>,
    /// Every attempt seen, oldest first (the newest [`ATTEMPTS_KEPT`]).
    #[serde(default)]
    attempts: Vec<PastAttempt>,
    /// The job's latest run: under way, or how it ended (`oomguard status` reads it). A record
    /// this build cannot read (from a newer one) is dropped, not the whole file.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_run"
    )]
    pub run: Option<CurrentRun>,
}

/// `run` as [`CurrentRun`] if it reads as one, else nothing: the rest of the file stays usable.
fn lenient_run<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<CurrentRun>, D::Error> {
    let raw = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(raw.and_then(|raw| serde_json::from_value(raw).ok()))
}

/// Where a job's latest run stands, as its oomguard last wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// An attempt is running.
    Running,
    /// Between attempts: the next one's values are decided, its backoff is being waited.
    Waiting,
    /// Ended, with this outcome.
    Succeeded,
    GaveUp,
    Failed,
    Interrupted,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Waiting => "waiting",
            RunState::Succeeded => Outcome::Succeeded.as_str(),
            RunState::GaveUp => Outcome::GaveUp.as_str(),
            RunState::Failed => Outcome::Failed.as_str(),
            RunState::Interrupted => Outcome::Interrupted.as_str(),
        }
    }

    /// Running or waiting: its oomguard has not written an end.
    pub fn under_way(self) -> bool {
        matches!(self, RunState::Running | RunState::Waiting)
    }
}

impl From<Outcome> for RunState {
    fn from(outcome: Outcome) -> RunState {
        match outcome {
            Outcome::Succeeded => RunState::Succeeded,
            Outcome::GaveUp => RunState::GaveUp,
            Outcome::Failed => RunState::Failed,
            Outcome::Interrupted => RunState::Interrupted,
        }
    }
}

/// A job's latest run: whose oomguard runs it, where it stands, and the attempt in progress
/// (while running: the attempt running; while waiting: the one about to start; once ended:
/// the last one). Rewritten on every change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurrentRun {
    /// The oomguard running it, named so that a reused PID is not taken for it.
    #[serde(flatten)]
    pub process: ProcessId,
    pub run_dir: String,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub state: RunState,
    pub attempt: u32,
    pub knobs: KnobValues,
    /// The run's command, knob values blanked ([`command_shape`]): a run continues this one
    /// only with the same command (none: written by an older build, taken as the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The cause of the last attempt that ended in this run, as [`Cause::as_str`] spells it.
    #[serde(default)]
    pub last_cause: Option<String>,
    /// That attempt's memory peaks.
    #[serde(default)]
    pub peaks: Option<PeakRecord>,
    /// RFC 3339 UTC, once ended.
    #[serde(default)]
    pub ended_at: Option<String>,
}

impl JobMemory {
    /// Every attempt of earlier runs (and of this one, once recorded), oldest first: points
    /// for an estimate of the job's memory at each size.
    pub fn attempts(&self) -> &[PastAttempt] {
        &self.attempts
    }

    pub fn last_success(&self) -> Option<&LastSuccess> {
        self.last_success.as_ref()
    }

    /// Adds an attempt, dropping the oldest beyond [`ATTEMPTS_KEPT`].
    pub fn push(&mut self, attempt: PastAttempt) {
        self.attempts.push(attempt);
        let extra = self.attempts.len().saturating_sub(ATTEMPTS_KEPT);
        self.attempts.drain(..extra);
    }
}

/// The attempt that last succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastSuccess {
    /// When it started, RFC 3339 UTC.
    pub at: String,
    /// Its run directory.
    pub run: String,
    /// Every knob's value, by name, typed as in summary.json.
    pub knobs: KnobValues,
}

/// One attempt as the job's file keeps it: the summary.json record's knobs, cause and peaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PastAttempt {
    /// When it started, RFC 3339 UTC.
    pub at: String,
    /// Its run directory.
    pub run: String,
    pub attempt: u32,
    pub knobs: KnobValues,
    /// As [`Cause::as_str`] spells it; kept as text so a cause this build does not know (from
    /// a newer one) is skipped by readers, not a corrupt file.
    pub cause: String,
    #[serde(flatten)]
    pub peaks: PeakRecord,
}

impl PastAttempt {
    /// From the attempt's summary.json record.
    pub fn from_record(record: &AttemptRecord, run_dir: &Path) -> PastAttempt {
        PastAttempt {
            at: record.started_at.clone(),
            run: run_dir.to_string_lossy().into_owned(),
            attempt: record.attempt,
            knobs: record.knobs.clone(),
            cause: record.cause.as_str().to_string(),
            peaks: record.peaks,
        }
    }

    pub fn cause(&self) -> Option<Cause> {
        Cause::from_name(&self.cause)
    }

    /// The value the knob `name` had, typed as the knob model types it.
    pub fn value(&self, name: &str) -> Option<Value> {
        value_of(&self.knobs, name)
    }
}

/// The value named `name` in `knobs`, typed as [`Value`] (the inverse of [`Value::to_json`]).
pub fn value_of(knobs: &KnobValues, name: &str) -> Option<Value> {
    let (_, json) = knobs.0.iter().find(|(n, _)| n == name)?;
    Some(match json {
        serde_json::Value::Null => Value::Unset,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(n) => Value::Int(n),
            None => Value::Float(n.as_f64()?),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        serde_json::Value::Array(_) | serde_json::Value::Object(_) => return None,
    })
}

/// Why a job file cannot be used as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Unusable {
    /// Not JSON, or not a job file of this format.
    Corrupt(String),
    /// Written by a newer oomguard in a format this one does not read.
    Newer(u64),
}

/// Reads a job file's text.
pub fn parse(bytes: &[u8]) -> Result<JobMemory, Unusable> {
    let raw: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Unusable::Corrupt(e.to_string()))?;
    match raw.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if v > FORMAT_VERSION => return Err(Unusable::Newer(v)),
        Some(v) if v >= 1 => {}
        _ => return Err(Unusable::Corrupt("no format version".into())),
    }
    serde_json::from_value(raw).map_err(|e| Unusable::Corrupt(e.to_string()))
}

/// A job file that was moved aside: the warning the user gets.
#[derive(Debug, Clone, PartialEq)]
pub struct MovedAside {
    pub from: PathBuf,
    pub to: PathBuf,
    pub why: Unusable,
}

impl std::fmt::Display for MovedAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match &self.why {
            Unusable::Corrupt(e) => format!("is not a valid job file ({e})"),
            Unusable::Newer(v) => format!(
                "was written by a newer oomguard (format {v}; this one reads {FORMAT_VERSION})"
            ),
        };
        write!(
            f,
            "job memory {} {why}: moved aside to {}; this run starts as the job's first",
            self.from.display(),
            self.to.display()
        )
    }
}

/// A job file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
pub struct StoreError {
    pub action: &'static str,
    pub path: PathBuf,
    pub source: io::Error,
}

impl StoreError {
    /// The disk (or the user's quota) is full: a passing condition, retried at the next change.
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self.source.raw_os_error(),
            Some(nix::libc::ENOSPC | nix::libc::EDQUOT)
        )
    }
}

/// Where one job's file lives, and the only code that touches it.
#[derive(Debug, Clone)]
pub struct JobStore {
    dir: PathBuf,
    name: String,
    /// Whether its files are the job's user's to touch ([`JobSettings::state_dir_is_users`]).
    as_user: bool,
}

impl JobStore {
    /// The job `name` under `state_dir` (its `jobs/`).
    pub fn new(state_dir: &Path, name: &str) -> JobStore {
        JobStore {
            dir: state_dir.join("jobs"),
            name: name.to_string(),
            as_user: false,
        }
    }

    /// The same store, its files touched as the job's user when `yes`.
    pub fn as_user(mut self, yes: bool) -> JobStore {
        self.as_user = yes && crate::principal::acting_for().is_some();
        self
    }

    /// Runs `work` on the store's files as whoever owns them (see [`JobStore::as_user`]).
    fn as_owner<T>(&self, work: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        crate::principal::as_user_if_or(self.as_user, work, |source| StoreError {
            action: "act as the job's user for",
            path: self.dir.clone(),
            source,
        })
    }

    /// `<state dir>/jobs/NAME.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.name))
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.join(format!("{}.lock", self.name))
    }

    /// The job's memory (empty for a job never seen). Creates nothing unless the file must be
    /// moved aside, which it does under the lock.
    pub fn load(&self) -> Result<(JobMemory, Option<MovedAside>), StoreError> {
        self.as_owner(|| self.load_here())
    }

    fn load_here(&self) -> Result<(JobMemory, Option<MovedAside>), StoreError> {
        match self.read()? {
            None => Ok((JobMemory::default(), None)),
            Some(Ok(memory)) => Ok((memory, None)),
            Some(Err(_)) => {
                // Look again under the lock: a writer may have replaced it meanwhile.
                let _lock = self.lock()?;
                self.read_or_set_aside()
            }
        }
    }

    /// Read-modify-write under the job's lock: `change` gets the file's memory (empty if
    /// missing or moved aside) and the result is written atomically and durably.
    pub fn update(
        &self,
        change: impl FnOnce(&mut JobMemory),
    ) -> Result<Option<MovedAside>, StoreError> {
        self.update_with(true, change)
    }

    /// [`JobStore::update`], synced before it returns only when `durable`. Between attempts
    /// the write is atomic (a reader sees the old file or the new one) and synced by a
    /// background thread: the fsyncs of three updates per relaunch (attempt recorded,
    /// waiting, running) were the tail of the time from a death to the next attempt (149 ms
    /// on a busy disk). A success and the run's end are synced before going on.
    pub fn update_with(
        &self,
        durable: bool,
        change: impl FnOnce(&mut JobMemory),
    ) -> Result<Option<MovedAside>, StoreError> {
        self.as_owner(|| self.update_here(durable, change))
    }

    fn update_here(
        &self,
        durable: bool,
        change: impl FnOnce(&mut JobMemory),
    ) -> Result<Option<MovedAside>, StoreError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|source| StoreError {
                action: "create the job memory directory",
                path: self.dir.clone(),
                source,
            })?;
        let _lock = self.lock()?;
        let (mut memory, moved) = self.read_or_set_aside()?;
        change(&mut memory);
        memory.version = FORMAT_VERSION;
        memory.name = self.name.clone();
        self.write(&memory, durable)?;
        Ok(moved)
    }

    /// The file's bytes parsed; `None` when there is no file.
    fn read(&self) -> Result<Option<Result<JobMemory, Unusable>>, StoreError> {
        let path = self.path();
        // A FIFO or a device in its place must not hold up the run: refused at once.
        match crate::fsutil::read_regular_capped(&path, crate::fsutil::SMALL_FILE_MAX_BYTES) {
            Ok(bytes) => Ok(Some(parse(&bytes))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError {
                action: "read job memory",
                path,
                source,
            }),
        }
    }

    /// Call with the lock held.
    fn read_or_set_aside(&self) -> Result<(JobMemory, Option<MovedAside>), StoreError> {
        match self.read()? {
            None => Ok((JobMemory::default(), None)),
            Some(Ok(memory)) => Ok((memory, None)),
            Some(Err(why)) => {
                let moved = self.set_aside(why)?;
                Ok((JobMemory::default(), Some(moved)))
            }
        }
    }

    /// Renames the file to `NAME.json.corrupt-<UTC time>[-N]`, never over another.
    fn set_aside(&self, why: Unusable) -> Result<MovedAside, StoreError> {
        let from = self.path();
        let stamp: String = crate::record::summary::rfc3339(SystemTime::now())
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let base = format!("{}.json.corrupt-{stamp}", self.name);
        let to = (1u32..)
            .map(|n| match n {
                1 => self.dir.join(&base),
                n => self.dir.join(format!("{base}-{n}")),
            })
            .find(|p| fs::symlink_metadata(p).is_err())
            .expect("some suffix is free");
        fs::rename(&from, &to).map_err(|source| StoreError {
            action: "move aside the unusable job memory",
            path: from.clone(),
            source,
        })?;
        Ok(MovedAside { from, to, why })
    }

    /// Takes the job's exclusive lock (blocks while another run holds it). Released on drop.
    fn lock(&self) -> Result<nix::fcntl::Flock<File>, StoreError> {
        let path = self.lock_path();
        let fail = |action, source| StoreError {
            action,
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| fail("open the job lock", e))?;
        loop {
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive) {
                Ok(lock) => return Ok(lock),
                // A signal came while waiting: wait again.
                Err((back, nix::errno::Errno::EINTR)) => file = back,
                Err((_, errno)) => return Err(fail("lock", errno.into())),
            }
        }
    }

    /// Writes the file atomically: a private temporary file in the same directory, renamed
    /// over the old one; when `durable`, the file is synced before the rename and the
    /// directory after it, so the rename survives a crash.
    fn write(&self, memory: &JobMemory, durable: bool) -> Result<(), StoreError> {
        let path = self.path();
        let tmp = self
            .dir
            .join(format!(".{}.json.{}.tmp", self.name, std::process::id()));
        let fail = |action, source| StoreError {
            action,
            path: path.clone(),
            source,
        };
        let mut text =
            serde_json::to_vec_pretty(memory).expect("job memory is plain data: it encodes");
        text.push(b'\n');
        // Under the lock no other oomguard writes this name; one left by a crashed process
        // with our PID is stale.
        let _ = fs::remove_file(&tmp);
        let mut kept = None;
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|file| {
                kept = file.try_clone().ok();
                write_then_rename(file, &tmp, &path, &text, durable)
            });
        if let Err(e) = written {
            return Err(fail("write job memory", e));
        }
        // The directory, opened now (as whoever owns the store) and never through a link.
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
            .open(&self.dir);
        if !durable {
            // Synced off the path from a death to the next exec: on a file system that does
            // not flush a file renamed over another (XFS), a crash before this sync could
            // leave the whole file empty, not just without its last update. The descriptors
            // written through are synced, never a path opened again later (by then it could
            // name anything).
            std::thread::spawn(move || {
                let _ = kept.map(|file| file.sync_all());
                let _ = dir.map(|dir| dir.sync_all());
            });
            return Ok(());
        }
        dir.and_then(|dir| dir.sync_all())
            .map_err(|e| fail("sync the directory of", e))
    }
}

/// The first attempt's values, from what worked last time.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// Every knob's value, in ladder order.
    pub values: Vec<Value>,
    /// The knobs whose value is not the command's.
    pub changed: Vec<usize>,
    /// When the remembered attempt started (RFC 3339).
    pub at: String,
    /// Set when batch × accumulation cannot equal the command's exactly.
    pub effective_note: Option<String>,
    /// What the values are.
    pub from: StartFrom,
}

/// Where the first attempt's values come from.
#[derive(Debug, Clone, PartialEq)]
pub enum StartFrom {
    /// The job's last successful attempt.
    LastSuccess,
    /// The attempt in progress when the job's last oomguard died without finishing (killed,
    /// or its machine went down): this run continues it.
    Interrupted {
        /// That attempt's number in its run.
        attempt: u32,
        /// The oomguard that died.
        pid: u32,
        run_dir: String,
    },
}

impl Start {
    /// `batch 16, accum 4`: the knobs that differ from the command, by name.
    pub fn describe(&self, knobs: &KnobSet) -> String {
        self.changed
            .iter()
            .map(|&i| format!("{} {}", knobs.knobs[i].name, self.values[i]))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every knob's starting value, by name, as summary.json's `started_from`.
    pub fn knob_values(&self, knobs: &KnobSet) -> KnobValues {
        KnobValues(
            knobs
                .knobs
                .iter()
                .zip(&self.values)
                .map(|(k, v)| (k.name.clone(), v.to_json()))
                .collect(),
        )
    }
}

/// Where the first attempt starts given what worked last time, or `None` to start from the
/// command's own values: when the remembered knobs are not the same names, or nothing would
/// differ. The command stays the authority: an integer knob starts at the remembered value
/// only below the command's (a command asking for less gets less) and never under the knob's
/// floor; a set knob takes its set value only if that is what worked; a partner is computed
/// from the command's values so that knob × partner stays the command's effective batch.
pub fn start_from(last: &LastSuccess, knobs: &KnobSet) -> Option<Start> {
    let same_names = last.knobs.0.len() == knobs.knobs.len()
        && knobs
            .knobs
            .iter()
            .all(|k| value_of(&last.knobs, &k.name).is_some());
    if !same_names || knobs.knobs.is_empty() {
        return None;
    }
    let original = knobs.originals();
    let mut values = original.clone();
    for (i, knob) in knobs.knobs.iter().enumerate() {
        let remembered = value_of(&last.knobs, &knob.name).expect("checked above");
        match (&knob.rule.moves, &remembered, &original[i]) {
            (Moves::Step { min, .. }, Value::Int(r), Value::Int(o)) => {
                values[i] = Value::Int((*r).max(*min).min(*o));
            }
            (Moves::Set(to), r, _) if r.same(to) => values[i] = to.clone(),
            _ => {}
        }
    }
    let mut effective_note = None;
    for (i, knob) in knobs.knobs.iter().enumerate() {
        if let (Some(p), Value::Int(new)) = (knob.rule.partner, &values[i]) {
            if !values[i].same(&original[i]) {
                let (partner, note) = policy::keep_product(&original[i], &original[p], *new);
                values[p] = partner;
                effective_note = effective_note.or(note);
            }
        }
    }
    let changed: Vec<usize> = (0..values.len())
        .filter(|&i| !values[i].same(&original[i]))
        .collect();
    if changed.is_empty() {
        return None;
    }
    Some(Start {
        values,
        changed,
        at: last.at.clone(),
        effective_note,
        from: StartFrom::LastSuccess,
    })
}

/// The first attempt continues `run`, whose oomguard died mid-run: every knob takes the value
/// of the attempt that was in progress (running, or about to start after a backoff), which the
/// dead run had already stepped down to. `None` when the command (`shape`, as
/// [`command_shape`] makes it) is not the dead run's, the knobs are not the same names, or a
/// value is not of the knob's type (the command changed). As for [`start_from`], the command
/// stays the authority: an integer knob never starts above the command's own value (an admin
/// who lowered the batch after a crash gets the lower one), and a partner is then computed from
/// the command's values.
pub fn continue_from(run: &CurrentRun, knobs: &KnobSet, shape: &[String]) -> Option<Start> {
    if run.command.as_ref().is_some_and(|theirs| theirs != shape) {
        return None;
    }
    let same_names = run.knobs.0.len() == knobs.knobs.len()
        && knobs
            .knobs
            .iter()
            .all(|k| value_of(&run.knobs, &k.name).is_some());
    if !same_names || knobs.knobs.is_empty() {
        return None;
    }
    let original = knobs.originals();
    let mut values = Vec::with_capacity(original.len());
    for (knob, original) in knobs.knobs.iter().zip(&original) {
        let value = value_of(&run.knobs, &knob.name).expect("checked above");
        let same_type = std::mem::discriminant(&value) == std::mem::discriminant(original)
            || matches!(value, Value::Unset)
            || matches!(original, Value::Unset);
        if !same_type {
            return None;
        }
        values.push(value);
    }
    for (i, knob) in knobs.knobs.iter().enumerate() {
        let (Moves::Step { .. }, Value::Int(theirs), Value::Int(command)) =
            (&knob.rule.moves, &values[i], &original[i])
        else {
            continue;
        };
        if theirs <= command {
            continue;
        }
        let new = *command;
        values[i] = Value::Int(new);
        if let Some(p) = knob.rule.partner {
            values[p] = policy::keep_product(&original[i], &original[p], new).0;
        }
    }
    let changed = (0..values.len())
        .filter(|&i| !values[i].same(&original[i]))
        .collect();
    Some(Start {
        values,
        changed,
        at: run.started_at.clone(),
        effective_note: None,
        from: StartFrom::Interrupted {
            attempt: run.attempt,
            pid: run.process.pid,
            run_dir: run.run_dir.clone(),
        },
    })
}

/// One run's hold on its job: the memory loaded at the start, the first attempt's values,
/// and the store each attempt is added to.
#[derive(Debug)]
pub struct JobRun {
    settings: JobSettings,
    store: Option<JobStore>,
    memory: JobMemory,
    start: Option<Start>,
    /// A problem with the store has been told: later ones are only logged, so a read-only
    /// state directory costs one line, not one per attempt.
    warned: bool,
    /// Attempts (and the success among them) not yet in the file because a write failed (a full
    /// disk): written with the next attempt's.
    pending: Vec<PastAttempt>,
    pending_success: Option<LastSuccess>,
    /// This run as the job's file shows it (`oomguard status`), once an attempt has started.
    current: Option<CurrentRun>,
}

impl JobRun {
    /// Loads the job and, unless `--fresh`, works out where the first attempt starts, saying
    /// so in one line. Any problem with the file is a warning: the run goes on.
    pub fn open(settings: &JobSettings, knobs: &KnobSet, report: &Reporter) -> JobRun {
        let mut run = JobRun {
            settings: settings.clone(),
            store: None,
            memory: JobMemory::default(),
            start: None,
            warned: false,
            pending: Vec::new(),
            pending_success: None,
            current: None,
        };
        let Some(state_dir) = &settings.state_dir else {
            report.warn(&format!(
                "no state directory (neither XDG_STATE_HOME nor HOME is set): job {} is not remembered; give --state-dir DIR",
                settings.name
            ));
            return run;
        };
        let store = JobStore::new(state_dir, &settings.name).as_user(settings.state_dir_is_users);
        match store.load() {
            Ok((memory, moved)) => {
                if let Some(moved) = moved {
                    run.warn(report, &moved.to_string());
                }
                run.memory = memory;
            }
            Err(e) => run.warn(
                report,
                &format!("{e}; this run starts from the command's values"),
            ),
        }
        run.store = Some(store);
        // The job's last run, if its oomguard died without writing an end.
        let died = run.memory.run.clone().filter(|last| {
            last.state.under_way()
                && match crate::status::liveness(&last.process) {
                    Liveness::Dead => true,
                    Liveness::Alive => {
                        report.warn(&format!(
                            "job {} is also being run by oomguard {} (run directory {}): `oomguard status` shows only the latest run; give --name for a job of its own",
                            settings.name, last.process.pid, last.run_dir
                        ));
                        false
                    }
                    Liveness::Unknown => false,
                }
        });
        if settings.fresh {
            return run;
        }
        let continued = died.as_ref().and_then(|last| {
            let start = continue_from(last, knobs, &settings.command);
            if start.is_none() {
                report.say(&format!(
                    "the job's last run (oomguard {}, {}) died during attempt {} with another command: not continuing it",
                    last.process.pid, last.run_dir, last.attempt
                ));
            }
            start
        });
        if let Some(start) = continued {
            let StartFrom::Interrupted {
                attempt,
                pid,
                run_dir,
            } = &start.from
            else {
                unreachable!("continue_from continues an interrupted run");
            };
            let values = match start.describe(knobs) {
                described if described.is_empty() => "the command's".to_string(),
                described => described,
            };
            report.say(&format!(
                "the job's last run (oomguard {pid}, {run_dir}) died during attempt {attempt}: continuing with that attempt's values: {values}; --fresh to start from the command's values"
            ));
            run.start = Some(start);
            return run;
        }
        run.start = run
            .memory
            .last_success()
            .and_then(|last| start_from(last, knobs));
        if let Some(start) = &run.start {
            let day = start.at.get(..10).unwrap_or(&start.at);
            report.say(&format!(
                "starting from what worked last time ({day}): {}; --fresh to start from the command's values",
                start.describe(knobs)
            ));
            if let Some(note) = &start.effective_note {
                report.warn(note);
            }
        }
        run
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// What earlier runs learned, as loaded at the start.
    pub fn memory(&self) -> &JobMemory {
        &self.memory
    }

    /// Where the first attempt starts, when not at the command's values.
    pub fn start(&self) -> Option<&Start> {
        self.start.as_ref()
    }

    /// Adds an attempt (its summary.json record) to the job's file; a success also becomes
    /// what the next run starts from.
    pub fn remember(&mut self, record: &AttemptRecord, run_dir: &Path, report: &Reporter) {
        let past = PastAttempt::from_record(record, run_dir);
        let success = (record.cause == Cause::Ok).then(|| LastSuccess {
            at: past.at.clone(),
            run: past.run.clone(),
            knobs: past.knobs.clone(),
        });
        if let Some(current) = &mut self.current {
            current.last_cause = Some(past.cause.clone());
            current.peaks = Some(past.peaks);
        }
        let Some(store) = &self.store else {
            return;
        };
        self.pending.push(past);
        if success.is_some() {
            self.pending_success = success;
        }
        let settings = &self.settings;
        let (pending, pending_success) = (&self.pending, &self.pending_success);
        let current = self.current.clone();
        // A success is what the next run starts from: synced. A death is synced with the
        // run's end.
        let updated = store.update_with(record.cause == Cause::Ok, |memory| {
            memory.command = settings.command.clone();
            memory.cwd = settings.cwd.to_string_lossy().into_owned();
            for past in pending {
                memory.push(past.clone());
            }
            if pending_success.is_some() {
                memory.last_success = pending_success.clone();
            }
            if current.is_some() {
                memory.run = current;
            }
        });
        match updated {
            Ok(moved) => {
                self.pending.clear();
                self.pending_success = None;
                crate::record::unsaved::saved("job state");
                if let Some(moved) = moved {
                    self.warn(report, &moved.to_string());
                }
            }
            // No space (or quota): the attempts stay pending, tried again with the next one;
            // the run's last warning says so if they never get written.
            Err(e) if e.is_out_of_space() => crate::record::unsaved::unsaved("job state", &e),
            Err(e) => self.warn(
                report,
                &format!("{e}; the job's next run will not start from this one"),
            ),
        }
    }

    /// Attempt `attempt` is about to start with `knobs`: the run is `running` it.
    pub fn attempt_started(
        &mut self,
        attempt: u32,
        knobs: KnobValues,
        run_dir: &Path,
        report: &Reporter,
    ) {
        self.set_run(RunState::Running, attempt, knobs, run_dir, report);
    }

    /// Attempt `attempt` will start with `knobs` after the backoff: the run is `waiting`.
    pub fn waiting(&mut self, attempt: u32, knobs: KnobValues, run_dir: &Path, report: &Reporter) {
        self.set_run(RunState::Waiting, attempt, knobs, run_dir, report);
    }

    /// The run ended with `outcome`.
    pub fn ended(&mut self, outcome: Outcome, report: &Reporter) {
        let Some(current) = &mut self.current else {
            // No attempt started: the job's last run stays the one shown.
            return;
        };
        current.state = outcome.into();
        current.ended_at = Some(crate::record::summary::rfc3339(SystemTime::now()));
        self.save_run(report);
    }

    fn set_run(
        &mut self,
        state: RunState,
        attempt: u32,
        knobs: KnobValues,
        run_dir: &Path,
        report: &Reporter,
    ) {
        let current = self.current.get_or_insert_with(|| CurrentRun {
            process: ProcessId::current(),
            run_dir: run_dir.to_string_lossy().into_owned(),
            started_at: crate::record::summary::rfc3339(SystemTime::now()),
            state,
            attempt,
            knobs: KnobValues::default(),
            command: Some(self.settings.command.clone()),
            last_cause: None,
            peaks: None,
            ended_at: None,
        });
        current.state = state;
        current.attempt = attempt;
        current.knobs = knobs;
        self.save_run(report);
    }

    /// Writes this run into the job's file (a failure is told once, as for attempts).
    fn save_run(&mut self, report: &Reporter) {
        let (Some(store), Some(current)) = (&self.store, &self.current) else {
            return;
        };
        let current = current.clone();
        // Running and waiting are for `oomguard status` while the run lives; its end is synced.
        let durable = current.ended_at.is_some();
        match store.update_with(durable, |memory| memory.run = Some(current)) {
            Ok(None) => {}
            Ok(Some(moved)) => self.warn(report, &moved.to_string()),
            // A full disk is told once, at the end, with everything else left unsaved.
            Err(e) if e.is_out_of_space() => crate::record::unsaved::unsaved("job state", &e),
            Err(e) => self.warn(
                report,
                &format!("{e}; `oomguard status` will not show this run as it is"),
            ),
        }
    }

    fn warn(&mut self, report: &Reporter, line: &str) {
        if std::mem::replace(&mut self.warned, true) {
            tracing::info!("{line}");
        } else {
            report.warn(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::resolve::{resolve, Request};
    use std::os::unix::fs::PermissionsExt;

    fn argv(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn knobs_of(command: &[OsString], min_batch: u64) -> KnobSet {
        resolve(
            &Request {
                command,
                batch_arg: None,
                accum_arg: None,
                min_batch,
                cwd: Path::new("/"),
            },
            None,
        )
        .expect("the command's knobs resolve")
    }

    fn shape(s: &str) -> String {
        let command = argv(s);
        let knobs = knobs_of(&command, 1);
        command_shape(&command, &knobs)
            .iter()
            .map(|t| t.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn the_shape_blanks_knob_values_only() {
        let table = [
            (
                "python train.py --batch_size 8 --grad_accum=2 --lr 3e-4",
                "python train.py --batch_size <batch> --grad_accum=<accum> --lr 3e-4",
            ),
            (
                "python train.py data.batch_size=32 --num_workers 8",
                "python train.py data.batch_size=<batch> --num_workers <workers>",
            ),
            // Given twice, both occurrences are blanked (both are rewritten on relaunch).
            (
                "python t.py --bs 4 --bs 6",
                "python t.py --bs <batch> --bs <batch>",
            ),
            ("python t.py --epochs 3", "python t.py --epochs 3"),
        ];
        for (command, want) in table {
            assert_eq!(shape(command), want, "{command}");
        }
    }

    #[test]
    fn a_job_is_its_command_without_knob_values_and_its_directory() {
        let name = |command: &str, cwd: &str| {
            let command = argv(command);
            let knobs = knobs_of(&command, 1);
            derive_name(&command_shape(&command, &knobs), Path::new(cwd))
        };
        let base = name("python train.py --batch_size 8 --grad_accum 1", "/p");
        assert!(base.starts_with("train-"), "{base}");
        assert_eq!(base.len(), "train-".len() + 16, "{base}");
        check_name(&base).expect("a derived name is a valid name");
        // Same job: other knob values.
        assert_eq!(
            name("python train.py --batch_size 64 --grad_accum 4", "/p"),
            base
        );
        // Other jobs: other flags, another directory, another script.
        for (command, cwd) in [
            (
                "python train.py --batch_size 8 --grad_accum 1 --epochs 2",
                "/p",
            ),
            ("python train.py --batch_size 8 --grad_accum 1", "/q"),
            ("python eval.py --batch_size 8 --grad_accum 1", "/p"),
        ] {
            assert_ne!(name(command, cwd), base, "{command} in {cwd}");
        }
        // Stems: a module, a bare program, characters no file name should carry.
        assert!(name("python -m pkg.train --bs 8", "/p").starts_with("pkg.train-"));
        assert!(name("/opt/bin/trainer --bs 8", "/p").starts_with("trainer-"));
        assert!(name("./.hidden run", "/p").starts_with("hidden-"));
        // Stable across builds: a fixed input has a fixed name.
        assert_eq!(
            derive_name(&argv("python t.py"), Path::new("/p")),
            derive_name(&argv("python t.py"), Path::new("/p"))
        );
    }

    #[test]
    fn names_must_be_file_names() {
        for good in ["nightly", "bert-large_v2.1", "a"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let long = "x".repeat(NAME_MAX_LEN + 1);
        for bad in ["", ".", "..", ".hidden", "a/b", "a b", "é", long.as_str()] {
            let err = check_name(bad).unwrap_err();
            assert!(err.starts_with("--name "), "{bad}: {err}");
            assert!(err.contains("letters, digits"), "{bad}: {err}");
        }
    }

    fn last(knobs: &[(&str, serde_json::Value)]) -> LastSuccess {
        LastSuccess {
            at: "2026-11-25T10:00:00Z".into(),
            run: "/runs/1".into(),
            knobs: KnobValues(
                knobs
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .collect(),
            ),
        }
    }

    #[test]
    fn the_start_comes_from_what_worked_within_the_commands_bounds() {
        use serde_json::json;
        // (command, min batch, remembered, the start's batch and accum, or None)
        type Case<'a> = (
            &'a str,
            u64,
            &'a [(&'a str, serde_json::Value)],
            Option<(u64, u64)>,
        );
        let table: &[Case] = &[
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 4)),
            ),
            // Another batch in the command: the effective batch stays the command's.
            (
                "t.py --batch_size 16 --grad_accum 1",
                1,
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 8)),
            ),
            // The command asks for less than what worked: the command's.
            (
                "t.py --batch_size 1 --grad_accum 8",
                1,
                &[("batch", json!(2)), ("accum", json!(4))],
                None,
            ),
            // Never below the floor.
            (
                "t.py --batch_size 8 --grad_accum 1",
                4,
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((4, 2)),
            ),
            // Other knob names: not this knob set's memory.
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(2))],
                None,
            ),
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(2)), ("workers", json!(4))],
                None,
            ),
            // A value of the wrong type is ignored.
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!("two")), ("accum", json!(4))],
                None,
            ),
            // The same values: nothing to say.
            (
                "t.py --batch_size 8 --grad_accum 1",
                1,
                &[("batch", json!(8)), ("accum", json!(1))],
                None,
            ),
        ];
        for (command, min, remembered, want) in table {
            let command = argv(command);
            let knobs = knobs_of(&command, *min);
            let start = start_from(&last(remembered), &knobs);
            let got = start.as_ref().map(|s| {
                (
                    knobs.batch_of(&s.values).unwrap(),
                    knobs.accum_of(&s.values).unwrap(),
                )
            });
            assert_eq!(got, *want, "{command:?} from {remembered:?}");
        }
    }

    #[test]
    fn an_inexact_effective_batch_is_said_and_the_line_names_the_knobs() {
        use serde_json::json;
        let command = argv("t.py --batch_size 10 --grad_accum 1");
        let knobs = knobs_of(&command, 1);
        let start = start_from(&last(&[("batch", json!(4)), ("accum", json!(2))]), &knobs)
            .expect("a start below the command's");
        assert_eq!(start.describe(&knobs), "batch 4, accum 3");
        assert!(start.effective_note.as_deref().unwrap().contains("12"));
        assert_eq!(
            serde_json::to_string(&start.knob_values(&knobs)).unwrap(),
            r#"{"batch":4,"accum":3}"#
        );
        // Without a partner, only the batch moves.
        let command = argv("t.py --batch_size 10");
        let knobs = knobs_of(&command, 1);
        let start = start_from(&last(&[("batch", json!(4))]), &knobs).unwrap();
        assert_eq!(start.describe(&knobs), "batch 4");
        assert_eq!(start.effective_note, None);
    }

    fn dead_run(knobs: &[(&str, serde_json::Value)]) -> CurrentRun {
        CurrentRun {
            process: ProcessId {
                pid: 77,
                pid_start_ticks: Some(1),
                boot_id: None,
                host: None,
                pid_ns: None,
            },
            run_dir: "/runs/2".into(),
            started_at: "2026-11-26T01:00:00Z".into(),
            state: RunState::Running,
            attempt: 3,
            knobs: KnobValues(
                knobs
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .collect(),
            ),
            command: None,
            last_cause: Some("device_oom".into()),
            peaks: None,
            ended_at: None,
        }
    }

    #[test]
    fn a_dead_run_is_continued_with_its_attempts_values_as_they_were() {
        use serde_json::json;
        // (command, the dead run's knobs, the start's batch and accum, or None)
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, serde_json::Value)],
            Option<(u64, u64)>,
        );
        let table: &[Case] = &[
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 4)),
            ),
            // Taken as they were, not recomputed from the command (the dead run had stepped
            // down from it already).
            (
                "t.py --batch_size 16 --grad_accum 1",
                &[("batch", json!(2)), ("accum", json!(4))],
                Some((2, 4)),
            ),
            // The command's own values: continued all the same (the line still tells).
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!(8)), ("accum", json!(1))],
                Some((8, 1)),
            ),
            // Other knob names, or a value of another type: the command changed.
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!(2))],
                None,
            ),
            (
                "t.py --batch_size 8 --grad_accum 1",
                &[("batch", json!("two")), ("accum", json!(4))],
                None,
            ),
            // Never above the command's own values: a command lowered after the crash wins,
            // its partner taken from the command.
            (
                "t.py --batch_size 4 --grad_accum 2",
                &[("batch", json!(64)), ("accum", json!(1))],
                Some((4, 2)),
            ),
            (
                "t.py --batch_size 4 --grad_accum 3",
                &[("batch", json!(16)), ("accum", json!(1))],
                Some((4, 3)),
            ),
        ];
        for (command, knobs, want) in table {
            let command = argv(command);
            let set = knobs_of(&command, 1);
            let shape: Vec<String> = command_shape(&command, &set)
                .iter()
                .map(|t| t.to_string_lossy().into_owned())
                .collect();
            let mut dead = dead_run(knobs);
            let start = continue_from(&dead, &set, &shape);
            // The same run with its command recorded continues the same; another command
            // (a flag more) does not continue at all.
            dead.command = Some(shape.clone());
            assert_eq!(continue_from(&dead, &set, &shape), start, "{command:?}");
            let mut other = shape.clone();
            other.extend(["--other_model".to_string(), "big".to_string()]);
            assert_eq!(continue_from(&dead, &set, &other), None, "{command:?}");
            let got = start.as_ref().map(|s| {
                (
                    set.batch_of(&s.values).unwrap(),
                    set.accum_of(&s.values).unwrap(),
                )
            });
            assert_eq!(got, *want, "{command:?} from {knobs:?}");
            if let Some(start) = start {
                assert_eq!(
                    start.from,
                    StartFrom::Interrupted {
                        attempt: 3,
                        pid: 77,
                        run_dir: "/runs/2".into()
                    }
                );
            }
        }
    }

    #[test]
    fn a_run_record_this_build_cannot_read_costs_only_the_record() {
        let table = [
            (r#""state": "running""#, true),
            (r#""state": "paused_by_a_newer_build""#, false),
        ];
        for (state, readable) in table {
            let text = format!(
                r#"{{"version": 1, "name": "j", "attempts": [], "run": {{"pid": 5, "run_dir": "/r",
                 "started_at": "t", {state}, "attempt": 2, "knobs": {{"batch": 4}}}}}}"#
            );
            let memory = parse(text.as_bytes()).expect("the file stays usable");
            assert_eq!(memory.run.is_some(), readable, "{state}");
            assert_eq!(memory.name, "j");
        }
        // And an old file, without a run, reads as before.
        assert_eq!(parse(br#"{"version": 1, "name": "j"}"#).unwrap().run, None);
    }

    #[test]
    fn values_come_back_typed() {
        use serde_json::json;
        let knobs = KnobValues(vec![
            ("a".into(), json!(8)),
            ("b".into(), json!(0.5)),
            ("c".into(), json!(true)),
            ("d".into(), json!("x")),
            ("e".into(), json!(null)),
            ("f".into(), json!(2.0)),
        ]);
        let table = [
            ("a", Some(Value::Int(8))),
            ("b", Some(Value::Float(0.5))),
            ("c", Some(Value::Bool(true))),
            ("d", Some(Value::Str("x".into()))),
            ("e", Some(Value::Unset)),
            ("f", Some(Value::Float(2.0))),
            ("g", None),
        ];
        for (name, want) in table {
            assert_eq!(value_of(&knobs, name), want, "{name}");
        }
    }

    #[test]
    fn unusable_files_are_told_apart() {
        let table: &[(&str, Option<Unusable>)] = &[
            (r#"{"version": 1, "name": "j"}"#, None),
            (r#"{"version": 2, "name": "j"}"#, Some(Unusable::Newer(2))),
            ("", Some(Unusable::Corrupt(String::new()))),
            (
                "{\"version\": 1, \"na",
                Some(Unusable::Corrupt(String::new())),
            ),
            (r#"{"name": "j"}"#, Some(Unusable::Corrupt(String::new()))),
            (
                r#"{"version": 0, "name": "j"}"#,
                Some(Unusable::Corrupt(String::new())),
            ),
            (
                r#"{"version": 1, "name": "j", "attempts": [{"at": 3}]}"#,
                Some(Unusable::Corrupt(String::new())),
            ),
            ("[1, 2]", Some(Unusable::Corrupt(String::new()))),
        ];
        for (text, want) in table {
            let got = parse(text.as_bytes()).err().map(|e| match e {
                Unusable::Corrupt(_) => Unusable::Corrupt(String::new()),
                newer => newer,
            });
            assert_eq!(&got, want, "{text}");
        }
    }

    fn record(attempt: u32, batch: u64, cause: Cause) -> PastAttempt {
        PastAttempt {
            at: "2026-11-25T10:00:00Z".into(),
            run: "/runs/1".into(),
            attempt,
            knobs: KnobValues(vec![("batch".into(), batch.into())]),
            cause: cause.as_str().into(),
            peaks: PeakRecord {
                peak_rss_bytes: Some(1 << 30),
                ..PeakRecord::default()
            },
        }
    }

    #[test]
    fn the_store_round_trips_privately_and_keeps_the_newest_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let store = JobStore::new(dir.path(), "j");
        let (empty, moved) = store.load().unwrap();
        assert_eq!((empty, moved), (JobMemory::default(), None));
        assert!(!dir.path().join("jobs").exists(), "a load created files");
        for n in 0..(ATTEMPTS_KEPT as u32 + 3) {
            store
                .update(|m| m.push(record(n + 1, 8, Cause::DeviceOom)))
                .unwrap();
        }
        let (memory, _) = store.load().unwrap();
        assert_eq!(memory.version, FORMAT_VERSION);
        assert_eq!(memory.name, "j");
        assert_eq!(memory.attempts().len(), ATTEMPTS_KEPT);
        assert_eq!(memory.attempts()[0].attempt, 4, "the oldest went first");
        assert_eq!(memory.attempts()[0].cause(), Some(Cause::DeviceOom));
        assert_eq!(memory.attempts()[0].peaks.peak_rss_bytes, Some(1 << 30));
        assert_eq!(memory.attempts()[0].value("batch"), Some(Value::Int(8)));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&store.path()), 0o600);
        assert_eq!(mode(&dir.path().join("jobs")), 0o700);
        let left: Vec<String> = fs::read_dir(dir.path().join("jobs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    }

    #[test]
    fn an_unusable_file_is_moved_aside_once() {
        for (text, newer) in [
            ("{ not json", false),
            (r#"{"version": 99, "name": "j", "future": true}"#, true),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let store = JobStore::new(dir.path(), "j");
            fs::create_dir_all(dir.path().join("jobs")).unwrap();
            fs::write(store.path(), text).unwrap();
            let (memory, moved) = store.load().unwrap();
            assert_eq!(memory, JobMemory::default());
            let moved = moved.expect("moved aside");
            assert_eq!(matches!(moved.why, Unusable::Newer(99)), newer);
            let name = moved.to.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with("j.json.corrupt-"), "{name}");
            assert_eq!(fs::read_to_string(&moved.to).unwrap(), text);
            let line = moved.to_string();
            assert!(line.contains("moved aside to"), "{line}");
            assert_eq!(line.contains("newer oomguard"), newer, "{line}");
            // Written again, then nothing more to move.
            assert_eq!(
                store.update(|m| m.push(record(1, 8, Cause::Ok))).unwrap(),
                None
            );
            assert_eq!(store.load().unwrap().0.attempts().len(), 1);
            // A second unusable file in the same second does not replace the first one.
            fs::write(store.path(), text).unwrap();
            let again = store.update(|_| {}).unwrap().expect("moved aside");
            assert_ne!(again.to, moved.to);
            assert!(again.to.exists() && moved.to.exists());
        }
    }
}
