//! The real probe: NVIDIA's management library (NVML) through `nvml-wrapper`. The library,
//! `libnvidia-ml.so.1`, ships with the driver and is opened with `dlopen` (via `libloading`)
//! when [`NvmlProbe::init`] runs, never linked: the oomguard binary starts on machines without
//! the driver, and only this probe notices the absence. The devices (their handles, names and
//! total memory) are looked up once at start; each snapshot then asks the driver only for what
//! moves: every device's used memory and the processes with a compute or graphics context on it.
//!
//! It does not choose between probes ([`super::open`] does) nor attribute processes to the job
//! ([`super::attribute`](fn@super::attribute) does).

use std::collections::BTreeMap;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::{GpuDevice, GpuError, GpuProbe, GpuProcess, GpuSnapshot};

/// The file `nvml-wrapper` opens on Linux (`Nvml::init`): the driver installs it; the
/// unversioned `libnvidia-ml.so` comes only with development packages.
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// Attempts at listing a device's processes when more start between NVML's count and its list.
const LIST_ATTEMPTS: usize = 3;

/// Samples GPU memory through NVML. Holds the initialised library (`nvmlShutdown` runs on drop)
/// and the device handles looked up at start.
pub struct NvmlProbe {
    /// The library, owned through the raw pointer of its `Box` so the handles in `devices`
    /// can borrow it for the probe's life; `Drop` drops the handles, then frees it through
    /// this same pointer (which shuts NVML down).
    nvml: std::ptr::NonNull<Nvml>,
    devices: Vec<OpenDevice>,
    description: String,
}

/// A device as looked up once at start: its handle, index and name.
struct OpenDevice {
    index: u32,
    name: String,
    uuid: Option<String>,
    device: Device<'static>,
}

impl Drop for NvmlProbe {
    fn drop(&mut self) {
        // The handles borrow the library: gone before it is.
        self.devices.clear();
        // SAFETY: `self.nvml` came from `Box::into_raw` in `from_result`, is freed only here,
        // and nothing borrows it any more (the devices are dropped above; the references
        // handed out by `lib` do not outlive `&self`).
        drop(unsafe { Box::from_raw(self.nvml.as_ptr()) });
    }
}

// SAFETY: the probe owns the library (like a `Box<Nvml>`), and `Nvml` is `Send`.
unsafe impl Send for NvmlProbe {}

impl std::fmt::Debug for NvmlProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlProbe")
            .field("description", &self.description)
            .finish()
    }
}

impl NvmlProbe {
    /// Loads [`NVML_LIBRARY`] from the dynamic loader's search path and initialises NVML.
    /// `Err` is the one-line reason for the user: `GPU monitoring off: ...`.
    pub fn init() -> Result<NvmlProbe, String> {
        Self::from_result(Nvml::init(), NVML_LIBRARY)
    }

    fn from_result(nvml: Result<Nvml, NvmlError>, library: &str) -> Result<NvmlProbe, String> {
        let nvml = nvml.map_err(|e| off_reason(&e, library))?;
        let description = describe(&nvml)
            .map_err(|e| format!("GPU monitoring off: NVML cannot list the GPUs: {e}"))?;
        let nvml = std::ptr::NonNull::new(Box::into_raw(Box::new(nvml)))
            .expect("Box::into_raw never gives null");
        let mut probe = NvmlProbe {
            nvml,
            devices: Vec::new(),
            description,
        };
        // SAFETY: the library lives until `Drop` frees it, after the devices (the only
        // holders of this `'static` borrow) are gone.
        let library: &'static Nvml = unsafe { nvml.as_ref() };
        // On error `probe` drops here, which frees the library again.
        probe.devices = open_devices(library)
            .map_err(|e| format!("GPU monitoring off: NVML cannot open the GPUs: {e}"))?;
        Ok(probe)
    }
}

/// The one-line note for a failed NVML start, naming what the user can act on.
fn off_reason(e: &NvmlError, library: &str) -> String {
    let why = match e {
        NvmlError::LibloadingError(load) => match load.to_string() {
            text if text.contains("No such file") => {
                format!("NVIDIA driver library {library} not found (NVML unavailable)")
            }
            text => format!(
                "NVIDIA driver library {library} could not be loaded (NVML unavailable): {text}"
            ),
        },
        NvmlError::FailedToLoadSymbol(symbol) => {
            format!("{library} is not a usable NVML (NVIDIA driver too old?): {symbol}")
        }
        NvmlError::DriverNotLoaded => {
            "NVML found but the NVIDIA driver is not loaded (no GPU, or no kernel module)".into()
        }
        NvmlError::NoPermission => "NVML has no permission to talk to the NVIDIA driver".into(),
        other => format!("NVML could not start (NVIDIA driver): {other}"),
    };
    // Library errors can carry the loader's multi-line text; the note is one line.
    format!("GPU monitoring off: {}", why.replace('\n', " "))
}

/// Every device's handle and name, looked up once: they do not change while the driver is loaded.
fn open_devices(nvml: &'static Nvml) -> Result<Vec<OpenDevice>, GpuError> {
    let count = nvml
        .device_count()
        .map_err(nvml_error("counting GPUs".to_string()))?;
    (0..count)
        .map(|index| {
            let device = nvml
                .device_by_index(index)
                .map_err(nvml_error(format!("opening GPU {index}")))?;
            let name = device
                .name()
                .map_err(nvml_error(format!("reading the name of GPU {index}")))?;
            // CUDA_VISIBLE_DEVICES takes UUIDs, which name a card whatever the numbering; a
            // card that does not tell its UUID can still be watched, just not picked by it.
            let uuid = device.uuid().ok();
            Ok(OpenDevice {
                index,
                name,
                uuid,
                device,
            })
        })
        .collect()
}

/// `NVML 12.535.104.05, 2 devices: NVIDIA H100 80GB HBM3 ×2`.
fn describe(nvml: &Nvml) -> Result<String, NvmlError> {
    let version = nvml.sys_nvml_version()?;
    let count = nvml.device_count()?;
    let mut names: Vec<(String, usize)> = Vec::new();
    for index in 0..count {
        let name = nvml
            .device_by_index(index)
            .and_then(|d| d.name())
            .unwrap_or_else(|_| format!("GPU {index} (unreadable)"));
        match names.iter_mut().find(|(n, _)| *n == name) {
            Some((_, k)) => *k += 1,
            None => names.push((name, 1)),
        }
    }
    let list: Vec<String> = names
        .into_iter()
        .map(|(name, k)| if k > 1 { format!("{name} ×{k}") } else { name })
        .collect();
    let plural = if count == 1 { "" } else { "s" };
    Ok(format!(
        "NVML {version}, {count} device{plural}: {}",
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    ))
}

impl GpuProbe for NvmlProbe {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn snapshot(&mut self) -> Result<GpuSnapshot, GpuError> {
        let mut snap = GpuSnapshot::default();
        for open in &self.devices {
            let (index, device) = (open.index, &open.device);
            let memory = device
                .memory_info()
                .map_err(nvml_error(format!("reading memory of GPU {index}")))?;
            snap.devices.push(GpuDevice {
                index,
                name: open.name.clone(),
                uuid: open.uuid.clone(),
                used_bytes: memory.used,
                total_bytes: memory.total,
            });
            let compute = list(device, index, "compute", Device::running_compute_processes)?;
            let graphics = list(
                device,
                index,
                "graphics",
                Device::running_graphics_processes,
            )?;
            snap.processes
                .extend(merge(index, compute.into_iter().chain(graphics)));
        }
        Ok(snap)
    }
}

fn nvml_error(action: String) -> impl FnOnce(NvmlError) -> GpuError {
    move |source| GpuError::Nvml { action, source }
}

/// One of a device's process lists. `NotSupported` (some virtualised GPUs) reads as no
/// processes: [`attribute`](fn@super::attribute) then reports the job's share as unknown, not
/// as zero.
fn list<'n>(
    device: &Device<'n>,
    index: u32,
    kind: &str,
    get: fn(&Device<'n>) -> Result<Vec<ProcessInfo>, NvmlError>,
) -> Result<Vec<ProcessInfo>, GpuError> {
    let mut attempt = 1;
    loop {
        match get(device) {
            Ok(list) => return Ok(list),
            Err(NvmlError::NotSupported) => return Ok(Vec::new()),
            // Processes started between NVML's count and its list (it leaves room for 5).
            Err(NvmlError::InsufficientSize(_)) if attempt < LIST_ATTEMPTS => attempt += 1,
            Err(source) => {
                return Err(GpuError::Nvml {
                    action: format!("listing {kind} processes of GPU {index}"),
                    source,
                })
            }
        }
    }
}

/// One [`GpuProcess`] per PID on a device, sorted by PID. A process with both a compute and a
/// graphics context is listed twice by NVML with its memory on the device each time; a known
/// figure wins over an unavailable one.
fn merge(device: u32, infos: impl IntoIterator<Item = ProcessInfo>) -> Vec<GpuProcess> {
    let mut by_pid: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for info in infos {
        let used = match info.used_gpu_memory {
            UsedGpuMemory::Used(n) => Some(n),
            UsedGpuMemory::Unavailable => None,
        };
        let slot = by_pid.entry(info.pid).or_insert(used);
        *slot = match (*slot, used) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    by_pid
        .into_iter()
        .map(|(pid, used_bytes)| GpuProcess {
            pid,
            device,
            used_bytes,
        })
        .collect()
}

/// Whether NVML starts on this machine (tests that expect either outcome).
#[cfg(test)]
pub(super) fn driver_present() -> bool {
    NvmlProbe::init().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// [`NvmlProbe::init`] with another library name or path (these tests).
    fn init_with_library(library: &OsStr) -> Result<NvmlProbe, String> {
        let shown = library.to_string_lossy().into_owned();
        NvmlProbe::from_result(Nvml::builder().lib_path(library).init(), &shown)
    }

    fn info(pid: u32, used: UsedGpuMemory) -> ProcessInfo {
        ProcessInfo {
            pid,
            used_gpu_memory: used,
            gpu_instance_id: None,
            compute_instance_id: None,
        }
    }

    #[test]
    fn merges_compute_and_graphics_listings_by_pid() {
        let merged = merge(
            1,
            [
                info(30, UsedGpuMemory::Used(100)),
                info(10, UsedGpuMemory::Unavailable),
                info(10, UsedGpuMemory::Used(7)),
                info(30, UsedGpuMemory::Used(100)),
                info(20, UsedGpuMemory::Unavailable),
                info(20, UsedGpuMemory::Unavailable),
            ],
        );
        assert_eq!(
            merged,
            [
                GpuProcess {
                    pid: 10,
                    device: 1,
                    used_bytes: Some(7)
                },
                GpuProcess {
                    pid: 20,
                    device: 1,
                    used_bytes: None
                },
                GpuProcess {
                    pid: 30,
                    device: 1,
                    used_bytes: Some(100)
                },
            ]
        );
    }

    #[test]
    fn missing_library_is_a_note_not_a_failure() {
        let reason = init_with_library(OsStr::new("/nonexistent/libnvidia-ml.so.1")).unwrap_err();
        assert_eq!(
            reason,
            "GPU monitoring off: NVIDIA driver library /nonexistent/libnvidia-ml.so.1 not found \
             (NVML unavailable)"
        );
    }

    #[test]
    fn a_file_that_is_not_a_library_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libnvidia-ml.so.1");
        std::fs::write(&path, "not an ELF file\n").unwrap();
        let reason = init_with_library(path.as_os_str()).unwrap_err();
        assert!(
            reason.starts_with("GPU monitoring off: NVIDIA driver library"),
            "{reason}"
        );
        assert!(reason.contains("could not be loaded"), "{reason}");
        assert!(!reason.contains('\n'), "{reason}");
    }

    /// Loading is `dlopen` plus symbol look-up at run time: a real shared library without the
    /// NVML symbols loads, then fails at `nvmlInit_v2`.
    #[test]
    fn a_library_without_nvml_symbols_is_reported() {
        let reason = init_with_library(OsStr::new("libc.so.6")).unwrap_err();
        assert!(reason.contains("not a usable NVML"), "{reason}");
        assert!(reason.contains("nvmlInit"), "{reason}");
    }

    #[test]
    fn default_init_matches_the_machine() {
        match NvmlProbe::init() {
            Ok(mut probe) => {
                assert!(
                    probe.describe().starts_with("NVML "),
                    "{}",
                    probe.describe()
                );
                let snap = probe.snapshot().unwrap();
                assert!(snap.devices.iter().all(|d| d.total_bytes > 0));
                // The handles looked up at start serve every later snapshot.
                let again = probe.snapshot().unwrap();
                let names = |s: &GpuSnapshot| -> Vec<(u32, String)> {
                    s.devices
                        .iter()
                        .map(|d| (d.index, d.name.clone()))
                        .collect()
                };
                assert_eq!(names(&snap), names(&again));
                assert_eq!(snap.devices.len(), probe.devices.len());
                // Dropping the probe shuts NVML down; a new one starts afresh.
                drop(probe);
                let mut probe = NvmlProbe::init().unwrap();
                assert_eq!(names(&probe.snapshot().unwrap()), names(&snap));
            }
            Err(reason) => {
                assert!(reason.starts_with("GPU monitoring off: "), "{reason}");
                assert!(reason.contains("NVML"), "{reason}");
                assert!(reason.contains("driver"), "{reason}");
            }
        }
    }
}
