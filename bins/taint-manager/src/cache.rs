//! What the taint-manager keeps of Pods, Nodes and Namespaces, and the index of pods by node.
//!
//! Caches keep only the fields the logic reads (docs/architecture.md): a Pod is cached as a
//! [`CachedPod`], projected as it is deserialized; a Node keeps its name, labels, NoExecute
//! taints and the status of its Ready condition (the zone guard's input); a Namespace its name
//! and labels.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use evictkit_api::conditions::{
    POD_DISRUPTION_TARGET, REASON_DELETION_BY_TAINT_MANAGER, STATUS_TRUE,
};
use evictkit_core::objects::{node_conditions, node_taints, pod_conditions};
use evictkit_core::taints::no_execute_taints;
use evictkit_runtime::caches::index::Grouped;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Namespace, Node, NodeCondition, NodeSpec, NodeStatus, Pod, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::Deserialize;

use evictkit_runtime::caches::interned::Interner;

/// The node condition the zone guard reads.
const NODE_READY: &str = "Ready";
/// The pod condition that says when the pod was bound to its node.
const POD_SCHEDULED: &str = "PodScheduled";

/// A watched Pod, projected as it is deserialized to what the taint-manager reads (docs/architecture.md,
/// compact caches; the affinity-evictor's `CachedPod` is the model): its name, namespace, UID
/// and deletion timestamp, node, labels and tolerations (one shared copy per distinct set: a
/// workload's pods hold one), when it was bound, and whether upstream's DisruptionTarget=True
/// condition before a delete is on it already.
#[derive(Clone, Debug, Deserialize, Resource)]
#[resource(inherit = Pod)]
#[serde(from = "Pod")]
pub struct CachedPod {
    /// Name, namespace, UID (the precondition of every write), deletion timestamp and
    /// resourceVersion (the watcher resumes from the last object's: without it every watch
    /// ends in "no metadata.resourceVersion" and lists everything again).
    pub metadata: ObjectMeta,
    pub node_name: String,
    /// Policies' podSelectors read them.
    pub labels: Arc<BTreeMap<String, String>>,
    pub tolerations: Arc<Tolerations>,
    /// When the pod was bound to its node (see [`bound_at`]).
    pub bound_at: Timestamp,
    /// DisruptionTarget=True with reason `DeletionByTaintManager` (upstream's, before the
    /// delete): a retried delete does not set it again.
    pub marked_for_deletion: bool,
}

static LABELS: LazyLock<Interner<BTreeMap<String, String>>> = LazyLock::new(Interner::default);
static TOLERATIONS: LazyLock<Interner<Tolerations>> = LazyLock::new(Interner::default);

/// A pod's tolerations, compared and hashed field by field to be shared (k8s-openapi's
/// `Toleration` is neither `Eq` nor `Hash`).
#[derive(Debug, Default, PartialEq)]
pub struct Tolerations(pub Vec<Toleration>);

// No floating-point field: equality is an equivalence.
impl Eq for Tolerations {}

impl std::hash::Hash for Tolerations {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for t in &self.0 {
            (
                &t.key,
                &t.operator,
                &t.value,
                &t.effect,
                t.toleration_seconds,
            )
                .hash(state);
        }
    }
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        let bound_at = bound_at(&pod);
        let marked_for_deletion = pod_conditions(&pod).any(|c| {
            c.type_ == POD_DISRUPTION_TARGET
                && c.status == STATUS_TRUE
                && c.reason.as_deref() == Some(REASON_DELETION_BY_TAINT_MANAGER)
        });
        let spec = pod.spec.unwrap_or_default();
        let mut metadata = pod.metadata;
        CachedPod {
            labels: LABELS.get(metadata.labels.take().unwrap_or_default()),
            metadata: evictkit_runtime::caches::compact::identity(&mut metadata),
            node_name: spec.node_name.unwrap_or_default(),
            tolerations: TOLERATIONS.get(Tolerations(spec.tolerations.unwrap_or_default())),
            bound_at,
            marked_for_deletion,
        }
    }
}

impl CachedPod {
    pub fn deletion_timestamp(&self) -> Option<Timestamp> {
        self.metadata.deletion_timestamp.as_ref().map(|t| t.0)
    }

    /// A pod that is gone, known by its key only (the subject of its last Event).
    pub fn gone(key: &ObjectRef<CachedPod>) -> Self {
        CachedPod {
            metadata: ObjectMeta {
                name: Some(key.name.clone()),
                namespace: key.namespace.clone(),
                ..ObjectMeta::default()
            },
            node_name: String::new(),
            labels: Arc::default(),
            tolerations: Arc::default(),
            bound_at: Timestamp::UNIX_EPOCH,
            marked_for_deletion: false,
        }
    }
}

/// When the pod was bound to its node: its PodScheduled condition, else its creation (a pod
/// created with spec.nodeName set never passes the scheduler).
fn bound_at(pod: &Pod) -> Timestamp {
    let scheduled = pod_conditions(pod)
        .find(|c| c.type_ == POD_SCHEDULED && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref());
    scheduled
        .or(pod.metadata.creation_timestamp.as_ref())
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
}

/// Whether the node's Ready condition is True; a node without one is not ready (upstream's
/// `ComputeZoneState`).
pub fn node_ready(node: &Node) -> bool {
    node_conditions(node).any(|c| c.type_ == NODE_READY && c.status == "True")
}

/// The (stripped) node's NoExecute taints, each with a `timeAdded`.
pub fn taints_of(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// `namespace/name`, as logs and Events name the pod.
pub fn name_of(pod: &CachedPod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

pub fn strip_namespace(namespace: &mut Namespace) {
    let metadata = std::mem::take(&mut namespace.metadata);
    *namespace = Namespace {
        metadata: ObjectMeta {
            name: metadata.name,
            labels: metadata.labels,
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
}

/// When this process first saw each NoExecute taint that carries no `timeAdded`, per node.
/// Such a taint's window starts then, so after a restart it starts anew, as upstream's does;
/// taints with `timeAdded` (the node lifecycle controller sets it) keep their window.
#[derive(Default)]
pub struct FirstSeen {
    nodes: HashMap<String, Vec<(Taint, Timestamp)>>,
}

impl FirstSeen {
    /// Strips a watched Node to name, labels, NoExecute taints (each with a `timeAdded`) and the
    /// status of its Ready condition (no heartbeat times: a heartbeat changes nothing here).
    pub fn strip_node(&mut self, node: &mut Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let seen = self.nodes.entry(name).or_default();
        let now = Timestamp::now();
        let taints: Vec<Taint> = no_execute_taints(node_taints(node))
            .map(|taint| {
                if taint.time_added.is_some() {
                    return taint.clone();
                }
                let same = |t: &Taint| t.key == taint.key && t.value == taint.value;
                let first = seen
                    .iter()
                    .find(|(t, _)| same(t))
                    .map_or(now, |(_, at)| *at);
                Taint {
                    time_added: Some(Time(first)),
                    ..taint.clone()
                }
            })
            .collect();
        *seen = taints
            .iter()
            .filter_map(|t| Some((t.clone(), t.time_added.as_ref()?.0)))
            .collect();
        let ready = node_conditions(node)
            .find(|c| c.type_ == NODE_READY)
            .map(|c| NodeCondition {
                type_: NODE_READY.to_owned(),
                status: c.status.clone(),
                ..NodeCondition::default()
            });
        let metadata = std::mem::take(&mut node.metadata);
        *node = Node {
            metadata: ObjectMeta {
                name: metadata.name,
                labels: metadata.labels,
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: (!taints.is_empty()).then_some(taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: ready.map(|c| vec![c]),
                ..NodeStatus::default()
            }),
        };
    }

    pub fn forget(&mut self, node: &str) {
        self.nodes.remove(node);
    }
}

/// Bound pods by node (the taints of a node concern the pods on it).
pub type PodsByNode = Grouped<CachedPod>;

pub fn pods_by_node() -> PodsByNode {
    Grouped::new(
        |pod| Some(pod.node_name.clone()).filter(|n| !n.is_empty()),
        |_| true,
    )
}

/// The pods on `node`, to reconcile.
pub fn on_node(index: &PodsByNode, node: &str) -> Vec<ObjectRef<CachedPod>> {
    index
        .group(node)
        .iter()
        .map(|pod| ObjectRef::from_obj(pod.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, app: &str, reason: &str) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "labels": {"app": app},
                "annotations": {"unread": "x".repeat(1000)},
                "creationTimestamp": "2026-11-27T10:00:00Z",
                "resourceVersion": "7",
            },
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "c", "image": "pause"}],
                "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": 300}],
            },
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-27T10:00:05Z"},
                {"type": "DisruptionTarget", "status": "True", "reason": reason},
            ]},
        }))
        .expect("a Pod deserializes into a CachedPod")
    }

    #[test]
    fn a_pod_is_projected_to_what_the_logic_reads() {
        let cached = pod("a", "web", REASON_DELETION_BY_TAINT_MANAGER);
        assert_eq!(cached.metadata.name.as_deref(), Some("a"));
        assert_eq!(cached.metadata.uid.as_deref(), Some("uid-a"));
        assert_eq!(cached.metadata.annotations, None);
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(cached.node_name, "node-1");
        assert_eq!(cached.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(cached.tolerations.0[0].toleration_seconds, Some(300));
        // Bound when scheduled, not when created.
        assert_eq!(cached.bound_at.to_string(), "2026-11-27T10:00:05Z");
        assert!(cached.marked_for_deletion);
        let other = pod("b", "web", "PreemptionByScheduler");
        assert!(!other.marked_for_deletion);
    }

    #[test]
    fn pods_of_one_workload_share_their_labels_and_tolerations() {
        let (a, b) = (pod("a", "shared", "x"), pod("b", "shared", "x"));
        assert!(Arc::ptr_eq(&a.labels, &b.labels));
        assert!(Arc::ptr_eq(&a.tolerations, &b.tolerations));
        let c = pod("c", "another", "x");
        assert!(!Arc::ptr_eq(&a.labels, &c.labels));
    }
}
