//! Budgets against the policy in force: existing budgets' conformance, refusals and their
//! reports, the checks of each mode, overlapping budgets.

use super::*;

#[test]
fn conformance_of_existing_budgets() {
    use Conformance::*;
    use PolicyMode::*;
    use UnhealthyPodEvictionPolicyType::*;
    let before = |value: Option<&str>| BeforeEnforcement(value.map(String::from));
    let set = |value, record: Option<Option<&str>>| Set {
        value,
        record: record.map(before),
    };
    // (case, policy in force: (mode, its value), PDB's value, its record (annotation value),
    //  PDB being deleted, conformance)
    let cases = [
        (
            "Enforce sets a differing value, recording it",
            Some((Enforce, Some(AlwaysAllow))),
            Some("IfHealthyBudget"),
            None,
            false,
            set(AlwaysAllow, Some(Some("IfHealthyBudget"))),
        ),
        (
            "Enforce sets an unset field, recording it unset",
            Some((Enforce, Some(AlwaysAllow))),
            None,
            None,
            false,
            set(AlwaysAllow, Some(None)),
        ),
        (
            "Enforce keeps the record of an earlier Enforce policy",
            Some((Enforce, Some(IfHealthyBudget))),
            Some("AlwaysAllow"),
            Some(""),
            false,
            set(IfHealthyBudget, None),
        ),
        (
            "Enforce, already the value",
            Some((Enforce, Some(AlwaysAllow))),
            Some("AlwaysAllow"),
            None,
            false,
            Conforms,
        ),
        (
            "Enforce, already the value it set: the record stays",
            Some((Enforce, Some(AlwaysAllow))),
            Some("AlwaysAllow"),
            Some("IfHealthyBudget"),
            false,
            Conforms,
        ),
        (
            "Enforce leaves a PDB being deleted alone",
            Some((Enforce, Some(IfHealthyBudget))),
            Some("AlwaysAllow"),
            None,
            true,
            Differs(IfHealthyBudget),
        ),
        (
            "a policy without a value conforms all",
            Some((Enforce, None)),
            Some("IfHealthyBudget"),
            None,
            false,
            Conforms,
        ),
        (
            "a policy without a value enforces nothing: restore",
            Some((Enforce, None)),
            Some("AlwaysAllow"),
            Some("IfHealthyBudget"),
            false,
            Restore(before(Some("IfHealthyBudget"))),
        ),
        (
            "Default reports an unset field",
            Some((Default, Some(AlwaysAllow))),
            None,
            None,
            false,
            Differs(AlwaysAllow),
        ),
        (
            "Default keeps the PDB's own choice",
            Some((Default, Some(AlwaysAllow))),
            Some("IfHealthyBudget"),
            None,
            false,
            Conforms,
        ),
        (
            "switched to Default: restore",
            Some((Default, Some(AlwaysAllow))),
            Some("AlwaysAllow"),
            Some("IfHealthyBudget"),
            false,
            Restore(before(Some("IfHealthyBudget"))),
        ),
        (
            "no policy, never enforced: left alone",
            None,
            Some("AlwaysAllow"),
            None,
            false,
            Conforms,
        ),
        (
            "no policy any more: restore the value",
            None,
            Some("AlwaysAllow"),
            Some("IfHealthyBudget"),
            false,
            Restore(before(Some("IfHealthyBudget"))),
        ),
        (
            "no policy any more: restore unset",
            None,
            Some("AlwaysAllow"),
            Some(""),
            false,
            Restore(before(None)),
        ),
        (
            "no policy, changed since: the record is put back all the same",
            None,
            Some("IfHealthyBudget"),
            Some("IfHealthyBudget"),
            false,
            Restore(before(Some("IfHealthyBudget"))),
        ),
        (
            "no policy, being deleted: left alone",
            None,
            Some("AlwaysAllow"),
            Some(""),
            true,
            Conforms,
        ),
    ];
    for (case, in_force, current, record, deleting, expected) in cases {
        let p = in_force.map(|(mode, wanted)| {
            let mut p = policy("p", 0, None);
            p.spec.mode = mode;
            p.spec.unhealthy_pod_eviction_policy = wanted;
            p
        });
        let mut budget = pdb("b", Some("web"), int(1), None);
        budget.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = current.map(String::from);
        if let Some(record) = record {
            budget.metadata.annotations = Some(labels(&[(
                evictkit_api::keys::UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT,
                record,
            )]));
        }
        if deleting {
            budget.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        }
        assert_eq!(conformance(&budget, p.as_ref()), expected, "{case}");
    }
}

#[test]
fn refusals_are_spaced_and_reported_when_new() {
    use UnhealthyPodEvictionPolicyType::*;
    let set = |value| Conformance::Set {
        value,
        record: Some(BeforeEnforcement(None)),
    };
    let refused = |write, error: &str, failures| Refusal {
        write,
        error: error.to_owned(),
        failures,
    };
    let denied = "admission policy denied the request";
    // (case, refusal before, write refused now, its error, failures after, news, delay in s)
    let cases = [
        (
            "the first refusal",
            None,
            set(AlwaysAllow),
            denied,
            1,
            true,
            5,
        ),
        (
            "the same again: no Event, twice the wait",
            Some(refused(set(AlwaysAllow), denied, 1)),
            set(AlwaysAllow),
            denied,
            2,
            false,
            10,
        ),
        (
            "another error: an Event, the back-off goes on",
            Some(refused(set(AlwaysAllow), denied, 2)),
            set(AlwaysAllow),
            "forbidden",
            3,
            true,
            20,
        ),
        (
            "capped at 5 minutes",
            Some(refused(set(AlwaysAllow), denied, 12)),
            set(AlwaysAllow),
            denied,
            13,
            false,
            300,
        ),
        (
            "another write starts afresh",
            Some(refused(set(AlwaysAllow), denied, 6)),
            Conformance::Restore(BeforeEnforcement(None)),
            denied,
            1,
            true,
            5,
        ),
        (
            "another value starts afresh",
            Some(refused(set(AlwaysAllow), denied, 6)),
            set(IfHealthyBudget),
            denied,
            1,
            true,
            5,
        ),
    ];
    for (case, previous, write, error, failures, news, delay) in cases {
        let (refusal, reported) = Refusal::after(previous.as_ref(), &write, error);
        assert_eq!(
            (refusal.failures, reported, refusal.delay()),
            (failures, news, std::time::Duration::from_secs(delay)),
            "{case}"
        );
        assert_eq!(
            (refusal.write, refusal.error.as_str()),
            (write, error),
            "{case}"
        );
    }
}

#[test]
fn budget_checks_in_each_mode() {
    let pods = [
        pod("web-1", "web", &["Ready"]),
        pod("web-2", "web", &["Ready"]),
    ];
    let others = [pdb("other", Some("web"), int(1), None)];
    // (pdb, other PDBs, rules found)
    let cases: Vec<(PodDisruptionBudget, &[PodDisruptionBudget], Vec<Rule>)> = vec![
        (pdb("fine", Some("web"), int(1), None), &[], vec![]),
        (pdb("fine-max", Some("web"), None, int(1)), &[], vec![]),
        (
            pdb("overlap", Some("web"), int(1), None),
            &others,
            vec![Rule::OverlappingBudgets],
        ),
        (
            pdb("max0", Some("web"), None, int(0)),
            &[],
            vec![Rule::NeverAllowsDisruption],
        ),
        (
            pdb("max0pct", Some("web"), None, pct("0%")),
            &[],
            vec![Rule::NeverAllowsDisruption],
        ),
        (
            pdb("min100", Some("web"), pct("100%"), None),
            &[],
            vec![Rule::NeverAllowsDisruption],
        ),
        (
            pdb("min-all", Some("web"), int(2), None),
            &[],
            vec![Rule::NeverAllowsDisruption],
        ),
        (
            pdb("min-more", Some("web"), int(5), None),
            &[],
            vec![Rule::NeverAllowsDisruption],
        ),
        (pdb("min-50pct", Some("web"), pct("50%"), None), &[], vec![]),
        (
            pdb("empty", Some("db"), int(1), None),
            &[],
            vec![Rule::SelectsNoPods],
        ),
        // A minAvailable above zero pods is the empty finding, not also a blocking one.
        (
            pdb("nil", None, int(1), None),
            &[],
            vec![Rule::SelectsNoPods],
        ),
    ];
    for action in [CheckAction::Deny, CheckAction::Warn, CheckAction::Allow] {
        let mut p = policy("p", 0, None);
        p.spec.overlapping_budgets = action;
        p.spec.budgets_never_allowing_disruption = action;
        p.spec.budgets_selecting_no_pods = action;
        for (budget, other_pdbs, rules) in &cases {
            let findings = check_budget(budget, other_pdbs, &pods, &p);
            let got: Vec<Rule> = findings.iter().map(|f| f.rule).collect();
            let want: &[Rule] = if action == CheckAction::Allow {
                &[]
            } else {
                rules
            };
            assert_eq!(got, want, "{:?} {action:?}", budget.metadata.name);
            assert!(findings.iter().all(|f| f.action == action));
        }
    }
}

#[test]
fn overlap_messages_name_both_budgets_and_the_reason() {
    let p = policy("p", 0, None);
    let same_selector = check_budget(
        &pdb("a", Some("db"), int(1), None),
        &[pdb("b", Some("db"), int(1), None)],
        &[] as &[Pod],
        &p,
    );
    assert_eq!(same_selector[0].rule, Rule::OverlappingBudgets);
    assert!(
        same_selector[0]
            .message
            .contains("ns/a overlaps b: both have the same selector"),
        "{}",
        same_selector[0].message
    );
    let shared_pod = check_budget(
        &pdb("a", Some("web"), int(1), None),
        &[pdb("b", Some("web"), int(1), None)],
        &[pod("web-1", "web", &["Ready"])],
        &p,
    );
    assert!(
        shared_pod[0].message.contains("both select pod web-1"),
        "{}",
        shared_pod[0].message
    );
    // An update of the PDB itself is no overlap with its stored self.
    let two = [
        pod("web-1", "web", &["Ready"]),
        pod("web-2", "web", &["Ready"]),
    ];
    assert!(
        check_budget(
            &pdb("a", Some("web"), int(1), None),
            &[pdb("a", Some("web"), int(1), None)],
            &two,
            &p
        )
        .is_empty()
    );
}
