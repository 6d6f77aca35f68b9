//! `oomguard classify` over the OOM corpus (tests/fixtures/oom-corpus, copied from real error
//! output of real frameworks): every file must land in one of its accepted classes.

mod util;

use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oom-corpus");

fn expected() -> HashMap<String, Vec<String>> {
    std::fs::read_to_string(format!("{CORPUS}/expected.tsv"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (file, classes) = l.split_once('\t').unwrap();
            (
                file.to_string(),
                classes.split(',').map(|c| c.trim().to_string()).collect(),
            )
        })
        .collect()
}

#[test]
fn every_corpus_file_lands_in_an_accepted_class() {
    let expected = expected();
    let mut files: Vec<String> = expected.keys().map(|f| format!("{CORPUS}/{f}")).collect();
    files.sort();
    let mut args = vec!["classify".to_string()];
    args.extend(files.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = util::Sandbox::new().oomguard(&args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for line in stdout.lines() {
        let (class, path) = line.split_once('\t').expect("CLASS<TAB>FILE");
        let name = path.rsplit('/').next().unwrap();
        let accepted = &expected[name];
        seen += 1;
        if !accepted.iter().any(|a| a == class) {
            wrong.push(format!("{name}: got {class}, accepted {accepted:?}"));
        }
    }
    assert_eq!(seen, expected.len());
    assert!(
        wrong.is_empty(),
        "{} misclassified:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn json_and_stdin() {
    let sb = util::Sandbox::new();
    let mut child = sb
        .oomguard(&["classify", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["class"], "device_oom");
    assert_eq!(v["file"], "-");
    assert!(
        v["evidence"]
            .as_str()
            .unwrap()
            .contains("CUDA out of memory"),
        "{v}"
    );

    // A clean log is `none`; a missing file is an error line and exit 1, the rest still printed.
    std::fs::write(sb.path("ok.log"), "epoch 1 loss 0.3\n").unwrap();
    let ok = sb.path("ok.log");
    let out = sb
        .oomguard(&["classify", ok.to_str().unwrap(), "/no/such.log"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("none\t{}\n", ok.display())
    );
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("/no/such.log"));
}
