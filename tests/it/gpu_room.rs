//! A shared card (issue 25): another process's memory is not the job's batch. Each test drives
//! the fake card (`OOMGUARD_FAKE_GPU`) with real processes: the job (tests/fixtures/
//! shared_gpu_job.py, 20 GiB fixed + 0.5 GiB per sample, PyTorch's real message when it does not
//! fit) and a neighbour standing for another user's job (tests/fixtures/gpu_neighbour.py), each
//! announcing its own memory in a piece the fake driver forgets when the process dies. Batch 64
//! needs 52 GiB of an 80 GiB card: alone it fits, beside a 40 GiB neighbour it does not.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::{self, causes, fixture, sizes, stderr_of, Running, Sandbox};

const LONG: Duration = Duration::from_secs(60);

/// A sandbox with its own fake card(s): 80 GiB each, 0.5 GiB the driver's, UUIDs of its own (so
/// that claims of tests running beside it, on their own fake cards, are not this one's).
struct Card {
    sb: Sandbox,
    file: PathBuf,
    uuids: Vec<String>,
}

/// A neighbour process, killed when dropped.
struct Neighbour(Child);

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Neighbour {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Card {
    fn new(cards: u32) -> Card {
        let sb = Sandbox::new();
        let file = sb.path("gpu.json");
        let tag = sb
            .dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let uuids: Vec<String> = (0..cards).map(|i| format!("GPU-{tag}-{i}")).collect();
        let devices: Vec<serde_json::Value> = uuids
            .iter()
            .enumerate()
            .map(|(i, uuid)| {
                serde_json::json!({"index": i, "name": "Fake H100", "uuid": uuid,
                    "used_bytes": 1u64 << 29, "total_bytes": 80u64 << 30})
            })
            .collect();
        let snapshot = serde_json::json!({"devices": devices, "processes": []});
        std::fs::write(&file, snapshot.to_string()).unwrap();
        Card { sb, file, uuids }
    }

    /// A neighbour holding `gib` on card 0 (or as `extra` says), once it holds it.
    fn neighbour(&self, gib: &str, extra: &[&str]) -> Neighbour {
        let ready = self
            .sb
            .path(&format!("neighbour-{gib}-{}.ready", extra.len()));
        let child = Command::new("python3")
            .arg(fixture("gpu_neighbour.py"))
            .args(["--gpu-file", self.file.to_str().unwrap(), "--gib", gib])
            .args(["--ready-file", ready.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("the neighbour starts");
        let neighbour = Neighbour(child);
        assert!(
            util::wait_until(LONG, || ready.exists()),
            "the neighbour never held its memory"
        );
        neighbour
    }

    /// `oomguard run` of job `sgjob` into run directory `run_dir`, sampling every 100 ms, on
    /// this card, the job at `batch` × 1 with `job_extra`.
    fn run(&self, run_dir: &str, extra: &[&str], batch: &str, job_extra: &[&str]) -> Command {
        let run_dir = self.sb.path(run_dir);
        let record = self.sb.path("record.jsonl");
        let job = fixture("shared_gpu_job.py");
        let mut args = vec![
            "run",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--backoff",
            "0s",
            "--interval",
            "100ms",
            "--name",
            "sgjob",
            "--accum-arg",
            "--grad_accum",
        ];
        args.extend_from_slice(extra);
        args.extend([
            "--",
            "python3",
            &job,
            "--gpu-file",
            self.file.to_str().unwrap(),
            "--record",
            record.to_str().unwrap(),
            "--batch_size",
            batch,
            "--grad_accum",
            "1",
        ]);
        args.extend_from_slice(job_extra);
        let mut cmd = self.sb.oomguard(&args);
        cmd.env("OOMGUARD_FAKE_GPU", &self.file);
        cmd
    }

    fn summary(&self, run_dir: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.sb.path(run_dir).join("summary.json"))
            .expect("summary.json written");
        serde_json::from_str(&text).unwrap()
    }

    /// The job's memory, `$XDG_STATE_HOME/oomguard/jobs/sgjob.json`.
    fn job_memory(&self) -> serde_json::Value {
        let path = self.sb.path("state/oomguard/jobs/sgjob.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("job memory")).unwrap()
    }

    /// The job's runs as its --record saw them.
    fn records(&self) -> Vec<serde_json::Value> {
        util::records(&self.sb.path("record.jsonl"))
    }
}

/// Reads oomguard's stderr until a line holding `needle`; returns the lines read.
fn wait_for(run: &Running, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let line = run.stderr_line(LONG);
        let found = line.contains(needle);
        seen.push(line);
        if found {
            return seen;
        }
    }
}

fn touch(path: &std::path::Path) {
    std::fs::write(path, "").unwrap();
}

#[test]
fn a_neighbour_that_leaves_within_the_wait_is_named_and_the_batch_is_never_cut() {
    let card = Card::new(1);
    let leave = card.sb.path("leave");
    let neighbour = card.neighbour("40", &["--until-file", leave.to_str().unwrap()]);
    let mut run = Running::start(
        &card.sb,
        card.run("run", &["--gpu-wait", "120s"], "64", &[]),
    );
    wait_for(&run, "waiting up to");
    // The neighbour leaves only once oomguard waits for it.
    touch(&leave);
    let status = run.wait(LONG);
    let stderr = run.stderr();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let summary = card.summary("run");
    assert_eq!(causes(&summary), ["gpu_taken", "ok"], "{stderr}");
    assert_eq!(sizes(&summary), [(64, 1), (64, 1)], "never cut: {stderr}");
    let evidence = summary["attempts"][0]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains(&format!("GPU 0 taken by PID {} (", neighbour.pid()))
            // The command, cut at 80 characters.
            && evidence.contains("tests/fixtures/gpu_neighbou")
            && evidence
                .contains("others held 40.0 GiB at the death, 40.0 GiB at the attempt's start"),
        "{evidence}"
    );
    assert_eq!(stderr.matches("waiting up to").count(), 1, "{stderr}");
    assert!(stderr.contains("GPU 0 has room again"), "{stderr}");
    // Listed before the job started: a neighbour, not a sign of a PID namespace.
    assert!(!stderr.contains("PID namespace"), "{stderr}");
    // The card's record: the neighbour on samples.csv, and in summary.json's peaks.
    assert_eq!(
        summary["attempts"][0]["peak_gpu_neighbours_bytes"].as_u64(),
        Some(40 << 30)
    );
    let samples = std::fs::read_to_string(card.sb.path("run").join("samples.csv")).unwrap();
    assert!(
        samples.contains(&format!("{}:", neighbour.pid())),
        "samples.csv names the neighbour"
    );
    let memory = card.job_memory();
    assert_eq!(memory["last_success"]["knobs"]["batch"], 64);
    assert!(memory["last_success"].get("room_cut").is_none(), "{memory}");
}

/// A neighbour that stays: the batch is fitted into the room left, and that cut is remembered
/// apart from the job's own size: the next run starts room-limited while the card is still
/// short, and once the neighbour has left, the run after grows back to the job's own size.
#[test]
fn a_cut_for_room_is_remembered_apart_and_the_job_grows_back_once_the_card_is_free() {
    let card = Card::new(1);
    let neighbour = card.neighbour("40", &[]);

    let out = card
        .run("cut", &["--gpu-wait", "0"], "64", &[])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let summary = card.summary("cut");
    assert_eq!(causes(&summary), ["gpu_taken", "ok"], "{stderr}");
    let (batch, accum) = sizes(&summary)[1];
    assert!(
        batch < 64 && batch * accum == 64,
        "{batch} × {accum}: {stderr}"
    );
    assert!(
        stderr.contains("cut for room, not for the job's size"),
        "{stderr}"
    );
    assert_eq!(summary["attempts"][1]["room_cut"]["own"]["batch"], 64);
    let memory = card.job_memory();
    assert_eq!(memory["last_success"]["knobs"]["batch"], batch);
    assert_eq!(memory["last_success"]["room_cut"]["own"]["batch"], 64);

    // The card is still short: the next run starts from the room-limited size, and says so.
    let out = card
        .run("short", &["--gpu-wait", "0"], "64", &[])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("starting from the job's own size (the command's values)")
            && stderr.contains("the size the last run was cut to for room"),
        "{stderr}"
    );
    let summary = card.summary("short");
    assert_eq!(causes(&summary), ["ok"], "{stderr}");
    assert_eq!(sizes(&summary), [(batch, accum)], "{stderr}");
    assert_eq!(
        card.job_memory()["last_success"]["room_cut"]["own"]["batch"],
        64
    );

    // The neighbour leaves: the next run grows back to the job's own size.
    drop(neighbour);
    let out = card.run("free", &[], "64", &[]).output().unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("GPU 0 has room for the job's own size again"),
        "{stderr}"
    );
    let summary = card.summary("free");
    assert_eq!(sizes(&summary), [(64, 1)], "{stderr}");
    let memory = card.job_memory();
    assert_eq!(memory["last_success"]["knobs"]["batch"], 64);
    assert!(memory["last_success"].get("room_cut").is_none(), "{memory}");
}

#[test]
fn a_neighbour_that_grows_during_the_attempt_is_named_with_both_sizes() {
    let card = Card::new(1);
    let (grow, grown) = (card.sb.path("grow"), card.sb.path("grown"));
    let (fixed, step) = (card.sb.path("fixed"), card.sb.path("step"));
    let _neighbour = card.neighbour(
        "5",
        &[
            "--grow-to-gib",
            "40",
            "--grow-when",
            grow.to_str().unwrap(),
            "--grown-file",
            grown.to_str().unwrap(),
        ],
    );
    let job = [
        "--fixed-file",
        fixed.to_str().unwrap(),
        "--step-when",
        step.to_str().unwrap(),
    ];
    let mut run = Running::start(&card.sb, card.run("run", &["--gpu-wait", "0"], "64", &job));
    // The job holds its fixed part beside a 5 GiB neighbour; then the neighbour grows to 40 GiB
    // before the job's first step asks for the rest.
    assert!(
        util::wait_until(LONG, || fixed.exists()),
        "{}",
        run.stderr()
    );
    touch(&grow);
    assert!(util::wait_until(LONG, || grown.exists()));
    touch(&step);
    let status = run.wait(LONG);
    let stderr = run.stderr();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let summary = card.summary("run");
    assert_eq!(causes(&summary), ["gpu_taken", "ok"], "{stderr}");
    let evidence = summary["attempts"][0]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("others held 40.0 GiB at the death, 5.0 GiB at the attempt's start"),
        "{evidence}"
    );
}

#[test]
fn a_job_too_big_alone_is_cut_as_before_and_never_waits() {
    let card = Card::new(1);
    // 20 GiB + 1.5 GiB × 64 = 116 GiB: more than the card, neighbour or not.
    let out = card
        .run("run", &[], "64", &["--per-sample-gib", "1.5"])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let summary = card.summary("run");
    let all = causes(&summary);
    assert_eq!(all[0], "device_oom", "{stderr}");
    assert!(!all.contains(&"gpu_taken".to_string()), "{stderr}");
    assert!(!stderr.contains("waiting up to"), "{stderr}");
    let last = *sizes(&summary).last().unwrap();
    assert!(last.0 < 64 && last.0 * last.1 == 64, "{last:?}");
    assert!(card.job_memory()["last_success"].get("room_cut").is_none());
}

/// Two oomguards wait on one card for room for one job only: when the neighbour leaves, one
/// claims the room and launches; the other counts that claim as taken and launches only once
/// the first job is done with the card.
#[test]
fn two_oomguards_waiting_on_one_card_do_not_both_launch_into_the_same_room() {
    let card = Card::new(1);
    let leave = card.sb.path("leave");
    let _neighbour = card.neighbour("40", &["--until-file", leave.to_str().unwrap()]);
    let start = |name: &str| {
        let run_dir = card.sb.path(name);
        let record = card.sb.path(&format!("{name}.jsonl"));
        let mut cmd = card.sb.oomguard(&[
            "run",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--backoff",
            "0s",
            "--interval",
            "100ms",
            "--name",
            name,
            "--gpu-wait",
            "300s",
            "--accum-arg",
            "--grad_accum",
            "--",
            "python3",
            &fixture("shared_gpu_job.py"),
            "--gpu-file",
            card.file.to_str().unwrap(),
            "--record",
            record.to_str().unwrap(),
            "--run-s",
            "1.5",
            "--batch_size",
            "64",
            "--grad_accum",
            "1",
        ]);
        cmd.env("OOMGUARD_FAKE_GPU", &card.file);
        Running::start(&card.sb, cmd)
    };
    // One after the other into the wait: b's attempt 1 then dies beside the neighbour alone
    // (its need, 52 GiB, in its message), as a's did.
    let mut a = start("a");
    wait_for(&a, "waiting up to");
    let mut b = start("b");
    wait_for(&b, "waiting up to");
    touch(&leave);
    for (name, run) in [("a", &mut a), ("b", &mut b)] {
        let status = run.wait(Duration::from_secs(120));
        assert_eq!(status.code(), Some(0), "{}", run.stderr());
        // Neither launched into room the other had claimed: no death after the wait.
        assert_eq!(
            causes(&card.summary(name)),
            ["gpu_taken", "ok"],
            "{name}: {}",
            run.stderr()
        );
    }
    let ok_run = |name: &str| {
        util::records(&card.sb.path(&format!("{name}.jsonl")))
            .into_iter()
            .find(|r| r["ok"] == true)
            .unwrap_or_else(|| panic!("{name} never succeeded"))
    };
    let (ra, rb) = (ok_run("a"), ok_run("b"));
    for r in [&ra, &rb] {
        assert_eq!(
            (r["batch"].as_u64(), r["accum"].as_u64()),
            (Some(64), Some(1)),
            "{r}"
        );
    }
    let span = |r: &serde_json::Value| (r["start"].as_f64().unwrap(), r["end"].as_f64().unwrap());
    let ((a0, a1), (b0, b1)) = (span(&ra), span(&rb));
    assert!(
        b0 >= a1 || a0 >= b1,
        "both ran at once: a {a0}..{a1}, b {b0}..{b1}\na: {}\nb: {}",
        a.stderr(),
        b.stderr()
    );
}

#[test]
fn gpus_1_gives_the_job_the_card_with_the_most_free_memory_by_uuid() {
    let card = Card::new(2);
    let _neighbour = card.neighbour("60", &[]);
    let out = card
        .run("run", &["--gpus", "1"], "8", &[])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--gpus 1: giving the job GPU 1 (79.5 GiB free of 80.0 GiB) (CUDA_VISIBLE_DEVICES={})",
            card.uuids[1]
        )),
        "{stderr}"
    );
    let records = card.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["cuda_visible_devices"], card.uuids[1].as_str());
    assert_eq!(records[0]["device"], 1);
}
