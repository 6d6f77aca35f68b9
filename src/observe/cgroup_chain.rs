//! The OOM-kill counters of the memory cgroups a process lives in, from its own cgroup up to
//! the root of the hierarchy it can see, and the memory limits set along the way. Any user can
//! read them (v2 `memory.events`, v1 `memory.oom_control`), unlike the kernel log, which
//! `kernel.dmesg_restrict=1` closes to everyone but root. On a shared server where oomguard has
//! no cgroup of its own to make (not root, nothing delegated), the limit that kills a job is
//! usually one set above it, by root: a systemd unit's or slice's `MemoryMax`, a Slurm job's
//! cgroup, a container. Read before and after an attempt, a counter that moved says that limit
//! (or the machine's OOM killer) killed something in the job's cgroup.
//!
//! v2 counts `oom_kill` hierarchically (a kill anywhere below counts in every ancestor); v1
//! counts it only in the victim's own cgroup, and limits there apply to the cgroups below
//! (`use_hierarchy`), so the limit in force is the smallest one from the victim's cgroup up.
//!
//! This module only reads and compares. The attempt's own cgroup (when oomguard could make one) is
//! [`crate::observe::cgroup`]'s; deciding that a moved counter explains a death is
//! [`crate::judge::classify`]'s: the counters count kills of any process in the cgroup, so they
//! name the job only together with a death by SIGKILL. Readers take their paths (a mount point,
//! mountinfo text) so tests use fake trees.

use std::fs;
use std::path::{Path, PathBuf};

use crate::observe::cgroup::{self, Version};

/// One memory hierarchy as a process sees it: where it is mounted and the process's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub version: Version,
    /// The mount point of the hierarchy, e.g. `/sys/fs/cgroup/memory` (v1) or `/sys/fs/cgroup`.
    pub mount: PathBuf,
    /// The cgroup mounted there, as /proc/self/cgroup names cgroups (`/` normally; a
    /// container's own cgroup where only that was bind-mounted, e.g. `/docker/4f2a`).
    pub mount_root: String,
    /// The process's cgroup as /proc/self/cgroup names it, e.g. `/process_api/x/limited`.
    pub path: String,
}

/// One cgroup of a chain as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// The cgroup as /proc/self/cgroup names cgroups, e.g. `/user.slice/user-1000.slice`.
    pub path: String,
    /// Its `oom_kill` counter; `None` where there is none (the v2 root) or it is unreadable.
    pub oom_kills: Option<u64>,
    /// Its hard memory limit; `None` for none or unreadable.
    pub limit_bytes: Option<u64>,
}

/// A cgroup the job lived in whose OOM-kill counter moved during an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainKill {
    /// The deepest cgroup whose counter moved: the victim's own on v1, the job's on v2.
    pub path: String,
    /// How much it moved.
    pub oom_kills: u64,
    /// The smallest memory limit from that cgroup up: (the cgroup that sets it, bytes).
    pub limit: Option<(String, u64)>,
}

impl std::fmt::Display for ChainKill {
    /// `cgroup /process_api/x/limited oom_kill +1 (memory limit 64.0 MiB)`, or, when the limit
    /// is set further up, `cgroup /user.slice/user-1000.slice/session-2.scope oom_kill +1
    /// (MemoryMax of slice user-1000.slice 4.0 GiB, at /user.slice/user-1000.slice)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cgroup {} oom_kill +{}", self.path, self.oom_kills)?;
        match &self.limit {
            Some((holder, bytes)) => {
                let size = crate::observe::units::human_bytes(*bytes);
                write!(f, " ({} {size}", limit_kind(holder))?;
                if *holder != self.path {
                    write!(f, ", at {holder}")?;
                }
                f.write_str(")")
            }
            None => f.write_str(" (no memory limit on it or above: the machine's OOM killer)"),
        }
    }
}

impl ChainKill {
    /// The limit that killed, named for people (`Slurm job 14's memory limit`), as the fit's
    /// lines name a limit: text that lives for the run (one per distinct name, kept once).
    pub fn limit_name(&self) -> Option<&'static str> {
        static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
        let (holder, _) = self.limit.as_ref()?;
        let kind = limit_kind(holder);
        let mut names = NAMES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(&known) = names.iter().find(|&&n| n == kind) {
            return Some(known);
        }
        // A handful per run at most (each cgroup that held a limit), so kept rather than freed.
        let kept: &'static str = Box::leak(kind.into_boxed_str());
        names.push(kept);
        Some(kept)
    }
}

/// What kind of limit a cgroup's path says it is, for people: systemd names its units and
/// slices (`MemoryMax=`), Slurm its jobs (`job_4242`), container runtimes their containers.
fn limit_kind(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or("");
    if name.ends_with(".service") || name.ends_with(".scope") {
        return format!("MemoryMax of {name}");
    }
    if name.ends_with(".slice") {
        return format!("MemoryMax of slice {name}");
    }
    if let Some(job) = path.split('/').rev().find_map(|c| {
        c.strip_prefix("job_")
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }) {
        return format!("Slurm job {job}'s memory limit");
    }
    let container = ["docker", "kubepods", "libpod", "containerd", "lxc", "crio"];
    if path == "/" || container.iter().any(|c| path.contains(c)) {
        return "the container's memory limit".to_string();
    }
    "memory limit".to_string()
}

/// One line of /proc/self/mountinfo, as far as it matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The directory of the mounted filesystem that is mounted (for cgroups: which cgroup).
    pub root: String,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub super_options: String,
}

/// Parses /proc/self/mountinfo (see proc(5)), e.g.
/// ```text
/// 35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
/// 41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
/// ```
/// Paths escape space, tab, newline and backslash as octal (`\040`).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            Some(Mount {
                root: unescape(left.get(3)?),
                mount_point: PathBuf::from(unescape(left.get(4)?)),
                fs_type: right.next()?.to_string(),
                super_options: right.nth(1).unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Chain {
    /// The memory hierarchy of the process whose /proc/PID/cgroup text is `proc_cgroup`, found
    /// among `mounts`. As in [`cgroup::Parent::detect`], v2 where its mount's
    /// `cgroup.controllers` lists `memory` (a pure unified hierarchy), else the v1 mount whose
    /// options name `memory`.
    pub fn from_mounts(mounts: &[Mount], proc_cgroup: &str) -> Option<Chain> {
        let parsed = cgroup::parse_proc_cgroup(proc_cgroup);
        let v2 = mounts.iter().find(|m| m.fs_type == "cgroup2");
        if let (Some(m), Some(path)) = (v2, parsed.unified) {
            let memory = fs::read_to_string(m.mount_point.join("cgroup.controllers"))
                .is_ok_and(|text| cgroup::lists_controller(&text, "memory"));
            if memory {
                return Some(Chain::new(Version::V2, m, path));
            }
        }
        let (_, path) = parsed.v1_memory?;
        let m = mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == "memory"))?;
        Some(Chain::new(Version::V1, m, path))
    }

    fn new(version: Version, mount: &Mount, path: &str) -> Chain {
        Chain {
            version,
            mount: mount.mount_point.clone(),
            mount_root: mount.root.clone(),
            path: path.to_string(),
        }
    }

    /// oomguard's own chain, which is the job's when the job runs in oomguard's cgroup. Found
    /// through /proc/self/mountinfo; with [`cgroup::CGROUP_ROOT_ENV`] set (tests), under that
    /// root as [`cgroup::Parent::detect_current`] looks. `None` where there is no memory
    /// hierarchy to read.
    pub fn detect_current() -> Option<Chain> {
        let proc_cgroup = fs::read_to_string("/proc/self/cgroup").ok()?;
        let mounts = match std::env::var_os(cgroup::CGROUP_ROOT_ENV).filter(|v| !v.is_empty()) {
            Some(root) => {
                let root = PathBuf::from(root);
                let mount = |point: PathBuf, fs_type: &str, options: &str| Mount {
                    root: "/".to_string(),
                    mount_point: point,
                    fs_type: fs_type.to_string(),
                    super_options: options.to_string(),
                };
                vec![
                    mount(root.clone(), "cgroup2", "rw"),
                    mount(root.join("memory"), "cgroup", "rw,memory"),
                ]
            }
            None => parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").ok()?),
        };
        Chain::from_mounts(&mounts, &proc_cgroup)
    }

    /// The cgroups from the process's own up to the top of the mount, each with its path (as
    /// /proc/self/cgroup names cgroups) and directory.
    fn levels(&self) -> Vec<(String, PathBuf)> {
        let root = self.mount_root.trim_end_matches('/');
        // Without a cgroup namespace the path names the mounted cgroup too (`/docker/4f2a/x`
        // under a mount of `/docker/4f2a`); with one, both are relative to the namespace.
        let relative = self
            .path
            .strip_prefix(root)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .unwrap_or(&self.path);
        let mut parts: Vec<&str> = relative.split('/').filter(|p| !p.is_empty()).collect();
        let top = if relative.len() == self.path.len() {
            String::new()
        } else {
            root.to_string()
        };
        let mut out = Vec::new();
        loop {
            let mut dir = self.mount.clone();
            dir.extend(&parts);
            let path = format!("{top}/{}", parts.join("/"));
            let path = if path.len() > 1 {
                path.trim_end_matches('/').to_string()
            } else {
                path
            };
            out.push((path, dir));
            if parts.pop().is_none() {
                break;
            }
        }
        out
    }

    /// Reads every level's OOM-kill counter and limit, the process's own cgroup first.
    pub fn read(&self) -> Vec<Level> {
        let files = self.version.files();
        let (events, parse_events, limit) = (files.oom_kills, files.parse_oom_kills, files.limit);
        let read = |dir: &Path, file: &str| fs::read_to_string(dir.join(file)).ok();
        self.levels()
            .into_iter()
            .map(|(path, dir)| Level {
                oom_kills: read(&dir, events).as_deref().and_then(parse_events),
                limit_bytes: read(&dir, limit).as_deref().and_then(cgroup::parse_limit),
                path,
            })
            .collect()
    }
}

/// The job's own cgroup (the first level of two [`Chain::read`]s, own cgroup first) when its
/// OOM-kill counter moved between `before` and `after`, with the smallest limit from there up
/// (the limit in force). `None` when it did not move: a kill counted only above it was of a
/// process elsewhere (on v1 a kill counts only in the victim's own cgroup; on v2 in the victim's
/// and every one above), so it says nothing about the job.
pub fn attribute(before: &[Level], after: &[Level]) -> Option<ChainKill> {
    let (own_before, own_after) = (before.first()?, after.first()?);
    if own_before.path != own_after.path {
        return None;
    }
    let oom_kills = own_after
        .oom_kills?
        .checked_sub(own_before.oom_kills?)
        .filter(|&d| d > 0)?;
    let limit = after
        .iter()
        .filter_map(|level| Some((level.path.clone(), level.limit_bytes?)))
        .min_by_key(|(_, bytes)| *bytes);
    Some(ChainKill {
        path: own_after.path.clone(),
        oom_kills,
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn put(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn parses_mountinfo() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    41 31 0:38 /docker/4f2a /sys/fs/cgroup/unified rw,relatime shared:9 master:2 - cgroup2 cgroup2 rw,nsdelegate\n\
                    50 31 0:40 / /mnt/with\\040space rw - ext4 /dev/sda1 rw\n\
                    garbage\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 4);
        assert_eq!(
            mounts[1],
            Mount {
                root: "/".into(),
                mount_point: "/sys/fs/cgroup/memory".into(),
                fs_type: "cgroup".into(),
                super_options: "rw,memory".into(),
            }
        );
        assert_eq!(mounts[2].root, "/docker/4f2a");
        assert_eq!(mounts[2].fs_type, "cgroup2");
        assert_eq!(mounts[2].super_options, "rw,nsdelegate");
        assert_eq!(mounts[3].mount_point, PathBuf::from("/mnt/with space"));
    }

    fn mount(root: &str, point: &Path, fs_type: &str, options: &str) -> Mount {
        Mount {
            root: root.into(),
            mount_point: point.to_path_buf(),
            fs_type: fs_type.into(),
            super_options: options.into(),
        }
    }

    #[test]
    fn finds_the_memory_hierarchy() {
        let tmp = tempfile::tempdir().unwrap();
        let v2 = tmp.path().join("unified");
        let v1 = tmp.path().join("memory");
        fs::create_dir_all(&v2).unwrap();
        fs::create_dir_all(&v1).unwrap();
        let hybrid = [
            mount("/", &v1, "cgroup", "rw,memory"),
            mount("/", &v2, "cgroup2", "rw"),
            mount("/", tmp.path(), "cgroup", "rw,cpu,cpuacct"),
        ];
        let text = "4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/\n";
        // The v2 mount has no memory controller: v1 memory it is.
        let chain = Chain::from_mounts(&hybrid, text).unwrap();
        assert_eq!(chain.version, Version::V1);
        assert_eq!(chain.mount, v1);
        assert_eq!(chain.path, "/process_api/x");
        // Where the v2 mount has it, v2 wins.
        put(&v2.join("cgroup.controllers"), "cpu io memory pids\n");
        let chain = Chain::from_mounts(&hybrid, "0::/user.slice/a.service\n").unwrap();
        assert_eq!(chain.version, Version::V2);
        assert_eq!(chain.mount, v2);
        // No memory anywhere.
        assert_eq!(Chain::from_mounts(&hybrid[2..], text), None);
        assert_eq!(Chain::from_mounts(&hybrid, "1:cpu:/\n"), None);
    }

    #[test]
    fn levels_run_from_the_own_cgroup_to_the_mount() {
        let chain = |root: &str, path: &str| Chain {
            version: Version::V2,
            mount: "/m".into(),
            mount_root: root.into(),
            path: path.into(),
        };
        // (mount root, own cgroup, the levels expected: (path, directory)).
        type Row<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
        let table: &[Row] = &[
            (
                "/",
                "/a/b",
                &[("/a/b", "/m/a/b"), ("/a", "/m/a"), ("/", "/m")],
            ),
            ("/", "/", &[("/", "/m")]),
            // Only a container's cgroup is mounted, no cgroup namespace.
            (
                "/docker/4f2a",
                "/docker/4f2a/x",
                &[("/docker/4f2a/x", "/m/x"), ("/docker/4f2a", "/m")],
            ),
            // A cgroup namespace: paths are relative to it already.
            ("/", "/x", &[("/x", "/m/x"), ("/", "/m")]),
            // A namespaced path that only looks like the mount root's prefix.
            (
                "/docker",
                "/dockerx/y",
                &[
                    ("/dockerx/y", "/m/dockerx/y"),
                    ("/dockerx", "/m/dockerx"),
                    ("/", "/m"),
                ],
            ),
        ];
        for (root, path, want) in table {
            let got = chain(root, path).levels();
            let want: Vec<(String, PathBuf)> = want
                .iter()
                .map(|(p, d)| (p.to_string(), PathBuf::from(d)))
                .collect();
            assert_eq!(got, want, "{root} {path}");
        }
    }

    #[test]
    fn reads_a_fake_v1_chain_and_attributes_a_kill() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path();
        let oom = |n: u64| format!("oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n");
        put(&m.join("memory.oom_control"), &oom(7));
        put(&m.join("memory.limit_in_bytes"), "9223372036854771712\n");
        put(&m.join("job_42/memory.oom_control"), &oom(0));
        put(
            &m.join("job_42/memory.limit_in_bytes"),
            &format!("{}\n", 64 * MIB),
        );
        put(&m.join("job_42/step_0/memory.oom_control"), &oom(0));
        put(
            &m.join("job_42/step_0/memory.limit_in_bytes"),
            &format!("{}\n", 128 * MIB),
        );
        let chain = Chain {
            version: Version::V1,
            mount: m.to_path_buf(),
            mount_root: "/".into(),
            path: "/job_42/step_0".into(),
        };
        let before = chain.read();
        assert_eq!(
            before,
            [
                Level {
                    path: "/job_42/step_0".into(),
                    oom_kills: Some(0),
                    limit_bytes: Some(128 * MIB)
                },
                Level {
                    path: "/job_42".into(),
                    oom_kills: Some(0),
                    limit_bytes: Some(64 * MIB)
                },
                Level {
                    path: "/".into(),
                    oom_kills: Some(7),
                    limit_bytes: None
                },
            ]
        );
        assert_eq!(attribute(&before, &chain.read()), None);
        // v1 counts the kill in the victim's own cgroup; the job's limit is the one above.
        put(&m.join("job_42/step_0/memory.oom_control"), &oom(1));
        let kill = attribute(&before, &chain.read()).unwrap();
        assert_eq!(
            kill,
            ChainKill {
                path: "/job_42/step_0".into(),
                oom_kills: 1,
                limit: Some(("/job_42".into(), 64 * MIB)),
            }
        );
        assert_eq!(
            kill.to_string(),
            "cgroup /job_42/step_0 oom_kill +1 (Slurm job 42's memory limit 64.0 MiB, at /job_42)"
        );
    }

    #[test]
    fn reads_a_fake_v2_chain_where_counts_are_hierarchical() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path();
        let events =
            |n: u64| format!("low 0\nhigh 0\nmax 3\noom 1\noom_kill {n}\noom_group_kill 0\n");
        let slice = m.join("user.slice/user-1000.slice");
        let unit = slice.join("train.service");
        put(&slice.join("memory.events"), &events(2));
        put(&slice.join("memory.max"), "max\n");
        put(&unit.join("memory.events"), &events(0));
        put(&unit.join("memory.max"), &format!("{}\n", 400 * MIB));
        put(&m.join("user.slice/memory.events"), &events(5));
        put(&m.join("user.slice/memory.max"), "max\n");
        let chain = Chain {
            version: Version::V2,
            mount: m.to_path_buf(),
            mount_root: "/".into(),
            path: "/user.slice/user-1000.slice/train.service".into(),
        };
        let before = chain.read();
        // The root has no memory.events: nothing to read, nothing to compare.
        assert_eq!(before.last().unwrap().oom_kills, None);
        for (dir, n) in [(&unit, 1), (&slice, 3)] {
            put(&dir.join("memory.events"), &events(n));
        }
        put(&m.join("user.slice/memory.events"), &events(6));
        let kill = attribute(&before, &chain.read()).unwrap();
        assert_eq!(
            kill.to_string(),
            "cgroup /user.slice/user-1000.slice/train.service oom_kill +1 (MemoryMax of train.service 400.0 MiB)"
        );
    }

    #[test]
    fn describes_each_kind_of_limit() {
        let kill = |path: &str, holder: Option<&str>| ChainKill {
            path: path.into(),
            oom_kills: 2,
            limit: holder.map(|h| (h.to_string(), 64 * MIB)),
        };
        let table = [
            (kill("/process_api/x/limited", Some("/process_api/x/limited")), "cgroup /process_api/x/limited oom_kill +2 (memory limit 64.0 MiB)"),
            (kill("/a.slice/b.scope", Some("/a.slice")), "cgroup /a.slice/b.scope oom_kill +2 (MemoryMax of slice a.slice 64.0 MiB, at /a.slice)"),
            (kill("/", Some("/")), "cgroup / oom_kill +2 (the container's memory limit 64.0 MiB)"),
            (kill("/kubepods/burstable/pod1/c2", Some("/kubepods/burstable/pod1")), "cgroup /kubepods/burstable/pod1/c2 oom_kill +2 (the container's memory limit 64.0 MiB, at /kubepods/burstable/pod1)"),
            (kill("/x", None), "cgroup /x oom_kill +2 (no memory limit on it or above: the machine's OOM killer)"),
        ];
        for (kill, want) in table {
            assert_eq!(kill.to_string(), want);
        }
    }

    #[test]
    fn attribution_needs_a_counter_read_both_times() {
        let level = |path: &str, n: Option<u64>| Level {
            path: path.into(),
            oom_kills: n,
            limit_bytes: None,
        };
        // (before, after, the cgroup and delta expected).
        type Row<'a> = (&'a [Level], &'a [Level], Option<(&'a str, u64)>);
        let table: &[Row] = &[
            (&[level("/a", Some(1))], &[level("/a", Some(1))], None),
            (&[level("/a", None)], &[level("/a", Some(3))], None),
            (&[level("/a", Some(3))], &[level("/a", None)], None),
            // A counter that went down (a cgroup removed and made again) is no kill.
            (&[level("/a", Some(3))], &[level("/a", Some(1))], None),
            (&[level("/b", Some(0))], &[level("/a", Some(1))], None),
            // Counted above the job's cgroup only: a process elsewhere (a sibling) was killed.
            (
                &[level("/a/b", Some(0)), level("/a", Some(4))],
                &[level("/a/b", Some(0)), level("/a", Some(6))],
                None,
            ),
            (
                &[level("/a/b", Some(0)), level("/a", Some(4))],
                &[level("/a/b", Some(1)), level("/a", Some(5))],
                Some(("/a/b", 1)),
            ),
        ];
        for (before, after, want) in table {
            let got = attribute(before, after).map(|k| (k.path, k.oom_kills));
            assert_eq!(
                got,
                want.map(|(p, n)| (p.to_string(), n)),
                "{before:?} -> {after:?}"
            );
        }
    }
}
