//! What the taint-manager keeps of Pods, Nodes and Namespaces, and the index of pods by node.
//!
//! Caches keep only the fields the logic reads (DESIGN.md): a Pod its name, namespace, uid,
//! labels, creation and deletion timestamps, node name, tolerations and its PodScheduled and
//! DisruptionTarget conditions; a Node its name, labels, NoExecute taints and the status of its
//! Ready condition (the zone guard's input); a Namespace its name and labels.

use std::collections::HashMap;

use evictkit_api::conditions::POD_DISRUPTION_TARGET;
use evictkit_core::taints::no_execute_taints;
use evictkit_runtime::index::Grouped;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Namespace, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::reflector::ObjectRef;

/// The node condition the zone guard reads.
const NODE_READY: &str = "Ready";
/// The pod condition that says when the pod was bound to its node.
const POD_SCHEDULED: &str = "PodScheduled";

pub fn strip_pod(pod: &mut Pod) {
    let metadata = std::mem::take(&mut pod.metadata);
    pod.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        labels: metadata.labels,
        creation_timestamp: metadata.creation_timestamp,
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    };
    let spec = pod.spec.take().unwrap_or_default();
    pod.spec = Some(PodSpec {
        node_name: spec.node_name,
        tolerations: spec.tolerations,
        ..PodSpec::default()
    });
    let status = pod.status.take().unwrap_or_default();
    let conditions: Vec<_> = status
        .conditions
        .into_iter()
        .flatten()
        .filter(|c| c.type_ == POD_SCHEDULED || c.type_ == POD_DISRUPTION_TARGET)
        .collect();
    pod.status = Some(PodStatus {
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..PodStatus::default()
    });
}

/// When the pod was bound to its node: its PodScheduled condition, else its creation (a pod
/// created with spec.nodeName set never passes the scheduler).
pub fn bound_at(pod: &Pod) -> Timestamp {
    let scheduled = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == POD_SCHEDULED && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref());
    scheduled
        .or(pod.metadata.creation_timestamp.as_ref())
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
}

/// Whether the node's Ready condition is True; a node without one is not ready (upstream's
/// `ComputeZoneState`).
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == NODE_READY && c.status == "True")
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
        let taints: Vec<Taint> = no_execute_taints(
            node.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default(),
        )
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
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
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
pub type PodsByNode = Grouped<Pod>;

pub fn pods_by_node() -> PodsByNode {
    Grouped::new(
        |pod| {
            pod.spec
                .as_ref()?
                .node_name
                .clone()
                .filter(|n| !n.is_empty())
        },
        |_| true,
    )
}

/// The pods on `node`, to reconcile.
pub fn on_node(index: &PodsByNode, node: &str) -> Vec<ObjectRef<Pod>> {
    index
        .group(node)
        .iter()
        .map(|pod| ObjectRef::from_obj(pod.as_ref()))
        .collect()
}
