//! Where the bench's workload lives and how fast it is made: the namespace of its pods and
//! EvictionRequests, and how many of them are created at once.

pub(super) const NS: &str = "bench-evictionrequest";
/// Concurrent creations of pods and of EvictionRequests.
pub(super) const CONCURRENCY: usize = 16;
