//! The knob model: what oomguard turns between attempts, wherever the job keeps it. A knob has
//! a name, a [`Place`] (a flag or override in the command, an environment variable of the job,
//! a key in a config file), the value the user gave it, and a [`Rule`] saying how it moves.
//! The batch and accumulation pair found automatically are two knobs of this model, named
//! `batch` and `accum`.
//!
//! A module per place: [`argv`] finds and rewrites flags, [`env`] variables, [`file`] edits a
//! key's value in YAML, JSON, TOML or Python text, [`patch`] puts an edited file where the job
//! reads it and always gives the user's file back. [`resolve`] builds a run's knobs from the
//! command line and `--config`. Which knob moves when is [`crate::policy`]'s decision, made
//! without knowing where knobs live; this module turns values into an attempt's argv,
//! environment and file texts, and tells what changed.

pub mod argv;
pub mod env;
pub mod file;
// pub mod patch; (merging)
pub mod resolve;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::policy::{Moves, Rule};

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
}

/// What one attempt gets: its argv (before patched copies are pointed at), the environment
/// variables set on top of oomguard's, and each config file's text.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptInput {
    pub argv: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
    /// One text per [`KnobSet::files`] entry.
    pub file_texts: Vec<String>,
}

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

    /// The integer value of the knob named `name` in `values` (summary.json's `batch_size` and
    /// `accum` read `batch` and `accum`).
    pub fn int_of(&self, name: &str, values: &[Value]) -> Option<u64> {
        values.get(self.index(name)?)?.as_int()
    }

    /// The batch knob halves without a partner to keep the effective batch: the user should
    /// hear that the effective batch shrinks.
    pub fn effective_shrinks(&self) -> bool {
        self.automatic
            && !self.kept_by_job
            && self
                .index("batch")
                .is_some_and(|i| self.knobs[i].rule.partner.is_none())
    }

    /// The argv, environment and file texts that give the knobs `values`. A knob at its
    /// original value leaves its place exactly as the user wrote it.
    pub fn input(&self, command: &[OsString], values: &[Value]) -> AttemptInput {
        let mut edits = Vec::new();
        let mut env = Vec::new();
        let mut file_texts: Vec<String> = self.files.iter().map(|f| f.text.clone()).collect();
        for (knob, value) in self.knobs.iter().zip(values) {
            if knob.original.same(value) {
                continue;
            }
            match &knob.place {
                Place::Argv(place) => place.edits(command, value, &mut edits),
                Place::Env(name) => env.push((name.clone(), env::value_text(value))),
                Place::File { file, key } => {
                    let format = self.files[*file].format;
                    let scalar = value
                        .to_scalar()
                        .expect("resolve checked every value a file knob can take");
                    file_texts[*file] = file::set(format, &file_texts[*file], key, &scalar)
                        .expect("resolve located every key in the file's text");
                }
            }
        }
        AttemptInput {
            argv: argv::apply_edits(command, &edits),
            env,
            file_texts,
        }
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
        }
    }

    /// The relaunch line's account of what moved: `--batch_size 8→4, --grad_accum 1→2`,
    /// `training.batch_size 64→32 (configs/default.yaml)`, `--use_fp16 added`; `unchanged`
    /// when nothing did.
    pub fn describe_changes(&self, from: &[Value], to: &[Value], changed: &[usize]) -> String {
        let parts: Vec<String> = changed
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
            .collect();
        if parts.is_empty() {
            "unchanged".to_string()
        } else {
            parts.join(", ")
        }
    }

    /// Whether a knob can ever move on its own (it is not only a partner).
    pub fn steps_alone(&self, i: usize) -> bool {
        !matches!(self.knobs[i].rule.moves, Moves::Partner)
    }
}
