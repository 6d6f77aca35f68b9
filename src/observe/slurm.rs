//! The Slurm steps the job's `srun`s launched, so a stop and the memory watch reach the tasks
//! where they run. srun does not forward SIGTERM, SIGHUP or SIGQUIT to its tasks: it prints
//! `srun: forcing job termination` and Slurm SIGKILLs every task, so no task could save a
//! checkpoint. This module finds each step (`scontrol show step -o`, whose `SrunHost:Pid` names
//! the srun that launched it, and `Nodes=` how many nodes it spans), signals its tasks the way
//! `scancel --signal` does, finds the step's memory cgroups on this host (one per node whose
//! slurmd runs here: usually one, several where a host runs several slurmd), which hold the
//! tasks (the attempt cgroup holds only srun), and asks `sstat` for the memory of all a step's
//! tasks where some node's cgroup is not here to read.
//!
//! It does not decide when to stop ([`crate::supervise`] does), nor read the cgroups' counters
//! ([`crate::observe::cgroup`] does), nor choose between cgroups and sstat for a step
//! ([`crate::supervise`] does, so that no task is counted twice). Finding the steps runs `scontrol`
//! (a round trip to slurmctld), so callers ask only when a new srun appears, and again, less and
//! less often, while a step is not found.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

pub mod shell;

/// One job step: `JOB.STEP` in Slurm's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Step {
    pub job: u64,
    pub step: u64,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.job, self.step)
    }
}

/// Whether `pid` runs Slurm's `srun` (its command name, as the kernel keeps it).
pub fn is_srun(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim_end() == "srun")
}

/// Whether `program` (the job's command) is `srun`, by its file name.
pub fn is_srun_command(program: &std::ffi::OsStr) -> bool {
    Path::new(program).file_name() == Some(std::ffi::OsStr::new("srun"))
}

/// A step as `scontrol show step -o` lists it: launched by the srun `srun_pid` here, on
/// `nodes` nodes (`None` where the line does not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    pub srun_pid: u32,
    pub step: Step,
    pub nodes: Option<u32>,
}

/// The steps launched from this host by the srun processes `srun_pids`, as `scontrol show step
/// -o` lists them; empty where scontrol is missing or fails (no Slurm, or slurmctld down).
pub fn steps_of(srun_pids: &[u32]) -> Vec<Listed> {
    if srun_pids.is_empty() {
        return Vec::new();
    }
    let mut scontrol = Command::new("scontrol");
    scontrol.args(["show", "step", "-o"]);
    let Some((_, out)) = run_bounded(scontrol, false) else {
        return Vec::new();
    };
    let host = crate::guard::liveness::host_name().unwrap_or_default();
    parse_steps(&String::from_utf8_lossy(&out), &host, srun_pids, &owner_of)
}

/// The uid that owns process `pid` here.
fn owner_of(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// The longest a Slurm client command may take: slurmctld down or slow must not hold the run
/// loop (and a user's stop) for its `MessageTimeout` on every call.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a Slurm client command to its end or [`CLIENT_TIMEOUT`], whichever comes first (then it
/// is killed): whether it succeeded and what it printed on stdout (and on stderr, in order, with
/// `stderr_too`); `None` where it could not start or timed out.
fn run_bounded(mut command: Command, stderr_too: bool) -> Option<(bool, Vec<u8>)> {
    let program = command.get_program().to_owned();
    let (output, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    let mut output = std::fs::File::from(output);
    let stderr = if stderr_too {
        Stdio::from(writer.try_clone().ok()?)
    } else {
        Stdio::null()
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(stderr)
        .spawn()
        .ok()?;
    // Our copies of the pipe's write end go with the command: the read ends when the child's do.
    drop(command);
    // Read on a thread: a long listing fills the pipe before the command can exit.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = output.read_to_end(&mut bytes);
        let _ = tx.send(bytes);
    });
    match rx.recv_timeout(CLIENT_TIMEOUT) {
        Ok(bytes) => Some((child.wait().ok()?.success(), bytes)),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            tracing::warn!(
                "{program:?} gave no answer within {}s: Slurm left out this time",
                CLIENT_TIMEOUT.as_secs()
            );
            None
        }
    }
}

/// The steps of `scontrol show step -o`'s output launched by one of `pids` on `host` (the short
/// host name; a fully qualified one matches by its first label), with the srun's PID; only
/// steps whose `UserId` is the uid that owns that srun here (`owner_of`). A process of any name
/// can be called `srun`, and a PID seen here may be another's in srun's own PID namespace: the
/// step must also be its owner's, or oomguard (as root) would signal someone else's tasks. A
/// line:
///
/// ```text
/// StepId=5.0 UserId=0 StartTime=2026-11-26T14:32:46 TimeLimit=UNLIMITED State=RUNNING
/// Partition=debug NodeList=vm Nodes=1 CPUs=2 Tasks=2 Name=sleep ... SrunHost:Pid=vm:15241
/// ```
pub fn parse_steps(
    text: &str,
    host: &str,
    pids: &[u32],
    owner_of: &dyn Fn(u32) -> Option<u32>,
) -> Vec<Listed> {
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_string();
    let host = short(host.trim());
    let mut steps = Vec::new();
    for line in text.lines() {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(key))
                .map(str::to_string)
        };
        let (Some(id), Some(srun)) = (field("StepId="), field("SrunHost:Pid=")) else {
            continue;
        };
        let Some((srun_host, srun_pid)) = srun.rsplit_once(':') else {
            continue;
        };
        let Ok(srun_pid) = srun_pid.parse::<u32>() else {
            continue;
        };
        if short(srun_host) != host || !pids.contains(&srun_pid) {
            continue;
        }
        // `UserId=1000` or `UserId=alice(1000)`.
        let user = field("UserId=").and_then(|u| {
            let digits = u
                .rsplit_once('(')
                .map_or(u.as_str(), |(_, n)| n.trim_end_matches(')'));
            digits.parse::<u32>().ok()
        });
        if user.is_none() || user != owner_of(srun_pid) {
            continue;
        }
        // A heterogeneous job's step reads `5+0.0`; its components are steps of their own.
        let Some((job, step)) = id.split_once('.') else {
            continue;
        };
        let (Ok(job), Ok(step)) = (job.parse(), step.parse()) else {
            continue;
        };
        steps.push(Listed {
            srun_pid,
            step: Step { job, step },
            nodes: field("Nodes=").and_then(|n| n.parse().ok()),
        });
    }
    steps
}

/// Sends `signal` to every task of `steps` as `scancel --signal` does (slurmstepd delivers it on
/// each node). Returns whether scancel accepted all of them, or failed only for tasks that had
/// ended.
pub fn signal_steps(steps: &[Step], signal: Signal) -> bool {
    if steps.is_empty() {
        return true;
    }
    let name = signal.as_str().trim_start_matches("SIG");
    let ids: Vec<String> = steps.iter().map(Step::to_string).collect();
    let mut scancel = Command::new("scancel");
    scancel.arg(format!("--signal={name}")).args(&ids);
    let answer = run_bounded(scancel, true);
    let ok = answer.as_ref().is_some_and(|(ok, _)| *ok);
    let said = answer.map(|(_, out)| String::from_utf8_lossy(&out).trim().to_string());
    let ended = !ok && said.as_deref().is_some_and(some_tasks_ended);
    if ok {
        tracing::info!(
            "sent {signal} to the tasks of Slurm step(s) {}",
            ids.join(" ")
        );
    } else if ended {
        // A step whose tasks ended on one node: scancel still signals the others, and fails.
        tracing::info!(
            "sent {signal} to the tasks of Slurm step(s) {} still running ({})",
            ids.join(" "),
            said.unwrap_or_default()
        );
    } else {
        tracing::warn!(
            "scancel --signal={name} {} failed{}",
            ids.join(" "),
            said.filter(|s| !s.is_empty())
                .map_or(String::new(), |s| format!(": {s}"))
        );
    }
    ok || ended
}

/// One node's memory cgroup of a step, on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCgroup {
    /// The node's name: from the tree's name where several slurmd share the host
    /// (`slurm_n2`, `n2_slurmstepd.scope`), else `here` (the host's short name).
    pub node: String,
    pub dir: PathBuf,
    pub v2: bool,
}

/// Whether scancel's complaint `said` is only that some of the steps' tasks had ended
/// (`scancel: error: Kill job error on job step id 12.0: Invalid job id specified`).
fn some_tasks_ended(said: &str) -> bool {
    !said.is_empty()
        && said
            .lines()
            .all(|line| line.contains("Invalid job id specified") || line.trim().is_empty())
}

/// The memory cgroups of `step` on this host, one per node whose slurmd runs here, where
/// slurmstepd put its tasks: on cgroup v1 `memory/slurm/uid_U/job_J/step_S`
/// (`memory/slurm_NODE/...` with several slurmd per host), on v2
/// `system.slice/slurmstepd.scope/job_J/step_S` (`NODE_slurmstepd.scope`). Empty where the step
/// runs no task here or Slurm does not track tasks with cgroups. `here` names the node of an
/// unnamed tree.
pub fn step_memory_cgroups(root: &Path, step: Step, here: &str) -> Vec<StepCgroup> {
    let leaf = format!("job_{}/step_{}", step.job, step.step);
    let mut found = Vec::new();
    let node_of = |name: &str, unnamed: &str, prefix: bool| {
        let named = if prefix {
            name.strip_suffix(unnamed).and_then(|n| n.strip_suffix('_'))
        } else {
            name.strip_prefix(unnamed).and_then(|n| n.strip_prefix('_'))
        };
        match named {
            Some(node) if !node.is_empty() => Some(node.to_string()),
            _ => (name == unnamed).then(|| here.to_string()),
        }
    };
    for scope in subdirs(&root.join("system.slice")) {
        let Some(node) = node_of(&file_name(&scope), "slurmstepd.scope", true) else {
            continue;
        };
        let dir = scope.join(&leaf);
        if dir.join("memory.current").exists() {
            found.push(StepCgroup {
                node,
                dir,
                v2: true,
            });
        }
    }
    for tree in subdirs(&root.join("memory")) {
        let Some(node) = node_of(&file_name(&tree), "slurm", false) else {
            continue;
        };
        for uid in subdirs(&tree) {
            let dir = uid.join(&leaf);
            if dir.join("memory.usage_in_bytes").exists() {
                found.push(StepCgroup {
                    node: node.clone(),
                    dir,
                    v2: false,
                });
            }
        }
    }
    found.sort_by(|a, b| a.node.cmp(&b.node));
    found
}

/// The subdirectories of `dir` (links to one included); none where it cannot be listed.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The memory the tasks of `step` use now, summed over them, as `sstat` reports it from Slurm's
/// accounting (sampled every `JobAcctGatherFrequency`); `None` where sstat fails.
pub fn step_memory_bytes(step: Step) -> Option<u64> {
    let mut sstat = Command::new("sstat");
    sstat
        .args(["-n", "-P", "--noconvert", "-o", "TRESUsageInTot", "-j"])
        .arg(step.to_string());
    let (_, out) = run_bounded(sstat, false)?;
    parse_tres_mem(&String::from_utf8_lossy(&out))
}

/// The `mem=` of sstat's `TRESUsageInTot` (bytes with `--noconvert`; a K/M/G/T suffix
/// otherwise):
///
/// ```text
/// cpu=00:00:01,energy=0,fs/disk=3383522,mem=595976192,pages=1,vmem=595996672
/// ```
pub fn parse_tres_mem(text: &str) -> Option<u64> {
    let value = text
        .lines()
        .next()?
        .split(',')
        .find_map(|item| item.trim().strip_prefix("mem="))?;
    let (digits, unit) = match value
        .char_indices()
        .find(|(_, c)| !c.is_ascii_digit() && *c != '.')
    {
        Some((at, _)) => value.split_at(at),
        None => (value, ""),
    };
    let scale: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return None,
    };
    let number: f64 = digits.parse().ok()?;
    Some((number * scale as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW: &str = "\
StepId=5.0 UserId=0 StartTime=2026-11-26T14:32:46 TimeLimit=UNLIMITED State=RUNNING Partition=debug NodeList=vm Nodes=1 CPUs=2 Tasks=2 Name=sleep Network=(null) TRES=cpu=2,mem=12052M,node=1 ResvPorts=(null) CPUFreqReq=Default Dist=Block SrunHost:Pid=vm:15241
StepId=6.2 UserId=0 StartTime=2026-11-26T14:32:47 TimeLimit=UNLIMITED State=RUNNING Partition=debug NodeList=vm Nodes=1 CPUs=2 Tasks=2 Name=train SrunHost:Pid=vm:15300
StepId=7.0 UserId=0 State=RUNNING Name=other SrunHost:Pid=node2:15241
StepId=8+0.0 UserId=0 State=RUNNING Name=het SrunHost:Pid=vm:15400
StepId=9.batch UserId=0 State=RUNNING Name=batch
";

    /// A host, our srun PIDs, and the steps they launched.
    type Row = (&'static str, &'static [u32], Vec<Listed>);

    /// What `parse_steps` lists for srun `srun_pid`'s step `job.step` on `nodes` nodes.
    fn listed(srun_pid: u32, job: u64, step: u64, nodes: Option<u32>) -> Listed {
        Listed {
            srun_pid,
            step: Step { job, step },
            nodes,
        }
    }

    #[test]
    fn finds_the_steps_of_our_sruns_on_our_host() {
        let step = |srun_pid, job, step| listed(srun_pid, job, step, Some(1));
        let table: &[Row] = &[
            ("vm", &[15241], vec![step(15241, 5, 0)]),
            (
                "vm.cluster.local",
                &[15241, 15300],
                vec![step(15241, 5, 0), step(15300, 6, 2)],
            ),
            ("node2", &[15241], vec![listed(15241, 7, 0, None)]),
            ("vm", &[15400, 1], vec![]),
            ("vm", &[], vec![]),
            ("other", &[15241], vec![]),
        ];
        let root = |_| Some(0);
        for (host, pids, want) in table {
            assert_eq!(
                &parse_steps(SHOW, host, pids, &root),
                want,
                "{host} {pids:?}"
            );
        }
        assert_eq!(
            parse_steps("No job steps in the system\n", "vm", &[1], &root),
            vec![]
        );
        // An srun of another user's here (or a PID that is another's in srun's namespace): its
        // step is never ours to signal.
        assert_eq!(parse_steps(SHOW, "vm", &[15241], &|_| Some(1000)), vec![]);
        let named = SHOW.replace("UserId=0", "UserId=alice(1000)");
        assert_eq!(
            parse_steps(&named, "vm", &[15241], &|_| Some(1000)),
            vec![step(15241, 5, 0)]
        );
        let two = SHOW.replace("Nodes=1", "Nodes=2");
        assert_eq!(
            parse_steps(&two, "vm", &[15241], &root),
            vec![listed(15241, 5, 0, Some(2))]
        );
        assert_eq!(Step { job: 42, step: 3 }.to_string(), "42.3");
    }

    #[test]
    fn finds_the_step_cgroups_of_every_node_here_in_either_version() {
        let tmp = tempfile::tempdir().unwrap();
        let step = Step { job: 14, step: 0 };
        let found = |step| {
            step_memory_cgroups(tmp.path(), step, "vm")
                .into_iter()
                .map(|c| {
                    (
                        c.node,
                        c.dir.strip_prefix(tmp.path()).unwrap().to_owned(),
                        c.v2,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(found(step), vec![]);
        // (tree, step directory below it, counter file, version 2)
        let trees = [
            (
                "memory/slurm",
                "uid_0/job_14/step_0",
                "memory.usage_in_bytes",
            ),
            (
                "memory/slurm_n2",
                "uid_1000/job_14/step_0",
                "memory.usage_in_bytes",
            ),
            (
                "memory/slurm_n3",
                "uid_0/job_14/step_1",
                "memory.usage_in_bytes",
            ),
            ("memory/slurmish", "uid_0/job_14/step_0", ""),
            (
                "memory/other",
                "uid_0/job_14/step_0",
                "memory.usage_in_bytes",
            ),
            (
                "system.slice/slurmstepd.scope",
                "job_14/step_0",
                "memory.current",
            ),
            (
                "system.slice/n4_slurmstepd.scope",
                "job_14/step_0",
                "memory.current",
            ),
            (
                "system.slice/cron.service",
                "job_14/step_0",
                "memory.current",
            ),
        ];
        for (tree, leaf, counter) in trees {
            let dir = tmp.path().join(tree).join(leaf);
            std::fs::create_dir_all(&dir).unwrap();
            if !counter.is_empty() {
                std::fs::write(dir.join(counter), "1\n").unwrap();
            }
        }
        let path = |p: &str| PathBuf::from(p);
        assert_eq!(
            found(step),
            vec![
                (
                    "n2".into(),
                    path("memory/slurm_n2/uid_1000/job_14/step_0"),
                    false
                ),
                (
                    "n4".into(),
                    path("system.slice/n4_slurmstepd.scope/job_14/step_0"),
                    true
                ),
                (
                    "vm".into(),
                    path("system.slice/slurmstepd.scope/job_14/step_0"),
                    true
                ),
                ("vm".into(), path("memory/slurm/uid_0/job_14/step_0"), false),
            ]
        );
        assert_eq!(
            found(Step { job: 14, step: 1 }),
            vec![(
                "n3".into(),
                path("memory/slurm_n3/uid_0/job_14/step_1"),
                false
            )]
        );
    }

    #[test]
    fn reads_the_memory_of_sstat_tres() {
        for (text, want) in [
            (
                "cpu=00:00:01,energy=0,fs/disk=3383522,mem=595976192,pages=1,vmem=595996672\n",
                Some(595976192),
            ),
            ("cpu=00:00:01,mem=1.50G,vmem=2G\n", Some(1610612736)),
            ("cpu=00:00:01,mem=512K\n", Some(524288)),
            ("cpu=00:00:01,vmem=2G\n", None),
            ("cpu=00:00:01,mem=12Q\n", None),
            ("", None),
        ] {
            assert_eq!(parse_tres_mem(text), want, "{text}");
        }
    }

    #[test]
    fn scancel_failing_only_for_ended_tasks_is_told_from_a_failure() {
        for (said, want) in [
            ("scancel: error: Kill job error on job step id 12.0: Invalid job id specified", true),
            (
                "scancel: error: Kill job error on job id 12.0: Invalid job id specified\n\n",
                true,
            ),
            ("scancel: error: Unable to contact slurm controller", false),
            (
                "scancel: error: Kill job error on job id 12.0: Invalid job id specified\nscancel: error: Access/permission denied",
                false,
            ),
            ("", false),
        ] {
            assert_eq!(some_tasks_ended(said), want, "{said}");
        }
    }

    #[test]
    fn srun_is_known_by_its_file_name() {
        for (program, want) in [
            ("srun", true),
            ("/usr/bin/srun", true),
            ("srun2", false),
            ("python", false),
        ] {
            assert_eq!(
                is_srun_command(std::ffi::OsStr::new(program)),
                want,
                "{program}"
            );
        }
    }
}
