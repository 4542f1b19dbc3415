use super::*;
use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

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

#[test]
fn admit_table() {
    use Admit::*;
    use OptIn::*;
    #[rustfmt::skip]
    let cases: &[(&str, Pod, Option<&str>, OptIn, Admit)] = &[
        ("request-evict-only is evacuated", pod(&[ONLY], "Running", false), None, RequestEvictOnly, Evacuate),
        ("the same UID precondition", pod(&[ONLY], "Running", false), Some("uid-1"), RequestEvictOnly, Evacuate),
        ("pending pods too", pod(&[ONLY], "Pending", false), None, RequestEvictOnly, Evacuate),
        ("no annotation passes", pod(&[], "Running", false), None, RequestEvictOnly, Pass(super::Pass::NotOptedIn)),
        ("interceptors alone pass without the flag", pod(&[INTERCEPTORS], "Running", false), None, RequestEvictOnly, Pass(super::Pass::NotOptedIn)),
        ("interceptors with the flag", pod(&[INTERCEPTORS], "Running", false), None, AlsoInterceptorPods, Evacuate),
        ("an empty interceptor list is none", pod(&[(EVICTION_INTERCEPTORS, " ")], "Running", false), None, AlsoInterceptorPods, Pass(super::Pass::NotOptedIn)),
        ("succeeded pods pass", pod(&[ONLY], "Succeeded", false), None, RequestEvictOnly, Pass(super::Pass::Terminal)),
        ("failed pods pass", pod(&[ONLY], "Failed", false), None, RequestEvictOnly, Pass(super::Pass::Terminal)),
        ("terminating pods pass", pod(&[ONLY], "Running", true), None, RequestEvictOnly, Pass(super::Pass::Terminating)),
        ("another pod's UID passes", pod(&[ONLY], "Running", false), Some("uid-0"), RequestEvictOnly, Pass(super::Pass::OtherPod)),
        ("UID mismatch wins over opt-out", pod(&[], "Running", false), Some("uid-0"), RequestEvictOnly, Pass(super::Pass::OtherPod)),
    ];
    for (name, pod, precondition, opt_in, want) in cases {
        assert_eq!(admit(pod, *precondition, *opt_in), *want, "{name}");
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
        started: None,
        ours: false,
    };
    let half = Marks {
        in_progress: false,
        started: Some(at(0)),
        ours: true,
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
        assert_eq!(plan(state, listed, marks, at(now), ttl), want, "{name}");
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
    assert_eq!(Marks::of(&pod), ours(Some(5)));
    assert!(cleared_marks().values().all(Option::is_none));
    assert_eq!(
        cleared_marks().keys().collect::<Vec<_>>(),
        marks("x", at(0)).keys().collect::<Vec<_>>()
    );
}
