//! A watcher whose per-tick cost does not grow with the job: with a cgroup the tree's memory is
//! the cgroup's own counters (written to the timeline) and no tick pays for PSS
//! (smaps_rollup); without one PSS is read only on ticks where the summed RSS reaches
//! `--max-rss`, and for the record where the tree's RSS moved (a steady job reads it no more).

use crate::util;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use util::*;

const MIB: f64 = (1u64 << 20) as f64;

/// A job that holds `argv[1]` MiB, every page written, then blocks reading the FIFO `argv[2]`.
const HOLD_PY: &str = "
import sys
held = b'\\x01' * (int(sys.argv[1]) << 20)
open(sys.argv[2]).read()
";

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

/// Runs `HOLD_PY` holding `hold_mib` under `oomguard run <extra>`, waits until `ticks` rows
/// show the tree holding it, lets the job end, and returns the timeline.
fn run_holding(
    sb: &Sandbox,
    extra: &[&str],
    hold_mib: u32,
    ticks: usize,
) -> (Vec<String>, Vec<Vec<Option<f64>>>) {
    let fifo = sb.path("hold");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let hold = hold_mib.to_string();
    let child = sb
        .run(
            extra,
            &["python3", "-c", HOLD_PY, &hold, fifo.to_str().unwrap()],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run_dir = sb.run_dir();
    let seen = wait_until(Duration::from_secs(60), || {
        let (header, rows) = timeline(&run_dir);
        if header.len() < 3 {
            return false;
        }
        let rss = column(&header, "tree_rss_bytes");
        rows.iter()
            .filter(|r| r[rss].is_some_and(|b| b >= f64::from(hold_mib) * MIB))
            .count()
            >= ticks
    });
    release_fifo(&fifo);
    let out = child.wait_with_output().unwrap();
    assert!(
        seen,
        "the timeline never showed the job holding {hold_mib} MiB"
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    timeline(&run_dir)
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
    let (header, rows) = run_holding(
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
    let (header, rows) = run_holding(
        &sb,
        &["--interval", "50ms", "--no-cgroup", "--max-rss", "10G"],
        64,
        5,
    );
    let (rss, pss) = (
        column(&header, "tree_rss_bytes"),
        column(&header, "tree_pss_bytes"),
    );
    // The rows at the plateau (within 1% of the highest RSS, the interpreter's own included).
    let top = rows.iter().filter_map(|r| r[rss]).fold(0.0, f64::max);
    let held: Vec<_> = rows
        .iter()
        .filter(|r| r[rss].is_some_and(|b| b >= 0.99 * top))
        .collect();
    assert!(held.len() >= 3, "{rows:?}");
    assert!(rows.iter().any(|r| r[pss].is_some()), "{rows:?}");
    // The first row of the plateau may be the read of the climb; after it, nothing moved.
    assert!(held[1..].iter().all(|r| r[pss].is_none()), "{rows:?}");

    // Over it: every tick reads PSS, which judges the bound (held 3 ticks: stopped).
    let sb = Sandbox::new();
    let fifo = sb.path("hold");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let out = sb
        .run(
            &[
                "--interval",
                "50ms",
                "--no-cgroup",
                "--max-rss",
                "32M",
                "--max-attempts",
                "1",
                "--grace",
                "1s",
            ],
            &["python3", "-c", HOLD_PY, "64", fifo.to_str().unwrap()],
        )
        .output()
        .unwrap();
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
    // Every tick at or over the bound read PSS (3 of them: the streak that stopped the job);
    // under it, only where the climb moved the RSS (above).
    let over: Vec<_> = rows
        .iter()
        .filter(|r| r[rss].is_some_and(|b| b >= 32.0 * MIB))
        .collect();
    assert!(over.len() >= 3, "{rows:?}");
    assert!(over.iter().all(|r| r[pss].is_some()), "{rows:?}");
    assert!(
        over.iter().any(|r| r[pss].is_some_and(|b| b >= 60.0 * MIB)),
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
