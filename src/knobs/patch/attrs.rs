//! A config file's extended attributes, carried onto the new inode that a patch or a restore
//! renames over it: its POSIX ACL (the `system.posix_acl_access` attribute, acl(5)), `user.*`
//! attributes and whatever else the file system lists for it (an SELinux label, for instance).
//! Without them a collaborator's `rw` entry or a tool's tag would be gone after a clean run.
//! Which inode to write, and when, is the caller's ([`super::replace::replace_file`]).
//!
//! The fd-based system calls (flistxattr(2), fgetxattr(2), fsetxattr(2)) are called through libc
//! directly: three calls on descriptors oomguard already holds, so no path is looked up again,
//! and no dependency is needed for them.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The ACL a file's permissions come from, when it has one beyond its mode bits.
const ACL_ACCESS: &CStr = c"system.posix_acl_access";

/// A file's extended attributes: names and values, as listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Xattrs(Vec<(CString, Vec<u8>)>);

impl Xattrs {
    /// Every attribute of `file` this identity can list and read. A file system without
    /// extended attributes has none.
    pub(super) fn of(file: &File) -> io::Result<Xattrs> {
        let fd = file.as_raw_fd();
        let names = match read_sized(|buf, len| {
            // SAFETY: `buf` is valid for `len` bytes (or null with 0, which asks the size).
            unsafe { nix::libc::flistxattr(fd, buf.cast(), len) }
        }) {
            Ok(names) => names,
            Err(e) if unsupported(&e) => return Ok(Xattrs::default()),
            Err(e) => return Err(e),
        };
        let mut attrs = Vec::new();
        for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            let name = CString::new(name).expect("split at the NULs");
            let value = read_sized(|buf, len| {
                // SAFETY: `name` is NUL-terminated; `buf` is valid for `len` bytes.
                unsafe { nix::libc::fgetxattr(fd, name.as_ptr(), buf.cast(), len) }
            });
            match value {
                Ok(value) => attrs.push((name, value)),
                // Removed since it was listed.
                Err(e) if e.raw_os_error() == Some(nix::libc::ENODATA) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Xattrs(attrs))
    }

    /// Puts these attributes on `file` (a new inode standing in for the one they came from).
    /// An ACL or `user.*` attribute that cannot be set is an error (losing it silently is what
    /// this is for); others (`security.*`, `trusted.*`) are the system's, set where this
    /// identity may. An inherited ACL the original did not have is removed, so a directory's
    /// default ACL cannot widen who reads the file.
    pub(super) fn put_on(&self, file: &File) -> io::Result<()> {
        let fd = file.as_raw_fd();
        for (name, value) in &self.0 {
            // SAFETY: `name` is NUL-terminated; `value` is valid for its length.
            let rc = unsafe {
                nix::libc::fsetxattr(fd, name.as_ptr(), value.as_ptr().cast(), value.len(), 0)
            };
            if rc != 0 {
                let e = io::Error::last_os_error();
                if must_carry(name) {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "cannot carry the extended attribute {} over: {e}",
                            name.to_string_lossy()
                        ),
                    ));
                }
            }
        }
        if !self.0.iter().any(|(name, _)| name.as_c_str() == ACL_ACCESS) {
            remove_acl(file)?;
        }
        Ok(())
    }
}

/// Removes `file`'s access ACL, if it has one: its mode bits alone then say who may open it.
pub(super) fn remove_acl(file: &File) -> io::Result<()> {
    // SAFETY: the name is NUL-terminated.
    let rc = unsafe { nix::libc::fremovexattr(file.as_raw_fd(), ACL_ACCESS.as_ptr()) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(nix::libc::ENODATA) || unsupported(&e) {
        Ok(())
    } else {
        Err(e)
    }
}

/// Whether the attribute is the user's or the ACL: one that must not be lost.
fn must_carry(name: &CStr) -> bool {
    let name = name.to_bytes();
    name.starts_with(b"user.") || name.starts_with(b"system.posix_acl_")
}

fn unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(nix::libc::EOPNOTSUPP)
}

/// Calls `get(buf, len)` (an xattr call that returns a length, or -1) with a buffer grown until
/// the answer fits: first with no buffer to learn the size, again on ERANGE (it grew meanwhile).
fn read_sized(get: impl Fn(*mut u8, usize) -> isize) -> io::Result<Vec<u8>> {
    for _ in 0..8 {
        let size = get(std::ptr::null_mut(), 0);
        if size < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; size as usize];
        let got = get(buf.as_mut_ptr(), buf.len());
        if got >= 0 {
            buf.truncate(got as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(nix::libc::ERANGE) {
            return Err(e);
        }
    }
    Err(io::Error::other("the extended attributes keep growing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_attributes_go_from_one_file_to_another() {
        let dir = tempfile::tempdir().unwrap();
        let from = File::create(dir.path().join("from")).unwrap();
        let to = File::create(dir.path().join("to")).unwrap();
        let name = c"user.oomguard.test";
        // SAFETY: name and value valid for the call.
        let rc = unsafe {
            nix::libc::fsetxattr(
                from.as_raw_fd(),
                name.as_ptr(),
                b"tag".as_ptr().cast(),
                3,
                0,
            )
        };
        if rc != 0 {
            eprintln!(
                "SKIPPED user_attributes_go_from_one_file_to_another: no user xattrs here ({})",
                io::Error::last_os_error()
            );
            return;
        }
        let attrs = Xattrs::of(&from).unwrap();
        assert!(
            attrs.0.contains(&(name.to_owned(), b"tag".to_vec())),
            "{attrs:?}"
        );
        attrs.put_on(&to).unwrap();
        assert_eq!(Xattrs::of(&to).unwrap(), attrs);
    }
}
