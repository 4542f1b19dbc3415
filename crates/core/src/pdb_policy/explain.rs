//! `explain`: an account of what an eviction of a pod would get (the apiserver's decision,
//! then the stricter rules), the budgets behind it, and the advice that would change it.

use crate::eviction::{self, EvictionDecision, Outcome, PdbsIgnoredBecause};
use evictkit_api::PodDisruptionBudgetPolicy;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use super::defaulting::unhealthy_pod_eviction_policy_to_set;
use super::names::{name_of, pod_id};
use super::rule::Rule;
use super::stricter::{Circumstances, StrictCase, StricterDenial, stricter_eviction};

/// A PDB as `explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSummary {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_available: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_pod_eviction_policy: Option<String>,
    pub current_healthy: i32,
    pub desired_healthy: i32,
    pub disruptions_allowed: i32,
    pub generation: i64,
    pub observed_generation: i64,
}

impl BudgetSummary {
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        let spec = pdb.spec.clone().unwrap_or_default();
        let status = pdb.status.clone().unwrap_or_default();
        let show = |v: Option<IntOrString>| {
            v.map(|v| match v {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => s,
            })
        };
        BudgetSummary {
            name: name_of(&pdb.metadata.name),
            min_available: show(spec.min_available),
            max_unavailable: show(spec.max_unavailable),
            unhealthy_pod_eviction_policy: spec.unhealthy_pod_eviction_policy,
            current_healthy: status.current_healthy.unwrap_or_default(),
            desired_healthy: status.desired_healthy.unwrap_or_default(),
            disruptions_allowed: status.disruptions_allowed.unwrap_or_default(),
            generation: pdb.metadata.generation.unwrap_or_default(),
            observed_generation: status.observed_generation.unwrap_or_default(),
        }
    }
}

/// What an eviction of the pod would get, and from whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Prediction {
    /// HTTP status code: 201 evicted, 429, 403 or 500.
    pub code: u16,
    /// `apiserver` (the eviction subresource) or `webhook` (a stricter rule of the policy).
    pub decided_by: &'static str,
    /// The Status message; a webhook's alone until [`message_through_apiserver`] wraps it.
    pub message: String,
    /// The message of the `DisruptionBudget` cause, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// The message the eviction's caller reads: the apiserver's own, or a webhook's denial as the
/// apiserver wraps it (`admission webhook "<name>" denied the request: <message>`).
pub fn message_through_apiserver(prediction: &Prediction, eviction_webhook_name: &str) -> String {
    if prediction.decided_by == "webhook" {
        format!(
            "admission webhook {eviction_webhook_name:?} denied the request: {}",
            prediction.message
        )
    } else {
        prediction.message.clone()
    }
}

/// `explain`'s account of evicting one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub pod: String,
    pub phase: String,
    pub ready: bool,
    pub terminating: bool,
    pub pdbs: Vec<BudgetSummary>,
    /// The PodDisruptionBudgetPolicy in force in the namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The apiserver's outcome, e.g. `NoDisruptionsAllowed`.
    pub outcome: &'static str,
    pub prediction: Prediction,
    /// What would change the outcome.
    pub advice: Vec<String>,
}

impl Explanation {
    pub fn allowed(&self) -> bool {
        self.prediction.code < 300
    }
}

/// Explains evicting `pod`: the apiserver's decision, then the stricter rules of the policy in
/// force (if any), and what would change the result. `pdbs` and `pods` are those of the pod's
/// namespace.
pub fn explain(
    pod: &Pod,
    pdbs: &[PodDisruptionBudget],
    pods: &[Pod],
    policy: Option<&PodDisruptionBudgetPolicy>,
    circumstances: &Circumstances,
) -> Explanation {
    let decision = eviction::decide(pod, pdbs);
    let selecting: Vec<&PodDisruptionBudget> = eviction::selecting_pdbs(pod, pdbs);
    let pods: Vec<&Pod> = pods.iter().collect();
    let stricter = policy.and_then(|policy| {
        let strict = StrictCase::new(pod, &decision, pdbs, &pods, policy);
        stricter_eviction(&strict, circumstances)
    });
    let prediction = match &stricter {
        Some(denial) => Prediction {
            code: 429,
            decided_by: "webhook",
            message: denial.message.clone(),
            cause: None,
        },
        None => Prediction {
            code: decision.response.code,
            decided_by: "apiserver",
            message: decision.response.message.clone(),
            cause: decision.response.cause.clone(),
        },
    };
    let mut advice = advise(pod, &decision, &selecting, stricter.as_ref());
    if let Some(policy) = policy {
        for pdb in &selecting {
            if let Some(value) = unhealthy_pod_eviction_policy_to_set(pdb, policy) {
                advice.push(format!(
                    "policy {} sets unhealthyPodEvictionPolicy: {} on PDB {} at its next create or update",
                    name_of(&policy.metadata.name),
                    value.as_str(),
                    name_of(&pdb.metadata.name)
                ));
            }
        }
    }
    Explanation {
        pod: pod_id(pod),
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        ready: eviction::is_pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        pdbs: selecting.iter().map(|p| BudgetSummary::of(p)).collect(),
        policy: policy.map(|p| name_of(&p.metadata.name)),
        outcome: outcome_name(&decision.outcome),
        prediction,
        advice,
    }
}

pub(super) fn advise(
    pod: &Pod,
    decision: &EvictionDecision,
    selecting: &[&PodDisruptionBudget],
    stricter: Option<&StricterDenial>,
) -> Vec<String> {
    let plural = |n: i32| if n == 1 { "pod" } else { "pods" };
    let ready = eviction::is_pod_ready(pod);
    let mut advice = Vec::new();
    match &decision.outcome {
        Outcome::MultiplePdbs { pdbs } => advice.push(format!(
            "{} PDBs select this pod: {}; narrow their selectors so that one remains",
            count_word(pdbs.len()),
            pdbs.join(", ")
        )),
        Outcome::NoDisruptionsAllowed {
            pdb,
            current_healthy,
            desired_healthy,
        } => {
            if ready {
                let more = desired_healthy + 1 - current_healthy;
                advice.push(format!(
                    "needs {more} more healthy {} (PDB {pdb}: currentHealthy {current_healthy}, desiredHealthy {desired_healthy}), or a lower minAvailable / higher maxUnavailable",
                    plural(more)
                ));
            } else {
                let more = (desired_healthy - current_healthy).max(1);
                advice.push(format!(
                    "set unhealthyPodEvictionPolicy: AlwaysAllow on PDB {pdb}: this pod is not Ready, so it would go without spending the budget"
                ));
                advice.push(format!(
                    "or: needs {more} more healthy {} (currentHealthy {current_healthy}, desiredHealthy {desired_healthy}) for a not-Ready pod to go under IfHealthyBudget",
                    plural(more)
                ));
            }
        }
        Outcome::BudgetNotObserved {
            pdb,
            observed_generation,
            generation,
        } => {
            advice.push(format!(
                "the disruption controller has not observed generation {generation} of PDB {pdb} (observedGeneration {observed_generation}); retry once it has"
            ));
            let sync_failed = selecting
                .iter()
                .flat_map(|p| p.status.iter().flat_map(|s| s.conditions.iter().flatten()))
                .find(|c| c.type_ == "DisruptionAllowed" && c.reason == "SyncFailed");
            if let Some(condition) = sync_failed {
                advice.push(format!(
                    "it cannot compute the budget (SyncFailed): {}",
                    condition.message
                ));
            }
            if !ready {
                advice.push(format!(
                    "set unhealthyPodEvictionPolicy: AlwaysAllow on PDB {pdb}: this pod is not Ready, so it would go without waiting for the budget"
                ));
            }
        }
        Outcome::UnrecognizedUnhealthyPodEvictionPolicy { pdb, policy } => advice.push(format!(
            "PDB {pdb} has unhealthyPodEvictionPolicy {policy:?}, unknown to this version: set IfHealthyBudget or AlwaysAllow, or make the pod Ready"
        )),
        Outcome::NegativeDisruptionsAllowed { pdb, .. } => advice.push(format!(
            "PDB {pdb} reports a negative disruptionsAllowed; wait for the disruption controller to recompute it"
        )),
        Outcome::TooManyDisruptedPods { pdb, .. } => advice.push(format!(
            "PDB {pdb} has too many evictions the disruption controller has not confirmed; wait for it to catch up"
        )),
        Outcome::BudgetAllows {
            pdb,
            disruptions_allowed_after,
        } => advice.push(format!(
            "spends one disruption of PDB {pdb} (disruptionsAllowed becomes {disruptions_allowed_after})"
        )),
        Outcome::PdbsIgnored(_)
        | Outcome::NoPdb
        | Outcome::UnhealthyPodAlwaysAllowed { .. }
        | Outcome::UnhealthyPodHealthyBudget { .. } => {}
    }
    if let Some(denial) = stricter {
        advice.push(match denial.rule {
            Rule::ProtectUnhealthyPodsWithLocalStorage => {
                "the policy protects not-Ready pods with local storage: make the pod Ready, or delete it deliberately".to_owned()
            }
            _ => format!(
                "needs more pods of PDB {} with the policy's required conditions True",
                denial.pdb
            ),
        });
    }
    advice
}

pub(super) fn count_word(n: usize) -> String {
    match n {
        2 => "two".to_owned(),
        3 => "three".to_owned(),
        n => n.to_string(),
    }
}

/// A short name of the apiserver's outcome, for tables and JSON.
pub fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::PdbsIgnored(PdbsIgnoredBecause::Terminating) => "PdbsIgnoredTerminating",
        Outcome::PdbsIgnored(PdbsIgnoredBecause::Terminal { .. }) => "PdbsIgnoredTerminal",
        Outcome::PdbsIgnored(PdbsIgnoredBecause::Pending) => "PdbsIgnoredPending",
        Outcome::NoPdb => "NoPdb",
        Outcome::UnhealthyPodAlwaysAllowed { .. } => "UnhealthyPodAlwaysAllowed",
        Outcome::UnhealthyPodHealthyBudget { .. } => "UnhealthyPodHealthyBudget",
        Outcome::BudgetAllows { .. } => "BudgetAllows",
        Outcome::MultiplePdbs { .. } => "MultiplePdbs",
        Outcome::BudgetNotObserved { .. } => "BudgetNotObserved",
        Outcome::NegativeDisruptionsAllowed { .. } => "NegativeDisruptionsAllowed",
        Outcome::TooManyDisruptedPods { .. } => "TooManyDisruptedPods",
        Outcome::UnrecognizedUnhealthyPodEvictionPolicy { .. } => {
            "UnrecognizedUnhealthyPodEvictionPolicy"
        }
        Outcome::NoDisruptionsAllowed { .. } => "NoDisruptionsAllowed",
    }
}
