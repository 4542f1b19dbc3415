use super::*;
use evictkit_api::{
    PodDisruptionBudgetPolicySpec, PolicyMode, StricterEviction, UnhealthyPodEvictionPolicyType,
};
use evictkit_runtime::clients::pdb_policy::LiveReads;
use evictkit_runtime::process::metrics::Metrics;
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

fn synced_budget(desired: i32, current: i32) -> PodDisruptionBudget {
    pdb(
        "web",
        None,
        json!({"observedGeneration": 1, "currentHealthy": current, "desiredHealthy": desired, "disruptionsAllowed": current - desired, "expectedPods": current}),
    )
}

/// An eviction review as an evictor sends it, not a dry run.
async fn evict_for_real(ctx: Arc<Context>, name: String) -> AdmissionResponse {
    let mut review = eviction_review(&name);
    review["request"]["dryRun"] = json!(false);
    answer(ctx, "validate-eviction", review).await
}

// The PodDisruptionBudget webhooks: the policy defaulted, budgets checked.
mod pdb;
// The eviction webhook: the stricter rule, what it reads live and when.
mod eviction;
// Concurrent eviction reviews: one read per object, the budget spent exactly once.
mod concurrent;
// The eviction webhook's live reads through the API client, against the fake apiserver.
mod api;
