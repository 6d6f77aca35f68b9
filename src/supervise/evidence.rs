//! What the kernel and /proc say about an attempt, read around it: the OOM-kill counters and
//! kernel log before and after ([`EvidenceBefore`], from [`KernelPaths`], fixtures in tests),
//! the files the job holds open for writing when it is stopped ([`open_for_writing`]), and
//! which SIGKILL of a job's process oomguard did not send ([`is_unexplained_sigkill`]). It
//! reads; it does not judge what the evidence means ([`crate::judge::classify`] does).

use std::collections::HashSet;
use std::path::PathBuf;

use crate::judge::classify::KernelEvidence;
use crate::judge::outcome::Ending;
use crate::judge::scan;
use crate::observe::cgroup_chain;
use crate::observe::kernel::{self, Kmsg};

/// Where kernel evidence is read from; fixtures in tests.
#[derive(Debug, Clone)]
pub struct KernelPaths {
    pub vmstat: PathBuf,
    pub kmsg: PathBuf,
}

impl Default for KernelPaths {
    fn default() -> Self {
        Self {
            vmstat: "/proc/vmstat".into(),
            kmsg: "/dev/kmsg".into(),
        }
    }
}

/// The files (device, inode) that `pids` hold open for writing, from `/proc/PID/fd` and the
/// access mode in `/proc/PID/fdinfo` (`flags:` octal; O_WRONLY 1, O_RDWR 2). Pipes and sockets
/// are files too; they never match a checkpoint, so they are not told apart.
pub fn open_for_writing(pids: &[u32]) -> HashSet<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut files = HashSet::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue; // gone, or not ours to read
        };
        for fd in fds.filter_map(Result::ok) {
            let flags = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            });
            if flags.is_some_and(|f| f & 0o3 != 0) {
                if let Ok(meta) = std::fs::metadata(fd.path()) {
                    if meta.is_file() {
                        files.insert((meta.dev(), meta.ino()));
                    }
                }
            }
        }
    }
    files
}

/// Whether reaping `pid` with `ending` shows a process of the job (not its main process,
/// `pgid`) killed by a SIGKILL that oomguard did not send: oomguard sends SIGKILL only to
/// leftovers after the main process ended (and on the user's or a memory bound's stop, whose
/// verdicts do not look at this).
pub(super) fn is_unexplained_sigkill(
    pid: u32,
    pgid: u32,
    ending: Ending,
    leftovers_stopped: bool,
) -> bool {
    pid != pgid && matches!(ending, Ending::Signaled { signal: 9, .. }) && !leftovers_stopped
}

/// Kernel evidence read before an attempt, to compare with after it.
pub(super) struct EvidenceBefore {
    vmstat_oom_kills: Option<u64>,
    /// The cgroups the job lives in when it gets no attempt cgroup (oomguard's own and those
    /// above it, whose OOM-kill counters any user can read), and their counters. An attempt
    /// cgroup's own counter already sees every kill of the job's processes.
    chain: Option<(cgroup_chain::Chain, Vec<cgroup_chain::Level>)>,
    kmsg: Option<Kmsg>,
}

impl EvidenceBefore {
    pub(super) fn read(paths: &KernelPaths, without_attempt_cgroup: bool) -> Self {
        let chain = without_attempt_cgroup
            .then(cgroup_chain::Chain::detect_current)
            .flatten()
            .map(|chain| {
                let levels = chain.read();
                (chain, levels)
            });
        EvidenceBefore {
            vmstat_oom_kills: kernel::read_vmstat_oom_kill(&paths.vmstat),
            chain,
            kmsg: Kmsg::open_at_end(&paths.kmsg),
        }
    }

    /// The evidence after the attempt: counters' deltas, and the kernel log's victim lines that
    /// name a PID of the job (`known`).
    pub(super) fn after(mut self, paths: &KernelPaths, known: &HashSet<u32>) -> KernelEvidence {
        KernelEvidence {
            vmstat_oom_kill_delta: self
                .vmstat_oom_kills
                .zip(kernel::read_vmstat_oom_kill(&paths.vmstat))
                .map(|(before, after)| after.saturating_sub(before)),
            victim_lines: self
                .kmsg
                .as_mut()
                .map(Kmsg::read_new)
                .unwrap_or_default()
                .into_iter()
                .filter(|line| {
                    scan::kernel_oom_victim_pid(line).is_some_and(|pid| known.contains(&pid))
                })
                .collect(),
            cgroup_oom_kills: None,
            cgroup_chain_kill: self
                .chain
                .and_then(|(chain, before)| cgroup_chain::attribute(&before, &chain.read())),
        }
    }
}
