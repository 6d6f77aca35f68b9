//! Where the configs are: the script's `@hydra.main(config_path=…, config_name=…,
//! version_base=…)` read from its text (string literals and `None` only; a variable or a call is
//! unknown, never evaluated), and the search path that gives, with `--config-path` and
//! `--config-dir` from the command line over it and `version_base` deciding the default. Reading
//! the configs there is [`super::compose`]'s.

use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use super::as_user;
use super::command_line::CommandLine;

/// One argument of `@hydra.main(…)`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Arg {
    /// Not given: Hydra's default applies.
    Unspecified,
    /// `None`.
    None,
    Str(String),
    /// An expression oomguard does not evaluate (a variable, a call).
    Unknown,
}

/// The arguments of the script's `@hydra.main` decorator.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Main {
    pub(super) config_path: Arg,
    pub(super) config_name: Arg,
    pub(super) version_base: Arg,
}

static DECORATOR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^[ \t]*@[ \t]*(hydra[ \t]*\.[ \t]*)?main[ \t]*\(")
        .expect("a valid literal regex")
});

/// The script's `@hydra.main(…)` (or `@main(…)` with `from hydra import main`); `None` when it
/// has none.
///
/// ```python
/// @hydra.main(version_base=None, config_path="conf", config_name="config")
/// def main(cfg: DictConfig) -> None:
/// ```
pub(super) fn decorator(text: &str) -> Option<Main> {
    let imports_main = text.lines().any(|l| {
        let l = l.trim();
        l.starts_with("from hydra import")
            && l.split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == "main")
    });
    let found = DECORATOR
        .captures_iter(text)
        .find(|c| c.get(1).is_some() || imports_main)?;
    let args = call_args(&text[found.get(0).expect("whole match").end()..])?;
    let mut main = Main {
        config_path: Arg::Unspecified,
        config_name: Arg::Unspecified,
        version_base: Arg::Unspecified,
    };
    let mut position = 0;
    for arg in args {
        let (name, value) = match keyword(&arg) {
            Some((name, value)) => (name, value),
            None => {
                position += 1;
                match position {
                    1 => ("config_path", arg.as_str()),
                    2 => ("config_name", arg.as_str()),
                    3 => ("version_base", arg.as_str()),
                    _ => continue,
                }
            }
        };
        let value = literal(value);
        match name {
            "config_path" => main.config_path = value,
            "config_name" => main.config_name = value,
            "version_base" => main.version_base = value,
            _ => {}
        }
    }
    Some(main)
}

/// `name=value` of a keyword argument.
fn keyword(arg: &str) -> Option<(&str, &str)> {
    let (name, value) = arg.split_once('=')?;
    let name = name.trim();
    let ident = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    (ident && !value.starts_with('=')).then(|| (name, value.trim()))
}

/// The top-level arguments of a call whose `(` was just read, comments dropped; `None` if the
/// call does not close.
fn call_args(rest: &str) -> Option<Vec<String>> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                current.push(c);
                while let Some(d) = chars.next() {
                    current.push(d);
                    if d == '\\' {
                        current.extend(chars.next());
                    } else if d == c {
                        break;
                    }
                }
            }
            '#' => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '(' | '[' | '{' => {
                depth += 1;
                current.push(c);
            }
            ')' | ']' | '}' if depth > 0 => {
                depth -= 1;
                current.push(c);
            }
            ')' => {
                if !current.trim().is_empty() {
                    args.push(current.trim().to_string());
                }
                return Some(args);
            }
            ',' if depth == 0 => {
                args.push(current.trim().to_string());
                current.clear();
            }
            _ => current.push(c),
        }
    }
    None
}

/// A Python string literal (`"conf"`, `'conf'`, `r"conf"`) or `None`.
fn literal(value: &str) -> Arg {
    if value == "None" {
        return Arg::None;
    }
    let (raw, rest) = match value.strip_prefix(['r', 'R']) {
        Some(rest) => (true, rest),
        None => (false, value.strip_prefix(['u', 'U']).unwrap_or(value)),
    };
    let Some(quote) = rest.chars().next().filter(|&c| c == '\'' || c == '"') else {
        return Arg::Unknown;
    };
    let Some(body) = rest[1..].strip_suffix(quote) else {
        return Arg::Unknown;
    };
    if body.contains(quote) && !body.contains('\\') || body.starts_with(quote) {
        return Arg::Unknown;
    }
    if raw || !body.contains('\\') {
        return Arg::Str(body.to_string());
    }
    Arg::Unknown
}

/// Whether `version_base` makes `config_path` default to none (1.2 and later, and `None`,
/// which means the installed version); before that, and unspecified, it is the script's own
/// directory.
fn no_default_config_path(version_base: &Arg) -> bool {
    match version_base {
        Arg::Unspecified => false,
        Arg::None | Arg::Unknown => true,
        Arg::Str(v) => {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            let major = parts.next().unwrap_or(0);
            let minor = parts.next().unwrap_or(0);
            (major, minor) >= (1, 2)
        }
    }
}

/// The directories configs are looked up in, in order: the primary config's directory, then
/// `--config-dir`. `None` when there is none or it cannot be known.
pub(super) fn search_path(
    line: &CommandLine,
    main: &Main,
    script: &Path,
    cwd: &Path,
) -> Option<Vec<PathBuf>> {
    let config_path = match (&line.config_path, &main.config_path) {
        (Some(path), _) => Some(path.clone()),
        (None, Arg::Str(path)) => Some(path.clone()),
        (None, Arg::None) => None,
        (None, Arg::Unspecified) => {
            (!no_default_config_path(&main.version_base)).then(|| ".".to_string())
        }
        (None, Arg::Unknown) => return None,
    };
    let mut dirs = Vec::new();
    if let Some(path) = config_path.filter(|p| !p.starts_with("pkg://")) {
        let path = path.strip_prefix("file://").unwrap_or(&path);
        // Relative to the script's real directory (`realpath(dirname(calling_file))`).
        let dir = script.parent()?;
        let base = as_user(|| std::fs::canonicalize(dir)).ok()?;
        dirs.push(normalize(&base.join(path)));
    }
    if let Some(dir) = &line.config_dir {
        dirs.push(normalize(&cwd.join(dir)));
    }
    (!dirs.is_empty()).then_some(dirs)
}

/// `a/b/../c` as `a/c`, as Python's `normpath` does, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decorators_in_their_spellings() {
        // (script text, config_path, config_name, version_base)
        let table: &[(&str, Arg, Arg, Arg)] = &[
            (
                "import hydra\n@hydra.main(version_base=None, config_path=\"conf\", config_name=\"config\")\ndef main(cfg): ...\n",
                Arg::Str("conf".into()),
                Arg::Str("config".into()),
                Arg::None,
            ),
            (
                "import hydra\n@hydra.main(config_name='train', config_path='../configs', version_base='1.3')\ndef main(cfg): ...\n",
                Arg::Str("../configs".into()),
                Arg::Str("train".into()),
                Arg::Str("1.3".into()),
            ),
            (
                "from hydra import main\n@main(\n    config_path=\"conf\",  # the configs, (here)\n    config_name=\"cfg\",\n)\ndef run(cfg): ...\n",
                Arg::Str("conf".into()),
                Arg::Str("cfg".into()),
                Arg::Unspecified,
            ),
            (
                "import hydra\n@hydra.main(\"conf\", \"config\")\ndef main(cfg): ...\n",
                Arg::Str("conf".into()),
                Arg::Str("config".into()),
                Arg::Unspecified,
            ),
            (
                "import hydra\n@hydra.main(config_path=CONF, config_name=\"c\", version_base=\"1.1\")\ndef main(cfg): ...\n",
                Arg::Unknown,
                Arg::Str("c".into()),
                Arg::Str("1.1".into()),
            ),
            (
                "import hydra\n@hydra.main(config_name=\"c\", version_base=\"1.1\")\ndef main(cfg): ...\n",
                Arg::Unspecified,
                Arg::Str("c".into()),
                Arg::Str("1.1".into()),
            ),
        ];
        for (text, path, name, version) in table {
            let main = decorator(text).unwrap_or_else(|| panic!("no decorator in {text}"));
            assert_eq!(
                (&main.config_path, &main.config_name, &main.version_base),
                (path, name, version),
                "{text}"
            );
        }
        // Not Hydra: another library's `main`, or a decorator in a string.
        for text in [
            "import click\n@click.main()\ndef f(): ...\n",
            "from app import main\n@main(config_name=\"x\")\ndef f(): ...\n",
            "x = '@hydra.main(config_name=\"x\")'\n",
        ] {
            assert_eq!(decorator(text), None, "{text}");
        }
    }

    #[test]
    fn config_path_defaults_by_version_base() {
        // (version_base, whether config_path defaults to none)
        let table: &[(Arg, bool)] = &[
            (Arg::Unspecified, false),
            (Arg::Str("1.1".into()), false),
            (Arg::Str("1.2".into()), true),
            (Arg::Str("1.3".into()), true),
            (Arg::None, true),
        ];
        for (version, none) in table {
            assert_eq!(no_default_config_path(version), *none, "{version:?}");
        }
    }
}
