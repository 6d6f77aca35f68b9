//! Kernel evidence of OOM kills that needs no cgroup: the machine-wide `oom_kill` counter in
//! /proc/vmstat (read before and after an attempt) and new records of the kernel log
//! (/dev/kmsg, when readable) that name a victim PID. Readers take their paths so tests can use
//! fixtures; the parsers work on strings.
//!
//! Deciding whether a victim belonged to the job is [`crate::supervise`]'s job; naming the cause is
//! [`crate::judge::classify`]'s.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Parses the `oom_kill` line of /proc/vmstat, e.g. `"oom_kill 3\n"` among ~150 other counters.
pub fn parse_vmstat_oom_kill(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

/// Reads the machine-wide count of OOM kills (kernel >= 4.13); `None` when unreadable.
pub fn read_vmstat_oom_kill(path: &Path) -> Option<u64> {
    parse_vmstat_oom_kill(&std::fs::read_to_string(path).ok()?)
}

/// The message of one /dev/kmsg record, e.g.
/// `"3,1234,5678901,-;Memory cgroup out of memory: Killed process 4242 (python3) total-vm:..."`
/// (see Documentation/ABI/testing/dev-kmsg). Continuation lines (starting with a space) are not
/// messages.
pub fn parse_kmsg_record(record: &str) -> Option<&str> {
    let (_prefix, message) = record.split_once(';')?;
    Some(message.lines().next().unwrap_or("").trim_end())
}

/// A reader of kernel log records written after it was opened.
pub struct Kmsg {
    file: File,
}

impl Kmsg {
    /// Opens the kernel log positioned at its end, so only new records are read. `None` when it
    /// is not readable (unprivileged user with `kernel.dmesg_restrict=1`, containers).
    pub fn open_at_end(path: &Path) -> Option<Kmsg> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)
            .ok()?;
        file.seek(SeekFrom::End(0)).ok()?;
        Some(Kmsg { file })
    }

    /// Every record message written since the last call. Never blocks.
    pub fn read_new(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        // One read returns one record; records are at most 8 KiB with their dictionary.
        let mut buf = vec![0u8; 8192];
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if let Some(message) = parse_kmsg_record(&text) {
                        out.push(message.to_string());
                    }
                }
                // EPIPE: records were overwritten before we read them; the next read resumes
                // at the oldest record still there.
                Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break, // EAGAIN: nothing new
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmstat() {
        let text = "nr_free_pages 123\noom_kill 3\nnuma_hit 9\n";
        assert_eq!(parse_vmstat_oom_kill(text), Some(3));
        assert_eq!(parse_vmstat_oom_kill("nr_free_pages 1\n"), None);
        assert_eq!(parse_vmstat_oom_kill("oom_kill_x 1\n"), None);
    }

    #[test]
    fn parses_kmsg_records() {
        let table = [
            (
                "3,1234,5678901,-;Memory cgroup out of memory: Killed process 4242 (python3) total-vm:1kB\n SUBSYSTEM=x\n",
                Some("Memory cgroup out of memory: Killed process 4242 (python3) total-vm:1kB"),
            ),
            ("6,1,2,-;hello", Some("hello")),
            ("garbage", None),
        ];
        for (record, want) in table {
            assert_eq!(parse_kmsg_record(record), want);
        }
    }

    #[test]
    fn reads_the_real_vmstat_where_present() {
        if Path::new("/proc/vmstat").exists() {
            assert!(read_vmstat_oom_kill(Path::new("/proc/vmstat")).is_some());
        }
        assert_eq!(read_vmstat_oom_kill(Path::new("/no/such/vmstat")), None);
    }
}
