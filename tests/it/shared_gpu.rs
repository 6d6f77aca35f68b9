//! A shared GPU (issue 25) end to end: the real binary over real child processes on the fake
//! NVML file (`OOMGUARD_FAKE_GPU`, src/observe/gpu/fake.rs). Another user's process on the card is
//! tests/fixtures/gpu_neighbour.py, which holds its memory through its piece while it lives; the
//! job is tests/fixtures/shared_gpu_job.py, which needs 20 GiB + 0.5 GiB per sample of an 80 GiB
//! card (batch 64: 52 GiB, which fits alone but not beside a neighbour's 40 GiB) and dies with
//! PyTorch's real message, naming the other processes, where it does not fit.
//!
//! Each test's card has UUIDs of its own: claims on a card's room (src/decide/room/claims.rs) name it by
//! UUID and may live in a place every oomguard on the machine shares (`/run/oomguard-claims`),
//! so tests running side by side must not see each other's claims as taken room.
//!
//! Nothing here sleeps to synchronise: the neighbour leaves when the test creates its
//! `--until-file`, and the test waits for oomguard's stderr lines, for files the processes
//! write, or for samples.csv's rows (flushed per tick), each with a deadline.

use crate::util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use util::{causes, fixture, output_within, records, sizes, stderr_of, Running, Sandbox};

const GIB: u64 = 1 << 30;

/// How long anything that should come within a second or two may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// A fake card file with `cards` 80 GiB cards (the driver holding 0.5 GiB of each), their
/// UUIDs this test's own.
struct Card {
    path: PathBuf,
    uuids: Vec<String>,
}

impl Card {
    fn new(sb: &Sandbox, cards: u32) -> Card {
        let path = sb.path("gpu.json");
        // The sandbox's directory name is unique on this machine while the test runs.
        let tag: String = sb
            .dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let uuids: Vec<String> = (0..cards).map(|i| format!("GPU-{tag}-{i}")).collect();
        let card = Card { path, uuids };
        card.write(&[]);
        card
    }

    /// Rewrites the base file, listing `processes` (pid, device, bytes) as the driver would
    /// (the base file's processes are not checked against /proc).
    fn write(&self, processes: &[(u32, u32, u64)]) {
        let devices: Vec<Value> = self
            .uuids
            .iter()
            .enumerate()
            .map(|(i, uuid)| {
                json!({"index": i, "name": "Fake H100", "uuid": uuid,
                       "used_bytes": GIB / 2, "total_bytes": 80 * GIB})
            })
            .collect();
        let processes: Vec<Value> = processes
            .iter()
            .map(|&(pid, device, bytes)| json!({"pid": pid, "device": device, "used_bytes": bytes}))
            .collect();
        let text = json!({"devices": devices, "processes": processes}).to_string();
        write_whole(&self.path, &text);
    }

    fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

/// Writes `text` to `path` whole: a temporary name the fake probe skips, then a rename.
fn write_whole(path: &Path, text: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Another user's process on the card (tests/fixtures/gpu_neighbour.py), holding its memory
/// until its `--until-file` exists; killed when dropped, whatever the test's end.
struct Neighbour {
    child: Child,
    pid: u32,
    until: PathBuf,
    /// Its stdout, kept open so that its last line does not meet a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Neighbour {
    /// Starts it holding `gib` GiB on `device` and returns once its piece is written (its
    /// first line says so, with its PID).
    fn start(sb: &Sandbox, card: &Card, device: u32, gib: f64, name: &str) -> Neighbour {
        Neighbour::start_with(sb, card, device, gib, name, &[])
    }

    /// [`Neighbour::start`] with further fixture arguments.
    fn start_with(
        sb: &Sandbox,
        card: &Card,
        device: u32,
        gib: f64,
        name: &str,
        extra: &[&str],
    ) -> Neighbour {
        let until = sb.path(&format!("{name}.leave"));
        let mut child = Command::new("python3")
            .arg(fixture("gpu_neighbour.py"))
            .args(["--gpu-file", card.arg()])
            .args(["--device", &device.to_string(), "--gib", &gib.to_string()])
            .args(["--until-file", until.to_str().unwrap()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the neighbour starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        // `neighbour 4242: holding 40.00 GiB on GPU 0`, printed once its piece is written.
        let pid = first
            .strip_prefix("neighbour ")
            .and_then(|rest| rest.split(':').next())
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("the neighbour did not say it holds its memory: {first:?}"));
        Neighbour {
            child,
            pid,
            until,
            _stdout: stdout,
        }
    }

    /// Lets it go and waits until it has, its piece removed.
    fn leave(mut self) {
        std::fs::write(&self.until, "").unwrap();
        assert!(
            util::wait_until(PATIENCE, || self.child.try_wait().unwrap().is_some()),
            "the neighbour did not leave"
        );
    }

    /// Its command line as /proc shows it, arguments joined by spaces.
    fn command(&self) -> String {
        util::cmdline(self.pid)
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The job at `batch` × 1 on `card`, recording its attempts in `record`; `extra` are further
/// fixture arguments.
fn job(card: &Card, batch: u32, record: &Path, extra: &[&str]) -> Vec<String> {
    let mut job: Vec<String> = vec![
        "python3".into(),
        fixture("shared_gpu_job.py"),
        "--gpu-file".into(),
        card.arg().into(),
        "--batch_size".into(),
        batch.to_string(),
        "--grad_accum".into(),
        "1".into(),
        "--run-s".into(),
        "0.3".into(),
        "--record".into(),
        record.to_str().unwrap().into(),
    ];
    job.extend(extra.iter().map(|s| s.to_string()));
    job
}

/// `oomguard run` of the job `name` over `card`, into `run_dir`, its memory in `state`:
/// `--interval 100ms --backoff 0s --accum-arg --grad_accum <extra> -- <job>`. The test's own
/// CUDA_VISIBLE_DEVICES, if any, is not the job's.
fn oomguard(
    sb: &Sandbox,
    card: &Card,
    run_dir: &Path,
    state: &Path,
    name: &str,
    extra: &[&str],
    job: &[String],
) -> Command {
    let mut args: Vec<&str> = vec![
        "run",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--name",
        name,
        "--backoff",
        "0s",
        "--interval",
        "100ms",
        "--accum-arg",
        "--grad_accum",
    ];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend(job.iter().map(String::as_str));
    let mut cmd = sb.oomguard(&args);
    cmd.env("OOMGUARD_FAKE_GPU", &card.path)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("CUDA_DEVICE_ORDER");
    cmd
}

/// Reads oomguard's stderr lines as they come until one holds `needle`; returns it.
fn until_line(run: &Running, needle: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = run.stderr_line(left.max(Duration::from_millis(1)));
        if line.contains(needle) {
            return line;
        }
    }
}

fn summary_at(run_dir: &Path) -> Value {
    let text = std::fs::read_to_string(run_dir.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

/// The job's memory, `<state>/jobs/<name>.json`.
fn job_memory(state: &Path, name: &str) -> Value {
    let path = state.join("jobs").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no job memory {}: {e}", path.display()));
    serde_json::from_str(&text).expect("the job's memory is JSON")
}

/// A run that must have succeeded: its stderr, and its summary.json.
fn succeeded(out: &Output, run_dir: &Path) -> (String, Value) {
    let stderr = stderr_of(out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    (stderr, summary_at(run_dir))
}

/// The oomguard lines saying how attempt `n` is launched (`attempt N in …`).
fn relaunch_line(stderr: &str, n: u32) -> String {
    let head = format!("oomguard: attempt {n} in ");
    stderr
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no line {head:?} in\n{stderr}"))
        .to_string()
}

/// samples.csv's rows: (attempt, the job's GPU bytes, the neighbours' GPU bytes).
fn sample_rows(run_dir: &Path) -> Vec<(u64, Option<u64>, Option<u64>)> {
    let text = std::fs::read_to_string(run_dir.join("samples.csv")).unwrap_or_default();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(attempt), Some(job), Some(neighbours)) = (
        col("attempt"),
        col("gpu_used_bytes"),
        col("gpu_neighbours_bytes"),
    ) else {
        return Vec::new();
    };
    lines
        // Only whole rows (the file may be read while a row is written); the numbers come
        // before the last cell, which is text.
        .filter(|l| l.split(',').count() > neighbours)
        .filter_map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            let num = |i: usize| cells[i].parse::<f64>().ok().map(|v| v as u64);
            Some((num(attempt)?, num(job), num(neighbours)))
        })
        .collect()
}

/// The user the tests run as, as oomguard names a neighbour's owner.
fn user_name() -> String {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name)
}

/// A user's Ctrl-C ends the wait for room at once (not at `--gpu-wait`): the run stops as
/// interrupted, nothing is relaunched, and the neighbour is left alone.
#[test]
fn ctrl_c_ends_the_wait_for_room_at_once() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    let record = sb.path("record.jsonl");
    let neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    let cmd = oomguard(
        &sb,
        &card,
        &sb.run_dir(),
        &sb.path("state"),
        "sgjob",
        &["--gpu-wait", "1h"],
        &job(&card, 64, &record, &[]),
    );
    let run = Running::start(&sb, cmd);
    until_line(&run, "waiting up to");
    run.signal(nix::sys::signal::Signal::SIGINT);
    // Far below the hour it would otherwise wait.
    let out = run.finish(PATIENCE);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(128 + 2), "{stderr}");
    assert_eq!(
        records(&record).len(),
        1,
        "relaunched after Ctrl-C: {stderr}"
    );
    assert!(util::alive(neighbour.pid), "the neighbour was signalled");
}

#[test]
fn a_neighbour_that_leaves_within_the_wait_is_waited_for_and_the_batch_stays() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    let state = sb.path("state");
    let record = sb.path("record.jsonl");
    let neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    let neighbour_pid = neighbour.pid;
    let neighbour_command = neighbour.command();
    let cmd = oomguard(
        &sb,
        &card,
        &sb.run_dir(),
        &state,
        "sgjob",
        &["--gpu-wait", "120s"],
        &job(&card, 64, &record, &[]),
    );
    let run = Running::start(&sb, cmd);
    until_line(&run, "waiting up to");
    // Only once oomguard waits does the neighbour leave.
    neighbour.leave();
    let out = run.finish(PATIENCE * 2);
    let (stderr, summary) = succeeded(&out, &sb.run_dir());

    assert_eq!(causes(&summary), ["gpu_taken", "ok"], "{stderr}");
    assert_eq!(sizes(&summary), [(64, 1), (64, 1)], "never cut: {stderr}");
    let evidence = summary["attempts"][0]["evidence"].as_str().unwrap();
    // The neighbour's PID, user and command, its program and script by their names.
    assert!(
        neighbour_command.contains("/gpu_neighbour.py"),
        "{neighbour_command}"
    );
    let program = neighbour_command.split(' ').next().unwrap();
    let program = program.rsplit('/').next().unwrap();
    let named = format!(
        "PID {neighbour_pid} ({}: {program} gpu_neighbour.py --gpu-file",
        user_name()
    );
    assert!(evidence.contains(&named), "{named:?} not in {evidence}");
    assert!(
        evidence.contains("others held 40.0 GiB at the death"),
        "{evidence}"
    );
    assert_eq!(stderr.matches("waiting up to").count(), 1, "{stderr}");
    let relaunch = relaunch_line(&stderr, 2);
    assert!(
        relaunch.contains("has room again") && relaunch.contains("the batch stays"),
        "{relaunch}"
    );
    assert!(!stderr.contains("cut for room"), "{stderr}");
    for attempt in summary["attempts"].as_array().unwrap() {
        assert!(attempt["room_cut"].is_null(), "{attempt}");
    }
    // The wait is on samples.csv: rows of attempt 2 with no job on the card yet and the
    // neighbour's 40 GiB.
    assert!(
        sample_rows(&sb.run_dir())
            .iter()
            .any(|&(a, job, others)| a == 2 && job.is_none() && others == Some(40 * GIB)),
        "{:?}",
        sample_rows(&sb.run_dir())
    );
    let ok: Vec<Value> = records(&record)
        .into_iter()
        .filter(|r| r["ok"] == true)
        .collect();
    assert_eq!(ok.len(), 1);
    assert_eq!(
        (ok[0]["batch"].as_u64(), ok[0]["accum"].as_u64()),
        (Some(64), Some(1))
    );

    let memory = job_memory(&state, "sgjob");
    let last = &memory["last_success"];
    assert_eq!(last["knobs"]["batch"], 64, "{memory:#}");
    assert_eq!(last["knobs"]["accum"], 1, "{memory:#}");
    assert!(last["room_cut"].is_null(), "{memory:#}");
}

#[test]
fn a_neighbour_that_stays_gets_a_cut_for_room_kept_apart_and_the_job_grows_back() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    let state = sb.path("state");
    let record = sb.path("record.jsonl");
    let job = job(&card, 64, &record, &[]);
    let run = |n: u32, wait: &str| {
        let run_dir = sb.path(&format!("run{n}"));
        let mut cmd = oomguard(
            &sb,
            &card,
            &run_dir,
            &state,
            "sgjob",
            &["--gpu-wait", wait],
            &job,
        );
        let out = output_within(&mut cmd, PATIENCE * 2);
        succeeded(&out, &run_dir)
    };
    let own = json!({"batch": 64, "accum": 1});

    // 1. The neighbour stays past --gpu-wait: the batch is cut for room, the effective batch
    //    kept, and the cut is recorded apart from the job's own size.
    let neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    let (stderr, summary) = run(1, "1s");
    assert_eq!(causes(&summary), ["gpu_taken", "ok"], "{stderr}");
    let relaunch = relaunch_line(&stderr, 2);
    assert!(relaunch.contains("cut for room"), "{relaunch}");
    let sizes1 = sizes(&summary);
    let (batch, accum) = sizes1[1];
    assert!(batch < 64 && batch * accum == 64, "{sizes1:?}\n{stderr}");
    let attempts = summary["attempts"].as_array().unwrap();
    assert!(attempts[0]["room_cut"].is_null(), "{}", attempts[0]);
    assert_eq!(attempts[1]["room_cut"]["own"], own, "{}", attempts[1]);
    assert_eq!(
        attempts[1]["room_cut"]["own_need_gpu_bytes"].as_u64(),
        Some(52 * GIB),
        "{}",
        attempts[1]
    );
    let memory = job_memory(&state, "sgjob");
    assert_eq!(memory["last_success"]["room_cut"]["own"], own, "{memory:#}");
    assert_eq!(
        memory["last_success"]["knobs"],
        json!({"batch": batch, "accum": accum}),
        "{memory:#}"
    );

    // A run that starts from the room-limited size, says so, and keeps the cut apart.
    let started_room_limited = |stderr: &str, summary: &serde_json::Value| {
        assert!(
            stderr.contains("the size an earlier run was cut to for room"),
            "{stderr}"
        );
        assert_eq!(causes(summary), ["ok"], "{stderr}");
        assert_eq!(sizes(summary), [(batch, accum)], "{stderr}");
        assert_eq!(
            summary["attempts"][0]["room_cut"]["own"], own,
            "{summary:#}"
        );
    };

    // 2. The neighbour is still there (no wait): the run starts from the room-limited size,
    //    and says so; the cut is still kept apart.
    let (stderr, summary) = run(2, "0");
    started_room_limited(&stderr, &summary);
    assert_eq!(
        job_memory(&state, "sgjob")["last_success"]["room_cut"]["own"],
        own
    );

    // 3. The card is empty: the job grows back to its own size.
    neighbour.leave();
    let (stderr, summary) = run(3, "0");
    assert!(
        stderr.contains("starting from the job's own size"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("the size an earlier run was cut to for room"),
        "{stderr}"
    );
    assert_eq!(causes(&summary), ["ok"], "{stderr}");
    assert_eq!(sizes(&summary), [(64, 1)], "{stderr}");
    assert!(summary["attempts"][0]["room_cut"].is_null(), "{summary:#}");
    let memory = job_memory(&state, "sgjob");
    assert_eq!(memory["last_success"]["knobs"], own, "{memory:#}");
    assert!(memory["last_success"]["room_cut"].is_null(), "{memory:#}");
    // The room-limited size is kept beside the job's own, for a card short again.
    assert_eq!(
        memory["last_success"]["room_limited"]["knobs"],
        json!({"batch": batch, "accum": accum}),
        "{memory:#}"
    );

    // 4. The neighbour is back (no wait): the job's memory says it needs 52 GiB at its own
    //    size and 39.5 GiB are free, so attempt 1 starts from the room-limited size rather
    //    than launching into a certain out-of-memory error.
    let _back = Neighbour::start(&sb, &card, 0, 40.0, "back");
    let (stderr, summary) = run(4, "0");
    started_room_limited(&stderr, &summary);
}

#[test]
fn a_neighbour_that_grows_during_the_attempt_is_named_with_both_sizes() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    let record = sb.path("record.jsonl");
    let (held, grow, grown) = (
        sb.path("job.fixed"),
        sb.path("neighbour.grow"),
        sb.path("neighbour.grown"),
    );
    // 5 GiB at the attempt's start; 40 GiB once told, after the job holds its fixed part.
    let neighbour = Neighbour::start_with(
        &sb,
        &card,
        0,
        5.0,
        "neighbour",
        &[
            "--grow-to-gib",
            "40",
            "--grow-when",
            grow.to_str().unwrap(),
            "--grown-file",
            grown.to_str().unwrap(),
        ],
    );
    // The job asks for the rest of its need only once the neighbour has grown.
    let paused = job(
        &card,
        64,
        &record,
        &[
            "--fixed-file",
            held.to_str().unwrap(),
            "--step-when",
            grown.to_str().unwrap(),
        ],
    );
    let cmd = oomguard(
        &sb,
        &card,
        &sb.run_dir(),
        &sb.path("state"),
        "sgjob",
        &["--gpu-wait", "0"],
        &paused,
    );
    let run = Running::start(&sb, cmd);
    assert!(
        util::wait_until(PATIENCE, || held.exists()),
        "the job never held its fixed part: {}",
        run.stderr()
    );
    // oomguard has seen the job's fixed part on the card beside the neighbour's 5 GiB.
    assert!(
        util::wait_until(PATIENCE, || sample_rows(&sb.run_dir()).iter().any(
            |&(a, job, others)| a == 1 && job == Some(20 * GIB) && others == Some(5 * GIB)
        )),
        "no sample of the job's fixed part beside 5 GiB: {:?}\n{}",
        sample_rows(&sb.run_dir()),
        run.stderr()
    );
    std::fs::write(&grow, "").unwrap();
    let out = run.finish(PATIENCE * 2);
    let (stderr, summary) = succeeded(&out, &sb.run_dir());
    assert_eq!(causes(&summary)[0], "gpu_taken", "{stderr}");
    let evidence = summary["attempts"][0]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains(&format!("taken by PID {}", neighbour.pid))
            && evidence
                .contains("others held 40.0 GiB at the death, 5.0 GiB at the attempt's start"),
        "{evidence}"
    );
}

#[test]
fn a_job_alone_that_is_too_big_is_cut_as_before_never_gpu_taken() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    let state = sb.path("state");
    let record = sb.path("record.jsonl");
    // 20 + 1.5 × 64 = 116 GiB: too big for the 80 GiB card with nobody else on it.
    let mut cmd = oomguard(
        &sb,
        &card,
        &sb.run_dir(),
        &state,
        "sgjob",
        &["--gpu-wait", "120s"],
        &job(&card, 64, &record, &["--per-sample-gib", "1.5"]),
    );
    let out = output_within(&mut cmd, PATIENCE * 2);
    let (stderr, summary) = succeeded(&out, &sb.run_dir());
    let all = causes(&summary);
    assert_eq!(all[0], "device_oom", "{stderr}");
    assert_eq!(all.last().unwrap(), "ok", "{stderr}");
    assert!(!all.iter().any(|c| c == "gpu_taken"), "{all:?}\n{stderr}");
    assert!(!stderr.contains("waiting up to"), "{stderr}");
    assert!(!stderr.contains("cut for room"), "{stderr}");
    let sizes = sizes(&summary);
    let (batch, accum) = *sizes.last().unwrap();
    assert!(batch < 64 && batch * accum == 64, "{sizes:?}\n{stderr}");
    for attempt in summary["attempts"].as_array().unwrap() {
        assert!(attempt["room_cut"].is_null(), "{attempt}");
    }
    let memory = job_memory(&state, "sgjob");
    assert!(memory["last_success"]["room_cut"].is_null(), "{memory:#}");
    assert_eq!(
        memory["last_success"]["knobs"]["batch"], batch,
        "{memory:#}"
    );

    // The same job beside a neighbour of 40 GiB: 116 GiB is too big for the card alone, so the
    // neighbour is not the cause (one attempt, to look at that verdict alone).
    let beside = Sandbox::new();
    let card = Card::new(&beside, 1);
    let _neighbour = Neighbour::start(&beside, &card, 0, 40.0, "neighbour");
    let record = beside.path("record.jsonl");
    let mut cmd = oomguard(
        &beside,
        &card,
        &beside.run_dir(),
        &beside.path("state"),
        "sgjob",
        &["--gpu-wait", "120s", "--max-attempts", "1"],
        &job(&card, 64, &record, &["--per-sample-gib", "1.5"]),
    );
    let out = output_within(&mut cmd, PATIENCE * 2);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    let summary = summary_at(&beside.run_dir());
    assert_eq!(causes(&summary), ["device_oom"], "{stderr}");
    assert!(!stderr.contains("waiting up to"), "{stderr}");
}

/// A job too big even alone (20 + 1.5 × 64 = 116 GiB of an 80 GiB card) beside a neighbour of
/// 40 GiB: its death at 64 is its own (`device_oom`), and the cut for its own size is the one it
/// gets alone (32 × 2: 68 GiB), not one into the room the neighbour leaves (16 × 4). Whatever is
/// then cut for the neighbour is cut for room, so once the neighbour has left, the next run
/// grows back to 32 × 2 (issue 25, deliverable 4: no run stays smaller because of a neighbour
/// that left).
#[test]
fn a_job_too_big_alone_beside_a_neighbour_grows_back_to_its_own_size_once_it_left() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    let state = sb.path("state");
    let record = sb.path("record.jsonl");
    let job = job(&card, 64, &record, &["--per-sample-gib", "1.5"]);
    let run = |n: u32| {
        let run_dir = sb.path(&format!("run{n}"));
        let mut cmd = oomguard(
            &sb,
            &card,
            &run_dir,
            &state,
            "sgjob",
            &["--gpu-wait", "0"],
            &job,
        );
        let out = output_within(&mut cmd, PATIENCE * 2);
        succeeded(&out, &run_dir)
    };
    let neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    let (stderr1, summary) = run(1);
    assert_eq!(causes(&summary)[0], "device_oom", "{stderr1}");
    neighbour.leave();
    // The card is empty now.
    let (stderr2, summary) = run(2);
    assert_eq!(causes(&summary).last().unwrap(), "ok", "{stderr2}");
    assert_eq!(
        *sizes(&summary).last().unwrap(),
        (32, 2),
        "the job alone fits at 32 × 2, but this run stayed where the neighbour's room put it\n\
         run 1:\n{stderr1}\nrun 2:\n{stderr2}"
    );
}

#[test]
fn two_oomguards_waiting_on_one_card_do_not_both_launch_into_the_room() {
    let sb = Sandbox::new();
    let other = Sandbox::new();
    let card = Card::new(&sb, 1);
    // One state directory for both: without the machine's shared place, claims reach the
    // oomguards of one state directory.
    let state = sb.path("state");
    let (record_a, record_b) = (sb.path("a.jsonl"), sb.path("b.jsonl"));
    let neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    let start = |sandbox: &Sandbox, name: &str, record: &Path| {
        let cmd = oomguard(
            sandbox,
            &card,
            &sandbox.run_dir(),
            &state,
            name,
            &["--gpu-wait", "300s"],
            &job(&card, 64, record, &["--run-s", "1"]),
        );
        Running::start(sandbox, cmd)
    };
    // One after the other into the wait, so that each dies of the neighbour alone.
    let a = start(&sb, "job-a", &record_a);
    until_line(&a, "waiting up to");
    let b = start(&other, "job-b", &record_b);
    until_line(&b, "waiting up to");
    neighbour.leave();
    let out_a = a.finish(PATIENCE * 3);
    let out_b = b.finish(PATIENCE * 3);
    let (stderr_a, summary_a) = succeeded(&out_a, &sb.run_dir());
    let (stderr_b, summary_b) = succeeded(&out_b, &other.run_dir());
    // Had both launched into the room (79.5 GiB for two jobs of 52), one would have died again.
    assert_eq!(causes(&summary_a), ["gpu_taken", "ok"], "{stderr_a}");
    assert_eq!(causes(&summary_b), ["gpu_taken", "ok"], "{stderr_b}");
    assert_eq!(sizes(&summary_a), [(64, 1), (64, 1)], "{stderr_a}");
    assert_eq!(sizes(&summary_b), [(64, 1), (64, 1)], "{stderr_b}");
    let ok = |record: &Path| {
        let ok: Vec<Value> = records(record)
            .into_iter()
            .filter(|r| r["ok"] == true)
            .collect();
        assert_eq!(ok.len(), 1, "{ok:?}");
        let r = &ok[0];
        assert_eq!(r["batch"], 64, "{r}");
        (r["start"].as_f64().unwrap(), r["end"].as_f64().unwrap())
    };
    let (mut first, mut second) = (ok(&record_a), ok(&record_b));
    if second.0 < first.0 {
        std::mem::swap(&mut first, &mut second);
    }
    // The room was for one: the second started once the first had ended.
    assert!(
        second.0 >= first.1,
        "the second started at {} before the first ended at {}\nA:\n{stderr_a}\nB:\n{stderr_b}",
        second.0,
        first.1
    );
}

/// `oomguard run --gpus 1` of the job at 64 on `card` (with `CUDA_VISIBLE_DEVICES=visible`
/// where given), to its success: its stderr and summary.json.
fn gpus_1(sb: &Sandbox, card: &Card, record: &Path, visible: Option<&str>) -> (String, Value) {
    let mut cmd = oomguard(
        sb,
        card,
        &sb.run_dir(),
        &sb.path("state"),
        "sgjob",
        &["--gpus", "1", "--gpu-wait", "0"],
        &job(card, 64, record, &[]),
    );
    if let Some(visible) = visible {
        cmd.env("CUDA_VISIBLE_DEVICES", visible);
    }
    let out = output_within(&mut cmd, PATIENCE * 2);
    succeeded(&out, &sb.run_dir())
}

#[test]
fn gpus_1_gives_the_job_the_empty_card_by_uuid() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 2);
    let record = sb.path("record.jsonl");
    let _neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    let (stderr, summary) = gpus_1(&sb, &card, &record, None);
    let picked = stderr
        .lines()
        .find(|l| l.contains("--gpus 1: giving the job"))
        .unwrap_or_else(|| panic!("no line naming the card: {stderr}"));
    assert!(
        picked.contains("GPU 1 (")
            && picked.contains(&format!("CUDA_VISIBLE_DEVICES={})", card.uuids[1])),
        "{picked}"
    );
    assert_eq!(causes(&summary), ["ok"], "{stderr}");
    let seen = records(&record);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["cuda_visible_devices"], card.uuids[1].as_str());
    assert_eq!(seen[0]["device"], 1);
}

#[test]
fn gpus_1_picks_only_among_the_cards_cuda_visible_devices_names() {
    let sb = Sandbox::new();
    // Card 0 holds 40 GiB of a neighbour, card 1 10 GiB, card 2 nothing; the user allows 0, 1.
    let card = Card::new(&sb, 3);
    let record = sb.path("record.jsonl");
    let _big = Neighbour::start(&sb, &card, 0, 40.0, "big");
    let _small = Neighbour::start(&sb, &card, 1, 10.0, "small");
    let (stderr, summary) = gpus_1(&sb, &card, &record, Some("0,1"));
    assert!(
        stderr.contains(&format!(
            "--gpus 1: giving the job GPU 1 (69.5 GiB free of 80.0 GiB) (CUDA_VISIBLE_DEVICES={})",
            card.uuids[1]
        )),
        "{stderr}"
    );
    assert_eq!(causes(&summary), ["ok"], "{stderr}");
    let seen = records(&record);
    assert_eq!(seen[0]["cuda_visible_devices"], card.uuids[1].as_str());
    assert_eq!(seen[0]["device"], 1);
}

/// A PID no process can have (above the kernel's highest `pid_max`): listed by the driver but
/// not in this PID namespace's /proc, as a container's own namespace shows the host's PIDs.
const UNSEEN_PID: u32 = 4_194_304 + 7;

/// A job that touches no GPU: it touches `<dir>/job.ready`, then runs until `<dir>/job.stop`
/// exists.
fn idle_job(sb: &Sandbox) -> (Vec<String>, PathBuf, PathBuf) {
    let (ready, stop) = (sb.path("job.ready"), sb.path("job.stop"));
    let script = "import os, sys, time\nopen(sys.argv[1], 'a').close()\nwhile not os.path.exists(sys.argv[2]):\n    time.sleep(0.02)\n";
    let job = vec![
        "python3".to_string(),
        "-c".into(),
        script.into(),
        ready.to_str().unwrap().into(),
        stop.to_str().unwrap().into(),
    ];
    (job, ready, stop)
}

/// Waits until samples.csv holds `rows` rows of attempt 1 (each a reading oomguard weighed).
fn wait_for_samples(sb: &Sandbox, run: &Running, rows: usize) {
    assert!(
        util::wait_until(PATIENCE, || sample_rows(&sb.run_dir())
            .iter()
            .filter(|r| r.0 == 1)
            .count()
            >= rows),
        "fewer than {rows} samples of attempt 1: {}",
        run.stderr()
    );
}

/// oomguard running the idle job on `card`, once the job runs; and the file that stops it.
fn start_idle(sb: &Sandbox, card: &Card) -> (Running, PathBuf) {
    let (job, ready, stop) = idle_job(sb);
    let cmd = oomguard(
        sb,
        card,
        &sb.run_dir(),
        &sb.path("state"),
        "idle",
        &["--gpu-wait", "0"],
        &job,
    );
    let run = Running::start(sb, cmd);
    assert!(
        util::wait_until(PATIENCE, || ready.exists()),
        "{}",
        run.stderr()
    );
    (run, stop)
}

#[test]
fn neighbours_listed_before_the_job_started_are_no_container_warning() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    // Before the job starts: a neighbour /proc shows, and one it does not (another
    // container's process on the shared card).
    let _neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    card.write(&[(UNSEEN_PID, 0, 2 * GIB)]);
    let (run, stop) = start_idle(&sb, &card);
    // Several readings with the job running and not on the card.
    wait_for_samples(&sb, &run, 5);
    std::fs::write(&stop, "").unwrap();
    let out = run.finish(PATIENCE);
    let (stderr, _) = succeeded(&out, &sb.run_dir());
    assert!(!stderr.contains("PID namespace"), "{stderr}");
}

/// The other half, that the warning still comes where the evidence points to a PID namespace:
/// a PID /proc does not show appears on the card while the job runs, and none listed is the
/// job's. The fake base file lists its processes without checking /proc, which is just what a
/// container sees of the host's driver.
#[test]
fn a_process_invisible_here_appearing_with_the_job_is_the_container_warning() {
    let sb = Sandbox::new();
    let card = Card::new(&sb, 1);
    let neighbour = Neighbour::start(&sb, &card, 0, 40.0, "neighbour");
    let (run, stop) = start_idle(&sb, &card);
    // oomguard has read the card as it was at the job's start.
    wait_for_samples(&sb, &run, 1);
    card.write(&[(UNSEEN_PID, 0, 10 * GIB)]);
    let warning = until_line(&run, "PID namespace");
    std::fs::write(&stop, "").unwrap();
    let out = run.finish(PATIENCE);
    let (stderr, _) = succeeded(&out, &sb.run_dir());
    assert!(warning.contains(&format!("[{UNSEEN_PID}]")), "{warning}");
    assert!(!warning.contains(&neighbour.pid.to_string()), "{warning}");
    assert_eq!(stderr.matches("PID namespace").count(), 1, "{stderr}");
}
