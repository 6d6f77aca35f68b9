//! A Python script whose batch is one of its own globals, overridden by Python config files
//! given as arguments: karpathy/nanoGPT's `python train.py config/train_shakespeare_char.py
//! [--batch_size=32]`, behind any launcher (`torchrun --standalone --nproc_per_node=8 train.py
//! config/train_gpt2.py`). Reads the script, its configurator and its config files as the job's
//! user; runs none of them, writes nothing.
//!
//! What the job sees, and so what is read: the script's top-level assignments up to the line
//! that execs its configurator (`exec(open('configurator.py').read())`, a file that reads
//! `sys.argv`); then, in the order of the script's arguments, each `=`-less argument that is an
//! existing `.py` file (a config file: its top-level assignments, the later winning) and each
//! `--key=value` argument. Only top-level, unconditional assignments count, their value a
//! literal or literal arithmetic (`5 * 8`): nanoGPT's `gradient_accumulation_steps //=
//! ddp_world_size` inside `if ddp:` runs after the configurator on a value it already set, and
//! does not make the default unknown. A value that is a call or a name is no value. The batch
//! and accumulation are the names oomguard knows as flags, without their dashes
//! (`batch_size`, `micro_batch_size`, `gradient_accumulation_steps`, ...).
//!
//! How a relaunch changes them: with a configurator, a `--batch_size=16` word appended to the
//! script's arguments (the configurator takes only that form, one word each, and applies it
//! after every config file), or the command's own `--key=value` rewritten in place; no file is
//! edited. Without one, where config files are given, the job gets a patched copy of the one
//! that sets the knob (a knob only the script sets is written at the end of the last one's copy,
//! where the file editor can). A script whose globals hold the batch but that takes neither
//! configurator nor config file is not moved: the run's first lines name the `--batch-arg` that
//! would patch it.
//!
//! Beside a batch flag of the command (`--batch_size=32`), [`partner`] finds the accumulation
//! the same way, so it starts from its real value (nanoGPT's 40, not 1) and is added in the
//! configurator's form.

use std::path::Path;

use super::Found;
use crate::knobs::argv;
use crate::knobs::file::{self, py, Format, Scalar};
use crate::knobs::reader::{KnobError, Reader, Request};
use crate::knobs::Place;

/// `--dry-run`'s and `doctor`'s name for this entrypoint.
const ENTRYPOINT: &str = "Python script with config files";

/// The batch names among a script's globals: the batch flags oomguard knows, undashed, most
/// specific first (those that are Python identifiers).
fn batch_names() -> Vec<&'static str> {
    undashed(argv::BATCH_FLAGS)
}

/// The accumulation names among a script's globals, as [`batch_names`].
fn accum_names() -> Vec<&'static str> {
    undashed(argv::ACCUM_FLAGS)
}

fn undashed(flags: &[&'static str]) -> Vec<&'static str> {
    flags
        .iter()
        .filter_map(|f| f.strip_prefix("--"))
        .filter(|name| {
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        })
        .collect()
}

/// One config file among the script's arguments.
struct Config {
    /// As the command names it.
    path: String,
    /// Its top-level statements, or why they cannot be read (then nothing it might set is
    /// known).
    top: Result<Vec<py::TopLevel>, String>,
    text: String,
}

/// One argument of the script that changes its globals, in the order the configurator applies
/// them.
enum Arg {
    /// An index into [`Job::configs`].
    Config(usize),
    /// `--key=value` (configurator style): the key and the value as written.
    Set { key: String, raw: String },
}

/// A Python script, its configurator and its config files, as read.
struct Job {
    /// The script, as the command names it.
    script: String,
    script_top: Vec<py::TopLevel>,
    /// The configurator the script execs (as the script names it), and the index of that exec
    /// in `script_top`.
    configurator: Option<(String, usize)>,
    configs: Vec<Config>,
    args: Vec<Arg>,
    /// The argv index where a word is added: the end of the script's arguments.
    end: usize,
}

/// Where a global's value was set last.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// The script's own top-level assignment, on this line.
    Script(usize),
    /// A config file (an index into [`Job::configs`]), on this line.
    Config(usize, usize),
    /// A `--key=value` argument of the command.
    Flag,
}

/// A global's value as the job sees it after the configurator (or, without one, its config
/// files), and where it was set.
struct Reading {
    value: Result<Scalar, String>,
    source: Source,
}

/// The first of the names with a whole number of at least 1, or the first that holds
/// something else.
enum Pick {
    Count(String, u64, Source),
    Unusable(String, String, Source),
    Absent,
}

impl Job {
    /// `None` where the command runs no Python script that reads (`*.py`, behind any launcher),
    /// or the script cannot be read.
    fn read(request: &Request) -> Option<Job> {
        let argv = request.command;
        let launch = argv::launch(argv);
        let (script_at, args_from) = match &launch.script {
            Some(script) if script.ends_with(".py") => {
                let at = launch.script_args.checked_sub(1)?;
                (argv.get(at)?.to_str() == Some(script.as_str())).then_some((at, at + 1))?
            }
            // `./train.py ARGS`: the script is the program.
            None => (0, 1),
            Some(_) => return None,
        };
        let script = argv.get(script_at)?.to_str()?.to_string();
        if !script.ends_with(".py") {
            return None;
        }
        let script_top = py::top_level(&read_text(request, &script).ok()?).ok()?;
        let configurator = script_top.iter().enumerate().find_map(|(i, s)| match s {
            py::TopLevel::Exec { file, .. } => read_text(request, file)
                .is_ok_and(|text| text.contains("sys.argv"))
                .then(|| (file.clone(), i)),
            _ => None,
        });
        let end = argv::part_end(argv, args_from);
        let mut configs = Vec::new();
        let mut args = Vec::new();
        for token in argv.get(args_from..end).unwrap_or_default() {
            let Some(text) = token.to_str() else { continue };
            if let Some((key, raw)) = text.strip_prefix("--").and_then(|t| t.split_once('=')) {
                args.push(Arg::Set {
                    key: key.to_string(),
                    raw: raw.to_string(),
                });
                continue;
            }
            if text.starts_with('-') || text.contains('=') || !text.ends_with(".py") {
                continue;
            }
            if configs.len() == MAX_CONFIGS {
                return None;
            }
            let file_text = match read_text(request, text) {
                Ok(t) => t,
                // Not an existing file: no config (an output path, a name the job makes).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    configs.push(Config {
                        path: text.to_string(),
                        top: Err(format!("cannot be read ({e})")),
                        text: String::new(),
                    });
                    args.push(Arg::Config(configs.len() - 1));
                    continue;
                }
            };
            configs.push(Config {
                path: text.to_string(),
                top: py::top_level(&file_text).map_err(|e| e.to_string()),
                text: file_text,
            });
            args.push(Arg::Config(configs.len() - 1));
        }
        Some(Job {
            script,
            script_top,
            configurator,
            configs,
            args,
            end,
        })
    }

    /// `key`'s value as the job's globals hold it once its arguments are applied; `None` where
    /// nothing sets it.
    fn value(&self, key: &str) -> Option<Reading> {
        let mut reading: Option<Reading> = None;
        let Some((_, exec_at)) = &self.configurator else {
            // No configurator: the script's first top-level assignment is its default, and the
            // config files, in order, override it.
            let first = self
                .script_top
                .iter()
                .position(|s| matches!(s, py::TopLevel::Assign { name, .. } if name == key));
            if let Some(i) = first {
                apply(&self.script_top[i..=i], key, Source::Script, &mut reading);
            }
            for i in 0..self.configs.len() {
                self.apply_config(i, key, &mut reading);
            }
            return reading;
        };
        apply(
            &self.script_top[..*exec_at],
            key,
            Source::Script,
            &mut reading,
        );
        for arg in &self.args {
            match arg {
                Arg::Config(i) => self.apply_config(*i, key, &mut reading),
                Arg::Set { key: k, raw } if k == key => {
                    reading = Some(Reading {
                        value: py::evaluate(raw),
                        source: Source::Flag,
                    });
                }
                Arg::Set { .. } => {}
            }
        }
        // The script setting it again after its configurator ran undoes any override.
        let again = self.script_top[*exec_at + 1..]
            .iter()
            .find_map(|s| match s {
                py::TopLevel::Assign { name, line, .. } if name == key => Some(*line),
                _ => None,
            });
        if let (Some(line), Some(reading)) = (again, reading.as_mut()) {
            reading.value = Err(format!(
                "set again on line {line} of {}, after its configurator runs, so no argument can change it",
                self.script
            ));
        }
        reading
    }

    /// `reading` once config file `i` has run.
    fn apply_config(&self, i: usize, key: &str, reading: &mut Option<Reading>) {
        let config = &self.configs[i];
        match &config.top {
            Ok(statements) => apply(statements, key, |line| Source::Config(i, line), reading),
            // What an unreadable file sets is not known: a value read before it may be
            // overridden there.
            Err(why) if reading.is_some() => {
                *reading = Some(Reading {
                    value: Err(format!("{}: {why}", config.path)),
                    source: Source::Config(i, 0),
                });
            }
            Err(_) => {}
        }
    }

    /// The first of `names` the job's globals hold, in the names' order.
    fn pick(&self, names: &[&str]) -> Pick {
        let mut unusable = None;
        for &name in names {
            let name = name.to_string();
            let Some(reading) = self.value(&name) else {
                continue;
            };
            match reading.value {
                Ok(Scalar::Int(n)) if n >= 1 => {
                    return Pick::Count(name, n.unsigned_abs(), reading.source)
                }
                Ok(other) => {
                    let held = format!("`{other}`, not a whole number of at least 1");
                    unusable.get_or_insert(Pick::Unusable(name, held, reading.source));
                }
                Err(why) => {
                    unusable.get_or_insert(Pick::Unusable(name, why, reading.source));
                }
            }
        }
        unusable.unwrap_or(Pick::Absent)
    }

    /// Where a value was set, for the notes: `config/train_small.py`, `train.py (its default)`,
    /// `the command line`.
    fn source_text(&self, source: &Source) -> String {
        match source {
            Source::Script(line) => format!("{} line {line} (its default)", self.script),
            Source::Config(i, _) => self.configs[*i].path.clone(),
            Source::Flag => "the command line".to_string(),
        }
    }

    /// The place of a global moved through the configurator: its `--key=value` in the command,
    /// rewritten in place, else that word added at the end of the script's arguments.
    fn flag_place(&self, request: &Request, name: &str) -> Place {
        let flag = format!("--{name}");
        match argv::locate_flag(request.command, &flag, "--batch-arg") {
            Ok((place @ argv::Place::Flag { .. }, _)) => Place::Argv(place),
            _ => Place::Argv(argv::Place::absent_joined(&flag, self.end)),
        }
    }
}

/// `reading` once `statements` have run: the last assignment of `key` among them wins, and an
/// augmented one (`//=`) leaves its value unknown.
fn apply(
    statements: &[py::TopLevel],
    key: &str,
    at: impl Fn(usize) -> Source,
    reading: &mut Option<Reading>,
) {
    for statement in statements {
        match statement {
            py::TopLevel::Assign { name, value, line } if name == key => {
                *reading = Some(Reading {
                    value: value.clone(),
                    source: at(*line),
                });
            }
            py::TopLevel::Augmented { name, op, line } if name == key => {
                *reading = Some(Reading {
                    value: Err(format!("changed by `{op}` on line {line}")),
                    source: at(*line),
                });
            }
            _ => {}
        }
    }
}

/// The most config files given as arguments that are read for one command, and the most of
/// each Python file read: real ones are a few KB, and everything here is read by root's
/// oomguard (under the system unit) before any limit of the job's exists. A command past either
/// is read as no such script.
const MAX_CONFIGS: usize = 16;
const FILE_MAX_BYTES: u64 = 4 << 20;

/// Reads `path` (relative to the job's working directory) as the job's user: UTF-8, a regular
/// file of at most [`FILE_MAX_BYTES`].
fn read_text(request: &Request, path: &str) -> std::io::Result<String> {
    let absolute = request.cwd.join(path);
    let bytes = crate::guard::principal::as_user(|| {
        crate::guard::fsutil::read_regular_capped(&absolute, FILE_MAX_BYTES)
    })?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// The batch and the accumulation of a Python script's globals, over its config files and
/// `--key=value` arguments; `None` where the command runs no such script, or its globals hold no
/// batch it can move (`notes` then says why, where the batch is there).
pub(in crate::knobs) fn find(
    request: &Request,
    reader: &mut Reader,
    notes: &mut Vec<String>,
) -> Result<Option<Found>, KnobError> {
    let Some(job) = Job::read(request) else {
        return Ok(None);
    };
    let (name, batch, source) = match job.pick(&batch_names()) {
        Pick::Count(name, n, source) => (name, n, source),
        Pick::Unusable(name, why, source) => {
            if job.configurator.is_some() || !job.configs.is_empty() {
                notes.push(format!(
                    "{}: batch `{name}` in {} is {why}: name the batch with --batch-arg",
                    job.script,
                    job.source_text(&source)
                ));
            }
            return Ok(None);
        }
        Pick::Absent => return Ok(None),
    };
    match &job.configurator {
        Some(configurator) => Ok(Some(through_configurator(
            request,
            &job,
            &configurator.0,
            (name, batch, source),
        ))),
        None => in_config_copies(reader, &job, (name, batch, source), notes),
    }
}

/// The knobs of a script that execs a configurator: `--key=value` words.
fn through_configurator(
    request: &Request,
    job: &Job,
    configurator: &str,
    (name, batch, source): (String, u64, Source),
) -> Found {
    let how = |name: &str| match job.flag_place(request, name) {
        Place::Argv(argv::Place::Flag { .. }) => format!("its --{name}=N rewritten in place"),
        _ => format!("--{name}=N added to the script's arguments"),
    };
    let mut notes = vec![format!(
        "batch: `{name}` in {}, {batch}: {} execs {configurator}, which applies `--key=value` arguments over its config files, so it is changed with {} (no file is edited)",
        job.source_text(&source),
        job.script,
        how(&name),
    )];
    let accum = match job.pick(&accum_names()) {
        Pick::Count(accum, n, source) => {
            notes.push(format!(
                "accumulation: `{accum}` in {}, {n}, changed with {}",
                job.source_text(&source),
                how(&accum)
            ));
            Some((job.flag_place(request, &accum), Some(n)))
        }
        Pick::Unusable(accum, why, source) => {
            notes.push(format!(
                "accumulation: `{accum}` in {} is {why}, so it is not moved",
                job.source_text(&source)
            ));
            None
        }
        Pick::Absent => None,
    };
    Found {
        entrypoint: ENTRYPOINT,
        batch: (job.flag_place(request, &name), batch),
        accum,
        kept_by_job: false,
        no_accumulation: None,
        notes,
    }
}

/// The knobs of a script given config files but no configurator: keys of a patched copy.
fn in_config_copies(
    reader: &mut Reader,
    job: &Job,
    (name, batch, source): (String, u64, Source),
    notes: &mut Vec<String>,
) -> Result<Option<Found>, KnobError> {
    if job.configs.is_empty() {
        // The batch is the script's own global and nothing on its command line sets it.
        if let Source::Script(line) = source {
            notes.push(format!(
                "{}: `{name} = {batch}` on line {line} is set by neither a configurator nor a config file: to move it, patch it with --batch-arg {}:{name}",
                job.script, job.script
            ));
        }
        return Ok(None);
    }
    let Some(batch_place) = copy_place(job, &name, batch, &source) else {
        notes.push(format!(
            "{}: batch `{name}` ({}, {batch}) is not one literal oomguard can edit in {}: name the batch with --batch-arg",
            job.script,
            job.source_text(&source),
            target_of(job, &source).path
        ));
        return Ok(None);
    };
    let accum = match job.pick(&accum_names()) {
        Pick::Count(accum, n, source) => copy_place(job, &accum, n, &source)
            .map(|place| (accum, n, place, job.source_text(&source))),
        Pick::Unusable(..) | Pick::Absent => None,
    };
    let who = |path: &str| format!("{} config file {path}", job.script);
    let (file, key) = batch_place;
    let i = reader.file(Path::new(&file), &who(&file))?;
    let mut notes = vec![format!(
        "batch: `{name}` in {}, {batch}: {} takes no `--key=value` configurator, so the job gets a patched copy of {file} (the file is never edited)",
        job.source_text(&source),
        job.script
    )];
    let accum = match accum {
        Some((accum, n, (file, key), from)) => {
            let j = reader.file(Path::new(&file), &who(&file))?;
            notes.push(format!(
                "accumulation: `{accum}` in {from}, {n}, set in the copy of {file}"
            ));
            Some((Place::File { file: j, key }, Some(n)))
        }
        None => None,
    };
    Ok(Some(Found {
        entrypoint: ENTRYPOINT,
        batch: (Place::File { file: i, key }, batch),
        accum,
        kept_by_job: false,
        no_accumulation: None,
        notes,
    }))
}

/// The config file a patched copy sets `source`'s global in: the one that set it last, or the
/// last one where only the script does.
fn target_of<'j>(job: &'j Job, source: &Source) -> &'j Config {
    match source {
        Source::Config(i, _) => &job.configs[*i],
        _ => job.configs.last().expect("called with config files"),
    }
}

/// The file and key a patched copy sets `name` in, where the file editor can set it there: a
/// literal the file binds once, or a name it lacks that the editor can write in.
fn copy_place(job: &Job, name: &str, value: u64, source: &Source) -> Option<(String, String)> {
    let target = target_of(job, source);
    let n = i64::try_from(value).ok()?;
    let editable = match source {
        Source::Config(..) => file::locate(Format::Python, &target.text, name)
            .is_ok_and(|found| found.value == Scalar::Int(n)),
        _ => file::set(Format::Python, &target.text, name, &Scalar::Int(n)).is_ok(),
    };
    editable.then(|| (target.path.clone(), name.to_string()))
}

/// The accumulation of a script that execs a configurator, beside a batch flag of its command
/// (`--batch_size=32`): its place (the command's `--key=value`, else that word added) and the
/// value its globals hold, with a note. `named`: the flag `--accum-arg` names (`--key`). `None`
/// where the script has no configurator or its globals hold no such count.
pub(in crate::knobs) fn partner(
    request: &Request,
    named: Option<&str>,
) -> Option<(Place, u64, String)> {
    let job = Job::read(request)?;
    let (configurator, _) = job.configurator.as_ref()?;
    let names = match named {
        Some(flag) => vec![flag.strip_prefix("--")?.trim_end_matches('=')],
        None => accum_names(),
    };
    let Pick::Count(name, n, source) = job.pick(&names) else {
        return None;
    };
    let note = format!(
        "accumulation: `{name}` in {}, {n}: {} execs {configurator}, so it is changed with --{name}=N beside the batch flag",
        job.source_text(&source),
        job.script
    );
    Some((job.flag_place(request, &name), n, note))
}

#[cfg(test)]
mod tests {
    //! nanoGPT's command forms through the resolver, as a run meets them: the files in a
    //! temporary directory, the knobs `resolve` gives and the command of a relaunch.
    use std::path::Path;

    use crate::knobs::argv;
    use crate::knobs::resolve::{resolve, Request};
    use crate::knobs::{KnobSet, Place, Value};
    use crate::test_util::{argv, words};

    /// train.py's head as nanoGPT writes it: the defaults, then the configurator, then code
    /// that rebinds the accumulation only under DDP.
    const TRAIN: &str = "\
\"\"\"
This training script can be run both on a single gpu in debug mode,
and also in a larger training run with distributed data parallel (ddp).
\"\"\"
import os
import time
from contextlib import nullcontext

# -----------------------------------------------------------------------------
# default config values designed to train a gpt2 (124M) on OpenWebText
out_dir = 'out'
eval_interval = 2000
log_interval = 1
init_from = 'scratch' # 'scratch' or 'resume' or 'gpt2*'
dataset = 'openwebtext'
gradient_accumulation_steps = 5 * 8 # used to simulate larger batch sizes
batch_size = 12 # if gradient_accumulation_steps > 1, this is the micro-batch size
block_size = 1024
learning_rate = 6e-4 # max learning rate
config_keys = [k for k,v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read()) # overrides from command line or config file
config = {k: globals()[k] for k in config_keys} # will be useful for logging
# -----------------------------------------------------------------------------

ddp = int(os.environ.get('RANK', -1)) != -1 # is this a ddp run?
if ddp:
    ddp_world_size = int(os.environ['WORLD_SIZE'])
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    ddp_world_size = 1
tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
print(f\"tokens per iteration will be: {tokens_per_iter:,}\")
";

    /// The configurator, in its own words: `=`-less arguments are files run over the
    /// globals, `--key=value` ones literal-evaluated over them.
    const CONFIGURATOR: &str = "\
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if '=' not in arg:
        assert not arg.startswith('--')
        exec(open(arg).read())
    else:
        assert arg.startswith('--')
        key, val = arg.split('=')
        key = key[2:]
        if key not in globals():
            raise ValueError(f\"Unknown config key: {key}\")
        try:
            attempt = literal_eval(val)
        except (SyntaxError, ValueError):
            attempt = val
        assert type(attempt) == type(globals()[key])
        globals()[key] = attempt
";

    const SHAKESPEARE: &str = "\
# train a miniature character-level shakespeare model
out_dir = 'out-shakespeare-char'
eval_interval = 250 # keep frequent because we'll overfit
dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256 # context of up to 256 previous characters

# on macbook also add
# device = 'cpu'  # run on cpu only
";

    const GPT2: &str = "\
# config for training GPT-2 (124M) on 1 node of 8X A100 40GB
# $ torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py
wandb_run_name='gpt2-124M'

# these make the total batch size be ~0.5M
# 12 batch size * 1024 block size * 5 gradaccum * 8 GPUs = 491,520
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8
";

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn nanogpt() -> tempfile::TempDir {
        project(&[
            ("train.py", TRAIN),
            ("configurator.py", CONFIGURATOR),
            ("config/train_shakespeare_char.py", SHAKESPEARE),
            ("config/train_gpt2.py", GPT2),
        ])
    }

    fn resolved(dir: &Path, command: &str, accum_arg: Option<&str>) -> KnobSet {
        let command = argv(command);
        let mut request = Request::plain(&command, dir);
        request.accum_arg = accum_arg;
        resolve(&request).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `name place value` of each knob: `batch --batch_size= 64` for a word added in equals
    /// form, `batch flag --batch_size 32` for the command's own.
    fn shown(set: &KnobSet) -> Vec<String> {
        set.knobs
            .iter()
            .map(|k| {
                let place = match &k.place {
                    Place::Argv(argv::Place::Absent { name, .. }) => name.clone(),
                    Place::Argv(p) => format!("flag {}", p.name()),
                    Place::File { file, key } => {
                        format!("{}:{key}", set.files[*file].path.display())
                    }
                    other => format!("{other:?}"),
                };
                format!("{} {place} {}", k.name, k.original)
            })
            .collect()
    }

    /// The command of the attempt with the batch halved and the accumulation doubled.
    fn relaunched(set: &KnobSet, command: &str) -> String {
        let command = argv(command);
        let values: Vec<Value> = set
            .knobs
            .iter()
            .map(|k| match (k.name.as_str(), &k.original) {
                ("batch", Value::Int(n)) => Value::Int(n / 2),
                ("accum", Value::Int(n)) => Value::Int(n * 2),
                (_, v) => v.clone(),
            })
            .collect();
        words(&set.input(&command, &values, &[]).argv)
    }

    #[test]
    fn nanogpts_command_forms_keep_the_effective_batch_in_equals_form() {
        let dir = nanogpt();
        // (command, --accum-arg, knobs, the relaunch at batch/2 and accumulation×2)
        let table: &[(&str, Option<&str>, &[&str], &str)] = &[
            (
                "python train.py config/train_shakespeare_char.py",
                None,
                &["batch --batch_size= 64", "accum --gradient_accumulation_steps= 1"],
                "python train.py config/train_shakespeare_char.py --batch_size=32 --gradient_accumulation_steps=2",
            ),
            // The batch on the command line, rewritten in place; its partner from the config.
            (
                "python train.py config/train_shakespeare_char.py --batch_size=32",
                None,
                &["batch flag --batch_size 32", "accum --gradient_accumulation_steps= 1"],
                "python train.py config/train_shakespeare_char.py --batch_size=16 --gradient_accumulation_steps=2",
            ),
            // The script's own defaults: 5 * 8 is 40, doubled from there.
            (
                "python train.py",
                None,
                &["batch --batch_size= 12", "accum --gradient_accumulation_steps= 40"],
                "python train.py --batch_size=6 --gradient_accumulation_steps=80",
            ),
            (
                "python train.py --batch_size=12",
                None,
                &["batch flag --batch_size 12", "accum --gradient_accumulation_steps= 40"],
                "python train.py --batch_size=6 --gradient_accumulation_steps=80",
            ),
            // Named with --accum-arg: the same start and form.
            (
                "python train.py --batch_size=12",
                Some("--gradient_accumulation_steps"),
                &["batch flag --batch_size 12", "accum --gradient_accumulation_steps= 40"],
                "python train.py --batch_size=6 --gradient_accumulation_steps=80",
            ),
            (
                "torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py",
                None,
                &["batch --batch_size= 12", "accum --gradient_accumulation_steps= 40"],
                "torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py --batch_size=6 --gradient_accumulation_steps=80",
            ),
            // Later files win; a `--key=value` wins over them, and is rewritten where it is.
            (
                "python -u train.py config/train_gpt2.py config/train_shakespeare_char.py --gradient_accumulation_steps=4 --compile=False",
                None,
                &["batch --batch_size= 64", "accum flag --gradient_accumulation_steps 4"],
                "python -u train.py config/train_gpt2.py config/train_shakespeare_char.py --gradient_accumulation_steps=8 --compile=False --batch_size=32",
            ),
            (
                "python train.py config/train_shakespeare_char.py config/train_gpt2.py",
                None,
                &["batch --batch_size= 12", "accum --gradient_accumulation_steps= 40"],
                "python train.py config/train_shakespeare_char.py config/train_gpt2.py --batch_size=6 --gradient_accumulation_steps=80",
            ),
            // A `.py` argument that is no file is no config.
            (
                "python train.py config/missing.py",
                None,
                &["batch --batch_size= 12", "accum --gradient_accumulation_steps= 40"],
                "python train.py config/missing.py --batch_size=6 --gradient_accumulation_steps=80",
            ),
        ];
        for (command, accum_arg, knobs, relaunch) in table {
            let set = resolved(dir.path(), command, *accum_arg);
            assert_eq!(shown(&set), *knobs, "{command}");
            assert!(set.files.is_empty(), "{command}: no file is edited");
            assert_eq!(relaunched(&set, command), *relaunch, "{command}");
            // The effective batch is the job's: 64 × 1 → 32 × 2, 12 × 40 → 6 × 80.
            let (b, a) = (
                set.knobs[0].original.as_int(),
                set.knobs[1].original.as_int(),
            );
            assert!(b.unwrap() * a.unwrap() > 0);
        }
    }

    #[test]
    fn the_notes_say_where_each_was_found() {
        let dir = nanogpt();
        let set = resolved(
            dir.path(),
            "python train.py config/train_shakespeare_char.py",
            None,
        );
        assert!(
            set.notes[0].starts_with(
                "batch: `batch_size` in config/train_shakespeare_char.py, 64: train.py execs configurator.py"
            ),
            "{:?}",
            set.notes
        );
        assert!(
            set.notes[0].contains("--batch_size=N added to the script's arguments"),
            "{:?}",
            set.notes
        );
        assert_eq!(
            set.notes[1],
            "accumulation: `gradient_accumulation_steps` in config/train_shakespeare_char.py, 1, changed with --gradient_accumulation_steps=N added to the script's arguments"
        );
        let set = resolved(dir.path(), "python train.py --batch_size=32", None);
        assert_eq!(
            set.notes,
            ["accumulation: `gradient_accumulation_steps` in train.py line 16 (its default), 40: train.py execs configurator.py, so it is changed with --gradient_accumulation_steps=N beside the batch flag"]
        );
    }

    #[test]
    fn what_the_job_would_not_see_is_not_read() {
        // (train.py, command, knobs, a word of the notes)
        let table: &[(&str, &str, &[&str], &str)] = &[
            // A batch that is a call: no value, said, nothing moved.
            (
                &TRAIN.replace("batch_size = 12 #", "batch_size = int(os.environ['BS']) #"),
                "python train.py",
                &[],
                "batch `batch_size` in train.py line 17 (its default) is a call",
            ),
            // Set again after the configurator: no argument can change it.
            (
                &format!("{TRAIN}batch_size = 8\n"),
                "python train.py config/train_shakespeare_char.py",
                &[],
                "set again on line 34 of train.py, after its configurator runs",
            ),
            // Changed at the top before the configurator: unknown.
            (
                &TRAIN.replace("block_size = 1024\n", "block_size = 1024\ngradient_accumulation_steps *= 2\n"),
                "python train.py",
                &["batch --batch_size= 12"],
                "accumulation: `gradient_accumulation_steps` in train.py line 19 (its default) is changed by `*=` on line 19, so it is not moved",
            ),
            // No configurator and no config file: the global is named, not moved.
            (
                &TRAIN.replace("exec(open('configurator.py').read())", "pass"),
                "python train.py",
                &[],
                "`batch_size = 12` on line 17 is set by neither a configurator nor a config file: to move it, patch it with --batch-arg train.py:batch_size",
            ),
            // An exec of a file that reads no arguments is no configurator.
            (
                &TRAIN.replace("configurator.py", "defaults.py"),
                "python train.py",
                &[],
                "set by neither a configurator nor a config file",
            ),
        ];
        for (train, command, knobs, note) in table {
            let dir = nanogpt();
            std::fs::write(dir.path().join("train.py"), train).unwrap();
            std::fs::write(dir.path().join("defaults.py"), "batch_size = 4\n").unwrap();
            let set = resolved(dir.path(), command, None);
            assert_eq!(shown(&set), *knobs, "{command}");
            assert!(
                set.notes.iter().any(|n| n.contains(note)),
                "{command}: {:?}",
                set.notes
            );
        }
        // A script that keeps no batch global is left to the others, silently.
        let dir = project(&[
            ("prep.py", "import sys\nrows = 3\n"),
            ("data.py", "n = 1\n"),
        ]);
        let set = resolved(dir.path(), "python prep.py data.py", None);
        assert!(
            set.knobs.is_empty() && set.notes.is_empty(),
            "{:?}",
            set.notes
        );
    }

    #[test]
    fn without_a_configurator_the_config_file_reaches_the_job_as_a_patched_copy() {
        let train = TRAIN.replace(
            "exec(open('configurator.py').read())",
            "exec(open(sys.argv[1]).read())",
        );
        let dir = project(&[
            ("train.py", &train),
            ("config/train_shakespeare_char.py", SHAKESPEARE),
        ]);
        let command = "python train.py config/train_shakespeare_char.py";
        let set = resolved(dir.path(), command, None);
        assert_eq!(
            shown(&set),
            [
                "batch config/train_shakespeare_char.py:batch_size 64",
                "accum config/train_shakespeare_char.py:gradient_accumulation_steps 1",
            ]
        );
        assert!(set.files[0].in_command.is_some(), "the job reads a copy");
        assert_eq!(
            set.file_texts(&[Value::Int(32), Value::Int(2)])[0],
            SHAKESPEARE
                .replace("steps = 1", "steps = 2")
                .replace("batch_size = 64", "batch_size = 32")
        );
        assert!(set.notes[0].contains("takes no `--key=value` configurator, so the job gets a patched copy of config/train_shakespeare_char.py"), "{:?}", set.notes);
        // The copy is what the command names from then on.
        let copy = dir
            .path()
            .join("config/train_shakespeare_char.oomguard-1.py");
        let input = set.input(
            &argv(command),
            &[Value::Int(32), Value::Int(2)],
            &[Some(copy)],
        );
        assert_eq!(
            words(&input.argv),
            "python train.py config/train_shakespeare_char.oomguard-1.py"
        );

        // The accumulation the script alone sets is written at the end of the copy.
        let config = "batch_size = 64\nblock_size = 256\n";
        std::fs::write(dir.path().join("config/small.py"), config).unwrap();
        let set = resolved(dir.path(), "python train.py config/small.py", None);
        assert_eq!(shown(&set)[0], "batch config/small.py:batch_size 64");
        assert!(set.accum().is_some() && !set.effective_shrinks());
        assert_eq!(
            set.file_texts(&[Value::Int(32), Value::Int(80)])[0],
            format!(
                "{}gradient_accumulation_steps = 80\n",
                config.replace("64", "32")
            )
        );
    }
}
