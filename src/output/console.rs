//! What oomguard tells the user on the terminal: its own stderr lines (prefixed `oomguard:` so
//! they stand apart from the job's output, or one JSON object per line with `--log-format json`),
//! the short forms those lines use (durations, memory peaks), and the table printed at the end.
//!
//! Everything oomguard prints to a terminal passes [`printable`] (or [`json_printable`] for
//! JSON): knob values, job names, causes and paths come from files other users may write, and
//! a control character in them (an ESC sequence, a BEL) must not drive the admin's terminal.
//!
//! It decides nothing and writes no file: it formats what the attempt loop hands it, and its lines
//! go out through the stream's stderr writer ([`crate::output::stream::own_line`]). The tracing
//! subscriber that prints `-v` lines the same way is [`crate::output::logging`]; the run directory
//! is [`crate::remember::record`].

use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use crate::observe::sampler::Peaks;
use crate::observe::units::human_bytes;

/// The `oomguard:` lines on stderr. `-q` keeps only errors.
#[derive(Debug, Clone, Copy)]
pub struct Reporter {
    pub quiet: bool,
}

impl Reporter {
    /// A normal progress line.
    pub fn say(&self, line: &str) {
        if !self.quiet {
            print_line(line);
        }
    }

    /// Something the user should act on, but the run goes on.
    pub fn warn(&self, line: &str) {
        if !self.quiet {
            print_line(&format!("warning: {line}"));
        }
    }

    /// A line of a command's own output (`doctor`, `status`), on stdout, unprefixed; control
    /// characters escaped ([`printable_lines`]).
    pub fn out(&self, line: &str) {
        let _ = writeln!(io::stdout().lock(), "{}", printable_lines(line));
    }

    /// Shown even with `-q`.
    pub fn error(&self, line: &str) {
        print_line(&format!("error: {line}"));
    }
}

fn print_line(line: &str) {
    if log_format() == LogFormat::Json {
        // `say`/`warn`/`error` lines: the level is the prefix `warn` and `error` add.
        let (level, message) = match (line.strip_prefix("warning: "), line.strip_prefix("error: "))
        {
            (Some(rest), _) => ("warning", rest),
            (_, Some(rest)) => ("error", rest),
            _ => ("info", line),
        };
        own_json(level, "message", message, &serde_json::Map::new());
        return;
    }
    // Through the stream's stderr writer: ordered after the job's output already queued, and
    // on a line of its own even after an unfinished progress bar. A message may quote what a
    // user wrote (a job file's value in an error): escaped.
    crate::output::stream::own_line(format!("oomguard: {}\n", printable_lines(line)).as_bytes());
}

/// Whether `c` must not reach a terminal as it is: a control character (C0, DEL, C1: the
/// bytes that start escape sequences, ring the bell, move the cursor) or a Unicode
/// bidirectional control (which reorders what is shown around it, so text could read as
/// something else).
fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` safe to show on a terminal as one line (a table cell, a value): each control
/// character and bidirectional control written as an escape (`\n`, `\t`, `\r`, `\u{1b}`,
/// `\u{202e}`), so it can neither drive the terminal nor break the line; the rest as it is.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    escape_where(text, unprintable)
}

/// [`printable`] for text of several lines that oomguard made: its newlines (and tabs) kept,
/// every other control character escaped.
pub fn printable_lines(text: &str) -> std::borrow::Cow<'_, str> {
    escape_where(text, |c| c != '\n' && c != '\t' && unprintable(c))
}

fn escape_where(text: &str, escape: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(&escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !escape(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A JSON document (as serde_json writes it) safe for a terminal: serde escapes C0 controls but
/// writes DEL, C1 and bidirectional controls as they are; those become `\u007f`-style escapes
/// here, which read back as the same characters. Only strings can hold them (outside strings
/// JSON is ASCII), so the document stays valid and means the same.
pub fn json_printable(json: &str) -> std::borrow::Cow<'_, str> {
    // JSON's own whitespace between tokens stays (within strings serde escaped it already).
    let escape = |c: char| !matches!(c, '\n' | '\t' | '\r') && unprintable(c);
    if !json.chars().any(escape) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if escape(c) {
            // All of them lie in the Basic Multilingual Plane: one \uXXXX each.
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// How oomguard's own lines look: `oomguard: ...` text for people, or one JSON object per line
/// for journald and log collectors (`--log-format json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The format chosen on the command line; set once, before the first line, by
/// [`crate::output::logging::init_tracing`].
/// Process-wide rather than a field of [`Reporter`] because the tracing subscriber, the writer
/// threads and `main`'s last error line all format lines too, and none of them holds a Reporter.
pub(crate) static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The format of oomguard's own lines (text until [`crate::output::logging::init_tracing`] says
/// otherwise).
pub fn log_format() -> LogFormat {
    LOG_FORMAT.get().copied().unwrap_or_default()
}

impl Reporter {
    /// A line that marks a step of the run (`attempt_ended`, `relaunch`, `run_ended`...): as
    /// text, `line`; as JSON, `line` as the message and `fields` (attempt, cause, knobs...) kept
    /// as values a machine can read without parsing the text.
    pub fn event(&self, event: &str, fields: serde_json::Value, line: &str) {
        if self.quiet {
            return;
        }
        match log_format() {
            LogFormat::Text => print_line(line),
            LogFormat::Json => {
                let fields = match fields {
                    serde_json::Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                own_json("info", event, line, &fields);
            }
        }
    }
}

/// One JSON log line: `{"time", "level", "event", "message", "fields"}`.
fn own_json(
    level: &str,
    event: &str,
    message: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
) {
    let mut text =
        json_printable(&json_line(SystemTime::now(), level, event, message, fields)).into_owned();
    text.push('\n');
    crate::output::stream::own_line(text.as_bytes());
}

/// The text of one JSON log line (without its newline); `time` is RFC 3339 UTC with
/// milliseconds, so lines of one second keep their order when sorted.
pub fn json_line(
    time: SystemTime,
    level: &str,
    event: &str,
    message: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> String {
    serde_json::json!({
        "time": humantime::format_rfc3339_millis(time).to_string(),
        "level": level,
        "event": event,
        "message": message,
        "fields": fields,
    })
    .to_string()
}

/// `; peak RSS 1.2 GiB, PSS 900.0 MiB, GPU 70.0 GiB` for the death line; empty when nothing is
/// known.
pub fn peaks_clause(peaks: &Peaks) -> String {
    let parts: Vec<String> = [
        ("RSS", peaks.rss_bytes),
        ("PSS", peaks.pss_bytes),
        ("swap", peaks.swap_bytes.filter(|s| *s > 0)),
        ("cgroup", peaks.cgroup_bytes),
        ("GPU", peaks.gpu_bytes),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} {}", human_bytes(v))))
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("; peak {}", parts.join(", "))
    }
}

/// `12.3s`, `4m05s`, `2h03m`.
pub fn short_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, d.as_secs() / 60 % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_log_line_has_its_keys() {
        let mut fields = serde_json::Map::new();
        fields.insert("attempt".into(), 2.into());
        let line = json_line(
            SystemTime::UNIX_EPOCH + Duration::from_millis(1500),
            "warning",
            "relaunch",
            "attempt 2 in 0.0s",
            &fields,
        );
        assert!(!line.contains('\n'));
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({
                "time": "1970-01-01T00:00:01.500Z",
                "level": "warning",
                "event": "relaunch",
                "message": "attempt 2 in 0.0s",
                "fields": {"attempt": 2},
            })
        );
    }

    #[test]
    fn control_characters_are_escaped_for_the_terminal() {
        let evil = "a\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{9b}31m\u{7f}\u{202e}b\tc\nd\re";
        assert_eq!(
            printable(evil),
            "a\\u{1b}]0;PWNED\\u{7}\\u{1b}[2J\\u{9b}31m\\u{7f}\\u{202e}b\\tc\\nd\\re"
        );
        assert_eq!(
            printable_lines(evil),
            "a\\u{1b}]0;PWNED\\u{7}\\u{1b}[2J\\u{9b}31m\\u{7f}\\u{202e}b\tc\nd\\re"
        );
        assert!(matches!(
            printable("plain ünïcode"),
            std::borrow::Cow::Borrowed(_)
        ));
        // JSON: serde escapes C0; DEL, C1 and bidi controls are escaped here, and the document
        // still reads back as the same value.
        let value = serde_json::json!({ "v": evil, "w": [1, 2] });
        for json in [
            serde_json::to_string(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            let safe = json_printable(&json);
            assert!(!safe.chars().any(|c| c != '\n' && unprintable(c)), "{safe}");
            let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
            assert_eq!(back, value);
        }
        let pretty = serde_json::to_string_pretty(&serde_json::json!({ "a": 1 })).unwrap();
        assert_eq!(json_printable(&pretty), pretty, "the layout stays");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short_duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(short_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(short_duration(Duration::from_secs(7380)), "2h03m");
    }
}
