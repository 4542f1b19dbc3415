//! What the controller keeps of a Pod: a [`CachedPod`], projected as it is deserialized
//! (docs/architecture.md, compact caches; the affinity-evictor's `CachedPod` is the model). The cache only
//! says which request a pod's change concerns and which pods the sweep looks at; every plan is
//! made from fresh reads (`controller::reconcile`).

use evictkit_core::descheduler_bridge::Marks;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;

/// A watched Pod: its identity and whether it carries the bridge's marks.
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = Pod)]
#[serde(from = "Pod")]
pub struct CachedPod {
    /// Name, namespace, UID (the name of the pod's request, and the precondition of the
    /// sweep's patch), and resourceVersion (the sweep's other precondition; the watcher resumes
    /// from the last object's).
    pub metadata: ObjectMeta,
    /// The bridge's evacuation marks are on the pod ([`Marks::ours`]): the sweep clears them
    /// once the pod's request is gone.
    pub marked: bool,
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        let marked = Marks::of(&pod.metadata).ours;
        let mut metadata = pod.metadata;
        CachedPod {
            metadata: evictkit_runtime::caches::compact::identity(&mut metadata),
            marked,
        }
    }
}

#[cfg(test)]
mod tests {
    use evictkit_api::keys::{
        DESCHEDULER_BRIDGE_EVACUATION_STARTED, DESCHEDULER_EVICTION_IN_PROGRESS,
        DESCHEDULER_REQUEST_EVICT_ONLY,
    };
    use serde_json::json;

    use super::*;

    fn cached(annotations: serde_json::Value) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-0", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
                "labels": {"app": "web"}, "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs"}],
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]},
            "status": {"phase": "Running"},
        }))
        .expect("a Pod deserializes into a CachedPod")
    }

    #[test]
    fn a_cached_pod_keeps_its_identity_and_whether_the_bridge_marked_it() {
        let pod = cached(json!({
            DESCHEDULER_EVICTION_IN_PROGRESS: "uid-1",
            DESCHEDULER_BRIDGE_EVACUATION_STARTED: "2026-11-28T10:00:00Z",
        }));
        assert_eq!(
            pod.metadata,
            ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            }
        );
        assert!(pod.marked);
        // Marked by someone else (the descheduler's own protocol), or only asked for: not ours.
        assert!(!cached(json!({DESCHEDULER_EVICTION_IN_PROGRESS: "x"})).marked);
        assert!(!cached(json!({DESCHEDULER_REQUEST_EVICT_ONLY: ""})).marked);
    }
}
