//! What a policy sets on a PodDisruptionBudget: its `unhealthyPodEvictionPolicy`, written by
//! the mutating webhook on a PDB's write and by the controller on the PDBs that exist.

use evictkit_api::{PodDisruptionBudgetPolicy, PolicyMode, UnhealthyPodEvictionPolicyType};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

/// The `unhealthyPodEvictionPolicy` the mutating webhook writes into `pdb`, if any: in
/// `Default` mode only where the PDB leaves it unset, in `Enforce` mode wherever it differs.
pub fn unhealthy_pod_eviction_policy_to_set(
    pdb: &PodDisruptionBudget,
    policy: &PodDisruptionBudgetPolicy,
) -> Option<UnhealthyPodEvictionPolicyType> {
    let wanted = policy.spec.unhealthy_pod_eviction_policy?;
    let current = pdb
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref());
    match (policy.spec.mode, current) {
        (PolicyMode::Default, None) => Some(wanted),
        (PolicyMode::Default, Some(_)) => None,
        (PolicyMode::Enforce, Some(current)) if current == wanted.as_str() => None,
        (PolicyMode::Enforce, _) => Some(wanted),
    }
}
