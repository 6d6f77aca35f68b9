//! `oomguard doctor`: what this machine allows and what oomguard will use — cgroup version and
//! whether attempt cgroups can really be made, the kernel log, /proc/vmstat, memory pressure
//! (PSI), NVML and its devices — and the per-tick sampling cost measured on the spot.
//!
//! It only looks, with one exception: to know that attempt cgroups can really be made it makes
//! one and removes it at once — and on cgroup v2 that first enables the memory controller for
//! its cgroup's children, as a run would (see `cgroup::Parent::prepare`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::observe::cgroup::{self, Parent, Version};
use crate::observe::gpu;
use crate::observe::kernel::{self, Kmsg};
use crate::observe::mem::process::ProcReader;
use crate::observe::mem::system::{self, SystemReader};
use crate::observe::mem::tree::ProcTree;
use crate::observe::mem::tree_mem::read_tree;
use crate::output::console::Reporter;

/// One finding: what was checked, and what it means for a run.
pub struct Check {
    pub what: &'static str,
    pub finding: String,
}

/// Runs every check and prints them; always exits 0 (a missing feature is information).
/// With `config`, also whom that job file's hooks and file edits would run as.
pub fn run(report: Reporter, config: Option<&Path>, command: &[std::ffi::OsString]) -> i32 {
    let mut checks = checks();
    if let Some(path) = config {
        checks.push(Check {
            what: "job file",
            finding: acting_finding(path),
        });
    }
    if !command.is_empty() {
        checks.push(Check {
            what: "knobs",
            finding: knobs_finding(command),
        });
    }
    let width = checks.iter().map(|c| c.what.len()).max().unwrap_or(0);
    for c in &checks {
        let mut lines = c.finding.lines();
        report.out(&format!(
            "{:<width$}  {}",
            c.what,
            lines.next().unwrap_or("")
        ));
        for more in lines {
            report.out(&format!("{:<width$}  {more}", ""));
        }
    }
    0
}

/// Every check, in the order printed.
pub fn checks() -> Vec<Check> {
    let mut out = vec![Check {
        what: "machine",
        finding: system::machine_summary(),
    }];
    out.push(Check {
        what: "memory cgroup",
        finding: cgroup_finding(),
    });
    let kmsg = match Kmsg::open_at_end(Path::new("/dev/kmsg")) {
        Some(_) => "readable: kernel OOM kills are attributed to the job's PIDs".to_string(),
        None => "not readable (needs root or kernel.dmesg_restrict=0): without a cgroup, a SIGKILL is reported as `killed`".to_string(),
    };
    out.push(Check {
        what: "kernel log",
        finding: kmsg,
    });
    let vmstat = match kernel::read_vmstat_oom_kill(Path::new("/proc/vmstat")) {
        Some(n) => format!("oom_kill counter readable ({n} kills since boot)"),
        None => "no oom_kill counter (kernel < 4.13)".to_string(),
    };
    out.push(Check {
        what: "/proc/vmstat",
        finding: vmstat,
    });
    let psi = if SystemReader::default().psi_available() {
        "present: memory pressure is sampled"
    } else {
        "absent (kernel without CONFIG_PSI or psi=0): no pressure numbers"
    };
    out.push(Check {
        what: "PSI",
        finding: psi.to_string(),
    });
    let (mut probe, off) = gpu::open();
    let gpu = match off {
        Some(reason) => reason,
        None => probe.describe(),
    };
    out.push(Check {
        what: "GPU",
        finding: gpu,
    });
    if let Ok(snap) = probe.snapshot() {
        let shares = gpu::attribute(&snap, &std::collections::HashSet::new());
        for card in &shares.devices {
            out.push(Check {
                what: "GPU card",
                finding: format!(
                    "{}: {} free of {}; {} held by {} process{}, {} by the driver",
                    card.index,
                    crate::observe::units::human_bytes(card.free_bytes()),
                    crate::observe::units::human_bytes(card.total_bytes),
                    crate::observe::units::human_bytes(card.neighbours_bytes),
                    card.neighbours.len(),
                    if card.neighbours.len() == 1 { "" } else { "es" },
                    crate::observe::units::human_bytes(card.driver_bytes),
                ),
            });
        }
    }
    out.push(Check {
        what: "GPU room claims",
        finding: crate::decide::room::claims::shared_finding(),
    });
    out.push(Check {
        what: "sampling cost",
        finding: sampling_cost(probe.as_mut()),
    });
    out
}

fn cgroup_finding() -> String {
    let parent = match Parent::detect_current() {
        Ok(parent) => parent,
        Err(why) => {
            return format!("unavailable: {why}; --memory-max will refuse to start, all else works")
        }
    };
    let version = match parent.version {
        Version::V1 => "v1",
        Version::V2 => "v2",
    };
    let name = format!("oomguard-doctor-{}", std::process::id());
    match parent.create_child(&name, &cgroup::Limits::default()) {
        Ok(probe) => {
            let removed = probe.remove().is_ok();
            format!(
                "{version} at {}: attempt cgroups can be made{}; --memory-max works",
                parent.dir.display(),
                if removed {
                    ""
                } else {
                    " (the probe could not be removed)"
                }
            )
        }
        Err(e) => format!(
            "{version} at {}, but a child cannot be made: {e}",
            parent.dir.display()
        ),
    }
}

/// The cost of one tick on a 1-process tree (oomguard itself), with and without PSS, and of a
/// GPU snapshot; the same numbers grow linearly with the job's processes.
fn sampling_cost(gpu: &mut dyn gpu::GpuProbe) -> String {
    const ROUNDS: u32 = 50;
    let procs = ProcReader::default();
    let tree = ProcTree::default();
    let me = std::process::id();
    let time = |f: &mut dyn FnMut()| -> Duration {
        let start = Instant::now();
        for _ in 0..ROUNDS {
            f();
        }
        start.elapsed() / ROUNDS
    };
    let walk = time(&mut || {
        std::hint::black_box(tree.descendants(me));
    });
    let cheap = time(&mut || {
        std::hint::black_box(read_tree(&procs, &[me], false));
    });
    let pss = time(&mut || {
        std::hint::black_box(read_tree(&procs, &[me], true));
    });
    let system = time(&mut || {
        std::hint::black_box(SystemReader::default().read());
    });
    let gpu_cost = time(&mut || {
        let _ = std::hint::black_box(gpu.snapshot());
    });
    format!(
        "per tick for a 1-process tree: walk {} + memory {} (+{} with PSS) + system {} + GPU {}; \
         memory and PSS grow with each process of the job",
        micros(walk),
        micros(cheap),
        micros(pss.saturating_sub(cheap)),
        micros(system),
        micros(gpu_cost)
    )
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}
/// Whom a job file's hooks and file edits run as, or why it would be refused (see
/// [`crate::guard::principal`] and README's "Security model").
pub fn acting_finding(path: &Path) -> String {
    let file = match crate::front::jobfile::load(path, &crate::front::cli::run_command()) {
        Ok(file) => file,
        Err(e) => return format!("refused: {e}"),
    };
    let context = match crate::front::runas::JobContext::prepare(path, &file.job) {
        Ok(context) => context,
        Err(e) => return format!("refused: {e}"),
    };
    let me = nix::unistd::User::from_uid(nix::unistd::Uid::effective())
        .ok()
        .flatten()
        .map_or_else(|| nix::unistd::Uid::effective().to_string(), |u| u.name);
    let Some(who) = &context.run_as else {
        return format!("the job, its hooks and every file edit run as {me} (oomguard's own user)");
    };
    let paths = match context.writers {
        crate::guard::ownership::Writers::User => format!(
            "{} can write the job file, so its run_dir, state_dir and metrics_textfile are used as {}",
            who.name, who.name
        ),
        crate::guard::ownership::Writers::Root => format!(
            "only root can write the job file, so its run_dir, state_dir and metrics_textfile are used as {me}"
        ),
    };
    format!(
        "the job, its hooks, knob files, __pycache__ and checkpoints run as {} (uid {}, gid {})\n{paths}",
        who.name, who.uid, who.gid
    )
}

/// Where a training command keeps its batch and accumulation, found as `oomguard run` finds
/// them with no knob flag (in the current directory), one line each; or why nothing was found.
fn knobs_finding(command: &[std::ffi::OsString]) -> String {
    let cwd = match std::env::current_dir() {
        Ok(cwd) => cwd,
        Err(e) => return format!("cannot read the current directory: {e}"),
    };
    let request = crate::knobs::resolve::Request::plain(command, &cwd);
    match crate::knobs::resolve::resolve(&request) {
        Err(e) => format!("{e}"),
        Ok(set) => {
            let mut lines: Vec<String> = set
                .knobs
                .iter()
                .enumerate()
                .map(|(i, k)| format!("{} {}: {}", k.name, set.label(i), k.original))
                .collect();
            lines.extend(set.notes.iter().cloned());
            if set.batch().is_none() {
                // `oomguard run` looks inside a Python job unless `--no-probe`.
                let then = match crate::probe::runs_python(command) {
                    true => crate::knobs::READ_INSIDE,
                    false => crate::knobs::NAME_THE_BATCH,
                };
                lines.push(format!("{}: {then}", crate::knobs::NO_BATCH));
            }
            lines.join("\n")
        }
    }
}
