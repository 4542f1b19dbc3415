//! The KEP's messages the controller writes when it refuses a request.

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
