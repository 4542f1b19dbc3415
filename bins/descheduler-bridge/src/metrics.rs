//! The bridge's metrics, named exactly as KEP-1397 names them (`pod_evacuations`,
//! `pod_evacuations_in_progress`; a counter without `_total`, as the KEP spells it):
//! evacuations by result (the webhook's `requested`, `repeated`, `failed`, `refused`,
//! `already_evacuating`; the controller's `evicted`, `canceled`, `expired`, `withdrawn`) and
//! the evacuations in progress. The webhook answers on every replica, so each replica counts the evacuations it
//! answered (sum them); the in-progress gauge is kept by the controller and exported only by
//! the replica that holds the Lease (no series elsewhere, so a sum over replicas is right).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use evictkit_core::descheduler_bridge::Ended;
use evictkit_runtime::control::reconcile::Reconciles;
use evictkit_runtime::process::metrics::{Metrics, MetricsError};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGauge, Opts};

/// `result` of an eviction the webhook evacuated: the EvictionRequest was written.
pub const REQUESTED: &str = "requested";
/// `result` of a repeated eviction of a pod already being evacuated (no new request).
pub const REPEATED: &str = "repeated";
/// `result` of an eviction the webhook could not turn into an EvictionRequest.
pub const FAILED: &str = "failed";
/// `result` of an eviction of a pod whose EvictionRequest the controller refused (canceled by
/// validation): answered with 403, not 429, so the descheduler counts it as a failure.
pub const REFUSED: &str = "refused";
/// `result` of an eviction of a pod another requester's EvictionRequest is evicting: answered
/// with 429 as in background, nothing written.
pub const ALREADY_EVACUATING: &str = "already_evacuating";

#[derive(Clone)]
pub struct BridgeMetrics {
    /// `pod_evacuations{result}`.
    pub evacuations: IntCounterVec,
    /// `pod_evacuations_in_progress`.
    in_progress: InProgress,
    /// The EvictionRequest controller's reconciles
    /// (`evictkit_reconcile*{controller="evictionrequest"}`).
    pub reconciles: Reconciles,
}

/// EvictionRequests the bridge takes part in that have not ended, as the controller last saw
/// them; `None` on a replica that does not hold the Lease, which exports no series.
#[derive(Clone)]
struct InProgress {
    gauge: IntGauge,
    counted: Arc<Mutex<Option<HashSet<String>>>>,
}

impl Collector for InProgress {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        match counted.as_ref() {
            Some(counted) => {
                self.gauge.set(counted.len() as i64);
                self.gauge.collect()
            }
            None => Vec::new(),
        }
    }
}

impl BridgeMetrics {
    pub fn register(metrics: &Metrics) -> Result<Self, MetricsError> {
        let evacuations = metrics.add(IntCounterVec::new(
            Opts::new(
                "pod_evacuations",
                "Descheduler evictions turned into EvictionRequests (requested, repeated, failed, refused, already_evacuating: another requester's request is evicting the pod) and how the evacuations ended (evicted, canceled, expired, withdrawn) (KEP-1397).",
            ),
            &["result"],
        ))?;
        let in_progress = InProgress {
            gauge: IntGauge::new(
                "pod_evacuations_in_progress",
                "EvictionRequests with the descheduler's requester that have not ended yet (KEP-1397); exported by the Lease holder only.",
            )
            .map_err(MetricsError::Register)?,
            counted: Arc::default(),
        };
        metrics.register(in_progress.clone())?;
        // Every result's series from the start, so alerts on rate() see 0 rather than nothing.
        let ended = [
            Ended::Evicted,
            Ended::Canceled,
            Ended::Expired,
            Ended::Withdrawn,
        ];
        for result in [REQUESTED, REPEATED, FAILED, REFUSED]
            .into_iter()
            .chain(ended.map(Ended::label))
        {
            evacuations.with_label_values(&[result]);
        }
        Ok(Self {
            evacuations,
            in_progress,
            reconciles: Reconciles::new(metrics, "evictionrequest"),
        })
    }

    pub fn count(&self, result: &str) {
        self.evacuations.with_label_values(&[result]).inc();
    }

    /// This replica took the Lease: it keeps (and exports) the in-progress gauge.
    pub fn lead(&self) {
        let mut counted = self
            .in_progress
            .counted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        counted.get_or_insert_default();
    }

    /// Records whether the request `key` is an evacuation in progress.
    pub fn set_in_progress(&self, key: &str, in_progress: bool) {
        let mut counted = self
            .in_progress
            .counted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let counted = counted.get_or_insert_default();
        if in_progress {
            counted.insert(key.to_owned());
        } else {
            counted.remove(key);
        }
    }

    /// The term of leadership ended: forget everything counted, and stop exporting the gauge.
    pub fn reset_in_progress(&self) {
        *self
            .in_progress
            .counted
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_progress_gauge_is_exported_by_the_leader_only() {
        let metrics = Metrics::new("descheduler-bridge").unwrap();
        let bridge = BridgeMetrics::register(&metrics).unwrap();
        let exported = || {
            bridge
                .in_progress
                .collect()
                .first()
                .map(|family| family.get_metric()[0].get_gauge().get_value())
        };
        assert_eq!(exported(), None, "not leading");
        bridge.lead();
        assert_eq!(exported(), Some(0.0), "leading, nothing in progress");
        bridge.set_in_progress("ns/a", true);
        bridge.set_in_progress("ns/b", true);
        bridge.set_in_progress("ns/a", false);
        assert_eq!(exported(), Some(1.0));
        bridge.reset_in_progress();
        assert_eq!(exported(), None, "the Lease went to another replica");
    }
}
