//! An attempt's launch: its argv and environment built from the ladder's values (the knobs'
//! flags and overrides, the checkpoint to resume from, oomguard's own `OOMGUARD_*` variables,
//! the job file's `[env]`), with its config files put where it reads them. It spawns nothing
//! ([`crate::supervise`] does).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::decide::policy;
use crate::error::Error;
use crate::launch::child::Launch;

impl super::Run<'_> {
    /// The argv and environment of the next attempt, its config files put where it reads them.
    pub(super) fn launch(&mut self) -> Result<Launch, Error> {
        let settings = self.settings;
        let ladder = &self.ladder;
        let run_dir = self.observers.run_dir().path();
        let values = &ladder.values;
        let knobs = &ladder.knobs;
        let copies = knobs
            .place_files(self.files.as_deref_mut(), values)
            .map_err(Error::Patch)?;
        let resume = settings
            .resume
            .as_ref()
            .zip(ladder.resume_from.as_deref())
            .map(|(resume, path)| resume.edits(&settings.command, path))
            .unwrap_or_default();
        let input = knobs.input_with(&settings.command, values, &copies, resume);
        let mut env: Vec<(String, OsString)> = vec![
            (
                "OOMGUARD_ATTEMPT".to_string(),
                ladder.next_attempt().to_string().into(),
            ),
            // The path as bytes: a run directory need not be UTF-8.
            (
                "OOMGUARD_RUN_DIR".to_string(),
                run_dir.as_os_str().to_owned(),
            ),
        ];
        let optional = [
            (
                "OOMGUARD_BATCH_SIZE",
                knobs.batch_of(values).map(|b| b.to_string()),
            ),
            (
                "OOMGUARD_GRAD_ACCUM",
                knobs.accum_of(values).map(|a| a.to_string()),
            ),
            (
                "OOMGUARD_PREV_CAUSE",
                ladder.previous_cause().map(|c| c.as_str().to_string()),
            ),
        ];
        env.extend(
            optional
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_string(), v?.into()))),
        );
        env.extend(input.env);
        // `--gpus N`'s cards.
        env.extend(self.shared.cards_env.iter().cloned());
        if ladder.hint_given {
            env.push((
                policy::ALLOCATOR_HINT_VAR.to_string(),
                policy::ALLOCATOR_HINT_VALUE.into(),
            ));
        }
        // Python block-buffers a pipe; the user expects live output.
        let in_job_env = |name: &str| settings.job_context.env.iter().any(|(k, _)| k == name);
        if std::env::var_os("PYTHONUNBUFFERED").is_none() && !in_job_env("PYTHONUNBUFFERED") {
            env.push(("PYTHONUNBUFFERED".into(), "1".into()));
        }
        let probe_fd = self.open_probe(&mut env);
        // The job file's `[env]` first: the attempt's own variables above are oomguard's to set.
        let mut env_all = settings.job_context.env.clone();
        env_all.extend(env);
        Ok(Launch {
            argv: input.argv,
            env: env_all,
            run_as: settings.job_context.run_as.clone(),
            probe_fd,
        })
    }

    /// The probe's pipe for the next attempt, its variables added to `env`; `None` without a
    /// probe, or where the pipe cannot be made (the attempt runs without one, said once).
    fn open_probe(&mut self, env: &mut Vec<(String, OsString)>) -> Option<Arc<OwnedFd>> {
        let dir = self.probe_dir.as_ref()?;
        let (channel, write) = match crate::probe::Channel::open() {
            Ok(opened) => opened,
            Err(e) => {
                self.observers.warn(&format!(
                    "probe off for this attempt: cannot open its pipe: {e}"
                ));
                return None;
            }
        };
        // The job's own PYTHONPATH follows the probe's directory: its job file's, or (run as
        // oomguard's own user) the one oomguard was given.
        let context = &self.settings.job_context;
        let theirs = context
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PYTHONPATH")
            .map(|(_, v)| v.clone())
            .or_else(|| {
                context
                    .run_as
                    .is_none()
                    .then(|| std::env::var_os("PYTHONPATH"))
                    .flatten()
            });
        env.extend(channel.env(dir, theirs.as_deref()));
        self.probe = Some(channel);
        Some(Arc::new(write))
    }
}
