//! KEP-4563's metrics (names as the KEP spells them), and the workqueue metrics the KEP lists
//! with `name="evictionrequests"`; [`QueueMetrics`] also serve the lifecycle mode's queues.
//!
//! The per-request series are recomputed on every reconcile of a request and removed when the
//! request is deleted, so the registry holds only live requests.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_runtime::control::reconcile::Reconciles;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use kube::runtime::reflector::{Lookup, ObjectRef};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};

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

type Key = ObjectRef<EvictionRequest>;

/// `evictkit_evictionrequest_controller_pod_live_reads_total{found}` of either mode: target pods read from
/// the API because the cache had none of the request's UID (`found`: the API had it).
pub fn pod_live_reads(metrics: &Metrics) -> Result<IntCounterVec, MetricsError> {
    metrics.add(IntCounterVec::new(
            Opts::new(
                "evictkit_evictionrequest_controller_pod_live_reads_total",
                "Target pods read from the API because the pod cache had no pod of the request's name and UID (found: whether the API had it).",
            ),
            &["found"],
        ),
    )
}

#[derive(Clone)]
pub struct RequestMetrics {
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

/// workqueue_* of client-go for one queue of a controller, told apart by the label `name`.
#[derive(Clone)]
pub struct QueueMetrics {
    pub depth: IntGauge,
    pub adds: IntCounter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    pub retries: IntCounter,
    pub unfinished: UnfinishedWork,
    /// Objects (namespace, name) waiting, with the time they were first added (client-go's
    /// queue_duration).
    waiting: Arc<Mutex<HashMap<QueueKey, Instant>>>,
}

type QueueKey = (Option<String>, String);

fn queue_key<K: Lookup + ?Sized>(key: &ObjectRef<K>) -> QueueKey {
    (key.namespace.clone(), key.name.clone())
}

impl RequestMetrics {
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
            active_interceptor: metrics.add(IntGaugeVec::new(
                    Opts::new(
                        "evictionrequest_controller_active_interceptor",
                        "1 for the active interceptor of each EvictionRequest and target Pod (KEP-4563).",
                    ),
                    &per_interceptor,
                ),
            )?,
            processed_interceptor: metrics.add(IntGaugeVec::new(
                    Opts::new(
                        "evictionrequest_controller_processed_interceptor",
                        "1 for each processed interceptor of each EvictionRequest and target Pod (KEP-4563).",
                    ),
                    &per_interceptor,
                ),
            )?,
            active_requester: metrics.add(IntGaugeVec::new(
                    Opts::new(
                        "evictionrequest_controller_active_requester",
                        "1 for each requester of each EvictionRequest and target Pod (KEP-4563).",
                    ),
                    &["target_namespace", "evictionrequest", "target_name", "requester"],
                ),
            )?,
            pod_interceptors: metrics.add(IntGaugeVec::new(
                    Opts::new(
                        "evictionrequest_controller_pod_interceptors",
                        "Interceptors available to each target Pod, the default one included (KEP-4563).",
                    ),
                    &["target_namespace", "target_name"],
                ),
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
        let pod = request
            .spec
            .target
            .pod
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default();
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
                requesters: request
                    .spec
                    .requesters
                    .iter()
                    .map(|r| r.name.clone())
                    .collect(),
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

impl QueueMetrics {
    /// Registers the families' series of the queue `name` (client-go's queue name).
    pub fn register(metrics: &Metrics, name: &str) -> Result<Self, MetricsError> {
        let queue_opts =
            |family: &str, help: &str| Opts::new(family, help).const_label("name", name);
        let histogram = |family: &str, help: &str| {
            HistogramOpts::new(family, help)
                .const_label("name", name)
                .buckets(prometheus::exponential_buckets(0.001, 4.0, 10).unwrap_or_default())
        };
        Ok(Self {
            depth: metrics.add(IntGauge::with_opts(queue_opts(
                    "workqueue_depth",
                    "Current depth of the workqueue.",
                )),
            )?,
            adds: metrics.add(IntCounter::with_opts(queue_opts(
                    "workqueue_adds_total",
                    "Total number of adds handled by the workqueue.",
                )),
            )?,
            queue_duration: metrics.add(Histogram::with_opts(histogram(
                    "workqueue_queue_duration_seconds",
                    "How long in seconds an item stays in the workqueue before being requested.",
                )),
            )?,
            work_duration: metrics.add(Histogram::with_opts(histogram(
                    "workqueue_work_duration_seconds",
                    "How long in seconds processing an item from the workqueue takes.",
                )),
            )?,
            retries: metrics.add(IntCounter::with_opts(queue_opts(
                    "workqueue_retries_total",
                    "Total number of retries handled by the workqueue.",
                )),
            )?,
            unfinished: metrics.add(Gauge::with_opts(queue_opts(
                    "workqueue_unfinished_work_seconds",
                    "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads.",
                ))
                .map(UnfinishedWork::new),
            )?,
            waiting: Arc::default(),
    })
    }

    /// A trigger for `key` arrived (a watch event of the object or of one it concerns).
    pub fn added<K: Lookup + ?Sized>(&self, key: &ObjectRef<K>) {
        self.adds.inc();
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.entry(queue_key(key)).or_insert_with(Instant::now);
        self.depth.set(waiting.len() as i64);
    }

    /// `key` is gone: it no longer waits.
    pub fn forget<K: Lookup + ?Sized>(&self, key: &ObjectRef<K>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.remove(&queue_key(key));
        self.depth.set(waiting.len() as i64);
    }

    /// Work on `key` starts; it ends when the returned guard is dropped, which observes
    /// workqueue_work_duration_seconds.
    pub fn started<K: Lookup + ?Sized>(&self, key: &ObjectRef<K>) -> Work {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = waiting.remove(&queue_key(key)) {
            self.queue_duration.observe(since.elapsed().as_secs_f64());
        }
        self.depth.set(waiting.len() as i64);
        Work {
            _timer: self.work_duration.start_timer(),
            id: self.unfinished.start(),
            unfinished: self.unfinished.clone(),
        }
    }
}

/// One reconcile in progress.
pub struct Work {
    _timer: prometheus::HistogramTimer,
    id: u64,
    unfinished: UnfinishedWork,
}

impl Drop for Work {
    fn drop(&mut self) {
        self.unfinished.finish(self.id);
    }
}

/// client-go's workqueue_unfinished_work_seconds: the seconds spent so far by the reconciles
/// in progress, computed when scraped.
#[derive(Clone)]
pub struct UnfinishedWork {
    gauge: Gauge,
    started: Arc<Mutex<HashMap<u64, Instant>>>,
    next: Arc<AtomicU64>,
}

impl UnfinishedWork {
    fn new(gauge: Gauge) -> Self {
        Self {
            gauge,
            started: Arc::default(),
            next: Arc::default(),
        }
    }

    fn start(&self) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Instant::now());
        id
    }

    fn finish(&self, id: u64) {
        self.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

impl Collector for UnfinishedWork {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let seconds = self
            .started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|since| since.elapsed().as_secs_f64())
            .sum();
        self.gauge.set(seconds);
        self.gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_work_counts_the_reconciles_in_progress() {
        let metrics = Arc::new(Metrics::new("evictionrequest-controller").unwrap());
        let queue = RequestMetrics::register(&metrics).unwrap().queue;
        let key = Key::new("uid-1").within("ns");
        let value = |queue: &QueueMetrics| {
            queue.unfinished.collect()[0].get_metric()[0]
                .get_gauge()
                .get_value()
        };
        assert_eq!(value(&queue), 0.0, "nothing in progress");
        let work = queue.started(&key);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(value(&queue) >= 0.02, "{}", value(&queue));
        drop(work);
        assert_eq!(value(&queue), 0.0, "finished");
    }

    #[test]
    fn queues_of_one_registry_are_told_apart_by_name() {
        let metrics = Arc::new(Metrics::new("evictionrequest-controller").unwrap());
        let requests = QueueMetrics::register(&metrics, "requests").unwrap();
        let evictions = QueueMetrics::register(&metrics, "evictions").unwrap();
        let key = Key::new("uid-1").within("ns");
        requests.added(&key);
        requests.added(&key);
        evictions.added(&key);
        evictions.forget(&key);
        let text = metrics.encode().unwrap();
        for sample in [
            r#"workqueue_depth{name="requests"} 1"#,
            r#"workqueue_adds_total{name="requests"} 2"#,
            r#"workqueue_depth{name="evictions"} 0"#,
            r#"workqueue_adds_total{name="evictions"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == sample), "{sample} in\n{text}");
        }
    }
}
