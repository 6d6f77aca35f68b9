//! The integration tests, one crate: each module is one area of oomguard run end to end through
//! the real binary (`CARGO_BIN_EXE_oomguard`) against real child processes (the fixtures in
//! tests/fixtures/), with the shared harness in `util`. One crate compiles and links the harness
//! once instead of once per file; a test is named `MODULE::TEST` (`cargo test --test it hang::`).
//! All tests share one process and run in parallel threads, so none may change process-wide
//! state (environment, current directory, signal dispositions): each passes what it needs to the
//! command it spawns. Pure logic is tested by unit tests in src/, not here.

mod attacker;
mod util;

mod classify;
mod clusters;
mod codebases_launchers;
mod codebases_syntax;
mod config_files;
mod entrypoints;
mod entrypoints_argv;
mod entrypoints_hydra;
mod fit;
mod fit_ramp;
mod fit_replay;
mod hang;
mod hygiene;
mod inside;
mod install_units;
mod jobfiles;
mod jobs;
mod knobs;
mod leftovers;
mod memory;
mod metrics;
mod output;
mod patching;
mod probe;
mod probe_memory;
mod pyconfig;
mod report_cmd;
mod report_slurm_parts;
mod resume;
mod run;
mod rundir;
mod security;
mod security_files;
mod security_patch;
mod security_reads;
mod security_surfaces;
mod shared_gpu;
mod situations;
mod slurm_across;
mod slurm_real;
mod slurm_two_nodes;
mod status;
mod unattended_logs;
mod unattended_notify;
mod verdicts;
mod watchcost;
