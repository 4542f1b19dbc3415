//! KEP-4563 as Kubernetes v1.37 serves it, upstream's API `lifecycle.k8s.io/v1alpha1`:
//! `EvictionRequest`s (one per requester, intent `Eviction` or `Withdrawn`) and the one
//! `Eviction` per target pod that aggregates them and walks the pod's responders. The types'
//! doc comments are the contract; the v1.37 apiserver's validation
//! (`pkg/apis/lifecycle/validation`) decides which writes are accepted, so every status
//! computed here is one it accepts: responders progress in priority order, one Active at a
//! time, a final state is never left, `startTime` is "now" when set, `TargetEvicted`/`Failed`
//! are never reverted, and the last active responder reaches a final state in the same write
//! that sets a final condition.
//!
//! Where the doc comments leave a choice open, upstream's unreleased controller
//! (kubernetes/kubernetes `pkg/controller/evictionrequest`) is followed: Evictions are named
//! `pod-<n>-<pod name>`; a target gone or terminal wins over a cancellation; the active
//! responder of a pod that is gone or terminal gets [`Config::graceful_completion_delay`] from
//! the pod's end (the later of its deletionTimestamp and its last container's finish, or its
//! observed removal) to report its `completionTime` before it is marked Interrupted.
//!
//! This module holds the API's names (intents, states, conditions, reasons, roles), the target,
//! the requesters, the responders' order, an Eviction's name and a request's conditions; beside
//! it, [`validation`] refuses what upstream's early validation refuses, [`responders`] takes an
//! Eviction one step, [`imperative`] decides the imperative evictor's reports and heartbeats,
//! and [`cleanup`] what the API leaves behind.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use evictkit_api::keys::{IMPERATIVE_EVICTOR_PRIORITY, IMPERATIVE_EVICTOR_RESPONDER};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{
    Eviction, EvictionRequest, EvictionStatus, Requester, ResponderStatus, TargetResponder,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{is_part_of_workload, true_with_reason};

pub mod cleanup;
mod describe;
mod imperative;
mod responders;
#[cfg(test)]
mod tests;
mod validation;

pub use describe::describe_pod;
pub use imperative::{
    HEARTBEAT_INTERVAL, TerminatingReport, between_attempts, expected_completion,
    imperative_evictor_active, own_status, terminating_report,
};
pub use responders::{Progress, Transition, progress};
pub use validation::{eviction_invalid, invalid_conditions, refuse, request_invalid};

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

/// The controller's refusal of `request` (Failed, reason EvictionInvalid: the target is
/// missing, another pod, or one of a pod group), its message. Final for the pod, as the CRD's
/// [`super::crd::refusal`].
pub fn refusal(request: &EvictionRequest) -> Option<&str> {
    let conditions = request.status.as_ref()?.conditions.as_deref()?;
    true_with_reason(conditions, CONDITION_FAILED, REASON_EVICTION_INVALID)
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

fn responder_status<'a>(
    status: Option<&'a EvictionStatus>,
    name: &str,
) -> Option<&'a ResponderStatus> {
    status?.responders.as_ref()?.iter().find(|r| r.name == name)
}

fn is_final_state(state: &str) -> bool {
    matches!(state, STATE_INTERRUPTED | STATE_CANCELED | STATE_COMPLETED)
}
