//! What reaches the user's terminal and the attempt's log: the job's output passed through
//! untouched ([`stream`]) into its log file ([`attempt_log`]), oomguard's own lines beside it
//! ([`console`], [`logging`]), and the one line said when a file could not be saved
//! ([`unsaved`]).
//!
//! It may import only [`crate::guard`] and [`crate::observe`]: what to say is decided above it.

pub(crate) mod attempt_log;
pub(crate) mod console;
pub(crate) mod logging;
pub(crate) mod stream;
pub(crate) mod unsaved;
