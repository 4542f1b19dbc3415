//! KEP-4328's eviction rounds: "with each occurrence of a node label update event, a new
//! eviction round is triggered ... After the eviction in the current round is completed, we will
//! print logs to record the pods that failed to be evicted". A round is the set of pods a label
//! change made us re-check on one node; it ends when each has been acted on once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use evictkit_core::affinity_eviction::changed_label_keys;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::cache::{CachedPod, PodsByNode, affected};

/// What one reconcile did for a pod of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Evicted, or the eviction requested (`--mode eviction-request`).
    Evicted,
    /// The attempt failed; it is retried with backoff outside the round.
    Failed,
    /// Nothing to do (matches, skipped, not opted in, waiting for its backoff).
    Settled,
}

/// The open rounds, one per node at most: a label change while a round is open adds its pods to
/// that round.
#[derive(Default)]
pub struct Rounds {
    nodes: HashMap<String, Round>,
    pods: HashMap<ObjectRef<CachedPod>, String>,
}

#[derive(Debug, Default, PartialEq)]
pub struct Round {
    pending: usize,
    pub evicted: usize,
    /// `namespace/name` of the pods whose eviction failed.
    pub failed: Vec<String>,
}

impl Rounds {
    pub fn start(&mut self, node: &str, pods: &[ObjectRef<CachedPod>]) {
        let round = self.nodes.entry(node.to_owned()).or_default();
        for pod in pods {
            if self.pods.insert(pod.clone(), node.to_owned()).is_none() {
                round.pending += 1;
            }
        }
    }

    /// Whether `pod` is waiting for its turn in an open round.
    pub fn includes(&self, pod: &ObjectRef<CachedPod>) -> bool {
        self.pods.contains_key(pod)
    }

    /// Records `step` for `pod` if it belongs to an open round; returns the node and the round
    /// once every pod of it is done.
    pub fn finish(&mut self, pod: &ObjectRef<CachedPod>, step: Step) -> Option<(String, Round)> {
        let node = self.pods.remove(pod)?;
        let round = self.nodes.get_mut(&node)?;
        round.pending = round.pending.saturating_sub(1);
        match step {
            Step::Evicted => round.evicted += 1,
            Step::Failed => round.failed.push(format!(
                "{}/{}",
                pod.namespace.as_deref().unwrap_or_default(),
                pod.name
            )),
            Step::Settled => {}
        }
        if round.pending > 0 {
            return None;
        }
        self.nodes.remove(&node).map(|round| (node, round))
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
    ) -> Vec<ObjectRef<CachedPod>> {
        match event {
            watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let labels = node.metadata.labels.clone().unwrap_or_default();
                let changed = changed_label_keys(self.previous.get(&name), Some(&labels));
                self.previous.insert(name.clone(), labels);
                if changed.is_empty() {
                    return Vec::new();
                }
                let affected = affected(pods, &name, &changed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_ends_when_each_pod_was_acted_on_once() {
        let pod = |name: &str| ObjectRef::<CachedPod>::new(name).within("team-b");
        let mut rounds = Rounds::default();
        rounds.start("node-1", &[pod("a"), pod("b")]);
        // A second label change while the round is open adds only new pods.
        rounds.start("node-1", &[pod("b"), pod("c")]);
        assert!(rounds.includes(&pod("b")) && !rounds.includes(&pod("elsewhere")));
        assert_eq!(
            rounds.finish(&pod("elsewhere"), Step::Evicted),
            None,
            "not in a round"
        );
        assert_eq!(rounds.finish(&pod("a"), Step::Evicted), None);
        assert_eq!(rounds.finish(&pod("b"), Step::Failed), None);
        assert!(!rounds.includes(&pod("b")), "its turn is over");
        assert_eq!(
            rounds.finish(&pod("b"), Step::Failed),
            None,
            "counted once per round"
        );
        let (node, round) = rounds
            .finish(&pod("c"), Step::Settled)
            .expect("round complete");
        assert_eq!(node, "node-1");
        assert_eq!(round.evicted, 1);
        assert_eq!(round.failed, vec!["team-b/b".to_owned()]);
        assert!(rounds.nodes.is_empty() && rounds.pods.is_empty());
    }
}
