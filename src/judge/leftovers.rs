//! An attempt's own leftovers never stop the next one. Some jobs refuse to start where an
//! earlier run left files: LightningCLI's `SaveConfigCallback` will not overwrite the
//! `config.yaml` it wrote into a fixed log directory, and the Hugging Face example scripts
//! (`run_clm.py` and their copies) will not start in a non-empty `--output_dir` that holds no
//! checkpoint. After an out-of-memory death the "earlier run" is the attempt oomguard just
//! relaunched from, so without help the relaunch dies at once and the run ends `failed`.
//!
//! [`read`] recognises such a refusal (attempt 2 or later, a quick non-zero exit, the refusal
//! in the output); [`decide`] says what to do with it: for a known refusal whose path this run
//! made (born after attempt 1 started, by its birth time: [`look`]), rename it aside next to
//! itself (`config.yaml.oomguard-attempt1`, never over anything: [`set_aside`]) and retry at the
//! same sizes; otherwise stop and say why. A second refusal right after a setting aside stops
//! the run. Both are pure and table-tested; [`look`] and [`set_aside`] touch the filesystem, as
//! the job's user where oomguard acts for one ([`crate::guard::principal::as_user`]).
//!
//! What is never done: deleting anything, moving a file that existed before the run (or that
//! cannot be shown not to have), acting on a refusal of a kind not known here (it is named as
//! the last attempt's leftovers, and the run stops). Where the job runs and how the relaunch is
//! made are the run loop's ([`mod@crate::run`]); what the policy does with [`Cause::Leftovers`]
//! is [`crate::decide::policy`]'s.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::judge::outcome::{Cause, Ending};
use crate::judge::scan::lines::quote;

/// How soon a refusal comes: before the first step, after the imports. A job that ran longer
/// got past its start, and what killed it is its own business. Generous, for torch imported
/// from a slow network filesystem.
pub const QUICK: Duration = Duration::from_secs(120);

/// Which refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// LightningCLI's `SaveConfigCallback`: `config.yaml` in the log directory.
    LightningConfig,
    /// A Hugging Face example script: `--output_dir` exists, is not empty, has no checkpoint.
    HfOutputDir,
    /// Some other "already exists" / "not empty" / "refusing to overwrite".
    Unknown,
}

impl Kind {
    /// What it is, for the lines.
    fn what(self) -> &'static str {
        match self {
            Kind::LightningConfig => "LightningCLI's saved config",
            Kind::HfOutputDir => "the Hugging Face script's output directory",
            Kind::Unknown => "a file",
        }
    }
}

/// A refusal to start over an earlier attempt's files, as the output shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: Kind,
    /// The path the text names, as it names it (relative to the job's directory or absolute).
    pub path: Option<String>,
    /// The output line that says it.
    pub line: String,
}

impl Refusal {
    /// The attempt's verdict: its ending and the refusal, named as the last attempt's leftovers.
    pub fn evidence(&self, ending: Ending, attempt: u32) -> String {
        format!(
            "{ending}; output: {} (attempt {}'s leftovers)",
            quote(&self.line),
            attempt.saturating_sub(1)
        )
    }
}

/// LightningCLI (lightning/pytorch/cli.py, `SaveConfigCallback.setup`, lightning 2.x):
/// `RuntimeError: SaveConfigCallback expected /runs/exp/config.yaml to NOT exist. Aborting to
/// avoid overwriting results of a previous run. You can delete the previous config file, set
/// `LightningCLI(save_config_callback=None)` to disable config saving, or set
/// `LightningCLI(save_config_kwargs={"overwrite": True})` to overwrite the config file.`
/// (older releases end `save_config_overwrite=True`; a subclass puts its own class name first).
const LIGHTNING: (&str, &str) = (" expected ", " to NOT exist. Aborting to avoid overwriting");

/// transformers' examples (run_clm.py and the others, before the checkpoint lookup):
/// `ValueError: Output directory (out) already exists and is not empty. Use
/// --overwrite_output_dir to overcome.`
const HF: (&str, &str) = ("Output directory (", ") already exists and is not empty");

/// The words of a refusal of a kind not known here (lowercase). `file exists` and `directory
/// not empty` are EEXIST's and ENOTEMPTY's strerror, as Python's `FileExistsError` and
/// `OSError` print them.
const GENERIC: &[&str] = &[
    "already exists",
    "not empty",
    "refusing to overwrite",
    "refuse to overwrite",
    "will not overwrite",
    "file exists",
];

/// Whether `line` reports an error (a refusal logged as a notice is not what the job died of).
fn is_error_line(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    ["error", "exception", "abort", "fatal", "refus"]
        .iter()
        .any(|w| lower.contains(w))
}

/// Reads an attempt that ended: a refusal to start over the last attempt's leftovers, or
/// `None`. Only right after a relaunch (`attempt` 2 or later), only a quick death by a non-zero
/// exit that the classifier found no memory in (`cause` [`Cause::Failed`]), and only with the
/// refusal in the output: the known texts anywhere in the tail, another refusal only as the last
/// error line (so a refusal the job got past, or logged, does not count).
pub fn read(
    attempt: u32,
    ending: Ending,
    duration: Duration,
    cause: Cause,
    tail: &str,
) -> Option<Refusal> {
    if attempt < 2 || cause != Cause::Failed || duration > QUICK {
        return None;
    }
    if !matches!(ending, Ending::Exited(code) if code != 0) {
        return None;
    }
    let lines: Vec<&str> = tail.lines().map(str::trim).collect();
    for (kind, (before, after)) in [(Kind::LightningConfig, LIGHTNING), (Kind::HfOutputDir, HF)] {
        if let Some(line) = lines.iter().rev().find(|l| l.contains(after)) {
            return Some(Refusal {
                kind,
                path: between(line, before, after),
                line: line.to_string(),
            });
        }
    }
    let last_error = lines.iter().rev().find(|l| is_error_line(l))?;
    let lower = last_error.to_ascii_lowercase();
    GENERIC.iter().any(|w| lower.contains(w)).then(|| Refusal {
        kind: Kind::Unknown,
        path: named_path(last_error),
        line: last_error.to_string(),
    })
}

/// The text between the last `before` ahead of `after` and `after` (a path may hold either).
fn between(line: &str, before: &str, after: &str) -> Option<String> {
    let end = line.rfind(after)?;
    let start = line[..end].rfind(before)? + before.len();
    let path = &line[start..end];
    (!path.is_empty()).then(|| path.to_string())
}

/// The path an unknown refusal names: the first quoted text (`'out/x'`, `"out/x"`, `` `out/x` ``,
/// as Python's `FileExistsError: [Errno 17] File exists: 'out/x'` has it), else the word before
/// "already exists" / "is not empty".
fn named_path(line: &str) -> Option<String> {
    for q in ['\'', '"', '`'] {
        let mut parts = line.split(q);
        if let (Some(_), Some(inside), Some(_)) = (parts.next(), parts.next(), parts.next()) {
            if !inside.trim().is_empty() {
                return Some(inside.to_string());
            }
        }
    }
    let lower = line.to_ascii_lowercase();
    let at = ["already exists", "is not empty", "not empty"]
        .iter()
        .find_map(|w| lower.find(w))?;
    let word = line[..at].split_whitespace().last()?;
    let word = word.trim_matches(|c: char| "()[]{},;:".contains(c));
    (word.contains('/') || word.contains('.')).then(|| word.to_string())
}

/// What [`look`] found of the refused path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// It and everything under it were made after attempt 1 started: this run's.
    New,
    /// `path` (it, or something under it) existed before attempt 1 started.
    Before { path: PathBuf },
    /// Nothing can tell (why).
    CannotTell(String),
    /// It is not there any more.
    Gone,
}

/// The last setting aside: the kind, and the attempt that ran right after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retried {
    pub kind: Kind,
    pub attempt: u32,
}

/// What to do about a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Rename `path` to `to` (`<path>.oomguard-attemptN`), then retry at the same sizes.
    SetAside { path: PathBuf, to: PathBuf },
    /// The path is gone already: retry at the same sizes.
    Retry,
    /// The run stops (failed), for this reason.
    Stop(String),
}

/// What to do after attempt `attempt` refused (`refusal`), `retried` the last setting aside,
/// `look` what the refused path (resolved against the job's directory as `path`) is. Pure.
pub fn decide(
    refusal: &Refusal,
    attempt: u32,
    path: Option<&Path>,
    retried: Option<Retried>,
    look: &Look,
) -> Plan {
    let left_by = attempt.saturating_sub(1);
    let named = refusal
        .path
        .as_deref()
        .map(|p| format!(" {}", quote(p)))
        .unwrap_or_default();
    if retried.is_some_and(|r| r.attempt == attempt && r.kind == refusal.kind) {
        return Plan::Stop(format!(
            "attempt {attempt} refused again{named} after the leftovers were set aside: the job makes them before it refuses, or something else does; see attempt-{attempt}.log"
        ));
    }
    let (Kind::LightningConfig | Kind::HfOutputDir, Some(path)) = (refusal.kind, path) else {
        let cure = match &refusal.path {
            Some(p) => format!("move {} aside", quote(p)),
            None => "move what it names aside".to_string(),
        };
        return Plan::Stop(format!(
            "attempt {attempt} refused to start over attempt {left_by}'s leftovers{named}, not a bug of the job's; \
             oomguard sets aside only LightningCLI's config.yaml and a Hugging Face script's output directory: {cure} \
             (or let the job overwrite it) and run again"
        ));
    };
    let shown = quote(&path.to_string_lossy());
    match look {
        Look::New => Plan::SetAside {
            path: path.to_path_buf(),
            to: aside_name(path, left_by),
        },
        Look::Gone => Plan::Retry,
        Look::Before { path: old } if old == path => Plan::Stop(format!(
            "attempt {attempt} refused to start over {} {shown}, which existed before this run started: not oomguard's to move",
            refusal.kind.what()
        )),
        Look::Before { path: old } => Plan::Stop(format!(
            "attempt {attempt} refused to start over {} {shown}, which holds {}, older than this run: not oomguard's to move",
            refusal.kind.what(),
            quote(&old.to_string_lossy())
        )),
        Look::CannotTell(why) => Plan::Stop(format!(
            "attempt {attempt} refused to start over {} {shown}; oomguard cannot tell that this run made it ({why}), so it stays where it is",
            refusal.kind.what()
        )),
    }
}

/// `<path>.oomguard-attemptN`, beside it.
fn aside_name(path: &Path, attempt: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".oomguard-attempt{attempt}"));
    PathBuf::from(name)
}

/// At most this many entries of a directory are looked at; past them, [`look`] cannot tell.
const MAX_ENTRIES: usize = 10_000;

/// Whether `path` (and, for a directory, everything under it) was made after `started` (read
/// with `SystemTime::now()` just before attempt 1 was spawned): its birth time (statx's
/// btime), strictly later. Errors fall on the safe side: the kernel stamps a new file from its
/// coarse clock, up to a tick (a few ms) behind `started`, so a file made within a tick of the
/// start reads as old and is left alone; a job's files come later than that (Python alone
/// takes tens of ms to start). Where the filesystem keeps no
/// birth time, a change time before the start still proves a file old; nothing proves it new.
/// Symbolic links are not followed: they are renamed as links.
pub fn look(path: &Path, started: SystemTime) -> Look {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Look::Gone,
        Err(e) => return Look::CannotTell(format!("cannot read {}: {e}", path.display())),
    };
    let mut todo = vec![(path.to_path_buf(), meta)];
    let mut seen = 0;
    while let Some((at, meta)) = todo.pop() {
        seen += 1;
        if seen > MAX_ENTRIES {
            return Look::CannotTell(format!("more than {MAX_ENTRIES} entries to check"));
        }
        match born_after(&meta, started) {
            Some(true) => {}
            Some(false) => return Look::Before { path: at },
            None => {
                return Look::CannotTell(format!(
                    "the filesystem of {} keeps no birth time",
                    at.display()
                ))
            }
        }
        if meta.is_dir() {
            let entries = match std::fs::read_dir(&at) {
                Ok(entries) => entries,
                Err(e) => return Look::CannotTell(format!("cannot list {}: {e}", at.display())),
            };
            for entry in entries {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        return Look::CannotTell(format!("cannot list {}: {e}", at.display()))
                    }
                };
                match entry.path().symlink_metadata() {
                    Ok(meta) => todo.push((entry.path(), meta)),
                    Err(e) => {
                        return Look::CannotTell(format!(
                            "cannot read {}: {e}",
                            entry.path().display()
                        ))
                    }
                }
            }
        }
    }
    Look::New
}

/// `Some(true)`: born after `started`; `Some(false)`: existed by then; `None`: cannot tell.
fn born_after(meta: &std::fs::Metadata, started: SystemTime) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(born) = meta.created() {
        return Some(born > started);
    }
    let changed = SystemTime::UNIX_EPOCH.checked_add(Duration::new(
        meta.ctime().max(0) as u64,
        meta.ctime_nsec().max(0) as u32,
    ))?;
    // ctime is never before the birth: one at or before the start proves the file old.
    (changed <= started).then_some(false)
}

/// Renames `path` to `to`, or to `to.2` … `to.9` where the name is taken (an earlier run's
/// leftovers set aside at the same attempt number): never over anything (renameat2's
/// `RENAME_NOREPLACE`), as the job's user. Returns the name it got.
pub fn set_aside(path: &Path, to: &Path) -> std::io::Result<PathBuf> {
    use crate::guard::fsutil::renameat2;
    use nix::fcntl::RenameFlags;
    crate::guard::principal::as_user(|| {
        let mut last = None;
        for n in 1..=9 {
            let target = match n {
                1 => to.to_path_buf(),
                n => {
                    let mut name = to.as_os_str().to_owned();
                    name.push(format!(".{n}"));
                    PathBuf::from(name)
                }
            };
            match renameat2(
                None,
                path.as_os_str(),
                None,
                target.as_os_str(),
                RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => return Ok(target),
                Err(nix::errno::Errno::EEXIST) => last = Some(target),
                Err(e) => return Err(e.into()),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} and the eight names after it are taken",
                last.unwrap_or_default().display()
            ),
        ))
    })
}

/// The line that says a setting aside was done.
pub fn set_aside_line(refusal: &Refusal, attempt: u32, path: &Path, to: &Path) -> String {
    format!(
        "attempt {attempt} refused to start over attempt {}'s leftovers ({} {}): set aside as {}; attempt {} retries at the same sizes",
        attempt.saturating_sub(1),
        refusal.kind.what(),
        path.display(),
        to.display(),
        attempt + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIGHTNING_TEXT: &str = "RuntimeError: SaveConfigCallback expected /runs/exp/config.yaml to NOT exist. Aborting to avoid overwriting results of a previous run. You can delete the previous config file, set `LightningCLI(save_config_callback=None)` to disable config saving, or set `LightningCLI(save_config_kwargs={\"overwrite\": True})` to overwrite the config file.";
    const LIGHTNING_OLD: &str = "RuntimeError: SaveConfigCallback expected logs/config.yaml to NOT exist. Aborting to avoid overwriting results of a previous run. You can delete the previous config file, set `LightningCLI(save_config_callback=None)` to disable config saving, or set `LightningCLI(save_config_overwrite=True)` to overwrite the config file.";
    const HF_TEXT: &str = "ValueError: Output directory (out) already exists and is not empty. Use --overwrite_output_dir to overcome.";
    const TRACE: &str = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n";

    #[test]
    fn reads_refusals_only_right_after_a_relaunch() {
        let exit1 = Ending::Exited(1);
        let quick = Duration::from_secs(4);
        struct Row {
            what: &'static str,
            attempt: u32,
            ending: Ending,
            duration: Duration,
            cause: Cause,
            tail: String,
            want: Option<(Kind, Option<&'static str>)>,
        }
        let row = |what, tail: &str, want| Row {
            what,
            attempt: 2,
            ending: exit1,
            duration: quick,
            cause: Cause::Failed,
            tail: format!("{TRACE}{tail}\n"),
            want,
        };
        let lightning = Some((Kind::LightningConfig, Some("/runs/exp/config.yaml")));
        let table = [
            row("LightningCLI", LIGHTNING_TEXT, lightning),
            row("LightningCLI before 2.0", LIGHTNING_OLD, Some((Kind::LightningConfig, Some("logs/config.yaml")))),
            row("a subclass of SaveConfigCallback", &LIGHTNING_TEXT.replace("SaveConfigCallback", "MyConfig"), lightning),
            row("LightningCLI under torchrun", &format!("[rank0]: {LIGHTNING_TEXT}\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:\ntrain.py FAILED"), lightning),
            row("run_clm.py", HF_TEXT, Some((Kind::HfOutputDir, Some("out")))),
            row("an output dir with parentheses", "ValueError: Output directory (runs/a (b)) already exists and is not empty. Use --overwrite_output_dir to overcome.", Some((Kind::HfOutputDir, Some("runs/a (b)")))),
            row("os.makedirs", "FileExistsError: [Errno 17] File exists: 'out/run1'", Some((Kind::Unknown, Some("out/run1")))),
            row("a job's own words", "RuntimeError: results/run1 already exists, refusing to overwrite", Some((Kind::Unknown, Some("results/run1")))),
            row("rmdir", "OSError: [Errno 39] Directory not empty: \"cache\"", Some((Kind::Unknown, Some("cache")))),
            row("no path", "error: refusing to overwrite previous results", Some((Kind::Unknown, None))),
            // Near misses.
            Row { attempt: 1, ..row("attempt 1's own FileExistsError", "FileExistsError: [Errno 17] File exists: 'out'", None) },
            Row { attempt: 1, ..row("attempt 1 over an earlier run's config", LIGHTNING_TEXT, None) },
            Row { duration: Duration::from_secs(3600), ..row("after an hour of training", "FileExistsError: [Errno 17] File exists: 'out/ckpt'", None) },
            Row { ending: Ending::Exited(0), ..row("a success", LIGHTNING_TEXT, None) },
            Row { ending: Ending::Signaled { signal: 9, core_dumped: false }, ..row("SIGKILL", LIGHTNING_TEXT, None) },
            Row { cause: Cause::DeviceOom, ..row("an OOM", "torch.OutOfMemoryError: CUDA out of memory.", None) },
            row("logged, then another error", "INFO: out already exists, reusing it\nValueError: bad learning rate", None),
            row("a refusal got past, then another error", "FileExistsError: [Errno 17] File exists: 'x'\nValueError: bad learning rate", None),
            row("a notice only", "note: cache dir already exists", None),
            row("an ordinary bug", "KeyError: 'lr'", None),
        ];
        let mut bad = Vec::new();
        for r in &table {
            let got = read(r.attempt, r.ending, r.duration, r.cause, &r.tail);
            let got_short = got.as_ref().map(|g| (g.kind, g.path.as_deref()));
            if got_short != r.want {
                bad.push(format!("{}: want {:?}, got {got:?}", r.what, r.want));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn decides_what_may_be_set_aside() {
        let refusal = |kind, path: Option<&str>| Refusal {
            kind,
            path: path.map(str::to_string),
            line: "x".to_string(),
        };
        let cfg = Path::new("/job/logs/config.yaml");
        let lightning = refusal(Kind::LightningConfig, Some("logs/config.yaml"));
        let hf = refusal(Kind::HfOutputDir, Some("out"));
        let out = Path::new("/job/out");
        let aside = |p: &Path, to: &str| Plan::SetAside {
            path: p.to_path_buf(),
            to: PathBuf::from(to),
        };
        let stop = |words: &'static str| Err::<Plan, &str>(words);
        // (what, refusal, attempt, resolved path, the last setting aside, look, plan or the
        // words of the stop)
        type Row<'a> = (
            &'a str,
            &'a Refusal,
            u32,
            Option<&'a Path>,
            Option<Retried>,
            Look,
            Result<Plan, &'a str>,
        );
        let unknown = refusal(Kind::Unknown, Some("out/run1"));
        let nameless = refusal(Kind::Unknown, None);
        let table: Vec<Row> = vec![
            ("config made by attempt 1", &lightning, 2, Some(cfg), None, Look::New, Ok(aside(cfg, "/job/logs/config.yaml.oomguard-attempt1"))),
            ("output dir made by attempt 3", &hf, 4, Some(out), None, Look::New, Ok(aside(out, "/job/out.oomguard-attempt3"))),
            ("a new episode after an earlier setting aside", &lightning, 5, Some(cfg), Some(Retried { kind: Kind::LightningConfig, attempt: 3 }), Look::New, Ok(aside(cfg, "/job/logs/config.yaml.oomguard-attempt4"))),
            ("gone already", &lightning, 2, Some(cfg), None, Look::Gone, Ok(Plan::Retry)),
            ("refused again right after", &lightning, 3, Some(cfg), Some(Retried { kind: Kind::LightningConfig, attempt: 3 }), Look::New, stop("attempt 3 refused again \"logs/config.yaml\" after the leftovers were set aside")),
            ("existed before the run", &lightning, 2, Some(cfg), None, Look::Before { path: cfg.to_path_buf() }, stop("which existed before this run started: not oomguard's to move")),
            ("holds an older file", &hf, 2, Some(out), None, Look::Before { path: out.join("notes.txt") }, stop("which holds \"/job/out/notes.txt\", older than this run")),
            ("no birth time", &hf, 2, Some(out), None, Look::CannotTell("no btime".into()), stop("cannot tell that this run made it (no btime), so it stays")),
            ("unknown refusal", &unknown, 2, Some(out), None, Look::New, stop("attempt 2 refused to start over attempt 1's leftovers \"out/run1\", not a bug of the job's; oomguard sets aside only LightningCLI's config.yaml and a Hugging Face script's output directory: move \"out/run1\" aside")),
            ("unknown refusal without a path", &nameless, 2, None, None, Look::Gone, stop("attempt 2 refused to start over attempt 1's leftovers, not a bug")),
        ];
        let mut bad = Vec::new();
        for (what, refusal, attempt, path, retried, look, want) in &table {
            let got = decide(refusal, *attempt, *path, *retried, look);
            let ok = match (&got, want) {
                (Plan::Stop(line), Err(words)) => line.contains(words),
                (got, Ok(want)) => got == want,
                _ => false,
            };
            if !ok {
                bad.push(format!("{what}: want {want:?}, got {got:?}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn looks_at_birth_times_and_sets_aside_without_replacing() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.yaml");
        std::fs::write(&old, "mine").unwrap();
        let out_with_old = dir.path().join("out_old");
        std::fs::create_dir(&out_with_old).unwrap();
        std::fs::write(out_with_old.join("notes.txt"), "mine").unwrap();
        // The clock read as attempt 1 starts; then the job's first file, once a file made now is
        // stamped later than it (the kernel's clock moves by ticks of a few ms).
        let started = SystemTime::now();
        let probe = dir.path().join("probe");
        loop {
            std::fs::write(&probe, "").unwrap();
            match probe.metadata().unwrap().created() {
                Ok(born) if born > started => break,
                Ok(_) => std::fs::remove_file(&probe).unwrap(),
                Err(_) => {
                    eprintln!("SKIPPED look: this filesystem keeps no birth time");
                    return;
                }
            }
        }
        let fresh = dir.path().join("config.yaml");
        std::fs::write(&fresh, "attempt 1").unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir_all(out.join("runs")).unwrap();
        std::fs::write(out.join("runs/events"), "attempt 1").unwrap();
        assert_eq!(look(&fresh, started), Look::New);
        assert_eq!(look(&out, started), Look::New);
        assert_eq!(look(&old, started), Look::Before { path: old.clone() });
        // A directory the run made, holding something older (moved in), is not all the run's.
        std::fs::rename(out_with_old.join("notes.txt"), out.join("notes.txt")).unwrap();
        assert_eq!(
            look(&out, started),
            Look::Before {
                path: out.join("notes.txt")
            }
        );
        assert_eq!(look(&dir.path().join("none"), started), Look::Gone);
        // Set aside under the name asked for, then beside it where that is taken; the file
        // already there is untouched.
        let to = dir.path().join("config.yaml.oomguard-attempt1");
        std::fs::write(&to, "an earlier run's").unwrap();
        let got = set_aside(&fresh, &to).unwrap();
        assert_eq!(got, dir.path().join("config.yaml.oomguard-attempt1.2"));
        assert_eq!(std::fs::read_to_string(&got).unwrap(), "attempt 1");
        assert_eq!(std::fs::read_to_string(&to).unwrap(), "an earlier run's");
        assert!(!fresh.exists());
    }
}
