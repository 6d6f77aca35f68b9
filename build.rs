//! Build script: names the build for `oomguard --version`. It sets `OOMGUARD_VERSION` to the
//! crate's version followed by the git commit the binary was built from (`0.1.0 (3f2c1ab)`),
//! so that a wheel, a .deb or a `cargo install` can be traced to its source when a user pastes
//! `--version` into a bug report. Where no commit is known (a source tarball without .git, no
//! git installed) it is the bare version, silently: building must never depend on git.
//! A packager building from a tarball may name the commit in `OOMGUARD_BUILD_COMMIT`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    println!("cargo:rerun-if-env-changed=OOMGUARD_BUILD_COMMIT");
    let commit = std::env::var("OOMGUARD_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit);
    let long = match commit {
        Some(commit) => format!("{version} ({})", commit.trim()),
        None => version.to_string(),
    };
    println!("cargo:rustc-env=OOMGUARD_VERSION={long}");
}

/// `git rev-parse --short HEAD` of the checkout being built, or `None` when there is none.
/// Cargo is told to run this script again when HEAD moves (a commit, a checkout), not on every
/// build: HEAD itself, the branch it names, and packed-refs, wherever this checkout keeps them
/// (a worktree's HEAD lives apart from the shared refs, hence `--git-path`).
fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    for file in ["HEAD", "packed-refs"] {
        watch(git(&["rev-parse", "--git-path", file]));
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(git(&["rev-parse", "--git-path", &branch]));
    }
    Some(commit)
}

/// Reruns the build script when `path` (relative to the crate, as git prints it) changes.
fn watch(path: Option<String>) {
    if let Some(path) = path {
        let path = PathBuf::from(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// One line of git's output, or `None` if git is missing, fails, or says nothing. Run in the
/// crate's own directory, so a tarball unpacked inside some other repository does not pick up
/// that repository's commit: git must find this crate's root as its top level.
fn git(args: &[&str]) -> Option<String> {
    let root = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let top = run_git(&root, &["rev-parse", "--show-toplevel"])?;
    if std::fs::canonicalize(&top).ok()? != std::fs::canonicalize(&root).ok()? {
        return None;
    }
    run_git(&root, args)
}

fn run_git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim().to_string();
    (out.status.success() && !line.is_empty()).then_some(line)
}
