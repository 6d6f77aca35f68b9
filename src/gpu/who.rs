//! Who a process on the card is: its user and command, from this PID namespace's /proc, for the
//! lines and records that name a neighbour ("PID 4242 (alice: python3 train.py)"). A PID that
//! /proc does not show (another PID namespace, `hidepid`) has no [`Who`]: that absence is itself
//! evidence the caller weighs (a container's own namespace).
//!
//! Looked up once per PID while the driver keeps listing it ([`Names`]), so a neighbour that
//! stays on the card for hours costs two small reads, not two per tick. It reads; it does not
//! judge or decide anything.

use std::collections::HashMap;
use std::path::PathBuf;

/// The longest command kept: enough to recognise a job, short enough for one line.
const COMMAND_CHARS: usize = 80;

/// A process's owner and command line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Who {
    /// The user name of its real UID, else the number.
    pub user: String,
    /// Its command line, arguments joined by spaces, cut at [`COMMAND_CHARS`] characters
    /// (its `comm` where the command line is empty: a kernel thread or a zombie).
    pub command: String,
}

/// PID → [`Who`], read from `<proc>/PID` once and kept while the PID stays listed.
#[derive(Debug)]
pub struct Names {
    proc_root: PathBuf,
    known: HashMap<u32, Option<Who>>,
}

impl Default for Names {
    fn default() -> Self {
        Names::new("/proc")
    }
}

impl Names {
    pub fn new(proc_root: impl Into<PathBuf>) -> Names {
        Names {
            proc_root: proc_root.into(),
            known: HashMap::new(),
        }
    }

    /// Who `pid` is, `None` where /proc does not show it.
    pub fn who(&mut self, pid: u32) -> Option<Who> {
        let root = &self.proc_root;
        self.known
            .entry(pid)
            .or_insert_with(|| read_who(root, pid))
            .clone()
    }

    /// Forgets every PID not in `listed`: a PID the driver no longer lists may be reused.
    pub fn keep_only(&mut self, listed: impl Fn(u32) -> bool) {
        self.known.retain(|pid, _| listed(*pid));
    }
}

fn read_who(proc_root: &std::path::Path, pid: u32) -> Option<Who> {
    let dir = proc_root.join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())?;
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
    // The program and its script by their names, not their paths: within the line's length, an
    // interpreter's path would push out what tells one job from another.
    let mut command = cmdline
        .split(|&b| b == 0)
        .filter(|arg| !arg.is_empty())
        .map(String::from_utf8_lossy)
        .enumerate()
        .map(|(i, arg)| match arg.rsplit_once('/') {
            Some((_, name)) if i < 2 && !arg.starts_with('-') && !name.is_empty() => {
                name.to_string()
            }
            _ => arg.into_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ");
    if command.is_empty() {
        command = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .map(|n| format!("[{}]", n.trim()))
            .unwrap_or_default();
    }
    // Another user's argument text reaches our terminal and logs: no control characters.
    let mut command: String = command
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if command.chars().count() > COMMAND_CHARS {
        command = command.chars().take(COMMAND_CHARS - 1).collect::<String>() + "…";
    }
    Some(Who { user, command })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(dir: &std::path::Path, pid: u32, uid: u32, cmdline: &[u8]) {
        let p = dir.join(pid.to_string());
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("status"),
            format!("Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
        )
        .unwrap();
        std::fs::write(p.join("cmdline"), cmdline).unwrap();
    }

    #[test]
    fn names_user_and_command_once_per_listed_pid() {
        let dir = tempfile::tempdir().unwrap();
        fake_proc(
            dir.path(),
            10,
            0,
            b"/opt/conda/envs/big/bin/python3\x00/home/alice/proj/train.py\x00--batch_size\x00064\x00--out\x00/x/y\x00",
        );
        fake_proc(dir.path(), 11, 4_000_000, b"");
        fake_proc(dir.path(), 12, 0, "x\u{1b}[2J".repeat(40).as_bytes());
        let mut names = Names::new(dir.path());
        assert_eq!(
            names.who(10),
            Some(Who {
                user: "root".into(),
                command: "python3 train.py --batch_size 064 --out /x/y".into()
            })
        );
        // An unknown UID is its number; an empty command line is the process's name.
        assert_eq!(
            names.who(11),
            Some(Who {
                user: "4000000".into(),
                command: "[python3]".into()
            })
        );
        let long = names.who(12).unwrap().command;
        assert!(!long.contains('\u{1b}'), "{long}");
        assert_eq!(long.chars().count(), COMMAND_CHARS);
        assert_eq!(names.who(13), None, "not in this /proc");

        // Kept while listed: a change under the same PID is not read again...
        fake_proc(dir.path(), 10, 0, b"other\0");
        assert_eq!(
            names.who(10).unwrap().command,
            "python3 train.py --batch_size 064 --out /x/y"
        );
        // ...until the driver stops listing it.
        names.keep_only(|pid| pid != 10);
        assert_eq!(names.who(10).unwrap().command, "other");
    }
}
