use super::*;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn pod(annotations: &[(&str, &str)], phase: &str, deleting: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-1".into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

const ONLY: (&str, &str) = (DESCHEDULER_REQUEST_EVICT_ONLY, "");
const INTERCEPTORS: (&str, &str) = (EVICTION_INTERCEPTORS, "surge.example.com");

/// Nobody else asks.
fn none() -> Requested {
    Requested::default()
}

/// Another requester asks through `request`; `bridge`: the bridge asks too.
fn others(request: &str, bridge: bool) -> Requested {
    Requested {
        by_bridge: bridge,
        by_others: Some(request.into()),
    }
}

fn already(request: &str) -> Admit {
    Admit::AlreadyEvacuating {
        request: request.into(),
    }
}

/// Name, pod, UID precondition, opt-in, who requests the eviction, expected answer.
type AdmitCase<'a> = (&'a str, Pod, Option<&'a str>, OptIn, Requested, Admit);

#[test]
fn admit_table() {
    use Admit::*;
    use OptIn::*;
    let bridge_only = Requested {
        by_bridge: true,
        by_others: None,
    };
    #[rustfmt::skip]
    let cases: &[AdmitCase] = &[
        ("request-evict-only is evacuated", pod(&[ONLY], "Running", false), None, RequestEvictOnly, none(), Evacuate),
        ("the same UID precondition", pod(&[ONLY], "Running", false), Some("uid-1"), RequestEvictOnly, none(), Evacuate),
        ("pending pods too", pod(&[ONLY], "Pending", false), None, RequestEvictOnly, none(), Evacuate),
        ("no annotation passes", pod(&[], "Running", false), None, RequestEvictOnly, none(), Pass(super::Pass::NotOptedIn)),
        ("interceptors alone pass without the flag", pod(&[INTERCEPTORS], "Running", false), None, RequestEvictOnly, none(), Pass(super::Pass::NotOptedIn)),
        ("interceptors with the flag", pod(&[INTERCEPTORS], "Running", false), None, AlsoInterceptorPods, none(), Evacuate),
        ("an empty interceptor list is none", pod(&[(EVICTION_INTERCEPTORS, " ")], "Running", false), None, AlsoInterceptorPods, none(), Pass(super::Pass::NotOptedIn)),
        ("succeeded pods pass", pod(&[ONLY], "Succeeded", false), None, RequestEvictOnly, none(), Pass(super::Pass::Terminal)),
        ("failed pods pass", pod(&[ONLY], "Failed", false), None, RequestEvictOnly, none(), Pass(super::Pass::Terminal)),
        ("terminating pods pass", pod(&[ONLY], "Running", true), None, RequestEvictOnly, none(), Pass(super::Pass::Terminating)),
        ("another pod's UID passes", pod(&[ONLY], "Running", false), Some("uid-0"), RequestEvictOnly, none(), Pass(super::Pass::OtherPod)),
        ("UID mismatch wins over opt-out", pod(&[], "Running", false), Some("uid-0"), RequestEvictOnly, none(), Pass(super::Pass::OtherPod)),
        // KEP-1397: a pod with another requester's request is already getting evacuated.
        ("requested by others, not opted in", pod(&[], "Running", false), None, RequestEvictOnly, others("r", false), already("r")),
        ("requested by others, interceptor pod without the flag", pod(&[INTERCEPTORS], "Running", false), None, RequestEvictOnly, others("r", false), already("r")),
        ("requested by others, opted in: not joined", pod(&[ONLY], "Running", false), None, RequestEvictOnly, others("r", false), already("r")),
        ("requested by others and the bridge, opted in: joined again", pod(&[ONLY], "Running", false), None, RequestEvictOnly, others("r", true), Evacuate),
        ("requested by others and the bridge, not opted in", pod(&[], "Running", false), None, RequestEvictOnly, others("r", true), already("r")),
        ("requested by the bridge alone, not opted in", pod(&[], "Running", false), None, RequestEvictOnly, bridge_only.clone(), Pass(super::Pass::NotOptedIn)),
        ("requested by the bridge alone, opted in", pod(&[ONLY], "Running", false), None, RequestEvictOnly, bridge_only, Evacuate),
        ("requested by others, terminating", pod(&[], "Running", true), None, RequestEvictOnly, others("r", false), Pass(super::Pass::Terminating)),
        ("requested by others, terminal", pod(&[], "Succeeded", false), None, RequestEvictOnly, others("r", false), Pass(super::Pass::Terminal)),
        ("requested by others, another pod's UID", pod(&[], "Running", false), Some("uid-0"), RequestEvictOnly, others("r", false), Pass(super::Pass::OtherPod)),
    ];
    for (name, pod, precondition, opt_in, requested, want) in cases {
        assert_eq!(
            admit(
                &pod.metadata,
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                *precondition,
                *opt_in,
                requested
            ),
            *want,
            "{name}"
        );
    }
}

fn crd_request(requesters: &[&str], condition: Option<&str>) -> EvictionRequest {
    let conditions: Vec<_> = condition
        .into_iter()
        .map(|kind| {
            serde_json::json!({
                "type": kind, "status": "True", "reason": "R", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "evictkit.io/v1alpha1",
        "kind": "EvictionRequest",
        "metadata": {"name": "uid-1", "namespace": "ns"},
        "spec": {
            "target": {"pod": {"name": "web-0", "uid": "uid-1"}},
            "requesters": requesters.iter().map(|name| serde_json::json!({"name": name})).collect::<Vec<_>>(),
        },
        "status": {"conditions": conditions},
    }))
    .unwrap()
}

#[test]
fn crd_requested_table() {
    const US: &str = "descheduler-bridge.evictkit.io";
    const TM: &str = "taint-manager.evictkit.io";
    let by = |bridge: bool, others: bool| Requested {
        by_bridge: bridge,
        by_others: others.then(|| "uid-1".to_owned()),
    };
    #[rustfmt::skip]
    let cases: &[(&str, &[&str], Option<&str>, Requested)] = &[
        ("another requester", &[TM], None, by(false, true)),
        ("the bridge alone", &[US], None, by(true, false)),
        ("both", &[US, TM], None, by(true, true)),
        ("nobody left (canceling)", &[], None, by(false, false)),
        ("canceled", &[TM], Some("Canceled"), by(false, false)),
        ("evicted", &[TM], Some("Evicted"), by(false, false)),
    ];
    for (name, requesters, condition, want) in cases {
        assert_eq!(
            requested(
                [&Asking::of_crd(&crd_request(requesters, *condition))],
                "uid-1",
                &[US]
            ),
            *want,
            "{name}"
        );
    }
}

#[test]
fn lifecycle_requested_table() {
    const US: &str = "evictkit.io/descheduler-bridge";
    const TM: &str = "evictkit.io/taint-manager";
    let named = |name: &str, mut request: LifecycleRequest| {
        request.metadata.name = Some(name.into());
        request
    };
    let other_pod = |mut request: LifecycleRequest| {
        if let Some(pod) = request.spec.target.pod.as_mut() {
            pod.uid = "uid-0".into();
        }
        request
    };
    let failed = &[("TargetEvicted", "False"), ("Failed", "True")];
    let ours = named("a", lifecycle_request(US, "Eviction", &[]));
    let theirs = named("b", lifecycle_request(TM, "Eviction", &[]));
    let drain = named("c", lifecycle_request("example.com/drain", "Eviction", &[]));
    let withdrawn = named("b", lifecycle_request(TM, "Withdrawn", &[]));
    let ended = named("b", lifecycle_request(TM, "Eviction", failed));
    let asking_again = named("b", observed_request(TM, "Eviction", failed, 4, Some(3)));
    let predecessor = named("b", other_pod(lifecycle_request(TM, "Eviction", &[])));
    let by = |bridge: bool, others: Option<&str>| Requested {
        by_bridge: bridge,
        by_others: others.map(str::to_owned),
    };
    #[rustfmt::skip]
    let cases: &[(&str, Vec<&LifecycleRequest>, Requested)] = &[
        ("none", vec![], by(false, None)),
        ("another requester", vec![&theirs], by(false, Some("b"))),
        ("the bridge alone", vec![&ours], by(true, None)),
        ("both", vec![&ours, &theirs], by(true, Some("b"))),
        ("the first other by name", vec![&drain, &theirs], by(false, Some("b"))),
        ("withdrawn", vec![&withdrawn], by(false, None)),
        ("ended (Failed)", vec![&ended], by(false, None)),
        ("asking again after a cancellation", vec![&asking_again], by(false, Some("b"))),
        ("a predecessor's", vec![&predecessor], by(false, None)),
    ];
    let asking = |requests: &[&LifecycleRequest]| -> Vec<Asking> {
        requests.iter().map(|r| Asking::of_lifecycle(r)).collect()
    };
    for (name, requests, want) in cases {
        assert_eq!(
            requested(&asking(requests), "uid-1", &[US]),
            *want,
            "{name}"
        );
    }
}

/// In an upgrade both APIs are in use at once: whichever the bridge asks through, a pod asked
/// for through the other is already getting evacuated, and its own request on either is its.
#[test]
fn requested_reads_both_apis() {
    const BRIDGE: &[&str] = &[
        "descheduler-bridge.evictkit.io",
        "evictkit.io/descheduler-bridge",
    ];
    let crd = |requesters: &[&str]| Asking::of_crd(&crd_request(requesters, None));
    let lifecycle = |requester: &str| {
        let mut request = lifecycle_request(requester, "Eviction", &[]);
        request.metadata.name = Some(format!("web-0-{}", requester.replace(['.', '/'], "-")));
        Asking::of_lifecycle(&request)
    };
    let by = |bridge: bool, others: Option<&str>| Requested {
        by_bridge: bridge,
        by_others: others.map(str::to_owned),
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<Asking>, Requested)> = vec![
        ("a drain on the CRD", vec![crd(&["drain.example.com"])], by(false, Some("uid-1"))),
        ("a drain upstream", vec![lifecycle("example.com/drain")], by(false, Some("web-0-example-com-drain"))),
        ("the bridge on the CRD before its restart", vec![crd(&[BRIDGE[0]])], by(true, None)),
        ("the bridge upstream, a drain on the CRD", vec![lifecycle(BRIDGE[1]), crd(&["drain.example.com"])], by(true, Some("uid-1"))),
        ("both APIs asked by others: the first name", vec![lifecycle("example.com/drain"), crd(&["drain.example.com"])], by(false, Some("uid-1"))),
    ];
    for (name, asking, want) in cases {
        assert_eq!(requested(&asking, "uid-1", BRIDGE), want, "{name}");
    }
}

#[test]
fn message_carries_the_descheduler_text() {
    let message = evacuation_message("ns", "web-1", "3f1c");
    assert_eq!(
        message,
        "Eviction triggered evacuation of pod ns/web-1 via EvictionRequest 3f1c"
    );
    assert!(message.contains(EVICTION_IN_BACKGROUND_TEXT));
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

fn ours(started: Option<i64>) -> Marks {
    Marks {
        in_progress: true,
        started: started.map(at),
        ours: true,
        ..Marks::default()
    }
}

/// Name, request state, listed, the pod's marks, now (seconds), expected plan.
type PlanCase<'a> = (&'a str, State, bool, Option<&'a Marks>, i64, Plan);

#[test]
fn plan_table() {
    let ttl = SignedDuration::from_secs(60);
    let none = Marks::default();
    let kubevirt = Marks {
        in_progress: true,
        ..Marks::default()
    };
    let half = Marks {
        in_progress: false,
        started: Some(at(0)),
        ours: true,
        ..Marks::default()
    };
    let marked = ours(Some(0));
    let unreadable = ours(None);
    let end = |ended, withdraw, clear_marks| Plan::End {
        ended,
        withdraw,
        clear_marks,
    };
    let going = |mark: Option<i64>, left: i64| Plan::InProgress {
        mark: mark.map(at),
        refresh: None,
        recheck_after: SignedDuration::from_secs(left),
    };
    #[rustfmt::skip]
    let cases: Vec<PlanCase> = vec![
        ("marked, within the TTL: wait for its end", State::InProgress, true, Some(&marked), 10, going(None, 50)),
        ("unmarked (webhook's patch lost): mark now", State::InProgress, true, Some(&none), 10, going(Some(10), 60)),
        ("half marked: complete, keep the start", State::InProgress, true, Some(&half), 10, going(Some(0), 50)),
        ("TTL reached: withdraw and release", State::InProgress, true, Some(&marked), 60, end(Ended::Expired, true, true)),
        ("unreadable start counts from now", State::InProgress, true, Some(&unreadable), 10, going(Some(10), 60)),
        ("pod gone, not yet Evicted: wait", State::InProgress, true, None, 10, going(None, 60)),
        ("evicted, pod gone: withdraw", State::Evicted, true, None, 10, end(Ended::Evicted, true, false)),
        ("evicted, terminal pod: withdraw, clear", State::Evicted, true, Some(&marked), 10, end(Ended::Evicted, true, true)),
        ("canceled: withdraw, clear", State::Canceled, true, Some(&marked), 10, end(Ended::Canceled, true, true)),
        ("withdrawn by someone else: clear", State::InProgress, false, Some(&marked), 10, end(Ended::Withdrawn, false, true)),
        ("after our own withdrawal: nothing", State::Canceled, false, Some(&none), 10, Plan::Nothing),
        ("another evacuator's mark is left alone", State::InProgress, false, Some(&kubevirt), 10, Plan::Nothing),
        ("not ours at all", State::InProgress, false, None, 10, Plan::Nothing),
    ];
    for (name, state, listed, marks, now, want) in cases {
        let ttls = Ttls {
            evacuation: ttl,
            descheduler: DESCHEDULER_ASSUMED_TTL,
        };
        assert_eq!(plan(state, listed, marks, at(now), &ttls), want, "{name}");
    }
}

/// The descheduler (v0.36 `evictions.go`) drops an *assumed* entry (one its
/// 429 created) at the first cache cleaning after 600 s, i.e. 600-1200 s after the 429, even
/// while the pod is still marked `eviction-in-progress`; a later cycle never refreshes it (a
/// cached pod is skipped without an eviction call, and `assumePod` keeps the first time). It
/// adds a pod back, as a confirmed entry that never expires, on any pod update that still
/// carries both annotations. So across that window the bridge updates the pod every tenth of
/// the TTL; the last update falls after the window, past any cleaning that can drop the entry.
#[test]
fn plan_refreshes_the_pod_for_the_descheduler_cache() {
    let ttls = Ttls {
        evacuation: SignedDuration::from_secs(3600),
        descheduler: DESCHEDULER_ASSUMED_TTL,
    };
    let marked = |answered: Option<i64>, refreshed: Option<i64>, request_evict_only| Marks {
        request_evict_only,
        answered: answered.map(at),
        refreshed: refreshed.map(at),
        ..ours(Some(0))
    };
    let going = |refresh: Option<i64>, left: i64| Plan::InProgress {
        mark: None,
        refresh: refresh.map(at),
        recheck_after: SignedDuration::from_secs(left),
    };
    // (name, marks, now, plan)
    #[rustfmt::skip]
    let cases: Vec<(&str, Marks, i64, Plan)> = vec![
        ("answered at 0: the descheduler holds the entry until 600 s at least", marked(Some(0), None, true), 100, going(None, 560)),
        ("the first refresh, a tenth of the TTL into the window", marked(Some(0), None, true), 660, going(Some(660), 60)),
        ("a late reconcile refreshes at once", marked(Some(0), None, true), 900, going(Some(900), 60)),
        ("refreshed at 1140: the next one a tenth later", marked(Some(0), Some(1140), true), 1150, going(None, 50)),
        ("refreshed after the window (1260 s): the entry is confirmed, wait for the TTL", marked(Some(0), Some(1260), true), 1300, going(None, 2300)),
        ("a refresh from before the window does not count", marked(Some(0), Some(500), true), 660, going(Some(660), 60)),
        ("answered again at 2000 (the descheduler assumed anew): a new window", marked(Some(2000), Some(1260), true), 2100, going(None, 560)),
        ("no answered mark (marked by an older bridge): the start stands for it", marked(None, None, true), 660, going(Some(660), 60)),
        ("without request-evict-only the descheduler keeps no entry: no refresh", marked(Some(0), None, false), 660, going(None, 2940)),
        ("the evacuation's own TTL comes first", marked(Some(0), Some(3590), true), 3595, going(None, 5)),
    ];
    for (name, marks, now, want) in cases {
        assert_eq!(
            plan(State::InProgress, true, Some(&marks), at(now), &ttls),
            want,
            "{name}"
        );
    }
}

#[test]
fn marks_round_trip() {
    let mut pod = pod(&[], "Running", false);
    let annotations = marks("uid-1", at(5))
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v?)))
        .collect();
    pod.metadata.annotations = Some(annotations);
    assert_eq!(Marks::of(&pod.metadata), ours(Some(5)));
    let annotations = pod.metadata.annotations.get_or_insert_default();
    for (key, value) in answered_mark(at(7))
        .into_iter()
        .chain(refreshed_mark(at(9)))
    {
        annotations.insert(key.to_owned(), value.unwrap());
    }
    annotations.insert(DESCHEDULER_REQUEST_EVICT_ONLY.to_owned(), String::new());
    let read = Marks::of(&pod.metadata);
    assert_eq!(
        (read.answered, read.refreshed, read.request_evict_only),
        (Some(at(7)), Some(at(9)), true)
    );
    assert!(cleared_marks().values().all(Option::is_none));
    // Every annotation the bridge writes is cleared at the end.
    let written: Vec<_> = marks("x", at(0))
        .into_keys()
        .chain(answered_mark(at(0)).into_keys())
        .chain(refreshed_mark(at(0)).into_keys())
        .collect();
    let mut written = written;
    written.sort_unstable();
    assert_eq!(cleared_marks().into_keys().collect::<Vec<_>>(), written);
}

fn lifecycle_request(
    requester: &str,
    intent: &str,
    conditions: &[(&str, &str)],
) -> LifecycleRequest {
    observed_request(requester, intent, conditions, 3, Some(3))
}

fn observed_request(
    requester: &str,
    intent: &str,
    conditions: &[(&str, &str)],
    generation: i64,
    observed: Option<i64>,
) -> LifecycleRequest {
    let conditions: Vec<_> = conditions
        .iter()
        .map(|(kind, status)| {
            serde_json::json!({
                "type": kind, "status": status, "reason": "R", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "web-0-evictkit-io-descheduler-bridge",
            "namespace": "ns",
            "generation": generation,
        },
        "spec": {
            "requester": requester,
            "intent": intent,
            "target": {"pod": {"name": "web-0", "uid": "uid-1"}},
        },
        "status": {"conditions": conditions, "observedGeneration": observed},
    }))
    .unwrap()
}

/// `(type, status)` of a request's conditions.
type Conditions<'a> = &'a [(&'a str, &'a str)];

#[test]
fn lifecycle_request_state_and_listing() {
    const US: &str = "evictkit.io/descheduler-bridge";
    #[rustfmt::skip]
    let cases: &[(&str, Conditions, State)] = &[
        ("no conditions yet", &[], State::InProgress),
        ("awaiting the Eviction", &[("TargetEvicted", "False"), ("Failed", "False")], State::InProgress),
        ("target evicted", &[("TargetEvicted", "True"), ("Failed", "False")], State::Evicted),
        ("failed: ended without an eviction", &[("TargetEvicted", "False"), ("Failed", "True")], State::Canceled),
        ("evicted wins over failed", &[("TargetEvicted", "True"), ("Failed", "True")], State::Evicted),
    ];
    for (name, conditions, want) in cases {
        let request = lifecycle_request(US, "Eviction", conditions);
        assert_eq!(lifecycle_state(&request), *want, "{name}");
    }
    // Asking again after a cancellation: the Failed is the old intent's until observed.
    let failed = &[("TargetEvicted", "False"), ("Failed", "True")];
    assert_eq!(
        lifecycle_state(&observed_request(US, "Eviction", failed, 4, Some(3))),
        State::InProgress
    );
    assert_eq!(
        lifecycle_state(&observed_request(US, "Eviction", failed, 4, None)),
        State::InProgress
    );
    assert_eq!(
        lifecycle_state(&observed_request(US, "Eviction", failed, 4, Some(4))),
        State::Canceled
    );
    assert!(lifecycle_listed(
        &lifecycle_request(US, "Eviction", &[]),
        US
    ));
    assert!(!lifecycle_listed(
        &lifecycle_request(US, "Withdrawn", &[]),
        US
    ));
    assert!(!lifecycle_listed(
        &lifecycle_request("evictkit.io/taint-manager", "Eviction", &[]),
        US
    ));
}
