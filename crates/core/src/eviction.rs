//! The decision of kube-apiserver's eviction subresource (`pods/eviction`), KEP-3017.
//!
//! Reproduces `pkg/registry/core/pod/storage/eviction.go` (v1.37) for one pod and the
//! PodDisruptionBudgets of its namespace, with upstream's exact messages, so the
//! pdb-policy-webhook's `explain` says what the apiserver will answer and why, and the
//! webhook's stricter rules start from the same ground. Only the decision is here: retries on
//! conflicts, dry-run and the `DisruptedPods` write stay in the apiserver. One departure: an
//! `unhealthyPodEvictionPolicy` this client does not recognise refuses a not-Ready pod, as the
//! KEP asks of clients (the apiserver never meets one: its validation refuses it).

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

use crate::labels::LabelSelectorMatcher;

/// upstream `MaxDisruptedPodSize`: past this many evictions not yet confirmed by the
/// disruption controller, the subresource refuses further ones.
pub const MAX_DISRUPTED_POD_SIZE: usize = 2000;
/// `policyv1.DisruptionBudgetCause`, the `type` (JSON `reason`) of the status cause.
pub const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";
pub const VIOLATES_BUDGET_MESSAGE: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";
pub const MULTIPLE_PDBS_MESSAGE: &str = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";
/// Retry-After of the "still being processed" answer; the budget-exhausted answer has none.
pub const PROCESSING_RETRY_AFTER_SECONDS: i32 = 10;

/// `spec.unhealthyPodEvictionPolicy` (KEP-3017).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnhealthyPodEvictionPolicy {
    /// Default: a not-Ready pod may be evicted only while the application is not disrupted
    /// (`currentHealthy >= desiredHealthy > 0`).
    IfHealthyBudget,
    /// A not-Ready pod may always be evicted, without spending the budget.
    AlwaysAllow,
    /// A value this client does not know, e.g. a policy added by a newer apiserver (whose own
    /// validation refuses unknown values). The KEP's API comment: "Clients making eviction
    /// decisions should disallow eviction of unhealthy pods if they encounter an unrecognized
    /// policy in this field."
    Unrecognized(String),
}

impl UnhealthyPodEvictionPolicy {
    /// The PDB's policy; nil is `IfHealthyBudget`.
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        let policy = pdb
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref());
        match policy {
            None | Some("IfHealthyBudget") => UnhealthyPodEvictionPolicy::IfHealthyBudget,
            Some("AlwaysAllow") => UnhealthyPodEvictionPolicy::AlwaysAllow,
            Some(other) => UnhealthyPodEvictionPolicy::Unrecognized(other.to_owned()),
        }
    }
}

/// Why PDBs were not consulted at all (upstream `canIgnorePDB`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PdbsIgnoredBecause {
    /// `deletionTimestamp` is set.
    Terminating,
    /// Phase `Succeeded` or `Failed`: the disruption already happened.
    Terminal { phase: String },
    /// Phase `Pending`: the pod never counted as available.
    Pending,
}

/// What the subresource decides, and on which facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Deleted without looking at PDBs.
    PdbsIgnored(PdbsIgnoredBecause),
    /// No PDB selects the pod.
    NoPdb,
    /// Not Ready under `AlwaysAllow`: deleted, budget untouched.
    UnhealthyPodAlwaysAllowed { pdb: String },
    /// Not Ready under `IfHealthyBudget` while the application is healthy: deleted, budget
    /// untouched.
    UnhealthyPodHealthyBudget {
        pdb: String,
        current_healthy: i32,
        desired_healthy: i32,
    },
    /// The budget allows it: deleted, and `disruptionsAllowed` goes down by one (at 0 the PDB's
    /// `DisruptionAllowed` condition turns False with reason `InsufficientPods`).
    BudgetAllows {
        pdb: String,
        disruptions_allowed_after: i32,
    },
    /// More than one PDB selects the pod: 500.
    MultiplePdbs { pdbs: Vec<String> },
    /// `status.observedGeneration < metadata.generation`: the disruption controller has not
    /// caught up; 429.
    BudgetNotObserved {
        pdb: String,
        observed_generation: i64,
        generation: i64,
    },
    /// `disruptionsAllowed < 0`: 403.
    NegativeDisruptionsAllowed {
        pdb: String,
        disruptions_allowed: i32,
    },
    /// Too many evictions not yet confirmed by the disruption controller: 403.
    TooManyDisruptedPods { pdb: String, disrupted_pods: usize },
    /// Not Ready under an `unhealthyPodEvictionPolicy` this client does not know (a newer
    /// apiserver's): KEP-3017 tells clients to disallow the eviction then; 429.
    UnrecognizedUnhealthyPodEvictionPolicy { pdb: String, policy: String },
    /// `disruptionsAllowed == 0`: 429.
    NoDisruptionsAllowed {
        pdb: String,
        current_healthy: i32,
        desired_healthy: i32,
    },
}

/// The HTTP answer of the subresource, as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionResponse {
    pub code: u16,
    /// `metav1.Status.status`: `Success` or `Failure`.
    pub status: &'static str,
    /// `metav1.Status.reason`, e.g. `TooManyRequests`; none on success and on the 500.
    pub reason: Option<&'static str>,
    pub message: String,
    /// The message of the single `DisruptionBudget` cause, when there is one.
    pub cause: Option<String>,
    pub retry_after_seconds: Option<i32>,
}

/// The decision for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionDecision {
    pub outcome: Outcome,
    pub response: EvictionResponse,
    /// The PDB's `disruptionsAllowed` would be decremented (and the pod entered in
    /// `disruptedPods`); only when the budget itself pays for the eviction.
    pub would_decrement: bool,
    /// The delete carries the pod's resourceVersion as a precondition, so a pod that became
    /// Ready (or Running) in the meantime is not deleted: the client gets a conflict, or, on
    /// the unhealthy-pod paths, a 429 saying the budget "is still being processed".
    pub resource_version_precondition: bool,
}

/// The decision for `pod` given every PDB of its namespace (`pdbs` may hold others; those
/// that do not select the pod are ignored as upstream's `getPodDisruptionBudgets` does).
pub fn decide(pod: &impl PodFacts, pdbs: &[PodDisruptionBudget]) -> EvictionDecision {
    let outcome = outcome(pod, pdbs);
    let resource_version_precondition = match &outcome {
        Outcome::PdbsIgnored(because) => *because == PdbsIgnoredBecause::Pending,
        Outcome::UnhealthyPodAlwaysAllowed { .. } | Outcome::UnhealthyPodHealthyBudget { .. } => {
            true
        }
        _ => false,
    };
    EvictionDecision {
        response: response(&outcome),
        would_decrement: matches!(outcome, Outcome::BudgetAllows { .. }),
        resource_version_precondition,
        outcome,
    }
}

/// Whether `pdb` selects `pod` (upstream `getPodDisruptionBudgets`): same namespace, and a
/// selector that is valid and matches the pod's labels. In policy/v1 a nil selector selects
/// nothing and an empty one (`{}`) every pod of the namespace; an invalid one selects nothing.
pub fn selects(pdb: &PodDisruptionBudget, pod: &impl PodFacts) -> bool {
    if pdb.metadata.namespace.as_deref() != pod.namespace() {
        return false;
    }
    let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
    LabelSelectorMatcher::new(selector).is_ok_and(|m| m.matches(pod.labels()))
}

/// The PDBs among `pdbs` that select `pod`, in the given order.
pub fn selecting_pdbs<'a>(
    pod: &impl PodFacts,
    pdbs: &'a [PodDisruptionBudget],
) -> Vec<&'a PodDisruptionBudget> {
    pdbs.iter().filter(|pdb| selects(pdb, pod)).collect()
}

/// upstream `podutil.IsPodReady`: condition `Ready` with status `True`.
pub fn is_pod_ready(pod: &impl PodFacts) -> bool {
    pod.condition_true("Ready")
}

fn pdbs_ignored(pod: &impl PodFacts) -> Option<PdbsIgnoredBecause> {
    let phase = pod.phase().unwrap_or_default();
    match phase {
        "Succeeded" | "Failed" => Some(PdbsIgnoredBecause::Terminal {
            phase: phase.to_owned(),
        }),
        _ if pod.terminating() => Some(PdbsIgnoredBecause::Terminating),
        "Pending" => Some(PdbsIgnoredBecause::Pending),
        _ => None,
    }
}

fn outcome(pod: &impl PodFacts, pdbs: &[PodDisruptionBudget]) -> Outcome {
    if let Some(because) = pdbs_ignored(pod) {
        return Outcome::PdbsIgnored(because);
    }
    let pdb = match selecting_pdbs(pod, pdbs).as_slice() {
        [] => return Outcome::NoPdb,
        [pdb] => *pdb,
        many => {
            return Outcome::MultiplePdbs {
                pdbs: many.iter().map(|p| name(p)).collect(),
            };
        }
    };
    let status = pdb.status.clone().unwrap_or_default();
    if !is_pod_ready(pod) {
        // An unhealthy pod does not count towards currentHealthy, so deleting it spends no
        // budget, provided the policy allows it (KEP-3017).
        match UnhealthyPodEvictionPolicy::of(pdb) {
            UnhealthyPodEvictionPolicy::AlwaysAllow => {
                return Outcome::UnhealthyPodAlwaysAllowed { pdb: name(pdb) };
            }
            UnhealthyPodEvictionPolicy::Unrecognized(policy) => {
                return Outcome::UnrecognizedUnhealthyPodEvictionPolicy {
                    pdb: name(pdb),
                    policy,
                };
            }
            UnhealthyPodEvictionPolicy::IfHealthyBudget => {}
        }
        let (current_healthy, desired_healthy) = (
            status.current_healthy.unwrap_or_default(),
            status.desired_healthy.unwrap_or_default(),
        );
        if current_healthy >= desired_healthy && desired_healthy > 0 {
            return Outcome::UnhealthyPodHealthyBudget {
                pdb: name(pdb),
                current_healthy,
                desired_healthy,
            };
        }
    }
    check_budget(pdb, &status)
}

/// upstream `checkAndDecrement`, in its order of checks.
fn check_budget(pdb: &PodDisruptionBudget, status: &PodDisruptionBudgetStatus) -> Outcome {
    let observed_generation = status.observed_generation.unwrap_or_default();
    let generation = pdb.metadata.generation.unwrap_or_default();
    let disrupted_pods = status.disrupted_pods.as_ref().map_or(0, |m| m.len());
    // Optional since v1.37's types; the apiserver reads an absent count as 0.
    let disruptions_allowed = status.disruptions_allowed.unwrap_or_default();
    if observed_generation < generation {
        Outcome::BudgetNotObserved {
            pdb: name(pdb),
            observed_generation,
            generation,
        }
    } else if disruptions_allowed < 0 {
        Outcome::NegativeDisruptionsAllowed {
            pdb: name(pdb),
            disruptions_allowed,
        }
    } else if disrupted_pods > MAX_DISRUPTED_POD_SIZE {
        Outcome::TooManyDisruptedPods {
            pdb: name(pdb),
            disrupted_pods,
        }
    } else if disruptions_allowed == 0 {
        Outcome::NoDisruptionsAllowed {
            pdb: name(pdb),
            current_healthy: status.current_healthy.unwrap_or_default(),
            desired_healthy: status.desired_healthy.unwrap_or_default(),
        }
    } else {
        Outcome::BudgetAllows {
            pdb: name(pdb),
            disruptions_allowed_after: disruptions_allowed - 1,
        }
    }
}

fn name(pdb: &PodDisruptionBudget) -> String {
    pdb.metadata.name.clone().unwrap_or_default()
}

fn response(outcome: &Outcome) -> EvictionResponse {
    let too_many_requests = |cause: String, retry_after: i32| EvictionResponse {
        code: 429,
        status: "Failure",
        reason: Some("TooManyRequests"),
        message: VIOLATES_BUDGET_MESSAGE.to_owned(),
        cause: Some(cause),
        retry_after_seconds: (retry_after > 0).then_some(retry_after),
    };
    // apimachinery `NewForbidden` on resource `poddisruptionbudget` of group `policy`.
    let forbidden = |pdb: &str, why: &str| EvictionResponse {
        code: 403,
        status: "Failure",
        reason: Some("Forbidden"),
        message: format!("poddisruptionbudget.policy {pdb:?} is forbidden: {why}"),
        cause: None,
        retry_after_seconds: None,
    };
    match outcome {
        // A Status{Success} returned from Create gets code 201 from the create handler.
        Outcome::PdbsIgnored(_)
        | Outcome::NoPdb
        | Outcome::UnhealthyPodAlwaysAllowed { .. }
        | Outcome::UnhealthyPodHealthyBudget { .. }
        | Outcome::BudgetAllows { .. } => EvictionResponse {
            code: 201,
            status: "Success",
            reason: None,
            message: String::new(),
            cause: None,
            retry_after_seconds: None,
        },
        Outcome::MultiplePdbs { .. } => EvictionResponse {
            code: 500,
            status: "Failure",
            reason: None,
            message: MULTIPLE_PDBS_MESSAGE.to_owned(),
            cause: None,
            retry_after_seconds: None,
        },
        Outcome::BudgetNotObserved { pdb, .. } => too_many_requests(
            format!("The disruption budget {pdb} is still being processed by the server."),
            PROCESSING_RETRY_AFTER_SECONDS,
        ),
        Outcome::NegativeDisruptionsAllowed { pdb, .. } => {
            forbidden(pdb, "pdb disruptions allowed is negative")
        }
        Outcome::TooManyDisruptedPods { pdb, .. } => forbidden(
            pdb,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ),
        Outcome::UnrecognizedUnhealthyPodEvictionPolicy { pdb, policy } => too_many_requests(
            format!(
                "The disruption budget {pdb} has unhealthyPodEvictionPolicy {policy:?}, which this client does not recognise: pods that are not Ready are not evicted under it"
            ),
            0,
        ),
        Outcome::NoDisruptionsAllowed {
            pdb,
            current_healthy,
            desired_healthy,
        } => too_many_requests(
            format!(
                "The disruption budget {pdb} needs {desired_healthy} healthy pods and has {current_healthy} currently"
            ),
            0,
        ),
    }
}

impl EvictionDecision {
    pub fn allowed(&self) -> bool {
        self.response.code < 300
    }

    /// The `metav1.Status` body, for a webhook answering in the apiserver's words. Note the
    /// Go field `StatusCause.Type` is `reason` in JSON.
    pub fn to_status(&self) -> Status {
        let response = &self.response;
        let forbidden_pdb = match &self.outcome {
            Outcome::NegativeDisruptionsAllowed { pdb, .. }
            | Outcome::TooManyDisruptedPods { pdb, .. } => Some(pdb),
            _ => None,
        };
        let has_details = response.cause.is_some() || forbidden_pdb.is_some();
        let details = has_details.then(|| StatusDetails {
            causes: response.cause.as_ref().map(|message| {
                vec![StatusCause {
                    message: Some(message.clone()),
                    reason: Some(DISRUPTION_BUDGET_CAUSE.to_owned()),
                    field: None,
                }]
            }),
            retry_after_seconds: response.retry_after_seconds,
            group: forbidden_pdb.map(|_| "policy".to_owned()),
            kind: forbidden_pdb.map(|_| "poddisruptionbudget".to_owned()),
            name: forbidden_pdb.cloned(),
            uid: None,
        });
        Status {
            code: Some(i32::from(response.code)),
            details,
            message: (!response.message.is_empty()).then(|| response.message.clone()),
            metadata: Default::default(),
            reason: response.reason.map(str::to_owned),
            status: Some(response.status.to_owned()),
        }
    }
}

mod pod_facts;
#[cfg(test)]
mod tests;

pub use pod_facts::*;
