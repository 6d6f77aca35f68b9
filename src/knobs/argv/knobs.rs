//! What the knob search returns: a [`Knob`] found in argv (name, part, value, every
//! [`Site`]), how the accumulation relates to the command ([`Accum`]), and the pair with the
//! other names found ([`Knobs`]), with the lines that tell the user about the choice. The
//! search itself is [`super::locate`](mod@super::locate)'s; moving a knob is [`super::place`]'s.

use super::names::is_eval_like;

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
    /// The batch flag; `None` when the command has none (OOM deaths then cannot be relaunched
    /// smaller).
    pub batch: Option<Knob>,
    pub accum: Accum,
    /// Other known batch names present in the command that were not chosen, best first.
    pub batch_also: Vec<String>,
    /// Other known accumulation names present in the command that were not chosen.
    pub accum_also: Vec<String>,
    /// The script's arguments are LightningCLI's ([`is_lightning_cli`](super::is_lightning_cli)).
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

#[cfg(test)]
mod tests {
    use super::super::locate::locate;
    use crate::test_util::argv;

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
}
