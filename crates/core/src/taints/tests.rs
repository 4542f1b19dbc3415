use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn tol(key: &str, operator: &str, value: &str, effect: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: opt(key),
        operator: opt(operator),
        value: opt(value),
        effect: opt(effect),
        toleration_seconds: seconds,
    }
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        value: opt(value),
        effect: effect.to_owned(),
        time_added: None,
    }
}

fn taint_at(key: &str, effect: &str, added: &str) -> Taint {
    Taint {
        time_added: Some(Time(added.parse().unwrap())),
        ..taint(key, "", effect)
    }
}

const NS: &str = "NoSchedule";
const NE: &str = "NoExecute";
const PNS: &str = "PreferNoSchedule";

#[test]
fn toleration_tolerates_taint() {
    // (case, toleration, taint, tolerated)
    let cases = [
        // upstream TestTolerationToleratesTaint
        (
            "same key and effect, Exists, taint without value",
            tol("foo", "Exists", "", NS, None),
            taint("foo", "", NS),
            true,
        ),
        (
            "same key and effect, Exists, taint with value",
            tol("foo", "Exists", "", NS, None),
            taint("foo", "bar", NS),
            true,
        ),
        (
            "empty key with Exists matches all taints",
            tol("", "Exists", "", NS, None),
            taint("foo", "bar", NS),
            true,
        ),
        (
            "same key, effect and value, Equal",
            tol("foo", "Equal", "bar", NS, None),
            taint("foo", "bar", NS),
            true,
        ),
        (
            "same key and effect, different values, Equal",
            tol("foo", "Equal", "value1", NS, None),
            taint("foo", "value2", NS),
            false,
        ),
        (
            "same key and value, different effects, Equal",
            tol("foo", "Equal", "bar", NS, None),
            taint("foo", "bar", NE),
            false,
        ),
        (
            "Gt, taint value less than toleration value",
            tol("node.kubernetes.io/sla", "Gt", "950", NS, None),
            taint("node.kubernetes.io/sla", "800", NS),
            false,
        ),
        (
            "Gt, taint value greater than toleration value",
            tol("node.kubernetes.io/sla", "Gt", "750", NS, None),
            taint("node.kubernetes.io/sla", "950", NS),
            true,
        ),
        (
            "Lt, taint value greater than toleration value",
            tol("node.kubernetes.io/sla", "Lt", "800", NS, None),
            taint("node.kubernetes.io/sla", "950", NS),
            false,
        ),
        (
            "Lt, taint value less than toleration value",
            tol("node.kubernetes.io/sla", "Lt", "950", NS, None),
            taint("node.kubernetes.io/sla", "800", NS),
            true,
        ),
        (
            "Gt, equal numeric values",
            tol("node.kubernetes.io/sla", "Gt", "950", NS, None),
            taint("node.kubernetes.io/sla", "950", NS),
            false,
        ),
        (
            "Gt, non-numeric taint value",
            tol("node.kubernetes.io/sla", "Gt", "950", NS, None),
            taint("node.kubernetes.io/sla", "high", NS),
            false,
        ),
        (
            "Gt, negative values, taint below threshold",
            tol("test-key", "Gt", "-100", NS, None),
            taint("test-key", "-200", NS),
            false,
        ),
        (
            "Gt, large int64 threshold",
            tol("test-key", "Gt", "9223372036854775806", NS, None),
            taint("test-key", "100", NS),
            false,
        ),
        // operator defaulting and wildcards
        (
            "empty operator means Equal, same value",
            tol("foo", "", "bar", NS, None),
            taint("foo", "bar", NS),
            true,
        ),
        (
            "empty operator means Equal, other value",
            tol("foo", "", "bar", NS, None),
            taint("foo", "baz", NS),
            false,
        ),
        (
            "empty operator, both values empty",
            tol("foo", "", "", NS, None),
            taint("foo", "", NS),
            true,
        ),
        (
            "Equal with empty value against valued taint",
            tol("foo", "Equal", "", NS, None),
            taint("foo", "bar", NS),
            false,
        ),
        (
            "empty effect matches NoExecute",
            tol("foo", "Exists", "", "", None),
            taint("foo", "", NE),
            true,
        ),
        (
            "empty effect matches PreferNoSchedule",
            tol("foo", "Exists", "", "", None),
            taint("foo", "", PNS),
            true,
        ),
        (
            "empty key and empty effect with Exists tolerates everything",
            tol("", "Exists", "", "", None),
            taint("any/key", "v", NE),
            true,
        ),
        (
            "different key",
            tol("foo", "Exists", "", NE, None),
            taint("bar", "", NE),
            false,
        ),
        (
            "key compare is case sensitive",
            tol("Foo", "Exists", "", NE, None),
            taint("foo", "", NE),
            false,
        ),
        (
            "value compare is case sensitive",
            tol("foo", "Equal", "Bar", NE, None),
            taint("foo", "bar", NE),
            false,
        ),
        (
            "effect compare is exact",
            tol("foo", "Exists", "", "noexecute", None),
            taint("foo", "", NE),
            false,
        ),
        // upstream quirk kept: an empty key with Equal (refused by validation) compares values only
        (
            "empty key with Equal matches any key with that value",
            tol("", "Equal", "v", NE, None),
            taint("k", "v", NE),
            true,
        ),
        (
            "empty key with Equal, other value",
            tol("", "Equal", "v", NE, None),
            taint("k", "w", NE),
            false,
        ),
        (
            "unknown operator tolerates nothing",
            tol("foo", "Matches", "bar", NE, None),
            taint("foo", "bar", NE),
            false,
        ),
        (
            "operator is case sensitive",
            tol("foo", "exists", "", NE, None),
            taint("foo", "", NE),
            false,
        ),
        (
            "Lt, non-numeric toleration value",
            tol("k", "Lt", "ten", NE, None),
            taint("k", "5", NE),
            false,
        ),
        (
            "Lt, empty taint value",
            tol("k", "Lt", "10", NE, None),
            taint("k", "", NE),
            false,
        ),
        (
            "Lt, leading plus sign parses as in Go",
            tol("k", "Lt", "+10", NE, None),
            taint("k", "9", NE),
            true,
        ),
        (
            "Gt, leading zeros parse as in Go",
            tol("k", "Gt", "0010", NE, None),
            taint("k", "011", NE),
            true,
        ),
        (
            "Gt, out of int64 range tolerates nothing",
            tol("k", "Gt", "1", NE, None),
            taint("k", "9223372036854775808", NE),
            false,
        ),
        (
            "tolerationSeconds does not affect matching",
            tol("foo", "Exists", "", NE, Some(0)),
            taint("foo", "", NE),
            true,
        ),
    ];
    for (case, toleration, taint, want) in cases {
        assert_eq!(tolerates(&toleration, &taint), want, "{case}");
    }
}

#[test]
fn first_tolerating_respects_pod_order() {
    let tolerations = [
        tol("other", "Exists", "", NE, Some(1)),
        tol("foo", "Exists", "", NE, Some(30)),
        tol("", "Exists", "", "", Some(5)),
    ];
    // (case, taint, index of the toleration that counts)
    let cases = [
        (
            "specific toleration listed before the wildcard wins",
            taint("foo", "", NE),
            Some(1),
        ),
        ("only the wildcard tolerates", taint("bar", "", NE), Some(2)),
        (
            "first toleration tolerates",
            taint("other", "x", NE),
            Some(0),
        ),
    ];
    for (case, taint, want) in cases {
        let got = first_tolerating(&tolerations, &taint)
            .map(|t| tolerations.iter().position(|x| x == t).unwrap());
        assert_eq!(got, want, "{case}");
    }
    assert_eq!(first_tolerating(&[], &taint("foo", "", NE)), None);
}

#[test]
fn no_execute_plan() {
    let secs = Duration::from_secs;
    // (case, taints, tolerations, plan)
    let cases: Vec<(&str, Vec<Taint>, Vec<Toleration>, NoExecutePlan)> = vec![
        // upstream TestGetMinTolerationTime, as whole plans: one NoExecute taint per toleration
        (
            "min toleration time: one nil -> forever",
            vec![taint("a", "", NE)],
            vec![tol("a", "Exists", "", "", None)],
            NoExecutePlan::TolerateForever,
        ),
        (
            "min toleration time: 1s and 2s -> 1s",
            vec![taint("a", "", NE), taint("b", "", NE)],
            vec![
                tol("a", "Exists", "", "", Some(1)),
                tol("b", "Exists", "", "", Some(2)),
            ],
            NoExecutePlan::DeleteAfter(secs(1)),
        ),
        (
            "min toleration time: 1s and nil -> 1s",
            vec![taint("a", "", NE), taint("b", "", NE)],
            vec![
                tol("a", "Exists", "", "", Some(1)),
                tol("b", "Exists", "", "", None),
            ],
            NoExecutePlan::DeleteAfter(secs(1)),
        ),
        (
            "min toleration time: nil and 1s -> 1s",
            vec![taint("a", "", NE), taint("b", "", NE)],
            vec![
                tol("a", "Exists", "", "", None),
                tol("b", "Exists", "", "", Some(1)),
            ],
            NoExecutePlan::DeleteAfter(secs(1)),
        ),
        // the controller's cases
        (
            "no taints",
            vec![],
            vec![],
            NoExecutePlan::NoNoExecuteTaints,
        ),
        (
            "only NoSchedule and PreferNoSchedule taints",
            vec![taint("a", "", NS), taint("b", "", PNS)],
            vec![],
            NoExecutePlan::NoNoExecuteTaints,
        ),
        (
            "NoExecute taint, no tolerations",
            vec![taint("a", "", NE)],
            vec![],
            NoExecutePlan::DeleteNow {
                untolerated: vec![taint("a", "", NE)],
            },
        ),
        (
            "toleration for NoSchedule only does not tolerate NoExecute",
            vec![taint("a", "", NE)],
            vec![tol("a", "Exists", "", NS, None)],
            NoExecutePlan::DeleteNow {
                untolerated: vec![taint("a", "", NE)],
            },
        ),
        (
            "one of two NoExecute taints untolerated: delete now, listing only that one",
            vec![taint("a", "", NE), taint("b", "1", NE), taint("c", "", NS)],
            vec![tol("a", "Exists", "", NE, Some(300))],
            NoExecutePlan::DeleteNow {
                untolerated: vec![taint("b", "1", NE)],
            },
        ),
        (
            "untolerated NoSchedule taint does not matter",
            vec![taint("a", "", NE), taint("c", "", NS)],
            vec![tol("a", "Exists", "", NE, Some(300))],
            NoExecutePlan::DeleteAfter(secs(300)),
        ),
        (
            "tolerationSeconds 0 means now",
            vec![taint("a", "", NE)],
            vec![tol("a", "Exists", "", NE, Some(0))],
            NoExecutePlan::DeleteAfter(Duration::ZERO),
        ),
        (
            "negative tolerationSeconds means now",
            vec![taint("a", "", NE)],
            vec![tol("a", "Exists", "", NE, Some(-5))],
            NoExecutePlan::DeleteAfter(Duration::ZERO),
        ),
        (
            "negative beats a nil on another taint",
            vec![taint("a", "", NE), taint("b", "", NE)],
            vec![
                tol("a", "Exists", "", NE, None),
                tol("b", "Exists", "", NE, Some(-1)),
            ],
            NoExecutePlan::DeleteAfter(Duration::ZERO),
        ),
        (
            "first matching toleration counts, not the shortest",
            vec![taint("a", "", NE)],
            vec![
                tol("a", "Exists", "", NE, Some(600)),
                tol("", "Exists", "", "", Some(10)),
            ],
            NoExecutePlan::DeleteAfter(secs(600)),
        ),
        (
            "first matching toleration counts even when it tolerates forever",
            vec![taint("a", "", NE)],
            vec![
                tol("a", "Exists", "", NE, None),
                tol("a", "Exists", "", NE, Some(10)),
            ],
            NoExecutePlan::TolerateForever,
        ),
        (
            "a toleration that matches no taint does not count",
            vec![taint("a", "", NE)],
            vec![
                tol("zzz", "Exists", "", NE, Some(1)),
                tol("a", "Exists", "", NE, None),
            ],
            NoExecutePlan::TolerateForever,
        ),
        (
            "the same toleration covers two taints",
            vec![taint("a", "", NE), taint("b", "", NE)],
            vec![tol("", "Exists", "", "", Some(42))],
            NoExecutePlan::DeleteAfter(secs(42)),
        ),
        (
            "node.kubernetes.io/not-ready default toleration of 300s",
            vec![taint("node.kubernetes.io/not-ready", "", NE)],
            vec![
                tol("node.kubernetes.io/not-ready", "Exists", "", NE, Some(300)),
                tol(
                    "node.kubernetes.io/unreachable",
                    "Exists",
                    "",
                    NE,
                    Some(300),
                ),
            ],
            NoExecutePlan::DeleteAfter(secs(300)),
        ),
        (
            "value mismatch with Equal leaves the taint untolerated",
            vec![taint("dedicated", "gpu", NE)],
            vec![tol("dedicated", "Equal", "cpu", NE, None)],
            NoExecutePlan::DeleteNow {
                untolerated: vec![taint("dedicated", "gpu", NE)],
            },
        ),
        (
            "huge tolerationSeconds",
            vec![taint("a", "", NE)],
            vec![tol("a", "Exists", "", NE, Some(i64::MAX))],
            NoExecutePlan::DeleteAfter(secs(i64::MAX.unsigned_abs())),
        ),
    ];
    for (case, taints, tolerations, want) in cases {
        assert_eq!(plan(&taints, &tolerations), want, "{case}");
    }
}

#[test]
fn tolerated_since_is_the_earliest_time_added_of_the_taints_tolerated_for_a_while() {
    let at = |s: &str| Some(s.parse::<Timestamp>().unwrap());
    // (case, taints, tolerations, since)
    type Case = (&'static str, Vec<Taint>, Vec<Toleration>, Option<Timestamp>);
    let cases: Vec<Case> = vec![
        (
            "one taint tolerated for a while",
            vec![taint_at("a", NE, "2025-01-01T00:01:00Z")],
            vec![tol("a", "Exists", "", NE, Some(60))],
            at("2025-01-01T00:01:00Z"),
        ),
        (
            "the earliest of two",
            vec![
                taint_at("a", NE, "2025-01-01T00:02:00Z"),
                taint_at("b", NE, "2025-01-01T00:01:00Z"),
            ],
            vec![tol("", "Exists", "", "", Some(300))],
            at("2025-01-01T00:01:00Z"),
        ),
        (
            "a taint tolerated forever starts no window",
            vec![
                taint_at("a", NE, "2025-01-01T00:00:00Z"),
                taint_at("b", NE, "2025-01-01T00:05:00Z"),
            ],
            vec![
                tol("a", "Exists", "", NE, None),
                tol("b", "Exists", "", NE, Some(10)),
            ],
            at("2025-01-01T00:05:00Z"),
        ),
        (
            "the first tolerating toleration counts (pod order)",
            vec![taint_at("a", NE, "2025-01-01T00:00:00Z")],
            vec![
                tol("a", "Exists", "", NE, None),
                tol("a", "Exists", "", NE, Some(10)),
            ],
            None,
        ),
        (
            "NoSchedule taints and taints without timeAdded do not count",
            vec![
                taint_at("a", NS, "2025-01-01T00:00:00Z"),
                taint("b", "", NE),
            ],
            vec![tol("", "Exists", "", "", Some(10))],
            None,
        ),
    ];
    for (case, taints, tolerations, want) in cases {
        assert_eq!(tolerated_since(&taints, &tolerations), want, "{case}");
    }
}

#[test]
fn toleration_window_ends_its_length_after_its_start() {
    let start: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
    let window = TolerationWindow::new(start, Duration::from_secs(300));
    assert_eq!(window.ends, "2025-01-01T00:05:00Z".parse().unwrap());
    let never = TolerationWindow::new(start, Duration::from_secs(i64::MAX.unsigned_abs()));
    assert_eq!(never.ends, Timestamp::MAX, "past year 9999: ends then");
}
