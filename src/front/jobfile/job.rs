//! The job part of a job file ([`JobPart`]): its `name`, `command`, `workdir`, `[env]`,
//! `user`/`group`, and the `[run]` table, whose keys and values are checked against the clap
//! definition of `oomguard run` itself (handed in by the caller,
//! [`crate::front::cli::run_command`], so that this module does not import [`crate::front::cli`],
//! which imports it), key by key so that a bad value names its line. It does not look at users,
//! directories or the command line: that is [`crate::front::runas`]'s and [`crate::front::cli`]'s.

use std::path::PathBuf;

use toml_edit::{Item, Table, TableLike, Value as TomlValue};

use super::{closest, describe, describe_value, Ctx, JobFileError};

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
    /// How the file was reached when it was read ([`super::load`]); `None` when parsed from text.
    pub opened: Option<crate::guard::pathwalk::Opened>,
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

/// The top-level keys of the job part (beside `[[knob]]`).
pub(super) const JOB_KEYS: [&str; 7] =
    ["name", "command", "workdir", "env", "user", "group", "run"];

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
pub fn run_keys(run: &clap::Command) -> Vec<(String, clap::Arg)> {
    run.get_arguments()
        .filter(|arg| !NOT_IN_RUN.iter().any(|(id, _)| arg.get_id() == *id))
        .filter_map(|arg| Some((arg.get_long()?.replace('-', "_"), arg.clone())))
        .collect()
}

/// Parses `run <tokens>` as `oomguard run` would; relations between options (one that
/// requires another, given on the command line perhaps) are left to the caller's full parse.
fn parse_run_tokens<'t>(
    run: &clap::Command,
    tokens: impl IntoIterator<Item = &'t String>,
) -> Result<(), clap::Error> {
    let argv = std::iter::once("run").chain(tokens.into_iter().map(String::as_str));
    match run.clone().try_get_matches_from(argv) {
        Err(err) if err.kind() == clap::error::ErrorKind::MissingRequiredArgument => Ok(()),
        Err(err) => Err(err),
        Ok(_) => Ok(()),
    }
}

/// clap's message on one line: its first paragraph (a list such as the missing arguments
/// joined on), without `error: ` and the help footer.
pub fn clap_message(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.is_empty())
        .collect();
    let joined = paragraph.join(" ");
    let text = joined.strip_prefix("error: ").unwrap_or(&joined);
    if text.is_empty() {
        "invalid arguments".to_string()
    } else {
        text.to_string()
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
    pub(super) fn job_key(
        &self,
        job: &mut JobPart,
        key: &str,
        item: &Item,
        line: usize,
    ) -> Result<(), JobFileError> {
        match key {
            "name" => {
                let name = self.job_string(item, line, "name", "\"nightly\"")?;
                if crate::remember::jobs::name::check_name(&name).is_err() {
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
        let known = run_keys(self.run);
        let mut options = Vec::new();
        for (key, value) in table.iter() {
            let line = self.key_line_like(table, key);
            let Some((_, arg)) = known.iter().find(|(known, _)| known == key) else {
                return Err(self.unknown_run_key(key, line, &known));
            };
            let tokens = self.run_tokens(key, arg, value, line)?;
            if let Err(err) = parse_run_tokens(self.run, &tokens) {
                return Err(self.invalid(
                    line,
                    None,
                    format!(
                        "[run] {key} = {}: {}",
                        self.shown(value),
                        clap_message(&err)
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
    pub(super) fn check_run_together(
        &self,
        root: &Table,
        job: &JobPart,
    ) -> Result<(), JobFileError> {
        let tokens: Vec<&String> = job.run.iter().flat_map(|option| &option.tokens).collect();
        match parse_run_tokens(self.run, tokens) {
            Ok(()) => Ok(()),
            Err(err) => Err(self.invalid(
                self.key_line(root, "run"),
                None,
                format!("[run]: {}", clap_message(&err)),
                "keep one of the two options",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::cli::run_command;
    use crate::front::jobfile::parse;
    use crate::front::jobfile::tests::refused;
    use std::fs;
    use std::path::Path;

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
        let file = parse("job.toml", text, &run_command()).unwrap();
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
        let file = parse(
            "job.toml",
            "env = { A = \"1\" }\nrun = { retries = 2 }\n",
            &run_command(),
        )
        .unwrap();
        assert_eq!(file.job.env, [("A".into(), "1".into())]);
        assert_eq!(file.job.run[0].tokens, ["--retries=2"]);
    }

    /// `[run]` takes exactly the long options clap defines for `oomguard run`, less the few
    /// that belong elsewhere.
    #[test]
    fn run_keys_come_from_the_clap_definition() {
        let keys: Vec<String> = run_keys(&run_command())
            .into_iter()
            .map(|(key, _)| key)
            .collect();
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
        let longs = run_command()
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
            refused(text, *line, wanted);
        }
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
        let file =
            parse("nightly.toml", &example, &run_command()).unwrap_or_else(|err| panic!("{err}"));
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
        let message = parse("nightly.toml", &text, &run_command())
            .unwrap_err()
            .to_string();
        assert!(
            readme.contains(&format!("    {message}\n")),
            "README.md should show: {message}"
        );
    }
}
