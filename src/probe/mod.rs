//! The probe: how oomguard sees a Python job's training steps from inside without changing the
//! job. For a Python command, each attempt gets a pipe whose write end the job inherits at
//! [`PROBE_FD`], and a `sitecustomize.py` ([`SITECUSTOMIZE`]) first on its `PYTHONPATH`. That
//! file chains to the user's own `sitecustomize`, and once the job itself imports
//! `torch.optim.optimizer` it registers PyTorch's global optimizer-step hook: each step (a few,
//! then at most two a second) it writes one JSON line on the pipe (steps done, the process's
//! peak RSS, and on a GPU the allocator's peaks and retries), and at a CUDA out-of-memory error
//! the allocator's figures. This module makes the pipe and the environment, reads the lines on
//! a thread of their own, and sums them into an attempt's [`ProbeSummary`]; while the attempt
//! runs, [`Channel::progress`] says how far the job has got so far (samples.csv's `steps`,
//! `oomguard status`, the metrics).
//!
//! It decides nothing: the run carries the summary into the record, the console, the report
//! and the fit ([`crate::decide::fit`] reads an out-of-memory event's figures). Anything the probe
//! writes that does not parse is ignored; nothing the job does waits on the pipe (the probe
//! drops an event rather than block).
//!
//! It imports only the knob model (what the job's parsers and frameworks report is adopted
//! there) and the layers below it: never what launches, decides or records.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::knobs::inside::{bounded, Seen, SeenFramework, SeenLoader, SeenOption};

/// The probe's Python half, written into the run directory for each run.
pub const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");

/// The descriptor number the job finds the pipe at (`OOMGUARD_PROBE_FD`): above stdio and the
/// few a shell script opens by hand (`exec 3>log`), below what programs open early.
pub const PROBE_FD: i32 = 7;

/// The longest line read from the probe: its events are under 4 KiB (one atomic pipe write).
const LINE_MAX_BYTES: u64 = 4096;

/// At most this many processes are followed (a job's ranks and its workers that step).
const PROCESSES_MAX: usize = 1024;

/// Whether `argv` runs Python, so the probe can see its steps: a Python interpreter, one of
/// the Python launchers oomguard knows (torchrun, accelerate, deepspeed, `python -m
/// torch.distributed.run`, behind uv, poetry or conda), or a script whose `#!` line names
/// Python. Not behind srun: its tasks are Slurm's children, and on other nodes, where no
/// descriptor of oomguard's reaches.
pub fn runs_python(argv: &[OsString]) -> bool {
    let launch = crate::knobs::argv::launch(argv);
    if launch.launchers.iter().any(|l| l == "srun") {
        return false;
    }
    let Some(program) = argv.first() else {
        return false;
    };
    let name = Path::new(program)
        .file_name()
        .map(OsStr::to_string_lossy)
        .unwrap_or_default();
    let python = |name: &str| {
        name.strip_prefix("python")
            .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    if python(&name) || ["torchrun", "accelerate", "deepspeed"].contains(&name.as_ref()) {
        return true;
    }
    if launch.script.is_some() && launch.launchers.iter().any(|l| l != "srun") {
        return true;
    }
    shebang_names_python(Path::new(program))
}

/// Whether the file at `path` (where it is a path) starts with a `#!` line naming Python.
///
/// Read as the job's user ([`crate::guard::principal::as_user`]) and only if it is a regular file
/// ([`crate::guard::fsutil::open_regular`]: `O_PATH` first, never an open of a FIFO, a terminal or
/// a device): root's oomguard runs a user's command, and what the user swaps in for it between the
/// lookup and this read must answer as it would to them, not tell them a bit of a file only root
/// can read, nor hang the start on a FIFO or act on a device.
fn shebang_names_python(path: &Path) -> bool {
    use std::io::Read;
    if path.components().count() < 2 {
        return false;
    }
    let mut head = [0u8; 128];
    let read = crate::guard::principal::as_user(|| {
        crate::guard::fsutil::open_regular(path).and_then(|mut f| f.read(&mut head))
    });
    let Ok(read) = read else {
        return false;
    };
    let line = head[..read]
        .split(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    line.starts_with(b"#!") && line.windows(6).any(|w| w == b"python")
}

/// One attempt's pipe, as oomguard reads it.
#[derive(Clone)]
pub struct Channel {
    /// The pipe's inode, which the probe checks before it writes on a descriptor.
    pub inode: u64,
    state: Arc<Shared>,
}

/// The reader's state, and a signal for when the pipe closed.
#[derive(Default)]
struct Shared {
    state: Mutex<ProbeState>,
    closed: Condvar,
}

impl Channel {
    /// Opens the pipe and starts reading it on a thread of its own, which ends when every
    /// write end is closed: the write end returned goes to the job at [`PROBE_FD`], and
    /// oomguard drops its copy once the job is spawned.
    pub fn open() -> std::io::Result<(Channel, OwnedFd)> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let inode = nix::sys::stat::fstat(read.as_raw_fd())?.st_ino;
        // The job's end never blocks: a full pipe drops the probe's event instead.
        nix::fcntl::fcntl(
            write.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        let state = Arc::new(Shared::default());
        let filled = Arc::clone(&state);
        std::thread::Builder::new()
            .name("probe".into())
            .spawn(move || {
                read_events(std::fs::File::from(read), &filled.state);
                if let Ok(mut state) = filled.state.lock() {
                    state.closed = true;
                }
                filled.closed.notify_all();
            })?;
        Ok((Channel { inode, state }, write))
    }

    /// The job's variables: the probe directory first on `PYTHONPATH` (before `pythonpath`,
    /// the job's own), the descriptor and the pipe's inode.
    pub fn env(&self, dir: &Path, pythonpath: Option<&OsStr>) -> Vec<(String, OsString)> {
        let mut path = dir.as_os_str().to_owned();
        if let Some(theirs) = pythonpath.filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(theirs);
        }
        vec![
            ("PYTHONPATH".into(), path),
            ("OOMGUARD_PROBE_FD".into(), PROBE_FD.to_string().into()),
            ("OOMGUARD_PROBE_PIPE".into(), self.inode.to_string().into()),
            ("OOMGUARD_PROBE_DIR".into(), dir.as_os_str().to_owned()),
        ]
    }

    /// How far the job has got so far; `None` before its first step. One lock and a pass over
    /// the processes that stepped: cheap enough for every sample tick.
    pub fn progress(&self) -> Option<Progress> {
        self.state.state.lock().ok()?.progress()
    }

    /// What the probe said so far.
    pub fn summary(&self) -> ProbeSummary {
        self.state
            .state
            .lock()
            .map(|s| s.summary())
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for every write end to close (the job's processes gone, and
    /// oomguard's copy dropped), so the last lines are read: whether they did. A process of the
    /// job that outlives the attempt keeps the pipe open; the summary then holds what came
    /// before.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        let Ok(state) = self.state.state.lock() else {
            return false;
        };
        self.state
            .closed
            .wait_timeout_while(state, timeout, |s| !s.closed)
            .is_ok_and(|(s, _)| s.closed)
    }
}

/// Reads the probe's lines into `state` until every write end is closed.
fn read_events(read: std::fs::File, state: &Mutex<ProbeState>) {
    use std::io::Read;
    let mut lines = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut lines)
            .take(LINE_MAX_BYTES)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            // Longer than any event: the rest of it is skipped.
            let _ = lines.skip_until(b'\n');
            continue;
        }
        if let Ok(event) = serde_json::from_slice::<Event>(&line) {
            if let Ok(mut state) = state.lock() {
                state.take(event);
            }
        }
    }
}

/// One line of the probe (see `sitecustomize.py` for what each carries).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Hooked {
        pid: u32,
        #[serde(default)]
        rank: u32,
        #[serde(default)]
        torch: String,
        #[serde(default)]
        cuda: bool,
    },
    Step {
        pid: u32,
        #[serde(default)]
        rank: u32,
        t: f64,
        step: u64,
        rss_peak_bytes: Option<u64>,
        cuda_peak_allocated_bytes: Option<u64>,
        cuda_peak_reserved_bytes: Option<u64>,
        cuda_alloc_retries: Option<u64>,
        /// Written at the process's exit: its count stands, its peaks are no completed step's
        /// (they include a step that failed, an evaluation).
        #[serde(default)]
        exit: bool,
    },
    Oom {
        pid: u32,
        #[serde(default)]
        rank: u32,
        requested_bytes: Option<u64>,
        /// The card's total (or the share `set_per_process_memory_fraction` allows).
        device_total_bytes: Option<u64>,
        cuda_reserved_bytes: Option<u64>,
        cuda_allocated_bytes: Option<u64>,
        device_free_bytes: Option<u64>,
        largest_free_block_bytes: Option<u64>,
    },
    ProbeError {
        pid: u32,
        #[serde(rename = "where", default)]
        place: String,
        #[serde(default)]
        error: String,
    },
    /// An option of a command-line parser the job built, at its parse.
    Option {
        pid: u32,
        #[serde(default)]
        parser: u32,
        #[serde(default)]
        argv0: String,
        /// The option strings, separated by spaces.
        #[serde(default)]
        strings: String,
        #[serde(default)]
        dest: String,
        #[serde(default)]
        value: serde_json::Value,
    },
    /// A framework's arguments object at its construction (a row of the probe's table).
    Framework {
        pid: u32,
        #[serde(default)]
        row: String,
        #[serde(default)]
        class: String,
        #[serde(default)]
        batch_field: String,
        #[serde(default)]
        accum_field: String,
        #[serde(default)]
        batch: serde_json::Value,
        #[serde(default)]
        accum: serde_json::Value,
        #[serde(rename = "where", default)]
        place: String,
        #[serde(default)]
        set: bool,
    },
    /// A DataLoader the job made.
    Loader {
        pid: u32,
        #[serde(default)]
        batch: serde_json::Value,
        #[serde(rename = "where", default)]
        place: String,
    },
}

/// Each process's steps, as the events came.
#[derive(Debug, Default)]
struct ProbeState {
    /// Whether every write end closed (the reader ended).
    closed: bool,
    processes: HashMap<u32, Steps>,
    /// The first out-of-memory event.
    oom: Option<OomFigures>,
    /// The first failure the probe reported.
    error: Option<String>,
    torch: Option<String>,
    /// Where the job keeps its batch, as it showed it.
    knobs: Seen,
}

/// One process's steps.
#[derive(Debug, Clone, Copy, Default)]
struct Steps {
    rank: u32,
    /// The most steps reported, the count written at exit included.
    count: Option<u64>,
    /// The first and last report during the steps (time, count), which set the pace: the
    /// count written at exit comes after whatever ran after the last step (an evaluation, a
    /// checkpoint, the shutdown), and its time would slow the pace.
    first: Option<(f64, u64)>,
    last: Option<(f64, u64)>,
    rss_peak_bytes: Option<u64>,
    cuda_peak_allocated_bytes: Option<u64>,
    cuda_peak_reserved_bytes: Option<u64>,
    cuda_alloc_retries: Option<u64>,
    /// How many reports in a row, up to the last, saw the allocator's retries grow.
    retries_rising: u32,
}

/// Reports in a row whose allocation retries grew, for the retries to count as climbing (a
/// sign of fragmentation: the allocator frees its cache and tries again, step after step).
/// Reports come for steps 1–3, then at most twice a second: three is a climb that lasted.
pub const RETRIES_CLIMBING_REPORTS: u32 = 3;

impl ProbeState {
    fn take(&mut self, event: Event) {
        match event {
            Event::Hooked { torch, .. } => {
                self.torch.get_or_insert(torch);
            }
            Event::Step {
                pid,
                rank,
                t,
                step,
                rss_peak_bytes,
                cuda_peak_allocated_bytes,
                cuda_peak_reserved_bytes,
                cuda_alloc_retries,
                exit,
            } => {
                if !self.processes.contains_key(&pid) && self.processes.len() >= PROCESSES_MAX {
                    return;
                }
                let steps = self.processes.entry(pid).or_default();
                steps.rank = rank;
                steps.count = steps.count.max(Some(step));
                if exit {
                    return;
                }
                steps.first.get_or_insert((t, step));
                if steps.last.is_none_or(|(_, n)| step >= n) {
                    steps.last = Some((t, step));
                }
                steps.retries_rising = match (steps.cuda_alloc_retries, cuda_alloc_retries) {
                    (Some(before), Some(now)) if now > before => steps.retries_rising + 1,
                    (None, Some(now)) if now > 0 => 1,
                    _ => 0,
                };
                raise(&mut steps.rss_peak_bytes, rss_peak_bytes);
                raise(
                    &mut steps.cuda_peak_allocated_bytes,
                    cuda_peak_allocated_bytes,
                );
                raise(
                    &mut steps.cuda_peak_reserved_bytes,
                    cuda_peak_reserved_bytes,
                );
                raise(&mut steps.cuda_alloc_retries, cuda_alloc_retries);
            }
            Event::Oom {
                requested_bytes,
                device_total_bytes,
                cuda_reserved_bytes,
                cuda_allocated_bytes,
                device_free_bytes,
                largest_free_block_bytes,
                rank,
                ..
            } => {
                self.oom.get_or_insert(OomFigures {
                    rank,
                    requested_bytes,
                    device_total_bytes,
                    reserved_bytes: cuda_reserved_bytes,
                    allocated_bytes: cuda_allocated_bytes,
                    device_free_bytes,
                    largest_free_block_bytes,
                });
            }
            Event::ProbeError { place, error, .. } => {
                self.error.get_or_insert(format!("{place}: {error}"));
            }
            Event::Option {
                pid,
                parser,
                argv0,
                strings,
                dest,
                value,
            } => self.knobs.option(SeenOption {
                pid,
                parser,
                argv0: bounded(&argv0),
                strings: strings.split_whitespace().take(8).map(bounded).collect(),
                dest: bounded(&dest),
                value: value.as_u64(),
            }),
            Event::Framework {
                pid,
                row,
                class,
                batch_field,
                accum_field,
                batch,
                accum,
                place,
                set,
            } => self.knobs.framework(SeenFramework {
                pid,
                row: bounded(&row),
                class: bounded(&class),
                batch_field: bounded(&batch_field),
                accum_field: bounded(&accum_field),
                batch: batch.as_u64(),
                accum: accum.as_u64(),
                place: bounded(&place),
                set,
            }),
            Event::Loader { pid, batch, place } => self.knobs.loader(SeenLoader {
                pid,
                batch: batch.as_u64(),
                place: bounded(&place),
            }),
        }
    }

    /// The furthest process's steps and their pace: it stands for the job (ranks step
    /// together; a DataLoader worker never steps).
    fn progress(&self) -> Option<Progress> {
        let lead = self
            .processes
            .values()
            .filter(|s| s.count.is_some())
            .max_by_key(|s| s.count)?;
        let pace = lead.first.zip(lead.last);
        Some(Progress {
            steps: lead.count?,
            seconds_per_step: pace.and_then(|((t0, n0), (t1, n1))| {
                (n1 > n0 && t1 > t0).then(|| (t1 - t0) / (n1 - n0) as f64)
            }),
        })
    }

    fn summary(&self) -> ProbeSummary {
        let progress = self.progress();
        let max = |f: fn(&Steps) -> Option<u64>| self.processes.values().filter_map(f).max();
        ProbeSummary {
            steps: progress.map(|p| p.steps),
            seconds_per_step: progress.and_then(|p| p.seconds_per_step),
            ranks: u32::try_from(
                self.processes
                    .values()
                    .map(|s| s.rank)
                    .collect::<std::collections::HashSet<_>>()
                    .len(),
            )
            .unwrap_or(u32::MAX),
            rss_peak_bytes: max(|s| s.rss_peak_bytes),
            cuda_peak_allocated_bytes: max(|s| s.cuda_peak_allocated_bytes),
            cuda_peak_reserved_bytes: max(|s| s.cuda_peak_reserved_bytes),
            cuda_alloc_retries: max(|s| s.cuda_alloc_retries),
            retries_rising: self
                .processes
                .values()
                .map(|s| s.retries_rising)
                .max()
                .filter(|&n| n >= RETRIES_CLIMBING_REPORTS),
            oom: self.oom,
            error: self.error.clone(),
            torch: self.torch.clone(),
            knobs: self.knobs.clone(),
        }
    }
}

fn raise(peak: &mut Option<u64>, value: Option<u64>) {
    if let Some(v) = value {
        *peak = Some(peak.map_or(v, |p| p.max(v)));
    }
}

/// How far a job has got while its attempt runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Optimizer steps done so far (the furthest process's).
    pub steps: u64,
    /// Seconds per step over the steps seen so far; `None` before a second step.
    pub seconds_per_step: Option<f64>,
}

/// The allocator's figures at a CUDA out-of-memory error, from PyTorch's observer (before the
/// allocator unwinds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomFigures {
    pub rank: u32,
    pub requested_bytes: Option<u64>,
    pub device_total_bytes: Option<u64>,
    pub reserved_bytes: Option<u64>,
    pub allocated_bytes: Option<u64>,
    pub device_free_bytes: Option<u64>,
    pub largest_free_block_bytes: Option<u64>,
}

impl OomFigures {
    /// PyTorch's reserved-but-unallocated memory and the allocation that failed, where the
    /// first is at least the second: the memory was there, in pieces too small (fragmentation).
    pub fn fragmented(&self) -> Option<(u64, u64)> {
        let free = self.reserved_bytes?.checked_sub(self.allocated_bytes?)?;
        let requested = self.requested_bytes?;
        (free >= requested && requested > 0).then_some((free, requested))
    }
}

/// What the probe saw of one attempt. Every field may be missing where it is read back (a
/// summary.json of another build).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProbeSummary {
    /// Optimizer steps done (the furthest process's); `None` where none was seen.
    pub steps: Option<u64>,
    /// Seconds per step over the steps seen (the furthest process's).
    pub seconds_per_step: Option<f64>,
    /// How many ranks reported steps.
    pub ranks: u32,
    /// The largest peak RSS of a process that stepped, up to its last completed step (the
    /// count written at exit raises no peak).
    pub rss_peak_bytes: Option<u64>,
    /// The CUDA allocator's peaks up to the last completed step, likewise.
    pub cuda_peak_allocated_bytes: Option<u64>,
    pub cuda_peak_reserved_bytes: Option<u64>,
    pub cuda_alloc_retries: Option<u64>,
    /// Where the allocator's retries grew in each of the last reports of a process, at least
    /// [`RETRIES_CLIMBING_REPORTS`] of them: how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries_rising: Option<u32>,
    pub oom: Option<OomFigures>,
    /// The first failure the probe reported (after which it went quiet in that process).
    pub error: Option<String>,
    /// torch's version, where the probe hooked it.
    pub torch: Option<String>,
    /// Where the job keeps its batch, as it showed it (its parser's options, a framework's
    /// arguments object, its DataLoaders).
    #[serde(default, skip_serializing_if = "Seen::is_empty")]
    pub knobs: Seen,
}

impl ProbeSummary {
    /// Samples a second at `batch × accum` per step (per rank, as the knobs are).
    pub fn samples_per_second(&self, batch_times_accum: Option<u64>) -> Option<f64> {
        let per_step = self.seconds_per_step.filter(|s| *s > 0.0)?;
        Some(batch_times_accum? as f64 / per_step)
    }

    /// Whether the probe saw anything at all.
    pub fn is_empty(&self) -> bool {
        self.steps.is_none()
            && self.oom.is_none()
            && self.error.is_none()
            && self.torch.is_none()
            && self.knobs.is_empty()
    }
}

/// [`ProbeSummary`] as summary.json records it, with the attempt's samples a second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    #[serde(flatten)]
    pub seen: ProbeSummary,
    /// Steps a second × batch × accumulation (per rank).
    pub samples_per_second: Option<f64>,
}

impl ProbeRecord {
    /// The pace where known: `0.41 s/step, 156 samples/s`.
    pub fn pace(&self) -> Option<String> {
        let parts: Vec<String> = [
            self.seen.seconds_per_step.map(per_step_text),
            self.samples_per_second
                .map(|r| format!("{} samples/s", crate::observe::units::rate(r))),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// How far an attempt that died got, for the line that says how it ended: `died at step
    /// 1,204 (0.41 s/step, 156 samples/s)`; `probe failed: REASON` where the probe failed
    /// before any step, or `no optimizer step seen`.
    pub fn died_at(&self) -> String {
        let Some(steps) = self.seen.steps else {
            return match &self.seen.error {
                Some(error) => format!("probe failed: {}", one_line(error)),
                None => "no optimizer step seen".to_string(),
            };
        };
        let steps = crate::observe::units::thousands(steps);
        match self.pace() {
            Some(pace) => format!("died at step {steps} ({pace})"),
            None => format!("died at step {steps}"),
        }
    }
}

/// A step's duration as people read it: `0.41 s/step`, or in milliseconds below a tenth of a
/// second (`35 ms/step`), where two decimals of a second would round a fast step to nothing.
pub fn per_step_text(seconds: f64) -> String {
    let ms = seconds * 1000.0;
    if seconds >= 0.1 {
        format!("{seconds:.2} s/step")
    } else if ms >= 0.5 {
        format!("{ms:.0} ms/step")
    } else {
        "<1 ms/step".to_string()
    }
}

/// The most of a probe's failure the console line carries: its reason, not a traceback.
const REASON_MAX_CHARS: usize = 120;

/// `text`'s first line that says something, cut at [`REASON_MAX_CHARS`] (`…` where cut).
fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    match line.char_indices().nth(REASON_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

    #[test]
    fn python_commands_are_told_from_others() {
        for (line, want) in [
            ("python train.py", true),
            ("python3 -m pkg.train", true),
            ("/usr/bin/python3.11 train.py", true),
            ("torchrun --nproc_per_node 2 train.py", true),
            ("accelerate launch train.py", true),
            ("deepspeed train.py", true),
            ("uv run python train.py", true),
            ("srun python train.py", false),
            ("bash run.sh", false),
            ("pythonic", false),
            ("./train", false),
        ] {
            assert_eq!(runs_python(&argv(line)), want, "{line}");
        }
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("train");
        std::fs::write(&script, "#!/usr/bin/env python3\nprint(1)\n").unwrap();
        assert!(runs_python(&[script.clone().into_os_string()]));
        std::fs::write(&script, "#!/bin/sh\necho python\n").unwrap();
        assert!(!runs_python(&[script.into_os_string()]));
        // A FIFO (or a device) put where the program was is never opened: no wait for a writer.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (told, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || told.send(runs_python(&[fifo.into_os_string()])));
        let answer = answer.recv_timeout(Duration::from_secs(10));
        assert_eq!(answer, Ok(false), "the FIFO was opened");
    }

    /// Events as the probe writes them, one per line.
    fn state_of(lines: &[&str]) -> ProbeState {
        let mut state = ProbeState::default();
        for line in lines {
            if let Ok(event) = serde_json::from_str::<Event>(line) {
                state.take(event);
            }
        }
        state
    }

    /// The count written at exit stands; its peaks (which include the step that failed) and
    /// its retries (a failed allocation retries once) do not.
    #[test]
    fn the_exit_count_raises_no_peak_and_retries_climb_only_over_reports_in_a_row() {
        let step = |n: u64, retries: u64, reserved: u64, exit: bool| {
            format!(
                r#"{{"event":"step","pid":10,"t":{n}.0,"step":{n},"rss_peak_bytes":{reserved},"cuda_peak_reserved_bytes":{reserved},"cuda_alloc_retries":{retries},"exit":{exit}}}"#
            )
        };
        // (reports as (step, retries, reserved, exit), steps, peak reserved, rising)
        type Report = (u64, u64, u64, bool);
        let table: &[(&[Report], u64, u64, Option<u32>)] = &[
            (
                &[(1, 0, 10, false), (2, 0, 10, false), (9, 1, 99, true)],
                9,
                10,
                None,
            ),
            (
                &[(1, 1, 10, false), (2, 2, 10, false), (3, 3, 10, false)],
                3,
                10,
                Some(3),
            ),
            // A report without growth ends the run of them.
            (
                &[
                    (1, 1, 10, false),
                    (2, 2, 10, false),
                    (3, 2, 10, false),
                    (4, 3, 10, false),
                ],
                4,
                10,
                None,
            ),
            (
                &[
                    (1, 0, 10, false),
                    (2, 1, 10, false),
                    (3, 2, 10, false),
                    (4, 3, 12, false),
                ],
                4,
                12,
                Some(3),
            ),
            // Nor does the exit's own retry make a third.
            (
                &[(1, 1, 10, false), (2, 2, 10, false), (3, 3, 50, true)],
                3,
                10,
                None,
            ),
        ];
        for (reports, steps, reserved, rising) in table {
            let lines: Vec<String> = reports
                .iter()
                .map(|&(n, r, b, e)| step(n, r, b, e))
                .collect();
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let summary = state_of(&lines).summary();
            assert_eq!(summary.steps, Some(*steps), "{reports:?}");
            assert_eq!(
                summary.cuda_peak_reserved_bytes,
                Some(*reserved),
                "{reports:?}"
            );
            assert_eq!(summary.rss_peak_bytes, Some(*reserved), "{reports:?}");
            assert_eq!(summary.retries_rising, *rising, "{reports:?}");
        }
        // Its time neither: a minute of evaluation after the last step does not slow the pace.
        let summary = state_of(&[
            r#"{"event":"step","pid":10,"t":1.0,"step":1}"#,
            r#"{"event":"step","pid":10,"t":2.0,"step":3}"#,
            r#"{"event":"step","pid":10,"t":62.0,"step":4,"exit":true}"#,
        ])
        .summary();
        assert_eq!(
            (summary.steps, summary.seconds_per_step),
            (Some(4), Some(0.5))
        );
    }

    #[test]
    fn where_the_job_keeps_its_batch_is_read_within_bounds() {
        let long = "x".repeat(5000);
        let many: Vec<String> = (0..100)
            .map(|i| format!(r#"{{"event":"loader","pid":1,"batch":{i},"where":"t.py:{i}"}}"#))
            .collect();
        let mut lines = vec![
            r#"{"event":"option","pid":7,"rank":0,"t":1.0,"parser":1,"argv0":"train.py","strings":"-b --batch_size","dest":"batch_size","type":"int","default":64,"value":32}"#.to_string(),
            r#"{"event":"option","pid":7,"parser":1,"argv0":"train.py","strings":"--name","dest":"name","value":"run one"}"#.to_string(),
            r#"{"event":"option","pid":7,"parser":1,"argv0":"train.py","strings":"--lr","dest":"lr","value":-3}"#.to_string(),
            format!(r#"{{"event":"framework","pid":7,"row":"transformers","class":"TrainingArguments","batch_field":"per_device_train_batch_size","accum_field":"gradient_accumulation_steps","batch":32,"accum":1,"where":"{long}","set":true}}"#),
            r#"{"event":"framework","pid":7,"row":"lightning","batch":null,"accum":"2"}"#.to_string(),
        ];
        lines.extend(many);
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let seen = state_of(&lines).summary().knobs;
        let values: Vec<Option<u64>> = seen.options.iter().map(|o| o.value).collect();
        // Only whole numbers are values a knob can take.
        assert_eq!(values, [Some(32), None, None]);
        assert_eq!(seen.options[0].strings, ["-b", "--batch_size"]);
        let hf = &seen.frameworks[0];
        assert_eq!((hf.batch, hf.accum, hf.set), (Some(32), Some(1), true));
        // The job's text is cut to the bound, and so is the number of reports.
        assert_eq!(hf.place.chars().count(), 200);
        assert_eq!(
            (seen.frameworks[1].batch, seen.frameworks[1].accum),
            (None, None)
        );
        assert_eq!(seen.loaders.len(), crate::knobs::inside::LOADERS_MAX);
    }

    #[test]
    fn the_furthest_process_gives_the_steps_and_their_pace() {
        let state = state_of(&[
            r#"{"event":"hooked","pid":10,"rank":0,"t":1.0,"torch":"2.5.1","cuda":false}"#,
            r#"{"event":"step","pid":10,"rank":0,"t":10.0,"step":1,"rss_peak_bytes":100}"#,
            r#"{"event":"step","pid":11,"rank":1,"t":10.1,"step":1,"rss_peak_bytes":300}"#,
            r#"{"event":"step","pid":10,"rank":0,"t":12.0,"step":5,"rss_peak_bytes":200}"#,
            r#"{"event":"step","pid":11,"rank":1,"t":11.0,"step":3}"#,
            r#"not json"#,
            r#"{"event":"unknown","pid":1}"#,
            r#"{"event":"probe_error","pid":12,"rank":0,"t":1,"where":"hook","error":"no global hook"}"#,
        ]);
        let summary = state.summary();
        assert_eq!(summary.steps, Some(5));
        assert_eq!(summary.seconds_per_step, Some(0.5));
        assert_eq!(summary.ranks, 2);
        assert_eq!(summary.rss_peak_bytes, Some(300));
        assert_eq!(summary.torch.as_deref(), Some("2.5.1"));
        assert_eq!(summary.error.as_deref(), Some("hook: no global hook"));
        assert_eq!(summary.samples_per_second(Some(64)), Some(128.0));
        assert_eq!(summary.samples_per_second(None), None);
        assert!(ProbeState::default().summary().is_empty());
        // While the attempt runs, the same furthest process.
        assert_eq!(
            state.progress(),
            Some(Progress {
                steps: 5,
                seconds_per_step: Some(0.5)
            })
        );
        assert_eq!(ProbeState::default().progress(), None);
    }

    #[test]
    fn how_far_an_attempt_got_is_said_in_one_clause() {
        let record = |steps, per_step, rate, error: Option<&str>| ProbeRecord {
            seen: ProbeSummary {
                steps,
                seconds_per_step: per_step,
                error: error.map(String::from),
                ..ProbeSummary::default()
            },
            samples_per_second: rate,
        };
        let long = "x".repeat(REASON_MAX_CHARS + 5);
        let cut = format!("probe failed: step: {}…", "x".repeat(REASON_MAX_CHARS - 6));
        for (r, want) in [
            (
                record(Some(1204), Some(0.41), Some(156.1), None),
                "died at step 1,204 (0.41 s/step, 156 samples/s)",
            ),
            (
                record(Some(3), Some(0.5), None, None),
                "died at step 3 (0.50 s/step)",
            ),
            (
                record(Some(40_000), Some(0.035), Some(12_345.4), None),
                "died at step 40,000 (35 ms/step, 12,345 samples/s)",
            ),
            (record(Some(1), None, None, None), "died at step 1"),
            (
                record(Some(2), None, None, Some("step: gone")),
                "died at step 2",
            ),
            (record(None, None, None, None), "no optimizer step seen"),
            (
                record(None, None, None, Some("hook: no global hook")),
                "probe failed: hook: no global hook",
            ),
            (
                record(
                    None,
                    None,
                    None,
                    Some("\nhook: bad\n  Traceback (most recent)"),
                ),
                "probe failed: hook: bad",
            ),
            (
                record(None, None, None, Some(&format!("step: {long}"))),
                cut.as_str(),
            ),
        ] {
            assert_eq!(r.died_at(), want);
        }
    }

    #[test]
    fn pace_reads_at_every_speed() {
        // (seconds per step, shown)
        for (seconds, want) in [
            (12.5, "12.50 s/step"),
            (0.41, "0.41 s/step"),
            (0.1, "0.10 s/step"),
            (0.0996, "100 ms/step"),
            (0.035, "35 ms/step"),
            (0.0012, "1 ms/step"),
            (0.0001, "<1 ms/step"),
        ] {
            assert_eq!(per_step_text(seconds), want, "{seconds}");
        }
    }

    #[test]
    fn an_oom_event_with_more_free_reserved_than_requested_is_fragmentation() {
        let gib = 1u64 << 30;
        let state = state_of(&[&format!(
            r#"{{"event":"oom","pid":10,"rank":0,"t":1,"device":0,"requested_bytes":{},"cuda_reserved_bytes":{},"cuda_allocated_bytes":{},"device_free_bytes":0}}"#,
            2 * gib,
            40 * gib,
            35 * gib
        )]);
        let oom = state.summary().oom.expect("the oom event");
        assert_eq!(oom.fragmented(), Some((5 * gib, 2 * gib)));
        let tight = OomFigures {
            requested_bytes: Some(6 * gib),
            ..oom
        };
        assert_eq!(tight.fragmented(), None);
        assert_eq!(OomFigures::default().fragmented(), None);
    }

    #[test]
    fn the_pipe_carries_lines_to_the_summary_and_a_long_line_is_skipped() {
        use std::io::Write;
        let (channel, write) = Channel::open().unwrap();
        let env = channel.env(Path::new("/probe"), Some(OsStr::new("/theirs")));
        assert_eq!(env[0].1, OsString::from("/probe:/theirs"));
        assert!(!channel.wait_closed(Duration::ZERO), "a write end is open");
        let mut write = std::fs::File::from(write);
        writeln!(write, "{}", "x".repeat(5000)).unwrap();
        writeln!(
            write,
            r#"{{"event":"step","pid":10,"rank":0,"t":1.0,"step":2}}"#
        )
        .unwrap();
        drop(write);
        assert!(channel.wait_closed(Duration::from_secs(60)));
        assert_eq!(channel.summary().steps, Some(2));
        assert_eq!(
            channel.progress(),
            Some(Progress {
                steps: 2,
                seconds_per_step: None
            }),
            "one step: no pace yet"
        );
    }
}
