//! What next, after an attempt: relaunch or stop, and with what ([`policy`]), how much
//! smaller from the evidence ([`fit`]), room on a shared card and the cards `--gpus` picks
//! ([`room`]), and the checkpoint to resume from ([`resume`]).
//!
//! Decisions over the verdict and the knobs (`policy` and `fit` pure; `room` and `resume` read
//! what they decide from: claims on a shared card, the job's checkpoints): it must not import
//! what launches, remembers or tells ([`crate::launch`], [`crate::remember`], [`crate::tell`]).

pub(crate) mod fit;
pub(crate) mod policy;
pub(crate) mod resume;
pub(crate) mod room;
