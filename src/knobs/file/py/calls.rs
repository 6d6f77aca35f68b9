//! Calls of a function by name anywhere in a Python file (argparse's
//! `parser.add_argument('-b', '--batch-size', default=128)`), read with the config files'
//! tokenizer: each call's leading string arguments and its keyword arguments with their literal
//! values. Nothing is run, so an argument built at run time is no literal; nothing is edited.

use super::literal::literal;
use super::stmt::{matching_close, Stmt};
use super::tokenize::tokenize;
use crate::knobs::file::{EditError, Scalar};

/// One call of a function by name (`parser.add_argument('-b', '--batch-size', default=128)`):
/// its leading positional arguments that are string literals, and its keyword arguments, each
/// with its value where that is one literal.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub strings: Vec<String>,
    pub keywords: Vec<(String, Option<Scalar>)>,
}

/// Every call of `func` in `text`, wherever it stands (a method call `x.func(...)` too), in file
/// order, read with the same tokenizer as the config files, so strings, comments and brackets
/// inside them are Python's. Nothing is run: an argument built at run time is not a literal.
pub fn calls(text: &str, func: &str) -> Result<Vec<Call>, EditError> {
    let mut out = Vec::new();
    for line in tokenize(text)? {
        let stmt = Stmt {
            text,
            toks: &line.tokens,
        };
        for k in 0..stmt.toks.len() {
            if !(stmt.is_name(k) && stmt.s(k) == func && stmt.is_op(k + 1, "(")) {
                continue;
            }
            let close = matching_close(&stmt, k + 1);
            let args = Stmt {
                text,
                toks: &stmt.toks[k + 2..close.saturating_sub(1).max(k + 2)],
            };
            let mut call = Call {
                strings: Vec::new(),
                keywords: Vec::new(),
            };
            let mut positional = true;
            for arg in args.split(",").into_iter().filter(|a| !a.toks.is_empty()) {
                if arg.is_name(0) && arg.is_op(1, "=") {
                    positional = false;
                    let value = Stmt {
                        text,
                        toks: &arg.toks[2..],
                    };
                    let scalar = literal(&value).ok().map(|(scalar, _)| scalar);
                    call.keywords.push((arg.s(0).to_string(), scalar));
                    continue;
                }
                match (positional, literal(&arg)) {
                    (true, Ok((Scalar::Str(s), _))) if arg.toks.len() == 1 => call.strings.push(s),
                    _ => positional = false,
                }
            }
            out.push(call);
        }
    }
    Ok(out)
}

/// Calls of a function by name, read with the tokenizer (argparse declarations).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_give_their_leading_strings_and_literal_keywords() {
        let text = r#"
parser.add_argument('-b', "--batch-size", type=int, default=1_28,  # ) in a comment
                    help='(default: 128) ]')
group.add_argument(f"--{name}", default=3)
# parser.add_argument('--commented', default=2)
s = "add_argument('--in-a-string', default=5)"
add_argument('--steps', ACCUM, default=None); add_argument("--x", default=-1)
"#;
        let call = |strings: &[&str], keywords: &[(&str, Option<Scalar>)]| Call {
            strings: strings.iter().map(|x| x.to_string()).collect(),
            keywords: keywords
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        assert_eq!(
            calls(text, "add_argument").unwrap(),
            [
                call(
                    &["-b", "--batch-size"],
                    &[
                        ("type", None),
                        ("default", Some(Scalar::Int(128))),
                        ("help", Some(Scalar::Str("(default: 128) ]".into()))),
                    ]
                ),
                // An f-string is built at run time: no name is taken from it.
                call(&[], &[("default", Some(Scalar::Int(3)))]),
                call(&["--steps"], &[("default", None)]),
                call(&["--x"], &[("default", Some(Scalar::Int(-1)))]),
            ]
        );
    }
}
