//! The KEP's messages the controller writes, and the retry count it reads back from its own
//! message so a restart keeps the imperative eviction's back-off.

/// KEP: "Target Pod xyz was not found."
pub fn message_not_found(pod: &str) -> String {
    format!("Target Pod {pod} was not found.")
}

/// KEP: "Target Pod xyz is part of a Workload/PodGroup. Eviction of such pods is currently not
/// supported."
pub fn message_workload(pod: &str) -> String {
    format!(
        "Target Pod {pod} is part of a Workload/PodGroup. Eviction of such pods is currently not supported."
    )
}

/// KEP (Eviction): "Could not evict a pod due to failing eviction requests, number of retries: 7".
pub fn message_eviction_failed(retries: u32) -> String {
    format!("{EVICTION_FAILED_PREFIX}{retries}")
}

pub(super) const EVICTION_FAILED_PREFIX: &str =
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
