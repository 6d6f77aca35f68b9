//! Chooses a command's batch and accumulation knobs: the ones `--batch-arg` / `--accum-arg`
//! name, or the first usable known names, and, where the command has no accumulation, how the
//! effective batch is kept (the job derives it, LightningCLI's flag or one the script's parser
//! declares is added) or that it is not. Finding one name is [`super::find`]'s; rewriting argv
//! is [`super::place`]'s.

use std::ffi::OsString;
use std::ops::Range;

use super::declared::Declared;
use super::find::{find, find_first_usable, find_spec, others_present};
use super::knobs::{Accum, Knob, Knobs, Site};
use super::lightning::{is_lightning_cli, LIGHTNING_ACCUM};
use super::names::{
    accum_candidates, batch_candidates, effective_flag_of, with_aliases, ACCUM_FLAGS, BATCH_FLAGS,
};
use super::parts::{parts, Spec};
use super::RewriteError;

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

/// Finds the batch and accumulation knobs as `locate` (the tests' shorthand) does, knowing the
/// options the script's parser declares ([`declared::read`](super::declared::read)): a short alias
/// of a known flag (`-b` for `--batch-size`) is a knob, and an accumulation flag the parser
/// declares but the command lacks is added beside the batch, from the declared default.
pub fn locate_with(
    argv: &[OsString],
    batch_arg: Option<&str>,
    accum_arg: Option<&str>,
    declared: &Declared,
) -> Result<Knobs, RewriteError> {
    let parts = parts(argv);
    let lightning = is_lightning_cli(argv, parts[0].start);
    let (batch, mut batch_also) = choose_batch(argv, &parts, batch_arg, declared)?;
    let (accum, mut accum_also, partner_note) = match accum_arg {
        Some(text) => {
            let accum = named_accum(argv, &parts, text, batch.as_ref(), declared)?;
            (accum, Vec::new(), None)
        }
        None => found_accum(argv, &parts, batch.as_ref(), lightning, declared)?,
    };
    check_roles(batch.as_ref(), &accum, accum_arg)?;
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

/// The batch knob and the other known batch names present: the one `--batch-arg` names (its
/// absence is an error, since the user said it is there), else the first usable known name.
fn choose_batch(
    argv: &[OsString],
    parts: &[Range<usize>],
    batch_arg: Option<&str>,
    declared: &Declared,
) -> Result<(Option<Knob>, Vec<String>), RewriteError> {
    match batch_arg {
        Some(text) => {
            let spec = Spec::parse(text);
            let knob = find_spec(argv, parts, &spec, text, "--batch-arg")?.ok_or_else(|| {
                RewriteError::BatchFlagMissing {
                    name: text.to_string(),
                }
            })?;
            Ok((Some(knob), Vec::new()))
        }
        None => {
            let candidates = with_aliases(
                batch_candidates(argv, parts[0].start),
                BATCH_FLAGS,
                declared,
            );
            let chosen = find_first_usable(argv, parts, &candidates, "--batch-arg")?;
            let also = others_present(argv, parts, &candidates, chosen.as_ref());
            Ok((chosen, also))
        }
    }
}

/// The accumulation `--accum-arg` names (`text`): present, or else added on relaunch, in the
/// batch flag's spelling, starting from the default the script's parser declares.
fn named_accum(
    argv: &[OsString],
    parts: &[Range<usize>],
    text: &str,
    batch: Option<&Knob>,
    declared: &Declared,
) -> Result<Accum, RewriteError> {
    let spec = Spec::parse(text);
    Ok(match find_spec(argv, parts, &spec, text, "--accum-arg")? {
        Some(knob) => Accum::Present(knob),
        None => {
            // Inserted where the job's own flags are: the end of the batch knob's part.
            let part = spec.part.or(batch.map(|b| b.part)).unwrap_or(parts.len());
            Accum::Appended {
                name: spec.name.to_string(),
                at: parts[part - 1].end,
                joined: batch.is_some_and(|b| joined_flag(b, spec.name)),
                from: declared.default_of(spec.name),
            }
        }
    })
}

/// The accumulation found by its known names, the other known names present, and the note
/// that says why an absent one is added; absent, see [`absent_accum`].
fn found_accum(
    argv: &[OsString],
    parts: &[Range<usize>],
    batch: Option<&Knob>,
    lightning: bool,
    declared: &Declared,
) -> Result<(Accum, Vec<String>, Option<String>), RewriteError> {
    let candidates = with_aliases(
        accum_candidates(argv, parts[0].start),
        ACCUM_FLAGS,
        declared,
    );
    let found = find_first_usable(argv, parts, &candidates, "--accum-arg")?;
    let also = others_present(argv, parts, &candidates, found.as_ref());
    let (accum, partner_note) = match (found, batch) {
        (Some(knob), _) => (Accum::Present(knob), None),
        (None, Some(b)) => absent_accum(argv, parts, b, lightning, declared),
        (None, None) => (Accum::None, None),
    };
    Ok((accum, also, partner_note))
}

/// How a command with the batch knob `b` and no accumulation keeps its effective batch, first
/// that applies: the job derives it; LightningCLI's flag is added; the accumulation the
/// script's parser declares (or the Trainer always takes) is added, with a note saying why;
/// else it cannot, and the effective batch shrinks with the batch.
fn absent_accum(
    argv: &[OsString],
    parts: &[Range<usize>],
    b: &Knob,
    lightning: bool,
    declared: &Declared,
) -> (Accum, Option<String>) {
    if let Some(kept) = kept_by_job(argv, parts, b) {
        return (kept, None);
    }
    // Added at the end of the batch's part, where the script's own flags are.
    let at = parts[b.part - 1].end;
    // LightningCLI takes its accumulation as a flag.
    if lightning {
        let accum = Accum::Appended {
            name: LIGHTNING_ACCUM.to_string(),
            at,
            joined: joined_flag(b, LIGHTNING_ACCUM),
            from: None,
        };
        return (accum, None);
    }
    let Some((name, from, why)) = declared_partner(b, declared) else {
        return (Accum::None, None);
    };
    let note = format!(
        "accumulation: {name} {}, added beside {} when the batch moves ({why})",
        from.unwrap_or(1),
        b.name
    );
    let accum = Accum::Appended {
        at,
        joined: joined_flag(b, &name),
        name,
        from,
    };
    (accum, Some(note))
}

/// One flag cannot be both knobs: halving one and doubling the other would write it twice.
/// The fix names the flag the user did not name (a name they gave is meant).
fn check_roles(
    batch: Option<&Knob>,
    accum: &Accum,
    accum_arg: Option<&str>,
) -> Result<(), RewriteError> {
    if let (Some(b), Accum::Present(a)) = (batch, accum) {
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
    Ok(())
}

/// The accumulation flag to add beside the batch flag `batch` of a command that has none, its
/// starting value, and why: one the script's parser declares beside the batch flag it also declares
/// with a whole-number default (timm's `--grad-accum-steps`, default 1), or, for a Trainer's
/// `--per_device_train_batch_size` that the script does not declare itself (it comes from
/// `TrainingArguments` through `HfArgumentParser`), the Trainer's `--gradient_accumulation_steps`,
/// which every Trainer script takes. A script that declares the batch flag and no accumulation flag
/// gets none: its parser would refuse one.
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

/// The job keeps the effective batch itself where its effective-batch flag stands beside the
/// step batch (`--batch_size` beside `--microbatch`): the accumulation is derived, not a knob.
fn kept_by_job(argv: &[OsString], parts: &[Range<usize>], batch: &Knob) -> Option<Accum> {
    let range = parts[batch.part - 1].clone();
    let effective = effective_flag_of(&batch.name)?;
    matches!(find(argv, &effective, range, batch.part), Ok(Some(_))).then_some(Accum::KeptByJob {
        effective_flag: effective,
    })
}

#[cfg(test)]
mod tests {
    use super::super::place::apply;
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
    use super::super::place::apply;
    use super::*;
    use crate::test_util::{argv, words};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

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
    use super::super::place::apply;
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
}

#[cfg(test)]
mod equals_form {
    //! Issue 39: an accumulation flag oomguard adds follows the batch flag's spelling, so a job
    //! that takes only `--key=value` (nanoGPT's configurator) accepts the relaunch.
    use super::super::place::apply;
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
}

/// Issue 40's syntaxes: a short flag the script declares, an accumulation its parser declares
/// or the Trainer always takes, micro and global batches, yacs `KEY VALUE` pairs.
#[cfg(test)]
mod syntaxes {
    use super::super::place::apply;
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
            ("python t.py -b 8", "p.add_argument('--batch-size')\n", "none", "none", "python t.py -b 8"),
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
}
