//! The validating webhook's checks on a PodDisruptionBudget (overlapping budgets, a budget that
//! never allows a disruption, one that selects no pods), each with the action the policy takes.

use evictkit_api::{CheckAction, PodDisruptionBudgetPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use super::names::{name_of, object_id};
use super::rule::Rule;
use crate::eviction::{self, PodFacts};

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
