//! Python config modules: find the one-line literal bound to a module-level name (`BATCH_SIZE`)
//! or a class attribute (`TrainConfig.batch_size_per_gpu`, nested classes `A.B.attr`), and
//! render a new literal for it. A small tokenizer, not a Python parser: it knows strings (every
//! prefix, triple quotes, f-strings with nested replacement fields), comments, brackets, line
//! continuations and indentation, which is all it takes to tell real assignments from text in a
//! comment or a docstring, and to know which class body a line belongs to. Its editing
//! evaluates nothing; what is not a plain literal is refused with its line, never guessed.
//!
//! Accepted: `NAME = 8`, `NAME: int = 8`, in a class body `attr = 8` / `attr: int = 8`; the value
//! an int (`1_000`, `-3`, `0x10`), a float (`3e-4`, `.5`), `True`/`False`, or a `'single'` /
//! `"double"` quoted string (prefix `r`/`u` allowed), optionally followed by a `# comment` or a
//! `;`. Refused as not a single editable value: expressions, calls, names, containers, `None`,
//! f-strings, bytes, triple-quoted and implicitly concatenated strings, a statement continued
//! over several lines (backslash or brackets), tuple targets and chained assignments
//! (`A = B = 8`), augmented assignment, a name bound more than once in its scope (twice
//! assigned, or also imported, `def`ined, deleted, a loop variable, ...: which binding wins
//! depends on execution, so it is ambiguous), a binding inside an `if`/`try`/`for`/... block, a
//! module-level name some function declares `global`, and an attribute of a class defined more
//! than once. Assignments inside functions are never config values and are ignored. A key part
//! that is not a Python identifier (e.g. contains a dot) is simply not found. `from m import *`
//! is not followed.
//!
//! The `__pycache__` trap: Python reuses `__pycache__/<stem>.<tag>.pyc` when the source's
//! recorded size and whole-second mtime still match, so an edit that keeps the file's length
//! (`8` → `4`) within the same second as the previous write is silently ignored and the job
//! reads the old value; a restore of the original is ignored the same way, and a `.pyc` built
//! with `--invalidation-mode unchecked-hash` never looks at the source at all. Whoever writes a
//! `.py` file therefore removes [`stale_pyc_paths`] after each write (edit and restore alike).
//! A cache moved elsewhere with `PYTHONPYCACHEPREFIX` is the caller's to handle.
//!
//! A script's globals and a config file given to it as an argument (nanoGPT's
//! `python train.py config/x.py`) are read with [`top_level`]: the statements at the very top
//! of the module, unindented and outside every block, in file order; an assignment's value is
//! evaluated where it is a literal or literal arithmetic (`5 * 8`, `2**10`, `(1+2)*3`, `1e-3`,
//! `//`, `%`), for reading only: [`locate`] still edits only a plain literal. [`append`] writes
//! an assignment a module lacks at its end.
//!
//! Reading and writing the file, backups and restores are the caller's job (`super::set`
//! splices the span this module finds).

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::{line_of, EditError, Located, Scalar};

const FORMAT: &str = "Python";

/// Finds the literal bound to `key`: `NAME` (module level) or `Class.attr` / `Outer.Inner.attr`.
pub fn locate(text: &str, key: &str) -> Result<Located, EditError> {
    let not_found = || EditError::NotFound {
        key: key.to_string(),
    };
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| !is_identifier(p)) {
        return Err(not_found());
    }
    let lines = tokenize(text)?;
    let module = collect(text, &lines);
    let not_scalar = |line: usize, what: String| EditError::NotScalar {
        key: key.to_string(),
        line,
        what,
    };

    // `name.key` where `name` is a module-level variable, not a class: a keyword of the
    // `dict(...)` call bound to it (mmengine's `train_dataloader = dict(batch_size=2, ...)`).
    if let (Some((first, keys)), true) = (parts.split_first(), parts.len() >= 2) {
        if let [one] = module.bound(&[], first).as_slice() {
            if !matches!(one.what, Bound::Class) {
                if let Some(kw) = one.conditional {
                    let what = format!("assigned inside {}", block_name(kw));
                    return Err(not_scalar(line_of(text, one.at), what));
                }
                return in_dict_call(text, &lines, one.at, keys).map_err(|e| match e {
                    None => not_found(),
                    Some((at, what)) => not_scalar(line_of(text, at), what),
                });
            }
        }
    }

    // Every enclosing class must be bound exactly once, unconditionally, as a class.
    let (class_path, attr) = parts.split_at(parts.len() - 1);
    for depth in 0..class_path.len() {
        let bound = module.bound(&class_path[..depth], class_path[depth]);
        match bound.as_slice() {
            [] => return Err(not_found()),
            [one] if matches!(one.what, Bound::Class) => {
                if let Some(kw) = one.conditional {
                    let what = format!("in a class defined inside {}", block_name(kw));
                    return Err(not_scalar(line_of(text, one.at), what));
                }
            }
            [_] => return Err(not_found()),
            [first, ..] => {
                let what = format!(
                    "in class {}, which is bound more than once (lines {})",
                    class_path[depth],
                    line_list(text, &bound)
                );
                return Err(not_scalar(line_of(text, first.at), what));
            }
        }
    }

    let bound = module.bound(class_path, attr[0]);
    let one = match bound.as_slice() {
        [] => return Err(not_found()),
        [one] => one,
        [first, ..] => {
            let what = format!("bound more than once (lines {})", line_list(text, &bound));
            return Err(not_scalar(line_of(text, first.at), what));
        }
    };
    if let Some(kw) = one.conditional {
        return Err(not_scalar(
            line_of(text, one.at),
            format!("assigned inside {}", block_name(kw)),
        ));
    }
    if class_path.is_empty() {
        if let Some(&(_, at)) = module.globals.iter().find(|(n, _)| n == attr[0]) {
            let line = line_of(text, at);
            let what = format!(
                "rebound by a function (`global {}` on line {line})",
                attr[0]
            );
            return Err(not_scalar(line_of(text, one.at), what));
        }
    }
    match &one.what {
        Bound::Value(Ok((value, span))) => Ok(Located {
            value: value.clone(),
            span: span.clone(),
            line: line_of(text, span.start),
        }),
        Bound::Value(Err(what)) | Bound::Other(what) => {
            Err(not_scalar(line_of(text, one.at), what.clone()))
        }
        Bound::Class => Err(not_scalar(line_of(text, one.at), "a class".to_string())),
    }
}

/// The literal at `keys` inside the `dict(...)` call that the assignment at byte offset `at`
/// binds (`dict(a=dict(b=2))` for `a.b`). `Err(None)`: a key is not among the call's keywords
/// (mmengine merges the file over its `_base_` files, so the key may be set there instead), or
/// the path passes through something that is not a `dict(...)` call (a literal `{...}`, a
/// variable: not followed); `Err(Some((at, what)))`: the value there is not one editable
/// literal.
fn in_dict_call(
    text: &str,
    lines: &[Line],
    at: usize,
    keys: &[&str],
) -> Result<Located, Option<(usize, String)>> {
    let stmt = lines
        .iter()
        .flat_map(|line| {
            Stmt {
                text,
                toks: &line.tokens,
            }
            .split(";")
        })
        .find(|stmt| stmt.at() == at)
        .ok_or(None)?;
    let eq = stmt
        .top_level()
        .into_iter()
        .find(|&k| stmt.is_op(k, "="))
        .ok_or(None)?;
    let mut value = Stmt {
        text,
        toks: &stmt.toks[eq + 1..],
    };
    for key in keys {
        let n = value.toks.len();
        let is_call = n >= 3
            && value.is_name(0)
            && value.s(0) == "dict"
            && value.is_op(1, "(")
            && matching_close(&value, 1) == n;
        if !is_call {
            return Err(None);
        }
        let args = Stmt {
            text,
            toks: &value.toks[2..n - 1],
        };
        let found = args
            .split(",")
            .into_iter()
            .find(|arg| arg.is_name(0) && arg.s(0) == *key && arg.is_op(1, "="))
            .ok_or(None)?;
        value = Stmt {
            text,
            toks: &found.toks[2..],
        };
    }
    let (scalar, span) = literal(&value).map_err(|what| Some((value.at(), what)))?;
    Ok(Located {
        value: scalar,
        line: line_of(text, span.start),
        span,
    })
}

/// The Python literal for `value`. A value that `old` already spells keeps `old` verbatim (so
/// `1_000`, `0x10`, `1e-3` or an escape survive a rewrite to the same value); otherwise an int
/// keeps `old`'s base and digit grouping, a float `old`'s exponent style, and a string `old`'s
/// quote character and prefix (a raw prefix only while the new text needs no escape).
pub fn render(value: &Scalar, old: &str) -> String {
    if read_literal(old).as_ref() == Some(value) {
        return old.to_string();
    }
    match value {
        Scalar::Bool(true) => "True".to_string(),
        Scalar::Bool(false) => "False".to_string(),
        Scalar::Int(n) => render_int(*n, old),
        Scalar::Float(x) => render_float(*x, old),
        Scalar::Str(s) => render_str(s, old),
    }
}

/// The `__pycache__/<stem>.*.pyc` files beside `py_path` (e.g. `config.cpython-312.pyc`,
/// `config.cpython-312.opt-1.pyc`) that a caller must remove after editing or restoring
/// `py_path`, so Python recompiles from the edited source instead of trusting a cache whose
/// size-and-second check cannot see the edit (see the module doc). Sorted; empty when there is
/// no cache directory or it cannot be read.
pub fn stale_pyc_paths(py_path: &Path) -> Vec<PathBuf> {
    let Some(stem) = py_path.file_stem().and_then(|s| s.to_str()) else {
        return Vec::new();
    };
    let dir = match py_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join("__pycache__"),
        _ => PathBuf::from("__pycache__"),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let prefix = format!("{stem}.");
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name().to_str().is_some_and(|name| {
                // `<stem>.<tag>[.opt-N].pyc`: a module name holds no dot, so `<stem>.` cannot
                // be the start of another module's cache file.
                name.len() > prefix.len() + ".pyc".len()
                    && name.starts_with(&prefix)
                    && name.ends_with(".pyc")
            })
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// The text with `key = value` added as the module's last line, where no statement binds `key`
/// yet (a config file given as an argument that leaves the accumulation to the script's
/// default). Refused ([`EditError::NotFound`]) where `key` is no identifier, is bound anywhere
/// already (then it is [`locate`]'s to edit), or the new line would not read back as `value`.
///
/// [`super::set`] calls it to write a name a Python file lacks, as it inserts a JSON or YAML key.
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
    for line in lines.iter().filter(|l| l.indent == 0) {
        let stmt = Stmt {
            text,
            toks: &line.tokens,
        };
        // A compound statement's header, with any body on the same line: conditional, or a
        // definition whose body runs later.
        if header(&stmt).is_some() {
            continue;
        }
        for part in stmt.split(";") {
            top_statement(&part, &mut out);
        }
    }
    Ok(out)
}

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

/// The value a whole `text` spells as one literal or literal arithmetic, as [`top_level`]
/// evaluates an assignment's right-hand side; or what it is instead.
pub fn evaluate(text: &str) -> Result<Scalar, String> {
    let lines = tokenize(text).map_err(|e| e.to_string())?;
    let [line] = lines.as_slice() else {
        return Err("not one expression".to_string());
    };
    value_or_arithmetic(&Stmt {
        text,
        toks: &line.tokens,
    })
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

/// A right-hand side as one literal, else as literal arithmetic; what it is otherwise.
fn value_or_arithmetic(v: &Stmt) -> Result<Scalar, String> {
    match literal(v) {
        Ok((value, _)) => Ok(value),
        Err(what) if what == "an expression" || what == "a value in parentheses" => {
            let mut parser = Arithmetic { v, k: 0 };
            let value = parser.sum()?;
            if parser.k < v.toks.len() {
                return Err("an expression".to_string());
            }
            Ok(match value {
                Num::Int(n) => Scalar::Int(n),
                Num::Float(x) => Scalar::Float(x),
            })
        }
        Err(what) => Err(what),
    }
}

/// A number while evaluating literal arithmetic: Python's int (within 64 bits) or float.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn float(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(x) => x,
        }
    }
}

const BEYOND_64_BITS: &str = "an integer beyond 64 bits";

/// Literal arithmetic as Python evaluates it: `+ - * / // % **`, unary signs, parentheses;
/// numbers only. A name, a call or anything else is no value: its worth is known only when
/// the module runs.
struct Arithmetic<'s, 'a> {
    v: &'s Stmt<'a>,
    k: usize,
}

impl Arithmetic<'_, '_> {
    fn op(&mut self, ops: &[&str]) -> Option<&'static str> {
        const ALL: &[&str] = &["+", "-", "*", "/", "//", "%", "**"];
        let found = ALL
            .iter()
            .find(|op| ops.contains(op) && self.v.is_op(self.k, op))?;
        self.k += 1;
        Some(found)
    }

    fn sum(&mut self) -> Result<Num, String> {
        let mut acc = self.product()?;
        while let Some(op) = self.op(&["+", "-"]) {
            acc = binary(op, acc, self.product()?)?;
        }
        Ok(acc)
    }

    fn product(&mut self) -> Result<Num, String> {
        let mut acc = self.unary()?;
        while let Some(op) = self.op(&["*", "/", "//", "%"]) {
            acc = binary(op, acc, self.unary()?)?;
        }
        Ok(acc)
    }

    /// A sign binds looser than `**` (`-2**2` is -4) and tighter than the rest.
    fn unary(&mut self) -> Result<Num, String> {
        match self.op(&["-", "+"]) {
            Some("-") => binary("-", Num::Int(0), self.unary()?),
            Some(_) => self.unary(),
            None => self.power(),
        }
    }

    /// `**` is right-associative and takes a signed exponent (`2**-1`).
    fn power(&mut self) -> Result<Num, String> {
        let base = self.atom()?;
        match self.op(&["**"]) {
            Some(op) => binary(op, base, self.unary()?),
            None => Ok(base),
        }
    }

    fn atom(&mut self) -> Result<Num, String> {
        let k = self.k;
        let Some(tok) = self.v.toks.get(k) else {
            return Err("an expression".to_string());
        };
        match &tok.kind {
            Kind::Number => {
                self.k += 1;
                match number(self.v.s(k))? {
                    Scalar::Int(n) => Ok(Num::Int(n)),
                    Scalar::Float(x) => Ok(Num::Float(x)),
                    _ => Err("an expression".to_string()),
                }
            }
            Kind::Op if self.v.s(k) == "(" => {
                self.k += 1;
                let inner = self.sum()?;
                if !self.v.is_op(self.k, ")") {
                    return Err("an expression".to_string());
                }
                self.k += 1;
                Ok(inner)
            }
            Kind::Name if self.v.is_op(k + 1, "(") => Err("a call".to_string()),
            Kind::Name => Err(format!("an expression of a name (`{}`)", self.v.s(k))),
            _ => Err("an expression".to_string()),
        }
    }
}

/// `a op b` as Python computes it for ints and floats: `/` always a float, `//` and `%` floored,
/// an int `**` a negative exponent a float. Overflow, division by zero and complex results are
/// no value.
fn binary(op: &str, a: Num, b: Num) -> Result<Num, String> {
    let zero = || Err("a division by zero".to_string());
    let finite = |x: f64| {
        if x.is_finite() {
            Ok(Num::Float(x))
        } else {
            Err("a float beyond range".to_string())
        }
    };
    if let (Num::Int(x), Num::Int(y)) = (a, b) {
        let int = |n: Option<i64>| n.map(Num::Int).ok_or_else(|| BEYOND_64_BITS.to_string());
        return match op {
            "+" => int(x.checked_add(y)),
            "-" => int(x.checked_sub(y)),
            "*" => int(x.checked_mul(y)),
            "/" if y == 0 => zero(),
            "/" => finite(x as f64 / y as f64),
            "//" | "%" if y == 0 => zero(),
            "//" => {
                let q = x.checked_div(y).ok_or_else(|| BEYOND_64_BITS.to_string())?;
                Ok(Num::Int(if x % y != 0 && ((x < 0) != (y < 0)) {
                    q - 1
                } else {
                    q
                }))
            }
            "%" => {
                let r = x.checked_rem(y).ok_or_else(|| BEYOND_64_BITS.to_string())?;
                Ok(Num::Int(if r != 0 && ((r < 0) != (y < 0)) {
                    r + y
                } else {
                    r
                }))
            }
            "**" if y < 0 && x == 0 => zero(),
            "**" if y < 0 => finite((x as f64).powf(y as f64)),
            "**" => int(u32::try_from(y).ok().and_then(|e| x.checked_pow(e))),
            _ => Err("an expression".to_string()),
        };
    }
    let (x, y) = (a.float(), b.float());
    match op {
        "+" => finite(x + y),
        "-" => finite(x - y),
        "*" => finite(x * y),
        "/" | "//" | "%" if y == 0.0 => zero(),
        "/" => finite(x / y),
        "//" => finite((x / y).floor()),
        "%" => {
            let r = x % y;
            finite(if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
                r + y
            } else {
                r
            })
        }
        "**" if x == 0.0 && y < 0.0 => zero(),
        "**" if x < 0.0 && y.fract() != 0.0 => Err("a complex number".to_string()),
        "**" => finite(x.powf(y)),
        _ => Err("an expression".to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

/// A token's class; keywords are names (the statement walker tells them apart).
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Name,
    Number,
    Str(StrTok),
    Op,
}

/// A string literal's shape, kept so the value can be decoded or refused by kind.
#[derive(Debug, Clone, PartialEq)]
struct StrTok {
    /// Lower-cased prefix letters (`""`, `"r"`, `"rb"`, `"f"`, ...).
    prefix: String,
    quote: u8,
    triple: bool,
    /// The text between the quotes.
    body: Range<usize>,
}

/// One token and its byte span in the text.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    kind: Kind,
    span: Range<usize>,
}

/// One logical line, as Python's tokenizer cuts them: open brackets and trailing backslashes
/// join physical lines; blank and comment-only lines make none; comments are dropped.
#[derive(Debug)]
struct Line {
    /// Column of the first token, tabs to multiples of 8 as Python counts them.
    indent: usize,
    tokens: Vec<Token>,
}

/// A `Syntax` error naming the line of byte offset `at`.
fn syntax(text: &str, at: usize, detail: &str) -> EditError {
    EditError::Syntax {
        format: FORMAT,
        detail: format!("line {}: {detail}", line_of(text, at)),
    }
}

/// Identifier characters, approximated: any non-ASCII non-space character counts, which is
/// harmless because only exact key names are ever compared.
fn is_name_start(c: char) -> bool {
    c == '_' || c.is_alphabetic() || (!c.is_ascii() && !c.is_whitespace())
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(is_name_start) && chars.all(is_name_char)
}

const STRING_PREFIXES: &[&str] = &["r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"];

const OPERATORS_3: &[&str] = &["**=", "//=", ">>=", "<<=", "..."];
const OPERATORS_2: &[&str] = &[
    "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", ":=", "->", "**",
    "//", "<<", ">>",
];

/// Splits `text` into logical lines.
fn tokenize(text: &str) -> Result<Vec<Line>, EditError> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut tokens: Vec<Token> = Vec::new();
    let mut indent = 0;
    let mut brackets: Vec<(u8, usize)> = Vec::new();
    let mut at_line_start = true;
    // A UTF-8 byte order mark opens the file, as Python's tokenizer skips it (PEP 263).
    let mut i = if text.starts_with('\u{feff}') { 3 } else { 0 };
    while i < bytes.len() {
        if at_line_start {
            // Measure the indentation; a blank or comment-only line is no logical line.
            let mut col = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b' ' => col += 1,
                    b'\t' => col = (col / 8 + 1) * 8,
                    b'\x0c' => col = 0,
                    _ => break,
                }
                i += 1;
            }
            indent = col;
            at_line_start = false;
            continue;
        }
        let c = bytes[i];
        match c {
            b' ' | b'\t' | b'\x0c' | b'\r' => i += 1,
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'\n' => {
                i += 1;
                if brackets.is_empty() {
                    if !tokens.is_empty() {
                        lines.push(Line {
                            indent,
                            tokens: std::mem::take(&mut tokens),
                        });
                    }
                    at_line_start = true;
                }
            }
            b'\\' => {
                let rest = &bytes[i + 1..];
                if rest.starts_with(b"\n") {
                    i += 2;
                } else if rest.starts_with(b"\r\n") {
                    i += 3;
                } else {
                    return Err(syntax(text, i, "a backslash outside a string"));
                }
            }
            b'\'' | b'"' => {
                let (tok, end) = scan_string(text, i, i)?;
                tokens.push(tok);
                i = end;
            }
            b'0'..=b'9' => i = push_number(bytes, i, &mut tokens),
            b'.' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i = push_number(bytes, i, &mut tokens)
            }
            b'(' | b'[' | b'{' => {
                brackets.push((c, i));
                tokens.push(Token {
                    kind: Kind::Op,
                    span: i..i + 1,
                });
                i += 1;
            }
            b')' | b']' | b'}' => {
                let open = match c {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                if brackets.pop().map(|(b, _)| b) != Some(open) {
                    return Err(syntax(text, i, &format!("unmatched '{}'", c as char)));
                }
                tokens.push(Token {
                    kind: Kind::Op,
                    span: i..i + 1,
                });
                i += 1;
            }
            _ => {
                let ch = text[i..]
                    .chars()
                    .next()
                    .expect("i is below len, on a char boundary");
                if is_name_start(ch) {
                    let start = i;
                    let end = text[i..]
                        .char_indices()
                        .find(|&(_, ch)| !is_name_char(ch))
                        .map_or(text.len(), |(k, _)| i + k);
                    let word = &text[start..end];
                    let quoted = matches!(bytes.get(end), Some(b'\'' | b'"'));
                    if quoted && STRING_PREFIXES.contains(&word.to_ascii_lowercase().as_str()) {
                        let (tok, after) = scan_string(text, start, end)?;
                        tokens.push(tok);
                        i = after;
                    } else {
                        tokens.push(Token {
                            kind: Kind::Name,
                            span: start..end,
                        });
                        i = end;
                    }
                } else if ch.is_ascii() {
                    let rest = &text[i..];
                    let len = if OPERATORS_3.iter().any(|op| rest.starts_with(op)) {
                        3
                    } else if OPERATORS_2.iter().any(|op| rest.starts_with(op)) {
                        2
                    } else {
                        1
                    };
                    tokens.push(Token {
                        kind: Kind::Op,
                        span: i..i + len,
                    });
                    i += len;
                } else {
                    // Non-ASCII whitespace (e.g. NBSP) outside a string: Python refuses it.
                    return Err(syntax(text, i, &format!("unexpected character {ch:?}")));
                }
            }
        }
    }
    if let Some(&(b, at)) = brackets.last() {
        return Err(syntax(
            text,
            at,
            &format!("'{}' is never closed", b as char),
        ));
    }
    if !tokens.is_empty() {
        lines.push(Line { indent, tokens });
    }
    Ok(lines)
}

/// Pushes the number token starting at `start` (digits, `_`, `.`, letters for bases, suffixes
/// and exponents, an exponent's sign); returns the offset after it.
fn push_number(bytes: &[u8], start: usize, tokens: &mut Vec<Token>) -> usize {
    let hex = bytes[start..].starts_with(b"0x") || bytes[start..].starts_with(b"0X");
    let mut i = start;
    while i < bytes.len() {
        let c = bytes[i];
        let exponent_sign = matches!(c, b'+' | b'-') && !hex && matches!(bytes[i - 1], b'e' | b'E');
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || exponent_sign {
            i += 1;
        } else {
            break;
        }
    }
    tokens.push(Token {
        kind: Kind::Number,
        span: start..i,
    });
    i
}

/// Scans the string literal whose prefix starts at `start` and whose opening quote is at
/// `quote_at`; returns its token and the offset after the closing quote.
fn scan_string(text: &str, start: usize, quote_at: usize) -> Result<(Token, usize), EditError> {
    let bytes = text.as_bytes();
    let prefix = text[start..quote_at].to_ascii_lowercase();
    let quote = bytes[quote_at];
    let triple = bytes[quote_at..].starts_with(&[quote; 3]);
    let body_start = quote_at + if triple { 3 } else { 1 };
    let formatted = prefix.contains('f') || prefix.contains('t');
    let mut i = body_start;
    loop {
        let Some(&c) = bytes.get(i) else {
            return Err(syntax(text, start, "a string is never closed"));
        };
        match c {
            // Even in a raw string a backslash keeps the next character from closing it.
            b'\\' => i += 2,
            b'\n' if !triple => return Err(syntax(text, start, "a string is never closed")),
            b'{' if formatted && bytes.get(i + 1) == Some(&b'{') => i += 2,
            b'{' if formatted => i = skip_replacement_field(text, i + 1, quote, triple)?,
            _ if c == quote => {
                if !triple {
                    break;
                }
                if bytes[i..].starts_with(&[quote; 3]) {
                    break;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    let end = i + if triple { 3 } else { 1 };
    let tok = Token {
        kind: Kind::Str(StrTok {
            prefix,
            quote,
            triple,
            body: body_start..i,
        }),
        span: start..end,
    };
    Ok((tok, end))
}

/// Skips an f-string replacement field whose expression starts at `i` (after `{`); returns the
/// offset after its closing `}`. Nested strings, brackets and format specs are followed, so a
/// quote or `#` inside the field never ends the enclosing string early.
fn skip_replacement_field(
    text: &str,
    mut i: usize,
    outer_quote: u8,
    outer_triple: bool,
) -> Result<usize, EditError> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let unclosed = |at: usize| syntax(text, at, "an f-string replacement field is never closed");
    let start = i;
    loop {
        let Some(&c) = bytes.get(i) else {
            return Err(unclosed(start));
        };
        match c {
            b'\'' | b'"' => i = scan_string(text, i, i)?.1,
            b'(' | b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b')' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'}' if depth == 0 => return Ok(i + 1),
            b'}' => {
                depth -= 1;
                i += 1;
            }
            b'!' if bytes.get(i + 1) == Some(&b'=') => i += 2,
            b':' if depth == 0 => {
                // The format spec: literal text with nested `{...}` fields, up to the `}`.
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return Err(unclosed(start)),
                        Some(b'{') => {
                            i = skip_replacement_field(text, i + 1, outer_quote, outer_triple)?
                        }
                        Some(b'}') => return Ok(i + 1),
                        Some(b'\n') if !outer_triple => return Err(unclosed(start)),
                        Some(&q) if q == outer_quote && !outer_triple => {
                            return Err(unclosed(start))
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            b'\n' if !outer_triple => return Err(unclosed(start)),
            _ => {
                let ch = text[i..].chars().next().expect("i is on a char boundary");
                if is_name_start(ch) {
                    // A prefixed nested string (`f"{f'x'}"`), else just a name.
                    let end = text[i..]
                        .char_indices()
                        .find(|&(_, ch)| !is_name_char(ch))
                        .map_or(text.len(), |(k, _)| i + k);
                    let quoted = matches!(bytes.get(end), Some(b'\'' | b'"'));
                    let word = text[i..end].to_ascii_lowercase();
                    i = if quoted && STRING_PREFIXES.contains(&word.as_str()) {
                        scan_string(text, i, end)?.1
                    } else {
                        end
                    };
                } else {
                    i += ch.len_utf8();
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scopes and bindings

/// What a binding of a name holds.
#[derive(Debug, Clone)]
enum Bound {
    /// A plain assignment: the literal and its span, or why the value is not one.
    Value(Result<(Scalar, Range<usize>), String>),
    Class,
    /// Another kind of binding (import, `def`, loop variable, ...), described.
    Other(String),
}

#[derive(Debug, Clone)]
struct Binding {
    /// The class names the binding sits in (empty: module level).
    path: Vec<String>,
    name: String,
    /// Byte offset of the binding statement.
    at: usize,
    /// The keyword of an enclosing `if`/`try`/`for`/... block, if any.
    conditional: Option<&'static str>,
    what: Bound,
}

/// Every binding at module and class level, and the names functions declare `global`.
#[derive(Debug, Default)]
struct Module {
    bindings: Vec<Binding>,
    /// `global NAME` statements inside functions, with their byte offsets.
    globals: Vec<(String, usize)>,
}

impl Module {
    fn bound(&self, path: &[&str], name: &str) -> Vec<&Binding> {
        self.bindings
            .iter()
            .filter(|b| {
                b.name == name && b.path.iter().map(String::as_str).eq(path.iter().copied())
            })
            .collect()
    }
}

/// An open block: a class body (a scope of its own for keys), a function body (ignored: its
/// names are locals), or any other compound statement (same scope, but conditional).
#[derive(Debug, Clone)]
enum Block {
    Class(String),
    Def,
    Flow(&'static str),
}

/// Where a statement runs: its class path, inside a function or not, under which block.
#[derive(Debug, Clone, Default)]
struct Scope {
    path: Vec<String>,
    in_def: bool,
    conditional: Option<&'static str>,
}

impl Scope {
    fn of(stack: &[(usize, Block)]) -> Scope {
        let mut scope = Scope::default();
        for (_, block) in stack {
            scope.enter(block);
        }
        scope
    }

    fn enter(&mut self, block: &Block) {
        match block {
            Block::Class(name) => self.path.push(name.clone()),
            Block::Def => self.in_def = true,
            Block::Flow(kw) => {
                self.conditional.get_or_insert(kw);
            }
        }
    }
}

const FLOW_KEYWORDS: &[&str] = &[
    "if", "elif", "else", "for", "while", "try", "except", "finally", "with", "match", "case",
];

fn block_name(kw: &str) -> String {
    let article = if kw.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} `{kw}` block")
}

fn line_list(text: &str, bound: &[&Binding]) -> String {
    let lines: Vec<String> = bound
        .iter()
        .map(|b| line_of(text, b.at).to_string())
        .collect();
    match lines.as_slice() {
        [.., last] if lines.len() > 1 => {
            format!("{} and {last}", lines[..lines.len() - 1].join(", "))
        }
        _ => lines.join(""),
    }
}

/// Statement-level view of a token slice against the source text.
struct Stmt<'a> {
    text: &'a str,
    toks: &'a [Token],
}

impl<'a> Stmt<'a> {
    fn s(&self, k: usize) -> &'a str {
        self.toks.get(k).map_or("", |t| &self.text[t.span.clone()])
    }
    fn is_op(&self, k: usize, op: &str) -> bool {
        self.toks.get(k).is_some_and(|t| t.kind == Kind::Op) && self.s(k) == op
    }
    fn is_name(&self, k: usize) -> bool {
        self.toks.get(k).is_some_and(|t| t.kind == Kind::Name)
    }
    /// Indices of tokens outside any bracket of this statement.
    fn top_level(&self) -> Vec<usize> {
        let mut depth = 0usize;
        let mut out = Vec::new();
        for k in 0..self.toks.len() {
            let tok = self.s(k);
            if self.toks[k].kind == Kind::Op && matches!(tok, ")" | "]" | "}") {
                depth = depth.saturating_sub(1);
            }
            if depth == 0 {
                out.push(k);
            }
            if self.toks[k].kind == Kind::Op && matches!(tok, "(" | "[" | "{") {
                depth += 1;
            }
        }
        out
    }
    /// Splits at top-level `sep` operators.
    fn split(&self, sep: &str) -> Vec<Stmt<'a>> {
        let mut parts = Vec::new();
        let mut from = 0;
        for k in self.top_level() {
            if self.is_op(k, sep) {
                parts.push(Stmt {
                    text: self.text,
                    toks: &self.toks[from..k],
                });
                from = k + 1;
            }
        }
        parts.push(Stmt {
            text: self.text,
            toks: &self.toks[from..],
        });
        parts
    }
    fn span(&self) -> Range<usize> {
        match (self.toks.first(), self.toks.last()) {
            (Some(a), Some(b)) => a.span.start..b.span.end,
            _ => 0..0,
        }
    }
    /// Byte offset of the statement (lines are counted only for what gets reported).
    fn at(&self) -> usize {
        self.span().start
    }
}

/// Walks the logical lines, tracking blocks by indentation, and records every binding.
fn collect(text: &str, lines: &[Line]) -> Module {
    let mut module = Module::default();
    let mut stack: Vec<(usize, Block)> = Vec::new();
    for line in lines {
        while stack
            .last()
            .is_some_and(|(indent, _)| *indent >= line.indent)
        {
            stack.pop();
        }
        let scope = Scope::of(&stack);
        let stmt = Stmt {
            text,
            toks: &line.tokens,
        };
        match header(&stmt) {
            Some((block, colon)) => {
                header_bindings(&stmt, &block, colon, &scope, &mut module);
                let body = Stmt {
                    text,
                    toks: &line.tokens[colon + 1..],
                };
                if body.toks.is_empty() {
                    stack.push((line.indent, block));
                } else {
                    let mut inner = scope.clone();
                    inner.enter(&block);
                    for part in body.split(";") {
                        statement(&part, &inner, &mut module);
                    }
                }
            }
            None => {
                for part in stmt.split(";") {
                    statement(&part, &scope, &mut module);
                }
            }
        }
    }
    module
}

/// If the logical line opens a block: the block and the index of its top-level `:`.
fn header(stmt: &Stmt) -> Option<(Block, usize)> {
    if !stmt.is_name(0) {
        return None;
    }
    let mut first = stmt.s(0);
    let mut k0 = 0;
    if first == "async" && stmt.is_name(1) {
        first = stmt.s(1);
        k0 = 1;
    }
    let soft = matches!(first, "match" | "case");
    if soft && !stmt.is_op(stmt.toks.len() - 1, ":") {
        return None;
    }
    let block = match first {
        "class" if stmt.is_name(k0 + 1) => Block::Class(stmt.s(k0 + 1).to_string()),
        "def" => Block::Def,
        kw => Block::Flow(FLOW_KEYWORDS.iter().copied().find(|f| *f == kw)?),
    };
    // The first top-level `:` (a lambda's colon sits inside brackets in any valid header).
    let colon = stmt.top_level().into_iter().find(|&k| stmt.is_op(k, ":"))?;
    Some((block, colon))
}

fn bind(module: &mut Module, scope: &Scope, name: &str, at: usize, what: Bound) {
    if scope.in_def {
        return;
    }
    module.bindings.push(Binding {
        path: scope.path.clone(),
        name: name.to_string(),
        at,
        conditional: scope.conditional,
        what,
    });
}

/// The names a block header binds in its enclosing scope.
fn header_bindings(stmt: &Stmt, block: &Block, colon: usize, scope: &Scope, module: &mut Module) {
    let at = stmt.at();
    let head = Stmt {
        text: stmt.text,
        toks: &stmt.toks[..colon],
    };
    walrus_bindings(&head, scope, module);
    let kw_at = usize::from(head.s(0) == "async");
    match block {
        Block::Class(name) => bind(module, scope, name, at, Bound::Class),
        Block::Def => {
            if head.is_name(kw_at + 1) {
                let what = Bound::Other("a function".to_string());
                bind(module, scope, head.s(kw_at + 1), at, what);
            }
        }
        Block::Flow("for") => {
            let end = head
                .top_level()
                .into_iter()
                .find(|&k| head.is_name(k) && head.s(k) == "in")
                .unwrap_or(head.toks.len());
            for k in kw_at + 1..end {
                if head.is_name(k) {
                    let what = Bound::Other("a loop variable".to_string());
                    bind(module, scope, head.s(k), at, what);
                }
            }
        }
        Block::Flow("with" | "except") => as_bindings(&head, scope, module),
        Block::Flow(_) => {}
    }
}

/// `... as NAME` anywhere in the statement (with, except, import).
fn as_bindings(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    for k in 0..stmt.toks.len() {
        if stmt.is_name(k) && stmt.s(k) == "as" && stmt.is_name(k + 1) {
            let what = Bound::Other("bound by `as`".to_string());
            bind(module, scope, stmt.s(k + 1), stmt.at(), what);
        }
    }
}

/// `NAME := ...` anywhere in the statement.
fn walrus_bindings(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    for k in 0..stmt.toks.len() {
        if stmt.is_name(k) && stmt.is_op(k + 1, ":=") {
            let what = Bound::Other("assigned with `:=`".to_string());
            bind(module, scope, stmt.s(k), stmt.at(), what);
        }
    }
}

const AUGMENTED: &[&str] = &[
    "+=", "-=", "*=", "/=", "//=", "%=", "**=", ">>=", "<<=", "&=", "|=", "^=", "@=",
];

/// Records the bindings of one simple statement.
fn statement(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    if stmt.toks.is_empty() {
        return;
    }
    let at = stmt.at();
    walrus_bindings(stmt, scope, module);
    match stmt.s(0) {
        "global" if stmt.is_name(0) => {
            if scope.in_def {
                for k in 1..stmt.toks.len() {
                    if stmt.is_name(k) {
                        module.globals.push((stmt.s(k).to_string(), at));
                    }
                }
            }
            return;
        }
        "import" if stmt.is_name(0) => {
            for item in stmt.split(",") {
                let item = Stmt {
                    text: stmt.text,
                    toks: item.toks.strip_prefix(&stmt.toks[..1]).unwrap_or(item.toks),
                };
                let name = match item.toks.len() {
                    n if n >= 3 && item.s(n - 2) == "as" => item.s(n - 1),
                    _ => item.s(0),
                };
                bind(
                    module,
                    scope,
                    name,
                    at,
                    Bound::Other("an import".to_string()),
                );
            }
            return;
        }
        "from" if stmt.is_name(0) => {
            let Some(import_at) =
                (0..stmt.toks.len()).find(|&k| stmt.is_name(k) && stmt.s(k) == "import")
            else {
                return;
            };
            let mut k = import_at + 1;
            while k < stmt.toks.len() {
                if stmt.is_name(k) && stmt.s(k) != "as" {
                    let name = if stmt.s(k + 1) == "as" && stmt.is_name(k + 2) {
                        k += 2;
                        stmt.s(k)
                    } else {
                        stmt.s(k)
                    };
                    bind(
                        module,
                        scope,
                        name,
                        at,
                        Bound::Other("an import".to_string()),
                    );
                }
                k += 1;
            }
            return;
        }
        "del" if stmt.is_name(0) => {
            for k in stmt.top_level() {
                let bare = stmt.is_name(k)
                    && k > 0
                    && !stmt.is_op(k - 1, ".")
                    && !stmt.is_op(k + 1, ".")
                    && !stmt.is_op(k + 1, "[");
                if bare {
                    let what = Bound::Other("deleted with `del`".to_string());
                    bind(module, scope, stmt.s(k), at, what);
                }
            }
            return;
        }
        "type"
            if stmt.is_name(0) && stmt.is_name(1) && (stmt.is_op(2, "=") || stmt.is_op(2, "[")) =>
        {
            bind(
                module,
                scope,
                stmt.s(1),
                at,
                Bound::Other("a type alias".to_string()),
            );
            return;
        }
        _ => {}
    }

    // Top-level tokens before any top-level `lambda` (whose defaults use `=`).
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
            let what = format!("changed by augmented assignment (`{}`)", stmt.s(1));
            bind(module, scope, stmt.s(0), at, Bound::Other(what));
        }
        return;
    }

    // `NAME: annotation [= value]`: a bare annotation binds nothing.
    if stmt.is_name(0) && stmt.is_op(1, ":") {
        if let Some(&eq) = top.iter().find(|&&k| k > 1 && stmt.is_op(k, "=")) {
            let value = value_of(stmt, eq + 1);
            bind(module, scope, stmt.s(0), at, Bound::Value(value));
        }
        return;
    }

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
            let what = if eqs.len() > 1 {
                Bound::Value(Err(
                    "assigned in a chained assignment (`a = b = ...`)".to_string()
                ))
            } else {
                Bound::Value(value_of(stmt, last_eq + 1))
            };
            bind(module, scope, target.s(0), at, what);
        } else if is_dotted(&target) {
            // `TrainConfig.batch = 4` at module level rebinds a class attribute.
            if scope.path.is_empty() {
                let names: Vec<String> = target
                    .toks
                    .iter()
                    .step_by(2)
                    .map(|t| stmt.text[t.span.clone()].to_string())
                    .collect();
                let (path, name) = names.split_at(names.len() - 1);
                let dotted = Scope {
                    path: path.to_vec(),
                    ..scope.clone()
                };
                let what = Bound::Other(format!("reassigned as `{}`", names.join(".")));
                bind(module, &dotted, &name[0], at, what);
            }
        } else {
            // Unpacking: every bare name among the targets (not an attribute, and nothing
            // inside a subscript or a call, which only mutate).
            let mut k = 0;
            while k < target.toks.len() {
                let opens = target.is_op(k + 1, "[") || target.is_op(k + 1, "(");
                if opens && (target.is_name(k) || target.is_op(k, ")") || target.is_op(k, "]")) {
                    k = matching_close(&target, k + 1);
                    continue;
                }
                let bare = target.is_name(k)
                    && !target.is_op(k.wrapping_sub(1), ".")
                    && !target.is_op(k + 1, ".");
                if bare {
                    let what = Bound::Other("assigned by unpacking a tuple".to_string());
                    bind(module, scope, target.s(k), at, what);
                }
                k += 1;
            }
        }
    }
}

/// The index after the bracket that closes the one at `open`.
fn matching_close(stmt: &Stmt, open: usize) -> usize {
    let mut depth = 0usize;
    for k in open..stmt.toks.len() {
        if stmt.toks[k].kind != Kind::Op {
            continue;
        }
        match stmt.s(k) {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    stmt.toks.len()
}

fn is_dotted(target: &Stmt) -> bool {
    let n = target.toks.len();
    n >= 3
        && n % 2 == 1
        && (0..n).all(|k| {
            if k % 2 == 0 {
                target.is_name(k)
            } else {
                target.is_op(k, ".")
            }
        })
}

/// The literal that tokens `from..` of `stmt` spell (the whole rest of the statement), with its
/// span; or why it is not one.
fn value_of(stmt: &Stmt, from: usize) -> Result<(Scalar, Range<usize>), String> {
    let value = Stmt {
        text: stmt.text,
        toks: &stmt.toks[from.min(stmt.toks.len())..],
    };
    let found = literal(&value)?;
    if stmt.text[stmt.span()].contains('\n') {
        return Err("a statement continued over several lines".to_string());
    }
    Ok(found)
}

/// Reads a whole token sequence as one literal.
fn literal(v: &Stmt) -> Result<(Scalar, Range<usize>), String> {
    let expression = || Err("an expression".to_string());
    let Some(first) = v.toks.first() else {
        return expression();
    };
    if v.top_level().iter().any(|&k| v.is_op(k, ",")) {
        return Err("a tuple".to_string());
    }
    let (value, used) = match &first.kind {
        Kind::Op if v.s(0) == "[" => return Err("a list".to_string()),
        Kind::Op if v.s(0) == "{" => return Err("a dict or set".to_string()),
        Kind::Op if v.s(0) == "(" => return Err("a value in parentheses".to_string()),
        Kind::Op if v.s(0) == "-" && v.toks.get(1).is_some_and(|t| t.kind == Kind::Number) => {
            let digits = v.s(1);
            (number(&format!("-{digits}"))?, 2)
        }
        Kind::Number => (number(v.s(0))?, 1),
        Kind::Name => match v.s(0) {
            "True" => (Scalar::Bool(true), 1),
            "False" => (Scalar::Bool(false), 1),
            "None" => return Err("None".to_string()),
            _ if v.is_op(1, "(") => return Err("a call".to_string()),
            _ if v.toks.len() == 1 => return Err("a name, not a literal".to_string()),
            _ => return expression(),
        },
        Kind::Str(s) => {
            if v.toks
                .get(1)
                .is_some_and(|t| matches!(t.kind, Kind::Str(_)))
            {
                return Err("implicitly concatenated strings".to_string());
            }
            (Scalar::Str(string_value(v.text, s)?), 1)
        }
        Kind::Op => return expression(),
    };
    if v.toks.len() > used {
        return expression();
    }
    Ok((value, first.span.start..v.toks[used - 1].span.end))
}

/// A number token's value (with a leading `-` when negative).
fn number(spelled: &str) -> Result<Scalar, String> {
    let cleaned: String = spelled
        .chars()
        .filter(|&c| c != '_' && !c.is_whitespace())
        .collect();
    let (negative, digits) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.as_str()),
    };
    let lower = digits.to_ascii_lowercase();
    if lower.ends_with('j') {
        return Err("a complex number".to_string());
    }
    let radix = match lower.get(..2) {
        Some("0x") => Some(16),
        Some("0o") => Some(8),
        Some("0b") => Some(2),
        _ => None,
    };
    let unreadable = || format!("a number oomguard cannot read ({spelled})");
    if let Some(radix) = radix {
        let sign = if negative { "-" } else { "" };
        return i64::from_str_radix(&format!("{sign}{}", &lower[2..]), radix)
            .map(Scalar::Int)
            .map_err(|_| unreadable());
    }
    if lower.contains(['.', 'e']) {
        return cleaned
            .parse::<f64>()
            .map(Scalar::Float)
            .map_err(|_| unreadable());
    }
    if lower.len() > 1 && lower.starts_with('0') && lower.bytes().any(|b| b != b'0') {
        return Err(unreadable()); // `08`: not Python
    }
    cleaned
        .parse::<i64>()
        .map(Scalar::Int)
        .map_err(|e| match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "an integer beyond 64 bits".to_string()
            }
            _ => unreadable(),
        })
}

/// The value of a one-line `'...'`/`"..."` string (prefix `r` or `u`), escapes decoded.
fn string_value(text: &str, s: &StrTok) -> Result<String, String> {
    if s.triple {
        return Err("a triple-quoted string".to_string());
    }
    if s.prefix.contains('b') {
        return Err("a bytes literal".to_string());
    }
    if s.prefix.contains('f') {
        return Err("an f-string".to_string());
    }
    if s.prefix.contains('t') {
        return Err("a template string".to_string());
    }
    let body = &text[s.body.clone()];
    if s.prefix.contains('r') {
        return Ok(body.to_string());
    }
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    let bad = |esc: &str| {
        Err(format!(
            "a string with an escape oomguard cannot read (`\\{esc}`)"
        ))
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            return bad("");
        };
        match e {
            '\\' | '\'' | '"' => out.push(e),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '0'..='7' => {
                let mut code = e.to_digit(8).expect("an octal digit");
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            code = code * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(code).expect("at most 0o777, a valid char"));
            }
            'x' | 'u' | 'U' => {
                let len = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = (0..len).filter_map(|_| chars.next()).collect();
                let code = (hex.len() == len)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten();
                match code.and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => return bad(&format!("{e}{hex}")),
                }
            }
            'N' => return bad("N{...}"),
            // Python keeps an unknown escape as it is (with a warning).
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    Ok(out)
}

/// The value `old` spells, if it is one literal.
fn read_literal(old: &str) -> Option<Scalar> {
    let lines = tokenize(old).ok()?;
    let [line] = lines.as_slice() else {
        return None;
    };
    let v = Stmt {
        text: old,
        toks: &line.tokens,
    };
    literal(&v).ok().map(|(value, _)| value)
}

// ---------------------------------------------------------------------------------------------
// Rendering

/// Whether `old` is a number literal, whose style a new number follows.
fn is_number(old: &str) -> bool {
    old.trim_start_matches(['-', ' '])
        .starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// `n` in `old`'s base (`0x`/`0o`/`0b`, hex digit case) and `_` grouping, when `old` is a number.
fn render_int(n: i64, old: &str) -> String {
    let old = if is_number(old) {
        old.trim_start_matches(['-', ' '])
    } else {
        "0"
    };
    let lower = old.to_ascii_lowercase();
    let (radix, group) = match lower.get(..2) {
        Some("0x") => (16, 4),
        Some("0o") => (8, 3),
        Some("0b") => (2, 4),
        _ => (10, 3),
    };
    let magnitude = n.unsigned_abs();
    let mut digits = match radix {
        16 if old[2..].bytes().any(|b| b.is_ascii_uppercase()) => format!("{magnitude:X}"),
        16 => format!("{magnitude:x}"),
        8 => format!("{magnitude:o}"),
        2 => format!("{magnitude:b}"),
        _ => magnitude.to_string(),
    };
    let grouped = old
        .get(if radix == 10 { 0 } else { 2 }..)
        .is_some_and(|d| d.contains('_'));
    if grouped {
        digits = group_digits(&digits, group);
    }
    let prefix = if radix == 10 { "" } else { &old[..2] };
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{prefix}{digits}")
}

/// `1234567` → `1_234_567`.
fn group_digits(digits: &str, size: usize) -> String {
    let mut out = String::new();
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k) % size == 0 {
            out.push('_');
        }
        out.push(c);
    }
    out
}

/// `x` as a Python float literal (exponent form when `old` had one); non-finite values need a
/// call, which `locate` would then refuse as an expression.
fn render_float(x: f64, old: &str) -> String {
    if x.is_nan() {
        return "float(\"nan\")".to_string();
    }
    if x.is_infinite() {
        let sign = if x < 0.0 { "-" } else { "" };
        return format!("float(\"{sign}inf\")");
    }
    let digits = old.trim_start_matches(['-', ' ']).to_ascii_lowercase();
    let decimal = is_number(old) && !digits.starts_with("0x");
    if decimal && old.contains('e') {
        format!("{x:e}")
    } else if decimal && old.contains('E') {
        format!("{x:E}")
    } else {
        // Debug always writes a `.0` or an exponent, so the literal stays a float in Python.
        format!("{x:?}")
    }
}

/// `s` quoted like `old` (quote character, `u`/`r` prefix), escaped so Python reads it back
/// exactly: backslash, the quote, CR/LF and control characters.
fn render_str(s: &str, old: &str) -> String {
    let prefix_len = old.find(['\'', '"']).unwrap_or(0);
    let (prefix, quote) = match old[prefix_len..].chars().next() {
        Some(q @ ('\'' | '"')) if old[..prefix_len].chars().all(|c| "rRuU".contains(c)) => {
            (&old[..prefix_len], q)
        }
        _ => ("", '"'),
    };
    let raw = prefix.contains(['r', 'R']);
    let raw_fits =
        !s.contains(quote) && !s.ends_with('\\') && !s.chars().any(|c| c.is_control() && c != '\t');
    if raw && raw_fits {
        return format!("{prefix}{quote}{s}{quote}");
    }
    let prefix: String = prefix.chars().filter(|c| !"rR".contains(*c)).collect();
    let mut out = format!("{prefix}{quote}");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            _ if c == quote => {
                out.push('\\');
                out.push(c);
            }
            _ if c.is_control() => {
                let code = c as u32;
                if code <= 0xff {
                    out.push_str(&format!("\\x{code:02x}"));
                } else {
                    out.push_str(&format!("\\u{code:04x}"));
                }
            }
            _ => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::super::{set, Format};
    use super::*;

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

    /// A new value rendered fresh (not equal to `old`) reads back as itself, in every quote
    /// style, for text that needs escapes.
    #[test]
    fn rendered_strings_read_back() {
        for old in STRING_STYLES {
            for v in AWKWARD_STRINGS {
                let text = render(&string(v), old);
                assert_eq!(
                    read_literal(&text),
                    Some(string(v)),
                    "{v:?} rendered over {old}: {text}"
                );
            }
        }
    }

    const AWKWARD_STRINGS: &[&str] = &[
        "",
        "plain",
        "it's",
        "say \"hi\"",
        "both ' and \"",
        "back\\slash",
        "ends\\",
        "new\nline",
        "cr\rlf",
        "tab\there",
        "bell\x07",
        "del\x7f",
        "c1\u{85}",
        "ünï ✓ 😀",
        "{braces}",
        "# not a comment",
        "\\N{BULLET}",
        "\\x41",
        "\u{2028}",
    ];
    const STRING_STYLES: &[&str] = &["'x'", "\"x\"", "r'x'", "R\"x\"", "u'x'", "8", "True"];

    /// Real Python reads every freshly rendered string as the intended value.
    #[test]
    fn python_agrees_with_rendered_strings() {
        let probe = std::process::Command::new("python3")
            .arg("-c")
            .arg("pass")
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            println!("SKIPPED python_agrees_with_rendered_strings: no python3 on PATH");
            return;
        }
        let mut module = String::from("import json\nV = []\n");
        let mut want = Vec::new();
        for old in STRING_STYLES {
            for v in AWKWARD_STRINGS {
                module.push_str(&format!("V.append({})\n", render(&string(v), old)));
                want.push(*v);
            }
        }
        module.push_str("print(json.dumps(V))\n");
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("strings.py");
        std::fs::write(&path, &module).expect("temp file written");
        let run = std::process::Command::new("python3")
            .arg(&path)
            .output()
            .expect("python3 runs");
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let got: Vec<String> = serde_json::from_slice(&run.stdout).expect("python printed JSON");
        assert_eq!(got, want);
    }

    #[test]
    fn rendered_numbers_and_bools() {
        let cases: &[(Scalar, &str, &str)] = &[
            (int(4), "8", "4"),
            (int(-4), "8", "-4"),
            (int(1_234_567), "1_000", "1_234_567"),
            (int(-1_234_567), "-1_000", "-1_234_567"),
            (int(255), "0x10", "0xff"),
            (int(255), "0X1A", "0XFF"),
            (int(0x1_0000_0000), "0xffff_ffff", "0x1_0000_0000"),
            (int(8), "0o10", "0o10"),
            (int(9), "0o10", "0o11"),
            (int(5), "0b1", "0b101"),
            (int(i64::MIN), "0", "-9223372036854775808"),
            (int(3), "'three'", "3"),
            (float(0.5), "1", "0.5"),
            (float(4.0), "0.1", "4.0"),
            (float(1e-7), "0.1", "1e-7"),
            (float(2.0), "1e-3", "2e0"),
            (float(2.5e-5), "1E-3", "2.5E-5"),
            (float(f64::INFINITY), "1.0", "float(\"inf\")"),
            (float(f64::NEG_INFINITY), "1.0", "float(\"-inf\")"),
            (float(f64::NAN), "1.0", "float(\"nan\")"),
            (float(0.5), "'true'", "0.5"),
            (Scalar::Bool(true), "False", "True"),
            (Scalar::Bool(false), "1", "False"),
        ];
        for (value, old, want) in cases {
            assert_eq!(render(value, old), *want, "{value:?} over {old}");
        }
        // Every finite rendering reads back as the value.
        for (value, old, _) in cases {
            let text = render(value, old);
            if !text.starts_with("float(") {
                assert_eq!(read_literal(&text).as_ref(), Some(value), "{text}");
            }
        }
    }

    #[test]
    fn the_same_value_keeps_its_spelling() {
        for old in [
            "1_000", "0x3E8", "1000", "1e3", "'\\x41'", "r'A'", "- 5", "1000.0",
        ] {
            let value = read_literal(old).expect("a literal");
            assert_eq!(render(&value, old), old);
        }
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
    fn stale_pyc_paths_lists_only_this_modules_cache() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let cache = dir.path().join("__pycache__");
        std::fs::create_dir(&cache).expect("cache dir");
        for name in [
            "config.cpython-312.pyc",
            "config.cpython-312.opt-1.pyc",
            "config.pypy310.pyc",
            "config_extra.cpython-312.pyc",
            "configs.cpython-312.pyc",
            "train.cpython-312.pyc",
            "config.cpython-312.pyc.tmp",
            "config.pyc",
        ] {
            std::fs::write(cache.join(name), b"").expect("cache file");
        }
        let py = dir.path().join("config.py");
        std::fs::write(&py, "BATCH = 8\n").expect("source");
        let want: Vec<PathBuf> = [
            "config.cpython-312.opt-1.pyc",
            "config.cpython-312.pyc",
            "config.pypy310.pyc",
        ]
        .iter()
        .map(|n| cache.join(n))
        .collect();
        assert_eq!(stale_pyc_paths(&py), want);
        // No cache directory, or a module without one: nothing to remove.
        assert!(stale_pyc_paths(&dir.path().join("other.py")).is_empty());
        let bare = tempfile::tempdir().expect("a temp dir");
        assert!(stale_pyc_paths(&bare.path().join("config.py")).is_empty());
    }

    /// The trap itself, with real Python: a same-length edit within the same second is not
    /// seen through the cache; removing [`stale_pyc_paths`] makes it seen.
    #[test]
    fn stale_pyc_removal_makes_python_see_a_same_second_edit() {
        let probe = std::process::Command::new("python3")
            .arg("-c")
            .arg("pass")
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            println!("SKIPPED stale_pyc_removal_makes_python_see_a_same_second_edit: no python3");
            return;
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let py = dir.path().join("config.py");
        let import = || {
            let out = std::process::Command::new("python3")
                .args(["-c", "import config; print(config.BATCH)"])
                .current_dir(dir.path())
                .env_remove("PYTHONDONTWRITEBYTECODE")
                .env_remove("PYTHONPYCACHEPREFIX")
                .output()
                .expect("python3 runs");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let text = "BATCH = 8\n";
        std::fs::write(&py, text).expect("source");
        let mtime = std::fs::metadata(&py)
            .and_then(|m| m.modified())
            .expect("mtime");
        assert_eq!(import(), "8");
        assert!(!stale_pyc_paths(&py).is_empty(), "python wrote its cache");

        let edited = set(Format::Python, text, "BATCH", &int(4)).expect("editable");
        std::fs::write(&py, &edited).expect("edit");
        // Pin the edit into the same second as the cached source, as a fast edit would land.
        let file = std::fs::File::options()
            .write(true)
            .open(&py)
            .expect("open");
        file.set_modified(mtime).expect("set mtime");
        drop(file);
        assert_eq!(import(), "8", "the trap: the cache hides the edit");

        for stale in stale_pyc_paths(&py) {
            std::fs::remove_file(stale).expect("remove stale pyc");
        }
        assert_eq!(import(), "4");
    }
}

/// A script's globals as [`top_level`] reads them (nanoGPT's train.py and its config files):
/// literal arithmetic evaluated, what is no literal refused, only unconditional top-level
/// statements, and [`append`].
#[cfg(test)]
mod globals {
    use super::*;

    fn int(n: i64) -> Result<Scalar, String> {
        Ok(Scalar::Int(n))
    }
    fn float(x: f64) -> Result<Scalar, String> {
        Ok(Scalar::Float(x))
    }

    #[test]
    fn literals_and_literal_arithmetic_are_evaluated_as_python_does() {
        let table: &[(&str, Result<Scalar, String>)] = &[
            ("12", int(12)),
            ("5 * 8", int(40)),
            ("2**10", int(1024)),
            ("(1+2)*3", int(9)),
            ("1e-3", float(1e-3)),
            ("-1", int(-1)),
            ("- 1", int(-1)),
            ("+4", int(4)),
            ("7 // 2", int(3)),
            ("-7 // 2", int(-4)),
            ("7 % -3", int(-2)),
            ("-7 % 3", int(2)),
            ("10 / 4", float(2.5)),
            ("6 / 3", float(2.0)),
            ("2**-1", float(0.5)),
            ("-2**2", int(-4)),
            ("2**3**2", int(512)),
            ("1_000 * 2", int(2000)),
            ("0x10 * 2", int(32)),
            ("6e-4 * 2", float(12e-4)),
            ("2 * 1.5", float(3.0)),
            ("7.5 // 2", float(3.0)),
            ("((12))", int(12)),
            ("12 # micro-batch", int(12)),
            ("True", Ok(Scalar::Bool(true))),
            ("'owt'", Ok(Scalar::Str("owt".into()))),
        ];
        for (text, want) in table {
            let got = evaluate(text);
            match (&got, want) {
                (Ok(Scalar::Float(x)), Ok(Scalar::Float(y))) => {
                    assert!((x - y).abs() < 1e-12, "{text}: {got:?}")
                }
                _ => assert_eq!(&got, want, "{text}"),
            }
        }
    }

    #[test]
    fn what_is_not_literal_arithmetic_is_no_value_and_says_what_it_is() {
        let table: &[(&str, &str)] = &[
            ("int(os.environ.get('BS', 12))", "a call"),
            ("ddp_world_size * 2", "a name (`ddp_world_size`)"),
            ("2 * ddp_world_size", "a name (`ddp_world_size`)"),
            ("batch_size", "a name, not a literal"),
            ("[1, 2]", "a list"),
            ("{'a': 1}", "a dict or set"),
            ("None", "None"),
            ("1, 2", "a tuple"),
            ("1 / 0", "a division by zero"),
            ("5 // 0", "a division by zero"),
            ("2**64", "beyond 64 bits"),
            ("9223372036854775807 + 1", "beyond 64 bits"),
            ("(-8) ** 0.5", "a complex number"),
            ("12 if big else 8", "an expression"),
            ("1e308 * 10", "beyond range"),
            ("'a' * 3", "an expression"),
            ("True + 1", "an expression"),
            ("(1 + 2", "never closed"),
        ];
        for (text, want) in table {
            let got = evaluate(text).expect_err(text);
            assert!(got.contains(want), "{text}: {got}");
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

/// A key inside a `dict(...)` call bound to a module-level name (mmengine's configs).
#[cfg(test)]
mod dict_calls {
    use super::super::{set, EditError, Format};
    use super::*;

    /// mmdetection's `configs/_base_/datasets/coco_detection.py`, trimmed.
    const COCO: &str = "\
dataset_type = 'CocoDataset'
train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type=dataset_type, data_prefix=dict(img='train2017/')))
optim_wrapper = dict(type='OptimWrapper', accumulative_counts=4)  # four steps
auto_scale_lr = dict(enable=False, base_batch_size=16)
";

    #[test]
    fn keys_inside_dict_calls_are_found_and_set() {
        let table: &[(&str, Scalar, Scalar, &str)] = &[
            (
                "train_dataloader.batch_size",
                Scalar::Int(2),
                Scalar::Int(1),
                "    batch_size=1,\n",
            ),
            (
                "train_dataloader.sampler.shuffle",
                Scalar::Bool(true),
                Scalar::Bool(false),
                "sampler=dict(type='DefaultSampler', shuffle=False)",
            ),
            (
                "optim_wrapper.accumulative_counts",
                Scalar::Int(4),
                Scalar::Int(8),
                "accumulative_counts=8)  # four steps",
            ),
        ];
        for (key, found, new, after) in table {
            assert_eq!(&locate(COCO, key).unwrap().value, found, "{key}");
            let text = set(Format::Python, COCO, key, new).unwrap();
            assert!(text.contains(after), "{key}: {text}");
            assert_eq!(text.lines().count(), COCO.lines().count(), "{key}");
        }
    }

    #[test]
    fn what_is_no_literal_or_no_keyword_says_so() {
        let table: &[(&str, Option<&str>)] = &[
            ("train_dataloader.pin_memory", None),
            (
                "train_dataloader.dataset.type",
                Some("a name, not a literal"),
            ),
            ("dataset_type.x", None),
            ("train_dataloader.batch_size.x", None),
        ];
        for (key, want) in table {
            match (locate(COCO, key), want) {
                (Err(EditError::NotFound { .. }), None) => {}
                (Err(EditError::NotScalar { what, .. }), Some(w)) if what.contains(w) => {}
                (other, _) => panic!("{key}: {other:?}"),
            }
        }
    }
}

/// Calls of a function by name, read with the tokenizer (argparse declarations).
#[cfg(test)]
mod named_calls {
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
