//! The eviction webhook with its live reads made by the API client, as in production, against
//! the recording fake apiserver: which objects a review reads, by which path, and what it
//! answers when a read fails or finds nothing.

use evictkit_fake_api::{Answer, FakeApi};

use super::*;

const WEB_0: &str = "/api/v1/namespaces/team/pods/web-0";
const PDB_WEB: &str = "/apis/policy/v1/namespaces/team/poddisruptionbudgets/web";

/// A context whose live reads go through `api`'s client.
fn context_on(caches: Caches, api: &FakeApi) -> Arc<Context> {
    let metrics = Metrics::new("pdb-policy-webhook").unwrap();
    Arc::new(Context::new(
        caches,
        WebhookMetrics::register(&metrics).unwrap(),
        Consistent::new(Arc::new(api.client())),
    ))
}

fn object<K: serde::Serialize>(object: &K) -> Answer {
    Answer::object(serde_json::to_value(object).unwrap())
}

/// Caches with `pods` and one PDB `web` needing 2 healthy of 2, under a policy asking for
/// `example.com/Synced`.
fn strict_caches(pods: Vec<Pod>, budget: PodDisruptionBudget) -> Caches {
    Caches::of(
        pods,
        vec![budget],
        vec![namespace("team")],
        vec![strict(&["example.com/Synced"], false)],
    )
}

fn tight_budget() -> PodDisruptionBudget {
    pdb(
        "web",
        None,
        json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 2}),
    )
}

#[tokio::test]
async fn a_pod_missing_from_the_cache_is_read_by_name_and_decided_on_what_the_api_says() {
    let synced = &["Ready", "example.com/Synced"][..];
    let api = FakeApi::new().on("GET", WEB_0, object(&pod("web-0", synced)));
    let caches = strict_caches(vec![pod("web-9", &["Ready"])], tight_budget());
    let response = evict(context_on(caches, &api), "web-0").await;
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "{}",
        response.result.message
    );
    assert!(
        response
            .result
            .message
            .contains("rule RequiredPodConditions"),
        "{}",
        response.result.message
    );
    assert_eq!(api.lines(), [format!("GET {WEB_0}")]);
}

#[tokio::test]
async fn a_pod_the_api_no_longer_has_is_left_to_the_apiservers_own_not_found() {
    let api = FakeApi::new();
    let caches = strict_caches(vec![pod("web-9", &["Ready"])], tight_budget());
    let response = evict(context_on(caches, &api), "web-0").await;
    assert!(response.allowed, "{}", response.result.message);
    assert_eq!(api.lines(), [format!("GET {WEB_0}")]);
}

#[tokio::test]
async fn a_read_the_apiserver_refuses_is_answered_429_retry_naming_the_pod() {
    let api = FakeApi::new().on(
        "GET",
        WEB_0,
        Answer::status(500, "InternalError", "etcd is unavailable"),
    );
    let caches = strict_caches(vec![pod("web-9", &["Ready"])], tight_budget());
    let ctx = context_on(caches, &api);
    let response = evict(ctx.clone(), "web-0").await;
    assert_eq!((response.allowed, response.result.code), (false, 429));
    let message = &response.result.message;
    assert!(
        message.starts_with("pdb-policy-webhook cannot decide the eviction of pod team/web-0")
            && message.contains("etcd is unavailable")
            && message.ends_with("; retry"),
        "{message}"
    );
    assert_eq!(
        ctx.metrics
            .requests
            .with_label_values(&["validate-eviction", "error"])
            .get(),
        1
    );
}

/// The PDB's `disruptedPods` in the cache lags a concurrent eviction of web-1: the strict
/// count is at its boundary, so the PDB is read, and only it.
#[tokio::test]
async fn a_budget_at_the_boundary_of_the_strict_count_is_read_fresh_and_nothing_else() {
    let synced = &["Ready", "example.com/Synced"][..];
    let budget = |disrupted: Value| {
        pdb(
            "web",
            None,
            json!({"observedGeneration": 1, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 3, "disruptedPods": disrupted}),
        )
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let api = FakeApi::new().on("GET", PDB_WEB, object(&budget(json!({"web-1": now}))));
    let pods = vec![
        pod("web-0", synced),
        pod("web-1", synced),
        pod("web-2", synced),
    ];
    let response = evict(
        context_on(strict_caches(pods, budget(json!({}))), &api),
        "web-0",
    )
    .await;
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "web-1 is on its way out: {}",
        response.result.message
    );
    assert_eq!(api.lines(), [format!("GET {PDB_WEB}")]);
}

/// An unready pod's claim is followed to its PersistentVolume; a `local` one is node-local
/// storage the policy protects.
#[tokio::test]
async fn an_unready_pods_claim_is_read_and_followed_to_its_volume() {
    let claim = "/api/v1/namespaces/team/persistentvolumeclaims/data-db-0";
    let volume = "/api/v1/persistentvolumes/local-1";
    let api = FakeApi::new()
        .on(
            "GET",
            claim,
            Answer::object(json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data-db-0", "namespace": "team"},
                "spec": {"volumeName": "local-1"},
            })),
        )
        .on(
            "GET",
            volume,
            Answer::object(json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "local-1"},
                "spec": {"local": {"path": "/mnt/disks/ssd1"}},
            })),
        );
    let budget = pdb(
        "web",
        Some("AlwaysAllow"),
        json!({"observedGeneration": 1, "currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 2}),
    );
    let subject = with_volume(
        pod("db-0", &[]),
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}),
    );
    let caches = Caches::of(
        vec![subject, pod("db-1", &["Ready"])],
        vec![budget],
        vec![namespace("team")],
        vec![strict(&[], true)],
    );
    let response = evict(context_on(caches, &api), "db-0").await;
    assert_eq!(
        (response.allowed, response.result.code),
        (false, 429),
        "{}",
        response.result.message
    );
    assert_eq!(
        api.lines(),
        [format!("GET {claim}"), format!("GET {volume}")]
    );
}
