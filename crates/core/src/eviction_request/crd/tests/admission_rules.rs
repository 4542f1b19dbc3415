//! What admission refuses and allows: the pod's interceptor annotation, the request's fields by
//! who writes them, reserved names.

use super::*;

#[test]
fn interceptor_annotation() {
    let ok = [
        ("", vec![]),
        ("a.example.com", vec!["a.example.com"]),
        (
            " b.example.com , a.example.com ",
            vec!["b.example.com", "a.example.com"],
        ),
        (
            "actor-b.k8s.io.example.com",
            vec!["actor-b.k8s.io.example.com"],
        ),
    ];
    for (value, want) in ok {
        assert_eq!(
            PodInterceptors::parse(value),
            Ok(PodInterceptors(want.into_iter().map(Into::into).collect())),
            "{value:?}"
        );
    }
    let sixteen: Vec<String> = (0..16).map(|i| format!("i{i}.example.com")).collect();
    let err = [
        (
            "single",
            InterceptorsError::NotFqdn {
                position: 1,
                entry: "single".into(),
            },
        ),
        (
            "a.example.com,,b.example.com",
            InterceptorsError::NotFqdn {
                position: 2,
                entry: String::new(),
            },
        ),
        (
            "a.example.com,A.example.com",
            InterceptorsError::NotFqdn {
                position: 2,
                entry: "A.example.com".into(),
            },
        ),
        (
            "-a.example.com",
            InterceptorsError::NotFqdn {
                position: 1,
                entry: "-a.example.com".into(),
            },
        ),
        (
            "a.example.com,a.example.com",
            InterceptorsError::Duplicate {
                position: 2,
                entry: "a.example.com".into(),
            },
        ),
        (
            "imperative-eviction.k8s.io",
            InterceptorsError::Default {
                position: 1,
                entry: "imperative-eviction.k8s.io".into(),
            },
        ),
        (
            "a.example.com,actor-b.k8s.io",
            InterceptorsError::Reserved {
                position: 2,
                entry: "actor-b.k8s.io".into(),
            },
        ),
        (&sixteen.join(","), InterceptorsError::TooMany { count: 16 }),
    ];
    for (value, want) in err {
        assert_eq!(PodInterceptors::parse(value), Err(want), "{value:?}");
    }
    assert!(
        PodInterceptors::parse(&sixteen[..15].join(",")).is_ok(),
        "15 are allowed"
    );
    assert!(is_fqdn(&format!("{}.com", "a".repeat(63))));
    assert!(!is_fqdn(&format!("{}.com", "a".repeat(64))));
}

/// A hostile annotation as big as the apiserver allows (256 KiB) listing 25k names: the count is
/// the error, found without checking every entry against every other (a quadratic duplicate
/// check took seconds per pod, on every reconcile and every pod admission).
#[test]
fn a_huge_interceptor_list_is_refused_as_too_many_before_its_entries_are_checked() {
    let mut names: Vec<String> = (0..25_000).map(|i| format!("i{i}.io")).collect();
    names.push("Not-A-Name".to_owned());
    let value = names.join(",");
    assert!(value.len() <= 256 * 1024, "{} bytes", value.len());
    assert_eq!(
        PodInterceptors::parse(&value),
        Err(InterceptorsError::TooMany { count: 25_001 })
    );
}

proptest! {
    #[test]
    fn parse_never_panics_and_accepts_what_it_prints(value in "[a-z0-9.,\\- ]{0,80}") {
        if let Ok(parsed) = PodInterceptors::parse(&value) {
            prop_assert_eq!(PodInterceptors::parse(&parsed.to_string()), Ok(parsed.clone()));
            prop_assert!(parsed.0.iter().all(|n| is_fqdn(n)));
        }
    }
}

#[test]
fn admission_time_rules() {
    let targets = [B, A, IMPERATIVE];
    let old = request(
        &["r.example.com"],
        Some(status(
            &targets,
            &[],
            Some(B),
            vec![entry(B, Some(100), None)],
        )),
    );
    let now = t(200);
    let timeout = SignedDuration::from_mins(20);
    let with = |entries: Vec<InterceptorStatus>, processed: &[&str], active: &str| {
        request(
            &["r.example.com"],
            Some(status(&targets, processed, Some(active), entries)),
        )
    };
    let mut future = entry(B, Some(100), None);
    future.heartbeat_time = Some(Time(t(211)));
    let mut expected_past = entry(B, Some(100), None);
    expected_past.expected_finish_time = Some(Time(t(100)));
    // (case, new request, denial starts with)
    let cases = [
        (
            "heartbeat within the skew",
            with(
                vec![{
                    let mut e = entry(B, Some(100), None);
                    e.heartbeat_time = Some(Time(t(210)));
                    e
                }],
                &[],
                B,
            ),
            None,
        ),
        (
            "heartbeat in the future",
            with(vec![future], &[], B),
            Some("status.interceptors[actor-b.example.com].heartbeatTime"),
        ),
        (
            "expected finish in the past",
            with(vec![expected_past], &[], B),
            Some("status.interceptors[actor-b.example.com].expectedFinishTime"),
        ),
        (
            "completion now, hand over in the same write",
            with(vec![entry(B, Some(100), Some(200))], &[B], A),
            None,
        ),
        (
            "completion in the past",
            with(vec![entry(B, Some(100), Some(150))], &[B], A),
            Some("status.interceptors[actor-b.example.com].completionTime"),
        ),
        (
            "hand over before the deadline",
            with(vec![entry(B, Some(100), None)], &[B], A),
            Some(
                "status.activeInterceptors may change from actor-b.example.com to actor-a.example.com only once",
            ),
        ),
        (
            "unchanged entries are not re-checked",
            with(vec![entry(B, Some(100), None)], &[], B),
            None,
        ),
    ];
    for (case, new, denial) in cases {
        let result = admission::validate_update(&old, &new, now, timeout);
        match denial {
            None => assert_eq!(result, Ok(()), "{case}"),
            Some(prefix) => assert!(
                result.as_ref().is_err_and(|m| m.starts_with(prefix)),
                "{case}: {result:?}"
            ),
        }
    }
    let timed_out = admission::validate_update(
        &old,
        &with(vec![entry(B, Some(100), None)], &[B], A),
        t(1300),
        timeout,
    );
    assert_eq!(timed_out, Ok(()), "heartbeat deadline passed");
}

#[test]
fn admission_only_active_interceptors_write_entries() {
    let targets = [B, A, IMPERATIVE];
    let old = request(
        &["r.example.com"],
        Some(status(&targets, &[], Some(B), vec![])),
    );
    let new = request(
        &["r.example.com"],
        Some(status(&targets, &[], Some(B), vec![entry(A, None, None)])),
    );
    assert_eq!(
        admission::validate_update(&old, &new, t(0), SignedDuration::from_mins(20)),
        Err("status.interceptors[actor-a.example.com] may be written only while actor-a.example.com is active".into())
    );
}

/// Only the controller's identity writes the controller's part of the
/// status; anyone else may write only the active interceptor's own entry.
#[test]
fn admission_controller_fields_are_the_controller_s() {
    let targets = [B, A, IMPERATIVE];
    let old = request(
        &["r.example.com"],
        Some(status(&targets, &[], Some(B), vec![])),
    );
    let with = |change: fn(&mut EvictionRequestStatus)| {
        let mut new = old.clone();
        change(new.status.as_mut().unwrap());
        new
    };
    // (case, new request, denial starts with)
    let cases: Vec<(&str, EvictionRequest, Option<&str>)> = vec![
        (
            "the active interceptor's own entry",
            with(|s| s.interceptors = vec![entry(B, Some(0), None)]),
            None,
        ),
        (
            "a condition",
            with(|s| {
                s.conditions = vec![Condition {
                    type_: "Canceled".into(),
                    status: "True".into(),
                    reason: "Forged".into(),
                    message: String::new(),
                    last_transition_time: Time(t(0)),
                    observed_generation: None,
                }]
            }),
            Some("status.conditions is written only by the eviction request controller"),
        ),
        (
            "the hand-over",
            with(|s| {
                s.processed_interceptors = vec![B.into()];
                s.active_interceptors = vec![A.into()];
            }),
            Some("status.activeInterceptors is written only by the eviction request controller"),
        ),
        (
            "the activation time",
            with(|s| s.activation_time = Some(Time(t(-5000)))),
            Some("status.activationTime is written only by the eviction request controller"),
        ),
        (
            "the observed generation",
            with(|s| s.observed_generation = Some(7)),
            Some("status.observedGeneration is written only by the eviction request controller"),
        ),
        (
            "the imperative interceptor's entry",
            with(|s| s.interceptors = vec![entry(IMPERATIVE, Some(0), None)]),
            Some("status.interceptors[imperative-eviction.k8s.io] is written only by"),
        ),
        (
            "another interceptor's entry",
            with(|s| s.interceptors = vec![entry(A, Some(0), None)]),
            Some("status.interceptors[actor-a.example.com] may be written only while"),
        ),
    ];
    for (case, new, denial) in cases {
        let result = admission::validate_writer(Some(&old), &new);
        match denial {
            None => assert_eq!(result, Ok(()), "{case}"),
            Some(prefix) => assert!(
                result.as_ref().is_err_and(|m| m.starts_with(prefix)),
                "{case}: {result:?}"
            ),
        }
    }
    // A request created with targetInterceptors pre-seeded.
    let mut seeded = request(
        &["r.example.com"],
        Some(status(&[IMPERATIVE], &[], None, vec![])),
    );
    seeded.status.as_mut().unwrap().observed_generation = None;
    let result = admission::validate_writer(None, &seeded);
    assert!(
        result.as_ref().is_err_and(|m| m.starts_with(
            "status.targetInterceptors is written only by the eviction request controller"
        )),
        "{result:?}"
    );
    let identity = admission::ControllerIdentity {
        usernames: vec!["system:serviceaccount:evictkit:evictionrequest-controller".into()],
        groups: vec!["evictkit:controllers".into()],
    };
    assert!(identity.matches(
        Some("system:serviceaccount:evictkit:evictionrequest-controller"),
        &[]
    ));
    assert!(identity.matches(Some("bob"), &["evictkit:controllers".into()]));
    assert!(!identity.matches(Some("bob"), &["system:authenticated".into()]));
    assert!(!identity.matches(None, &[]));
}

/// The KEP reserves `*.k8s.io` names; only the controller's default
/// interceptor `imperative-eviction.k8s.io` carries one.
#[test]
fn reserved_k8s_io_names() {
    for (name, reserved) in [
        ("actor-b.k8s.io", true),
        ("k8s.io", true),
        ("imperative-eviction.k8s.io", true),
        ("actor.k8s.io.example.com", false),
        ("notk8s.io", false),
        ("actor-b.example.com", false),
    ] {
        assert_eq!(is_reserved(name), reserved, "{name}");
    }
    let new = request(&["drain.example.com", "drain.k8s.io"], None);
    assert_eq!(
        admission::validate_names(&new),
        Err("spec.requesters[drain.k8s.io]: names ending in .k8s.io are reserved for Kubernetes (KEP-4563); use a domain of your own".into())
    );
    assert_eq!(
        admission::validate_names(&request(&["drain.example.com"], None)),
        Ok(())
    );
}

/// The interceptor annotation is checked when the pod is written.
#[test]
fn admission_of_the_pod_annotation() {
    let fine = pod(Some("actor-b.example.com,actor-a.example.com"));
    let typo = pod(Some("actor-b.example.com,Actor-A"));
    let plain = pod(None);
    let other = pod(Some("actor-a.example.com"));
    // (case, old, new, denial starts with)
    let cases: Vec<(&str, Option<&Pod>, &Pod, Option<&str>)> = vec![
        ("create, well-formed", None, &fine, None),
        ("create, none", None, &plain, None),
        (
            "create, a typo",
            None,
            &typo,
            Some(
                "entry 2 \"Actor-A\" of annotation evictkit.io/eviction-interceptors is not a fully qualified domain name",
            ),
        ),
        ("update, unchanged", Some(&fine), &fine, None),
        (
            "update, changed",
            Some(&fine),
            &other,
            Some(
                "annotation evictkit.io/eviction-interceptors is immutable (was \"actor-b.example.com,actor-a.example.com\", now \"actor-a.example.com\")",
            ),
        ),
        (
            "update, added",
            Some(&plain),
            &fine,
            Some("annotation evictkit.io/eviction-interceptors is immutable"),
        ),
        ("update of a pod without it", Some(&plain), &plain, None),
        (
            "update of a pod from before the webhook",
            Some(&typo),
            &typo,
            None,
        ),
    ];
    for (case, old, new, denial) in cases {
        let result = admission::validate_pod(old, new);
        match denial {
            None => assert_eq!(result, Ok(()), "{case}"),
            Some(prefix) => assert!(
                result.as_ref().is_err_and(|m| m.starts_with(prefix)),
                "{case}: {result:?}"
            ),
        }
    }
}
