//! Files oomguard keeps or hands on for a job (issue 26, findings 9 and 10): a checkpoint cut short
//! by oomguard's own stop of the job's processes is never handed to the next attempt, whether
//! or not its writer held it open at the stop; and a job's output kept on disk is capped per
//! attempt (head and tail, with a marker saying what was cut), while the terminal still gets all
//! of it; run for another user, its log is written as that user, so root's reserved blocks are
//! not spent on it.

use crate::util;

use std::process::Command;

use serde_json::Value;
use util::{fixture, records, stderr_of, Sandbox};

/// `oomguard run` of tests/fixtures/resume_job.py in the sandbox, resuming from `ckpt/*.pt`.
fn resume_run(sb: &Sandbox, flags: &[&str], env: &[(&str, &str)]) -> Command {
    let run_dir = sb.run_dir();
    let record = sb.path("record");
    let script = fixture("resume_job.py");
    let mut args = vec![
        "run",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--resume-arg",
        "--resume",
        "--checkpoint",
        "ckpt/*.pt",
        "--strategy",
        "halve",
    ];
    args.extend_from_slice(flags);
    args.extend([
        "--",
        "python3",
        &script,
        record.to_str().unwrap(),
        "--batch_size",
        "8",
    ]);
    let mut cmd = sb.oomguard(&args);
    cmd.current_dir(sb.dir.path()).envs(env.iter().copied());
    cmd
}

/// Finding 9: a saver in a session of its own (as a background checkpoint process would be)
/// appends 100 bytes every 0.1 s, opening the file afresh for each piece; the job's main process
/// dies of a CUDA out-of-memory error after the saver's second piece. oomguard stops the saver
/// with the job's leftovers, between two pieces (it would write on for minutes): the file is at
/// no instant open, stops changing where the stop cut it, and is the newest match. It must not be handed over; the
/// job's own whole checkpoint (a torch.save zip written just before) is, and the relaunch line
/// says which file was skipped and why.
#[test]
fn a_checkpoint_whose_reopening_writer_the_stop_cut_is_never_resumed_from() {
    let sb = Sandbox::new();
    let out = resume_run(
        &sb,
        &["--backoff", "1s", "--interval", "300ms"],
        &[
            ("RESUME_WRITE", "1"),
            ("RESUME_SAVER", "epoch_1_99.pt"),
            ("RESUME_SAVER_REOPEN", "1"),
        ],
    )
    .output()
    .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let cut = std::fs::metadata(sb.path("ckpt/epoch_1_99.pt"))
        .unwrap()
        .len();
    assert!(
        cut >= 200,
        "the saver had not started ({cut} bytes): {stderr}"
    );
    let runs = records(&sb.path("record"));
    assert_eq!(runs.len(), 2, "{stderr}");
    assert_eq!(runs[1]["resume"], "ckpt/epoch_1.pt", "{stderr}");
    assert_eq!(runs[1]["size"], 4096, "the whole zip: {stderr}");
    assert!(
        stderr.contains(
            "resuming from ckpt/epoch_1.pt (ckpt/epoch_1_99.pt was written within 0.3s of oomguard stopping the job's processes and its format cannot show it complete: not used)"
        ),
        "{stderr}"
    );
    assert_eq!(
        sb.summary()["attempts"][1]["resumed_from"],
        Value::from("ckpt/epoch_1.pt")
    );
}

/// A job printing `count` numbered lines of 16 bytes (`line 0000000042\n`) to stdout.
fn printer(count: u64) -> String {
    format!(
        "import sys\nw = sys.stdout.buffer.write\nfor i in range({count}):\n    w(b'line %010d\\n' % i)\n"
    )
}

/// Finding 10 (the cap): a job writing 16 times `--log-max` keeps on disk the head of its
/// output, the marker line with the exact count of bytes cut, and the tail ending with its last
/// line; its terminal gets every byte, and the run's closing warning names the log once.
#[test]
fn a_log_keeps_head_and_tail_of_output_past_the_cap_and_the_terminal_gets_all() {
    let sb = Sandbox::new();
    let lines: u64 = 65_536; // 1 MiB
    let out = sb
        .run(&["--log-max", "64K"], &["python3", "-c", &printer(lines)])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let want: Vec<u8> = (0..lines)
        .flat_map(|i| format!("line {i:010}\n").into_bytes())
        .collect();
    assert!(
        out.stdout == want,
        "the terminal got {} of {} bytes",
        out.stdout.len(),
        want.len()
    );
    let log = std::fs::read(sb.run_dir().join("attempt-1.log")).unwrap();
    assert!(
        log.len() <= (64 << 10) + 320 + (64 << 10),
        "{} bytes kept",
        log.len()
    );
    let head = 32 << 10;
    assert!(
        log[..head] == want[..head],
        "the head is the output's start"
    );
    let rest = &log[head..];
    let start = rest
        .windows(11)
        .position(|w| w == b"[oomguard: ")
        .expect("a marker after the head");
    let end = start + rest[start..].iter().position(|&b| b == b'\n').unwrap() + 1;
    let marker = String::from_utf8_lossy(&rest[start..end]);
    let marker = marker.trim_end();
    let cut: u64 = marker["[oomguard: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let tail = &rest[end..];
    assert!(tail.starts_with(b"line "), "the tail starts at a line");
    assert!(want.ends_with(tail), "the tail is the output's end");
    assert_eq!(
        head as u64 + cut + tail.len() as u64,
        want.len() as u64,
        "the marker counts what is missing: {marker}"
    );
    assert!(
        marker.contains("of the job's output cut here; --log-max 64.0 KiB keeps"),
        "{marker}"
    );
    assert_eq!(
        stderr
            .matches("attempt-1.log kept only the first and last part of the job's output")
            .count(),
        1,
        "{stderr}"
    );
}

/// A small ext4 filesystem (64 MiB, 10% reserved for root), mounted at `dir` while this lives.
struct SmallDisk {
    dir: std::path::PathBuf,
    _image: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` (with why) where it cannot be made: no mkfs.ext4, no loop device.
    fn mount(dir: &std::path::Path) -> Result<SmallDisk, String> {
        let image_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = image_dir.path().join("disk.img");
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("{cmd:?}: {}", stderr_of(&out).trim()))
            }
        };
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(|e| e.to_string())?;
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "10"])
            .arg(&image))?;
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(dir))?;
        Ok(SmallDisk {
            dir: dir.to_path_buf(),
            _image: image_dir,
        })
    }

    /// (free bytes, of which only root may use: `statvfs` f_bfree and f_bavail).
    fn free(&self) -> (u64, u64) {
        let st = nix::sys::statvfs::statvfs(&self.dir).unwrap();
        let block = st.fragment_size() as u64;
        (
            st.blocks_free() as u64 * block,
            st.blocks_available() as u64 * block,
        )
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// Finding 10 (the reserve): root's oomguard runs nobody's job from a job file with no
/// `run_dir`, so its log goes to root's default run directory, on a small disk. The job prints
/// more than the disk holds. Written as nobody, its log stops where nobody's own writes would:
/// the blocks reserved for root stay free (before the fix root wrote it, and the disk was left
/// with 0 bytes even for root), root's own summary.json is still saved, and the terminal still
/// got every byte.
#[test]
fn a_users_output_never_spends_roots_reserved_blocks() {
    let name = "a_users_output_never_spends_roots_reserved_blocks";
    let Some(w) = crate::attacker::World::new(name) else {
        return;
    };
    let disk = match SmallDisk::mount(&w.path("rootstate")) {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("SKIPPED {name}: cannot mount a small ext4 image ({why}): CI needs root with loop devices (/dev/loop-control) and mkfs.ext4");
            return;
        }
    };
    let (_, avail_before) = disk.free();
    let reserved = disk.free().0 - avail_before;
    let lines = (avail_before + (8 << 20)) / 16; // 8 MiB more than nobody may write
    let job = w.nobody_file(
        &w.path("nobody/job.toml"),
        &format!(
            "user = \"nobody\"\ncommand = [\"python3\", \"-c\", {:?}]\n[run]\nlog_max = \"64MiB\"\n",
            printer(lines)
        ),
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        out.stdout.len() as u64,
        lines * 16,
        "the terminal got it all"
    );
    let (free, _) = disk.free();
    assert!(
        free + (1 << 20) >= reserved,
        "{free} bytes left, {reserved} reserved for root: {stderr}"
    );
    let runs: Vec<_> = std::fs::read_dir(w.path("rootstate/oomguard/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].join("summary.json").is_file(), "{stderr}");
    let log_bytes = std::fs::metadata(runs[0].join("attempt-1.log"))
        .unwrap()
        .len();
    assert!(
        log_bytes <= avail_before,
        "the log ({log_bytes} bytes) stopped where nobody's space ended ({avail_before})"
    );
}

/// Finding 10 (the cap's key): nobody's own job file cannot lift the cap on what root keeps in
/// its own run directory; with a run_dir of the job's own it may.
#[test]
fn a_users_job_file_cannot_raise_the_cap_on_roots_disk() {
    let name = "a_users_job_file_cannot_raise_the_cap_on_roots_disk";
    let Some(w) = crate::attacker::World::new(name) else {
        return;
    };
    let job = |dir: &str, run_dir: &str| {
        w.nobody_file(
            &w.path(&format!("nobody/{dir}.toml")),
            &format!("user = \"nobody\"\ncommand = [\"true\"]\n[run]\nlog_max = \"1G\"\n{run_dir}"),
        )
    };
    let refused = w.run(&["--config", job("roots", "").to_str().unwrap()]);
    let stderr = stderr_of(&refused);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[run] log_max = 1.0 GiB: a job file its user can write may not raise log_max above the default 64.0 MiB while the logs go to oomguard's own run directory"),
        "{stderr}"
    );
    let own = format!("run_dir = {:?}\n", w.path("nobody/run").to_str().unwrap());
    let out = w.run(&["--config", job("own", &own).to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
}
