//! `NodeDrain` (`nodedrains.evictkit.io/v1alpha1`, cluster scoped, named after the node): a
//! drain that outlives its client. `kubectl evictkit drain --detach NODE` creates it; the
//! evictionrequest-controller whose Lease is in `spec.controllerNamespace` runs the drain
//! (cordon, one EvictionRequest per pod, the timeout and its withdrawal) and records where
//! each pod stands in `status`; `drain status NODE` and `drain wait NODE` read it;
//! `uncordon NODE` deletes it, which withdraws its requests. docs/kubectl-evictkit.md
//! ("Detached drains") has the rules.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// NodeDrainSpec: how to drain the node the object is named after, as `kubectl evictkit
/// drain`'s flags say it.
#[expect(
    clippy::duplicated_attributes,
    reason = "each printcolumn is its own column"
)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "evictkit.io",
    version = "v1alpha1",
    kind = "NodeDrain",
    plural = "nodedrains",
    singular = "nodedrain",
    category = "evictkit",
    status = "NodeDrainStatus",
    derive = "PartialEq",
    doc = "NodeDrain is a drain of the node it is named after that the evictionrequest-controller runs, so it outlives the client that started it (kubectl evictkit drain --detach): cordon, an EvictionRequest per pod, a timeout that withdraws them. Deleting it (kubectl evictkit uncordon) withdraws the drain's requests.",
    printcolumn(
        name = "Result",
        type_ = "string",
        json_path = ".status.result",
        description = "empty while the drain runs; drained, timeout, refused, stuck, interrupted or unreadable"
    ),
    printcolumn(name = "Pods", type_ = "integer", json_path = ".status.pods"),
    printcolumn(name = "Gone", type_ = "integer", json_path = ".status.gone"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeDrainSpec {
    /// The namespace of the evictionrequest-controller that runs this drain (its Lease): only
    /// that installation takes it up, and the drain asks through the API it serves.
    #[schemars(length(min = 1, max = 63))]
    pub controller_namespace: String,
    /// Seconds after the drain started at which it withdraws its requests and ends with
    /// `timeout`; 0 waits until every pod is gone.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub timeout_seconds: u64,
    /// Only the pods matching this label selector (e.g. app=web).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<String>,
    /// Leave DaemonSet pods on the node (without it, they stop the drain).
    #[serde(default)]
    pub ignore_daemonsets: bool,
    /// Drain pods with emptyDir volumes too (without it, they stop the drain).
    #[serde(default)]
    pub delete_emptydir_data: bool,
    /// Drain pods that no controller manages too (without it, they stop the drain).
    #[serde(default)]
    pub force: bool,
    /// A pod Terminating for longer than this counts as gone; 0 waits for it.
    #[serde(default)]
    pub skip_wait_for_delete_timeout_seconds: u64,
    /// Which EvictionRequest API to ask through: auto (what the controller serves), crd or
    /// lifecycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = "self in ['auto', 'crd', 'lifecycle']")]
    pub api: Option<String>,
    /// Without an EvictionRequest API, evict through the Eviction API.
    #[serde(default)]
    pub eviction_api_fallback: bool,
    /// The way out of a PodDisruptionBudget that blocks for longer than the operator waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<NodeDrainEscalation>,
    /// Seconds each pod gets to terminate where the drain evicts (evictionApiFallback) or
    /// deletes (escalation) it itself, overriding its terminationGracePeriodSeconds; unset:
    /// the pod's own. An EvictionRequest carries none: its interceptors decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<u32>,
}

/// After `afterSeconds`, override the PDB of each pod it still blocks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDrainEscalation {
    pub after_seconds: u64,
    /// evict-unhealthy (delete a blocked pod only when it is not Ready) or delete.
    #[x_kube(validation = "self in ['evict-unhealthy', 'delete']")]
    pub action: String,
}

/// NodeDrainStatus: where the drain stands, written by the controller that runs it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDrainStatus {
    /// When the drain asked its pods to go (RFC 3339); the timeout counts from here, also
    /// across controller restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_time: Option<String>,
    /// How it ended, as `drain -o json`'s summary says it: drained, timeout, refused, stuck,
    /// interrupted, unreadable. Unset while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why it ended when not drained (the timeout, the read error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The pods the drain asks to go, and how many of them are gone.
    #[serde(default)]
    pub pods: u32,
    #[serde(default)]
    pub gone: u32,
    /// Warnings of the plan (skipped pods), and what stops the drain (result refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<String>,
    /// Each pod of the drain: where it stands and what keeps it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_states: Vec<DrainedPod>,
}

/// One pod of a detached drain.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainedPod {
    /// namespace/name.
    pub pod: String,
    /// Waiting, InProgress, Terminating, Evicted, Gone, Failed or Skipped.
    pub state: String,
    /// The active interceptor or responder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What keeps the pod on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocker: Option<DrainBlocker>,
    /// Once the drain ended without the pod going: its request was withdrawn.
    #[serde(default)]
    pub withdrawn: bool,
}

/// What keeps a pod, as `drain -o json` names it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainBlocker {
    /// PodDisruptionBudget, Responder, NodeUnreachable or Finalizers.
    pub kind: String,
    /// The PDB's or responder's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub message: String,
}
