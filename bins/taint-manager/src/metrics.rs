//! Upstream's two metrics (names as kube-controller-manager exposes them, so dashboards keep
//! working) and the taint-manager's own.

use std::sync::Arc;

use evictkit_runtime::control::reconcile::Reconciles;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
};

/// The `component` label of shared metrics.
pub const COMPONENT: &str = "taint-manager";

/// Upstream's buckets of `taint_eviction_controller_pod_deletion_duration_seconds`.
const UPSTREAM_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 120.0, 180.0, 240.0,
];

/// The `action` label values (`Removal::label`).
const ACTIONS: [&str; 4] = ["Delete", "Evict", "EvictionRequest", "ForceDelete"];
/// The `reason` label values of `evictkit_taint_manager_removals_blocked_total`.
const BLOCKED_REASONS: [&str; 5] = [
    "PodDisruptionBudget",
    "ZonePaused",
    "ZoneRateLimited",
    "Refused",
    "Error",
];

#[derive(Clone)]
pub struct TaintMetrics {
    /// Upstream `taint_eviction_controller_pod_deletions_total`.
    pub deletions: IntCounter,
    /// Upstream `taint_eviction_controller_pod_deletion_duration_seconds`, in seconds (upstream
    /// multiplies a Duration by time.Second and so reports nanoseconds times 1e9).
    pub deletion_duration: Histogram,
    /// Removals by action (Delete, Evict, EvictionRequest, ForceDelete); a request counts once
    /// per pod, when first made.
    pub actions: IntCounterVec,
    /// EvictionRequests withdrawn because the pod was no longer due.
    pub withdrawn: IntCounter,
    /// From the moment a pod became due to the API call that removed it, by action.
    pub removal_latency: HistogramVec,
    /// Removals that could not be made now, by reason (PodDisruptionBudget, ZonePaused,
    /// ZoneRateLimited, Error).
    pub blocked: IntCounterVec,
    /// Zones whose evictions the zone guard pauses now.
    pub paused_zones: IntGauge,
    /// TaintEvictionPolicies that are invalid now (they govern nothing).
    pub invalid_policies: IntGauge,
    /// 1 if the TaintEvictionPolicy CRD was installed when this term as leader began, else 0.
    pub policy_crd_installed: IntGauge,
    /// The pod controller's reconciles (`evictkit_reconcile*{controller="pod"}`).
    pub reconciles: Reconciles,
}

impl TaintMetrics {
    pub fn register(metrics: &Arc<Metrics>) -> Result<Self, MetricsError> {
        let own = Self {
            deletions: metrics.add(IntCounter::new(
                "taint_eviction_controller_pod_deletions_total",
                "Number of Pods deleted by the taint manager since its start.",
            ))?,
            deletion_duration: metrics.add(Histogram::with_opts(
                HistogramOpts::new(
                    "taint_eviction_controller_pod_deletion_duration_seconds",
                    "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via the taint manager.",
                )
                .buckets(UPSTREAM_BUCKETS.to_vec()),
            ))?,
            actions: metrics.add(IntCounterVec::new(
                Opts::new(
                    "evictkit_taint_manager_actions_total",
                    "Pods removed because of NoExecute taints, by action (Delete, Evict, EvictionRequest, ForceDelete); an EvictionRequest counts once per pod.",
                ),
                &["action"],
            ))?,
            withdrawn: metrics.add(IntCounter::new(
                "evictkit_taint_manager_eviction_requests_withdrawn_total",
                "EvictionRequests the taint-manager withdrew from because the pod was no longer due (taint gone, toleration or policy changed).",
            ))?,
            removal_latency: metrics.add(HistogramVec::new(
                HistogramOpts::new(
                    "evictkit_taint_manager_removal_latency_seconds",
                    "Seconds from the moment a pod became due (its toleration window ended, or an untolerated taint reached it) to the API call that removed it, by action.",
                )
                .buckets(UPSTREAM_BUCKETS.to_vec()),
                &["action"],
            ))?,
            blocked: metrics.add(IntCounterVec::new(
                Opts::new(
                    "evictkit_taint_manager_removals_blocked_total",
                    "Attempts to remove a due pod that did not remove it, by reason (PodDisruptionBudget, ZonePaused, ZoneRateLimited, Error); each is retried.",
                ),
                &["reason"],
            ))?,
            paused_zones: metrics.add(IntGauge::new(
                "evictkit_taint_manager_paused_zones",
                "Zones whose removals the zone guard pauses (partial disruption of a small zone, or every zone fully disrupted), as kube-controller-manager's node lifecycle controller.",
            ))?,
            invalid_policies: metrics.add(IntGauge::new(
                "evictkit_taint_manager_invalid_policies",
                "TaintEvictionPolicies that cannot be applied (see their Valid condition); they govern nothing.",
            ))?,
            policy_crd_installed: metrics.add(IntGauge::new(
                "evictkit_taint_manager_policy_crd_installed",
                "1 if the TaintEvictionPolicy CRD is installed; 0: the taint-manager runs without policies, as kube-controller-manager's taint-eviction-controller (install the CRD and restart it).",
            ))?,
            reconciles: Reconciles::new(metrics, "pod"),
        };
        // Every series from the start, so alerts on rate() see 0 rather than nothing.
        for action in ACTIONS {
            own.actions.with_label_values(&[action]);
            own.removal_latency.with_label_values(&[action]);
        }
        for reason in BLOCKED_REASONS {
            own.blocked.with_label_values(&[reason]);
        }
        Ok(own)
    }
}
