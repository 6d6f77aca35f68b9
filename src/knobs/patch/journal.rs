//! The journal: one entry per claimed file under `<state dir>/patches/`, `<key>.json` naming the
//! user's file, its backup (`<key>.orig`) or patched copy, the owner and every text oomguard
//! wrote, saved durably (temp file, fsync, rename, fsync of the directory) before the user's file
//! is touched. Here are the entry's format, its files' names and keys, loading and saving it, and
//! whether an entry another file names may be trusted. Acting on an entry (the restore rule) is
//! [`super::restore`]'s; its lock is [`super::entry_lock`]'s.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::acting::ActingUser;
use super::replace::{sync_dir, FileStat};
use super::{io_err, Mode, PatchError};

/// One journal entry, `<state dir>/patches/<key>.json`: everything a guard or a later oomguard
/// needs to put things back without the process that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Journal {
    /// Bumped when a field changes meaning; an entry of another version is left alone.
    pub(super) version: u32,
    pub(super) mode: Mode,
    /// The user's file, absolute (for InPlace, with symlinks resolved: the file we write).
    pub(super) path: PathBuf,
    /// The original bytes (InPlace only).
    pub(super) backup: Option<PathBuf>,
    /// The patched copy (Copy only), recorded before it is created.
    pub(super) copy: Option<PathBuf>,
    pub(super) owner_pid: u32,
    pub(super) run_dir: PathBuf,
    pub(super) original: FileStat,
    /// Every text oomguard wrote, or was about to write, to the file (InPlace) or the copy:
    /// recorded before the write, so a file holding one of them after a crash is known ours.
    pub(super) written: Vec<String>,
    /// The user the file is touched as (a root oomguard acting for a job's `user`): the guard
    /// and a later run restore as them too. Absent in entries of earlier builds.
    #[serde(default)]
    pub(super) acting: Option<ActingUser>,
    /// Whether the entry itself was written by a user (its file is not root's): then even its
    /// backup is read as that user, so an entry they edited cannot name a file of root's.
    #[serde(skip)]
    pub(super) users_entry: bool,
}

pub(super) const JOURNAL_VERSION: u32 = 1;

/// The files of one entry: `<key>.json` (journal), `<key>.orig` (backup), `<key>.lock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EntryPaths {
    pub(super) dir: PathBuf,
    pub(super) json: PathBuf,
    pub(super) backup: PathBuf,
    pub(super) lock: PathBuf,
    pub(super) json_tmp: PathBuf,
}

impl EntryPaths {
    pub(super) fn new(dir: &Path, key: &str) -> EntryPaths {
        EntryPaths {
            dir: dir.to_path_buf(),
            json: dir.join(format!("{key}.json")),
            backup: dir.join(format!("{key}.orig")),
            lock: dir.join(format!("{key}.lock")),
            json_tmp: dir.join(format!("{key}.json.tmp")),
        }
    }

    /// The entry a journal path names (`.../<key>.json`).
    pub(super) fn of_journal(journal: &Path) -> Option<EntryPaths> {
        let name = journal.file_name()?.to_str()?;
        let key = name.strip_suffix(".json")?;
        let dir = journal.parent()?;
        Some(EntryPaths::new(dir, key))
    }

    /// The files a finished entry leaves no trace of (the lock file last: see
    /// [`EntryLock`](super::entry_lock::EntryLock)).
    pub(super) fn remove_all(&self) {
        for path in [&self.json_tmp, &self.backup, &self.json] {
            let _ = std::fs::remove_file(path);
        }
        let _ = sync_dir(&self.dir);
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// Where entries live below the state directory.
pub(super) fn patches_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("patches")
}

/// The key of the entry that patches `canonical` in place: the same for every oomguard, so two
/// of them contend for one lock. A hash of the path, plus the file name for a human reading the
/// directory.
pub(super) fn in_place_key(canonical: &Path) -> String {
    format!("inplace-{:016x}-{}", fnv1a(canonical), readable(canonical))
}

/// The key of a copy's entry: per process, and per claim within it (two patchers of one process
/// each get their own).
pub(super) fn copy_key(pid: u32, absolute: &Path) -> String {
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

/// Whether the journal entry a lock names may be acted on by us. A lock's text is written by
/// whoever may write beside the config (the job's user too), so the path is trusted only where
/// no one else could have put anything: absolute and plain (no `.` or `..`), every directory on
/// it a real directory (no symlink) of root's or ours that no group or other may write, and the
/// entry a regular file of ours. Anything else is treated as no entry at all, silently: what the
/// path names is never looked at further, and nothing said differs with what exists there.
/// (A sticky directory of root's, such as /tmp, counts as safe: see below.)
pub(super) fn trusted_journal(journal: &Path) -> bool {
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

pub(super) fn load_journal(path: &Path) -> Result<Journal, PatchError> {
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
pub(super) fn save_journal(entry: &EntryPaths, journal: &Journal) -> Result<(), PatchError> {
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
pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), PatchError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::patch::replace::FileStat;
    use crate::knobs::patch::scene::{Scene, YAML};
    use crate::knobs::patch::{lock, Patcher};

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
