//! Attempt cgroup names (`oomguard-<pid>-attempt-<n>`) and the cleanup of those an oomguard
//! killed with SIGKILL left behind ([`Parent::remove_stale_attempts`]), at the next start.
//!
//! Killing a dead oomguard's attempt at once is the guard process's job (through
//! [`kill_and_remove`](super::kill_and_remove)); this module only removes empty leftovers.

use std::io;
use std::path::{Path, PathBuf};

use super::teardown::{child_cgroups, pids_below, remove_tree};
use super::Parent;

/// The name of attempt `attempt`'s cgroup for the oomguard with PID `pid`:
/// `oomguard-<pid>-attempt-<attempt>`, which [`Parent::remove_stale_attempts`] recognizes.
pub fn attempt_name(pid: u32, attempt: u32) -> String {
    format!("oomguard-{pid}-attempt-{attempt}")
}

/// Parses an [`attempt_name`], e.g. `"oomguard-4242-attempt-3"` → (4242, 3). Digits only (no
/// sign, no spaces), PID not 0; anything else (`oomguard-supervisor`, `oomguard-doctor-4242`,
/// a user's own cgroup) is `None`.
pub fn parse_attempt_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("oomguard-")?;
    let (pid, attempt) = rest.split_once("-attempt-")?;
    let number = |s: &str| {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse::<u32>().ok()
        } else {
            None
        }
    };
    let pid = number(pid).filter(|&pid| pid != 0)?;
    Some((pid, number(attempt)?))
}

impl Parent {
    /// Removes the attempt cgroups (named by [`attempt_name`]) that an oomguard killed with
    /// SIGKILL left below our cgroup: those whose oomguard PID is no live process and that hold
    /// no process. Returns the directories removed; anything else is skipped and logged.
    ///
    /// A populated stale cgroup is left alone, not killed: the guard process already kills a
    /// dead oomguard's attempt, so live processes there mean something unusual (the guard was
    /// killed too, or the cgroup belongs to an oomguard in another PID namespace sharing this
    /// cgroup, whose PID we cannot see); SIGKILLing a job on a guess is irreversible, while an
    /// empty cgroup costs nothing to remove. The PID check cannot be fooled into harm by PID
    /// reuse: a reused PID only makes a stale cgroup look alive, and it is skipped. Nothing is
    /// removed where /proc does not show our own PID (not our PID namespace's /proc).
    pub fn remove_stale_attempts(&self) -> Vec<PathBuf> {
        let proc_root = Path::new("/proc");
        if !proc_root.join(std::process::id().to_string()).exists() {
            tracing::debug!(
                "/proc does not show our own PID: not judging which attempt cgroups are stale"
            );
            return Vec::new();
        }
        let mut removed = Vec::new();
        for dir in child_cgroups(&self.dir) {
            let Some((pid, _)) = dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_attempt_name)
            else {
                continue;
            };
            if proc_root.join(pid.to_string()).exists() {
                continue;
            }
            let pids = pids_below(&dir);
            if !pids.is_empty() {
                tracing::warn!(dir = %dir.display(), ?pids, "stale attempt cgroup of a dead oomguard still holds processes; leaving it (kill them, then rmdir it)");
                continue;
            }
            match remove_tree(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "removed a stale attempt cgroup of a dead oomguard");
                    removed.push(dir);
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(dir = %dir.display(), "cannot remove stale attempt cgroup: {err}")
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::cgroup::testkit::*;
    use crate::observe::cgroup::{Limits, Version};
    use std::fs;

    // ---- stale attempt cgroups ----

    #[test]
    fn parses_attempt_names() {
        let table = [
            ("oomguard-4242-attempt-3", Some((4242, 3))),
            ("oomguard-1-attempt-0", Some((1, 0))),
            ("oomguard-0-attempt-1", None),
            ("oomguard-supervisor", None),
            ("oomguard-doctor-4242", None),
            ("oomguard-test-4242-kill", None),
            ("oomguard-+42-attempt-1", None),
            ("oomguard-42-attempt--1", None),
            ("oomguard-42-attempt-", None),
            ("oomguard--attempt-1", None),
            ("oomguard-42-attempt-1 ", None),
            ("oomguard-99999999999-attempt-1", None),
            ("xoomguard-42-attempt-1", None),
            ("", None),
        ];
        for (name, want) in table {
            assert_eq!(parse_attempt_name(name), want, "{name:?}");
        }
        assert_eq!(
            parse_attempt_name(&attempt_name(4194305, 12)),
            Some((4194305, 12))
        );
    }

    #[test]
    fn removes_only_empty_attempt_cgroups_of_dead_oomguards() {
        let (_tmp, ours, _) = fake_v2();
        let parent = Parent {
            version: Version::V2,
            dir: ours.clone(),
        };
        let make = |name: &str, procs: &str| {
            let dir = ours.join(name);
            fs::create_dir(&dir).unwrap();
            v2_kernel_files(&dir);
            put(&dir.join("cgroup.procs"), procs);
            dir
        };
        // 4194305+ can never be a live PID; our own PID always is.
        let dead_empty = make(&attempt_name(4194305, 1), "");
        let dead_nested = make(&attempt_name(4194305, 2), "");
        let nested = dead_nested.join("worker");
        fs::create_dir(&nested).unwrap();
        v2_kernel_files(&nested);
        let dead_nested_busy = make(&attempt_name(4194306, 1), "");
        let busy_child = dead_nested_busy.join("worker");
        fs::create_dir(&busy_child).unwrap();
        put(&busy_child.join("cgroup.procs"), "4194307\n");
        let dead_busy = make(&attempt_name(4194306, 2), FAKE_PIDS);
        let alive = make(&attempt_name(std::process::id(), 1), "");
        let others = make("oomguard-doctor-4194305", "");
        let user = make("my-own-cgroup", "");

        let mut removed = parent.remove_stale_attempts();
        removed.sort();
        assert_eq!(removed, [dead_empty.clone(), dead_nested.clone()]);
        for dir in [&dead_empty, &dead_nested] {
            assert!(!dir.exists(), "{}", dir.display());
        }
        for dir in [&dead_nested_busy, &dead_busy, &alive, &others, &user] {
            assert!(dir.exists(), "{}", dir.display());
        }
        assert_eq!(parent.remove_stale_attempts(), Vec::<PathBuf>::new());
    }

    #[test]
    fn real_cgroup_stale_attempt_of_a_dead_oomguard_is_removed() {
        let test = "real_cgroup_stale_attempt_of_a_dead_oomguard_is_removed";
        let Some(parent) = real_parent(test) else {
            return;
        };
        // PIDs above PID_MAX_LIMIT never exist; make the name unique to this test run.
        let dead = 4194305 + std::process::id() % 1000;
        let name = attempt_name(dead, 1);
        let stale = parent.create_child(&name, &Limits::default()).unwrap();
        let dir = stale.dir().to_path_buf();
        std::mem::forget(stale); // as if oomguard had been SIGKILLed
        let live = parent
            .create_child(&attempt_name(std::process::id(), 1), &Limits::default())
            .unwrap();
        let removed = parent.remove_stale_attempts();
        assert!(removed.contains(&dir), "{removed:?}");
        assert!(!dir.exists());
        assert!(live.dir().exists(), "a live oomguard's attempt was removed");
        live.remove().unwrap();
    }
}
