//! The notes about what stands around the knobs in a command: the launchers before the script
//! (whose options are never searched) and Hugging Face's `--auto_find_batch_size`, which halves
//! the batch inside an attempt without raising the accumulation. Notes only: nothing here
//! finds or moves a knob.

use std::ffi::OsString;

use super::launch::launch;
use super::text;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

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
