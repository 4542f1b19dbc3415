use k8s_openapi::api::core::v1::{EvictionResponder, PodSpec, PodStatus};
use k8s_openapi::api::lifecycle::v1alpha1::{
    EvictionPodReference, EvictionRequestPodReference, EvictionRequestSpec, EvictionRequestTarget,
    EvictionSpec, EvictionTarget,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const UID: &str = "0c6a1e5e-7c55-4c43-9d0a-0b5cf3a1e001";
const IMPERATIVE: &str = IMPERATIVE_EVICTOR_RESPONDER;

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn config() -> Config {
    Config::default()
}

fn pod(responders: &[(&str, i32)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some("ns".into()),
            uid: Some(UID.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            eviction_responders: Some(
                responders
                    .iter()
                    .map(|(name, priority)| EvictionResponder {
                        name: (*name).into(),
                        priority: *priority,
                    })
                    .collect(),
            ),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    }
}

fn request(requester: &str, intent: &str, created: i64) -> EvictionRequest {
    EvictionRequest {
        metadata: ObjectMeta {
            name: Some(format!("{}-web-0", requester.replace(['/', '.'], "-"))),
            namespace: Some("ns".into()),
            creation_timestamp: Some(Time(t(created))),
            ..ObjectMeta::default()
        },
        spec: EvictionRequestSpec {
            intent: intent.into(),
            requester: requester.into(),
            target: EvictionRequestTarget {
                pod: Some(EvictionRequestPodReference {
                    name: "web-0".into(),
                    uid: UID.into(),
                }),
            },
        },
        status: None,
    }
}

fn responder(name: &str, priority: i32, state: &str) -> TargetResponder {
    TargetResponder {
        name: name.into(),
        priority,
        state: state.into(),
    }
}

fn entry(
    name: &str,
    start: Option<i64>,
    heartbeat: Option<i64>,
    completion: Option<i64>,
) -> ResponderStatus {
    ResponderStatus {
        name: name.into(),
        start_time: start.map(|s| Time(t(s))),
        heartbeat_time: heartbeat.map(|s| Time(t(s))),
        completion_time: completion.map(|s| Time(t(s))),
        ..ResponderStatus::default()
    }
}

fn eviction(status: Option<EvictionStatus>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some("pod-1-web-0".into()),
            namespace: Some("ns".into()),
            generation: Some(1),
            creation_timestamp: Some(Time(t(0))),
            ..ObjectMeta::default()
        },
        spec: EvictionSpec {
            target: EvictionTarget {
                pod: Some(EvictionPodReference {
                    name: "web-0".into(),
                    uid: UID.into(),
                }),
            },
        },
        status,
    }
}

fn status(responders: Vec<TargetResponder>, entries: Vec<ResponderStatus>) -> EvictionStatus {
    EvictionStatus {
        target_responders: Some(responders),
        responders: Some(entries),
        ..EvictionStatus::default()
    }
}

fn states(progress: &Progress) -> Vec<(String, String)> {
    progress
        .status
        .target_responders
        .iter()
        .flatten()
        .map(|r| (r.name.clone(), r.state.clone()))
        .collect()
}

fn cond<'a>(progress: &'a Progress, kind: &str) -> (&'a str, &'a str) {
    let c = condition(progress.status.conditions.as_deref(), kind).expect("condition set");
    (c.status.as_str(), c.reason.as_str())
}

fn start_of(progress: &Progress, name: &str) -> Option<Timestamp> {
    progress
        .status
        .responders
        .iter()
        .flatten()
        .find(|r| r.name == name)
        .and_then(|r| r.start_time.as_ref().map(|s| s.0))
}

fn names(list: &[TargetResponder]) -> Vec<&str> {
    list.iter().map(|r| r.name.as_str()).collect()
}

#[test]
fn responders_are_selected_by_priority_then_top_level_domain_first() {
    // Facts of the type's doc: higher priority first; on a tie the top domain labels are
    // compared first, then lower ones, a shorter domain first, the key last.
    type Case<'a> = (&'a [(&'a str, i32)], &'a [&'a str]);
    let cases: &[Case] = &[
        (&[("b.io/x", 1000), ("a.io/x", 2000)], &["a.io/x", "b.io/x"]),
        (
            &[("a.example.com/x", 1000), ("z.example.io/x", 1000)],
            &["a.example.com/x", "z.example.io/x"],
        ),
        (
            &[("b.acme.io/x", 1000), ("a.zeta.io/x", 1000)],
            &["b.acme.io/x", "a.zeta.io/x"],
        ),
        (
            &[("sub.acme.io/x", 1000), ("acme.io/x", 1000)],
            &["acme.io/x", "sub.acme.io/x"],
        ),
        (
            &[("acme.io/b", 1000), ("acme.io/a", 1000)],
            &["acme.io/a", "acme.io/b"],
        ),
    ];
    for (input, expected) in cases {
        let mut list: Vec<TargetResponder> = input
            .iter()
            .map(|(n, p)| responder(n, *p, STATE_INACTIVE))
            .collect();
        list.sort_by(responder_order);
        assert_eq!(&names(&list), expected, "{input:?}");
    }
}

#[test]
fn target_responders_are_the_pods_plus_the_imperative_evictor_at_priority_100() {
    let pod = pod(&[("low.example.com/r", 1000), ("owner.example.com/r", 10000)]);
    let list = initial_responders(Target::Present(&pod));
    assert_eq!(
        names(&list),
        ["owner.example.com/r", "low.example.com/r", IMPERATIVE]
    );
    assert_eq!(list[2].priority, 100);
    assert!(list.iter().all(|r| r.state == STATE_INACTIVE));
    assert_eq!(names(&initial_responders(Target::Gone)), [IMPERATIVE]);
}

#[test]
fn requesters_are_ordered_as_upstream_and_withdrawals_are_remembered() {
    let a = request("a.example.com/r", INTENT_EVICTION, 1);
    let b = request("b.example.com/r", INTENT_WITHDRAWN, 2);
    let mut c = request("c.example.com/r", INTENT_EVICTION, 3);
    c.metadata.deletion_timestamp = Some(Time(t(4)));
    let previous = vec![Requester {
        name: "gone.example.com/r".into(),
        intent: INTENT_EVICTION.into(),
    }];
    let got = requesters(&previous, &[&c, &b, &a]);
    let pairs: Vec<(&str, &str)> = got
        .iter()
        .map(|r| (r.name.as_str(), r.intent.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("a.example.com/r", INTENT_EVICTION),
            ("b.example.com/r", INTENT_WITHDRAWN),
            ("c.example.com/r", INTENT_WITHDRAWN),
            ("gone.example.com/r", INTENT_WITHDRAWN),
        ]
    );
    // Upstream rebuilds the order at each step: requests asking for eviction first (oldest
    // first), then withdrawn ones, deleted ones, and requesters known only from the status.
    let later = request("later.example.com/r", INTENT_EVICTION, 5);
    let got = requesters(&got, &[&later, &b, &a]);
    let names: Vec<&str> = got.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "a.example.com/r",
            "later.example.com/r",
            "b.example.com/r",
            "c.example.com/r",
            "gone.example.com/r",
        ]
    );
}

#[test]
fn beyond_100_requesters_the_withdrawn_are_dropped_first() {
    let previous: Vec<Requester> = (0..60)
        .map(|i| Requester {
            name: format!("old{i}.example.com/r"),
            intent: INTENT_EVICTION.into(),
        })
        .collect();
    let requests: Vec<EvictionRequest> = (0..50)
        .map(|i| request(&format!("new{i}.example.com/r"), INTENT_EVICTION, i))
        .collect();
    let refs: Vec<&EvictionRequest> = requests.iter().collect();
    let got = requesters(&previous, &refs);
    assert_eq!(got.len(), MAX_REQUESTERS);
    // The 60 old ones have no request any more (Withdrawn): 10 of them go, every new one stays.
    assert!(got.iter().filter(|r| r.name.starts_with("new")).count() == 50);
    assert!(got.iter().filter(|r| r.intent == INTENT_WITHDRAWN).count() == 50);
}

#[test]
fn participant_labels_name_each_role() {
    let a = request("a.example.com/r", INTENT_EVICTION, 1);
    let both = request("both.example.com/r", INTENT_EVICTION, 1);
    let responders = [
        responder("both.example.com/r", 1000, STATE_INACTIVE),
        responder(IMPERATIVE, 100, STATE_INACTIVE),
    ];
    let labels = participant_labels(&[&a, &both], &responders);
    assert_eq!(labels["a.example.com/r"], ROLE_REQUESTER);
    assert_eq!(labels["both.example.com/r"], ROLE_REQUESTER_RESPONDER);
    assert_eq!(labels[IMPERATIVE], ROLE_RESPONDER);
}

#[test]
fn evictions_are_named_after_the_pod_with_a_counter() {
    assert_eq!(eviction_name("web-0", []), "pod-1-web-0");
    assert_eq!(
        eviction_name("web-0", ["pod-1-web-0", "pod-3-web-0", "pod-7-web-1"]),
        "pod-4-web-0"
    );
    assert_eq!(eviction_name(&"x".repeat(300), []).len(), 253);
}

#[test]
fn first_step_activates_the_top_responder_with_a_start_time_of_now() {
    let pod = pod(&[("owner.example.com/r", 10000)]);
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let p = progress(
        &eviction(None),
        Target::Present(&pod),
        &[&a],
        t(10),
        &config(),
    );
    assert_eq!(
        states(&p),
        [
            ("owner.example.com/r".into(), STATE_ACTIVE.into()),
            (IMPERATIVE.into(), STATE_INACTIVE.into())
        ]
    );
    assert_eq!(start_of(&p, "owner.example.com/r"), Some(t(10)));
    assert_eq!(start_of(&p, IMPERATIVE), None);
    assert_eq!(
        cond(&p, CONDITION_FAILED),
        ("False", REASON_AWAITING_EVICTION)
    );
    assert_eq!(p.requeue_after, Some(SignedDuration::from_mins(20)));
    assert_eq!(p.transitions.len(), 1);
}

#[test]
fn responders_hand_over_on_completion_and_after_the_heartbeat_deadline() {
    let pod = pod(&[("a.example.com/r", 2000), ("b.example.com/r", 1000)]);
    let a = request("x.example.com/r", INTENT_EVICTION, 0);
    let list = vec![
        responder("a.example.com/r", 2000, STATE_ACTIVE),
        responder("b.example.com/r", 1000, STATE_INACTIVE),
        responder(IMPERATIVE, 100, STATE_INACTIVE),
    ];
    // (entry of a, now, a's state, b's state, requeue)
    let cases = [
        (
            entry("a.example.com/r", Some(0), None, Some(30)),
            40,
            STATE_COMPLETED,
            STATE_ACTIVE,
            Some(1200),
        ),
        (
            entry("a.example.com/r", Some(0), Some(100), None),
            1299,
            STATE_ACTIVE,
            STATE_INACTIVE,
            Some(1),
        ),
        (
            entry("a.example.com/r", Some(0), Some(100), None),
            1300,
            STATE_INTERRUPTED,
            STATE_ACTIVE,
            Some(1200),
        ),
        (
            entry("a.example.com/r", Some(0), None, None),
            1200,
            STATE_INTERRUPTED,
            STATE_ACTIVE,
            Some(1200),
        ),
    ];
    for (a_entry, now, a_state, b_state, requeue) in cases {
        let e = eviction(Some(status(
            list.clone(),
            vec![
                a_entry.clone(),
                entry("b.example.com/r", None, None, None),
                entry(IMPERATIVE, None, None, None),
            ],
        )));
        let p = progress(&e, Target::Present(&pod), &[&a], t(now), &config());
        let got = states(&p);
        assert_eq!(
            (got[0].1.as_str(), got[1].1.as_str()),
            (a_state, b_state),
            "{a_entry:?} at {now}"
        );
        assert_eq!(
            p.requeue_after,
            requeue.map(SignedDuration::from_secs),
            "{a_entry:?} at {now}"
        );
        if b_state == STATE_ACTIVE {
            assert_eq!(
                start_of(&p, "b.example.com/r"),
                Some(t(now)),
                "fresh startTime"
            );
        }
        assert_eq!(
            start_of(&p, "a.example.com/r"),
            Some(t(0)),
            "startTime is kept"
        );
        // Only a reported completion is a hand-over the caller confirms the pod for.
        assert_eq!(
            p.hands_over_on_completion(),
            a_state == STATE_COMPLETED,
            "{a_entry:?} at {now}"
        );
    }
}

#[test]
fn withdrawal_of_every_requester_cancels_the_active_responder_and_fails_the_eviction() {
    let pod = pod(&[]);
    let withdrawn = request("a.example.com/r", INTENT_WITHDRAWN, 0);
    let e = eviction(Some(status(
        vec![responder(IMPERATIVE, 100, STATE_ACTIVE)],
        vec![entry(IMPERATIVE, Some(0), None, None)],
    )));
    let p = progress(&e, Target::Present(&pod), &[&withdrawn], t(5), &config());
    assert_eq!(states(&p), [(IMPERATIVE.into(), STATE_CANCELED.into())]);
    assert_eq!(
        cond(&p, CONDITION_FAILED),
        ("True", REASON_CANCELED_NO_REQUESTERS)
    );
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("False", REASON_EVICTION_FAILED)
    );
    // One of two withdrawing changes nothing.
    let still = request("b.example.com/r", INTENT_EVICTION, 0);
    let p = progress(
        &e,
        Target::Present(&pod),
        &[&withdrawn, &still],
        t(5),
        &config(),
    );
    assert_eq!(states(&p), [(IMPERATIVE.into(), STATE_ACTIVE.into())]);
    assert_eq!(
        cond(&p, CONDITION_FAILED),
        ("False", REASON_AWAITING_EVICTION)
    );
}

#[test]
fn a_target_gone_is_evicted_and_the_active_responder_completed_or_interrupted() {
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let list = vec![
        responder("r.example.com/r", 1000, STATE_ACTIVE),
        responder(IMPERATIVE, 100, STATE_INACTIVE),
    ];
    for (completion, expected) in [(Some(3), STATE_COMPLETED), (None, STATE_INTERRUPTED)] {
        let e = eviction(Some(status(
            list.clone(),
            vec![
                entry("r.example.com/r", Some(0), None, completion),
                entry(IMPERATIVE, None, None, None),
            ],
        )));
        let p = progress(&e, Target::Gone, &[&a], t(5), &config());
        assert_eq!(states(&p)[0].1, expected);
        assert_eq!(
            states(&p)[1].1,
            STATE_INACTIVE,
            "no one is activated after the target went"
        );
        assert_eq!(
            cond(&p, CONDITION_TARGET_EVICTED),
            ("True", REASON_POD_DELETED)
        );
        assert_eq!(cond(&p, CONDITION_FAILED), ("False", REASON_SUCCEEDED));
    }
}

#[test]
fn a_pod_being_deleted_gives_the_active_responder_a_grace_to_report() {
    let mut deleting = pod(&[]);
    deleting.metadata.deletion_timestamp = Some(Time(t(10)));
    deleting.status.as_mut().unwrap().phase = Some("Failed".into());
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let e = eviction(Some(status(
        vec![responder(IMPERATIVE, 100, STATE_ACTIVE)],
        vec![entry(IMPERATIVE, Some(0), None, None)],
    )));
    let p = progress(&e, Target::Present(&deleting), &[&a], t(12), &config());
    assert_eq!(states(&p)[0].1, STATE_ACTIVE);
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("False", REASON_AWAITING_EVICTION)
    );
    assert_eq!(p.requeue_after, Some(SignedDuration::from_secs(3)));
    let p = progress(&e, Target::Present(&deleting), &[&a], t(15), &config());
    assert_eq!(states(&p)[0].1, STATE_INTERRUPTED);
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("True", REASON_POD_TERMINAL)
    );
}

#[test]
fn the_grace_to_report_counts_from_the_last_containers_finish_when_later_than_the_deletion() {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};
    let finished = |at: i64| ContainerStatus {
        name: "app".into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                finished_at: Some(Time(t(at))),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    };
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let e = eviction(Some(status(
        vec![responder(IMPERATIVE, 100, STATE_ACTIVE)],
        vec![entry(IMPERATIVE, Some(0), None, None)],
    )));
    // Deleted at 8, its last container finished at 10: the grace runs to 15.
    let mut deleting = pod(&[]);
    deleting.metadata.deletion_timestamp = Some(Time(t(8)));
    let status = deleting.status.as_mut().unwrap();
    status.phase = Some("Failed".into());
    status.container_statuses = Some(vec![finished(6), finished(10)]);
    let p = progress(&e, Target::Present(&deleting), &[&a], t(14), &config());
    assert_eq!(states(&p)[0].1, STATE_ACTIVE, "still within the grace");
    assert_eq!(p.requeue_after, Some(SignedDuration::from_secs(1)));
    // Terminal without a deletion: the grace counts from the finish alone.
    deleting.metadata.deletion_timestamp = None;
    let p = progress(&e, Target::Present(&deleting), &[&a], t(12), &config());
    assert_eq!(states(&p)[0].1, STATE_ACTIVE, "terminal, within the grace");
    let p = progress(&e, Target::Present(&deleting), &[&a], t(15), &config());
    assert_eq!(states(&p)[0].1, STATE_INTERRUPTED);
}

#[test]
fn a_responder_reports_within_the_grace_after_its_pod_is_removed() {
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let active = |completion| {
        eviction(Some(status(
            vec![responder(IMPERATIVE, 100, STATE_ACTIVE)],
            vec![entry(IMPERATIVE, Some(0), None, completion)],
        )))
    };
    // The watch saw the pod go at 10.
    let p = progress(
        &active(None),
        Target::Removed(t(10)),
        &[&a],
        t(11),
        &config(),
    );
    assert_eq!(states(&p)[0].1, STATE_ACTIVE);
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("False", REASON_AWAITING_EVICTION)
    );
    assert_eq!(p.requeue_after, Some(SignedDuration::from_secs(4)));
    let p = progress(
        &active(Some(11)),
        Target::Removed(t(10)),
        &[&a],
        t(12),
        &config(),
    );
    assert_eq!(states(&p)[0].1, STATE_COMPLETED);
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("True", REASON_POD_DELETED)
    );
    let p = progress(
        &active(None),
        Target::Removed(t(10)),
        &[&a],
        t(15),
        &config(),
    );
    assert_eq!(states(&p)[0].1, STATE_INTERRUPTED);
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("True", REASON_POD_DELETED)
    );
}

#[test]
fn a_target_gone_before_the_first_step_leaves_every_responder_inactive() {
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let p = progress(&eviction(None), Target::Gone, &[&a], t(1), &config());
    assert_eq!(states(&p), [(IMPERATIVE.into(), STATE_INACTIVE.into())]);
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("True", REASON_POD_DELETED)
    );
}

#[test]
fn when_every_responder_finished_without_evicting_the_eviction_fails() {
    let pod = pod(&[]);
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let e = eviction(Some(status(
        vec![responder(IMPERATIVE, 100, STATE_ACTIVE)],
        vec![entry(IMPERATIVE, Some(0), Some(100), None)],
    )));
    let p = progress(&e, Target::Present(&pod), &[&a], t(1400), &config());
    assert_eq!(states(&p)[0].1, STATE_INTERRUPTED);
    assert_eq!(
        cond(&p, CONDITION_FAILED),
        ("True", REASON_NO_FURTHER_RESPONDER)
    );
}

#[test]
fn conditions_keep_their_transition_time_while_unchanged() {
    let pod = pod(&[]);
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let first = progress(
        &eviction(None),
        Target::Present(&pod),
        &[&a],
        t(1),
        &config(),
    );
    let again = progress(
        &eviction(Some(first.status.clone())),
        Target::Present(&pod),
        &[&a],
        t(9),
        &config(),
    );
    let since = |p: &Progress| {
        condition(p.status.conditions.as_deref(), CONDITION_FAILED)
            .unwrap()
            .last_transition_time
            .0
    };
    assert_eq!(since(&again), t(1));
    assert_eq!(start_of(&again, IMPERATIVE), Some(t(1)));
}

#[test]
fn requests_follow_the_relevant_eviction_and_a_failed_one_is_replaced() {
    let failed = eviction(Some(EvictionStatus {
        conditions: Some(vec![set_condition(
            None,
            CONDITION_FAILED,
            true,
            REASON_CANCELED_NO_REQUESTERS,
            "",
            t(5),
        )]),
        ..EvictionStatus::default()
    }));
    let active = eviction(None);
    assert_eq!(relevant_eviction(&[]), (None, true));
    let (chosen, create) = relevant_eviction(&[&failed]);
    assert!(
        chosen.is_some() && create,
        "only a failed one: a new intent starts over"
    );
    let (chosen, create) = relevant_eviction(&[&failed, &active]);
    assert!(!create);
    assert!(!is_finished(chosen.unwrap()));
    // The conditions reset to AwaitingEviction with the new one.
    let old = request_conditions(None, Some(&failed), t(6));
    let reset = request_conditions(Some(old.as_slice()), Some(&active), t(7));
    let failed_condition = condition(Some(reset.as_slice()), CONDITION_FAILED).unwrap();
    assert_eq!(
        (
            failed_condition.status.as_str(),
            failed_condition.reason.as_str()
        ),
        ("False", REASON_AWAITING_EVICTION)
    );
}

#[test]
fn early_validation_refuses_missing_mismatched_and_pod_group_targets() {
    let a = request("a.example.com/r", INTENT_EVICTION, 0);
    let mut other = pod(&[]);
    other.metadata.uid = Some("another".into());
    let mut grouped = pod(&[]);
    grouped.spec.as_mut().unwrap().scheduling_group = Some(Default::default());
    let cases = [
        (None, false, Some("Target pod not found.")),
        (None, true, None),
        (Some(&other), false, Some("Target pod UID mismatch")),
        (Some(&grouped), true, Some("references a SchedulingGroup")),
    ];
    for (pod, has_eviction, expected) in cases {
        let got = request_invalid(&a, pod, has_eviction);
        match expected {
            None => assert_eq!(got, None),
            Some(text) => assert!(got.as_deref().is_some_and(|m| m.contains(text)), "{got:?}"),
        }
    }
}

#[test]
fn evictions_are_validated_themselves_as_upstream() {
    let named = |name: &str, created: i64, failed: bool| {
        let mut e = eviction(failed.then(|| EvictionStatus {
            conditions: Some(invalid_conditions(None, "", t(created))),
            ..EvictionStatus::default()
        }));
        e.metadata.name = Some(name.into());
        e.metadata.uid = Some(format!("uid-{name}"));
        e.metadata.creation_timestamp = Some(Time(t(created)));
        e
    };
    let first = named("pod-1-web-0", 0, false);
    let second = named("pod-2-web-0", 5, false);
    let failed_first = named("pod-1-web-0", 0, true);
    let running = pod(&[]);
    let mut grouped = pod(&[]);
    grouped.spec.as_mut().unwrap().scheduling_group = Some(Default::default());
    let mut podless = named("pod-3-web-0", 6, false);
    podless.spec.target.pod = None;
    let present = Target::Present(&running);
    // Made within the same second as the first (timestamps are whole seconds), and sorting
    // before it by name: the one already under way stays the one followed.
    let mut under_way = named("pod-1-web-0", 0, false);
    under_way.status = Some(status(
        vec![responder(IMPERATIVE, 100, STATE_ACTIVE)],
        vec![entry(IMPERATIVE, Some(0), None, None)],
    ));
    let same_second = named("by-hand-web-0", 0, false);
    let cases: [(&Eviction, Target<'_>, Vec<&Eviction>, Option<&str>); 8] = [
        (&under_way, present, vec![&same_second, &under_way], None),
        (
            &same_second,
            present,
            vec![&same_second, &under_way],
            Some("Active Eviction already exists"),
        ),
        (&first, present, vec![&first, &second], None),
        (
            &second,
            present,
            vec![&first, &second],
            Some("Active Eviction already exists"),
        ),
        (&second, present, vec![&failed_first, &second], None),
        (&second, Target::Gone, vec![&second], None),
        (
            &first,
            Target::Present(&grouped),
            vec![&first],
            Some("SchedulingGroup"),
        ),
        (
            &podless,
            present,
            vec![&podless],
            Some("Unsupported target type"),
        ),
    ];
    for (eviction, target, all, expected) in cases {
        let got = eviction_invalid(eviction, target, &all);
        match expected {
            None => assert_eq!(got, None, "{:?}", eviction.metadata.name),
            Some(text) => assert!(got.as_deref().is_some_and(|m| m.contains(text)), "{got:?}"),
        }
    }
    // The refusal: Failed (EvictionInvalid), its generation observed, no responder touched.
    let mut refused = second.clone();
    refused.metadata.generation = Some(2);
    let p = refuse(&refused, "Active Eviction already exists.", t(7));
    assert_eq!(
        cond(&p, CONDITION_FAILED),
        ("True", REASON_EVICTION_INVALID)
    );
    assert_eq!(
        cond(&p, CONDITION_TARGET_EVICTED),
        ("False", REASON_EVICTION_FAILED)
    );
    assert_eq!(p.status.observed_generation, Some(2));
    assert!(states(&p).is_empty() && p.transitions.is_empty());
}

/// Refused while a responder is Active (e.g. its pod joined a pod group): validation wants the
/// last active responder final in the write that sets `Failed`, so it is Canceled; the one
/// done before keeps its state, the ones after stay Inactive.
#[test]
fn an_eviction_refused_while_a_responder_is_active_cancels_it() {
    let owner = "owner.example.com/migrate";
    let helper = "helper.example.com/checkpoint";
    // (target responders, expected states after the refusal, expected transitions)
    let cases = [
        (
            vec![
                responder(owner, 10000, STATE_COMPLETED),
                responder(helper, 1000, STATE_ACTIVE),
                responder(IMPERATIVE, 100, STATE_INACTIVE),
            ],
            [STATE_COMPLETED, STATE_CANCELED, STATE_INACTIVE],
            vec![(helper, STATE_ACTIVE, STATE_CANCELED)],
        ),
        (
            vec![
                responder(owner, 10000, STATE_COMPLETED),
                responder(helper, 1000, STATE_INTERRUPTED),
                responder(IMPERATIVE, 100, STATE_ACTIVE),
            ],
            [STATE_COMPLETED, STATE_INTERRUPTED, STATE_CANCELED],
            vec![(IMPERATIVE, STATE_ACTIVE, STATE_CANCELED)],
        ),
        (
            vec![
                responder(owner, 10000, STATE_INACTIVE),
                responder(helper, 1000, STATE_INACTIVE),
                responder(IMPERATIVE, 100, STATE_INACTIVE),
            ],
            [STATE_INACTIVE, STATE_INACTIVE, STATE_INACTIVE],
            vec![],
        ),
    ];
    for (responders, expected, transitions) in cases {
        let entries = responders
            .iter()
            .map(|r| {
                entry(
                    &r.name,
                    (r.state != STATE_INACTIVE).then_some(1),
                    Some(2),
                    None,
                )
            })
            .collect();
        let refused = eviction(Some(status(responders, entries)));
        let p = refuse(
            &refused,
            "Target pod web-0 references a SchedulingGroup.",
            t(9),
        );
        let got: Vec<String> = states(&p).into_iter().map(|(_, state)| state).collect();
        assert_eq!(got, expected, "{:?}", refused.status);
        let got: Vec<(&str, &str, &str)> = p
            .transitions
            .iter()
            .map(|t| (t.responder.as_str(), t.from.as_str(), t.to.as_str()))
            .collect();
        assert_eq!(got, transitions);
        assert_eq!(
            cond(&p, CONDITION_FAILED),
            ("True", REASON_EVICTION_INVALID)
        );
        // Of each responder's entry, only its name and startTime are the controller's.
        assert!(
            p.status
                .responders
                .iter()
                .flatten()
                .all(|r| r.heartbeat_time.is_none() && r.completion_time.is_none()),
            "{:?}",
            p.status.responders
        );
    }
}

#[test]
fn a_terminating_pods_evictor_heartbeats_with_the_deletion_deadline() {
    let reported = |heartbeat: i64, expected: Option<i64>| ResponderStatus {
        expected_completion_time: expected.map(|s| Time(t(s))),
        ..entry(IMPERATIVE, Some(0), Some(heartbeat), None)
    };
    let mins = |m: i64| SignedDuration::from_mins(m);
    // (own entry, deletionTimestamp, now, (due, expected, look again))
    let cases = [
        // First look at the terminating pod: report the deadline now.
        (reported(10, None), 3600, 60, (true, 3600, mins(3))),
        // Reported lately with that deadline: look again when 3 minutes are up.
        (reported(60, Some(3600)), 3600, 120, (false, 3600, mins(2))),
        // 3 minutes since the last heartbeat: report again.
        (reported(60, Some(3600)), 3600, 240, (true, 3600, mins(3))),
        // The deadline moved (a shorter grace period): report it.
        (reported(60, Some(7200)), 3600, 70, (true, 3600, mins(3))),
        // Terminating since long before the evictor's turn (a finalizer, an unreachable node):
        // the past deadline is refused by validation, so the present is reported.
        (reported(4000, None), 3600, 4000, (true, 4000, mins(3))),
        // ... and kept at the next looks, the heartbeat alone keeping its pace.
        (
            reported(4000, Some(4000)),
            3600,
            4100,
            (false, 4000, SignedDuration::from_secs(80)),
        ),
        (
            reported(4000, Some(4000)),
            3600,
            4180,
            (true, 4000, mins(3)),
        ),
        // The deadline reported before it passed stays as it was.
        (
            reported(3590, Some(3600)),
            3600,
            3650,
            (false, 3600, SignedDuration::from_secs(120)),
        ),
        // A later deadline reported, then shortened into the past: the present.
        (reported(60, Some(7200)), 3600, 3700, (true, 3700, mins(3))),
    ];
    for (own, deadline, now, (due, expected, look_again)) in cases {
        assert_eq!(
            terminating_report(&own, Some(t(deadline)), t(now)),
            TerminatingReport {
                due,
                expected: Some(t(expected)),
                look_again
            },
            "{own:?} at {now}"
        );
    }
}

#[test]
fn the_expected_completion_is_never_in_the_past() {
    // (deadline, reported, now, expected)
    let cases = [
        (100, None, 50, 100),
        (100, Some(100), 50, 100),
        (100, None, 100, 100),
        (100, None, 200, 200),
        (100, Some(150), 200, 150),
        (100, Some(100), 200, 100),
        (100, Some(90), 200, 200),
        (100, Some(250), 200, 200),
    ];
    for (deadline, reported, now, expected) in cases {
        assert_eq!(
            expected_completion(t(deadline), reported.map(t), t(now)),
            t(expected),
            "deadline {deadline}, reported {reported:?}, now {now}"
        );
    }
}

/// Held between eviction attempts (a PodDisruptionBudget's back-off, a Retry-After), the
/// imperative evictor heartbeats every 3 minutes and looks again by then, however long the wait.
#[test]
fn between_attempts_the_evictor_heartbeats_every_three_minutes() {
    let secs = SignedDuration::from_secs;
    let mins = SignedDuration::from_mins;
    let own = |heartbeat: Option<i64>| entry(IMPERATIVE, Some(0), heartbeat, None);
    // (last heartbeat, until the next attempt, now, (heartbeat now, look again in))
    let cases = [
        (Some(0), mins(10), 60, (false, mins(2))),
        (Some(0), secs(30), 60, (false, secs(30))),
        (Some(0), mins(10), 180, (true, mins(3))),
        (Some(0), mins(1), 400, (true, mins(1))),
        (None, mins(10), 5, (true, mins(3))),
        (Some(100), mins(15), 279, (false, secs(1))),
    ];
    for (heartbeat, until_attempt, now, expected) in cases {
        assert_eq!(
            between_attempts(&own(heartbeat), until_attempt, t(now)),
            expected,
            "heartbeat {heartbeat:?}, attempt in {until_attempt:?}, now {now}"
        );
    }
}

#[test]
fn a_settled_request_is_looked_at_again_when_its_spec_changes() {
    let refused = |generation: i64, observed: i64| {
        let mut r = request("a.example.com/r", INTENT_WITHDRAWN, 0);
        r.metadata.generation = Some(generation);
        r.status = Some(
            k8s_openapi::api::lifecycle::v1alpha1::EvictionRequestStatus {
                conditions: Some(invalid_conditions(
                    None,
                    "Target pod web-0 not found.",
                    t(1),
                )),
                observed_generation: Some(observed),
            },
        );
        r
    };
    assert!(
        !request_needs_sync(&refused(1, 1)),
        "settled, spec observed"
    );
    assert!(
        request_needs_sync(&refused(2, 1)),
        "settled, spec changed since"
    );
    assert!(request_needs_sync(&request(
        "a.example.com/r",
        INTENT_EVICTION,
        0
    )));
}

mod upstream_messages;
