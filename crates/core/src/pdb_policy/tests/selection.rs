//! Which policy is in force where: precedence, then name; an invalid one nowhere; defaulting
//! against enforcing.

use super::*;

#[test]
fn precedence_then_name_decides_between_policies() {
    let everywhere = policy("everywhere", 0, None);
    let payments = policy("payments", 10, Some("payments"));
    let also_payments = policy("also-payments", 10, Some("payments"));
    let all = [everywhere.clone(), payments.clone(), also_payments.clone()];
    // (namespace labels, policy in force)
    let cases: &[(&[(&str, &str)], Option<&str>)] = &[
        (&[("team", "web")], Some("everywhere")),
        (&[], Some("everywhere")),
        // Equal precedence: the name that sorts first.
        (&[("team", "payments")], Some("also-payments")),
    ];
    for (ns_labels, want) in cases {
        let got = policy_for_namespace(&all, &labels(ns_labels));
        assert_eq!(
            got.and_then(|p| p.metadata.name.as_deref()),
            *want,
            "{ns_labels:?}"
        );
    }
    assert!(policy_for_namespace(&[payments], &labels(&[("team", "web")])).is_none());
}

#[test]
fn invalid_policies_are_in_force_nowhere() {
    let mut bad_selector = policy("bad", 100, None);
    bad_selector.spec.namespace_selector = Some(LabelSelector {
        match_labels: Some(labels(&[("team", "not valid!")])),
        ..Default::default()
    });
    let mut bad_condition = policy("bad-condition", 100, None);
    bad_condition.spec.eviction = Some(StricterEviction {
        required_pod_conditions: vec!["no spaces allowed".into()],
        ..Default::default()
    });
    assert!(matches!(
        validate(&bad_selector).unwrap_err()[0],
        PolicyError::NamespaceSelector(_)
    ));
    assert!(matches!(
        validate(&bad_condition).unwrap_err()[0],
        PolicyError::ConditionType { index: 0, .. }
    ));
    let fallback = policy("fallback", 0, None);
    let all = [bad_selector, bad_condition, fallback];
    let got = policy_for_namespace(&all, &labels(&[("team", "x")]));
    assert_eq!(
        got.and_then(|p| p.metadata.name.as_deref()),
        Some("fallback")
    );
}

#[test]
fn defaulting_versus_enforcing() {
    use PolicyMode::*;
    use UnhealthyPodEvictionPolicyType::*;
    // (mode, policy's value, PDB's value, value written)
    let cases = [
        (Default, Some(AlwaysAllow), None, Some(AlwaysAllow)),
        (Default, Some(AlwaysAllow), Some("IfHealthyBudget"), None),
        (Default, None, None, None),
        (
            Enforce,
            Some(AlwaysAllow),
            Some("IfHealthyBudget"),
            Some(AlwaysAllow),
        ),
        (Enforce, Some(AlwaysAllow), Some("AlwaysAllow"), None),
        (Enforce, Some(IfHealthyBudget), None, Some(IfHealthyBudget)),
        (Enforce, None, Some("IfHealthyBudget"), None),
    ];
    for (mode, wanted, current, expected) in cases {
        let mut p = policy("p", 0, None);
        p.spec.mode = mode;
        p.spec.unhealthy_pod_eviction_policy = wanted;
        let mut budget = pdb("b", Some("web"), int(1), None);
        budget.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = current.map(String::from);
        assert_eq!(
            unhealthy_pod_eviction_policy_to_set(&budget, &p),
            expected,
            "{mode:?} {wanted:?} {current:?}"
        );
    }
}
