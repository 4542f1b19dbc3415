//! The bridge's metrics, named after KEP-1397's "measure pending evictions" goal and carrying
//! the component's prefix: evacuations by result (the webhook's `requested`, `repeated`,
//! `failed`; the controller's `evicted`, `canceled`, `expired`, `withdrawn`) and the
//! evacuations in progress.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use evictkit_runtime::metrics::{Metrics, MetricsError};
use prometheus::{IntCounterVec, IntGauge, Opts};

/// `result` of an eviction the webhook evacuated: the EvictionRequest was written.
pub const REQUESTED: &str = "requested";
/// `result` of a repeated eviction of a pod already being evacuated (no new request).
pub const REPEATED: &str = "repeated";
/// `result` of an eviction the webhook could not turn into an EvictionRequest.
pub const FAILED: &str = "failed";

#[derive(Clone)]
pub struct BridgeMetrics {
    /// `descheduler_bridge_pod_evacuations_total{result}`.
    pub evacuations: IntCounterVec,
    /// `descheduler_bridge_pod_evacuations_in_progress`: EvictionRequests the bridge takes part
    /// in that have not ended, as the controller last saw them.
    in_progress: IntGauge,
    /// The requests counted in `in_progress` (namespace/name).
    counted: Arc<Mutex<HashSet<String>>>,
}

impl BridgeMetrics {
    pub fn register(metrics: &Metrics) -> Result<Self, MetricsError> {
        let evacuations = IntCounterVec::new(
            Opts::new(
                "descheduler_bridge_pod_evacuations_total",
                "Descheduler evictions turned into EvictionRequests (requested, repeated, failed) and how the evacuations ended (evicted, canceled, expired, withdrawn).",
            ),
            &["result"],
        )
        .map_err(MetricsError::Register)?;
        let in_progress = IntGauge::new(
            "descheduler_bridge_pod_evacuations_in_progress",
            "EvictionRequests with the descheduler's requester that have not ended yet.",
        )
        .map_err(MetricsError::Register)?;
        metrics.register(evacuations.clone())?;
        metrics.register(in_progress.clone())?;
        Ok(Self {
            evacuations,
            in_progress,
            counted: Arc::default(),
        })
    }

    pub fn count(&self, result: &str) {
        self.evacuations.with_label_values(&[result]).inc();
    }

    /// Records whether the request `key` is an evacuation in progress.
    pub fn set_in_progress(&self, key: &str, in_progress: bool) {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        if in_progress {
            counted.insert(key.to_owned());
        } else {
            counted.remove(key);
        }
        self.in_progress.set(counted.len() as i64);
    }

    /// Forgets everything counted in a term of leadership that ended.
    pub fn reset_in_progress(&self) {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        counted.clear();
        self.in_progress.set(0);
    }
}
