//! `oomguard status`, continuing after a killed oomguard, and notification hooks, end to end:
//! the real binary runs tests/fixtures/situation_job.py (out of memory above a batch set by
//! JOB_FITS; an attempt that fits holds on a FIFO when JOB_HOLD names one), and `oomguard
//! status --json` is read while the run is in each state.

use crate::util;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use util::{
    alive, fixture, guard_of, kill, release_fifo, start_holding, stderr_of, wait_until, Project,
    Running,
};

const NAME: &str = "nightly";
const ARGS: [&str; 4] = ["--batch_size", "8", "--grad_accum", "1"];
const LONG: Duration = Duration::from_secs(60);

/// `oomguard run --run-dir <sandbox>/<run> --name nightly --strategy halve --backoff <backoff>
/// <extra> -- python3 situation_job.py RECORD --batch_size 8 --grad_accum 1` in the project,
/// the job fitting where `fits` holds and holding on `hold` when given.
fn job(
    p: &Project,
    run: &str,
    backoff: &str,
    extra: &[&str],
    fits: &str,
    hold: Option<&Path>,
) -> Command {
    job_args(p, run, backoff, extra, fits, hold, &ARGS)
}

/// [`job`] with the job's own arguments `args` in place of [`ARGS`].
fn job_args(
    p: &Project,
    run: &str,
    backoff: &str,
    extra: &[&str],
    fits: &str,
    hold: Option<&Path>,
    args: &[&str],
) -> Command {
    let script = fixture("situation_job.py");
    let record = p.record();
    let run_dir = p.sb.path(run);
    let mut all = vec![
        "run",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--name",
        NAME,
        "--strategy",
        "halve",
        "--backoff",
        backoff,
        "--backoff-max",
        "10m",
    ];
    all.extend_from_slice(extra);
    all.extend_from_slice(&["--", "python3", &script, record.to_str().unwrap()]);
    all.extend_from_slice(args);
    let mut cmd = p.sb.oomguard(&all);
    cmd.current_dir(&p.dir)
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env("JOB_FITS", fits);
    if let Some(hold) = hold {
        cmd.env("JOB_HOLD", hold);
    }
    cmd
}

/// Lets the attempt holding on `hold` go on, if one still reads it (after a kill, none may).
fn release_if_read(hold: &Path) {
    // Non-blocking: with no reader left (a killed job), there is nobody to tell.
    if let Ok(mut fifo) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(hold)
    {
        let _ = fifo.write_all(b"go\n");
    }
}

/// `oomguard status --json` in the sandbox: every job.
fn status(p: &Project) -> Vec<Value> {
    let out = p.sb.oomguard(&["status", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    serde_json::from_slice::<Value>(&out.stdout)
        .expect("status --json prints JSON")
        .as_array()
        .expect("a list of jobs")
        .clone()
}

/// The job's entry in `oomguard status --json`.
fn nightly(p: &Project) -> Value {
    let all = status(p);
    let found: Vec<&Value> = all.iter().filter(|j| j["name"] == NAME).collect();
    assert_eq!(found.len(), 1, "{all:?}");
    found[0].clone()
}

/// The table `oomguard status` prints.
fn table(p: &Project) -> String {
    let out = p.sb.oomguard(&["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// SIGKILL to oomguard and its guard, as when systemd or the OOM killer takes them.
fn kill_oomguard(child: Running, hold: &Path) -> String {
    let guard = guard_of(child.pid());
    kill(guard, Signal::SIGKILL);
    assert!(wait_until(LONG, || !alive(guard)));
    kill(child.pid(), Signal::SIGKILL);
    release_if_read(hold);
    let out = child.finish(LONG);
    assert_eq!(out.status.code(), None, "killed");
    stderr_of(&out)
}

/// Every attempt's `--batch_size` and `--grad_accum`, from the commands in summary.json.
fn sizes(p: &Project, run: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(p.sb.path(run).join("summary.json")).unwrap();
    util::sizes(&serde_json::from_str(&text).unwrap())
}

/// The batch size every attempt of every run saw, in order.
fn batches_seen(p: &Project) -> Vec<u64> {
    p.seen()
        .iter()
        .map(|s| s["batch_size"].as_u64().unwrap())
        .collect()
}

fn is_time(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|t| t.len() >= 20 && t.ends_with('Z'))
}

#[test]
fn status_follows_a_run_from_running_to_succeeded() {
    let p = Project::new();
    let hold = p.sb.path("hold");
    let cmd = job(&p, "run-1", "0s", &[], "s['batch_size'] <= 2", Some(&hold));
    let child = start_holding(&p.sb, cmd, &hold);
    // Attempt 3 (batch 2) runs, after two out-of-memory deaths.
    let running = nightly(&p);
    assert_eq!(running["state"], "running", "{running}");
    assert_eq!(running["pid"], child.pid(), "{running}");
    assert_eq!(running["attempt"], 3, "{running}");
    assert_eq!(running["knobs"], json!({"batch": 2, "accum": 4}));
    assert_eq!(running["last_cause"], "device_oom");
    assert!(running["peaks"].is_object(), "{running}");
    assert_eq!(running["run_dir"], p.sb.path("run-1").to_str().unwrap());
    assert!(is_time(&running["started_at"]), "{running}");
    assert_eq!(running["ended_at"], Value::Null);
    let lines = table(&p);
    let row = lines
        .lines()
        .find(|l| l.starts_with(NAME))
        .unwrap_or_else(|| panic!("{lines}"));
    for cell in ["running", "batch=2", "accum=4", "device_oom"] {
        assert!(row.contains(cell), "{cell}: {lines}");
    }
    assert!(lines.starts_with("NAME"), "{lines}");

    release_fifo(&hold);
    let out = child.finish(LONG);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let done = nightly(&p);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 3);
    assert_eq!(done["knobs"], json!({"batch": 2, "accum": 4}));
    assert_eq!(done["last_cause"], "ok");
    assert!(is_time(&done["ended_at"]), "{done}");
    assert_eq!(done["started_at"], running["started_at"]);
}

#[test]
fn status_shows_a_run_waiting_between_attempts_then_interrupted() {
    let p = Project::new();
    let mut child = job(&p, "run-1", "10m", &[], "s['batch_size'] <= 2", None)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Value::Null;
    assert!(
        wait_until(LONG, || {
            seen = nightly_if_any(&p);
            seen["state"] == "waiting"
        }),
        "never waiting: {seen}"
    );
    // Attempt 1 died; attempt 2's values are decided and wait out the backoff.
    assert_eq!(seen["pid"], child.id());
    assert_eq!(seen["attempt"], 2, "{seen}");
    assert_eq!(seen["knobs"], json!({"batch": 4, "accum": 2}));
    assert_eq!(seen["last_cause"], "device_oom");
    assert_eq!(seen["ended_at"], Value::Null);
    assert_eq!(batches_seen(&p), [8], "attempt 2 has not started");

    kill(child.id(), Signal::SIGTERM);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let ended = nightly(&p);
    assert_eq!(ended["state"], "interrupted", "{ended}");
    assert!(is_time(&ended["ended_at"]), "{ended}");
}

/// The job's entry, or null while the job has none yet.
fn nightly_if_any(p: &Project) -> Value {
    status(p)
        .into_iter()
        .find(|j| j["name"] == NAME)
        .unwrap_or(Value::Null)
}

#[test]
fn status_calls_a_run_whose_oomguard_was_killed_dead() {
    let p = Project::new();
    let hold = p.sb.path("hold");
    let cmd = job(&p, "run-1", "0s", &[], "True", Some(&hold));
    let child = start_holding(&p.sb, cmd, &hold);
    let pid = child.pid();
    assert_eq!(nightly(&p)["state"], "running");
    kill_oomguard(child, &hold);
    let dead = nightly(&p);
    // The file still says running: status looked, and found its oomguard gone.
    assert_eq!(dead["state"], "dead", "{dead}");
    assert_eq!(dead["pid"], pid);
    assert_eq!(dead["attempt"], 1);
    assert_eq!(dead["ended_at"], Value::Null);
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(p.sb.path("state/oomguard/jobs/nightly.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file["run"]["state"], "running", "{file}");
    assert!(table(&p).contains("dead"));
}

#[test]
fn a_restarted_job_continues_with_the_values_of_the_attempt_its_killed_oomguard_was_in() {
    let p = Project::new();
    // Run A succeeds at batch 2: what worked last time is (2, 4).
    let a = job(&p, "run-a", "0s", &[], "s['batch_size'] <= 2", None)
        .output()
        .unwrap();
    assert_eq!(a.status.code(), Some(0), "{}", stderr_of(&a));
    assert_eq!(sizes(&p, "run-a"), [(8, 1), (4, 2), (2, 4)]);
    // Now batch 4 fits. Run B (--fresh) steps 8 → 4 and is killed in attempt 2.
    let fits = "s['batch_size'] <= 4";
    let hold_b = p.sb.path("hold-b");
    let b = start_holding(
        &p.sb,
        job(&p, "run-b", "0s", &["--fresh"], fits, Some(&hold_b)),
        &hold_b,
    );
    let running = nightly(&p);
    assert_eq!(
        (&running["attempt"], &running["knobs"]),
        (&json!(2), &json!({"batch": 4, "accum": 2}))
    );
    kill_oomguard(b, &hold_b);
    assert_eq!(nightly(&p)["state"], "dead");

    // Run C with --fresh ignores the dead run: it starts over from the command's 8.
    let hold_c = p.sb.path("hold-c");
    let c = start_holding(
        &p.sb,
        job(&p, "run-c", "0s", &["--fresh"], fits, Some(&hold_c)),
        &hold_c,
    );
    let stderr = kill_oomguard(c, &hold_c);
    assert!(!stderr.contains("continuing"), "{stderr}");
    assert_eq!(batches_seen(&p), [8, 4, 2, 8, 4, 8, 4]);

    // Run D continues attempt 2 of run C: (4, 2), not the command's (8, 1) nor what worked
    // last time (2, 4), and says so once.
    let hold_d = p.sb.path("hold-d");
    let d = start_holding(
        &p.sb,
        job(&p, "run-d", "0s", &[], fits, Some(&hold_d)),
        &hold_d,
    );
    release_fifo(&hold_d);
    let out = d.finish(LONG);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(sizes(&p, "run-d"), [(4, 2)]);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("continuing"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let run_c = p.sb.path("run-c");
    assert!(
        lines[0].contains(&format!(
            ", {}) died during attempt 2: continuing with that attempt's values: batch 4, accum 2; --fresh to start from the command's values",
            run_c.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("what worked last time"), "{stderr}");
    let done = nightly(&p);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["run_dir"], p.sb.path("run-d").to_str().unwrap());
}

/// A run killed in attempt 2 (at batch 4, accum 2, stepped down from the command's 8, 1).
fn killed_in_attempt_2(p: &Project) {
    let hold = p.sb.path("hold-a");
    let a = start_holding(
        &p.sb,
        job(p, "run-a", "0s", &[], "s['batch_size'] <= 4", Some(&hold)),
        &hold,
    );
    assert_eq!(nightly(p)["knobs"], json!({"batch": 4, "accum": 2}));
    kill_oomguard(a, &hold);
}

#[test]
fn a_dead_run_is_continued_never_above_the_commands_values() {
    let p = Project::new();
    killed_in_attempt_2(&p);
    // The command now asks for batch 2: the dead attempt's 4 is above it, the command wins.
    let out = job_args(
        &p,
        "run-b",
        "0s",
        &[],
        "True",
        None,
        &["--batch_size", "2", "--grad_accum", "4"],
    )
    .output()
    .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(sizes(&p, "run-b"), [(2, 4)], "{stderr}");
}

#[test]
fn a_dead_run_of_another_command_is_not_continued() {
    let p = Project::new();
    killed_in_attempt_2(&p);
    // Same --name, a command with one more flag: not the dead run's job, it starts over.
    let mut args = ARGS.to_vec();
    args.extend(["--other_model", "big"]);
    let out = job_args(&p, "run-b", "0s", &[], "s['batch_size'] <= 4", None, &args)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(sizes(&p, "run-b"), [(8, 1), (4, 2)], "{stderr}");
    assert!(
        stderr.contains("died during attempt 2 with another command: not continuing it")
            && !stderr.contains("continuing with"),
        "{stderr}"
    );
}

/// The variables a hook wrote, from `<dir>/<event>-<attempt>.json`.
fn hook_saw(dir: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("hook {name} did not run: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// How long a hook that should end may take: only a far upper bound, so that a slow start of
/// Python on a busy machine is never taken for a hanging hook.
const HOOK_LIMIT: &str = "5m";

/// `run-1` of the job with the hook flags `hooks`, which fits at batch 2 after two relaunches
/// (8, 4, 2) and must succeed whatever its hooks do: oomguard's stderr.
fn run_with_hooks(p: &Project, hooks: &[&str]) -> String {
    let out = job(p, "run-1", "0s", hooks, "s['batch_size'] <= 2", None)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(sizes(p, "run-1"), [(8, 1), (4, 2), (2, 4)], "{stderr}");
    stderr
}

#[test]
fn hooks_get_their_environment_and_a_failing_one_does_not_stop_the_run() {
    let p = Project::new();
    let seen_dir = p.sb.path("hooks seen");
    std::fs::create_dir(&seen_dir).unwrap();
    let hook = format!(
        "python3 {} '{}'",
        fixture("status_hook.py"),
        seen_dir.display()
    );
    let relaunch_hook = format!("{hook} 'two words' plain");
    let stderr = run_with_hooks(
        &p,
        &[
            "--hook-timeout",
            HOOK_LIMIT,
            "--on-relaunch",
            &relaunch_hook,
            "--on-exit",
            "false",
            "--on-exit",
            &hook,
        ],
    );
    let run_dir = p.sb.path("run-1");
    let summary = run_dir.join("summary.json");

    // (file, event, outcome, attempt, cause, knobs)
    let table = [
        (
            "relaunch-1.json",
            "relaunch",
            "",
            "1",
            "device_oom",
            json!({"batch": 4, "accum": 2}),
        ),
        (
            "relaunch-2.json",
            "relaunch",
            "",
            "2",
            "device_oom",
            json!({"batch": 2, "accum": 4}),
        ),
        (
            "exit-3.json",
            "exit",
            "succeeded",
            "3",
            "ok",
            json!({"batch": 2, "accum": 4}),
        ),
    ];
    for (file, event, outcome, attempt, cause, knobs) in table {
        let saw = hook_saw(&seen_dir, file);
        assert_eq!(saw["OOMGUARD_EVENT"], event, "{file}: {saw}");
        assert_eq!(saw["OOMGUARD_OUTCOME"], outcome, "{file}: {saw}");
        assert_eq!(saw["OOMGUARD_ATTEMPT"], attempt, "{file}: {saw}");
        assert_eq!(saw["OOMGUARD_CAUSE"], cause, "{file}: {saw}");
        let got: Value = serde_json::from_str(saw["OOMGUARD_KNOBS"].as_str().unwrap()).unwrap();
        assert_eq!(got, knobs, "{file}: {saw}");
        assert_eq!(saw["OOMGUARD_RUN_DIR"], run_dir.to_str().unwrap());
        assert_eq!(saw["OOMGUARD_SUMMARY"], summary.to_str().unwrap());
        // Split as a shell would, quotes honoured, and run without one.
        let argv = if event == "relaunch" {
            json!(["two words", "plain"])
        } else {
            json!([])
        };
        assert_eq!(saw["argv"], argv, "{file}");
    }
    // The exit hook runs once summary.json has the run's end.
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(written["outcome"], "succeeded");
    let log = std::fs::read_to_string(run_dir.join("hooks.log")).unwrap();
    assert!(log.contains("hook exit-3.json done"), "{log}");

    // The failing hook costs a warning, and no hook was taken for a hanging one.
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("--on-exit `false` failed (exit 1)"))
        .collect();
    assert_eq!(failed.len(), 1, "{stderr}");
    assert!(!stderr.contains("did not finish within"), "{stderr}");
}

#[test]
fn a_hanging_hook_is_killed_at_its_limit_and_does_not_stop_the_run() {
    let p = Project::new();
    // A hook that never ends, whatever it got done before its limit: killed at --hook-timeout
    // however slowly it started (if it got as far as saying its PID, that PID is checked too).
    let pid_file = p.sb.path("hanging.pid");
    let hanging = format!("sh -c 'echo $$ > {}; exec sleep 1000'", pid_file.display());
    let stderr = run_with_hooks(&p, &["--hook-timeout", "1s", "--on-relaunch", &hanging]);

    // Each relaunch's hook cost a warning, and nothing of it is left.
    let killed = stderr
        .lines()
        .filter(|l| l.contains("did not finish within 1.0s: killed") && l.contains("sleep 1000"))
        .count();
    assert_eq!(killed, 2, "{stderr}");
    let left = util::processes_of_run(&p.sb.path("run-1"));
    assert!(
        left.is_empty(),
        "the hanging hook's processes {left:?} are still running"
    );
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|pid| pid.trim().parse().ok())
    {
        assert!(!alive(pid), "the hanging hook {pid} is still running");
    }
}

#[test]
fn a_hook_that_cannot_run_is_refused_before_anything_starts() {
    let p = Project::new();
    for (flag, value, words) in [
        (
            "--on-exit",
            "no-such-notifier-xyz --to me",
            "command not found: no-such-notifier-xyz",
        ),
        ("--on-relaunch", "mail -s 'unclosed", "unclosed quote"),
        ("--on-exit", "", "--on-exit is empty"),
    ] {
        let out = job(&p, "run-1", "0s", &[flag, value], "True", None)
            .output()
            .unwrap();
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(words), "{stderr}");
        assert!(!p.record().exists(), "the job ran");
        assert!(!p.sb.path("run-1").exists());
        assert!(!p.sb.path("state").exists());
    }
}
