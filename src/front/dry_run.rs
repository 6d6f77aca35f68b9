//! `oomguard run --dry-run[=CAUSE]`: what each attempt would get — its command, the
//! environment variables set for it, the config-file lines edited — for attempt 1 and each
//! relaunch down the ladder if every attempt died of CAUSE, until the run would give up. Starts
//! nothing and writes nothing: it is the knob model and the policy, printed.

use std::ffi::OsString;
use std::fmt::Write;

use crate::decide::policy::{self, Decision};
use crate::front::settings::RunSettings;
use crate::judge::outcome::Cause;
use crate::knobs::{patch_copy_name, KnobSet, Value};

/// The whole plan as text, one attempt after another.
pub fn plan(settings: &RunSettings, cause: Cause) -> String {
    let knobs = &settings.knobs;
    let (rules, original) = (knobs.rules(), knobs.originals());
    let mut out = String::new();
    let mut history: Vec<(Cause, Vec<Value>)> = Vec::new();
    let mut values = original.clone();
    let mut told_shrinking = false;
    loop {
        let attempt = history.len() + 1;
        if attempt == 1 {
            let _ = writeln!(out, "attempt 1: {}", words(&settings.command));
            // What the discovery found and where, as the run's first lines say it.
            for note in &knobs.notes {
                let _ = writeln!(out, "  found: {note}");
            }
            if knobs.automatic && knobs.batch().is_none() {
                let _ = match settings.probe && crate::probe::runs_python(&settings.command) {
                    true => writeln!(
                        out,
                        "  {}: {}",
                        crate::knobs::NO_BATCH,
                        crate::knobs::READ_INSIDE
                    ),
                    false => writeln!(
                        out,
                        "  {} ({})",
                        crate::knobs::NO_BATCH,
                        crate::knobs::NAME_THE_BATCH
                    ),
                };
            }
            if let Some(n) = settings.gpus {
                let _ = writeln!(
                    out,
                    "  cards: the {n} with the most free memory when the run starts (CUDA_VISIBLE_DEVICES by UUID)"
                );
            }
        }
        history.push((cause, values.clone()));
        let plan = policy::StepPlan {
            strategy: settings.strategy,
            margin: settings.margin,
            ..policy::StepPlan::default()
        };
        match policy::decide_with(&history, &rules, &original, &settings.limits, &plan) {
            Decision::Relaunch(next) => {
                let _ = writeln!(
                    out,
                    "attempt {} after {cause}: {}",
                    attempt + 1,
                    knobs.describe_changes(&values, &next.values, &next.changed)
                );
                describe_input(&mut out, settings, knobs, &next.values);
                if let Some(note) = next.effective_note {
                    let _ = writeln!(out, "  note: {note}");
                }
                // As the run warns it: once, at the first relaunch that moves the batch.
                if let Some(line) = knobs.shrink_note(&original, &next.values, &next.changed) {
                    if !std::mem::replace(&mut told_shrinking, true) {
                        let _ = writeln!(out, "  note: {line}");
                    }
                }
                values = next.values;
            }
            Decision::Stop { outcome, reason } => {
                let _ = writeln!(
                    out,
                    "then: {}{}",
                    outcome.as_str(),
                    reason.map(|r| format!(" ({r})")).unwrap_or_default()
                );
                return out;
            }
        }
    }
}

/// The command, variables and file lines of one attempt with knob `values`.
fn describe_input(out: &mut String, settings: &RunSettings, knobs: &KnobSet, values: &[Value]) {
    let texts = knobs.file_texts(values);
    let mut copies = Vec::new();
    for (file, text) in knobs.files.iter().zip(&texts) {
        let changed = *text != file.text;
        let copy = (changed && file.in_command.is_some())
            .then(|| file.path.with_file_name(patch_copy_name(&file.path, "PID")));
        if changed {
            let how = match &copy {
                Some(copy) => format!("a patched copy, {}, beside it", copy.display()),
                None => "patched in place, restored when the run ends".to_string(),
            };
            let _ = writeln!(out, "  file {} ({how}):", file.path.display());
            for line in line_changes(&file.text, text) {
                let _ = writeln!(out, "    {line}");
            }
        }
        copies.push(copy);
    }
    let input = knobs.input(&settings.command, values, &copies);
    let _ = writeln!(out, "  command: {}", words(&input.argv));
    for (name, value) in &input.env {
        let _ = writeln!(out, "  env: {name}={}", value.to_string_lossy());
    }
}

/// What changed from `old` to `new`, a line each, numbered as the user's file is: `line 4: a →
/// b` for a line changed in place, `added after line 1: key: 2` for one inserted, `line 7
/// removed: ...` for one dropped. A key inserted into a YAML or JSON copy is an insertion, not
/// a run of shifted lines.
fn line_changes(old: &str, new: &str) -> Vec<String> {
    let diff = similar::TextDiff::from_lines(old, new);
    let (old_lines, new_lines) = (diff.old_slices(), diff.new_slices());
    let text = |line: &str| line.trim().to_string();
    let mut out = Vec::new();
    for op in diff.ops() {
        let (old_range, new_range) = (op.old_range(), op.new_range());
        if matches!(op, similar::DiffOp::Equal { .. }) {
            continue;
        }
        // A run replaced by as many lines reads as lines changed in place; the rest of a
        // longer or shorter run as lines added or removed.
        let paired = old_range.len().min(new_range.len());
        for k in 0..paired {
            out.push(format!(
                "line {}: {} → {}",
                old_range.start + k + 1,
                text(old_lines[old_range.start + k]),
                text(new_lines[new_range.start + k])
            ));
        }
        for i in old_range.clone().skip(paired) {
            out.push(format!("line {} removed: {}", i + 1, text(old_lines[i])));
        }
        // Numbered by the user's file: after its line that the copy keeps above the insertion.
        let above = match old_range.end {
            0 => "at the top".to_string(),
            n => format!("after line {n}"),
        };
        for i in new_range.clone().skip(paired) {
            out.push(format!("added {above}: {}", text(new_lines[i])));
        }
    }
    out
}

/// The command as a shell reads it back: each word that a POSIX shell would split, expand or
/// glob is single-quoted, one that is not UTF-8 written as bash's `$'\xNN'`. Words of flags and
/// overrides (`--batch_size=8`, `data.batch_size=32`, `a,b`) stay bare: `=`, `,` and `%` are
/// ordinary characters in any word but a command's first, so the plan stays readable (shlex's
/// quoting, kept for splitting hooks, quotes them too).
fn words(argv: &[OsString]) -> String {
    argv.iter()
        .map(|t| shell_word(t))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_word(word: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Some(text) = word.to_str() else {
        let mut quoted = String::from("$'");
        for &b in word.as_bytes() {
            match b {
                b'\\' | b'\'' => {
                    quoted.push('\\');
                    quoted.push(b as char);
                }
                0x20..=0x7e => quoted.push(b as char),
                _ => quoted.push_str(&format!("\\x{b:02x}")),
            }
        }
        quoted.push('\'');
        return quoted;
    };
    let bare = |c: char| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c);
    // `=` first is zsh's command lookup, `~` first a home directory.
    if !text.is_empty() && text.chars().all(bare) && !text.starts_with('=') {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_changes_read_as_edits_insertions_and_removals_of_the_users_lines() {
        // (old text, new text, lines)
        let table: &[(&str, &str, &[&str])] = &[
            (
                "a: 1\nbatch: 8\n",
                "a: 1\nbatch: 4\n",
                &["line 2: batch: 8 → batch: 4"],
            ),
            // A key written into a JSON copy: one insertion, the lines after it not shifted.
            (
                "{\n  \"out\": \"o\",\n  \"bs\": 16\n}\n",
                "{\n  \"accum\": 2,\n  \"out\": \"o\",\n  \"bs\": 8\n}\n",
                &[
                    "added after line 1: \"accum\": 2,",
                    "line 3: \"bs\": 16 → \"bs\": 8",
                ],
            ),
            // Appended to a YAML file, and at the top of one.
            (
                "bs: 8\n",
                "bs: 4\naccum: 2\n",
                &["line 1: bs: 8 → bs: 4", "added after line 1: accum: 2"],
            ),
            (
                "bs: 8\n",
                "accum: 2\nbs: 8\n",
                &["added at the top: accum: 2"],
            ),
            ("bs: 8\nx: 1\n", "bs: 8\n", &["line 2 removed: x: 1"]),
            ("same\n", "same\n", &[]),
        ];
        for (old, new, want) in table {
            assert_eq!(line_changes(old, new), *want, "{old:?} → {new:?}");
        }
    }

    #[test]
    fn printed_commands_paste_back_into_a_shell_word_for_word() {
        use std::os::unix::ffi::OsStringExt;
        let command: Vec<OsString> = [
            "python3",
            "train.py",
            "--batch_size=8",
            "data.batch_size=32",
            "--name",
            "my run",
            "it's",
            "*.yaml",
            "$HOME",
            "",
            "=x",
            "~/c.yaml",
        ]
        .iter()
        .map(OsString::from)
        .chain([OsString::from_vec(b"caf\xe9'\\".to_vec())])
        .collect();
        let line = words(&command);
        assert_eq!(
            line,
            r#"python3 train.py --batch_size=8 data.batch_size=32 --name 'my run' 'it'\''s' '*.yaml' '$HOME' '' '=x' '~/c.yaml' $'caf\xe9\'\\'"#
        );
        // bash reads it back as the same words, bytes and all.
        let out = std::process::Command::new("bash")
            .args(["-c", &format!("printf '%s\\0' {line}")])
            .output()
            .expect("bash runs");
        let back: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
        let want: Vec<Vec<u8>> = command.iter().map(|w| w.clone().into_vec()).collect();
        assert_eq!(
            back[..back.len() - 1],
            want.iter().map(Vec::as_slice).collect::<Vec<_>>()[..]
        );
    }
}
