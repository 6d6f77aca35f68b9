//! Where a run stands on the knobs: the values of the next attempt and what moved for it, every
//! attempt's cause with the values it ran with, what each attempt's numbers tell the fit, and
//! the one-time hints (allocator fragmentation). It learns from each attempt that ends and asks
//! [`crate::decide::policy`] for the next step; it does not decide that step itself, and it neither
//! waits nor speaks.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::decide::fit;
use crate::decide::policy::{self, Decision};
use crate::front::settings::RunSettings;
use crate::judge::outcome::Cause;
use crate::knobs::{self, KnobSet, Value};
use crate::observe::sampler::Sample;
use crate::remember::jobs::memory::{PastAttempt, PastSteps};
use crate::remember::jobs::run::JobRun;
use crate::remember::record::summary::RoomCut;
use crate::supervise::AttemptEnd;

/// An attempt's GPU and host memory series, each followed by a [`fit::Ramp`] (a few numbers,
/// not the timeline). Host memory is followed twice, in the units of each limit that can stop
/// it: the cgroup's usage (what `--memory-max` applies to) and the number the soft bounds
/// judge (the working set, else PSS, else RSS on ticks that skip PSS).
#[derive(Debug, Clone, Default)]
pub(super) struct AttemptRamp {
    gpu: fit::Ramp,
    cgroup: fit::Ramp,
    judged: fit::Ramp,
}

impl AttemptRamp {
    pub(super) fn feed(&mut self, sample: &Sample) {
        // Once the job's processes are gone (the sample after it ended) nothing is its memory.
        if sample.tree.processes == 0 {
            return;
        }
        if let Some(gpu) = sample.gpu_bytes() {
            self.gpu.feed(sample.unix_time_s, gpu);
        }
        if let Some(usage) = sample.cgroup_bytes {
            self.cgroup.feed(sample.unix_time_s, usage);
        }
        if let Some(judged) = sample.reading().job_bytes {
            self.judged.feed(sample.unix_time_s, judged);
        }
    }
}

/// Where the run stands on the ladder: the values of the knobs for the next attempt, what moved
/// for it, and every attempt's cause with the values it ran with.
pub(super) struct Ladder {
    /// The run's knobs: the settings' at the start, with those found inside the job added
    /// once the probe showed them ([`Ladder::adopt`]).
    pub(super) knobs: KnobSet,
    rules: Vec<knobs::Rule>,
    pub(super) original: Vec<Value>,
    pub(super) values: Vec<Value>,
    pub(super) changed: Vec<usize>,
    history: Vec<(Cause, Vec<Value>)>,
    /// The effective batch's shrinking was told (once a run).
    pub(super) warned_effective: bool,
    /// The checkpoint the next attempt resumes from (`--resume-arg`), and when the run started
    /// (only checkpoints written since count for a relaunch).
    pub(super) resume_from: Option<PathBuf>,
    pub(super) started: SystemTime,
    /// The fit's view of each attempt, in history order.
    evidence: Vec<Option<fit::Evidence>>,
    /// The fit's view of the attempts of the job's earlier runs, with their knob values.
    past: Vec<(Vec<Value>, fit::Evidence)>,
    /// Each attempt's memory at its completed steps (the probe's), in history order; and the
    /// earlier runs', with their knob values.
    steps: Vec<Option<fit::StepsPeak>>,
    past_steps: Vec<(Vec<Value>, fit::StepsPeak)>,
    /// The fragmentation hint: may still be given; given (every later attempt gets the
    /// variable); to be recorded on the next attempt.
    hint_available: bool,
    pub(super) hint_given: bool,
    pub(super) hint_pending: Option<policy::Hint>,
    /// The cut made for a shared card's room in this run (or carried from the last run's, when
    /// this one starts room-limited): the job's own values before it. Every later attempt's
    /// record carries it, so a success is remembered apart from the job's own size.
    pub(super) room_cut: Option<RoomCut>,
    /// Where the job's memory says what attempt 1 needs on the card.
    first: Option<FirstNeed>,
}

/// What the job's memory says attempt 1 needs on its card, and where it may start instead while
/// the card is short of room.
#[derive(Debug, Clone)]
struct FirstNeed {
    /// GPU memory per card at the starting values.
    need_bytes: u64,
    /// The cards the job was last seen on (NVML indices).
    devices: Vec<u32>,
    /// The last run was cut for room: these are its room-limited values, its cut's record.
    room_limited: Option<(Vec<Value>, RoomCut)>,
}

impl Ladder {
    /// The ladder at the start of a run of `job`: the values of what worked in the job's last
    /// run (or of the attempt its killed oomguard was in), else the command's own.
    pub(super) fn for_job(settings: &RunSettings, job: &JobRun) -> Ladder {
        // `--fresh` starts over: neither the values nor the evidence of earlier runs.
        let (past, past_steps) = if settings.job.fresh {
            (Vec::new(), Vec::new())
        } else {
            (
                earlier_runs(job, &settings.knobs),
                earlier_steps(job, &settings.knobs),
            )
        };
        let mut ladder = Ladder::new(
            settings,
            job.start().map(|start| start.values.clone()),
            past,
        );
        ladder.past_steps = past_steps;
        if !settings.job.fresh {
            ladder.first = first_need(job, &settings.knobs, &ladder.values);
        }
        ladder
    }

    /// The ladder starting at `start` (else the command's values), knowing `past`. `original`
    /// stays the command's, so the effective batch kept on the way down is the command's.
    fn new(
        settings: &RunSettings,
        start: Option<Vec<Value>>,
        past: Vec<(Vec<Value>, fit::Evidence)>,
    ) -> Ladder {
        let knobs = &settings.knobs;
        let original = knobs.originals();
        Ladder {
            knobs: knobs.clone(),
            rules: knobs.rules(),
            values: start.unwrap_or_else(|| original.clone()),
            original,
            changed: Vec::new(),
            history: Vec::new(),
            warned_effective: false,
            resume_from: None,
            started: SystemTime::now(),
            evidence: Vec::new(),
            past,
            steps: Vec::new(),
            past_steps: Vec::new(),
            hint_available: settings.allocator_hint && !allocator_conf_set(knobs),
            hint_given: false,
            hint_pending: None,
            room_cut: None,
            first: None,
        }
    }

    /// What attempt 1 needs per card, where the job's memory says, and whether these are the
    /// job's own values after a run that was cut for room.
    pub(super) fn first_need(&self) -> Option<(u64, bool)> {
        let first = self.first.as_ref()?;
        Some((first.need_bytes, first.room_limited.is_some()))
    }

    /// The cards the job was last seen on (empty: not known).
    pub(super) fn first_devices(&self) -> Vec<u32> {
        self.first
            .as_ref()
            .map(|f| f.devices.clone())
            .unwrap_or_default()
    }

    /// The card is still short of room for the job's own size: attempt 1 starts from the size
    /// the last run was cut to for room, and the run keeps that cut's record (a success stays
    /// remembered apart from the job's own size). The line saying so, or `None` where there is
    /// no such size.
    pub(super) fn start_room_limited(&mut self) -> Option<String> {
        let (values, cut) = self.first.as_ref()?.room_limited.clone()?;
        self.values = values;
        self.room_cut = Some(cut);
        Some(format!(
            "starting from {}, the size an earlier run was cut to for room (its own size waits for an emptier card)",
            self.knobs.at(&self.values).text_short()
        ))
    }

    /// The job's GPU memory measured at the next attempt's values by an attempt that fitted
    /// (this run's or an earlier run's), where one did.
    pub(super) fn measured_gpu_need(&self) -> Option<u64> {
        let here = self
            .history
            .iter()
            .map(|(_, values)| values)
            .zip(&self.evidence);
        let past = self.past.iter().map(|(values, e)| (values, Some(e)));
        here.map(|(v, e)| (v, e.as_ref()))
            .chain(past)
            .filter(|(values, _)| values.iter().zip(&self.values).all(|(a, b)| a.same(b)))
            .filter_map(|(_, e)| e.filter(|e| !e.failed && e.memory == fit::Memory::Gpu))
            .map(|e| e.bytes)
            .max()
    }

    /// The wait for room ran out after a `gpu_taken` death: the batch is fitted into the room
    /// left (`room_bytes`), as after a device out-of-memory error at that limit, and the cut is
    /// recorded as one for room, apart from the job's own size (`need_bytes` at its values).
    pub(super) fn cut_for_room(
        &mut self,
        settings: &RunSettings,
        memory: fit::Memory,
        room_bytes: u64,
        need_bytes: u64,
    ) -> Decision {
        let (name, as_if) = match memory {
            fit::Memory::Gpu => (fit::ROOM, Cause::DeviceOom),
            fit::Memory::Host => (fit::HOST_ROOM, Cause::OomKilled),
        };
        let room_limit = Some((room_bytes, name));
        match self.evidence.last_mut() {
            Some(Some(evidence)) => evidence.limit = room_limit,
            Some(slot) => {
                *slot = Some(fit::Evidence {
                    memory,
                    failed: true,
                    bytes: need_bytes,
                    limit: room_limit,
                    fragmented: None,
                    fixed_bytes: None,
                })
            }
            None => {}
        }
        let mut history = self.history.clone();
        if let Some(last) = history.last_mut() {
            last.0 = as_if;
        }
        let decision = self.decide_over(settings, &history);
        if let (Decision::Relaunch(_), None) = (&decision, &self.room_cut) {
            self.room_cut = Some(RoomCut {
                own: self.knobs.at(&self.values).json(),
                own_need_gpu_bytes: (memory == fit::Memory::Gpu).then_some(need_bytes),
                room_bytes,
            });
        }
        decision
    }

    /// Takes in the knobs found inside the job ([`knobs::inside::adopt`]): `set` is the run's
    /// knobs with new ones after them (and a batch's rule given its new partner). Every attempt
    /// so far ran with the new knobs at their originals (the job's own values), and the earlier
    /// runs' attempts are read again by the new knobs' names.
    pub(super) fn adopt(&mut self, set: KnobSet, settings: &RunSettings, job: &JobRun) {
        let added = set.originals().split_off(self.original.len());
        for values in [&mut self.original, &mut self.values]
            .into_iter()
            .chain(self.history.iter_mut().map(|(_, values)| values))
        {
            values.extend(added.iter().cloned());
        }
        self.rules = set.rules();
        if !settings.job.fresh {
            self.past = earlier_runs(job, &set);
            self.past_steps = earlier_steps(job, &set);
        }
        self.knobs = set;
    }

    /// The number of the attempt about to run (1 for the first).
    pub(super) fn next_attempt(&self) -> u32 {
        self.history.len() as u32 + 1
    }

    /// No attempt has ended yet.
    pub(super) fn first(&self) -> bool {
        self.history.is_empty()
    }

    /// Whether the next attempt runs at the values the last one ran at.
    pub(super) fn same_as_previous(&self) -> bool {
        self.history.last().is_some_and(|(_, values)| {
            values.len() == self.values.len()
                && values.iter().zip(&self.values).all(|(a, b)| a.same(b))
        })
    }

    /// How the attempt before the next one ended.
    pub(super) fn previous_cause(&self) -> Option<Cause> {
        self.history.last().map(|(cause, _)| *cause)
    }

    /// Takes in how the last attempt ended: its cause with its values, what its numbers tell
    /// the fit, and the fixed part its samples showed before the first step.
    pub(super) fn learn(
        &mut self,
        settings: &RunSettings,
        cause: Cause,
        end: &AttemptEnd,
        ramp: &AttemptRamp,
    ) {
        self.history.push((cause, self.values.clone()));
        self.evidence
            .push(fit::observe(&observed(settings, cause, end)));
        self.steps.push(
            end.probe
                .as_ref()
                .and_then(|seen| PastSteps::from_probe(seen, None))
                .map(|s| s.peak()),
        );
        self.learn_ramp(ramp, end);
    }

    /// Adds to the last attempt's evidence the fixed part its samples showed before the first
    /// step (the peaks include the cgroup's high-water mark, the limit at a kill).
    fn learn_ramp(&mut self, ramp: &AttemptRamp, end: &AttemptEnd) {
        let Some(Some(evidence)) = self.evidence.last_mut() else {
            return;
        };
        let (series, peak_bytes) = match (evidence.memory, evidence.limit) {
            (fit::Memory::Gpu, _) => (ramp.gpu.clone(), end.peaks.gpu_bytes),
            // A kill at a cgroup's limit, oomguard's own or one further up, read through the
            // attempt cgroup where there is one; without one (`--no-cgroup` under a Slurm job's
            // limit) the tree's own reading is all there is, and it need not have climbed.
            (fit::Memory::Host, Some((_, name))) if name != fit::MAX_RSS => {
                match end.peaks.cgroup_bytes {
                    // The usage reached the limit (the evidence's bytes) after the last tick.
                    Some(peak) => (ramp.cgroup.ended_at(evidence.bytes), Some(peak)),
                    None => (
                        ramp.judged.clone(),
                        end.peaks.pss_bytes.or(end.peaks.rss_bytes),
                    ),
                }
            }
            // A soft bound (`--max-rss`): its own units; the evidence holds the value it saw.
            (fit::Memory::Host, _) => (ramp.judged.clone(), None),
        };
        fit::attach_fixed(evidence, &series, peak_bytes);
    }

    /// The policy's decision after the last attempt.
    pub(super) fn decide(&self, settings: &RunSettings) -> Decision {
        self.decide_over(settings, &self.history)
    }

    /// The policy's decision after `history` (this run's, or a reading of it).
    fn decide_over(&self, settings: &RunSettings, history: &[(Cause, Vec<Value>)]) -> Decision {
        let plan = policy::StepPlan {
            strategy: settings.strategy,
            margin: settings.margin,
            evidence: self.evidence.clone(),
            past: self.past.clone(),
            steps: self.steps.clone(),
            past_steps: self.past_steps.clone(),
            allocator_hint: self.hint_available,
        };
        policy::decide_with(
            history,
            &self.rules,
            &self.original,
            &settings.limits,
            &plan,
        )
    }

    /// Moves to the relaunch decided: its values, what moved, and the hint it gives.
    pub(super) fn advance(&mut self, next: policy::Next) {
        self.values = next.values;
        self.changed = next.changed;
        if let Some(hint) = next.hint {
            self.hint_available = false;
            self.hint_given = true;
            self.hint_pending = Some(hint);
        }
    }
}

/// What the job's memory says attempt 1 needs, starting at `start`: the last run's cut for room
/// (its own values' need, and the room-limited values to fall back on), else the GPU peak of a
/// remembered success at these very values, per card. `None` where nothing says.
fn first_need(job: &JobRun, knobs: &KnobSet, start: &[Value]) -> Option<FirstNeed> {
    let attempts = job.memory().attempts();
    let devices = attempts
        .iter()
        .rev()
        .find(|a| !a.gpu_devices.is_empty())
        .map(|a| a.gpu_devices.clone())
        .unwrap_or_default();
    let at_start = |past: &&crate::remember::jobs::memory::PastAttempt| {
        knobs
            .knobs
            .iter()
            .zip(start)
            .all(|(k, v)| past.value(&k.name).is_some_and(|p| p.same(v)))
    };
    // What a success measured at these values, per card.
    let measured = attempts
        .iter()
        .rev()
        .filter(|a| a.cause() == Some(Cause::Ok))
        .find(at_start)
        .and_then(|success| {
            let cards = success.gpu_devices.len().max(1) as u64;
            let devices = match success.gpu_devices.is_empty() {
                true => devices.clone(),
                false => success.gpu_devices.clone(),
            };
            Some((success.peaks.peak_gpu_bytes? / cards, devices))
        });
    let fallback = job
        .memory()
        .last_success()
        .and_then(|last| last.room_fallback());
    if let (Some(limited), Some(start)) = (fallback, job.room_start()) {
        let (need_bytes, devices) = match measured {
            Some(measured) => measured,
            None => (limited.cut.own_need_gpu_bytes?, devices),
        };
        return Some(FirstNeed {
            need_bytes,
            devices,
            room_limited: Some((start.values.clone(), limited.cut)),
        });
    }
    let (need_bytes, devices) = measured?;
    Some(FirstNeed {
        need_bytes,
        devices,
        room_limited: None,
    })
}

/// What the job's earlier runs tell the fit: each remembered attempt's knob values (by this
/// run's knob names; a knob it did not have is unset) and what its peaks say. Their output is
/// gone, so only peaks count: a success's measured peak, a kill's cgroup peak.
fn earlier_runs(job: &JobRun, knobs: &KnobSet) -> Vec<(Vec<Value>, fit::Evidence)> {
    job.memory()
        .attempts()
        .iter()
        .filter_map(|past| {
            let peaks = &past.peaks;
            let evidence = fit::observe(&fit::Observed {
                cause: past.cause(),
                peak_gpu_bytes: peaks.peak_gpu_bytes,
                peak_cgroup_bytes: peaks.peak_cgroup_bytes,
                peak_host_bytes: peaks.peak_pss_bytes.or(peaks.peak_rss_bytes),
                ..fit::Observed::default()
            })?;
            Some((values_of(past, knobs), evidence))
        })
        .collect()
}

/// The memory of the completed steps of the job's earlier runs' attempts (the probe's), with
/// their knob values by this run's knob names.
fn earlier_steps(job: &JobRun, knobs: &KnobSet) -> Vec<(Vec<Value>, fit::StepsPeak)> {
    job.memory()
        .attempts()
        .iter()
        .filter_map(|past| Some((values_of(past, knobs), past.steps?.peak())))
        .collect()
}

/// A remembered attempt's knob values by this run's knob names (a knob it did not have is
/// unset).
fn values_of(past: &PastAttempt, knobs: &KnobSet) -> Vec<Value> {
    knobs
        .knobs
        .iter()
        .map(|k| past.value(&k.name).unwrap_or(Value::Unset))
        .collect()
}

/// The numbers of an attempt the fit reads.
fn observed<'a>(settings: &RunSettings, cause: Cause, end: &'a AttemptEnd) -> fit::Observed<'a> {
    // `--memory-max`, else the limit that killed the attempt further up (a Slurm job's, a
    // unit's: the kernel's counter there moved), also with `--no-cgroup`.
    let chain = end.kernel.cgroup_chain_kill.as_ref();
    let own_limit_bytes = super::own_limit_bytes(settings);
    let chain_limit_bytes = chain.and_then(|kill| kill.limit.as_ref().map(|(_, bytes)| *bytes));
    let cgroup_limit_bytes = own_limit_bytes.or(chain_limit_bytes);
    // Named as the user knows it where it is not oomguard's own (`Slurm job 14's memory limit`),
    // with or without an attempt cgroup of oomguard's inside it.
    let cgroup_limit_name = match own_limit_bytes {
        Some(_) => None,
        None => chain.and_then(|kill| kill.limit_name()),
    };
    fit::Observed {
        cause: Some(cause),
        tail: &end.tail,
        peak_gpu_bytes: end.peaks.gpu_bytes,
        peak_cgroup_bytes: end.peaks.cgroup_bytes,
        peak_host_bytes: end.peaks.pss_bytes.or(end.peaks.rss_bytes),
        cgroup_limit_bytes,
        cgroup_limit_name,
        max_gpu_bytes: settings.bounds.max_gpu_bytes,
        memory_stop: end
            .memory_stop
            .as_ref()
            .map(|c| (c.bound, c.value_bytes, c.limit_bytes)),
        probe_oom: end.probe.as_ref().and_then(|p| p.oom),
        probe_retries_rising: end
            .probe
            .as_ref()
            .and_then(|p| Some((p.retries_rising?, p.cuda_alloc_retries.unwrap_or(0)))),
    }
}

/// The user set PyTorch's allocator configuration, in oomguard's environment or as a knob:
/// the fragmentation hint would override it, so it is not given.
fn allocator_conf_set(knobs: &KnobSet) -> bool {
    const NAMES: [&str; 3] = [
        policy::ALLOCATOR_HINT_VAR,
        "PYTORCH_HIP_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
    ];
    NAMES.iter().any(|name| std::env::var_os(name).is_some())
        || knobs
            .knobs
            .iter()
            .any(|k| matches!(&k.place, knobs::Place::Env(name) if NAMES.contains(&name.as_str())))
}

#[cfg(test)]
mod tests {
    //! The ladder's bookkeeping between attempts, with attempts that never ran: each test hands
    //! the ladder the end an attempt would have had (its exit, its output's tail) as the
    //! supervisor reports it, and reads what the ladder keeps and asks for next.

    use std::collections::HashSet;
    use std::time::{Duration, SystemTime};

    use clap::Parser;

    use super::*;
    use crate::decide::policy::{Hint, Next};
    use crate::front::cli::{Cli, Command};
    use crate::judge::classify::KernelEvidence;
    use crate::judge::outcome::Ending;
    use crate::judge::outcome::Outcome;
    use crate::observe::sampler::Peaks;

    const CUDA_OOM: &str =
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";

    /// The settings of `oomguard run FLAGS -- python3 train.py --batch_size 8 --grad_accum 1`.
    fn settings(flags: &[&str]) -> RunSettings {
        let mut argv = vec!["oomguard", "run"];
        argv.extend(flags);
        argv.extend([
            "--",
            "python3",
            "train.py",
            "--batch_size",
            "8",
            "--grad_accum",
            "1",
        ]);
        let Command::Run(args) = Cli::try_parse_from(argv).expect("valid flags").command else {
            unreachable!("a run command line")
        };
        args.validate().expect("valid settings")
    }

    /// How a supervised attempt would have ended: `ending`, with `tail` as its output.
    fn end(ending: Ending, tail: &str) -> AttemptEnd {
        AttemptEnd {
            ending,
            user_stop: None,
            memory_stop: None,
            tail: tail.to_string(),
            kernel: KernelEvidence::default(),
            started_at: SystemTime::now(),
            duration: Duration::from_secs(3),
            peaks: Peaks::default(),
            pids: HashSet::new(),
            sigkilled_descendant: None,
            quiet_stop: None,
            writing_at_stop: HashSet::new(),
            stop_began: None,
            gpu_at_start: None,
            gpu_at_end: None,
            host_at_start: None,
            host_at_end: None,
            probe: None,
        }
    }

    fn ints(knobs: &KnobSet, values: &[Value]) -> (Option<u64>, Option<u64>) {
        (knobs.batch_of(values), knobs.accum_of(values))
    }

    /// Learns how an attempt ended and asks for the relaunch the policy decides.
    fn relaunch_after(
        ladder: &mut Ladder,
        settings: &RunSettings,
        cause: Cause,
        e: &AttemptEnd,
    ) -> Next {
        ladder.learn(settings, cause, e, &AttemptRamp::default());
        match ladder.decide(settings) {
            Decision::Relaunch(next) => next,
            Decision::Stop { outcome, reason } => panic!("stopped: {outcome:?} {reason:?}"),
        }
    }

    #[test]
    fn a_device_oom_halves_the_batch_keeps_the_effective_batch_and_counts_the_attempt() {
        let s = settings(&["--strategy", "halve"]);
        let knobs = &s.knobs;
        let mut ladder = Ladder::new(&s, None, Vec::new());
        assert_eq!((ladder.next_attempt(), ladder.first()), (1, true));
        assert_eq!(ladder.previous_cause(), None);

        let oom = end(Ending::Exited(1), CUDA_OOM);
        let next = relaunch_after(&mut ladder, &s, Cause::DeviceOom, &oom);
        assert_eq!(ints(knobs, &next.values), (Some(4), Some(2)));
        let moved = [knobs.batch().unwrap(), knobs.accum().unwrap()];
        assert_eq!(next.changed, moved);
        // Until the relaunch is taken, the ladder still holds what attempt 1 ran with.
        assert_eq!(ints(knobs, &ladder.values), (Some(8), Some(1)));
        assert_eq!((ladder.next_attempt(), ladder.first()), (2, false));
        assert_eq!(ladder.previous_cause(), Some(Cause::DeviceOom));

        ladder.advance(next);
        assert_eq!(ints(knobs, &ladder.values), (Some(4), Some(2)));
        assert_eq!(ladder.changed, moved);
        // The command's values stay the reference the effective batch is kept against.
        assert_eq!(ints(knobs, &ladder.original), (Some(8), Some(1)));

        let next = relaunch_after(&mut ladder, &s, Cause::DeviceOom, &oom);
        assert_eq!(ints(knobs, &next.values), (Some(2), Some(4)));
        assert_eq!(ladder.next_attempt(), 3);
    }

    #[test]
    fn a_gpu_taken_death_keeps_the_values_and_a_cut_for_room_is_kept_apart() {
        let s = settings(&["--strategy", "halve"]);
        let knobs = &s.knobs;
        let mut ladder = Ladder::new(&s, None, Vec::new());
        let taken = end(
            Ending::Exited(1),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 80.00 GiB of which 19.50 GiB is free. Process 999999 has 40.00 GiB memory in use. Including non-PyTorch memory, this process has 20.00 GiB memory in use.\n",
        );
        let next = relaunch_after(&mut ladder, &s, Cause::GpuTaken, &taken);
        assert_eq!(
            ints(knobs, &next.values),
            (Some(8), Some(1)),
            "the same values"
        );
        assert!(next.changed.is_empty());
        // The wait ran out with 39.5 GiB left: cut, and recorded as a cut for room.
        let room = 79 * (1 << 30) / 2;
        let Decision::Relaunch(cut) = ladder.cut_for_room(&s, fit::Memory::Gpu, room, 52 << 30)
        else {
            panic!("a cut")
        };
        assert_eq!(ints(knobs, &cut.values), (Some(4), Some(2)));
        let kept = ladder
            .room_cut
            .clone()
            .expect("the cut is recorded as one for room");
        assert_eq!(
            kept.own.0,
            knobs.at(&ladder.values).json().0,
            "the job's own size"
        );
        assert_eq!(
            (kept.own_need_gpu_bytes, kept.room_bytes),
            (Some(52 << 30), room)
        );
        // The history keeps what happened; the evidence now names the room as its limit.
        assert_eq!(ladder.previous_cause(), Some(Cause::GpuTaken));
        assert_eq!(
            ladder
                .evidence
                .last()
                .cloned()
                .flatten()
                .and_then(|e| e.limit),
            Some((room, fit::ROOM))
        );
        // A second cut in the run keeps the first one's own size.
        ladder.advance(cut);
        ladder.learn(&s, Cause::GpuTaken, &taken, &AttemptRamp::default());
        let _ = ladder.cut_for_room(&s, fit::Memory::Gpu, room / 2, 52 << 30);
        assert_eq!(ladder.room_cut.as_ref().unwrap().own, kept.own);
    }

    #[test]
    fn attempt_1_starts_room_limited_only_when_told_and_measures_the_need_at_its_values() {
        let s = settings(&[]);
        let knobs = &s.knobs;
        let mut ladder = Ladder::new(&s, None, Vec::new());
        assert_eq!(ladder.first_need(), None);
        assert_eq!(ladder.start_room_limited(), None, "nothing remembered");
        let mut limited = knobs.originals();
        limited[knobs.batch().unwrap()] = Value::Int(4);
        limited[knobs.accum().unwrap()] = Value::Int(2);
        let cut = RoomCut {
            own: knobs.at(&ladder.values).json(),
            own_need_gpu_bytes: Some(52 << 30),
            room_bytes: 39 << 30,
        };
        ladder.first = Some(FirstNeed {
            need_bytes: 52 << 30,
            devices: vec![1],
            room_limited: Some((limited, cut.clone())),
        });
        assert_eq!(ladder.first_need(), Some((52 << 30, true)));
        assert_eq!(ladder.first_devices(), [1]);
        let line = ladder.start_room_limited().unwrap();
        assert!(line.contains("batch 4, accum 2"), "{line}");
        assert_eq!(ints(knobs, &ladder.values), (Some(4), Some(2)));
        assert_eq!(
            ladder.room_cut,
            Some(cut),
            "a success now is remembered as room-limited"
        );

        // What a success measured at these values is the need; a failure's bound is not.
        let mut ok = end(Ending::Exited(0), "done\n");
        ok.peaks.gpu_bytes = Some(30 << 30);
        ladder.learn(&s, Cause::Ok, &ok, &AttemptRamp::default());
        assert_eq!(ladder.measured_gpu_need(), Some(30 << 30));
        ladder.values[knobs.batch().unwrap()] = Value::Int(2);
        assert_eq!(ladder.measured_gpu_need(), None, "another batch");
    }

    #[test]
    fn a_success_stops_the_run_as_succeeded() {
        let s = settings(&[]);
        let mut ladder = Ladder::new(&s, None, Vec::new());
        let ok = end(Ending::Exited(0), "done\n");
        ladder.learn(&s, Cause::Ok, &ok, &AttemptRamp::default());
        assert!(matches!(
            ladder.decide(&s),
            Decision::Stop {
                outcome: Outcome::Succeeded,
                ..
            }
        ));
    }

    #[test]
    fn a_run_started_from_the_jobs_memory_keeps_the_commands_values_as_its_reference() {
        let s = settings(&["--strategy", "halve"]);
        let knobs = &s.knobs;
        let mut remembered = knobs.originals();
        remembered[knobs.batch().unwrap()] = Value::Int(4);
        remembered[knobs.accum().unwrap()] = Value::Int(2);
        let mut ladder = Ladder::new(&s, Some(remembered), Vec::new());
        assert_eq!(ints(knobs, &ladder.values), (Some(4), Some(2)));
        assert_eq!(ints(knobs, &ladder.original), (Some(8), Some(1)));
        let oom = end(Ending::Exited(1), CUDA_OOM);
        let next = relaunch_after(&mut ladder, &s, Cause::DeviceOom, &oom);
        // Down from where it started, the product still the command's 8 × 1.
        assert_eq!(ints(knobs, &next.values), (Some(2), Some(4)));
    }

    /// The probe's figures reach the decision: this run's completed steps are kept in history
    /// order, an earlier run's steps at two batches fix the fit's line, and allocation retries
    /// climbing over the steps name fragmentation where the message shows no figures.
    #[test]
    fn the_probes_steps_and_retries_reach_the_decision() {
        let s = settings(&["--strategy", "fit"]);
        // A 24 GiB card; the job at 8 just over what it has of it (no scale).
        let oom = |steps_gib: Option<u64>, retries_rising: Option<u32>| {
            let mut e = end(
                Ending::Exited(1),
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 24.00 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 22.00 GiB memory in use.\n",
            );
            e.probe = Some(crate::probe::ProbeSummary {
                steps: steps_gib.map(|_| 40),
                cuda_peak_reserved_bytes: steps_gib.map(|g| g << 30),
                cuda_alloc_retries: Some(12),
                retries_rising,
                ..Default::default()
            });
            e
        };
        let peak = |gib: u64| fit::StepsPeak {
            gpu_bytes: Some(gib << 30),
        };
        let at = |batch: u64| vec![Value::Int(batch), Value::Int(8 / batch)];
        let mut ladder = Ladder::new(&s, None, Vec::new());
        // An earlier run's steps: 7 GiB at 2, 13 GiB at 4 (3 GiB a sample, 1 GiB fixed, so 25
        // GiB at 8: the death in the first step is explained); the card as the job would have
        // it alone is 23 GiB, (20.7 − 1) / 3 → 6, and 4 the divisor of 8 below it.
        ladder.past_steps = vec![(at(2), peak(7)), (at(4), peak(13))];
        let next = relaunch_after(&mut ladder, &s, Cause::DeviceOom, &oom(None, None));
        assert_eq!(ladder.steps, [None], "no step seen");
        let reason = next.reason.unwrap_or_default();
        assert!(
            reason.starts_with("GPU 23.0 GiB, completed steps took 7.0 GiB at 2 and 13.0 GiB at 4, per sample 3.0 GiB, fixed 1.0 GiB"),
            "{reason}"
        );
        assert_eq!(ints(&s.knobs, &next.values), (Some(4), Some(2)), "{reason}");

        // This run's own steps are kept in history order; with them, the same death at 8 after
        // 20 GiB of steps is one the line says fits (something beyond the steps).
        let mut ladder = Ladder::new(&s, None, Vec::new());
        let next = relaunch_after(&mut ladder, &s, Cause::DeviceOom, &oom(Some(20), Some(3)));
        assert_eq!(ladder.steps, [Some(peak(20))], "this run's steps, kept");
        assert_eq!(next.hint, Some(Hint::AllocatorFragmentation));
        let reason = next.reason.unwrap_or_default();
        assert!(
            reason.contains(
                "retried allocations more at each of its last 3 steps seen (12 retries in all)"
            ),
            "{reason}"
        );
    }

    #[test]
    fn a_hint_is_given_once_recorded_on_the_next_attempt_and_kept_for_every_later_one() {
        let s = settings(&[]);
        let mut ladder = Ladder::new(&s, None, Vec::new());
        let hinted = Next {
            values: ladder.values.clone(),
            changed: Vec::new(),
            effective_note: None,
            delay: Duration::ZERO,
            reason: None,
            hint: Some(Hint::AllocatorFragmentation),
        };
        ladder.advance(hinted);
        assert!(ladder.hint_given && !ladder.hint_available);
        assert_eq!(
            ladder.hint_pending.take(),
            Some(Hint::AllocatorFragmentation)
        );
        let plain = Next {
            values: ladder.values.clone(),
            changed: Vec::new(),
            effective_note: None,
            delay: Duration::ZERO,
            reason: None,
            hint: None,
        };
        ladder.advance(plain);
        // The variable stays in every later attempt's environment; it is recorded only once.
        assert!(ladder.hint_given);
        assert_eq!(ladder.hint_pending, None);
    }
}
