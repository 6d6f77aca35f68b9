//! The `[[knob]]` ladder of a job file: each table's keys read and checked ([`KnobSpec`]: the
//! knob's name, its one place, how it moves, its partner, the causes it answers), then the
//! ladder as a whole (names unique, partners that exist). It does not look at the job's command
//! or files: whether a flag is in the command or a key in a file is
//! [`crate::front::settings::job_knobs`]'s.

use std::path::PathBuf;

use toml_edit::{Item, Table, Value as TomlValue};

use super::{closest, describe, describe_value, ordinal, Ctx, JobFileError};
use crate::judge::outcome::Cause;
use crate::knobs::file::Format;
use crate::knobs::Value;

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
pub use crate::knobs::Step;

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

/// A knob as parsed, with the lines later checks point at.
pub(super) struct Parsed {
    pub(super) spec: KnobSpec,
    name_line: usize,
    partner_line: usize,
}

impl Parsed {
    fn is_set(&self) -> bool {
        matches!(self.spec.moves, Moves::Set(_))
    }
}

impl Ctx<'_> {
    /// One `[[knob]]` table: every check that needs only this table.
    pub(super) fn knob(&self, index: usize, table: &Table) -> Result<Parsed, JobFileError> {
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
            .filter(|cause| cause.steps_knobs())
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
            if !cause.steps_knobs() {
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
    pub(super) fn check_names(&self, parsed: &[Parsed]) -> Result<(), JobFileError> {
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
    pub(super) fn check_partners(&self, parsed: &[Parsed]) -> Result<(), JobFileError> {
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

fn place_example(key: &str) -> &'static str {
    match key {
        "flag" => "\"--batch_size\"",
        "override" => "\"training.batch_size\"",
        "env" => "\"PYTORCH_CUDA_ALLOC_CONF\"",
        _ => "\"configs/default.yaml\"",
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::cli::run_command;
    use crate::front::jobfile::{load, parse};
    use std::fs;
    use std::path::Path;

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
        let file = parse("job.toml", text, &run_command()).expect("the issue's example is valid");
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
            let file = parse("f.toml", &text, &run_command())
                .unwrap_or_else(|err| panic!("{keys:?}: {err}"));
            assert_eq!(file.knobs.len(), 1, "{keys:?}");
            assert_eq!(&file.knobs[0].place, place, "{keys:?}");
            assert_eq!(&file.knobs[0].moves, moves, "{keys:?}");
            assert_eq!(file.knobs[0].line, 1, "{keys:?}");
        }
    }

    #[test]
    fn on_takes_every_cause_relaunched_smaller_and_drops_repeats() {
        let text = r#"[[knob]]
name = "k"
flag = "--k"
on = ["device_oom", "host_oom", "worker_killed", "oom_killed", "killed", "memory_limit", "killed"]
"#;
        let file = parse("f.toml", text, &run_command()).unwrap();
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
        let file = parse("f.toml", text, &run_command()).unwrap();
        let names: Vec<&str> = file.knobs.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["accum", "batch"]);
        assert_eq!(file.knobs[1].keep_product_with.as_deref(), Some("accum"));
    }

    #[test]
    fn the_readme_shows_the_message_as_it_is() {
        let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("README.md is readable");
        let text = "[[knob]]\nname = \"batch\"\nflag = \"--batch_size\"\nstpe = -1\n";
        let message = parse("job.toml", text, &run_command())
            .unwrap_err()
            .to_string();
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

    #[test]
    fn examples_say_what_each_knob_does() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let knob = |file: &str, name: &str| -> KnobSpec {
            load(&dir.join(file), &run_command())
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
