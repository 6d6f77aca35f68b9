//! What classifying an attempt's output costs: `classify_text` over a full 256 KiB tail (the
//! most the classifier ever sees), against a baseline measured in the same run, one pass of
//! `str::contains("out of memory")` over each line (the least any classifier must do), and the
//! one-time cost of compiling the signature table.
//!
//! `cargo bench --bench classify_cost` takes the median of 21 runs; under `cargo test` (no
//! `--bench`) it runs 3 as a smoke check.

use std::time::{Duration, Instant};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time<T>(rounds: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

/// This process's resident memory now, in KiB (VmRSS): what a one-off compile keeps.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_string();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full { 21 } else { 3 };
    let mut tail = String::new();
    while tail.len() < 256 * 1024 {
        tail.push_str("Epoch: [0][415/1736]\t Loss 0.5844 MAE 0.6568 RMSE 0.7644 memory: 8672\n");
    }
    tail.push_str("RuntimeError: CUDA out of memory. Tried to allocate 1.71 GiB\n");

    // The hang watch's read of a silent job's output that names no memory error (the common
    // case): the first read compiles only what the prescreen needs, never the table.
    let quiet = &tail[..tail.len() - tail.lines().last().map_or(0, |l| l.len() + 1)];
    let rss_before = rss_kib();
    let first = Instant::now();
    let shown = oomguard::api::classify::memory_error_shown(quiet);
    let prescreen_first = first.elapsed();
    let prescreen_kib = rss_kib().saturating_sub(rss_before);
    assert!(shown.is_none());
    let prescreen = time(rounds, || {
        oomguard::api::classify::memory_error_shown(quiet)
    });

    let rss_before = rss_kib();
    let first = Instant::now();
    let verdict = oomguard::api::classify::classify_text("warm-up: nothing to see");
    let compile = first.elapsed();
    let table_kib = rss_kib().saturating_sub(rss_before);
    assert!(verdict.is_none());

    let baseline = time(rounds, || {
        tail.lines().filter(|l| l.contains("out of memory")).count()
    });
    let classify = time(rounds, || oomguard::api::classify::classify_text(&tail));
    println!(
        "classifying a 256 KiB tail ({} bytes, median of {rounds}):",
        tail.len()
    );
    println!(
        "  hang watch's prescreen of it without the OOM line, first read: {prescreen_first:>10.2?} (+{prescreen_kib} KiB resident)"
    );
    println!("  the same, later reads:         {:>10.2?}", prescreen);
    println!(
        "  prescreen / baseline:          {:>10.1}x",
        prescreen.as_secs_f64() / baseline.as_secs_f64()
    );
    println!("  signature table compiled once: {compile:>10.2?} (+{table_kib} KiB resident)");
    println!("  baseline (contains per line):  {:>10.2?}", baseline);
    println!("  classify_text:                 {:>10.2?}", classify);
    println!(
        "  classify / baseline:           {:>10.1}x",
        classify.as_secs_f64() / baseline.as_secs_f64()
    );
}
