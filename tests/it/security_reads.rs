//! What root's oomguard reads of a user's files, and what it prints of them, run for real (issue
//! 26, findings 3, 6 and 7): a samples.csv a user's job blew up costs root a bounded read, two
//! users whose names clean to the same text keep their own job memory, and no control character
//! a user wrote (in a job file's knob value, in a summary.json of theirs) reaches root's
//! terminal through `oomguard status` or `oomguard report`. oomguard runs as root; `nobody` and
//! two users made here are the attackers. Without root: SKIPPED.

use crate::attacker::*;
use crate::util;

use std::process::Command;

use util::{bin, stderr_of};

/// `oomguard ARGS` as root, its state in the world's `rootstate`.
fn oomguard(w: &World, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("XDG_STATE_HOME", w.path("rootstate"))
        .env_remove("RUST_LOG")
        .current_dir("/");
    cmd
}

/// The size of the file the job leaves in place of its samples.csv: sparse, no newline.
const HUGE_BYTES: u64 = 1 << 30;

/// The job, as nobody: once the run has written the header and two rows, samples.csv becomes
/// those rows followed by a gibibyte of zeros without a newline (sparse: it costs no disk).
const BLOW_UP: &str = r#"import os, time
p = os.path.join(os.environ['RUN_DIR'], 'samples.csv')
while True:
    try:
        if open(p, 'rb').read().count(b'\n') >= 3:
            break
    except FileNotFoundError:
        pass
    time.sleep(0.02)
good = open(p, 'rb').read()
good = good[:good.rindex(b'\n') + 1]
with open(p + '.new', 'wb') as f:
    f.write(good)
    f.truncate(len(good) + HUGE)
os.replace(p + '.new', p)
"#;

/// 3. A job of nobody's replaces its run directory's samples.csv by a gibibyte without a
///    newline: root's oomguard, drawing report.html at the run's end, and `oomguard report` on
///    the directory, each stay far below the file's size, and the report shows the good rows
///    with a note of what it skipped.
#[test]
fn a_users_huge_samples_csv_costs_root_a_bounded_read() {
    let Some(w) = World::new("a_users_huge_samples_csv_costs_root_a_bounded_read") else {
        return;
    };
    let dir = w.path("nobody");
    let run_dir = dir.join("run");
    w.nobody_file(
        &dir.join("blow_up.py"),
        &BLOW_UP.replace("HUGE", &HUGE_BYTES.to_string()),
    );
    let job = w.nobody_file(
        &dir.join("job.toml"),
        &format!(
            "user = \"nobody\"\nworkdir = {dir:?}\ncommand = [\"/usr/bin/python3\", \"blow_up.py\"]\n[env]\nRUN_DIR = {run_dir:?}\n[run]\nrun_dir = {run_dir:?}\n"
        ),
    );
    let bound = HUGE_BYTES / 4;
    let run = w.oomguard(&["--config", job.to_str().unwrap(), "--interval", "50ms"]);
    let ran = measured(run, &w.root_only(), "run");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let samples = std::fs::metadata(run_dir.join("samples.csv")).unwrap();
    assert!(samples.len() > HUGE_BYTES, "the job did not blow it up");
    assert!(
        ran.peak_rss_bytes < bound,
        "the run's oomguard reached {} bytes of RSS drawing the page",
        ran.peak_rss_bytes
    );
    let page = read(&run_dir.join("report.html"));
    assert!(
        page.contains("1 line longer than 64.0 KiB skipped"),
        "{page}"
    );

    let run_dir_arg = run_dir.to_str().unwrap();
    let shown = measured(
        oomguard(&w, &["report", run_dir_arg]),
        &w.root_only(),
        "report",
    );
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(
        shown.peak_rss_bytes < bound,
        "`oomguard report` reached {} bytes of RSS",
        shown.peak_rss_bytes
    );
    assert!(
        shown.stdout.contains(
            "note: samples.csv: 1 line longer than 64.0 KiB skipped; read stopped at 512.0 MiB; later rows are not shown"
        ),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("result: succeeded"),
        "{}",
        shown.stdout
    );
    let json = measured(
        oomguard(&w, &["report", "--json", run_dir_arg]),
        &w.root_only(),
        "report-json",
    );
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let rows = report["timeline"].as_array().unwrap();
    assert!(rows.len() >= 2, "the good rows are gone: {report}");
    assert!(report["samples_note"].as_str().is_some(), "{report}");
}

/// The job of both users: records each attempt's batch, and runs out of memory above 32.
const TRAIN: &str = "import sys\nb = int(sys.argv[sys.argv.index('--batch_size') + 1])\nopen('batches', 'a').write('%d\\n' % b)\nif b > 32:\n    print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr)\n    sys.exit(1)\n";

/// 6. Users `ogsr.t6` and `ogsr_t6` (one name cleaned is the other) each run a job named
///    `train` from a job file of theirs, both run by root: each job's memory is its own, so the
///    second starts from its own command's batch, not from what fit the first.
#[test]
fn users_whose_names_clean_alike_keep_their_own_job_memory() {
    let Some(w) = World::new("users_whose_names_clean_alike_keep_their_own_job_memory") else {
        return;
    };
    let users = [TestUser::new("ogsr.t6"), TestUser::new("ogsr_t6")];
    for user in &users {
        let dir = user.dir(&w);
        user.file(&dir.join("train.py"), TRAIN);
        let job = user.file(
            &dir.join("job.toml"),
            &format!(
                "name = \"train\"\nuser = \"{}\"\nworkdir = {dir:?}\ncommand = [\"/usr/bin/python3\", \"train.py\", \"--batch_size\", \"64\"]\n[run]\nrun_dir = {:?}\n",
                user.name,
                dir.join("run")
            ),
        );
        let out = w.run(&["--config", job.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            user.name,
            stderr_of(&out)
        );
        assert_eq!(
            read(&dir.join("batches")),
            "64\n32\n",
            "{}'s job started from another's batch",
            user.name
        );
    }
    let jobs = w.path("rootstate/oomguard/jobs");
    for user in &users {
        let memory = jobs.join(format!("{}-ogsr_t6.train.json", user.uid));
        assert!(
            memory.exists(),
            "{} has no job memory of its own",
            user.name
        );
    }
    // A run again of the first user's job starts from what fit it.
    let dir = users[0].dir(&w);
    std::fs::remove_file(dir.join("batches")).unwrap();
    std::fs::remove_dir_all(dir.join("run")).unwrap();
    let out = w.run(&["--config", dir.join("job.toml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(read(&dir.join("batches")), "32\n");
}

/// The text a user puts where root will print it: an OSC title change ended by BEL, a clear
/// screen, a C1 CSI (U+009B), a newline and a right-to-left override.
const EVIL: &str = "\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{9b}31mred\nfake line\u{202e}";

/// `EVIL` as a TOML basic string.
const EVIL_TOML: &str = r#""\u001b]0;PWNED\u0007\u001b[2J\u009b31mred\nfake line\u202e""#;

/// No byte in `text` that a terminal takes as a control (newlines apart), nor a bidi override.
fn assert_printable(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| (c.is_control() && c != '\n') || c == '\u{202e}')
        .collect();
    assert!(bad.is_empty(), "{what} printed raw {bad:?}:\n{text}");
    assert!(
        !text.contains("\nfake line"),
        "{what}: a value broke its line:\n{text}"
    );
}

/// Whether `value` holds the string `text` anywhere.
fn holds(value: &serde_json::Value, text: &str) -> bool {
    match value {
        serde_json::Value::String(s) => s == text,
        serde_json::Value::Array(items) => items.iter().any(|v| holds(v, text)),
        serde_json::Value::Object(map) => map.values().any(|v| holds(v, text)),
        _ => false,
    }
}

/// 7. A knob value in nobody's job file, stored in root's state directory, and a summary.json
///    nobody crafted in a run directory of theirs: `oomguard status` and `oomguard report` (text
///    and JSON) print no control character of theirs, and the JSON still reads back as written.
#[test]
fn status_and_report_print_no_control_character_a_user_wrote() {
    let Some(w) = World::new("status_and_report_print_no_control_character_a_user_wrote") else {
        return;
    };
    let dir = w.path("nobody");
    let run_dir = dir.join("run");
    w.nobody_file(&dir.join("oom.py"), OOM_ONCE);
    let job = w.nobody_file(
        &dir.join("job.toml"),
        &format!(
            "user = \"nobody\"\nworkdir = {dir:?}\ncommand = [\"/usr/bin/python3\", \"oom.py\"]\n[run]\nrun_dir = {run_dir:?}\n[[knob]]\nname = \"alloc\"\nenv = \"ALLOC_CONF\"\nset = {EVIL_TOML}\n"
        ),
    );
    let out = w.run(&["--config", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));

    let status = oomguard(&w, &["status"]).output().unwrap();
    let text = String::from_utf8(status.stdout.clone()).unwrap();
    assert_printable("status", &text);
    assert!(text.contains("alloc=\\u{1b}]0;PWNED\\u{7}"), "{text}");
    assert_printable("status (stderr)", &stderr_of(&status));
    let status = oomguard(&w, &["status", "--json"]).output().unwrap();
    let json = String::from_utf8(status.stdout.clone()).unwrap();
    assert_printable("status --json", &json);
    let jobs: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(holds(&jobs, EVIL), "the value did not read back: {json}");

    let report = |what: &str| {
        for json in [false, true] {
            let mut args = vec!["report"];
            if json {
                args.push("--json");
            }
            args.push(run_dir.to_str().unwrap());
            let out = oomguard(&w, &args).output().unwrap();
            let text = String::from_utf8(out.stdout.clone()).unwrap();
            assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr_of(&out));
            assert_printable(&format!("report ({what}, json: {json})"), &text);
            assert_printable(&format!("report ({what}, stderr)"), &stderr_of(&out));
            if json {
                let back: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert!(holds(&back["attempts"][1]["knobs"], EVIL), "{text}");
            }
        }
    };
    report("the run's own");

    // nobody's own summary.json: every field the report shows, each with the escapes.
    let crafted = serde_json::json!({
        "outcome": EVIL,
        "command": [EVIL, "train.py"],
        "job": EVIL,
        "limits": {},
        "attempts": [
            {"attempt": 1, "knobs": {"alloc": "a"}, "cause": EVIL, "evidence": EVIL,
             "exit_code": 1, "signal": null, "started_at": EVIL, "duration_s": 1.0},
            {"attempt": 2, "knobs": {"alloc": EVIL}, "cause": "ok", "evidence": EVIL,
             "exit_code": 0, "signal": null, "started_at": "", "duration_s": 1.0},
        ],
    });
    w.nobody_file(&run_dir.join("summary.json"), &crafted.to_string());
    report("nobody's crafted summary.json");
}
