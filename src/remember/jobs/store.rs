//! The only code that touches a job's file ([`JobStore`]): `<state dir>/jobs/NAME.json`, read,
//! and changed under an exclusive `flock` on `NAME.lock` beside it, written atomically and
//! privately (0600 in a 0700 directory), a file that cannot be used moved aside
//! ([`MovedAside`]). What the file holds is [`super::memory`]'s; when it is written is
//! [`super::run`]'s.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::memory::{parse, JobMemory, Unusable, FORMAT_VERSION};
use crate::guard::fsutil::write_then_rename;

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
    ///
    /// [`JobSettings::state_dir_is_users`]: super::name::JobSettings::state_dir_is_users
    as_user: bool,
    /// The name an older build kept this job under ([`JobSettings::legacy_name`]).
    ///
    /// [`JobSettings::legacy_name`]: super::name::JobSettings::legacy_name
    legacy: Option<String>,
}

impl JobStore {
    /// The job `name` under `state_dir` (its `jobs/`).
    pub fn new(state_dir: &Path, name: &str) -> JobStore {
        JobStore {
            dir: state_dir.join("jobs"),
            name: name.to_string(),
            as_user: false,
            legacy: None,
        }
    }

    /// The same store, taking over `legacy`'s file (an older build's name for this job) when
    /// the job has none of its own yet.
    pub fn with_legacy_name(mut self, legacy: Option<String>) -> JobStore {
        self.legacy = legacy.filter(|l| *l != self.name);
        self
    }

    /// The same store, its files touched as the job's user when `yes`.
    pub fn touched_as_user(mut self, yes: bool) -> JobStore {
        self.as_user = yes && crate::guard::principal::acting_for().is_some();
        self
    }

    /// Runs `work` on the store's files as whoever owns them (see [`JobStore::touched_as_user`]).
    fn as_owner<T>(&self, work: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        crate::guard::principal::as_user_if_or(self.as_user, work, |source| StoreError {
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
        if self.legacy_waits() {
            let _lock = self.lock()?;
            self.adopt_legacy()?;
        }
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
    #[cfg(test)]
    pub fn update(
        &self,
        change: impl FnOnce(&mut JobMemory),
    ) -> Result<Option<MovedAside>, StoreError> {
        self.update_with(true, change)
    }

    /// Read-modify-write under the job's lock (`update`, for the tests, always `durable`): `change`
    /// gets the file's memory (empty if missing or moved aside), and the result is written, and
    /// synced before it returns only when `durable`. Between attempts
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
        self.adopt_legacy()?;
        let (mut memory, moved) = self.read_or_set_aside()?;
        change(&mut memory);
        memory.version = FORMAT_VERSION;
        memory.name = self.name.clone();
        self.write(&memory, durable)?;
        Ok(moved)
    }

    /// `<state dir>/jobs/LEGACY.json`, where an older build kept this job.
    fn legacy_path(&self) -> Option<PathBuf> {
        let legacy = self.legacy.as_ref()?;
        Some(self.dir.join(format!("{legacy}.json")))
    }

    /// Whether an older build's file waits to be taken over: the job has no file of its own
    /// and the old name has one.
    fn legacy_waits(&self) -> bool {
        self.legacy_path().is_some_and(|old| {
            fs::symlink_metadata(&old).is_ok_and(|m| m.file_type().is_file())
                && fs::symlink_metadata(self.path()).is_err()
        })
    }

    /// Moves an older build's file of this job to the job's own name, once (call with the
    /// lock held): linked, never over a file (one there now is the job's own), then unlinked
    /// from the old name, so no later run (nor `oomguard status`) sees it twice.
    fn adopt_legacy(&self) -> Result<(), StoreError> {
        let Some(old) = self.legacy_path().filter(|_| self.legacy_waits()) else {
            return Ok(());
        };
        match fs::hard_link(&old, self.path()) {
            Ok(()) => {
                let _ = fs::remove_file(&old);
                Ok(())
            }
            // Taken over or made meanwhile by another run: the job's own file stands.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::AlreadyExists | io::ErrorKind::NotFound
                ) =>
            {
                Ok(())
            }
            Err(source) => Err(StoreError {
                action: "take over the older job memory",
                path: old,
                source,
            }),
        }
    }

    /// The file's bytes parsed; `None` when there is no file.
    fn read(&self) -> Result<Option<Result<JobMemory, Unusable>>, StoreError> {
        let path = self.path();
        // A FIFO or a device in its place must not hold up the run: refused at once.
        match crate::guard::fsutil::read_regular_capped(
            &path,
            crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
        ) {
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
        let stamp: String = crate::remember::record::summary::rfc3339(SystemTime::now())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::outcome::Cause;
    use crate::knobs::Value;
    use crate::remember::jobs::memory::{PastAttempt, ATTEMPTS_KEPT};
    use crate::remember::record::summary::{KnobValues, PeakRecord};
    use std::os::unix::fs::PermissionsExt;

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
            gpu_devices: Vec::new(),
            steps: None,
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

    #[test]
    fn an_older_builds_file_is_taken_over_once_and_never_over_the_jobs_own() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        let old = JobStore::new(dir.path(), "alice.train");
        old.update(|m| m.push(record(1, 16, Cause::Ok))).unwrap();
        let store = JobStore::new(dir.path(), "1001-alice.train")
            .with_legacy_name(Some("alice.train".into()));
        let (memory, _) = store.load().unwrap();
        assert_eq!(memory.attempts()[0].value("batch"), Some(Value::Int(16)));
        assert!(store.path().exists() && !jobs.join("alice.train.json").exists());
        // The job's own file stands: a file at the old name (again) is not read.
        old.update(|m| m.push(record(1, 2, Cause::Ok))).unwrap();
        store.update(|m| m.push(record(2, 8, Cause::Ok))).unwrap();
        let (memory, _) = store.load().unwrap();
        let batches: Vec<_> = memory.attempts().iter().map(|a| a.value("batch")).collect();
        assert_eq!(batches, [Some(Value::Int(16)), Some(Value::Int(8))]);
        assert!(jobs.join("alice.train.json").exists());
        // Without a legacy name nothing is taken over.
        let fresh = JobStore::new(dir.path(), "1002-bob.train").with_legacy_name(None);
        assert_eq!(fresh.load().unwrap().0, JobMemory::default());
    }
}
