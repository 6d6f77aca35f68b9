//! A script's globals as it sets them at the very top (nanoGPT's `train.py` and the config file
//! its configurator execs): the unindented statements outside every block, in file order, each
//! assignment with its value where that is a literal or literal arithmetic, augmented
//! assignments, and `exec(open(FILE).read())`. What runs conditionally or later (a function
//! body) is not read; nothing is edited here.

use super::arithmetic::value_or_arithmetic;
use super::bindings::{header, AUGMENTED};
use super::literal::string_value;
use super::stmt::{matching_close, Stmt};
use super::tokenize::{tokenize, Kind, Line};
use crate::knobs::file::{line_of, EditError, Scalar};

/// A statement at the very top of a module: unindented, outside every `if`/`for`/`try`/`with`
/// block, class and function, so it runs once, unconditionally, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum TopLevel {
    /// `NAME = expr` or `NAME: T = expr`: the value where `expr` is a literal or literal
    /// arithmetic, else what it is (`a call`, `a name, not a literal`, ...). A chained
    /// assignment or a tuple unpacking binds its names to no value.
    Assign {
        name: String,
        value: Result<Scalar, String>,
        line: usize,
    },
    /// `NAME op= expr`: the name's value from here on is not known.
    Augmented {
        name: String,
        op: String,
        line: usize,
    },
    /// `exec(open('FILE').read())`: FILE's code runs here, over the module's globals.
    Exec { file: String, line: usize },
}

/// The module's top-level statements that bind a name or exec a file, in file order. What
/// runs conditionally (an assignment inside `if ddp:`) or later (a function body) is not here:
/// a name's value at the top is what the module sets unconditionally.
pub fn top_level(text: &str) -> Result<Vec<TopLevel>, EditError> {
    let lines = tokenize(text)?;
    let mut out = Vec::new();
    for stmt in top_statements(text, &lines) {
        top_statement(&stmt, &mut out);
    }
    Ok(out)
}

/// The simple statements at the very top of the module, each part of a `;` line apart, in file
/// order.
fn top_statements<'a>(text: &'a str, lines: &'a [Line]) -> impl Iterator<Item = Stmt<'a>> {
    lines
        .iter()
        .filter(|l| l.indent == 0)
        .flat_map(move |line| {
            let stmt = Stmt {
                text,
                toks: &line.tokens,
            };
            // A compound statement's header, with any body on the same line: conditional, or a
            // definition whose body runs later.
            match header(&stmt) {
                Some(_) => Vec::new(),
                None => stmt.split(";"),
            }
        })
}

/// The strings of the module's last top-level `NAME = 'a'` or `NAME = ['a', 'b']` (or a
/// tuple), in order, read with the tokenizer, so a commented-out entry is none. `None` where no
/// such assignment stands at the top, or its value holds anything but plain strings (a name,
/// an f-string, strings that concatenate).
pub fn strings_assigned(text: &str, name: &str) -> Option<Vec<String>> {
    let lines = tokenize(text).ok()?;
    let last = top_statements(text, &lines)
        .filter(|stmt| stmt.is_name(0) && stmt.s(0) == name && stmt.is_op(1, "="))
        .last()?;
    plain_strings(&Stmt {
        text,
        toks: &last.toks[2..],
    })
}

/// `'a'`, `'a', 'b'`, or `[...]`/`(...)` of strings separated by commas (a trailing one
/// allowed; `[]` holds none).
fn plain_strings(value: &Stmt) -> Option<Vec<String>> {
    let bracketed = (value.is_op(0, "[") || value.is_op(0, "("))
        && matching_close(value, 0) == value.toks.len();
    let inner = Stmt {
        text: value.text,
        toks: if bracketed {
            &value.toks[1..value.toks.len() - 1]
        } else {
            value.toks
        },
    };
    let items = inner.split(",");
    let last = items.len() - 1;
    let mut out = Vec::new();
    for (k, item) in items.iter().enumerate() {
        match item.toks {
            [token] => match &token.kind {
                Kind::Str(s) => out.push(string_value(value.text, s).ok()?),
                _ => return None,
            },
            // After a trailing comma, or inside `[]`.
            [] if k == last && (k > 0 || bracketed) => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Records what one simple top-level statement binds or execs.
fn top_statement(stmt: &Stmt, out: &mut Vec<TopLevel>) {
    if stmt.toks.is_empty() {
        return;
    }
    let line = line_of(stmt.text, stmt.at());
    if let Some(file) = exec_file(stmt) {
        out.push(TopLevel::Exec { file, line });
        return;
    }
    let top: Vec<usize> = stmt
        .top_level()
        .into_iter()
        .take_while(|&k| !(stmt.is_name(k) && stmt.s(k) == "lambda"))
        .collect();
    if let Some(&k) = top
        .iter()
        .find(|&&k| AUGMENTED.iter().any(|op| stmt.is_op(k, op)))
    {
        if k == 1 && stmt.is_name(0) {
            out.push(TopLevel::Augmented {
                name: stmt.s(0).to_string(),
                op: stmt.s(1).to_string(),
                line,
            });
        }
        return;
    }
    let rest = |from: usize| Stmt {
        text: stmt.text,
        toks: &stmt.toks[from.min(stmt.toks.len())..],
    };
    if stmt.is_name(0) && stmt.is_op(1, ":") {
        if let Some(&eq) = top.iter().find(|&&k| k > 1 && stmt.is_op(k, "=")) {
            out.push(TopLevel::Assign {
                name: stmt.s(0).to_string(),
                value: value_or_arithmetic(&rest(eq + 1)),
                line,
            });
        }
        return;
    }
    plain_assignment(stmt, top, line, out);
}

/// `a = expr`, `a = b = expr` (chained: no value) or `a, b = expr` (unpacked: no value):
/// each name bound, in order.
fn plain_assignment(stmt: &Stmt, top: Vec<usize>, line: usize, out: &mut Vec<TopLevel>) {
    let rest = |from: usize| Stmt {
        text: stmt.text,
        toks: &stmt.toks[from.min(stmt.toks.len())..],
    };
    let eqs: Vec<usize> = top.into_iter().filter(|&k| stmt.is_op(k, "=")).collect();
    let Some(&last_eq) = eqs.last() else {
        return;
    };
    let mut from = 0;
    for &eq in &eqs {
        let target = Stmt {
            text: stmt.text,
            toks: &stmt.toks[from..eq],
        };
        from = eq + 1;
        if target.toks.len() == 1 && target.is_name(0) {
            let value = if eqs.len() > 1 {
                Err("assigned in a chained assignment (`a = b = ...`)".to_string())
            } else {
                value_or_arithmetic(&rest(last_eq + 1))
            };
            out.push(TopLevel::Assign {
                name: target.s(0).to_string(),
                value,
                line,
            });
            continue;
        }
        // Unpacking (`batch_size, block_size = 8, 64`): each bare name, to no value.
        for part in target.split(",") {
            let bare = match part.toks.len() {
                1 => part.is_name(0).then(|| part.s(0)),
                2 if part.is_op(0, "*") && part.is_name(1) => Some(part.s(1)),
                _ => None,
            };
            if let Some(name) = bare {
                out.push(TopLevel::Assign {
                    name: name.to_string(),
                    value: Err("assigned by unpacking".to_string()),
                    line,
                });
            }
        }
    }
}

/// `exec(open('FILE').read())` (extra arguments to either call allowed): FILE.
fn exec_file(stmt: &Stmt) -> Option<String> {
    let opens = stmt.is_name(0)
        && stmt.s(0) == "exec"
        && stmt.is_op(1, "(")
        && stmt.is_name(2)
        && stmt.s(2) == "open"
        && stmt.is_op(3, "(");
    if !opens {
        return None;
    }
    let Kind::Str(literal) = &stmt.toks.get(4)?.kind else {
        return None;
    };
    let file = string_value(stmt.text, literal).ok()?;
    let after_open = matching_close(stmt, 3);
    let reads = stmt.is_op(after_open, ".")
        && stmt.is_name(after_open + 1)
        && stmt.s(after_open + 1) == "read"
        && stmt.is_op(after_open + 2, "(")
        && stmt.is_op(after_open + 3, ")");
    // The text read is exec's whole first argument (`exec(open(f).read(), globals())` too).
    let whole = stmt.is_op(after_open + 4, ")") || stmt.is_op(after_open + 4, ",");
    (reads && whole && matching_close(stmt, 1) == stmt.toks.len()).then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (text, the strings `_base_` is assigned): what Python would assign, comments and all.
    #[test]
    fn strings_assigned_are_read_as_python_reads_them() {
        let table: &[(&str, Option<&[&str]>)] = &[
            ("_base_ = 'a.py'\n", Some(&["a.py"])),
            ("_base_ = ['a.py', \"b.py\",]\n", Some(&["a.py", "b.py"])),
            ("_base_ = ('a.py',)\n", Some(&["a.py"])),
            ("_base_ = 'a.py', 'b.py'\n", Some(&["a.py", "b.py"])),
            ("_base_ = []\n", Some(&[])),
            ("_base_ = [\n  'a.py',\n  # 'old.py',\n]\n", Some(&["a.py"])),
            ("_base_ = 'a.py'; _base_ = 'b.py'\n", Some(&["b.py"])),
            ("x = 1\n", None),
            ("def f():\n    _base_ = 'a.py'\n", None),
            ("_base_ = [base]\n", None),
            ("_base_ = [f'{x}.py']\n", None),
            ("_base_ = ['a' 'b']\n", None),
            ("_base_ = ['a.py'] + extra\n", None),
            ("_base_ = [,]\n", None),
            ("_base_ = ['unclosed'\n", None),
        ];
        for &(text, want) in table {
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(strings_assigned(text, "_base_"), want, "{text:?}");
        }
    }

    /// train.py's defaults as nanoGPT writes them: literal arithmetic, a conditional rebind
    /// inside `if ddp:`, the configurator's exec, code that is no assignment.
    const TRAIN: &str = "\
\"\"\"
batch_size = 1  <- in the docstring, not a global
\"\"\"
import os
from contextlib import nullcontext

# -----------------------------------------------------------------------------
out_dir = 'out'
eval_interval = 2000
gradient_accumulation_steps = 5 * 8 # used to simulate larger batch sizes
batch_size = 12 # if gradient_accumulation_steps > 1, this is the micro-batch size
block_size = 1024
learning_rate = 6e-4 # max learning rate
n_layer, n_head = 12, 12
dtype: str = 'bfloat16'
config_keys = [k for k,v in globals().items() if not k.startswith('_')]
exec(open('configurator.py').read()) # overrides from command line or config file
config = {k: globals()[k] for k in config_keys}
# -----------------------------------------------------------------------------
ddp = int(os.environ.get('RANK', -1)) != -1
if ddp:
    ddp_world_size = int(os.environ['WORLD_SIZE'])
    gradient_accumulation_steps //= ddp_world_size
else:
    batch_size = 1
if ddp: block_size = 8
def get_batch(split):
    batch_size = 4
    return batch_size
tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
iter_num = 0; best_val_loss = 1e9
iter_num += 1
";

    #[test]
    fn only_unconditional_top_level_statements_are_read_in_order() {
        let got = top_level(TRAIN).unwrap();
        let shown: Vec<String> = got
            .iter()
            .map(|s| match s {
                TopLevel::Assign { name, value, line } => match value {
                    Ok(v) => format!("{line}: {name} = {v}"),
                    Err(why) => format!("{line}: {name} ({why})"),
                },
                TopLevel::Augmented { name, op, line } => format!("{line}: {name} {op}"),
                TopLevel::Exec { file, line } => format!("{line}: exec {file}"),
            })
            .collect();
        assert_eq!(
            shown,
            [
                "8: out_dir = out",
                "9: eval_interval = 2000",
                "10: gradient_accumulation_steps = 40",
                "11: batch_size = 12",
                "12: block_size = 1024",
                "13: learning_rate = 0.0006",
                "14: n_layer (assigned by unpacking)",
                "14: n_head (assigned by unpacking)",
                "15: dtype = bfloat16",
                "16: config_keys (a list)",
                "17: exec configurator.py",
                "18: config (a dict or set)",
                "20: ddp (a call)",
                "30: tokens_per_iter (an expression of a name (`gradient_accumulation_steps`))",
                "31: iter_num = 0",
                "31: best_val_loss = 1000000000",
                "32: iter_num +=",
            ]
        );
    }

    #[test]
    fn exec_is_told_only_in_the_shape_that_runs_a_file() {
        let table: &[(&str, Option<&str>)] = &[
            (
                "exec(open('configurator.py').read())\n",
                Some("configurator.py"),
            ),
            ("exec(open(\"conf.py\", 'r').read())\n", Some("conf.py")),
            ("exec(open(path).read())\n", None),
            ("exec(open('c.py').read()[:10])\n", None),
            ("exec(code)\n", None),
            ("exec(open('c.py').read(), globals())\n", Some("c.py")),
            ("if True:\n    exec(open('c.py').read())\n", None),
        ];
        for (text, want) in table {
            let got = top_level(text).unwrap().into_iter().find_map(|s| match s {
                TopLevel::Exec { file, .. } => Some(file),
                _ => None,
            });
            assert_eq!(got.as_deref(), *want, "{text}");
        }
    }
}
