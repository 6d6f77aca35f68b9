//! Telling people and machines: hooks run at events ([`hooks`]), the service manager
//! ([`notify`]), Prometheus metrics ([`metrics`]), `oomguard status` ([`status`]), the report
//! of a run ([`report`]) and the table printed when a run ends ([`table`]).
//!
//! It reads what [`crate::remember`] kept; it must not import the attempt's supervision
//! ([`crate::supervise`]), the front door ([`crate::front`]) or the run loop.

pub(crate) mod hooks;
pub(crate) mod metrics;
pub(crate) mod notify;
pub(crate) mod report;
pub(crate) mod status;
pub(crate) mod table;
