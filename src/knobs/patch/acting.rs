//! Whom the user's files are touched as: a root oomguard acting for a job's `user` reads and writes
//! that user's config files as them ([`crate::guard::principal`]), and records who in the journal
//! so the guard and a later run do too. This file only names the user and switches to them for a
//! piece of work; which files are touched, and why, is the rest of [`super`]'s.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{io_err, PatchError};

/// Whom a root oomguard touches the user's file as ([`crate::guard::principal`]), kept in the
/// journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ActingUser {
    pub(super) name: String,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) groups: Vec<u32>,
    pub(super) home: PathBuf,
}

impl ActingUser {
    /// The user this run acts for, if any.
    pub(super) fn current() -> Option<ActingUser> {
        crate::guard::principal::acting_for().map(|who| ActingUser {
            name: who.name.clone(),
            uid: who.uid.as_raw(),
            gid: who.gid.as_raw(),
            groups: who.groups.iter().map(|g| g.as_raw()).collect(),
            home: who.home.clone(),
        })
    }

    /// The account of `uid`, for a journal entry that user could have written.
    pub(super) fn of_uid(uid: u32) -> Option<ActingUser> {
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok()??;
        let name = std::ffi::CString::new(user.name.as_bytes()).ok()?;
        let groups = nix::unistd::getgrouplist(&name, user.gid).ok()?;
        Some(ActingUser {
            name: user.name,
            uid,
            gid: user.gid.as_raw(),
            groups: groups.iter().map(|g| g.as_raw()).collect(),
            home: user.dir,
        })
    }

    fn run_as(&self) -> crate::guard::principal::RunAs {
        use nix::unistd::{Gid, Uid};
        crate::guard::principal::RunAs {
            name: self.name.clone(),
            uid: Uid::from_raw(self.uid),
            gid: Gid::from_raw(self.gid),
            groups: self.groups.iter().map(|g| Gid::from_raw(*g)).collect(),
            home: self.home.clone(),
        }
    }
}

/// Runs `work` on the user's file as `who` (see [`crate::guard::principal`]); as oomguard itself
/// without one.
pub(super) fn as_theirs<T>(
    who: Option<&ActingUser>,
    work: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    crate::guard::principal::as_recorded(who.map(ActingUser::run_as).as_ref(), work)
}

/// The file's bytes, or None if it does not exist.
pub(super) fn read_if_exists(
    who: Option<&ActingUser>,
    path: &Path,
) -> Result<Option<Vec<u8>>, PatchError> {
    match as_theirs(who, || {
        crate::guard::fsutil::read_regular_capped(path, crate::guard::fsutil::SMALL_FILE_MAX_BYTES)
    }) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", path)(e)),
    }
}
