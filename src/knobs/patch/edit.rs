//! Writing a claimed file's next text: in place (backup and journal durable first, a file someone
//! else changed meanwhile refused) or into a patched copy beside it (a free name journaled before
//! it is created, never over a file that is there). Claiming the file is [`super::claim`]'s,
//! giving it back [`super::restore`]'s; the bytes go to disk through [`super::replace`].

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use super::acting::{as_theirs, read_if_exists};
use super::claim::Claimed;
use super::journal::{save_journal, write_synced, Journal, JOURNAL_VERSION};
use super::replace::{create_file, remove_stale_pyc, replace_file, xattrs_at};
use super::restore::{decide, Decision};
use super::{io_err, Mode, PatchError};

impl Claimed {
    pub(super) fn write_in_place(
        &mut self,
        text: &str,
        pid: u32,
        run_dir: &Path,
    ) -> Result<(), PatchError> {
        let Some(journal) = &self.journal else {
            if text == self.original {
                return Ok(()); // never patched: it already is as the user has it
            }
            self.check_ours()?;
            // Backup, then journal, each fsynced with the directory, before the file is touched.
            write_synced(&self.entry.backup, self.original.as_bytes())?;
            let journal = Journal {
                version: JOURNAL_VERSION,
                mode: Mode::InPlace,
                path: self.target.clone(),
                backup: Some(self.entry.backup.clone()),
                copy: None,
                owner_pid: pid,
                run_dir: run_dir.to_path_buf(),
                original: self.stat,
                written: vec![text.to_string()],
                acting: self.who.clone(),
                users_entry: false,
            };
            save_journal(&self.entry, &journal)?;
            self.journal = Some(journal);
            return self.put(text.as_bytes(), false, pid);
        };
        let current = self.check_ours()?;
        if current.as_deref() == Some(text.as_bytes()) {
            return Ok(());
        }
        if text == self.original {
            return self.put(self.original.as_bytes(), true, pid);
        }
        if !journal.written.iter().any(|w| w == text) {
            let mut journal = journal.clone();
            journal.written.push(text.to_string());
            save_journal(&self.entry, &journal)?;
            self.journal = Some(journal);
        }
        self.put(text.as_bytes(), false, pid)
    }

    /// The file's bytes now, refused if someone other than us changed it since `open`.
    fn check_ours(&self) -> Result<Option<Vec<u8>>, PatchError> {
        let current = read_if_exists(self.who.as_ref(), &self.target)?;
        let written = self.journal.as_ref().map_or(&[][..], |j| &j.written[..]);
        match decide(current.as_deref(), self.original.as_bytes(), written) {
            Decision::Nothing | Decision::Restore => Ok(current),
            Decision::KeepTheirs | Decision::Deleted => Err(PatchError::EditedMeanwhile {
                path: self.given.clone(),
            }),
        }
    }

    /// Writes `bytes` over the user's file (with the original's times when restoring).
    fn put(&self, bytes: &[u8], original_times: bool, pid: u32) -> Result<(), PatchError> {
        let times = original_times.then_some(&self.stat);
        as_theirs(self.who.as_ref(), || {
            replace_file(&self.target, bytes, &self.stat, times, pid)?;
            remove_stale_pyc(&self.target);
            Ok(())
        })
        .map_err(io_err("write", &self.given))
    }

    pub(super) fn write_copy(
        &mut self,
        text: &str,
        pid: u32,
        run_dir: &Path,
    ) -> Result<PathBuf, PatchError> {
        let mut journal = self.journal.clone().unwrap_or_else(|| Journal {
            version: JOURNAL_VERSION,
            mode: Mode::Copy,
            path: self.target.clone(),
            backup: None,
            copy: None,
            owner_pid: pid,
            run_dir: run_dir.to_path_buf(),
            original: self.stat,
            written: Vec::new(),
            acting: self.who.clone(),
            users_entry: false,
        });
        if !journal.written.iter().any(|w| w == text) {
            journal.written.push(text.to_string());
        }
        if let Some(copy_given) = &self.copy_given {
            if self.journal.as_ref() != Some(&journal) {
                save_journal(&self.entry, &journal)?;
                self.journal = Some(journal);
            }
            let copy = self
                .journal
                .as_ref()
                .and_then(|j| j.copy.clone())
                .expect("a created copy is in the journal");
            as_theirs(self.who.as_ref(), || {
                replace_file(&copy, text.as_bytes(), &self.stat, None, pid)?;
                remove_stale_pyc(&copy);
                Ok(())
            })
            .map_err(io_err("write", copy_given))?;
            return Ok(copy_given.clone());
        }
        // First write: find a free name. Each candidate is journaled before it is created, so a
        // crash leaves nothing unknown; one that exists is someone else's and is never touched
        // (the restore removes a copy only if it holds a text we wrote).
        for n in 1u32..1000 {
            let name = copy_name(&self.target, pid, n);
            let copy = self.target.with_file_name(&name);
            journal.copy = Some(copy.clone());
            save_journal(&self.entry, &journal)?;
            self.journal = Some(journal.clone());
            let created = as_theirs(self.who.as_ref(), || {
                // The copy is read by the same people as the original: its ACL goes with it.
                let attrs = xattrs_at(&self.target)?;
                create_file(&copy, text.as_bytes(), &self.stat, &attrs, pid)?;
                remove_stale_pyc(&copy);
                Ok(())
            });
            match created {
                Ok(()) => {
                    let copy_given = self.given.with_file_name(&name);
                    self.copy_given = Some(copy_given.clone());
                    return Ok(copy_given);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err("create", &copy)(e)),
            }
        }
        Err(PatchError::Io {
            action: "create a copy of",
            path: self.given.clone(),
            source: io::Error::other("every candidate name is taken"),
        })
    }
}

/// `<stem>.oomguard-<pid>.<ext>` (the extension kept: loaders dispatch on it), with `-<n>` after
/// the PID for n > 1.
fn copy_name(target: &Path, pid: u32, n: u32) -> OsString {
    let tag = if n > 1 {
        format!("{pid}-{n}")
    } else {
        pid.to_string()
    };
    crate::knobs::patch_copy_name(target, &tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::patch::replace::temp_path;
    use crate::knobs::patch::scene::{Scene, PATCHED, YAML};
    use crate::knobs::patch::{Mode, Patcher};

    #[test]
    fn copy_names_keep_the_extension() {
        let table = [
            ("/c/default.yaml", 1, "default.oomguard-42.yaml"),
            ("/c/default.yaml", 2, "default.oomguard-42-2.yaml"),
            ("/c/a.b.toml", 1, "a.b.oomguard-42.toml"),
            ("/c/Makefile", 1, "Makefile.oomguard-42"),
        ];
        for (path, n, want) in table {
            assert_eq!(copy_name(Path::new(path), 42, n), OsString::from(want));
        }
        assert_eq!(
            temp_path(Path::new("/c/x.py"), 7),
            PathBuf::from("/c/.x.py.oomguard-7.tmp")
        );
    }

    #[test]
    fn a_taken_copy_name_is_never_overwritten() {
        let s = Scene::new();
        let path = s.file("default.yaml", YAML);
        let taken = s.file(
            &format!("default.oomguard-{}.yaml", std::process::id()),
            "mine\n",
        );
        let mut p = s.open(&[(&path, Mode::Copy)]).unwrap();
        let copy = p.write(0, PATCHED).unwrap().unwrap();
        assert_eq!(
            copy,
            s.configs
                .join(format!("default.oomguard-{}-2.yaml", std::process::id()))
        );
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "mine\n");
        p.finish();
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "mine\n");
        assert!(!copy.exists());
    }

    #[test]
    fn a_relative_path_gets_a_relative_copy_beside_it() {
        // A directory below the working directory (the package root under cargo test), named
        // relative to it: the test must not chdir, threads share the working directory.
        let cwd = std::env::current_dir().unwrap();
        let tmp =
            tempfile::tempdir_in(Path::new(env!("CARGO_MANIFEST_DIR")).join("target")).unwrap();
        let Ok(rel_dir) = tmp.path().strip_prefix(&cwd) else {
            eprintln!("SKIPPED a_relative_path_gets_a_relative_copy_beside_it: cwd is not the package root");
            return;
        };
        std::fs::write(tmp.path().join("default.yaml"), YAML).unwrap();
        let given = rel_dir.join("default.yaml");
        let mut p = Patcher::open(
            &tmp.path().join("state"),
            &tmp.path().join("run"),
            vec![(given.clone(), Mode::Copy)],
        )
        .unwrap();
        let copy = p.write(0, PATCHED).unwrap().unwrap();
        assert!(copy.is_relative(), "{}", copy.display());
        assert_eq!(copy.parent(), given.parent());
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), PATCHED);
        p.finish();
        assert!(!copy.exists());
    }
}
