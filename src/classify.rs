//! Decides why one attempt of a job ended: out of accelerator memory, out of host memory,
//! a DataLoader worker killed, the kernel's OOM killer, an unexplained SIGKILL, an ordinary
//! failure, or a stop the user or oomguard itself asked for.
//!
//! This module only weighs evidence that is handed to it: the [`Ending`], a tail of the
//! output, and kernel counters the caller read around the attempt. Recognising signatures in
//! text is `scan`'s job; collecting the evidence and acting on the verdict (relaunching with a
//! smaller batch) belong to the supervisor.

use crate::outcome::Ending;
use crate::scan::{self, Family, Finding};
use regex::Regex;
use std::sync::OnceLock;

/// Why an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Exit status 0.
    Ok,
    /// The process reported running out of accelerator memory.
    DeviceOom,
    /// The process reported running out of host memory.
    HostOom,
    /// A DataLoader worker was killed (SIGKILL/SIGBUS) or shared memory ran out under it.
    WorkerKilled,
    /// The kernel's (or Slurm's) OOM enforcement killed the job.
    OomKilled,
    /// The job died of SIGKILL and nothing says who sent it.
    Killed,
    /// Any other non-zero exit or fatal signal.
    Failed,
    /// The user asked the job to stop (SIGINT/SIGTERM to oomguard).
    Interrupted,
    /// oomguard stopped the job itself for crossing a configured memory bound.
    MemoryLimit,
}

impl Cause {
    /// The snake_case name used in summaries and on the command line, e.g. `"device_oom"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Ok => "ok",
            Cause::DeviceOom => "device_oom",
            Cause::HostOom => "host_oom",
            Cause::WorkerKilled => "worker_killed",
            Cause::OomKilled => "oom_killed",
            Cause::Killed => "killed",
            Cause::Failed => "failed",
            Cause::Interrupted => "interrupted",
            Cause::MemoryLimit => "memory_limit",
        }
    }

    /// Whether the cause is (or is most likely) memory pressure, so the job is worth
    /// relaunching with a smaller batch. An unexplained SIGKILL counts: on a training machine
    /// it is almost always an OOM killer whose record we could not see.
    pub fn is_memory(self) -> bool {
        matches!(
            self,
            Cause::DeviceOom
                | Cause::HostOom
                | Cause::WorkerKilled
                | Cause::OomKilled
                | Cause::Killed
                | Cause::MemoryLimit
        )
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Evidence from the kernel gathered around one attempt.
#[derive(Debug, Clone, Default)]
pub struct KernelEvidence {
    /// `/proc/vmstat` `oom_kill` after the attempt minus before; `None` if unreadable.
    pub vmstat_oom_kill_delta: Option<u64>,
    /// Kernel log lines naming a PID of the job's process tree as an OOM victim (already
    /// filtered by the caller, e.g. with [`scan::kernel_oom_victim_pid`]).
    pub victim_lines: Vec<String>,
    /// The job's own memory cgroup `oom_kill` counter delta, when it had one.
    pub cgroup_oom_kills: Option<u64>,
}

/// Everything known about how one attempt ended.
pub struct AttemptFacts<'a> {
    /// How the job's main process ended.
    pub ending: Ending,
    /// A bounded tail of the attempt's stdout and stderr.
    pub tail: &'a str,
    /// Kernel evidence gathered around the attempt.
    pub kernel: &'a KernelEvidence,
    /// The user sent SIGINT/SIGTERM: the verdict is always [`Cause::Interrupted`].
    pub user_stopped: bool,
    /// `Some(description)` when oomguard itself stopped the job for crossing a memory bound:
    /// the verdict is [`Cause::MemoryLimit`] with that description as evidence.
    pub memory_limit: Option<&'a str>,
}

/// A cause with one short line of human-readable evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Why the attempt ended.
    pub cause: Cause,
    /// One short line saying why we think so, e.g.
    /// `exit 1; output: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."`.
    pub evidence: String,
}

impl Verdict {
    fn new(cause: Cause, evidence: String) -> Self {
        Verdict { cause, evidence }
    }
}

/// Longest quoted output in an evidence line, in characters.
const QUOTE_MAX: usize = 200;

/// A line of output quoted for evidence. A long line is cut at the last sentence end that
/// fits in [`QUOTE_MAX`] characters (so "CUDA out of memory. Tried to allocate 2.00 GiB." stays
/// whole), or hard at [`QUOTE_MAX`] when no sentence ends late enough to say something.
fn quote(line: &str) -> String {
    let line: String = line
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.chars().count() <= QUOTE_MAX {
        return format!("\"{line}\"");
    }
    let limit = line
        .char_indices()
        .nth(QUOTE_MAX)
        .map_or(line.len(), |(i, _)| i);
    let head = &line[..limit];
    match head.rfind(". ") {
        Some(dot) if dot >= 60 => format!("\"{}\"", &head[..=dot]),
        _ => format!("\"{}…\"", head.trim_end()),
    }
}

fn output(f: &Finding) -> String {
    format!("output: {}", quote(&f.line))
}

fn last_of<'f>(found: &'f [(usize, Finding)], families: &[Family]) -> Option<&'f (usize, Finding)> {
    found
        .iter()
        .rev()
        .find(|(_, f)| families.contains(&f.family))
}

fn is_sigkill(ending: Ending) -> bool {
    // A shell or init wrapper (bash -c, tini) reports its child's SIGKILL as status 137.
    matches!(
        ending,
        Ending::Signaled { signal: 9, .. } | Ending::Exited(137)
    )
}

/// What the kernel says, when it says the job was OOM-killed: cgroup counter, or the global
/// counter moved *and* a kernel line names one of the job's PIDs.
fn kernel_oom(k: &KernelEvidence) -> Option<String> {
    let victim = k.victim_lines.last().map(|l| format!("kmsg: {}", quote(l)));
    if let Some(n) = k.cgroup_oom_kills.filter(|&n| n > 0) {
        let mut ev = format!("cgroup oom_kill +{n}");
        if let Some(v) = victim {
            ev.push_str("; ");
            ev.push_str(&v);
        }
        return Some(ev);
    }
    let victim = victim?;
    match k.vmstat_oom_kill_delta {
        // A victim line with the counter standing still is a stale or misattributed line.
        Some(0) => None,
        Some(n) => Some(format!("kernel oom_kill +{n}; {victim}")),
        None => Some(format!("kernel oom_kill counter unreadable; {victim}")),
    }
}

/// The note added to a SIGKILL without OOM evidence, so a reader knows what was checked.
fn kernel_note(k: &KernelEvidence) -> String {
    match k.vmstat_oom_kill_delta {
        Some(0) => "kernel oom_kill +0".to_string(),
        Some(n) => format!(
            "kernel oom_kill +{n} but no kernel line names this job's PIDs (another process may have been the victim)"
        ),
        None => "kernel oom_kill counter unreadable".to_string(),
    }
}

/// A Python exception line that ends a traceback: `ValueError: ...`, `torch.AcceleratorError: ...`.
fn exception_line() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::\s|:?$)")
            .expect("exception pattern compiles")
    })
}

/// Exceptions that only wrap a failure reported above them (a launcher's or a pool's): they
/// never tell a different story than the finding they follow.
fn wrapper_exception() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"ChildFailedError|ProcessRaisedException|ProcessExitedException|CalledProcessError|BrokenProcessPool|RayTaskError|DataLoader worker|^Exception:?\s*$",
        )
        .expect("wrapper pattern compiles")
    })
}

/// When the output's last memory finding was followed by a different, unrelated exception, the
/// OOM was caught (fairseq's "ran out of memory ... Skipping batch") and the job died of
/// something else. Returns that later exception line.
fn later_unrelated_error(tail: &str, finding_line: usize) -> Option<String> {
    let lines = scan::split_lines(tail);
    let (exc, wrap) = (exception_line(), wrapper_exception());
    lines
        .iter()
        .skip(finding_line + 1)
        .rev()
        .map(|l| scan::strip_prefixes(l).trim())
        .find(|l| exc.is_match(l) && !wrap.is_match(l) && scan::scan(l).is_empty())
        .map(str::to_string)
}

/// The last non-blank line of the output, for the evidence of an ordinary failure.
fn last_line(tail: &str) -> Option<&str> {
    scan::split_lines(tail)
        .into_iter()
        .map(|l| scan::strip_prefixes(l).trim())
        .rfind(|l| !l.is_empty())
}

/// Decides why one attempt ended.
///
/// In order: a user stop is [`Cause::Interrupted`]; oomguard's own memory bound is
/// [`Cause::MemoryLimit`]; exit 0 is [`Cause::Ok`]; kernel evidence naming the job is
/// [`Cause::OomKilled`] (or [`Cause::WorkerKilled`] when the output shows a DataLoader worker
/// killed and the main process exited with an error itself); then the output's findings, the
/// ones nearest the end winning; then SIGKILL is [`Cause::Killed`]; anything else is
/// [`Cause::Failed`].
pub fn classify(facts: &AttemptFacts) -> Verdict {
    let ending = facts.ending;
    if facts.user_stopped {
        return Verdict::new(Cause::Interrupted, format!("{ending}; stopped by the user"));
    }
    if let Some(limit) = facts.memory_limit {
        return Verdict::new(Cause::MemoryLimit, format!("{ending}; {limit}"));
    }
    if ending.is_success() {
        // Frameworks catch OOMs and carry on (accelerate, fairseq, TF's BFC warnings): a clean
        // exit is a success whatever the output said on the way.
        return Verdict::new(Cause::Ok, ending.to_string());
    }

    let found = scan::scan_positions(facts.tail);
    let worker = last_of(&found, &[Family::WorkerKilled]);

    if let Some(kernel) = kernel_oom(facts.kernel) {
        // The kernel killed a worker and the main process noticed and raised: the worker is
        // the useful part of the story (fewer workers or less shm may be the fix).
        if let (Some((_, w)), Ending::Exited(_)) = (worker, ending) {
            return Verdict::new(
                Cause::WorkerKilled,
                format!("{ending}; {}; {kernel}", output(w)),
            );
        }
        return Verdict::new(Cause::OomKilled, format!("{ending}; {kernel}"));
    }

    // Kernel or Slurm lines in the job's own output (e.g. the job is an srun/sbatch wrapper).
    if let Some((_, f)) = last_of(&found, &[Family::KernelOomKill, Family::SlurmOom]) {
        return Verdict::new(Cause::OomKilled, format!("{ending}; {}", output(f)));
    }
    if let Some((_, w)) = worker {
        return Verdict::new(Cause::WorkerKilled, format!("{ending}; {}", output(w)));
    }
    if let Some((at, f)) = last_of(&found, &[Family::DeviceOom, Family::HostOom]) {
        if let Some(later) = later_unrelated_error(facts.tail, *at) {
            return Verdict::new(
                Cause::Failed,
                format!(
                    "{ending}; output: {} (after a caught OOM: {})",
                    quote(&later),
                    quote(&f.line)
                ),
            );
        }
        let cause = if f.family == Family::DeviceOom {
            Cause::DeviceOom
        } else {
            Cause::HostOom
        };
        return Verdict::new(cause, format!("{ending}; {}", output(f)));
    }
    if is_sigkill(ending) {
        return Verdict::new(
            Cause::Killed,
            format!("{ending}; {}", kernel_note(facts.kernel)),
        );
    }
    // A launcher (torchrun, DeepSpeed) exits 1 after one of its children died of SIGKILL.
    if let Some((_, f)) = last_of(&found, &[Family::KilledBySigkill]) {
        return Verdict::new(
            Cause::Killed,
            format!("{ending}; {}; {}", output(f), kernel_note(facts.kernel)),
        );
    }
    let evidence = match last_line(facts.tail) {
        Some(line) => format!("{ending}; last output: {}", quote(line)),
        None => ending.to_string(),
    };
    Verdict::new(Cause::Failed, evidence)
}

/// Text alone (the `oomguard classify FILE` command): None means no OOM sign ("none").
///
/// Priority: kernel or Slurm OOM-kill text, then a killed DataLoader worker, then whichever of
/// accelerator or host OOM appears last, then a report of death by SIGKILL. A shell's own
/// `Killed` job-status line counts as [`Cause::OomKilled`] (see [`scan::is_shell_job_kill`]);
/// a launcher's `exitcode: -9` or `exit code 137` as [`Cause::Killed`].
pub fn classify_text(text: &str) -> Option<Verdict> {
    let found = scan::scan_positions(text);
    let verdict = |cause, f: &Finding| Some(Verdict::new(cause, output(f)));
    if let Some((_, f)) = last_of(&found, &[Family::KernelOomKill, Family::SlurmOom]) {
        return verdict(Cause::OomKilled, f);
    }
    if let Some((_, f)) = last_of(&found, &[Family::WorkerKilled]) {
        return verdict(Cause::WorkerKilled, f);
    }
    if let Some((_, f)) = last_of(&found, &[Family::DeviceOom, Family::HostOom]) {
        let cause = if f.family == Family::DeviceOom {
            Cause::DeviceOom
        } else {
            Cause::HostOom
        };
        return verdict(cause, f);
    }
    let kills: Vec<&Finding> = found
        .iter()
        .map(|(_, f)| f)
        .filter(|f| f.family == Family::KilledBySigkill)
        .collect();
    if let Some(f) = kills
        .iter()
        .rev()
        .find(|f| scan::is_shell_job_kill(&f.line))
    {
        return Some(Verdict::new(
            Cause::OomKilled,
            format!(
                "{} (a shell's job killed by SIGKILL it did not send: on Linux, the OOM killer)",
                output(f)
            ),
        ));
    }
    kills.last().and_then(|f| verdict(Cause::Killed, f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oom-corpus");

    fn name(v: &Option<Verdict>) -> &'static str {
        v.as_ref().map_or("none", |v| v.cause.as_str())
    }

    /// (text, class `classify_text` must give; "none" for no OOM sign).
    const TEXT_TABLE: &[(&str, &str)] = &[
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "device_oom"),
        ("MemoryError", "host_oom"),
        ("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\nAborted", "host_oom"),
        ("RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.", "worker_killed"),
        ("Memory cgroup out of memory: Killed process 15617 (python3) total-vm:11892kB", "oom_killed"),
        ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup.", "oom_killed"),
        ("line 28:  8156 Killed                  python3 main.py\nslurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup.", "oom_killed"),
        ("training...\nKilled", "oom_killed"),
        ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917)", "killed"),
        ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "killed"),
        // The later of device and host wins: the earlier one was caught.
        ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes\nRuntimeError: CUDA out of memory. Tried to allocate 1 GiB", "device_oom"),
        ("RuntimeError: CUDA out of memory. Tried to allocate 1 GiB\nMemoryError", "host_oom"),
        // TF on the CPU allocator is host memory.
        ("ResourceExhaustedError: OOM when allocating tensor with shape[25088,4096] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu", "host_oom"),
        // Traps.
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "none"),
        ("RuntimeError: DataLoader worker (pid 624) is killed by signal: Segmentation fault. ", "none"),
        ("E1223 05:18:02.971000 3304089 api.py:882] failed (exitcode: -11) local_rank: 0", "none"),
        ("slurmstepd: error: Exceeded job memory limit at some point.", "none"),
        ("W bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB with freed_by_count=0. The caller indicates that this is not a failure", "none"),
        ("zsh: terminated  ./run_rl_swarm.sh", "none"),
        ("", "none"),
    ];

    #[test]
    fn text_table() {
        let mut bad = Vec::new();
        for (text, want) in TEXT_TABLE {
            let got = classify_text(text);
            if name(&got) != *want {
                bad.push(format!("{text:?}: want {want}, got {got:?}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn corpus() {
        let expected =
            std::fs::read_to_string(format!("{CORPUS}/expected.tsv")).expect("expected.tsv");
        let mut accepted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in expected
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let (file, classes) = line.split_once('\t').expect("file<TAB>classes");
            accepted.insert(
                file.to_string(),
                classes.split(',').map(|c| c.trim().to_string()).collect(),
            );
        }
        let mut files: Vec<_> = std::fs::read_dir(CORPUS)
            .expect("corpus dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|n| n.ends_with(".txt"))
            .collect();
        files.sort();
        let mut bad = Vec::new();
        for file in &files {
            let text = std::fs::read(format!("{CORPUS}/{file}")).expect("corpus file");
            let got = classify_text(&String::from_utf8_lossy(&text));
            match accepted.get(file) {
                None => bad.push(format!("{file}: not in expected.tsv (got {})", name(&got))),
                Some(ok) if !ok.contains(name(&got)) => bad.push(format!(
                    "{file}: got {} ({:?}), accepted {ok:?}",
                    name(&got),
                    got.map(|v| v.evidence)
                )),
                Some(_) => {}
            }
        }
        for file in accepted.keys().filter(|f| !files.contains(f)) {
            bad.push(format!("{file}: listed in expected.tsv but missing"));
        }
        assert!(
            bad.is_empty(),
            "{} of {} corpus files misclassified:\n{}",
            bad.len(),
            files.len(),
            bad.join("\n")
        );
    }

    const SIGKILL: Ending = Ending::Signaled {
        signal: 9,
        core_dumped: false,
    };
    const SIGABRT: Ending = Ending::Signaled {
        signal: 6,
        core_dumped: true,
    };
    const CUDA_OOM: &str = "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 115.69 MiB is free.";
    const WORKER: &str = "RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed. \n\nRuntimeError: DataLoader worker (pid(s) 1817) exited unexpectedly";
    const VICTIM: &str = "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:11892kB, anon-rss:4292kB";

    struct Row {
        what: &'static str,
        ending: Ending,
        tail: &'static str,
        vmstat: Option<u64>,
        victim: bool,
        cgroup: Option<u64>,
        user_stopped: bool,
        memory_limit: Option<&'static str>,
        want: Cause,
        evidence_has: &'static str,
    }

    const BASE: Row = Row {
        what: "",
        ending: Ending::Exited(1),
        tail: "",
        vmstat: Some(0),
        victim: false,
        cgroup: None,
        user_stopped: false,
        memory_limit: None,
        want: Cause::Failed,
        evidence_has: "",
    };

    const FACTS_TABLE: &[Row] = &[
        Row { what: "exit 0 with a caught OOM", ending: Ending::Exited(0), tail: CUDA_OOM, want: Cause::Ok, evidence_has: "exit 0", ..BASE },
        Row { what: "SIGKILL, counter and victim line", ending: SIGKILL, vmstat: Some(1), victim: true, want: Cause::OomKilled, evidence_has: "kernel oom_kill +1; kmsg: \"Memory cgroup out of memory: Killed process 4242", ..BASE },
        Row { what: "SIGKILL, counter but no victim line", ending: SIGKILL, vmstat: Some(1), want: Cause::Killed, evidence_has: "another process may have been the victim", ..BASE },
        Row { what: "SIGKILL alone", ending: SIGKILL, want: Cause::Killed, evidence_has: "SIGKILL; kernel oom_kill +0", ..BASE },
        Row { what: "SIGKILL, counter unreadable", ending: SIGKILL, vmstat: None, want: Cause::Killed, evidence_has: "unreadable", ..BASE },
        Row { what: "cgroup counter", ending: SIGKILL, cgroup: Some(2), want: Cause::OomKilled, evidence_has: "cgroup oom_kill +2", ..BASE },
        Row { what: "exit 1 with CUDA OOM", tail: CUDA_OOM, want: Cause::DeviceOom, evidence_has: "exit 1; output: \"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", ..BASE },
        Row { what: "exit 1 with illegal memory access", tail: "RuntimeError: CUDA error: an illegal memory access was encountered", want: Cause::Failed, evidence_has: "illegal memory access", ..BASE },
        Row { what: "user stop beats OOM", ending: SIGKILL, tail: CUDA_OOM, vmstat: Some(1), victim: true, user_stopped: true, want: Cause::Interrupted, ..BASE },
        Row { what: "memory bound", ending: SIGKILL, memory_limit: Some("RSS 61.2 GiB > --max-rss 60 GiB"), want: Cause::MemoryLimit, evidence_has: "--max-rss", ..BASE },
        Row { what: "worker killed, kernel evidence, exit 1", tail: WORKER, vmstat: Some(1), victim: true, want: Cause::WorkerKilled, evidence_has: "kernel oom_kill +1", ..BASE },
        Row { what: "worker text but main process SIGKILLed", ending: SIGKILL, tail: WORKER, vmstat: Some(1), victim: true, want: Cause::OomKilled, ..BASE },
        Row { what: "worker killed, no kernel evidence", tail: WORKER, want: Cause::WorkerKilled, evidence_has: "is killed by signal: Killed", ..BASE },
        Row { what: "SIGABRT with bad_alloc", ending: SIGABRT, tail: "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc", want: Cause::HostOom, evidence_has: "SIGABRT (core dumped); output: \"what():  std::bad_alloc\"", ..BASE },
        Row { what: "caught OOM, then an unrelated error", tail: "| WARNING: ran out of memory with exception: CUDA out of memory. Tried to allocate 20.00 MiB; Skipping batch\nTraceback (most recent call last):\n  File \"t.py\", line 1\n    f()\nValueError: Expected input batch_size (4) to match target batch_size (1).", want: Cause::Failed, evidence_has: "after a caught OOM", ..BASE },
        Row { what: "OOM re-raised through a launcher wrapper", tail: "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", want: Cause::DeviceOom, ..BASE },
        Row { what: "launcher exit 1 after child -9", tail: "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917)", want: Cause::Killed, evidence_has: "exitcode: -9", ..BASE },
        Row { what: "Slurm text in the output", tail: "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup.", want: Cause::OomKilled, ..BASE },
        Row { what: "plain failure", tail: "FileNotFoundError: [Errno 2] No such file or directory: 'x'", want: Cause::Failed, evidence_has: "last output: \"FileNotFoundError", ..BASE },
        Row { what: "victim line but counter did not move", ending: SIGKILL, victim: true, want: Cause::Killed, ..BASE },
    ];

    #[test]
    fn facts_table() {
        let mut bad = Vec::new();
        for row in FACTS_TABLE {
            let kernel = KernelEvidence {
                vmstat_oom_kill_delta: row.vmstat,
                victim_lines: if row.victim {
                    vec![VICTIM.to_string()]
                } else {
                    vec![]
                },
                cgroup_oom_kills: row.cgroup,
            };
            let facts = AttemptFacts {
                ending: row.ending,
                tail: row.tail,
                kernel: &kernel,
                user_stopped: row.user_stopped,
                memory_limit: row.memory_limit,
            };
            let v = classify(&facts);
            if v.cause != row.want || !v.evidence.contains(row.evidence_has) {
                bad.push(format!(
                    "{}: want {:?} with {:?}, got {v:?}",
                    row.what, row.want, row.evidence_has
                ));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn cause_names_round_trip() {
        let all = [
            Cause::Ok,
            Cause::DeviceOom,
            Cause::HostOom,
            Cause::WorkerKilled,
            Cause::OomKilled,
            Cause::Killed,
            Cause::Failed,
            Cause::Interrupted,
            Cause::MemoryLimit,
        ];
        for c in all {
            let json = serde_json::to_string(&c).expect("serialize");
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(
                serde_json::from_str::<Cause>(&json).expect("deserialize"),
                c
            );
            assert_eq!(
                c.is_memory(),
                !matches!(c, Cause::Ok | Cause::Failed | Cause::Interrupted)
            );
        }
    }
}
