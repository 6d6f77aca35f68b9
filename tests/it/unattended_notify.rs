//! Running unattended, end to end: the real binary under a stand-in service manager (a datagram
//! socket this test binds, named by NOTIFY_SOCKET, a path or an abstract `@` name) says READY,
//! its STATUS as it changes, WATCHDOG while it supervises and STOPPING on the way out, and keeps
//! those variables from the job; the systemd units in systemd/ pass `systemd-analyze verify`;
//! `oomguard completions` and `oomguard man` print what the Debian package installs.
//! Real processes (tests/fixtures/notify_job.py); the tests wait on messages and files.

use crate::util;

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use util::{fixture, stderr_of, wait_until, Sandbox};

/// Longer than any of these runs takes; reached only when a message never comes.
const NEVER: Duration = Duration::from_secs(60);

/// The stand-in service manager: every datagram received, in order, as text.
struct Manager {
    heard: Arc<Mutex<Vec<String>>>,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Manager {
    fn listen(socket: UnixDatagram) -> Manager {
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let heard = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (heard, done) = (heard.clone(), done.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                while !done.load(Ordering::SeqCst) {
                    if let Ok(n) = socket.recv(&mut buf) {
                        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                        heard.lock().expect("not poisoned").push(text);
                    }
                }
            })
        };
        Manager {
            heard,
            done,
            thread: Some(thread),
        }
    }

    fn heard(&self) -> Vec<String> {
        self.heard.lock().expect("not poisoned").clone()
    }

    /// Everything heard, once STOPPING=1 has come (oomguard's last word).
    fn until_stopping(mut self) -> Vec<String> {
        assert!(
            wait_until(NEVER, || self.heard().iter().any(|m| m == "STOPPING=1")),
            "no STOPPING=1; heard {:?}",
            self.heard()
        );
        self.done.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .expect("joined once")
            .join()
            .expect("listener");
        self.heard()
    }
}

/// The STATUS= lines, in order, without the key.
fn statuses(heard: &[String]) -> Vec<&str> {
    heard
        .iter()
        .filter_map(|m| m.strip_prefix("STATUS="))
        .collect()
}

fn position(heard: &[String], what: impl Fn(&str) -> bool) -> usize {
    heard
        .iter()
        .position(|m| what(m))
        .unwrap_or_else(|| panic!("not heard; heard {heard:?}"))
}

/// The job's command: `--batch_size BATCH --grad_accum 1`, fitting at most `fits`.
fn job(sandbox: &Sandbox, batch: &str, fits: &str) -> Vec<String> {
    let path = |name: &str| sandbox.path(name).to_str().expect("utf-8").to_string();
    [
        "python3",
        &fixture("notify_job.py"),
        "--batch_size",
        batch,
        "--grad_accum",
        "1",
        "--fits",
        fits,
        "--seen",
        &path("seen.json"),
        "--release",
        &path("release"),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn the_service_manager_hears_ready_status_watchdog_and_stopping() {
    let sandbox = Sandbox::new();
    let socket_path = sandbox.path("notify");
    let manager = Manager::listen(UnixDatagram::bind(&socket_path).expect("bind"));
    nix::unistd::mkfifo(
        &sandbox.path("release"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    let job = job(&sandbox, "8", "4");
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let oomguard = sandbox
        .run(&["--interval", "50ms", "--max-attempts", "3"], &job)
        .env("NOTIFY_SOCKET", &socket_path)
        // 200 ms: WATCHDOG=1 every 100 ms while oomguard supervises.
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oomguard starts");

    // Attempt 2 runs (batch 4 fits) until released: wait for its memory in the status and for
    // the watchdog to be fed twice since.
    let running = "STATUS=attempt 2/3: batch 4 x accum 2, rss ";
    let fed = wait_until(NEVER, || {
        let heard = manager.heard();
        heard
            .iter()
            .position(|m| m.starts_with(running))
            .is_some_and(|at| heard[at..].iter().filter(|m| *m == "WATCHDOG=1").count() >= 2)
    });
    util::release_fifo(&sandbox.path("release"));
    let heard = manager.until_stopping();
    let out = oomguard.wait_with_output().expect("oomguard ends");
    assert!(
        fed,
        "no status with memory and watchdog for attempt 2; heard {heard:?}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));

    // READY once, when attempt 1 runs, and before any status.
    assert_eq!(
        heard.iter().filter(|m| *m == "READY=1").count(),
        1,
        "{heard:?}"
    );
    assert!(position(&heard, |m| m == "READY=1") < position(&heard, |m| m.starts_with("STATUS=")));
    let statuses = statuses(&heard);
    let at = |want: &str| {
        statuses
            .iter()
            .position(|s| *s == want)
            .unwrap_or_else(|| panic!("no STATUS={want}; heard {statuses:?}"))
    };
    let first = at("attempt 1/3: batch 8 x accum 1");
    let waiting = at("waiting 0s before attempt 2");
    let second = at("attempt 2/3: batch 4 x accum 2");
    let succeeded = at("succeeded");
    assert!(
        first < waiting && waiting < second && second < succeeded,
        "{statuses:?}"
    );
    // Sent on change only: never the same status twice in a row.
    assert!(statuses.windows(2).all(|w| w[0] != w[1]), "{statuses:?}");
    // The watchdog is fed while attempts run, and nothing follows STOPPING.
    assert!(heard.iter().any(|m| m == "WATCHDOG=1"));
    assert_eq!(
        heard.last().map(String::as_str),
        Some("STOPPING=1"),
        "{heard:?}"
    );

    // The variables were oomguard's: the job inherited none of them.
    let seen = std::fs::read_to_string(sandbox.path("seen.json")).expect("job wrote seen.json");
    let seen: serde_json::Value = serde_json::from_str(&seen).expect("json");
    for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        assert!(seen[name].is_null(), "the job saw {name}: {seen}");
    }
}

#[test]
fn an_abstract_socket_hears_a_run_give_up_and_no_watchdog_unless_asked() {
    let sandbox = Sandbox::new();
    // A name no other test or process uses: the sandbox's path, in the abstract namespace.
    let name = format!("oomguard-test{}", sandbox.dir.path().display());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let manager = Manager::listen(UnixDatagram::bind_addr(&addr).expect("bind abstract"));
    std::fs::write(sandbox.path("release"), "").expect("release file");
    // Batch 2 and 1 both run out of memory: the run gives up.
    let job = job(&sandbox, "2", "0");
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let out = sandbox
        .run(&["--max-attempts", "2"], &job)
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .env_remove("WATCHDOG_USEC")
        .output()
        .expect("oomguard runs");
    let heard = manager.until_stopping();
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert_eq!(
        heard.iter().filter(|m| *m == "READY=1").count(),
        1,
        "{heard:?}"
    );
    let statuses = statuses(&heard);
    assert!(
        statuses.contains(&"attempt 1/2: batch 2 x accum 1"),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&"attempt 2/2: batch 1 x accum 2"),
        "{statuses:?}"
    );
    let last = statuses.last().expect("a status");
    assert!(last.starts_with("gave up: "), "{statuses:?}");
    assert!(
        !heard.iter().any(|m| m.starts_with("WATCHDOG")),
        "{heard:?}"
    );
}

#[test]
fn an_unreachable_notify_socket_does_not_stop_the_run() {
    let sandbox = Sandbox::new();
    std::fs::write(sandbox.path("release"), "").expect("release file");
    let job = job(&sandbox, "1", "1");
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let out = sandbox
        .run(&[], &job)
        .env("NOTIFY_SOCKET", sandbox.path("nobody-listens"))
        .env("WATCHDOG_USEC", "100000")
        .output()
        .expect("oomguard runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("NOTIFY_SOCKET"),
        "{}",
        stderr_of(&out)
    );
}

/// The repository's systemd/ directory.
fn units_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd")
}

/// Runs systemd/verify (see there for what makes `systemd-analyze verify` work offline) with
/// the binary under test standing in for the installed one.
fn verify(units: &[&Path]) -> std::process::Output {
    Command::new("bash")
        .arg(units_dir().join("verify"))
        .arg(util::bin())
        .args(units)
        .output()
        .expect("bash runs systemd/verify")
}

#[test]
fn both_units_pass_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIPPED both_units_pass_systemd_analyze_verify: systemd-analyze is not installed (apt-get install systemd; .ci/run does)");
        return;
    }
    let out = verify(&[]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 unit(s) pass"));

    // Not blind: verify itself exits 0 on a misspelt value and only prints it; the script fails.
    let sandbox = Sandbox::new();
    let text = std::fs::read_to_string(units_dir().join("oomguard@.service")).expect("unit");
    let broken = sandbox.path("oomguard@.service");
    let typo = text.replace("OOMPolicy=continue", "OOMPolicy=contineu");
    assert_ne!(typo, text, "the unit sets OOMPolicy=continue");
    std::fs::write(&broken, typo).expect("write");
    let out = verify(&[&broken]);
    assert!(!out.status.success(), "a broken unit passed");
    assert!(stderr_of(&out).contains("contineu"), "{}", stderr_of(&out));
}

/// The `Key=value` settings of a unit file's [Service] section.
fn service_settings(unit: &str) -> Vec<(String, String)> {
    let mut in_service = false;
    let mut settings = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if let (true, Some((key, value))) = (in_service, line.split_once('=')) {
            if !line.starts_with('#') {
                settings.push((key.to_string(), value.to_string()));
            }
        }
    }
    settings
}

#[test]
fn the_units_set_what_an_unattended_training_job_needs_and_nothing_that_hides_the_gpu() {
    for (unit, job_file) in [
        ("oomguard@.service", "/etc/oomguard/%i.toml"),
        ("user/oomguard@.service", "%E/oomguard/%i.toml"),
    ] {
        let text = std::fs::read_to_string(units_dir().join(unit)).expect("unit file");
        let settings = service_settings(&text);
        let get = |key: &str| {
            settings
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("{unit}: no {key}="))
        };
        let table = [
            ("Type", "notify"),
            ("OOMPolicy", "continue"),
            ("Delegate", "yes"),
            ("KillMode", "mixed"),
            ("Restart", "on-failure"),
            ("NotifyAccess", "main"),
        ];
        for (key, want) in table {
            assert_eq!(get(key), want, "{unit}: {key}");
        }
        assert_eq!(
            get("ExecStart"),
            format!("oomguard run --config {job_file}"),
            "{unit}"
        );
        let prevented: Vec<&str> = get("RestartPreventExitStatus").split_whitespace().collect();
        assert!(
            prevented.contains(&"75") && prevented.contains(&"2"),
            "{unit}: {prevented:?}"
        );
        // Longer than oomguard's default --grace (30s), so the job gets its graceful stop.
        let seconds = |key| {
            humantime::parse_duration(get(key))
                .unwrap_or_else(|e| panic!("{unit}: {key}: {e}"))
                .as_secs()
        };
        assert!(seconds("TimeoutStopSec") > 30, "{unit}");
        assert!(seconds("RestartSec") >= 1, "{unit}: systemd's 100 ms");
        assert!(seconds("WatchdogSec") >= 2, "{unit}");
        for hides in [
            "PrivateDevices",
            "DevicePolicy",
            "DeviceAllow",
            "MemoryMax",
            "MemoryHigh",
            "MemoryLimit",
            "MemorySwapMax",
        ] {
            assert!(
                !settings.iter().any(|(k, _)| k == hides),
                "{unit} sets {hides}"
            );
        }
    }
}

#[test]
fn completions_and_man_pages_come_from_the_command_line_definitions() {
    let sandbox = Sandbox::new();
    for (shell, expect) in [
        ("bash", "--max-attempts"),
        ("zsh", "--max-attempts"),
        ("fish", "-l max-attempts"),
    ] {
        let out = sandbox
            .oomguard(&["completions", shell])
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr_of(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(expect), "{shell}: {script}");
    }
    let out = sandbox
        .oomguard(&["completions", "tcsh"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));

    let out = sandbox.oomguard(&["man", "run"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        page.contains(".TH oomguard-run 1") && page.contains("memory\\-max"),
        "{page}"
    );

    let out = sandbox
        .oomguard(&["man", "frobnicate"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("no man page for `frobnicate`"),
        "{}",
        stderr_of(&out)
    );

    let dir = sandbox.path("man");
    let out = sandbox
        .oomguard(&["man", "--dir", dir.to_str().expect("utf-8")])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .expect("pages written")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for page in [
        "oomguard.1",
        "oomguard-run.1",
        "oomguard-classify.1",
        "oomguard-doctor.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{pages:?}");
    }
    assert!(!pages.iter().any(|p| p.contains("guard-__")), "{pages:?}");
}
