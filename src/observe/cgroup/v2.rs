//! cgroup v2 specifics: the unified hierarchy's file names (`memory.current`, `memory.peak`,
//! `memory.max`, `memory.events`, `inactive_file` of `memory.stat`), the delegation check
//! (`memory` in our `cgroup.controllers`), how limits are written (`memory.max`,
//! `memory.swap.max`), and the one-time preparation v1 does not need: enabling the memory
//! controller for our children in `cgroup.subtree_control`, which the "no internal processes"
//! rule may only allow after oomguard has moved itself into a leaf ([`SUPERVISOR_LEAF`]).
//!
//! It leaves detection, the attempt cgroup's lifecycle and teardown to the parent module, which
//! reaches this one only through [`Version`](super::Version).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;

use nix::errno::Errno;

use super::parse::{keyed_value, lists_controller};
use super::teardown::read_pids;
use super::{
    io_error, write_file, write_limit, CgroupError, Files, Limits, SwapCounter, Unavailable,
};

/// What a v2 attempt cgroup is read through (`memory.stat` is always hierarchical on v2).
pub(super) const FILES: Files = Files {
    usage: "memory.current",
    peak: "memory.peak",
    limit: "memory.max",
    oom_kills: "memory.events",
    parse_oom_kills: parse_memory_events_oom_kill,
    inactive_file: "inactive_file",
    anon: "anon",
    file: "file",
    shmem: "shmem",
    swap: SwapCounter::File("memory.swap.current"),
};

/// The leaf that oomguard moves itself into on cgroup v2 when its own cgroup holds processes
/// (the "no internal processes" rule), so the memory controller can be enabled for siblings.
pub const SUPERVISOR_LEAF: &str = "oomguard-supervisor";

/// Whether a failed write of `+memory` to `cgroup.subtree_control` is the v2 "no internal
/// processes" rule (EBUSY: the cgroup holds processes), which oomguard answers by moving itself
/// into a leaf below it (as systemd's delegation docs describe). Anything else (EACCES, ENOENT,
/// EINVAL) a leaf would not fix.
pub fn needs_leaf(err: &io::Error) -> bool {
    err.raw_os_error() == Some(Errno::EBUSY as i32)
}

/// Makes sure children of the v2 cgroup `dir` get the memory controller. `descendants` lists
/// our descendants (read only on EBUSY); `write` writes one cgroup file (the real one is
/// [`write_file`]; tests pass one that fakes EBUSY).
fn enable_memory_for_children(
    dir: &Path,
    our_pid: u32,
    descendants: &dyn Fn() -> Vec<u32>,
    write: &mut dyn FnMut(&Path, &str) -> io::Result<()>,
) -> Result<(), CgroupError> {
    let control = dir.join("cgroup.subtree_control");
    let current = fs::read_to_string(&control).map_err(io_error("read", &control))?;
    if lists_controller(&current, "memory") {
        return Ok(());
    }
    match write(&control, "+memory") {
        Ok(()) => return Ok(()),
        Err(err) if needs_leaf(&err) => {}
        Err(err) => return Err(io_error("enable the memory controller in", &control)(err)),
    }
    let leaf = dir.join(SUPERVISOR_LEAF);
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(io_error("create cgroup", &leaf)(err)),
    }
    let procs = leaf.join("cgroup.procs");
    // One PID moves the whole process, every thread of it.
    write(&procs, &our_pid.to_string()).map_err(io_error("move oomguard into", &procs))?;
    for pid in descendants_to_move(&read_pids(dir), our_pid, &descendants()) {
        // One that exited meanwhile (ESRCH) is fine; one that stays makes the retry below fail
        // with InternalProcesses, which says what to do.
        if let Err(err) = write(&procs, &pid.to_string()) {
            tracing::debug!(
                pid,
                "cannot move our descendant into {}: {err}",
                leaf.display()
            );
        }
    }
    tracing::info!(
        leaf = %leaf.display(),
        "moved oomguard into a leaf cgroup so its cgroup can enable the memory controller for attempts"
    );
    write(&control, "+memory").map_err(|source| CgroupError::InternalProcesses {
        path: dir.to_path_buf(),
        source,
    })
}

/// Which PIDs besides our own to move into the leaf, given our cgroup's `cgroup.procs` (read
/// after we moved): those listed that are our descendants, in the order listed. Others are not
/// ours to move: they stay, and the retry names the problem.
fn descendants_to_move(listed: &[u32], our_pid: u32, descendants: &[u32]) -> Vec<u32> {
    let ours: HashSet<u32> = descendants.iter().copied().collect();
    listed
        .iter()
        .copied()
        .filter(|pid| *pid != our_pid && ours.contains(pid))
        .collect()
}

/// The `oom_kill` count of v2 `memory.events`, e.g.
/// `"low 0\nhigh 0\nmax 12\noom 3\noom_kill 3\noom_group_kill 0\n"` → 3.
pub fn parse_memory_events_oom_kill(text: &str) -> Option<u64> {
    keyed_value(text, "oom_kill")
}

/// The v2 part of [`Parent::detect`](super::Parent::detect): our cgroup `dir` must have the
/// memory controller available (delegated to it).
pub(super) fn check_delegated(dir: &Path) -> Result<(), Unavailable> {
    let available = fs::read_to_string(dir.join("cgroup.controllers"))
        .is_ok_and(|text| lists_controller(&text, "memory"));
    if available {
        Ok(())
    } else {
        Err(Unavailable::NotDelegated {
            path: dir.to_path_buf(),
        })
    }
}

/// [`Parent::prepare`](super::Parent::prepare) on v2, for our cgroup `dir`.
pub(super) fn prepare(dir: &Path) -> Result<(), CgroupError> {
    let me = std::process::id();
    let descendants = || crate::observe::mem::tree::ProcTree::default().descendants(me);
    enable_memory_for_children(dir, me, &descendants, &mut write_file)
}

/// Writes the limits of a new v2 cgroup at `dir`: `memory.max` and `memory.swap.max` (missing
/// where swap accounting is off).
pub(super) fn set_limits(dir: &Path, limits: &Limits) -> Result<(), CgroupError> {
    if let Some(memory) = limits.memory_max_bytes {
        write_limit(dir, "memory.max", memory)?;
    }
    if let Some(swap) = limits.swap_max_bytes {
        let path = dir.join("memory.swap.max");
        if !path.exists() {
            return Err(CgroupError::SwapAccountingOff { path });
        }
        write_limit(dir, "memory.swap.max", swap)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::cgroup::testkit::*;
    use crate::observe::cgroup::{Parent, Version};
    use std::path::PathBuf;

    #[test]
    fn parses_memory_events() {
        let table = [
            (
                "low 0\nhigh 0\nmax 12\noom 3\noom_kill 3\noom_group_kill 0\n",
                Some(3),
            ),
            ("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", Some(0)),
            ("low 0\nhigh 0\nmax 0\noom 0\n", None),
            ("oom_group_kill 4\n", None),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_memory_events_oom_kill(text), want, "{text:?}");
        }
    }

    #[test]
    fn only_ebusy_needs_a_leaf() {
        assert!(needs_leaf(&io::Error::from_raw_os_error(nix::libc::EBUSY)));
        for errno in [nix::libc::EACCES, nix::libc::ENOENT, nix::libc::EINVAL] {
            assert!(!needs_leaf(&io::Error::from_raw_os_error(errno)));
        }
        assert!(!needs_leaf(&io::Error::other("busy")));
    }

    #[test]
    fn v2_whole_path_on_a_fake_tree() {
        let (tmp, ours, proc_text) = fake_v2();
        let parent = Parent::detect(tmp.path(), proc_text).unwrap();
        assert_eq!(
            parent,
            Parent {
                version: Version::V2,
                dir: ours.clone()
            }
        );

        FAKE_KERNEL.with(|k| k.set(Some(v2_kernel_files)));
        let limits = Limits {
            memory_max_bytes: Some(64 * MIB),
            swap_max_bytes: Some(0),
        };
        let job = parent.create_child("attempt-1", &limits).unwrap();
        assert_eq!(job.dir(), ours.join("attempt-1"));
        assert_eq!(job.version(), Version::V2);
        assert_eq!(read(&ours.join("cgroup.subtree_control")), "+memory");
        assert_eq!(read(&job.dir().join("memory.max")), "67108864");
        assert_eq!(read(&job.dir().join("memory.swap.max")), "0");
        // Left alone: a worker's OOM kill must not take the whole attempt down.
        assert_eq!(read(&job.dir().join("memory.oom.group")), "0\n");

        assert_eq!(job.usage_bytes(), Some(MIB));
        // 1 MiB charged, 16 KiB of it inactive file cache.
        assert_eq!(job.working_set_bytes(), Some(MIB - 16384));
        put(&job.dir().join("memory.swap.current"), "4096\n");
        assert_eq!(
            job.memory(),
            Some(crate::observe::cgroup::CgroupMem {
                usage_bytes: MIB,
                working_set_bytes: Some(MIB - 16384),
                anon_bytes: Some(1466368),
                file_bytes: Some(643072),
                shmem_bytes: Some(0),
                swap_bytes: Some(4096),
            })
        );
        assert_eq!(job.peak_bytes(), Some(2 * MIB));
        assert_eq!(job.oom_kills(), Some(3));
        assert_eq!(job.limit_bytes(), Some(64 * MIB));
        put(&job.dir().join("cgroup.procs"), FAKE_PIDS);
        assert_eq!(job.pids(), [4194305, 4194306]);

        job.kill_all().unwrap();
        assert_eq!(read(&job.dir().join("cgroup.kill")), "1");

        // The kernel would empty cgroup.procs once the processes are dead.
        put(&job.dir().join("cgroup.procs"), "");
        let dir = job.dir().to_path_buf();
        job.remove().unwrap();
        assert!(!dir.exists());

        // Memory already enabled: a second attempt leaves subtree_control alone.
        put(&ours.join("cgroup.subtree_control"), "memory pids\n");
        let job = parent
            .create_child("attempt-2", &Limits::default())
            .unwrap();
        assert_eq!(read(&ours.join("cgroup.subtree_control")), "memory pids\n");
        assert_eq!(read(&job.dir().join("memory.max")), "max\n");
        assert_eq!(job.limit_bytes(), None);
        let dir = job.dir().to_path_buf();
        drop(job); // Drop removes it too.
        assert!(!dir.exists());
        FAKE_KERNEL.with(|k| k.set(None));
    }

    #[test]
    fn v2_older_kernel_lacks_peak_kill_file_and_swap() {
        let (tmp, ours, proc_text) = fake_v2();
        let parent = Parent::detect(tmp.path(), proc_text).unwrap();
        FAKE_KERNEL.with(|k| k.set(Some(v2_old_kernel_files)));

        let job = parent
            .create_child(
                "attempt-1",
                &Limits {
                    memory_max_bytes: Some(32 * MIB),
                    swap_max_bytes: None,
                },
            )
            .unwrap();
        assert_eq!(job.peak_bytes(), None);
        assert_eq!(job.working_set_bytes(), None, "no memory.stat in this fake");
        let mem = job.memory().expect("memory.current reads");
        assert_eq!((mem.usage_bytes, mem.working_set_bytes), (0, None));
        assert_eq!((mem.anon_bytes, mem.swap_bytes), (None, None));
        assert_eq!(job.oom_kills(), Some(0));
        assert_eq!(job.limit_bytes(), Some(32 * MIB));
        // No cgroup.kill: falls back to signalling PIDs (these cannot exist: ESRCH).
        put(&job.dir().join("cgroup.procs"), FAKE_PIDS);
        job.kill_all().unwrap();
        put(&job.dir().join("cgroup.procs"), "");
        job.remove().unwrap();

        let err = parent
            .create_child(
                "attempt-2",
                &Limits {
                    memory_max_bytes: Some(32 * MIB),
                    swap_max_bytes: Some(0),
                },
            )
            .unwrap_err();
        assert!(
            matches!(err, CgroupError::SwapAccountingOff { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("memory.swap.max"), "{err}");
        assert!(
            !ours.join("attempt-2").exists(),
            "failed create left its cgroup"
        );
        FAKE_KERNEL.with(|k| k.set(None));
    }

    #[test]
    fn a_missing_limit_file_is_an_error_with_its_path() {
        let (tmp, ours, proc_text) = fake_v2();
        let parent = Parent::detect(tmp.path(), proc_text).unwrap();
        // No fake kernel: the new directory has no control files at all.
        let err = parent
            .create_child(
                "attempt-1",
                &Limits {
                    memory_max_bytes: Some(MIB),
                    swap_max_bytes: None,
                },
            )
            .unwrap_err();
        let CgroupError::Io { path, source, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(path, &ours.join("attempt-1/memory.max"));
        assert_eq!(source.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("attempt-1/memory.max"), "{err}");
        assert!(
            !ours.join("attempt-1").exists(),
            "failed create left its cgroup"
        );
    }

    #[test]
    fn v2_detect_failures_say_what_is_missing() {
        // Memory controller not delegated to our cgroup.
        let (tmp, ours, proc_text) = fake_v2();
        put(&ours.join("cgroup.controllers"), "cpu pids\n");
        let err = Parent::detect(tmp.path(), proc_text).unwrap_err();
        assert!(matches!(err, Unavailable::NotDelegated { .. }), "{err}");
        assert!(err.to_string().contains("Delegate=yes"), "{err}");

        // Our cgroup is not there (e.g. a container without a cgroup namespace).
        let err = Parent::detect(tmp.path(), "0::/elsewhere\n").unwrap_err();
        assert!(matches!(err, Unavailable::NotMounted { .. }), "{err}");

        // Unified mount without memory, and no v1 memory line.
        put(&tmp.path().join("cgroup.controllers"), "cpu io pids\n");
        let err = Parent::detect(tmp.path(), proc_text).unwrap_err();
        assert!(
            matches!(err, Unavailable::NoMemoryController { .. }),
            "{err}"
        );
    }

    /// A writer that fails the first write of `+memory` with EBUSY, like a v2 cgroup that holds
    /// processes, and records every write.
    fn ebusy_once(
        writes: &mut Vec<(PathBuf, String)>,
        busy_left: &mut u32,
        path: &Path,
        value: &str,
    ) -> io::Result<()> {
        writes.push((path.to_path_buf(), value.to_string()));
        if path.ends_with("cgroup.subtree_control") && *busy_left > 0 {
            *busy_left -= 1;
            return Err(io::Error::from_raw_os_error(nix::libc::EBUSY));
        }
        fs::write(path, value)
    }

    #[test]
    fn v2_moves_itself_into_a_leaf_when_its_cgroup_holds_processes() {
        let (_tmp, ours, _) = fake_v2();
        let mut writes = Vec::new();
        let mut busy_left = 1;
        enable_memory_for_children(&ours, 777, &Vec::new, &mut |path, value| {
            ebusy_once(&mut writes, &mut busy_left, path, value)
        })
        .unwrap();
        let control = ours.join("cgroup.subtree_control");
        let leaf_procs = ours.join(SUPERVISOR_LEAF).join("cgroup.procs");
        assert_eq!(
            writes,
            [
                (control.clone(), "+memory".to_string()),
                (leaf_procs.clone(), "777".to_string()),
                (control.clone(), "+memory".to_string()),
            ]
        );
        assert_eq!(read(&leaf_procs), "777");
        assert_eq!(read(&control), "+memory");

        // Still busy after the move: other processes share our cgroup.
        put(&control, "");
        let mut writes = Vec::new();
        let mut busy_left = 2;
        let err = enable_memory_for_children(&ours, 777, &Vec::new, &mut |path, value| {
            ebusy_once(&mut writes, &mut busy_left, path, value)
        })
        .unwrap_err();
        assert!(
            matches!(err, CgroupError::InternalProcesses { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("Delegate=yes"), "{err}");

        // Another error is not the internal-process rule: no leaf, no move.
        let mut writes = Vec::new();
        let err = enable_memory_for_children(&ours, 777, &Vec::new, &mut |path, value| {
            writes.push((path.to_path_buf(), value.to_string()));
            Err(io::Error::from_raw_os_error(nix::libc::EACCES))
        })
        .unwrap_err();
        assert!(matches!(err, CgroupError::Io { .. }), "{err}");
        assert_eq!(writes.len(), 1);
    }

    #[test]
    fn v2_leaf_move_takes_our_descendants_along_but_no_one_else() {
        let (_tmp, ours, _) = fake_v2();
        // Us (777), our guard (778, already started), and 4194305, not ours.
        put(&ours.join("cgroup.procs"), "4194305\n777\n778\n");
        let mut writes = Vec::new();
        let mut busy_left = 1;
        enable_memory_for_children(&ours, 777, &|| vec![778, 779], &mut |path, value| {
            ebusy_once(&mut writes, &mut busy_left, path, value)
        })
        .unwrap();
        let leaf_procs = ours.join(SUPERVISOR_LEAF).join("cgroup.procs");
        let moved: Vec<&str> = writes
            .iter()
            .filter(|(path, _)| *path == leaf_procs)
            .map(|(_, value)| value.as_str())
            .collect();
        assert_eq!(moved, ["777", "778"]);
    }

    #[test]
    fn picks_what_moves_into_the_leaf() {
        let table: [(&[u32], &[u32], &[u32]); 5] = [
            // (cgroup.procs, our descendants, moved after us); we are 777.
            (&[], &[], &[]),
            (&[4194305, 778], &[778, 779], &[778]), // 779 has left our cgroup already
            (&[780, 777, 778], &[778, 780], &[780, 778]), // never us twice
            (&[4194305], &[], &[]),
            (&[778], &[], &[]), // not (or no longer) ours: left alone
        ];
        for (listed, descendants, want) in table {
            assert_eq!(
                descendants_to_move(listed, 777, descendants),
                want,
                "{listed:?} {descendants:?}"
            );
        }
    }

    #[test]
    fn prepare_is_idempotent_and_a_no_op_on_v1() {
        let (tmp, ours, proc_text) = fake_v2();
        let parent = Parent::detect(tmp.path(), proc_text).unwrap();
        parent.prepare().unwrap();
        assert_eq!(read(&ours.join("cgroup.subtree_control")), "+memory");
        // The kernel would now list it as `memory`; a second call only reads.
        put(&ours.join("cgroup.subtree_control"), "memory\n");
        let before = fs::metadata(ours.join("cgroup.subtree_control"))
            .unwrap()
            .modified()
            .unwrap();
        parent.prepare().unwrap();
        assert_eq!(read(&ours.join("cgroup.subtree_control")), "memory\n");
        let after = fs::metadata(ours.join("cgroup.subtree_control"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);

        let (tmp, ours, proc_text) = fake_v1("memory");
        let parent = Parent::detect(tmp.path(), &proc_text).unwrap();
        parent.prepare().unwrap();
        let names: Vec<_> = fs::read_dir(&ours)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["cgroup.procs"], "v1 prepare wrote something");
    }
}
