//! Finds the batch-size and gradient-accumulation knobs in a job's argv and writes new values
//! into a copy of it. Pure: no I/O, no process knowledge; the policy decides the numbers.
//!
//! Flags are recognised as `--flag N`, `--flag=N`, and Hydra/OmegaConf overrides
//! (`data.batch_size=N`, `+trainer.accumulate_grad_batches=N`). A flag given several times is
//! read from its last occurrence (argparse's rule) and every occurrence is rewritten, so the job
//! sees one consistent value.

use std::fmt;

/// Batch flags recognised without configuration, most specific first: when a command carries
/// both `--batch_size 64` and `--microbatch 16` (guided-diffusion's convention), the per-step
/// size is the one that decides memory.
pub const BATCH_FLAGS: &[&str] = &[
    "--micro_batch_size",
    "--microbatch",
    "--per_device_train_batch_size",
    "--train_batch_size",
    "--batch_size",
    "--batch-size",
    "--bs",
];

/// Accumulation flags recognised without configuration.
pub const ACCUM_FLAGS: &[&str] = &[
    "--gradient_accumulation_steps",
    "--gradient-accumulation-steps",
    "--grad_accum",
    "--grad-accum",
    "--accumulate_grad_batches",
    "--accumulation_steps",
];

/// Hydra key suffixes recognised without configuration (`model.data.batch_size=32`).
const HYDRA_BATCH_SUFFIX: &str = "batch_size";
const HYDRA_ACCUM_SUFFIXES: &[&str] = &["accumulate_grad_batches", "gradient_accumulation_steps"];

/// Flags whose presence beside a batch flag means the job itself splits an effective batch into
/// steps (guided-diffusion: `--batch_size` is effective, `--microbatch` the step).
const SPLITS_EFFECTIVE_BATCH: &[(&str, &str)] = &[("--microbatch", "--batch_size")];

/// Where one occurrence of a flag's value sits in argv.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Site {
    /// `--flag N`: the value is the token at this index.
    Separate(usize),
    /// `--flag=N` or `key=N`: the token at this index, value after the first `=`.
    Joined(usize),
}

/// A knob found in the command: its name, where it sits, and its current (last) value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    /// The name as written in the command (`--batch_size`, `data.batch_size`).
    pub name: String,
    /// The value argparse would see: the last occurrence's.
    pub value: u64,
    sites: Vec<Site>,
}

/// How the accumulation knob relates to the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accum {
    /// In the command already.
    Present(Knob),
    /// Named with `--accum-arg` but absent: appended on relaunch, starting from 1.
    Appended { name: String },
    /// The job keeps the effective batch itself (`--batch_size` beside `--microbatch`).
    KeptByJob { effective_flag: String },
    /// No way to keep the effective batch: it shrinks with the batch.
    None,
}

/// The knobs oomguard turns for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knobs {
    /// The batch flag; `None` when the command has none (OOM deaths then cannot be relaunched smaller).
    pub batch: Option<Knob>,
    pub accum: Accum,
}

impl Knobs {
    /// The accumulation value in the original command, where there is one.
    pub fn accum_value(&self) -> Option<u64> {
        match &self.accum {
            Accum::Present(knob) => Some(knob.value),
            Accum::Appended { .. } => Some(1),
            Accum::KeptByJob { .. } | Accum::None => None,
        }
    }
}

/// Why a command's knobs could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("batch flag {name} is not in the command: add it (e.g. `{name} 8`) or name another with --batch-arg")]
    BatchFlagMissing { name: String },
    #[error("{name} has no value: write `{name} N` or `{name}=N`")]
    NoValue { name: String },
    #[error("{name} value `{value}` is not a whole number above 0: oomguard can only halve an integer batch")]
    NotAnInteger { name: String, value: String },
}

/// Finds the batch and accumulation knobs. `batch_arg` / `accum_arg` name them explicitly
/// (`--batch-arg`, `--accum-arg`); otherwise the known names are searched.
pub fn locate(
    argv: &[String],
    batch_arg: Option<&str>,
    accum_arg: Option<&str>,
) -> Result<Knobs, RewriteError> {
    let batch = match batch_arg {
        Some(name) => Some(
            find(argv, name)?.ok_or_else(|| RewriteError::BatchFlagMissing {
                name: name.to_string(),
            })?,
        ),
        None => find_first_usable(argv, BATCH_FLAGS, HYDRA_BATCH_SUFFIX)?,
    };
    let accum = match accum_arg {
        Some(name) => match find(argv, name)? {
            Some(knob) => Accum::Present(knob),
            None => Accum::Appended {
                name: name.to_string(),
            },
        },
        None => {
            let mut found = None;
            for suffix in HYDRA_ACCUM_SUFFIXES {
                if found.is_none() {
                    found = find_first_usable(argv, ACCUM_FLAGS, suffix)?;
                }
            }
            match (found, &batch) {
                (Some(knob), _) => Accum::Present(knob),
                (None, Some(b)) => kept_by_job(argv, &b.name).unwrap_or(Accum::None),
                (None, None) => Accum::None,
            }
        }
    };
    Ok(Knobs { batch, accum })
}

fn kept_by_job(argv: &[String], batch_name: &str) -> Option<Accum> {
    SPLITS_EFFECTIVE_BATCH
        .iter()
        .find(|(step, effective)| {
            *step == batch_name && matches!(find(argv, effective), Ok(Some(_)))
        })
        .map(|(_, effective)| Accum::KeptByJob {
            effective_flag: effective.to_string(),
        })
}

/// The first known flag present with a positive integer value. A known flag with an unusable
/// value (guided-diffusion's `--microbatch -1` means "off") is skipped in favour of the next;
/// if no flag is usable, the first one found reports its error.
fn find_first_usable(
    argv: &[String],
    flags: &[&str],
    hydra_suffix: &str,
) -> Result<Option<Knob>, RewriteError> {
    let mut first_error = None;
    let hydra = hydra_keys(argv, hydra_suffix);
    let names = flags.iter().map(|s| s.to_string()).chain(hydra);
    for name in names {
        match find(argv, &name) {
            Ok(Some(knob)) => return Ok(Some(knob)),
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// Hydra override keys in argv whose last dotted component ends with `suffix`.
fn hydra_keys(argv: &[String], suffix: &str) -> Vec<String> {
    let mut keys: Vec<String> = argv
        .iter()
        .filter(|t| !t.starts_with('-'))
        .filter_map(|t| t.split_once('=').map(|(k, _)| k))
        .filter(|k| {
            let key = k.trim_start_matches(['+', '~']);
            let last = key.rsplit('.').next().unwrap_or(key);
            !key.is_empty()
                && last.ends_with(suffix)
                && key
                    .chars()
                    .all(|c| c.is_alphanumeric() || "._-".contains(c))
        })
        .map(str::to_string)
        .collect();
    keys.dedup();
    keys
}

/// Finds every occurrence of `name` in argv. `Ok(None)` when absent.
fn find(argv: &[String], name: &str) -> Result<Option<Knob>, RewriteError> {
    let is_hydra = !name.starts_with('-');
    let bare = name.trim_start_matches(['+', '~']);
    let mut sites = Vec::new();
    let mut last_value: Option<&str> = None;
    // Skip argv[0]: the program itself is never a flag.
    let mut i = 1;
    while i < argv.len() {
        let token = &argv[i];
        if !is_hydra && token == name {
            let value = argv.get(i + 1).ok_or_else(|| RewriteError::NoValue {
                name: name.to_string(),
            })?;
            sites.push(Site::Separate(i + 1));
            last_value = Some(value);
            i += 2;
            continue;
        }
        if let Some((key, value)) = token.split_once('=') {
            let matches = if is_hydra {
                !token.starts_with('-') && key.trim_start_matches(['+', '~']) == bare
            } else {
                key == name
            };
            if matches {
                sites.push(Site::Joined(i));
                last_value = Some(value);
            }
        }
        i += 1;
    }
    let Some(raw) = last_value else {
        return Ok(None);
    };
    let value =
        raw.parse::<u64>()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| RewriteError::NotAnInteger {
                name: name.to_string(),
                value: raw.to_string(),
            })?;
    Ok(Some(Knob {
        name: name.to_string(),
        value,
        sites,
    }))
}

/// The command for one attempt: the original argv with the batch and accumulation values set.
/// `accum` is ignored where the command has no accumulation knob.
pub fn apply(argv: &[String], knobs: &Knobs, batch: u64, accum: Option<u64>) -> Vec<String> {
    let mut out = argv.to_vec();
    if let Some(knob) = &knobs.batch {
        set(&mut out, knob, batch);
    }
    match (&knobs.accum, accum) {
        (Accum::Present(knob), Some(value)) => set(&mut out, knob, value),
        (Accum::Appended { name }, Some(value)) if value != 1 => {
            if name.starts_with('-') {
                out.push(name.clone());
                out.push(value.to_string());
            } else {
                out.push(format!("{name}={value}"));
            }
        }
        _ => {}
    }
    out
}

fn set(argv: &mut [String], knob: &Knob, value: u64) {
    for site in &knob.sites {
        match *site {
            Site::Separate(i) => argv[i] = value.to_string(),
            Site::Joined(i) => {
                let key = argv[i]
                    .split_once('=')
                    .map(|(k, _)| k.to_string())
                    .expect("a joined site holds `key=value`");
                argv[i] = format!("{key}={value}");
            }
        }
    }
}

/// A one-line description of what changed between two commands, for the relaunch line:
/// `--batch_size 8→4, --gradient_accumulation_steps 1→2`.
pub struct Changes<'a> {
    pub knobs: &'a Knobs,
    pub from: (u64, Option<u64>),
    pub to: (u64, Option<u64>),
}

impl fmt::Display for Changes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(knob) = &self.knobs.batch {
            if self.from.0 != self.to.0 {
                parts.push(format!("{} {}→{}", knob.name, self.from.0, self.to.0));
            }
        }
        let accum_name = match &self.knobs.accum {
            Accum::Present(k) => Some(k.name.as_str()),
            Accum::Appended { name } => Some(name.as_str()),
            Accum::KeptByJob { .. } | Accum::None => None,
        };
        if let (Some(name), Some(a), Some(b)) = (accum_name, self.from.1, self.to.1) {
            if a != b {
                parts.push(format!("{name} {a}→{b}"));
            }
        }
        if parts.is_empty() {
            write!(f, "unchanged")
        } else {
            write!(f, "{}", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn locates_known_flags_in_both_forms() {
        // (command, batch name, batch value, accum name or "", accum value)
        let table: &[(&str, &str, u64, &str, u64)] = &[
            ("python t.py --batch_size 8", "--batch_size", 8, "", 0),
            ("python t.py --batch-size=64 --gradient_accumulation_steps 1", "--batch-size", 64, "--gradient_accumulation_steps", 1),
            ("python t.py --bs 4 --grad_accum=2", "--bs", 4, "--grad_accum", 2),
            ("torchrun --nproc_per_node 2 t.py --per_device_train_batch_size 16 --gradient-accumulation-steps 4", "--per_device_train_batch_size", 16, "--gradient-accumulation-steps", 4),
            ("python t.py --train_batch_size 32 --accumulation_steps 3", "--train_batch_size", 32, "--accumulation_steps", 3),
            ("python t.py --micro_batch_size 2 --accumulate_grad_batches 8", "--micro_batch_size", 2, "--accumulate_grad_batches", 8),
            ("python train.py data.batch_size=32 trainer.accumulate_grad_batches=2", "data.batch_size", 32, "trainer.accumulate_grad_batches", 2),
            ("python train.py +model.train_batch_size=12", "+model.train_batch_size", 12, "", 0),
            ("python t.py --grad-accum 2 --batch_size 8 --batch_size 6", "--batch_size", 6, "--grad-accum", 2),
        ];
        for &(cmd, bname, bval, aname, aval) in table {
            let knobs = locate(&argv(cmd), None, None).unwrap();
            let batch = knobs.batch.as_ref().unwrap();
            assert_eq!((batch.name.as_str(), batch.value), (bname, bval), "{cmd}");
            match &knobs.accum {
                Accum::Present(k) => assert_eq!((k.name.as_str(), k.value), (aname, aval), "{cmd}"),
                other => assert_eq!(aname, "", "{cmd}: {other:?}"),
            }
        }
    }

    #[test]
    fn microbatch_beside_batch_size_is_the_step_and_the_job_keeps_the_effective_batch() {
        let knobs = locate(
            &argv("python cell_train.py --batch_size 64 --microbatch 16 --use_fp16"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(knobs.batch.as_ref().unwrap().name, "--microbatch");
        assert_eq!(
            knobs.accum,
            Accum::KeptByJob {
                effective_flag: "--batch_size".into()
            }
        );
        // `--microbatch -1` means "off": the batch size is then the knob.
        let knobs = locate(
            &argv("python cell_train.py --batch_size 64 --microbatch -1"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(knobs.batch.as_ref().unwrap().name, "--batch_size");
    }

    #[test]
    fn explicit_names_and_errors() {
        let cmd = argv("python t.py --n 8");
        let knobs = locate(&cmd, Some("--n"), Some("--accum")).unwrap();
        assert_eq!(knobs.batch.as_ref().unwrap().value, 8);
        assert_eq!(
            knobs.accum,
            Accum::Appended {
                name: "--accum".into()
            }
        );
        assert_eq!(
            apply(&cmd, &knobs, 4, Some(2)),
            argv("python t.py --n 4 --accum 2")
        );

        let table: &[(&str, Option<&str>, RewriteError)] = &[
            (
                "python t.py --batch_size 8",
                Some("--bsz"),
                RewriteError::BatchFlagMissing {
                    name: "--bsz".into(),
                },
            ),
            (
                "python t.py --batch_size",
                None,
                RewriteError::NoValue {
                    name: "--batch_size".into(),
                },
            ),
            (
                "python t.py --batch_size eight",
                None,
                RewriteError::NotAnInteger {
                    name: "--batch_size".into(),
                    value: "eight".into(),
                },
            ),
            (
                "python t.py --batch_size=0",
                None,
                RewriteError::NotAnInteger {
                    name: "--batch_size".into(),
                    value: "0".into(),
                },
            ),
            (
                "python t.py --batch_size 2.5",
                None,
                RewriteError::NotAnInteger {
                    name: "--batch_size".into(),
                    value: "2.5".into(),
                },
            ),
        ];
        for (cmd, name, want) in table {
            assert_eq!(locate(&argv(cmd), *name, None).unwrap_err(), *want, "{cmd}");
        }
    }

    #[test]
    fn no_batch_flag_is_not_an_error() {
        let knobs = locate(&argv("python train.py --lr 3e-4"), None, None).unwrap();
        assert_eq!(knobs.batch, None);
        // argv[0] is never read as a flag.
        let knobs = locate(&argv("--batch_size 3"), None, None).unwrap();
        assert_eq!(knobs.batch, None);
    }

    #[test]
    fn apply_rewrites_every_occurrence_and_keeps_everything_else() {
        let table: &[(&str, u64, Option<u64>, &str)] = &[
            (
                "python t.py --batch_size 8 --lr 1",
                4,
                None,
                "python t.py --batch_size 4 --lr 1",
            ),
            (
                "python t.py --batch-size=64 --gradient_accumulation_steps 1",
                32,
                Some(2),
                "python t.py --batch-size=32 --gradient_accumulation_steps 2",
            ),
            (
                "python t.py --bs 8 --bs=8",
                2,
                None,
                "python t.py --bs 2 --bs=2",
            ),
            (
                "python t.py +data.batch_size=32 trainer.accumulate_grad_batches=1",
                16,
                Some(2),
                "python t.py +data.batch_size=16 trainer.accumulate_grad_batches=2",
            ),
        ];
        for &(cmd, b, a, want) in table {
            let knobs = locate(&argv(cmd), None, None).unwrap();
            assert_eq!(apply(&argv(cmd), &knobs, b, a), argv(want), "{cmd}");
        }
        let cmd = argv("python t.py trainer.batch_size=8");
        let knobs = locate(&cmd, None, Some("trainer.accumulate_grad_batches")).unwrap();
        assert_eq!(
            apply(&cmd, &knobs, 4, Some(2)),
            argv("python t.py trainer.batch_size=4 trainer.accumulate_grad_batches=2")
        );
    }

    #[test]
    fn changes_line() {
        let knobs = locate(
            &argv("python t.py --batch_size 8 --grad_accum 1"),
            None,
            None,
        )
        .unwrap();
        let line = Changes {
            knobs: &knobs,
            from: (8, Some(1)),
            to: (4, Some(2)),
        }
        .to_string();
        assert_eq!(line, "--batch_size 8→4, --grad_accum 1→2");
        let line = Changes {
            knobs: &knobs,
            from: (8, Some(1)),
            to: (8, Some(1)),
        }
        .to_string();
        assert_eq!(line, "unchanged");
    }
}
