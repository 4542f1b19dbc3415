//! The imperative evictor's decisions, the default responder's: whether it is the active
//! responder, and what it reports while it waits (for its pod to terminate, or for its next
//! eviction attempt): a heartbeat at least every [`HEARTBEAT_INTERVAL`] and its expected
//! completion, so neither a long termination nor a long back-off meets the heartbeat deadline.

use evictkit_api::keys::IMPERATIVE_EVICTOR_RESPONDER;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, ResponderStatus};

use super::evictions::is_finished;
use super::names::STATE_ACTIVE;
use super::selection::responder_status;

/// The imperative evictor's view of an Eviction: whether it is the active responder now.
pub fn imperative_evictor_active(eviction: &Eviction) -> bool {
    !is_finished(eviction)
        && eviction
            .status
            .as_ref()
            .and_then(|s| s.target_responders.as_ref())
            .is_some_and(|list| {
                list.iter()
                    .any(|r| r.name == IMPERATIVE_EVICTOR_RESPONDER && r.state == STATE_ACTIVE)
            })
}

/// While it waits (for its pod to terminate, or for its next eviction attempt), the imperative
/// evictor heartbeats at least this often (as upstream's), so neither a long termination nor a
/// long back-off meets the heartbeat deadline.
pub const HEARTBEAT_INTERVAL: SignedDuration = SignedDuration::from_mins(3);

/// Whether the imperative evictor's heartbeat is due now (none for [`HEARTBEAT_INTERVAL`]), and
/// how long until it is due (again, if written now).
fn heartbeat_due(own: &ResponderStatus, now: Timestamp) -> (bool, SignedDuration) {
    match own.heartbeat_time.as_ref().map(|h| now.duration_since(h.0)) {
        Some(since) if since < HEARTBEAT_INTERVAL => (false, HEARTBEAT_INTERVAL - since),
        _ => (true, HEARTBEAT_INTERVAL),
    }
}

/// The imperative evictor's look while its next eviction attempt is `until_attempt` away
/// (a back-off, or the apiserver's Retry-After): whether to heartbeat now, and when to look
/// again, at the attempt or the next heartbeat, whichever comes first.
pub fn between_attempts(
    own: &ResponderStatus,
    until_attempt: SignedDuration,
    now: Timestamp,
) -> (bool, SignedDuration) {
    let (due, next) = heartbeat_due(own, now);
    (due, next.min(until_attempt))
}

/// The imperative evictor's `expectedCompletionTime` while its pod terminates: the pod's
/// deletion deadline (its deletionTimestamp); once that is past, the present (as upstream's:
/// validation refuses a time more than 30 s past), keeping a present `reported` already that is
/// not before the deadline, so each look does not write a new one.
pub fn expected_completion(
    deadline: Timestamp,
    reported: Option<Timestamp>,
    now: Timestamp,
) -> Timestamp {
    if deadline >= now {
        return deadline;
    }
    match reported {
        Some(reported) if deadline <= reported && reported <= now => reported,
        _ => now,
    }
}

/// The imperative evictor's report while its pod terminates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminatingReport {
    /// Write now: no heartbeat for [`HEARTBEAT_INTERVAL`], or another expected completion.
    pub due: bool,
    /// [`expected_completion`] of the pod's deletionTimestamp.
    pub expected: Option<Timestamp>,
    pub look_again: SignedDuration,
}

/// The imperative evictor's report while its pod terminates, the pod's deletion `deadline` (its
/// deletionTimestamp) as its expected completion ([`expected_completion`]).
pub fn terminating_report(
    own: &ResponderStatus,
    deadline: Option<Timestamp>,
    now: Timestamp,
) -> TerminatingReport {
    let reported = own.expected_completion_time.as_ref().map(|t| t.0);
    let expected = deadline.map(|deadline| expected_completion(deadline, reported, now));
    let (stale, next) = heartbeat_due(own, now);
    let due = stale || reported != expected;
    TerminatingReport {
        due,
        expected,
        look_again: if due { HEARTBEAT_INTERVAL } else { next },
    }
}

/// A responder's own status entry.
pub fn own_status<'a>(eviction: &'a Eviction, responder: &str) -> Option<&'a ResponderStatus> {
    responder_status(eviction.status.as_ref(), responder)
}
