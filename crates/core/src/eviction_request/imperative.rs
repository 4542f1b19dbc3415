//! The imperative eviction, the default interceptor's on the CRD and the imperative evictor's
//! (the default responder) on upstream's API: whether the pod may be evicted through the
//! Eviction API, and the retry count it writes into its message and reads back from it, so a
//! restart keeps its back-off.

use k8s_openapi::api::core::v1::Pod;

use crate::objects::is_mirror;

/// What the imperative eviction should do when it is active.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Imperative {
    /// Evict the pod through the Eviction API (PDBs respected), subject to the backoff.
    Evict,
    /// KEP: "API-initiated eviction of DaemonSet pods and mirror pods is not supported." The
    /// message goes into the interceptor's status entry.
    Unsupported(String),
    /// KEP: "No attempt will be made to evict pods that are currently terminating."
    Terminating,
}

/// KEP (Eviction): what the default interceptor does with the pod (the upstream API's
/// imperative evictor too).
pub fn imperative(pod: &Pod) -> Imperative {
    if pod.metadata.deletion_timestamp.is_some() {
        return Imperative::Terminating;
    }
    if is_mirror(&pod.metadata) {
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

/// KEP (Eviction): "Could not evict a pod due to failing eviction requests, number of retries: 7".
pub fn message_eviction_failed(retries: u32) -> String {
    format!("{EVICTION_FAILED_PREFIX}{retries}")
}

const EVICTION_FAILED_PREFIX: &str =
    "Could not evict a pod due to failing eviction requests, number of retries: ";

/// The retry count in the imperative interceptor's message, so the backoff goes on growing
/// after a controller restart (docs/architecture.md: level-triggered, no state only in memory).
pub fn retries_in_message(message: &str) -> Option<u32> {
    message
        .strip_prefix(EVICTION_FAILED_PREFIX)?
        .trim()
        .parse()
        .ok()
}
