//! `oomguard install-units` as an admin who installed by pip runs it: the real binary writes the
//! units into a directory, systemd's own `systemd-analyze verify` loads them with the drop-in
//! that names this binary (which is on no search path systemd knows), a second run changes
//! nothing, and a unit the admin edited is refused with one line and exit 73 until `--force`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::util::{self, stderr_of, Sandbox};

const EXIT_CANT_CREATE: i32 = 73;

fn repo_unit(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("systemd")
            .join(path),
    )
    .expect("the repository's unit")
}

/// `oomguard install-units ARGS` with HOME (and nothing of the caller's XDG_CONFIG_HOME) in the
/// sandbox, so `--user`'s default directory is the sandbox's.
fn install(sb: &Sandbox, args: &[&str]) -> Output {
    let mut cmd = sb.oomguard(&["install-units"]);
    cmd.args(args)
        .env("HOME", sb.path("home"))
        .env_remove("XDG_CONFIG_HOME");
    cmd.output().expect("oomguard runs")
}

/// `systemd-analyze verify` of one written unit, offline (see systemd/verify), or `None` where
/// systemd-analyze is not installed.
fn verify(sb: &Sandbox, unit: &Path, user: bool) -> Option<Output> {
    Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .ok()?;
    let runtime = sb.path("runtime");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(if user { "--user" } else { "--system" })
        .args(["--man=no", "--recursive-errors=no"])
        .arg(unit)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("HOME", sb.path("home"))
        .output()
        .expect("systemd-analyze runs");
    Some(out)
}

/// `systemd-analyze verify` loads `unit` (and its drop-ins) with nothing to say; `test` prints
/// SKIPPED where systemd-analyze is not installed.
fn assert_verifies(sb: &Sandbox, unit: &Path, user: bool, test: &str) {
    match verify(sb, unit, user) {
        Some(v) => assert!(
            v.status.success() && v.stdout.is_empty() && v.stderr.is_empty(),
            "{}{}",
            String::from_utf8_lossy(&v.stdout),
            stderr_of(&v)
        ),
        None => println!("SKIPPED {test}: systemd-analyze is not installed (.ci/run installs it)"),
    }
}

#[test]
fn the_system_unit_is_written_with_a_drop_in_systemd_loads_and_a_rerun_changes_nothing() {
    let sb = Sandbox::new();
    let dir = sb.path("units");
    let out = install(&sb, &["--dir", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let unit = dir.join("oomguard@.service");
    let drop_in = dir.join("oomguard@.service.d/exec-start.conf");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains(&format!("wrote: {}\n", unit.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("wrote: {}\n", drop_in.display())),
        "{stdout}"
    );
    assert!(stdout.contains("systemctl daemon-reload"), "{stdout}");
    assert!(
        stdout.contains("systemctl enable --now oomguard@NAME"),
        "{stdout}"
    );

    assert_eq!(
        std::fs::read_to_string(&unit).expect("unit"),
        repo_unit("oomguard@.service")
    );
    for file in [&unit, &drop_in] {
        let mode = std::fs::metadata(file)
            .expect("written")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644, "{}", file.display());
    }
    let text = std::fs::read_to_string(&drop_in).expect("drop-in");
    let exec = format!(
        "\nExecStart=\nExecStart={} run --config /etc/oomguard/%i.toml\n",
        util::bin().canonicalize().expect("binary").display()
    );
    assert!(text.contains(&exec), "{text}");

    // systemd reads the drop-in: the bare `oomguard` of the unit, found nowhere on this
    // machine's search path, is replaced by this binary, so verify has nothing to say.
    assert_verifies(
        &sb,
        &unit,
        false,
        "the_system_unit_is_written_with_a_drop_in_systemd_loads_and_a_rerun_changes_nothing",
    );

    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .expect("meta")
            .modified()
            .expect("mtime")
    };
    let before = (mtime(&unit), mtime(&drop_in));
    let again = install(&sb, &["--dir", dir.to_str().expect("utf-8")]);
    assert!(again.status.success(), "{}", stderr_of(&again));
    let stdout = String::from_utf8_lossy(&again.stdout).into_owned();
    assert!(
        stdout.contains(&format!("already in place: {}\n", unit.display())),
        "{stdout}"
    );
    assert_eq!(
        (mtime(&unit), mtime(&drop_in)),
        before,
        "an identical rerun wrote nothing"
    );
}

#[test]
fn an_edited_unit_is_refused_with_one_line_and_exit_73_until_force() {
    let sb = Sandbox::new();
    let dir = sb.path("units");
    let dir_arg = dir.to_str().expect("utf-8");
    assert!(install(&sb, &["--dir", dir_arg]).status.success());
    let unit = dir.join("oomguard@.service");
    let edited = repo_unit("oomguard@.service").replace("RestartSec=30s", "RestartSec=5min");
    std::fs::write(&unit, &edited).expect("the admin's edit");

    let out = install(&sb, &["--dir", dir_arg]);
    assert_eq!(
        out.status.code(),
        Some(EXIT_CANT_CREATE),
        "{}",
        stderr_of(&out)
    );
    let stderr = stderr_of(&out);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("{} exists and differs", unit.display()))
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&unit).expect("unit"),
        edited,
        "nothing replaced"
    );

    let out = install(&sb, &["--dir", dir_arg, "--force"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains(&format!("replaced: {}\n", unit.display())),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&unit).expect("unit"),
        repo_unit("oomguard@.service")
    );
}

#[test]
fn user_units_go_under_home_for_systemctl_user() {
    let sb = Sandbox::new();
    let out = install(&sb, &["--user"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let unit = sb.path("home/.config/systemd/user/oomguard@.service");
    assert_eq!(
        std::fs::read_to_string(&unit).expect("user unit"),
        repo_unit("user/oomguard@.service")
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("systemctl --user daemon-reload"),
        "{stdout}"
    );
    assert!(stdout.contains("loginctl enable-linger"), "{stdout}");
    let text = std::fs::read_to_string(unit.with_file_name("oomguard@.service.d/exec-start.conf"))
        .expect("drop-in: the test binary is not on the unit's ExecSearchPath");
    assert!(
        text.contains(" run --config %E/oomguard/%i.toml\n"),
        "{text}"
    );
    assert_verifies(
        &sb,
        &unit,
        true,
        "user_units_go_under_home_for_systemctl_user",
    );
}

#[test]
fn a_directory_that_cannot_be_made_is_one_line_and_exit_73() {
    let sb = Sandbox::new();
    // A file where the directory goes: fails for root too.
    let blocker = sb.path("file");
    std::fs::write(&blocker, "").expect("file");
    let out = install(
        &sb,
        &["--dir", blocker.join("units").to_str().expect("utf-8")],
    );
    assert_eq!(
        out.status.code(),
        Some(EXIT_CANT_CREATE),
        "{}",
        stderr_of(&out)
    );
    let stderr = stderr_of(&out);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("oomguard: error: cannot write "),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing claimed written");
}
