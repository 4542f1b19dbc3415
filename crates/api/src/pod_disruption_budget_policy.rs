//! `PodDisruptionBudgetPolicy` (`poddisruptionbudgetpolicies.evictkit.io/v1alpha1`, cluster
//! scoped): what the pdb-policy-webhook does to the PodDisruptionBudgets of the namespaces it
//! selects (KEP-3017).
//!
//! KEP-3017 added `spec.unhealthyPodEvictionPolicy` to PodDisruptionBudgets, but left it unset
//! (= `IfHealthyBudget`) on every existing PDB, and the eviction subresource still fails on
//! overlapping PDBs and on budgets that can never allow a disruption. A policy names, per set
//! of namespaces, the `unhealthyPodEvictionPolicy` to default or enforce, what to do with such
//! PDBs, and (the KEP's Future Work) stricter health for evictions.
//!
//! When several policies select a namespace, the one with the highest `precedence` is in force
//! there, and among equals the one whose name sorts first; the others do nothing in it. The
//! rule lives in `evictkit_core::pdb_policy::policy_for_namespace`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// PodDisruptionBudgetPolicySpec says what the pdb-policy-webhook does to the
/// PodDisruptionBudgets (and evictions) of the namespaces it selects.
// Several printcolumns share `type_ = "string"`, which clippy takes for a repeated attribute.
#[expect(
    clippy::duplicated_attributes,
    reason = "each printcolumn is its own column"
)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "evictkit.io",
    version = "v1alpha1",
    kind = "PodDisruptionBudgetPolicy",
    plural = "poddisruptionbudgetpolicies",
    singular = "poddisruptionbudgetpolicy",
    shortname = "pdbpolicy",
    category = "evictkit",
    status = "PodDisruptionBudgetPolicyStatus",
    derive = "PartialEq",
    doc = "PodDisruptionBudgetPolicy sets unhealthyPodEvictionPolicy on the PodDisruptionBudgets of the namespaces it selects, checks them for overlap, budgets that never allow a disruption and empty selectors, and may make evictions stricter (KEP-3017).",
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".spec.unhealthyPodEvictionPolicy",
        description = "unhealthyPodEvictionPolicy applied to PDBs"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        description = "Default (only when unset) or Enforce"
    ),
    printcolumn(name = "Precedence", type_ = "integer", json_path = ".spec.precedence"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetPolicySpec {
    /// NamespaceSelector selects the namespaces whose PodDisruptionBudgets this policy covers,
    /// by the namespaces' labels (e.g. kubernetes.io/metadata.name). Unset or {} selects every
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub namespace_selector: Option<LabelSelector>,

    /// Precedence decides between policies that select the same namespace: the highest wins,
    /// and among equals the policy whose name sorts first. Default 0.
    #[serde(default)]
    pub precedence: i32,

    /// UnhealthyPodEvictionPolicy to set on PodDisruptionBudgets (IfHealthyBudget or
    /// AlwaysAllow); unset leaves the field alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_pod_eviction_policy: Option<UnhealthyPodEvictionPolicyType>,

    /// Mode says when unhealthyPodEvictionPolicy is set: Default only on PDBs that leave it
    /// unset (a PDB's own choice stands), when they are written; Enforce on every PDB (a PDB's
    /// own choice is overwritten), existing ones included: the controller sets it on the PDBs
    /// already there. Default: Default.
    #[serde(default)]
    pub mode: PolicyMode,

    /// OverlappingBudgets: what to do with a PDB that selects a pod another PDB of its namespace
    /// selects too, or has the same selector as another; evictions of such pods fail with 500
    /// "more than one PodDisruptionBudget". Deny, Warn or Allow; default Warn.
    #[serde(default)]
    pub overlapping_budgets: CheckAction,

    /// BudgetsNeverAllowingDisruption: what to do with a PDB that can never allow a voluntary
    /// disruption: maxUnavailable 0 or 0%, minAvailable 100%, or minAvailable not below the
    /// number of pods it selects. Deny, Warn or Allow; default Warn.
    #[serde(default)]
    pub budgets_never_allowing_disruption: CheckAction,

    /// BudgetsSelectingNoPods: what to do with a PDB whose selector matches no pod of its
    /// namespace (or is unset, which selects nothing in policy/v1). Deny, Warn or Allow;
    /// default Warn (a PDB is often created before its workload).
    #[serde(default)]
    pub budgets_selecting_no_pods: CheckAction,

    /// Eviction makes evictions of pods covered by a PDB stricter than the apiserver (the
    /// KEP's Future Work); unset adds nothing to the apiserver's decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction: Option<StricterEviction>,
}

/// UnhealthyPodEvictionPolicyType (policy/v1) defines the criteria for when unhealthy pods
/// should be considered for eviction.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnhealthyPodEvictionPolicyType {
    /// Running but not Ready pods may be evicted only while the application is not disrupted
    /// (status.currentHealthy is at least status.desiredHealthy).
    IfHealthyBudget,
    /// Running but not Ready pods may always be evicted, without spending the budget.
    AlwaysAllow,
}

impl UnhealthyPodEvictionPolicyType {
    /// The value as it is written in a PodDisruptionBudget's spec.
    pub fn as_str(self) -> &'static str {
        match self {
            UnhealthyPodEvictionPolicyType::IfHealthyBudget => "IfHealthyBudget",
            UnhealthyPodEvictionPolicyType::AlwaysAllow => "AlwaysAllow",
        }
    }
}

/// When a policy sets unhealthyPodEvictionPolicy.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum PolicyMode {
    /// Only on PDBs that leave the field unset.
    #[default]
    Default,
    /// On every PDB, overwriting its own choice.
    Enforce,
}

/// What the validating webhook does with a PDB that a check finds.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum CheckAction {
    /// Reject the create or update.
    Deny,
    /// Admit it with a warning (kubectl prints it).
    #[default]
    Warn,
    /// Admit it silently.
    Allow,
}

/// StricterEviction: rules the eviction webhook adds to the apiserver's decision. They only
/// ever turn an eviction the apiserver would allow into a 429; they never allow one it denies.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StricterEviction {
    /// RequiredPodConditions: pod condition types that, besides Ready, must be True for a pod
    /// to count as healthy (e.g. a readiness gate of the application). An eviction is denied
    /// when fewer pods than the PDB's desiredHealthy would stay healthy by this measure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 316)))]
    pub required_pod_conditions: Vec<String>,

    /// ProtectUnhealthyPodsWithLocalStorage: never evict a pod that is not Ready and uses
    /// local storage (an emptyDir not in memory, or a hostPath), even where the PDB's
    /// unhealthyPodEvictionPolicy would let it go; its data may be the only copy.
    #[serde(default)]
    pub protect_unhealthy_pods_with_local_storage: bool,
}

/// PodDisruptionBudgetPolicyStatus reports where the policy is in force and whether it is
/// valid.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetPolicyStatus {
    /// The .metadata.generation this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Namespaces where this policy is in force (selected, and not overridden by a policy of
    /// higher precedence), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,

    /// Budgets is the number of PodDisruptionBudgets in the namespaces where the policy is in
    /// force.
    #[serde(default)]
    pub budgets: i32,

    /// ConformingBudgets is the number of those whose unhealthyPodEvictionPolicy is what the
    /// policy sets (any value in Default mode, the policy's value in Enforce mode).
    #[serde(default)]
    pub conforming_budgets: i32,

    /// NonConformingBudgets names ("namespace/name", sorted, at most 100) the others: in
    /// Enforce mode the PDBs whose field could not be set yet (an Event on the PDB says why);
    /// in Default mode the PDBs that leave it unset, which get the default at their next write
    /// (Default mode never rewrites an existing PDB).
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub non_conforming_budgets: Vec<String>,

    /// Conditions: Valid (False with the reason when the namespaceSelector or a condition type
    /// is invalid; an invalid policy is in force nowhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
}
