//! What upstream's validation refuses: requests early ([`request_invalid`]), Evictions
//! themselves ([`eviction_invalid`]), and an Eviction refused while a responder is active.

use super::*;

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
