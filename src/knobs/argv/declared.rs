//! The options a training script's argparse parser declares, read from the script's text: each
//! `add_argument('-b', '--batch-size', ..., default=128)` call's option names and its integer
//! default. The knob search uses them to take a short flag only where the script says what it
//! is (`-b` is timm's batch, and means other things elsewhere) and to add an accumulation flag
//! the parser declares but the command lacks, from its declared default.
//!
//! Read with the Python tokenizer of the config files ([`crate::knobs::file::py::calls`]), not
//! run: every `add_argument(` call's leading string arguments (the option strings) and a
//! `default=` that is an integer literal. An option built at run time (a name from a variable,
//! a parser from a dataclass such as `HfArgumentParser`, one in another module) is not seen:
//! then nothing is declared, and nothing is taken on the script's word; the probe still sees
//! the parser inside the job.
//!
//! [`read`] finds the script behind the command (a Python script after its interpreter or
//! launcher, or the one a small shell wrapper runs with the wrapper's own arguments, `"$@"`:
//! timm's `./distributed_train.sh 4 ...` runs `torchrun ... train.py "$@"`) and reads it as the
//! job's user, bounded; it writes nothing and runs nothing.

use std::ffi::OsString;
use std::path::Path;

/// The most bytes read of a script or a shell wrapper: a training script is far smaller.
const SCRIPT_MAX_BYTES: u64 = 4 << 20;

/// One `add_argument` call: its option strings and its integer default, where it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    pub names: Vec<String>,
    pub default: Option<u64>,
}

/// What a script declares, and the script's name for the lines that say so.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Declared {
    /// The script as the command (or its wrapper) names it (`train.py`).
    pub script: String,
    pub options: Vec<Declaration>,
}

impl Declared {
    /// The declarations in a script's text; none where it is not Python oomguard can tokenize.
    pub fn parse(script: &str, text: &str) -> Declared {
        let options = crate::knobs::file::py::calls(text, "add_argument")
            .unwrap_or_default()
            .into_iter()
            .filter_map(declaration)
            .collect();
        Declared {
            script: script.to_string(),
            options,
        }
    }

    /// Whether an option of the parser is spelled `name`.
    pub fn declares(&self, name: &str) -> bool {
        self.options
            .iter()
            .any(|d| d.names.iter().any(|n| n == name))
    }

    /// The short aliases (`-b`) declared together with the long option `long`.
    pub fn aliases_of(&self, long: &str) -> Vec<String> {
        self.options
            .iter()
            .filter(|d| d.names.iter().any(|n| n == long))
            .flat_map(|d| d.names.iter())
            .filter(|n| n.starts_with('-') && !n.starts_with("--") && *n != long)
            .cloned()
            .collect()
    }

    /// The declared default of the option spelled `name`, where it is a whole number above 0.
    pub fn default_of(&self, name: &str) -> Option<u64> {
        self.options
            .iter()
            .find(|d| d.names.iter().any(|n| n == name))
            .and_then(|d| d.default)
    }

    /// The first option, in `flags`' order, the parser declares: its long name (the one it is
    /// written with when added) and its default.
    pub fn first_of(&self, flags: &[&str]) -> Option<(String, Option<u64>)> {
        flags.iter().find_map(|flag| {
            let d = self
                .options
                .iter()
                .find(|d| d.names.iter().any(|n| n == flag))?;
            let long = d
                .names
                .iter()
                .find(|n| n.starts_with("--"))
                .map_or(*flag, String::as_str);
            Some((long.to_string(), d.default))
        })
    }
}

/// The option strings and integer default of one `add_argument` call; `None` for a
/// positional argument or a call whose first argument is not a string literal.
fn declaration(call: crate::knobs::file::py::Call) -> Option<Declaration> {
    let names: Vec<String> = call
        .strings
        .into_iter()
        .filter(|name| name.starts_with('-'))
        .collect();
    if names.is_empty() {
        return None;
    }
    let default = call
        .keywords
        .into_iter()
        .find_map(|(key, value)| match value {
            Some(crate::knobs::file::Scalar::Int(n)) if key == "default" && n >= 1 => {
                u64::try_from(n).ok()
            }
            _ => None,
        });
    Some(Declaration { names, default })
}

/// The script the command runs and what its parser declares, read as the job's user: the
/// Python script behind an interpreter or launcher (`python train.py`, `torchrun ... train.py`),
/// or the Python script a shell wrapper runs with its own arguments (`./distributed_train.sh 4
/// ...`, `bash run.sh ...`: a line of the wrapper that ends with `"$@"` and names a `.py`).
/// `None` where there is no such script or it cannot be read.
pub fn read(argv: &[OsString], cwd: &Path) -> Option<Declared> {
    let script = script_of(argv, cwd)?;
    let text = crate::guard::principal::read_text(&cwd.join(&script), SCRIPT_MAX_BYTES)?;
    Some(Declared::parse(&script, &text))
}

/// The Python script the command runs, as named (relative to `cwd` or absolute).
fn script_of(argv: &[OsString], cwd: &Path) -> Option<String> {
    let launch = super::launch(argv);
    if let Some(script) = launch.script.as_deref().filter(|s| s.ends_with(".py")) {
        return Some(script.to_string());
    }
    // `python -m pkg.train`: Python looks in the working directory first, so a module of the
    // project is `pkg/train.py` (or a package's `__main__.py`) there; an installed one is not read.
    if let Some(module) = launch.script.as_deref().filter(|s| is_module_name(s)) {
        let path = module.replace('.', "/");
        return [format!("{path}.py"), format!("{path}/__main__.py")]
            .into_iter()
            .find(|file| {
                crate::guard::principal::as_user(|| Ok(cwd.join(file).is_file())).unwrap_or(false)
            });
    }
    let program = argv.first()?.to_str()?;
    let base = program.rsplit('/').next().unwrap_or(program);
    let wrapper = if base.ends_with(".sh") {
        program
    } else if matches!(base, "bash" | "sh") {
        argv.get(1)?.to_str().filter(|s| s.ends_with(".sh"))?
    } else {
        return None;
    };
    wrapped_script(&crate::guard::principal::read_text(
        &cwd.join(wrapper),
        SCRIPT_MAX_BYTES,
    )?)
}

/// `pkg.train`: dotted Python identifiers, as `python -m` takes a module.
fn is_module_name(text: &str) -> bool {
    !text.is_empty()
        && text.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
                && part.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
        })
}

/// The `.py` a shell wrapper passes its own arguments to: the one word ending in `.py` on the
/// single line that ends with `"$@"` (or `$@`). Several such lines: unknown, `None`.
pub fn wrapped_script(text: &str) -> Option<String> {
    let passing: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.ends_with("\"$@\"") || l.ends_with("$@"))
        .collect();
    let [line] = passing.as_slice() else {
        return None;
    };
    let scripts: Vec<&str> = line
        .split_whitespace()
        .filter(|w| w.ends_with(".py"))
        .collect();
    match scripts.as_slice() {
        [one] => Some(one.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// timm's train.py declarations, as it writes them (trimmed).
    const TIMM: &str = r#"
group.add_argument('-b', '--batch-size', type=int, default=128, metavar='N',
                   help='Input batch size for training (default: 128)')
group.add_argument('-vb', '--validation-batch-size', type=int, default=None, metavar='N',
                   help='Validation batch size override (default: None)')
group.add_argument('--grad-accum-steps', type=int, default=1, metavar='N',
                   help='The number of steps to accumulate gradients (default: 1)')
parser.add_argument('data', nargs='?', metavar='DIR', const=None)
# parser.add_argument('-x', '--not-declared', default=3)
"#;

    #[test]
    fn declarations_are_read_with_their_names_and_integer_defaults() {
        let d = Declared::parse("train.py", TIMM);
        let table: &[(&str, bool, Option<u64>, &[&str])] = &[
            ("--batch-size", true, Some(128), &["-b"]),
            ("-b", true, Some(128), &[]),
            ("--validation-batch-size", true, None, &["-vb"]),
            ("--grad-accum-steps", true, Some(1), &[]),
            ("data", false, None, &[]),
            ("--lr", false, None, &[]),
        ];
        for (name, declared, default, aliases) in table {
            assert_eq!(d.declares(name), *declared, "{name}");
            assert_eq!(d.default_of(name), *default, "{name}");
            assert_eq!(d.aliases_of(name), *aliases, "{name}");
        }
        assert_eq!(
            d.first_of(&["--gradient_accumulation_steps", "--grad-accum-steps"]),
            Some(("--grad-accum-steps".to_string(), Some(1)))
        );
    }

    #[test]
    fn only_literal_option_strings_count() {
        let table: &[(&str, &[&str], Option<u64>)] = &[
            (
                "p.add_argument(\"-b\", \"--bs\", default=8)",
                &["-b", "--bs"],
                Some(8),
            ),
            ("p.add_argument(NAME, default=8)", &[], None),
            ("p.add_argument('--x', default=2 * 4)", &["--x"], None),
            ("p.add_argument('--x', default=0)", &["--x"], None),
            (
                "p.add_argument('--x', help='(a, b)', default=1_000)",
                &["--x"],
                Some(1000),
            ),
            (
                "p.add_argument(\n  '-a',  # short\n  '--acc', type=int)",
                &["-a", "--acc"],
                None,
            ),
        ];
        for (text, names, default) in table {
            let d = Declared::parse("t.py", text);
            let got: Vec<&str> = d
                .options
                .iter()
                .flat_map(|o| o.names.iter().map(String::as_str))
                .collect();
            assert_eq!(got, *names, "{text}");
            assert_eq!(
                d.options.first().and_then(|o| o.default),
                *default,
                "{text}"
            );
        }
    }

    #[test]
    fn a_shell_wrapper_names_the_script_it_passes_its_arguments_to() {
        let table: &[(&str, Option<&str>)] = &[
            (
                "#!/bin/bash\nNUM_PROC=$1\nshift\ntorchrun --nproc-per-node=$NUM_PROC train.py \"$@\"\n",
                Some("train.py"),
            ),
            ("python src/train.py $@\n", Some("src/train.py")),
            ("python a.py \"$@\"\npython b.py \"$@\"\n", None),
            ("python a.py --x 1\n", None),
            ("# python a.py \"$@\"\n", None),
        ];
        for (text, want) in table {
            assert_eq!(wrapped_script(text).as_deref(), *want, "{text}");
        }
    }

    #[test]
    fn the_script_is_found_behind_an_interpreter_a_module_or_a_wrapper() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "train.py",
            "p.add_argument('-b', '--batch-size', default=8)\n",
        );
        write(
            "pkg/train.py",
            "p.add_argument('--per_device_train_batch_size', default=8)\n",
        );
        write("app/__main__.py", "p.add_argument('--bs', default=4)\n");
        write(
            "run.sh",
            "#!/bin/sh\ntorchrun --nproc-per-node=2 train.py \"$@\"\n",
        );
        // (command, the script read, an option it declares)
        let table: &[(&str, Option<&str>, &str)] = &[
            ("python3 train.py -b 8", Some("train.py"), "-b"),
            (
                "torchrun --nproc_per_node 2 -m pkg.train --x 1",
                Some("pkg/train.py"),
                "--per_device_train_batch_size",
            ),
            ("python -m app --bs 4", Some("app/__main__.py"), "--bs"),
            ("./run.sh -b 8", Some("train.py"), "-b"),
            // An installed module, not the project's: not read.
            ("python -m torch.utils.bottleneck x", None, ""),
            ("python -m ../evil x", None, ""),
        ];
        for (command, script, option) in table {
            let found = read(&crate::test_util::argv(command), dir.path());
            assert_eq!(
                found.as_ref().map(|d| d.script.as_str()),
                *script,
                "{command}"
            );
            if let Some(d) = found {
                assert!(d.declares(option), "{command}: {d:?}");
            }
        }
    }
}
