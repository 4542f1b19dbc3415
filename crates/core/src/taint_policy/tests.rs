use super::*;
use evictkit_api::keys::TAINT_NODE_NOT_READY;
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
    window: Option<TolerationWindow>,
    planning_since: Timestamp,
}

impl Pod {
    fn new(tolerations: Vec<Toleration>) -> Self {
        Self {
            labels: labels(&[("app", "db")]),
            namespace_labels: labels(&[("team", "a")]),
            tolerations,
            bound_at: ts("00:00:00"),
            deletion: None,
            window: None,
            // As if this process had just started: windows are recovered from `timeAdded`.
            planning_since: ts("00:10:00"),
        }
    }

    fn facts(&self) -> PodFacts<'_> {
        PodFacts {
            labels: &self.labels,
            namespace_labels: &self.namespace_labels,
            tolerations: &self.tolerations,
            bound_at: self.bound_at,
            deletion_timestamp: self.deletion,
            window: self.window,
            planning_since: self.planning_since,
        }
    }
}

fn wait(started: &str, ends: &str) -> PodPlan {
    PodPlan::Wait(Pending {
        window: TolerationWindow {
            started: ts(started),
            ends: ts(ends),
        },
        action: TaintEvictionAction::Delete,
        policy: None,
    })
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
            "tolerated for 120s, after a restart: the window recovered from timeAdded",
            vec![taint("a", "", Some("00:09:00"))],
            vec![tol("a", Some(120))],
            "00:00:00",
            wait("00:09:00", "00:11:00"),
        ),
        (
            "window already over after a restart: delete, due since the deadline",
            vec![taint("a", "", Some("00:05:00"))],
            vec![tol("a", Some(60))],
            "00:00:00",
            delete_since("00:06:00"),
        ),
        (
            "a recovered window starts when the pod was bound, not before",
            vec![taint("a", "", Some("00:00:00"))],
            vec![tol("a", Some(300))],
            "00:08:00",
            wait("00:08:00", "00:13:00"),
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
        wait("00:09:30", "00:10:30")
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

/// One change a sequence makes, `at` seconds after the start: the node's taints (key, seconds
/// after the start it was added), the pod's tolerations (key, tolerationSeconds).
struct Step {
    at: i64,
    taints: Vec<(&'static str, i64)>,
    tolerations: Vec<(&'static str, Option<i64>)>,
}

fn step(
    at: i64,
    taints: &[(&'static str, i64)],
    tolerations: &[(&'static str, Option<i64>)],
) -> Step {
    Step {
        at,
        taints: taints.to_vec(),
        tolerations: tolerations.to_vec(),
    }
}

/// Plays a sequence as the shell does (a reconcile at every change, and one when a window
/// ends) with no policy; `planning_from`: seconds after the start at which this process began
/// planning (0: it ran all along; later: a restart). Returns the second the pod is deleted.
fn play(steps: &[Step], planning_from: i64) -> Option<i64> {
    let start = ts("00:00:00");
    let at = |s: i64| start + SignedDuration::from_secs(s);
    let none = Policies::default();
    let mut window = None;
    for second in planning_from..=120 {
        let Some(current) = steps.iter().rev().find(|s| s.at <= second) else {
            continue;
        };
        let taints: Vec<Taint> = current
            .taints
            .iter()
            .map(|(key, added)| Taint {
                time_added: Some(Time(at(*added))),
                ..taint(key, "", None)
            })
            .collect();
        let tolerations: Vec<Toleration> = current
            .tolerations
            .iter()
            .map(|(key, seconds)| tol(key, *seconds))
            .collect();
        let mut pod = Pod::new(tolerations);
        pod.window = window;
        pod.planning_since = at(planning_from);
        match pod_plan(&taints, &pod.facts(), &none, at(second)) {
            PodPlan::Remove { .. } => return Some(second),
            PodPlan::Wait(pending) => window = Some(pending.window),
            _ => window = None,
        }
    }
    None
}

/// Toleration-window sequences, with the second upstream's taint-eviction-controller
/// deletes the pod: its timer starts when it first finds the pod due and is kept while the pod
/// stays tolerated for a while (taints swapped or added, tolerationSeconds changed); it goes
/// when the taints go or the pod tolerates them forever.
#[test]
fn toleration_window_follows_upstream_timing() {
    let (a, b) = ("a", "b");
    // (case, steps, upstream's deletion second)
    let cases: Vec<(&str, Vec<Step>, Option<i64>)> = vec![
        (
            "one taint, tolerated 10 s",
            vec![step(0, &[(a, 0)], &[(a, Some(10))])],
            Some(10),
        ),
        (
            "swap (not-ready for unreachable) at 4 s: the first timer wins",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10)), (b, Some(10))]),
                step(4, &[(b, 4)], &[(a, Some(10)), (b, Some(10))]),
            ],
            Some(10),
        ),
        (
            "a second taint tolerated 3 s arrives at 4 s: the first timer wins",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10)), (b, Some(3))]),
                step(4, &[(a, 0), (b, 4)], &[(a, Some(10)), (b, Some(3))]),
            ],
            Some(10),
        ),
        (
            "a second taint tolerated 20 s arrives at 4 s: the first timer wins",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10)), (b, Some(20))]),
                step(4, &[(a, 0), (b, 4)], &[(a, Some(10)), (b, Some(20))]),
            ],
            Some(10),
        ),
        (
            "all taints removed at 4 s, re-added at 6 s: a new window",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10))]),
                step(4, &[], &[(a, Some(10))]),
                step(6, &[(a, 6)], &[(a, Some(10))]),
            ],
            Some(16),
        ),
        (
            "tolerationSeconds lowered to 3 at 4 s: the first timer wins",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10))]),
                step(4, &[(a, 0)], &[(a, Some(3))]),
            ],
            Some(10),
        ),
        (
            "tolerationSeconds raised to 30 at 4 s: the first timer wins",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10))]),
                step(4, &[(a, 0)], &[(a, Some(30))]),
            ],
            Some(10),
        ),
        (
            "toleration made infinite at 4 s: cancelled",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10))]),
                step(4, &[(a, 0)], &[(a, None)]),
            ],
            None,
        ),
        (
            "tolerated forever, then a taint tolerated 5 s at 4 s: the timer starts then",
            vec![
                step(0, &[(a, 0)], &[(a, None), (b, Some(5))]),
                step(4, &[(a, 0), (b, 4)], &[(a, None), (b, Some(5))]),
            ],
            Some(9),
        ),
        (
            "an untolerated taint at 4 s: deleted then",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10))]),
                step(4, &[(a, 0), (b, 4)], &[(a, Some(10))]),
            ],
            Some(4),
        ),
    ];
    for (case, steps, want) in cases {
        assert_eq!(play(&steps, 0), want, "{case}");
    }
}

/// Where upstream has no answer (its timers die with the process), a restarted taint-manager
/// derives the window from the earliest `timeAdded` of the taints tolerated for a while.
#[test]
fn a_restart_recovers_the_window_from_time_added() {
    let (a, b) = ("a", "b");
    // (case, steps, planning from, deletion second)
    let cases: Vec<(&str, Vec<Step>, i64, Option<i64>)> = vec![
        (
            "restart at 5 s into a 10 s window: deleted at 10 s (upstream: 15 s)",
            vec![step(0, &[(a, 0)], &[(a, Some(10))])],
            5,
            Some(10),
        ),
        (
            "restart after a swap: from the earliest timeAdded now on the node",
            vec![
                step(0, &[(a, 0)], &[(a, Some(10)), (b, Some(10))]),
                step(4, &[(b, 4)], &[(a, Some(10)), (b, Some(10))]),
            ],
            6,
            Some(14),
        ),
        (
            "a taint tolerated forever does not start the window",
            vec![
                step(0, &[(a, 0)], &[(a, None), (b, Some(10))]),
                step(3, &[(a, 0), (b, 3)], &[(a, None), (b, Some(10))]),
            ],
            5,
            Some(13),
        ),
        (
            "restart past the end of the window: deleted at once",
            vec![step(0, &[(a, 0)], &[(a, Some(10))])],
            30,
            Some(30),
        ),
        (
            "a taint added after the restart starts its window then",
            vec![
                step(0, &[], &[(a, Some(10))]),
                step(8, &[(a, 8)], &[(a, Some(10))]),
            ],
            5,
            Some(18),
        ),
    ];
    for (case, steps, planning_from, want) in cases {
        assert_eq!(play(&steps, planning_from), want, "{case}");
    }
}
