//! The `oomguard` binary: parse the command line, run, exit with the status `run` chose.

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match oomguard::parse_from(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(oomguard::ParseError::Clap(e)) => return usage_error(e),
        Err(e) => {
            // A job file that cannot be used: one line naming it, exit 2, nothing started.
            oomguard::Reporter { quiet: false }.error(&e.to_string());
            return ExitCode::from(oomguard::EXIT_USAGE as u8);
        }
    };
    let code = match oomguard::run(cli) {
        Ok(code) => code,
        Err(e) => {
            // Through `report`: on a line of its own after the job's last output.
            oomguard::Reporter { quiet: false }.error(&e.to_string());
            e.exit_code()
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Help and version print as clap writes them; a real usage error is one line, exit 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                2
            } else {
                0
            },
        );
    }
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    eprintln!("oomguard: error: {first} (see `oomguard --help`)");
    ExitCode::from(oomguard::EXIT_USAGE as u8)
}
