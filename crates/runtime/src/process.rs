//! What a process has once: the flags every binary shares ([`cli`]), its logging
//! ([`logging`]), one cancellation token for SIGTERM/SIGINT ([`shutdown`]), and its Prometheus
//! registry with the metrics every binary exports ([`metrics`]). Depends on no other group.

pub mod cli;
pub mod logging;
pub mod metrics;
pub mod shutdown;
