//! Passthrough throughput: how fast the job's output reaches oomguard's stdout, against the same
//! job writing straight into the same kind of pipe, and against `job | tee log` (the by-hand way
//! to keep a log). Prints MiB/s for each and the ratios.
//!
//! `cargo bench --bench passthrough` measures 2 GiB, best of 3. Under `cargo test` (no `--bench`
//! argument) it runs once on 16 MiB as a smoke check that the harness works.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (mib, rounds) = if full { (2048u64, 3) } else { (16, 1) };
    let bytes = mib << 20;
    let job = ["head", "-c", &bytes.to_string(), "/dev/zero"].map(String::from);
    let run_dir = tempfile::tempdir().expect("temp dir");

    let direct = best_of(rounds, || {
        time_stdout(Command::new(&job[0]).args(&job[1..]), bytes)
    });
    // What a user does by hand to keep a log: `job | tee train.log`.
    let tee_line = format!(
        "{} | tee {}",
        job.join(" "),
        run_dir.path().join("tee.log").display()
    );
    let tee = best_of(rounds, || {
        time_stdout(Command::new("sh").args(["-c", &tee_line]), bytes)
    });
    let supervised = best_of(rounds, || {
        let dir = run_dir.path().join(format!("run-{}", nanos()));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oomguard"));
        // Job memory and patch state in the temporary directory, not the user's.
        cmd.args(["-q", "run", "--run-dir", dir.to_str().unwrap(), "--"])
            .args(&job)
            .env("XDG_STATE_HOME", run_dir.path());
        let took = time_stdout(&mut cmd, bytes);
        // Keep the disk from filling up over the rounds.
        let _ = std::fs::remove_dir_all(&dir);
        took
    });
    let rate = |d: Duration| mib as f64 / d.as_secs_f64();
    println!("passthrough of {mib} MiB (best of {rounds}):");
    println!("  direct      {:>9.1} MiB/s", rate(direct));
    println!(
        "  job | tee   {:>9.1} MiB/s  (writing a log file)",
        rate(tee)
    );
    println!(
        "  oomguard    {:>9.1} MiB/s  (writing attempt-1.log)",
        rate(supervised)
    );
    println!(
        "  oomguard / direct: {:.2}x the time",
        supervised.as_secs_f64() / direct.as_secs_f64()
    );
    println!(
        "  oomguard / tee:    {:.2}x the time",
        supervised.as_secs_f64() / tee.as_secs_f64()
    );
}

/// Runs `cmd` with stdout into a pipe that this process drains; returns the wall time.
fn time_stdout(cmd: &mut Command, expect_bytes: u64) -> Duration {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().expect("piped");
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = out.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    assert!(child.wait().expect("wait").success());
    assert_eq!(total, expect_bytes, "bytes lost in passthrough");
    start.elapsed()
}

fn best_of(rounds: u32, mut f: impl FnMut() -> Duration) -> Duration {
    (0..rounds).map(|_| f()).min().expect("at least one round")
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
