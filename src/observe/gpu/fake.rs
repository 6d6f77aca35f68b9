//! A probe for tests: it reads a [`GpuSnapshot`] in JSON from a file afresh at every snapshot,
//! so an integration test of the real binary (or the job fixture it runs) drives the GPU
//! numbers by rewriting the file, e.g.
//! `{"devices":[{"index":0,"name":"Fake","used_bytes":1073741824,"total_bytes":8589934592}],
//! "processes":[{"pid":4242,"device":0,"used_bytes":1073741824}]}`.
//! Writers should write a temporary file and rename it over the old one: a half-written file
//! fails to parse, and that snapshot is an error. The processes of this base file are listed as
//! they are: nothing checks that their PIDs exist.
//!
//! **Pieces.** Besides the base file `PATH`, every `*.json` file in the directory `PATH.d/`
//! (the whole file name with `.d` appended, e.g. `gpu.json.d/`), when it exists, is one
//! process's announcement of its own GPU memory: a [`GpuProcess`] in JSON,
//! `{"pid":4242,"device":0,"used_bytes":1073741824}`, conventionally named `<pid>.json`. This is
//! how a real process of a test (the job fixture, a neighbour standing for another user's job
//! on a shared card) holds memory on the fake card, and why the probe checks the piece's PID:
//! the real driver frees a process's memory when it exits, so a piece whose PID is not a live
//! process (no `/proc/PID`, or a zombie) is ignored, and a process killed before it could
//! remove its piece is forgotten as the driver would forget it. A live piece is listed among
//! the processes, and its `used_bytes` is added to its device's `used_bytes` from the base file
//! (which then stands for the driver's own share plus whatever the base file lists); with live
//! pieces the processes are sorted by device, then PID, as NVML lists them. A piece that does
//! not parse (caught half-written: writers should write a temporary file not ending in `.json`
//! and rename it) or vanishes while being read (its process removed it on exit) is skipped,
//! not an error. A piece on a device the base file does not list is listed, but adds to no
//! device.
//!
//! It is chosen by `OOMGUARD_FAKE_GPU` in [`super::open`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{GpuError, GpuProbe, GpuProcess, GpuSnapshot};

/// Reads its snapshots from a JSON file and the pieces beside it. A missing or unparsable base
/// file is an error.
#[derive(Debug, Clone)]
pub struct FakeProbe {
    path: PathBuf,
    /// Where the liveness of a piece's PID is looked up: `/proc`, or a directory standing for
    /// it in the unit tests.
    proc_root: PathBuf,
}

impl FakeProbe {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FakeProbe {
            path: path.into(),
            proc_root: PathBuf::from("/proc"),
        }
    }

    /// `PATH.d`: the directory of the pieces.
    fn pieces_dir(&self) -> PathBuf {
        let mut name = OsString::from(self.path.as_os_str());
        name.push(".d");
        PathBuf::from(name)
    }

    /// The pieces of live processes, in no particular order. No directory: none.
    fn live_pieces(&self) -> Result<Vec<GpuProcess>, GpuError> {
        let dir = self.pieces_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(GpuError::FakeRead { path: dir, source }),
        };
        let mut pieces = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            // Gone since the listing (its process exited) or half-written: skipped.
            let Ok(text) = std::fs::read(&path) else {
                continue;
            };
            let Ok(piece) = serde_json::from_slice::<GpuProcess>(&text) else {
                continue;
            };
            if alive(&self.proc_root, piece.pid) {
                pieces.push(piece);
            }
        }
        Ok(pieces)
    }
}

/// Whether `pid` is a live process under `proc_root`: its directory exists and its state (the
/// field after the command, which is in parentheses and may hold any character) is not zombie
/// (`Z`) or dead (`X`). An unreadable `stat` of an existing directory counts as alive.
fn alive(proc_root: &Path, pid: u32) -> bool {
    let dir = proc_root.join(pid.to_string());
    if !dir.is_dir() {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
        return true;
    };
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X" | "x"))
}

impl GpuProbe for FakeProbe {
    fn describe(&self) -> String {
        format!(
            "fake GPU probe reading {} (OOMGUARD_FAKE_GPU, a testing hook)",
            self.path.display()
        )
    }

    fn snapshot(&mut self) -> Result<GpuSnapshot, GpuError> {
        let text = std::fs::read(&self.path).map_err(|source| GpuError::FakeRead {
            path: self.path.clone(),
            source,
        })?;
        let mut snap: GpuSnapshot =
            serde_json::from_slice(&text).map_err(|source| GpuError::FakeParse {
                path: self.path.clone(),
                source,
            })?;
        let pieces = self.live_pieces()?;
        if pieces.is_empty() {
            return Ok(snap);
        }
        for piece in pieces {
            if let Some(device) = snap.devices.iter_mut().find(|d| d.index == piece.device) {
                device.used_bytes = device
                    .used_bytes
                    .saturating_add(piece.used_bytes.unwrap_or(0));
            }
            snap.processes.push(piece);
        }
        snap.processes.sort_by_key(|p| (p.device, p.pid));
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{GpuDevice, GpuProcess};
    use super::*;

    fn write(path: &std::path::Path, snap: &GpuSnapshot) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(snap).unwrap()).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    fn one_device(used: u64, job: Option<u64>) -> GpuSnapshot {
        GpuSnapshot {
            devices: vec![GpuDevice {
                index: 0,
                name: "Fake".into(),
                uuid: None,
                used_bytes: used,
                total_bytes: 8 << 30,
            }],
            processes: vec![GpuProcess {
                pid: 4242,
                device: 0,
                used_bytes: job,
            }],
        }
    }

    #[test]
    fn follows_rewrites_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.json");
        let mut probe = FakeProbe::new(&path);

        assert!(matches!(probe.snapshot(), Err(GpuError::FakeRead { .. })));

        let first = one_device(1 << 30, Some(1 << 30));
        write(&path, &first);
        assert_eq!(probe.snapshot().unwrap(), first);
        assert_eq!(
            probe.snapshot().unwrap(),
            first,
            "reading does not consume the file"
        );

        let second = one_device(6 << 30, None);
        write(&path, &second);
        assert_eq!(probe.snapshot().unwrap(), second);

        std::fs::write(&path, r#"{"devices":[{"index":0,"#).unwrap();
        let err = probe.snapshot().unwrap_err();
        assert!(matches!(err, GpuError::FakeParse { .. }), "{err:?}");
        assert!(err.to_string().contains("gpu.json"), "{err}");

        std::fs::remove_file(&path).unwrap();
        let err = probe.snapshot().unwrap_err();
        assert!(matches!(err, GpuError::FakeRead { .. }), "{err:?}");
    }

    /// A stand-in for `/proc`: `pid` with the given state letter in its `stat`; the command
    /// holds a `)` and a state-like letter, as `/proc/PID/stat` allows.
    fn process(proc_root: &std::path::Path, pid: u32, state: char) {
        let dir = proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (py) S (x) {state} 1 {pid} {pid} 0 -1 4194560 0 0\n"),
        )
        .unwrap();
    }

    fn piece(dir: &std::path::Path, pid: u32, device: u32, used: u64) {
        let tmp = dir.join(format!("{pid}.json.tmp"));
        let json = format!(r#"{{"pid":{pid},"device":{device},"used_bytes":{used}}}"#);
        std::fs::write(&tmp, json).unwrap();
        std::fs::rename(&tmp, dir.join(format!("{pid}.json"))).unwrap();
    }

    /// Two cards: 1 GiB and 2 GiB used by the driver, base processes 9000 (card 1) and 10 (card 0).
    fn two_devices() -> GpuSnapshot {
        let device = |index: u32, used: u64| GpuDevice {
            index,
            name: "Fake".into(),
            uuid: Some(format!("GPU-{index}")),
            used_bytes: used,
            total_bytes: 80 << 30,
        };
        GpuSnapshot {
            devices: vec![device(0, 1 << 30), device(1, 2 << 30)],
            processes: vec![
                GpuProcess {
                    pid: 9000,
                    device: 1,
                    used_bytes: Some(0),
                },
                GpuProcess {
                    pid: 10,
                    device: 0,
                    used_bytes: None,
                },
            ],
        }
    }

    /// A probe on `dir/gpu.json` (written from `snap`) with `dir/proc` for `/proc`, and its
    /// pieces directory `dir/gpu.json.d`.
    fn probe_in(dir: &std::path::Path, snap: &GpuSnapshot) -> (FakeProbe, PathBuf) {
        let path = dir.join("gpu.json");
        write(&path, snap);
        let mut probe = FakeProbe::new(&path);
        probe.proc_root = dir.join("proc");
        std::fs::create_dir_all(&probe.proc_root).unwrap();
        let pieces = dir.join("gpu.json.d");
        assert_eq!(probe.pieces_dir(), pieces);
        (probe, pieces)
    }

    #[test]
    fn without_a_pieces_directory_the_base_file_is_all() {
        let dir = tempfile::tempdir().unwrap();
        let base = two_devices();
        let (mut probe, pieces) = probe_in(dir.path(), &base);
        assert!(!pieces.exists());
        // Listed as they are: unsorted, no liveness check (PIDs 10 and 9000 are not in proc).
        assert_eq!(probe.snapshot().unwrap(), base);
        // An empty directory, or one of only dead pieces and stray files, changes nothing.
        std::fs::create_dir(&pieces).unwrap();
        assert_eq!(probe.snapshot().unwrap(), base);
        piece(&pieces, 77, 0, 5 << 30);
        std::fs::write(pieces.join("notes.txt"), "not a piece").unwrap();
        assert_eq!(probe.snapshot().unwrap(), base);
    }

    #[test]
    fn live_pieces_are_listed_and_add_to_their_device() {
        let dir = tempfile::tempdir().unwrap();
        let (mut probe, pieces) = probe_in(dir.path(), &two_devices());
        std::fs::create_dir(&pieces).unwrap();
        let proc_root = probe.proc_root.clone();
        process(&proc_root, 500, 'S');
        process(&proc_root, 300, 'R');
        process(&proc_root, 400, 'S');
        process(&proc_root, 600, 'Z'); // a zombie: its memory is freed
        piece(&pieces, 500, 0, 40 << 30);
        piece(&pieces, 300, 0, 3 << 30);
        piece(&pieces, 400, 1, 1 << 30);
        piece(&pieces, 600, 0, 7 << 30);
        piece(&pieces, 700, 1, 9 << 30); // no such process
        piece(&pieces, 800, 5, 1 << 30); // a device the base does not list
        process(&proc_root, 800, 'S');

        let snap = probe.snapshot().unwrap();
        assert_eq!(
            snap.devices[0].used_bytes,
            (1 << 30) + (40 << 30) + (3 << 30)
        );
        assert_eq!(snap.devices[1].used_bytes, (2 << 30) + (1 << 30));
        assert_eq!(snap.devices[0].uuid.as_deref(), Some("GPU-0"));
        let listed: Vec<(u32, u32, Option<u64>)> = snap
            .processes
            .iter()
            .map(|p| (p.device, p.pid, p.used_bytes))
            .collect();
        assert_eq!(
            listed,
            vec![
                (0, 10, None),
                (0, 300, Some(3 << 30)),
                (0, 500, Some(40 << 30)),
                (1, 400, Some(1 << 30)),
                (1, 9000, Some(0)),
                (5, 800, Some(1 << 30)),
            ]
        );

        // The neighbour on card 0 exits without removing its piece: the driver forgets it.
        std::fs::remove_dir_all(proc_root.join("500")).unwrap();
        // The one on card 1 removes its piece.
        std::fs::remove_file(pieces.join("400.json")).unwrap();
        let snap = probe.snapshot().unwrap();
        assert_eq!(snap.devices[0].used_bytes, (1 << 30) + (3 << 30));
        assert_eq!(snap.devices[1].used_bytes, 2 << 30);
        let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![10, 300, 9000, 800]);

        // A piece rewritten with more memory counts at its new size.
        piece(&pieces, 300, 0, 10 << 30);
        assert_eq!(
            probe.snapshot().unwrap().devices[0].used_bytes,
            (1 << 30) + (10 << 30)
        );
    }

    #[test]
    fn a_half_written_piece_is_skipped_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (mut probe, pieces) = probe_in(dir.path(), &two_devices());
        std::fs::create_dir(&pieces).unwrap();
        process(&probe.proc_root.clone(), 300, 'S');
        process(&probe.proc_root.clone(), 301, 'S');
        piece(&pieces, 300, 0, 3 << 30);
        std::fs::write(pieces.join("301.json"), r#"{"pid":301,"dev"#).unwrap();
        // A writer's temporary file does not count, even when complete.
        std::fs::write(
            pieces.join("301.json.tmp"),
            r#"{"pid":301,"device":0,"used_bytes":1}"#,
        )
        .unwrap();
        let snap = probe.snapshot().unwrap();
        assert_eq!(snap.devices[0].used_bytes, (1 << 30) + (3 << 30));
        let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![10, 300, 9000]);

        // The base file half-written is still an error, pieces or not.
        std::fs::write(dir.path().join("gpu.json"), r#"{"devices":[{"#).unwrap();
        assert!(matches!(
            probe.snapshot().unwrap_err(),
            GpuError::FakeParse { .. }
        ));
    }

    #[test]
    fn liveness_reads_the_state_after_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        process(root, 1, 'S');
        process(root, 2, 'Z');
        process(root, 3, 'X');
        std::fs::create_dir(root.join("4")).unwrap(); // no stat: counted alive
        assert!(alive(root, 1));
        assert!(!alive(root, 2));
        assert!(!alive(root, 3));
        assert!(alive(root, 4));
        assert!(!alive(root, 5));
        // This very process, in the real /proc.
        assert!(alive(Path::new("/proc"), std::process::id()));
    }

    #[test]
    fn describes_itself_as_a_testing_hook() {
        let probe = FakeProbe::new("/tmp/x.json");
        assert!(probe.describe().contains("/tmp/x.json"));
        assert!(probe.describe().contains("OOMGUARD_FAKE_GPU"));
    }
}
