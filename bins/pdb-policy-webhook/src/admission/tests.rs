use super::*;
use evictkit_api::{
    PodDisruptionBudgetPolicySpec, PolicyMode, StricterEviction, UnhealthyPodEvictionPolicyType,
};
use evictkit_runtime::metrics::Metrics;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use serde_json::{Value, json};

fn namespace(name: &str) -> Namespace {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}),
    )
    .unwrap()
}

fn policy(spec: PodDisruptionBudgetPolicySpec) -> PodDisruptionBudgetPolicy {
    let mut spec = spec;
    spec.namespace_selector =
        serde_json::from_value(json!({"matchLabels": {"kubernetes.io/metadata.name": "team"}}))
            .unwrap();
    PodDisruptionBudgetPolicy::new("p", spec)
}

fn pod(name: &str, conditions: &[&str]) -> Pod {
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|c| json!({"type": c, "status": "True"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "team", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "conditions": conditions},
    }))
    .unwrap()
}

fn pdb(name: &str, policy: Option<&str>, status: Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "team", "generation": 1},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}, "unhealthyPodEvictionPolicy": policy},
        "status": status,
    }))
    .unwrap()
}

fn context(caches: Caches) -> Arc<Context> {
    let metrics = Metrics::new("test").unwrap();
    Arc::new(Context {
        caches,
        metrics: WebhookMetrics::register(&metrics).unwrap(),
    })
}

fn request(resource: Value, name: &str, object: Value) -> AdmissionRequest<DynamicObject> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "X"}, "resource": resource,
            "name": name, "namespace": "team", "operation": "CREATE", "userInfo": {},
            "object": object, "dryRun": true,
        }
    }))
    .unwrap();
    review.try_into().unwrap()
}

async fn answer(
    ctx: Arc<Context>,
    webhook: &'static str,
    request: AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    review(ctx, webhook, request.clone())
        .await
        .into_response(&request)
}

fn pdb_request(object: &PodDisruptionBudget) -> AdmissionRequest<DynamicObject> {
    let mut object = serde_json::to_value(object).unwrap();
    object["apiVersion"] = json!("policy/v1");
    object["kind"] = json!("PodDisruptionBudget");
    request(
        json!({"group": "policy", "version": "v1", "resource": "poddisruptionbudgets"}),
        "new",
        object,
    )
}

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

#[tokio::test]
async fn eviction_webhook_denies_by_the_stricter_rule_with_429() {
    let spec = PodDisruptionBudgetPolicySpec {
        eviction: Some(StricterEviction {
            required_pod_conditions: vec!["example.com/Synced".into()],
            protect_unhealthy_pods_with_local_storage: false,
        }),
        ..Default::default()
    };
    let pods = vec![
        pod("web-0", &["Ready", "example.com/Synced"]),
        pod("web-1", &["Ready"]),
    ];
    let budget = pdb(
        "web",
        None,
        json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1, "expectedPods": 2}),
    );
    let ctx = context(Caches::of(
        pods,
        vec![budget],
        vec![namespace("team")],
        vec![policy(spec)],
    ));
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": "team"}});
    let resource = json!({"group": "", "version": "v1", "resource": "pods"});
    let response = answer(
        ctx.clone(),
        "validate-eviction",
        request(resource.clone(), "web-0", eviction.clone()),
    )
    .await;
    assert!(!response.allowed);
    assert_eq!(response.result.code, 429);
    assert!(response.result.message.contains("rule RequiredPodConditions of PodDisruptionBudgetPolicy p: the disruption budget web needs 1 healthy pods and would have 0"), "{}", response.result.message);
    // web-1 is not Synced: evicting it costs no strict health.
    let response = answer(
        ctx.clone(),
        "validate-eviction",
        request(resource, "web-1", eviction),
    )
    .await;
    assert!(response.allowed);
    assert_eq!(
        ctx.metrics
            .requests
            .with_label_values(&["validate-eviction", "denied"])
            .get(),
        1
    );
    assert_eq!(
        ctx.metrics
            .requests
            .with_label_values(&["validate-eviction", "allowed"])
            .get(),
        1
    );
}
