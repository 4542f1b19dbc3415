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
//!
//! A pod another requester (the taint-manager, a drain) already asks to evict is "already
//! getting evacuated" (KEP-1397, Q&A): the descheduler's eviction of it is answered as one in
//! background, never let through, and the bridge does not join that request. The descheduler
//! would not have asked had it seen the request (the KEP filters such pods out before
//! nomination), so a withdrawal by the requester that asked must cancel the eviction, not leave
//! it running on the descheduler's stale decision.

use std::collections::BTreeMap;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{
    DESCHEDULER_BRIDGE_EVACUATION_ANSWERED, DESCHEDULER_BRIDGE_EVACUATION_REFRESHED,
    DESCHEDULER_BRIDGE_EVACUATION_STARTED, DESCHEDULER_EVICTION_IN_PROGRESS,
    DESCHEDULER_REQUEST_EVICT_ONLY, EVICTION_INTERCEPTORS,
};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest as LifecycleRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::eviction_request::crd::State;
use crate::eviction_request::requester::{UpstreamReport, upstream_report};
use crate::eviction_request::upstream::INTENT_EVICTION;

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admit {
    Pass(Pass),
    /// Request the eviction through the pod's EvictionRequest and deny with 429.
    Evacuate,
    /// Another requester's EvictionRequest `request` is evicting the pod: deny with 429 naming
    /// it, and write nothing.
    AlreadyEvacuating {
        request: String,
    },
}

/// Who asks for a pod's eviction through an EvictionRequest that has not ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requested {
    /// The bridge itself: its evacuation goes on, and a repeated eviction joins it again.
    pub by_bridge: bool,
    /// The name of an EvictionRequest through which another requester asks.
    pub by_others: Option<String>,
}

/// What the bridge's webhook keeps of one EvictionRequest of either API: the pod it targets
/// and who asks for that pod's eviction through it now. The webhook decides from these alone,
/// so its caches hold nothing else.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Asking {
    /// The request's name (named in the 429 of a pod already getting evacuated).
    pub request: String,
    /// The target pod's name and UID (a request of a predecessor of the same name asks for
    /// nothing of this pod).
    pub pod: String,
    pub pod_uid: String,
    /// Who asks through it; empty once it ended (or, upstream, was withdrawn).
    pub requesters: Vec<String>,
}

impl Asking {
    /// An `evictkit.io` EvictionRequest (one per pod, every requester listed in it): its
    /// requesters while it is in progress.
    pub fn of_crd(request: &EvictionRequest) -> Self {
        let pod = request.spec.target.pod.as_ref();
        let in_progress = State::of(request) == State::InProgress;
        Self {
            request: request.metadata.name.clone().unwrap_or_default(),
            pod: pod.map(|p| p.name.clone()).unwrap_or_default(),
            pod_uid: pod.map(|p| p.uid.clone()).unwrap_or_default(),
            requesters: in_progress
                .then(|| request.spec.requesters.iter().map(|r| r.name.clone()))
                .into_iter()
                .flatten()
                .collect(),
        }
    }

    /// A `lifecycle.k8s.io` EvictionRequest (one per requester): its requester while it states
    /// intent `Eviction` and has not ended ([`lifecycle_state`]).
    pub fn of_lifecycle(request: &LifecycleRequest) -> Self {
        let pod = request.spec.target.pod.as_ref();
        let asks =
            request.spec.intent == INTENT_EVICTION && lifecycle_state(request) == State::InProgress;
        Self {
            request: request.metadata.name.clone().unwrap_or_default(),
            pod: pod.map(|p| p.name.clone()).unwrap_or_default(),
            pod_uid: pod.map(|p| p.uid.clone()).unwrap_or_default(),
            requesters: asks
                .then(|| request.spec.requester.clone())
                .into_iter()
                .collect(),
        }
    }
}

/// [`Requested`] for the pod of UID `pod_uid` from its EvictionRequests on both APIs, the
/// bridge being any of `bridge` (its requester names on the two APIs): a pod asked for through
/// either API is already getting evacuated, whichever API the bridge itself asks through (in an
/// upgrade both are in use at once).
pub fn requested<'a>(
    requests: impl IntoIterator<Item = &'a Asking>,
    pod_uid: &str,
    bridge: &[&str],
) -> Requested {
    let mut requested = Requested::default();
    for request in requests.into_iter().filter(|r| r.pod_uid == pod_uid) {
        for requester in &request.requesters {
            if bridge.contains(&requester.as_str()) {
                requested.by_bridge = true;
            } else if requested
                .by_others
                .as_ref()
                // The first by name, so that repeated answers name the same request.
                .is_none_or(|first| request.request < *first)
            {
                requested.by_others = Some(request.request.clone());
            }
        }
    }
    requested
}

/// The decision for the eviction of the pod of `metadata` in `phase` carrying the UID
/// precondition `precondition_uid`, whose eviction is `requested` as shown. The pod's metadata
/// and phase, not the Pod: the webhook decides from a compact cache of them.
pub fn admit(
    metadata: &ObjectMeta,
    phase: Option<&str>,
    precondition_uid: Option<&str>,
    opt_in: OptIn,
    requested: &Requested,
) -> Admit {
    if precondition_uid.is_some_and(|uid| Some(uid) != metadata.uid.as_deref()) {
        return Admit::Pass(Pass::OtherPod);
    }
    let annotations = metadata.annotations.as_ref();
    let has = |key: &str| annotations.is_some_and(|a| a.contains_key(key));
    let opted_in = has(DESCHEDULER_REQUEST_EVICT_ONLY)
        || (opt_in == OptIn::AlsoInterceptorPods
            && annotations
                .and_then(|a| a.get(EVICTION_INTERCEPTORS))
                .is_some_and(|value| !value.trim().is_empty()));
    // Whether or not the pod opted in: an eviction let through would skip the interceptors
    // that are migrating it. The bridge's own evacuation of an opted-in pod is joined again,
    // as before the other requester came.
    let joined = opted_in && requested.by_bridge;
    let by_others = requested.by_others.as_ref().filter(|_| !joined);
    if !opted_in && by_others.is_none() {
        return Admit::Pass(Pass::NotOptedIn);
    }
    if metadata.deletion_timestamp.is_some() {
        return Admit::Pass(Pass::Terminating);
    }
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Admit::Pass(Pass::Terminal);
    }
    match by_others {
        Some(request) => Admit::AlreadyEvacuating {
            request: request.clone(),
        },
        None => Admit::Evacuate,
    }
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
    /// The pod carries `request-evict-only`: the descheduler keeps it in its cache of
    /// evictions in background (and only then).
    pub request_evict_only: bool,
    /// When the bridge last answered the descheduler's eviction with 429 (`None`: absent or
    /// unreadable).
    pub answered: Option<Timestamp>,
    /// When the bridge last refreshed the pod for the descheduler's cache.
    pub refreshed: Option<Timestamp>,
}

impl Marks {
    /// From a pod's metadata.
    pub fn of(metadata: &ObjectMeta) -> Self {
        let annotations = metadata.annotations.as_ref();
        let get = |key: &str| annotations.and_then(|a| a.get(key));
        let time = |key: &str| get(key).and_then(|value| value.parse().ok());
        Self {
            in_progress: get(DESCHEDULER_EVICTION_IN_PROGRESS).is_some(),
            started: time(DESCHEDULER_BRIDGE_EVACUATION_STARTED),
            ours: get(DESCHEDULER_BRIDGE_EVACUATION_STARTED).is_some(),
            request_evict_only: get(DESCHEDULER_REQUEST_EVICT_ONLY).is_some(),
            answered: time(DESCHEDULER_BRIDGE_EVACUATION_ANSWERED),
            refreshed: time(DESCHEDULER_BRIDGE_EVACUATION_REFRESHED),
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

/// The annotation recording that the bridge answered the descheduler's eviction at `now`
/// (a merge patch's `metadata.annotations`), for a `request-evict-only` pod.
pub fn answered_mark(now: Timestamp) -> BTreeMap<&'static str, Option<String>> {
    BTreeMap::from([(
        DESCHEDULER_BRIDGE_EVACUATION_ANSWERED,
        Some(now.to_string()),
    )])
}

/// The annotation of a refresh at `now` (a merge patch's `metadata.annotations`).
pub fn refreshed_mark(now: Timestamp) -> BTreeMap<&'static str, Option<String>> {
    BTreeMap::from([(
        DESCHEDULER_BRIDGE_EVACUATION_REFRESHED,
        Some(now.to_string()),
    )])
}

/// The merge patch's `metadata.annotations` removing the bridge's marks.
pub fn cleared_marks() -> BTreeMap<&'static str, Option<String>> {
    BTreeMap::from([
        (DESCHEDULER_EVICTION_IN_PROGRESS, None),
        (DESCHEDULER_BRIDGE_EVACUATION_STARTED, None),
        (DESCHEDULER_BRIDGE_EVACUATION_ANSWERED, None),
        (DESCHEDULER_BRIDGE_EVACUATION_REFRESHED, None),
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
    /// `started`), write [`refreshed_mark`] if `refresh` holds (see [`Ttls::descheduler`]), and
    /// look again after `recheck_after` (the next refresh, or when the TTL runs out).
    InProgress {
        mark: Option<Timestamp>,
        refresh: Option<Timestamp>,
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

/// The two clocks of an evacuation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttls {
    /// `--max-evacuation-request-ttl`: how long the bridge keeps asking for the eviction.
    pub evacuation: SignedDuration,
    /// The descheduler's own TTL of an assumed eviction in background (v0.36:
    /// `assumedEvictionRequestTimeoutSeconds`, 600 s, not configurable), also the period of its
    /// cache cleaning (`evictionRequestsCacheResyncPeriod`, 600 s).
    pub descheduler: SignedDuration,
}

/// The descheduler v0.36 (`pkg/descheduler/evictions/evictions.go`), whose TTL is 600 s.
pub const DESCHEDULER_ASSUMED_TTL: SignedDuration = SignedDuration::from_secs(600);

/// Where the bridge's own `lifecycle.k8s.io` EvictionRequest stands, as [`plan`] reads it: the
/// controller mirrors its target's Eviction's conditions onto every EvictionRequest, so
/// `TargetEvicted` means evicted and `Failed` (every responder canceled or done without the
/// pod going, refused as invalid, the imperative eviction failed) means the evacuation ended
/// without an eviction, as a canceled `evictkit.io` request does. Conditions the controller
/// wrote for an older generation (`status.observedGeneration` behind `metadata.generation`)
/// say nothing yet: after a withdrawal, the request asking again still carries the `Failed`
/// of its cancellation until the controller starts over.
pub fn lifecycle_state(request: &LifecycleRequest) -> State {
    match upstream_report(request) {
        UpstreamReport::Behind | UpstreamReport::Open => State::InProgress,
        UpstreamReport::Evicted => State::Evicted,
        UpstreamReport::Failed(_) => State::Canceled,
    }
}

/// Whether `requester` still asks for the eviction through its `lifecycle.k8s.io`
/// EvictionRequest `request` (the upstream counterpart of being listed in an `evictkit.io`
/// request's `.spec.requesters`).
pub fn lifecycle_listed(request: &LifecycleRequest, requester: &str) -> bool {
    request.spec.requester == requester && request.spec.intent == INTENT_EVICTION
}

/// The plan for an EvictionRequest in `state`, in whose requesters the bridge is `listed`,
/// whose pod (the same UID; `None` when gone) carries `marks`.
pub fn plan(
    state: State,
    listed: bool,
    marks: Option<&Marks>,
    now: Timestamp,
    ttls: &Ttls,
) -> Plan {
    let ttl = ttls.evacuation;
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
            refresh: None,
            recheck_after: ttl,
        };
    };
    let started = marks.started.unwrap_or(now);
    let deadline = started.saturating_add(ttl).unwrap_or(Timestamp::MAX);
    if now >= deadline {
        return end(Ended::Expired);
    }
    let refresh_at = marks
        .request_evict_only
        .then(|| next_refresh(marks, started, ttls.descheduler))
        .flatten();
    let refresh = refresh_at.is_some_and(|at| at <= now).then_some(now);
    let next = match (refresh, refresh_at) {
        (Some(_), _) => now
            .saturating_add(ttls.descheduler / REFRESHES_PER_TTL)
            .ok(),
        (None, at) => at,
    };
    Plan::InProgress {
        mark: (!marks.complete()).then_some(started),
        refresh,
        recheck_after: next
            .filter(|at| *at < deadline)
            .unwrap_or(deadline)
            .duration_since(now),
    }
}

/// How many times per descheduler TTL the bridge refreshes a pod while the descheduler may
/// drop it: the longest the pod goes uncounted is a tenth of the TTL (a minute for v0.36).
const REFRESHES_PER_TTL: i32 = 10;

/// When the pod is to be refreshed next for the descheduler's cache, `None` once done.
///
/// The descheduler assumed the eviction when the bridge last answered it (`answered`; the
/// evacuation's `started` for marks from before that annotation). It drops that assumed entry
/// at its first cache cleaning after `ttl`; cleanings come every `ttl` too, so between `ttl`
/// and twice `ttl` after the answer. Any pod update after the drop adds the pod back as a
/// confirmed entry, which no cleaning drops. Refreshes every tenth of `ttl` across that window
/// and one past its end bound the uncounted time whatever the cleaning's phase, which the
/// bridge cannot see.
fn next_refresh(marks: &Marks, started: Timestamp, ttl: SignedDuration) -> Option<Timestamp> {
    let step = ttl / REFRESHES_PER_TTL;
    let answered = marks.answered.unwrap_or(started);
    let window = answered.saturating_add(ttl).ok()?;
    let end = window.saturating_add(ttl).ok()?.saturating_add(step).ok()?;
    match marks.refreshed.filter(|at| *at > window) {
        Some(last) if last >= end => None,
        Some(last) => last.saturating_add(step).ok(),
        None => window.saturating_add(step).ok(),
    }
}
