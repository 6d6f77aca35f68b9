//! A command's parts: the argv ranges between standalone `--` tokens (a launcher's, a
//! wrapper's, the script's arguments), cut to begin at the script's own arguments, and `NAME@N`,
//! which names a knob in part N only. It finds no value; [`super::find`] does, within a part.

use std::ffi::OsString;
use std::ops::Range;

use super::{launch, text, RewriteError};

/// A knob as `--batch-arg` / `--accum-arg` name it: `NAME`, or `NAME@N` for part N only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spec<'a> {
    pub(super) name: &'a str,
    pub(super) part: Option<usize>,
}

impl<'a> Spec<'a> {
    /// `--batch_size@2` → part 2. A suffix that is not `@` and digits stays part of the name
    /// (Hydra's `group@package` keys).
    pub(super) fn parse(text: &'a str) -> Spec<'a> {
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

/// The argv index ranges of the command's parts, as knobs are searched in them: those of
/// [`raw_parts`], each cut to begin no earlier than the script's own arguments
/// ([`launch::launch`]): a launcher's options (`torchrun --nproc_per_node 2`, accelerate's own
/// `--gradient_accumulation_steps`) are in no part. A part wholly before the script is left
/// empty, at the script's first argument, so parts keep their numbers for `NAME@N`.
pub(super) fn parts(argv: &[OsString]) -> Vec<Range<usize>> {
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

/// `python3 …` or `worker.py …`: the first token of a part, to tell parts apart in messages.
pub(super) fn part_label(argv: &[OsString], part: usize) -> String {
    let first = if part == 1 {
        argv.first()
    } else {
        argv.get(raw_parts(argv)[part - 1].start)
    };
    first.map_or_else(String::new, |t| t.to_string_lossy().into_owned())
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
// A table's row type is its header; naming each would only move it away from the rows.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::test_util::argv;

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
}
