//! PLACEHOLDER until the jobfile branch merges: the types of `--config FILE`.
use std::path::PathBuf;

pub struct JobFile {
    pub knobs: Vec<KnobSpec>,
}
pub struct KnobSpec {
    pub name: String,
    pub place: PlaceSpec,
    pub moves: Moves,
    pub keep_product_with: Option<String>,
    pub on: Option<Vec<crate::classify::Cause>>,
    pub line: usize,
}
pub enum PlaceSpec {
    Flag(String),
    Override(String),
    Env(String),
    File { path: PathBuf, key: String },
}
pub enum Moves {
    Step { step: Step, min: u64 },
    Set(crate::knobs::Value),
}
pub enum Step {
    Halve,
    Minus(u64),
}
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct JobFileError(String);
pub fn load(_path: &std::path::Path) -> Result<JobFile, JobFileError> {
    Ok(JobFile { knobs: Vec::new() })
}
