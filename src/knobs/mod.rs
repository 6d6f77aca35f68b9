//! The knob model: what oomguard turns between attempts, wherever the job keeps it. A knob has
//! a name, a [`Place`] (a flag or override in the command, an environment variable of the job,
//! a key in a config file), the value the user gave it, and a [`Rule`] saying how it moves.
//! The batch and accumulation pair found automatically are two knobs of this model, named
//! `batch` and `accum`.
//!
//! A module per place: [`argv`] finds and rewrites flags, [`env`](mod@env) variables,
//! [`file`](mod@file) edits a key's value in YAML, JSON, TOML or Python text, [`patch`] puts an
//! edited file where the job reads it and always gives the user's file back. [`resolve`] finds a
//! run's knobs in its command line, asking [`entry`] where a training entrypoint (LightningCLI, a
//! Trainer's arguments file, DeepSpeed, Hydra) keeps the batch in a file; both read files through
//! [`reader`], as do the knobs a `--config` job file names ([`crate::front::settings::job_knobs`]).
//! Which knob moves when is [`crate::decide::policy`]'s decision, made without knowing where knobs
//! live; this module turns values into an attempt's argv, environment and file texts, and tells
//! what changed.
//!
//! Text in, text out, and the user's files given back: it knows no process, and imports only
//! [`crate::guard`] (files read as the job's user), [`crate::observe::units`] and the words of
//! an ending ([`crate::judge::outcome`]).

pub mod argv;
pub mod entry;
pub mod env;
pub mod file;
pub mod inside;
pub mod patch;
pub mod reader;
pub mod resolve;
pub mod values;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::judge::outcome::Cause;
use values::{FinalSizes, KnobValues};

/// What the run's first lines, `--dry-run` and `doctor` say where no batch was found, and the
/// fix: one sentence, however each goes on.
pub const NO_BATCH: &str = "no batch found in the command or its entrypoint's files";
pub const NAME_THE_BATCH: &str = "name it with --batch-arg: a flag, FILE:KEY or env:NAME";
/// What follows [`NO_BATCH`] where the probe will run: the batch is read inside the job.
pub const READ_INSIDE: &str = "it will be read inside the job once it starts (its argument parser's defaults, a TrainingArguments, Lightning's Trainer)";

/// A knob's value, typed as JSON types it in summary.json.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// An environment variable that is not set, a partner flag not in the command.
    Unset,
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Str(s) => write!(f, "{s}"),
            Value::Unset => write!(f, "unset"),
        }
    }
}

impl Value {
    /// Equal as values, NaN equal to NaN.
    pub fn same(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Float(x), Value::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
            _ => self == other,
        }
    }

    pub fn as_int(&self) -> Option<u64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// As summary.json records it: integer, float, bool, string, or null when unset.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Int(n) => (*n).into(),
            Value::Float(x) => serde_json::Number::from_f64(*x)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::Bool(b) => (*b).into(),
            Value::Str(s) => s.as_str().into(),
            Value::Unset => serde_json::Value::Null,
        }
    }

    /// A value as the command line or a variable spells it: a whole number, `true`/`false`
    /// (any case), a float, else the text itself.
    pub fn parse_text(text: &str) -> Value {
        if let Ok(n) = text.parse::<u64>() {
            return Value::Int(n);
        }
        match text.to_ascii_lowercase().as_str() {
            "true" => return Value::Bool(true),
            "false" => return Value::Bool(false),
            _ => {}
        }
        // Only numbers spelled as numbers: "nan" or "inf" as a flag value is more likely text.
        match text.parse::<f64>() {
            Ok(x) if x.is_finite() && text.bytes().any(|b| b.is_ascii_digit()) => Value::Float(x),
            _ => Value::Str(text.to_string()),
        }
    }

    /// From a config file's scalar. A negative integer is no knob's value, but a `set` knob may
    /// still replace it: it is kept as its text.
    pub fn from_scalar(scalar: &file::Scalar) -> Value {
        match scalar {
            file::Scalar::Int(n) => u64::try_from(*n).map_or(Value::Str(n.to_string()), Value::Int),
            file::Scalar::Float(x) => Value::Float(*x),
            file::Scalar::Bool(b) => Value::Bool(*b),
            file::Scalar::Str(s) => Value::Str(s.clone()),
        }
    }

    /// As a config file's scalar; `None` for an integer beyond the files' 64-bit signed range
    /// or an unset value (a key in a file always has one).
    pub fn to_scalar(&self) -> Option<file::Scalar> {
        Some(match self {
            Value::Int(n) => file::Scalar::Int(i64::try_from(*n).ok()?),
            Value::Float(x) => file::Scalar::Float(*x),
            Value::Bool(b) => file::Scalar::Bool(*b),
            Value::Str(s) => file::Scalar::Str(s.clone()),
            Value::Unset => return None,
        })
    }
}

/// The file name of the patched copy of `path` that the run tagged `tag` (its PID) gives the
/// job: beside the original so relative references in it still resolve, extension kept since
/// loaders dispatch on it: `default.yaml` → `default.oomguard-4242.yaml`.
pub fn patch_copy_name(path: &Path, tag: &str) -> OsString {
    let mut name = path.file_stem().unwrap_or_default().to_os_string();
    name.push(format!(".oomguard-{tag}"));
    if let Some(ext) = path.extension() {
        name.push(".");
        name.push(ext);
    }
    name
}

/// Where a knob lives.
#[derive(Debug, Clone, PartialEq)]
pub enum Place {
    Argv(argv::Place),
    /// An environment variable of the job.
    Env(String),
    /// A key in one of the run's config files (an index into [`KnobSet::files`]).
    File {
        file: usize,
        key: String,
    },
    /// A field of a framework's arguments object that the probe sets inside the job at its
    /// construction (`row` of the probe's table: `transformers`, `lightning`), found by the
    /// probe when nothing outside the job held the batch ([`inside`]).
    Inside {
        row: String,
        field: String,
    },
}

/// How an integer knob steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Halve,
    /// Down by this much (`step = -1` in a `[[knob]]`).
    Minus(u64),
}

/// How one knob moves.
#[derive(Debug, Clone, PartialEq)]
pub enum Moves {
    /// An integer knob, stepped down to `min`.
    Step { step: Step, min: u64 },
    /// A value knob: one step, to this value.
    Set(Value),
    /// Moved only as another knob's partner.
    Partner,
}

/// One rung of the ladder: what a knob answers and how it moves.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// For the give-up reason.
    pub name: String,
    pub moves: Moves,
    /// The causes it answers.
    pub on: Vec<Cause>,
    /// The index of the knob raised to keep this knob × partner constant.
    pub partner: Option<usize>,
}

/// The causes a knob answers when its `on` is not given: every cause relaunched smaller.
pub fn default_causes() -> Vec<Cause> {
    Cause::ALL.into_iter().filter(|c| c.steps_knobs()).collect()
}

/// One knob: its name, place, the user's value, and how it moves.
#[derive(Debug, Clone, PartialEq)]
pub struct Knob {
    pub name: String,
    pub place: Place,
    pub original: Value,
    pub rule: Rule,
}

/// A config file some knob lives in.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFile {
    /// As the user named it (relative to the working directory, or absolute).
    pub path: PathBuf,
    pub format: file::Format,
    /// The text as read at the start; every attempt's text is this with the knobs' values set.
    pub text: String,
    /// The argv token that names it, where the command does (then the job gets a patched copy
    /// and that token is pointed at it); otherwise the file is patched in place.
    pub in_command: Option<argv::PathToken>,
}

/// Every knob of a run, in ladder order.
#[derive(Debug, Clone, Default)]
pub struct KnobSet {
    pub knobs: Vec<Knob>,
    pub files: Vec<ConfigFile>,
    /// Found automatically (no `[[knob]]` in `--config`).
    pub automatic: bool,
    /// Lines for the user about choices made that were not obvious.
    pub notes: Vec<String>,
    /// The job itself keeps the effective batch (`--batch_size` beside `--microbatch`).
    pub kept_by_job: bool,
    /// The codebase has no gradient accumulation at all ("detectron2"): the effective batch
    /// shrinks with the batch and no `--accum-arg` could help, so the warning says that instead.
    pub no_accumulation: Option<String>,
}

/// What one attempt gets from its knobs: its argv and the environment variables set on top of
/// oomguard's (its files are [`KnobSet::file_texts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptInput {
    pub argv: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
}

/// The knobs with one set of values: the one form the run carries them in, rendered for each
/// reader (summary.json and the job's file, the service manager's status line, the sizes).
#[derive(Clone, Copy)]
pub struct KnobsAt<'a> {
    pub knobs: &'a KnobSet,
    pub values: &'a [Value],
}

impl KnobsAt<'_> {
    /// Every knob's value, by name, as summary.json and the job's file type them.
    pub fn json(&self) -> KnobValues {
        KnobValues(
            self.knobs
                .knobs
                .iter()
                .zip(self.values)
                .map(|(k, v)| (k.name.clone(), v.to_json()))
                .collect(),
        )
    }

    /// Each knob's name and value as text, for the service manager's status line.
    pub fn text(&self) -> Vec<(String, String)> {
        self.knobs
            .knobs
            .iter()
            .zip(self.values)
            .map(|(knob, value)| (knob.name.clone(), value.to_string()))
            .collect()
    }

    /// `batch 64, accum 1`: every knob's name and value, for a line.
    pub fn text_short(&self) -> String {
        self.text()
            .iter()
            .map(|(name, value)| format!("{name} {value}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The batch and accumulation, as summary.json's `final` has them.
    pub fn sizes(&self) -> FinalSizes {
        FinalSizes {
            batch_size: self.knobs.batch_of(self.values),
            accum: self.knobs.accum_of(self.values),
        }
    }
}

/// The name of the batch knob (`--batch-arg`, or the `[[knob]]` of that name).
pub const BATCH: &str = "batch";
/// The name of the gradient-accumulation knob (`--accum-arg`).
pub const ACCUM: &str = "accum";

impl KnobSet {
    pub fn rules(&self) -> Vec<Rule> {
        self.knobs.iter().map(|k| k.rule.clone()).collect()
    }

    pub fn originals(&self) -> Vec<Value> {
        self.knobs.iter().map(|k| k.original.clone()).collect()
    }

    /// The index of the knob named `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.knobs.iter().position(|k| k.name == name)
    }

    /// These knobs with `values`.
    pub fn at<'a>(&'a self, values: &'a [Value]) -> KnobsAt<'a> {
        KnobsAt {
            knobs: self,
            values,
        }
    }

    /// The batch knob's index: the knob oomguard halves on an out-of-memory death.
    pub fn batch(&self) -> Option<usize> {
        self.index(BATCH)
    }

    /// The accumulation knob's index: the batch's partner that keeps the effective batch.
    pub fn accum(&self) -> Option<usize> {
        self.index(ACCUM)
    }

    /// The batch knob's integer value in `values` (summary.json's `batch_size`).
    pub fn batch_of(&self, values: &[Value]) -> Option<u64> {
        values.get(self.batch()?)?.as_int()
    }

    /// The accumulation knob's integer value in `values` (summary.json's `accum`).
    pub fn accum_of(&self, values: &[Value]) -> Option<u64> {
        values.get(self.accum()?)?.as_int()
    }

    /// The batch knob halves without a partner to keep the effective batch: the user should
    /// hear that the effective batch shrinks.
    pub fn effective_shrinks(&self) -> bool {
        self.automatic
            && !self.kept_by_job
            && self
                .batch()
                .is_some_and(|i| self.knobs[i].rule.partner.is_none())
    }

    /// [`shrink_line`](Self::shrink_line) for a relaunch from `original` to `next` that moves
    /// the knobs `changed`: `Some` only where it moves the batch and nothing keeps the effective
    /// batch. Whether it was said already is the caller's (the run and `--dry-run` say it once).
    pub fn shrink_note(
        &self,
        original: &[Value],
        next: &[Value],
        changed: &[usize],
    ) -> Option<String> {
        let batch_moved = self.batch().is_some_and(|b| changed.contains(&b));
        (batch_moved && self.effective_shrinks()).then(|| {
            self.shrink_line(
                self.batch_of(original).unwrap_or(0),
                self.batch_of(next).unwrap_or(0),
            )
        })
    }

    /// The line saying that the effective batch shrinks with the batch (`from_batch` →
    /// `to_batch`), and what could keep it: the job's accumulation named with `--accum-arg`,
    /// or nothing where the codebase has none.
    pub fn shrink_line(&self, from_batch: u64, to_batch: u64) -> String {
        let moved = self.batch().map(|i| self.label(i)).unwrap_or_default();
        match &self.no_accumulation {
            Some(codebase) => format!(
                "{codebase} has no gradient accumulation, so the effective batch shrinks with the batch ({from_batch} → {to_batch}): a relaunch changes only {moved}"
            ),
            None => format!(
                "the command has no gradient-accumulation flag, so the effective batch shrinks with the batch ({from_batch} → {to_batch}); \
                 name the job's flag with --accum-arg to keep it"
            ),
        }
    }

    /// Each config file's text with the knobs `values` set.
    pub fn file_texts(&self, values: &[Value]) -> Vec<String> {
        let mut texts: Vec<String> = self.files.iter().map(|f| f.text.clone()).collect();
        for (knob, value) in self.knobs.iter().zip(values) {
            if let (Place::File { file, key }, false) = (&knob.place, knob.original.same(value)) {
                let scalar = value
                    .to_scalar()
                    .expect("resolve checked every value a file knob can take");
                texts[*file] = file::set(self.files[*file].format, &texts[*file], key, &scalar)
                    .expect("resolve located every key in the file's text");
            }
        }
        texts
    }

    /// The argv and environment that give the knobs `values`, the command's file tokens
    /// pointed at the patched copies in `copies` (one per file: the copy's path, where the job
    /// reads one). A knob at its original value leaves its place exactly as the user wrote it.
    pub fn input(
        &self,
        command: &[OsString],
        values: &[Value],
        copies: &[Option<PathBuf>],
    ) -> AttemptInput {
        self.input_with(command, values, copies, Vec::new())
    }

    /// [`KnobSet::input`] with `extra` edits of the command made too, by indices into the original
    /// command like the knobs' own (the checkpoint to resume from: [`crate::decide::resume`]).
    pub fn input_with(
        &self,
        command: &[OsString],
        values: &[Value],
        copies: &[Option<PathBuf>],
        extra: Vec<argv::Edit>,
    ) -> AttemptInput {
        let mut edits = extra;
        let mut env = Vec::new();
        for (knob, value) in self.knobs.iter().zip(values) {
            if knob.original.same(value) {
                continue;
            }
            match &knob.place {
                Place::Argv(place) => place.edits(command, value, &mut edits),
                Place::Env(name) => env.push((name.clone(), env::value_text(value))),
                Place::File { .. } | Place::Inside { .. } => {}
            }
        }
        // The probe sets every inside knob at once, from one variable.
        if let Some(set) = inside::set_var(self, values) {
            env.push((inside::SET_VAR.to_string(), set.into()));
        }
        for (file, copy) in self.files.iter().zip(copies) {
            if let (Some(token), Some(name)) =
                (&file.in_command, copy.as_ref().and_then(|c| c.file_name()))
            {
                edits.push(token.redirect(command, name));
            }
        }
        AttemptInput {
            argv: argv::apply_edits(command, &edits),
            env,
        }
    }

    /// Claims the run's config files: a patched copy for those the command names, in-place
    /// patching (with a durable backup under `state_dir`) for the others. `None` when the run
    /// has no file knobs.
    ///
    /// `journal_as_user`: the state directory is the job's user's, so the entries are kept as
    /// them ([`patch::Patcher::open_as`]).
    pub fn open_files(
        &self,
        state_dir: Option<&Path>,
        run_dir: &Path,
        journal_as_user: bool,
    ) -> Result<Option<patch::Patcher>, patch::PatchError> {
        if self.files.is_empty() {
            return Ok(None);
        }
        let state_dir = state_dir.ok_or_else(|| patch::PatchError::Io {
            action: "keep a backup of",
            path: self.files[0].path.clone(),
            source: std::io::Error::other(
                "neither XDG_STATE_HOME nor HOME is set: set one so oomguard has a state directory",
            ),
        })?;
        let files = self
            .files
            .iter()
            .map(|f| {
                let mode = match f.in_command {
                    Some(_) => patch::Mode::Copy,
                    None => patch::Mode::InPlace,
                };
                (f.path.clone(), mode)
            })
            .collect();
        patch::Patcher::open_as(state_dir, run_dir, files, journal_as_user).map(Some)
    }

    /// Puts each file's text for the next attempt where the job reads it; returns the copies'
    /// paths (see [`KnobSet::input`]).
    pub fn place_files(
        &self,
        patcher: Option<&mut patch::Patcher>,
        values: &[Value],
    ) -> Result<Vec<Option<PathBuf>>, patch::PatchError> {
        let Some(patcher) = patcher else {
            return Ok(Vec::new());
        };
        self.file_texts(values)
            .iter()
            .enumerate()
            .map(|(i, text)| patcher.write(i, text))
            .collect()
    }

    /// Where a knob lives, as messages name it: `--batch_size`, `env PYTORCH_CUDA_ALLOC_CONF`,
    /// `training.batch_size (configs/default.yaml)`.
    pub fn label(&self, i: usize) -> String {
        match &self.knobs[i].place {
            Place::Argv(place) => place.name().to_string(),
            Place::Env(name) => format!("env {name}"),
            Place::File { file, key } => {
                format!("{key} ({})", self.files[*file].path.display())
            }
            Place::Inside { field, .. } => field.clone(),
        }
    }

    /// The relaunch line's account of what moved: `--batch_size 8→4, --grad_accum 1→2`,
    /// `training.batch_size 64→32 (configs/default.yaml)`, `--use_fp16 added`, `set inside the
    /// job: per_device_train_batch_size 32→16, gradient_accumulation_steps 1→2`; `unchanged`
    /// when nothing did.
    pub fn describe_changes(&self, from: &[Value], to: &[Value], changed: &[usize]) -> String {
        // What the probe sets comes last, under one heading.
        let (inside, outside): (Vec<usize>, Vec<usize>) = changed
            .iter()
            .partition(|&&i| matches!(self.knobs[i].place, Place::Inside { .. }));
        let mut parts = self.describe_each(from, to, &outside);
        if !inside.is_empty() {
            parts.push(format!(
                "set inside the job: {}",
                self.describe_each(from, to, &inside).join(", ")
            ));
        }
        if parts.is_empty() {
            "unchanged".to_string()
        } else {
            parts.join(", ")
        }
    }

    /// Each changed knob's account, in order.
    fn describe_each(&self, from: &[Value], to: &[Value], changed: &[usize]) -> Vec<String> {
        changed
            .iter()
            .map(|&i| {
                let knob = &self.knobs[i];
                let shown = |v: &Value| match v {
                    Value::Str(s) if s.is_empty() => "\"\"".to_string(),
                    other => other.to_string(),
                };
                let name = match &knob.place {
                    Place::Argv(place @ argv::Place::Switch { .. }) => {
                        let verb = if matches!(to[i], Value::Bool(true)) {
                            "added"
                        } else {
                            "removed"
                        };
                        return format!("{} {verb}", place.name());
                    }
                    Place::File { file, key } => {
                        return format!(
                            "{key} {}→{} ({})",
                            shown(&from[i]),
                            shown(&to[i]),
                            self.files[*file].path.display()
                        )
                    }
                    _ => self.label(i),
                };
                format!("{name} {}→{}", shown(&from[i]), shown(&to[i]))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{argv, words};

    fn rule(name: &str, moves: Moves) -> Rule {
        Rule {
            name: name.into(),
            moves,
            on: default_causes(),
            partner: None,
        }
    }

    /// One knob of each place: a flag, a switch, a variable and a YAML key.
    fn every_place(command: &[OsString]) -> KnobSet {
        let (flag, _) = argv::locate_flag(command, "--microbatch", "--config").unwrap();
        let switch = argv::locate_switch(command, "--use_fp16", "--config")
            .unwrap()
            .expect("a bare switch");
        let yaml =
            "training:\n  # per step\n  batch_size: 64   # fits a 24G card\n  pin_memory: true\n";
        KnobSet {
            knobs: vec![
                Knob {
                    name: "micro".into(),
                    place: Place::Argv(flag),
                    original: Value::Int(16),
                    rule: rule(
                        "micro",
                        Moves::Step {
                            step: Step::Halve,
                            min: 1,
                        },
                    ),
                },
                Knob {
                    name: "fp16".into(),
                    place: Place::Argv(switch),
                    original: Value::Bool(true),
                    rule: rule("fp16", Moves::Set(Value::Bool(false))),
                },
                Knob {
                    name: "alloc".into(),
                    place: Place::Env("PYTORCH_CUDA_ALLOC_CONF".into()),
                    original: Value::Unset,
                    rule: rule(
                        "alloc",
                        Moves::Set(Value::Str("expandable_segments:True".into())),
                    ),
                },
                Knob {
                    name: "pin_memory".into(),
                    place: Place::File {
                        file: 0,
                        key: "training.pin_memory".into(),
                    },
                    original: Value::Bool(true),
                    rule: rule("pin_memory", Moves::Set(Value::Bool(false))),
                },
            ],
            files: vec![ConfigFile {
                path: "configs/default.yaml".into(),
                format: file::Format::Yaml,
                text: yaml.into(),
                in_command: None,
            }],
            ..KnobSet::default()
        }
    }

    #[test]
    fn the_original_values_leave_every_place_as_written() {
        let command = argv("python cell_train.py --batch_size 64 --microbatch=16 --use_fp16");
        let set = every_place(&command);
        let input = set.input(&command, &set.originals(), &[]);
        assert_eq!(input.argv, command);
        assert!(input.env.is_empty());
        assert_eq!(
            set.file_texts(&set.originals()),
            [set.files[0].text.clone()]
        );
    }

    #[test]
    fn each_place_takes_its_new_value_and_nothing_else_changes() {
        let command = argv("python cell_train.py --batch_size 64 --microbatch=16 --use_fp16");
        let set = every_place(&command);
        let to = vec![
            Value::Int(8),
            Value::Bool(false),
            Value::Str("expandable_segments:True".into()),
            Value::Bool(false),
        ];
        let input = set.input(&command, &to, &[None]);
        assert_eq!(
            words(&input.argv),
            "python cell_train.py --batch_size 64 --microbatch=8"
        );
        assert_eq!(
            input.env,
            [(
                "PYTORCH_CUDA_ALLOC_CONF".to_string(),
                OsString::from("expandable_segments:True")
            )]
        );
        assert_eq!(
            set.file_texts(&to)[0],
            "training:\n  # per step\n  batch_size: 64   # fits a 24G card\n  pin_memory: false\n"
        );
        let line = set.describe_changes(&set.originals(), &to, &[0, 1, 2, 3]);
        assert_eq!(
            line,
            "--microbatch 16→8, --use_fp16 removed, env PYTORCH_CUDA_ALLOC_CONF unset→expandable_segments:True, \
             training.pin_memory true→false (configs/default.yaml)"
        );
        assert_eq!(set.describe_changes(&to, &to, &[]), "unchanged");
    }

    #[test]
    fn a_switch_turned_on_is_added_at_the_end_of_its_part() {
        let command = argv("uv run -- python t.py --bs 8");
        let switch = argv::locate_switch(&command, "--use_fp16", "--config")
            .unwrap()
            .unwrap();
        let mut edits = Vec::new();
        switch.edits(&command, &Value::Bool(true), &mut edits);
        assert_eq!(
            words(&argv::apply_edits(&command, &edits)),
            "uv run -- python t.py --bs 8 --use_fp16"
        );
        // With a value after it, it is a valued flag, not a switch.
        let valued = argv("python t.py --use_fp16 True --bs 8");
        assert_eq!(
            argv::locate_switch(&valued, "--use_fp16", "--config").unwrap(),
            None
        );
        let (place, raw) = argv::locate_flag(&valued, "--use_fp16", "--config").unwrap();
        assert_eq!(raw.as_deref(), Some("True"));
        let mut edits = Vec::new();
        place.edits(&valued, &Value::Bool(false), &mut edits);
        assert_eq!(
            words(&argv::apply_edits(&valued, &edits)),
            "python t.py --use_fp16 False --bs 8"
        );
    }

    #[test]
    fn values_read_from_text_are_typed() {
        let table: &[(&str, Value)] = &[
            ("8", Value::Int(8)),
            ("True", Value::Bool(true)),
            ("false", Value::Bool(false)),
            ("0.5", Value::Float(0.5)),
            ("1e-4", Value::Float(1e-4)),
            ("-1", Value::Float(-1.0)),
            ("nan", Value::Str("nan".into())),
            (
                "expandable_segments:True",
                Value::Str("expandable_segments:True".into()),
            ),
            ("", Value::Str(String::new())),
        ];
        for (text, want) in table {
            assert_eq!(&Value::parse_text(text), want, "{text:?}");
        }
    }

    #[test]
    fn the_copy_keeps_its_extension_beside_the_original() {
        assert_eq!(
            patch_copy_name(Path::new("configs/default.yaml"), "42"),
            "default.oomguard-42.yaml"
        );
        assert_eq!(
            patch_copy_name(Path::new("config"), "42"),
            "config.oomguard-42"
        );
        let command = argv("python main.py --config=configs/default.yaml");
        let token = argv::PathToken {
            index: 2,
            prefix_len: "--config=".len(),
        };
        let edit = token.redirect(
            &command,
            &patch_copy_name(Path::new("configs/default.yaml"), "42"),
        );
        assert_eq!(
            words(&argv::apply_edits(&command, &[edit])),
            "python main.py --config=configs/default.oomguard-42.yaml"
        );
    }
}
