//! Entrypoints that keep the batch where no flag of the command names it, found with no knob
//! flag: LightningCLI's `--config` files, a Hugging Face example script's single JSON/YAML
//! argument (`TrainingArguments`), a DeepSpeed config (`--deepspeed`, `--deepspeed_config`),
//! Hydra's composed primary config ([`hydra`]) and a Python script's globals over the Python
//! config files it is given (nanoGPT: [`pyconfig`]). Each says where the batch and the
//! accumulation are and what they hold; [`super::resolve`] asks them, in that order, only when
//! no flag of the command is the batch. Reads the files it needs (as the job's user, through
//! the resolver's reader); writes nothing, starts nothing.
//!
//! Where the entrypoint lets the command line override its file (LightningCLI, Hydra), a knob
//! is an override added to the command (`--data.batch_size 128`, `data.batch_size=128`) and
//! the file is left alone; where it does not (a Trainer's JSON, a DeepSpeed config), the knob
//! is the file's key, and the job gets a patched copy through the argv token that names it. A
//! nanoGPT configurator takes `--key=value` words, so there the knob is such a word.

pub mod console;
pub mod deepspeed;
pub mod hydra;
pub mod lightning;
pub mod mmengine;
pub mod pyconfig;
pub mod trainer_args;
pub mod yacs;

use std::ffi::OsString;
use std::path::Path;

use super::file::{self, Format};
use super::reader::{KnobError, Reader, Request};
use super::{Place, Value};

/// What an entrypoint found: the batch, the accumulation (its place, and its value where the
/// job sets one), and lines for the user saying where they are.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The entrypoint's name, as `--dry-run` and `doctor` say it ("LightningCLI").
    pub entrypoint: &'static str,
    pub batch: (Place, u64),
    /// `None`: the job keeps the effective batch itself (a DeepSpeed config with
    /// `train_batch_size` and no accumulation key derives it), or has no accumulation to move.
    pub accum: Option<(Place, Option<u64>)>,
    /// The job itself keeps the effective batch when the batch moves alone.
    pub kept_by_job: bool,
    /// The codebase has no gradient accumulation at all, so nothing can keep its effective
    /// batch: the words naming it ("detectron2"), for the one line that says so
    /// ([`crate::knobs::KnobSet::no_accumulation`]). `None` where an accumulation exists.
    pub no_accumulation: Option<String>,
    /// One line each: where the batch and the accumulation were found ("batch: `data.batch_size`
    /// in configs/config.yaml, 256, set with `--data.batch_size` on the command line").
    pub notes: Vec<String>,
}

/// The first entrypoint that keeps the batch in a file the command names: LightningCLI's
/// `--config`, a Trainer's single JSON/YAML argument, a DeepSpeed config, Hydra's composed
/// config, a Python script's globals and config files. `None` when none does.
/// `notes` gets a line where an entrypoint holds a batch it cannot move. `codebase_launcher`:
/// a codebase's own launcher runs the command ([`console::identify`]), so its files are not a
/// Trainer's arguments file.
pub(super) fn find(
    request: &Request,
    reader: &mut Reader,
    notes: &mut Vec<String>,
    codebase_launcher: bool,
) -> Result<Option<Found>, KnobError> {
    if let Some(found) = lightning::find(request, notes)? {
        return Ok(Some(found));
    }
    if let Some(found) = trainer_args::find(request, reader, codebase_launcher)? {
        return Ok(Some(found));
    }
    if let Some(found) = deepspeed::find(request, reader)? {
        return Ok(Some(found));
    }
    if let Some(found) = hydra::find(request, reader, notes)? {
        return Ok(Some(found));
    }
    if let Some(found) = yacs::find(request)? {
        return Ok(Some(found));
    }
    if let Some(found) = mmengine::find(request, notes)? {
        return Ok(Some(found));
    }
    pyconfig::find(request, reader, notes)
}

/// The index of the first argument that is the script's own, behind any launcher
/// ([`argv::launch`](crate::knobs::argv::launch)): the entrypoints read only those.
fn script_args_start(argv: &[OsString]) -> usize {
    crate::knobs::argv::launch(argv).script_args
}

/// Every value of the flags in `names` among `argv[from..]`, in order: `--flag VALUE` and
/// `--flag=VALUE`, with the argv index of the token holding the value.
fn flag_values<'a>(argv: &'a [OsString], from: usize, names: &[&str]) -> Vec<(usize, &'a str)> {
    let mut out = Vec::new();
    let mut i = from;
    while i < argv.len() {
        if let Some(text) = argv[i].to_str() {
            if names.contains(&text) {
                if let Some(value) = argv.get(i + 1).and_then(|v| v.to_str()) {
                    out.push((i + 1, value));
                }
                i += 2;
                continue;
            }
            if let Some((name, value)) = text.split_once('=') {
                if names.contains(&name) {
                    out.push((i, value));
                }
            }
        }
        i += 1;
    }
    out
}

/// The text of a config file the command names, read as the job's user and not registered for
/// patching (an entrypoint that takes overrides on its command line leaves its files alone).
fn read_config(request: &Request, path: &str, who: &str) -> Result<(Format, String), KnobError> {
    let fail = |problem: String| KnobError::Knob {
        where_: who.to_string(),
        problem,
    };
    let format = config_format(path, who)?;
    let absolute = request.cwd.join(path);
    let bytes = crate::guard::principal::as_user(|| {
        crate::guard::fsutil::read_regular_capped(
            &absolute,
            crate::guard::fsutil::SMALL_FILE_MAX_BYTES,
        )
    })
    .map_err(|e| fail(format!("cannot read config file {path}: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| fail(format!("config file {path} is not UTF-8 text")))?;
    Ok((format, text))
}

/// The format of a config file an entrypoint reads: YAML or JSON, else one line saying so.
fn config_format(path: &str, who: &str) -> Result<Format, KnobError> {
    Format::from_path(Path::new(path))
        .filter(|f| matches!(f, Format::Yaml | Format::Json))
        .ok_or_else(|| KnobError::Knob {
            where_: who.to_string(),
            problem: format!("{path}: oomguard reads .yaml/.yml and .json configs only"),
        })
}

/// A whole number of at least 1 at `key` in `text`: `Ok(None)` where the key is absent,
/// `Err` with what it holds instead ("auto", an interpolation, a float).
fn count_at(format: Format, text: &str, key: &str) -> Result<Option<u64>, String> {
    match file::locate(format, text, key) {
        Ok(found) => match Value::from_scalar(&found.value) {
            Value::Int(n) if n >= 1 => Ok(Some(n)),
            other => Err(format!("{other}")),
        },
        Err(file::EditError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

    #[test]
    fn flag_values_are_read_in_both_spellings_in_order() {
        let a = argv("python t.py -c a.yaml --config=b.yaml --config c.yaml --configs d.yaml");
        assert_eq!(
            flag_values(&a, 2, &["--config", "-c"]),
            [(3, "a.yaml"), (4, "b.yaml"), (6, "c.yaml")]
        );
    }
}

/// The entrypoints through the resolver, as a run meets them: files in a temporary directory,
/// the knobs and notes `resolve` gives with no knob flag.
#[cfg(test)]
mod found {
    use std::path::Path;

    use crate::knobs::argv;
    use crate::knobs::resolve::{resolve, Request};
    use crate::knobs::{KnobSet, Place, Value};
    use crate::test_util::argv;

    fn resolved(dir: &Path, files: &[(&str, &str)], command: &str) -> KnobSet {
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let command = argv(command);
        let request = Request::plain(&command, dir);
        resolve(&request).unwrap_or_else(|e| panic!("{e}"))
    }

    /// (name, place, original) of each knob.
    fn knobs(set: &KnobSet) -> Vec<(String, String, Value)> {
        set.knobs
            .iter()
            .map(|k| {
                let place = match &k.place {
                    Place::Argv(argv::Place::Absent { name, .. }) => format!("added {name}"),
                    Place::Argv(p) => format!("flag {}", p.name()),
                    Place::File { file, key } => {
                        format!("{}:{key}", set.files[*file].path.display())
                    }
                    Place::Env(name) => format!("env {name}"),
                    Place::Inside { field, .. } => format!("inside {field}"),
                };
                (k.name.clone(), place, k.original.clone())
            })
            .collect()
    }

    fn row(name: &str, place: &str, n: u64) -> (String, String, Value) {
        (name.into(), place.into(), Value::Int(n))
    }

    #[test]
    fn lightning_reads_its_configs_in_order_and_adds_flags() {
        let dir = tempfile::tempdir().unwrap();
        let set = resolved(
            dir.path(),
            &[
                (
                    "configs/base.yaml",
                    "data:\n  batch_size: 512\ntrainer:\n  accumulate_grad_batches: 2\n",
                ),
                (
                    "configs/run.yaml",
                    "data:\n  batch_size: 256\n  num_workers: 4\n",
                ),
            ],
            "python train.py fit --config configs/base.yaml --config configs/run.yaml",
        );
        assert_eq!(
            knobs(&set),
            [
                row("batch", "added --data.batch_size", 256),
                row("accum", "added --trainer.accumulate_grad_batches", 2),
            ]
        );
        assert!(
            set.files.is_empty(),
            "LightningCLI's configs are never patched"
        );
        assert!(
            set.notes[0].contains("`data.batch_size` in configs/run.yaml, 256"),
            "{:?}",
            set.notes
        );

        // A subclass's init_args, a config before the subcommand, no accumulation anywhere.
        let set = resolved(
            dir.path(),
            &[(
                "c.yaml",
                "fit:\n  data:\n    class_path: m.D\n    init_args:\n      batch_size: 64\n",
            )],
            "python main.py -c c.yaml fit",
        );
        assert_eq!(
            knobs(&set),
            [
                row("batch", "added --data.init_args.batch_size", 64),
                row("accum", "added --trainer.accumulate_grad_batches", 1),
            ]
        );
        assert!(
            set.notes[1].contains("absent, will be added"),
            "{:?}",
            set.notes
        );
    }

    #[test]
    fn lightning_leaves_other_commands_with_a_config_alone() {
        let dir = tempfile::tempdir().unwrap();
        let set = resolved(
            dir.path(),
            &[("c.yaml", "data:\n  batch_size: 64\n")],
            "python train.py --config c.yaml",
        );
        assert!(set.knobs.is_empty(), "{:?}", knobs(&set));
    }

    #[test]
    fn a_trainers_arguments_file_is_patched_as_a_copy_with_its_defaults_written_in() {
        let dir = tempfile::tempdir().unwrap();
        let set = resolved(
            dir.path(),
            &[(
                "args.json",
                "{\n  \"output_dir\": \"out\",\n  \"per_device_train_batch_size\": 16\n}\n",
            )],
            "torchrun --nproc_per_node 2 run_clm.py args.json",
        );
        assert_eq!(
            knobs(&set),
            [
                row("batch", "args.json:per_device_train_batch_size", 16),
                row("accum", "args.json:gradient_accumulation_steps", 1),
            ]
        );
        assert!(set.files[0].in_command.is_some(), "the job reads a copy");
        // Moved: the copy holds both, the accumulation written in.
        let texts = set.file_texts(&[Value::Int(8), Value::Int(2)]);
        assert_eq!(
            texts[0],
            "{\n  \"gradient_accumulation_steps\": 2,\n  \"output_dir\": \"out\",\n  \"per_device_train_batch_size\": 8\n}\n"
        );

        // No batch key: the Trainer's default; a YAML file too; auto_find_batch_size named.
        let set = resolved(
            dir.path(),
            &[(
                "args.yaml",
                "output_dir: out\nauto_find_batch_size: true\ngradient_accumulation_steps: 4\n",
            )],
            "python run_clm.py args.yaml",
        );
        assert_eq!(
            knobs(&set),
            [
                row("batch", "args.yaml:per_device_train_batch_size", 8),
                row("accum", "args.yaml:gradient_accumulation_steps", 4),
            ]
        );
        assert!(
            set.notes.iter().any(|n| n.contains("auto_find_batch_size")),
            "{:?}",
            set.notes
        );

        // Not a Trainer's file: left alone.
        let set = resolved(
            dir.path(),
            &[("data.json", "{\"rows\": 3}")],
            "python prep.py data.json",
        );
        assert!(set.knobs.is_empty());
    }

    #[test]
    fn a_deepspeed_config_moves_micro_and_accumulation_together_and_keeps_the_total() {
        let dir = tempfile::tempdir().unwrap();
        let ds = "{\n  \"train_batch_size\": 64,\n  \"train_micro_batch_size_per_gpu\": 16,\n  \"gradient_accumulation_steps\": 2\n}\n";
        let set = resolved(
            dir.path(),
            &[("ds.json", ds)],
            "deepspeed --num_gpus 2 train.py --deepspeed_config ds.json",
        );
        assert_eq!(
            knobs(&set),
            [
                row("batch", "ds.json:train_micro_batch_size_per_gpu", 16),
                row("accum", "ds.json:gradient_accumulation_steps", 2),
            ]
        );
        let texts = set.file_texts(&[Value::Int(8), Value::Int(4)]);
        assert_eq!(
            texts[0],
            "{\n  \"train_batch_size\": 64,\n  \"train_micro_batch_size_per_gpu\": 8,\n  \"gradient_accumulation_steps\": 4\n}\n"
        );

        // The total and no accumulation: DeepSpeed derives it, the batch moves alone.
        let set = resolved(
            dir.path(),
            &[(
                "ds2.json",
                "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 16}",
            )],
            "python train.py --deepspeed=ds2.json",
        );
        assert_eq!(
            knobs(&set),
            [row("batch", "ds2.json:train_micro_batch_size_per_gpu", 16)]
        );
        assert!(set.kept_by_job);

        // A number in the config beside the Trainer's flag: the Trainer would refuse a relaunch
        // that moves the flag alone, so the run does not start.
        let command = argv("python train.py --deepspeed ds4.json --per_device_train_batch_size 8");
        std::fs::write(
            dir.path().join("ds4.json"),
            "{\"train_micro_batch_size_per_gpu\": 8}",
        )
        .unwrap();
        let request = Request::plain(&command, dir.path());
        let err = resolve(&request).unwrap_err().to_string();
        assert!(
            err.contains("set train_micro_batch_size_per_gpu (and its partner) to \"auto\""),
            "{err}"
        );

        // "auto": the Trainer's flags decide, and they are the knobs.
        let set = resolved(
            dir.path(),
            &[("ds3.json", "{\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\"}")],
            "python train.py --deepspeed ds3.json --per_device_train_batch_size 8",
        );
        assert_eq!(
            knobs(&set)[0],
            row("batch", "flag --per_device_train_batch_size", 8)
        );
        assert!(set.files.is_empty());
    }
}
