//! The imperative eviction interceptor's decisions, its entry and its heartbeats.

use super::*;

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
