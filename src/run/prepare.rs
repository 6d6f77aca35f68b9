//! Before anything starts: what a run checks and sets up while it can still refuse with one
//! line and leave nothing behind (the job file's context, who the run and state directories
//! are used as, the metrics address, the memory cgroup), and the first lines and records of a
//! run. It starts no process of the job's and waits for nothing.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::Error;
use crate::front::settings::from_args::UsageError;
use crate::front::settings::{CgroupPlan, RunSettings};
use crate::knobs::patch::Patcher;
use crate::output::console::Reporter;
use crate::remember::jobs::run::JobRun;
use crate::remember::record::run_dir::{self, RunDir};
use crate::remember::record::summary::{RunLimits, Summary};
use crate::{guard::principal, knobs, observe::cgroup, tell::metrics};

/// Files an oomguard killed together with its guard left patched come back, and the user hears
/// so: before anything else, and before any knob is read from them.
/// `state_dir`: `--state-dir`, where this run keeps its backups (else the default).
pub fn recover_patched_files(state_dir: Option<PathBuf>, report: &Reporter) {
    if let Some(dir) = state_dir.or_else(run_dir::state_dir) {
        // As root, only a state directory nobody else could write: the job's user is not known
        // yet, and root must not act in a place a user could point elsewhere. A user's own
        // entries are finished by their file's lock before the file is read.
        if !matches!(
            crate::guard::ownership::place_is_users(&dir, None, "state directory"),
            Ok(false)
        ) {
            return;
        }
        for line in knobs::patch::Patcher::recover(&dir) {
            report.warn(&line);
        }
    }
}

/// A job file's context: its warnings said, and its `workdir` made oomguard's own working
/// directory, so that the job runs there and relative knob files and checkpoint globs are
/// found there (validation already resolved every path given relative to where we started).
pub(super) fn enter_job_context(settings: &RunSettings, report: &Reporter) -> Result<(), Error> {
    for warning in &settings.job_context.warnings {
        report.warn(warning);
    }
    if let Some(dir) = &settings.job_context.workdir {
        // Entered as the job's user: a directory they could not reach themselves is not one
        // root opens for their job (which inherits it as its working directory).
        principal::as_user(|| std::env::set_current_dir(dir)).map_err(|e| {
            Error::Usage(UsageError::JobFile(format!(
                "cannot enter the job file's workdir {}: {e}",
                dir.display()
            )))
        })?;
    }
    // Without root: a run directory another user owns is refused, one anyone may write is
    // said (as root, places_as_whom decides).
    if let Some(dir) = &settings.run_dir {
        let refused = |why| Error::Usage(UsageError::JobFile(why));
        if let Some(warning) = crate::guard::ownership::own_run_dir(dir).map_err(refused)? {
            report.warn(&warning);
        }
    }
    Ok(())
}

/// As root, decides for the run and state directories (given or default, now that the workdir
/// is entered) whether they are used as root or as the job's user, from who can write their
/// path; one someone else could write is refused (see README's "Security model").
pub(super) fn places_as_whom(settings: &mut RunSettings) -> Result<(), Error> {
    let who = settings.job_context.run_as.as_ref();
    let usage = |why| Error::Usage(UsageError::JobFile(why));
    let run_dir = settings
        .run_dir
        .clone()
        .unwrap_or_else(run_dir::default_runs_base);
    let run_dir = std::path::absolute(&run_dir).unwrap_or(run_dir);
    settings.run_dir_is_users |=
        crate::guard::ownership::place_is_users(&run_dir, who, "run directory").map_err(usage)?;
    if let Some(state) = &settings.job.state_dir {
        settings.job.state_dir_is_users |=
            crate::guard::ownership::place_is_users(state, who, "state directory")
                .map_err(usage)?;
    }
    Ok(())
}

/// `--metrics-addr` bound (a port in use is a usage error before anything starts) and the
/// metrics set up, where asked for.
fn start_metrics(settings: &RunSettings) -> Result<Option<metrics::Exporter>, Error> {
    metrics::Exporter::start(&settings.metrics, super::own_limit_bytes(settings))
        .map_err(|why| Error::Usage(UsageError::Metrics(why)))
}

/// Finds where attempt cgroups can be made. `--memory-max` without a writable memory cgroup is
/// a usage error: refusing before anything starts beats running without the promised limit.
fn cgroup_setup(plan: CgroupPlan) -> Result<Option<(cgroup::Parent, cgroup::Limits)>, Error> {
    let limits = match plan {
        CgroupPlan::Off => return Ok(None),
        CgroupPlan::IfAvailable => cgroup::Limits::default(),
        CgroupPlan::Required(limits) => limits,
    };
    let required = limits.memory_max_bytes.is_some();
    // Prepared before any helper process exists: on cgroup v2 a second process in our cgroup
    // would stop the memory controller from being enabled for attempt cgroups.
    let ready = cgroup::Parent::detect_current()
        .map_err(|why| why.to_string())
        .and_then(|parent| parent.prepare().map(|()| parent).map_err(|e| e.to_string()));
    match ready {
        Ok(parent) => {
            for dir in parent.remove_stale_attempts() {
                tracing::info!("removed {}, left by an oomguard that was killed", dir.display());
            }
            Ok(Some((parent, limits)))
        }
        Err(why) if required => Err(Error::Cgroup(format!(
            "--memory-max needs a memory cgroup: {why}; or drop --memory-max and use --max-rss, which needs none"
        ))),
        Err(why) => {
            tracing::info!("attempts run without a memory cgroup: {why}");
            Ok(None)
        }
    }
}

/// A run ready to start: its metrics and memory cgroup set up, its run directory made, the
/// user's config files claimed, summary.json begun; nothing of the job's started yet.
pub(super) struct Ready {
    pub run_dir: RunDir,
    pub files: Option<Patcher>,
    pub summary: Summary,
    pub cgroup: Option<(cgroup::Parent, cgroup::Limits)>,
    pub metrics: Option<metrics::Exporter>,
}

impl Ready {
    pub(super) fn new(settings: &RunSettings) -> Result<Ready, Error> {
        let metrics = start_metrics(settings)?;
        let cgroup = cgroup_setup(settings.cgroup)?;
        let run_dir = RunDir::create(
            settings.run_dir.as_deref(),
            &settings.command[0].to_string_lossy(),
            settings.run_dir_is_users,
        )
        .map_err(Error::RunDir)?;
        // The backups of patched files go with the job memory: `--state-dir` where given.
        let files = match settings.knobs.open_files(
            settings.job.state_dir.as_deref(),
            run_dir.path(),
            settings.job.state_dir_is_users,
        ) {
            Ok(files) => files,
            Err(e) => {
                run_dir.discard();
                return Err(Error::PatchStart(e));
            }
        };
        Ok(Ready {
            run_dir,
            files,
            summary: summary(settings),
            cgroup,
            metrics,
        })
    }

    /// However the run ended (a panic through Patcher's Drop too), the user's files come back;
    /// where nothing ran, nothing is left behind, as for any other input refused.
    pub(super) fn give_back(mut self, result: &Result<i32, Error>, report: Reporter) {
        if let Some(files) = self.files.as_mut() {
            for line in files.finish() {
                report.warn(&line);
            }
        }
        if result.is_err() && self.summary.attempts().is_empty() {
            self.run_dir.discard();
        }
    }
}

/// summary.json as the run starts: the command, the command's own sizes, the limits set.
fn summary(settings: &RunSettings) -> Summary {
    let knobs = &settings.knobs;
    let mut summary = Summary::new(
        &lossy(&settings.command),
        knobs.at(&knobs.originals()).sizes(),
    );
    summary.limits = Some(RunLimits {
        memory_max_bytes: super::own_limit_bytes(settings),
        max_rss_bytes: settings.bounds.max_rss_bytes,
        max_gpu_bytes: settings.bounds.max_gpu_bytes,
        gpu_total_bytes: None,
    });
    summary
}

/// The run's first lines: where its directory is, what the knobs' discovery noticed, where the
/// metrics are, and that an out-of-memory death cannot be relaunched smaller without a batch.
pub(super) fn say_run_started(
    settings: &RunSettings,
    run_dir: &RunDir,
    summary: &Summary,
    report: Reporter,
    metrics: Option<&metrics::Exporter>,
) {
    report.event(
        "run_started",
        serde_json::json!({"run_dir": run_dir.path(), "command": summary.command}),
        &format!("run directory {}", run_dir.path().display()),
    );
    for note in &settings.knobs.notes {
        report.say(note);
    }
    if let Some(url) = metrics.and_then(|m| m.url()) {
        report.say(&format!("metrics at {url}"));
    }
    if settings.knobs.automatic
        && settings.knobs.batch().is_none()
        && settings.probe
        && crate::probe::runs_python(&settings.command)
    {
        report.say(&format!(
            "{}: {}",
            crate::knobs::NO_BATCH,
            crate::knobs::READ_INSIDE
        ));
    } else if settings.knobs.automatic && settings.knobs.batch().is_none() {
        report.warn(&format!(
            "{}: an out-of-memory death will not be relaunched smaller ({})",
            crate::knobs::NO_BATCH,
            crate::knobs::NAME_THE_BATCH
        ));
    }
}

/// The run's job: loads what its earlier runs learned (saying where attempt 1 starts) and
/// names it in summary.json.
pub(super) fn open_job(settings: &RunSettings, summary: &mut Summary, report: &Reporter) -> JobRun {
    let job = JobRun::open(&settings.job, &settings.knobs, report);
    summary.job = Some(job.name().to_string());
    summary.started_from = job
        .start()
        .map(|start| settings.knobs.at(&start.values).json());
    job
}

/// A command as summary.json records it: text, with bytes that are not UTF-8 replaced (the job
/// itself gets them unchanged).
pub(super) fn lossy(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|token| token.to_string_lossy().into_owned())
        .collect()
}
