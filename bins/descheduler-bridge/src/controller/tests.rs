//! One EvictionRequest's reconcile against the recording fake apiserver
//! ([`evictkit_fake_api`]): when the bridge withdraws from a descheduler eviction it turned
//! into a request, and what it writes on the pod, on both APIs.

use evictkit_api::keys::{
    DESCHEDULER_BRIDGE_EVACUATION_STARTED, DESCHEDULER_EVICTION_IN_PROGRESS,
    DESCHEDULER_REQUEST_EVICT_ONLY,
};
use evictkit_core::descheduler_bridge::{DESCHEDULER_ASSUMED_TTL, Ttls};
use evictkit_fake_api::{Answer, FakeApi};
use evictkit_runtime::process::cli::ControllerArgs;
use evictkit_runtime::process::metrics::Metrics;
use jiff::SignedDuration;
use serde_json::Value;

use super::*;

const CRD_REQUEST: &str = "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests/uid-1";
const LIFECYCLE_REQUEST: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/ns/evictionrequests/web-0-evictkit-io-descheduler-bridge";
const POD: &str = "/api/v1/namespaces/ns/pods/web-0";

/// The pod's request on the CRD, the bridge among its requesters; `condition`: a condition
/// type `True` on it (`Evicted`, `Canceled`), if any.
fn crd_request(condition: Option<&str>) -> Value {
    let conditions: Vec<Value> = condition
        .into_iter()
        .map(|kind| {
            json!({"type": kind, "status": "True", "reason": kind, "message": "",
                   "lastTransitionTime": "2026-12-06T08:00:00Z"})
        })
        .collect();
    json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "uid-1", "namespace": "ns", "uid": "uid-request",
                     "resourceVersion": "5", "generation": 1},
        "spec": {"requesters": [{"name": DESCHEDULER_REQUESTER}],
                 "target": {"pod": {"name": "web-0", "uid": "uid-1"}}},
        "status": {"observedGeneration": 1, "conditions": conditions},
    })
}

/// The bridge's own request on lifecycle.k8s.io, intent Eviction; `condition` as above
/// (`TargetEvicted`, `Failed`).
fn lifecycle_request(condition: Option<&str>) -> Value {
    let conditions: Vec<Value> = condition
        .into_iter()
        .map(|kind| {
            json!({"type": kind, "status": "True", "reason": kind, "message": "",
                   "lastTransitionTime": "2026-12-06T08:00:00Z"})
        })
        .collect();
    json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "web-0-evictkit-io-descheduler-bridge", "namespace": "ns",
                     "uid": "uid-request", "resourceVersion": "5", "generation": 1},
        "spec": {"intent": "Eviction", "requester": DESCHEDULER_REQUESTER_KEY,
                 "target": {"pod": {"name": "web-0", "uid": "uid-1"}}},
        "status": {"observedGeneration": 1, "conditions": conditions},
    })
}

/// The pod (UID `uid-1`, resourceVersion 7), opted in, with the bridge's marks of an
/// evacuation `started` ago if any.
fn pod(started: Option<SignedDuration>) -> Value {
    let mut annotations = json!({ DESCHEDULER_REQUEST_EVICT_ONLY: "" });
    if let Some(ago) = started {
        annotations[DESCHEDULER_EVICTION_IN_PROGRESS] = json!("uid-1");
        annotations[DESCHEDULER_BRIDGE_EVACUATION_STARTED] =
            json!((Timestamp::now() - ago).to_string());
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
                     "annotations": annotations},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]},
        "status": {"phase": "Running"},
    })
}

/// A fake apiserver holding `request` at `path` and `pod` (`None`: gone); a withdrawal is
/// answered with the request patched, a pod patch with the pod patched.
fn apiserver(path: &str, request: &Value, pod: Option<Value>) -> FakeApi {
    let api = FakeApi::new()
        .on("GET", path, Answer::object(request.clone()))
        .on("PATCH", path, Answer::patched(request.clone()));
    match pod {
        Some(pod) => {
            api.on("GET", POD, Answer::object(pod.clone()))
                .on("PATCH", POD, Answer::patched(pod))
        }
        None => api,
    }
}

/// A term's context with a one-hour `--max-evacuation-request-ttl`.
fn context(api: &FakeApi) -> Arc<Context> {
    let client = api.client();
    let metrics = Metrics::new(crate::field_manager::COMPONENT).unwrap();
    let (pods, _) = kube::runtime::reflector::store();
    Arc::new(Context {
        settings: Arc::new(Settings {
            ttls: Ttls {
                evacuation: SignedDuration::from_hours(1),
                descheduler: DESCHEDULER_ASSUMED_TTL,
            },
            namespace: None,
            metrics: BridgeMetrics::register(&metrics).unwrap(),
            manager: crate::field_manager::COMPONENT.to_owned(),
            dry_run: false,
            recorder: EventRecorder::from_client(client.clone(), crate::field_manager::COMPONENT),
            controller: ControllerArgs {
                concurrent_syncs: 1,
            }
            .config(),
            listing: None,
        }),
        client,
        pods,
    })
}

fn parsed<R: Request>(request: &Value) -> Arc<R> {
    Arc::new(serde_json::from_value(request.clone()).unwrap())
}

/// The merge patch that clears the bridge's marks, as the pod was read (its UID and
/// resourceVersion the preconditions).
fn assert_marks_cleared(call: &evictkit_fake_api::Call) {
    assert_eq!(call.field("/metadata/uid"), "uid-1");
    assert_eq!(call.field("/metadata/resourceVersion"), "7");
    let annotations = call.field("/metadata/annotations");
    assert_eq!(annotations[DESCHEDULER_EVICTION_IN_PROGRESS], Value::Null);
    assert!(
        annotations
            .as_object()
            .is_some_and(|a| a.contains_key(DESCHEDULER_EVICTION_IN_PROGRESS)
                && a.contains_key(DESCHEDULER_BRIDGE_EVACUATION_STARTED)
                && a.values().all(Value::is_null)),
        "{annotations}"
    );
}

#[tokio::test]
async fn a_canceled_request_is_withdrawn_from_and_the_pods_marks_cleared() {
    let request = crd_request(Some("Canceled"));
    let api = apiserver(
        CRD_REQUEST,
        &request,
        Some(pod(Some(SignedDuration::from_mins(5)))),
    );

    let action = reconcile(parsed::<EvictionRequest>(&request), context(&api))
        .await
        .unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(
        api.object_lines(),
        [
            format!("GET {CRD_REQUEST}"),
            format!("GET {POD}"),
            format!("PATCH {CRD_REQUEST}"),
            format!("PATCH {POD}")
        ],
        "withdrawn first, then the marks cleared"
    );
    let calls = api.object_calls();
    let withdrawal = &calls[2];
    assert!(withdrawal.has_query(&format!("fieldManager={DESCHEDULER_REQUESTER}")));
    let withdrawn = withdrawal.patched(&request).unwrap();
    assert_eq!(withdrawn["spec"]["requesters"], json!([]));
    // Written at the resourceVersion read: a request written meanwhile is a 409.
    assert_eq!(
        withdrawal.field("/0"),
        &json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "5"})
    );
    assert_marks_cleared(&calls[3]);
    assert_eq!(api.event_reasons(), ["EvacuationEnded"]);
    assert_eq!(
        api.event_notes(),
        ["Evacuation of pod ns/web-0 ended (canceled): cleared eviction-in-progress"]
    );
}

/// KEP-1397's mitigation: an evacuation that takes longer than the TTL is abandoned, so the
/// descheduler may ask again.
#[tokio::test]
async fn an_evacuation_past_its_ttl_is_abandoned_with_a_warning() {
    let request = crd_request(None);
    let api = apiserver(
        CRD_REQUEST,
        &request,
        Some(pod(Some(SignedDuration::from_hours(2)))),
    );

    reconcile(parsed::<EvictionRequest>(&request), context(&api))
        .await
        .unwrap();
    api.quiet().await;

    assert_eq!(
        api.object_lines(),
        [
            format!("GET {CRD_REQUEST}"),
            format!("GET {POD}"),
            format!("PATCH {CRD_REQUEST}"),
            format!("PATCH {POD}")
        ]
    );
    assert_marks_cleared(&api.object_calls()[3]);
    assert_eq!(api.event_reasons(), ["EvacuationExpired"]);
}

/// The webhook asked, but its mark on the pod was lost (the patch failed): the controller
/// marks the pod, so the descheduler counts it, and looks again before the TTL passes.
#[tokio::test]
async fn a_request_in_progress_marks_a_pod_the_webhook_left_unmarked() {
    let request = crd_request(None);
    let api = apiserver(CRD_REQUEST, &request, Some(pod(None)));

    let action = reconcile(parsed::<EvictionRequest>(&request), context(&api))
        .await
        .unwrap();

    assert_eq!(
        api.object_lines(),
        [
            format!("GET {CRD_REQUEST}"),
            format!("GET {POD}"),
            format!("PATCH {POD}")
        ]
    );
    let mark = &api.object_calls()[2];
    assert_eq!(mark.field("/metadata/resourceVersion"), "7");
    let annotations = mark.field("/metadata/annotations");
    assert_eq!(annotations[DESCHEDULER_EVICTION_IN_PROGRESS], "uid-1");
    assert!(annotations[DESCHEDULER_BRIDGE_EVACUATION_STARTED].is_string());
    assert_ne!(
        action,
        Action::await_change(),
        "looked at again before the TTL passes"
    );
}

/// The pod changed between the read and the patch (the webhook re-marking it): the plan is
/// made again from fresh reads, soon.
#[tokio::test]
async fn a_mark_refused_on_its_precondition_is_planned_again_shortly() {
    let request = crd_request(None);
    let api = apiserver(CRD_REQUEST, &request, Some(pod(None))).on(
        "PATCH",
        POD,
        Answer::status(409, "Conflict", "the object has been modified"),
    );

    let action = reconcile(parsed::<EvictionRequest>(&request), context(&api))
        .await
        .unwrap();

    assert_eq!(action, Action::requeue(CHANGED_MEANWHILE));
}

/// A request deleted and made again under the same name is its successor's business: the
/// cached one's reconcile writes nothing.
#[tokio::test]
async fn a_request_replaced_meanwhile_is_left_to_its_successor() {
    let request = crd_request(Some("Canceled"));
    let mut successor = crd_request(None);
    successor["metadata"]["uid"] = json!("uid-successor");
    let api = apiserver(
        CRD_REQUEST,
        &successor,
        Some(pod(Some(SignedDuration::from_mins(5)))),
    );

    let action = reconcile(parsed::<EvictionRequest>(&request), context(&api))
        .await
        .unwrap();

    assert_eq!(action, Action::await_change());
    assert_eq!(api.lines(), [format!("GET {CRD_REQUEST}")]);
}

/// Upstream: the evictionrequest-controller mirrored TargetEvicted onto the bridge's own
/// request; the bridge withdraws by intent (its pod is gone, no marks to clear).
#[tokio::test]
async fn an_upstream_request_whose_pod_was_evicted_is_withdrawn_by_intent() {
    let request = lifecycle_request(Some("TargetEvicted"));
    let api = apiserver(LIFECYCLE_REQUEST, &request, None);

    let action = reconcile(parsed::<LifecycleRequest>(&request), context(&api))
        .await
        .unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(
        api.object_lines(),
        [
            format!("GET {LIFECYCLE_REQUEST}"),
            format!("GET {POD}"),
            format!("PATCH {LIFECYCLE_REQUEST}")
        ]
    );
    let withdrawal = &api.object_calls()[2];
    assert!(withdrawal.has_query(&format!("fieldManager={DESCHEDULER_REQUESTER_KEY}")));
    let withdrawn = withdrawal.patched(&request).unwrap();
    assert_eq!(withdrawn["spec"]["intent"], "Withdrawn");
    assert_eq!(withdrawn["spec"]["requester"], DESCHEDULER_REQUESTER_KEY);
    assert_eq!(api.event_reasons(), ["EvacuationEnded"]);
}

/// Another requester's request of the same pod on lifecycle.k8s.io is theirs alone.
#[tokio::test]
async fn an_upstream_request_of_another_requester_is_not_touched() {
    let mut request = lifecycle_request(Some("TargetEvicted"));
    request["spec"]["requester"] = json!("example.com/other");
    let api = apiserver(LIFECYCLE_REQUEST, &request, None);

    reconcile(parsed::<LifecycleRequest>(&request), context(&api))
        .await
        .unwrap();

    assert_eq!(api.lines(), Vec::<String>::new());
}
