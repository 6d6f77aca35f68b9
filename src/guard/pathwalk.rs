//! Opens a file once, by walking its path one component at a time from `/`, and records every
//! directory, symlink and the file met on the way with its owner and mode: what a caller needs to
//! decide who could have chosen the file's contents (see [`crate::guard::ownership::check_steps`]).
//!
//! Each component is opened with `O_PATH | O_NOFOLLOW` relative to the directory before it; a
//! symlink's target is read from the opened link itself (`readlinkat(fd, "")`) and walked the
//! same way, so the path that is checked is the path that is opened: a symlink swapped between
//! the check and the read (the race a `canonicalize` then `open` leaves) changes nothing, since
//! nothing is looked up twice. The file itself must be a regular file as walked (a device is
//! never opened, a FIFO never waited on), is reopened for reading through the walked descriptor
//! (`/proc/self/fd/N`, `O_NONBLOCK | O_NOCTTY`), checked to be the same inode, and read from that
//! descriptor, at most [`MAX_BYTES`].
//!
//! `/dev/fd/N` and `/proc/self/fd/N` (a shell's `<(...)`) are read from the inherited
//! descriptor N: such a file was handed over by whoever started oomguard.
//!
//! It decides nothing about trust; [`crate::front::runas`] does, from the steps.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{openat, readlinkat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

/// The most a job file may hold: far above any real one, small enough that a file pointed at
/// `/dev/zero`'s like cannot fill memory.
pub const MAX_BYTES: u64 = 1 << 20;

/// Symlinks followed before giving up, as the kernel's own limit (`ELOOP`).
const MAX_LINKS: u32 = 40;

/// What a step of the walk was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    Symlink,
    File,
}

/// One component met on the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The path of this component as walked (symlinks above it already replaced by targets).
    pub path: PathBuf,
    pub kind: Kind,
    pub uid: u32,
    /// Its group: who a group-writable step lets change it.
    pub gid: u32,
    /// The permission bits, with the sticky bit (`mode & 0o7777`).
    pub mode: u32,
    /// Whether the directory holding it has the sticky bit: there, an entry's owner may replace
    /// it even without write access to the directory.
    pub in_sticky_dir: bool,
}

/// A file opened by [`read`]: what was read, and how it was reached.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Opened {
    /// The file's path with every symlink resolved.
    pub resolved: PathBuf,
    /// Every directory, symlink and the file, in walk order. Empty for an inherited descriptor.
    pub steps: Vec<Step>,
    /// Read from a descriptor oomguard was started with (`/dev/fd/N`), not from a path.
    pub inherited: bool,
}

/// Opens `path` as described in the module doc and reads it whole.
pub fn read(path: &Path) -> io::Result<(Vec<u8>, Opened)> {
    if let Some(fd) = inherited_fd(path) {
        // Not owned: the descriptor is the caller's; a duplicate is read and closed.
        let dup = nix::unistd::dup(fd).map_err(io::Error::from)?;
        // SAFETY: `dup` returned a new descriptor that nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(dup) });
        let kind = fstat(file.as_raw_fd()).map_err(io::Error::from)?.st_mode;
        let kind = SFlag::from_bits_truncate(kind & SFlag::S_IFMT.bits());
        if kind != SFlag::S_IFREG && kind != SFlag::S_IFIFO {
            return Err(not_a_file(path));
        }
        let bytes = crate::guard::fsutil::read_capped(file, MAX_BYTES)?;
        let opened = Opened {
            resolved: path.to_path_buf(),
            steps: Vec::new(),
            inherited: true,
        };
        return Ok((bytes, opened));
    }
    let (file, opened) = open(path)?;
    Ok((crate::guard::fsutil::read_capped(file, MAX_BYTES)?, opened))
}

/// The descriptor number of `/dev/fd/N` or `/proc/self/fd/N`.
fn inherited_fd(path: &Path) -> Option<i32> {
    let text = path.as_os_str().to_str()?;
    let n = text
        .strip_prefix("/dev/fd/")
        .or_else(|| text.strip_prefix("/proc/self/fd/"))?;
    n.parse::<i32>().ok().filter(|fd| *fd >= 0)
}

/// Walks `path` from `/` and opens the regular file at its end for reading.
pub fn open(path: &Path) -> io::Result<(File, Opened)> {
    let (steps, end) = walk(path, false)?;
    let End::File(fd, here) = end else {
        return Err(io::Error::from_raw_os_error(nix::libc::EISDIR));
    };
    // Judged from the walked, unopened inode: a device is never opened (opening some, a
    // watchdog, acts), a FIFO never waited on.
    let walked = fstat(fd.as_raw_fd()).map_err(io::Error::from)?;
    if walked.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
        return Err(not_a_file(&here));
    }
    // Reopened through the walked descriptor itself: no name is looked up again.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let opened = fstat(file.as_raw_fd()).map_err(io::Error::from)?;
    if (walked.st_dev, walked.st_ino) != (opened.st_dev, opened.st_ino) {
        return Err(io::Error::other(format!(
            "{} was replaced while it was being opened",
            here.display()
        )));
    }
    Ok((
        file,
        Opened {
            resolved: here,
            steps,
            inherited: false,
        },
    ))
}

/// The steps to a directory oomguard will make files in (or make): every existing directory and
/// symlink on its path, up to where the path stops existing (what is missing, oomguard makes
/// below the last step). A path through a file is an error.
pub fn walk_to_dir(path: &Path) -> io::Result<Vec<Step>> {
    match walk(path, true)? {
        (steps, End::Dir | End::Missing) => Ok(steps),
        (_, End::File(..)) => Err(io::Error::from_raw_os_error(nix::libc::ENOTDIR)),
    }
}

/// Where a walk ended.
enum End {
    /// On a directory (the last step).
    Dir,
    /// At a component that does not exist (allowed only when asked).
    Missing,
    /// On a non-directory, opened `O_PATH` (its step is the last).
    File(OwnedFd, PathBuf),
}

/// The walk itself (see the module doc): every step recorded; `stop_at_missing` ends it at the
/// first component that does not exist instead of failing.
fn walk(path: &Path, stop_at_missing: bool) -> io::Result<(Vec<Step>, End)> {
    let absolute = std::path::absolute(path)?;
    let mut todo: VecDeque<OsString> = components(&absolute);
    let root = open_path(None, OsStr::new("/"))?;
    let mut steps = vec![step_of(&root, PathBuf::from("/"), false)?];
    // The directories walked so far, each with whether it is sticky: `..` goes back one of
    // them, never through a link.
    let root_sticky = steps[0].mode & 0o1000 != 0;
    let mut dirs: Vec<(OwnedFd, PathBuf, bool)> = vec![(root, PathBuf::from("/"), root_sticky)];
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        let (dir, dir_path, dir_sticky) = dirs.last().expect("the root is never popped");
        let dir_sticky = *dir_sticky;
        if name == ".." {
            if dirs.len() > 1 {
                dirs.pop();
            }
            continue;
        }
        let here = dir_path.join(&name);
        let fd = match open_path(Some(dir), &name) {
            Err(e) if stop_at_missing && e.kind() == io::ErrorKind::NotFound => {
                return Ok((steps, End::Missing))
            }
            other => other?,
        };
        let step = step_of(&fd, here.clone(), dir_sticky)?;
        match step.kind {
            Kind::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(nix::libc::ELOOP));
                }
                let target = readlinkat(Some(fd.as_raw_fd()), "").map_err(io::Error::from)?;
                steps.push(step);
                let target = PathBuf::from(target);
                if target.is_absolute() {
                    dirs.truncate(1);
                }
                for part in components(&target).into_iter().rev() {
                    todo.push_front(part);
                }
            }
            Kind::Dir => {
                let sticky = step.mode & 0o1000 != 0;
                steps.push(step);
                dirs.push((fd, here, sticky));
            }
            Kind::File if todo.is_empty() => {
                steps.push(step);
                return Ok((steps, End::File(fd, here)));
            }
            Kind::File => return Err(io::Error::from_raw_os_error(nix::libc::ENOTDIR)),
        }
    }
    Ok((steps, End::Dir))
}

fn not_a_file(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{} is not a regular file (a FIFO, a device or a socket): give a file",
        path.display()
    ))
}

/// The named components of `path` (`.` dropped, `..` kept, `/` implied).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn open_path(dir: Option<&OwnedFd>, name: &OsStr) -> io::Result<OwnedFd> {
    let fd = openat(
        dir.map(|d| d.as_raw_fd()),
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    // SAFETY: `openat` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn step_of(fd: &OwnedFd, path: PathBuf, in_sticky_dir: bool) -> io::Result<Step> {
    let st = fstat(fd.as_raw_fd()).map_err(io::Error::from)?;
    let kind = match st.st_mode & SFlag::S_IFMT.bits() {
        k if k == SFlag::S_IFDIR.bits() => Kind::Dir,
        k if k == SFlag::S_IFLNK.bits() => Kind::Symlink,
        _ => Kind::File,
    };
    Ok(Step {
        path,
        kind,
        uid: st.st_uid,
        gid: st.st_gid,
        mode: st.st_mode & 0o7777,
        in_sticky_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn the_walk_records_every_link_and_directory_and_reads_the_target() {
        let top = tempfile::tempdir().unwrap();
        let real = top.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("job.toml"), "x = 1\n").unwrap();
        symlink("real", top.path().join("alias")).unwrap();
        symlink("../real/job.toml", real.join("link.toml")).unwrap();
        let (bytes, opened) = read(&top.path().join("alias/link.toml")).unwrap();
        assert_eq!(bytes, b"x = 1\n");
        let top = std::fs::canonicalize(top.path()).unwrap();
        assert_eq!(opened.resolved, top.join("real/job.toml"));
        let links: Vec<_> = opened
            .steps
            .iter()
            .filter(|s| s.kind == Kind::Symlink)
            .map(|s| s.path.clone())
            .collect();
        assert_eq!(links, [top.join("alias"), top.join("real/link.toml")]);
        assert_eq!(opened.steps[0].path, Path::new("/"));
        assert_eq!(opened.steps.last().unwrap().kind, Kind::File);
    }

    #[test]
    fn a_fifo_a_directory_and_a_loop_are_refused_without_hanging() {
        let top = tempfile::tempdir().unwrap();
        let fifo = top.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        assert!(read(&fifo)
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
        assert_eq!(
            read(top.path()).unwrap_err().raw_os_error(),
            Some(nix::libc::EISDIR)
        );
        symlink("b", top.path().join("a")).unwrap();
        symlink("a", top.path().join("b")).unwrap();
        assert_eq!(
            read(&top.path().join("a")).unwrap_err().raw_os_error(),
            Some(nix::libc::ELOOP)
        );
    }

    #[test]
    fn an_inherited_pipe_is_read_and_a_huge_file_refused() {
        let (reader, writer) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&writer, b"name = \"piped\"\n").unwrap();
        drop(writer);
        let path = PathBuf::from(format!("/dev/fd/{}", reader.as_raw_fd()));
        let (bytes, opened) = read(&path).unwrap();
        assert_eq!(bytes, b"name = \"piped\"\n");
        assert!(opened.inherited);
        let top = tempfile::tempdir().unwrap();
        let big = top.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_BYTES as usize + 1]).unwrap();
        assert!(read(&big).unwrap_err().to_string().contains("larger than"));
    }
}
