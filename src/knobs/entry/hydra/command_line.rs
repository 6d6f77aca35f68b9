//! The command line as Hydra reads it: the script (the first `.py` argument) and where its
//! arguments end, Hydra's own flags (`--config-path`/`-cp`, `--config-name`/`-cn`,
//! `--config-dir`/`-cd`, and those that take a value oomguard skips), and the override grammar
//! (`key=v`, `+key=v`, `++key=v`, `~key`, a `@package` dropped from the key). It only reads the
//! words; what the overrides do to the composed config is [`super::compose`]'s.

use std::ffi::OsString;

use crate::knobs::argv;

/// What the command line says to Hydra: the script and where its arguments end, the config
/// flags, and the overrides.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CommandLine {
    /// argv index of the script (the first `.py` argument).
    pub(super) script: usize,
    /// argv index where the script's arguments end: overrides are added there.
    pub(super) end: usize,
    pub(super) config_path: Option<String>,
    pub(super) config_name: Option<String>,
    pub(super) config_dir: Option<String>,
    pub(super) overrides: Vec<Override>,
}

/// One `key=value` argument of a Hydra app, as its override grammar reads it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Override {
    /// argv index of the token.
    pub(super) index: usize,
    pub(super) op: Op,
    /// The key without its prefix and without `@package`.
    pub(super) key: String,
    /// The value as written; `None` for `~key`.
    pub(super) value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// `key=value`: changes a key (or a group's choice) that is there.
    Set,
    /// `+key=value`: adds a key, or appends a group to the defaults list.
    Add,
    /// `++key=value`: sets whether or not it is there.
    Force,
    /// `~key` / `~key=value`: deletes a key, or a group from the defaults list.
    Delete,
}

/// Hydra's own flags that take a value (`hydra/_internal/utils.py: get_args_parser`).
const VALUED_FLAGS: &[&str] = &[
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--shell-completion",
    "-sc",
    "--experimental-rerun",
];

/// `--info`'s optional word.
const INFO_WORDS: &[&str] = &[
    "all",
    "config",
    "defaults",
    "defaults-tree",
    "plugins",
    "searchpath",
];

impl CommandLine {
    /// The Hydra reading of the command's script arguments; `None` without a `.py` argument.
    pub(super) fn parse(argv: &[OsString]) -> Option<CommandLine> {
        let script = argv.iter().position(|t| {
            t.to_str()
                .is_some_and(|t| t.ends_with(".py") && !t.starts_with('-') && !t.contains('='))
        })?;
        let end = argv::part_end(argv, script);
        let mut line = CommandLine {
            script,
            end,
            config_path: None,
            config_name: None,
            config_dir: None,
            overrides: Vec::new(),
        };
        let mut i = script + 1;
        while i < end {
            let Some(token) = argv[i].to_str() else {
                i += 1;
                continue;
            };
            if token.starts_with('-') {
                let (flag, joined) = match token.split_once('=') {
                    Some((flag, value)) => (flag, Some(value.to_string())),
                    None => (token, None),
                };
                let value = if VALUED_FLAGS.contains(&flag) {
                    joined.or_else(|| {
                        i += 1;
                        argv.get(i).and_then(|t| t.to_str()).map(str::to_string)
                    })
                } else if flag == "--info" || flag == "-i" {
                    if joined.is_none()
                        && argv
                            .get(i + 1)
                            .and_then(|t| t.to_str())
                            .is_some_and(|w| INFO_WORDS.contains(&w))
                    {
                        i += 1;
                    }
                    None
                } else {
                    None
                };
                match flag {
                    "--config-path" | "-cp" => line.config_path = value,
                    "--config-name" | "-cn" => line.config_name = value,
                    "--config-dir" | "-cd" => line.config_dir = value,
                    _ => {}
                }
                i += 1;
                continue;
            }
            if let Some(o) = Override::parse(i, token) {
                line.overrides.push(o);
            }
            i += 1;
        }
        Some(line)
    }
}

impl Override {
    fn parse(index: usize, token: &str) -> Option<Override> {
        let (op, rest) = if let Some(rest) = token.strip_prefix("++") {
            (Op::Force, rest)
        } else if let Some(rest) = token.strip_prefix('+') {
            (Op::Add, rest)
        } else if let Some(rest) = token.strip_prefix('~') {
            (Op::Delete, rest)
        } else {
            (Op::Set, token)
        };
        let (key, value) = match rest.split_once('=') {
            Some((key, value)) => (key, Some(value.to_string())),
            None if op == Op::Delete => (rest, None),
            None => return None,
        };
        let key = key.split_once('@').map_or(key, |(k, _)| k);
        if key.is_empty() {
            return None;
        }
        Some(Override {
            index,
            op,
            key: key.to_string(),
            value: if op == Op::Delete { None } else { value },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

    #[test]
    fn the_command_line_as_hydra_reads_it() {
        let line = CommandLine::parse(&argv(
            "torchrun --nproc_per_node 2 train.py -cn exp --config-path=/abs data=cifar +trainer.precision=16 ++x.y=1 ~model --multirun -cd extra",
        ))
        .unwrap();
        assert_eq!(line.script, 3);
        assert_eq!(line.end, 14);
        assert_eq!(line.config_name.as_deref(), Some("exp"));
        assert_eq!(line.config_path.as_deref(), Some("/abs"));
        assert_eq!(line.config_dir.as_deref(), Some("extra"));
        let ops: Vec<(usize, Op, &str, Option<&str>)> = line
            .overrides
            .iter()
            .map(|o| (o.index, o.op, o.key.as_str(), o.value.as_deref()))
            .collect();
        assert_eq!(
            ops,
            [
                (7, Op::Set, "data", Some("cifar")),
                (8, Op::Add, "trainer.precision", Some("16")),
                (9, Op::Force, "x.y", Some("1")),
                (10, Op::Delete, "model", None),
            ]
        );
        assert_eq!(
            CommandLine::parse(&argv("python -m pkg.train data=x")),
            None
        );
    }
}
