//! The decisions of the pdb-policy-webhook (KEP-3017): which `PodDisruptionBudgetPolicy` is in
//! force in a namespace, what it sets on a PodDisruptionBudget, which of its checks a PDB
//! fails, the stricter eviction rules of the KEP's Future Work, and `explain`'s account of an
//! eviction with the advice that would change it.
//!
//! The eviction decision itself is [`crate::eviction::decide`]; everything here starts from it,
//! so the webhook never contradicts the apiserver: a stricter rule only turns an eviction the
//! apiserver would allow into a 429.

use std::collections::BTreeMap;

use evictkit_api::{
    CheckAction, PodDisruptionBudgetPolicy, PolicyMode, UnhealthyPodEvictionPolicyType,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::eviction::{self, PodFacts};
use crate::labels::{LabelSelectorMatcher, validate_qualified_name};

/// A rule of the webhook: the label of its warning and denial metrics, and the word its
/// messages start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Rule {
    /// Two PDBs select the same pod (evictions of it then fail with 500).
    OverlappingBudgets,
    /// A PDB that can never allow a voluntary disruption.
    NeverAllowsDisruption,
    /// A PDB whose selector matches no pod.
    SelectsNoPods,
    /// Stricter health: more condition types than Ready must be True.
    RequiredPodConditions,
    /// Stricter health: a not-Ready pod with local storage is never evicted.
    ProtectUnhealthyPodsWithLocalStorage,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::OverlappingBudgets => "OverlappingBudgets",
            Rule::NeverAllowsDisruption => "NeverAllowsDisruption",
            Rule::SelectsNoPods => "SelectsNoPods",
            Rule::RequiredPodConditions => "RequiredPodConditions",
            Rule::ProtectUnhealthyPodsWithLocalStorage => "ProtectUnhealthyPodsWithLocalStorage",
        }
    }
}

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

/// One check a PDB fails, with the action the policy takes on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: Rule,
    pub action: CheckAction,
    pub message: String,
}

/// The checks of the validating webhook on `pdb`, given the other PDBs and the pods of its
/// namespace. Findings whose action is `Allow` are left out.
pub fn check_budget<P: PodFacts>(
    pdb: &PodDisruptionBudget,
    other_pdbs: &[PodDisruptionBudget],
    pods: &[P],
    policy: &PodDisruptionBudgetPolicy,
) -> Vec<Finding> {
    let spec = &policy.spec;
    let mut findings = Vec::new();
    let mut add = |rule: Rule, action: CheckAction, message: String| {
        if action != CheckAction::Allow {
            findings.push(Finding {
                rule,
                action,
                message: format!("{}: {message}", rule.as_str()),
            });
        }
    };
    let selected: Vec<&P> = pods.iter().filter(|p| eviction::selects(pdb, *p)).collect();
    let id = object_id(pdb);

    for other in other_pdbs
        .iter()
        .filter(|o| o.metadata.name != pdb.metadata.name)
    {
        let same_selector = selector(pdb).is_some() && selector(pdb) == selector(other);
        let shared = selected.iter().find(|p| eviction::selects(other, **p));
        let why = match (shared, same_selector) {
            (Some(pod), _) => format!("both select pod {}", pod.name().unwrap_or_default()),
            (None, true) => "both have the same selector".to_owned(),
            (None, false) => continue,
        };
        add(
            Rule::OverlappingBudgets,
            spec.overlapping_budgets,
            format!(
                "PodDisruptionBudget {id} overlaps {}: {why}; evictions of such pods fail with 500 \"{}\"",
                name_of(&other.metadata.name),
                eviction::MULTIPLE_PDBS_MESSAGE
            ),
        );
    }

    let live = selected.iter().filter(|p| !is_terminal(p)).count();
    if let Some(why) = never_allows_disruption(pdb, live) {
        add(
            Rule::NeverAllowsDisruption,
            spec.budgets_never_allowing_disruption,
            format!(
                "PodDisruptionBudget {id} can never allow a disruption: {why}; drains will block on its pods"
            ),
        );
    }

    if selected.is_empty() {
        let why = if selector(pdb).is_none() {
            "its selector is unset, which selects nothing in policy/v1"
        } else {
            "its selector matches no pod of the namespace"
        };
        add(
            Rule::SelectsNoPods,
            spec.budgets_selecting_no_pods,
            format!("PodDisruptionBudget {id} selects no pods: {why}"),
        );
    }
    findings
}

/// Why a PDB can never allow a voluntary disruption, if it cannot; `live` is the number of
/// non-terminal pods it selects (a minAvailable at or above it leaves nothing to disrupt,
/// unless it selects nothing, which is its own finding).
fn never_allows_disruption(pdb: &PodDisruptionBudget, live: usize) -> Option<String> {
    let spec = pdb.spec.as_ref()?;
    match (&spec.max_unavailable, &spec.min_available) {
        (Some(value), _) if int_or_percent(value) == Some((0, false)) => {
            Some("maxUnavailable is 0".to_owned())
        }
        (Some(value), _) if int_or_percent(value) == Some((0, true)) => {
            Some("maxUnavailable is 0%".to_owned())
        }
        (_, Some(value)) => match int_or_percent(value)? {
            (percent, true) if percent >= 100 => Some(format!("minAvailable is {percent}%")),
            (count, false) if live > 0 && count >= live as i64 => Some(format!(
                "minAvailable {count} is not below the {live} pods it selects"
            )),
            _ => None,
        },
        _ => None,
    }
}

/// An IntOrString as (number, is_percent); `None` for a string that is not `N%`.
fn int_or_percent(value: &IntOrString) -> Option<(i64, bool)> {
    match value {
        IntOrString::Int(n) => Some((i64::from(*n), false)),
        IntOrString::String(s) => Some((s.strip_suffix('%')?.parse().ok()?, true)),
    }
}

fn is_terminal(pod: &impl PodFacts) -> bool {
    matches!(pod.phase(), Some("Succeeded" | "Failed"))
}

fn selector(
    pdb: &PodDisruptionBudget,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector> {
    pdb.spec.as_ref()?.selector.as_ref()
}

pub(super) fn name_of(name: &Option<String>) -> String {
    name.clone().unwrap_or_default()
}

pub(super) fn object_id_of(namespace: &Option<String>, name: &Option<String>) -> String {
    format!("{}/{}", name_of(namespace), name_of(name))
}

pub(super) fn pod_id(pod: &impl PodFacts) -> String {
    format!(
        "{}/{}",
        pod.namespace().unwrap_or_default(),
        pod.name().unwrap_or_default()
    )
}

fn object_id(pdb: &PodDisruptionBudget) -> String {
    object_id_of(&pdb.metadata.namespace, &pdb.metadata.name)
}

mod allowed;
mod enforcement;
mod explain;
mod stricter;
#[cfg(test)]
mod tests;

pub use allowed::*;
pub use enforcement::*;
pub use explain::*;
pub use stricter::*;
