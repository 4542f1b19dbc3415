//! What upstream's controller shares (its writes' errors), and one EvictionRequest's
//! reconcile against the recording fake apiserver ([`evictkit_fake_api`]): the one Eviction
//! of its pod created, its conditions written, an invalid request refused.

use evictkit_core::eviction_request::upstream::{
    self as core, CONDITION_FAILED, CONDITION_TARGET_EVICTED, REASON_AWAITING_EVICTION,
    REASON_EVICTION_INVALID, ROLE_REQUESTER,
};
use evictkit_fake_api::{Answer, Call, FakeApi};
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction::{EvictionClient, STALE_CACHE_RECHECK};
use evictkit_runtime::control::backoff::Backoff;
use evictkit_runtime::process::cli::ControllerArgs;
use evictkit_runtime::process::metrics::Metrics;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::error::write_error;
use super::*;
use crate::identity::COMPONENT;
use crate::target_pod::TargetPods;

/// An apiserver's answer `code` about `name` (`None`: about no object, e.g. an API not
/// served).
fn answered(code: u16, name: Option<&str>) -> kube::Error {
    let status = json!({
        "status": "Failure", "code": code, "reason": "Reason", "message": "answered",
        "details": name.map(|name| json!({"name": name, "group": "lifecycle.k8s.io", "kind": "evictions"})),
    });
    kube::Error::Api(serde_json::from_value(status).expect("a Status"))
}

fn eviction() -> Eviction {
    let mut eviction = Eviction::default();
    eviction.metadata.name = Some("web-0".into());
    eviction.metadata.namespace = Some("ns".into());
    eviction
}

/// The garbage collector removes an Eviction with its last request (and a request once
/// finished) while a reconcile decided from the cache: its write is answered 404, and the
/// work is done, not failed ("reconcile failed; retrying ... not found" was soak noise).
#[test]
fn a_write_to_an_object_deleted_meanwhile_ends_the_reconcile() {
    let eviction = eviction();
    let write = || write_error("update the status of", &eviction);
    let gone = write()(answered(404, Some("web-0")));
    assert_eq!(unless_stale(Err(gone)).ok(), Some(Action::await_change()));
    let superseded = write()(answered(409, Some("web-0")));
    assert_eq!(
        unless_stale(Err(superseded)).ok(),
        Some(Action::requeue(STALE_CACHE_RECHECK))
    );
    for (code, name) in [(404, None), (404, Some("web-1")), (403, Some("web-0"))] {
        let failed = write()(answered(code, name));
        assert!(
            unless_stale(Err(failed)).is_err(),
            "{code} about {name:?} is retried"
        );
    }
}

const REQUESTER: &str = "example.com/requester";
const REQUEST: &str =
    "/apis/lifecycle.k8s.io/v1alpha1/namespaces/ns/evictionrequests/web-0-example-com-requester";
const EVICTIONS: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/ns/evictions";
const POD: &str = "/api/v1/namespaces/ns/pods/web-0";

/// A requester's new request, intent Eviction, for `ns/web-0` of UID `uid-1`.
fn new_request() -> Value {
    json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "web-0-example-com-requester", "namespace": "ns",
                     "uid": "uid-request", "resourceVersion": "5", "generation": 1,
                     "creationTimestamp": "2026-12-06T08:00:00Z"},
        "spec": {"intent": "Eviction", "requester": REQUESTER,
                 "target": {"pod": {"name": "web-0", "uid": "uid-1"}}},
    })
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]},
        "status": {"phase": "Running"},
    }))
    .unwrap()
}

/// A term's context, its caches listed: pods with `pods`, requests with `requests`, no
/// Evictions.
fn context(api: &FakeApi, pods: Vec<Pod>, requests: Vec<Value>) -> Arc<Context> {
    let client = api.client();
    let metrics = Arc::new(Metrics::new(COMPONENT).unwrap());
    let backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(600),
    };
    let (request_store, mut request_writer) = kube::runtime::reflector::store();
    let requests_by_target = ByTarget::new();
    let events = std::iter::once(watcher::Event::Init)
        .chain(
            requests
                .into_iter()
                .map(|r| watcher::Event::InitApply(serde_json::from_value(r).unwrap())),
        )
        .chain([watcher::Event::InitDone]);
    for event in events {
        request_writer.apply_watcher_event(&event);
        requests_by_target.follow(&event, &request_store);
    }
    let (eviction_store, _) = kube::runtime::reflector::store();
    Arc::new(Context {
        settings: Arc::new(Settings {
            evictions: EvictionClient::new(client.clone(), metrics.clone()),
            recorder: EventRecorder::from_client(client.clone(), COMPONENT),
            metrics: UpstreamMetrics::register(&metrics).unwrap(),
            config: core::Config::default(),
            backoff,
            finished_ttl: None,
            dry_run: false,
            namespace: None,
            controller: ControllerArgs {
                concurrent_syncs: 1,
            }
            .config(),
            listing: None,
        }),
        pods: TargetPods::listed(client.clone(), pods),
        requests_by_target,
        evictions_by_target: ByTarget::new(),
        eviction_store,
        retries: PerObject::new(backoff),
        written: OwnWrites::default(),
        client,
    })
}

fn apiserver() -> FakeApi {
    FakeApi::new().on("POST", EVICTIONS, Answer::echo()).on(
        "PATCH",
        &format!("{REQUEST}/status"),
        Answer::patched(new_request()),
    )
}

/// A status write's condition `kind`.
fn condition(call: &Call, kind: &str) -> Value {
    let conditions = call.field("/status/conditions").as_array().cloned();
    conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .unwrap_or(Value::Null)
}

/// Upstream's controller: the first request asking for a pod's eviction gets the pod its one
/// Eviction (labelled with who takes part, owned by the requests), and the request's
/// conditions follow that Eviction from then on.
#[tokio::test]
async fn a_request_with_eviction_intent_creates_its_pods_one_eviction() {
    let api = apiserver();
    let context = context(&api, vec![pod()], vec![new_request()]);
    let request: Arc<EvictionRequest> = Arc::new(serde_json::from_value(new_request()).unwrap());

    let action = unless_stale(reconcile_request(request, context).await).unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(
        api.object_lines(),
        [
            format!("POST {EVICTIONS}"),
            format!("PATCH {REQUEST}/status")
        ]
    );
    let calls = api.object_calls();
    let created = &calls[0];
    assert_eq!(created.field("/metadata/name"), "pod-1-web-0");
    assert_eq!(
        created.field("/spec/target/pod"),
        &json!({"name": "web-0", "uid": "uid-1"})
    );
    assert_eq!(
        created.field(&format!(
            "/metadata/labels/{}",
            REQUESTER.replace('/', "~1")
        )),
        ROLE_REQUESTER
    );
    assert_eq!(
        created.field("/metadata/ownerReferences/0/uid"),
        "uid-request"
    );
    let status = &calls[1];
    assert!(status.has_query(&format!("fieldManager={COMPONENT}")));
    assert_eq!(status.field("/metadata/resourceVersion"), "5");
    assert_eq!(status.field("/status/observedGeneration"), 1);
    for kind in [CONDITION_TARGET_EVICTED, CONDITION_FAILED] {
        let condition = condition(status, kind);
        assert_eq!(
            (&condition["status"], &condition["reason"]),
            (&json!("False"), &json!(REASON_AWAITING_EVICTION)),
            "{kind}"
        );
    }
}

/// A request for a pod that exists nowhere is refused early (upstream's validation): Failed
/// with its reason, a Warning, and no Eviction.
#[tokio::test]
async fn a_request_for_a_pod_that_does_not_exist_is_refused_without_an_eviction() {
    let api = apiserver();
    let context = context(&api, Vec::new(), vec![new_request()]);
    let request: Arc<EvictionRequest> = Arc::new(serde_json::from_value(new_request()).unwrap());

    unless_stale(reconcile_request(request, context).await).unwrap();
    api.quiet().await;

    assert_eq!(
        api.object_lines(),
        [format!("GET {POD}"), format!("PATCH {REQUEST}/status")]
    );
    let failed = condition(&api.object_calls()[1], CONDITION_FAILED);
    assert_eq!(failed["status"], "True");
    assert_eq!(failed["reason"], REASON_EVICTION_INVALID);
    assert_eq!(failed["message"], "Target pod not found.");
    assert_eq!(api.event_reasons(), ["EvictionInvalid"]);
}

const EVICTION: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/ns/evictions/pod-1-web-0";
const OTHER_REQUESTER: &str = "example.com/other";

/// A second requester's request for the same pod.
fn other_request() -> Value {
    let mut request = new_request();
    request["metadata"]["name"] = json!("web-0-example-com-other");
    request["metadata"]["uid"] = json!("uid-request-2");
    request["spec"]["requester"] = json!(OTHER_REQUESTER);
    request
}

/// The Eviction the first request got ([`a_request_with_eviction_intent_creates_its_pods_one_eviction`]),
/// as the apiserver stored it: labelled with its requester, owned by its request.
async fn created_eviction() -> Value {
    let api = apiserver();
    let context = context(&api, vec![pod()], vec![new_request()]);
    let request: Arc<EvictionRequest> = Arc::new(serde_json::from_value(new_request()).unwrap());
    unless_stale(reconcile_request(request, context).await).unwrap();
    api.quiet().await;
    let mut eviction = api.calls_to("POST", EVICTIONS)[0].body.clone().unwrap();
    eviction["metadata"]["namespace"] = json!("ns");
    eviction["metadata"]["uid"] = json!("uid-eviction");
    eviction["metadata"]["resourceVersion"] = json!("9");
    eviction
}

/// The Eviction's reconcile once a second requester asked for the same pod, against `api`;
/// returns the writes to the Eviction itself (not its status).
async fn refresh_for_a_second_requester(api: &FakeApi, eviction: &Value) -> Vec<Call> {
    let context = context(api, vec![pod()], vec![new_request(), other_request()]);
    let cached: Arc<Eviction> = Arc::new(serde_json::from_value(eviction.clone()).unwrap());
    let result = reconcile_eviction(cached, context).await;
    api.quiet().await;
    if let Err(error) = result {
        panic!("the reconcile failed: {error}; {:?}", api.object_lines());
    }
    api.calls_to("PATCH", EVICTION)
}

/// A second requester joins: its label and an ownerReference to its request are added by a
/// JSON patch at the resourceVersion read, the first requester's kept.
#[tokio::test]
async fn a_new_requester_is_labelled_and_owns_the_eviction_by_a_patch_at_the_version_read() {
    let eviction = created_eviction().await;
    let api = FakeApi::new()
        .on(
            "PATCH",
            &format!("{EVICTION}/status"),
            Answer::patched(eviction.clone()),
        )
        .on("PATCH", EVICTION, Answer::patched(eviction.clone()));

    let writes = refresh_for_a_second_requester(&api, &eviction).await;

    assert_eq!(writes.len(), 1, "{:?}", api.object_lines());
    let written = writes[0].patched(&eviction).expect("a patch that applies");
    assert_eq!(written["metadata"]["labels"][REQUESTER], ROLE_REQUESTER);
    assert_eq!(
        written["metadata"]["labels"][OTHER_REQUESTER],
        ROLE_REQUESTER
    );
    let owners: Vec<&Value> = written["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|owner| &owner["uid"])
        .collect();
    assert_eq!(owners, [&json!("uid-request"), &json!("uid-request-2")]);
}

/// The garbage collector removed the Eviction since the cache showed it: the labels' write is
/// answered 404 and ends there. A server-side apply would have created the Eviction again
/// (the apiserver creates what an apply names, whatever resourceVersion it carries); a JSON
/// patch never creates.
#[tokio::test]
async fn an_eviction_deleted_meanwhile_is_not_created_again_by_its_label_refresh() {
    let eviction = created_eviction().await;
    let api = FakeApi::new().on(
        "PATCH",
        &format!("{EVICTION}/status"),
        Answer::patched(eviction.clone()),
    );

    let writes = refresh_for_a_second_requester(&api, &eviction).await;

    assert_eq!(writes.len(), 1, "{:?}", api.object_lines());
    let operations = writes[0].body.as_ref().and_then(Value::as_array);
    assert!(
        operations.is_some_and(|operations| operations.contains(&json!(
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "9"}
        ))),
        "not a JSON patch at the version read: {:?} {:?}",
        writes[0].query,
        writes[0].body
    );
    assert_eq!(
        api.object_lines().last(),
        Some(&format!("PATCH {EVICTION}")),
        "nothing after the 404"
    );
}
