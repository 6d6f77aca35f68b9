//! The names knobs go by: the batch, accumulation and workers flags oomguard knows without
//! configuration, Hydra keys and LightningCLI dotted flags by their suffix, and the order
//! candidates are tried in (training before evaluation, the datamodule's first). It reads
//! names only; finding a name's value in argv is [`super::find`]'s.

use std::ffi::OsString;

use super::declared::Declared;

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

/// The flag or key that, present beside the step batch `step`, means the job itself splits an
/// effective batch into steps, so the accumulation is derived and the step moves alone:
/// guided-diffusion's `--batch_size` beside `--microbatch`; a global batch beside a micro batch
/// of the same spelling and prefix (Megatron-LM's `--global-batch-size` beside
/// `--micro-batch-size`, litgpt's `--train.global_batch_size` beside
/// `--train.micro_batch_size`: both derive the accumulation as global ÷ (micro × replicas)).
pub(super) fn effective_flag_of(step: &str) -> Option<String> {
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
pub(super) fn batch_candidates(argv: &[OsString], from: usize) -> Vec<String> {
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
pub(super) fn accum_candidates(argv: &[OsString], from: usize) -> Vec<String> {
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

/// `keys` with the evaluation ones last, each group in its order: a training batch decides
/// memory, so it is preferred.
fn training_first(keys: Vec<String>) -> Vec<String> {
    let (eval, train): (Vec<String>, Vec<String>) = keys.into_iter().partition(|k| is_eval_like(k));
    train.into_iter().chain(eval).collect()
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

/// The known flags `candidates` with, right after the known flags, the short aliases the
/// script's parser declares for them (`-b` beside `--batch-size`): a short flag means nothing
/// by itself (`-b` is a batch in timm, something else elsewhere), so only a declaration makes
/// it a knob.
pub(super) fn with_aliases(
    mut candidates: Vec<String>,
    known: &[&str],
    declared: &Declared,
) -> Vec<String> {
    let aliases: Vec<String> = known
        .iter()
        .flat_map(|flag| declared.aliases_of(flag))
        .filter(|alias| !known.contains(&alias.as_str()))
        .collect();
    let at = known.len().min(candidates.len());
    candidates.splice(at..at, aliases);
    candidates
}

/// The auto-detected workers flags: halved (down to 0) before the batch on `worker_killed`.
pub const WORKER_FLAGS: &[&str] = &["--num_workers", "--num-workers", "--workers"];
