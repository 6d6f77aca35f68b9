//! The run directory: made (or checked free) when a run starts, pinned by a descriptor so its
//! files cannot be redirected, and written only with files oomguard creates (`attempt-N.log`, capped
//! by [`crate::record::attempt_log`],
//! summary.json saved atomically, `samples.csv` through [`crate::record::samples`]); where default
//! run directories go, and oomguard's state directory.
//!
//! It decides nothing about the run and formats nothing for the user: summary.json's text is
//! [`crate::record::summary`]'s.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::console::Reporter;
use crate::record::attempt_log::AttemptLog;
use crate::record::summary::{rfc3339, Summary};
use crate::record::unsaved::unsaved;

/// Why the run directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot create run directory {path}: {source} (choose another with --run-dir)")]
    Create { path: PathBuf, source: io::Error },
    #[error("run directory {path} is not writable (choose another with --run-dir)")]
    NotWritable { path: PathBuf },
    #[error("run directory {path} already holds {file}, which oomguard would write: choose a new --run-dir so nothing is overwritten")]
    InUse { path: PathBuf, file: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// Whether `name` is a file oomguard writes in a run directory (and so refuses to find there).
fn is_run_file(name: &str) -> bool {
    if matches!(
        name,
        "summary.json" | "samples.csv" | "report.html" | crate::hooks::LOG_NAME
    ) {
        return true;
    }
    name.strip_prefix("attempt-")
        .and_then(|rest| rest.strip_suffix(".log"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The run directory: `attempt-N.log`, `samples.csv` and `summary.json`. oomguard only ever
/// creates files here (O_EXCL), so a file of the user's is never truncated, and it removes
/// only what it created.
///
/// The directory is opened once when it is made or found, and every file in it is reached
/// through that descriptor (`/proc/self/fd/N/NAME`): a directory on its path renamed, or
/// replaced by a symlink, afterwards (by a user who can write a directory above it) cannot send
/// a later file elsewhere.
#[derive(Debug)]
pub struct RunDir {
    /// Absolute: it is handed to the job (OOMGUARD_RUN_DIR), which may change directory.
    path: PathBuf,
    /// The directories we made, deepest last (removed again, deepest first, on a failed start).
    made_dirs: Vec<PathBuf>,
    /// The names of the files we created.
    made_files: std::cell::RefCell<Vec<String>>,
    /// The directory itself, opened once (`O_PATH`).
    pinned: File,
    /// Whether summary.json has been claimed (its first save): later saves only replace it.
    summary_claimed: std::cell::Cell<bool>,
    /// Whether the directory is the job's user's (see [`RunDir::create`]): then every file here
    /// is made as that user ([`crate::principal`]).
    as_user: bool,
}

impl RunDir {
    /// Uses `dir`, or makes a new one under the default location. Refuses a directory that
    /// already holds any file oomguard would write, so nothing there is ever overwritten; other
    /// files in it are left alone.
    ///
    /// `as_user`: the directory is the job's user's (chosen by a job file they could write, or in
    /// a place they can write), so it is made, and every file in it, as that user
    /// ([`crate::principal`]).
    pub fn create(dir: Option<&Path>, program: &str, as_user: bool) -> Result<RunDir, RunDirError> {
        let as_user = as_user && crate::principal::acting_for().is_some();
        let switch_failed = |source| RunDirError::Create {
            path: dir.map(Path::to_path_buf).unwrap_or_default(),
            source,
        };
        let made = || match dir {
            Some(dir) => {
                let dir = std::path::absolute(dir).map_err(|source| RunDirError::Create {
                    path: dir.to_path_buf(),
                    source,
                })?;
                let made = create_dirs(&dir)?;
                Ok((dir, made))
            }
            None => {
                let base = std::path::absolute(default_runs_base()).map_err(|source| {
                    RunDirError::Create {
                        path: default_runs_base(),
                        source,
                    }
                })?;
                let mut made = create_dirs(&base)?;
                let path = make_run_dir_in(&base, program).inspect_err(|_| remove_dirs(&made))?;
                made.push(path.clone());
                Ok((path, made))
            }
        };
        let (path, made_dirs) = crate::principal::as_user_if_or(as_user, made, switch_failed)?;
        let pinned = crate::principal::as_user_if(as_user, || {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_PATH | nix::libc::O_DIRECTORY)
                .open(&path)
        });
        let pinned = match pinned {
            Ok(pinned) => pinned,
            Err(source) => {
                let _ = crate::principal::as_user_if(as_user, || {
                    remove_dirs(&made_dirs);
                    Ok(())
                });
                return Err(RunDirError::Create { path, source });
            }
        };
        let run_dir = RunDir {
            path,
            pinned,
            made_dirs,
            made_files: Default::default(),
            summary_claimed: Default::default(),
            as_user,
        };
        if let Err(e) = run_dir.check_unused() {
            remove_dirs(&run_dir.made_dirs);
            return Err(e);
        }
        Ok(run_dir)
    }

    /// Whether files here are made as the job's user (see [`crate::principal`]).
    pub fn is_users(&self) -> bool {
        self.as_user
    }

    /// Refuses a directory we cannot write, or one holding a file we would write.
    fn check_unused(&self) -> Result<(), RunDirError> {
        // access(2) answers for the real uid (root); acting for a user, the first file made
        // here is the test.
        if !self.as_user && !is_writable_dir(&self.path) {
            return Err(RunDirError::NotWritable {
                path: self.path.clone(),
            });
        }
        let entries =
            crate::principal::as_user_if(self.as_user, || std::fs::read_dir(self.files()))
                .map_err(|source| RunDirError::Create {
                    path: self.path.clone(),
                    source,
                })?;
        let mut found: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| is_run_file(name))
            .collect();
        found.sort();
        match found.into_iter().next() {
            None => Ok(()),
            Some(file) => Err(RunDirError::InUse {
                path: self.path.clone(),
                file,
            }),
        }
    }

    /// Creates `name` in the run directory; fails if it exists (O_EXCL), so a file that
    /// appeared since the check (another run given the same directory) is never truncated.
    /// Opened for reading too: a capped log copies its own tail ([`AttemptLog`]).
    pub(super) fn create_file(&self, name: &str) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.at(name);
        let file = crate::principal::as_user_if(self.as_user, || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)
        })?;
        self.made_files.borrow_mut().push(name.to_string());
        Ok(file)
    }

    /// Undoes `create` when the job could not even start: removes the files oomguard created,
    /// and the directories it made, so a failed start leaves nothing behind.
    pub fn discard(self) {
        let _ = crate::principal::as_user_if(self.as_user, || {
            for name in self.made_files.borrow().iter() {
                let _ = std::fs::remove_file(self.at(name));
            }
            remove_dirs(&self.made_dirs);
            Ok(())
        });
    }

    /// Opens `name` (hooks.log) for appending, made on first use. Refused unless it is a regular
    /// file with one link owned by whoever writes here: the directory was checked free of it
    /// when the run started, so anything else there now (a symlink, a hard link to another
    /// file) was planted by someone else.
    pub fn open_append(&self, name: &str) -> io::Result<File> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let path = self.at(name);
        crate::principal::as_user_if(self.as_user, || {
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o644)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                .open(&path)?;
            let meta = file.metadata()?;
            let writer = match crate::principal::acting_for().filter(|_| self.as_user) {
                Some(who) => who.uid.as_raw(),
                None => nix::unistd::Uid::effective().as_raw(),
            };
            if !meta.is_file() || meta.nlink() != 1 || meta.uid() != writer {
                return Err(io::Error::other(format!(
                    "{} is not a file oomguard made (owner uid {}, {} links): someone else put it there",
                    self.path.join(name).display(),
                    meta.uid(),
                    meta.nlink()
                )));
            }
            Ok(file)
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory as opened (`/proc/self/fd/N`): the path to reach its files by, which
    /// cannot be redirected (see the type's doc). [`RunDir::path`] is the one to show.
    pub fn files(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.pinned.as_raw_fd()))
    }

    /// `name` in the directory as opened.
    fn at(&self, name: &str) -> PathBuf {
        self.files().join(name)
    }

    /// Writes the probe's `sitecustomize.py` (`text`) into `probe/` in the run directory, as
    /// the run directory's owner, whole or not at all (a temporary file renamed into place: a
    /// half-written one would make Python print an error at start): the directory to put on
    /// the job's `PYTHONPATH`.
    pub fn write_probe(&self, text: &str) -> io::Result<PathBuf> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = self.at("probe");
        crate::principal::as_user_if(self.as_user, || {
            match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
            let tmp = dir.join(".sitecustomize.py.tmp");
            let _ = std::fs::remove_file(&tmp);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&tmp)?;
            let target = dir.join("sitecustomize.py");
            crate::fsutil::write_then_rename(file, &tmp, &target, text.as_bytes(), false)
        })?;
        Ok(self.path.join("probe"))
    }

    /// Creates `attempt-N.log`, capped at `max_bytes` ([`AttemptLog`]). `None` if it cannot:
    /// the job runs regardless, and the run's last warning says the log is missing
    /// ([`unsaved`]).
    pub fn open_log(&self, attempt: u32, max_bytes: u64, _report: &Reporter) -> Option<AttemptLog> {
        let name = format!("attempt-{attempt}.log");
        self.create_file(&name)
            .map(|file| AttemptLog::new(file, name.clone(), max_bytes))
            // Said once at the end of the run, with whatever else could not be saved.
            .map_err(|e| {
                unsaved(
                    "attempt logs",
                    &format!("{}: {e}", self.path.join(&name).display()),
                )
            })
            .ok()
    }

    /// Writes summary.json atomically: the whole text in one buffer, written to a temporary
    /// file in the same directory, then renamed over the old one. `durable` also syncs it to
    /// disk first (the last save of a run); between attempts the rename alone keeps readers from
    /// ever seeing a partial file, and skipping the sync keeps an attempt's cost flat however
    /// long the run.
    pub fn save(&self, summary: &Summary, durable: bool) -> Result<(), RunDirError> {
        let path = self.path.join("summary.json");
        let target = self.at("summary.json");
        let write = || -> io::Result<()> {
            let (tmp, file) = self.create_temp()?;
            crate::principal::as_user_if(self.as_user, || {
                crate::fsutil::write_then_rename(file, &tmp, &target, &summary.render(), durable)
            })
        };
        if !self.summary_claimed.get() {
            // The first save claims the name with O_EXCL: two runs given the same directory at
            // the same moment cannot both pass.
            self.create_file("summary.json")
                .map_err(|source| match source.kind() {
                    io::ErrorKind::AlreadyExists => RunDirError::InUse {
                        path: self.path.clone(),
                        file: "summary.json".into(),
                    },
                    _ => RunDirError::Write {
                        path: path.clone(),
                        source,
                    },
                })?;
            self.summary_claimed.set(true);
        }
        write().map_err(|source| RunDirError::Write { path, source })
    }

    /// A new temporary file for summary.json, made with O_EXCL: never a file (or a symlink)
    /// that was already there, whoever put it there.
    fn create_temp(&self) -> io::Result<(PathBuf, File)> {
        let pid = std::process::id();
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        crate::principal::as_user_if(self.as_user, || {
            crate::fsutil::create_new_numbered(&options, |n| {
                self.at(&format!(".summary.json.{pid}.{n}.tmp"))
            })
        })
    }
}

/// Makes `dir` and any missing parents; returns the ones it made, outermost first.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>, RunDirError> {
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    let mut made = Vec::new();
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(&d) {
            Ok(()) => made.push(d),
            // Made meanwhile by someone else: theirs, not ours to remove.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                remove_dirs(&made);
                // The directory wanted, and which of its parents could not be made.
                let source = match d == dir {
                    true => source,
                    false => io::Error::new(source.kind(), format!("{}: {source}", d.display())),
                };
                return Err(RunDirError::Create {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
    Ok(made)
}

/// Removes directories we made, deepest first; one that is not empty (someone else put a file
/// there) stays.
fn remove_dirs(made: &[PathBuf]) {
    for d in made.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}

/// Whether `path` names an existing directory we could create files in.
fn is_writable_dir(path: &Path) -> bool {
    nix::unistd::access(
        path,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .is_ok()
}

/// Where default run directories go: `$XDG_STATE_HOME/oomguard/runs`, with `~/.local/state`
/// when XDG_STATE_HOME is unset, empty or relative (the XDG spec says to ignore a relative
/// one), and `./oomguard-runs` without a home.
pub fn default_runs_base() -> PathBuf {
    state_dir()
        .map(|state| state.join("runs"))
        .unwrap_or_else(|| PathBuf::from("oomguard-runs"))
}

/// oomguard's state directory: `$XDG_STATE_HOME/oomguard`, with `~/.local/state` when
/// XDG_STATE_HOME is unset, empty or relative; None without a home (no absolute place to keep
/// state that a later run would find again).
pub fn state_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|v| v.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .map(|state| state.join("oomguard"))
}

/// Makes a new `<base>/<UTC time>-<program>[-N]`. The directory is made with mkdir(2), which
/// fails if it exists, so runs started in the same second (a Slurm array on a shared home) each
/// get their own.
fn make_run_dir_in(base: &Path, program: &str) -> Result<PathBuf, RunDirError> {
    let stamp: String = rfc3339(SystemTime::now())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("job");
    for n in 1u32.. {
        let path = match n {
            1 => base.join(format!("{stamp}-{name}")),
            n => base.join(format!("{stamp}-{name}-{n}")),
        };
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(RunDirError::Create { path, source }),
        }
    }
    unreachable!("some suffix is free")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::summary::FinalSizes;

    #[test]
    fn run_dir_refuses_an_earlier_run_and_saves_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(Some(&dir.path().join("r")), "python", false).unwrap();
        let summary = Summary::new(
            &["python".into()],
            FinalSizes {
                batch_size: None,
                accum: None,
            },
        );
        // A symlink planted where the temporary file would go is never followed.
        let precious = dir.path().join("precious.txt");
        std::fs::write(&precious, "precious").unwrap();
        let planted = run
            .path()
            .join(format!(".summary.json.{}.0.tmp", std::process::id()));
        std::os::unix::fs::symlink(&precious, &planted).unwrap();
        run.save(&summary, false).unwrap();
        run.save(&summary, true).unwrap();
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious");
        std::fs::remove_file(&planted).unwrap();
        let left: Vec<_> = std::fs::read_dir(run.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let err = RunDir::create(Some(&dir.path().join("r")), "python", false).unwrap_err();
        assert!(matches!(err, RunDirError::InUse { .. }), "{err}");
    }

    #[test]
    fn run_files_are_recognised() {
        let table = [
            ("summary.json", true),
            ("samples.csv", true),
            ("report.html", true),
            ("attempt-1.log", true),
            ("attempt-204.log", true),
            ("attempt-.log", false),
            ("attempt-1a.log", false),
            ("attempt-1.log.bak", false),
            ("notes.txt", false),
            (".summary.json.12.tmp", false),
        ];
        for (name, want) in table {
            assert_eq!(is_run_file(name), want, "{name}");
        }
    }

    #[test]
    fn a_failed_start_removes_only_what_it_made() {
        let base = tempfile::tempdir().unwrap();
        let deep = base.path().join("n1/n2/n3");
        let run = RunDir::create(Some(&deep), "python", false).unwrap();
        assert!(run.path().is_absolute());
        run.save(
            &Summary::new(
                &["python".into()],
                FinalSizes {
                    batch_size: None,
                    accum: None,
                },
            ),
            false,
        )
        .unwrap();
        run.discard();
        assert!(!base.path().join("n1").exists());
        // A directory of the user's, with a file of theirs: both stay.
        let theirs = base.path().join("mine");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("notes.txt"), "keep").unwrap();
        let run = RunDir::create(Some(&theirs), "python", false).unwrap();
        let _log = run.open_log(1, 1 << 20, &Reporter { quiet: true }).unwrap();
        run.discard();
        assert!(!theirs.join("attempt-1.log").exists());
        assert_eq!(
            std::fs::read_to_string(theirs.join("notes.txt")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn runs_started_together_get_their_own_directories() {
        let base = tempfile::tempdir().unwrap();
        let made: std::collections::HashSet<PathBuf> = (0..5)
            .map(|_| make_run_dir_in(base.path(), "/usr/bin/python3").unwrap())
            .collect();
        assert_eq!(made.len(), 5);
        assert!(made
            .iter()
            .all(|p| p.is_dir() && p.to_string_lossy().contains("-python3")));
    }
}
