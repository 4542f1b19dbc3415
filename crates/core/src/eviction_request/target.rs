//! What the controller reads of the target pod: whether it is part of a workload the alpha
//! leaves alone, how the imperative interceptor may evict it, and the labels the request
//! copies from it.

use std::collections::BTreeMap;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{
    EVICTION_REQUEST_CONTROLLER as CONTROLLER_FIELD_MANAGER, MIRROR_POD_ANNOTATION, POD_GROUP_LABEL,
};
use k8s_openapi::api::core::v1::Pod;

use super::Imperative;

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

/// KEP (Label Synchronization): the pod's labels on the request, the pod winning conflicts;
/// a label the controller copied earlier and the pod no longer has goes too (the controller
/// applies the pod's labels with server-side apply, which removes the keys it owned and no
/// longer sends). Labels others set on the request are theirs.
pub(super) fn labels_to_sync(
    request: &EvictionRequest,
    pod: &Pod,
) -> Option<BTreeMap<String, String>> {
    let pod_labels = pod.metadata.labels.clone().unwrap_or_default();
    let request_labels = request.metadata.labels.as_ref();
    let copied = pod_labels
        .iter()
        .all(|(k, v)| request_labels.and_then(|l| l.get(k)) == Some(v));
    let removed = labels_managed_by(request, CONTROLLER_FIELD_MANAGER)
        .into_iter()
        .any(|key| !pod_labels.contains_key(&key));
    (!copied || removed).then_some(pod_labels)
}

/// The label keys `manager` owns on `request` (its managedFields entry for the object itself,
/// not a subresource).
pub fn labels_managed_by(request: &EvictionRequest, manager: &str) -> Vec<String> {
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
        .filter_map(|fields| fields.0.pointer("/f:metadata/f:labels")?.as_object())
        .flat_map(|labels| labels.keys())
        .filter_map(|key| key.strip_prefix("f:"))
        .map(str::to_owned)
        .collect()
}

/// KEP (Eviction): what the default interceptor does with the pod (the upstream API's
/// imperative evictor too).
pub fn imperative(pod: &Pod) -> Imperative {
    if pod.metadata.deletion_timestamp.is_some() {
        return Imperative::Terminating;
    }
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION));
    if mirror {
        return Imperative::Unsupported(
            "API-initiated eviction of mirror pods is not supported: delete the static pod's manifest on its node to terminate it.".to_owned(),
        );
    }
    let daemon_set = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    if daemon_set {
        return Imperative::Unsupported(
            "API-initiated eviction of DaemonSet pods is not supported: the DaemonSet would recreate the pod; terminate it by other means (e.g. a node taint or the DaemonSet's node selector).".to_owned(),
        );
    }
    Imperative::Evict
}
