//! What keeps a pod of a drain on its node, named so the operator knows whom to ask: the
//! PodDisruptionBudget and how many more healthy pods it needs (the explanation
//! `kubectl evictkit explain` gives), the responder or interceptor at work and its last
//! heartbeat, the node's unreachability (a pod there cannot finish terminating), or the
//! finalizers of a terminating pod.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::progress::{EVICTION_API, Progress};
use crate::objects::{node_conditions, node_taints};
use crate::pdb_policy::{self, Circumstances};
use crate::table::age;
use evictkit_api::keys::{
    EVICTION_INTERCEPTORS, IMPERATIVE_EVICTION_INTERCEPTOR, IMPERATIVE_EVICTOR_RESPONDER,
};

/// Taints the node lifecycle controller puts on a node whose kubelet stopped reporting.
const UNREACHABLE_TAINTS: [&str; 2] = [
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// The budget refuses the eviction; `message` says how many more healthy pods it needs.
    Budget { pdb: String, message: String },
    /// A responder (lifecycle.k8s.io) or interceptor (evictkit.io) acts first: the pod waits
    /// for it. Before the drain asks (`--dry-run`), the first the pod declares.
    Responder {
        name: String,
        heartbeat: Option<Timestamp>,
        message: Option<String>,
    },
    /// The node's kubelet does not report: a pod asked to go there stays Terminating.
    NodeUnreachable { node: String, reason: String },
    /// The pod is terminating and these finalizers hold its object.
    Finalizers { finalizers: Vec<String> },
}

/// Whether `node` is unreachable, and why: its Ready condition not True, or the node
/// lifecycle controller's unreachable or not-ready taint.
pub fn unreachable(node: &Node) -> Option<String> {
    let taint = node_taints(node)
        .iter()
        .find(|t| UNREACHABLE_TAINTS.contains(&t.key.as_str()));
    if let Some(taint) = taint {
        return Some(format!("taint {}:{}", taint.key, taint.effect));
    }
    let ready = node_conditions(node).find(|c| c.type_ == "Ready");
    match ready {
        Some(ready) if ready.status != "True" => Some(match ready.message.as_deref() {
            Some(message) if !message.is_empty() => format!("Ready={}: {message}", ready.status),
            _ => format!("Ready={}", ready.status),
        }),
        _ => None,
    }
}

/// The budget that would refuse evicting `pod` now, with what it needs (`pdbs`: those of the
/// pod's namespace).
pub fn budget(pod: &Pod, pdbs: &[PodDisruptionBudget], now: Timestamp) -> Option<Blocker> {
    let explanation = pdb_policy::explain(
        pod,
        pdbs,
        std::slice::from_ref(pod),
        None,
        &Circumstances::at(now),
    );
    if explanation.allowed() {
        return None;
    }
    let pdb = explanation.pdbs.first()?.name.clone();
    let message = explanation
        .advice
        .first()
        .cloned()
        .unwrap_or(explanation.prediction.message);
    Some(Blocker::Budget { pdb, message })
}

/// The responders (spec.evictionResponders, by priority) and interceptors (the annotation)
/// `pod` declares, that act before the imperative eviction.
fn declared_responder(pod: &Pod) -> Option<String> {
    let mut responders: Vec<_> = pod
        .spec
        .as_ref()
        .and_then(|s| s.eviction_responders.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.name != IMPERATIVE_EVICTOR_RESPONDER)
        .collect();
    responders.sort_by_key(|r| std::cmp::Reverse(r.priority));
    if let Some(first) = responders.first() {
        return Some(first.name.clone());
    }
    pod.metadata
        .annotations
        .as_ref()?
        .get(EVICTION_INTERCEPTORS)?
        .split(',')
        .map(str::trim)
        .find(|i| !i.is_empty() && *i != IMPERATIVE_EVICTION_INTERCEPTOR)
        .map(str::to_owned)
}

/// What the pod's node says, from the node itself (`None`: not read).
fn node_blocker(pod: &Pod, node: Option<&Node>) -> Option<Blocker> {
    let node = node?;
    unreachable(node)
        .map(|reason| Blocker::NodeUnreachable {
            node: node.metadata.name.clone().unwrap_or_default(),
            reason,
        })
        .filter(|_| {
            pod.spec.as_ref().and_then(|s| s.node_name.as_ref()) == node.metadata.name.as_ref()
        })
}

fn finalizers(pod: &Pod) -> Option<Blocker> {
    let finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
    (pod.metadata.deletion_timestamp.is_some() && !finalizers.is_empty())
        .then_some(Blocker::Finalizers { finalizers })
}

/// What keeps `pod` (`None`: gone) on its node while the drain waits, given where its
/// eviction stands: once terminating, its node's unreachability or its finalizers; before,
/// the responder or interceptor at work, else the budget that refuses, else the node.
pub fn live(
    pod: Option<&Pod>,
    progress: &Progress,
    node: Option<&Node>,
    pdbs: &[PodDisruptionBudget],
    now: Timestamp,
) -> Option<Blocker> {
    let pod = pod?;
    if progress.state.is_done() {
        return None;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return node_blocker(pod, node).or_else(|| finalizers(pod));
    }
    let own = [
        IMPERATIVE_EVICTOR_RESPONDER,
        IMPERATIVE_EVICTION_INTERCEPTOR,
        EVICTION_API,
    ];
    if let Some(actor) = progress
        .actor
        .as_ref()
        .filter(|a| !own.contains(&a.as_str()))
    {
        return Some(Blocker::Responder {
            name: actor.clone(),
            heartbeat: progress.heartbeat,
            message: progress.message.clone(),
        });
    }
    budget(pod, pdbs, now).or_else(|| node_blocker(pod, node))
}

/// What would keep `pod` before anything is asked (`--dry-run`): the budget that would
/// refuse, the node, finalizers of a pod already terminating, else the first responder or
/// interceptor it declares (it acts before the pod goes).
pub fn planned(
    pod: &Pod,
    node: Option<&Node>,
    pdbs: &[PodDisruptionBudget],
    now: Timestamp,
) -> Option<Blocker> {
    if pod.metadata.deletion_timestamp.is_some() {
        return node_blocker(pod, node).or_else(|| finalizers(pod));
    }
    budget(pod, pdbs, now)
        .or_else(|| node_blocker(pod, node))
        .or_else(|| {
            declared_responder(pod).map(|name| Blocker::Responder {
                name,
                heartbeat: None,
                message: None,
            })
        })
}

impl Blocker {
    /// The kind, as `-o json` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Budget { .. } => "PodDisruptionBudget",
            Self::Responder { .. } => "Responder",
            Self::NodeUnreachable { .. } => "NodeUnreachable",
            Self::Finalizers { .. } => "Finalizers",
        }
    }

    /// In words, ages counted to `now`.
    pub fn describe(&self, now: Timestamp) -> String {
        match self {
            // The PDB first, said once: the advice names it among its figures.
            Self::Budget { pdb, message } => {
                let name = format!("PDB {pdb}");
                let message = message.replace(&format!("{name}: "), "");
                format!("{name}: {message}")
            }
            Self::Responder {
                name, heartbeat, ..
            } => match heartbeat {
                Some(heartbeat) => {
                    format!("responder {name} (heartbeat {} ago)", age(now, *heartbeat))
                }
                None => format!("responder {name} (no heartbeat yet)"),
            },
            Self::NodeUnreachable { node, reason } => {
                format!("node {node} unreachable ({reason})")
            }
            Self::Finalizers { finalizers } => {
                format!("terminating, held by finalizers {}", finalizers.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::progress::State;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    fn pod(extra: serde_json::Value) -> Pod {
        let mut pod = json!({
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u", "labels": {"app": "web"}},
            "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        merge(&mut pod, extra);
        serde_json::from_value(pod).unwrap()
    }

    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(into), serde_json::Value::Object(from)) => {
                for (key, value) in from {
                    merge(into.entry(key).or_insert(serde_json::Value::Null), value);
                }
            }
            (into, from) => *into = from,
        }
    }

    fn pdb(healthy: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "generation": 1},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "currentHealthy": healthy, "desiredHealthy": 2,
                       "disruptionsAllowed": (healthy - 2).max(0), "expectedPods": healthy},
        }))
        .unwrap()
    }

    fn node(extra: serde_json::Value) -> Node {
        let mut node = json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        merge(&mut node, extra);
        serde_json::from_value(node).unwrap()
    }

    fn progress(state: State, actor: Option<&str>) -> Progress {
        Progress {
            state,
            actor: actor.map(str::to_owned),
            message: None,
            heartbeat: None,
        }
    }

    #[test]
    fn each_blocker_is_named_where_it_applies() {
        let ready = node(json!({}));
        let lost = node(
            json!({"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}}),
        );
        let silent = node(
            json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown", "message": "Kubelet stopped posting node status."}]}}),
        );
        let plain = pod(json!({}));
        let terminating = pod(
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["example.com/hold"]}}),
        );
        let waiting = progress(State::Waiting, None);
        let stopping = progress(State::Terminating, None);
        let evicted = progress(State::Evicted, None);
        let evictor = progress(State::InProgress, Some(IMPERATIVE_EVICTOR_RESPONDER));
        let backup = Progress {
            heartbeat: Some("2026-01-01T00:00:50Z".parse().unwrap()),
            ..progress(State::InProgress, Some("example.com/backup"))
        };
        let budget_of = |healthy| Blocker::Budget {
            pdb: "web".into(),
            message: format!(
                "needs 1 more healthy pod (PDB web: currentHealthy {healthy}, desiredHealthy 2), or a lower minAvailable / higher maxUnavailable"
            ),
        };
        // Name, the pod, its progress, its node, the PDB's currentHealthy, the blocker.
        type Case<'a> = (
            &'a str,
            Option<&'a Pod>,
            &'a Progress,
            &'a Node,
            u8,
            Option<Blocker>,
        );
        let cases: Vec<Case> = vec![
            ("gone", None, &waiting, &ready, 2, None),
            ("the budget allows", Some(&plain), &evictor, &ready, 3, None),
            (
                "the budget refuses",
                Some(&plain),
                &evictor,
                &ready,
                2,
                Some(budget_of(2)),
            ),
            (
                "a responder at work comes first",
                Some(&plain),
                &backup,
                &ready,
                2,
                Some(Blocker::Responder {
                    name: "example.com/backup".into(),
                    heartbeat: backup.heartbeat,
                    message: None,
                }),
            ),
            (
                "unreachable by taint",
                Some(&plain),
                &evictor,
                &lost,
                3,
                Some(Blocker::NodeUnreachable {
                    node: "n".into(),
                    reason: "taint node.kubernetes.io/unreachable:NoExecute".into(),
                }),
            ),
            (
                "unreachable by condition",
                Some(&plain),
                &waiting,
                &silent,
                3,
                Some(Blocker::NodeUnreachable {
                    node: "n".into(),
                    reason: "Ready=Unknown: Kubelet stopped posting node status.".into(),
                }),
            ),
            (
                "terminating with finalizers",
                Some(&terminating),
                &stopping,
                &ready,
                2,
                Some(Blocker::Finalizers {
                    finalizers: vec!["example.com/hold".into()],
                }),
            ),
            (
                "terminating on a lost node",
                Some(&terminating),
                &stopping,
                &lost,
                2,
                Some(Blocker::NodeUnreachable {
                    node: "n".into(),
                    reason: "taint node.kubernetes.io/unreachable:NoExecute".into(),
                }),
            ),
            ("evicted", Some(&plain), &evicted, &ready, 2, None),
        ];
        for (name, pod, progress, node, healthy, want) in cases {
            assert_eq!(
                live(pod, progress, Some(node), &[pdb(healthy.into())], now()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_dry_run_names_the_budget_then_the_node_then_the_first_responder() {
        let declared = pod(json!({"spec": {"evictionResponders": [
            {"name": "example.com/low", "priority": 200},
            {"name": "example.com/backup", "priority": 2000},
            {"name": IMPERATIVE_EVICTOR_RESPONDER, "priority": 100}]}}));
        let ready = node(json!({}));
        let backup = Blocker::Responder {
            name: "example.com/backup".into(),
            heartbeat: None,
            message: None,
        };
        assert_eq!(
            planned(&declared, Some(&ready), &[pdb(3)], now()),
            Some(backup.clone())
        );
        assert!(matches!(
            planned(&declared, Some(&ready), &[pdb(2)], now()),
            Some(Blocker::Budget { .. })
        ));
        let intercepted =
            pod(json!({"metadata": {"annotations": {EVICTION_INTERCEPTORS: "surge.example.com"}}}));
        assert_eq!(
            planned(&intercepted, None, &[], now()),
            Some(Blocker::Responder {
                name: "surge.example.com".into(),
                heartbeat: None,
                message: None
            })
        );
        assert_eq!(planned(&pod(json!({})), Some(&ready), &[], now()), None);
        assert_eq!(
            backup.describe(now()),
            "responder example.com/backup (no heartbeat yet)"
        );
        let beat = Blocker::Responder {
            name: "b".into(),
            heartbeat: Some("2026-01-01T00:00:50Z".parse().unwrap()),
            message: None,
        };
        assert_eq!(beat.describe(now()), "responder b (heartbeat 10s ago)");
        let Some(budget) = planned(&declared, Some(&ready), &[pdb(2)], now()) else {
            panic!("the budget blocks");
        };
        assert_eq!(
            budget.describe(now()),
            "PDB web: needs 1 more healthy pod (currentHealthy 2, desiredHealthy 2), or a lower minAvailable / higher maxUnavailable"
        );
        let other = Blocker::Budget {
            pdb: "web".into(),
            message: "two PDBs select this pod: web, api".into(),
        };
        assert_eq!(
            other.describe(now()),
            "PDB web: two PDBs select this pod: web, api"
        );
    }
}
