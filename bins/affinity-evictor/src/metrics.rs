//! KEP-4328's metrics (names as the KEP spells them) and the controller's own.

use std::sync::Arc;

use evictkit_runtime::control::reconcile::Reconciles;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

/// DaemonSet pods left alone although they violate: their DaemonSet's template would recreate
/// them on the same node (see [`AffinityMetrics::daemonset_pods_not_evicted`]).
pub const METRIC_DAEMONSET_PODS_NOT_EVICTED: &str =
    "evictkit_affinity_evictor_daemonset_pods_not_evicted_total";

#[derive(Clone)]
pub struct AffinityMetrics {
    /// KEP-4328 `evictions_node_affinity_total`: evictions the controller made.
    pub evictions: IntCounter,
    /// KEP-4328 `pod_failed_eviction_node_affinity_total{pod_namespace, pod_name}`: eviction rounds that
    /// failed to evict the pod, once per pod per round (backoff retries between rounds are not
    /// counted), so users find the pods to look after; the series goes when the pod does.
    pub failed: IntCounterVec,
    /// Pods whose annotation cannot be parsed (bad input is counted, docs/architecture.md).
    pub malformed: IntCounter,
    /// [`METRIC_DAEMONSET_PODS_NOT_EVICTED`]: violating DaemonSet pods left alone, once per
    /// violation, because their DaemonSet's template would recreate them on the same node.
    pub daemonset_pods_not_evicted: IntCounter,
    /// Pods violating their execution-time affinity right now; with `--enabled=false` this is
    /// what would be evicted.
    pub violating: IntGauge,
    /// The pod controller's reconciles (`evictkit_reconcile*{controller="pod"}`).
    pub reconciles: Reconciles,
}

impl AffinityMetrics {
    pub fn register(metrics: &Arc<Metrics>) -> Result<Self, MetricsError> {
        Ok(Self {
            evictions: metrics.add(IntCounter::new(
                "evictions_node_affinity_total",
                "Pods evicted because their required-during-execution node affinity no longer matches their node (KEP-4328).",
            ))?,
            failed: metrics.add(IntCounterVec::new(
                Opts::new(
                    "pod_failed_eviction_node_affinity_total",
                    "Eviction rounds that failed to evict a pod violating its required-during-execution node affinity, once per pod per round (KEP-4328); the pod carries condition evictkit.io/AffinityEvictionTarget=True.",
                ),
                &["pod_namespace", "pod_name"],
            ))?,
            malformed: metrics.add(IntCounter::new(
                "evictkit_affinity_evictor_malformed_annotations_total",
                "Pods seen with an evictkit.io/required-during-execution annotation that cannot be parsed; they are left alone.",
            ))?,
            daemonset_pods_not_evicted: metrics.add(IntCounter::new(
                METRIC_DAEMONSET_PODS_NOT_EVICTED,
                "Violating DaemonSet pods not evicted because their DaemonSet's pod template would recreate them on the same node (once per violation; a Warning Event names the DaemonSet).",
            ))?,
            violating: metrics.add(IntGauge::new(
                "evictkit_affinity_evictor_violating_pods",
                "Running pods whose node no longer matches their required-during-execution node affinity.",
            ))?,
            reconciles: Reconciles::new(metrics, "pod"),
        })
    }

    /// Drops the per-pod series of a pod that is gone.
    pub fn forget(&self, namespace: &str, pod: &str) {
        // An error only says the pod never failed an eviction.
        let _ = self.failed.remove_label_values(&[namespace, pod]);
    }
}
