//! The subcommands that read and print, beside `oomguard run`: `status` (the jobs' table),
//! `classify` (a verdict per file), `report` (a run directory's table, JSON or page), `man` (the
//! pages) and `install-units` (the systemd units written). Each turns its arguments into output on
//! stdout and an exit status; what they print is built by the modules they name
//! ([`crate::tell::status`], [`crate::judge::classify`], [`crate::tell::report`],
//! [`crate::commands::install`], [`crate::front::install_units`]). Nothing here supervises a job.

use std::io::Read;
use std::path::Path;

use crate::error::Error;
use crate::front::cli::{self, ClassifyArgs};
use crate::front::settings::from_args::UsageError;
use crate::output::console::Reporter;
use crate::remember::record;
use crate::{judge::classify, tell::report, tell::status};

pub(crate) mod doctor;
pub(crate) mod install;

/// `oomguard report RUN_DIR`: the table (or `--json`) on stdout, and `--html FILE` written.
pub fn show_report(args: &cli::ReportArgs) -> Result<i32, Error> {
    let run = report::load(&args.run_dir)?;
    if let Some(path) = &args.html {
        std::fs::write(path, run.html()).map_err(|source| Error::Internal {
            action: "cannot write the --html file",
            source,
        })?;
    }
    // What a run directory holds is its user's to write: no control character of theirs
    // reaches the terminal (the table's cells are escaped where they are laid out).
    let mut text = if args.json {
        crate::output::console::json_printable(&run.json()).into_owned()
    } else {
        crate::output::console::printable_lines(&run.text()).into_owned()
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    print_bytes(text.as_bytes())
}

/// `oomguard man`: one page printed, or every page written into `--dir`.
pub fn man(args: &cli::ManArgs) -> Result<i32, Error> {
    if let Some(dir) = &args.dir {
        install::write_man_pages(dir).map_err(|source| Error::Internal {
            action: "cannot write the man pages",
            source,
        })?;
        return Ok(0);
    }
    match install::man_page(args.command.as_deref()) {
        Ok(page) => print_bytes(&page),
        Err(why) => Err(Error::Usage(UsageError::ManPage(why))),
    }
}

/// `oomguard install-units`: the unit (and, for a binary systemd would not find, a drop-in)
/// written, then what to run next on stdout.
pub fn install_units(args: &cli::InstallUnitsArgs) -> Result<i32, Error> {
    use crate::front::install_units::{install, next_steps, Place, Scope};
    let exe = std::env::current_exe().map_err(|source| Error::Internal {
        action: "cannot find this oomguard's own path",
        source,
    })?;
    let scope = if args.user {
        Scope::User
    } else {
        Scope::System
    };
    let place = Place {
        scope,
        dir: args.dir.clone(),
        home: std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(Into::into),
        xdg_config_home: std::env::var_os("XDG_CONFIG_HOME")
            .filter(|h| !h.is_empty())
            .map(Into::into),
        exe,
        as_root: nix::unistd::geteuid().is_root(),
    };
    let written = install(&place, args.force)?;
    print_bytes(next_steps(scope, &written).as_bytes())
}

/// Generated text on stdout (a completion script, a man page), for the shell to redirect.
pub fn print_bytes(bytes: &[u8]) -> Result<i32, Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|source| Error::Internal {
            action: "cannot write to standard output",
            source,
        })?;
    Ok(0)
}

/// `oomguard status`: the table, or with `--json` one JSON list, on stdout; a job file that
/// cannot be read is a warning.
pub fn show_status(args: &cli::StatusArgs, report: Reporter) -> Result<i32, Error> {
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => record::run_dir::state_dir().ok_or(UsageError::Job(
            "no state directory: neither XDG_STATE_HOME nor HOME is set; give --state-dir DIR"
                .to_string(),
        ))?,
    };
    let (jobs, warnings) = status::collect(&state_dir);
    for warning in &warnings {
        report.warn(warning);
    }
    if args.json {
        let json = serde_json::to_string_pretty(&jobs).expect("statuses are plain data");
        report.out(&crate::output::console::json_printable(&json));
    } else if jobs.is_empty() {
        report.say(&format!("no jobs in {}", state_dir.join("jobs").display()));
    } else {
        for line in status::table(&jobs) {
            report.out(&line);
        }
    }
    Ok(0)
}

/// `oomguard classify`: one line per file (with `--explain`, a few lines saying why); exit 1 if
/// a file could not be read.
pub fn classify_files(args: &ClassifyArgs) -> i32 {
    let mut status = 0;
    for file in &args.files {
        let text = match read_input(file) {
            Ok(text) => text,
            Err(e) => {
                Reporter { quiet: false }.error(&format!("cannot read {}: {e}", file.display()));
                status = 1;
                continue;
            }
        };
        if args.explain {
            let explanation = classify::explain_text(&text);
            if args.json {
                let mut line =
                    serde_json::to_value(&explanation).expect("an explanation serializes");
                line["file"] = serde_json::json!(file);
                println!("{line}");
            } else {
                print!("{}", explanation.render(&file.display().to_string()));
            }
            continue;
        }
        let verdict = classify::classify_text(&text);
        let class = verdict.as_ref().map_or("none", |v| v.cause.as_str());
        if args.json {
            let evidence = verdict.as_ref().map(|v| v.evidence.as_str());
            let line = serde_json::json!({"file": file, "class": class, "evidence": evidence});
            println!("{line}");
        } else {
            println!("{class}\t{}", file.display());
        }
    }
    status
}

fn read_input(file: &Path) -> std::io::Result<String> {
    let bytes = if file == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf)?;
        buf
    } else {
        std::fs::read(file)?
    };
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
