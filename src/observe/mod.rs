//! Watching the job's memory while it runs: the process tree's RSS, PSS and swap ([`mem`]), its
//! cgroup and the cgroups above it ([`cgroup`], [`cgroup_chain`]), the GPUs through NVML ([`gpu`]),
//! the kernel's log and counters ([`kernel`]), a Slurm step's parts ([`slurm`]), all taken
//! together each tick ([`sampler`]), and the judgements over those samples that stop a job
//! early ([`watch`]: a soft bound crossed, memory growing). [`units`] writes and reads the sizes.
//!
//! It reads the machine and decides nothing about the attempt's ending: it may import only
//! [`crate::guard`].

pub(crate) mod cgroup;
pub(crate) mod cgroup_chain;
pub(crate) mod gpu;
pub(crate) mod kernel;
pub(crate) mod mem;
pub(crate) mod sampler;
pub(crate) mod slurm;
pub(crate) mod units;
pub(crate) mod watch;
