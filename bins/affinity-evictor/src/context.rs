//! What a term of leadership hands each reconcile: the [`Settings`] the flags decide, the node
//! cache, and what it remembers per pod ([`PodStates`], the retries, the eviction rounds),
//! kept with the gauges and counters that report it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use evictkit_core::affinity_eviction::counts_as_failed_in_round;
use evictkit_runtime::clients::events::EventRecorder;
use evictkit_runtime::clients::eviction::EvictionClient;
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use evictkit_runtime::clients::eviction_request::requester::Requester;
use evictkit_runtime::control::backoff::{Backoff, PerObject};
use evictkit_runtime::serving::http::Readiness;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::runtime::controller;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::cache::CachedPod;
use crate::metrics::AffinityMetrics;
use crate::pod_state::PodStates;
use crate::rounds::{Rounds, Step};

/// What the flags decide, handed to each term of leadership.
pub(crate) struct Settings {
    pub(crate) evictions: EvictionClient,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: AffinityMetrics,
    pub(crate) enabled: bool,
    pub(crate) dry_run: bool,
    /// `--retry-backoff-base`, `--retry-backoff-max`.
    pub(crate) backoff: Backoff,
    pub(crate) namespace: Option<String>,
    /// `--eviction-request-api` as given: `auto` also withdraws what was asked through the CRD.
    pub(crate) eviction_request_api: ApiMode,
    /// `--mode eviction-request`: asks for and withdraws EvictionRequests; `None`: evicts.
    pub(crate) requester: Option<Requester>,
    pub(crate) controller: controller::Config,
    /// Held not ready while a term's caches make their first list; `None`: not held.
    pub(crate) listing: Option<Readiness>,
}

/// What reconcile needs, with the per-pod state of this term: rebuilt from the API each term,
/// a pod still violating is simply tried again.
pub(crate) struct Context {
    pub(crate) client: Client,
    pub(crate) settings: Arc<Settings>,
    pub(crate) nodes: Store<Node>,
    pub(crate) pods: Mutex<PodStates>,
    /// Failed eviction attempts per pod in a row, and when the next may be made.
    pub(crate) retries: PerObject<ObjectRef<CachedPod>>,
    pub(crate) rounds: Arc<Mutex<Rounds>>,
}

impl std::ops::Deref for Context {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl Context {
    fn states(&self) -> MutexGuard<'_, PodStates> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pod matches again, is leaving, is gone or no longer opted in: stop retrying, stop
    /// counting it as violating.
    pub(crate) fn forget(&self, pod: &ObjectRef<CachedPod>) {
        self.retries.forget(pod);
        let mut states = self.states();
        let violating = states.forget(pod);
        self.metrics.violating.set(violating as i64);
    }

    /// The eviction request for `pod` is over: withdrawn (it matches again or opted out) or
    /// carried out (it is gone). Not when it is merely terminating: a reconcile may still see it
    /// before its deletion, and joining the request again must not count a second eviction.
    pub(crate) fn request_over(&self, pod: &ObjectRef<CachedPod>) {
        self.states().request_over(pod);
    }

    /// `pod` violates its affinity (counted in the violating pods' gauge).
    pub(crate) fn violating(&self, pod: &ObjectRef<CachedPod>) {
        let mut states = self.states();
        let violating = states.violating(pod);
        self.metrics.violating.set(violating as i64);
    }

    /// `pod` is left alone because its DaemonSet would recreate it; whether that is new
    /// (reported once per violation).
    pub(crate) fn left_alone(&self, pod: &ObjectRef<CachedPod>) -> bool {
        self.states().left_alone(pod)
    }

    /// Whether this is the first request for `pod` by this replica (counted once).
    pub(crate) fn mark_requested(&self, pod: &ObjectRef<CachedPod>) -> bool {
        self.states().mark_requested(pod)
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
