//! Where a requester's EvictionRequest stands once written (KEP-4563, both APIs): whether the
//! eviction request controller has taken it up, refused it, or ended it without the pod going.
//! A requester that says something about the pod on the strength of its request (the
//! taint-manager's `DisruptionTarget` condition) says it only once the request is taken up.

use evictkit_api::eviction_request::EvictionRequest;
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;

use crate::eviction_request::{State, refusal};
use crate::lifecycle::{CONDITION_FAILED, CONDITION_TARGET_EVICTED, REASON_EVICTION_INVALID};

#[cfg(test)]
mod tests;

/// Where a requester's EvictionRequest for a pod stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Written, but the eviction request controller has not taken up this generation of it.
    Pending,
    /// The controller took it up (observed its current generation) and did not refuse it.
    Accepted,
    /// The controller refused it (validation failed): final for the pod.
    Refused,
    /// The controller took it up and it ended without the pod going (an upstream Eviction
    /// that `Failed`: every responder gave up, or the imperative eviction failed).
    Ended,
}

/// Where an `evictkit.io` EvictionRequest a requester has just asked through stands.
/// Joining changes `.spec.requesters`, so the controller has seen the join once it observed
/// the request's generation.
pub fn crd_standing(request: &EvictionRequest) -> Standing {
    if refusal(request).is_some() {
        return Standing::Refused;
    }
    let observed = request.status.as_ref().and_then(|s| s.observed_generation);
    if !caught_up(request.metadata.generation, observed) || State::of(request) == State::Canceled {
        // A canceled request is made afresh by the requester library; until then, nothing.
        return Standing::Pending;
    }
    Standing::Accepted
}

/// Where a `lifecycle.k8s.io` EvictionRequest stands once a requester stated intent `Eviction`
/// in it: the controller mirrors its Eviction's conditions onto it, refusing
/// with `Failed` and reason `EvictionInvalid`; an Eviction that failed otherwise has ended
/// without taking the pod.
pub fn lifecycle_standing(request: &LifecycleRequest) -> Standing {
    let status = request.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let is_true = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    if !caught_up(
        request.metadata.generation,
        status.and_then(|s| s.observed_generation),
    ) {
        return Standing::Pending;
    }
    if is_true(CONDITION_TARGET_EVICTED).is_some() {
        return Standing::Accepted;
    }
    match is_true(CONDITION_FAILED) {
        Some(failed) if failed.reason == REASON_EVICTION_INVALID => Standing::Refused,
        Some(_) => Standing::Ended,
        None => Standing::Accepted,
    }
}

/// Whether the controller observed `generation` (an object without one is taken as seen).
fn caught_up(generation: Option<i64>, observed: Option<i64>) -> bool {
    generation.is_none_or(|generation| observed.is_some_and(|observed| observed >= generation))
}
