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
//!
//! The steps, a file each: [`command_line`] (what the command says to Hydra),
//! [`decorator`](mod@decorator) (the script's `@hydra.main` and the search path), [`tree`] (a
//! config as a tree and its merge), [`defaults`] (a defaults list and packages), [`compose`]
//! (the composition), [`pick`](mod@pick) (the batch and accumulation in the result).

use std::ffi::OsString;
use std::io;
use std::path::Path;

use super::Found;
use crate::knobs::reader::{KnobError, Reader, Request};

mod command_line;
mod compose;
mod decorator;
mod defaults;
mod pick;
mod tree;

use command_line::CommandLine;
use compose::{Composer, Stop};
use decorator::{decorator, search_path, Arg};
use pick::pick;

/// The entrypoint's name in notes and `--dry-run`.
const NAME: &str = "Hydra";

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

/// Runs `work` as the job's user: the script and its configs are theirs to read, not root's.
fn as_user<T>(work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    crate::guard::principal::as_user(work)
}

/// An argv token as a path, whatever its bytes.
fn os_path(token: &OsString) -> &Path {
    Path::new(token.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::argv;
    use crate::knobs::Place;
    use crate::test_util::argv;
    use std::path::PathBuf;

    /// The fixture project `name` under tests/fixtures/hydra.
    pub(super) fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hydra")
            .join(name)
    }

    /// Runs [`find`] over a fixture project with `command` (words; run in the fixture dir).
    pub(super) fn found(project: &str, command: &str) -> Result<Option<Found>, KnobError> {
        let cwd = fixture(project);
        let command = argv(command);
        let request = Request::plain(&command, &cwd);
        find_in(&request)
    }

    /// The place of an override `name` the command lacks, added at argv index `at`.
    pub(super) fn absent(name: &str, at: usize) -> Place {
        Place::Argv(argv::Place::Absent {
            name: name.into(),
            at,
        })
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
}
