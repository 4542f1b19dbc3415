use super::*;

/// The remaining branches of `eviction.go`: PDB selection, several PDBs, and
/// `checkAndDecrement`'s checks in their order.
#[test]
fn budget_checks() {
    let cases: Vec<Row> = vec![
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
        // KEP-3017: a client that meets a policy it does not know disallows evicting
        // unhealthy pods, whatever the budget says.
        (
            "unknown policy value, unready pod, healthy budget: not evicted",
            pod("Running", Some("False")),
            vec![foo(0, 3, 2)],
            &[Some("Sometimes")],
            unrecognized("Sometimes"),
        ),
        (
            "unknown policy value, unready pod, budget left: not evicted",
            pod("Running", None),
            vec![foo(2, 1, 2)],
            &[Some("Sometimes")],
            unrecognized("Sometimes"),
        ),
        (
            "unknown policy value, ready pod: the budget decides",
            pod("Running", Some("True")),
            vec![foo(1, 3, 2)],
            &[Some("Sometimes")],
            allows(0),
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
    check(cases);
}
