//! The run directory: made (or checked free) when a run starts, pinned by a descriptor so its files
//! cannot be redirected, and written only with files oomguard creates (`attempt-N.log`, capped by
//! [`crate::output::attempt_log`], summary.json saved atomically, `samples.csv` through
//! [`crate::remember::record::samples`]); where default run directories go, and oomguard's state
//! directory.
//!
//! Run as root in its own default place (the system unit's `/var/lib/oomguard/runs/`), a run
//! directory holds a job's whole output, so it is private: made 0700 and given to the job's
//! user (who then owns, and pays the disk quota for, its files), `runs/` itself listable by
//! root alone (0711), and a run directory an earlier version left readable by all is tightened
//! the same way at the job's next run ([`tighten_earlier`]). The probe's directory is made new,
//! under a fresh name and 0700, at every run ([`RunDir::write_probe`]).
//!
//! It decides nothing about the run and formats nothing for the user: summary.json's text is
//! [`crate::remember::record::summary`]'s.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::output::attempt_log::AttemptLog;
use crate::output::console::Reporter;
use crate::output::unsaved::unsaved;
use crate::remember::record::summary::{rfc3339, Summary};

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

/// The file in the run directory that hooks' output is appended to.
pub const HOOKS_LOG_NAME: &str = "hooks.log";

/// Whether `name` is a file oomguard writes in a run directory (and so refuses to find there).
fn is_run_file(name: &str) -> bool {
    if matches!(
        name,
        "summary.json" | "samples.csv" | "report.html" | HOOKS_LOG_NAME
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
    /// is made as that user ([`crate::guard::principal`]).
    as_user: bool,
    /// Whether the directories in `made_dirs` were made as that user (removed as them): not
    /// where root made a private run directory in its own place and handed it over.
    dirs_as_user: bool,
}

impl RunDir {
    /// Uses `dir`, or makes a new one under the default location. Refuses a directory that
    /// already holds any file oomguard would write, so nothing there is ever overwritten; other
    /// files in it are left alone.
    ///
    /// `as_user`: the directory is the job's user's (chosen by a job file they could write, or in
    /// a place they can write), so it is made, and every file in it, as that user
    /// ([`crate::guard::principal`]).
    ///
    /// In root's own default place, the new directory is private: 0700, `runs/` above it 0711
    /// (nobody else lists the runs), and, for a job run as another user, handed to that user
    /// (`fchown`), whose files it then holds: they are made as that user.
    pub fn create(dir: Option<&Path>, program: &str, as_user: bool) -> Result<RunDir, RunDirError> {
        let as_user = as_user && crate::guard::principal::acting_for().is_some();
        let private = dir.is_none() && !as_user && nix::unistd::Uid::effective().is_root();
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
                if private {
                    unlist_runs(&base);
                }
                let mode = if private { 0o700 } else { 0o777 };
                let path =
                    make_run_dir_in(&base, program, mode).inspect_err(|_| remove_dirs(&made))?;
                made.push(path.clone());
                Ok((path, made))
            }
        };
        let (path, made_dirs) =
            crate::guard::principal::as_user_if_or(as_user, made, switch_failed)?;
        let pinned = crate::guard::principal::as_user_if(as_user, || {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_PATH | nix::libc::O_DIRECTORY)
                .open(&path)
        });
        let pinned = match pinned {
            Ok(pinned) => pinned,
            Err(source) => {
                let _ = crate::guard::principal::as_user_if(as_user, || {
                    remove_dirs(&made_dirs);
                    Ok(())
                });
                return Err(RunDirError::Create { path, source });
            }
        };
        // Handed over before any file is made in it: every file is then the user's.
        let handed = match crate::guard::principal::acting_for().filter(|_| private) {
            Some(who) => match hand_over(&pinned, who) {
                Ok(()) => true,
                Err(source) => {
                    remove_dirs(&made_dirs);
                    return Err(RunDirError::Create { path, source });
                }
            },
            None => false,
        };
        let run_dir = RunDir {
            path,
            pinned,
            made_dirs,
            made_files: Default::default(),
            summary_claimed: Default::default(),
            as_user: as_user || handed,
            dirs_as_user: as_user,
        };
        if let Err(e) = run_dir.check_unused() {
            remove_dirs(&run_dir.made_dirs);
            return Err(e);
        }
        Ok(run_dir)
    }

    /// Whether files here are made as the job's user (see [`crate::guard::principal`]).
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
            crate::guard::principal::as_user_if(self.as_user, || std::fs::read_dir(self.files()))
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
        let file = crate::guard::principal::as_user_if(self.as_user, || {
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
        let _ = crate::guard::principal::as_user_if(self.as_user, || {
            for name in self.made_files.borrow().iter() {
                let _ = std::fs::remove_file(self.at(name));
            }
            Ok(())
        });
        let _ = crate::guard::principal::as_user_if(self.dirs_as_user, || {
            remove_dirs(&self.made_dirs);
            Ok(())
        });
    }

    /// Creates `hooks.log`, the hooks' output kept under the same cap as an attempt's
    /// (`max_bytes`, [`AttemptLog::for_hooks`]). Made new (`O_EXCL`, no link followed) as whoever
    /// writes here, when the first hook runs: the directory was checked free of it when the run
    /// started, so anything at that name now was put there by someone else, and is refused.
    pub fn open_hooks_log(&self, max_bytes: u64) -> io::Result<AttemptLog> {
        let name = HOOKS_LOG_NAME;
        let file = self.create_file(name)?;
        Ok(AttemptLog::for_hooks(file, name.to_string(), max_bytes))
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

    /// Writes the probe's `sitecustomize.py` (`text`) into a new directory of the run directory,
    /// `probe-XXXXXX` (mkdtemp(3): a fresh name, made 0700, by whoever makes the run directory's
    /// files), never one that was there: a `probe/` someone put in the run directory beforehand,
    /// with a sitecustomize.py of theirs, is never what the job's Python imports first. Where
    /// the run directory is root's and the job runs as another user, the new directory is given
    /// to that user, who must read it (and no one else can). The file is made with `O_EXCL`;
    /// on a failure nothing is left, so the job never gets a half-written probe. Returns the
    /// directory to put first on the job's `PYTHONPATH`.
    pub fn write_probe(&self, text: &str) -> io::Result<PathBuf> {
        use std::io::Write;
        use std::os::unix::ffi::OsStringExt;
        use std::os::unix::fs::OpenOptionsExt;
        let name = crate::guard::principal::as_user_if(self.as_user, || {
            let template = self.at("probe-XXXXXX").into_os_string().into_vec();
            let mut raw = std::ffi::CString::new(template)
                .map_err(io::Error::other)?
                .into_bytes_with_nul();
            // SAFETY: `raw` is a NUL-terminated template, filled in place by mkdtemp.
            if unsafe { nix::libc::mkdtemp(raw.as_mut_ptr().cast()) }.is_null() {
                return Err(io::Error::last_os_error());
            }
            raw.pop();
            let dir = PathBuf::from(std::ffi::OsString::from_vec(raw));
            let file = dir.join("sitecustomize.py");
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&file)
                .and_then(|mut f| f.write_all(text.as_bytes()));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&file);
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
            Ok(dir
                .file_name()
                .expect("mkdtemp names a file")
                .to_os_string())
        })?;
        if let Some(who) = crate::guard::principal::acting_for().filter(|_| !self.as_user) {
            use std::os::fd::AsRawFd;
            use std::os::unix::ffi::OsStrExt;
            let c_name = std::ffi::CString::new(name.as_bytes()).map_err(io::Error::other)?;
            // SAFETY: a valid directory descriptor and a NUL-terminated name in it.
            let rc = unsafe {
                nix::libc::fchownat(
                    self.pinned.as_raw_fd(),
                    c_name.as_ptr(),
                    who.uid.as_raw(),
                    who.gid.as_raw(),
                    nix::libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if rc != 0 {
                let e = io::Error::last_os_error();
                let dir = self.files().join(&name);
                let _ = std::fs::remove_file(dir.join("sitecustomize.py"));
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        }
        Ok(self.path.join(name))
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
            crate::guard::principal::as_user_if(self.as_user, || {
                crate::guard::fsutil::write_then_rename(
                    file,
                    &tmp,
                    &target,
                    &summary.render(),
                    durable,
                )
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
        crate::guard::principal::as_user_if(self.as_user, || {
            crate::guard::fsutil::create_new_numbered(&options, |n| {
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

/// `runs/` in root's own place, where it is root's: others may pass through it to their own
/// run directory but not list it (0711), since the names tell whose programs ran when.
fn unlist_runs(base: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // Only root can write its path (checked before the run: see
    // crate::guard::ownership::place_is_users), so the name reaches the directory that was checked.
    if let Ok(meta) = std::fs::symlink_metadata(base) {
        if meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o7777 != 0o711 {
            let _ = std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o711));
        }
    }
}

/// Gives the run directory `pinned` (opened `O_PATH`) to `who`: owner and group, through the
/// descriptor itself (`fchownat` with `AT_EMPTY_PATH`), so no name is looked up again.
fn hand_over(pinned: &File, who: &crate::guard::principal::RunAs) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor and an empty NUL-terminated path, as AT_EMPTY_PATH asks.
    let rc = unsafe {
        nix::libc::fchownat(
            pinned.as_raw_fd(),
            c"".as_ptr(),
            who.uid.as_raw(),
            who.gid.as_raw(),
            nix::libc::AT_EMPTY_PATH,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes private, as a new one is made (0700, given to the job's user where oomguard acts for
/// one), the run directories an earlier oomguard made for this job in root's own default place
/// and left readable by every user (`root 0755`, its logs 0644): `dirs` are the run directories
/// the job's memory names, and this runs at the job's next run. Only a directory directly in
/// `runs/` that root owns, with `runs/` root's alone, is touched, each reached through
/// descriptors that follow no link; anything else is left as it is. Returns how many were.
///
/// Handing such a directory to the job's user gives them nothing of anyone else's: a run
/// directory holds one run's files (oomguard refuses one that holds another's), this job's
/// memory names it only because this job's run used it (the caller does not call this where the
/// job's user could write that memory), and everyone could read it already.
pub fn tighten_earlier<'a>(dirs: impl IntoIterator<Item = &'a str>) -> usize {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fchmod, fstat, Mode};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt;
    if !nix::unistd::Uid::effective().is_root() {
        return 0;
    }
    let Ok(base) = std::path::absolute(default_runs_base()) else {
        return 0;
    };
    let Ok(base_dir) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
        .open(&base)
    else {
        return 0;
    };
    match fstat(base_dir.as_raw_fd()) {
        Ok(st) if st.st_uid == 0 && st.st_mode & 0o022 == 0 => {}
        _ => return 0,
    }
    let who = crate::guard::principal::acting_for();
    let mut done = std::collections::HashSet::new();
    for dir in dirs {
        let dir = Path::new(dir);
        let Some(name) = dir
            .file_name()
            .filter(|_| dir.parent() == Some(base.as_path()))
        else {
            continue;
        };
        if done.contains(name) {
            continue;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(fd) = openat(Some(base_dir.as_raw_fd()), name, flags, Mode::empty()) else {
            continue;
        };
        // SAFETY: `openat` returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        match fstat(fd.as_raw_fd()) {
            // As an earlier version left it: readable by every user (0755, 0775), so handing
            // it over gives the job's user nothing they could not already read.
            Ok(st) if st.st_uid == 0 && st.st_mode & 0o005 == 0o005 => {}
            _ => continue,
        }
        if fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(0o700)).is_err() {
            continue;
        }
        if let Some(who) = who {
            let _ = nix::unistd::fchown(fd.as_raw_fd(), Some(who.uid), Some(who.gid));
        }
        done.insert(name.to_os_string());
    }
    done.len()
}

/// Makes a new `<base>/<UTC time>-<program>[-N]` with permission bits `mode` (less the umask).
/// The directory is made with mkdir(2), which fails if it exists, so runs started in the same
/// second (a Slurm array on a shared home) each get their own.
fn make_run_dir_in(base: &Path, program: &str, mode: u32) -> Result<PathBuf, RunDirError> {
    use std::os::unix::fs::DirBuilderExt;
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
        match std::fs::DirBuilder::new().mode(mode).create(&path) {
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
    use crate::remember::record::summary::FinalSizes;

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
            .map(|_| make_run_dir_in(base.path(), "/usr/bin/python3", 0o777).unwrap())
            .collect();
        assert_eq!(made.len(), 5);
        assert!(made
            .iter()
            .all(|p| p.is_dir() && p.to_string_lossy().contains("-python3")));
    }
}
