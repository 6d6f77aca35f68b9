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
//! A script's globals and a config file given to it as an argument (nanoGPT's `python train.py
//! config/x.py`) are read with [`top_level`](fn@top_level): the statements at the very top of the
//! module, unindented and outside every block, in file order; an assignment's value is evaluated
//! where it is a literal or literal arithmetic (`5 * 8`, `2**10`, `(1+2)*3`, `1e-3`, `//`, `%`),
//! for reading only: [`locate`](fn@locate) still edits only a plain literal. [`append`] writes an
//! assignment a module lacks at its end.
//!
//! Reading and writing the file, backups and restores are the caller's job (`super::set`
//! splices the span this module finds).
//!
//! Layout, one concern a file: [`tokenize`](mod@tokenize) cuts the text into logical lines of
//! tokens, [`stmt`] views a line's tokens as a statement, [`bindings`] walks the statements and
//! records what each binds in which scope, [`literal`] reads one literal and [`arithmetic`]
//! literal arithmetic; the queries are [`locate`](mod@locate) (with [`dict_call`] for a key
//! inside `dict(...)`) and [`append`], [`top_level`](mod@top_level), [`calls`](mod@calls) and
//! [`evaluate`]; [`render`](mod@render) spells a new literal and [`pycache`] names the caches an
//! edit makes stale.

mod arithmetic;
mod bindings;
mod calls;
mod dict_call;
mod literal;
mod locate;
mod pycache;
mod render;
mod stmt;
mod tokenize;
mod top_level;

pub use arithmetic::evaluate;
pub use calls::{calls, Call};
pub use locate::{append, locate};
pub use pycache::stale_pyc_paths;
pub use render::render;
pub use top_level::{strings_assigned, top_level, TopLevel};
