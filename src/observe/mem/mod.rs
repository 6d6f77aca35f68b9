//! What the job's processes hold in memory, read from /proc. Each reader takes the /proc root
//! as a path so tests can point it at a fixture directory; parsing is separate from reading.
//!
//! `tree` finds the job's PIDs, `process` reads one process, `tree_mem` sums a tree, `system`
//! reads the machine. Deciding what the numbers mean (too close to the limit, an OOM coming) is
//! left to the supervisor and the policy.

pub mod process;
pub mod system;
pub mod tree;
pub mod tree_mem;

use std::io;
use std::path::Path;

/// Reads a small /proc (or cgroup) file whole. /proc files report a size of 0, so
/// `fs::read_to_string` starts from a tiny buffer, and `read_to_end` asks the file its size
/// and position first (a statx and an lseek per file, per tick); one buffer of `capacity`
/// bytes takes the whole file in one `read(2)` plus the one that sees the end.
pub(crate) fn read_proc_file(path: &Path, capacity: usize) -> io::Result<String> {
    read_whole_at(&std::fs::File::open(path)?, capacity)
}

/// Reads an open /proc or cgroup file from its start with `pread(2)`: the kernel regenerates
/// such a file at offset 0, so a file opened once can be read every tick without a path walk,
/// an open and a close.
pub(crate) fn read_whole_at(file: &std::fs::File, capacity: usize) -> io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; capacity.max(64)];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    // The kernel writes a process's name as raw bytes, cut at 15 (`Name:` of status, the
    // `(comm)` of stat), which can split a UTF-8 character: the parsers read only ASCII keys
    // and numbers, so such a process is read, not taken for gone.
    Ok(String::from_utf8(buf)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Files read over and over (every tick), kept open and read from their start with
/// `pread` ([`read_whole_at`]): a path walk, an open and a close per file per tick cost more
/// than the read itself. A handle whose read fails (its process or cgroup is gone) is dropped
/// and the path opened afresh, so a reused PID is read as the new process. At most `max`
/// handles are kept; beyond that a file is read path by path.
#[derive(Debug)]
pub(crate) struct KeptFiles<K> {
    files: std::sync::Mutex<std::collections::HashMap<K, std::fs::File>>,
    max: usize,
    /// Keys whose file did not exist, not looked for again (see [`KeptFiles::missing_stays`]).
    missing: Option<std::sync::Mutex<std::collections::HashSet<K>>>,
}

impl<K: std::hash::Hash + Eq + Copy> KeptFiles<K> {
    pub(crate) fn new(max: usize) -> Self {
        KeptFiles {
            files: std::sync::Mutex::default(),
            max,
            missing: None,
        }
    }

    /// For files that cannot appear later (a cgroup's control files, /proc/pressure): one that
    /// is not there is not looked for again each tick. Not for per-process files: a PID that
    /// is gone may come back as a new process.
    pub(crate) fn missing_stays(mut self) -> Self {
        self.missing = Some(std::sync::Mutex::default());
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<K, std::fs::File>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `use_file` applied to the kept handle for `key` (opened from `path` on first use).
    pub(crate) fn with<T>(
        &self,
        key: K,
        path: impl FnOnce() -> std::path::PathBuf,
        use_file: impl Fn(&std::fs::File) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut files = self.lock();
        if let Some(file) = files.get(&key) {
            match use_file(file) {
                Ok(value) => return Ok(value),
                Err(_) => {
                    files.remove(&key);
                }
            }
        }
        let known_missing = |key: &K| {
            self.missing
                .as_ref()
                .map(|set| set.lock().unwrap_or_else(|e| e.into_inner()))
                .is_some_and(|set| set.contains(key))
        };
        if known_missing(&key) {
            return Err(io::ErrorKind::NotFound.into());
        }
        let file = std::fs::File::open(path()).inspect_err(|e| {
            if let (Some(set), io::ErrorKind::NotFound) = (&self.missing, e.kind()) {
                set.lock().unwrap_or_else(|e| e.into_inner()).insert(key);
            }
        })?;
        let value = use_file(&file)?;
        if files.len() < self.max {
            files.insert(key, file);
        }
        Ok(value)
    }

    /// The file for `key` read whole (see [`KeptFiles::with`]).
    pub(crate) fn read(
        &self,
        key: K,
        path: impl FnOnce() -> std::path::PathBuf,
        capacity: usize,
    ) -> io::Result<String> {
        self.with(key, path, |file| read_whole_at(file, capacity))
    }

    /// Closes the handles whose key `keep` refuses.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lock().retain(|key, _| keep(key));
    }
}

/// Parses the value part of a `Key:   1234 kB` line (status, meminfo, smaps_rollup) into
/// bytes. The kernel writes these in KiB and always says `kB`; a value without the unit is not
/// a size and gives `None`.
pub(crate) fn parse_kib_as_bytes(value: &str) -> Option<u64> {
    let mut parts = value.split_ascii_whitespace();
    let number: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => number.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kib_values() {
        let table = [
            ("    1612 kB", Some(1612 * 1024)),
            ("\t0 kB\n", Some(0)),
            ("0", None),
            ("12 MB", None),
            ("x kB", None),
            ("", None),
            ("18446744073709551615 kB", None),
        ];
        for (value, want) in table {
            assert_eq!(parse_kib_as_bytes(value), want, "{value:?}");
        }
    }

    #[test]
    fn reads_whole_proc_files() {
        let status = read_proc_file(Path::new("/proc/self/status"), 16).unwrap();
        assert!(status.contains("VmRSS:"), "{status}");
        assert!(read_proc_file(Path::new("/no/such/file"), 16).is_err());
    }

    #[test]
    fn kept_files_read_afresh_each_time_and_reopen_after_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter");
        std::fs::write(&path, "1\n").unwrap();
        let kept = KeptFiles::new(1);
        let read = |kept: &KeptFiles<u8>, key| kept.read(key, || path.clone(), 4).unwrap();
        assert_eq!(read(&kept, 0), "1\n");
        // Rewritten in place, as the kernel regenerates a /proc or cgroup file.
        std::fs::write(&path, "22222222\n").unwrap();
        assert_eq!(read(&kept, 0), "22222222\n", "a buffer too small grows");
        // Beyond `max`, files are read path by path and not kept.
        let other = dir.path().join("other");
        std::fs::write(&other, "3\n").unwrap();
        assert_eq!(kept.read(1, || other.clone(), 4).unwrap(), "3\n");
        std::fs::remove_file(&other).unwrap();
        assert!(
            kept.read(1, || other.clone(), 4).is_err(),
            "key 1 was not kept"
        );
        assert_eq!(read(&kept, 0), "22222222\n", "key 0 still is");
        // A failing use drops the handle and opens the path again.
        let calls = std::cell::Cell::new(0);
        let value = kept
            .with(
                0,
                || path.clone(),
                |_| {
                    calls.set(calls.get() + 1);
                    if calls.get() == 1 {
                        Err(io::Error::other("gone"))
                    } else {
                        Ok(7)
                    }
                },
            )
            .unwrap();
        assert_eq!((value, calls.get()), (7, 2));
        kept.retain(|_| false);
        std::fs::remove_file(&path).unwrap();
        assert!(
            kept.read(0, || path.clone(), 4).is_err(),
            "nothing kept, nothing there"
        );
    }
}
