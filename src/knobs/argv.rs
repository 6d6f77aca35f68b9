//! Finds the batch-size and gradient-accumulation knobs in a job's argv and writes new values
//! into a copy of it. Pure: no I/O, no process knowledge; the policy decides the numbers.
//!
//! Flags are recognised as `--flag N`, `--flag=N`, and Hydra/OmegaConf overrides
//! (`data.batch_size=N`, `+trainer.accumulate_grad_batches=N`). A flag given several times is
//! read from its last occurrence (argparse's rule) and, once its value changes, every occurrence
//! is rewritten so the job sees one consistent value; at the original sizes the argv is returned
//! exactly as given.
//!
//! A command can hold several programs' arguments, separated by standalone `--` tokens
//! (`uv run -- python train.py --batch_size 8`, a launcher and its worker). Those are the
//! command's *parts*: part 1 is before the first `--`, part 2 after it, and so on. A knob is
//! searched within each part; a name found in two parts is ambiguous and must be picked with
//! `NAME@N` (the occurrence in part N). Only the chosen part's tokens are ever rewritten.
//!
//! Only the script's own arguments are searched: a launcher in front of it (`torchrun`,
//! `accelerate launch`, `srun`, `uv run`, ...: [`mod@launch`]) keeps its options, which are never
//! read nor rewritten, and the parts are cut to begin at the script's first argument.
//!
//! LightningCLI's (jsonargparse's) dotted flags are knobs too (`--data.batch_size 256`,
//! `--data.init_args.batch_size=256`, `--trainer.accumulate_grad_batches 2`); a LightningCLI
//! command without the accumulation flag gets it added once the batch moves.
//!
//! A flag oomguard adds beside a batch flag written `--batch_size=32` is written the same way,
//! as one `--flag=N` token ([`Place::absent_joined`]): nanoGPT's configurator takes no other
//! form, and argparse takes both.
//!
//! argv is bytes on Linux: tokens that are not UTF-8 are never knobs and pass through untouched.

use std::ffi::{OsStr, OsString};
use std::ops::Range;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use crate::knobs::Value;

pub mod declared;
mod launch;

pub use declared::Declared;
pub use launch::launch;

/// Batch flags recognised without configuration, most specific first: when a command carries
/// both `--batch_size 64` and `--microbatch 16` (guided-diffusion's convention), the per-step
/// size is the one that decides memory.
pub const BATCH_FLAGS: &[&str] = &[
    "--micro_batch_size",
    "--micro-batch-size",
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
    "--grad-accum-steps",
    "--grad_accum_steps",
    "--accum-freq",
    "--accum_freq",
    "--update-freq",
];

/// Hydra key suffixes recognised without configuration (`model.data.batch_size=32`).
const HYDRA_BATCH_SUFFIX: &str = "batch_size";
const HYDRA_ACCUM_SUFFIXES: &[&str] = &["accumulate_grad_batches", "gradient_accumulation_steps"];

/// LightningCLI's accumulation, added to a LightningCLI command that lacks it.
pub const LIGHTNING_ACCUM: &str = "--trainer.accumulate_grad_batches";

/// LightningCLI's subcommands: one right after the script marks a LightningCLI command.
pub const LIGHTNING_SUBCOMMANDS: &[&str] = &["fit", "validate", "test", "predict"];

/// jsonargparse groups of a LightningCLI command's dotted flags.
const LIGHTNING_GROUPS: &[&str] = &["--trainer.", "--data.", "--model."];

/// The flag or key that, present beside the step batch `step`, means the job itself splits an
/// effective batch into steps, so the accumulation is derived and the step moves alone:
/// guided-diffusion's `--batch_size` beside `--microbatch`; a global batch beside a micro batch
/// of the same spelling and prefix (Megatron-LM's `--global-batch-size` beside
/// `--micro-batch-size`, litgpt's `--train.global_batch_size` beside
/// `--train.micro_batch_size`: both derive the accumulation as global ÷ (micro × replicas)).
fn effective_flag_of(step: &str) -> Option<String> {
    if step == "--microbatch" {
        return Some("--batch_size".to_string());
    }
    ["micro_batch_size", "micro-batch-size"]
        .iter()
        .find(|micro| step.ends_with(*micro))
        .map(|micro| format!("{}global{}", &step[..step.len() - micro.len()], &micro[5..]))
}

/// Whether a batch name is a job's global (effective) batch, split into micro batches by the
/// job: not a per-step batch, so never a knob found by its suffix.
fn is_global_batch(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    last.starts_with("global")
}

/// A yacs (detectron2, fvcore `CfgNode`) key as its command line writes it: upper-case dotted
/// words (`SOLVER.IMS_PER_BATCH`), given as a `KEY VALUE` pair of words after the flags
/// (argparse's `opts`, `nargs=REMAINDER`), never `KEY=VALUE`.
pub fn is_pair_key(name: &str) -> bool {
    name.contains('.')
        && name.bytes().any(|b| b.is_ascii_uppercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
        && !name.starts_with('.')
        && !name.ends_with('.')
}

/// Where one occurrence of a flag's value sits in argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Site {
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
    /// The value argparse would see: the last occurrence's in its part.
    pub value: u64,
    /// The part of the command it was found in (1 = before the first standalone `--`).
    pub part: usize,
    pub sites: Vec<Site>,
}

/// How the accumulation knob relates to the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accum {
    /// In the command already.
    Present(Knob),
    /// Named with `--accum-arg` but absent: inserted on relaunch at argv index `at` (the end of
    /// the part it belongs to), starting from 1. `joined`: as one `--flag=N` token, because the
    /// batch flag is written so (`--batch_size=32`): a job that takes only that form (nanoGPT's
    /// configurator) refuses `--flag N`, and one that takes both takes this one too.
    Appended {
        name: String,
        at: usize,
        joined: bool,
        /// The value the job runs with while the flag is absent, where known (the default the
        /// script's parser declares); `None`: 1.
        from: Option<u64>,
    },
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
    /// Other known batch names present in the command that were not chosen, best first.
    pub batch_also: Vec<String>,
    /// Other known accumulation names present in the command that were not chosen.
    pub accum_also: Vec<String>,
    /// The script's arguments are LightningCLI's ([`is_lightning_cli`]).
    pub lightning: bool,
    /// Why an accumulation absent from the command is added beside the batch (the script's
    /// parser declares it, or the Trainer always takes it): one line for the user.
    pub partner_note: Option<String>,
}

impl Knobs {
    /// The accumulation value in the original command, where there is one.
    #[cfg(test)]
    pub fn accum_value(&self) -> Option<u64> {
        match &self.accum {
            Accum::Present(knob) => Some(knob.value),
            Accum::Appended { from, .. } => Some(from.unwrap_or(1)),
            Accum::KeptByJob { .. } | Accum::None => None,
        }
    }

    /// Lines telling the user which knob was chosen where the choice was not obvious (several
    /// candidates, or only an evaluation batch), and how to pick another. Empty otherwise.
    pub fn choice_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let batch_name = self.batch.as_ref().map(|k| k.name.as_str());
        let accum_name = match &self.accum {
            Accum::Present(k) => Some(k.name.as_str()),
            _ => None,
        };
        for (role, name, also, flag) in [
            ("batch", batch_name, &self.batch_also, "--batch-arg"),
            ("accumulation", accum_name, &self.accum_also, "--accum-arg"),
        ] {
            let Some(name) = name else { continue };
            if !also.is_empty() {
                notes.push(format!(
                    "{role} knob {name} (also found: {}; pick another with {flag})",
                    also.join(", ")
                ));
            } else if is_eval_like(name) {
                notes.push(format!(
                    "{role} knob {name} looks like an evaluation setting, the only one found: \
                     name the training one with {flag}"
                ));
            }
        }
        notes.extend(self.partner_note.clone());
        // Why only the step's batch moves and no line says the effective batch shrinks.
        if let (Some(batch), Accum::KeptByJob { effective_flag }) = (&self.batch, &self.accum) {
            notes.push(format!(
                "batch {} {}: the job derives its accumulation from {effective_flag} ÷ this batch, so it moves alone and the effective batch is kept",
                batch.name, batch.value
            ));
        }
        notes
    }

    /// For a LightningCLI command whose accumulation oomguard adds: the line naming the batch
    /// and the accumulation flag, with the value its `--config` files set where they do.
    pub fn lightning_note(&self, configured: Option<u64>) -> Option<String> {
        let (Some(batch), Accum::Appended { name, .. }, true) =
            (&self.batch, &self.accum, self.lightning)
        else {
            return None;
        };
        let accum = match configured {
            Some(n) => format!("{n} in its --config, added to the command when the batch moves"),
            None => "absent, will be added when the batch moves".to_string(),
        };
        Some(format!(
            "LightningCLI batch {} {}; accumulation {name} {accum}",
            batch.name, batch.value
        ))
    }
}

/// Why a command's knobs could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("batch flag {name} is not in the command: add it (e.g. `{}`) or name another with --batch-arg", example_word(.name))]
    BatchFlagMissing { name: String },
    #[error("{name} has no value: write `{name} N` or `{name}=N`")]
    NoValue { name: String },
    #[error("{name} value `{value}` is not a whole number above 0: oomguard can only halve an integer batch")]
    NotAnInteger { name: String, value: String },
    #[error("{name} value `{value}` is too large: at most {max}", max = u64::MAX)]
    TooLarge { name: String, value: String },
    #[error("{name} is in the arguments of more than one program: {places}, parts being separated by `--`; name the one to change with {choices}")]
    Ambiguous {
        name: String,
        places: String,
        choices: String,
    },
    #[error(
        "{spec}: the command has {parts} part(s) separated by `--`; N in NAME@N counts them from 1"
    )]
    NoSuchPart { spec: String, parts: usize },
    #[error(
        "{name} cannot be both the batch and the accumulation flag: name the other one with {fix}"
    )]
    BothRoles { name: String, fix: &'static str },
}

/// `name` with a value, in the form the command takes it: `--flag 8`, a yacs `KEY 8` pair, an
/// override `key=8`.
fn example_word(name: &str) -> String {
    if name.starts_with('-') || is_pair_key(name) {
        format!("{name} 8")
    } else {
        format!("{name}=8")
    }
}

/// A knob as `--batch-arg` / `--accum-arg` name it: `NAME`, or `NAME@N` for part N only.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec<'a> {
    name: &'a str,
    part: Option<usize>,
}

impl<'a> Spec<'a> {
    /// `--batch_size@2` → part 2. A suffix that is not `@` and digits stays part of the name
    /// (Hydra's `group@package` keys).
    fn parse(text: &'a str) -> Spec<'a> {
        match text.rsplit_once('@') {
            Some((name, n))
                if !name.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Spec {
                    name,
                    part: Some(n.parse().unwrap_or(usize::MAX)),
                }
            }
            _ => Spec {
                name: text,
                part: None,
            },
        }
    }
}

/// Finds the batch and accumulation knobs. `batch_arg` / `accum_arg` name them explicitly
/// (`--batch-arg`, `--accum-arg`, as `NAME` or `NAME@N`); otherwise the known names are
/// searched.
#[cfg(test)]
pub fn locate(
    argv: &[OsString],
    batch_arg: Option<&str>,
    accum_arg: Option<&str>,
) -> Result<Knobs, RewriteError> {
    locate_with(argv, batch_arg, accum_arg, &Declared::default())
}

/// [`locate`], knowing the options the script's parser declares ([`declared::read`]): a short
/// alias of a known flag (`-b` for `--batch-size`) is a knob, and an accumulation flag the
/// parser declares but the command lacks is added beside the batch, from the declared default.
pub fn locate_with(
    argv: &[OsString],
    batch_arg: Option<&str>,
    accum_arg: Option<&str>,
    declared: &Declared,
) -> Result<Knobs, RewriteError> {
    let parts = parts(argv);
    let from = parts[0].start;
    let lightning = is_lightning_cli(argv, from);
    let mut partner_note = None;
    let (batch, mut batch_also) = match batch_arg {
        Some(text) => {
            let spec = Spec::parse(text);
            let knob = find_spec(argv, &parts, &spec, text, "--batch-arg")?.ok_or_else(|| {
                RewriteError::BatchFlagMissing {
                    name: text.to_string(),
                }
            })?;
            (Some(knob), Vec::new())
        }
        None => {
            let candidates = with_aliases(batch_candidates(argv, from), BATCH_FLAGS, declared);
            let chosen = find_first_usable(argv, &parts, &candidates, "--batch-arg")?;
            let also = others_present(argv, &parts, &candidates, chosen.as_ref());
            (chosen, also)
        }
    };
    let (accum, mut accum_also) = match accum_arg {
        Some(text) => {
            let spec = Spec::parse(text);
            let accum = match find_spec(argv, &parts, &spec, text, "--accum-arg")? {
                Some(knob) => Accum::Present(knob),
                None => {
                    // Inserted where the job's own flags are: the end of the batch knob's part.
                    let part = spec
                        .part
                        .or(batch.as_ref().map(|b| b.part))
                        .unwrap_or(parts.len());
                    Accum::Appended {
                        name: spec.name.to_string(),
                        at: parts[part - 1].end,
                        joined: batch.as_ref().is_some_and(|b| joined_flag(b, spec.name)),
                        from: declared.default_of(spec.name),
                    }
                }
            };
            (accum, Vec::new())
        }
        None => {
            let candidates = with_aliases(accum_candidates(argv, from), ACCUM_FLAGS, declared);
            let found = find_first_usable(argv, &parts, &candidates, "--accum-arg")?;
            let also = others_present(argv, &parts, &candidates, found.as_ref());
            let accum = match (found, &batch) {
                (Some(knob), _) => Accum::Present(knob),
                // LightningCLI takes its accumulation as a flag: added at the end of the batch's
                // part, where the script's own flags are.
                (None, Some(b)) => kept_by_job(argv, &parts, b)
                    .or_else(|| {
                        lightning.then(|| Accum::Appended {
                            name: LIGHTNING_ACCUM.to_string(),
                            at: parts[b.part - 1].end,
                            joined: joined_flag(b, LIGHTNING_ACCUM),
                            from: None,
                        })
                    })
                    .or_else(|| {
                        let (name, from, why) = declared_partner(b, declared)?;
                        partner_note = Some(format!(
                            "accumulation: {name} {}, added beside {} when the batch moves ({why})",
                            from.unwrap_or(1),
                            b.name
                        ));
                        Some(Accum::Appended {
                            at: parts[b.part - 1].end,
                            joined: joined_flag(b, &name),
                            name,
                            from,
                        })
                    })
                    .unwrap_or(Accum::None),
                (None, None) => Accum::None,
            };
            (accum, also)
        }
    };
    if let (Some(b), Accum::Present(a)) = (&batch, &accum) {
        if b.name == a.name && b.part == a.part {
            let fix = if accum_arg.is_some() {
                "--accum-arg"
            } else {
                "--batch-arg"
            };
            return Err(RewriteError::BothRoles {
                name: b.name.clone(),
                fix,
            });
        }
    }
    // The job's own effective-batch flag is not a rival knob: it is kept on purpose.
    if let Accum::KeptByJob { effective_flag } = &accum {
        batch_also.retain(|n| n != effective_flag);
        accum_also.retain(|n| n != effective_flag);
    }
    Ok(Knobs {
        batch,
        accum,
        batch_also,
        accum_also,
        lightning,
        partner_note,
    })
}

/// The known flags `candidates` with, right after the known flags, the short aliases the
/// script's parser declares for them (`-b` beside `--batch-size`): a short flag means nothing
/// by itself (`-b` is a batch in timm, something else elsewhere), so only a declaration makes
/// it a knob.
fn with_aliases(mut candidates: Vec<String>, known: &[&str], declared: &Declared) -> Vec<String> {
    let aliases: Vec<String> = known
        .iter()
        .flat_map(|flag| declared.aliases_of(flag))
        .filter(|alias| !known.contains(&alias.as_str()))
        .collect();
    let at = known.len().min(candidates.len());
    candidates.splice(at..at, aliases);
    candidates
}

/// The accumulation flag to add beside the batch flag `batch` of a command that has none, its
/// starting value, and why: one the script's parser declares beside the batch flag it also
/// declares with a whole-number default (timm's `--grad-accum-steps`, default 1), or, for a Trainer's
/// `--per_device_train_batch_size` that the script does not declare itself (it comes from
/// `TrainingArguments` through `HfArgumentParser`), the Trainer's `--gradient_accumulation_steps`,
/// which every Trainer script takes. A script that declares the batch flag and no accumulation
/// flag gets none: its parser would refuse one.
fn declared_partner(batch: &Knob, declared: &Declared) -> Option<(String, Option<u64>, String)> {
    if !batch.name.starts_with('-') {
        return None;
    }
    if declared.declares(&batch.name) {
        // Only from a declared whole-number default: a `default=None` is read by the job in
        // its own way (derived, or left to a launcher), so what it runs with is unknown.
        let (name, from) = declared.first_of(ACCUM_FLAGS)?;
        let from = from?;
        let why = format!("{} declares it, default {from}", declared.script);
        return Some((name, Some(from), why));
    }
    (batch.name == "--per_device_train_batch_size").then(|| {
        (
            "--gradient_accumulation_steps".to_string(),
            None,
            "the Trainer's TrainingArguments always takes it".to_string(),
        )
    })
}

/// Whether a flag `partner` added beside the batch flag `batch` is written in equals form: the
/// batch flag's last occurrence (the one the job reads) is `--flag=N`, and both are dashed
/// flags (a Hydra key is always `key=N` anyway).
fn joined_flag(batch: &Knob, partner: &str) -> bool {
    batch.name.starts_with('-')
        && partner.starts_with('-')
        && matches!(batch.sites.last(), Some(Site::Joined(_)))
}

/// The argv index ranges of the command's parts, as knobs are searched in them: those of
/// [`raw_parts`], each cut to begin no earlier than the script's own arguments
/// ([`launch::launch`]): a launcher's options (`torchrun --nproc_per_node 2`, accelerate's own
/// `--gradient_accumulation_steps`) are in no part. A part wholly before the script is left
/// empty, at the script's first argument, so parts keep their numbers for `NAME@N`.
fn parts(argv: &[OsString]) -> Vec<Range<usize>> {
    let from = launch::launch(argv).script_args;
    raw_parts(argv)
        .into_iter()
        .map(|range| range.start.max(from)..range.end.max(from))
        .collect()
}

/// The argv index ranges of the command's parts: part 1 from `argv[1]` (`argv[0]` is the program,
/// never a flag) to the first standalone `--`, each later part between two of them.
fn raw_parts(argv: &[OsString]) -> Vec<Range<usize>> {
    let mut parts = Vec::new();
    let mut start = 1.min(argv.len());
    for (i, token) in argv.iter().enumerate().skip(1) {
        if token == "--" {
            parts.push(start..i);
            start = i + 1;
        }
    }
    parts.push(start..argv.len().max(start));
    parts
}

/// The token at `i` as text, where it is UTF-8.
fn text(argv: &[OsString], i: usize) -> Option<&str> {
    argv.get(i).and_then(|t| t.to_str())
}

/// `python3 …` or `worker.py …`: the first token of a part, to tell parts apart in messages.
fn part_label(argv: &[OsString], part: usize) -> String {
    let first = if part == 1 {
        argv.first()
    } else {
        argv.get(raw_parts(argv)[part - 1].start)
    };
    first.map_or_else(String::new, |t| t.to_string_lossy().into_owned())
}

/// Finds `spec` in the part it names, or in whichever single part holds it.
fn find_spec(
    argv: &[OsString],
    parts: &[Range<usize>],
    spec: &Spec,
    text: &str,
    flag: &str,
) -> Result<Option<Knob>, RewriteError> {
    match spec.part {
        Some(part) if part == 0 || part > parts.len() => Err(RewriteError::NoSuchPart {
            spec: text.to_string(),
            parts: parts.len(),
        }),
        Some(part) => find(argv, spec.name, parts[part - 1].clone(), part),
        None => find_in_parts(argv, parts, spec.name, flag),
    }
}

/// Finds `name` in every part; present in more than one is [`RewriteError::Ambiguous`].
fn find_in_parts(
    argv: &[OsString],
    parts: &[Range<usize>],
    name: &str,
    flag: &str,
) -> Result<Option<Knob>, RewriteError> {
    let found: Vec<(usize, Result<Knob, RewriteError>)> = parts
        .iter()
        .enumerate()
        .filter_map(|(i, range)| {
            find(argv, name, range.clone(), i + 1)
                .transpose()
                .map(|r| (i + 1, r))
        })
        .collect();
    if found.len() > 1 {
        let places = found
            .iter()
            .map(|(part, r)| {
                let value = match r {
                    Ok(knob) => knob.value.to_string(),
                    Err(RewriteError::NotAnInteger { value, .. })
                    | Err(RewriteError::TooLarge { value, .. }) => value.clone(),
                    Err(_) => "no value".to_string(),
                };
                let label = part_label(argv, *part);
                format!("{value} in part {part} ({label} …)")
            })
            .collect::<Vec<_>>()
            .join(", ");
        let choices = found
            .iter()
            .map(|(part, _)| format!("{flag} {name}@{part}"))
            .collect::<Vec<_>>()
            .join(" or ");
        return Err(RewriteError::Ambiguous {
            name: name.to_string(),
            places,
            choices,
        });
    }
    found.into_iter().next().map(|(_, r)| r).transpose()
}

/// Whether an eval/validation/test/inference setting: a word of the name (split at `.`, `_`,
/// `-`) is one of those. Such a batch does not decide training memory, so it is taken only when
/// nothing else matches.
pub(crate) fn is_eval_like(name: &str) -> bool {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_lowercase)
        .any(|word| {
            word == "val"
                || ["valid", "eval", "test", "predict", "infer"]
                    .iter()
                    .any(|w| word.starts_with(w))
        })
}

/// Known batch names in the order they are preferred: the known flags, then
/// LightningCLI's dotted flags next, then Hydra keys ending in `batch_size`, training ones before
/// evaluation ones. `from`: the script's first argument.
fn batch_candidates(argv: &[OsString], from: usize) -> Vec<String> {
    let mut names: Vec<String> = BATCH_FLAGS.iter().map(|s| s.to_string()).collect();
    names.extend(training_first(dotted_flags(
        argv,
        from,
        &[HYDRA_BATCH_SUFFIX],
    )));
    names.extend(training_first(hydra_keys(
        argv,
        from,
        &[HYDRA_BATCH_SUFFIX],
    )));
    names
}

/// Known accumulation names in the order they are preferred, as for the batch.
fn accum_candidates(argv: &[OsString], from: usize) -> Vec<String> {
    let mut names: Vec<String> = ACCUM_FLAGS.iter().map(|s| s.to_string()).collect();
    names.extend(training_first(dotted_flags(
        argv,
        from,
        HYDRA_ACCUM_SUFFIXES,
    )));
    names.extend(training_first(hydra_keys(argv, from, HYDRA_ACCUM_SUFFIXES)));
    names
}

/// jsonargparse's dotted flags among `argv[from..]` (`--data.batch_size 256`,
/// `--data.init_args.batch_size=256`) whose last component ends with one of `suffixes`, each
/// once: the datamodule's first (its batch is the loader's, which decides memory; a model's
/// `batch_size` is often only a hyperparameter it logs), then in the order they appear.
fn dotted_flags(argv: &[OsString], from: usize, suffixes: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for token in argv.iter().skip(from).filter_map(|t| t.to_str()) {
        let Some(key) = token.strip_prefix("--") else {
            continue;
        };
        let key = key.split_once('=').map_or(key, |(k, _)| k);
        let Some((_, last)) = key.rsplit_once('.') else {
            continue;
        };
        let usable = suffixes.iter().any(|s| last.ends_with(s))
            && !is_global_batch(last)
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        let name = format!("--{key}");
        if usable && !names.contains(&name) {
            names.push(name);
        }
    }
    names.sort_by_key(|name| !name.starts_with("--data."));
    names
}

/// Whether the script's arguments (from `argv[from]`) are LightningCLI's: a subcommand right
/// after the script (`main.py fit ...`), jsonargparse's dotted flags of the trainer, data or
/// model, or a `--config` / `-c` beside a subcommand (`main.py -c c.yaml fit`).
pub fn is_lightning_cli(argv: &[OsString], from: usize) -> bool {
    let own: Vec<Option<&str>> = argv.iter().skip(from).map(|t| t.to_str()).collect();
    let subcommand_at = |i: usize| {
        own[i].is_some_and(|t| LIGHTNING_SUBCOMMANDS.contains(&t))
            // Not a flag's value (`--mode fit`); `--config=c.yaml fit` holds its own.
            && (i == 0
                || own[i - 1].is_none_or(|prev| !prev.starts_with('-') || prev.contains('=')))
    };
    let dotted = own
        .iter()
        .flatten()
        .any(|t| LIGHTNING_GROUPS.iter().any(|g| t.starts_with(g)));
    let config = own
        .iter()
        .flatten()
        .any(|t| *t == "--config" || *t == "-c" || t.starts_with("--config="));
    (!own.is_empty() && subcommand_at(0)) || dotted || (config && (0..own.len()).any(subcommand_at))
}

/// The config files a LightningCLI command names in the script's arguments (`--config X`,
/// `--config=X`, `-c X`), in order: LightningCLI merges them, the later winning.
pub fn lightning_configs(argv: &[OsString]) -> Vec<String> {
    let from = launch(argv).script_args;
    let mut configs = Vec::new();
    let mut i = from;
    while i < argv.len() {
        match text(argv, i) {
            Some("--config" | "-c") => {
                configs.extend(text(argv, i + 1).map(str::to_string));
                i += 2;
                continue;
            }
            Some(t) => configs.extend(t.strip_prefix("--config=").map(str::to_string)),
            None => {}
        }
        i += 1;
    }
    configs
}

/// The first line tells which launchers stand before the script, where there are any; the
/// second that Hugging Face's `--auto_find_batch_size` is on, where it is, and what oomguard
/// does beside it: `accum_moves`, whether the run has an accumulation knob that keeps the
/// effective batch.
pub fn context_notes(argv: &[OsString], accum_moves: bool) -> Vec<String> {
    let launch = launch(argv);
    let mut notes = Vec::new();
    if !launch.launchers.is_empty() {
        notes.push(format!(
            "launcher{}: {}; their own arguments are not searched for knobs, only {}'s",
            if launch.launchers.len() > 1 { "s" } else { "" },
            launch.launchers.join(", "),
            launch.script.as_deref().unwrap_or("the script"),
        ));
    }
    if auto_find_batch_size(argv, launch.script_args) {
        notes.push(auto_find_note("--auto_find_batch_size", accum_moves));
    }
    notes
}

/// The line about the Trainer's `auto_find_batch_size`, turned on by `setting` (the flag, or
/// the key of its arguments file).
pub fn auto_find_note(setting: &str, accum_moves: bool) -> String {
    let ours = if accum_moves {
        "at half the batch with twice the accumulation. Remove the flag to keep the effective batch."
    } else {
        "at half the batch, and with no accumulation flag the effective batch shrinks there too: remove the flag and name the accumulation with --accum-arg to keep it."
    };
    format!("{setting} {AUTO_FIND_NOTE} {ours}")
}

/// What the Trainer's `--auto_find_batch_size` does beside oomguard. Transformers wraps its
/// training loop in accelerate's `find_executable_batch_size`: a CUDA out-of-memory exception
/// caught inside the loop halves the batch and restarts the loop in the same process, and the
/// accumulation is left as it is.
const AUTO_FIND_NOTE: &str = "is on: after a CUDA out-of-memory error the Trainer halves the batch itself and restarts training inside the same attempt, without raising the accumulation, so the effective batch shrinks; oomguard acts only when an attempt dies, relaunching it";

/// Whether the script's arguments turn on `--auto_find_batch_size`: bare (HfArgumentParser's
/// booleans take an optional value), or with a true value.
fn auto_find_batch_size(argv: &[OsString], from: usize) -> bool {
    let is = |v: &str, words: &[&str]| words.contains(&v.to_ascii_lowercase().as_str());
    let (truthy, falsy) = (
        ["true", "1", "yes", "y", "t"],
        ["false", "0", "no", "n", "f"],
    );
    let mut on = false;
    for i in from..argv.len() {
        let Some(token) = text(argv, i) else { continue };
        let (name, joined) = match token.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (token, None),
        };
        if name != "--auto_find_batch_size" && name != "--auto-find-batch-size" {
            continue;
        }
        // The last occurrence decides, as argparse reads it.
        on = match joined {
            Some(value) => is(value, &truthy),
            None => !text(argv, i + 1).is_some_and(|next| is(next, &falsy)),
        };
    }
    on
}

fn training_first(keys: Vec<String>) -> Vec<String> {
    let (eval, train): (Vec<String>, Vec<String>) = keys.into_iter().partition(|k| is_eval_like(k));
    train.into_iter().chain(eval).collect()
}

/// The candidates, other than the chosen knob, that occur in the command.
fn others_present(
    argv: &[OsString],
    parts: &[Range<usize>],
    candidates: &[String],
    chosen: Option<&Knob>,
) -> Vec<String> {
    candidates
        .iter()
        .filter(|name| chosen.is_none_or(|k| &k.name != *name))
        .filter(|name| {
            parts
                .iter()
                .enumerate()
                .any(|(i, range)| !matches!(find(argv, name, range.clone(), i + 1), Ok(None)))
        })
        .cloned()
        .collect()
}

fn kept_by_job(argv: &[OsString], parts: &[Range<usize>], batch: &Knob) -> Option<Accum> {
    let range = parts[batch.part - 1].clone();
    let effective = effective_flag_of(&batch.name)?;
    matches!(find(argv, &effective, range, batch.part), Ok(Some(_))).then_some(Accum::KeptByJob {
        effective_flag: effective,
    })
}

/// The first candidate present with a positive integer value. A known flag with an unusable
/// value (guided-diffusion's `--microbatch -1` means "off") is skipped in favour of the next;
/// if no flag is usable, the first one found reports its error. A candidate found in two parts
/// stops the search: guessing which program's flag is meant could move the wrong one.
fn find_first_usable(
    argv: &[OsString],
    parts: &[Range<usize>],
    candidates: &[String],
    flag: &str,
) -> Result<Option<Knob>, RewriteError> {
    let mut first_error = None;
    for name in candidates {
        match find_in_parts(argv, parts, name, flag) {
            Ok(Some(knob)) => return Ok(Some(knob)),
            Ok(None) => {}
            Err(e @ RewriteError::Ambiguous { .. }) => return Err(e),
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

/// Hydra override keys in argv whose last dotted component ends with one of `suffixes`, each
/// once, in the order they first appear.
fn hydra_keys(argv: &[OsString], from: usize, suffixes: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for token in argv.iter().skip(from).filter_map(|t| t.to_str()) {
        if token.starts_with('-') {
            continue;
        }
        let Some((k, _)) = token.split_once('=') else {
            continue;
        };
        let key = k.trim_start_matches(['+', '~']);
        let last = key.rsplit('.').next().unwrap_or(key);
        let usable = !key.is_empty()
            && suffixes.iter().any(|s| last.ends_with(s))
            && !is_global_batch(last)
            && key
                .chars()
                .all(|c| c.is_alphanumeric() || "._-".contains(c));
        if usable && !keys.iter().any(|seen| seen == k) {
            keys.push(k.to_string());
        }
    }
    keys
}

/// Every occurrence of `name` among the tokens in `range`, and the last one's value as written.
/// `Ok(None)` when absent.
fn find_raw<'a>(
    argv: &'a [OsString],
    name: &str,
    range: Range<usize>,
) -> Result<Option<(Vec<Site>, &'a OsStr)>, RewriteError> {
    let is_hydra = !name.starts_with('-');
    let bare = name.trim_start_matches(['+', '~']);
    let mut sites = Vec::new();
    let mut last_value: Option<&OsStr> = None;
    let mut i = range.start;
    while i < range.end {
        let Some(token) = text(argv, i) else {
            i += 1;
            continue;
        };
        // A dashed flag, or a yacs key given as a `KEY VALUE` pair: the value is the next word.
        if (!is_hydra || is_pair_key(name)) && token == name {
            if i + 1 >= range.end {
                return Err(RewriteError::NoValue {
                    name: name.to_string(),
                });
            }
            sites.push(Site::Separate(i + 1));
            last_value = Some(&argv[i + 1]);
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
                let at = token.len() - value.len();
                last_value = Some(OsStr::from_bytes(&argv[i].as_bytes()[at..]));
            }
        }
        i += 1;
    }
    Ok(last_value.map(|value| (sites, value)))
}

/// Finds every occurrence of `name` among the tokens in `range` (part number `part`), with a
/// whole number above 0 as its value. `Ok(None)` when absent.
fn find(
    argv: &[OsString],
    name: &str,
    range: Range<usize>,
    part: usize,
) -> Result<Option<Knob>, RewriteError> {
    let Some((sites, raw)) = find_raw(argv, name, range)? else {
        return Ok(None);
    };
    let value = parse_count(name, raw, 1)?;
    Ok(Some(Knob {
        name: name.to_string(),
        value,
        part,
        sites,
    }))
}

/// A knob's value as an integer of at least `min`.
pub fn parse_count(name: &str, raw: &OsStr, min: u64) -> Result<u64, RewriteError> {
    let raw_text = raw.to_string_lossy();
    match raw.to_str().map(str::parse::<u64>) {
        Some(Ok(v)) if v >= min => Ok(v),
        Some(Err(e)) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err(RewriteError::TooLarge {
                name: name.to_string(),
                value: raw_text.into_owned(),
            })
        }
        _ => Err(RewriteError::NotAnInteger {
            name: name.to_string(),
            value: raw_text.into_owned(),
        }),
    }
}

/// Where a knob of the model sits in argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// `--flag N`, `--flag=N` or `key=N`: every occurrence, rewritten together.
    Flag { name: String, sites: Vec<Site> },
    /// Not in the command: inserted as `--flag N` (or `key=N`) at argv index `at` once it moves.
    /// A `name` that ends in `=` (`--batch_size=`, made by [`Place::absent_joined`]) is inserted
    /// as one token, `--batch_size=N`: a nanoGPT configurator takes nothing else, and a partner
    /// follows the batch flag's own spelling. Kept in the name rather than a field so every
    /// construction and pattern of this variant elsewhere reads as before.
    Absent { name: String, at: usize },
    /// A bare switch (`--use_fp16`) whose value is its presence: the indices of its
    /// occurrences (all removed to turn it off), and where to insert it to turn it on.
    Switch {
        name: String,
        sites: Vec<usize>,
        at: usize,
    },
}

impl Place {
    /// A flag absent from the command, inserted as one `NAME=N` token at argv index `at`.
    pub fn absent_joined(name: &str, at: usize) -> Place {
        Place::Absent {
            name: format!("{}=", name.trim_end_matches('=')),
            at,
        }
    }

    /// The flag or key as written (an equals-form absent flag without its `=`, a key added with
    /// its list flag without the flag: `train_dataloader.batch_size`).
    pub fn name(&self) -> &str {
        match self {
            Place::Flag { name, .. } | Place::Switch { name, .. } => name,
            Place::Absent { name, .. } => {
                let name = name.strip_suffix('=').unwrap_or(name);
                name.split_once(' ').map_or(name, |(_, key)| key)
            }
        }
    }

    /// Whether an absent flag is inserted in equals form, as one `--flag=N` token.
    pub fn is_joined(&self) -> bool {
        matches!(self, Place::Absent { name, .. } if name.starts_with('-') && name.ends_with('='))
    }

    /// The edits that give this place `value`. Call only for a value that differs from the
    /// command's own: at its original value a place is left exactly as written.
    pub fn edits(&self, argv: &[OsString], value: &Value, out: &mut Vec<Edit>) {
        match self {
            Place::Flag { sites, .. } => {
                for site in sites {
                    match *site {
                        Site::Separate(i) => {
                            out.push(Edit::Replace(i, value_text(value, &argv[i]).into()))
                        }
                        Site::Joined(i) => {
                            let (key, old) = argv[i]
                                .to_str()
                                .and_then(|t| t.split_once('='))
                                .expect("a joined site is a UTF-8 `key=value` token (find matched it as text)");
                            let token = format!("{key}={}", value_text(value, OsStr::new(old)));
                            out.push(Edit::Replace(i, token.into()));
                        }
                    }
                }
            }
            Place::Absent { name, at } => {
                let text = value_text(value, OsStr::new(""));
                let tokens: Vec<OsString> = if self.is_joined() {
                    vec![format!("{name}{text}").into()]
                } else if let Some((flag, key)) = name.split_once(' ') {
                    // An override added with its list flag (`--cfg-options key=N`).
                    vec![flag.into(), format!("{key}={text}").into()]
                } else if name.starts_with('-') || is_pair_key(name) {
                    vec![name.into(), text.into()]
                } else {
                    vec![format!("{name}={text}").into()]
                };
                out.push(Edit::Insert(*at, tokens));
            }
            Place::Switch { name, sites, at } => {
                if matches!(value, Value::Bool(true)) {
                    if sites.is_empty() {
                        out.push(Edit::Insert(*at, vec![name.into()]));
                    }
                } else {
                    out.extend(sites.iter().map(|&i| Edit::Remove(i)));
                }
            }
        }
    }
}

/// A value as a token, spelled like the one it replaces where that matters: Python's `True` /
/// `False` stay capitalised.
fn value_text(value: &Value, old: &OsStr) -> String {
    match value {
        Value::Bool(b) if old.to_str().is_some_and(|o| o == "True" || o == "False") => {
            if *b { "True" } else { "False" }.to_string()
        }
        other => other.to_string(),
    }
}

/// One change to argv, by index into the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    Replace(usize, OsString),
    Remove(usize),
    /// Tokens inserted before the original token at this index (`argv.len()`: at the end).
    Insert(usize, Vec<OsString>),
}

/// The argv with `edits` made. Indices are those of the original argv, so edits never shift
/// each other; insertions at one index keep their order.
pub fn apply_edits(argv: &[OsString], edits: &[Edit]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len() + edits.len());
    for i in 0..=argv.len() {
        for edit in edits {
            if let Edit::Insert(at, tokens) = edit {
                if *at == i {
                    out.extend(tokens.iter().cloned());
                }
            }
        }
        let Some(token) = argv.get(i) else { break };
        if edits.contains(&Edit::Remove(i)) {
            continue;
        }
        let replaced = edits.iter().rev().find_map(|e| match e {
            Edit::Replace(at, new) if *at == i => Some(new.clone()),
            _ => None,
        });
        out.push(replaced.unwrap_or_else(|| token.clone()));
    }
    out
}

/// The part of `argv` a knob named by `text` (`NAME` or `NAME@N`) is searched in: the one
/// named, the single part holding the name, or — absent everywhere — the last part (where a
/// command's own program's flags are). Ambiguous when two parts hold it.
pub fn part_of(
    argv: &[OsString],
    spec: &str,
    flag: &str,
) -> Result<(String, usize, Range<usize>), RewriteError> {
    let parts = parts(argv);
    let parsed = Spec::parse(spec);
    let name = parsed.name.to_string();
    if let Some(part) = parsed.part {
        if part == 0 || part > parts.len() {
            return Err(RewriteError::NoSuchPart {
                spec: spec.to_string(),
                parts: parts.len(),
            });
        }
        return Ok((name, part, parts[part - 1].clone()));
    }
    let holding: Vec<usize> = (0..parts.len())
        .filter(|&p| {
            parts[p].clone().any(|i| {
                text(argv, i).is_some_and(|t| {
                    t == parsed.name
                        || t.split_once('=').is_some_and(|(k, _)| {
                            k.trim_start_matches(['+', '~'])
                                == parsed.name.trim_start_matches(['+', '~'])
                        })
                })
            })
        })
        .collect();
    match holding[..] {
        [] => Ok((name, parts.len(), parts[parts.len() - 1].clone())),
        [p] => Ok((name, p + 1, parts[p].clone())),
        _ => Err(RewriteError::Ambiguous {
            name: name.clone(),
            places: holding
                .iter()
                .map(|&p| format!("part {} ({} …)", p + 1, part_label(argv, p + 1)))
                .collect::<Vec<_>>()
                .join(", "),
            choices: holding
                .iter()
                .map(|&p| format!("{flag} {name}@{}", p + 1))
                .collect::<Vec<_>>()
                .join(" or "),
        }),
    }
}

/// A flag or override named by `text` (`NAME` or `NAME@N`) with its last value as written,
/// or, absent, where it would be inserted.
pub fn locate_flag(
    argv: &[OsString],
    spec: &str,
    flag: &str,
) -> Result<(Place, Option<String>), RewriteError> {
    let (name, _, range) = part_of(argv, spec, flag)?;
    match find_raw(argv, &name, range.clone())? {
        Some((sites, raw)) => Ok((
            Place::Flag { name, sites },
            Some(raw.to_string_lossy().into_owned()),
        )),
        None => Ok((
            Place::Absent {
                name,
                at: range.end,
            },
            None,
        )),
    }
}

/// A bare switch named by `text`; `Ok(None)` when the flag is present with a value after it
/// (`--use_fp16 True`): then it is a valued flag, see [`locate_flag`].
pub fn locate_switch(
    argv: &[OsString],
    spec: &str,
    flag: &str,
) -> Result<Option<Place>, RewriteError> {
    let (name, _, range) = part_of(argv, spec, flag)?;
    let sites: Vec<usize> = range
        .clone()
        .filter(|&i| text(argv, i) == Some(name.as_str()))
        .collect();
    let valued = sites.iter().any(|&i| {
        i + 1 < range.end
            && text(argv, i + 1)
                .is_none_or(|next| !next.starts_with('-') || next.parse::<f64>().is_ok())
    }) || range.clone().any(|i| {
        text(argv, i).is_some_and(|t| {
            t.strip_prefix(name.as_str())
                .is_some_and(|rest| rest.starts_with('='))
        })
    });
    if valued {
        return Ok(None);
    }
    Ok(Some(Place::Switch {
        name,
        sites,
        at: range.end,
    }))
}

impl Knob {
    /// Where it sits, as the knob model moves it.
    pub fn place(&self) -> Place {
        Place::Flag {
            name: self.name.clone(),
            sites: self.sites.clone(),
        }
    }
}

impl Accum {
    /// Where the accumulation knob sits, where oomguard can move it.
    pub fn place(&self) -> Option<Place> {
        match self {
            Accum::Present(knob) => Some(knob.place()),
            Accum::Appended {
                name, at, joined, ..
            } if *joined => Some(Place::absent_joined(name, *at)),
            Accum::Appended { name, at, .. } => Some(Place::Absent {
                name: name.clone(),
                at: *at,
            }),
            Accum::KeptByJob { .. } | Accum::None => None,
        }
    }
}

/// The command with the automatic batch and accumulation knobs at `batch` and `accum`; a knob
/// at its original value is left exactly as written.
#[cfg(test)]
fn apply(argv: &[OsString], knobs: &Knobs, batch: u64, accum: Option<u64>) -> Vec<OsString> {
    let mut edits = Vec::new();
    if let Some(knob) = knobs.batch.as_ref().filter(|k| k.value != batch) {
        knob.place().edits(argv, &Value::Int(batch), &mut edits);
    }
    if let (Some(place), Some(value)) = (knobs.accum.place(), accum) {
        if knobs.accum_value() != Some(value) {
            place.edits(argv, &Value::Int(value), &mut edits);
        }
    }
    apply_edits(argv, &edits)
}

/// The auto-detected workers flags: halved (down to 0) before the batch on `worker_killed`.
pub const WORKER_FLAGS: &[&str] = &["--num_workers", "--num-workers", "--workers"];

/// The first workers flag in the command with a whole number above 0, in a single part; none
/// when absent, already 0 or unclear (a malformed workers flag is the job's business, not a
/// reason to refuse the run).
pub fn find_workers(argv: &[OsString]) -> Option<Knob> {
    let parts = parts(argv);
    WORKER_FLAGS
        .iter()
        .find_map(|name| find_in_parts(argv, &parts, name, "--config").ok().flatten())
}

/// An argv token that names a config file: the whole token, or what follows the first `=`
/// (`--config=configs/a.yaml`, `config_path=configs/a.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathToken {
    pub index: usize,
    /// Bytes of the token before the path.
    pub prefix_len: usize,
}

impl PathToken {
    /// The edit that makes the token name `file_name` in the same directory instead.
    pub fn redirect(&self, argv: &[OsString], file_name: &OsStr) -> Edit {
        let token = argv[self.index].as_bytes();
        let path = &token[self.prefix_len..];
        let dir_len = path.iter().rposition(|&b| b == b'/').map_or(0, |at| at + 1);
        let mut new = token[..self.prefix_len + dir_len].to_vec();
        new.extend_from_slice(file_name.as_bytes());
        Edit::Replace(self.index, OsString::from_vec(new))
    }
}

/// The first token (after the program) that names the same file as `canonical` (compared after
/// resolving it from `cwd`, symlinks and `..` included).
pub fn find_path(argv: &[OsString], canonical: &Path, cwd: &Path) -> Option<PathToken> {
    let same = |bytes: &[u8]| {
        !bytes.is_empty()
            && std::fs::canonicalize(cwd.join(OsStr::from_bytes(bytes)))
                .is_ok_and(|p| p == canonical)
    };
    argv.iter().enumerate().skip(1).find_map(|(index, token)| {
        let bytes = token.as_bytes();
        if same(bytes) {
            return Some(PathToken {
                index,
                prefix_len: 0,
            });
        }
        let eq = bytes.iter().position(|&b| b == b'=')?;
        same(&bytes[eq + 1..]).then_some(PathToken {
            index,
            prefix_len: eq + 1,
        })
    })
}

/// The end (exclusive argv index) of the part holding argv index `index`: where a flag that
/// belongs with the one at `index` is added (the resume flag goes with the batch flag).
pub fn part_end(argv: &[OsString], index: usize) -> usize {
    let parts = parts(argv);
    parts
        .iter()
        .find(|range| range.contains(&index) || range.end == index)
        .unwrap_or(&parts[parts.len() - 1])
        .end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

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
                name: "--accum".into(),
                at: 4,
                joined: false,
                from: None,
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
}

#[cfg(test)]
// A table's row type is its header; naming each would only move it away from the rows.
#[allow(clippy::type_complexity)]
mod parts_and_choices {
    //! The rules of issue 6: parts separated by `--`, `NAME@N`, training before evaluation
    //! batches, one knob never in both roles, the command untouched at its original sizes, and
    //! argv bytes that are not UTF-8.
    use super::*;
    use crate::test_util::{argv, words};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one part is one range, not a Vec of indices
    fn parts_are_split_at_standalone_double_dashes_and_begin_at_the_script() {
        // (command, parts as split, parts as searched: none before the script's arguments)
        let table: &[(&str, &[Range<usize>], &[Range<usize>])] = &[
            ("python t.py --bs 8", &[1..4], &[2..4]),
            ("uv run -- python t.py --bs 8", &[1..2, 3..7], &[5..5, 5..7]),
            (
                "torchrun --nproc_per_node 2 t.py --bs 8 -- extra",
                &[1..6, 7..8],
                &[4..6, 7..8],
            ),
            ("a -- b -- c d", &[1..1, 2..3, 4..6], &[1..1, 2..3, 4..6]),
            ("a --", &[1..1, 2..2], &[1..1, 2..2]),
            ("a", &[1..1], &[1..1]),
        ];
        for &(cmd, raw, searched) in table {
            assert_eq!(raw_parts(&argv(cmd)), raw, "{cmd}");
            assert_eq!(parts(&argv(cmd)), searched, "{cmd}");
        }
    }

    #[test]
    fn names_with_a_part_number() {
        let table: &[(&str, &str, Option<usize>)] = &[
            ("--batch_size", "--batch_size", None),
            ("--batch_size@2", "--batch_size", Some(2)),
            ("data.batch_size@1", "data.batch_size", Some(1)),
            ("db@backup.batch_size", "db@backup.batch_size", None),
            ("--bs@", "--bs@", None),
            ("@2", "@2", None),
        ];
        for &(text, name, part) in table {
            assert_eq!(Spec::parse(text), Spec { name, part }, "{text}");
        }
    }

    #[test]
    fn knobs_are_found_per_part() {
        // (command, --batch-arg, --accum-arg, batch name@part=value, accum name@part=value or "")
        let table: &[(&str, Option<&str>, Option<&str>, &str, &str)] = &[
            (
                "uv run -- python t.py --batch_size 8",
                None,
                None,
                "--batch_size@2=8",
                "",
            ),
            (
                "show.py --batch_size 64 -- worker.py --batch_size 8",
                Some("--batch_size@1"),
                None,
                "--batch_size@1=64",
                "",
            ),
            (
                "show.py --batch_size 64 -- worker.py --batch_size 8",
                Some("--batch_size@2"),
                None,
                "--batch_size@2=8",
                "",
            ),
            (
                "launch --grad_accum 2 -- t.py --bs 4",
                None,
                None,
                "--bs@2=4",
                "--grad_accum@1=2",
            ),
            (
                "a --bs 4 --bs 6 -- b --grad_accum 3 --grad_accum=5",
                None,
                None,
                "--bs@1=6",
                "--grad_accum@2=5",
            ),
            (
                "a --bs 4 -- b --bs 8 --bs=2",
                Some("--bs@2"),
                Some("--bs@1"),
                "--bs@2=2",
                "--bs@1=4",
            ),
        ];
        for &(cmd, b, a, want_b, want_a) in table {
            let knobs = locate(&argv(cmd), b, a).unwrap();
            let batch = knobs.batch.as_ref().unwrap();
            assert_eq!(
                format!("{}@{}={}", batch.name, batch.part, batch.value),
                want_b,
                "{cmd}"
            );
            let accum = match &knobs.accum {
                Accum::Present(k) => format!("{}@{}={}", k.name, k.part, k.value),
                _ => String::new(),
            };
            assert_eq!(accum, want_a, "{cmd}");
        }
    }

    #[test]
    fn a_knob_in_two_programs_arguments_is_refused_not_guessed() {
        // (command, --batch-arg, --accum-arg, words the error must contain)
        let table: &[(&str, Option<&str>, Option<&str>, &[&str])] = &[
            (
                "python3 show.py --batch_size 64 -- worker.py --batch_size 8",
                None,
                None,
                &[
                    "--batch_size is in the arguments of more than one program",
                    "64 in part 1 (python3 …)",
                    "8 in part 2 (worker.py …)",
                    "--batch-arg --batch_size@1 or --batch-arg --batch_size@2",
                ],
            ),
            (
                "python3 show.py --batch_size 64 -- worker.py --batch_size 8",
                Some("--batch_size"),
                None,
                &["--batch-arg --batch_size@1 or --batch-arg --batch_size@2"],
            ),
            (
                "a --bs 8 --grad_accum 1 -- b --grad_accum=2",
                None,
                None,
                &["--accum-arg --grad_accum@1 or --accum-arg --grad_accum@2"],
            ),
            (
                "a x.batch_size=4 -- b x.batch_size=8 -- c x.batch_size=2",
                None,
                None,
                &["@1 or --batch-arg x.batch_size@2 or --batch-arg x.batch_size@3"],
            ),
            (
                "a --bs 8 -- b --bs 4",
                Some("--bs@3"),
                None,
                &["--bs@3: the command has 2 part(s)"],
            ),
            (
                "a --bs 8",
                Some("--bs@0"),
                None,
                &["--bs@0: the command has 1 part(s)"],
            ),
        ];
        for &(cmd, b, a, want) in table {
            let err = locate(&argv(cmd), b, a).unwrap_err().to_string();
            for w in want {
                assert!(err.contains(w), "{cmd}: {err}");
            }
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn training_batches_are_preferred_over_evaluation_ones() {
        // (command, chosen batch, batch also found, chosen accum or "", accum also found)
        let table: &[(&str, &str, &[&str], &str, &[&str])] = &[
            (
                "t.py data.val_batch_size=64 data.train_batch_size=32 trainer.accumulate_grad_batches=1",
                "data.train_batch_size",
                &["data.val_batch_size"],
                "trainer.accumulate_grad_batches",
                &[],
            ),
            ("t.py eval.batch_size=8 test_batch_size=4 model.batch_size=2", "model.batch_size", &["eval.batch_size", "test_batch_size"], "", &[]),
            ("t.py validation.batch_size=8 data.batch_size=16", "data.batch_size", &["validation.batch_size"], "", &[]),
            ("t.py predict_batch_size=8 inference.batch_size=16", "predict_batch_size", &["inference.batch_size"], "", &[]),
            ("t.py --batch_size 8 data.batch_size=4", "--batch_size", &["data.batch_size"], "", &[]),
            ("t.py --per_device_train_batch_size 8 --batch_size 16", "--per_device_train_batch_size", &["--batch_size"], "", &[]),
            // `interval` holds `val` but is no word of it.
            ("t.py interval_batch_size=3", "interval_batch_size", &[], "", &[]),
            (
                "t.py --bs 4 --grad_accum 2 x.gradient_accumulation_steps=3",
                "--bs",
                &[],
                "--grad_accum",
                &["x.gradient_accumulation_steps"],
            ),
            // The job's own effective batch is no rival knob.
            ("t.py --batch_size 64 --microbatch 16", "--microbatch", &[], "", &[]),
        ];
        for &(cmd, batch, batch_also, accum, accum_also) in table {
            let knobs = locate(&argv(cmd), None, None).unwrap();
            assert_eq!(knobs.batch.as_ref().unwrap().name, batch, "{cmd}");
            assert_eq!(knobs.batch_also, batch_also, "{cmd}");
            let chosen = match &knobs.accum {
                Accum::Present(k) => k.name.as_str(),
                _ => "",
            };
            assert_eq!(chosen, accum, "{cmd}");
            assert_eq!(knobs.accum_also, accum_also, "{cmd}");
        }
    }

    #[test]
    fn the_choice_is_told_when_it_was_not_obvious() {
        let table: &[(&str, &[&str])] = &[
            ("t.py --batch_size 8 --grad_accum 2", &[]),
            (
                "t.py data.val_batch_size=64 data.train_batch_size=32",
                &["batch knob data.train_batch_size (also found: data.val_batch_size; pick another with --batch-arg)"],
            ),
            (
                "t.py --bs 8 --grad_accum 2 --accumulation_steps 2",
                &["accumulation knob --grad_accum (also found: --accumulation_steps; pick another with --accum-arg)"],
            ),
            (
                "t.py data.val_batch_size=64",
                &["batch knob data.val_batch_size looks like an evaluation setting, the only one found: name the training one with --batch-arg"],
            ),
        ];
        for &(cmd, want) in table {
            assert_eq!(
                locate(&argv(cmd), None, None).unwrap().choice_notes(),
                want,
                "{cmd}"
            );
        }
    }

    #[test]
    fn one_knob_cannot_be_batch_and_accumulation() {
        let table: &[(&str, Option<&str>, Option<&str>, &str)] = &[
            ("t.py --batch_size 8", None, Some("--batch_size"), "--batch_size cannot be both the batch and the accumulation flag: name the other one with --accum-arg"),
            ("t.py --bs 8 --grad_accum 4", Some("--grad_accum"), None, "--grad_accum cannot be both the batch and the accumulation flag: name the other one with --batch-arg"),
            ("t.py --n 8", Some("--n"), Some("--n"), "--n cannot be both"),
            ("t.py x.batch_size=8", Some("x.batch_size@1"), Some("x.batch_size"), "x.batch_size cannot be both"),
        ];
        for &(cmd, b, a, want) in table {
            let err = locate(&argv(cmd), b, a).unwrap_err().to_string();
            assert!(err.starts_with(want), "{cmd}: {err}");
        }
        // The same name in two programs' arguments is two knobs.
        assert!(locate(&argv("a --n 8 -- b --n 1"), Some("--n@1"), Some("--n@2")).is_ok());
    }

    #[test]
    fn at_the_original_sizes_the_command_is_untouched() {
        for cmd in [
            "t.py --batch_size 8 --batch_size 6 --grad_accum=1 --grad_accum 2",
            "show.py --batch_size 64 -- worker.py --batch_size 8",
            "t.py data.batch_size=032 trainer.accumulate_grad_batches=+1",
            "t.py --bs 08",
        ] {
            let cmd = argv(cmd);
            let knobs = locate(&cmd, Some(&format!("{}@1", first_knob(&cmd))), None).unwrap();
            let b = knobs.batch.as_ref().unwrap().value;
            assert_eq!(
                apply(&cmd, &knobs, b, knobs.accum_value()),
                cmd,
                "{}",
                words(&cmd)
            );
        }
    }

    fn first_knob(cmd: &[OsString]) -> String {
        let token = cmd[1].to_str().unwrap();
        token.split_once('=').map_or(token, |(k, _)| k).to_string()
    }

    #[test]
    fn only_the_chosen_part_is_rewritten() {
        // (command, --batch-arg, --accum-arg, batch, accum, rewritten command)
        let table: &[(&str, Option<&str>, Option<&str>, u64, Option<u64>, &str)] = &[
            (
                "show.py --batch_size 64 -- worker.py --batch_size 8",
                Some("--batch_size@1"),
                None,
                32,
                None,
                "show.py --batch_size 32 -- worker.py --batch_size 8",
            ),
            (
                "show.py --batch_size 64 -- worker.py --batch_size 8",
                Some("--batch_size@2"),
                None,
                4,
                None,
                "show.py --batch_size 64 -- worker.py --batch_size 4",
            ),
            (
                "t.py --batch_size 8 --batch_size 6",
                None,
                None,
                3,
                None,
                "t.py --batch_size 3 --batch_size 3",
            ),
            // An absent accumulation flag goes at the end of the batch knob's part.
            (
                "launch --nodes 2 -- t.py --bs 8 -- extra",
                None,
                Some("--accum"),
                4,
                Some(2),
                "launch --nodes 2 -- t.py --bs 4 --accum 2 -- extra",
            ),
            (
                "launch -- t.py --bs 8",
                None,
                Some("trainer.accum@1"),
                4,
                Some(2),
                "launch trainer.accum=2 -- t.py --bs 4",
            ),
        ];
        for &(cmd, b, a, batch, accum, want) in table {
            let knobs = locate(&argv(cmd), b, a).unwrap();
            assert_eq!(
                words(&apply(&argv(cmd), &knobs, batch, accum)),
                want,
                "{cmd}"
            );
        }
    }

    #[test]
    fn arguments_that_are_not_utf8_pass_through() {
        let mut cmd = argv("t.py --batch_size 8");
        cmd.insert(1, OsString::from_vec(b"caf\xff".to_vec()));
        cmd.push(OsString::from_vec(b"--batch_size=\xff".to_vec()));
        let knobs = locate(&cmd, None, None).unwrap();
        assert_eq!(knobs.batch.as_ref().unwrap().value, 8);
        let out = apply(&cmd, &knobs, 4, None);
        assert_eq!(out[1].as_bytes(), b"caf\xff");
        assert_eq!(out[3], "4");
        assert_eq!(out[4].as_bytes(), b"--batch_size=\xff");
        // A value that is not UTF-8 is no number.
        let mut cmd = argv("t.py --batch_size");
        cmd.push(OsString::from_vec(b"8\xff".to_vec()));
        assert!(matches!(
            locate(&cmd, None, None),
            Err(RewriteError::NotAnInteger { .. })
        ));
    }

    #[test]
    fn values_above_u64_are_too_large_not_malformed() {
        let err = locate(&argv("t.py --bs 99999999999999999999999"), None, None).unwrap_err();
        assert!(matches!(err, RewriteError::TooLarge { .. }), "{err}");
    }
}

#[cfg(test)]
// A table's row type is its header; naming each would only move it away from the rows.
#[allow(clippy::type_complexity)]
mod launchers_and_lightning {
    //! Issue 28: the script's own arguments behind launchers, LightningCLI's dotted flags and
    //! its accumulation added, and `--auto_find_batch_size` noticed.
    use super::*;
    use crate::test_util::{argv, words};

    /// `name@part=value`, or "" for none.
    fn knob_text(knob: Option<&Knob>) -> String {
        knob.map_or_else(String::new, |k| {
            format!("{}@{}={}", k.name, k.part, k.value)
        })
    }

    fn accum_text(accum: &Accum, argv: &[OsString]) -> String {
        match accum {
            Accum::Present(k) => knob_text(Some(k)),
            Accum::Appended { name, at, .. } => format!(
                "{name} added before {}",
                argv.get(*at)
                    .map_or("the end".into(), |t| t.to_string_lossy())
            ),
            Accum::KeptByJob { effective_flag } => format!("kept by {effective_flag}"),
            Accum::None => String::new(),
        }
    }

    #[test]
    fn only_the_scripts_own_arguments_are_searched_and_moved() {
        // (command, --batch-arg, --accum-arg, batch, accum, the command at batch/2 and accum×2)
        let table: &[(&str, Option<&str>, Option<&str>, &str, &str, &str)] = &[
            (
                "accelerate launch --num_processes 2 --gradient_accumulation_steps 4 train.py --batch_size 8",
                None,
                None,
                "--batch_size@1=8",
                "",
                "accelerate launch --num_processes 2 --gradient_accumulation_steps 4 train.py --batch_size 4",
            ),
            (
                "accelerate launch --gradient_accumulation_steps 4 train.py --batch_size 8 --gradient_accumulation_steps 2",
                None,
                None,
                "--batch_size@1=8",
                "--gradient_accumulation_steps@1=2",
                "accelerate launch --gradient_accumulation_steps 4 train.py --batch_size 4 --gradient_accumulation_steps 4",
            ),
            (
                "deepspeed --num_gpus 2 --hostfile hosts train.py --per_device_train_batch_size 4 --gradient_accumulation_steps 2",
                None,
                None,
                "--per_device_train_batch_size@1=4",
                "--gradient_accumulation_steps@1=2",
                "deepspeed --num_gpus 2 --hostfile hosts train.py --per_device_train_batch_size 2 --gradient_accumulation_steps 4",
            ),
            (
                "srun -N 2 --ntasks-per-node 4 torchrun --nproc_per_node 4 train.py --batch_size 32",
                None,
                None,
                "--batch_size@1=32",
                "",
                "srun -N 2 --ntasks-per-node 4 torchrun --nproc_per_node 4 train.py --batch_size 16",
            ),
            (
                "python -m torch.distributed.run --nproc_per_node 2 train.py --micro_batch_size 2 --accumulate_grad_batches 8",
                None,
                None,
                "--micro_batch_size@1=2",
                "--accumulate_grad_batches@1=8",
                "python -m torch.distributed.run --nproc_per_node 2 train.py --micro_batch_size 1 --accumulate_grad_batches 16",
            ),
            (
                "uv run --with numpy -- python -u -m pkg.train --bs 8",
                None,
                None,
                "--bs@2=8",
                "",
                "uv run --with numpy -- python -u -m pkg.train --bs 4",
            ),
            (
                "conda run -n ml python train.py --batch-size 16",
                None,
                None,
                "--batch-size@1=16",
                "",
                "conda run -n ml python train.py --batch-size 8",
            ),
            // `NAME@N` still counts parts at every `--`.
            (
                "torchrun --nproc_per_node 2 show.py --batch_size 64 -- worker.py --batch_size 8",
                Some("--batch_size@2"),
                None,
                "--batch_size@2=8",
                "",
                "torchrun --nproc_per_node 2 show.py --batch_size 64 -- worker.py --batch_size 4",
            ),
            // A named accumulation flag that only the launcher has is added to the script's.
            (
                "accelerate launch --gradient_accumulation_steps 4 train.py --batch_size 8",
                None,
                Some("--gradient_accumulation_steps"),
                "--batch_size@1=8",
                "--gradient_accumulation_steps added before the end",
                "accelerate launch --gradient_accumulation_steps 4 train.py --batch_size 4 --gradient_accumulation_steps 2",
            ),
            // A script named like a launcher option is the script.
            (
                "torchrun --nproc_per_node 2 standalone.py --standalone --bs 8",
                None,
                None,
                "--bs@1=8",
                "",
                "torchrun --nproc_per_node 2 standalone.py --standalone --bs 4",
            ),
            // A program that is no launcher is searched whole, as before.
            (
                "mylaunch --grad_accum 2 -- t.py --bs 4",
                None,
                None,
                "--bs@2=4",
                "--grad_accum@1=2",
                "mylaunch --grad_accum 4 -- t.py --bs 2",
            ),
        ];
        for &(cmd, b, a, want_b, want_a, moved) in table {
            let command = argv(cmd);
            let knobs = locate(&command, b, a).unwrap();
            assert_eq!(knob_text(knobs.batch.as_ref()), want_b, "{cmd}");
            assert_eq!(accum_text(&knobs.accum, &command), want_a, "{cmd}");
            let batch = knobs.batch.as_ref().unwrap().value / 2;
            let accum = knobs.accum_value().map(|n| n * 2);
            assert_eq!(
                words(&apply(&command, &knobs, batch, accum)),
                moved,
                "{cmd}"
            );
        }
    }

    #[test]
    fn a_launchers_flag_is_never_the_knob_even_by_name() {
        let table: &[(&str, &str)] = &[
            (
                "torchrun --nproc_per_node 2 t.py --bs 8",
                "--nproc_per_node",
            ),
            (
                "accelerate launch --num_processes 2 t.py --bs 8",
                "--num_processes",
            ),
            ("srun --ntasks 4 python t.py --bs 8", "--ntasks"),
        ];
        for &(cmd, name) in table {
            assert_eq!(
                locate(&argv(cmd), Some(name), None).unwrap_err(),
                RewriteError::BatchFlagMissing { name: name.into() },
                "{cmd}"
            );
        }
        // Parts are still told apart by the program that starts them.
        let err = locate(
            &argv("uv run -- python t.py --bs 8 -- w.py --bs 2"),
            None,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("8 in part 2 (python …), 2 in part 3 (w.py …)"),
            "{err}"
        );
    }

    #[test]
    fn lightning_dotted_flags_are_knobs_and_its_accumulation_is_added() {
        // (command, batch, batch also found, accum, the command at batch/2 and accum×2)
        let table: &[(&str, &str, &[&str], &str, &str)] = &[
            (
                "python main.py fit --data.batch_size 256",
                "--data.batch_size@1=256",
                &[],
                "--trainer.accumulate_grad_batches added before the end",
                "python main.py fit --data.batch_size 128 --trainer.accumulate_grad_batches 2",
            ),
            (
                "python main.py fit --data.batch_size=256 --trainer.accumulate_grad_batches 2",
                "--data.batch_size@1=256",
                &[],
                "--trainer.accumulate_grad_batches@1=2",
                "python main.py fit --data.batch_size=128 --trainer.accumulate_grad_batches 4",
            ),
            (
                "python main.py fit --data.init_args.batch_size 64 --trainer.max_epochs 3",
                "--data.init_args.batch_size@1=64",
                &[],
                "--trainer.accumulate_grad_batches added before the end",
                "python main.py fit --data.init_args.batch_size 32 --trainer.max_epochs 3 --trainer.accumulate_grad_batches 2",
            ),
            // Dotted flags without a subcommand (LightningCLI(run=False)).
            (
                "python main.py --model.batch_size 64",
                "--model.batch_size@1=64",
                &[],
                "--trainer.accumulate_grad_batches added before the end",
                "python main.py --model.batch_size 32 --trainer.accumulate_grad_batches 2",
            ),
            // The training batch, the datamodule's first; evaluation ones last.
            (
                "python main.py fit --data.val_batch_size 512 --model.batch_size 16 --data.batch_size 64",
                "--data.batch_size@1=64",
                &["--model.batch_size", "--data.val_batch_size"],
                "--trainer.accumulate_grad_batches added before the end",
                "python main.py fit --data.val_batch_size 512 --model.batch_size 16 --data.batch_size 32 --trainer.accumulate_grad_batches 2",
            ),
            // Added at the end of the batch's part, before a later program's.
            (
                "srun python main.py -c c.yaml fit --data.batch_size 8 -- extra",
                "--data.batch_size@1=8",
                &[],
                "--trainer.accumulate_grad_batches added before --",
                "srun python main.py -c c.yaml fit --data.batch_size 4 --trainer.accumulate_grad_batches 2 -- extra",
            ),
            // No LightningCLI: nothing is added.
            ("python train.py --batch_size 8", "--batch_size@1=8", &[], "", "python train.py --batch_size 4"),
            (
                "python train.py --config c.yaml --mode fit --batch_size 8",
                "--batch_size@1=8",
                &[],
                "",
                "python train.py --config c.yaml --mode fit --batch_size 4",
            ),
        ];
        for &(cmd, batch, also, accum, moved) in table {
            let command = argv(cmd);
            let knobs = locate(&command, None, None).unwrap();
            assert_eq!(knob_text(knobs.batch.as_ref()), batch, "{cmd}");
            assert_eq!(knobs.batch_also, also, "{cmd}");
            assert_eq!(accum_text(&knobs.accum, &command), accum, "{cmd}");
            let b = knobs.batch.as_ref().unwrap().value / 2;
            let a = knobs.accum_value().map(|n| n * 2);
            assert_eq!(words(&apply(&command, &knobs, b, a)), moved, "{cmd}");
        }
    }

    #[test]
    fn lightning_commands_are_told_by_subcommand_dotted_flags_or_config() {
        let table: &[(&str, bool)] = &[
            ("main.py fit --data.batch_size 8", true),
            ("main.py validate", true),
            ("main.py --trainer.devices 2 --bs 8", true),
            ("main.py -c c.yaml fit", true),
            ("main.py --config=c.yaml predict", true),
            ("main.py --config c.yaml", false),
            ("main.py --mode fit", false),
            ("main.py --mode test --config c.yaml", false),
            ("main.py --trainer 2", false),
            ("main.py", false),
        ];
        for &(cmd, want) in table {
            assert_eq!(is_lightning_cli(&argv(cmd), 1), want, "{cmd}");
        }
    }

    #[test]
    fn the_lightning_note_names_the_batch_and_the_accumulation_to_add() {
        let knobs = locate(
            &argv("python main.py fit --data.batch_size 256"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            knobs.lightning_note(None).unwrap(),
            "LightningCLI batch --data.batch_size 256; accumulation --trainer.accumulate_grad_batches absent, will be added when the batch moves"
        );
        assert!(knobs.lightning_note(Some(4)).unwrap().ends_with(
            "accumulate_grad_batches 4 in its --config, added to the command when the batch moves"
        ));
        let plain = locate(&argv("python t.py --batch_size 8"), None, Some("--ga")).unwrap();
        assert_eq!(plain.lightning_note(None), None);
    }

    #[test]
    fn launchers_and_auto_find_batch_size_are_told() {
        // (command, whether an accumulation moves, the notes' starts)
        let table: &[(&str, bool, &[&str])] = &[
            ("python t.py --bs 8", true, &[]),
            (
                "srun -N 2 torchrun --nproc_per_node 2 t.py --bs 8",
                true,
                &["launchers: srun, torchrun; their own arguments are not searched for knobs, only t.py's"],
            ),
            (
                "accelerate launch t.py --bs 8",
                true,
                &["launcher: accelerate launch; their own"],
            ),
            (
                "python t.py --per_device_train_batch_size 8 --auto_find_batch_size",
                true,
                &["--auto_find_batch_size is on: after a CUDA out-of-memory error the Trainer halves the batch itself"],
            ),
            ("python t.py --auto_find_batch_size False", true, &[]),
            ("python t.py --auto_find_batch_size=true", true, &["--auto_find_batch_size is on"]),
            ("python t.py --auto-find-batch-size", true, &["--auto_find_batch_size is on"]),
            ("python t.py --auto_find_batch_size true --auto_find_batch_size=0", true, &[]),
            // A launcher's option of that name is none of the script's.
            ("accelerate launch --auto_find_batch_size t.py --bs 8", true, &["launcher: accelerate launch"]),
        ];
        for &(cmd, accum_moves, want) in table {
            let notes = context_notes(&argv(cmd), accum_moves);
            assert_eq!(notes.len(), want.len(), "{cmd}: {notes:?}");
            for (note, want) in notes.iter().zip(want) {
                assert!(note.starts_with(want), "{cmd}: {note}");
                assert!(!note.contains('\n'), "{note}");
            }
        }
        let says = |accum_moves| {
            context_notes(
                &argv("python t.py --bs 8 --auto_find_batch_size"),
                accum_moves,
            )
            .join("")
        };
        assert!(says(true).ends_with("at half the batch with twice the accumulation. Remove the flag to keep the effective batch."));
        assert!(says(false).contains("the effective batch shrinks there too"));
    }
}

#[cfg(test)]
mod equals_form {
    //! Issue 39: an accumulation flag oomguard adds follows the batch flag's spelling, so a job
    //! that takes only `--key=value` (nanoGPT's configurator) accepts the relaunch.
    use super::*;
    use crate::test_util::{argv, words};

    #[test]
    fn an_added_partner_is_joined_where_the_batch_flag_is() {
        // (command, --accum-arg, the command at batch/2 and accum 2)
        let table: &[(&str, Option<&str>, &str)] = &[
            (
                "python train.py --batch_size=12",
                Some("--gradient_accumulation_steps"),
                "python train.py --batch_size=6 --gradient_accumulation_steps=2",
            ),
            (
                "python train.py --batch_size 12",
                Some("--gradient_accumulation_steps"),
                "python train.py --batch_size 6 --gradient_accumulation_steps 2",
            ),
            // The last occurrence is the one the job reads, and so the spelling followed.
            (
                "python train.py --batch_size 16 --batch_size=12",
                Some("--accum"),
                "python train.py --batch_size 6 --batch_size=6 --accum=2",
            ),
            (
                "torchrun --nproc_per_node=8 train.py c.py --batch_size=12 -- extra",
                Some("--accum"),
                "torchrun --nproc_per_node=8 train.py c.py --batch_size=6 --accum=2 -- extra",
            ),
            // A Hydra key is always `key=value`, the flag added beside it as it was.
            (
                "python train.py data.batch_size=12",
                Some("--accum"),
                "python train.py data.batch_size=6 --accum 2",
            ),
            (
                "python main.py fit --data.batch_size=12",
                None,
                "python main.py fit --data.batch_size=6 --trainer.accumulate_grad_batches=2",
            ),
            (
                "python main.py fit --data.batch_size 12",
                None,
                "python main.py fit --data.batch_size 6 --trainer.accumulate_grad_batches 2",
            ),
        ];
        for (cmd, accum_arg, want) in table {
            let command = argv(cmd);
            let knobs = locate(&command, None, *accum_arg).unwrap();
            assert_eq!(words(&apply(&command, &knobs, 6, Some(2))), *want, "{cmd}");
        }
    }

    #[test]
    fn a_joined_absent_place_is_one_token_and_named_without_its_equals() {
        let command = argv("python train.py config/train_gpt2.py");
        let place = Place::absent_joined("--batch_size", command.len());
        assert_eq!(place.name(), "--batch_size");
        assert!(place.is_joined());
        assert_eq!(place, Place::absent_joined("--batch_size=", command.len()));
        let mut edits = Vec::new();
        place.edits(&command, &Value::Int(6), &mut edits);
        assert_eq!(
            apply_edits(&command, &edits),
            argv("python train.py config/train_gpt2.py --batch_size=6")
        );
        // The plain forms are as they were.
        for (place, want) in [
            (
                Place::Absent {
                    name: "--batch_size".into(),
                    at: 3,
                },
                "python train.py config/train_gpt2.py --batch_size 6",
            ),
            (
                Place::Absent {
                    name: "data.batch_size".into(),
                    at: 3,
                },
                "python train.py config/train_gpt2.py data.batch_size=6",
            ),
        ] {
            assert!(!place.is_joined());
            let mut edits = Vec::new();
            place.edits(&command, &Value::Int(6), &mut edits);
            assert_eq!(words(&apply_edits(&command, &edits)), want);
        }
    }
}

/// Issue 40's syntaxes: a short flag the script declares, an accumulation its parser declares
/// or the Trainer always takes, micro and global batches, yacs `KEY VALUE` pairs.
#[cfg(test)]
mod syntaxes {
    use super::*;
    use crate::test_util::{argv, words};

    const TIMM: &str = "group.add_argument('-b', '--batch-size', type=int, default=128)\n\
                        group.add_argument('--grad-accum-steps', type=int, default=2)\n";

    /// (command, script text, batch name and value, accumulation as found, first relaunch).
    #[test]
    fn knobs_and_the_first_relaunch_by_syntax() {
        type Row = (
            &'static str,
            &'static str,
            &'static str,
            &'static str,
            &'static str,
        );
        let rows: &[Row] = &[
            ("t.sh 4 -b 128", TIMM, "-b 128", "added --grad-accum-steps from 2", "t.sh 4 -b 64 --grad-accum-steps 4"),
            ("python t.py --batch-size=64", TIMM, "--batch-size 64", "added --grad-accum-steps= from 2", "python t.py --batch-size=32 --grad-accum-steps=4"),
            ("python t.py -b 8", "", "none", "none", "python t.py -b 8"),
            ("python t.py --batch-size 8", "p.add_argument('--batch-size')\n", "--batch-size 8", "none", "python t.py --batch-size 4"),
            ("python t.py -b 8", "", "none", "none", "python t.py -b 8"),
            ("python t.py --batch-size 8", "p.add_argument('--batch-size')\np.add_argument('--grad_accum', default=None)\n", "--batch-size 8", "none", "python t.py --batch-size 4"),
            ("python run.py --per_device_train_batch_size 8", "", "--per_device_train_batch_size 8", "added --gradient_accumulation_steps from 1", "python run.py --per_device_train_batch_size 4 --gradient_accumulation_steps 2"),
            ("python run.py --per_device_train_batch_size 8", "p.add_argument('--per_device_train_batch_size')\n", "--per_device_train_batch_size 8", "none", "python run.py --per_device_train_batch_size 4"),
            ("python p.py --micro-batch-size 4 --global-batch-size 64", "", "--micro-batch-size 4", "kept by --global-batch-size", "python p.py --micro-batch-size 2 --global-batch-size 64"),
            ("python p.py --micro-batch-size 4", "", "--micro-batch-size 4", "none", "python p.py --micro-batch-size 2"),
            ("python -m litgpt finetune m --train.global_batch_size 16 --train.micro_batch_size 4", "", "--train.micro_batch_size 4", "kept by --train.global_batch_size", "python -m litgpt finetune m --train.global_batch_size 16 --train.micro_batch_size 2"),
            ("python f.py --batch-size 8 --update-freq 4", "", "--batch-size 8", "--update-freq 4", "python f.py --batch-size 4 --update-freq 8"),
            ("python o.py --batch-size 8 --accum-freq 2", "", "--batch-size 8", "--accum-freq 2", "python o.py --batch-size 4 --accum-freq 4"),
        ];
        for (cmd, script, batch, accum, relaunch) in rows {
            let command = argv(cmd);
            let declared = Declared::parse("t.py", script);
            let knobs = locate_with(&command, None, None, &declared).unwrap();
            let got_batch = knobs
                .batch
                .as_ref()
                .map_or("none".to_string(), |k| format!("{} {}", k.name, k.value));
            assert_eq!(got_batch, *batch, "{cmd}");
            let got_accum = match &knobs.accum {
                Accum::Present(k) => format!("{} {}", k.name, k.value),
                Accum::Appended { .. } => {
                    let place = knobs.accum.place().unwrap();
                    let eq = if place.is_joined() { "=" } else { "" };
                    format!(
                        "added {}{eq} from {}",
                        place.name(),
                        knobs.accum_value().unwrap()
                    )
                }
                Accum::KeptByJob { effective_flag } => format!("kept by {effective_flag}"),
                Accum::None => "none".to_string(),
            };
            assert_eq!(got_accum, *accum, "{cmd}");
            let (b, a) = match (&knobs.batch, knobs.accum_value()) {
                (Some(k), a) => (k.value / 2, a.map(|a| a * 2)),
                (None, _) => (0, None),
            };
            assert_eq!(words(&apply(&command, &knobs, b, a)), *relaunch, "{cmd}");
        }
    }

    #[test]
    fn yacs_pairs_are_found_rewritten_and_added_as_pairs() {
        let command = argv(
            "python train_net.py --config-file c.yaml SOLVER.IMS_PER_BATCH 16 SOLVER.BASE_LR 0.02",
        );
        let knobs = locate(&command, Some("SOLVER.IMS_PER_BATCH"), None).unwrap();
        assert_eq!(knobs.batch.as_ref().unwrap().value, 16);
        assert_eq!(
            words(&apply(&command, &knobs, 8, None)),
            "python train_net.py --config-file c.yaml SOLVER.IMS_PER_BATCH 8 SOLVER.BASE_LR 0.02"
        );
        let command = argv("python train_net.py --config-file c.yaml");
        let (place, value) = locate_flag(&command, "SOLVER.IMS_PER_BATCH", "--batch-arg").unwrap();
        assert_eq!(value, None);
        let mut edits = Vec::new();
        place.edits(&command, &Value::Int(8), &mut edits);
        assert_eq!(
            words(&apply_edits(&command, &edits)),
            "python train_net.py --config-file c.yaml SOLVER.IMS_PER_BATCH 8"
        );
        for (name, pair) in [
            ("SOLVER.IMS_PER_BATCH", true),
            ("MODEL.RPN.BATCH_SIZE_PER_IMAGE", true),
            ("solver.ims_per_batch", false),
            ("IMS_PER_BATCH", false),
            ("--SOLVER.X", false),
        ] {
            assert_eq!(is_pair_key(name), pair, "{name}");
        }
    }
}
