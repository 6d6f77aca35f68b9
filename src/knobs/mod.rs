//! Knobs wherever a job keeps them. Today this holds the format-preserving editors of config
//! files (`file`): read one scalar at a dotted key, and write a new value into exactly that
//! value's span, leaving every other byte of the file as it was. The knob model that moves
//! knobs across argv, environment and files (issue 7) builds on them; the command line's batch
//! and accumulation flags are still `rewrite`'s. `patch` puts an edited file where the job reads
//! it (a copy beside it, or the file itself) and gives the user's file back byte for byte.

pub mod file;
pub mod patch;
