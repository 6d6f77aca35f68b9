//! The output path end to end: a slow reader of oomguard's stdout costs neither bytes nor the
//! classification; stdout and stderr lines never splice in the log or the evidence; oomguard's own
//! lines start on a line of their own; a job under a terminal gets a pseudo-terminal that follows
//! resizes, and `--no-pty` keeps pipes.

use crate::util;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStderr, ChildStdout, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::pty::Winsize;
use nix::sys::signal::Signal;
use util::{causes, fixture, test_pty, wait_until, Sandbox};

/// Long enough for a run of a few attempts on a loaded machine; only reached on failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// What `out_flood.py` writes before its ending: 9000 numbered lines.
fn flood_lines() -> String {
    (0..9000).map(|i| format!("line {i:06}\n")).collect()
}

/// Waits, without reading oomguard's output, until summary.json says the run is over.
fn wait_run_over(sb: &Sandbox) {
    assert!(
        wait_until(PATIENCE, || {
            std::fs::read_to_string(sb.run_dir().join("summary.json"))
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .is_some_and(|s| s["outcome"] != "running")
        }),
        "the run did not end"
    );
}

/// Runs `job` under oomguard with its stdout a pipe nobody reads until the run is over and
/// oomguard has nothing left to do but write (or has exited, as it did before it waited for its
/// copies); stderr goes to a file. Then reads everything. Returns (exit code, stdout, stderr).
fn run_with_slow_reader(sb: &Sandbox, extra: &[&str], job: &[&str]) -> (i32, String, String) {
    let err_path = sb.path("stderr");
    let mut child = sb
        .run(extra, job)
        .stdout(Stdio::piped())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    wait_run_over(sb);
    // The last line oomguard prints: after it, it either exits or waits for its stdout.
    assert!(
        wait_until(PATIENCE, || std::fs::read_to_string(&err_path)
            .unwrap_or_default()
            .contains("summary in")),
        "oomguard did not finish the run"
    );
    assert!(
        wait_until(PATIENCE, || child.try_wait().unwrap().is_some()
            || main_thread_waits_on_a_lock(child.id())),
        "oomguard neither exited nor waited for its writers"
    );
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let code = child.wait().unwrap().code().expect("oomguard exited");
    (code, out, std::fs::read_to_string(&err_path).unwrap())
}

/// Whether the main thread of `pid` sleeps on a futex (its kernel wait channel): once the run is
/// over, that is oomguard waiting for its writer threads, which wait for the reader. While it
/// supervises, its main thread waits in epoll instead.
fn main_thread_waits_on_a_lock(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|wchan| wchan.contains("futex"))
}

#[test]
fn a_slow_reader_loses_no_output() {
    let sb = Sandbox::new();
    let (code, out, err) = run_with_slow_reader(&sb, &[], &["python3", &fixture("out_flood.py")]);
    let want = flood_lines() + "END\n";
    assert_eq!(code, 0, "{err}");
    assert!(
        out == want,
        "the reader got {} of {} bytes",
        out.len(),
        want.len()
    );
    let log = std::fs::read_to_string(sb.run_dir().join("attempt-1.log")).unwrap();
    assert!(
        log == want,
        "attempt-1.log has {} of {} bytes",
        log.len(),
        want.len()
    );
}

#[test]
fn a_slow_reader_does_not_hide_an_oom() {
    let sb = Sandbox::new();
    let (code, out, err) = run_with_slow_reader(
        &sb,
        &["--max-attempts", "2"],
        &["python3", &fixture("out_flood.py"), "--batch_size", "8"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(causes(&sb.summary()), ["host_oom", "ok"], "{err}");
    let log1 = std::fs::read_to_string(sb.run_dir().join("attempt-1.log")).unwrap();
    assert!(
        log1.starts_with(&flood_lines())
            && log1.ends_with("MemoryError: Unable to allocate 8.00 GiB for an array\n")
    );
    let log2 = std::fs::read_to_string(sb.run_dir().join("attempt-2.log")).unwrap();
    assert!(
        out == log1.clone() + &log2,
        "the reader got {} bytes",
        out.len()
    );
    assert!(log2.ends_with("END\n"));
}

/// oomguard running `out_steps.py` with its three streams held by the test.
struct Stepped {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
    seen_out: Vec<u8>,
    seen_err: Vec<u8>,
}

impl Stepped {
    fn start(sb: &Sandbox, steps: &[&str]) -> Stepped {
        let script = fixture("out_steps.py");
        let mut job = vec!["python3", script.as_str()];
        job.extend_from_slice(steps);
        let mut child = sb
            .run(&["--max-attempts", "1"], &job)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Stepped {
            stdin: child.stdin.take().unwrap(),
            stdout: child.stdout.take().unwrap(),
            stderr: child.stderr.take().unwrap(),
            child,
            seen_out: Vec::new(),
            seen_err: Vec::new(),
        }
    }

    /// Reads oomguard's stdout (or stderr) until `text` has come through it.
    fn expect(&mut self, on_stderr: bool, text: &str) {
        let (pipe, seen): (&mut dyn Read, _) = if on_stderr {
            (&mut self.stderr, &mut self.seen_err)
        } else {
            (&mut self.stdout, &mut self.seen_out)
        };
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(seen).contains(text) {
            let n = pipe.read(&mut buf).unwrap();
            assert!(
                n > 0,
                "EOF before {text:?}: {}",
                String::from_utf8_lossy(seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    }

    /// Lets the job go on past its next `wait` step.
    fn go(&mut self) {
        self.stdin.write_all(b"go\n").unwrap();
    }

    /// Reads both streams to EOF; returns the exit code and oomguard's whole stderr.
    fn finish(mut self) -> (i32, String) {
        drop(self.stdin);
        self.stdout.read_to_end(&mut self.seen_out).unwrap();
        self.stderr.read_to_end(&mut self.seen_err).unwrap();
        let code = self.child.wait().unwrap().code().expect("oomguard exited");
        (code, String::from_utf8_lossy(&self.seen_err).into_owned())
    }
}

#[test]
fn stdout_and_stderr_lines_do_not_splice_in_the_log() {
    let sb = Sandbox::new();
    // Each part is seen passing through oomguard before the next is written, so the log would
    // take them in exactly this order if it took bytes as they came.
    let mut job = Stepped::start(&sb, &["o:out 6", "wait", "e:err 0\\n", "wait", "o:\\n"]);
    job.expect(false, "out 6");
    job.go();
    job.expect(true, "err 0\n");
    job.go();
    let (code, err) = job.finish();
    assert_eq!(code, 0, "{err}");
    let log = std::fs::read_to_string(sb.run_dir().join("attempt-1.log")).unwrap();
    assert_eq!(log, "err 0\nout 6\n");
}

#[test]
fn evidence_quotes_one_streams_line() {
    let sb = Sandbox::new();
    let mut job = Stepped::start(
        &sb,
        &[
            "e:warning: /data/cache is not writable",
            "wait",
            "o:step 10: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\\n",
            "exit:1",
        ],
    );
    job.expect(true, "not writable");
    job.go();
    let (code, err) = job.finish();
    assert_eq!(code, 75, "{err}");
    let summary = sb.summary();
    assert_eq!(causes(&summary), ["device_oom"]);
    let evidence = summary["attempts"][0]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("\"step 10: torch.OutOfMemoryError: CUDA out of memory")
            && !evidence.contains("writable"),
        "{evidence}"
    );
}

#[test]
fn oomguards_line_after_an_unfinished_bar_starts_a_new_line() {
    let sb = Sandbox::new();
    let job = Stepped::start(
        &sb,
        &["e:\\r  0%|          | 0/3 [00:00<?, ?it/s]", "exit:1"],
    );
    let (code, err) = job.finish();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("| 0/3 [00:00<?, ?it/s]\noomguard: attempt 1 ended after "),
        "{err}"
    );
    assert!(err
        .lines()
        .any(|l| l.starts_with("oomguard: attempt 1 ended")));
}

/// Runs oomguard with its stdout and stderr on the slave of a new pty; a thread collects what
/// the master reads. Returns the child and the collected bytes.
fn run_on_pty(sb: &Sandbox, extra: &[&str], job: &[&str]) -> (Child, File, Arc<Mutex<Vec<u8>>>) {
    let (master, slave) = test_pty(50, 132);
    let child = {
        let mut cmd = sb.run(extra, job);
        cmd.stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        cmd.spawn().unwrap()
        // The command, and with it our copies of the slave, is dropped here.
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (mut reader, sink) = (master.try_clone().unwrap(), seen.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // Ends at EIO, once every holder of the slave is gone.
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    (child, master, seen)
}

fn text(seen: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&seen.lock().unwrap()).into_owned()
}

#[test]
fn under_a_terminal_the_job_gets_one_that_follows_resizes() {
    let sb = Sandbox::new();
    let (mut child, master, seen) = run_on_pty(&sb, &["-q"], &["python3", &fixture("out_tty.py")]);
    assert!(
        wait_until(PATIENCE, || text(&seen).contains("waiting for SIGWINCH")),
        "{}",
        text(&seen)
    );
    let size = Winsize {
        ws_row: 40,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a pointer valid for the call.
    assert_eq!(
        unsafe { nix::libc::ioctl(master.as_raw_fd(), nix::libc::TIOCSWINSZ, &size) },
        0
    );
    // oomguard is not in the test pty's session, so the kernel does not tell it: the test does.
    util::kill(child.id(), Signal::SIGWINCH);
    assert_eq!(child.wait().unwrap().code(), Some(0), "{}", text(&seen));
    assert!(
        wait_until(PATIENCE, || text(&seen).contains("resized")),
        "{}",
        text(&seen)
    );
    let out = text(&seen);
    assert!(out.contains("isatty True True"), "{out}");
    assert!(out.contains("size 132x50"), "{out}");
    assert!(out.contains("resized 100x40 by signal True"), "{out}");
    // The job's own newlines come through as `\n`; only the test's terminal adds `\r`.
    let log = std::fs::read_to_string(sb.run_dir().join("attempt-1.log")).unwrap();
    assert!(
        log.starts_with("isatty True True\nsize 132x50\nwaiting for SIGWINCH\nresized 100x40"),
        "{log:?}"
    );
}

#[test]
fn no_pty_keeps_pipes_under_a_terminal() {
    let sb = Sandbox::new();
    let (mut child, _master, seen) = run_on_pty(
        &sb,
        &["--no-pty"],
        &["python3", &fixture("out_tty.py"), "--no-wait"],
    );
    assert_eq!(child.wait().unwrap().code(), Some(0), "{}", text(&seen));
    assert!(
        wait_until(PATIENCE, || text(&seen).contains("succeeded")),
        "{}",
        text(&seen)
    );
    assert!(
        text(&seen).contains("isatty False False"),
        "{}",
        text(&seen)
    );
}

/// A process outside the job's tree that holds the job's stdout open (here one the test started,
/// which opens it through /proc/PID/fd/1) keeps the pipe from closing after the job is gone.
/// oomguard reads on while bytes still come through it, and lets go, with a warning, once
/// nothing has come for a while: the run ends, and what came is in the log.
#[test]
fn a_pipe_held_open_outside_the_job_is_read_while_it_carries_bytes_then_let_go() {
    let sb = Sandbox::new();
    let pid_file = sb.path("job.pid");
    let held = sb.path("held");
    let job = format!(
        "import os, time\n\
         open({pid:?}, 'w').write(str(os.getpid()))\n\
         deadline = time.time() + 60\n\
         while not os.path.exists({held:?}) and time.time() < deadline:\n    time.sleep(0.01)\n\
         print('job done', flush=True)\n",
        pid = pid_file.to_str().unwrap(),
        held = held.to_str().unwrap(),
    );
    // Outside oomguard's tree: takes its own copy of the job's stdout, says so, waits until the
    // job is gone, writes three slow lines, then holds the pipe silently until killed.
    let holder_code = format!(
        "import os, time\n\
         deadline = time.time() + 60\n\
         job = ''\n\
         while not job and time.time() < deadline:\n    time.sleep(0.01)\n    job = open({pid:?}).read() if os.path.exists({pid:?}) else ''\n\
         out = open('/proc/%s/fd/1' % job, 'w')\n\
         open({held:?}, 'w').close()\n\
         while os.path.exists('/proc/%s' % job) and time.time() < deadline:\n    time.sleep(0.01)\n\
         for i in range(3):\n    out.write('held %d\\n' % i); out.flush(); time.sleep(0.5)\n\
         time.sleep(600)\n",
        pid = pid_file.to_str().unwrap(),
        held = held.to_str().unwrap(),
    );
    let mut holder = std::process::Command::new("python3")
        .args(["-c", &holder_code])
        .spawn()
        .unwrap();
    let out = sb.run(&[], &["python3", "-c", &job]).output().unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("held open by a process outside its tree"),
        "{stderr}"
    );
    let log = std::fs::read_to_string(sb.run_dir().join("attempt-1.log")).unwrap();
    assert!(log.contains("job done") && log.contains("held 2"), "{log}");
}
