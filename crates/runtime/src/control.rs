//! How a controller's work runs: only while this replica holds the component's Lease
//! ([`leader`]), every reconcile counted, timed and traced with its object's key
//! ([`reconcile`]), and each retried object's back-off ([`backoff`]).

pub mod backoff;
pub mod leader;
pub mod reconcile;
