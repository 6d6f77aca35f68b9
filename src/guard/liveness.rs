//! A process named well enough to tell it from a later one with the same PID ([`ProcessId`]:
//! PID, start time, boot, host, PID namespace), and whether a recorded one still runs
//! ([`liveness`]), looked up in this machine's /proc. A process on another machine or in another
//! PID namespace is `Unknown`, never guessed. What is recorded where (the job's file) and what a
//! dead run means are the callers' ([`crate::remember::jobs`], [`crate::tell::status`]).

use std::fs;

use serde::{Deserialize, Serialize};

/// A process, named well enough to tell it from a later one with the same PID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// Field 22 of /proc/PID/stat (`starttime`): when it started, in clock ticks after boot.
    #[serde(default)]
    pub pid_start_ticks: Option<u64>,
    /// /proc/sys/kernel/random/boot_id: the PID and start time mean something on this boot only.
    #[serde(default)]
    pub boot_id: Option<String>,
    /// /proc/sys/kernel/hostname.
    #[serde(default)]
    pub host: Option<String>,
    /// The PID namespace (`pid:[4026531836]`, the link /proc/self/ns/pid): a PID is looked up
    /// only from the namespace it was taken in.
    #[serde(default)]
    pub pid_ns: Option<String>,
}

impl ProcessId {
    /// This process.
    pub fn current() -> ProcessId {
        let pid = std::process::id();
        ProcessId {
            pid,
            pid_start_ticks: read_stat(pid).as_deref().and_then(start_ticks),
            ..Here::read().into_process(pid)
        }
    }
}

/// What identifies this machine, boot and PID namespace, read once per look.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Here {
    pub boot_id: Option<String>,
    pub host: Option<String>,
    pub pid_ns: Option<String>,
}

/// This machine's host name (`/proc/sys/kernel/hostname`); `None` where unreadable or empty.
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

impl Here {
    pub fn read() -> Here {
        let text = |path: &str| {
            fs::read_to_string(path)
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
        };
        Here {
            boot_id: text("/proc/sys/kernel/random/boot_id"),
            host: host_name(),
            pid_ns: fs::read_link("/proc/self/ns/pid")
                .ok()
                .map(|p| p.to_string_lossy().into_owned()),
        }
    }

    fn into_process(self, pid: u32) -> ProcessId {
        ProcessId {
            pid,
            pid_start_ticks: None,
            boot_id: self.boot_id,
            host: self.host,
            pid_ns: self.pid_ns,
        }
    }
}

/// Whether a recorded process still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    Dead,
    /// On another machine, or in another PID namespace: cannot be looked up from here.
    Unknown,
}

/// Looks the recorded process up in this machine's /proc.
pub fn liveness(recorded: &ProcessId) -> Liveness {
    judge(recorded, &Here::read(), read_stat(recorded.pid).as_deref())
}

fn read_stat(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// Decides liveness from what is known here: `stat` is the text of /proc/PID/stat for the
/// recorded PID (`None` where there is no such process). Pure, for tests.
pub fn judge(recorded: &ProcessId, here: &Here, stat: Option<&str>) -> Liveness {
    let differs =
        |a: &Option<String>, b: &Option<String>| matches!((a, b), (Some(a), Some(b)) if a != b);
    if differs(&recorded.boot_id, &here.boot_id) {
        // The same machine booted since (the process died with it), or another machine.
        return if differs(&recorded.host, &here.host) {
            Liveness::Unknown
        } else {
            Liveness::Dead
        };
    }
    if differs(&recorded.host, &here.host) || differs(&recorded.pid_ns, &here.pid_ns) {
        return Liveness::Unknown;
    }
    let Some(stat) = stat else {
        return Liveness::Dead;
    };
    if stat_state(stat) == Some("Z") {
        return Liveness::Dead;
    }
    match (recorded.pid_start_ticks, start_ticks(stat)) {
        (Some(recorded), Some(now)) if recorded != now => Liveness::Dead,
        _ => Liveness::Alive,
    }
}

/// The fields of /proc/PID/stat after the command name, which is in parentheses and may hold
/// spaces and parentheses itself: `1234 (python3 (x)) S 1 1234 ...` gives `["S", "1", ...]`.
pub(crate) fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default()
}

/// Field 3, the state (`R`, `S`, `Z`...).
fn stat_state(stat: &str) -> Option<&str> {
    stat_fields(stat).first().copied()
}

/// Field 22, `starttime` (see proc_pid_stat(5)): index 19 after the name.
fn start_ticks(stat: &str) -> Option<u64> {
    stat_fields(stat).get(19)?.parse().ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A /proc/PID/stat line with the given state and start time, its name holding `) (`.
    fn stat(state: &str, start: u64) -> String {
        let mut fields = vec![state.to_string()];
        fields.extend((4..22).map(|n| n.to_string()));
        fields.push(start.to_string());
        fields.extend(["1000".to_string(), "2000".to_string()]);
        format!("4242 (tr ) (ain) {}", fields.join(" "))
    }

    pub(crate) fn recorded(start: Option<u64>) -> ProcessId {
        ProcessId {
            pid: 4242,
            pid_start_ticks: start,
            boot_id: Some("boot-a".into()),
            host: Some("gpu1".into()),
            pid_ns: Some("pid:[1]".into()),
        }
    }

    fn here(boot: &str, host: &str, ns: &str) -> Here {
        Here {
            boot_id: Some(boot.into()),
            host: Some(host.into()),
            pid_ns: Some(ns.into()),
        }
    }

    #[test]
    fn stat_fields_survive_names_with_parentheses() {
        let text = stat("S", 987_654);
        assert_eq!(stat_state(&text), Some("S"));
        assert_eq!(start_ticks(&text), Some(987_654));
        assert_eq!(start_ticks("garbage"), None);
        // The real thing: this process.
        let own = read_stat(std::process::id()).expect("our own stat");
        assert!(start_ticks(&own).is_some(), "{own}");
    }

    #[test]
    fn a_recorded_process_is_checked_not_assumed() {
        let same = here("boot-a", "gpu1", "pid:[1]");
        let alive = stat("S", 500);
        // (recorded start, here, stat, liveness)
        let table: Vec<(Option<u64>, Here, Option<String>, Liveness)> = vec![
            (
                Some(500),
                same.clone(),
                Some(alive.clone()),
                Liveness::Alive,
            ),
            // Another process with the PID now: reused.
            (Some(499), same.clone(), Some(alive.clone()), Liveness::Dead),
            // No start time recorded: the PID alone.
            (None, same.clone(), Some(alive.clone()), Liveness::Alive),
            (Some(500), same.clone(), None, Liveness::Dead),
            (
                Some(500),
                same.clone(),
                Some(stat("Z", 500)),
                Liveness::Dead,
            ),
            // The machine rebooted: whatever has the PID now is not it.
            (
                Some(500),
                here("boot-b", "gpu1", "pid:[1]"),
                Some(alive.clone()),
                Liveness::Dead,
            ),
            // Another machine, or another PID namespace: not ours to look up.
            (
                Some(500),
                here("boot-b", "gpu2", "pid:[1]"),
                None,
                Liveness::Unknown,
            ),
            (
                Some(500),
                here("boot-a", "gpu1", "pid:[2]"),
                None,
                Liveness::Unknown,
            ),
            // Nothing known of here: the PID and start time decide.
            (Some(500), Here::default(), None, Liveness::Dead),
        ];
        for (start, here, stat, want) in table {
            assert_eq!(
                judge(&recorded(start), &here, stat.as_deref()),
                want,
                "{start:?} {here:?} {stat:?}"
            );
        }
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = ProcessId::current();
        assert_eq!(liveness(&me), Liveness::Alive);
        let reused = ProcessId {
            pid_start_ticks: me.pid_start_ticks.map(|t| t + 1),
            ..me.clone()
        };
        assert_eq!(liveness(&reused), Liveness::Dead);
    }
}
