//! Why an attempt ended, end to end on the real binary: one reading of the output for
//! `oomguard run` and `oomguard classify` (a survived OOM is not the cause of a later death; the
//! first rank's OOM is the root cause across ranks), exit status 137 as a SIGKILL only with
//! evidence of one, and OOM kills by a cgroup limit above the job seen without root.

use crate::util;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use util::{causes, fixture, stderr_of, Sandbox};

fn evidence(summary: &Value, attempt: usize) -> String {
    summary["attempts"][attempt]["evidence"]
        .as_str()
        .expect("evidence is a string")
        .to_string()
}

/// Item 6: an OOM the job printed and survived ("-- skipping batch") does not decide the
/// attempt when the job then dies of `sys.exit("error: ...")`.
#[test]
fn a_survived_oom_then_an_exit_message_is_failed_and_not_relaunched() {
    let sb = Sandbox::new();
    let out = sb
        .run(
            &["--max-attempts", "3"],
            &[
                "python3",
                &fixture("verdict_caught_oom_then_exit.py"),
                "--batch_size",
                "8",
            ],
        )
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["failed"], "{summary:#}");
    let evidence = evidence(&summary, 0);
    assert!(
        evidence.contains("error: checkpoint dir /ckpt is not writable")
            && evidence.contains("after a caught OOM")
            && evidence.contains("CUDA out of memory"),
        "{evidence}"
    );
    // `oomguard classify` reads the attempt's log the same way.
    let log = sb.run_dir().join("attempt-1.log");
    let classified = sb
        .oomguard(&["classify", log.to_str().unwrap()])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&classified.stdout).into_owned();
    assert!(line.starts_with("failed\t"), "{line}");
}

/// Item 6: rank 0 runs out of GPU memory, rank 1 then loses its connection to it, the
/// launcher reports ChildFailedError and exits 1. The root cause is rank 0's OOM, under `run`
/// (relaunched smaller, then it fits) and under `classify` on the same attempt-1.log.
#[test]
fn a_ddp_oom_with_collateral_errors_is_device_oom_for_run_and_classify() {
    device_oom_for_run_and_classify("verdict_ddp_oom.py", "torch.OutOfMemoryError", None);
}

/// Issue 20: llama.cpp fails to allocate its compute buffers on the GPU and the Python wrapper
/// then raises its own error for the same failed load ("ValueError: Failed to load model from
/// file"). That error is the OOM's aftermath, not a fatal error of its own: the attempt is
/// device_oom and is relaunched smaller, and `classify` reads its log the same way.
#[test]
fn a_wrappers_failed_load_after_ggmls_oom_is_device_oom() {
    device_oom_for_run_and_classify(
        "verdict_llama_load_oom.py",
        "failed to allocate CUDA0 buffer",
        Some("ValueError: Failed to load model from file"),
    );
}

/// Runs `fixture` (`--batch_size 8 --fits 4`): its first attempt must be device_oom with
/// `evidence_words` in the evidence (and `log_words` in attempt-1.log), the second fit, and
/// `classify` on attempt-1.log must say device_oom too.
fn device_oom_for_run_and_classify(
    fixture_name: &str,
    evidence_words: &str,
    log_words: Option<&str>,
) {
    let sb = Sandbox::new();
    let job = fixture(fixture_name);
    let args = ["python3", &job, "--batch_size", "8", "--fits", "4"];
    let (_, summary) = sb.run_ok(&[], &args);
    assert_eq!(causes(&summary), ["device_oom", "ok"], "{summary:#}");
    let evidence = evidence(&summary, 0);
    assert!(evidence.contains(evidence_words), "{evidence}");
    let log = sb.run_dir().join("attempt-1.log");
    if let Some(words) = log_words {
        assert!(std::fs::read_to_string(&log).unwrap().contains(words));
    }
    let classified = sb
        .oomguard(&["classify", "--json", log.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(classified.status.code(), Some(0));
    let json: Value = serde_json::from_slice(&classified.stdout).expect("one JSON line");
    assert_eq!(json["class"], "device_oom", "{json}");
}

/// Item 8: a process that calls `exit(137)` itself was not killed by anyone.
#[test]
fn a_jobs_own_exit_137_is_failed_with_its_status() {
    let sb = Sandbox::new();
    let out = sb
        .run(
            &[],
            // The batch flag is the job's argv: were 137 taken for a SIGKILL, it would be
            // relaunched smaller.
            &[
                "python3",
                "-c",
                "import sys; print('bye', flush=True); sys.exit(137)",
                "--batch_size",
                "8",
            ],
        )
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(137), "{stderr}");
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["failed"], "{summary:#}");
    assert_eq!(summary["attempts"][0]["exit_code"], 137);
    assert_eq!(summary["attempts"][0]["batch_size"], 8);
}

/// Item 8: a shell wrapper (that does not exec its last command) whose child died of SIGKILL
/// exits 137 and says so on stderr (`bash: 4242 Killed  python3 ...`): that is `killed`, and
/// the evidence quotes the shell.
#[test]
fn a_shell_reporting_its_childs_sigkill_is_killed() {
    let sb = Sandbox::new();
    let out = sb
        .run(
            &["--max-attempts", "1"],
            &[
                "bash",
                "-c",
                "python3 -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'; exit $?",
            ],
        )
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["killed"], "{summary:#}\n{stderr}");
    assert_eq!(summary["attempts"][0]["exit_code"], 137);
    let evidence = evidence(&summary, 0);
    assert!(
        evidence.starts_with("exit 137; output: \"bash: ") && evidence.contains(" Killed "),
        "{evidence}"
    );
}

/// Item 8: a wrapper exiting 137 after a process of its tree died of SIGKILL out of its sight
/// (orphaned, so oomguard reaped it) is `killed`, and the evidence names that process.
#[test]
fn exit_137_after_a_reaped_process_died_of_sigkill_is_killed() {
    let sb = Sandbox::new();
    let out = sb
        .run(
            &["--max-attempts", "1"],
            &["python3", &fixture("verdict_orphan_sigkill.py")],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = stderr_of(&out);
    let worker = stdout
        .lines()
        .find_map(|l| l.strip_prefix("worker "))
        .unwrap_or_else(|| panic!("the fixture names its worker: {stdout}\n{stderr}"));
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["killed"], "{summary:#}\n{stderr}");
    let evidence = evidence(&summary, 0);
    assert!(
        evidence.contains(&format!("PID {worker} of the job died of SIGKILL")),
        "{evidence}"
    );
}

/// Whether user `nobody` (not owner, not group) can reach `path`: every directory above it
/// searchable by others, and the file itself readable (and executable when `exec`).
fn reachable_by_others(path: &Path, exec: bool) -> bool {
    let Ok(path) = path.canonicalize() else {
        return false;
    };
    let dirs_ok = path
        .ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    let want = if exec { 0o005 } else { 0o004 };
    dirs_ok && std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & want == want)
}

/// A v1 memory cgroup below the test's own, limited, made by root; removed on drop once empty.
struct LimitedCgroup {
    dir: PathBuf,
}

impl LimitedCgroup {
    fn new(name: &str, limit_bytes: u64) -> Result<LimitedCgroup, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let rel = own
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
            .ok_or("no cgroup v1 memory hierarchy")?;
        let dir = Path::new("/sys/fs/cgroup/memory")
            .join(rel.trim_start_matches('/'))
            .join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cg = LimitedCgroup { dir };
        for file in ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"] {
            let path = cg.dir.join(file);
            if path.exists() {
                std::fs::write(&path, limit_bytes.to_string())
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
        }
        Ok(cg)
    }
}

impl Drop for LimitedCgroup {
    fn drop(&mut self) {
        // Empty once oomguard, its guard and the job are gone.
        let procs = self.dir.join("cgroup.procs");
        util::wait_until(Duration::from_secs(20), || {
            std::fs::read_to_string(&procs).is_ok_and(|t| t.trim().is_empty())
        });
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// Item 11: the common shared-server case. oomguard runs as `nobody`, so it can neither read
/// the kernel log (`kernel.dmesg_restrict=1`) nor make a cgroup; root put it in a cgroup limited
/// to 64 MiB (as a systemd slice, a Slurm job or a container would). The job allocates 256 MiB
/// and the limit kills it: the counter of that cgroup, readable by anyone, says so.
#[test]
fn without_root_a_kill_by_a_cgroup_limit_above_the_job_is_oom_killed() {
    const SKIP: &str = "SKIPPED without_root_a_kill_by_a_cgroup_limit_above_the_job_is_oom_killed";
    const NOBODY: u32 = 65534;
    if unsafe { nix::libc::geteuid() } != 0 {
        eprintln!("{SKIP}: needs root to make the limited cgroup and become nobody");
        return;
    }
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(Path::new)
        .find(|p| reachable_by_others(p, true))
    else {
        eprintln!("{SKIP}: no python3 that user nobody can run");
        return;
    };
    let (bin, alloc) = (util::bin(), fixture("alloc.py"));
    if !reachable_by_others(&bin, true) || !reachable_by_others(Path::new(&alloc), false) {
        eprintln!(
            "{SKIP}: user nobody cannot reach {} or {alloc}",
            bin.display()
        );
        return;
    }
    let name = format!("oomguard-verdicts-{}", std::process::id());
    let cg = match LimitedCgroup::new(&name, 64 << 20) {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("{SKIP}: {why}");
            return;
        }
    };
    let sb = Sandbox::new();
    std::os::unix::fs::chown(sb.dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    assert_eq!(std::fs::metadata(sb.dir.path()).unwrap().uid(), NOBODY);
    let procs = std::ffi::CString::new(
        cg.dir
            .join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let mut cmd = sb.run(
        &["--max-attempts", "2"],
        &[
            python.to_str().unwrap(),
            &alloc,
            "--batch_size",
            "16",
            "--sample-mb",
            "16",
        ],
    );
    // Between fork and exec, as root: join the limited cgroup ("0" is the writer itself), then
    // drop to nobody. Only async-signal-safe calls here: the test harness has other threads.
    unsafe {
        cmd.pre_exec(move || {
            use nix::libc;
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stderr = stderr_of(&out);
    let summary = sb.summary();
    let first = &summary["attempts"][0];
    assert_eq!(first["signal"], 9, "{summary:#}\n{stderr}");
    assert_eq!(first["cause"], "oom_killed", "{summary:#}\n{stderr}");
    let evidence = evidence(&summary, 0);
    assert!(
        evidence.contains(&format!("/{name} oom_kill +")) && evidence.contains("64.0 MiB"),
        "{evidence}"
    );
    drop(cg);
}

/// With `--no-cgroup` inside a cgroup whose limit kills the attempt (a Slurm job's, here
/// `job_<pid>` limited to 64 MiB), the relaunch is decided against that limit: the line names
/// it as the user knows it ("Slurm job N's memory limit"), where it used to say the attempt
/// left no limit to estimate from.
#[test]
fn with_no_cgroup_the_relaunch_uses_the_limit_above_that_killed_the_attempt() {
    const SKIP: &str =
        "SKIPPED with_no_cgroup_the_relaunch_uses_the_limit_above_that_killed_the_attempt";
    if unsafe { nix::libc::geteuid() } != 0 {
        eprintln!("{SKIP}: needs root to make the limited cgroup");
        return;
    }
    let cg = match LimitedCgroup::new(&format!("job_{}", std::process::id()), 64 << 20) {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("{SKIP}: {why}");
            return;
        }
    };
    let procs = std::ffi::CString::new(
        cg.dir
            .join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let sb = Sandbox::new();
    let alloc = fixture("alloc.py");
    let mut cmd = sb.run(
        &["--max-attempts", "2", "--no-cgroup"],
        &["python3", &alloc, "--batch_size", "16", "--sample-mb", "16"],
    );
    // Between fork and exec: join the limited cgroup ("0" is the writer itself). Only
    // async-signal-safe calls here: the test harness has other threads.
    unsafe {
        cmd.pre_exec(move || {
            use nix::libc;
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stderr = stderr_of(&out);
    let summary = sb.summary();
    assert_eq!(summary["attempts"][0]["cause"], "oom_killed", "{stderr}");
    let relaunch = stderr
        .lines()
        .find(|l| l.starts_with("oomguard: attempt 2 in"))
        .unwrap_or_else(|| panic!("no relaunch line: {stderr}"));
    // Named as the user knows it, not as "cgroup limit".
    let named = format!("Slurm job {}'s memory limit 64.0 MiB", std::process::id());
    assert!(relaunch.contains(&named), "{relaunch}");
    drop(cg);
}
