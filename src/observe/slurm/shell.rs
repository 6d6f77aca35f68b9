//! Whether a command runs `srun`, read from its words: directly (`srun ...`, `/usr/bin/srun
//! ...`), behind a wrapper that runs the next word (`env X=1 srun`, `nohup srun`), or as a command
//! of a shell's `-c` script (`bash -c "srun python t.py"`, `sh -c 'cd x && exec srun ...'`),
//! where `--memory-max` would cap the shell and srun alone, srun's tasks running in Slurm's
//! cgroups. A script is split into simple commands at `;`, `&`, `|`, newlines, parentheses and
//! backquotes (so at `&&`, `||` and inside `$(...)` too), its quotes and backslashes read as the
//! shell reads them; a command's program is its first word after variable assignments and the
//! words that run the next one (`exec`, `command`, `env`, `nohup`, `time`, and the reserved
//! words `if`, `then`, `do`, `!`, `{` ...). Nothing is expanded or run: `$SRUN` or a script file
//! (`bash train.sh`) is not seen into.

use std::ffi::OsString;
use std::path::Path;

/// How deep shells within shells are read (`bash -c "sh -c 'srun ...'"`).
const MAX_DEPTH: usize = 4;

/// Whether the command `argv` runs srun (see the module's words).
pub fn runs_srun(argv: &[OsString]) -> bool {
    let words: Vec<String> = argv
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    command_runs_srun(&words, MAX_DEPTH)
}

/// Whether one simple command runs srun: its program is srun, or a shell whose `-c` script
/// does.
fn command_runs_srun(words: &[String], depth: usize) -> bool {
    let Some(at) = program_at(words) else {
        return false;
    };
    if super::is_srun_command(std::ffi::OsStr::new(&words[at])) {
        return true;
    }
    let program = file_name(&words[at]);
    if depth == 0 || !is_shell(program) {
        return false;
    }
    shell_script(&words[at + 1..]).is_some_and(|script| {
        simple_commands(script)
            .iter()
            .any(|command| command_runs_srun(command, depth - 1))
    })
}

fn file_name(word: &str) -> &str {
    Path::new(word)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(word)
}

fn is_shell(program: &str) -> bool {
    matches!(
        program,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "yash" | "posh"
    )
}

/// Where the program of a simple command is: past variable assignments, reserved words and
/// the wrappers that run the word after them (with their options). `None` where the command
/// runs nothing (`command -v srun` only looks srun up).
fn program_at(words: &[String]) -> Option<usize> {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        let next = words.get(i + 1).map(String::as_str);
        i += match file_name(word) {
            _ if is_assignment(word) => 1,
            "!" | "{" | "if" | "then" | "else" | "elif" | "do" | "while" | "until" | "nohup" => 1,
            "command" => match next {
                Some("-v" | "-V") => return None,
                Some("-p") => 2,
                _ => 1,
            },
            "time" => 1 + usize::from(next == Some("-p")),
            // exec's -c and -l take nothing, -a takes the name it gives the program.
            "exec" => {
                let mut n = 1;
                while let Some(opt) = words.get(i + n).filter(|w| w.starts_with('-')) {
                    n += if opt == "-a" { 2 } else { 1 };
                }
                n
            }
            // env's -u NAME and -C DIR take a word; its assignments are skipped as assignments.
            "env" => {
                let mut n = 1;
                while let Some(opt) = words.get(i + n).filter(|w| w.starts_with('-')) {
                    n += if matches!(opt.as_str(), "-u" | "-C") {
                        2
                    } else {
                        1
                    };
                }
                n
            }
            _ => return Some(i),
        };
    }
    None
}

/// `NAME=value`, as a shell reads a command's leading assignments.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The script of a shell's arguments (those after its program) where they give it `-c`
/// (alone or in a cluster: `-c`, `-lc`, `-euc`), past its other options (`-o pipefail`,
/// `--login`, `--rcfile FILE`); `None` where the shell reads a file or its stdin.
fn shell_script(args: &[String]) -> Option<&str> {
    let mut with_c = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "--" {
            return args.get(i + 1).filter(|_| with_c).map(String::as_str);
        }
        if let Some(long) = arg.strip_prefix("--") {
            i += if matches!(long, "rcfile" | "init-file") {
                2
            } else {
                1
            };
            continue;
        }
        if let Some(cluster) = arg.strip_prefix(['-', '+']).filter(|c| !c.is_empty()) {
            with_c |= arg.starts_with('-') && cluster.contains('c');
            // -o and -O name an option in the word after.
            i += 1 + usize::from(cluster.contains(['o', 'O']));
            continue;
        }
        return with_c.then_some(arg.as_str());
    }
    None
}

/// The simple commands of a shell script, each as its words with quotes and backslashes
/// removed; comments dropped.
fn simple_commands(script: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    let end_word = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' if chars.peek().is_some_and(|n| "\"\\$`".contains(*n)) => {
                            word.extend(chars.next());
                        }
                        c => word.push(c),
                    }
                }
            }
            '\\' => match chars.next() {
                // A line continuation joins the lines.
                Some('\n') | None => {}
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
            },
            '#' if !in_word => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                end_word(&mut words, &mut word, &mut in_word);
                commands.push(std::mem::take(&mut words));
            }
            ' ' | '\t' => end_word(&mut words, &mut word, &mut in_word),
            '\n' | ';' | '&' | '|' | '(' | ')' | '`' => {
                end_word(&mut words, &mut word, &mut in_word);
                commands.push(std::mem::take(&mut words));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    commands.push(words);
    commands.retain(|c| !c.is_empty());
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn srun_is_seen_directly_behind_wrappers_and_in_shell_scripts() {
        // (the command's words, whether it runs srun)
        let table: &[(&[&str], bool)] = &[
            (&["srun", "python", "t.py"], true),
            (&["/usr/bin/srun", "-n", "2", "python", "t.py"], true),
            (&["python", "t.py", "srun"], false),
            (&["srun2", "x"], false),
            (
                &["env", "OMP_NUM_THREADS=1", "srun", "python", "t.py"],
                true,
            ),
            (&["/usr/bin/env", "-u", "X", "srun", "x"], true),
            (&["nohup", "srun", "x"], true),
            (&["bash", "-c", "srun python t.py"], true),
            (
                &["sh", "-c", "cd /x && exec srun --label python t.py"],
                true,
            ),
            (
                &["/bin/bash", "-lc", "source env.sh; srun python t.py"],
                true,
            ),
            (
                &["bash", "-e", "-o", "pipefail", "-c", "srun x | tee log"],
                true,
            ),
            (&["bash", "--login", "-c", "X=1 Y=2 srun x"], true),
            (&["bash", "-c", "python prep.py\nsrun x"], true),
            (
                &["bash", "-c", "python prep.py || /opt/slurm/bin/srun x"],
                true,
            ),
            (&["bash", "-c", "if true; then srun x; fi"], true),
            (&["bash", "-c", "(srun x)"], true),
            (&["bash", "-c", "out=$(srun hostname)"], true),
            (&["bash", "-c", "'srun' x"], true),
            (&["bash", "-c", "exec -a trainer srun x"], true),
            (&["bash", "-c", "time -p srun x"], true),
            (&["bash", "-c", "env X=1 srun x"], true),
            (&["bash", "-c", "sh -c 'srun x'"], true),
            (&["bash", "-c", "srun x", "argv0"], true),
            (&["bash", "-c", "python t.py srun"], false),
            (&["bash", "-c", "echo srun; python t.py"], false),
            (&["bash", "-c", "python t.py # srun later"], false),
            (&["bash", "-c", "command -v srun && python t.py"], false),
            (&["bash", "-c", "python t.py --launcher=srun"], false),
            (&["bash", "-c", "\"python t.py; srun x\""], false),
            (&["bash", "-c", "$SRUN x"], false),
            // A script file, or no -c: nothing to read.
            (&["bash", "train.sh", "srun"], false),
            (&["bash", "-e", "srun"], false),
            (&["python", "-c", "srun x"], false),
            (&["bash"], false),
        ];
        for (words, want) in table {
            assert_eq!(runs_srun(&argv(words)), *want, "{words:?}");
        }
    }

    /// `sh -c '...'` around `srun x`, `shells` deep.
    fn nested(shells: usize) -> Vec<OsString> {
        let mut script = "srun x".to_string();
        for _ in 1..shells {
            script = format!("sh -c '{}'", script.replace('\'', "'\\''"));
        }
        argv(&["sh", "-c", &script])
    }

    #[test]
    fn shells_within_shells_are_read_only_so_deep() {
        assert!(runs_srun(&nested(MAX_DEPTH)));
        assert!(!runs_srun(&nested(MAX_DEPTH + 1)));
    }
}
