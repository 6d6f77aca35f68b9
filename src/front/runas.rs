//! What a job file says about the job beyond its command and flags, made ready before anything
//! starts: the directory it runs in (`workdir`, relative to the file's directory), its `[env]`,
//! and whom it runs as (`user`, optional `group`), looked up in the passwd and group databases
//! here, in oomguard's process, because nothing between fork and exec may allocate or read files.
//!
//! It also decides whether a job file may be trusted: when oomguard runs as root, the file and
//! every directory above it must be writable by nobody but root (or the file's `user`), or
//! whoever could write there could choose what runs as someone else.
//!
//! Switching identity in the child is [`crate::launch::child`]'s (`become_user`); parsing the file
//! is [`crate::front::jobfile`]'s.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User};

use crate::front::jobfile::job::JobPart;
use crate::guard::ownership::{check_steps, Writers};
use crate::guard::principal::RunAs;

/// The job file's context of the job, checked. Default: none (no job file).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobContext {
    /// Absolute, existing directory the job runs in (`workdir`).
    pub workdir: Option<PathBuf>,
    /// `[env]`, set for the job on top of oomguard's own environment.
    pub env: Vec<(String, OsString)>,
    /// Whom the job runs as, where that differs from oomguard's own identity.
    pub run_as: Option<RunAs>,
    /// Said once before the run starts (running as root with no `user`).
    pub warnings: Vec<String>,
    /// Who besides root could have written the job file (as root; `Root` otherwise).
    pub writers: Writers,
}

impl JobContext {
    /// The PATH the job's programs are found with: the job file's `[env]` PATH, else oomguard's
    /// (which a job run as another user keeps: see [`crate::launch::child::inherited_env`]).
    pub fn path_var(&self) -> Option<std::ffi::OsString> {
        self.env
            .iter()
            .rev()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.clone())
            .or_else(|| std::env::var_os("PATH"))
    }

    /// Checks the job part of the file at `path` against this machine: the workdir exists,
    /// the user and group exist and may be switched to, and (as root) the file is trusted.
    /// Each error is one line naming the file, and where it can, the line.
    pub fn prepare(path: &Path, job: &JobPart) -> Result<JobContext, String> {
        // The walk made when the file was read, so what is checked is what was parsed; a
        // JobPart parsed from text (tests) is walked here.
        let walked;
        let opened = match &job.opened {
            Some(opened) => opened,
            None => {
                walked = crate::guard::pathwalk::open(path)
                    .map_err(|e| format!("{}: cannot open the --config file: {e}", path.display()))?
                    .1;
                &walked
            }
        };
        let file = opened.resolved.clone();
        let file_dir = if opened.inherited {
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
        } else {
            file.parent().unwrap_or(Path::new("/")).to_path_buf()
        };
        let file_dir = file_dir.as_path();
        let euid = Uid::effective();
        let (run_as, group_is_users) = identity(job, euid).map_err(|e| e.to_string())?;
        let workdir = match &job.workdir {
            None => None,
            Some(dir) => {
                let joined = file_dir.join(&dir.value);
                // Looked up as the job's user: what root alone can see is not described to
                // them (a directory they cannot reach reads the same whether it exists or not).
                let looked = crate::guard::principal::as_recorded(run_as.as_ref(), || {
                    let real = std::fs::canonicalize(&joined)?;
                    Ok(std::fs::metadata(&real)?.is_dir().then_some(real))
                });
                match (looked, &run_as) {
                    (Ok(Some(real)), _) => Some(real),
                    (Err(e), Some(who)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        return Err(job
                            .error(
                                dir.line,
                                format!(
                                    "cannot enter the job file's workdir {:?} ({}) as user {}: {e}",
                                    dir.value,
                                    joined.display(),
                                    who.name
                                ),
                                "give a directory that user can reach",
                            )
                            .to_string())
                    }
                    _ => {
                        return Err(job
                            .error(
                                dir.line,
                                format!(
                                    "workdir {:?} ({}) is not a directory",
                                    dir.value,
                                    joined.display()
                                ),
                                "create it, or fix the path (relative paths start from the job file's directory)",
                            )
                            .to_string())
                    }
                }
            }
        };
        let mut warnings = Vec::new();
        let mut file_writers = Writers::Root;
        if euid.is_root() {
            let owner = run_as.as_ref().map(|who| who.uid.as_raw());
            let writers = check_steps(opened, owner, run_as.as_ref().map(|who| who.name.as_str()))?;
            file_writers = writers;
            if let (Writers::User, Some(who), Some(group)) = (writers, &run_as, &job.group) {
                // The user could have written this file: it may give the job only a group the
                // user already has, or it would hand the user another group's rights.
                if !group_is_users {
                    return Err(job
                        .error(
                            group.line,
                            format!(
                                "group {:?} is not one of user {:?}'s groups, and {} could write this file",
                                group.value, who.name, who.name
                            ),
                            "name a group the user belongs to (`id USER`), or make the file writable by root only",
                        )
                        .to_string());
                }
            }
            if job.user.is_none() && job.has_command {
                warnings.push(format!(
                    "{}: the job runs as root, as the file names no user; add user = \"NAME\" to run it as that user",
                    path.display()
                ));
            }
        }
        Ok(JobContext {
            workdir,
            env: job
                .env
                .iter()
                .map(|(name, value)| (name.clone(), OsString::from(value)))
                .collect(),
            run_as,
            warnings,
            writers: file_writers,
        })
    }
}

/// The identity the job should get, `None` where it is oomguard's own; and whether its group is
/// one the user has anyway (its own, or one it is a member of).
fn identity(
    job: &JobPart,
    euid: Uid,
) -> Result<(Option<RunAs>, bool), crate::front::jobfile::JobFileError> {
    let Some(user) = &job.user else {
        return match &job.group {
            None => Ok((None, true)),
            Some(group) => Err(job.error(
                group.line,
                "group without user",
                "add user = \"NAME\" (the group applies to the job run as that user)",
            )),
        };
    };
    let account = lookup_user(&user.value).ok_or_else(|| {
        job.error(
            user.line,
            format!("user {:?} does not exist on this machine", user.value),
            "name an account listed by `getent passwd`",
        )
    })?;
    let gid = match &job.group {
        None => account.gid,
        Some(group) => lookup_group(&group.value).ok_or_else(|| {
            job.error(
                group.line,
                format!("group {:?} does not exist on this machine", group.value),
                "name a group listed by `getent group`, or remove group to use the user's own",
            )
        })?,
    };
    if !euid.is_root() {
        if account.uid == euid && gid == Gid::effective() {
            return Ok((None, true));
        }
        return Err(job.error(
            user.line,
            format!(
                "user = {:?} needs oomguard to run as root to switch to it (it runs as uid {euid})",
                user.value
            ),
            "start oomguard as root (the system unit), or remove user to run the job as yourself",
        ));
    }
    let name = std::ffi::CString::new(account.name.as_bytes())
        .expect("a passwd entry's name has no NUL byte");
    let list = |base: Gid| {
        nix::unistd::getgrouplist(&name, base).map_err(|e| {
            job.error(
                user.line,
                format!("cannot list the groups of user {:?}: {e}", user.value),
                "check the group database (`id USER`)",
            )
        })
    };
    // Whether `gid` is one the user has anyway: its passwd group or one it is a member of.
    let member = list(account.gid)?.contains(&gid);
    // As initgroups(3) would set them for the job's primary group.
    let groups = list(gid)?;
    Ok((
        Some(RunAs {
            name: account.name,
            uid: account.uid,
            gid,
            groups,
            home: account.dir,
        }),
        member,
    ))
}

/// A user by name, or by number where no name matches.
fn lookup_user(name: &str) -> Option<User> {
    match User::from_name(name) {
        Ok(Some(user)) => Some(user),
        _ => name
            .parse::<u32>()
            .ok()
            .and_then(|uid| User::from_uid(Uid::from_raw(uid)).ok().flatten()),
    }
}

/// A group id by name, or by number where no name matches.
fn lookup_group(name: &str) -> Option<Gid> {
    match Group::from_name(name) {
        Ok(Some(group)) => Some(group.gid),
        _ => name
            .parse::<u32>()
            .ok()
            .and_then(|gid| Group::from_gid(Gid::from_raw(gid)).ok().flatten())
            .map(|group| group.gid),
    }
}
