//! A training codebase's own console script (`tune run`, `llamafactory-cli train`, `axolotl
//! train`, `trl sft`, `yolo train`) or entry module (`-m axolotl.cli.train`): its words read the
//! way its entry point reads them (a subcommand, then a config and overrides), the batch and
//! the accumulation taken from the override words of the command, else the config it names,
//! else the codebase's default, and changed with override words added in the codebase's own
//! syntax (`batch_size=2`, `--micro_batch_size=2`, `--per_device_train_batch_size 2`). The
//! user's config is never edited. Where the codebase keeps its effective batch itself (axolotl's
//! global `batch_size`, ultralytics' nominal batch `nbs`), the batch moves alone.
//!
//! A program installed on the job's PATH is known by what it runs, read from its package's own
//! metadata (the pip/uv wrapper's `from torchtune._cli.tune import main`, else the
//! `entry_points.txt` of the dist-info beside it), so a renamed script is recognised and a
//! same-named one of another package is not; one not installed here is known by its name, and
//! a note says so. Reads files as the job's user; writes nothing, starts nothing.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::{count_at, flag_values, read_config, Found};
use crate::knobs::argv::{self, launch};
use crate::knobs::reader::{KnobError, Request};
use crate::knobs::Place;

/// How a codebase takes a setting on its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// `key=value` words: OmegaConf's dotlist (torchtune, LLaMA-Factory), ultralytics' own.
    KeyValue,
    /// `--key-name=value`: axolotl, whose click options are dash-case (`--micro-batch-size`); its
    /// `-m axolotl.cli.train` (fire's keyword arguments) takes that spelling too.
    KebabJoined,
    /// `--key value`: HfArgumentParser (TRL; LLaMA-Factory given flags instead of a config).
    Dashed,
}

impl Syntax {
    /// The word's name for `key` (`batch_size`, `--micro_batch_size`).
    pub fn name(self, key: &str) -> String {
        match self {
            Syntax::KeyValue => key.to_string(),
            Syntax::KebabJoined => format!("--{}", key.replace('_', "-")),
            Syntax::Dashed => format!("--{key}"),
        }
    }

    /// Every spelling of `key` the codebase's parser takes, the one oomguard writes first:
    /// HfArgumentParser and fire take a flag with `_` or `-` inside (click only its own, but a
    /// word the user wrote is read as written).
    fn spellings(self, key: &str) -> Vec<String> {
        let mut names = vec![self.name(key)];
        if self != Syntax::KeyValue {
            for other in [format!("--{key}"), format!("--{}", key.replace('_', "-"))] {
                if !names.contains(&other) {
                    names.push(other);
                }
            }
        }
        names
    }

    /// Where `key` goes when the command lacks it: added at argv index `at`.
    fn absent(self, key: &str, at: usize) -> argv::Place {
        match self {
            Syntax::KebabJoined => argv::Place::absent_joined(&self.name(key), at),
            Syntax::KeyValue | Syntax::Dashed => argv::Place::Absent {
                name: self.name(key),
                at,
            },
        }
    }

    /// The word as a user reads it: `batch_size=N`, `--micro_batch_size=N`.
    pub fn shown(self, key: &str) -> String {
        match self {
            Syntax::KeyValue | Syntax::KebabJoined => format!("{}=N", self.name(key)),
            Syntax::Dashed => format!("{} N", self.name(key)),
        }
    }
}

/// Where a codebase's words name its config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigWord {
    /// `--config CFG` (torchtune, TRL).
    Flag(&'static str),
    /// The first word after the subcommand, where it ends in `.yaml`/`.yml`/`.json`
    /// (LLaMA-Factory's `read_args`, axolotl's `config` argument).
    First,
    /// `cfg=CFG` (ultralytics).
    Key(&'static str),
}

/// How the job keeps its effective batch without an accumulation knob of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keeps {
    /// It has an accumulation knob.
    Accumulation,
    /// ultralytics: accumulation = round(nbs ÷ batch), from its nominal batch.
    Nominal { key: &'static str, default: u64 },
    /// axolotl: a global `batch_size` without `gradient_accumulation_steps` gives accumulation =
    /// batch_size ÷ micro_batch_size.
    GlobalBatch(&'static str),
}

/// One codebase's launcher: a row of data, read by the rules below.
#[derive(Debug)]
pub struct Codebase {
    pub name: &'static str,
    /// Its console scripts' names, as pip installs them.
    scripts: &'static [&'static str],
    /// The modules its console scripts run (`torchtune._cli.tune` for `tune`).
    entry_modules: &'static [&'static str],
    /// Modules run with `-m` that train with no subcommand (`axolotl.cli.train cfg.yml`).
    train_modules: &'static [&'static str],
    /// The subcommands that train (`train`, `sft`); ultralytics' task may come before its mode.
    train_words: &'static [&'static str],
    /// After the subcommand come torchrun's options and a recipe (`tune run`).
    recipe_after: bool,
    config: ConfigWord,
    syntax: Syntax,
    batch_key: &'static str,
    accum_key: &'static str,
    /// The batch where neither the command nor the config sets it.
    default_batch: Option<u64>,
    keeps: Keeps,
}

/// `TrainingArguments`' defaults: `per_device_train_batch_size` 8.
const TRAINER_DEFAULT_BATCH: u64 = 8;

/// The codebases whose launchers oomguard reads (their README's training command).
pub static CODEBASES: &[Codebase] = &[
    Codebase {
        name: "torchtune",
        scripts: &["tune"],
        entry_modules: &["torchtune._cli.tune"],
        train_modules: &[],
        train_words: &["run"],
        recipe_after: true,
        config: ConfigWord::Flag("--config"),
        syntax: Syntax::KeyValue,
        batch_key: "batch_size",
        accum_key: "gradient_accumulation_steps",
        default_batch: None,
        keeps: Keeps::Accumulation,
    },
    Codebase {
        name: "LLaMA-Factory",
        scripts: &["llamafactory-cli", "lmf"],
        entry_modules: &["llamafactory.cli"],
        train_modules: &[],
        train_words: &["train"],
        recipe_after: false,
        config: ConfigWord::First,
        syntax: Syntax::KeyValue,
        batch_key: "per_device_train_batch_size",
        accum_key: "gradient_accumulation_steps",
        default_batch: Some(TRAINER_DEFAULT_BATCH),
        keeps: Keeps::Accumulation,
    },
    Codebase {
        name: "axolotl",
        scripts: &["axolotl"],
        entry_modules: &["axolotl.cli.main"],
        train_modules: &["axolotl.cli.train"],
        train_words: &["train"],
        recipe_after: false,
        config: ConfigWord::First,
        syntax: Syntax::KebabJoined,
        batch_key: "micro_batch_size",
        accum_key: "gradient_accumulation_steps",
        default_batch: None,
        keeps: Keeps::GlobalBatch("batch_size"),
    },
    Codebase {
        name: "TRL",
        scripts: &["trl"],
        entry_modules: &["trl.cli", "trl.commands.cli"],
        train_modules: &[],
        // trl/cli.py's training commands (`env` and `vllm-serve` do not train).
        train_words: &["sft", "dpo", "grpo", "kto", "reward", "rloo"],
        recipe_after: false,
        config: ConfigWord::Flag("--config"),
        syntax: Syntax::Dashed,
        batch_key: "per_device_train_batch_size",
        accum_key: "gradient_accumulation_steps",
        default_batch: Some(TRAINER_DEFAULT_BATCH),
        keeps: Keeps::Accumulation,
    },
    Codebase {
        name: "ultralytics",
        scripts: &["yolo", "ultralytics"],
        entry_modules: &["ultralytics.cfg"],
        train_modules: &[],
        train_words: &["train"],
        recipe_after: false,
        config: ConfigWord::Key("cfg"),
        syntax: Syntax::KeyValue,
        batch_key: "batch",
        accum_key: "",
        // ultralytics/cfg/default.yaml: `batch: 16`, `nbs: 64`.
        default_batch: Some(16),
        keeps: Keeps::Nominal {
            key: "nbs",
            default: 64,
        },
    },
];

/// A command found to run a codebase's launcher.
#[derive(Debug)]
pub(in crate::knobs) struct Launcher {
    pub codebase: &'static Codebase,
    /// The argv index of the launcher's first word after its program or module.
    words: usize,
    /// The subcommand is still to be read (a console script), not already (a train module).
    subcommand: bool,
    /// The installed program, where it is (its `bin/` leads to the package's files).
    installed: Option<PathBuf>,
    /// How it was recognised, for the user.
    how: String,
}

/// Programs that run another command after their options: the command may be a launcher.
const COMMAND_LAUNCHERS: &[&str] = &[
    "srun",
    "uv run",
    "poetry run",
    "conda run",
    "mamba run",
    "micromamba run",
];

/// The codebase launcher the command runs, if any: a train module behind `python -m` or a
/// launcher, `tune run` (read by [`argv::launch`]), or a console script as the program, looked
/// up on `path_var` (the job's PATH; `None`: this process's).
pub(in crate::knobs) fn identify(argv: &[OsString], path_var: Option<&OsStr>) -> Option<Launcher> {
    let found = launch(argv);
    if let Some(script) = &found.script {
        if let Some(codebase) = CODEBASES
            .iter()
            .find(|c| c.train_modules.contains(&script.as_str()))
        {
            return Some(Launcher {
                codebase,
                words: found.script_args,
                subcommand: false,
                installed: None,
                how: format!("module {script}, {}'s training entry point", codebase.name),
            });
        }
    }
    let program_at = match (found.launchers.last(), &found.script) {
        // The program itself, where it is neither an interpreter nor a launcher (with neither,
        // `launch` finds no script): `python train.py` is never looked up and read.
        (None, None) => 0,
        (None, Some(_)) => return None,
        (Some(last), Some(_)) if last == "tune run" => {
            // The last `tune run` before the recipe (`srun tune run ...`).
            let at = (0..found.script_args.saturating_sub(1)).rev().find(|&i| {
                argv[i]
                    .to_str()
                    .is_some_and(|t| t.rsplit('/').next() == Some("tune"))
                    && argv.get(i + 1).is_some_and(|t| t == "run")
            })?;
            return known(argv, at, true, path_var);
        }
        (Some(last), Some(_)) if COMMAND_LAUNCHERS.contains(&last.as_str()) => {
            found.script_args - 1
        }
        _ => return None,
    };
    known(argv, program_at, false, path_var)
}

/// The launcher whose program is `argv[at]`: by what it runs where it is installed, by its name
/// where it is not. `tune_run`: [`argv::launch`] already read it as `tune run` by name.
fn known(
    argv: &[OsString],
    at: usize,
    tune_run: bool,
    path_var: Option<&OsStr>,
) -> Option<Launcher> {
    let token = argv.get(at)?.to_str()?;
    let name = Path::new(token).file_name()?.to_str()?;
    let installed = on_path(token, path_var);
    let (codebase, how) = match installed.as_deref().map(runs) {
        Some(Some(module)) => {
            let codebase = CODEBASES
                .iter()
                .find(|c| c.entry_modules.contains(&module.as_str()))?;
            (
                codebase,
                format!("{name} runs {module} (its package's entry point)"),
            )
        }
        Some(None) => (
            by_name(name)?,
            format!("{name}: what it runs could not be read from its package's metadata, so it is known by its name"),
        ),
        None => (
            by_name(name)?,
            format!("{name} is not installed here, so it is known by its name"),
        ),
    };
    // `tune run` read by name as a launcher, but installed it might run something else.
    if tune_run && codebase.name != "torchtune" {
        return None;
    }
    Some(Launcher {
        codebase,
        words: at + 1,
        subcommand: true,
        installed,
        how,
    })
}

fn by_name(name: &str) -> Option<&'static Codebase> {
    CODEBASES.iter().find(|c| c.scripts.contains(&name))
}

/// The program as the job's PATH finds it: `path_var`, else this process's PATH, which the
/// job inherits.
fn on_path(token: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let path_var = path_var
        .map(OsStr::to_os_string)
        .or_else(|| std::env::var_os("PATH"));
    as_job(|| {
        // Through a link to where it is installed: its environment's files are beside it there.
        crate::guard::program::find(token.as_ref(), path_var.as_deref())
            .ok()
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
    })
}

/// The most of a console script read to tell what it runs: pip's wrappers are a few lines.
const WRAPPER_MAX_BYTES: u64 = 64 << 10;

/// The module an installed console script runs: its wrapper's `from MODULE import FUNC`, else
/// its package's `entry_points.txt` beside it. `None` where neither says.
fn runs(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let text = crate::guard::principal::read_text(path, WRAPPER_MAX_BYTES)?;
    if let Some(module) = wrapper_module(&text) {
        return Some(module);
    }
    // Only a Python script's package is searched: not a shell wrapper's, whose environment's
    // every dist-info would be read for nothing.
    if !python_script(&text) {
        return None;
    }
    site_packages(path).into_iter().find_map(|site| {
        let infos = as_job(|| {
            std::fs::read_dir(&site).map_or_else(
                |_| Vec::new(),
                |dirs| {
                    dirs.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "dist-info"))
                        .collect::<Vec<_>>()
                },
            )
        });
        infos.into_iter().find_map(|info| {
            let text = crate::guard::principal::read_text(
                &info.join("entry_points.txt"),
                WRAPPER_MAX_BYTES,
            )?;
            console_entry(&text, name)
        })
    })
}

/// `work`'s answer as the job's user sees the files (a directory listed, a path tested), the
/// default where the switch fails: the job's paths are never looked at with root's eyes.
fn as_job<T: Default>(work: impl FnOnce() -> T) -> T {
    crate::guard::principal::as_user(|| Ok(work())).unwrap_or_default()
}

/// The module a pip/uv-generated wrapper imports its entry point from: a Python `#!` line and
/// `from MODULE import FUNC` followed by `sys.exit(FUNC())`.
pub fn wrapper_module(text: &str) -> Option<String> {
    if !python_script(text) {
        return None;
    }
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("from ")?;
        let (module, func) = rest.split_once(" import ")?;
        let func = func.trim();
        let named = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        };
        (named(module) && named(func) && text.contains(&format!("sys.exit({func}()")))
            .then(|| module.to_string())
    })
}

/// A script whose `#!` line runs Python.
fn python_script(text: &str) -> bool {
    text.lines()
        .next()
        .is_some_and(|first| first.starts_with("#!") && first.contains("python"))
}

/// The module of console script `name` in an `entry_points.txt`'s `[console_scripts]`.
pub fn console_entry(text: &str, name: &str) -> Option<String> {
    let mut in_scripts = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_scripts = line == "[console_scripts]";
            continue;
        }
        let Some((script, target)) = line.split_once('=') else {
            continue;
        };
        if in_scripts && script.trim() == name {
            let module = target.trim().split(':').next()?.trim();
            return (!module.is_empty()).then(|| module.to_string());
        }
    }
    None
}

/// The `site-packages` directories of the environment an installed script belongs to
/// (`ENV/bin/tune` → `ENV/lib/python3.*/site-packages`).
fn site_packages(script: &Path) -> Vec<PathBuf> {
    let Some(env) = script.parent().and_then(Path::parent) else {
        return Vec::new();
    };
    as_job(|| {
        let Ok(lib) = std::fs::read_dir(env.join("lib")) else {
            return Vec::new();
        };
        let mut dirs: Vec<PathBuf> = lib
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("python"))
            })
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        dirs
    })
}

/// A word that is neither a flag nor an override: a subcommand, a task, a config, a recipe.
fn bare(word: &str) -> bool {
    !word.starts_with('-') && !word.contains('=')
}

/// The batch and accumulation of the command `launcher` ([`identify`]) runs; `None` where it
/// does not train (`tune ls`, `yolo predict`), or no batch can be read (with a line
/// in `notes` saying why).
pub(in crate::knobs) fn find(
    request: &Request,
    launcher: &Launcher,
    notes: &mut Vec<String>,
) -> Result<Option<Found>, KnobError> {
    let argv = request.command;
    let codebase = launcher.codebase;
    let Some(from) = words_start(argv, launcher) else {
        return Ok(None);
    };
    let mut lines = vec![format!("{}: {}", codebase.name, launcher.how)];
    let words = Words::read(request, launcher, from, &mut lines)?;
    let batch_word = command_word(argv, words.syntax, codebase.batch_key)?;
    let accum_word = command_word(argv, words.syntax, codebase.accum_key)?;
    let Some((batch_place, batch)) = words.batch(&batch_word, &mut lines)? else {
        notes.extend(lines);
        return Ok(None);
    };
    let mut found = Found {
        entrypoint: codebase.name,
        batch: (Place::Argv(batch_place), batch),
        accum: None,
        kept_by_job: false,
        no_accumulation: None,
        notes: Vec::new(),
    };
    words.accumulation(&mut found, batch, &batch_word, accum_word, &mut lines)?;
    found.notes = lines;
    Ok(Some(found))
}

/// A word of the command for a key: its place and its value as written.
type Word = Option<(argv::Place, String)>;

/// What [`find`] reads a codebase's words with: the command, the syntax its words take there,
/// and the config they name.
struct Words<'a> {
    argv: &'a [OsString],
    codebase: &'static Codebase,
    syntax: Syntax,
    /// The config named and read: as shown, its format, its text.
    config: Option<(String, crate::knobs::file::Format, String)>,
    /// A config named but not read may hold an accumulation (torchtune's 8): one added from 1
    /// would override it, so then only the command's own accumulation is moved.
    unread_config: bool,
}

impl<'a> Words<'a> {
    /// The syntax and the config named from the words starting at `from`, the config read (a
    /// line in `lines` where it cannot be).
    fn read(
        request: &Request<'a>,
        launcher: &Launcher,
        from: usize,
        lines: &mut Vec<String>,
    ) -> Result<Words<'a>, KnobError> {
        let argv = request.command;
        let codebase = launcher.codebase;
        // LLaMA-Factory reads flags when its first word is no config file (`read_args`).
        let named = config_word(argv, from, codebase.config);
        let syntax = match (codebase.config, &named) {
            (ConfigWord::First, None) if codebase.syntax == Syntax::KeyValue => Syntax::Dashed,
            _ => codebase.syntax,
        };
        let config = match &named {
            Some(path) => read_named(request, launcher, path, lines)?,
            None => None,
        };
        Ok(Words {
            argv,
            codebase,
            syntax,
            unread_config: config.is_none() && named.is_some(),
            config,
        })
    }

    /// The config's count at `key`; `None` without a config or the key. A value that is no
    /// count is refused, naming the config.
    fn in_config(&self, key: &str) -> Result<Option<u64>, KnobError> {
        let Some((shown, format, text)) = &self.config else {
            return Ok(None);
        };
        count_at(*format, text, key).map_err(|held| KnobError::Knob {
            where_: format!("{} config {shown}", self.codebase.name),
            problem: format!("{key} is `{held}`, not a whole number of at least 1"),
        })
    }

    /// The config as the notes show it.
    fn shown_config(&self) -> Option<&str> {
        self.config.as_ref().map(|(shown, ..)| shown.as_str())
    }

    /// The word for `key` as a user reads it (`batch_size=N`).
    fn word_of(&self, key: &str) -> String {
        self.syntax.shown(key)
    }

    /// A word of the command as the user wrote it (`--micro_batch_size=4`, not axolotl's
    /// dash-case).
    fn as_written(&self, place: &argv::Place, raw: &str) -> String {
        let name = place.name();
        match self.syntax {
            Syntax::Dashed => format!("{name} {raw}"),
            Syntax::KeyValue | Syntax::KebabJoined => format!("{name}={raw}"),
        }
    }

    /// Where a word the command lacks is added: at its end.
    fn end(&self) -> usize {
        self.argv.len()
    }

    /// The batch: the command's word, else the config's key, else the codebase's default, with
    /// its place. `None`, with a line saying why, where the codebase sizes the batch itself or
    /// none can be read.
    fn batch(
        &self,
        batch_word: &Word,
        lines: &mut Vec<String>,
    ) -> Result<Option<(argv::Place, u64)>, KnobError> {
        let key = self.codebase.batch_key;
        match batch_word {
            Some((place, raw)) => {
                let Some(n) = raw.parse::<u64>().ok().filter(|&n| n != 0) else {
                    return self.no_count_batch(raw, lines);
                };
                lines.push(format!(
                    "batch: `{}` in the command, {n}",
                    self.as_written(place, raw)
                ));
                Ok(Some((place.clone(), n)))
            }
            None => Ok(self
                .batch_not_in_command(lines)?
                .map(|n| (self.syntax.absent(key, self.end()), n))),
        }
    }

    /// A batch word that is no count: ultralytics' AutoBatch (-1, or a fraction of the card),
    /// which sizes the batch itself and leaves nothing to move; refused for any other codebase.
    fn no_count_batch(
        &self,
        raw: &str,
        lines: &mut Vec<String>,
    ) -> Result<Option<(argv::Place, u64)>, KnobError> {
        let codebase = self.codebase;
        if matches!(codebase.keeps, Keeps::Nominal { .. }) {
            lines.push(format!(
                "batch: `{}={raw}` is {}'s AutoBatch, which sizes the batch to the card itself: nothing for oomguard to move",
                codebase.batch_key, codebase.name
            ));
            return Ok(None);
        }
        Err(KnobError::Argv(argv::RewriteError::NotAnInteger {
            name: self.syntax.name(codebase.batch_key),
            value: raw.to_string(),
        }))
    }

    /// The batch where the command has no word for it: the config's, else the codebase's
    /// default; `None` (said) where neither can be known.
    fn batch_not_in_command(&self, lines: &mut Vec<String>) -> Result<Option<u64>, KnobError> {
        let codebase = self.codebase;
        let key = codebase.batch_key;
        match (self.in_config(key)?, codebase.default_batch) {
            (Some(n), _) => {
                lines.push(format!(
                    "batch: `{key}` in {}, {n}, changed with `{}` added to the command (the config is not edited)",
                    self.shown_config().unwrap_or("the config"),
                    self.word_of(key)
                ));
                Ok(Some(n))
            }
            // A config named but not read may set the batch: the default would be a guess.
            (None, Some(n)) if !self.unread_config => {
                let whose = match self.shown_config() {
                    Some(c) => format!("absent from {c}"),
                    None => "not in the command".to_string(),
                };
                lines.push(format!(
                    "batch: `{key}` {whose}: {}'s default {n}, changed with `{}` added to the command",
                    codebase.name,
                    self.word_of(key)
                ));
                Ok(Some(n))
            }
            (None, _) => {
                lines.push(format!(
                    "batch: `{key}` is neither in the command nor in a config oomguard could read"
                ));
                Ok(None)
            }
        }
    }

    /// How the effective batch is kept as the batch moves, by the codebase's own rule
    /// ([`Keeps`]): `found` gets the accumulation to move, or is marked kept by the job.
    fn accumulation(
        &self,
        found: &mut Found,
        batch: u64,
        batch_word: &Word,
        accum_word: Word,
        lines: &mut Vec<String>,
    ) -> Result<(), KnobError> {
        let codebase = self.codebase;
        match codebase.keeps {
            Keeps::Nominal { key, default } => {
                found.kept_by_job = self.nominal_batch_keeps(key, default, batch, lines)?;
            }
            // axolotl refuses a global batch beside an accumulation (check_gas_bsz), so none is
            // added where the command or the config gives the global batch.
            Keeps::GlobalBatch(global)
                if accum_word.is_none()
                    && self.in_config(codebase.accum_key)?.is_none()
                    && (command_word(self.argv, self.syntax, global)?.is_some()
                        || self.in_config(global)?.is_some()) =>
            {
                let whose = match command_word(self.argv, self.syntax, global)? {
                    Some(_) => "the command",
                    None => self.shown_config().unwrap_or("the config"),
                };
                lines.push(format!(
                    "accumulation: `{global}` in {whose} with no `{}`: {} derives the accumulation as {global} ÷ {}, so the batch moves alone",
                    codebase.accum_key,
                    codebase.name,
                    codebase.batch_key
                ));
                found.kept_by_job = true;
            }
            Keeps::Accumulation | Keeps::GlobalBatch(_)
                if self.unread_config && accum_word.is_none() =>
            {
                lines.push(format!(
                    "accumulation: `{}` is in no word of the command and its config was not read, so the batch moves alone and the effective batch shrinks with it (add `{}` to the command to keep it)",
                    codebase.accum_key,
                    self.word_of(codebase.accum_key)
                ));
            }
            Keeps::Accumulation | Keeps::GlobalBatch(_) => {
                let (place, n) = self.accumulation_word(batch_word, accum_word, lines)?;
                found.accum = Some((Place::Argv(place), Some(n)));
            }
        }
        Ok(())
    }

    /// ultralytics' nominal batch `key` (the command's, else the config's, else `default`):
    /// whether the job keeps the effective batch itself at this `batch`, said either way.
    fn nominal_batch_keeps(
        &self,
        key: &str,
        default: u64,
        batch: u64,
        lines: &mut Vec<String>,
    ) -> Result<bool, KnobError> {
        let name = self.codebase.name;
        let nbs = match command_word(self.argv, self.syntax, key)? {
            Some((_, raw)) => raw.parse::<u64>().ok(),
            None => self.in_config(key).ok().flatten(),
        }
        .unwrap_or(default);
        // max(round(nbs ÷ batch), 1): a batch above nbs accumulates 1 step either side
        // of a halving, so the effective batch shrinks until the batch is at most nbs.
        let kept = batch <= nbs;
        lines.push(if kept {
            format!(
                "accumulation: {name} keeps the effective batch itself, accumulating round({key} {nbs} ÷ batch) steps, so the batch moves alone"
            )
        } else {
            format!(
                "accumulation: {name} accumulates max(round({key} {nbs} ÷ batch), 1) steps, 1 for a batch of {batch}, so the effective batch shrinks until the batch is at most {nbs} (give `{key}={batch}` to keep it)"
            )
        });
        Ok(kept)
    }

    /// The accumulation to move and its value: the command's word, else a word added (from the
    /// config's value, else 1).
    fn accumulation_word(
        &self,
        batch_word: &Word,
        accum_word: Word,
        lines: &mut Vec<String>,
    ) -> Result<(argv::Place, u64), KnobError> {
        let key = self.codebase.accum_key;
        let syntax = self.syntax;
        if let Some((place, raw)) = accum_word {
            let n = argv::parse_count(&syntax.name(key), OsString::from(&raw).as_os_str(), 1)?;
            lines.push(format!(
                "accumulation: `{}` in the command, {n}",
                self.as_written(&place, &raw)
            ));
            return Ok((place, n));
        }
        let n = match self.in_config(key)? {
            Some(n) => {
                lines.push(format!(
                    "accumulation: `{key}` in {}, {n}, changed with `{}` added to the command",
                    self.shown_config().unwrap_or("the config"),
                    self.word_of(key)
                ));
                n
            }
            None => {
                lines.push(format!(
                    "accumulation: `{key}` {}(1), `{}` added to the command when the batch moves",
                    match self.shown_config() {
                        Some(c) => format!("absent from {c} "),
                        None => String::new(),
                    },
                    self.word_of(key)
                ));
                1
            }
        };
        // Added in the batch word's own spelling where the command wrote it so.
        let joined = matches!(batch_word, Some((argv::Place::Flag { sites, .. }, _))
            if syntax == Syntax::Dashed && matches!(sites.last(), Some(argv::Site::Joined(_))));
        let place = if joined {
            argv::Place::absent_joined(&syntax.name(key), self.end())
        } else {
            syntax.absent(key, self.end())
        };
        Ok((place, n))
    }
}

/// The argv index of the first word after the launcher's subcommand (and, for `tune run`, its
/// torchrun options and recipe); `None` where the subcommand does not train.
fn words_start(argv: &[OsString], launcher: &Launcher) -> Option<usize> {
    let codebase = launcher.codebase;
    if !launcher.subcommand {
        return Some(launcher.words);
    }
    // The subcommand, after at most one other bare word (ultralytics' task: `yolo detect train`).
    let sub = (launcher.words..argv.len().min(launcher.words + 2))
        .take_while(|&i| argv[i].to_str().is_some_and(bare))
        .find(|&i| {
            argv[i]
                .to_str()
                .is_some_and(|w| codebase.train_words.contains(&w))
        })?;
    if !codebase.recipe_after {
        return Some(sub + 1);
    }
    // `run [torchrun options] RECIPE`: read as `tune run` is, whatever the program is named.
    let mut as_tune: Vec<OsString> = vec!["tune".into()];
    as_tune.extend(argv[sub..].iter().cloned());
    let found = launch(&as_tune);
    found.script.as_ref()?;
    Some(sub + found.script_args - 1)
}

/// The config the words name, as written.
fn config_word(argv: &[OsString], from: usize, word: ConfigWord) -> Option<String> {
    match word {
        ConfigWord::Flag(flag) => flag_values(argv, from, &[flag])
            .last()
            .map(|(_, v)| v.to_string()),
        ConfigWord::First => argv
            .get(from)
            .and_then(|t| t.to_str())
            .filter(|t| bare(t) && [".yaml", ".yml", ".json"].iter().any(|e| t.ends_with(e)))
            .map(str::to_string),
        ConfigWord::Key(key) => argv[from.min(argv.len())..]
            .iter()
            .rev()
            .find_map(|t| t.to_str()?.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string),
    }
}

/// The config `path` names, read: a file from the command's directory, else (torchtune) a
/// built-in config name in the installed package's `recipes/configs/`. `None`, with a line in
/// `lines`, where it cannot be found: the command's own words are all there is then.
fn read_named(
    request: &Request,
    launcher: &Launcher,
    path: &str,
    lines: &mut Vec<String>,
) -> Result<Option<(String, crate::knobs::file::Format, String)>, KnobError> {
    let who = format!("{} config {path}", launcher.codebase.name);
    if as_job(|| request.cwd.join(path).is_file()) {
        let (format, text) = read_config(request, path, &who)?;
        return Ok(Some((path.to_string(), format, text)));
    }
    let builtin = launcher.codebase.recipe_after && !path.ends_with(".yaml");
    if builtin {
        let file = launcher.installed.as_deref().and_then(|script| {
            site_packages(script)
                .into_iter()
                .map(|site| site.join("recipes/configs").join(format!("{path}.yaml")))
                .find(|p| as_job(|| p.is_file()))
        });
        if let Some(file) = file {
            let absolute = file.display().to_string();
            let (format, text) = read_config(request, &absolute, &who)?;
            return Ok(Some((
                format!(
                    "{path} ({}'s built-in config, {absolute})",
                    launcher.codebase.name
                ),
                format,
                text,
            )));
        }
        lines.push(format!(
            "config: {path} is {}'s built-in config name, and no installed {} here has it: only the command's own words are read",
            launcher.codebase.name, launcher.codebase.name
        ));
        return Ok(None);
    }
    lines.push(format!(
        "config: {path} is not here: only the command's own words are read"
    ));
    Ok(None)
}

/// The command's own word for `key` in `syntax`, where it is there: its place and last value
/// as written.
fn command_word(
    argv: &[OsString],
    syntax: Syntax,
    key: &str,
) -> Result<Option<(argv::Place, String)>, KnobError> {
    if key.is_empty() {
        return Ok(None);
    }
    for name in syntax.spellings(key) {
        if let (place @ argv::Place::Flag { .. }, Some(raw)) =
            argv::locate_flag(argv, &name, "--batch-arg")?
        {
            return Ok(Some((place, raw)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

    #[test]
    fn launchers_are_known_by_name_module_or_tune_run() {
        // (command, codebase, the first word after the subcommand) — looked up on a PATH of one
        // empty directory, so each program is known by its name, whatever this machine has.
        let empty = tempfile::tempdir().unwrap();
        let path_var = Some(empty.path().as_os_str());
        let table: &[(&str, Option<&str>, &str)] = &[
            (
                "tune run lora_finetune_single_device --config c batch_size=8",
                Some("torchtune"),
                "--config",
            ),
            (
                "tune run --nproc_per_node 2 full_finetune_distributed --config c",
                Some("torchtune"),
                "--config",
            ),
            (
                "llamafactory-cli train x.yaml a=1",
                Some("LLaMA-Factory"),
                "x.yaml",
            ),
            (
                "axolotl train x.yml --micro_batch_size=2",
                Some("axolotl"),
                "x.yml",
            ),
            (
                "accelerate launch -m axolotl.cli.train x.yml",
                Some("axolotl"),
                "x.yml",
            ),
            (
                "python -m axolotl.cli.train x.yml",
                Some("axolotl"),
                "x.yml",
            ),
            ("trl sft --config c.yaml", Some("TRL"), "--config"),
            (
                "yolo detect train data=coco8.yaml batch=16",
                Some("ultralytics"),
                "data=coco8.yaml",
            ),
            (
                "yolo train data=coco8.yaml",
                Some("ultralytics"),
                "data=coco8.yaml",
            ),
            (
                "srun llamafactory-cli train x.yaml",
                Some("LLaMA-Factory"),
                "x.yaml",
            ),
            ("yolo predict model=m.pt", None, ""),
            ("tune ls", None, ""),
            ("python train.py --config c.yaml", None, ""),
            (
                "torchrun --nproc_per_node 2 -m axolotl.cli.main train x.yml",
                None,
                "",
            ),
        ];
        for &(cmd, codebase, first) in table {
            let a = argv(cmd);
            let got = identify(&a, path_var).and_then(|l| {
                assert_eq!(l.installed, None, "{cmd}");
                let start = words_start(&a, &l)?;
                Some((
                    l.codebase.name,
                    a.get(start).map_or("", |t| t.to_str().unwrap()),
                ))
            });
            assert_eq!(got, codebase.map(|c| (c, first)), "{cmd}");
        }
    }

    #[test]
    fn what_an_installed_script_runs_is_read_from_its_wrapper_or_entry_points() {
        let pip = "#!/opt/venv/bin/python3.11\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom torchtune._cli.tune import main\nif __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n";
        assert_eq!(wrapper_module(pip).as_deref(), Some("torchtune._cli.tune"));
        // Not a wrapper: a shell script, or Python that imports without calling it.
        assert_eq!(
            wrapper_module("#!/bin/sh\nfrom x import main\nsys.exit(main())\n"),
            None
        );
        assert_eq!(
            wrapper_module("#!/usr/bin/python3\nfrom x import main\nmain()\n"),
            None
        );
        let entry = "[console_scripts]\nllamafactory-cli = llamafactory.cli:main\nlmf = llamafactory.cli:main\n\n[gui_scripts]\nyolo = other:x\n";
        assert_eq!(
            console_entry(entry, "lmf").as_deref(),
            Some("llamafactory.cli")
        );
        assert_eq!(console_entry(entry, "yolo"), None);
    }

    #[test]
    fn each_syntax_names_and_adds_its_words() {
        // (syntax, key, the name, how it is shown, the tokens added for 4)
        let table: &[(Syntax, &str, &str, &str, &[&str])] = &[
            (
                Syntax::KeyValue,
                "batch_size",
                "batch_size",
                "batch_size=N",
                &["batch_size=4"],
            ),
            (
                Syntax::KebabJoined,
                "micro_batch_size",
                "--micro-batch-size",
                "--micro-batch-size=N",
                &["--micro-batch-size=4"],
            ),
            (
                Syntax::Dashed,
                "gradient_accumulation_steps",
                "--gradient_accumulation_steps",
                "--gradient_accumulation_steps N",
                &["--gradient_accumulation_steps", "4"],
            ),
        ];
        for &(syntax, key, name, shown, added) in table {
            assert_eq!(syntax.name(key), name);
            assert_eq!(syntax.shown(key), shown);
            let mut edits = Vec::new();
            syntax
                .absent(key, 1)
                .edits(&argv("prog"), &crate::knobs::Value::Int(4), &mut edits);
            let out = argv::apply_edits(&argv("prog"), &edits);
            let out: Vec<&str> = out[1..].iter().map(|t| t.to_str().unwrap()).collect();
            assert_eq!(out, added, "{syntax:?}");
        }
    }
}
