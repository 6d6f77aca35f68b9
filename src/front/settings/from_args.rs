//! From `oomguard run`'s flags ([`RunArgs`], clap's low-level view) to the validated
//! [`RunSettings`] of a run: checks the flags against the command and each other, reads the job
//! file's workdir, user and knobs, and names every problem in one line ([`UsageError`], exit 2)
//! before anything is created or started. Parsing the flags themselves (their syntax, units and
//! bounds) is clap's and [`crate::front::cli`]'s; what the settings mean to the run is the run's.

use std::path::Path;
use std::time::Duration;

use crate::front::cli::RunArgs;
use crate::front::jobfile;
use crate::front::runas::JobContext;
use crate::front::settings::job_knobs;
use crate::front::settings::{CgroupPlan, RunSettings};
use crate::judge::outcome::Cause;
use crate::knobs::{resolve, KnobSet};
use crate::observe::cgroup;
use crate::observe::watch::Bounds;
use crate::remember::jobs::name::JobSettings;

/// The shortest sampling interval: below it, sampling a large tree costs more than it tells.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// The smallest `--memory-max`. Measured as root on cgroup v1 (kernel 6.x): below about 16 KiB
/// the forked child dies before exec (the kernel names the victim `oomguard`); `true` and
/// `sh -c :` need about 256 KiB; `python3 -c pass` needs 6.5 to 7 MiB. Every smaller limit kills
/// every attempt before the job does anything, blamed on the job; 32 MiB leaves a margin over an
/// empty Python for page cache charged on a cold start.
pub const MIN_MEMORY_MAX_BYTES: u64 = 32 << 20;

/// Why the flags do not make a run.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("no command given: put the training command after `--`, e.g. oomguard run -- python train.py --batch_size 8 (or command = [...] in the --config file)")]
    NoCommand,
    #[error("unknown option {0}: see `oomguard run --help`; the training command goes after `--`")]
    UnknownOption(String),
    #[error("{0}")]
    Knobs(#[from] resolve::KnobError),
    #[error("{0}")]
    Config(#[from] jobfile::JobFileError),
    /// The job file's `workdir`, `user` or permissions (see [`crate::front::runas`]).
    #[error("{0}")]
    JobFile(String),
    #[error("--dry-run={0}: not a cause oomguard relaunches after; use one of {list}", list = relaunched_causes())]
    DryRunCause(String),
    #[error("cannot read the working directory: {0}")]
    Cwd(std::io::Error),
    #[error("--interval {0:?} is too short: use 50ms or more")]
    IntervalTooShort(Duration),
    #[error("--backoff-max {max:?} is shorter than --backoff {backoff:?}: raise --backoff-max")]
    BackoffMax { backoff: Duration, max: Duration },
    /// `--name` is not a file name, or `--state-dir` not a path.
    #[error("{0}")]
    Job(String),
    #[error("{0}")]
    Resume(#[from] crate::decide::resume::ResumeError),
    #[error("resuming from a checkpoint needs {0} too")]
    ResumeHalf(&'static str),
    /// A job file its user can write raises `log_max` for a log kept in oomguard's own run
    /// directory: that disk is not the user's to fill.
    #[error("[run] log_max = {}: a job file its user can write may not raise log_max above the default {} while the logs go to oomguard's own run directory: give the job a run_dir of its own, or set --log-max on the command line", crate::observe::units::human_bytes(*.0), crate::observe::units::human_bytes(crate::output::attempt_log::DEFAULT_MAX_BYTES))]
    LogMax(u64),
    /// An `--on-exit` / `--on-relaunch` command that does not split or whose program is
    /// missing.
    #[error("{0}")]
    Hook(String),
    #[error("--memory-max {} is too small for any job to start (an empty python3 needs about 7 MiB): use at least 32M", crate::observe::units::human_bytes(*.0))]
    MemoryMaxTooSmall(u64),
    /// `--memory-max` around `srun`: the attempt cgroup would hold srun alone, its tasks run in
    /// Slurm's step cgroup.
    #[error("--memory-max around srun would cap srun alone (its tasks run in Slurm's cgroup): ask Slurm for the limit (sbatch --mem / srun --mem), or run oomguard inside the step (srun oomguard run --memory-max SIZE -- ...)")]
    MemoryMaxAroundSrun,
    /// `oomguard man COMMAND` names no command with a page.
    #[error("{0}")]
    ManPage(String),
    /// `--metrics-addr` that does not parse or cannot be bound, `--metrics-textfile` in a
    /// directory that does not exist.
    #[error("{0}")]
    Metrics(String),
}

/// The causes `--dry-run=CAUSE` and `on = [...]` accept.
fn relaunched_causes() -> String {
    crate::knobs::default_causes()
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Splits each hook command and finds its program as the run would (a typo is a usage error
/// before anything starts, not a warning at 3 a.m.).
fn hooks_of(
    on_exit: &[String],
    on_relaunch: &[String],
    timeout: Duration,
    context: &crate::front::runas::JobContext,
) -> Result<crate::tell::hooks::Hooks, UsageError> {
    let path_var = context.path_var();
    let parse = |flag: &str,
                 texts: &[String]|
     -> Result<Vec<crate::tell::hooks::Hook>, UsageError> {
        texts
            .iter()
            .map(|text| {
                let hook = crate::tell::hooks::Hook::parse(flag, text).map_err(UsageError::Hook)?;
                crate::launch::child::resolve_program_for(
                    &hook.argv[0],
                    path_var.as_deref(),
                    context.run_as.as_ref(),
                )
                .map_err(|e| UsageError::Hook(format!("{flag} {text:?}: {e}")))?;
                Ok(hook)
            })
            .collect()
    };
    Ok(crate::tell::hooks::Hooks {
        on_exit: parse("--on-exit", on_exit)?,
        on_relaunch: parse("--on-relaunch", on_relaunch)?,
        timeout,
    })
}

impl RunArgs {
    /// Checks the flags against the command and builds the settings of a run.
    pub fn validate(mut self) -> Result<RunSettings, UsageError> {
        self.check_command()?;
        let dry_run = self.dry_run_cause()?;
        let job_file = match self.job_file.take() {
            Some(file) => Some(file),
            None => self
                .config
                .as_deref()
                .map(|path| jobfile::load(path, &crate::front::cli::run_command()))
                .transpose()?,
        };
        let started_in = std::env::current_dir().map_err(UsageError::Cwd)?;
        // The job file's workdir, env and user; its workdir is where the job runs and relative
        // knob files are found. Relative paths of flags stay relative to where oomguard started.
        let job_context = match (self.config.as_deref(), job_file.as_ref()) {
            (Some(path), Some(file)) => crate::front::runas::JobContext::prepare(path, &file.job)
                .map_err(UsageError::JobFile)?,
            _ => crate::front::runas::JobContext::default(),
        };
        // From here on every file of the job's (knob files first) is touched as its user.
        crate::guard::principal::act_for(job_context.run_as.as_ref());
        // A path the job file chose is the file's writers' to use: as the user where the user
        // could have written it, as root where only root could; one from the command line is
        // the invoker's.
        let users_path = |id: &str| {
            job_context.writers == crate::guard::ownership::Writers::User
                && self.from_job_file.iter().any(|from| from == id)
        };
        let run_dir_is_users = users_path("run_dir");
        if users_path("log_max")
            && !run_dir_is_users
            && self.log_max > crate::output::attempt_log::DEFAULT_MAX_BYTES
        {
            return Err(UsageError::LogMax(self.log_max));
        }
        let state_dir_is_users = users_path("state_dir");
        let textfile_is_users = users_path("metrics_textfile");
        let addr_is_users = users_path("metrics_addr");
        let cwd = job_context
            .workdir
            .clone()
            .unwrap_or_else(|| started_in.clone());
        if job_context.workdir.is_some() {
            self.run_dir = self.run_dir.map(|dir| started_in.join(dir));
            self.state_dir = self.state_dir.map(|dir| started_in.join(dir));
        }
        // A codebase's console script is looked up as the job will find it.
        let path_var = job_context.path_var();
        let knobs = job_knobs::resolve(
            &resolve::Request {
                command: &self.command,
                batch_arg: self.batch_arg.as_deref(),
                accum_arg: self.accum_arg.as_deref(),
                min_batch: self.min_batch,
                cwd: &cwd,
                path_var: path_var.as_deref(),
                finish_left_patches: dry_run.is_none(),
            },
            self.config.as_deref().zip(job_file.as_ref()),
        )?;
        let mut job = self.job_settings(&knobs, &cwd, &job_context)?;
        job.state_dir_is_users = state_dir_is_users;
        let resume = self.resume(&knobs)?;
        let hooks = hooks_of(
            &self.on_exit,
            &self.on_relaunch,
            self.hook_timeout,
            &job_context,
        )?;
        self.check_limits()?;
        let metrics = crate::tell::metrics::MetricsPlan::new(
            self.metrics_addr.as_deref(),
            addr_is_users,
            self.metrics_textfile.as_deref(),
            textfile_is_users,
        )
        .map_err(UsageError::Metrics)?;
        Ok(RunSettings {
            min_batch: self.min_batch,
            interval: self.interval,
            pss_interval: self.pss_interval,
            cgroup: self.cgroup_plan(),
            bounds: Bounds {
                max_rss_bytes: self.max_rss,
                max_gpu_bytes: self.max_gpu,
                min_available: self.min_available,
            },
            gpu_free_timeout: self.gpu_free_timeout,
            gpu_wait: self.gpu_wait,
            gpus: self.gpus,
            trend_window: self.trend_window,
            pty: !self.no_pty,
            probe: !self.no_probe,
            job,
            resume,
            hooks,
            quiet: crate::judge::quiet::Timeouts {
                // `0` turns a watch off: a zero timeout would stop every job at its first tick.
                hang: Some(self.hang_timeout).filter(|d| !d.is_zero()),
                stall: self.stall_timeout.filter(|d| !d.is_zero()),
            },
            command: self.command,
            knobs,
            run_dir: self.run_dir,
            log_max_bytes: self.log_max,
            run_dir_is_users,
            dry_run,
            limits: crate::decide::policy::Limits {
                max_attempts: self.max_attempts,
                retries: self.retries,
                backoff: self.backoff,
                backoff_max: self.backoff_max,
            },
            grace: self.grace,
            strategy: self.strategy,
            margin: self.margin,
            allocator_hint: !self.no_allocator_hint,
            job_context,
            metrics,
        })
    }

    /// A command is given, and it is not an option clap took for one.
    fn check_command(&self) -> Result<(), UsageError> {
        match self.command.first() {
            None => Err(UsageError::NoCommand),
            // clap hands an unknown option before the command over as the command itself.
            Some(first) if first.as_encoded_bytes().starts_with(b"-") => Err(
                UsageError::UnknownOption(first.to_string_lossy().into_owned()),
            ),
            Some(_) => Ok(()),
        }
    }

    /// `--dry-run=CAUSE`: a cause oomguard relaunches after.
    fn dry_run_cause(&self) -> Result<Option<Cause>, UsageError> {
        self.dry_run
            .as_deref()
            .map(|name| {
                Cause::from_name(name)
                    .filter(|c| c.steps_knobs())
                    .ok_or_else(|| UsageError::DryRunCause(name.to_string()))
            })
            .transpose()
    }

    /// Which job the run belongs to, where its memory is kept.
    fn job_settings(
        &mut self,
        knobs: &KnobSet,
        cwd: &Path,
        job_context: &JobContext,
    ) -> Result<JobSettings, UsageError> {
        let mut job = JobSettings::new(
            self.name.take(),
            self.state_dir.take(),
            self.fresh,
            &self.command,
            knobs,
            cwd,
        )
        .map_err(UsageError::Job)?;
        // A name chosen in a job file its user could write is that user's: kept apart from the
        // same name of anyone else's (root's state directory holds every user's jobs), so one
        // user's runs never read or write another's job memory.
        if let (crate::guard::ownership::Writers::User, Some(who)) =
            (job_context.writers, job_context.run_as.as_ref())
        {
            job.legacy_name = legacy_user_prefix(&who.name).map(|p| format!("{p}.{}", job.name));
            job.name = format!("{}.{}", user_prefix(who.uid.as_raw(), &who.name), job.name);
        }
        Ok(job)
    }

    /// `--resume-arg` with `--checkpoint` (both or neither; `--resume-first` needs both).
    fn resume(&self, knobs: &KnobSet) -> Result<Option<crate::decide::resume::Resume>, UsageError> {
        match (self.resume_arg.as_deref(), self.checkpoint.as_deref()) {
            (Some(flag), Some(pattern)) => Ok(Some(crate::decide::resume::Resume::new(
                &self.command,
                flag,
                pattern,
                self.resume_first,
                knobs,
            )?)),
            (None, None) if !self.resume_first => Ok(None),
            (None, _) => Err(UsageError::ResumeHalf("--resume-arg FLAG (the job's flag that takes the checkpoint's path, e.g. --resume-arg --resume)")),
            (Some(_), None) => Err(UsageError::ResumeHalf("--checkpoint GLOB (the checkpoint files, e.g. --checkpoint 'ckpt/*.pt')")),
        }
    }

    /// The limits and timings that cannot work: a `--memory-max` no job starts under or that
    /// would cap srun alone, a backoff ceiling under the backoff, an interval too short.
    fn check_limits(&self) -> Result<(), UsageError> {
        if let Some(bytes) = self.memory_max.filter(|b| *b < MIN_MEMORY_MAX_BYTES) {
            return Err(UsageError::MemoryMaxTooSmall(bytes));
        }
        // srun behind `env`, `nohup` or in a `bash -c` script too: the cgroup would hold the
        // shell and srun alone all the same.
        if self.memory_max.is_some() && crate::observe::slurm::shell::runs_srun(&self.command) {
            return Err(UsageError::MemoryMaxAroundSrun);
        }
        if self.backoff_max < self.backoff {
            return Err(UsageError::BackoffMax {
                backoff: self.backoff,
                max: self.backoff_max,
            });
        }
        if self.interval < MIN_INTERVAL {
            return Err(UsageError::IntervalTooShort(self.interval));
        }
        Ok(())
    }

    /// Where the attempts' memory cgroups stand: off, required for `--memory-max`, else used
    /// where they can be made.
    fn cgroup_plan(&self) -> CgroupPlan {
        if self.no_cgroup {
            CgroupPlan::Off
        } else if self.memory_max.is_some() {
            CgroupPlan::Required(cgroup::Limits {
                memory_max_bytes: self.memory_max,
                swap_max_bytes: self.swap_max,
            })
        } else {
            CgroupPlan::IfAvailable
        }
    }
}

/// The prefix of a user's job names in a state directory many users share: `<uid>-<name>`, the
/// uid first. The uid is what tells users apart (the kernel's own name for them, and what owns
/// their files); the name after it is only for people, cut and cleaned by [`file_safe`]
/// (`.` as `_`, so the first `.` after it ends the user's part). Two users never share a prefix:
/// their uids differ, and the uid ends at the first `-`. (A name alone, cleaned, was not enough:
/// `og.t4` and `og_t4` both became `og_t4`, as did two long names alike in their first 40
/// characters; an escaped full name could outgrow a file name.)
///
/// [`file_safe`]: crate::guard::fsutil::file_safe
pub fn user_prefix(uid: u32, name: &str) -> String {
    format!(
        "{uid}-{}",
        crate::guard::fsutil::file_safe(name, &['-', '_'])
    )
}

/// The prefix builds before [`user_prefix`] gave a user's job names (the cleaned name alone),
/// where it can only have been this user's: a name shorter than 40 characters of ASCII letters,
/// digits and `-` is its own cleaning and no other name cleans to it. `None` otherwise (a `.`,
/// a `_` or anything cleaned, or a name cut at 40 characters could be another user's): such a
/// user's old job memory is not read.
pub fn legacy_user_prefix(name: &str) -> Option<String> {
    let own = !name.is_empty()
        && name.len() < 40
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    own.then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::cli::tests::{parse, run_args};
    use crate::front::cli::{Cli, Command};
    use crate::observe::watch::Available;
    use clap::Parser;
    use std::ffi::OsString;
    use std::path::PathBuf;

    #[test]
    fn a_users_prefix_is_theirs_alone_and_the_old_one_is_read_only_where_it_was() {
        // (uid, name, prefix, the prefix older builds gave where only this user had it)
        let long = "a".repeat(45);
        let table: [(u32, &str, String, Option<&str>); 6] = [
            (1001, "alice", "1001-alice".into(), Some("alice")),
            (1002, "og.t4", "1002-og_t4".into(), None),
            (1003, "og_t4", "1003-og_t4".into(), None),
            (
                1004,
                "bob-smith",
                "1004-bob-smith".into(),
                Some("bob-smith"),
            ),
            (1005, &long, format!("1005-{}", "a".repeat(40)), None),
            (1006, "jürgen", "1006-j_rgen".into(), None),
        ];
        for (uid, name, prefix, legacy) in table {
            assert_eq!(user_prefix(uid, name), prefix, "{name}");
            assert_eq!(legacy_user_prefix(name).as_deref(), legacy, "{name}");
        }
    }

    #[test]
    fn defaults() {
        let run = run_args("run -- python t.py --batch_size 8");
        assert_eq!(run.command, ["python", "t.py", "--batch_size", "8"]);
        assert_eq!((run.min_batch, run.max_attempts, run.retries), (1, 10, 0));
        assert_eq!(run.backoff, Duration::from_secs(10));
        assert_eq!(run.backoff_max, Duration::from_secs(300));
        assert_eq!(run.grace, Duration::from_secs(30));
        assert_eq!(run.interval, Duration::from_secs(1));
        assert_eq!(run.gpu_free_timeout, Duration::from_secs(60));
        assert_eq!(
            (
                run.memory_max,
                run.swap_max,
                run.max_rss,
                run.max_gpu,
                run.min_available
            ),
            (None, None, None, None, None)
        );
        assert!(!run.no_cgroup);
        assert!(!run.no_pty);
        let settings = run.validate().unwrap();
        assert!(settings.pty);
        assert_eq!(
            settings.quiet,
            crate::judge::quiet::Timeouts {
                hang: Some(Duration::from_secs(60)),
                stall: None
            }
        );
        assert_eq!(settings.cgroup, CgroupPlan::IfAvailable);
        assert_eq!(settings.bounds, Bounds::default());
    }

    #[test]
    fn memory_flags_parse() {
        let run = run_args(
            "run --interval 200ms --memory-max 12G --swap-max 1G --max-rss 10GiB --max-gpu 70G \
             --min-available 10% --gpu-free-timeout 5s -- python t.py",
        );
        assert_eq!(run.interval, Duration::from_millis(200));
        assert_eq!(run.memory_max, Some(12 << 30));
        assert_eq!(run.swap_max, Some(1 << 30));
        assert_eq!(run.max_rss, Some(10 << 30));
        assert_eq!(run.max_gpu, Some(70 << 30));
        assert_eq!(run.min_available, Some(Available::Percent(10.0)));
        let settings = run.validate().unwrap();
        assert_eq!(
            settings.cgroup,
            CgroupPlan::Required(cgroup::Limits {
                memory_max_bytes: Some(12 << 30),
                swap_max_bytes: Some(1 << 30)
            })
        );
        assert_eq!(settings.bounds.max_rss_bytes, Some(10 << 30));
        assert!(
            !run_args("run --no-pty -- python t.py")
                .validate()
                .unwrap()
                .pty
        );
        for (line, refused) in [
            ("run --memory-max 1G -- srun python t.py", true),
            (
                "run --memory-max 1G -- /usr/bin/srun -n 2 python t.py",
                true,
            ),
            ("run --max-rss 1G -- srun python t.py", false),
            ("run --memory-max 1G -- python t.py srun", false),
        ] {
            let got = run_args(line).validate();
            assert_eq!(
                matches!(got, Err(UsageError::MemoryMaxAroundSrun)),
                refused,
                "{line}"
            );
        }
        // A shell's script, one word the test's whitespace split would cut.
        for (command, refused) in [
            (["bash", "-c", "srun python t.py"], true),
            (["sh", "-c", "cd /x && exec srun python t.py"], true),
            (["bash", "-c", "python t.py srun"], false),
        ] {
            let mut run = run_args("run --memory-max 1G -- x");
            run.command = command.iter().map(OsString::from).collect();
            let got = run.validate();
            assert_eq!(
                matches!(got, Err(UsageError::MemoryMaxAroundSrun)),
                refused,
                "{command:?}"
            );
        }
        let run = run_args("run --min-available 2G --no-cgroup -- python t.py");
        assert_eq!(run.min_available, Some(Available::Bytes(2 << 30)));
        assert_eq!(run.validate().unwrap().cgroup, CgroupPlan::Off);
    }

    #[test]
    fn quiet_timeouts_parse_and_zero_turns_them_off() {
        // (flags, --hang-timeout, --stall-timeout)
        let table: &[(&str, Option<u64>, Option<u64>)] = &[
            ("", Some(60_000), None),
            ("--hang-timeout 1s", Some(1_000), None),
            ("--hang-timeout 0", None, None),
            ("--hang-timeout 0s", None, None),
            ("--stall-timeout 5m", Some(60_000), Some(300_000)),
            ("--hang-timeout 0 --stall-timeout 250ms", None, Some(250)),
            ("--stall-timeout 0", Some(60_000), None),
        ];
        for &(flags, hang_ms, stall_ms) in table {
            let settings = run_args(&format!("run {flags} -- python t.py"))
                .validate()
                .unwrap();
            let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
            assert_eq!(ms(settings.quiet.hang), hang_ms, "{flags}");
            assert_eq!(ms(settings.quiet.stall), stall_ms, "{flags}");
        }
        for bad in [
            "--hang-timeout 60",
            "--hang-timeout soon",
            "--stall-timeout 5",
            "--stall-timeout 8d",
        ] {
            assert!(
                parse(&format!("run {bad} -- python t.py")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn validation_names_the_problem() {
        let table = [
            ("run", "no command given"),
            ("run -- python t.py --batch_size x", "not a whole number"),
            (
                "run --batch-arg --bsz -- python t.py --batch_size 8",
                "--bsz is not in the command",
            ),
            (
                "run --min-batch 16 -- python t.py --batch_size 8",
                "--min-batch 16 is larger",
            ),
            ("run --backoff 10m -- python t.py", "--backoff-max"),
            (
                "run --frobnicate -- python t.py",
                "unknown option --frobnicate",
            ),
            (
                "run -- python t.py --batch_size 4294967296 --grad_accum 4294967296",
                "--batch_size 4294967296 × --grad_accum 4294967296 (the effective batch) does not fit in 64 bits",
            ),
            (
                "run -- python show.py --batch_size 64 -- worker.py --batch_size 8",
                "--batch-arg --batch_size@1 or --batch-arg --batch_size@2",
            ),
            (
                "run --accum-arg --batch_size -- python t.py --batch_size 8",
                "--batch_size cannot be both the batch and the accumulation flag",
            ),
            ("run --memory-max 0 -- python t.py", "--memory-max 0 B is too small"),
            ("run --memory-max 100 -- python t.py", "use at least 32M"),
            ("run --memory-max 1k -- python t.py", "use at least 32M"),
            ("run --memory-max 31M -- python t.py", "use at least 32M"),
            (
                "run --checkpoint ckpt/*.pt -- python t.py",
                "needs --resume-arg FLAG",
            ),
            (
                "run --resume-first --checkpoint ckpt/*.pt -- python t.py",
                "needs --resume-arg FLAG",
            ),
            ("run --resume-arg --resume -- python t.py", "needs --checkpoint GLOB"),
            ("run --resume-first -- python t.py", "needs --resume-arg FLAG"),
        ];
        for (args, want) in table {
            let err = run_args(args).validate().unwrap_err().to_string();
            assert!(err.contains(want), "{args}: {err}");
        }
        assert!(run_args("run -- python t.py --batch_size 8")
            .validate()
            .is_ok());
        for ok in [
            "run --memory-max 32M -- python t.py",
            "run -- python t.py --batch_size 4294967296 --grad_accum 4294967295",
        ] {
            assert!(run_args(ok).validate().is_ok(), "{ok}");
        }
    }

    #[test]
    fn job_flags_parse_and_a_name_must_be_a_file_name() {
        let settings = run_args("run -- python t.py --batch_size 8")
            .validate()
            .unwrap();
        assert!(!settings.job.fresh);
        assert!(settings.job.name.starts_with("t-"), "{}", settings.job.name);
        assert_eq!(
            settings.job.command,
            ["python", "t.py", "--batch_size", "<batch>"]
        );
        let settings = run_args("run --name nightly --state-dir /tmp/s --fresh -- python t.py")
            .validate()
            .unwrap();
        assert_eq!(settings.job.name, "nightly");
        assert_eq!(settings.job.state_dir, Some(PathBuf::from("/tmp/s")));
        assert!(settings.job.fresh);
        for bad in ["a/b", ".x", "x%y"] {
            let err = run_args(&format!("run --name {bad} -- python t.py"))
                .validate()
                .unwrap_err();
            assert!(matches!(err, UsageError::Job(_)), "{bad}: {err}");
            assert!(err.to_string().starts_with("--name "), "{bad}: {err}");
        }
    }

    #[test]
    fn strategy_and_margin() {
        use crate::decide::policy::Strategy;
        let run = run_args("run -- python t.py");
        assert_eq!((run.strategy, run.margin), (Strategy::Fit, 0.10));
        assert!(!run.no_allocator_hint);
        let run =
            run_args("run --strategy factor:0.9 --margin 25% --no-allocator-hint -- python t.py");
        assert_eq!((run.strategy, run.margin), (Strategy::Factor(0.9), 0.25));
        let settings = run.validate().unwrap();
        assert!(!settings.allocator_hint);
        assert_eq!(
            run_args("run --strategy halve -- t").strategy,
            Strategy::Halve
        );
        for (args, words) in [
            (
                "run --strategy factor:1 -- t",
                "use fit, halve, or factor:F",
            ),
            (
                "run --strategy factor:0 -- t",
                "use fit, halve, or factor:F",
            ),
            ("run --strategy double -- t", "use fit, halve, or factor:F"),
            ("run --margin 95 -- t", "percentage from 0 to 90"),
            ("run --margin -1 -- t", "percentage from 0 to 90"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(words), "{args}: {err}");
        }
    }

    #[test]
    fn the_command_is_bytes() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let args = [
            "oomguard",
            "run",
            "--",
            "python",
            "t.py",
            "--batch_size",
            "8",
        ]
        .map(OsString::from)
        .into_iter()
        .chain([OsString::from_vec(b"caf\xff".to_vec())]);
        let Command::Run(run) = Cli::try_parse_from(args).unwrap().command else {
            panic!("run parses");
        };
        assert_eq!(run.command[4].as_bytes(), b"caf\xff");
        let settings = run.validate().unwrap();
        assert_eq!(
            settings.knobs.batch_of(&settings.knobs.originals()),
            Some(8)
        );
    }
}
