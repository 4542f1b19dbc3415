//! KEP-4563's EvictionRequest decisions, for both APIs that serve it (docs/architecture.md,
//! "The two EvictionRequest APIs"):
//!
//! | half | API | what it decides |
//! |---|---|---|
//! | [`crd`] | our `evictkit.io/v1alpha1` CRD: one request per pod, named after its UID, its requesters listed in it | the state machine (validation, label sync, interceptor hand-over, cancellation, imperative eviction with backoff), admission's time rules |
//! | [`upstream`] | Kubernetes' own `lifecycle.k8s.io/v1alpha1` (v1.37+): one request per requester and pod, plus one `Eviction` per pod | the Eviction's step (requesters, responders, conditions), early validation, the imperative evictor's reports, cleanup |
//!
//! Beside them, what both share: [`requester`] (where a requester's request stands on either
//! API, and which API a requester in `auto` asks through), the imperative eviction's decision
//! ([`imperative()`], its retry count in [`message_eviction_failed`]), and the rules below that
//! do not depend on the API.

use evictkit_api::conditions::STATUS_TRUE;
use evictkit_api::keys::POD_GROUP_LABEL;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub mod crd;
mod imperative;
pub mod requester;
pub mod upstream;

pub use imperative::{Imperative, imperative, message_eviction_failed, retries_in_message};

/// Times travel through the API with second precision; comparing with the stored value needs
/// the same precision.
pub fn whole_seconds(time: Timestamp) -> Timestamp {
    Timestamp::from_second(time.as_second()).unwrap_or(time)
}

/// KEP: in the alpha, pods of a Workload (`.spec.workloadRef`, newer than the Kubernetes we
/// build against) are not supported. Out of tree a pod shows that by an owner of kind
/// `Workload` or `PodGroup`, or the coscheduling plugin's pod-group label.
pub fn is_part_of_workload(pod: &Pod) -> bool {
    let owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| matches!(o.kind.as_str(), "Workload" | "PodGroup"));
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(POD_GROUP_LABEL));
    owned || labelled
}

/// The message of the condition `kind` that is True with `reason`: how the controller records
/// a refusal on either API (the CRD's Canceled/ValidationFailed, upstream's
/// Failed/EvictionInvalid).
fn true_with_reason<'a>(conditions: &'a [Condition], kind: &str, reason: &str) -> Option<&'a str> {
    conditions
        .iter()
        .find(|c| c.type_ == kind && c.status == STATUS_TRUE && c.reason == reason)
        .map(|c| c.message.as_str())
}
