//! KEP-1397 carried by KEP-4563: the decisions of `descheduler-bridge`, which answers the
//! descheduler's "eviction in background" protocol by turning its evictions into
//! EvictionRequests.
//!
//! The protocol, as the descheduler (v0.31+, feature gate `EvictionsInBackground`) speaks it:
//! for a pod annotated [`DESCHEDULER_REQUEST_EVICT_ONLY`], an eviction answered with 429 whose
//! message contains [`EVICTION_IN_BACKGROUND_TEXT`] counts as "eviction in background"; the
//! descheduler then keeps the pod in a cache (an assumed entry expires after 10 minutes) and
//! counts it against its per-node, per-namespace and total limits while the pod carries
//! [`DESCHEDULER_EVICTION_IN_PROGRESS`]. Removing that annotation releases the pod: the
//! descheduler may ask again.
//!
//! [`admit`] decides the webhook's answer to one eviction; [`plan`] decides what the
//! controller does about one EvictionRequest the bridge takes part in.

use std::collections::BTreeMap;

use evictkit_api::keys::{
    DESCHEDULER_BRIDGE_EVACUATION_STARTED, DESCHEDULER_EVICTION_IN_PROGRESS,
    DESCHEDULER_REQUEST_EVICT_ONLY, EVICTION_INTERCEPTORS,
};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

use crate::eviction_request::State;

#[cfg(test)]
mod tests;

/// The substring the descheduler looks for in a 429's message (its
/// `EvictionInBackgroundErrorText`, the opening of KubeVirt's answer for VMs).
pub const EVICTION_IN_BACKGROUND_TEXT: &str = "Eviction triggered evacuation";

/// The 429 message of an intercepted eviction; contains [`EVICTION_IN_BACKGROUND_TEXT`].
pub fn evacuation_message(namespace: &str, pod: &str, request: &str) -> String {
    format!("{EVICTION_IN_BACKGROUND_TEXT} of pod {namespace}/{pod} via EvictionRequest {request}")
}

/// Which pods the bridge evacuates instead of letting the eviction through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptIn {
    /// Only pods annotated `descheduler.alpha.kubernetes.io/request-evict-only` (the
    /// descheduler reads the 429 as "in background" only for those).
    RequestEvictOnly,
    /// Also pods naming eviction interceptors (`evictkit.io/eviction-interceptors`): their
    /// owners asked to be consulted before any eviction.
    AlsoInterceptorPods,
}

/// Why an eviction passes the bridge untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// The pod did not opt in (see [`OptIn`]).
    NotOptedIn,
    /// Succeeded or Failed: the apiserver deletes a terminal pod without a budget check, and
    /// the descheduler ignores background evictions of terminal pods.
    Terminal,
    /// Already being deleted: nothing is left to evacuate.
    Terminating,
    /// The eviction's UID precondition names another pod (a predecessor); the apiserver
    /// answers 409 itself.
    OtherPod,
}

/// The webhook's decision on one eviction by an intercepted user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    Pass(Pass),
    /// Request the eviction through the pod's EvictionRequest and deny with 429.
    Evacuate,
}

/// The decision for the eviction of `pod` carrying the UID precondition `precondition_uid`.
pub fn admit(pod: &Pod, precondition_uid: Option<&str>, opt_in: OptIn) -> Admit {
    if precondition_uid.is_some_and(|uid| Some(uid) != pod.metadata.uid.as_deref()) {
        return Admit::Pass(Pass::OtherPod);
    }
    let annotations = pod.metadata.annotations.as_ref();
    let has = |key: &str| annotations.is_some_and(|a| a.contains_key(key));
    let opted_in = has(DESCHEDULER_REQUEST_EVICT_ONLY)
        || (opt_in == OptIn::AlsoInterceptorPods
            && annotations
                .and_then(|a| a.get(EVICTION_INTERCEPTORS))
                .is_some_and(|value| !value.trim().is_empty()));
    if !opted_in {
        return Admit::Pass(Pass::NotOptedIn);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Admit::Pass(Pass::Terminating);
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Admit::Pass(Pass::Terminal);
    }
    Admit::Evacuate
}

/// The bridge's marks on a pod: `eviction-in-progress` for the descheduler, and when the
/// bridge started the evacuation (the start of `--max-evacuation-request-ttl`), which also
/// tells the bridge's marks from another evacuator's (e.g. KubeVirt's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    pub in_progress: bool,
    /// `None` when absent or unreadable.
    pub started: Option<Timestamp>,
    /// The started-annotation is present (readable or not): the marks are the bridge's.
    pub ours: bool,
}

impl Marks {
    pub fn of(pod: &Pod) -> Self {
        let annotations = pod.metadata.annotations.as_ref();
        let started = annotations.and_then(|a| a.get(DESCHEDULER_BRIDGE_EVACUATION_STARTED));
        Self {
            in_progress: annotations
                .is_some_and(|a| a.contains_key(DESCHEDULER_EVICTION_IN_PROGRESS)),
            started: started.and_then(|value| value.parse().ok()),
            ours: started.is_some(),
        }
    }

    fn complete(&self) -> bool {
        self.in_progress && self.started.is_some()
    }
}

/// The annotations marking a pod as evacuated by the bridge since `started` through the
/// EvictionRequest `request` (a merge patch's `metadata.annotations`).
pub fn marks(request: &str, started: Timestamp) -> BTreeMap<&'static str, Option<String>> {
    BTreeMap::from([
        (DESCHEDULER_EVICTION_IN_PROGRESS, Some(request.to_owned())),
        (
            DESCHEDULER_BRIDGE_EVACUATION_STARTED,
            Some(started.to_string()),
        ),
    ])
}

/// The merge patch's `metadata.annotations` removing the bridge's marks.
pub fn cleared_marks() -> BTreeMap<&'static str, Option<String>> {
    BTreeMap::from([
        (DESCHEDULER_EVICTION_IN_PROGRESS, None),
        (DESCHEDULER_BRIDGE_EVACUATION_STARTED, None),
    ])
}

/// How an evacuation the bridge requested ended; the `result` label of `pod_evacuations`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The request's pod was evicted (gone or terminal).
    Evicted,
    /// The request was canceled (every requester withdrew, or it failed validation).
    Canceled,
    /// `--max-evacuation-request-ttl` passed: the bridge withdrew so the descheduler may ask
    /// again.
    Expired,
    /// Someone else removed the bridge's requester; only its marks were left to clear.
    Withdrawn,
}

impl Ended {
    pub fn label(self) -> &'static str {
        match self {
            Self::Evicted => "evicted",
            Self::Canceled => "canceled",
            Self::Expired => "expired",
            Self::Withdrawn => "withdrawn",
        }
    }
}

/// What the controller does about one EvictionRequest (and its pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing of the bridge's is left here.
    Nothing,
    /// The evacuation goes on: write the marks if `mark` holds (starting the TTL at
    /// `started`), and look again after `recheck_after` (when the TTL runs out).
    InProgress {
        mark: Option<Timestamp>,
        recheck_after: SignedDuration,
    },
    /// The evacuation ended: withdraw the requester if still listed, clear the pod's marks if
    /// it has them.
    End {
        ended: Ended,
        withdraw: bool,
        clear_marks: bool,
    },
}

/// The plan for an EvictionRequest in `state`, in whose requesters the bridge is `listed`,
/// whose pod (the same UID; `None` when gone) carries `marks`; `ttl` is
/// `--max-evacuation-request-ttl`.
pub fn plan(
    state: State,
    listed: bool,
    marks: Option<&Marks>,
    now: Timestamp,
    ttl: SignedDuration,
) -> Plan {
    let end = |ended| Plan::End {
        ended,
        withdraw: listed,
        clear_marks: marks.is_some_and(|m| m.ours),
    };
    if !listed {
        // Another evacuator's in-progress mark (no started-annotation) is not ours to clear.
        return if marks.is_some_and(|m| m.ours) {
            end(Ended::Withdrawn)
        } else {
            Plan::Nothing
        };
    }
    match state {
        State::Evicted => return end(Ended::Evicted),
        State::Canceled => return end(Ended::Canceled),
        State::InProgress => {}
    }
    let Some(marks) = marks else {
        // The pod is gone: the eviction request controller is about to mark it Evicted.
        return Plan::InProgress {
            mark: None,
            recheck_after: ttl,
        };
    };
    let started = marks.started.unwrap_or(now);
    let deadline = started.saturating_add(ttl).unwrap_or(Timestamp::MAX);
    if now >= deadline {
        return end(Ended::Expired);
    }
    Plan::InProgress {
        mark: (!marks.complete()).then_some(started),
        recheck_after: deadline.duration_since(now),
    }
}
