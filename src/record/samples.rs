//! `samples.csv` in the run directory: its columns, created with its header row, and one row
//! appended (and flushed) per tick of every attempt.
//!
//! It writes rows only; the samples are taken by [`crate::sampler`], and `oomguard report` reads
//! them back ([`crate::report::samples`]).

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

use crate::record::run_dir::{RunDir, RunDirError};
use crate::sampler::Sample;

/// `samples.csv`: one row per tick of every attempt.
pub struct SamplesCsv {
    path: PathBuf,
    out: io::BufWriter<File>,
}

/// The columns of samples.csv, in order. Later versions add columns at the end.
pub const SAMPLE_COLUMNS: &str = concat!(
    "unix_time,attempt,tree_rss_bytes,tree_pss_bytes,tree_swap_bytes,sys_available_bytes,",
    "gpu_used_bytes,cgroup_bytes,sys_swap_free_bytes,psi_some_avg10,",
    "cgroup_working_set_bytes,cgroup_anon_bytes,cgroup_file_bytes,cgroup_shmem_bytes,",
    "cgroup_swap_bytes"
);

/// The cgroup columns that end a samples.csv row (working set, anon, file, shmem, swap), each
/// empty where unknown.
fn cgroup_cells(mem: Option<&crate::cgroup::CgroupMem>) -> String {
    let cells = [
        mem.and_then(|m| m.working_set_bytes),
        mem.and_then(|m| m.anon_bytes),
        mem.and_then(|m| m.file_bytes),
        mem.and_then(|m| m.shmem_bytes),
        mem.and_then(|m| m.swap_bytes),
    ];
    cells
        .map(|v| v.map(|v| v.to_string()).unwrap_or_default())
        .join(",")
}

impl SamplesCsv {
    /// Appends one row and flushes it, so the file is current while the job runs.
    pub fn write(&mut self, s: &Sample) -> Result<(), RunDirError> {
        let cell = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let rss = (s.tree.processes > 0).then_some(s.tree.rss_bytes);
        let row = format!(
            "{:.3},{},{},{},{},{},{},{},{},{},{}\n",
            s.unix_time_s,
            s.attempt,
            cell(rss),
            cell(s.tree.pss_bytes),
            cell(s.tree.swap_bytes),
            cell(s.system.map(|m| m.available_bytes)),
            cell(s.gpu_bytes()),
            cell(s.cgroup_bytes),
            cell(s.system.map(|m| m.swap_free_bytes)),
            s.system
                .and_then(|m| m.psi_some_avg10)
                .map(|p| p.to_string())
                .unwrap_or_default(),
            cgroup_cells(s.cgroup.as_ref()),
        );
        let written = self
            .out
            .write_all(row.as_bytes())
            .and_then(|()| self.out.flush());
        written.map_err(|source| RunDirError::Write {
            path: self.path.clone(),
            source,
        })
    }
}

impl RunDir {
    /// Creates samples.csv with its header row.
    pub fn open_samples(&self) -> Result<SamplesCsv, RunDirError> {
        let path = self.path().join("samples.csv");
        let open = || -> io::Result<io::BufWriter<File>> {
            let mut out = io::BufWriter::new(self.create_file("samples.csv")?);
            writeln!(out, "{SAMPLE_COLUMNS}")?;
            out.flush()?;
            Ok(out)
        };
        let out = open().map_err(|source| RunDirError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(SamplesCsv { path, out })
    }
}
