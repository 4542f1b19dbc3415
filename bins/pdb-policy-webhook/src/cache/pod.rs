//! What the webhook keeps of a Pod: exactly what the eviction decisions read.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use evictkit_core::eviction::{PodFacts, PodVolume};
use evictkit_runtime::caches::interned::Interner;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;

/// A watched Pod, projected as it is deserialized to what the decisions read
/// ([`PodFacts`]; the taint-manager's `CachedPod` is the model): its name, namespace, UID and
/// deletion timestamp, and, one shared copy per distinct value (a workload's pods hold one),
/// its labels, its phase with the types of its True conditions, and the volumes that may keep
/// data on the node.
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = Pod)]
#[serde(from = "Pod")]
pub struct CachedPod {
    /// Name, namespace, UID (an allow is held per UID), deletion timestamp and resourceVersion
    /// (the watcher resumes from the last object's: without it every watch ends in "no
    /// metadata.resourceVersion" and lists everything again). Labels are in `labels`.
    metadata: ObjectMeta,
    labels: Arc<BTreeMap<String, String>>,
    state: Arc<PodState>,
    volumes: Arc<[PodVolume<String>]>,
}

/// A pod's phase and the types of its conditions with status True: most pods of a cluster
/// share one (Running, all True).
#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct PodState {
    phase: Option<String>,
    true_conditions: Vec<String>,
}

static LABELS: LazyLock<Interner<BTreeMap<String, String>>> = LazyLock::new(Interner::default);
static STATES: LazyLock<Interner<PodState>> = LazyLock::new(Interner::default);
static VOLUMES: LazyLock<Interner<[PodVolume<String>]>> = LazyLock::new(Interner::default);

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        let volumes: Vec<PodVolume<String>> = pod.volumes().map(|v| v.owned()).collect();
        let status = pod.status.unwrap_or_default();
        let true_conditions = (status.conditions.into_iter().flatten())
            .filter(|c| c.status == "True")
            .map(|c| c.type_)
            .collect();
        let mut metadata = pod.metadata;
        CachedPod {
            labels: LABELS.get(metadata.labels.take().unwrap_or_default()),
            metadata: evictkit_runtime::caches::compact::identity(&mut metadata),
            state: STATES.get(PodState {
                phase: status.phase,
                true_conditions,
            }),
            volumes: VOLUMES.get(volumes),
        }
    }
}

impl CachedPod {
    /// The labels, as shared by the pods that carry the same: equal labels are one allocation.
    pub(crate) fn shared_labels(&self) -> &Arc<BTreeMap<String, String>> {
        &self.labels
    }
}

impl PodFacts for CachedPod {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    fn phase(&self) -> Option<&str> {
        self.state.phase.as_deref()
    }

    fn condition_true(&self, type_: &str) -> bool {
        self.state.true_conditions.iter().any(|t| t == type_)
    }

    fn volumes(&self) -> impl Iterator<Item = PodVolume<&str>> {
        self.volumes.iter().map(PodVolume::as_view)
    }
}

#[cfg(test)]
mod tests {
    use evictkit_core::eviction::{self, VolumeSource};
    use serde_json::json;

    use super::*;

    fn pod(name: &str, app: &str) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "labels": {"app": app},
                "annotations": {"unread": "x".repeat(1000)},
                "resourceVersion": "7",
                "deletionTimestamp": "2026-11-28T01:00:00Z",
            },
            "spec": {
                "containers": [{"name": "c", "image": "pause"}],
                "volumes": [
                    {"name": "token", "projected": {"sources": []}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "shm", "emptyDir": {"medium": "Memory"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}},
                ],
            },
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-28T00:00:05Z"},
                {"type": "example.com/Synced", "status": "False"},
            ]},
        }))
        .expect("a Pod deserializes into a CachedPod")
    }

    #[test]
    fn a_pod_is_projected_to_what_the_decisions_read() {
        let cached = pod("a", "web");
        assert_eq!(cached.name(), Some("a"));
        assert_eq!(cached.namespace(), Some("ns"));
        assert_eq!(cached.uid(), Some("uid-a"));
        assert!(cached.terminating());
        assert_eq!(cached.metadata.annotations, None);
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(cached.labels().get("app").map(String::as_str), Some("web"));
        assert_eq!(cached.phase(), Some("Running"));
        assert!(eviction::is_pod_ready(&cached));
        assert!(!cached.condition_true("example.com/Synced"));
        let volumes: Vec<_> = cached.volumes().collect();
        assert_eq!(
            volumes,
            [
                PodVolume {
                    name: "scratch",
                    source: VolumeSource::EmptyDir { in_memory: false }
                },
                PodVolume {
                    name: "shm",
                    source: VolumeSource::EmptyDir { in_memory: true }
                },
                PodVolume {
                    name: "data",
                    source: VolumeSource::PersistentVolumeClaim {
                        claim_name: "data-a"
                    }
                },
            ]
        );
    }

    #[test]
    fn pods_of_one_workload_share_their_labels_and_state() {
        let (a, b) = (pod("a", "shared"), pod("b", "shared"));
        assert!(Arc::ptr_eq(&a.labels, &b.labels));
        assert!(Arc::ptr_eq(&a.state, &b.state));
        // Each pod's claim is its own.
        assert!(!Arc::ptr_eq(&a.volumes, &b.volumes));
        let c = pod("c", "another");
        assert!(!Arc::ptr_eq(&a.labels, &c.labels));
    }
}
