//! The metrics KEP-4563 names for beta, on upstream's `lifecycle.k8s.io` API, and the workqueue
//! metrics of its two queues. Upstream's controller at the revision
//! docs/evictionrequest-upstream-parity.md pins exports none of these gauges; their labels are
//! those of its last revision that did, but for an Eviction's name, labelled `eviction` where
//! that revision kept `evictionrequest` from before the two kinds were split, and for the
//! objects' namespace, `target_namespace` where it had `namespace`: Prometheus keeps that name
//! for the scrape target's namespace and would rename ours (crates/runtime/src/process/metrics.rs).
//! Per-object series are replaced on every reconcile and removed with the object, so the
//! registry holds only live EvictionRequests and Evictions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use evictkit_api::keys::IMPERATIVE_EVICTOR_RESPONDER;
use evictkit_runtime::control::reconcile::Reconciles;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use prometheus::{IntCounter, IntGaugeVec};

use super::index::Targeting;
use crate::metrics::{QueueMetrics, gauges};

/// Label value of `target_type`: only pods can be targets.
const TARGET_POD: &str = "pod";
/// The workqueue `name`s of upstream's controller: its name (kube-controller-manager's
/// `evictionrequest-controller`) and the kind each queue reconciles.
const REQUEST_QUEUE: &str = "evictionrequest-controller_eviction_request";
const EVICTION_QUEUE: &str = "evictionrequest-controller_eviction";

/// (gauge prefix and namespace, object name).
type SeriesOwner = (String, String);
/// One series' label values, in the gauge's label order.
type LabelValues = Vec<String>;

#[derive(Clone)]
pub struct UpstreamMetrics {
    /// `evictionrequest_controller_responder_state{target_namespace, eviction, target_name,
    /// target_type, responder, state}` = 1.
    responder_state: IntGaugeVec,
    /// `evictionrequest_controller_requester_intent{target_namespace, evictionrequest, target_name,
    /// target_type, requester, intent}` = 1.
    requester_intent: IntGaugeVec,
    /// `evictionrequest_controller_target_responders{target_namespace, eviction, target_name,
    /// target_type}`: the KEP names it.
    target_responders: IntGaugeVec,
    /// `imperative_eviction_responder_controller_failed_evictions`: failed Eviction API calls
    /// of the imperative-eviction.k8s.io/evictor responder.
    pub failed_evictions: IntCounter,
    /// The EvictionRequest controller's reconciles
    /// (`evictkit_reconcile*{controller="evictionrequest"}`).
    pub request_reconciles: Reconciles,
    /// The Eviction controller's reconciles (`evictkit_reconcile*{controller="eviction"}`).
    pub eviction_reconciles: Reconciles,
    /// `workqueue_*{name="evictionrequest-controller_eviction_request"}`.
    pub request_queue: QueueMetrics,
    /// `workqueue_*{name="evictionrequest-controller_eviction"}`.
    pub eviction_queue: QueueMetrics,
    /// Label sets published per object (namespace/name), to remove those that no longer apply.
    published: Arc<Mutex<HashMap<SeriesOwner, Vec<LabelValues>>>>,
}

impl UpstreamMetrics {
    pub fn register(metrics: &Arc<Metrics>) -> Result<Self, MetricsError> {
        Ok(Self {
            responder_state: gauges(
                metrics,
                "evictionrequest_controller_responder_state",
                "1 for the state of each responder of each Eviction (KEP-4563).",
                &[
                        "target_namespace",
                        "eviction",
                        "target_name",
                        "target_type",
                        "responder",
                        "state",
                    ],
            )?,
            requester_intent: gauges(
                metrics,
                "evictionrequest_controller_requester_intent",
                "1 for the intent of each EvictionRequest's requester (KEP-4563).",
                &[
                        "target_namespace",
                        "evictionrequest",
                        "target_name",
                        "target_type",
                        "requester",
                        "intent",
                    ],
            )?,
            target_responders: gauges(
                metrics,
                "evictionrequest_controller_target_responders",
                "Responders of each Eviction, the default one included (KEP-4563).",
                &["target_namespace", "eviction", "target_name", "target_type"],
            )?,
            failed_evictions: metrics.add(IntCounter::new(
                    "imperative_eviction_responder_controller_failed_evictions",
                    format!(
                        "Failed Eviction API calls of the {IMPERATIVE_EVICTOR_RESPONDER} responder (KEP-4563)."
                    ),
                ),
            )?,
            request_reconciles: Reconciles::new(metrics, "evictionrequest"),
            eviction_reconciles: Reconciles::new(metrics, "eviction"),
            request_queue: QueueMetrics::register(metrics, REQUEST_QUEUE)?,
            eviction_queue: QueueMetrics::register(metrics, EVICTION_QUEUE)?,
            published: Arc::default(),
        })
    }

    fn key<K: kube::Resource>(object: &K) -> (String, String) {
        (object.namespace().unwrap_or_default(), object.name_any())
    }

    /// Replaces `gauge`'s series of one object by `series` (each set to `value`).
    fn publish(&self, key: SeriesOwner, gauge: &IntGaugeVec, series: Vec<(LabelValues, i64)>) {
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        for old in published.remove(&key).unwrap_or_default() {
            if !series.iter().any(|(labels, _)| *labels == old) {
                let labels: Vec<&str> = old.iter().map(String::as_str).collect();
                let _ = gauge.remove_label_values(&labels);
            }
        }
        for (labels, value) in &series {
            let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
            gauge.with_label_values(&refs).set(*value);
        }
        published.insert(key, series.into_iter().map(|(labels, _)| labels).collect());
    }

    pub fn observe_request(&self, request: &EvictionRequest) {
        let (namespace, name) = Self::key(request);
        let target = target_name(request);
        let labels = vec![
            namespace.clone(),
            name.clone(),
            target,
            TARGET_POD.to_owned(),
            request.spec.requester.clone(),
            request.spec.intent.clone(),
        ];
        self.publish(
            ("request:".to_owned() + &namespace, name),
            &self.requester_intent,
            vec![(labels, 1)],
        );
    }

    pub fn forget_request(&self, request: &EvictionRequest) {
        self.request_queue.forget(&ObjectRef::from_obj(request));
        let (namespace, name) = Self::key(request);
        self.publish(
            ("request:".to_owned() + &namespace, name),
            &self.requester_intent,
            Vec::new(),
        );
    }

    pub fn observe_eviction(&self, eviction: &Eviction) {
        let (namespace, name) = Self::key(eviction);
        let target = target_name(eviction);
        let responders = eviction
            .status
            .as_ref()
            .and_then(|s| s.target_responders.clone())
            .unwrap_or_default();
        let states = responders
            .iter()
            .map(|r| {
                let labels = vec![
                    namespace.clone(),
                    name.clone(),
                    target.clone(),
                    TARGET_POD.to_owned(),
                    r.name.clone(),
                    r.state.clone(),
                ];
                (labels, 1)
            })
            .collect();
        self.publish(
            ("state:".to_owned() + &namespace, name.clone()),
            &self.responder_state,
            states,
        );
        let count = vec![(
            vec![
                namespace.clone(),
                name.clone(),
                target,
                TARGET_POD.to_owned(),
            ],
            i64::try_from(responders.len()).unwrap_or(i64::MAX),
        )];
        self.publish(
            ("count:".to_owned() + &namespace, name),
            &self.target_responders,
            count,
        );
    }

    pub fn forget_eviction(&self, eviction: &Eviction) {
        self.eviction_queue.forget(&ObjectRef::from_obj(eviction));
        let (namespace, name) = Self::key(eviction);
        self.publish(
            ("state:".to_owned() + &namespace, name.clone()),
            &self.responder_state,
            Vec::new(),
        );
        self.publish(
            ("count:".to_owned() + &namespace, name),
            &self.target_responders,
            Vec::new(),
        );
    }
}

/// The `target_name` label: the target pod's name, empty for an object that names none.
fn target_name<K: Targeting>(object: &K) -> String {
    object
        .target()
        .map_or_else(String::new, |(name, _)| name.to_owned())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::lifecycle::v1alpha1::{
        EvictionRequestPodReference, EvictionRequestSpec, EvictionRequestTarget,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    #[test]
    fn a_request_is_published_with_upstreams_labels_and_goes_with_it() {
        let registry = Arc::new(Metrics::new("test").unwrap());
        let metrics = UpstreamMetrics::register(&registry).unwrap();
        let request = EvictionRequest {
            metadata: ObjectMeta {
                name: Some("drain-web-0".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: EvictionRequestSpec {
                intent: "Eviction".into(),
                requester: "example.com/drain".into(),
                target: EvictionRequestTarget {
                    pod: Some(EvictionRequestPodReference {
                        name: "web-0".into(),
                        uid: "uid-1".into(),
                    }),
                },
            },
            status: None,
        };
        let series = r#"evictionrequest_controller_requester_intent{evictionrequest="drain-web-0",intent="Eviction",requester="example.com/drain",target_name="web-0",target_namespace="ns",target_type="pod"} 1"#;
        metrics.observe_request(&request);
        let text = registry.encode().unwrap();
        assert!(text.lines().any(|l| l == series), "{series} in\n{text}");
        metrics.forget_request(&request);
        let text = registry.encode().unwrap();
        assert!(!text.contains("drain-web-0"), "{text}");
    }
}
