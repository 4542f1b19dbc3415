//! KEP-4563 as Kubernetes v1.37 serves it: `lifecycle.k8s.io/v1alpha1` `EvictionRequest`s
//! (one per requester, intent `Eviction` or `Withdrawn`) and the one `Eviction` per target pod
//! that aggregates them and walks the pod's responders. The types' doc comments are the
//! contract; the v1.37 apiserver's validation (`pkg/apis/lifecycle/validation`) decides which
//! writes are accepted, so every status computed here is one it accepts: responders progress in
//! priority order, one Active at a time, a final state is never left, `startTime` is "now" when
//! set, `TargetEvicted`/`Failed` are never reverted, and the last active responder reaches a
//! final state in the same write that sets a final condition.
//!
//! Where the doc comments leave a choice open, upstream's unreleased controller
//! (kubernetes/kubernetes `pkg/controller/evictionrequest`) is followed: Evictions are named
//! `pod-<n>-<pod name>`; a target gone or terminal wins over a cancellation; the active
//! responder of a pod that is gone or terminal gets [`Config::graceful_completion_delay`] from
//! the pod's end (the later of its deletionTimestamp and its last container's finish, or its
//! observed removal) to report its `completionTime` before it is marked Interrupted.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use evictkit_api::keys::{IMPERATIVE_EVICTOR_PRIORITY, IMPERATIVE_EVICTOR_RESPONDER};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{
    Eviction, EvictionRequest, EvictionStatus, Requester, ResponderStatus, TargetResponder,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::eviction_request::is_part_of_workload;

pub mod cleanup;
mod describe;
pub use describe::describe_pod;
#[cfg(test)]
mod tests;

/// `.spec.intent` / `.status.requesters[].intent`.
pub const INTENT_EVICTION: &str = "Eviction";
pub const INTENT_WITHDRAWN: &str = "Withdrawn";

/// `.status.targetResponders[].state`.
pub const STATE_INACTIVE: &str = "Inactive";
pub const STATE_ACTIVE: &str = "Active";
pub const STATE_INTERRUPTED: &str = "Interrupted";
pub const STATE_CANCELED: &str = "Canceled";
pub const STATE_COMPLETED: &str = "Completed";

/// Condition types of an Eviction, copied to its EvictionRequests.
pub const CONDITION_TARGET_EVICTED: &str = "TargetEvicted";
pub const CONDITION_FAILED: &str = "Failed";

/// Condition reasons (`EvictionConditionReason` of the v1.37 types).
pub const REASON_AWAITING_EVICTION: &str = "AwaitingEviction";
pub const REASON_EVICTION_INVALID: &str = "EvictionInvalid";
pub const REASON_CANCELED_NO_REQUESTERS: &str = "CanceledDueToNoRequesters";
pub const REASON_SUCCEEDED: &str = "Succeeded";
pub const REASON_NO_FURTHER_RESPONDER: &str = "NoFurtherResponder";
pub const REASON_POD_DELETED: &str = "PodDeleted";
pub const REASON_POD_TERMINAL: &str = "PodTerminal";
pub const REASON_EVICTION_FAILED: &str = "EvictionFailed";

/// Label values of an Eviction's participants (`EvictionParticipantRole`).
pub const ROLE_REQUESTER: &str = "requester";
pub const ROLE_RESPONDER: &str = "responder";
pub const ROLE_REQUESTER_RESPONDER: &str = "requester-responder";

/// `.status.requesters` holds at most this many entries.
pub const MAX_REQUESTERS: usize = 100;
/// The longest object name (DNS subdomain).
const MAX_NAME: usize = 253;

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

/// The target pod as the decisions see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target<'a> {
    /// No pod of that name and UID exists.
    Gone,
    /// Gone, and the pod watch reported its removal at this time (the grace to report counts
    /// from it; a removal not seen, e.g. across a restart, is [`Target::Gone`]).
    Removed(Timestamp),
    Present(&'a Pod),
}

impl<'a> Target<'a> {
    /// The pod named `name` if it still has `uid` (a same-named successor is not the target).
    pub fn of(pod: Option<&'a Pod>, uid: &str) -> Self {
        match pod {
            Some(pod) if pod.metadata.uid.as_deref() == Some(uid) => Self::Present(pod),
            _ => Self::Gone,
        }
    }

    pub fn is_gone(self) -> bool {
        matches!(self, Self::Gone | Self::Removed(_))
    }

    fn terminal(self) -> bool {
        match self {
            Self::Gone | Self::Removed(_) => false,
            Self::Present(pod) => pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed"),
        }
    }

    /// When the target stopped, for the active responder's grace to report: the later of the
    /// pod's deletionTimestamp and its last container's finish, or when it was seen removed.
    fn stopped_at(self) -> Option<Timestamp> {
        match self {
            Self::Gone => None,
            Self::Removed(at) => Some(at),
            Self::Present(pod) => {
                let status = pod.status.as_ref();
                let finished = status
                    .into_iter()
                    .flat_map(|s| {
                        let init = s.init_container_statuses.iter().flatten();
                        init.chain(s.container_statuses.iter().flatten())
                    })
                    .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                    .map(|t| t.0);
                let deleted = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
                finished.chain(deleted).max()
            }
        }
    }
}

/// The v1.37 type: "Pods that are part of a PodGroup (.spec.schedulingGroup is set) are not
/// supported"; the pod-group label and Workload owners of the CRD mode count too.
pub fn in_pod_group(pod: &Pod) -> bool {
    let scheduling_group = pod
        .spec
        .as_ref()
        .is_some_and(|spec| spec.scheduling_group.is_some());
    scheduling_group || is_part_of_workload(pod)
}

/// Orders responders as the API selects them: higher priority first; on equal priority the
/// domain compared label by label from the top (`io` before `example`), a domain that is a
/// suffix of the other first, then the key after the `/`.
pub fn responder_order(a: &TargetResponder, b: &TargetResponder) -> Ordering {
    fn parts(name: &str) -> (Vec<&str>, &str) {
        let (domain, key) = name.split_once('/').unwrap_or((name, ""));
        (domain.split('.').rev().collect(), key)
    }
    b.priority.cmp(&a.priority).then_with(|| {
        let ((a_domain, a_key), (b_domain, b_key)) = (parts(&a.name), parts(&b.name));
        a_domain.cmp(&b_domain).then_with(|| a_key.cmp(b_key))
    })
}

/// `.status.targetResponders` at the first sync: the pod's `spec.evictionResponders` plus the
/// default imperative evictor, all Inactive, in selection order.
pub fn initial_responders(target: Target<'_>) -> Vec<TargetResponder> {
    let declared = match target {
        Target::Present(pod) => pod
            .spec
            .as_ref()
            .and_then(|spec| spec.eviction_responders.clone())
            .unwrap_or_default(),
        Target::Gone | Target::Removed(_) => Vec::new(),
    };
    let mut responders: Vec<TargetResponder> = declared
        .into_iter()
        .filter(|r| r.name != IMPERATIVE_EVICTOR_RESPONDER)
        .map(|r| TargetResponder {
            name: r.name,
            priority: r.priority,
            state: STATE_INACTIVE.to_owned(),
        })
        .collect();
    responders.push(TargetResponder {
        name: IMPERATIVE_EVICTOR_RESPONDER.to_owned(),
        priority: IMPERATIVE_EVICTOR_PRIORITY,
        state: STATE_INACTIVE.to_owned(),
    });
    responders.sort_by(responder_order);
    responders
}

fn is_deleted(request: &EvictionRequest) -> bool {
    request.metadata.deletion_timestamp.is_some()
}

/// Whether any requester still wants the target gone ("Deleting an EvictionRequest also counts
/// as a withdrawal").
pub fn has_eviction_intent(requests: &[&EvictionRequest]) -> bool {
    requests
        .iter()
        .any(|r| !is_deleted(r) && r.spec.intent == INTENT_EVICTION)
}

/// `.status.requesters`: every requester that ever asked, with its current intent (a deleted
/// request, or one no longer there, counts as Withdrawn), in upstream's order, rebuilt at each
/// step: requests asking for eviction, then withdrawn ones, then deleted ones (each oldest
/// first, then by requester), then requesters known only from the previous status (by name).
/// Beyond [`MAX_REQUESTERS`] the tail goes, so Withdrawn ones are dropped first (the API's
/// rule).
pub fn requesters(previous: &[Requester], requests: &[&EvictionRequest]) -> Vec<Requester> {
    // (no request behind it, request deleted, not asking for eviction, created, requester)
    type Rank<'a> = (bool, bool, bool, Option<Timestamp>, &'a str);
    let mut ranked: Vec<(Rank<'_>, &str)> = requests
        .iter()
        .map(|r| {
            let deleted = is_deleted(r);
            let evicting = !deleted && r.spec.intent == INTENT_EVICTION;
            let intent = if deleted {
                INTENT_WITHDRAWN
            } else {
                r.spec.intent.as_str()
            };
            let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let name = r.spec.requester.as_str();
            ((false, deleted, !evicting, created, name), intent)
        })
        .chain(previous.iter().map(|old| {
            (
                (true, true, true, None, old.name.as_str()),
                INTENT_WITHDRAWN,
            )
        }))
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen = BTreeSet::new();
    ranked
        .into_iter()
        .filter(|((_, _, _, _, name), _)| seen.insert(*name))
        .take(MAX_REQUESTERS)
        .map(|((_, _, _, _, name), intent)| Requester {
            name: name.to_owned(),
            intent: intent.to_owned(),
        })
        .collect()
}

/// The Eviction's participant labels: each requester's and responder's name as a key, valued
/// `requester`, `responder` or `requester-responder`.
pub fn participant_labels(
    requests: &[&EvictionRequest],
    responders: &[TargetResponder],
) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = requests
        .iter()
        .map(|r| (r.spec.requester.clone(), ROLE_REQUESTER.to_owned()))
        .collect();
    for responder in responders {
        let role = if labels.contains_key(&responder.name) {
            ROLE_REQUESTER_RESPONDER
        } else {
            ROLE_RESPONDER
        };
        labels.insert(responder.name.clone(), role.to_owned());
    }
    labels
}

/// Upstream's naming: `pod-<n>-<pod name>` with `n` one above the highest in use for that pod
/// name, cut at 253 characters.
pub fn eviction_name<'a>(pod_name: &str, existing: impl IntoIterator<Item = &'a str>) -> String {
    let highest = existing
        .into_iter()
        .filter_map(|name| {
            let rest = name.strip_prefix("pod-")?;
            let (counter, pod) = rest.split_once('-')?;
            let matches = pod == pod_name || (name.len() == MAX_NAME && pod_name.starts_with(pod));
            matches.then(|| counter.parse::<u64>().ok()).flatten()
        })
        .max()
        .unwrap_or(0);
    let mut name = format!("pod-{}-{pod_name}", highest + 1);
    name.truncate(MAX_NAME);
    name
}

pub fn condition<'a>(conditions: Option<&'a [Condition]>, kind: &str) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == kind)
}

fn condition_true(conditions: Option<&[Condition]>, kind: &str) -> bool {
    condition(conditions, kind).is_some_and(|c| c.status == "True")
}

fn conditions_of(eviction: &Eviction) -> Option<&[Condition]> {
    eviction.status.as_ref()?.conditions.as_deref()
}

/// Whether the Eviction reached `TargetEvicted=True` or `Failed=True`: nothing changes after.
pub fn is_finished(eviction: &Eviction) -> bool {
    let conditions = conditions_of(eviction);
    condition_true(conditions, CONDITION_TARGET_EVICTED)
        || condition_true(conditions, CONDITION_FAILED)
}

/// The Eviction a target's requests follow: the one that evicted it, else the oldest still in
/// progress (of equally old ones, one under way first, then by name), else the latest failed one. `true` when a new Eviction is needed (none, or only
/// failed ones: a new Eviction intent starts over).
pub fn relevant_eviction<'a>(evictions: &[&'a Eviction]) -> (Option<&'a Eviction>, bool) {
    let transition = |e: &Eviction, kind: &str| {
        condition(conditions_of(e), kind).map(|c| c.last_transition_time.0)
    };
    let created = |e: &Eviction| e.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let succeeded = evictions
        .iter()
        .copied()
        .filter(|e| condition_true(conditions_of(e), CONDITION_TARGET_EVICTED))
        .max_by_key(|e| transition(e, CONDITION_TARGET_EVICTED));
    let active = evictions
        .iter()
        .copied()
        .filter(|e| !is_finished(e))
        .min_by(|a, b| {
            // Timestamps are whole seconds: on a tie, one already under way (responders
            // listed) stays the one followed.
            let fresh = |e: &Eviction| {
                e.status
                    .as_ref()
                    .and_then(|s| s.target_responders.as_ref())
                    .is_none_or(Vec::is_empty)
            };
            created(a)
                .cmp(&created(b))
                .then_with(|| fresh(a).cmp(&fresh(b)))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
    let failed = evictions
        .iter()
        .copied()
        .filter(|e| condition_true(conditions_of(e), CONDITION_FAILED))
        .max_by_key(|e| transition(e, CONDITION_FAILED));
    match (succeeded, active) {
        (Some(e), _) | (None, Some(e)) => (Some(e), false),
        (None, None) => (failed, true),
    }
}

/// A condition as it should be now, keeping `lastTransitionTime` while the status is unchanged.
pub fn set_condition(
    existing: Option<&[Condition]>,
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let since = condition(existing, kind)
        .filter(|c| c.status == status)
        .map_or(now, |c| c.last_transition_time.0);
    Condition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Time(since),
        observed_generation: None,
    }
}

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

/// Whether a request was refused for good (reached TargetEvicted, or Failed as invalid).
pub fn request_settled(request: &EvictionRequest) -> bool {
    let conditions = request
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref());
    condition_true(conditions, CONDITION_TARGET_EVICTED)
        || condition(conditions, CONDITION_FAILED)
            .is_some_and(|c| c.status == "True" && c.reason == REASON_EVICTION_INVALID)
}

/// Whether a request needs a sync: any not settled, and a settled one whose spec changed since
/// (as upstream, its observedGeneration keeps following the spec).
pub fn request_needs_sync(request: &EvictionRequest) -> bool {
    let observed = request.status.as_ref().and_then(|s| s.observed_generation);
    !request_settled(request) || observed != request.metadata.generation
}

/// An EvictionRequest's conditions follow its target's relevant Eviction; before there is
/// one, both are False with reason AwaitingEviction. A new Eviction resets them the same way.
pub fn request_conditions(
    existing: Option<&[Condition]>,
    eviction: Option<&Eviction>,
    now: Timestamp,
) -> Vec<Condition> {
    [CONDITION_TARGET_EVICTED, CONDITION_FAILED]
        .into_iter()
        .map(
            |kind| match eviction.and_then(|e| condition(conditions_of(e), kind)) {
                Some(c) => set_condition(
                    existing,
                    kind,
                    c.status == "True",
                    &c.reason,
                    &c.message,
                    now,
                ),
                None => set_condition(
                    existing,
                    kind,
                    false,
                    REASON_AWAITING_EVICTION,
                    "Waiting for an Eviction to report on progress.",
                    now,
                ),
            },
        )
        .collect()
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

fn responder_status<'a>(
    status: Option<&'a EvictionStatus>,
    name: &str,
) -> Option<&'a ResponderStatus> {
    status?.responders.as_ref()?.iter().find(|r| r.name == name)
}

fn is_final_state(state: &str) -> bool {
    matches!(state, STATE_INTERRUPTED | STATE_CANCELED | STATE_COMPLETED)
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

/// The imperative evictor's view of an Eviction: whether it is the active responder now.
pub fn imperative_evictor_active(eviction: &Eviction) -> bool {
    !is_finished(eviction)
        && eviction
            .status
            .as_ref()
            .and_then(|s| s.target_responders.as_ref())
            .is_some_and(|list| {
                list.iter()
                    .any(|r| r.name == IMPERATIVE_EVICTOR_RESPONDER && r.state == STATE_ACTIVE)
            })
}

/// While it waits (for its pod to terminate, or for its next eviction attempt), the imperative
/// evictor heartbeats at least this often (as upstream's), so neither a long termination nor a
/// long back-off meets the heartbeat deadline.
pub const HEARTBEAT_INTERVAL: SignedDuration = SignedDuration::from_mins(3);

/// Whether the imperative evictor's heartbeat is due now (none for [`HEARTBEAT_INTERVAL`]), and
/// how long until it is due (again, if written now).
fn heartbeat_due(own: &ResponderStatus, now: Timestamp) -> (bool, SignedDuration) {
    match own.heartbeat_time.as_ref().map(|h| now.duration_since(h.0)) {
        Some(since) if since < HEARTBEAT_INTERVAL => (false, HEARTBEAT_INTERVAL - since),
        _ => (true, HEARTBEAT_INTERVAL),
    }
}

/// The imperative evictor's look while its next eviction attempt is `until_attempt` away
/// (a back-off, or the apiserver's Retry-After): whether to heartbeat now, and when to look
/// again, at the attempt or the next heartbeat, whichever comes first.
pub fn between_attempts(
    own: &ResponderStatus,
    until_attempt: SignedDuration,
    now: Timestamp,
) -> (bool, SignedDuration) {
    let (due, next) = heartbeat_due(own, now);
    (due, next.min(until_attempt))
}

/// The imperative evictor's `expectedCompletionTime` while its pod terminates: the pod's
/// deletion deadline (its deletionTimestamp); once that is past, the present (as upstream's:
/// validation refuses a time more than 30 s past), keeping a present `reported` already that is
/// not before the deadline, so each look does not write a new one.
pub fn expected_completion(
    deadline: Timestamp,
    reported: Option<Timestamp>,
    now: Timestamp,
) -> Timestamp {
    if deadline >= now {
        return deadline;
    }
    match reported {
        Some(reported) if deadline <= reported && reported <= now => reported,
        _ => now,
    }
}

/// The imperative evictor's report while its pod terminates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminatingReport {
    /// Write now: no heartbeat for [`HEARTBEAT_INTERVAL`], or another expected completion.
    pub due: bool,
    /// [`expected_completion`] of the pod's deletionTimestamp.
    pub expected: Option<Timestamp>,
    pub look_again: SignedDuration,
}

/// The imperative evictor's report while its pod terminates, the pod's deletion `deadline` (its
/// deletionTimestamp) as its expected completion ([`expected_completion`]).
pub fn terminating_report(
    own: &ResponderStatus,
    deadline: Option<Timestamp>,
    now: Timestamp,
) -> TerminatingReport {
    let reported = own.expected_completion_time.as_ref().map(|t| t.0);
    let expected = deadline.map(|deadline| expected_completion(deadline, reported, now));
    let (stale, next) = heartbeat_due(own, now);
    let due = stale || reported != expected;
    TerminatingReport {
        due,
        expected,
        look_again: if due { HEARTBEAT_INTERVAL } else { next },
    }
}

/// A responder's own status entry.
pub fn own_status<'a>(eviction: &'a Eviction, responder: &str) -> Option<&'a ResponderStatus> {
    responder_status(eviction.status.as_ref(), responder)
}
