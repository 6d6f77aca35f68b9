//! Reads the lines of a job's output that are no signature but tell how its traceback ended:
//! Python's exception lines and the ones that only wrap another, a program's `error:` / `fatal:`
//! last words, a peer's collateral errors and a failed load's aftermath (neither an error of the
//! job's own), chained-exception banners, teardown frames of the standard library, a job's own
//! report that it skipped a batch after an out-of-memory error, the command that sent a
//! shell's SIGKILL, and Slurm's word that someone cancelled the job; and quotes a line for
//! evidence. Pure functions of text.
//!
//! It decides nothing: which of these lines settles why an attempt ended is
//! [`crate::judge::classify`]'s judgement. Signatures themselves are the parent module's
//! ([`crate::judge::scan`], over [`super::table`]).

use regex::Regex;
use std::sync::OnceLock;

use super::table::{SLURM_CANCELLED, SLURM_DUE_TO, SRUN_NODE_FAILURE, SRUN_STEP_ABORTED};
use super::{rank_of, scan, split_lines, strip_prefixes, Finding};

/// Longest quoted output in an evidence line, in characters.
const QUOTE_MAX: usize = 200;

/// A line of output quoted for evidence. A long line is cut at the last sentence end that
/// fits in [`QUOTE_MAX`] characters (so "CUDA out of memory. Tried to allocate 2.00 GiB." stays
/// whole), or hard at [`QUOTE_MAX`] when no sentence ends late enough to say something.
pub(crate) fn quote(line: &str) -> String {
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
            r"ChildFailedError|ProcessRaisedException|ProcessExitedException|CalledProcessError|BrokenProcessPool|RayTaskError|DataLoader worker|^Exception:?\s*$|^Error:\s*[A-Z][A-Za-z]*$",
        )
        .expect("wrapper pattern compiles")
    })
}

/// A program's own last words: `sys.exit("error: checkpoint dir /ckpt is not writable")`,
/// `fatal: ...`. Anchored at the start of the (prefix-stripped) line, so launchers' lines that
/// name themselves first (`srun: error: node1: task 0: Exited with exit code 1`,
/// `slurmstepd: error: *** JOB 42 ON n1 CANCELLED ...`) are not the job's, and a space must follow
/// the colon, so a logging record's level (`ERROR:root:...`, `ERROR:2020-11-20 04:09:51,165:...`)
/// is not taken for one.
fn exit_message() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)^(?:error|fatal)\s*:\s").expect("exit message pattern compiles")
    })
}

/// Errors that are the collateral damage of a peer's death rather than a cause of their own:
/// the other ranks of a distributed job see their connections drop, their collectives fail or
/// time out, and the launcher SIGTERMs them ("Connection closed by peer", "Broken pipe",
/// `DistBackendError`, "Watchdog caught collective operation timeout", elastic's
/// `SignalException: Process 4242 got signal: 15`).
fn collateral_error() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?i)connection (?:closed|reset|refused|aborted)|closed by (?:remote )?peer|broken ?pipe|\bEPIPE\b|\bNCCL\b|\bgloo\b|ProcessGroup|Dist(?:Backend|Network|Store)Error|\bc10d\b|TCPStore|Rendezvous|watchdog|\btime(?:d ?| ?)out|SIGTERM|SignalException|\bTerminated\b",
        )
        .expect("collateral pattern compiles")
    })
}

/// Errors that report a model load which failed, as the wrappers of an inference engine raise
/// them after the engine's own allocation failure: LangChain's `ValidationError: 1 validation
/// error for LlamaCpp` ("Could not load Llama model from path: ..."), llama-cpp-python's
/// `ValueError: Failed to load model from file: ...` / `Failed to create llama_context`, and
/// the `'Llama' object has no attribute 'ctx'` of the half-built object. After an
/// out-of-memory error they are its aftermath (the load that failed is the one that ran out),
/// not a fatal error of their own, as a peer's collateral errors are not.
fn load_failure_aftermath() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?i)\bvalidation errors? for LlamaCpp|\bcould not load \w+ model\b|\bfailed to (?:load model|create llama_context)\b|\b(?:error|unable to) load(?:ing)? model\b|'(?:Llama|LlamaCppModel)' object has no attribute",
        )
        .expect("load failure pattern compiles")
    })
}

/// Errors that report a device allocation an interposed limiter refused, as the runtime passes
/// the refusal on: HAMi's vGPU limiter answers an allocation over the container's share with an
/// error code CUDA does not know (Project-HAMi/HAMi-core issue #55), so PyTorch raises
/// `RuntimeError: CUDA error: unrecognized error code` right after the limiter's `Device 0 OOM`
/// line. After an out-of-memory error it is that error surfacing, not a cause of its own.
fn refusal_aftermath() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"\bCUDA error: unrecognized error code\b")
            .expect("refusal aftermath pattern compiles")
    })
}

/// Python's banners between a chained exception and the one raised while handling it.
fn is_chain_marker(line: &str) -> bool {
    line.starts_with("During handling of the above exception")
        || line.starts_with("The above exception was the direct cause")
}

/// Whether a (prefix-stripped) line says the job is dying of an error of its own that is not
/// about memory: an exception line that does not merely wrap another, or an `error:` /
/// `fatal:` exit message, and not the collateral damage of a peer's death nor a wrapper's
/// report that the model load failed.
fn is_fatal_error(line: &str) -> bool {
    (exception_line().is_match(line) || exit_message().is_match(line))
        && !wrapper_exception().is_match(line)
        && !collateral_error().is_match(line)
        && !load_failure_aftermath().is_match(line)
        && !refusal_aftermath().is_match(line)
        && scan(line).is_empty()
}

/// The last fatal error (see [`is_fatal_error`]) printed after the out-of-memory error on line
/// `at`: the OOM was caught (fairseq's "ran out of memory ... Skipping batch") and the job died
/// of that instead. With a `rank`, only that rank's lines count: another rank's errors are the
/// aftermath of this one's death. An exception raised while handling the OOM, or from it
/// (Python's "During handling of the above exception" / "The above exception was the direct
/// cause"), is part of the OOM's own story.
pub(crate) fn later_fatal_error(
    lines: &[&str],
    at: usize,
    rank: Option<u32>,
) -> Option<(usize, String)> {
    // Whether a chain banner now would chain to the OOM (nothing unrelated came between).
    let mut chain_to_oom = true;
    let mut chained = false;
    let mut last = None;
    // The innermost frame of the traceback being read: teardown code's errors are not causes.
    let mut in_teardown = false;
    for (index, raw) in lines.iter().enumerate().skip(at + 1) {
        if rank.is_some() && rank_of(raw) != rank {
            continue;
        }
        let line = strip_prefixes(raw).trim();
        if is_chain_marker(line) {
            chained = chain_to_oom;
            continue;
        }
        // Python reports an exception it could not raise (a `__del__` failing at shutdown,
        // after the job already died) as "Exception ignored in: <function ...>", and one that
        // ended a thread other than the main one (the DataLoader's pin-memory thread, torn down
        // under it) as "Exception in thread ...": neither ends the process, so neither is a cause.
        if line.starts_with("Exception ignored in") || line.starts_with("Exception in thread") {
            chained = true;
            continue;
        }
        if line.starts_with("Traceback (most recent call last)") {
            in_teardown = false;
            continue;
        }
        if let Some(frame) = line.strip_prefix("File \"") {
            in_teardown = is_teardown_frame(frame);
            continue;
        }
        if !is_fatal_error(line) {
            continue;
        }
        if std::mem::take(&mut chained) || std::mem::take(&mut in_teardown) {
            continue;
        }
        chain_to_oom = false;
        last = Some((index, line.to_string()));
    }
    last
}

/// Whether a traceback frame (`/usr/lib/python3.10/multiprocessing/util.py", line 300, in
/// _run_finalizers`) is in the standard library's process and thread machinery, whose errors at
/// shutdown (finalizers, worker threads, pools) follow a death rather than cause it.
fn is_teardown_frame(frame: &str) -> bool {
    let path = frame.split('"').next().unwrap_or(frame);
    [
        "/multiprocessing/",
        "/threading.py",
        "/concurrent/futures/",
        "/weakref.py",
    ]
    .iter()
    .any(|part| path.contains(part))
}

/// Whether a shell's `Killed` report is of a SIGKILL someone sent rather than the kernel's OOM
/// killer: the text shows the command that sent it (`timeout -s KILL 5 ...`, `kill -9 4242`,
/// `pkill -9 python`), or the line is macOS's `Killed: 9` (no Linux OOM killer there).
pub(crate) fn kill_sent_by_someone(text: &str, shell_kill: &Finding) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    let sender = RE.get_or_init(|| {
        Regex::new(
            r"\btimeout\s+(?:-s\s*|--signal[= ])(?:SIG)?(?:KILL|9)\b|\b(?:kill|pkill|killall)\s+(?:-(?:s\s+)?(?:SIG)?(?:KILL|9))\b",
        )
        .expect("kill sender pattern compiles")
    });
    shell_kill.line.trim().eq_ignore_ascii_case("killed: 9") || sender.is_match(text)
}

/// A job's own report that it caught an out-of-memory error and skipped the work
/// (fairseq's "| WARNING: ran out of memory with exception: ...;" then " Skipping batch",
/// "| WARNING: OOM in all workers, skipping update", ParlAI's "ran out of memory, skipping batch").
fn skip_marker() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?i)\bskip(?:ping|ped)?\s+(?:this\s+|the\s+)?(?:batch|update|step|iteration)\b",
        )
        .expect("skip pattern compiles")
    })
}

/// Whether the out-of-memory error on line `at` was one the job announced it skipped (on that
/// line or the next of its rank) and went on from: no traceback follows it. A traceback after
/// it (even one cut off before its last line) means the job died after all.
pub(crate) fn skipped_and_went_on(lines: &[&str], at: usize, rank: Option<u32>) -> bool {
    let mut own = lines
        .iter()
        .skip(at)
        .filter(|raw| rank.is_none() || rank_of(raw) == rank)
        .map(|raw| strip_prefixes(raw).trim());
    let skipped = own
        .by_ref()
        .take(2)
        .any(|line| skip_marker().is_match(line));
    skipped && !own.any(|line| line.starts_with("Traceback (most recent call last)"))
}

/// srun's word that someone cancelled its job or step through Slurm (`scancel`): its "Job step
/// aborted" line (slurmctld ended the step; srun ending it itself after a task failed, under
/// `--kill-on-bad-exit`, prints no such line) with nothing that gives Slurm's own reason: a
/// CANCELLED banner with "DUE TO" (a time limit, a preemption, a node failure) or srun's "Node
/// failure on". Returns the line to show: slurmstepd's CANCELLED banner where it reached srun's
/// output (it does not always: on Slurm 22.05, tasks that die of the cancel at once can take
/// it with them), else srun's own line. Where oomguard runs inside the allocation, scancel
/// signals oomguard itself; this is how the cancel shows where it runs outside one (`srun` from
/// a login node makes its own allocation). A time limit whose banner was lost reads as a
/// cancel too: srun's output says nothing else of it.
pub(crate) fn slurm_cancel(text: &str) -> Option<String> {
    // Every attempt's output is asked, its successes' too: most never saw Slurm.
    if !text.contains("Job step aborted") {
        return None;
    }
    static RE: OnceLock<[Regex; 4]> = OnceLock::new();
    let [banner, due_to, aborted, node_failure] = RE.get_or_init(|| {
        [
            SLURM_CANCELLED,
            SLURM_DUE_TO,
            SRUN_STEP_ABORTED,
            SRUN_NODE_FAILURE,
        ]
        .map(|p| Regex::new(p).expect("Slurm cancel pattern compiles"))
    });
    let lines = split_lines(text);
    let mut cancelled = None;
    let mut srun_aborted = None;
    for (i, raw) in lines.iter().enumerate() {
        let line = strip_prefixes(raw).trim();
        if node_failure.is_match(line) {
            return None;
        }
        if aborted.is_match(line) {
            srun_aborted = Some(line);
        }
        let Some(m) = banner.find(line) else {
            continue;
        };
        let rest = &line[m.end()..];
        // A banner cut by a terminal's hard-wrap goes on, with its "DUE TO", on the next line.
        let next = if rest.contains("***") {
            ""
        } else {
            lines.get(i + 1).copied().unwrap_or_default()
        };
        if due_to.is_match(rest) || due_to.is_match(next) {
            return None;
        }
        cancelled = Some(line);
    }
    srun_aborted.map(|aborted| cancelled.unwrap_or(aborted).to_string())
}

/// The last non-blank line of the output, for the evidence of an ordinary failure.
pub(crate) fn last_line(tail: &str) -> Option<&str> {
    split_lines(tail)
        .into_iter()
        .map(|l| strip_prefixes(l).trim())
        .rfind(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What srun printed on Slurm 22.05 (tests/slurm's two nodes) for `srun -N 2 --label`, the
    /// tasks up, then `scancel JOB` from another shell.
    const SCANCEL_JOB: &str = "1: up\n0: up\nsrun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n0: slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-11-28T13:46:11 ***\nsrun: error: n2: task 1: Terminated\nsrun: error: n1: task 0: Terminated\n";
    /// The same, once in a few runs with tasks that die of the SIGTERM at once (and on a loaded
    /// machine): slurmstepd's banner never reaches srun's output.
    const SCANCEL_JOB_NO_BANNER: &str = "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\nsrun: error: n2: task 1: Terminated\nsrun: error: n1: task 0: Terminated\n";
    /// The same after `scancel JOB.STEP`: the tasks are SIGKILLed.
    const SCANCEL_STEP: &str = "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n0: slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-11-28T13:46:43 ***\nsrun: error: n1: task 0: Killed\nsrun: error: n2: task 1: Killed\n";
    /// srun ending the step itself under `--kill-on-bad-exit=1` after task 1 exited 1: the
    /// same banner, no "Job step aborted".
    const KILL_ON_BAD_EXIT: &str = "srun: error: n2: task 1: Exited with exit code 1\nsrun: launch/slurm: _step_signal: Terminating StepId=5.0\n0: slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT 2026-11-28T13:47:03 ***\nsrun: error: n1: task 0: Terminated\nsrun: Force Terminated StepId=5.0\n";

    #[test]
    fn a_cancel_through_slurm_is_told_from_slurms_own_stops() {
        // (what, output, the banner returned)
        let table: &[(&str, &str, Option<&str>)] = &[
            (
                "scancel of the job",
                SCANCEL_JOB,
                Some("slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-11-28T13:46:11 ***"),
            ),
            (
                "scancel of the step",
                SCANCEL_STEP,
                Some("slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-11-28T13:46:43 ***"),
            ),
            (
                "the job's banner",
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\nslurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-01-02T03:04:05 ***\n",
                Some("slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-01-02T03:04:05 ***"),
            ),
            ("srun ended the step after a task failed", KILL_ON_BAD_EXIT, None),
            (
                "a time limit",
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\nslurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2026-01-02T03:04:05 DUE TO TIME LIMIT ***\n",
                None,
            ),
            (
                "a preemption, on two nodes",
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n0: slurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2026-01-02T03:04:05 DUE TO PREEMPTION ***\n1: slurmstepd: error: *** STEP 12.0 ON n2 CANCELLED AT 2026-01-02T03:04:05 ***\n",
                None,
            ),
            (
                "a node failure, hard-wrapped",
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\nslurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-01-02T03:04:05\nDUE TO NODE FAILURE ***\n",
                None,
            ),
            (
                "scancel of the job, the banner lost with the tasks",
                SCANCEL_JOB_NO_BANNER,
                Some("srun: Job step aborted: Waiting up to 7 seconds for job step to finish."),
            ),
            (
                "an aborted step with no banner (a node lost)",
                "srun: error: Node failure on n2\nsrun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n",
                None,
            ),
            ("nothing of Slurm", "Traceback (most recent call last):\nValueError: x\n", None),
            ("", "", None),
        ];
        for (what, text, want) in table {
            assert_eq!(slurm_cancel(text).as_deref(), *want, "{what}");
        }
    }
}
