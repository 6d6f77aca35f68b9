//! A probe for tests: it reads a [`GpuSnapshot`] in JSON from a file afresh at every snapshot,
//! so an integration test of the real binary (or the job fixture it runs) drives the GPU
//! numbers by rewriting the file, e.g.
//! `{"devices":[{"index":0,"name":"Fake","used_bytes":1073741824,"total_bytes":8589934592}],
//! "processes":[{"pid":4242,"device":0,"used_bytes":1073741824}]}`.
//! Writers should write a temporary file and rename it over the old one: a half-written file
//! fails to parse, and that snapshot is an error.
//!
//! It is chosen by `OOMGUARD_FAKE_GPU` in [`super::open`]; it does not check that PIDs exist.

use std::path::PathBuf;

use super::{GpuError, GpuProbe, GpuSnapshot};

/// Reads its snapshots from a JSON file. A missing or unparsable file is an error.
#[derive(Debug, Clone)]
pub struct FakeProbe {
    path: PathBuf,
}

impl FakeProbe {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FakeProbe { path: path.into() }
    }
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
        serde_json::from_slice(&text).map_err(|source| GpuError::FakeParse {
            path: self.path.clone(),
            source,
        })
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

    #[test]
    fn describes_itself_as_a_testing_hook() {
        let probe = FakeProbe::new("/tmp/x.json");
        assert!(probe.describe().contains("/tmp/x.json"));
        assert!(probe.describe().contains("OOMGUARD_FAKE_GPU"));
    }
}
