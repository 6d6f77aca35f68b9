//! A key inside the `dict(...)` call bound to a module-level name (mmengine's
//! `train_dataloader = dict(batch_size=2, ...)`, key `train_dataloader.batch_size`), nested
//! calls followed (`dict(a=dict(b=2))`). Only `dict(...)` calls with keyword arguments: a `{...}`
//! literal or a variable on the way is not followed. Which binding is the one is
//! [`super::locate`](mod@super::locate)'s to decide; this reads the call it is given.

use super::literal::literal;
use super::stmt::{matching_close, Stmt};
use super::tokenize::Line;
use crate::knobs::file::{line_of, Located};

/// The literal at `keys` inside the `dict(...)` call that the assignment at byte offset `at`
/// binds (`dict(a=dict(b=2))` for `a.b`). `Err(None)`: a key is not among the call's keywords
/// (mmengine merges the file over its `_base_` files, so the key may be set there instead), or
/// the path passes through something that is not a `dict(...)` call (a literal `{...}`, a
/// variable: not followed); `Err(Some((at, what)))`: the value there is not one editable
/// literal.
pub(super) fn in_dict_call(
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

/// A key inside a `dict(...)` call bound to a module-level name (mmengine's configs).
#[cfg(test)]
mod tests {
    use crate::knobs::file::py::locate;
    use crate::knobs::file::{set, EditError, Format, Scalar};

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
