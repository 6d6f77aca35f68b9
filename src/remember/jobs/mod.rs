//! Job memory: what earlier runs of the same job learned. Every run belongs to a job, named by
//! `--name` or derived from the command with its knob values blanked out and the working
//! directory, so `train.py --batch_size 64` and `train.py --batch_size 32` in one project are
//! one job. Per job, one JSON file `<state dir>/jobs/NAME.json` keeps the knob values of the
//! last successful attempt and every attempt seen (knob values, cause, memory peaks), which the
//! next run starts from and the fit strategy reads as points.
//!
//! The file is versioned, written atomically (temporary file, fsync, rename in the same
//! directory), private (0600 in a 0700 directory), and every read-modify-write holds an
//! exclusive `flock` on `NAME.lock` beside it, so concurrent runs of one job each add their
//! attempts and never corrupt it. A file that does not parse, or comes from a newer format, is
//! moved aside (`NAME.json.corrupt-<time>`) and the run goes on as the job's first: job memory
//! never stops a run. Which values an attempt runs with is the attempt loop's business; this
//! module only proposes the first attempt's (see [`start::start_from`]) and says it through
//! the [`crate::output::console::Reporter`] it is given.
//!
//! One job per file: [`name`] names the job and says where its memory lives, [`memory`] is the
//! file's format, [`store`] the only code that touches the file (locked, atomic), [`start`] the
//! rule for the first attempt's values, and [`run`] one run's hold on its job, which uses them.

pub mod memory;
pub mod name;
pub mod run;
pub mod start;
pub mod store;
