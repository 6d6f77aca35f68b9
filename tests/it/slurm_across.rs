//! oomguard across the two nodes of a real Slurm (issue 30), beyond slurm_two_nodes.rs: a rank
//! on the second node that prints a CUDA out-of-memory error and hangs while the first waits
//! (the `hung_after_oom` path: both tasks stopped with SIGTERM first, relaunched smaller on both
//! nodes); the job memory and `oomguard status` of a two-node run (what worked is remembered and
//! the next run starts from it on both nodes; status follows the run while its tasks run on
//! two nodes); and a `scancel` of a job that oomguard runs outside any allocation (srun from a
//! login node makes its own), which reaches no signal to oomguard: the run must end
//! `interrupted`, not `failed`. Against the Slurm 22.05 that tests/slurm/start.sh starts (nodes
//! n1 and n2, two slurmd on this machine); where `SLURM_CONF` is unset, each test prints
//! `SKIPPED <name>: <reason>`; the refusal of `--memory-max` around srun in a shell script
//! needs no Slurm. Every job is named for its test and this process, and cancelled
//! when its test ends however it ends, so a failing test leaves no allocation behind on a
//! cluster other people's tests share.

use crate::slurm_two_nodes::{
    job_and_pids, leftovers, need_two_nodes, nodes_up, records, sbatch, srun_task_on_each_node,
    wait_for_both_nodes,
};
use crate::util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use util::{alive, bin, causes, fixture, flag_value, stderr_of, wait_until, Running, Sandbox};

/// How long a step may take to start, and a run to end: other tests (and other people's) share
/// the two nodes, so a job may first wait in the queue.
const LONG: Duration = Duration::from_secs(180);

/// A Slurm job name of this test process's own, so that cancelling it by name touches nothing
/// of anyone else's.
fn job_name(what: &str) -> String {
    format!("og-x-{what}-{}", std::process::id())
}

/// Cancels the named job when dropped: the end of a test, passed or failed (an srun killed
/// with its test would otherwise leave its allocation held).
struct CancelOnDrop(String);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("scancel").args(["--name", &self.0]).status();
    }
}

/// Whether the job `id` has left the queue.
fn gone(id: &str) -> bool {
    Command::new("squeue")
        .args(["-h", "-j", id])
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.is_empty())
}

/// `body` as an sbatch job of two nodes, one task each (see [`sbatch`]), waited for up to
/// [`LONG`]; returns the job's ID and output.
fn sbatch_to_the_end(sb: &Sandbox, name: &str, body: &str, output: &Path) -> (String, String) {
    let (ok, id) = sbatch(sb, name, body, output, false);
    let log = || std::fs::read_to_string(output).unwrap_or_default();
    assert!(ok, "sbatch failed: {}", log());
    assert!(
        wait_until(LONG, || gone(&id)),
        "job {id} still queued after {LONG:?}: {}",
        log()
    );
    (id, log())
}

/// The JSON events oomguard logged (`--log-format json`) with this `event` name.
fn events(log: &str, event: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

/// One rank's line in cluster_task.py's record: (node, batch, accumulation, event).
type RankLine = (String, u64, u64, String);

/// cluster_task.py's record lines per attempt and rank, in order.
fn by_attempt(record: &Path) -> BTreeMap<String, BTreeMap<u64, Vec<RankLine>>> {
    let mut out: BTreeMap<String, BTreeMap<u64, Vec<RankLine>>> = BTreeMap::new();
    for r in records(record) {
        out.entry(r["attempt"].as_str().expect("OOMGUARD_ATTEMPT").to_string())
            .or_default()
            .entry(r["rank"].as_u64().expect("rank"))
            .or_default()
            .push((
                r["node"].as_str().expect("SLURMD_NODENAME").to_string(),
                flag_value(&r["argv"], "--batch_size"),
                flag_value(&r["argv"], "--gradient_accumulation_steps"),
                r["event"].as_str().unwrap_or("start").to_string(),
            ));
    }
    out
}

fn line(node: &str, batch: u64, accum: u64, event: &str) -> RankLine {
    (node.to_string(), batch, accum, event.to_string())
}

fn pids_in(record: &Path) -> Vec<u32> {
    records(record)
        .iter()
        .filter_map(|r| r["pid"].as_u64())
        .map(|p| p as u32)
        .collect()
}

#[test]
fn a_rank_hung_after_oom_on_the_second_node_is_stopped_by_sigterm_and_relaunched_smaller() {
    need_two_nodes!(
        "a_rank_hung_after_oom_on_the_second_node_is_stopped_by_sigterm_and_relaunched_smaller"
    );
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let output = sb.path("slurm.out");
    let name = job_name("hung");
    let _cancel = CancelOnDrop(name.clone());
    // Rank 1 (on n2) prints a CUDA out-of-memory error above batch 32 and blocks; rank 0 (on
    // n1, beside oomguard) waits in its collective, silent. Neither exits: only the
    // --hang-timeout ends the step.
    let body = format!(
        "exec {bin} run --run-dir {run} --backoff 0s --hang-timeout 3s --grace 20s \
         --max-attempts 3 --log-format json -- srun --label --kill-on-bad-exit=1 python3 {task} \
         --batch_size 64 --gradient_accumulation_steps 1 --fits 32 --oom cuda-hang --oom-rank 1 \
         --trap-term --record {record}",
        bin = bin().display(),
        run = sb.run_dir().display(),
        task = fixture("cluster_task.py"),
        record = record.display(),
    );
    let (id, log) = sbatch_to_the_end(&sb, &name, &body, &output);
    let attempts = by_attempt(&record);
    // Attempt 1: each node's task got SIGTERM (its handler wrote "term": no SIGKILL came
    // first). Attempt 2: both nodes with half the batch and twice the accumulation, 32 × 2 = 64.
    let want = BTreeMap::from([
        (
            "1".to_string(),
            BTreeMap::from([
                (
                    0,
                    vec![line("n1", 64, 1, "start"), line("n1", 64, 1, "term")],
                ),
                (
                    1,
                    vec![line("n2", 64, 1, "start"), line("n2", 64, 1, "term")],
                ),
            ]),
        ),
        (
            "2".to_string(),
            BTreeMap::from([
                (0, vec![line("n1", 32, 2, "start")]),
                (1, vec![line("n2", 32, 2, "start")]),
            ]),
        ),
    ]);
    assert_eq!(attempts, want, "{log}");
    assert_eq!(causes(&sb.summary()), ["hung_after_oom", "ok"], "{log}");
    // attempt_ended is logged for the attempts that failed: the one.
    let ended = events(&log, "attempt_ended");
    assert_eq!(ended.len(), 1, "{log}");
    let evidence = ended[0]["fields"]["evidence"].as_str().unwrap_or_default();
    assert!(
        evidence.contains("no output for 3s after an out-of-memory error")
            && evidence.contains("CUDA out of memory. Tried to allocate 158.00 MiB"),
        "evidence {evidence:?}:\n{log}"
    );
    let run_ended = events(&log, "run_ended");
    assert_eq!(run_ended.len(), 1, "{log}");
    assert_eq!(run_ended[0]["fields"]["exit_code"], 0, "{log}");
    assert_eq!(
        leftovers(&id, &pids_in(&record)),
        Vec::<String>::new(),
        "{log}"
    );
}

/// `oomguard status --json` in the sandbox: its one job.
fn the_job_in_status(sb: &Sandbox) -> Value {
    let out = sb.oomguard(&["status", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let all: Vec<Value> = serde_json::from_slice(&out.stdout).expect("status --json prints JSON");
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].clone()
}

/// The table `oomguard status` prints: its row of job `name`.
fn status_row(sb: &Sandbox, name: &str) -> String {
    let out = sb.oomguard(&["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let table = String::from_utf8(out.stdout).unwrap();
    table
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no row of {name}: {table}"))
        .to_string()
}

/// Each attempt's (batch, accumulation), as summary.json of run directory `run` has them.
fn sizes(sb: &Sandbox, run: &str) -> Vec<(u64, u64)> {
    summary_of(sb, run)["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["batch_size"].as_u64().unwrap(),
                a["accum"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn summary_of(sb: &Sandbox, run: &str) -> Value {
    let text = std::fs::read_to_string(sb.path(run).join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

#[test]
fn job_memory_and_status_follow_a_two_node_run() {
    need_two_nodes!("job_memory_and_status_follow_a_two_node_run");
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let hold = sb.path("hold");
    let name = job_name("memory");
    let _cancel = CancelOnDrop(name.clone());
    // Both runs are one command, as a job resubmitted is: rank 1 (on n2) dies of a CUDA
    // out-of-memory error above batch 32 while rank 0 waits, until --hang-timeout ends the
    // step. (Not --kill-on-bad-exit: on this Slurm, srun then often ends the step before the
    // error line of a task on the other node reaches its output, and the death reads as
    // `failed`.) A rank that fits waits for `hold` to exist.
    let body = |run: &str| {
        format!(
            "exec {bin} run --run-dir {run} --backoff 0s --hang-timeout 3s --grace 10s \
             --max-attempts 3 --log-format json -- srun --label python3 {task} \
             --batch_size 64 --gradient_accumulation_steps 1 --fits 32 --oom cuda --oom-rank 1 \
             --record {record} --hold {hold}",
            bin = bin().display(),
            run = sb.path(run).display(),
            task = fixture("cluster_task.py"),
            record = record.display(),
            hold = hold.display(),
        )
    };
    std::fs::write(&hold, "").unwrap();
    let (_, log) = sbatch_to_the_end(&sb, &name, &body("run-1"), &sb.path("slurm-1.out"));
    assert_eq!(sizes(&sb, "run-1"), [(64, 1), (32, 2)], "{log}");
    assert_eq!(
        causes(&summary_of(&sb, "run-1")),
        ["hung_after_oom", "ok"],
        "{log}"
    );
    let job = summary_of(&sb, "run-1")["job"]
        .as_str()
        .expect("summary.json names the job")
        .to_string();
    // What worked is remembered, and status says how the run ended.
    let file = sb.path("state").join(format!("oomguard/jobs/{job}.json"));
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        file["last_success"]["knobs"],
        json!({"batch": 32, "accum": 2}),
        "{file}"
    );
    let done = the_job_in_status(&sb);
    assert_eq!(done["name"], job.as_str(), "{done}");
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    assert_eq!(done["knobs"], json!({"batch": 32, "accum": 2}), "{done}");
    assert_eq!(done["last_cause"], "ok", "{done}");
    assert_eq!(
        done["run_dir"],
        sb.path("run-1").to_str().unwrap(),
        "{done}"
    );

    // Run 2 starts from what worked, on both nodes; status sees it running while its tasks
    // wait on `hold`, one on each node.
    std::fs::remove_file(&hold).unwrap();
    let before = records(&record).len();
    let output = sb.path("slurm-2.out");
    let (ok, id) = sbatch(&sb, &name, &body("run-2"), &output, false);
    let log = || std::fs::read_to_string(&output).unwrap_or_default();
    assert!(ok, "sbatch failed: {}", log());
    let run_2 = || -> Vec<(u64, String, u64, u64)> {
        records(&record)[before..]
            .iter()
            .map(|r| {
                (
                    r["rank"].as_u64().unwrap(),
                    r["node"].as_str().unwrap().to_string(),
                    flag_value(&r["argv"], "--batch_size"),
                    flag_value(&r["argv"], "--gradient_accumulation_steps"),
                )
            })
            .collect()
    };
    assert!(
        wait_until(LONG, || run_2().len() == 2),
        "run 2's tasks never came up on both nodes: {:?}\n{}",
        run_2(),
        log()
    );
    let mut seen = run_2();
    seen.sort();
    assert_eq!(
        seen,
        [(0, "n1".into(), 32, 2), (1, "n2".into(), 32, 2)],
        "{}",
        log()
    );
    let running = the_job_in_status(&sb);
    assert_eq!(running["name"], job.as_str(), "{running}");
    assert_eq!(running["state"], "running", "{running}");
    assert_eq!(running["attempt"], 1, "{running}");
    assert_eq!(
        running["knobs"],
        json!({"batch": 32, "accum": 2}),
        "{running}"
    );
    assert_eq!(
        running["run_dir"],
        sb.path("run-2").to_str().unwrap(),
        "{running}"
    );
    assert_eq!(running["ended_at"], Value::Null, "{running}");
    let pid = running["pid"].as_u64().expect("the running oomguard's PID") as u32;
    assert!(alive(pid), "{running}");
    let row = status_row(&sb, &job);
    for cell in ["running", "batch=32", "accum=2"] {
        assert!(row.contains(cell), "{cell}: {row}");
    }
    std::fs::write(&hold, "").unwrap();
    assert!(
        wait_until(LONG, || gone(&id)),
        "job {id} still queued: {}",
        log()
    );
    let log = log();
    let s2 = summary_of(&sb, "run-2");
    assert_eq!(s2["job"], job.as_str(), "{log}");
    assert_eq!(
        s2["started_from"],
        json!({"batch": 32, "accum": 2}),
        "{log}"
    );
    assert_eq!(
        sizes(&sb, "run-2"),
        [(32, 2)],
        "one attempt, at what worked: {log}"
    );
    assert_eq!(causes(&s2), ["ok"], "{log}");
    let done = the_job_in_status(&sb);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 1, "{done}");
    assert_eq!(done["started_at"], running["started_at"], "{done}");
    assert!(!alive(pid), "oomguard of run 2 still runs");
}

/// oomguard outside any allocation around `srun -N 2` (srun makes its own job), the tasks
/// (tests/fixtures/slurm_task.py with `task_args`) up on both nodes, then `scancel` of that
/// job from elsewhere, as a user in another shell would: no signal reaches oomguard, only
/// srun's output and exit. The run must end `interrupted` with exit status 143, after one
/// attempt, with nothing left on either node.
fn scancel_outside_an_allocation(what: &str, task_args: &[&str]) {
    let sb = Sandbox::new();
    let record = sb.path("record.jsonl");
    let name = job_name(what);
    let _cancel = CancelOnDrop(name.clone());
    let job = srun_task_on_each_node(&name, &record, task_args);
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let mut running = Running::start(&sb, sb.run(&["--grace", "30s"], &job));
    assert!(
        wait_until(LONG, || nodes_up(&record).len() == 2 || running.ended()),
        "the tasks never came up on both nodes: {:?}\n{}",
        records(&record),
        running.stderr()
    );
    assert!(!running.ended(), "{}", running.stderr());
    let (id, pids) = job_and_pids(&record);
    assert!(Command::new("scancel")
        .arg(&id)
        .status()
        .expect("scancel")
        .success());
    let out = running.finish(LONG);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    let summary = sb.summary();
    assert_eq!(summary["outcome"], "interrupted", "{stderr}");
    assert_eq!(causes(&summary), ["interrupted"], "no relaunch: {stderr}");
    let evidence = summary["attempts"][0]["evidence"]
        .as_str()
        .unwrap_or_default();
    // slurmstepd's banner where it reached srun's output (tasks that die at once often take it
    // with them), else srun's own word that slurmctld ended the step.
    assert!(
        evidence.contains("cancelled through Slurm")
            && (evidence.contains(&format!("*** STEP {id}.0 ON "))
                || evidence.contains("srun: Job step aborted")),
        "evidence {evidence:?}:\n{stderr}"
    );
    let ups = records(&record)
        .iter()
        .filter(|r| r["event"] == "up")
        .count();
    assert_eq!(ups, 2, "one task per node, once: {stderr}");
    assert_eq!(leftovers(&id, &pids), Vec::<String>::new(), "{stderr}");
}

/// The tasks die of scancel's SIGTERM: srun exits 143.
#[test]
fn scancel_outside_an_allocation_ends_the_run_interrupted_when_the_tasks_die_of_it() {
    need_two_nodes!(
        "scancel_outside_an_allocation_ends_the_run_interrupted_when_the_tasks_die_of_it"
    );
    scancel_outside_an_allocation("scancel-die", &["--no-trap"]);
}

/// The tasks save and exit 0 on scancel's SIGTERM: srun exits 0, and the run still did not
/// finish, as under sbatch, where the same scancel reaches oomguard as SIGTERM.
#[test]
fn scancel_outside_an_allocation_ends_the_run_interrupted_when_the_tasks_save_and_exit_0() {
    need_two_nodes!(
        "scancel_outside_an_allocation_ends_the_run_interrupted_when_the_tasks_save_and_exit_0"
    );
    scancel_outside_an_allocation("scancel-save", &["--save-s", "1"]);
}

/// `--memory-max` around srun that a shell's `-c` script runs is refused as around srun itself:
/// the attempt cgroup would hold the shell and srun, the tasks being in Slurm's cgroups on
/// their nodes. One line, exit 2, nothing started (the script would have written `started`).
/// No Slurm needed: the command's words decide.
#[test]
fn memory_max_around_srun_in_a_shell_script_is_refused_before_anything_starts() {
    let sb = Sandbox::new();
    let started = sb.path("started");
    for script in [
        format!("touch {} && srun -N 2 python3 t.py", started.display()),
        format!(
            "touch {}; cd /tmp && OMP_NUM_THREADS=1 exec /usr/bin/srun python3 t.py",
            started.display()
        ),
    ] {
        let out = sb
            .run(&["--memory-max", "1G"], &["bash", "-c", &script])
            .output()
            .expect("oomguard runs");
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{script}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{script}: {stderr}");
        assert!(
            stderr.contains("--memory-max around srun would cap srun alone"),
            "{script}: {stderr}"
        );
        assert!(!started.exists(), "{script}: the script ran");
    }
    // srun only as a word of the job's own: not refused for it (it runs where a memory cgroup
    // can be made; elsewhere --memory-max is refused for that, as for any job).
    let out = sb
        .run(
            &["--memory-max", "1G", "--max-attempts", "1"],
            &["bash", "-c", &format!("touch {} # srun", started.display())],
        )
        .output()
        .expect("oomguard runs");
    let stderr = stderr_of(&out);
    assert!(!stderr.contains("around srun"), "{stderr}");
    assert!(
        started.exists() || stderr.contains("--memory-max needs a memory cgroup"),
        "{stderr}"
    );
}
