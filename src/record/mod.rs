//! What a run leaves behind: the run directory ([`run_dir`]) with its `summary.json` ([`summary`]),
//! `samples.csv` ([`samples`]) and capped `attempt-N.log` files ([`attempt_log`]), and the list
//! of what could not be saved ([`unsaved`]).
//!
//! It writes files only; what the user sees on the terminal is [`crate::console`], and
//! `oomguard report` reads these files back ([`crate::report`]).

pub mod attempt_log;
pub mod run_dir;
pub mod samples;
pub mod summary;
pub mod unsaved;
