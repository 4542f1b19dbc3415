//! `explain`: what the apiserver would answer and what would change it.

use super::*;

#[test]
fn explain_predicts_the_apiserver_and_says_what_would_change_it() {
    let ready = &["Ready"][..];
    let terminating = |mut p: Pod| {
        p.metadata.deletion_timestamp = Some(Time("2025-01-01T00:00:00Z".parse().unwrap()));
        p
    };
    let mut stale = with_status(pdb("web", Some("web"), None, int(1)), 0, 0, 0);
    stale.metadata.generation = Some(2);
    let mut always_policy = policy("defaults", 0, None);
    always_policy.spec.unhealthy_pod_eviction_policy =
        Some(UnhealthyPodEvictionPolicyType::AlwaysAllow);
    // (case, pod, PDBs, policy, code, outcome, advice fragment)
    let cases: Vec<(
        &str,
        Pod,
        Vec<PodDisruptionBudget>,
        Option<&PodDisruptionBudgetPolicy>,
        u16,
        &str,
        Option<&str>,
    )> = vec![
        (
            "no PDB",
            pod("s", "web", ready),
            vec![],
            None,
            201,
            "NoPdb",
            None,
        ),
        (
            "budget allows",
            pod("s", "web", ready),
            vec![with_status(pdb("web", Some("web"), int(1), None), 1, 2, 1)],
            None,
            201,
            "BudgetAllows",
            Some("disruptionsAllowed becomes 0"),
        ),
        (
            "budget exhausted, Ready",
            pod("s", "web", ready),
            vec![with_status(pdb("web", Some("web"), int(2), None), 0, 2, 2)],
            None,
            429,
            "NoDisruptionsAllowed",
            Some("needs 1 more healthy pod (PDB web: currentHealthy 2, desiredHealthy 2)"),
        ),
        (
            "budget exhausted, not Ready",
            pod("s", "web", &[]),
            vec![with_status(pdb("web", Some("web"), int(3), None), 0, 2, 3)],
            None,
            429,
            "NoDisruptionsAllowed",
            Some("set unhealthyPodEvictionPolicy: AlwaysAllow on PDB web"),
        ),
        (
            "the policy would default AlwaysAllow",
            pod("s", "web", &[]),
            vec![with_status(pdb("web", Some("web"), int(3), None), 0, 2, 3)],
            Some(&always_policy),
            429,
            "NoDisruptionsAllowed",
            Some("policy defaults sets unhealthyPodEvictionPolicy: AlwaysAllow on PDB web"),
        ),
        (
            "two PDBs",
            pod("s", "web", ready),
            vec![
                pdb("a", Some("web"), int(1), None),
                pdb("b", Some("web"), int(1), None),
            ],
            None,
            500,
            "MultiplePdbs",
            Some("two PDBs select this pod: a, b"),
        ),
        (
            "stale status",
            pod("s", "web", ready),
            vec![stale],
            None,
            429,
            "BudgetNotObserved",
            Some("has not observed generation 2 of PDB web (observedGeneration 1)"),
        ),
        (
            "terminating",
            terminating(pod("s", "web", ready)),
            vec![
                pdb("a", Some("web"), int(1), None),
                pdb("b", Some("web"), int(1), None),
            ],
            None,
            201,
            "PdbsIgnoredTerminating",
            None,
        ),
    ];
    for (case, subject, pdbs, p, code, outcome, advice) in cases {
        let pods = [subject.clone()];
        let explained = explain(&subject, &pdbs, &pods, p, &at_now());
        assert_eq!(explained.prediction.code, code, "{case}");
        assert_eq!(explained.prediction.decided_by, "apiserver", "{case}");
        assert_eq!(explained.outcome, outcome, "{case}");
        assert_eq!(
            explained.prediction.message,
            eviction::decide(&subject, &pdbs).response.message,
            "{case}"
        );
        if let Some(fragment) = advice {
            assert!(
                explained.advice.iter().any(|a| a.contains(fragment)),
                "{case}: {:?}",
                explained.advice
            );
        } else {
            assert!(
                explained.advice.is_empty(),
                "{case}: {:?}",
                explained.advice
            );
        }
    }
}

#[test]
fn the_apiserver_wraps_only_a_webhook_denial() {
    let prediction = |decided_by, message: &str| Prediction {
        code: 429,
        decided_by,
        message: message.into(),
        cause: None,
    };
    let cases = [
        (
            prediction(
                "apiserver",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
            "Cannot evict pod as it would violate the pod's disruption budget.",
        ),
        (
            prediction(
                "webhook",
                "pdb-policy-webhook: rule RequiredPodConditions of PodDisruptionBudgetPolicy p: x",
            ),
            "admission webhook \"validate-eviction.pdb-policy-webhook.evictkit.io\" denied the request: pdb-policy-webhook: rule RequiredPodConditions of PodDisruptionBudgetPolicy p: x",
        ),
    ];
    for (prediction, expected) in cases {
        assert_eq!(
            message_through_apiserver(
                &prediction,
                "validate-eviction.pdb-policy-webhook.evictkit.io"
            ),
            expected
        );
    }
}
