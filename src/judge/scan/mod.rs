//! Turns the text a training job printed (or a kernel / scheduler log) into *findings*: lines that
//! carry a known out-of-memory or kill signature, each tagged with the class of failure it
//! speaks for and the name of the signature family that matched. The families are data: one
//! table ([`table`]'s `SIGNATURES`) of name, class, patterns, veto and, for a message that names
//! no device, the patterns of the lines around it that decide its class. [`lines`] reads the
//! rest of a traceback that tells how it ended (exception lines, chain banners, teardown frames,
//! skipped batches). The `prescreen` module says, before anything is compiled, whether a text
//! may show a memory failure at all.
//!
//! This module only recognises text. It never decides why an attempt ended: weighing findings
//! against the exit status and the kernel's counters is [`crate::judge::classify`]'s job, and
//! reading logs, `/proc/vmstat` or `/dev/kmsg` belongs to the caller. Everything here is pure and
//! runs in time linear in the input: every family's patterns are compiled once into one
//! [`RegexSet`], each line is tested once on its own and once glued to its neighbour (to see
//! through terminal hard-wraps).

mod general;
pub mod lines;
mod prescreen;
pub mod table;

pub(crate) use prescreen::may_show_memory_error;

use regex::{Regex, RegexSet};
use std::collections::HashMap;
use std::sync::OnceLock;

use table::Family::{self, *};
use table::{Role, SHELL_JOB_KILLED, SHELL_PID_KILLED, SIGNATURES};

/// One line of text that matched a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The class of failure the signature speaks for.
    pub family: Family,
    /// The name of the signature family that matched (an entry of `SIGNATURES`, e.g.
    /// `"pytorch_allocator_oom"`): what `oomguard classify --explain` shows, so a report of a
    /// miss names the entry to fix.
    pub name: &'static str,
    /// The matching line, with log prefixes removed and cut to about 200 characters around the
    /// match; it is shown to people as evidence.
    pub line: String,
}

/// How the general rule's evidence starts, so a reader sees that no table entry matched.
pub(crate) const GENERAL_RULE_EVIDENCE: &str = "general rule: ";

/// Log prefixes that hide where a message starts. Removed (repeatedly) before whole-line
/// signatures are tried and before a line is kept as evidence. Samples, one per alternative:
/// `[rank3]: `, `[default3]:` (torchrun `--tee`), `  3: ` (srun `--label`, padded to the widest
/// task number), `[1] `, `(raylet) `, `2025-11-12T11:25:13.4961658Z `,
/// `2024-04-29T14:55:41,678628+02:00 `, `2021-03-15 15:35:08.060367: `,
/// `[2023-10-13 17:40:02,544] `, `May 15 23:09:27 host kernel: `, `[  514.682838] `,
/// `[Thu Dec  7 00:05:14 2017] `, `E0325 20:57:27.620000 2606 api.py:869] `,
/// `W tensorflow/core/framework/op_kernel.cc:975] `, `056444Z `, `06/26 18:54:31 `,
/// `ERROR    | 2024-08-21 22:56:04 | autotrain.trainers.common:wrapper:121 - `,
/// `ERROR:torch.distributed.elastic.multiprocessing.api:`, a rich `ERROR    ` level column, and
/// a tqdm bar the message was glued to: `100%|██████| 1135/1136 [25:31<00:01,  1.11s/it]`.
const PREFIX: &str = r"(?x)^(?:
    \[(?:rank|default)\s*\d+\]:\s*
  | \d{1,6}:\x20
  | \[\d+\]\s+
  | \([a-z_]+(?:=\d+)?(?:,\s*ip=[\d.]+)?\)\s+
  | \d{4}-\d\d-\d\d[T\x20]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?:?\s+
  | \[\d{4}-\d\d-\d\d[T\x20][^\]]{0,40}\]\s*
  | [A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\S+\s+(?:kernel:\s*)?
  | \[\s*\d+\.\d+\]\s*
  | \[[A-Z][a-z]{2}\s[A-Z][a-z]{2}\s+\d{1,2}\s\d\d:\d\d:\d\d\s\d{4}\]\s*
  | [IWEF]\d{4}\s\d\d:\d\d:\d\d\.\d+\s+\d+\s+[^\]\s]+\]\s*
  | [IWEF]\s[\w/.\-]+:\d+\]\s*
  | \d{6}Z\s+
  | \d\d/\d\d\s\d\d:\d\d:\d\d\s+
  | (?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*\|[^|]{0,40}\|[^|]{0,120}?\s-\s
  | (?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:
  | (?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s{2,}
  | [^\n]{0,200}?\d{1,3}%\|?[^|\n]{0,200}\|[^\[\n]{0,80}\[[^\]\n]{0,60}<[^\]\n]{0,60}\]
)";

/// Longest stretch of a line, in bytes, kept on each side when two lines are glued together.
const GLUE_SPAN: usize = 200;
/// Longest evidence line, in bytes.
const EVIDENCE_MAX: usize = 200;
/// Most findings returned; the latest are kept, since the end of a log says how it died.
const MAX_FINDINGS: usize = 200;

struct Compiled {
    /// Every pattern of every family, in table order: one pass over a line tests them all.
    set: RegexSet,
    /// The family (index into [`SIGNATURES`]) of each pattern in `set`.
    owner: Vec<usize>,
    /// Each pattern on its own, to find where it matched.
    each: Vec<Regex>,
    /// Each family's veto.
    vetoes: Vec<Option<Regex>>,
    /// Each family's [`Nearby`](table::Nearby) patterns, with the class each gives.
    nearby: Vec<Vec<(Regex, Family)>>,
    prefix: Regex,
    shell_kill: Regex,
}

fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let (owner, patterns): (Vec<usize>, Vec<&str>) = SIGNATURES
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.patterns.iter().map(move |p| (i, *p)))
            .unzip();
        Compiled {
            set: RegexSet::new(&patterns).expect("signature patterns compile"),
            owner,
            each: patterns
                .iter()
                .map(|p| Regex::new(p).expect("signature compiles"))
                .collect(),
            vetoes: SIGNATURES
                .iter()
                .map(|s| s.veto.map(|v| Regex::new(v).expect("veto compiles")))
                .collect(),
            nearby: SIGNATURES
                .iter()
                .map(|s| {
                    s.nearby.map_or_else(Vec::new, |n| {
                        n.by.iter()
                            .map(|(p, class)| (Regex::new(p).expect("nearby compiles"), *class))
                            .collect()
                    })
                })
                .collect(),
            prefix: Regex::new(PREFIX).expect("prefix pattern compiles"),
            shell_kill: Regex::new(&format!("{SHELL_JOB_KILLED}|{SHELL_PID_KILLED}"))
                .expect("shell kill pattern compiles"),
        }
    })
}

/// Removes log prefixes (timestamps, rank tags, syslog/glog headers, a glued tqdm bar) from the
/// start of `line`, then leading whitespace.
pub(crate) fn strip_prefixes(line: &str) -> &str {
    let prefix = &compiled().prefix;
    let mut rest = line.trim_start();
    // A few rounds cover stacked prefixes ("May 15 ... kernel: [  514.68] ...") while keeping
    // the work per line bounded.
    for _ in 0..6 {
        match prefix.find(rest) {
            Some(m) if m.end() > 0 => rest = rest[m.end()..].trim_start(),
            _ => break,
        }
    }
    rest
}

/// Splits output into lines on `\n` and on `\r`, since tqdm redraws its bar after a bare `\r`
/// and programs print their error right after it.
pub(crate) fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    for piece in text.split('\n') {
        let piece = piece.strip_suffix('\r').unwrap_or(piece);
        lines.extend(piece.split('\r'));
    }
    lines
}

/// The line number in the file (1-based, counting `\n`) of each line [`split_lines`] returns:
/// pieces of one line split at a bare `\r` share its number.
pub(crate) fn line_numbers(text: &str) -> Vec<usize> {
    let mut numbers = Vec::new();
    for (n, piece) in text.split('\n').enumerate() {
        let piece = piece.strip_suffix('\r').unwrap_or(piece);
        numbers.extend(piece.split('\r').map(|_| n + 1));
    }
    numbers
}

/// Whether a (prefix-stripped) line is a shell's report that its job died of SIGKILL, such as
/// bash's bare `Killed` or `slurm_script: line 28:  8156 Killed   python3 main.py`. A shell does
/// not SIGKILL its own foreground job, so on Linux the sender is almost always the kernel's OOM
/// killer; launchers (torchrun, DeepSpeed, IDEs) do send SIGKILL themselves when they tear a job
/// down, so their `-9` reports are weaker evidence.
pub fn is_shell_job_kill(line: &str) -> bool {
    compiled().shell_kill.is_match(line.trim())
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The part of `text` worth showing: all of it when short, else about [`EVIDENCE_MAX`] bytes
/// starting a little before the match, with `…` where it was cut.
fn evidence(text: &str, at: Option<(usize, usize)>) -> String {
    let text = text.trim();
    if text.len() <= EVIDENCE_MAX {
        return text.to_string();
    }
    let (start, _) = at.unwrap_or((0, 0));
    let from = floor_boundary(text, start.saturating_sub(60));
    let to = floor_boundary(text, from + EVIDENCE_MAX);
    let mut out = String::with_capacity(to - from + 8);
    if from > 0 {
        out.push('…');
    }
    out.push_str(text[from..to].trim());
    if to < text.len() {
        out.push('…');
    }
    out
}

/// One line prepared for matching.
struct Prepared<'a> {
    /// Prefix-stripped, trimmed at the start only (trailing spaces matter when a wrapped
    /// phrase is glued back together: "Out \nof memory").
    text: &'a str,
    /// The line as printed, for gluing onto its predecessor.
    raw: &'a str,
    /// Source code echoed in a Python traceback: a program's own `except MemoryError:` or
    /// `print("CUDA out of memory")` is not an event.
    echo: bool,
}

/// Scans `text` and returns its findings in the order they appear, each with the index of the
/// line it was found on. Repeated identical findings are kept once, at their last position.
pub(crate) fn scan_positions(text: &str) -> Vec<(usize, Finding)> {
    scan_positions_without(text, None)
}

/// [`scan_positions`] as if the family named `without` were not in the table: what the text
/// would have said without it (the runner-up that `classify --explain` shows).
pub(crate) fn scan_positions_without(text: &str, without: Option<&str>) -> Vec<(usize, Finding)> {
    match without {
        Some(name) => scan_inner(text, &[name], false),
        None => scan_inner(text, &[], true),
    }
}

/// The scan as if the families named in `without` were not in the table, with or without the
/// general rule (`general`): the table's own runner-up leaves the rule out (it would only say
/// again what the winner said); the measure of how the rule stands in for families the table
/// was never told about keeps it.
pub(crate) fn scan_inner(text: &str, without: &[&str], general: bool) -> Vec<(usize, Finding)> {
    let scan = Scan {
        c: compiled(),
        without,
        lines: prepare(text),
    };
    let (mut hits, per_line) = scan.line_hits();
    // After the lines' own hits, so that hits keep the order the findings are built in.
    hits.extend(scan.glued_hits(&per_line));
    let mut out = scan.findings(hits);
    if general {
        scan.add_general_rule(&mut out);
    }
    latest_distinct(out)
}

/// Splits `text` into lines and marks the source code a traceback echoes, so that a program's
/// own `except MemoryError:` is never read as the event it names.
fn prepare(text: &str) -> Vec<Prepared<'_>> {
    let raw_lines = split_lines(text);
    let mut lines: Vec<Prepared> = Vec::with_capacity(raw_lines.len());
    let mut after_frame = false;
    for raw in raw_lines {
        let trimmed = raw.trim_start();
        let is_frame = trimmed.starts_with("File \"") && trimmed.contains("\", line ");
        let echo = after_frame && !is_frame && trimmed.len() < raw.len();
        after_frame = is_frame;
        let text = strip_prefixes(raw);
        // Rich tracebacks draw source code inside a box of │ characters.
        let echo = echo || text.starts_with('│');
        lines.push(Prepared { text, raw, echo });
    }
    lines
}

/// A table entry's match before it becomes a [`Finding`]: kept apart because whether it counts
/// (a Slurm limit hit) and which class it speaks for (its nearby lines) are only known once
/// every line has been read.
struct Hit {
    /// Index of the line it was found on (the first of a glued pair).
    at: usize,
    /// Index of the entry in [`SIGNATURES`].
    entry: usize,
    /// What is shown of the matching text.
    evidence: String,
}

/// What every step of one scan reads: the compiled table, the entries left out, and the text's
/// prepared lines.
struct Scan<'t, 'w> {
    c: &'static Compiled,
    without: &'w [&'w str],
    lines: Vec<Prepared<'t>>,
}

/// Whether entries `a` and `b` describe the same message: several entries of one class often
/// match one line ("torch.OutOfMemoryError: CUDA out of memory"), which is one finding.
fn same_message(a: usize, b: usize) -> bool {
    SIGNATURES[a].class == SIGNATURES[b].class && SIGNATURES[a].role == SIGNATURES[b].role
}

impl Scan<'_, '_> {
    /// Each line's own hits, and per line the entries that matched it, so that the glued pass
    /// does not say again what a line said alone.
    fn line_hits(&self) -> (Vec<Hit>, Vec<Vec<usize>>) {
        let mut found = Vec::new();
        let mut per_line: Vec<Vec<usize>> = Vec::with_capacity(self.lines.len());
        for (i, line) in self.lines.iter().enumerate() {
            let mut hits: Vec<usize> = Vec::new();
            let text = line.text.trim_end();
            if !line.echo && !text.is_empty() {
                let next = self.lines.get(i + 1).map(|l| l.raw);
                for (idx, pat) in self.matching_entries(text) {
                    if self.vetoed(idx, text, next) || hits.iter().any(|&h| same_message(h, idx)) {
                        continue;
                    }
                    hits.push(idx);
                    found.push(Hit {
                        at: i,
                        entry: idx,
                        evidence: self.shown(pat, text),
                    });
                }
            }
            per_line.push(hits);
        }
        (found, per_line)
    }

    /// Terminal hard-wraps split phrases across lines ("Memory Mana\ngement", "Out \nof memory",
    /// "ray log\ns"): each line's end glued to the next line's start, keeping what neither line
    /// matched alone (`per_line`, from [`Self::line_hits`]).
    fn glued_hits(&self, per_line: &[Vec<usize>]) -> Vec<Hit> {
        let lines = &self.lines;
        let mut found = Vec::new();
        let mut glued = String::with_capacity(2 * GLUE_SPAN);
        for i in 0..lines.len().saturating_sub(1) {
            let (a, b) = (&lines[i], &lines[i + 1]);
            if a.echo || b.echo || a.text.trim().is_empty() || b.raw.trim().is_empty() {
                continue;
            }
            glued.clear();
            glued
                .push_str(&a.text[ceil_boundary(a.text, a.text.len().saturating_sub(GLUE_SPAN))..]);
            glued.push_str(&b.raw[..floor_boundary(b.raw, GLUE_SPAN)]);
            let mut glued_hits: Vec<usize> = Vec::new();
            for (idx, pat) in self.matching_entries(&glued) {
                let seen = |hits: &[usize]| hits.iter().any(|&h| same_message(h, idx));
                if SIGNATURES[idx].whole_line
                    || seen(&per_line[i])
                    || seen(&per_line[i + 1])
                    || seen(&glued_hits)
                {
                    continue;
                }
                if self.vetoed(idx, &glued, lines.get(i + 2).map(|l| l.raw)) {
                    continue;
                }
                glued_hits.push(idx);
                found.push(Hit {
                    at: i,
                    entry: idx,
                    evidence: self.shown(pat, &glued),
                });
            }
        }
        found
    }

    /// The entries (and the first pattern of each) that match `text`, each once, in table
    /// order, leaving out those the scan was told to do without.
    fn matching_entries(&self, text: &str) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new(); // (entry, pattern)
        for pat in self.c.set.matches(text).iter() {
            let idx = self.c.owner[pat];
            if !self.without.contains(&SIGNATURES[idx].name)
                && out.last().is_none_or(|&(f, _)| f != idx)
            {
                out.push((idx, pat));
            }
        }
        out
    }

    /// Whether entry `idx`'s veto matches `context`, or the start of the `next` line, since a
    /// hard-wrap may push the veto phrase onto it.
    fn vetoed(&self, idx: usize, context: &str, next: Option<&str>) -> bool {
        let Some(veto) = &self.c.vetoes[idx] else {
            return false;
        };
        if veto.is_match(context) {
            return true;
        }
        next.is_some_and(|n| veto.is_match(&n[..floor_boundary(n, GLUE_SPAN)]))
    }

    /// The evidence of pattern `pat`'s match in `text`: cut around where it matched, so that a
    /// long line still shows the match.
    fn shown(&self, pat: usize, text: &str) -> String {
        let found = self.c.each[pat].find(text).map(|m| (m.start(), m.end()));
        evidence(text, found)
    }

    /// The class entry `idx`'s match on line `i` speaks for: its own, or what the lines around
    /// it say (see [`Nearby`](table::Nearby)), for a message that names no device.
    fn class_at(&self, idx: usize, i: usize) -> Family {
        let s = &SIGNATURES[idx];
        let Some(n) = s.nearby else {
            return s.class;
        };
        let lines = &self.lines;
        let says = |j: usize| {
            let text = lines[j].text;
            self.c.nearby[idx]
                .iter()
                .find(|(re, _)| re.is_match(text))
                .filter(|_| (n.holds)(text))
                .map(|(_, class)| *class)
        };
        (0..=n.lines)
            .flat_map(|d| [i.checked_sub(d), (d > 0).then_some(i + d)])
            .flatten()
            .filter(|&j| j < lines.len())
            .find_map(says)
            .unwrap_or(s.class)
    }

    /// The hits that are findings, each with its class: Slurm's "Exceeded job memory limit"
    /// counts only next to a sign that Slurm stopped the job, and the stop itself never does.
    fn findings(&self, hits: Vec<Hit>) -> Vec<(usize, Finding)> {
        let has = |role: Role, class: Family| {
            hits.iter()
                .any(|h| SIGNATURES[h.entry].role == role && SIGNATURES[h.entry].class == class)
        };
        let slurm_fatal = has(Role::SlurmStopped, SlurmOom) && !has(Role::Finding, SlurmOom);
        hits.into_iter()
            .filter_map(|h| {
                let s = &SIGNATURES[h.entry];
                let finding = Finding {
                    family: self.class_at(h.entry, h.at),
                    name: s.name,
                    line: h.evidence,
                };
                match s.role {
                    Role::Finding => Some((h.at, finding)),
                    Role::SlurmLimitHit if slurm_fatal => Some((h.at, finding)),
                    _ => None,
                }
            })
            .collect()
    }

    /// When no entry said that memory ran out, the general rule (see [`general`]) may: it
    /// stands in for the wordings the table was never told about.
    fn add_general_rule(&self, out: &mut Vec<(usize, Finding)>) {
        let memory = |f: &Finding| {
            matches!(
                f.family,
                DeviceOom | HostOom | WorkerKilled | KernelOomKill | SlurmOom
            )
        };
        if out.iter().any(|(_, f)| memory(f)) {
            return;
        }
        let texts: Vec<&str> = self
            .lines
            .iter()
            .map(|l| if l.echo { "" } else { l.text })
            .collect();
        let killed = out.iter().any(|(_, f)| f.family == KilledBySigkill);
        if let Some((at, family, line)) = general::find(&texts, !killed) {
            let shown = evidence(&line, None);
            out.push((
                at,
                Finding {
                    family,
                    name: general::NAME,
                    line: format!("{GENERAL_RULE_EVIDENCE}{shown}"),
                },
            ));
        }
    }
}

/// `out` in line order with each distinct finding kept once, at its last position (logs repeat
/// themselves), and only the latest [`MAX_FINDINGS`], since the end of a log says how it died.
fn latest_distinct(mut out: Vec<(usize, Finding)>) -> Vec<(usize, Finding)> {
    out.sort_by_key(|(i, _)| *i);
    let mut last: HashMap<(Family, &str), usize> = HashMap::new();
    for (pos, (_, f)) in out.iter().enumerate() {
        last.insert((f.family, f.line.as_str()), pos);
    }
    let keep: Vec<bool> = out
        .iter()
        .enumerate()
        .map(|(pos, (_, f))| last[&(f.family, f.line.as_str())] == pos)
        .collect();
    let mut keep = keep.into_iter();
    out.retain(|_| keep.next().unwrap_or(false));
    if out.len() > MAX_FINDINGS {
        out.drain(..out.len() - MAX_FINDINGS);
    }
    out
}

/// The names of the table's entries that have a pattern matching some line of `text` (its
/// prefixes stripped, or glued to the next line as the scan glues hard-wraps), whether or not
/// the match became a finding: every entry that had a say in reading it.
#[cfg(test)]
pub(crate) fn entries_matching(text: &str) -> std::collections::BTreeSet<&'static str> {
    let c = compiled();
    let lines: Vec<&str> = split_lines(text).into_iter().map(strip_prefixes).collect();
    let glued = lines.windows(2).map(|w| format!("{}{}", w[0], w[1]));
    lines
        .iter()
        .map(|l| l.to_string())
        .chain(glued)
        .flat_map(|l| c.set.matches(&l).into_iter().collect::<Vec<_>>())
        .map(|pat| SIGNATURES[c.owner[pat]].name)
        .collect()
}

/// Scans output text for out-of-memory and kill signatures, and returns what it found in the
/// order it appears (a signature repeated verbatim is reported once, at its last occurrence).
pub fn scan(text: &str) -> Vec<Finding> {
    scan_positions(text).into_iter().map(|(_, f)| f).collect()
}

/// The distributed rank a line of output came from, when a launcher tagged it: torchrun's
/// `[rank1]: RuntimeError: ...` and `--tee`'s `[default1]:Traceback ...`, possibly behind a
/// timestamp, and srun `--label`'s task number (`1: RuntimeError: ...`, ` 1: ...` when padded).
/// `None` for untagged lines.
pub(crate) fn rank_of(line: &str) -> Option<u32> {
    static RANK: OnceLock<Regex> = OnceLock::new();
    let re = RANK.get_or_init(|| {
        Regex::new(r"^[\d\s\-:.,TZ+/]{0,40}\[(?:rank|default)\s*(\d+)\]:|^\s{0,6}(\d{1,6}): ")
            .expect("rank pattern compiles")
    });
    let caps = re.captures(line)?;
    caps.get(1).or(caps.get(2))?.as_str().parse().ok()
}

/// PIDs named as OOM-kill victims by a kernel log line, e.g. "Memory cgroup out of memory:
/// Killed process 4242 (python3) total-vm:..." or
/// "oom-kill:constraint=CONSTRAINT_MEMCG,...,task=python3,pid=4242,uid=0" or pre-4.19
/// "Kill process N (x) score 0 or sacrifice child". Returns None when the line is not such a
/// line.
pub fn kernel_oom_victim_pid(line: &str) -> Option<u32> {
    static VICTIM: OnceLock<Regex> = OnceLock::new();
    let re = VICTIM.get_or_init(|| {
        // Samples:
        //   "[  514.682838] Memory cgroup out of memory: Killed process 15617 (python3) total-vm:11892kB, ..."
        //   "Out of memory: Kill process 24572 (java) score 0 or sacrifice child"
        //   "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=perl,pid=1440763,uid=21417"
        //   "oom_reaper: reaped process 15617 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"
        Regex::new(
            r"\bKill(?:ed)? process (\d+) \(|\boom-kill:constraint=.*?[,\s]pid=(\d+)\b|\boom_reaper: reaped process (\d+)\b",
        )
        .expect("victim pattern compiles")
    });
    let caps = re.captures(line)?;
    caps.iter().skip(1).flatten().next()?.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn families(text: &str) -> Vec<Family> {
        scan(text).into_iter().map(|f| f.family).collect()
    }

    /// (input, families expected, in order). An empty list means "nothing here".
    pub(super) const TABLE: &[(&str, &[Family])] = &[
        // --- accelerator
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB", &[DeviceOom]),
        ("[rank3]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 124.00 MiB.", &[DeviceOom]),
        ("RuntimeError: MPS backend out of memory (MPS allocated: 15.05 GB, other allocations: 11.91 GB, max allowed: 27.20 GB).", &[DeviceOom]),
        ("torch.AcceleratorError: CUDA error: out of memory", &[DeviceOom]),
        ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510", &[DeviceOom]),
        ("host:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'", &[DeviceOom]),
        ("[rank7]: Cuda failure 1 'invalid argument'", &[]),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", &[DeviceOom]),
        ("init.lua:118: Error in CuDNN: CUDNN_STATUS_ALLOC_FAILED (cudnnFindConvolutionForwardAlgorithm)", &[DeviceOom]),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.", &[DeviceOom]),
        ("Allocation on device 0 would exceed allowed memory. (out of memory)", &[DeviceOom]),
        ("RuntimeError: No executable batch size found, reached zero.", &[DeviceOom]),
        ("h:1:2 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes", &[DeviceOom]),
        ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3743729664 bytes.", &[DeviceOom]),
        ("XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 2.99GiB (3206250496B) on device ordinal 0", &[DeviceOom]),
        ("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem.", &[DeviceOom]),
        ("grpc: RESOURCE_EXHAUSTED: Received message larger than max (5000000 vs. 4194304)", &[]),
        ("ResourceExhaustedError: failed to allocate memory [Op:AddV2]", &[DeviceOom]),
        ("errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[52,64,480,300] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc", &[DeviceOom]),
        ("W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory trying to allocate 24.38MiB.  See logs for memory state.", &[DeviceOom]),
        ("2025-01-22 11:18:38.927063: W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean", &[]),
        ("OutOfMemoryError                          Traceback (most recent call last)", &[DeviceOom]),
        ("E0611 context_gpu.cu:415] event_gpu.cc:17: out of memory", &[DeviceOom]),
        // Hard-wrapped phrases are glued back together.
        ("E local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out \nof memory while trying to allocate 5520758552 bytes.", &[DeviceOom]),
        // --- host
        ("RuntimeError: [enforce fail at CPUAllocator.cpp:64] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 1178729664 bytes. Error code 12 (Cannot allocate memory)", &[HostOom]),
        ("RuntimeError: [enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0", &[HostOom]),
        ("RuntimeError: $ Torch: not enough memory: you tried to allocate 72GB. Buy new RAM!", &[HostOom]),
        ("OSError: [Errno 12] Cannot allocate memory ", &[HostOom]),
        ("ImportError: /lib/aarch64-linux-gnu/libgomp.so.1: cannot allocate memory in static TLS block", &[]),
        ("numpy.core._exceptions.MemoryError: Unable to allocate 926. GiB for an array with shape (6794880, 36601) and data type float32", &[HostOom]),
        ("    obj = StockUnpickler.load(self)\nMemoryError", &[HostOom]),
        ("terminate called after throwing an instance of 'std::bad_alloc'", &[HostOom]),
        ("OOM when allocating tensor with shape[25088,4096] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu [Op:Add]", &[HostOom]),
        ("(raylet) node_manager.cc:3277: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed", &[HostOom]),
        ("OSError: [Errno 28] No space left on device: 'checkpoints/model.pt'", &[]),
        // --- workers
        ("RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed. ", &[WorkerKilled]),
        ("RuntimeError: DataLoader worker (pid 7579) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory.", &[WorkerKilled]),
        ("RuntimeError: unable to write to file </torch_722_783672312_1>: No space left on device (28)", &[WorkerKilled]),
        ("RuntimeError: DataLoader worker (pid 624) is killed by signal: Segmentation fault. ", &[]),
        ("RuntimeError: DataLoader worker (pid 109552) exited unexpectedly with exit code 1. Details are lost", &[]),
        // --- kernel
        ("May 15 23:09:27 host kernel: [  514.682838] Memory cgroup out of memory: Killed process 15617 (python3) total-vm:11892kB", &[KernelOomKill]),
        ("kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),task=pt_main_thread,pid=461754,uid=0", &[KernelOomKill]),
        ("    \"reason\": \"OOMKilling\",", &[KernelOomKill]),
        ("        \"OOMKilled\": false,", &[]),
        // --- slurm
        ("slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.", &[SlurmOom]),
        ("srun: error: udc-ba26-19: task 0: Out Of Memory", &[SlurmOom]),
        ("slurmstepd: error: Exceeded step memory limit at some point.", &[]),
        ("slurmstepd: error: Exceeded job memory limit\nslurmstepd: error: *** JOB 42664148 ON cn3152 CANCELLED AT 2017-06-06T00:11:58 ***", &[SlurmOom]),
        ("slurmstepd: error: *** JOB 494583 ON n1 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***", &[]),
        // --- SIGKILL
        ("training...\nKilled", &[KilledBySigkill]),
        ("bash: 14837 Killed                  python3 -c \"import os\"", &[KilledBySigkill]),
        ("/tmp/x.sh: line 1: 14997 Killed                  python3 x.py", &[KilledBySigkill]),
        ("epoch 3: 14997 samples Killed by the filter", &[]),
        ("100%|██████████| 3000001/3000001 [03:33<00:00, 14061.26it/s]\rKilled\n", &[KilledBySigkill]),
        ("E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: /root/miniconda3/bin/python", &[KilledBySigkill]),
        ("E1223 05:18:02.971000 3304089 api.py:882] failed (exitcode: -11) local_rank: 0 (pid: 3304209)", &[]),
        ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", &[KilledBySigkill]),
        ("subprocess.CalledProcessError: Command '['python']' died with <Signals.SIGKILL: 9>.", &[KilledBySigkill]),
        ("Killed process 28438 (java) total-vm:20255636kB", &[KernelOomKill]),
        // --- words about memory that are not an OOM
        ("RuntimeError: CUDA error: an illegal memory access was encountered", &[]),
        ("THCudaCheck FAIL file=/opt/THCCachingHostAllocator.cpp line=278 error=77 : an illegal memory access was encountered", &[]),
        ("kernel1 = batch[\"k\"].to(device=config.device, memory_format=torch.channels_last)", &[]),
        ("[04/27 13:03:34 d2.utils.events]:  eta: 4:00:48  iter: 319  total_loss: 2.127  max_mem: 8584M", &[]),
        ("2022-07-13 09:48:59,378 - mmseg - INFO - Iter [750/20000]\tlr: 4.835e-03, memory: 8672, loss: 1.9", &[]),
        ("[2023-08-16 16:42:39,674] [INFO] [config.py:957:print]   memory_breakdown ............. False", &[]),
        ("[INFO] [utils.py:836:see_memory_usage] CPU Virtual Memory:  used = 27.16 GB, percent = 10.8%", &[]),
        ("[WARNING] [stage3.py:1850:step] 4 pytorch allocator cache flushes since last step. this happens when there is high memory pressure", &[]),
        ("|       CUDA OOMs: 0            |        cudaMalloc retries: 0         |", &[]),
        ("Tip: to avoid GPU out of memory errors, lower --batch-size", &[]),
        // Signatures named in the corpus notes but not in its visible files.
        ("h:1:2 [0] NCCL WARN Failed to CUDA calloc async 4096 bytes", &[DeviceOom]),
        ("HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. Available Free mem : 24 MB", &[DeviceOom]),
        ("torch.OutOfMemoryError: XPU out of memory. Tried to allocate 2.00 GiB.", &[DeviceOom]),
        ("Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html", &[DeviceOom]),
        ("Task in /kubepods/pod1/abc killed as a result of limit of /kubepods/pod1", &[KernelOomKill]),
        ("NCCL WARN Error: failed to extend /dev/shm/nccl-Jw1bEY to 9637892 bytes", &[HostOom]),
        ("2023-01-01 | WARNING | metaseq.trainer | attempting to recover from OOM in forward/backward pass", &[]),
        ("UserWarning: 'pin_memory' argument is set as true but no accelerator is found", &[]),
        ("epoch 3 | loss 1.23 | mem_usage:cuda:0 8.9GB", &[]),
        ("  exitcode  : -6 (pid: 4242)", &[]),
        ("Signal 6 (SIGABRT) received by PID 4242", &[]),
        ("Signal 9 (SIGKILL) received by PID 4242", &[KilledBySigkill]),
        // ONNX Runtime: the arena named around the failure decides; none named is the GPU's.
        ("Non-zero status code returned while running Conv node. Status Message: bfc_arena.cc:330 onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 285081600", &[DeviceOom]),
        ("[I:onnxruntime:, bfc_arena.cc:306 AllocateRawInternal] Extending BFCArena for Cpu. bin_num:12 (requested) num_bytes: 1440744\n[E:onnxruntime:, sequential_executor.cc:339] Non-zero status code returned while running Conv node. Status Message: bfc_arena.cc:330 onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 285081600", &[HostOom]),
        ("[I:onnxruntime:, bfc_arena.cc:306 AllocateRawInternal] Extending BFCArena for Cpu. bin_num:12\n[I:onnxruntime:, bfc_arena.cc:306 AllocateRawInternal] Extending BFCArena for Cuda. bin_num:20\n[E:onnxruntime:] Non-zero status code returned while running MatMul node. Status Message: onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 8388608000", &[DeviceOom]),
        ("onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 939524096\nproviders: ['CPUExecutionProvider']", &[HostOom]),
        // Triton's per-kernel shared-memory limit is no allocation failure, unless one follows.
        ("select_algorithm.py:3213 [1/0] No valid triton configs. OutOfMemoryError: out of resource: triton_mm Required: 294912 Hardware limit:232448 Reducing block sizes or `num_stages` may help.", &[]),
        ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376. Reducing block sizes or `num_stages` may help.", &[]),
        ("No valid triton configs. OutOfMemoryError: out of resource: triton_mm Required: 294912 Hardware limit:232448\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", &[DeviceOom]),
        ("cupy.cuda.memory.OutOfMemoryError: out of memory to allocate 1073741824 bytes (total 12373894656 bytes)", &[DeviceOom]),
        // Schedulers: the LSF limit that is memory, not the others; exit 143 alone says nothing.
        ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\nExited with exit code 143.", &[KernelOomKill]),
        ("TERM_THREADLIMIT: job killed after reaching LSF thread limit.\nExited with exit code 143.", &[]),
        // Issue 42: a userspace killer's or platform's memory reason beside a SIGKILL is an OOM
        // kill...
        ("systemd-oomd[659]: Marked /system.slice/x.service for killing due to memory pressure for /system.slice being 85.03% > 80.00% for > 2s with reclaim activity", &[KernelOomKill]),
        ("earlyoom v1.3\nsending SIGTERM to process 12006 \"python3\": badness 209, VmRSS 2891 MiB", &[KernelOomKill]),
        ("heroku[worker.1]: Error R15 (Memory quota vastly exceeded)\nheroku[worker.1]: Stopping process with SIGKILL\nheroku[worker.1]: Process exited with status 137", &[KernelOomKill, KilledBySigkill]),
        ("REPORT RequestId: 1\tDuration: 19266.38 ms\tMemory Size: 2688 MB\tMax Memory Used: 2581 MB\nError Runtime exited with error: signal: killed\nRuntime.ExitError", &[KernelOomKill]),
        ("Out of memory: Killed process 4242 (a.out)\nmpirun noticed that process rank 0 with PID 4242 on node n1 exited on signal 9 (Killed).", &[KernelOomKill, KernelOomKill]),
        // ...and without one it stays a SIGKILL.
        ("mpirun noticed that process rank 2 with PID 0 on node qy-PC exited on signal 9 (Killed).", &[KilledBySigkill]),
        ("RequestId: 1 Error: Runtime exited with error: signal: killed\nRuntime.ExitError", &[KilledBySigkill]),
        // Lambda's REPORT comes after every invocation: a peak far below the size is no reason,
        // nor is a job's h_vmem request, nor a device's allocation failure (its own finding).
        ("REPORT RequestId: 1\tMemory Size: 3008 MB\tMax Memory Used: 400 MB\nRequestId: 1 Error: Runtime exited with error: signal: killed", &[KilledBySigkill]),
        ("Resource List = h_vmem=16G,h_rt=3600\nmpirun noticed that process rank 0 with PID 1 on node n1 exited on signal 9 (Killed).", &[KilledBySigkill]),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nmpirun noticed that process rank 0 with PID 1 on node n1 exited on signal 9 (Killed).", &[DeviceOom, KilledBySigkill]),
        ("[CRITICAL] WORKER TIMEOUT (pid:17)\n[ERROR] Worker (pid:17) was sent SIGKILL! Perhaps out of memory?", &[KilledBySigkill]),
        // Device allocators beyond CUDA's words, wherever the vendor words sit.
        ("vkAllocateMemory failed", &[DeviceOom]),
        ("MESA: error: ../src/intel/vulkan/anv_device.c:4237: VK_ERROR_OUT_OF_DEVICE_MEMORY", &[DeviceOom]),
        ("terminate called after throwing an instance of 'sycl::_V1::runtime_error'\n  what():  level_zero backend failed with error: 40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)", &[DeviceOom]),
        ("Error (ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)", &[DeviceOom]),
        ("allocate device memory failed.[FUNC:Init][FILE:memory_pool_manager.cc][LINE:50]", &[DeviceOom]),
        ("[4pdvGPU ERROR (pid:99)]: device OOM encountered: usage=9502195712 limit=8388608000", &[DeviceOom]),
        // A runtime's own heap report is host memory.
        ("FATAL ERROR: CALL_AND_RETRY_LAST Allocation failed - process out of memory", &[HostOom]),
        // A traceback's echoed source line is code, not an event.
        ("  File \"train.py\", line 12, in step\n    except torch.cuda.OutOfMemoryError:\nValueError: bad shape", &[]),
    ];

    #[test]
    fn table() {
        let mut bad = Vec::new();
        for (input, want) in TABLE {
            let got = families(input);
            if got != *want {
                bad.push(format!(
                    "{input:?}\n    want {want:?}\n    got  {got:?} {:?}",
                    scan(input)
                ));
            }
        }
        assert!(
            bad.is_empty(),
            "{} rows failed:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }

    #[test]
    fn family_names_are_unique_snake_case() {
        let mut seen = std::collections::BTreeSet::new();
        for s in SIGNATURES {
            assert!(
                !s.name.is_empty()
                    && s.name.starts_with(|c: char| c.is_ascii_lowercase())
                    && s.name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{:?} is not snake_case",
                s.name
            );
            assert!(seen.insert(s.name), "{:?} twice in SIGNATURES", s.name);
            assert!(!s.patterns.is_empty(), "{:?} has no pattern", s.name);
        }
    }

    /// (line, name of the family that must name its finding): the first family of a class
    /// that matches a line names it, so the specific families come before the catch-alls.
    const NAMES: &[(&str, &str)] = &[
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "pytorch_allocator_oom"),
        ("torch.AcceleratorError: CUDA error: out of memory", "cuda_runtime_oom"),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda_lib_alloc_failed"),
        ("E0611 context_gpu.cu:415] event_gpu.cc:17: out of memory", "device_out_of_memory_text"),
        ("OutOfMemoryError                          Traceback (most recent call last)", "oom_exception_class"),
        ("RuntimeError: [enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0", "pytorch_cpu_allocator_oom"),
        ("python3 invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGHUSER_MOVABLE), order=0", "kernel_oom_killer"),
        ("slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.", "slurm_cgroup_oom_kill"),
        ("slurmstepd: error: Exceeded job memory limit\nslurmstepd: error: *** JOB 42664148 ON cn3152 CANCELLED AT 2017-06-06T00:11:58 ***", "slurm_memory_limit_hit"),
        ("training...\nKilled", "shell_job_killed"),
        ("bash: 14837 Killed                  python3 -c \"import os\"", "shell_script_job_killed"),
        ("failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: /usr/bin/python", "launcher_exit_minus_9"),
        ("subprocess.CalledProcessError: Command '['python']' died with <Signals.SIGKILL: 9>.", "launcher_signal_sigkill"),
    ];

    /// Each family: a minimal text that it (and only it) matches, and a near miss that looks like
    /// it and must not match it (most match nothing at all). Every family has a row.
    const FAMILY_SAMPLES: &[(&str, &str, &str)] = &[
        ("pytorch_allocator_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA memory in use: 2.00 GiB out of 24.00 GiB"),
        ("cuda_runtime_oom", "RuntimeError: CUDA error: out of memory", "RuntimeError: CUDA error: an illegal memory access was encountered"),
        ("cuda_lib_alloc_failed", "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`"),
        ("cudnn_status_not_supported", "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.", "UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (Triggered internally at Conv_v8.cpp:919.)"),
        ("cuda_malloc_async_exceeded", "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)", "Allocation on device 0 took 3 ms"),
        ("cupy_pool_oom", "Exception in main training loop: out of memory to allocate 747110400 bytes (total 5722942464 bytes)", "Exception in main training loop: total 5722942464 bytes allocated so far"),
        ("onnxruntime_arena_oom", "onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 285081600", "[I:onnxruntime:log, bfc_arena.cc:306 AllocateRawInternal] Extending BFCArena for Cuda. bin_num:9 (requested) num_bytes: 160000"),
        ("tensorrt_out_of_memory", "[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: OutOfMemory (no further information)", "[TRT] [E] 2: [myelinBuilderUtils.cpp::getMyelinSupportType::1270] Error Code 2: Internal Error (ForeignNode does not support data-dependent shape)"),
        ("ggml_backend_alloc_failed", "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc failed: out of memory", "alloc_tensor_range: failed to allocate CPU buffer of size 437944320"),
        ("lsf_term_memlimit", "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "TERM_RUNLIMIT: job killed after reaching LSF run time limit."),
        ("notebook_ram_exhausted", "Your session crashed after using all available RAM.", "Your session crashed for an unknown reason."),
        ("vllm_kv_cache_oom", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", "INFO 11-18 18:07:26 worker.py:232] Memory profiling results: total_gpu_memory=79.15GiB; the KV cache blocks use 60.1GiB"),
        ("serve_warmup_oom", "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`", "INFO text_generation_router: Setting max batch total tokens to 4096 prefill tokens"),
        ("trainer_oom_skipping_batch", "| WARNING: ran out of memory, skipping batch", "| WARNING: ran out of patience, skipping evaluation"),
        ("accelerate_no_batch_size", "RuntimeError: No executable batch size found, reached zero.", "Found executable batch size 16"),
        ("nccl_cuda_alloc_failed", "node1:2:2 [0] include/alloc.h:48 NCCL WARN Failed to CUDA calloc 6291456 bytes", "node1:2:2 [0] NCCL INFO Allocated 6291456 bytes of CUDA memory"),
        ("xla_allocation_oom", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.", "XLA_PYTHON_CLIENT_PREALLOCATE=false stops JAX from taking 75% of the memory while trying to allocate up front"),
        ("xla_tpu_memory_space", "Ran out of memory in memory space hbm. Used 33.53G of 15.48G hbm.", "Memory space hbm: used 3.5G of 15.48G"),
        ("tf_oom_allocating_tensor", "tensorflow.python.framework.errors_impl.InternalError: OOM when allocating tensor with shape[25088,4096] on /job:localhost/replica:0/task:0/device:GPU:0", "Allocating tensor with shape[25088,4096] on device:GPU:0"),
        ("tf_bfc_ran_out", "W tensorflow/core/common_runtime/bfc_allocator.cc:246] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB.", "W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB with freed_by_count=0. The caller indicates that this is not a failure"),
        ("resource_exhausted", "tensorflow.python.framework.errors_impl.ResourceExhaustedError: failed to allocate memory [Op:Mul]", "grpc status RESOURCE_EXHAUSTED: too many requests, quota exceeded"),
        ("oom_exception_class", "OutOfMemoryError                          Traceback (most recent call last)", "java.lang.OutOfMemoryError: Java heap space"),
        ("device_out_of_memory_text", "E0611 context_gpu.cu:415] event_gpu.cc:17: out of memory", "the GPU is out of order"),
        ("pytorch_cpu_allocator_oom", "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 8 bytes.", "DefaultCPUAllocator: allocated 8 bytes"),
        ("th_buy_new_ram", "RuntimeError: $ Torch: not enough memory: you tried to allocate 0GB. Buy new RAM! at /pytorch/aten/src/TH/THGeneral.cpp:201", "you tried to allocate a new RAM disk"),
        ("errno_enomem", "OSError: [Errno 12] Cannot allocate memory", "OSError: [Errno 13] Permission denied: '/ckpt'"),
        ("numpy_array_memory_error", "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 926. GiB for an array with shape (352800, 352800) and data type float64", "Unable to open array with shape (3, 3)"),
        ("python_memory_error", "MemoryError", "NotAMemoryError: this is fine"),
        ("cpp_bad_alloc", "terminate called after throwing an instance of 'std::bad_alloc'", "terminate called after throwing an instance of 'std::out_of_range'"),
        ("tf_cpu_allocator_oom", "ResourceExhaustedError: OOM when allocating tensor with shape[25088,4096] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu", "Allocation of 411041792 exceeds 10% of free system memory."),
        ("ray_memory_monitor", "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "(raylet) [2023-01-01 00:00:00] memory usage 10% of the node"),
        ("dask_worker_memory_budget", "distributed.nanny - WARNING - Worker exceeded 95% memory budget. Restarting", "distributed.worker - WARNING - Unmanaged memory use is high."),
        ("windows_paging_file", "OSError: [WinError 1455] The paging file is too small for this operation to complete.", "OSError: [WinError 5] Access is denied"),
        ("java_heap_oom", "java.lang.OutOfMemoryError: Java heap space", "java.lang.IllegalStateException: heap is full of ideas"),
        ("nccl_shm_full", "NCCL WARN Error: failed to extend /dev/shm/nccl-HP0VwB to 9637892 bytes", "NCCL INFO Using /dev/shm for the shared-memory transport"),
        ("dataloader_worker_killed", "RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed.", "RuntimeError: DataLoader worker (pid 624) is killed by signal: Segmentation fault."),
        ("torch_shm_file_full", "RuntimeError: unable to write to file </torch_18693_1958915745>: No space left on device (28)", "OSError: [Errno 28] No space left on device: '/data/ckpt'"),
        ("kernel_oom_killer", "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:11892kB", "The kernel killed nothing today"),
        ("k8s_oom_killed", "Last State: Terminated\n  Reason: OOMKilled", "\"OOMKilled\": false,"),
        ("k8s_memory_eviction", "Message: The node was low on resource: memory. Container train was using 35505620Ki, which exceeds its request of 12Gi.", "Message: The node was low on resource: ephemeral-storage."),
        ("systemd_unit_oom_killer", "systemd[1]: user.slice: A process of this unit has been killed by the OOM killer.", "systemd[1]: train.service: Main process exited, code=exited, status=1/FAILURE"),
        ("earlyoom_kill", "earlyoom[812]: sending SIGTERM to process 4242 uid 1000 \"python3\": badness 900, VmRSS 12000 MiB", "earlyoom[812]: mem avail: 12000 of 15000 MiB (80.00%), swap free: 0 of 0 MiB"),
        ("macos_jetsam_event", "{\"bug_type\": \"298\", \"largestProcess\": \"Python\"}", "{\"bug_type\": \"309\", \"procName\": \"Python\"}"),
        ("yarn_container_memory", "Container killed by YARN for exceeding memory limits. 8.2 GB of 8 GB physical memory used.", "Container killed by the ApplicationMaster."),
        ("systemd_oomd_kill", "systemd-oomd[672]: Killed /user.slice/user-1000.slice/user@1000.service/app.slice/train.scope due to memory pressure", "systemd-oomd[672]: Considered 12 cgroups for killing, top candidates were:"),
        ("slurm_cgroup_oom_kill", "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup.", "slurmstepd: error: Detected 0 zombie process(es)"),
        ("srun_task_out_of_memory", "srun: error: node1: task 0: Out Of Memory", "srun: error: node1: task 0: Exited with exit code 1"),
        ("slurm_jobacct_exceeded_limit", "slurmstepd: error: Job 123 exceeded memory limit (2097152 > 2048000), being killed", "slurmstepd: error: Job 123 exceeded time limit, being killed"),
        ("slurm_out_of_memory_state", "      JobID    JobName      State ExitCode\n       4242      train OUT_OF_MEMORY    0:125", "       4242      train  COMPLETED      0:0"),
        ("slurm_memory_limit_hit", "slurmstepd: error: Exceeded job memory limit\nslurmstepd: error: *** JOB 42664148 ON cn3152 CANCELLED AT 2017-06-06T00:11:58 ***", "slurmstepd: error: Exceeded job memory limit\nepoch 3 done"),
        ("shell_job_killed", "training...\nKilled", "Killed the bug in training"),
        ("shell_script_job_killed", "bash: line 1: 4242 Killed                  python3 train.py", "bash: line 1: python3: command not found"),
        ("launcher_exit_minus_9", "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 290596)", "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 (pid: 290596)"),
        ("process_pool_worker_killed", "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL", "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code 1"),
        ("launcher_signal_sigkill", "subprocess.CalledProcessError: Command '['python']' died with <Signals.SIGKILL: 9>.", "subprocess.CalledProcessError: Command '['python']' died with <Signals.SIGSEGV: 11>."),
        // Issue 42's families.
        ("vulkan_device_alloc_failed", "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory", "ggml_vulkan: Found 1 Vulkan devices:"),
        ("level_zero_out_of_resources", "Native API failed. Native API returns: 40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)", "Native API failed. Native API returns: 45 (UR_RESULT_ERROR_INVALID_ARGUMENT)"),
        ("opencl_mem_object_allocation_failure", "[Error] CL_MEM_OBJECT_ALLOCATION_FAILURE", "[Error] CL_INVALID_KERNEL_ARGS"),
        ("vendor_device_memory_alloc_failed", "[bmlib_memory][error] bm_alloc_gmem failed, dev_id = 0, size = 0x1000000", "[bmlib_memory][info] bm_alloc_gmem dev_id = 0, size = 0x1000000"),
        ("hami_vgpu_device_oom", "[HAMI-core ERROR (pid:30 thread=1 allocator.c:53)]: Device 0 OOM 3171158016 / 3145728000", "[HAMI-core Msg(30:1:libvgpu.c:855)]: Initialized"),
        ("v8_javascript_heap_oom", "FATAL ERROR: Ineffective mark-compacts near heap limit Allocation failed - JavaScript heap out of memory", "[9178:0x7394fe0] 18891558 ms: Mark-sweep 3470.1 (4143.7) -> 3461.9 (4133.4) MB, 4143.7 / 0.0 ms  (average mu = 0.143, current mu = 0.026) allocation failure; GC in old space requested"),
        ("nohang_corrective_kill", "nohang[530]:   Send SIGKILL to the victim; total response time: 609 ms", "nohang[530]: Memory status after implementing a corrective action:"),
        ("heroku_r15_memory_quota", "heroku[worker.1]: Error R15 (Memory quota vastly exceeded)", "heroku[web.1]: Error R14 (Memory quota exceeded)"),
        ("platform_sigkill_report", "mpirun noticed that process rank 2 with PID 0 on node qy-PC exited on signal 9 (Killed).", "mpiexec noticed that process rank 0 with PID 10313 on node proton exited on signal 6 (Aborted)."),
        ("supervisor_sigkill_guess", "[ERROR] Worker (pid:17) was sent SIGKILL! Perhaps out of memory?", "[ERROR] Worker (pid:17) exited with code 1"),
    ];

    #[test]
    fn every_family_has_a_minimal_match_and_a_near_miss() {
        let mut bad = Vec::new();
        for (family, matching, near) in FAMILY_SAMPLES {
            let names: Vec<&str> = scan(matching).iter().map(|f| f.name).collect();
            if names != [*family] {
                bad.push(format!("{family}: {matching:?} gave {names:?}"));
            }
            let near_names: Vec<&str> = scan(near).iter().map(|f| f.name).collect();
            if near_names.contains(family) {
                bad.push(format!(
                    "{family}: near miss {near:?} matched ({near_names:?})"
                ));
            }
        }
        for s in SIGNATURES {
            if !CANNOT_STAND_ALONE.contains(&s.name)
                && !FAMILY_SAMPLES.iter().any(|(f, ..)| *f == s.name)
            {
                bad.push(format!("{}: no row in FAMILY_SAMPLES", s.name));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn findings_name_their_family() {
        for (text, want) in NAMES {
            let names: Vec<&str> = scan(text).iter().map(|f| f.name).collect();
            assert_eq!(names, [*want], "{text:?}");
        }
    }

    /// Families that cannot stand alone in any output.
    const CANNOT_STAND_ALONE: &[&str] = &[
        // Slurm stopping a job (a CANCELLED banner, srun's "task 0: Killed") is never a finding
        // itself: it only makes "Exceeded job memory limit" (slurm_memory_limit_hit) one.
        "slurm_stopped",
    ];

    /// Every family is shown to be needed by real output: at least one file of
    /// tests/fixtures/oom-corpus in which it is the only family that matches any line. A line
    /// matches the family that names its finding: the first of its class in the table (see
    /// [`NAMES`]), so a catch-all needs output that no specific family explains.
    #[test]
    fn every_family_has_a_corpus_file_of_its_own() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oom-corpus");
        let mut alone: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for entry in std::fs::read_dir(dir).expect("corpus dir") {
            let path = entry.expect("dir entry").path();
            if path.extension().is_none_or(|e| e != "txt") {
                continue;
            }
            let text =
                String::from_utf8_lossy(&std::fs::read(&path).expect("corpus file")).into_owned();
            let names: std::collections::BTreeSet<&str> =
                scan(&text).iter().map(|f| f.name).collect();
            if let [only] = names.into_iter().collect::<Vec<_>>()[..] {
                let file = path
                    .file_name()
                    .expect("file name")
                    .to_string_lossy()
                    .into_owned();
                alone.entry(only).or_default().push(file);
            }
        }
        let missing: Vec<&str> = SIGNATURES
            .iter()
            .map(|s| s.name)
            .filter(|name| !CANNOT_STAND_ALONE.contains(name) && !alone.contains_key(name))
            .collect();
        for name in CANNOT_STAND_ALONE {
            assert!(
                SIGNATURES.iter().any(|s| s.name == *name),
                "{name:?} is listed but not in SIGNATURES"
            );
        }
        assert!(
            missing.is_empty(),
            "families without a corpus file in which only they match: {missing:?}"
        );
    }

    #[test]
    fn hard_wrap_keeps_evidence_readable() {
        let text = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.11 GiB\n reserved in total by PyTorch) See documentation for Memory Mana\ngement and PYTORCH_CUDA_ALLOC_CONF";
        let found = scan(text);
        assert_eq!(found.len(), 1, "{found:?}"); // several signatures, one message
        assert!(found[0]
            .line
            .starts_with("torch.cuda.OutOfMemoryError: CUDA out of memory."));
    }

    #[test]
    fn long_lines_keep_the_match_in_evidence() {
        let argv = "'--flag', 'value', ".repeat(60);
        let text = format!("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] [{argv}] exits with return code = -9");
        let found = scan(&text);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].line.ends_with("exits with return code = -9"),
            "{:?}",
            found[0].line
        );
        assert!(found[0].line.chars().count() <= EVIDENCE_MAX + 2);
    }

    #[test]
    fn repeats_are_reported_once_at_their_last_place() {
        let text = "NCCL WARN Cuda failure 'out of memory'\nx\nNCCL WARN Cuda failure 'out of memory'\nKilled\n";
        let pos = scan_positions(text);
        assert_eq!(
            pos.iter().map(|(i, f)| (*i, f.family)).collect::<Vec<_>>(),
            vec![(2, DeviceOom), (3, KilledBySigkill)]
        );
    }

    #[test]
    fn line_numbers_follow_split_lines() {
        let text = "a\r\nb\rc\n\nd";
        assert_eq!(split_lines(text), ["a", "b", "c", "", "d"]);
        assert_eq!(line_numbers(text), [1, 2, 2, 3, 4]);
    }

    #[test]
    fn prefixes_are_stripped() {
        let table = [
            ("[rank0]: MemoryError", "MemoryError"),
            ("1: MemoryError", "MemoryError"),
            ("  12: MemoryError", "MemoryError"),
            ("12:34:56 MemoryError", "12:34:56 MemoryError"),
            (
                "E0325 20:57:27.620000 2606 site-packages/api.py:869] failed",
                "failed",
            ),
            (
                "May 15 23:09:27 host kernel: [  514.682838] Memory cgroup",
                "Memory cgroup",
            ),
            (
                "2024-04-29T14:55:41,679700+02:00 Out of memory",
                "Out of memory",
            ),
            (
                "[Thu Dec  7 00:05:15 2017] Killed process",
                "Killed process",
            ),
            ("056444Z Traceback", "Traceback"),
            (
                "  0%|          | 0/1136 [00:00<?, ?it/s]Traceback (most",
                "Traceback (most",
            ),
            (
                "ERROR    | 2024-08-21 22:56:04 | autotrain.trainers.common:wrapper:121 - HIP out",
                "HIP out",
            ),
            ("RuntimeError: x", "RuntimeError: x"),
        ];
        for (input, want) in table {
            assert_eq!(strip_prefixes(input), want, "{input:?}");
        }
    }

    #[test]
    fn ranks() {
        let table: &[(&str, Option<u32>)] = &[
            (
                "[rank0]: torch.OutOfMemoryError: CUDA out of memory.",
                Some(0),
            ),
            ("[rank12]:   File \"train.py\", line 3", Some(12)),
            ("[default1]:Traceback (most recent call last):", Some(1)),
            ("2024-05-01 10:00:00 [rank3]: RuntimeError: x", Some(3)),
            ("RuntimeError: x [rank3]: y", None),
            ("1: torch.OutOfMemoryError: CUDA out of memory.", Some(1)),
            (" 7:   File \"train.py\", line 3", Some(7)),
            ("12:34:56 RuntimeError: x", None),
            ("srun: error: node2: task 1: Out Of Memory", None),
            ("[0]:", None),
            (
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
                None,
            ),
        ];
        for (line, want) in table {
            assert_eq!(rank_of(line), *want, "{line:?}");
        }
    }

    #[test]
    fn victim_pids() {
        let table: &[(&str, Option<u32>)] = &[
            ("Memory cgroup out of memory: Killed process 4242 (python3) total-vm:11892kB, anon-rss:4292kB", Some(4242)),
            ("May 15 23:09:27 h kernel: [  514.6] Out of memory: Killed process 15617 (python3) total-vm:1kB", Some(15617)),
            ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0-1,task_memcg=/a,task=python3,pid=4242,uid=0", Some(4242)),
            ("[Thu Dec  7 00:05:15 2017] Memory cgroup out of memory: Kill process 24572 (java) score 0 or sacrifice child", Some(24572)),
            ("oom_reaper: reaped process 15617 (python3), now anon-rss:0kB", Some(15617)),
            ("RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed.", None),
            ("python3 invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGHUSER_MOVABLE), order=0", None),
            ("Killed", None),
        ];
        for (line, want) in table {
            assert_eq!(kernel_oom_victim_pid(line), *want, "{line:?}");
        }
    }

    #[test]
    fn shell_kill_reports() {
        assert!(is_shell_job_kill("Killed"));
        assert!(is_shell_job_kill("/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py"));
        assert!(is_shell_job_kill("zsh: killed     python train.py"));
        assert!(is_shell_job_kill(
            "bash: 14837 Killed                  python3 -c \"x\""
        ));
        assert!(!is_shell_job_kill("failed (exitcode: -9) local_rank: 0"));
        assert!(!is_shell_job_kill("Killed process 1 (x)"));
    }

    #[test]
    fn a_large_tail_with_one_oom_at_the_end_gives_one_finding() {
        // 256 KiB of progress lines (the classifier's whole tail) with one OOM at the end. How
        // long this takes is measured by `cargo bench --bench classify_cost`, not asserted here.
        let mut text = String::new();
        while text.len() < 256 * 1024 {
            text.push_str(
                "Epoch: [0][415/1736]\t Loss 0.5844 MAE 0.6568 RMSE 0.7644 memory: 8672\n",
            );
        }
        text.push_str("RuntimeError: CUDA out of memory. Tried to allocate 1.71 GiB\n");
        let found = scan(&text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "pytorch_allocator_oom");
    }
}
