//! The editor's two entry points for a Python config: [`locate`] finds the one-line literal
//! bound to a module-level name or a class attribute, refusing (with its line) whatever makes
//! the binding ambiguous or not a plain literal; [`append`] adds an assignment a module lacks.
//! Reading the statements is [`super::bindings`]'; spelling the new value is
//! [`super::render`](mod@super::render)'s; splicing it into the file is the caller's.

use super::bindings::{block_name, collect, line_list, Binding, Bound, Module};
use super::dict_call::in_dict_call;
use super::render::render;
use super::tokenize::{is_identifier, tokenize, Line};
use crate::knobs::file::{line_of, EditError, Located, Scalar};

/// Finds the literal bound to `key`: `NAME` (module level) or `Class.attr` / `Outer.Inner.attr`.
pub fn locate(text: &str, key: &str) -> Result<Located, EditError> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| !is_identifier(p)) {
        return Err(not_found(key));
    }
    let lines = tokenize(text)?;
    let module = collect(text, &lines);
    if let Some(found) = in_dict_variable(text, &lines, &module, key, &parts) {
        return found;
    }
    let (class_path, attr) = parts.split_at(parts.len() - 1);
    check_enclosing_classes(text, &module, key, class_path)?;
    let bound = module.bound(class_path, attr[0]);
    let one = sole_binding(text, key, &bound)?;
    if class_path.is_empty() {
        check_no_global(text, &module, key, one)?;
    }
    bound_value(text, key, one)
}

fn not_found(key: &str) -> EditError {
    EditError::NotFound {
        key: key.to_string(),
    }
}

fn not_scalar(key: &str, line: usize, what: String) -> EditError {
    EditError::NotScalar {
        key: key.to_string(),
        line,
        what,
    }
}

/// `name.key` where `name` is a module-level variable, not a class: a keyword of the
/// `dict(...)` call bound to it (mmengine's `train_dataloader = dict(batch_size=2, ...)`).
/// `None` where the key's first part is no such variable: then it names a class.
fn in_dict_variable(
    text: &str,
    lines: &[Line],
    module: &Module,
    key: &str,
    parts: &[&str],
) -> Option<Result<Located, EditError>> {
    let (first, keys) = parts.split_first()?;
    if keys.is_empty() {
        return None;
    }
    let bound = module.bound(&[], first);
    let [one] = bound.as_slice() else {
        return None;
    };
    if matches!(one.what, Bound::Class) {
        return None;
    }
    if let Some(kw) = one.conditional {
        let what = format!("assigned inside {}", block_name(kw));
        return Some(Err(not_scalar(key, line_of(text, one.at), what)));
    }
    Some(
        in_dict_call(text, lines, one.at, keys).map_err(|e| match e {
            None => not_found(key),
            Some((at, what)) => not_scalar(key, line_of(text, at), what),
        }),
    )
}

/// Every enclosing class must be bound exactly once, unconditionally, as a class: otherwise
/// which class body the job reads depends on execution.
fn check_enclosing_classes(
    text: &str,
    module: &Module,
    key: &str,
    class_path: &[&str],
) -> Result<(), EditError> {
    for depth in 0..class_path.len() {
        let bound = module.bound(&class_path[..depth], class_path[depth]);
        match bound.as_slice() {
            [] => return Err(not_found(key)),
            [one] if matches!(one.what, Bound::Class) => {
                if let Some(kw) = one.conditional {
                    let what = format!("in a class defined inside {}", block_name(kw));
                    return Err(not_scalar(key, line_of(text, one.at), what));
                }
            }
            [_] => return Err(not_found(key)),
            [first, ..] => {
                let what = format!(
                    "in class {}, which is bound more than once (lines {})",
                    class_path[depth],
                    line_list(text, &bound)
                );
                return Err(not_scalar(key, line_of(text, first.at), what));
            }
        }
    }
    Ok(())
}

/// The name's one unconditional binding: bound twice, or inside a block, which value the job
/// reads depends on execution, so it is refused rather than guessed.
fn sole_binding<'m>(
    text: &str,
    key: &str,
    bound: &[&'m Binding],
) -> Result<&'m Binding, EditError> {
    let one = match bound {
        [] => return Err(not_found(key)),
        [one] => *one,
        [first, ..] => {
            let what = format!("bound more than once (lines {})", line_list(text, bound));
            return Err(not_scalar(key, line_of(text, first.at), what));
        }
    };
    if let Some(kw) = one.conditional {
        return Err(not_scalar(
            key,
            line_of(text, one.at),
            format!("assigned inside {}", block_name(kw)),
        ));
    }
    Ok(one)
}

/// A module-level name some function declares `global` may be rebound when that function
/// runs, so the file's value is not surely the job's.
fn check_no_global(text: &str, module: &Module, key: &str, one: &Binding) -> Result<(), EditError> {
    if let Some(&(_, at)) = module.globals.iter().find(|(n, _)| *n == key) {
        let line = line_of(text, at);
        let what = format!("rebound by a function (`global {key}` on line {line})");
        return Err(not_scalar(key, line_of(text, one.at), what));
    }
    Ok(())
}

/// The binding's literal, or why it holds none.
fn bound_value(text: &str, key: &str, one: &Binding) -> Result<Located, EditError> {
    match &one.what {
        Bound::Value(Ok((value, span))) => Ok(Located {
            value: value.clone(),
            span: span.clone(),
            line: line_of(text, span.start),
        }),
        Bound::Value(Err(what)) | Bound::Other(what) => {
            Err(not_scalar(key, line_of(text, one.at), what.clone()))
        }
        Bound::Class => Err(not_scalar(
            key,
            line_of(text, one.at),
            "a class".to_string(),
        )),
    }
}

/// The text with `key = value` added as the module's last line, where no statement binds `key`
/// yet (a config file given as an argument that leaves the accumulation to the script's
/// default). Refused ([`EditError::NotFound`]) where `key` is no identifier, is bound anywhere
/// already (then it is [`locate`]'s to edit), or the new line would not read back as `value`.
///
/// [`set`](crate::knobs::file::set) calls it to write a name a Python file lacks, as it inserts a
/// JSON or YAML key.
pub fn append(text: &str, key: &str, value: &Scalar) -> Result<String, EditError> {
    let absent = || EditError::NotFound {
        key: key.to_string(),
    };
    if !is_identifier(key) {
        return Err(absent());
    }
    match locate(text, key) {
        Err(EditError::NotFound { .. }) => {}
        Err(e) => return Err(e),
        Ok(_) => return Err(absent()),
    }
    let sep = if text.is_empty() || text.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    let out = format!("{text}{sep}{key} = {}\n", render(value, "0"));
    // The line must read back as the value, or it is not written.
    match locate(&out, key) {
        Ok(found) if found.value.same(value) => Ok(out),
        _ => Err(absent()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::literal::read_literal;
    use super::*;
    use crate::knobs::file::{set, Format};

    /// (name, text, key, value found, new value, text after `set`).
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        Scalar,
        Scalar,
        &'static str,
    );

    fn int(n: i64) -> Scalar {
        Scalar::Int(n)
    }
    fn float(x: f64) -> Scalar {
        Scalar::Float(x)
    }
    fn string(s: &str) -> Scalar {
        Scalar::Str(s.to_string())
    }

    const SEED_003: &str = "\
\"\"\"Training settings.

batch_size_per_gpu = 64   <- not this one, it is in the docstring
\"\"\"
import os

# batch_size_per_gpu = 4  (an old note)
class TrainConfig:
    '''Knobs for train_low_mem.py.'''
    batch_size_per_gpu = 8  # fits 16 GB
    gradient_accumulation_steps = 4
    max_seq_len: int = 512

    def scaled(self):
        batch_size_per_gpu = 2
        return batch_size_per_gpu


class EvalConfig:
    batch_size_per_gpu = 32
";

    fn rows() -> Vec<Row> {
        vec![
            ("module level", "BATCH_SIZE = 8\n", "BATCH_SIZE", int(8), int(4), "BATCH_SIZE = 4\n"),
            (
                "annotated",
                "BATCH_SIZE: int = 8\n",
                "BATCH_SIZE",
                int(8),
                int(16),
                "BATCH_SIZE: int = 16\n",
            ),
            (
                "seed 003 class attribute, comment and docstring decoys",
                SEED_003,
                "TrainConfig.batch_size_per_gpu",
                int(8),
                int(4),
                &*SEED_003.replace("gpu = 8  # fits", "gpu = 4  # fits").leak(),
            ),
            (
                "seed 003 annotated attribute",
                SEED_003,
                "TrainConfig.max_seq_len",
                int(512),
                int(256),
                &*SEED_003.replace("int = 512", "int = 256").leak(),
            ),
            (
                "same name in another class",
                SEED_003,
                "EvalConfig.batch_size_per_gpu",
                int(32),
                int(16),
                &*SEED_003.replace("gpu = 32", "gpu = 16").leak(),
            ),
            (
                "nested class",
                "class A:\n    x = 1\n    class B:\n        x = 2\n    y = 3\n",
                "A.B.x",
                int(2),
                int(5),
                "class A:\n    x = 1\n    class B:\n        x = 5\n    y = 3\n",
            ),
            (
                "outer attribute after a nested class",
                "class A:\n    class B:\n        y = 2\n    y = 3\n",
                "A.y",
                int(3),
                int(1),
                "class A:\n    class B:\n        y = 2\n    y = 1\n",
            ),
            (
                "module name beside a class attribute of the same name",
                "class C:\n    lr = 0.1\nlr = 0.5\n",
                "lr",
                float(0.5),
                float(0.25),
                "class C:\n    lr = 0.1\nlr = 0.25\n",
            ),
            (
                "tab indentation and a decorator",
                "from dataclasses import dataclass\n@dataclass\nclass Cfg:\n\tbatch: int = 8\n",
                "Cfg.batch",
                int(8),
                int(4),
                "from dataclasses import dataclass\n@dataclass\nclass Cfg:\n\tbatch: int = 4\n",
            ),
            (
                "CRLF line endings",
                "# settings\r\nclass T:\r\n    batch = 8 # c\r\n    lr = 1e-3\r\n",
                "T.batch",
                int(8),
                int(4),
                "# settings\r\nclass T:\r\n    batch = 4 # c\r\n    lr = 1e-3\r\n",
            ),
            (
                "last line without a newline",
                "A = 1\nBATCH = 8",
                "BATCH",
                int(8),
                int(2),
                "A = 1\nBATCH = 2",
            ),
            ("negative", "OFFSET = -3  # below\n", "OFFSET", int(-3), int(-7), "OFFSET = -7  # below\n"),
            ("underscores keep grouping", "STEPS = 1_000\n", "STEPS", int(1000), int(25000), "STEPS = 25_000\n"),
            ("hex keeps its base", "MASK = 0xFF\n", "MASK", int(255), int(16), "MASK = 0x10\n"),
            ("float", "LR = 0.001\n", "LR", float(0.001), float(0.0005), "LR = 0.0005\n"),
            ("float exponent style", "LR = 3e-4\n", "LR", float(3e-4), float(1.5e-4), "LR = 1.5e-4\n"),
            ("float stays a float", "SCALE = 1.5\n", "SCALE", float(1.5), float(2.0), "SCALE = 2.0\n"),
            ("int to float", "X = 8\n", "X", int(8), float(0.5), "X = 0.5\n"),
            ("bool", "PIN_MEMORY = True\n", "PIN_MEMORY", Scalar::Bool(true), Scalar::Bool(false), "PIN_MEMORY = False\n"),
            (
                "double-quoted string",
                "PRECISION = \"fp32\"  # or bf16\n",
                "PRECISION",
                string("fp32"),
                string("bf16"),
                "PRECISION = \"bf16\"  # or bf16\n",
            ),
            (
                "single-quoted string keeps its quotes and escapes the quote",
                "NAME = 'run'\n",
                "NAME",
                string("run"),
                string("it's"),
                "NAME = 'it\\'s'\n",
            ),
            (
                "escapes read",
                "P = 'a\\\\b\\tc\\x41'\n",
                "P",
                string("a\\b\tcA"),
                string("a\\b"),
                "P = 'a\\\\b'\n",
            ),
            (
                "raw string stays raw while it can",
                "PATH = r'C:\\data'\n",
                "PATH",
                string("C:\\data"),
                string("D:\\x"),
                "PATH = r'D:\\x'\n",
            ),
            (
                "raw string leaves raw when it must",
                "PATH = r'C:\\data'\n",
                "PATH",
                string("C:\\data"),
                string("it's\\"),
                "PATH = 'it\\'s\\\\'\n",
            ),
            (
                "unicode around and in the value",
                "# données\nclass Réglages:\n    nom = \"modèle\"  # é\n    lot = 8\n",
                "Réglages.nom",
                string("modèle"),
                string("größe ✓"),
                "# données\nclass Réglages:\n    nom = \"größe ✓\"  # é\n    lot = 8\n",
            ),
            (
                "blank lines and comments inside the class",
                "class T:\n\n    # the batch\n\n    batch = 8\n\n\n    lr = 0.1\n",
                "T.batch",
                int(8),
                int(4),
                "class T:\n\n    # the batch\n\n    batch = 4\n\n\n    lr = 0.1\n",
            ),
            (
                "semicolons",
                "A = 1; B = 2  # two\n",
                "B",
                int(2),
                int(3),
                "A = 1; B = 3  # two\n",
            ),
            (
                "inline class body",
                "class T: batch = 8\n",
                "T.batch",
                int(8),
                int(4),
                "class T: batch = 4\n",
            ),
            (
                "strings that look like code do not match",
                "DOC = '''\nBATCH = 1\n'''\nNOTE = \"BATCH = 2 # x\"\nF = f\"{'BATCH = 3'} {{}}\"\nBATCH = 8\n",
                "BATCH",
                int(8),
                int(4),
                "DOC = '''\nBATCH = 1\n'''\nNOTE = \"BATCH = 2 # x\"\nF = f\"{'BATCH = 3'} {{}}\"\nBATCH = 4\n",
            ),
            (
                "a multi-line call before the key",
                "x = dict(\n    BATCH=1,\n    y=[1,\n       2],\n)\nBATCH = 8\n",
                "BATCH",
                int(8),
                int(4),
                "x = dict(\n    BATCH=1,\n    y=[1,\n       2],\n)\nBATCH = 4\n",
            ),
            (
                "functions, methods, main guard without the name",
                "BATCH = 8\ndef f():\n    BATCH = 1\n    return BATCH\nif __name__ == '__main__':\n    f()\n",
                "BATCH",
                int(8),
                int(4),
                "BATCH = 4\ndef f():\n    BATCH = 1\n    return BATCH\nif __name__ == '__main__':\n    f()\n",
            ),
            (
                "bare annotation is no binding",
                "BATCH: int\nBATCH = 8\n",
                "BATCH",
                int(8),
                int(4),
                "BATCH: int\nBATCH = 4\n",
            ),
            (
                "lambda defaults are no targets",
                "f = lambda x=1: x\nBATCH = 8\n",
                "BATCH",
                int(8),
                int(4),
                "f = lambda x=1: x\nBATCH = 4\n",
            ),
            (
                "subscript and attribute targets only mutate",
                "import types\nk = 'b'\nd = {}\nd[k] = 1\nd[k], = [2]\nns = types.SimpleNamespace()\nns.k = 2\n",
                "k",
                string("b"),
                string("c"),
                "import types\nk = 'c'\nd = {}\nd[k] = 1\nd[k], = [2]\nns = types.SimpleNamespace()\nns.k = 2\n",
            ),
        ]
    }

    #[test]
    fn a_byte_order_mark_is_skipped_as_python_does() {
        for (text, key) in [
            ("\u{feff}BATCH = 64\n", "BATCH"),
            (
                "\u{feff}class TrainConfig:\n    batch_size = 64\n",
                "TrainConfig.batch_size",
            ),
            ("\u{feff}# settings\nBATCH = 64\n", "BATCH"),
        ] {
            let found = locate(text, key).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(&text[found.span.clone()], "64", "{text:?}");
            assert_eq!(
                found.line,
                text.lines().position(|l| l.contains("64")).unwrap() + 1
            );
        }
    }

    #[test]
    fn locate_and_set_rows() {
        for (name, text, key, value, new, out) in rows() {
            let found = locate(text, key).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(found.value, value, "{name}");
            assert_eq!(
                read_literal(&text[found.span.clone()]),
                Some(value.clone()),
                "{name}: span"
            );
            assert_eq!(found.line, line_of(text, found.span.start), "{name}");
            let written =
                set(Format::Python, text, key, &new).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(written, out, "{name}");
            // What was written reads back as the new value.
            assert_eq!(
                locate(&written, key).map(|l| l.value),
                Ok(new.clone()),
                "{name}: reread"
            );
        }
    }

    /// Writing back the value a file already holds changes no byte.
    #[test]
    fn set_with_the_original_value_is_the_identity() {
        for (name, text, key, value, _, _) in rows() {
            let same =
                set(Format::Python, text, key, &value).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(same, text, "{name}");
        }
    }

    #[test]
    fn line_is_one_based_line_of_the_value() {
        let found = locate(SEED_003, "TrainConfig.batch_size_per_gpu").expect("row above");
        assert_eq!(found.line, 10);
        assert_eq!(&SEED_003[found.span], "8");
    }

    enum Want {
        NotFound,
        /// Line and a piece of `what`.
        NotScalar(usize, &'static str),
        /// A piece of the detail.
        Syntax(&'static str),
    }

    #[test]
    fn refusals() {
        use Want::*;
        let rows: &[(&str, &str, Want)] = &[
            ("BATCH = 8\n", "batch", NotFound),
            ("BATCH = 8\n", "T.BATCH", NotFound),
            ("class T:\n    x = 1\n", "T.y", NotFound),
            ("class T:\n    x = 1\n", "x", NotFound),
            (
                "class T:\n    def f(self):\n        x = 1\n",
                "T.x",
                NotFound,
            ),
            ("x = 1\n", "x.", NotFound),
            ("x = 1\n", "a-b", NotFound),
            ("T = 1\n", "T.x", NotFound),
            (
                "# BATCH = 4\n\"\"\"\nBATCH = 4\n\"\"\"\n",
                "BATCH",
                NotFound,
            ),
            ("BATCH: int\n", "BATCH", NotFound),
            ("BATCH = 4 * 2\n", "BATCH", NotScalar(1, "an expression")),
            (
                "import os\nBATCH = int(os.environ['B'])\n",
                "BATCH",
                NotScalar(2, "a call"),
            ),
            (
                "import os\nBATCH = os.environ['B']\n",
                "BATCH",
                NotScalar(2, "an expression"),
            ),
            ("BATCH = OTHER\n", "BATCH", NotScalar(1, "a name")),
            ("BATCH = None\n", "BATCH", NotScalar(1, "None")),
            ("BATCH = [8]\n", "BATCH", NotScalar(1, "a list")),
            ("BATCH = {'a': 1}\n", "BATCH", NotScalar(1, "a dict")),
            ("BATCH = 8,\n", "BATCH", NotScalar(1, "a tuple")),
            (
                "BATCH = (8)\n",
                "BATCH",
                NotScalar(1, "a value in parentheses"),
            ),
            ("BATCH = 2j\n", "BATCH", NotScalar(1, "a complex number")),
            (
                "BATCH = 99999999999999999999\n",
                "BATCH",
                NotScalar(1, "beyond 64 bits"),
            ),
            ("BATCH, EPOCHS = 8, 3\n", "BATCH", NotScalar(1, "unpacking")),
            ("EPOCHS, BATCH = 8, 3\n", "BATCH", NotScalar(1, "unpacking")),
            ("A = BATCH = 8\n", "BATCH", NotScalar(1, "chained")),
            ("BATCH = A = 8\n", "BATCH", NotScalar(1, "chained")),
            (
                "BATCH = 8\nBATCH += 1\n",
                "BATCH",
                NotScalar(1, "bound more than once (lines 1 and 2)"),
            ),
            (
                "BATCH *= 2\n",
                "BATCH",
                NotScalar(1, "augmented assignment (`*=`)"),
            ),
            (
                "BATCH = 8\nBATCH = 4\n",
                "BATCH",
                NotScalar(1, "bound more than once (lines 1 and 2)"),
            ),
            (
                "class T:\n    b = 8\n    b = 4\n",
                "T.b",
                NotScalar(2, "more than once (lines 2 and 3)"),
            ),
            (
                "BATCH = 8; BATCH = 4\n",
                "BATCH",
                NotScalar(1, "more than once"),
            ),
            (
                "BATCH = 8\nfrom defaults import BATCH\n",
                "BATCH",
                NotScalar(1, "more than once (lines 1 and 2)"),
            ),
            (
                "X = 1\nfrom m import (\n    BATCH,\n)\n",
                "BATCH",
                NotScalar(2, "an import"),
            ),
            (
                "import numpy as BATCH\n",
                "BATCH",
                NotScalar(1, "an import"),
            ),
            (
                "def BATCH():\n    pass\n",
                "BATCH",
                NotScalar(1, "a function"),
            ),
            (
                "for BATCH in range(3):\n    pass\n",
                "BATCH",
                NotScalar(1, "a loop variable"),
            ),
            (
                "BATCH = 8\ndel BATCH\n",
                "BATCH",
                NotScalar(1, "more than once"),
            ),
            ("if (BATCH := 8):\n    pass\n", "BATCH", NotScalar(1, ":=")),
            ("class BATCH:\n    pass\n", "BATCH", NotScalar(1, "a class")),
            (
                "class T:\n    b = 8\nT.b = 4\n",
                "T.b",
                NotScalar(2, "more than once (lines 2 and 3)"),
            ),
            (
                "class T:\n    b = 8\nclass T:\n    c = 1\n",
                "T.b",
                NotScalar(1, "in class T, which is bound more than once"),
            ),
            (
                "import sys\nif sys.argv:\n    BATCH = 8\n",
                "BATCH",
                NotScalar(3, "inside an `if` block"),
            ),
            (
                "try:\n    import torch\n    BATCH = 8\nexcept ImportError:\n    BATCH = 2\n",
                "BATCH",
                NotScalar(3, "more than once (lines 3 and 5)"),
            ),
            (
                "if True:\n    class T:\n        b = 1\n",
                "T.b",
                NotScalar(2, "class defined inside an `if` block"),
            ),
            (
                "BATCH = 8\nif __name__ == '__main__':\n    BATCH = 2\n",
                "BATCH",
                NotScalar(1, "more than once"),
            ),
            (
                "BATCH = 8\ndef shrink():\n    global BATCH\n    BATCH = 4\n",
                "BATCH",
                NotScalar(1, "`global BATCH` on line 3"),
            ),
            (
                "BATCH = \"\"\"8\"\"\"\n",
                "BATCH",
                NotScalar(1, "triple-quoted"),
            ),
            (
                "BATCH = '''\n8\n'''\n",
                "BATCH",
                NotScalar(1, "triple-quoted"),
            ),
            (
                "BATCH = 'a' 'b'\n",
                "BATCH",
                NotScalar(1, "implicitly concatenated"),
            ),
            ("BATCH = f'{8}'\n", "BATCH", NotScalar(1, "an f-string")),
            ("BATCH = b'8'\n", "BATCH", NotScalar(1, "a bytes literal")),
            ("BATCH = '\\N{BULLET}'\n", "BATCH", NotScalar(1, "escape")),
            ("BATCH = '\\ud800'\n", "BATCH", NotScalar(1, "escape")),
            (
                "BATCH = \\\n    8\n",
                "BATCH",
                NotScalar(1, "continued over several lines"),
            ),
            (
                "BATCH = 'a\\\nb'\n",
                "BATCH",
                NotScalar(1, "continued over several lines"),
            ),
            (
                "BATCH: int = (\n    8\n)\n",
                "BATCH",
                NotScalar(1, "parentheses"),
            ),
            (
                "BATCH = 8 if True else 4\n",
                "BATCH",
                NotScalar(1, "an expression"),
            ),
            (
                "BATCH = 'a\n",
                "BATCH",
                Syntax("line 1: a string is never closed"),
            ),
            (
                "X = '''\nabc\n",
                "BATCH",
                Syntax("line 1: a string is never closed"),
            ),
            (
                "x = (1,\nBATCH = 8\n",
                "BATCH",
                Syntax("line 1: '(' is never closed"),
            ),
            ("x = 1)\n", "BATCH", Syntax("line 1: unmatched ')'")),
            ("x = 1\ny = 2 \\ 3\n", "y", Syntax("line 2: a backslash")),
        ];
        for (text, key, want) in rows {
            let got = locate(text, key);
            let ok = match (&got, want) {
                (Err(EditError::NotFound { key: k }), NotFound) => k == key,
                (Err(EditError::NotScalar { key: k, line, what }), NotScalar(l, w)) => {
                    k == key && line == l && what.contains(w)
                }
                (Err(EditError::Syntax { format, detail }), Syntax(d)) => {
                    *format == "Python" && detail.contains(d)
                }
                _ => false,
            };
            assert!(ok, "{text:?} at {key}: got {got:?}");
        }
    }

    #[test]
    fn error_message_names_line_key_and_what() {
        let err = locate("A = 1\nBATCH = 4 * 2\n", "BATCH").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2: BATCH is an expression, not a single value oomguard can edit in place"
        );
    }

    /// The rows' results, checked against real Python: the edited module, executed, holds the
    /// new value at the key.
    #[test]
    fn python_agrees_with_edited_rows() {
        let probe = std::process::Command::new("python3")
            .arg("-c")
            .arg("pass")
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            println!("SKIPPED python_agrees_with_edited_rows: no python3 on PATH");
            return;
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let script = "import json, sys\n\
            ns = {'__name__': 'config'}\n\
            exec(compile(open(sys.argv[1], encoding='utf-8').read(), sys.argv[1], 'exec'), ns)\n\
            obj = ns\n\
            for part in sys.argv[2].split('.'):\n    obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)\n\
            print(json.dumps(obj))\n";
        for (k, (name, _, key, _, new, out)) in rows().into_iter().enumerate() {
            let path = dir.path().join(format!("row{k}.py"));
            std::fs::write(&path, out).expect("temp file written");
            let run = std::process::Command::new("python3")
                .args(["-c", script])
                .arg(&path)
                .arg(key)
                .output()
                .expect("python3 runs");
            assert!(
                run.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&run.stderr)
            );
            let got: serde_json::Value =
                serde_json::from_slice(&run.stdout).expect("python printed JSON");
            let want = match &new {
                Scalar::Int(n) => serde_json::json!(n),
                Scalar::Float(x) => serde_json::json!(x),
                Scalar::Bool(b) => serde_json::json!(b),
                Scalar::Str(s) => serde_json::json!(s),
            };
            assert_eq!(got, want, "{name}");
            // An int stays an int and a float a float.
            assert_eq!(
                got.is_f64(),
                matches!(new, Scalar::Float(_)),
                "{name}: type"
            );
        }
    }

    #[test]
    fn append_writes_a_name_the_module_lacks_and_nothing_else() {
        let two = Scalar::Int(2);
        let key = "gradient_accumulation_steps";
        let table: &[(&str, Option<&str>)] = &[
            (
                "batch_size = 64\nblock_size = 256 # context\n",
                Some("batch_size = 64\nblock_size = 256 # context\ngradient_accumulation_steps = 2\n"),
            ),
            ("batch_size = 64", Some("batch_size = 64\ngradient_accumulation_steps = 2\n")),
            ("", Some("gradient_accumulation_steps = 2\n")),
            // Bound already: the editor's to set in place, or not at all.
            ("gradient_accumulation_steps = 1\n", None),
            ("gradient_accumulation_steps = 5 * 8\n", None),
            ("if big:\n    gradient_accumulation_steps = 4\n", None),
        ];
        for (text, want) in table {
            assert_eq!(append(text, key, &two).ok().as_deref(), *want, "{text:?}");
        }
        assert!(append("a = 1\n", "not-a-name", &two).is_err());
        assert_eq!(
            append("a = 1\n", "dataset", &Scalar::Str("owt".into())).unwrap(),
            "a = 1\ndataset = \"owt\"\n"
        );
    }
}
