//! The upstream half's own rules: which responders an Eviction walks and in what order,
//! the requesters' order and the memory of withdrawals, names and participant labels.

use super::*;

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
