//! The words for how things ended: how a process ended ([`Ending`]: an exit code or a signal
//! with its core-dump bit, and the shell-style exit status that stands for it, `128 + N` for
//! death by signal N as bash and tini report it), why an attempt ended ([`Cause`], with the
//! snake_case names summaries and the command line use), and how a whole run ended
//! ([`Outcome`]).
//!
//! This module only names endings. Deciding why an attempt ended is [`crate::judge::classify`]'s
//! job, and what to do after it (relaunch or stop with an outcome) is [`crate::decide::policy`]'s.

use serde::Serialize;

/// How one process ended, as `waitpid(2)` reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The process called `exit(code)`.
    Exited(i32),
    /// The process was terminated by `signal`.
    Signaled { signal: i32, core_dumped: bool },
}

impl Ending {
    /// The exit status a shell would report: the code itself, or `128 + signal`.
    pub fn shell_code(&self) -> i32 {
        match *self {
            Ending::Exited(code) => code,
            Ending::Signaled { signal, .. } => 128 + signal,
        }
    }

    /// The exit code when the process exited, `None` when a signal ended it.
    pub fn exit_code(&self) -> Option<i32> {
        match *self {
            Ending::Exited(code) => Some(code),
            Ending::Signaled { .. } => None,
        }
    }

    /// The signal number when a signal ended the process.
    pub fn signal(&self) -> Option<i32> {
        match *self {
            Ending::Exited(_) => None,
            Ending::Signaled { signal, .. } => Some(signal),
        }
    }

    /// Whether the process exited with status 0.
    pub fn is_success(&self) -> bool {
        matches!(self, Ending::Exited(0))
    }
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Ending::Exited(code) => write!(f, "exit {code}"),
            Ending::Signaled {
                signal,
                core_dumped,
            } => {
                let name = nix::sys::signal::Signal::try_from(signal)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {signal}"));
                if core_dumped {
                    write!(f, "{name} (core dumped)")
                } else {
                    write!(f, "{name}")
                }
            }
        }
    }
}

/// Why an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Exit status 0.
    Ok,
    /// The process reported running out of accelerator memory.
    DeviceOom,
    /// The process ran out of accelerator memory that other processes on the card (another
    /// user's job) had taken: alone on the card it fits. Not the batch's fault: the run waits
    /// for room rather than cutting it.
    GpuTaken,
    /// The kernel's OOM killer acted for the whole machine while other processes grew into the
    /// room the job had beside them at its start: the run waits for host memory rather than
    /// cutting the batch.
    MemoryTaken,
    /// The process reported running out of host memory.
    HostOom,
    /// A DataLoader worker was killed (SIGKILL/SIGBUS) or shared memory ran out under it.
    WorkerKilled,
    /// The kernel's (or Slurm's, or another scheduler's) OOM enforcement killed the job.
    OomKilled,
    /// The job died of SIGKILL and nothing says who sent it.
    Killed,
    /// Any other non-zero exit or fatal signal.
    Failed,
    /// The user asked the job to stop (SIGINT/SIGTERM to oomguard).
    Interrupted,
    /// oomguard stopped the job itself for crossing a configured memory bound.
    MemoryLimit,
    /// oomguard stopped the job itself: after its output showed an out-of-memory error, it
    /// neither exited nor wrote a byte for `--hang-timeout` (ranks waiting on a dead neighbour,
    /// a DataLoader that never returns).
    HungAfterOom,
    /// oomguard stopped the job itself: it wrote nothing and used no CPU for `--stall-timeout`.
    Stalled,
    /// Right after a relaunch the job refused to start over what the attempt before it left
    /// (LightningCLI's `config.yaml`, a Hugging Face script's non-empty output directory):
    /// not a bug of the job's, and not memory ([`crate::judge::leftovers`]).
    Leftovers,
}

impl Cause {
    /// Every cause, in the order they are documented (the match in `all_listed` stops the build
    /// when a cause is added without being listed here).
    pub const ALL: [Cause; 14] = [
        Cause::Ok,
        Cause::DeviceOom,
        Cause::GpuTaken,
        Cause::MemoryTaken,
        Cause::HostOom,
        Cause::WorkerKilled,
        Cause::OomKilled,
        Cause::Killed,
        Cause::Failed,
        Cause::Interrupted,
        Cause::MemoryLimit,
        Cause::HungAfterOom,
        Cause::Stalled,
        Cause::Leftovers,
    ];

    #[allow(dead_code)]
    fn all_listed(self) {
        // Never called: a new variant fails to compile here until ALL has it too.
        match self {
            Cause::Ok
            | Cause::DeviceOom
            | Cause::GpuTaken
            | Cause::MemoryTaken
            | Cause::HostOom
            | Cause::WorkerKilled
            | Cause::OomKilled
            | Cause::Killed
            | Cause::Failed
            | Cause::Interrupted
            | Cause::MemoryLimit
            | Cause::HungAfterOom
            | Cause::Stalled
            | Cause::Leftovers => {}
        }
    }

    /// The cause named `name` (as [`Cause::as_str`] spells it).
    pub fn from_name(name: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The snake_case name used in summaries and on the command line, e.g. `"device_oom"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Ok => "ok",
            Cause::DeviceOom => "device_oom",
            Cause::GpuTaken => "gpu_taken",
            Cause::MemoryTaken => "memory_taken",
            Cause::HostOom => "host_oom",
            Cause::WorkerKilled => "worker_killed",
            Cause::OomKilled => "oom_killed",
            Cause::Killed => "killed",
            Cause::Failed => "failed",
            Cause::Interrupted => "interrupted",
            Cause::MemoryLimit => "memory_limit",
            Cause::HungAfterOom => "hung_after_oom",
            Cause::Stalled => "stalled",
            Cause::Leftovers => "leftovers",
        }
    }

    /// Whether a knob steps after a death of this cause: memory pressure of the job's own
    /// ([`Cause::is_memory`] but `gpu_taken`, after which the run waits for room and keeps the
    /// batch). The causes a knob's `on` may name.
    pub fn steps_knobs(self) -> bool {
        self.is_memory() && !self.is_taken()
    }

    /// Other processes took the room of a job that fits alone: the run waits for room.
    pub fn is_taken(self) -> bool {
        matches!(self, Cause::GpuTaken | Cause::MemoryTaken)
    }

    /// Whether the cause is (or is most likely) memory pressure, so the job is worth
    /// relaunching with a smaller batch. An unexplained SIGKILL counts: on a training machine
    /// it is almost always an OOM killer whose record we could not see.
    pub fn is_memory(self) -> bool {
        matches!(
            self,
            Cause::DeviceOom
                | Cause::GpuTaken
                | Cause::MemoryTaken
                | Cause::HostOom
                | Cause::WorkerKilled
                | Cause::OomKilled
                | Cause::Killed
                | Cause::MemoryLimit
                | Cause::HungAfterOom
        )
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Succeeded,
    /// Out-of-memory deaths outlasted every remedy (every knob at its floor, or attempts used up).
    GaveUp,
    /// A non-memory failure: the job's own error.
    Failed,
    Interrupted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::GaveUp => "gave_up",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_codes_follow_bash() {
        let table = [
            (Ending::Exited(0), 0, "exit 0"),
            (Ending::Exited(3), 3, "exit 3"),
            (
                Ending::Signaled {
                    signal: 9,
                    core_dumped: false,
                },
                137,
                "SIGKILL",
            ),
            (
                Ending::Signaled {
                    signal: 15,
                    core_dumped: false,
                },
                143,
                "SIGTERM",
            ),
            (
                Ending::Signaled {
                    signal: 6,
                    core_dumped: true,
                },
                134,
                "SIGABRT (core dumped)",
            ),
        ];
        for (ending, code, text) in table {
            assert_eq!(ending.shell_code(), code, "{ending:?}");
            assert_eq!(ending.to_string(), text);
        }
    }

    #[test]
    fn cause_names_round_trip() {
        for c in Cause::ALL {
            let json = serde_json::to_string(&c).expect("serialize");
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(
                serde_json::from_str::<Cause>(&json).expect("deserialize"),
                c
            );
            assert_eq!(
                c.is_memory(),
                !matches!(
                    c,
                    Cause::Ok
                        | Cause::Failed
                        | Cause::Interrupted
                        | Cause::Stalled
                        | Cause::Leftovers
                )
            );
        }
    }
}
