//! NodeDrains taken up or not, and a drain that cannot start, against the recording fake
//! apiserver ([`evictkit_fake_api`]).

use evictkit_fake_api::Answer;
use evictkit_fake_api::FakeApi;
use serde_json::Value;

use super::*;

const LEASE_NAMESPACE: &str = "evictkit";
const STATUS: &str = "/apis/evictkit.io/v1alpha1/nodedrains/node-1/status";

/// `kubectl evictkit drain --detach node-1` for the installation whose Lease is in
/// `controller_namespace`, with `spec` fields on top.
fn node_drain(controller_namespace: &str, spec: Value) -> NodeDrain {
    let mut drain = json!({
        "apiVersion": "evictkit.io/v1alpha1", "kind": "NodeDrain",
        "metadata": {"name": "node-1", "uid": "uid-drain", "resourceVersion": "3"},
        "spec": {"controllerNamespace": controller_namespace, "timeoutSeconds": 600},
    });
    if let (Some(fields), Some(into)) = (spec.as_object(), drain["spec"].as_object_mut()) {
        into.extend(fields.clone());
    }
    serde_json::from_value(drain).unwrap()
}

fn settings(api: &FakeApi) -> Arc<Settings> {
    let metrics = Arc::new(Metrics::new(COMPONENT).unwrap());
    Arc::new(Settings {
        recorder: EventRecorder::from_client(api.client(), COMPONENT),
        metrics: NodeDrainMetrics::register(&metrics).unwrap(),
        lease_namespace: LEASE_NAMESPACE.to_owned(),
    })
}

/// Another installation's drains (its Lease in another namespace) and finished ones are not
/// this controller's to run: nothing starts, nothing is written.
#[tokio::test]
async fn a_node_drain_of_another_installation_or_finished_is_not_taken_up() {
    let api = FakeApi::new();
    let settings = settings(&api);
    let mut running = HashMap::new();
    let term = CancellationToken::new();
    let mut finished = node_drain(LEASE_NAMESPACE, json!({}));
    finished.status = Some(NodeDrainStatus {
        result: Some("drained".to_owned()),
        ..NodeDrainStatus::default()
    });

    for drain in [node_drain("elsewhere", json!({})), finished] {
        take_up(&api.client(), &settings, &mut running, drain, &term);
    }
    api.quiet().await;

    assert!(running.is_empty());
    assert_eq!(api.lines(), Vec::<String>::new());
}

/// A spec the CRD's schema refuses today (one written before the rule) ends the drain at once,
/// `refused`, with the reason in its status and a Warning, rather than draining on a guess.
#[tokio::test]
async fn a_node_drain_whose_spec_is_refused_ends_refused_with_a_warning() {
    let drain = node_drain(LEASE_NAMESPACE, json!({"api": "v2"}));
    let answered = serde_json::to_value(&drain).unwrap();
    let api = FakeApi::new().on("PATCH", STATUS, Answer::patched(answered));
    let settings = settings(&api);

    drive(
        api.client(),
        settings.clone(),
        drain,
        CancellationToken::new(),
    )
    .await;
    api.quiet().await;

    assert_eq!(api.object_lines(), [format!("PATCH {STATUS}")]);
    let status = &api.calls_to("PATCH", STATUS)[0];
    assert!(
        status.has_query(&format!("fieldManager={COMPONENT}")) && status.has_query("force=true")
    );
    assert_eq!(status.field("/status/result"), "refused");
    let message = status.field("/status/message").as_str().unwrap_or_default();
    assert!(message.contains("v2"), "{message}");
    assert!(status.field("/status/finishTime").is_string());
    assert_eq!(api.event_reasons(), ["DrainStarted", "DrainEnded"]);
    assert_eq!(settings.metrics.running.get(), 0, "the drain is over");
}
