//! Hydra: where a `@hydra.main` job keeps its batch when no `key=value` override of the command
//! names it. Finds the primary config (`--config-path`/`-cp` and `--config-name`/`-cn` on the
//! command line, else the script's `@hydra.main(config_path=…, config_name=…)`), composes it as
//! Hydra would — the defaults list (groups, `optional`, `override`, `@package` and
//! `# @package` headers, `_self_`'s position, nested lists), the command line's group choices
//! (`data=cifar`, `+group=x`, `~group`) and its overrides of other keys (`key=v`, `+key=v`,
//! `++key=v`, `~key`) — and picks the training batch (a key ending in `batch_size`) and the
//! accumulation (`accumulate_grad_batches`, `gradient_accumulation_steps`) from the result.
//! Both move by overrides added to the command (`data.batch_size=128`); no file is written or
//! registered for patching. Files are read as the job's user.
//!
//! Left to Hydra and not imitated: `pkg://` search paths and `hydra.searchpath`, structured
//! configs (`ConfigStore`), interpolations (`${…}` is not a number: said, never guessed), list
//! merges and `_global_`-relative tricks beyond `@package` / `_here_`. Anything it cannot follow
//! (a missing option, an unparseable file) means "not found": the job runs as before.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::sync::LazyLock;

use regex::Regex;
use saphyr_parser::{Event, Parser, ScalarStyle};

use super::Found;
use crate::knobs::argv;
use crate::knobs::file::{yaml, Scalar};
use crate::knobs::reader::{KnobError, Reader, Request};
use crate::knobs::Place;

/// The entrypoint's name in notes and `--dry-run`.
const NAME: &str = "Hydra";

/// How deep nested defaults lists are followed: a cycle (`a` lists `b`, `b` lists `a`) stops here.
const MAX_DEPTH: usize = 16;

/// The most configs one composition takes in (a file named twice counts twice): real trees
/// compose tens. Defaults lists that each name the next level twice double the count per level
/// ([`MAX_DEPTH`] levels: 65,536), all in root's oomguard before any limit of the job's exists.
const MAX_COMPOSED: usize = 1000;

/// The most config text one composition takes in, a file named twice counted twice: it bounds
/// both the work of parsing and the composed tree. Each distinct file is read once (a file
/// named again is taken from memory), so this also bounds what is held. A file of tiny keys
/// (`k1: 1`) costs about seventy times its text while parsed and composed (each key's events,
/// dotted name, value and nodes): 2 MiB, far above real trees (tens of configs of a few KiB),
/// keeps that under about 150 MiB.
const MAX_COMPOSED_BYTES: u64 = 2 << 20;

/// Accumulation key suffixes, as [`argv`] knows them on the command line.
const ACCUM_SUFFIXES: &[&str] = &["accumulate_grad_batches", "gradient_accumulation_steps"];

/// The batch and accumulation of a Hydra job's composed primary config; `None` when the command
/// is no Hydra job, its config cannot be composed, or it holds no batch.
pub(in crate::knobs) fn find(
    request: &Request,
    _reader: &mut Reader,
    notes: &mut Vec<String>,
) -> Result<Option<Found>, KnobError> {
    match find_in(request) {
        // A batch the config holds but not as a number oomguard can move (an interpolation,
        // `???`): the job still runs, supervised as a job with no batch knob, and the run's
        // first lines say how to give one.
        Err(KnobError::Knob { where_, problem }) => {
            notes.push(format!("{where_}: {problem}"));
            Ok(None)
        }
        other => other,
    }
}

/// [`find`], which reads no file through the resolver's reader: the composed files are no
/// knob's place, and none of them is patched.
fn find_in(request: &Request) -> Result<Option<Found>, KnobError> {
    let Some(line) = CommandLine::parse(request.command) else {
        return Ok(None);
    };
    let script = request.cwd.join(os_path(&request.command[line.script]));
    let Ok(script_text) = read_text(&script) else {
        return Ok(None);
    };
    let Some(main) = decorator(&script_text) else {
        return Ok(None);
    };
    let Some(search) = search_path(&line, &main, &script, request.cwd) else {
        return Ok(None);
    };
    let name = match (&line.config_name, &main.config_name) {
        (Some(name), _) => name.clone(),
        (None, Arg::Str(name)) => name.clone(),
        _ => return Ok(None),
    };
    let shown_from = as_user(|| std::fs::canonicalize(request.cwd)).unwrap_or(request.cwd.into());
    let mut composer = Composer::new(search, shown_from, &line);
    let config = match composer.compose_primary(name.trim_end_matches(".yaml")) {
        Ok(config) => config,
        // Past a bound: one line (the caller's note), and the run goes on without a batch
        // found here.
        Err(Stop(why)) if composer.gave_up => {
            return Err(KnobError::Knob {
                where_: NAME.to_string(),
                problem: format!(
                    "gave up composing {name}: {why}; the batch is not looked for there (name it with --batch-arg)"
                ),
            })
        }
        Err(_) => return Ok(None),
    };
    pick(request.command, &line, &composer, &config)
}

/// Reads `path` (UTF-8, a regular file of sane size) as the job's user.
fn read_text(path: &Path) -> io::Result<String> {
    let bytes = as_user(|| {
        crate::guard::fsutil::read_regular_capped(path, crate::guard::fsutil::SMALL_FILE_MAX_BYTES)
    })?;
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

fn as_user<T>(work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    crate::guard::principal::as_user(work)
}

fn os_path(token: &OsString) -> &Path {
    Path::new(token.as_os_str())
}

/// What the command line says to Hydra: the script and where its arguments end, the config
/// flags, and the overrides.
#[derive(Debug, Clone, PartialEq)]
struct CommandLine {
    /// argv index of the script (the first `.py` argument).
    script: usize,
    /// argv index where the script's arguments end: overrides are added there.
    end: usize,
    config_path: Option<String>,
    config_name: Option<String>,
    config_dir: Option<String>,
    overrides: Vec<Override>,
}

/// One `key=value` argument of a Hydra app, as its override grammar reads it.
#[derive(Debug, Clone, PartialEq)]
struct Override {
    /// argv index of the token.
    index: usize,
    op: Op,
    /// The key without its prefix and without `@package`.
    key: String,
    /// The value as written; `None` for `~key`.
    value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
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
    fn parse(argv: &[OsString]) -> Option<CommandLine> {
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

/// One argument of `@hydra.main(…)`.
#[derive(Debug, Clone, PartialEq)]
enum Arg {
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
struct Main {
    config_path: Arg,
    config_name: Arg,
    version_base: Arg,
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
fn decorator(text: &str) -> Option<Main> {
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
fn search_path(line: &CommandLine, main: &Main, script: &Path, cwd: &Path) -> Option<Vec<PathBuf>> {
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

/// A config tree: mappings in file order, lists, and scalars that remember where they came from.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    Leaf(Leaf),
}

#[derive(Debug, Clone, PartialEq)]
struct Leaf {
    /// The scalar's text; `None` for an alias.
    text: Option<String>,
    plain: bool,
    from: Origin,
}

/// Where a value of the composed config was set.
#[derive(Debug, Clone, PartialEq)]
enum Origin {
    /// Key `key` of composed file `file`.
    File { file: usize, key: String },
    /// The override at argv index `index`.
    Override { index: usize },
}

impl Leaf {
    fn is_null(&self) -> bool {
        self.plain
            && matches!(
                self.text.as_deref(),
                Some("" | "~" | "null" | "Null" | "NULL")
            )
    }
}

/// The first document of `text` as a tree whose leaves name `file`; `None` if it does not parse.
fn tree(text: &str, file: usize) -> Option<Node> {
    let mut events = Vec::new();
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        let (event, _) = next.ok()?;
        let end = matches!(event, Event::DocumentEnd);
        events.push(event);
        if end {
            break;
        }
    }
    let start = events
        .iter()
        .position(|e| matches!(e, Event::DocumentStart(_)))?;
    let mut at = start + 1;
    match events.get(at) {
        None | Some(Event::DocumentEnd | Event::StreamEnd) => Some(Node::Map(Vec::new())),
        Some(_) => build(&events, &mut at, file, ""),
    }
}

/// The node starting at `events[*at]`, leaving `*at` after it.
fn build(events: &[Event], at: &mut usize, file: usize, key: &str) -> Option<Node> {
    let event = events.get(*at)?;
    *at += 1;
    match event {
        Event::Scalar(value, style, ..) => Some(Node::Leaf(Leaf {
            text: Some(value.to_string()),
            plain: *style == ScalarStyle::Plain,
            from: Origin::File {
                file,
                key: key.to_string(),
            },
        })),
        Event::Alias(_) => Some(Node::Leaf(Leaf {
            text: None,
            plain: false,
            from: Origin::File {
                file,
                key: key.to_string(),
            },
        })),
        Event::SequenceStart(..) => {
            let mut items = Vec::new();
            while !matches!(events.get(*at)?, Event::SequenceEnd) {
                items.push(build(events, at, file, key)?);
            }
            *at += 1;
            Some(Node::Seq(items))
        }
        Event::MappingStart(..) => {
            let mut entries: Vec<(String, Node)> = Vec::new();
            // Where each key is in `entries`: a mapping of many keys is built in linear time.
            let mut index: HashMap<String, usize> = HashMap::new();
            while !matches!(events.get(*at)?, Event::MappingEnd) {
                let name = match events.get(*at)? {
                    Event::Scalar(name, ..) => Some(name.to_string()),
                    _ => None,
                };
                let child_key = match (&name, key) {
                    (Some(n), "") => n.clone(),
                    (Some(n), k) => format!("{k}.{n}"),
                    (None, _) => String::new(),
                };
                build(events, at, file, "")?;
                let value = build(events, at, file, &child_key)?;
                // A key that is not a scalar (`? [a, b]`) or `<<` is not a config key.
                if let Some(name) = name.filter(|n| n != "<<") {
                    match index.get(&name) {
                        Some(&i) => entries[i].1 = value,
                        None => {
                            index.insert(name.clone(), entries.len());
                            entries.push((name, value));
                        }
                    }
                }
            }
            *at += 1;
            Some(Node::Map(entries))
        }
        _ => None,
    }
}

/// Up to this many keys of a mapping are merged by looking each up in turn.
const MERGE_SCAN_MAX: usize = 16;

/// `src` merged into `dst` as OmegaConf merges configs: mappings key by key, anything else
/// replaced.
fn merge(dst: &mut Node, src: Node) {
    match (dst, src) {
        // A few keys are looked for one by one; many through an index of `dst`'s, so that
        // merging a mapping of many keys takes linear time, not quadratic.
        (Node::Map(d), Node::Map(s)) if s.len() <= MERGE_SCAN_MAX => {
            for (key, value) in s {
                match d.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => merge(&mut slot.1, value),
                    None => d.push((key, value)),
                }
            }
        }
        (Node::Map(d), Node::Map(s)) => {
            let mut index: HashMap<String, usize> = d
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect();
            for (key, value) in s {
                match index.get(&key) {
                    Some(&i) => merge(&mut d[i].1, value),
                    None => {
                        index.insert(key.clone(), d.len());
                        d.push((key, value));
                    }
                }
            }
        }
        (dst, src) => *dst = src,
    }
}

/// `node` placed at the dotted `package` (`data` → `{data: node}`).
fn at_package(node: Node, package: &str) -> Node {
    package
        .split('.')
        .filter(|s| !s.is_empty())
        .rev()
        .fold(node, |node, segment| {
            Node::Map(vec![(segment.to_string(), node)])
        })
}

/// The node at a dotted key; with `create`, missing mappings on the way are made.
fn slot<'a>(root: &'a mut Node, key: &str, create: bool) -> Option<&'a mut Node> {
    let mut node = root;
    for segment in key.split('.') {
        let Node::Map(entries) = node else {
            return None;
        };
        let i = match entries.iter().position(|(k, _)| k == segment) {
            Some(i) => i,
            None if create => {
                entries.push((segment.to_string(), Node::Map(Vec::new())));
                entries.len() - 1
            }
            None => return None,
        };
        node = &mut entries[i].1;
    }
    Some(node)
}

/// Removes the dotted key.
fn delete(root: &mut Node, key: &str) {
    let (parent, last) = match key.rsplit_once('.') {
        Some((parent, last)) => (slot(root, parent, false), last),
        None => (Some(root), key),
    };
    if let Some(Node::Map(entries)) = parent {
        entries.retain(|(k, _)| k != last);
    }
}

/// Every scalar of the tree with its dotted key, in order.
fn leaves<'a>(node: &'a Node, prefix: &str, out: &mut Vec<(String, &'a Leaf)>) {
    match node {
        Node::Map(entries) => {
            for (k, v) in entries {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &key, out);
            }
        }
        Node::Leaf(leaf) => out.push((prefix.to_string(), leaf)),
        Node::Seq(_) => {}
    }
}

/// One entry of a defaults list.
#[derive(Debug, Clone, PartialEq)]
enum Listed {
    SelfRef,
    /// `- group@package: option` (options several for a list, none for `null`).
    Group {
        group: String,
        package: Option<String>,
        options: Vec<String>,
        optional: bool,
        is_override: bool,
    },
    /// `- path` / `- path@package`: a config that is no group choice.
    Config {
        path: String,
        package: Option<String>,
    },
}

/// The entries of a `defaults:` list; `None` for one that is not a list of such entries.
fn defaults(list: &Node) -> Option<Vec<Listed>> {
    let Node::Seq(items) = list else {
        return None;
    };
    let mut out = Vec::new();
    for item in items {
        match item {
            Node::Leaf(Leaf {
                text: Some(text), ..
            }) => {
                if text == "_self_" {
                    out.push(Listed::SelfRef);
                } else {
                    let (path, package) = split_package(text);
                    out.push(Listed::Config { path, package });
                }
            }
            Node::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                let mut words: Vec<&str> = key.split_whitespace().collect();
                let group_word = words.pop()?;
                let optional = words.contains(&"optional");
                let is_override = words.contains(&"override");
                let (group, package) = split_package(group_word);
                let options = match value {
                    Node::Leaf(leaf) if leaf.is_null() => Vec::new(),
                    Node::Leaf(Leaf {
                        text: Some(option), ..
                    }) => vec![option.clone()],
                    Node::Seq(items) => items
                        .iter()
                        .map(|i| match i {
                            Node::Leaf(Leaf { text: Some(o), .. }) => Some(o.clone()),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()?,
                    _ => return None,
                };
                out.push(Listed::Group {
                    group,
                    package,
                    options,
                    optional,
                    is_override,
                });
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `group@package` → (`group`, `package`).
fn split_package(text: &str) -> (String, Option<String>) {
    match text.split_once('@') {
        Some((g, p)) => (g.to_string(), Some(p.to_string())),
        None => (text.to_string(), None),
    }
}

/// A group or config path resolved against the containing config's group directory; a
/// leading `/` is absolute.
fn resolve_path(base: &str, path: &str) -> String {
    match path.strip_prefix('/') {
        Some(absolute) => absolute.to_string(),
        None if base.is_empty() => path.to_string(),
        None => format!("{base}/{path}"),
    }
}

/// The `# @package X` header: among the `# @key value` lines that open a config file, blank
/// lines between them (`hydra/plugins/config_source.py: _get_header_dict`); any other line,
/// a plain comment included, ends the header.
fn package_header(text: &str) -> Option<String> {
    static HEADER: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^#\s*@(\S+)\s+(\S+)\s*$").expect("a valid literal regex"));
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let c = HEADER.captures(line)?;
        if &c[1] == "package" {
            return Some(c[2].to_string());
        }
    }
    None
}

/// Where a config lands (`hydra/core/default_element.py: _get_final_package`): the package
/// given in the defaults list, else the file's header (always absolute), else its group path,
/// relative to the containing config's package; whatever follows the last `_global_` is
/// absolute.
fn final_package(
    parent: &str,
    explicit: Option<&str>,
    header: Option<&str>,
    group_path: &str,
    relative_group: &str,
) -> String {
    let header = header.filter(|h| *h != "_group_").map(|h| {
        if h.is_empty() || h == "_global_" || h.starts_with("_global_.") {
            if h.is_empty() {
                "_global_".to_string()
            } else {
                h.to_string()
            }
        } else {
            format!("_global_.{h}")
        }
    });
    let package = match explicit {
        Some("_here_") => String::new(),
        Some(p) if p.contains("_group_") => {
            format!(
                "_global_.{}",
                p.replace("_group_", &group_path.replace('/', "."))
            )
        }
        Some(p) => p.to_string(),
        None => header.unwrap_or_else(|| relative_group.replace('/', ".")),
    };
    let joined = match (parent, package.as_str()) {
        ("", p) => p.to_string(),
        (parent, "") => parent.to_string(),
        (parent, p) => format!("{parent}.{p}"),
    };
    match joined.rfind("_global_") {
        Some(i) => joined[i + "_global_".len()..]
            .trim_start_matches('.')
            .to_string(),
        None => joined,
    }
}

/// A config file composed in.
#[derive(Debug, Clone)]
struct Source {
    /// As notes show it: relative to the working directory where it is below it.
    shown: PathBuf,
    /// Shared by every composition of the same file: read once ([`Composer::read_once`]).
    text: Rc<str>,
    /// `data=mnist` for a group option.
    choice: Option<String>,
}

/// Why composition stopped: the job is left as it is.
#[derive(Debug, Clone, PartialEq)]
struct Stop(String);

/// Composes the primary config as Hydra would, keeping where each value came from.
struct Composer<'a> {
    search: Vec<PathBuf>,
    shown_from: PathBuf,
    line: &'a CommandLine,
    sources: Vec<Source>,
    /// Group choices made by `override` entries of the primary defaults list.
    config_overrides: HashMap<String, Vec<String>>,
    /// Each file read so far: a config named again (or through another path or link) is not
    /// read again.
    read: crate::guard::fsutil::ReadOnce,
    /// The text of every config composed so far, one named twice counted twice.
    composed_bytes: u64,
    /// Composition stopped at [`MAX_COMPOSED`] or [`MAX_COMPOSED_BYTES`], not at something it
    /// cannot follow: said in one line.
    gave_up: bool,
}

impl<'a> Composer<'a> {
    fn new(search: Vec<PathBuf>, shown_from: PathBuf, line: &'a CommandLine) -> Composer<'a> {
        Composer {
            search,
            shown_from,
            line,
            sources: Vec::new(),
            config_overrides: HashMap::new(),
            read: crate::guard::fsutil::ReadOnce::default(),
            composed_bytes: 0,
            gave_up: false,
        }
    }

    /// The text of the config at `path`, read as the job's user the first time that file is
    /// reached and taken from memory after; each composition of it counts toward the bounds.
    fn read_once(&mut self, path: &Path) -> Result<Rc<str>, io::Error> {
        if self.sources.len() >= MAX_COMPOSED {
            return Err(self.give_up(format!(
                "more than {MAX_COMPOSED} configs composed (its defaults lists name configs again and again)"
            )));
        }
        let left = MAX_COMPOSED_BYTES - self.composed_bytes;
        // No more than the bound allows is ever read: a file past it is not held.
        let cap = left.min(crate::guard::fsutil::SMALL_FILE_MAX_BYTES);
        let text = match as_user(|| self.read.text(path, cap))? {
            crate::guard::fsutil::Once::Again(text) | crate::guard::fsutil::Once::New(text) => text,
            crate::guard::fsutil::Once::TooLong => {
                return Err(self.give_up(format!(
                    "{} would take the config text composed past {}",
                    path.display(),
                    crate::observe::units::human_bytes(MAX_COMPOSED_BYTES)
                )))
            }
        };
        if text.len() as u64 > left {
            return Err(self.give_up(format!(
                "more than {} of config text composed",
                crate::observe::units::human_bytes(MAX_COMPOSED_BYTES)
            )));
        }
        self.composed_bytes += text.len() as u64;
        Ok(text)
    }

    /// Marks the composition as stopped at a bound, with why.
    fn give_up(&mut self, why: String) -> io::Error {
        self.gave_up = true;
        io::Error::other(why)
    }

    /// Whether `group` is a config group: a directory of that name in the search path.
    fn is_group(&self, group: &str) -> bool {
        !group.starts_with("hydra")
            && self
                .search
                .iter()
                .any(|dir| as_user(|| std::fs::metadata(dir.join(group))).is_ok_and(|m| m.is_dir()))
    }

    /// Reads `<dir>/<config>.yaml` from the first search directory that has it; `Ok(None)` when
    /// none has.
    fn load(&mut self, config: &str, choice: Option<String>) -> Result<Option<usize>, Stop> {
        for at in 0..self.search.len() {
            let path = self.search[at].join(format!("{config}.yaml"));
            match self.read_once(&path) {
                Ok(text) => {
                    let shown = path
                        .strip_prefix(&self.shown_from)
                        .map_or_else(|_| path.clone(), Path::to_path_buf);
                    self.sources.push(Source {
                        shown,
                        text,
                        choice,
                    });
                    return Ok(Some(self.sources.len() - 1));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if self.gave_up => return Err(Stop(e.to_string())),
                Err(e) => return Err(Stop(format!("{}: {e}", path.display()))),
            }
        }
        Ok(None)
    }

    /// The composed config, command-line overrides applied.
    fn compose_primary(&mut self, name: &str) -> Result<Node, Stop> {
        let primary = self
            .load(name, None)?
            .ok_or_else(|| Stop(format!("no primary config {name}.yaml")))?;
        let mut out = Node::Map(Vec::new());
        self.compose(primary, "", "", true, 0, &mut out)?;
        let line = self.line;
        for o in &line.overrides {
            if o.key.starts_with("hydra.") || o.key == "hydra" || self.is_group(&o.key) {
                continue;
            }
            match (o.op, &o.value) {
                (Op::Delete, _) => delete(&mut out, &o.key),
                (_, Some(value)) => {
                    let leaf = Node::Leaf(Leaf {
                        text: Some(value.clone()),
                        plain: true,
                        from: Origin::Override { index: o.index },
                    });
                    if let Some(node) = slot(&mut out, &o.key, true) {
                        *node = leaf;
                    }
                }
                (_, None) => {}
            }
        }
        Ok(out)
    }

    /// Merges config `file` and what its defaults list names into `out`; `base` is its group's
    /// directory, `package` where it lands.
    fn compose(
        &mut self,
        file: usize,
        base: &str,
        package: &str,
        primary: bool,
        depth: usize,
        out: &mut Node,
    ) -> Result<(), Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop("defaults lists nest too deep".into()));
        }
        let shown = self.sources[file].shown.display().to_string();
        let mut own = tree(&self.sources[file].text, file)
            .ok_or_else(|| Stop(format!("{shown} does not parse as YAML")))?;
        let Node::Map(entries) = &mut own else {
            return Err(Stop(format!("{shown} is not a mapping")));
        };
        let mut list = match entries.iter().position(|(k, _)| k == "defaults") {
            Some(i) => defaults(&entries.remove(i).1)
                .ok_or_else(|| Stop(format!("{shown}: a defaults list oomguard cannot read")))?,
            None => Vec::new(),
        };
        if primary {
            self.apply_command_line(&mut list);
        }
        let mut slot_self = Some(own);
        if !list.contains(&Listed::SelfRef) {
            list.push(Listed::SelfRef);
        }
        for entry in list {
            match entry {
                Listed::SelfRef => {
                    if let Some(own) = slot_self.take() {
                        merge(out, at_package(own, package));
                    }
                }
                Listed::Group {
                    is_override: true, ..
                } => {}
                Listed::Group {
                    group,
                    package: explicit,
                    options,
                    optional,
                    ..
                } => {
                    let group_path = resolve_path(base, &group);
                    if group_path.starts_with("hydra/") || group_path == "hydra" {
                        continue;
                    }
                    let options = self
                        .config_overrides
                        .get(&group_path)
                        .cloned()
                        .unwrap_or(options);
                    for option in options {
                        let config = format!("{group_path}/{option}");
                        let choice = format!("{group_path}={option}");
                        let Some(child) = self.load(&config, Some(choice))? else {
                            if optional {
                                continue;
                            }
                            return Err(Stop(format!("no config {config}.yaml")));
                        };
                        let header = package_header(&self.sources[child].text);
                        let relative = group.trim_start_matches('/');
                        let child_package = final_package(
                            package,
                            explicit.as_deref(),
                            header.as_deref(),
                            &group_path,
                            relative,
                        );
                        self.compose(child, &group_path, &child_package, false, depth + 1, out)?;
                    }
                }
                Listed::Config {
                    path,
                    package: explicit,
                } => {
                    let config = resolve_path(base, &path);
                    let child = self
                        .load(&config, None)?
                        .ok_or_else(|| Stop(format!("no config {config}.yaml")))?;
                    let header = package_header(&self.sources[child].text);
                    let relative = path.trim_start_matches('/');
                    let relative_group = relative.rsplit_once('/').map_or("", |(g, _)| g);
                    let group_path = config.rsplit_once('/').map_or("", |(g, _)| g);
                    let child_package = final_package(
                        package,
                        explicit.as_deref(),
                        header.as_deref(),
                        group_path,
                        relative_group,
                    );
                    let child_base = group_path.to_string();
                    self.compose(child, &child_base, &child_package, false, depth + 1, out)?;
                }
            }
        }
        Ok(())
    }

    /// The primary defaults list with the command line's group choices made: `group=option`
    /// changes a choice, `+group=option` appends one, `~group` removes it; `override` entries
    /// of the list apply to groups nested deeper as well.
    fn apply_command_line(&mut self, list: &mut Vec<Listed>) {
        for entry in list.iter() {
            if let Listed::Group {
                group,
                options,
                is_override: true,
                ..
            } = entry
            {
                self.config_overrides
                    .insert(group.trim_start_matches('/').to_string(), options.clone());
            }
        }
        let line = self.line;
        for o in &line.overrides {
            if !self.is_group(&o.key) {
                continue;
            }
            let option = o.value.clone().map(|v| vec![v]);
            match o.op {
                Op::Add => list.push(Listed::Group {
                    group: o.key.clone(),
                    package: None,
                    options: option.unwrap_or_default(),
                    optional: false,
                    is_override: false,
                }),
                Op::Delete => {
                    list.retain(|d| !matches!(d, Listed::Group { group, is_override: false, .. } if group.trim_start_matches('/') == o.key));
                    self.config_overrides.remove(&o.key);
                }
                Op::Set | Op::Force => {
                    self.config_overrides
                        .insert(o.key.clone(), option.unwrap_or_default());
                }
            }
        }
    }
}

/// A value of the composed config, read as a count.
#[derive(Debug, Clone, PartialEq)]
enum Reading {
    Count(u64),
    /// `${…}`: OmegaConf resolves it when the job reads it; oomguard does not guess.
    Interpolation(String),
    /// Anything else, as written or why it cannot be read.
    Other(String),
}

/// A key of the composed config: its value and where it was set.
struct Entry<'a> {
    key: String,
    leaf: &'a Leaf,
}

impl Composer<'_> {
    /// What `leaf` holds, read as its file types it.
    fn read(&self, argv: &[OsString], leaf: &Leaf) -> Reading {
        let text = match &leaf.text {
            Some(t) => t.clone(),
            None => return Reading::Other("a YAML alias".into()),
        };
        if text.contains("${") {
            return Reading::Interpolation(text);
        }
        match &leaf.from {
            Origin::Override { index } => {
                let written = argv[*index]
                    .to_str()
                    .and_then(|t| t.split_once('='))
                    .map_or(text.clone(), |(_, v)| v.to_string());
                match written.parse::<u64>() {
                    Ok(n) if n >= 1 => Reading::Count(n),
                    _ => Reading::Other(format!("`{written}`")),
                }
            }
            Origin::File { file, key } => match yaml::locate(&self.sources[*file].text, key) {
                Ok(found) => match found.value {
                    Scalar::Int(n) if n >= 1 => Reading::Count(n as u64),
                    _ => Reading::Other(format!("`{}`", &self.sources[*file].text[found.span])),
                },
                Err(e) => Reading::Other(e.to_string()),
            },
        }
    }

    /// "in conf/data/mnist.yaml (group data=mnist)" or "on the command line (`k=v`)".
    fn origin(&self, argv: &[OsString], leaf: &Leaf) -> String {
        match &leaf.from {
            Origin::File { file, .. } => {
                let s = &self.sources[*file];
                match &s.choice {
                    Some(choice) => format!("in {} (group {choice})", s.shown.display()),
                    None => format!("in {}", s.shown.display()),
                }
            }
            Origin::Override { index } => {
                format!("on the command line (`{}`)", argv[*index].to_string_lossy())
            }
        }
    }
}

/// Training keys before evaluation ones, each kind in config order.
fn training_first<'a, 'b>(mut v: Vec<&'a Entry<'b>>) -> Vec<&'a Entry<'b>> {
    v.sort_by_key(|e| argv::is_eval_like(&e.key));
    v
}

/// The batch and accumulation of the composed `config`.
fn pick(
    argv: &[OsString],
    line: &CommandLine,
    composer: &Composer,
    config: &Node,
) -> Result<Option<Found>, KnobError> {
    let mut all = Vec::new();
    leaves(config, "", &mut all);
    let entries: Vec<Entry> = all
        .into_iter()
        .filter(|(key, _)| key != "hydra" && !key.starts_with("hydra."))
        .map(|(key, leaf)| Entry { key, leaf })
        .collect();
    let last = |key: &str| key.rsplit('.').next().unwrap_or(key).to_string();
    let batches = training_first(
        entries
            .iter()
            .filter(|e| last(&e.key).ends_with("batch_size") && !e.leaf.is_null())
            .collect(),
    );
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let mut notes = Vec::new();
    // The first training batch that is a number; an evaluation one only when no other is there.
    let chosen = batches
        .iter()
        .filter(|e| argv::is_eval_like(&e.key) == argv::is_eval_like(&first.key))
        .find_map(|e| match composer.read(argv, e.leaf) {
            Reading::Count(n) => Some((*e, n)),
            _ => None,
        });
    let Some((batch, value)) = chosen else {
        let why = match composer.read(argv, first.leaf) {
            Reading::Interpolation(text) => format!(
                "is `{text}`, an interpolation, not a number: oomguard does not guess what it resolves to"
            ),
            Reading::Other(what) => format!("is {what}, not a whole number above 0"),
            Reading::Count(_) => unreachable!("a count would have been chosen"),
        };
        return Err(KnobError::Knob {
            where_: format!("{NAME} config"),
            problem: format!(
                "the batch `{}` {} {why}; give it on the command line ({}=N) to have it moved",
                first.key,
                composer.origin(argv, first.leaf),
                first.key
            ),
        });
    };
    let batch_place = match &batch.leaf.from {
        Origin::Override { .. } => argv::locate_flag(argv, &batch.key, "--batch-arg")?.0,
        Origin::File { .. } => argv::Place::Absent {
            name: batch.key.clone(),
            at: line.end,
        },
    };
    notes.push(format!(
        "batch: `{}` {}, {value}; changed with the override {}=N",
        batch.key,
        composer.origin(argv, batch.leaf),
        batch.key
    ));
    if argv::is_eval_like(&batch.key) {
        notes.push(format!(
            "batch: `{}` looks like an evaluation setting, the only batch in the config: give the training one on the command line (KEY=N) to have it moved instead",
            batch.key
        ));
    }
    let others: Vec<String> = batches
        .iter()
        .filter(|e| e.key != batch.key)
        .map(|e| format!("`{}`", e.key))
        .collect();
    if !others.is_empty() {
        notes.push(format!(
            "batch: the config also has {}, left alone",
            others.join(", ")
        ));
    }

    let accums = training_first(
        entries
            .iter()
            .filter(|e| {
                let last = last(&e.key);
                ACCUM_SUFFIXES.iter().any(|s| last.ends_with(s)) && !e.leaf.is_null()
            })
            .collect(),
    );
    let has_trainer = matches!(config, Node::Map(entries) if entries.iter().any(|(k, v)| k == "trainer" && matches!(v, Node::Map(_))));
    let accum = match accums.first() {
        Some(a) => match composer.read(argv, a.leaf) {
            Reading::Count(n) => {
                let place = match &a.leaf.from {
                    Origin::Override { .. } => {
                        notes.push(format!(
                            "accumulation: `{}` {}, {n}; changed there",
                            a.key,
                            composer.origin(argv, a.leaf)
                        ));
                        argv::locate_flag(argv, &a.key, "--accum-arg")?.0
                    }
                    Origin::File { .. } => {
                        notes.push(format!(
                            "accumulation: `{}` {}, {n}; changed with the override {}=N",
                            a.key,
                            composer.origin(argv, a.leaf),
                            a.key
                        ));
                        argv::Place::Absent {
                            name: a.key.clone(),
                            at: line.end,
                        }
                    }
                };
                Some((Place::Argv(place), Some(n)))
            }
            reading => {
                let what = match reading {
                    Reading::Interpolation(text) => {
                        format!("`{text}`, an interpolation, not a number")
                    }
                    Reading::Other(what) => format!("{what}, not a whole number above 0"),
                    Reading::Count(_) => unreachable!("matched above"),
                };
                notes.push(format!(
                    "accumulation: `{}` {} is {what}: oomguard leaves it alone, so the effective batch will shrink with the batch",
                    a.key,
                    composer.origin(argv, a.leaf)
                ));
                None
            }
        },
        None if has_trainer => {
            let name = "+trainer.accumulate_grad_batches";
            notes.push(format!(
                "accumulation: none in the config; the `trainer` mapping gets the override {name}=N when the batch moves"
            ));
            Some((
                Place::Argv(argv::Place::Absent {
                    name: name.to_string(),
                    at: line.end,
                }),
                None,
            ))
        }
        None => {
            notes.push(format!(
                "accumulation: none in the config (no key ending in {}) and no `trainer` mapping: the effective batch will shrink with the batch",
                ACCUM_SUFFIXES.join(" or ")
            ));
            None
        }
    };
    Ok(Some(Found {
        entrypoint: NAME,
        batch: (Place::Argv(batch_place), value),
        accum,
        kept_by_job: false,
        no_accumulation: None,
        notes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

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

    #[test]
    fn packages_as_hydra_places_them() {
        // (parent, @package in the defaults list, header, group path, relative group, final)
        type Row<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
            &'a str,
            &'a str,
        );
        let table: &[Row] = &[
            ("", None, None, "data", "data", "data"),
            ("", None, Some("_global_"), "data", "data", ""),
            ("", None, Some("_global_.trainer"), "exp", "exp", "trainer"),
            ("", None, Some("foo.bar"), "data", "data", "foo.bar"),
            ("", Some("loader"), None, "data", "data", "loader"),
            ("", Some("_global_"), Some("x"), "data", "data", ""),
            ("model", None, None, "model/enc", "enc", "model.enc"),
            ("model", Some("_here_"), None, "model/enc", "enc", "model"),
            ("model", None, Some("_global_"), "model/enc", "enc", ""),
            ("", None, None, "db/mysql", "db/mysql", "db.mysql"),
        ];
        for (parent, explicit, header, group, relative, want) in table {
            assert_eq!(
                final_package(parent, *explicit, *header, group, relative),
                *want,
                "{parent} {explicit:?} {header:?} {group}"
            );
        }
        assert_eq!(
            package_header("\n# @package _global_\n\nx: 1\n").as_deref(),
            Some("_global_")
        );
        assert_eq!(
            package_header("# comment\n# @package _global_\nx: 1\n"),
            None
        );
        assert_eq!(package_header("x: 1\n# @package _global_\n"), None);
    }

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hydra")
            .join(name)
    }

    /// Runs [`find`] over a fixture project with `command` (words; run in the fixture dir).
    fn found(project: &str, command: &str) -> Result<Option<Found>, KnobError> {
        let cwd = fixture(project);
        let command = argv(command);
        let request = Request::plain(&command, &cwd);
        find_in(&request)
    }

    fn absent(name: &str, at: usize) -> Place {
        Place::Argv(argv::Place::Absent {
            name: name.into(),
            at,
        })
    }

    /// The fixture trees, each a composition rule: what is found, where, and what the job
    /// would read (checked against the real Hydra in tests/it/entrypoints_hydra.rs).
    #[test]
    fn composed_configs_give_the_batch_and_accumulation() {
        type Row = (
            &'static str,
            &'static str,
            (&'static str, u64),
            Option<(&'static str, Option<u64>)>,
            &'static [&'static str],
        );
        let table: &[Row] = &[
            // A group's option under its group key; _self_ last, the primary keeps trainer's 2.
            (
                "basic",
                "python train.py",
                ("data.batch_size", 256),
                Some(("trainer.accumulate_grad_batches", Some(2))),
                &["batch: `data.batch_size` in conf/data/mnist.yaml (group data=mnist), 256; changed with the override data.batch_size=N"],
            ),
            // A group choice on the command line reads the other option.
            (
                "basic",
                "python train.py data=cifar",
                ("data.batch_size", 128),
                Some(("trainer.accumulate_grad_batches", Some(2))),
                &["(group data=cifar), 128"],
            ),
            // -cn picks another primary: _self_ first, so the group's value wins over its own.
            (
                "basic",
                "python train.py -cn self_first",
                ("data.batch_size", 256),
                Some(("trainer.accumulate_grad_batches", Some(2))),
                &["conf/data/mnist.yaml"],
            ),
            // _self_ last: the primary's own data.batch_size wins.
            (
                "basic",
                "python train.py --config-name self_last",
                ("data.batch_size", 64),
                Some(("trainer.accumulate_grad_batches", Some(2))),
                &["batch: `data.batch_size` in conf/self_last.yaml, 64"],
            ),
            // No accumulation but a trainer mapping: +trainer.accumulate_grad_batches.
            (
                "basic",
                "python train.py ~trainer.accumulate_grad_batches",
                ("data.batch_size", 256),
                Some(("+trainer.accumulate_grad_batches", None)),
                &["the `trainer` mapping gets the override +trainer.accumulate_grad_batches=N"],
            ),
            // An accumulation set on the command line is changed there.
            (
                "basic",
                "python train.py trainer.accumulate_grad_batches=4",
                ("data.batch_size", 256),
                Some(("trainer.accumulate_grad_batches", Some(4))),
                &["on the command line (`trainer.accumulate_grad_batches=4`), 4; changed there"],
            ),
            // @package _global_, optional missing option, override entry, training before eval.
            (
                "packages",
                "python app/main.py",
                ("loader.batch_size", 32),
                Some(("optim.gradient_accumulation_steps", Some(3))),
                &[
                    "(group data=big), 32",
                    "the config also has `loader.eval_batch_size`",
                ],
            ),
            // Nothing to accumulate with: the batch alone, said.
            (
                "packages",
                "python app/main.py optim=plain",
                ("loader.batch_size", 32),
                None,
                &["the effective batch will shrink"],
            ),
            // An interpolated accumulation is said, not guessed.
            (
                "packages",
                "python app/main.py optim=interp",
                ("loader.batch_size", 32),
                None,
                &["`${oc.env:ACCUM,2}`, an interpolation, not a number"],
            ),
        ];
        for (project, command, (batch, value), accum, notes) in table {
            let found = found(project, command)
                .unwrap_or_else(|e| panic!("{command}: {e}"))
                .unwrap_or_else(|| panic!("{command}: nothing found"));
            let end = argv(command).len();
            assert_eq!(found.entrypoint, "Hydra");
            assert_eq!(found.batch, (absent(batch, end), *value), "{command}");
            let want_accum = accum.map(|(key, n)| {
                let place = if command.contains(&format!("{key}=")) {
                    Place::Argv(
                        argv::locate_flag(&argv(command), key, "--accum-arg")
                            .unwrap()
                            .0,
                    )
                } else {
                    absent(key, end)
                };
                (place, n)
            });
            assert_eq!(found.accum, want_accum, "{command}");
            let text = found.notes.join("\n");
            for note in *notes {
                assert!(text.contains(note), "{command}: {note:?} not in\n{text}");
            }
        }
    }

    /// What is not a Hydra job, or a config it cannot follow, is left as before; a batch that
    /// is no number is named with the fix, and the job runs with no batch knob.
    #[test]
    fn what_is_not_found_and_what_is_refused() {
        for command in [
            "python plain.py",
            "python missing.py",
            "python train.py data=nosuch",
            "python train.py -cn nosuch",
            "python nodir.py",
        ] {
            assert_eq!(found("basic", command).unwrap(), None, "{command}");
        }
        let message = found("packages", "python app/main.py -cn interp")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("`${oc.env:BS}`, an interpolation, not a number")
                && message.contains("loader.batch_size=N"),
            "{message}"
        );
        // Through the resolver: no knob, the line among the run's first.
        let cwd = fixture("packages");
        let command = argv("python app/main.py -cn interp");
        let request = Request::plain(&command, &cwd);
        let set = crate::knobs::resolve::resolve(&request).expect("the run goes on");
        assert!(set.batch().is_none());
        assert!(
            set.notes.iter().any(|n| n.contains("loader.batch_size=N")),
            "{:?}",
            set.notes
        );
    }

    /// A mapping of many keys (merged through an index) merges as one of a few (merged key by
    /// key): a later value wins in place, a new key goes last, mappings merge deep; a key
    /// written twice in one file keeps its last value.
    #[test]
    fn many_keys_merge_as_a_few_do() {
        let values = |node: &Node| {
            let mut out = Vec::new();
            leaves(node, "", &mut out);
            out.into_iter()
                .map(|(key, leaf)| (key, leaf.text.clone().unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        let keys = |from: u32, to: u32, value: &str| -> String {
            (from..to).map(|i| format!("k{i}: {value}\n")).collect()
        };
        for n in [4u32, 40] {
            let mut dst = tree(&format!("{}m:\n  a: 1\n  b: 1\n", keys(0, n, "old")), 0).unwrap();
            let src = tree(
                &format!("m:\n  b: 2\n  c: 2\n{}", keys(n / 2, n + n / 2, "new")),
                1,
            );
            merge(&mut dst, src.unwrap());
            let want: Vec<(String, String)> = (0..n)
                .map(|i| (format!("k{i}"), if i < n / 2 { "old" } else { "new" }))
                .chain([
                    ("m.a".into(), "1"),
                    ("m.b".into(), "2"),
                    ("m.c".into(), "2"),
                ])
                .chain((n..n + n / 2).map(|i| (format!("k{i}"), "new")))
                .map(|(k, v)| (k, v.to_string()))
                .collect();
            assert_eq!(values(&dst), want, "{n} keys");
        }
        let twice = tree(&format!("{}k1: again\n", keys(0, 40, "once")), 0).unwrap();
        let got = values(&twice);
        assert_eq!(got.len(), 40);
        assert_eq!(got[1], ("k1".to_string(), "again".to_string()));
    }

    /// Past the bound on the config text composed: one file larger than it is not read past it,
    /// and a file within it composed again and again (read once, counted each time) stops the
    /// composition too; each is one line naming the bound. Within both, the batch is found.
    #[test]
    fn a_composition_past_its_bounds_is_given_up_with_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("conf");
        std::fs::create_dir_all(conf.join("g")).unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "import hydra\n\n@hydra.main(version_base=None, config_path=\"conf\", config_name=\"config\")\ndef main(cfg):\n    pass\n",
        )
        .unwrap();
        let pad = |bytes: usize| format!("pad: \"{}\"\n", "x".repeat(bytes));
        let command = argv("python train.py");
        let compose = |config: String| {
            std::fs::write(conf.join("config.yaml"), config).unwrap();
            find_in(&Request::plain(&command, dir.path()))
        };
        let line = |got: Result<Option<Found>, KnobError>| match got {
            Err(e) => e.to_string(),
            other => panic!("{other:?}"),
        };
        let big = line(compose(format!("batch_size: 32\n{}", pad(5 << 20))));
        assert!(
            big.starts_with("Hydra: gave up composing config: ")
                && big.contains("would take the config text composed past 2.0 MiB")
                && !big.contains('\n'),
            "{big}"
        );
        std::fs::write(conf.join("g/x.yaml"), pad(600 << 10)).unwrap();
        let listing = |n: usize| -> String {
            let entries: String = (0..n).map(|i| format!("  - /g@p{i}: x\n")).collect();
            format!("defaults:\n{entries}  - _self_\nbatch_size: 32\n")
        };
        let again = line(compose(listing(10)));
        assert!(
            again.contains("more than 2.0 MiB of config text composed"),
            "{again}"
        );
        assert!(compose(listing(3)).unwrap().is_some());
    }
}
