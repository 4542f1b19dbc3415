//! What the controller remembers per pod in a term of leadership: violating pods (a metric),
//! requests it made, DaemonSet pods it left alone, and each pod's part in its eviction round.
//! Rebuilt from the API each term: a pod still violating is simply tried again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use evictkit_core::affinity_eviction::counts_as_failed_in_round;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;

use crate::Context;
use crate::cache::CachedPod;
use crate::rounds::Step;

#[derive(Default)]
pub(crate) struct PodStates {
    violating: HashSet<ObjectRef<CachedPod>>,
    /// Pods this replica requested an eviction for (`--mode eviction-request`).
    requested: HashSet<ObjectRef<CachedPod>>,
    /// Violating DaemonSet pods left alone because their template would recreate them
    /// (reported once per violation).
    recreated: HashSet<ObjectRef<CachedPod>>,
}

impl Context {
    /// The pod matches again, is leaving, is gone or no longer opted in: stop retrying, stop
    /// counting it as violating.
    pub(crate) fn forget(&self, pod: &ObjectRef<CachedPod>) {
        self.retries.forget(pod);
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.violating.remove(pod);
        states.recreated.remove(pod);
        self.metrics.violating.set(states.violating.len() as i64);
    }

    /// The eviction request for `pod` is over: withdrawn (it matches again or opted out) or
    /// carried out (it is gone). Not when it is merely terminating: a reconcile may still see it
    /// before its deletion, and joining the request again must not count a second eviction.
    pub(crate) fn request_over(&self, pod: &ObjectRef<CachedPod>) {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.requested.remove(pod);
    }

    /// `pod` violates its affinity (counted in the violating pods' gauge).
    pub(crate) fn violating(&self, pod: &ObjectRef<CachedPod>) {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.violating.insert(pod.clone());
        self.metrics.violating.set(states.violating.len() as i64);
    }

    /// `pod` is left alone because its DaemonSet would recreate it; whether that is new
    /// (reported once per violation).
    pub(crate) fn left_alone(&self, pod: &ObjectRef<CachedPod>) -> bool {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.recreated.insert(pod.clone())
    }

    /// Whether this is the first request for `pod` by this replica (counted once).
    pub(crate) fn mark_requested(&self, pod: &ObjectRef<CachedPod>) -> bool {
        let mut states = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        states.requested.insert(pod.clone())
    }

    pub(crate) fn gone(&self, pod: &ObjectRef<CachedPod>) {
        self.finish_round(pod, Step::Settled);
        self.forget(pod);
        self.request_over(pod);
        self.metrics
            .forget(pod.namespace.as_deref().unwrap_or_default(), &pod.name);
    }

    pub(crate) fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }
}

impl Context {
    /// Ends `pod`'s part of its eviction round, if it is in one, and logs the round's summary
    /// once the last pod is done: counts at info, the failed pods' names at debug (KEP-4328).
    pub(crate) fn finish_round(&self, pod: &ObjectRef<CachedPod>, step: Step) {
        let finished = self
            .rounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .finish(pod, step);
        if let Some((node, round)) = finished {
            tracing::info!(%node, evicted = round.evicted, failed = round.failed.len(), "eviction round finished");
            if !round.failed.is_empty() {
                tracing::debug!(%node, pods = ?round.failed, "pods that failed to be evicted this round");
            }
        }
    }

    pub(crate) fn in_round(&self, pod: &ObjectRef<CachedPod>) -> bool {
        self.rounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .includes(pod)
    }

    /// Records a failed attempt (counted once per round) and returns the wait before the next.
    pub(crate) fn failed(&self, key: &ObjectRef<CachedPod>, name: &str) -> Duration {
        let in_round = self.in_round(key);
        self.finish_round(key, Step::Failed);
        let earlier = self.retries.get(key).map_or(0, |retry| retry.failures);
        if counts_as_failed_in_round(in_round, earlier) {
            let (namespace, pod) = name.split_once('/').unwrap_or_default();
            self.metrics
                .failed
                .with_label_values(&[namespace, pod])
                .inc();
        }
        self.retries.failed_after(key, earlier).delay
    }
}
