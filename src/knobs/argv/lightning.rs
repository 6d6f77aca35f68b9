//! LightningCLI commands: telling one by its subcommand, jsonargparse's dotted flags or a
//! `--config` beside a subcommand, and the config files it names. The accumulation flag it
//! takes is added by [`super::locate`](mod@super::locate); reading the config files is the
//! caller's.

use std::ffi::OsString;

use super::launch::launch;
use super::text;

/// LightningCLI's accumulation, added to a LightningCLI command that lacks it.
pub const LIGHTNING_ACCUM: &str = "--trainer.accumulate_grad_batches";

/// LightningCLI's subcommands: one right after the script marks a LightningCLI command.
pub const LIGHTNING_SUBCOMMANDS: &[&str] = &["fit", "validate", "test", "predict"];

/// jsonargparse groups of a LightningCLI command's dotted flags.
const LIGHTNING_GROUPS: &[&str] = &["--trainer.", "--data.", "--model."];

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

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
}
