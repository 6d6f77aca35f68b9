//! samples.csv read back for `oomguard report`: its rows parsed by the header's column names
//! into [`TimelinePoint`]s (a column an older samples.csv lacks, such as `steps`, is unknown in
//! every row; a
//! quoted text cell, `gpu_neighbours` or `slurm_parts`, is one cell), streamed so a long run's
//! file is never held whole, and thinned to what a chart can show (`ChartRows`) for the page a
//! run writes at its end. `slurm_parts` becomes each point's [`PlaceBytes`]: a part that does
//! not parse is skipped, never the row, and each place is allocated once per read (a point holds
//! a pointer to it), at most [`SLURM_PLACES_MAX`] of them.
//!
//! It reads only; the file is written by [`crate::remember::record::samples`], and the report built
//! from the rows is [`crate::tell::report`]'s.

use std::io::{BufRead, Read};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::observe::sampler::SlurmPlace;

/// One row of samples.csv, in seconds since the run's first attempt started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub t_s: f64,
    pub attempt: u32,
    pub rss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub gpu_bytes: Option<u64>,
    pub cgroup_bytes: Option<u64>,
    /// What other processes (a shared card's neighbours) held on the job's cards; `None` where
    /// unknown (no GPU reading, or a samples.csv from before the column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_neighbours_bytes: Option<u64>,
    /// The driver's own share of those cards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_driver_bytes: Option<u64>,
    /// The capacity of those cards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_total_bytes: Option<u64>,
    /// Where the job's Slurm tasks held their memory, place by place (samples.csv's
    /// `slurm_parts`); empty for a job without srun steps and a samples.csv from before the
    /// column. A box, not a `Vec`: 8 bytes less in every row of every run.
    #[serde(default, skip_serializing_if = "no_parts")]
    pub slurm_parts: Box<[PlaceBytes]>,
    /// The optimizer steps the attempt's job had taken by this tick (samples.csv's `steps`);
    /// `None` without a probe, before the first step, or in a samples.csv from before the
    /// column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
}

/// What one Slurm place (a node's step cgroups, or a step's tasks as sstat sums them) held at
/// one tick. In `--json`, `{"place": "node:n1", "bytes": 123}`, the place as samples.csv names
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PlaceBytesJson", into = "PlaceBytesJson")]
pub struct PlaceBytes {
    /// Shared by every point of the read that names the place: one allocation per place, not
    /// per row.
    pub place: Arc<SlurmPlace>,
    pub bytes: u64,
}

/// [`PlaceBytes`] as JSON has it.
#[derive(Serialize, Deserialize)]
struct PlaceBytesJson {
    place: String,
    bytes: u64,
}

impl From<PlaceBytes> for PlaceBytesJson {
    fn from(part: PlaceBytes) -> PlaceBytesJson {
        PlaceBytesJson {
            place: part.place.to_string(),
            bytes: part.bytes,
        }
    }
}

impl TryFrom<PlaceBytesJson> for PlaceBytes {
    type Error = String;

    fn try_from(json: PlaceBytesJson) -> Result<PlaceBytes, String> {
        let place = json.place.parse().map_err(|_| {
            format!(
                "{:?} is no Slurm place (node:NAME or step:JOB.STEP)",
                json.place
            )
        })?;
        Ok(PlaceBytes {
            place: Arc::new(place),
            bytes: json.bytes,
        })
    }
}

/// Whether a point has no Slurm parts (left out of its JSON, as a samples.csv without them).
fn no_parts(parts: &[PlaceBytes]) -> bool {
    parts.is_empty()
}

impl TimelinePoint {
    /// The tree's own memory: PSS (shared pages once) where read, else RSS.
    pub(super) fn tree_bytes(&self) -> Option<u64> {
        self.pss_bytes.or(self.rss_bytes)
    }

    /// The top of the neighbours' band on the chart: the job's GPU memory (none where
    /// unknown) with the neighbours' on top; `None` where no neighbour held anything.
    pub(super) fn gpu_stacked_bytes(&self) -> Option<u64> {
        let neighbours = self.gpu_neighbours_bytes.filter(|b| *b > 0)?;
        Some(self.gpu_bytes.unwrap_or(0).saturating_add(neighbours))
    }

    /// What the Slurm tasks at `place` held at this tick; `None` where the row does not name it.
    pub(super) fn slurm_bytes(&self, place: &SlurmPlace) -> Option<u64> {
        self.slurm_parts
            .iter()
            .find(|p| *p.place == *place)
            .map(|p| p.bytes)
    }
}

/// The most Slurm places one read of samples.csv keeps. A job's parts are a few (its node read
/// here, a step or two sstat sums, a node per slurmd of a host that runs several); past this
/// many (a samples.csv someone wrote) parts naming another place are skipped, so a point holds
/// at most this many parts (16 bytes each) and the chart draws at most this many lines.
pub const SLURM_PLACES_MAX: usize = 8;

/// The places one read of samples.csv has met, each allocated once and shared by the points
/// that name it.
#[derive(Default)]
struct Places {
    /// Each place with the text that first named it.
    known: Vec<(String, Arc<SlurmPlace>)>,
}

impl Places {
    /// The place `text` names; `None` where it names none, or a new one past
    /// [`SLURM_PLACES_MAX`].
    fn get(&mut self, text: &str) -> Option<Arc<SlurmPlace>> {
        // By text first: the rows of a run name their places the same way every tick.
        if let Some((_, place)) = self.known.iter().find(|(t, _)| t == text) {
            return Some(Arc::clone(place));
        }
        let parsed: SlurmPlace = text.parse().ok()?;
        if let Some((_, place)) = self.known.iter().find(|(_, p)| **p == parsed) {
            return Some(Arc::clone(place));
        }
        if self.known.len() >= SLURM_PLACES_MAX {
            return None;
        }
        let place = Arc::new(parsed);
        self.known.push((text.to_string(), Arc::clone(&place)));
        Some(place)
    }

    /// A `slurm_parts` cell's parts (`node:n1=123;step:12.0=789`), in its order. A part that
    /// does not parse (no `=`, no place, bytes that are no number) is skipped, and so is a
    /// place the cell already named: the rest of the cell and the row still count.
    fn parts(&mut self, cell: &str) -> Box<[PlaceBytes]> {
        let mut parts: Vec<PlaceBytes> = Vec::new();
        for text in cell.split(';') {
            let Some((place, bytes)) = text.rsplit_once('=') else {
                continue;
            };
            // The bytes first: a part that is not whole takes no place's room.
            let Ok(bytes) = bytes.parse::<u64>() else {
                continue;
            };
            let Some(place) = self.get(place) else {
                continue;
            };
            if parts.iter().all(|p| p.place != place) {
                parts.push(PlaceBytes { place, bytes });
            }
        }
        parts.into_boxed_slice()
    }
}

/// The longest samples.csv line read: a real row is numbers and one cell of the neighbours on
/// the job's cards (about 40 bytes each), well under 1 KiB; a longer line (a file someone
/// replaced, a line that never ends) is skipped, never held whole.
pub const LINE_MAX_BYTES: usize = 64 * 1024;

/// The most of samples.csv read: eight weeks at `--interval 1s`, a week at 100 ms. Reading is
/// streamed, so this bounds the time a replaced file costs, not the memory.
pub const READ_MAX_BYTES: u64 = 512 << 20;

/// How a read of samples.csv went beyond its rows: what it skipped and where it stopped, for
/// the report's note.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SamplesRead {
    /// Lines longer than [`LINE_MAX_BYTES`], skipped.
    pub(super) too_long: u64,
    /// The read stopped at [`READ_MAX_BYTES`] with more in the file.
    pub(super) cut_at_bytes: bool,
    /// The taker of the rows stopped the read (`Some(rows it took)`): it holds no more.
    pub(super) cut_at_rows: Option<u64>,
}

impl SamplesRead {
    /// `samples.csv: 1 line longer than 64 KiB skipped; read stopped at 512 MiB`, or `None`
    /// when every row was read.
    pub(super) fn note(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.too_long > 0 {
            parts.push(format!(
                "{} line{} longer than {} skipped",
                self.too_long,
                if self.too_long == 1 { "" } else { "s" },
                crate::observe::units::human_bytes(LINE_MAX_BYTES as u64)
            ));
        }
        if self.cut_at_bytes {
            parts.push(format!(
                "read stopped at {}; later rows are not shown",
                crate::observe::units::human_bytes(READ_MAX_BYTES)
            ));
        }
        if let Some(rows) = self.cut_at_rows {
            parts.push(format!(
                "read stopped after {rows} rows; later rows are not shown"
            ));
        }
        (!parts.is_empty()).then(|| format!("samples.csv: {}", parts.join("; ")))
    }
}

/// Streams `dir`'s samples.csv into `row`, line by line, until `row` says to stop. It is
/// optional: an attempt that died before its first tick has no rows. Bounded whatever the file
/// holds: lines at most [`LINE_MAX_BYTES`] (longer ones skipped), at most [`READ_MAX_BYTES`].
pub(super) fn read_samples(dir: &Path, row: impl FnMut(Row) -> ControlFlow<()>) -> SamplesRead {
    read_samples_within(&dir.join("samples.csv"), READ_MAX_BYTES, row)
}

/// [`read_samples`] of the file at `path`, at most `max_bytes` of it.
fn read_samples_within(
    path: &Path,
    max_bytes: u64,
    row: impl FnMut(Row) -> ControlFlow<()>,
) -> SamplesRead {
    // A FIFO or a device there is no run's samples.
    let Ok(file) = crate::guard::fsutil::open_regular(path) else {
        return SamplesRead::default();
    };
    let mut reader = std::io::BufReader::new(file.take(max_bytes));
    let mut read = parse_samples(&mut reader, row);
    if reader.get_ref().limit() == 0 && read.cut_at_rows.is_none() {
        // The cap was reached: cut only if the file goes on.
        let mut one = [0u8; 1];
        read.cut_at_bytes = reader.into_inner().into_inner().read(&mut one).unwrap_or(0) > 0;
    }
    read
}

/// A samples.csv row: unix time and the columns the chart uses.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    pub(super) unix_time_s: f64,
    pub(super) point: TimelinePoint,
}

/// What [`bounded_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// A whole line, in the buffer without its newline.
    Whole,
    /// A line longer than the bound: consumed to its end (or the file's), never held.
    TooLong,
    /// The file ends without a newline: a row still being written, or cut by the read's cap.
    Unended,
    /// Nothing more.
    End,
}

/// Reads one line of at most `max_bytes` into `line`. std's `read_until` and `skip_until`
/// find the newline (with its optimised memchr, even in a debug build) and never hold more
/// than the bound.
fn bounded_line(
    input: &mut impl BufRead,
    line: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<Line> {
    line.clear();
    let bound = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    if (&mut *input).take(bound).read_until(b'\n', line)? == 0 {
        return Ok(Line::End);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        return Ok(Line::Whole);
    }
    if line.len() > max_bytes {
        line.clear();
        input.skip_until(b'\n')?;
        return Ok(Line::TooLong);
    }
    Ok(Line::Unended)
}

/// Parses samples.csv by its header's column names (later versions add columns at the end);
/// rows that do not parse are skipped (a row cut short by a crash), and so are lines longer
/// than [`LINE_MAX_BYTES`] (counted).
fn parse_samples(
    mut csv: impl BufRead,
    mut row: impl FnMut(Row) -> ControlFlow<()>,
) -> SamplesRead {
    let mut read = SamplesRead::default();
    let mut line = Vec::new();
    let header = loop {
        match bounded_line(&mut csv, &mut line, LINE_MAX_BYTES) {
            Ok(Line::Whole) => break String::from_utf8_lossy(&line).into_owned(),
            Ok(Line::TooLong) => read.too_long += 1,
            Ok(Line::Unended | Line::End) | Err(_) => return read,
        }
    };
    let names: Vec<String> = cells(header.trim_end())
        .into_iter()
        .map(String::from)
        .collect();
    let col = |name: &str| names.iter().position(|n| *n == name);
    let (Some(time), Some(attempt)) = (col("unix_time"), col("attempt")) else {
        return read;
    };
    // Columns a samples.csv of an older version lacks are unknown in every row.
    let [rss, pss, swap, gpu, cgroup, neighbours, driver, total] = [
        "tree_rss_bytes",
        "tree_pss_bytes",
        "tree_swap_bytes",
        "gpu_used_bytes",
        "cgroup_bytes",
        "gpu_neighbours_bytes",
        "gpu_driver_bytes",
        "gpu_total_bytes",
    ]
    .map(col);
    let slurm_parts = col("slurm_parts");
    let steps = col("steps");
    let mut places = Places::default();
    let mut taken = 0u64;
    loop {
        match bounded_line(&mut csv, &mut line, LINE_MAX_BYTES) {
            Ok(Line::Whole) => {}
            Ok(Line::TooLong) => {
                read.too_long += 1;
                continue;
            }
            // A row without its newline is not whole: the next tick's, or cut by the cap.
            Ok(Line::Unended | Line::End) | Err(_) => return read,
        }
        // A line that is not text is no row of ours.
        let Ok(text) = std::str::from_utf8(&line) else {
            continue;
        };
        let cells = cells(text.trim_end());
        let num = |i: Option<usize>| i.and_then(|i| cells.get(i)?.parse::<u64>().ok());
        let parsed = (|| {
            Some(Row {
                unix_time_s: cells.get(time)?.parse().ok()?,
                point: TimelinePoint {
                    t_s: 0.0,
                    attempt: cells.get(attempt)?.parse().ok()?,
                    rss_bytes: num(rss),
                    pss_bytes: num(pss),
                    swap_bytes: num(swap),
                    gpu_bytes: num(gpu),
                    cgroup_bytes: num(cgroup),
                    gpu_neighbours_bytes: num(neighbours),
                    gpu_driver_bytes: num(driver),
                    gpu_total_bytes: num(total),
                    slurm_parts: slurm_parts
                        .and_then(|i| cells.get(i))
                        .map(|cell| places.parts(cell))
                        .unwrap_or_default(),
                    steps: num(steps),
                },
            })
        })();
        if let Some(parsed) = parsed {
            if row(parsed).is_break() {
                read.cut_at_rows = Some(taken);
                return read;
            }
            taken += 1;
        }
    }
}

/// A samples.csv line's cells. Numbers need no quoting, but a text cell (`gpu_neighbours`,
/// `slurm_parts`) is quoted as CSV quotes it where it holds a `,` or a `"`: such a cell is one
/// cell, unquoted, so the columns after it keep their places. Rows are single lines (no cell holds
/// a newline).
fn cells(line: &str) -> Vec<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    if !line.contains('"') {
        return line.split(',').map(Cow::Borrowed).collect();
    }
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => out.push(Cow::Owned(std::mem::take(&mut cell))),
            (_, c) => cell.push(c),
        }
    }
    out.push(Cow::Owned(cell));
    out
}

/// The rows a chart `CHART_COLUMNS` wide can show: of each attempt's rows in each column of
/// time, the first and those holding each series' highest value (so every peak is drawn), in
/// time order. A column's rows are held only until the next column starts, and at most
/// [`CHART_ROWS_MAX`] are kept.
pub(super) struct ChartRows {
    origin_s: f64,
    column_s: f64,
    column: Option<(u32, i64)>,
    pending: Vec<Row>,
    kept: Vec<Row>,
}

/// The most rows [`ChartRows`] keeps. A run's rows come in time order, one attempt after
/// another, so it keeps at most six per column and attempt (a few thousand); rows that jump
/// back and forth between attempts or times (a samples.csv someone wrote) would each start a
/// column: past this many, the chart stops taking them.
pub(super) const CHART_ROWS_MAX: usize = 64 * 1024;

/// How many rows of one column [`ChartRows`] holds before folding them to the few it keeps.
const PENDING_MAX: usize = 64;

impl ChartRows {
    pub(super) fn new(origin_s: f64, column_s: f64) -> ChartRows {
        ChartRows {
            origin_s,
            column_s: column_s.max(f64::MIN_POSITIVE),
            column: None,
            pending: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Takes `row`; `Break` once [`CHART_ROWS_MAX`] rows are kept (the row is not taken).
    pub(super) fn push(&mut self, row: Row) -> ControlFlow<()> {
        let column = (
            row.point.attempt,
            ((row.unix_time_s - self.origin_s) / self.column_s).floor() as i64,
        );
        if self.column != Some(column) {
            self.flush();
            if self.kept.len() >= CHART_ROWS_MAX {
                return ControlFlow::Break(());
            }
            self.column = Some(column);
        }
        self.pending.push(row);
        if self.pending.len() >= PENDING_MAX {
            // Rows that all fall in one column (a samples.csv someone wrote) are folded as
            // they come: what the column keeps of them is kept of these few.
            self.reduce();
        }
        ControlFlow::Continue(())
    }

    /// The column's rows become those it keeps, in time order.
    fn reduce(&mut self) {
        let series: [fn(&TimelinePoint) -> Option<u64>; 4] = [
            TimelinePoint::tree_bytes,
            |p| p.swap_bytes,
            |p| p.gpu_bytes,
            |p| p.cgroup_bytes,
        ];
        let mut chosen: Vec<usize> = series
            .iter()
            .filter_map(|value| {
                (0..self.pending.len()).max_by_key(|&i| value(&self.pending[i].point))
            })
            .collect();
        // The top of the neighbours' band, only among rows that have one: a run without
        // neighbours keeps the rows it always did.
        chosen.extend(
            (0..self.pending.len())
                .filter_map(|i| Some((self.pending[i].point.gpu_stacked_bytes()?, i)))
                .max_by_key(|&(bytes, _)| bytes)
                .map(|(_, i)| i),
        );
        // Each Slurm place's peak, so every node's line keeps its peaks too; a run without
        // Slurm parts has no place and keeps the rows it always did.
        let mut places: Vec<&Arc<SlurmPlace>> = Vec::new();
        for part in self.pending.iter().flat_map(|r| r.point.slurm_parts.iter()) {
            if !places.iter().any(|p| **p == part.place) {
                places.push(&part.place);
            }
        }
        chosen.extend(places.iter().filter_map(|place| {
            (0..self.pending.len())
                .filter_map(|i| Some((self.pending[i].point.slurm_bytes(place)?, i)))
                .max_by_key(|&(bytes, _)| bytes)
                .map(|(_, i)| i)
        }));
        if !self.pending.is_empty() {
            chosen.push(0);
        }
        chosen.sort_unstable();
        chosen.dedup();
        let pending = std::mem::take(&mut self.pending);
        self.pending = pending
            .into_iter()
            .enumerate()
            .filter(|(i, _)| chosen.binary_search(i).is_ok())
            .map(|(_, row)| row)
            .collect();
    }

    fn flush(&mut self) {
        self.reduce();
        self.kept.append(&mut self.pending);
    }

    pub(super) fn finish(mut self) -> Vec<Row> {
        self.flush();
        self.kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_parse_by_header_name_and_skip_broken_rows() {
        let csv = "unix_time,attempt,tree_rss_bytes,tree_pss_bytes,tree_swap_bytes,sys_available_bytes,gpu_used_bytes,cgroup_bytes,extra\n\
                   100.5,1,2048,1024,,9,,4096,x\n\
                   garbage\n\
                   101.5,2,,,,9,77,,\n";
        let mut rows = Vec::new();
        parse_samples(csv.as_bytes(), |row| {
            rows.push(row);
            ControlFlow::Continue(())
        });
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].unix_time_s, 100.5);
        assert_eq!(rows[0].point.tree_bytes(), Some(1024));
        assert_eq!(rows[0].point.cgroup_bytes, Some(4096));
        assert_eq!(rows[1].point.attempt, 2);
        assert_eq!(rows[1].point.gpu_bytes, Some(77));
        assert_eq!(rows[1].point.tree_bytes(), None);
    }

    #[test]
    fn the_neighbours_columns_are_read_where_present_and_unknown_where_not() {
        let old = "unix_time,attempt,gpu_used_bytes\n1.0,1,5\n";
        let new = "unix_time,attempt,gpu_used_bytes,gpu_neighbours_bytes,gpu_driver_bytes,\
                   gpu_total_bytes,gpu_neighbours\n\
                   1.0,1,5,40,1,80,\"7:a,b:40\"\n\
                   2.0,1,5,0,1,80,\n\
                   3.0,1,,,,,\n";
        // (csv, row, job, neighbours, driver, total, stacked top)
        type Want = (
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        );
        let table: [(&str, usize, Want); 4] = [
            (old, 0, (Some(5), None, None, None, None)),
            (new, 0, (Some(5), Some(40), Some(1), Some(80), Some(45))),
            (new, 1, (Some(5), Some(0), Some(1), Some(80), None)),
            (new, 2, (None, None, None, None, None)),
        ];
        for (csv, i, want) in table {
            let mut rows = Vec::new();
            parse_samples(csv.as_bytes(), |row| {
                rows.push(row);
                ControlFlow::Continue(())
            });
            let p = &rows[i].point;
            let got = (
                p.gpu_bytes,
                p.gpu_neighbours_bytes,
                p.gpu_driver_bytes,
                p.gpu_total_bytes,
                p.gpu_stacked_bytes(),
            );
            assert_eq!(got, want, "row {i} of {csv}");
        }
    }

    /// Every row of `csv`, and how the read went.
    fn all_rows(csv: &[u8], max_bytes: u64) -> (Vec<Row>, SamplesRead) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        std::fs::write(&path, csv).unwrap();
        let mut rows = Vec::new();
        let read = read_samples_within(&path, max_bytes, |row| {
            rows.push(row);
            ControlFlow::Continue(())
        });
        (rows, read)
    }

    #[test]
    fn long_lines_are_skipped_and_the_read_stops_at_its_cap() {
        let long = "9".repeat(LINE_MAX_BYTES + 1);
        let good = "unix_time,attempt\n1.0,1\n";
        // (file, cap, attempts read, lines skipped, cut at the cap)
        let table: [(String, u64, Vec<u32>, u64, bool); 6] = [
            (format!("{good}2.0,2\n"), 1 << 20, vec![1, 2], 0, false),
            // A line longer than the bound, whole or without its newline, is skipped.
            (
                format!("{good}{long}\n3.0,3\n"),
                1 << 20,
                vec![1, 3],
                1,
                false,
            ),
            (format!("{good}{long}"), 1 << 20, vec![1], 1, false),
            // A row without its newline is not whole (still being written, or cut).
            (format!("{good}2.0,22"), 1 << 20, vec![1], 0, false),
            // The cap falls inside the third row: it is not taken as `2.0,2`.
            (
                format!("{good}2.0,23\n"),
                good.len() as u64 + 5,
                vec![1],
                0,
                true,
            ),
            // The cap at the file's end cuts nothing.
            (good.to_string(), good.len() as u64, vec![1], 0, false),
        ];
        for (csv, cap, attempts, too_long, cut) in table {
            let (rows, read) = all_rows(csv.as_bytes(), cap);
            let got: Vec<u32> = rows.iter().map(|r| r.point.attempt).collect();
            let what = &csv[..csv.len().min(40)];
            assert_eq!(got, attempts, "{what}");
            assert_eq!(
                (read.too_long, read.cut_at_bytes),
                (too_long, cut),
                "{what}"
            );
            assert_eq!(read.note().is_some(), too_long > 0 || cut, "{what}");
        }
        // Not text: that row alone is skipped.
        let (rows, _) = all_rows(b"unix_time,attempt\n1.0,\xff\n2.0,2\n", 1 << 20);
        assert_eq!(rows.len(), 1);
    }

    #[test]
    fn the_note_says_what_was_skipped_and_where_the_read_stopped() {
        let read = SamplesRead {
            too_long: 2,
            cut_at_bytes: true,
            cut_at_rows: None,
        };
        assert_eq!(
            read.note().unwrap(),
            "samples.csv: 2 lines longer than 64.0 KiB skipped; read stopped at 512.0 MiB; \
             later rows are not shown"
        );
        let rows = SamplesRead {
            cut_at_rows: Some(7),
            ..SamplesRead::default()
        };
        assert_eq!(
            rows.note().unwrap(),
            "samples.csv: read stopped after 7 rows; later rows are not shown"
        );
        assert_eq!(SamplesRead::default().note(), None);
    }

    #[test]
    fn chart_rows_stop_taking_rows_past_their_bound() {
        // Rows that alternate between two attempts each start a column.
        let mut rows = ChartRows::new(0.0, 1.0);
        let mut taken = 0;
        for t in 0..(CHART_ROWS_MAX as u32 * 2) {
            let row = Row {
                unix_time_s: 0.0,
                point: TimelinePoint {
                    t_s: 0.0,
                    attempt: t % 2,
                    rss_bytes: None,
                    pss_bytes: None,
                    swap_bytes: None,
                    gpu_bytes: None,
                    cgroup_bytes: None,
                    gpu_neighbours_bytes: None,
                    gpu_driver_bytes: None,
                    gpu_total_bytes: None,
                    slurm_parts: Box::default(),
                    steps: None,
                },
            };
            if rows.push(row).is_break() {
                break;
            }
            taken += 1;
        }
        assert_eq!(taken, CHART_ROWS_MAX);
        assert_eq!(rows.finish().len(), CHART_ROWS_MAX);
    }

    #[test]
    fn cells_split_as_csv_quotes_them() {
        let table: [(&str, &[&str]); 6] = [
            ("1,,3", &["1", "", "3"]),
            ("", &[""]),
            ("1,\"a,b\",3", &["1", "a,b", "3"]),
            ("\"say \"\"hi\"\"\",2", &["say \"hi\"", "2"]),
            ("1,\"\"", &["1", ""]),
            // A quote never closed: the rest of the line is the cell.
            ("1,\"a,b", &["1", "a,b"]),
        ];
        for (line, want) in table {
            let got = cells(line);
            assert_eq!(got, want, "{line}");
        }
    }

    #[test]
    fn what_the_run_writes_the_report_reads() {
        use crate::observe::gpu::{DeviceShare, JobGpu, Neighbour};
        let dir = tempfile::tempdir().unwrap();
        let run = crate::remember::record::run_dir::RunDir::create(
            Some(&dir.path().join("r")),
            "p",
            false,
        )
        .unwrap();
        let mut csv = run.open_samples().unwrap();
        let share = DeviceShare {
            index: 0,
            total_bytes: 80,
            used_bytes: 70,
            job_bytes: Some(20),
            neighbours: vec![Neighbour {
                pid: 9,
                used_bytes: Some(45),
                who: Some(crate::observe::gpu::who::Who {
                    user: "x,y".into(),
                    command: "c".into(),
                }),
            }],
            neighbours_bytes: 45,
            driver_bytes: 5,
            ..DeviceShare::default()
        };
        let sample = crate::observe::sampler::Sample {
            unix_time_s: 10.0,
            attempt: 2,
            gpu: Some(JobGpu {
                job_bytes: Some(20),
                job_bytes_by_device: vec![(0, Some(20))],
                devices: vec![share],
                ..JobGpu::default()
            }),
            cgroup_bytes: Some(3),
            slurm_parts: vec![
                crate::observe::sampler::SlurmPart {
                    place: SlurmPlace::Node("n,1".into()),
                    bytes: 123,
                },
                crate::observe::sampler::SlurmPart {
                    place: SlurmPlace::Step(crate::observe::slurm::Step { job: 12, step: 0 }),
                    bytes: 789,
                },
            ],
            ..crate::observe::sampler::Sample::default()
        };
        csv.write(&sample, Some(1204)).unwrap();
        csv.write(&sample, None).unwrap();
        let mut rows = Vec::new();
        read_samples(run.path(), |row| {
            rows.push(row);
            ControlFlow::Continue(())
        });
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].point.steps, rows[1].point.steps),
            (Some(1204), None),
            "the steps after the quoted cell, in their place"
        );
        let p = &rows[0].point;
        assert_eq!(
            (p.attempt, p.gpu_bytes, p.cgroup_bytes),
            (2, Some(20), Some(3))
        );
        assert_eq!(
            (
                p.gpu_neighbours_bytes,
                p.gpu_driver_bytes,
                p.gpu_total_bytes
            ),
            (Some(45), Some(5), Some(80))
        );
        assert_eq!(
            parts_text(p),
            ["node:n,1=123", "step:12.0=789"],
            "the quoted cell read whole"
        );
    }

    /// A point's Slurm parts as samples.csv writes them.
    fn parts_text(p: &TimelinePoint) -> Vec<String> {
        p.slurm_parts
            .iter()
            .map(|part| format!("{}={}", part.place, part.bytes))
            .collect()
    }

    /// The rows of a samples.csv text.
    fn parsed(csv: &str) -> Vec<Row> {
        let mut rows = Vec::new();
        parse_samples(csv.as_bytes(), |row| {
            rows.push(row);
            ControlFlow::Continue(())
        });
        rows
    }

    #[test]
    fn slurm_parts_are_read_where_present_and_a_part_that_does_not_parse_is_skipped() {
        let header = "unix_time,attempt,tree_rss_bytes,slurm_parts\n";
        let many: Vec<String> = (0..SLURM_PLACES_MAX + 2)
            .map(|i| format!("node:n{i}={i}"))
            .collect();
        let table: [(&str, String, Vec<String>); 9] = [
            (
                "a samples.csv from before the column",
                "unix_time,attempt,tree_rss_bytes\n1.0,1,5\n".into(),
                vec![],
            ),
            ("no srun step", format!("{header}1.0,1,5,\n"), vec![]),
            (
                "two nodes",
                format!("{header}1.0,1,5,node:n1=123;node:n2=456\n"),
                vec!["node:n1=123".into(), "node:n2=456".into()],
            ),
            (
                "a step sstat sums",
                format!("{header}1.0,1,5,step:12.0=789\n"),
                vec!["step:12.0=789".into()],
            ),
            (
                "a quoted cell, and a column a later version adds after it",
                "unix_time,attempt,tree_rss_bytes,slurm_parts,later\n\
                 1.0,1,5,\"node:a,b=1;node:q\"\"=2\",9\n"
                    .into(),
                vec!["node:a,b=1".into(), "node:q\"=2".into()],
            ),
            (
                "garbage around a good part: each bad one skipped, never the row",
                format!(
                    "{header}1.0,1,5,node:n1=12x;bogus;=5;node:=3;step:1=2;step:a.b=1;\
                     step:+1.0=1;host:n3=1;node:n2=-1;node:n2=7;;\n"
                ),
                vec!["node:n2=7".into()],
            ),
            (
                "a place named twice in a row: the first",
                format!("{header}1.0,1,5,node:n1=1;node:n1=2;step:3.1=4;step:003.1=5\n"),
                vec!["node:n1=1".into(), "step:3.1=4".into()],
            ),
            (
                "a name with = in it: the bytes follow the last",
                format!("{header}1.0,1,5,node:a=b=3\n"),
                vec!["node:a=b=3".into()],
            ),
            (
                "more places than a read keeps: the first ones",
                format!("{header}1.0,1,5,{}\n", many.join(";")),
                many[..SLURM_PLACES_MAX].to_vec(),
            ),
        ];
        for (name, csv, want) in table {
            let rows = parsed(&csv);
            assert_eq!(rows.len(), 1, "{name}: the row is read");
            assert_eq!(rows[0].point.rss_bytes, Some(5), "{name}");
            assert_eq!(parts_text(&rows[0].point), want, "{name}");
        }
    }

    #[test]
    fn a_place_is_allocated_once_per_read_and_the_cap_holds_across_rows() {
        let mut csv = String::from("unix_time,attempt,slurm_parts\n");
        for i in 0..20 {
            csv.push_str(&format!("{i}.0,1,node:n1={i};node:extra{i}=1\n"));
        }
        let rows = parsed(&csv);
        assert_eq!(rows.len(), 20);
        let first = &rows[0].point.slurm_parts[0].place;
        assert!(rows
            .iter()
            .all(|r| Arc::ptr_eq(&r.point.slurm_parts[0].place, first)));
        // n1 and the first SLURM_PLACES_MAX - 1 others; later rows keep n1 alone.
        let places: usize = rows.iter().map(|r| r.point.slurm_parts.len() - 1).sum();
        assert_eq!(places, SLURM_PLACES_MAX - 1);
        assert_eq!(
            rows[19].point.slurm_bytes(&SlurmPlace::Node("n1".into())),
            Some(19)
        );
        // Parts that are not whole take no room: the place after them still has it.
        let mut csv = String::from("unix_time,attempt,slurm_parts\n");
        for i in 0..20 {
            csv.push_str(&format!("{i}.0,1,node:bad{i}=x;node:bad{i}\n"));
        }
        csv.push_str("20.0,1,node:good=1\n");
        let rows = parsed(&csv);
        assert_eq!(parts_text(&rows[20].point), ["node:good=1"]);
    }

    #[test]
    fn slurm_parts_round_trip_through_json_as_their_samples_csv_names() {
        let rows = parsed("unix_time,attempt,slurm_parts\n1.0,1,node:n1=3;step:12.0=4\n");
        let point = &rows[0].point;
        let json = serde_json::to_value(point).unwrap();
        assert_eq!(
            json["slurm_parts"],
            serde_json::json!([
                {"place": "node:n1", "bytes": 3},
                {"place": "step:12.0", "bytes": 4},
            ])
        );
        let back: TimelinePoint = serde_json::from_value(json).unwrap();
        assert_eq!(&back, point);
        // None, and no key: the JSON of a run without Slurm parts is what it was.
        let none = &parsed("unix_time,attempt\n1.0,1\n")[0].point;
        let json = serde_json::to_value(none).unwrap();
        assert!(json.get("slurm_parts").is_none(), "{json}");
        assert_eq!(
            &serde_json::from_value::<TimelinePoint>(json).unwrap(),
            none
        );
        let bad = serde_json::json!({
            "t_s": 0.0, "attempt": 1, "rss_bytes": null, "pss_bytes": null, "swap_bytes": null,
            "gpu_bytes": null, "cgroup_bytes": null,
            "slurm_parts": [{"place": "moon:1", "bytes": 1}],
        });
        let err = serde_json::from_value::<TimelinePoint>(bad).unwrap_err();
        assert!(err.to_string().contains("moon:1"), "{err}");
    }

    #[test]
    fn chart_rows_keep_each_slurm_places_peak() {
        let n1 = Arc::new(SlurmPlace::Node("n1".into()));
        let n2 = Arc::new(SlurmPlace::Node("n2".into()));
        let row = |t: u32, parts: Vec<(&Arc<SlurmPlace>, u64)>| Row {
            unix_time_s: f64::from(t),
            point: TimelinePoint {
                t_s: 0.0,
                attempt: 1,
                rss_bytes: Some(10),
                pss_bytes: None,
                swap_bytes: None,
                gpu_bytes: None,
                cgroup_bytes: None,
                gpu_neighbours_bytes: None,
                gpu_driver_bytes: None,
                gpu_total_bytes: None,
                slurm_parts: parts
                    .into_iter()
                    .map(|(place, bytes)| PlaceBytes {
                        place: Arc::clone(place),
                        bytes,
                    })
                    .collect(),
                steps: None,
            },
        };
        // Each node peaks at a different second of one 100 s column; n2 is read only later.
        let mut rows = ChartRows::new(0.0, 100.0);
        for t in 0..100u32 {
            let mut parts = vec![(&n1, u64::from(t == 30) * 50 + 1)];
            if t >= 50 {
                parts.push((&n2, u64::from(t == 70) * 90 + 1));
            }
            assert!(rows.push(row(t, parts)).is_continue());
        }
        let kept: Vec<f64> = rows.finish().iter().map(|r| r.unix_time_s).collect();
        // The first row, the flat series' last, and each node's peak.
        assert_eq!(kept, [0.0, 30.0, 70.0, 99.0]);
    }

    #[test]
    fn chart_rows_keep_the_neighbours_peak_and_nothing_more_without_them() {
        let row = |t: u32, neighbours: Option<u64>| Row {
            unix_time_s: f64::from(t),
            point: TimelinePoint {
                t_s: 0.0,
                attempt: 1,
                rss_bytes: Some(10),
                pss_bytes: None,
                swap_bytes: None,
                gpu_bytes: Some(100),
                cgroup_bytes: None,
                gpu_neighbours_bytes: neighbours,
                gpu_driver_bytes: None,
                gpu_total_bytes: None,
                slurm_parts: Box::default(),
                steps: None,
            },
        };
        // (neighbours by second, in one column of 100 s; the times kept)
        type Case = (fn(u32) -> Option<u64>, &'static [f64]);
        let table: [Case; 4] = [
            // Flat: the first row, and the last one as every flat series' "highest".
            (|_| None, &[0.0, 99.0]),
            (|_| Some(0), &[0.0, 99.0]),
            (|t| Some(u64::from(t == 40) * 7), &[0.0, 40.0, 99.0]),
            (|t| (t != 40).then_some(3), &[0.0, 99.0]),
        ];
        for (neighbours, want) in table {
            let mut rows = ChartRows::new(0.0, 100.0);
            for t in 0..100 {
                assert!(rows.push(row(t, neighbours(t))).is_continue());
            }
            let kept: Vec<f64> = rows.finish().iter().map(|r| r.unix_time_s).collect();
            assert_eq!(kept, want);
        }
    }

    #[test]
    fn chart_rows_keep_each_columns_first_row_and_peaks() {
        let row = |t: f64, attempt: u32, rss: u64, gpu: Option<u64>| Row {
            unix_time_s: t,
            point: TimelinePoint {
                t_s: 0.0,
                attempt,
                rss_bytes: Some(rss),
                pss_bytes: None,
                swap_bytes: None,
                gpu_bytes: gpu,
                cgroup_bytes: None,
                gpu_neighbours_bytes: None,
                gpu_driver_bytes: None,
                gpu_total_bytes: None,
                slurm_parts: Box::default(),
                steps: None,
            },
        };
        // Two days at 1s in 1,000 columns of 172.8 s; a host spike and a GPU spike.
        let mut rows = ChartRows::new(0.0, 172.8);
        for t in 0..172_800u32 {
            let rss = if t == 100_000 { 9_000 } else { 1_000 };
            let gpu = (t == 50_001).then_some(5_000).or(Some(10));
            assert!(rows.push(row(f64::from(t), 1, rss, gpu)).is_continue());
        }
        // A million rows in one column (a samples.csv someone wrote) are held a few at a
        // time, and the column still keeps its first row and its peaks.
        let mut one_column = ChartRows::new(0.0, 1e12);
        for t in 0..1_000_000u32 {
            let rss = if t == 777_777 { 9_000 } else { 1_000 };
            assert!(one_column
                .push(row(f64::from(t), 1, rss, None))
                .is_continue());
            assert!(one_column.pending.len() <= PENDING_MAX);
        }
        let kept = one_column.finish();
        assert!(kept.len() <= 3, "{}", kept.len());
        assert_eq!(kept[0].unix_time_s, 0.0);
        assert!(kept.iter().any(|r| r.point.rss_bytes == Some(9_000)));
        // An attempt boundary inside a column starts a column of its own.
        assert!(rows.push(row(172_800.5, 2, 7, None)).is_continue());
        let kept = rows.finish();
        assert!(kept.len() <= 3 * 1_001 + 1, "{}", kept.len());
        assert!(kept.iter().any(|r| r.point.rss_bytes == Some(9_000)));
        assert!(kept.iter().any(|r| r.point.gpu_bytes == Some(5_000)));
        assert!(kept.windows(2).all(|w| w[0].unix_time_s < w[1].unix_time_s));
        assert_eq!(kept.last().map(|r| r.point.attempt), Some(2));
        // A short run keeps every row.
        let mut rows = ChartRows::new(0.0, 0.01);
        for t in 0..50u32 {
            assert!(rows.push(row(f64::from(t) * 0.1, 1, 5, None)).is_continue());
        }
        assert_eq!(rows.finish().len(), 50);
    }
}
