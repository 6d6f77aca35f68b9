//! Metrics for Prometheus: `--metrics-addr ADDR` serves them over HTTP (`GET /metrics`, the text
//! exposition format, one request per connection) and `--metrics-textfile PATH` writes them for
//! node_exporter's textfile collector, replaced atomically (a temporary file in the same directory,
//! then a rename) on every sample tick. The figures are those the run already has: the sampler's
//! tree memory, cgroup usage and GPU memory, the attempt number and its optimizer steps so far
//! (where the probe saw them), relaunches by cause and the knob values; this module only holds and
//! publishes them. Sampling, classifying and deciding stay where they are
//! ([`crate::observe::sampler`], [`crate::judge::classify`], [`crate::decide::policy`]); the
//! encoding is the `prometheus` crate's.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use prometheus::{GaugeVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

use crate::observe::sampler::Sample;

/// `--metrics-addr` and `--metrics-textfile`, checked: the address parses and the textfile's
/// directory exists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsPlan {
    pub addr: Option<SocketAddr>,
    pub textfile: Option<PathBuf>,
    /// Whether the textfile was chosen by a job file its user could write: it is then checked
    /// and written as that user ([`crate::guard::principal`]).
    pub textfile_is_users: bool,
}

impl MetricsPlan {
    /// Checks the flags as given; the port is bound later, by [`Exporter::start`], still before
    /// anything starts. `addr_is_users`: the address was chosen by a job file its user could
    /// write, so root listens only where that user could (see [`users_port`]).
    pub fn new(
        addr: Option<&str>,
        addr_is_users: bool,
        textfile: Option<&Path>,
        textfile_is_users: bool,
    ) -> Result<MetricsPlan, String> {
        let addr = addr.map(parse_addr).transpose()?;
        if let Some(addr) = addr.filter(|_| addr_is_users) {
            users_port(addr, unprivileged_port_start())?;
        }
        let checked = textfile
            .map(|path| check_textfile(path, textfile_is_users))
            .transpose()?;
        Ok(MetricsPlan {
            addr,
            textfile_is_users: checked.as_ref().is_some_and(|(_, users)| *users),
            textfile: checked.map(|(path, _)| path),
        })
    }

    /// Whether either output was asked for.
    pub fn wanted(&self) -> bool {
        self.addr.is_some() || self.textfile.is_some()
    }
}

/// Parses `--metrics-addr`: a bare port (or `:PORT`) listens on loopback only, since metrics
/// name the job's command line and memory; `HOST:PORT` (`0.0.0.0:9184`, `[::]:9184`) as given.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let bad = || {
        format!(
            "--metrics-addr {text:?} is not an address: use a port (9184, loopback only) or IP:PORT (0.0.0.0:9184)"
        )
    };
    let trimmed = text.trim();
    let port_only = trimmed.strip_prefix(':').unwrap_or(trimmed);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    trimmed.parse::<SocketAddr>().map_err(|_| bad())
}

/// Refuses an address a job file's user could not listen on alone: a privileged port (below
/// `unprivileged_start`, the kernel's `net.ipv4.ip_unprivileged_port_start`; 0, any free port,
/// is anyone's). Root binding it for them would lend them root's right.
fn users_port(addr: SocketAddr, unprivileged_start: u16) -> Result<(), String> {
    let port = addr.port();
    if port == 0 || port >= unprivileged_start {
        return Ok(());
    }
    Err(format!(
        "metrics_addr {addr}: port {port} is privileged (below net.ipv4.ip_unprivileged_port_start = {unprivileged_start}), and the job file's user could not listen there alone: use a port from {unprivileged_start} up (e.g. 9184)"
    ))
}

/// `net.ipv4.ip_unprivileged_port_start`, or the kernel's default (1024) where it cannot be read.
fn unprivileged_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(1024)
}

/// `--metrics-textfile`: its directory must exist (node_exporter's textfile directory is made
/// by whoever installs node_exporter; making it here would hide a typo).
/// Returns the path and whether it is used as the job's user.
fn check_textfile(path: &Path, as_user: bool) -> Result<(PathBuf, bool), String> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // As root: its directory is used as whoever may write it (root, or the job's user), and
    // refused where anyone else could plant a link there.
    let as_user = as_user
        || crate::guard::ownership::place_is_users(
            dir,
            crate::guard::principal::acting_for(),
            "--metrics-textfile directory",
        )?;
    if path.file_name().is_none() {
        return Err(format!(
            "--metrics-textfile {}: not a file name; give a file such as /var/lib/node_exporter/textfile/oomguard.prom",
            path.display()
        ));
    }
    if !crate::guard::principal::as_user_if(as_user, || Ok(dir.is_dir())).unwrap_or(false) {
        return Err(format!(
            "--metrics-textfile {}: directory {} does not exist; create it or point at node_exporter's textfile directory",
            path.display(),
            dir.display()
        ));
    }
    // Checked as whoever will write it (the job's user, for a root oomguard acting for one):
    // AT_EACCESS asks for the identity in force, not the real uid.
    let writable = crate::guard::principal::as_user_if(as_user, || {
        use nix::unistd::{faccessat, AccessFlags};
        faccessat(
            None,
            dir,
            AccessFlags::W_OK | AccessFlags::X_OK,
            nix::fcntl::AtFlags::AT_EACCESS,
        )
        .map_err(std::io::Error::from)
    });
    if let Err(e) = writable {
        let who = crate::guard::principal::acting_for()
            .filter(|_| as_user)
            .map(|who| format!(" as user {}", who.name))
            .unwrap_or_default();
        return Err(format!(
            "--metrics-textfile {}: cannot write in directory {}{who}: {e}; point it at a directory{who} can write",
            path.display(),
            dir.display()
        ));
    }
    Ok((path.to_path_buf(), as_user))
}

/// The run's metrics. Every handle is shared (the `prometheus` types are reference-counted
/// atomics), so a clone given to the HTTP task reads what the attempt loop sets.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    tree_bytes: GaugeVec,
    cgroup_usage_bytes: GaugeVec,
    cgroup_working_set_bytes: GaugeVec,
    cgroup_limit_bytes: GaugeVec,
    gpu_bytes: GaugeVec,
    gpu_card_bytes: GaugeVec,
    gpu_room_wait_bytes: GaugeVec,
    attempt: IntGauge,
    attempt_steps: GaugeVec,
    relaunches: IntCounterVec,
    knobs: GaugeVec,
}

/// The causes a relaunch counter starts at 0 for, so that `rate()` sees the first one.
fn relaunch_causes() -> Vec<&'static str> {
    // Every memory death is relaunched: smaller, or (`gpu_taken`, `memory_taken`) once there is
    // room.
    crate::judge::outcome::Cause::ALL
        .into_iter()
        .filter(|c| c.is_memory())
        .map(|c| c.as_str())
        .collect()
}

impl Metrics {
    /// Registers every family; `cgroup_limit_bytes` is `--memory-max` where given.
    pub fn new(cgroup_limit_bytes: Option<u64>) -> Metrics {
        let registry = Registry::new();
        // A gauge with no labels still goes through a vector so that an unknown value (no
        // cgroup, no GPU) is absent from the output rather than a silent 0.
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let vec = GaugeVec::new(Opts::new(name, help), labels)
                .expect("metric names and labels are valid constants");
            registry
                .register(Box::new(vec.clone()))
                .expect("each metric name is registered once");
            vec
        };
        let tree_bytes = gauge(
            "oomguard_tree_memory_bytes",
            "Memory of the job's process tree by kind: rss (summed), pss (proportional, last read), swap.",
            &["kind"],
        );
        let cgroup_usage_bytes = gauge(
            "oomguard_cgroup_usage_bytes",
            "Memory usage of the attempt's cgroup, page cache included (what its limit applies to).",
            &[],
        );
        let cgroup_working_set_bytes = gauge(
            "oomguard_cgroup_working_set_bytes",
            "The attempt cgroup's usage less the inactive file cache the kernel can drop.",
            &[],
        );
        let cgroup_limit = gauge(
            "oomguard_cgroup_limit_bytes",
            "Memory limit of each attempt's cgroup (--memory-max).",
            &[],
        );
        let gpu_bytes = gauge(
            "oomguard_gpu_memory_bytes",
            "GPU memory held by the job's processes over all devices (NVML).",
            &[],
        );
        let gpu_card_bytes = gauge(
            "oomguard_gpu_card_memory_bytes",
            "Memory of each card the job uses (all cards before it touches one), by holder: job, neighbours (other processes, e.g. other users' jobs), driver (used memory no listed process accounts for), free.",
            &["device", "holder"],
        );
        let gpu_room_wait_bytes = gauge(
            "oomguard_gpu_room_wait_bytes",
            "While the run waits for room on a shared card (--gpu-wait): the room it waits for, per card; absent otherwise.",
            &[],
        );
        let attempt_steps = gauge(
            "oomguard_attempt_steps",
            "Optimizer steps the current attempt's job has taken so far (its furthest process's, as the probe sees them); absent without the probe or before the first step.",
            &[],
        );
        let knobs = gauge(
            "oomguard_knob_value",
            "Current value of each knob oomguard turns (numbers as they are, booleans as 0/1).",
            &["knob"],
        );
        let attempt = IntGauge::new(
            "oomguard_attempt",
            "Number of the current (or last) attempt, from 1.",
        )
        .expect("metric name is a valid constant");
        registry
            .register(Box::new(attempt.clone()))
            .expect("each metric name is registered once");
        let relaunches = IntCounterVec::new(
            Opts::new(
                "oomguard_relaunches_total",
                "Relaunches decided after an attempt died, by the cause of its death.",
            ),
            &["cause"],
        )
        .expect("metric name and label are valid constants");
        registry
            .register(Box::new(relaunches.clone()))
            .expect("each metric name is registered once");
        for cause in relaunch_causes() {
            relaunches.with_label_values(&[cause]);
        }
        let metrics = Metrics {
            registry,
            tree_bytes,
            cgroup_usage_bytes,
            cgroup_working_set_bytes,
            cgroup_limit_bytes: cgroup_limit,
            gpu_bytes,
            gpu_card_bytes,
            gpu_room_wait_bytes,
            attempt,
            attempt_steps,
            relaunches,
            knobs,
        };
        if let Some(limit) = cgroup_limit_bytes {
            metrics
                .cgroup_limit_bytes
                .with_label_values(&[] as &[&str])
                .set(limit as f64);
        }
        metrics
    }

    /// A sample tick: the figures this tick read. PSS and swap are read only on some ticks, so
    /// their gauges keep the last reading.
    pub fn sample(&self, sample: &Sample) {
        if sample.tree.processes > 0 {
            self.tree_bytes
                .with_label_values(&["rss"])
                .set(sample.tree.rss_bytes as f64);
        }
        if let Some(pss) = sample.tree.pss_bytes {
            self.tree_bytes.with_label_values(&["pss"]).set(pss as f64);
        }
        if let Some(swap) = sample.tree.swap_bytes {
            self.tree_bytes
                .with_label_values(&["swap"])
                .set(swap as f64);
        }
        set_or_clear(&self.cgroup_usage_bytes, sample.cgroup_bytes);
        set_or_clear(
            &self.cgroup_working_set_bytes,
            sample.cgroup_working_set_bytes,
        );
        set_or_clear(
            &self.gpu_bytes,
            sample.gpu.as_ref().and_then(|gpu| gpu.job_bytes),
        );
        self.gpu_card_bytes.reset();
        for card in sample.gpu.iter().flat_map(|gpu| gpu.job_devices()) {
            let device = card.index.to_string();
            let holders = [
                ("job", card.job_bytes),
                ("neighbours", Some(card.neighbours_bytes)),
                ("driver", Some(card.driver_bytes)),
                ("free", Some(card.free_bytes())),
            ];
            for (holder, bytes) in holders {
                if let Some(bytes) = bytes {
                    self.gpu_card_bytes
                        .with_label_values(&[device.as_str(), holder])
                        .set(bytes as f64);
                }
            }
        }
    }

    /// The attempt's optimizer steps so far, where known this tick.
    pub fn steps(&self, steps: Option<u64>) {
        set_or_clear(&self.attempt_steps, steps);
    }

    /// The run waits for `need_bytes` of room on a shared card (`None`: no longer).
    pub fn waiting_for_room(&self, need_bytes: Option<u64>) {
        set_or_clear(&self.gpu_room_wait_bytes, need_bytes);
    }

    /// An attempt starts with these knob values (name, value as text): the previous attempt's
    /// memory figures no longer describe anything running.
    pub fn attempt(&self, attempt: u32, knobs: &[(String, String)]) {
        self.attempt.set(i64::from(attempt));
        self.tree_bytes.reset();
        self.cgroup_usage_bytes.reset();
        self.cgroup_working_set_bytes.reset();
        self.gpu_bytes.reset();
        self.attempt_steps.reset();
        for (name, text) in knobs {
            match knob_number(text) {
                Some(value) => self.knobs.with_label_values(&[name.as_str()]).set(value),
                None => {
                    let _ = self.knobs.remove_label_values(&[name.as_str()]);
                }
            }
        }
    }

    /// A relaunch was decided after a death of `cause` (its `as_str` name).
    pub fn relaunch(&self, cause: &str) {
        self.relaunches.with_label_values(&[cause]).inc();
    }

    /// The text exposition format (Prometheus 0.0.4, which node_exporter's textfile collector
    /// reads too).
    pub fn render(&self) -> String {
        let mut text = String::new();
        TextEncoder::new()
            .encode_utf8(&self.registry.gather(), &mut text)
            .expect("encoding to a String cannot fail for valid metric families");
        text
    }
}

/// Sets a label-less gauge, or removes it where the value is unknown this tick.
fn set_or_clear(vec: &GaugeVec, value: Option<u64>) {
    match value {
        Some(value) => vec.with_label_values(&[] as &[&str]).set(value as f64),
        None => vec.reset(),
    }
}

/// A knob's value as a number: integers and decimals as they are, booleans as 0/1; text
/// values (an optimizer's name) have no gauge.
pub fn knob_number(text: &str) -> Option<f64> {
    match text.trim() {
        "true" | "True" => Some(1.0),
        "false" | "False" => Some(0.0),
        other => other.parse::<f64>().ok().filter(|v| v.is_finite()),
    }
}

/// The metrics of one run and where they go: the HTTP listener (bound before anything starts)
/// and the textfile.
pub struct Exporter {
    pub metrics: Metrics,
    listener: Option<std::net::TcpListener>,
    /// Where the listener is bound (its real port where `--metrics-addr 0` let the kernel pick).
    bound: Option<SocketAddr>,
    textfile: Option<PathBuf>,
    textfile_is_users: bool,
}

impl Exporter {
    /// Binds `--metrics-addr` now, so that a port in use is a usage error before any attempt
    /// runs. `None` where neither flag was given.
    pub fn start(
        plan: &MetricsPlan,
        cgroup_limit_bytes: Option<u64>,
    ) -> Result<Option<Exporter>, String> {
        if !plan.wanted() {
            return Ok(None);
        }
        let listener = match plan.addr {
            None => None,
            Some(addr) => {
                let listener = std::net::TcpListener::bind(addr).map_err(|e| {
                    format!("--metrics-addr {addr}: cannot listen there ({e}); pick a free port or another address")
                })?;
                // tokio takes over a listener only in non-blocking mode.
                listener.set_nonblocking(true).map_err(|e| {
                    format!("--metrics-addr {addr}: cannot set up the listener ({e})")
                })?;
                Some(listener)
            }
        };
        let bound = listener.as_ref().and_then(|l| l.local_addr().ok());
        // The textfile is first written when attempt 1 starts: a run refused later (no cgroup
        // for --memory-max) leaves nothing behind.
        Ok(Some(Exporter {
            metrics: Metrics::new(cgroup_limit_bytes),
            listener,
            bound,
            textfile: plan.textfile.clone(),
            textfile_is_users: plan.textfile_is_users,
        }))
    }

    /// The metrics' URL, where served.
    pub fn url(&self) -> Option<String> {
        self.bound.map(|addr| format!("http://{addr}/metrics"))
    }

    /// The HTTP server's task, to be spawned on the run's runtime; `Some` once (the listener
    /// moves into it).
    pub fn server(&mut self) -> Option<impl std::future::Future<Output = ()> + 'static> {
        let listener = self.listener.take()?;
        let metrics = self.metrics.clone();
        // Handed to tokio inside the task: registering it needs the runtime's reactor.
        Some(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => serve(listener, metrics).await,
                Err(e) => tracing::warn!("--metrics-addr: cannot serve metrics: {e}"),
            }
        })
    }

    /// A sample tick, with the attempt's optimizer steps by then: the gauges set, the textfile
    /// replaced.
    pub fn sample(&self, sample: &Sample, steps: Option<u64>) {
        self.metrics.sample(sample);
        self.metrics.steps(steps);
        self.write_textfile();
    }

    /// An attempt starts (see [`Metrics::attempt`]).
    pub fn attempt(&self, attempt: u32, knobs: &[(String, String)]) {
        self.metrics.attempt(attempt, knobs);
        self.write_textfile();
    }

    /// A relaunch was decided (see [`Metrics::relaunch`]).
    pub fn relaunch(&self, cause: &str) {
        self.metrics.relaunch(cause);
        self.write_textfile();
    }

    /// The run waits for this much room on a shared card, or no longer (see
    /// [`Metrics::waiting_for_room`]).
    pub fn waiting_for_room(&self, need_bytes: Option<u64>) {
        self.metrics.waiting_for_room(need_bytes);
        self.write_textfile();
    }

    /// Replaces the textfile; a failure (full disk) costs this tick's file, not the run.
    fn write_textfile(&self) {
        if let Some(path) = &self.textfile {
            match write_atomically(
                path,
                self.metrics.render().as_bytes(),
                self.textfile_is_users,
            ) {
                Ok(()) => crate::output::unsaved::saved("metrics textfile"),
                Err(e) => crate::output::unsaved::unsaved("metrics textfile", &e),
            }
        }
    }
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`, so that a
/// reader (node_exporter) sees the old file or the new one, never a partial one. The temporary
/// name does not end in `.prom`, which node_exporter would read. The temporary file is always
/// new (`O_EXCL | O_NOFOLLOW`): a file or symlink someone put at its name is never written
/// through, and a name taken is skipped. As the job's user when oomguard acts for one.
pub fn write_atomically(path: &Path, bytes: &[u8], as_user: bool) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .expect("MetricsPlan checked that the textfile has a file name");
    let mut options = std::fs::OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW);
    crate::guard::principal::as_user_if(as_user, || {
        let (temp, file) = crate::guard::fsutil::create_new_numbered(&options, |n| {
            let mut temp_name = std::ffi::OsString::from(".");
            temp_name.push(name);
            temp_name.push(format!(".{}.{n}.tmp", std::process::id()));
            path.with_file_name(temp_name)
        })?;
        crate::guard::fsutil::write_then_rename(file, &temp, path, bytes, false)
    })
}

/// The longest a client may take to send its request: a stuck client costs one task, briefly.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The most request bytes read: a scraper's GET fits many times over.
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// Accepts connections for the rest of the run, each answered by its own task.
async fn serve(listener: tokio::net::TcpListener, metrics: Metrics) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &metrics)).await;
                });
            }
            // Out of file descriptors and the like: try again shortly instead of spinning.
            Err(e) => {
                tracing::debug!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads one request's head and answers it, then closes the connection (by dropping it).
/// Readiness plus `try_read`/`try_write` need none of tokio's `io-util` extras.
async fn answer(stream: tokio::net::TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head_complete(&head) && head.len() <= MAX_REQUEST_BYTES {
        stream.readable().await?;
        match stream.try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    let response = respond(&head, || metrics.render());
    let mut sent = 0;
    while sent < response.len() {
        stream.writable().await?;
        match stream.try_write(&response[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether a request head has ended (a blank line; bare `\n` tolerated as HTTP allows).
fn head_complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// The HTTP/1.1 response to a request head: `GET /metrics` (any query string) gets the
/// metrics, `HEAD` the same headers, another path 404 and another method 405.
fn respond(head: &[u8], render: impl FnOnce() -> String) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body, send_body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            ("200 OK", prometheus::TEXT_FORMAT, render(), method == "GET")
        }
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain",
            "oomguard serves its metrics at /metrics\n".to_string(),
            method == "GET",
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET /metrics\n".to_string(),
            true,
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if send_body {
        response.extend_from_slice(body.as_bytes());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_job_file_gets_only_the_ports_its_user_could_bind() {
        let any = |port| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        // (port, unprivileged start, allowed)
        let table = [
            (81, 1024, false),
            (1023, 1024, false),
            (1024, 1024, true),
            (9184, 1024, true),
            (0, 1024, true),
            (81, 80, true),
            (79, 80, false),
            (443, 0, true),
        ];
        for (port, start, allowed) in table {
            let said = users_port(any(port), start);
            assert_eq!(
                said.is_ok(),
                allowed,
                "port {port}, start {start}: {said:?}"
            );
        }
        let said = users_port(any(81), 1024).unwrap_err();
        assert!(
            said.contains("port 81 is privileged") && said.contains("from 1024 up"),
            "{said}"
        );
    }

    #[test]
    fn addresses() {
        let local = |port| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let table: &[(&str, Option<SocketAddr>)] = &[
            ("9184", Some(local(9184))),
            (":9184", Some(local(9184))),
            ("127.0.0.1:9184", Some(local(9184))),
            ("0.0.0.0:9184", Some("0.0.0.0:9184".parse().unwrap())),
            ("[::1]:9184", Some("[::1]:9184".parse().unwrap())),
            ("0", Some(local(0))),
            ("99999", None),
            ("localhost:x", None),
            ("", None),
            ("0.0.0.0", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_addr(text).ok(), *want, "{text}");
        }
    }

    #[test]
    fn knob_numbers() {
        let table = [
            ("8", Some(8.0)),
            ("0.5", Some(0.5)),
            ("1e-4", Some(1e-4)),
            ("true", Some(1.0)),
            ("False", Some(0.0)),
            ("adamw", None),
            ("nan", None),
        ];
        for (text, want) in table {
            assert_eq!(knob_number(text), want, "{text}");
        }
    }

    #[test]
    fn responses() {
        let table: &[(&str, &str, bool)] = &[
            ("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "200 OK", true),
            ("GET /metrics?x=1 HTTP/1.0\r\n\r\n", "200 OK", true),
            ("HEAD /metrics HTTP/1.1\r\n\r\n", "200 OK", false),
            ("GET / HTTP/1.1\r\n\r\n", "404 Not Found", false),
            (
                "POST /metrics HTTP/1.1\r\n\r\n",
                "405 Method Not Allowed",
                false,
            ),
            ("", "405 Method Not Allowed", false),
        ];
        for (request, status, has_metrics) in table {
            let response = String::from_utf8(respond(request.as_bytes(), || {
                "oomguard_attempt 1\n".into()
            }))
            .unwrap();
            assert!(
                response.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{request:?}: {response}"
            );
            assert_eq!(
                response.ends_with("\r\n\r\noomguard_attempt 1\n"),
                *has_metrics,
                "{request:?}: {response}"
            );
        }
    }

    #[test]
    fn names_help_and_types() {
        let metrics = Metrics::new(Some(1 << 30));
        metrics.attempt(
            2,
            &[
                ("batch".into(), "32".into()),
                ("pin".into(), "true".into()),
                ("opt".into(), "adamw".into()),
            ],
        );
        metrics.relaunch("device_oom");
        let text = metrics.render();
        for want in [
            "# HELP oomguard_attempt ",
            "# TYPE oomguard_attempt gauge",
            "oomguard_attempt 2\n",
            "# TYPE oomguard_relaunches_total counter",
            "oomguard_relaunches_total{cause=\"device_oom\"} 1\n",
            "oomguard_relaunches_total{cause=\"host_oom\"} 0\n",
            "oomguard_knob_value{knob=\"batch\"} 32\n",
            "oomguard_knob_value{knob=\"pin\"} 1\n",
            "oomguard_cgroup_limit_bytes 1073741824\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        // Unknown is absent, not 0.
        for absent in [
            "knob=\"opt\"",
            "oomguard_gpu_memory_bytes",
            "oomguard_cgroup_usage_bytes",
        ] {
            assert!(!text.contains(absent), "{absent:?} in\n{text}");
        }
    }

    #[test]
    fn the_attempt_s_steps_are_shown_only_where_known() {
        let metrics = Metrics::new(None);
        metrics.attempt(1, &[]);
        // (steps this tick, the gauge's line, or none)
        for (steps, want) in [
            (None, None),
            (Some(2), Some("oomguard_attempt_steps 2\n")),
            (Some(1204), Some("oomguard_attempt_steps 1204\n")),
            (None, None),
        ] {
            metrics.steps(steps);
            let text = metrics.render();
            match want {
                Some(line) => assert!(text.contains(line), "{steps:?}: {text}"),
                None => assert!(!text.contains("oomguard_attempt_steps "), "{text}"),
            }
        }
        // A new attempt has taken none yet: the last one's count is gone.
        metrics.steps(Some(7));
        metrics.attempt(2, &[]);
        assert!(!metrics.render().contains("oomguard_attempt_steps "));
    }

    #[test]
    fn a_shared_card_by_holder_and_the_wait_for_room() {
        use crate::observe::gpu::{attribute, GpuDevice, GpuProcess, GpuSnapshot};
        const GIB: u64 = 1 << 30;
        let snap = GpuSnapshot {
            devices: vec![GpuDevice {
                index: 0,
                name: "H100".into(),
                uuid: None,
                used_bytes: 61 * GIB,
                total_bytes: 80 * GIB,
            }],
            processes: vec![
                GpuProcess {
                    pid: 100,
                    device: 0,
                    used_bytes: Some(20 * GIB),
                },
                GpuProcess {
                    pid: 999,
                    device: 0,
                    used_bytes: Some(40 * GIB),
                },
            ],
        };
        let sample = Sample {
            gpu: Some(attribute(&snap, &std::collections::HashSet::from([100]))),
            ..Sample::default()
        };
        let metrics = Metrics::new(None);
        metrics.sample(&sample);
        metrics.waiting_for_room(Some(57 * GIB));
        let text = metrics.render();
        for (holder, gib) in [("job", 20), ("neighbours", 40), ("driver", 1), ("free", 19)] {
            let line = format!(
                "oomguard_gpu_card_memory_bytes{{device=\"0\",holder=\"{holder}\"}} {}",
                gib * GIB
            );
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert!(text.contains(&format!("oomguard_gpu_room_wait_bytes {}", 57 * GIB)));
        // The wait over, and a tick without GPU readings: both are gone, never a stale value.
        metrics.waiting_for_room(None);
        metrics.sample(&Sample::default());
        let text = metrics.render();
        assert!(!text.contains("oomguard_gpu_room_wait_bytes "), "{text}");
        assert!(!text.contains("holder=\"neighbours\"}"), "{text}");
    }

    #[test]
    fn textfile_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oomguard.prom");
        write_atomically(&path, b"a 1\n", false).unwrap();
        write_atomically(&path, b"a 2\n", false).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }
}
