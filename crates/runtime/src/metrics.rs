//! The Prometheus registry of one binary, and the metrics every binary shares.
//!
//! # Names
//! One rule for every component, so an operator can tell from a name who exports it:
//! - a metric a KEP names (or that the upstream component we replace exports) keeps that name
//!   exactly, labels included: `evictions_node_affinity_total`,
//!   `taint_eviction_controller_pod_deletions_total`, `evictionrequest_controller_*`, the
//!   `workqueue_*{name="evictionrequests"}` of KEP-4563; the KEP's dashboards and alerts then
//!   work unchanged;
//! - a metric every component exports is `evictkit_<name>` with a constant `component` label
//!   (defined here: evictions, admission reviews, leadership, certificate reloads, reconciles),
//!   so one query sums or splits it across components;
//! - any other metric of one component is `evictkit_<component>_<name>`, `<component>` the
//!   binary's name in snake case (`evictkit_taint_manager_paused_zones`);
//! - `process_*` is the prometheus crate's process collector (CPU, memory, file descriptors;
//!   Linux only), named as every Prometheus client names it.
//!
//! Units and types follow Prometheus' conventions: counters end in `_total`, durations are
//! histograms in `_seconds`. A labelled series that alerts take a `rate()` of is created at
//! start-up (with its label values known then), so it exists, at 0, before the first event.
//!
//! Three families are older than the rule and keep their names until the e2e tests, benches and
//! dashboards that read them are renamed with them: `pdb_policy_webhook_*`,
//! `descheduler_bridge_pod_evacuations*` and `evictkit_evictionrequest_*`.

use prometheus::core::Collector;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Buckets of `evictkit_reconcile_duration_seconds`: a reconcile is a few API calls, from a
/// millisecond (nothing to do) to tens of seconds (a slow apiserver, a webhook's timeout).
const RECONCILE_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The `outcome` values of `evictkit_evictions_total`: each `EvictionOutcome::label`, and
/// `error` for a request that got no answer.
pub(crate) const EVICTION_OUTCOMES: [&str; 7] = [
    "evicted",
    "blocked_by_budget",
    "in_background",
    "gone",
    "conflict",
    "other",
    "error",
];

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot register metric: {0}")]
    Register(#[source] prometheus::Error),
    #[error("cannot encode metrics: {0}")]
    Encode(#[source] prometheus::Error),
}

/// A binary's registry plus the shared metrics. Wrap in an `Arc` and pass to the eviction
/// client, the webhook server, leader election and the health server.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `evictkit_evictions_total{component, outcome, dry_run}`: one per eviction attempt.
    pub(crate) evictions: IntCounterVec,
    /// `evictkit_admission_reviews_total{component, webhook, allowed}`.
    pub(crate) admission_reviews: IntCounterVec,
    /// `evictkit_leader`: 1 while this replica holds the Lease.
    pub(crate) leader: IntGauge,
    /// `evictkit_leader_terms_lost_total`: terms as leader that ended because the Lease was lost.
    pub(crate) leader_terms_lost: IntCounter,
    /// `evictkit_webhook_certificate_reloads_total{component, result}`.
    pub(crate) certificate_reloads: IntCounterVec,
    /// `evictkit_reconciles_total{component, controller}`: reconciles that ended.
    pub(crate) reconciles: IntCounterVec,
    /// `evictkit_reconcile_errors_total{component, controller}`: reconciles that ended in an error.
    pub(crate) reconcile_errors: IntCounterVec,
    /// `evictkit_reconcile_duration_seconds{component, controller}`.
    pub(crate) reconcile_duration: HistogramVec,
}

impl Metrics {
    /// A fresh registry for `component` (e.g. "taint-manager") with the shared metrics in it.
    pub fn new(component: &str) -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let opts =
            |name: &str, help: &str| Opts::new(name, help).const_label("component", component);
        let evictions = IntCounterVec::new(
            opts("evictkit_evictions_total", "Eviction API calls by outcome."),
            &["outcome", "dry_run"],
        )
        .map_err(MetricsError::Register)?;
        let admission_reviews = IntCounterVec::new(
            opts(
                "evictkit_admission_reviews_total",
                "AdmissionReviews answered, by webhook path and decision.",
            ),
            &["webhook", "allowed"],
        )
        .map_err(MetricsError::Register)?;
        let leader = IntGauge::with_opts(opts(
            "evictkit_leader",
            "1 while this replica holds the leader-election Lease, else 0.",
        ))
        .map_err(MetricsError::Register)?;
        let leader_terms_lost = IntCounter::with_opts(opts(
            "evictkit_leader_terms_lost_total",
            "Terms as leader ended by a lost Lease (taken by another replica, or not renewed by \
             the renew deadline); the replica then campaigns again.",
        ))
        .map_err(MetricsError::Register)?;
        let certificate_reloads = IntCounterVec::new(
            opts(
                "evictkit_webhook_certificate_reloads_total",
                "Changed webhook certificate files seen, by result (loaded or rejected).",
            ),
            &["result"],
        )
        .map_err(MetricsError::Register)?;
        let reconciles = IntCounterVec::new(
            opts(
                "evictkit_reconciles_total",
                "Reconciles that ended, by controller (errors included).",
            ),
            &["controller"],
        )
        .map_err(MetricsError::Register)?;
        let reconcile_errors = IntCounterVec::new(
            opts(
                "evictkit_reconcile_errors_total",
                "Reconciles that ended in an error, by controller; the object is retried.",
            ),
            &["controller"],
        )
        .map_err(MetricsError::Register)?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::from(opts(
                "evictkit_reconcile_duration_seconds",
                "Time one reconcile took, by controller (API calls included).",
            ))
            .buckets(RECONCILE_BUCKETS.to_vec()),
            &["controller"],
        )
        .map_err(MetricsError::Register)?;
        let metrics = Self {
            registry,
            evictions,
            admission_reviews,
            leader,
            leader_terms_lost,
            certificate_reloads,
            reconciles,
            reconcile_errors,
            reconcile_duration,
        };
        metrics.register(metrics.evictions.clone())?;
        metrics.register(metrics.admission_reviews.clone())?;
        metrics.register(metrics.leader.clone())?;
        metrics.register(metrics.leader_terms_lost.clone())?;
        metrics.register(metrics.certificate_reloads.clone())?;
        metrics.register(metrics.reconciles.clone())?;
        metrics.register(metrics.reconcile_errors.clone())?;
        metrics.register(metrics.reconcile_duration.clone())?;
        // The crate's collector reads /proc/self; it exists on Linux only, where we run.
        #[cfg(target_os = "linux")]
        metrics.register(prometheus::process_collector::ProcessCollector::for_self())?;
        Ok(metrics)
    }

    /// Registers a component's own metric.
    pub fn register<C: Collector + 'static>(&self, collector: C) -> Result<(), MetricsError> {
        self.registry
            .register(Box::new(collector))
            .map_err(MetricsError::Register)
    }

    /// Registers the collector `made` (the result of its constructor) and returns it.
    pub fn add<C: Collector + Clone + 'static>(
        &self,
        made: Result<C, prometheus::Error>,
    ) -> Result<C, MetricsError> {
        let collector = made.map_err(MetricsError::Register)?;
        self.register(collector.clone())?;
        Ok(collector)
    }

    /// Everything registered, in the Prometheus text exposition format.
    pub fn encode(&self) -> Result<String, MetricsError> {
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .map_err(MetricsError::Encode)?;
        // The text encoder writes only UTF-8.
        Ok(String::from_utf8_lossy(&buffer).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_metrics_carry_the_component() {
        let metrics = Metrics::new("taint-manager").unwrap();
        metrics
            .evictions
            .with_label_values(&["evicted", "false"])
            .inc();
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                r#"evictkit_evictions_total{component="taint-manager",dry_run="false",outcome="evicted"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn every_registry_exports_the_process_metrics() {
        let text = Metrics::new("taint-manager").unwrap().encode().unwrap();
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family}: {text}"
            );
        }
    }

    #[test]
    fn components_register_their_own() {
        let metrics = Metrics::new("affinity-evictor").unwrap();
        let own = prometheus::IntCounter::new("evictions_node_affinity_total", "KEP-4328").unwrap();
        metrics.register(own.clone()).unwrap();
        own.inc();
        assert!(
            metrics
                .encode()
                .unwrap()
                .contains("evictions_node_affinity_total 1")
        );
        assert!(
            metrics.register(own).is_err(),
            "a second registration is refused"
        );
    }
}
