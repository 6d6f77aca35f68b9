//! Acting for a principal, and never beyond it: whose credentials a file is touched with
//! ([`principal`]), opening a path once and checking what was opened ([`pathwalk`], [`fsutil`]),
//! whether a place is the user's own ([`ownership`]), finding a program as the user would
//! ([`program`]), and naming a process so that a signal
//! reaches the one meant and no reused pid ([`pinned`], [`liveness`]). Everything that acts on
//! the job's behalf as root goes through here.
//!
//! It imports nothing else of the crate: every other folder may stand on it.

pub(crate) mod fsutil;
pub(crate) mod liveness;
pub(crate) mod ownership;
pub(crate) mod pathwalk;
pub(crate) mod pinned;
pub(crate) mod principal;
pub(crate) mod program;
