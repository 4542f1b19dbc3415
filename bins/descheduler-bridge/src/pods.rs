//! The webhook's watch cache of pods, in every namespace: a review of a pod it holds makes no
//! API call to decide (docs/operate/descheduler-bridge.md, what a review reads). A descheduler
//! cycle evicts hundreds of pods at once; one GET per review waited on an apiserver busy with
//! that burst, and past the webhook timeout the evictions failed.
//!
//! Only pods that may opt in (`request-evict-only`, or naming eviction interceptors) keep what
//! the decision and the evacuation read; every other pod keeps its identity and phase alone and
//! is read from the API when evicted, as is a pod not listed yet.

use std::sync::Arc;

use evictkit_api::keys::{
    DESCHEDULER_BRIDGE_EVACUATION_ANSWERED, DESCHEDULER_BRIDGE_EVACUATION_REFRESHED,
    DESCHEDULER_BRIDGE_EVACUATION_STARTED, DESCHEDULER_EVICTION_IN_PROGRESS,
    DESCHEDULER_REQUEST_EVICT_ONLY, EVICTION_INTERCEPTORS,
};
use evictkit_runtime::caches::watch::Watches;
use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde::Deserialize;

/// The annotations the decision ([`evictkit_core::descheduler_bridge::admit`]) and the
/// bridge's marks read.
const READ: &[&str] = &[
    DESCHEDULER_REQUEST_EVICT_ONLY,
    EVICTION_INTERCEPTORS,
    DESCHEDULER_EVICTION_IN_PROGRESS,
    DESCHEDULER_BRIDGE_EVACUATION_STARTED,
    DESCHEDULER_BRIDGE_EVACUATION_ANSWERED,
    DESCHEDULER_BRIDGE_EVACUATION_REFRESHED,
];

/// A pod as a review reads it.
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = Pod)]
#[serde(from = "Pod")]
pub struct ReviewedPod {
    /// Identity and deletion timestamp; for a [`Self::candidate`] also its labels (copied onto
    /// the EvictionRequest it gets) and the annotations of [`READ`].
    pub metadata: ObjectMeta,
    /// A terminal pod's eviction passes, even of a pod another requester asks to evict.
    pub phase: Option<String>,
    /// Carries `request-evict-only` or eviction interceptors: the cache can answer for it.
    pub candidate: bool,
}

impl From<Pod> for ReviewedPod {
    fn from(pod: Pod) -> Self {
        let mut source = pod.metadata;
        let mut metadata = evictkit_runtime::caches::compact::identity(&mut source);
        let annotations: std::collections::BTreeMap<_, _> = source
            .annotations
            .unwrap_or_default()
            .into_iter()
            .filter(|(key, _)| READ.contains(&key.as_str()))
            .collect();
        let candidate = annotations.contains_key(DESCHEDULER_REQUEST_EVICT_ONLY)
            || annotations.contains_key(EVICTION_INTERCEPTORS);
        let phase = pod.status.and_then(|status| status.phase);
        if candidate {
            metadata.labels = source.labels;
            metadata.annotations = Some(annotations);
        }
        Self {
            metadata,
            phase,
            candidate,
        }
    }
}

/// The cache.
pub struct Pods {
    store: Store<ReviewedPod>,
}

impl Pods {
    /// Starts the watch of pods in every namespace (the webhook answers evictions anywhere),
    /// one of `watches`: the cache serves its last state while the watch backs off an error.
    pub fn start(watches: &Watches) -> Arc<Self> {
        let watch = watches.all::<ReviewedPod>(watcher::Config::default().any_semantic());
        let store = watch.store();
        tokio::spawn(watch.events().for_each(|_| future::ready(())));
        Arc::new(Self { store })
    }

    /// `namespace/name` as cached, if it is a [`ReviewedPod::candidate`].
    pub fn candidate(&self, namespace: &str, name: &str) -> Option<Arc<ReviewedPod>> {
        self.store
            .get(&ObjectRef::new(name).within(namespace))
            .filter(|pod| pod.candidate)
    }

    /// A cache that listed `pods`.
    #[cfg(test)]
    pub fn listed(pods: Vec<Pod>) -> Arc<Self> {
        use kube::runtime::watcher::Event;
        let mut writer = kube::runtime::reflector::store::Writer::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Init);
        for pod in pods {
            writer.apply_watcher_event(&Event::InitApply(pod.into()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        Arc::new(Self { store })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_candidate_keeps_what_the_review_reads_and_any_other_pod_its_identity_and_phase() {
        let pod = |annotations: serde_json::Value| -> ReviewedPod {
            serde_json::from_value(json!({
                "metadata": {
                    "name": "web-0", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
                    "labels": {"app": "web"},
                    "annotations": annotations,
                },
                "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]},
                "status": {"phase": "Running"},
            }))
            .expect("a Pod deserializes into a ReviewedPod")
        };
        let opted_in = pod(json!({DESCHEDULER_REQUEST_EVICT_ONLY: "", "other": "x"}));
        assert!(opted_in.candidate);
        assert_eq!(opted_in.phase.as_deref(), Some("Running"));
        assert_eq!(
            opted_in.metadata.labels,
            Some([("app".to_owned(), "web".to_owned())].into())
        );
        assert_eq!(
            opted_in.metadata.annotations,
            Some([(DESCHEDULER_REQUEST_EVICT_ONLY.to_owned(), String::new())].into())
        );
        assert!(pod(json!({EVICTION_INTERCEPTORS: "a.example.com"})).candidate);
        let other = pod(json!({"other": "x"}));
        assert!(!other.candidate);
        assert_eq!(
            (other.metadata, other.phase),
            (
                ObjectMeta {
                    name: Some("web-0".into()),
                    namespace: Some("ns".into()),
                    uid: Some("uid-1".into()),
                    resource_version: Some("7".into()),
                    ..ObjectMeta::default()
                },
                Some("Running".to_owned())
            )
        );
    }
}
