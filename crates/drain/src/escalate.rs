//! The drain's way out of a PodDisruptionBudget that keeps a pod longer than the operator will
//! wait: after `--escalate-after`, a pod its PDB still blocks is deleted (`delete`), or only
//! when it is not Ready (`evict-unhealthy`: as a PDB with `unhealthyPodEvictionPolicy:
//! AlwaysAllow` would let it go). Never without both flags. Each override is a Warning Event
//! on the pod and on its node naming who overrode which PDB, so it is audited where operators
//! look.

use std::time::Duration;

use evictkit_core::drain::blocker::Blocker;
use evictkit_core::eviction::is_pod_ready;
use evictkit_runtime::clients::events::EventRecorder;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Client};

use crate::error::DrainError;

/// What the drain does to a pod its PDB blocks once the wait is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Delete it only when it is not Ready: it serves nothing the budget protects.
    EvictUnhealthy,
    /// Delete it whatever its health.
    Delete,
}

impl Action {
    pub fn flag(self) -> &'static str {
        match self {
            Self::EvictUnhealthy => "evict-unhealthy",
            Self::Delete => "delete",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Escalation {
    pub after: Duration,
    pub action: Action,
}

/// The reason of the Warning Events.
pub const REASON: &str = "DrainOverrodePodDisruptionBudget";

pub(crate) struct Escalator {
    client: Client,
    escalation: Escalation,
    /// Overrides each deleted pod's terminationGracePeriodSeconds (`--grace-period`).
    grace_period: Option<u32>,
    /// Who the drain runs as, for the Events.
    user: String,
    recorder: EventRecorder,
}

impl Escalator {
    pub async fn new(
        client: &Client,
        escalation: Escalation,
        grace_period: Option<u32>,
    ) -> Result<Self, DrainError> {
        let review = Api::<SelfSubjectReview>::all(client.clone())
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .map_err(|source| DrainError::Api {
                what: "asking who the drain runs as (SelfSubjectReview), to name them in the Events of --escalate".to_owned(),
                source,
            })?;
        let user = review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .unwrap_or_else(|| "an unknown user".to_owned());
        Ok(Self {
            client: client.clone(),
            escalation,
            grace_period,
            user,
            recorder: EventRecorder::from_client(client.clone(), "kubectl-evictkit-drain"),
        })
    }

    pub fn due(&self, waited: Duration) -> bool {
        waited >= self.escalation.after
    }

    /// Overrides the PDB that blocks `pod` on `node`, if the action applies to it; whether it
    /// did. An error names the pod.
    pub async fn overrule(
        &self,
        pod: &Pod,
        node: Option<&Node>,
        blocker: &Blocker,
    ) -> Result<bool, DrainError> {
        let Blocker::Budget { pdb, .. } = blocker else {
            return Ok(false);
        };
        if self.escalation.action == Action::EvictUnhealthy && is_pod_ready(pod) {
            return Ok(false);
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            grace_period_seconds: self.grace_period,
            ..DeleteParams::default()
        };
        Api::<Pod>::namespaced(self.client.clone(), &namespace)
            .delete(&name, &params)
            .await
            .map_err(|source| DrainError::Api {
                what: format!(
                    "deleting pod {namespace}/{name} (--escalate={})",
                    self.escalation.action.flag()
                ),
                source,
            })?;
        let grace = self
            .grace_period
            .map(|seconds| format!(" --grace-period={seconds}"))
            .unwrap_or_default();
        let note = format!(
            "{} overrode PodDisruptionBudget {namespace}/{pdb}: kubectl evictkit drain deleted pod {namespace}/{name} after waiting {:?} (--escalate={}{grace})",
            self.user,
            self.escalation.after,
            self.escalation.action.flag()
        );
        self.recorder.warning(pod, REASON, "Delete", &note).await;
        if let Some(node) = node {
            self.recorder.warning(node, REASON, "Delete", &note).await;
        }
        Ok(true)
    }
}
