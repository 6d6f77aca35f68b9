//! oomguard around a real two-node Slurm (issue 30): `sbatch -N 2` with `oomguard run -- srun`
//! in the batch script, one task per node, against the Slurm 22.05 that tests/slurm/start.sh
//! starts (nodes n1 and n2: two slurmd on this machine, each with its own cgroup tree,
//! memory:/slurm_n1 and memory:/slurm_n2, as two machines would have). What one node cannot
//! show: the task that dies is on the node oomguard does not run on (the batch host is n1), the
//! relaunch must reach both nodes with the same batch, and a stop must reach the other node's
//! task through Slurm and leave nothing in either node's cgroups. Where Slurm is not up
//! (`SLURM_CONF` unset), each test prints `SKIPPED <name>: <reason>`; where it is set, both nodes
//! must take jobs or the test fails.

use crate::util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use util::{alive, bin, causes, fixture, flag_value, kill, stderr_of, wait_until, Sandbox};

pub(crate) const NODES: [&str; 2] = ["n1", "n2"];

/// Skips (returns) where no Slurm was started; otherwise waits up to 30 s for both nodes to take
/// jobs ("comp" counts: an earlier test's job still cleaning up; srun waits for it), and fails
/// the test if they do not.
macro_rules! need_two_nodes {
    ($name:literal) => {
        if std::env::var_os("SLURM_CONF").is_none() {
            println!(
                "SKIPPED {}: SLURM_CONF is not set (start Slurm with tests/slurm/start.sh)",
                $name
            );
            return;
        }
        wait_for_both_nodes();
    };
}

pub(crate) use need_two_nodes;

pub(crate) fn wait_for_both_nodes() {
    let mut states = String::new();
    let up = wait_until(Duration::from_secs(30), || {
        let out = Command::new("sinfo")
            .args(["-h", "-N", "-o", "%N %t"])
            .output()
            .expect("sinfo runs where SLURM_CONF is set");
        states = String::from_utf8_lossy(&out.stdout).to_string();
        NODES.iter().all(|node| {
            states.lines().any(|line| {
                line.split_once(' ').is_some_and(|(n, state)| {
                    n == *node
                        && !state.contains('*')
                        && ["idle", "mix", "alloc", "comp"]
                            .iter()
                            .any(|s| state.starts_with(s))
                })
            })
        })
    });
    assert!(
        up,
        "Slurm's nodes n1 and n2 do not both take jobs: {states}"
    );
}

/// The JSON lines a fixture appended to `record`; none before its first task starts.
pub(crate) fn records(record: &Path) -> Vec<serde_json::Value> {
    if record.exists() {
        util::records(record)
    } else {
        Vec::new()
    }
}

/// Submits `body` as an sbatch script of two nodes, one task each, its output in `output`.
/// With `wait`, sbatch returns when the job ended (and fails where the job failed). Returns
/// sbatch's success and the job ID (empty with `wait`).
pub(crate) fn sbatch(
    sb: &Sandbox,
    name: &str,
    body: &str,
    output: &Path,
    wait: bool,
) -> (bool, String) {
    let script = sb.path("job.sbatch");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --job-name={name}\n\
             set -euo pipefail\n{body}\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new("sbatch");
    cmd.arg("--parsable");
    if wait {
        cmd.arg("--wait");
    }
    let out = cmd
        .arg("-o")
        .arg(output)
        .arg(&script)
        .env("XDG_STATE_HOME", sb.path("state"))
        .stderr(Stdio::piped())
        .output()
        .expect("sbatch runs");
    let id = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    (out.status.success(), id)
}

/// The cgroups of job `job` left on either node (memory:/slurm_NODE/uid_0/job_JOB), and the
/// fixture's tasks (`pids`) still alive, once Slurm has had 30 s to clean up.
pub(crate) fn leftovers(job: &str, pids: &[u32]) -> Vec<String> {
    let dirs: Vec<PathBuf> = NODES
        .iter()
        .map(|node| {
            PathBuf::from(format!(
                "/sys/fs/cgroup/memory/slurm_{node}/uid_0/job_{job}"
            ))
        })
        .collect();
    let mut left = Vec::new();
    let clean = wait_until(Duration::from_secs(30), || {
        left = dirs
            .iter()
            .filter(|d| d.exists())
            .map(|d| d.display().to_string())
            .chain(
                pids.iter()
                    .filter(|p| alive(**p))
                    .map(|p| format!("task {p}")),
            )
            .collect();
        left.is_empty()
    });
    if clean {
        Vec::new()
    } else {
        left
    }
}

#[test]
fn a_task_on_the_second_node_killed_by_slurm_mem_is_relaunched_smaller_on_both_nodes() {
    need_two_nodes!(
        "a_task_on_the_second_node_killed_by_slurm_mem_is_relaunched_smaller_on_both_nodes"
    );
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let output = sb.path("slurm.out");
    // Rank 1 (on n2; oomguard runs on n1, the batch host) allocates until its step's --mem=200M
    // on n2 kills it; rank 0 waits in a collective. Batch 32 fits on both.
    let body = format!(
        "exec {bin} run --run-dir {run} --backoff 0s --grace 10s --max-attempts 3 \
         --log-format json -- srun --label --kill-on-bad-exit=1 --mem=200M python3 {task} \
         --batch_size 64 --gradient_accumulation_steps 1 --fits 32 --oom alloc --oom-rank 1 \
         --record {record}",
        bin = bin().display(),
        run = sb.run_dir().display(),
        task = fixture("cluster_task.py"),
        record = record.display(),
    );
    let (ok, _) = sbatch(&sb, "og-2n-mem", &body, &output, true);
    let log = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(ok, "sbatch --wait failed:\n{log}");
    // attempt → rank → (node, batch, accum).
    let mut attempts: BTreeMap<String, BTreeMap<u64, (String, u64, u64)>> = BTreeMap::new();
    for r in records(&record) {
        attempts
            .entry(r["attempt"].as_str().expect("OOMGUARD_ATTEMPT").to_string())
            .or_default()
            .insert(
                r["rank"].as_u64().expect("rank"),
                (
                    r["node"].as_str().expect("SLURMD_NODENAME").to_string(),
                    flag_value(&r["argv"], "--batch_size"),
                    flag_value(&r["argv"], "--gradient_accumulation_steps"),
                ),
            );
    }
    let attempts: Vec<_> = attempts.into_values().collect();
    assert_eq!(attempts.len(), 2, "{attempts:?}\n{log}");
    assert_eq!(
        attempts[0].get(&1),
        Some(&("n2".to_string(), 64, 1)),
        "{log}"
    );
    // Both nodes relaunched with half the batch and twice the accumulation: 32 × 2 = 64.
    assert_eq!(
        attempts[1],
        BTreeMap::from([(0, ("n1".into(), 32, 2)), (1, ("n2".into(), 32, 2))]),
        "{log}"
    );
    assert_eq!(causes(&sb.summary()), ["oom_killed", "ok"], "{log}");
    // The verdict's evidence is Slurm's own line about the kill on n2.
    let ended: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "attempt_ended")
        .collect();
    assert_eq!(ended.len(), 1, "{log}");
    let fields = &ended[0]["fields"];
    assert_eq!(fields["cause"], "oom_killed", "{log}");
    let evidence = fields["evidence"].as_str().unwrap_or_default();
    assert!(
        evidence.contains("oom_kill event") || evidence.contains("n2: task 1: Out Of Memory"),
        "evidence {evidence:?} is not Slurm's line:\n{log}"
    );
}

/// The events slurm_task.py recorded, per node: (rank, event) in order.
fn events_by_node(record: &Path) -> BTreeMap<String, Vec<String>> {
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in records(record) {
        by_node
            .entry(r["node"].as_str().expect("SLURMD_NODENAME").to_string())
            .or_default()
            .push(r["event"].as_str().expect("event").to_string());
    }
    by_node
}

pub(crate) fn nodes_up(record: &Path) -> BTreeSet<String> {
    records(record)
        .iter()
        .filter(|r| r["event"] == "up")
        .map(|r| r["node"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The job ID and task PIDs slurm_task.py recorded.
pub(crate) fn job_and_pids(record: &Path) -> (String, Vec<u32>) {
    let recs = records(record);
    let job = recs[0]["job"].as_str().expect("SLURM_JOB_ID").to_string();
    let pids = recs
        .iter()
        .filter_map(|r| r["pid"].as_u64())
        .map(|p| p as u32)
        .collect();
    (job, pids)
}

/// Each node's task got the stop signal (`stop`: slurm_task.py's "term" for SIGTERM, "int" for
/// SIGINT), finished its `--save-s` save (so no SIGKILL came before it) and did not run to its
/// end; no task started twice.
fn assert_saved_on_both_nodes(record: &Path, stop: &str, log: &str) {
    let by_node = events_by_node(record);
    assert_eq!(
        by_node.keys().map(String::as_str).collect::<Vec<_>>(),
        NODES,
        "{by_node:?}\n{log}"
    );
    for (node, events) in &by_node {
        let count = |e: &str| events.iter().filter(|x| *x == e).count();
        assert_eq!(count("up"), 1, "{node}: {events:?}\n{log}");
        assert!(count(stop) >= 1, "{node}: {events:?}\n{log}");
        assert_eq!(count("saved"), 1, "{node}: {events:?}\n{log}");
        assert_eq!(count("done"), 0, "{node}: {events:?}\n{log}");
        let term = events.iter().position(|e| e == stop);
        let saved = events.iter().position(|e| e == "saved");
        assert!(term < saved, "{node}: {events:?}\n{log}");
    }
}

#[test]
fn scancel_of_a_two_node_job_reaches_both_tasks_as_sigterm_and_leaves_nothing() {
    need_two_nodes!("scancel_of_a_two_node_job_reaches_both_tasks_as_sigterm_and_leaves_nothing");
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let output = sb.path("slurm.out");
    // A 2 s save: inside Slurm's KillWait (5 s) between scancel's SIGTERM and its SIGKILL.
    let body = format!(
        "exec {bin} run --run-dir {run} --grace 30s -- srun --label python3 {task} \
         --record {record} --save-s 2",
        bin = bin().display(),
        run = sb.run_dir().display(),
        task = fixture("slurm_task.py"),
        record = record.display(),
    );
    let (ok, id) = sbatch(&sb, "og-2n-scancel", &body, &output, false);
    let log = || std::fs::read_to_string(&output).unwrap_or_default();
    assert!(ok, "sbatch failed: {}", log());
    assert!(
        wait_until(Duration::from_secs(30), || nodes_up(&record).len() == 2),
        "the tasks never came up on both nodes: {:?}\n{}",
        records(&record),
        log()
    );
    crate::slurm_real::scancel_and_wait_for_the_summary(&sb, &id, &log);
    assert_saved_on_both_nodes(&record, "term", &log());
    assert_eq!(causes(&sb.summary()), ["interrupted"], "{}", log());
    let (job, pids) = job_and_pids(&record);
    assert_eq!(job, id);
    assert_eq!(leftovers(&job, &pids), Vec::<String>::new(), "{}", log());
}

/// `srun -N 2 --ntasks-per-node=1 --label -J NAME python3 slurm_task.py --record RECORD
/// ARGS...`: one task on each node, run by oomguard outside an allocation.
pub(crate) fn srun_task_on_each_node(name: &str, record: &Path, args: &[&str]) -> Vec<String> {
    let mut job: Vec<String> = [
        "srun",
        "-N",
        "2",
        "--ntasks-per-node=1",
        "--label",
        "-J",
        name,
    ]
    .map(String::from)
    .to_vec();
    job.extend(["python3".to_string(), fixture("slurm_task.py")]);
    job.extend(["--record".to_string(), record.display().to_string()]);
    job.extend(args.iter().map(|a| a.to_string()));
    job
}

/// oomguard (not in an allocation) around `srun -N 2 --ntasks-per-node=1`, stopped by `signal`
/// (systemctl stop's SIGTERM, a user's Ctrl-C): the signal reaches the task on each node through
/// Slurm (`stop` is what the task records) and its `--grace` lets each save.
fn stop_reaches_both_nodes(name: &str, signal: Signal, stop: &str) {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let job = srun_task_on_each_node(name, &record, &["--save-s", "3"]);
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let child = sb
        .run(&["--grace", "30s"], &job)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oomguard starts");
    assert!(
        wait_until(Duration::from_secs(30), || nodes_up(&record).len() == 2),
        "the tasks never came up on both nodes: {:?}",
        records(&record)
    );
    kill(child.id(), signal);
    let out = child.wait_with_output().expect("oomguard ends");
    let stderr = stderr_of(&out);
    // 3 s of saving on each node, past Slurm's own stop: srun alone would have SIGKILLed them.
    assert_saved_on_both_nodes(&record, stop, &stderr);
    assert!(!stderr.contains("forcing job termination"), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["interrupted"], "{stderr}");
    let (job, pids) = job_and_pids(&record);
    assert_eq!(leftovers(&job, &pids), Vec::<String>::new(), "{stderr}");
}

#[test]
fn grace_on_sigterm_reaches_the_task_on_each_node() {
    need_two_nodes!("grace_on_sigterm_reaches_the_task_on_each_node");
    stop_reaches_both_nodes("og-2n-term", Signal::SIGTERM, "term");
}

/// A Ctrl-C reaches the tasks as SIGINT, the user's own signal (as a trainer run by hand gets
/// it), not as SIGTERM; either way before any SIGKILL, within `--grace`.
#[test]
fn grace_on_ctrl_c_reaches_the_task_on_each_node() {
    need_two_nodes!("grace_on_ctrl_c_reaches_the_task_on_each_node");
    stop_reaches_both_nodes("og-2n-int", Signal::SIGINT, "int");
}

/// oomguard (outside an allocation) around `srun -N 2 --ntasks-per-node=1` whose tasks hold
/// `hold_mb` MiB (slurm_task.py's list: rank 0 on n1, rank 1 on n2) for `for_s` seconds, with
/// `--max-rss max_rss`; `slurm_cgroups`, where given, is the only cgroup tree oomguard looks in
/// for the steps' cgroups (`OOMGUARD_SLURM_CGROUP_ROOT`). Returns stderr, summary.json and the
/// `slurm_parts` cell of each row of samples.csv, parsed (`node:n1` or `step:J.S` → bytes).
fn two_node_max_rss(
    name: &str,
    hold_mb: &str,
    for_s: &str,
    max_rss: &str,
    slurm_cgroups: Option<&Path>,
) -> (String, serde_json::Value, Vec<BTreeMap<String, u64>>) {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let job = srun_task_on_each_node(
        name,
        &record,
        &["--hold-mb", hold_mb, "--for-s", for_s, "--save-s", "0.5"],
    );
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let mut run = sb.run(
        &[
            "--max-rss",
            max_rss,
            "--grace",
            "30s",
            "--max-attempts",
            "1",
        ],
        &job,
    );
    if let Some(root) = slurm_cgroups {
        run.env("OOMGUARD_SLURM_CGROUP_ROOT", root);
    }
    let out = run.output().expect("oomguard runs");
    let stderr = stderr_of(&out);
    assert_eq!(
        nodes_up(&record),
        BTreeSet::from(NODES.map(String::from)),
        "{stderr}"
    );
    let csv = std::fs::read_to_string(sb.run_dir().join("samples.csv")).unwrap();
    let mut lines = csv.lines();
    // Counted from the row's end: the cells after `gpu_neighbours` (whose user names are the
    // system's to write) hold no comma (`node:n1=1;node:n2=2`, then the probe's `steps`).
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let from_end = header
        .iter()
        .rev()
        .position(|c| *c == "slurm_parts")
        .expect("samples.csv has slurm_parts");
    let parts = lines
        .map(|row| {
            let cell = row.rsplit(',').nth(from_end).unwrap_or_default();
            cell.split(';')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (place, bytes) = p.split_once('=').expect("PLACE=BYTES");
                    (place.to_string(), bytes.parse().expect("bytes"))
                })
                .collect()
        })
        .collect();
    (stderr, sb.summary(), parts)
}

/// The largest value `place` had in any sample.
fn peak_of(parts: &[BTreeMap<String, u64>], place: &str) -> Option<u64> {
    parts.iter().filter_map(|p| p.get(place)).copied().max()
}

const MIB: u64 = 1 << 20;

/// 100 MiB on n1 and 200 MiB on n2, `--max-rss 250M`: only both nodes' step cgroups together
/// cross it (one node's alone, as oomguard read a step before, never does), and samples.csv
/// keeps each node's memory apart for the report's chart.
#[test]
fn max_rss_sums_the_step_cgroups_of_both_nodes_and_the_samples_keep_each_node() {
    need_two_nodes!("max_rss_sums_the_step_cgroups_of_both_nodes_and_the_samples_keep_each_node");
    let (stderr, summary, parts) = two_node_max_rss("og-2n-rss", "100,200", "40", "250M", None);
    assert_eq!(causes(&summary), ["memory_limit"], "{stderr}");
    assert!(stderr.contains("over --max-rss 250.0 MiB"), "{stderr}");
    let n1 = peak_of(&parts, "node:n1").expect("n1's memory sampled");
    let n2 = peak_of(&parts, "node:n2").expect("n2's memory sampled");
    assert!((100 * MIB..190 * MIB).contains(&n1), "n1 {n1}: {parts:?}");
    assert!((200 * MIB..290 * MIB).contains(&n2), "n2 {n2}: {parts:?}");
    assert!(
        parts
            .iter()
            .all(|p| p.keys().all(|k| k.starts_with("node:"))),
        "both nodes' cgroups are here: no sstat: {parts:?}"
    );
    let peak = summary["attempts"][0]["peak_cgroup_bytes"]
        .as_u64()
        .expect("the attempt has a cgroup peak");
    assert!(
        peak >= 300 * MIB,
        "peak {peak} is not both nodes': {stderr}"
    );
}

/// As on a cluster where the other node is another machine: oomguard sees only n1's cgroup
/// tree, so the step is read whole from sstat, and its task on n1 is not counted a second time
/// from n1's cgroup. 200 MiB on n1, 20 on n2, `--max-rss 300M`: sstat's figure reaches the
/// job's peak (at least 200 MiB), and the bound is not crossed (n1's cgroup plus sstat would be
/// over 400 MiB). (Slurm 22.05's jobacct_gather/cgroup reports no memory for a step's tasks on
/// its second node: sstat's total here is n1's task alone, whence the big task on n1.)
#[test]
fn where_the_other_nodes_cgroup_is_not_here_sstat_reads_the_whole_step_once() {
    need_two_nodes!("where_the_other_nodes_cgroup_is_not_here_sstat_reads_the_whole_step_once");
    let only_n1 = tempfile::tempdir().unwrap();
    std::fs::create_dir(only_n1.path().join("memory")).unwrap();
    std::os::unix::fs::symlink(
        "/sys/fs/cgroup/memory/slurm_n1",
        only_n1.path().join("memory/slurm_n1"),
    )
    .unwrap();
    let (stderr, summary, parts) =
        two_node_max_rss("og-2n-sstat", "200,20", "12", "300M", Some(only_n1.path()));
    assert_eq!(causes(&summary), ["ok"], "{stderr}");
    let places: BTreeSet<&String> = parts.iter().flat_map(|p| p.keys()).collect();
    assert_eq!(places.len(), 1, "{places:?}");
    let step = places.first().unwrap();
    assert!(step.starts_with("step:") && step.ends_with(".0"), "{step}");
    let sstat = peak_of(&parts, step).unwrap();
    assert!(sstat >= 200 * MIB, "sstat {sstat}: {parts:?}");
    let peak = summary["attempts"][0]["peak_rss_bytes"]
        .as_u64()
        .expect("the attempt has a peak RSS");
    assert!(
        (200 * MIB..300 * MIB).contains(&peak),
        "peak {peak}: sstat's tasks counted once: {stderr}"
    );
}
