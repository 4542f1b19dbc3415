//! Where each pod of a drain stands, read from its EvictionRequest (either API) or from the
//! Eviction API's last answer, and how the drain shows it: a table redrawn on a terminal, a
//! plain line per change when piped, and what it says of the pods it leaves.

use evictkit_api::eviction_request::EvictionRequest;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest as LifecycleRequest};

use crate::eviction_request::crd::{self, interceptor_status, refusal};
use crate::eviction_request::requester::{Standing, upstream_standing};
use crate::eviction_request::upstream::{
    CONDITION_FAILED, CONDITION_TARGET_EVICTED, STATE_ACTIVE, own_status,
};
use crate::table::{Table, age};

/// Where a pod's eviction stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Asked; the eviction request controller has not taken it up (no interceptor or
    /// responder active yet), or the Eviction API's answer is awaited.
    Waiting,
    /// An interceptor or responder is at work, or the Eviction API refused for now.
    InProgress,
    /// The pod is terminating.
    Terminating,
    /// The request says the pod is evicted (gone or finished).
    Evicted,
    /// The pod is gone.
    Gone,
    /// The request ended without the pod going (refused by the controller, or every
    /// responder and the imperative eviction gave up): waiting longer changes nothing.
    Failed,
}

impl State {
    pub fn word(self) -> &'static str {
        match self {
            Self::Waiting => "Waiting",
            Self::InProgress => "InProgress",
            Self::Terminating => "Terminating",
            Self::Evicted => "Evicted",
            Self::Gone => "Gone",
            Self::Failed => "Failed",
        }
    }

    /// The pod has left the node (for the drain's purpose).
    pub fn is_done(self) -> bool {
        matches!(self, Self::Evicted | Self::Gone)
    }

    /// Nothing will change without the operator.
    pub fn is_final(self) -> bool {
        self.is_done() || self == Self::Failed
    }
}

/// One pod's progress: its state and who acts on it, with that one's last word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub state: State,
    /// The active interceptor (CRD) or responder (lifecycle.k8s.io), or `Eviction API`.
    pub actor: Option<String>,
    pub message: Option<String>,
    pub heartbeat: Option<Timestamp>,
}

/// What acts on a pod drained through the Eviction API.
pub const EVICTION_API: &str = "Eviction API";

impl Progress {
    /// Before the drain has read anything about the pod.
    pub fn waiting() -> Self {
        Self::state(State::Waiting)
    }

    fn state(state: State) -> Self {
        Self {
            state,
            actor: None,
            message: None,
            heartbeat: None,
        }
    }

    /// The pod itself overrides the request: gone (or replaced by a successor of another
    /// UID), or terminating.
    fn with_pod(mut self, pod: Option<&Pod>, uid: &str) -> Self {
        match pod {
            Some(pod) if pod.metadata.uid.as_deref() == Some(uid) => {
                if pod.metadata.deletion_timestamp.is_some() && self.state != State::Evicted {
                    self.state = State::Terminating;
                }
                self
            }
            _ => Self {
                state: State::Gone,
                ..self
            },
        }
    }

    /// From the pod's `evictkit.io` EvictionRequest (`None`: not there yet).
    pub fn of_crd(pod: Option<&Pod>, uid: &str, request: Option<&EvictionRequest>) -> Self {
        let Some(request) = request else {
            return Self::state(State::Waiting).with_pod(pod, uid);
        };
        let status = request.status.as_ref();
        let progress = match crd::State::of(request) {
            crd::State::Evicted => Self::state(State::Evicted),
            crd::State::Canceled => Self {
                message: refusal(request).map(str::to_owned),
                ..Self::state(State::Failed)
            },
            crd::State::InProgress => match status.and_then(|s| s.active_interceptors.first()) {
                None => Self::state(State::Waiting),
                Some(active) => {
                    let own = interceptor_status(status, active);
                    Self {
                        state: State::InProgress,
                        actor: Some(active.clone()),
                        message: own.map(|s| s.message.clone()).filter(|m| !m.is_empty()),
                        heartbeat: own.and_then(|s| s.heartbeat_time.as_ref()).map(|t| t.0),
                    }
                }
            },
        };
        progress.with_pod(pod, uid)
    }

    /// From the drain's own `lifecycle.k8s.io` EvictionRequest and the pod's Eviction.
    pub fn of_lifecycle(
        pod: Option<&Pod>,
        uid: &str,
        request: Option<&LifecycleRequest>,
        eviction: Option<&Eviction>,
    ) -> Self {
        let conditions = request
            .and_then(|r| r.status.as_ref()?.conditions.as_deref())
            .unwrap_or_default();
        let true_condition = |kind: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == kind && c.status == "True")
        };
        // A request asked again after a withdrawal keeps its cancellation's conditions until
        // the controller takes the new generation up.
        let standing = request.map(upstream_standing);
        let progress = if matches!(standing, None | Some(Standing::Pending)) {
            Self::state(State::Waiting)
        } else if true_condition(CONDITION_TARGET_EVICTED).is_some() {
            Self::state(State::Evicted)
        } else if let Some(failed) = true_condition(CONDITION_FAILED) {
            Self {
                message: Some(failed.message.clone()).filter(|m| !m.is_empty()),
                ..Self::state(State::Failed)
            }
        } else {
            let active = eviction.and_then(|e| {
                e.status
                    .as_ref()?
                    .target_responders
                    .as_ref()?
                    .iter()
                    .find(|r| r.state == STATE_ACTIVE)
                    .map(|r| (e, r.name.clone()))
            });
            match active {
                None => Self::state(State::Waiting),
                Some((eviction, active)) => {
                    let own = own_status(eviction, &active);
                    Self {
                        state: State::InProgress,
                        message: own
                            .and_then(|s| s.message.clone())
                            .filter(|m| !m.is_empty()),
                        heartbeat: own.and_then(|s| s.heartbeat_time.as_ref()).map(|t| t.0),
                        actor: Some(active),
                    }
                }
            }
        };
        progress.with_pod(pod, uid)
    }

    /// Through the Eviction API: `answer` is its last refusal (a PodDisruptionBudget's 429),
    /// `None` before the first call.
    pub fn of_eviction_api(pod: Option<&Pod>, uid: &str, answer: Option<&str>) -> Self {
        Self {
            state: if answer.is_some() {
                State::InProgress
            } else {
                State::Waiting
            },
            actor: Some(EVICTION_API.to_owned()),
            message: answer.map(str::to_owned),
            heartbeat: None,
        }
        .with_pod(pod, uid)
    }
}

/// The progress table's columns.
pub const HEADER: [&str; 7] = [
    "POD",
    "STATE",
    "ACTIVE",
    "HEARTBEAT",
    "ELAPSED",
    "BLOCKER",
    "MESSAGE",
];

/// The progress of every pod (`namespace/name`, its progress, what blocks it in words),
/// `asked` when the drain asked for it, as a table.
pub fn table(
    pods: &[(String, Progress, Option<String>)],
    asked: Timestamp,
    now: Timestamp,
) -> String {
    let mut table = Table::new(&HEADER);
    let none = || "-".to_owned();
    for (pod, progress, blocker) in pods {
        table.row(vec![
            pod.clone(),
            progress.state.word().to_owned(),
            progress.actor.clone().unwrap_or_else(none),
            progress
                .heartbeat
                .map_or_else(none, |h| format!("{} ago", age(now, h))),
            age(now, asked),
            blocker.clone().unwrap_or_else(none),
            progress.message.clone().unwrap_or_default(),
        ]);
    }
    table.render()
}

/// A bar of `width` cells for `done` of `total` pods, with the count.
pub fn bar(done: usize, total: usize, width: usize) -> String {
    let filled = (done * width).checked_div(total).unwrap_or(width);
    format!(
        "[{}{}] {done}/{total} pods evicted",
        "#".repeat(filled),
        ".".repeat(width - filled)
    )
}

/// One pod's progress as a line of its own (output piped: printed when it changes), with
/// what blocks it in words.
pub fn line(
    pod: &str,
    progress: &Progress,
    blocker: Option<&str>,
    asked: Timestamp,
    now: Timestamp,
) -> String {
    let mut line = format!("{} {pod} {}", age(now, asked), progress.state.word());
    if let Some(actor) = &progress.actor {
        line.push_str(&format!(" by {actor}"));
    }
    if let Some(heartbeat) = progress.heartbeat {
        line.push_str(&format!(" (heartbeat {} ago)", age(now, heartbeat)));
    }
    if let Some(blocker) = blocker {
        line.push_str(&format!(" [blocked by {blocker}]"));
    }
    if let Some(message) = &progress.message {
        line.push_str(&format!(": {message}"));
    }
    line
}

/// What the drain says of a pod it leaves on the node: where its eviction stood, and whether
/// what blocked it, and whether its request was withdrawn.
pub fn left(pod: &str, progress: &Progress, blocker: Option<&str>, withdrawn: bool) -> String {
    let mut line = format!("{pod}: {}", progress.state.word());
    if let Some(actor) = &progress.actor {
        line.push_str(&format!(", {actor} active"));
    }
    if let Some(message) = &progress.message {
        line.push_str(&format!(" ({message:?})"));
    }
    if let Some(blocker) = blocker {
        line.push_str(&format!(", blocked by {blocker}"));
    }
    line.push_str(if withdrawn {
        "; its EvictionRequest is withdrawn"
    } else {
        "; nothing to withdraw"
    });
    line
}
