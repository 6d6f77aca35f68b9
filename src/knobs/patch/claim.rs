//! Claiming the files of a run, before anything is written: each path resolved (symlinks, UTF-8),
//! the same file named twice refused, the file's own lock and its journal entry's lock taken (a
//! live patcher elsewhere → [`PatchError::Busy`]), a dead patcher's leftover entry finished first,
//! and the original read (UTF-8, its mode, owner and times) so that it is the user's text and
//! not a patched one. Nothing is written to the user's directory here; writing is
//! [`super::edit`]'s, giving back [`super::restore`]'s.

use std::fs::Metadata;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::acting::{as_theirs, ActingUser};
use super::entry_lock::{EntryLock, Owner, TryLock};
use super::journal::{copy_key, in_place_key, patches_dir, EntryPaths, Journal};
use super::lock::FileLock;
use super::replace::FileStat;
use super::restore::finish_entry;
use super::{io_err, Mode, PatchError, Patcher};

/// One file claimed by a [`Patcher`].
pub(super) struct Claimed {
    /// As the caller gave it (a copy's path is returned in the same shape).
    pub(super) given: PathBuf,
    /// The file written: absolute; for InPlace, symlinks resolved (a rename over a symlink would
    /// replace the link, not the file).
    pub(super) target: PathBuf,
    pub(super) mode: Mode,
    pub(super) original: String,
    pub(super) stat: FileStat,
    pub(super) entry: EntryPaths,
    pub(super) lock: Option<EntryLock>,
    /// The file's own lock (InPlace only), whatever the state directory.
    pub(super) file_lock: Option<FileLock>,
    /// Saved to disk once the first edit is on its way.
    pub(super) journal: Option<Journal>,
    /// The copy, once created (Copy only), as returned to the caller.
    pub(super) copy_given: Option<PathBuf>,
    pub(super) finished: bool,
    /// Whom the file is touched as.
    pub(super) who: Option<ActingUser>,
}

impl Patcher {
    /// [`Patcher::open`] as whoever runs it: the entries' directory made, every file claimed or
    /// none (a refused claim drops those before it, letting go of their locks).
    pub(super) fn open_here(
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
        refuse_duplicates(&files)?;
        for (given, mode) in files {
            let claimed = patcher.claim(&dir, given, mode)?;
            patcher.files.push(claimed);
        }
        Ok(patcher)
    }

    /// Claims one file: its locks taken, a dead owner's patch of it undone, its original read.
    fn claim(&self, dir: &Path, given: PathBuf, mode: Mode) -> Result<Claimed, PatchError> {
        let who = ActingUser::current();
        let (absolute, canonical) = resolve(&given, who.as_ref())?;
        // Whoever patches the file in place holds this entry's lock: for a copy we only look,
        // since what we would read as the original is their patched text.
        let in_place = EntryPaths::new(dir, &in_place_key(&canonical));
        let file_lock =
            self.take_file_lock(dir, &given, &canonical, &in_place, who.as_ref(), mode)?;
        let in_place_lock = take_in_place_entry(&given, &in_place)?;
        let (target, entry, mut lock) = match mode {
            Mode::InPlace => (canonical, in_place, in_place_lock),
            Mode::Copy => {
                in_place.remove_all();
                drop(in_place_lock);
                let (entry, lock) = self.take_copy_entry(dir, &given, &absolute)?;
                (absolute, entry, lock)
            }
        };
        lock.record_owner(self.pid, &self.run_dir);
        let (meta, original) = match read_original(&target, &given, who.as_ref()) {
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

    /// First the file's own lock, which every oomguard takes whatever its state directory. A
    /// copy only looks at it (a lock there is held, or names a dead patcher's entry to
    /// finish): it leaves no lock file behind in the user's directory.
    fn take_file_lock(
        &self,
        dir: &Path,
        given: &Path,
        canonical: &Path,
        in_place: &EntryPaths,
        who: Option<&ActingUser>,
        mode: Mode,
    ) -> Result<Option<FileLock>, PatchError> {
        let journal = std::path::absolute(&in_place.json).map_err(io_err("find", dir))?;
        let in_place_mode = mode == Mode::InPlace;
        let journal = in_place_mode.then_some(journal.as_path());
        match FileLock::take_for(
            canonical,
            who,
            in_place_mode,
            self.pid,
            &self.run_dir,
            journal,
        )? {
            Ok(lock) => Ok(lock),
            Err(owner) => Err(busy(given, owner)),
        }
    }

    /// A copy's own entry, its lock taken: per process and claim, so only a dead process that
    /// had our PID can have left one there (finished before we go on).
    fn take_copy_entry(
        &self,
        dir: &Path,
        given: &Path,
        absolute: &Path,
    ) -> Result<(EntryPaths, EntryLock), PatchError> {
        let entry = EntryPaths::new(dir, &copy_key(self.pid, absolute));
        let lock = match EntryLock::try_take(&entry.lock)? {
            TryLock::Taken(lock) => lock,
            TryLock::Held(owner) => {
                // Our own PID's key, held: only this very process can hold it.
                return Err(busy(given, owner));
            }
        };
        if entry.json.exists() {
            // A dead process with our PID left it.
            if let Some(line) = finish_entry(&entry, true)? {
                tracing::warn!("{line}");
            }
        }
        Ok((entry, lock))
    }
}

/// Refuses a file named twice among `files` (by its real path, as the job's user sees it): two
/// claims of one file would each take the other's lock for someone else's.
fn refuse_duplicates(files: &[(PathBuf, Mode)]) -> Result<(), PatchError> {
    let mut seen = Vec::new();
    let who = ActingUser::current();
    for (given, _) in files {
        let canonical = as_theirs(who.as_ref(), || std::fs::canonicalize(given))
            .map_err(io_err("read", given))?;
        if seen.contains(&canonical) {
            return Err(PatchError::Duplicate {
                path: given.clone(),
            });
        }
        seen.push(canonical);
    }
    Ok(())
}

/// The file's absolute path (a copy goes beside it) and its real one (an in-place edit writes
/// there, and every oomguard keys its lock on it); both must be UTF-8 to be journaled.
fn resolve(given: &Path, who: Option<&ActingUser>) -> Result<(PathBuf, PathBuf), PatchError> {
    let absolute = std::path::absolute(given).map_err(io_err("find", given))?;
    let canonical =
        as_theirs(who, || std::fs::canonicalize(given)).map_err(io_err("read", given))?;
    if absolute.to_str().is_none() || canonical.to_str().is_none() {
        return Err(PatchError::PathNotUtf8 {
            path: given.to_path_buf(),
        });
    }
    Ok((absolute, canonical))
}

/// The in-place entry's lock, taken (held → [`PatchError::Busy`]). An entry left by a dead
/// owner that no recover saw is undone before the file is read.
fn take_in_place_entry(given: &Path, in_place: &EntryPaths) -> Result<EntryLock, PatchError> {
    match EntryLock::try_take(&in_place.lock)? {
        TryLock::Held(owner) => Err(busy(given, owner)),
        TryLock::Taken(lock) => {
            if in_place.json.exists() {
                if let Some(line) = finish_entry(in_place, true)? {
                    tracing::warn!("{line}");
                }
            }
            Ok(lock)
        }
    }
}

/// The original's metadata and text, read as `who`: the times before our read touches the
/// access time; text that is not UTF-8 is refused.
fn read_original(
    target: &Path,
    given: &Path,
    who: Option<&ActingUser>,
) -> Result<(Metadata, String), PatchError> {
    let (meta, bytes) = as_theirs(who, || {
        let meta = std::fs::metadata(target)?;
        let bytes = crate::guard::fsutil::read_regular_capped(
            target,
            crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
        )?;
        Ok((meta, bytes))
    })
    .map_err(io_err("read", given))?;
    let text = String::from_utf8(bytes).map_err(|_| PatchError::NotUtf8 {
        path: given.to_path_buf(),
    })?;
    Ok((meta, text))
}

/// `given` is being patched by the lock's `owner`.
fn busy(given: &Path, owner: Owner) -> PatchError {
    PatchError::Busy {
        path: given.to_path_buf(),
        pid: owner.pid,
        run_dir: owner.run_dir,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::patch::scene::{Scene, PATCHED, YAML};

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
}
