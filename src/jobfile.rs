//! The `--config FILE` TOML: reads its `[[knob]]` ladder and checks it whole before anything
//! starts, so every mistake a user can make in it (a typo in a key, two places for one knob, a
//! partner that does not exist, a cause that is never relaunched smaller) is one line naming
//! the file, the line and the knob, with the fix. The file is parsed with `toml_edit`, whose
//! document keeps each key's and table's byte span, so messages point at the line where the
//! mistake is.
//!
//! The same file can carry the job itself, for unattended runs ([`JobPart`]): its `name`,
//! `command` (a list, never a shell string), `workdir`, `[env]`, `user`/`group`, and a `[run]`
//! table of `oomguard run`'s long options (`max_attempts = 10`). The keys `[run]` accepts, and
//! what their values mean, come from the clap definition of `oomguard run` itself: each value
//! is turned into the flag's own text (`--max-attempts=10`) and parsed by clap, here key by key
//! so that a bad value names its line, and again by `cli` together with the command line.
//!
//! This module is pure: text in, validated [`KnobSpec`]s and [`JobPart`] out (plus [`load`],
//! which only reads the file). It does not look at the job's command, environment, config files,
//! users or directories: whether a flag is in the command, a key in a file, a user in the passwd
//! database or the workdir on disk is checked by whoever uses the specs (`knobs::resolve`,
//! `runas`). An unknown top-level key is an error naming it.

use std::path::{Path, PathBuf};

use toml_edit::{Document, Item, Table, TableLike, Value as TomlValue};

use crate::classify::Cause;
use crate::knobs::file::{line_of, Format};
use crate::knobs::Value;

/// `--config FILE`, validated: the knob ladder and the job. Any other top-level key is an error
/// naming it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobFile {
    /// The `[[knob]]` tables in file order, which is the order they are tried in. Empty when
    /// the file has none: then knobs are found automatically, as without `--config`.
    pub knobs: Vec<KnobSpec>,
    /// The job the file describes (every part optional).
    pub job: JobPart,
}

/// The job part of a job file: what runs, where, as whom, and with which `oomguard run` options.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobPart {
    /// The file as named in messages (`FILE:LINE: ...`), for checks made after parsing.
    pub file: String,
    /// `command = ["python", "train.py", ...]`: run when the command line gives none.
    pub command: Option<Vec<String>>,
    /// `workdir = "DIR"` as written (relative to the file's directory).
    pub workdir: Option<Located<PathBuf>>,
    /// `[env]`: variables set for the job, in file order.
    pub env: Vec<(String, String)>,
    /// `user = "NAME"`: whom the job runs as (oomguard itself stays who it is).
    pub user: Option<Located<String>>,
    /// `group = "NAME"`: the job's primary group instead of the user's own.
    pub group: Option<Located<String>>,
    /// Whether `command` was given (for the root-without-user warning).
    pub has_command: bool,
    /// The `[run]` options, and the top-level `name` as `--name`, in file order.
    pub run: Vec<RunOption>,
    /// How the file was reached when it was read ([`load`]); `None` when parsed from text.
    pub opened: Option<crate::pathwalk::Opened>,
}

/// A value with the 1-based line it was written on.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<T> {
    pub value: T,
    pub line: usize,
}

/// One `[run]` key as the flag text clap parses.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOption {
    /// The key as written (`max_attempts`).
    pub key: String,
    /// The clap argument id it sets (`max_attempts`).
    pub id: String,
    /// Where it is written.
    pub line: usize,
    /// The flag text: `--max-attempts=10`, `--no-pty`, or nothing for `false`.
    pub tokens: Vec<String>,
}

impl JobPart {
    /// A one-line error about something at `line` of this file, found after parsing.
    pub fn error(
        &self,
        line: usize,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> JobFileError {
        JobFileError::Invalid {
            file: self.file.clone(),
            line,
            knob: None,
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// The top-level keys of a job file, as messages list them.
pub const TOP_LEVEL_KEYS: &str = "name, command, workdir, user, group, [env], [run], [[knob]]";

/// One `[[knob]]` table, every key checked.
#[derive(Debug, Clone, PartialEq)]
pub struct KnobSpec {
    /// Unique within the file; used in messages, summary.json and the final table.
    pub name: String,
    /// Where the job keeps the value.
    pub place: PlaceSpec,
    /// How one step moves it.
    pub moves: Moves,
    /// Another knob's name, checked to exist, not itself, and to be an integer knob.
    pub keep_product_with: Option<String>,
    /// Causes it answers; `None` = the default (every cause relaunched smaller).
    pub on: Option<Vec<Cause>>,
    /// 1-based line of its `[[knob]]` header, for later messages.
    pub line: usize,
}

/// Where a knob's value lives: exactly one per knob.
#[derive(Debug, Clone, PartialEq)]
pub enum PlaceSpec {
    /// `flag = "--batch_size"` (may carry `@N` for part N: leave the text as written).
    Flag(String),
    /// `override = "training.batch_size"` (a Hydra/OmegaConf `key=value` token).
    Override(String),
    /// `env = "PYTORCH_CUDA_ALLOC_CONF"`.
    Env(String),
    /// `file = "configs/default.yaml"` + `key = "training.batch_size"`; path as written.
    File { path: PathBuf, key: String },
}

/// How a knob moves when it takes a step.
#[derive(Debug, Clone, PartialEq)]
pub enum Moves {
    /// An integer knob: `step` ("halve" default, or a negative integer like -1) and `min`
    /// (default 1; 0 allowed).
    Step { step: Step, min: u64 },
    /// `set = VALUE`: one step, to that value (bool, integer, float or string).
    Set(Value),
}

/// One step of an integer knob: `step = "halve"` (the default) or `step = -N`.
pub use crate::policy::Step;

/// Why a `--config` file cannot be used. Each displays as one line; the caller exits 2.
#[derive(Debug, thiserror::Error)]
pub enum JobFileError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{}: cannot read the --config file: {source}; check the path and its permissions", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file reads but says something wrong: `FILE:LINE: knob "NAME": problem; fix`.
    #[error("{}", invalid_line(file, *line, knob.as_deref(), problem, fix))]
    Invalid {
        /// The file as the user named it.
        file: String,
        /// 1-based line of the mistake (the key's line, else its `[[knob]]` header's).
        line: usize,
        /// The knob's name, when the mistake is inside a named knob.
        knob: Option<String>,
        /// What is wrong.
        problem: String,
        /// What to write instead.
        fix: String,
    },
}

fn invalid_line(file: &str, line: usize, knob: Option<&str>, problem: &str, fix: &str) -> String {
    match knob {
        Some(name) => format!("{file}:{line}: knob {name:?}: {problem}; {fix}"),
        None => format!("{file}:{line}: {problem}; {fix}"),
    }
}

/// The keys a `[[knob]]` table may hold, in the order the README documents them.
pub const KNOB_KEYS: [&str; 11] = [
    "name",
    "flag",
    "override",
    "env",
    "file",
    "key",
    "step",
    "min",
    "set",
    "keep_product_with",
    "on",
];

/// The keys that name a place; exactly one per knob (`file` goes with `key`).
const PLACE_KEYS: [&str; 4] = ["flag", "override", "env", "file"];

/// Words users reach for that mean one of [`KNOB_KEYS`], beyond what edit distance catches.
const KEY_SYNONYMS: [(&str, &str); 14] = [
    ("floor", "min"),
    ("minimum", "min"),
    ("value", "set"),
    ("to", "set"),
    ("partner", "keep_product_with"),
    ("keep_product", "keep_product_with"),
    ("accum", "keep_product_with"),
    ("causes", "on"),
    ("cause", "on"),
    ("when", "on"),
    ("arg", "flag"),
    ("path", "file"),
    ("var", "env"),
    ("hydra", "override"),
];

/// Reads and validates the `--config` file at `path`; a read error is one line with the path
/// and the OS's reason. The file is opened once ([`crate::pathwalk`]): the bytes parsed are
/// those of the file whose path is later checked for who could have written it.
pub fn load(path: &Path) -> Result<JobFile, JobFileError> {
    let read_error = |source| JobFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let (bytes, opened) = crate::pathwalk::read(path).map_err(read_error)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it is not UTF-8 text",
        ))
    })?;
    let mut file = parse(&path.display().to_string(), &text)?;
    file.job.opened = Some(opened);
    Ok(file)
}

/// Parses and validates a `--config` file's `text`; `file_label` names it in messages.
pub fn parse(file_label: &str, text: &str) -> Result<JobFile, JobFileError> {
    let ctx = Ctx {
        file: file_label,
        text,
    };
    let doc = Document::parse(text).map_err(|err| ctx.syntax(&err))?;
    let root = doc.as_table();

    let mut parsed = Vec::new();
    let mut job = JobPart {
        file: file_label.to_string(),
        ..JobPart::default()
    };
    for (key, item) in root.iter() {
        let line = ctx.key_line(root, key);
        if JOB_KEYS.contains(&key) {
            ctx.job_key(&mut job, key, item, line)?;
            continue;
        }
        match (key, item) {
            ("knob", Item::ArrayOfTables(tables)) => {
                for (index, table) in tables.iter().enumerate() {
                    parsed.push(ctx.knob(index, table)?);
                }
            }
            ("knob", other) => {
                return Err(ctx.invalid(
                    line,
                    None,
                    format!("`knob` is {}, not [[knob]] tables", describe(other)),
                    "write each knob as its own table under a `[[knob]]` header (two brackets)",
                ))
            }
            (other, _) => {
                let mut candidates = JOB_KEYS.to_vec();
                candidates.push("knob");
                let hint = match closest(other, &candidates) {
                    Some("knob") => "did you mean [[knob]]? ".to_string(),
                    Some(near) => format!("did you mean {near:?}? "),
                    None if run_keys().iter().any(|(key, _)| key == other) => {
                        format!("{other} is an option of oomguard run: put it in the [run] table; ")
                    }
                    None => String::new(),
                };
                return Err(ctx.invalid(
                    line,
                    None,
                    format!("unknown top-level key {other:?}"),
                    format!("{hint}known top-level keys: {TOP_LEVEL_KEYS}"),
                ));
            }
        }
    }

    ctx.check_names(&parsed)?;
    ctx.check_partners(&parsed)?;
    ctx.check_run_together(root, &job)?;
    Ok(JobFile {
        knobs: parsed.into_iter().map(|knob| knob.spec).collect(),
        job,
    })
}

/// A knob as parsed, with the lines later checks point at.
struct Parsed {
    spec: KnobSpec,
    name_line: usize,
    partner_line: usize,
}

impl Parsed {
    fn is_set(&self) -> bool {
        matches!(self.spec.moves, Moves::Set(_))
    }
}

/// The file being read, for line numbers and messages.
struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn invalid(
        &self,
        line: usize,
        knob: Option<&str>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> JobFileError {
        JobFileError::Invalid {
            file: self.file.to_string(),
            line,
            knob: knob.map(str::to_string),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    fn syntax(&self, err: &toml_edit::TomlError) -> JobFileError {
        // toml_edit's message may be several lines (a snippet with a caret): keep the first.
        let message = err
            .message()
            .lines()
            .next()
            .unwrap_or("invalid TOML")
            .trim();
        let line = err.span().map_or(1, |span| line_of(self.text, span.start));
        self.invalid(
            line,
            None,
            format!("not valid TOML: {message}"),
            "fix the syntax on that line (strings in double quotes, one `key = value` per line)",
        )
    }

    /// A value as the user wrote it, without the spaces and comment around it.
    fn shown(&self, item: &Item) -> String {
        item.span()
            .and_then(|span| self.text.get(span))
            .map_or_else(|| describe(item).to_string(), str::to_string)
    }

    fn line_at(&self, span: Option<std::ops::Range<usize>>) -> usize {
        span.map_or(1, |span| line_of(self.text, span.start))
    }

    /// The line of `key` in `table`, falling back to its value's.
    fn key_line(&self, table: &Table, key: &str) -> usize {
        let span = table
            .key(key)
            .and_then(|k| k.span())
            .or_else(|| table.get(key).and_then(Item::span));
        self.line_at(span)
    }

    /// One `[[knob]]` table: every check that needs only this table.
    fn knob(&self, index: usize, table: &Table) -> Result<Parsed, JobFileError> {
        let header_line = self.line_at(table.span());

        // The name first, so that every later message can say which knob it is about.
        let name_line = self.key_line(table, "name");
        let name = match table.get("name") {
            None => None,
            Some(item) => Some(self.string(item, name_line, None, "name", "\"batch\"")?),
        };
        let label = name.as_deref();
        if name.as_deref() == Some("") {
            return Err(self.invalid(
                name_line,
                None,
                "empty name",
                "give the knob a name, e.g. name = \"batch\"",
            ));
        }

        for (key, _) in table.iter() {
            if !KNOB_KEYS.contains(&key) {
                let hint = match meant_key(key) {
                    Some(near) => format!("did you mean {near:?}? "),
                    None => String::new(),
                };
                return Err(self.invalid(
                    self.key_line(table, key),
                    label,
                    format!("unknown key {key:?}"),
                    format!("{hint}known keys: {}", KNOB_KEYS.join(", ")),
                ));
            }
        }
        let Some(name) = name else {
            return Err(self.invalid(
                header_line,
                None,
                format!("the {} [[knob]] has no name", ordinal(index + 1)),
                "add name = \"...\" (unique; used in messages and summary.json)",
            ));
        };
        let label = Some(name.as_str());

        // Read every present key with its line; its type is checked here, its meaning below.
        let get = |key: &str| table.get(key).map(|item| (item, self.key_line(table, key)));

        let place = self.place(table, header_line, label)?;

        let set = match get("set") {
            None => None,
            Some((item, line)) => Some((self.set_value(item, line, label)?, line)),
        };
        let step = match get("step") {
            None => None,
            Some((item, line)) => Some((self.step(item, line, label)?, line)),
        };
        let min = match get("min") {
            None => None,
            Some((item, line)) => Some((self.min(item, line, label)?, line)),
        };
        let moves =
            match (set, step, min) {
                (Some(_), Some((_, line)), _) => return Err(self.invalid(
                    line,
                    label,
                    "both step and set",
                    "keep one: step (with min) moves an integer down, set jumps once to a value",
                )),
                (Some(_), None, Some((_, line))) => {
                    return Err(self.invalid(
                        line,
                        label,
                        "min on a set knob",
                        "remove min: a set knob takes one step, to its set value",
                    ))
                }
                (Some((value, _)), None, None) => Moves::Set(value),
                (None, step, min) => Moves::Step {
                    step: step.map_or(Step::Halve, |(step, _)| step),
                    min: min.map_or(1, |(min, _)| min),
                },
            };

        let partner = self.opt_string(table, label, "keep_product_with", "\"accum\"")?;
        let partner_line = partner.as_ref().map_or(header_line, |(_, line)| *line);
        if partner.is_some() && matches!(moves, Moves::Set(_)) {
            return Err(self.invalid(
                partner_line,
                label,
                "keep_product_with on a set knob",
                "remove it, or make this an integer knob (step/min instead of set)",
            ));
        }

        let on = match get("on") {
            None => None,
            Some((item, line)) => Some(self.causes(item, line, label)?),
        };

        Ok(Parsed {
            spec: KnobSpec {
                name,
                place,
                moves,
                keep_product_with: partner.map(|(partner, _)| partner),
                on,
                line: header_line,
            },
            name_line,
            partner_line,
        })
    }

    /// Exactly one of flag, override, env, or file + key.
    fn place(
        &self,
        table: &Table,
        header_line: usize,
        label: Option<&str>,
    ) -> Result<PlaceSpec, JobFileError> {
        let string = |key: &str, example: &str| self.opt_string(table, label, key, example);
        let given: Vec<&str> = PLACE_KEYS
            .into_iter()
            .filter(|key| table.contains_key(key))
            .collect();
        let key = string("key", "\"training.batch_size\"")?;
        match given.as_slice() {
            [] => {
                let (problem, fix) = match &key {
                    Some(_) => (
                        "key without file",
                        "add file = \"PATH\" (the config file holding the key), or use override = \"KEY\" for a Hydra override on the command line",
                    ),
                    None => (
                        "no place",
                        "give exactly one of flag = \"--batch_size\", override = \"training.batch_size\", env = \"NAME\", or file = \"PATH\" with key = \"dotted.key\"",
                    ),
                };
                let line = key.as_ref().map_or(header_line, |(_, line)| *line);
                return Err(self.invalid(line, label, problem, fix));
            }
            [_] => {}
            [first, second, ..] => {
                return Err(self.invalid(
                    self.key_line(table, second),
                    label,
                    format!("two places ({first} and {second})"),
                    "keep exactly one: a knob lives in one place (make two knobs for two places)",
                ))
            }
        }
        if given[0] != "file" {
            if let Some((_, line)) = key {
                return Err(self.invalid(
                    line,
                    label,
                    format!("key with {}", given[0]),
                    "key goes only with file = \"PATH\": remove it",
                ));
            }
        }
        let (text, line) = string(given[0], place_example(given[0]))?
            .expect("the place key was found in the table just above");
        Ok(match given[0] {
            "flag" => {
                let bare = text.trim_start_matches('-');
                if !text.starts_with('-') || bare.is_empty() {
                    let example = if bare.is_empty() { "batch_size" } else { bare };
                    return Err(self.invalid(
                        line,
                        label,
                        format!("flag {text:?} is not an option"),
                        format!(
                            "write it as the command spells it, dashes included, e.g. flag = \"--{example}\""
                        ),
                    ));
                }
                PlaceSpec::Flag(text)
            }
            "override" => {
                if text.contains('=') || text.starts_with('-') || text.contains(char::is_whitespace)
                {
                    return Err(self.invalid(
                        line,
                        label,
                        format!("override {text:?} is not a Hydra key"),
                        "write the key alone, without a value or dashes, e.g. override = \"training.batch_size\" (flag = \"--x\" for an option)",
                    ));
                }
                PlaceSpec::Override(text)
            }
            "env" => {
                let valid = text.chars().enumerate().all(|(i, c)| {
                    c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
                });
                if !valid {
                    return Err(self.invalid(
                        line,
                        label,
                        format!("env {text:?} is not a variable name"),
                        "write the name alone (letters, digits, _), e.g. env = \"PYTORCH_CUDA_ALLOC_CONF\"",
                    ));
                }
                PlaceSpec::Env(text)
            }
            "file" => {
                let Some((key, _)) = key else {
                    return Err(self.invalid(
                        line,
                        label,
                        "file without key",
                        format!(
                            "add key = \"dotted.key\" naming the value inside {text} (e.g. key = \"training.batch_size\")"
                        ),
                    ));
                };
                let path = PathBuf::from(&text);
                if Format::from_path(&path).is_none() {
                    return Err(self.invalid(
                        line,
                        label,
                        format!("file {text:?} is not a format oomguard edits"),
                        "name a .yaml/.yml, .json, .toml or .py file",
                    ));
                }
                PlaceSpec::File { path, key }
            }
            other => unreachable!("PLACE_KEYS holds only flag, override, env, file, not {other}"),
        })
    }

    /// The non-empty string at `key` with its line, if present; else a one-line error.
    fn opt_string(
        &self,
        table: &Table,
        label: Option<&str>,
        key: &str,
        example: &str,
    ) -> Result<Option<(String, usize)>, JobFileError> {
        let Some(item) = table.get(key) else {
            return Ok(None);
        };
        let line = self.key_line(table, key);
        let text = self.string(item, line, label, key, example)?;
        if text.is_empty() {
            return Err(self.invalid(
                line,
                label,
                format!("{key} is empty"),
                format!("write {key} = {example}"),
            ));
        }
        Ok(Some((text, line)))
    }

    /// A string value, or a one-line type error.
    fn string(
        &self,
        item: &Item,
        line: usize,
        label: Option<&str>,
        key: &str,
        example: &str,
    ) -> Result<String, JobFileError> {
        match item.as_str() {
            Some(text) => Ok(text.to_string()),
            None => Err(self.invalid(
                line,
                label,
                format!("{key} must be a string, not {}", describe(item)),
                format!("write {key} = {example}"),
            )),
        }
    }

    fn step(&self, item: &Item, line: usize, label: Option<&str>) -> Result<Step, JobFileError> {
        match item.as_value() {
            Some(TomlValue::String(text)) if text.value() == "halve" => Ok(Step::Halve),
            Some(TomlValue::Integer(n)) if *n.value() < 0 => Ok(Step::Minus(n.value().unsigned_abs())),
            _ => Err(self.invalid(
                line,
                label,
                format!(
                    "step = {} is neither \"halve\" nor a negative integer",
                    self.shown(item)
                ),
                "write step = \"halve\" (the default) or a negative integer to subtract, e.g. step = -1",
            )),
        }
    }

    fn min(&self, item: &Item, line: usize, label: Option<&str>) -> Result<u64, JobFileError> {
        match item.as_integer() {
            Some(n) => u64::try_from(n).map_err(|_| {
                self.invalid(
                    line,
                    label,
                    format!("min = {n} is negative"),
                    "write min = 0 or more (the default is 1)",
                )
            }),
            None => Err(self.invalid(
                line,
                label,
                format!("min must be an integer, not {}", describe(item)),
                "write e.g. min = 1 (0 allowed, e.g. for workers)",
            )),
        }
    }

    fn set_value(
        &self,
        item: &Item,
        line: usize,
        label: Option<&str>,
    ) -> Result<Value, JobFileError> {
        match item.as_value() {
            Some(TomlValue::Boolean(b)) => Ok(Value::Bool(*b.value())),
            Some(TomlValue::Float(x)) => Ok(Value::Float(*x.value())),
            Some(TomlValue::String(s)) => Ok(Value::Str(s.value().clone())),
            Some(TomlValue::Integer(n)) => {
                u64::try_from(*n.value()).map(Value::Int).map_err(|_| {
                    self.invalid(
                        line,
                        label,
                        format!("set = {} is negative", n.value()),
                        "set a value of 0 or more: no knob value is negative",
                    )
                })
            }
            _ => Err(self.invalid(
                line,
                label,
                format!(
                    "set must be a boolean, integer, float or string, not {}",
                    describe(item)
                ),
                "write e.g. set = false, set = 0, set = \"expandable_segments:True\"",
            )),
        }
    }

    /// `on = ["oom_killed", ...]`: known cause names, each one that is relaunched smaller.
    fn causes(
        &self,
        item: &Item,
        line: usize,
        label: Option<&str>,
    ) -> Result<Vec<Cause>, JobFileError> {
        let memory: Vec<&str> = Cause::ALL
            .iter()
            .filter(|cause| cause.is_memory())
            .map(|cause| cause.as_str())
            .collect();
        let known = format!("use names from: {}", memory.join(", "));
        let Some(array) = item.as_array() else {
            return Err(self.invalid(
                line,
                label,
                format!("on must be a list of cause names, not {}", describe(item)),
                format!("write e.g. on = [\"oom_killed\", \"host_oom\"]; {known}"),
            ));
        };
        if array.is_empty() {
            return Err(self.invalid(
                line,
                label,
                "on = [] answers no cause",
                format!("remove on to answer every cause relaunched smaller, or {known}"),
            ));
        }
        let mut causes = Vec::new();
        for element in array.iter() {
            let Some(text) = element.as_str() else {
                return Err(self.invalid(
                    line,
                    label,
                    format!("on holds {}, not a cause name", describe_value(element)),
                    format!("write names in double quotes; {known}"),
                ));
            };
            let Some(cause) = Cause::from_name(text) else {
                let hint = match closest(text, &memory) {
                    Some(near) => format!("did you mean {near:?}? "),
                    None => String::new(),
                };
                return Err(self.invalid(
                    line,
                    label,
                    format!("on names {text:?}, which is not a cause"),
                    format!("{hint}{known}"),
                ));
            };
            if !cause.is_memory() {
                return Err(self.invalid(
                    line,
                    label,
                    format!("on names {text:?}, which is never relaunched smaller"),
                    format!("remove it; {known}"),
                ));
            }
            if !causes.contains(&cause) {
                causes.push(cause);
            }
        }
        Ok(causes)
    }

    /// Names are unique.
    fn check_names(&self, parsed: &[Parsed]) -> Result<(), JobFileError> {
        for (index, knob) in parsed.iter().enumerate() {
            if let Some(first) = parsed[..index]
                .iter()
                .find(|k| k.spec.name == knob.spec.name)
            {
                return Err(self.invalid(
                    knob.name_line,
                    Some(&knob.spec.name),
                    format!("the name is used twice (first at line {})", first.name_line),
                    "give each knob its own name",
                ));
            }
        }
        Ok(())
    }

    /// Each `keep_product_with` names another integer knob of this file that has no partner of
    /// its own (a chain would move a third knob the user never tied to the first).
    fn check_partners(&self, parsed: &[Parsed]) -> Result<(), JobFileError> {
        let names: Vec<&str> = parsed.iter().map(|k| k.spec.name.as_str()).collect();
        for knob in parsed {
            let Some(partner) = &knob.spec.keep_product_with else {
                continue;
            };
            let at = |problem: String, fix: String| {
                self.invalid(knob.partner_line, Some(&knob.spec.name), problem, fix)
            };
            if *partner == knob.spec.name {
                return Err(at(
                    "keep_product_with names the knob itself".to_string(),
                    "name the accumulation knob whose value rises as this one falls".to_string(),
                ));
            }
            let Some(other) = parsed.iter().find(|k| k.spec.name == *partner) else {
                let others: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|name| *name != knob.spec.name)
                    .collect();
                let hint = match closest(partner, &others) {
                    Some(near) => format!("did you mean {near:?}? "),
                    None => String::new(),
                };
                let listed = if others.is_empty() {
                    "add a [[knob]] for the accumulation setting".to_string()
                } else {
                    format!("knobs in this file: {}", others.join(", "))
                };
                return Err(at(
                    format!("keep_product_with = {partner:?} names no knob in this file"),
                    format!("{hint}{listed}"),
                ));
            };
            if other.is_set() {
                return Err(at(
                    format!("keep_product_with = {partner:?} names a set knob"),
                    format!("the partner must be an integer knob: remove set from {partner:?}"),
                ));
            }
            if other.spec.keep_product_with.is_some() {
                return Err(at(
                    format!("keep_product_with = {partner:?} names a knob that has a partner of its own"),
                    format!("remove keep_product_with from {partner:?}: a partner is moved only as this knob's"),
                ));
            }
        }
        Ok(())
    }
}

/// The top-level keys of the job part (beside `[[knob]]`).
const JOB_KEYS: [&str; 7] = ["name", "command", "workdir", "env", "user", "group", "run"];

/// `oomguard run`'s long options that `[run]` does not take, each with where it goes instead.
const NOT_IN_RUN: [(&str, &str); 3] = [
    ("config", "the job file is the config: remove it"),
    (
        "name",
        "the job's name is a top-level key: move it above [run]",
    ),
    ("help", "remove it"),
];

/// The keys `[run]` accepts, from the clap definition of `oomguard run`: each long option with
/// `_` for `-`, and its argument (whose action says how a TOML value becomes flag text).
pub fn run_keys() -> Vec<(String, clap::Arg)> {
    crate::cli::run_command()
        .get_arguments()
        .filter(|arg| !NOT_IN_RUN.iter().any(|(id, _)| arg.get_id() == *id))
        .filter_map(|arg| Some((arg.get_long()?.replace('-', "_"), arg.clone())))
        .collect()
}

/// Parses `run <tokens>` as `oomguard run` would; relations between options (one that
/// requires another, given on the command line perhaps) are left to the caller's full parse.
fn parse_run_tokens<'t>(tokens: impl IntoIterator<Item = &'t String>) -> Result<(), clap::Error> {
    let argv = std::iter::once("run").chain(tokens.into_iter().map(String::as_str));
    match crate::cli::run_command().try_get_matches_from(argv) {
        Err(err) if err.kind() == clap::error::ErrorKind::MissingRequiredArgument => Ok(()),
        Err(err) => Err(err),
        Ok(_) => Ok(()),
    }
}

impl Ctx<'_> {
    /// The line of `key` in a table or inline table.
    fn key_line_like(&self, table: &dyn TableLike, key: &str) -> usize {
        let span = table
            .get_key_value(key)
            .and_then(|(k, item)| k.span().or_else(|| item.span()));
        self.line_at(span)
    }

    /// A non-empty string at a top-level key.
    fn job_string(
        &self,
        item: &Item,
        line: usize,
        key: &str,
        example: &str,
    ) -> Result<String, JobFileError> {
        let text = self.string(item, line, None, key, example)?;
        if text.is_empty() {
            return Err(self.invalid(
                line,
                None,
                format!("{key} is empty"),
                format!("write {key} = {example}"),
            ));
        }
        Ok(text)
    }

    /// One top-level key of the job part, into `job`.
    fn job_key(
        &self,
        job: &mut JobPart,
        key: &str,
        item: &Item,
        line: usize,
    ) -> Result<(), JobFileError> {
        match key {
            "name" => {
                let name = self.job_string(item, line, "name", "\"nightly\"")?;
                if crate::jobs::name::check_name(&name).is_err() {
                    return Err(self.invalid(
                        line,
                        None,
                        format!("name {name:?} is not usable as a job name"),
                        "use letters, digits, '.', '_' and '-', not starting with '.' (it names the job's state file)",
                    ));
                }
                job.run.push(RunOption {
                    key: "name".into(),
                    id: "name".into(),
                    line,
                    tokens: vec![format!("--name={name}")],
                });
            }
            "command" => job.command = Some(self.command(item, line)?),
            "workdir" => {
                let dir = self.job_string(item, line, "workdir", "\"/srv/train\"")?;
                job.workdir = Some(Located {
                    value: PathBuf::from(dir),
                    line,
                });
            }
            "user" => {
                let user = self.job_string(item, line, "user", "\"alice\"")?;
                job.user = Some(Located { value: user, line });
            }
            "group" => {
                let group = self.job_string(item, line, "group", "\"ml\"")?;
                job.group = Some(Located { value: group, line });
            }
            "env" => job.env = self.env(item, line)?,
            "run" => job.run.extend(self.run_table(item, line)?),
            other => unreachable!("JOB_KEYS holds no {other}"),
        }
        job.has_command = job.command.is_some();
        Ok(())
    }

    /// `command = ["python", "train.py", ...]`: a non-empty list of strings, never one string
    /// (which would need a shell to split, and oomguard runs no shell).
    fn command(&self, item: &Item, line: usize) -> Result<Vec<String>, JobFileError> {
        const EXAMPLE: &str = "write command = [\"python\", \"train.py\", \"--batch_size\", \"8\"]";
        let Some(array) = item.as_array() else {
            let why = match item.as_str() {
                Some(_) => "command must be a list of strings, not a string (oomguard runs no shell to split it)".to_string(),
                None => format!("command must be a list of strings, not {}", describe(item)),
            };
            return Err(self.invalid(
                line,
                None,
                why,
                format!("{EXAMPLE}; for a shell, write [\"sh\", \"-c\", \"...\"]"),
            ));
        };
        let mut argv = Vec::new();
        for element in array.iter() {
            match element.as_str() {
                Some(text) => argv.push(text.to_string()),
                None => {
                    return Err(self.invalid(
                        line,
                        None,
                        format!("command holds {}, not a string", describe_value(element)),
                        format!("quote every argument, numbers too: {EXAMPLE}"),
                    ))
                }
            }
        }
        match argv.first() {
            None => Err(self.invalid(line, None, "command = [] runs nothing", EXAMPLE)),
            Some(program) if program.is_empty() => Err(self.invalid(
                line,
                None,
                "command starts with an empty program name",
                EXAMPLE,
            )),
            Some(_) => Ok(argv),
        }
    }

    /// `[env]`: `NAME = "value"` pairs.
    fn env(&self, item: &Item, line: usize) -> Result<Vec<(String, String)>, JobFileError> {
        let Some(table) = item.as_table_like() else {
            return Err(self.invalid(
                line,
                None,
                format!("env must be a table, not {}", describe(item)),
                "write an [env] table with one NAME = \"value\" per line",
            ));
        };
        let mut vars = Vec::new();
        for (name, value) in table.iter() {
            let line = self.key_line_like(table, name);
            let valid = !name.is_empty()
                && name.chars().enumerate().all(|(i, c)| {
                    c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
                });
            if !valid {
                return Err(self.invalid(
                    line,
                    None,
                    format!("[env] {name:?} is not a variable name"),
                    "use letters, digits and _, not starting with a digit",
                ));
            }
            let Some(text) = value.as_str() else {
                return Err(self.invalid(
                    line,
                    None,
                    format!("[env] {name} must be a string, not {}", describe(value)),
                    format!(
                        "quote the value, numbers too: {name} = \"{}\"",
                        self.shown(value).trim_matches('"')
                    ),
                ));
            };
            vars.push((name.to_string(), text.to_string()));
        }
        Ok(vars)
    }

    /// `[run]`: each key a long option of `oomguard run`, each value checked by clap.
    fn run_table(&self, item: &Item, line: usize) -> Result<Vec<RunOption>, JobFileError> {
        let Some(table) = item.as_table_like() else {
            return Err(self.invalid(
                line,
                None,
                format!("run must be a table, not {}", describe(item)),
                "write a [run] table with one option per line, e.g. max_attempts = 10",
            ));
        };
        let known = run_keys();
        let mut options = Vec::new();
        for (key, value) in table.iter() {
            let line = self.key_line_like(table, key);
            let Some((_, arg)) = known.iter().find(|(known, _)| known == key) else {
                return Err(self.unknown_run_key(key, line, &known));
            };
            let tokens = self.run_tokens(key, arg, value, line)?;
            if let Err(err) = parse_run_tokens(&tokens) {
                return Err(self.invalid(
                    line,
                    None,
                    format!(
                        "[run] {key} = {}: {}",
                        self.shown(value),
                        crate::cli::clap_message(&err)
                    ),
                    format!(
                        "write the value as for --{} (see `oomguard run --help`)",
                        arg.get_long().unwrap_or(key)
                    ),
                ));
            }
            options.push(RunOption {
                key: key.to_string(),
                id: arg.get_id().to_string(),
                line,
                tokens,
            });
        }
        Ok(options)
    }

    fn unknown_run_key(
        &self,
        key: &str,
        line: usize,
        known: &[(String, clap::Arg)],
    ) -> JobFileError {
        if let Some((_, instead)) = NOT_IN_RUN.iter().find(|(id, _)| *id == key) {
            return self.invalid(line, None, format!("[run] cannot set {key}"), *instead);
        }
        if JOB_KEYS.contains(&key) || key == "command" {
            return self.invalid(
                line,
                None,
                format!("[run] {key}: {key} is a top-level key"),
                "move it above the [run] header",
            );
        }
        let names: Vec<&str> = known.iter().map(|(name, _)| name.as_str()).collect();
        let underscored = key.replace('-', "_");
        let hint = if names.contains(&underscored.as_str()) {
            format!("did you mean {underscored:?} (_ for -)? ")
        } else {
            match closest(&underscored, &names) {
                Some(near) => format!("did you mean {near:?}? "),
                None => String::new(),
            }
        };
        self.invalid(
            line,
            None,
            format!("[run] unknown key {key:?}"),
            format!("{hint}[run] takes the long options of `oomguard run` with _ for - (see `oomguard run --help`)"),
        )
    }

    /// A `[run]` value as flag text: `true` is the switch itself, `false` nothing; strings and
    /// numbers follow `=`; a list repeats a repeatable option.
    fn run_tokens(
        &self,
        key: &str,
        arg: &clap::Arg,
        item: &Item,
        line: usize,
    ) -> Result<Vec<String>, JobFileError> {
        use clap::ArgAction;
        let long = arg.get_long().expect("run_keys lists only long options");
        let wrong = |problem: String, fix: String| {
            self.invalid(line, None, format!("[run] {key}: {problem}"), fix)
        };
        let Some(value) = item.as_value() else {
            return Err(wrong(
                format!("{} is not a value", describe(item)),
                format!("write {key} = VALUE on one line"),
            ));
        };
        let scalar = |value: &TomlValue| -> Result<String, JobFileError> {
            match value {
                TomlValue::String(s) => Ok(s.value().clone()),
                TomlValue::Integer(n) => Ok(n.value().to_string()),
                TomlValue::Float(x) => Ok(x.value().to_string()),
                other => Err(wrong(
                    format!("takes a value, not {}", describe_value(other)),
                    format!("write it as for --{long}, e.g. in quotes (see `oomguard run --help`)"),
                )),
            }
        };
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, TomlValue::Boolean(b)) => Ok(if *b.value() {
                vec![format!("--{long}")]
            } else {
                Vec::new()
            }),
            (ArgAction::SetTrue, other) => Err(wrong(
                format!("is a switch, not {}", describe_value(other)),
                format!("write {key} = true (or false)"),
            )),
            (ArgAction::Count, TomlValue::Integer(n)) if *n.value() >= 0 => {
                Ok(vec![format!("--{long}"); *n.value() as usize])
            }
            (ArgAction::Append, TomlValue::Array(items)) => items
                .iter()
                .map(|item| scalar(item).map(|text| format!("--{long}={text}")))
                .collect(),
            // An option whose value may be left out (`--dry-run`): `true` gives it bare.
            (_, TomlValue::Boolean(b))
                if arg
                    .get_num_args()
                    .is_none_or(|range| range.min_values() > 0)
                    || !*b.value() =>
            {
                Err(wrong(
                    format!("takes a value, not {}", b.value()),
                    format!("write it as for --{long} (see `oomguard run --help`)"),
                ))
            }
            (_, TomlValue::Boolean(_)) => Ok(vec![format!("--{long}")]),
            (_, TomlValue::Array(_)) => Err(wrong(
                "takes one value, not a list".to_string(),
                format!("write one value, as for --{long}"),
            )),
            (_, value) => Ok(vec![format!("--{long}={}", scalar(value)?)]),
        }
    }

    /// The `[run]` options together (`no_cgroup` with `memory_max` conflict), as clap sees them.
    fn check_run_together(&self, root: &Table, job: &JobPart) -> Result<(), JobFileError> {
        let tokens: Vec<&String> = job.run.iter().flat_map(|option| &option.tokens).collect();
        match parse_run_tokens(tokens) {
            Ok(()) => Ok(()),
            Err(err) => Err(self.invalid(
                self.key_line(root, "run"),
                None,
                format!("[run]: {}", crate::cli::clap_message(&err)),
                "keep one of the two options",
            )),
        }
    }
}

fn place_example(key: &str) -> &'static str {
    match key {
        "flag" => "\"--batch_size\"",
        "override" => "\"training.batch_size\"",
        "env" => "\"PYTORCH_CUDA_ALLOC_CONF\"",
        _ => "\"configs/default.yaml\"",
    }
}

/// "a string", "an integer"... for type errors.
fn describe(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(value) => describe_value(value),
    }
}

fn describe_value(value: &TomlValue) -> &'static str {
    match value {
        TomlValue::String(_) => "a string",
        TomlValue::Integer(_) => "an integer",
        TomlValue::Float(_) => "a float",
        TomlValue::Boolean(_) => "a boolean",
        TomlValue::Datetime(_) => "a date-time",
        TomlValue::Array(_) => "an array",
        TomlValue::InlineTable(_) => "an inline table",
    }
}

/// "1st", "2nd", "3rd", "4th"... for a knob with no name.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The knob key an unknown `word` was most likely meant as: a known synonym (`floor` for
/// `min`), else the nearest key when it is close enough to be a typo.
fn meant_key(word: &str) -> Option<&'static str> {
    let lower = word.to_ascii_lowercase();
    KEY_SYNONYMS
        .iter()
        .find(|(synonym, _)| *synonym == lower)
        .map(|(_, meant)| *meant)
        .or_else(|| closest(word, &KNOB_KEYS))
}

/// The candidate nearest to `word` by edit distance, when it is close enough to be a typo (at
/// most 2 edits, fewer for short words).
fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    let budget = (word.chars().count() / 3).clamp(1, 2);
    candidates
        .iter()
        .map(|candidate| (edit_distance(&lower, candidate), *candidate))
        .filter(|(distance, _)| *distance <= budget)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, counting an adjacent swap as one edit (so "stpe" is one from "step").
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn knob(name: &str, place: PlaceSpec, moves: Moves) -> KnobSpec {
        KnobSpec {
            name: name.to_string(),
            place,
            moves,
            keep_product_with: None,
            on: None,
            line: 0,
        }
    }

    const HALVE_1: Moves = Moves::Step {
        step: Step::Halve,
        min: 1,
    };

    #[test]
    fn the_issue_example_parses_into_its_three_knobs() {
        let text = r#"
[[knob]]
name = "batch"                  # unique
file = "configs/default.yaml"   # exactly one place
key = "training.batch_size"
step = "halve"
min = 1
keep_product_with = "accum"

[[knob]]
name = "accum"
file = "configs/default.yaml"
key = "training.gradient_accumulation_steps"   # moved only as batch's partner

[[knob]]
name = "pin_memory"
file = "configs/default.yaml"
key = "training.pin_memory"
set = false
on = ["oom_killed", "host_oom", "worker_killed"]
"#;
        let file = parse("job.toml", text).expect("the issue's example is valid");
        let yaml = |key: &str| PlaceSpec::File {
            path: PathBuf::from("configs/default.yaml"),
            key: key.to_string(),
        };
        let mut batch = knob("batch", yaml("training.batch_size"), HALVE_1);
        batch.keep_product_with = Some("accum".to_string());
        batch.line = 2;
        let mut accum = knob(
            "accum",
            yaml("training.gradient_accumulation_steps"),
            HALVE_1,
        );
        accum.line = 10;
        let mut pin = knob(
            "pin_memory",
            yaml("training.pin_memory"),
            Moves::Set(Value::Bool(false)),
        );
        pin.on = Some(vec![Cause::OomKilled, Cause::HostOom, Cause::WorkerKilled]);
        pin.line = 15;
        assert_eq!(file.knobs, vec![batch, accum, pin]);
    }

    #[test]
    fn each_place_and_move_reads_as_written() {
        // (one knob's keys after `name = "k"`, place, moves)
        let rows: &[(&str, PlaceSpec, Moves)] = &[
            (
                "flag = \"--batch_size@2\"",
                PlaceSpec::Flag("--batch_size@2".into()),
                HALVE_1,
            ),
            (
                "override = \"data.batch_size\"\nstep = -1\nmin = 0",
                PlaceSpec::Override("data.batch_size".into()),
                Moves::Step {
                    step: Step::Minus(1),
                    min: 0,
                },
            ),
            (
                "env = \"PYTORCH_CUDA_ALLOC_CONF\"\nset = \"expandable_segments:True\"",
                PlaceSpec::Env("PYTORCH_CUDA_ALLOC_CONF".into()),
                Moves::Set(Value::Str("expandable_segments:True".into())),
            ),
            (
                "file = \"config.py\"\nkey = \"TrainConfig.max_seq_len\"\nstep = -128\nmin = 128",
                PlaceSpec::File {
                    path: "config.py".into(),
                    key: "TrainConfig.max_seq_len".into(),
                },
                Moves::Step {
                    step: Step::Minus(128),
                    min: 128,
                },
            ),
            (
                "flag = \"--use_fp16\"\nset = true",
                PlaceSpec::Flag("--use_fp16".into()),
                Moves::Set(Value::Bool(true)),
            ),
            (
                "flag = \"--workers\"\nset = 0",
                PlaceSpec::Flag("--workers".into()),
                Moves::Set(Value::Int(0)),
            ),
            (
                "flag = \"--lr\"\nset = 0.5",
                PlaceSpec::Flag("--lr".into()),
                Moves::Set(Value::Float(0.5)),
            ),
            (
                "flag = \"-b\"\nstep = \"halve\"\nmin = 4",
                PlaceSpec::Flag("-b".into()),
                Moves::Step {
                    step: Step::Halve,
                    min: 4,
                },
            ),
        ];
        for (keys, place, moves) in rows {
            let text = format!("[[knob]]\nname = \"k\"\n{keys}\n");
            let file = parse("f.toml", &text).unwrap_or_else(|err| panic!("{keys:?}: {err}"));
            assert_eq!(file.knobs.len(), 1, "{keys:?}");
            assert_eq!(&file.knobs[0].place, place, "{keys:?}");
            assert_eq!(&file.knobs[0].moves, moves, "{keys:?}");
            assert_eq!(file.knobs[0].line, 1, "{keys:?}");
        }
    }

    #[test]
    fn a_file_without_knobs_is_fine() {
        for text in ["", "# nothing yet\n", "\n\n"] {
            assert_eq!(parse("f.toml", text).unwrap().knobs, vec![], "{text:?}");
        }
    }

    #[test]
    fn on_takes_every_cause_relaunched_smaller_and_drops_repeats() {
        let text = r#"[[knob]]
name = "k"
flag = "--k"
on = ["device_oom", "host_oom", "worker_killed", "oom_killed", "killed", "memory_limit", "killed"]
"#;
        let file = parse("f.toml", text).unwrap();
        assert_eq!(
            file.knobs[0].on.as_deref(),
            Some(
                &[
                    Cause::DeviceOom,
                    Cause::HostOom,
                    Cause::WorkerKilled,
                    Cause::OomKilled,
                    Cause::Killed,
                    Cause::MemoryLimit
                ][..]
            )
        );
    }

    #[test]
    fn a_partner_needs_no_moves_of_its_own_and_may_have_a_step() {
        let text = r#"[[knob]]
name = "accum"
flag = "--accum"
step = -1

[[knob]]
name = "batch"
flag = "--batch"
keep_product_with = "accum"
"#;
        let file = parse("f.toml", text).unwrap();
        let names: Vec<&str> = file.knobs.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["accum", "batch"]);
        assert_eq!(file.knobs[1].keep_product_with.as_deref(), Some("accum"));
    }

    /// Every mistake: (file text, line of the message, text the message must contain).
    #[test]
    fn each_mistake_is_one_line_with_file_line_and_fix() {
        const OK: &str = "[[knob]]\nname = \"accum\"\nflag = \"--accum\"\n";
        let rows: &[(&str, usize, &str)] = &[
            // Syntax, with the parser's line.
            ("[[knob]]\nname = \"a\"\nflag = --a\n", 3, "not valid TOML"),
            ("[[knob]]\nname = \"a\nflag = \"--a\"\n", 2, "not valid TOML"),
            ("[[knob]]\nname = \"a\"\nname = \"b\"\n", 3, "not valid TOML"),
            // Top level.
            ("[job]\ncommand = []\n", 1, "unknown top-level key \"job\"; known top-level keys: name, command, workdir, user, group, [env], [run], [[knob]]"),
            ("[[knobs]]\nname = \"a\"\n", 1, "unknown top-level key \"knobs\"; did you mean [[knob]]?"),
            ("\n[knob]\nname = \"a\"\nflag = \"--a\"\n", 2, "`knob` is a table, not [[knob]] tables; write each knob"),
            ("knob = [{ name = \"a\", flag = \"--a\" }]\n", 1, "`knob` is an array, not [[knob]] tables"),
            // Keys of a knob.
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nstpe = -1\n", 4, "knob \"a\": unknown key \"stpe\"; did you mean \"step\"? known keys: name, flag"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nfloor = 0\n", 4, "unknown key \"floor\"; did you mean \"min\"?"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nkeep_product_width = \"b\"\n", 4, "did you mean \"keep_product_with\"?"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\ncolour = \"red\"\n", 4, "unknown key \"colour\"; known keys: name, flag, override, env, file, key, step, min, set, keep_product_with, on"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nextra.deep = 1\n", 4, "unknown key \"extra\""),
            // Name.
            ("[[knob]]\nflag = \"--a\"\n", 1, "the 1st [[knob]] has no name; add name"),
            (concat!("[[knob]]\nname = \"accum\"\nflag = \"--accum\"\n", "\n[[knob]]\nflag = \"--a\"\n"), 5, "the 2nd [[knob]] has no name"),
            ("[[knob]]\nname = 3\nflag = \"--a\"\n", 2, "name must be a string, not an integer; write name = \"batch\""),
            ("[[knob]]\nname = \"\"\nflag = \"--a\"\n", 2, "empty name"),
            (concat!("[[knob]]\nname = \"accum\"\nflag = \"--accum\"\n", "[[knob]]\nname = \"accum\"\nflag = \"--b\"\n"), 5, "knob \"accum\": the name is used twice (first at line 2); give each knob its own name"),
            // Places.
            ("[[knob]]\nname = \"a\"\nmin = 2\n", 1, "knob \"a\": no place; give exactly one of flag"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nenv = \"A\"\n", 4, "two places (flag and env); keep exactly one"),
            ("[[knob]]\nname = \"a\"\noverride = \"a.b\"\nfile = \"c.yaml\"\nkey = \"a.b\"\n", 4, "two places (override and file)"),
            ("[[knob]]\nname = \"a\"\nfile = \"c.yaml\"\n", 3, "file without key; add key = \"dotted.key\" naming the value inside c.yaml"),
            ("[[knob]]\nname = \"a\"\nkey = \"training.a\"\n", 3, "key without file; add file = \"PATH\""),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nkey = \"training.a\"\n", 4, "key with flag; key goes only with file"),
            ("[[knob]]\nname = \"a\"\nfile = \"c.ini\"\nkey = \"a\"\n", 3, "file \"c.ini\" is not a format oomguard edits"),
            ("[[knob]]\nname = \"a\"\nflag = \"batch_size\"\n", 3, "flag \"batch_size\" is not an option; write it as the command spells it, dashes included, e.g. flag = \"--batch_size\""),
            ("[[knob]]\nname = \"a\"\nflag = \"--\"\n", 3, "flag \"--\" is not an option; write it as the command spells it, dashes included, e.g. flag = \"--batch_size\""),
            ("[[knob]]\nname = \"a\"\nflag = \"\"\n", 3, "flag is empty"),
            ("[[knob]]\nname = \"a\"\nflag = 8\n", 3, "flag must be a string, not an integer"),
            ("[[knob]]\nname = \"a\"\noverride = \"training.batch_size=64\"\n", 3, "override \"training.batch_size=64\" is not a Hydra key"),
            ("[[knob]]\nname = \"a\"\noverride = \"--batch_size\"\n", 3, "is not a Hydra key"),
            ("[[knob]]\nname = \"a\"\nenv = \"A=1\"\n", 3, "env \"A=1\" is not a variable name"),
            ("[[knob]]\nname = \"a\"\nenv = \"1A\"\n", 3, "env \"1A\" is not a variable name"),
            ("[[knob]]\nname = \"a\"\nfile = \"c.yaml\"\nkey = \"\"\n", 4, "key is empty"),
            // Moves.
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nstep = -1\nset = 2\n", 4, "both step and set; keep one"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nstep = \"third\"\n", 4, "step = \"third\" is neither \"halve\" nor a negative integer; write step = \"halve\""),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nstep = 2\n", 4, "step = 2 is neither"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nstep = 0\n", 4, "step = 0 is neither"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nstep = -0.5\n", 4, "step = -0.5 is neither"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nmin = -1\n", 4, "min = -1 is negative; write min = 0 or more"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nmin = \"1\"\n", 4, "min must be an integer, not a string"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nset = false\nmin = 0\n", 5, "min on a set knob; remove min"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nset = -4\n", 4, "set = -4 is negative"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\nset = [1]\n", 4, "set must be a boolean, integer, float or string, not an array"),
            // Partners.
            (concat!("[[knob]]\nname = \"accum\"\nflag = \"--accum\"\n", "[[knob]]\nname = \"b\"\nflag = \"--b\"\nkeep_product_with = \"acum\"\n"), 7, "knob \"b\": keep_product_with = \"acum\" names no knob in this file; did you mean \"accum\"? knobs in this file: accum"),
            ("[[knob]]\nname = \"b\"\nflag = \"--b\"\nkeep_product_with = \"accum\"\n", 4, "names no knob in this file; add a [[knob]] for the accumulation setting"),
            ("[[knob]]\nname = \"b\"\nflag = \"--b\"\nkeep_product_with = \"b\"\n", 4, "keep_product_with names the knob itself"),
            (concat!("[[knob]]\nname = \"accum\"\nflag = \"--accum\"\nset = 4\n", "[[knob]]\nname = \"b\"\nflag = \"--b\"\nkeep_product_with = \"accum\"\n"), 8, "keep_product_with = \"accum\" names a set knob"),
            (concat!("[[knob]]\nname = \"accum\"\nflag = \"--accum\"\n", "[[knob]]\nname = \"b\"\nflag = \"--b\"\nset = 1\nkeep_product_with = \"accum\"\n"), 8, "keep_product_with on a set knob"),
            (concat!("[[knob]]\nname = \"accum\"\nflag = \"--accum\"\nkeep_product_with = \"c\"\n", "[[knob]]\nname = \"b\"\nflag = \"--b\"\nkeep_product_with = \"accum\"\n", "[[knob]]\nname = \"c\"\nflag = \"--c\"\n"), 8, "names a knob that has a partner of its own"),
            // Causes.
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = [\"failed\"]\n", 4, "on names \"failed\", which is never relaunched smaller; remove it; use names from: device_oom, host_oom, worker_killed, oom_killed, killed, memory_limit"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = [\"ok\"]\n", 4, "on names \"ok\", which is never relaunched smaller"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = [\"interrupted\"]\n", 4, "on names \"interrupted\", which is never relaunched smaller"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = [\"oom_kiled\"]\n", 4, "on names \"oom_kiled\", which is not a cause; did you mean \"oom_killed\"?"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = [\"OOM\"]\n", 4, "which is not a cause; use names from"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = \"oom_killed\"\n", 4, "on must be a list of cause names, not a string"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = [1]\n", 4, "on holds an integer, not a cause name"),
            ("[[knob]]\nname = \"a\"\nflag = \"--a\"\non = []\n", 4, "on = [] answers no cause"),
        ];
        // The valid knob alone parses, so each row's error is its own mistake.
        parse("job.toml", OK).expect("the base knob is valid");
        for (text, line, wanted) in rows {
            let err = match parse("job.toml", text) {
                Ok(file) => panic!("{text:?} was accepted: {file:?}"),
                Err(err) => err,
            };
            let message = err.to_string();
            assert!(!message.contains('\n'), "{text:?}: {message:?}");
            assert!(
                message.starts_with(&format!("job.toml:{line}: ")),
                "{text:?}: wanted line {line}: {message}"
            );
            assert!(
                message.contains(wanted),
                "{text:?}: wanted {wanted:?} in {message}"
            );
            assert!(message.contains("; "), "{text:?}: no fix in {message}");
            match err {
                JobFileError::Invalid { line: got, .. } => assert_eq!(got, *line),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_job_file_carries_the_job() {
        let text = r#"
name = "nightly"
command = ["python", "train.py", "--batch_size", "8"]
workdir = "proj"
user = "alice"
group = "ml"

[env]
CUDA_VISIBLE_DEVICES = "0"

[run]
max_attempts = 10
memory_max = "12G"
backoff = "30s"
strategy = "fit"
no_pty = true
no_cgroup = false
margin = 12.5
dry_run = true

[[knob]]
name = "batch"
flag = "--batch_size"
"#;
        let file = parse("job.toml", text).unwrap();
        assert_eq!(file.knobs.len(), 1);
        let job = &file.job;
        assert_eq!(
            job.command.as_deref(),
            Some(&["python", "train.py", "--batch_size", "8"].map(String::from)[..])
        );
        assert_eq!(
            job.workdir,
            Some(Located {
                value: "proj".into(),
                line: 4
            })
        );
        assert_eq!(
            job.user,
            Some(Located {
                value: "alice".into(),
                line: 5
            })
        );
        assert_eq!(
            job.group,
            Some(Located {
                value: "ml".into(),
                line: 6
            })
        );
        assert_eq!(job.env, [("CUDA_VISIBLE_DEVICES".into(), "0".into())]);
        let run: Vec<(&str, usize, Vec<&str>)> = job
            .run
            .iter()
            .map(|o| {
                (
                    o.id.as_str(),
                    o.line,
                    o.tokens.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            run,
            [
                ("name", 2, vec!["--name=nightly"]),
                ("max_attempts", 12, vec!["--max-attempts=10"]),
                ("memory_max", 13, vec!["--memory-max=12G"]),
                ("backoff", 14, vec!["--backoff=30s"]),
                ("strategy", 15, vec!["--strategy=fit"]),
                ("no_pty", 16, vec!["--no-pty"]),
                ("no_cgroup", 17, vec![]),
                ("margin", 18, vec!["--margin=12.5"]),
                ("dry_run", 19, vec!["--dry-run"]),
            ]
        );
        // An inline [run] and [env] read the same.
        let file = parse("job.toml", "env = { A = \"1\" }\nrun = { retries = 2 }\n").unwrap();
        assert_eq!(file.job.env, [("A".into(), "1".into())]);
        assert_eq!(file.job.run[0].tokens, ["--retries=2"]);
    }

    /// `[run]` takes exactly the long options clap defines for `oomguard run`, less the few
    /// that belong elsewhere.
    #[test]
    fn run_keys_come_from_the_clap_definition() {
        let keys: Vec<String> = run_keys().into_iter().map(|(key, _)| key).collect();
        for key in [
            "max_attempts",
            "memory_max",
            "backoff",
            "strategy",
            "no_pty",
            "run_dir",
            "hang_timeout",
        ] {
            assert!(keys.contains(&key.to_string()), "{key} in {keys:?}");
        }
        for key in ["config", "name", "command", "help", "max-attempts"] {
            assert!(!keys.contains(&key.to_string()), "{key} in {keys:?}");
        }
        let longs = crate::cli::run_command()
            .get_arguments()
            .filter(|arg| arg.get_long().is_some())
            .count();
        assert_eq!(keys.len() + 2, longs, "all but config and name");
    }

    /// Every mistake in the job part: (file text, line of the message, text it must contain).
    #[test]
    fn each_job_file_mistake_is_one_line_with_file_line_and_fix() {
        let rows: &[(&str, usize, &str)] = &[
            ("command = \"python train.py\"\n", 1, "command must be a list of strings, not a string (oomguard runs no shell"),
            ("command = []\n", 1, "command = [] runs nothing"),
            ("command = [\"\"]\n", 1, "command starts with an empty program name"),
            ("command = [\"python\", 8]\n", 1, "command holds an integer, not a string; quote every argument"),
            ("command = 3\n", 1, "command must be a list of strings, not an integer"),
            ("name = \"a/b\"\n", 1, "name \"a/b\" is not usable as a job name"),
            ("name = 3\n", 1, "name must be a string, not an integer"),
            ("\nworkdir = \"\"\n", 2, "workdir is empty"),
            ("user = 0\n", 1, "user must be a string, not an integer; write user = \"alice\""),
            ("group = \"\"\n", 1, "group is empty"),
            ("env = \"A=1\"\n", 1, "env must be a table, not a string"),
            ("[env]\nA = 1\n", 2, "[env] A must be a string, not an integer; quote the value, numbers too: A = \"1\""),
            ("[env]\n\"A-B\" = \"1\"\n", 2, "[env] \"A-B\" is not a variable name"),
            ("run = 3\n", 1, "run must be a table, not an integer"),
            ("max_attempts = 3\n", 1, "unknown top-level key \"max_attempts\"; max_attempts is an option of oomguard run: put it in the [run] table"),
            ("comand = []\n", 1, "unknown top-level key \"comand\"; did you mean \"command\"?"),
            ("[run]\nmax_attempt = 3\n", 2, "[run] unknown key \"max_attempt\"; did you mean \"max_attempts\"?"),
            ("[run]\nmax-attempts = 3\n", 2, "[run] unknown key \"max-attempts\"; did you mean \"max_attempts\" (_ for -)?"),
            ("[run]\ncolour = \"red\"\n", 2, "[run] unknown key \"colour\"; [run] takes the long options of `oomguard run`"),
            ("[run]\nconfig = \"x.toml\"\n", 2, "[run] cannot set config; the job file is the config"),
            ("[run]\nname = \"x\"\n", 2, "[run] cannot set name; the job's name is a top-level key"),
            ("[run]\ncommand = [\"x\"]\n", 2, "[run] command: command is a top-level key; move it above"),
            ("[run]\nmax_attempts = 0\n", 2, "[run] max_attempts = 0: invalid value '0' for '--max-attempts <N>'"),
            ("[run]\nmax_attempts = \"ten\"\n", 2, "[run] max_attempts = \"ten\": invalid value 'ten' for '--max-attempts <N>'"),
            ("[run]\nbackoff = 30\n", 2, "[run] backoff = 30: invalid value '30' for '--backoff <DURATION>': `30` is not a duration"),
            ("[run]\nmemory_max = \"lots\"\n", 2, "`lots` is not a size"),
            ("[run]\nstrategy = \"double\"\n", 2, "use fit, halve, or factor:F"),
            ("[run]\nno_pty = \"yes\"\n", 2, "[run] no_pty: is a switch, not a string; write no_pty = true"),
            ("[run]\nmax_attempts = true\n", 2, "[run] max_attempts: takes a value, not true"),
            ("[run]\nmax_attempts = [3]\n", 2, "[run] max_attempts: takes one value, not a list"),
            ("[run]\nretries = {n = 1}\n", 2, "[run] retries: takes a value, not an inline table"),
            ("[run]\nmemory_max = \"1G\"\nno_cgroup = true\n", 1, "[run]: the argument '--memory-max <SIZE>' cannot be used with '--no-cgroup'"),
        ];
        for (text, line, wanted) in rows {
            let err = match parse("job.toml", text) {
                Ok(file) => panic!("{text:?} was accepted: {file:?}"),
                Err(err) => err,
            };
            let message = err.to_string();
            assert!(!message.contains('\n'), "{text:?}: {message:?}");
            assert!(
                message.starts_with(&format!("job.toml:{line}: ")),
                "{text:?}: wanted line {line}: {message}"
            );
            assert!(
                message.contains(wanted),
                "{text:?}: wanted {wanted:?} in {message}"
            );
            assert!(message.contains("; "), "{text:?}: no fix in {message}");
        }
    }

    #[test]
    fn load_reads_the_file_and_names_it_when_it_cannot() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("job.toml");
        fs::write(&path, "[[knob]]\nname = \"b\"\nflag = \"--b\"\nmin = -2\n").unwrap();
        let message = load(&path).unwrap_err().to_string();
        assert_eq!(
            message,
            format!(
                "{}:4: knob \"b\": min = -2 is negative; write min = 0 or more (the default is 1)",
                path.display()
            )
        );

        let missing = dir.path().join("nope.toml");
        let message = load(&missing).unwrap_err().to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(
            message.starts_with(&format!("{}: cannot read", missing.display())),
            "{message}"
        );
        assert!(message.contains("No such file or directory"), "{message}");
    }

    #[test]
    fn the_readme_shows_the_message_as_it_is() {
        let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("README.md is readable");
        let text = "[[knob]]\nname = \"batch\"\nflag = \"--batch_size\"\nstpe = -1\n";
        let message = parse("job.toml", text).unwrap_err().to_string();
        assert!(
            readme.contains(&format!("    {message}\n")),
            "README.md should show: {message}"
        );
    }

    /// The README's full job file parses as it says, and its sample message is the real one.
    #[test]
    fn the_readme_job_file_parses_and_its_message_is_real() {
        let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("README.md is readable");
        let example: String = readme
            .lines()
            .skip_while(|line| *line != "    # /etc/oomguard/nightly.toml")
            .take_while(|line| line.is_empty() || line.starts_with("    "))
            .map(|line| format!("{}\n", line.strip_prefix("    ").unwrap_or(line)))
            .collect();
        let file = parse("nightly.toml", &example).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            file.job.user.as_ref().map(|u| u.value.as_str()),
            Some("alice")
        );
        assert_eq!(file.job.env.len(), 2);
        assert_eq!(file.knobs.len(), 1);
        let ids: Vec<&str> = file.job.run.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "name",
                "max_attempts",
                "memory_max",
                "backoff",
                "strategy",
                "no_pty",
                "run_dir"
            ]
        );
        let text = format!(
            "name = \"nightly\"{}\n[run]\nmax_attempts = 0\n",
            "\n".repeat(13)
        );
        let message = parse("nightly.toml", &text).unwrap_err().to_string();
        assert!(
            readme.contains(&format!("    {message}\n")),
            "README.md should show: {message}"
        );
    }

    #[test]
    fn meant_key_catches_typos_and_synonyms_but_not_strangers() {
        let rows: &[(&str, Option<&str>)] = &[
            ("stpe", Some("step")),
            ("mni", Some("min")),
            ("nmae", Some("name")),
            ("Flag", Some("flag")),
            ("overide", Some("override")),
            ("keep_product", Some("keep_product_with")),
            ("floor", Some("min")),
            ("value", Some("set")),
            ("causes", Some("on")),
            ("colour", None),
            ("x", None),
        ];
        for (word, meant) in rows {
            assert_eq!(meant_key(word), *meant, "{word}");
        }
    }

    #[test]
    fn all_causes_lists_each_once() {
        for (i, cause) in Cause::ALL.iter().enumerate() {
            assert!(!Cause::ALL[..i].contains(cause), "{cause} twice");
        }
    }

    /// Every file in examples/ parses, and its knobs are the ones its situation needs, in order.
    #[test]
    fn every_example_parses_with_its_knobs_in_order() {
        let expected: &[(&str, &[&str])] = &[
            ("cell-diffusion.toml", &["microbatch", "fp16", "alloc_conf"]),
            (
                "emg-yaml.toml",
                &["batch", "accum", "num_workers", "pin_memory"],
            ),
            ("grpo.toml", &["batch", "group_size", "num_epochs"]),
            ("t5-config-py.toml", &["batch", "accum", "max_seq_len"]),
        ];
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let mut found: Vec<String> = fs::read_dir(&dir)
            .expect("examples/ exists")
            .map(|entry| entry.expect("a readable directory entry").file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".toml"))
            .collect();
        found.sort();
        let listed: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
        assert_eq!(found, listed, "every examples/*.toml has a row here");
        for (name, knobs) in expected {
            let file = load(&dir.join(name)).unwrap_or_else(|err| panic!("{err}"));
            let names: Vec<&str> = file.knobs.iter().map(|k| k.name.as_str()).collect();
            assert_eq!(&names, knobs, "{name}");
        }
    }

    #[test]
    fn examples_say_what_each_knob_does() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let knob = |file: &str, name: &str| -> KnobSpec {
            load(&dir.join(file))
                .unwrap_or_else(|err| panic!("{err}"))
                .knobs
                .into_iter()
                .find(|k| k.name == name)
                .unwrap_or_else(|| panic!("{file} has no knob {name}"))
        };
        let emg_batch = knob("emg-yaml.toml", "batch");
        assert_eq!(emg_batch.keep_product_with.as_deref(), Some("accum"));
        assert_eq!(
            knob("emg-yaml.toml", "num_workers").moves,
            Moves::Step {
                step: Step::Halve,
                min: 0
            }
        );
        let pin = knob("emg-yaml.toml", "pin_memory");
        assert_eq!(pin.moves, Moves::Set(Value::Bool(false)));
        assert_eq!(
            pin.on,
            Some(vec![Cause::OomKilled, Cause::HostOom, Cause::WorkerKilled])
        );
        assert_eq!(
            knob("cell-diffusion.toml", "fp16").moves,
            Moves::Set(Value::Bool(true))
        );
        assert_eq!(
            knob("cell-diffusion.toml", "alloc_conf").place,
            PlaceSpec::Env("PYTORCH_CUDA_ALLOC_CONF".into())
        );
        assert_eq!(
            knob("t5-config-py.toml", "batch").place,
            PlaceSpec::File {
                path: "config.py".into(),
                key: "TrainConfig.batch_size_per_gpu".into()
            }
        );
        assert_eq!(
            knob("t5-config-py.toml", "max_seq_len").moves,
            Moves::Step {
                step: Step::Minus(128),
                min: 128
            }
        );
        assert_eq!(
            knob("grpo.toml", "num_epochs").moves,
            Moves::Step {
                step: Step::Minus(1),
                min: 1
            }
        );
    }
}
