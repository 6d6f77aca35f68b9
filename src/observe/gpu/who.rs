//! Who a process on the card is: its user and command, from this PID namespace's /proc, for the
//! lines and records that name a neighbour ("PID 4242 (alice: python3 train.py)"). A PID that
//! /proc does not show (another PID namespace, `hidepid`) has no [`Who`]: that absence is itself
//! evidence the caller weighs (a container's own namespace).
//!
//! Looked up once per PID while the driver keeps listing it ([`Names`]), so a neighbour that
//! stays on the card for hours costs two small reads, not two per tick. It reads; it does not
//! judge or decide anything.
//!
//! Root reads every process's /proc entry, but its lines and records are the job's: where root
//! runs the job for another user and /proc is mounted with `hidepid` (proc(5): that user may not
//! see others' processes), a neighbour that user could not see is named only as hidden, never
//! by its user and command ([`Viewer`]).

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
    /// Whom the names are for, where /proc would hide others' processes from them; found at the
    /// first lookup (oomguard knows whom it acts for by then).
    viewer: std::cell::OnceCell<Option<Viewer>>,
}

/// A user /proc's `hidepid` hides other users' processes from: root reading for them names
/// only the processes they could see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub uid: u32,
    pub name: String,
}

impl Viewer {
    /// The job's user where root acts for one and this machine's /proc hides others'
    /// processes from them (`hidepid` 1, 2 or 4, and the user outside its `gid=` group).
    fn of_the_job() -> Option<Viewer> {
        let who = crate::guard::principal::acting_for()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let hides = proc_hides(&mountinfo)?;
        if let Some(gid) = hides.exempt_gid {
            if who.groups.iter().any(|g| g.as_raw() == gid) || who.gid.as_raw() == gid {
                return None;
            }
        }
        Some(Viewer {
            uid: who.uid.as_raw(),
            name: who.name.clone(),
        })
    }
}

/// How /proc hides processes: on, and the group exempt from it (`gid=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hides {
    exempt_gid: Option<u32>,
}

/// Whether the proc filesystem mounted at /proc hides other users' processes, from
/// `/proc/self/mountinfo` (proc(5)); a sample line: `22 27 0:21 / /proc
/// rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw,hidepid=invisible,gid=27`.
/// `hidepid=0`/`off` hides nothing; 1 (`noaccess`), 2 (`invisible`) and 4 (`ptraceable`) hide
/// another user's command line and status. The last mount at /proc wins, as the kernel's does.
fn proc_hides(mountinfo: &str) -> Option<Hides> {
    let mut found = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.get(4) != Some(&"/proc") || fields.get(dash + 1) != Some(&"proc") {
            continue;
        }
        let options = fields.get(dash + 3).copied().unwrap_or_default();
        let mut hides = false;
        let mut exempt_gid = None;
        for option in options.split(',') {
            match option.split_once('=') {
                Some(("hidepid", value)) => hides = !matches!(value, "0" | "off"),
                Some(("gid", value)) => exempt_gid = value.parse().ok(),
                _ => {}
            }
        }
        found = Some(hides.then_some(Hides { exempt_gid }));
    }
    found.flatten()
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
            viewer: std::cell::OnceCell::new(),
        }
    }

    /// Names for `viewer` alone (see [`Viewer`]), whatever whom oomguard acts for: for tests.
    #[cfg(test)]
    pub fn for_viewer(mut self, viewer: Option<Viewer>) -> Names {
        self.viewer = std::cell::OnceCell::from(viewer);
        self
    }

    /// Who `pid` is, `None` where /proc does not show it; hidden (user `?`) where it is not the
    /// viewer's to see.
    pub fn who(&mut self, pid: u32) -> Option<Who> {
        let root = &self.proc_root;
        let viewer = self.viewer.get_or_init(Viewer::of_the_job).as_ref();
        self.known
            .entry(pid)
            .or_insert_with(|| read_who(root, pid, viewer))
            .clone()
    }

    /// Forgets every PID not in `listed`: a PID the driver no longer lists may be reused.
    pub fn keep_only(&mut self, listed: impl Fn(u32) -> bool) {
        self.known.retain(|pid, _| listed(*pid));
    }
}

fn read_who(proc_root: &std::path::Path, pid: u32, viewer: Option<&Viewer>) -> Option<Who> {
    let dir = proc_root.join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())?;
    // There, but not the viewer's to see: it stays a neighbour (not a process in another PID
    // namespace), with nothing of whose it is.
    if let Some(viewer) = viewer.filter(|v| v.uid != uid) {
        return Some(Who {
            user: "?".to_string(),
            command: format!("hidden from {} by /proc's hidepid", viewer.name),
        });
    }
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

    /// Root reading /proc for a user it may hide others' processes from names only that user's.
    #[test]
    fn hidepid_hides_others_from_the_jobs_user_in_roots_names_too() {
        let dir = tempfile::tempdir().unwrap();
        fake_proc(dir.path(), 10, 1001, b"python3\0mine.py\0");
        fake_proc(dir.path(), 11, 1002, b"python3\0secret-project.py\0");
        let viewer = Viewer {
            uid: 1001,
            name: "alice".into(),
        };
        let mut names = Names::new(dir.path()).for_viewer(Some(viewer));
        assert_eq!(names.who(10).unwrap().command, "python3 mine.py");
        let hidden = names.who(11).unwrap();
        assert_eq!(
            hidden,
            Who {
                user: "?".into(),
                command: "hidden from alice by /proc's hidepid".into()
            }
        );
        assert_eq!(names.who(12), None, "not in this /proc");
        let mut all = Names::new(dir.path()).for_viewer(None);
        assert_eq!(all.who(11).unwrap().command, "python3 secret-project.py");
    }

    #[test]
    fn hidepid_is_read_from_the_mount_at_proc() {
        let line = |mount: &str, options: &str| {
            format!("22 27 0:21 / {mount} rw,nosuid shared:13 - proc proc {options}\n")
        };
        // (mountinfo, what it says)
        let table = [
            (line("/proc", "rw"), None),
            (line("/proc", "rw,hidepid=0"), None),
            (line("/proc", "rw,hidepid=off"), None),
            (
                line("/proc", "rw,hidepid=2"),
                Some(Hides { exempt_gid: None }),
            ),
            (
                line("/proc", "rw,hidepid=invisible,gid=27"),
                Some(Hides {
                    exempt_gid: Some(27),
                }),
            ),
            (
                line("/proc", "rw,hidepid=ptraceable"),
                Some(Hides { exempt_gid: None }),
            ),
            (line("/mnt/proc", "rw,hidepid=2"), None),
            // A later mount at /proc covers the earlier one.
            (line("/proc", "rw,hidepid=2") + &line("/proc", "rw"), None),
        ];
        for (mountinfo, want) in table {
            assert_eq!(proc_hides(&mountinfo), want, "{mountinfo}");
        }
    }
}
