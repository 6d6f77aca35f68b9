//! Small pieces several writers of oomguard's own files share: a hash that names files the same
//! way in every build (std's hasher is not promised to), a file-name-safe rendering of a name a
//! person should recognise, and the write-then-rename that replaces a file whole.
//!
//! Also the reading of a file someone else may have replaced: opened without blocking (a FIFO
//! in its place must not hang oomguard), refused unless it is a regular file (`/dev/zero` behind
//! a symlink never ends), and read up to a cap. And renameat2(2) by its system call, for a
//! binary linked against glibc 2.17 (the wheel), whose glibc has no wrapper for it.
//!
//! It picks no names and no places; each caller decides where its files live and how its
//! temporary file is made (unique in a user's run directory, private 0600 in the state dir).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most oomguard reads of a config file (a knob's file) or of its own small records (job
/// memory, summary.json): far above any real one, far below what would strain memory.
pub const SMALL_FILE_MAX_BYTES: u64 = 64 << 20;

/// Opens `path` for reading, refused unless it is a regular file (symlinks followed): the open
/// does not wait for a FIFO's writer, and a FIFO, device or directory there is an
/// `InvalidInput` error saying what it is. A missing file stays `NotFound`.
///
/// The file's type is checked before it is opened for reading: the first open is `O_PATH`,
/// which does nothing to what it names (a device's driver is never called, a tape never
/// rewound), and the regular file found is then opened through that very handle
/// (`/proc/self/fd/N`), so what is read is what was checked even if the name is swapped.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_PATH)
        .open(path)?;
    let kind = handle.metadata()?.file_type();
    if kind.is_file() {
        use std::os::fd::AsRawFd;
        // Reads of a regular file never wait: O_NONBLOCK changes nothing for them. O_NOCTTY:
        // should the name ever reach a terminal, it never becomes oomguard's controlling one.
        return std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
            .open(format!("/proc/self/fd/{}", handle.as_raw_fd()));
    }
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a plain file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    ))
}

/// The bytes of the regular file at `path` ([`open_regular`]), refused (`InvalidData`) when
/// longer than `max_bytes`: a file grown without bound is not read into memory.
pub fn read_regular_capped(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    read_capped(open_regular(path)?, max_bytes)
}

/// Everything `reader` gives, refused (`InvalidData`) when longer than `max_bytes`.
pub fn read_capped(reader: impl Read, max_bytes: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is larger than {max_bytes} bytes"),
        ));
    }
    Ok(bytes)
}

/// Text files read once each, known by the file an open reached (device and inode): one named
/// again, or through another path or link, is given from memory, never read or held twice. For
/// readers that follow what a user's files name (a config's defaults list, a command's
/// repeated `--config`), so that what they hold is bounded by the distinct files' bytes.
#[derive(Debug, Default)]
pub struct ReadOnce {
    texts: std::collections::HashMap<(u64, u64), std::rc::Rc<str>>,
}

/// What [`ReadOnce::text`] found.
#[derive(Debug)]
pub enum Once {
    /// Read before: its text, from memory.
    Again(std::rc::Rc<str>),
    /// Read now, for the first time.
    New(std::rc::Rc<str>),
    /// Not read before, and longer than the bytes allowed: nothing of it is kept.
    TooLong,
}

impl ReadOnce {
    /// The text of the regular file at `path` ([`open_regular`]). A file not read before is read
    /// up to `max_bytes` only ([`Once::TooLong`] past it); one that is not UTF-8 is an
    /// `InvalidData` error. Opened with the caller's identity: wrap it in
    /// [`crate::guard::principal::as_user`] for a user's file.
    pub fn text(&mut self, path: &Path, max_bytes: u64) -> io::Result<Once> {
        use std::os::unix::fs::MetadataExt;
        let file = open_regular(path)?;
        let meta = file.metadata()?;
        let id = (meta.dev(), meta.ino());
        if let Some(text) = self.texts.get(&id) {
            return Ok(Once::Again(std::rc::Rc::clone(text)));
        }
        let mut bytes = Vec::new();
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max_bytes {
            return Ok(Once::TooLong);
        }
        let text: std::rc::Rc<str> = String::from_utf8(bytes)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))?
            .into();
        self.texts.insert(id, std::rc::Rc::clone(&text));
        Ok(Once::New(text))
    }
}

/// Creates a new file at the first free `name(n)` for n in 0..100 with `options` (which must ask
/// for `create_new`: a file or link someone put at a name is never opened, only skipped).
/// Returns its path and handle.
pub fn create_new_numbered(
    options: &std::fs::OpenOptions,
    name: impl Fn(u32) -> std::path::PathBuf,
) -> io::Result<(std::path::PathBuf, File)> {
    let mut last = None;
    for n in 0..100u32 {
        let path = name(n);
        match options.open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("the loop ran at least once"))
}

/// 64-bit FNV-1a. Its values end up in file names other oomguard builds must find again (job
/// memory, patch locks), so it must never change.
pub struct Fnv64(pub u64);

impl Fnv64 {
    pub fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Length first, so `["ab", "c"]` and `["a", "bc"]` differ.
    pub fn write_len_prefixed(&mut self, bytes: &[u8]) {
        self.write(&(bytes.len() as u64).to_le_bytes());
        self.write(bytes);
    }

    /// The hash of `bytes` alone.
    pub fn of(bytes: &[u8]) -> u64 {
        let mut hash = Fnv64::new();
        hash.write(bytes);
        hash.0
    }
}

impl Default for Fnv64 {
    fn default() -> Self {
        Self::new()
    }
}

/// The first 40 characters of `text`, each kept if it is an ASCII letter or digit or one of
/// `also`, else `_`: a readable part of a file name.
pub fn file_safe(text: &str, also: &[char]) -> String {
    text.chars()
        .take(40)
        .map(|c| {
            if c.is_ascii_alphanumeric() || also.contains(&c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `bytes` into `file` (just created at `temp`, beside `target`), syncs it when
/// `sync`, and renames it over `target`, so a reader sees the old file or the new one, never a
/// part; on any failure the temporary file is removed.
pub fn write_then_rename(
    mut file: File,
    temp: &Path,
    target: &Path,
    bytes: &[u8],
    sync: bool,
) -> io::Result<()> {
    let written = file
        .write_all(bytes)
        .and_then(|()| if sync { file.sync_all() } else { Ok(()) })
        .and_then(|()| std::fs::rename(temp, target));
    if written.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    written
}

/// Eight bytes from the kernel's random source: part of a file name another user must not be
/// able to guess (and so take first) in a directory everyone writes. getrandom(2) by its system
/// call (glibc 2.17, the wheel's, has no wrapper), `/dev/urandom` where the kernel lacks it.
pub fn random_u64() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: the kernel writes at most `bytes.len()` bytes into `bytes`, alive for the call.
    let got =
        unsafe { nix::libc::syscall(nix::libc::SYS_getrandom, bytes.as_mut_ptr(), bytes.len(), 0) };
    if got != bytes.len() as i64 {
        File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    }
    Ok(u64::from_le_bytes(bytes))
}

/// renameat2(2) through its system call rather than glibc's wrapper, which only glibc 2.28 and
/// later have: the wheel's binary is linked against glibc 2.17 (manylinux2014) so that it runs
/// on older servers. The kernel call (Linux 3.15) is the same either way, and a kernel without it
/// answers ENOSYS, as the wrapper would. `None` for a directory is the current one (AT_FDCWD).
pub fn renameat2(
    old_dir: Option<std::os::fd::RawFd>,
    old: &std::ffi::OsStr,
    new_dir: Option<std::os::fd::RawFd>,
    new: &std::ffi::OsStr,
    flags: nix::fcntl::RenameFlags,
) -> nix::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &std::ffi::OsStr| {
        std::ffi::CString::new(p.as_bytes()).map_err(|_| nix::errno::Errno::EINVAL)
    };
    let (old, new) = (c(old)?, c(new)?);
    // SAFETY: both paths are NUL-terminated strings that outlive the call; the descriptors are
    // plain integers the kernel checks; renameat2 takes exactly these five arguments.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_renameat2,
            old_dir.unwrap_or(nix::libc::AT_FDCWD),
            old.as_ptr(),
            new_dir.unwrap_or(nix::libc::AT_FDCWD),
            new.as_ptr(),
            flags.bits(),
        )
    };
    nix::errno::Errno::result(rc).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renameat2_by_syscall_never_replaces_with_noreplace_and_swaps_with_exchange() {
        use nix::fcntl::RenameFlags;
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "A").expect("a");
        std::fs::write(&b, "B").expect("b");
        let noreplace = renameat2(
            None,
            a.as_os_str(),
            None,
            b.as_os_str(),
            RenameFlags::RENAME_NOREPLACE,
        );
        assert_eq!(noreplace, Err(nix::errno::Errno::EEXIST));
        renameat2(
            None,
            a.as_os_str(),
            None,
            b.as_os_str(),
            RenameFlags::RENAME_EXCHANGE,
        )
        .expect("exchange");
        assert_eq!(std::fs::read_to_string(&a).expect("a"), "B");
        assert_eq!(std::fs::read_to_string(&b).expect("b"), "A");
        let c = dir.path().join("c");
        renameat2(
            None,
            a.as_os_str(),
            None,
            c.as_os_str(),
            RenameFlags::RENAME_NOREPLACE,
        )
        .expect("to a free name");
        assert_eq!(std::fs::read_to_string(&c).expect("c"), "B");
        assert!(!a.exists());
    }

    #[test]
    fn fnv_is_the_published_fnv1a() {
        // The FNV-1a 64 test vectors: names made by earlier builds stay found.
        assert_eq!(Fnv64::of(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(Fnv64::of(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(Fnv64::of(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn file_safe_keeps_what_it_is_told() {
        assert_eq!(file_safe("train v2.py", &['.']), "train_v2.py");
        assert_eq!(file_safe("train v2.py", &['-', '_']), "train_v2_py");
        assert_eq!(file_safe(&"é".repeat(50), &[]).len(), 40);
    }

    #[test]
    fn only_regular_files_are_read_and_only_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "12345").unwrap();
        assert_eq!(read_regular_capped(&plain, 5).unwrap(), b"12345");
        let err = read_regular_capped(&plain, 4).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (path, what) in [
            (&fifo, "a FIFO"),
            (&zero, "a device"),
            (&dir.path().to_path_buf(), "a directory"),
        ] {
            let err = read_regular_capped(path, 1 << 20).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
            assert!(err.to_string().contains(what), "{err}");
        }
        let missing = read_regular_capped(&dir.path().join("missing"), 1).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }

    /// A file is read once however it is reached again (its name, a link to it), within the
    /// bytes allowed; one past them is not kept, one that is not UTF-8 is an error.
    #[test]
    fn read_once_reads_each_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let (a, link, long, bytes) = (
            dir.path().join("a"),
            dir.path().join("link"),
            dir.path().join("long"),
            dir.path().join("bytes"),
        );
        std::fs::write(&a, "text").unwrap();
        std::os::unix::fs::symlink(&a, &link).unwrap();
        std::fs::write(&long, "12345").unwrap();
        std::fs::write(&bytes, [0xff, 0xfe]).unwrap();
        let mut once = ReadOnce::default();
        let Ok(Once::New(first)) = once.text(&a, 4) else {
            panic!("not read new")
        };
        for path in [&a, &link] {
            match once.text(path, 0) {
                Ok(Once::Again(text)) => assert!(std::rc::Rc::ptr_eq(&text, &first)),
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        assert!(matches!(once.text(&long, 4), Ok(Once::TooLong)));
        assert!(matches!(once.text(&long, 5), Ok(Once::New(t)) if &*t == "12345"));
        let err = once.text(&bytes, 10).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    /// What is not a regular file is never opened for reading: inotify sees no open of a FIFO
    /// (or of a device: the same path) that is refused.
    #[test]
    fn what_is_refused_is_never_opened() {
        use nix::libc;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        // SAFETY: plain system calls on descriptors this test owns.
        let opens = |path: &Path, open: &dyn Fn()| unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0);
            let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            assert!(libc::inotify_add_watch(fd, name.as_ptr(), libc::IN_OPEN) >= 0);
            open();
            let mut buf = [0u8; 4096];
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            n > 0
        };
        // Kernels before about 6.5 report an O_PATH open to inotify too: there the watch
        // cannot tell the two opens apart.
        let o_path = || {
            let _ = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_PATH)
                .open(&fifo);
        };
        if opens(&fifo, &o_path) {
            eprintln!("SKIPPED what_is_refused_is_never_opened: this kernel reports O_PATH opens to inotify");
            return;
        }
        assert!(
            !opens(&fifo, &|| assert!(open_regular(&fifo).is_err())),
            "the FIFO was opened before it was refused"
        );
        // The watch does see a real open: the test can fail.
        assert!(opens(&plain, &|| assert!(open_regular(&plain).is_ok())));
    }

    #[test]
    fn write_then_rename_replaces_whole_or_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (temp, target) = (dir.path().join(".t.tmp"), dir.path().join("t"));
        std::fs::write(&target, "old").unwrap();
        write_then_rename(File::create(&temp).unwrap(), &temp, &target, b"new", true).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert!(!temp.exists());
        // A rename that cannot happen (the target is a directory) removes the temporary file.
        let blocked = dir.path().join("d");
        std::fs::create_dir_all(blocked.join("inner")).unwrap();
        let err = write_then_rename(File::create(&temp).unwrap(), &temp, &blocked, b"x", false);
        assert!(err.is_err());
        assert!(!temp.exists());
    }
}
