//! The attacker's world for the security tests: a root-owned temporary tree with a root-only
//! directory and a directory of `nobody`'s, root's oomguard run in it, and `nobody`'s own
//! processes (real unprivileged ones, started with its uid and gid). Without root the world
//! cannot be made: [`World::new`] says SKIPPED and returns `None`.

use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use util::{bin, is_root};

pub(crate) const NOBODY: u32 = 65534;

/// The attacker's world: `<T>` (root's, 0755), `<T>/rootonly` (root's, 0700) and a directory
/// of nobody's, `<T>/nobody`.
pub(crate) struct World {
    dir: tempfile::TempDir,
}

impl World {
    /// `None` (and a SKIPPED line) without root.
    pub(crate) fn new(test: &str) -> Option<World> {
        if !is_root() {
            eprintln!("SKIPPED {test}: not root (needs chown and a second user)");
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        chmod(dir.path(), 0o755);
        let world = World { dir };
        std::fs::create_dir(world.root_only()).unwrap();
        chmod(&world.root_only(), 0o700);
        world.nobody_dir("nobody");
        Some(world)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn root_only(&self) -> PathBuf {
        self.path("rootonly")
    }

    /// A root file in `rootonly` with `text`, mode 0600.
    pub(crate) fn root_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root_only().join(name);
        std::fs::write(&path, text).unwrap();
        chmod(&path, 0o600);
        path
    }

    /// A directory of nobody's (0755).
    pub(crate) fn nobody_dir(&self, name: &str) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, 0o755);
        give_to_nobody(&dir);
        dir
    }

    /// A file of nobody's (0644) with `text`.
    pub(crate) fn nobody_file(&self, path: &Path, text: &str) -> PathBuf {
        std::fs::write(path, text).unwrap();
        chmod(path, 0o644);
        give_to_nobody(path);
        path.to_path_buf()
    }

    /// A directory of root's (0755) holding a root-owned job file (0644) with `text`.
    pub(crate) fn root_job(&self, dir: &str, text: &str) -> PathBuf {
        let dir = self.path(dir);
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, 0o755);
        let job = dir.join("job.toml");
        std::fs::write(&job, text).unwrap();
        chmod(&job, 0o644);
        job
    }

    /// `oomguard run -q --no-cgroup <extra>` as root, from `/`, its state in the world.
    pub(crate) fn oomguard(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(["run", "-q", "--no-cgroup", "--backoff", "0s"])
            .args(extra)
            .env("XDG_STATE_HOME", self.path("rootstate"))
            .env_remove("RUST_LOG")
            .current_dir("/")
            .stdin(Stdio::null());
        cmd
    }

    pub(crate) fn run(&self, extra: &[&str]) -> Output {
        self.oomguard(extra).output().expect("oomguard runs")
    }
}

pub(crate) fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub(crate) fn give_to_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// A process of nobody's: the attacker at work.
pub(crate) fn as_nobody(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    // std drops root's supplementary groups when it sets the uid.
    cmd.args(args).uid(NOBODY).gid(NOBODY);
    cmd
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A job that prints a CUDA out-of-memory error on its first attempt (it leaves `oomed` in its
/// working directory) and succeeds on the next.
pub(crate) const OOM_ONCE: &str = "import os, sys\nif not os.path.exists('oomed'):\n    open('oomed', 'w').close()\n    print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr)\n    sys.exit(1)\n";

pub(crate) fn toml_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}
