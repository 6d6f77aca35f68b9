//! The `__pycache__` files an edit of a `.py` file makes stale: Python trusts a cache whose
//! recorded size and whole-second mtime still match, so a same-length edit within the second
//! is not seen unless the cache is removed (see the module doc of [`super`]). It only names the
//! files; removing them after each write is the caller's.

use std::path::{Path, PathBuf};

/// The `__pycache__/<stem>.*.pyc` files beside `py_path` (e.g. `config.cpython-312.pyc`,
/// `config.cpython-312.opt-1.pyc`) that a caller must remove after editing or restoring
/// `py_path`, so Python recompiles from the edited source instead of trusting a cache whose
/// size-and-second check cannot see the edit (see the module doc). Sorted; empty when there is
/// no cache directory or it cannot be read.
pub fn stale_pyc_paths(py_path: &Path) -> Vec<PathBuf> {
    let Some(stem) = py_path.file_stem().and_then(|s| s.to_str()) else {
        return Vec::new();
    };
    let dir = match py_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join("__pycache__"),
        _ => PathBuf::from("__pycache__"),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let prefix = format!("{stem}.");
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name().to_str().is_some_and(|name| {
                // `<stem>.<tag>[.opt-N].pyc`: a module name holds no dot, so `<stem>.` cannot
                // be the start of another module's cache file.
                name.len() > prefix.len() + ".pyc".len()
                    && name.starts_with(&prefix)
                    && name.ends_with(".pyc")
            })
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::file::{set, Format, Scalar};

    fn int(n: i64) -> Scalar {
        Scalar::Int(n)
    }

    #[test]
    fn stale_pyc_paths_lists_only_this_modules_cache() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let cache = dir.path().join("__pycache__");
        std::fs::create_dir(&cache).expect("cache dir");
        for name in [
            "config.cpython-312.pyc",
            "config.cpython-312.opt-1.pyc",
            "config.pypy310.pyc",
            "config_extra.cpython-312.pyc",
            "configs.cpython-312.pyc",
            "train.cpython-312.pyc",
            "config.cpython-312.pyc.tmp",
            "config.pyc",
        ] {
            std::fs::write(cache.join(name), b"").expect("cache file");
        }
        let py = dir.path().join("config.py");
        std::fs::write(&py, "BATCH = 8\n").expect("source");
        let want: Vec<PathBuf> = [
            "config.cpython-312.opt-1.pyc",
            "config.cpython-312.pyc",
            "config.pypy310.pyc",
        ]
        .iter()
        .map(|n| cache.join(n))
        .collect();
        assert_eq!(stale_pyc_paths(&py), want);
        // No cache directory, or a module without one: nothing to remove.
        assert!(stale_pyc_paths(&dir.path().join("other.py")).is_empty());
        let bare = tempfile::tempdir().expect("a temp dir");
        assert!(stale_pyc_paths(&bare.path().join("config.py")).is_empty());
    }

    /// The trap itself, with real Python: a same-length edit within the same second is not
    /// seen through the cache; removing [`stale_pyc_paths`] makes it seen.
    #[test]
    fn stale_pyc_removal_makes_python_see_a_same_second_edit() {
        let probe = std::process::Command::new("python3")
            .arg("-c")
            .arg("pass")
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            println!("SKIPPED stale_pyc_removal_makes_python_see_a_same_second_edit: no python3");
            return;
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let py = dir.path().join("config.py");
        let import = || {
            let out = std::process::Command::new("python3")
                .args(["-c", "import config; print(config.BATCH)"])
                .current_dir(dir.path())
                .env_remove("PYTHONDONTWRITEBYTECODE")
                .env_remove("PYTHONPYCACHEPREFIX")
                .output()
                .expect("python3 runs");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let text = "BATCH = 8\n";
        std::fs::write(&py, text).expect("source");
        let mtime = std::fs::metadata(&py)
            .and_then(|m| m.modified())
            .expect("mtime");
        assert_eq!(import(), "8");
        assert!(!stale_pyc_paths(&py).is_empty(), "python wrote its cache");

        let edited = set(Format::Python, text, "BATCH", &int(4)).expect("editable");
        std::fs::write(&py, &edited).expect("edit");
        // Pin the edit into the same second as the cached source, as a fast edit would land.
        let file = std::fs::File::options()
            .write(true)
            .open(&py)
            .expect("open");
        file.set_modified(mtime).expect("set mtime");
        drop(file);
        assert_eq!(import(), "8", "the trap: the cache hides the edit");

        for stale in stale_pyc_paths(&py) {
            std::fs::remove_file(stale).expect("remove stale pyc");
        }
        assert_eq!(import(), "4");
    }
}
