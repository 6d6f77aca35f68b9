//! The attacker's world for the security tests: a root-owned temporary tree with a root-only
//! directory and a directory of `nobody`'s, root's oomguard run in it, and `nobody`'s own
//! processes (real unprivileged ones, started with its uid and gid); users made for a test
//! ([`TestUser`]) where one needs more than one attacker, and a command's peak memory measured
//! from outside ([`measured`]). Without root the world cannot be made: [`World::new`] says
//! SKIPPED and returns `None`.

use crate::util;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use util::{bin, is_root, stderr_of};

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

/// A command's end as [`measured`] saw it.
pub(crate) struct Measured {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// The kernel's high-water mark of its resident memory (`ru_maxrss`: the largest of it and
    /// the children it waited for).
    pub(crate) peak_rss_bytes: u64,
}

/// Runs `cmd` to its end, its output in files under `dir` (named by `name`), and measures its
/// peak RSS from outside: `wait4` hands back the kernel's account of this one process.
pub(crate) fn measured(mut cmd: Command, dir: &Path, name: &str) -> Measured {
    let (out, err) = (
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    cmd.stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap());
    let child = cmd.spawn().expect("oomguard starts");
    let pid = i32::try_from(child.id()).expect("a PID fits an i32");
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<nix::libc::rusage>::zeroed();
    loop {
        // SAFETY: `status` and `usage` are valid for writes for the whole call.
        let got = unsafe { nix::libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
        if got == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "wait4: {e}");
    }
    // SAFETY: wait4 returned the child, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    // Reaped above: dropping the handle waits for nothing.
    drop(child);
    Measured {
        code: nix::libc::WIFEXITED(status).then(|| nix::libc::WEXITSTATUS(status)),
        stdout: std::fs::read_to_string(out).unwrap(),
        stderr: std::fs::read_to_string(err).unwrap(),
        peak_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap() * 1024,
    }
}

/// A user made for a test, removed (with its group) when dropped.
pub(crate) struct TestUser {
    pub(crate) name: &'static str,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl TestUser {
    pub(crate) fn new(name: &'static str) -> TestUser {
        // A user left by an interrupted run of this test is reused.
        if nix::unistd::User::from_name(name).unwrap().is_none() {
            let made = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                ])
                .arg(name)
                .output()
                .expect("useradd runs");
            assert!(
                made.status.success(),
                "useradd {name}: {}",
                stderr_of(&made)
            );
        }
        let user = nix::unistd::User::from_name(name).unwrap().unwrap();
        TestUser {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        }
    }

    /// A directory of this user's (0755) under the world.
    pub(crate) fn dir(&self, w: &World) -> std::path::PathBuf {
        let dir = w.path(&self.name.replace('.', "-dot-"));
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, 0o755);
        std::os::unix::fs::lchown(&dir, Some(self.uid), Some(self.gid)).unwrap();
        dir
    }

    /// A file of this user's (0644) with `text`.
    pub(crate) fn file(&self, path: &Path, text: &str) -> std::path::PathBuf {
        std::fs::write(path, text).unwrap();
        chmod(path, 0o644);
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid)).unwrap();
        path.to_path_buf()
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(self.name).output();
    }
}
