//! `--metrics-addr` and `--metrics-textfile` during a real run: attempt 1 of
//! tests/fixtures/situation_job.py dies of a CUDA out-of-memory error at batch 64, attempt 2
//! (batch 32) fits and holds on a FIFO while the test scrapes `GET /metrics` and reads the
//! textfile; then the test lets it finish. Also: bad addresses, a port in use and a textfile
//! in a missing directory are usage errors before anything starts.

use crate::util;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use util::{release_fifo, start_holding, stderr_of, wait_until, Project, Running};

/// The families every output carries once an attempt ran, each with HELP and TYPE.
const FAMILIES: &[(&str, &str)] = &[
    ("oomguard_attempt", "gauge"),
    ("oomguard_relaunches_total", "counter"),
    ("oomguard_knob_value", "gauge"),
    ("oomguard_tree_memory_bytes", "gauge"),
];

/// Starts `oomguard run <extra> -- situation_job.py --batch_size 64` (fits at 32) and returns
/// it, with its FIFO, once attempt 2 waits on the FIFO.
fn start(p: &Project, extra: &[&str]) -> (Running, PathBuf) {
    let hold = p.sb.path("hold");
    let mut flags = vec!["--interval", "50ms"];
    flags.extend_from_slice(extra);
    let cmd = p.command(
        &flags,
        &["--batch_size", "64"],
        &[
            ("JOB_FITS", "s['batch_size'] <= 32"),
            ("JOB_HOLD", hold.to_str().unwrap()),
        ],
    );
    (start_holding(&p.sb, cmd, &hold), hold)
}

/// Lets attempt 2 finish; oomguard must exit 0.
fn finish(mut run: Running, hold: &Path) {
    release_fifo(hold);
    assert_eq!(run.wait(Duration::from_secs(60)).code(), Some(0));
}

/// The URL oomguard said it serves at (`--metrics-addr 0`: the kernel's pick).
fn url(run: &Running) -> String {
    loop {
        let line = run.stderr_line(Duration::from_secs(30));
        if let Some(url) = line.split("metrics at ").nth(1) {
            return url.trim().to_string();
        }
    }
}

/// `GET /metrics` over a plain TCP connection: (status line, body).
fn get(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut stream = TcpStream::connect(host).expect("the metrics port accepts");
    write!(stream, "GET /{path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the sample named exactly `series` (with its labels), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("a sample value is a number"))
}

/// The exposition is whole and well formed: HELP and TYPE for each family, every sample line
/// `name{labels} number`, a final newline.
fn assert_complete(text: &str) {
    assert!(text.ends_with('\n'), "cut short:\n{text}");
    for (name, kind) in FAMILIES {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "no TYPE {kind} for {name}:\n{text}"
        );
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, number) = line.rsplit_once(' ').expect("a sample has a value");
        assert!(series.starts_with("oomguard_"), "{line}");
        assert!(number.parse::<f64>().is_ok(), "{line}");
    }
}

/// What the run must show while attempt 2 holds.
fn assert_attempt_two(text: &str) {
    assert_complete(text);
    assert_eq!(value(text, "oomguard_attempt"), Some(2.0), "{text}");
    assert_eq!(
        value(text, "oomguard_relaunches_total{cause=\"device_oom\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(text, "oomguard_knob_value{knob=\"batch\"}"),
        Some(32.0),
        "{text}"
    );
}

/// The tree's RSS once attempt 2 was sampled: a Python interpreter's, i.e. plausible.
fn assert_plausible_rss(text: &str) {
    let rss = value(text, "oomguard_tree_memory_bytes{kind=\"rss\"}").expect("rss sampled");
    assert!(
        (1e6..8e9).contains(&rss),
        "an idle python3 with RSS {rss} bytes?\n{text}"
    );
}

#[test]
fn the_endpoint_serves_the_run_as_it_stands() {
    let p = Project::new();
    let (held, hold) = start(&p, &["--metrics-addr", "0"]);
    let url = url(&held);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}: loopback only");
    // Attempt 2's first sample comes at its first tick after start.
    let mut text = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let (status, body) = get(&url);
            assert_eq!(status, "HTTP/1.1 200 OK");
            text = body;
            text.contains("kind=\"rss\"")
        }),
        "no RSS sample of attempt 2:\n{text}"
    );
    assert_attempt_two(&text);
    assert_plausible_rss(&text);
    let (status, _) = get(&url.replace("/metrics", "/other"));
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    finish(held, &hold);
}

#[test]
fn the_textfile_carries_the_same_and_is_replaced_whole() {
    let p = Project::new();
    let prom = p.sb.path("textfile/oomguard.prom");
    std::fs::create_dir(prom.parent().unwrap()).unwrap();
    let (held, hold) = start(&p, &["--metrics-textfile", prom.to_str().unwrap()]);
    // Read it while oomguard replaces it every 50ms tick: each read sees one whole file. A
    // replacement is a rename, so an inode other than the last read's is a new file (a freed
    // inode may come back later: count changes, not distinct numbers); watch a good number.
    let mut replaced = 0;
    let mut last_inode = None;
    let mut last = String::new();
    assert!(
        wait_until(Duration::from_secs(60), || {
            let Ok(file) = std::fs::File::open(&prom) else {
                return false;
            };
            let inode = file.metadata().unwrap().ino();
            let mut text = String::new();
            BufReader::new(file).read_to_string(&mut text).unwrap();
            assert_complete(&text);
            if last_inode.replace(inode).is_some_and(|was| was != inode) {
                replaced += 1;
            }
            last = text;
            replaced >= 20 && last.contains("kind=\"rss\"")
        }),
        "the textfile was not replaced at each tick ({replaced} replacements seen)"
    );
    assert_attempt_two(&last);
    assert_plausible_rss(&last);
    // No temporary file is left for node_exporter to read (it reads *.prom).
    let proms = std::fs::read_dir(prom.parent().unwrap())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("prom".as_ref()))
        .count();
    assert_eq!(proms, 1);
    finish(held, &hold);
}

/// Refused with exit 2 and one line before anything starts: no job ran, no run directory.
fn assert_refused(p: &Project, extra: &[&str], says: &str) {
    let marker = p.sb.path("ran");
    let out =
        p.sb.run(extra, &["touch", marker.to_str().unwrap()])
            .output()
            .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{extra:?}: {stderr}");
    assert!(stderr.contains(says), "{extra:?}: {stderr}");
    assert!(!marker.exists(), "{extra:?}: the job ran");
    assert!(
        !p.sb.run_dir().exists(),
        "{extra:?}: a run directory was made"
    );
}

#[test]
fn bad_addresses_busy_ports_and_missing_directories_are_usage_errors() {
    let p = Project::new();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let missing: PathBuf = p.sb.path("no/such/dir/oomguard.prom");
    let table: &[(&[&str], &str)] = &[
        (&["--metrics-addr", "nonsense"], "is not an address"),
        (&["--metrics-addr", "70000"], "is not an address"),
        (&["--metrics-addr", &busy_addr], "cannot listen"),
        (
            &["--metrics-textfile", missing.to_str().unwrap()],
            "does not exist",
        ),
    ];
    for (extra, says) in table {
        assert_refused(&p, extra, says);
    }
    assert!(!Path::new(&missing).parent().unwrap().exists());
    drop(busy);
}
