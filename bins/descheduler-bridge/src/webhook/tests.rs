//! Reviews against the recording fake apiserver ([`evictkit_fake_api`]): which answers come
//! from the caches alone, and what a review writes when it evacuates a pod.

use evictkit_api::keys::{
    DESCHEDULER_BRIDGE_EVACUATION_STARTED, DESCHEDULER_EVICTION_IN_PROGRESS,
    DESCHEDULER_REQUEST_EVICT_ONLY, DESCHEDULER_REQUESTER, DESCHEDULER_REQUESTER_KEY,
};
use evictkit_fake_api::{Answer, FakeApi};
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::RequesterNames;
use serde_json::Value;

use super::*;

const DESCHEDULER: &str = "system:serviceaccount:kube-system:descheduler";

/// A pod `ns/web-0` (UID `uid-1`), running, with `annotations`.
fn pod(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
            "labels": {"app": "web"}, "annotations": annotations,
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]},
        "status": {"phase": "Running"},
    })
}

fn opted_in() -> Value {
    pod(json!({ DESCHEDULER_REQUEST_EVICT_ONLY: "" }))
}

/// A fake apiserver answering every call with `pod`.
fn apiserver(pod: Value) -> FakeApi {
    FakeApi::new().on("*", "*", Answer::object(pod))
}

/// A replica's context on the CRD, nobody else asking for any pod, its pod cache listed with
/// `cached`.
async fn context(client: Client, cached: Vec<Value>) -> Arc<Context> {
    let metrics = Metrics::new(crate::field_manager::COMPONENT).unwrap();
    let names = RequesterNames {
        crd: DESCHEDULER_REQUESTER,
        lifecycle: DESCHEDULER_REQUESTER_KEY,
    };
    Arc::new(Context {
        requester: Requester::new(client.clone(), ApiMode::Crd, names)
            .await
            .unwrap(),
        client,
        requests: Requests::none_served(),
        pods: Pods::listed(
            cached
                .into_iter()
                .map(|pod| serde_json::from_value(pod).unwrap())
                .collect(),
        ),
        users: [DESCHEDULER.to_owned()].into(),
        opt_in: OptIn::RequestEvictOnly,
        metrics: BridgeMetrics::register(&metrics).unwrap(),
        manager: crate::field_manager::COMPONENT.to_owned(),
        dry_run: false,
    })
}

/// The descheduler's dry-run eviction of `ns/web-0`: answered as a real one, writing nothing.
fn dry_run_eviction() -> AdmissionRequest<Eviction> {
    serde_json::from_value(json!({
        "uid": "review-1",
        "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "subResource": "eviction",
        "name": "web-0",
        "namespace": "ns",
        "operation": "CREATE",
        "userInfo": {"username": DESCHEDULER},
        "object": {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "web-0", "namespace": "ns"},
        },
        "dryRun": true,
    }))
    .unwrap()
}

fn in_background() -> Admission {
    Admission::deny(429, core::evacuation_message("ns", "web-0", "uid-1"))
}

#[tokio::test]
async fn a_cached_opted_in_pod_is_answered_without_an_api_call() {
    let api = apiserver(opted_in());
    let context = context(api.client(), vec![opted_in()]).await;
    assert_eq!(review(context, dry_run_eviction()).await, in_background());
    assert_eq!(api.lines(), Vec::<String>::new());
}

#[tokio::test]
async fn a_pod_not_cached_is_read_from_the_api() {
    let api = apiserver(opted_in());
    let context = context(api.client(), Vec::new()).await;
    assert_eq!(review(context, dry_run_eviction()).await, in_background());
    assert_eq!(api.lines(), ["GET /api/v1/namespaces/ns/pods/web-0"]);
}

#[tokio::test]
async fn a_pass_from_the_cache_is_confirmed_on_the_live_pod() {
    // The pod opted in a moment ago: the descheduler saw it, the cache not yet. Letting the
    // eviction through would evict at once a pod meant to leave in background.
    let api = apiserver(opted_in());
    let stale = context(api.client(), vec![pod(json!({}))]).await;
    assert_eq!(review(stale, dry_run_eviction()).await, in_background());
    assert_eq!(api.lines(), ["GET /api/v1/namespaces/ns/pods/web-0"]);
    // And one that has not opted in passes after that read.
    let api = apiserver(pod(json!({})));
    let current = context(api.client(), vec![pod(json!({}))]).await;
    assert_eq!(
        review(current, dry_run_eviction()).await,
        Admission::allow()
    );
    assert_eq!(api.lines(), ["GET /api/v1/namespaces/ns/pods/web-0"]);
}

/// [`dry_run_eviction`] as the descheduler sends it for real.
fn eviction() -> AdmissionRequest<Eviction> {
    let mut eviction = dry_run_eviction();
    eviction.dry_run = false;
    eviction
}

/// KEP-1397: the descheduler's eviction of an opted-in pod becomes the pod's EvictionRequest
/// (the bridge joining it as requester), the pod is marked eviction-in-progress, and the
/// answer is the 429 the descheduler counts as an eviction in background.
#[tokio::test]
async fn an_opted_in_pods_eviction_becomes_its_eviction_request_and_a_mark() {
    let request = "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests/uid-1";
    let api = FakeApi::new().on("PATCH", request, Answer::echo()).on(
        "PATCH",
        "/api/v1/namespaces/ns/pods/web-0",
        Answer::patched(opted_in()),
    );
    let context = context(api.client(), vec![opted_in()]).await;

    assert_eq!(review(context, eviction()).await, in_background());
    assert_eq!(
        api.lines(),
        [
            format!("GET {request}"),
            format!("PATCH {request}"),
            "PATCH /api/v1/namespaces/ns/pods/web-0".to_owned()
        ]
    );
    let calls = api.calls();
    let apply = &calls[1];
    assert!(apply.has_query(&format!("fieldManager={DESCHEDULER_REQUESTER}")));
    assert_eq!(
        apply.field("/spec/requesters"),
        &json!([{"name": DESCHEDULER_REQUESTER}])
    );
    assert_eq!(
        apply.field("/spec/target/pod"),
        &json!({"name": "web-0", "uid": "uid-1"})
    );
    let mark = calls[2].field("/metadata/annotations");
    assert_eq!(mark[DESCHEDULER_EVICTION_IN_PROGRESS], "uid-1");
    assert!(
        mark[DESCHEDULER_BRIDGE_EVACUATION_STARTED].is_string(),
        "{mark}"
    );
    assert!(calls[2].has_query(&format!("fieldManager={}", crate::field_manager::COMPONENT)));
}

/// An eviction the descheduler repeats joins the same request and keeps the evacuation's
/// start: its TTL counts from the first answer.
#[tokio::test]
async fn a_repeated_eviction_keeps_the_evacuations_start() {
    let started = "2026-12-06T07:00:00Z";
    let marked = pod(json!({
        DESCHEDULER_REQUEST_EVICT_ONLY: "",
        DESCHEDULER_EVICTION_IN_PROGRESS: "uid-1",
        DESCHEDULER_BRIDGE_EVACUATION_STARTED: started,
    }));
    let request = "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests/uid-1";
    let api = FakeApi::new().on("PATCH", request, Answer::echo()).on(
        "PATCH",
        "/api/v1/namespaces/ns/pods/web-0",
        Answer::patched(marked.clone()),
    );
    let context = context(api.client(), vec![marked]).await;

    assert_eq!(review(context, eviction()).await, in_background());
    let marks = api.calls_to("PATCH", "/api/v1/namespaces/ns/pods/web-0");
    assert_eq!(marks.len(), 1);
    let annotations = marks[0].field("/metadata/annotations");
    assert_eq!(
        annotations[DESCHEDULER_BRIDGE_EVACUATION_STARTED],
        Value::Null,
        "{annotations}"
    );
    assert_eq!(
        annotations[DESCHEDULER_EVICTION_IN_PROGRESS],
        Value::Null,
        "{annotations}"
    );
}

#[test]
fn precondition_is_read_from_the_eviction() {
    let eviction: Eviction = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "ns"},
        "deleteOptions": {"preconditions": {"uid": "uid-1"}}
    }))
    .unwrap();
    assert_eq!(precondition_uid(Some(&eviction)).as_deref(), Some("uid-1"));
    let bare: Eviction = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "ns"}
    }))
    .unwrap();
    assert_eq!(precondition_uid(Some(&bare)), None);
    assert_eq!(precondition_uid(None), None);
}
