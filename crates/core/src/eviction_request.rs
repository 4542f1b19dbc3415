//! KEP-4563's EvictionRequest state machine: what the eviction request controller and the
//! imperative-eviction interceptor should write, given a request, its target pod and the time.
//!
//! The shell (bins/evictionrequest-controller) reads the request and the pod, calls
//! `reconcile`, and turns the `Plan` into one status apply, one label apply, an eviction and
//! Events. Everything that decides lives here, so the KEP's walkthroughs are table tests.
//! Requesters and interceptors (the library in evictkit-runtime) use [`State`] and
//! [`next_heartbeat`] to follow the same rules.

use evictkit_api::conditions::{EVICTION_REQUEST_CANCELED, EVICTION_REQUEST_EVICTED, STATUS_TRUE};
use evictkit_api::eviction_request::{EvictionRequest, EvictionRequestStatus, InterceptorStatus};
use jiff::{SignedDuration, Timestamp};

/// KEP: heartbeatTime "can only be incremented. There must be at least 60 second increments
/// during subsequent updates."
pub const HEARTBEAT_MIN_STEP: SignedDuration = SignedDuration::from_secs(60);

/// Where an EvictionRequest stands, from its conditions (KEP "EvictionRequest Completion and
/// Deletion"): requesters may delete a request once it is [`State::Evicted`] or
/// [`State::Canceled`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Interceptors are (or will be) working on the eviction.
    InProgress,
    /// The target pod is gone or terminal.
    Evicted,
    /// No requester is left, or the controller's validation failed; no longer processed.
    Canceled,
}

impl State {
    pub fn of(request: &EvictionRequest) -> Self {
        Self::of_status(request.status.as_ref())
    }

    pub fn of_status(status: Option<&EvictionRequestStatus>) -> Self {
        if condition_is_true(status, EVICTION_REQUEST_EVICTED) {
            Self::Evicted
        } else if condition_is_true(status, EVICTION_REQUEST_CANCELED) {
            Self::Canceled
        } else {
            Self::InProgress
        }
    }

    pub fn is_finished(self) -> bool {
        self != Self::InProgress
    }
}

/// Whether `.status.conditions` holds `condition_type` with status `True`.
pub fn condition_is_true(status: Option<&EvictionRequestStatus>, condition_type: &str) -> bool {
    status.is_some_and(|status| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == condition_type && c.status == STATUS_TRUE)
    })
}

/// The interceptor's own entry in `.status.interceptors`, if it wrote one.
pub fn interceptor_status<'a>(
    status: Option<&'a EvictionRequestStatus>,
    interceptor: &str,
) -> Option<&'a InterceptorStatus> {
    status?.interceptors.iter().find(|i| i.name == interceptor)
}

/// Whether `interceptor` is the one the controller has handed the request to.
pub fn is_active(request: &EvictionRequest, interceptor: &str) -> bool {
    State::of(request) == State::InProgress
        && request
            .status
            .as_ref()
            .is_some_and(|s| s.active_interceptors.iter().any(|a| a == interceptor))
}

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

/// Times travel through the API with second precision; comparing with the stored value needs
/// the same precision.
pub fn whole_seconds(time: Timestamp) -> Timestamp {
    Timestamp::from_second(time.as_second()).unwrap_or(time)
}
