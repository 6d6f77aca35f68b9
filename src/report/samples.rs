//! samples.csv read back for `oomguard report`: its rows parsed by the header's column names
//! into [`TimelinePoint`]s, streamed so a long run's file is never held whole, and thinned to
//! what a chart can show (`ChartRows`) for the page a run writes at its end.
//!
//! It reads only; the file is written by [`crate::record::samples`], and the report built from
//! the rows is [`crate::report`]'s.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// One row of samples.csv, in seconds since the run's first attempt started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub t_s: f64,
    pub attempt: u32,
    pub rss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub gpu_bytes: Option<u64>,
    pub cgroup_bytes: Option<u64>,
}

impl TimelinePoint {
    /// The tree's own memory: PSS (shared pages once) where read, else RSS.
    pub(super) fn tree_bytes(&self) -> Option<u64> {
        self.pss_bytes.or(self.rss_bytes)
    }
}

/// Streams `dir`'s samples.csv into `row`, line by line. It is optional: an attempt that died
/// before its first tick has no rows.
pub(super) fn read_samples(dir: &Path, row: impl FnMut(Row)) {
    // Streamed, so not capped; but a FIFO or a device there is no run's samples.
    if let Ok(file) = crate::fsutil::open_regular(&dir.join("samples.csv")) {
        parse_samples(std::io::BufReader::new(file), row);
    }
}

/// A samples.csv row: unix time and the columns the chart uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Row {
    pub(super) unix_time_s: f64,
    pub(super) point: TimelinePoint,
}

/// Parses samples.csv by its header's column names (later versions add columns at the end);
/// rows that do not parse are skipped (a row cut short by a crash).
fn parse_samples(mut csv: impl std::io::BufRead, mut row: impl FnMut(Row)) {
    let mut header = String::new();
    if csv.read_line(&mut header).unwrap_or(0) == 0 {
        return;
    }
    let names: Vec<&str> = header.trim_end().split(',').collect();
    let col = |name: &str| names.iter().position(|n| *n == name);
    let (Some(time), Some(attempt)) = (col("unix_time"), col("attempt")) else {
        return;
    };
    let [rss, pss, swap, gpu, cgroup] = [
        "tree_rss_bytes",
        "tree_pss_bytes",
        "tree_swap_bytes",
        "gpu_used_bytes",
        "cgroup_bytes",
    ]
    .map(col);
    let mut line = String::new();
    while csv.read_line(&mut line).unwrap_or(0) > 0 {
        let cells: Vec<&str> = line.trim_end().split(',').collect();
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
                },
            })
        })();
        if let Some(parsed) = parsed {
            row(parsed);
        }
        line.clear();
    }
}

/// The rows a chart `CHART_COLUMNS` wide can show: of each attempt's rows in each column of
/// time, the first and those holding each series' highest value (so every peak is drawn), in
/// time order. A column's rows are held only until the next column starts.
pub(super) struct ChartRows {
    origin_s: f64,
    column_s: f64,
    column: Option<(u32, i64)>,
    pending: Vec<Row>,
    kept: Vec<Row>,
}

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

    pub(super) fn push(&mut self, row: Row) {
        let column = (
            row.point.attempt,
            ((row.unix_time_s - self.origin_s) / self.column_s).floor() as i64,
        );
        if self.column != Some(column) {
            self.flush();
            self.column = Some(column);
        }
        self.pending.push(row);
    }

    fn flush(&mut self) {
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
        if !self.pending.is_empty() {
            chosen.push(0);
        }
        chosen.sort_unstable();
        chosen.dedup();
        self.kept
            .extend(chosen.into_iter().map(|i| self.pending[i]));
        self.pending.clear();
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
        parse_samples(csv.as_bytes(), |row| rows.push(row));
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].unix_time_s, 100.5);
        assert_eq!(rows[0].point.tree_bytes(), Some(1024));
        assert_eq!(rows[0].point.cgroup_bytes, Some(4096));
        assert_eq!(rows[1].point.attempt, 2);
        assert_eq!(rows[1].point.gpu_bytes, Some(77));
        assert_eq!(rows[1].point.tree_bytes(), None);
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
            },
        };
        // Two days at 1s in 1,000 columns of 172.8 s; a host spike and a GPU spike.
        let mut rows = ChartRows::new(0.0, 172.8);
        for t in 0..172_800u32 {
            let rss = if t == 100_000 { 9_000 } else { 1_000 };
            let gpu = (t == 50_001).then_some(5_000).or(Some(10));
            rows.push(row(f64::from(t), 1, rss, gpu));
        }
        // An attempt boundary inside a column starts a column of its own.
        rows.push(row(172_800.5, 2, 7, None));
        let kept = rows.finish();
        assert!(kept.len() <= 3 * 1_001 + 1, "{}", kept.len());
        assert!(kept.iter().any(|r| r.point.rss_bytes == Some(9_000)));
        assert!(kept.iter().any(|r| r.point.gpu_bytes == Some(5_000)));
        assert!(kept.windows(2).all(|w| w[0].unix_time_s < w[1].unix_time_s));
        assert_eq!(kept.last().map(|r| r.point.attempt), Some(2));
        // A short run keeps every row.
        let mut rows = ChartRows::new(0.0, 0.01);
        for t in 0..50u32 {
            rows.push(row(f64::from(t) * 0.1, 1, 5, None));
        }
        assert_eq!(rows.finish().len(), 50);
    }
}
