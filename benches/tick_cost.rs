//! The per-tick cost of watching a job's memory against the job's process count (1, 16, 128)
//! and size (small processes, and 256 MiB each): the tree walk (`children` files), the
//! per-process reads (`statm`/`status`), the PSS read (`smaps_rollup`), and, where this machine
//! lets us make a memory cgroup, the cgroup's own counters (usage + `memory.stat`, read and
//! parsed) and its `cgroup.procs`; then one whole `Sampler::sample` tick with and without the
//! cgroup. Prints µs per tick and the ratio cgroup / per-process; asserts nothing about speed.
//!
//! The job is `bench/tree.py` (the fixture `bench/run.sh` watches too), run inside a new memory
//! cgroup below our own where we can make one (root on v1 or a delegated v2 tree); otherwise the
//! cgroup rows are skipped with a printed reason.
//!
//! `cargo bench --bench tick_cost` runs it in full. Without `--bench` (as `cargo test
//! --all-targets` runs it) it does a quick pass on trees of 1 and 2 small processes.

mod common;
use common::micros_per_call;

use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use oomguard::api::cgroup::{JobCgroup, Limits, Parent};
use oomguard::api::gpu::{GpuError, GpuProbe, GpuSnapshot};
use oomguard::api::mem::read_tree;
use oomguard::api::mem::ProcReader;
use oomguard::api::mem::ProcTree;
use oomguard::api::sampler::Sampler;

const MIB: u64 = 1 << 20;

/// A machine without GPUs, so the whole-tick rows time memory reads only.
struct NoGpu;

impl GpuProbe for NoGpu {
    fn describe(&self) -> String {
        "no GPU (benchmark)".to_string()
    }
    fn snapshot(&mut self) -> Result<GpuSnapshot, GpuError> {
        Ok(GpuSnapshot::default())
    }
}

/// A running `bench/tree.py`: `count` processes of `bytes` each, in `cgroup` if given. Stopped
/// (SIGTERM, which ends its children too) and reaped on drop.
struct Tree {
    child: Child,
    root_pid: u32,
}

impl Tree {
    fn spawn(count: usize, bytes: u64, cgroup: Option<&JobCgroup>) -> Tree {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/tree.py");
        let mut cmd = Command::new("python3");
        cmd.args([script, &count.to_string(), &bytes.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if let Some(cgroup) = cgroup {
            let procs = cgroup
                .open_procs()
                .expect("cgroup.procs of our new cgroup opens");
            // SAFETY: join_from_child is a single write(2), async-signal-safe, no allocation.
            unsafe {
                cmd.pre_exec(move || JobCgroup::join_from_child(procs.as_fd()));
            }
        }
        let mut child = cmd.spawn().expect("python3 runs bench/tree.py");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout is piped"))
            .read_line(&mut line)
            .expect("tree.py writes its ready line");
        assert!(line.starts_with("ready "), "tree.py said {line:?}");
        let root_pid = child.id();
        Tree { child, root_pid }
    }

    /// The tree as oomguard finds it without a cgroup: the root and its descendants.
    fn walk(&self) -> Vec<u32> {
        let mut pids = vec![self.root_pid];
        pids.extend(ProcTree::default().descendants(self.root_pid));
        pids
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.root_pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// A memory cgroup below our own for the trees, or why there is none.
fn bench_cgroup() -> Result<Parent, String> {
    let parent = Parent::detect_current().map_err(|e| e.to_string())?;
    parent.prepare().map_err(|e| e.to_string())?;
    Ok(parent)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    // (processes, bytes each): small processes hold only the interpreter (~10 MiB RSS, most of
    // it shared with the parent after fork); the 256 MiB ones add their own anonymous memory.
    let shapes: &[(usize, u64)] = if full {
        &[(1, 0), (16, 0), (128, 0), (1, 256 * MIB), (16, 256 * MIB)]
    } else {
        &[(1, 0), (2, 0)]
    };
    let (min_iters, min_time) = if full {
        (50, Duration::from_secs(1))
    } else {
        (3, Duration::ZERO)
    };
    let parent = bench_cgroup();
    if let Err(why) = &parent {
        println!("SKIPPED cgroup rows: no memory cgroup we can make: {why}");
    }
    let reader = ProcReader::default();
    println!("per tick, µs (tree = bench/tree.py; PSS = smaps_rollup of every process):");
    println!(
        "  {:>5} {:>9} | {:>8} {:>9} {:>9} | {:>9} {:>8} {:>10} | {:>10} {:>10}",
        "procs",
        "each",
        "walk",
        "statm+st",
        "+PSS",
        "cg count",
        "cg procs",
        "cg/per-pr",
        "tick nocg",
        "tick cg"
    );
    for (n, &(count, bytes)) in shapes.iter().enumerate() {
        let cgroup = parent.as_ref().ok().map(|p| {
            p.create_child(
                &format!("oomguard-bench-{}-{n}", std::process::id()),
                &Limits::default(),
            )
            .expect("a child of our own memory cgroup can be made")
        });
        let tree = Tree::spawn(count, bytes, cgroup.as_ref());
        let pids = tree.walk();
        assert_eq!(pids.len(), count, "tree.py made {pids:?}");

        let walk = micros_per_call(min_iters, min_time, || {
            black_box(tree.walk());
        });
        let cheap = micros_per_call(min_iters, min_time, || {
            black_box(read_tree(&reader, black_box(&pids), false));
        });
        let with_pss = micros_per_call(min_iters, min_time, || {
            black_box(read_tree(&reader, black_box(&pids), true));
        });
        let mut sampler = Sampler::new(Box::new(NoGpu));
        let tick_nocg = micros_per_call(min_iters, min_time, || {
            black_box(sampler.sample(1, &tree.walk(), None));
        });
        let per_process = walk + cheap;
        let size = if bytes == 0 {
            "small".to_string()
        } else {
            format!("{} MiB", bytes / MIB)
        };
        let tree_mem = read_tree(&reader, &pids, true);
        match &cgroup {
            Some(cg) => {
                assert_eq!(cg.pids().len(), count, "the whole tree is in the cgroup");
                let counters = micros_per_call(min_iters, min_time, || {
                    black_box(cg.memory());
                });
                let procs = micros_per_call(min_iters, min_time, || {
                    black_box(cg.tree_pids());
                });
                let mut sampler = Sampler::new(Box::new(NoGpu));
                let tick_cg = micros_per_call(min_iters, min_time, || {
                    black_box(sampler.sample(1, &cg.tree_pids(), Some(cg)));
                });
                println!(
                    "  {count:>5} {size:>9} | {walk:>8.1} {cheap:>9.1} {with_pss:>9.1} | \
                     {counters:>9.1} {procs:>8.1} {:>9.3}x | {tick_nocg:>10.1} {tick_cg:>10.1}",
                    (counters + procs) / per_process,
                );
                println!(
                    "  {:>15}   RSS {} MiB, PSS {} MiB, cgroup usage {} MiB",
                    "",
                    tree_mem.rss_bytes / MIB,
                    tree_mem.pss_bytes.unwrap_or(0) / MIB,
                    cg.memory().map_or(0, |m| m.usage_bytes) / MIB,
                );
            }
            None => println!(
                "  {count:>5} {size:>9} | {walk:>8.1} {cheap:>9.1} {with_pss:>9.1} | \
                 {:>9} {:>8} {:>10} | {tick_nocg:>10.1} {:>10}",
                "-", "-", "-", "-"
            ),
        }
        drop(tree);
        if let Some(cg) = cgroup {
            cg.remove()
                .expect("the bench cgroup empties and is removed");
        }
    }
    println!(
        "  walk = children files from the root; statm+st = statm and status of each process; \
         +PSS = the same plus smaps_rollup;\n  cg count = usage + memory.stat (read and parsed); \
         cg procs = cgroup.procs; cg/per-pr = (cg count + cg procs) / (walk + statm+st);\n  \
         tick = a whole tick as the supervisor runs it: the PIDs found (tree walk, or \
         cgroup.procs), then one Sampler::sample (system memory, no GPU)"
    );
}
