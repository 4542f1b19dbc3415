//! Upstream's early validation: why an EvictionRequest, or an Eviction on its own, is refused
//! (in upstream's condition messages, with reason `EvictionInvalid`), and the status a refused
//! Eviction and its requests are given, so that the apiserver accepts the write.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{
    Eviction, EvictionRequest, EvictionStatus, ResponderStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::conditions::set_condition;
use super::evictions::{is_finished, relevant_eviction};
use super::names::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, REASON_EVICTION_FAILED, REASON_EVICTION_INVALID,
    STATE_ACTIVE, STATE_CANCELED,
};
use super::responders::{Progress, Transition};
use super::target::{Target, in_pod_group};

/// Why an EvictionRequest is refused before any Eviction exists for it (upstream's early
/// validation), as the `Failed` message with reason `EvictionInvalid`.
pub fn request_invalid(
    request: &EvictionRequest,
    pod: Option<&Pod>,
    has_eviction: bool,
) -> Option<String> {
    let Some(reference) = request.spec.target.pod.as_ref() else {
        return Some(UNSUPPORTED_TARGET.to_owned());
    };
    match pod {
        None if !has_eviction => Some("Target pod not found.".to_owned()),
        Some(pod) if !has_eviction && pod.metadata.uid.as_deref() != Some(&reference.uid) => {
            Some(format!(
                "Target pod UID mismatch: expected {}, got {}.",
                reference.uid,
                pod.metadata.uid.as_deref().unwrap_or_default()
            ))
        }
        Some(pod) if in_pod_group(pod) => Some(IN_SCHEDULING_GROUP.to_owned()),
        _ => None,
    }
}

/// Why an Eviction is refused on its own (upstream validates Evictions as well as requests, so
/// one made by hand or a second for one target does not activate responders), as the `Failed`
/// message with reason `EvictionInvalid`: a target other than a pod, an active Eviction of the
/// same target that is not the one its requests follow, a pod in a scheduling group.
/// `evictions` are all the target's Evictions, this one included.
pub fn eviction_invalid(
    eviction: &Eviction,
    target: Target<'_>,
    evictions: &[&Eviction],
) -> Option<String> {
    if eviction.spec.target.pod.is_none() {
        return Some(UNSUPPORTED_TARGET.to_owned());
    }
    let (relevant, _) = relevant_eviction(evictions);
    if let Some(relevant) = relevant.filter(|e| !is_finished(e))
        && relevant.metadata.uid != eviction.metadata.uid
    {
        return Some("Active Eviction already exists for the same target.".to_owned());
    }
    match target {
        Target::Present(pod) if in_pod_group(pod) => Some(IN_SCHEDULING_GROUP.to_owned()),
        _ => None,
    }
}

/// Condition messages are upstream's words (the tests of `upstream_messages` hold them to the
/// revision docs/evictionrequest-upstream-parity.md pins). A target other than a pod:
const UNSUPPORTED_TARGET: &str = "Unsupported target type.";
/// A pod in a scheduling group, the same for a request and an Eviction.
const IN_SCHEDULING_GROUP: &str =
    "Target pod references a SchedulingGroup. Eviction is currently not supported.";

/// The step of a refused Eviction: `Failed=True` (EvictionInvalid) and `TargetEvicted=False`,
/// its generation observed, and its active responder, if any, Canceled (validation wants the
/// last active responder in a final state in the write that sets a final condition; an
/// Eviction refused before its first step has none); the rest of the status as it was.
pub fn refuse(eviction: &Eviction, message: &str, now: Timestamp) -> Progress {
    let old = eviction.status.clone().unwrap_or_default();
    let conditions = invalid_conditions(old.conditions.as_deref(), message, now);
    let responders = old.responders.map(|list| {
        list.into_iter()
            .map(|r| ResponderStatus {
                name: r.name,
                start_time: r.start_time,
                ..ResponderStatus::default()
            })
            .collect()
    });
    let mut transitions = Vec::new();
    let target_responders = old.target_responders.map(|list| {
        list.into_iter()
            .map(|mut r| {
                if r.state == STATE_ACTIVE {
                    r.state = STATE_CANCELED.to_owned();
                    transitions.push(Transition {
                        responder: r.name.clone(),
                        from: STATE_ACTIVE.to_owned(),
                        to: STATE_CANCELED.to_owned(),
                    });
                }
                r
            })
            .collect()
    });
    Progress {
        status: EvictionStatus {
            conditions: Some(conditions),
            observed_generation: eviction.metadata.generation,
            responders,
            target_responders,
            ..old
        },
        transitions,
        requeue_after: None,
    }
}

/// The conditions of a refused request: `Failed=True` (EvictionInvalid), `TargetEvicted=False`.
pub fn invalid_conditions(
    existing: Option<&[Condition]>,
    message: &str,
    now: Timestamp,
) -> Vec<Condition> {
    vec![
        set_condition(
            existing,
            CONDITION_FAILED,
            true,
            REASON_EVICTION_INVALID,
            message,
            now,
        ),
        set_condition(
            existing,
            CONDITION_TARGET_EVICTED,
            false,
            REASON_EVICTION_FAILED,
            "",
            now,
        ),
    ]
}
