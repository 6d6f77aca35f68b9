//! Resume from the checkpoint (`--resume-arg FLAG --checkpoint GLOB [--resume-first]`): before
//! a relaunch, find the newest file matching GLOB that the run wrote (newer than its start) and
//! that is complete, and hand it to the job as `FLAG PATH`.
//!
//! "Complete" is judged from outside, as nothing else is known of the file's format: its size
//! and modification time stayed the same for one `--interval`; and no process of the job had it
//! open for writing when oomguard stopped the job's processes ([`without_cut`]: a file the stop
//! cut short stops changing too). A [`Watch`] keeps the looks at
//! the candidates and says how long to wait before the next one; it is pure (the caller lists
//! the files with [`Resume::scan`] and does the waiting, during the backoff it waits anyway),
//! so the rules are table-tested. Where the flag sits in the command, and how it is rewritten,
//! is [`crate::knobs::argv`]'s: [`Resume::edits`] returns the [`Edit`]s that put the path there.
//! Saying what was chosen is the caller's, through `report`.

use std::cmp::Ordering;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::knobs::argv::{self, Edit, Place, RewriteError, Site};
use crate::knobs::{self, KnobSet};

/// The validated `--resume-arg` / `--checkpoint` / `--resume-first` settings of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// Where the flag's value sits in the command, or where the flag is added: at the end of
    /// the part holding the batch knob (the job's own flags are there), else of the last part.
    pub place: Place,
    /// The glob, relative to the working directory (which the job shares).
    pub pattern: String,
    /// `--resume-first`: attempt 1 also gets the newest matching file, however old.
    pub first: bool,
}

/// Why the resume flags do not make a run.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("--resume-arg {flag}: {source}")]
    Flag { flag: String, source: RewriteError },
    #[error("--checkpoint `{pattern}` is not a valid glob ({why}): use `*`, `?`, `[...]` and `**`, quoted so the shell leaves them alone")]
    Pattern { pattern: String, why: String },
    #[error("--resume-arg {name} is also the knob {knob}: name the job's checkpoint flag")]
    IsAKnob { name: String, knob: String },
}

impl Resume {
    /// Checks `flag` against the command (a flag in two programs' arguments needs `@N`; a
    /// valued flag needs its value) and compiles `pattern`.
    pub fn new(
        command: &[OsString],
        flag: &str,
        pattern: &str,
        first: bool,
        knobs: &KnobSet,
    ) -> Result<Resume, ResumeError> {
        glob::Pattern::new(pattern).map_err(|e| ResumeError::Pattern {
            pattern: pattern.to_string(),
            why: e.msg.to_string(),
        })?;
        if pattern.trim().is_empty() {
            // Valid as a glob, and matches nothing ever: the run would never resume.
            return Err(ResumeError::Pattern {
                pattern: pattern.to_string(),
                why: "it is empty".to_string(),
            });
        }
        let to_error = |source| ResumeError::Flag {
            flag: flag.to_string(),
            source,
        };
        let (mut place, _) = argv::locate_flag(command, flag, "--resume-arg").map_err(to_error)?;
        for knob in &knobs.knobs {
            if let knobs::Place::Argv(at) = &knob.place {
                if at.name() == place.name() {
                    return Err(ResumeError::IsAKnob {
                        name: place.name().to_string(),
                        knob: knob.name.clone(),
                    });
                }
            }
        }
        // Absent, and no part named with `@N`: it goes with the batch flag, not after a
        // launcher's `--` worker arguments that hold no batch.
        if let (Place::Absent { at, .. }, false) = (&mut place, flag.contains('@')) {
            if let Some(end) = batch_part_end(command, knobs) {
                *at = end;
            }
        }
        Ok(Resume {
            place,
            pattern: pattern.to_string(),
            first,
        })
    }

    /// The edits that give the job `FLAG path`: every occurrence's value replaced, or the flag
    /// added where [`Resume::place`] says.
    pub fn edits(&self, command: &[OsString], path: &Path) -> Vec<Edit> {
        let path = path.as_os_str();
        match &self.place {
            Place::Flag { sites, .. } => sites
                .iter()
                .map(|site| match *site {
                    Site::Separate(i) => Edit::Replace(i, path.to_owned()),
                    Site::Joined(i) => {
                        let token = command[i].as_bytes();
                        let eq = token
                            .iter()
                            .position(|&b| b == b'=')
                            .expect("a joined site is a `key=value` token");
                        let mut new = token[..=eq].to_vec();
                        new.extend_from_slice(path.as_bytes());
                        Edit::Replace(i, OsStr::from_bytes(&new).to_owned())
                    }
                })
                .collect(),
            Place::Absent { name, at } if name.starts_with('-') => {
                vec![Edit::Insert(*at, vec![name.into(), path.to_owned()])]
            }
            Place::Absent { name, at } => {
                let mut token = OsString::from(format!("{name}="));
                token.push(path);
                vec![Edit::Insert(*at, vec![token])]
            }
            Place::Switch { .. } => {
                unreachable!("locate_flag gives a valued flag's place, never a switch")
            }
        }
    }

    /// The regular files matching the glob now, with their size and modification time; only
    /// those modified after `newer_than` where given. Unreadable entries are skipped: a
    /// checkpoint oomguard cannot see is one it cannot vouch for.
    ///
    /// As the job's user when a root oomguard acts for one ([`crate::principal`]): a checkpoint
    /// the user could not read is not one to hand their job.
    pub fn scan(&self, newer_than: Option<SystemTime>) -> Vec<Candidate> {
        crate::principal::as_user(|| Ok(self.scan_here(newer_than))).unwrap_or_default()
    }

    fn scan_here(&self, newer_than: Option<SystemTime>) -> Vec<Candidate> {
        let Ok(paths) = glob::glob(&self.pattern) else {
            return Vec::new();
        };
        paths
            .filter_map(Result::ok)
            .filter_map(|path| {
                let meta = std::fs::metadata(&path).ok()?;
                let modified = meta.modified().ok()?;
                (meta.is_file() && newer_than.is_none_or(|start| modified > start)).then_some(
                    Candidate {
                        path,
                        modified,
                        size_bytes: meta.len(),
                        file_id: (meta.dev(), meta.ino()),
                    },
                )
            })
            .collect()
    }
}

/// `files` without those a process of the job had open for writing when oomguard stopped it
/// (`cut`: device and inode, [`crate::supervise::AttemptEnd::writing_at_stop`]): the stop cut
/// them short, and a cut file stops changing, so it would look complete. The paths left out
/// come second.
pub fn without_cut(
    files: Vec<Candidate>,
    cut: &std::collections::HashSet<(u64, u64)>,
) -> (Vec<Candidate>, Vec<PathBuf>) {
    if cut.is_empty() {
        return (files, Vec::new());
    }
    // By the identity the look saw (as the job's user): no path is looked up again.
    let (out, kept): (Vec<Candidate>, Vec<Candidate>) =
        files.into_iter().partition(|c| cut.contains(&c.file_id));
    (kept, out.into_iter().map(|c| c.path).collect())
}

/// The relaunch line's note on the files [`without_cut`] left out, or nothing.
pub fn cut_clause(cut: &[PathBuf]) -> String {
    match cut {
        [] => String::new(),
        [one] => format!(
            " ({} was being written when oomguard stopped the job: not used)",
            one.display()
        ),
        more => format!(
            " ({} were being written when oomguard stopped the job: not used)",
            more.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The end of the part holding the batch knob, where it is a flag of the command.
fn batch_part_end(command: &[OsString], knobs: &KnobSet) -> Option<usize> {
    let batch = &knobs.knobs[knobs.batch()?];
    let index = match &batch.place {
        knobs::Place::Argv(Place::Flag { sites, .. }) => match sites.first()? {
            Site::Separate(i) | Site::Joined(i) => *i,
        },
        knobs::Place::Argv(Place::Absent { at, .. } | Place::Switch { at, .. }) => *at,
        knobs::Place::Env(_) | knobs::Place::File { .. } => return None,
    };
    Some(argv::part_end(command, index))
}

/// A file matching the glob, as one look saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    pub modified: SystemTime,
    pub size_bytes: u64,
    /// Device and inode, as the look saw them.
    pub file_id: (u64, u64),
}

/// Newest first: by modification time, then (written within one timestamp tick) by name with
/// numbers compared as numbers, so `epoch_10.pt` is newer than `epoch_9.pt`.
fn newer(a: &Candidate, b: &Candidate) -> Ordering {
    a.modified
        .cmp(&b.modified)
        .then_with(|| natural(&a.path, &b.path))
}

/// Compares two paths with their runs of digits as numbers.
fn natural(a: &Path, b: &Path) -> Ordering {
    let (a, b) = (a.as_os_str().as_bytes(), b.as_os_str().as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let run = |s: &[u8], k: usize| {
                let end = s[k..]
                    .iter()
                    .position(|c| !c.is_ascii_digit())
                    .map_or(s.len(), |n| k + n);
                let digits = &s[k..end];
                let first = digits
                    .iter()
                    .position(|&c| c != b'0')
                    .unwrap_or(digits.len());
                (digits[first..].to_vec(), end)
            };
            let ((x, ei), (y, ej)) = (run(a, i), run(b, j));
            let order = x.len().cmp(&y.len()).then_with(|| x.cmp(&y));
            if order != Ordering::Equal {
                return order;
            }
            (i, j) = (ei, ej);
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            (i, j) = (i + 1, j + 1);
        }
    }
    (a.len() - i).cmp(&(b.len() - j)).then_with(|| a.cmp(b))
}

/// The looks at the candidates between an attempt's end and its relaunch. The newest one is
/// taken once its size and modification time have held for one interval; while it is still
/// changing, oomguard looks again each time it could have settled, until the backoff is over
/// (and at least one interval after the first look, so every file can be judged); then the
/// newest file that did settle is taken.
#[derive(Debug, Clone)]
pub struct Watch {
    interval: Duration,
    first_at: Instant,
    last_at: Instant,
    /// The last look: each file, and since when it has been seen exactly so.
    files: Vec<(Candidate, Instant)>,
}

/// What the looks found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    /// The newest complete file.
    pub chosen: Option<PathBuf>,
    /// Newer files still being written when oomguard stopped looking, newest first.
    pub unsettled: Vec<PathBuf>,
}

impl Watch {
    /// The first look, taken at `now`.
    pub fn start(files: Vec<Candidate>, now: Instant, interval: Duration) -> Watch {
        Watch {
            interval,
            first_at: now,
            last_at: now,
            files: files.into_iter().map(|c| (c, now)).collect(),
        }
    }

    /// Another look, taken at `now`: a file seen the same as before keeps its "since".
    pub fn look(&mut self, files: Vec<Candidate>, now: Instant) {
        let before = std::mem::take(&mut self.files);
        self.files = files
            .into_iter()
            .map(|c| {
                let since = before
                    .iter()
                    .find(|(old, _)| *old == c)
                    .map_or(now, |(_, since)| *since);
                (c, since)
            })
            .collect();
        self.last_at = now;
    }

    fn settled(&self, since: Instant) -> bool {
        self.last_at.saturating_duration_since(since) >= self.interval
    }

    fn newest(&self) -> Option<&(Candidate, Instant)> {
        self.files.iter().max_by(|a, b| newer(&a.0, &b.0))
    }

    /// How long to wait before the next look, or `None` when the pick is decided: nothing
    /// matches, the newest file has settled, or the looks went on until `backoff_end` (and
    /// one interval past the first look) already.
    pub fn wait(&self, now: Instant, backoff_end: Instant) -> Option<Duration> {
        let (_, since) = self.newest()?;
        if self.settled(*since) {
            return None;
        }
        let horizon = backoff_end.max(self.first_at + self.interval);
        let next = (*since + self.interval).min(horizon);
        if next <= self.last_at {
            return None;
        }
        Some(next.saturating_duration_since(now))
    }

    /// The newest file, where it has changed since the first look and has not settled yet:
    /// worth telling the user why the relaunch waits.
    pub fn changing(&self) -> Option<&Path> {
        let (candidate, since) = self.newest()?;
        (*since > self.first_at && !self.settled(*since)).then_some(candidate.path.as_path())
    }

    /// The newest settled file, and the newer ones passed over.
    pub fn pick(&self) -> Pick {
        let mut files: Vec<&(Candidate, Instant)> = self.files.iter().collect();
        files.sort_by(|a, b| newer(&b.0, &a.0));
        let mut unsettled = Vec::new();
        for (candidate, since) in files {
            if self.settled(*since) {
                return Pick {
                    chosen: Some(candidate.path.clone()),
                    unsettled,
                };
            }
            unsettled.push(candidate.path.clone());
        }
        Pick {
            chosen: None,
            unsettled,
        }
    }
}

impl Pick {
    /// The relaunch line's clause: `resuming from ckpt/epoch_4.pt`, with the files passed
    /// over, or why there is no checkpoint. `since_start`: only files newer than the run's
    /// start were candidates.
    pub fn clause(&self, pattern: &str, since_start: bool) -> String {
        let shown = |p: &PathBuf| p.display().to_string();
        let passed = match self.unsettled.as_slice() {
            [] => String::new(),
            [one] => format!(" ({} is still being written)", shown(one)),
            more => format!(
                " ({} are still being written)",
                more.iter().map(shown).collect::<Vec<_>>().join(", ")
            ),
        };
        match &self.chosen {
            Some(path) => format!("resuming from {}{passed}", shown(path)),
            None if !self.unsettled.is_empty() => {
                format!("no complete checkpoint to resume from{passed}")
            }
            None if since_start => format!(
                "no checkpoint to resume from (nothing matching {pattern} written since the run started)"
            ),
            None => format!("no checkpoint to resume from (nothing matches {pattern})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn words(argv: &[OsString]) -> String {
        argv.iter()
            .map(|t| t.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn knobs_of(command: &[OsString]) -> KnobSet {
        let cwd = std::env::current_dir().unwrap();
        knobs::resolve::resolve(
            &knobs::resolve::Request {
                command,
                batch_arg: None,
                accum_arg: None,
                min_batch: 1,
                cwd: &cwd,
                finish_left_patches: false,
            },
            None,
        )
        .unwrap()
    }

    #[test]
    fn the_flag_is_replaced_where_present_and_added_with_the_batch_flag_otherwise() {
        // (command, --resume-arg, the command given ckpt/e4.pt)
        let table = [
            (
                "python t.py --resume none --batch_size 8",
                "--resume",
                "python t.py --resume ckpt/e4.pt --batch_size 8",
            ),
            (
                "python t.py --resume=old.pt --batch_size 8 --resume=older.pt",
                "--resume",
                "python t.py --resume=ckpt/e4.pt --batch_size 8 --resume=ckpt/e4.pt",
            ),
            (
                "python t.py --batch_size 8",
                "--resume",
                "python t.py --batch_size 8 --resume ckpt/e4.pt",
            ),
            (
                "python train.py trainer.max_epochs=3 data.batch_size=8",
                "ckpt_path",
                "python train.py trainer.max_epochs=3 data.batch_size=8 ckpt_path=ckpt/e4.pt",
            ),
            // With the batch flag in part 1, not after the launcher's `--`.
            (
                "python launch.py --batch_size 8 -- worker.py --rank 0",
                "--resume",
                "python launch.py --batch_size 8 --resume ckpt/e4.pt -- worker.py --rank 0",
            ),
            // No batch flag: the end of the last part.
            (
                "uv run -- python t.py --lr 1",
                "--resume",
                "uv run -- python t.py --lr 1 --resume ckpt/e4.pt",
            ),
            // `@N` picks the part.
            (
                "python launch.py --batch_size 8 -- worker.py --rank 0",
                "--resume@2",
                "python launch.py --batch_size 8 -- worker.py --rank 0 --resume ckpt/e4.pt",
            ),
        ];
        for (command, flag, want) in table {
            let command = argv(command);
            let resume = Resume::new(&command, flag, "ckpt/*.pt", false, &knobs_of(&command))
                .unwrap_or_else(|e| panic!("{flag}: {e}"));
            let edits = resume.edits(&command, Path::new("ckpt/e4.pt"));
            assert_eq!(words(&argv::apply_edits(&command, &edits)), want);
        }
    }

    #[test]
    fn bad_settings_are_refused_with_the_fix() {
        // (command, --resume-arg, --checkpoint, words of the refusal)
        let table = [
            (
                "python t.py --batch_size 8 --resume",
                "--resume",
                "ckpt/*.pt",
                "--resume has no value",
            ),
            (
                "python a.py --resume x -- b.py --resume y",
                "--resume",
                "ckpt/*.pt",
                "--resume-arg --resume@1 or --resume-arg --resume@2",
            ),
            (
                "python t.py --batch_size 8",
                "--resume",
                "ckpt/[.pt",
                "not a valid glob",
            ),
            (
                "python t.py --batch_size 8",
                "--batch_size",
                "ckpt/*.pt",
                "--resume-arg --batch_size is also the knob batch",
            ),
        ];
        for (command, flag, pattern, want) in table {
            let command = argv(command);
            let err = Resume::new(&command, flag, pattern, false, &knobs_of(&command))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{flag} {pattern}: {err}");
        }
    }

    #[test]
    fn paths_order_with_numbers_as_numbers() {
        let table = [
            ("ckpt/epoch_10.pt", "ckpt/epoch_9.pt", Ordering::Greater),
            ("ckpt/epoch_09.pt", "ckpt/epoch_9.pt", Ordering::Less),
            (
                "ckpt/step_100/model.pt",
                "ckpt/step_20/model.pt",
                Ordering::Greater,
            ),
            ("a.pt", "b.pt", Ordering::Less),
            ("epoch_2.pt", "epoch_2.pt.tmp", Ordering::Less),
            ("same.pt", "same.pt", Ordering::Equal),
        ];
        for (a, b, want) in table {
            assert_eq!(natural(Path::new(a), Path::new(b)), want, "{a} vs {b}");
        }
    }

    /// A file `name` modified `modified_s` seconds after an epoch, `size_bytes` long.
    fn file(name: &str, modified_s: u64, size_bytes: u64) -> Candidate {
        Candidate {
            path: name.into(),
            modified: SystemTime::UNIX_EPOCH + Duration::from_secs(modified_s),
            size_bytes,
            file_id: (0, 0),
        }
    }

    /// One scenario: the looks (milliseconds after the first, the files then), the backoff
    /// (ms), and what must come of it: the waits asked for after each look (`None`: decided),
    /// then the pick.
    struct Case {
        name: &'static str,
        looks: Vec<(u64, Vec<Candidate>)>,
        backoff_ms: u64,
        waits_ms: Vec<Option<u64>>,
        chosen: Option<&'static str>,
        unsettled: Vec<&'static str>,
    }

    #[test]
    fn the_newest_complete_checkpoint_is_chosen() {
        let interval = Duration::from_millis(1000);
        let cases = vec![
            Case {
                name: "nothing matches: decided at once, no wait",
                looks: vec![(0, vec![])],
                backoff_ms: 10_000,
                waits_ms: vec![None],
                chosen: None,
                unsettled: vec![],
            },
            Case {
                name: "all stable over one interval: the newest by time",
                looks: vec![
                    (
                        0,
                        vec![file("e1", 1, 10), file("e3", 3, 10), file("e2", 2, 10)],
                    ),
                    (
                        1000,
                        vec![file("e1", 1, 10), file("e3", 3, 10), file("e2", 2, 10)],
                    ),
                ],
                backoff_ms: 10_000,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e3"),
                unsettled: vec![],
            },
            Case {
                name: "seen stable already (the GPU wait took an interval): no extra wait",
                looks: vec![
                    (0, vec![file("e1", 1, 10)]),
                    (1500, vec![file("e1", 1, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec![],
            },
            Case {
                name: "same timestamp: the higher epoch number",
                looks: vec![
                    (0, vec![file("epoch_10", 5, 10), file("epoch_9", 5, 10)]),
                    (1000, vec![file("epoch_10", 5, 10), file("epoch_9", 5, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("epoch_10"),
                unsettled: vec![],
            },
            Case {
                name: "the newest grows, then settles within the backoff: it is taken",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 4)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                    (2000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                ],
                backoff_ms: 10_000,
                waits_ms: vec![Some(1000), Some(1000), None],
                chosen: Some("e2"),
                unsettled: vec![],
            },
            Case {
                name: "the newest still grows when the backoff ends: the older one",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 4)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                    (2000, vec![file("e1", 1, 10), file("e2", 4, 12)]),
                    (2500, vec![file("e1", 1, 10), file("e2", 4, 16)]),
                ],
                backoff_ms: 2500,
                waits_ms: vec![Some(1000), Some(1000), Some(500), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "a backoff shorter than the interval: one interval all the same",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 4)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 8)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "same size, rewritten (new mtime): still being written",
                looks: vec![
                    (0, vec![file("e1", 1, 10), file("e2", 2, 10)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 3, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "a file that appears at the last look cannot be vouched for",
                looks: vec![
                    (0, vec![file("e1", 1, 10)]),
                    (1000, vec![file("e1", 1, 10), file("e2", 2, 10)]),
                ],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: Some("e1"),
                unsettled: vec!["e2"],
            },
            Case {
                name: "only one file, never settling: nothing complete",
                looks: vec![(0, vec![file("e1", 1, 4)]), (1000, vec![file("e1", 2, 8)])],
                backoff_ms: 0,
                waits_ms: vec![Some(1000), None],
                chosen: None,
                unsettled: vec!["e1"],
            },
        ];
        for case in cases {
            let t0 = Instant::now();
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let backoff_end = at(case.backoff_ms);
            let mut looks = case.looks.into_iter();
            let (first_ms, first) = looks.next().expect("a first look");
            let mut watch = Watch::start(first, at(first_ms), interval);
            let mut waits = vec![watch.wait(at(first_ms), backoff_end)];
            assert_eq!(
                watch.changing(),
                None,
                "{}: nothing seen to change",
                case.name
            );
            for (ms, files) in looks {
                watch.look(files, at(ms));
                waits.push(watch.wait(at(ms), backoff_end));
            }
            let want: Vec<Option<Duration>> = case
                .waits_ms
                .iter()
                .map(|w| w.map(Duration::from_millis))
                .collect();
            assert_eq!(waits, want, "{}", case.name);
            let pick = watch.pick();
            assert_eq!(
                pick.chosen.as_deref(),
                case.chosen.map(Path::new),
                "{}",
                case.name
            );
            let unsettled: Vec<PathBuf> = case.unsettled.iter().map(PathBuf::from).collect();
            assert_eq!(pick.unsettled, unsettled, "{}", case.name);
        }
    }

    #[test]
    fn a_newest_file_seen_changing_is_told() {
        let interval = Duration::from_millis(1000);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut watch = Watch::start(vec![file("e1", 1, 10), file("e2", 2, 4)], t0, interval);
        watch.look(vec![file("e1", 1, 10), file("e2", 3, 8)], at(1000));
        assert_eq!(watch.changing(), Some(Path::new("e2")));
        watch.look(vec![file("e1", 1, 10), file("e2", 3, 8)], at(2000));
        assert_eq!(watch.changing(), None, "settled");
        // An older file that changed is not the one the relaunch waits for.
        let mut watch = Watch::start(vec![file("e1", 1, 4), file("e2", 9, 4)], t0, interval);
        watch.look(vec![file("e1", 2, 8), file("e2", 9, 4)], at(1000));
        assert_eq!(watch.changing(), None);
    }

    #[test]
    fn the_clause_names_the_checkpoint_or_why_none() {
        let pick = |chosen: Option<&str>, unsettled: &[&str]| Pick {
            chosen: chosen.map(PathBuf::from),
            unsettled: unsettled.iter().map(PathBuf::from).collect(),
        };
        let table = [
            (pick(Some("ckpt/epoch_4.pt"), &[]), true, "resuming from ckpt/epoch_4.pt"),
            (
                pick(Some("ckpt/epoch_3.pt"), &["ckpt/epoch_4.pt"]),
                true,
                "resuming from ckpt/epoch_3.pt (ckpt/epoch_4.pt is still being written)",
            ),
            (
                pick(None, &["b", "a"]),
                true,
                "no complete checkpoint to resume from (b, a are still being written)",
            ),
            (
                pick(None, &[]),
                true,
                "no checkpoint to resume from (nothing matching ckpt/*.pt written since the run started)",
            ),
            (
                pick(None, &[]),
                false,
                "no checkpoint to resume from (nothing matches ckpt/*.pt)",
            ),
        ];
        for (pick, since_start, want) in table {
            assert_eq!(pick.clause("ckpt/*.pt", since_start), want);
        }
    }

    #[test]
    fn scan_lists_matching_files_newer_than_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("ckpt");
        std::fs::create_dir_all(ckpt.join("sub")).unwrap();
        std::fs::write(ckpt.join("old.pt"), b"old").unwrap();
        let old = std::fs::metadata(ckpt.join("old.pt"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(ckpt.join("sub/new.pt"), b"newer").unwrap();
        let new_mtime = old + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(ckpt.join("sub/new.pt"))
            .unwrap()
            .set_modified(new_mtime)
            .unwrap();
        std::fs::create_dir(ckpt.join("dir.pt")).unwrap();
        let resume = Resume {
            place: Place::Absent {
                name: "--resume".into(),
                at: 1,
            },
            pattern: format!("{}/**/*.pt", ckpt.display()),
            first: false,
        };
        let mut all: Vec<(PathBuf, u64)> = resume
            .scan(None)
            .into_iter()
            .map(|c| (c.path, c.size_bytes))
            .collect();
        all.sort();
        assert_eq!(
            all,
            [(ckpt.join("old.pt"), 3), (ckpt.join("sub/new.pt"), 5)],
            "regular files only, `**` reaching down"
        );
        let newer = resume.scan(Some(old));
        assert_eq!(newer.len(), 1);
        assert_eq!(newer[0].path, ckpt.join("sub/new.pt"));
        assert_eq!(newer[0].modified, new_mtime);
    }
}
