//! Decides why one attempt of a job ended: out of accelerator memory, out of host memory,
//! a DataLoader worker killed, the kernel's OOM killer, an unexplained SIGKILL, an ordinary
//! failure, or a stop the user or oomguard itself asked for; and, for `oomguard classify
//! --explain`, which lines and signature families decided and what came next.
//!
//! This module only weighs evidence that is handed to it: the [`Ending`], a tail of the output, and
//! kernel counters the caller read around the attempt. Reading text (signatures, and which lines of
//! a traceback are an error of the job's own) is [`crate::judge::scan`]'s job; collecting the
//! evidence and acting on the verdict (relaunching with a smaller batch) belong to the supervisor.

use crate::judge::outcome::{Cause, Ending};
use crate::judge::quiet::QuietStop;
use crate::judge::scan::lines::{
    kill_sent_by_someone, last_line, later_fatal_error, quote, skipped_and_went_on, slurm_cancel,
};
use crate::judge::scan::table::Family;
use crate::judge::scan::{self, Finding};
use crate::observe::cgroup_chain::ChainKill;

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
    /// A cgroup the job lived in (oomguard's own or one above it: a systemd unit or slice, a
    /// Slurm job, a container) whose OOM-kill counter moved during the attempt. Readable
    /// without privileges, unlike the kernel log; it counts kills of any process in it, so it
    /// names the job only together with a death by SIGKILL.
    pub cgroup_chain_kill: Option<ChainKill>,
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
    /// A process of the job other than the main one that oomguard reaped after it died of
    /// SIGKILL (before oomguard sent any SIGKILL itself): what makes a wrapper's exit status
    /// 137 a SIGKILL.
    pub sigkilled_descendant: Option<u32>,
    /// `Some` when oomguard itself stopped the job for going quiet (`--hang-timeout`,
    /// `--stall-timeout`): the verdict is that stop's cause.
    pub quiet_stop: Option<&'a QuietStop>,
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

fn output(f: &Finding) -> String {
    format!("output: {}", quote(&f.line))
}

fn last_of<'f>(found: &'f [(usize, Finding)], families: &[Family]) -> Option<&'f (usize, Finding)> {
    found
        .iter()
        .rev()
        .find(|(_, f)| families.contains(&f.family))
}

/// When the main process's ending is a death by SIGKILL, what shows it: `Some("")` for the
/// signal itself; for exit status 137 (what a shell or init wrapper reports when its child died
/// of SIGKILL) only a shell's own report of that in the output, or a process of the job that
/// oomguard reaped after it died of SIGKILL. A process may well `exit(137)` by itself, and that
/// is an ordinary failure.
fn sigkill_evidence(
    ending: Ending,
    sigkilled_descendant: Option<u32>,
    shell_kill: Option<&Finding>,
) -> Option<String> {
    match ending {
        Ending::Signaled { signal: 9, .. } => Some(String::new()),
        Ending::Exited(137) => match (sigkilled_descendant, shell_kill) {
            (_, Some(f)) => Some(format!("; {}", output(f))),
            (Some(pid), None) => Some(format!("; PID {pid} of the job died of SIGKILL")),
            (None, None) => None,
        },
        _ => None,
    }
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

/// What the output alone says about how the job died. Built once by [`read_text`], the one
/// reading of the text that both [`classify`] (a supervised attempt, which adds how it ended
/// and kernel evidence) and [`classify_text`] (`oomguard classify`) stand on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sign {
    /// The kernel's or Slurm's OOM enforcement speaks in the output.
    OomKillText(Finding),
    /// A DataLoader worker was killed, or shared memory ran out.
    Worker(Finding),
    /// Out of accelerator or host memory ([`Cause::DeviceOom`] / [`Cause::HostOom`]), and
    /// nothing says the job survived it.
    Memory(Cause, Finding),
    /// The job survived an out-of-memory error, then died of `later` (printed on line index
    /// `later_at` of the text).
    CaughtOom {
        oom: Finding,
        later: String,
        later_at: usize,
    },
    /// A shell's own report that its job died of SIGKILL (see [`scan::is_shell_job_kill`]).
    ShellKill(Finding),
    /// A launcher's or IDE's report of a SIGKILL (`exitcode: -9`, exit code 137), or a shell's
    /// where the text shows that someone sent it (see [`kill_sent_by_someone`]).
    LauncherKill(Finding),
}

/// The text's reading: the strongest sign, and two findings that other evidence may make
/// the better story.
struct Reading {
    sign: Option<Sign>,
    /// The last killed-worker finding: with kernel evidence, the worker is the useful part.
    worker: Option<Finding>,
    /// The last shell report of a SIGKILL: what turns an exit status 137 into a SIGKILL.
    shell_kill: Option<Finding>,
}

/// Reads the output. Priority: kernel or Slurm OOM-kill text, then a killed DataLoader
/// worker, then the out-of-memory error the job died of (or the one it survived before dying
/// of something else), then a report of death by SIGKILL (a shell's before a launcher's).
fn read_text(text: &str) -> Reading {
    read_findings(text, &scan::scan_positions(text))
}

/// [`read_text`] over findings already made (by [`scan::scan_positions`], or without one
/// family for the runner-up of [`explain_text`]).
fn read_findings(text: &str, found: &[(usize, Finding)]) -> Reading {
    let worker = last_of(found, &[Family::WorkerKilled]).map(|(_, f)| f.clone());
    let kills = || {
        found
            .iter()
            .map(|(_, f)| f)
            .filter(|f| f.family == Family::KilledBySigkill)
    };
    let shell_kill = kills().rfind(|f| scan::is_shell_job_kill(&f.line)).cloned();
    let sign = if let Some((_, f)) = last_of(found, &[Family::KernelOomKill, Family::SlurmOom]) {
        Some(Sign::OomKillText(f.clone()))
    } else if let Some(w) = &worker {
        Some(Sign::Worker(w.clone()))
    } else if let Some(sign) = memory_sign(text, found) {
        Some(sign)
    } else if let Some(f) = &shell_kill {
        Some(if kill_sent_by_someone(text, f) {
            Sign::LauncherKill(f.clone())
        } else {
            Sign::ShellKill(f.clone())
        })
    } else {
        kills().next_back().map(|f| Sign::LauncherKill(f.clone()))
    };
    Reading {
        sign,
        worker,
        shell_kill,
    }
}

/// The out-of-memory error the job died of, or else the one it survived and what it died of
/// instead. Each rank's last memory finding (untagged lines count as one rank) is its root
/// cause unless that rank printed a fatal error of its own later; across ranks, the first to
/// die of one is the root cause (the others' errors are its aftermath). Within one rank the
/// last finding wins: the job went on after the earlier ones.
fn memory_sign(text: &str, found: &[(usize, Finding)]) -> Option<Sign> {
    let lines = scan::split_lines(text);
    let mut last_per_rank: Vec<(Option<u32>, usize, &Finding)> = Vec::new();
    for (at, f) in found
        .iter()
        .filter(|(_, f)| matches!(f.family, Family::DeviceOom | Family::HostOom))
    {
        let rank = lines.get(*at).and_then(|l| scan::rank_of(l));
        match last_per_rank.iter_mut().find(|(r, ..)| *r == rank) {
            // Findings come in line order: a later one replaces its rank's earlier one.
            Some(slot) => *slot = (rank, *at, f),
            None => last_per_rank.push((rank, *at, f)),
        }
    }
    let mut fatal: Option<(usize, &Finding)> = None;
    let mut survived: Option<(usize, &Finding, (usize, String))> = None;
    for &(rank, at, f) in &last_per_rank {
        match later_fatal_error(&lines, at, rank) {
            // The job said it skipped the batch and nothing after shows it dying: it went on.
            None if skipped_and_went_on(&lines, at, rank) => {}
            None if fatal.is_none_or(|(first, _)| at < first) => fatal = Some((at, f)),
            Some(later) if survived.as_ref().is_none_or(|(last, ..)| at > *last) => {
                survived = Some((at, f, later))
            }
            _ => {}
        }
    }
    if let Some((_, f)) = fatal {
        let cause = if f.family == Family::DeviceOom {
            Cause::DeviceOom
        } else {
            Cause::HostOom
        };
        return Some(Sign::Memory(cause, f.clone()));
    }
    survived.map(|(_, oom, (later_at, later))| Sign::CaughtOom {
        oom: oom.clone(),
        later,
        later_at,
    })
}

/// The evidence of a caught OOM: the error the job died of, then the OOM it survived.
fn caught_evidence(oom: &Finding, later: &str) -> String {
    format!(
        "output: {} (after a caught OOM: {})",
        quote(later),
        quote(&oom.line)
    )
}

/// Decides why one attempt ended.
///
/// In order: a user stop is [`Cause::Interrupted`]; oomguard's own memory bound is
/// [`Cause::MemoryLimit`]; exit 0 is [`Cause::Ok`] (but [`Cause::Interrupted`] after a cancel
/// through Slurm); kernel evidence naming the job is
/// [`Cause::OomKilled`] (or [`Cause::WorkerKilled`] when the output shows a DataLoader worker
/// killed and the main process exited with an error itself); a death by SIGKILL while the
/// OOM-kill counter of a cgroup the job lives in moved is [`Cause::OomKilled`]; then what the
/// output says, read as [`classify_text`] reads it: an out-of-memory error or kill, else a
/// cancel through Slurm (`scancel`, see `scan::lines::slurm_cancel`) is [`Cause::Interrupted`],
/// else a survived OOM followed by a fatal error of the job's own is [`Cause::Failed`]; then a
/// death by SIGKILL is [`Cause::Killed`] (exit status 137 only when a shell's report or a
/// reaped process shows the SIGKILL); anything else is [`Cause::Failed`]. A shell's `Killed`
/// line alone is [`Cause::Killed`] here, not [`Cause::OomKilled`] as from text alone: with the
/// kernel's counters at hand, oomguard does not guess.
pub fn classify(facts: &AttemptFacts) -> Verdict {
    let ending = facts.ending;
    if facts.user_stopped {
        return Verdict::new(Cause::Interrupted, format!("{ending}; stopped by the user"));
    }
    if let Some(limit) = facts.memory_limit {
        return Verdict::new(Cause::MemoryLimit, format!("{ending}; {limit}"));
    }
    if let Some(stop) = facts.quiet_stop {
        return quiet_verdict(ending, stop);
    }
    // Someone cancelled the job through Slurm (`scancel`) where no signal reached oomguard
    // (srun made its own allocation): the user's stop, as a Ctrl-C is.
    let cancelled = || {
        slurm_cancel(facts.tail).map(|line| {
            Verdict::new(
                Cause::Interrupted,
                format!(
                    "{ending}; cancelled through Slurm; output: {}",
                    quote(&line)
                ),
            )
        })
    };
    if ending.is_success() {
        // Frameworks catch OOMs and carry on (accelerate, fairseq, TF's BFC warnings): a clean
        // exit is a success whatever the output said on the way. Not a trainer that saved and
        // exited 0 when a cancel stopped it: it did not finish, as under sbatch, where the
        // cancel reaches oomguard as SIGTERM.
        return cancelled().unwrap_or_else(|| Verdict::new(Cause::Ok, ending.to_string()));
    }

    let reading = read_text(facts.tail);
    if let Some(kernel) = kernel_oom(facts.kernel) {
        // The kernel killed a worker and the main process noticed and raised: the worker is
        // the useful part of the story (fewer workers or less shm may be the fix).
        if let (Some(w), Ending::Exited(_)) = (&reading.worker, ending) {
            return Verdict::new(
                Cause::WorkerKilled,
                format!("{ending}; {}; {kernel}", output(w)),
            );
        }
        return Verdict::new(Cause::OomKilled, format!("{ending}; {kernel}"));
    }
    let sigkill = sigkill_evidence(
        ending,
        facts.sigkilled_descendant,
        reading.shell_kill.as_ref(),
    );
    if let (Some(how), Some(chain)) = (&sigkill, &facts.kernel.cgroup_chain_kill) {
        // Without root the kernel log is closed, but the cgroups the job lives in count their
        // OOM kills in files anyone can read.
        return Verdict::new(Cause::OomKilled, format!("{ending}{how}; {chain}"));
    }
    match &reading.sign {
        // Kernel or Slurm lines in the job's own output (e.g. the job is an srun/sbatch wrapper).
        Some(Sign::OomKillText(f)) => {
            return Verdict::new(Cause::OomKilled, format!("{ending}; {}", output(f)))
        }
        Some(Sign::Worker(w)) => {
            return Verdict::new(Cause::WorkerKilled, format!("{ending}; {}", output(w)))
        }
        Some(Sign::Memory(cause, f)) => {
            return Verdict::new(*cause, format!("{ending}; {}", output(f)))
        }
        _ => {}
    }
    // No memory ran out: a cancel is why the job died.
    if let Some(verdict) = cancelled() {
        return verdict;
    }
    if let Some(Sign::CaughtOom { oom, later, .. }) = &reading.sign {
        return Verdict::new(
            Cause::Failed,
            format!("{ending}; {}", caught_evidence(oom, later)),
        );
    }
    if let Some(how) = sigkill {
        return Verdict::new(
            Cause::Killed,
            format!("{ending}{how}; {}", kernel_note(facts.kernel)),
        );
    }
    // A launcher (torchrun, DeepSpeed) exits 1 after one of its children died of SIGKILL.
    if let Some(Sign::ShellKill(f) | Sign::LauncherKill(f)) = &reading.sign {
        return Verdict::new(
            Cause::Killed,
            format!("{ending}; {}; {}", output(f), kernel_note(facts.kernel)),
        );
    }
    let ending_note = match ending {
        Ending::Exited(137) => {
            "exit 137 (the job's own status: no process of it was seen to die of SIGKILL)"
                .to_string()
        }
        _ => ending.to_string(),
    };
    let evidence = match last_line(facts.tail) {
        Some(line) => format!("{ending_note}; last output: {}", quote(line)),
        None => ending_note,
    };
    Verdict::new(Cause::Failed, evidence)
}

/// The verdict on a job oomguard stopped for going quiet: `signal 15 (SIGTERM); no output for
/// 1m after an out-of-memory error; output: "torch.OutOfMemoryError: CUDA out of memory..."`.
fn quiet_verdict(ending: Ending, stop: &QuietStop) -> Verdict {
    let evidence = match stop {
        QuietStop::HungAfterOom { oom_line, .. } => {
            format!("{ending}; {stop}; output: {}", quote(oom_line))
        }
        QuietStop::Stalled { .. } => format!("{ending}; {stop}"),
    };
    Verdict::new(stop.cause(), evidence)
}

/// The out-of-memory error a still-running job's output shows, read as [`classify`] reads a
/// dead job's output: a device or host OOM the job did not survive (not one it said it skipped
/// and went on from, nor one followed by a fatal error of its own), a killed DataLoader worker,
/// or the kernel's or Slurm's OOM kill. Returns its line. What `--hang-timeout` waits on after.
pub fn memory_error_shown(text: &str) -> Option<String> {
    // Most silent jobs printed nothing of the kind: the table's regexes stay uncompiled.
    if !scan::may_show_memory_error(text) {
        return None;
    }
    match read_text(text).sign? {
        Sign::Memory(_, f) | Sign::Worker(f) | Sign::OomKillText(f) => Some(f.line),
        Sign::CaughtOom { .. } | Sign::ShellKill(_) | Sign::LauncherKill(_) => None,
    }
}

/// Text alone (the `oomguard classify FILE` command): None means no OOM sign ("none").
///
/// The output is read as [`classify`] reads it (see `read_text`). An out-of-memory error the
/// job survived before dying of an error of its own is [`Cause::Failed`]. A shell's own
/// `Killed` job-status line counts as [`Cause::OomKilled`] (see [`scan::is_shell_job_kill`]);
/// a launcher's `exitcode: -9` or `exit code 137` as [`Cause::Killed`].
pub fn classify_text(text: &str) -> Option<Verdict> {
    verdict_of_text(read_text(text))
}

/// [`classify_text`] as if the table had no entries named in `without`: how the output reads
/// to a table that was never told about a family (the general rule still speaks).
#[cfg(test)]
pub(crate) fn classify_text_without(text: &str, without: &[&str]) -> Option<Verdict> {
    verdict_of_text(read_findings(text, &scan::scan_inner(text, without, true)))
}

fn verdict_of_text(reading: Reading) -> Option<Verdict> {
    let (cause, evidence) = match reading.sign? {
        Sign::OomKillText(f) => (Cause::OomKilled, output(&f)),
        Sign::Worker(f) => (Cause::WorkerKilled, output(&f)),
        Sign::Memory(cause, f) => (cause, output(&f)),
        Sign::CaughtOom { oom, later, .. } => (Cause::Failed, caught_evidence(&oom, &later)),
        Sign::ShellKill(f) => (
            Cause::OomKilled,
            format!(
                "{} (a shell's job killed by SIGKILL it did not send: on Linux, the OOM killer)",
                output(&f)
            ),
        ),
        Sign::LauncherKill(f) => (Cause::Killed, output(&f)),
    };
    Some(Verdict::new(cause, evidence))
}

/// One line of a file that took part in a verdict, as `oomguard classify --explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExplainedLine {
    /// Line number in the file, from 1.
    pub line: usize,
    /// The signature family that matched the line; `None` for a fatal error of the job's own.
    pub family: Option<&'static str>,
    /// The line without log prefixes, cut to about 200 characters around what matched.
    pub text: String,
}

/// What would have decided had the winning family not been in the table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunnerUp {
    /// The class it gives (`"none"` never: no runner-up is `None`).
    pub class: &'static str,
    /// The line that would have decided.
    #[serde(flatten)]
    pub at: ExplainedLine,
}

/// An out-of-memory error the job survived, overridden by a later fatal error of its own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Overridden {
    /// The class the OOM alone would have given (`device_oom` or `host_oom`).
    pub class: &'static str,
    /// The OOM's line.
    #[serde(flatten)]
    pub at: ExplainedLine,
    /// Why it does not decide, in one sentence.
    pub reason: String,
}

/// Why `oomguard classify` gives a file its class: what `oomguard classify --explain` prints,
/// so a misclassified log can be reported in one paste.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Explanation {
    /// The class, as [`classify_text`] gives it (`"none"` for no OOM sign).
    pub class: &'static str,
    /// The evidence line [`classify_text`] gives.
    pub evidence: Option<String>,
    /// The family whose finding decided; `None` when nothing matched or when a fatal error of
    /// the job's own decided (see `overridden`).
    pub family: Option<&'static str>,
    /// The lines that decided, in file order.
    pub lines: Vec<ExplainedLine>,
    /// What would have decided without `family` (or without the overridden OOM's family).
    pub runner_up: Option<RunnerUp>,
    /// The out-of-memory error a later fatal error overrode, when that happened.
    pub overridden: Option<Overridden>,
}

/// The most characters of a line an explanation shows.
const EXPLAIN_MAX: usize = 200;

fn explained(
    numbers: &[usize],
    at: usize,
    family: Option<&'static str>,
    text: &str,
) -> ExplainedLine {
    // The line itself: the family already says when the general rule decided.
    let text = text.trim();
    let text = text
        .strip_prefix(scan::GENERAL_RULE_EVIDENCE)
        .unwrap_or(text);
    let text = match text.char_indices().nth(EXPLAIN_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    };
    ExplainedLine {
        // Glued findings sit on the first of their two lines; `at` is always in range.
        line: numbers.get(at).copied().unwrap_or(at + 1),
        family,
        text,
    }
}

/// Where a finding of `found` sits: findings are unique by class and text (the scan keeps a
/// repeat once, at its last place).
fn index_of(found: &[(usize, Finding)], f: &Finding) -> usize {
    found
        .iter()
        .rfind(|(_, g)| g == f)
        .map(|(i, _)| *i)
        .expect("a sign's finding comes from the findings it was read from")
}

/// A sign's class, the family that decided (the overridden OOM's family for a caught OOM),
/// and its deciding lines.
fn sign_parts(
    sign: &Sign,
    found: &[(usize, Finding)],
    numbers: &[usize],
) -> (Cause, &'static str, Vec<ExplainedLine>) {
    let one = |cause: Cause, f: &Finding| {
        let line = explained(numbers, index_of(found, f), Some(f.name), &f.line);
        (cause, f.name, vec![line])
    };
    match sign {
        Sign::OomKillText(f) | Sign::ShellKill(f) => one(Cause::OomKilled, f),
        Sign::Worker(f) => one(Cause::WorkerKilled, f),
        Sign::Memory(cause, f) => one(*cause, f),
        Sign::LauncherKill(f) => one(Cause::Killed, f),
        Sign::CaughtOom {
            oom,
            later,
            later_at,
        } => (
            Cause::Failed,
            oom.name,
            vec![explained(numbers, *later_at, None, later)],
        ),
    }
}

/// Explains [`classify_text`]'s verdict on `text`: the lines that decided and their family,
/// the runner-up (the verdict the text gives with the winning family taken out of the
/// signature table), and the out-of-memory error a later fatal error overrode, if one did.
pub fn explain_text(text: &str) -> Explanation {
    let numbers = scan::line_numbers(text);
    let found = scan::scan_positions(text);
    let verdict = classify_text(text);
    let Some(sign) = read_findings(text, &found).sign else {
        return Explanation {
            class: "none",
            evidence: None,
            family: None,
            lines: Vec::new(),
            runner_up: None,
            overridden: None,
        };
    };
    let (cause, family, lines) = sign_parts(&sign, &found, &numbers);
    debug_assert_eq!(verdict.as_ref().map(|v| v.cause), Some(cause));
    let overridden = match &sign {
        Sign::CaughtOom { oom, later_at, .. } => Some(Overridden {
            class: if oom.family == Family::DeviceOom {
                Cause::DeviceOom.as_str()
            } else {
                Cause::HostOom.as_str()
            },
            at: explained(&numbers, index_of(&found, oom), Some(oom.name), &oom.line),
            reason: format!(
                "the job went on after this out-of-memory error and died of its own error on line {}; the last fatal error decides",
                numbers.get(*later_at).copied().unwrap_or(later_at + 1)
            ),
        }),
        _ => None,
    };
    let without = scan::scan_positions_without(text, Some(family));
    let runner_up = read_findings(text, &without).sign.map(|next| {
        let (cause, _, mut lines) = sign_parts(&next, &without, &numbers);
        RunnerUp {
            class: cause.as_str(),
            at: lines.remove(0),
        }
    });
    Explanation {
        class: cause.as_str(),
        evidence: verdict.map(|v| v.evidence),
        family: (overridden.is_none()).then_some(family),
        lines,
        runner_up,
        overridden,
    }
}

impl Explanation {
    /// The explanation for people: `FILE: CLASS` then indented lines, ending with a newline.
    pub fn render(&self, file: &str) -> String {
        let mut out = format!("{file}: {}\n", self.class);
        let at = |l: &ExplainedLine| match l.family {
            Some(family) => format!("line {} ({family}): \"{}\"", l.line, l.text),
            None => format!(
                "line {} (a fatal error of the job's own): \"{}\"",
                l.line, l.text
            ),
        };
        if self.lines.is_empty() {
            out.push_str("  decided by: no signature matched\n");
        }
        for l in &self.lines {
            out.push_str(&format!("  decided by {}\n", at(l)));
        }
        if let Some(o) = &self.overridden {
            out.push_str(&format!("  overrode {} at {}\n", o.class, at(&o.at)));
            out.push_str(&format!("    because {}\n", o.reason));
        }
        match &self.runner_up {
            Some(r) => out.push_str(&format!("  runner-up: {} at {}\n", r.class, at(&r.at))),
            None => out.push_str("  runner-up: none\n"),
        }
        out
    }
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
        // bash -c naming itself: a shell's job-status line.
        ("bash: 14837 Killed                  python3 train.py", "oom_killed"),
        // A caught OOM, then the job's own fatal error: the last fatal error decides.
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB -- skipping batch\nepoch 2 loss 0.1\nerror: checkpoint dir /ckpt is not writable", "failed"),
        ("WARNING: ran out of memory with exception: CUDA out of memory. Tried to allocate 20.00 MiB; Skipping batch\nTraceback (most recent call last):\n  File \"t.py\", line 1\n    f()\nValueError: Expected input batch_size (4) to match target batch_size (1).", "failed"),
        ("MemoryError\nfatal: cannot write /ckpt/last.pt", "failed"),
        // Launcher and Slurm lines after the OOM are its aftermath, not the job's own error.
        ("RuntimeError: CUDA out of memory. Tried to allocate 1 GiB\nsrun: error: node1: task 0: Exited with exit code 1\nslurmstepd: error: *** STEP 42.0 ON node1 CANCELLED AT 2024-01-01T00:00:00 ***", "device_oom"),
        // So is an exception raised while handling the OOM, or from it.
        ("torch.AcceleratorError: CUDA error: out of memory\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"w.py\", line 9, in h\n    torch.cuda.synchronize()\nRuntimeError: CUDA error: an illegal memory access was encountered", "device_oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\nTrainingFailed: step 12", "device_oom"),
        // ...but not an unrelated error that came first, nor what was chained to that.
        ("CUDA out of memory. Tried to allocate 1 GiB; skipping batch\nKeyError: 'label'\n\nDuring handling of the above exception, another exception occurred:\n\nValueError: bad row", "failed"),
        // And not a peer's death seen from another connection.
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\nRuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:29500", "device_oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\ntorch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited", "device_oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\nTimeoutError: the peer did not answer in 1800 s", "device_oom"),
        // Shutdown noise after the OOM: a DataLoader thread torn down under the dying process, and
        // multiprocessing's finalizers.
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\nException in thread Thread-3 (_pin_memory_loop):\nTraceback (most recent call last):\nFileNotFoundError: [Errno 2] No such file or directory", "device_oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\nTraceback (most recent call last):\n  File \"/usr/lib/python3.10/multiprocessing/util.py\", line 300, in _run_finalizers\n    finalizer()\nOSError: [Errno 9] Bad file descriptor", "device_oom"),
        // ...but the job's own code failing after a survived OOM is the cause.
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. -- skipping batch\nTraceback (most recent call last):\n  File \"/work/train.py\", line 90, in save\n    torch.save(state, path)\nPermissionError: [Errno 13] Permission denied: '/ckpt/last.pt'", "failed"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\nException ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>\nTraceback (most recent call last):\nAttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_shutdown'", "device_oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\nBrokenPipeError: [Errno 32] Broken pipe", "device_oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\ntorch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15", "device_oom"),
        // Ranks: rank 0's OOM is the root cause of rank 1's error, which is not rank 0's own.
        ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n[rank1]: ValueError: peer rank 0 is gone\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "device_oom"),
        // A rank that survived its OOM and died of its own error: failed.
        ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB -- skipping batch\n[rank0]: epoch 3\n[rank1]: error: checkpoint dir /ckpt is not writable", "failed"),
        // Two ranks: one survived its OOM, the other died of its own.
        ("[default1]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB -- skipping\n[default0]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n[default1]:error: checkpoint dir /ckpt is not writable", "device_oom"),
        // A wrapper's report that the model load failed is the aftermath of the engine's OOM...
        ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc failed: out of memory\nllama_new_context_with_model: failed to allocate compute buffers\nTraceback (most recent call last):\n  File \"demo.py\", line 19, in <module>\npydantic_core._pydantic_core.ValidationError: 1 validation error for LlamaCpp\n  Value error, Could not load Llama model from path: /m.gguf. Received error Failed to create llama_context [type=value_error, input_value={...}, input_type=dict]", "device_oom"),
        ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7825.94 MiB on device 0: cudaMalloc failed: out of memory\nllama_model_load: error loading model: failed to allocate buffer\nllama_load_model_from_file: failed to load model\nValueError: Failed to load model from file: /m.gguf", "device_oom"),
        // ...but with no OOM before it, a failed load is no memory sign at all.
        ("llama_load_model_from_file: failed to load model\nValueError: Failed to load model from file: /m.gguf", "none"),
        // An OOM the job survived, then an error of its own that is not about loading: failed.
        ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device 1: cudaMalloc failed: out of memory\nllama_context: compute buffer allocation failed, retrying without pipeline parallelism\nKeyError: 'prompt'", "failed"),
        // Schedulers and notebooks that kill from outside.
        ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\nExited with exit code 143.", "oom_killed"),
        ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.\nExited with exit code 140.", "none"),
        ("Exited with exit code 143.", "none"),
        ("Your session crashed after using all available RAM.", "oom_killed"),
        // Issue 42: a userspace killer's or platform's memory reason beside a SIGKILL line outranks
        // it...
        ("heroku[worker.1]: Error R15 (Memory quota vastly exceeded)\nheroku[worker.1]: Stopping process with SIGKILL\nheroku[worker.1]: Process exited with status 137", "oom_killed"),
        ("REPORT RequestId: 1\tMemory Size: 2688 MB\tMax Memory Used: 2581 MB\nError Runtime exited with error: signal: killed\nRuntime.ExitError", "oom_killed"),
        ("failed execd enforced h_vmem limit because:\njob 7921630.1 died through signal KILL (9).", "oom_killed"),
        ("nohang[530]: Implement a corrective action:\nnohang[530]:   Send SIGKILL to the victim; total response time: 609 ms", "oom_killed"),
        // ...but a bare SIGKILL stays what it was, and a supervisor's guess is no evidence.
        ("mpirun noticed that process rank 2 with PID 0 on node qy-PC exited on signal 9 (Killed).", "killed"),
        ("REPORT RequestId: 1\tMemory Size: 3008 MB\tMax Memory Used: 400 MB\nError Runtime exited with error: signal: killed", "killed"),
        // The REPORT's edge: a peak within a tenth of the size (2420 of 2688 MB) is at the limit,
        // one megabyte less is not.
        ("REPORT RequestId: 1\tMemory Size: 2688 MB\tMax Memory Used: 2420 MB\nError Runtime exited with error: signal: killed", "oom_killed"),
        ("REPORT RequestId: 1\tMemory Size: 2688 MB\tMax Memory Used: 2419 MB\nError Runtime exited with error: signal: killed", "killed"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nmpirun noticed that process rank 0 with PID 1 on node n1 exited on signal 9 (Killed).", "device_oom"),
        ("[CRITICAL] WORKER TIMEOUT (pid:17)\n[ERROR] Worker (pid:17) was sent SIGKILL! Perhaps out of memory?", "killed"),
        ("Segmentation fault (core dumped)\nerror: the solver died; it might have run out of memory?", "none"),
        // Device allocators wherever the vendor words sit; a runtime's heap is the host's.
        ("ggml_vulkan: Device memory allocation of size 118497280 failed.\nggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory\ndouble free or corruption (out)", "device_oom"),
        ("[2022-03-05.20:57:15] [Info] Initializing NVIDIA GeForce RTX 3090\n[2022-03-05.20:57:39] [Error] CL_MEM_OBJECT_ALLOCATION_FAILURE", "device_oom"),
        ("[HAMI-core ERROR (pid:30 thread=1 allocator.c:53)]: Device 0 OOM 3171158016 / 3145728000\nTraceback (most recent call last):\nRuntimeError: CUDA error: unrecognized error code", "device_oom"),
        ("<--- Last few GCs --->\n[1:0x1] 18891558 ms: Mark-sweep 3470.1 (4143.7) -> 3461.9 (4133.4) MB, allocation failure; GC in old space requested\nFATAL ERROR: Ineffective mark-compacts near heap limit Allocation failed - JavaScript heap out of memory\n 1: 0xa07f90 node::Abort() [/opt/buildhome/.nvm/versions/node/v12.18.0/bin/node]", "host_oom"),
        // False alarms: routine GC lines, allocator statistics, size-limit warnings.
        ("2019-04-17T16:02:44.673+0000: 48.286: [GC (Allocation Failure) [ParNew: 830330K->485K(929024K), 0.0097075 secs] 852477K->22634K(1961216K), 0.0098566 secs]", "none"),
        ("[27.231s][info   ][gc             ] GC(57) Pause Young (Allocation Failure) 18M->13M(22M) 7.695ms", "none"),
        ("|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |", "none"),
        ("Token indices sequence length is longer than the specified maximum sequence length for this model (564 > 512). Running this sequence through the model will result in indexing errors", "none"),
        // Triton's shared-memory limit is not an OOM; a real allocation failure after it is.
        ("No valid triton configs. OutOfMemoryError: out of resource: triton_mm Required: 294912 Hardware limit:232448 Reducing block sizes or `num_stages` may help.", "none"),
        ("No valid triton configs. OutOfMemoryError: out of resource: triton_mm Required: 294912 Hardware limit:232448\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "device_oom"),
    ];

    /// Rank-tagged output: the first rank to die of an OOM is the one named.
    #[test]
    fn the_first_rank_to_die_of_an_oom_is_the_root_cause() {
        let text = "[rank1]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4 GiB\n\
                    [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n\
                    [rank0]: RuntimeError: Connection reset by peer";
        let v = classify_text(text).expect("an OOM");
        assert_eq!(v.cause, Cause::DeviceOom);
        assert!(v.evidence.contains("HIP out of memory"), "{}", v.evidence);
    }

    /// (text, class, deciding family, deciding line, runner-up as (class, family, line)).
    type ExplainRow = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<usize>,
        Option<(&'static str, Option<&'static str>, usize)>,
    );
    const EXPLAIN_TABLE: &[ExplainRow] = &[
        ("epoch 1\nloss 0.3", "none", None, None, None),
        // The catch-all of the same class is the runner-up on the same line.
        ("epoch 1\r  3%|#  |\nRuntimeError: CUDA out of memory. Tried to allocate 1 GiB", "device_oom", Some("pytorch_allocator_oom"), Some(2), Some(("device_oom", Some("device_out_of_memory_text"), 2))),
        // Without the kernel's lines, the shell's Killed would have decided.
        ("Killed\nMemory cgroup out of memory: Killed process 4242 (python3)", "oom_killed", Some("kernel_oom_killer"), Some(2), Some(("oom_killed", Some("shell_job_killed"), 1))),
        ("failed (exitcode: -9) local_rank: 0 (pid: 1)", "killed", Some("launcher_exit_minus_9"), Some(1), None),
        // Issue 42: the new rows are named; a platform's SIGKILL report beside its memory reason is
        // the OOM kill, and without the R15 row the launcher's exit 137 would have decided.
        ("heroku[worker.1]: Error R15 (Memory quota vastly exceeded)\nheroku[worker.1]: Process exited with status 137", "oom_killed", Some("heroku_r15_memory_quota"), Some(1), Some(("killed", Some("launcher_exit_minus_9"), 2))),
        ("Memory Size: 128 MB\tMax Memory Used: 128 MB\nRuntime exited with error: signal: killed", "oom_killed", Some("platform_sigkill_report"), Some(2), None),
        ("MESA: error: ../src/intel/vulkan/anv_device.c:4237: VK_ERROR_OUT_OF_DEVICE_MEMORY", "device_oom", Some("vulkan_device_alloc_failed"), Some(1), None),
        // A survived OOM: the fatal error decides, no family does.
        ("CUDA out of memory. Tried to allocate 1 GiB; skipping batch\n\nerror: checkpoint dir /ckpt is not writable", "failed", None, Some(3), Some(("failed", None, 3))),
    ];

    #[test]
    fn explain_table() {
        for (text, class, family, line, runner_up) in EXPLAIN_TABLE {
            let e = explain_text(text);
            assert_eq!(e.class, *class, "{text:?}: {e:?}");
            assert_eq!(e.class, name(&classify_text(text)), "{text:?}");
            assert_eq!(e.family, *family, "{text:?}: {e:?}");
            assert_eq!(e.lines.first().map(|l| l.line), *line, "{text:?}: {e:?}");
            let got = e
                .runner_up
                .as_ref()
                .map(|r| (r.class, r.at.family, r.at.line));
            assert_eq!(got, *runner_up, "{text:?}: {e:?}");
            assert_eq!(
                e.overridden.is_some(),
                *class == "failed",
                "{text:?}: {e:?}"
            );
        }
    }

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
    /// srun's last lines after `scancel` of the job it allocated (Slurm 22.05, two nodes).
    macro_rules! scancel_tail {
        () => {
            "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n0: slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-11-28T13:46:11 ***\nsrun: error: n2: task 1: Terminated\nsrun: error: n1: task 0: Terminated\n"
        };
    }
    const SCANCEL: &str = concat!("1: up\n0: up\n", scancel_tail!());
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
        chain: bool,
        descendant: Option<u32>,
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
        chain: false,
        descendant: None,
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
        // Exit status 137 is a SIGKILL only when something shows one.
        Row { what: "exit 137 alone", ending: Ending::Exited(137), want: Cause::Failed, evidence_has: "exit 137 (the job's own status", ..BASE },
        Row { what: "exit 137 with a shell's report", ending: Ending::Exited(137), tail: "bash: 4242 Killed                  python3 x.py", want: Cause::Killed, evidence_has: "exit 137; output: \"bash: 4242 Killed", ..BASE },
        Row { what: "exit 137 with a reaped SIGKILLed process", ending: Ending::Exited(137), descendant: Some(4243), want: Cause::Killed, evidence_has: "exit 137; PID 4243 of the job died of SIGKILL; kernel oom_kill +0", ..BASE },
        Row { what: "exit 137 with kernel evidence", ending: Ending::Exited(137), cgroup: Some(1), want: Cause::OomKilled, evidence_has: "cgroup oom_kill +1", ..BASE },
        Row { what: "exit 137 with a launcher's report", ending: Ending::Exited(137), tail: "failed (exitcode: -9) local_rank: 0 (pid: 1)", want: Cause::Killed, evidence_has: "exitcode: -9", ..BASE },
        // A counter of a cgroup the job lives in.
        Row { what: "SIGKILL and a moved cgroup chain counter", ending: SIGKILL, vmstat: Some(1), chain: true, want: Cause::OomKilled, evidence_has: "SIGKILL; cgroup /user.slice/train.service oom_kill +1 (MemoryMax of train.service 64.0 MiB)", ..BASE },
        Row { what: "exit 137 with a shell's report and a moved chain counter", ending: Ending::Exited(137), tail: "Killed", chain: true, want: Cause::OomKilled, evidence_has: "output: \"Killed\"; cgroup /user.slice", ..BASE },
        Row { what: "exit 137 alone and a moved chain counter", ending: Ending::Exited(137), chain: true, want: Cause::Failed, ..BASE },
        Row { what: "exit 1 and a moved chain counter", chain: true, tail: "ValueError: x", want: Cause::Failed, ..BASE },
        // A cancel through Slurm where no signal reached oomguard (srun outside an allocation):
        // the user's stop, unless the output says memory ran out or Slurm gives a reason of its
        // own; srun ending the step itself after a task failed (--kill-on-bad-exit) prints the
        // CANCELLED banner too, but not "Job step aborted", and stays a failure.
        Row { what: "scancel of srun's own job", ending: Ending::Exited(143), tail: SCANCEL, want: Cause::Interrupted, evidence_has: "exit 143; cancelled through Slurm; output: \"slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT", ..BASE },
        Row { what: "scancel of srun's step, tasks SIGKILLed", ending: Ending::Exited(137), tail: "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n0: slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-11-28T13:46:43 ***\nsrun: error: n1: task 0: Killed\nsrun: error: n2: task 1: Killed", want: Cause::Interrupted, ..BASE },
        Row { what: "scancel, the tasks saved and exited 0", ending: Ending::Exited(0), tail: SCANCEL, want: Cause::Interrupted, evidence_has: "exit 0; cancelled through Slurm", ..BASE },
        Row { what: "scancel after a CUDA OOM", ending: Ending::Exited(143), tail: concat!("1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n", scancel_tail!()), want: Cause::DeviceOom, ..BASE },
        Row { what: "scancel after Slurm's OOM kill", ending: Ending::Exited(143), tail: concat!("slurmstepd-n2: error: Detected 1 oom_kill event in StepId=2.0. Some of the step tasks have been OOM Killed.\n", scancel_tail!()), want: Cause::OomKilled, ..BASE },
        Row { what: "scancel, kernel evidence", ending: Ending::Exited(143), tail: SCANCEL, cgroup: Some(1), want: Cause::OomKilled, ..BASE },
        Row { what: "scancel after a caught OOM and an error", ending: Ending::Exited(143), tail: concat!("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB -- skipping batch\nValueError: x\n", scancel_tail!()), want: Cause::Interrupted, ..BASE },
        Row { what: "srun's --kill-on-bad-exit after a task failed", ending: Ending::Exited(143), tail: "0: ValueError: x\nsrun: error: n2: task 1: Exited with exit code 1\nsrun: launch/slurm: _step_signal: Terminating StepId=5.0\n0: slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT 2026-11-28T13:47:03 ***\nsrun: error: n1: task 0: Terminated\nsrun: Force Terminated StepId=5.0", want: Cause::Failed, evidence_has: "exit 143; last output", ..BASE },
        Row { what: "scancel, the banner lost", ending: Ending::Exited(143), tail: "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\nsrun: error: n2: task 1: Terminated\nsrun: error: n1: task 0: Terminated", want: Cause::Interrupted, evidence_has: "exit 143; cancelled through Slurm; output: \"srun: Job step aborted", ..BASE },
        Row { what: "a node lost", ending: Ending::Exited(1), tail: "srun: error: Node failure on n2\nsrun: Job step aborted: Waiting up to 32 seconds for job step to finish.", want: Cause::Failed, ..BASE },
        Row { what: "a time limit", ending: Ending::Exited(143), tail: "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\nslurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2026-01-02T03:04:05 DUE TO TIME LIMIT ***", want: Cause::Failed, ..BASE },
        // Item 6's two reproductions.
        Row { what: "caught OOM, then sys.exit(\"error: ...\")", tail: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB -- skipping batch\nerror: checkpoint dir /ckpt is not writable", want: Cause::Failed, evidence_has: "exit 1; output: \"error: checkpoint dir /ckpt is not writable\" (after a caught OOM: \"torch.OutOfMemoryError", ..BASE },
        Row { what: "rank 0 OOM, rank 1 connection closed, launcher", tail: "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:29500\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:", want: Cause::DeviceOom, ..BASE },
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
                cgroup_chain_kill: row.chain.then(|| ChainKill {
                    path: "/user.slice/train.service".to_string(),
                    oom_kills: 1,
                    limit: Some(("/user.slice/train.service".to_string(), 64 << 20)),
                }),
            };
            let facts = AttemptFacts {
                ending: row.ending,
                tail: row.tail,
                kernel: &kernel,
                user_stopped: row.user_stopped,
                memory_limit: row.memory_limit,
                sigkilled_descendant: row.descendant,
                quiet_stop: None,
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
    fn memory_error_shown_reads_as_the_classifier_does() {
        // (output of a job still running, the OOM line it shows or None)
        let table: &[(&str, Option<&str>)] = &[
            (
                "Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    loss = model(x).sum()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
                Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
            ),
            (
                "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n[rank0]: step 12\n",
                Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
            ),
            ("MemoryError\n", Some("MemoryError")),
            (
                "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.\n",
                Some("RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed."),
            ),
            // fairseq caught it, said it skipped the batch, and went on.
            (
                "| WARNING: ran out of memory with exception: CUDA out of memory. Tried to allocate 20.00 MiB;\n Skipping batch\nepoch 001 | loss 4.2\n",
                None,
            ),
            // Caught, then an error of the job's own: not an out-of-memory death.
            (
                "RuntimeError: CUDA out of memory. Tried to allocate 1 GiB\nValueError: checkpoint dir is not writable\n",
                None,
            ),
            // The program's own source echoed in a traceback is not an event.
            (
                "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    except MemoryError:\nKeyboardInterrupt\n",
                None,
            ),
            // A launcher's report of a SIGKILL is not an out-of-memory error shown.
            ("failed (exitcode: -9) local_rank: 3 (pid: 812917)\n", None),
            ("epoch 1 loss 0.3\n", None),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(memory_error_shown(text).as_deref(), *want, "{text:?}");
        }
    }

    #[test]
    fn a_quiet_stop_decides_after_the_user_and_the_memory_bounds() {
        let hung = QuietStop::HungAfterOom {
            after: std::time::Duration::from_secs(60),
            oom_line: "torch.OutOfMemoryError: CUDA out of memory.".into(),
        };
        let stalled = QuietStop::Stalled {
            after: std::time::Duration::from_secs(300),
        };
        let kernel = KernelEvidence::default();
        let sigterm = Ending::Signaled {
            signal: 15,
            core_dumped: false,
        };
        let facts = |quiet_stop, user_stopped, memory_limit| AttemptFacts {
            ending: sigterm,
            tail: "torch.OutOfMemoryError: CUDA out of memory.\n",
            kernel: &kernel,
            user_stopped,
            memory_limit,
            sigkilled_descendant: None,
            quiet_stop,
        };
        let v = classify(&facts(Some(&hung), false, None));
        assert_eq!(v.cause, Cause::HungAfterOom);
        assert_eq!(
            v.evidence,
            "SIGTERM; no output for 1m after an out-of-memory error; output: \"torch.OutOfMemoryError: CUDA out of memory.\""
        );
        let v = classify(&facts(Some(&stalled), false, None));
        assert_eq!(
            (v.cause, v.evidence.as_str()),
            (Cause::Stalled, "SIGTERM; no output and no CPU time for 5m")
        );
        let v = classify(&facts(Some(&hung), true, None));
        assert_eq!(v.cause, Cause::Interrupted);
        let v = classify(&facts(Some(&hung), false, Some("over --max-rss")));
        assert_eq!(v.cause, Cause::MemoryLimit);
    }

    /// Leave one family out: for each family of the corpus (the file names' prefix, a trailing
    /// number dropped: `cuda_oom2` is `cuda_oom`), every table entry that matches a line of
    /// that family's files and of no other family's is taken away, as if the table had never
    /// been told about the family; the family's files are then read by what is left, the
    /// general rule included. This is how a family nobody has shown the table fares. The
    /// figures are printed (the corpus's SOURCES.md and the closing note quote them) and held:
    /// at least nine memory files in ten still in an accepted class, no negative flagged.
    #[test]
    fn leave_one_family_out() {
        let expected = std::fs::read_to_string(format!("{CORPUS}/expected.tsv")).unwrap();
        let family_of = |file: &str| {
            let prefix = file.split("__").next().unwrap_or(file);
            prefix
                .trim_end_matches(|c: char| c.is_ascii_digit())
                .to_string()
        };
        let files: Vec<(String, Vec<String>, String)> = expected
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let (file, classes) = l.split_once('\t').unwrap();
                let accepted = classes.split(',').map(|c| c.trim().to_string()).collect();
                let text = std::fs::read_to_string(format!("{CORPUS}/{file}")).unwrap();
                (file.to_string(), accepted, text)
            })
            .collect();
        // Which families each entry speaks in.
        let mut families_of_entry: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for (file, _, text) in &files {
            for entry in scan::entries_matching(text) {
                families_of_entry
                    .entry(entry)
                    .or_default()
                    .insert(family_of(file));
            }
        }
        let is_memory = |c: &str| {
            matches!(
                c,
                "device_oom" | "host_oom" | "oom_killed" | "worker_killed"
            )
        };
        let mut rows: BTreeMap<String, (usize, usize, usize, usize)> = BTreeMap::new();
        let (mut whole_caught, mut memory) = (0, 0);
        let mut flagged = Vec::new();
        let mut missed = Vec::new();
        for (file, accepted, text) in &files {
            let family = family_of(file);
            let own: Vec<&str> = families_of_entry
                .iter()
                .filter(|(_, fams)| fams.len() == 1 && fams.contains(&family))
                .map(|(entry, _)| *entry)
                .collect();
            let whole = name(&classify_text(text));
            let left_out = name(&classify_text_without(text, &own));
            let row = rows.entry(family).or_default();
            if accepted.iter().all(|c| is_memory(c)) {
                memory += 1;
                row.0 += 1;
                if accepted.iter().any(|c| c == whole) {
                    whole_caught += 1;
                }
                if accepted.iter().any(|c| c == left_out) {
                    row.1 += 1;
                } else {
                    missed.push(format!("{file}: {left_out}"));
                }
            } else if accepted == &["none"] {
                row.2 += 1;
                if left_out != "none" {
                    row.3 += 1;
                    flagged.push(format!("{file}: {left_out}"));
                }
            }
        }
        let caught: usize = rows.values().map(|r| r.1).sum();
        println!("family\tmemory files\tcaught with the family left out\tnegatives\tflagged");
        for (family, (m, c, n, f)) in &rows {
            println!("{family}\t{m}\t{c}\t{n}\t{f}");
        }
        println!(
            "whole table: {whole_caught}/{memory} memory files; each family left out: {caught}/{memory} ({:.0}%), {} negatives flagged",
            100.0 * caught as f64 / memory as f64,
            flagged.len()
        );
        println!("missed: {missed:#?}");
        assert!(
            flagged.is_empty(),
            "negatives flagged with their family left out: {flagged:#?}"
        );
        assert!(caught * 10 >= memory * 9, "{caught}/{memory}: {missed:#?}");
    }

    /// The held-out set (tests/fixtures/oom-heldout): real outputs of 53 families the table was
    /// never built from, gathered blind to the classifier. Its `dev` half was read and the
    /// general rule tuned on it; its `test` half was never read, so its figure is what a new
    /// family meets. Printed (the set's SOURCES.md and the closing note of issue 27 quote it)
    /// and held: no negative flagged in either half, nine in ten of the dev half, and the test
    /// half no worse than issue 42 left it (34 of 47, 72%; it first measured 28).
    #[test]
    fn held_out_families() {
        const HELD_OUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oom-heldout");
        let expected = std::fs::read_to_string(format!("{HELD_OUT}/expected.tsv")).unwrap();
        let is_memory = |c: &str| {
            matches!(
                c,
                "device_oom" | "host_oom" | "oom_killed" | "worker_killed"
            )
        };
        // (memory files, right class, negatives, flagged) per half.
        let mut halves: BTreeMap<&str, (usize, usize, usize, usize)> = BTreeMap::new();
        let mut wrong = Vec::new();
        for line in expected
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let mut cols = line.split('\t');
            let (file, classes, half) = (
                cols.next().unwrap(),
                cols.next().unwrap(),
                cols.next().unwrap(),
            );
            let accepted: Vec<&str> = classes.split(',').collect();
            let text = std::fs::read(format!("{HELD_OUT}/{file}")).unwrap();
            let got = name(&classify_text(&String::from_utf8_lossy(&text)));
            let row = halves.entry(half).or_default();
            if accepted.iter().any(|c| is_memory(c)) {
                row.0 += 1;
                if accepted.contains(&got) {
                    row.1 += 1;
                } else {
                    wrong.push(format!("{half} {file}: {got}"));
                }
            } else {
                row.2 += 1;
                if is_memory(got) {
                    row.3 += 1;
                    wrong.push(format!("{half} {file}: {got} (a negative)"));
                }
            }
        }
        for (half, (m, c, n, f)) in &halves {
            println!(
                "held out, {half} half: {c}/{m} memory files in an accepted class ({:.0}%), {f}/{n} negatives flagged",
                100.0 * *c as f64 / *m as f64
            );
        }
        println!("not in an accepted class: {wrong:#?}");
        let (dev, test) = (halves["dev"], halves["test"]);
        assert_eq!(dev.3 + test.3, 0, "negatives flagged: {wrong:#?}");
        assert!(dev.1 * 10 >= dev.0 * 9, "dev half: {}/{}", dev.1, dev.0);
        assert!(
            test.1 * 47 >= 34 * test.0,
            "test half: {}/{}",
            test.1,
            test.0
        );
    }
}
