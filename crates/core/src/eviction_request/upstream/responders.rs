//! One step of an Eviction that is not finished: its requesters refreshed, its responders
//! walked in priority order (one Active at a time, activation, completion, the heartbeat
//! deadline, cancellation when no requester wants the pod gone any more, the target gone or
//! terminal), and its conditions set, as a status the apiserver's validation accepts.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::lifecycle::v1alpha1::{
    Eviction, EvictionRequest, EvictionStatus, ResponderStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::conditions::set_condition;
use super::names::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, REASON_AWAITING_EVICTION,
    REASON_CANCELED_NO_REQUESTERS, REASON_EVICTION_FAILED, REASON_NO_FURTHER_RESPONDER,
    REASON_POD_DELETED, REASON_POD_TERMINAL, REASON_SUCCEEDED, STATE_ACTIVE, STATE_CANCELED,
    STATE_COMPLETED, STATE_INACTIVE, STATE_INTERRUPTED,
};
use super::participants::{has_eviction_intent, requesters};
use super::selection::{initial_responders, responder_order, responder_status};
use super::target::Target;

/// The controller's settings that shape decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The active responder is Interrupted when its heartbeat (or, before one, its startTime) is
    /// older. The API's deadline is 20 minutes; the apiserver refuses an earlier hand-over.
    pub heartbeat_timeout: SignedDuration,
    /// How long the active responder of a pod that is gone or terminal may take to report
    /// completion, from the pod's end.
    pub graceful_completion_delay: SignedDuration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            heartbeat_timeout: SignedDuration::from_mins(20),
            graceful_completion_delay: SignedDuration::from_secs(5),
        }
    }
}

/// A responder state change, for Events and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub responder: String,
    pub from: String,
    pub to: String,
}

/// The controller's part of an Eviction's status after one step, and when to look again.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// requesters, targetResponders, conditions and, per responder, only `name` and
    /// `startTime` (the rest of each entry belongs to its responder).
    pub status: EvictionStatus,
    pub transitions: Vec<Transition>,
    pub requeue_after: Option<SignedDuration>,
}

impl Progress {
    /// Whether this step wakes the next responder because the active one reported completion:
    /// a report that may come after the pod's removal the pod watch has not told yet, so a
    /// caller deciding from a cache confirms the pod first.
    pub fn hands_over_on_completion(&self) -> bool {
        let to = |state: &str| self.transitions.iter().any(|t| t.to == state);
        to(STATE_COMPLETED) && to(STATE_ACTIVE)
    }
}

/// One step of an Eviction that is not finished: requesters refreshed, responders advanced
/// (activation, completion, heartbeat deadline, cancellation, target gone), conditions set.
pub fn progress(
    eviction: &Eviction,
    target: Target<'_>,
    requests: &[&EvictionRequest],
    now: Timestamp,
    config: &Config,
) -> Progress {
    let old = eviction.status.as_ref();
    let existing_conditions = old.and_then(|s| s.conditions.as_deref());
    let mut responders = match old.and_then(|s| s.target_responders.clone()) {
        Some(list) if !list.is_empty() => list,
        _ => initial_responders(target),
    };
    responders.sort_by(responder_order);
    let before: Vec<String> = responders.iter().map(|r| r.state.clone()).collect();

    let gone = target.is_gone();
    let terminal = target.terminal();
    let canceled = !gone && !terminal && !has_eviction_intent(requests);
    let mut requeue_after = None;
    let mut waiting_for_responder = false;
    let done = responders.last().is_some_and(|r| is_final_state(&r.state));
    let active = responders.iter().position(|r| r.state == STATE_ACTIVE);

    if !done {
        match active {
            Some(i) if gone || terminal => {
                let status = responder_status(old, &responders[i].name);
                if status.is_some_and(|s| s.completion_time.is_some()) {
                    responders[i].state = STATE_COMPLETED.to_owned();
                } else if let Some(wait) = target
                    .stopped_at()
                    .map(|at| config.graceful_completion_delay - now.duration_since(at))
                    .filter(|wait| wait.is_positive())
                {
                    // The responder may still report; decide when the grace is over.
                    waiting_for_responder = true;
                    requeue_after = Some(wait);
                } else {
                    responders[i].state = STATE_INTERRUPTED.to_owned();
                }
            }
            Some(i) if canceled => responders[i].state = STATE_CANCELED.to_owned(),
            None if gone || terminal || canceled => {}
            _ => {
                let i = active.unwrap_or_else(|| {
                    responders
                        .iter()
                        .position(|r| r.state == STATE_INACTIVE)
                        .unwrap_or(0)
                });
                let status = responder_status(old, &responders[i].name);
                let (state, wait) = match status {
                    Some(s) if s.completion_time.is_some() => (STATE_COMPLETED, None),
                    Some(ResponderStatus {
                        start_time: Some(start),
                        heartbeat_time,
                        ..
                    }) => {
                        let last = heartbeat_time
                            .as_ref()
                            .map_or(start.0, |h| h.0.max(start.0));
                        let left = config.heartbeat_timeout - now.duration_since(last);
                        if left.is_positive() {
                            (STATE_ACTIVE, Some(left))
                        } else {
                            (STATE_INTERRUPTED, None)
                        }
                    }
                    _ => (STATE_ACTIVE, Some(config.heartbeat_timeout)),
                };
                responders[i].state = state.to_owned();
                requeue_after = wait;
                if state != STATE_ACTIVE
                    && let Some(next) = responders.get_mut(i + 1)
                {
                    next.state = STATE_ACTIVE.to_owned();
                    requeue_after = Some(config.heartbeat_timeout);
                }
            }
        }
    }
    let progression_done = responders.last().is_some_and(|r| is_final_state(&r.state));

    let entries = responders
        .iter()
        .map(|r| {
            let start_time = responder_status(old, &r.name)
                .and_then(|s| s.start_time.clone())
                .or_else(|| (r.state == STATE_ACTIVE).then_some(Time(now)));
            ResponderStatus {
                name: r.name.clone(),
                start_time,
                ..ResponderStatus::default()
            }
        })
        .collect();

    let set = |kind, status, reason: &str, message: &str| {
        set_condition(existing_conditions, kind, status, reason, message, now)
    };
    let (evicted, failed) = if gone && !waiting_for_responder {
        (
            set(
                CONDITION_TARGET_EVICTED,
                true,
                REASON_POD_DELETED,
                "Target pod has been deleted.",
            ),
            set(CONDITION_FAILED, false, REASON_SUCCEEDED, ""),
        )
    } else if terminal && !waiting_for_responder {
        (
            set(
                CONDITION_TARGET_EVICTED,
                true,
                REASON_POD_TERMINAL,
                "Pod has reached terminal state.",
            ),
            set(CONDITION_FAILED, false, REASON_SUCCEEDED, ""),
        )
    } else if canceled {
        (
            set(CONDITION_TARGET_EVICTED, false, REASON_EVICTION_FAILED, ""),
            set(
                CONDITION_FAILED,
                true,
                REASON_CANCELED_NO_REQUESTERS,
                "No active requesters with eviction intent.",
            ),
        )
    } else if progression_done && !waiting_for_responder {
        (
            set(CONDITION_TARGET_EVICTED, false, REASON_EVICTION_FAILED, ""),
            set(
                CONDITION_FAILED,
                true,
                REASON_NO_FURTHER_RESPONDER,
                "All responders have completed without evicting the target.",
            ),
        )
    } else {
        (
            set(
                CONDITION_TARGET_EVICTED,
                false,
                REASON_AWAITING_EVICTION,
                "",
            ),
            set(CONDITION_FAILED, false, REASON_AWAITING_EVICTION, ""),
        )
    };

    let transitions = responders
        .iter()
        .zip(before)
        .filter(|(r, before)| r.state != *before)
        .map(|(r, before)| Transition {
            responder: r.name.clone(),
            from: before,
            to: r.state.clone(),
        })
        .collect();
    Progress {
        status: EvictionStatus {
            conditions: Some(vec![evicted, failed]),
            observed_generation: eviction.metadata.generation,
            requesters: Some(requesters(
                old.and_then(|s| s.requesters.as_deref())
                    .unwrap_or_default(),
                requests,
            )),
            responders: Some(entries),
            target_responders: Some(responders),
        },
        transitions,
        requeue_after,
    }
}

fn is_final_state(state: &str) -> bool {
    matches!(state, STATE_INTERRUPTED | STATE_CANCELED | STATE_COMPLETED)
}
