//! The conditions of Evictions and EvictionRequests: reading one, setting one as it should be
//! now, a request's following its Eviction's, and what they say of a request (settled,
//! refused, due for a sync).

use jiff::Timestamp;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::names::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, REASON_AWAITING_EVICTION, REASON_EVICTION_INVALID,
};
use crate::eviction_request::true_with_reason;

pub fn condition<'a>(conditions: Option<&'a [Condition]>, kind: &str) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == kind)
}

pub(super) fn condition_true(conditions: Option<&[Condition]>, kind: &str) -> bool {
    condition(conditions, kind).is_some_and(|c| c.status == "True")
}

pub(super) fn conditions_of(eviction: &Eviction) -> Option<&[Condition]> {
    eviction.status.as_ref()?.conditions.as_deref()
}

/// A condition as it should be now, keeping `lastTransitionTime` while the status is unchanged.
pub fn set_condition(
    existing: Option<&[Condition]>,
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let since = condition(existing, kind)
        .filter(|c| c.status == status)
        .map_or(now, |c| c.last_transition_time.0);
    Condition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Time(since),
        observed_generation: None,
    }
}

/// Whether a request was refused for good (reached TargetEvicted, or Failed as invalid).
pub fn request_settled(request: &EvictionRequest) -> bool {
    let conditions = request
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref());
    condition_true(conditions, CONDITION_TARGET_EVICTED)
        || condition(conditions, CONDITION_FAILED)
            .is_some_and(|c| c.status == "True" && c.reason == REASON_EVICTION_INVALID)
}

/// The controller's refusal of `request` (Failed, reason EvictionInvalid: the target is
/// missing, another pod, or one of a pod group), its message. Final for the pod, as the CRD's
/// [`crate::eviction_request::crd::refusal`].
pub fn refusal(request: &EvictionRequest) -> Option<&str> {
    let conditions = request.status.as_ref()?.conditions.as_deref()?;
    true_with_reason(conditions, CONDITION_FAILED, REASON_EVICTION_INVALID)
}

/// Whether a request needs a sync: any not settled, and a settled one whose spec changed since
/// (as upstream, its observedGeneration keeps following the spec).
pub fn request_needs_sync(request: &EvictionRequest) -> bool {
    let observed = request.status.as_ref().and_then(|s| s.observed_generation);
    !request_settled(request) || observed != request.metadata.generation
}

/// An EvictionRequest's conditions follow its target's relevant Eviction; before there is
/// one, both are False with reason AwaitingEviction. A new Eviction resets them the same way.
pub fn request_conditions(
    existing: Option<&[Condition]>,
    eviction: Option<&Eviction>,
    now: Timestamp,
) -> Vec<Condition> {
    [CONDITION_TARGET_EVICTED, CONDITION_FAILED]
        .into_iter()
        .map(
            |kind| match eviction.and_then(|e| condition(conditions_of(e), kind)) {
                Some(c) => set_condition(
                    existing,
                    kind,
                    c.status == "True",
                    &c.reason,
                    &c.message,
                    now,
                ),
                None => set_condition(
                    existing,
                    kind,
                    false,
                    REASON_AWAITING_EVICTION,
                    "Waiting for an Eviction to report on progress.",
                    now,
                ),
            },
        )
        .collect()
}
