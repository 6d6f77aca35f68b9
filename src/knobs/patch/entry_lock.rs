//! A journal entry's lock: `flock` on `<state dir>/patches/<key>.lock`, held by the oomguard
//! that owns the entry for as long as it runs, and what the lock file says about that owner (its
//! PID and run dir, for the "busy" message). Our descriptors are close-on-exec, so a lock that can
//! be taken means the owner is gone. This is one state directory's lock; the file's own lock,
//! every oomguard's, is [`super::lock`]'s. What is done once the lock is taken is
//! [`super::restore`]'s and [`super::claim`]'s.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::{io_err, PatchError};

/// What the lock file of a held entry says about its owner.
pub(super) struct Owner {
    pub(super) pid: u32,
    pub(super) run_dir: PathBuf,
    /// In a file's own lock: the journal entry that undoes the owner's edit.
    pub(super) journal: Option<PathBuf>,
}

impl Owner {
    /// A lock file's text: the PID, the run dir and (a file's own lock) the journal entry, a
    /// line each. PID 0 and an empty run dir where it names none yet.
    pub(super) fn parse(text: &[u8]) -> Owner {
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
pub(super) struct EntryLock {
    _lock: Flock<File>,
}

pub(super) enum TryLock {
    Taken(EntryLock),
    Held(Owner),
}

impl EntryLock {
    pub(super) fn try_take(lock_path: &Path) -> Result<TryLock, PatchError> {
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
    pub(super) fn record_owner(&mut self, pid: u32, run_dir: &Path) {
        let file: &File = &self._lock;
        let _ = file.set_len(0);
        let mut line = format!("{pid}\n").into_bytes();
        line.extend_from_slice(run_dir.as_os_str().as_bytes());
        line.push(b'\n');
        let _ = std::os::unix::fs::FileExt::write_all_at(file, &line, 0);
    }
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
