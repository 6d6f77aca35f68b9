//! Test helpers shared by the cgroup modules' unit tests: fake cgroup trees in a temp dir (v1
//! and v2, of current and older kernels), a fake kernel that fills a new cgroup directory with
//! control files, sample `memory.stat` texts, and helpers for tests on this machine's real
//! cgroup (skipped with a `SKIPPED` line where there is none we can write).
//!
//! It holds no tests of its own; each module tests its own code.

use std::cell::Cell;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{JobCgroup, Parent};

thread_local! {
    /// What the fake kernel puts in a new cgroup directory; set by the fake-tree tests of
    /// this thread (a plain mkdir makes no control files).
    pub(super) static FAKE_KERNEL: Cell<Option<fn(&Path)>> = const { Cell::new(None) };
}

/// Called by `create_child` right after its mkdir, in test builds only.
pub(super) fn fake_kernel_files(dir: &Path) {
    if let Some(make) = FAKE_KERNEL.with(Cell::get) {
        make(dir);
    }
}

pub(super) fn put(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
}

pub(super) fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

pub(super) const MIB: u64 = 1 << 20;

// PIDs above the kernel's PID_MAX_LIMIT (4194304): a fake tree never names a real process.
pub(super) const FAKE_PIDS: &str = "4194305\n4194306\n";

/// Real v1 `memory.stat` (kernel 6.x, abridged), of a cgroup whose child holds 64 KiB of
/// inactive file cache.
pub(super) const V1_MEMORY_STAT: &str = "cache 643072\nrss 1638400\nrss_huge 0\nshmem 0\n\
mapped_file 0\ndirty 28672\nwriteback 0\nswap 0\npgpgin 13300\npgpgout 12743\n\
inactive_anon 1499136\nactive_anon 12288\ninactive_file 16384\nactive_file 626688\n\
unevictable 0\nhierarchical_memory_limit 9223372036854771712\n\
hierarchical_memsw_limit 9223372036854771712\ntotal_cache 708608\ntotal_rss 1638400\n\
total_inactive_anon 1499136\ntotal_active_anon 12288\ntotal_inactive_file 81920\n\
total_active_file 626688\ntotal_unevictable 0\n";

/// Real v2 `memory.stat` (kernel 6.x, abridged).
pub(super) const V2_MEMORY_STAT: &str = "anon 1466368\nfile 643072\nkernel 1142784\n\
kernel_stack 65536\npagetables 53248\nsock 0\nshmem 0\nfile_mapped 0\nfile_dirty 28672\n\
file_writeback 0\nswapcached 0\nanon_thp 0\ninactive_anon 1499136\nactive_anon 12288\n\
inactive_file 16384\nactive_file 626688\nunevictable 0\nslab_reclaimable 180000\n\
workingset_refault_file 151\npgfault 31093\n";

// ---- cgroup v2, fake tree ----

/// A pure v2 mount at `<tmp>` with our process in `/user.slice/app.scope`.
pub(super) fn fake_v2() -> (tempfile::TempDir, PathBuf, &'static str) {
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

pub(super) fn v2_kernel_files(dir: &Path) {
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
pub(super) fn v2_old_kernel_files(dir: &Path) {
    put(&dir.join("cgroup.procs"), "");
    put(&dir.join("memory.max"), "max\n");
    put(&dir.join("memory.current"), "0\n");
    put(
        &dir.join("memory.events"),
        "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
    );
}

// ---- cgroup v1, fake tree ----

/// A hybrid system: v1 memory at `<tmp>/memory`, an unrelated unified mount.
pub(super) fn fake_v1(controllers: &str) -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("unified")).unwrap();
    put(&tmp.path().join("unified/cgroup.controllers"), "");
    let ours = tmp.path().join(controllers).join("process_api/af2ae7");
    fs::create_dir_all(&ours).unwrap();
    put(&ours.join("cgroup.procs"), "4194305\n");
    let proc_text = format!("9:name=systemd:/\n4:{controllers}:/process_api/af2ae7\n0::/\n");
    (tmp, ours, proc_text)
}

pub(super) fn v1_kernel_files(dir: &Path) {
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

pub(super) fn v1_kernel_files_without_swap_accounting(dir: &Path) {
    v1_kernel_files(dir);
    fs::remove_file(dir.join("memory.memsw.limit_in_bytes")).unwrap();
}

// ---- the real cgroup of this machine ----

/// Our real memory cgroup, or `None` (with the reason printed) where this machine has none
/// we can write.
pub(super) fn real_parent(test: &str) -> Option<Parent> {
    match Parent::detect_current() {
        Ok(parent) => Some(parent),
        Err(err) => {
            eprintln!("SKIPPED {test}: {err}");
            None
        }
    }
}

pub(super) fn unique(tag: &str) -> String {
    format!("oomguard-test-{}-{tag}", std::process::id())
}

/// `program args` started inside `job` via `pre_exec` + `join_from_child`.
pub(super) fn spawn_inside(
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
