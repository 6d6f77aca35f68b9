//! Finding a program the way execvp(3) would, as the current filesystem identity: whether it
//! may be run is the kernel's answer (`faccessat` with `AT_EACCESS`), so ACLs count and, inside
//! [`crate::guard::principal::as_user`], the user's rights are checked rather than root's.
//!
//! It only looks: starting the program is [`crate::launch`]'s.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why no program could be run: none by that name, or only one that may not be executed.
#[derive(Debug, Clone, PartialEq)]
pub enum Missing {
    /// Nothing by that name on the PATH (the name as given).
    NotFound(String),
    /// The first file by that name, which may not be executed.
    NotExecutable(String),
}

/// The program `program` names, looked for on `path_var` (or the default PATH) where it has no
/// slash: the first regular file that may be executed.
pub fn find(program: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, Missing> {
    let candidates: Vec<PathBuf> = if program.as_bytes().contains(&b'/') {
        vec![PathBuf::from(program)]
    } else {
        let path_var = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
        std::env::split_paths(path_var)
            .map(|dir| dir.join(program))
            .collect()
    };
    let mut not_executable = None;
    for candidate in candidates {
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && may_execute(&candidate) => return Ok(candidate),
            Ok(_) => {
                not_executable.get_or_insert(candidate);
            }
            Err(_) => {}
        }
    }
    match not_executable {
        Some(path) => Err(Missing::NotExecutable(path.display().to_string())),
        None => Err(Missing::NotFound(program.to_string_lossy().into_owned())),
    }
}

/// Whether the kernel would let this process's filesystem identity execute `path`.
fn may_execute(path: &Path) -> bool {
    use nix::unistd::{faccessat, AccessFlags};
    faccessat(
        None,
        path,
        AccessFlags::X_OK,
        nix::fcntl::AtFlags::AT_EACCESS,
    )
    .is_ok()
}
