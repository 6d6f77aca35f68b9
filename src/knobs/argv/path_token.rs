//! The argv token that names a config file (`configs/a.yaml`, `--config=configs/a.yaml`),
//! found by comparing canonical paths, and the edit that points it at a patched copy in the same
//! directory. It reads no config and knows no knob.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::place::Edit;

/// An argv token that names a config file: the whole token, or what follows the first `=`
/// (`--config=configs/a.yaml`, `config_path=configs/a.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathToken {
    pub index: usize,
    /// Bytes of the token before the path.
    pub prefix_len: usize,
}

impl PathToken {
    /// The edit that makes the token name `file_name` in the same directory instead.
    pub fn redirect(&self, argv: &[OsString], file_name: &OsStr) -> Edit {
        let token = argv[self.index].as_bytes();
        let path = &token[self.prefix_len..];
        let dir_len = path.iter().rposition(|&b| b == b'/').map_or(0, |at| at + 1);
        let mut new = token[..self.prefix_len + dir_len].to_vec();
        new.extend_from_slice(file_name.as_bytes());
        Edit::Replace(self.index, OsString::from_vec(new))
    }
}

/// The first token (after the program) that names the same file as `canonical` (compared after
/// resolving it from `cwd`, symlinks and `..` included).
pub fn find_path(argv: &[OsString], canonical: &Path, cwd: &Path) -> Option<PathToken> {
    let same = |bytes: &[u8]| {
        !bytes.is_empty()
            && std::fs::canonicalize(cwd.join(OsStr::from_bytes(bytes)))
                .is_ok_and(|p| p == canonical)
    };
    argv.iter().enumerate().skip(1).find_map(|(index, token)| {
        let bytes = token.as_bytes();
        if same(bytes) {
            return Some(PathToken {
                index,
                prefix_len: 0,
            });
        }
        let eq = bytes.iter().position(|&b| b == b'=')?;
        same(&bytes[eq + 1..]).then_some(PathToken {
            index,
            prefix_len: eq + 1,
        })
    })
}
