//! A file's own lock, kept beside it: `flock` on `<dir>/.<name>.oomguard-lock`, held by the
//! oomguard that patches the file in place for as long as it does, whatever that oomguard's
//! state directory or user. A second one (the system unit's and a shell's, root's and the
//! user's) finds it held and is refused; the lock of an owner that died names its journal
//! entry, which is finished before the file is read as the original.
//!
//! Who can make a lock: only who can create a name in the file's directory. Without the sticky
//! bit they could replace the file itself, so whatever they put at the name counts. In a sticky
//! directory (`/tmp`) anyone who writes the directory can take the name first without being able
//! to touch the file: there a lock counts only when its owner could replace the file anyway
//! (root, the directory's owner, the file's owner, or this oomguard's own user). Anything else at
//! the name is a squat and never refuses a run: root exchanges it for its own lock and deletes it;
//! an oomguard without root's rights cannot remove another user's file from a sticky directory
//! and stops with a message naming the squatter and the fix.
//!
//! The lock file is made with `O_EXCL | O_NOFOLLOW` through the directory as the user opened it
//! (never through a link, never an existing file), given to the guarded file's owner and group
//! when root makes it, with no ACL and mode 0600, plus group or other read-write only where the
//! file has group or other write: only those who can write the file can open the lock to hold
//! it. It is removed, under the lock, when its holder lets go (also after an early error); one
//! that names a journal entry its holder could not finish stays, for whoever patches next.
//!
//! Finishing a dead owner's entry, and the restore rule, are [`super::restore`]'s.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, RenameFlags};
use nix::sys::stat::{FileStat, Mode as Perm};
use nix::unistd::UnlinkatFlags;

use super::acting::{as_theirs, ActingUser};
use super::entry_lock::Owner;
use super::journal::{load_journal, trusted_journal};
// Through the parent, as before the split: restoring a dead owner's entry takes the file lock
// this module gives, so the two call each other.
use super::restore_entry;
use super::{io_err, PatchError};

/// `.<name>.oomguard-lock`, beside the file it guards.
pub(super) fn lock_path(file: &Path) -> PathBuf {
    file.with_file_name(lock_name(file.file_name().unwrap_or_default()))
}

fn lock_name(file_name: &OsStr) -> OsString {
    let mut name = OsString::from(".");
    name.push(file_name);
    name.push(".oomguard-lock");
    name
}

/// The guarded file's directory, opened as the user, and what decides whose lock counts there.
struct Place {
    dir: File,
    name: OsString,
    /// The lock's path, for messages.
    path: PathBuf,
    /// The file it guards.
    file: PathBuf,
    sticky: bool,
    dir_uid: u32,
    /// The guarded file's owner, group and mode; `None` when it is gone.
    file_stat: Option<(u32, u32, u32)>,
    who: Option<ActingUser>,
}

impl Place {
    fn of(file: &Path, who: Option<&ActingUser>) -> Result<Place, PatchError> {
        let parent = file.parent().unwrap_or(Path::new("/"));
        let file_name = file.file_name().unwrap_or_default();
        let (dir, dir_meta, file_stat) = as_theirs(who, || {
            // O_PATH: a directory the user may search and write but not list still holds locks.
            let dir = OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_PATH | nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
                .open(parent)?;
            let dir_meta = dir.metadata()?;
            let file_stat = match nix::sys::stat::fstatat(
                Some(dir.as_raw_fd()),
                file_name,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Ok(st) => Some((st.st_uid, st.st_gid, st.st_mode & 0o7777)),
                Err(Errno::ENOENT) => None,
                Err(e) => return Err(e.into()),
            };
            Ok((dir, dir_meta, file_stat))
        })
        .map_err(io_err("open the directory of", file))?;
        Ok(Place {
            dir,
            name: lock_name(file_name),
            path: lock_path(file),
            file: file.to_path_buf(),
            sticky: dir_meta.mode() & 0o1000 != 0,
            dir_uid: dir_meta.uid(),
            file_stat,
            who: who.cloned(),
        })
    }

    /// The uid files are made as here.
    fn me(&self) -> u32 {
        self.who
            .as_ref()
            .map_or_else(|| nix::unistd::geteuid().as_raw(), |who| who.uid)
    }

    /// Whether a lock file owned by `uid` counts: its owner could have replaced the file anyway.
    fn counts(&self, uid: u32) -> bool {
        !self.sticky
            || uid == 0
            || uid == self.dir_uid
            || uid == self.me()
            || self.file_stat.is_some_and(|(owner, _, _)| owner == uid)
    }

    fn as_theirs<T>(&self, work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        as_theirs(self.who.as_ref(), work)
    }

    /// What is at `name` in the directory (a link itself, not what it points at).
    fn stat(&self, name: &OsStr) -> io::Result<FileStat> {
        self.as_theirs(|| {
            nix::sys::stat::fstatat(
                Some(self.dir.as_raw_fd()),
                name,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(io::Error::from)
        })
    }

    /// Whether `name` still names the inode `file` has open.
    fn names(&self, name: &OsStr, file: &File) -> bool {
        match (self.stat(name), file.metadata()) {
            (Ok(now), Ok(held)) => now.st_ino == held.ino() && now.st_dev == held.dev(),
            _ => false,
        }
    }

    fn open_at(&self, name: &OsStr, flags: OFlag, perm: Perm) -> io::Result<File> {
        let flags =
            flags | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(Some(self.dir.as_raw_fd()), name, flags, perm)?;
        // SAFETY: openat returned a new descriptor that nothing else owns.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// A new lock file at `name` (never an existing one, never through a link), given to the
    /// guarded file's owner and group where we may, openable only by the file's writers.
    fn create(&self, name: &OsStr) -> io::Result<File> {
        self.as_theirs(|| {
            let file = self.open_at(
                name,
                OFlag::O_CREAT | OFlag::O_EXCL,
                Perm::from_bits_truncate(0o600),
            )?;
            let (uid, gid, mode) = self.file_stat.unwrap_or((self.me(), u32::MAX, 0o600));
            let made = file.metadata()?;
            if (made.uid(), made.gid()) != (uid, gid) && gid != u32::MAX {
                // Only root may give a file away; anyone else keeps it, as its creator.
                match std::os::unix::fs::fchown(&file, Some(uid), Some(gid)) {
                    Err(e) if e.raw_os_error() == Some(nix::libc::EPERM) => {}
                    other => other?,
                }
            }
            // A default ACL of the directory would let more people open it than write the file.
            super::attrs::remove_acl(&file)?;
            let made = file.metadata()?;
            let mut perm = 0o600;
            if mode & 0o020 != 0 && made.gid() == gid {
                perm |= 0o060;
            }
            if mode & 0o002 != 0 {
                perm |= 0o006;
            }
            nix::sys::stat::fchmod(file.as_raw_fd(), Perm::from_bits_truncate(perm))?;
            Ok(file)
        })
    }

    fn unlink(&self, name: &OsStr, flags: UnlinkatFlags) -> io::Result<()> {
        nix::unistd::unlinkat(Some(self.dir.as_raw_fd()), name, flags).map_err(io::Error::from)
    }

    /// Removes `name` if it still names `held` (we hold its lock). Our own file in a sticky
    /// directory given to the file's owner is removed with root's rights where we have them.
    fn remove(&self, name: &OsStr, held: &File) {
        if !self.names(name, held) {
            return;
        }
        let removed = self.as_theirs(|| self.unlink(name, UnlinkatFlags::NoRemoveDir));
        if removed.is_err() && nix::unistd::geteuid().is_root() {
            let _ = crate::guard::principal::as_oomguard(|| {
                self.unlink(name, UnlinkatFlags::NoRemoveDir)
            });
        }
    }
}

/// A file's lock, held. Dropping it lets go and removes the lock file (see
/// [`FileLock::keep`] for the one case where the file stays).
pub(super) struct FileLock {
    place: Place,
    lock: Option<Flock<File>>,
}

/// What [`FileLock::take`] found.
pub(super) enum Claim {
    Held(FileLock),
    /// Another oomguard holds the file.
    Busy(Owner),
    /// No lock file there, and none was to be made.
    Absent,
}

/// What holding one lock file came to.
enum Hold {
    Locked(Flock<File>),
    Busy(Owner),
    /// It was removed or replaced meanwhile.
    Gone,
}

impl FileLock {
    /// Takes the lock of `file` (absolute, symlinks resolved), acting as `who`. `create`: make
    /// the lock file when there is none (in-place patching); without it only an existing lock
    /// is looked at (a copy: it must not start while the file is patched in place, and
    /// finishes a dead patcher's entry, but leaves nothing behind when there is none).
    pub(super) fn take(
        file: &Path,
        who: Option<&ActingUser>,
        create: bool,
    ) -> Result<Claim, PatchError> {
        let place = Place::of(file, who)?;
        for _ in 0..16 {
            let held = if create {
                match place.create(&place.name) {
                    Ok(made) => Some(FileLock::hold(&place, made)?),
                    Err(e) if e.raw_os_error() == Some(nix::libc::EEXIST) => None,
                    Err(e) => {
                        return Err(PatchError::Io {
                            action: "create the lock file",
                            path: place.path.clone(),
                            source: io::Error::new(
                                e.kind(),
                                format!("{e} (patching a file in place needs write access to its directory)"),
                            ),
                        })
                    }
                }
            } else {
                None
            };
            let held = match held {
                Some(held) => held,
                None => match FileLock::hold_existing(&place, create)? {
                    Some(held) => held,
                    None if create => continue,
                    None => return Ok(Claim::Absent),
                },
            };
            match held {
                Hold::Locked(lock) => {
                    return Ok(Claim::Held(FileLock {
                        place,
                        lock: Some(lock),
                    }))
                }
                Hold::Busy(owner) => return Ok(Claim::Busy(owner)),
                Hold::Gone => continue,
            }
        }
        Err(PatchError::Io {
            action: "lock",
            path: place.path.clone(),
            source: io::Error::other("the lock file keeps being replaced"),
        })
    }

    /// Holds the lock file someone else made at the name, if it counts. `None`: nothing there
    /// to hold (gone since, or, without `create`, nothing that could be a lock); with `create`,
    /// a squatter's file there is first replaced by ours.
    fn hold_existing(place: &Place, create: bool) -> Result<Option<Hold>, PatchError> {
        let found = match place.stat(&place.name) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("look at the lock file", &place.path)(e)),
        };
        if !place.counts(found.st_uid) {
            if !create {
                // Nothing that counts can be at the name while this is.
                return Ok(None);
            }
            return FileLock::swap_out_squat(place, found.st_uid);
        }
        let plain = found.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG;
        if !plain || found.st_nlink != 1 {
            if !create {
                return Ok(None); // no lock can be held there
            }
            if place.sticky {
                // In a sticky directory anyone can link a file of root's (or the file's owner's)
                // to the name: what is not a plain file of its own is nobody's lock there.
                return FileLock::swap_out_squat(place, found.st_uid);
            }
            return Err(PatchError::Io {
                action: "use the lock file",
                path: place.path.clone(),
                source: io::Error::other(format!(
                    "it is not a plain file of its own, so not oomguard's lock for {}: remove it",
                    place.file.display()
                )),
            });
        }
        let opened = place.as_theirs(|| place.open_at(&place.name, OFlag::empty(), Perm::empty()));
        let existing = match opened {
            Ok(existing) => existing,
            Err(e) if matches!(e.raw_os_error(), Some(nix::libc::ENOENT | nix::libc::ELOOP)) => {
                return Ok(Some(Hold::Gone))
            }
            Err(e) => {
                return Err(PatchError::Io {
                    action: "open the lock file",
                    path: place.path.clone(),
                    source: io::Error::new(
                        e.kind(),
                        format!(
                            "{e} (it is uid {}'s, who may be patching {}: ask them, or remove it if no oomguard runs)",
                            found.st_uid,
                            place.file.display()
                        ),
                    ),
                })
            }
        };
        let meta = existing.metadata().map_err(io_err("stat", &place.path))?;
        if (meta.ino(), meta.dev()) != (found.st_ino, found.st_dev) {
            return Ok(Some(Hold::Gone)); // replaced between the look and the open
        }
        FileLock::hold(place, existing).map(Some)
    }

    /// Locks `file`, open at the place's name. Locked but no longer at the name (its holder
    /// removed it as we opened it) → `Gone`, to be taken again.
    fn hold(place: &Place, file: File) -> Result<Hold, PatchError> {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) if place.names(&place.name, &locked) => Ok(Hold::Locked(locked)),
            Ok(_) => Ok(Hold::Gone),
            Err((file, Errno::EWOULDBLOCK)) => Ok(Hold::Busy(owner_of(&file))),
            Err((_, errno)) => Err(PatchError::Io {
                action: "lock",
                path: place.path.clone(),
                source: errno.into(),
            }),
        }
    }

    /// Puts a lock file of ours in place of a squatter's file at the name: made and locked under
    /// a name of our own, exchanged with theirs in one step (renameat2(2) `RENAME_EXCHANGE`, so
    /// the name is never empty or unlocked for another oomguard to take meanwhile), and theirs
    /// deleted. Only root may do it in a sticky directory; anyone else is refused with the
    /// squatter named. `None`: what we took out was someone's real lock after all (it came
    /// between the look and the exchange): it goes back, and the caller looks again.
    fn swap_out_squat(place: &Place, squatter: u32) -> Result<Option<Hold>, PatchError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(PatchError::Squatted {
                path: place.file.clone(),
                lock: place.path.clone(),
                uid: squatter,
            });
        }
        let failed = |action, e| PatchError::Io {
            action,
            path: place.path.clone(),
            source: e,
        };
        let (mine, mine_name) = (0..16)
            .find_map(|n| {
                let mut name = place.name.clone();
                name.push(format!(".{}-{n}-{:x}", std::process::id(), nonce()));
                match place.create(&name) {
                    Err(e) if e.raw_os_error() == Some(nix::libc::EEXIST) => None,
                    made => Some(made.map(|file| (file, name))),
                }
            })
            .unwrap_or_else(|| Err(io::Error::other("every name tried is taken")))
            .map_err(|e| failed("create the lock file", e))?;
        // Only we know its name: nobody else can hold it yet.
        let mine = match Flock::lock(mine, FlockArg::LockExclusiveNonblock) {
            Ok(mine) => mine,
            Err((_, errno)) => {
                let _ = place.as_theirs(|| place.unlink(&mine_name, UnlinkatFlags::NoRemoveDir));
                return Err(failed("lock", errno.into()));
            }
        };
        let exchange = || {
            crate::guard::principal::as_oomguard(|| {
                crate::guard::fsutil::renameat2(
                    Some(place.dir.as_raw_fd()),
                    mine_name.as_os_str(),
                    Some(place.dir.as_raw_fd()),
                    place.name.as_os_str(),
                    RenameFlags::RENAME_EXCHANGE,
                )
                .map_err(io::Error::from)
            })
        };
        if let Err(e) = exchange() {
            let _ = place.as_theirs(|| place.unlink(&mine_name, UnlinkatFlags::NoRemoveDir));
            return Err(failed("replace another user's file at", e));
        }
        // What was at the name is now at ours.
        let theirs = place.stat(&mine_name);
        let a_lock = |st: &FileStat| {
            place.counts(st.st_uid)
                && st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG
                && st.st_nlink == 1
        };
        if theirs.as_ref().is_ok_and(a_lock) {
            // A lock that counts came meanwhile: it goes back, ours goes.
            let _ = exchange();
            let _ = place.as_theirs(|| place.unlink(&mine_name, UnlinkatFlags::NoRemoveDir));
            return Ok(None);
        }
        let is_dir = theirs.is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR);
        let flags = if is_dir {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        // A directory with things in it stays, under our name for it: theirs to clear.
        let _ = crate::guard::principal::as_oomguard(|| place.unlink(&mine_name, flags));
        tracing::warn!(
            "removed {}: uid {squatter} had put it where oomguard locks {}",
            place.path.display(),
            place.file.display()
        );
        if place.names(&place.name, &mine) {
            Ok(Some(Hold::Locked(mine)))
        } else {
            Ok(Some(Hold::Gone))
        }
    }

    /// Finishes the entry a dead owner's lock names, then records us as the owner. For the
    /// caller: `Err(owner)` when the file is busy. A lock naming an entry that cannot be
    /// finished here refuses (it stays, for whoever can finish it).
    pub(super) fn take_for(
        file: &Path,
        who: Option<&ActingUser>,
        create: bool,
        pid: u32,
        run_dir: &Path,
        journal: Option<&Path>,
    ) -> Result<Result<Option<FileLock>, Owner>, PatchError> {
        let lock = match FileLock::take(file, who, create)? {
            Claim::Absent => return Ok(Ok(None)),
            Claim::Busy(owner) => return Ok(Err(owner)),
            Claim::Held(lock) => lock,
        };
        if let Some(left) = lock.owner().journal {
            // Ours is finished by the caller; a gone one was finished already; one we cannot
            // trust (see trusted_journal) is no entry of ours, whatever the lock says.
            if Some(left.as_path()) != journal && trusted_journal(&left) {
                let names_this_file = load_journal(&left).is_ok_and(|j| j.path.as_path() == file);
                // Otherwise a stale or foreign name: not this file's patch.
                if names_this_file {
                    match restore_entry(&left, Duration::ZERO) {
                        Ok(Some(line)) => tracing::warn!("{line}"),
                        Ok(None) if left.exists() => {
                            // Its owner holds the entry but not the file's lock.
                            let owner = lock.owner();
                            lock.keep();
                            return Ok(Err(owner));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            lock.keep();
                            return Err(PatchError::LeftPatched {
                                path: file.to_path_buf(),
                                journal: left,
                                detail: e.to_string(),
                            });
                        }
                    }
                }
            }
        }
        if create {
            lock.record_owner(pid, run_dir, journal);
        }
        Ok(Ok(Some(lock)))
    }

    /// What the lock file says about its holder.
    fn owner(&self) -> Owner {
        owner_of(self.lock.as_ref().expect("a held lock"))
    }

    /// Records us as the holder, for the message another oomguard shows, and the journal entry
    /// that will undo our edit, for one that comes after we died.
    fn record_owner(&self, pid: u32, run_dir: &Path, journal: Option<&Path>) {
        let file: &File = self.lock.as_ref().expect("a held lock");
        let mut line = format!("{pid}\n").into_bytes();
        line.extend_from_slice(run_dir.as_os_str().as_bytes());
        line.push(b'\n');
        if let Some(journal) = journal {
            line.extend_from_slice(journal.as_os_str().as_bytes());
            line.push(b'\n');
        }
        let _ = file.set_len(0);
        let _ = file.write_all_at(&line, 0);
    }

    /// Lets go, leaving the lock file in place: it names a journal entry that could not be
    /// finished, for whoever patches the file next (and for `abandon`, as a SIGKILL would).
    pub(super) fn keep(mut self) {
        drop(self.lock.take());
    }

    /// Lets go and removes the lock file, under the lock.
    pub(super) fn release(self) {
        drop(self);
    }

    /// After a dead owner's entry for `file` was finished (by its guard or a later start):
    /// removes the lock it left beside the file, if that lock is free and names `journal`.
    pub(super) fn clear_left(file: &Path, journal: &Path, who: Option<&ActingUser>) {
        let Ok(place) = Place::of(file, who) else {
            return;
        };
        let Ok(found) = place.stat(&place.name) else {
            return;
        };
        let plain = found.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG;
        if !place.counts(found.st_uid) || !plain || found.st_nlink != 1 {
            return;
        }
        let Ok(existing) =
            place.as_theirs(|| place.open_at(&place.name, OFlag::empty(), Perm::empty()))
        else {
            return;
        };
        let Ok(Hold::Locked(locked)) = FileLock::hold(&place, existing) else {
            return; // held: someone patches the file now, and the lock is theirs
        };
        let lock = FileLock {
            place,
            lock: Some(locked),
        };
        if lock.owner().journal.as_deref() != Some(journal) {
            lock.keep();
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Some(locked) = self.lock.take() {
            self.place.remove(&self.place.name, &locked);
        }
    }
}

/// What a lock file says about its holder: its first few lines, read through the descriptor.
fn owner_of(file: &File) -> Owner {
    let mut text = vec![0u8; 8192];
    let len = file.read_at(&mut text, 0).unwrap_or(0);
    text.truncate(len);
    Owner::parse(&text)
}

/// A name no one can have guessed before this moment, for the file we swap in.
fn nonce() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    crate::guard::fsutil::Fnv64::of(&now.as_nanos().to_le_bytes())
}
