//! Knobs wherever a job keeps them. Today this holds the format-preserving editors of config
//! files (`file`): read one scalar at a dotted key, and write a new value into exactly that
//! value's span, leaving every other byte of the file as it was. The knob model that moves
//! knobs across argv, environment and files (issue 7) builds on them; the command line's batch
//! and accumulation flags are still `rewrite`'s.

pub mod file;

/// A knob's value as oomguard holds it: what a `set = VALUE` knob moves to, and what any knob
/// reads as. Values are never negative (no batch, count or switch is), so integers are `u64`.
/// `Unset` is a place holding nothing: an environment variable not set, a switch flag absent.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    Bool(bool),
    Str(String),
    Unset,
}
