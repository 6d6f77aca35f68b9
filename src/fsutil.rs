//! Small pieces several writers of oomguard's own files share: a hash that names files the same
//! way in every build (std's hasher is not promised to), a file-name-safe rendering of a name a
//! person should recognise, and the write-then-rename that replaces a file whole.
//!
//! It picks no names and no places; each caller decides where its files live and how its
//! temporary file is made (unique in a user's run directory, private 0600 in the state dir).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

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

#[cfg(test)]
mod tests {
    use super::*;

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
