//! The `--config FILE` TOML: reads its `[[knob]]` ladder and checks it whole before anything
//! starts, so every mistake a user can make in it (a typo in a key, two places for one knob, a
//! partner that does not exist, a cause that is never relaunched smaller) is one line naming
//! the file, the line and the knob, with the fix. The file is parsed with `toml_edit`, whose
//! document keeps each key's and table's byte span, so messages point at the line where the
//! mistake is.
//!
//! The same file can carry the job itself, for unattended runs ([`JobPart`]): its `name`, `command`
//! (a list, never a shell string), `workdir`, `[env]`, `user`/`group`, and a `[run]` table of
//! `oomguard run`'s long options (`max_attempts = 10`). The keys `[run]` accepts, and what their
//! values mean, come from the clap definition of `oomguard run` itself: each value is turned into
//! the flag's own text (`--max-attempts=10`) and parsed by clap, here key by key so that a bad
//! value names its line, and again by [`crate::front::cli`] together with the command line.
//!
//! This module is pure: text in, validated [`KnobSpec`]s and [`JobPart`] out (plus [`load`], which
//! only reads the file). It does not look at the job's command, environment, config files, users or
//! directories: whether a flag is in the command, a key in a file, a user in the passwd database or
//! the workdir on disk is checked by whoever uses the specs ([`crate::front::settings::job_knobs`],
//! [`crate::front::runas`]). An unknown top-level key is an error naming it.
//!
//! Its parts: [`ladder`] reads the `[[knob]]` tables, [`job`] the job part and `[run]`; this file
//! holds what they share (the file as a whole, the parse context that turns a position into a
//! line, and the typo hints).

use std::path::{Path, PathBuf};

use toml_edit::{Document, Item, Table, Value as TomlValue};

use crate::knobs::file::line_of;
use job::{run_keys, JobPart, JOB_KEYS};
use ladder::KnobSpec;

pub mod job;
pub mod ladder;

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

/// The top-level keys of a job file, as messages list them.
pub const TOP_LEVEL_KEYS: &str = "name, command, workdir, user, group, [env], [run], [[knob]]";

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

/// Reads and validates the `--config` file at `path`; a read error is one line with the path
/// and the OS's reason. The file is opened once ([`crate::guard::pathwalk`]): the bytes parsed are
/// those of the file whose path is later checked for who could have written it. `run` is the
/// clap definition of `oomguard run` (`cli::run_command()`), which `[run]` is checked against.
pub fn load(path: &Path, run: &clap::Command) -> Result<JobFile, JobFileError> {
    let read_error = |source| JobFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let (bytes, opened) = crate::guard::pathwalk::read(path).map_err(read_error)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it is not UTF-8 text",
        ))
    })?;
    let mut file = parse(&path.display().to_string(), &text, run)?;
    file.job.opened = Some(opened);
    Ok(file)
}

/// Parses and validates a `--config` file's `text`; `file_label` names it in messages, `run` is
/// the clap definition of `oomguard run` (`cli::run_command()`).
pub fn parse(file_label: &str, text: &str, run: &clap::Command) -> Result<JobFile, JobFileError> {
    let ctx = Ctx {
        file: file_label,
        text,
        run,
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
                    None if run_keys(ctx.run).iter().any(|(key, _)| key == other) => {
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

/// The file being read, for line numbers and messages.
struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    /// The clap definition of `oomguard run`, which `[run]` is checked against.
    run: &'a clap::Command,
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
        let message = crate::knobs::file::toml::first_line(err);
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
pub(super) mod tests {
    use super::*;
    use crate::front::cli::run_command;
    use std::fs;

    /// `text` as a job file is refused with one line: `job.toml:LINE: ` the problem containing
    /// `wanted`, then `; ` and the fix. Returns the error.
    pub(super) fn refused(text: &str, line: usize, wanted: &str) -> JobFileError {
        let err = match parse("job.toml", text, &run_command()) {
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
        err
    }

    #[test]
    fn a_file_without_knobs_is_fine() {
        for text in ["", "# nothing yet\n", "\n\n"] {
            assert_eq!(
                parse("f.toml", text, &run_command()).unwrap().knobs,
                vec![],
                "{text:?}"
            );
        }
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
        parse("job.toml", OK, &run_command()).expect("the base knob is valid");
        for (text, line, wanted) in rows {
            let err = refused(text, *line, wanted);
            match err {
                JobFileError::Invalid { line: got, .. } => assert_eq!(got, *line),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn load_reads_the_file_and_names_it_when_it_cannot() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("job.toml");
        fs::write(&path, "[[knob]]\nname = \"b\"\nflag = \"--b\"\nmin = -2\n").unwrap();
        let message = load(&path, &run_command()).unwrap_err().to_string();
        assert_eq!(
            message,
            format!(
                "{}:4: knob \"b\": min = -2 is negative; write min = 0 or more (the default is 1)",
                path.display()
            )
        );

        let missing = dir.path().join("nope.toml");
        let message = load(&missing, &run_command()).unwrap_err().to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(
            message.starts_with(&format!("{}: cannot read", missing.display())),
            "{message}"
        );
        assert!(message.contains("No such file or directory"), "{message}");
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
            let file = load(&dir.join(name), &run_command()).unwrap_or_else(|err| panic!("{err}"));
            let names: Vec<&str> = file.knobs.iter().map(|k| k.name.as_str()).collect();
            assert_eq!(&names, knobs, "{name}");
        }
    }
}
