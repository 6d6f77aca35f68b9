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
//! Layout: this file holds what the rest of oomguard uses ([`Parent`], [`JobCgroup`],
//! [`Limits`], the errors). What differs between the versions sits behind [`Version`] (its file
//! names in `Files`, its limit writing and one-time preparation): `v1` and `v2` hold those
//! differences, `parse` the file parsers both share, `teardown` killing and removing a cgroup
//! tree, `stale` attempt names and the cleanup of leftovers.
//!
//! It does not spawn the job ([`crate::launch::child`] does, using [`JobCgroup::open_procs`] and
//! [`JobCgroup::join_from_child`]), sample on a schedule (callers read counters when they want), or
//! decide anything (naming the cause of a death is [`crate::judge::classify`]'s job). The file
//! parsers work on strings and every reader takes its paths, so tests use fake trees in a temp dir.

mod parse;
mod stale;
mod teardown;
#[cfg(test)]
mod testkit;
mod v1;
mod v2;

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{access, AccessFlags};

use crate::observe::mem::KeptFiles;

pub use parse::{
    lists_controller, parse_limit, parse_memory_stat_fields, parse_pids, parse_proc_cgroup,
    parse_u64,
};
pub use stale::attempt_name;
pub use teardown::kill_and_remove;
pub use v2::SUPERVISOR_LEAF;

/// A testing hook: when set, [`Parent::detect_current`] looks for the cgroup mount there instead
/// of /sys/fs/cgroup, so tests of the real binary can play a machine without writable cgroups
/// (an empty directory) or with a fake v2 tree. Not meant for users.
pub const CGROUP_ROOT_ENV: &str = "OOMGUARD_CGROUP_ROOT";

/// How long [`JobCgroup::remove`] waits for the killed processes to leave the cgroup.
const REMOVE_WAIT: Duration = Duration::from_secs(5);

/// Which cgroup hierarchy our memory cgroup is in: v1 (a `memory` hierarchy of its own) or v2
/// (the unified one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The files an attempt cgroup's counters are read from, which differ by version; `v1` and `v2`
/// each hold one ([`Version::files`]).
#[derive(Debug)]
pub(crate) struct Files {
    /// Memory charged now.
    pub usage: &'static str,
    /// The most memory ever charged.
    pub peak: &'static str,
    /// The hard memory limit.
    pub limit: &'static str,
    /// The file holding the count of processes the kernel OOM killer killed.
    pub oom_kills: &'static str,
    /// Reads that count from the text of [`Files::oom_kills`].
    pub parse_oom_kills: fn(&str) -> Option<u64>,
    /// The `memory.stat` key of the inactive file cache of the cgroup and those below it.
    pub inactive_file: &'static str,
    /// The `memory.stat` keys of anonymous memory, page cache and shmem (tmpfs, shared
    /// anonymous mappings) of the cgroup and those below it.
    pub anon: &'static str,
    pub file: &'static str,
    pub shmem: &'static str,
    /// Swap in use: a `memory.stat` key (v1 `total_swap`, present only with swap accounting)
    /// or a file of its own (v2 `memory.swap.current`).
    pub swap: SwapCounter,
}

/// Where a version keeps the cgroup's swap usage.
#[derive(Debug)]
pub(crate) enum SwapCounter {
    StatKey(&'static str),
    File(&'static str),
}

/// The job cgroup's memory at one tick, from the kernel's own counters: O(1) to read however
/// big the job is, and shared pages are counted once (they are charged to one cgroup). Each
/// field is `None` where this kernel does not show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupMem {
    /// Memory charged now, page cache included (what the hard limit applies to).
    pub usage_bytes: u64,
    /// Usage less the inactive file cache: the working set, as kubelet and cAdvisor define it.
    pub working_set_bytes: Option<u64>,
    pub anon_bytes: Option<u64>,
    /// Page cache charged to the job (files it read or wrote).
    pub file_bytes: Option<u64>,
    pub shmem_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
}

impl CgroupMem {
    /// The counters of two cgroups that hold different processes, as one: each sum is known
    /// only where both are (unknown is not a guess).
    pub fn plus(&self, other: &CgroupMem) -> CgroupMem {
        let both = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.saturating_add(b));
        CgroupMem {
            usage_bytes: self.usage_bytes.saturating_add(other.usage_bytes),
            working_set_bytes: both(self.working_set_bytes, other.working_set_bytes),
            anon_bytes: both(self.anon_bytes, other.anon_bytes),
            file_bytes: both(self.file_bytes, other.file_bytes),
            shmem_bytes: both(self.shmem_bytes, other.shmem_bytes),
            swap_bytes: both(self.swap_bytes, other.swap_bytes),
        }
    }
}

/// Where an attempt cgroup's code picks `v1` or `v2`: its readers, limits and preparation go
/// through here. ([`Parent::detect`], which finds out the version, asks `v1` and `v2` directly.)
impl Version {
    /// The file names and parsers of this version.
    pub(crate) fn files(self) -> &'static Files {
        match self {
            Version::V1 => &v1::FILES,
            Version::V2 => &v2::FILES,
        }
    }

    /// The one-time work in our own cgroup `dir` before children can be made (see
    /// [`Parent::prepare`]).
    fn prepare(self, dir: &Path) -> Result<(), CgroupError> {
        match self {
            Version::V1 => Ok(()),
            Version::V2 => v2::prepare(dir),
        }
    }

    /// Writes the limits of the new cgroup at `dir` (see [`Parent::create_child`]).
    fn set_limits(self, dir: &Path, limits: &Limits) -> Result<(), CgroupError> {
        match self {
            Version::V1 => v1::set_limits(dir, limits),
            Version::V2 => v2::set_limits(dir, limits),
        }
    }
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
            (_, _, Some((controllers, path))) => (
                Version::V1,
                under(&v1::mount(cgroup_root, controllers), path),
            ),
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
            v2::check_delegated(&dir)?;
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

    /// The one-time work before attempt cgroups can be made. v2: makes sure `+memory` is in our own
    /// `cgroup.subtree_control`; where the "no internal processes" rule forbids it (EBUSY, see
    /// [`v2::needs_leaf`]), first moves oomguard, and any of its descendants still in our cgroup,
    /// into a [`SUPERVISOR_LEAF`] below it. v1: nothing to do. Idempotent: once `memory` is listed
    /// it only reads that one file.
    ///
    /// Call it once at startup, before starting any helper process that is not oomguard's
    /// descendant, and before any thread that forks runs: the leaf trick works only if every
    /// process in our cgroup is ours to move. A process we do not own there (the shell that
    /// started us in the same scope) makes it fail with [`CgroupError::InternalProcesses`].
    /// Descendants are moved too, so a guard started earlier does not break it, but it is
    /// cheaper to get the order right. [`Parent::create_child`] calls it as well.
    pub fn prepare(&self) -> Result<(), CgroupError> {
        self.version.prepare(&self.dir)
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
        let job = JobCgroup::at(dir, self.version, false);
        #[cfg(test)]
        testkit::fake_kernel_files(&job.dir);
        job.version.set_limits(&job.dir, limits)?;
        tracing::debug!(dir = %job.dir.display(), ?limits, "created attempt cgroup");
        Ok(job)
    }
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

/// Writes the limit `value` to `file` of the cgroup at `dir`; an error names the file.
fn write_limit(dir: &Path, file: &str, value: u64) -> Result<(), CgroupError> {
    let path = dir.join(file);
    write_file(&path, &value.to_string()).map_err(io_error("write limit to", &path))
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
    /// The files read every tick (usage, memory.stat, cgroup.procs, the directory itself),
    /// opened on first use and read with `pread` from then on: no path walk down the cgroup
    /// tree, open and close per file per tick. Closed before the cgroup is removed.
    open: KeptFiles<&'static str>,
}

impl JobCgroup {
    fn at(dir: PathBuf, version: Version, removed: bool) -> JobCgroup {
        JobCgroup {
            dir,
            version,
            removed,
            open: KeptFiles::new(8).missing_stays(),
        }
    }

    /// A cgroup someone else made and removes (a Slurm step's): read, never removed by us.
    pub fn observed(dir: PathBuf, v2: bool) -> JobCgroup {
        let version = if v2 { Version::V2 } else { Version::V1 };
        JobCgroup::at(dir, version, true)
    }

    /// `name`, a file of the cgroup, read whole through its kept-open handle.
    fn read_kept(&self, name: &'static str) -> Option<String> {
        self.open.read(name, || self.dir.join(name), 4096).ok()
    }

    /// Whether cgroups were made below this one: a cgroup directory's link count is 2 plus
    /// its subdirectories (kernfs keeps it so), one `fstat` of the kept-open directory
    /// instead of listing its ~30 control files every tick.
    fn has_children(&self) -> bool {
        self.open
            .with("", || self.dir.clone(), |dir| dir.metadata())
            .map_or(true, |meta| meta.nlink() > 2)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    #[cfg(test)]
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

    /// Memory charged to the cgroup now (v2 `memory.current`, v1 `memory.usage_in_bytes`);
    /// the tests' reading of what [`JobCgroup::memory`] gathers in one go.
    #[cfg(test)]
    pub fn usage_bytes(&self) -> Option<u64> {
        self.read_u64(self.version.files().usage)
    }

    /// The working set, as kubelet and cAdvisor define it: [`usage_bytes`](JobCgroup::usage_bytes)
    /// minus the inactive file cache (v2 `inactive_file` of `memory.stat`; v1
    /// `total_inactive_file`, which unlike `inactive_file` counts the cgroups below too), never
    /// below 0. Page cache the kernel can drop at no cost must not count toward a soft memory
    /// bound: a job that streams its dataset from disk fills the cache up to the limit and would
    /// otherwise be stopped for nothing. `None` when either file is unreadable. The tests'
    /// reading of what [`JobCgroup::memory`] gathers in one go.
    #[cfg(test)]
    pub fn working_set_bytes(&self) -> Option<u64> {
        let key = self.version.files().inactive_file;
        let usage = self.usage_bytes()?;
        let stat = self.read_kept("memory.stat")?;
        Some(usage.saturating_sub(parse_memory_stat_fields(&stat, [key])[0]?))
    }

    /// Every counter of [`CgroupMem`] in one go: the usage file, `memory.stat` read once for
    /// all its fields, and on v2 `memory.swap.current`. `None` when the usage is unreadable
    /// (the cgroup is gone).
    pub fn memory(&self) -> Option<CgroupMem> {
        let files = self.version.files();
        let usage_bytes = self.read_u64(files.usage)?;
        let stat = self.read_kept("memory.stat").unwrap_or_default();
        let swap_key = match files.swap {
            SwapCounter::StatKey(key) => key,
            SwapCounter::File(_) => "",
        };
        let [inactive_file, anon, file, shmem, stat_swap] = parse_memory_stat_fields(
            &stat,
            [
                files.inactive_file,
                files.anon,
                files.file,
                files.shmem,
                swap_key,
            ],
        );
        let swap_bytes = match files.swap {
            SwapCounter::StatKey(_) => stat_swap,
            SwapCounter::File(name) => self.read_u64(name),
        };
        Some(CgroupMem {
            usage_bytes,
            working_set_bytes: inactive_file.map(|inactive| usage_bytes.saturating_sub(inactive)),
            anon_bytes: anon,
            file_bytes: file,
            shmem_bytes: shmem,
            swap_bytes,
        })
    }

    /// The processes in this cgroup and in the cgroups the job made below it: the job's
    /// tree, from the kernel's own list (one small read, not a walk of /proc). Empty when
    /// unreadable.
    pub fn tree_pids(&self) -> Vec<u32> {
        // v1's cgroup.procs keeps the list it built for an open file and hands it out again
        // for a second of idleness (CGROUP_PIDLIST_DESTROY_DELAY): a kept-open handle would
        // miss a forked DataLoader worker. v2 lists the tasks afresh on every read.
        let mut pids = match self.version {
            Version::V1 => self.pids(),
            Version::V2 => self
                .read_kept("cgroup.procs")
                .map(|text| parse_pids(&text))
                .unwrap_or_default(),
        };
        // Nested cgroups are rare (a job that runs systemd-run or its own container): they
        // are listed only where the directory's link count says there are some.
        if self.has_children() {
            for child in teardown::child_cgroups(&self.dir) {
                pids.extend(teardown::pids_below(&child));
            }
        }
        pids
    }

    /// A handle on an existing cgroup directory that is never removed (tests of readers).
    #[cfg(test)]
    pub(crate) fn fake(dir: PathBuf, version: Version) -> JobCgroup {
        JobCgroup::at(dir, version, true)
    }

    /// The most memory ever charged (v2 `memory.peak`, kernel >= 5.19, `None` where absent;
    /// v1 `memory.max_usage_in_bytes`).
    pub fn peak_bytes(&self) -> Option<u64> {
        self.read_u64(self.version.files().peak)
    }

    /// Processes the kernel OOM killer killed in this cgroup (v2 `memory.events`, which counts
    /// descendants too; v1 `memory.oom_control`, kernel >= 4.13).
    pub fn oom_kills(&self) -> Option<u64> {
        let files = self.version.files();
        (files.parse_oom_kills)(&fs::read_to_string(self.dir.join(files.oom_kills)).ok()?)
    }

    /// The hard limit in force; `None` for no limit (or unreadable).
    pub fn limit_bytes(&self) -> Option<u64> {
        parse_limit(&self.read_kept(self.version.files().limit)?)
    }

    /// The processes in this cgroup (`cgroup.procs`; not those of cgroups the job made below
    /// it). Empty when unreadable.
    pub fn pids(&self) -> Vec<u32> {
        teardown::read_pids(&self.dir)
    }

    /// SIGKILLs everything inside, descendant cgroups included: v2 `cgroup.kill` (kernel >=
    /// 5.14) where present, otherwise (and on v1) SIGKILL to every PID in `cgroup.procs`, pass
    /// after pass until a pass finds no PID it has not signalled yet (a forking process can race
    /// one pass), at most 64 passes. Returns once the signals are sent; the processes may still be
    /// exiting. PIDs that vanished meanwhile are skipped; oomguard's own PID is never signalled.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        teardown::kill_all_at(&self.dir)
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
        self.open.retain(|_| false);
        kill_and_remove(&self.dir, REMOVE_WAIT)
    }

    fn read_u64(&self, file: &'static str) -> Option<u64> {
        parse_u64(&self.read_kept(file)?)
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

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn working_set_never_goes_below_zero() {
        let (_tmp, ours, _) = fake_v2();
        let job = JobCgroup::at(ours.clone(), Version::V2, true); // not ours to remove
                                                                  // Counters are read at different
                                                                  // instants: inactive_file can
                                                                  // exceed a later usage.
        put(&ours.join("memory.current"), "8192\n");
        put(&ours.join("memory.stat"), "inactive_file 16384\n");
        assert_eq!(job.working_set_bytes(), Some(0));
        put(&ours.join("memory.stat"), "active_file 16384\n");
        assert_eq!(job.working_set_bytes(), None);
        // A cgroup that is gone: the kernel fails reads of its kept-open files (ENODEV); a
        // fixture's unlinked file would still read, so a fresh handle opens nothing.
        fs::remove_file(ours.join("memory.current")).unwrap();
        put(&ours.join("memory.stat"), "inactive_file 0\n");
        let job = JobCgroup::at(ours.clone(), Version::V2, true);
        assert_eq!(job.working_set_bytes(), None);
    }

    #[test]
    fn tree_pids_include_cgroups_the_job_made_below_its_own() {
        for version in [Version::V1, Version::V2] {
            let (_tmp, ours, _) = fake_v2();
            put(&ours.join("cgroup.procs"), "10\n11\n");
            let job = JobCgroup::at(ours.clone(), version, true);
            assert_eq!(job.tree_pids(), vec![10, 11], "{version:?}");
            // The job runs systemd-run or a container: a cgroup below, and one below that.
            let nested = ours.join("inner.scope/deeper");
            fs::create_dir_all(&nested).unwrap();
            put(&ours.join("inner.scope/cgroup.procs"), "12\n");
            put(&nested.join("cgroup.procs"), "13\n");
            let mut pids = job.tree_pids();
            pids.sort_unstable();
            assert_eq!(pids, vec![10, 11, 12, 13], "{version:?}");
            // v2 reads its kept-open cgroup.procs afresh; v1 opens it afresh.
            put(&ours.join("cgroup.procs"), "10\n14\n");
            fs::remove_dir_all(ours.join("inner.scope")).unwrap();
            assert_eq!(job.tree_pids(), vec![10, 14], "{version:?}");
        }
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
        let gone = JobCgroup::at(dir.clone(), parent.version, false);
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
        // The cache stays charged to the cgroup after dd exits. The kernel's statistics are
        // flushed in batches (per CPU; v2 every few seconds), so the reading is taken again
        // until it shows the cache, up to a far deadline: a loaded machine is slower, not wrong.
        let read = || (job.usage_bytes().unwrap(), job.working_set_bytes().unwrap());
        let shows_cache = |(usage, working_set): (u64, u64)| {
            usage >= usage_before + 90 * MIB && working_set + 80 * MIB <= usage
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut reading = read();
        while !shows_cache(reading) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
            reading = read();
        }
        let (usage, working_set) = reading;
        eprintln!("{test}: usage {usage_before} -> {usage}, working set {working_set}");
        assert!(usage >= usage_before + 90 * MIB, "usage {usage}");
        assert!(
            working_set + 80 * MIB <= usage,
            "working set {working_set} not well below usage {usage}"
        );
        job.remove().unwrap();
    }
}
