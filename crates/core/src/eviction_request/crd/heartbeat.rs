//! The interceptor's heartbeat rule, which the controller follows for the imperative
//! interceptor and the admission webhook enforces on every write.

use jiff::{SignedDuration, Timestamp};

use crate::eviction_request::whole_seconds;

/// KEP: heartbeatTime "can only be incremented. There must be at least 60 second increments
/// during subsequent updates."
pub const HEARTBEAT_MIN_STEP: SignedDuration = SignedDuration::from_secs(60);

/// The heartbeatTime an interceptor may write now: `now` (whole seconds, as the API stores
/// times) when there is no heartbeat yet or the previous one is at least
/// [`HEARTBEAT_MIN_STEP`] old, otherwise the previous one unchanged (a smaller step is
/// rejected on admission).
pub fn next_heartbeat(previous: Option<Timestamp>, now: Timestamp) -> Timestamp {
    let now = whole_seconds(now);
    match previous {
        Some(previous) if now.duration_since(previous) < HEARTBEAT_MIN_STEP => previous,
        _ => now,
    }
}
