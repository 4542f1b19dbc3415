//! The webhook's own metrics (KEP-3017 names none beyond the apiserver's
//! `apiserver_request_total{resource="pods",subresource="eviction"}`, so these carry the
//! component's prefix). The shared `evictkit_admission_reviews_total` counts reviews by path
//! and decision; these add what the shared one cannot see.

use std::sync::Arc;

use evictkit_runtime::control::reconcile::Reconciles;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts};

/// The `webhook` label values: the three webhooks `admission::review` serves.
const WEBHOOKS: [&str; 3] = ["mutate-pdb", "validate-pdb", "validate-eviction"];

pub struct WebhookMetrics {
    /// `evictkit_pdb_policy_webhook_admission_requests_total{webhook, result}`; result is `allowed`,
    /// `warned`, `mutated`, `denied`, or `error` (an eviction denied because a live read
    /// failed or would have outlasted the apiserver's timeout).
    pub requests: IntCounterVec,
    /// `evictkit_pdb_policy_webhook_admission_duration_seconds{webhook}`.
    pub duration: HistogramVec,
    /// `evictkit_pdb_policy_webhook_pdbs_defaulted_total{mode}`: PDBs whose unhealthyPodEvictionPolicy
    /// the mutating webhook set (`Default`) or overwrote (`Enforce`).
    pub defaulted: IntCounterVec,
    /// `evictkit_pdb_policy_webhook_warnings_total{rule}`.
    pub warnings: IntCounterVec,
    /// `evictkit_pdb_policy_webhook_denials_total{rule}`.
    pub denials: IntCounterVec,
    /// `evictkit_pdb_policy_webhook_nonconforming_budgets{policy}`: PDBs where the policy is in force
    /// whose unhealthyPodEvictionPolicy is not what it sets (controller role).
    pub nonconforming: IntGaugeVec,
    /// `evictkit_pdb_policy_webhook_budgets_enforced_total`: existing PDBs whose field the controller
    /// set for an Enforce policy.
    pub enforced: IntCounter,
    /// `evictkit_pdb_policy_webhook_budgets_restored_total`: PDBs whose own value the
    /// controller put back once no Enforce policy was in force.
    pub restored: IntCounter,
    /// The controller role's status reconciles
    /// (`evictkit_reconcile*{controller="poddisruptionbudgetpolicy"}`).
    pub reconciles: Reconciles,
}

impl WebhookMetrics {
    pub fn register(metrics: &Metrics) -> Result<Arc<Self>, MetricsError> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            metrics.add(IntCounterVec::new(Opts::new(name, help), labels))
        };
        let own = Self {
            requests: counter(
                "evictkit_pdb_policy_webhook_admission_requests_total",
                "AdmissionReviews answered, by webhook (mutate-pdb, validate-pdb, validate-eviction) and result (allowed, warned, mutated, denied, error).",
                &["webhook", "result"],
            )?,
            duration: metrics.add(HistogramVec::new(
                HistogramOpts::new(
                    "evictkit_pdb_policy_webhook_admission_duration_seconds",
                    "Time to decide one AdmissionReview, by webhook.",
                )
                .buckets(vec![
                    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                ]),
                &["webhook"],
            ))?,
            defaulted: counter(
                "evictkit_pdb_policy_webhook_pdbs_defaulted_total",
                "PodDisruptionBudgets whose unhealthyPodEvictionPolicy was set, by policy mode (Default, Enforce).",
                &["mode"],
            )?,
            warnings: counter(
                "evictkit_pdb_policy_webhook_warnings_total",
                "Admission warnings given, by rule.",
                &["rule"],
            )?,
            denials: counter(
                "evictkit_pdb_policy_webhook_denials_total",
                "Requests denied, by rule.",
                &["rule"],
            )?,
            nonconforming: metrics.add(IntGaugeVec::new(
                Opts::new(
                    "evictkit_pdb_policy_webhook_nonconforming_budgets",
                    "PodDisruptionBudgets where the policy is in force whose unhealthyPodEvictionPolicy differs from what it sets, by policy.",
                ),
                &["policy"],
            ))?,
            enforced: metrics.add(IntCounter::new(
                "evictkit_pdb_policy_webhook_budgets_enforced_total",
                "Existing PodDisruptionBudgets whose unhealthyPodEvictionPolicy the controller set for an Enforce policy.",
            ))?,
            restored: metrics.add(IntCounter::new(
                "evictkit_pdb_policy_webhook_budgets_restored_total",
                "PodDisruptionBudgets whose unhealthyPodEvictionPolicy the controller restored to its value before enforcement, once no Enforce policy was in force.",
            ))?,
            reconciles: Reconciles::new(metrics, "poddisruptionbudgetpolicy"),
        };
        // Each webhook's duration and error series from the start, so alerts on rate() see 0
        // rather than nothing.
        for webhook in WEBHOOKS {
            own.duration.with_label_values(&[webhook]);
            own.requests.with_label_values(&[webhook, "error"]);
        }
        Ok(Arc::new(own))
    }
}
