//! The YAML editor: finds the scalar at a dotted key (`training.batch_size`) with a real YAML
//! parser (`saphyr-parser`'s event stream, whose events carry source positions), then delimits
//! the value's own text from where the parser says it starts: a plain scalar runs to the end of
//! its line or to a ` #` comment (in a flow mapping also to `,` `}` `]`), a quoted one to its
//! closing quote, escapes honoured. The parser's own reading of the value must agree with that
//! text, so a span is never guessed. [`render`] writes a new value in YAML's spelling, keeping a
//! string's quote style where it can.
//!
//! Edited in place: scalars in block mappings and in flow mappings (`{batch_size: 8, lr: 0.1}`),
//! plain or quoted, anchored (`&bs 8`) as long as no alias reads the anchor, in the first
//! document of a file. Refused with the key's line: mappings, lists, aliases (`*name`), values
//! shared through an anchor that an alias (or a `<<` merge) reads, keys absent from a mapping
//! that merges others in with `<<` (the value might come from there), tagged values (`!!str 8`),
//! null or empty values, block scalars (`|`, `>`), plain or quoted strings spread over several
//! lines, keys given twice in one mapping, and keys that live in the second or a later document
//! of a multi-document file (`---`). Keys are followed through mappings only: a key whose name
//! contains a dot, or a path through a list, is reported as not found.
//!
//! Values are typed as the readers ML jobs use (PyYAML, OmegaConf) and YAML 1.2 agree: decimal
//! and `0x` integers, floats (`0.1`, `1e-4`, `.inf`), `true`/`false` and YAML 1.1's
//! `yes`/`no`/`on`/`off` as booleans; numbers the two YAML versions read differently (`010`,
//! `1_000`, `0o17`) are strings, and anything quoted is a string.
//!
//! Reading and writing the file, and splicing the new text in, are the caller's (`super::set`).

use std::sync::LazyLock;

use regex::Regex;
use saphyr_parser::{Event, Parser, ScalarStyle};

use super::{line_of, EditError, Located, Scalar};

/// The name `EditError::Syntax` gives this format.
const FORMAT: &str = "YAML";

/// One parser event, with the byte offset where the parser says its text starts.
struct Ev<'a> {
    event: Event<'a>,
    start_byte: usize,
    /// Where the parser says the event's text ends (exclusive); for a quoted scalar this may
    /// include the blanks and comment after the closing quote, so it is only a cross-check.
    end_byte: usize,
}

/// Finds the scalar at `key` (dotted path through mappings) in the first YAML document of
/// `text`, and the byte span of its text (quotes included).
pub fn locate(text: &str, key: &str) -> Result<Located, EditError> {
    let segments: Vec<&str> = key.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(not_found(key));
    }
    let events = parse(text)?;
    let documents = documents(&events);
    let Some(&first) = documents.first() else {
        return Err(not_found(key));
    };
    match find(text, &events, first, &segments, key)? {
        Some(found) => scalar_at(text, &events, found, key),
        None => {
            // A key that only a later document has: the job may read that one (or none, since
            // `yaml.safe_load` refuses several documents), so say so rather than "not found".
            for (n, &document) in documents.iter().enumerate().skip(1) {
                if let Ok(Some(found)) = find(text, &events, document, &segments, key) {
                    return Err(EditError::NotScalar {
                        key: key.to_string(),
                        line: line_of(text, events[found.key].start_byte),
                        what: format!(
                            "in document {} of the file (oomguard edits only the first)",
                            n + 1
                        ),
                    });
                }
            }
            Err(not_found(key))
        }
    }
}

/// The YAML text for `value`, to replace `old` (the value's current text, quotes included).
/// A value equal to what `old` already says is written back as `old`, so a no-op edit changes
/// no byte. Booleans are written `true`/`false`; floats always carry a `.` (or are `.inf`/`.nan`)
/// so that YAML 1.1 readers such as PyYAML read them as floats too; a string keeps `old`'s
/// quotes (single or double) where they can hold it, stays plain where `old` was plain and the
/// string cannot be misread as anything else, and is double-quoted otherwise.
pub fn render(value: &Scalar, old: &str) -> String {
    if read_alone(old).is_some_and(|was| Scalar::same(&was, value)) {
        return old.to_string();
    }
    match value {
        Scalar::Int(n) => n.to_string(),
        Scalar::Bool(b) => b.to_string(),
        Scalar::Float(x) => render_float(*x),
        Scalar::Str(s) => {
            if old.starts_with('\'') && single_quotable(s) {
                format!("'{}'", s.replace('\'', "''"))
            } else if old.starts_with('\'') || old.starts_with('"') || !plain_safe(s) {
                double_quoted(s)
            } else {
                s.clone()
            }
        }
    }
}

/// The event stream of `text`, each event with its byte offsets.
fn parse(text: &str) -> Result<Vec<Ev<'_>>, EditError> {
    // The parser's markers count characters; the span must be in bytes.
    let mut char_bytes: Vec<usize> = text.char_indices().map(|(at, _)| at).collect();
    char_bytes.push(text.len());
    let byte_of = |char_index: usize| char_bytes[char_index.min(char_bytes.len() - 1)];
    let mut events = Vec::new();
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        // The parser's own message says "at byte N" for a character count: name line and
        // column only.
        let (event, span) = next.map_err(|e| EditError::Syntax {
            format: FORMAT,
            detail: format!(
                "{} at line {} column {}",
                e.info(),
                e.marker().line(),
                e.marker().col() + 1
            ),
        })?;
        events.push(Ev {
            event,
            start_byte: byte_of(span.start.index()),
            end_byte: byte_of(span.end.index()),
        });
    }
    Ok(events)
}

/// The event index of each document's root node.
fn documents(events: &[Ev<'_>]) -> Vec<usize> {
    let mut roots = Vec::new();
    let mut at = 0;
    while at < events.len() {
        if matches!(events[at].event, Event::DocumentStart(_)) {
            roots.push(at + 1);
            at = skip_node(events, at + 1);
        } else {
            at += 1;
        }
    }
    roots
}

/// The index of the first event after the node that starts at `at`.
fn skip_node(events: &[Ev<'_>], at: usize) -> usize {
    match events.get(at).map(|e| &e.event) {
        Some(Event::MappingStart(..) | Event::SequenceStart(..)) => {
            let mut next = at + 1;
            while next < events.len()
                && !matches!(events[next].event, Event::MappingEnd | Event::SequenceEnd)
            {
                next = skip_node(events, next);
            }
            next + 1
        }
        _ => at + 1,
    }
}

/// A value found at the key path: its key's and its own event index, and what it depends on.
#[derive(Clone, Copy)]
struct Found {
    key: usize,
    value: usize,
    /// Whether a flow collection (`{...}`, `[...]`) encloses the value.
    in_flow: bool,
}

/// Follows `segments` from the node at `root`. `Ok(None)`: the path is not there.
fn find(
    text: &str,
    events: &[Ev<'_>],
    root: usize,
    segments: &[&str],
    key: &str,
) -> Result<Option<Found>, EditError> {
    let mut node = root;
    let mut key_event = root;
    let mut in_flow = false;
    // Anchors on the way: a value under an anchor that an alias reads is shared.
    let mut anchors: Vec<(usize, usize)> = Vec::new();
    for segment in segments {
        let refuse = |at: usize, what: String| EditError::NotScalar {
            key: key.to_string(),
            line: line_of(text, events[at].start_byte),
            what,
        };
        match &events[node].event {
            Event::MappingStart(anchor, _) => {
                if *anchor != 0 {
                    anchors.push((*anchor, node));
                }
                in_flow |= starts_flow(text, events[node].start_byte);
                let mut matches = Vec::new();
                let mut merges = None;
                let mut at = node + 1;
                while at < events.len() && !matches!(events[at].event, Event::MappingEnd) {
                    let value = skip_node(events, at);
                    if let Event::Scalar(name, style, ..) = &events[at].event {
                        if name == segment {
                            matches.push((at, value));
                        } else if name == "<<" && *style == ScalarStyle::Plain {
                            merges = Some(at);
                        }
                    }
                    at = skip_node(events, value);
                }
                match (matches.as_slice(), merges) {
                    ([], None) => return Ok(None),
                    ([], Some(merge)) => {
                        return Err(refuse(
                            merge,
                            format!("possibly merged in with `<<` (write `{segment}:` in its own mapping to edit it)"),
                        ))
                    }
                    ([(k, v)], _) => {
                        key_event = *k;
                        node = *v;
                    }
                    ([_, (second, _), ..], _) => {
                        return Err(refuse(*second, "given twice in the same mapping".into()))
                    }
                }
            }
            Event::Alias(_) => {
                return Err(refuse(
                    key_event,
                    format!(
                        "inside a YAML alias ({})",
                        word_at(text, events[node].start_byte)
                    ),
                ))
            }
            _ => return Ok(None),
        }
    }
    let shared = anchors
        .iter()
        .find(|(anchor, _)| alias_reads(events, *anchor));
    let own_anchor = match &events[node].event {
        Event::Scalar(_, _, anchor, _)
        | Event::MappingStart(anchor, _)
        | Event::SequenceStart(anchor, _)
            if *anchor != 0 && alias_reads(events, *anchor) =>
        {
            Some((*anchor, node))
        }
        _ => None,
    };
    if let Some((_, at)) = shared.copied().or(own_anchor) {
        return Err(EditError::NotScalar {
            key: key.to_string(),
            line: line_of(text, events[key_event].start_byte),
            what: format!(
                "shared through the YAML anchor {} that an alias elsewhere reads",
                word_at(text, events[at].start_byte)
            ),
        });
    }
    Ok(Some(Found {
        key: key_event,
        value: node,
        in_flow,
    }))
}

/// Whether any alias in the stream reads anchor `anchor` (anchor ids are unique in a stream).
fn alias_reads(events: &[Ev<'_>], anchor: usize) -> bool {
    events
        .iter()
        .any(|e| matches!(e.event, Event::Alias(id) if id == anchor))
}

/// Whether the collection whose text starts at `at` is a flow one (`{` or `[`, after any
/// `&anchor`/`!tag`).
fn starts_flow(text: &str, at: usize) -> bool {
    let rest = &text[skip_properties(text, at)..];
    rest.starts_with('{') || rest.starts_with('[')
}

/// The byte offset after any node properties (`&anchor`, `!tag`) and blanks at `at`.
fn skip_properties(text: &str, mut at: usize) -> usize {
    loop {
        let rest = &text[at..];
        if rest.starts_with('&') || rest.starts_with('!') {
            at += rest.find(char::is_whitespace).unwrap_or(rest.len());
        } else if rest.starts_with([' ', '\t']) {
            at += 1;
        } else {
            return at;
        }
    }
}

/// The word at `at` (an anchor or alias as written: `&base`, `*base`), for messages.
fn word_at(text: &str, at: usize) -> &str {
    let rest = &text[at..];
    let end = rest
        .find(|c: char| c.is_whitespace() || ",[]{}".contains(c))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The tag among the node properties at `at` (`!!str`, `!custom`), for messages.
fn tag_at(text: &str, mut at: usize) -> &str {
    while text[at..].starts_with('&') {
        at += word_at(text, at).len();
        at += text[at..].len() - text[at..].trim_start_matches([' ', '\t']).len();
    }
    word_at(text, at)
}

/// The located scalar, or why the value at the path is not one.
fn scalar_at(text: &str, events: &[Ev<'_>], found: Found, key: &str) -> Result<Located, EditError> {
    let refuse = |what: &str| EditError::NotScalar {
        key: key.to_string(),
        line: line_of(text, events[found.key].start_byte),
        what: what.to_string(),
    };
    let ev = &events[found.value];
    let (value, style, tag) = match &ev.event {
        Event::Scalar(value, style, _, tag) => (value, *style, tag),
        Event::MappingStart(..) => return Err(refuse("a mapping")),
        Event::SequenceStart(..) => return Err(refuse("a list")),
        Event::Alias(_) => {
            let alias = word_at(text, ev.start_byte);
            return Err(refuse(&format!("a YAML alias ({alias})")));
        }
        _ => return Err(refuse("not a value")),
    };
    if matches!(style, ScalarStyle::Literal | ScalarStyle::Folded) {
        return Err(refuse(
            "a block scalar (`|` or `>`) spread over several lines",
        ));
    }
    if tag.is_some() {
        return Err(refuse(&format!(
            "a tagged value ({})",
            tag_at(text, ev.start_byte)
        )));
    }
    if style == ScalarStyle::Plain && value.is_empty() {
        // Nothing written: the parser places the empty value at the key's colon.
        return Err(refuse("null (no value)"));
    }
    let start = skip_properties(text, ev.start_byte);
    let end = scalar_end(text, start, style, found.in_flow).map_err(refuse)?;
    let own = &text[start..end];
    let typed = match style {
        ScalarStyle::Plain => {
            // A one-line plain scalar reads as exactly its text; a longer reading means it
            // folds in the lines below.
            if own != value.as_ref() {
                return Err(refuse("a plain string spread over several lines"));
            }
            match plain_scalar(own) {
                Some(typed) => typed,
                None => return Err(refuse("null (no value)")),
            }
        }
        _ => Scalar::Str(value.to_string()),
    };
    // A cross-check with the parser's own end: exact for a plain scalar; after a closing quote
    // it may also take in the blanks and a comment that follow.
    let after = text
        .get(end..ev.end_byte)
        .map(|s| s.trim_start_matches([' ', '\t']));
    if !after.is_some_and(|s| s.is_empty() || (style != ScalarStyle::Plain && s.starts_with('#'))) {
        return Err(refuse("a value oomguard could not delimit"));
    }
    Ok(Located {
        value: typed,
        span: start..end,
        line: line_of(text, start),
    })
}

/// Where the scalar whose text starts at `start` ends, or why it cannot be edited in place.
fn scalar_end(
    text: &str,
    start: usize,
    style: ScalarStyle,
    in_flow: bool,
) -> Result<usize, &'static str> {
    let rest = &text[start..];
    let multi_line = "a quoted string spread over several lines";
    match style {
        ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
            let quote = if style == ScalarStyle::SingleQuoted {
                '\''
            } else {
                '"'
            };
            let mut chars = rest.char_indices().skip(1).peekable();
            while let Some((at, c)) = chars.next() {
                match c {
                    '\n' | '\r' => return Err(multi_line),
                    // `''` is a quote inside a single-quoted string.
                    '\'' if quote == '\'' && chars.peek().is_some_and(|&(_, n)| n == '\'') => {
                        chars.next();
                    }
                    // A backslash escapes the next character; before a line break it continues
                    // the string on the next line.
                    '\\' if quote == '"' => match chars.next() {
                        Some((_, '\n' | '\r')) | None => return Err(multi_line),
                        Some(_) => {}
                    },
                    c if c == quote => return Ok(start + at + c.len_utf8()),
                    _ => {}
                }
            }
            Err(multi_line)
        }
        _ => {
            let mut end = rest.len();
            let mut previous = ' ';
            for (at, c) in rest.char_indices() {
                let stops = matches!(c, '\n' | '\r')
                    || (c == '#' && matches!(previous, ' ' | '\t'))
                    || (in_flow && ",[]{}".contains(c));
                if stops {
                    end = at;
                    break;
                }
                previous = c;
            }
            Ok(start + rest[..end].trim_end_matches([' ', '\t']).len())
        }
    }
}

static INT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+)$").expect("a valid literal regex")
});
static FLOAT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
        .expect("a valid literal regex")
});

/// What a plain scalar's text means; `None` for null (`~`, `null`, nothing).
fn plain_scalar(s: &str) -> Option<Scalar> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return None,
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => {
            return Some(Scalar::Bool(true))
        }
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            return Some(Scalar::Bool(false))
        }
        _ => {}
    }
    if INT.is_match(s) {
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => i64::from_str_radix(hex, 16),
            None => s.parse::<i64>(),
        };
        // An integer too large for i64 is kept as text rather than rounded.
        return Some(parsed.map_or_else(|_| Scalar::Str(s.to_string()), Scalar::Int));
    }
    if FLOAT.is_match(s) {
        let lower = s.to_ascii_lowercase();
        let x = match lower.trim_start_matches('+') {
            ".inf" => f64::INFINITY,
            "-.inf" => f64::NEG_INFINITY,
            ".nan" => f64::NAN,
            number => number
                .parse::<f64>()
                .expect("FLOAT matches only numbers Rust parses"),
        };
        return Some(Scalar::Float(x));
    }
    Some(Scalar::Str(s.to_string()))
}

/// What a value's text (as [`locate`] spans it) means read on its own; `None` if it is not one
/// scalar.
fn read_alone(old: &str) -> Option<Scalar> {
    let mut parser = Parser::new_from_str(old);
    while let Some(Ok((event, _))) = parser.next_event() {
        if let Event::Scalar(value, style, _, None) = event {
            return match style {
                ScalarStyle::Plain => plain_scalar(&value),
                _ => Some(Scalar::Str(value.into_owned())),
            };
        }
    }
    None
}

/// A float YAML 1.1 and 1.2 both read as a float: with a `.` (Rust never writes exponents in
/// `Display`), or `.inf`/`-.inf`/`.nan`.
fn render_float(x: f64) -> String {
    if x.is_nan() {
        ".nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { ".inf" } else { "-.inf" }.to_string()
    } else {
        let text = x.to_string();
        if text.contains('.') {
            text
        } else {
            format!("{text}.0")
        }
    }
}

/// Whether `s` written bare reads back as this same string in any context (block or flow) and
/// under YAML 1.1 and 1.2 readers alike.
fn plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let looks_typed = !matches!(plain_scalar(s), Some(Scalar::Str(_)))
        || first.is_ascii_digit()
        || matches!(first, '+' | '-' | '.')
        || matches!(s, "y" | "Y" | "n" | "N" | "=" | "<<");
    !looks_typed
        && !"?:,[]{}#&*!|>'\"%@`".contains(first)
        && !s.starts_with([' ', '\t'])
        && !s.ends_with([' ', '\t', ':'])
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.contains('\t')
        && !s.contains([',', '[', ']', '{', '}'])
        && s.chars().all(|c| !needs_escape(c))
}

/// Whether `s` can be written between single quotes (which have no escapes but `''`).
fn single_quotable(s: &str) -> bool {
    s.chars().all(|c| !needs_escape(c))
}

/// Characters that must be escaped in a double-quoted YAML string to be read back as written:
/// controls, and the Unicode line breaks YAML 1.1 folds.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// `s` as a double-quoted YAML string.
fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if needs_escape(c) && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if needs_escape(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `NotFound` for `key`.
fn not_found(key: &str) -> EditError {
    EditError::NotFound {
        key: key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{set, Format};
    use super::*;

    /// (what, text, key, value found, new value, text after the edit)
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        Scalar,
        Scalar,
        &'static str,
    );

    fn int(n: i64) -> Scalar {
        Scalar::Int(n)
    }
    fn string(s: &str) -> Scalar {
        Scalar::Str(s.to_string())
    }

    fn rows() -> Vec<Row> {
        vec![
            (
                "block mapping, comments, blank lines, key order",
                "# training config\n\ntraining:\n  # per GPU\n  batch_size: 32  # was 64\n\n  lr: 0.1\nmodel: tiny\n",
                "training.batch_size",
                int(32),
                int(16),
                "# training config\n\ntraining:\n  # per GPU\n  batch_size: 16  # was 64\n\n  lr: 0.1\nmodel: tiny\n",
            ),
            (
                "the same key name elsewhere in the file",
                "eval:\n  batch_size: 64\ntraining:\n  batch_size: 32\n",
                "training.batch_size",
                int(32),
                int(16),
                "eval:\n  batch_size: 64\ntraining:\n  batch_size: 16\n",
            ),
            (
                "the same key name elsewhere: the other one",
                "eval:\n  batch_size: 64\ntraining:\n  batch_size: 32\n",
                "eval.batch_size",
                int(64),
                int(128),
                "eval:\n  batch_size: 128\ntraining:\n  batch_size: 32\n",
            ),
            (
                "a key nested under a like-named parent",
                "batch_size: 1\ntraining:\n  batch_size:\n    per_gpu: 8\n",
                "training.batch_size.per_gpu",
                int(8),
                int(4),
                "batch_size: 1\ntraining:\n  batch_size:\n    per_gpu: 4\n",
            ),
            (
                "four-space indentation, value first in its line's text",
                "training:\n    gradient_accumulation_steps: 1\n",
                "training.gradient_accumulation_steps",
                int(1),
                int(2),
                "training:\n    gradient_accumulation_steps: 2\n",
            ),
            (
                "CRLF line endings",
                "training:\r\n  batch_size: 32\r\n  lr: 0.1\r\n",
                "training.batch_size",
                int(32),
                int(16),
                "training:\r\n  batch_size: 16\r\n  lr: 0.1\r\n",
            ),
            (
                "CRLF and a trailing comment",
                "a: 8 # c\r\nb: 2\r\n",
                "a",
                int(8),
                int(4),
                "a: 4 # c\r\nb: 2\r\n",
            ),
            (
                "the last line without a newline",
                "training:\n  batch_size: 32",
                "training.batch_size",
                int(32),
                int(8),
                "training:\n  batch_size: 8",
            ),
            (
                "trailing blanks after the value",
                "batch_size: 32   \nx: 1\n",
                "batch_size",
                int(32),
                int(4),
                "batch_size: 4   \nx: 1\n",
            ),
            (
                "a tab before the comment",
                "batch_size: 32\t# tab\n",
                "batch_size",
                int(32),
                int(4),
                "batch_size: 4\t# tab\n",
            ),
            (
                "a `#` inside a plain value is not a comment",
                "tag: run#3 # the tag\n",
                "tag",
                string("run#3"),
                string("run#4"),
                "tag: run#4 # the tag\n",
            ),
            (
                "plain string stays plain",
                "model: resnet50\n",
                "model",
                string("resnet50"),
                string("resnet18"),
                "model: resnet18\n",
            ),
            (
                "plain string that would read as a number gets quotes",
                "name: run\n",
                "name",
                string("run"),
                string("42"),
                "name: \"42\"\n",
            ),
            (
                "plain string that would read as a bool gets quotes",
                "name: run\n",
                "name",
                string("run"),
                string("yes"),
                "name: \"yes\"\n",
            ),
            (
                "plain string with `: ` gets quotes",
                "name: run\n",
                "name",
                string("run"),
                string("a: b"),
                "name: \"a: b\"\n",
            ),
            (
                "double quotes kept, escapes written",
                "name: \"run 1\"  # q\n",
                "name",
                string("run 1"),
                string("say \"hi\"\\\n"),
                "name: \"say \\\"hi\\\"\\\\\\n\"  # q\n",
            ),
            (
                "double-quoted value with an escaped quote inside",
                "name: \"a\\\"b\" # c\n",
                "name",
                string("a\"b"),
                string("c"),
                "name: \"c\" # c\n",
            ),
            (
                "single quotes kept, a quote doubled",
                "name: 'run 1'\n",
                "name",
                string("run 1"),
                string("it's"),
                "name: 'it''s'\n",
            ),
            (
                "single-quoted value with a doubled quote inside",
                "name: 'it''s' # c\nx: 'y'\n",
                "name",
                string("it's"),
                string("ok"),
                "name: 'ok' # c\nx: 'y'\n",
            ),
            (
                "single quotes cannot hold a newline: double quotes",
                "name: 'a'\n",
                "name",
                string("a"),
                string("two\nlines"),
                "name: \"two\\nlines\"\n",
            ),
            (
                "quoted number stays a quoted string",
                "seed: \"42\"\n",
                "seed",
                string("42"),
                string("7"),
                "seed: \"7\"\n",
            ),
            (
                "unicode before and in the value",
                "# réglages\nnom: \"café\"\nétape: 3 # ☃\n",
                "étape",
                int(3),
                int(2),
                "# réglages\nnom: \"café\"\nétape: 2 # ☃\n",
            ),
            (
                "unicode string value",
                "# réglages\nnom: \"café\"\n",
                "nom",
                string("café"),
                string("thé ☕"),
                "# réglages\nnom: \"thé ☕\"\n",
            ),
            (
                "a byte order mark",
                "\u{feff}epochs: 10\n",
                "epochs",
                int(10),
                int(5),
                "\u{feff}epochs: 5\n",
            ),
            (
                "booleans: True is rewritten as false",
                "training:\n  pin_memory: True\n",
                "training.pin_memory",
                Scalar::Bool(true),
                Scalar::Bool(false),
                "training:\n  pin_memory: false\n",
            ),
            (
                "booleans: YAML 1.1 `no`",
                "use_fp16: no\n",
                "use_fp16",
                Scalar::Bool(false),
                Scalar::Bool(true),
                "use_fp16: true\n",
            ),
            (
                "float in exponent form",
                "lr: 1e-4  # adam\n",
                "lr",
                Scalar::Float(1e-4),
                Scalar::Float(5e-5),
                "lr: 0.00005  # adam\n",
            ),
            (
                "whole float keeps a dot",
                "scale: 0.5\n",
                "scale",
                Scalar::Float(0.5),
                Scalar::Float(2.0),
                "scale: 2.0\n",
            ),
            (
                "hex integer",
                "mask: 0xff\n",
                "mask",
                int(255),
                int(15),
                "mask: 15\n",
            ),
            (
                "negative integer",
                "offset: -3\n",
                "offset",
                int(-3),
                int(-1),
                "offset: -1\n",
            ),
            (
                "flow mapping on one line",
                "training: {batch_size: 32, lr: 0.1}  # flow\n",
                "training.batch_size",
                int(32),
                int(16),
                "training: {batch_size: 16, lr: 0.1}  # flow\n",
            ),
            (
                "flow mapping: last value before `}`",
                "training: {lr: 0.1, batch_size: 32}\n",
                "training.batch_size",
                int(32),
                int(8),
                "training: {lr: 0.1, batch_size: 8}\n",
            ),
            (
                "flow mapping: blank before the comma",
                "t: { a: 1 , b: 'x' }\n",
                "t.b",
                string("x"),
                string("y"),
                "t: { a: 1 , b: 'y' }\n",
            ),
            (
                "flow mapping: a closing brace inside quotes",
                "t: {a: \"}\", b: [1, 2], c: 3}\n",
                "t.a",
                string("}"),
                string("{"),
                "t: {a: \"{\", b: [1, 2], c: 3}\n",
            ),
            (
                "flow mapping: a value after a nested list",
                "t: &m {b: [1, 2], c: 3}\n",
                "t.c",
                int(3),
                int(1),
                "t: &m {b: [1, 2], c: 1}\n",
            ),
            (
                "a comment between key and value",
                "a:\n  # why\n  8\n",
                "a",
                int(8),
                int(4),
                "a:\n  # why\n  4\n",
            ),
            (
                "flow mapping over several lines",
                "t: {a: 1,\n    b: 2}\n",
                "t.b",
                int(2),
                int(3),
                "t: {a: 1,\n    b: 3}\n",
            ),
            (
                "quoted keys",
                "\"training\":\n  'batch_size': 4\n",
                "training.batch_size",
                int(4),
                int(2),
                "\"training\":\n  'batch_size': 2\n",
            ),
            (
                "an anchor that no alias reads",
                "batch_size: &bs 32\n",
                "batch_size",
                int(32),
                int(16),
                "batch_size: &bs 16\n",
            ),
            (
                "a document start marker",
                "%YAML 1.2\n---\nepochs: 10\n...\n",
                "epochs",
                int(10),
                int(20),
                "%YAML 1.2\n---\nepochs: 20\n...\n",
            ),
            (
                "the first of several documents",
                "epochs: 10\n---\nepochs: 99\n",
                "epochs",
                int(10),
                int(20),
                "epochs: 20\n---\nepochs: 99\n",
            ),
            (
                "a key whose value sits on the next line",
                "batch_size:\n  32\n",
                "batch_size",
                int(32),
                int(16),
                "batch_size:\n  16\n",
            ),
            (
                "an explicit mapping key",
                "? batch_size\n: 32\n",
                "batch_size",
                int(32),
                int(16),
                "? batch_size\n: 16\n",
            ),
            (
                "inside an anchored mapping that no alias reads",
                "base: &base\n  batch_size: 8\nother: {x: &y 1}\n",
                "base.batch_size",
                int(8),
                int(4),
                "base: &base\n  batch_size: 4\nother: {x: &y 1}\n",
            ),
            (
                "flow indicators inside a block plain value",
                "pattern: a[0],b}  # glob\n",
                "pattern",
                string("a[0],b}"),
                string("c[1]"),
                "pattern: \"c[1]\"  # glob\n",
            ),
            (
                "a value next to a list",
                "layers: [64, 64]\nwidth: 64 # px\n",
                "width",
                int(64),
                int(32),
                "layers: [64, 64]\nwidth: 32 # px\n",
            ),
        ]
    }

    #[test]
    fn locates_and_replaces_only_the_value() {
        for (what, text, key, value, new, after) in rows() {
            let found = locate(text, key).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(found.value, value, "{what}: value");
            assert_eq!(found.line, line_of(text, found.span.start), "{what}: line");
            let edited =
                set(Format::Yaml, text, key, &new).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(edited, after, "{what}: edited text");
            // The edit reads back as the new value, at the same key.
            assert_eq!(
                locate(&edited, key).map(|f| f.value),
                Ok(new.clone()),
                "{what}: read back"
            );
        }
    }

    #[test]
    fn setting_the_original_value_changes_no_byte() {
        for (what, text, key, value, _, after) in rows() {
            assert_eq!(
                set(Format::Yaml, text, key, &value).as_deref(),
                Ok(text),
                "{what}"
            );
            // The same for the edited file and its new value.
            let new_value = locate(after, key).expect("the edited key is there").value;
            assert_eq!(
                set(Format::Yaml, after, key, &new_value).as_deref(),
                Ok(after),
                "{what}"
            );
        }
    }

    #[test]
    fn spans_include_quotes_and_nothing_else() {
        let text = "a: 'x' # c\nb: \"y\"\nc: z \n";
        let span = |key| {
            let f = locate(text, key).expect("the key is there");
            &text[f.span]
        };
        assert_eq!(span("a"), "'x'");
        assert_eq!(span("b"), "\"y\"");
        assert_eq!(span("c"), "z");
        assert_eq!(locate(text, "b").map(|f| f.line), Ok(2));
    }

    fn not_scalar(line: usize, what: &str) -> Result<(), (usize, String)> {
        Err((line, what.to_string()))
    }

    /// (text, key, the line and the start of `what` that `NotScalar` gives; Ok: not found)
    type ErrorRow = (&'static str, &'static str, Result<(), (usize, String)>);

    #[test]
    fn refuses_what_it_cannot_edit_in_place() {
        let rows: Vec<ErrorRow> = vec![
            ("training:\n  batch_size: 8\n", "training.lr", Ok(())),
            ("training:\n  batch_size: 8\n", "eval.batch_size", Ok(())),
            (
                "training:\n  batch_size: 8\n",
                "training.batch_size.x",
                Ok(()),
            ),
            ("training:\n  batch_size: 8\n", "batch_size", Ok(())),
            ("training.batch_size: 8\n", "training.batch_size", Ok(())),
            ("- batch_size: 8\n", "batch_size", Ok(())),
            ("", "batch_size", Ok(())),
            ("# only a comment\n", "batch_size", Ok(())),
            ("batch_size: 8\n", "", Ok(())),
            ("batch_size: 8\n", "training..batch_size", Ok(())),
            (
                "training:\n  batch_size: 8\n",
                "training",
                not_scalar(1, "a mapping"),
            ),
            ("layers: [1, 2]\n", "layers", not_scalar(1, "a list")),
            ("layers:\n  - 1\n", "layers", not_scalar(1, "a list")),
            ("a: &x 8\nb: *x\n", "b", not_scalar(2, "a YAML alias (*x)")),
            (
                "a: &x 8\nb: *x\n",
                "a",
                not_scalar(1, "shared through the YAML anchor &x"),
            ),
            (
                "base: &base\n  batch_size: 8\ntrain:\n  <<: *base\n",
                "train.batch_size",
                not_scalar(4, "possibly merged in with `<<`"),
            ),
            (
                "base: &base\n  batch_size: 8\ntrain:\n  <<: *base\n",
                "base.batch_size",
                not_scalar(2, "shared through the YAML anchor &base"),
            ),
            (
                "base: &base {batch_size: 8}\ntrain: *base\n",
                "train.batch_size",
                not_scalar(2, "inside a YAML alias (*base)"),
            ),
            (
                "note: |\n  one\n  two\n",
                "note",
                not_scalar(1, "a block scalar"),
            ),
            ("note: >-\n  one\n", "note", not_scalar(1, "a block scalar")),
            (
                "note: one\n  two\nx: 1\n",
                "note",
                not_scalar(1, "a plain string spread over several lines"),
            ),
            (
                "note: \"one\n  two\"\n",
                "note",
                not_scalar(1, "a quoted string spread over several lines"),
            ),
            (
                "note: \"one \\\n  two\"\n",
                "note",
                not_scalar(1, "a quoted string spread over several lines"),
            ),
            (
                "note: 'one\n  two'\n",
                "note",
                not_scalar(1, "a quoted string spread over several lines"),
            ),
            (
                "seed: !!str 8\n",
                "seed",
                not_scalar(1, "a tagged value (!!str)"),
            ),
            (
                "seed: &s !mine 8\n",
                "seed",
                not_scalar(1, "a tagged value (!mine)"),
            ),
            (
                "t: {a: x\n  y, b: 1}\n",
                "t.a",
                not_scalar(1, "a plain string spread over several lines"),
            ),
            ("seed:\n", "seed", not_scalar(1, "null")),
            ("seed: ~ # none\n", "seed", not_scalar(1, "null")),
            (
                "a: 1\nb: 2\na: 3\n",
                "a",
                not_scalar(3, "given twice in the same mapping"),
            ),
            (
                "epochs: 10\n---\nbatch_size: 8\n",
                "batch_size",
                not_scalar(3, "in document 2 of the file"),
            ),
        ];
        for (text, key, expected) in rows {
            let got = locate(text, key);
            match (&got, &expected) {
                (Err(EditError::NotFound { key: k }), Ok(())) => assert_eq!(k, key),
                (Err(EditError::NotScalar { key: k, line, what }), Err((want_line, want))) => {
                    assert_eq!(k, key);
                    assert_eq!(line, want_line, "{text:?} {key}: {what}");
                    assert!(what.starts_with(want.as_str()), "{text:?} {key}: {what}");
                }
                _ => panic!("{text:?} {key}: got {got:?}, wanted {expected:?}"),
            }
        }
    }

    #[test]
    fn a_file_that_is_not_yaml_is_a_syntax_error_naming_the_place() {
        for text in ["a: [1, 2\n", "a: 'open\n", "a: 1\n b: 2\n", "a:\tb: c: d\n"] {
            match locate(text, "a") {
                Err(EditError::Syntax { format, detail }) => {
                    assert_eq!(format, "YAML");
                    assert!(detail.contains(" at line "), "{text:?}: {detail}");
                    assert!(!detail.contains("byte"), "{text:?}: {detail}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn renders_values_in_yaml_spelling() {
        // (value, old text, new text)
        let rows = [
            (int(8), "16", "8"),
            (Scalar::Bool(true), "False", "true"),
            (Scalar::Bool(false), "on", "false"),
            (Scalar::Float(1.0), "0.5", "1.0"),
            (Scalar::Float(1.0), "1.", "1."),
            (Scalar::Float(0.5), "+.5", "+.5"),
            (Scalar::Float(f64::NEG_INFINITY), "-.INF", "-.INF"),
            (Scalar::Float(1e-5), "1e-4", "0.00001"),
            (Scalar::Float(f64::INFINITY), "1.0", ".inf"),
            (Scalar::Float(f64::NEG_INFINITY), "1.0", "-.inf"),
            (Scalar::Float(f64::NAN), "1.0", ".nan"),
            (Scalar::Float(f64::NAN), ".NaN", ".NaN"),
            (int(255), "0xff", "0xff"),
            (Scalar::Bool(true), "yes", "yes"),
            (string("adamw"), "adam", "adamw"),
            (string(""), "adam", "\"\""),
            (string("1e-4"), "adam", "\"1e-4\""),
            (string("null"), "adam", "\"null\""),
            (string("~"), "adam", "\"~\""),
            (string("-x"), "adam", "\"-x\""),
            (string("*x"), "adam", "\"*x\""),
            (string("a #b"), "adam", "\"a #b\""),
            (string("a,b"), "adam", "\"a,b\""),
            (string(" lead"), "adam", "\" lead\""),
            (string("tab\there"), "'x'", "\"tab\\there\""),
            (string("bell\u{7}"), "\"x\"", "\"bell\\x07\""),
            (string("ls\u{2028}"), "\"x\"", "\"ls\\u2028\""),
            (string("\"q\""), "'x'", "'\"q\"'"),
            (string("caf\u{e9}"), "\"caf\\u00e9\"", "\"caf\\u00e9\""),
        ];
        for (value, old, want) in rows {
            assert_eq!(render(&value, old), want, "{value:?} over {old:?}");
            // Whatever it writes reads back as the value.
            let back = read_alone(want).expect("the rendering is one scalar");
            assert!(Scalar::same(&back, &value), "{want:?} reads as {back:?}");
        }
    }
}
