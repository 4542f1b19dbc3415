use super::*;

fn crd(generation: i64, observed: Option<i64>, condition: Option<(&str, &str)>) -> EvictionRequest {
    let conditions: Vec<_> = condition
        .into_iter()
        .map(|(kind, reason)| {
            serde_json::json!({
                "type": kind, "status": "True", "reason": reason, "message": "bad annotation",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "evictkit.io/v1alpha1",
        "kind": "EvictionRequest",
        "metadata": {"name": "uid-1", "namespace": "ns", "generation": generation},
        "spec": {
            "target": {"pod": {"name": "web-0", "uid": "uid-1"}},
            "requesters": [{"name": "taint-manager.evictkit.io"}],
        },
        "status": {"conditions": conditions, "observedGeneration": observed},
    }))
    .unwrap()
}

#[test]
fn crd_standing_table() {
    use Standing::*;
    #[rustfmt::skip]
    let cases: &[(&str, EvictionRequest, Standing)] = &[
        ("just created", crd(1, None, None), Pending),
        ("joined, the join not seen yet", crd(3, Some(2), None), Pending),
        ("seen", crd(3, Some(3), None), Accepted),
        ("evicted", crd(3, Some(3), Some(("Evicted", "TargetDeleted"))), Accepted),
        ("refused by validation", crd(1, Some(1), Some(("Canceled", "ValidationFailed"))), Refused),
        ("refused, seen before our join", crd(2, Some(1), Some(("Canceled", "ValidationFailed"))), Refused),
        ("canceled for want of requesters", crd(2, Some(2), Some(("Canceled", "NoRequesters"))), Pending),
    ];
    for (name, request, want) in cases {
        assert_eq!(crd_standing(request), *want, "{name}");
    }
}

fn lifecycle(
    generation: i64,
    observed: Option<i64>,
    conditions: &[(&str, &str, &str)],
) -> LifecycleRequest {
    let conditions: Vec<_> = conditions
        .iter()
        .map(|(kind, status, reason)| {
            serde_json::json!({
                "type": kind, "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-0-evictkit-io-taint-manager", "namespace": "ns", "generation": generation},
        "spec": {
            "requester": "evictkit.io/taint-manager",
            "intent": "Eviction",
            "target": {"pod": {"name": "web-0", "uid": "uid-1"}},
        },
        "status": {"conditions": conditions, "observedGeneration": observed},
    }))
    .unwrap()
}

#[test]
fn upstream_standing_table() {
    use Standing::*;
    let awaiting = [
        ("TargetEvicted", "False", "AwaitingEviction"),
        ("Failed", "False", "AwaitingEviction"),
    ];
    let invalid = [
        ("TargetEvicted", "False", "EvictionInvalid"),
        ("Failed", "True", "EvictionInvalid"),
    ];
    let failed = [
        ("TargetEvicted", "False", "EvictionFailed"),
        ("Failed", "True", "EvictionFailed"),
    ];
    let evicted = [
        ("TargetEvicted", "True", "PodDeleted"),
        ("Failed", "False", "PodDeleted"),
    ];
    #[rustfmt::skip]
    let cases: &[(&str, LifecycleRequest, Standing)] = &[
        ("just created", lifecycle(1, None, &[]), Pending),
        ("seen, awaiting the eviction", lifecycle(1, Some(1), &awaiting), Accepted),
        ("refused: EvictionInvalid", lifecycle(1, Some(1), &invalid), Refused),
        ("failed otherwise: ended", lifecycle(1, Some(1), &failed), Ended),
        ("evicted", lifecycle(1, Some(1), &evicted), Accepted),
        ("asking again after a withdrawal: the old Failed says nothing", lifecycle(2, Some(1), &failed), Pending),
    ];
    for (name, request, want) in cases {
        assert_eq!(upstream_standing(request), *want, "{name}");
    }
}

#[test]
fn auto_follows_what_the_controller_serves() {
    use Api::*;
    use Controller::*;
    let serves = |crd, lifecycle| Serves { crd, lifecycle };
    // (case, CRD served, lifecycle.k8s.io served, the controller, the API or the error)
    #[rustfmt::skip]
    let cases = [
        ("no controller to see: discovery, upstream first", true, true, Unseen, Ok(Lifecycle)),
        ("no controller to see, no gate", true, false, Unseen, Ok(Crd)),
        ("a controller from before the switch: its CRD", true, true, Silent, Ok(Crd)),
        ("a silent controller without the CRD", false, true, Silent, Err(Unserved::ControllerNotSwitched)),
        ("the controller upgraded, in auto", true, true, serves(true, true), Ok(Lifecycle)),
        ("the controller pinned to the CRD", true, true, serves(true, false), Ok(Crd)),
        ("the controller on lifecycle.k8s.io only", true, true, serves(false, true), Ok(Lifecycle)),
        ("the controller in auto before the gate", true, false, serves(true, false), Ok(Crd)),
        ("the controller's API no longer served", false, true, serves(true, false),
         Err(Unserved::Neither { crd: true, lifecycle: false, served_crd: false, served_lifecycle: true })),
    ];
    for (case, crd, lifecycle, controller, want) in cases {
        assert_eq!(auto_api(crd, lifecycle, controller), want, "{case}");
    }
}
