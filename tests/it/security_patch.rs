//! A config file patched in place, attacked by another user (issue 26, findings 1, 2 and 11, and
//! the lock files an early error left behind). Root's oomguard patches the file; `nobody`, or a
//! third uid with no account, is the attacker with real processes of its own: it squats the
//! file's lock where it can make a name, holds `flock` on it, or takes the lock directories
//! older oomguards used before anyone else. No lock that neither root nor the file's own user
//! made may refuse a run, and the file is never patched without a lock no third party can take
//! or switch off. The file also keeps its ACL, its `user.*` attributes and its other names
//! through a patch and a restore. Without root these tests say SKIPPED (CI runs them as root).

use crate::attacker::*;
use crate::util;

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use util::{release_fifo, stderr_of, wait_until};

/// The places older oomguards took every file's lock in, world-writable.
const OLD_LOCK_DIRS: [&str; 2] = ["/run/lock/oomguard", "/tmp/oomguard-locks"];

/// The tests that make, squat or remove the old lock directories take turns.
static OLD_DIRS: Mutex<()> = Mutex::new(());

/// What a test made in the old lock directories (and the directories it made), removed when it
/// ends, passed or not, so the next test finds them as before.
#[derive(Default)]
struct MadeInOldDirs {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Drop for MadeInOldDirs {
    fn drop(&mut self) {
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

const CONFIG: &str = "# the user's config\ntraining:\n  batch_size: 64   # per GPU\n";

/// A job that dies of a CUDA out-of-memory error on its first attempt and, on the next (with the
/// file patched), writes what it reads in `cfg` to `seen`, then waits for a line on the FIFO
/// `hold` if there is one. The path is in the script, not the command: the job picks its file
/// itself, so oomguard patches it in place.
fn oom_then_look(cfg: &Path) -> String {
    format!(
        "import os, sys\nif not os.path.exists('oomed'):\n    open('oomed', 'w').close()\n    print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr)\n    sys.exit(1)\nopen('seen.tmp', 'w').write(open({:?}).read())\nos.rename('seen.tmp', 'seen')\nif os.path.exists('hold'):\n    open('hold').read()\n",
        cfg.to_str().unwrap()
    )
}

/// A uid with no account: a third user, neither root nor the file's owner.
const THIRD: u32 = 12345;

/// A directory of root's (0755) with `cfg.yaml` (root's, 0644) and the job `job.py`; returns
/// (directory, config).
fn root_dir_with_config(w: &World, name: &str) -> (PathBuf, PathBuf) {
    let dir = w.path(name);
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o755);
    let cfg = dir.join("cfg.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    chmod(&cfg, 0o644);
    std::fs::write(dir.join("job.py"), oom_then_look(&cfg)).unwrap();
    (dir, cfg)
}

/// A job file of root's in `dir`: the job runs `job.py` there, its batch in `cfg`.
fn job_file(dir: &Path, cfg: &Path, user: Option<&str>) -> PathBuf {
    let user = user.map_or(String::new(), |u| format!("user = \"{u}\"\n"));
    let job = dir.join("job.toml");
    std::fs::write(
        &job,
        format!(
            "{user}workdir = \"{}\"\ncommand = {}\n[[knob]]\nname = \"batch\"\nfile = \"{}\"\nkey = \"training.batch_size\"\n",
            dir.display(),
            toml_list(&["python3", "job.py"]),
            cfg.display()
        ),
    )
    .unwrap();
    chmod(&job, 0o644);
    job
}

fn run_job(w: &World, job: &Path, run_dir: &str) -> std::process::Output {
    w.run(&[
        "--config",
        job.to_str().unwrap(),
        "--run-dir",
        w.path(run_dir).to_str().unwrap(),
    ])
}

/// Every name in `dir` but the ones given: what a run left behind.
fn others_in(dir: &Path, expected: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !expected.contains(&n.as_str()))
        .collect();
    names.sort();
    names
}

/// A sticky directory anyone can write, `<T>/shared` (1777), holding nobody's `cfg.yaml`; nobody's
/// job (`<T>/nobody/job.py`) and a job file of root's running it as nobody in nobody's directory.
/// Returns (shared directory, config, nobody's workdir, job file).
fn sticky_scene(w: &World) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let shared = w.path("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let cfg = w.nobody_file(&shared.join("cfg.yaml"), CONFIG);
    let work = w.path("nobody");
    w.nobody_file(&work.join("job.py"), &oom_then_look(&cfg));
    let job = job_file(&w.path("rootonly"), &cfg, Some("nobody"));
    // The job file names nobody's workdir.
    std::fs::write(
        &job,
        read(&job).replace(
            &format!("workdir = \"{}\"", w.root_only().display()),
            &format!("workdir = \"{}\"", work.display()),
        ),
    )
    .unwrap();
    (shared, cfg, work, job)
}

/// The attacker's process holding `flock` on lock files it made: a real process of `uid`,
/// blocked reading a FIFO until dropped.
struct Squatter {
    child: Child,
    /// The paths it holds, and the ones it could not make.
    held: Vec<PathBuf>,
    refused: Vec<PathBuf>,
}

const SQUAT: &str = "import fcntl, sys\nheld = []\nfor path in sys.argv[2:]:\n    try:\n        f = open(path, 'a+')\n    except OSError as e:\n        print('refused', path, flush=True)\n        continue\n    f.truncate(0)\n    f.write('1\\n/home/someone-else/run\\n')\n    f.flush()\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    held.append(f)\n    print('held', path, flush=True)\nprint('ready', flush=True)\nopen(sys.argv[1]).read()\n";

impl Squatter {
    /// Starts the squat as `uid` and returns once every path is held or refused. `fifo` must be
    /// readable by `uid`.
    fn start(uid: u32, fifo: &Path, paths: &[&Path]) -> Squatter {
        let mut args = vec!["-c", SQUAT, fifo.to_str().unwrap()];
        args.extend(paths.iter().map(|p| p.to_str().unwrap()));
        let mut child = Command::new("python3")
            .args(&args)
            .uid(uid)
            .gid(uid)
            .current_dir("/")
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let (mut held, mut refused) = (Vec::new(), Vec::new());
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(path) = line.strip_prefix("held ") {
                held.push(PathBuf::from(path));
            } else if let Some(path) = line.strip_prefix("refused ") {
                refused.push(PathBuf::from(path));
            } else if line == "ready" {
                break;
            }
        }
        Squatter {
            child,
            held,
            refused,
        }
    }

    /// Lets go: the FIFO gets its line and the process ends.
    fn end(mut self, fifo: &Path) {
        release_fifo(fifo);
        self.child.wait().unwrap();
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child killed if the test ends before it does (a failed assertion must not leave root's
/// oomguard waiting on a FIFO).
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Waits for it to end.
    fn output(&mut self) -> std::process::Output {
        let child = self.0.take().expect("waited once");
        child.wait_with_output().unwrap()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A FIFO anyone may open, for a squatter to block on.
fn fifo(path: &Path) -> PathBuf {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    chmod(path, 0o666);
    path.to_path_buf()
}

/// FNV-1a, 64 bits: how older oomguards named a file's machine-wide lock.
fn fnv64(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The name an older oomguard gave `file`'s lock in each of [`OLD_LOCK_DIRS`]:
/// `<parent dev>-<parent ino>-<fnv64(name)>-<name, made safe>.lock`.
fn old_lock_name(file: &Path) -> String {
    let parent = std::fs::metadata(file.parent().unwrap()).unwrap();
    let name = file.file_name().unwrap();
    let safe: String = name
        .to_string_lossy()
        .chars()
        .take(40)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{:x}-{:x}-{:016x}-{safe}.lock",
        parent.dev(),
        parent.ino(),
        fnv64(name.as_bytes())
    )
}

/// Finding 1. Any user could compute the machine-wide lock of root's config file, make it with
/// a made-up owner and hold `flock` on it: root's run was refused (exit 2, which the system unit
/// never restarts). The lock now lives beside the file, where nobody cannot make a name.
#[test]
fn a_lock_squatted_by_another_user_never_refuses_roots_run() {
    let Some(w) = World::new("a_lock_squatted_by_another_user_never_refuses_roots_run") else {
        return;
    };
    let _turn = OLD_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, cfg) = root_dir_with_config(&w, "rootcfg1");
    let job = job_file(&dir, &cfg, None);
    // The old places, as an older oomguard made them (root's, sticky, writable by all).
    let mut made = MadeInOldDirs::default();
    for old in OLD_LOCK_DIRS.map(Path::new) {
        if std::fs::create_dir(old).is_ok() {
            chmod(old, 0o1777);
            made.dirs.push(old.to_path_buf());
        }
    }
    let mut names: Vec<PathBuf> = OLD_LOCK_DIRS
        .iter()
        .map(|d| Path::new(d).join(old_lock_name(&cfg)))
        .collect();
    made.files.extend(names.iter().cloned());
    // And where the lock is now: nobody cannot make a name in root's directory.
    let beside = dir.join(".cfg.yaml.oomguard-lock");
    names.push(beside.clone());
    let hold = fifo(&w.path("hold1"));
    let squat = Squatter::start(
        NOBODY,
        &hold,
        &names.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
    );
    assert_eq!(squat.refused, vec![beside.clone()], "{:?}", squat.held);
    assert!(!squat.held.is_empty(), "nobody squatted no old place");

    let out = run_job(&w, &job, "run1");
    let stderr = stderr_of(&out);
    squat.end(&hold);
    drop(made);
    assert_eq!(
        out.status.code(),
        Some(0),
        "nobody's lock refused root's run: {stderr}"
    );
    assert_eq!(read(&dir.join("seen")), CONFIG.replace("64", "32"));
    assert_eq!(read(&cfg), CONFIG);
    assert_eq!(
        others_in(&dir, &["cfg.yaml", "job.py", "job.toml", "oomed", "seen"]),
        Vec::<String>::new()
    );
}

/// Finding 2, and the rule that a second oomguard is refused while the first patches the file:
/// nobody makes the old lock directories first (which made every oomguard skip them, so two of
/// them patched one file at once and it was left at batch 32, the original beside it). Two
/// oomguards of different state directories (the unit's and a shell's) on one in-place file:
/// the second is refused while the first runs, and the file is byte-identical afterwards.
#[test]
fn two_oomguards_never_patch_one_file_at_once_whoever_made_the_old_lock_dirs() {
    let Some(w) =
        World::new("two_oomguards_never_patch_one_file_at_once_whoever_made_the_old_lock_dirs")
    else {
        return;
    };
    let _turn = OLD_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    let mut made = MadeInOldDirs::default();
    for old in OLD_LOCK_DIRS {
        if !Path::new(old).exists() {
            let mkdir = as_nobody("mkdir", &["-m", "0755", old]).status().unwrap();
            if mkdir.success() {
                made.dirs.push(PathBuf::from(old));
            }
        }
    }
    let (dir, cfg) = root_dir_with_config(&w, "rootcfg2");
    let job = job_file(&dir, &cfg, None);
    let hold = dir.join("hold");
    nix::unistd::mkfifo(&hold, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut first = KillOnDrop(Some(
        w.oomguard(&[
            "--config",
            job.to_str().unwrap(),
            "--run-dir",
            w.path("run2a").to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    ));
    let pid = first.0.as_ref().unwrap().id();
    let patched = wait_until(Duration::from_secs(60), || dir.join("seen").exists());
    // A shell's oomguard, its state elsewhere, on the same file (its job would not wait).
    let second_job = w.path("shelljob.toml");
    std::fs::write(
        &second_job,
        read(&job).replace(&toml_list(&["python3", "job.py"]), &toml_list(&["true"])),
    )
    .unwrap();
    chmod(&second_job, 0o644);
    let second = util::output_within(
        w.oomguard(&[
            "--config",
            second_job.to_str().unwrap(),
            "--run-dir",
            w.path("run2b").to_str().unwrap(),
        ])
        .env("XDG_STATE_HOME", w.path("shellstate")),
        Duration::from_secs(60),
    );
    drop(made);
    assert!(patched, "the first run never reached its second attempt");
    release_fifo(&hold);
    let first = first.output();
    let stderr = stderr_of(&second);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("is being patched by oomguard {pid}")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    assert_eq!(read(&dir.join("seen")), CONFIG.replace("64", "32"));
    assert_eq!(read(&cfg), CONFIG);
    assert_eq!(
        others_in(
            &dir,
            &["cfg.yaml", "job.py", "job.toml", "oomed", "seen", "hold"]
        ),
        Vec::<String>::new(),
        "a lock, a temp file or an .oomguard-original was left"
    );
}

/// In a sticky directory anyone can write (/tmp), a third user can make the lock's name first
/// without being able to touch the file. Root's run for the file's user is not refused: the
/// squatter's file is swapped for root's own lock and removed. An oomguard without root's
/// rights cannot remove it there: it stops with one line naming the squatter and the fix.
#[test]
fn a_lock_name_squatted_in_a_sticky_directory_never_refuses_roots_run() {
    let Some(w) = World::new("a_lock_name_squatted_in_a_sticky_directory_never_refuses_roots_run")
    else {
        return;
    };
    let (shared, cfg, work, job) = sticky_scene(&w);
    let lock = shared.join(".cfg.yaml.oomguard-lock");
    let hold = fifo(&w.path("hold3"));
    let squat = Squatter::start(THIRD, &hold, &[&lock]);
    assert_eq!(squat.held, vec![lock.clone()]);
    let squatted = std::fs::metadata(&lock).unwrap().ino();

    let out = run_job(&w, &job, "run3");
    let stderr = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a third user's lock refused root's run: {stderr}"
    );
    assert_eq!(read(&work.join("seen")), CONFIG.replace("64", "32"));
    assert_eq!(read(&cfg), CONFIG);
    assert!(
        std::fs::symlink_metadata(&lock).is_err(),
        "the squat (inode {squatted}) or root's lock stayed"
    );
    assert_eq!(others_in(&shared, &["cfg.yaml"]), Vec::<String>::new());

    // Squatted again, against nobody's own oomguard (no root's rights to clear it).
    squat.end(&hold);
    let hold = fifo(&w.path("hold3b"));
    let again = Squatter::start(THIRD, &hold, &[&lock]);
    assert_eq!(again.held, vec![lock.clone()]);
    let state = w.nobody_dir("nobodystate");
    let out = Command::new(util::bin())
        .args(["run", "-q", "--no-cgroup", "--backoff", "0s", "--run-dir"])
        .arg(state.join("run"))
        .args([
            "--batch-arg",
            &format!("{}:training.batch_size", cfg.display()),
        ])
        .args(["--", "python3", "job.py"])
        .env("XDG_STATE_HOME", &state)
        .env_remove("RUST_LOG")
        .current_dir(&work)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    again.end(&hold);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} is not oomguard's lock: uid {THIRD} made it in a shared directory",
            lock.display()
        )),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(read(&cfg), CONFIG);
}

/// An extended attribute of `path`, or None.
fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: the strings are NUL-terminated and the buffer valid for its length.
    let len = unsafe {
        nix::libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (len >= 0).then(|| {
        buf.truncate(len as usize);
        buf
    })
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    // SAFETY: the strings are NUL-terminated and the value valid for its length.
    let rc = unsafe {
        nix::libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setxattr {name:?}: {}",
        std::io::Error::last_os_error()
    );
}

/// A POSIX ACL (acl(5)) as the kernel keeps it in `system.posix_acl_access`: the file's owner
/// rw, `nobody` rw, its group r, mask rw, others r (what `setfacl -m u:nobody:rw` makes of a
/// 0644 file).
fn acl_nobody_rw() -> Vec<u8> {
    let entries: [(u16, u16, u32); 5] = [
        (0x01, 6, u32::MAX), // ACL_USER_OBJ
        (0x02, 6, NOBODY),   // ACL_USER
        (0x04, 4, u32::MAX), // ACL_GROUP_OBJ
        (0x10, 6, u32::MAX), // ACL_MASK
        (0x20, 4, u32::MAX), // ACL_OTHER
    ];
    let mut acl = 2u32.to_le_bytes().to_vec(); // POSIX_ACL_XATTR_VERSION
    for (tag, perm, id) in entries {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    acl
}

/// Whether nobody may open `path` for writing (without writing anything).
fn nobody_may_write(path: &Path) -> bool {
    as_nobody(
        "python3",
        &[
            "-c",
            "import sys; open(sys.argv[1], 'r+')",
            path.to_str().unwrap(),
        ],
    )
    .stderr(Stdio::null())
    .status()
    .unwrap()
    .success()
}

/// Finding 11. The patch and the restore renamed a new file over the name: after a clean run
/// the bytes were the same, but an ACL giving a collaborator (nobody) `rw` was gone, `user.*`
/// attributes were gone, and a second hard link still held the old inode. Now the new inode
/// carries the ACL and attributes, and a file with two names is written in its own inode:
/// during the relaunch the other name reads the patched text, after the restore the original.
#[test]
fn acl_xattrs_and_hard_links_survive_a_patch_and_its_restore() {
    let Some(w) = World::new("acl_xattrs_and_hard_links_survive_a_patch_and_its_restore") else {
        return;
    };
    let (dir, cfg) = root_dir_with_config(&w, "rootcfg4");
    set_xattr(&cfg, "system.posix_acl_access", &acl_nobody_rw());
    set_xattr(&cfg, "user.project", b"gpt2-small");
    assert!(nobody_may_write(&cfg), "the ACL did not take");
    // A second file, with a second name, patched with the first (the accumulation).
    let other = dir.join("accum.yaml");
    let accum = "training:\n  accum: 1\n";
    std::fs::write(&other, accum).unwrap();
    let link = w.path("accum-link.yaml");
    std::fs::hard_link(&other, &link).unwrap();
    let job = dir.join("job.toml");
    std::fs::write(
        &job,
        format!(
            "workdir = \"{}\"\ncommand = {}\n[[knob]]\nname = \"batch\"\nfile = \"{}\"\nkey = \"training.batch_size\"\nkeep_product_with = \"accum\"\n[[knob]]\nname = \"accum\"\nfile = \"{}\"\nkey = \"training.accum\"\n",
            dir.display(),
            toml_list(&["sh", "-c", &format!("python3 job.py && cat {} >> seen", link.display())]),
            cfg.display(),
            other.display()
        ),
    )
    .unwrap();
    let before = (
        std::fs::metadata(&cfg).unwrap().mode(),
        std::fs::metadata(&other).unwrap().ino(),
    );
    let out = run_job(&w, &job, "run4");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    // The relaunch read the patched texts, the second name's included.
    assert_eq!(
        read(&dir.join("seen")),
        format!("{}training:\n  accum: 2\n", CONFIG.replace("64", "32"))
    );
    // And after the restore: the original bytes, the ACL, the attribute, one inode.
    assert_eq!(read(&cfg), CONFIG);
    assert_eq!(
        xattr(&cfg, "system.posix_acl_access"),
        Some(acl_nobody_rw()),
        "the ACL was lost"
    );
    assert!(nobody_may_write(&cfg), "the collaborator lost rw");
    assert_eq!(
        xattr(&cfg, "user.project").as_deref(),
        Some(&b"gpt2-small"[..]),
        "the user.* attribute was lost"
    );
    assert_eq!(std::fs::metadata(&cfg).unwrap().mode(), before.0);
    assert_eq!(std::fs::metadata(&other).unwrap().ino(), before.1);
    assert_eq!(std::fs::metadata(&link).unwrap().ino(), before.1);
    assert_eq!(read(&link), accum);
    assert_eq!(read(&other), accum);
}

/// "Also close": a start refused after the file's lock was taken (here: an unusable journal
/// entry for the file in root's state directory) left the lock file behind.
#[test]
fn a_start_refused_after_the_lock_was_taken_leaves_no_lock_file() {
    let Some(w) = World::new("a_start_refused_after_the_lock_was_taken_leaves_no_lock_file") else {
        return;
    };
    let _turn = OLD_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, cfg) = root_dir_with_config(&w, "rootcfg5");
    let job = job_file(&dir, &cfg, None);
    // The journal entry an oomguard would keep for this file, unreadable.
    let patches = w.path("rootstate/oomguard/patches");
    std::fs::create_dir_all(&patches).unwrap();
    let key = format!(
        "inplace-{:016x}-cfg_yaml",
        fnv64(cfg.as_os_str().as_bytes())
    );
    std::fs::write(patches.join(format!("{key}.json")), "{ not json").unwrap();
    let run_dir = w.path("run5");
    let out = run_job(&w, &job, "run5");
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used"), "{stderr}");
    // Nothing names this run as a lock's holder: beside the file, or where older ones kept it.
    assert_eq!(
        others_in(&dir, &["cfg.yaml", "job.py", "job.toml"]),
        Vec::<String>::new()
    );
    for old in OLD_LOCK_DIRS {
        let left = Path::new(old).join(old_lock_name(&cfg));
        let text = std::fs::read_to_string(&left).unwrap_or_default();
        assert!(
            !text.contains(run_dir.to_str().unwrap()),
            "{} was left: {text}",
            left.display()
        );
    }
    assert_eq!(read(&cfg), CONFIG);
}

/// The lock oomguard makes beside a file opens only for those who can write the file: a reader
/// who could open it could hold it (older oomguards made theirs 0644). Root's 0644 file: the
/// lock is root's and 0600 while the job runs, and gone at the end.
#[test]
fn the_lock_file_opens_only_for_the_files_writers() {
    let Some(w) = World::new("the_lock_file_opens_only_for_the_files_writers") else {
        return;
    };
    let (dir, cfg) = root_dir_with_config(&w, "rootcfg6");
    let lock = dir.join(".cfg.yaml.oomguard-lock");
    let job = dir.join("job.toml");
    std::fs::write(
        &job,
        format!(
            "command = {}\n[[knob]]\nname = \"batch\"\nfile = \"{}\"\nkey = \"training.batch_size\"\n",
            toml_list(&["sh", "-c", &format!("stat -c '%a %u' {} > {}", lock.display(), w.path("lockmode").display())]),
            cfg.display()
        ),
    )
    .unwrap();
    let out = run_job(&w, &job, "run6");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(read(&w.path("lockmode")), "600 0\n");
    assert!(!lock.exists(), "the lock file stayed");
}

/// The journal entry a file's lock names is the lock's writer's to choose, the job's own user
/// among them: root never acts on one it cannot trust, and what is at the path tells in nothing.
/// nobody leaves a lock on its own config naming a file of a third user's in root's private
/// directory, then a path that is not there: both runs are the same, and the third user's file
/// is untouched.
#[test]
fn a_journal_path_in_a_users_lock_tells_root_nothing_and_is_never_acted_on() {
    let Some(w) =
        World::new("a_journal_path_in_a_users_lock_tells_root_nothing_and_is_never_acted_on")
    else {
        return;
    };
    let theirs = w.root_only().join("theirs.json");
    std::fs::write(&theirs, "{}").unwrap();
    std::os::unix::fs::chown(&theirs, Some(THIRD), Some(THIRD)).unwrap();
    let mut answers = Vec::new();
    for (case, named) in [
        ("there", theirs.clone()),
        ("missing", w.root_only().join("gone.json")),
    ] {
        let dir = w.nobody_dir(case);
        let cfg = w.nobody_file(&dir.join("cfg.yaml"), CONFIG);
        w.nobody_file(&dir.join("job.py"), &oom_then_look(&cfg));
        // As a dead oomguard of nobody's would have left it (no one holds it).
        let lock = w.nobody_file(
            &dir.join(".cfg.yaml.oomguard-lock"),
            &format!("1\n/nowhere\n{}\n", named.display()),
        );
        chmod(&lock, 0o600);
        let job = job_file(&dir, &cfg, Some("nobody"));
        let out = run_job(&w, &job, &format!("run-{case}"));
        answers.push((out.status.code(), stderr_of(&out).replace(case, "CASE")));
        assert_eq!(read(&cfg), CONFIG, "{case}: the config was not given back");
    }
    assert_eq!(answers[0].0, Some(0), "{}", answers[0].1);
    assert_eq!(
        answers[0].0, answers[1].0,
        "the exit code tells:\n{}\n{}",
        answers[0].1, answers[1].1
    );
    assert_eq!(read(&theirs), "{}");
    assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), THIRD);
}

/// A file of root's hard-linked to the lock's name in a sticky directory (as a third user can
/// where `fs.protected_hardlinks` is 0) is owned by root, but it is not a lock: root's run is not
/// refused, the link goes, and root's file keeps its bytes.
#[test]
fn a_root_file_linked_to_the_lock_name_in_a_sticky_directory_never_refuses_roots_run() {
    let Some(w) = World::new(
        "a_root_file_linked_to_the_lock_name_in_a_sticky_directory_never_refuses_roots_run",
    ) else {
        return;
    };
    let (shared, cfg, _, job) = sticky_scene(&w);
    // The third user's link, made here as root (what it leaves at the name is the point).
    let roots = w.root_file("precious", "root's bytes\n");
    let lock = shared.join(".cfg.yaml.oomguard-lock");
    std::fs::hard_link(&roots, &lock).unwrap();

    let out = run_job(&w, &job, "run-linked");
    let stderr = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a linked file refused root's run: {stderr}"
    );
    assert_eq!(read(&cfg), CONFIG);
    assert_eq!(read(&roots), "root's bytes\n");
    assert_eq!(
        std::fs::metadata(&roots).unwrap().nlink(),
        1,
        "the link stayed"
    );
    assert_eq!(others_in(&shared, &["cfg.yaml"]), Vec::<String>::new());
}
