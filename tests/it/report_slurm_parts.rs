//! `oomguard report` of a Slurm job whose tasks ran on two nodes, over a run directory written
//! by hand (summary.json and samples.csv with its `slurm_parts` column): the text shows each
//! attempt's peak per node, `--json` carries the parts and round-trips, and the page's chart has
//! a line and a legend entry per node; a samples.csv from before the column, or with parts
//! that do not parse, reports as it always did.

use crate::util::{stderr_of, Sandbox};

use oomguard::api::report::RunReport;

const GIB: u64 = 1 << 30;

/// samples.csv's header as `oomguard run` wrote it before the probe's `steps` column (which
/// only follows it).
const HEADER: &str = "unix_time,attempt,tree_rss_bytes,tree_pss_bytes,tree_swap_bytes,\
    sys_available_bytes,gpu_used_bytes,cgroup_bytes,sys_swap_free_bytes,psi_some_avg10,\
    cgroup_working_set_bytes,cgroup_anon_bytes,cgroup_file_bytes,cgroup_shmem_bytes,\
    cgroup_swap_bytes,gpu_neighbours_bytes,gpu_driver_bytes,gpu_total_bytes,gpu_neighbours,\
    slurm_parts";

/// A run directory of two attempts (a host OOM at batch 32, a success at 16) whose samples
/// end with `last(attempt, tick)` as their cells after `gpu_total_bytes` (`gpu_neighbours`,
/// and `slurm_parts` where the header has it): four ticks each, srun's own memory 64 MiB.
fn run_dir(sb: &Sandbox, header: &str, last: impl Fn(u32, u32) -> String) -> std::path::PathBuf {
    let dir = sb.path("run");
    std::fs::create_dir_all(&dir).unwrap();
    let summary = serde_json::json!({
        "outcome": "succeeded",
        "command": ["srun", "-N", "2", "python3", "train.py"],
        "attempts": [
            {"attempt": 1, "knobs": {"batch": 32}, "cause": "host_oom",
             "evidence": "exit 137", "exit_code": 137, "signal": null,
             "started_at": "2025-01-01T00:00:00Z", "duration_s": 4.0,
             "peak_rss_bytes": 64 << 20},
            {"attempt": 2, "knobs": {"batch": 16}, "cause": "ok", "evidence": "exit 0",
             "exit_code": 0, "signal": null, "started_at": "2025-01-01T00:00:05Z",
             "duration_s": 4.0, "peak_rss_bytes": 64 << 20},
        ],
    });
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    let mut csv = format!("{header}\n");
    for attempt in 1..=2u32 {
        for tick in 0..4u32 {
            let t = 1_735_689_600 + (attempt - 1) * 5 + tick;
            // Unknown from tree_pss_bytes to gpu_total_bytes.
            csv.push_str(&format!(
                "{t}.000,{attempt},{}{},{}\n",
                64u64 << 20,
                ",".repeat(15),
                last(attempt, tick)
            ));
        }
    }
    std::fs::write(dir.join("samples.csv"), csv).unwrap();
    dir
}

/// `oomguard report DIR ARGS`: stdout, after checking it exits 0.
fn report(sb: &Sandbox, dir: &std::path::Path, args: &[&str]) -> String {
    let mut all = vec!["report", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = sb.oomguard(&all).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_two_node_jobs_report_shows_each_nodes_memory() {
    let sb = Sandbox::new();
    // n1 grows to 3 GiB in attempt 1 and 1.5 in attempt 2; n2 holds 1 GiB, then 0.5.
    let dir = run_dir(&sb, HEADER, |attempt, tick| {
        let n1 = GIB * u64::from(tick + 1) * 3 / 4 / u64::from(attempt);
        let n2 = GIB / u64::from(attempt);
        format!(",node:n1={n1};node:n2={n2}")
    });

    let text = report(&sb, &dir, &[]);
    for want in [
        "\n  peak per node: n1 3.0 GiB, n2 1.0 GiB\n",
        "\n  peak per node: n1 1.5 GiB, n2 512.0 MiB\n",
    ] {
        assert!(text.contains(want), "no `{}` in:\n{text}", want.trim());
    }

    let json = report(&sb, &dir, &["--json"]);
    let parsed: RunReport = serde_json::from_str(&json).expect("--json is a RunReport");
    assert_eq!(
        serde_json::to_string_pretty(&parsed).unwrap(),
        json.trim_end()
    );
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        value["timeline"][3]["slurm_parts"],
        serde_json::json!([
            {"place": "node:n1", "bytes": 3 * GIB},
            {"place": "node:n2", "bytes": GIB},
        ])
    );

    let page = sb.path("page.html");
    report(&sb, &dir, &["--html", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    for node in ["n1", "n2"] {
        assert_eq!(
            html.matches(&format!("node {node} (Slurm tasks)")).count(),
            1,
            "one legend entry for {node}"
        );
    }
    assert!(
        html.contains("<p>attempt 1, peak per node: n1 3.0 GiB, n2 1.0 GiB</p>"),
        "{html}"
    );
}

#[test]
fn a_report_without_slurm_parts_is_the_one_it_always_was() {
    // The columns before `slurm_parts`, and that column with parts that do not parse.
    let old_header = HEADER.strip_suffix(",slurm_parts").unwrap();
    // (name, header, the cells after gpu_total_bytes by (attempt, tick))
    type Case = (&'static str, &'static str, fn(u32, u32) -> String);
    let cases: [Case; 2] = [
        (
            "a samples.csv from before the column",
            old_header,
            |_, _| String::new(),
        ),
        ("parts that do not parse", HEADER, |_, tick| {
            format!(",node:=1;node:n{tick}=many;step:7=1")
        }),
    ];
    let mut pages = Vec::new();
    for (name, header, last) in cases {
        let sb = Sandbox::new();
        let dir = run_dir(&sb, header, last);
        let text = report(&sb, &dir, &[]);
        assert!(!text.contains("peak per node"), "{name}:\n{text}");
        let json = report(&sb, &dir, &["--json"]);
        assert!(!json.contains("slurm_parts"), "{name}:\n{json}");
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value["timeline"].as_array().unwrap().len(),
            8,
            "{name}: every row"
        );
        let page = sb.path("page.html");
        report(&sb, &dir, &["--html", page.to_str().unwrap()]);
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(!html.contains("Slurm tasks"), "{name}");
        assert!(!html.contains("peak per node"), "{name}");
        // The run directory's path is on the page: the rest is the same.
        pages.push(html.replace(dir.to_str().unwrap(), "RUN"));
    }
    assert_eq!(pages[0], pages[1]);
}
