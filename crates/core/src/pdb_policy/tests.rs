//! Table tests: one tuple a case.
#![allow(clippy::type_complexity)]

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use evictkit_api::{PodDisruptionBudgetPolicySpec, StricterEviction};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, EmptyDirVolumeSource, EphemeralVolumeSource, HostPathVolumeSource,
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod, PodCondition, PodSpec, PodStatus,
    Volume, VolumeNodeAffinity,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn policy(name: &str, precedence: i32, team: Option<&str>) -> PodDisruptionBudgetPolicy {
    PodDisruptionBudgetPolicy {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: PodDisruptionBudgetPolicySpec {
            namespace_selector: team.map(|team| LabelSelector {
                match_labels: Some(labels(&[("team", team)])),
                ..Default::default()
            }),
            precedence,
            ..Default::default()
        },
        status: None,
    }
}

/// A pod `name` labelled `app=<app>` in `ns`, Running, with the given condition types True.
fn pod(name: &str, app: &str, true_conditions: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: Some(labels(&[("app", app)])),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(
                true_conditions
                    .iter()
                    .map(|kind| PodCondition {
                        type_: kind.to_string(),
                        status: "True".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

fn with_volume(mut pod: Pod, volume: Volume) -> Pod {
    pod.spec.get_or_insert_default().volumes = Some(vec![volume]);
    pod
}

fn pdb(
    name: &str,
    app: Option<&str>,
    min: Option<IntOrString>,
    max: Option<IntOrString>,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            generation: Some(1),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: app.map(|app| LabelSelector {
                match_labels: Some(labels(&[("app", app)])),
                ..Default::default()
            }),
            min_available: min,
            max_unavailable: max,
            unhealthy_pod_eviction_policy: None,
        }),
        status: None,
    }
}

fn with_status(
    mut pdb: PodDisruptionBudget,
    allowed: i32,
    current: i32,
    desired: i32,
) -> PodDisruptionBudget {
    pdb.status = Some(PodDisruptionBudgetStatus {
        disruptions_allowed: Some(allowed),
        current_healthy: Some(current),
        desired_healthy: Some(desired),
        expected_pods: Some(current),
        observed_generation: Some(1),
        ..Default::default()
    });
    pdb
}

fn int(n: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(n))
}

fn pct(s: &str) -> Option<IntOrString> {
    Some(IntOrString::String(s.into()))
}

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

fn at_now() -> Circumstances {
    Circumstances::at(Timestamp::now())
}

/// `pdb` with `status.disruptedPods` naming `pods`, each evicted `ago` before now.
fn with_disrupted(
    mut pdb: PodDisruptionBudget,
    pods: &[(&str, jiff::SignedDuration)],
    now: Timestamp,
) -> PodDisruptionBudget {
    let status = pdb.status.get_or_insert_default();
    status.disrupted_pods = Some(
        pods.iter()
            .map(|(name, ago)| (name.to_string(), Time(now - *ago)))
            .collect(),
    );
    pdb
}

fn claim_volume(name: &str, claim: &str) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: None,
        }),
        ..Default::default()
    }
}

fn strict_policy(conditions: &[&str], local_storage: bool) -> PodDisruptionBudgetPolicy {
    let mut p = policy("strict", 0, None);
    p.spec.eviction = Some(StricterEviction {
        required_pod_conditions: conditions.iter().map(|c| c.to_string()).collect(),
        protect_unhealthy_pods_with_local_storage: local_storage,
    });
    p
}

#[test]
fn stricter_eviction_rules() {
    let synced = &["Ready", "example.com/Synced"][..];
    let ready = &["Ready"][..];
    let empty_dir = Volume {
        name: "data".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let memory = Volume {
        name: "cache".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let always = |mut b: PodDisruptionBudget| {
        b.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
        b
    };
    // (case, subject, its app's other pods, PDB, policy, denying rule)
    let cases: Vec<(
        &str,
        Pod,
        Vec<Pod>,
        PodDisruptionBudget,
        PodDisruptionBudgetPolicy,
        Option<Rule>,
    )> = vec![
        (
            "budget allows and two stay fully healthy",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
        (
            "budget allows by Ready but one peer is not Synced",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "evicting a not-Synced pod costs no strict health",
            pod("s", "web", ready),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
        (
            "unhealthy pod under IfHealthyBudget with too few strictly healthy peers",
            pod("s", "web", &[]),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 0, 2, 2),
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "AlwaysAllow lets unhealthy pods go whatever the strict count",
            pod("s", "web", &[]),
            vec![pod("a", "web", ready)],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
        (
            "unhealthy pod with an emptyDir is protected",
            with_volume(pod("s", "web", &[]), empty_dir.clone()),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            Some(Rule::ProtectUnhealthyPodsWithLocalStorage),
        ),
        (
            "a memory emptyDir is not local storage",
            with_volume(pod("s", "web", &[]), memory),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            None,
        ),
        (
            "a Ready pod with local storage is the budget's business",
            with_volume(pod("s", "web", ready), empty_dir.clone()),
            vec![],
            with_status(pdb("web", Some("web"), int(1), None), 1, 2, 1),
            strict_policy(&[], true),
            None,
        ),
        // The budget's counters here may be behind the apiserver's, which may allow
        // the eviction; the rules must hold whatever the counters say.
        (
            "a budget exhausted in this copy still protects an unhealthy pod's local data",
            with_volume(pod("s", "web", &[]), empty_dir),
            vec![],
            with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2),
            strict_policy(&["example.com/Synced"], true),
            Some(Rule::ProtectUnhealthyPodsWithLocalStorage),
        ),
        (
            "a budget exhausted in this copy still counts strict health",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 0, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "a budget not yet observed in this copy still counts strict health",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            {
                let mut b = with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2);
                b.metadata.generation = Some(2);
                b
            },
            strict_policy(&["example.com/Synced"], false),
            Some(Rule::RequiredPodConditions),
        ),
        (
            "PDBs do not apply to a terminating pod: nothing to add",
            {
                let mut s = pod("s", "web", synced);
                s.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
                s
            },
            vec![pod("a", "web", ready)],
            with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2),
            strict_policy(&["example.com/Synced"], false),
            None,
        ),
    ];
    for (case, subject, mut pods, budget, p, want) in cases {
        pods.push(subject.clone());
        let pdbs = [budget];
        let decision = eviction::decide(&subject, &pdbs);
        let refs: Vec<&Pod> = pods.iter().collect();
        let got = stricter_eviction(&subject, &decision, &pdbs, &refs, &p, &at_now());
        assert_eq!(got.as_ref().map(|d| d.rule), want, "{case}: {got:?}");
        if let Some(denial) = got {
            assert!(
                denial.message.starts_with(&format!(
                    "pdb-policy-webhook: rule {} of PodDisruptionBudgetPolicy strict: ",
                    denial.rule.as_str()
                )),
                "{case}: {}",
                denial.message
            );
            let explained = explain(&subject, &pdbs, &pods, Some(&p), &at_now());
            assert_eq!(
                (explained.prediction.code, explained.prediction.decided_by),
                (429, "webhook"),
                "{case}"
            );
            assert_eq!(explained.prediction.message, denial.message, "{case}");
        }
    }
}

/// The strict count counts like the disruption controller (`countHealthyPods`): a pod in the
/// PDB's `status.disruptedPods` for less than two minutes is on its way out, not healthy. And a
/// claim bound to a node-local PersistentVolume is local storage (KEP-3017's own example).
#[test]
fn stricter_eviction_counts_disrupted_pods_and_follows_claims() {
    let synced = &["Ready", "example.com/Synced"][..];
    let now = Timestamp::now();
    let seconds = jiff::SignedDuration::from_secs;
    let budget = || with_status(pdb("web", Some("web"), int(2), None), 1, 3, 2);
    let always = |mut b: PodDisruptionBudget| {
        b.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
        b
    };
    let with_claim = |pod: Pod| with_volume(pod, claim_volume("data", "data-s"));
    // (case, subject, its app's other pods, PDB, policy, node-local claim volumes, denying rule)
    let cases: Vec<(
        &str,
        Pod,
        Vec<Pod>,
        PodDisruptionBudget,
        PodDisruptionBudgetPolicy,
        &[&str],
        Option<Rule>,
    )> = vec![
        (
            "a peer evicted 10 s ago (disruptedPods) is not healthy",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_disrupted(budget(), &[("a", seconds(10))], now),
            strict_policy(&["example.com/Synced"], false),
            &[],
            Some(Rule::RequiredPodConditions),
        ),
        (
            "a disruptedPods entry older than the disruption controller's 2 min counts again",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_disrupted(budget(), &[("a", seconds(180))], now),
            strict_policy(&["example.com/Synced"], false),
            &[],
            None,
        ),
        (
            "the subject already in disruptedPods is not taken away twice",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            with_disrupted(budget(), &[("s", seconds(10))], now),
            strict_policy(&["example.com/Synced"], false),
            &[],
            None,
        ),
        (
            "unhealthy pod whose claim is bound to a node-local PV is protected",
            with_claim(pod("s", "web", &[])),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            &["data"],
            Some(Rule::ProtectUnhealthyPodsWithLocalStorage),
        ),
        (
            "a claim on network storage is not local",
            with_claim(pod("s", "web", &[])),
            vec![],
            always(with_status(pdb("web", Some("web"), int(2), None), 0, 1, 2)),
            strict_policy(&[], true),
            &[],
            None,
        ),
    ];
    for (case, subject, mut pods, budget, p, local, want) in cases {
        pods.push(subject.clone());
        let pdbs = [budget];
        let decision = eviction::decide(&subject, &pdbs);
        let circumstances = Circumstances {
            node_local_claims: local.iter().map(|v| v.to_string()).collect(),
            ..Circumstances::at(now)
        };
        let refs: Vec<&Pod> = pods.iter().collect();
        let got = stricter_eviction(&subject, &decision, &pdbs, &refs, &p, &circumstances);
        assert_eq!(got.as_ref().map(|d| d.rule), want, "{case}: {got:?}");
        if let Some(denial) = got
            && denial.rule == Rule::ProtectUnhealthyPodsWithLocalStorage
        {
            assert!(
                denial.message.contains("\"data\""),
                "{case}: {}",
                denial.message
            );
        }
    }
}

#[test]
fn node_local_persistent_volumes() {
    let on_node = |key: &str| VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: key.into(),
                    operator: "In".into(),
                    values: Some(vec!["node-1".into()]),
                }]),
                match_fields: None,
            }],
        }),
    };
    let pv = |spec: PersistentVolumeSpec| PersistentVolume {
        spec: Some(spec),
        ..Default::default()
    };
    let host_path = || {
        Some(HostPathVolumeSource {
            path: "/mnt/data".into(),
            type_: None,
        })
    };
    // (case, PV, node-local)
    let cases = vec![
        (
            "local PV (the KEP's example)",
            pv(PersistentVolumeSpec {
                local: Some(LocalVolumeSource {
                    path: "/mnt/disks/ssd1".into(),
                    fs_type: None,
                }),
                node_affinity: Some(on_node("kubernetes.io/hostname")),
                ..Default::default()
            }),
            true,
        ),
        (
            "hostPath PV pinned to a node by required node affinity",
            pv(PersistentVolumeSpec {
                host_path: host_path(),
                node_affinity: Some(on_node("kubernetes.io/hostname")),
                ..Default::default()
            }),
            true,
        ),
        (
            "hostPath PV without node affinity (single-node test clusters)",
            pv(PersistentVolumeSpec {
                host_path: host_path(),
                ..Default::default()
            }),
            false,
        ),
        (
            "CSI PV with a zonal node affinity is network storage",
            pv(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: "ebs.csi.aws.com".into(),
                    volume_handle: "vol-1".into(),
                    ..Default::default()
                }),
                node_affinity: Some(on_node("topology.kubernetes.io/zone")),
                ..Default::default()
            }),
            false,
        ),
        ("PV without spec", PersistentVolume::default(), false),
    ];
    for (case, volume, want) in cases {
        assert_eq!(is_node_local(&volume), want, "{case}");
    }
}

#[test]
fn claim_volumes_name_each_claim() {
    let mut subject = pod("s", "web", &[]);
    subject.spec.get_or_insert_default().volumes = Some(vec![
        claim_volume("data", "data-s"),
        Volume {
            name: "scratch".into(),
            ephemeral: Some(EphemeralVolumeSource::default()),
            ..Default::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ]);
    // A generic ephemeral volume's claim is named <pod>-<volume> by the ephemeral volume
    // controller.
    assert_eq!(
        claim_volumes(&subject),
        vec![
            ("data", "data-s".to_owned()),
            ("scratch", "s-scratch".to_owned())
        ]
    );
}

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

/// The eviction webhook decides from its caches, and reads fresh only what a watch
/// delay could have wrong in a way that turns an allow into a denial.
#[test]
fn fresh_reads_only_where_a_stale_cache_could_allow() {
    let synced = &["Ready", "example.com/Synced"][..];
    let ready = &["Ready"][..];
    let empty_dir = Volume {
        name: "data".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let pending = |mut p: Pod| {
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        p
    };
    let budget = |desired: i32| with_status(pdb("web", Some("web"), int(1), None), 1, 3, desired);
    let web = || FreshRead::Pdb("web".into());
    // (case, subject, its app's other pods, desiredHealthy, policy, reads)
    let cases: Vec<(
        &str,
        Pod,
        Vec<Pod>,
        i32,
        PodDisruptionBudgetPolicy,
        Vec<FreshRead>,
    )> = vec![
        (
            "a pod to spare",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            1,
            strict_policy(&["example.com/Synced"], false),
            vec![],
        ),
        (
            "no pod to spare: one eviction not seen yet flips it",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![web()],
        ),
        (
            "no pod to spare, the pod not strictly healthy here: whether it is by now does not change the count",
            pod("s", "web", ready),
            vec![pod("a", "web", synced), pod("b", "web", synced)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![web()],
        ),
        (
            "nothing to spare and nothing counted (minAvailable 0, as a drain): no eviction a stale cache misses can lower the count",
            pod("s", "web", ready),
            vec![pod("a", "web", ready), pod("b", "web", ready)],
            0,
            strict_policy(&["example.com/Synced"], false),
            vec![],
        ),
        (
            "denied already: a stale denial costs a retry only",
            pod("s", "web", synced),
            vec![pod("a", "web", synced), pod("b", "web", ready)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![],
        ),
        (
            "cached Pending: its PDBs ignored, it may run by now",
            pending(pod("s", "web", synced)),
            vec![pod("a", "web", ready)],
            2,
            strict_policy(&["example.com/Synced"], false),
            vec![FreshRead::Pod],
        ),
        (
            "Ready with local storage under protection: it may not be Ready by now",
            with_volume(pod("s", "web", ready), empty_dir.clone()),
            vec![pod("a", "web", ready)],
            1,
            strict_policy(&[], true),
            vec![FreshRead::Pod],
        ),
        (
            "Ready with local storage, not protected",
            with_volume(pod("s", "web", ready), empty_dir),
            vec![pod("a", "web", ready)],
            1,
            strict_policy(&[], false),
            vec![],
        ),
    ];
    for (case, subject, mut pods, desired, p, want) in cases {
        pods.push(subject.clone());
        let pdbs = [budget(desired)];
        let decision = eviction::decide(&subject, &pdbs);
        let refs: Vec<&Pod> = pods.iter().collect();
        let got = fresh_reads(&subject, &decision, &pdbs, &refs, &p, &at_now());
        assert_eq!(got, want, "{case}");
    }
}

fn with_uid(mut pod: Pod, uid: &str) -> Pod {
    pod.metadata.uid = Some(uid.into());
    pod
}

/// An allowed eviction is held until the pod is seen going, or for the hold.
#[test]
fn allowed_evictions_are_held_until_the_pod_is_seen_going() {
    let now = Timestamp::now();
    let subject = with_uid(pod("s", "web", &["Ready"]), "1");
    let terminating = {
        let mut p = subject.clone();
        p.metadata.deletion_timestamp = Some(Time(now));
        p
    };
    let budget = with_status(pdb("web", Some("web"), int(1), None), 1, 2, 1);
    let second = jiff::SignedDuration::from_secs(1);
    // (case, the pod as the decision sees it, its PDB, time since the allow, still held)
    let cases: Vec<(
        &str,
        Option<Pod>,
        PodDisruptionBudget,
        jiff::SignedDuration,
        bool,
    )> = vec![
        (
            "still there",
            Some(subject.clone()),
            budget.clone(),
            second,
            true,
        ),
        (
            "terminating",
            Some(terminating),
            budget.clone(),
            second,
            false,
        ),
        ("gone", None, budget.clone(), second, false),
        (
            "another pod under its name",
            Some(with_uid(subject.clone(), "2")),
            budget.clone(),
            second,
            false,
        ),
        (
            "in the PDB's disruptedPods",
            Some(subject.clone()),
            with_disrupted(budget.clone(), &[("s", second)], now),
            second,
            false,
        ),
        (
            "held as long as the hold",
            Some(subject.clone()),
            budget.clone(),
            ALLOWED_EVICTION_HOLD - second,
            true,
        ),
        (
            "past the hold: the apiserver refused it after the webhook",
            Some(subject.clone()),
            budget,
            ALLOWED_EVICTION_HOLD,
            false,
        ),
    ];
    for (case, seen, budget, since, held) in cases {
        let mut allowed = AllowedEvictions::default();
        allowed.allowed(&subject, now - since);
        let pods: Vec<&Pod> = seen.iter().collect();
        let pdbs = [budget];
        assert_eq!(
            allowed.not_seen("other", &pods, &pdbs, now),
            BTreeSet::new(),
            "{case}: another namespace"
        );
        let want: BTreeSet<String> = held.then(|| "s".to_owned()).into_iter().collect();
        assert_eq!(allowed.not_seen("ns", &pods, &pdbs, now), want, "{case}");
        // Released once is released for good.
        assert_eq!(allowed.not_seen("ns", &pods, &pdbs, now), want, "{case}");
    }
}

/// Reviews decided one after the other on the same snapshot of a
/// PDB that spares k pods (minAvailable n-k) allow exactly k once the allowed are held; the
/// pod of a held allow asked again is allowed again without taking a second place.
#[test]
fn the_strict_count_takes_held_allows_as_gone() {
    let synced = &["Ready", "example.com/Synced"][..];
    let policy = strict_policy(&["example.com/Synced"], false);
    let pods: Vec<Pod> = (0..8)
        .map(|i| with_uid(pod(&format!("web-{i}"), "web", synced), &i.to_string()))
        .collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let now = Timestamp::now();
    for k in 1..=3 {
        let pdbs = [with_status(
            pdb("web", Some("web"), int(8 - k), None),
            k,
            8,
            8 - k,
        )];
        let mut allowed = AllowedEvictions::default();
        let mut decide = |subject: &Pod| {
            let decision = eviction::decide(subject, &pdbs);
            let mut circumstances = Circumstances::at(now);
            circumstances.allowed_not_seen = allowed.not_seen("ns", &refs, &pdbs, now);
            let denial =
                stricter_eviction(subject, &decision, &pdbs, &refs, &policy, &circumstances);
            let takes =
                takes_a_strict_place(subject, &decision, &pdbs, &refs, &policy, &circumstances);
            if denial.is_none() && takes {
                allowed.allowed(subject, now);
            }
            denial.is_none()
        };
        let passed: Vec<bool> = pods.iter().map(&mut decide).collect();
        assert_eq!(
            passed.iter().filter(|p| **p).count(),
            k as usize,
            "minAvailable {}: {passed:?}",
            8 - k
        );
        assert!(decide(&pods[0]), "minAvailable {}: web-0 again", 8 - k);
        assert!(!decide(&pods[7]), "minAvailable {}: web-7 again", 8 - k);
    }
}
