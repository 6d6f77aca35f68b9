//! `samples.csv` in the run directory: its columns, created with its header row, and one row
//! appended (and flushed) per tick of every attempt.
//!
//! Every cell is a number or empty (unknown) but two text cells. `gpu_neighbours`: the other
//! processes on the job's cards (a shared GPU's other users), each `PID:user:bytes`, joined by
//! `;` (`999999:alice:42949672960;4242:?:1073741824`, `?` where /proc does not show the user or
//! the driver the bytes). Before it, `gpu_neighbours_bytes` (what they hold),
//! `gpu_driver_bytes` (used memory no listed process accounts for) and `gpu_total_bytes` (the
//! cards' capacity), all over the cards the job is on (every card before it touches one); the
//! chart stacks the job's memory under the neighbours' up to the card. Then `slurm_parts`:
//! where the job's Slurm tasks hold their memory ([`Sample::slurm_parts`]), each
//! `node:NAME=BYTES` (a node's step cgroups, read here) or `step:JOB.STEP=BYTES` (all of a
//! step's tasks, as sstat sums them), joined by `;` (`node:n1=123;node:n2=456`,
//! `step:12.0=789`); empty for a job without srun steps. Both text cells are quoted as CSV quotes
//! a cell where it holds a `,` or a `"`. The last column, `steps`: the optimizer steps the
//! attempt's job had taken by the tick (the furthest process's, as the probe saw them,
//! [`crate::probe`]); empty without a probe or before the first step.
//!
//! It writes rows only; the samples are taken by [`crate::observe::sampler`], the steps read by the
//! run that holds the probe's pipe, and `oomguard report` reads them back
//! ([`crate::tell::report::samples`]).

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

use crate::observe::gpu::JobGpu;
use crate::observe::sampler::{Sample, SlurmPart, SlurmPlace};
use crate::remember::record::run_dir::{RunDir, RunDirError};

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
    "cgroup_swap_bytes,gpu_neighbours_bytes,gpu_driver_bytes,gpu_total_bytes,gpu_neighbours,",
    "slurm_parts,steps"
);

/// The cgroup columns that end a samples.csv row (working set, anon, file, shmem, swap), each
/// empty where unknown.
fn cgroup_cells(mem: Option<&crate::observe::cgroup::CgroupMem>) -> String {
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

/// The GPU columns that end a samples.csv row (neighbours' bytes, the driver's, the cards'
/// total, who the neighbours are), over the job's cards; all empty without a GPU reading.
fn gpu_cells(gpu: Option<&JobGpu>) -> String {
    // No reading, or one without devices (nothing to sum over): unknown, not zero.
    let Some(gpu) = gpu.filter(|g| !g.devices.is_empty()) else {
        return ",,,".to_string();
    };
    let total = gpu
        .job_devices()
        .fold(0u64, |sum, d| sum.saturating_add(d.total_bytes));
    format!(
        "{},{},{total},{}",
        gpu.neighbours_bytes(),
        gpu.driver_bytes(),
        csv_cell(&neighbours_text(gpu))
    )
}

/// `PID:user:bytes` for each neighbour on the job's cards, joined by `;`, largest first; one
/// process on several of them once, with what it holds on all.
fn neighbours_text(gpu: &JobGpu) -> String {
    let mut seen: Vec<(u32, Option<&str>, Option<u64>)> = Vec::new();
    for n in gpu.job_devices().flat_map(|d| &d.neighbours) {
        let user = n.who.as_ref().map(|w| w.user.as_str());
        match seen.iter_mut().find(|(pid, _, _)| *pid == n.pid) {
            Some((_, known, bytes)) => {
                *known = known.or(user);
                *bytes = bytes.zip(n.used_bytes).map(|(a, b)| a.saturating_add(b));
            }
            None => seen.push((n.pid, user, n.used_bytes)),
        }
    }
    seen.sort_by_key(|&(pid, _, bytes)| (std::cmp::Reverse(bytes.unwrap_or(0)), pid));
    seen.iter()
        .map(|&(pid, user, bytes)| {
            let user = user.map_or_else(|| "?".to_string(), entry_text);
            let bytes = bytes.map_or_else(|| "?".to_string(), |b| b.to_string());
            format!("{pid}:{user}:{bytes}")
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// A user name as an entry's field: its separators (`:`, `;`) and control characters as `?`,
/// so an odd name (from NSS, LDAP) can neither split an entry nor a row; `?` where empty.
fn entry_text(user: &str) -> String {
    if user.is_empty() {
        return "?".to_string();
    }
    user.chars()
        .map(|c| {
            if c.is_control() || matches!(c, ':' | ';') {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// The `slurm_parts` cell: `node:NAME=BYTES` or `step:JOB.STEP=BYTES` for each part, joined by
/// `;`, in the sample's order; empty without parts.
fn slurm_parts_cell(parts: &[SlurmPart]) -> String {
    let text = parts
        .iter()
        .map(|part| match &part.place {
            // A node's name is Slurm's (a host name), but whoever configures Slurm writes it:
            // one that holds a separator must not split the cell nor the part.
            SlurmPlace::Node(name) => format!("node:{}={}", part_text(name), part.bytes),
            SlurmPlace::Step(_) => format!("{}={}", part.place, part.bytes),
        })
        .collect::<Vec<_>>()
        .join(";");
    csv_cell(&text)
}

/// A node's name as a `slurm_parts` field: its separators (`;`, `=`) and control characters
/// as `?`; `?` where empty.
fn part_text(name: &str) -> String {
    if name.is_empty() {
        return "?".to_string();
    }
    name.chars()
        .map(|c| {
            if c.is_control() || matches!(c, ';' | '=') {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// A text cell as CSV (RFC 4180) writes it: in double quotes, its own doubled, where it holds
/// a separator or a quote; as it is otherwise.
fn csv_cell(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

impl SamplesCsv {
    /// Appends one row, `s` with the job's optimizer `steps` by then, and flushes it, so the
    /// file is current while the job runs.
    pub fn write(&mut self, s: &Sample, steps: Option<u64>) -> Result<(), RunDirError> {
        let cell = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let rss = (s.tree.processes > 0).then_some(s.tree.rss_bytes);
        let row = format!(
            "{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
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
            gpu_cells(s.gpu.as_ref()),
            slurm_parts_cell(&s.slurm_parts),
            cell(steps),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::gpu::who::Who;
    use crate::observe::gpu::{DeviceShare, Neighbour};

    const GIB: u64 = 1 << 30;

    fn neighbour(pid: u32, user: Option<&str>, bytes: Option<u64>) -> Neighbour {
        Neighbour {
            pid,
            used_bytes: bytes,
            who: user.map(|u| Who {
                user: u.into(),
                command: "python3 train.py".into(),
            }),
        }
    }

    fn card(index: u32, job: Option<u64>, neighbours: Vec<Neighbour>, driver: u64) -> DeviceShare {
        let neighbours_bytes = neighbours.iter().filter_map(|n| n.used_bytes).sum::<u64>();
        DeviceShare {
            index,
            uuid: None,
            total_bytes: 80 * GIB,
            used_bytes: job.unwrap_or(0) + neighbours_bytes + driver,
            job_bytes: job,
            neighbours,
            neighbours_bytes,
            driver_bytes: driver,
        }
    }

    /// A reading with the job listed on the cards where `job` is `Some`.
    fn gpu(devices: Vec<DeviceShare>) -> JobGpu {
        let by_device: Vec<(u32, Option<u64>)> = devices
            .iter()
            .filter(|d| d.job_bytes.is_some())
            .map(|d| (d.index, d.job_bytes))
            .collect();
        JobGpu {
            job_bytes: by_device.iter().try_fold(0, |s, (_, b)| b.map(|b| s + b)),
            job_bytes_by_device: by_device,
            devices,
            ..JobGpu::default()
        }
    }

    #[test]
    fn gpu_cells_carry_the_neighbours_over_the_jobs_cards() {
        let mib = 1 << 20;
        let table: [(&str, Option<JobGpu>, String); 7] = [
            ("no reading: unknown", None, ",,,".into()),
            (
                "a reading without cards: unknown, not zero",
                Some(JobGpu::default()),
                ",,,".into(),
            ),
            (
                "alone on the card: zero neighbours, no one named",
                Some(gpu(vec![card(0, Some(20 * GIB), vec![], 500 * mib)])),
                format!("0,{},{},", 500 * mib, 80 * GIB),
            ),
            (
                "a neighbour of a known user, one whose user /proc does not show",
                Some(gpu(vec![card(
                    0,
                    Some(20 * GIB),
                    vec![
                        neighbour(999999, Some("alice"), Some(40 * GIB)),
                        neighbour(4242, None, Some(GIB)),
                    ],
                    0,
                )])),
                format!(
                    "{},0,{},999999:alice:{};4242:?:{}",
                    41 * GIB,
                    80 * GIB,
                    40 * GIB,
                    GIB
                ),
            ),
            (
                "only the job's cards count; a neighbour on two of them is one entry",
                Some(gpu(vec![
                    card(0, Some(GIB), vec![neighbour(7, Some("bob"), Some(GIB))], 0),
                    card(1, None, vec![neighbour(8, Some("carol"), Some(9 * GIB))], 0),
                    card(2, Some(GIB), vec![neighbour(7, Some("bob"), Some(2 * GIB))], 0),
                ])),
                format!("{},0,{},7:bob:{}", 3 * GIB, 160 * GIB, 3 * GIB),
            ),
            (
                "before the job touches a card, every card is its: bytes the driver hides are ?",
                Some(gpu(vec![
                    card(0, None, vec![neighbour(7, Some("bob"), None)], 0),
                    card(1, None, vec![neighbour(8, Some("carol"), Some(GIB))], 0),
                ])),
                format!("{GIB},0,{},8:carol:{GIB};7:bob:?", 160 * GIB),
            ),
            (
                "a user name's separators and control characters cannot split the cell; a comma is quoted",
                Some(gpu(vec![card(
                    0,
                    Some(GIB),
                    vec![
                        neighbour(5, Some("ev:il;x\n\"q\""), Some(2 * GIB)),
                        neighbour(6, Some("a,b"), Some(GIB)),
                    ],
                    0,
                )])),
                format!(
                    "{},0,{},\"5:ev?il?x?\"\"q\"\":{};6:a,b:{}\"",
                    3 * GIB,
                    80 * GIB,
                    2 * GIB,
                    GIB
                ),
            ),
        ];
        for (name, reading, want) in table {
            assert_eq!(gpu_cells(reading.as_ref()), want, "{name}");
        }
    }

    #[test]
    fn slurm_parts_cells_name_each_place_and_its_bytes() {
        let node = |name: &str, bytes| SlurmPart {
            place: SlurmPlace::Node(name.into()),
            bytes,
        };
        let step = |job, step, bytes| SlurmPart {
            place: SlurmPlace::Step(crate::observe::slurm::Step { job, step }),
            bytes,
        };
        let table: [(&str, Vec<SlurmPart>, &str); 6] = [
            ("no srun step: empty", vec![], ""),
            (
                "two nodes read here, in the sample's order",
                vec![node("n2", 456), node("n1", 123)],
                "node:n2=456;node:n1=123",
            ),
            ("a step sstat sums", vec![step(12, 0, 789)], "step:12.0=789"),
            (
                "a node and a step",
                vec![node("gpu-07", 1), step(4_294_967_296, 3, 0)],
                "node:gpu-07=1;step:4294967296.3=0",
            ),
            (
                "a name's separators and control characters cannot split a part; empty is ?",
                vec![node("a;b=c\n", 1), node("", 2)],
                "node:a?b?c?=1;node:?=2",
            ),
            (
                "a comma or a quote is quoted as CSV quotes it",
                vec![node("x,y", 1), node("q\"", 2)],
                "\"node:x,y=1;node:q\"\"=2\"",
            ),
        ];
        for (name, parts, want) in table {
            assert_eq!(slurm_parts_cell(&parts), want, "{name}");
        }
    }

    #[test]
    fn rows_keep_every_column_in_its_place_and_add_new_ones_at_the_end() {
        let names: Vec<&str> = SAMPLE_COLUMNS.split(',').collect();
        // What readers index by position (tests, scripts) stays where it was.
        assert_eq!(names[..2], ["unix_time", "attempt"]);
        assert_eq!(names[6], "gpu_used_bytes");
        assert_eq!(names[14], "cgroup_swap_bytes");
        assert_eq!(
            names[15..],
            [
                "gpu_neighbours_bytes",
                "gpu_driver_bytes",
                "gpu_total_bytes",
                "gpu_neighbours",
                "slurm_parts",
                "steps"
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(Some(&dir.path().join("r")), "python", false).unwrap();
        let mut csv = run.open_samples().unwrap();
        let mut shared = Sample {
            unix_time_s: 1.5,
            attempt: 1,
            gpu: Some(gpu(vec![card(
                0,
                Some(GIB),
                vec![neighbour(9, Some("dave"), Some(GIB))],
                0,
            )])),
            ..Sample::default()
        };
        csv.write(&shared, None).unwrap();
        shared.gpu = None;
        csv.write(&shared, Some(1204)).unwrap();
        shared.slurm_parts = vec![
            SlurmPart {
                place: SlurmPlace::Node("n1".into()),
                bytes: GIB,
            },
            SlurmPart {
                place: SlurmPlace::Step(crate::observe::slurm::Step { job: 12, step: 0 }),
                bytes: 2 * GIB,
            },
        ];
        csv.write(&shared, None).unwrap();
        let text = std::fs::read_to_string(run.path().join("samples.csv")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], SAMPLE_COLUMNS);
        for line in &lines[1..] {
            assert_eq!(line.split(',').count(), names.len(), "{line}");
        }
        let cells: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(cells[6], GIB.to_string());
        assert_eq!(
            cells[15..],
            [
                &*GIB.to_string(),
                "0",
                &*(80 * GIB).to_string(),
                &*format!("9:dave:{GIB}"),
                "",
                ""
            ]
        );
        assert!(lines[2].ends_with(",,,,,,1204"), "{}", lines[2]);
        assert!(
            lines[3].ends_with(&format!(",,,,,node:n1={GIB};step:12.0={},", 2 * GIB)),
            "{}",
            lines[3]
        );
    }
}
