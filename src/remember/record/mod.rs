//! What a run leaves behind: the run directory ([`run_dir`]) with its `summary.json` ([`summary`]),
//! `samples.csv` ([`samples`]) and capped `attempt-N.log` files (written by
//! [`crate::output::attempt_log`], which also keeps the list of what could not be saved:
//! [`crate::output::unsaved`]).
//!
//! It writes files only; what the user sees on the terminal is [`crate::output::console`], and
//! `oomguard report` reads these files back ([`crate::tell::report`]).

pub mod run_dir;
pub mod samples;
pub mod summary;
