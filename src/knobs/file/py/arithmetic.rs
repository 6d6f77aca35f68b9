//! Literal arithmetic, evaluated as Python evaluates it (`5 * 8`, `2**10`, `(1+2)*3`, `//`,
//! `%`), for reading a script's globals only: [`super::locate`](mod@super::locate) still edits
//! a plain literal alone. Numbers only; a name, a call or anything else is no value, and an
//! overflow, a division by zero or a complex result is refused, never approximated.

use super::literal::{literal, number};
use super::stmt::Stmt;
use super::tokenize::{tokenize, Kind};
use crate::knobs::file::Scalar;

/// The value a whole `text` spells as one literal or literal arithmetic, as
/// [`top_level`](fn@super::top_level) evaluates an assignment's right-hand side; or what it is
/// instead.
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

/// A right-hand side as one literal, else as literal arithmetic; what it is otherwise.
pub(super) fn value_or_arithmetic(v: &Stmt) -> Result<Scalar, String> {
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

#[cfg(test)]
mod tests {
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
}
