//! Which PodDisruptionBudgetPolicy is in force in a namespace: the valid policies that select
//! it, the highest precedence winning.

use std::collections::BTreeMap;

use evictkit_api::PodDisruptionBudgetPolicy;

use crate::labels::{LabelSelectorMatcher, validate_qualified_name};

/// Why a policy cannot be applied; such a policy is in force nowhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("spec.namespaceSelector: {0}")]
    NamespaceSelector(#[from] crate::labels::LabelSelectorError),
    #[error(
        "spec.eviction.requiredPodConditions[{index}]: invalid condition type {value:?}: {reason}"
    )]
    ConditionType {
        index: usize,
        value: String,
        reason: String,
    },
}

/// Checks what the CRD schema cannot: the namespaceSelector's requirements and the condition
/// types (qualified names, as pod condition types are).
pub fn validate(policy: &PodDisruptionBudgetPolicy) -> Result<(), Vec<PolicyError>> {
    let mut errors = Vec::new();
    if let Err(error) = namespace_matcher(policy) {
        errors.push(PolicyError::NamespaceSelector(error));
    }
    let conditions = policy
        .spec
        .eviction
        .iter()
        .flat_map(|e| &e.required_pod_conditions);
    for (index, value) in conditions.enumerate() {
        if let Err(reason) = validate_qualified_name(value) {
            errors.push(PolicyError::ConditionType {
                index,
                value: value.clone(),
                reason,
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Unset selects every namespace (unlike a PDB's selector, where nil selects nothing).
fn namespace_matcher(
    policy: &PodDisruptionBudgetPolicy,
) -> Result<LabelSelectorMatcher, crate::labels::LabelSelectorError> {
    match &policy.spec.namespace_selector {
        None => Ok(LabelSelectorMatcher::Everything),
        selector => LabelSelectorMatcher::new(selector.as_ref()),
    }
}

/// Whether `policy` is valid and selects a namespace with these labels.
pub fn selects_namespace(
    policy: &PodDisruptionBudgetPolicy,
    namespace_labels: &BTreeMap<String, String>,
) -> bool {
    validate(policy).is_ok() && namespace_matcher(policy).is_ok_and(|m| m.matches(namespace_labels))
}

/// The policy in force in a namespace: among the valid policies selecting it, the highest
/// `precedence`, then the name that sorts first.
pub fn policy_for_namespace<'a>(
    policies: impl IntoIterator<Item = &'a PodDisruptionBudgetPolicy>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<&'a PodDisruptionBudgetPolicy> {
    policies
        .into_iter()
        .filter(|policy| selects_namespace(policy, namespace_labels))
        .min_by(|a, b| {
            b.spec
                .precedence
                .cmp(&a.spec.precedence)
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
}
