//! The rules of one attempt, apart from processes and clocks: where it stands (its main process
//! running or ended; a stop under way, why and until when), and what each wake-up asks of the
//! supervisor, as [`Act`]s (signal the job's group, ask it to stop, kill its tree, its Slurm
//! steps or its cgroup, stop oomguard itself, say a line). No process, no clock read, no I/O:
//! the time comes with each wake-up and [`super`] carries the acts out, so every rule is a row
//! of a table test below.
//!
//! It does not sample, read the kernel's evidence or decide what the attempt's end means
//! ([`crate::judge::outcome`], [`crate::decide::policy`]): it only keeps what the verdict needs
//! (the main process's end, the user's, the memory bound's and the quiet watch's stops).

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{Notice, UserStop};
use crate::judge::outcome::Ending;
use crate::judge::quiet::QuietStop;
use crate::observe::watch::Crossing;

/// Why oomguard is stopping the job: the first reason, which a later one does not replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The user's SIGINT, SIGTERM, SIGHUP or SIGQUIT.
    User(Signal),
    /// A soft memory bound held for several samples.
    Memory,
    /// The job went quiet (`--hang-timeout`, `--stall-timeout`).
    Quiet,
    /// The main process ended: what it left behind is stopped.
    Leftovers,
}

/// A stop under way: why, and when the job gets SIGKILL (`None` once it has).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopping {
    pub why: Why,
    pub kill_at: Option<Instant>,
}

/// The main process: running, or reaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Main {
    Running,
    Ended {
        ending: Ending,
        /// From spawn to its death.
        duration: Duration,
        /// Its leftovers were asked to stop (a SIGKILL seen after that is oomguard's own).
        leftovers_stopped: bool,
    },
}

/// What woke the attempt, as the rules see it.
#[derive(Debug, Clone, PartialEq)]
pub enum Wake {
    /// A signal to oomguard.
    Signal(Signal),
    /// The grace period after a stop request ran out.
    GraceOver,
    /// The main process was reaped.
    MainEnded { ending: Ending, duration: Duration },
    /// The main process has ended and this many processes of the job are still alive.
    Leftovers { alive: usize },
    /// A soft memory bound held for long enough.
    MemoryBound(Crossing),
    /// The job went quiet for long enough.
    Quiet(QuietStop),
}

/// What the rules ask of the supervisor, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    /// The signal to the job's process group.
    SignalGroup(Signal),
    /// Our terminal was resized: the job's pseudo-terminal follows (or, with pipes, the job's
    /// group gets SIGWINCH).
    Resize,
    /// The job asked to stop with `signal`, then continued (a stopped job cannot act on it):
    /// its group, or with `whole_tree` every process of it; its srun steps' tasks through
    /// Slurm, srun itself never (it would SIGKILL its tasks).
    AskToStop { signal: Signal, whole_tree: bool },
    /// SIGKILL to every process of the job's tree.
    KillTree,
    /// SIGKILL to the tasks of the job's Slurm steps, through Slurm.
    KillSlurmSteps,
    /// Every process in the attempt's cgroup killed.
    KillCgroup,
    /// What the job holds open for writing, and when the stop began, noted (a checkpoint cut
    /// short is never resumed from): of the processes the wake-up just saw, or with `walk`
    /// of the job's tree walked again.
    NoteWriting { walk: bool },
    /// oomguard stops itself (after the job), as a shell's job control would.
    StopSelf,
    /// The quiet watch's clock starts over: the job's silence while stopped was ours.
    RestartQuietClock,
    /// A line for oomguard's log.
    Say(String),
    /// A notice for the run's observer.
    Tell(Notice),
}

/// One attempt's rules and what they have seen.
#[derive(Debug)]
pub struct Attempt {
    /// `--grace`: how long a stop request waits before SIGKILL.
    grace: Duration,
    /// The job leads a session of its own (run as another user): its group is orphaned, so a
    /// job-control stop must be SIGSTOP.
    own_session: bool,
    main: Main,
    stopping: Option<Stopping>,
    user_stop: Option<UserStop>,
    memory_stop: Option<Crossing>,
    quiet_stop: Option<QuietStop>,
    /// oomguard stopped the job for job control (Ctrl-Z) and has not continued it yet.
    stopped_by_us: bool,
}

/// How an attempt ended, as its rules saw it.
#[derive(Debug)]
pub struct Ended {
    pub ending: Ending,
    pub duration: Duration,
    pub user_stop: Option<UserStop>,
    pub memory_stop: Option<Crossing>,
    pub quiet_stop: Option<QuietStop>,
}

impl Attempt {
    pub fn new(grace: Duration, own_session: bool) -> Attempt {
        Attempt {
            grace,
            own_session,
            main: Main::Running,
            stopping: None,
            user_stop: None,
            memory_stop: None,
            quiet_stop: None,
            stopped_by_us: false,
        }
    }

    /// Takes in one wake-up at `now` and says what to do about it.
    pub fn on_wake(&mut self, wake: Wake, now: Instant) -> Vec<Act> {
        match wake {
            Wake::Signal(signal) => self.on_signal(signal, now),
            Wake::GraceOver => {
                if let Some(stopping) = &mut self.stopping {
                    stopping.kill_at = None;
                }
                vec![
                    Act::Say("grace period over: killing the job's processes".into()),
                    Act::KillTree,
                    Act::KillSlurmSteps,
                    Act::KillCgroup,
                ]
            }
            Wake::MainEnded { ending, duration } => {
                self.main = Main::Ended {
                    ending,
                    duration,
                    leftovers_stopped: false,
                };
                Vec::new()
            }
            Wake::Leftovers { alive } => self.on_leftovers(alive, now),
            // A bound or silence seen as the main process ended, or while a stop is already
            // under way, changes nothing: the stop first asked for stands.
            Wake::MemoryBound(_) | Wake::Quiet(_) if self.stopping() || self.main_ended() => {
                Vec::new()
            }
            Wake::MemoryBound(crossing) => {
                self.begin_stop(Why::Memory, now);
                self.memory_stop = Some(crossing);
                vec![
                    Act::NoteWriting { walk: false },
                    Act::AskToStop {
                        signal: Signal::SIGTERM,
                        whole_tree: false,
                    },
                ]
            }
            Wake::Quiet(stop) => {
                self.begin_stop(Why::Quiet, now);
                self.quiet_stop = Some(stop.clone());
                vec![
                    Act::Tell(Notice::QuietStop(stop)),
                    Act::NoteWriting { walk: true },
                    Act::AskToStop {
                        signal: Signal::SIGTERM,
                        whole_tree: false,
                    },
                ]
            }
        }
    }

    /// A signal to oomguard: a user's stop (a second SIGINT kills at once), job control, a
    /// resize, or one to pass on.
    fn on_signal(&mut self, signal: Signal, now: Instant) -> Vec<Act> {
        match signal {
            Signal::SIGCHLD => Vec::new(),
            Signal::SIGINT if self.user_stop.is_some() => vec![
                Act::Say("second SIGINT: killing the job's processes".into()),
                Act::KillTree,
                Act::KillSlurmSteps,
            ],
            signal if super::is_user_stop(signal) => {
                if self.user_stop.is_none() {
                    self.user_stop = Some(UserStop {
                        signal,
                        after_exit: self.main_ended(),
                    });
                    self.begin_stop(Why::User(signal), now);
                }
                vec![Act::AskToStop {
                    signal,
                    whole_tree: false,
                }]
            }
            signal if super::is_job_control_stop(signal) => {
                self.stopped_by_us = true;
                vec![
                    Act::Say(format!("{signal}: stopping the job, then oomguard")),
                    Act::SignalGroup(super::job_control_signal(signal, self.own_session)),
                    Act::StopSelf,
                ]
            }
            Signal::SIGCONT => {
                self.stopped_by_us = false;
                vec![Act::RestartQuietClock, Act::SignalGroup(Signal::SIGCONT)]
            }
            Signal::SIGWINCH => vec![Act::Resize],
            other => vec![Act::SignalGroup(other)],
        }
    }

    /// The main process is gone and `alive` processes of the job are not: they are ended
    /// gently, then for good, once.
    fn on_leftovers(&mut self, alive: usize, now: Instant) -> Vec<Act> {
        let Main::Ended {
            leftovers_stopped, ..
        } = &mut self.main
        else {
            return Vec::new();
        };
        if alive == 0 || *leftovers_stopped {
            return Vec::new();
        }
        *leftovers_stopped = true;
        self.begin_stop(Why::Leftovers, now);
        vec![
            Act::Say(format!(
                "main process ended; stopping {alive} leftover process(es)"
            )),
            Act::NoteWriting { walk: false },
            Act::AskToStop {
                signal: Signal::SIGTERM,
                whole_tree: true,
            },
        ]
    }

    /// A stop begins for `why`, unless one is under way (its reason and deadline stand); its
    /// SIGKILL is due after the grace period, unless one is already due.
    fn begin_stop(&mut self, why: Why, now: Instant) {
        let stopping = self.stopping.get_or_insert(Stopping { why, kill_at: None });
        stopping
            .kill_at
            .get_or_insert_with(|| super::after(now, self.grace));
    }

    /// When the job gets SIGKILL, if a stop is under way and it has not yet.
    pub fn kill_at(&self) -> Option<Instant> {
        self.stopping.and_then(|s| s.kill_at)
    }

    /// The stop under way, if any (its reason is what the tables read).
    #[cfg(test)]
    pub fn stopping_for(&self) -> Option<Stopping> {
        self.stopping
    }

    /// oomguard asked the job to stop for the user, a memory bound or its silence (its
    /// leftovers' stop is not one): a memory bound or silence seen now changes nothing.
    pub fn stopping(&self) -> bool {
        self.user_stop.is_some() || self.memory_stop.is_some() || self.quiet_stop.is_some()
    }

    /// The user asked to stop.
    pub fn user_stopped(&self) -> bool {
        self.user_stop.is_some()
    }

    pub fn main_ended(&self) -> bool {
        matches!(self.main, Main::Ended { .. })
    }

    /// The leftovers of the ended main process were asked to stop.
    pub fn leftovers_stopped(&self) -> bool {
        matches!(
            self.main,
            Main::Ended {
                leftovers_stopped: true,
                ..
            }
        )
    }

    /// oomguard stopped the job for job control and has not continued it: a job stopped by
    /// SIGTTIN now stopped itself.
    pub fn stopped_by_us(&self) -> bool {
        self.stopped_by_us
    }

    /// How the attempt ended; `None` while its main process runs.
    pub fn ended(self) -> Option<Ended> {
        let Main::Ended {
            ending, duration, ..
        } = self.main
        else {
            return None;
        };
        Some(Ended {
            ending,
            duration,
            user_stop: self.user_stop,
            memory_stop: self.memory_stop,
            quiet_stop: self.quiet_stop,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(5);

    fn crossing() -> Crossing {
        Crossing {
            bound: "--max-rss",
            value_bytes: 40 << 20,
            limit_bytes: 32 << 20,
        }
    }

    fn quiet() -> QuietStop {
        QuietStop::Stalled {
            after: Duration::from_secs(60),
        }
    }

    fn exited(code: i32) -> Wake {
        Wake::MainEnded {
            ending: Ending::Exited(code),
            duration: Duration::from_secs(9),
        }
    }

    fn ask(signal: Signal, whole_tree: bool) -> Act {
        Act::AskToStop { signal, whole_tree }
    }

    /// What one row expects after all its wake-ups.
    struct After {
        /// The acts of the last wake-up.
        acts: Vec<Act>,
        /// The stop under way: why, and its SIGKILL due this long after the first wake-up.
        stopping: Option<(Why, Option<Duration>)>,
        stopping_for_user: bool,
        memory_stop: bool,
        quiet_stop: bool,
    }

    /// Each row: the wake-ups, one second apart, and what the rules did after the last.
    #[test]
    fn the_rules_of_an_attempt() {
        use Signal::*;
        let kill = vec![
            Act::Say("grace period over: killing the job's processes".into()),
            Act::KillTree,
            Act::KillSlurmSteps,
            Act::KillCgroup,
        ];
        let rows: Vec<(&str, Vec<Wake>, After)> = vec![
            (
                "a user's stop: asked, its SIGKILL due after the grace period",
                vec![Wake::Signal(SIGTERM)],
                After {
                    acts: vec![ask(SIGTERM, false)],
                    stopping: Some((Why::User(SIGTERM), Some(GRACE))),
                    stopping_for_user: true,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "a second SIGINT kills at once (the tree and the Slurm steps)",
                vec![Wake::Signal(SIGINT), Wake::Signal(SIGINT)],
                After {
                    acts: vec![
                        Act::Say("second SIGINT: killing the job's processes".into()),
                        Act::KillTree,
                        Act::KillSlurmSteps,
                    ],
                    stopping: Some((Why::User(SIGINT), Some(GRACE))),
                    stopping_for_user: true,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "after SIGTERM, a SIGINT kills at once too",
                vec![Wake::Signal(SIGTERM), Wake::Signal(SIGINT)],
                After {
                    acts: vec![
                        Act::Say("second SIGINT: killing the job's processes".into()),
                        Act::KillTree,
                        Act::KillSlurmSteps,
                    ],
                    stopping: Some((Why::User(SIGTERM), Some(GRACE))),
                    stopping_for_user: true,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "a second SIGTERM only asks again",
                vec![Wake::Signal(SIGTERM), Wake::Signal(SIGTERM)],
                After {
                    acts: vec![ask(SIGTERM, false)],
                    stopping: Some((Why::User(SIGTERM), Some(GRACE))),
                    stopping_for_user: true,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "the grace runs out and the kill follows: tree, Slurm steps, cgroup",
                vec![Wake::Signal(SIGTERM), Wake::GraceOver],
                After {
                    acts: kill.clone(),
                    stopping: Some((Why::User(SIGTERM), None)),
                    stopping_for_user: true,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "a memory bound: the job asked to stop, what it writes noted",
                vec![Wake::MemoryBound(crossing())],
                After {
                    acts: vec![Act::NoteWriting { walk: false }, ask(SIGTERM, false)],
                    stopping: Some((Why::Memory, Some(GRACE))),
                    stopping_for_user: false,
                    memory_stop: true,
                    quiet_stop: false,
                },
            ),
            (
                "a memory crossing during a user's stop changes nothing",
                vec![Wake::Signal(SIGTERM), Wake::MemoryBound(crossing())],
                After {
                    acts: vec![],
                    stopping: Some((Why::User(SIGTERM), Some(GRACE))),
                    stopping_for_user: true,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "a user's stop during a memory stop: asked again, the first deadline kept",
                vec![Wake::MemoryBound(crossing()), Wake::Signal(SIGINT)],
                After {
                    acts: vec![ask(SIGINT, false)],
                    stopping: Some((Why::Memory, Some(GRACE))),
                    stopping_for_user: true,
                    memory_stop: true,
                    quiet_stop: false,
                },
            ),
            (
                "the job goes quiet: told, what the tree writes noted, asked to stop",
                vec![Wake::Quiet(quiet())],
                After {
                    acts: vec![
                        Act::Tell(Notice::QuietStop(quiet())),
                        Act::NoteWriting { walk: true },
                        ask(SIGTERM, false),
                    ],
                    stopping: Some((Why::Quiet, Some(GRACE))),
                    stopping_for_user: false,
                    memory_stop: false,
                    quiet_stop: true,
                },
            ),
            (
                "a quiet stop racing the job's exit: the exit came first, nothing to stop",
                vec![exited(0), Wake::Quiet(quiet())],
                After {
                    acts: vec![],
                    stopping: None,
                    stopping_for_user: false,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "the main process ended with leftovers: the whole tree asked to stop, once",
                vec![exited(1), Wake::Leftovers { alive: 3 }],
                After {
                    acts: vec![
                        Act::Say("main process ended; stopping 3 leftover process(es)".into()),
                        Act::NoteWriting { walk: false },
                        ask(SIGTERM, true),
                    ],
                    stopping: Some((Why::Leftovers, Some(GRACE + Duration::from_secs(1)))),
                    stopping_for_user: false,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "leftovers seen again: nothing more",
                vec![
                    exited(1),
                    Wake::Leftovers { alive: 3 },
                    Wake::Leftovers { alive: 2 },
                ],
                After {
                    acts: vec![],
                    stopping: Some((Why::Leftovers, Some(GRACE + Duration::from_secs(1)))),
                    stopping_for_user: false,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "a user's stop, then the main process ends with leftovers: the first deadline",
                vec![
                    Wake::Signal(SIGHUP),
                    exited(129),
                    Wake::Leftovers { alive: 1 },
                ],
                After {
                    acts: vec![
                        Act::Say("main process ended; stopping 1 leftover process(es)".into()),
                        Act::NoteWriting { walk: false },
                        ask(SIGTERM, true),
                    ],
                    stopping: Some((Why::User(SIGHUP), Some(GRACE))),
                    stopping_for_user: true,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "Ctrl-Z stops the job, then oomguard",
                vec![Wake::Signal(SIGTSTP)],
                After {
                    acts: vec![
                        Act::Say("SIGTSTP: stopping the job, then oomguard".into()),
                        Act::SignalGroup(SIGTSTP),
                        Act::StopSelf,
                    ],
                    stopping: None,
                    stopping_for_user: false,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "SIGCONT restarts the quiet clock and continues the job",
                vec![Wake::Signal(SIGTSTP), Wake::Signal(SIGCONT)],
                After {
                    acts: vec![Act::RestartQuietClock, Act::SignalGroup(SIGCONT)],
                    stopping: None,
                    stopping_for_user: false,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
            (
                "a resize follows to the job; SIGCHLD is nothing; another signal is passed on",
                vec![
                    Wake::Signal(SIGWINCH),
                    Wake::Signal(SIGCHLD),
                    Wake::Signal(SIGUSR1),
                ],
                After {
                    acts: vec![Act::SignalGroup(SIGUSR1)],
                    stopping: None,
                    stopping_for_user: false,
                    memory_stop: false,
                    quiet_stop: false,
                },
            ),
        ];
        for (what, wakes, want) in rows {
            let start = Instant::now();
            let mut attempt = Attempt::new(GRACE, false);
            let mut acts = Vec::new();
            for (i, wake) in wakes.into_iter().enumerate() {
                acts = attempt.on_wake(wake, start + Duration::from_secs(i as u64));
            }
            assert_eq!(acts, want.acts, "{what}");
            let stopping = attempt
                .stopping_for()
                .map(|s| (s.why, s.kill_at.map(|at| at - start)));
            assert_eq!(stopping, want.stopping, "{what}");
            assert_eq!(attempt.user_stopped(), want.stopping_for_user, "{what}");
            assert_eq!(attempt.memory_stop.is_some(), want.memory_stop, "{what}");
            assert_eq!(attempt.quiet_stop.is_some(), want.quiet_stop, "{what}");
        }
    }

    /// A stop that comes after the job's own exit keeps its ending (a success stays one); it
    /// is marked as after the exit.
    #[test]
    fn a_stop_after_the_jobs_own_exit_keeps_its_ending() {
        let now = Instant::now();
        let mut attempt = Attempt::new(GRACE, false);
        attempt.on_wake(exited(0), now);
        attempt.on_wake(Wake::Signal(Signal::SIGTERM), now);
        let ended = attempt.ended().expect("the main process ended");
        assert_eq!(ended.ending, Ending::Exited(0));
        assert_eq!(
            ended.user_stop,
            Some(UserStop {
                signal: Signal::SIGTERM,
                after_exit: true
            })
        );
        // Before the exit it is not.
        let mut attempt = Attempt::new(GRACE, false);
        attempt.on_wake(Wake::Signal(Signal::SIGTERM), now);
        assert!(attempt.ended().is_none(), "still running");
    }

    /// A job in a session of its own is orphaned: Ctrl-Z stops it with SIGSTOP (the kernel
    /// would discard a SIGTSTP it has no handler for), and the same for SIGTTIN and SIGTTOU.
    #[test]
    fn a_job_in_its_own_session_is_stopped_with_sigstop() {
        for signal in [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
            for (own_session, sent) in [(false, signal), (true, Signal::SIGSTOP)] {
                let mut attempt = Attempt::new(GRACE, own_session);
                let acts = attempt.on_wake(Wake::Signal(signal), Instant::now());
                assert_eq!(acts[1], Act::SignalGroup(sent), "{signal} {own_session}");
                assert!(attempt.stopped_by_us());
            }
        }
    }

    /// A grace period too long to add to the clock means never, not a panic.
    #[test]
    fn a_grace_beyond_the_clock_is_never() {
        let now = Instant::now();
        let mut attempt = Attempt::new(Duration::MAX, false);
        attempt.on_wake(Wake::Signal(Signal::SIGTERM), now);
        assert!(attempt.kill_at().is_some_and(|at| at > now));
    }

    /// SIGKILLs of the job's processes are oomguard's own only once its leftovers were asked
    /// to stop.
    #[test]
    fn leftovers_stopped_only_after_the_main_process_ended_with_some_alive() {
        let now = Instant::now();
        let mut attempt = Attempt::new(GRACE, false);
        assert!(attempt
            .on_wake(Wake::Leftovers { alive: 2 }, now)
            .is_empty());
        assert!(!attempt.leftovers_stopped());
        attempt.on_wake(exited(0), now);
        assert!(attempt
            .on_wake(Wake::Leftovers { alive: 0 }, now)
            .is_empty());
        assert!(!attempt.leftovers_stopped() && attempt.main_ended());
        attempt.on_wake(Wake::Leftovers { alive: 1 }, now);
        assert!(attempt.leftovers_stopped());
    }
}
