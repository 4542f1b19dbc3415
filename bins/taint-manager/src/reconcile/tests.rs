//! One pod's reconciles against the recording fake apiserver ([`evictkit_fake_api`]), which
//! answers every call at once: the order of calls and cache states a watch delivers under load,
//! replayed exactly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use evictkit_api::keys::{TAINT_MANAGER_REQUESTER, TAINT_MANAGER_REQUESTER_KEY};
use evictkit_api::taint_eviction_policy::{
    TaintEvictionAction, TaintEvictionPolicy, TaintEvictionPolicySpec,
};
use evictkit_core::zone_disruption::{
    DEFAULT_LARGE_CLUSTER_SIZE_THRESHOLD, DEFAULT_NODE_EVICTION_RATE,
    DEFAULT_SECONDARY_NODE_EVICTION_RATE, DEFAULT_UNHEALTHY_ZONE_THRESHOLD, ZoneFlags,
};
use evictkit_fake_api::{Answer, FakeApi};
use evictkit_runtime::caches::listed::listed;
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction::EvictionClient;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::{Requester, RequesterNames};
use evictkit_runtime::control::backoff::{Backoff, PerObject};
use evictkit_runtime::process::cli::ControllerArgs;
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::process::shutdown::CancellationToken;
use evictkit_runtime::serving::http::Readiness;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Client;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::reconcile;
use crate::access;
use crate::cache::CachedPod;
use crate::context::{Context, Settings};
use crate::events::EVENT_REPORTER;
use crate::metrics::{COMPONENT, TaintMetrics};
use crate::pod_state::Pacer;
use crate::watches::pod_gone;

/// An apiserver that answers a create with the object sent and anything else with `pod`.
fn apiserver(pod: Value) -> FakeApi {
    apiserver_failing_deletes(pod, 0)
}

/// As [`apiserver`], but the first `failing` deletes are answered 503, as by an apiserver
/// that is shutting down.
fn apiserver_failing_deletes(pod: Value, failing: usize) -> FakeApi {
    let shutting_down = Answer::status(503, "ServiceUnavailable", "apiserver is shutting down");
    let deletes = std::iter::repeat_n(shutting_down, failing).chain([Answer::object(pod.clone())]);
    FakeApi::new()
        .on("*", "*", Answer::object(pod))
        .on_each("DELETE", "*", deletes)
        .on("POST", "*", Answer::echo())
}

/// As [`apiserver`], with `request` the answer to every call about the pod's EvictionRequest.
fn apiserver_with_request(pod: Value, request: Value) -> FakeApi {
    apiserver(pod)
        .on(
            "*",
            "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests/*",
            Answer::object(request),
        )
        .on("POST", "*", Answer::echo())
}

/// A context as one term of leadership has it, its node and namespace caches listed with
/// `node`, planning since an hour ago (no window to recover from a restart).
async fn context(client: Client, node: Node) -> Arc<Context> {
    let metrics = Arc::new(Metrics::new(COMPONENT).unwrap());
    let readiness = Readiness::default();
    let settings = Arc::new(Settings {
        access: Arc::new(access::Access::new(readiness.clone())),
        readiness,
        evictions: EvictionClient::new(client.clone(), metrics.clone()),
        recorder: EventRecorder::from_client(client.clone(), EVENT_REPORTER),
        metrics: TaintMetrics::register(&metrics).unwrap(),
        dry_run: false,
        backoff: Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(120),
        },
        eviction_request_api: ApiMode::Crd,
        requester: Requester::new(
            client.clone(),
            ApiMode::Crd,
            RequesterNames {
                crd: TAINT_MANAGER_REQUESTER,
                lifecycle: TAINT_MANAGER_REQUESTER_KEY,
            },
        )
        .await
        .unwrap(),
        controller: ControllerArgs {
            concurrent_syncs: 1,
        }
        .config(),
        zone_guard: false,
        zone_flags: ZoneFlags {
            node_eviction_rate: DEFAULT_NODE_EVICTION_RATE,
            secondary_node_eviction_rate: DEFAULT_SECONDARY_NODE_EVICTION_RATE,
            unhealthy_zone_threshold: DEFAULT_UNHEALTHY_ZONE_THRESHOLD,
            large_cluster_size_threshold: DEFAULT_LARGE_CLUSTER_SIZE_THRESHOLD,
        },
        pacer: Pacer::new(0.0),
        namespace: None,
        policy_selector: None,
    });
    let (nodes, mut node_writer) = reflector::store();
    let (namespaces, mut namespace_writer) = reflector::store::<Namespace>();
    let (nodes_lister, nodes_listed) = listed();
    let (namespaces_lister, namespaces_listed) = listed();
    for event in [
        watcher::Event::Init,
        watcher::Event::InitApply(node),
        watcher::Event::InitDone,
    ] {
        node_writer.apply_watcher_event(&event);
        nodes_lister.observe(&Ok(event));
    }
    for event in [watcher::Event::Init, watcher::Event::InitDone] {
        namespace_writer.apply_watcher_event(&event);
        namespaces_lister.observe(&Ok(event));
    }
    let (policies, _) = reflector::store();
    let (_, policies_listed) = listed();
    Arc::new(Context {
        client,
        settings,
        term: CancellationToken::new(),
        nodes,
        namespaces,
        policies,
        nodes_listed,
        namespaces_listed,
        policies_listed,
        policies_installed: false,
        requests: Arc::default(),
        requests_listed: Vec::new(),
        planning_since: Timestamp::now() - SignedDuration::from_hours(1),
        zones: Mutex::default(),
        pods: Mutex::default(),
        retries: PerObject::new(Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(120),
        }),
    })
}

/// [`context`] with the TaintEvictionPolicy CRD installed and `policies` listed.
async fn context_with_policies(
    client: Client,
    node: Node,
    policies: Vec<TaintEvictionPolicy>,
) -> Arc<Context> {
    let context = context(client, node).await;
    let mut context = Arc::into_inner(context).unwrap();
    let (store, mut writer) = reflector::store();
    let (lister, listed) = listed();
    let events = std::iter::once(watcher::Event::Init)
        .chain(policies.into_iter().map(watcher::Event::InitApply))
        .chain([watcher::Event::InitDone]);
    for event in events {
        writer.apply_watcher_event(&event);
        lister.observe(&Ok(event));
    }
    context.policies = store;
    context.policies_listed = listed;
    context.policies_installed = true;
    Arc::new(context)
}

/// A node the node-lifecycle-controller found unreachable just now.
fn unreachable_node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "node-1"},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                             "timeAdded": Timestamp::now().to_string()}]},
    }))
    .unwrap()
}

/// A pod on node-1 as the DefaultTolerationSeconds admission plugin leaves it, with 1 s
/// instead of 300; `disruption_target`: our DisruptionTarget condition is on it.
fn pod(disruption_target: bool) -> Value {
    let conditions = match disruption_target {
        true => json!([{"type": "DisruptionTarget", "status": "True",
                        "reason": "DeletionByTaintManager"}]),
        false => json!([]),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "ns", "uid": "uid-web-0",
                     "resourceVersion": "1", "creationTimestamp": "2026-11-27T10:00:00Z"},
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "c", "image": "pause"}],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 1}],
        },
        "status": {"conditions": conditions},
    })
}

fn cached(pod: &Value) -> Arc<CachedPod> {
    Arc::new(serde_json::from_value(pod.clone()).unwrap())
}

/// Upstream sends "Cancelling deletion" only for a pod whose deletion was still scheduled
/// (`cancelWorkWithEvent`: a timed worker that has fired is gone from its queue), and does not
/// plan on a pod update that changes neither tolerations nor node. Here every change of the
/// pod is reconciled, so under load a reconcile queued by our own DisruptionTarget patch runs
/// after the delete with the cache still showing the pod: it must not start a new window,
/// or the pod's disappearance is announced as a cancelled deletion (1,793 such Events for
/// 3,406 removed pods in `bench scale`'s 10,000-pod outage at 200 QPS).
#[tokio::test]
async fn a_pod_it_deleted_gets_no_cancelled_deletion_event() {
    let api = apiserver(pod(true));
    let context = context(api.client(), unreachable_node()).await;
    let before = cached(&pod(false));
    let key = ObjectRef::from_obj(before.as_ref());

    // The taint reaches the pod: it tolerates it for 1 s.
    reconcile(before.clone(), context.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The window is over: DisruptionTarget, then the delete.
    reconcile(before, context.clone()).await.unwrap();
    // The reconcile queued by the condition's watch event, before the deletion's arrived.
    reconcile(cached(&pod(true)), context.clone())
        .await
        .unwrap();
    // The deletion's watch event: the pod is gone (terminationGracePeriodSeconds 0).
    pod_gone(&context, key);
    api.quiet().await;

    let lines = api.lines();
    let writes: Vec<_> = lines.iter().filter(|r| r.contains("/pods/")).collect();
    assert_eq!(
        writes,
        [
            "PATCH /api/v1/namespaces/ns/pods/web-0/status",
            "DELETE /api/v1/namespaces/ns/pods/web-0"
        ],
        "one removal"
    );
    assert_eq!(
        api.event_notes(),
        ["Marking for deletion Pod ns/web-0"],
        "its announcement and nothing else"
    );
}

/// A failed delete (the apiserver restarting) is retried as a delete, with no call about
/// EvictionRequests: a removal announced as a deletion has no request to withdraw. Every
/// retry looked for one in both APIs before it (`bench scale --relist-after 30`, 1,000 pods at
/// 20 QPS: 206 GETs of EvictionRequests after the apiserver's restart, 24 of them refused 403
/// while its authorizer caught up, each failing its reconcile and doubling its backoff; the
/// first deletion 3.25 s after `/readyz`).
#[tokio::test]
async fn a_retried_deletion_reads_no_eviction_request() {
    let api = apiserver_failing_deletes(pod(false), 1);
    let context = context(api.client(), unreachable_node()).await;
    let due = cached(&pod(false));

    // The taint reaches the pod: it tolerates it for 1 s.
    reconcile(due.clone(), context.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The window is over: DisruptionTarget, then the delete, which fails: retried in 1 s.
    reconcile(due.clone(), context.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    reconcile(due, context.clone()).await.unwrap();
    api.quiet().await;

    assert_eq!(
        api.object_lines(),
        [
            "PATCH /api/v1/namespaces/ns/pods/web-0/status",
            "DELETE /api/v1/namespaces/ns/pods/web-0",
            "PATCH /api/v1/namespaces/ns/pods/web-0/status",
            "DELETE /api/v1/namespaces/ns/pods/web-0"
        ],
        "two attempts at the deletion and nothing else"
    );
}

/// A node without taints: the node recovered.
fn recovered_node() -> Node {
    serde_json::from_value(json!({"metadata": {"name": "node-1"}})).unwrap()
}

/// A policy governing every NoExecute taint with the EvictionRequest action.
fn eviction_request_policy() -> TaintEvictionPolicy {
    TaintEvictionPolicy::new(
        "request",
        TaintEvictionPolicySpec {
            action: TaintEvictionAction::EvictionRequest,
            ..TaintEvictionPolicySpec::default()
        },
    )
}

/// `pod(false)` tolerating nothing: due at once on a tainted node; `condition`: its
/// DisruptionTarget condition, if any.
fn untolerating_pod(condition: Option<Value>) -> Value {
    let mut pod = pod(false);
    pod["spec"]["tolerations"] = json!([]);
    pod["status"]["conditions"] = json!(condition.into_iter().collect::<Vec<_>>());
    pod
}

/// The pod's EvictionRequest on the CRD, listing the taint-manager, taken up by the
/// evictionrequest-controller (generation observed) and waiting (a PDB, an interceptor).
fn waiting_request() -> Value {
    json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "uid-web-0", "namespace": "ns", "uid": "uid-request",
                     "resourceVersion": "7", "generation": 1},
        "spec": {"requesters": [{"name": TAINT_MANAGER_REQUESTER}],
                 "target": {"pod": {"name": "web-0", "uid": "uid-web-0"}}},
        "status": {"observedGeneration": 1},
    })
}

/// kube-controller-manager's disruption controller turns a DisruptionTarget=True of a pod
/// that is not terminating back to False after 2 minutes (`stalePodDisruptionTimeout`), its
/// reason cleared. A request that waits longer (a PDB, an interceptor still at work) must not
/// be marked on the pod again after each reset: two status writes per waiting pod every 2
/// minutes, ours through the client budget the real removals need.
#[tokio::test]
async fn a_waiting_request_is_not_marked_again_after_the_disruption_controller_resets_it() {
    let api = apiserver_with_request(untolerating_pod(None), waiting_request());
    let context = context_with_policies(
        api.client(),
        unreachable_node(),
        vec![eviction_request_policy()],
    )
    .await;

    // The taint reaches the pod: requested at once; the controller takes the request up.
    reconcile(cached(&untolerating_pod(None)), context.clone())
        .await
        .unwrap();
    let status_writes = || {
        api.lines()
            .iter()
            .filter(|r| r.ends_with("/pods/web-0/status"))
            .count()
    };
    let first = status_writes();
    // Two minutes on, the disruption controller's reset reaches the pod watch.
    let reset = json!({"type": "DisruptionTarget", "status": "False"});
    reconcile(cached(&untolerating_pod(Some(reset))), context.clone())
        .await
        .unwrap();
    api.quiet().await;

    let again = status_writes() - first;
    assert_eq!(
        (first, again),
        (0, 0),
        "pod status writes for a request that waits (on asking, after the reset): {:?}",
        api.lines()
    );
}

/// The taint-manager was down for longer than the disruption controller's 2 minutes while
/// its request waited, so nothing on the pod says it asked; the node recovered meanwhile. The
/// request itself is the record: the restarted taint-manager withdraws it, or the pod is
/// evicted from a node that recovered.
#[tokio::test]
async fn a_restarted_taint_manager_withdraws_a_request_whose_pod_carries_no_mark() {
    let reset = json!({"type": "DisruptionTarget", "status": "False"});
    let pod = untolerating_pod(Some(reset));
    let api = apiserver_with_request(pod.clone(), waiting_request());
    let context = context_with_policies(
        api.client(),
        recovered_node(),
        vec![eviction_request_policy()],
    )
    .await;
    // The restarted taint-manager's watch of its requests lists it.
    let request = serde_json::from_value(waiting_request()).unwrap();
    for event in [
        watcher::Event::Init,
        watcher::Event::InitApply(request),
        watcher::Event::InitDone,
    ] {
        context.requests.apply_crd(&event);
    }

    reconcile(cached(&pod), context.clone()).await.unwrap();
    api.quiet().await;

    let path = "/apis/evictkit.io/v1alpha1/namespaces/ns/evictionrequests/uid-web-0";
    let withdrawals = api.calls_to("PATCH", path);
    assert_eq!(
        withdrawals.len(),
        1,
        "the request is withdrawn: {:?}",
        api.lines()
    );
    // A withdrawal removes the requester's entry.
    let withdrawal = &withdrawals[0];
    assert!(withdrawal.has_query(&format!("fieldManager={TAINT_MANAGER_REQUESTER}")));
    let withdrawn = withdrawal.patched(&waiting_request()).unwrap();
    assert_eq!(withdrawn["spec"]["requesters"], json!([]));
}
