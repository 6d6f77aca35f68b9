//! What outlives an attempt: the run directory with summary.json and samples.csv
//! ([`record`]), and each job's memory across runs, what fitted and where it stopped
//! ([`jobs`]).
//!
//! It keeps and reads back files only: it must not import what tells the outside world
//! ([`crate::tell`]) or runs the attempt ([`crate::supervise`], [`mod@crate::run`]).

pub(crate) mod jobs;
pub(crate) mod record;
