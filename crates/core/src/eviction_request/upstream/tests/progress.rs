//! An Eviction taken one step ([`progress`]): responders activated and handed over, the
//! target gone or terminating, cancellation by withdrawal, conditions.

use super::*;

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
