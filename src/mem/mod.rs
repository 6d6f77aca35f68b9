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

use std::io::{self, Read};
use std::path::Path;

/// Reads a small /proc file whole. /proc files report a size of 0, so `fs::read_to_string`
/// starts from a tiny buffer (a 32-byte probe read, then doubling); one buffer of `capacity`
/// bytes takes the whole file in one `read(2)` plus the one that sees the end.
pub(crate) fn read_proc_file(path: &Path, capacity: usize) -> io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = Vec::with_capacity(capacity);
    file.read_to_end(&mut buf)?;
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
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
}
