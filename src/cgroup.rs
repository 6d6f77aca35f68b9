//! A fresh memory cgroup per attempt, below oomguard's own: exact memory accounting of the whole
//! job (every process it starts, however it forks), exact attribution of kernel OOM kills (the
//! cgroup's own `oom_kill` counter, not the machine-wide one), and an optional hard limit. This
//! module finds our own memory cgroup (cgroup v1 or v2), creates a child below it, sets its
//! limits, hands out an fd on its `cgroup.procs` so the caller can move the job in between fork
//! and exec, reads its counters, kills everything inside it and removes it, also on error paths
//! (`Drop` does a best-effort remove). Attempt cgroups left behind by an oomguard that was
//! SIGKILLed are removed at the next start ([`Parent::remove_stale_attempts`]), or by the guard
//! process at once ([`kill_and_remove`]).
//!
//! It does not spawn the job (`child` does, using [`JobCgroup::open_procs`] and
//! [`JobCgroup::join_from_child`]), sample on a schedule (callers read counters when they want),
//! or decide anything (naming the cause of a death is `classify`'s job). The file parsers work on
//! strings and every reader takes its paths, so tests use fake trees in a temp dir.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::{access, AccessFlags, Pid};

/// A testing hook: when set, [`Parent::detect_current`] looks for the cgroup mount there instead
/// of /sys/fs/cgroup, so tests of the real binary can play a machine without writable cgroups
/// (an empty directory) or with a fake v2 tree. Not meant for users.
pub const CGROUP_ROOT_ENV: &str = "OOMGUARD_CGROUP_ROOT";

/// The leaf that oomguard moves itself into on cgroup v2 when its own cgroup holds processes
/// (the "no internal processes" rule), so the memory controller can be enabled for siblings.
pub const SUPERVISOR_LEAF: &str = "oomguard-supervisor";

/// How long [`JobCgroup::remove`] waits for the killed processes to leave the cgroup.
const REMOVE_WAIT: Duration = Duration::from_secs(5);

/// Passes of "read cgroup.procs, SIGKILL the new PIDs" before [`JobCgroup::kill_all`] gives up
/// on a job that forks faster than it is killed (v1, or v2 without `cgroup.kill`).
const KILL_PASSES: usize = 64;

/// cgroup v1 shows "no limit" as the largest page-aligned `i64`: 9223372036854771712 with 4 KiB
/// pages, 9223372036854710272 with 64 KiB pages. Anything from 4 EiB up is "no limit".
const V1_UNLIMITED_FLOOR: u64 = 1 << 62;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Limits for one attempt; `None` leaves the kernel's default (no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory_max_bytes: Option<u64>,
    /// Swap the attempt may use on top of its memory. On v1 it needs `memory_max_bytes` too
    /// (v1 limits memory + swap together).
    pub swap_max_bytes: Option<u64>,
}

/// Why there is no memory cgroup oomguard can make children in. Each message says what is
/// missing and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("cannot read {path}: {source} (oomguard needs Linux with /proc mounted)")]
    ProcUnreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no memory cgroup: /proc/self/cgroup names no cgroup v1 `memory` hierarchy, and {root} is not a cgroup v2 mount with the memory controller (enable it: boot without `cgroup_disable=memory`, with `cgroup_enable=memory` on some kernels)")]
    NoMemoryController { root: PathBuf },
    #[error("our memory cgroup {path} does not exist (the cgroup filesystem is not mounted there, or this container has no cgroup namespace of its own): mount it, or run oomguard outside the container")]
    NotMounted { path: PathBuf },
    #[error("memory controller not delegated: {path}/cgroup.controllers does not list `memory` (run under `systemd-run --user --scope -p Delegate=yes oomguard ...`, or as root)")]
    NotDelegated { path: PathBuf },
    #[error("no writable memory cgroup: {path} is not writable: {source} (run as root, or under `systemd-run --user --scope -p Delegate=yes oomguard ...`; in a container, mount /sys/fs/cgroup read-write)")]
    NotWritable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A cgroup operation that failed, with the path and the action.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("invalid cgroup name {name:?}: use one path component, not `.`, `..` or `{SUPERVISOR_LEAF}`, without `/`")]
    InvalidName { name: String },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("a swap limit was asked for but {path} does not exist: swap accounting is off (boot with `swapaccount=1`, or drop the swap limit)")]
    SwapAccountingOff { path: PathBuf },
    #[error("a swap limit needs a memory limit on cgroup v1 ({path} limits memory + swap together): set both, or drop the swap limit")]
    SwapWithoutMemoryLimit { path: PathBuf },
    #[error("cannot enable the memory controller in {path} even after moving oomguard into {SUPERVISOR_LEAF}: {source} (other processes still live in that cgroup: start oomguard in a cgroup of its own, e.g. `systemd-run --user --scope -p Delegate=yes oomguard ...`)")]
    InternalProcesses {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot SIGKILL PID {pid} of {path}: {source}")]
    Kill {
        pid: u32,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} still holds processes {pids:?} after SIGKILL and {waited:?} (reap exited children before removing: on some kernels a zombie keeps its cgroup busy)")]
    StillPopulated {
        path: PathBuf,
        pids: Vec<u32>,
        waited: Duration,
    },
}

fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Where oomguard's own memory cgroup is and whether children can be made there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    pub version: Version,
    pub dir: PathBuf,
}

impl Parent {
    /// Finds our own memory cgroup from the text of /proc/self/cgroup and the cgroup mount root
    /// (normally /sys/fs/cgroup; a temp dir in tests).
    ///
    /// v2 (the `0::/path` line, at `<root>/<path>`) only where `<root>/cgroup.controllers`
    /// lists `memory`, i.e. a pure unified hierarchy; otherwise the v1 line whose controller
    /// list holds `memory` (`4:memory:/path` or `4:cpu,memory:/path`), at `<root>/memory/<path>`
    /// (or `<root>/cpu,memory/<path>` where only the joined mount exists). On hybrid systems v1
    /// memory wins. The cgroup must exist, be writable and, on v2, have `memory` available.
    pub fn detect(cgroup_root: &Path, proc_self_cgroup: &str) -> Result<Parent, Unavailable> {
        let parsed = parse_proc_cgroup(proc_self_cgroup);
        let pure_v2 = fs::read_to_string(cgroup_root.join("cgroup.controllers"))
            .is_ok_and(|text| lists_controller(&text, "memory"));
        let (version, dir) = match (pure_v2, parsed.unified, parsed.v1_memory) {
            (true, Some(path), _) => (Version::V2, under(cgroup_root, path)),
            (_, _, Some((controllers, path))) => {
                // Usually `memory` is its own mount; joined lists are mounted under the joined
                // name (with per-controller symlinks that may be missing).
                let mount = ["memory", controllers]
                    .into_iter()
                    .map(|name| cgroup_root.join(name))
                    .find(|mount| mount.is_dir())
                    .unwrap_or_else(|| cgroup_root.join("memory"));
                (Version::V1, under(&mount, path))
            }
            _ => {
                return Err(Unavailable::NoMemoryController {
                    root: cgroup_root.to_path_buf(),
                })
            }
        };
        if !dir.is_dir() {
            return Err(Unavailable::NotMounted { path: dir });
        }
        if version == Version::V2 {
            let available = fs::read_to_string(dir.join("cgroup.controllers"))
                .is_ok_and(|text| lists_controller(&text, "memory"));
            if !available {
                return Err(Unavailable::NotDelegated { path: dir });
            }
        }
        let mut must_write = vec![dir.clone()];
        if version == Version::V2 {
            must_write.push(dir.join("cgroup.subtree_control"));
        }
        for path in must_write {
            if let Err(errno) = access(&path, AccessFlags::W_OK) {
                return Err(Unavailable::NotWritable {
                    path,
                    source: errno.into(),
                });
            }
        }
        Ok(Parent { version, dir })
    }

    /// Convenience: detect from the real /proc/self/cgroup and /sys/fs/cgroup.
    pub fn detect_current() -> Result<Parent, Unavailable> {
        let path = Path::new("/proc/self/cgroup");
        let text = fs::read_to_string(path).map_err(|source| Unavailable::ProcUnreadable {
            path: path.to_path_buf(),
            source,
        })?;
        let root = std::env::var_os(CGROUP_ROOT_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("/sys/fs/cgroup"), PathBuf::from);
        Parent::detect(&root, &text)
    }

    /// The one-time work before attempt cgroups can be made. v2: makes sure `+memory` is in our
    /// own `cgroup.subtree_control`; where the "no internal processes" rule forbids it (EBUSY,
    /// see [`needs_leaf`]), first moves oomguard, and any of its descendants still in our cgroup,
    /// into a [`SUPERVISOR_LEAF`] below it. v1: nothing to do. Idempotent: once `memory` is
    /// listed it only reads that one file.
    ///
    /// Call it once at startup, before starting any helper process that is not oomguard's
    /// descendant, and before any thread that forks runs: the leaf trick works only if every
    /// process in our cgroup is ours to move. A process we do not own there (the shell that
    /// started us in the same scope) makes it fail with [`CgroupError::InternalProcesses`].
    /// Descendants are moved too, so a guard started earlier does not break it, but it is
    /// cheaper to get the order right. [`Parent::create_child`] calls it as well.
    pub fn prepare(&self) -> Result<(), CgroupError> {
        if self.version == Version::V1 {
            return Ok(());
        }
        let me = std::process::id();
        let descendants = || crate::mem::tree::ProcTree::default().descendants(me);
        enable_memory_for_children(&self.dir, me, &descendants, &mut write_file)
    }

    /// Makes `<dir>/<name>` and applies `limits`. v1: `memory.limit_in_bytes`, and for swap
    /// `memory.memsw.limit_in_bytes` = memory + swap (an error if the memsw files do not exist:
    /// swap accounting is off). v2: first [`Parent::prepare`], then `memory.max` and
    /// `memory.swap.max`.
    ///
    /// `memory.oom.group` is deliberately left at 0. With group kill, a DataLoader worker the
    /// kernel OOM-kills takes the whole attempt down with it, so oomguard could never report
    /// `worker_killed`, and it would change the job's own semantics: a job that survives (or
    /// handles) the loss of a worker without oomguard must behave the same under it.
    ///
    /// A limit file that does not exist is an error naming it. On any error after the mkdir the
    /// new cgroup is removed again.
    pub fn create_child(&self, name: &str, limits: &Limits) -> Result<JobCgroup, CgroupError> {
        if name.is_empty() || name == "." || name == ".." || name == SUPERVISOR_LEAF {
            return Err(CgroupError::InvalidName {
                name: name.to_string(),
            });
        }
        if name.contains('/') || name.contains('\0') {
            return Err(CgroupError::InvalidName {
                name: name.to_string(),
            });
        }
        self.prepare()?;
        let dir = self.dir.join(name);
        fs::create_dir(&dir).map_err(io_error("create cgroup", &dir))?;
        // From here on, an early return drops `job`, which removes the directory again.
        let job = JobCgroup {
            dir,
            version: self.version,
            removed: false,
        };
        #[cfg(test)]
        tests::fake_kernel_files(&job.dir);
        job.set_limits(limits)?;
        tracing::debug!(dir = %job.dir.display(), ?limits, "created attempt cgroup");
        Ok(job)
    }

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

/// `<base>/<path>` for a cgroup path as /proc/self/cgroup shows it (absolute, `/` for the root).
fn under(base: &Path, cgroup_path: &str) -> PathBuf {
    let relative = cgroup_path.trim_start_matches('/');
    if relative.is_empty() {
        base.to_path_buf()
    } else {
        base.join(relative)
    }
}

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

/// Writes `value` to an existing cgroup file in one write. Never creates the file: a missing
/// control file means the kernel lacks the feature, which must show as an error with the path.
fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).truncate(true).open(path)?;
    file.write_all(value.as_bytes())
}

/// One attempt's memory cgroup. Removed by [`JobCgroup::remove`], or best effort on drop.
#[derive(Debug)]
pub struct JobCgroup {
    dir: PathBuf,
    version: Version,
    removed: bool,
}

impl JobCgroup {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// An `O_WRONLY|O_CLOEXEC` fd on `cgroup.procs`, to open before fork: the child passes it
    /// to [`JobCgroup::join_from_child`] between fork and exec, so it is inside before its first
    /// instruction, and the fd closes at exec.
    pub fn open_procs(&self) -> io::Result<OwnedFd> {
        // std opens every file with O_CLOEXEC.
        let file = OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))?;
        Ok(file.into())
    }

    /// Moves the calling process into the cgroup whose `cgroup.procs` is `fd` (from
    /// [`JobCgroup::open_procs`]): a single write(2) of `"0"` ("the writer itself"). No
    /// allocation, async-signal-safe, so it may run in a `pre_exec` closure.
    pub fn join_from_child(fd: BorrowedFd) -> io::Result<()> {
        match nix::unistd::write(fd, b"0") {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::ErrorKind::WriteZero.into()),
            Err(errno) => Err(errno.into()),
        }
    }

    /// Memory charged to the cgroup now (v2 `memory.current`, v1 `memory.usage_in_bytes`).
    pub fn usage_bytes(&self) -> Option<u64> {
        self.read_u64(match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        })
    }

    /// The working set, as kubelet and cAdvisor define it: [`usage_bytes`](JobCgroup::usage_bytes)
    /// minus the inactive file cache (v2 `inactive_file` of `memory.stat`; v1
    /// `total_inactive_file`, which unlike `inactive_file` counts the cgroups below too), never
    /// below 0. Page cache the kernel can drop at no cost must not count toward a soft memory
    /// bound: a job that streams its dataset from disk fills the cache up to the limit and would
    /// otherwise be stopped for nothing. `None` when either file is unreadable.
    pub fn working_set_bytes(&self) -> Option<u64> {
        let key = match self.version {
            Version::V1 => "total_inactive_file",
            Version::V2 => "inactive_file",
        };
        let usage = self.usage_bytes()?;
        let stat = fs::read_to_string(self.dir.join("memory.stat")).ok()?;
        Some(usage.saturating_sub(parse_memory_stat_field(&stat, key)?))
    }

    /// The most memory ever charged (v2 `memory.peak`, kernel >= 5.19, `None` where absent;
    /// v1 `memory.max_usage_in_bytes`).
    pub fn peak_bytes(&self) -> Option<u64> {
        self.read_u64(match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        })
    }

    /// Processes the kernel OOM killer killed in this cgroup (v2 `memory.events`, which counts
    /// descendants too; v1 `memory.oom_control`, kernel >= 4.13).
    pub fn oom_kills(&self) -> Option<u64> {
        let (file, parse): (_, fn(&str) -> Option<u64>) = match self.version {
            Version::V1 => ("memory.oom_control", parse_oom_control_oom_kill),
            Version::V2 => ("memory.events", parse_memory_events_oom_kill),
        };
        parse(&fs::read_to_string(self.dir.join(file)).ok()?)
    }

    /// The hard limit in force; `None` for no limit (or unreadable).
    pub fn limit_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        parse_limit(&fs::read_to_string(self.dir.join(file)).ok()?)
    }

    /// The processes in this cgroup (`cgroup.procs`; not those of cgroups the job made below
    /// it). Empty when unreadable.
    pub fn pids(&self) -> Vec<u32> {
        read_pids(&self.dir)
    }

    /// SIGKILLs everything inside, descendant cgroups included: v2 `cgroup.kill` (kernel >=
    /// 5.14) where present, otherwise (and on v1) SIGKILL to every PID in `cgroup.procs`, pass
    /// after pass until a pass finds no PID it has not signalled yet (a forking process can race
    /// one pass), at most 64 passes. Returns once the signals are sent; the processes may still be
    /// exiting. PIDs that vanished meanwhile are skipped; oomguard's own PID is never signalled.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        kill_all_at(&self.dir)
    }

    /// [`kill_all`](JobCgroup::kill_all), then polls (at most 5 s) until no process is left in
    /// the cgroup or below it, then removes it (cgroups the job made below it first).
    /// Idempotent: a cgroup already gone is fine.
    ///
    /// On v1 nothing is moved anywhere. The caller should reap the attempt's processes first:
    /// on some kernels a zombie keeps its cgroup busy until it is reaped, and the remove then
    /// fails with [`CgroupError::StillPopulated`] after the wait.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true; // whatever happens, Drop does not try again
        self.remove_now()
    }

    fn remove_now(&self) -> Result<(), CgroupError> {
        kill_and_remove(&self.dir, REMOVE_WAIT)
    }

    /// Writes the limits of a new cgroup (see [`Parent::create_child`]).
    fn set_limits(&self, limits: &Limits) -> Result<(), CgroupError> {
        let write = |file: &str, value: u64| {
            let path = self.dir.join(file);
            write_file(&path, &value.to_string()).map_err(io_error("write limit to", &path))
        };
        match self.version {
            Version::V2 => {
                if let Some(memory) = limits.memory_max_bytes {
                    write("memory.max", memory)?;
                }
                if let Some(swap) = limits.swap_max_bytes {
                    let path = self.dir.join("memory.swap.max");
                    if !path.exists() {
                        return Err(CgroupError::SwapAccountingOff { path });
                    }
                    write("memory.swap.max", swap)?;
                }
            }
            Version::V1 => {
                let memsw = self.dir.join("memory.memsw.limit_in_bytes");
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
            }
        }
        Ok(())
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        parse_u64(&fs::read_to_string(self.dir.join(file)).ok()?)
    }
}

impl Drop for JobCgroup {
    /// Best-effort [`JobCgroup::remove`] (it may block up to 5 s); failures are logged.
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        if let Err(err) = self.remove_now() {
            tracing::warn!("could not remove attempt cgroup: {err}");
        }
    }
}

/// [`JobCgroup::kill_all`] for the cgroup at `dir`. `cgroup.kill` exists only on v2 (kernel >=
/// 5.14), so its presence decides the method and no version is needed.
fn kill_all_at(dir: &Path) -> Result<(), CgroupError> {
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
        for pid in new {
            if pid == me {
                tracing::warn!(dir = %dir.display(), "oomguard is inside the attempt cgroup; not killing itself");
                continue;
            }
            // A PID above i32::MAX would turn negative: a process group. Never.
            let Ok(raw) = i32::try_from(pid) else {
                continue;
            };
            if raw <= 0 {
                continue;
            }
            match kill(Pid::from_raw(raw), Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(errno) => {
                    return Err(CgroupError::Kill {
                        pid,
                        path: dir.to_path_buf(),
                        source: errno.into(),
                    })
                }
            }
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

fn read_pids(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| parse_pids(&text))
        .unwrap_or_default()
}

/// The cgroups the job made below `dir` (cgroup directories hold only files and child cgroups).
fn child_cgroups(dir: &Path) -> Vec<PathBuf> {
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
fn pids_below(dir: &Path) -> Vec<u32> {
    let mut out = read_pids(dir);
    for child in child_cgroups(dir) {
        out.extend(pids_below(&child));
    }
    out
}

/// Removes `dir` and the cgroups below it, deepest first. On cgroupfs rmdir removes a cgroup
/// with its control files; elsewhere (the fake trees of tests) the files go first.
fn remove_tree(dir: &Path) -> io::Result<()> {
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

/// What /proc/self/cgroup says about memory. See cgroups(7): one `ID:CONTROLLERS:PATH` line
/// per hierarchy, e.g. (v1 with a hybrid unified mount)
/// ```text
/// 9:name=systemd:/
/// 4:memory:/process_api/af2ae7
/// 1:cpu,cpuacct:/
/// 0::/
/// ```
/// or on a pure v2 system just `0::/user.slice/user-1000.slice/session-2.scope`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcCgroup<'a> {
    /// The v1 hierarchy with `memory` in its controller list: (that list as written, e.g.
    /// `"memory"` or `"cpu,memory"`; the cgroup path).
    pub v1_memory: Option<(&'a str, &'a str)>,
    /// The path of the v2 (`0::`) line.
    pub unified: Option<&'a str>,
}

/// Parses /proc/self/cgroup (see [`ProcCgroup`] for a sample). Paths may contain `:`.
pub fn parse_proc_cgroup(text: &str) -> ProcCgroup<'_> {
    let mut out = ProcCgroup::default();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.unified = Some(path);
        } else if controllers.split(',').any(|c| c == "memory") {
            out.v1_memory = Some((controllers, path));
        }
    }
    out
}

/// Whether a space-separated controller list (`cgroup.controllers`, `cgroup.subtree_control`),
/// e.g. `"cpuset cpu io memory hugetlb pids rdma misc\n"`, names `controller`.
pub fn lists_controller(text: &str, controller: &str) -> bool {
    text.split_whitespace().any(|c| c == controller)
}

/// Parses a counter file holding one number, e.g. `memory.current` / `memory.usage_in_bytes`:
/// `"52428800\n"`.
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Parses a limit: v2 `memory.max` (`"max\n"` or `"67108864\n"`), v1 `memory.limit_in_bytes`
/// (`"9223372036854771712\n"` when unlimited). `None` for no limit (or unparsable).
pub fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    parse_u64(text).filter(|&value| value < V1_UNLIMITED_FLOOR)
}

/// The value of `key` in a flat-keyed file (`key value` per line).
fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

/// The `oom_kill` count of v2 `memory.events`, e.g.
/// `"low 0\nhigh 0\nmax 12\noom 3\noom_kill 3\noom_group_kill 0\n"` → 3.
pub fn parse_memory_events_oom_kill(text: &str) -> Option<u64> {
    keyed_value(text, "oom_kill")
}

/// The `oom_kill` count of v1 `memory.oom_control`, e.g.
/// `"oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"` → 2 (absent before kernel 4.13).
pub fn parse_oom_control_oom_kill(text: &str) -> Option<u64> {
    keyed_value(text, "oom_kill")
}

/// The value of `key` in `memory.stat`, e.g. `inactive_file`. v1 (kernel 6.x, abridged) lists
/// this cgroup's own counters, then `total_*` ones that include the cgroups below it:
/// ```text
/// cache 643072
/// rss 1638400
/// inactive_anon 1499136
/// active_anon 12288
/// inactive_file 16384
/// active_file 626688
/// hierarchical_memory_limit 9223372036854771712
/// total_cache 643072
/// total_inactive_file 16384
/// total_active_file 626688
/// ```
/// v2 (always hierarchical) has no `total_*`:
/// ```text
/// anon 1466368
/// file 643072
/// kernel 1142784
/// shmem 0
/// file_dirty 28672
/// inactive_anon 1499136
/// active_anon 12288
/// inactive_file 16384
/// active_file 626688
/// unevictable 0
/// ```
/// Keys match whole: `inactive_file` never reads `total_inactive_file`.
pub fn parse_memory_stat_field(text: &str, key: &str) -> Option<u64> {
    keyed_value(text, key)
}

/// Parses `cgroup.procs`: one PID per line, e.g. `"4242\n4243\n"`. PID 0 is never valid there.
pub fn parse_pids(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter(|&pid| pid != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::os::fd::AsFd;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Command, Stdio};

    thread_local! {
        /// What the fake kernel puts in a new cgroup directory; set by the fake-tree tests of
        /// this thread (a plain mkdir makes no control files).
        static FAKE_KERNEL: Cell<Option<fn(&Path)>> = const { Cell::new(None) };
    }

    /// Called by `create_child` right after its mkdir, in test builds only.
    pub(super) fn fake_kernel_files(dir: &Path) {
        if let Some(make) = FAKE_KERNEL.with(Cell::get) {
            make(dir);
        }
    }

    fn put(path: &Path, text: &str) {
        fs::write(path, text).unwrap();
    }

    fn read(path: &Path) -> String {
        fs::read_to_string(path).unwrap()
    }

    const MIB: u64 = 1 << 20;

    // PIDs above the kernel's PID_MAX_LIMIT (4194304): a fake tree never names a real process.
    const FAKE_PIDS: &str = "4194305\n4194306\n";

    #[test]
    fn parses_proc_cgroup() {
        let v1 = "9:name=systemd:/\n4:memory:/process_api/af2ae7\n1:cpu,cpuacct:/\n0::/\n";
        let table = [
            (
                v1,
                ProcCgroup {
                    v1_memory: Some(("memory", "/process_api/af2ae7")),
                    unified: Some("/"),
                },
            ),
            (
                "0::/user.slice/user-1000.slice/session-2.scope\n",
                ProcCgroup {
                    v1_memory: None,
                    unified: Some("/user.slice/user-1000.slice/session-2.scope"),
                },
            ),
            (
                "4:cpu,memory:/x\n",
                ProcCgroup {
                    v1_memory: Some(("cpu,memory", "/x")),
                    unified: None,
                },
            ),
            (
                "0::/a:b\n",
                ProcCgroup {
                    v1_memory: None,
                    unified: Some("/a:b"),
                },
            ),
            // `memory` only as a whole controller name, never a prefix or a named hierarchy.
            ("5:memoryx:/y\n3:name=memory:/z\n", ProcCgroup::default()),
            ("", ProcCgroup::default()),
            ("garbage\n", ProcCgroup::default()),
        ];
        for (text, want) in table {
            assert_eq!(parse_proc_cgroup(text), want, "{text:?}");
        }
    }

    #[test]
    fn parses_controller_lists() {
        let table = [
            ("cpuset cpu io memory hugetlb pids rdma misc\n", true),
            ("memory\n", true),
            ("cpu pids\n", false),
            ("", false),
            ("memoryx\n", false),
        ];
        for (text, want) in table {
            assert_eq!(lists_controller(text, "memory"), want, "{text:?}");
        }
    }

    #[test]
    fn parses_sizes() {
        let table = [
            ("max\n", None),
            ("67108864\n", Some(64 * MIB)),
            ("0\n", Some(0)),
            ("9223372036854771712\n", None), // v1 unlimited, 4 KiB pages
            ("9223372036854710272\n", None), // v1 unlimited, 64 KiB pages
            ("", None),
            ("lots\n", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_limit(text), want, "{text:?}");
        }
        assert_eq!(parse_u64("52428800\n"), Some(52428800));
        assert_eq!(
            parse_u64("9223372036854771712\n"),
            Some(9223372036854771712)
        );
        assert_eq!(parse_u64("max\n"), None);
    }

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

    /// Real v1 `memory.stat` (kernel 6.x, abridged), of a cgroup whose child holds 64 KiB of
    /// inactive file cache.
    const V1_MEMORY_STAT: &str = "cache 643072\nrss 1638400\nrss_huge 0\nshmem 0\n\
mapped_file 0\ndirty 28672\nwriteback 0\nswap 0\npgpgin 13300\npgpgout 12743\n\
inactive_anon 1499136\nactive_anon 12288\ninactive_file 16384\nactive_file 626688\n\
unevictable 0\nhierarchical_memory_limit 9223372036854771712\n\
hierarchical_memsw_limit 9223372036854771712\ntotal_cache 708608\ntotal_rss 1638400\n\
total_inactive_anon 1499136\ntotal_active_anon 12288\ntotal_inactive_file 81920\n\
total_active_file 626688\ntotal_unevictable 0\n";

    /// Real v2 `memory.stat` (kernel 6.x, abridged).
    const V2_MEMORY_STAT: &str = "anon 1466368\nfile 643072\nkernel 1142784\n\
kernel_stack 65536\npagetables 53248\nsock 0\nshmem 0\nfile_mapped 0\nfile_dirty 28672\n\
file_writeback 0\nswapcached 0\nanon_thp 0\ninactive_anon 1499136\nactive_anon 12288\n\
inactive_file 16384\nactive_file 626688\nunevictable 0\nslab_reclaimable 180000\n\
workingset_refault_file 151\npgfault 31093\n";

    #[test]
    fn parses_memory_stat_fields() {
        let table = [
            (V1_MEMORY_STAT, "inactive_file", Some(16384)),
            (V1_MEMORY_STAT, "total_inactive_file", Some(81920)),
            (
                V1_MEMORY_STAT,
                "hierarchical_memory_limit",
                Some(9223372036854771712),
            ),
            (V2_MEMORY_STAT, "inactive_file", Some(16384)),
            (V2_MEMORY_STAT, "total_inactive_file", None), // v2 has no total_*
            (V2_MEMORY_STAT, "file", Some(643072)),        // whole keys: not file_mapped
            (V2_MEMORY_STAT, "file_dirty", Some(28672)),
            (V2_MEMORY_STAT, "inactive", None),
            ("inactive_file lots\n", "inactive_file", None),
            ("", "inactive_file", None),
        ];
        for (text, key, want) in table {
            assert_eq!(parse_memory_stat_field(text, key), want, "{key}");
        }
    }

    #[test]
    fn working_set_never_goes_below_zero() {
        let (_tmp, ours, _) = fake_v2();
        let job = JobCgroup {
            dir: ours.clone(),
            version: Version::V2,
            removed: true, // not ours to remove
        };
        // Counters are read at different instants: inactive_file can exceed a later usage.
        put(&ours.join("memory.current"), "8192\n");
        put(&ours.join("memory.stat"), "inactive_file 16384\n");
        assert_eq!(job.working_set_bytes(), Some(0));
        put(&ours.join("memory.stat"), "active_file 16384\n");
        assert_eq!(job.working_set_bytes(), None);
        fs::remove_file(ours.join("memory.current")).unwrap();
        put(&ours.join("memory.stat"), "inactive_file 0\n");
        assert_eq!(job.working_set_bytes(), None);
    }

    #[test]
    fn parses_pids() {
        let table: [(&str, &[u32]); 4] = [
            ("4242\n4243\n", &[4242, 4243]),
            ("", &[]),
            ("0\n17\n", &[17]),
            ("x\n-3\n9\n", &[9]),
        ];
        for (text, want) in table {
            assert_eq!(parse_pids(text), want, "{text:?}");
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
    fn rejects_bad_names() {
        let parent = Parent {
            version: Version::V1,
            dir: PathBuf::from("/nonexistent"),
        };
        for name in ["", ".", "..", "a/b", SUPERVISOR_LEAF] {
            let err = parent.create_child(name, &Limits::default()).unwrap_err();
            assert!(
                matches!(err, CgroupError::InvalidName { .. }),
                "{name:?}: {err}"
            );
        }
    }

    // ---- cgroup v2, fake tree ----

    /// A pure v2 mount at `<tmp>` with our process in `/user.slice/app.scope`.
    fn fake_v2() -> (tempfile::TempDir, PathBuf, &'static str) {
        let tmp = tempfile::tempdir().unwrap();
        put(
            &tmp.path().join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        );
        let ours = tmp.path().join("user.slice/app.scope");
        fs::create_dir_all(&ours).unwrap();
        put(&ours.join("cgroup.controllers"), "cpu memory pids\n");
        put(&ours.join("cgroup.subtree_control"), "");
        put(&ours.join("cgroup.procs"), "4194305\n");
        (tmp, ours, "0::/user.slice/app.scope\n")
    }

    fn v2_kernel_files(dir: &Path) {
        put(&dir.join("cgroup.procs"), "");
        put(&dir.join("cgroup.kill"), "");
        put(&dir.join("memory.max"), "max\n");
        put(&dir.join("memory.swap.max"), "max\n");
        put(&dir.join("memory.oom.group"), "0\n");
        put(&dir.join("memory.current"), "1048576\n");
        put(&dir.join("memory.peak"), "2097152\n");
        put(&dir.join("memory.stat"), V2_MEMORY_STAT);
        put(
            &dir.join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 3\noom_kill 3\noom_group_kill 0\n",
        );
    }

    /// An older v2 kernel: no cgroup.kill, memory.peak or swap accounting (and this fake has no
    /// memory.stat).
    fn v2_old_kernel_files(dir: &Path) {
        put(&dir.join("cgroup.procs"), "");
        put(&dir.join("memory.max"), "max\n");
        put(&dir.join("memory.current"), "0\n");
        put(
            &dir.join("memory.events"),
            "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
        );
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

    #[test]
    fn unavailable_messages_name_the_fix() {
        let err = Unavailable::NotWritable {
            path: PathBuf::from("/sys/fs/cgroup/user.slice"),
            source: io::Error::from_raw_os_error(nix::libc::EACCES),
        };
        let text = err.to_string();
        assert!(
            text.contains("no writable memory cgroup: /sys/fs/cgroup/user.slice"),
            "{text}"
        );
        assert!(text.contains("run as root"), "{text}");
        assert!(
            text.contains("systemd-run --user --scope -p Delegate=yes"),
            "{text}"
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

    // ---- cgroup v1, fake tree ----

    /// A hybrid system: v1 memory at `<tmp>/memory`, an unrelated unified mount.
    fn fake_v1(controllers: &str) -> (tempfile::TempDir, PathBuf, String) {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("unified")).unwrap();
        put(&tmp.path().join("unified/cgroup.controllers"), "");
        let ours = tmp.path().join(controllers).join("process_api/af2ae7");
        fs::create_dir_all(&ours).unwrap();
        put(&ours.join("cgroup.procs"), "4194305\n");
        let proc_text = format!("9:name=systemd:/\n4:{controllers}:/process_api/af2ae7\n0::/\n");
        (tmp, ours, proc_text)
    }

    fn v1_kernel_files(dir: &Path) {
        put(&dir.join("cgroup.procs"), "");
        put(&dir.join("memory.limit_in_bytes"), "9223372036854771712\n");
        put(
            &dir.join("memory.memsw.limit_in_bytes"),
            "9223372036854771712\n",
        );
        put(&dir.join("memory.usage_in_bytes"), "1048576\n");
        put(&dir.join("memory.max_usage_in_bytes"), "3145728\n");
        put(&dir.join("memory.stat"), V1_MEMORY_STAT);
        put(
            &dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
    }

    fn v1_kernel_files_without_swap_accounting(dir: &Path) {
        v1_kernel_files(dir);
        fs::remove_file(dir.join("memory.memsw.limit_in_bytes")).unwrap();
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

    // ---- the real cgroup of this machine ----

    /// Our real memory cgroup, or `None` (with the reason printed) where this machine has none
    /// we can write.
    fn real_parent(test: &str) -> Option<Parent> {
        match Parent::detect_current() {
            Ok(parent) => Some(parent),
            Err(err) => {
                eprintln!("SKIPPED {test}: {err}");
                None
            }
        }
    }

    fn unique(tag: &str) -> String {
        format!("oomguard-test-{}-{tag}", std::process::id())
    }

    /// `program args` started inside `job` via `pre_exec` + `join_from_child`.
    fn spawn_inside(
        job: &JobCgroup,
        program: &str,
        args: &[&str],
    ) -> io::Result<std::process::Child> {
        let procs = job.open_procs()?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: the closure only does one write(2) on an fd opened before fork: no allocation,
        // no locks, async-signal-safe.
        unsafe {
            command.pre_exec(move || JobCgroup::join_from_child(procs.as_fd()));
        }
        command.spawn()
    }

    #[test]
    fn real_cgroup_oom_kill_is_counted_and_attributed() {
        let test = "real_cgroup_oom_kill_is_counted_and_attributed";
        let Some(parent) = real_parent(test) else {
            return;
        };
        let limit = 64 * MIB;
        let limits = Limits {
            memory_max_bytes: Some(limit),
            swap_max_bytes: None,
        };
        let job = parent.create_child(&unique("oom"), &limits).unwrap();
        assert_eq!(job.limit_bytes(), Some(limit));
        assert_eq!(job.oom_kills(), Some(0));
        // 200 MiB, every page written (bytes * n copies into fresh memory).
        let script = "s = b'\\x01' * (200 << 20); print(len(s))";
        let mut child = match spawn_inside(&job, "python3", &["-c", script]) {
            Ok(child) => child,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                eprintln!("SKIPPED {test}: python3 not found");
                return;
            }
            Err(err) => panic!("spawn: {err}"),
        };
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(nix::libc::SIGKILL), "{status:?}");
        assert!(
            job.oom_kills().unwrap() >= 1,
            "oom_kills {:?}",
            job.oom_kills()
        );
        let peak = job.peak_bytes().unwrap();
        assert!(
            peak > limit * 3 / 4 && peak <= limit,
            "peak {peak} not near the limit {limit}"
        );
        let dir = job.dir().to_path_buf();
        job.remove().unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn real_cgroup_kill_all_then_remove() {
        let test = "real_cgroup_kill_all_then_remove";
        let Some(parent) = real_parent(test) else {
            return;
        };
        let job = parent
            .create_child(&unique("kill"), &Limits::default())
            .unwrap();
        let mut child = spawn_inside(&job, "sleep", &["1000"]).unwrap();
        assert_eq!(job.pids(), [child.id()]);
        assert!(job.usage_bytes().is_some());
        job.kill_all().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(nix::libc::SIGKILL), "{status:?}");
        let dir = job.dir().to_path_buf();
        job.remove().unwrap();
        assert!(!dir.exists());
        // Idempotent in effect: a JobCgroup whose directory is gone removes cleanly.
        let gone = JobCgroup {
            dir: dir.clone(),
            version: parent.version,
            removed: false,
        };
        gone.remove().unwrap();
    }

    #[test]
    fn real_cgroup_remove_kills_what_is_left() {
        let test = "real_cgroup_remove_kills_what_is_left";
        let Some(parent) = real_parent(test) else {
            return;
        };
        let job = parent
            .create_child(&unique("drop"), &Limits::default())
            .unwrap();
        let mut child = spawn_inside(&job, "sleep", &["1000"]).unwrap();
        let dir = job.dir().to_path_buf();
        // Reap in another thread while remove() kills and waits, as a supervisor would.
        let reaper = std::thread::spawn(move || child.wait().unwrap());
        job.remove().unwrap();
        assert_eq!(reaper.join().unwrap().signal(), Some(nix::libc::SIGKILL));
        assert!(!dir.exists());
    }

    #[test]
    fn real_cgroup_working_set_leaves_out_file_cache() {
        let test = "real_cgroup_working_set_leaves_out_file_cache";
        let Some(parent) = real_parent(test) else {
            return;
        };
        // On disk, not tmpfs: tmpfs pages are shmem, which is not file cache and cannot be
        // dropped, so they rightly count toward the working set.
        let scratch = tempfile::tempdir().unwrap();
        let on_tmpfs = nix::sys::statfs::statfs(scratch.path())
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        if on_tmpfs {
            eprintln!("SKIPPED {test}: the temp dir is on tmpfs, which makes no file cache");
            return;
        }
        let file = scratch.path().join("data.bin");
        let job = parent
            .create_child(&unique("ws"), &Limits::default())
            .unwrap();
        let usage_before = job.usage_bytes().unwrap();
        let of = format!("of={}", file.display());
        let args = ["if=/dev/zero", &of, "bs=1M", "count=100", "conv=fsync"];
        let status = spawn_inside(&job, "dd", &args).unwrap().wait().unwrap();
        assert!(status.success(), "{status:?}");
        // The cache stays charged to the cgroup after dd exits.
        let usage = job.usage_bytes().unwrap();
        let working_set = job.working_set_bytes().unwrap();
        eprintln!("{test}: usage {usage_before} -> {usage}, working set {working_set}");
        assert!(usage >= usage_before + 90 * MIB, "usage {usage}");
        assert!(
            working_set + 80 * MIB <= usage,
            "working set {working_set} not well below usage {usage}"
        );
        job.remove().unwrap();
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
