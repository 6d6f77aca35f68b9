//! Whom oomguard acts for when it touches files on the job's behalf. Run as root with a job
//! file that names a `user`, everything the job file or command line can point at (knob files,
//! their patched copies and backups beside them, `__pycache__`, checkpoints, a `run_dir` or
//! `state_dir` given explicitly, the metrics textfile, hooks) is done with that user's
//! credentials, so root does for the job only what its user could do alone: a symlink of the
//! user's pointing into root's files leads nowhere, as it would for the user.
//!
//! How: for files, the calling thread's filesystem identity is switched for the duration of one
//! closure ([`as_user`]): its supplementary groups (the raw `setgroups` system call, which acts on
//! one thread, unlike glibc's wrapper that changes every thread), then `setfsgid` and `setfsuid`,
//! each per thread on Linux. Leaving the fsuid 0 drops the filesystem capabilities
//! (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, `CAP_CHOWN`, ...; capabilities(7)), so the kernel checks
//! every open, rename and unlink exactly as for the user, and the identity comes back when the
//! closure returns. oomguard's run loop is single-threaded (a current-thread runtime), so the
//! switch never leaks into another task. Processes (hooks) are not started under it: they drop to
//! the user whole, between fork and exec ([`crate::launch::child::become_user`]). The threads that
//! write the job's output to its log take the user's filesystem identity for their whole life
//! ([`write_as_user_from_now`]), and give up `CAP_SYS_RESOURCE`, so that output cannot spend root's
//! reserved disk blocks.
//!
//! What stays root's: making and limiting the attempt's cgroup, the kernel log, oomguard's own
//! default state and run directories (chosen by root's environment, not by the job file), switching
//! to the user for the job, and ([`as_oomguard`]) clearing a third user's file from the name of a
//! knob file's lock in a shared sticky directory. Without root, or without a `user`, nothing
//! switches.

use std::cell::Cell;
use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;

use nix::unistd::{Gid, Uid};

/// A user the job runs as, looked up before the fork (see [`crate::front::runas`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The login name: the job's USER and LOGNAME.
    pub name: String,
    pub uid: Uid,
    /// The primary group: the user's own, or the job file's `group`.
    pub gid: Gid,
    /// Supplementary groups, as initgroups(3) would set them (the user's, plus `gid`).
    pub groups: Vec<Gid>,
    /// The job's HOME.
    pub home: PathBuf,
}

/// The user a root oomguard acts for, set once before any file of the job's is touched.
static ACTING_FOR: OnceLock<Option<Acting>> = OnceLock::new();

#[derive(Debug)]
struct Acting {
    who: RunAs,
    /// oomguard's own supplementary groups, given back after each switch.
    own_groups: Vec<Gid>,
}

thread_local! {
    /// Whether this thread is inside [`as_user`] already (a nested call just runs).
    static SWITCHED: Cell<bool> = const { Cell::new(false) };
    /// Whom this thread is switched to, and oomguard's own groups: for [`as_oomguard`].
    static SWITCHED_TO: std::cell::RefCell<Option<(RunAs, Vec<Gid>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Records whom file work is done for: `who` when oomguard is root, no one otherwise. Later
/// calls are ignored (the first, made while the settings are checked, decides).
pub fn act_for(who: Option<&RunAs>) {
    let acting = who
        .filter(|_| Uid::effective().is_root())
        .map(|who| Acting {
            who: who.clone(),
            own_groups: nix::unistd::getgroups().unwrap_or_default(),
        });
    let _ = ACTING_FOR.set(acting);
}

/// The user file work is done as, where it is not oomguard's own identity.
pub fn acting_for() -> Option<&'static RunAs> {
    ACTING_FOR.get()?.as_ref().map(|acting| &acting.who)
}

/// For the rest of the calling thread's life: the acting user's filesystem identity (as in
/// [`as_user`], never switched back) and no `CAP_SYS_RESOURCE` in its effective set; nothing when
/// oomguard acts for no one else. For a thread that only writes the job's output to its log
/// ([`crate::output::stream`]'s readers): ext4 lets a write use the blocks reserved for root when
/// the writer's fsuid is the reserve's owner (root) or it holds `CAP_SYS_RESOURCE`, which also lets
/// it pass disk quotas (ext4(5) `resuid`, capabilities(7)); the user's output, written as the user,
/// stops where the user's own writes would. Capabilities are per thread on Linux: the rest of
/// oomguard keeps them.
pub fn write_as_user_from_now() -> io::Result<()> {
    let Some(acting) = ACTING_FOR.get().and_then(Option::as_ref) else {
        return Ok(());
    };
    if SWITCHED.get() {
        return Ok(());
    }
    // The switch is kept: its guard is forgotten, and nested `as_user` calls just run.
    std::mem::forget(Switched::to(&acting.who, &acting.own_groups)?);
    drop_effective_capability(CAP_SYS_RESOURCE)
}

/// capabilities(7): `CAP_SYS_RESOURCE`'s number.
const CAP_SYS_RESOURCE: u32 = 24;

/// Removes `cap` from the calling thread's effective set (capget/capset on the thread itself;
/// libc has no wrapper, the structures are linux/capability.h's, version 3: two 32-bit words).
fn drop_effective_capability(cap: u32) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: `header` and the two-word `data` are the layouts capget(2) reads and fills.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    data[(cap / 32) as usize].effective &= !(1 << (cap % 32));
    // SAFETY: as above; capset(2) reads them.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_capset,
            &mut header as *mut Header,
            data.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `work` with the acting user's filesystem identity on this thread (see the module doc);
/// runs it as is when oomguard acts for no one else. A switch that does not take is an error,
/// and `work` is then not run.
pub fn as_user<T>(work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    match ACTING_FOR.get().and_then(Option::as_ref) {
        Some(acting) => as_identity(&acting.who, &acting.own_groups, work),
        None => work(),
    }
}

/// A regular file's text, read as the job's user ([`as_user`]) through the regular-file-only
/// open, at most `max_bytes` of it: the scripts and configs the knob search reads on the job's
/// behalf. `None` where it cannot be read, is larger, or is not UTF-8.
pub fn read_text(path: &std::path::Path, max_bytes: u64) -> Option<String> {
    let bytes = as_user(|| crate::guard::fsutil::read_regular_capped(path, max_bytes)).ok()?;
    String::from_utf8(bytes).ok()
}

/// [`as_user`] only when `yes`: for places that are the job's when given explicitly and
/// oomguard's own by default.
pub fn as_user_if<T>(yes: bool, work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    if yes {
        as_user(work)
    } else {
        work()
    }
}

/// [`as_user_if`] for work with an error type of its own; `switch_failed` makes one of a switch
/// that did not take.
pub fn as_user_if_or<T, E>(
    yes: bool,
    work: impl FnOnce() -> Result<T, E>,
    switch_failed: impl FnOnce(io::Error) -> E,
) -> Result<T, E> {
    let mut done = None;
    match as_user_if(yes, || {
        done = Some(work());
        Ok(())
    }) {
        Ok(()) => done.expect("the work ran when the switch took"),
        Err(e) => Err(switch_failed(e)),
    }
}

/// Runs `work` as `who` (when oomguard is root), for work whose user was recorded elsewhere
/// (a patch journal restored by the guard or the next run).
pub fn as_recorded<T>(who: Option<&RunAs>, work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    match who.filter(|_| Uid::effective().is_root()) {
        Some(who) => {
            let own = nix::unistd::getgroups().unwrap_or_default();
            as_identity(who, &own, work)
        }
        None => work(),
    }
}

/// Runs `work` with oomguard's own filesystem identity, even inside [`as_user`] or
/// [`as_recorded`]; the switch to the user comes back when it returns. Only for what the user
/// could not do and root must: clearing another user's file from a name oomguard reserves in a
/// shared sticky directory, on a directory descriptor the user opened
/// ([`crate::knobs::patch`]'s lock). Outside a switch it just runs.
pub fn as_oomguard<T>(work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let Some((who, own)) = SWITCHED_TO.with_borrow_mut(Option::take) else {
        return work();
    };
    drop(Switched { own_groups: &own });
    let result = work();
    let again = Switched::to(&who, &own);
    assert!(
        again.is_ok(),
        "oomguard acts as the job's user again after acting as itself"
    );
    // The outer switch's guard switches back when its closure ends.
    std::mem::forget(again);
    result
}

fn as_identity<T>(
    who: &RunAs,
    own_groups: &[Gid],
    work: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    if SWITCHED.get() {
        return work();
    }
    let _back = Switched::to(who, own_groups)?;
    work()
}

/// The thread's filesystem identity, switched; dropping it switches back.
struct Switched<'a> {
    own_groups: &'a [Gid],
}

impl<'a> Switched<'a> {
    fn to(who: &RunAs, own_groups: &'a [Gid]) -> io::Result<Switched<'a>> {
        let back = Switched { own_groups };
        SWITCHED.set(true);
        SWITCHED_TO.set(Some((who.clone(), own_groups.to_vec())));
        set_thread_groups(&who.groups)?;
        nix::unistd::setfsgid(who.gid);
        nix::unistd::setfsuid(who.uid);
        // setfsuid/setfsgid report no failure; a second call returns the value in force.
        if nix::unistd::setfsuid(who.uid) != who.uid || nix::unistd::setfsgid(who.gid) != who.gid {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("cannot act as user {}", who.name),
            ));
        }
        Ok(back)
    }
}

impl Drop for Switched<'_> {
    fn drop(&mut self) {
        // uid first: back at fsuid 0 the filesystem capabilities return, then the groups.
        nix::unistd::setfsuid(Uid::effective());
        nix::unistd::setfsgid(Gid::effective());
        let restored = set_thread_groups(self.own_groups);
        assert!(
            restored.is_ok() && nix::unistd::setfsuid(Uid::effective()) == Uid::effective(),
            "oomguard's own identity comes back after acting as the job's user"
        );
        SWITCHED.set(false);
        SWITCHED_TO.set(None);
    }
}

/// setgroups(2) for the calling thread only: the system call itself, not glibc's wrapper,
/// which would change every thread's groups.
fn set_thread_groups(groups: &[Gid]) -> io::Result<()> {
    let raw: Vec<nix::libc::gid_t> = groups.iter().map(|g| g.as_raw()).collect();
    // SAFETY: the pointer and length describe `raw`, alive for the call.
    let rc = unsafe { nix::libc::syscall(nix::libc::SYS_setgroups, raw.len(), raw.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn nobody() -> RunAs {
        RunAs {
            name: "nobody".into(),
            uid: Uid::from_raw(65534),
            gid: Gid::from_raw(65534),
            groups: vec![Gid::from_raw(65534)],
            home: "/nonexistent".into(),
        }
    }

    /// As `nobody`, root's private file cannot be read; outside the closure it can again, and
    /// another thread never saw the switch.
    #[test]
    fn acting_as_a_user_is_checked_by_the_kernel_and_ends_with_the_closure() {
        if !Uid::effective().is_root() {
            eprintln!("SKIPPED acting_as_a_user_is_checked_by_the_kernel_and_ends_with_the_closure: not root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let own = nix::unistd::getgroups().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let other = {
            let secret = secret.clone();
            std::thread::spawn(move || {
                rx.recv().unwrap();
                done_tx.send(std::fs::read(&secret).is_ok()).unwrap();
            })
        };
        let denied = as_identity(&nobody(), &own, || {
            // While this thread is nobody, another thread is still root.
            tx.send(()).unwrap();
            let other_read = done_rx.recv().unwrap();
            let made = std::fs::write(dir.path().join("planted"), "x");
            Ok((std::fs::read(&secret).err(), other_read, made.is_err()))
        })
        .unwrap();
        other.join().unwrap();
        let (err, other_read, create_refused) = denied;
        assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::PermissionDenied));
        assert!(other_read, "the other thread kept root's identity");
        assert!(create_refused);
        assert_eq!(std::fs::read(&secret).unwrap(), b"root's");
        assert_eq!(nix::unistd::getgroups().unwrap(), own);
    }

    /// A capability dropped from one thread's effective set is gone there only.
    #[test]
    fn a_capability_is_dropped_for_the_calling_thread_alone() {
        // CAP_SYS_NICE (23): one a root test process holds, and no other test needs.
        const CAP: u32 = 23;
        fn own() -> u64 {
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
            u64::from_str_radix(line["CapEff:".len()..].trim(), 16).unwrap()
        }
        if own() & (1 << CAP) == 0 {
            eprintln!("SKIPPED a_capability_is_dropped_for_the_calling_thread_alone: no CAP_SYS_NICE to drop");
            return;
        }
        let after = std::thread::spawn(|| {
            drop_effective_capability(CAP).unwrap();
            own()
        })
        .join()
        .unwrap();
        assert_eq!(after & (1 << CAP), 0, "dropped in that thread");
        assert_ne!(own() & (1 << CAP), 0, "kept in this one");
    }
}
