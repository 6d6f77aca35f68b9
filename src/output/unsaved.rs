//! What could not be saved during a run (attempt logs, samples.csv, summary.json, job state...):
//! a process-wide list kept so the run goes on from memory and says so once, at its end.
//!
//! It only keeps the list and words its warning; whoever failed to write notes it here, and the
//! run prints [`unsaved_summary`] when it ends.

/// What could not be saved during a run, each with the last error: the run goes on from memory
/// and says so once, at the end ([`unsaved_summary`]). Process-wide because the attempt log is
/// written by the stream's reader threads, which hold no handle of the run's.
static UNSAVED: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// Notes that `what` (`attempt logs`, `samples.csv`, `summary.json`, `job state`) could not be
/// written; detail only with `-v`, the warning comes once at the end of the run.
pub fn unsaved(what: &'static str, error: &dyn std::fmt::Display) {
    tracing::info!(
        "cannot save {what}: {error}; going on from memory, trying again at the next change"
    );
    let mut list = UNSAVED.lock().unwrap_or_else(|e| e.into_inner());
    match list.iter_mut().find(|(w, _)| *w == what) {
        Some(entry) => entry.1 = error.to_string(),
        None => list.push((what, error.to_string())),
    }
}

/// `what` was written in full after all (a retried summary.json or job state): no longer
/// missing.
pub fn saved(what: &'static str) {
    let mut list = UNSAVED.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|(w, _)| *w != what);
}

/// The one warning for what is still missing when the run ends, if anything is.
pub fn unsaved_summary() -> Option<String> {
    let list = UNSAVED.lock().unwrap_or_else(|e| e.into_inner());
    unsaved_line(&list)
}

/// The warning text for a list of (what, last error).
fn unsaved_line(list: &[(&'static str, String)]) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    let items: Vec<String> = list.iter().map(|(w, e)| format!("{w} ({e})")).collect();
    Some(format!(
        "could not save: {}; the run went on from memory and its exit status is the job's (free space where the run directory and state live)",
        items.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unsaved_warning_names_each_thing_once_with_its_error() {
        type Unsaved = [(&'static str, String)];
        let table: [(&Unsaved, Option<&str>); 3] = [
            (&[], None),
            (
                &[("summary.json", "No space left on device".into())],
                Some("could not save: summary.json (No space left on device);"),
            ),
            (
                &[
                    ("attempt logs", "full".into()),
                    ("job state", "quota".into()),
                ],
                Some("could not save: attempt logs (full), job state (quota);"),
            ),
        ];
        for (list, want) in table {
            let got = unsaved_line(list);
            match want {
                None => assert_eq!(got, None),
                Some(start) => assert!(got.as_deref().unwrap().starts_with(start), "{got:?}"),
            }
        }
    }
}
