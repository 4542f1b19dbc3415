use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::lifecycle::v1alpha1::{
    EvictionRequestPodReference, EvictionRequestSpec, EvictionRequestStatus, EvictionRequestTarget,
    EvictionStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;
use crate::eviction_request::upstream::{
    INTENT_EVICTION, REASON_AWAITING_EVICTION, REASON_CANCELED_NO_REQUESTERS,
    REASON_NO_FURTHER_RESPONDER, REASON_POD_DELETED,
};

const UID: &str = "0c6a1e5e-7c55-4c43-9d0a-0b5cf3a1e001";

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn condition(kind: &str, status: bool, reason: &str, at: i64) -> Condition {
    Condition {
        type_: kind.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: Time(t(at)),
        observed_generation: None,
    }
}

/// Conditions as the controller copies them: (TargetEvicted, Failed), each (true?, reason).
type Conditions = Option<((bool, &'static str), (bool, &'static str))>;

fn request(intent: &str, conditions: Conditions) -> EvictionRequest {
    EvictionRequest {
        metadata: ObjectMeta {
            name: Some(format!("web-0-{intent}")),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{intent}")),
            creation_timestamp: Some(Time(t(0))),
            ..ObjectMeta::default()
        },
        spec: EvictionRequestSpec {
            intent: intent.into(),
            requester: "acme.io/drain".into(),
            target: EvictionRequestTarget {
                pod: Some(EvictionRequestPodReference {
                    name: "web-0".into(),
                    uid: UID.into(),
                }),
            },
        },
        status: conditions.map(|((evicted, evicted_reason), (failed, failed_reason))| {
            EvictionRequestStatus {
                conditions: Some(vec![
                    condition(CONDITION_TARGET_EVICTED, evicted, evicted_reason, 10),
                    condition(CONDITION_FAILED, failed, failed_reason, 20),
                ]),
                ..EvictionRequestStatus::default()
            }
        }),
    }
}

fn deleted(mut request: EvictionRequest) -> EvictionRequest {
    request.metadata.deletion_timestamp = Some(Time(t(30)));
    request
}

const AWAITING: Conditions = Some((
    (false, REASON_AWAITING_EVICTION),
    (false, REASON_AWAITING_EVICTION),
));
const EVICTED: Conditions = Some(((true, REASON_POD_DELETED), (false, "Succeeded")));
const CANCELED: Conditions = Some((
    (false, "EvictionFailed"),
    (true, REASON_CANCELED_NO_REQUESTERS),
));
const NO_FURTHER_RESPONDER: Conditions = Some((
    (false, "EvictionFailed"),
    (true, REASON_NO_FURTHER_RESPONDER),
));
const REFUSED: Conditions = Some(((false, "EvictionFailed"), (true, REASON_EVICTION_INVALID)));

#[test]
fn a_requester_deletes_its_request_once_evicted_or_failed_after_withdrawing() {
    let cases = [
        // (case, request, done once over, done once withdrawn)
        (
            "not yet synced",
            request(INTENT_EVICTION, None),
            false,
            false,
        ),
        ("awaiting", request(INTENT_EVICTION, AWAITING), false, false),
        // The descheduler-bridge withdraws first, after acting on the outcome.
        ("evicted", request(INTENT_EVICTION, EVICTED), true, false),
        (
            "evicted, withdrawn",
            request(INTENT_WITHDRAWN, EVICTED),
            true,
            true,
        ),
        ("canceled", request(INTENT_WITHDRAWN, CANCELED), true, true),
        (
            "every responder finished, withdrawn",
            request(INTENT_WITHDRAWN, NO_FURTHER_RESPONDER),
            true,
            true,
        ),
        // The controller starts a new Eviction for a request still asking.
        (
            "every responder finished, still asking",
            request(INTENT_EVICTION, NO_FURTHER_RESPONDER),
            false,
            false,
        ),
        (
            "asked again after a cancellation",
            request(INTENT_EVICTION, CANCELED),
            false,
            false,
        ),
        // The record that asking again is pointless.
        (
            "refused, still asking",
            request(INTENT_EVICTION, REFUSED),
            false,
            false,
        ),
        // The descheduler-bridge withdraws from a refusal too: the record stays.
        (
            "refused, withdrawn",
            request(INTENT_WITHDRAWN, REFUSED),
            true,
            false,
        ),
        (
            "withdrawn, awaiting",
            request(INTENT_WITHDRAWN, AWAITING),
            false,
            false,
        ),
        (
            "being deleted",
            deleted(request(INTENT_WITHDRAWN, EVICTED)),
            false,
            false,
        ),
    ];
    for (case, request, once_over, once_withdrawn) in cases {
        assert_eq!(
            requester_done(&request, Done::OnceOver),
            once_over,
            "{case}"
        );
        assert_eq!(
            requester_done(&request, Done::OnceWithdrawn),
            once_withdrawn,
            "{case}, once withdrawn"
        );
    }
}

fn owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: LIFECYCLE_API_VERSION.into(),
        kind: OWNER_KIND.into(),
        name: name.into(),
        uid: uid.into(),
        controller: None,
        block_owner_deletion: None,
    }
}

fn named(name: &str, uid: &str) -> EvictionRequest {
    let mut request = request(INTENT_EVICTION, AWAITING);
    request.metadata.name = Some(name.into());
    request.metadata.uid = Some(uid.into());
    request
}

fn uids(owners: &[OwnerReference]) -> Vec<&str> {
    owners.iter().map(|o| o.uid.as_str()).collect()
}

#[test]
fn an_eviction_keeps_every_request_owner_and_gains_each_live_request() {
    let (a, b, c) = (
        named("a", "uid-a"),
        named("b", "uid-b"),
        named("c", "uid-c"),
    );
    let c_deleted = deleted(c.clone());
    let someone_elses = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        ..owner("cm", "uid-cm")
    };
    // (case, the Eviction's owners, the target's requests in the cache, owners after)
    type Case<'a> = (
        &'a str,
        Vec<OwnerReference>,
        Vec<&'a EvictionRequest>,
        Vec<&'a str>,
    );
    let cases: [Case; 6] = [
        (
            "created by the first request",
            vec![],
            vec![&a],
            vec!["uid-a"],
        ),
        (
            "a second requester",
            vec![owner("a", "uid-a")],
            vec![&a, &b],
            vec!["uid-a", "uid-b"],
        ),
        // The cache no longer (or not yet) holds a: its owner stays for the garbage collector.
        (
            "an owner missing from the cache",
            vec![owner("a", "uid-a"), owner("b", "uid-b")],
            vec![&b],
            vec!["uid-a", "uid-b"],
        ),
        (
            "the last request gone",
            vec![owner("a", "uid-a")],
            vec![],
            vec!["uid-a"],
        ),
        (
            "a request being deleted is not added",
            vec![owner("a", "uid-a")],
            vec![&a, &c_deleted],
            vec!["uid-a"],
        ),
        // Another manager's owners of another kind are not ours to state.
        (
            "others' owners",
            vec![someone_elses.clone(), owner("a", "uid-a")],
            vec![&a, &c],
            vec!["uid-a", "uid-c"],
        ),
    ];
    for (case, existing, requests, expected) in cases {
        assert_eq!(
            uids(&eviction_owners(&existing, &requests)),
            expected,
            "{case}"
        );
    }
    let made = eviction_owners(&[], &[&b]);
    assert_eq!(made, vec![owner("b", "uid-b")]);
}

/// On lifecycle.k8s.io: an Eviction whose requests are all gone or going is
/// the garbage collector's; its metadata is not written again.
#[test]
fn an_eviction_whose_requests_are_gone_is_collected() {
    let (a, b) = (named("a", "uid-a"), named("b", "uid-b"));
    let a_deleted = deleted(a.clone());
    type Case<'a> = (&'a str, Vec<OwnerReference>, Vec<&'a EvictionRequest>, bool);
    let cases: [Case; 5] = [
        (
            "its last request gone",
            vec![owner("a", "uid-a")],
            vec![],
            true,
        ),
        (
            "its last request being deleted",
            vec![owner("a", "uid-a")],
            vec![&a_deleted],
            true,
        ),
        ("a live request", vec![owner("a", "uid-a")], vec![&a], false),
        (
            "one gone, a new one live",
            vec![owner("a", "uid-a")],
            vec![&a_deleted, &b],
            false,
        ),
        ("made by hand, owned by no request", vec![], vec![], false),
    ];
    for (case, owners, requests, expected) in cases {
        assert_eq!(collected(&owners, &requests), expected, "{case}");
    }
}

#[test]
fn finished_ttl_deletes_what_no_requester_comes_back_for() {
    let ttl = SignedDuration::from_secs(300);
    let pod = Pod {
        metadata: ObjectMeta {
            uid: Some(UID.into()),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    };
    let present = Target::of(Some(&pod), UID);
    let cases = [
        // (case, request, target, has_eviction, expires at)
        (
            "evicted: from TargetEvicted",
            request(INTENT_EVICTION, EVICTED),
            Target::Gone,
            true,
            Some(t(310)),
        ),
        (
            "canceled: from Failed",
            request(INTENT_WITHDRAWN, CANCELED),
            present,
            true,
            Some(t(320)),
        ),
        (
            "every responder finished, withdrawn",
            request(INTENT_WITHDRAWN, NO_FURTHER_RESPONDER),
            present,
            true,
            Some(t(320)),
        ),
        (
            "every responder finished, still asking: a new Eviction comes",
            request(INTENT_EVICTION, NO_FURTHER_RESPONDER),
            present,
            true,
            None,
        ),
        (
            "refused, the target gone",
            request(INTENT_EVICTION, REFUSED),
            Target::Gone,
            false,
            Some(t(320)),
        ),
        (
            "refused, the target still there: the record stays",
            request(INTENT_EVICTION, REFUSED),
            present,
            false,
            None,
        ),
        (
            "refused and withdrawn, the target still there: the record stays",
            request(INTENT_WITHDRAWN, REFUSED),
            present,
            false,
            None,
        ),
        (
            "in progress",
            request(INTENT_EVICTION, AWAITING),
            present,
            true,
            None,
        ),
        (
            "withdrawn while another requester's Eviction runs",
            request(INTENT_WITHDRAWN, AWAITING),
            present,
            true,
            None,
        ),
        (
            "withdrawn before any Eviction: from its last condition",
            request(INTENT_WITHDRAWN, AWAITING),
            present,
            false,
            Some(t(320)),
        ),
        (
            "withdrawn before the controller saw it: from its creation",
            request(INTENT_WITHDRAWN, None),
            present,
            false,
            Some(t(300)),
        ),
        (
            "being deleted",
            deleted(request(INTENT_EVICTION, EVICTED)),
            Target::Gone,
            true,
            None,
        ),
    ];
    for (case, request, target, has_eviction, expected) in cases {
        assert_eq!(
            expires_at(&request, target, has_eviction, ttl),
            expected,
            "{case}"
        );
    }
}

#[test]
fn finished_ttl_deletes_a_finished_eviction_nobody_owns_or_asks_for() {
    let ttl = SignedDuration::from_secs(300);
    let eviction = |conditions: Conditions, owners: Vec<OwnerReference>| {
        let status = request(INTENT_EVICTION, conditions).status;
        Eviction {
            metadata: ObjectMeta {
                name: Some("pod-1-web-0".into()),
                owner_references: Some(owners),
                ..ObjectMeta::default()
            },
            status: status.map(|s| EvictionStatus {
                conditions: s.conditions,
                ..EvictionStatus::default()
            }),
            ..Eviction::default()
        }
    };
    let cases = [
        // (case, eviction, requests of its target, expires at)
        (
            "evicted, orphaned",
            eviction(EVICTED, vec![]),
            0,
            Some(t(310)),
        ),
        (
            "canceled, orphaned",
            eviction(CANCELED, vec![]),
            0,
            Some(t(320)),
        ),
        ("in progress", eviction(AWAITING, vec![]), 0, None),
        ("not yet synced", eviction(None, vec![]), 0, None),
        // The garbage collector's: it goes with its last owner.
        (
            "owned",
            eviction(EVICTED, vec![owner("a", "uid-a")]),
            0,
            None,
        ),
        // The controller adds the request as owner.
        ("a request left", eviction(EVICTED, vec![]), 1, None),
    ];
    for (case, eviction, requests, expected) in cases {
        assert_eq!(
            orphan_expires_at(&eviction, requests, ttl),
            expected,
            "{case}"
        );
    }
}
