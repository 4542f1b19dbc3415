//! KEP-4563's metrics for the CRD (names as the KEP spells them), and the workqueue metrics the
//! KEP lists with `name="evictionrequests"`.
//!
//! The per-request series are recomputed on every reconcile of a request and removed when the
//! request is deleted, so the registry holds only live requests.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_core::eviction_request::crd::{requester_names, target_name};
use evictkit_runtime::control::reconcile::Reconciles;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use kube::runtime::reflector::ObjectRef;
use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts};

use super::key::Key;
use crate::metrics::{QueueMetrics, gauges};

/// Label value of the KEP's workqueue metrics for the CRD mode's one queue.
const QUEUE_NAME: &str = "evictionrequests";

/// `result` of an imperative eviction: the pod was evicted.
pub const EVICTED: &str = "evicted";
/// `result` of an imperative eviction: a webhook took it over (429 "in background").
pub const IN_BACKGROUND: &str = "in_background";
/// `result` of an imperative eviction: KEP "If the pod eviction fails, e.g. due to a blocking
/// PodDisruptionBudget, the evictionrequest_controller_imperative_evictions metric is
/// incremented".
pub const FAILED: &str = "failed";
const RESULTS: [&str; 3] = [EVICTED, IN_BACKGROUND, FAILED];

#[derive(Clone)]
pub struct CrdMetrics {
    /// `evictionrequest_controller_imperative_evictions{target_namespace, evictionrequest,
    /// target_name, result}`: one per outcome of an eviction attempt ([`EVICTED`], [`IN_BACKGROUND`],
    /// [`FAILED`]).
    pub imperative_evictions: IntCounterVec,
    active_interceptor: IntGaugeVec,
    processed_interceptor: IntGaugeVec,
    active_requester: IntGaugeVec,
    pod_interceptors: IntGaugeVec,
    /// Malformed interceptor annotations seen (bad input is counted, docs/architecture.md).
    pub invalid_interceptors: IntCounter,
    pub queue: QueueMetrics,
    /// The EvictionRequest controller's reconciles
    /// (`evictkit_reconcile*{controller="evictionrequest"}`).
    pub reconciles: Reconciles,
    /// The label sets published per request, to remove those that no longer apply.
    published: Arc<Mutex<HashMap<Key, Published>>>,
}

#[derive(Default, Clone, PartialEq)]
struct Published {
    pod: String,
    active: BTreeSet<String>,
    processed: BTreeSet<String>,
    requesters: BTreeSet<String>,
    interceptors: Option<i64>,
}

impl CrdMetrics {
    pub fn register(metrics: &Arc<Metrics>) -> Result<Self, MetricsError> {
        let per_interceptor = [
            "target_namespace",
            "evictionrequest",
            "target_name",
            "interceptor",
        ];
        Ok(Self {
            imperative_evictions: metrics.add(IntCounterVec::new(
                    Opts::new(
                        "evictionrequest_controller_imperative_evictions",
                        "Eviction API calls of the imperative-eviction.k8s.io interceptor by result (evicted, in_background, failed), per EvictionRequest and Pod (KEP-4563; the KEP's count of failed evictions is result=\"failed\").",
                    ),
                    &["target_namespace", "evictionrequest", "target_name", "result"],
                ),
            )?,
            active_interceptor: gauges(
                metrics,
                "evictionrequest_controller_active_interceptor",
                "1 for the active interceptor of each EvictionRequest and target Pod (KEP-4563).",
                &per_interceptor,
            )?,
            processed_interceptor: gauges(
                metrics,
                "evictionrequest_controller_processed_interceptor",
                "1 for each processed interceptor of each EvictionRequest and target Pod (KEP-4563).",
                &per_interceptor,
            )?,
            active_requester: gauges(
                metrics,
                "evictionrequest_controller_active_requester",
                "1 for each requester of each EvictionRequest and target Pod (KEP-4563).",
                &["target_namespace", "evictionrequest", "target_name", "requester"],
            )?,
            pod_interceptors: gauges(
                metrics,
                "evictionrequest_controller_pod_interceptors",
                "Interceptors available to each target Pod, the default one included (KEP-4563).",
                &["target_namespace", "target_name"],
            )?,
            invalid_interceptors: metrics.add(IntCounter::new(
                    "evictkit_evictionrequest_controller_invalid_interceptors_total",
                    "EvictionRequests canceled because their pod's evictkit.io/eviction-interceptors annotation is malformed.",
                ),
            )?,
            queue: QueueMetrics::register(metrics, QUEUE_NAME)?,
            reconciles: Reconciles::new(metrics, "evictionrequest"),
            published: Arc::default(),
        })
    }

    /// Publishes the request's current interceptors and requesters, removing stale series.
    pub fn observe(&self, request: &EvictionRequest, finished: bool) {
        let key = ObjectRef::from_obj(request);
        let pod = target_name(request).to_owned();
        let status = request.status.as_ref();
        let now = if finished {
            Published {
                pod,
                ..Published::default()
            }
        } else {
            Published {
                pod,
                active: status
                    .iter()
                    .flat_map(|s| s.active_interceptors.iter().cloned())
                    .collect(),
                processed: status
                    .iter()
                    .flat_map(|s| s.processed_interceptors.iter().cloned())
                    .collect(),
                requesters: requester_names(request).map(str::to_owned).collect(),
                interceptors: status
                    .map(|s| s.target_interceptors.len() as i64)
                    .filter(|n| *n > 0),
            }
        };
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        let before = published.remove(&key).unwrap_or_default();
        if before != now {
            self.set(&key, &before, false);
            self.set(&key, &now, true);
        }
        published.insert(key, now);
    }

    /// The request is gone: all its series go.
    pub fn forget(&self, key: &Key) {
        let before = self
            .published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some(before) = before {
            self.set(key, &before, false);
            let namespace = key.namespace.as_deref().unwrap_or_default();
            for result in RESULTS {
                // An error only says there was no attempt with this result.
                let _ = self.imperative_evictions.remove_label_values(&[
                    namespace,
                    &key.name,
                    &before.pod,
                    result,
                ]);
            }
        }
        self.queue.forget(key);
    }

    /// Sets (`on`) or removes the series of one published state.
    fn set(&self, key: &Key, state: &Published, on: bool) {
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let name = key.name.as_str();
        let pod = state.pod.as_str();
        let gauges = [
            (&self.active_interceptor, &state.active),
            (&self.processed_interceptor, &state.processed),
            (&self.active_requester, &state.requesters),
        ];
        for (gauge, values) in gauges {
            for value in values {
                let labels = [namespace, name, pod, value.as_str()];
                if on {
                    gauge.with_label_values(&labels).set(1);
                } else {
                    let _ = gauge.remove_label_values(&labels);
                }
            }
        }
        if let Some(count) = state.interceptors {
            if on {
                self.pod_interceptors
                    .with_label_values(&[namespace, pod])
                    .set(count);
            } else {
                let _ = self.pod_interceptors.remove_label_values(&[namespace, pod]);
            }
        }
    }
}
