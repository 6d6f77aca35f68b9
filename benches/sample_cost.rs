//! The per-tick cost of sampling a job's memory: `read_tree` without and with PSS, on a tree of
//! 1 and of 16 python3 processes that each hold 50 MiB; then, for the record behind the choices
//! in `mem::process` and `mem::system`, the cost of each single read and of the procfs crate's
//! equivalents. Prints microseconds; asserts nothing about speed.
//!
//! `cargo bench --bench sample_cost` runs it in full. Without `--bench` (as `cargo test
//! --all-targets` runs it) it does a quick run: 1 process, 10 iterations.

mod common;
use common::micros_per_call;

use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use oomguard::api::mem::read_tree;
use oomguard::api::mem::ProcReader;
use oomguard::api::mem::ProcTree;
use oomguard::api::mem::SystemReader;

/// Allocates and touches 50 MiB, says `ready`, then blocks until stdin closes.
const HOLDER_PY: &str = "
import os, sys
n = 50 << 20
buf = bytearray(n)
for i in range(0, n, 4096):
    buf[i] = 1
sys.stdout.write('ready\\n')
sys.stdout.flush()
os.read(0, 1)
";

/// Python processes holding memory; closing their stdin ends them, and they are reaped on drop.
struct Holders(Vec<Child>);

impl Holders {
    fn spawn(count: usize) -> Holders {
        let mut holders = Holders(Vec::new());
        for _ in 0..count {
            let child = Command::new("python3")
                .args(["-c", HOLDER_PY])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3 runs");
            holders.0.push(child);
        }
        for child in &mut holders.0 {
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line, "ready\n");
        }
        holders
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        for child in &mut self.0 {
            drop(child.stdin.take());
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

/// A named single read to time.
type Row<'a> = (&'static str, Box<dyn FnMut() + 'a>);

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (sizes, min_iters, min_time): (&[usize], u32, Duration) = if full {
        (&[1, 16], 100, Duration::from_secs(2))
    } else {
        (&[1], 10, Duration::ZERO)
    };
    let reader = ProcReader::default();

    println!("read_tree per tick (each process holds 50 MiB of its own):");
    for &size in sizes {
        let holders = Holders::spawn(size);
        let pids = holders.pids();
        let tree = read_tree(&reader, &pids, true);
        assert_eq!(tree.processes as usize, size, "{tree:?}");
        let cheap = micros_per_call(min_iters, min_time, || {
            black_box(read_tree(&reader, black_box(&pids), false));
        });
        let costly = micros_per_call(min_iters, min_time, || {
            black_box(read_tree(&reader, black_box(&pids), true));
        });
        let walk = micros_per_call(min_iters, min_time, || {
            black_box(ProcTree::default().descendants(std::process::id()));
        });
        println!(
            "  {size:>2} processes: {cheap:>9.1} µs without PSS, {costly:>9.1} µs with PSS \
             (x{:.1}); tree walk {walk:.1} µs; RSS {} MiB, PSS {} MiB",
            costly / cheap,
            tree.rss_bytes >> 20,
            tree.pss_bytes.unwrap_or(0) >> 20,
        );
    }

    if !full {
        return;
    }
    // Single reads of one small process (this one), hand parsing against procfs.
    let me = std::process::id();
    let proc_dir = Path::new("/proc").join(me.to_string());
    let rows: Vec<Row> = vec![
        (
            "statm, read + hand parse (read_rss_bytes)",
            Box::new(|| {
                black_box(reader.read_rss_bytes(me));
            }),
        ),
        (
            "status, read + hand parse (read)",
            Box::new(|| {
                black_box(reader.read(me));
            }),
        ),
        (
            "statm + status, both by hand",
            Box::new(|| {
                black_box(reader.read_rss_bytes(me));
                black_box(reader.read(me));
            }),
        ),
        (
            "status via procfs Process::status()",
            Box::new(|| {
                let process = procfs::process::Process::new_with_root(proc_dir.clone()).unwrap();
                black_box(process.status().unwrap().vmrss);
            }),
        ),
        (
            "statm via procfs Process::statm()",
            Box::new(|| {
                let process = procfs::process::Process::new_with_root(proc_dir.clone()).unwrap();
                black_box(process.statm().unwrap().resident);
            }),
        ),
        (
            "smaps_rollup, read only",
            Box::new(|| {
                black_box(std::fs::read_to_string(proc_dir.join("smaps_rollup")).unwrap());
            }),
        ),
        (
            "smaps_rollup, read + procfs parse (read_pss)",
            Box::new(|| {
                black_box(reader.read_pss(me));
            }),
        ),
        (
            "meminfo, read + hand parse",
            Box::new(|| {
                let text = std::fs::read_to_string("/proc/meminfo").unwrap();
                black_box(oomguard::api::mem::parse_meminfo(&text));
            }),
        ),
        (
            "meminfo + pressure, hand (SystemReader::read)",
            Box::new(|| {
                black_box(SystemReader::default().read());
            }),
        ),
        (
            "meminfo via procfs Meminfo",
            Box::new(|| {
                use procfs::Current;
                black_box(procfs::Meminfo::current().unwrap().mem_available);
            }),
        ),
    ];
    println!("single reads of this process / the machine:");
    for (name, mut f) in rows {
        let us = micros_per_call(min_iters, Duration::from_millis(500), &mut f);
        println!("  {name:<48} {us:>8.1} µs");
    }
}
