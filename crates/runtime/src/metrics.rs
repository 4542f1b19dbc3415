//! The Prometheus registry of one binary, and the metrics every binary shares. A component
//! defines its own metrics (names from its KEP) in one place and registers them with
//! [`Metrics::register`]; the shared ones below carry the `evictkit_` prefix and a constant
//! `component` label, so dashboards can sum them across binaries.

use prometheus::core::Collector;
use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

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
        let metrics = Self {
            registry,
            evictions,
            admission_reviews,
            leader,
            leader_terms_lost,
            certificate_reloads,
        };
        metrics.register(metrics.evictions.clone())?;
        metrics.register(metrics.admission_reviews.clone())?;
        metrics.register(metrics.leader.clone())?;
        metrics.register(metrics.leader_terms_lost.clone())?;
        metrics.register(metrics.certificate_reloads.clone())?;
        Ok(metrics)
    }

    /// Registers a component's own metric.
    pub fn register<C: Collector + 'static>(&self, collector: C) -> Result<(), MetricsError> {
        self.registry
            .register(Box::new(collector))
            .map_err(MetricsError::Register)
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
