//! Where an EvictionRequest stands, from its conditions (KEP "EvictionRequest Completion and
//! Deletion"), and what its requesters and interceptors read of it: the refusal that is final
//! for a pod, when a finished request goes, who asked and who is active.

use evictkit_api::conditions::{
    EVICTION_REQUEST_CANCELED, EVICTION_REQUEST_EVICTED, REASON_VALIDATION_FAILED, STATUS_TRUE,
};
use evictkit_api::eviction_request::{EvictionRequest, EvictionRequestStatus, InterceptorStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::messages::message_not_found;
use crate::eviction_request::true_with_reason;

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

/// Why the controller refused the request, when it canceled it because validation failed
/// (target missing, part of a Workload/PodGroup, malformed interceptors): the Canceled
/// condition's message. Final for this pod: the request is named after the pod's UID, and the
/// reasons do not change for the pod's lifetime (the annotation is validated on write, issue
/// 14), so a requester that re-created the request would be refused again, forever. Requesters
/// report the refusal and stop; a canceled request for any other reason (all requesters
/// withdrew) is created afresh.
pub fn refusal(request: &EvictionRequest) -> Option<&str> {
    let conditions = &request.status.as_ref()?.conditions;
    true_with_reason(
        conditions,
        EVICTION_REQUEST_CANCELED,
        REASON_VALIDATION_FAILED,
    )
}

/// The ownerReference a finished request gets to its pod, so the garbage collector deletes it
/// with the pod: `None` while the request is in progress (the Evicted condition must be written
/// before the pod's deletion could take the request with it, else requesters would miss it),
/// when the pod (of the target's UID) is gone, or when the reference is there already.
pub fn owner_to_add(
    request: &EvictionRequest,
    pod: Option<&Pod>,
    status: &EvictionRequestStatus,
) -> Option<OwnerReference> {
    if !State::of_status(Some(status)).is_finished() {
        return None;
    }
    let target = request.spec.target.pod.as_ref()?;
    let pod = pod.filter(|p| p.metadata.uid.as_deref() == Some(target.uid.as_str()))?;
    let owned = request
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == target.uid);
    (!owned).then(|| OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: target.uid.clone(),
        controller: None,
        block_owner_deletion: None,
    })
}

/// Whether `--finished-ttl` deletes the finished request: every finished request but a
/// [`refusal`] of a pod that still exists, which stays (until the pod goes, by its
/// ownerReference) as the record that asking again is pointless.
pub fn expires(request: &EvictionRequest, status: &EvictionRequestStatus) -> bool {
    let mut current = request.clone();
    current.status = Some(status.clone());
    State::of_status(Some(status)).is_finished()
        && refusal(&current)
            .is_none_or(|message| message == message_not_found(target_name(request)))
}

/// The name of the request's target pod; empty when it names none.
pub fn target_name(request: &EvictionRequest) -> &str {
    request
        .spec
        .target
        .pod
        .as_ref()
        .map_or("", |p| p.name.as_str())
}

/// The names of the requesters listed in the request.
pub fn requester_names(request: &EvictionRequest) -> impl Iterator<Item = &str> {
    request.spec.requesters.iter().map(|r| r.name.as_str())
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
