//! Hydra: the batch and the accumulation read from the composed primary config when no
//! `key=value` override of the command names them, and changed by adding overrides.
//! (Being written; see issue 28.)

use super::Found;
use crate::knobs::resolve::{KnobError, Reader, Request};

/// The batch and accumulation of a Hydra job's composed primary config; `None` when the command
/// is no Hydra job or its config holds no batch.
pub(in crate::knobs) fn find(
    _request: &Request,
    _reader: &mut Reader,
) -> Result<Option<Found>, KnobError> {
    Ok(None)
}
