//! A request in words, for people (`evictionrequest-controller describe`, `kubectl evictkit
//! describe`): who asked, the interceptors in order and their timeline, the outcome.

use evictkit_api::conditions::STATUS_TRUE;
use evictkit_api::eviction_request::EvictionRequest;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::state::State;

/// A request in words, for `evictionrequest-controller describe`: who asked, who is active,
/// what each interceptor said, and how it ended.
pub fn describe(request: &EvictionRequest, now: Timestamp) -> Vec<String> {
    let ago = |time: &Time| {
        let seconds = now.duration_since(time.0).as_secs().max(0);
        format!("{} ({}s ago)", time.0, seconds)
    };
    let namespace = request.metadata.namespace.as_deref().unwrap_or_default();
    let name = request.metadata.name.as_deref().unwrap_or_default();
    let pod = request.spec.target.pod.as_ref().map_or_else(
        || "?".to_owned(),
        |p| format!("{namespace}/{} (uid {})", p.name, p.uid),
    );
    let mut lines = vec![format!(
        "EvictionRequest {namespace}/{name} asks for the eviction of pod {pod}."
    )];
    if let Some(created) = &request.metadata.creation_timestamp {
        lines.push(format!("Created {}.", ago(created)));
    }
    let requesters: Vec<&str> = request
        .spec
        .requesters
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    lines.push(if requesters.is_empty() {
        "No requester is left.".to_owned()
    } else {
        format!("Requested by {}.", requesters.join(", "))
    });
    let status = request.status.clone().unwrap_or_default();
    if status.target_interceptors.is_empty() {
        lines.push("The controller has not selected the interceptors yet.".to_owned());
    } else {
        let order: Vec<&str> = status
            .target_interceptors
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        lines.push(format!("Interceptors, in order: {}.", order.join(", ")));
    }
    if !status.processed_interceptors.is_empty() {
        lines.push(format!(
            "Done with: {}.",
            status.processed_interceptors.join(", ")
        ));
    }
    match status.active_interceptors.first() {
        Some(active) => lines.push(format!("Active: {active}.")),
        None => lines.push("No interceptor is active.".to_owned()),
    }
    for entry in &status.interceptors {
        let mut facts = Vec::new();
        if let Some(start) = &entry.start_time {
            facts.push(format!("started {}", ago(start)));
        }
        if let Some(heartbeat) = &entry.heartbeat_time {
            facts.push(format!("last heartbeat {}", ago(heartbeat)));
        }
        if let Some(expected) = &entry.expected_finish_time {
            facts.push(format!("expects to finish at {}", expected.0));
        }
        if let Some(completed) = &entry.completion_time {
            facts.push(format!("completed {}", ago(completed)));
        }
        if !entry.message.is_empty() {
            facts.push(format!("says \"{}\"", entry.message));
        }
        lines.push(format!("  {}: {}.", entry.name, facts.join("; ")));
    }
    for condition in status.conditions.iter().filter(|c| c.status == STATUS_TRUE) {
        lines.push(format!(
            "{} ({}) since {}: {}",
            condition.type_,
            condition.reason,
            ago(&condition.last_transition_time),
            condition.message
        ));
    }
    if State::of_status(Some(&status)) == State::InProgress {
        lines.push("The eviction is in progress.".to_owned());
    }
    lines
}
