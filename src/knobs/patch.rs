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
//!
//! The parts, one concern each: [`claim`] (what is opened: paths, locks, the original read),
//! [`edit`] (the next text, in place or in a copy), [`journal`] (the entry on disk),
//! [`restore`] (the restore rule and finishing an entry), [`replace`] (temp file, rename, fsync),
//! [`entry_lock`] and [`lock`] (the entry's and the file's locks), [`acting`] (as whom), [`attrs`]
//! (extended attributes), and [`Patcher`] ([`patcher`]), which the run loop holds.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod acting;
mod attrs;
mod claim;
mod edit;
mod entry_lock;
mod journal;
mod lock;
mod patcher;
mod replace;
mod restore;
#[cfg(test)]
mod scene;

pub use patcher::Patcher;
pub use restore::{finish_left_beside, restore_entry};

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

/// Wraps an I/O error with what was being done and to which path ([`PatchError::Io`]), so each
/// message names the file and the step.
fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PatchError + 'a {
    move |source| PatchError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}
