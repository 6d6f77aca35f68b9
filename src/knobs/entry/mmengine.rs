//! An mmengine Python config (mmdetection's `python tools/train.py configs/X.py [--cfg-options
//! train_dataloader.batch_size=4]`, and the other OpenMMLab codebases on mmengine): the batch is
//! `train_dataloader.batch_size`, a keyword of the `dict(...)` bound to `train_dataloader`, and
//! the accumulation `optim_wrapper.accumulative_counts` (mmengine's `OptimWrapper` takes it;
//! absent, 1). Either is set in the config the command names or in one of its `_base_` files
//! (paths relative to the file naming them; the naming file wins, as mmengine merges it over
//! its bases). Reads the chain as the job's user; writes nothing, runs nothing.
//!
//! A relaunch changes them with `key=N` words in the command's last `--cfg-options` list, or with a
//! `--cfg-options` added where there is none: mmengine's `DictAction` merges repeated lists, but
//! mmcv 1.x's kept only the last, so a second list would drop the user's own overrides there. The
//! files are left alone. Only the old-style configs are read (`_base_` lists, `dict(...)` calls); a
//! config of the new style (`with read_base():` imports) holds no `_base_` and is read for its own
//! keys only.

use std::ffi::OsString;
use std::path::Path;

use super::{script_args_start, Found};
use crate::guard::fsutil::{Once, ReadOnce};
use crate::guard::principal::as_user;
use crate::knobs::argv;
use crate::knobs::file::{py, Scalar};
use crate::knobs::reader::{KnobError, Request};
use crate::knobs::Place;

const BATCH_KEY: &str = "train_dataloader.batch_size";
const ACCUM_KEY: &str = "optim_wrapper.accumulative_counts";
const CFG_OPTIONS: &[&str] = &["--cfg-options", "--cfg_options"];

/// How many `_base_` files are read at most, over the whole tree.
const MAX_FILES: usize = 32;
/// How much text the tree's files hold at most, together: read as root for a job file's user,
/// a chain must not make oomguard hold more than a config could need.
const MAX_TOTAL_BYTES: u64 = 8 << 20;

const ENTRYPOINT: &str = "mmengine config";

/// A config chain, read: the files in the order a key is looked up (the named file first).
struct Chain {
    files: Vec<(String, String)>,
}

impl Chain {
    /// The config the script's first argument names (`configs/X.py`) and its `_base_` files;
    /// `None` where the first argument is no readable `.py` file.
    fn read(request: &Request) -> Option<(Chain, usize)> {
        let argv = request.command;
        let from = script_args_start(argv);
        let config = argv.get(from)?.to_str()?;
        if !config.ends_with(".py") || config.starts_with('-') {
            return None;
        }
        let mut files = Vec::new();
        let mut queue = vec![config.to_string()];
        // Each file once (a base named twice, or a loop of bases, adds nothing: the first place
        // it stands in the lookup order wins), and the tree's text bounded as a whole.
        let mut once = ReadOnce::default();
        let mut total_bytes = 0u64;
        while let Some(path) = queue.pop() {
            if files.len() >= MAX_FILES {
                break;
            }
            let full = request.cwd.join(&path);
            let text = match as_user(|| once.text(&full, MAX_TOTAL_BYTES - total_bytes)) {
                Ok(Once::New(text)) => text,
                Ok(Once::Again(_)) => continue,
                Ok(Once::TooLong) | Err(_) => {
                    if files.is_empty() {
                        return None;
                    }
                    continue;
                }
            };
            total_bytes += text.len() as u64;
            let dir = Path::new(&path)
                .parent()
                .unwrap_or(Path::new(""))
                .to_path_buf();
            // Looked up after this file, in their listed order.
            for base in bases(&text).into_iter().rev() {
                queue.push(dir.join(base).to_string_lossy().into_owned());
            }
            files.push((path, text.to_string()));
        }
        Some((Chain { files }, from))
    }

    /// The first file setting `key` to a whole number above 0, and the number; `Err` with what
    /// the first file setting it holds instead.
    fn count(&self, key: &str) -> Result<Option<(&str, u64)>, String> {
        for (path, text) in &self.files {
            match py::locate(text, key) {
                Ok(found) => {
                    return match found.value {
                        Scalar::Int(n) if n >= 1 => Ok(Some((path, n as u64))),
                        other => Err(format!(
                            "{key} in {path} is {other:?}, not a whole number above 0"
                        )),
                    }
                }
                Err(crate::knobs::file::EditError::NotFound { .. }) => {}
                Err(e) => return Err(format!("{path}: {e}")),
            }
        }
        Ok(None)
    }
}

/// The `_base_` paths of an old-style config: the strings of its top-level `_base_ = ...`
/// assignment (one string or a list of them), read as Python reads them, so a commented-out
/// base is none; none where the value is anything else.
fn bases(text: &str) -> Vec<String> {
    py::strings_assigned(text, "_base_").unwrap_or_default()
}

/// The `--cfg-options` list of the script's arguments: the index of the flag, and the index
/// right after its last value (where a word joins the list). The last one, which wins under
/// mmengine's merging `DictAction` and is the only one mmcv 1.x's kept.
fn cfg_options(argv: &[OsString], from: usize) -> Option<(usize, usize)> {
    let at = (from..argv.len())
        .rev()
        .find(|&i| argv[i].to_str().is_some_and(|t| CFG_OPTIONS.contains(&t)))?;
    let end = (at + 1..argv.len())
        .find(|&i| argv[i].to_str().is_none_or(|t| t.starts_with('-')))
        .unwrap_or(argv.len());
    Some((at, end))
}

/// Where a key absent from the command is added: inside the `--cfg-options` list, or with a
/// `--cfg-options` of its own at the end of the arguments (`with_flag`: this word opens it).
fn added(argv: &[OsString], from: usize, key: &str, with_flag: bool) -> argv::Place {
    match cfg_options(argv, from) {
        Some((_, end)) => argv::Place::Absent {
            name: key.to_string(),
            at: end,
        },
        None => argv::Place::Absent {
            name: if with_flag {
                format!("{} {key}", CFG_OPTIONS[0])
            } else {
                key.to_string()
            },
            at: argv.len(),
        },
    }
}

fn error(problem: String) -> KnobError {
    KnobError::Knob {
        where_: ENTRYPOINT.to_string(),
        problem,
    }
}

/// The batch and accumulation of a command whose first script argument is an mmengine config
/// setting `train_dataloader.batch_size` (itself or through `_base_`), with no batch in the
/// command; `None` where it is not one, or where the batch or the accumulation is no literal
/// (mmyolo's `batch_size=train_batch_size_per_gpu`): then a line in `notes` says so, and the
/// run goes on as with no batch found rather than override a value oomguard cannot read.
pub(super) fn find(request: &Request, notes: &mut Vec<String>) -> Result<Option<Found>, KnobError> {
    let Some((chain, from)) = Chain::read(request) else {
        return Ok(None);
    };
    let unread = |problem: String| {
        format!("{ENTRYPOINT}: {problem}; name the batch with --batch-arg and the accumulation with --accum-arg to move them")
    };
    let (file, batch) = match chain.count(BATCH_KEY) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(None),
        Err(problem) => {
            notes.push(unread(problem));
            return Ok(None);
        }
    };
    let argv = request.command;
    let (accum_place, accum, accum_note) = match accum_of(&chain, argv, from) {
        Ok(found) => found,
        Err(KnobError::Knob { problem, .. }) => {
            notes.push(unread(problem));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let batch_note = format!(
        "batch: `{BATCH_KEY}` in {file}, {batch}, changed with `{}` (the files are left alone)",
        word(argv, from, BATCH_KEY)
    );
    Ok(Some(Found {
        entrypoint: ENTRYPOINT,
        batch: (Place::Argv(added(argv, from, BATCH_KEY, true)), batch),
        accum: Some((Place::Argv(accum_place), Some(accum))),
        kept_by_job: false,
        no_accumulation: None,
        notes: vec![batch_note, accum_note],
    }))
}

/// The accumulation beside a batch the command already sets in its `--cfg-options`
/// (`train_dataloader.batch_size=4`): its place (added to that list), its value in the config
/// chain, and a note. `None` where the command is no mmengine config's or its batch flag is
/// another.
pub(in crate::knobs) fn partner(request: &Request) -> Option<(Place, u64, String)> {
    let argv = request.command;
    let (chain, from) = Chain::read(request)?;
    let (at, end) = cfg_options(argv, from)?;
    let batch_in_list = (at + 1..end).any(|i| {
        argv[i]
            .to_str()
            .is_some_and(|t| t.split_once('=').is_some_and(|(k, _)| k == BATCH_KEY))
    });
    if !batch_in_list {
        return None;
    }
    let (place, n, note) = accum_of(&chain, argv, from).ok()?;
    Some((Place::Argv(place), n, note))
}

/// The accumulation's place, value and note: the command's own `key=N`, else added to the list.
fn accum_of(
    chain: &Chain,
    argv: &[OsString],
    from: usize,
) -> Result<(argv::Place, u64, String), KnobError> {
    let place = match argv::locate_flag(argv, ACCUM_KEY, "--accum-arg") {
        Ok((place @ argv::Place::Flag { .. }, Some(raw))) => {
            let n =
                argv::parse_count(ACCUM_KEY, raw.as_ref(), 1).map_err(|e| error(e.to_string()))?;
            let note = format!("accumulation: `{ACCUM_KEY}` {n} in the command's --cfg-options");
            return Ok((place, n, note));
        }
        _ => added(argv, from, ACCUM_KEY, false),
    };
    let (n, note) = match chain.count(ACCUM_KEY).map_err(error)? {
        Some((file, n)) => (
            n,
            format!(
                "accumulation: `{ACCUM_KEY}` in {file}, {n}, changed with `{ACCUM_KEY}=N` in the same --cfg-options"
            ),
        ),
        None => (
            1,
            format!(
                "accumulation: `{ACCUM_KEY}` not set (mmengine's OptimWrapper default, 1), added as `{ACCUM_KEY}=N` in the same --cfg-options"
            ),
        ),
    };
    Ok((place, n, note))
}

/// How a key is written when it changes: inside the command's list, or with a new one.
fn word(argv: &[OsString], from: usize, key: &str) -> String {
    match cfg_options(argv, from) {
        Some(_) => format!("{key}=N in the command's --cfg-options"),
        None => format!("--cfg-options {key}=N"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

    #[test]
    fn bases_are_the_strings_of_the_base_assignment() {
        let table: &[(&str, &[&str])] = &[
            (
                "_base_ = [\n    '../_base_/models/faster-rcnn_r50_fpn.py',\n    \"../_base_/datasets/coco_detection.py\"\n]\nx = 'no'\n",
                &["../_base_/models/faster-rcnn_r50_fpn.py", "../_base_/datasets/coco_detection.py"],
            ),
            ("_base_ = './faster-rcnn_r50_fpn_1x_coco.py'\n", &["./faster-rcnn_r50_fpn_1x_coco.py"]),
            ("model = dict(_base_='x')\n", &[]),
            ("x = 1\n", &[]),
            // Read as Python reads it: a commented-out base, a bracket in a comment, the last
            // assignment of the name, one inside a block.
            (
                "_base_ = [\n    './a.py',  # the schedule: ]\n    # './old.py',\n    './b.py',\n]\n",
                &["./a.py", "./b.py"],
            ),
            ("_base_ = 'a.py'\n_base_ = ['b.py']\n", &["b.py"]),
            ("if True:\n    _base_ = 'a.py'\n", &[]),
            ("_base_ = []\n", &[]),
        ];
        for (text, want) in table {
            assert_eq!(bases(text), *want, "{text}");
        }
    }

    #[test]
    fn words_join_the_last_cfg_options_list() {
        let table: &[(&str, Option<(usize, usize)>)] = &[
            ("python tools/train.py c.py", None),
            (
                "python tools/train.py c.py --cfg-options a=1 b=2",
                Some((3, 6)),
            ),
            (
                "python tools/train.py c.py --cfg-options a=1 --amp",
                Some((3, 5)),
            ),
        ];
        for (cmd, want) in table {
            assert_eq!(cfg_options(&argv(cmd), 2), *want, "{cmd}");
        }
    }

    /// A base named twice, or bases that name each other, are read once: the key is still found
    /// where mmengine's merge puts it, and the chain holds each file once.
    #[test]
    fn a_base_named_again_or_in_a_loop_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("c.py", "_base_ = ['a.py', 'b.py', 'a.py', 'c.py']\n");
        write(
            "a.py",
            "_base_ = 'b.py'\ntrain_dataloader = dict(batch_size=4)\n",
        );
        write(
            "b.py",
            "_base_ = ['a.py']\noptim_wrapper = dict(accumulative_counts=2)\n",
        );
        let command = argv("python tools/train.py c.py");
        let request = Request::plain(&command, dir.path());
        let (chain, _) = Chain::read(&request).expect("the config is read");
        let names: Vec<&str> = chain.files.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(names, ["c.py", "a.py", "b.py"]);
        assert_eq!(chain.count(BATCH_KEY), Ok(Some(("a.py", 4))));
        assert_eq!(chain.count(ACCUM_KEY), Ok(Some(("b.py", 2))));
    }
}
