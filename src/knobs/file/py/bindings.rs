//! The statement and assignment reader: walks a module's logical lines, tracks blocks by
//! indentation (class bodies, function bodies, `if`/`for`/`try`/... blocks), and records every
//! name each statement binds at module or class level (assignments with their literal, imports,
//! `def`s, loop variables, `del`, `global`, ...), so [`super::locate`](mod@super::locate) can
//! tell a name bound once, unconditionally, from one that is ambiguous. It evaluates nothing
//! beyond one literal ([`super::literal`]) and ignores what functions bind.

use std::ops::Range;

use super::literal::literal;
use super::stmt::{matching_close, Stmt};
use super::tokenize::Line;
use crate::knobs::file::{line_of, Scalar};

/// What a binding of a name holds.
#[derive(Debug, Clone)]
pub(super) enum Bound {
    /// A plain assignment: the literal and its span, or why the value is not one.
    Value(Result<(Scalar, Range<usize>), String>),
    Class,
    /// Another kind of binding (import, `def`, loop variable, ...), described.
    Other(String),
}

#[derive(Debug, Clone)]
pub(super) struct Binding {
    /// The class names the binding sits in (empty: module level).
    path: Vec<String>,
    name: String,
    /// Byte offset of the binding statement.
    pub(super) at: usize,
    /// The keyword of an enclosing `if`/`try`/`for`/... block, if any.
    pub(super) conditional: Option<&'static str>,
    pub(super) what: Bound,
}

/// Every binding at module and class level, and the names functions declare `global`.
#[derive(Debug, Default)]
pub(super) struct Module {
    bindings: Vec<Binding>,
    /// `global NAME` statements inside functions, with their byte offsets.
    pub(super) globals: Vec<(String, usize)>,
}

impl Module {
    pub(super) fn bound(&self, path: &[&str], name: &str) -> Vec<&Binding> {
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
pub(super) enum Block {
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

/// `kw`'s block in words, for a refusal: "an `if` block".
pub(super) fn block_name(kw: &str) -> String {
    let article = if kw.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} `{kw}` block")
}

/// The lines of `bound`, "3, 7 and 9", to name every binding of an ambiguous name.
pub(super) fn line_list(text: &str, bound: &[&Binding]) -> String {
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

/// Walks the logical lines, tracking blocks by indentation, and records every binding.
pub(super) fn collect(text: &str, lines: &[Line]) -> Module {
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
pub(super) fn header(stmt: &Stmt) -> Option<(Block, usize)> {
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

/// Records a binding in `scope`; one inside a function is a local, never a config value.
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

pub(super) const AUGMENTED: &[&str] = &[
    "+=", "-=", "*=", "/=", "//=", "%=", "**=", ">>=", "<<=", "&=", "|=", "^=", "@=",
];

/// Records the bindings of one simple statement.
fn statement(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    if stmt.toks.is_empty() {
        return;
    }
    walrus_bindings(stmt, scope, module);
    if !keyword_statement(stmt, scope, module) {
        assignment(stmt, scope, module);
    }
}

/// The bindings of a statement a keyword opens (`global`, `import`, `from`, `del`, `type`),
/// which is then no assignment; `false` where it opens with none of them.
fn keyword_statement(stmt: &Stmt, scope: &Scope, module: &mut Module) -> bool {
    match stmt.s(0) {
        "global" if stmt.is_name(0) => global_names(stmt, scope, module),
        "import" if stmt.is_name(0) => import_bindings(stmt, scope, module),
        "from" if stmt.is_name(0) => from_import_bindings(stmt, scope, module),
        "del" if stmt.is_name(0) => del_bindings(stmt, scope, module),
        "type"
            if stmt.is_name(0) && stmt.is_name(1) && (stmt.is_op(2, "=") || stmt.is_op(2, "[")) =>
        {
            bind(
                module,
                scope,
                stmt.s(1),
                stmt.at(),
                Bound::Other("a type alias".to_string()),
            );
        }
        _ => return false,
    }
    true
}

/// `global NAME, ...` inside a function: that function can rebind the module-level name when
/// it runs, so the name's value in the file is not the one the job sees.
fn global_names(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    if scope.in_def {
        for k in 1..stmt.toks.len() {
            if stmt.is_name(k) {
                module.globals.push((stmt.s(k).to_string(), stmt.at()));
            }
        }
    }
}

/// `import a.b, c as d`: each name the import binds (`a`, `d`), which makes a config name of
/// the same spelling bound twice.
fn import_bindings(stmt: &Stmt, scope: &Scope, module: &mut Module) {
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
            stmt.at(),
            Bound::Other("an import".to_string()),
        );
    }
}

/// `from m import a, b as c`: each name imported (`a`, `c`); `*` binds none that can be told.
fn from_import_bindings(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    let Some(import_at) = (0..stmt.toks.len()).find(|&k| stmt.is_name(k) && stmt.s(k) == "import")
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
                stmt.at(),
                Bound::Other("an import".to_string()),
            );
        }
        k += 1;
    }
}

/// `del NAME`: the bare names deleted (not an attribute or an item, which only mutate), whose
/// value after the statement is none.
fn del_bindings(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    for k in stmt.top_level() {
        let bare = stmt.is_name(k)
            && k > 0
            && !stmt.is_op(k - 1, ".")
            && !stmt.is_op(k + 1, ".")
            && !stmt.is_op(k + 1, "[");
        if bare {
            let what = Bound::Other("deleted with `del`".to_string());
            bind(module, scope, stmt.s(k), stmt.at(), what);
        }
    }
}

/// An assignment's bindings: augmented (`x += 1`, whose value is then unknown), annotated
/// (`x: int = 8`; a bare annotation binds nothing), or plain, chained or unpacking.
fn assignment(stmt: &Stmt, scope: &Scope, module: &mut Module) {
    let at = stmt.at();
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
                dotted_rebinding(&target, scope, at, module);
            }
        } else {
            unpacking_bindings(&target, scope, at, module);
        }
    }
}

/// `TrainConfig.batch = 4` at module level: recorded in the class's scope, so the attribute
/// counts as bound twice and is refused rather than edited where the job does not read it.
fn dotted_rebinding(target: &Stmt, scope: &Scope, at: usize, module: &mut Module) {
    let names: Vec<String> = target
        .toks
        .iter()
        .step_by(2)
        .map(|t| target.text[t.span.clone()].to_string())
        .collect();
    let (path, name) = names.split_at(names.len() - 1);
    let dotted = Scope {
        path: path.to_vec(),
        ..scope.clone()
    };
    let what = Bound::Other(format!("reassigned as `{}`", names.join(".")));
    bind(module, &dotted, &name[0], at, what);
}

/// Unpacking: every bare name among the targets (not an attribute, and nothing inside a
/// subscript or a call, which only mutate).
fn unpacking_bindings(target: &Stmt, scope: &Scope, at: usize, module: &mut Module) {
    let mut k = 0;
    while k < target.toks.len() {
        let opens = target.is_op(k + 1, "[") || target.is_op(k + 1, "(");
        if opens && (target.is_name(k) || target.is_op(k, ")") || target.is_op(k, "]")) {
            k = matching_close(target, k + 1);
            continue;
        }
        let bare =
            target.is_name(k) && !target.is_op(k.wrapping_sub(1), ".") && !target.is_op(k + 1, ".");
        if bare {
            let what = Bound::Other("assigned by unpacking a tuple".to_string());
            bind(module, scope, target.s(k), at, what);
        }
        k += 1;
    }
}

/// Whether an assignment target is an attribute path, `A.b` or `A.B.c`.
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
