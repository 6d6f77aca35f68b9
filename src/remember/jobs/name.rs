//! Which job a run belongs to and where its memory lives ([`JobSettings`]): `--name`, checked
//! as a plain file name ([`check_name`]), or a name derived from the command with its knob
//! values blanked ([`command_shape`]) and the working directory ([`derive_name`]). It reads and
//! writes no job file: that is [`super::store`]'s.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::guard::fsutil::{file_safe, Fnv64};
use crate::knobs::{argv, KnobSet, Place, Value};

/// The longest `--name`.
pub const NAME_MAX_LEN: usize = 100;

/// What a run knows of its job before it starts: built from the command line by
/// `settings::from_args`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// `--name`, or derived from the command and the working directory.
    pub name: String,
    /// The base of job memory (`--state-dir`, else `$XDG_STATE_HOME/oomguard`); files go in
    /// its `jobs/`. `None` without any (no HOME): the job is not remembered.
    pub state_dir: Option<PathBuf>,
    /// Whether `state_dir` was chosen by a job file its user could write: then a root oomguard
    /// acting for that user keeps the job memory as the user ([`crate::guard::principal`]). Set by
    /// the caller; the default place, and one root chose, are oomguard's own.
    pub state_dir_is_users: bool,
    /// `--fresh`: the first attempt takes the command's values.
    pub fresh: bool,
    /// The command with the knob values blanked (as the name is derived from it), for people
    /// reading the file.
    pub command: Vec<String>,
    /// The canonical working directory.
    pub cwd: PathBuf,
    /// The name an older build kept this job under, read once when `name` has no file yet (see
    /// [`crate::front::settings::from_args::legacy_user_prefix`]); set by the caller.
    pub legacy_name: Option<String>,
}

impl JobSettings {
    /// Checks `--name` (a file name: see [`check_name`]) or derives one, and settles the state
    /// directory. `cwd` is canonicalized here, so a symlinked path to the project is one job.
    pub fn new(
        name: Option<String>,
        state_dir: Option<PathBuf>,
        fresh: bool,
        command: &[OsString],
        knobs: &KnobSet,
        cwd: &Path,
    ) -> Result<JobSettings, String> {
        let cwd = fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
        let shape = command_shape(command, knobs);
        let name = match name {
            Some(name) => {
                check_name(&name)?;
                name
            }
            None => derive_name(&shape, &cwd),
        };
        let state_dir = match state_dir {
            Some(dir) => Some(std::path::absolute(&dir).map_err(|e| {
                format!("--state-dir {}: {e}: give a directory path", dir.display())
            })?),
            None => crate::remember::record::run_dir::state_dir(),
        };
        Ok(JobSettings {
            name,
            state_dir,
            state_dir_is_users: false,
            fresh,
            command: shape
                .iter()
                .map(|t| t.to_string_lossy().into_owned())
                .collect(),
            cwd,
            legacy_name: None,
        })
    }
}

/// A job name must be a plain file name: letters, digits, `.`, `_`, `-`, not starting with `.`
/// (no hidden files, no `..`), at most [`NAME_MAX_LEN`] bytes.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX_LEN
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--name {name:?} is not usable as a file name: use letters, digits, '.', '_' and '-' \
             (at most {NAME_MAX_LEN}, not starting with '.')"
        ))
    }
}

/// The command as a job is known by: every argv knob's value replaced by `<NAME>`, and switch
/// knobs removed (their presence is their value). Environment and file knobs are not in argv.
pub fn command_shape(command: &[OsString], knobs: &KnobSet) -> Vec<OsString> {
    let mut edits = Vec::new();
    for knob in &knobs.knobs {
        let Place::Argv(place) = &knob.place else {
            continue;
        };
        match place {
            argv::Place::Flag { .. } => {
                place.edits(command, &Value::Str(format!("<{}>", knob.name)), &mut edits)
            }
            argv::Place::Switch { .. } => place.edits(command, &Value::Bool(false), &mut edits),
            // Not in the command: nothing to blank.
            argv::Place::Absent { .. } => {}
        }
    }
    argv::apply_edits(command, &edits)
}

/// `situation_job-1f0c9a2b3d4e5f60`: a readable stem (the script, module or program) and a
/// hash of the command's shape and the working directory. The hash is FNV-1a, written out
/// here because it must not change between builds (std's hasher may).
pub fn derive_name(shape: &[OsString], cwd: &Path) -> String {
    let mut hash = Fnv64::new();
    hash.write(b"oomguard-job-1\0");
    hash.write_len_prefixed(cwd.as_os_str().as_bytes());
    for token in shape {
        hash.write_len_prefixed(token.as_bytes());
    }
    format!("{}-{:016x}", stem(shape), hash.0)
}

/// The part of a command a person recognises: the first `.py`/`.sh` script, the module after
/// `-m`, else the program's file name.
fn stem(shape: &[OsString]) -> String {
    let text: Vec<String> = shape
        .iter()
        .map(|t| t.to_string_lossy().into_owned())
        .collect();
    let script = text
        .iter()
        .skip(1)
        .find(|t| !t.starts_with('-') && (t.ends_with(".py") || t.ends_with(".sh")))
        .map(|t| {
            Path::new(t)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
    let module = text.windows(2).find(|w| w[0] == "-m").map(|w| w[1].clone());
    let program = text.first().map(|p| {
        Path::new(p)
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let raw = script.or(module).or(program).unwrap_or_default();
    let clean = file_safe(&raw, &['.', '_', '-']);
    let clean = clean.trim_start_matches('.');
    if clean.is_empty() {
        "job".to_string()
    } else {
        clean.to_string()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::knobs::resolve::{resolve, Request};
    use crate::test_util::argv;

    pub(crate) fn knobs_of(command: &[OsString], min_batch: u64) -> KnobSet {
        resolve(&Request {
            command,
            batch_arg: None,
            accum_arg: None,
            min_batch,
            cwd: Path::new("/"),
            path_var: None,
            finish_left_patches: false,
        })
        .expect("the command's knobs resolve")
    }

    fn shape(s: &str) -> String {
        let command = argv(s);
        let knobs = knobs_of(&command, 1);
        command_shape(&command, &knobs)
            .iter()
            .map(|t| t.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn the_shape_blanks_knob_values_only() {
        let table = [
            (
                "python train.py --batch_size 8 --grad_accum=2 --lr 3e-4",
                "python train.py --batch_size <batch> --grad_accum=<accum> --lr 3e-4",
            ),
            (
                "python train.py data.batch_size=32 --num_workers 8",
                "python train.py data.batch_size=<batch> --num_workers <workers>",
            ),
            // Given twice, both occurrences are blanked (both are rewritten on relaunch).
            (
                "python t.py --bs 4 --bs 6",
                "python t.py --bs <batch> --bs <batch>",
            ),
            ("python t.py --epochs 3", "python t.py --epochs 3"),
        ];
        for (command, want) in table {
            assert_eq!(shape(command), want, "{command}");
        }
    }

    #[test]
    fn a_job_is_its_command_without_knob_values_and_its_directory() {
        let name = |command: &str, cwd: &str| {
            let command = argv(command);
            let knobs = knobs_of(&command, 1);
            derive_name(&command_shape(&command, &knobs), Path::new(cwd))
        };
        let base = name("python train.py --batch_size 8 --grad_accum 1", "/p");
        assert!(base.starts_with("train-"), "{base}");
        assert_eq!(base.len(), "train-".len() + 16, "{base}");
        check_name(&base).expect("a derived name is a valid name");
        // Same job: other knob values.
        assert_eq!(
            name("python train.py --batch_size 64 --grad_accum 4", "/p"),
            base
        );
        // Other jobs: other flags, another directory, another script.
        for (command, cwd) in [
            (
                "python train.py --batch_size 8 --grad_accum 1 --epochs 2",
                "/p",
            ),
            ("python train.py --batch_size 8 --grad_accum 1", "/q"),
            ("python eval.py --batch_size 8 --grad_accum 1", "/p"),
        ] {
            assert_ne!(name(command, cwd), base, "{command} in {cwd}");
        }
        // Stems: a module, a bare program, characters no file name should carry.
        assert!(name("python -m pkg.train --bs 8", "/p").starts_with("pkg.train-"));
        assert!(name("/opt/bin/trainer --bs 8", "/p").starts_with("trainer-"));
        assert!(name("./.hidden run", "/p").starts_with("hidden-"));
        // Stable across builds: a fixed input has a fixed name.
        assert_eq!(
            derive_name(&argv("python t.py"), Path::new("/p")),
            derive_name(&argv("python t.py"), Path::new("/p"))
        );
    }

    #[test]
    fn names_must_be_file_names() {
        for good in ["nightly", "bert-large_v2.1", "a"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let long = "x".repeat(NAME_MAX_LEN + 1);
        for bad in ["", ".", "..", ".hidden", "a/b", "a b", "é", long.as_str()] {
            let err = check_name(bad).unwrap_err();
            assert!(err.starts_with("--name "), "{bad}: {err}");
            assert!(err.contains("letters, digits"), "{bad}: {err}");
        }
    }
}
