//! `oomguard run --dry-run[=CAUSE]`: what each attempt would get — its command, the
//! environment variables set for it, the config-file lines edited — for attempt 1 and each
//! relaunch down the ladder if every attempt died of CAUSE, until the run would give up. Starts
//! nothing and writes nothing: it is the knob model and the policy, printed.

use std::ffi::OsString;
use std::fmt::Write;

use crate::knobs::{patch_copy_name, KnobSet, Value};
use crate::outcome::Cause;
use crate::policy::{self, Decision};
use crate::settings::RunSettings;

/// The whole plan as text, one attempt after another.
pub fn plan(settings: &RunSettings, cause: Cause) -> String {
    let knobs = &settings.knobs;
    let (rules, original) = (knobs.rules(), knobs.originals());
    let mut out = String::new();
    let mut history: Vec<(Cause, Vec<Value>)> = Vec::new();
    let mut values = original.clone();
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
            for (n, (old, new)) in file.text.lines().zip(text.lines()).enumerate() {
                if old != new {
                    let _ = writeln!(out, "    line {}: {} → {}", n + 1, old.trim(), new.trim());
                }
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

fn words(argv: &[OsString]) -> String {
    argv.iter()
        .map(|t| t.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
