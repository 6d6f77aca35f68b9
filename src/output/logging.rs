//! The `tracing` subscriber for `-v` (or `RUST_LOG`) and its formatter: tracing events come out
//! like every other oomguard line (`oomguard: warning: ...`, or a JSON log line with
//! `--log-format json`), through the stream's stderr writer.
//!
//! It only sets up and formats; the lines oomguard says itself, and the log format they share,
//! are [`crate::output::console`].

use std::time::SystemTime;

use crate::output::console::{json_line, log_format, LogFormat, LOG_FORMAT};

/// Sets up `tracing` for `-v` (or `RUST_LOG`); by default only warnings and errors, printed
/// like every other oomguard line (`oomguard: warning: ...`, or JSON with `--log-format json`).
/// No colour, and every control character escaped: a field may hold a path or a value a user
/// chose, and under journald or in a file escape codes are noise anyway.
pub fn init_tracing_as(verbose: u8, quiet: bool, format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
    init_tracing(verbose, quiet);
}

/// [`init_tracing_as`] with the format already chosen (text by default).
pub fn init_tracing(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "oomguard=info",
        (false, _) => "oomguard=debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| crate::output::stream::OwnStderr)
        .with_ansi(false)
        .event_format(OomguardFormat)
        .try_init();
}

/// `oomguard: warning: message`: tracing events look like the rest of oomguard's lines.
struct OomguardFormat;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for OomguardFormat
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        if log_format() == LogFormat::Json {
            let mut fields = JsonFields::default();
            event.record(&mut fields);
            let message = fields.message.take().unwrap_or_default();
            let line = json_line(SystemTime::now(), level, "log", &message, &fields.map);
            return writeln!(writer, "{}", crate::output::console::json_printable(&line));
        }
        // Formatted whole, then escaped: a field may hold a path or a value a user chose. (No
        // colour: tracing's escape codes and a user's could not be told apart.)
        let mut line = format!("oomguard: {level}: ");
        ctx.field_format().format_fields(
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        writeln!(writer, "{}", crate::output::console::printable_lines(&line))
    }
}

/// A tracing event's fields as JSON: `message` apart, the rest by name (numbers and booleans as
/// such, anything else as its Display or Debug text).
#[derive(Default)]
struct JsonFields {
    message: Option<String>,
    map: serde_json::Map<String, serde_json::Value>,
}

impl tracing::field::Visit for JsonFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.put(field, value.into());
    }
}

impl JsonFields {
    fn put(&mut self, field: &tracing::field::Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.map.insert(field.name().to_string(), value);
        }
    }
}
