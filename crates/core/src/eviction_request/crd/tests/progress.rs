//! A request taken one step by the controller: validation, the target's end, interceptors
//! selected and handed over, cancellation, refusal, and how it reads in words.

use super::*;

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
