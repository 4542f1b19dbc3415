use super::*;

#[tokio::test]
async fn mutating_sets_the_policy_and_warns_when_it_overwrites() {
    let mut spec = PodDisruptionBudgetPolicySpec {
        unhealthy_pod_eviction_policy: Some(UnhealthyPodEvictionPolicyType::AlwaysAllow),
        ..Default::default()
    };
    let default_mode = context(Caches::of(
        vec![],
        vec![],
        vec![namespace("team")],
        vec![policy(spec.clone())],
    ));
    let response = answer(
        default_mode.clone(),
        "mutate-pdb",
        pdb_request(&pdb("new", None, json!({}))),
    )
    .await;
    let patch: Value = serde_json::from_slice(&response.patch.clone().unwrap()).unwrap();
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/unhealthyPodEvictionPolicy", "value": "AlwaysAllow"}])
    );
    assert!(response.warnings.is_none());
    let own = answer(
        default_mode.clone(),
        "mutate-pdb",
        pdb_request(&pdb("new", Some("IfHealthyBudget"), json!({}))),
    )
    .await;
    assert!(
        own.patch.is_none(),
        "Default mode keeps the PDB's own choice"
    );
    assert_eq!(
        default_mode
            .metrics
            .defaulted
            .with_label_values(&["Default"])
            .get(),
        1
    );

    spec.mode = PolicyMode::Enforce;
    let enforce = context(Caches::of(
        vec![],
        vec![],
        vec![namespace("team")],
        vec![policy(spec)],
    ));
    let response = answer(
        enforce,
        "mutate-pdb",
        pdb_request(&pdb("new", Some("IfHealthyBudget"), json!({}))),
    )
    .await;
    assert!(response.patch.is_some());
    assert!(response.warnings.unwrap()[0].contains("IfHealthyBudget replaced by AlwaysAllow"));

    let elsewhere = context(Caches::of(vec![], vec![], vec![namespace("other")], vec![]));
    assert!(
        answer(
            elsewhere,
            "mutate-pdb",
            pdb_request(&pdb("new", None, json!({})))
        )
        .await
        .patch
        .is_none()
    );
}

#[tokio::test]
async fn validating_denies_or_warns_as_the_policy_says() {
    let existing = pdb("old", None, json!({}));
    let pods = vec![pod("web-0", &["Ready"]), pod("web-1", &["Ready"])];
    for (action, allowed, warned) in [
        (CheckAction::Deny, false, false),
        (CheckAction::Warn, true, true),
        (CheckAction::Allow, true, false),
    ] {
        let spec = PodDisruptionBudgetPolicySpec {
            overlapping_budgets: action,
            ..Default::default()
        };
        let ctx = context(Caches::of(
            pods.clone(),
            vec![existing.clone()],
            vec![namespace("team")],
            vec![policy(spec)],
        ));
        let response = answer(
            ctx.clone(),
            "validate-pdb",
            pdb_request(&pdb("new", None, json!({}))),
        )
        .await;
        assert_eq!(response.allowed, allowed, "{action:?}");
        assert_eq!(response.warnings.is_some(), warned, "{action:?}");
        if !allowed {
            assert_eq!(response.result.code, 403);
            assert!(
                response
                    .result
                    .message
                    .contains("PodDisruptionBudget team/new overlaps old: both select pod web-0"),
                "{}",
                response.result.message
            );
            assert_eq!(
                ctx.metrics
                    .denials
                    .with_label_values(&["OverlappingBudgets"])
                    .get(),
                1
            );
        }
    }
}
