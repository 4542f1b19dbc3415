//! A pod's eviction on `lifecycle.k8s.io` in words (`describe`), shaped as the CRD's
//! [`crate::eviction_request::crd::describe`]: who asks, the responders in order with each one's
//! timeline, the outcome; then each EvictionRequest with its intent and age. Requests that no
//! Eviction has taken up yet say so.

use jiff::Timestamp;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::conditions::condition;
use super::names::{CONDITION_FAILED, CONDITION_TARGET_EVICTED, INTENT_EVICTION, STATE_ACTIVE};
use super::selection::{responder_order, responder_status};

/// `evictions` and `requests` of one pod name (several pods of that name over time: each
/// Eviction on its own), as lines.
pub fn describe_pod(
    evictions: &[Eviction],
    requests: &[EvictionRequest],
    now: Timestamp,
) -> Vec<String> {
    let ago = |time: &Time| {
        let seconds = now.duration_since(time.0).as_secs().max(0);
        format!("{} ({seconds}s ago)", time.0)
    };
    let mut lines = Vec::new();
    let mut evictions: Vec<&Eviction> = evictions.iter().collect();
    evictions.sort_by_key(|e| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
    for eviction in &evictions {
        let namespace = eviction.metadata.namespace.as_deref().unwrap_or_default();
        let target = eviction.spec.target.pod.as_ref().map_or_else(
            || "?".to_owned(),
            |p| format!("{namespace}/{} (uid {})", p.name, p.uid),
        );
        lines.push(format!(
            "Eviction {namespace}/{} of pod {target}.",
            eviction.metadata.name.as_deref().unwrap_or_default()
        ));
        if let Some(created) = &eviction.metadata.creation_timestamp {
            lines.push(format!("Created {}.", ago(created)));
        }
        let status = eviction.status.as_ref();
        let requesters = status
            .and_then(|s| s.requesters.as_deref())
            .unwrap_or_default();
        let (asking, withdrawn): (Vec<_>, Vec<_>) =
            requesters.iter().partition(|r| r.intent == INTENT_EVICTION);
        let names = |list: &[&k8s_openapi::api::lifecycle::v1alpha1::Requester]| {
            list.iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        lines.push(if asking.is_empty() {
            "No requester asks any more.".to_owned()
        } else {
            format!("Requested by {}.", names(&asking))
        });
        if !withdrawn.is_empty() {
            lines.push(format!("Withdrawn: {}.", names(&withdrawn)));
        }
        let mut responders = status
            .and_then(|s| s.target_responders.clone())
            .unwrap_or_default();
        responders.sort_by(responder_order);
        if responders.is_empty() {
            lines.push("The controller has not selected the responders yet.".to_owned());
        } else {
            let order: Vec<String> = responders
                .iter()
                .map(|r| format!("{} (priority {})", r.name, r.priority))
                .collect();
            lines.push(format!("Responders, in order: {}.", order.join(", ")));
        }
        match responders.iter().find(|r| r.state == STATE_ACTIVE) {
            Some(active) => lines.push(format!("Active: {}.", active.name)),
            None => lines.push("No responder is active.".to_owned()),
        }
        for responder in &responders {
            let mut facts = vec![responder.state.clone()];
            if let Some(own) = responder_status(status, &responder.name) {
                for (what, time) in [
                    ("started", &own.start_time),
                    ("last heartbeat", &own.heartbeat_time),
                    ("completed", &own.completion_time),
                ] {
                    if let Some(time) = time {
                        facts.push(format!("{what} {}", ago(time)));
                    }
                }
                if let Some(expected) = &own.expected_completion_time {
                    facts.push(format!("expects to complete at {}", expected.0));
                }
                if let Some(message) = own.message.as_deref().filter(|m| !m.is_empty()) {
                    facts.push(format!("says \"{message}\""));
                }
            }
            lines.push(format!("  {}: {}.", responder.name, facts.join("; ")));
        }
        let conditions = status.and_then(|s| s.conditions.as_deref());
        let mut ended = false;
        for kind in [CONDITION_TARGET_EVICTED, CONDITION_FAILED] {
            if let Some(c) = condition(conditions, kind).filter(|c| c.status == "True") {
                ended = true;
                lines.push(format!(
                    "{} ({}) since {}: {}",
                    c.type_,
                    c.reason,
                    ago(&c.last_transition_time),
                    c.message
                ));
            }
        }
        if !ended {
            lines.push("The eviction is in progress.".to_owned());
        }
    }
    let mut requests: Vec<&EvictionRequest> = requests.iter().collect();
    requests.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut untaken = false;
    for request in &requests {
        let uid = request.spec.target.pod.as_ref().map(|p| p.uid.as_str());
        let conditions = request
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref());
        // An ended request may have outlived its Eviction (garbage-collected): not untaken.
        untaken |= conditions.is_none_or(<[_]>::is_empty)
            && !evictions
                .iter()
                .any(|e| e.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == uid);
        let mut facts = vec![format!(
            "{} wants {}",
            request.spec.requester, request.spec.intent
        )];
        if let Some(created) = &request.metadata.creation_timestamp {
            facts.push(format!("created {}", ago(created)));
        }
        for kind in [CONDITION_TARGET_EVICTED, CONDITION_FAILED] {
            if let Some(c) = condition(conditions, kind) {
                facts.push(format!("{}={} ({})", c.type_, c.status, c.reason));
            }
        }
        lines.push(format!(
            "EvictionRequest {}: {}.",
            request.metadata.name.as_deref().unwrap_or_default(),
            facts.join("; ")
        ));
    }
    if untaken {
        lines.push(
            "No Eviction yet: the eviction request controller has not taken up the request \
             (is evictionrequest-controller running with --api auto or lifecycle?)."
                .to_owned(),
        );
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(requester: &str, intent: &str, uid: &str) -> EvictionRequest {
        serde_json::from_value(json!({
            "metadata": {"name": format!("web-1-{}", requester.replace(['.', '/'], "-")), "namespace": "shop",
                         "creationTimestamp": "2026-11-27T10:00:00Z"},
            "spec": {"target": {"pod": {"name": "web-1", "uid": uid}}, "requester": requester, "intent": intent},
        }))
        .unwrap()
    }

    #[test]
    fn an_eviction_reads_as_the_crds_timeline_and_its_requests_follow() {
        let now: Timestamp = "2026-11-27T10:02:00Z".parse().unwrap();
        let eviction: Eviction = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "creationTimestamp": "2026-11-27T10:00:01Z"},
            "spec": {"target": {"pod": {"name": "web-1", "uid": "uid-1"}}},
            "status": {
                "requesters": [{"name": "example.com/maintenance", "intent": "Eviction"},
                               {"name": "example.com/old", "intent": "Withdrawn"}],
                "targetResponders": [
                    {"name": "imperative-eviction.k8s.io/evictor", "priority": 100, "state": "Active"},
                    {"name": "example.com/backup", "priority": 2000, "state": "Completed"}],
                "responders": [
                    {"name": "example.com/backup", "startTime": "2026-11-27T10:00:01Z",
                     "heartbeatTime": "2026-11-27T10:00:30Z", "completionTime": "2026-11-27T10:01:00Z", "message": "copied"},
                    {"name": "imperative-eviction.k8s.io/evictor", "startTime": "2026-11-27T10:01:00Z",
                     "heartbeatTime": "2026-11-27T10:01:50Z",
                     "message": "Cannot evict pod as it would violate the pod's disruption budget."}],
            },
        }))
        .unwrap();
        let requests = [
            request("example.com/old", "Withdrawn", "uid-1"),
            request("example.com/maintenance", "Eviction", "uid-1"),
        ];
        #[rustfmt::skip]
        let expected = [
            "Eviction shop/web-1 of pod shop/web-1 (uid uid-1).",
            "Created 2026-11-27T10:00:01Z (119s ago).",
            "Requested by example.com/maintenance.",
            "Withdrawn: example.com/old.",
            "Responders, in order: example.com/backup (priority 2000), imperative-eviction.k8s.io/evictor (priority 100).",
            "Active: imperative-eviction.k8s.io/evictor.",
            "  example.com/backup: Completed; started 2026-11-27T10:00:01Z (119s ago); last heartbeat 2026-11-27T10:00:30Z (90s ago); completed 2026-11-27T10:01:00Z (60s ago); says \"copied\".",
            "  imperative-eviction.k8s.io/evictor: Active; started 2026-11-27T10:01:00Z (60s ago); last heartbeat 2026-11-27T10:01:50Z (10s ago); says \"Cannot evict pod as it would violate the pod's disruption budget.\".",
            "The eviction is in progress.",
            "EvictionRequest web-1-example-com-maintenance: example.com/maintenance wants Eviction; created 2026-11-27T10:00:00Z (120s ago).",
            "EvictionRequest web-1-example-com-old: example.com/old wants Withdrawn; created 2026-11-27T10:00:00Z (120s ago).",
        ];
        assert_eq!(describe_pod(&[eviction], &requests, now), expected);
    }

    #[test]
    fn requests_without_an_eviction_say_the_controller_has_not_taken_them_up() {
        let now: Timestamp = "2026-11-27T10:00:05Z".parse().unwrap();
        let mut evicted = request("example.com/maintenance", "Eviction", "uid-0");
        evicted.status = serde_json::from_value(json!({"conditions": [
            {"type": "TargetEvicted", "status": "True", "reason": "PodDeleted", "message": "", "lastTransitionTime": "2026-11-27T10:00:04Z"}]}))
        .unwrap();
        let line = "EvictionRequest web-1-example-com-maintenance: example.com/maintenance wants Eviction; created 2026-11-27T10:00:00Z (5s ago)";
        // Ended, its Eviction gone with its last request's ownership: nothing is pending.
        assert_eq!(
            describe_pod(&[], std::slice::from_ref(&evicted), now),
            [format!("{line}; TargetEvicted=True (PodDeleted).")]
        );
        let fresh = request("example.com/maintenance", "Eviction", "uid-1");
        assert_eq!(
            describe_pod(&[], &[fresh], now),
            [
                format!("{line}."),
                "No Eviction yet: the eviction request controller has not taken up the request (is evictionrequest-controller running with --api auto or lifecycle?).".to_owned(),
            ]
        );
    }
}
