//! Puts a patched config file where the job will read it, and guarantees the user's file comes
//! back byte for byte. A file whose path is in the command gets a patched *copy* beside it
//! (same directory, so relative references still resolve); a file the job picks itself is
//! edited *in place* and restored when the run ends.
//!
//! Durability: before the user's file is touched, a backup of its bytes and a journal entry
//! (JSON: the file, the backup, the owner's PID and run dir, the original's mode, owner and
//! times, and every text oomguard wrote or is about to write) are fsynced, file and directory,
//! under `<state dir>/patches/`. Writes to the user's directory go through a temp file created
//! with `O_EXCL` beside the target, given the original's permissions (and owner when root),
//! fsynced and renamed over the target; a restore also gives back the original's mtime, so
//! tools keyed on it (Python's `__pycache__`, make) see the original again.
//!
//! Liveness: each entry has a lock file (`<key>.lock`) that its owner holds with `flock` for the
//! run. Our descriptors are close-on-exec, so the job never inherits the lock: when oomguard
//! dies, the lock is free, and the guard (`oomguard __guard`, told the journal paths) or the
//! next oomguard's [`Patcher::recover`] restores. One rule decides everywhere (`decide`): the
//! file holds the original → nothing to do; it holds a text we wrote → the original goes back;
//! anything else, or the file is gone → someone else's edit stays, the original is written
//! beside it as `<file>.oomguard-original` (`.1`, `.2`, ... rather than overwrite), and a
//! warning says so.
//!
//! The entry's lock is one state directory's; the file's own lock ([`lock::FileLock`], beside
//! it as `.<name>.oomguard-lock`) is every oomguard's, whatever its `XDG_STATE_HOME` or user: a
//! second patcher is refused there, and the lock of a dead owner names its journal entry, which
//! is finished before anyone reads the file as the original. Only those who could replace the
//! file can make that lock count (see [`lock`]), so no third user can refuse a run with it or
//! switch it off.
//!
//! The new inode a write renames over the file carries the old one's extended attributes, its
//! ACL among them ([`attrs`]); a file with more than one name is written in place instead (same
//! inode, so every name sees the edit and the restore).
//!
//! What text to write is the caller's (the editors in [`crate::knobs::file`]); when to write,
//! and printing the lines returned here, are the run loop's.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::knobs::file::{py, Format};

mod attrs;
mod lock;

use attrs::Xattrs;
use lock::FileLock;

/// How the job gets the edited file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The file's path is in the command: the job gets a patched copy beside the original
    /// (same directory, so relative references — Hydra `defaults:`, includes — still resolve),
    /// named `<stem>.oomguard-<pid>.<ext>` (extension kept: loaders dispatch on it); the caller
    /// points the command's token at it.
    Copy,
    /// Not in the command (the job picks it itself): edited in place, restored at the end.
    InPlace,
}

/// Why a file cannot be patched or restored. Each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{path} is not UTF-8 text: oomguard edits only UTF-8 config files")]
    NotUtf8 { path: PathBuf },
    #[error("the path {path} is not UTF-8: oomguard cannot record it to restore it (rename it)")]
    PathNotUtf8 { path: PathBuf },
    #[error("{path} is being patched by oomguard {pid} (run dir {run_dir}); wait for it to end, or stop it")]
    Busy {
        path: PathBuf,
        pid: u32,
        run_dir: PathBuf,
    },
    #[error("{path} holds a patch left by an oomguard that died, and this one cannot undo it ({detail}): run oomguard as the user who owns {journal}, or put the file back from the backup that entry names, then delete the entry")]
    LeftPatched {
        path: PathBuf,
        journal: PathBuf,
        detail: String,
    },
    #[error("{path} is named twice among the files to patch: give each file one place")]
    Duplicate { path: PathBuf },
    #[error("{path} was changed by someone else during the run: oomguard will not overwrite it (the original comes back beside it at the end)")]
    EditedMeanwhile { path: PathBuf },
    #[error("journal entry {path} cannot be used: {detail} (inspect it and the file it names, then delete it)")]
    Journal { path: PathBuf, detail: String },
    #[error("{lock} is not oomguard's lock: uid {uid} made it in a shared directory, where they cannot change {path}, and only root may remove it there: ask an admin to remove it, or keep {path} in a directory only its writers can write")]
    Squatted {
        path: PathBuf,
        lock: PathBuf,
        uid: u32,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PatchError + 'a {
    move |source| PatchError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// The original file's permissions, owner and times, as read at [`Patcher::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FileStat {
    mode: u32,
    uid: u32,
    gid: u32,
    atime_s: i64,
    atime_ns: i64,
    mtime_s: i64,
    mtime_ns: i64,
}

impl FileStat {
    fn of(meta: &std::fs::Metadata) -> FileStat {
        FileStat {
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
            atime_s: meta.atime(),
            atime_ns: meta.atime_nsec(),
            mtime_s: meta.mtime(),
            mtime_ns: meta.mtime_nsec(),
        }
    }

    fn times(&self) -> std::fs::FileTimes {
        std::fs::FileTimes::new()
            .set_accessed(system_time(self.atime_s, self.atime_ns))
            .set_modified(system_time(self.mtime_s, self.mtime_ns))
    }
}

fn system_time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nanos.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

/// One journal entry, `<state dir>/patches/<key>.json`: everything a guard or a later oomguard
/// needs to put things back without the process that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Journal {
    /// Bumped when a field changes meaning; an entry of another version is left alone.
    version: u32,
    mode: Mode,
    /// The user's file, absolute (for InPlace, with symlinks resolved: the file we write).
    path: PathBuf,
    /// The original bytes (InPlace only).
    backup: Option<PathBuf>,
    /// The patched copy (Copy only), recorded before it is created.
    copy: Option<PathBuf>,
    owner_pid: u32,
    run_dir: PathBuf,
    original: FileStat,
    /// Every text oomguard wrote, or was about to write, to the file (InPlace) or the copy:
    /// recorded before the write, so a file holding one of them after a crash is known ours.
    written: Vec<String>,
    /// The user the file is touched as (a root oomguard acting for a job's `user`): the guard
    /// and a later run restore as them too. Absent in entries of earlier builds.
    #[serde(default)]
    acting: Option<ActingUser>,
    /// Whether the entry itself was written by a user (its file is not root's): then even its
    /// backup is read as that user, so an entry they edited cannot name a file of root's.
    #[serde(skip)]
    users_entry: bool,
}

/// Whom a root oomguard touches the user's file as ([`crate::guard::principal`]), kept in the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ActingUser {
    name: String,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    home: PathBuf,
}

impl ActingUser {
    /// The user this run acts for, if any.
    fn current() -> Option<ActingUser> {
        crate::guard::principal::acting_for().map(|who| ActingUser {
            name: who.name.clone(),
            uid: who.uid.as_raw(),
            gid: who.gid.as_raw(),
            groups: who.groups.iter().map(|g| g.as_raw()).collect(),
            home: who.home.clone(),
        })
    }

    /// The account of `uid`, for a journal entry that user could have written.
    fn of_uid(uid: u32) -> Option<ActingUser> {
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok()??;
        let name = std::ffi::CString::new(user.name.as_bytes()).ok()?;
        let groups = nix::unistd::getgrouplist(&name, user.gid).ok()?;
        Some(ActingUser {
            name: user.name,
            uid,
            gid: user.gid.as_raw(),
            groups: groups.iter().map(|g| g.as_raw()).collect(),
            home: user.dir,
        })
    }

    fn run_as(&self) -> crate::guard::principal::RunAs {
        use nix::unistd::{Gid, Uid};
        crate::guard::principal::RunAs {
            name: self.name.clone(),
            uid: Uid::from_raw(self.uid),
            gid: Gid::from_raw(self.gid),
            groups: self.groups.iter().map(|g| Gid::from_raw(*g)).collect(),
            home: self.home.clone(),
        }
    }
}

/// Runs `work` on the user's file as `who` (see [`crate::guard::principal`]); as oomguard itself
/// without one.
fn as_theirs<T>(who: Option<&ActingUser>, work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    crate::guard::principal::as_recorded(who.map(ActingUser::run_as).as_ref(), work)
}

const JOURNAL_VERSION: u32 = 1;

/// The files of one entry: `<key>.json` (journal), `<key>.orig` (backup), `<key>.lock`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EntryPaths {
    dir: PathBuf,
    json: PathBuf,
    backup: PathBuf,
    lock: PathBuf,
    json_tmp: PathBuf,
}

impl EntryPaths {
    fn new(dir: &Path, key: &str) -> EntryPaths {
        EntryPaths {
            dir: dir.to_path_buf(),
            json: dir.join(format!("{key}.json")),
            backup: dir.join(format!("{key}.orig")),
            lock: dir.join(format!("{key}.lock")),
            json_tmp: dir.join(format!("{key}.json.tmp")),
        }
    }

    /// The entry a journal path names (`.../<key>.json`).
    fn of_journal(journal: &Path) -> Option<EntryPaths> {
        let name = journal.file_name()?.to_str()?;
        let key = name.strip_suffix(".json")?;
        let dir = journal.parent()?;
        Some(EntryPaths::new(dir, key))
    }

    /// The files a finished entry leaves no trace of (the lock file last: see [`EntryLock`]).
    fn remove_all(&self) {
        for path in [&self.json_tmp, &self.backup, &self.json] {
            let _ = std::fs::remove_file(path);
        }
        let _ = sync_dir(&self.dir);
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// Where entries live below the state directory.
fn patches_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("patches")
}

/// The key of the entry that patches `canonical` in place: the same for every oomguard, so two
/// of them contend for one lock. A hash of the path, plus the file name for a human reading the
/// directory.
fn in_place_key(canonical: &Path) -> String {
    format!("inplace-{:016x}-{}", fnv1a(canonical), readable(canonical))
}

/// The key of a copy's entry: per process, and per claim within it (two patchers of one process
/// each get their own).
fn copy_key(pid: u32, absolute: &Path) -> String {
    static CLAIMS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "copy-{pid}-{n}-{:016x}-{}",
        fnv1a(absolute),
        readable(absolute)
    )
}

/// FNV-1a, 64 bits, over the path's bytes: stable across versions and machines, so every
/// oomguard finds the same entry for one file.
fn fnv1a(path: &Path) -> u64 {
    crate::guard::fsutil::Fnv64::of(path.as_os_str().as_bytes())
}

/// The file name with anything but letters, digits, `-` and `_` as `_`, at most 40 characters.
fn readable(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    crate::guard::fsutil::file_safe(&name, &['-', '_'])
}

/// What the lock file of a held entry says about its owner.
struct Owner {
    pid: u32,
    run_dir: PathBuf,
    /// In a file's own lock: the journal entry that undoes the owner's edit.
    journal: Option<PathBuf>,
}

impl Owner {
    /// A lock file's text: the PID, the run dir and (a file's own lock) the journal entry, a
    /// line each. PID 0 and an empty run dir where it names none yet.
    fn parse(text: &[u8]) -> Owner {
        let mut lines = text.split(|&b| b == b'\n');
        let pid = lines
            .next()
            .and_then(|l| std::str::from_utf8(l).ok())
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let run_dir = lines
            .next()
            .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)))
            .unwrap_or_default();
        let journal = lines
            .next()
            .filter(|l| !l.is_empty())
            .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)));
        Owner {
            pid,
            run_dir,
            journal,
        }
    }
}

/// An entry's lock: `flock(LOCK_EX)` on `<key>.lock`, held for as long as this value lives.
///
/// The lock file is removed by whoever finishes the entry, while holding the lock. Someone who
/// opened it just before may then lock the removed inode; so after locking, the path must still
/// name the inode locked, or the lock is worthless and taken again on a fresh file.
struct EntryLock {
    _lock: Flock<File>,
}

enum TryLock {
    Taken(EntryLock),
    Held(Owner),
}

impl EntryLock {
    fn try_take(lock_path: &Path) -> Result<TryLock, PatchError> {
        for _ in 0..16 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                // Never through a link, and never waiting on a FIFO put at its name.
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                .open(lock_path)
                .map_err(io_err("create the lock file", lock_path))?;
            // A lock file is a plain file with one name: anything else at its name (a hard link
            // to another file, which recording the owner would overwrite) was put there.
            let meta = file.metadata().map_err(io_err("stat", lock_path))?;
            if !meta.is_file() || meta.nlink() != 1 {
                return Err(PatchError::Io {
                    action: "use the lock file",
                    path: lock_path.to_path_buf(),
                    source: io::Error::other("it is not a plain file of its own; remove it"),
                });
            }
            let locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => locked,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    return Ok(TryLock::Held(read_owner(lock_path)));
                }
                Err((_, errno)) => {
                    return Err(PatchError::Io {
                        action: "lock",
                        path: lock_path.to_path_buf(),
                        source: errno.into(),
                    })
                }
            };
            let held = locked.metadata().map_err(io_err("stat", lock_path))?;
            match std::fs::metadata(lock_path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(TryLock::Taken(EntryLock { _lock: locked }))
                }
                _ => continue, // removed or replaced after we opened it: try the new one
            }
        }
        Err(PatchError::Io {
            action: "lock",
            path: lock_path.to_path_buf(),
            source: io::Error::other("the lock file keeps being replaced"),
        })
    }

    /// Records us as the owner, for the message another oomguard shows when it finds the entry
    /// busy.
    fn record_owner(&mut self, pid: u32, run_dir: &Path) {
        let file: &File = &self._lock;
        let _ = file.set_len(0);
        let mut line = format!("{pid}\n").into_bytes();
        line.extend_from_slice(run_dir.as_os_str().as_bytes());
        line.push(b'\n');
        let _ = std::os::unix::fs::FileExt::write_all_at(file, &line, 0);
    }
}

/// Whether the journal entry a lock names may be acted on by us. A lock's text is written by
/// whoever may write beside the config (the job's user too), so the path is trusted only where
/// no one else could have put anything: absolute and plain (no `.` or `..`), every directory on
/// it a real directory (no symlink) of root's or ours that no group or other may write, and the
/// entry a regular file of ours. Anything else is treated as no entry at all, silently: what the
/// path names is never looked at further, and nothing said differs with what exists there.
/// (A sticky directory of root's, such as /tmp, counts as safe: see below.)
fn trusted_journal(journal: &Path) -> bool {
    use std::path::Component;
    let me = nix::unistd::geteuid().as_raw();
    let plain = journal.is_absolute()
        && journal
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain {
        return false;
    }
    // A sticky directory of root's (/tmp) may be writable by all: no one else can rename or
    // remove the next step of the path, which is root's or ours.
    let safe_dir = |dir: &Path| {
        std::fs::symlink_metadata(dir).is_ok_and(|m| {
            let sticky_roots = m.uid() == 0 && m.mode() & 0o1000 != 0;
            m.file_type().is_dir()
                && (m.uid() == 0 || m.uid() == me)
                && (m.mode() & 0o022 == 0 || sticky_roots)
        })
    };
    let dirs_safe = journal.ancestors().skip(1).all(safe_dir);
    let parent_ours = journal
        .parent()
        .and_then(|dir| std::fs::symlink_metadata(dir).ok())
        .is_some_and(|m| m.uid() == me);
    dirs_safe
        && parent_ours
        && std::fs::symlink_metadata(journal)
            .is_ok_and(|m| m.uid() == me && m.file_type().is_file())
}

/// The owner a held lock file names, or PID 0 and an empty run dir if it names none yet.
fn read_owner(lock_path: &Path) -> Owner {
    // No symlink followed, a regular file only, a few lines at most.
    let text = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(lock_path)
        .and_then(|file| {
            if !file.metadata()?.is_file() {
                return Ok(Vec::new());
            }
            let mut text = Vec::new();
            io::Read::read_to_end(&mut io::Read::take(file, 8192), &mut text)?;
            Ok(text)
        })
        .unwrap_or_default();
    Owner::parse(&text)
}

/// [`Patcher::recover`] for the entries under one state directory.
fn recover_in(state_dir: &Path) -> Vec<String> {
    let dir = patches_dir(state_dir);
    let Ok(read) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = read
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|name| {
            [".json.tmp", ".json", ".orig", ".lock"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix).map(str::to_string))
        })
        .collect();
    keys.sort();
    keys.dedup();
    let mut lines = Vec::new();
    for key in keys {
        let entry = EntryPaths::new(&dir, &key);
        match restore_if_abandoned(&entry) {
            Ok(Restore::Done(Some(line))) => lines.push(line),
            Ok(Restore::Done(None) | Restore::Held) => {}
            Err(e) => lines.push(format!("cannot restore a file left patched: {e}")),
        }
    }
    lines
}

/// Before a knob file is read for its values: finishes the patch a dead oomguard left in it,
/// when the lock beside it names an entry of this user's, whatever its state directory (the
/// system unit's and a shell's differ), and says so (a warning). Anything that stops it (a live
/// run, an entry that cannot be used) is left for [`Patcher::open`] to refuse with.
pub fn finish_left_beside(file: &Path) {
    let who = ActingUser::current();
    let pid = std::process::id();
    if let Ok(Ok(Some(lock))) =
        FileLock::take_for(file, who.as_ref(), false, pid, Path::new(""), None)
    {
        lock.release();
    }
}

/// What to do with a file whose entry is being finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// It holds the original (or was never touched).
    Nothing,
    /// It holds a text oomguard wrote: the original goes back.
    Restore,
    /// Someone else wrote it: theirs stays, the original goes beside it.
    KeepTheirs,
    /// It is gone: it stays gone, the original goes beside it.
    Deleted,
}

/// The one restore rule: compare the file's bytes (None: it does not exist) with the original
/// and with every text oomguard wrote.
fn decide(current: Option<&[u8]>, original: &[u8], written: &[String]) -> Decision {
    match current {
        None => Decision::Deleted,
        Some(bytes) if bytes == original => Decision::Nothing,
        Some(bytes) if written.iter().any(|w| w.as_bytes() == bytes) => Decision::Restore,
        Some(_) => Decision::KeepTheirs,
    }
}

/// What finishing one entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finished {
    /// Nothing was left to undo.
    Nothing,
    /// The original is back in place.
    Restored,
    /// Someone else's edit stays; the original is at `beside`.
    KeptTheirs { beside: PathBuf },
    /// The file was deleted and stays so; the original is at `beside`.
    Deleted { beside: PathBuf },
    /// The patched copy was removed.
    CopyRemoved { copy: PathBuf },
    /// The copy holds text oomguard did not write (the job changed it): kept.
    CopyKept { copy: PathBuf },
}

/// The line for a finished entry. `recovered`: found after its owner died (guard or next start),
/// so even a plain restore is news; otherwise (the run's own end) only surprises are.
fn describe(done: &Finished, journal: &Journal, recovered: bool) -> Option<String> {
    let path = journal.path.display();
    let by = format!(
        "oomguard {} (run dir {})",
        journal.owner_pid,
        journal.run_dir.display()
    );
    let during = if recovered {
        format!("while patched by {by}")
    } else {
        "during the run".to_string()
    };
    match done {
        Finished::Nothing => None,
        Finished::Restored if recovered => Some(format!("restored {path}, left patched by {by}")),
        Finished::Restored => None,
        Finished::KeptTheirs { beside } => Some(format!(
            "{path} was changed by someone else {during}: kept their version; the original is in {}",
            beside.display()
        )),
        Finished::Deleted { beside } => Some(format!(
            "{path} was deleted {during}: left deleted; the original is in {}",
            beside.display()
        )),
        Finished::CopyRemoved { copy } if recovered => Some(format!(
            "removed {}, a patched copy of {path} left by {by}",
            copy.display()
        )),
        Finished::CopyRemoved { .. } => None,
        Finished::CopyKept { copy } => Some(format!(
            "kept {}, a patched copy of {path}: it was changed after oomguard wrote it",
            copy.display()
        )),
    }
}

/// One file claimed by a [`Patcher`].
struct Claimed {
    /// As the caller gave it (a copy's path is returned in the same shape).
    given: PathBuf,
    /// The file written: absolute; for InPlace, symlinks resolved (a rename over a symlink would
    /// replace the link, not the file).
    target: PathBuf,
    mode: Mode,
    original: String,
    stat: FileStat,
    entry: EntryPaths,
    lock: Option<EntryLock>,
    /// The file's own lock (InPlace only), whatever the state directory.
    file_lock: Option<FileLock>,
    /// Saved to disk once the first edit is on its way.
    journal: Option<Journal>,
    /// The copy, once created (Copy only), as returned to the caller.
    copy_given: Option<PathBuf>,
    finished: bool,
    /// Whom the file is touched as.
    who: Option<ActingUser>,
}

/// The config files of one run, claimed at [`Patcher::open`], written by [`Patcher::write`],
/// given back by [`Patcher::finish`] (or `Drop`).
pub struct Patcher {
    run_dir: PathBuf,
    pid: u32,
    files: Vec<Claimed>,
    /// Whether the entries are kept as the job's user (see [`Patcher::open_as`]).
    journal_as_user: bool,
}

impl Patcher {
    /// Before anything else at every `oomguard run` start: restores files (and removes copies)
    /// left by oomguards that died (SIGKILL of oomguard *and* its guard). Returns one line per
    /// thing done (a restore, a copy removed, someone else's edit kept, an entry that could not
    /// be used). Entries whose owner is alive are left alone. Those of another state directory
    /// are its own oomguards' to finish, or the next one's to claim the file (its lock names the
    /// entry).
    pub fn recover(state_dir: &Path) -> Vec<String> {
        recover_in(state_dir)
    }

    /// Claims `files` for this run: reads each original (must be UTF-8), and for InPlace files
    /// takes the lock. Another live oomguard patching one of them in place →
    /// [`PatchError::Busy`]. Writes nothing to the files or beside them yet.
    pub fn open(
        state_dir: &Path,
        run_dir: &Path,
        files: Vec<(PathBuf, Mode)>,
    ) -> Result<Patcher, PatchError> {
        Patcher::open_as(state_dir, run_dir, files, false)
    }

    /// [`Patcher::open`], its entries under `state_dir` kept as the job's user when
    /// `journal_as_user` (a state directory that is theirs: see [`crate::guard::principal`]), so root
    /// never writes where the user could point a link.
    pub fn open_as(
        state_dir: &Path,
        run_dir: &Path,
        files: Vec<(PathBuf, Mode)>,
        journal_as_user: bool,
    ) -> Result<Patcher, PatchError> {
        let mut patcher = crate::guard::principal::as_user_if_or(
            journal_as_user,
            || Patcher::open_here(state_dir, run_dir, files),
            |source| PatchError::Io {
                action: "act as the job's user for",
                path: state_dir.to_path_buf(),
                source,
            },
        )?;
        patcher.journal_as_user = journal_as_user;
        Ok(patcher)
    }

    fn open_here(
        state_dir: &Path,
        run_dir: &Path,
        files: Vec<(PathBuf, Mode)>,
    ) -> Result<Patcher, PatchError> {
        let dir = patches_dir(state_dir);
        let mut patcher = Patcher {
            run_dir: run_dir.to_path_buf(),
            pid: std::process::id(),
            files: Vec::new(),
            journal_as_user: false,
        };
        if files.is_empty() {
            return Ok(patcher);
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err("create", &dir))?;
        // Before any lock is taken: our own lock on the first would read as someone else's.
        let mut seen = Vec::new();
        let who = ActingUser::current();
        for (given, _) in &files {
            let canonical = as_theirs(who.as_ref(), || std::fs::canonicalize(given))
                .map_err(io_err("read", given))?;
            if seen.contains(&canonical) {
                return Err(PatchError::Duplicate {
                    path: given.clone(),
                });
            }
            seen.push(canonical);
        }
        for (given, mode) in files {
            let claimed = patcher.claim(&dir, given, mode)?;
            patcher.files.push(claimed);
        }
        Ok(patcher)
    }

    fn claim(&self, dir: &Path, given: PathBuf, mode: Mode) -> Result<Claimed, PatchError> {
        let who = ActingUser::current();
        let absolute = std::path::absolute(&given).map_err(io_err("find", &given))?;
        let canonical = as_theirs(who.as_ref(), || std::fs::canonicalize(&given))
            .map_err(io_err("read", &given))?;
        if absolute.to_str().is_none() || canonical.to_str().is_none() {
            return Err(PatchError::PathNotUtf8 { path: given });
        }
        // Whoever patches the file in place holds this entry's lock: for a copy we only look,
        // since what we would read as the original is their patched text.
        let in_place = EntryPaths::new(dir, &in_place_key(&canonical));
        // First the file's own lock, which every oomguard takes whatever its state directory. A
        // copy only looks at it (a lock there is held, or names a dead patcher's entry to
        // finish): it leaves no lock file behind in the user's directory.
        let journal = std::path::absolute(&in_place.json).map_err(io_err("find", dir))?;
        let in_place_mode = mode == Mode::InPlace;
        let journal = in_place_mode.then_some(journal.as_path());
        let file_lock = match FileLock::take_for(
            &canonical,
            who.as_ref(),
            in_place_mode,
            self.pid,
            &self.run_dir,
            journal,
        )? {
            Ok(lock) => lock,
            Err(owner) => {
                return Err(PatchError::Busy {
                    path: given,
                    pid: owner.pid,
                    run_dir: owner.run_dir,
                })
            }
        };
        let lock = match EntryLock::try_take(&in_place.lock)? {
            TryLock::Held(owner) => {
                return Err(PatchError::Busy {
                    path: given,
                    pid: owner.pid,
                    run_dir: owner.run_dir,
                })
            }
            TryLock::Taken(lock) => {
                // An entry left by a dead owner that no recover saw: undo it before reading.
                if in_place.json.exists() {
                    if let Some(line) = finish_entry(&in_place, true)? {
                        tracing::warn!("{line}");
                    }
                }
                lock
            }
        };
        let (target, entry, lock) = match mode {
            Mode::InPlace => (canonical, in_place, Some(lock)),
            Mode::Copy => {
                in_place.remove_all();
                drop(lock);
                let entry = EntryPaths::new(dir, &copy_key(self.pid, &absolute));
                let lock = match EntryLock::try_take(&entry.lock)? {
                    TryLock::Taken(lock) => lock,
                    TryLock::Held(owner) => {
                        // Our own PID's key, held: only this very process can hold it.
                        return Err(PatchError::Busy {
                            path: given,
                            pid: owner.pid,
                            run_dir: owner.run_dir,
                        });
                    }
                };
                if entry.json.exists() {
                    // A dead process with our PID left it.
                    if let Some(line) = finish_entry(&entry, true)? {
                        tracing::warn!("{line}");
                    }
                }
                (absolute, entry, Some(lock))
            }
        };
        let mut lock = lock.expect("both modes hold their entry's lock");
        lock.record_owner(self.pid, &self.run_dir);
        let read = || {
            // The times before our read touches the access time.
            let (meta, bytes) = as_theirs(who.as_ref(), || {
                let meta = std::fs::metadata(&target)?;
                let bytes = crate::guard::fsutil::read_regular_capped(
                    &target,
                    crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
                )?;
                Ok((meta, bytes))
            })
            .map_err(io_err("read", &given))?;
            let text = String::from_utf8(bytes).map_err(|_| PatchError::NotUtf8 {
                path: given.clone(),
            })?;
            Ok((meta, text))
        };
        let (meta, original) = match read() {
            Ok(read) => read,
            Err(e) => {
                // Nothing was written for this entry: no trace of it stays (the file's lock goes
                // as it is dropped).
                let _ = std::fs::remove_file(&entry.lock);
                return Err(e);
            }
        };
        // A copy leaves the user's file alone: only an in-place edit keeps the file's lock.
        let file_lock = match mode {
            Mode::InPlace => file_lock,
            Mode::Copy => {
                if let Some(lock) = file_lock {
                    lock.release();
                }
                None
            }
        };
        Ok(Claimed {
            file_lock,
            given,
            target,
            mode,
            original,
            stat: FileStat::of(&meta),
            entry,
            lock: Some(lock),
            journal: None,
            copy_given: None,
            finished: false,
            who,
        })
    }

    /// The original text of file `i` (as read at `open`).
    pub fn original(&self, i: usize) -> &str {
        &self.files[i].original
    }

    /// Makes file `i` hold `text` for the next attempt. `text == original` means "as the user
    /// has it": InPlace → the original is restored (if we had patched it); Copy → `Ok(None)`, the
    /// command keeps the user's path. Otherwise Copy → writes the copy, returns its path (in the
    /// shape the file was given: relative stays relative); InPlace → durable backup and journal
    /// first, then the edit; `Ok(None)`. A file someone else changed since → `EditedMeanwhile`,
    /// and it is left as they have it. Every write of a `.py` file removes its stale
    /// `__pycache__` files after it.
    pub fn write(&mut self, i: usize, text: &str) -> Result<Option<PathBuf>, PatchError> {
        let as_user = self.journal_as_user;
        let run_dir = self.run_dir.clone();
        crate::guard::principal::as_user_if_or(
            as_user,
            || self.write_here(i, text),
            |source| PatchError::Io {
                action: "act as the job's user for",
                path: run_dir,
                source,
            },
        )
    }

    fn write_here(&mut self, i: usize, text: &str) -> Result<Option<PathBuf>, PatchError> {
        let pid = self.pid;
        let run_dir = self.run_dir.clone();
        let file = &mut self.files[i];
        assert!(
            !file.finished,
            "write after finish: the file is the user's again"
        );
        match file.mode {
            Mode::InPlace => file.write_in_place(text, pid, &run_dir).map(|()| None),
            Mode::Copy if text == file.original => Ok(None),
            Mode::Copy => file.write_copy(text, pid, &run_dir).map(Some),
        }
    }

    /// The journal entries a guard must act on if oomguard dies now: one per claimed file, known
    /// from `open` on (an entry not yet written is nothing to act on, and is skipped).
    pub fn journal_paths(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|f| !f.finished)
            .map(|f| f.entry.json.clone())
            .collect()
    }

    /// Restores every in-place file, removes every copy, backup and journal entry, and lets go
    /// of the locks. Returns warning lines (someone else's edit kept, original left beside it as
    /// `<file>.oomguard-original`). Idempotent. `Drop` calls it too (the panic path).
    pub fn finish(&mut self) -> Vec<String> {
        let as_user = self.journal_as_user;
        let mut lines = Vec::new();
        let switched = crate::guard::principal::as_user_if(as_user, || {
            lines = self.finish_here();
            Ok(())
        });
        if let Err(e) = switched {
            lines.push(format!(
                "cannot act as the job's user to restore its files: {e}"
            ));
        }
        lines
    }

    fn finish_here(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for file in &mut self.files {
            if file.finished {
                continue;
            }
            if file.journal.is_some() {
                match finish_entry(&file.entry, false) {
                    Ok(line) => lines.extend(line),
                    Err(e) => {
                        // The entry stays on disk with its lock released: the next start retries.
                        lines.push(format!("cannot restore {}: {e}", file.given.display()));
                        file.lock = None;
                        // Kept: it names the entry, for whoever patches the file next.
                        if let Some(lock) = file.file_lock.take() {
                            lock.keep();
                        }
                        file.finished = true;
                        continue;
                    }
                }
            } else {
                file.entry.remove_all();
            }
            if let Some(file_lock) = file.file_lock.take() {
                file_lock.release();
            }
            file.lock = None;
            file.finished = true;
        }
        lines
    }

    /// For tests: lets go of every lock and leaves every file and entry as it is, as a SIGKILL
    /// of oomguard would.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        for file in &mut self.files {
            file.lock = None;
            if let Some(lock) = file.file_lock.take() {
                lock.keep();
            }
            file.finished = true;
        }
    }
}

impl Drop for Patcher {
    fn drop(&mut self) {
        for line in self.finish() {
            tracing::warn!("{line}");
        }
    }
}

impl Claimed {
    fn write_in_place(&mut self, text: &str, pid: u32, run_dir: &Path) -> Result<(), PatchError> {
        let Some(journal) = &self.journal else {
            if text == self.original {
                return Ok(()); // never patched: it already is as the user has it
            }
            self.check_ours()?;
            // Backup, then journal, each fsynced with the directory, before the file is touched.
            write_synced(&self.entry.backup, self.original.as_bytes())?;
            let journal = Journal {
                version: JOURNAL_VERSION,
                mode: Mode::InPlace,
                path: self.target.clone(),
                backup: Some(self.entry.backup.clone()),
                copy: None,
                owner_pid: pid,
                run_dir: run_dir.to_path_buf(),
                original: self.stat,
                written: vec![text.to_string()],
                acting: self.who.clone(),
                users_entry: false,
            };
            save_journal(&self.entry, &journal)?;
            self.journal = Some(journal);
            return self.put(text.as_bytes(), false, pid);
        };
        let current = self.check_ours()?;
        if current.as_deref() == Some(text.as_bytes()) {
            return Ok(());
        }
        if text == self.original {
            return self.put(self.original.as_bytes(), true, pid);
        }
        if !journal.written.iter().any(|w| w == text) {
            let mut journal = journal.clone();
            journal.written.push(text.to_string());
            save_journal(&self.entry, &journal)?;
            self.journal = Some(journal);
        }
        self.put(text.as_bytes(), false, pid)
    }

    /// The file's bytes now, refused if someone other than us changed it since `open`.
    fn check_ours(&self) -> Result<Option<Vec<u8>>, PatchError> {
        let current = read_if_exists(self.who.as_ref(), &self.target)?;
        let written = self.journal.as_ref().map_or(&[][..], |j| &j.written[..]);
        match decide(current.as_deref(), self.original.as_bytes(), written) {
            Decision::Nothing | Decision::Restore => Ok(current),
            Decision::KeepTheirs | Decision::Deleted => Err(PatchError::EditedMeanwhile {
                path: self.given.clone(),
            }),
        }
    }

    /// Writes `bytes` over the user's file (with the original's times when restoring).
    fn put(&self, bytes: &[u8], original_times: bool, pid: u32) -> Result<(), PatchError> {
        let times = original_times.then_some(&self.stat);
        as_theirs(self.who.as_ref(), || {
            replace_file(&self.target, bytes, &self.stat, times, pid)?;
            remove_stale_pyc(&self.target);
            Ok(())
        })
        .map_err(io_err("write", &self.given))
    }

    fn write_copy(&mut self, text: &str, pid: u32, run_dir: &Path) -> Result<PathBuf, PatchError> {
        let mut journal = self.journal.clone().unwrap_or_else(|| Journal {
            version: JOURNAL_VERSION,
            mode: Mode::Copy,
            path: self.target.clone(),
            backup: None,
            copy: None,
            owner_pid: pid,
            run_dir: run_dir.to_path_buf(),
            original: self.stat,
            written: Vec::new(),
            acting: self.who.clone(),
            users_entry: false,
        });
        if !journal.written.iter().any(|w| w == text) {
            journal.written.push(text.to_string());
        }
        if let Some(copy_given) = &self.copy_given {
            if self.journal.as_ref() != Some(&journal) {
                save_journal(&self.entry, &journal)?;
                self.journal = Some(journal);
            }
            let copy = self
                .journal
                .as_ref()
                .and_then(|j| j.copy.clone())
                .expect("a created copy is in the journal");
            as_theirs(self.who.as_ref(), || {
                replace_file(&copy, text.as_bytes(), &self.stat, None, pid)?;
                remove_stale_pyc(&copy);
                Ok(())
            })
            .map_err(io_err("write", copy_given))?;
            return Ok(copy_given.clone());
        }
        // First write: find a free name. Each candidate is journaled before it is created, so a
        // crash leaves nothing unknown; one that exists is someone else's and is never touched
        // (the restore removes a copy only if it holds a text we wrote).
        for n in 1u32..1000 {
            let name = copy_name(&self.target, pid, n);
            let copy = self.target.with_file_name(&name);
            journal.copy = Some(copy.clone());
            save_journal(&self.entry, &journal)?;
            self.journal = Some(journal.clone());
            let created = as_theirs(self.who.as_ref(), || {
                // The copy is read by the same people as the original: its ACL goes with it.
                let attrs = xattrs_at(&self.target)?;
                create_file(&copy, text.as_bytes(), &self.stat, &attrs, pid)?;
                remove_stale_pyc(&copy);
                Ok(())
            });
            match created {
                Ok(()) => {
                    let copy_given = self.given.with_file_name(&name);
                    self.copy_given = Some(copy_given.clone());
                    return Ok(copy_given);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err("create", &copy)(e)),
            }
        }
        Err(PatchError::Io {
            action: "create a copy of",
            path: self.given.clone(),
            source: io::Error::other("every candidate name is taken"),
        })
    }
}

/// `<stem>.oomguard-<pid>.<ext>` (the extension kept: loaders dispatch on it), with `-<n>` after
/// the PID for n > 1.
fn copy_name(target: &Path, pid: u32, n: u32) -> OsString {
    let tag = if n > 1 {
        format!("{pid}-{n}")
    } else {
        pid.to_string()
    };
    super::patch_copy_name(target, &tag)
}

/// Acts on the entry at `journal` as recover and finish would, if its owner is gone (its lock
/// can be taken); used by the guard after oomguard died. `Ok(None)`: nothing to report (the
/// owner is alive, the entry is gone or nothing needed undoing).
///
/// `wait`: how long a lock still held may take to be let go. The guard waits: it learns of
/// oomguard's death from EOF on a pipe, which the kernel may close before the lock file's
/// descriptor in the same exit; a try alone would then take the owner for alive.
pub fn restore_entry(journal: &Path, wait: Duration) -> Result<Option<String>, PatchError> {
    let entry = EntryPaths::of_journal(journal).ok_or_else(|| PatchError::Journal {
        path: journal.to_path_buf(),
        detail: "not a journal entry's path (…/patches/<key>.json)".to_string(),
    })?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        match restore_if_abandoned(&entry)? {
            Restore::Held if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Restore::Held => return Ok(None),
            Restore::Done(line) => return Ok(line),
        }
    }
}

/// What [`restore_if_abandoned`] found.
enum Restore {
    /// The owner still holds the lock.
    Held,
    /// Acted on (the line to tell), or nothing to do.
    Done(Option<String>),
}

/// Takes the entry's lock and finishes it as recovered; `Ok(None)` if its owner still holds the
/// lock or there is nothing to do.
fn restore_if_abandoned(entry: &EntryPaths) -> Result<Restore, PatchError> {
    if !entry.lock.exists() && !entry.json.exists() {
        // Nothing there: do not create a lock file only to remove it again.
        if entry.backup.exists() || entry.json_tmp.exists() {
            entry.remove_all();
        }
        return Ok(Restore::Done(None));
    }
    let _lock = match EntryLock::try_take(&entry.lock)? {
        TryLock::Held(_) => return Ok(Restore::Held),
        TryLock::Taken(lock) => lock,
    };
    if !entry.json.exists() {
        // A backup written before its journal, or a lock file alone: the file was not touched.
        entry.remove_all();
        return Ok(Restore::Done(None));
    }
    finish_entry(entry, true).map(Restore::Done)
}

/// Applies the restore rule to the entry (whose lock the caller holds) and removes it.
/// `recovered`: its owner died (the line then says so).
fn finish_entry(entry: &EntryPaths, recovered: bool) -> Result<Option<String>, PatchError> {
    let journal = load_journal(&entry.json)?;
    let done = match journal.mode {
        Mode::InPlace => finish_in_place(&journal)?,
        Mode::Copy => finish_copy(&journal)?,
    };
    if recovered && journal.mode == Mode::InPlace {
        // The dead owner's lock beside the file names this entry: nothing left to point at.
        if let Ok(json) = std::path::absolute(&entry.json) {
            FileLock::clear_left(&journal.path, &json, journal.acting.as_ref());
        }
    }
    entry.remove_all();
    Ok(describe(&done, &journal, recovered))
}

fn finish_in_place(journal: &Journal) -> Result<Finished, PatchError> {
    let backup = journal
        .backup
        .as_deref()
        .ok_or_else(|| PatchError::Journal {
            path: journal.path.clone(),
            detail: "an in-place entry without a backup".to_string(),
        })?;
    let backup_reader = journal.acting.as_ref().filter(|_| journal.users_entry);
    let original = as_theirs(backup_reader, || {
        crate::guard::fsutil::read_regular_capped(
            backup,
            crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
        )
    })
    .map_err(io_err("read the backup", backup))?;
    let path = &journal.path;
    let who = journal.acting.as_ref();
    let current = read_if_exists(who, path)?;
    let done = match decide(current.as_deref(), &original, &journal.written) {
        Decision::Nothing => Finished::Nothing,
        Decision::Restore => {
            as_theirs(who, || {
                replace_file(
                    path,
                    &original,
                    &journal.original,
                    Some(&journal.original),
                    journal.owner_pid,
                )?;
                remove_stale_pyc(path);
                Ok(())
            })
            .map_err(io_err("restore", path))?;
            Finished::Restored
        }
        Decision::KeepTheirs => Finished::KeptTheirs {
            beside: keep_beside(who, path, &original, &journal.original)?,
        },
        Decision::Deleted => Finished::Deleted {
            beside: keep_beside(who, path, &original, &journal.original)?,
        },
    };
    let _ = as_theirs(who, || {
        std::fs::remove_file(temp_path(path, journal.owner_pid))
    });
    Ok(done)
}

fn finish_copy(journal: &Journal) -> Result<Finished, PatchError> {
    let Some(copy) = &journal.copy else {
        return Ok(Finished::Nothing);
    };
    let who = journal.acting.as_ref();
    let _ = as_theirs(who, || {
        std::fs::remove_file(temp_path(copy, journal.owner_pid))
    });
    let Some(bytes) = read_if_exists(who, copy)? else {
        return Ok(Finished::Nothing); // never created (or already removed)
    };
    if !journal.written.iter().any(|w| w.as_bytes() == bytes) {
        return Ok(Finished::CopyKept { copy: copy.clone() });
    }
    as_theirs(who, || {
        std::fs::remove_file(copy)?;
        remove_stale_pyc(copy);
        Ok(())
    })
    .map_err(io_err("remove", copy))?;
    Ok(Finished::CopyRemoved { copy: copy.clone() })
}

/// Writes the original beside `path` as `<file>.oomguard-original` (then `.1`, `.2`, ...: an
/// existing file is never overwritten). Returns where it went.
fn keep_beside(
    who: Option<&ActingUser>,
    path: &Path,
    original: &[u8],
    stat: &FileStat,
) -> Result<PathBuf, PatchError> {
    for n in 0u32..1000 {
        let mut name = OsString::from(path.file_name().unwrap_or_default());
        name.push(".oomguard-original");
        if n > 0 {
            name.push(format!(".{n}"));
        }
        let beside = path.with_file_name(name);
        match as_theirs(who, || {
            let attrs = xattrs_at(path)?;
            create_file(&beside, original, stat, &attrs, std::process::id())
        }) {
            Ok(()) => return Ok(beside),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("write the original beside", path)(e)),
        }
    }
    Err(PatchError::Io {
        action: "write the original beside",
        path: path.to_path_buf(),
        source: io::Error::other("every candidate name is taken"),
    })
}

fn load_journal(path: &Path) -> Result<Journal, PatchError> {
    // Owner and bytes from the one descriptor; a FIFO or a device there is no entry.
    let file =
        crate::guard::fsutil::open_regular(path).map_err(io_err("read the journal entry", path))?;
    let owner = file
        .metadata()
        .map_err(io_err("read the journal entry", path))?
        .uid();
    let text = crate::guard::fsutil::read_capped(file, crate::guard::fsutil::SMALL_FILE_MAX_BYTES)
        .map_err(io_err("read the journal entry", path))?;
    let mut journal: Journal = serde_json::from_slice(&text).map_err(|e| PatchError::Journal {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    if journal.version != JOURNAL_VERSION {
        return Err(PatchError::Journal {
            path: path.to_path_buf(),
            detail: format!(
                "written by another oomguard version (format {})",
                journal.version
            ),
        });
    }
    if owner != 0 {
        // An entry a user could have written speaks only for that user: whatever it says, its
        // files are touched as them, so it cannot make root write where they could not.
        journal.acting = ActingUser::of_uid(owner);
        journal.users_entry = true;
        if journal.acting.is_none() && nix::unistd::Uid::effective().is_root() {
            return Err(PatchError::Journal {
                path: path.to_path_buf(),
                detail: format!("owned by uid {owner}, which has no account"),
            });
        }
    }
    Ok(journal)
}

/// Saves the journal durably: temp file, fsync, rename, fsync of the directory.
fn save_journal(entry: &EntryPaths, journal: &Journal) -> Result<(), PatchError> {
    let text = serde_json::to_vec_pretty(journal).map_err(|e| PatchError::Journal {
        path: entry.json.clone(),
        detail: e.to_string(),
    })?;
    write_synced(&entry.json_tmp, &text)?;
    std::fs::rename(&entry.json_tmp, &entry.json)
        .map_err(io_err("write the journal entry", &entry.json))?;
    sync_dir(&entry.dir).map_err(io_err("sync", &entry.dir))
}

/// Creates or truncates `path` (mode 0600: it may hold the user's config), writes, fsyncs it and
/// its directory.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), PatchError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err("create", path))?;
    file.write_all(bytes).map_err(io_err("write", path))?;
    file.sync_all().map_err(io_err("sync", path))?;
    let dir = path.parent().expect("an entry path has a directory");
    sync_dir(dir).map_err(io_err("sync", dir))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The file's bytes, or None if it does not exist.
fn read_if_exists(who: Option<&ActingUser>, path: &Path) -> Result<Option<Vec<u8>>, PatchError> {
    match as_theirs(who, || {
        crate::guard::fsutil::read_regular_capped(path, crate::guard::fsutil::SMALL_FILE_MAX_BYTES)
    }) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", path)(e)),
    }
}

/// The temp file oomguard `pid` writes before renaming it over `target`:
/// `.<name>.oomguard-<pid>.tmp`, in the same directory (a rename does not cross file systems).
fn temp_path(target: &Path, pid: u32) -> PathBuf {
    let mut name = OsString::from(".");
    name.push(target.file_name().unwrap_or_default());
    name.push(format!(".oomguard-{pid}.tmp"));
    target.with_file_name(name)
}

/// Writes `bytes` into a new temp file beside `target` with `stat`'s permissions (and owner when
/// root), `attrs` and, if given, `times`; fsyncs it. Returns its path.
fn write_temp(
    target: &Path,
    bytes: &[u8],
    stat: &FileStat,
    times: Option<&FileStat>,
    attrs: &Xattrs,
    pid: u32,
) -> io::Result<PathBuf> {
    let mut temp = temp_path(target, pid);
    let open = |temp: &Path| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .mode(0o600)
            .open(temp)
    };
    let mut file = match open(&temp) {
        // Our PID's name: left by us, or by a dead process that had our PID.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match std::fs::remove_file(&temp) {
            Ok(()) => open(&temp)?,
            // Someone else's file at our name in a sticky directory (only they may remove
            // it): a name of our own beside it, so a name squatted there refuses no run.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                let (made, file) = open_unused_beside(&temp, open)?;
                temp = made;
                file
            }
            Err(e) => return Err(e),
        },
        other => other?,
    };
    let written = (|| {
        file.write_all(bytes)?;
        let made = file.metadata()?;
        if (made.uid(), made.gid()) != (stat.uid, stat.gid) {
            // Before the mode: chown clears set-user-ID bits. Only root may give a file away;
            // anyone else gets EPERM and the file becomes theirs, as any editor's save would.
            match std::os::unix::fs::fchown(&file, Some(stat.uid), Some(stat.gid)) {
                Err(e) if e.raw_os_error() == Some(nix::libc::EPERM) => {}
                other => other?,
            }
        }
        file.set_permissions(std::fs::Permissions::from_mode(stat.mode))?;
        // After the mode: an ACL sets the group bits from its mask, as the original had them.
        attrs.put_on(&file)?;
        if let Some(times) = times {
            file.set_times(times.times())?;
        }
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(temp)
}

/// `<temp>.<random>` that `open` can create: a temp file's name when its own was taken by
/// someone we cannot remove. Random (std's `RandomState` is seeded by the kernel's randomness),
/// so a squatter cannot take every name in advance.
fn open_unused_beside(
    temp: &Path,
    open: impl Fn(&Path) -> io::Result<File>,
) -> io::Result<(PathBuf, File)> {
    use std::hash::{BuildHasher, Hasher};
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..16 {
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let mut name = temp.as_os_str().to_owned();
        name.push(format!(".{random:016x}"));
        let candidate = PathBuf::from(name);
        match open(&candidate) {
            Ok(file) => return Ok((candidate, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Replaces `target` atomically with `bytes` (temp file, fsync, rename, fsync of the directory),
/// the new inode carrying the old one's extended attributes (its ACL among them). A file with
/// more than one name is written in its own inode instead ([`overwrite`]).
fn replace_file(
    target: &Path,
    bytes: &[u8],
    stat: &FileStat,
    times: Option<&FileStat>,
    pid: u32,
) -> io::Result<()> {
    let current = match crate::guard::fsutil::open_regular(target) {
        Ok(file) => Some(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(file) = &current {
        if file.metadata()?.nlink() > 1 {
            return overwrite(target, bytes, times);
        }
    }
    let attrs = match &current {
        Some(file) => Xattrs::of(file)?,
        None => Xattrs::default(),
    };
    let temp = write_temp(target, bytes, stat, times, &attrs, pid)?;
    if let Err(e) = std::fs::rename(&temp, target) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    sync_dir(
        target
            .parent()
            .expect("an absolute file path has a directory"),
    )
}

/// Writes `bytes` over the inode of `target`, a file with other names (hard links) that a rename
/// would leave on the old text: from the start, then cut to length and fsynced; owner, mode,
/// ACL and attributes are the inode's own and stay. Not atomic: should oomguard die halfway,
/// the journal's backup still has the original, and the restore rule keeps the torn text as
/// someone else's with the original beside it.
fn overwrite(target: &Path, bytes: &[u8], times: Option<&FileStat>) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(target)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("it is no longer a regular file"));
    }
    std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0)?;
    file.set_len(bytes.len() as u64)?;
    if let Some(times) = times {
        file.set_times(times.times())?;
    }
    file.sync_all()
}

/// The extended attributes of the file at `path`; none when it is gone.
fn xattrs_at(path: &Path) -> io::Result<Xattrs> {
    match crate::guard::fsutil::open_regular(path) {
        Ok(file) => Xattrs::of(&file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Xattrs::default()),
        Err(e) => Err(e),
    }
}

/// Creates `target` with `bytes` and `attrs`, complete or not at all, failing with
/// `AlreadyExists` rather than replacing a file there (a hard link of the temp file cannot
/// overwrite).
fn create_file(
    target: &Path,
    bytes: &[u8],
    stat: &FileStat,
    attrs: &Xattrs,
    pid: u32,
) -> io::Result<()> {
    let temp = write_temp(target, bytes, stat, None, attrs, pid)?;
    let linked = std::fs::hard_link(&temp, target);
    let _ = std::fs::remove_file(&temp);
    linked?;
    sync_dir(
        target
            .parent()
            .expect("an absolute file path has a directory"),
    )
}

/// Removes the `__pycache__` files of a `.py` file just written, so Python cannot reuse a cache
/// built from the text before (see [`py::stale_pyc_paths`]).
fn remove_stale_pyc(path: &Path) {
    if Format::from_path(path) == Some(Format::Python) {
        for pyc in py::stale_pyc_paths(path) {
            let _ = std::fs::remove_file(pyc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str =
        "# the user's config\ntraining:\n  batch_size: 64   # per GPU\n  pin_memory: true\n";
    const PATCHED: &str =
        "# the user's config\ntraining:\n  batch_size: 32   # per GPU\n  pin_memory: true\n";
    const PATCHED_AGAIN: &str =
        "# the user's config\ntraining:\n  batch_size: 16   # per GPU\n  pin_memory: true\n";

    struct Scene {
        _tmp: tempfile::TempDir,
        state: PathBuf,
        run: PathBuf,
        configs: PathBuf,
    }

    impl Scene {
        fn new() -> Scene {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().to_path_buf();
            let configs = root.join("configs");
            std::fs::create_dir(&configs).unwrap();
            Scene {
                state: root.join("state"),
                run: root.join("run"),
                configs,
                _tmp: tmp,
            }
        }

        /// A config file with `text`, mode 0640 and an mtime in the past (so a rewrite shows).
        fn file(&self, name: &str, text: &str) -> PathBuf {
            let path = self.configs.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
            let old = UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_times(
                    std::fs::FileTimes::new()
                        .set_modified(old)
                        .set_accessed(old),
                )
                .unwrap();
            path
        }

        fn open(&self, files: &[(&Path, Mode)]) -> Result<Patcher, PatchError> {
            Patcher::open(
                &self.state,
                &self.run,
                files.iter().map(|(p, m)| (p.to_path_buf(), *m)).collect(),
            )
        }

        /// Every file left in the state's patches directory.
        fn entries(&self) -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(patches_dir(&self.state))
                .map(|r| {
                    r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        }

        /// Every file in configs/ (recursively), by name relative to it.
        fn config_files(&self) -> Vec<String> {
            fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
                for e in std::fs::read_dir(dir).unwrap() {
                    let p = e.unwrap().path();
                    if p.is_dir() {
                        walk(&p, base, out);
                    } else {
                        out.push(p.strip_prefix(base).unwrap().display().to_string());
                    }
                }
            }
            let mut out = Vec::new();
            walk(&self.configs, &self.configs, &mut out);
            out.sort();
            out
        }
    }

    fn mtime(path: &Path) -> (i64, i64) {
        let m = std::fs::metadata(path).unwrap();
        (m.mtime(), m.mtime_nsec())
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn the_rule_compares_exact_bytes() {
        let written = vec!["b: 2\n".to_string(), "b: 1\n".to_string()];
        let table: [(Option<&[u8]>, Decision); 6] = [
            (Some(b"b: 4\n"), Decision::Nothing),
            (Some(b"b: 2\n"), Decision::Restore),
            (Some(b"b: 1\n"), Decision::Restore),
            // One byte off what we wrote is someone else's.
            (Some(b"b: 1\n\n"), Decision::KeepTheirs),
            (Some(b""), Decision::KeepTheirs),
            (None, Decision::Deleted),
        ];
        for (current, want) in table {
            assert_eq!(decide(current, b"b: 4\n", &written), want, "{current:?}");
        }
        // Nothing written yet: only the original is ours.
        assert_eq!(
            decide(Some(b"b: 2\n"), b"b: 4\n", &[]),
            Decision::KeepTheirs
        );
    }

    /// A file at our temp file's name that we may not remove (another user's, in a sticky
    /// directory) refuses no patch: a random name beside it is used, theirs left alone.
    #[test]
    fn a_temp_name_squatted_in_a_sticky_directory_refuses_no_patch() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED a_temp_name_squatted_in_a_sticky_directory_refuses_no_patch: not root (needs a file of another uid)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let target = dir.path().join("cfg.yaml");
        std::fs::write(&target, "batch_size: 8\n").unwrap();
        let squatted = temp_path(&target, 4242);
        std::fs::write(&squatted, "theirs").unwrap();
        std::os::unix::fs::chown(&squatted, Some(65534), Some(65534)).unwrap();
        let stat = FileStat::of(&std::fs::metadata(&target).unwrap());
        // As a user who is neither the squatter nor root (the kernel checks the fsuid).
        let who = crate::guard::principal::RunAs {
            name: "someone".into(),
            uid: nix::unistd::Uid::from_raw(65533),
            gid: nix::unistd::Gid::from_raw(65533),
            groups: vec![],
            home: "/".into(),
        };
        let temp = crate::guard::principal::as_recorded(Some(&who), || {
            write_temp(
                &target,
                b"batch_size: 4\n",
                &stat,
                None,
                &Xattrs::default(),
                4242,
            )
        })
        .unwrap();
        assert_ne!(temp, squatted);
        assert_eq!(std::fs::read(&temp).unwrap(), b"batch_size: 4\n");
        assert_eq!(std::fs::read(&squatted).unwrap(), b"theirs");
    }

    #[test]
    fn copy_names_keep_the_extension() {
        let table = [
            ("/c/default.yaml", 1, "default.oomguard-42.yaml"),
            ("/c/default.yaml", 2, "default.oomguard-42-2.yaml"),
            ("/c/a.b.toml", 1, "a.b.oomguard-42.toml"),
            ("/c/Makefile", 1, "Makefile.oomguard-42"),
        ];
        for (path, n, want) in table {
            assert_eq!(copy_name(Path::new(path), 42, n), OsString::from(want));
        }
        assert_eq!(
            temp_path(Path::new("/c/x.py"), 7),
            PathBuf::from("/c/.x.py.oomguard-7.tmp")
        );
    }

    #[test]
    fn in_place_round_trip_gives_back_the_same_bytes_mode_and_mtime() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let before = mtime(&path);
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        assert_eq!(p.original(0), YAML);
        assert!(
            s.entries().iter().all(|n| n.ends_with(".lock")),
            "{:?}",
            s.entries()
        );
        assert_eq!(p.write(0, PATCHED).unwrap(), None);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), PATCHED);
        assert_eq!(mode(&path), 0o640);
        assert_ne!(
            mtime(&path),
            before,
            "a patch must look new to mtime-keyed caches"
        );
        // Backup and journal are on disk before the file changed, and name our texts.
        let journal = load_journal(&p.journal_paths()[0]).unwrap();
        assert_eq!(journal.written, vec![PATCHED.to_string()]);
        assert_eq!(journal.owner_pid, std::process::id());
        assert_eq!(journal.run_dir, s.run);
        assert_eq!(
            std::fs::read(journal.backup.unwrap()).unwrap(),
            YAML.as_bytes()
        );
        assert_eq!(p.write(0, PATCHED_AGAIN).unwrap(), None);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), PATCHED_AGAIN);
        // Back to the original between attempts: restored, mtime included.
        assert_eq!(p.write(0, YAML).unwrap(), None);
        assert_eq!(std::fs::read(&path).unwrap(), YAML.as_bytes());
        assert_eq!(mtime(&path), before);
        p.write(0, PATCHED).unwrap();
        assert_eq!(p.finish(), Vec::<String>::new());
        assert_eq!(std::fs::read(&path).unwrap(), YAML.as_bytes());
        assert_eq!(mtime(&path), before);
        assert_eq!(mode(&path), 0o640);
        assert_eq!(s.entries(), Vec::<String>::new());
        assert_eq!(s.config_files(), vec!["default.yaml"]);
    }

    #[test]
    fn in_place_through_a_symlink_edits_the_target_and_keeps_the_link() {
        let s = Scene::new();
        let real = s.file("real.yaml", YAML);
        let link = s.configs.join("link.yaml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut p = s.open(&[(&link, Mode::InPlace)]).unwrap();
        p.write(0, PATCHED).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), PATCHED);
        p.finish();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), YAML.as_bytes());
    }

    #[test]
    fn copy_round_trip_leaves_the_original_untouched() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let before = mtime(&path);
        let mut p = s.open(&[(&path, Mode::Copy)]).unwrap();
        // As the user has it: no copy, the command keeps the user's path.
        assert_eq!(p.write(0, YAML).unwrap(), None);
        assert_eq!(s.config_files(), vec!["default.yaml"]);
        let copy = p.write(0, PATCHED).unwrap().expect("a copy");
        let want = format!("default.oomguard-{}.yaml", std::process::id());
        assert_eq!(copy, s.configs.join(&want));
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), PATCHED);
        assert_eq!(mode(&copy), 0o640);
        assert_eq!(
            p.write(0, PATCHED_AGAIN).unwrap().as_deref(),
            Some(copy.as_path())
        );
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), PATCHED_AGAIN);
        assert_eq!(std::fs::read(&path).unwrap(), YAML.as_bytes());
        assert_eq!(mtime(&path), before);
        assert_eq!(p.finish(), Vec::<String>::new());
        assert_eq!(s.config_files(), vec!["default.yaml"]);
        assert_eq!(s.entries(), Vec::<String>::new());
        assert_eq!(mtime(&path), before);
    }

    #[test]
    fn a_taken_copy_name_is_never_overwritten() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let taken = s.file(
            &format!("default.oomguard-{}.yaml", std::process::id()),
            "mine\n",
        );
        let mut p = s.open(&[(&path, Mode::Copy)]).unwrap();
        let copy = p.write(0, PATCHED).unwrap().unwrap();
        assert_eq!(
            copy,
            s.configs
                .join(format!("default.oomguard-{}-2.yaml", std::process::id()))
        );
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "mine\n");
        p.finish();
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "mine\n");
        assert!(!copy.exists());
    }

    #[test]
    fn a_relative_path_gets_a_relative_copy_beside_it() {
        // A directory below the working directory (the package root under cargo test), named
        // relative to it: the test must not chdir, threads share the working directory.
        let cwd = std::env::current_dir().unwrap();
        let tmp =
            tempfile::tempdir_in(Path::new(env!("CARGO_MANIFEST_DIR")).join("target")).unwrap();
        let Ok(rel_dir) = tmp.path().strip_prefix(&cwd) else {
            eprintln!("SKIPPED a_relative_path_gets_a_relative_copy_beside_it: cwd is not the package root");
            return;
        };
        std::fs::write(tmp.path().join("default.yaml"), YAML).unwrap();
        let given = rel_dir.join("default.yaml");
        let mut p = Patcher::open(
            &tmp.path().join("state"),
            &tmp.path().join("run"),
            vec![(given.clone(), Mode::Copy)],
        )
        .unwrap();
        let copy = p.write(0, PATCHED).unwrap().unwrap();
        assert!(copy.is_relative(), "{}", copy.display());
        assert_eq!(copy.parent(), given.parent());
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), PATCHED);
        p.finish();
        assert!(!copy.exists());
    }

    #[test]
    fn someone_elses_edit_is_kept_and_the_original_goes_beside_it() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        // A file already named like the first choice: the original goes to `.1`.
        let first = s.file("default.yaml.oomguard-original", "older\n");
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        p.write(0, PATCHED).unwrap();
        let theirs = "training:\n  batch_size: 7\n";
        std::fs::write(&path, theirs).unwrap();
        // Mid-run: oomguard refuses to overwrite their edit.
        assert!(matches!(
            p.write(0, PATCHED_AGAIN),
            Err(PatchError::EditedMeanwhile { .. })
        ));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), theirs);
        let lines = p.finish();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("changed by someone else")
                && lines[0].contains("default.yaml.oomguard-original.1"),
            "{lines:?}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), theirs);
        assert_eq!(std::fs::read_to_string(&first).unwrap(), "older\n");
        let beside = s.configs.join("default.yaml.oomguard-original.1");
        assert_eq!(std::fs::read(&beside).unwrap(), YAML.as_bytes());
        assert_eq!(s.entries(), Vec::<String>::new());
    }

    #[test]
    fn a_file_deleted_during_the_run_stays_deleted_with_the_original_beside() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        p.write(0, PATCHED).unwrap();
        std::fs::remove_file(&path).unwrap();
        let lines = p.finish();
        assert!(
            lines.len() == 1 && lines[0].contains("deleted"),
            "{lines:?}"
        );
        assert!(!path.exists());
        let beside = s.configs.join("default.yaml.oomguard-original");
        assert_eq!(std::fs::read(&beside).unwrap(), YAML.as_bytes());
    }

    #[test]
    fn a_second_patcher_of_the_same_file_is_busy() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let other = s.file("other.yaml", YAML);
        let mut first = s.open(&[(&path, Mode::InPlace)]).unwrap();
        first.write(0, PATCHED).unwrap();
        for mode in [Mode::InPlace, Mode::Copy] {
            match s.open(&[(&other, Mode::InPlace), (&path, mode)]) {
                Err(PatchError::Busy {
                    path: p,
                    pid,
                    run_dir,
                }) => {
                    assert_eq!(p, path);
                    assert_eq!(pid, std::process::id());
                    assert_eq!(run_dir, s.run);
                }
                Err(e) => panic!("{mode:?}: {e}"),
                Ok(_) => panic!("{mode:?}: a second patcher claimed a file being patched"),
            }
        }
        // The refused open let go of the file it had claimed first.
        drop(s.open(&[(&other, Mode::InPlace)]).unwrap());
        // Copies of one file do not exclude each other; the same file twice is refused.
        let mut a = s.open(&[(&other, Mode::Copy)]).unwrap();
        let mut b = s.open(&[(&other, Mode::Copy)]).unwrap();
        a.write(0, PATCHED).unwrap();
        b.write(0, PATCHED).unwrap();
        assert!(matches!(
            s.open(&[(&other, Mode::InPlace), (&other, Mode::Copy)]),
            Err(PatchError::Duplicate { .. })
        ));
        first.finish();
        // Once finished, the file is free again.
        s.open(&[(&path, Mode::InPlace)]).unwrap().finish();
    }

    #[test]
    fn recover_restores_what_a_dead_owner_left_and_skips_the_living() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let copied = s.file("copied.yaml", YAML);
        let before = mtime(&path);
        let mut dead = s
            .open(&[(&path, Mode::InPlace), (&copied, Mode::Copy)])
            .unwrap();
        dead.write(0, PATCHED).unwrap();
        let copy = dead.write(1, PATCHED).unwrap().unwrap();
        let living_file = s.file("living.yaml", YAML);
        let mut living = s.open(&[(&living_file, Mode::InPlace)]).unwrap();
        living.write(0, PATCHED).unwrap();
        dead.abandon();
        let mut lines = Patcher::recover(&s.state);
        lines.sort();
        assert_eq!(lines.len(), 2, "{lines:?}");
        let by = format!(
            "oomguard {} (run dir {})",
            std::process::id(),
            s.run.display()
        );
        assert_eq!(
            lines[1],
            format!("restored {}, left patched by {by}", path.display())
        );
        assert!(
            lines[0].starts_with(&format!("removed {}", copy.display())),
            "{lines:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), YAML.as_bytes());
        assert_eq!(mtime(&path), before);
        assert!(!copy.exists());
        assert_eq!(std::fs::read_to_string(&living_file).unwrap(), PATCHED);
        // Idempotent: nothing more to do.
        assert_eq!(Patcher::recover(&s.state), Vec::<String>::new());
        living.finish();
        assert_eq!(std::fs::read(&living_file).unwrap(), YAML.as_bytes());
        assert_eq!(s.entries(), Vec::<String>::new());
    }

    #[test]
    fn an_edit_journaled_but_not_yet_written_and_stray_files_are_recovered() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        p.write(0, PATCHED).unwrap();
        // As if the crash came after the journal named the next text and its temp file was
        // being written, before the rename.
        let mut journal = load_journal(&p.journal_paths()[0]).unwrap();
        journal.written.push(PATCHED_AGAIN.to_string());
        save_journal(&p.files[0].entry, &journal).unwrap();
        let temp = temp_path(&p.files[0].target, std::process::id());
        std::fs::write(&temp, "half").unwrap();
        // A backup whose journal never got written: the file was not touched.
        let stray = patches_dir(&s.state).join("inplace-0-x.orig");
        std::fs::write(&stray, "x").unwrap();
        p.abandon();
        std::fs::write(&path, PATCHED_AGAIN).unwrap();
        let lines = Patcher::recover(&s.state);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(std::fs::read(&path).unwrap(), YAML.as_bytes());
        assert!(!temp.exists());
        assert_eq!(s.entries(), Vec::<String>::new());
        assert_eq!(s.config_files(), vec!["default.yaml"]);
    }

    #[test]
    fn open_restores_an_entry_no_recover_saw() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let mut dead = s.open(&[(&path, Mode::InPlace)]).unwrap();
        dead.write(0, PATCHED).unwrap();
        dead.abandon();
        // Without recover: the original read must still be the user's, not the patched text.
        for mode in [Mode::Copy, Mode::InPlace] {
            let p = s.open(&[(&path, mode)]).unwrap();
            assert_eq!(p.original(0), YAML, "{mode:?}");
        }
    }

    #[test]
    fn finish_is_idempotent_and_drop_restores() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        p.write(0, PATCHED).unwrap();
        assert!(p.finish().is_empty());
        // Someone edits after our finish: it is theirs, a second finish must not touch it.
        std::fs::write(&path, PATCHED).unwrap();
        assert!(p.finish().is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), PATCHED);
        assert!(p.journal_paths().is_empty());
        drop(p);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), PATCHED);

        let path = s.file("drop.yaml", YAML);
        let result = std::panic::catch_unwind(|| {
            let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
            p.write(0, PATCHED).unwrap();
            panic!("the run loop panicked");
        });
        assert!(result.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), YAML.as_bytes());
        assert!(s.entries().is_empty(), "{:?}", s.entries());
    }

    #[test]
    fn writing_a_python_file_removes_its_stale_pyc() {
        let s = Scene::new();
        let src = "class TrainConfig:\n    batch_size_per_gpu = 8\n";
        let patched = "class TrainConfig:\n    batch_size_per_gpu = 4\n";
        let path = s.file("config.py", src);
        let cache = s.configs.join("__pycache__");
        std::fs::create_dir(&cache).unwrap();
        let pyc = cache.join("config.cpython-311.pyc");
        let other = cache.join("configs.cpython-311.pyc");
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        for text in [patched, src] {
            std::fs::write(&pyc, "stale").unwrap();
            p.write(0, text).unwrap();
            assert!(!pyc.exists(), "{text:?}");
        }
        p.write(0, patched).unwrap();
        std::fs::write(&pyc, "stale").unwrap();
        std::fs::write(&other, "another module's").unwrap();
        p.finish();
        assert!(
            !pyc.exists(),
            "the restore left a cache of the patched text"
        );
        assert!(other.exists());
        assert_eq!(std::fs::read(&path).unwrap(), src.as_bytes());
        // A copy's cache files go with it.
        let mut p = s.open(&[(&path, Mode::Copy)]).unwrap();
        let copy = p.write(0, patched).unwrap().unwrap();
        let copy_pyc = cache.join(format!(
            "{}.cpython-311.pyc",
            copy.file_stem().unwrap().to_str().unwrap()
        ));
        std::fs::write(&copy_pyc, "compiled by the job").unwrap();
        p.finish();
        assert!(!copy_pyc.exists());
        assert!(!copy.exists());
    }

    #[test]
    fn not_utf8_and_missing_files_are_refused_before_anything_is_written() {
        let s = Scene::new();
        let bin = s.configs.join("weights.yaml");
        std::fs::write(&bin, b"a: \xff\n").unwrap();
        assert!(matches!(
            s.open(&[(&bin, Mode::InPlace)]),
            Err(PatchError::NotUtf8 { .. })
        ));
        let missing = s.configs.join("missing.yaml");
        let err = s.open(&[(&missing, Mode::Copy)]).err().expect("refused");
        assert!(err.to_string().contains("missing.yaml"), "{err}");
        assert!(s.entries().is_empty(), "{:?}", s.entries());
        assert_eq!(s.config_files(), vec!["weights.yaml"]);
    }

    #[test]
    fn restore_entry_acts_only_when_the_owner_is_gone() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        let journal = p.journal_paths()[0].clone();
        // Not written yet: nothing to act on.
        assert_eq!(restore_entry(&journal, Duration::ZERO).unwrap(), None);
        p.write(0, PATCHED).unwrap();
        // Owner alive: hands off.
        assert_eq!(restore_entry(&journal, Duration::ZERO).unwrap(), None);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), PATCHED);
        p.abandon();
        let line = restore_entry(&journal, Duration::ZERO)
            .unwrap()
            .expect("a restore");
        assert!(line.starts_with("restored "), "{line}");
        assert_eq!(std::fs::read(&path).unwrap(), YAML.as_bytes());
        assert_eq!(restore_entry(&journal, Duration::ZERO).unwrap(), None);
        assert!(restore_entry(Path::new("/nowhere/x.txt"), Duration::ZERO).is_err());
    }

    /// A journal entry a user owns speaks only for that user: whatever it records, its file is
    /// touched as them.
    #[test]
    fn a_journal_entry_a_user_owns_acts_as_that_user() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("SKIPPED a_journal_entry_a_user_owns_acts_as_that_user: not root (chown)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal {
            version: JOURNAL_VERSION,
            mode: Mode::InPlace,
            path: dir.path().join("cfg.yaml"),
            backup: None,
            copy: None,
            owner_pid: 1,
            run_dir: dir.path().to_path_buf(),
            original: FileStat::of(&std::fs::metadata(dir.path()).unwrap()),
            written: Vec::new(),
            acting: None,
            users_entry: false,
        };
        let path = dir.path().join("entry.json");
        std::fs::write(&path, serde_json::to_vec(&journal).unwrap()).unwrap();
        assert_eq!(
            load_journal(&path).unwrap().acting,
            None,
            "root's entry says"
        );
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let loaded = load_journal(&path).unwrap();
        // Its backup too is read as the user: an entry they edited cannot name root's file.
        assert!(loaded.users_entry);
        assert_eq!(loaded.acting.map(|who| who.uid), Some(65534));
    }

    #[test]
    fn a_lock_naming_another_users_entry_is_ignored_and_never_acted_on() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED a_lock_naming_another_users_entry_is_ignored_and_never_acted_on: needs root to give a file to nobody");
            return;
        }
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        // A forged entry: it says the file's original is other text, and it is nobody's.
        let evil = s._tmp.path().join("evil/patches");
        std::fs::create_dir_all(&evil).unwrap();
        let backup = evil.join("k.orig");
        std::fs::write(&backup, "owned: true\n").unwrap();
        let journal = Journal {
            version: JOURNAL_VERSION,
            mode: Mode::InPlace,
            path: std::fs::canonicalize(&path).unwrap(),
            backup: Some(backup.clone()),
            copy: None,
            owner_pid: 1 << 30,
            run_dir: s.run.clone(),
            original: FileStat::of(&std::fs::metadata(&path).unwrap()),
            written: vec![YAML.to_string()],
            acting: None,
            users_entry: false,
        };
        let entry = evil.join("k.json");
        std::fs::write(&entry, serde_json::to_vec(&journal).unwrap()).unwrap();
        std::os::unix::fs::chown(&entry, Some(65534), Some(65534)).unwrap();
        // Its lock beside the file names it (as a dead patcher's lock would).
        let lock = lock::lock_path(&std::fs::canonicalize(&path).unwrap());
        std::fs::write(&lock, format!("1\n/run\n{}\n", entry.display())).unwrap();
        assert!(Patcher::recover(&s.state).is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), YAML);
        // What a lock names is its writer's to choose: an entry we cannot trust is no entry,
        // so the patch goes ahead and the forged entry is never acted on.
        let opened = s.open(&[(&path, Mode::InPlace)]);
        assert!(opened.is_ok(), "{:?}", opened.err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), YAML);
        assert!(entry.exists() && backup.exists());
    }
}
