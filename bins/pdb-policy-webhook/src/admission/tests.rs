use super::*;
use evictkit_api::{
    PodDisruptionBudgetPolicySpec, PolicyMode, StricterEviction, UnhealthyPodEvictionPolicyType,
};
use evictkit_runtime::metrics::Metrics;
use evictkit_runtime::pdb_policy::LiveReads;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::core::DynamicObject;
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

/// The API as the eviction webhook reads it live.
#[derive(Default)]
struct Live {
    pods: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    claims: Vec<PersistentVolumeClaim>,
    volumes: Vec<PersistentVolume>,
    /// Every read hangs, as against an apiserver too busy to answer.
    stalled: bool,
    /// Every read takes this long.
    latency: std::time::Duration,
    /// The reads made, e.g. `pod web-0`.
    reads: std::sync::Mutex<Vec<String>>,
}

impl Live {
    async fn stall(&self, read: String) {
        self.reads.lock().unwrap().push(read);
        tokio::time::sleep(self.latency).await;
        if self.stalled {
            futures::future::pending::<()>().await;
        }
    }
}

fn named<'a, K: kube::Resource>(objects: &'a [K], name: &str) -> Option<&'a K> {
    objects
        .iter()
        .find(|o| o.meta().name.as_deref() == Some(name))
}

impl LiveReads for Live {
    fn pod<'a>(&'a self, _: &'a str, name: &'a str) -> BoxFuture<'a, kube::Result<Option<Pod>>> {
        Box::pin(async move {
            self.stall(format!("pod {name}")).await;
            Ok(named(&self.pods, name).cloned())
        })
    }
    fn pdb<'a>(
        &'a self,
        _: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PodDisruptionBudget>>> {
        Box::pin(async move {
            self.stall(format!("pdb {name}")).await;
            Ok(named(&self.pdbs, name).cloned())
        })
    }
    fn claim<'a>(
        &'a self,
        _: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PersistentVolumeClaim>>> {
        Box::pin(async move {
            self.stall(format!("claim {name}")).await;
            Ok(named(&self.claims, name).cloned())
        })
    }
    fn volume<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, kube::Result<Option<PersistentVolume>>> {
        Box::pin(async move {
            self.stall(format!("volume {name}")).await;
            Ok(named(&self.volumes, name).cloned())
        })
    }
}

/// Caches and the live API holding the same objects.
fn context_of(
    pods: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    policies: Vec<PodDisruptionBudgetPolicy>,
) -> Arc<Context> {
    let live = Live {
        pods: pods.clone(),
        pdbs: pdbs.clone(),
        ..Live::default()
    };
    context_with(
        Caches::of(pods, pdbs, vec![namespace("team")], policies),
        live,
    )
}

fn context(caches: Caches) -> Arc<Context> {
    context_with(caches, Live::default())
}

fn context_with(caches: Caches, live: Live) -> Arc<Context> {
    context_reading(caches, Arc::new(live))
}

fn context_reading(caches: Caches, live: Arc<Live>) -> Arc<Context> {
    let metrics = Metrics::new("pdb-policy-webhook").unwrap();
    Arc::new(Context::new(
        caches,
        WebhookMetrics::register(&metrics).unwrap(),
        Consistent::new(live),
    ))
}

fn request(resource: Value, name: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "X"}, "resource": resource,
            "name": name, "namespace": "team", "operation": "CREATE", "userInfo": {},
            "object": object, "dryRun": true,
        }
    })
}

/// The answer of `webhook` (its path without the slash, with the apiserver's query if any) to
/// `review`, through the routes the server serves.
async fn answer(ctx: Arc<Context>, webhook: &'static str, review: Value) -> AdmissionResponse {
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let request = axum::http::Request::post(format!("/{webhook}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(serde_json::to_vec(&review).unwrap()))
        .unwrap();
    let response = tower::ServiceExt::oneshot(webhooks(ctx, metrics).into_router(), request)
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&bytes).unwrap();
    review.response.unwrap()
}

fn pdb_request(object: &PodDisruptionBudget) -> Value {
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
    let ctx = context_of(pods, vec![budget], vec![policy(spec)]);
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

fn strict(conditions: &[&str], local_storage: bool) -> PodDisruptionBudgetPolicy {
    policy(PodDisruptionBudgetPolicySpec {
        eviction: Some(StricterEviction {
            required_pod_conditions: conditions.iter().map(|c| c.to_string()).collect(),
            protect_unhealthy_pods_with_local_storage: local_storage,
        }),
        ..Default::default()
    })
}

fn eviction_review(name: &str) -> Value {
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "team"}});
    let resource = json!({"group": "", "version": "v1", "resource": "pods"});
    request(resource, name, eviction)
}

async fn evict(ctx: Arc<Context>, name: &str) -> AdmissionResponse {
    answer(ctx, "validate-eviction", eviction_review(name)).await
}

fn with_volume(mut pod: Pod, volume: Value) -> Pod {
    pod.spec.get_or_insert_default().volumes = Some(vec![serde_json::from_value(volume).unwrap()]);
    pod
}

/// Where the caches cannot decide (the pod not in the cache yet, its
/// readiness or the PDB's `disruptedPods` a moment behind), the webhook decides on what the
/// API says now.
#[tokio::test]
async fn eviction_webhook_decides_on_the_live_pod_and_pdb() {
    let synced = &["Ready", "example.com/Synced"][..];
    let healthy_budget = |disrupted: Value| {
        pdb(
            "web",
            None,
            json!({"observedGeneration": 1, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 3, "disruptedPods": disrupted}),
        )
    };
    let peers = vec![pod("web-1", synced), pod("web-2", synced)];

    // The pod is not in the cache yet.
    let live = Live {
        pods: vec![pod("web-0", synced), pod("web-9", synced)],
        pdbs: vec![pdb(
            "web",
            None,
            json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 2}),
        )],
        ..Live::default()
    };
    let caches = Caches::of(
        vec![pod("web-9", &["Ready"])],
        live.pdbs.clone(),
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let response = evict(context_with(caches, live), "web-0").await;
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "a pod missing from the cache: {}",
        response.result.message
    );

    // The PDB's disruptedPods in the cache lags a concurrent eviction of web-1.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut pods = peers.clone();
    pods.push(pod("web-0", synced));
    let live = Live {
        pods: pods.clone(),
        pdbs: vec![healthy_budget(json!({"web-1": now}))],
        ..Live::default()
    };
    let caches = Caches::of(
        pods,
        vec![healthy_budget(json!({}))],
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let response = evict(context_with(caches, live), "web-0").await;
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "web-1 is on its way out: {}",
        response.result.message
    );

    // The cache still has cache-0 Ready; it is not any more.
    let always = |allowed: i32| {
        pdb(
            "web",
            Some("AlwaysAllow"),
            json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": allowed, "expectedPods": 2}),
        )
    };
    let empty_dir = json!({"name": "data", "emptyDir": {}});
    let live = Live {
        pods: vec![
            with_volume(pod("cache-0", &[]), empty_dir.clone()),
            pod("web-1", &["Ready"]),
        ],
        pdbs: vec![always(1)],
        ..Live::default()
    };
    let caches = Caches::of(
        vec![
            with_volume(pod("cache-0", &["Ready"]), empty_dir),
            pod("web-1", &["Ready"]),
        ],
        vec![always(1)],
        vec![namespace("team")],
        vec![strict(&[], true)],
    );
    let response = evict(context_with(caches, live), "cache-0").await;
    assert!(
        !response.allowed
            && response
                .result
                .message
                .contains("rule ProtectUnhealthyPodsWithLocalStorage"),
        "stale readiness: {}",
        response.result.message
    );
}

/// A claim bound to a `local` PersistentVolume is local storage (the KEP's
/// own example); one bound to network storage is not.
#[tokio::test]
async fn eviction_webhook_follows_claims_to_node_local_volumes() {
    let budget = pdb(
        "web",
        Some("AlwaysAllow"),
        json!({"observedGeneration": 1, "currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 2}),
    );
    let subject = with_volume(
        pod("db-0", &[]),
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}),
    );
    let claim = |volume: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "data-db-0", "namespace": "team"}, "spec": {"volumeName": volume}})).unwrap()
    };
    let local: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "local-1"},
        "spec": {"local": {"path": "/mnt/disks/ssd1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}},
    }))
    .unwrap();
    let network: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "nfs-1"},
        "spec": {"nfs": {"server": "nfs.example.com", "path": "/export"}},
    }))
    .unwrap();
    for (volume, denied) in [("local-1", true), ("nfs-1", false)] {
        let pods = vec![subject.clone(), pod("db-1", &["Ready"])];
        let live = Live {
            pods: pods.clone(),
            pdbs: vec![budget.clone()],
            claims: vec![claim(volume)],
            volumes: vec![local.clone(), network.clone()],
            ..Live::default()
        };
        let caches = Caches::of(
            pods,
            vec![budget.clone()],
            vec![namespace("team")],
            vec![strict(&[], true)],
        );
        let response = evict(context_with(caches, live), "db-0").await;
        assert_eq!(
            !response.allowed, denied,
            "{volume}: {}",
            response.result.message
        );
        if denied {
            assert_eq!(response.result.code, 429);
            assert!(
                response
                    .result
                    .message
                    .contains("keeps data in local volume \"data\""),
                "{}",
                response.result.message
            );
        }
    }
}

/// A live read that does not answer must not leave the review to the apiserver's
/// timeout, where failurePolicy Ignore lets the eviction through unchecked: the review is
/// answered 429 "retry" before the `timeout` the apiserver sends with the call.
#[tokio::test]
async fn eviction_webhook_answers_retry_before_the_apiservers_deadline() {
    let budget = pdb(
        "web",
        None,
        json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1, "expectedPods": 2}),
    );
    // web-0 is not in the cache yet, so only the API can tell.
    let caches = Caches::of(
        vec![pod("web-1", &["Ready"])],
        vec![budget],
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let live = Live {
        stalled: true,
        ..Live::default()
    };
    let started = std::time::Instant::now();
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        answer(
            context_with(caches, live),
            "validate-eviction?timeout=1s",
            eviction_review("web-0"),
        ),
    )
    .await
    .expect("no answer within 3 s, the apiserver gave up after 1 s");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "{}",
        response.result.message
    );
    assert!(
        response.result.message.contains("retry"),
        "{}",
        response.result.message
    );
}

fn synced_budget(desired: i32, current: i32) -> PodDisruptionBudget {
    pdb(
        "web",
        None,
        json!({"observedGeneration": 1, "currentHealthy": current, "desiredHealthy": desired, "disruptionsAllowed": current - desired, "expectedPods": current}),
    )
}

/// Where the caches cannot change the answer, the review reads nothing from the API
/// (a drain's reviews went through a 20 QPS client, two reads each, and timed out).
#[tokio::test]
async fn eviction_webhook_decides_from_the_caches_where_they_cannot_change_the_answer() {
    let synced = &["Ready", "example.com/Synced"][..];
    // (case, pods, policy, allowed)
    let cases = [
        (
            "a strict count with a pod to spare",
            vec![
                pod("web-0", synced),
                pod("web-1", synced),
                pod("web-2", synced),
                pod("web-3", synced),
            ],
            strict(&["example.com/Synced"], false),
            true,
        ),
        (
            "a strict count already short",
            vec![
                pod("web-0", synced),
                pod("web-1", &["Ready"]),
                pod("web-2", &["Ready"]),
            ],
            strict(&["example.com/Synced"], false),
            false,
        ),
        (
            "a Ready pod without local storage",
            vec![pod("web-0", synced), pod("web-1", synced)],
            strict(&[], true),
            true,
        ),
    ];
    for (case, pods, policy, allowed) in cases {
        let live = Arc::new(Live {
            pods: pods.clone(),
            pdbs: vec![synced_budget(2, pods.len() as i32)],
            ..Live::default()
        });
        let caches = Caches::of(
            pods.clone(),
            live.pdbs.clone(),
            vec![namespace("team")],
            vec![policy],
        );
        let response = evict(context_reading(caches, live.clone()), "web-0").await;
        assert_eq!(
            response.allowed, allowed,
            "{case}: {}",
            response.result.message
        );
        assert_eq!(*live.reads.lock().unwrap(), Vec::<String>::new(), "{case}");
    }
}

/// Where the caches could turn a denial into an allow, the review reads the object
/// fresh: a pod not cached yet, a pod cached Pending, a strict count with no pod to spare.
#[tokio::test]
async fn eviction_webhook_reads_fresh_only_what_could_change_the_answer() {
    let synced = &["Ready", "example.com/Synced"][..];
    let pending = |name: &str| {
        let mut p = pod(name, synced);
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        p
    };
    let peers = vec![pod("web-1", synced), pod("web-2", synced)];
    // (case, cached subject, desiredHealthy, reads)
    let cases = [
        ("not cached", None, 1, vec!["pod web-0"]),
        (
            "cached Pending",
            Some(pending("web-0")),
            1,
            vec!["pod web-0"],
        ),
        (
            "no pod to spare",
            Some(pod("web-0", synced)),
            2,
            vec!["pdb web"],
        ),
    ];
    for (case, cached, desired, reads) in cases {
        let mut live_pods = peers.clone();
        live_pods.push(pod("web-0", synced));
        let live = Arc::new(Live {
            pods: live_pods,
            pdbs: vec![synced_budget(desired, 3)],
            ..Live::default()
        });
        let mut cached_pods = peers.clone();
        cached_pods.extend(cached);
        let caches = Caches::of(
            cached_pods,
            live.pdbs.clone(),
            vec![namespace("team")],
            vec![strict(&["example.com/Synced"], false)],
        );
        let response = evict(context_reading(caches, live.clone()), "web-0").await;
        assert!(response.allowed, "{case}: {}", response.result.message);
        assert_eq!(*live.reads.lock().unwrap(), reads, "{case}");
    }
}

/// Concurrent reviews that need the same object read it once between them.
#[tokio::test]
async fn eviction_webhook_shares_one_read_per_object_between_concurrent_reviews() {
    let synced = &["Ready", "example.com/Synced"][..];
    let pods: Vec<Pod> = (0..8).map(|i| pod(&format!("web-{i}"), synced)).collect();
    let live = Arc::new(Live {
        pods: pods.clone(),
        // 8 healthy, 7 desired: every pod's strict count is at its boundary.
        pdbs: vec![synced_budget(7, 8)],
        latency: std::time::Duration::from_millis(200),
        ..Live::default()
    });
    // web-0 is not cached yet.
    let caches = Caches::of(
        pods[1..].to_vec(),
        live.pdbs.clone(),
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    );
    let ctx = context_reading(caches, live.clone());
    let reviews = (0..8).map(|i| evict(ctx.clone(), if i < 4 { "web-0" } else { "web-1" }));
    futures::future::join_all(reviews).await;
    let reads = live.reads.lock().unwrap().clone();
    let count = |read: &str| reads.iter().filter(|r| *r == read).count();
    assert_eq!((count("pod web-0"), count("pdb web")), (1, 1), "{reads:?}");
}

/// An eviction review as an evictor sends it, not a dry run.
async fn evict_for_real(ctx: Arc<Context>, name: String) -> AdmissionResponse {
    let mut review = eviction_review(&name);
    review["request"]["dryRun"] = json!(false);
    answer(ctx, "validate-eviction", review).await
}

/// N concurrent reviews of one PDB where k may go allow exactly k
/// on one replica (each decided on the same cached snapshot, all N were allowed), and read the
/// PDB at most once per round trip between them.
#[tokio::test]
async fn eviction_webhook_allows_exactly_what_the_budget_spares_among_concurrent_reviews() {
    let synced = &["Ready", "example.com/Synced"][..];
    let pods: Vec<Pod> = (0..8).map(|i| pod(&format!("web-{i}"), synced)).collect();
    // (minAvailable as desiredHealthy of 8, allowed k)
    for (desired, k) in [(7, 1), (6, 2), (5, 3)] {
        let live = Arc::new(Live {
            pods: pods.clone(),
            pdbs: vec![synced_budget(desired, 8)],
            latency: std::time::Duration::from_millis(100),
            ..Live::default()
        });
        let caches = Caches::of(
            pods.clone(),
            live.pdbs.clone(),
            vec![namespace("team")],
            vec![strict(&["example.com/Synced"], false)],
        );
        let ctx = context_reading(caches, live.clone());
        let reviews = (0..8).map(|i| evict_for_real(ctx.clone(), format!("web-{i}")));
        let responses = futures::future::join_all(reviews).await;
        let allowed = responses.iter().filter(|r| r.allowed).count();
        assert_eq!(allowed, k, "desiredHealthy {desired}");
        let reads = live.reads.lock().unwrap().clone();
        let pdb_reads = reads.iter().filter(|r| *r == "pdb web").count();
        assert!(
            (1..=k).contains(&pdb_reads),
            "desiredHealthy {desired}: {reads:?}"
        );
    }
}

/// The micro-bench behind the eviction review's data access: one review's decision (dry run,
/// from the caches) in a namespace of `n` pods, 20 per workload, one PDB per workload, under a
/// strict policy. The review's work should follow the pod's PDB and its pods, not `n`.
/// `cargo test -p pdb-policy-webhook --lib -- --ignored --nocapture eviction_review_cost`
#[tokio::test]
#[ignore = "micro-bench; run by hand"]
async fn eviction_review_cost() {
    let synced = ["Ready", "example.com/Synced"];
    for n in [1_000, 10_000, 30_000] {
        let workloads = n / 20;
        let pods: Vec<Pod> = (0..n)
            .map(|i| {
                let mut p = pod(&format!("w{}-{i}", i % workloads), &synced);
                p.metadata.labels =
                    Some([("app".to_owned(), format!("w{}", i % workloads))].into());
                p
            })
            .collect();
        let pdbs: Vec<PodDisruptionBudget> = (0..workloads)
            .map(|w| {
                let mut budget = synced_budget(2, 20);
                budget.metadata.name = Some(format!("w{w}"));
                budget.spec.as_mut().unwrap().selector =
                    serde_json::from_value(json!({"matchLabels": {"app": format!("w{w}")}}))
                        .unwrap();
                budget
            })
            .collect();
        let policy = strict(&["example.com/Synced"], false);
        let caches = Caches::of(pods, pdbs, vec![namespace("team")], vec![policy.clone()]);
        let ctx = context(caches);
        let reviews = 200;
        let start = std::time::Instant::now();
        for r in 0..reviews {
            let i = r * 7919 % n;
            let name = format!("w{}-{i}", i % workloads);
            let decided = decide(&ctx, "team", &name, &policy, true).await.unwrap();
            assert_eq!(decided, Some(None), "{name} is allowed");
        }
        let per_review = start.elapsed() / reviews as u32;
        println!(
            "{n:>6} pods, {workloads:>5} PDBs in the namespace: {:>9.1} us per eviction review",
            per_review.as_secs_f64() * 1e6
        );
    }
}
