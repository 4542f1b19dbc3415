use std::collections::BTreeMap;

use super::*;
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
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
            disruptions_allowed,
            current_healthy,
            desired_healthy,
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

#[test]
fn eviction_decisions() {
    let pending = || Outcome::PdbsIgnored(PdbsIgnoredBecause::Pending);
    let empty_selector = || with_selector(foo(0, 0, 0), Some(LabelSelector::default()));
    let cases: Vec<Row> = vec![
        // upstream TestEviction; its pods have no Ready condition
        (
            "matching pdbs with no disruptions allowed, pod running",
            pod("Running", None),
            vec![foo(0, 0, 0)],
            NOT_ALWAYS,
            exhausted(0, 0),
        ),
        (
            "same, AlwaysAllow terminates the unready pod",
            pod("Running", None),
            vec![foo(0, 0, 0)],
            &[ALWAYS],
            always_allowed(),
        ),
        (
            "matching pdbs with no disruptions allowed, pod pending",
            pod("Pending", None),
            vec![foo(0, 0, 0)],
            ALL_POLICIES,
            pending(),
        ),
        (
            "matching pdbs with no disruptions allowed, pod succeeded",
            pod("Succeeded", None),
            vec![foo(0, 0, 0)],
            ALL_POLICIES,
            terminal("Succeeded"),
        ),
        (
            "matching pdbs with no disruptions allowed, pod failed",
            pod("Failed", None),
            vec![foo(0, 0, 0)],
            ALL_POLICIES,
            terminal("Failed"),
        ),
        // the apiserver creates pods Pending, which these two upstream rows rely on
        (
            "matching pdbs with disruptions allowed",
            pod("Pending", None),
            vec![foo(1, 0, 0)],
            ALL_POLICIES,
            pending(),
        ),
        (
            "non-matching pdbs",
            pod("Pending", None),
            vec![with_selector(
                foo(0, 0, 0),
                Some(LabelSelector {
                    match_labels: Some([("b".into(), "true".into())].into()),
                    match_expressions: None,
                }),
            )],
            ALL_POLICIES,
            pending(),
        ),
        (
            "matching pdbs with no disruptions allowed, pod running, empty selector",
            pod("Running", None),
            vec![empty_selector()],
            NOT_ALWAYS,
            exhausted(0, 0),
        ),
        // upstream TestEvictionIgnorePDB, first decision of each row
        (
            "pdbs No disruptions allowed, pod pending, first delete conflict, pod still pending",
            pod("Pending", None),
            vec![foo(0, 0, 0)],
            ALL_POLICIES,
            pending(),
        ),
        (
            "pdbs No disruptions allowed, pod pending, first delete conflict, pod becomes running, continueToPDBs",
            pod("Running", None),
            vec![foo(0, 0, 0)],
            NOT_ALWAYS,
            exhausted(0, 0),
        ),
        (
            "pdbs No disruptions allowed, pod pending, first delete conflict, pod becomes running, skip PDB check",
            pod("Running", Some("False")),
            vec![foo(0, 0, 0)],
            &[ALWAYS],
            always_allowed(),
        ),
        (
            "pdbs disruptions allowed, pod pending, first delete conflict, pod becomes running, continueToPDBs",
            pod("Running", None),
            vec![foo(1, 0, 0)],
            NOT_ALWAYS,
            allows(0),
        ),
        (
            "matching pdbs with no disruptions allowed, pod terminating",
            terminating(pod("Running", None)),
            vec![foo(0, 0, 0)],
            ALL_POLICIES,
            Outcome::PdbsIgnored(PdbsIgnoredBecause::Terminating),
        ),
        (
            "matching pdbs with no disruptions allowed, pod running, pod healthy, unhealthy pod not ours",
            pod("Running", Some("True")),
            vec![foo(0, 2, 2)],
            ALL_POLICIES,
            exhausted(2, 2),
        ),
        (
            "matching pdbs with disruptions allowed, pod running, pod healthy, healthy pod ours, deletes pod by honoring the PDB",
            pod("Running", Some("True")),
            vec![foo(1, 3, 3)],
            ALL_POLICIES,
            allows(0),
        ),
        (
            "matching pdbs with no disruptions allowed, pod running, pod unhealthy, unhealthy pod ours",
            pod("Running", Some("False")),
            vec![foo(0, 2, 2)],
            NOT_ALWAYS,
            healthy_budget(2, 2),
        ),
        (
            "same under AlwaysAllow",
            pod("Running", Some("False")),
            vec![foo(0, 2, 2)],
            &[ALWAYS],
            always_allowed(),
        ),
        (
            "matching pdbs with no disruptions allowed, pod running, pod unhealthy, unhealthy pod ours, skips the PDB check and deletes",
            pod("Running", Some("False")),
            vec![foo(0, 0, 0)],
            &[ALWAYS],
            always_allowed(),
        ),
        (
            "same under IfHealthyBudget: the budget is checked",
            pod("Running", Some("False")),
            vec![foo(0, 0, 0)],
            NOT_ALWAYS,
            exhausted(0, 0),
        ),
        (
            "matching pdbs with no disruptions allowed, pod running, pod healthy, empty selector, pod not deleted by honoring the PDB",
            pod("Running", Some("True")),
            vec![with_selector(foo(0, 3, 3), Some(LabelSelector::default()))],
            ALL_POLICIES,
            exhausted(3, 3),
        ),
        // upstream TestEvictionPDBStatus
        (
            "pdb status is updated after eviction",
            pod("Running", None),
            vec![foo(1, 0, 0)],
            NOT_ALWAYS,
            allows(0),
        ),
        (
            "condition reason is only updated if AllowedDisruptions becomes 0",
            pod("Running", None),
            vec![foo(3, 0, 0)],
            NOT_ALWAYS,
            allows(2),
        ),
        // the rest of eviction.go
        (
            "no PDB at all",
            pod("Running", Some("True")),
            vec![],
            ALL_POLICIES,
            Outcome::NoPdb,
        ),
        (
            "PDB in another namespace",
            pod("Running", Some("True")),
            vec![{
                let mut p = foo(0, 0, 0);
                p.metadata.namespace = Some("other".into());
                p
            }],
            ALL_POLICIES,
            Outcome::NoPdb,
        ),
        (
            "nil selector selects nothing",
            pod("Running", Some("True")),
            vec![with_selector(foo(0, 0, 0), None)],
            ALL_POLICIES,
            Outcome::NoPdb,
        ),
        (
            "PDB without spec selects nothing",
            pod("Running", Some("True")),
            vec![PodDisruptionBudget {
                spec: None,
                ..foo(0, 0, 0)
            }],
            ALL_POLICIES,
            Outcome::NoPdb,
        ),
        (
            "invalid selector selects nothing",
            pod("Running", Some("True")),
            vec![with_selector(
                foo(0, 0, 0),
                Some(LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "a".into(),
                        operator: "In".into(),
                        values: None,
                    }]),
                }),
            )],
            ALL_POLICIES,
            Outcome::NoPdb,
        ),
        (
            "matchExpressions select",
            pod("Running", Some("True")),
            vec![with_selector(
                foo(0, 1, 1),
                Some(LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "a".into(),
                        operator: "In".into(),
                        values: Some(vec!["true".into(), "yes".into()]),
                    }]),
                }),
            )],
            ALL_POLICIES,
            exhausted(1, 1),
        ),
        (
            "more than one PDB",
            pod("Running", Some("True")),
            vec![foo(1, 1, 1), pdb("bar", 1, 1, 1)],
            ALL_POLICIES,
            Outcome::MultiplePdbs {
                pdbs: vec!["foo".into(), "bar".into()],
            },
        ),
        (
            "more than one PDB, one of them not selecting",
            pod("Running", Some("True")),
            vec![with_selector(pdb("bar", 0, 0, 0), None), foo(1, 1, 1)],
            ALL_POLICIES,
            allows(0),
        ),
        (
            "more than one PDB but the pod is terminal",
            pod("Failed", Some("True")),
            vec![foo(0, 1, 1), pdb("bar", 0, 1, 1)],
            ALL_POLICIES,
            terminal("Failed"),
        ),
        (
            "more than one PDB and the pod unready: 500 even under AlwaysAllow",
            pod("Running", Some("False")),
            vec![foo(0, 1, 1), pdb("bar", 0, 1, 1)],
            ALL_POLICIES,
            Outcome::MultiplePdbs {
                pdbs: vec!["foo".into(), "bar".into()],
            },
        ),
        (
            "observedGeneration behind generation",
            pod("Running", Some("True")),
            vec![{
                let mut p = with_status(foo(5, 5, 3), |s| s.observed_generation = Some(1));
                p.metadata.generation = Some(2);
                p
            }],
            ALL_POLICIES,
            not_observed(Some(1), 2),
        ),
        (
            "fresh PDB without status",
            pod("Running", Some("True")),
            vec![{
                let mut p = foo(0, 0, 0);
                p.status = None;
                p.metadata.generation = Some(1);
                p
            }],
            ALL_POLICIES,
            not_observed(None, 1),
        ),
        (
            "observedGeneration ahead is fine",
            pod("Running", Some("True")),
            vec![{
                let mut p = with_status(foo(1, 2, 1), |s| s.observed_generation = Some(3));
                p.metadata.generation = Some(2);
                p
            }],
            ALL_POLICIES,
            allows(0),
        ),
        (
            "not observed is checked before a negative budget",
            pod("Running", Some("True")),
            vec![{
                let mut p = foo(-1, 0, 0);
                p.metadata.generation = Some(1);
                p
            }],
            ALL_POLICIES,
            not_observed(None, 1),
        ),
        (
            "negative disruptionsAllowed",
            pod("Running", Some("True")),
            vec![foo(-1, 0, 2)],
            ALL_POLICIES,
            Outcome::NegativeDisruptionsAllowed {
                pdb: "foo".into(),
                disruptions_allowed: -1,
            },
        ),
        (
            "DisruptedPods map too big",
            pod("Running", Some("True")),
            vec![with_status(foo(3, 5, 1), |s| {
                s.disrupted_pods = disrupted(2001)
            })],
            ALL_POLICIES,
            Outcome::TooManyDisruptedPods {
                pdb: "foo".into(),
                disrupted_pods: 2001,
            },
        ),
        (
            "DisruptedPods at the limit is fine",
            pod("Running", Some("True")),
            vec![with_status(foo(3, 5, 1), |s| {
                s.disrupted_pods = disrupted(2000)
            })],
            ALL_POLICIES,
            allows(2),
        ),
        (
            "negative is checked before DisruptedPods",
            pod("Running", Some("True")),
            vec![with_status(foo(-2, 5, 1), |s| {
                s.disrupted_pods = disrupted(2001)
            })],
            ALL_POLICIES,
            Outcome::NegativeDisruptionsAllowed {
                pdb: "foo".into(),
                disruptions_allowed: -2,
            },
        ),
        (
            "unready pod, budget disrupted (current < desired)",
            pod("Running", Some("False")),
            vec![foo(0, 1, 2)],
            NOT_ALWAYS,
            exhausted(1, 2),
        ),
        (
            "unready pod, desiredHealthy 0 spends the budget",
            pod("Running", Some("False")),
            vec![foo(2, 0, 0)],
            NOT_ALWAYS,
            allows(1),
        ),
        (
            "unready pod, healthy budget, even if the PDB is not observed",
            pod("Running", Some("False")),
            vec![{
                let mut p = foo(0, 3, 2);
                p.metadata.generation = Some(4);
                p
            }],
            NOT_ALWAYS,
            healthy_budget(3, 2),
        ),
        (
            "unready pod under AlwaysAllow skips even a negative budget",
            pod("Running", None),
            vec![foo(-1, 0, 2)],
            &[ALWAYS],
            always_allowed(),
        ),
        (
            "Ready Unknown is not ready",
            pod("Running", Some("Unknown")),
            vec![foo(0, 2, 2)],
            NOT_ALWAYS,
            healthy_budget(2, 2),
        ),
        (
            "unknown policy value behaves as IfHealthyBudget",
            pod("Running", Some("False")),
            vec![foo(0, 1, 2)],
            &[Some("Sometimes")],
            exhausted(1, 2),
        ),
        (
            "phase Unknown is checked against the budget",
            pod("Unknown", Some("True")),
            vec![foo(0, 1, 1)],
            ALL_POLICIES,
            exhausted(1, 1),
        ),
        (
            "no phase is checked against the budget",
            pod("", Some("True")),
            vec![foo(1, 1, 1)],
            ALL_POLICIES,
            allows(0),
        ),
        (
            "terminating beats everything but terminal",
            terminating(pod("Pending", None)),
            vec![foo(-1, 0, 0), pdb("bar", 0, 0, 0)],
            ALL_POLICIES,
            Outcome::PdbsIgnored(PdbsIgnoredBecause::Terminating),
        ),
        (
            "terminated and terminating",
            terminating(pod("Succeeded", None)),
            vec![foo(0, 0, 0)],
            ALL_POLICIES,
            terminal("Succeeded"),
        ),
    ];
    for (case, pod, pdbs, policies, want) in cases {
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

#[test]
fn responses_use_upstream_text() {
    let denied =
        |reason, message: &str, cause: Option<&str>, retry: Option<i32>, code| EvictionResponse {
            code,
            status: "Failure",
            reason,
            message: message.to_owned(),
            cause: cause.map(str::to_owned),
            retry_after_seconds: retry,
        };
    let success = EvictionResponse {
        code: 201,
        status: "Success",
        reason: None,
        message: String::new(),
        cause: None,
        retry_after_seconds: None,
    };
    let violate = "Cannot evict pod as it would violate the pod's disruption budget.";
    // (pod, pdbs, response, resourceVersion precondition)
    let cases = [
        (
            pod("Pending", None),
            vec![foo(0, 0, 0)],
            success.clone(),
            true,
        ),
        (
            terminating(pod("Running", None)),
            vec![foo(0, 0, 0)],
            success.clone(),
            false,
        ),
        (pod("Succeeded", None), vec![], success.clone(), false),
        (pod("Running", Some("True")), vec![], success.clone(), false),
        (
            pod("Running", Some("True")),
            vec![foo(1, 1, 1)],
            success.clone(),
            false,
        ),
        (
            pod("Running", Some("False")),
            vec![foo(0, 2, 2)],
            success.clone(),
            true,
        ),
        (
            pod("Running", Some("True")),
            vec![foo(0, 2, 2)],
            denied(
                Some("TooManyRequests"),
                violate,
                Some("The disruption budget foo needs 2 healthy pods and has 2 currently"),
                None,
                429,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![{
                let mut p = foo(1, 1, 1);
                p.metadata.generation = Some(1);
                p
            }],
            denied(
                Some("TooManyRequests"),
                violate,
                Some("The disruption budget foo is still being processed by the server."),
                Some(10),
                429,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![foo(-1, 0, 0)],
            denied(
                Some("Forbidden"),
                "poddisruptionbudget.policy \"foo\" is forbidden: pdb disruptions allowed is negative",
                None,
                None,
                403,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![with_status(foo(1, 0, 0), |s| {
                s.disrupted_pods = disrupted(2001)
            })],
            denied(
                Some("Forbidden"),
                "poddisruptionbudget.policy \"foo\" is forbidden: DisruptedPods map too big - too many evictions not confirmed by PDB controller",
                None,
                None,
                403,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![foo(1, 1, 1), pdb("bar", 1, 1, 1)],
            denied(
                None,
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                None,
                None,
                500,
            ),
            false,
        ),
    ];
    for (pod, pdbs, want, precondition) in cases {
        let decision = decide(&pod, &pdbs);
        assert_eq!(decision.response, want, "{:?}", decision.outcome);
        assert_eq!(
            decision.allowed(),
            want.code == 201,
            "{:?}",
            decision.outcome
        );
        assert_eq!(
            decision.resource_version_precondition, precondition,
            "{:?}",
            decision.outcome
        );
    }
}

#[test]
fn status_bodies() {
    let json = |pod: Pod, pdbs: Vec<PodDisruptionBudget>| {
        serde_json::to_value(decide(&pod, &pdbs).to_status()).unwrap()
    };
    assert_eq!(
        json(pod("Running", Some("True")), vec![foo(0, 3, 3)]),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": 429,
            "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget foo needs 3 healthy pods and has 3 currently"}]},
        })
    );
    assert_eq!(
        json(pod("Running", Some("True")), vec![foo(-1, 3, 3)]),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": "poddisruptionbudget.policy \"foo\" is forbidden: pdb disruptions allowed is negative",
            "details": {"group": "policy", "kind": "poddisruptionbudget", "name": "foo"},
        })
    );
    assert_eq!(
        json(pod("Running", Some("True")), vec![]),
        serde_json::json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201})
    );
}

#[test]
fn selecting_pdbs_keeps_order_and_filters() {
    let p = pod("Running", Some("True"));
    let pdbs = [
        foo(0, 0, 0),
        with_selector(pdb("nil", 0, 0, 0), None),
        with_selector(pdb("all", 0, 0, 0), Some(LabelSelector::default())),
    ];
    let names: Vec<_> = selecting_pdbs(&p, &pdbs)
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["foo", "all"]);
    assert!(!selects(&pdbs[1], &p));
}
