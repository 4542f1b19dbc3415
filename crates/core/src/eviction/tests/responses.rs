use super::*;

#[test]
fn responses_use_upstream_text() {
    let denied =
        |reason, message: &str, cause: Option<&str>, retry: Option<i32>, code| EvictionResponse {
            code,
            status: "Failure",
            reason,
            message: message.to_owned(),
            cause: cause.map(str::to_owned),
            retry_after_seconds: retry,
        };
    let success = EvictionResponse {
        code: 201,
        status: "Success",
        reason: None,
        message: String::new(),
        cause: None,
        retry_after_seconds: None,
    };
    let violate = "Cannot evict pod as it would violate the pod's disruption budget.";
    // (pod, pdbs, response, resourceVersion precondition)
    let cases = [
        (
            pod("Pending", None),
            vec![foo(0, 0, 0)],
            success.clone(),
            true,
        ),
        (
            terminating(pod("Running", None)),
            vec![foo(0, 0, 0)],
            success.clone(),
            false,
        ),
        (pod("Succeeded", None), vec![], success.clone(), false),
        (pod("Running", Some("True")), vec![], success.clone(), false),
        (
            pod("Running", Some("True")),
            vec![foo(1, 1, 1)],
            success.clone(),
            false,
        ),
        (
            pod("Running", Some("False")),
            vec![foo(0, 2, 2)],
            success.clone(),
            true,
        ),
        (
            pod("Running", Some("True")),
            vec![foo(0, 2, 2)],
            denied(
                Some("TooManyRequests"),
                violate,
                Some("The disruption budget foo needs 2 healthy pods and has 2 currently"),
                None,
                429,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![{
                let mut p = foo(1, 1, 1);
                p.metadata.generation = Some(1);
                p
            }],
            denied(
                Some("TooManyRequests"),
                violate,
                Some("The disruption budget foo is still being processed by the server."),
                Some(10),
                429,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![foo(-1, 0, 0)],
            denied(
                Some("Forbidden"),
                "poddisruptionbudget.policy \"foo\" is forbidden: pdb disruptions allowed is negative",
                None,
                None,
                403,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![with_status(foo(1, 0, 0), |s| {
                s.disrupted_pods = disrupted(2001)
            })],
            denied(
                Some("Forbidden"),
                "poddisruptionbudget.policy \"foo\" is forbidden: DisruptedPods map too big - too many evictions not confirmed by PDB controller",
                None,
                None,
                403,
            ),
            false,
        ),
        (
            pod("Running", Some("True")),
            vec![foo(1, 1, 1), pdb("bar", 1, 1, 1)],
            denied(
                None,
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                None,
                None,
                500,
            ),
            false,
        ),
        (
            pod("Running", Some("False")),
            vec![{
                let mut p = foo(1, 2, 2);
                p.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = Some("Sometimes".into());
                p
            }],
            denied(
                Some("TooManyRequests"),
                violate,
                Some(
                    "The disruption budget foo has unhealthyPodEvictionPolicy \"Sometimes\", which this client does not recognise: pods that are not Ready are not evicted under it",
                ),
                None,
                429,
            ),
            false,
        ),
    ];
    for (pod, pdbs, want, precondition) in cases {
        let decision = decide(&pod, &pdbs);
        assert_eq!(decision.response, want, "{:?}", decision.outcome);
        assert_eq!(
            decision.allowed(),
            want.code == 201,
            "{:?}",
            decision.outcome
        );
        assert_eq!(
            decision.resource_version_precondition, precondition,
            "{:?}",
            decision.outcome
        );
    }
}

#[test]
fn status_bodies() {
    let json = |pod: Pod, pdbs: Vec<PodDisruptionBudget>| {
        serde_json::to_value(decide(&pod, &pdbs).to_status()).unwrap()
    };
    assert_eq!(
        json(pod("Running", Some("True")), vec![foo(0, 3, 3)]),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": 429,
            "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget foo needs 3 healthy pods and has 3 currently"}]},
        })
    );
    assert_eq!(
        json(pod("Running", Some("True")), vec![foo(-1, 3, 3)]),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": "poddisruptionbudget.policy \"foo\" is forbidden: pdb disruptions allowed is negative",
            "details": {"group": "policy", "kind": "poddisruptionbudget", "name": "foo"},
        })
    );
    assert_eq!(
        json(pod("Running", Some("True")), vec![]),
        serde_json::json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201})
    );
}

#[test]
fn selecting_pdbs_keeps_order_and_filters() {
    let p = pod("Running", Some("True"));
    let pdbs = [
        foo(0, 0, 0),
        with_selector(pdb("nil", 0, 0, 0), None),
        with_selector(pdb("all", 0, 0, 0), Some(LabelSelector::default())),
    ];
    let names: Vec<_> = selecting_pdbs(&p, &pdbs)
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["foo", "all"]);
    assert!(!selects(&pdbs[1], &p));
}
