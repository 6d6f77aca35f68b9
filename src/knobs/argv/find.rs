//! Finds one name in argv: every occurrence of a flag (`--flag N`, `--flag=N`), a Hydra
//! override (`key=N`) or a yacs `KEY N` pair within a part, and the value the job reads (the
//! last occurrence's, argparse's rule); a name in two parts is ambiguous, never guessed. It
//! chooses no knob among candidates' meanings (that is [`super::locate`](mod@super::locate)'s)
//! and rewrites nothing.

use std::ffi::{OsStr, OsString};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;

use super::knobs::{Knob, Site};
use super::names::{is_pair_key, WORKER_FLAGS};
use super::parts::{part_label, part_of, parts, Spec};
use super::place::Place;
use super::{text, RewriteError};

/// Finds `spec` in the part it names, or in whichever single part holds it.
pub(super) fn find_spec(
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

/// The candidates, other than the chosen knob, that occur in the command.
pub(super) fn others_present(
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

/// The first candidate present with a positive integer value. A known flag with an unusable
/// value (guided-diffusion's `--microbatch -1` means "off") is skipped in favour of the next;
/// if no flag is usable, the first one found reports its error. A candidate found in two parts
/// stops the search: guessing which program's flag is meant could move the wrong one.
pub(super) fn find_first_usable(
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
pub(super) fn find(
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

/// The first workers flag in the command with a whole number above 0, in a single part; none
/// when absent, already 0 or unclear (a malformed workers flag is the job's business, not a
/// reason to refuse the run).
pub fn find_workers(argv: &[OsString]) -> Option<Knob> {
    let parts = parts(argv);
    WORKER_FLAGS
        .iter()
        .find_map(|name| find_in_parts(argv, &parts, name, "--config").ok().flatten())
}

#[cfg(test)]
mod tests {
    use super::super::locate::locate;
    use super::super::place::{apply, apply_edits};
    use super::*;
    use crate::knobs::Value;
    use crate::test_util::{argv, words};

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
