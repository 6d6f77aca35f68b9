//! Writing the user's directory safely: a temp file created with `O_EXCL` beside the target, given
//! the original's permissions, owner (when root), extended attributes and (for a restore) times,
//! fsynced and renamed over the target, or hard-linked to a name that must not exist yet; a file
//! with more than one name is overwritten in its own inode instead. Also the stale `__pycache__`
//! of a `.py` file just written. What to write and whether it is ours to write is the caller's
//! ([`super::edit`], [`super::restore`]); these functions run as whoever calls them.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::attrs::Xattrs;
use crate::knobs::file::{py, Format};

/// The original file's permissions, owner and times, as read at
/// [`Patcher::open`](super::Patcher::open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct FileStat {
    mode: u32,
    uid: u32,
    gid: u32,
    atime_s: i64,
    atime_ns: i64,
    mtime_s: i64,
    mtime_ns: i64,
}

impl FileStat {
    pub(super) fn of(meta: &std::fs::Metadata) -> FileStat {
        FileStat {
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
            atime_s: meta.atime(),
            atime_ns: meta.atime_nsec(),
            mtime_s: meta.mtime(),
            mtime_ns: meta.mtime_nsec(),
        }
    }

    fn times(&self) -> std::fs::FileTimes {
        std::fs::FileTimes::new()
            .set_accessed(system_time(self.atime_s, self.atime_ns))
            .set_modified(system_time(self.mtime_s, self.mtime_ns))
    }
}

fn system_time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nanos.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

/// Makes a rename or a new name in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The temp file oomguard `pid` writes before renaming it over `target`:
/// `.<name>.oomguard-<pid>.tmp`, in the same directory (a rename does not cross file systems).
pub(super) fn temp_path(target: &Path, pid: u32) -> PathBuf {
    let mut name = OsString::from(".");
    name.push(target.file_name().unwrap_or_default());
    name.push(format!(".oomguard-{pid}.tmp"));
    target.with_file_name(name)
}

/// Writes `bytes` into a new temp file beside `target` with `stat`'s permissions (and owner when
/// root), `attrs` and, if given, `times`; fsyncs it. Returns its path.
fn write_temp(
    target: &Path,
    bytes: &[u8],
    stat: &FileStat,
    times: Option<&FileStat>,
    attrs: &Xattrs,
    pid: u32,
) -> io::Result<PathBuf> {
    let mut temp = temp_path(target, pid);
    let open = |temp: &Path| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .mode(0o600)
            .open(temp)
    };
    let mut file = match open(&temp) {
        // Our PID's name: left by us, or by a dead process that had our PID.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match std::fs::remove_file(&temp) {
            Ok(()) => open(&temp)?,
            // Someone else's file at our name in a sticky directory (only they may remove
            // it): a name of our own beside it, so a name squatted there refuses no run.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                let (made, file) = open_unused_beside(&temp, open)?;
                temp = made;
                file
            }
            Err(e) => return Err(e),
        },
        other => other?,
    };
    let written = (|| {
        file.write_all(bytes)?;
        let made = file.metadata()?;
        if (made.uid(), made.gid()) != (stat.uid, stat.gid) {
            // Before the mode: chown clears set-user-ID bits. Only root may give a file away;
            // anyone else gets EPERM and the file becomes theirs, as any editor's save would.
            match std::os::unix::fs::fchown(&file, Some(stat.uid), Some(stat.gid)) {
                Err(e) if e.raw_os_error() == Some(nix::libc::EPERM) => {}
                other => other?,
            }
        }
        file.set_permissions(std::fs::Permissions::from_mode(stat.mode))?;
        // After the mode: an ACL sets the group bits from its mask, as the original had them.
        attrs.put_on(&file)?;
        if let Some(times) = times {
            file.set_times(times.times())?;
        }
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(temp)
}

/// `<temp>.<random>` that `open` can create: a temp file's name when its own was taken by
/// someone we cannot remove. Random (std's `RandomState` is seeded by the kernel's randomness),
/// so a squatter cannot take every name in advance.
fn open_unused_beside(
    temp: &Path,
    open: impl Fn(&Path) -> io::Result<File>,
) -> io::Result<(PathBuf, File)> {
    use std::hash::{BuildHasher, Hasher};
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..16 {
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let mut name = temp.as_os_str().to_owned();
        name.push(format!(".{random:016x}"));
        let candidate = PathBuf::from(name);
        match open(&candidate) {
            Ok(file) => return Ok((candidate, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Replaces `target` atomically with `bytes` (temp file, fsync, rename, fsync of the directory),
/// the new inode carrying the old one's extended attributes (its ACL among them). A file with
/// more than one name is written in its own inode instead ([`overwrite`]).
pub(super) fn replace_file(
    target: &Path,
    bytes: &[u8],
    stat: &FileStat,
    times: Option<&FileStat>,
    pid: u32,
) -> io::Result<()> {
    let current = match crate::guard::fsutil::open_regular(target) {
        Ok(file) => Some(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(file) = &current {
        if file.metadata()?.nlink() > 1 {
            return overwrite(target, bytes, times);
        }
    }
    let attrs = match &current {
        Some(file) => Xattrs::of(file)?,
        None => Xattrs::default(),
    };
    let temp = write_temp(target, bytes, stat, times, &attrs, pid)?;
    if let Err(e) = std::fs::rename(&temp, target) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    sync_dir(
        target
            .parent()
            .expect("an absolute file path has a directory"),
    )
}

/// Writes `bytes` over the inode of `target`, a file with other names (hard links) that a rename
/// would leave on the old text: from the start, then cut to length and fsynced; owner, mode,
/// ACL and attributes are the inode's own and stay. Not atomic: should oomguard die halfway,
/// the journal's backup still has the original, and the restore rule keeps the torn text as
/// someone else's with the original beside it.
fn overwrite(target: &Path, bytes: &[u8], times: Option<&FileStat>) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(target)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("it is no longer a regular file"));
    }
    std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0)?;
    file.set_len(bytes.len() as u64)?;
    if let Some(times) = times {
        file.set_times(times.times())?;
    }
    file.sync_all()
}

/// The extended attributes of the file at `path`; none when it is gone.
pub(super) fn xattrs_at(path: &Path) -> io::Result<Xattrs> {
    match crate::guard::fsutil::open_regular(path) {
        Ok(file) => Xattrs::of(&file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Xattrs::default()),
        Err(e) => Err(e),
    }
}

/// Creates `target` with `bytes` and `attrs`, complete or not at all, failing with
/// `AlreadyExists` rather than replacing a file there (a hard link of the temp file cannot
/// overwrite).
pub(super) fn create_file(
    target: &Path,
    bytes: &[u8],
    stat: &FileStat,
    attrs: &Xattrs,
    pid: u32,
) -> io::Result<()> {
    let temp = write_temp(target, bytes, stat, None, attrs, pid)?;
    let linked = std::fs::hard_link(&temp, target);
    let _ = std::fs::remove_file(&temp);
    linked?;
    sync_dir(
        target
            .parent()
            .expect("an absolute file path has a directory"),
    )
}

/// Removes the `__pycache__` files of a `.py` file just written, so Python cannot reuse a cache
/// built from the text before (see [`py::stale_pyc_paths`]).
pub(super) fn remove_stale_pyc(path: &Path) {
    if Format::from_path(path) == Some(Format::Python) {
        for pyc in py::stale_pyc_paths(path) {
            let _ = std::fs::remove_file(pyc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::patch::scene::Scene;
    use crate::knobs::patch::Mode;

    /// A file at our temp file's name that we may not remove (another user's, in a sticky
    /// directory) refuses no patch: a random name beside it is used, theirs left alone.
    #[test]
    fn a_temp_name_squatted_in_a_sticky_directory_refuses_no_patch() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED a_temp_name_squatted_in_a_sticky_directory_refuses_no_patch: not root (needs a file of another uid)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let target = dir.path().join("cfg.yaml");
        std::fs::write(&target, "batch_size: 8\n").unwrap();
        let squatted = temp_path(&target, 4242);
        std::fs::write(&squatted, "theirs").unwrap();
        std::os::unix::fs::chown(&squatted, Some(65534), Some(65534)).unwrap();
        let stat = FileStat::of(&std::fs::metadata(&target).unwrap());
        // As a user who is neither the squatter nor root (the kernel checks the fsuid).
        let who = crate::guard::principal::RunAs {
            name: "someone".into(),
            uid: nix::unistd::Uid::from_raw(65533),
            gid: nix::unistd::Gid::from_raw(65533),
            groups: vec![],
            home: "/".into(),
        };
        let temp = crate::guard::principal::as_recorded(Some(&who), || {
            write_temp(
                &target,
                b"batch_size: 4\n",
                &stat,
                None,
                &Xattrs::default(),
                4242,
            )
        })
        .unwrap();
        assert_ne!(temp, squatted);
        assert_eq!(std::fs::read(&temp).unwrap(), b"batch_size: 4\n");
        assert_eq!(std::fs::read(&squatted).unwrap(), b"theirs");
    }

    #[test]
    fn writing_a_python_file_removes_its_stale_pyc() {
        let s = Scene::new();
        let src = "class TrainConfig:\n    batch_size_per_gpu = 8\n";
        let patched = "class TrainConfig:\n    batch_size_per_gpu = 4\n";
        let path = s.file("config.py", src);
        let cache = s.configs.join("__pycache__");
        std::fs::create_dir(&cache).unwrap();
        let pyc = cache.join("config.cpython-311.pyc");
        let other = cache.join("configs.cpython-311.pyc");
        let mut p = s.open(&[(&path, Mode::InPlace)]).unwrap();
        for text in [patched, src] {
            std::fs::write(&pyc, "stale").unwrap();
            p.write(0, text).unwrap();
            assert!(!pyc.exists(), "{text:?}");
        }
        p.write(0, patched).unwrap();
        std::fs::write(&pyc, "stale").unwrap();
        std::fs::write(&other, "another module's").unwrap();
        p.finish();
        assert!(
            !pyc.exists(),
            "the restore left a cache of the patched text"
        );
        assert!(other.exists());
        assert_eq!(std::fs::read(&path).unwrap(), src.as_bytes());
        // A copy's cache files go with it.
        let mut p = s.open(&[(&path, Mode::Copy)]).unwrap();
        let copy = p.write(0, patched).unwrap().unwrap();
        let copy_pyc = cache.join(format!(
            "{}.cpython-311.pyc",
            copy.file_stem().unwrap().to_str().unwrap()
        ));
        std::fs::write(&copy_pyc, "compiled by the job").unwrap();
        p.finish();
        assert!(!copy_pyc.exists());
        assert!(!copy.exists());
    }
}
