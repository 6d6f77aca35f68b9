//! Notices a running job that went quiet: after its output showed an out-of-memory error it
//! neither exited nor wrote a byte for `--hang-timeout` (cause `hung_after_oom`: ranks waiting in
//! a collective for a neighbour that died, a DataLoader that never returns), or it wrote nothing
//! and used no CPU for `--stall-timeout` (cause `stalled`).
//!
//! Pure and cheap per tick: it is handed the clock, how many bytes the job has written so far and
//! its tree's CPU time, and keeps when each last moved. Whether the output shows an out-of-memory
//! error is asked of the caller (the classifier's own reading of the tail) only once the job has
//! been silent long enough, and once per silent stretch: a job that keeps printing is never read
//! for it, whatever it printed, and one that caught its OOM and carries on restarts the clock with
//! every byte. Reading the numbers is [`crate::observe::sampler`]'s and [`crate::output::stream`]'s
//! job, stopping the job [`crate::supervise`]'s, naming the cause [`crate::judge::classify`]'s.

use std::fmt;
use std::time::{Duration, Instant};

use crate::judge::outcome::Cause;

/// How long a job may stay quiet; `None` where that watch is off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// `--hang-timeout`: no output for this long after an out-of-memory error.
    pub hang: Option<Duration>,
    /// `--stall-timeout`: no output and no CPU time for this long.
    pub stall: Option<Duration>,
}

/// Why oomguard stops a quiet job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuietStop {
    /// The output shows an out-of-memory error (`oom_line`, as the classifier quotes it) and
    /// nothing came for `after`.
    HungAfterOom { after: Duration, oom_line: String },
    /// No output and no CPU time for `after`.
    Stalled { after: Duration },
}

impl QuietStop {
    /// The attempt's cause.
    pub fn cause(&self) -> Cause {
        match self {
            QuietStop::HungAfterOom { .. } => Cause::HungAfterOom,
            QuietStop::Stalled { .. } => Cause::Stalled,
        }
    }
}

impl fmt::Display for QuietStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuietStop::HungAfterOom { after, .. } => write!(
                f,
                "no output for {} after an out-of-memory error",
                humantime::format_duration(*after)
            ),
            QuietStop::Stalled { after } => write!(
                f,
                "no output and no CPU time for {}",
                humantime::format_duration(*after)
            ),
        }
    }
}

/// One attempt's quiet watch: when its output and its CPU time last moved.
#[derive(Debug, Clone)]
pub struct QuietWatch {
    timeouts: Timeouts,
    output_bytes: u64,
    output_at: Instant,
    /// The tree's CPU time at the last tick that read it, in clock ticks; `None` until read.
    cpu_ticks: Option<u64>,
    cpu_at: Instant,
    /// The output (bytes written) at which the output was last read for an out-of-memory error
    /// and showed none: it is not read again until more comes.
    read_at_bytes: Option<u64>,
}

impl QuietWatch {
    /// A watch for a job started `now`: its silence counts from its start.
    pub fn new(timeouts: Timeouts, now: Instant) -> Self {
        QuietWatch {
            timeouts,
            output_bytes: 0,
            output_at: now,
            cpu_ticks: None,
            cpu_at: now,
            read_at_bytes: None,
        }
    }

    /// Whether anything is watched: the caller need not read CPU time or call [`Self::tick`]
    /// otherwise.
    pub fn is_on(&self) -> bool {
        self.timeouts.hang.is_some() || self.timeouts.stall.is_some()
    }

    /// The job was stopped and continued (job control: oomguard was stopped too, and saw
    /// nothing): the time it spent stopped is not silence.
    pub fn restart(&mut self, now: Instant) {
        self.output_at = now;
        self.cpu_at = now;
    }

    /// One tick at `now`: `output_bytes` written by the job so far (`output_waiting` when a chunk
    /// of it waits for room on oomguard's own stdout: the job is not silent, oomguard's reader
    /// is slow), and its tree's CPU time in clock ticks (`None` where not read). Returns the stop
    /// that is due, if any. `oom_shown` reads the output for an out-of-memory error the job did
    /// not survive and returns its line; it is called only once the job has been silent for a
    /// timeout, and not again until more output comes. A job that went silent and idle after
    /// an out-of-memory error is hung after it, whichever timeout passed first.
    pub fn tick(
        &mut self,
        now: Instant,
        output_bytes: u64,
        output_waiting: bool,
        cpu_ticks: Option<u64>,
        oom_shown: impl FnOnce() -> Option<String>,
    ) -> Option<QuietStop> {
        if output_bytes != self.output_bytes || output_waiting {
            self.output_bytes = output_bytes;
            self.output_at = now;
        }
        if let Some(ticks) = cpu_ticks.filter(|t| Some(*t) != self.cpu_ticks) {
            // Any change counts, a drop included (a process of the tree ended and was reaped).
            self.cpu_ticks = Some(ticks);
            self.cpu_at = now;
        }
        let silent = now.saturating_duration_since(self.output_at);
        let idle = silent.min(now.saturating_duration_since(self.cpu_at));
        let hang = self.timeouts.hang.filter(|t| silent >= *t);
        let stall = self
            .timeouts
            .stall
            .filter(|t| self.cpu_ticks.is_some() && idle >= *t);
        let after = hang.or(stall)?;
        if self.read_at_bytes != Some(self.output_bytes) {
            match oom_shown() {
                Some(oom_line) => return Some(QuietStop::HungAfterOom { after, oom_line }),
                None => self.read_at_bytes = Some(self.output_bytes),
            }
        }
        stall.map(|after| QuietStop::Stalled { after })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.";

    /// One tick of a scenario: milliseconds since the start, bytes written so far, whether a
    /// chunk waits for room, CPU ticks, and whether the output shows an OOM by then.
    type Tick = (u64, u64, bool, Option<u64>, bool);

    /// Plays `ticks` and returns, per tick, the stop (as its cause's name) or "-", and how many
    /// times the output was read.
    fn play(timeouts: Timeouts, ticks: &[Tick]) -> (Vec<&'static str>, usize) {
        let start = Instant::now();
        let mut watch = QuietWatch::new(timeouts, start);
        let reads = Cell::new(0);
        let got = ticks
            .iter()
            .map(|&(ms, bytes, waiting, cpu, oom)| {
                let now = start + Duration::from_millis(ms);
                let stop = watch.tick(now, bytes, waiting, cpu, || {
                    reads.set(reads.get() + 1);
                    oom.then(|| OOM.to_string())
                });
                stop.map_or("-", |s| s.cause().as_str())
            })
            .collect();
        (got, reads.get())
    }

    const HANG_1S: Timeouts = Timeouts {
        hang: Some(Duration::from_secs(1)),
        stall: None,
    };
    const STALL_1S: Timeouts = Timeouts {
        hang: None,
        stall: Some(Duration::from_secs(1)),
    };
    const BOTH: Timeouts = Timeouts {
        hang: Some(Duration::from_secs(3)),
        stall: Some(Duration::from_secs(1)),
    };

    #[test]
    fn decides_when_a_quiet_job_is_stopped() {
        // (what, timeouts, ticks, the stop per tick, reads of the output)
        type Row = (
            &'static str,
            Timeouts,
            &'static [Tick],
            &'static [&'static str],
            usize,
        );
        let table: &[Row] = &[
            (
                "an OOM, then nothing: stopped once the timeout passed",
                HANG_1S,
                &[
                    (500, 900, false, None, true),
                    (1000, 900, false, None, true),
                    (1500, 900, false, None, true),
                ],
                &["-", "-", "hung_after_oom"],
                1,
            ),
            (
                "an OOM, then a line every tick: never read, never stopped",
                HANG_1S,
                &[
                    (500, 900, false, None, true),
                    (1000, 950, false, None, true),
                    (1500, 1000, false, None, true),
                    (2000, 1050, false, None, true),
                    (2500, 1100, false, None, true),
                ],
                &["-", "-", "-", "-", "-"],
                0,
            ),
            (
                "silent without an OOM: read once per silent stretch, never stopped",
                HANG_1S,
                &[
                    (1000, 10, false, None, false),
                    (2000, 10, false, None, false),
                    (3000, 10, false, None, false),
                    (3500, 20, false, None, false),
                    (4500, 20, false, None, false),
                    (5000, 20, false, None, false),
                ],
                &["-", "-", "-", "-", "-", "-"],
                2,
            ),
            (
                "a chunk waiting for oomguard's slow stdout is not silence",
                HANG_1S,
                &[
                    (1000, 900, true, None, true),
                    (2000, 900, true, None, true),
                    (2500, 900, false, None, true),
                    (3000, 900, false, None, true),
                ],
                &["-", "-", "-", "hung_after_oom"],
                1,
            ),
            (
                "silent and idle: stalled; silent but busy: not",
                STALL_1S,
                &[
                    (500, 0, false, Some(7), false),
                    (1000, 0, false, Some(9), false),
                    (1500, 0, false, Some(12), false),
                    (2000, 0, false, Some(12), false),
                    (2500, 0, false, Some(12), false),
                ],
                &["-", "-", "-", "-", "stalled"],
                1,
            ),
            (
                "idle but printing: not stalled",
                STALL_1S,
                &[
                    (500, 10, false, Some(7), false),
                    (1000, 20, false, Some(7), false),
                    (1500, 30, false, Some(7), false),
                    (2000, 40, false, Some(7), false),
                ],
                &["-", "-", "-", "-"],
                0,
            ),
            (
                "CPU time never read: never stalled",
                STALL_1S,
                &[(1000, 0, false, None, false), (5000, 0, false, None, false)],
                &["-", "-"],
                0,
            ),
            (
                "silent and idle after an OOM: hung, even before --hang-timeout",
                BOTH,
                &[
                    (500, 900, false, Some(7), true),
                    (1500, 900, false, Some(7), true),
                ],
                &["-", "hung_after_oom"],
                1,
            ),
            (
                "off: nothing is ever read or stopped",
                Timeouts {
                    hang: None,
                    stall: None,
                },
                &[
                    (1000, 900, false, Some(7), true),
                    (90_000, 900, false, Some(7), true),
                ],
                &["-", "-"],
                0,
            ),
        ];
        for (what, timeouts, ticks, want, want_reads) in table {
            let (got, reads) = play(*timeouts, ticks);
            assert_eq!(got, *want, "{what}");
            assert_eq!(reads, *want_reads, "{what}: reads of the output");
        }
    }

    #[test]
    fn time_spent_stopped_is_not_silence() {
        let start = Instant::now();
        let mut watch = QuietWatch::new(HANG_1S, start);
        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(watch.tick(at(100), 900, false, None, || None), None);
        // Ctrl-Z for a minute, then fg.
        watch.restart(at(60_000));
        let oom = || Some(OOM.to_string());
        assert_eq!(watch.tick(at(60_500), 900, false, None, oom), None);
        let stop = watch.tick(at(61_000), 900, false, None, oom).unwrap();
        assert_eq!(stop.cause(), Cause::HungAfterOom);
    }

    #[test]
    fn the_stop_says_why() {
        let hung = QuietStop::HungAfterOom {
            after: Duration::from_secs(60),
            oom_line: OOM.to_string(),
        };
        assert_eq!(
            hung.to_string(),
            "no output for 1m after an out-of-memory error"
        );
        let stalled = QuietStop::Stalled {
            after: Duration::from_secs(90),
        };
        assert_eq!(stalled.to_string(), "no output and no CPU time for 1m 30s");
        assert!(Cause::HungAfterOom.is_memory());
        assert!(!Cause::Stalled.is_memory());
    }
}
