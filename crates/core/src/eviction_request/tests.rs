use std::collections::BTreeMap;

use evictkit_api::eviction_request::{
    EvictionRequest, EvictionRequestSpec, EvictionRequestStatus, EvictionTarget, Interceptor,
    InterceptorStatus, LocalPodReference, Requester,
};
use evictkit_api::keys::{EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR as IMPERATIVE};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use proptest::prelude::*;

use super::*;
use evictkit_api::keys::{
    EVICTION_REQUEST_CONTROLLER as CONTROLLER_FIELD_MANAGER, LABELS_FROM_POD, MIRROR_POD_ANNOTATION,
};

const UID: &str = "0c6a1e5e-7c55-4c43-9d0a-0b5cf3a1e001";
const A: &str = "actor-a.example.com";
const B: &str = "actor-b.example.com";

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn config() -> Config {
    Config {
        heartbeat_timeout: SignedDuration::from_mins(20),
    }
}

fn pod(interceptors: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p-1".into()),
            namespace: Some("blueberry".into()),
            uid: Some(UID.into()),
            labels: Some(BTreeMap::from([("app".into(), "nginx".into())])),
            annotations: interceptors
                .map(|v| BTreeMap::from([(EVICTION_INTERCEPTORS.into(), v.into())])),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn request(requesters: &[&str], status: Option<EvictionRequestStatus>) -> EvictionRequest {
    let mut request = EvictionRequest::new(
        UID,
        EvictionRequestSpec {
            target: EvictionTarget {
                pod: Some(LocalPodReference {
                    name: "p-1".into(),
                    uid: UID.into(),
                }),
            },
            requesters: requesters
                .iter()
                .map(|name| Requester {
                    name: (*name).into(),
                })
                .collect(),
        },
    );
    request.metadata.namespace = Some("blueberry".into());
    request.metadata.generation = Some(1);
    request.metadata.creation_timestamp = Some(Time(t(0)));
    request.metadata.labels = Some(BTreeMap::from([("app".into(), "nginx".into())]));
    request.status = status;
    request
}

/// A status after selection: targets, the processed ones, the active one, entries.
fn status(
    targets: &[&str],
    processed: &[&str],
    active: Option<&str>,
    entries: Vec<InterceptorStatus>,
) -> EvictionRequestStatus {
    EvictionRequestStatus {
        observed_generation: Some(1),
        target_interceptors: targets
            .iter()
            .map(|name| Interceptor {
                name: (*name).into(),
            })
            .collect(),
        processed_interceptors: processed.iter().map(|s| (*s).into()).collect(),
        active_interceptors: active.into_iter().map(Into::into).collect(),
        // Activated at the request's creation.
        activation_time: active.map(|_| Time(t(0))),
        interceptors: entries,
        ..EvictionRequestStatus::default()
    }
}

fn entry(name: &str, heartbeat: Option<i64>, completion: Option<i64>) -> InterceptorStatus {
    InterceptorStatus {
        name: name.into(),
        heartbeat_time: heartbeat.map(|s| Time(t(s))),
        start_time: heartbeat.map(|s| Time(t(s))),
        completion_time: completion.map(|s| Time(t(s))),
        message: String::new(),
        ..InterceptorStatus::default()
    }
}

fn condition(plan: &Plan, condition_type: &str) -> Option<(String, String)> {
    plan.status
        .conditions
        .iter()
        .find(|c| c.type_ == condition_type && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

fn active(plan: &Plan) -> Option<&str> {
    plan.status.active_interceptors.first().map(String::as_str)
}

/// (case, pod, request status, condition type, reason, message)
type ValidationCase = (
    &'static str,
    Option<Pod>,
    Option<EvictionRequestStatus>,
    &'static str,
    &'static str,
    String,
);

/// (case, processed, active, activated at, entries, now, expected active, processed after,
/// cause, requeue)
type HandOverCase = (
    &'static str,
    Vec<&'static str>,
    &'static str,
    i64,
    Vec<InterceptorStatus>,
    i64,
    &'static str,
    Vec<&'static str>,
    Option<HandOverCause>,
    Option<i64>,
);

#[test]
fn validation() {
    let mut other_uid = pod(None);
    other_uid.metadata.uid = Some("another-uid".into());
    let mut workload = pod(None);
    workload.metadata.owner_references = Some(vec![OwnerReference {
        kind: "PodGroup".into(),
        name: "g".into(),
        ..OwnerReference::default()
    }]);
    let selected = status(&[IMPERATIVE], &[], Some(IMPERATIVE), vec![]);
    let cases: Vec<ValidationCase> = vec![
        ("pod never seen", None, None, "Canceled", "ValidationFailed", "Target Pod p-1 was not found.".into()),
        ("same name, other UID, never seen", Some(other_uid.clone()), None, "Canceled", "ValidationFailed", "Target Pod p-1 was not found.".into()),
        ("pod gone after selection", None, Some(selected.clone()), "Evicted", "TargetDeleted", "Target Pod p-1 was deleted.".into()),
        ("replaced by a same-named pod", Some(other_uid), Some(selected), "Evicted", "TargetDeleted", "Target Pod p-1 was deleted.".into()),
        ("workload pod", Some(workload), None, "Canceled", "ValidationFailed", "Target Pod p-1 is part of a Workload/PodGroup. Eviction of such pods is currently not supported.".into()),
        ("bad annotation", Some(pod(Some("a.example.com, Bad_Name"))), None, "Canceled", "ValidationFailed",
            "Target Pod p-1 has invalid eviction interceptors: entry 2 \"Bad_Name\" of annotation evictkit.io/eviction-interceptors is not a fully qualified domain name (lowercase alphanumeric characters, '-' and '.', at least two labels of at most 63 characters, at most 253 characters).".into()),
    ];
    for (case, pod, status, condition_type, reason, message) in cases {
        let plan = reconcile(
            &request(&["drain.example.com"], status),
            pod.as_ref(),
            t(5),
            &config(),
        );
        assert_eq!(
            condition(&plan, condition_type),
            Some((reason.to_owned(), message)),
            "{case}"
        );
        assert_eq!(plan.imperative, None, "{case}");
        assert_eq!(plan.transitions.len(), 1, "{case}: one event");
    }
}

#[test]
fn terminal_pod_is_evicted() {
    for phase in ["Succeeded", "Failed"] {
        let mut pod = pod(None);
        pod.status.as_mut().unwrap().phase = Some(phase.into());
        let plan = reconcile(
            &request(&["r.example.com"], None),
            Some(&pod),
            t(1),
            &config(),
        );
        assert_eq!(
            condition(&plan, "Evicted"),
            Some((
                "TargetTerminated".into(),
                format!("Target Pod p-1 reached phase {phase}.")
            ))
        );
    }
}

#[test]
fn finished_request_is_left_alone() {
    let pod = pod(None);
    let canceled = reconcile(&request(&["r.example.com"], None), None, t(1), &config());
    let again = reconcile(
        &request(&["r.example.com"], Some(canceled.status.clone())),
        Some(&pod),
        t(100),
        &config(),
    );
    assert_eq!(again.status, canceled.status);
    assert!(again.transitions.is_empty() && again.imperative.is_none());
}

#[test]
fn selection_and_labels() {
    let mut pod = pod(Some("actor-b.example.com,actor-a.example.com"));
    pod.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("tier".into(), "web".into());
    let mut req = request(&["r.example.com"], None);
    req.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("app".into(), "conflicting".into());
    let plan = reconcile(&req, Some(&pod), t(1), &config());
    let targets: Vec<_> = plan
        .status
        .target_interceptors
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(targets, [B, A, IMPERATIVE]);
    assert_eq!(active(&plan), Some(B));
    assert_eq!(plan.status.observed_generation, Some(1));
    assert_eq!(
        plan.transitions,
        [Transition::Activated {
            interceptor: B.into()
        }]
    );
    assert_eq!(
        plan.labels,
        Some(BTreeMap::from([
            ("app".into(), Some("nginx".into())),
            ("tier".into(), Some("web".into())),
        ])),
        "the pod wins conflicts"
    );

    let in_sync = request(&["r.example.com"], Some(plan.status.clone()));
    let mut pod_in_sync = pod.clone();
    pod_in_sync.metadata.labels = in_sync.metadata.labels.clone();
    let plan = reconcile(&in_sync, Some(&pod_in_sync), t(2), &config());
    assert_eq!(plan.labels, None, "nothing to copy");
}

#[test]
fn no_interceptors_goes_straight_to_imperative_eviction() {
    let plan = reconcile(
        &request(&["r.example.com"], None),
        Some(&pod(None)),
        t(1),
        &config(),
    );
    assert_eq!(active(&plan), Some(IMPERATIVE));
    assert_eq!(plan.imperative, Some(Imperative::Evict));
}

#[test]
fn hand_over() {
    let targets = [B, A, IMPERATIVE];
    let cases: Vec<HandOverCase> = vec![
        (
            "fresh, no heartbeat yet: deadline from activation",
            vec![],
            B,
            0,
            vec![],
            60,
            B,
            vec![],
            None,
            Some(1140),
        ),
        (
            "no heartbeat for 20 minutes since creation",
            vec![],
            B,
            0,
            vec![],
            1200,
            A,
            vec![B],
            Some(HandOverCause::HeartbeatTimeout),
            None,
        ),
        (
            "heartbeat keeps it",
            vec![],
            B,
            0,
            vec![entry(B, Some(1000), None)],
            1500,
            B,
            vec![],
            None,
            Some(700),
        ),
        (
            "heartbeat expired",
            vec![],
            B,
            0,
            vec![entry(B, Some(1000), None)],
            2200,
            A,
            vec![B],
            Some(HandOverCause::HeartbeatTimeout),
            None,
        ),
        (
            "completed",
            vec![],
            B,
            0,
            vec![entry(B, Some(10), Some(70))],
            80,
            A,
            vec![B],
            Some(HandOverCause::Completed),
            None,
        ),
        // The second interceptor's clock starts at its recorded activation (its predecessor's
        // completion here), not at the request's creation (else it would time out at once).
        (
            "second one, clock from predecessor's completion",
            vec![B],
            A,
            1000,
            vec![entry(B, Some(10), Some(1000))],
            2100,
            A,
            vec![B],
            None,
            Some(100),
        ),
        (
            "second one timed out after its predecessor timed out",
            vec![B],
            A,
            1300,
            vec![entry(B, Some(100), None)],
            2600,
            IMPERATIVE,
            vec![B, A],
            Some(HandOverCause::HeartbeatTimeout),
            None,
        ),
        (
            "second one completed",
            vec![B],
            A,
            20,
            vec![entry(B, Some(10), Some(20)), entry(A, Some(30), Some(40))],
            50,
            IMPERATIVE,
            vec![B, A],
            Some(HandOverCause::Completed),
            None,
        ),
        (
            "imperative never times out",
            vec![B, A],
            IMPERATIVE,
            0,
            vec![],
            100_000,
            IMPERATIVE,
            vec![B, A],
            None,
            None,
        ),
    ];
    for (
        case,
        processed,
        current,
        activated,
        entries,
        now,
        want_active,
        want_processed,
        cause,
        requeue,
    ) in cases
    {
        let mut status = status(&targets, &processed, Some(current), entries);
        status.activation_time = Some(Time(t(activated)));
        let req = request(&["r.example.com"], Some(status));
        let plan = reconcile(
            &req,
            Some(&pod(Some("actor-b.example.com,actor-a.example.com"))),
            t(now),
            &config(),
        );
        assert_eq!(active(&plan), Some(want_active), "{case}");
        assert_eq!(plan.status.processed_interceptors, want_processed, "{case}");
        let transitions: Vec<_> = cause
            .map(|cause| Transition::HandedOver {
                from: current.into(),
                to: want_active.into(),
                cause,
            })
            .into_iter()
            .collect();
        assert_eq!(plan.transitions, transitions, "{case}");
        assert_eq!(
            plan.requeue_after,
            requeue.map(SignedDuration::from_secs),
            "{case}"
        );
    }
}

/// KEP walkthrough "Single Dynamic Requester and EvictionRequest Cancellation".
#[test]
fn cancellation_clears_the_active_interceptor() {
    let req = request(
        &[],
        Some(status(
            &[B, A, IMPERATIVE],
            &[],
            Some(B),
            vec![entry(B, Some(10), None)],
        )),
    );
    let plan = reconcile(
        &req,
        Some(&pod(Some("actor-b.example.com,actor-a.example.com"))),
        t(100),
        &config(),
    );
    assert_eq!(
        condition(&plan, "Canceled"),
        Some((
            "NoRequesters".into(),
            "All requesters have withdrawn; the eviction is no longer requested.".into()
        ))
    );
    assert_eq!(active(&plan), None);
    assert_eq!(plan.status.target_interceptors.len(), 3, "targets stay");
}

/// KEP walkthrough "Multiple Dynamic Requesters and No EvictionRequest Cancellation": one
/// requester withdrawing while another remains changes nothing.
#[test]
fn one_of_two_requesters_withdrawing_changes_nothing() {
    let current = status(
        &[B, A, IMPERATIVE],
        &[],
        Some(B),
        vec![entry(B, Some(10), None)],
    );
    let pod = pod(Some("actor-b.example.com,actor-a.example.com"));
    let both = reconcile(
        &request(
            &["drain.example.com", "deschedule.example.com"],
            Some(current.clone()),
        ),
        Some(&pod),
        t(100),
        &config(),
    );
    let one = reconcile(
        &request(&["deschedule.example.com"], Some(current.clone())),
        Some(&pod),
        t(100),
        &config(),
    );
    assert_eq!(both.status, one.status);
    assert_eq!(
        controller_status(Some(&current)),
        one.status,
        "no write needed"
    );
    assert!(one.transitions.is_empty());
}

#[test]
fn imperative_eviction_decisions() {
    let req = request(
        &["r.example.com"],
        Some(status(&[IMPERATIVE], &[], Some(IMPERATIVE), vec![])),
    );
    let mut terminating = pod(None);
    terminating.metadata.deletion_timestamp = Some(Time(t(0)));
    let mut mirror = pod(None);
    mirror.metadata.annotations =
        Some(BTreeMap::from([(MIRROR_POD_ANNOTATION.into(), "x".into())]));
    let mut daemon = pod(None);
    daemon.metadata.owner_references = Some(vec![OwnerReference {
        kind: "DaemonSet".into(),
        name: "ds".into(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    assert_eq!(
        reconcile(&req, Some(&pod(None)), t(1), &config()).imperative,
        Some(Imperative::Evict)
    );
    assert_eq!(
        reconcile(&req, Some(&terminating), t(1), &config()).imperative,
        Some(Imperative::Terminating)
    );
    for unsupported in [mirror, daemon] {
        let Some(Imperative::Unsupported(message)) =
            reconcile(&req, Some(&unsupported), t(1), &config()).imperative
        else {
            panic!("{unsupported:?} must not be API-evicted");
        };
        assert!(
            message.starts_with("API-initiated eviction of "),
            "{message}"
        );
    }
}

#[test]
fn imperative_entry_keeps_start_and_heartbeat_steps() {
    let mut plan = Plan::default();
    plan.record_imperative(&message_eviction_failed(1), t(10));
    plan.record_imperative(&message_eviction_failed(2), t(30));
    let entry = &plan.status.interceptors[0];
    assert_eq!(entry.start_time, Some(Time(t(10))));
    assert_eq!(
        entry.heartbeat_time,
        Some(Time(t(10))),
        "less than 60 s later: kept"
    );
    assert_eq!(
        entry.message,
        "Could not evict a pod due to failing eviction requests, number of retries: 2"
    );
    plan.record_imperative(&message_eviction_failed(3), t(75));
    assert_eq!(
        plan.status.interceptors[0].heartbeat_time,
        Some(Time(t(75)))
    );
    assert_eq!(plan.status.interceptors.len(), 1);
    assert_eq!(
        retries_in_message(&plan.status.interceptors[0].message),
        Some(3)
    );
    assert_eq!(retries_in_message("Evicting"), None);
}

#[test]
fn heartbeat_steps() {
    // (previous, now, written)
    let cases = [
        (None, 5, 5),
        (Some(0), 59, 0),
        (Some(0), 60, 60),
        (Some(0), 500, 500),
    ];
    for (previous, now, want) in cases {
        assert_eq!(
            next_heartbeat(previous.map(t), t(now)),
            t(want),
            "{previous:?} {now}"
        );
    }
    let fraction = t(7).checked_add(SignedDuration::from_millis(900)).unwrap();
    assert_eq!(
        next_heartbeat(None, fraction),
        t(7),
        "whole seconds, as stored"
    );
}

#[test]
fn interceptor_annotation() {
    let ok = [
        ("", vec![]),
        ("a.example.com", vec!["a.example.com"]),
        (
            " b.example.com , a.example.com ",
            vec!["b.example.com", "a.example.com"],
        ),
        (
            "actor-b.k8s.io.example.com",
            vec!["actor-b.k8s.io.example.com"],
        ),
    ];
    for (value, want) in ok {
        assert_eq!(
            PodInterceptors::parse(value),
            Ok(PodInterceptors(want.into_iter().map(Into::into).collect())),
            "{value:?}"
        );
    }
    let sixteen: Vec<String> = (0..16).map(|i| format!("i{i}.example.com")).collect();
    let err = [
        (
            "single",
            InterceptorsError::NotFqdn {
                position: 1,
                entry: "single".into(),
            },
        ),
        (
            "a.example.com,,b.example.com",
            InterceptorsError::NotFqdn {
                position: 2,
                entry: String::new(),
            },
        ),
        (
            "a.example.com,A.example.com",
            InterceptorsError::NotFqdn {
                position: 2,
                entry: "A.example.com".into(),
            },
        ),
        (
            "-a.example.com",
            InterceptorsError::NotFqdn {
                position: 1,
                entry: "-a.example.com".into(),
            },
        ),
        (
            "a.example.com,a.example.com",
            InterceptorsError::Duplicate {
                position: 2,
                entry: "a.example.com".into(),
            },
        ),
        (
            "imperative-eviction.k8s.io",
            InterceptorsError::Default {
                position: 1,
                entry: "imperative-eviction.k8s.io".into(),
            },
        ),
        (
            "a.example.com,actor-b.k8s.io",
            InterceptorsError::Reserved {
                position: 2,
                entry: "actor-b.k8s.io".into(),
            },
        ),
        (&sixteen.join(","), InterceptorsError::TooMany { count: 16 }),
    ];
    for (value, want) in err {
        assert_eq!(PodInterceptors::parse(value), Err(want), "{value:?}");
    }
    assert!(
        PodInterceptors::parse(&sixteen[..15].join(",")).is_ok(),
        "15 are allowed"
    );
    assert!(is_fqdn(&format!("{}.com", "a".repeat(63))));
    assert!(!is_fqdn(&format!("{}.com", "a".repeat(64))));
}

/// A hostile annotation as big as the apiserver allows (256 KiB) listing 25k names: the count is
/// the error, found without checking every entry against every other (a quadratic duplicate
/// check took seconds per pod, on every reconcile and every pod admission).
#[test]
fn a_huge_interceptor_list_is_refused_as_too_many_before_its_entries_are_checked() {
    let mut names: Vec<String> = (0..25_000).map(|i| format!("i{i}.io")).collect();
    names.push("Not-A-Name".to_owned());
    let value = names.join(",");
    assert!(value.len() <= 256 * 1024, "{} bytes", value.len());
    assert_eq!(
        PodInterceptors::parse(&value),
        Err(InterceptorsError::TooMany { count: 25_001 })
    );
}

proptest! {
    #[test]
    fn parse_never_panics_and_accepts_what_it_prints(value in "[a-z0-9.,\\- ]{0,80}") {
        if let Ok(parsed) = PodInterceptors::parse(&value) {
            prop_assert_eq!(PodInterceptors::parse(&parsed.to_string()), Ok(parsed.clone()));
            prop_assert!(parsed.0.iter().all(|n| is_fqdn(n)));
        }
    }
}

#[test]
fn admission_time_rules() {
    let targets = [B, A, IMPERATIVE];
    let old = request(
        &["r.example.com"],
        Some(status(
            &targets,
            &[],
            Some(B),
            vec![entry(B, Some(100), None)],
        )),
    );
    let now = t(200);
    let timeout = SignedDuration::from_mins(20);
    let with = |entries: Vec<InterceptorStatus>, processed: &[&str], active: &str| {
        request(
            &["r.example.com"],
            Some(status(&targets, processed, Some(active), entries)),
        )
    };
    let mut future = entry(B, Some(100), None);
    future.heartbeat_time = Some(Time(t(211)));
    let mut expected_past = entry(B, Some(100), None);
    expected_past.expected_finish_time = Some(Time(t(100)));
    // (case, new request, denial starts with)
    let cases = [
        (
            "heartbeat within the skew",
            with(
                vec![{
                    let mut e = entry(B, Some(100), None);
                    e.heartbeat_time = Some(Time(t(210)));
                    e
                }],
                &[],
                B,
            ),
            None,
        ),
        (
            "heartbeat in the future",
            with(vec![future], &[], B),
            Some("status.interceptors[actor-b.example.com].heartbeatTime"),
        ),
        (
            "expected finish in the past",
            with(vec![expected_past], &[], B),
            Some("status.interceptors[actor-b.example.com].expectedFinishTime"),
        ),
        (
            "completion now, hand over in the same write",
            with(vec![entry(B, Some(100), Some(200))], &[B], A),
            None,
        ),
        (
            "completion in the past",
            with(vec![entry(B, Some(100), Some(150))], &[B], A),
            Some("status.interceptors[actor-b.example.com].completionTime"),
        ),
        (
            "hand over before the deadline",
            with(vec![entry(B, Some(100), None)], &[B], A),
            Some(
                "status.activeInterceptors may change from actor-b.example.com to actor-a.example.com only once",
            ),
        ),
        (
            "unchanged entries are not re-checked",
            with(vec![entry(B, Some(100), None)], &[], B),
            None,
        ),
    ];
    for (case, new, denial) in cases {
        let result = admission::validate_update(&old, &new, now, timeout);
        match denial {
            None => assert_eq!(result, Ok(()), "{case}"),
            Some(prefix) => assert!(
                result.as_ref().is_err_and(|m| m.starts_with(prefix)),
                "{case}: {result:?}"
            ),
        }
    }
    let timed_out = admission::validate_update(
        &old,
        &with(vec![entry(B, Some(100), None)], &[B], A),
        t(1300),
        timeout,
    );
    assert_eq!(timed_out, Ok(()), "heartbeat deadline passed");
}

#[test]
fn describe_in_words() {
    let req = request(
        &["drain.example.com"],
        Some(status(
            &[B, A, IMPERATIVE],
            &[B],
            Some(A),
            vec![entry(B, Some(10), Some(70))],
        )),
    );
    let text = describe(&req, t(100)).join("\n");
    for expected in [
        "asks for the eviction of pod blueberry/p-1",
        "Requested by drain.example.com.",
        "Interceptors, in order: actor-b.example.com, actor-a.example.com, imperative-eviction.k8s.io.",
        "Done with: actor-b.example.com.",
        "Active: actor-a.example.com.",
        "completed 2027-01-15T08:01:10Z (30s ago)",
        "The eviction is in progress.",
    ] {
        assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
    }
}

#[test]
fn admission_only_active_interceptors_write_entries() {
    let targets = [B, A, IMPERATIVE];
    let old = request(
        &["r.example.com"],
        Some(status(&targets, &[], Some(B), vec![])),
    );
    let new = request(
        &["r.example.com"],
        Some(status(&targets, &[], Some(B), vec![entry(A, None, None)])),
    );
    assert_eq!(
        admission::validate_update(&old, &new, t(0), SignedDuration::from_mins(20)),
        Err("status.interceptors[actor-a.example.com] may be written only while actor-a.example.com is active".into())
    );
}

/// After a controller outage longer than the heartbeat timeout, the
/// interceptor the controller hands over to gets its full window from that moment, not from
/// when its predecessor's deadline passed (which lies in the outage).
#[test]
fn successor_gets_its_full_window_after_controller_downtime() {
    let targets = [B, A, IMPERATIVE];
    let pod = pod(Some("actor-b.example.com,actor-a.example.com"));
    let mut req = request(
        &["r.example.com"],
        Some(status(&targets, &[], Some(B), vec![])),
    );
    req.status.as_mut().unwrap().activation_time = Some(Time(t(0)));
    // Down from 100 s to 5000 s: B's deadline (1200 s) passed during the outage.
    let plan = reconcile(&req, Some(&pod), t(5000), &config());
    assert_eq!(active(&plan), Some(A), "B timed out");
    let recorded = plan.status.activation_time.clone();
    req.status = Some(plan.status);
    let plan = reconcile(&req, Some(&pod), t(5001), &config());
    assert_eq!(active(&plan), Some(A), "A keeps its window");
    assert_eq!(recorded, Some(Time(t(5000))), "activation recorded");
    assert_eq!(plan.requeue_after, Some(SignedDuration::from_secs(1199)));
    // A request from before activation was recorded: the window starts now, never earlier.
    req.status.as_mut().unwrap().activation_time = None;
    let plan = reconcile(&req, Some(&pod), t(9000), &config());
    assert_eq!(active(&plan), Some(A), "no early hand-over");
    assert_eq!(plan.status.activation_time, Some(Time(t(9000))));
}

/// Only the controller's identity writes the controller's part of the
/// status; anyone else may write only the active interceptor's own entry.
#[test]
fn admission_controller_fields_are_the_controller_s() {
    let targets = [B, A, IMPERATIVE];
    let old = request(
        &["r.example.com"],
        Some(status(&targets, &[], Some(B), vec![])),
    );
    let with = |change: fn(&mut EvictionRequestStatus)| {
        let mut new = old.clone();
        change(new.status.as_mut().unwrap());
        new
    };
    // (case, new request, denial starts with)
    let cases: Vec<(&str, EvictionRequest, Option<&str>)> = vec![
        (
            "the active interceptor's own entry",
            with(|s| s.interceptors = vec![entry(B, Some(0), None)]),
            None,
        ),
        (
            "a condition",
            with(|s| {
                s.conditions = vec![Condition {
                    type_: "Canceled".into(),
                    status: "True".into(),
                    reason: "Forged".into(),
                    message: String::new(),
                    last_transition_time: Time(t(0)),
                    observed_generation: None,
                }]
            }),
            Some("status.conditions is written only by the eviction request controller"),
        ),
        (
            "the hand-over",
            with(|s| {
                s.processed_interceptors = vec![B.into()];
                s.active_interceptors = vec![A.into()];
            }),
            Some("status.activeInterceptors is written only by the eviction request controller"),
        ),
        (
            "the activation time",
            with(|s| s.activation_time = Some(Time(t(-5000)))),
            Some("status.activationTime is written only by the eviction request controller"),
        ),
        (
            "the observed generation",
            with(|s| s.observed_generation = Some(7)),
            Some("status.observedGeneration is written only by the eviction request controller"),
        ),
        (
            "the imperative interceptor's entry",
            with(|s| s.interceptors = vec![entry(IMPERATIVE, Some(0), None)]),
            Some("status.interceptors[imperative-eviction.k8s.io] is written only by"),
        ),
        (
            "another interceptor's entry",
            with(|s| s.interceptors = vec![entry(A, Some(0), None)]),
            Some("status.interceptors[actor-a.example.com] may be written only while"),
        ),
    ];
    for (case, new, denial) in cases {
        let result = admission::validate_writer(Some(&old), &new);
        match denial {
            None => assert_eq!(result, Ok(()), "{case}"),
            Some(prefix) => assert!(
                result.as_ref().is_err_and(|m| m.starts_with(prefix)),
                "{case}: {result:?}"
            ),
        }
    }
    // A request created with targetInterceptors pre-seeded.
    let mut seeded = request(
        &["r.example.com"],
        Some(status(&[IMPERATIVE], &[], None, vec![])),
    );
    seeded.status.as_mut().unwrap().observed_generation = None;
    let result = admission::validate_writer(None, &seeded);
    assert!(
        result.as_ref().is_err_and(|m| m.starts_with(
            "status.targetInterceptors is written only by the eviction request controller"
        )),
        "{result:?}"
    );
    let identity = admission::ControllerIdentity {
        usernames: vec!["system:serviceaccount:evictkit:evictionrequest-controller".into()],
        groups: vec!["evictkit:controllers".into()],
    };
    assert!(identity.matches(
        Some("system:serviceaccount:evictkit:evictionrequest-controller"),
        &[]
    ));
    assert!(identity.matches(Some("bob"), &["evictkit:controllers".into()]));
    assert!(!identity.matches(Some("bob"), &["system:authenticated".into()]));
    assert!(!identity.matches(None, &[]));
}

/// The KEP reserves `*.k8s.io` names; only the controller's default
/// interceptor `imperative-eviction.k8s.io` carries one.
#[test]
fn reserved_k8s_io_names() {
    for (name, reserved) in [
        ("actor-b.k8s.io", true),
        ("k8s.io", true),
        ("imperative-eviction.k8s.io", true),
        ("actor.k8s.io.example.com", false),
        ("notk8s.io", false),
        ("actor-b.example.com", false),
    ] {
        assert_eq!(is_reserved(name), reserved, "{name}");
    }
    let new = request(&["drain.example.com", "drain.k8s.io"], None);
    assert_eq!(
        admission::validate_names(&new),
        Err("spec.requesters[drain.k8s.io]: names ending in .k8s.io are reserved for Kubernetes (KEP-4563); use a domain of your own".into())
    );
    assert_eq!(
        admission::validate_names(&request(&["drain.example.com"], None)),
        Ok(())
    );
}

/// A request canceled by validation is final for its pod; one canceled
/// because its requesters withdrew is not.
#[test]
fn refusal_is_a_validation_failure_only() {
    let workload = {
        let mut pod = pod(None);
        pod.metadata.owner_references = Some(vec![OwnerReference {
            kind: "PodGroup".into(),
            name: "g".into(),
            ..OwnerReference::default()
        }]);
        pod
    };
    // (case, pod, requesters, refusal)
    type Case<'a> = (&'a str, Option<Pod>, &'a [&'a str], Option<String>);
    let cases: Vec<Case> = vec![
        (
            "pod group",
            Some(workload),
            &["r.example.com"],
            Some(message_workload("p-1")),
        ),
        (
            "malformed interceptors",
            Some(pod(Some("Not_FQDN"))),
            &["r.example.com"],
            Some("Target Pod p-1 has invalid eviction interceptors: entry 1 \"Not_FQDN\" of annotation evictkit.io/eviction-interceptors is not a fully qualified domain name (lowercase alphanumeric characters, '-' and '.', at least two labels of at most 63 characters, at most 253 characters).".into()),
        ),
        ("target missing", None, &["r.example.com"], Some(message_not_found("p-1"))),
        ("all requesters withdrew", Some(pod(None)), &[], None),
        ("in progress", Some(pod(None)), &["r.example.com"], None),
    ];
    for (case, pod, requesters, want) in cases {
        let mut req = request(requesters, None);
        req.status = Some(reconcile(&req, pod.as_ref(), t(0), &config()).status);
        assert_eq!(refusal(&req), want.as_deref(), "{case}");
    }
}

/// A label removed from the pod goes from the request too, if the controller
/// put it there (its managedFields entry); a label someone else set on the request stays.
#[test]
fn label_removals_are_synchronised() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    let managed = |manager: &str, keys: &[&str], subresource: Option<&str>| {
        let labels: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (format!("f:{k}"), serde_json::json!({})))
            .collect();
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(
                serde_json::json!({"f:metadata": {"f:labels": labels}}),
            )),
            subresource: subresource.map(Into::into),
            ..ManagedFieldsEntry::default()
        }
    };
    let pod = pod(None); // app=nginx
    let mut req = request(&["r.example.com"], None);
    req.metadata.labels = Some(BTreeMap::from([
        ("app".into(), "nginx".into()),
        ("tier".into(), "web".into()),
        ("team".into(), "blue".into()),
    ]));
    req.metadata.managed_fields = Some(vec![
        managed(CONTROLLER_FIELD_MANAGER, &["app", "tier"], None),
        managed("r.example.com", &["team"], None),
    ]);
    let plan = reconcile(&req, Some(&pod), t(1), &config());
    assert_eq!(
        plan.labels,
        Some(BTreeMap::from([("tier".into(), None)])),
        "tier was removed from the pod"
    );
    req.metadata.labels.as_mut().unwrap().remove("tier");
    req.metadata.managed_fields = Some(vec![
        managed(CONTROLLER_FIELD_MANAGER, &["app"], None),
        managed("r.example.com", &["team"], None),
        managed(CONTROLLER_FIELD_MANAGER, &[], Some("status")),
    ]);
    let plan = reconcile(&req, Some(&pod), t(2), &config());
    assert_eq!(plan.labels, None, "team is the requester's");
}

/// The requester that creates a request copies the pod's labels into it and
/// names them in evictkit.io/labels-from-pod, so the controller writes no label patch; a label
/// the pod drops goes from the request as if the controller had copied it, one of the
/// requester's own stays. Before, the controller patched the labels of every request (one of
/// the 5 writes of a request without interceptors); a requester's copy without the annotation
/// left a label the pod dropped on the request (the e2e test label_removals_follow_the_pod).
#[test]
fn labels_copied_by_the_requester() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    };
    let with_labels = |pairs: &[(&str, &str)]| {
        let mut pod = pod(None);
        pod.metadata.labels = Some(labels(pairs));
        pod
    };
    let created = |pod: &Pod, own: &[(&str, &str)]| {
        let mut req = request(&["r.example.com"], None);
        let metadata = requester_metadata(None, pod.metadata.labels.as_ref(), "r.example.com");
        let mut all = metadata.labels;
        all.extend(labels(own));
        req.metadata.labels = Some(all);
        req.metadata.annotations = Some(metadata.annotations);
        req
    };
    let web = with_labels(&[("app", "nginx"), ("tier", "web")]);
    type Case<'a> = (
        &'a str,
        EvictionRequest,
        Pod,
        Option<Vec<(&'a str, Option<&'a str>)>>,
    );
    let cases: Vec<Case> = vec![
        (
            "copied by the requester",
            created(&web, &[]),
            web.clone(),
            None,
        ),
        (
            "the pod dropped tier",
            created(&web, &[]),
            with_labels(&[("app", "nginx")]),
            Some(vec![("tier", None)]),
        ),
        (
            "the pod changed tier and got zone",
            created(&web, &[]),
            with_labels(&[("app", "nginx"), ("tier", "db"), ("zone", "a")]),
            Some(vec![("tier", Some("db")), ("zone", Some("a"))]),
        ),
        (
            "the requester's own label stays",
            created(&web, &[("team", "blue")]),
            with_labels(&[("app", "nginx")]),
            Some(vec![("tier", None)]),
        ),
        (
            "a pod without labels: nothing copied, nothing to write",
            created(&with_labels(&[]), &[]),
            with_labels(&[]),
            None,
        ),
    ];
    for (case, req, pod, want) in cases {
        let want = want.map(|changes| {
            changes
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.map(str::to_owned)))
                .collect::<BTreeMap<_, _>>()
        });
        let plan = reconcile(&req, Some(&pod), t(1), &config());
        assert_eq!(plan.labels, want, "{case}");
    }
    assert_eq!(
        created(&with_labels(&[]), &[]).metadata.annotations,
        Some(BTreeMap::new()),
        "no annotation without labels"
    );
}

/// A requester applying to an existing request sends what it owns there, unchanged (an apply
/// leaving it out would remove it, one with the pod's newer values would conflict with the
/// controller's update); only a request it creates gets the pod's labels.
#[test]
fn requester_metadata_on_an_existing_request() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    let pod = pod(None); // app=nginx
    let mut req = request(&["r.example.com", "s.example.com"], None);
    req.metadata.labels = Some(BTreeMap::from([
        ("app".into(), "old".into()),
        ("tier".into(), "web".into()),
    ]));
    req.metadata.annotations = Some(BTreeMap::from([(
        LABELS_FROM_POD.into(),
        "app,tier".into(),
    )]));
    req.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("r.example.com".into()),
        operation: Some("Apply".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(serde_json::json!({"f:metadata": {
            "f:labels": {"f:app": {}, "f:tier": {}},
            "f:annotations": {format!("f:{LABELS_FROM_POD}"): {}},
        }}))),
        ..ManagedFieldsEntry::default()
    }]);
    let creator = requester_metadata(Some(&req), pod.metadata.labels.as_ref(), "r.example.com");
    assert_eq!(creator.labels, req.metadata.labels.clone().unwrap());
    assert_eq!(
        creator.annotations,
        req.metadata.annotations.clone().unwrap()
    );
    let joiner = requester_metadata(Some(&req), pod.metadata.labels.as_ref(), "s.example.com");
    assert_eq!(joiner, RequesterMetadata::default());
    let creating = requester_metadata(None, pod.metadata.labels.as_ref(), "s.example.com");
    assert_eq!(creating.labels, pod.metadata.labels.clone().unwrap());
    assert_eq!(
        creating.annotations,
        BTreeMap::from([(LABELS_FROM_POD.into(), "app".into())])
    );
}

/// A finished request gets an ownerReference to its pod (the garbage collector
/// takes it with the pod) and, but for a refusal, expires by --finished-ttl.
#[test]
fn finished_requests_are_garbage_collected() {
    let in_progress = {
        let req = request(&["r.example.com"], None);
        reconcile(&req, Some(&pod(None)), t(0), &config()).status
    };
    let withdrawn = {
        let req = request(&[], None);
        reconcile(&req, Some(&pod(None)), t(0), &config()).status
    };
    let refused = {
        let req = request(&["r.example.com"], None);
        reconcile(&req, Some(&pod(Some("Not_FQDN"))), t(0), &config()).status
    };
    let not_found = {
        let req = request(&["r.example.com"], None);
        reconcile(&req, None, t(0), &config()).status
    };
    let req = request(&["r.example.com"], None);
    let owner = owner_to_add(&req, Some(&pod(None)), &withdrawn).expect("an owner");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Pod", "p-1", UID)
    );
    assert_eq!(
        owner_to_add(&req, Some(&pod(None)), &in_progress),
        None,
        "in progress"
    );
    assert_eq!(owner_to_add(&req, None, &withdrawn), None, "pod gone");
    let mut owned = req.clone();
    owned.metadata.owner_references = Some(vec![owner]);
    assert_eq!(
        owner_to_add(&owned, Some(&pod(None)), &withdrawn),
        None,
        "there already"
    );

    assert!(!expires(&req, &in_progress), "in progress");
    assert!(expires(&req, &withdrawn), "withdrawn");
    assert!(
        !expires(&req, &refused),
        "a refusal stays while its pod lives"
    );
    assert!(expires(&req, &not_found), "nothing to keep a record for");
}

/// The interceptor annotation is checked when the pod is written.
#[test]
fn admission_of_the_pod_annotation() {
    let fine = pod(Some("actor-b.example.com,actor-a.example.com"));
    let typo = pod(Some("actor-b.example.com,Actor-A"));
    let plain = pod(None);
    let other = pod(Some("actor-a.example.com"));
    // (case, old, new, denial starts with)
    let cases: Vec<(&str, Option<&Pod>, &Pod, Option<&str>)> = vec![
        ("create, well-formed", None, &fine, None),
        ("create, none", None, &plain, None),
        (
            "create, a typo",
            None,
            &typo,
            Some(
                "entry 2 \"Actor-A\" of annotation evictkit.io/eviction-interceptors is not a fully qualified domain name",
            ),
        ),
        ("update, unchanged", Some(&fine), &fine, None),
        (
            "update, changed",
            Some(&fine),
            &other,
            Some(
                "annotation evictkit.io/eviction-interceptors is immutable (was \"actor-b.example.com,actor-a.example.com\", now \"actor-a.example.com\")",
            ),
        ),
        (
            "update, added",
            Some(&plain),
            &fine,
            Some("annotation evictkit.io/eviction-interceptors is immutable"),
        ),
        ("update of a pod without it", Some(&plain), &plain, None),
        (
            "update of a pod from before the webhook",
            Some(&typo),
            &typo,
            None,
        ),
    ];
    for (case, old, new, denial) in cases {
        let result = admission::validate_pod(old, new);
        match denial {
            None => assert_eq!(result, Ok(()), "{case}"),
            Some(prefix) => assert!(
                result.as_ref().is_err_and(|m| m.starts_with(prefix)),
                "{case}: {result:?}"
            ),
        }
    }
}
