//! `oomguard install-units`: puts the systemd units (`oomguard@.service`, for the system or for
//! `systemctl --user`) where systemd reads an admin's or a user's own units, for those who
//! installed oomguard without the Debian package (pip, uv, pipx, cargo), whose installs carry no
//! files outside the binary. The units are the repository's `systemd/` files, built into the
//! binary (`include_str!`), so they always match the oomguard that writes them.
//!
//! The unit runs `oomguard` by its bare name, found on systemd's search path. An oomguard
//! installed elsewhere (a virtual environment's bin/) would not be found, so beside the unit a
//! drop-in (`oomguard@.service.d/exec-start.conf`) then names this binary's full path. A file
//! already in place is left alone when it is the same, and replaced only with `--force` when it
//! differs: it may be the admin's own edit. Files are written whole (a temporary file renamed
//! over) with mode 0644. Enabling anything is left to the admin: the command prints what to run.
//! It reads no command line (the caller passes plain values) and prints nothing itself;
//! the write-then-rename is [`crate::guard::fsutil`]'s.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::guard::fsutil;

/// The system unit, as the Debian package installs it.
pub const SYSTEM_UNIT: &str = include_str!("../../systemd/oomguard@.service");
/// The unit for `systemctl --user`.
pub const USER_UNIT: &str = include_str!("../../systemd/user/oomguard@.service");
/// Both units' file name: a template, one instance per job file (`oomguard@NAME`).
pub const UNIT_NAME: &str = "oomguard@.service";
/// The drop-in that names this binary's full path when systemd would not find it.
pub const DROP_IN: &str = "oomguard@.service.d/exec-start.conf";

/// Where systemd's system manager looks for a bare `ExecStart=` name (systemd.service(5),
/// "Command lines": the fixed search path, no `ExecSearchPath=` in the system unit).
const SYSTEM_SEARCH_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Which manager the unit is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The system manager (root): /etc/systemd/system.
    System,
    /// The user's own manager (`systemctl --user`): ~/.config/systemd/user.
    User,
}

impl Scope {
    fn unit(self) -> &'static str {
        match self {
            Scope::System => SYSTEM_UNIT,
            Scope::User => USER_UNIT,
        }
    }

    /// `systemctl` or `systemctl --user`, for the lines printed after.
    fn systemctl(self) -> &'static str {
        match self {
            Scope::System => "systemctl",
            Scope::User => "systemctl --user",
        }
    }
}

/// What the install needs to know about its surroundings, passed in so that tests choose it.
#[derive(Debug, Clone)]
pub struct Place {
    pub scope: Scope,
    /// `--dir`, else the scope's own directory.
    pub dir: Option<PathBuf>,
    /// $HOME (the user unit's `%h`, and its default directory).
    pub home: Option<PathBuf>,
    /// $XDG_CONFIG_HOME, where set (the user unit's default directory's parent).
    pub xdg_config_home: Option<PathBuf>,
    /// This oomguard's own path (`std::env::current_exe`).
    pub exe: PathBuf,
    /// The install runs as root: a system unit then runs `exe` as root, so it must be a file
    /// only root could change ([`check_exe`]).
    pub as_root: bool,
}

/// One file of the install and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub action: Action,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// It was not there.
    Created,
    /// It was there with the same bytes: nothing written.
    Unchanged,
    /// It was there and different, and `--force` replaced it.
    Replaced,
}

/// Why nothing (or not everything) was installed; `oomguard install-units` exits
/// [`crate::error::EXIT_CANT_CREATE`] with this as its one line.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{} exists and differs from this oomguard's; nothing replaced (--force replaces it)", path.display())]
    Differs { path: PathBuf },
    #[error("cannot write {}: {source}{hint}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
        /// What to do about it: a system unit written by a user who is not root.
        hint: &'static str,
    },
    #[error("no home directory ($HOME is not set): give the directory with --dir")]
    NoHome,
    #[error("refusing to install the system unit for {}: {why} change the program systemd runs as root at every start of an oomguard@ unit; copy it to /usr/local/bin (install -m 0755 {} /usr/local/bin/oomguard) and run /usr/local/bin/oomguard install-units, or install the .deb", exe.display(), exe.display())]
    NotRootsAlone {
        exe: PathBuf,
        /// Who could change it, and how ([`crate::guard::ownership::changeable_by_others`]).
        why: String,
    },
    #[error("cannot check who could change {}: {source}; install oomguard in /usr/local/bin (or the .deb) and run it from there", exe.display())]
    Unchecked {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("this oomguard's path {} cannot be written in a unit (it holds `$` or a control character): install oomguard where systemd finds it (/usr/local/bin)", .0.display())]
    Unnameable(PathBuf),
}

/// The directory the unit goes into: `--dir`, else /etc/systemd/system or the user's
/// $XDG_CONFIG_HOME/systemd/user (~/.config/systemd/user), where systemd reads an admin's units.
pub fn unit_dir(place: &Place) -> Result<PathBuf, InstallError> {
    if let Some(dir) = &place.dir {
        return Ok(dir.clone());
    }
    match place.scope {
        Scope::System => Ok(PathBuf::from("/etc/systemd/system")),
        Scope::User => {
            let config = match (&place.xdg_config_home, &place.home) {
                (Some(xdg), _) if xdg.is_absolute() => xdg.clone(),
                (_, Some(home)) => home.join(".config"),
                _ => return Err(InstallError::NoHome),
            };
            Ok(config.join("systemd/user"))
        }
    }
}

/// The files to write: the unit, and the drop-in when systemd would not find this binary.
pub fn files(place: &Place) -> Result<Vec<(PathBuf, String)>, InstallError> {
    let dir = unit_dir(place)?;
    let unit = place.scope.unit();
    let mut files = vec![(dir.join(UNIT_NAME), unit.to_string())];
    if !found_by_unit(place, unit) {
        files.push((dir.join(DROP_IN), drop_in(unit, &place.exe)?));
    }
    Ok(files)
}

/// Writes the unit (and drop-in) as [`files`] says; all are checked before any is written, so a
/// refusal leaves everything as it was.
pub fn install(place: &Place, force: bool) -> Result<Vec<Written>, InstallError> {
    check_exe(place)?;
    let files = files(place)?;
    let mut plan = Vec::new();
    for (path, text) in files {
        let action = match std::fs::read(&path) {
            Ok(old) if old == text.as_bytes() => Action::Unchanged,
            Ok(_) if !force => return Err(InstallError::Differs { path }),
            Ok(_) => Action::Replaced,
            // A dangling symlink, or one to /dev/null (a masked unit): `read` fails, yet a
            // file is in the way; only --force replaces the link.
            Err(_) if path.symlink_metadata().is_ok() && !force => {
                return Err(InstallError::Differs { path })
            }
            Err(_) if path.symlink_metadata().is_ok() => Action::Replaced,
            Err(_) => Action::Created,
        };
        plan.push((path, text, action));
    }
    let mut done = Vec::new();
    for (path, text, action) in plan {
        if action != Action::Unchanged {
            write_whole(&path, text.as_bytes()).map_err(|source| InstallError::Write {
                hint: permission_hint(place.scope, &source),
                path: path.clone(),
                source,
            })?;
        }
        done.push(Written { path, action });
    }
    Ok(done)
}

/// Refuses a system unit, installed as root, for a binary that anyone but root could change: the
/// file itself or a directory above it (a user's virtual environment, a group-writable conda env).
/// The unit, or its drop-in naming the binary's path, would have systemd run whatever is there as
/// root at every start and restart of every `oomguard@` unit, for good. The rule is a job file's
/// ([`crate::guard::ownership::changeable_by_others`]); a user unit is its user's own business.
fn check_exe(place: &Place) -> Result<(), InstallError> {
    if place.scope != Scope::System || !place.as_root {
        return Ok(());
    }
    match crate::guard::ownership::changeable_by_others(&place.exe) {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(InstallError::NotRootsAlone {
            exe: place.exe.clone(),
            why,
        }),
        Err(source) => Err(InstallError::Unchecked {
            exe: place.exe.clone(),
            source,
        }),
    }
}

/// What to run next, for the lines printed after the install.
pub fn next_steps(scope: Scope, written: &[Written]) -> String {
    let mut text = String::new();
    for w in written {
        let what = match w.action {
            Action::Created => "wrote",
            Action::Replaced => "replaced",
            Action::Unchanged => "already in place",
        };
        text.push_str(&format!("{what}: {}\n", w.path.display()));
    }
    let systemctl = scope.systemctl();
    let jobs = match scope {
        Scope::System => "/etc/oomguard/NAME.toml, writable by root only",
        Scope::User => "~/.config/oomguard/NAME.toml",
    };
    text.push_str(&format!(
        "next: one job file per job, {jobs} (README.md, \"Running unattended\"), then\n    \
         {systemctl} daemon-reload\n    \
         {systemctl} enable --now oomguard@NAME\n"
    ));
    if scope == Scope::User {
        text.push_str(
            "    loginctl enable-linger \"$USER\"   # keep it running after you log out\n",
        );
    }
    text
}

/// Whether the unit's bare `oomguard` resolves to this binary: its directory is on the system
/// manager's search path, or on the user unit's `ExecSearchPath=` (`%h` is $HOME).
fn found_by_unit(place: &Place, unit: &str) -> bool {
    let Some(dir) = place.exe.parent() else {
        return false;
    };
    let search: Vec<PathBuf> = match unit.lines().find_map(|l| l.strip_prefix("ExecSearchPath=")) {
        Some(list) => list
            .split(':')
            .filter_map(|p| match (p.strip_prefix("%h"), &place.home) {
                (Some(rest), Some(home)) => Some(home.join(rest.trim_start_matches('/'))),
                (Some(_), None) => None,
                (None, _) => Some(PathBuf::from(p)),
            })
            .collect(),
        None => SYSTEM_SEARCH_PATH.iter().map(PathBuf::from).collect(),
    };
    // The first directory holding an `oomguard` wins, as systemd searches: a /usr/bin/oomguard
    // from the Debian package would shadow this one.
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    match search.iter().find(|d| d.join("oomguard").is_file()) {
        Some(first) => same(first, dir),
        None => false,
    }
}

/// The drop-in: `ExecStart=` emptied, then the unit's own command with this binary's full path.
fn drop_in(unit: &str, exe: &Path) -> Result<String, InstallError> {
    let text = exe
        .to_str()
        .filter(|t| !t.chars().any(|c| c == '$' || c.is_control()));
    let Some(text) = text else {
        return Err(InstallError::Unnameable(exe.to_path_buf()));
    };
    // systemd.service(5): `%` starts a specifier, so `%%`; quoted, C escapes for `\` and `"`.
    let mut named = text.replace('%', "%%");
    if named.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '\\') {
        named = format!("\"{}\"", named.replace('\\', "\\\\").replace('"', "\\\""));
    }
    let command = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=oomguard "))
        .expect("both units start `ExecStart=oomguard run ...`");
    Ok(format!(
        "# Written by `oomguard install-units`: the oomguard it ran as is installed where systemd\n\
         # does not look for a bare `oomguard` (a virtual environment's bin/, for one), so the\n\
         # unit runs it by its full path. `oomguard install-units --force` run from another\n\
         # install points it there.\n\
         [Service]\nExecStart=\nExecStart={named} {command}\n"
    ))
}

/// A system unit written without root: say how, rather than leave a bare EACCES.
fn permission_hint(scope: Scope, e: &std::io::Error) -> &'static str {
    match (scope, e.kind()) {
        (Scope::System, std::io::ErrorKind::PermissionDenied) => {
            " (the system unit needs root; --user installs yours)"
        }
        _ => "",
    }
}

/// Writes `bytes` to `path` as a whole: a temporary file beside it (its directory made if
/// missing), mode 0644 whatever the umask (units are read by root and by each user's manager),
/// synced, then renamed over, so no reader ever sees half a unit.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().expect("unit paths are DIR/NAME");
    let name = path
        .file_name()
        .expect("unit paths are DIR/NAME")
        .to_string_lossy();
    std::fs::create_dir_all(dir)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true).mode(0o644);
    let (temp, file) = fsutil::create_new_numbered(&options, |n| {
        dir.join(format!(".{name}.oomguard-install.{n}"))
    })?;
    if let Err(e) = file.set_permissions(std::fs::Permissions::from_mode(0o644)) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    fsutil::write_then_rename(file, &temp, path, bytes, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(dir: &Path, scope: Scope, exe: &Path) -> Place {
        Place {
            scope,
            dir: Some(dir.to_path_buf()),
            home: Some(PathBuf::from("/home/ada")),
            xdg_config_home: None,
            exe: exe.to_path_buf(),
            as_root: false,
        }
    }

    #[test]
    fn writes_the_unit_0644_and_a_drop_in_naming_a_binary_systemd_would_not_find() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("units");
        let exe = Path::new("/opt/venv 1/bin/oomguard");
        let written = install(&place(&dir, Scope::System, exe), false).expect("install");
        assert_eq!(
            written,
            vec![
                Written {
                    path: dir.join(UNIT_NAME),
                    action: Action::Created
                },
                Written {
                    path: dir.join(DROP_IN),
                    action: Action::Created
                },
            ]
        );
        let unit = std::fs::read_to_string(dir.join(UNIT_NAME)).expect("unit");
        assert_eq!(unit, SYSTEM_UNIT);
        let mode = std::fs::metadata(dir.join(UNIT_NAME))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        let drop = std::fs::read_to_string(dir.join(DROP_IN)).expect("drop-in");
        assert!(
            drop.contains(
                "\nExecStart=\nExecStart=\"/opt/venv 1/bin/oomguard\" run --config /etc/oomguard/%i.toml\n"
            ),
            "{drop}"
        );
        // No temporary file left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn identical_files_are_left_alone_and_a_different_one_only_replaced_with_force() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let exe = Path::new("/opt/venv/bin/oomguard");
        let p = place(tmp.path(), Scope::User, exe);
        install(&p, false).expect("first");
        let unit = tmp.path().join(UNIT_NAME);
        let before = std::fs::metadata(&unit)
            .expect("meta")
            .modified()
            .expect("mtime");
        let again = install(&p, false).expect("second");
        assert!(
            again.iter().all(|w| w.action == Action::Unchanged),
            "{again:?}"
        );
        assert_eq!(
            std::fs::metadata(&unit)
                .expect("meta")
                .modified()
                .expect("mtime"),
            before
        );

        std::fs::write(&unit, "[Service]\nExecStart=/bin/true\n").expect("edit");
        let err = install(&p, false).expect_err("a different file is in the way");
        assert!(
            matches!(&err, InstallError::Differs { path } if *path == unit),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(&unit).expect("unit"),
            "[Service]\nExecStart=/bin/true\n",
            "refused, and nothing replaced"
        );
        let forced = install(&p, true).expect("--force");
        assert_eq!(forced[0].action, Action::Replaced);
        assert_eq!(std::fs::read_to_string(&unit).expect("unit"), USER_UNIT);
    }

    #[test]
    fn a_masked_unit_is_a_file_in_the_way() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let unit = tmp.path().join(UNIT_NAME);
        std::os::unix::fs::symlink("/dev/null", &unit).expect("mask");
        let p = place(tmp.path(), Scope::System, Path::new("/usr/bin/oomguard"));
        assert!(matches!(
            install(&p, false),
            Err(InstallError::Differs { .. })
        ));
        install(&p, true).expect("--force");
        assert!(!unit
            .symlink_metadata()
            .expect("meta")
            .file_type()
            .is_symlink());
    }

    /// As root, the system unit is refused for a binary another user (or a group) could change,
    /// naming who and which path, before anything is written; the user unit is not.
    #[test]
    fn a_system_unit_as_root_needs_a_binary_only_root_can_change() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED a_system_unit_as_root_needs_a_binary_only_root_can_change: not root (chown needs it)");
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
        };
        mode(tmp.path(), 0o755);
        // (directory, its mode, its owner, the refusal's words; None: installed)
        let table: &[(&str, u32, u32, Option<&str>)] = &[
            ("root", 0o755, 0, None),
            ("venv", 0o755, 65534, Some("this directory above it is owned by uid 65534, so user nobody could")),
            ("conda", 0o775, 0, Some("this directory above it is group-writable (mode 775), so the members of group root could")),
            ("open", 0o777, 0, Some("is world-writable (mode 777), so every user could")),
        ];
        for &(name, dir_mode, owner, want) in table {
            let bin = tmp.path().join(name).join("bin");
            std::fs::create_dir_all(&bin).expect("mkdir");
            let exe = bin.join("oomguard");
            std::fs::write(&exe, "").expect("binary");
            mode(&exe, 0o755);
            mode(&bin, dir_mode);
            std::os::unix::fs::chown(&bin, Some(owner), None).expect("chown");
            let units = tmp.path().join(format!("units-{name}"));
            let mut p = place(&units, Scope::System, &exe);
            p.as_root = true;
            match (install(&p, false), want) {
                (Ok(_), None) => {}
                (Err(e), Some(words)) => {
                    let line = e.to_string();
                    assert!(matches!(e, InstallError::NotRootsAlone { .. }), "{line}");
                    assert!(line.contains(words), "{name}: {line}");
                    assert!(line.contains(&bin.display().to_string()), "{line}");
                    assert!(
                        line.contains("/usr/local/bin") && line.contains(".deb"),
                        "{line}"
                    );
                    assert!(!line.contains('\n'), "{line}");
                    assert!(!units.exists(), "{name}: something was written");
                    // The user's own unit is theirs to point at their own binary.
                    p.scope = Scope::User;
                    install(&p, false).expect("--user");
                }
                (got, _) => panic!("{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_binary_on_the_units_search_path_needs_no_drop_in() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = tmp.path().join("home");
        let bin = home.join(".local/bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::write(bin.join("oomguard"), "").expect("binary");
        let mut p = place(
            &tmp.path().join("units"),
            Scope::User,
            &bin.join("oomguard"),
        );
        p.home = Some(home.clone());
        let paths: Vec<_> = files(&p).expect("files").into_iter().map(|f| f.0).collect();
        assert_eq!(paths, vec![tmp.path().join("units").join(UNIT_NAME)]);
        // ...but the same binary run for the system unit is not on systemd's fixed path.
        p.scope = Scope::System;
        assert_eq!(files(&p).expect("files").len(), 2);
        // ...and an oomguard earlier on the user's search path shadows it.
        let cargo_bin = home.join(".cargo/bin");
        std::fs::create_dir_all(&cargo_bin).expect("mkdir");
        std::fs::write(cargo_bin.join("oomguard"), "").expect("binary");
        p.scope = Scope::User;
        assert_eq!(files(&p).expect("files").len(), 2);
    }

    #[test]
    fn default_directories_are_where_systemd_reads_an_admins_and_a_users_units() {
        let mut p = place(
            Path::new("/x"),
            Scope::System,
            Path::new("/usr/bin/oomguard"),
        );
        p.dir = None;
        assert_eq!(
            unit_dir(&p).expect("dir"),
            PathBuf::from("/etc/systemd/system")
        );
        p.scope = Scope::User;
        assert_eq!(
            unit_dir(&p).expect("dir"),
            PathBuf::from("/home/ada/.config/systemd/user")
        );
        p.xdg_config_home = Some(PathBuf::from("/cfg"));
        assert_eq!(
            unit_dir(&p).expect("dir"),
            PathBuf::from("/cfg/systemd/user")
        );
        // A relative XDG_CONFIG_HOME is invalid (XDG Base Directory spec): ignored.
        p.xdg_config_home = Some(PathBuf::from("cfg"));
        assert_eq!(
            unit_dir(&p).expect("dir"),
            PathBuf::from("/home/ada/.config/systemd/user")
        );
        p.home = None;
        assert!(matches!(unit_dir(&p), Err(InstallError::NoHome)));
    }

    #[test]
    fn a_path_systemd_would_expand_is_refused_and_percent_is_escaped() {
        let unit = SYSTEM_UNIT;
        assert!(matches!(
            drop_in(unit, Path::new("/opt/$HOME/bin/oomguard")),
            Err(InstallError::Unnameable(_))
        ));
        let text = drop_in(unit, Path::new("/opt/50%/bin/oomguard")).expect("drop-in");
        assert!(
            text.contains("ExecStart=/opt/50%%/bin/oomguard run "),
            "{text}"
        );
    }

    #[test]
    fn a_write_that_fails_names_the_file_and_a_denied_system_unit_says_it_needs_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // A file where the directory should be: fails for root too (ENOTDIR, not a permission).
        let blocker = tmp.path().join("not-a-dir");
        std::fs::write(&blocker, "").expect("file");
        let p = place(&blocker, Scope::User, Path::new("/usr/bin/oomguard"));
        let err = install(&p, false).expect_err("cannot make a directory under a file");
        let line = err.to_string();
        assert!(
            line.starts_with(&format!(
                "cannot write {}",
                blocker.join(UNIT_NAME).display()
            )),
            "{line}"
        );
        assert!(!line.contains("needs root"), "{line}");
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(
            permission_hint(Scope::System, &denied).contains("needs root; --user installs yours")
        );
        assert_eq!(permission_hint(Scope::User, &denied), "");
    }
}
