//! Where a requester's EvictionRequest stands once written (KEP-4563, both APIs): whether the
//! eviction request controller has taken it up, refused it, or ended it without the pod going.
//! A requester that says something about the pod on the strength of its request (the
//! taint-manager's `DisruptionTarget` condition) says it only once the request is taken up.
//!
//! And which API a requester in `auto` asks through ([`auto_api`]).

use evictkit_api::eviction_request::EvictionRequest;
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::crd::{State, refusal};
use super::upstream::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, REASON_EVICTION_INVALID, condition,
};

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
pub fn upstream_standing(request: &LifecycleRequest) -> Standing {
    match upstream_report(request) {
        UpstreamReport::Behind => Standing::Pending,
        UpstreamReport::Open | UpstreamReport::Evicted => Standing::Accepted,
        UpstreamReport::Failed(failed) if failed.reason == REASON_EVICTION_INVALID => {
            Standing::Refused
        }
        UpstreamReport::Failed(_) => Standing::Ended,
    }
}

/// What the eviction request controller last said of a `lifecycle.k8s.io` EvictionRequest, in
/// the conditions it mirrors from the pod's Eviction; what each requester makes of it is its own
/// ([`upstream_standing`], [`crate::descheduler_bridge::lifecycle_state`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UpstreamReport<'a> {
    /// The controller has not observed the request's current generation: its conditions are
    /// an older generation's (after a withdrawal, the `Failed` of the cancellation).
    Behind,
    /// Neither `TargetEvicted` nor `Failed` is True.
    Open,
    /// `TargetEvicted=True`.
    Evicted,
    /// `Failed=True`.
    Failed(&'a Condition),
}

pub(crate) fn upstream_report(request: &LifecycleRequest) -> UpstreamReport<'_> {
    let status = request.status.as_ref();
    if !caught_up(
        request.metadata.generation,
        status.and_then(|s| s.observed_generation),
    ) {
        return UpstreamReport::Behind;
    }
    let conditions = status.and_then(|s| s.conditions.as_deref());
    // Conditions are a map by type: the one of `kind`, if it is True.
    let is_true = |kind: &str| condition(conditions, kind).filter(|c| c.status == "True");
    if is_true(CONDITION_TARGET_EVICTED).is_some() {
        return UpstreamReport::Evicted;
    }
    is_true(CONDITION_FAILED).map_or(UpstreamReport::Open, UpstreamReport::Failed)
}

/// Whether the controller observed `generation` (an object without one is taken as seen).
fn caught_up(generation: Option<i64>, observed: Option<i64>) -> bool {
    generation.is_none_or(|generation| observed.is_some_and(|observed| observed >= generation))
}

/// The EvictionRequest API a requester asks through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `evictionrequests.evictkit.io`.
    Crd,
    /// `lifecycle.k8s.io/v1alpha1`.
    Lifecycle,
}

/// What a requester sees of the evictionrequest-controller (its Lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// No Lease to read where the requester looks (not installed there, or not readable).
    Unseen,
    /// Its Lease's holder says nothing of what it serves: a version from before the switch to
    /// lifecycle.k8s.io (those served the CRD only), or a holder that has not said yet.
    Silent,
    /// Its Lease's holder serves these.
    Serves { crd: bool, lifecycle: bool },
}

/// No API both the apiserver and the evictionrequest-controller serve: asking would write a
/// request nothing carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unserved {
    #[error(
        "the evictionrequest-controller does not serve lifecycle.k8s.io/v1alpha1 yet (a version from before the switch, or --api crd) and the evictkit.io CRD is not served: upgrade the evictionrequest-controller first (--api auto or lifecycle), then restart this requester"
    )]
    ControllerNotSwitched,
    #[error(
        "the evictionrequest-controller serves no EvictionRequest API this cluster serves (it serves crd: {crd}, lifecycle.k8s.io: {lifecycle}; the cluster: crd: {served_crd}, lifecycle.k8s.io: {served_lifecycle}): run it with --api auto"
    )]
    Neither {
        crd: bool,
        lifecycle: bool,
        served_crd: bool,
        served_lifecycle: bool,
    },
}

/// The API of a requester in `auto`, from what the apiserver serves (`served_crd`,
/// `served_lifecycle`) and what the evictionrequest-controller says it serves: the requester
/// follows the controller, so a requester restarted before the controller in an upgrade keeps
/// asking through the CRD the old controller serves, and moves to lifecycle.k8s.io at a restart
/// after the controller serves it. Without a controller to see, discovery alone decides, as
/// before (lifecycle.k8s.io wherever it is served).
pub fn auto_api(
    served_crd: bool,
    served_lifecycle: bool,
    controller: Controller,
) -> Result<Api, Unserved> {
    match controller {
        Controller::Unseen if served_lifecycle => Ok(Api::Lifecycle),
        Controller::Unseen => Ok(Api::Crd),
        Controller::Silent if served_crd => Ok(Api::Crd),
        Controller::Silent => Err(Unserved::ControllerNotSwitched),
        Controller::Serves {
            lifecycle: true, ..
        } if served_lifecycle => Ok(Api::Lifecycle),
        Controller::Serves { crd: true, .. } if served_crd => Ok(Api::Crd),
        Controller::Serves { crd, lifecycle } => Err(Unserved::Neither {
            crd,
            lifecycle,
            served_crd,
            served_lifecycle,
        }),
    }
}
