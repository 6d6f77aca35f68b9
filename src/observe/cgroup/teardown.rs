//! Killing everything in a cgroup and removing it with the cgroups below it, for a caller that
//! holds a [`JobCgroup`] or only the path (the guard process, when oomguard died without
//! cleaning up). Version-blind: `cgroup.kill` exists only on v2 (kernel >= 5.14), so its
//! presence decides the method, and v1 and v2 both list PIDs in `cgroup.procs`.
//!
//! Which cgroup to remove, and when, is left to the callers.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::Signal;

use super::parse::parse_pids;
#[cfg(doc)]
use super::JobCgroup;
use super::{io_error, write_file, CgroupError};

/// Passes of "read cgroup.procs, SIGKILL the new PIDs" before [`JobCgroup::kill_all`] gives up
/// on a job that forks faster than it is killed (v1, or v2 without `cgroup.kill`).
const KILL_PASSES: usize = 64;

/// [`JobCgroup::kill_all`] for the cgroup at `dir`. `cgroup.kill` exists only on v2 (kernel >=
/// 5.14), so its presence decides the method and no version is needed.
pub(super) fn kill_all_at(dir: &Path) -> Result<(), CgroupError> {
    let kill_file = dir.join("cgroup.kill");
    if kill_file.exists() {
        return write_file(&kill_file, "1").map_err(io_error("write", &kill_file));
    }
    let me = std::process::id();
    let mut signalled = HashSet::new();
    for _ in 0..KILL_PASSES {
        let new: Vec<u32> = pids_below(dir)
            .into_iter()
            .filter(|pid| signalled.insert(*pid))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        // Each pinned by a pidfd first, then the cgroup listed once: a process pinned and still
        // listed is ours to kill; one that left (or ended, its number given to someone else's)
        // is not.
        let mut pinned = Vec::with_capacity(new.len());
        for pid in new {
            if pid == me {
                tracing::warn!(dir = %dir.display(), "oomguard is inside the attempt cgroup; not killing itself");
                continue;
            }
            if let Some(p) = crate::guard::pinned::Pinned::pin(pid).map_err(kill_error(pid, dir))? {
                pinned.push((pid, p));
            }
        }
        let listed: HashSet<u32> = pids_below(dir).into_iter().collect();
        for (pid, p) in pinned.iter().filter(|(pid, _)| listed.contains(pid)) {
            p.signal(Signal::SIGKILL).map_err(kill_error(*pid, dir))?;
        }
    }
    let pids = pids_below(dir);
    if pids.iter().all(|pid| signalled.contains(pid)) {
        Ok(())
    } else {
        Err(CgroupError::StillPopulated {
            path: dir.to_path_buf(),
            pids,
            waited: Duration::ZERO,
        })
    }
}

/// SIGKILLs everything in the cgroup at `dir` and below it (as [`JobCgroup::kill_all`]), polls
/// at most `timeout` until no process is left, then removes it, cgroups below it first. What
/// [`JobCgroup::remove`] does, for a caller that has only the path: the guard process, when
/// oomguard died without removing its attempt cgroup. A cgroup already gone is fine. The
/// killed processes must be reaped by someone (their parent, or the subreaper or init that
/// inherited them): on some kernels a zombie keeps its cgroup busy, and then this fails with
/// [`CgroupError::StillPopulated`] after `timeout`.
pub fn kill_and_remove(dir: &Path, timeout: Duration) -> Result<(), CgroupError> {
    if !dir.exists() {
        return Ok(());
    }
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let pids = pids_below(dir);
        if pids.is_empty() {
            match remove_tree(dir) {
                Ok(()) => {
                    tracing::debug!(dir = %dir.display(), "removed attempt cgroup");
                    return Ok(());
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
                // Exiting tasks can keep a cgroup busy a moment after leaving cgroup.procs.
                Err(err) if err.raw_os_error() == Some(Errno::EBUSY as i32) => {}
                Err(err) => return Err(io_error("remove cgroup", dir)(err)),
            }
        } else {
            // Kill again each poll: catches anything forked after the previous pass.
            kill_all_at(dir)?;
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(CgroupError::StillPopulated {
                path: dir.to_path_buf(),
                pids: pids_below(dir),
                waited,
            });
        }
        std::thread::sleep(pause.min(timeout - waited));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

pub(super) fn read_pids(dir: &Path) -> Vec<u32> {
    crate::observe::mem::read_proc_file(&dir.join("cgroup.procs"), 4096)
        .map(|text| parse_pids(&text))
        .unwrap_or_default()
}

/// The cgroups the job made below `dir` (cgroup directories hold only files and child cgroups).
pub(super) fn child_cgroups(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path())
        .collect()
}

/// PIDs in `dir` and every cgroup below it.
pub(super) fn pids_below(dir: &Path) -> Vec<u32> {
    let mut out = read_pids(dir);
    for child in child_cgroups(dir) {
        out.extend(pids_below(&child));
    }
    out
}

/// Removes `dir` and the cgroups below it, deepest first. On cgroupfs rmdir removes a cgroup
/// with its control files; elsewhere (the fake trees of tests) the files go first.
pub(super) fn remove_tree(dir: &Path) -> io::Result<()> {
    for child in child_cgroups(dir) {
        remove_tree(&child)?;
    }
    match fs::remove_dir(dir) {
        Err(err) if err.raw_os_error() == Some(Errno::ENOTEMPTY as i32) && !is_cgroupfs(dir) => {
            fs::remove_dir_all(dir)
        }
        other => other,
    }
}

fn is_cgroupfs(path: &Path) -> bool {
    use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};
    statfs(path).is_ok_and(|fs| {
        let kind = fs.filesystem_type();
        kind == CGROUP_SUPER_MAGIC || kind == CGROUP2_SUPER_MAGIC
    })
}

/// The error for a kill of `pid` in the cgroup at `dir` that the kernel refused.
fn kill_error(pid: u32, dir: &Path) -> impl FnOnce(Errno) -> CgroupError + '_ {
    move |errno| CgroupError::Kill {
        pid,
        path: dir.to_path_buf(),
        source: errno.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::cgroup::testkit::*;

    #[test]
    fn kill_and_remove_works_from_the_path_alone() {
        let (_tmp, ours, _) = fake_v2();
        let dir = ours.join("attempt 1"); // a space, as a path from the guard may have
        fs::create_dir(&dir).unwrap();
        v1_kernel_files(&dir); // no cgroup.kill: PIDs are signalled one by one
        put(&dir.join("cgroup.procs"), FAKE_PIDS);
        // The fake kernel never empties cgroup.procs: populated until the timeout.
        let err = kill_and_remove(&dir, Duration::from_millis(20)).unwrap_err();
        let CgroupError::StillPopulated { pids, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(pids, &[4194305, 4194306]);
        assert!(dir.exists());
        put(&dir.join("cgroup.procs"), "");
        kill_and_remove(&dir, Duration::from_millis(20)).unwrap();
        assert!(!dir.exists());
        kill_and_remove(&dir, Duration::from_millis(20)).unwrap(); // already gone: fine
    }
}
