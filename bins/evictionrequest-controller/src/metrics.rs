//! The metrics both APIs' controllers share: client-go's workqueue metrics ([`QueueMetrics`],
//! one per queue, told apart by `name`), the pod cache's live reads, and the registration of a
//! per-object gauge family. Each API's own metrics, as KEP-4563 names them, are beside its
//! controller (`crd/metrics.rs`, `upstream/metrics.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use kube::runtime::reflector::{Lookup, ObjectRef};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};

/// Registers the gauge family `name` with `labels`, for series per object (KEP-4563's gauges
/// on either API).
pub(crate) fn gauges(
    metrics: &Metrics,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, MetricsError> {
    metrics.add(IntGaugeVec::new(Opts::new(name, help), labels))
}

/// `evictkit_evictionrequest_controller_pod_live_reads_total{found}` of either API: target pods
/// read from the API because the cache had none of the request's UID (`found`: the API had it).
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

impl QueueMetrics {
    /// Registers the families' series of the queue `name` (client-go's queue name).
    pub fn register(metrics: &Metrics, name: &str) -> Result<Self, MetricsError> {
        let queue_opts =
            |family: &str, help: &str| Opts::new(family, help).const_label("name", name);
        let counter =
            |family: &str, help: &str| metrics.add(IntCounter::with_opts(queue_opts(family, help)));
        let histogram = |family: &str, help: &str| {
            let opts = HistogramOpts::new(family, help)
                .const_label("name", name)
                .buckets(prometheus::exponential_buckets(0.001, 4.0, 10).unwrap_or_default());
            metrics.add(Histogram::with_opts(opts))
        };
        Ok(Self {
            depth: metrics.add(IntGauge::with_opts(queue_opts(
                "workqueue_depth",
                "Current depth of the workqueue.",
            )))?,
            adds: counter(
                "workqueue_adds_total",
                "Total number of adds handled by the workqueue.",
            )?,
            queue_duration: histogram(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in the workqueue before being requested.",
            )?,
            work_duration: histogram(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from the workqueue takes.",
            )?,
            retries: counter(
                "workqueue_retries_total",
                "Total number of retries handled by the workqueue.",
            )?,
            unfinished: metrics.add(
                Gauge::with_opts(queue_opts(
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

    /// Queues are keyed by namespace and name, of any kind.
    type Key = ObjectRef<k8s_openapi::api::core::v1::Pod>;

    #[test]
    fn unfinished_work_counts_the_reconciles_in_progress() {
        let metrics = Arc::new(Metrics::new("evictionrequest-controller").unwrap());
        let queue = QueueMetrics::register(&metrics, "evictionrequests").unwrap();
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
