//! The Slurm steps of one attempt's `srun`s, as the supervisor keeps track of them: which of
//! the job's processes are sruns, which step each launched (asking `scontrol`, less and less
//! often while a step does not show), how many nodes each step spans, and where its tasks'
//! memory is read. A step whose every node has its cgroup on this host (one node, or several
//! slurmd on one host) is read from those cgroups, node by node; a step with a node whose cgroup
//! is not here (tasks on another machine) is read whole from `sstat`, and its local tasks count
//! for the GPU only: sstat's total already holds them, and a task counted twice would stop a
//! job that fits.
//!
//! It asks Slurm through the functions it is given ([`crate::observe::slurm::steps_of`],
//! [`crate::observe::slurm::step_memory_cgroups`], [`crate::observe::slurm::step_memory_bytes`] in
//! the supervisor; fakes in the tests) and never signals anything: the supervisor does, with
//! [`SrunSteps::known`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::observe::cgroup::JobCgroup;
use crate::observe::sampler::{SlurmPart, SlurmPlace};
use crate::observe::slurm::{self, Listed, Step, StepCgroup};

/// The Slurm step each of the job's `srun` processes launched, and where their tasks' memory is
/// read: the tasks run under slurmstepd, not below oomguard.
#[derive(Default)]
pub(super) struct SrunSteps {
    /// srun PIDs seen, with their step once `scontrol` listed it.
    by_srun: HashMap<u32, Option<Step>>,
    /// Processes found not to be srun, with when first seen: their name is read again only
    /// while they are young (a fork execs srun at once) or the attempt's main process (it may
    /// exec srun at any time), so a tick does not read every process's name.
    not_srun: HashMap<u32, Instant>,
    /// The last question to `scontrol` about sruns it had not listed (see
    /// [`SrunSteps::refresh`]).
    asked: Option<Asked>,
    /// The steps found, each with where its memory is read.
    found: Vec<FoundStep>,
    /// `sstat`'s last answers.
    sstat: Option<SstatAnswers>,
}

/// When `sstat` was last asked, and what it said of each step read through it (`None`: no
/// answer).
struct SstatAnswers {
    at: Instant,
    by_step: Vec<(Step, Option<u64>)>,
}

/// A question to `scontrol` about sruns it had not listed.
#[derive(Clone, Copy)]
struct Asked {
    at: Instant,
    /// How long until the next.
    wait: Duration,
    /// How many questions in a row found nothing new.
    misses: u32,
}

/// What of the steps is read here ([`SrunSteps::read_here`]).
pub(super) struct ReadHere<'a> {
    /// The cgroups to read as the job's, each with its node.
    pub cgroups: Vec<(SlurmPlace, &'a JobCgroup)>,
    /// The tasks those cgroups hold.
    pub pids: Vec<u32>,
    /// The local tasks of steps read through sstat: they count for the GPU only.
    pub gpu_only_pids: Vec<u32>,
}

/// A step `scontrol` listed, and its nodes' cgroups found on this host so far.
struct FoundStep {
    step: Step,
    /// How many nodes it spans (`Nodes=`); `None` where scontrol did not say.
    nodes: Option<u32>,
    cgroups: Vec<(String, JobCgroup)>,
    found_at: Instant,
    /// When this host's cgroup trees were last looked through for it; `None` before the first.
    looked_at: Option<Instant>,
}

impl FoundStep {
    /// Whether every node of the step has its cgroup here, so the cgroups hold all its tasks.
    fn all_here(&self) -> bool {
        let mut nodes: Vec<&str> = self.cgroups.iter().map(|(n, _)| n.as_str()).collect();
        nodes.dedup();
        !nodes.is_empty() && nodes.len() as u64 >= u64::from(self.nodes.unwrap_or(1))
    }
}

/// How often `scontrol` is first asked again about an srun whose step it did not list (srun
/// still waiting for its allocation, or a step that never comes: an srun that failed).
const STEP_LOOKUP: Duration = Duration::from_secs(1);

/// How many questions in a row may find nothing before the wait grows: a step comes within
/// seconds of its srun where the allocation is there, and is asked about every second until
/// then (a stop needs it: a job whose step is unknown is stopped by signalling srun).
const STEP_LOOKUP_PATIENCE: u32 = 10;

/// The longest wait between two such questions: past [`STEP_LOOKUP_PATIENCE`], each that finds
/// nothing doubles the wait up to this, so an srun that never gets its step (one waiting in the
/// queue, one that failed) costs slurmctld two round trips a minute.
const STEP_LOOKUP_MAX: Duration = Duration::from_secs(30);

/// How long after a step is found its nodes' cgroups are still looked for: slurmstepd makes a
/// node's cgroup as the node's tasks start, and a node's may come a moment after another's.
const CGROUPS_SETTLE: Duration = Duration::from_secs(30);

/// How often `sstat` is asked about steps whose cgroups cannot all be read here: a round trip
/// to each node's slurmd, whose own figures move every `JobAcctGatherFrequency` (30 s by
/// default).
const SSTAT_EVERY: Duration = Duration::from_secs(5);

/// How long a new process's name is looked at again for `srun` (see [`SrunSteps::not_srun`]).
const NAME_SETTLES: Duration = Duration::from_secs(2);

/// Where this host's cgroup trees are mounted: `/sys/fs/cgroup`, or for tests
/// `OOMGUARD_SLURM_CGROUP_ROOT` (a tree holding only some nodes' stands for a host where the
/// others' are not) or [`crate::observe::cgroup::CGROUP_ROOT_ENV`].
pub(super) fn cgroup_root() -> PathBuf {
    [
        "OOMGUARD_SLURM_CGROUP_ROOT",
        crate::observe::cgroup::CGROUP_ROOT_ENV,
    ]
    .iter()
    .find_map(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
    .map_or_else(|| PathBuf::from("/sys/fs/cgroup"), PathBuf::from)
}

/// How the supervisor asks Slurm (real commands) and the tests (fakes).
pub(super) struct Slurm<'a> {
    /// Whether a process is an srun.
    pub is_srun: &'a dyn Fn(u32) -> bool,
    /// `scontrol`'s steps of these sruns.
    pub steps_of: &'a dyn Fn(&[u32]) -> Vec<Listed>,
    /// A step's cgroups on this host.
    pub cgroups_of: &'a dyn Fn(Step) -> Vec<StepCgroup>,
}

impl SrunSteps {
    /// The steps found so far, without asking Slurm.
    pub fn known(&self) -> Vec<Step> {
        self.found.iter().map(|f| f.step).collect()
    }

    /// Brings the steps up to date with the job's live processes `pids` (`main_pid` the
    /// attempt's main process) at `now`: sruns not seen before are asked about at once, those
    /// whose step scontrol did not list yet after a wait that doubles each time nothing new was
    /// found; a step's nodes' cgroups are looked for until all are here or
    /// [`CGROUPS_SETTLE`] has passed. Returns the live srun PIDs.
    pub fn refresh(
        &mut self,
        pids: &[u32],
        main_pid: u32,
        now: Instant,
        slurm: &Slurm,
    ) -> Vec<u32> {
        self.not_srun.retain(|pid, _| pids.contains(pid));
        let mut sruns = Vec::new();
        for &pid in pids {
            let settled = self.not_srun.get(&pid).is_some_and(|seen| {
                now.saturating_duration_since(*seen) >= NAME_SETTLES && pid != main_pid
            });
            if settled {
                continue;
            }
            if self.by_srun.contains_key(&pid) || (slurm.is_srun)(pid) {
                self.not_srun.remove(&pid);
                sruns.push(pid);
            } else {
                self.not_srun.entry(pid).or_insert(now);
            }
        }
        self.by_srun.retain(|pid, _| sruns.contains(pid));
        let by_srun = &self.by_srun;
        self.found
            .retain(|f| by_srun.values().any(|s| *s == Some(f.step)));
        self.ask_scontrol(&sruns, now, slurm);
        self.look_for_cgroups(now, slurm);
        sruns
    }

    /// Makes the next [`SrunSteps::refresh`] ask scontrol about sruns whose step is not known,
    /// however long it has waited: a stop must reach the tasks through their step.
    pub fn ask_at_once(&mut self) {
        if let Some(asked) = &mut self.asked {
            asked.wait = Duration::ZERO;
        }
    }

    /// Asks scontrol about the sruns of `sruns` whose step is not known, where one is new or the
    /// wait since the last question is over.
    fn ask_scontrol(&mut self, sruns: &[u32], now: Instant, slurm: &Slurm) {
        let unknown: Vec<u32> = sruns
            .iter()
            .copied()
            .filter(|pid| self.by_srun.get(pid).is_none_or(Option::is_none))
            .collect();
        let new = sruns.iter().any(|pid| !self.by_srun.contains_key(pid));
        let due = self
            .asked
            .is_none_or(|a| now.saturating_duration_since(a.at) >= a.wait);
        if unknown.is_empty() || !(due || new) {
            return;
        }
        for pid in &unknown {
            self.by_srun.insert(*pid, None);
        }
        let listed = (slurm.steps_of)(&unknown);
        // Something new to ask about, or an answer: the count of misses starts over.
        let misses = match self.asked {
            Some(a) if !new && listed.is_empty() => a.misses + 1,
            _ => 0,
        };
        let wait = match misses.checked_sub(STEP_LOOKUP_PATIENCE - 1) {
            Some(doublings @ 1..) => STEP_LOOKUP
                .saturating_mul(1 << doublings.min(16))
                .min(STEP_LOOKUP_MAX),
            _ => STEP_LOOKUP,
        };
        self.asked = Some(Asked {
            at: now,
            wait,
            misses,
        });
        for Listed {
            srun_pid,
            step,
            nodes,
        } in listed
        {
            self.by_srun.insert(srun_pid, Some(step));
            if !self.found.iter().any(|f| f.step == step) {
                self.found.push(FoundStep {
                    step,
                    nodes,
                    cgroups: Vec::new(),
                    found_at: now,
                    looked_at: None,
                });
            }
        }
    }

    /// Looks for the cgroups of steps that lack some, at most every [`STEP_LOOKUP`], while
    /// they are young; says where each step's memory is read when that is first known or
    /// changes.
    fn look_for_cgroups(&mut self, now: Instant, slurm: &Slurm) {
        for found in &mut self.found {
            let young = now.saturating_duration_since(found.found_at) < CGROUPS_SETTLE;
            let due = found
                .looked_at
                .is_none_or(|at| now.saturating_duration_since(at) >= STEP_LOOKUP);
            if found.all_here() || !young || !due {
                continue;
            }
            let first = found.looked_at.is_none();
            found.looked_at = Some(now);
            let had = found.cgroups.len();
            for StepCgroup { node, dir, v2 } in (slurm.cgroups_of)(found.step) {
                if found.cgroups.iter().any(|(_, cg)| cg.dir() == dir) {
                    continue;
                }
                found.cgroups.push((node, JobCgroup::observed(dir, v2)));
            }
            found.cgroups.sort_by(|a, b| a.0.cmp(&b.0));
            if first || found.cgroups.len() != had {
                say_where(found);
            }
        }
    }

    /// What of the steps is read here: the cgroups of steps whose every node has one here,
    /// with their tasks, and the local tasks of the others.
    pub fn read_here(&self) -> ReadHere<'_> {
        let mut here = ReadHere {
            cgroups: Vec::new(),
            pids: Vec::new(),
            gpu_only_pids: Vec::new(),
        };
        for found in &self.found {
            let all_here = found.all_here();
            for (node, cg) in &found.cgroups {
                if all_here {
                    here.cgroups.push((SlurmPlace::Node(node.clone()), cg));
                    here.pids.extend(cg.tree_pids());
                } else {
                    here.gpu_only_pids.extend(cg.tree_pids());
                }
            }
        }
        here
    }

    /// The memory of each step whose cgroups cannot all be read here, from `sstat` (`ask`) at
    /// most every [`SSTAT_EVERY`]; the last answers stand in between. A step sstat gave no
    /// answer for is left out.
    pub fn sstat_parts(
        &mut self,
        now: Instant,
        ask: &dyn Fn(Step) -> Option<u64>,
    ) -> Vec<SlurmPart> {
        let remote: Vec<Step> = self
            .found
            .iter()
            .filter(|f| !f.all_here())
            .map(|f| f.step)
            .collect();
        if remote.is_empty() {
            return Vec::new();
        }
        let stale = self.sstat.as_ref().is_none_or(|last| {
            now.saturating_duration_since(last.at) >= SSTAT_EVERY
                || remote
                    .iter()
                    .any(|s| !last.by_step.iter().any(|(a, _)| a == s))
        });
        if stale {
            let by_step = remote.iter().map(|step| (*step, ask(*step))).collect();
            self.sstat = Some(SstatAnswers { at: now, by_step });
        }
        let answers = self.sstat.as_ref().map_or(&[][..], |last| &last.by_step);
        answers
            .iter()
            .filter(|(step, _)| remote.contains(step))
            .filter_map(|(step, bytes)| {
                bytes.map(|bytes| SlurmPart {
                    place: SlurmPlace::Step(*step),
                    bytes,
                })
            })
            .collect()
    }
}

/// One line of the log saying where a step's memory is read.
fn say_where(found: &FoundStep) {
    let step = found.step;
    let nodes: Vec<String> = found
        .cgroups
        .iter()
        .map(|(node, cg)| format!("{node} ({})", cg.dir().display()))
        .collect();
    if found.all_here() {
        tracing::info!(
            "watching the tasks of Slurm step {step} in their cgroups: {}",
            nodes.join(", ")
        );
    } else {
        let of = found.nodes.map_or(String::new(), |n| format!(" of {n}"));
        tracing::info!(
            "watching the tasks of Slurm step {step} through sstat ({} node(s){of} have their cgroup here)",
            nodes.len()
        );
    }
}

/// The real Slurm: the commands and this host's cgroup trees. Called on every tick of a job
/// on a host with Slurm: where the trees are and the host's name are read only when a step's
/// cgroups are looked for (rarely), never per tick.
pub(super) fn real_slurm<R>(use_it: impl FnOnce(&Slurm) -> R) -> R {
    let cgroups_of = |step| {
        let host = crate::guard::liveness::host_name().unwrap_or_default();
        let here = host.split('.').next().unwrap_or_default();
        slurm::step_memory_cgroups(&cgroup_root(), step, here)
    };
    use_it(&Slurm {
        is_srun: &slurm::is_srun,
        steps_of: &slurm::steps_of,
        cgroups_of: &cgroups_of,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    const SRUN: u32 = 700;
    const STEP: Step = Step { job: 12, step: 0 };

    /// A fake Slurm: `srun` is PID 700, scontrol lists its step (on `nodes` nodes) from the
    /// `listed_from`-th question on, and the cgroups of `nodes_here` are found here.
    struct Fake {
        listed_from: usize,
        nodes: u32,
        nodes_here: RefCell<Vec<&'static str>>,
        questions: Cell<usize>,
        dir: tempfile::TempDir,
    }

    impl Fake {
        fn new(listed_from: usize, nodes: u32, nodes_here: &[&'static str]) -> Fake {
            Fake {
                listed_from,
                nodes,
                nodes_here: RefCell::new(nodes_here.to_vec()),
                questions: Cell::new(0),
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn with<R>(&self, use_it: impl FnOnce(&Slurm) -> R) -> R {
            let steps_of = |_: &[u32]| {
                self.questions.set(self.questions.get() + 1);
                if self.questions.get() < self.listed_from {
                    return Vec::new();
                }
                vec![Listed {
                    srun_pid: SRUN,
                    step: STEP,
                    nodes: Some(self.nodes),
                }]
            };
            let cgroups_of = |step: Step| {
                self.nodes_here
                    .borrow()
                    .iter()
                    .map(|node| StepCgroup {
                        node: node.to_string(),
                        dir: self.dir.path().join(format!("slurm_{node}/{step}")),
                        v2: false,
                    })
                    .collect()
            };
            use_it(&Slurm {
                is_srun: &|pid| pid >= SRUN,
                steps_of: &steps_of,
                cgroups_of: &cgroups_of,
            })
        }
    }

    /// Where the step's memory is read: the nodes read from cgroups, and whether sstat is asked.
    fn placement(steps: &mut SrunSteps, now: Instant) -> (Vec<String>, bool) {
        let nodes = steps
            .read_here()
            .cgroups
            .iter()
            .map(|(place, _)| match place {
                SlurmPlace::Node(n) => n.clone(),
                SlurmPlace::Step(s) => s.to_string(),
            })
            .collect();
        let asked = Cell::new(false);
        let parts = steps.sstat_parts(now, &|_| {
            asked.set(true);
            Some(1)
        });
        (nodes, asked.get() || !parts.is_empty())
    }

    #[test]
    fn a_step_is_read_from_cgroups_only_where_every_node_has_its_cgroup_here() {
        // (nodes of the step, nodes with their cgroup here, read from cgroups, through sstat)
        let table: &[(u32, &[&str], &[&str], bool)] = &[
            (1, &["n1"], &["n1"], false),
            (2, &["n1", "n2"], &["n1", "n2"], false),
            (2, &["n1"], &[], true),
            (2, &[], &[], true),
            (1, &[], &[], true),
        ];
        for (nodes, here, want_cgroups, want_sstat) in table {
            let fake = Fake::new(1, *nodes, here);
            let mut steps = SrunSteps::default();
            let now = Instant::now();
            let sruns = fake.with(|slurm| steps.refresh(&[1, SRUN], 1, now, slurm));
            assert_eq!(sruns, vec![SRUN]);
            assert_eq!(steps.known(), vec![STEP]);
            let (cgroups, sstat) = placement(&mut steps, now);
            assert_eq!(&cgroups, want_cgroups, "{nodes} node(s), {here:?} here");
            assert_eq!(sstat, *want_sstat, "{nodes} node(s), {here:?} here");
        }
    }

    #[test]
    fn a_nodes_cgroup_that_comes_late_moves_the_step_from_sstat_to_cgroups() {
        let fake = Fake::new(1, 2, &["n1"]);
        let mut steps = SrunSteps::default();
        let t0 = Instant::now();
        fake.with(|slurm| steps.refresh(&[SRUN], 1, t0, slurm));
        assert_eq!(placement(&mut steps, t0), (vec![], true));
        fake.nodes_here.borrow_mut().push("n2");
        // Not looked at again within the second.
        let soon = t0 + Duration::from_millis(500);
        fake.with(|slurm| steps.refresh(&[SRUN], 1, soon, slurm));
        assert_eq!(placement(&mut steps, soon), (vec![], true));
        let later = t0 + STEP_LOOKUP;
        fake.with(|slurm| steps.refresh(&[SRUN], 1, later, slurm));
        assert_eq!(
            placement(&mut steps, later),
            (vec!["n1".to_string(), "n2".to_string()], false)
        );
        // A step whose other node never shows here is not looked for forever.
        let fake = Fake::new(1, 2, &["n1"]);
        let mut steps = SrunSteps::default();
        fake.with(|slurm| steps.refresh(&[SRUN], 1, t0, slurm));
        fake.nodes_here.borrow_mut().push("n2");
        let settled = t0 + CGROUPS_SETTLE;
        fake.with(|slurm| steps.refresh(&[SRUN], 1, settled, slurm));
        assert_eq!(placement(&mut steps, settled), (vec![], true));
    }

    #[test]
    fn scontrol_is_asked_less_and_less_often_about_a_step_that_does_not_come() {
        let fake = Fake::new(usize::MAX, 1, &["n1"]);
        let mut steps = SrunSteps::default();
        let t0 = Instant::now();
        // One tick a second for ten minutes.
        for second in 0..600 {
            let now = t0 + Duration::from_secs(second);
            fake.with(|slurm| steps.refresh(&[SRUN], 1, now, slurm));
        }
        // Every second for 0 ... 10 s, then at 12, 16, 24 and 40 s (the wait doubling), then
        // every 30 s (70 ... 580 s).
        let questions = fake.questions.get();
        assert_eq!(questions, 11 + 4 + 18, "questions in 10 minutes");
        // A new srun is asked about at once, and the wait starts over.
        let now = t0 + Duration::from_secs(600);
        fake.with(|slurm| steps.refresh(&[SRUN, 701], 1, now, slurm));
        let _ = fake.with(|slurm| steps.refresh(&[SRUN, 701], 1, now, slurm));
        assert_eq!(fake.questions.get(), questions + 1);
        fake.with(|slurm| steps.refresh(&[SRUN], 1, now + STEP_LOOKUP, slurm));
        assert_eq!(fake.questions.get(), questions + 2);
        // Long past patience, a stop asks at once.
        for second in 2..100 {
            let now = now + Duration::from_secs(second);
            fake.with(|slurm| steps.refresh(&[SRUN], 1, now, slurm));
        }
        let before_stop = fake.questions.get();
        // The last question came at 70 s, the next is due at 100 s.
        let stop = now + Duration::from_millis(90_500);
        fake.with(|slurm| steps.refresh(&[SRUN], 1, stop, slurm));
        assert_eq!(fake.questions.get(), before_stop, "waiting");
        steps.ask_at_once();
        fake.with(|slurm| steps.refresh(&[SRUN], 1, stop, slurm));
        assert_eq!(fake.questions.get(), before_stop + 1, "asked for the stop");
    }

    #[test]
    fn a_step_found_after_a_wait_is_asked_about_until_listed() {
        let fake = Fake::new(3, 1, &["n1"]);
        let mut steps = SrunSteps::default();
        let t0 = Instant::now();
        for second in 0..10 {
            let now = t0 + Duration::from_secs(second);
            fake.with(|slurm| steps.refresh(&[SRUN], 1, now, slurm));
        }
        assert_eq!(steps.known(), vec![STEP]);
        // 0, 1 and 2 s: listed at the third question, none after.
        assert_eq!(fake.questions.get(), 3);
    }

    #[test]
    fn sstat_is_asked_at_most_every_few_seconds_and_a_step_without_answer_is_left_out() {
        let fake = Fake::new(1, 2, &["n1"]);
        let mut steps = SrunSteps::default();
        let t0 = Instant::now();
        fake.with(|slurm| steps.refresh(&[SRUN], 1, t0, slurm));
        let asked = Cell::new(0);
        let ask = |_: Step| {
            asked.set(asked.get() + 1);
            Some(1000 * asked.get() as u64)
        };
        let part = |bytes| SlurmPart {
            place: SlurmPlace::Step(STEP),
            bytes,
        };
        assert_eq!(steps.sstat_parts(t0, &ask), vec![part(1000)]);
        assert_eq!(
            steps.sstat_parts(t0 + Duration::from_secs(1), &ask),
            vec![part(1000)]
        );
        assert_eq!(steps.sstat_parts(t0 + SSTAT_EVERY, &ask), vec![part(2000)]);
        assert_eq!(steps.sstat_parts(t0 + SSTAT_EVERY * 2, &|_| None), vec![]);
        // The srun gone, its step goes with it.
        fake.with(|slurm| steps.refresh(&[], 1, t0 + SSTAT_EVERY * 3, slurm));
        assert_eq!(steps.known(), vec![]);
        assert_eq!(steps.sstat_parts(t0 + SSTAT_EVERY * 3, &ask), vec![]);
    }
}
