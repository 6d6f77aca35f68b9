//! STUB: replaced by the real classifier.
use crate::outcome::Ending;
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    Ok,
    DeviceOom,
    HostOom,
    WorkerKilled,
    OomKilled,
    Killed,
    Failed,
    Interrupted,
    MemoryLimit,
}
impl Cause {
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
#[derive(Debug, Clone, Default)]
pub struct KernelEvidence {
    pub vmstat_oom_kill_delta: Option<u64>,
    pub victim_lines: Vec<String>,
    pub cgroup_oom_kills: Option<u64>,
}
pub struct AttemptFacts<'a> {
    pub ending: Ending,
    pub tail: &'a str,
    pub kernel: &'a KernelEvidence,
    pub user_stopped: bool,
    pub memory_limit: Option<&'a str>,
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub cause: Cause,
    pub evidence: String,
}
pub fn classify(facts: &AttemptFacts) -> Verdict {
    let cause = if facts.user_stopped {
        Cause::Interrupted
    } else if facts.ending.is_success() {
        Cause::Ok
    } else if facts.tail.contains("CUDA out of memory") {
        Cause::DeviceOom
    } else if !facts.kernel.victim_lines.is_empty() {
        Cause::OomKilled
    } else if facts.ending.signal() == Some(9) {
        Cause::Killed
    } else {
        Cause::Failed
    };
    Verdict {
        cause,
        evidence: facts.ending.to_string(),
    }
}
pub fn classify_text(text: &str) -> Option<Verdict> {
    text.contains("out of memory").then(|| Verdict {
        cause: Cause::DeviceOom,
        evidence: String::new(),
    })
}
