//! Whether a place is its user's own: who besides root could change a job file, a directory
//! oomguard writes in as root, or a file root will run again by its path, walking every
//! directory and symlink on the way ([`crate::guard::pathwalk`]). A place anyone else could
//! change is refused, since they could choose what runs, or redirect what root writes, there.
//!
//! It decides and says why; it opens and changes nothing but the walk.

use std::path::Path;

use nix::unistd::{Gid, Group, Uid, User};

use crate::guard::principal::RunAs;

/// Who, besides root, could have chosen a job file's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Writers {
    #[default]
    /// Root alone: the file, every directory above it and every symlink on the way.
    Root,
    /// Root and the job's `user`.
    User,
}

/// Refuses a job file that a user other than root or `owner_uid` could change: the file, a
/// directory on its path (through every symlink followed) or a symlink in a sticky directory
/// owned by another user, or group- or world-writable (a directory with the sticky bit, such as
/// /tmp, is fine: no one else can replace what is in it). Says whether `owner_uid` could.
pub fn check_steps(
    opened: &crate::guard::pathwalk::Opened,
    owner_uid: Option<u32>,
    owner: Option<&str>,
) -> Result<Writers, String> {
    let file = &opened.resolved;
    let allowed = allowed_words(owner_uid, owner);
    judge(&opened.steps, owner_uid).map_err(|(step, problem)| {
        let what = step_words(step, file);
        format!(
            "{}: refusing the job file {}: {what} {problem}, so a user other than {allowed} could choose what runs; \
             make it writable only by {allowed} (chown, chmod go-w), or move the job file",
            step.path.display(),
            file.display(),
        )
    })
}

/// Who besides root could change the file at `path`, as one phrase (`/home/alice/venv/bin: this
/// directory above it is owned by uid 1001, so user alice could`), or `None` where root alone
/// could: the rule [`check_steps`] applies to a job file, with no user allowed, on a walk made now
/// ([`crate::guard::pathwalk::open`]). For a file root will run again later by its path (a unit's
/// `ExecStart=`), which gives whoever could change it root's rights for the same reason a job file
/// does.
pub fn changeable_by_others(path: &Path) -> std::io::Result<Option<String>> {
    let (_, opened) = crate::guard::pathwalk::open(path)?;
    let Err((step, problem)) = judge(&opened.steps, None) else {
        return Ok(None);
    };
    let what = step_words(step, &opened.resolved);
    Ok(Some(format!(
        "{}: {what} {problem}, so {} could",
        step.path.display(),
        could_change(step)
    )))
}

/// What a step on the way to `file` is, in a refusal: "it", "this symlink on its path" or
/// "this directory above it".
fn step_words(step: &crate::guard::pathwalk::Step, file: &Path) -> &'static str {
    match step.kind {
        _ if step.path == file => "it",
        crate::guard::pathwalk::Kind::Symlink => "this symlink on its path",
        _ => "this directory above it",
    }
}

/// Who a step that [`judge`] refused lets change it, by name: its owner, else its group's
/// members, else every user.
fn could_change(step: &crate::guard::pathwalk::Step) -> String {
    if step.uid != 0 {
        return match User::from_uid(Uid::from_raw(step.uid)) {
            Ok(Some(user)) => format!("user {}", user.name),
            _ => format!("uid {}", step.uid),
        };
    }
    if step.mode & 0o002 != 0 {
        return "every user".to_string();
    }
    match Group::from_gid(Gid::from_raw(step.gid)) {
        Ok(Some(group)) => format!("the members of group {}", group.name),
        _ => format!("the members of group {}", step.gid),
    }
}

/// "root", or "root or NAME".
fn allowed_words(owner_uid: Option<u32>, owner: Option<&str>) -> String {
    match owner {
        Some(name) if owner_uid != Some(0) => format!("root or {name}"),
        _ => "root".to_string(),
    }
}

/// Who besides root could change what is at the end of `steps`: `Err` with the step and its
/// problem where someone other than root or `owner_uid` could.
fn judge(
    steps: &[crate::guard::pathwalk::Step],
    owner_uid: Option<u32>,
) -> Result<Writers, (&crate::guard::pathwalk::Step, String)> {
    use crate::guard::pathwalk::Kind;
    let mut writers = Writers::Root;
    for step in steps {
        // A symlink cannot be changed, only replaced, which takes write access to its directory
        // (checked as its own step), except in a sticky directory, where its owner may.
        let owner_counts = step.kind != Kind::Symlink || step.in_sticky_dir;
        let writable = step.kind != Kind::Symlink
            && step.mode & 0o022 != 0
            && !(step.kind == Kind::Dir && step.mode & 0o1000 != 0);
        if owner_counts && step.uid != 0 && Some(step.uid) != owner_uid {
            return Err((step, format!("is owned by uid {}", step.uid)));
        }
        if writable {
            let kind = if step.mode & 0o002 != 0 {
                "world"
            } else {
                "group"
            };
            return Err((step, format!("is {kind}-writable (mode {:o})", step.mode)));
        }
        if owner_counts && step.uid != 0 {
            writers = Writers::User;
        }
    }
    Ok(writers)
}

/// Whether a place oomguard makes files in (`what`: "run directory", ...) at `path` is the job's
/// user's to use, for a root oomguard acting for `who`: where only root can write its path,
/// root's (`Ok(false)`); where `who` can too, theirs (`Ok(true)`: used as them); where anyone
/// else could, refused, since they could redirect what root writes there with a link. Without
/// root, always `Ok(false)`: nothing switches.
pub fn place_is_users(path: &Path, who: Option<&RunAs>, what: &str) -> Result<bool, String> {
    if !Uid::effective().is_root() {
        return Ok(false);
    }
    // A path that cannot be walked (a file in the way, a link loop) is no place anyone could
    // redirect: using it fails where it is used, and says so there.
    let Ok(steps) = crate::guard::pathwalk::walk_to_dir(path) else {
        return Ok(false);
    };
    let owner_uid = who.map(|who| who.uid.as_raw());
    let allowed = allowed_words(owner_uid, who.map(|who| who.name.as_str()));
    match judge(&steps, owner_uid) {
        Ok(writers) => Ok(writers == Writers::User),
        Err((step, problem)) => Err(format!(
            "{what} {}: {} {problem}, so a user other than {allowed} could redirect what oomguard writes there as root; \
             choose a directory only {allowed} can write",
            path.display(),
            step.path.display(),
        )),
    }
}

/// For an oomguard run without root, an existing run directory at `path` (`--run-dir`,
/// `run_dir`): refused where another user (not root) owns it, since they could change what
/// oomguard and the job read there, the probe's directory first on the job's `PYTHONPATH`
/// among it; a warning (`Ok(Some)`) where every user may write it without the sticky bit (they
/// could rename what is in it and put their own in its place, the probe's directory too);
/// else nothing. A directory others in its group may write is
/// neither: with a private group per user (umask 002) that is everyone's home, and a group
/// that can write the run directory can write the job's own files beside it anyway. As root,
/// [`place_is_users`] decides instead. A directory still to be made is the run's own.
pub fn own_run_dir(path: &Path) -> Result<Option<String>, String> {
    use std::os::unix::fs::MetadataExt;
    let me = Uid::effective();
    if me.is_root() {
        return Ok(None);
    }
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if !meta.is_dir() {
        return Ok(None);
    }
    if meta.uid() != me.as_raw() && meta.uid() != 0 {
        let owner = match User::from_uid(Uid::from_raw(meta.uid())) {
            Ok(Some(user)) => format!("user {} (uid {})", user.name, meta.uid()),
            _ => format!("uid {}", meta.uid()),
        };
        return Err(format!(
            "run directory {}: it is owned by {owner}, who could change what oomguard and the job read there (the probe, first on the job's PYTHONPATH); choose a directory of your own with --run-dir",
            path.display()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Ok(Some(format!(
            "run directory {} is world-writable (mode {mode:o}): any user could replace what oomguard and the job read there while the run goes on, the probe's directory first on the job's PYTHONPATH among it (and so run code as you); chmod o-w it",
            path.display()
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// [`check_steps`] on the file at `file`, walked now.
    fn check_trusted(
        file: &Path,
        owner_uid: Option<u32>,
        owner: Option<&str>,
    ) -> Result<Writers, String> {
        let (_, opened) = crate::guard::pathwalk::open(file)
            .map_err(|e| format!("{}: cannot check who may write it: {e}", file.display()))?;
        check_steps(&opened, owner_uid, owner)
    }
    use std::os::unix::fs::PermissionsExt;

    /// Who may write the file or a directory above it decides, under a root-owned 0700
    /// temporary directory in /tmp (sticky).
    #[test]
    fn who_may_write_decides_trust() {
        if !Uid::effective().is_root() {
            eprintln!("SKIPPED who_may_write_decides_trust: not root (chown needs it)");
            return;
        }
        // (directory mode, file mode, file owner, the allowed user, the refusal's words)
        type Row = (u32, u32, u32, Option<u32>, Option<&'static str>);
        let table: &[Row] = &[
            (0o755, 0o644, 0, None, None),
            (0o755, 0o600, 0, None, None),
            (0o1777, 0o644, 0, None, None),
            (
                0o755,
                0o664,
                0,
                None,
                Some("it is group-writable (mode 664)"),
            ),
            (0o755, 0o646, 0, None, Some("it is world-writable")),
            (
                0o775,
                0o644,
                0,
                None,
                Some("this directory above it is group-writable"),
            ),
            (
                0o777,
                0o644,
                0,
                None,
                Some("this directory above it is world-writable"),
            ),
            (0o755, 0o644, 65534, None, Some("it is owned by uid 65534")),
            (0o755, 0o644, 65534, Some(65534), None),
            (0o755, 0o644, 1234, Some(65534), Some("owned by uid 1234")),
        ];
        for &(dir_mode, file_mode, file_uid, allowed, want) in table {
            let top = tempfile::tempdir().expect("a temporary directory");
            let dir = top.path().join("d");
            std::fs::create_dir(&dir).unwrap();
            let file = dir.join("job.toml");
            std::fs::write(&file, "").unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(file_mode)).unwrap();
            std::os::unix::fs::chown(&file, Some(file_uid), None).unwrap();
            let file = std::fs::canonicalize(&file).unwrap();
            let got = check_trusted(&file, allowed, allowed.map(|_| "nobody"));
            match (got, want) {
                (Ok(_), None) => {}
                (Err(message), Some(words)) => {
                    assert!(
                        message.contains(words),
                        "{dir_mode:o}/{file_mode:o}: {message}"
                    );
                    assert!(!message.contains('\n'));
                }
                (got, want) => {
                    panic!("{dir_mode:o}/{file_mode:o}/{file_uid}: {got:?}, wanted {want:?}")
                }
            }
        }
    }
}
