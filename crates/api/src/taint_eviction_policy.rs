//! `TaintEvictionPolicy` (`taintevictionpolicies.evictkit.io/v1alpha1`, cluster scoped): how
//! the taint-manager removes the pods that a NoExecute taint makes due (KEP-3902).
//!
//! With no policy the taint-manager deletes pods exactly as kube-controller-manager's
//! `taint-eviction-controller` does. A policy selects taints (key, optional value), namespaces
//! and pods, and says what to do instead: `Evict` through the Eviction API (PDBs respected),
//! ask for it cooperatively with an `EvictionRequest` (KEP-4563, requester
//! `taint-manager.evictkit.io`, withdrawn when the pod is no longer due), or `Ignore` the taint
//! for those pods (the KEP's stateful story). It may also force-delete
//! pods stuck terminating on an unreachable node (the KEP's story 4).
//!
//! When several policies select the same taint for the same pod, the one with the highest
//! `precedence` wins, and among equals the one whose name sorts first. The rules live in
//! `evictkit_core::taint_policy`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// TaintEvictionPolicySpec says which pods on NoExecute-tainted nodes it governs and how they
/// are removed.
#[expect(
    clippy::duplicated_attributes,
    reason = "each printcolumn is its own column"
)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "evictkit.io",
    version = "v1alpha1",
    kind = "TaintEvictionPolicy",
    plural = "taintevictionpolicies",
    singular = "taintevictionpolicy",
    shortname = "tepolicy",
    category = "evictkit",
    status = "TaintEvictionPolicyStatus",
    derive = "PartialEq",
    doc = "TaintEvictionPolicy says how the taint-manager removes pods that NoExecute taints make due: Delete (as kube-controller-manager), Evict (Eviction API, PodDisruptionBudgets respected), EvictionRequest (cooperative, KEP-4563) or Ignore the taint; optionally force-deletes pods stuck terminating on unreachable nodes (KEP-3902).",
    printcolumn(
        name = "Action",
        type_ = "string",
        json_path = ".spec.action",
        description = "Delete, Evict, EvictionRequest or Ignore"
    ),
    printcolumn(name = "Precedence", type_ = "integer", json_path = ".spec.precedence"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(
        name = "Pods",
        type_ = "integer",
        json_path = ".status.governedPods",
        description = "pods on tainted nodes this policy governs now"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TaintEvictionPolicySpec {
    /// Taints this policy applies to (NoExecute taints only; a taint matches an entry with the
    /// same key and, if the entry has a value, the same value). Empty: every NoExecute taint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub taints: Vec<TaintSelector>,

    /// NamespaceSelector selects the namespaces of the pods this policy governs, by the
    /// namespaces' labels (e.g. kubernetes.io/metadata.name). Unset or {}: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub namespace_selector: Option<LabelSelector>,

    /// PodSelector selects the pods this policy governs, by their labels. Unset or {}: every
    /// pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub pod_selector: Option<LabelSelector>,

    /// Precedence decides between policies that select the same taint of the same pod: the
    /// highest wins, and among equals the policy whose name sorts first. Default 0.
    #[serde(default)]
    pub precedence: i32,

    /// Action taken when a selected taint makes a pod due (after its tolerationSeconds):
    /// Delete (default, as kube-controller-manager), Evict (Eviction API, PodDisruptionBudgets
    /// respected, retried with backoff while the taint lasts), EvictionRequest (an
    /// EvictionRequest with requester taint-manager.evictkit.io, so the pod's interceptors act
    /// first; withdrawn when the pod is no longer due), or Ignore (the taint never removes the
    /// pod).
    #[serde(default)]
    pub action: TaintEvictionAction,

    /// ForceDeleteTerminatingAfter: a governed pod that is still terminating this long after
    /// its deletion grace period ended, on a node tainted node.kubernetes.io/unreachable, is
    /// deleted with grace period 0 so its replacement can start (e.g. "5m", "1h30m"). Unset:
    /// never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32))]
    pub force_delete_terminating_after: Option<String>,
}

/// A taint, by key and optionally value.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TaintSelector {
    /// Key of the taint, e.g. node.kubernetes.io/unreachable.
    #[schemars(length(min = 1, max = 316))]
    pub key: String,
    /// Value of the taint; unset matches every value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,
}

/// How a due pod is removed.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash,
)]
pub enum TaintEvictionAction {
    /// Delete the pod, as kube-controller-manager's taint-eviction-controller does.
    #[default]
    Delete,
    /// Evict the pod through the Eviction API, so PodDisruptionBudgets are respected; retried
    /// with backoff while the taint lasts.
    Evict,
    /// Ask for the eviction through the pod's EvictionRequest (KEP-4563) with requester
    /// taint-manager.evictkit.io: the pod's eviction interceptors act first, then the
    /// evictionrequest-controller evicts it. Withdrawn when the pod is no longer due (the taint
    /// goes, a toleration or the policy changes).
    EvictionRequest,
    /// Keep the pod: the selected taints do not remove it.
    Ignore,
}

impl TaintEvictionAction {
    /// The value as written in the spec; also the `action` label of the taint-manager's metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEvictionAction::Delete => "Delete",
            TaintEvictionAction::Evict => "Evict",
            TaintEvictionAction::EvictionRequest => "EvictionRequest",
            TaintEvictionAction::Ignore => "Ignore",
        }
    }
}

/// TaintEvictionPolicyStatus reports whether the policy is valid and how many pods it governs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaintEvictionPolicyStatus {
    /// The .metadata.generation this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Pods on NoExecute-tainted nodes for which this policy wins (selected, and not
    /// overridden by a policy of higher precedence).
    #[serde(default)]
    pub governed_pods: i64,

    /// Conditions: Valid (False with the reason when a selector or
    /// forceDeleteTerminatingAfter is invalid; an invalid policy governs nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
}
