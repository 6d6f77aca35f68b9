//! The HTML page of `oomguard report --html FILE`, and `report.html`, which a run writes into its
//! run directory when it ends: self-contained (the chart inlined as SVG, then the attempts table,
//! for a Slurm job each attempt's peak per node, and where the probe saw steps each attempt's
//! steps, over time too), with no script and no external resource.
//!
//! It renders and writes the page only; the report is loaded by [`crate::tell::report`] and the
//! chart drawn by [`crate::tell::report::chart`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::tell::report::chart::CHART_COLUMNS;
use crate::tell::report::samples::{read_samples, ChartRows};
use crate::tell::report::{build, from_summary, unix_s, RunReport, SummaryIn, COLUMNS};

impl RunReport {
    /// The self-contained HTML page: the chart inlined as SVG, then the table. No script, no
    /// external resource.
    pub fn html(&self) -> String {
        let mut out = String::new();
        let title = format!("oomguard report: {}", self.command.join(" "));
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{}</title>\n<style>\
             body{{font-family:sans-serif;margin:1.5em;color:#222;background:#fff}}\
             table{{border-collapse:collapse;margin-top:1em}}\
             th,td{{border:1px solid #bbb;padding:.25em .6em;text-align:right;vertical-align:top}}\
             td.t,th.t{{text-align:left}} code{{font-size:90%}}\
             </style></head><body>\n<h1>oomguard report</h1>\n<p><code>{}</code></p>\n<p>{}</p>\n",
            escape(&title),
            escape(&self.command.join(" ")),
            escape(&format!(
                "{} — run directory {}",
                self.result_line(),
                self.run_dir
            )),
        );
        if let Some(note) = &self.samples_note {
            let _ = writeln!(out, "<p>{}</p>", escape(note));
        }
        out.push_str(&self.svg());
        out.push_str("\n<table>\n<tr>");
        for (i, c) in COLUMNS.iter().enumerate() {
            let class = if matches!(i, 1 | 2) {
                " class=\"t\""
            } else {
                ""
            };
            let _ = write!(out, "<th{class}>{}</th>", escape(c));
        }
        out.push_str("<th class=\"t\">evidence</th></tr>\n");
        for a in &self.attempts {
            out.push_str("<tr>");
            for (i, cell) in a.cells().iter().enumerate() {
                let class = if matches!(i, 1 | 2) {
                    " class=\"t\""
                } else {
                    ""
                };
                let _ = write!(out, "<td{class}>{}</td>", escape(cell));
            }
            let _ = writeln!(out, "<td class=\"t\">{}</td></tr>", escape(&a.evidence));
        }
        out.push_str("</table>\n");
        // A job whose Slurm tasks ran on several nodes: which node held how much at most.
        for a in &self.attempts {
            if let Some(peaks) = self.slurm_peaks_text(a.attempt) {
                let _ = writeln!(
                    out,
                    "<p>attempt {}, peak per node: {}</p>",
                    a.attempt,
                    escape(&peaks)
                );
            }
            if let Some(steps) = a.steps_text() {
                let _ = writeln!(out, "<p>attempt {}: {}</p>", a.attempt, escape(&steps));
            }
            if let Some(steps) = self.steps_over_time_text(a) {
                let _ = writeln!(
                    out,
                    "<p>attempt {}, steps over time: {}</p>",
                    a.attempt,
                    escape(&steps)
                );
            }
        }
        if let Some(compared) = self.throughput_text() {
            let _ = writeln!(out, "<p>samples/s by setting: {}</p>", escape(&compared));
        }
        out.push_str("</body></html>\n");
        out
    }
}

/// Text for HTML element content and attributes; control characters written as escapes
/// ([`crate::output::console::printable`]), so the page shown as text (`cat`, `less`) drives no
/// terminal either.
fn escape(text: &str) -> String {
    let text = crate::output::console::printable(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes `report.html` into a run directory at the end of a run, from the run's own
/// summary.json text (so a summary.json the disk refused still makes a page); returns its path.
/// A page cut short (a full disk) is removed.
///
/// `files` is the directory to read and write in (a run's pinned `/proc/self/fd/N`), `dir` the
/// one to name on the page and in messages.
pub fn write_html(files: &Path, dir: &Path, summary_json: &[u8]) -> Result<PathBuf, String> {
    let text = String::from_utf8_lossy(summary_json);
    let mut report = for_chart(files, &text)?;
    report.run_dir = dir.display().to_string();
    let shown = dir.join("report.html");
    let path = files.join("report.html");
    // Created, never replaced: the run directory was checked free of it before the run, so
    // one there now is someone else's file.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("cannot create {}: {e}", shown.display()))?;
    if let Err(e) = std::io::Write::write_all(&mut file, report.html().as_bytes()) {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(format!("cannot write {}: {e}", shown.display()));
    }
    Ok(shown)
}

/// [`from_summary`] for the page a run writes at its end: of a long run's samples it keeps
/// only what the chart can show ([`ChartRows`]), so the memory this takes at the end of a
/// week at `--interval 1s` (600,000 rows) stays that of a few thousand rows.
fn for_chart(dir: &Path, summary_text: &str) -> Result<RunReport, String> {
    let summary: SummaryIn = serde_json::from_str(summary_text).map_err(|e| e.to_string())?;
    let first = summary.attempts.first().and_then(|a| unix_s(&a.started_at));
    let last = summary
        .attempts
        .last()
        .and_then(|a| Some(unix_s(&a.started_at)? + a.duration_s.max(0.0)));
    let (Some(first), Some(last)) = (first, last) else {
        return from_summary(dir, summary_text);
    };
    let mut rows = ChartRows::new(first, (last + 1.0 - first) / CHART_COLUMNS);
    let read = read_samples(dir, |row| rows.push(row));
    let mut report = build(dir, summary, rows.finish());
    report.samples_note = read.note();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(escape("a\u{1b}[2J\u{7}"), "a\\u{1b}[2J\\u{7}");
    }

    #[test]
    fn the_page_a_run_writes_at_its_end_draws_each_node_of_a_long_run() {
        // A day at 1 s of a two-node job, each node peaking once: the page keeps only the rows
        // its chart shows, and with them each node's line, legend and peak.
        let dir = tempfile::tempdir().unwrap();
        let summary = serde_json::json!({
            "outcome": "succeeded",
            "command": ["srun", "python3"],
            "attempts": [{"attempt": 1, "cause": "ok", "exit_code": 0, "signal": null,
                          "started_at": "2025-01-01T00:00:00Z", "duration_s": 86_400.0}],
        });
        let mib = 1u64 << 20;
        let mut csv = String::from("unix_time,attempt,tree_rss_bytes,slurm_parts\n");
        for t in 0..86_400u64 {
            let n1 = if t == 40_000 {
                3 * 1024 * mib
            } else {
                100 * mib
            };
            let n2 = if t == 70_001 {
                2 * 1024 * mib
            } else {
                200 * mib
            };
            csv.push_str(&format!(
                "{}.000,1,{},node:n1={n1};node:n2={n2}\n",
                1_735_689_600 + t,
                mib
            ));
        }
        std::fs::write(dir.path().join("samples.csv"), csv).unwrap();
        let summary = summary.to_string();
        let page = write_html(dir.path(), dir.path(), summary.as_bytes()).unwrap();
        let html = std::fs::read_to_string(page).unwrap();
        for legend in ["node n1 (Slurm tasks)", "node n2 (Slurm tasks)"] {
            assert_eq!(html.matches(legend).count(), 1, "{legend}");
        }
        assert!(
            html.contains("<p>attempt 1, peak per node: n1 3.0 GiB, n2 2.0 GiB</p>"),
            "each node's peak survives the thinning"
        );
        let report = for_chart(dir.path(), &summary).unwrap();
        assert!(report.timeline.len() < 10_000, "{}", report.timeline.len());
    }
}
