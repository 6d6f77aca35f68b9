//! How oomguard itself ends early, and every exit status it ends with: the [`Error`] that stops a
//! command before or between attempts (bad flags, a job that cannot start, a run directory or file
//! that cannot be written), each with its status, and the statuses of a run that ends on its own
//! (`EXIT_GAVE_UP`). The words of an attempt's ending are [`crate::judge::outcome`]'s; where the
//! error is printed is the binary's.

use crate::front::install_units::InstallError;
use crate::front::settings::from_args::UsageError;
use crate::knobs::patch::PatchError;
use crate::launch::child::SpawnError;
use crate::remember::record::run_dir::RunDirError;
use crate::tell::report::ReportError;

/// Exit status when out-of-memory deaths outlasted every remedy (EX_TEMPFAIL in sysexits.h:
/// more memory, or a lower --min-batch, would let a retry succeed).
pub const EXIT_GAVE_UP: i32 = 75;
/// Exit status for usage errors: bad flags, no command, unusable run directory.
pub const EXIT_USAGE: i32 = 2;
/// Exit status of `oomguard install-units` when it could not install (EX_CANTCREAT in
/// sysexits.h): a different file in the way, a directory it may not write.
pub const EXIT_CANT_CREATE: i32 = 73;
/// Exit status when oomguard itself failed (cannot write its files, cannot listen to signals).
pub const EXIT_INTERNAL: i32 = 70;

/// Everything that ends oomguard early, each with its exit status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error(transparent)]
    RunDir(RunDirError),
    #[error("{0}")]
    Cgroup(String),
    /// A config file cannot be claimed for patching: nothing was started.
    #[error("{0}")]
    PatchStart(PatchError),
    /// A config file could not be patched for an attempt.
    #[error("{0}")]
    Patch(PatchError),
    /// `oomguard report` was given something that is not a readable run directory.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// `oomguard install-units` found a different file in the way, or could not write.
    #[error(transparent)]
    InstallUnits(#[from] InstallError),
    #[error("{action}: {source}")]
    Internal {
        action: &'static str,
        source: std::io::Error,
    },
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Cgroup(_) | Error::PatchStart(_) => EXIT_USAGE,
            Error::Patch(_) => EXIT_INTERNAL,
            Error::Spawn(e) => e.exit_code(),
            // A write that failed mid-run (a full disk) is not the user's input.
            Error::RunDir(RunDirError::Write { .. }) => EXIT_INTERNAL,
            // A run directory we cannot create is bad input: nothing was started.
            Error::RunDir(_) => EXIT_USAGE,
            Error::Internal { .. } => EXIT_INTERNAL,
            Error::Report(_) => EXIT_USAGE,
            Error::InstallUnits(_) => EXIT_CANT_CREATE,
        }
    }
}

// Here rather than beside `SpawnError` in `child`, so that every exit status is decided in this
// one file and `child` need not import the statuses back from here.
impl SpawnError {
    /// The shell's statuses for a command it cannot run (127 not found, 126 not runnable); a
    /// failed setup is oomguard's own failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            SpawnError::NotFound(_) | SpawnError::NotFoundFor(..) => 127,
            SpawnError::NotExecutable(_)
            | SpawnError::NotExecutableFor(..)
            | SpawnError::BadInterpreter(_)
            | SpawnError::Other { .. } => 126,
            SpawnError::Setup(_) => EXIT_INTERNAL,
        }
    }
}
