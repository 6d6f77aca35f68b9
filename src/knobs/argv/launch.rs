//! Where a command's script starts behind the programs that launch it: `torchrun [opts] train.py`,
//! `python -m torch.distributed.run [opts] train.py`, `accelerate launch [opts] train.py`,
//! `deepspeed [opts] train.py`, `python [opts] -m pkg.train`, torchtune's `tune run [torchrun opts]
//! RECIPE` (its `run` takes torchrun's options, then the recipe), and the programs that run another
//! command (`srun [opts] CMD`, `uv run [opts] CMD`, `poetry run CMD`, `conda run -n ENV CMD`),
//! nested in any order (`srun torchrun train.py`). Knobs are searched only in the script's own
//! arguments: a launcher's flags (accelerate's `--gradient_accumulation_steps`, deepspeed's
//! `--num_gpus`) are never read nor rewritten. Pure: argv in, an index out.
//!
//! Each launcher's options are walked the way its own parser would, knowing which options take
//! a value (`torchrun --nproc_per_node 2 train.py`: `2` is no script). An option this table does
//! not know is taken as the launcher mostly uses them (torchrun's and srun's take a value, uv's
//! are switches), except that a following token that looks like a program (`train.py`,
//! `python`) is never taken as an option's value: a script is not what launchers' options hold.
//! A command whose program is no launcher is searched whole, as before.

use std::ffi::OsString;
use std::path::Path;

/// What is in front of the script.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Launch {
    /// The launchers seen, outermost first (`srun`, `torchrun`); empty for a plain
    /// `python train.py` or a program that is no launcher.
    pub launchers: Vec<String>,
    /// The argv index of the script's first own argument: knobs are searched from here.
    pub script_args: usize,
    /// The script, module or command the launchers run (`train.py`, `pkg.train`), where one was
    /// found behind a launcher or an interpreter.
    pub script: Option<String>,
}

/// How one launcher's options are read.
struct Options {
    /// Options that take the next token as their value (or `-xVALUE` / `--opt=VALUE`).
    values: &'static [&'static str],
    /// Options that take no value.
    switches: &'static [&'static str],
    /// Whether an option in neither list takes a value.
    unknown_takes_value: bool,
}

// Long options are compared with `-` inside the name read as `_` (`--nproc-per-node` is
// `--nproc_per_node`: torchrun and accelerate accept both).

/// torch/distributed/run.py: nearly every option takes a value.
const TORCHRUN: Options = Options {
    values: &["-r", "-t"],
    switches: &[
        "-m",
        "--module",
        "--standalone",
        "--no_python",
        "--run_path",
        "--use_env",
        "--virtual_local_rank",
        "-h",
        "--help",
    ],
    unknown_takes_value: true,
};

/// accelerate/commands/launch.py: its own `--gradient_accumulation_steps`, `--num_processes`,
/// `--mixed_precision` take values; the rest are switches listed here.
const ACCELERATE: Options = Options {
    values: &[],
    switches: &[
        "--cpu",
        "--multi_gpu",
        "--tpu",
        "--ipex",
        "--use_xpu",
        "-m",
        "--module",
        "--no_python",
        "--debug",
        "-q",
        "--quiet",
        "--use_deepspeed",
        "--use_fsdp",
        "--use_megatron_lm",
        "--same_network",
        "--tpu_use_cluster",
        "--tpu_use_sudo",
        "--downcast_bf16",
        "--enable_cpu_affinity",
        "--dynamo_use_fullgraph",
        "--dynamo_use_dynamic",
        "--dynamo_use_regional_compilation",
        "-h",
        "--help",
    ],
    unknown_takes_value: true,
};

/// deepspeed/launcher/runner.py.
const DEEPSPEED: Options = Options {
    values: &["-H", "-i", "-e"],
    switches: &[
        "--module",
        "--no_python",
        "--no_local_rank",
        "--no_ssh_check",
        "--no_ssh",
        "--force_multi",
        "--save_pid",
        "--elastic_training",
        "--bind_cores_to_rank",
        "-h",
        "--help",
    ],
    unknown_takes_value: true,
};

/// srun(1): short options with an argument, and the long ones that take none (a long option's
/// optional argument is only ever joined with `=`).
const SRUN: Options = Options {
    values: &[
        "-A", "-B", "-b", "-C", "-c", "-D", "-d", "-e", "-G", "-i", "-J", "-L", "-M", "-m", "-N",
        "-n", "-o", "-p", "-q", "-r", "-S", "-T", "-t", "-W", "-w", "-x",
    ],
    switches: &[
        "--exclusive",
        "--overcommit",
        "--oversubscribe",
        "--label",
        "--unbuffered",
        "--verbose",
        "--quiet",
        "--pty",
        "--no_kill",
        "--kill_on_bad_exit",
        "--x11",
        "--overlap",
        "--exact",
        "--spread_job",
        "--test_only",
        "--disable_status",
        "--multi_prog",
        "--preserve_env",
        "--propagate",
        "--contiguous",
        "--hold",
        "--immediate",
        "--use_min_nodes",
        "--no_allocate",
        "--reboot",
        "--container_remap_root",
        "--no_container_remap_root",
        "--container_mount_home",
        "--no_container_mount_home",
        "--container_writable",
        "--container_readonly",
        "--no_container_entrypoint",
        "--help",
        "--usage",
        "--version",
    ],
    unknown_takes_value: true,
};

/// `uv [opts] run [opts]`: mostly switches (`--frozen`, `--no-sync`).
const UV: Options = Options {
    values: &[
        "--with",
        "--with_editable",
        "--with_requirements",
        "-p",
        "--python",
        "--package",
        "--extra",
        "--no_extra",
        "--group",
        "--only_group",
        "--no_group",
        "--env_file",
        "--directory",
        "--project",
        "--index",
        "--default_index",
        "-i",
        "--index_url",
        "--extra_index_url",
        "-f",
        "--find_links",
        "--index_strategy",
        "--keyring_provider",
        "--resolution",
        "--prerelease",
        "--exclude_newer",
        "--link_mode",
        "-C",
        "--config_setting",
        "--refresh_package",
        "--reinstall_package",
        "-P",
        "--upgrade_package",
        "--no_build_package",
        "--no_binary_package",
        "--cache_dir",
        "--config_file",
        "--color",
        "--python_platform",
        "--allow_insecure_host",
        "--fork_strategy",
    ],
    switches: &[],
    unknown_takes_value: false,
};

/// `poetry [opts] run CMD`.
const POETRY: Options = Options {
    values: &["-C", "--directory", "-P", "--project"],
    switches: &[],
    unknown_takes_value: false,
};

/// `conda run -n ENV [opts] CMD` (mamba and micromamba read the same).
const CONDA: Options = Options {
    values: &["-n", "--name", "-p", "--prefix", "--cwd"],
    switches: &[],
    unknown_takes_value: false,
};

/// `tune [opts] run`: `tune` itself takes only `-h`; `run`'s options are torchrun's.
const TUNE: Options = Options {
    values: &[],
    switches: &["-h", "--help"],
    unknown_takes_value: false,
};

/// The Python interpreter's own options (`python -u -W ignore train.py`); `-m` and `-c` end
/// them and are handled apart.
const PYTHON: Options = Options {
    values: &["-W", "-X", "--check_hash_based_pycs"],
    switches: &[],
    unknown_takes_value: false,
};

/// Modules that are torchrun when run with `python -m`.
const TORCH_RUN_MODULES: &[&str] = &["torch.distributed.run", "torch.distributed.launch"];

/// The programs that run a Python script or module after their options.
fn script_launcher(program: &str) -> Option<&'static Options> {
    match program {
        "torchrun" => Some(&TORCHRUN),
        "deepspeed" => Some(&DEEPSPEED),
        "accelerate-launch" => Some(&ACCELERATE),
        _ => None,
    }
}

/// `python`, `python3`, `python3.11`.
fn is_python(program: &str) -> bool {
    program
        .strip_prefix("python")
        .is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

fn basename(token: &str) -> &str {
    Path::new(token)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(token)
}

/// A token that names a program or script rather than an option's value.
fn program_like(token: &str) -> bool {
    let name = basename(token);
    token.ends_with(".py")
        || is_python(name)
        || script_launcher(name).is_some()
        || [
            "srun",
            "uv",
            "poetry",
            "conda",
            "mamba",
            "micromamba",
            "accelerate",
            "tune",
        ]
        .contains(&name)
}

/// `--nproc-per-node` → `--nproc_per_node`; short options as they are.
fn canonical(option: &str) -> String {
    match option.strip_prefix("--") {
        Some(name) => format!("--{}", name.replace('-', "_")),
        None => option.to_string(),
    }
}

/// What ended a walk over a launcher's options.
#[derive(Debug, PartialEq, Eq)]
enum Stop<'a> {
    /// The first positional token, at this index.
    Positional(usize),
    /// One of `ends` (Python's `-m MODULE`, `-c CODE`): the option, its value, and the index of
    /// the token holding the value (the option's own for `-mpkg.train`).
    Ending {
        option: char,
        value: &'a str,
        at: usize,
    },
}

/// Walks the options of one launcher from `i`, as its parser would. `ends`: short options
/// whose value ends the options. `None` when argv ends first, or a token is not UTF-8 (then
/// nothing about the command is assumed).
fn walk<'a>(
    argv: &'a [OsString],
    mut i: usize,
    options: &Options,
    ends: &[char],
) -> Option<Stop<'a>> {
    let text = |j: usize| argv.get(j).and_then(|t| t.to_str());
    let takes_value = |name: &str, next: usize| {
        if options.values.contains(&name) {
            true
        } else if options.switches.contains(&name) {
            false
        } else {
            options.unknown_takes_value && text(next).is_some_and(|n| !program_like(n))
        }
    };
    loop {
        let token = text(i)?;
        if token == "--" {
            return (i + 1 < argv.len()).then_some(Stop::Positional(i + 1));
        }
        if !token.starts_with('-') || token == "-" {
            return Some(Stop::Positional(i));
        }
        if token.starts_with("--") {
            let joined = token.contains('=');
            i += if !joined && takes_value(&canonical(token), i + 1) {
                2
            } else {
                1
            };
            continue;
        }
        // A cluster of short options (`-uB`, `-N2`, `-mpkg.train`): each letter a switch until
        // one that takes a value, which is the rest of the token or the next one.
        let letters = &token[1..];
        let mut next = i + 1;
        for (at, letter) in letters.char_indices() {
            let rest = &letters[at + letter.len_utf8()..];
            if ends.contains(&letter) {
                return match rest {
                    "" => text(i + 1).map(|value| Stop::Ending {
                        option: letter,
                        value,
                        at: i + 1,
                    }),
                    value => Some(Stop::Ending {
                        option: letter,
                        value,
                        at: i,
                    }),
                };
            }
            if takes_value(&format!("-{letter}"), i + 1) {
                if rest.is_empty() {
                    next = i + 2;
                }
                break;
            }
        }
        i = next;
    }
}

/// Where the script's own arguments start in `argv`, and which launchers stand before it.
pub fn launch(argv: &[OsString]) -> Launch {
    let mut launchers = Vec::new();
    match from(argv, 0, &mut launchers) {
        Some((script, start)) if start <= argv.len() => Launch {
            launchers,
            script_args: start,
            script: Some(script),
        },
        // No launcher, or one whose command could not be told: the whole command is searched.
        _ => Launch {
            launchers: Vec::new(),
            script_args: 1.min(argv.len()),
            script: None,
        },
    }
}

/// The script behind the program at `i`, and the index after it; `None` when the program is no
/// launcher or interpreter. Records each launcher seen.
fn from(argv: &[OsString], i: usize, launchers: &mut Vec<String>) -> Option<(String, usize)> {
    let token = argv.get(i)?.to_str()?;
    let program = basename(token);
    let text = |j: usize| argv.get(j).and_then(|t| t.to_str());
    let script_at = |j: usize| Some((text(j)?.to_string(), j + 1));
    if is_python(program) {
        return match walk(argv, i + 1, &PYTHON, &['m', 'c'])? {
            Stop::Positional(j) => script_at(j),
            Stop::Ending {
                option: 'm',
                value,
                at,
            } if TORCH_RUN_MODULES.contains(&value) => {
                launchers.push(format!("python -m {value}"));
                script_after(argv, at + 1, &TORCHRUN)
            }
            Stop::Ending { value, at, .. } => Some((value.to_string(), at + 1)),
        };
    }
    if let Some(options) = script_launcher(program) {
        launchers.push(program.to_string());
        return script_after(argv, i + 1, options);
    }
    let (options, subcommand) = match program {
        "accelerate" => (&ACCELERATE, "launch"),
        "uv" => (&UV, "run"),
        "poetry" => (&POETRY, "run"),
        "conda" | "mamba" | "micromamba" => (&CONDA, "run"),
        // torchtune's console script: `tune run` is torchrun's parser with the script renamed
        // the recipe (torchtune/_cli/run.py), and it has no global options.
        "tune" => (&TUNE, "run"),
        "srun" => {
            launchers.push(program.to_string());
            return command_after(argv, i + 1, &SRUN, launchers);
        }
        _ => return None,
    };
    // The subcommand after the program's global options (`uv --directory d run`).
    let Stop::Positional(sub) = walk(argv, i + 1, options, &[])? else {
        return None;
    };
    if text(sub)? != subcommand {
        return None;
    }
    launchers.push(format!("{program} {subcommand}"));
    if program == "accelerate" {
        script_after(argv, sub + 1, options)
    } else if program == "tune" {
        script_after(argv, sub + 1, &TORCHRUN)
    } else {
        command_after(argv, sub + 1, options, launchers)
    }
}

/// The script after a script launcher's options.
fn script_after(argv: &[OsString], i: usize, options: &Options) -> Option<(String, usize)> {
    match walk(argv, i, options, &[])? {
        Stop::Positional(j) => Some((argv[j].to_str()?.to_string(), j + 1)),
        Stop::Ending { .. } => None,
    }
}

/// The command after a command launcher's options, itself perhaps a launcher.
fn command_after(
    argv: &[OsString],
    i: usize,
    options: &Options,
    launchers: &mut Vec<String>,
) -> Option<(String, usize)> {
    let Stop::Positional(j) = walk(argv, i, options, &[])? else {
        return None;
    };
    from(argv, j, launchers).or_else(|| Some((argv[j].to_str()?.to_string(), j + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::argv;

    #[test]
    fn the_script_is_found_behind_its_launchers() {
        // (command, launchers, the script, the first word of its own arguments or "" at the end)
        let table: &[(&str, &[&str], &str, &str)] = &[
            ("python train.py --bs 8", &[], "train.py", "--bs"),
            ("/opt/venv/bin/python3.11 -u -W ignore train.py --bs 8", &[], "train.py", "--bs"),
            ("python -u -m pkg.train --bs 8", &[], "pkg.train", "--bs"),
            ("python -mpkg.train --bs 8", &[], "pkg.train", "--bs"),
            ("python -c print(1) --bs 8", &[], "print(1)", "--bs"),
            ("python -OO -Xdev train.py --bs 8", &[], "train.py", "--bs"),
            (
                "torchrun --nproc_per_node 2 --nnodes=1 --rdzv-backend c10d --standalone train.py --bs 8",
                &["torchrun"],
                "train.py",
                "--bs",
            ),
            ("torchrun --nproc-per-node=4 -m pkg.train --bs 8", &["torchrun"], "pkg.train", "--bs"),
            (
                "python -m torch.distributed.run --nproc_per_node 8 train.py --bs 8",
                &["python -m torch.distributed.run"],
                "train.py",
                "--bs",
            ),
            (
                "python3 -u -m torch.distributed.launch --use_env --nproc_per_node 2 train.py --bs 8",
                &["python -m torch.distributed.launch"],
                "train.py",
                "--bs",
            ),
            (
                "accelerate launch --num_processes 2 --multi_gpu --mixed_precision bf16 --gradient_accumulation_steps 4 train.py --bs 8",
                &["accelerate launch"],
                "train.py",
                "--bs",
            ),
            ("accelerate launch --config_file a.yaml -m pkg.train --bs 8", &["accelerate launch"], "pkg.train", "--bs"),
            (
                "deepspeed --num_gpus 2 -H hosts --master_port 2950 train.py --deepspeed ds.json",
                &["deepspeed"],
                "train.py",
                "--deepspeed",
            ),
            ("srun -N 2 --ntasks-per-node 4 -l --gres=gpu:4 python train.py --bs 8", &["srun"], "train.py", "--bs"),
            ("srun -N2 -lu ./train.sh --bs 8", &["srun"], "./train.sh", "--bs"),
            ("srun --exclusive torchrun --nproc_per_node 4 train.py --bs 8", &["srun", "torchrun"], "train.py", "--bs"),
            ("uv run --frozen --with numpy torchrun --nproc_per_node 2 train.py --bs 8", &["uv run", "torchrun"], "train.py", "--bs"),
            ("uv run -- python train.py --bs 8", &["uv run"], "train.py", "--bs"),
            ("uv --directory proj run train.py --bs 8", &["uv run"], "train.py", "--bs"),
            ("poetry run python -m pkg.train --bs 8", &["poetry run"], "pkg.train", "--bs"),
            ("conda run -n ml --no-capture-output python train.py --bs 8", &["conda run"], "train.py", "--bs"),
            ("micromamba run -n ml ./train --bs 8", &["micromamba run"], "./train", "--bs"),
            // An option this table does not know never swallows the script.
            ("torchrun --some-new-switch train.py --bs 8", &["torchrun"], "train.py", "--bs"),
            ("srun --some-new-switch python train.py --bs 8", &["srun"], "train.py", "--bs"),
            // A script named like a launcher or its options is still the script.
            ("torchrun --nproc_per_node 2 standalone.py --standalone --bs 8", &["torchrun"], "standalone.py", "--standalone"),
            ("python launch.py --bs 8", &[], "launch.py", "--bs"),
            ("accelerate launch --num_processes 2 torchrun.py --num_processes 4", &["accelerate launch"], "torchrun.py", "--num_processes"),
            ("uv run run.py --bs 8", &["uv run"], "run.py", "--bs"),
            // torchtune's `tune run`: torchrun's options, then the recipe, then its words.
            (
                "tune run lora_finetune_single_device --config llama3_2/1B_lora_single_device batch_size=8",
                &["tune run"],
                "lora_finetune_single_device",
                "--config",
            ),
            (
                "srun tune run --nnodes 1 --nproc_per_node 4 full_finetune_distributed --config c.yaml",
                &["srun", "tune run"],
                "full_finetune_distributed",
                "--config",
            ),
            ("python train.py", &[], "train.py", ""),
        ];
        for &(cmd, launchers, script, first) in table {
            let a = argv(cmd);
            let found = launch(&a);
            assert_eq!(found.launchers, launchers, "{cmd}");
            assert_eq!(found.script.as_deref(), Some(script), "{cmd}");
            let first_own = a.get(found.script_args).map_or("", |t| t.to_str().unwrap());
            assert_eq!(first_own, first, "{cmd}");
        }
    }

    #[test]
    fn a_program_that_is_no_launcher_is_searched_whole() {
        for cmd in [
            "./train.sh --bs 8",
            "env -- python3 t.py --bs 8",
            "accelerate config --bs 8",
            "uv pip install x",
            "tune ls",
            "torchrun --nproc_per_node 2",
            "python",
            "",
        ] {
            let a = argv(cmd);
            let found = launch(&a);
            assert_eq!(
                found,
                Launch {
                    launchers: vec![],
                    script_args: 1.min(a.len()),
                    script: None
                },
                "{cmd}"
            );
        }
    }
}
