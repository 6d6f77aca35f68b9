//! Why an attempt ended: the words of an ending ([`outcome`]), the job's output read for memory
//! errors ([`scan`], [`classify`]), the figures those errors print ([`oom_numbers`]), a device OOM
//! that neighbours on a shared card caused ([`taken`]), a job gone quiet after an OOM
//! ([`quiet`]), and the files and processes an attempt left behind ([`leftovers`]).
//!
//! Text and readings in, a verdict out: it may import only [`crate::guard`] and
//! [`crate::observe`], never what acts on the verdict.

pub(crate) mod classify;
pub(crate) mod leftovers;
pub(crate) mod oom_numbers;
pub(crate) mod outcome;
pub(crate) mod quiet;
pub(crate) mod scan;
pub(crate) mod taken;
