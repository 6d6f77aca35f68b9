//! The job's process tree: every descendant of a root PID, found afresh on each call by walking
//! `/proc/PID/task/TID/children` (see proc(5)). It costs one small read per process in the tree,
//! not per process on the machine, so a busy shared server does not slow it down. Where the
//! attempt has a cgroup, its `cgroup.procs` lists the job instead (one read) and this walk is
//! left for the end of an attempt and for signalling.
//!
//! It does not decide what to do with the PIDs (signal, sample, attribute): callers do.

use std::path::PathBuf;

/// Reads process trees under a /proc root.
#[derive(Debug, Clone)]
pub struct ProcTree {
    proc_root: PathBuf,
}

impl Default for ProcTree {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl ProcTree {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: proc_root.into(),
        }
    }

    /// The direct children of `pid`, over all its threads (a child is listed under the thread
    /// that forked it). A process that vanished mid-read simply has no children.
    pub fn children(&self, pid: u32) -> Vec<u32> {
        let task_dir = self.proc_root.join(pid.to_string()).join("task");
        let Ok(tasks) = std::fs::read_dir(&task_dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                out.extend(parse_children(&text));
            }
        }
        out
    }

    /// Every descendant of `root` (not `root` itself), parents before their children.
    pub fn descendants(&self, root: u32) -> Vec<u32> {
        let mut out = self.children(root);
        let mut i = 0;
        while i < out.len() {
            let grandchildren = self.children(out[i]);
            out.extend(grandchildren);
            i += 1;
        }
        out
    }
}

/// Parses a `children` file: PIDs separated by spaces, e.g. `"4242 4243 "`.
pub fn parse_children(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.split_ascii_whitespace().filter_map(|s| s.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_children_files() {
        assert_eq!(
            parse_children("4242 4243 ").collect::<Vec<_>>(),
            [4242, 4243]
        );
        assert_eq!(parse_children("").count(), 0);
        assert_eq!(parse_children("\n").count(), 0);
    }

    #[test]
    fn walks_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let write = |pid: u32, tid: u32, children: &str| {
            let task = dir.path().join(format!("{pid}/task/{tid}"));
            std::fs::create_dir_all(&task).unwrap();
            std::fs::write(task.join("children"), children).unwrap();
        };
        write(10, 10, "11 ");
        write(10, 12, "13 ");
        write(11, 11, "14 15 ");
        write(13, 13, "");
        // 14 and 15 vanished: no /proc entries, so no children and no error.
        let tree = ProcTree::new(dir.path());
        let mut found = tree.descendants(10);
        found.sort();
        assert_eq!(found, [11, 13, 14, 15]);
    }

    #[test]
    fn sees_a_real_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let found = ProcTree::default().descendants(std::process::id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found.contains(&child.id()), "{found:?}");
    }
}
