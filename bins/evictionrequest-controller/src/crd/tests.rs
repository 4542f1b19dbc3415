//! The CRD controller's own bookkeeping, and one EvictionRequest's reconcile against the
//! recording fake apiserver ([`evictkit_fake_api`]): the status it writes and the eviction it
//! makes as the default interceptor, KEP-4563's `imperative-eviction.k8s.io`.

use evictkit_api::conditions::{EVICTION_REQUEST_CANCELED, REASON_VALIDATION_FAILED};
use std::time::Duration;

use evictkit_api::keys::{API_VERSION, EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR};
use evictkit_core::eviction_request::crd as core;
use evictkit_core::eviction_request::message_eviction_failed;
use evictkit_fake_api::{Answer, Call, FakeApi};
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction::EvictionClient;
use evictkit_runtime::control::backoff::Backoff;
use evictkit_runtime::process::cli::ControllerArgs;
use evictkit_runtime::process::metrics::Metrics;
use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::error::Error;
use super::reconcile::reconcile;
use super::*;
use crate::identity::COMPONENT;
use crate::target_pod::TargetPods;

fn request_at(version: &str) -> EvictionRequest {
    let mut request: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": "EvictionRequest",
        "metadata": {"name": "uid-1", "namespace": "ns"},
        "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-1"}}, "requesters": [{"name": "a.example.com"}]},
    }))
    .expect("a valid EvictionRequest");
    request.metadata.resource_version = Some(version.into());
    request
}

/// A finished request goes with its pod (its ownerReference): a write decided from the
/// cache meanwhile is answered 404, and the work is done, not retried.
#[test]
fn a_write_to_a_request_deleted_meanwhile_is_not_retried() {
    let write = |code: u16, name: Option<&str>| {
        Error::Write {
        action: "update the status of",
        request: "ns/uid-1".into(),
        source: Box::new(kube::Error::Api(
            serde_json::from_value(json!({
                "status": "Failure", "code": code, "reason": "Reason", "message": "answered",
                "details": name.map(|name| json!({"name": name, "group": "evictkit.io", "kind": "evictionrequests"})),
            }))
            .expect("a Status"),
        )),
    }
    };
    assert!(write(404, Some("uid-1")).deleted());
    assert!(!write(404, Some("uid-1")).superseded());
    assert!(write(409, Some("uid-1")).superseded());
    for (code, name) in [(404, None), (404, Some("uid-2")), (409, Some("uid-1"))] {
        assert!(!write(code, name).deleted(), "{code} about {name:?}");
    }
}

#[test]
fn a_cache_older_than_our_own_write_is_not_acted_on() {
    let written = OwnWrites::default();
    let key = ObjectRef::from_obj(&request_at("5"));
    let predate = |version: &str| {
        written.predate(&key, request_at(version).metadata.resource_version.as_ref())
    };
    assert!(!predate("5"), "nothing written yet");
    // The labels (5 -> 6), then the status (6 -> 7).
    written.replaced(&key, Some("5".into()));
    written.replaced(&key, Some("6".into()));
    assert!(predate("5"), "the cache still shows 5");
    assert!(predate("6"), "the label write only");
    assert!(!predate("7"), "the cache caught up");
    assert!(!predate("5"), "caught up once is enough");
    written.replaced(&key, Some("7".into()));
    written.forget(&key);
    assert!(!predate("7"), "a deleted request is forgotten");
}

const REQUEST: &str = "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests/uid-1";
const POD: &str = "/api/v1/namespaces/ns/pods/web-0";

/// A request for `ns/web-0` as a requester just created it: not yet seen by the controller.
fn new_request() -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "EvictionRequest",
        "metadata": {"name": "uid-1", "namespace": "ns", "uid": "uid-request",
                     "resourceVersion": "5", "generation": 1},
        "spec": {"target": {"pod": {"name": "web-0", "uid": "uid-1"}},
                 "requesters": [{"name": "a.example.com"}]},
    })
}

/// The running pod `ns/web-0` (UID `uid-1`) with `annotations`.
fn pod(annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
                     "annotations": annotations},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]},
        "status": {"phase": "Running"},
    }))
    .unwrap()
}

/// A fake apiserver whose status writes of the request are answered with the request
/// written, and whose Eviction API answers `eviction`.
fn apiserver(eviction: Answer) -> FakeApi {
    FakeApi::new()
        .on(
            "PATCH",
            &format!("{REQUEST}/status"),
            Answer::patched(new_request()),
        )
        .on("POST", &format!("{POD}/eviction"), eviction)
}

/// A term's context with a 20-minute heartbeat timeout, a 1 s first back-off and a 5-minute
/// `--finished-ttl`, its pod cache listed with `pods`.
fn context(api: &FakeApi, pods: Vec<Pod>) -> Arc<Context> {
    let client = api.client();
    let metrics = Arc::new(Metrics::new(COMPONENT).unwrap());
    let backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(600),
    };
    Arc::new(Context {
        settings: Arc::new(Settings {
            evictions: EvictionClient::new(client.clone(), metrics.clone()),
            recorder: EventRecorder::from_client(client.clone(), COMPONENT),
            metrics: CrdMetrics::register(&metrics).unwrap(),
            config: core::Config {
                heartbeat_timeout: SignedDuration::from_mins(20),
            },
            backoff,
            finished_ttl: Some(SignedDuration::from_mins(5)),
            dry_run: false,
            namespace: None,
            controller: ControllerArgs {
                concurrent_syncs: 1,
            }
            .config(),
            listing: None,
        }),
        pods: TargetPods::listed(client.clone(), pods),
        client,
        retries: PerObject::new(backoff),
        written: OwnWrites::default(),
    })
}

fn parsed(request: &Value) -> Arc<EvictionRequest> {
    Arc::new(serde_json::from_value(request.clone()).unwrap())
}

/// The `imperative-eviction.k8s.io` entry of a status write's interceptors.
fn imperative_entry(call: &Call) -> Value {
    let entries = call.field("/status/interceptors").as_array().cloned();
    entries
        .into_iter()
        .flatten()
        .find(|entry| entry["name"] == IMPERATIVE_EVICTION_INTERCEPTOR)
        .unwrap_or(Value::Null)
}

/// KEP-4563: a request for a pod without interceptors goes to the default interceptor, which
/// evicts the pod through the Eviction API; the status saying so is written before the
/// eviction, so a lost write can never turn an eviction into "target not found".
#[tokio::test]
async fn a_pod_without_interceptors_is_evicted_by_the_default_interceptor_after_the_status_says_so()
{
    let api = apiserver(Answer::evicted());
    let context = context(&api, vec![pod(json!({}))]);

    let action = reconcile(parsed(&new_request()), context).await.unwrap();
    api.quiet().await;

    assert_eq!(
        api.object_lines(),
        [
            format!("PATCH {REQUEST}/status"),
            format!("POST {POD}/eviction")
        ]
    );
    let calls = api.object_calls();
    let status = &calls[0];
    assert!(
        status.has_query(&format!("fieldManager={COMPONENT}")) && status.has_query("force=true")
    );
    assert_eq!(status.field("/metadata/resourceVersion"), "5");
    assert_eq!(
        status.field("/status/targetInterceptors"),
        &json!([{"name": IMPERATIVE_EVICTION_INTERCEPTOR}])
    );
    assert_eq!(
        status.field("/status/activeInterceptors"),
        &json!([IMPERATIVE_EVICTION_INTERCEPTOR])
    );
    assert_eq!(
        imperative_entry(status)["message"],
        "Evicting pod ns/web-0 through the Eviction API."
    );
    assert_eq!(calls[1].field("/deleteOptions/preconditions/uid"), "uid-1");
    assert_eq!(
        api.event_notes(),
        Vec::<String>::new(),
        "the status says it"
    );
    assert_eq!(action, Action::await_change());
}

/// A PodDisruptionBudget refuses: the retry count goes into the default interceptor's status
/// message (the KEP's wording), a Warning says why, and the next attempt waits its back-off.
#[tokio::test]
async fn an_eviction_a_budget_blocks_is_counted_in_the_status_and_retried_after_the_backoff() {
    let api = apiserver(Answer::blocked_by_budget(
        "The disruption budget web needs 2 healthy pods and has 2 currently",
    ));
    let context = context(&api, vec![pod(json!({}))]);

    let action = reconcile(parsed(&new_request()), context).await.unwrap();
    api.quiet().await;

    assert_eq!(
        api.object_lines(),
        [
            format!("PATCH {REQUEST}/status"),
            format!("POST {POD}/eviction"),
            format!("PATCH {REQUEST}/status")
        ]
    );
    let retried = &api.object_calls()[2];
    assert_eq!(
        imperative_entry(retried)["message"],
        message_eviction_failed(1)
    );
    assert_eq!(api.event_reasons(), ["EvictionFailed"]);
    let note = &api.event_notes()[0];
    assert!(
        note.starts_with("Cannot evict pod ns/web-0 (blocked_by_budget), retry 1 in 1s")
            && note.ends_with("needs 2 healthy pods and has 2 currently"),
        "{note}"
    );
    assert_eq!(action, Action::requeue(Duration::from_secs(1)));
}

/// The pod is neither cached nor in the API: the request is canceled (KEP, Validation) on one
/// read past the cache, with a Warning, and deleted once `--finished-ttl` has passed.
#[tokio::test]
async fn a_request_whose_pod_does_not_exist_is_canceled_after_one_read() {
    let api = apiserver(Answer::evicted());
    let context = context(&api, Vec::new());

    let action = reconcile(parsed(&new_request()), context).await.unwrap();
    api.quiet().await;

    assert_eq!(
        api.object_lines(),
        [format!("GET {POD}"), format!("PATCH {REQUEST}/status")]
    );
    let status = &api.object_calls()[1];
    let conditions = status
        .field("/status/conditions")
        .as_array()
        .cloned()
        .unwrap_or_default();
    let canceled = conditions
        .iter()
        .find(|c| c["type"] == EVICTION_REQUEST_CANCELED)
        .unwrap_or_else(|| panic!("no Canceled condition: {conditions:?}"));
    assert_eq!(canceled["status"], "True");
    assert_eq!(canceled["reason"], REASON_VALIDATION_FAILED);
    assert_eq!(api.event_reasons(), ["Canceled"]);
    // Looked at again when `--finished-ttl` has passed since the condition's (whole) second.
    let due = format!("{action:?}");
    assert!(due.contains("requeue_after: Some(29"), "{due}");
}

/// A pod naming an interceptor: the request goes to it first, with an Event for whoever
/// watches the request, and the controller does not evict.
#[tokio::test]
async fn a_pods_own_interceptor_is_activated_first_and_nothing_is_evicted() {
    let api = apiserver(Answer::evicted());
    let context = context(
        &api,
        vec![pod(json!({ EVICTION_INTERCEPTORS: "a.example.com" }))],
    );

    reconcile(parsed(&new_request()), context).await.unwrap();
    api.quiet().await;

    assert_eq!(api.object_lines(), [format!("PATCH {REQUEST}/status")]);
    let status = &api.object_calls()[0];
    assert_eq!(
        status.field("/status/targetInterceptors"),
        &json!([{"name": "a.example.com"}, {"name": IMPERATIVE_EVICTION_INTERCEPTOR}])
    );
    assert_eq!(
        status.field("/status/activeInterceptors"),
        &json!(["a.example.com"])
    );
    assert_eq!(api.event_notes(), ["Interceptor a.example.com is active."]);
}
