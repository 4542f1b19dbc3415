use std::time::Duration;

use evictkit_api::node_drain::NodeDrainEscalation;
use evictkit_core::drain::progress::{Progress, State};

use super::*;
use crate::report::Left;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn the_timeout_left_counts_from_the_start() {
    // (timeout, waited, left)
    let cases = [
        (secs(0), secs(0), secs(0)),
        (secs(0), secs(500), secs(0)),
        (secs(60), secs(0), secs(60)),
        (secs(60), secs(20), secs(40)),
        (secs(60), secs(60), Duration::from_millis(1)),
        (secs(60), secs(3600), Duration::from_millis(1)),
    ];
    for (timeout, waited, left) in cases {
        assert_eq!(
            remaining(timeout, waited),
            left,
            "{timeout:?} after {waited:?}"
        );
    }
}

#[test]
fn a_spec_asks_for_the_drain_of_its_flags() {
    let flags = Settings {
        nodes: vec!["n1".to_owned()],
        pod_selector: Some("app=web".to_owned()),
        options: Options {
            ignore_daemonsets: true,
            delete_emptydir_data: false,
            force: true,
        },
        timeout: secs(90),
        dry_run: false,
        api: ApiMode::Lifecycle,
        controller_namespace: "evictkit-system".to_owned(),
        eviction_api_fallback: true,
        skip_wait_for_delete_timeout: secs(30),
        escalation: Some(Escalation {
            after: secs(600),
            action: Action::EvictUnhealthy,
        }),
        grace_period: Some(0),
    };
    let back = settings("n1", &spec(&flags), secs(0)).expect("valid");
    assert_eq!(format!("{back:?}"), format!("{flags:?}"));
    let later = settings("n1", &spec(&flags), secs(30)).expect("valid");
    assert_eq!(later.timeout, secs(60));
}

#[test]
fn a_grace_period_is_in_the_spec_only_when_given() {
    let json = serde_json::to_value(NodeDrainSpec::default()).expect("serializable");
    assert!(json.get("gracePeriodSeconds").is_none(), "{json}");
    // A NodeDrain from before the field: each pod's own grace period.
    let older: NodeDrainSpec =
        serde_json::from_value(serde_json::json!({"controllerNamespace": "evictkit-system"}))
            .expect("a spec");
    let flags = settings("n1", &older, secs(0)).expect("valid");
    assert_eq!(flags.grace_period, None);
    let zero = NodeDrainSpec {
        grace_period_seconds: Some(0),
        ..older
    };
    let json = serde_json::to_value(&zero).expect("serializable");
    assert_eq!(json["gracePeriodSeconds"], 0, "{json}");
    assert_eq!(
        settings("n1", &zero, secs(0)).expect("valid").grace_period,
        Some(0)
    );
}

#[test]
fn a_spec_the_schema_would_refuse_is_named() {
    let cases: [(NodeDrainSpec, &str); 2] = [
        (
            NodeDrainSpec {
                api: Some("both".to_owned()),
                ..NodeDrainSpec::default()
            },
            "nodedrain/n1: spec.api \"both\" is not one of auto, crd, lifecycle",
        ),
        (
            NodeDrainSpec {
                escalation: Some(NodeDrainEscalation {
                    after_seconds: 1,
                    action: "evict".to_owned(),
                }),
                ..NodeDrainSpec::default()
            },
            "nodedrain/n1: spec.escalation.action \"evict\" is not one of evict-unhealthy, delete",
        ),
    ];
    for (spec, error) in cases {
        let got = settings("n1", &spec, secs(0)).expect_err("invalid");
        assert_eq!(got.to_string(), error);
    }
}

fn row(pod: &str, state: State, blocker: Option<Blocker>) -> Row {
    Row {
        pod: pod.to_owned(),
        node: "n1".to_owned(),
        progress: Progress {
            state,
            actor: None,
            message: None,
            heartbeat: None,
        },
        blocker,
        skipped: false,
    }
}

#[test]
fn the_status_names_each_pod_and_what_keeps_it() {
    let now = Timestamp::UNIX_EPOCH;
    let budget = Blocker::Budget {
        pdb: "db".to_owned(),
        message: "needs 1 more healthy pod".to_owned(),
    };
    let (mut observer, receiver) = StatusObserver::new(NodeDrainStatus::default());
    let rows = [
        row("shop/db-0", State::InProgress, Some(budget)),
        row("shop/web-0", State::Gone, None),
        Row {
            skipped: true,
            ..row("shop/old-0", State::Terminating, None)
        },
    ];
    observer.round(&rows, now, now).expect("no I/O");
    let status = receiver.borrow().clone();
    assert_eq!(status.start_time.as_deref(), Some("1970-01-01T00:00:00Z"));
    assert_eq!(status.gone, 2);
    let states: Vec<(&str, &str, Option<&str>)> = status
        .pod_states
        .iter()
        .map(|p| {
            (
                p.pod.as_str(),
                p.state.as_str(),
                p.blocker.as_ref().and_then(|b| b.name.as_deref()),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("shop/db-0", "InProgress", Some("db")),
            ("shop/web-0", "Gone", None),
            ("shop/old-0", "Skipped", None),
        ]
    );
    let blocker = status.pod_states[0].blocker.as_ref().expect("a blocker");
    assert_eq!(
        (blocker.kind.as_str(), blocker.message.as_str()),
        ("PodDisruptionBudget", "needs 1 more healthy pod")
    );
}

#[test]
fn a_start_time_survives_the_drain_taken_up_again() {
    let first = NodeDrainStatus {
        start_time: Some("2026-01-01T00:00:00Z".to_owned()),
        ..NodeDrainStatus::default()
    };
    let (mut observer, receiver) = StatusObserver::new(first);
    let now: Timestamp = "2026-01-01T00:05:00Z".parse().expect("a time");
    observer.round(&[], now, now).expect("no I/O");
    assert_eq!(
        receiver.borrow().start_time.as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
}

#[test]
fn a_finished_status_says_how_and_what_was_withdrawn() {
    let now = Timestamp::UNIX_EPOCH;
    let (mut observer, _receiver) = StatusObserver::new(NodeDrainStatus::default());
    let rows = [
        row("shop/db-0", State::InProgress, None),
        row("shop/db-1", State::InProgress, None),
        row("shop/web-0", State::Gone, None),
    ];
    observer.round(&rows, now, now).expect("no I/O");
    let left = |i: usize, withdrawal| Left {
        row: rows[i].clone(),
        withdrawal,
    };
    let report = Report {
        ending: Ending::TimedOut(secs(5)),
        nodes: vec!["n1".to_owned()],
        started: Some(now),
        ended: now,
        pods: 3,
        gone: 1,
        left: vec![
            left(0, Withdrawal::Withdrawn),
            left(1, Withdrawal::Failed("forbidden".to_owned())),
        ],
    };
    let status = finished(observer.status().clone(), &report, secs(20));
    assert_eq!(status.result.as_deref(), Some("timeout"));
    assert_eq!(
        status.message.as_deref(),
        Some("the timeout (20s) passed; the requests of the pods left are withdrawn")
    );
    assert_eq!((status.pods, status.gone), (3, 1));
    let withdrawn: Vec<(bool, Option<&str>)> = status
        .pod_states
        .iter()
        .map(|p| (p.withdrawn, p.message.as_deref()))
        .collect();
    assert_eq!(
        withdrawn,
        [
            (true, None),
            (
                false,
                Some("cannot withdraw its EvictionRequest: forbidden")
            ),
            (false, None),
        ]
    );
}
