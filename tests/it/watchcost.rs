//! A watcher whose per-tick cost does not grow with the job: with a cgroup the tree's memory is
//! the cgroup's own counters (written to the timeline) and no tick pays for PSS
//! (smaps_rollup); without one PSS is read only on ticks where the summed RSS reaches
//! `--max-rss`, and for the record where the tree's RSS moved (a steady job reads it no more).

use crate::util;

use std::ops::Range;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use util::*;

const MIB: f64 = (1u64 << 20) as f64;

/// A job that holds `argv[1]` MiB, every page written, says so by creating the file `argv[3]`,
/// then blocks reading the FIFO `argv[2]`. A SIGTERM (a stop asked for) is written down in the
/// file `argv[4]`, when given, and otherwise ignored: such a job holds until the FIFO lets it go,
/// however fast the machine got it to its full size.
const HOLD_PY: &str = "
import signal, sys
def asked_to_stop(signum, frame):
    open(sys.argv[4], 'w').close()
if len(sys.argv) > 4:
    signal.signal(signal.SIGTERM, asked_to_stop)
held = b'\\x01' * (int(sys.argv[1]) << 20)
open(sys.argv[3], 'w').close()
open(sys.argv[2]).read()
";

/// `HOLD_PY`'s argv, for a job holding `hold_mib` in sandbox `sb`, which says it holds in the
/// file `holding` and blocks on the FIFO `hold` (made here); `term`: the file a SIGTERM makes,
/// else the job dies of it.
fn hold_job(sb: &Sandbox, hold_mib: u32, term: Option<&Path>) -> Vec<String> {
    let fifo = sb.path("hold");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut argv = vec![
        "python3".to_string(),
        "-c".to_string(),
        HOLD_PY.to_string(),
        hold_mib.to_string(),
        fifo.display().to_string(),
        sb.path("holding").display().to_string(),
    ];
    argv.extend(term.map(|t| t.display().to_string()));
    argv
}

/// How long the job may take to do what the test waits for: only a far upper bound, for a bug
/// to fail the test instead of hanging it.
const LONG: Duration = Duration::from_secs(120);

/// Waits until the job said it holds all its memory, then until `ticks` rows of the timeline
/// were sampled after that (and `also` holds). Returns the rows sampled while the job held it,
/// as a range of the timeline's rows (the test lets it go after), or `None` at [`LONG`].
fn ticks_after_holding(
    sb: &Sandbox,
    ticks: usize,
    mut also: impl FnMut() -> bool,
) -> Option<Range<usize>> {
    let holding = sb.path("holding");
    if !wait_until(LONG, || holding.exists()) {
        return None;
    }
    // The rows whole now; the next may have been sampled before the job held (it was being
    // written while we looked), every later one was sampled after.
    let first = timeline(&sb.run_dir()).1.len() + 1;
    let mut whole = 0;
    wait_until(LONG, || {
        whole = timeline(&sb.run_dir()).1.len();
        whole >= first + ticks && also()
    })
    .then_some(first..whole)
}

/// samples.csv: the header's names and the rows, each cell a number or empty.
fn timeline(run_dir: &Path) -> (Vec<String>, Vec<Vec<Option<f64>>>) {
    let text = std::fs::read_to_string(run_dir.join("samples.csv")).unwrap_or_default();
    let mut lines = text.lines();
    let header = lines
        .next()
        .unwrap_or_default()
        .split(',')
        .map(String::from)
        .collect();
    let mut rows: Vec<Vec<Option<f64>>> = lines
        .map(|l| {
            l.split(',')
                .map(|c| (!c.is_empty()).then(|| c.parse().unwrap_or(f64::NAN)))
                .collect()
        })
        .collect();
    // A row is whole once it ends with a newline: the last line may be half written.
    if !text.ends_with('\n') {
        rows.pop();
    }
    (header, rows)
}

fn column(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

/// Runs `HOLD_PY` holding `hold_mib` under `oomguard run <extra>`, waits until the job holds it
/// and `ticks` rows were sampled since, lets the job end, and returns the timeline and the rows
/// sampled while the job held all it would (see [`ticks_after_holding`]).
fn run_holding(
    sb: &Sandbox,
    extra: &[&str],
    hold_mib: u32,
    ticks: usize,
) -> (Vec<String>, Vec<Vec<Option<f64>>>, Range<usize>) {
    let job = hold_job(sb, hold_mib, None);
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let child = sb
        .run(extra, &job)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let held = ticks_after_holding(sb, ticks, || true);
    release_fifo(&sb.path("hold"));
    let out = child.wait_with_output().unwrap();
    let held = held.unwrap_or_else(|| {
        panic!(
            "the job never said it held {hold_mib} MiB, or no {ticks} ticks followed: {}",
            stderr_of(&out)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let (header, rows) = timeline(&sb.run_dir());
    (header, rows, held)
}

#[test]
fn with_a_cgroup_the_timeline_has_its_counters_and_no_tick_reads_pss() {
    let test = "with_a_cgroup_the_timeline_has_its_counters_and_no_tick_reads_pss";
    if !is_root() {
        eprintln!("SKIPPED {test}: making a memory cgroup needs root");
        return;
    }
    let sb = Sandbox::new();
    // --max-rss far below what the job holds: the cgroup's working set is what it judges, so it
    // needs no PSS either (and 10G is not crossed).
    let (header, rows, _) = run_holding(
        &sb,
        &[
            "--interval",
            "50ms",
            "--memory-max",
            "2G",
            "--max-rss",
            "10G",
        ],
        300,
        5,
    );
    let anon = column(&header, "cgroup_anon_bytes");
    let working_set = column(&header, "cgroup_working_set_bytes");
    let pss = column(&header, "tree_pss_bytes");
    let usage = column(&header, "cgroup_bytes");
    let peak_anon = rows.iter().filter_map(|r| r[anon]).fold(0.0, f64::max);
    // 300 MiB written, plus what an idle python holds (a few MiB): within 5%.
    assert!(
        (300.0 * MIB..=315.0 * MIB).contains(&peak_anon),
        "cgroup anon peaked at {:.1} MiB",
        peak_anon / MIB
    );
    for row in &rows {
        assert_eq!(row[pss], None, "a tick read PSS: {row:?}");
        if let (Some(ws), Some(usage)) = (row[working_set], row[usage]) {
            assert!(ws <= usage, "{row:?}");
        }
    }
    assert!(rows.iter().all(|r| r[working_set].is_some()), "{rows:?}");
}

#[test]
fn without_a_cgroup_pss_is_read_only_where_rss_reaches_max_rss_or_moved() {
    // Under the bound: PSS is read for the record where the tree's RSS moved (its start, the
    // climb to 64 MiB), and no more once it holds steady (issue 21: no clock).
    let sb = Sandbox::new();
    let (header, rows, held) = run_holding(
        &sb,
        &["--interval", "50ms", "--no-cgroup", "--max-rss", "10G"],
        64,
        5,
    );
    let (rss, pss) = (
        column(&header, "tree_rss_bytes"),
        column(&header, "tree_pss_bytes"),
    );
    // The rows sampled while the job held its 64 MiB (the interpreter's own on top).
    let held = &rows[held];
    assert!(held.len() >= 5, "{rows:?}");
    assert!(
        held.iter().all(|r| r[rss].is_some_and(|b| b >= 64.0 * MIB)),
        "{rows:?}"
    );
    assert!(rows.iter().any(|r| r[pss].is_some()), "{rows:?}");
    // The first row of the plateau may be the read of the climb's end; after it, nothing moved.
    assert!(held[1..].iter().all(|r| r[pss].is_none()), "{rows:?}");

    // Over it: every tick reads PSS, which judges the bound (held 3 ticks: stopped). The job
    // writes the SIGTERM down and holds on: its 64 MiB are read however far its climb had got
    // when the streak ended, and the test lets it go.
    let sb = Sandbox::new();
    let term = sb.path("term");
    let job = hold_job(&sb, 64, Some(&term));
    let job: Vec<&str> = job.iter().map(String::as_str).collect();
    let child = sb
        .run(
            &[
                "--interval",
                "50ms",
                "--no-cgroup",
                "--max-rss",
                "32M",
                "--max-attempts",
                "1",
                // Far longer than the test waits: the job ends when let go, not when killed.
                "--grace",
                "10m",
            ],
            &job,
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let held = ticks_after_holding(&sb, 1, || term.exists());
    release_fifo(&sb.path("hold"));
    let out = child.wait_with_output().unwrap();
    let held = held.unwrap_or_else(|| {
        panic!(
            "the job never held 64 MiB and got its SIGTERM with a tick after: {}",
            stderr_of(&out)
        )
    });
    assert_eq!(
        causes(&sb.summary()),
        ["memory_limit"],
        "{}",
        stderr_of(&out)
    );
    let (header, rows) = timeline(&sb.run_dir());
    let (rss, pss) = (
        column(&header, "tree_rss_bytes"),
        column(&header, "tree_pss_bytes"),
    );
    // Every tick whose RSS reached the bound read PSS; under it, only where the climb moved
    // the RSS (above).
    let over: Vec<_> = rows
        .iter()
        .filter(|r| r[rss].is_some_and(|b| b >= 32.0 * MIB))
        .collect();
    assert!(!over.is_empty(), "{rows:?}");
    assert!(over.iter().all(|r| r[pss].is_some()), "{rows:?}");
    // The PSS read is what the bound judged: 3 ticks at or over it, the streak that stopped the
    // job (one may be a read for the record while the climb's RSS was just under the bound).
    let pss_over = rows
        .iter()
        .filter(|r| r[pss].is_some_and(|b| b >= 32.0 * MIB))
        .count();
    assert!(pss_over >= 3, "{rows:?}");
    // Once the job held its 64 MiB, the PSS read says so.
    let held = &rows[held];
    assert!(!held.is_empty(), "{rows:?}");
    assert!(
        held.iter().all(|r| r[pss].is_some_and(|b| b >= 60.0 * MIB)),
        "{rows:?}"
    );
}

#[test]
fn pss_interval_parses_and_bad_values_are_usage_errors() {
    for good in ["0", "30s", "5m"] {
        let sb = Sandbox::new();
        let out = sb
            .run(&["--pss-interval", good], &["true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{good}: {}", stderr_of(&out));
    }
    for bad in ["10", "soon", "8d", "-1s"] {
        let sb = Sandbox::new();
        let out = sb
            .run(&["--pss-interval", bad], &["true"])
            .output()
            .unwrap();
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--pss-interval"), "{bad}: {stderr}");
        assert!(!sb.run_dir().exists(), "{bad}: nothing is created");
    }
}
