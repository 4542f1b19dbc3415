use std::collections::BTreeMap;

use super::*;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};

const NIL: Option<&str> = None;
const IF_HEALTHY: Option<&str> = Some("IfHealthyBudget");
const ALWAYS: Option<&str> = Some("AlwaysAllow");
const ALL_POLICIES: &[Option<&str>] = &[NIL, IF_HEALTHY, ALWAYS];
const NOT_ALWAYS: &[Option<&str>] = &[NIL, IF_HEALTHY];

fn a_true() -> BTreeMap<String, String> {
    [("a".to_owned(), "true".to_owned())].into()
}

/// A pod labelled `a=true` in `default`, with `phase` and, if given, a Ready condition.
fn pod(phase: &str, ready: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("t".into()),
            namespace: Some("default".into()),
            labels: Some(a_true()),
            ..Default::default()
        },
        status: Some(PodStatus {
            phase: (!phase.is_empty()).then(|| phase.to_owned()),
            conditions: ready.map(|status| {
                vec![PodCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn terminating(mut pod: Pod) -> Pod {
    pod.metadata.deletion_timestamp = Some(Time("2025-01-01T00:00:00Z".parse().unwrap()));
    pod
}

/// PDB `name` in `default` selecting `a=true`, with the given status counters.
fn pdb(
    name: &str,
    disruptions_allowed: i32,
    current_healthy: i32,
    desired_healthy: i32,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(a_true()),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: Some(disruptions_allowed),
            current_healthy: Some(current_healthy),
            desired_healthy: Some(desired_healthy),
            ..Default::default()
        }),
    }
}

fn foo(
    disruptions_allowed: i32,
    current_healthy: i32,
    desired_healthy: i32,
) -> PodDisruptionBudget {
    pdb("foo", disruptions_allowed, current_healthy, desired_healthy)
}

fn with_selector(
    mut pdb: PodDisruptionBudget,
    selector: Option<LabelSelector>,
) -> PodDisruptionBudget {
    pdb.spec.as_mut().unwrap().selector = selector;
    pdb
}

fn with_status(
    mut pdb: PodDisruptionBudget,
    edit: impl FnOnce(&mut PodDisruptionBudgetStatus),
) -> PodDisruptionBudget {
    edit(pdb.status.as_mut().unwrap());
    pdb
}

fn disrupted(n: usize) -> Option<BTreeMap<String, Time>> {
    let at = Time("2025-01-01T00:00:00Z".parse().unwrap());
    Some((0..n).map(|i| (format!("p{i}"), at.clone())).collect())
}

fn not_observed(observed_generation: Option<i64>, generation: i64) -> Outcome {
    Outcome::BudgetNotObserved {
        pdb: "foo".into(),
        observed_generation: observed_generation.unwrap_or_default(),
        generation,
    }
}

fn exhausted(current_healthy: i32, desired_healthy: i32) -> Outcome {
    Outcome::NoDisruptionsAllowed {
        pdb: "foo".into(),
        current_healthy,
        desired_healthy,
    }
}

fn allows(after: i32) -> Outcome {
    Outcome::BudgetAllows {
        pdb: "foo".into(),
        disruptions_allowed_after: after,
    }
}

fn always_allowed() -> Outcome {
    Outcome::UnhealthyPodAlwaysAllowed { pdb: "foo".into() }
}

fn healthy_budget(current_healthy: i32, desired_healthy: i32) -> Outcome {
    Outcome::UnhealthyPodHealthyBudget {
        pdb: "foo".into(),
        current_healthy,
        desired_healthy,
    }
}

fn unrecognized(policy: &str) -> Outcome {
    Outcome::UnrecognizedUnhealthyPodEvictionPolicy {
        pdb: "foo".into(),
        policy: policy.into(),
    }
}

fn terminal(phase: &str) -> Outcome {
    Outcome::PdbsIgnored(PdbsIgnoredBecause::Terminal {
        phase: phase.into(),
    })
}

/// (case, pod, pdbs, policies the row runs under, outcome)
type Row = (
    &'static str,
    Pod,
    Vec<PodDisruptionBudget>,
    &'static [Option<&'static str>],
    Outcome,
);

/// Runs each row under each of its policies, checking the outcome and the decrement flag.
fn check(rows: Vec<Row>) {
    for (case, pod, pdbs, policies, want) in rows {
        for policy in policies {
            let pdbs: Vec<_> = pdbs
                .iter()
                .cloned()
                .map(|mut p| {
                    if let Some(spec) = p.spec.as_mut() {
                        spec.unhealthy_pod_eviction_policy = policy.map(str::to_owned);
                    }
                    p
                })
                .collect();
            let decision = decide(&pod, &pdbs);
            assert_eq!(decision.outcome, want, "{case} with {policy:?} policy");
            assert_eq!(
                decision.would_decrement,
                matches!(want, Outcome::BudgetAllows { .. }),
                "{case}"
            );
        }
    }
}

mod budget;
mod responses;
mod upstream;
