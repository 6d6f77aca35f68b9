//! What a run's knob discovery is asked ([`Request`]), how it fails ([`KnobError`]), the reader
//! of the config files it names ([`Reader`]: read once each, as the job's user), and the checks
//! of a value read ([`count`], [`env_value`]) and a place's name in messages ([`label_of`]).
//! Shared by the resolver, the entrypoints it asks, and the job file's knobs
//! ([`crate::front::settings::job_knobs`]), so none imports another for them. It decides no knob.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::argv::{self, RewriteError};
use super::file::{self, EditError, Format};
use super::{env, ConfigFile, Place, Value};

/// What the command line asks for.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub command: &'a [OsString],
    pub batch_arg: Option<&'a str>,
    pub accum_arg: Option<&'a str>,
    /// `--min-batch`: the floor of the automatic batch knob.
    pub min_batch: u64,
    /// The working directory, where relative file paths start.
    pub cwd: &'a Path,
    /// The PATH the job's programs are found with (a job file's `[env]` PATH), where a
    /// codebase's console script is looked up; `None`: this process's, which the job inherits.
    pub path_var: Option<&'a OsStr>,
    /// Before a config file is read: finish the patch a dead oomguard left in it, named by the
    /// lock beside it ([`crate::knobs::patch::finish_left_beside`]). Not for `--dry-run`, which
    /// writes nothing.
    pub finish_left_patches: bool,
}

impl<'a> Request<'a> {
    /// What a run of `command` in `cwd` with no knob flag asks: `--dry-run`'s and `doctor`'s
    /// question too, so nothing left by a dead oomguard is finished.
    pub fn plain(command: &'a [OsString], cwd: &'a Path) -> Request<'a> {
        Request {
            command,
            batch_arg: None,
            accum_arg: None,
            min_batch: 1,
            cwd,
            path_var: None,
            finish_left_patches: false,
        }
    }
}

/// Why the knobs cannot be set up. Each is one line naming the place and the fix.
#[derive(Debug, thiserror::Error)]
pub enum KnobError {
    #[error("{0}")]
    Argv(#[from] RewriteError),
    #[error("{where_}: {problem}")]
    Knob { where_: String, problem: String },
    #[error("--min-batch {min} is larger than the command's {flag} {batch}: lower --min-batch")]
    MinBatchAboveBatch { min: u64, flag: String, batch: u64 },
    #[error("{batch_flag} {batch} × {accum_flag} {accum} (the effective batch) does not fit in 64 bits: lower them")]
    EffectiveBatchOverflow {
        batch_flag: String,
        batch: u64,
        accum_flag: String,
        accum: u64,
    },
}

/// Reads the places of knobs and caches each config file once.
pub(crate) struct Reader<'a> {
    pub(crate) request: &'a Request<'a>,
    pub(crate) files: Vec<ConfigFile>,
    by_path: HashMap<PathBuf, usize>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(request: &'a Request<'a>) -> Self {
        Reader {
            request,
            files: Vec::new(),
            by_path: HashMap::new(),
        }
    }

    /// The index of `path` among the run's files, read on first use.
    pub(crate) fn file(&mut self, path: &Path, who: &str) -> Result<usize, KnobError> {
        let fail = |problem: String| KnobError::Knob {
            where_: who.to_string(),
            problem,
        };
        let shown = path.display();
        let format = Format::from_path(path).ok_or_else(|| {
            fail(format!(
                "{shown}: oomguard edits .yaml/.yml, .json, .toml and .py files only"
            ))
        })?;
        let absolute = self.request.cwd.join(path);
        // As the job's user when a root oomguard acts for one: a symlink of theirs leads only
        // where they could go themselves.
        let canonical = crate::guard::principal::as_user(|| std::fs::canonicalize(&absolute))
            .map_err(|e| fail(format!("cannot open config file {shown}: {e}")))?;
        if let Some(&i) = self.by_path.get(&canonical) {
            return Ok(i);
        }
        if self.request.finish_left_patches {
            crate::knobs::patch::finish_left_beside(&canonical);
        }
        let bytes = crate::guard::principal::as_user(|| {
            crate::guard::fsutil::read_regular_capped(
                &canonical,
                crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
            )
        })
        .map_err(|e| fail(format!("cannot read config file {shown}: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| fail(format!("config file {shown} is not UTF-8 text")))?;
        let in_command = argv::find_path(self.request.command, &canonical, self.request.cwd);
        self.files.push(ConfigFile {
            path: path.to_path_buf(),
            format,
            text,
            in_command,
        });
        self.by_path.insert(canonical, self.files.len() - 1);
        Ok(self.files.len() - 1)
    }

    /// The value at `key` in file `i` as the file spells it (`6.4e1`, `0x40`), for messages.
    pub(crate) fn file_text(&self, i: usize, key: &str) -> Option<String> {
        let f = &self.files[i];
        let found = file::locate(f.format, &f.text, key).ok()?;
        f.text.get(found.span).map(str::to_string)
    }

    /// The value at `key` in file `i`.
    pub(crate) fn file_value(&self, i: usize, key: &str, who: &str) -> Result<Value, KnobError> {
        let f = &self.files[i];
        file::locate(f.format, &f.text, key)
            .map(|found| Value::from_scalar(&found.value))
            .map_err(|e| KnobError::Knob {
                where_: who.to_string(),
                problem: match e {
                    EditError::NotFound { .. } => {
                        format!("key {key} is not in {}", f.path.display())
                    }
                    other => format!("{}: {other}", f.path.display()),
                },
            })
    }
}

/// A knob's value that must be a whole number of at least `min`. `written`: the value as its
/// file spells it, quoted in the message (JSON's `6.4e1` reads as 64, which would puzzle).
pub fn count(
    value: &Value,
    min: u64,
    label: &str,
    who: &str,
    written: Option<&str>,
) -> Result<u64, KnobError> {
    match value {
        Value::Int(n) if *n >= min => Ok(*n),
        other => Err(KnobError::Knob {
            where_: who.to_string(),
            problem: format!(
                "{label} is {}, not a whole number{}: oomguard steps an integer",
                match other {
                    Value::Unset => "not set".to_string(),
                    v => format!(
                        "`{}`",
                        written.map_or_else(|| v.to_string(), str::to_string)
                    ),
                },
                if min > 0 {
                    format!(" of at least {min}")
                } else {
                    String::new()
                }
            ),
        }),
    }
}

/// The job's value of variable `name`.
pub fn env_value(name: &str, who: &str) -> Result<Value, KnobError> {
    env::current(name).map_err(|_| KnobError::Knob {
        where_: who.to_string(),
        problem: format!("{name} is not UTF-8 text"),
    })
}

/// A place as an error message names it.
pub fn label_of(place: &Place, files: &[ConfigFile]) -> String {
    match place {
        Place::Argv(p) => p.name().to_string(),
        Place::Env(name) => name.clone(),
        Place::File { file, key } => format!("{key} ({})", files[*file].path.display()),
        Place::Inside { field, .. } => field.clone(),
    }
}
