//! `oomguard report RUN_DIR`: from run directories made by the real binary around a real job,
//! one per cause (kernel OOM kill, device OOM, host OOM, DataLoader worker killed, hung after
//! OOM, ordinary failure, success), the table shows every attempt with its knob change, cause,
//! evidence and peaks; `--json` round-trips; `oomguard run` leaves `report.html`, which renders
//! in a real headless Chromium without errors; bad input is one line and exit 2.

use crate::util;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use oomguard::api::report::RunReport;
use oomguard::api::units::human_bytes;
use util::{causes, fixture, stderr_of, wait_until, Sandbox};

fn corpus(name: &str) -> String {
    fixture(&format!("oom-corpus/{name}"))
}

/// Runs report_job.py MODE at batch 4 (fits at `fits`) under `oomguard run`; returns the
/// summary, or None (after printing SKIPPED) where the run needs a cgroup this machine lacks.
fn run_job(
    sb: &Sandbox,
    extra: &[&str],
    mode: &str,
    oom: Option<&str>,
    fits: &str,
) -> Option<serde_json::Value> {
    let job_path = fixture("report_job.py");
    let mut job = vec![
        "python3",
        &job_path,
        mode,
        "--batch_size",
        "4",
        "--fits",
        fits,
    ];
    if let Some(oom) = oom {
        job.extend(["--oom", oom]);
    }
    // No allocator hint: a device OOM relaunches smaller at once, not first unchanged with
    // PYTORCH_CUDA_ALLOC_CONF.
    let mut args = vec!["--fresh", "--interval", "50ms", "--no-allocator-hint"];
    args.extend_from_slice(extra);
    let out = sb.run(&args, &job).output().unwrap();
    let stderr = stderr_of(&out);
    if out.status.code() == Some(2) && stderr.contains("cgroup") {
        eprintln!("SKIPPED report of a kernel OOM kill: {}", stderr.trim());
        return None;
    }
    // `oomguard run` ends by writing report.html and naming it.
    let page = sb.run_dir().join("report.html");
    assert!(page.is_file(), "no report.html after the run: {stderr}");
    assert!(
        stderr.contains(&format!("report in {}", page.display())),
        "the closing lines name report.html: {stderr}"
    );
    Some(sb.summary())
}

/// `oomguard report RUN_DIR [args]`: (exit code, stdout, stderr).
fn report(sb: &Sandbox, dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["report", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = sb.oomguard(&all).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr_of(&out),
    )
}

/// The report of the sandbox's run directory has every attempt of `summary` with its cause,
/// evidence, knob change and peaks, the expected causes in order, and `--json` round-trips.
fn check_report(sb: &Sandbox, summary: &serde_json::Value, want_causes: &[&str], result: &str) {
    assert_eq!(causes(summary), want_causes, "{summary:#}");
    let (code, text, stderr) = report(sb, &sb.run_dir(), &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let attempts = summary["attempts"].as_array().unwrap();
    for (i, a) in attempts.iter().enumerate() {
        let n = a["attempt"].as_u64().unwrap();
        let cause = a["cause"].as_str().unwrap();
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{n} ")))
            .unwrap_or_else(|| panic!("no row for attempt {n}:\n{text}"));
        assert!(row.contains(cause), "attempt {n} row lacks {cause}: {row}");
        if i > 0 {
            let before = attempts[i - 1]["batch_size"].as_u64().unwrap();
            let now = a["batch_size"].as_u64().unwrap();
            if before != now {
                assert!(row.contains(&format!("batch {before}→{now}")), "{row}");
            }
        }
        let mut peaks = 0;
        for key in [
            "peak_rss_bytes",
            "peak_pss_bytes",
            "peak_swap_bytes",
            "peak_gpu_bytes",
            "peak_cgroup_bytes",
        ] {
            if let Some(bytes) = a[key].as_u64() {
                peaks += 1;
                assert!(
                    row.contains(&human_bytes(bytes)),
                    "attempt {n} row lacks {key} {}: {row}",
                    human_bytes(bytes)
                );
            }
        }
        assert!(peaks > 0, "attempt {n} had no peak at all: {a}");
        let evidence = a["evidence"].as_str().unwrap();
        assert!(
            text.contains(&format!(": {cause}: {evidence}")),
            "attempt {n}'s evidence `{evidence}` missing:\n{text}"
        );
    }
    assert!(text.contains(result), "no `{result}` in:\n{text}");

    // --json: one document that deserializes and serializes back to the same text, with each
    // attempt's cause and peaks as summary.json has them.
    let (code, json, stderr) = report(sb, &sb.run_dir(), &["--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let parsed: RunReport = serde_json::from_str(&json).expect("--json is a RunReport");
    assert_eq!(
        serde_json::to_string_pretty(&parsed).unwrap(),
        json.trim_end()
    );
    assert_eq!(parsed.attempts.len(), attempts.len());
    for (got, want) in parsed.attempts.iter().zip(attempts) {
        assert_eq!(got.cause, want["cause"].as_str().unwrap());
        assert_eq!(got.peaks.peak_rss_bytes, want["peak_rss_bytes"].as_u64());
        assert_eq!(got.peaks.peak_pss_bytes, want["peak_pss_bytes"].as_u64());
        assert_eq!(
            got.peaks.peak_cgroup_bytes,
            want["peak_cgroup_bytes"].as_u64()
        );
        assert_eq!(got.peaks.peak_gpu_bytes, want["peak_gpu_bytes"].as_u64());
    }
}

#[test]
fn report_of_a_device_oom_run() {
    let sb = Sandbox::new();
    let oom = corpus("cuda_oom__v2_0_cuda_OutOfMemoryError_max_split_size.txt");
    let summary = run_job(&sb, &[], "text", Some(&oom), "2").unwrap();
    check_report(
        &sb,
        &summary,
        &["device_oom", "ok"],
        "attempt 2 fit with batch=2",
    );
}

#[test]
fn report_of_a_host_oom_run() {
    let sb = Sandbox::new();
    let oom = corpus("host_oom__numpy_2_array_memory_error.txt");
    let summary = run_job(&sb, &[], "text", Some(&oom), "2").unwrap();
    check_report(
        &sb,
        &summary,
        &["host_oom", "ok"],
        "attempt 2 fit with batch=2",
    );
}

#[test]
fn report_of_a_worker_killed_run() {
    let sb = Sandbox::new();
    let oom = corpus("worker_killed__bus_error_shm_mmseg.txt");
    let summary = run_job(&sb, &[], "text", Some(&oom), "2").unwrap();
    check_report(
        &sb,
        &summary,
        &["worker_killed", "ok"],
        "attempt 2 fit with batch=2",
    );
}

#[test]
fn report_of_a_hung_after_oom_run() {
    let sb = Sandbox::new();
    let oom = corpus("cuda_oom__v2_0_cuda_OutOfMemoryError_max_split_size.txt");
    let summary = run_job(&sb, &["--hang-timeout", "1s"], "hang", Some(&oom), "2").unwrap();
    check_report(
        &sb,
        &summary,
        &["hung_after_oom", "ok"],
        "attempt 2 fit with batch=2",
    );
}

#[test]
fn report_of_an_ordinary_failure() {
    let sb = Sandbox::new();
    let error = corpus("not_oom__dataloader_worker_exit_code_1.txt");
    let summary = run_job(&sb, &[], "text", Some(&error), "2").unwrap();
    check_report(&sb, &summary, &["failed"], "no attempt fit (1 attempt)");
}

#[test]
fn report_of_a_success() {
    let sb = Sandbox::new();
    let summary = run_job(&sb, &[], "text", None, "4").unwrap();
    check_report(
        &sb,
        &summary,
        &["ok"],
        "result: succeeded; attempt 1 fit with batch=4",
    );
}

#[test]
fn report_of_a_kernel_oom_kill_shows_the_limit() {
    let sb = Sandbox::new();
    let Some(summary) = run_job(&sb, &["--memory-max", "96M"], "grow", None, "2") else {
        return;
    };
    check_report(
        &sb,
        &summary,
        &["oom_killed", "ok"],
        "attempt 2 fit with batch=2",
    );
    let (_, text, _) = report(&sb, &sb.run_dir(), &[]);
    assert!(text.contains("limits: --memory-max 96.0 MiB"), "{text}");
    let html = std::fs::read_to_string(sb.run_dir().join("report.html")).unwrap();
    assert!(
        html.contains("limit --memory-max 96.0 MiB"),
        "the limit is a line of the chart"
    );
}

#[test]
fn report_of_what_is_not_a_run_directory_is_one_line_and_exit_2() {
    let sb = Sandbox::new();
    let empty = sb.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let page = sb.path("page.html");
    for (dir, says) in [
        (sb.path("missing"), "is not a directory"),
        (
            empty.clone(),
            "is not an oomguard run directory (no summary.json)",
        ),
    ] {
        let (code, stdout, stderr) = report(&sb, &dir, &["--html", page.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("{} {says}", dir.display())),
            "{stderr}"
        );
        assert!(stderr.contains("give the"), "names the fix: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(!page.exists(), "nothing created");
    }
}

/// A FIFO in place of summary.json is refused at once (it used to wait for a writer forever);
/// one in place of samples.csv leaves the report without samples.
#[test]
fn report_of_a_run_directory_with_a_fifo_for_a_file_does_not_hang() {
    let sb = Sandbox::new();
    let oom = corpus("cuda_oom__v2_0_cuda_OutOfMemoryError_max_split_size.txt");
    run_job(&sb, &[], "text", Some(&oom), "2").unwrap();
    let dir = sb.run_dir();
    let fifo = |path: &Path| {
        std::fs::remove_file(path).unwrap();
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    };
    fifo(&dir.join("samples.csv"));
    let out = util::output_within(
        &mut sb.oomguard(&["report", dir.to_str().unwrap()]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    fifo(&dir.join("summary.json"));
    let out = util::output_within(
        &mut sb.oomguard(&["report", dir.to_str().unwrap()]),
        Duration::from_secs(60),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("summary.json") && stderr.contains("a FIFO"),
        "{stderr}"
    );
}

/// Debian's `chromium`, or another headless-capable Chromium on PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// Runs Chromium headless with a time limit; returns (exit status, stdout, stderr).
fn run_chromium(bin: &Path, profile: &Path, args: &[String]) -> (bool, String, String) {
    let out_path = profile.with_extension("out");
    let err_path = profile.with_extension("err");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chromium starts");
    let mut status = None;
    let done = wait_until(Duration::from_secs(120), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !done {
        let _ = child.kill();
        let _ = child.wait();
        panic!("chromium did not finish in 120s");
    }
    (
        status.unwrap().success(),
        std::fs::read_to_string(&out_path).unwrap_or_default(),
        std::fs::read_to_string(&err_path).unwrap_or_default(),
    )
}

#[test]
fn report_html_is_self_contained_and_renders_in_headless_chromium() {
    let sb = Sandbox::new();
    // Three attempts: batch 4 and 2 die of a device OOM, 1 fits.
    let oom = corpus("cuda_oom__v2_0_cuda_OutOfMemoryError_max_split_size.txt");
    let summary = run_job(&sb, &[], "text", Some(&oom), "1").unwrap();
    assert_eq!(causes(&summary), ["device_oom", "device_oom", "ok"]);
    let page = sb.path("page.html");
    let (code, _, stderr) = report(&sb, &sb.run_dir(), &["--html", page.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let html = std::fs::read_to_string(&page).unwrap();
    // One file: the chart inline, nothing fetched, no script.
    assert!(html.contains("<svg"), "the chart is inline SVG");
    assert!(!html.contains("<script"), "no script");
    for fetch in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!html.contains(fetch), "fetches nothing: {fetch}");
    }
    // The markers name each death and the knob change that followed it.
    assert!(html.contains("#1 device_oom; batch 4→2"), "{html}");
    assert!(html.contains("#2 device_oom; batch 2→1"), "{html}");
    assert!(html.contains("#3 ok"), "{html}");
    assert_eq!(
        html,
        std::fs::read_to_string(sb.run_dir().join("report.html")).unwrap()
    );

    let Some(bin) = chromium() else {
        eprintln!("SKIPPED chromium render of report.html: no chromium on PATH (apt-get install chromium; CI installs it)");
        return;
    };
    let url = format!("file://{}", page.display());
    let shot = sb.path("shot.png");
    let (ok, _, log) = run_chromium(
        &bin,
        &sb.path("profile1"),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,1200".into(),
            "--enable-logging=stderr".into(),
            "--v=1".into(),
            url.clone(),
        ],
    );
    assert!(ok && shot.is_file(), "chromium took no screenshot:\n{log}");
    // Console messages are logged as `INFO:CONSOLE:N] "text", source: ...` whatever their
    // level (console.error too), and the page has no script: any console line is an error
    // Chromium logged about the page (a resource it could not load, a parse failure).
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "the page logged: {console:#?}");

    // The chart area (below the heading, above the table) is drawn: many colours, many
    // non-white pixels.
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(info.width >= 1000 && info.height >= 700, "{info:?}");
    let mut colours = std::collections::HashSet::new();
    let mut inked = 0usize;
    let mut total = 0usize;
    for y in 180..650 {
        for x in 60..1100 {
            let at = (y * info.width as usize + x) * channels;
            let px = &buf[at..at + 3];
            total += 1;
            if px != [255, 255, 255] {
                inked += 1;
            }
            colours.insert([px[0], px[1], px[2]]);
        }
    }
    assert!(
        colours.len() > 20,
        "{} colours in the chart area",
        colours.len()
    );
    assert!(
        inked * 100 > total * 3,
        "{inked} of {total} chart pixels drawn"
    );

    // A second look: the DOM Chromium built has the chart and the table.
    let (ok, dom, log) = run_chromium(&bin, &sb.path("profile2"), &["--dump-dom".into(), url]);
    assert!(ok, "{log}");
    assert!(
        dom.contains("<svg") && dom.contains("<polyline"),
        "no chart in the DOM"
    );
    assert!(
        dom.contains("<td class=\"t\">device_oom</td>"),
        "no table in the DOM"
    );
}

#[test]
fn a_report_html_that_cannot_be_written_is_a_warning_not_a_changed_exit_status() {
    let sb = Sandbox::new();
    // The job itself puts a report.html into the run directory: oomguard's is not written over
    // it, and the run still ends with the job's status (3).
    let page = sb.run_dir().join("report.html");
    let script = format!("echo mine > '{}'; exit 3", page.display());
    let out = sb.run(&[], &["sh", "-c", &script]).output().unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(std::fs::read_to_string(&page).unwrap(), "mine\n");
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("oomguard: warning:") && l.contains("report.html"))
        .unwrap_or_else(|| panic!("no warning names report.html: {stderr}"));
    assert!(warning.contains("File exists"), "{warning}");
    assert!(!stderr.contains("report in "), "{stderr}");
}
