//! An EvictionRequest's side: the Eviction it follows, its conditions, and when it is looked
//! at again.

use super::*;

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
