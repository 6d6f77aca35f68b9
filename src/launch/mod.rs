//! Starting the job and speaking to it: spawning it in its own process group, cgroup, identity
//! and terminal ([`child`], [`terminal`]), and the signals oomguard itself receives
//! ([`signals`]).
//!
//! It stands on the knob values and the probe it hands the job; it must not import what
//! decides, remembers or tells ([`crate::decide`], [`crate::remember`], [`crate::tell`]), nor
//! the attempt's supervision above it.

pub(crate) mod child;
pub(crate) mod signals;
pub(crate) mod terminal;
