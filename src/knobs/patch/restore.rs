//! Giving the user's file back: the one restore rule ([`decide`]: the original → nothing to do; a
//! text we wrote → the original goes back; anything else, or the file gone → theirs stays and
//! the original goes beside it as `<file>.oomguard-original`), applied to a journal entry at the
//! run's end, by the guard after oomguard died ([`restore_entry`]), or by the next start
//! ([`recover_in`]), and the line that says what was done. Only an entry whose lock can be taken
//! is acted on. Writing the entry is [`super::journal`]'s; the files are written through
//! [`super::replace`].

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::acting::{as_theirs, read_if_exists, ActingUser};
use super::entry_lock::{EntryLock, TryLock};
use super::journal::{load_journal, patches_dir, EntryPaths, Journal};
use super::lock::FileLock;
use super::replace::{create_file, remove_stale_pyc, replace_file, temp_path, xattrs_at, FileStat};
use super::{io_err, Mode, PatchError};

/// [`Patcher::recover`](super::Patcher::recover) for the entries under one state directory.
pub(super) fn recover_in(state_dir: &Path) -> Vec<String> {
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
/// run, an entry that cannot be used) is left for
/// [`Patcher::open`](crate::knobs::patch::Patcher::open) to refuse with.
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
pub(super) enum Decision {
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
pub(super) fn decide(current: Option<&[u8]>, original: &[u8], written: &[String]) -> Decision {
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
pub(super) fn finish_entry(
    entry: &EntryPaths,
    recovered: bool,
) -> Result<Option<String>, PatchError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::patch::journal::save_journal;
    use crate::knobs::patch::scene::{mtime, Scene, PATCHED, PATCHED_AGAIN, YAML};
    use crate::knobs::patch::{PatchError, Patcher};

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
}
