//! One pod's reconcile against the recording fake apiserver ([`evictkit_fake_api`]): the calls
//! KEP-4328's controller makes for a pod whose node stopped matching its
//! required-during-execution affinity, and for one that matches.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use evictkit_api::conditions::REASON_REQUIRED_NODE_AFFINITY_VIOLATION;
use evictkit_api::keys::{
    AFFINITY_EVICTOR_REQUESTER, AFFINITY_EVICTOR_REQUESTER_KEY, REQUIRED_DURING_EXECUTION,
};
use evictkit_core::affinity_eviction::{CONDITION_TYPE, REASON_MATCHES_AGAIN};
use evictkit_fake_api::{Answer, FakeApi};
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction::EvictionClient;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Requester, RequesterNames};
use evictkit_runtime::control::backoff::{Backoff, PerObject};
use evictkit_runtime::process::cli::ControllerArgs;
use evictkit_runtime::process::metrics::Metrics;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::cache::CachedPod;
use crate::context::{Context, Settings};
use crate::events::{EVENT_REASON, EVENT_REASON_DAEMONSET};
use crate::metrics::AffinityMetrics;
use crate::{COMPONENT, reconcile};

const POD: &str = "/api/v1/namespaces/ns/pods/web-0";
const USER_B_ALLOWED: &str = r#"{"nodeSelectorTerms":[{"matchExpressions":[{"key":"userB","operator":"In","values":["allow"]}]}]}"#;

/// node-1 with `userB=<user_b>`.
fn node(user_b: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": "node-1", "labels": {"userB": user_b}}}))
        .unwrap()
}

/// A running pod on node-1 that may only run where `userB=allow`; `marked`: our condition is
/// `True` on it (we acted on a violation before).
fn pod(marked: bool) -> Value {
    let conditions = match marked {
        true => json!([{"type": CONDITION_TYPE, "status": "True",
                        "reason": REASON_REQUIRED_NODE_AFFINITY_VIOLATION}]),
        false => json!([]),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "ns", "uid": "uid-web-0",
                     "resourceVersion": "1",
                     "annotations": {REQUIRED_DURING_EXECUTION: USER_B_ALLOWED}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]},
        "status": {"phase": "Running", "conditions": conditions},
    })
}

/// [`pod`] controlled by the DaemonSet `agent`.
fn daemonset_pod() -> Value {
    let mut pod = pod(false);
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": "agent", "uid": "uid-agent", "controller": true}]);
    pod
}

fn cached(pod: &Value) -> Arc<CachedPod> {
    Arc::new(serde_json::from_value(pod.clone()).unwrap())
}

/// A fake apiserver holding `pod`: its status patches answered with it patched.
fn apiserver(pod: &Value) -> FakeApi {
    FakeApi::new().on(
        "PATCH",
        &format!("{POD}/status"),
        Answer::patched(pod.clone()),
    )
}

/// A term's context in `--mode eviction` (with `requests`: `--mode eviction-request` on the
/// CRD), its node cache listed with `node`.
async fn context(api: &FakeApi, node: Node, requests: bool) -> Arc<Context> {
    let client = api.client();
    let metrics = Arc::new(Metrics::new(COMPONENT).unwrap());
    let backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(300),
    };
    let requester = match requests {
        true => Some(
            Requester::new(
                client.clone(),
                ApiMode::Crd,
                RequesterNames {
                    crd: AFFINITY_EVICTOR_REQUESTER,
                    lifecycle: AFFINITY_EVICTOR_REQUESTER_KEY,
                },
            )
            .await
            .unwrap(),
        ),
        false => None,
    };
    let settings = Arc::new(Settings {
        evictions: EvictionClient::new(client.clone(), metrics.clone()),
        recorder: EventRecorder::from_client(client.clone(), COMPONENT),
        metrics: AffinityMetrics::register(&metrics).unwrap(),
        enabled: true,
        dry_run: false,
        backoff,
        namespace: None,
        eviction_request_api: ApiMode::Crd,
        requester,
        controller: ControllerArgs {
            concurrent_syncs: 1,
        }
        .config(),
        listing: None,
    });
    let (nodes, mut writer) = reflector::store();
    for event in [
        watcher::Event::Init,
        watcher::Event::InitApply(node),
        watcher::Event::InitDone,
    ] {
        writer.apply_watcher_event(&event);
    }
    Arc::new(Context {
        client,
        settings,
        nodes,
        pods: Mutex::default(),
        retries: PerObject::new(backoff),
        rounds: Arc::default(),
    })
}

#[tokio::test]
async fn a_pod_whose_node_no_longer_matches_is_marked_then_evicted_through_the_eviction_api() {
    let api = apiserver(&pod(false)).on("POST", &format!("{POD}/eviction"), Answer::evicted());
    let context = context(&api, node("deny"), false).await;

    let action = reconcile(cached(&pod(false)), context).await.unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(
        api.object_lines(),
        [
            format!("PATCH {POD}/status"),
            format!("POST {POD}/eviction")
        ]
    );
    let calls = api.object_calls();
    let condition = &calls[0];
    assert_eq!(condition.field("/status/conditions/0/type"), CONDITION_TYPE);
    assert_eq!(condition.field("/status/conditions/0/status"), "True");
    assert_eq!(
        condition.field("/status/conditions/0/reason"),
        REASON_REQUIRED_NODE_AFFINITY_VIOLATION
    );
    // Exactly this pod: a same-named successor is never evicted.
    let eviction = &calls[1];
    assert_eq!(
        eviction.field("/deleteOptions/preconditions/uid"),
        "uid-web-0"
    );
    assert_eq!(api.event_reasons(), [EVENT_REASON]);
    assert_eq!(
        api.event_notes(),
        [
            "Evicting pod: node node-1 no longer matches the pod's required-during-execution node affinity"
        ]
    );
}

#[tokio::test]
async fn a_pod_whose_node_matches_is_left_alone_without_a_call() {
    let api = apiserver(&pod(false));
    let context = context(&api, node("allow"), false).await;

    let action = reconcile(cached(&pod(false)), context).await.unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(api.lines(), Vec::<String>::new());
}

#[tokio::test]
async fn a_pod_whose_node_matches_again_gets_its_condition_false_and_is_not_evicted() {
    let api = apiserver(&pod(true));
    let context = context(&api, node("allow"), false).await;

    reconcile(cached(&pod(true)), context).await.unwrap();
    api.quiet().await;

    assert_eq!(api.object_lines(), [format!("PATCH {POD}/status")]);
    let condition = &api.object_calls()[0];
    assert_eq!(condition.field("/status/conditions/0/status"), "False");
    assert_eq!(
        condition.field("/status/conditions/0/reason"),
        REASON_MATCHES_AGAIN
    );
}

/// A PodDisruptionBudget refuses: a Warning saying why, and the next attempt only after the
/// pod's back-off, however often the pod is reconciled meanwhile (our own condition's watch
/// event reconciles it at once).
#[tokio::test]
async fn an_eviction_a_budget_blocks_is_retried_only_after_the_backoff_with_a_warning() {
    let api = apiserver(&pod(false)).on(
        "POST",
        &format!("{POD}/eviction"),
        Answer::blocked_by_budget(
            "The disruption budget web needs 2 healthy pods and has 2 currently",
        ),
    );
    let context = context(&api, node("deny"), false).await;

    let first = reconcile(cached(&pod(false)), context.clone())
        .await
        .unwrap();
    // The watch event of our condition.
    let second = reconcile(cached(&pod(true)), context.clone())
        .await
        .unwrap();
    api.quiet().await;

    assert_eq!(first, Action::requeue(Duration::from_secs(1)));
    assert!(
        second != Action::await_change(),
        "still waiting for its next attempt: {second:?}"
    );
    assert_eq!(
        api.object_lines(),
        [
            format!("PATCH {POD}/status"),
            format!("POST {POD}/eviction")
        ],
        "one attempt, the condition written once"
    );
    let notes = api.event_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("Cannot evict pod (node node-1 no longer matches")
            && notes[0].contains("retrying in 1s")
            && notes[0].ends_with("needs 2 healthy pods and has 2 currently"),
        "{}",
        notes[0]
    );
    let failed = context.metrics.failed.with_label_values(&["ns", "web-0"]);
    assert_eq!(failed.get(), 1);
}

#[tokio::test]
async fn a_pod_gone_before_its_eviction_is_dropped_without_a_warning() {
    let api = apiserver(&pod(false)).on("POST", &format!("{POD}/eviction"), Answer::not_found());
    let context = context(&api, node("deny"), false).await;

    let action = reconcile(cached(&pod(false)), context).await.unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(api.event_notes(), Vec::<String>::new());
}

/// Evicting a pod its DaemonSet's template still places on the node would only have it
/// recreated there: it is left alone, and the DaemonSet gets the Warning.
#[tokio::test]
async fn a_daemonset_pod_its_template_would_recreate_is_not_evicted() {
    let daemonset = "/apis/apps/v1/namespaces/ns/daemonsets/agent";
    let api = apiserver(&daemonset_pod()).on(
        "GET",
        daemonset,
        Answer::object(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "ns", "uid": "uid-agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "c", "image": "pause"}]}}},
        })),
    );
    let context = context(&api, node("deny"), false).await;

    let action = reconcile(cached(&daemonset_pod()), context.clone())
        .await
        .unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(api.object_lines(), [format!("GET {daemonset}")]);
    let events = api
        .calls()
        .into_iter()
        .filter(|c| c.is_event())
        .collect::<Vec<_>>();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].field("/reason"), EVENT_REASON_DAEMONSET);
    assert_eq!(events[0].field("/regarding/kind"), "DaemonSet");
    assert_eq!(events[0].field("/regarding/name"), "agent");
    assert_eq!(context.metrics.daemonset_pods_not_evicted.get(), 1);
}

/// `--mode eviction-request`: the pod's EvictionRequest is created by this requester's
/// apply, and the pod is not evicted by us.
#[tokio::test]
async fn in_eviction_request_mode_a_violating_pod_is_asked_for_not_evicted() {
    let request = "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests/uid-web-0";
    let api = apiserver(&pod(false)).on("PATCH", request, Answer::echo());
    let context = context(&api, node("deny"), true).await;

    let action = reconcile(cached(&pod(false)), context).await.unwrap();
    api.quiet().await;

    assert_eq!(action, Action::await_change());
    assert_eq!(
        api.object_lines(),
        [
            format!("PATCH {POD}/status"),
            format!("GET {request}"),
            format!("PATCH {request}")
        ]
    );
    let apply = &api.calls_to("PATCH", request)[0];
    assert!(apply.has_query(&format!("fieldManager={AFFINITY_EVICTOR_REQUESTER}")));
    assert_eq!(
        apply.field("/spec/requesters"),
        &json!([{"name": AFFINITY_EVICTOR_REQUESTER}])
    );
    assert_eq!(
        apply.field("/spec/target/pod"),
        &json!({"name": "web-0", "uid": "uid-web-0"})
    );
    assert_eq!(
        api.event_notes(),
        [
            "Requested eviction: node node-1 no longer matches the pod's required-during-execution node affinity"
        ]
    );
}
