//! The eviction request controller's step on one request (KEP "Eviction Request Controller"):
//! its part of the status, the labels it copies from the pod, the hand-overs between
//! interceptors, and whether the imperative interceptor evicts.

use std::collections::BTreeMap;

use evictkit_api::conditions::{
    EVICTION_REQUEST_CANCELED, EVICTION_REQUEST_EVICTED, REASON_NO_REQUESTERS,
    REASON_TARGET_DELETED, REASON_TARGET_TERMINATED, REASON_VALIDATION_FAILED, STATUS_TRUE,
};
use evictkit_api::eviction_request::{
    EvictionRequest, EvictionRequestStatus, Interceptor, InterceptorStatus,
};
use evictkit_api::keys::IMPERATIVE_EVICTION_INTERCEPTOR;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::heartbeat::next_heartbeat;
use super::interceptors::PodInterceptors;
use super::messages::{message_not_found, message_workload};
use super::state::{State, interceptor_status, target_name};
use super::target::labels_to_sync;
use crate::eviction_request::{Imperative, imperative, is_part_of_workload, whole_seconds};

/// The controller's settings that shape decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// KEP: control passes to the next interceptor when the active one's heartbeat is older
    /// (20 minutes in the KEP; `--heartbeat-timeout`).
    pub heartbeat_timeout: SignedDuration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            heartbeat_timeout: SignedDuration::from_mins(20),
        }
    }
}

/// Why control passed from one interceptor to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandOverCause {
    /// The interceptor set its completionTime.
    Completed,
    /// Its heartbeat (or its activation, without one) is older than the heartbeat timeout.
    HeartbeatTimeout,
}

/// A change the controller makes, one Event each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The first interceptor was selected.
    Activated { interceptor: String },
    HandedOver {
        from: String,
        to: String,
        cause: HandOverCause,
    },
    Canceled {
        reason: &'static str,
        message: String,
    },
    Evicted {
        reason: &'static str,
        message: String,
    },
}

/// The outcome of [`reconcile`]: the controller's part of the status (its complete desired
/// value: conditions, observedGeneration, target/active/processed interceptors and the
/// imperative interceptor's entry), the labels to copy from the pod, and what to do next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub status: EvictionRequestStatus,
    /// The label changes that synchronise the request with its pod (`None` values: remove the
    /// key), as a JSON merge patch of `.metadata.labels` carries them; `None` when in sync.
    pub labels: Option<BTreeMap<String, Option<String>>>,
    pub imperative: Option<Imperative>,
    pub transitions: Vec<Transition>,
    /// Look again after this long even without a change (the active interceptor's heartbeat
    /// deadline).
    pub requeue_after: Option<SignedDuration>,
}

impl Plan {
    /// Writes the imperative interceptor's entry (its heartbeat follows the 60 s rule, its
    /// startTime comes with the first heartbeat). Only while it is active.
    pub fn record_imperative(&mut self, message: &str, now: Timestamp) {
        let status = &mut self.status;
        let previous = status
            .interceptors
            .iter()
            .position(|i| i.name == IMPERATIVE_EVICTION_INTERCEPTOR);
        let previous_entry = previous.map(|i| status.interceptors[i].clone());
        let heartbeat = next_heartbeat(
            previous_entry
                .as_ref()
                .and_then(|p| p.heartbeat_time.as_ref())
                .map(|t| t.0),
            now,
        );
        let entry = InterceptorStatus {
            name: IMPERATIVE_EVICTION_INTERCEPTOR.to_owned(),
            heartbeat_time: Some(Time(heartbeat)),
            start_time: Some(
                previous_entry
                    .and_then(|p| p.start_time)
                    .unwrap_or(Time(heartbeat)),
            ),
            expected_finish_time: None,
            completion_time: None,
            message: message.to_owned(),
        };
        match previous {
            Some(index) => status.interceptors[index] = entry,
            None => status.interceptors.push(entry),
        }
    }

    /// Ends the request as Evicted, for `reason`.
    fn evicted(&mut self, reason: &'static str, message: String, now: Timestamp) {
        self.end(EVICTION_REQUEST_EVICTED, reason, message, now);
    }

    /// Ends the request as Canceled, for `reason`.
    fn canceled(&mut self, reason: &'static str, message: String, now: Timestamp) {
        self.end(EVICTION_REQUEST_CANCELED, reason, message, now);
    }

    /// Ends the request with `condition_type` (Evicted or Canceled) as of `now`, for the
    /// generation the plan observes, and says so in a transition.
    fn end(
        &mut self,
        condition_type: &'static str,
        reason: &'static str,
        message: String,
        now: Timestamp,
    ) {
        let conditions = &mut self.status.conditions;
        conditions.retain(|c| c.type_ != condition_type);
        conditions.push(Condition {
            type_: condition_type.to_owned(),
            status: STATUS_TRUE.to_owned(),
            reason: reason.to_owned(),
            message: message.clone(),
            last_transition_time: Time(whole_seconds(now)),
            observed_generation: self.status.observed_generation,
        });
        self.transitions
            .push(if condition_type == EVICTION_REQUEST_EVICTED {
                Transition::Evicted { reason, message }
            } else {
                Transition::Canceled { reason, message }
            });
    }
}

/// The part of a status the controller owns (what it applies with server-side apply: a field
/// it stops sending is removed, so it always sends all of them).
pub fn controller_status(status: Option<&EvictionRequestStatus>) -> EvictionRequestStatus {
    let Some(status) = status else {
        return EvictionRequestStatus::default();
    };
    EvictionRequestStatus {
        observed_generation: status.observed_generation,
        conditions: status.conditions.clone(),
        target_interceptors: status.target_interceptors.clone(),
        active_interceptors: status.active_interceptors.clone(),
        activation_time: status.activation_time.clone(),
        processed_interceptors: status.processed_interceptors.clone(),
        interceptors: status
            .interceptors
            .iter()
            .filter(|i| i.name == IMPERATIVE_EVICTION_INTERCEPTOR)
            .cloned()
            .collect(),
    }
}

/// KEP "Eviction Request Controller": one step of the state machine for `request`, given its
/// target pod as the pod cache has it (`None`: no pod of that name) at `now`.
///
/// Order: a finished request stays as it is; the target gone or terminal makes it Evicted
/// (a target never seen makes it Canceled/ValidationFailed instead); a Workload/PodGroup pod
/// or a malformed interceptor annotation cancels it (ValidationFailed); no requesters cancels
/// it and clears the active interceptor; otherwise labels are synchronised, targetInterceptors
/// set once, and control passes along targetInterceptors, one hand-over per step.
pub fn reconcile(
    request: &EvictionRequest,
    pod: Option<&Pod>,
    now: Timestamp,
    config: &Config,
) -> Plan {
    let mut plan = Plan {
        status: controller_status(request.status.as_ref()),
        ..Plan::default()
    };
    plan.status.observed_generation = request.metadata.generation;
    if State::of_status(request.status.as_ref()).is_finished() {
        return plan;
    }
    let pod_name = target_name(request);
    let target_uid = request.spec.target.pod.as_ref().map(|p| p.uid.as_str());
    let seen_before = !plan.status.target_interceptors.is_empty();

    let pod = pod.filter(|p| p.metadata.uid.as_deref() == target_uid && target_uid.is_some());
    let Some(pod) = pod else {
        if seen_before {
            let message = format!("Target Pod {pod_name} was deleted.");
            plan.evicted(REASON_TARGET_DELETED, message, now);
        } else {
            let message = message_not_found(pod_name);
            plan.canceled(REASON_VALIDATION_FAILED, message, now);
        }
        return plan;
    };
    if let Some(phase) = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .filter(|phase| matches!(*phase, "Succeeded" | "Failed"))
    {
        let message = format!("Target Pod {pod_name} reached phase {phase}.");
        plan.evicted(REASON_TARGET_TERMINATED, message, now);
        return plan;
    }
    if is_part_of_workload(pod) {
        let message = message_workload(pod_name);
        plan.canceled(REASON_VALIDATION_FAILED, message, now);
        return plan;
    }
    if request.spec.requesters.is_empty() {
        let message =
            "All requesters have withdrawn; the eviction is no longer requested.".to_owned();
        plan.canceled(REASON_NO_REQUESTERS, message, now);
        plan.status.active_interceptors.clear();
        plan.status.activation_time = None;
        return plan;
    }

    plan.labels = labels_to_sync(request, pod);

    if !seen_before {
        match PodInterceptors::of(pod) {
            Ok(interceptors) => {
                plan.status.target_interceptors = interceptors
                    .with_default()
                    .into_iter()
                    .map(|name| Interceptor { name })
                    .collect();
            }
            Err(error) => {
                let message =
                    format!("Target Pod {pod_name} has invalid eviction interceptors: {error}.");
                plan.canceled(REASON_VALIDATION_FAILED, message, now);
                return plan;
            }
        }
    }

    advance(
        &mut plan,
        request.status.as_ref(),
        now,
        config.heartbeat_timeout,
    );

    if plan.status.active_interceptors.first().map(String::as_str)
        == Some(IMPERATIVE_EVICTION_INTERCEPTOR)
    {
        plan.imperative = Some(imperative(pod));
    }
    plan
}

/// KEP (Interceptor Selection): index 0 first; on completionTime or an expired heartbeat, the
/// next one, the previous one appended to processedInterceptors. The default interceptor,
/// last, is the controller itself and never times out. Each activation is recorded in
/// activationTime, so the window of an interceptor counts from when it really became active
/// (a controller outage delays hand-overs; it never shortens the successor's window).
fn advance(
    plan: &mut Plan,
    current: Option<&EvictionRequestStatus>,
    now: Timestamp,
    timeout: SignedDuration,
) {
    let now = whole_seconds(now);
    let status = &mut plan.status;
    let Some(active) = status.active_interceptors.first().cloned() else {
        let next = status
            .target_interceptors
            .get(status.processed_interceptors.len());
        if let Some(next) = next {
            status.active_interceptors = vec![next.name.clone()];
            status.activation_time = Some(Time(now));
            plan.transitions.push(Transition::Activated {
                interceptor: next.name.clone(),
            });
        }
        return;
    };
    // A request from before activation was recorded: its window starts now, never earlier.
    if status.activation_time.is_none() {
        status.activation_time = Some(Time(now));
    }
    if active == IMPERATIVE_EVICTION_INTERCEPTOR {
        return;
    }
    let mut facts = current.cloned().unwrap_or_default();
    facts.activation_time = status.activation_time.clone();
    let cause = match hand_over_due(&facts, &active, now, timeout) {
        Ok(cause) => cause,
        Err(deadline) => {
            plan.requeue_after = Some(deadline.duration_since(now));
            return;
        }
    };
    let index = status.processed_interceptors.len();
    let Some(next) = status
        .target_interceptors
        .get(index + 1)
        .map(|i| i.name.clone())
    else {
        return;
    };
    status.processed_interceptors.push(active.clone());
    status.active_interceptors = vec![next.clone()];
    status.activation_time = Some(Time(now));
    plan.transitions.push(Transition::HandedOver {
        from: active,
        to: next,
        cause,
    });
}

/// Whether control may pass from `active`: `Ok` with the cause when it completed or its
/// heartbeat deadline (the later of its last heartbeat and its recorded activation, plus
/// `timeout`) has passed, else `Err` with the deadline. With neither, the window counts from
/// `now`. The validating webhook asks the same question of a write that changes the active one.
pub fn hand_over_due(
    status: &EvictionRequestStatus,
    active: &str,
    now: Timestamp,
    timeout: SignedDuration,
) -> Result<HandOverCause, Timestamp> {
    let entry = interceptor_status(Some(status), active);
    if entry.is_some_and(|e| e.completion_time.is_some()) {
        return Ok(HandOverCause::Completed);
    }
    let heartbeat = entry.and_then(|e| e.heartbeat_time.as_ref());
    let last_seen = [heartbeat, status.activation_time.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .max()
        .unwrap_or(now);
    let deadline = last_seen + timeout;
    if now >= deadline {
        Ok(HandOverCause::HeartbeatTimeout)
    } else {
        Err(deadline)
    }
}
