//! The [`Patcher`] the run loop holds: the config files of one run, claimed at its start, given
//! each relaunch's text, and given back at its end (or on `Drop`, the panic path), every step
//! done as the job's user where the journal is theirs. It only sequences: claiming is
//! [`super::claim`]'s, writing [`super::edit`]'s, restoring [`super::restore`]'s.

use std::path::{Path, PathBuf};

use super::claim::Claimed;
use super::restore::{finish_entry, recover_in};
use super::{Mode, PatchError};

/// The config files of one run, claimed at [`Patcher::open`], written by [`Patcher::write`],
/// given back by [`Patcher::finish`] (or `Drop`).
pub struct Patcher {
    pub(super) run_dir: PathBuf,
    pub(super) pid: u32,
    pub(super) files: Vec<Claimed>,
    /// Whether the entries are kept as the job's user (see [`Patcher::open_as`]).
    pub(super) journal_as_user: bool,
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
    /// `journal_as_user` (a state directory that is theirs: see [`crate::guard::principal`]), so
    /// root never writes where the user could point a link.
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

#[cfg(test)]
mod tests {
    use crate::knobs::patch::journal::load_journal;
    use crate::knobs::patch::scene::{mode, mtime, Scene, PATCHED, PATCHED_AGAIN, YAML};
    use crate::knobs::patch::Mode;

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
}
