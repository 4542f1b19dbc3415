//! The labels the request copies from its target pod (by the controller, or by the requester
//! that creates it). Whether the pod is part of a workload the alpha leaves alone, and how the
//! imperative interceptor may evict it, are both APIs' rules
//! ([`crate::eviction_request::is_part_of_workload`], [`crate::eviction_request::imperative()`]).

use std::collections::BTreeMap;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{
    EVICTION_REQUEST_CONTROLLER as CONTROLLER_FIELD_MANAGER, LABELS_FROM_POD,
};
use k8s_openapi::api::core::v1::Pod;

/// KEP (Label Synchronization): the changes that make the request carry the pod's labels, the
/// pod winning conflicts (`None`: remove the key). A label the pod dropped goes too when it came
/// from the pod: copied by the controller (its managedFields entry) or by the requester that
/// created the request (named in [`LABELS_FROM_POD`]). Labels others set on the request are
/// theirs. `None` when nothing is to change, so a request whose requester copied the labels
/// costs the controller no write for them.
pub(super) fn labels_to_sync(
    request: &EvictionRequest,
    pod: &Pod,
) -> Option<BTreeMap<String, Option<String>>> {
    let pod_labels = pod.metadata.labels.as_ref();
    let request_labels = request.metadata.labels.as_ref();
    let on_request = |key: &str| request_labels.and_then(|l| l.get(key));
    let mut changes: BTreeMap<String, Option<String>> = pod_labels
        .into_iter()
        .flatten()
        .filter(|(key, value)| on_request(key) != Some(*value))
        .map(|(key, value)| (key.clone(), Some(value.clone())))
        .collect();
    let from_pod = labels_managed_by(request, CONTROLLER_FIELD_MANAGER)
        .into_iter()
        .chain(labels_from_pod(request));
    for key in from_pod {
        if on_request(&key).is_some() && !pod_labels.is_some_and(|l| l.contains_key(&key)) {
            changes.insert(key, None);
        }
    }
    (!changes.is_empty()).then_some(changes)
}

/// The label keys the request's creator copied from the pod ([`LABELS_FROM_POD`]).
fn labels_from_pod(request: &EvictionRequest) -> Vec<String> {
    request
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LABELS_FROM_POD))
        .into_iter()
        .flat_map(|keys| keys.split(','))
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The label keys `manager` owns on `request` (its managedFields entry for the object itself,
/// not a subresource).
pub fn labels_managed_by(request: &EvictionRequest, manager: &str) -> Vec<String> {
    managed_by(request, manager, "/f:metadata/f:labels")
}

/// The keys of the map at `pointer` (`/f:metadata/f:labels`) that `manager` owns on the object.
fn managed_by(request: &EvictionRequest, manager: &str, pointer: &str) -> Vec<String> {
    request
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry.manager.as_deref() == Some(manager)
                && entry.subresource.as_deref().unwrap_or_default().is_empty()
        })
        .filter_map(|entry| entry.fields_v1.as_ref())
        .filter_map(|fields| fields.0.pointer(pointer)?.as_object())
        .flat_map(|map| map.keys())
        .filter_map(|key| key.strip_prefix("f:"))
        .map(str::to_owned)
        .collect()
}

/// What a requester's server-side apply of an EvictionRequest carries in its metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequesterMetadata {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// The labels (and [`LABELS_FROM_POD`]) `requester` applies to the request of a pod labelled
/// `pod_labels`: creating it (`existing` is `None`), all of the pod's labels, so the
/// controller's label synchronisation has nothing to write; on an existing request, what it
/// owns there already, unchanged (an apply that left them out would remove them, and one
/// with other values would conflict with the controller's updates).
pub fn requester_metadata(
    existing: Option<&EvictionRequest>,
    pod_labels: Option<&BTreeMap<String, String>>,
    requester: &str,
) -> RequesterMetadata {
    let Some(request) = existing else {
        let labels = pod_labels.cloned().unwrap_or_default();
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        let annotations = (!keys.is_empty())
            .then(|| (LABELS_FROM_POD.to_owned(), keys.join(",")))
            .into_iter()
            .collect();
        return RequesterMetadata {
            labels,
            annotations,
        };
    };
    let owned = |pointer: &str, map: Option<&BTreeMap<String, String>>| {
        managed_by(request, requester, pointer)
            .into_iter()
            .filter_map(|key| Some((key.clone(), map?.get(&key)?.clone())))
            .collect()
    };
    RequesterMetadata {
        labels: owned("/f:metadata/f:labels", request.metadata.labels.as_ref()),
        annotations: owned(
            "/f:metadata/f:annotations",
            request.metadata.annotations.as_ref(),
        ),
    }
}
