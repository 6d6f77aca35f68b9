//! cgroup v1 specifics: the memory controller's own hierarchy (`<root>/memory`, or a joined mount
//! such as `<root>/cpu,memory`), its file names (`memory.usage_in_bytes`,
//! `memory.max_usage_in_bytes`, `memory.limit_in_bytes`, `memory.oom_control`,
//! `total_inactive_file` of `memory.stat`), and how limits are written (memory and memory + swap
//! together, in an order the kernel accepts). No one-time preparation is needed on v1. Its huge
//! "no limit" value is read by `parse`, which both versions' limits go through.
//!
//! It leaves detection, the attempt cgroup's lifecycle and teardown to the parent module, which
//! reaches this one only through [`Version`](super::Version).

use std::fs;
use std::path::{Path, PathBuf};

use super::parse::{keyed_value, parse_limit};
use super::{write_limit, CgroupError, Files, Limits, SwapCounter};

/// What a v1 attempt cgroup is read through. `total_inactive_file`, unlike `inactive_file`,
/// counts the cgroups below too.
pub(super) const FILES: Files = Files {
    usage: "memory.usage_in_bytes",
    peak: "memory.max_usage_in_bytes",
    limit: "memory.limit_in_bytes",
    oom_kills: "memory.oom_control",
    parse_oom_kills: parse_oom_control_oom_kill,
    inactive_file: "total_inactive_file",
    anon: "total_rss",
    file: "total_cache",
    shmem: "total_shmem",
    swap: SwapCounter::StatKey("total_swap"),
};

/// The `oom_kill` count of v1 `memory.oom_control`, e.g.
/// `"oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"` → 2 (absent before kernel 4.13).
pub fn parse_oom_control_oom_kill(text: &str) -> Option<u64> {
    keyed_value(text, "oom_kill")
}

/// Where the v1 hierarchy whose controller list is `controllers` (as /proc/self/cgroup writes it)
/// is mounted below `cgroup_root`.
pub(super) fn mount(cgroup_root: &Path, controllers: &str) -> PathBuf {
    // Usually `memory` is its own mount; joined lists are mounted under the joined
    // name (with per-controller symlinks that may be missing).
    ["memory", controllers]
        .into_iter()
        .map(|name| cgroup_root.join(name))
        .find(|mount| mount.is_dir())
        .unwrap_or_else(|| cgroup_root.join("memory"))
}

/// Writes the limits of a new v1 cgroup at `dir`: `memory.limit_in_bytes`, and for swap
/// `memory.memsw.limit_in_bytes` = memory + swap (v1 limits the two together, so a swap limit
/// needs a memory limit, and the memsw file is missing where swap accounting is off).
pub(super) fn set_limits(dir: &Path, limits: &Limits) -> Result<(), CgroupError> {
    let write = |file: &str, value: u64| write_limit(dir, file, value);
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    match (limits.memory_max_bytes, limits.swap_max_bytes) {
        (None, None) => {}
        (Some(memory), None) => write("memory.limit_in_bytes", memory)?,
        (None, Some(_)) => {
            return Err(CgroupError::SwapWithoutMemoryLimit { path: memsw });
        }
        (Some(memory), Some(swap)) => {
            if !memsw.exists() {
                return Err(CgroupError::SwapAccountingOff { path: memsw });
            }
            // The kernel keeps memory <= memory+swap at every step: lower or raise
            // in the order that never crosses.
            let total = memory.saturating_add(swap);
            let current_total = fs::read_to_string(&memsw)
                .ok()
                .and_then(|text| parse_limit(&text))
                .unwrap_or(u64::MAX);
            if memory <= current_total {
                write("memory.limit_in_bytes", memory)?;
                write("memory.memsw.limit_in_bytes", total)?;
            } else {
                write("memory.memsw.limit_in_bytes", total)?;
                write("memory.limit_in_bytes", memory)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::cgroup::testkit::*;
    use crate::observe::cgroup::{CgroupError, Limits, Parent, Unavailable, Version};

    #[test]
    fn parses_oom_control() {
        let table = [
            ("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", Some(2)),
            ("oom_kill_disable 1\nunder_oom 1\noom_kill 0\n", Some(0)),
            ("oom_kill_disable 0\nunder_oom 0\n", None), // kernel < 4.13
        ];
        for (text, want) in table {
            assert_eq!(parse_oom_control_oom_kill(text), want, "{text:?}");
        }
    }

    #[test]
    fn v1_whole_path_on_a_fake_tree() {
        let (tmp, ours, proc_text) = fake_v1("memory");
        let parent = Parent::detect(tmp.path(), &proc_text).unwrap();
        assert_eq!(
            parent,
            Parent {
                version: Version::V1,
                dir: ours.clone()
            }
        );

        FAKE_KERNEL.with(|k| k.set(Some(v1_kernel_files)));
        let job = parent
            .create_child("attempt-1", &Limits::default())
            .unwrap();
        assert_eq!(job.limit_bytes(), None, "v1's huge default means no limit");
        job.remove().unwrap();

        let limits = Limits {
            memory_max_bytes: Some(64 * MIB),
            swap_max_bytes: Some(16 * MIB),
        };
        let job = parent.create_child("attempt-2", &limits).unwrap();
        assert_eq!(job.version(), Version::V1);
        assert_eq!(read(&job.dir().join("memory.limit_in_bytes")), "67108864");
        assert_eq!(
            read(&job.dir().join("memory.memsw.limit_in_bytes")),
            (80 * MIB).to_string()
        );
        assert_eq!(job.usage_bytes(), Some(MIB));
        // total_inactive_file (16 KiB + a child's 64 KiB), not this cgroup's own inactive_file.
        assert_eq!(job.working_set_bytes(), Some(MIB - 81920));
        assert_eq!(
            job.memory(),
            Some(crate::observe::cgroup::CgroupMem {
                usage_bytes: MIB,
                working_set_bytes: Some(MIB - 81920),
                anon_bytes: Some(1638400),
                file_bytes: Some(708608),
                shmem_bytes: None, // this kernel's stat has no total_shmem
                swap_bytes: None,  // nor total_swap: swap accounting off
            })
        );
        assert_eq!(job.peak_bytes(), Some(3 * MIB));
        assert_eq!(job.oom_kills(), Some(2));
        assert_eq!(job.limit_bytes(), Some(64 * MIB));
        put(&job.dir().join("cgroup.procs"), FAKE_PIDS);
        assert_eq!(job.pids(), [4194305, 4194306]);
        job.kill_all().unwrap(); // ESRCH for both: fine
        put(&job.dir().join("cgroup.procs"), "");
        let dir = job.dir().to_path_buf();
        job.remove().unwrap();
        assert!(!dir.exists());

        FAKE_KERNEL.with(|k| k.set(Some(v1_kernel_files_without_swap_accounting)));
        let err = parent.create_child("attempt-3", &limits).unwrap_err();
        assert!(
            matches!(err, CgroupError::SwapAccountingOff { .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("memory.memsw.limit_in_bytes"),
            "{err}"
        );
        assert!(err.to_string().contains("swapaccount=1"), "{err}");
        assert!(!ours.join("attempt-3").exists());

        let err = parent
            .create_child(
                "attempt-4",
                &Limits {
                    memory_max_bytes: None,
                    swap_max_bytes: Some(MIB),
                },
            )
            .unwrap_err();
        assert!(
            matches!(err, CgroupError::SwapWithoutMemoryLimit { .. }),
            "{err}"
        );
        assert!(!ours.join("attempt-4").exists());
        FAKE_KERNEL.with(|k| k.set(None));
    }

    #[test]
    fn v1_remove_also_removes_cgroups_the_job_made() {
        let (tmp, ours, proc_text) = fake_v1("memory");
        let parent = Parent::detect(tmp.path(), &proc_text).unwrap();
        FAKE_KERNEL.with(|k| k.set(Some(v1_kernel_files)));
        let job = parent
            .create_child("attempt-1", &Limits::default())
            .unwrap();
        let nested = job.dir().join("worker");
        fs::create_dir(&nested).unwrap();
        v1_kernel_files(&nested);
        job.remove().unwrap();
        assert!(!ours.join("attempt-1").exists());
        FAKE_KERNEL.with(|k| k.set(None));
    }

    #[test]
    fn v1_joined_controller_mount_and_hybrid_detection() {
        let (tmp, ours, proc_text) = fake_v1("cpu,memory");
        let parent = Parent::detect(tmp.path(), &proc_text).unwrap();
        assert_eq!(parent.version, Version::V1);
        assert_eq!(parent.dir, ours);

        // Root cgroup: the path is "/".
        let parent = Parent::detect(tmp.path(), "4:cpu,memory:/\n").unwrap();
        assert_eq!(parent.dir, tmp.path().join("cpu,memory"));

        // v1 memory line but nothing mounted.
        let empty = tempfile::tempdir().unwrap();
        let err = Parent::detect(empty.path(), &proc_text).unwrap_err();
        assert!(matches!(err, Unavailable::NotMounted { .. }), "{err}");
        let err = Parent::detect(empty.path(), "0::/\n").unwrap_err();
        assert!(
            matches!(err, Unavailable::NoMemoryController { .. }),
            "{err}"
        );
    }
}
