use super::*;

/// Upstream `eviction_test.go`: TestEviction, TestEvictionIgnorePDB (the first decision of each
/// row; the conflict retries around it are the apiserver's) and TestEvictionPDBStatus.
#[test]
fn upstream_cases() {
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
    ];
    check(cases);
}
