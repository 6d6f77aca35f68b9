//! How a process ended: an exit code or a signal (with its core-dump bit), and the shell-style
//! exit status that stands for it (`128 + N` for death by signal N, as bash and tini report it).
//!
//! This module only names endings; why the process ended is `classify`'s job.

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
}
