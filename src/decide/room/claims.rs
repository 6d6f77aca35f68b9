//! Claims on a shared card's room, so that two oomguards waiting on one card do not both launch
//! into the same room when it frees: before launching, an oomguard writes the bytes it is about
//! to take on each card as a claim file, and every other oomguard counts the live claims as
//! taken until the claimer's job shows on the card (the claimer then withdraws its claim).
//!
//! Where: `/run/oomguard-claims`, a directory only root can make (`/run` is root's), sticky and
//! writable by all, so no user can squat it, remove another's claim or plant a link in its
//! place. It is used only when it is exactly that (root's, a real directory, mode 1777); an
//! oomguard run as root makes it, and so does `packaging/tmpfiles.d/oomguard.conf`. Without it
//! claims live in a directory of the user's own and coordinate only that user's oomguards (the
//! caller gives none as root).
//!
//! What a claim can do to others is bounded: it counts only while the process that wrote it
//! lives (PID and start time, in this PID namespace), only when the file's owner is that
//! process's user, and for at most [`CLAIM_MAX_AGE`]. A forged claim can make another oomguard
//! wait at most its `--gpu-wait` (then it runs on the room left), which is less than what the
//! same user can do by holding the card's memory itself.
//!
//! Nobody can take a claim's name first: it ends in a random part
//! ([`crate::guard::fsutil::random_u64`]), as does its temporary file, both made without replacing
//! anything (`O_EXCL`, `renameat2`'s `RENAME_NOREPLACE`), so a file another user put in the shared
//! directory under the name an oomguard would use (it could not be removed there: the directory is
//! sticky) never makes that oomguard launch without its claim. Readers go by what a file holds, not
//! by its name.
//!
//! Race-free without a lock nobody could be trusted to hold: claims are ordered by when they
//! were made; after writing its claim an oomguard reads the others again and counts those made
//! before its own. Of two that claim at once, the earlier goes and the later sees it and waits.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::guard::liveness::{self, Liveness, ProcessId};

/// The shared place, root's.
pub const SHARED_DIR: &str = "/run/oomguard-claims";

/// A claim older than this never counts: the claimer withdraws it once its job shows on the
/// card, at its attempt's end, or [`CLAIM_HOLD`] after it launched, long before.
pub const CLAIM_MAX_AGE: Duration = Duration::from_secs(3600);

/// How long after its launch a job that has not yet shown its memory on the card keeps its
/// claim: CUDA's start and a model's load take a while, not this long.
pub const CLAIM_HOLD: Duration = Duration::from_secs(300);

/// A claim file is a few hundred bytes; a bigger one is not read.
const CLAIM_FILE_MAX_BYTES: u64 = 4096;

/// One claim as its file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// The oomguard that claims, named so that a reused PID does not keep its claim alive.
    pub process: ProcessId,
    /// Its real UID: the file's owner must be the same.
    pub uid: u32,
    /// NVML's index of the card, and its UUID where known (a claim names the card by its UUID
    /// where both sides know it, else by the index, which is the machine's).
    pub device: u32,
    #[serde(default)]
    pub uuid: Option<String>,
    pub bytes: u64,
    /// When it was made, in milliseconds since the epoch: the claims' order.
    pub at_ms: u64,
}

impl ClaimRecord {
    /// Whether this claim was made before `other` (ties broken by PID).
    pub fn before(&self, other: &ClaimRecord) -> bool {
        (self.at_ms, self.process.pid) < (other.at_ms, other.process.pid)
    }
}

/// Where this oomguard's claims go and others' are read.
#[derive(Debug, Clone)]
pub struct Place {
    dir: PathBuf,
}

/// A claim this oomguard holds; its file is removed when it is dropped.
#[derive(Debug)]
pub struct Claim {
    path: PathBuf,
    pub record: ClaimRecord,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Place {
    /// The shared place where it can be trusted (made here when running as root), else
    /// `own_dir` (the user's, made 0700), with one line saying that claims then reach only the
    /// user's own oomguards. `None` where neither can be used.
    pub fn find(own_dir: Option<PathBuf>) -> (Option<Place>, Option<String>) {
        let shared = Path::new(SHARED_DIR);
        if nix::unistd::geteuid().is_root() {
            // `/run` is root's: nobody else can have made it first. One that exists is left as
            // its admin made it (a mode other than 1777 keeps claims per user).
            if std::fs::DirBuilder::new()
                .mode(0o700)
                .create(shared)
                .is_ok()
            {
                let _ = std::fs::set_permissions(shared, std::fs::Permissions::from_mode(0o1777));
            }
        }
        if trusted_shared(shared) {
            return (
                Some(Place {
                    dir: shared.to_path_buf(),
                }),
                None,
            );
        }
        let note = format!(
            "GPU room claims reach only your own oomguards: {SHARED_DIR} is missing or not root's with mode 1777 \
             (an oomguard run as root, or packaging/tmpfiles.d/oomguard.conf, makes it)"
        );
        let own = own_dir.filter(|dir| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .is_ok()
        });
        (own.map(|dir| Place { dir }), Some(note))
    }

    /// A place at `dir`, for tests.
    #[cfg(test)]
    pub fn at(dir: &Path) -> Place {
        Place {
            dir: dir.to_path_buf(),
        }
    }

    /// The live claims of other oomguards on the card `device` (UUID `uuid`), oldest first.
    pub fn others(&self, device: u32, uuid: Option<&str>) -> Vec<ClaimRecord> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let me = std::process::id();
        let now_ms = now_ms();
        let mut live: Vec<ClaimRecord> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| read_claim(&e.path()))
            .filter(|c| c.process.pid != me)
            .filter(|c| match (c.uuid.as_deref(), uuid) {
                (Some(theirs), Some(ours)) => theirs == ours,
                _ => c.device == device,
            })
            .filter(|c| {
                let age_ms = now_ms.saturating_sub(c.at_ms);
                // A claim dated far in the future would never age: it does not count.
                age_ms <= CLAIM_MAX_AGE.as_millis() as u64 && c.at_ms <= now_ms + 60_000
            })
            .filter(|c| liveness::liveness(&c.process) == Liveness::Alive && owner_runs(c))
            .collect();
        live.sort_by_key(|c| (c.at_ms, c.process.pid));
        live
    }

    /// Claims `bytes` on the card `device` (UUID `uuid`) for this oomguard, written whole before
    /// it is visible.
    pub fn claim(&self, device: u32, uuid: Option<&str>, bytes: u64) -> io::Result<Claim> {
        let me = ProcessId::current();
        let record = ClaimRecord {
            uid: nix::unistd::getuid().as_raw(),
            process: me,
            device,
            uuid: uuid.map(String::from),
            bytes,
            at_ms: now_ms(),
        };
        let name = format!(
            "{}-{}-{device}-{:016x}.json",
            record.uid,
            record.process.pid,
            crate::guard::fsutil::random_u64()?
        );
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)?;
        let written = file
            .write_all(&serde_json::to_vec(&record).map_err(io::Error::other)?)
            .and_then(|()| {
                crate::guard::fsutil::renameat2(
                    None,
                    tmp.as_os_str(),
                    None,
                    path.as_os_str(),
                    nix::fcntl::RenameFlags::RENAME_NOREPLACE,
                )
                .map_err(io::Error::from)
            });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(Claim { path, record })
    }
}

/// For `oomguard doctor`: whether claims reach every user's oomguards here.
pub fn shared_finding() -> String {
    let dir = Path::new(SHARED_DIR);
    if trusted_shared(dir) {
        format!("{SHARED_DIR}: room claims reach every user's oomguards")
    } else if dir.exists() {
        format!("{SHARED_DIR} is not root's with mode 1777: it is not trusted, and claims reach only each user's own oomguards")
    } else {
        format!("{SHARED_DIR} missing (an oomguard run as root, or packaging/tmpfiles.d/oomguard.conf, makes it): claims reach only each user's own oomguards")
    }
}

/// Root's, a directory (not a link to one), sticky and writable by all.
fn trusted_shared(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == 0 && m.mode() & 0o7777 == 0o1777)
}

/// A claim file read once, through one open that follows no link, refused unless it is a small
/// regular file whose owner is the UID it names.
fn read_claim(path: &Path) -> Option<ClaimRecord> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() || meta.len() > CLAIM_FILE_MAX_BYTES {
        return None;
    }
    let bytes = crate::guard::fsutil::read_capped(file, CLAIM_FILE_MAX_BYTES).ok()?;
    let record: ClaimRecord = serde_json::from_slice(&bytes).ok()?;
    (meta.uid() == record.uid).then_some(record)
}

/// Whether the claiming process runs as the claim's UID (a user cannot lend their claim the
/// life of someone else's process).
fn owner_runs(claim: &ClaimRecord) -> bool {
    std::fs::metadata(format!("/proc/{}", claim.process.pid)).is_ok_and(|m| m.uid() == claim.uid)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_seen_by_others_in_order_and_gone_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place::at(dir.path());
        let claim = place.claim(0, None, 5 << 30).unwrap();
        // Our own claim is not another's.
        assert!(place.others(0, None).is_empty());
        let path = claim.path.clone();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(&format!(
                "{}-{}-0-",
                claim.record.uid, claim.record.process.pid
            )),
            "{name}"
        );
        assert!(path.is_file());
        // As another oomguard (PID 1, alive, root's... when we are root) would read it: the
        // record parses, and the file's owner is its UID.
        assert_eq!(read_claim(&path), Some(claim.record.clone()));
        drop(claim);
        assert!(!path.exists());
    }

    /// In a sticky directory every user writes, a file another user made first under the names
    /// an oomguard would use (the claim's, its temporary file's) cannot be removed by that
    /// oomguard: it still claims, under a name nobody could guess.
    #[test]
    fn a_claim_name_taken_first_by_another_user_never_stops_a_claim() {
        use crate::guard::principal::{as_recorded, RunAs};
        use nix::unistd::{Gid, Uid};
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED a_claim_name_taken_first_by_another_user_never_stops_a_claim: not root (two users needed)");
            return;
        }
        let user = |uid: u32, name: &str| RunAs {
            name: name.into(),
            uid: Uid::from_raw(uid),
            gid: Gid::from_raw(uid),
            groups: vec![Gid::from_raw(uid)],
            home: "/nonexistent".into(),
        };
        let (squatter, claimer) = (user(65534, "nobody"), user(64999, "claimer"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let place = Place::at(dir.path());
        // The names this oomguard's claim on card 0 would have had, taken by the squatter.
        let old = format!("{}-{}-0.json", nix::unistd::getuid(), std::process::id());
        as_recorded(Some(&squatter), || {
            for name in [old.clone(), format!(".{old}.tmp")] {
                std::fs::write(dir.path().join(name), "{}")?;
            }
            Ok(())
        })
        .unwrap();
        let claim = as_recorded(Some(&claimer), || place.claim(0, None, 5 << 30))
            .expect("the claim is made beside the squatter's files");
        assert!(claim.path.is_file());
        assert_eq!(
            std::fs::read_to_string(dir.path().join(&old)).unwrap(),
            "{}"
        );
        let path = claim.path.clone();
        drop(claim);
        assert!(!path.exists(), "withdrawn");
    }

    #[test]
    fn forged_dead_stale_and_misowned_claims_do_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place::at(dir.path());
        let uid = nix::unistd::getuid().as_raw();
        let write = |name: &str, record: &ClaimRecord| {
            std::fs::write(dir.path().join(name), serde_json::to_vec(record).unwrap()).unwrap();
        };
        // A live process of ours other than this one: the test's parent cannot be relied on,
        // so a child we spawn and keep.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut live = ProcessId::current();
        live.pid = child.id();
        live.pid_start_ticks = std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
            .ok()
            .and_then(|s| {
                crate::guard::liveness::stat_fields(&s)
                    .get(19)
                    .and_then(|t| t.parse().ok())
            });
        let good = ClaimRecord {
            process: live.clone(),
            uid,
            device: 0,
            uuid: None,
            bytes: 10 << 30,
            at_ms: now_ms(),
        };
        write("good.json", &good);
        let mut dead = good.clone();
        dead.process.pid_start_ticks = good.process.pid_start_ticks.map(|t| t + 1);
        write("reused-pid.json", &dead);
        let mut stale = good.clone();
        stale.at_ms -= CLAIM_MAX_AGE.as_millis() as u64 + 1;
        write("stale.json", &stale);
        let mut future = good.clone();
        future.at_ms += 3_600_000;
        write("future.json", &future);
        let mut other_uid = good.clone();
        other_uid.uid = uid + 1;
        write("not-its-owner.json", &other_uid);
        std::fs::write(dir.path().join("big.json"), vec![b' '; 5000]).unwrap();
        std::os::unix::fs::symlink(dir.path().join("good.json"), dir.path().join("link.json"))
            .unwrap();
        let mut other_card = good.clone();
        other_card.device = 1;
        write("card1.json", &other_card);

        assert_eq!(place.others(0, None), vec![good.clone()]);
        assert_eq!(place.others(1, None), vec![other_card]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(place.others(0, None).is_empty(), "its process is gone");
    }

    #[test]
    fn claims_are_ordered_by_time_then_pid() {
        let mut a = ClaimRecord {
            process: ProcessId::current(),
            uid: 0,
            device: 0,
            uuid: None,
            bytes: 1,
            at_ms: 100,
        };
        let mut b = a.clone();
        b.at_ms = 101;
        assert!(a.before(&b) && !b.before(&a));
        b.at_ms = 100;
        a.process.pid = 5;
        b.process.pid = 6;
        assert!(a.before(&b) && !b.before(&a));
    }

    #[test]
    fn only_roots_sticky_directory_is_shared() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("claims");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let root = nix::unistd::geteuid().is_root();
        assert_eq!(
            trusted_shared(&d),
            root,
            "ours: trusted only when we are root"
        );
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            !trusted_shared(&d),
            "not sticky: anyone could remove a claim"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(!trusted_shared(&link));
    }
}
