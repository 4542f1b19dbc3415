//! What the controller keeps of Pods and Nodes, and the index of opted-in pods by node.
//!
//! Caches keep only the fields the logic reads (DESIGN.md): a cached Pod holds its name,
//! namespace, uid, deletion timestamp, our annotation (and the mirror-pod marker), node name,
//! node selector, required node affinity, phase and our own condition; a Node its name and
//! labels.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use evictkit_api::keys::REQUIRED_DURING_EXECUTION;
use evictkit_core::affinity_eviction::{
    CONDITION_TYPE, ExecutionAffinity, MIRROR_POD_ANNOTATION, changed_label_keys,
};
use k8s_openapi::api::core::v1::{Affinity, Node, NodeAffinity, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::rounds::Rounds;

/// Strips a watched Pod down to what [`evictkit_core::affinity_eviction::judge`] and the
/// eviction read.
pub fn strip_pod(pod: &mut Pod) {
    let annotations: BTreeMap<String, String> = pod
        .metadata
        .annotations
        .take()
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| match key.as_str() {
            REQUIRED_DURING_EXECUTION => Some((key, value)),
            // Only its presence matters.
            MIRROR_POD_ANNOTATION => Some((key, String::new())),
            _ => None,
        })
        .collect();
    let metadata = std::mem::take(&mut pod.metadata);
    pod.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        deletion_timestamp: metadata.deletion_timestamp,
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    };
    let spec = pod.spec.take().unwrap_or_default();
    let required = spec
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution);
    pod.spec = Some(PodSpec {
        node_name: spec.node_name,
        node_selector: spec.node_selector,
        affinity: required.map(|required| Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(required),
                ..NodeAffinity::default()
            }),
            ..Affinity::default()
        }),
        ..PodSpec::default()
    });
    let status = pod.status.take().unwrap_or_default();
    let conditions: Vec<_> = status
        .conditions
        .into_iter()
        .flatten()
        .filter(|c| c.type_ == CONDITION_TYPE)
        .collect();
    pod.status = Some(PodStatus {
        phase: status.phase,
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..PodStatus::default()
    });
}

/// Strips a watched Node down to its name and labels.
pub fn strip_node(node: &mut Node) {
    let metadata = std::mem::take(&mut node.metadata);
    *node = Node {
        metadata: ObjectMeta {
            name: metadata.name,
            labels: metadata.labels,
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
}

/// Opted-in pods by node, with their parsed execution-time affinity, so a node's label change
/// costs work proportional to that node's pods, never to all pods.
#[derive(Default)]
pub struct PodsByNode {
    nodes: HashMap<String, HashMap<ObjectRef<Pod>, ExecutionAffinity>>,
    /// Built during a relist (watcher `Init` .. `InitDone`), then swapped in.
    relisting: Option<HashMap<String, HashMap<ObjectRef<Pod>, ExecutionAffinity>>>,
}

impl PodsByNode {
    /// Applies one event of the (stripped) pod watch; returns the pods that went away, whose
    /// per-pod state and metrics must go with them.
    pub fn apply(&mut self, event: &watcher::Event<Pod>) -> Vec<ObjectRef<Pod>> {
        match event {
            watcher::Event::Apply(pod) => {
                let gone = self.remove(pod);
                insert(&mut self.nodes, pod);
                gone.into_iter().collect()
            }
            watcher::Event::Delete(pod) => {
                self.remove(pod);
                vec![ObjectRef::from_obj(pod)]
            }
            watcher::Event::Init => {
                self.relisting = Some(HashMap::new());
                Vec::new()
            }
            watcher::Event::InitApply(pod) => {
                insert(self.relisting.get_or_insert_default(), pod);
                Vec::new()
            }
            watcher::Event::InitDone => {
                let fresh = self.relisting.take().unwrap_or_default();
                let kept: HashSet<&ObjectRef<Pod>> =
                    fresh.values().flat_map(HashMap::keys).collect();
                let gone = self
                    .nodes
                    .values()
                    .flat_map(HashMap::keys)
                    .filter(|pod| !kept.contains(pod))
                    .cloned()
                    .collect();
                self.nodes = fresh;
                gone
            }
        }
    }

    /// Opted-in pods on `node` whose affinity reads one of the `changed` label keys.
    pub fn affected(&self, node: &str, changed: &BTreeSet<String>) -> Vec<ObjectRef<Pod>> {
        self.nodes
            .get(node)
            .into_iter()
            .flatten()
            .filter(|(_, affinity)| affinity.reads_any(changed))
            .map(|(pod, _)| pod.clone())
            .collect()
    }

    /// Removes `pod` wherever it is; `Some` only if it was indexed and has stopped opting in.
    fn remove(&mut self, pod: &Pod) -> Option<ObjectRef<Pod>> {
        let key = ObjectRef::from_obj(pod);
        let node = node_name(pod)?;
        let pods = self.nodes.get_mut(node)?;
        pods.remove(&key)?;
        if pods.is_empty() {
            self.nodes.remove(node);
        }
        let still_opted_in = matches!(ExecutionAffinity::of(pod), Ok(Some(_)));
        (!still_opted_in).then_some(key)
    }
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn insert(nodes: &mut HashMap<String, HashMap<ObjectRef<Pod>, ExecutionAffinity>>, pod: &Pod) {
    // Malformed annotations read no label: only a change of the pod itself retries them.
    if let (Some(node), Ok(Some(affinity))) = (node_name(pod), ExecutionAffinity::of(pod)) {
        nodes
            .entry(node.to_owned())
            .or_default()
            .insert(ObjectRef::from_obj(pod), affinity);
    }
}

/// KEP-4328's "eviction round": a node label update re-checks the pods on that node, here only
/// those whose affinity reads a changed key, so irrelevant label changes cost no API call.
pub struct LabelRounds {
    previous: HashMap<String, BTreeMap<String, String>>,
    nodes: Store<Node>,
    rounds: Arc<Mutex<Rounds>>,
}

impl LabelRounds {
    pub fn new(nodes: Store<Node>, rounds: Arc<Mutex<Rounds>>) -> Self {
        Self {
            previous: HashMap::new(),
            nodes,
            rounds,
        }
    }

    /// The pods to re-check after one event of the (stripped) node watch.
    pub fn on_event(
        &mut self,
        event: &watcher::Event<Node>,
        pods: &PodsByNode,
    ) -> Vec<ObjectRef<Pod>> {
        match event {
            watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let labels = node.metadata.labels.clone().unwrap_or_default();
                let changed = changed_label_keys(self.previous.get(&name), Some(&labels));
                self.previous.insert(name.clone(), labels);
                if changed.is_empty() {
                    return Vec::new();
                }
                let affected = pods.affected(&name, &changed);
                if !affected.is_empty() {
                    self.rounds
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .start(&name, &affected);
                    tracing::info!(node = %name, changed = ?changed, pods = affected.len(), "node labels changed; re-checking the pods whose affinity reads them");
                }
                affected
            }
            watcher::Event::Delete(node) => {
                self.previous
                    .remove(node.metadata.name.as_deref().unwrap_or_default());
                Vec::new()
            }
            watcher::Event::InitDone => {
                let store = &self.nodes;
                self.previous
                    .retain(|name, _| store.get(&ObjectRef::new(name)).is_some());
                Vec::new()
            }
            watcher::Event::Init => Vec::new(),
        }
    }
}
