//! A statement's view of a logical line's tokens: a token's text, whether it is a given
//! operator or a name, the tokens outside brackets, a split at a separator, and the bracket
//! that closes an open one. It neither tokenizes (that is [`super::tokenize`]'s) nor tells
//! what a statement binds (that is [`super::bindings`]').

use std::ops::Range;

use super::tokenize::{Kind, Token};

/// Statement-level view of a token slice against the source text.
pub(super) struct Stmt<'a> {
    pub(super) text: &'a str,
    pub(super) toks: &'a [Token],
}

impl<'a> Stmt<'a> {
    pub(super) fn s(&self, k: usize) -> &'a str {
        self.toks.get(k).map_or("", |t| &self.text[t.span.clone()])
    }
    pub(super) fn is_op(&self, k: usize, op: &str) -> bool {
        self.toks.get(k).is_some_and(|t| t.kind == Kind::Op) && self.s(k) == op
    }
    pub(super) fn is_name(&self, k: usize) -> bool {
        self.toks.get(k).is_some_and(|t| t.kind == Kind::Name)
    }
    /// Indices of tokens outside any bracket of this statement.
    pub(super) fn top_level(&self) -> Vec<usize> {
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
    pub(super) fn split(&self, sep: &str) -> Vec<Stmt<'a>> {
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
    pub(super) fn span(&self) -> Range<usize> {
        match (self.toks.first(), self.toks.last()) {
            (Some(a), Some(b)) => a.span.start..b.span.end,
            _ => 0..0,
        }
    }
    /// Byte offset of the statement (lines are counted only for what gets reported).
    pub(super) fn at(&self) -> usize {
        self.span().start
    }
}

/// The index after the bracket that closes the one at `open`.
pub(super) fn matching_close(stmt: &Stmt, open: usize) -> usize {
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
