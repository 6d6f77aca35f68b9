//! GPU memory, as the NVIDIA driver sees it: one [`GpuSnapshot`] per call (each device's used
//! and total memory, and every process with a context on it), taken through a [`GpuProbe`].
//! [`open`] picks the probe once per run: the real one ([`NvmlProbe`], which loads the driver's
//! library at run time, so a machine without a GPU runs oomguard as well as one with), a
//! [`NullProbe`] when there is no driver, or a [`FakeProbe`] that tests drive through a file.
//! [`attribute`](fn@attribute) turns a snapshot into the job's share.
//!
//! It does not find the job's PIDs (that is `mem::tree`'s job), keep peaks or decide
//! anything from the numbers: the sampler and [`crate::supervise`] do.

mod attribute;
mod fake;
mod nvml;
pub mod who;

use std::ffi::OsString;

pub use attribute::{attribute, DeviceShare, JobGpu, Neighbour};
pub use fake::FakeProbe;
pub use nvml::NvmlProbe;

/// A testing hook: when set to a path, [`open`] returns a [`FakeProbe`] reading that file
/// instead of asking the driver, so integration tests of the real binary can drive the GPU
/// numbers on machines without a GPU. Not meant for users.
pub const FAKE_GPU_ENV: &str = "OOMGUARD_FAKE_GPU";

/// One GPU's memory. `index` is NVML's enumeration index (the order of `nvidia-smi`), which is
/// not necessarily CUDA's device number under `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuDevice {
    pub index: u32,
    pub name: String,
    /// The card's UUID (`GPU-8f3c…`), which `CUDA_VISIBLE_DEVICES` accepts: it names the same
    /// card whatever order CUDA numbers them in. `None` where the driver does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Allocated memory, by every process on the device and the driver's own bookkeeping.
    pub used_bytes: u64,
    pub total_bytes: u64,
}

/// One process with a compute or graphics context on one device. A process on several devices
/// is listed once per device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuProcess {
    /// The PID in the PID namespace of the driver (the host's), not necessarily ours.
    pub pid: u32,
    /// [`GpuDevice::index`] of the device.
    pub device: u32,
    /// `None`: NVML lists the process but not its memory (MIG, insufficient permissions,
    /// Windows WDDM).
    pub used_bytes: Option<u64>,
}

/// What the driver reported at one moment. [`NvmlProbe`] lists processes sorted by device, then
/// PID, each PID once per device.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuSnapshot {
    #[serde(default)]
    pub devices: Vec<GpuDevice>,
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
}

/// A source of GPU snapshots. `Send` so that it can move into the sampling task.
pub trait GpuProbe: Send {
    /// One line for the user, e.g. `NVML 12.535.104, 2 devices: NVIDIA H100 80GB HBM3 ×2`.
    fn describe(&self) -> String;
    /// The devices and their processes now.
    fn snapshot(&mut self) -> Result<GpuSnapshot, GpuError>;
}

/// Why a snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// An NVML call failed; `action` names the call and the device, e.g.
    /// `"reading memory of GPU 1"`.
    #[error("NVML: {action}: {source}")]
    Nvml {
        action: String,
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    /// The fake probe's file could not be read.
    #[error("fake GPU file {}: {source}", path.display())]
    FakeRead {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The fake probe's file is not a [`GpuSnapshot`] in JSON (or was caught half-written).
    #[error("fake GPU file {}: {source}", path.display())]
    FakeParse {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// The probe for machines without a usable GPU driver: every snapshot is empty.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullProbe;

impl GpuProbe for NullProbe {
    fn describe(&self) -> String {
        "no GPU monitoring".to_string()
    }

    fn snapshot(&mut self) -> Result<GpuSnapshot, GpuError> {
        Ok(GpuSnapshot::default())
    }
}

/// Chooses the probe for this run.
///
/// 1. [`FAKE_GPU_ENV`] (`OOMGUARD_FAKE_GPU`) set to a non-empty path: a [`FakeProbe`] on that
///    file (a testing hook; the file need not exist yet, [`GpuProbe::snapshot`] fails until it
///    does);
/// 2. otherwise NVML: an [`NvmlProbe`] when the driver's library loads and initialises;
/// 3. otherwise a [`NullProbe`] and a one-line reason for the user, e.g. `GPU monitoring off:
///    NVIDIA driver library libnvidia-ml.so.1 not found (NVML unavailable)`. The caller prints it
///    once; a machine without a GPU is normal, so it is a note, not an error.
pub fn open() -> (Box<dyn GpuProbe>, Option<String>) {
    open_with(std::env::var_os(FAKE_GPU_ENV))
}

/// [`open`] with the value of [`FAKE_GPU_ENV`] passed in.
fn open_with(fake: Option<OsString>) -> (Box<dyn GpuProbe>, Option<String>) {
    if let Some(path) = fake.filter(|p| !p.is_empty()) {
        return (Box::new(FakeProbe::new(path)), None);
    }
    match NvmlProbe::init() {
        Ok(probe) => (Box::new(probe), None),
        Err(reason) => (Box::new(NullProbe), Some(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_probe_is_empty() {
        let mut probe = NullProbe;
        assert_eq!(probe.snapshot().unwrap(), GpuSnapshot::default());
        assert!(!probe.describe().is_empty());
    }

    #[test]
    fn fake_env_value_picks_the_fake() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.json");
        std::fs::write(
            &path,
            r#"{"devices":[{"index":0,"name":"Fake","used_bytes":1,"total_bytes":2}]}"#,
        )
        .unwrap();
        let (mut probe, reason) = open_with(Some(path.clone().into_os_string()));
        assert_eq!(reason, None);
        assert!(
            probe.describe().contains("gpu.json"),
            "{}",
            probe.describe()
        );
        assert_eq!(probe.snapshot().unwrap().devices[0].used_bytes, 1);
    }

    /// The only test that reads or writes the process environment (tests run in parallel
    /// threads; the environment is process-wide).
    #[test]
    fn open_follows_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.json");
        let snap = GpuSnapshot {
            devices: vec![GpuDevice {
                index: 0,
                name: "Fake GPU".into(),
                uuid: None,
                used_bytes: 5 << 30,
                total_bytes: 80 << 30,
            }],
            processes: vec![GpuProcess {
                pid: 42,
                device: 0,
                used_bytes: Some(4 << 30),
            }],
        };
        std::fs::write(&path, serde_json::to_string(&snap).unwrap()).unwrap();

        std::env::set_var(FAKE_GPU_ENV, &path);
        let (mut probe, reason) = open();
        assert_eq!(reason, None);
        assert_eq!(probe.snapshot().unwrap(), snap);

        // Empty counts as unset.
        std::env::set_var(FAKE_GPU_ENV, "");
        let (probe, reason) = open();
        assert!(!probe.describe().contains("fake"), "{}", probe.describe());
        assert_eq!(reason.is_some(), !nvml::driver_present());

        std::env::remove_var(FAKE_GPU_ENV);
        let (mut probe, reason) = open();
        if nvml::driver_present() {
            // A GPU machine: the real probe, and no excuse.
            assert_eq!(reason, None);
            assert!(probe.describe().starts_with("NVML"), "{}", probe.describe());
        } else {
            // This machine: no driver, yet no panic and no error, just a note.
            let reason = reason.expect("a reason when NVML is missing");
            assert!(reason.starts_with("GPU monitoring off: "), "{reason}");
            assert!(
                reason.contains("NVML") && reason.contains("driver"),
                "{reason}"
            );
            assert!(!reason.contains('\n'), "{reason}");
            assert_eq!(probe.snapshot().unwrap(), GpuSnapshot::default());
        }
    }

    #[test]
    fn snapshot_json_may_omit_processes_and_unknown_memory() {
        let snap: GpuSnapshot = serde_json::from_str(
            r#"{"devices":[{"index":0,"name":"A","used_bytes":1,"total_bytes":2}],
                "processes":[{"pid":7,"device":0}]}"#,
        )
        .unwrap();
        assert_eq!(snap.processes[0].used_bytes, None);
        let empty: GpuSnapshot = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, GpuSnapshot::default());
    }
}
