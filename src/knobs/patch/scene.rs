//! For the tests of the files beside this one: a scene of a state directory, a run directory and
//! a configs directory holding the user's files, with what the tests read back from it (the
//! entries left, the files in configs/, a file's mtime and mode). Test code only; it patches
//! nothing itself.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use super::journal::patches_dir;
use super::{Mode, PatchError, Patcher};

pub(super) const YAML: &str =
    "# the user's config\ntraining:\n  batch_size: 64   # per GPU\n  pin_memory: true\n";
pub(super) const PATCHED: &str =
    "# the user's config\ntraining:\n  batch_size: 32   # per GPU\n  pin_memory: true\n";
pub(super) const PATCHED_AGAIN: &str =
    "# the user's config\ntraining:\n  batch_size: 16   # per GPU\n  pin_memory: true\n";

pub(super) struct Scene {
    pub(super) _tmp: tempfile::TempDir,
    pub(super) state: PathBuf,
    pub(super) run: PathBuf,
    pub(super) configs: PathBuf,
}

impl Scene {
    pub(super) fn new() -> Scene {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let configs = root.join("configs");
        std::fs::create_dir(&configs).unwrap();
        Scene {
            state: root.join("state"),
            run: root.join("run"),
            configs,
            _tmp: tmp,
        }
    }

    /// A config file with `text`, mode 0640 and an mtime in the past (so a rewrite shows).
    pub(super) fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.configs.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let old = UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_modified(old)
                    .set_accessed(old),
            )
            .unwrap();
        path
    }

    pub(super) fn open(&self, files: &[(&Path, Mode)]) -> Result<Patcher, PatchError> {
        Patcher::open(
            &self.state,
            &self.run,
            files.iter().map(|(p, m)| (p.to_path_buf(), *m)).collect(),
        )
    }

    /// Every file left in the state's patches directory.
    pub(super) fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(patches_dir(&self.state))
            .map(|r| {
                r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Every file in configs/ (recursively), by name relative to it.
    pub(super) fn config_files(&self) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, base, out);
                } else {
                    out.push(p.strip_prefix(base).unwrap().display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.configs, &self.configs, &mut out);
        out.sort();
        out
    }
}

pub(super) fn mtime(path: &Path) -> (i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.mtime(), m.mtime_nsec())
}

pub(super) fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}
