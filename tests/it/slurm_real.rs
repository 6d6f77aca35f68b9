//! oomguard around a real Slurm (issue 19): srun, sbatch and scancel against one node of the
//! Slurm 22.05 that tests/slurm/start.sh starts (CI does, before the tests; `SLURM_CONF` names
//! its configuration). Its tasks run under slurmstepd in Slurm's cgroups, not below oomguard,
//! which is what tests/it/clusters.rs's fake srun cannot show: a stop must reach them through Slurm
//! (srun answers SIGTERM by SIGKILLing every task), and the memory bounds must read them where
//! they are. Where Slurm is not up, each test prints `SKIPPED <name>: <reason>`.

use crate::util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use util::{bin, causes, fixture, flag_value, kill, stderr_of, wait_until, Sandbox};

/// Why the tests cannot use Slurm here, or `None` where its node answers within 30 s in a state
/// that takes jobs. "comp" counts: the node is up and still cleaning after an earlier test's job
/// (the tests run in parallel), and srun simply waits for it. A node that is down, drained or not
/// responding (a `*` after its state) is given those 30 s to come back, then the test skips.
fn slurm_missing() -> Option<String> {
    if std::env::var_os("SLURM_CONF").is_none() {
        return Some("SLURM_CONF is not set (start Slurm with tests/slurm/start.sh)".into());
    }
    let mut state = String::new();
    let mut failed = None;
    let up = wait_until(Duration::from_secs(30), || {
        match Command::new("sinfo").args(["-h", "-o", "%t"]).output() {
            Ok(out) => state = String::from_utf8_lossy(&out.stdout).trim().to_string(),
            Err(e) => failed = Some(format!("sinfo cannot run: {e}")),
        }
        failed.is_some() || node_takes_jobs(&state)
    });
    failed.or_else(|| (!up).then(|| format!("Slurm's node is not up (sinfo: '{state}')")))
}

/// Whether sinfo's short state says the node takes jobs: idle, mixed, allocated or completing,
/// and responding (no `*` flag).
fn node_takes_jobs(state: &str) -> bool {
    !state.contains('*')
        && ["idle", "mix", "alloc", "comp"]
            .iter()
            .any(|s| state.starts_with(s))
}

macro_rules! need_slurm {
    ($name:literal) => {
        if let Some(why) = slurm_missing() {
            println!("SKIPPED {}: {why}", $name);
            return;
        }
    };
}

/// The events slurm_task.py recorded: (rank, event) in order.
fn events(record: &Path) -> Vec<(u64, String)> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            (
                v["rank"].as_u64().expect("rank"),
                v["event"].as_str().expect("event").to_string(),
            )
        })
        .collect()
}

fn count(events: &[(u64, String)], event: &str) -> usize {
    events.iter().filter(|(_, e)| e == event).count()
}

/// `srun -N 1 -n 2 --label -J NAME python3 slurm_task.py --record RECORD ARGS...`: both tasks on
/// one node (the cluster has two; these tests are about one, slurm_two_nodes.rs about both).
fn srun_tasks(name: &str, record: &Path, args: &[&str]) -> Vec<String> {
    let mut job: Vec<String> = [
        "srun", "-N", "1", "-n", "2", "--label", "-J", name, "python3",
    ]
    .map(String::from)
    .to_vec();
    job.push(fixture("slurm_task.py"));
    job.extend(["--record".to_string(), record.display().to_string()]);
    job.extend(args.iter().map(|a| a.to_string()));
    job
}

#[test]
fn a_stop_under_srun_reaches_every_task_as_sigterm_and_waits_its_grace() {
    need_slurm!("a_stop_under_srun_reaches_every_task_as_sigterm_and_waits_its_grace");
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let job = srun_tasks("og-grace", &record, &["--save-s", "3"]);
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let child = sb
        .run(&["--grace", "30s"], &job)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oomguard starts");
    assert!(
        wait_until(Duration::from_secs(30), || count(&events(&record), "up")
            == 2),
        "the tasks never came up: {:?}",
        events(&record)
    );
    // What `systemctl stop` does: SIGTERM to oomguard.
    kill(child.id(), Signal::SIGTERM);
    let out = child.wait_with_output().expect("oomguard ends");
    let stderr = stderr_of(&out);
    let seen = events(&record);
    // Each task ran its handler and had the 3 s it needed to save (under --grace 30s): srun
    // alone, given SIGTERM, would have SIGKILLed them ("srun: forcing job termination").
    assert_eq!(count(&seen, "term"), 2, "{seen:?}\n{stderr}");
    assert_eq!(count(&seen, "saved"), 2, "{seen:?}\n{stderr}");
    assert!(!stderr.contains("forcing job termination"), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["interrupted"], "{stderr}");
}

/// Two tasks of 300 MiB each under srun (srun itself holds a few MiB), run with `--max-rss
/// 400M`; `cgroup_root`, where given, is where oomguard looks for cgroups. The tasks end by
/// themselves after 40 s: a bound that watches only srun never fires, and the attempt ends
/// `ok`. Returns oomguard's stderr, summary.json and the tasks' events.
fn max_rss_around_srun(
    sb: &Sandbox,
    name: &str,
    cgroup_root: Option<&Path>,
) -> (String, serde_json::Value, Vec<(u64, String)>) {
    let record = sb.path("record.jsonl");
    let job = srun_tasks(
        name,
        &record,
        &["--hold-mb", "300", "--for-s", "40", "--save-s", "0.5"],
    );
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let mut run = sb.run(
        &["--max-rss", "400M", "--grace", "30s", "--max-attempts", "1"],
        &job,
    );
    if let Some(root) = cgroup_root {
        run.env("OOMGUARD_CGROUP_ROOT", root);
    }
    let out = run.output().expect("oomguard runs");
    (stderr_of(&out), sb.summary(), events(&record))
}

#[test]
fn max_rss_around_srun_judges_the_tasks_and_stops_them_gracefully() {
    need_slurm!("max_rss_around_srun_judges_the_tasks_and_stops_them_gracefully");
    let sb = Sandbox::new();
    let (stderr, summary, seen) = max_rss_around_srun(&sb, "og-maxrss", None);
    assert_eq!(causes(&summary), ["memory_limit"], "{stderr}");
    assert!(stderr.contains("over --max-rss 400.0 MiB"), "{stderr}");
    // The peak is the tasks' (600 MiB together), not srun's.
    let peak = summary["attempts"][0]["peak_rss_bytes"]
        .as_u64()
        .expect("the attempt has a peak RSS");
    assert!(peak > 500 << 20, "peak {peak} is srun's: {stderr}");
    assert_eq!(count(&seen, "saved"), 2, "{seen:?}\n{stderr}");
    assert_eq!(count(&seen, "done"), 0, "{seen:?}\n{stderr}");
}

#[test]
fn max_rss_around_srun_asks_sstat_where_the_step_cgroup_cannot_be_read() {
    need_slurm!("max_rss_around_srun_asks_sstat_where_the_step_cgroup_cannot_be_read");
    let sb = Sandbox::new();
    // An empty cgroup root: no attempt cgroup and no step cgroup to read, as for tasks on
    // another node; Slurm's accounting (sstat) is all that sees them.
    let no_cgroups = sb.path("no-cgroups");
    std::fs::create_dir(&no_cgroups).unwrap();
    let (stderr, summary, seen) = max_rss_around_srun(&sb, "og-sstat", Some(&no_cgroups));
    assert_eq!(causes(&summary), ["memory_limit"], "{stderr}");
    assert_eq!(count(&seen, "saved"), 2, "{seen:?}\n{stderr}");
    assert_eq!(count(&seen, "done"), 0, "{seen:?}\n{stderr}");
}

/// `scancel` of Slurm job `id` (the batch job whose oomguard writes into `sb`), then waits for
/// the job to leave the queue and for oomguard's summary.json: `log` is shown where either
/// does not come.
pub fn scancel_and_wait_for_the_summary(sb: &Sandbox, id: &str, log: &dyn Fn() -> String) {
    assert!(Command::new("scancel")
        .arg(id)
        .status()
        .expect("scancel")
        .success());
    let gone = || {
        let out = Command::new("squeue").args(["-h", "-j", id]).output();
        out.is_ok_and(|o| o.stdout.is_empty())
    };
    assert!(
        wait_until(Duration::from_secs(60), gone),
        "job {id} still queued"
    );
    assert!(
        wait_until(Duration::from_secs(10), || sb
            .run_dir()
            .join("summary.json")
            .exists()),
        "no summary: {}",
        log()
    );
}

#[test]
fn scancel_mid_run_ends_the_run_as_interrupted_without_a_relaunch() {
    need_slurm!("scancel_mid_run_ends_the_run_as_interrupted_without_a_relaunch");
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let output = sb.path("slurm.out");
    // As README runs it: oomguard in the batch script, around srun. scancel signals the batch
    // step (oomguard) and the tasks, which SIGTERM kills.
    let tasks = srun_tasks("og-scancel", &record, &["--no-trap"]).join(" ");
    let script = sb.path("job.sbatch");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks=2\nexec {bin} run --run-dir {run} --grace 10s -- {tasks}\n",
            bin = bin().display(),
            run = sb.run_dir().display(),
        ),
    )
    .unwrap();
    let out = Command::new("sbatch")
        .args(["--parsable", "-J", "og-scancel-batch", "-o"])
        .arg(&output)
        .arg(&script)
        .env("XDG_STATE_HOME", sb.path("state"))
        .output()
        .expect("sbatch runs");
    assert!(out.status.success(), "{}", stderr_of(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let log = || std::fs::read_to_string(&output).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(30), || count(&events(&record), "up")
            == 2),
        "the tasks never came up: {}",
        log()
    );
    scancel_and_wait_for_the_summary(&sb, &id, &log);
    assert_eq!(causes(&sb.summary()), ["interrupted"], "{}", log());
    assert_eq!(count(&events(&record), "up"), 2, "no relaunch: {}", log());
}

#[test]
fn slurm_mem_kill_is_read_as_oom_killed_and_relaunched_smaller() {
    need_slurm!("slurm_mem_kill_is_read_as_oom_killed_and_relaunched_smaller");
    let sb = Sandbox::new();
    // 32 x 10 MiB under the step's --mem=200M: Slurm's cgroup kills it; 16 x 10 MiB fits.
    let alloc = fixture("alloc.py");
    let job = [
        "srun",
        "-N",
        "1",
        "-n",
        "1",
        "--mem=200M",
        "-J",
        "og-mem",
        "python3",
        &alloc,
        "--batch_size",
        "32",
    ];
    let out = sb
        .run(&["--max-attempts", "3"], &job)
        .output()
        .expect("oomguard runs");
    let stderr = stderr_of(&out);
    assert!(stderr.contains("oom-kill event"), "{stderr}");
    assert_eq!(causes(&sb.summary()), ["oom_killed", "ok"], "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// README's sbatch example (examples/slurm/train.sbatch) on this node: oomguard in the batch
/// script around `srun --label --kill-on-bad-exit=1`, two tasks of tests/fixtures/cluster_task.py
/// that run out of CUDA memory above batch 4. Returns each attempt's (rank → batch) and causes.
fn sbatch_example(sb: &Sandbox, oom_rank: &str) -> (Vec<Vec<u64>>, Vec<String>, String) {
    let record = sb.path("record.jsonl");
    let script = sb.path("train.sbatch");
    let output = sb.path("slurm.out");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks=2\n#SBATCH --job-name=og-sbatch\nset -euo pipefail\n\
             exec {bin} run --run-dir {run} --backoff 0s --hang-timeout 5s --grace 10s \
             --log-format json -- srun --label --kill-on-bad-exit=1 python3 {task} \
             --batch_size 8 --fits 4 --oom cuda --oom-rank {oom_rank} --record {record}\n",
            bin = bin().display(),
            run = sb.run_dir().display(),
            task = fixture("cluster_task.py"),
            record = record.display(),
        ),
    )
    .unwrap();
    let status = Command::new("sbatch")
        .arg("--wait")
        .arg("-o")
        .arg(&output)
        .arg(&script)
        .env("XDG_STATE_HOME", sb.path("state"))
        .stdout(Stdio::null())
        .status()
        .expect("sbatch runs");
    let log = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(status.success(), "sbatch --wait: {status}\n{log}");
    let mut attempts: std::collections::BTreeMap<String, std::collections::BTreeMap<u64, u64>> =
        Default::default();
    for line in std::fs::read_to_string(&record).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        attempts
            .entry(v["attempt"].as_str().unwrap().to_string())
            .or_default()
            .insert(
                v["rank"].as_u64().unwrap(),
                flag_value(&v["argv"], "--batch_size"),
            );
    }
    let batches = attempts
        .values()
        .map(|ranks| ranks.values().copied().collect())
        .collect();
    (batches, causes(&sb.summary()), log)
}

#[test]
fn sbatch_example_converges_when_every_rank_runs_out_of_cuda_memory() {
    need_slurm!("sbatch_example_converges_when_every_rank_runs_out_of_cuda_memory");
    let sb = Sandbox::new();
    let (batches, causes, log) = sbatch_example(&sb, "all");
    // A rank can be killed (--kill-on-bad-exit) before it records attempt 1; attempt 2 has both.
    assert_eq!(batches.len(), 2, "{log}");
    assert!(batches[0].iter().all(|b| *b == 8), "{batches:?}\n{log}");
    assert_eq!(batches[1], [4, 4], "{log}");
    assert_eq!(causes, ["device_oom", "ok"], "{log}");
}

#[test]
fn sbatch_example_converges_when_one_rank_runs_out_of_cuda_memory() {
    need_slurm!("sbatch_example_converges_when_one_rank_runs_out_of_cuda_memory");
    let sb = Sandbox::new();
    let (batches, causes, log) = sbatch_example(&sb, "1");
    assert_eq!(batches.len(), 2, "{log}");
    assert!(batches[0].iter().all(|b| *b == 8), "{batches:?}\n{log}");
    assert_eq!(batches[1], [4, 4], "{log}");
    assert_eq!(causes, ["device_oom", "ok"], "{log}");
    // The cause is rank 1's: srun's `1: ` label names it.
    assert!(log.contains("1: torch.OutOfMemoryError"), "{log}");
}
