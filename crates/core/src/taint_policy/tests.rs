use super::*;
use evictkit_api::taint_eviction_policy::{TaintEvictionPolicySpec, TaintSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

const NE: &str = "NoExecute";

fn ts(s: &str) -> Timestamp {
    format!("2026-01-01T{s}Z").parse().unwrap()
}

fn taint(key: &str, value: &str, added: Option<&str>) -> Taint {
    Taint {
        key: key.to_owned(),
        value: (!value.is_empty()).then(|| value.to_owned()),
        effect: NE.to_owned(),
        time_added: added.map(|a| Time(ts(a))),
    }
}

fn tol(key: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: Some(key.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some(NE.to_owned()),
        toleration_seconds: seconds,
        ..Toleration::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn policy(name: &str, precedence: i32, action: TaintEvictionAction) -> TaintEvictionPolicy {
    TaintEvictionPolicy {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: TaintEvictionPolicySpec {
            precedence,
            action,
            ..TaintEvictionPolicySpec::default()
        },
        status: None,
    }
}

fn for_taint(mut p: TaintEvictionPolicy, key: &str, value: Option<&str>) -> TaintEvictionPolicy {
    p.spec.taints.push(TaintSelector {
        key: key.to_owned(),
        value: value.map(str::to_owned),
    });
    p
}

fn for_pods(mut p: TaintEvictionPolicy, key: &str, value: &str) -> TaintEvictionPolicy {
    p.spec.pod_selector = Some(LabelSelector {
        match_labels: Some(labels(&[(key, value)])),
        ..LabelSelector::default()
    });
    p
}

fn compile(policies: Vec<TaintEvictionPolicy>) -> Policies {
    Policies::new(
        policies
            .iter()
            .map(|p| CompiledPolicy::new(p).unwrap())
            .collect(),
    )
}

struct Pod {
    labels: BTreeMap<String, String>,
    namespace_labels: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    bound_at: Timestamp,
    deletion: Option<Timestamp>,
}

impl Pod {
    fn new(tolerations: Vec<Toleration>) -> Self {
        Self {
            labels: labels(&[("app", "db")]),
            namespace_labels: labels(&[("team", "a")]),
            tolerations,
            bound_at: ts("00:00:00"),
            deletion: None,
        }
    }

    fn facts(&self) -> PodFacts<'_> {
        PodFacts {
            labels: &self.labels,
            namespace_labels: &self.namespace_labels,
            tolerations: &self.tolerations,
            bound_at: self.bound_at,
            deletion_timestamp: self.deletion,
        }
    }
}

fn delete_since(since: &str) -> PodPlan {
    PodPlan::Remove {
        action: TaintEvictionAction::Delete,
        since: ts(since),
        policy: None,
    }
}

#[test]
fn plan_without_policies_is_upstream() {
    let now = ts("00:10:00");
    let none = Policies::default();
    // (case, taints, tolerations, bound_at, plan)
    type Case = (
        &'static str,
        Vec<Taint>,
        Vec<Toleration>,
        &'static str,
        PodPlan,
    );
    let cases: Vec<Case> = vec![
        ("no taints: keep", vec![], vec![], "00:00:00", PodPlan::Keep),
        (
            "untolerated taint: delete now, due since the taint was added",
            vec![taint("a", "", Some("00:09:00"))],
            vec![],
            "00:00:00",
            delete_since("00:09:00"),
        ),
        (
            "untolerated taint older than the pod: due since the pod was bound",
            vec![taint("a", "", Some("00:01:00"))],
            vec![],
            "00:05:00",
            delete_since("00:05:00"),
        ),
        (
            "tolerated forever: keep",
            vec![taint("a", "", Some("00:09:00"))],
            vec![tol("a", None)],
            "00:00:00",
            PodPlan::Keep,
        ),
        (
            "tolerated for 120s from timeAdded: wait",
            vec![taint("a", "", Some("00:09:00"))],
            vec![tol("a", Some(120))],
            "00:00:00",
            PodPlan::Wait {
                at: ts("00:11:00"),
                action: TaintEvictionAction::Delete,
            },
        ),
        (
            "window already over after a restart: delete, due since the deadline",
            vec![taint("a", "", Some("00:05:00"))],
            vec![tol("a", Some(60))],
            "00:00:00",
            delete_since("00:06:00"),
        ),
        (
            "window starts when the pod is bound, not before (upstream starts it when it sees the pod)",
            vec![taint("a", "", Some("00:00:00"))],
            vec![tol("a", Some(300))],
            "00:08:00",
            PodPlan::Wait {
                at: ts("00:13:00"),
                action: TaintEvictionAction::Delete,
            },
        ),
        (
            "NoSchedule taints are not the taint manager's",
            vec![Taint {
                effect: "NoSchedule".to_owned(),
                ..taint("a", "", None)
            }],
            vec![],
            "00:00:00",
            PodPlan::Keep,
        ),
    ];
    for (case, taints, tolerations, bound_at, want) in cases {
        let mut pod = Pod::new(tolerations);
        pod.bound_at = ts(bound_at);
        assert_eq!(pod_plan(&taints, &pod.facts(), &none, now), want, "{case}");
    }
}

#[test]
fn terminating_pods_are_not_deleted_again() {
    let now = ts("00:10:00");
    let mut pod = Pod::new(vec![]);
    pod.deletion = Some(ts("00:02:00"));
    let unreachable = vec![taint(TAINT_NODE_UNREACHABLE, "", Some("00:01:00"))];
    let mut force = policy("force", 0, TaintEvictionAction::Delete);
    force.spec.force_delete_terminating_after = Some("5m".to_owned());
    // (case, taints, policies, plan)
    let cases = vec![
        (
            "no policy: nothing, though untolerated",
            unreachable.clone(),
            Policies::default(),
            PodPlan::Terminating { force_at: None },
        ),
        (
            "forceDeleteTerminatingAfter 5m on unreachable: force at grace end + 5m",
            unreachable.clone(),
            compile(vec![force.clone()]),
            PodPlan::Terminating {
                force_at: Some(ts("00:07:00")),
            },
        ),
        (
            "forceDeleteTerminatingAfter applies on unreachable nodes only",
            vec![taint(TAINT_NODE_NOT_READY, "", Some("00:01:00"))],
            compile(vec![force.clone()]),
            PodPlan::Terminating { force_at: None },
        ),
    ];
    for (case, taints, policies, want) in cases {
        assert_eq!(
            pod_plan(&taints, &pod.facts(), &policies, now),
            want,
            "{case}"
        );
    }
}

#[test]
fn policies_choose_the_action() {
    let now = ts("00:10:00");
    let taints = vec![taint("a", "x", Some("00:09:00"))];
    let evict = |name, precedence| policy(name, precedence, TaintEvictionAction::Evict);
    let ignore = |name, precedence| policy(name, precedence, TaintEvictionAction::Ignore);
    let remove = |action, policy: &str| PodPlan::Remove {
        action,
        since: ts("00:09:00"),
        policy: Some(policy.to_owned()),
    };
    // (case, policies, plan)
    let cases = vec![
        (
            "Evict for every taint",
            vec![evict("e", 0)],
            remove(TaintEvictionAction::Evict, "e"),
        ),
        ("Ignore keeps the pod", vec![ignore("i", 0)], PodPlan::Keep),
        (
            "higher precedence wins",
            vec![ignore("i", 1), evict("e", 2)],
            remove(TaintEvictionAction::Evict, "e"),
        ),
        (
            "equal precedence: the name that sorts first wins",
            vec![evict("b", 0), ignore("a", 0)],
            PodPlan::Keep,
        ),
        (
            "taint key selected",
            vec![for_taint(evict("e", 0), "a", None)],
            remove(TaintEvictionAction::Evict, "e"),
        ),
        (
            "taint value must match when given",
            vec![for_taint(evict("e", 0), "a", Some("y"))],
            delete_since("00:09:00"),
        ),
        (
            "other taint key: upstream delete",
            vec![for_taint(ignore("i", 0), "b", None)],
            delete_since("00:09:00"),
        ),
        (
            "pod selector matches",
            vec![for_pods(ignore("i", 0), "app", "db")],
            PodPlan::Keep,
        ),
        (
            "pod selector does not match: a lower policy governs",
            vec![for_pods(ignore("i", 5), "app", "web"), evict("e", 0)],
            remove(TaintEvictionAction::Evict, "e"),
        ),
    ];
    let pod = Pod::new(vec![]);
    for (case, policies, want) in cases {
        assert_eq!(
            pod_plan(&taints, &pod.facts(), &compile(policies), now),
            want,
            "{case}"
        );
    }
}

#[test]
fn ignored_taints_leave_the_others_in_force() {
    let now = ts("00:10:00");
    let taints = vec![
        taint("ignored", "", Some("00:09:00")),
        taint("tolerated", "", Some("00:09:30")),
    ];
    let policies = compile(vec![for_taint(
        policy("i", 0, TaintEvictionAction::Ignore),
        "ignored",
        None,
    )]);
    let pod = Pod::new(vec![tol("tolerated", Some(60))]);
    assert_eq!(
        pod_plan(&taints, &pod.facts(), &policies, now),
        PodPlan::Wait {
            at: ts("00:10:30"),
            action: TaintEvictionAction::Delete
        }
    );
    assert_eq!(
        policies.governing_names(&taints, &pod.facts()),
        BTreeSet::from(["i"])
    );
}

#[test]
fn invalid_policies_are_reported() {
    let mut bad_duration = policy("d", 0, TaintEvictionAction::Delete);
    bad_duration.spec.force_delete_terminating_after = Some("soon".to_owned());
    assert!(matches!(
        CompiledPolicy::new(&bad_duration),
        Err(PolicyError::ForceDeleteTerminatingAfter { .. })
    ));
    let mut bad_selector = policy("s", 0, TaintEvictionAction::Delete);
    bad_selector.spec.pod_selector = Some(LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "app".to_owned(),
            operator: "Matches".to_owned(),
            values: None,
        }]),
        ..LabelSelector::default()
    });
    assert!(matches!(
        CompiledPolicy::new(&bad_selector),
        Err(PolicyError::PodSelector(_))
    ));
    let mut ok = policy("ok", 0, TaintEvictionAction::Delete);
    ok.spec.force_delete_terminating_after = Some("1h30m".to_owned());
    assert_eq!(
        CompiledPolicy::new(&ok)
            .unwrap()
            .force_delete_terminating_after,
        Some(Duration::from_secs(5400))
    );
}

#[test]
fn zone_guard_pauses_large_unhealthy_zones() {
    let guard = ZoneGuard {
        unhealthy_zone_threshold: 0.55,
        large_cluster_size_threshold: 2,
    };
    let zone = |z: &str| labels(&[(LABEL_TOPOLOGY_ZONE, z)]);
    let (a, b, none) = (zone("a"), zone("b"), BTreeMap::new());
    let unreachable = vec![taint(TAINT_NODE_UNREACHABLE, "", None)];
    let not_ready = vec![taint(TAINT_NODE_NOT_READY, "", None)];
    let other = vec![taint("maintenance", "", None)];
    let healthy: Vec<Taint> = vec![];
    let node = |labels, taints| ZoneNode { labels, taints };
    // (case, nodes, paused)
    type Case<'a> = (
        &'static str,
        Vec<ZoneNode<'a>>,
        Vec<(&'static str, (usize, usize))>,
    );
    let cases: Vec<Case> = vec![
        (
            "2 of 3 unreachable or not ready (0.67 >= 0.55): paused",
            vec![
                node(&a, &unreachable),
                node(&a, &not_ready),
                node(&a, &healthy),
            ],
            vec![("a", (2, 3))],
        ),
        (
            "1 of 3 (0.33): not paused",
            vec![
                node(&a, &unreachable),
                node(&a, &healthy),
                node(&a, &healthy),
            ],
            vec![],
        ),
        (
            "other taints do not count",
            vec![node(&a, &other), node(&a, &other), node(&a, &healthy)],
            vec![],
        ),
        (
            "zone not larger than --large-cluster-size-threshold: not guarded",
            vec![node(&b, &unreachable), node(&b, &unreachable)],
            vec![],
        ),
        (
            "no zone labels: one zone",
            vec![
                node(&none, &unreachable),
                node(&none, &unreachable),
                node(&none, &healthy),
            ],
            vec![("", (2, 3))],
        ),
    ];
    for (case, nodes, want) in cases {
        let want: BTreeMap<String, (usize, usize)> =
            want.into_iter().map(|(z, c)| (z.to_owned(), c)).collect();
        assert_eq!(paused_zones(nodes, guard), want, "{case}");
    }
}
